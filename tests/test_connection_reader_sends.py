"""A send stream with ``reader_sends`` (a Streamable HTTP POST): the connection's reader sends the
answers of what it read itself, not the writer task, and never stops reading for long because of it."""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import trio
import trio.testing
from trio.testing import MockClock

from acp_trio import Connection, Route


class RoundTripSendStream(trio.abc.SendStream):
    """A send stream whose ``send_all`` takes a round trip, as a POST does; ``gate``, when set to an
    event, holds every send until the event is set (a peer that answers only later)."""

    reader_sends = True

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.senders: list[str] = []  # the name of the task of each send_all
        self.gate: trio.Event | None = None
        self.sending = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.senders.append(trio.lowlevel.current_task().name)
        self.sending += 1
        assert self.sending == 1, "two sends at once"
        try:
            await trio.lowlevel.checkpoint()
            if self.gate is not None:
                await self.gate.wait()
            self.writes.append(bytes(data))
        finally:
            self.sending -= 1

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()

    def messages(self) -> list[Any]:
        return [orjson.loads(line) for line in b"".join(self.writes).splitlines()]


async def ask(params: Any) -> str:
    return "answered"


@asynccontextmanager
async def connected(
    *routes: Route,
) -> AsyncIterator[tuple[Connection, RoundTripSendStream, trio.testing.MemorySendStream]]:
    out = RoundTripSendStream()
    peer_send, our_receive = trio.testing.memory_stream_one_way_pair()
    table = {route.method: route for route in (Route("test/ask", "request", ask), *routes)}
    async with Connection(out, our_receive, table, name="conn") as conn:
        yield conn, out, peer_send


def request(request_id: int, method: str = "test/ask") -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {}}) + b"\n"


def answer(request_id: int) -> Any:
    return {"jsonrpc": "2.0", "id": request_id, "result": "answered"}


async def until(condition: Any) -> None:
    with trio.fail_after(5):
        while not condition():
            await trio.sleep(0.001)


async def test_the_reader_sends_the_answers_of_its_read_itself(autojump_clock: MockClock) -> None:
    async with connected() as (_conn, out, peer):
        await peer.send_all(request(1) + request(2))
        await until(lambda: len(out.writes) == 1)
        await peer.send_all(request(3))
        await until(lambda: len(out.writes) == 2)
        assert out.messages() == [answer(1), answer(2), answer(3)]  # one send per read
        assert out.senders == ["conn: reader", "conn: reader"]  # not the writer task


async def test_a_send_held_until_more_input_is_read_lets_another_task_read(autojump_clock: MockClock) -> None:
    # The peer answers the reader's send only once this side has read what it sent next (its
    # backpressure): the reading goes on in another pool task after a moment, instead of never.
    out_gate = trio.Event()
    released: list[Any] = []

    async def release(params: Any) -> None:
        released.append(params)
        out_gate.set()

    async with connected(Route("test/release", "notification", release)) as (_conn, out, peer):
        out.gate = out_gate
        await peer.send_all(request(1))
        await until(lambda: out.sending == 1)
        await peer.send_all(orjson.dumps({"jsonrpc": "2.0", "method": "test/release", "params": {"n": 1}}) + b"\n")
        await until(lambda: len(out.writes) == 1)
        assert released == [{"n": 1}]
        out.gate = None
        await peer.send_all(request(2))  # and the connection goes on, read by the task that took over
        await until(lambda: len(out.writes) == 2)
        assert out.messages() == [answer(1), answer(2)]


async def test_output_queued_while_the_reader_sends_goes_after_it_in_order(autojump_clock: MockClock) -> None:
    async with connected() as (conn, out, peer):
        gate = out.gate = trio.Event()
        await peer.send_all(request(1))
        await until(lambda: out.sending == 1)
        await conn.notify("test/later", {"k": 1})  # the writer's, once the reader's send is done
        await conn.notify("test/later", {"k": 2})
        out.gate = None
        gate.set()
        await until(lambda: len(out.messages()) == 3)
        later = [{"jsonrpc": "2.0", "method": "test/later", "params": {"k": k}} for k in (1, 2)]
        assert out.messages() == [answer(1), *later]


async def test_closing_while_the_reader_sends_ends_the_connection(autojump_clock: MockClock) -> None:
    with trio.fail_after(10):
        async with connected() as (conn, out, peer):
            out.gate = trio.Event()  # never set: the send hangs
            await peer.send_all(request(1))
            await until(lambda: out.sending == 1)
            await conn.aclose()
            assert conn.closed
    assert out.writes == []


# -- Connection.deliver_lines: a transport's task hands what it read to the connection directly ------


def notification(method: str, params: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params}) + b"\n"


class HandOn:
    """A transport's ``hand_on``: counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


async def test_delivered_lines_are_handled_and_answered_in_the_calling_task(autojump_clock: MockClock) -> None:
    async with connected() as (conn, out, _peer):
        await trio.testing.wait_all_tasks_blocked()  # the reader waits for input
        hand_on = HandOn()
        assert await conn.deliver_lines(request(1) + request(2), hand_on) == 1
        assert out.messages() == [answer(1), answer(2)]  # sent before deliver_lines returned, in one send
        assert out.senders == [trio.lowlevel.current_task().name]
        assert hand_on.calls == 0


async def test_deliver_lines_takes_nothing_when_it_cannot_handle_it_at_once(autojump_clock: MockClock) -> None:
    async with connected() as (conn, out, peer):
        await trio.testing.wait_all_tasks_blocked()  # the reader waits for input
        assert await conn.deliver_lines(request(1) * 65, HandOn()) == 0  # more than one slice
        await peer.send_all(request(2))  # the caller writes it to the receive stream instead
        await until(lambda: len(out.writes) == 1)
        await conn.aclose()
        assert await conn.deliver_lines(request(3), HandOn()) == 0
    assert out.messages() == [answer(2)]


async def test_a_delivered_request_that_waits_goes_on_in_the_calling_task_and_the_rest_is_handled(
    autojump_clock: MockClock,
) -> None:
    release = trio.Event()

    async def wait(params: Any) -> str:
        await release.wait()
        return "waited"

    async def on_release(params: Any) -> None:
        release.set()

    routes = (Route("test/wait", "request", wait), Route("test/release", "notification", on_release))
    async with connected(*routes) as (conn, out, peer):
        await trio.testing.wait_all_tasks_blocked()  # the reader waits for input
        hand_on = HandOn()
        # the notification after the request that waits is handled at once, not left behind it
        with trio.fail_after(5):
            taken = await conn.deliver_lines(request(1, "test/wait") + notification("test/release", {}), hand_on)
        assert taken == 2 and hand_on.calls == 1  # returned once the request was answered
        await until(lambda: out.messages() == [{"jsonrpc": "2.0", "id": 1, "result": "waited"}])  # (by the writer)
        await peer.send_all(request(2))  # the pool's reader reads on
        await until(lambda: len(out.messages()) == 2)


async def test_a_delivered_request_that_waits_can_be_cancelled_by_the_peer(autojump_clock: MockClock) -> None:
    async def wait(params: Any) -> str:
        await trio.sleep_forever()
        raise AssertionError("not reached")

    async with connected(Route("test/wait", "request", wait)) as (conn, out, peer):
        await trio.testing.wait_all_tasks_blocked()  # the reader waits for input
        hand_on = HandOn()
        async with trio.open_nursery() as nursery:
            taken: list[int] = []

            async def deliver() -> None:
                with trio.fail_after(5):
                    taken.append(await conn.deliver_lines(request(1, "test/wait"), hand_on))

            nursery.start_soon(deliver)
            await until(lambda: hand_on.calls == 1)
            await peer.send_all(notification("$/cancel_request", {"requestId": 1}))
        assert taken == [2]
        await until(lambda: len(out.writes) == 1)
        [cancelled] = out.messages()
        assert cancelled["id"] == 1 and cancelled["error"]["code"] == -32800


async def test_a_delivered_answer_whose_send_is_held_hands_the_reading_on(autojump_clock: MockClock) -> None:
    async with connected() as (conn, out, _peer):
        await trio.testing.wait_all_tasks_blocked()  # the reader waits for input
        gate = out.gate = trio.Event()
        hand_on = HandOn()
        async with trio.open_nursery() as nursery:
            taken: list[int] = []

            async def deliver() -> None:
                with trio.fail_after(5):
                    taken.append(await conn.deliver_lines(request(1), hand_on))

            nursery.start_soon(deliver)
            await until(lambda: hand_on.calls == 1)  # after _READER_SEND_PATIENCE, by the writer
            gate.set()
        assert taken == [2]
        assert out.messages() == [answer(1)]


TRANSPORT_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("transport_var", default="unset")


async def test_delivered_lines_start_handlers_in_the_connections_context(autojump_clock: MockClock) -> None:
    seen: list[str] = []
    noted = trio.Event()

    async def note(params: Any) -> None:
        seen.append(TRANSPORT_VAR.get())
        noted.set()

    async def ask_var(params: Any) -> str:
        return TRANSPORT_VAR.get()

    routes = (Route("test/note", "notification", note), Route("test/var", "request", ask_var))
    async with connected(*routes) as (conn, out, _peer):
        await trio.testing.wait_all_tasks_blocked()
        TRANSPORT_VAR.set("the transport's")  # in the task that delivers
        taken = await conn.deliver_lines(notification("test/note", {}) + request(1, "test/var"), HandOn())
        assert taken == 1
        with trio.fail_after(5):
            await noted.wait()
    assert seen == ["unset"]
    assert out.messages() == [{"jsonrpc": "2.0", "id": 1, "result": "unset"}]

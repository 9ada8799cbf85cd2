"""The trio Connection: error answers, batches, cancellation both ways, closing, coalesced writes,
ordering and the tap, driven from the raw other end of an in-memory stream."""

from __future__ import annotations

import contextvars
import logging
import random
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio
import trio.testing
from _slices import SliceWatch
from trio.testing import MockClock

from acp_schema import v1
from acp_trio import Connection, ConnectionClosed, DecodeError, RequestError, RequestTimeout, Route
from acp_trio._connection import _HANDOFF
from acp_trio._core import LineFramer, OversizedMessage, encode_notification

PING = "test/ping"


async def pong(params: Any) -> str:
    return "pong"


class RawPeer:
    """The other end of the connection: writes raw lines and reads framed JSON messages."""

    def __init__(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream) -> None:
        self.send_stream = send
        self.receive_stream = receive
        self._framer = LineFramer()
        self._lines: deque[bytes] = deque()
        self._pings = 0
        self.raw_in = bytearray()
        self.raw_out = bytearray()

    async def send_raw(self, data: bytes) -> None:
        self.raw_out += data
        await self.send_stream.send_all(data)

    async def send(self, *messages: Any) -> None:
        """Send the messages in one write, one line each."""
        await self.send_raw(b"".join(orjson.dumps(m) + b"\n" for m in messages))

    async def request(self, id: Any, method: str, params: Any = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(msg)

    async def notify(self, method: str, params: Any = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(msg)

    async def cancel(self, request_id: Any) -> None:
        await self.notify("$/cancel_request", {"requestId": request_id})

    async def _fill(self) -> bool:
        data = await self.receive_stream.receive_some(1 << 16)
        if not data:
            return False
        self.raw_in += data
        for item in self._framer.feed(data):
            assert not isinstance(item, OversizedMessage)
            self._lines.append(item)
        return True

    async def recv(self) -> Any:
        """The next message from the connection (fails if none comes within 5 s)."""
        with trio.fail_after(5):
            while not self._lines:
                if not await self._fill():
                    raise AssertionError("end of stream while waiting for a message")
        return orjson.loads(self._lines.popleft())

    async def expect_eof(self) -> None:
        with trio.fail_after(5):
            while await self._fill():
                pass
        assert not self._lines, list(self._lines)

    async def ping(self) -> None:
        """Assert the connection still answers, and that it sent nothing else first."""
        await trio.testing.wait_all_tasks_blocked()
        self._pings += 1
        ping_id = f"ping-{self._pings}"
        await self.request(ping_id, PING)
        assert await self.recv() == {"jsonrpc": "2.0", "id": ping_id, "result": "pong"}


@asynccontextmanager
async def connected(*routes: Route, **options: Any) -> AsyncIterator[tuple[Connection, RawPeer]]:
    ours, theirs = trio.testing.memory_stream_pair()
    table = {route.method: route for route in (Route(PING, "request", pong), *routes)}
    async with Connection(ours, ours, table, **options) as conn:
        yield conn, RawPeer(theirs.send_stream, theirs.receive_stream)


def error_of(msg: Any, id: Any, code: int) -> Any:
    assert msg["jsonrpc"] == "2.0" and "result" not in msg, msg
    assert msg["id"] == id, msg
    assert msg["error"]["code"] == code, msg
    return msg["error"]


async def answer_next_request(peer: RawPeer, result: Any) -> Any:
    req = await peer.recv()
    await peer.send({"jsonrpc": "2.0", "id": req["id"], "result": result})
    return req


class RecordingSendStream(trio.abc.SendStream):
    """Records every send_all call; can be broken or made to hang on demand."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.broken = False
        self.hang_send = False
        self.hang_close = False
        self.closed = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        if self.broken:
            raise trio.BrokenResourceError("the pipe broke")
        if self.hang_send:
            await trio.sleep_forever()
        self.writes.append(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        self.closed = True
        if self.hang_close:
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()

    def lines(self) -> list[Any]:
        return [orjson.loads(line) for line in b"".join(self.writes).splitlines()]


@asynccontextmanager
async def recorded(
    *routes: Route, **options: Any
) -> AsyncIterator[tuple[Connection, RecordingSendStream, trio.testing.MemorySendStream]]:
    """A connection writing to a RecordingSendStream; the test writes its input to the returned send stream."""
    out = RecordingSendStream()
    peer_send, our_receive = trio.testing.memory_stream_one_way_pair()
    async with Connection(out, our_receive, {r.method: r for r in routes}, **options) as conn:
        yield conn, out, peer_send


# -- error answers -------------------------------------------------------------------------------


async def test_garbage_gets_a_parse_error_with_null_id_and_the_connection_keeps_working(
    autojump_clock: MockClock,
) -> None:
    async with connected() as (_conn, peer):
        await peer.send_raw(b"this is not json\n")
        error_of(await peer.recv(), None, -32700)
        await peer.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"test/ping"\n')  # truncated object
        error_of(await peer.recv(), None, -32700)
        await peer.ping()


async def test_a_json_value_that_is_not_a_request_gets_an_invalid_request_error(autojump_clock: MockClock) -> None:
    async with connected() as (_conn, peer):
        await peer.send_raw(b"42\n")
        error_of(await peer.recv(), None, -32600)
        await peer.send({"jsonrpc": "2.0", "id": 3})
        error_of(await peer.recv(), 3, -32600)
        await peer.send({"id": 4, "method": PING})
        error_of(await peer.recv(), 4, -32600)
        await peer.ping()


async def test_an_unknown_method_gets_method_not_found_naming_the_method(autojump_clock: MockClock) -> None:
    called: list[Any] = []

    async def on_note(params: Any) -> None:
        called.append(params)

    async with connected(Route("a/note", "notification", on_note)) as (_conn, peer):
        await peer.request(5, "no/such_method", {"x": 1})
        error = error_of(await peer.recv(), 5, -32601)
        assert error["data"] == {"method": "no/such_method"}
        # a notification route does not answer requests
        await peer.request("r", "a/note")
        assert error_of(await peer.recv(), "r", -32601)["data"] == {"method": "a/note"}
        assert called == []


async def test_params_that_fail_to_decode_get_invalid_params_with_the_json_path(autojump_clock: MockClock) -> None:
    spec = v1.REQUESTS["session/prompt"]
    seen: list[Any] = []

    async def prompt(params: Any) -> Any:
        seen.append(params)
        return v1.PromptResponse(stop_reason="end_turn")

    route = Route(spec.method, "request", prompt, params_type=spec.params_type, result_type=spec.result_type)
    async with connected(route) as (_conn, peer):
        await peer.request(1, "session/prompt", {"sessionId": "s", "prompt": [{"type": "text", "text": 5}]})
        error = error_of(await peer.recv(), 1, -32602)
        assert error["data"]["path"] == "$.prompt[0].text"
        assert seen == []
        await peer.request(2, "session/prompt", {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]})
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}
        assert seen == [v1.PromptRequest(session_id="s", prompt=[v1.TextContentBlock(text="hi")])]


async def test_a_handler_exception_is_a_generic_internal_error_with_the_traceback_only_in_the_log(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def explode(params: Any) -> Any:
        raise ValueError("secret detail 8271")

    caplog.set_level(logging.DEBUG)
    async with connected(Route("explode", "request", explode)) as (_conn, peer):
        await peer.request(9, "explode")
        error = error_of(await peer.recv(), 9, -32603)
        assert error["message"] == "Internal error"
        await peer.ping()
    wire = bytes(peer.raw_in)
    for leak in (b"secret", b"8271", b"Traceback", b"ValueError", b"explode"):
        assert leak not in wire
    logged = [r for r in caplog.records if r.exc_info is not None]
    assert len(logged) == 1
    assert logged[0].name.startswith("acp_trio") and logged[0].levelno >= logging.ERROR
    assert "secret detail 8271" in caplog.text and "Traceback" in caplog.text
    assert all(r.name != logging.getLogger().name for r in caplog.records)


async def test_a_handler_raising_request_error_sends_its_code_message_and_data(autojump_clock: MockClock) -> None:
    async def missing(params: Any) -> Any:
        raise RequestError(-32002, "Resource not found", {"uri": "file:///nope"})

    async def bare(params: Any) -> Any:
        raise RequestError(-32000, "Authentication required")

    async with connected(Route("missing", "request", missing), Route("bare", "request", bare)) as (_conn, peer):
        await peer.request("m", "missing")
        assert await peer.recv() == {
            "jsonrpc": "2.0",
            "id": "m",
            "error": {"code": -32002, "message": "Resource not found", "data": {"uri": "file:///nope"}},
        }
        await peer.request("b", "bare")
        assert await peer.recv() == {
            "jsonrpc": "2.0",
            "id": "b",
            "error": {"code": -32000, "message": "Authentication required"},
        }


async def test_an_unknown_notification_is_ignored_without_answer_and_logged_at_debug(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="acp_trio")
    async with connected() as (_conn, peer):
        await peer.notify("unknown/notification_xyz", {"a": 1})
        await peer.notify(PING)  # a request route does not take notifications
        await peer.ping()
    records = [r for r in caplog.records if "unknown/notification_xyz" in r.getMessage()]
    assert records and all(r.levelno == logging.DEBUG and r.name.startswith("acp_trio") for r in records)


async def test_a_notification_never_gets_a_response_even_when_its_handler_raises(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[Any] = []

    async def bad(params: Any) -> None:
        ran.append(params)
        raise RequestError(-32000, "nope")

    async def worse(params: Any) -> None:
        ran.append(params)
        raise RuntimeError("boom")

    caplog.set_level(logging.DEBUG, logger="acp_trio")
    async with connected(Route("bad", "notification", bad), Route("worse", "notification", worse)) as (_conn, peer):
        await peer.notify("bad", {"n": 1})
        await peer.notify("worse", {"n": 2})
        await peer.ping()
    assert ran == [{"n": 1}, {"n": 2}]
    assert "boom" in caplog.text


async def test_a_request_reusing_the_id_of_a_running_request_is_refused(autojump_clock: MockClock) -> None:
    release = trio.Event()
    calls: list[Any] = []

    async def slow(params: Any) -> Any:
        calls.append(params)
        await release.wait()
        return params["n"]

    async with connected(Route("slow", "request", slow)) as (_conn, peer):
        await peer.request(7, "slow", {"n": 1})
        await trio.testing.wait_all_tasks_blocked()
        await peer.request(7, "slow", {"n": 2})
        error_of(await peer.recv(), 7, -32600)
        release.set()
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 7, "result": 1}
        assert calls == [{"n": 1}]
        # once finished, the id may be used again
        await peer.request(7, "slow", {"n": 3})
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 7, "result": 3}


# -- batches -------------------------------------------------------------------------------------


async def test_a_batch_of_two_requests_gets_one_array_with_both_answers(autojump_clock: MockClock) -> None:
    async def wait_then_echo(params: Any) -> Any:
        await trio.sleep(params["delay"])
        return params["n"]

    async with connected(Route("echo", "request", wait_then_echo)) as (_conn, peer):
        await peer.send(
            [
                {"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"n": "first", "delay": 2}},
                {"jsonrpc": "2.0", "id": 2, "method": "echo", "params": {"n": "second", "delay": 1}},
            ]
        )
        answer = await peer.recv()
        assert isinstance(answer, list)
        assert sorted(answer, key=lambda a: a["id"]) == [
            {"jsonrpc": "2.0", "id": 1, "result": "first"},
            {"jsonrpc": "2.0", "id": 2, "result": "second"},
        ]
        await peer.ping()


async def test_a_line_read_after_a_batch_whose_request_waits_is_handled_while_it_waits(
    autojump_clock: MockClock,
) -> None:
    opened = trio.Event()

    async def gate(params: Any) -> str:
        await opened.wait()
        return "passed"

    async def opener(params: Any) -> str:
        opened.set()
        return "opened"

    async with connected(Route("gate", "request", gate), Route("open", "request", opener)) as (_conn, peer):
        batch = [{"jsonrpc": "2.0", "id": 1, "method": "gate"}, {"jsonrpc": "2.0", "id": 2, "method": PING}]
        await peer.send_raw(
            orjson.dumps(batch) + b"\n" + orjson.dumps({"jsonrpc": "2.0", "id": 3, "method": "open"}) + b"\n"
        )
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 3, "result": "opened"}
        answer = await peer.recv()
        assert sorted(answer, key=lambda a: a["id"]) == [
            {"jsonrpc": "2.0", "id": 1, "result": "passed"},
            {"jsonrpc": "2.0", "id": 2, "result": "pong"},
        ]
        await peer.ping()


async def test_a_batch_of_notifications_only_gets_no_response(autojump_clock: MockClock) -> None:
    seen: list[Any] = []

    async def note(params: Any) -> None:
        seen.append(params["n"])

    async with connected(Route("note", "notification", note)) as (_conn, peer):
        await peer.send([{"jsonrpc": "2.0", "method": "note", "params": {"n": i}} for i in range(3)])
        await peer.ping()
    assert sorted(seen) == [0, 1, 2]


async def test_a_batch_mixing_a_request_and_invalid_items_answers_each_in_one_array(autojump_clock: MockClock) -> None:
    async with connected() as (_conn, peer):
        await peer.send(
            [
                {"jsonrpc": "2.0", "id": "a", "method": PING},
                42,
                {"jsonrpc": "2.0", "id": "b", "method": "no/such"},
                {"jsonrpc": "2.0", "method": "no/such_notification"},
            ]
        )
        answer = await peer.recv()
        assert isinstance(answer, list) and len(answer) == 3
        by_id = {a["id"]: a for a in answer}
        assert by_id["a"] == {"jsonrpc": "2.0", "id": "a", "result": "pong"}
        error_of(by_id[None], None, -32600)
        error_of(by_id["b"], "b", -32601)
        await peer.ping()


async def test_the_reader_keeps_working_after_a_batch_and_an_empty_array(autojump_clock: MockClock) -> None:
    async with connected() as (_conn, peer):
        await peer.send([{"jsonrpc": "2.0", "id": 1, "method": PING}])
        assert await peer.recv() == [{"jsonrpc": "2.0", "id": 1, "result": "pong"}]
        await peer.send_raw(b"[]\n")
        error_of(await peer.recv(), None, -32600)
        await peer.ping()
        await peer.send([{"jsonrpc": "2.0", "id": 2, "method": PING}, {"jsonrpc": "2.0", "id": 3, "method": PING}])
        assert sorted(a["id"] for a in await peer.recv()) == [2, 3]
        await peer.ping()


# -- oversized messages --------------------------------------------------------------------------


async def test_an_oversized_request_gets_an_error_with_its_id_and_the_next_message_is_handled(
    autojump_clock: MockClock,
) -> None:
    async with connected(max_message_size=200) as (_conn, peer):
        big = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": PING, "params": {"pad": "x" * 500}})
        await peer.send_raw(big + b"\n" + orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": PING}) + b"\n")
        error = error_of(await peer.recv(), 1, -32600)
        assert error["data"] == {"detail": "message too large", "limit": 200, "size": len(big)}
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 2, "result": "pong"}
        # in pieces, across several writes, with a string id
        big = orjson.dumps({"jsonrpc": "2.0", "id": "req-7", "method": PING, "params": {"pad": "x" * 500}})
        for start in range(0, len(big), 64):
            await peer.send_raw(big[start : start + 64])
        await peer.send_raw(b"\n")
        error_of(await peer.recv(), "req-7", -32600)
        await peer.ping()


async def test_an_oversized_message_whose_id_is_not_in_its_first_4_kib_gets_an_error_with_null_id(
    autojump_clock: MockClock,
) -> None:
    async with connected(max_message_size=5000) as (_conn, peer):
        late_id = b'{"jsonrpc":"2.0","method":"test/ping","params":{"pad":"' + b"x" * 6000 + b'"},"id":3}'
        await peer.send_raw(late_id + b"\n")
        error_of(await peer.recv(), None, -32600)
        garbage = b"not json " * 1000
        await peer.send_raw(garbage + b"\n")
        error_of(await peer.recv(), None, -32600)
        await peer.ping()


async def test_an_oversized_response_fails_the_request_waiting_for_it(autojump_clock: MockClock) -> None:
    async with connected(max_message_size=200) as (conn, peer):
        async with trio.open_nursery() as nursery:
            failure: list[BaseException] = []

            async def call() -> None:
                try:
                    await conn.request("ask")
                except RequestError as exc:
                    failure.append(exc)

            nursery.start_soon(call)
            request = await peer.recv()
            await peer.send_raw(
                orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"pad": "x" * 500}}) + b"\n"
            )
        assert len(failure) == 1
        assert isinstance(failure[0], RequestError)
        assert failure[0].code == -32600 and failure[0].data["limit"] == 200
        await peer.ping()


# -- inbound cancellation ------------------------------------------------------------------------


async def test_an_inbound_cancel_request_cancels_the_running_handler_and_answers_request_cancelled(
    autojump_clock: MockClock,
) -> None:
    started = trio.Event()
    outcome: list[str] = []

    async def forever(params: Any) -> Any:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            outcome.append("cancelled")
            raise

    async with connected(Route("forever", "request", forever)) as (_conn, peer):
        await peer.request("job-1", "forever")
        with trio.fail_after(5):
            await started.wait()
        await peer.cancel("job-1")
        error_of(await peer.recv(), "job-1", -32800)
        assert outcome == ["cancelled"]
        await peer.ping()


async def test_a_cancel_after_the_handler_answered_is_a_no_op(autojump_clock: MockClock) -> None:
    async with connected() as (_conn, peer):
        await peer.request(3, PING)
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 3, "result": "pong"}
        await peer.cancel(3)
        await peer.ping()


async def test_a_handler_that_returns_before_noticing_the_cancel_keeps_its_result(autojump_clock: MockClock) -> None:
    async with connected() as (_conn, peer):
        # request and cancel in one write: the handler returns without reaching a checkpoint
        await peer.send(
            {"jsonrpc": "2.0", "id": 4, "method": PING},
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 4}},
        )
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 4, "result": "pong"}
        await peer.ping()


async def test_a_cancel_for_an_unknown_id_or_with_bad_params_is_ignored(autojump_clock: MockClock) -> None:
    async with connected() as (_conn, peer):
        await peer.cancel(999)
        await peer.cancel("nope")
        await peer.notify("$/cancel_request")
        await peer.notify("$/cancel_request", {"requestId": True})
        await peer.notify("$/cancel_request", [1])
        await peer.ping()


# -- the request pool: inbound requests run in reused tasks ---------------------------------------

REQUEST_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("REQUEST_VAR", default="unset")


async def test_a_context_variable_a_handler_sets_does_not_reach_the_next_request(autojump_clock: MockClock) -> None:
    async def remember(params: Any) -> str:
        seen = REQUEST_VAR.get()
        REQUEST_VAR.set(params["value"])
        await trio.sleep(0)  # the rest of the handler runs in the same context
        assert REQUEST_VAR.get() == params["value"]
        return seen

    async with connected(Route("remember", "request", remember)) as (_conn, peer):
        for i in range(3):
            await peer.request(i, "remember", {"value": f"request {i}"})
            assert await peer.recv() == {"jsonrpc": "2.0", "id": i, "result": "unset"}
        # and when several arrive in one read
        await peer.send(*({"jsonrpc": "2.0", "id": i, "method": "remember", "params": {"value": "x"}} for i in (7, 8)))
        assert [m["result"] for m in (await peer.recv(), await peer.recv())] == ["unset", "unset"]


async def test_after_a_handler_ignores_its_cancellation_the_next_requests_are_not_cancelled(
    autojump_clock: MockClock,
) -> None:
    started = trio.Event()

    async def stubborn(params: Any) -> str:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            pass  # a handler that swallows its cancellation keeps its result
        return "kept"

    async def nap(params: Any) -> str:
        await trio.sleep(1)
        return "rested"

    async with connected(Route("stubborn", "request", stubborn), Route("nap", "request", nap)) as (_conn, peer):
        await peer.request(1, "stubborn")
        with trio.fail_after(5):
            await started.wait()
        await peer.cancel(1)
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 1, "result": "kept"}
        for i in range(2, 5):
            await peer.request(i, "nap")
            assert await peer.recv() == {"jsonrpc": "2.0", "id": i, "result": "rested"}


async def test_requests_read_together_run_concurrently(autojump_clock: MockClock) -> None:
    events = {name: trio.Event() for name in ("a", "b", "c")}

    async def meet(params: Any) -> str:
        events[params["me"]].set()
        for event in events.values():  # each waits for all the others: only concurrent handlers finish
            await event.wait()
        return str(params["me"])

    async with connected(Route("meet", "request", meet)) as (_conn, peer):
        await peer.send(*({"jsonrpc": "2.0", "id": n, "method": "meet", "params": {"me": n}} for n in events))
        answers = {(m := await peer.recv())["id"]: m["result"] for _ in events}
        assert answers == {"a": "a", "b": "b", "c": "c"}
        await peer.ping()


async def test_the_lines_after_a_request_that_waits_are_handled_in_order_by_the_next_reader(
    autojump_clock: MockClock,
) -> None:
    """The reader runs each request as it reads it; when one has to wait, the reader goes on with it
    and the lines after it in the same read go to the task that takes the reader role."""
    opened = trio.Event()
    order: list[str] = []

    async def gate(params: Any) -> str:
        order.append("gate")
        await opened.wait()
        return "passed"

    async def opener(params: Any) -> str:
        order.append("open")
        opened.set()
        return "opened"

    async def note(params: Any) -> None:
        order.append(params["n"])

    async with connected(
        Route("gate", "request", gate), Route("open", "request", opener), Route("note", "notification", note)
    ) as (_conn, peer):
        await peer.send(
            {"jsonrpc": "2.0", "id": 1, "method": "gate"},
            {"jsonrpc": "2.0", "method": "note", "params": {"n": "after the gate"}},
            {"jsonrpc": "2.0", "id": 2, "method": "open"},
            {"jsonrpc": "2.0", "id": 3, "method": PING},
        )
        answers = [await peer.recv() for _ in range(3)]
        assert [m["id"] for m in answers] == [2, 3, 1]
        assert [m["result"] for m in answers] == ["opened", "pong", "passed"]
        assert order[:2] == ["gate", "open"] and "after the gate" in order


class Ready:
    """An awaitable that is not a coroutine: ready at once with ``value``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Any:
        return self.value
        yield  # a generator: its return value is the await's


async def test_handlers_that_are_plain_functions_are_answered_like_coroutine_functions(
    autojump_clock: MockClock,
) -> None:
    def ready(params: Any) -> Any:
        return Ready({"ready": params["n"]})

    def refuses(params: Any) -> Any:
        raise RequestError(-32001, "refused", params)

    def breaks(params: Any) -> Any:
        raise ValueError("broken before returning an awaitable")

    routes = [
        Route("ready", "request", ready),
        Route("refuses", "request", refuses),
        Route("breaks", "request", breaks),
    ]
    async with connected(*routes) as (_conn, peer):
        await peer.request(1, "ready", {"n": 1})
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 1, "result": {"ready": 1}}
        await peer.request(2, "refuses", {"n": 2})
        assert error_of(await peer.recv(), 2, -32001)["data"] == {"n": 2}
        await peer.request(3, "breaks", {})
        error_of(await peer.recv(), 3, -32603)
        await peer.ping()


@pytest.mark.parametrize("seed", range(6))
async def test_every_request_gets_exactly_one_answer_whatever_its_handler_does(
    autojump_clock: MockClock, seed: int
) -> None:
    """Bursts of requests whose handlers answer at once, wait, raise, ignore their cancellation or
    are cancelled, in reads of every size: each id is answered once, with what its handler did."""
    rng = random.Random(seed)

    async def act(params: Any) -> Any:
        kind = params["kind"]
        if kind == "raise":
            raise RequestError(-32001, "refused", params["n"])
        if kind in ("wait", "cancelled"):
            await trio.sleep(params["delay"])
        elif kind == "stubborn":
            with trio.CancelScope(shield=True):
                await trio.sleep(params["delay"])
        return params["n"]

    async with connected(Route("act", "request", act)) as (_conn, peer):
        expected: dict[int, set[Any]] = {}
        n = 0
        for _burst in range(8):
            messages: list[Any] = []
            for _ in range(rng.randint(1, 40)):
                n += 1
                kind = rng.choice(["now", "now", "wait", "raise", "cancelled", "stubborn"])
                delay = rng.choice([0, 0.5, 2])
                messages.append(
                    {"jsonrpc": "2.0", "id": n, "method": "act", "params": {"kind": kind, "n": n, "delay": delay}}
                )
                if kind in ("cancelled", "stubborn"):
                    messages.append({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": n}})
                # a cancelled handler still waiting answers -32800 (one that waits 0 s may finish first and
                # keep its result); a stubborn one keeps its result, an error is answered as raised
                if kind == "cancelled":
                    expected[n] = {-32800} if delay else {-32800, n}
                else:
                    expected[n] = {-32001} if kind == "raise" else {n}
            cut = rng.randint(0, len(messages))  # two reads: a burst can be split anywhere
            await peer.send(*messages[:cut])
            await peer.send(*messages[cut:])
        answers: dict[int, Any] = {}
        while len(answers) < len(expected):
            msg = await peer.recv()
            assert msg["id"] not in answers, f"request {msg['id']} answered twice"
            answers[msg["id"]] = msg["result"] if "result" in msg else msg["error"]["code"]
        assert answers.keys() == expected.keys()
        wrong = {k: v for k, v in answers.items() if v not in expected[k]}
        assert not wrong, wrong
        await peer.ping()


async def test_a_cancel_read_with_its_request_cancels_it_once_it_runs(autojump_clock: MockClock) -> None:
    async def forever(params: Any) -> Any:
        await trio.sleep_forever()

    async with connected(Route("forever", "request", forever)) as (_conn, peer):
        await peer.send(
            {"jsonrpc": "2.0", "id": "f1", "method": "forever"},
            {"jsonrpc": "2.0", "id": "f2", "method": "forever"},
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "f2"}},
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "f1"}},
        )
        errors = {(m := await peer.recv())["id"]: m["error"]["code"] for _ in range(2)}
        assert errors == {"f1": -32800, "f2": -32800}
        await peer.ping()


# -- outbound cancellation and timeouts ----------------------------------------------------------


async def test_cancelling_the_callers_scope_sends_cancel_request_for_that_id(autojump_clock: MockClock) -> None:
    outcome: list[str] = []
    async with connected() as (conn, peer):
        scope = trio.CancelScope()

        async def call() -> None:
            with scope:
                await conn.request("slow/thing", {"a": 1})
                outcome.append("returned")
            outcome.append("cancelled" if scope.cancelled_caught else "not cancelled")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            req = await peer.recv()
            assert (req["method"], req["params"]) == ("slow/thing", {"a": 1})
            scope.cancel()
        assert outcome == ["cancelled"]
        assert await peer.recv() == {
            "jsonrpc": "2.0",
            "method": "$/cancel_request",
            "params": {"requestId": req["id"]},
        }
        # the late response is dropped without error and the connection keeps working both ways
        await peer.send({"jsonrpc": "2.0", "id": req["id"], "result": "too late"})
        await peer.ping()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer_next_request, peer, "fresh")
            assert await conn.request("again") == "fresh"


async def test_a_timeout_raises_request_timeout_and_sends_cancel_request(autojump_clock: MockClock) -> None:
    async with connected() as (conn, peer):
        start = trio.current_time()
        with pytest.raises(RequestTimeout) as info:
            await conn.request("slow/thing", timeout=3)
        assert trio.current_time() - start == pytest.approx(3)
        assert isinstance(info.value, TimeoutError)
        assert info.value.method == "slow/thing" and info.value.timeout == 3
        req = await peer.recv()
        assert req["method"] == "slow/thing" and req["id"] == info.value.request_id
        assert await peer.recv() == {
            "jsonrpc": "2.0",
            "method": "$/cancel_request",
            "params": {"requestId": req["id"]},
        }
        await peer.send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32800, "message": "Request cancelled"}})
        await peer.ping()
        # a request answered in time is unaffected by its timeout
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer_next_request, peer, 42)
            assert await conn.request("quick", timeout=3) == 42


async def test_an_error_response_raises_request_error_in_the_caller(autojump_clock: MockClock) -> None:
    async with connected() as (conn, peer):

        async def refuse() -> None:
            req = await peer.recv()
            await peer.send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32601, "message": "no", "data": 1}})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(refuse)
            with pytest.raises(RequestError) as info:
                await conn.request("x")
        assert (info.value.code, info.value.message, info.value.data) == (-32601, "no", 1)


async def test_typed_requests_encode_params_and_decode_the_result(autojump_clock: MockClock) -> None:
    spec = v1.REQUESTS["fs/read_text_file"]
    async with connected() as (conn, peer):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer_next_request, peer, {"content": "hello"})
            result = await conn.send_request(spec, v1.ReadTextFileRequest(session_id="s", path="/tmp/a"))
        assert result == v1.ReadTextFileResponse(content="hello")
        assert orjson.loads(bytes(peer.raw_in))["params"] == {"sessionId": "s", "path": "/tmp/a"}


# -- closing -------------------------------------------------------------------------------------


async def start_calls(conn: Connection, count: int, nursery: trio.Nursery, errors: list[BaseException]) -> None:
    async def call(i: int) -> None:
        try:
            await conn.request("wait/forever", {"i": i})
        except ConnectionClosed as exc:
            errors.append(exc)

    for i in range(count):
        nursery.start_soon(call, i)


async def test_aclose_fails_every_pending_outbound_request_at_once(autojump_clock: MockClock) -> None:
    errors: list[BaseException] = []
    async with connected() as (conn, peer):
        async with trio.open_nursery() as nursery:
            await start_calls(conn, 4, nursery, errors)
            assert sorted([(await peer.recv())["params"]["i"] for _ in range(4)]) == [0, 1, 2, 3]
            start = trio.current_time()
            await conn.aclose()
        assert trio.current_time() - start < 0.01
        assert len(errors) == 4 and all(isinstance(e, ConnectionClosed) for e in errors)
        assert conn.closed
        await peer.expect_eof()
        with pytest.raises(ConnectionClosed):
            await conn.request("after/close")
        with pytest.raises(ConnectionClosed):
            await conn.notify("after/close")
        with pytest.raises(ConnectionClosed):
            await conn.send_request(v1.REQUESTS["fs/read_text_file"], v1.ReadTextFileRequest(session_id="s", path="/a"))


async def test_eof_from_the_peer_fails_every_pending_outbound_request(autojump_clock: MockClock) -> None:
    errors: list[BaseException] = []
    async with connected() as (conn, peer):
        async with trio.open_nursery() as nursery:
            await start_calls(conn, 3, nursery, errors)
            for _ in range(3):
                await peer.recv()
            await peer.send_stream.aclose()
        assert len(errors) == 3 and all(isinstance(e, ConnectionClosed) for e in errors)
        with trio.fail_after(5):
            await conn.wait_closed()
        with pytest.raises(ConnectionClosed):
            await conn.request("after/eof")
        with pytest.raises(ConnectionClosed):
            await conn.notify("after/eof")


async def test_a_broken_pipe_on_write_fails_every_pending_outbound_request(autojump_clock: MockClock) -> None:
    errors: list[BaseException] = []
    async with recorded() as (conn, out, _peer_send):
        async with trio.open_nursery() as nursery:
            await start_calls(conn, 3, nursery, errors)
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(m["params"]["i"] for m in out.lines()) == [0, 1, 2]
            out.broken = True
            await conn.notify("trigger/write")
        assert len(errors) == 3 and all(isinstance(e, ConnectionClosed) for e in errors)
        assert conn.closed
        with pytest.raises(ConnectionClosed):
            await conn.request("after/broken")
        with pytest.raises(ConnectionClosed):
            await conn.notify("after/broken")


async def test_with_eof_grace_none_running_handlers_finish_after_a_half_close_and_their_answers_are_sent(
    autojump_clock: MockClock,
) -> None:
    started = trio.Event()

    async def slow(params: Any) -> Any:
        started.set()
        await trio.sleep(2)
        return "done"

    async with connected(Route("slow", "request", slow), eof_grace=None) as (conn, peer):
        await peer.request(1, "slow")
        with trio.fail_after(5):
            await started.wait()
        await peer.send_stream.aclose()  # EOF on the connection's receive side; our receive side stays open
        await trio.testing.wait_all_tasks_blocked()
        assert not conn.closed
        with pytest.raises(ConnectionClosed):  # nothing more can be read, so no response could come
            await conn.request("cannot/answer")
        await conn.notify("still/writable")
        assert await peer.recv() == {"jsonrpc": "2.0", "method": "still/writable"}
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 1, "result": "done"}
        with trio.fail_after(5):
            await conn.wait_closed()
    await peer.expect_eof()


async def test_after_the_input_ends_handlers_get_eof_grace_seconds_then_are_cancelled_and_answer(
    autojump_clock: MockClock,
) -> None:
    started = trio.Event()
    outcome: dict[str, str] = {}

    async def quick(params: Any) -> Any:
        started.set()
        await trio.sleep(0.1)
        return "done"

    async def slow(params: Any) -> Any:
        try:
            await trio.sleep(15)
        except trio.Cancelled:
            outcome["slow"] = "cancelled"
            raise
        return "too late"

    async def marked(params: Any) -> Any:
        await trio.sleep(15)

    async def background() -> None:
        try:
            await trio.sleep_forever()
        finally:
            outcome["background"] = "cancelled"

    routes = (
        Route("quick", "request", quick),
        Route("slow", "request", slow),
        Route("marked", "request", marked, cancelled_result=lambda: "withdrawn", input_ended_result=lambda: "ended"),
    )
    async with connected(*routes, eof_grace=0.5) as (conn, peer):
        conn.start_soon(background)
        await peer.request(1, "slow")
        await peer.request(2, "marked")
        await peer.request(3, "quick")
        with trio.fail_after(5):
            await started.wait()
        await peer.send_stream.aclose()  # end of input; the connection's output stays open
        ended = trio.current_time()
        answers = {}
        for _ in range(3):
            message = await peer.recv()
            answers[message["id"]] = message
        with trio.fail_after(5):
            await conn.wait_closed()
        assert trio.current_time() - ended == pytest.approx(0.5)  # virtual time: the grace, then at once
    assert answers[3] == {"jsonrpc": "2.0", "id": 3, "result": "done"}  # finished within the grace
    error_of(answers[1], 1, -32800)
    assert answers[2] == {"jsonrpc": "2.0", "id": 2, "result": "ended"}
    assert outcome == {"slow": "cancelled", "background": "cancelled"}
    await peer.expect_eof()


async def test_notification_handlers_running_or_queued_at_the_end_of_input_are_cancelled_after_the_grace(
    autojump_clock: MockClock,
) -> None:
    handled: list[Any] = []
    cancelled: list[Any] = []

    async def slow(params: Any) -> None:
        try:
            await trio.sleep(15)
        except trio.Cancelled:
            cancelled.append(params["n"])
            raise
        handled.append(params["n"])

    routes = (
        Route("ordered", "notification", slow, serial_key=lambda params: "one queue"),
        Route("free", "notification", slow),
    )
    async with connected(*routes, eof_grace=0.5) as (conn, peer):
        for n in range(3):
            await peer.send_raw(orjson.dumps({"jsonrpc": "2.0", "method": "ordered", "params": {"n": n}}) + b"\n")
        await peer.send_raw(orjson.dumps({"jsonrpc": "2.0", "method": "free", "params": {"n": "free"}}) + b"\n")
        await trio.testing.wait_all_tasks_blocked()
        await peer.send_stream.aclose()
        ended = trio.current_time()
        with trio.fail_after(5):
            await conn.wait_closed()
        assert trio.current_time() - ended == pytest.approx(0.5)
    assert handled == []
    assert sorted(cancelled, key=str) == [0, "free"]  # the queued 1 and 2 never started


async def test_with_eof_grace_none_background_tasks_are_waited_for_too(autojump_clock: MockClock) -> None:
    finished: list[str] = []

    async def long() -> None:
        await trio.sleep(10)
        finished.append("long")

    async with connected(eof_grace=None) as (conn, peer):
        conn.start_soon(long)
        await peer.send_stream.aclose()
        with trio.fail_after(20):
            await conn.wait_closed()
    assert finished == ["long"]


async def test_when_nothing_runs_the_connection_closes_at_the_end_of_input(autojump_clock: MockClock) -> None:
    async with connected(eof_grace=5) as (conn, peer):
        await peer.send_stream.aclose()
        start = trio.current_time()
        with trio.fail_after(1):
            await conn.wait_closed()
        assert trio.current_time() == start


async def test_a_background_task_that_ends_within_the_grace_is_not_cancelled(autojump_clock: MockClock) -> None:
    finished: list[str] = []

    async def short() -> None:
        await trio.sleep(0.1)
        finished.append("short")

    async with connected() as (conn, peer):
        conn.start_soon(short)
        await peer.send_stream.aclose()
        with trio.fail_after(5):
            await conn.wait_closed()
    assert finished == ["short"]


async def test_close_is_bounded_in_time_when_the_send_streams_aclose_hangs(autojump_clock: MockClock) -> None:
    async with recorded(close_timeout=2.0) as (conn, out, _peer_send):
        await conn.notify("hello")
        await trio.testing.wait_all_tasks_blocked()
        out.hang_close = True
        start = trio.current_time()
    elapsed = trio.current_time() - start
    assert out.closed and conn.closed
    assert elapsed <= 2 * 2.0 + 0.01
    assert out.lines() == [{"jsonrpc": "2.0", "method": "hello"}]


async def test_close_is_bounded_in_time_when_a_write_never_completes(autojump_clock: MockClock) -> None:
    errors: list[BaseException] = []
    async with trio.open_nursery() as nursery:
        async with recorded(close_timeout=1.5) as (conn, out, _peer_send):
            out.hang_send = True
            await start_calls(conn, 2, nursery, errors)
            await trio.testing.wait_all_tasks_blocked()
            start = trio.current_time()
        elapsed = trio.current_time() - start
    assert elapsed <= 2 * 1.5 + 0.01
    assert len(errors) == 2 and all(isinstance(e, ConnectionClosed) for e in errors)


# -- coalesced writes ----------------------------------------------------------------------------


async def test_queued_notifications_are_coalesced_into_fewer_writes_in_order(autojump_clock: MockClock) -> None:
    count = 50
    async with recorded() as (conn, out, _peer_send):
        for i in range(count):
            await conn.notify("note", {"i": i, "text": "x" * i})
        await trio.testing.wait_all_tasks_blocked()
        expected = b"".join(encode_notification("note", {"i": i, "text": "x" * i}) for i in range(count))
        assert b"".join(out.writes) == expected
        assert len(out.writes) < count


async def test_answers_to_a_burst_of_requests_are_coalesced(autojump_clock: MockClock) -> None:
    async def echo(params: Any) -> Any:
        return params

    count = 30
    async with recorded(Route("echo", "request", echo)) as (_conn, out, peer_send):
        await peer_send.send_all(
            b"".join(
                orjson.dumps({"jsonrpc": "2.0", "id": i, "method": "echo", "params": [i]}) + b"\n" for i in range(count)
            )
        )
        await trio.testing.wait_all_tasks_blocked()
        assert sorted((m["id"], m["result"]) for m in out.lines()) == [(i, [i]) for i in range(count)]
        assert all(w.endswith(b"\n") for w in out.writes)
        assert len(out.writes) < count


async def test_lines_waiting_for_the_writer_cost_their_length_not_a_4_kib_buffer_each(
    autojump_clock: MockClock,
) -> None:
    """orjson's bytes keep a 4 KiB buffer each: 300 queued small notifications must not hold 1.2 MiB."""
    import tracemalloc

    class GatedSendStream(RecordingSendStream):
        def __init__(self) -> None:
            super().__init__()
            self.gate = trio.Event()

        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            await self.gate.wait()
            await super().send_all(data)

    out = GatedSendStream()
    _peer_send, our_receive = trio.testing.memory_stream_one_way_pair()
    count = 300
    async with Connection(out, our_receive, {}) as conn:
        await conn.notify("note", {"i": -1})  # the writer takes this one and waits at the gate
        await trio.testing.wait_all_tasks_blocked()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(count):
                await conn.notify("note", {"i": i, "text": "y" * 100})
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert held < count * 600, f"{count} queued lines of ~150 bytes hold {held} bytes"
        out.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert [m["params"]["i"] for m in out.lines()] == list(range(-1, count))


# -- ordering ------------------------------------------------------------------------------------


def serial_route(log: list[tuple[str, float]], all_done: trio.Event | None = None, count: int = 0) -> Route:
    """Notifications ``ordered`` with params ``{key, name, delay}``: log start and end, sleep ``delay`` between."""

    async def handle(params: Any) -> None:
        log.append((f"start {params['name']}", trio.current_time()))
        await trio.sleep(params["delay"])
        log.append((f"end {params['name']}", trio.current_time()))
        if all_done is not None and sum(1 for name, _ in log if name.startswith("end")) == count:
            all_done.set()

    return Route("ordered", "notification", handle, serial_key=lambda p: p["key"])


async def test_notifications_with_the_same_serial_key_run_one_at_a_time_in_arrival_order(
    autojump_clock: MockClock,
) -> None:
    log: list[tuple[str, float]] = []
    all_done = trio.Event()
    async with connected(serial_route(log, all_done, 5)) as (_conn, peer):
        start = trio.current_time()
        await peer.send(
            *(
                {"jsonrpc": "2.0", "method": "ordered", "params": {"key": key, "name": name, "delay": delay}}
                for key, name, delay in [
                    ("a", "a1", 3),
                    ("b", "b1", 2),
                    ("a", "a2", 1),
                    ("b", "b2", 0.5),
                    ("a", "a3", 0),
                ]
            )
        )
        with trio.fail_after(10):
            await all_done.wait()
    ends = {name.split()[1]: t - start for name, t in log if name.startswith("end")}
    starts = {name.split()[1]: t - start for name, t in log if name.startswith("start")}
    # key a: strictly one after another, in arrival order, despite the shorter later delays
    assert ends["a1"] == pytest.approx(3) and ends["a2"] == pytest.approx(4) and ends["a3"] == pytest.approx(4)
    assert starts["a2"] >= ends["a1"] and starts["a3"] >= ends["a2"]
    # key b: the same, and it ran alongside key a
    assert ends["b1"] == pytest.approx(2) and ends["b2"] == pytest.approx(2.5)
    assert starts["b1"] == pytest.approx(0) and starts["b2"] >= ends["b1"]
    order = [name for name, _ in log if name.startswith("end")]
    assert order.index("end b1") < order.index("end a1")


async def test_a_response_after_serial_notifications_waits_for_their_handlers(autojump_clock: MockClock) -> None:
    log: list[tuple[str, float]] = []
    async with connected(serial_route(log)) as (conn, peer):

        async def peer_side() -> None:
            req = await peer.recv()
            await peer.send(
                {"jsonrpc": "2.0", "method": "ordered", "params": {"key": "s", "name": "u1", "delay": 2}},
                {"jsonrpc": "2.0", "method": "ordered", "params": {"key": "s", "name": "u2", "delay": 3}},
            )
            await peer.send({"jsonrpc": "2.0", "id": req["id"], "result": "final"})

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer_side)
            assert await conn.request("session/like") == "final"
            log.append(("returned", trio.current_time()))
    assert [name for name, _ in log] == ["start u1", "end u1", "start u2", "end u2", "returned"]
    assert log[-1][1] - start == pytest.approx(5)


async def test_a_long_read_of_notifications_is_handled_a_slice_at_a_time(autojump_clock: MockClock) -> None:
    # The reader decodes at most _HANDOFF messages before the handlers of the ones it queued run, so
    # a large read never holds more decoded updates than that (they would pile up, and pass through
    # the garbage collector's generations, behind the reader).  trio runs the tasks of one batch in
    # either order: without the reader's second turn, about half the slices would pile on the last.
    watch = SliceWatch("update", 40 * _HANDOFF)
    async with connected(watch.route) as (_conn, peer):
        await peer.send(*({"jsonrpc": "2.0", "method": "update", "params": {"i": i}} for i in range(watch.count)))
        with trio.fail_after(10):
            await watch.done.wait()
    assert watch.handled == list(range(watch.count))
    assert watch.most <= _HANDOFF


async def test_a_response_is_not_held_back_by_notifications_that_arrive_after_it(autojump_clock: MockClock) -> None:
    log: list[tuple[str, float]] = []
    async with connected(serial_route(log)) as (conn, peer):

        async def peer_side() -> None:
            req = await peer.recv()
            await peer.send(
                {"jsonrpc": "2.0", "id": req["id"], "result": "final"},
                {"jsonrpc": "2.0", "method": "ordered", "params": {"key": "s", "name": "later", "delay": 10}},
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer_side)
            start = trio.current_time()
            assert await conn.request("x") == "final"
            assert trio.current_time() - start == pytest.approx(0)


# -- tap -----------------------------------------------------------------------------------------


async def test_the_tap_sees_every_raw_message_in_both_directions_in_order(autojump_clock: MockClock) -> None:
    seen: list[tuple[str, bytes]] = []

    def tap(direction: str, line: bytes) -> None:
        seen.append((direction, line))

    async with connected(tap=tap) as (conn, peer):
        await peer.request(1, PING)
        await peer.recv()
        await peer.send_raw(b"garbage\n")
        await peer.recv()
        await conn.notify("out/note", {"x": 1})
        await peer.recv()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer_next_request, peer, "r")
            await conn.request("out/req")
        await peer.send([{"jsonrpc": "2.0", "id": 2, "method": PING}])
        await peer.recv()

    assert [d for d, _ in seen] == ["in", "out", "in", "out", "out", "out", "in", "in", "out"]
    inbound = [line for d, line in seen if d == "in"]
    outbound = [line for d, line in seen if d == "out"]
    assert b"".join(line + b"\n" for line in inbound) == bytes(peer.raw_out)
    assert b"".join(outbound) == bytes(peer.raw_in)
    assert all(line.endswith(b"\n") for line in outbound)
    assert all(not line.endswith(b"\n") for line in inbound)


async def test_blank_lines_and_crlf_endings_are_no_messages_and_the_tap_sees_each_message_bare(
    autojump_clock: MockClock,
) -> None:
    inbound: list[bytes] = []

    def tap(direction: str, line: bytes) -> None:
        if direction == "in":
            inbound.append(line)

    def ping(request_id: int) -> bytes:
        return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": PING})

    async with connected(tap=tap) as (_conn, peer):
        # one read: blank and whitespace-only lines around two requests, one ending in CRLF
        await peer.send_raw(b"\n \r\n" + ping(1) + b"\r\n\t\n" + ping(2) + b"\n\r\n")
        await peer.request(3, PING)  # the blank lines drew no answer: the next ones are the pings'
        answers = [await peer.recv() for _ in range(3)]
        await peer.ping()
    assert answers == [{"jsonrpc": "2.0", "id": i, "result": "pong"} for i in (1, 2, 3)]
    assert inbound[:3] == [ping(1), ping(2), ping(3)]


# -- streaming -----------------------------------------------------------------------------------
async def test_queue_notification_asks_the_sender_to_wait_past_the_high_water_mark(autojump_clock: MockClock) -> None:
    async with recorded() as (conn, out, _peer):
        out.hang_send = True  # the peer stops reading: the writer's first send never ends
        params = {"text": "x" * 1000}
        conn.queue_notification("_stream/chunk", params)
        await trio.testing.wait_all_tasks_blocked()  # the writer took it and hangs in send_all
        answers = [conn.queue_notification("_stream/chunk", params) for _ in range(70)]
        # about 64 KiB of 1 KiB lines fit below the mark; past it the sender is asked to wait
        assert answers[:60] == [False] * 60 and answers[-1] is True
        with trio.move_on_after(5) as cs:
            await conn.wait_writable()
        assert cs.cancelled_caught  # still blocked: the writer cannot take the queue


async def test_wait_writable_returns_once_the_writer_took_the_queue(autojump_clock: MockClock) -> None:
    async with recorded() as (conn, out, _peer):
        for _ in range(100):
            conn.queue_notification("_stream/chunk", {"text": "y" * 1000})
        with trio.fail_after(5):
            await conn.wait_writable()
        with trio.fail_after(5):
            await conn.wait_writable()  # nothing queued beyond the mark: returns at once
        await trio.testing.wait_all_tasks_blocked()
        assert len(out.lines()) == 100
        assert all(line["method"] == "_stream/chunk" for line in out.lines())


async def test_queue_notification_after_close_raises_connection_closed(autojump_clock: MockClock) -> None:
    async with recorded() as (conn, _out, _peer):
        await conn.aclose()
        with pytest.raises(ConnectionClosed):
            conn.queue_notification("_stream/chunk", {})


async def test_a_large_read_of_ordered_notifications_is_handled_in_order(autojump_clock: MockClock) -> None:
    seen: list[int] = []

    async def handle(params: Any) -> None:
        seen.append(params["n"])

    route = Route("_seq", "notification", handle, serial_key=lambda p: "one")
    async with recorded(route) as (_conn, _out, peer):
        lines = b"".join(
            orjson.dumps({"jsonrpc": "2.0", "method": "_seq", "params": {"n": i}}) + b"\n" for i in range(1000)
        )
        await peer.send_all(lines)  # one read: hundreds of messages handed over in slices
        await trio.testing.wait_all_tasks_blocked()
    assert seen == list(range(1000))


async def test_closing_releases_both_streams_of_a_pair(autojump_clock: MockClock) -> None:
    out = RecordingSendStream()
    _peer_send, our_receive = trio.testing.memory_stream_one_way_pair()
    async with Connection(out, our_receive, {}):
        pass
    assert out.closed
    with trio.fail_after(5), pytest.raises(trio.ClosedResourceError):
        await our_receive.receive_some(1)  # an open stream would block here until the deadline


async def test_typed_requests_read_a_null_result_as_an_empty_response(autojump_clock: MockClock) -> None:
    spec = v1.REQUESTS["fs/write_text_file"]
    async with connected() as (conn, peer):
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                result = await conn.send_request(spec, spec.params_type(session_id="s", path="/a", content="x"))
                assert isinstance(result, spec.result_type)

            nursery.start_soon(call)
            await answer_next_request(peer, None)


async def test_typed_requests_refuse_a_null_result_where_fields_are_required(autojump_clock: MockClock) -> None:
    spec = v1.REQUESTS["fs/read_text_file"]
    async with connected() as (conn, peer):
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                with pytest.raises(DecodeError):
                    await conn.send_request(spec, spec.params_type(session_id="s", path="/a"))

            nursery.start_soon(call)
            await answer_next_request(peer, None)


# The reader takes well-formed notifications with object params straight to their route, without
# _core.parse; every other line goes through parse.  Both must behave as parse classifies the line.
NOTIFICATION_SHAPES = [
    b'{"jsonrpc":"2.0","method":"a/note","params":{"n":1}}',  # the fast path
    b'{"method":"a/note","params":{"n":1},"jsonrpc":"2.0"}',  # members in another order
    b'{"jsonrpc":"2.0","method":"a/note"}',  # no params: {} for the handler
    b'{"jsonrpc":"2.0","method":"a/note","params":null}',  # null params: as absent
    b'{"jsonrpc":"2.0","method":"a/note","params":[1,2]}',  # array params: decoded as the route says
    b'{"jsonrpc":"2.0","method":"a/note","params":"x"}',  # invalid params: -32600, id null
    b'{"jsonrpc":"1.0","method":"a/note","params":{"n":1}}',  # wrong version: -32600, id null
    b'{"method":"a/note","params":{"n":1}}',  # no version: -32600, id null
    b'{"jsonrpc":"2.0","method":7,"params":{"n":1}}',  # method not a string: -32600, id null
    b'{"jsonrpc":"2.0","method":"a/note","params":{"n":1}',  # cut short: -32700, id null
    b'{"jsonrpc":"2.0","method":"a/note","params":{"n":1},"id":null}',  # an id (null): a request
]


@pytest.mark.parametrize("line", NOTIFICATION_SHAPES)
async def test_a_notification_line_is_handled_as_parse_classifies_it(line: bytes, autojump_clock: MockClock) -> None:
    from acp_trio import _core

    got: list[Any] = []

    async def on_note(params: Any) -> None:
        got.append(params)

    expected = _core.parse(line)
    async with connected(Route("a/note", "notification", on_note)) as (_conn, peer):
        await peer.send_raw(line + b"\n")
        if isinstance(expected, _core.Notification):
            await peer.ping()  # nothing was answered
            assert got == [{} if expected.params is None else expected.params]
        elif isinstance(expected, _core.Invalid):
            error_of(await peer.recv(), None, expected.error.code)
            assert got == []
        else:  # a request with a null id, to a notification route: method not found
            assert isinstance(expected, _core.Request)
            error_of(await peer.recv(), None, -32601)
            assert got == []


# Likewise success responses: one with an integer or string id and no other member goes straight to
# the caller waiting on it; every other response line goes through parse.  Each line below answers
# request 0 (or tries to); the caller must see what parse's classification means.
RESPONSE_SHAPES = [
    b'{"jsonrpc":"2.0","id":0,"result":{"n":1}}',  # the fast path
    b'{"result":{"n":1},"id":0,"jsonrpc":"2.0"}',  # members in another order
    b'{"jsonrpc":"2.0","id":0,"result":null}',  # a null result
    b'{"jsonrpc":"2.0","id":0,"result":{"n":1},"x":2}',  # another member: still a response
    b'{"jsonrpc":"2.0","id":"0","result":{"n":1}}',  # a string id we never sent: dropped
    b'{"jsonrpc":"2.0","id":0,"error":{"code":-1,"message":"no"}}',  # an error response
    b'{"jsonrpc":"2.0","id":0,"result":1,"error":{"code":-1,"message":"no"}}',  # both: -32600
    b'{"jsonrpc":"1.0","id":0,"result":{"n":1}}',  # wrong version: -32600
    b'{"id":0,"result":{"n":1},"x":1}',  # no version: -32600
    b'{"jsonrpc":"2.0","id":null,"result":{"n":1}}',  # a null id: -32600
    b'{"jsonrpc":"2.0","id":true,"result":{"n":1}}',  # a boolean id: -32600
    b'{"jsonrpc":"2.0","id":0.5,"result":{"n":1}}',  # a fractional id: -32600
    b'{"jsonrpc":"2.0","method":"a/b","result":{"n":1},"id":0}',  # a method: a request, not a response
]


@pytest.mark.parametrize("line", RESPONSE_SHAPES)
async def test_a_response_line_is_handled_as_parse_classifies_it(line: bytes, autojump_clock: MockClock) -> None:
    from acp_trio import _core

    expected = _core.parse(line)
    outcome: list[Any] = []
    done = trio.Event()
    async with connected() as (conn, peer):
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                try:
                    outcome.append(("result", await conn.request("a/ask", {})))
                except RequestError as exc:
                    outcome.append(("error", exc.code))
                done.set()

            nursery.start_soon(call)
            request = await peer.recv()
            assert request["id"] == 0
            await peer.send_raw(line + b"\n")
            if type(expected) is _core.Response and expected.id == 0:
                with trio.fail_after(5):
                    await done.wait()
                assert outcome == [("result", expected.result)]
            elif type(expected) is _core.ErrorResponse:
                with trio.fail_after(5):
                    await done.wait()
                assert outcome == [("error", expected.error.code)]
            else:
                if isinstance(expected, _core.Invalid):
                    error_of(await peer.recv(), expected.id, expected.error.code)
                elif isinstance(expected, _core.Request):  # no route here: method not found
                    error_of(await peer.recv(), 0, -32601)
                await peer.ping()
                assert outcome == []  # still waiting: the real answer finishes it
                await peer.send({"jsonrpc": "2.0", "id": 0, "result": "late"})
                with trio.fail_after(5):
                    await done.wait()
                assert outcome == [("result", "late")]


async def test_cancel_group_answers_the_group_requests_running_or_just_finished_and_leaves_the_others(
    autojump_clock: MockClock,
) -> None:
    release = trio.Event()
    started: list[Any] = []
    all_started = trio.Event()

    async def ask(params: Any) -> Any:
        started.append(params["n"])
        if len(started) == 4:
            all_started.set()
        if params["n"] == 3:  # returns as its group is cancelled: answers the group's result anyway
            await release.wait()
            return "late"
        await release.wait() if params["group"] == "h" else await trio.sleep_forever()
        return "released"

    def group_of(params: Any) -> Any:
        return params["group"]

    routes = (
        Route("ask", "request", ask, cancel_group=group_of, group_cancelled_result=lambda: "withdrawn"),
        Route("plain", "request", ask, cancel_group=group_of),  # no group result: -32800
    )
    async with connected(*routes) as (conn, peer):
        await peer.request(1, "ask", {"n": 1, "group": "g"})
        await peer.request(2, "plain", {"n": 2, "group": "g"})
        await peer.request(3, "ask", {"n": 3, "group": "g"})
        await peer.request(4, "ask", {"n": 4, "group": "h"})
        with trio.fail_after(5):
            await all_started.wait()
        release.set()  # request 3 is woken: it ends in the same step as the cancellation below
        conn.cancel_group("g")
        answers = {}
        for _ in range(4):
            message = await peer.recv()
            answers[message["id"]] = message
        conn.cancel_group("g")  # nothing left in it: nothing happens
        await peer.ping()
    assert answers[1] == {"jsonrpc": "2.0", "id": 1, "result": "withdrawn"}
    error_of(answers[2], 2, -32800)
    assert answers[3] == {"jsonrpc": "2.0", "id": 3, "result": "withdrawn"}
    assert answers[4] == {"jsonrpc": "2.0", "id": 4, "result": "released"}  # another group


async def test_a_handler_that_cancels_its_own_group_in_its_first_step_answers_the_group_result(
    autojump_clock: MockClock,
) -> None:
    """The reader runs a request's first step itself, and one in a cancel group joins its group
    only if it has to wait: cancelling the group during that step still answers the group's result,
    whether the handler then returns at once or waits.  Cancelling another group, or the same group
    in an earlier request's step, does not."""
    conns: list[Connection] = []

    async def withdraw(params: Any) -> Any:
        if params["cancel"] is not None:
            conns[0].cancel_group(params["cancel"])
        if params["then"] == "wait":
            await trio.sleep_forever()
        return "answered anyway"

    route = Route(
        "withdraw", "request", withdraw, cancel_group=lambda p: p["group"], group_cancelled_result=lambda: "withdrawn"
    )
    async with connected(route) as (conn, peer):
        conns.append(conn)
        await peer.request(1, "withdraw", {"group": "g", "cancel": "g", "then": "return"})
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 1, "result": "withdrawn"}
        await peer.request(2, "withdraw", {"group": "g", "cancel": "g", "then": "wait"})
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 2, "result": "withdrawn"}
        await peer.request(3, "withdraw", {"group": "g", "cancel": "h", "then": "return"})
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 3, "result": "answered anyway"}
        await peer.request(4, "withdraw", {"group": "g", "cancel": None, "then": "return"})
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 4, "result": "answered anyway"}
        await peer.request(5, "withdraw", {"group": "g", "cancel": None, "then": "wait"})
        await trio.testing.wait_all_tasks_blocked()
        conn.cancel_group("g")  # the one that waits joined its group: it is withdrawn
        assert await peer.recv() == {"jsonrpc": "2.0", "id": 5, "result": "withdrawn"}
        await peer.ping()


# And requests: one with object params and an integer or string id goes from orjson straight to its
# route; every other request line goes through parse.  The route answers what it was given.
REQUEST_SHAPES = [
    b'{"jsonrpc":"2.0","id":1,"method":"a/ask","params":{"n":1}}',  # the fast path
    b'{"params":{"n":1},"method":"a/ask","id":1,"jsonrpc":"2.0"}',  # members in another order
    b'{"jsonrpc":"2.0","id":"r1","method":"a/ask","params":{"n":1}}',  # a string id
    b'{"jsonrpc":"2.0","id":1,"method":"a/ask"}',  # no params: {} for the handler
    b'{"jsonrpc":"2.0","id":1,"method":"a/ask","params":null}',  # null params: as absent
    b'{"jsonrpc":"2.0","id":1,"method":"a/ask","params":[1,2]}',  # array params
    b'{"jsonrpc":"2.0","id":1,"method":"a/ask","params":{"n":1},"result":2}',  # a stray member
    b'{"jsonrpc":"2.0","id":null,"method":"a/ask","params":{"n":1}}',  # a null id: answered with null
    b'{"jsonrpc":"2.0","id":true,"method":"a/ask","params":{"n":1}}',  # a boolean id: -32600
    b'{"jsonrpc":"2.0","id":1.5,"method":"a/ask","params":{"n":1}}',  # a fractional id: -32600
    b'{"jsonrpc":"2.0","id":1,"method":7,"params":{"n":1}}',  # method not a string: -32600
    b'{"jsonrpc":"2.0","id":1,"method":"a/ask","params":"x"}',  # invalid params: -32600
    b'{"jsonrpc":"1.0","id":1,"method":"a/ask","params":{"n":1}}',  # wrong version: -32600
    b'{"jsonrpc":"2.0","id":1,"method":"a/other","params":{"n":1}}',  # no such method: -32601
]


@pytest.mark.parametrize("line", REQUEST_SHAPES)
async def test_a_request_line_is_handled_as_parse_classifies_it(line: bytes, autojump_clock: MockClock) -> None:
    from acp_trio import _core

    async def ask(params: Any) -> Any:
        return {"got": params}

    expected = _core.parse(line)
    async with connected(Route("a/ask", "request", ask)) as (_conn, peer):
        await peer.send_raw(line + b"\n")
        answer = await peer.recv()
        if isinstance(expected, _core.Invalid):
            error_of(answer, expected.id, expected.error.code)
        elif expected.method != "a/ask":
            error_of(answer, expected.id, -32601)
        else:
            params = {} if expected.params is None else expected.params
            assert answer == {"jsonrpc": "2.0", "id": expected.id, "result": {"got": params}}


async def test_notification_queue_sends_what_queue_notification_sends(autojump_clock: MockClock) -> None:
    taps: list[bytes] = []
    async with connected() as (conn, peer):
        queue = conn.notification_queue("a/note")
        assert queue({"n": 1}) is False  # nothing to wait for: far below the high-water mark
        assert queue(None) is False
        conn.tap = lambda direction, line: taps.append(line)
        queue({"n": 2})  # with a tap: through queue_notification, which shows it the line
        conn.queue_notification("a/note", {"n": 3})
        got = [await peer.recv() for _ in range(4)]
        await conn.aclose()
        with pytest.raises(ConnectionClosed):
            queue({"n": 4})
    assert got == [
        {"jsonrpc": "2.0", "method": "a/note", "params": {"n": 1}},
        {"jsonrpc": "2.0", "method": "a/note"},
        {"jsonrpc": "2.0", "method": "a/note", "params": {"n": 2}},
        {"jsonrpc": "2.0", "method": "a/note", "params": {"n": 3}},
    ]
    assert taps == [encode_notification("a/note", {"n": 2}), encode_notification("a/note", {"n": 3})]


# -- serve_until_closed ----------------------------------------------------------------------------


async def test_serve_until_closed_serves_in_the_calling_task_until_the_peer_leaves_then_closes_the_streams(
    autojump_clock: MockClock,
) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    conn = Connection(ours, ours, {PING: Route(PING, "request", pong)})
    peer = RawPeer(theirs.send_stream, theirs.receive_stream)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.serve_until_closed)
            await peer.send({"jsonrpc": "2.0", "id": 1, "method": PING, "params": {}})
            assert await peer.recv() == {"jsonrpc": "2.0", "id": 1, "result": "pong"}
            await theirs.send_stream.aclose()  # the peer leaves: serve_until_closed returns
        assert conn.closed
        with pytest.raises(trio.ClosedResourceError):
            await ours.send_stream.send_all(b"x")  # and it closed our streams


async def test_serve_until_closed_returns_after_aclose_and_a_pending_request_fails_connection_closed(
    autojump_clock: MockClock,
) -> None:
    ours, _theirs = trio.testing.memory_stream_pair()
    conn = Connection(ours, ours, {})
    with trio.fail_after(10):
        failed: list[BaseException] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.serve_until_closed)
            await trio.testing.wait_all_tasks_blocked()

            async def ask() -> None:
                try:
                    await conn.request(PING, {})
                except ConnectionClosed as exc:
                    failed.append(exc)

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            await conn.aclose()
        assert conn.closed and len(failed) == 1

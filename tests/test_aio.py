"""acp_trio.aio, trio → asyncio: asyncio libraries awaited from trio (and from an acp-trio agent's
turn) through trio-asyncio, with cancellation and errors crossing both ways.

Real asyncio libraries, no mocks of them: ``asyncio.start_server`` / ``open_connection`` (sockets on
127.0.0.1), ``asyncio.create_subprocess_exec``, httpx2's ``AsyncClient`` and anyio on the asyncio
backend.  No autojump clock: the asyncio side waits on real sockets; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from types import ModuleType
from typing import Any

import anyio
import httpx2
import pytest
import sniffio
import trio

from acp_schema import v1, v2
from acp_trio import RequestError, aio, neutral
from acp_trio.testing import FakeClient, pair

DEADLINE = 10  # seconds; each of these takes milliseconds


class Silent:
    """An asyncio TCP server on 127.0.0.1 that accepts and never writes (a model that never answers)."""

    def __init__(self) -> None:
        self.accepted: asyncio.Event | None = None
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.accepted = asyncio.Event()
        accepted = self.accepted

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set()
            await reader.read()  # until the peer closes
            writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def read_line(port: int, events: list[str]) -> bytes:
    """asyncio: connect, then wait for a line the server never sends; records what it saw."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await reader.readline()
    except asyncio.CancelledError:
        events.append("asyncio saw CancelledError")
        raise
    finally:
        writer.close()
        events.append("asyncio finally ran")


async def echo_upper(port: int, text: bytes) -> bytes:
    """asyncio: one line to an upper-casing server, its answer back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(text + b"\n")
    await writer.drain()
    answer = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return answer


async def start_upper_server() -> asyncio.Server:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write((await reader.readline()).upper())
        await writer.drain()
        writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def test_run_awaits_asyncio_sockets_and_a_subprocess_and_the_library_sees_asyncio() -> None:
    with trio.fail_after(DEADLINE):
        async with aio.open_loop() as loop:
            server = await aio.run(start_upper_server)
            port = server.sockets[0].getsockname()[1]
            assert await aio.run(echo_upper, port, text=b"hello") == b"HELLO\n"
            server.close()
            await aio.run(server.wait_closed)

            async def child() -> tuple[bytes, int | None, str, asyncio.AbstractEventLoop]:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", "print('from the child')", stdout=asyncio.subprocess.PIPE
                )
                out, _ = await proc.communicate()
                return out, proc.returncode, sniffio.current_async_library(), asyncio.get_running_loop()

            out, code, library, running = await aio.run(child)
    assert (out.strip(), code, library) == (b"from the child", 0, "asyncio")
    assert running is loop
    assert sniffio.current_async_library() == "trio"  # and the caller is still trio


async def test_open_loop_is_reentrant_and_run_outside_it_says_to_open_one() -> None:
    async with aio.open_loop() as outer:
        async with aio.open_loop() as inner:
            assert inner is outer
        assert await aio.run(asyncio.sleep, 0, result="still open") == "still open"  # the inner block left it open
    with pytest.raises(RuntimeError, match=r"acp_trio\.aio\.open_loop\(\)"):
        await aio.run(asyncio.sleep, 0)
    with pytest.raises(RuntimeError, match=r"acp_trio\.aio\.open_loop\(\)"):
        async for _ in aio.iterate(anyio_numbers(1)):
            pass


async def test_run_takes_the_function_not_a_coroutine_object() -> None:
    async with aio.open_loop():
        with pytest.raises(TypeError, match=r"run\(fn, \*args\), not run\(fn\(\*args\)\)"):
            await aio.run(asyncio.sleep(0))  # type: ignore[arg-type]


async def test_a_trio_cancel_cancels_the_asyncio_task_and_run_returns_after_its_finally() -> None:
    events: list[str] = []
    silent = Silent()
    with trio.fail_after(DEADLINE):
        async with aio.open_loop():
            port = await aio.run(silent.start)
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:

                    async def cancel_once_connected() -> None:
                        assert silent.accepted is not None
                        await aio.run(silent.accepted.wait)
                        scope.cancel()

                    nursery.start_soon(cancel_once_connected)
                    await aio.run(read_line, port, events)
                    events.append("run returned")  # never: it raises trio.Cancelled
            events.append("trio saw the cancel")
            await aio.run(silent.stop)
    assert scope.cancelled_caught
    assert events == ["asyncio saw CancelledError", "asyncio finally ran", "trio saw the cancel"]


async def test_an_asyncio_side_cancellation_is_cancelled_by_asyncio_not_a_trio_cancel() -> None:
    silent = Silent()

    async def cancelled_by_itself(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_soon(task.cancel)  # asyncio code cancels it, not trio
        try:
            return await reader.readline()
        finally:
            writer.close()

    with trio.fail_after(DEADLINE):
        async with aio.open_loop():
            port = await aio.run(silent.start)
            with pytest.raises(
                aio.CancelledByAsyncio, match=r"cancelled_by_itself.*cancelled by asyncio code"
            ) as caught:
                await aio.run(cancelled_by_itself, port)
            await aio.run(silent.stop)
    assert isinstance(caught.value.__cause__, asyncio.CancelledError)


# -- iterate: asyncio async iterators from trio ----------------------------------------------------


async def anyio_numbers(count: int, events: list[str] | None = None) -> AsyncIterator[int]:
    """An asyncio async generator that holds an anyio cancel scope (task-bound) across its yields."""
    try:
        with anyio.CancelScope():
            for number in range(count):
                await anyio.sleep(0)
                yield number
    except asyncio.CancelledError:
        if events is not None:
            events.append("generator saw CancelledError")
        raise
    finally:
        if events is not None:
            events.append("generator finally ran")


async def test_iterate_streams_an_asyncio_generator_in_one_task_to_its_end() -> None:
    events: list[str] = []
    with trio.fail_after(DEADLINE):
        async with aio.open_loop():
            items = [n async for n in aio.iterate(anyio_numbers(5, events))]
    assert items == [0, 1, 2, 3, 4]
    assert events == ["generator finally ran"]


async def test_iterate_leaving_early_closes_the_generator_and_errors_come_out_as_themselves() -> None:
    events: list[str] = []

    async def failing() -> AsyncIterator[str]:
        yield "first"
        raise LookupError("the stream broke")

    with trio.fail_after(DEADLINE):
        async with aio.open_loop():
            async with aio.iterate(anyio_numbers(100, events)) as numbers:
                async for number in numbers:
                    if number == 2:
                        break
            # closed at aclose, not later: GeneratorExit at its yield, or CancelledError while it reads ahead
            assert events in (["generator finally ran"], ["generator saw CancelledError", "generator finally ran"])
            seen: list[str] = []
            with pytest.raises(LookupError, match="the stream broke"):
                async for text in aio.iterate(failing()):
                    seen.append(text)
    assert seen == ["first"]


async def test_a_trio_cancel_while_iterating_cancels_the_generator_first() -> None:
    events: list[str] = []
    silent = Silent()

    async def lines(port: int) -> AsyncIterator[bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            yield b"connected"
            yield await reader.readline()  # never comes
        except asyncio.CancelledError:
            events.append("generator saw CancelledError")
            raise
        finally:
            writer.close()
            events.append("generator finally ran")

    with trio.fail_after(DEADLINE):
        async with aio.open_loop():
            port = await aio.run(silent.start)
            got: list[bytes] = []
            with trio.move_on_after(0.2) as scope:  # real time: the generator waits on a real socket
                async for line in aio.iterate(lines(port)):
                    got.append(line)
            events.append("trio saw the cancel")
            await aio.run(silent.stop)
    assert scope.cancelled_caught and got == [b"connected"]
    assert events == ["generator saw CancelledError", "generator finally ran", "trio saw the cancel"]


# -- over a real connection: an acp-trio agent whose turn awaits asyncio libraries -----------------


class AsyncioAgent(neutral.Agent):
    """A version-neutral agent whose turn awaits ``work`` (an asyncio coroutine function) through
    ``aio.run`` and says what it returned."""

    info = neutral.AgentInfo(name="asyncio-agent", version="1")

    def __init__(self, work: Callable[[], Awaitable[str]]) -> None:
        super().__init__()
        self.work = work

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        await turn.say(await aio.run(self.work))
        return "end_turn"


@pytest.mark.parametrize("protocol", [1, 2])
async def test_session_cancel_cancels_the_asyncio_call_of_a_turn_before_the_turn_ends(protocol: int) -> None:
    events: list[str] = []
    silent = Silent()
    with trio.fail_after(DEADLINE):
        async with aio.open_loop():
            port = await aio.run(silent.start)

            async def work() -> str:
                return (await read_line(port, events)).decode()

            client = FakeClient()
            async with pair(AsyncioAgent(work), client, protocol=protocol) as p:
                session_id = await client.new_session("/work")
                async with trio.open_nursery() as nursery:

                    async def cancel_once_connected() -> None:
                        assert silent.accepted is not None
                        await aio.run(silent.accepted.wait)
                        await client.cancel(session_id)

                    nursery.start_soon(cancel_once_connected)
                    stop_reason = await client.prompt(session_id, "wait for the model")
                    events.append(f"the client got {stop_reason}")
                assert p.protocol_version == protocol
            await aio.run(silent.stop)
    assert events == ["asyncio saw CancelledError", "asyncio finally ran", "the client got cancelled"]


class StreamingAgent(neutral.Agent):
    """Streams what an asyncio async generator yields, through ``aio.iterate`` (a model's stream)."""

    info = neutral.AgentInfo(name="streaming-agent", version="1")

    def __init__(self, stream: Callable[[], AsyncIterator[str]]) -> None:
        super().__init__()
        self.stream = stream

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        async with aio.iterate(self.stream()) as chunks:
            async for chunk in chunks:
                await turn.say(chunk)
        return "end_turn"


class ChunkWatcher(FakeClient):
    """The test kit's client, with an event set at the first agent message chunk."""

    def __init__(self) -> None:
        super().__init__()
        self.chunk = trio.Event()

    async def session_update(self, params: Any) -> None:
        await super().session_update(params)
        if params.update.session_update == "agent_message_chunk":
            self.chunk.set()


@pytest.mark.parametrize("protocol", [1, 2])
async def test_session_cancel_stops_an_asyncio_stream_of_a_turn_before_the_turn_ends(protocol: int) -> None:
    events: list[str] = []
    silent = Silent()
    with trio.fail_after(DEADLINE):
        async with aio.open_loop():
            port = await aio.run(silent.start)

            async def stream() -> AsyncIterator[str]:  # the first chunk, then a model that stalls
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                try:
                    yield "thinking"
                    yield (await reader.readline()).decode()
                except asyncio.CancelledError:
                    events.append("the stream saw CancelledError")
                    raise
                finally:
                    writer.close()
                    events.append("the stream's finally ran")

            client = ChunkWatcher()
            async with pair(StreamingAgent(stream), client, protocol=protocol):
                session_id = await client.new_session("/work")
                async with trio.open_nursery() as nursery:

                    async def cancel_after_the_first_chunk() -> None:
                        assert silent.accepted is not None
                        await aio.run(silent.accepted.wait)
                        await client.chunk.wait()
                        await client.cancel(session_id)

                    nursery.start_soon(cancel_after_the_first_chunk)
                    stop_reason = await client.prompt(session_id, "stream")
                    events.append(f"the client got {stop_reason}")
            await aio.run(silent.stop)
    assert events == ["the stream saw CancelledError", "the stream's finally ran", "the client got cancelled"]


async def http_status(status: int) -> str:
    """asyncio: a GET with httpx2's AsyncClient (anyio on asyncio) to an in-process handler; a 404
    is the ACP error 'Resource not found'."""
    transport = httpx2.MockTransport(lambda request: httpx2.Response(status, text=f"status {status}"))
    async with httpx2.AsyncClient(transport=transport) as http:
        response = await http.get("https://models.example/v1/answer")
    if response.status_code == 404:
        raise RequestError.resource_not_found(str(response.url))
    response.raise_for_status()
    return f"{sniffio.current_async_library()}: {response.text}"


async def cancel_itself() -> str:
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    await asyncio.sleep(1)
    return "never"


async def fail_plainly() -> str:
    await asyncio.sleep(0)
    raise ValueError("the model's answer did not parse")


def check_failure(variant: ModuleType, outcome: Any, code: int, message: str) -> None:
    if variant is v1:
        assert isinstance(outcome, RequestError)
        assert (outcome.code, outcome.message) == (code, message)
    else:
        idle = outcome[-1][1]
        assert isinstance(idle, v2.IdleStateUpdateSessionUpdate)
        assert idle.stop_reason == "error" and isinstance(idle.error, v2.Error)
        assert (idle.error.code, idle.error.message) == (code, message)


@pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])
@pytest.mark.parametrize(
    ("work", "code", "message"),
    [
        (lambda: http_status(404), -32002, "Resource not found"),
        (cancel_itself, -32603, "Internal error"),
        (fail_plainly, -32603, "Internal error"),
    ],
    ids=["request-error", "asyncio-cancel", "other-exception"],
)
async def test_an_asyncio_failure_in_a_turn_is_the_json_rpc_error_a_trio_one_would_be(
    variant: ModuleType, work: Callable[[], Awaitable[str]], code: int, message: str
) -> None:
    with trio.fail_after(DEADLINE):
        async with aio.open_loop():
            client = FakeClient()
            async with pair(AsyncioAgent(work), client, protocol=variant.PROTOCOL_VERSION):
                session_id = await client.new_session("/work")
                if variant is v1:
                    with pytest.raises(RequestError) as caught:
                        await client.prompt(session_id, "go")
                    check_failure(variant, caught.value, code, message)
                else:
                    assert await client.prompt(session_id, "go") == "error"
                    check_failure(variant, client.updates, code, message)

            client = FakeClient()  # and the same agent answering: httpx2 on asyncio inside the turn
            async with pair(AsyncioAgent(lambda: http_status(200)), client, protocol=variant.PROTOCOL_VERSION):
                session_id = await client.new_session("/work")
                assert await client.prompt(session_id, "go") == "end_turn"
                said = [u.content.text for _, u in client.updates if u.session_update == "agent_message_chunk"]
                assert said == ["asyncio: status 200"]


async def test_an_exception_in_the_open_loop_block_comes_out_as_itself() -> None:
    with pytest.raises(LookupError, match="the body's own"):
        async with aio.open_loop():
            await aio.run(asyncio.sleep, 0)
            raise LookupError("the body's own")


ANYIO_FIRST = """
import anyio._backends._asyncio  # imported before trio_asyncio, as anyio's pytest plugin may do
import anyio
import trio
from acp_trio import aio

async def anyio_work():
    with anyio.move_on_after(0.01):  # anyio's timeouts and task groups look up the running loop
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.sleep, 1)
    return "anyio ran"

async def main():
    async with aio.open_loop():
        print(await aio.run(anyio_work))

trio.run(main)
"""


def test_anyio_imported_before_trio_asyncio_still_finds_the_running_loop() -> None:
    done = subprocess.run([sys.executable, "-c", ANYIO_FIRST], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "anyio ran\n"), done.stderr

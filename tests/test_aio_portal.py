"""acp_trio.aio, asyncio → trio: an asyncio program awaits trio code (acp-trio's client) through
``trio_portal()``, trio in guest mode on the running asyncio loop.

Plain (sync) tests that call ``asyncio.run``: the asyncio loop is the host, as in a FastAPI or
Textual app.  Every wait is bounded with ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import sniffio
import trio

from acp_trio import RequestError, aio, neutral, open_memory_pair
from acp_trio.testing import FakeClient

# imported here, not first inside a test's warnings check: on Python 3.12+ trio-asyncio 0.16's import
# warns that asyncio's AbstractChildWatcher is deprecated (its own class, not this code's)
pytest.importorskip("trio_asyncio")

ROOT = Path(__file__).resolve().parents[1]
DEADLINE = 10  # seconds; each of these takes milliseconds


Host = Callable[[Callable[[], Awaitable[Any]]], Any]


def _on_asyncio(main: Callable[[], Awaitable[Any]]) -> Any:
    """asyncio's own loop (a FastAPI server's, ``asyncio.run``'s): the portal is a guest run."""
    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:  # whatever policy is installed
        return runner.run(main())  # type: ignore[arg-type]


def _on_trio_asyncio(main: Callable[[], Awaitable[Any]]) -> Any:
    """A trio-asyncio loop (asyncio code inside ``aio.open_loop()``; ``asyncio.run`` once
    ``trio_asyncio`` is imported): trio runs already, the portal is a trio task of that run."""

    async def in_trio() -> Any:
        async with aio.open_loop():
            return await aio.run(main)

    return trio.run(in_trio)


@pytest.fixture(params=[_on_asyncio, _on_trio_asyncio], ids=["asyncio-loop", "trio-asyncio-loop"])
def run_asyncio(request: pytest.FixtureRequest) -> Host:
    """Runs an asyncio ``main`` on the host loop, failing on any warning (trio's "guest run got
    abandoned" among them)."""
    host: Host = request.param

    def run(main: Callable[[], Awaitable[Any]]) -> Any:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = host(main)
            gc.collect()  # an abandoned guest run warns when it is collected
        assert [str(w.message) for w in caught] == []
        return result

    return run


def test_run_awaits_trio_code_from_asyncio_and_exceptions_cross_as_themselves(run_asyncio: Host) -> None:
    async def trio_side(x: int, *, y: int) -> tuple[int, str]:
        await trio.sleep(0)
        return x + y, sniffio.current_async_library()

    async def refuse() -> None:
        await trio.sleep(0)
        raise RequestError.resource_not_found("file:///nowhere")

    async def main() -> tuple[Any, ...]:
        async with asyncio.timeout(DEADLINE), aio.trio_portal() as portal:
            value = await portal.run(trio_side, 2, y=3)
            with pytest.raises(RequestError) as caught:
                await portal.run(refuse)
            with pytest.raises(TypeError, match=r"run\(fn, \*args\), not run\(fn\(\*args\)\)"):
                await portal.run(trio.sleep(0))  # type: ignore[arg-type]
            return value, caught.value.code, sniffio.current_async_library()

    assert run_asyncio(main) == ((5, "trio"), -32002, "asyncio")


def test_the_portal_is_shared_on_a_loop_and_closed_after_the_last_block(run_asyncio: Host) -> None:
    async def main() -> None:
        async with asyncio.timeout(DEADLINE):
            async with aio.trio_portal() as outer:
                async with aio.trio_portal() as inner:
                    assert inner is outer
                await outer.run(trio.sleep, 0)  # the inner block left it open
            with pytest.raises(RuntimeError, match="portal is closed"):
                await outer.run(trio.sleep, 0)
            async with aio.trio_portal() as again:  # a new trio run on the same loop
                assert again is not outer
                await again.run(trio.sleep, 0)

    run_asyncio(main)


def test_two_tasks_opening_the_portal_at_once_share_it_once_it_serves(run_asyncio: Host) -> None:
    async def user(name: str) -> tuple[aio.TrioPortal, str]:
        async with aio.trio_portal() as portal:
            return portal, await portal.run(trio_echo, name)

    async def main() -> None:
        async with asyncio.timeout(DEADLINE):
            (first, a), (second, b) = await asyncio.gather(user("a"), user("b"))
        assert first is second
        assert (a, b) == ("trio says a", "trio says b")

    run_asyncio(main)


async def trio_echo(name: str) -> str:
    await trio.sleep(0)
    return f"trio says {name}"


def test_an_asyncio_cancel_cancels_the_trio_task_and_run_raises_after_it_finished(run_asyncio: Host) -> None:
    events: list[str] = []

    async def trio_side(started: asyncio.Event) -> None:
        try:
            started.set()  # trio's tasks run in the loop's thread: asyncio objects are theirs too
            await trio.sleep_forever()
        except trio.Cancelled:
            events.append("trio saw Cancelled")
            raise
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.01)  # cleanup that takes a while, awaited before run() raises
            events.append("trio finally ran")

    async def main() -> None:
        async with asyncio.timeout(DEADLINE), aio.trio_portal() as portal:
            started = asyncio.Event()
            task = asyncio.create_task(portal.run(trio_side, started))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            events.append("asyncio saw CancelledError")
            with pytest.raises(TimeoutError):  # asyncio.timeout: the same path, as TimeoutError
                async with asyncio.timeout(0.05):
                    await portal.run(trio_side, asyncio.Event())
            events.append("asyncio saw TimeoutError")

    run_asyncio(main)
    assert events == [
        *("trio saw Cancelled", "trio finally ran", "asyncio saw CancelledError"),
        *("trio saw Cancelled", "trio finally ran", "asyncio saw TimeoutError"),
    ]


def test_a_trio_side_cancel_of_a_pending_run_is_asyncio_cancelled_error_and_leaving_waits_for_trio(
    run_asyncio: Host,
) -> None:
    events: list[str] = []

    async def trio_side(started: asyncio.Event) -> None:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            events.append("trio finally ran")

    async def waiter(portal: aio.TrioPortal, started: asyncio.Event) -> None:
        try:
            await portal.run(trio_side, started)
        except asyncio.CancelledError:
            events.append("the awaiter saw CancelledError")
            raise

    async def main() -> None:
        async with asyncio.timeout(DEADLINE):
            started = asyncio.Event()
            async with aio.trio_portal() as portal:
                task = asyncio.create_task(waiter(portal, started))
                await started.wait()
            events.append("the portal's block has left")  # the trio run has ended: its task too
            with pytest.raises(asyncio.CancelledError):
                await task

    run_asyncio(main)
    assert events[0] == "trio finally ran"  # before leaving the block, and before the awaiter resumed
    assert sorted(events[1:]) == ["the awaiter saw CancelledError", "the portal's block has left"]


class Greeter(neutral.Agent):
    info = neutral.AgentInfo(name="greeter", version="1")

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        for word in ("Hello", " from", " trio"):
            await turn.say(word)
        return "end_turn"


def test_an_asyncio_program_drives_an_acp_trio_client_through_a_turn_in_memory(run_asyncio: Host) -> None:
    async def turn() -> tuple[str, list[str]]:
        client = FakeClient()
        async with open_memory_pair(Greeter(), client.bind) as (_, conn):
            assert conn is client.conn
            await client.initialize()
            session_id = await client.new_session("/work")
            stop_reason = await client.prompt(session_id, "hi")
        said = [u.content.text for _, u in client.updates if u.session_update == "agent_message_chunk"]
        return stop_reason, said

    async def main() -> Any:
        async with asyncio.timeout(DEADLINE), aio.trio_portal() as portal:
            return await portal.run(turn)

    assert run_asyncio(main) == ("end_turn", ["Hello", " from", " trio"])


@asynccontextmanager
async def recording(events: list[str], *, suppress: bool = False) -> AsyncIterator[str]:
    """A trio context manager that says what its exit saw (and may suppress it)."""
    await trio.sleep(0)
    events.append("entered in trio")
    try:
        yield "the value"
    except BaseException as exc:
        events.append(f"its exit saw {type(exc).__name__}")
        if not (suppress and isinstance(exc, Exception)):
            raise
    finally:
        with trio.CancelScope(shield=True):
            await trio.sleep(0)  # a trio checkpoint: it runs in its trio task
        events.append("exited in trio")


@asynccontextmanager
async def failing_entry() -> AsyncIterator[None]:
    await trio.sleep(0)
    raise ZeroDivisionError
    yield  # pragma: no cover


def test_wrap_async_context_holds_a_trio_context_manager_open_across_asyncio_code(run_asyncio: Host) -> None:
    events: list[str] = []

    async def main() -> None:
        async with asyncio.timeout(DEADLINE), aio.trio_portal() as portal:
            async with portal.wrap_async_context(recording(events)) as value:
                assert value == "the value"
                events.append("the asyncio block ran")
            with pytest.raises(LookupError, match="from the block"):  # raised inside the trio one, out as itself
                async with portal.wrap_async_context(recording(events)):
                    raise LookupError("from the block")
            async with portal.wrap_async_context(recording(events, suppress=True)):
                raise ValueError("suppressed by the trio context manager")
            started = asyncio.Event()

            async def cancelled_block() -> None:
                async with portal.wrap_async_context(recording(events)):
                    started.set()
                    await asyncio.sleep(3600)

            task = asyncio.create_task(cancelled_block())
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            with pytest.raises(ZeroDivisionError):  # an entry that fails raises as itself
                async with portal.wrap_async_context(failing_entry()):
                    events.append("never")

    run_asyncio(main)
    assert events == [
        *("entered in trio", "the asyncio block ran", "exited in trio"),
        *("entered in trio", "its exit saw LookupError", "exited in trio"),
        *("entered in trio", "its exit saw ValueError", "exited in trio"),
        *("entered in trio", "its exit saw Cancelled", "exited in trio"),
    ]


def test_an_asyncio_program_holds_an_acp_trio_connection_and_prompts_through_it(run_asyncio: Host) -> None:
    async def main() -> tuple[str, list[str]]:
        client = FakeClient()
        async with asyncio.timeout(DEADLINE), aio.trio_portal() as portal:
            async with portal.wrap_async_context(open_memory_pair(Greeter(), client.bind)):
                await portal.run(client.initialize)
                session_id = await portal.run(client.new_session, "/work")
                stop_reason = await portal.run(client.prompt, session_id, "hi")
        said = [u.content.text for _, u in client.updates if u.session_update == "agent_message_chunk"]
        return stop_reason, said

    assert run_asyncio(main) == ("end_turn", ["Hello", " from", " trio"])


@pytest.mark.one_interpreter  # a process: what it checks is the example's output, not the interpreter
def test_the_asyncio_client_example_runs_a_full_turn_of_the_demo_agent_over_stdio(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", str(ROOT / "examples" / "asyncio_client.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = [line.rstrip() for line in done.stdout.splitlines()]  # each streamed word ends with a space
    assert lines[0] == "Let me read your notes and write a summary."
    assert "Done: summary.txt says 'notes.txt has 2 non-empty lines; the first is: buy milk'" in lines
    assert lines[-1] == "stop reason: end_turn (the asyncio heartbeat ticked meanwhile: yes)"

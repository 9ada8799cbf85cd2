"""Real processes: an agent exits on end of input, and a dying agent says how it died.

Issue 11, items 1 and 2: an agent whose client closes stdin in the middle of a 15 s streaming turn
answers the turn ``cancelled`` and exits by itself (no signal) within ``eof_grace``; a spawned
agent that crashes mid-turn raises :class:`acp_trio.ConnectionClosed` out of ``spawn_agent``
unwrapped, with its exit code or signal and its last stderr lines.  Waits use the real clock,
each bounded by ``trio.fail_after``; the bounds are far below the 15 s turn, so the old behaviour
(the turn kept running after EOF) fails them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

import acp_trio
from acp_schema import v1

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups and signals are POSIX-only")

AGENTS = Path(__file__).parent / "agents"


def agent(name: str) -> str:
    return str(AGENTS / f"{name}.py")


class RawAgent:
    """An agent process driven with raw lines, so nothing of ours shuts it down."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.stdin = process.stdin
        self.stdout = process.stdout
        self.buffer = b""

    async def send(self, message: dict[str, Any]) -> None:
        await self.stdin.send_all(orjson.dumps(message) + b"\n")

    async def recv(self) -> dict[str, Any] | None:
        """The next message, or ``None`` at end of stream."""
        while b"\n" not in self.buffer:
            data = await self.stdout.receive_some(1 << 16)
            if not data:
                return None
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = orjson.loads(line)
        return message

    async def answer_to(self, request_id: int) -> dict[str, Any]:
        while True:
            message = await self.recv()
            assert message is not None, f"end of stream before the answer to {request_id}"
            if message.get("id") == request_id and "method" not in message:
                return message


async def start(args: list[str]) -> RawAgent:
    process = await trio.lowlevel.open_process(
        [sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
    )
    return RawAgent(process)


@pytest.mark.parametrize("version", [1, 2])
async def test_an_agent_whose_stdin_closes_mid_turn_answers_cancelled_and_exits_by_itself(version: int) -> None:
    raw = await start([agent("long_turn_agent"), "15", *(["--v2"] if version == 2 else [])])
    try:
        with trio.fail_after(10):
            init: dict[str, Any] = {"protocolVersion": version}
            if version == 2:
                init["info"] = {"name": "raw-client", "version": "0"}
            await raw.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
            assert (await raw.answer_to(0))["result"]["protocolVersion"] == version
            new = {"cwd": "/", "mcpServers": []} if version == 1 else {"cwd": "/"}
            await raw.send({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": new})
            session_id = (await raw.answer_to(1))["result"]["sessionId"]
            prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}
            await raw.send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt})
            streamed = 0
            while streamed < 5:  # the turn is streaming
                message = await raw.recv()
                assert message is not None
                streamed += message.get("method") in ("session/update", "_test/tick")
        await raw.stdin.aclose()  # the client's shutdown signal, 15 s before the turn would end
        with trio.fail_after(3):  # eof_grace (0.25 s) + cancelling + interpreter exit; the turn has 14 s left
            rest = []
            while (message := await raw.recv()) is not None:
                rest.append(message)
            await raw.process.wait()
        assert raw.process.returncode == 0  # it exited by itself: a signal gives a negative status
        if version == 1:  # the turn was answered while the output was still open
            assert [m["result"] for m in rest if m.get("id") == 2] == [{"stopReason": "cancelled"}]
        else:
            idle = [
                m["params"]["update"]
                for m in rest
                if m.get("method") == "session/update" and m["params"]["update"].get("state") == "idle"
            ]
            assert idle == [{"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}]
    finally:
        if raw.process.returncode is None:
            os.killpg(raw.process.pid, signal.SIGKILL)
            await raw.process.wait()


async def test_spawn_agent_shuts_a_busy_agent_down_by_closing_stdin_alone() -> None:
    """Leaving the block mid-turn: the agent exits after EOF, long before SIGTERM (5 s) would come."""
    client = Recorder()
    with trio.fail_after(8):
        async with acp_trio.spawn_agent(
            sys.executable, [agent("long_turn_agent"), "15"], client=client, shutdown_timeout=5.0
        ) as conn:
            await conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
            session = await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))

            async def turn() -> None:
                with contextlib.suppress(acp_trio.ConnectionClosed):
                    await conn.agent.session_prompt(prompt(session.session_id))

            conn.start_soon(turn)  # still waiting for its answer when the block ends: no $/cancel_request
            await client.streaming.wait()
            started = trio.current_time()
        assert conn.process.returncode == 0  # no signal was needed
        assert trio.current_time() - started < 5.0  # it exited before the SIGTERM step


class Recorder:
    def __init__(self) -> None:
        self.updates = 0
        self.streaming = trio.Event()

    async def session_update(self, params: v1.SessionNotification) -> None:
        self.updates += 1
        if self.updates >= 3:
            self.streaming.set()


def prompt(session_id: str) -> v1.PromptRequest:
    return v1.PromptRequest(session_id=session_id, prompt=[v1.TextContentBlock(text="please")])


async def crash(how: str, lines: int) -> acp_trio.ConnectionClosed:
    """Spawn the crashing agent, prompt it, and return the ConnectionClosed that leaves the block."""
    with trio.fail_after(10):
        try:
            async with acp_trio.spawn_agent(
                sys.executable, [agent("crashing_agent"), how, str(lines)], client=object(), shutdown_timeout=0.5
            ) as conn:
                await conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
                session = await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
                await conn.agent.session_prompt(prompt(session.session_id))
        except acp_trio.ConnectionClosed as exc:  # not an ExceptionGroup around it
            return exc
    raise AssertionError("the prompt should have failed")


async def test_an_agent_exiting_mid_turn_raises_connection_closed_with_its_exit_code_and_stderr() -> None:
    exc = await crash("exit3", 2)
    assert exc.exit_code == 3 and exc.signal is None and exc.pid is not None
    assert exc.stderr_tail[-1] == "fatal: the model endpoint refused the key"
    assert exc.stderr_tail[0].startswith("stderr line 000 ")
    text = str(exc)
    assert f"the agent process (pid {exc.pid}) exited with code 3" in text
    assert text.rstrip().endswith("fatal: the model endpoint refused the key")


async def test_an_agent_killed_by_a_signal_says_which() -> None:
    exc = await crash("kill", 0)
    assert exc.signal == signal.SIGKILL and exc.exit_code is None
    assert "was killed by SIGKILL" in str(exc)
    assert exc.stderr_tail == ("fatal: the model endpoint refused the key",)


async def test_the_stderr_tail_is_bounded_to_20_lines_and_4_kib() -> None:
    exc = await crash("exit3", 200)  # 200 lines of about 200 bytes
    assert 1 <= len(exc.stderr_tail) <= 20
    assert sum(len(line.encode()) + 1 for line in exc.stderr_tail) <= 4096
    assert exc.stderr_tail[-1] == "fatal: the model endpoint refused the key"
    assert exc.stderr_tail[-2].startswith("stderr line 199 ")  # the last lines, not the first


async def test_a_missing_agent_command_is_named_before_anything_starts(tmp_path: Path) -> None:
    built: list[Any] = []
    for command in ("no-such-acp-agent-xyz", str(tmp_path / "no-such-agent")):
        with trio.fail_after(5), pytest.raises(FileNotFoundError) as info:
            async with acp_trio.spawn_agent(command, client=lambda conn: built.append(conn)):
                pytest.fail("the block must not run")
        assert repr(command) in str(info.value)
        assert "agent command not found" in str(info.value)
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(PermissionError, match="not an executable"):
        async with acp_trio.spawn_agent(script, client=object()):
            pytest.fail("the block must not run")
    with pytest.raises(NotADirectoryError, match="working directory"):
        async with acp_trio.spawn_agent(sys.executable, client=object(), cwd=tmp_path / "missing"):
            pytest.fail("the block must not run")
    assert built == []  # no connection was made

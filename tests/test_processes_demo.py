"""The main job, end to end in real processes: ``python -m acp_trio.demo`` and its three modes."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from acp_schema import v1
from acp_trio import AgentSideConnection, open_memory_pair
from acp_trio.demo.client import DemoClient, client_capabilities, demo_client_factory

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the stdio transport is POSIX-only")

DEMO = [sys.executable, "-m", "acp_trio.demo"]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(DEMO + args, capture_output=True, text=True, timeout=60, cwd=cwd, check=False)


def test_demo_runs_a_prompt_turn_over_stdio_and_prints_the_transcript(tmp_path: Path) -> None:
    result = run([], tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # the client spawned the agent, initialized, opened a session and ran the turn
    assert "connected to acp-trio demo agent, protocol version 1" in out
    assert "agent: Let me read your notes and write a summary." in out
    assert "[permission] Read notes.txt: choosing 'Allow' (allow_once)" in out
    assert "[fs] read " in out and "notes.txt (4 line(s))" in out
    assert "[tool call_read] completed 4 non-empty lines" in out
    assert "[fs] wrote " in out and "summary.txt" in out
    assert out.index("[tool call_read] completed") < out.index("[tool call_write] completed")
    assert "[turn ended: end_turn]" in out
    assert "summary.txt now reads: notes.txt has 4 non-empty lines" in out


def test_demo_client_drives_an_agent_command_in_a_chosen_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n\nbeta\n", encoding="utf-8")
    result = run(["--cwd", str(tmp_path), "--agent", "--", *DEMO, "--serve-agent"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[turn ended: end_turn]" in result.stdout
    assert (tmp_path / "summary.txt").read_text(encoding="utf-8") == (
        "notes.txt has 2 non-empty lines; the first is: alpha\n"
    )


def test_demo_reports_a_missing_file_through_the_tool_call_not_a_crash(tmp_path: Path) -> None:
    result = run(["--cwd", str(tmp_path)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[tool call_read] failed" in result.stdout
    assert "I could not read notes.txt: Resource not found." in result.stdout
    assert not (tmp_path / "summary.txt").exists()


def test_demo_agent_answers_a_raw_initialize_on_stdio(tmp_path: Path) -> None:
    request = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n'
    result = subprocess.run(
        [*DEMO, "--serve-agent"], input=request, capture_output=True, timeout=60, cwd=tmp_path, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,')


def test_demo_refuses_an_agent_command_that_does_not_exist(tmp_path: Path) -> None:
    result = run(["--agent", "--", str(tmp_path / "no-such-agent")], tmp_path)
    assert result.returncode == 2
    assert "error: cannot start the agent" in result.stderr and "no-such-agent" in result.stderr
    assert "Traceback" not in result.stderr


class TerminalAgent:
    """Runs one command in a client terminal, as an agent would."""

    def __init__(self, conn: AgentSideConnection) -> None:
        self.client = v1.ClientPeer(conn)

    async def run(self, session_id: str, command: str, args: list[str], limit: int | None = None) -> tuple[Any, Any]:
        created = await self.client.terminal_create(
            v1.CreateTerminalRequest(session_id=session_id, command=command, args=args, output_byte_limit=limit)
        )
        exited = await self.client.terminal_wait_for_exit(
            v1.WaitForTerminalExitRequest(session_id=session_id, terminal_id=created.terminal_id)
        )
        output = await self.client.terminal_output(
            v1.TerminalOutputRequest(session_id=session_id, terminal_id=created.terminal_id)
        )
        await self.client.terminal_release(
            v1.ReleaseTerminalRequest(session_id=session_id, terminal_id=created.terminal_id)
        )
        return exited, output


async def test_demo_client_runs_terminal_commands_in_the_session_directory(tmp_path: Path) -> None:
    out = io.StringIO()
    async with open_memory_pair(TerminalAgent, demo_client_factory(out)) as (agent_conn, client_conn):
        client: DemoClient = client_conn.handler
        client.allow_root(tmp_path)
        agent = v1.AgentPeer(client_conn)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                client.nursery = nursery
                await agent.initialize(
                    v1.InitializeRequest(protocol_version=1, client_capabilities=client_capabilities())
                )
                term: TerminalAgent = agent_conn.handler
                exited, output = await term.run("s", sys.executable, ["-c", "import os; print(os.getcwd())"])
                assert exited.exit_code == 0 and exited.signal is None
                assert output.output.strip() == str(tmp_path.resolve())
                assert output.truncated is False and output.exit_status.exit_code == 0
                exited, output = await term.run("s", sys.executable, ["-c", "print('é' * 50, end='')"], limit=11)
                assert output.truncated is True
                assert output.output == "é" * 5  # cut from the front, never inside a character
                exited, _ = await term.run("s", sys.executable, ["-c", "import os; os.kill(os.getpid(), 9)"])
                assert exited.exit_code is None and exited.signal == "SIGKILL"
                nursery.cancel_scope.cancel()
    assert "[terminal term_1] $ " in out.getvalue()

"""The main job, end to end in real processes: ``python -m acp_trio.demo`` and its three modes."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import acp_trio
from acp_schema import v1
from acp_trio import UNSET, AgentSideConnection, open_memory_pair
from acp_trio.demo.client import DemoClient, demo_client_factory

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
    # the word count ran in a client terminal, in the session directory, shown in its tool call
    assert "[tool call_count] Count words in notes.txt (execute): in_progress" in out
    assert "[terminal term_1] 18\n" in out and "[terminal term_1] exited (0)" in out
    assert "[tool call_count] completed [terminal term_1] 18 words" in out
    assert "[fs] wrote " in out and "summary.txt" in out
    assert out.index("[tool call_read] completed") < out.index("[tool call_write] completed")
    assert "[turn ended: end_turn]" in out
    assert "summary.txt now reads: notes.txt has 4 non-empty lines" in out
    assert out.endswith("It has 18 words.\n")


def test_demo_with_deny_stops_at_the_permission_request(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n", encoding="utf-8")
    result = run(["--cwd", str(tmp_path), "--deny"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[permission] Read notes.txt: choosing 'Reject' (reject_once)" in result.stdout
    assert "[tool call_read] failed" in result.stdout
    assert "Permission denied, so I stopped here." in result.stdout
    assert "[fs] read" not in result.stdout
    assert not (tmp_path / "summary.txt").exists()


def test_demo_client_drives_an_agent_command_in_a_chosen_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n\nbeta\n", encoding="utf-8")
    result = run(["--cwd", str(tmp_path), "--agent", "--", *DEMO, "--serve-agent"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[turn ended: end_turn]" in result.stdout
    assert (tmp_path / "summary.txt").read_text(encoding="utf-8") == (
        "notes.txt has 2 non-empty lines; the first is: alpha\nIt has 2 words.\n"
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
    """Opens a session and runs commands in client terminals, as an agent would."""

    def __init__(self, conn: AgentSideConnection) -> None:
        self.client = v1.ClientPeer(conn)

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s")

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
        agent = v1.AgentPeer(client_conn)
        with trio.fail_after(30):
            await agent.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=client.capabilities))
            await agent.session_new(v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[]))
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
            # a working directory outside the session's roots is refused
            with pytest.raises(acp_trio.RequestError) as info:
                await term.client.terminal_create(
                    v1.CreateTerminalRequest(session_id="s", command=sys.executable, cwd=str(tmp_path.parent))
                )
            assert info.value.code == acp_trio.INVALID_PARAMS
    transcript = out.getvalue()
    assert "[terminal term_1] $ " in transcript and "[terminal term_3] exited (SIGKILL)" in transcript


class BareClient:
    """A client that advertises neither ``fs`` nor ``terminal`` and allows every permission request."""

    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def session_update(self, params: v1.SessionNotification) -> None:
        self.updates.append(params.update)

    async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        allow = next(o for o in params.options if o.kind.startswith("allow"))
        return v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id=allow.option_id))


async def test_demo_agent_does_the_work_itself_for_a_client_without_fs_or_terminal(tmp_path: Path) -> None:
    """A v1 client that offers neither ``fs`` nor ``terminal``: the agent reads and writes the files
    itself and runs the word count itself, shown as the tool call's text (v1 has no display
    terminal: mapping row T14), never as terminal content the client did not offer."""
    (tmp_path / "notes.txt").write_text("one two three\n", encoding="utf-8")
    client = BareClient()
    with trio.fail_after(30):
        async with acp_trio.spawn_agent(DEMO[0], [*DEMO[1:], "--serve-agent"], client=client) as conn:
            await conn.agent.initialize(v1.InitializeRequest(protocol_version=1))  # no fs, no terminal
            session = await conn.agent.session_new(v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[]))
            response = await conn.agent.session_prompt(
                v1.PromptRequest(session_id=session.session_id, prompt=[v1.TextContentBlock(text="summarise")])
            )
    assert response.stop_reason == "end_turn"
    tool_updates = [
        u for u in client.updates if isinstance(u, v1.ToolCallSessionUpdate | v1.ToolCallUpdateSessionUpdate)
    ]
    created = [u.tool_call_id for u in tool_updates if isinstance(u, v1.ToolCallSessionUpdate)]
    assert created == ["call_read", "call_count", "call_write"]  # each created once, as v1's tool_call
    final = {u.tool_call_id: u.status for u in tool_updates if isinstance(u.status, str)}
    assert final == {"call_read": "completed", "call_count": "completed", "call_write": "completed"}
    contents = [u.content for u in tool_updates if isinstance(u.content, list)]
    assert not any(isinstance(item, v1.TerminalToolCallContent) for content in contents for item in content)
    count = [u for u in tool_updates if u.tool_call_id == "call_count" and isinstance(u.content, list)][-1]
    texts = [item.content.text for item in count.content]  # type: ignore[union-attr]
    assert texts[0].startswith(f"$ {sys.executable} -c ") and texts[0].endswith("\n3\n[exit 0]")
    assert texts[1:] == ["3 words"]
    write = [u for u in tool_updates if u.tool_call_id == "call_write" and isinstance(u.content, list)][-1]
    [diff] = write.content  # type: ignore[misc]
    assert isinstance(diff, v1.DiffToolCallContent) and diff.path == str(tmp_path / "summary.txt")
    assert diff.old_text in (None, UNSET) and diff.new_text == (tmp_path / "summary.txt").read_text(encoding="utf-8")
    assert diff.new_text == "notes.txt has 1 non-empty lines; the first is: one two three\nIt has 3 words.\n"
    said = "".join(u.content.text for u in client.updates if isinstance(u, v1.AgentMessageChunkSessionUpdate))
    assert "Done: summary.txt says" in said


@pytest.mark.parametrize("protocol", ["1", "2"])
async def test_demo_serves_the_agent_remotely_and_its_client_connects_by_url(tmp_path: Path, protocol: str) -> None:
    server = await trio.lowlevel.open_process(
        [*DEMO, "--serve", "http://127.0.0.1:0", "--token", "s3cret"], stderr=subprocess.PIPE, start_new_session=True
    )
    assert server.stderr is not None
    try:
        with trio.fail_after(30):
            seen = b""
            while b"serving the demo agent on " not in seen or not seen.endswith(b"\n"):
                chunk = await server.stderr.receive_some(1 << 16)
                assert chunk, seen.decode()
                seen += chunk
            url = next(w for w in seen.decode().split() if w.startswith("ws://") and w.endswith("/acp"))
            client = await trio.run_process(
                [*DEMO, "--protocol", protocol, "--url", url, "--token", "s3cret"], capture_stdout=True, cwd=tmp_path
            )
            out = client.stdout.decode()
            assert "[turn ended: end_turn]" in out
            assert "summary.txt now reads: notes.txt has 4 non-empty lines" in out
            refused = await trio.run_process(
                [*DEMO, "--url", url, "--token", "wrong"], capture_stdout=True, capture_stderr=True, check=False
            )
            assert refused.returncode == 2 and b"401" in refused.stderr
    finally:
        server.terminate()
        with trio.move_on_after(10):
            await server.wait()


async def test_agents_for_gives_each_connection_its_own_demo_agent(tmp_path: Path) -> None:
    """What ``--serve URL`` serves (:func:`acp_trio.demo.agent.agents_for`): one agent per
    connection, so a second client neither lists nor loads the first one's session."""
    from acp_trio.demo.agent import agents_for

    served = agents_for()
    new = v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[])
    with trio.fail_after(30):
        async with open_memory_pair(served, BareClient()) as (_, first):
            await first.agent.initialize(v1.InitializeRequest(protocol_version=1))
            session = await first.agent.session_new(new)
            async with open_memory_pair(served, BareClient()) as (_, second):
                await second.agent.initialize(v1.InitializeRequest(protocol_version=1))
                assert (await second.agent.session_list(v1.ListSessionsRequest())).sessions == []
                load = v1.LoadSessionRequest(session_id=session.session_id, cwd=str(tmp_path), mcp_servers=[])
                with pytest.raises(acp_trio.RequestError) as info:
                    await second.agent.session_load(load)
                assert info.value.code == acp_trio.RESOURCE_NOT_FOUND
            listed = await first.agent.session_list(v1.ListSessionsRequest())
            assert [s.session_id for s in listed.sessions] == [session.session_id]

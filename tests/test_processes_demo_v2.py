"""The demo in protocol version 2, end to end in real processes: ``python -m acp_trio.demo --protocol 2``.

``--serve-agent`` serves the one demo agent (an ``acp_trio.neutral.Agent``) in v1 and v2 side by
side (``migration.mdx``, "Supporting v1 and v2 side by side"): the client's ``initialize`` picks the
version per connection.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from acp_schema import v2
from acp_trio import UNSET, open_memory_pair
from acp_trio.demo.agent import DemoAgent
from acp_trio.demo.client_v2 import CLIENT_INFO, DemoClientV2, demo_client_v2_factory

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the stdio transport is POSIX-only")

DEMO = [sys.executable, "-m", "acp_trio.demo"]
NOTES = "Shopping list for the release:\n- regenerate the bindings\n- run the interop tests\n- write the changelog\n"


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(DEMO + args, capture_output=True, text=True, timeout=60, cwd=cwd, check=False)


def test_v2_demo_runs_a_prompt_turn_over_stdio_and_prints_the_transcript(tmp_path: Path) -> None:
    result = run(["--protocol", "2"], tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "connected to acp-trio demo agent, protocol version 2" in out
    # the agent reported the user message, and the runtime the running state
    assert "  [user_message msg_user_" in out and "] Please summarize notes.txt into summary.txt.\n" in out
    assert "  [state running]" in out
    assert "agent: Let me read your notes and write a summary." in out
    assert "[plan] [>] Read notes.txt  [ ] Count its words  [ ] Write summary.txt" in out
    assert "[tool call_read] Read notes.txt (read): pending" in out
    # requires_action while the permission request waits, running again after it
    assert "(tool call_read): choosing 'Allow' (allow_once)" in out
    ask = out.index("[permission] ")
    assert out.rindex("[state requires_action]", 0, ask) < ask < out.index("[state running]", ask)
    assert "[tool call_read] completed 4 non-empty lines" in out
    # the agent ran the word count itself and showed it as a display terminal in the tool call
    assert "[tool call_count] Count words in notes.txt (execute): in_progress\n" in out
    assert "[tool call_count] + [terminal term_1]\n" in out  # the display terminal, anchored in the tool call
    assert "[terminal term_1] $ " in out and " -c " in out
    assert "[terminal term_1] 18\n" in out and "[terminal term_1] exited (0)" in out
    assert "[tool call_count] completed [terminal term_1] 18 words" in out
    assert "[tool call_write] completed diff add " in out and "summary.txt: +2 line(s)" in out
    assert "[fs]" not in out  # no client file system in v2
    assert out.index("[tool call_read] completed") < out.index("[tool call_write] completed")
    assert out.index("[tool call_write] completed") < out.index("[turn ended: end_turn]")
    assert "summary.txt now reads: notes.txt has 4 non-empty lines" in out
    assert out.endswith(
        "[turn ended: end_turn]\nsummary.txt now reads: notes.txt has 4 non-empty lines; "
        "the first is: Shopping list for the release:\nIt has 18 words.\n"
    )


def test_v2_demo_with_deny_stops_at_the_permission_request(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n", encoding="utf-8")
    result = run(["--protocol", "2", "--cwd", str(tmp_path), "--deny"], tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "(tool call_read): choosing 'Reject' (reject_once)" in out
    assert "[tool call_read] failed" in out
    assert "Permission denied, so I stopped here." in out
    assert "[terminal" not in out and "call_write" not in out
    assert "[turn ended: end_turn]" in out
    assert not (tmp_path / "summary.txt").exists()


def test_v2_demo_reports_a_missing_file_through_the_tool_call(tmp_path: Path) -> None:
    result = run(["--protocol", "2", "--cwd", str(tmp_path)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[tool call_read] failed File not found" in result.stdout
    assert "I could not read notes.txt: File not found." in result.stdout
    assert "[turn ended: end_turn]" in result.stdout
    assert not (tmp_path / "summary.txt").exists()


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_v1_and_v2_clients_drive_the_same_serve_agent(tmp_path: Path, protocol: str) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n\nbeta\n", encoding="utf-8")
    args = ["--protocol", protocol, "--cwd", str(tmp_path), "--agent", "--", *DEMO, "--serve-agent"]
    result = run(args, tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"connected to acp-trio demo agent, protocol version {protocol}" in result.stdout
    assert "[turn ended: end_turn]" in result.stdout
    # v1: the client ran the command in its terminal and wrote the file; v2: the agent did both
    assert ("[fs] wrote " in result.stdout) is (protocol == "1")
    assert (tmp_path / "summary.txt").read_text(encoding="utf-8") == (
        "notes.txt has 2 non-empty lines; the first is: alpha\nIt has 2 words.\n"
    )


def test_the_v1_client_is_the_default(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n", encoding="utf-8")
    result = run(["--cwd", str(tmp_path), "--agent", "--", *DEMO, "--serve-agent"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "protocol version 1" in result.stdout and "[fs] read " in result.stdout


@pytest.mark.parametrize(("client", "agent"), [("2", "1"), ("1", "2")])
def test_a_client_refuses_an_agent_serving_only_the_other_version(tmp_path: Path, client: str, agent: str) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n", encoding="utf-8")
    args = ["--protocol", client, "--cwd", str(tmp_path), "--agent", "--", *DEMO, "--serve-agent", "--protocol", agent]
    result = run(args, tmp_path)
    assert result.returncode == 1, result.stderr
    hint = (
        "drop --protocol 2 to talk to it in version 1"
        if agent == "1"
        else "pass --protocol 2 to talk to it in version 2"
    )
    refusal = (
        f"error: the agent chose protocol version {agent} (we asked for {client}): "
        f"it does not speak protocol version {client}; {hint}\n"
    )
    assert result.stdout.endswith(refusal), result.stdout
    assert (result.stdout + result.stderr).count(f"(we asked for {client})") == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "summary.txt").exists()


def raw_initialize(tmp_path: Path, params: dict[str, Any], *serve: str) -> dict[str, Any]:
    request = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}).encode() + b"\n"
    result = subprocess.run(
        [*DEMO, "--serve-agent", *serve], input=request, capture_output=True, timeout=60, cwd=tmp_path, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    answer: dict[str, Any] = json.loads(lines[0])
    assert answer["jsonrpc"] == "2.0" and answer["id"] == 0
    return answer


def test_serve_agent_answers_a_raw_v2_initialize_in_v2(tmp_path: Path) -> None:
    params = {"protocolVersion": 2, "info": {"name": "raw", "version": "1"}, "capabilities": {}}
    result = raw_initialize(tmp_path, params)["result"]
    assert result["protocolVersion"] == 2
    assert result["info"] == {"name": "acp-trio-demo-agent", "title": "acp-trio demo agent", "version": "1"}
    # the neutral layer implements session/delete and additionalDirectories besides v2's baseline;
    # the demo accepts stdio MCP servers (DemoAgent.mcp_support)
    assert result["capabilities"]["session"] == {
        "prompt": {"embeddedContext": {}},
        "mcp": {"stdio": {}},
        "delete": {},
        "additionalDirectories": {},
    }
    assert "agentCapabilities" not in result and "agentInfo" not in result


def test_serve_agent_answers_a_raw_v1_initialize_in_v1(tmp_path: Path) -> None:
    result = raw_initialize(tmp_path, {"protocolVersion": 1, "clientCapabilities": {}})["result"]
    assert result["protocolVersion"] == 1
    assert result["agentInfo"]["name"] == "acp-trio-demo-agent"
    assert result["agentCapabilities"]["promptCapabilities"]["embeddedContext"] is True
    assert "info" not in result and "capabilities" not in result


def test_a_v2_only_serve_agent_answers_a_v1_initialize_with_version_2(tmp_path: Path) -> None:
    result = raw_initialize(tmp_path, {"protocolVersion": 1}, "--protocol", "2")["result"]
    assert result["protocolVersion"] == 2  # migration.mdx: the agent answers its latest; the client decides


# -- in memory: what the processes above cannot time ------------------------------------------


class HoldingClient(DemoClientV2):
    """Answers permission requests only when told to."""

    def __init__(self, conn: Any) -> None:
        super().__init__(conn, io.StringIO())
        self.asked = trio.Event()
        self.release = trio.Event()

    async def session_request_permission(self, params: v2.RequestPermissionRequest) -> v2.RequestPermissionResponse:
        self.asked.set()
        await self.release.wait()
        return await super().session_request_permission(params)


async def start(client_conn: Any, client: DemoClientV2, cwd: Path) -> str:
    await client_conn.initialize(v2.InitializeRequest(protocol_version=2, info=CLIENT_INFO))
    session = await client_conn.agent.session_new(v2.NewSessionRequest(cwd=str(cwd)))
    session_id: str = session.session_id
    return session_id


@pytest.mark.parametrize("how", ["session/cancel", "session/close"])
async def test_cancelling_while_the_permission_waits_ends_the_turn_cancelled(tmp_path: Path, how: str) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n", encoding="utf-8")
    with trio.fail_after(30):
        async with open_memory_pair(DemoAgent(), {v2: HoldingClient}) as (_agent_conn, client_conn):
            client: HoldingClient = client_conn.handler
            session_id = await start(client_conn, client, tmp_path)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: client.run_turn(session_id, "go", timeout=20))
                await client.asked.wait()
                if how == "session/cancel":
                    await client_conn.agent.session_cancel(v2.CancelSessionNotification(session_id=session_id))
                else:
                    await client_conn.agent.session_close(v2.CloseSessionRequest(session_id=session_id))
                assert await client.wait_idle(session_id, 20)
            transcript = client.out.getvalue()  # type: ignore[attr-defined]
            assert transcript.rstrip().endswith("[turn ended: cancelled]")
            assert "[state requires_action]" in transcript
            assert "call_count" not in transcript
    assert not (tmp_path / "summary.txt").exists()


async def test_a_second_turn_uses_new_ids_and_reports_a_modification(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(NOTES, encoding="utf-8")
    out = io.StringIO()
    with trio.fail_after(30):
        async with open_memory_pair(DemoAgent(), {v2: demo_client_v2_factory(out)}) as (_, client_conn):
            client: DemoClientV2 = client_conn.handler
            session_id = await start(client_conn, client, tmp_path)
            assert await client.run_turn(session_id, "one", timeout=20) == "end_turn"
            (tmp_path / "notes.txt").write_text("just two\n", encoding="utf-8")
            assert await client.run_turn(session_id, "two", timeout=20) == "end_turn"
    transcript = out.getvalue()
    assert "[tool call_read_2] Read notes.txt (read): pending" in transcript
    assert "[terminal term_2] 2\n" in transcript
    assert f"[tool call_write_2] completed diff modify {tmp_path}/summary.txt: +2 line(s)" in transcript
    assert transcript.count("[turn ended: end_turn]") == 2


async def test_run_turn_says_how_the_agent_process_ended_when_it_dies_mid_turn(tmp_path: Path) -> None:
    from acp_trio import ConnectionClosed, spawn_agent

    agent = [str(Path(__file__).parent / "agents" / "crashing_agent_v2.py")]
    with trio.fail_after(30):
        async with spawn_agent(sys.executable, agent, client={v2: demo_client_v2_factory(io.StringIO())}) as conn:
            client: DemoClientV2 = conn.handler
            await client.initialize(timeout=20)
            session_id = await client.new_session(tmp_path, timeout=20)
            with pytest.raises(ConnectionClosed) as info:
                await client.run_turn(session_id, "go", timeout=20)
    assert info.value.exit_code == 3
    assert "fatal: the model endpoint refused the key" in info.value.stderr_tail


async def test_run_turn_raises_session_ended_when_the_sessions_state_is_discarded(tmp_path: Path) -> None:
    from acp_trio.standard_client import SessionEnded

    (tmp_path / "notes.txt").write_text("alpha\n", encoding="utf-8")
    with trio.fail_after(30):
        async with open_memory_pair(DemoAgent(), {v2: HoldingClient}) as (_agent_conn, client_conn):
            client: HoldingClient = client_conn.handler
            session_id = await start(client_conn, client, tmp_path)
            async with trio.open_nursery() as nursery:

                async def turn() -> None:
                    with pytest.raises(SessionEnded, match="discarded"):
                        await client.run_turn(session_id, "go", timeout=20)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(turn)
                await client.asked.wait()
                client.states.discard(session_id)
                await trio.sleep_forever()


# -- one agent object, both versions ------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
async def test_the_auto_mode_reads_without_asking_in_both_versions(tmp_path: Path, version: int) -> None:
    """The ``mode`` option: v1 sees it as ``modes`` too and sets it with ``session/set_mode``; v2
    with ``session/set_config_option``.  In ``auto`` the turn reads notes.txt without asking."""
    from acp_schema import v1
    from acp_trio.demo.client import demo_client_factory

    (tmp_path / "notes.txt").write_text("alpha beta\n", encoding="utf-8")
    out = io.StringIO()
    variant: Any = v1 if version == 1 else v2
    factory = demo_client_factory(out) if version == 1 else demo_client_v2_factory(out)
    with trio.fail_after(30):
        async with open_memory_pair(DemoAgent(), {variant: factory}) as (_, client_conn):
            client: Any = client_conn.handler
            await client.initialize()
            session_id = await client.new_session(tmp_path)
            state = client.states[session_id]
            [mode] = state.config_options
            assert (mode.current_value, [o.value for o in mode.options]) == ("ask", ["ask", "auto"])
            if version == 1:
                assert state.current_mode_id == "ask"
                request = v1.SetSessionModeRequest(session_id=session_id, mode_id="auto")
                await v1.AgentPeer(client_conn).session_set_mode(request)
            else:
                config = v2.IdSetSessionConfigOptionRequest(session_id=session_id, config_id="mode", value="auto")
                answer = await v2.AgentPeer(client_conn).session_set_config_option(config)
                assert [o.current_value for o in answer.config_options] == ["auto"]
            result = await client.prompt(session_id, "summarize")
            assert result.stop_reason == "end_turn"
            if version == 1:
                assert client.states[session_id].current_mode_id == "auto"  # current_mode_update reached it
    transcript = out.getvalue()
    assert "[permission]" not in transcript and "[tool call_read] completed 1 non-empty lines" in transcript
    assert (tmp_path / "summary.txt").read_text(encoding="utf-8").startswith("notes.txt has 1 non-empty lines")


async def test_a_session_made_on_v2_is_loaded_by_a_v1_client_of_the_same_agent(tmp_path: Path) -> None:
    """One :class:`DemoAgent` serving both: a v2 client runs a turn, a v1 client loads the session
    (``session/load``) and sees it replayed the v1 way (``tool_call`` then ``tool_call_update``, the
    display terminal as text, the diff with its texts), then runs a turn of its own in it."""
    from acp_schema import v1
    from acp_trio.demo.client import demo_client_factory

    (tmp_path / "notes.txt").write_text(NOTES, encoding="utf-8")
    agent = DemoAgent()
    with trio.fail_after(30):
        async with open_memory_pair(agent, {v2: demo_client_v2_factory(io.StringIO())}) as (_, client_conn):
            client: DemoClientV2 = client_conn.handler
            session_id = await start(client_conn, client, tmp_path)
            assert await client.run_turn(session_id, "one", timeout=20) == "end_turn"
        out = io.StringIO()
        async with open_memory_pair(agent, {v1: demo_client_factory(out)}) as (_, client_conn):
            loader: Any = client_conn.handler
            await loader.initialize()
            peer = v1.AgentPeer(client_conn)
            listed = await peer.session_list(v1.ListSessionsRequest())
            assert [s.session_id for s in listed.sessions] == [session_id]
            request = v1.LoadSessionRequest(session_id=session_id, cwd=str(tmp_path), mcp_servers=[])
            await loader.states.load(peer, request)
            state = loader.states[session_id]
            assert [m.text for m in state.messages if m.role == "user"] == ["one"]
            read, count, write = (state.tool_calls[i] for i in ("call_read", "call_count", "call_write"))
            assert (read.status, count.status, write.status) == ("completed", "completed", "completed")
            assert "18" in count.content[0].content.text  # the display terminal, as text (row T14)
            [diff] = write.content
            assert isinstance(diff, v1.DiffToolCallContent) and diff.old_text in (None, UNSET)
            result = await loader.prompt(session_id, "two")  # v1 now: the client's fs and terminal
            assert result.stop_reason == "end_turn"
    replayed, _, second = out.getvalue().partition("[tool call_read_2] Read notes.txt (read): pending")
    assert "[tool call_read] completed 4 non-empty lines" in replayed and "[permission]" not in replayed
    assert "[fs] read " in second and "[terminal term_1] exited (0)" in second  # v1: the client's fs and terminal
    # one plan per session, replaced by each turn (v1 shows every live plan of a session as one)
    plans = [line for line in second.splitlines() if line.startswith("  [plan] ")]
    assert plans[-1] == "  [plan] [x] Read notes.txt  [x] Count its words  [x] Write summary.txt"

"""The example pydantic-ai agent served by acp-trio over stdio, as a client meets it (issue 34, "Done when").

The agent is ``examples/pydantic_ai_agent/agent.py`` (a scripted ``FunctionModel``: no network; two
tools, ``read_note`` and ``write_note``, the second ``requires_approval``), served by ``python -m
acp_trio.integrations.pydantic_ai examples.pydantic_ai_agent.agent:agent``; its MCP server is
``examples/pydantic_ai_agent/notes_mcp.py`` (``word_count``, the official ``mcp`` SDK) given in
``session/new``.  Each test runs real processes:

- a note turn with acp-trio's demo client (``python -m acp_trio.demo --mcp-server ... --agent``), with acp-trio's
  client API (``StandardClient``, v1 and v2, the MCP server in ``mcpServers``), and with a v1 client
  written with the official TypeScript SDK (``tests/interop/ts_pydantic_ai_client.mjs``): thinking,
  both tools as ACP tool calls, the MCP tool, a permission asked for ``write_note`` only, the note
  written, a streamed summary;
- ``session/load`` in a second process on the same ``--store`` file: the first turn replayed, and
  the model of the second process sees the first turn's prompt;
- ``session/cancel`` mid-stream ends the turn within :data:`CANCEL_BOUND`, measured beside a native
  acp-trio agent streaming the same way (``tests/interop/trio_stream_agent.py``);
- ``python -m acp_trio.check`` in protocol 1 and 2: the checks pydantic-acp 1.10.0 fails on the
  same agent (issue 34) pass.

pydantic-acp's side (``tests/interop/pydantic_acp_same.py``) is compared in
``benchmarks/bench_pydantic_ai.py`` (``nox -s bench``) and in the checker's table.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import test_interop  # pytest's default ("prepend") import mode puts tests/ on sys.path
import trio

from acp_schema import v1, v2
from acp_trio import ClientSideConnection, StandardClient, allow_all, spawn_agent

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra: pip install 'acp-trio[pydantic-ai]'")
pytest.importorskip("trio_asyncio", reason="the pydantic-ai extra: pip install 'acp-trio[pydantic-ai]'")

# Real agent processes (pydantic-ai's import is about 1.5 s of CPU each): once, on 3.13; the
# integration's logic is tested in memory by B's tests/test_pydantic_ai*.py on every interpreter.
pytestmark = [
    pytest.mark.one_interpreter(newest=True),
    pytest.mark.skipif(sys.platform == "win32", reason="the stdio transport is POSIX-only"),
]

ts_sdk = test_interop.ts_sdk  # the session fixture installing the TypeScript SDK, under its own name

ROOT = Path(__file__).resolve().parent.parent
INTEROP = ROOT / "tests" / "interop"
NOTES_MCP = ROOT / "examples" / "pydantic_ai_agent" / "notes_mcp.py"
OURS = ["-m", "acp_trio.integrations.pydantic_ai", "examples.pydantic_ai_agent.agent:agent"]
NATIVE = [str(INTEROP / "trio_stream_agent.py")]
TIME_LIMIT = 60  # seconds of real time per test (a loaded 2-CPU machine: each agent process takes 2-3 s to start)
CANCEL_BOUND = 2.0
"""Seconds from ``session/cancel`` to the turn's end that both agents must keep (a stream left
running would go on for :data:`LONG_CHUNKS` x 10 ms = 30 s)."""
LONG_CHUNKS = 3000
OLD_NOTE = "old line\n"


def note_prompt(note: Path) -> str:
    return f"Append 'buy milk' to the note {note}."


class Recorder(StandardClient):
    """A ``StandardClient`` that allows every permission, records the questions, and can wait
    until a session has had some updates."""

    def __init__(self, conn: ClientSideConnection, **options: Any) -> None:
        super().__init__(conn, policy=allow_all(), **options)
        self.asked: list[str] = []
        self._changed = trio.Event()

    async def session_request_permission(self, params: Any) -> Any:
        call = params.tool_call if isinstance(params, v1.RequestPermissionRequest) else params.subject.tool_call
        self.asked.append(call.tool_call_id)
        return await super().session_request_permission(params)

    def on_update(self, state: Any, update: Any) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_updates(self, session_id: str, count: int) -> None:
        while session_id not in self.states or self.states[session_id].update_count < count:
            await self._changed.wait()


@asynccontextmanager
async def connected(
    args: list[str], variant: ModuleType = v1, command: str = sys.executable
) -> AsyncIterator[Recorder]:
    async with spawn_agent(command, args, client=Recorder.for_versions(variant), cwd=ROOT) as conn:
        client: Recorder = conn.handler
        await client.initialize(timeout=TIME_LIMIT)
        assert conn.protocol_version == variant.PROTOCOL_VERSION
        yield client


async def new_session_with_notes_mcp(client: Recorder, cwd: Path) -> str:
    """``session/new`` in ``cwd`` with ``notes_mcp.py`` as a stdio MCP server, in the client's version."""
    if client.conn.protocol_version >= 2:
        server: Any = v2.StdioMcpServer(name="notes", command=sys.executable, args=[str(NOTES_MCP)], env=[])
        new: Any = await client.conn.agent.session_new(v2.NewSessionRequest(cwd=str(cwd), mcp_servers=[server]))
    else:
        server = v1.McpServerStdio(name="notes", command=sys.executable, args=[str(NOTES_MCP)], env=[])
        new = await client.conn.agent.session_new(v1.NewSessionRequest(cwd=str(cwd), mcp_servers=[server]))
    session_id: str = new.session_id
    client.states.state(session_id).apply_setup(new)
    return session_id


def stop_reason(result: Any) -> str | None:
    """The stop reason of ``StandardClient.prompt``'s result in either version."""
    reason: str | None = result.stop_reason
    return reason


# -- a turn: the demo client, the client API, the TypeScript SDK ---------------------------------


@pytest.mark.parametrize("protocol", [1, 2])
async def test_the_demo_client_completes_a_note_turn(protocol: int, tmp_path: Path) -> None:
    note = tmp_path / "notes.md"
    note.write_text(OLD_NOTE, encoding="utf-8")
    command = [sys.executable, "-m", "acp_trio.demo", "--protocol", str(protocol), "--cwd", str(tmp_path)]
    command += ["--prompt", note_prompt(note)]
    command += ["--mcp-server", f"notes={sys.executable} {NOTES_MCP}"]  # the session's MCP server
    with trio.fail_after(TIME_LIMIT):
        proc = await trio.run_process(
            [*command, "--agent", "--", sys.executable, *OURS], capture_stdout=True, capture_stderr=True, cwd=ROOT
        )
    out = proc.stdout.decode()
    assert f"connected to notes, protocol version {protocol}" in out
    assert "agent (thinking): The user wants a note" in out
    assert "[tool t1-read] read_note (read): pending" in out
    assert "[tool t1-write] write_note (edit): pending" in out
    [asked] = [line for line in out.splitlines() if "[permission]" in line]  # the approval tool's only
    assert "write_note" in asked and "choosing 'Allow once'" in asked
    assert f"write_note: wrote {len(OLD_NOTE + 'buy milk' + chr(10))} characters to {note}" in out
    assert out.rstrip().endswith("[turn ended: end_turn]")
    assert note.read_text(encoding="utf-8") == OLD_NOTE + "buy milk\n"
    assert "[tool t1-count] notes_word_count (other): pending" in out  # the MCP server's tool, no permission
    assert "[tool t1-count] completed 4" in out
    assert "word_count (MCP): 4 words" in out


@pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])
async def test_the_client_api_completes_a_note_turn_with_the_sessions_mcp_server(
    variant: ModuleType, tmp_path: Path
) -> None:
    note = tmp_path / "notes.md"
    note.write_text(OLD_NOTE, encoding="utf-8")
    with trio.fail_after(TIME_LIMIT):
        async with connected(OURS, variant) as client:
            session_id = await new_session_with_notes_mcp(client, tmp_path)
            result = await client.prompt(session_id, note_prompt(note))
    assert stop_reason(result) == "end_turn"
    state = client.states[session_id]
    calls = state.tool_calls
    # the model asks for write_note and word_count at once: pydantic-ai runs word_count, the approved
    # write_note after the permission request
    assert {c.tool_call_id: c.status for c in calls.values()} == {
        "t1-read": "completed",
        "t1-write": "completed",
        "t1-count": "completed",  # the MCP server's word_count
    }
    assert (calls["t1-read"].kind, calls["t1-write"].kind) == ("read", "edit")
    assert calls["t1-read"].raw_input == {"path": str(note)}
    assert calls["t1-count"].raw_input == {"text": OLD_NOTE + "buy milk\n"}
    assert client.asked == ["t1-write"]  # only the tool that requires approval asked
    thoughts = [m.text for m in state.messages if m.role == "thought"]
    assert thoughts and thoughts[0].startswith("The user wants a note")
    summary = [m.text for m in state.messages if m.role == "agent"][-1]
    assert "word_count (MCP): 4 words" in summary  # "old line", "buy milk"
    assert summary.endswith("(turn 1; earlier prompts: [])")
    assert note.read_text(encoding="utf-8") == OLD_NOTE + "buy milk\n"


async def test_a_typescript_sdk_client_completes_a_note_turn(ts_sdk: Path, tmp_path: Path) -> None:
    note = tmp_path / "notes.md"
    note.write_text(OLD_NOTE, encoding="utf-8")
    servers = [{"name": "notes", "command": sys.executable, "args": [str(NOTES_MCP)], "env": []}]
    script = str(INTEROP / "ts_pydantic_ai_client.mjs")
    with trio.fail_after(TIME_LIMIT):
        proc = await trio.run_process(
            ["node", script, str(tmp_path), json.dumps(servers), note_prompt(note), sys.executable, *OURS],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=ROOT,
            env={**os.environ, "ACP_INTEROP_NPM_DIR": str(ts_sdk)},
        )
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    summary = json.loads(proc.stdout.decode().splitlines()[-1])
    assert summary["initialize"]["protocolVersion"] == 1
    assert summary["prompt"]["stopReason"] == "end_turn"
    updates = [u["update"] for u in summary["updates"]]
    assert {u["sessionId"] for u in summary["updates"]} == {summary["sessionId"]}
    kinds = [u["sessionUpdate"] for u in updates]
    assert kinds[0] == "agent_thought_chunk"
    reported = {u["toolCallId"]: u for u in updates if u["sessionUpdate"] == "tool_call"}
    assert sorted(reported) == ["t1-count", "t1-read", "t1-write"]
    assert [(reported[i]["title"], reported[i]["kind"]) for i in ("t1-read", "t1-write")] == [
        ("read_note", "read"),
        ("write_note", "edit"),
    ]
    assert "word_count" in reported["t1-count"]["title"]  # the MCP server's tool
    assert reported["t1-write"]["rawInput"] == {"path": str(note), "text": OLD_NOTE + "buy milk\n"}
    finished = {u["toolCallId"]: u for u in updates if u["sessionUpdate"] == "tool_call_update" and u.get("status")}
    assert {k: u["status"] for k, u in finished.items()} == dict.fromkeys(
        ["t1-read", "t1-write", "t1-count"], "completed"
    )
    assert [p["toolCallId"] for p in summary["permissions"]] == ["t1-write"]
    text = "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk")
    assert "word_count (MCP): 4 words" in text
    assert summary["updatesAfterPrompt"] == len(updates)  # every update of the turn came before its answer
    assert summary["agentExit"] == {"code": 0, "signal": None}
    assert note.read_text(encoding="utf-8") == OLD_NOTE + "buy milk\n"


# -- session/load in a new process ----------------------------------------------------------------


async def test_a_session_survives_session_load_in_a_new_process(tmp_path: Path) -> None:
    store = ["--store", str(tmp_path / "sessions.db")]
    with trio.fail_after(TIME_LIMIT):
        async with connected([*OURS, *store]) as first:
            session_id = await first.new_session(tmp_path)
            assert stop_reason(await first.prompt(session_id, "hello there")) == "end_turn"
        before = [(m.role, m.text) for m in first.states[session_id].messages]
        async with connected([*OURS, *store]) as second:
            await second.conn.agent.session_load(
                v1.LoadSessionRequest(session_id=session_id, cwd=str(tmp_path), mcp_servers=[])
            )
            replayed = [(m.role, m.text) for m in second.states[session_id].messages]
            assert stop_reason(await second.prompt(session_id, "hello again")) == "end_turn"
    assert before == [
        ("user", "hello there"),
        ("agent", "Hello! I keep notes for you. (turn 1; earlier prompts: [])"),
    ]
    assert replayed == before
    answer = second.states[session_id].messages[-1]
    # the second process's model was sent the first turn: its prompt is among the earlier ones
    assert (answer.role, answer.text) == (
        "agent",
        'Hello! I keep notes for you. (turn 2; earlier prompts: ["hello there"])',
    )


# -- session/cancel mid-stream --------------------------------------------------------------------


async def cancel_mid_stream(args: list[str]) -> tuple[str | None, float, int]:
    """Start a ``stream N slow`` turn, wait for 5 updates, send ``session/cancel``: the stop reason,
    seconds from the cancel to the turn's end, and the updates the turn had."""
    async with connected(args) as client:
        session_id = await client.new_session(ROOT)
        ended: list[tuple[str | None, float]] = []
        async with trio.open_nursery() as nursery:

            async def turn() -> None:
                result = await client.prompt(session_id, f"stream {LONG_CHUNKS} slow")
                ended.append((stop_reason(result), time.perf_counter()))

            nursery.start_soon(turn)
            await client.wait_updates(session_id, 5)
            cancelled_at = time.perf_counter()
            await client.cancel(session_id)
        reason, at = ended[0]
        return reason, at - cancelled_at, client.states[session_id].update_count


async def test_session_cancel_ends_a_streamed_turn_within_the_native_agents_bound() -> None:
    with trio.fail_after(TIME_LIMIT):
        native = await cancel_mid_stream(NATIVE)
        ours = await cancel_mid_stream(OURS)
    print(
        f"session/cancel -> turn ended: native acp-trio agent {native[1] * 1e3:.0f} ms, pydantic-ai {ours[1] * 1e3:.0f} ms"
    )
    for reason, seconds, updates in (native, ours):
        assert reason == "cancelled"
        assert seconds < CANCEL_BOUND
        assert updates < LONG_CHUNKS  # the stream stopped early


# -- the checker in protocol 1 and 2 ---------------------------------------------------------------

PYDANTIC_ACP_FAILS = ["jsonrpc.parse-error", "jsonrpc.invalid-request", "session.resume", "session.close"]
"""The checks pydantic-acp 1.10.0 fails on this agent in protocol 1 (issue 34), with
``initialize.before``, its WARN.  The turns' checks (session.prompt, cancel, load, the script's
behaviours) are what the tests above assert directly; the whole checker (about 3 minutes here) runs
in the report for issue 34: ``python -m acp_trio.check --protocol N --script
tests/interop/pydantic_ai_script.toml -- python -m acp_trio.integrations.pydantic_ai
examples.pydantic_ai_agent.agent:agent``."""


async def check(agent: list[str], protocol: int, tmp_path: Path) -> tuple[dict[str, str], str, int]:
    """``python -m acp_trio.check --protocol N --only ...`` (:data:`PYDANTIC_ACP_FAILS` and
    ``initialize.before``) against ``agent``, run in ``tmp_path``: each check's status, the text
    report, the exit status."""
    only = [*PYDANTIC_ACP_FAILS, "initialize.before"]
    report = tmp_path / f"report-{protocol}.json"
    command = [sys.executable, "-m", "acp_trio.check", "--protocol", str(protocol), "--json", str(report)]
    command += [f"--only={name}" for name in only]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with trio.fail_after(4 * TIME_LIMIT):
        proc = await trio.run_process(
            [*command, "--", *agent], capture_stdout=True, capture_stderr=True, check=False, cwd=tmp_path, env=env
        )
    out = proc.stdout.decode()
    results = {r["name"]: r["status"] for r in json.loads(report.read_text(encoding="utf-8"))["findings"]}
    assert set(results) == set(only), out
    return results, out, proc.returncode


@pytest.mark.parametrize("protocol", [1, 2])
async def test_the_checker_passes_it_where_pydantic_acp_fails(protocol: int, tmp_path: Path) -> None:
    results, out, status = await check([sys.executable, *OURS], protocol, tmp_path)
    assert {name: s for name, s in results.items() if s != "PASS"} == {}, out
    assert status == 0, out


@pytest.mark.skipif(
    os.environ.get("ACP_REAL_AGENTS") != "1",
    reason="installs pydantic-acp (a 107 MB virtual environment): ACP_REAL_AGENTS=1 (nox -s conformance sets it)",
)
async def test_pydantic_acp_fails_those_rules_on_the_same_agent(tmp_path: Path) -> None:
    real_agents = test_interop.real_agents  # tests/interop/real_agents.py: the installer

    try:
        python = await trio.to_thread.run_sync(real_agents.install_pydantic_acp)
    except real_agents.Unavailable as exc:
        pytest.skip(str(exc).splitlines()[0])
    results, out, status = await check([str(python), str(INTEROP / "pydantic_acp_same.py")], 1, tmp_path)
    assert results == {**dict.fromkeys(PYDANTIC_ACP_FAILS, "FAIL"), "initialize.before": "WARN"}, out
    assert status == 1, out

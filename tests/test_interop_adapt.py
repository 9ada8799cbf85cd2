"""Real peers through the v1 ⇄ v2 adapter (``python -m acp_trio.adapt``), over real stdio (issue 33, item 4).

Each test plays one full turn through the adapter: text, a plan, a tool call with a permission
request answered ``allow``, and a second turn cancelled with ``session/cancel`` while its permission
request waits (the client answers it ``cancelled``).

- A version-2-only agent written with the TypeScript SDK's v2 entry point
  (``tests/interop/ts_v2_turn_agent.mjs``; the SDK refuses a v1 client) behind ``adapt --speak 1``,
  driven by acp-trio's v1 demo client (:class:`acp_trio.demo.client.DemoClient`) and by a v1 client
  written with the TypeScript SDK (``tests/interop/ts_v1_turn_client.mjs``).
- A version-1-only agent written with the official Python SDK (``tests/interop/py_turn_agent.py``)
  behind ``adapt --speak 2``, driven by acp-trio's v2 demo client
  (:class:`acp_trio.demo.client_v2.DemoClientV2`) and by a v2 client written with the TypeScript
  SDK's v2 entry point (``tests/interop/ts_v2_turn_client.mjs``).  The agent reads and writes files
  with ``fs/*``, which the adapter answers in the session's directory (a v2 client has no file
  system).

The SDKs come from ``tests/test_interop.py``'s session fixtures (one cached install, shared).  The
real agents (pydantic-acp, gemini-cli, qwen-code, opencode, claude-agent-acp, codex-acp) through
the adapter are in ``tests/test_conformance_real.py`` (``nox -s conformance``).
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import test_interop  # pytest's default ("prepend") import mode puts tests/ on sys.path
import trio
from test_interop import INTEROP

from acp_schema import v1, v2
from acp_trio import spawn_agent
from acp_trio.demo.client import DemoClient
from acp_trio.demo.client_v2 import DemoClientV2

# Three processes per test (about 3 s of CPU): once, on 3.11 (the adapter's logic is tested in memory on every
# interpreter by tests/test_adapt*.py).
pytestmark = pytest.mark.one_interpreter

ts_sdk = test_interop.ts_sdk  # the session fixtures installing the SDKs, used here under their own names
py_sdk_python = test_interop.py_sdk_python

TIME_LIMIT = 30  # seconds of real time per test: three processes (client or not, adapter, agent)
ADAPT = [sys.executable, "-m", "acp_trio.adapt"]
INPUT_TEXT = "héllo wörld ✓\n"
ASK, WRITE = "Ask to write output.txt", "Write output.txt"


def adapted(speak: int, agent: list[str]) -> list[str]:
    """The command line of ``agent`` behind the adapter, speaking ``speak`` to the client."""
    return [*ADAPT, "--speak", str(speak), "--", *agent]


def ts_v2_agent() -> list[str]:
    return ["node", str(INTEROP / "ts_v2_turn_agent.mjs")]


def py_v1_agent(python: Path) -> list[str]:
    return [str(python), str(INTEROP / "py_turn_agent.py")]


class _WaitsOnTurnWait:
    """Mixin for the demo clients: the permission request for ``turn-wait`` is left waiting (the
    test cancels the turn; the runtime then answers it ``cancelled``); the others go to the demo's
    policy (it prints the question and picks "Allow")."""

    wait_asked: trio.Event

    def _asked_for(self, request: Any) -> str:
        raise NotImplementedError

    async def _decide(self, request: Any) -> str | None:
        if self._asked_for(request) == "turn-wait":
            self.wait_asked.set()
            await trio.sleep_forever()
        return await super()._decide(request)  # type: ignore[misc, no-any-return]


class V1TurnClient(_WaitsOnTurnWait, DemoClient):
    def __init__(self, conn: Any) -> None:
        self.wait_asked = trio.Event()
        super().__init__(conn, io.StringIO())

    def _asked_for(self, request: Any) -> str:
        return str(request.tool_call.tool_call_id)


class V2TurnClient(_WaitsOnTurnWait, DemoClientV2):
    def __init__(self, conn: Any) -> None:
        self.wait_asked = trio.Event()
        super().__init__(conn, io.StringIO())

    def _asked_for(self, request: Any) -> str:
        subject = request.subject
        return str(subject.tool_call.tool_call_id) if isinstance(subject, v2.ToolCallRequestPermissionSubject) else ""


def plan_of(entries: list[Any]) -> list[tuple[str, str, str]]:
    return [(e.content, e.priority, e.status) for e in entries]


PLAN_STARTED = [(ASK, "high", "in_progress"), (WRITE, "medium", "pending")]
PLAN_DONE = [(ASK, "high", "completed"), (WRITE, "medium", "completed")]


# -- a v2-only agent (TypeScript SDK v2) behind adapt --speak 1, v1 clients ----------------------


async def test_our_v1_demo_client_drives_the_typescript_sdk_v2_agent_through_the_adapter(
    ts_sdk: Path, tmp_path: Path
) -> None:
    command = adapted(1, ts_v2_agent())
    env = {"ACP_INTEROP_NPM_DIR": str(ts_sdk)}
    with trio.fail_after(TIME_LIMIT):
        async with spawn_agent(command[0], command[1:], client={v1: V1TurnClient}, env=env, cwd=tmp_path) as conn:
            client: V1TurnClient = conn.handler
            init = await client.initialize("acp-trio-demo-client", "1")
            assert conn.protocol_version == 1 and init.protocol_version == 1
            assert init.agent_info is not None and init.agent_info.name == "ts-sdk-v2-turn-agent"
            session_id = await client.new_session(tmp_path)
            assert session_id == "ts-turn-1"

            response = await client.prompt(session_id, "hello")
            assert isinstance(response, v1.PromptResponse) and response.stop_reason == "end_turn"
            client.say(f"[turn ended: {response.stop_reason}]")  # as python -m acp_trio.demo does
            state = client.states[session_id]
            assert [(m.role, m.text) for m in state.messages] == [
                ("user", "hello"),
                # one message: the agent sends all its chunks of a turn with one messageId
                ("agent", "Hello from the TypeScript SDKpermission: allow"),
            ]
            tool = state.tool_calls["turn-write"]
            assert (tool.title, tool.kind, tool.status, tool.announced) == (WRITE, "edit", "completed", True)
            assert tool.meta == {"interop/mark": "ts"}  # _meta survives the trip
            assert state.plan is not None and plan_of(state.plan.entries) == PLAN_DONE

            # the second turn, cancelled while its permission request waits
            cancelled: list[Any] = []

            async def wait_turn() -> None:
                cancelled.append(await client.prompt(session_id, "wait"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_turn)
                await client.wait_asked.wait()
                await client.cancel(session_id)
            assert [r.stop_reason for r in cancelled] == ["cancelled"]
            client.say("[turn ended: cancelled]")
            assert [(m.role, m.text) for m in state.messages][2:] == [
                ("user", "wait"),
                ("agent", "waitingpermission: cancelled"),  # it saw the request answered "cancelled"
            ]
            waited = state.tool_calls["turn-wait"]
            assert waited.status == "failed"  # v2's "cancelled" has no v1 form: failed, the original in _meta
            assert waited.meta == {"acp-trio/status": "cancelled"}
        assert conn.process.returncode == 0  # type: ignore[attr-defined]
    transcript = client.out.getvalue().splitlines()  # type: ignore[attr-defined]
    assert transcript == [
        "agent: Hello from the TypeScript SDK",
        f"  [plan] [>] {ASK}  [ ] {WRITE}",
        f"  [tool turn-write] {WRITE} (edit): pending",
        f"  [permission] {WRITE}: choosing 'Allow' (allow_once)",
        "  [tool turn-write] completed wrote output.txt",
        f"  [plan] [x] {ASK}  [x] {WRITE}",
        "agent: permission: allow",
        "[turn ended: end_turn]",
        "agent: waiting",
        f"  [tool turn-wait] {WRITE} (edit): pending",
        "agent: permission: cancelled",
        "  [tool turn-wait] failed",
        "[turn ended: cancelled]",
    ]


async def run_summary(script: str, cwd: Path, agent: list[str], npm_dir: Path) -> dict[str, Any]:
    """Run the TypeScript SDK client ``script`` against ``agent``; the JSON summary it prints."""
    with trio.fail_after(TIME_LIMIT):
        proc = await trio.run_process(
            ["node", str(INTEROP / script), str(cwd), *agent],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "ACP_INTEROP_NPM_DIR": str(npm_dir)},
        )
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{stderr}"
    lines = proc.stdout.decode("utf-8").splitlines()
    assert lines, f"{script} printed no summary:\n{stderr}"
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


def v1_step(update: dict[str, Any]) -> tuple[Any, ...]:
    """A v1 wire ``update`` as a comparable step."""
    kind = update["sessionUpdate"]
    if kind == "agent_message_chunk":
        return ("chunk", update["content"]["text"])
    if kind == "plan":
        return ("plan", [(e["content"], e["priority"], e["status"]) for e in update["entries"]])
    if kind in ("tool_call", "tool_call_update"):
        return (kind, update["toolCallId"], update.get("status"))
    return (kind,)


async def test_a_typescript_sdk_v1_client_drives_the_typescript_sdk_v2_agent_through_the_adapter(
    ts_sdk: Path, tmp_path: Path
) -> None:
    summary = await run_summary("ts_v1_turn_client.mjs", tmp_path, adapted(1, ts_v2_agent()), ts_sdk)
    init = summary["initialize"]
    assert init["protocolVersion"] == 1
    assert init["agentInfo"] == {"name": "ts-sdk-v2-turn-agent", "version": "2.4.0"}
    assert summary["prompt"] == {"stopReason": "end_turn"}
    assert summary["cancelledPrompt"] == {"stopReason": "cancelled"}
    updates = [u["update"] for u in summary["updates"]]
    assert {u["sessionId"] for u in summary["updates"]} == {summary["sessionId"]}
    assert [v1_step(u) for u in updates] == [
        ("chunk", "Hello"),
        ("chunk", " from"),
        ("chunk", " the TypeScript SDK"),
        ("plan", PLAN_STARTED),
        ("tool_call", "turn-write", "pending"),
        ("tool_call_update", "turn-write", "completed"),
        ("plan", PLAN_DONE),
        ("chunk", "permission: allow"),
        ("chunk", "waiting"),
        ("tool_call", "turn-wait", "pending"),
        ("chunk", "permission: cancelled"),
        ("tool_call_update", "turn-wait", "failed"),
    ]
    assert summary["updatesAfterPrompt"] == 8  # the turn's updates all came before its answer
    start = updates[4]
    assert (start["title"], start["kind"], start["_meta"]) == (WRITE, "edit", {"interop/mark": "ts"})
    assert updates[5]["content"] == [{"type": "content", "content": {"type": "text", "text": "wrote output.txt"}}]
    assert updates[-1]["_meta"] == {"acp-trio/status": "cancelled"}
    assert summary["permissions"] == [
        {"toolCallId": "turn-write", "title": None, "optionIds": ["allow", "reject"], "updatesBefore": 5},
        {"toolCallId": "turn-wait", "title": None, "optionIds": ["allow", "reject"], "updatesBefore": 10},
    ]
    assert summary["agentExit"] == {"code": 0, "signal": None}


# -- a v1-only agent (Python SDK) behind adapt --speak 2, v2 clients ------------------------------


async def test_our_v2_demo_client_drives_the_python_sdk_v1_agent_through_the_adapter(
    py_sdk_python: Path, tmp_path: Path
) -> None:
    (tmp_path / "input.txt").write_text(INPUT_TEXT, encoding="utf-8")
    command = adapted(2, py_v1_agent(py_sdk_python))
    with trio.fail_after(TIME_LIMIT):
        async with spawn_agent(command[0], command[1:], client={v2: V2TurnClient}, cwd=tmp_path) as conn:
            client: V2TurnClient = conn.handler
            init = await client.initialize("acp-trio-demo-client", "1")
            assert conn.protocol_version == 2 and init.protocol_version == 2
            assert init.info.name == "py-sdk-turn-agent"
            session_id = await client.new_session(tmp_path)

            result = await client.prompt(session_id, "hello")
            assert result.stop_reason == "end_turn"
            state = client.states[session_id]
            messages = [(m.role, m.text) for m in state.messages]
            assert messages == [
                ("user", "hello"),
                ("agent", "Hello from the Python SDK"),
                ("agent", "permission: allow"),
            ]
            assert state.messages[0].message_id == result.message_id  # the receipt names the user message
            tool = state.tool_calls["turn-write"]
            assert (tool.title, tool.kind, tool.status, tool.meta) == (
                WRITE,
                "edit",
                "completed",
                {"interop/mark": "py"},
            )
            assert plan_of(state.plans["plan"].entries) == PLAN_DONE
            # the agent's fs/* calls, answered by the adapter in the session's directory
            assert (tmp_path / "output.txt").read_text(encoding="utf-8") == f"echo: {INPUT_TEXT}"

            cancelled: list[Any] = []

            async def wait_turn() -> None:
                cancelled.append(await client.prompt(session_id, "wait"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_turn)
                await client.wait_asked.wait()
                await client.cancel(session_id)
            assert [r.stop_reason for r in cancelled] == ["cancelled"]
            later = state.messages[3:]
            assert [(m.role, m.text) for m in later] == [
                ("user", "wait"),
                ("agent", "waiting"),
                ("agent", "permission: cancelled"),
            ]
            # every agent message of the session has an id of its own: a new turn's text is not
            # appended to the last message of the turn before
            agent_ids = [m.message_id for m in state.messages if m.role == "agent"]
            assert len(set(agent_ids)) == len(agent_ids) == 4, agent_ids
            assert state.tool_calls["turn-wait"].status == "failed"
        assert conn.process.returncode == 0  # type: ignore[attr-defined]
    transcript = client.out.getvalue().splitlines()  # type: ignore[attr-defined]
    assert [line for line in transcript if not line.startswith("  [user_message ")] == [
        "  [state running]",
        "agent: Hello from the Python SDK",
        f"  [plan] [>] {ASK}  [ ] {WRITE}",
        f"  [tool turn-write] {WRITE} (edit): pending",
        "  [state requires_action]",
        f"  [permission] {WRITE} (tool turn-write): choosing 'Allow' (allow_once)",
        "  [state running]",
        "  [tool turn-write] completed wrote output.txt",
        f"  [plan] [x] {ASK}  [x] {WRITE}",
        "agent: permission: allow",
        "[turn ended: end_turn]",
        "  [state running]",
        "agent: waiting",
        f"  [tool turn-wait] {WRITE} (edit): pending",
        "  [state requires_action]",
        "agent: permission: cancelled",
        "  [tool turn-wait] failed",
        "[turn ended: cancelled]",
    ]


def v2_step(update: dict[str, Any]) -> tuple[Any, ...]:
    """A v2 wire ``update`` as a comparable step."""
    kind = update["sessionUpdate"]
    if kind == "user_message":
        return ("user_message", "".join(b["text"] for b in update["content"]))
    if kind == "state_update":
        return ("state", update["state"], update.get("stopReason"))
    if kind == "agent_message_chunk":
        return ("chunk", update["content"]["text"])
    if kind == "plan_update":
        entries = update["plan"]["entries"]
        return ("plan", update["plan"]["planId"], [(e["content"], e["priority"], e["status"]) for e in entries])
    if kind == "tool_call_update":
        return ("tool", update["toolCallId"], update.get("status"))
    return (kind,)


async def test_a_typescript_sdk_v2_client_drives_the_python_sdk_v1_agent_through_the_adapter(
    ts_sdk: Path, py_sdk_python: Path, tmp_path: Path
) -> None:
    (tmp_path / "input.txt").write_text(INPUT_TEXT, encoding="utf-8")
    summary = await run_summary("ts_v2_turn_client.mjs", tmp_path, adapted(2, py_v1_agent(py_sdk_python)), ts_sdk)
    init = summary["initialize"]
    assert init["protocolVersion"] == 2
    assert init["info"] == {"name": "py-sdk-turn-agent", "version": "0.12.1"}
    updates = [u["update"] for u in summary["updates"]]
    assert {u["sessionId"] for u in summary["updates"]} == {summary["sessionId"]}
    assert [v2_step(u) for u in updates] == [
        ("user_message", "hello"),
        ("state", "running", None),
        ("chunk", "Hello"),
        ("chunk", " from"),
        ("chunk", " the Python SDK"),
        ("plan", "plan", PLAN_STARTED),
        ("tool", "turn-write", "pending"),
        ("state", "requires_action", None),
        ("state", "running", None),
        ("tool", "turn-write", "completed"),
        ("plan", "plan", PLAN_DONE),
        ("chunk", "permission: allow"),
        ("state", "idle", "end_turn"),
        ("user_message", "wait"),
        ("state", "running", None),
        ("chunk", "waiting"),
        ("tool", "turn-wait", "pending"),
        ("state", "requires_action", None),
        ("chunk", "permission: cancelled"),
        ("tool", "turn-wait", "failed"),
        ("state", "idle", "cancelled"),
    ]
    # the receipts name the user messages; each agent message has its own id
    assert updates[0]["messageId"] == summary["prompt"]["messageId"]
    assert updates[13]["messageId"] == summary["cancelledPrompt"]["messageId"]
    chunk_ids = [u["messageId"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert len(set(chunk_ids[:3])) == 1
    assert len({chunk_ids[0], chunk_ids[3], chunk_ids[4], chunk_ids[5]}) == 4, chunk_ids
    assert updates[6]["_meta"] == {"interop/mark": "py"}
    # the ActiveSession's view: each turn ends with its stop message
    assert summary["turn"][-1] == {"kind": "stop", "stopReason": "end_turn"}
    assert summary["cancelledTurn"][-1] == {"kind": "stop", "stopReason": "cancelled"}
    assert [p["toolCallId"] for p in summary["permissions"]] == ["turn-write", "turn-wait"]
    assert [p["updatesBefore"] for p in summary["permissions"]] == [8, 18]
    assert (tmp_path / "output.txt").read_text(encoding="utf-8") == f"echo: {INPUT_TEXT}"
    assert summary["agentExit"] == {"code": 0, "signal": None}


class V2HoldingClient(V2TurnClient):
    """Leaves every permission request waiting (the test cancels the turn; the runtime then sends
    ``session/cancel`` and answers the request ``cancelled``, in that order)."""

    def _asked_for(self, request: Any) -> str:
        return "turn-wait"


CANCEL_ROUNDS = 30


async def test_the_v1_agent_sees_session_cancel_before_the_cancelled_permission_answer_through_the_adapter(
    py_sdk_python: Path, tmp_path: Path
) -> None:
    """prompt-turn.mdx (v1) § Cancellation: the client sends ``session/cancel``, then answers its pending
    permission requests ``cancelled``.  Behind ``adapt --speak 2`` the adapter is the v1 agent's client: a
    v2 client that cancels in that order (ours does) must reach the agent in that order, turn after turn.
    The agent tells in its last chunk when the answer came first (``permission: cancelled before
    session/cancel``) and then ends the turn ``end_turn`` when the cancel came after the turn's end."""
    command = adapted(2, py_v1_agent(py_sdk_python))
    seen: list[tuple[str, str]] = []
    with trio.fail_after(TIME_LIMIT * 2):
        async with spawn_agent(command[0], command[1:], client={v2: V2HoldingClient}, cwd=tmp_path) as conn:
            client: V2HoldingClient = conn.handler
            await client.initialize("acp-trio-demo-client", "1")
            for _ in range(CANCEL_ROUNDS):
                session_id = await client.new_session(tmp_path)
                client.wait_asked = trio.Event()
                results: list[Any] = []

                async def turn(session_id: str = session_id, results: list[Any] = results) -> None:
                    results.append(await client.prompt(session_id, "hello"))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(turn)
                    await client.wait_asked.wait()
                    await client.cancel(session_id)
                last = client.states[session_id].messages[-1]
                seen.append((results[0].stop_reason, last.text))
    assert seen == [("cancelled", "permission: cancelled")] * CANCEL_ROUNDS, [
        s for s in seen if s[1].endswith("cancel")
    ]


class _RawPeer:
    """A v2 client written as raw JSON lines over a process's pipes: what it sends is on the wire in
    exactly that order (two messages in one write)."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.stdin, self.stdout = process.stdin, process.stdout
        self.buffer = b""

    async def send(self, *messages: dict[str, Any]) -> None:
        await self.stdin.send_all(b"".join(json.dumps(m).encode() + b"\n" for m in messages))

    async def read_until(self, wanted: Any) -> dict[str, Any]:
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                message: dict[str, Any] = json.loads(line)
                if wanted(message):
                    return message
            data = await self.stdout.receive_some(65536)
            assert data, "the adapter closed its stdout"
            self.buffer += data


def _idle_of(session_id: str) -> Any:
    def idle(message: dict[str, Any]) -> bool:
        params = message.get("params") or {}
        update = params.get("update") or {}
        return params.get("sessionId") == session_id and update.get("state") == "idle"

    return idle


async def test_a_cancel_right_after_the_prompt_reaches_the_v1_agent_after_the_prompt_through_the_adapter(
    py_sdk_python: Path, tmp_path: Path
) -> None:
    """A v2 client may send ``session/cancel`` without waiting for the prompt's receipt (the checker's
    ``session.cancel`` does): behind ``adapt --speak 2`` the v1 agent must get the prompt first, then the
    cancel, and end the turn ``cancelled``.  The Python SDK's echo agent (``py_echo_agent.py``: 20 ms per
    word, 31 words) does so every time when a v1 client sends the two back to back (20 of 20)."""
    command = adapted(2, [str(py_sdk_python), str(INTEROP / "py_echo_agent.py")])
    words = " ".join(["word"] * 30)
    stops: list[str] = []
    with trio.fail_after(TIME_LIMIT * 2):
        process = await trio.lowlevel.open_process(command, stdin=-1, stdout=-1, cwd=tmp_path)
        try:
            peer = _RawPeer(process)
            info = {"name": "raw-v2-client", "version": "1"}
            await peer.send(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {"protocolVersion": 2, "info": info, "capabilities": {}},
                }
            )
            await peer.read_until(lambda m: m.get("id") == 0)
            for n in range(CANCEL_ROUNDS // 3):
                await peer.send(
                    {"jsonrpc": "2.0", "id": f"new-{n}", "method": "session/new", "params": {"cwd": str(tmp_path)}}
                )
                session_id = (await peer.read_until(lambda m, n=n: m.get("id") == f"new-{n}"))["result"]["sessionId"]
                prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": words}]}
                await peer.send(
                    {"jsonrpc": "2.0", "id": f"prompt-{n}", "method": "session/prompt", "params": prompt},
                    {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}},
                )
                idle = await peer.read_until(_idle_of(session_id))
                stops.append(idle["params"]["update"]["stopReason"])
        finally:
            assert process.stdin is not None
            await process.stdin.aclose()
            await process.wait()
    assert stops == ["cancelled"] * (CANCEL_ROUNDS // 3)

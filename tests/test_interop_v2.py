"""Interoperability in protocol version 2 with the TypeScript SDK's v2 entry point, over real stdio.

``@agentclientprotocol/sdk/experimental/v2`` (the SDK of ``tests/test_interop.py``, 2.4.0, built
from the same ``schema/v2/schema.json`` as ``acp_schema.v2``).  Two pairings play one script
(``docs/protocol/v2/prompt-lifecycle.mdx``, ``initialization.mdx``, ``tool-calls.mdx``):

- acp-trio's v2 client (``spawn_agent(..., client={v2: ...})``) drives an agent written with the
  SDK (``tests/interop/ts_v2_agent.mjs``);
- a client written with the SDK (``tests/interop/ts_v2_client.mjs``, through its ``ActiveSession``)
  drives acp-trio's agent (``tests/interop/trio_v2_agent.py``, v1 and v2 side by side).

The script: ``initialize`` negotiating version 2 (``info``, ``capabilities.session``),
``session/new``, a prompt whose ``session/prompt`` response is only the receipt (``messageId``),
then ``user_message`` with that id, ``state_update`` ``running``, ``agent_message_chunk`` s of one
message, a ``tool_call_update``, ``requires_action`` around a ``session/request_permission``
(subject: that tool call) answered ``allow``, ``running``, the tool call ``completed``, and
``state_update`` ``idle`` ``end_turn``; the extension request ``_interop/echo`` and the unknown
``_interop/missing`` (-32601); a second prompt whose permission request the client meets with
``session/cancel`` (answering it ``cancelled``), ending ``idle`` ``cancelled``.

Also: a permission request the SDK agent withdraws with ``$/cancel_request`` is answered with the
``cancelled`` outcome (as the v2 schema's ``RequestPermissionOutcome`` says), and versions side by side across
SDKs: our ``{v1, v2}`` client against the SDK's v1 and v2 agents, the SDK's v1 client
(``ts_client.mjs``, the v1 script of ``test_interop.py``) against ``trio_v2_agent.py``.

The SDK is installed by ``tests/test_interop.py``'s ``ts_sdk`` fixture (used from there; the
cache, marker file and lock are shared).  These tests skip only when ``node``/``npm`` are missing.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import test_interop  # pytest's default ("prepend") import mode puts tests/ on sys.path
import trio
from test_interop import INTEROP, TIME_LIMIT

from acp_schema import v1, v2
from acp_trio import METHOD_NOT_FOUND, ClientSideConnection, RequestError, spawn_agent

ts_sdk = test_interop.ts_sdk  # the session fixture installing the SDK, used here under its own name
TRIO_V2_AGENT = [sys.executable, str(INTEROP / "trio_v2_agent.py")]

# One turn as (kind, ...) steps; an agent says its greeting as the third chunk.
Step = tuple[Any, ...]


def hello_turn(greeting: str) -> list[Step]:
    return [
        ("user_message", "hello"),
        ("state", "running", None),
        ("chunk", "Hello"),
        ("chunk", " from"),
        ("chunk", greeting),
        ("tool", "interop-write", "pending"),
        ("state", "requires_action", None),
        ("state", "running", None),
        ("tool", "interop-write", "completed"),
        ("chunk", "permission: allow"),
        ("state", "idle", "end_turn"),
    ]


WAIT_TURN: list[Step] = [
    ("user_message", "wait"),
    ("state", "running", None),
    ("chunk", "waiting"),
    ("tool", "interop-wait", "pending"),
    ("state", "requires_action", None),
    # the agent saw its permission request answered "cancelled" and tells so before idle
    ("chunk", "permission: cancelled"),
    ("tool", "interop-wait", "cancelled"),
    ("state", "idle", "cancelled"),
]
OPTIONS = ["allow", "reject"]  # the permission options both agents offer
# updates of a turn before its permission request (user_message .. requires_action)
HELLO_PERMISSION_AT = 7
WAIT_PERMISSION_AT = 5
# a step's kind as the SDK's ActiveSession messages name it (sessionUpdate)
SESSION_UPDATE = {
    "user_message": "user_message",
    "state": "state_update",
    "chunk": "agent_message_chunk",
    "tool": "tool_call_update",
}


def wire_step(update: dict[str, Any]) -> Step:
    """A wire ``session/update`` ``update`` object as a step."""
    kind = update["sessionUpdate"]
    if kind == "user_message":
        return ("user_message", "".join(block["text"] for block in update["content"] if block["type"] == "text"))
    if kind == "state_update":
        return ("state", update["state"], update.get("stopReason"))
    if kind == "agent_message_chunk":
        assert update["content"]["type"] == "text", update
        return ("chunk", update["content"]["text"])
    if kind == "tool_call_update":
        return ("tool", update["toolCallId"], update.get("status"))
    raise AssertionError(f"unexpected update {update!r}")


def typed_step(update: Any) -> Step:
    """A decoded ``v2.SessionUpdate`` as a step (each must decode to its own class, not an ``Other``)."""
    if isinstance(update, v2.UserMessageSessionUpdate):
        texts = [block.text for block in update.content or () if isinstance(block, v2.TextContentBlock)]
        return ("user_message", "".join(texts))
    if isinstance(update, v2.RunningStateUpdateSessionUpdate | v2.RequiresActionStateUpdateSessionUpdate):
        return ("state", update.state, None)
    if isinstance(update, v2.IdleStateUpdateSessionUpdate):
        return ("state", "idle", update.stop_reason if isinstance(update.stop_reason, str) else None)
    if isinstance(update, v2.AgentMessageChunkSessionUpdate):
        assert isinstance(update.content, v2.TextContentBlock), update.content
        return ("chunk", update.content.text)
    if isinstance(update, v2.ToolCallUpdateSessionUpdate):
        return ("tool", update.tool_call_id, update.status if isinstance(update.status, str) else None)
    raise AssertionError(f"unexpected update {update!r}")


# -- acp-trio's v2 client, driving the TypeScript SDK's v2 agent ------------------------------------


class V2InteropClient:
    """Records updates; answers ``allow``, and leaves the ``interop-wait`` (``interop-abandon``) request
    to ``session/cancel`` (to the agent's ``$/cancel_request``)."""

    def __init__(self, conn: ClientSideConnection) -> None:
        self.conn = conn
        self.updates: list[v2.UpdateSessionNotification] = []
        # (tool call id, title, option ids, updates handled before it)
        self.permissions: list[tuple[str, str, list[str], int]] = []
        self.idle = trio.Event()
        self.wait_asked = trio.Event()

    async def session_update(self, params: v2.UpdateSessionNotification) -> None:
        self.updates.append(params)
        if isinstance(params.update, v2.IdleStateUpdateSessionUpdate):
            self.idle.set()

    async def session_request_permission(self, params: v2.RequestPermissionRequest) -> v2.RequestPermissionResponse:
        subject = params.subject
        assert isinstance(subject, v2.ToolCallRequestPermissionSubject), subject
        tool_call_id = subject.tool_call.tool_call_id
        # the runtime starts a permission request after its session's earlier updates were handled
        options = [str(option.option_id) for option in params.options]
        self.permissions.append((tool_call_id, params.title, options, len(self.updates)))
        if tool_call_id in ("interop-wait", "interop-abandon"):
            self.wait_asked.set()
            await trio.sleep_forever()  # until a cancellation: session/cancel or the agent's $/cancel_request
        return v2.RequestPermissionResponse(outcome=v2.SelectedRequestPermissionOutcome(option_id="allow"))


def check_turn(updates: list[v2.UpdateSessionNotification], expected: list[Step], receipt: v2.PromptResponse) -> None:
    assert [typed_step(n.update) for n in updates] == expected
    user, *rest = (n.update for n in updates)
    assert isinstance(user, v2.UserMessageSessionUpdate)
    assert user.message_id == receipt.message_id  # the receipt names the inserted user message
    chunk_ids = {u.message_id for u in rest if isinstance(u, v2.AgentMessageChunkSessionUpdate)}
    assert len(chunk_ids) == 1 and receipt.message_id not in chunk_ids  # one agent message, its own id


def spawn_ts_v2_agent(npm_dir: Path, cwd: Path) -> AbstractAsyncContextManager[ClientSideConnection]:
    return spawn_agent(
        "node",
        [str(INTEROP / "ts_v2_agent.mjs")],
        client={v2: V2InteropClient},
        env={"ACP_INTEROP_NPM_DIR": str(npm_dir)},
        cwd=cwd,
    )


V2_INITIALIZE = v2.InitializeRequest(
    protocol_version=2,
    info=v2.Implementation(name="acp-trio-v2-interop-client", version="1"),
    capabilities=v2.ClientCapabilities(),
)


async def test_our_v2_client_drives_an_agent_written_with_the_typescript_sdk_v2(ts_sdk: Path, tmp_path: Path) -> None:
    with trio.fail_after(TIME_LIMIT):
        async with spawn_ts_v2_agent(ts_sdk, tmp_path) as conn:
            init = await conn.initialize(V2_INITIALIZE)
            assert isinstance(init, v2.InitializeResponse)
            assert init.protocol_version == 2 and conn.protocol_version == 2
            assert (init.info.name, init.info.version) == ("ts-sdk-v2-interop-agent", "2.4.0")
            assert isinstance(init.capabilities, v2.AgentCapabilities)
            assert isinstance(init.capabilities.session, v2.SessionCapabilities)
            client: V2InteropClient = conn.handler
            agent = conn.agent
            assert isinstance(agent, v2.AgentPeer)

            session = await agent.session_new(v2.NewSessionRequest(cwd=str(tmp_path)))
            session_id = session.session_id
            assert session_id

            # a turn: the response is the receipt; the updates end with idle end_turn
            receipt = await agent.session_prompt(
                v2.PromptRequest(session_id=session_id, prompt=[v2.TextContentBlock(text="hello")])
            )
            assert isinstance(receipt, v2.PromptResponse) and receipt.message_id
            await client.idle.wait()
            check_turn(client.updates, hello_turn(" the TypeScript SDK"), receipt)
            assert client.permissions == [("interop-write", "Write output.txt?", OPTIONS, HELLO_PERMISSION_AT)]
            assert {n.session_id for n in client.updates} == {session_id}

            # an extension method, and one the agent does not have
            payload = {"value": 42, "nested": {"ok": True, "list": [1, None, "x"]}}
            assert await conn.ext_request("_interop/echo", payload) == {"echo": payload}
            with pytest.raises(RequestError) as missing:
                await conn.ext_request("_interop/missing", {})
            assert missing.value.code == METHOD_NOT_FOUND

            # a turn cancelled while the agent waits on a permission request
            seen = len(client.updates)
            client.idle = trio.Event()
            receipt = await agent.session_prompt(
                v2.PromptRequest(session_id=session_id, prompt=[v2.TextContentBlock(text="wait")])
            )
            await client.wait_asked.wait()
            await agent.session_cancel(v2.CancelSessionNotification(session_id=session_id))
            await client.idle.wait()
            check_turn(client.updates[seen:], WAIT_TURN, receipt)
            assert client.permissions[1:] == [("interop-wait", "Write output.txt?", OPTIONS, seen + WAIT_PERMISSION_AT)]
        assert conn.process.returncode == 0  # type: ignore[attr-defined]


async def test_our_v2_client_answers_a_permission_request_the_agent_withdraws_with_the_cancelled_outcome(
    ts_sdk: Path, tmp_path: Path
) -> None:
    with trio.fail_after(TIME_LIMIT):
        async with spawn_ts_v2_agent(ts_sdk, tmp_path) as conn:
            await conn.initialize(V2_INITIALIZE)
            client: V2InteropClient = conn.handler
            session = await conn.agent.session_new(v2.NewSessionRequest(cwd=str(tmp_path)))
            session_id = session.session_id
            await conn.agent.session_prompt(
                v2.PromptRequest(session_id=session_id, prompt=[v2.TextContentBlock(text="abandon")])
            )
            await client.wait_asked.wait()
            assert await conn.ext_request("_interop/abandon", {"sessionId": session_id}) == {"abandoned": True}
            await client.idle.wait()
            steps = [typed_step(n.update) for n in client.updates]
        assert steps[:4] == [
            ("user_message", "abandon"),
            ("state", "running", None),
            ("tool", "interop-abandon", "pending"),
            ("state", "requires_action", None),
        ]
        assert steps[4:] == [
            ("state", "running", None),
            ("tool", "interop-abandon", "cancelled"),
            ("chunk", "permission: cancelled"),  # today: "permission: error -32800"
            ("state", "idle", "end_turn"),
        ]


# -- the TypeScript SDK's v2 client, driving acp-trio's agent ----------------------------------------


async def run_ts_client(script: str, npm_dir: Path, cwd: Path) -> dict[str, Any]:
    """Run the TypeScript SDK client ``script`` against acp-trio's agent (``trio_v2_agent.py``); return
    the JSON summary it prints."""
    (cwd / "input.txt").write_text(test_interop.INPUT_TEXT, encoding="utf-8")  # for the v1 script's fs reads
    with trio.fail_after(TIME_LIMIT):
        proc = await trio.run_process(
            ["node", str(INTEROP / script), str(cwd), *TRIO_V2_AGENT],
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


async def test_a_client_written_with_the_typescript_sdk_v2_drives_our_v2_agent(ts_sdk: Path, tmp_path: Path) -> None:
    summary = await run_ts_client("ts_v2_client.mjs", ts_sdk, tmp_path)
    init = summary["initialize"]
    assert init["protocolVersion"] == 2
    assert init["info"] == {"name": "acp-trio-v2-interop-agent", "version": "1"}
    assert init["capabilities"] == {"session": {}}
    session_id = summary["sessionId"]
    assert session_id

    updates = summary["updates"]
    assert {u["sessionId"] for u in updates} == {session_id}
    split = 1 + next(i for i, u in enumerate(updates) if u["update"].get("state") == "idle")  # after the first idle
    for turn, expected, receipt, seen in (
        (updates[:split], hello_turn(" acp-trio"), summary["prompt"], summary["turn"]),
        (updates[split:], WAIT_TURN, summary["cancelledPrompt"], summary["cancelledTurn"]),
    ):
        assert [wire_step(u["update"]) for u in turn] == expected
        assert set(receipt) == {"messageId"}  # the receipt, nothing of the turn
        assert turn[0]["update"]["messageId"] == receipt["messageId"]
        chunk_ids = {u["update"]["messageId"] for u in turn if u["update"]["sessionUpdate"] == "agent_message_chunk"}
        assert len(chunk_ids) == 1 and receipt["messageId"] not in chunk_ids
        # the SDK's ActiveSession read the same updates, the idle one as its "stop" message
        assert seen == [
            *({"kind": "session_update", "sessionUpdate": SESSION_UPDATE[step[0]]} for step in expected[:-1]),
            {"kind": "stop", "stopReason": expected[-1][2]},
        ]

    assert summary["permissions"] == [
        {
            "toolCallId": "interop-write",
            "title": "Write output.txt?",
            "optionIds": OPTIONS,
            "updatesBefore": HELLO_PERMISSION_AT,
        },
        {
            "toolCallId": "interop-wait",
            "title": "Write output.txt?",
            "optionIds": OPTIONS,
            "updatesBefore": split + WAIT_PERMISSION_AT,
        },
    ]
    assert summary["echo"] == {"result": {"echo": {"value": 42, "nested": {"ok": True}}}}
    assert summary["missing"]["error"]["code"] == METHOD_NOT_FOUND
    assert summary["agentExit"]["code"] == 0  # acp-trio's agent exits cleanly when stdin closes


# -- versions side by side, across SDKs ---------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "version", "name"),
    [("ts_agent.mjs", 1, "ts-sdk-interop-agent"), ("ts_v2_agent.mjs", 2, "ts-sdk-v2-interop-agent")],
    ids=["sdk-v1-agent", "sdk-v2-agent"],
)
async def test_our_client_speaking_v1_and_v2_continues_in_the_version_each_sdk_agent_answers(
    ts_sdk: Path, tmp_path: Path, script: str, version: int, name: str
) -> None:
    # migration.mdx "Version negotiation": the client asks for 2; a v1-only agent answers 1
    with trio.fail_after(TIME_LIMIT):
        async with spawn_agent(
            "node",
            [str(INTEROP / script)],
            client={v1: lambda conn: test_interop.InteropClient(tmp_path), v2: V2InteropClient},
            env={"ACP_INTEROP_NPM_DIR": str(ts_sdk)},
            cwd=tmp_path,
        ) as conn:
            init = await conn.initialize(
                V2_INITIALIZE,
                v1.InitializeRequest(
                    protocol_version=1, client_info=v1.Implementation(name="acp-trio-v1-interop-client", version="1")
                ),
            )
            variant = v1 if version == 1 else v2
            assert isinstance(init, variant.InitializeResponse)
            assert init.protocol_version == version and conn.protocol_version == version
            info = init.agent_info if isinstance(init, v1.InitializeResponse) else init.info
            assert info is not None and info.name == name
            assert isinstance(conn.agent, variant.AgentPeer)
            new_session = (
                v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[])
                if version == 1
                else v2.NewSessionRequest(cwd=str(tmp_path))
            )
            assert (await conn.agent.session_new(new_session)).session_id
        assert conn.process.returncode == 0  # type: ignore[attr-defined]


async def test_a_client_written_with_the_typescript_sdk_v1_drives_our_side_by_side_agent_in_v1(
    ts_sdk: Path, tmp_path: Path
) -> None:
    # trio_v2_agent.py serves {v1: InteropAgent, v2: InteropV2Agent}: the v1 client gets the v1 script
    summary = await run_ts_client("ts_client.mjs", ts_sdk, tmp_path)
    test_interop.check_foreign_client_summary(summary, tmp_path)

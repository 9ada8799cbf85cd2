"""The adapter, second direction (issue 33): a v1-only agent served to a v2 client by ``acp_trio.adapt``.

In memory: a hand-written v1 agent (:class:`RawV1Agent`, served v1 only) on one memory stream
pair, :class:`acp_trio.adapt.V2Front` between, a plain v2 client on another pair.  Each test reads
the JSON lines the v2 client received (a client-side tap) and checks them against
``docs/protocol/v2/migration.mdx`` and ``prompt-lifecycle.mdx``: a receipt with a ``messageId``, the
``user_message`` carrying it, ``running``, chunks with ``messageId`` s, ``tool_call_update``,
``plan_update``, ``requires_action`` around a permission, ``idle`` with the v1 stop reason, and
nothing of v1 (``tool_call``, ``plan``, ``current_mode_update``) on the v2 wire.  The agent's
``fs/*`` calls are answered by the adapter inside the session's ``cwd`` (a ``tmp_path``).
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
from trio.testing import memory_stream_pair

from acp_schema import v1, v2
from acp_trio import AgentSideConnection, ClientSideConnection, RequestError, spawn_agent
from acp_trio._converter import converter
from acp_trio._spec import UNSET
from acp_trio.adapt import V2Front

DEADLINE = 10  # seconds; a turn takes milliseconds in memory
MODES = v1.SessionModeState(
    current_mode_id="ask",
    available_modes=[v1.SessionMode(id="ask", name="Ask"), v1.SessionMode(id="code", name="Code")],
)
ALLOW_OR_REJECT = [
    v1.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    v1.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]


class RawV1Agent:
    """A v1-only agent whose turn depends on the prompt's text: ``turn`` (text, a plan, a tool call
    with a permission, an fs read and write in its cwd), ``outside`` (an fs read outside it),
    ``wait`` (until cancelled), ``fail`` (a v1 error)."""

    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn
        self.client = v1.ClientPeer(conn)
        self.requests: list[Any] = []
        self.errors: list[RequestError] = []
        self.outcomes: list[Any] = []
        self.waiting = trio.Event()

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        self.requests.append(params)
        return v1.InitializeResponse(
            protocol_version=1,
            agent_info=v1.Implementation(name="raw-v1", version="1"),
            agent_capabilities=v1.AgentCapabilities(
                load_session=True, prompt_capabilities=v1.PromptCapabilities(embedded_context=True)
            ),
            auth_methods=[v1.AuthMethodAgent(id="key", name="API key")],
        )

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        self.requests.append(params)
        return v1.NewSessionResponse(session_id="s1", modes=MODES)

    async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
        self.requests.append(params)
        await self.say(params.session_id, v1.UserMessageChunkSessionUpdate(content=text("earlier")))
        await self.say(params.session_id, v1.AgentMessageChunkSessionUpdate(content=text("answer")))
        return v1.LoadSessionResponse(modes=MODES)

    async def session_set_mode(self, params: v1.SetSessionModeRequest) -> v1.SetSessionModeResponse:
        self.requests.append(params)
        return v1.SetSessionModeResponse()

    async def say(self, session_id: str, update: Any) -> None:
        await self.client.session_update(v1.SessionNotification(session_id=session_id, update=update))

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        self.requests.append(params)
        sid = params.session_id
        first = params.prompt[0]
        assert isinstance(first, v1.TextContentBlock)
        cwd = self.conn.sessions[sid].cwd if sid in self.conn.sessions else "/work"
        if first.text == "terminal":  # a v1 client terminal, shown in a tool call
            made = await self.client.terminal_create(
                v1.CreateTerminalRequest(session_id=sid, command="echo", args=["hi there"])
            )
            shown = v1.TerminalToolCallContent(terminal_id=made.terminal_id)
            call = v1.ToolCallSessionUpdate(tool_call_id="t1", title="echo", kind="execute", content=[shown])
            await self.say(sid, call)
            await self.client.terminal_wait_for_exit(
                v1.WaitForTerminalExitRequest(session_id=sid, terminal_id=made.terminal_id)
            )
            await self.client.terminal_release(v1.ReleaseTerminalRequest(session_id=sid, terminal_id=made.terminal_id))
            return v1.PromptResponse(stop_reason="end_turn")
        if first.text == "hi":
            await self.say(sid, v1.AgentMessageChunkSessionUpdate(content=text("hello")))
            return v1.PromptResponse(stop_reason="end_turn")
        if first.text == "fail":
            raise RequestError(-32000, "quota exceeded", {"retryAfter": 5})
        if first.text == "wait":
            await self.say(sid, v1.AgentMessageChunkSessionUpdate(content=text("working")))
            self.waiting.set()
            try:
                await trio.sleep_forever()
            finally:  # what the agent says while it stops reaches the client before idle
                with trio.CancelScope(shield=True):
                    await self.say(sid, v1.AgentMessageChunkSessionUpdate(content=text("stopped")))
        if first.text == "outside":  # sent raw: past the runtime's check of the client's capabilities
            calls = [
                ("fs/read_text_file", {"sessionId": sid, "path": "/etc/hostname"}),
                ("terminal/create", {"sessionId": sid, "command": "true", "cwd": "/"}),
            ]
            for method, wire_params in calls:
                try:
                    await self.conn.connection.request(method, wire_params)
                except RequestError as exc:
                    self.errors.append(exc)
            return v1.PromptResponse(stop_reason="refusal")
        await self.say(sid, v1.AgentThoughtChunkSessionUpdate(content=text("Planning.")))
        await self.say(sid, v1.AgentMessageChunkSessionUpdate(content=text("Hello ")))
        await self.say(sid, v1.AgentMessageChunkSessionUpdate(content=text("there")))
        entry = v1.PlanEntry(content="Edit b.txt", priority="high", status="pending")
        await self.say(sid, v1.PlanSessionUpdate(entries=[entry]))
        await self.say(
            sid, v1.ToolCallSessionUpdate(tool_call_id="c1", title="Edit b.txt", kind="edit", status="pending")
        )
        answer = await self.client.session_request_permission(
            v1.RequestPermissionRequest(
                session_id=sid, tool_call=v1.ToolCallUpdate(tool_call_id="c1"), options=ALLOW_OR_REJECT
            )
        )
        outcome = answer.outcome
        self.outcomes.append(outcome)
        if not (isinstance(outcome, v1.SelectedRequestPermissionOutcome) and outcome.option_id == "allow"):
            await self.say(sid, v1.ToolCallUpdateSessionUpdate(tool_call_id="c1", status="failed"))
            return v1.PromptResponse(stop_reason="end_turn")
        await self.say(sid, v1.ToolCallUpdateSessionUpdate(tool_call_id="c1", status="in_progress"))
        read = await self.client.fs_read_text_file(v1.ReadTextFileRequest(session_id=sid, path=f"{cwd}/a.txt"))
        new = read.content.upper()
        await self.client.fs_write_text_file(v1.WriteTextFileRequest(session_id=sid, path=f"{cwd}/b.txt", content=new))
        diff = v1.DiffToolCallContent(path=f"{cwd}/b.txt", new_text=new)
        await self.say(sid, v1.ToolCallUpdateSessionUpdate(tool_call_id="c1", status="completed", content=[diff]))
        await self.say(sid, v1.PlanSessionUpdate(entries=[v1.PlanEntry(**{**_fields(entry), "status": "completed"})]))
        await self.say(sid, v1.AgentMessageChunkSessionUpdate(content=text("Done.")))
        return v1.PromptResponse(stop_reason="end_turn")


def _fields(entry: v1.PlanEntry) -> dict[str, Any]:
    return {"content": entry.content, "priority": entry.priority, "status": entry.status}


def text(value: str) -> v1.TextContentBlock:
    return v1.TextContentBlock(text=value)


class V2Client:
    """A plain v2 client: answers permission requests with ``answer``, notes idle updates."""

    def __init__(self, answer: str = "allow") -> None:
        self.answer = answer
        self.idle = trio.Event()
        self.asked = trio.Event()
        self.exited = trio.Event()
        self.chunk = trio.Event()

    async def session_update(self, params: v2.UpdateSessionNotification) -> None:
        if isinstance(params.update, v2.IdleStateUpdateSessionUpdate):
            self.idle.set()
        if isinstance(params.update, v2.AgentMessageChunkSessionUpdate):
            self.chunk.set()
        if isinstance(params.update, v2.TerminalUpdateSessionUpdate) and params.update.exit_status:
            self.exited.set()

    async def session_request_permission(self, params: v2.RequestPermissionRequest) -> v2.RequestPermissionResponse:
        self.asked.set()
        return v2.RequestPermissionResponse(outcome=v2.SelectedRequestPermissionOutcome(option_id=self.answer))


def raw_agents() -> tuple[list[RawV1Agent], dict[Any, Any]]:
    agents: list[RawV1Agent] = []

    def make(conn: AgentSideConnection) -> RawV1Agent:
        agents.append(RawV1Agent(conn))
        return agents[-1]

    return agents, {v1: make}


@asynccontextmanager
async def adapted(
    agent: Any,
    client: Any,
    received: list[bytes],
    *,
    client_fs: bool = True,
    grace: float = 5,
    caps: v2.ClientCapabilities | None = None,
) -> AsyncIterator[tuple[V2Front, Any, v2.InitializeResponse]]:
    """``agent`` (handlers speaking v1) behind a :class:`V2Front`, driven by the v2 ``client``;
    yields the front, the client's ``AgentPeer`` and the ``initialize`` answer.  ``received``: the
    v2 client's input lines."""
    front = V2Front(client_fs=client_fs, cancel_grace=grace)
    agent_stream, back_stream = memory_stream_pair()
    front_stream, client_stream = memory_stream_pair()
    agent_conn = AgentSideConnection(agent, agent_stream, agent_stream)
    back_conn = ClientSideConnection(front.agent_handlers(), back_stream, back_stream)
    front_conn = AgentSideConnection(front, front_stream, front_stream)
    client_conn = ClientSideConnection(
        {v2: client}, client_stream, client_stream, tap=lambda d, data: received.append(data) if d == "in" else None
    )
    with trio.fail_after(DEADLINE):
        async with agent_conn, back_conn, front_conn, client_conn:
            init = await client_conn.initialize(
                v2.InitializeRequest(
                    protocol_version=2,
                    info=v2.Implementation(name="v2-client", version="1"),
                    capabilities=caps or v2.ClientCapabilities(),
                )
            )
            assert init.protocol_version == 2
            assert back_conn.protocol_version == 1  # the agent was spoken to in v1
            yield front, client_conn.agent, init


def wire(received: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in received]


def updates(received: list[bytes]) -> list[dict[str, Any]]:
    """The session updates (their ``update``), permission requests (``{"permission": params}``) and
    the prompt receipt (``{"receipt": result}``) the client read, in order."""
    out: list[dict[str, Any]] = []
    for message in wire(received):
        if message.get("method") == "session/update":
            out.append(message["params"]["update"])
        elif message.get("method") == "session/request_permission":
            out.append({"permission": message["params"]})
        elif "messageId" in message.get("result", {}):
            out.append({"receipt": message["result"]})
    return out


def kinds(items: list[dict[str, Any]]) -> list[str]:
    out = []
    for u in items:
        kind = u.get("sessionUpdate", next(iter(u)))
        out.append(f"{kind} {u['state']}" if kind == "state_update" else kind)
    return out


async def prompt(agent: Any, client: V2Client, session_id: str, said: str) -> v2.PromptResponse:
    """Send a prompt and wait for its turn's ``idle``."""
    client.idle = trio.Event()
    receipt: v2.PromptResponse = await agent.session_prompt(
        v2.PromptRequest(session_id=session_id, prompt=[v2.TextContentBlock(text=said)])
    )
    await client.idle.wait()
    return receipt


async def test_a_full_turn_of_a_v1_only_agent_reaches_the_v2_client_as_v2(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    received: list[bytes] = []
    client = V2Client()
    agents, handlers = raw_agents()
    async with adapted(handlers, client, received) as (front, agent, init):
        new = await agent.session_new(v2.NewSessionRequest(cwd=str(tmp_path)))
        receipt = await prompt(agent, client, new.session_id, "turn")
    # initialize: the agent was offered fs and terminal (the adapter answers them), the client got v2
    v1_init = agents[0].requests[0]
    assert v1_init.client_info.name == "v2-client"
    caps = v1_init.client_capabilities
    assert caps.fs.read_text_file is True and caps.fs.write_text_file is True and caps.terminal is True
    assert (init.info.name, init.info.version) == ("raw-v1", "1")
    assert init.capabilities.session.prompt.embedded_context is not UNSET
    assert [m.method_id for m in init.auth_methods] == ["key"]
    # session/new: v1 needs mcpServers; the modes are a category "mode" option
    assert agents[0].requests[1].mcp_servers == []
    ((option),) = new.config_options
    assert (option.config_id, option.category, option.current_value) == ("mode", "mode", "ask")
    # the turn
    items = updates(received)
    assert kinds(items) == [
        "user_message",
        "receipt",
        "state_update running",
        "agent_thought_chunk",
        "agent_message_chunk",
        "agent_message_chunk",
        "plan_update",
        "tool_call_update",
        "state_update requires_action",
        "permission",
        "state_update running",
        "tool_call_update",
        "tool_call_update",
        "plan_update",
        "agent_message_chunk",
        "state_update idle",
    ]
    (user, got, _, thought, hello, there, plan, created, _, permission, _, progress, done, plan_done, last, idle) = (
        items
    )
    assert user == {
        "sessionUpdate": "user_message",
        "messageId": receipt.message_id,
        "content": [{"type": "text", "text": "turn"}],
    }
    assert got == {"receipt": {"messageId": receipt.message_id}}
    assert thought["content"] == {"type": "text", "text": "Planning."}
    assert hello["messageId"] == there["messageId"] != thought["messageId"]  # one message of two chunks
    assert last["messageId"] not in (hello["messageId"], thought["messageId"])  # after a tool call: a new one
    assert plan["plan"]["type"] == "items" and plan["plan"]["entries"][0]["status"] == "pending"
    assert plan_done["plan"]["planId"] == plan["plan"]["planId"]  # one plan per session
    assert plan_done["plan"]["entries"][0]["status"] == "completed"
    assert created == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "title": "Edit b.txt",
        "kind": "edit",
        "status": "pending",
    }
    request = permission["permission"]
    assert request["subject"] == {"type": "tool_call", "toolCall": {"toolCallId": "c1"}}
    assert request["title"] == "Allow this tool call?"  # v2 requires one; the v1 request had none
    assert [o["optionId"] for o in request["options"]] == ["allow", "reject"]
    assert progress["status"] == "in_progress"
    assert done["status"] == "completed"
    ((diff),) = done["content"]
    assert diff["type"] == "diff" and diff["changes"] == [
        {"operation": "add", "fileType": "text", "path": str(tmp_path / "b.txt")}
    ]
    assert idle == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
    # the fs calls were answered by the adapter in the session's cwd
    assert (tmp_path / "b.txt").read_text() == "HELLO\n"
    flat = json.dumps(wire(received))
    for v1_only in ('"sessionUpdate": "tool_call"', '"sessionUpdate": "plan"', "current_mode_update"):
        assert v1_only not in flat
    assert front.sessions.keys() == {"s1"}


async def test_fs_outside_the_cwd_is_refused_and_disabled_batteries_answer_32601_saying_how(tmp_path: Path) -> None:
    received: list[bytes] = []
    client = V2Client()
    agents, handlers = raw_agents()
    async with adapted(handlers, client, received) as (_, agent, _init):
        new = await agent.session_new(v2.NewSessionRequest(cwd=str(tmp_path)))
        await prompt(agent, client, new.session_id, "outside")
    outside, terminal = agents[0].errors
    assert outside.code == -32602 and outside.data["roots"] == [str(tmp_path)]  # the session's cwd
    assert terminal.code == -32602 and terminal.data["field"] == "cwd"  # terminals run inside it too
    assert next(u for u in updates(received) if u.get("state") == "idle")["stopReason"] == "refusal"

    received = []
    client = V2Client()
    agents, handlers = raw_agents()
    async with adapted(handlers, client, received, client_fs=False) as (front, agent, _init):
        new = await agent.session_new(v2.NewSessionRequest(cwd=str(tmp_path)))
        await prompt(agent, client, new.session_id, "outside")
    caps = agents[0].requests[0].client_capabilities
    assert caps.fs is UNSET and caps.terminal is UNSET  # not offered
    for error, method in zip(agents[0].errors, ("fs/read_text_file", "terminal/create"), strict=True):
        assert error.code == -32601
        assert error.data["method"] == method
        assert "--no-client-fs" in error.data["detail"]
    assert front.fs is None and front.terminals is None


async def test_a_terminal_the_adapter_runs_is_shown_to_the_v2_client_as_a_display_terminal(tmp_path: Path) -> None:
    received: list[bytes] = []
    client = V2Client()
    _, handlers = raw_agents()
    async with adapted(handlers, client, received) as (front, agent, _init):
        new = await agent.session_new(v2.NewSessionRequest(cwd=str(tmp_path)))
        await prompt(agent, client, new.session_id, "terminal")
        await client.exited.wait()
    assert front.terminals is not None and not front.terminals.terminals  # released
    items = [u for u in updates(received) if u.get("sessionUpdate", "").startswith(("terminal", "tool_call"))]
    created, *chunks, exited = [u for u in items if u["sessionUpdate"].startswith("terminal")]
    (call,) = [u for u in items if u["sessionUpdate"] == "tool_call_update"]
    terminal_id = created["terminalId"]
    assert created == {
        "sessionUpdate": "terminal_update",
        "terminalId": terminal_id,
        "command": "echo 'hi there'",
        "cwd": str(tmp_path),  # the session's cwd: where the adapter ran it
    }
    assert call["content"] == [{"type": "terminal", "terminalId": terminal_id}]
    assert b"".join(base64.b64decode(c["data"]) for c in chunks) == b"hi there\n"
    assert {c["terminalId"] for c in chunks} == {terminal_id}
    assert exited == {"sessionUpdate": "terminal_update", "terminalId": terminal_id, "exitStatus": {"exitCode": 0}}


MODEL = v1.SelectSessionConfigOption(
    id="model",
    name="Model",
    category="model",
    current_value="small",
    options=[
        v1.SessionConfigSelectOption(value="small", name="Small"),
        v1.SessionConfigSelectOption(value="big", name="Big"),
    ],
)


class FullV1Agent(RawV1Agent):
    """Auth methods with logout, a config option (no modes), elicitation."""

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        self.requests.append(params)
        return v1.InitializeResponse(
            protocol_version=1,
            agent_capabilities=v1.AgentCapabilities(
                auth=v1.AgentAuthCapabilities(logout=v1.LogoutCapabilities()),
                mcp_capabilities=v1.McpCapabilities(http=True),
            ),
            auth_methods=[v1.AuthMethodAgent(id="key", name="API key")],
        )

    async def authenticate(self, params: v1.AuthenticateRequest) -> v1.AuthenticateResponse:
        self.requests.append(params)
        return v1.AuthenticateResponse()

    async def logout(self, params: v1.LogoutRequest) -> v1.LogoutResponse:
        self.requests.append(params)
        return v1.LogoutResponse()

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        self.requests.append(params)
        return v1.NewSessionResponse(session_id="s1", config_options=[MODEL])

    async def session_set_config_option(self, params: Any) -> v1.SetSessionConfigOptionResponse:
        self.requests.append(params)
        changed = v1.SelectSessionConfigOption(
            **{**{f: getattr(MODEL, f) for f in ("id", "name", "category", "options")}, "current_value": params.value}
        )
        return v1.SetSessionConfigOptionResponse(config_options=[changed])

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        schema = converter.structure(
            {"type": "object", "properties": {"name": {"type": "string"}}}, v1.ElicitationSchema
        )
        form = v1.FormCreateElicitationRequest(message="Name?", requested_schema=schema, session_id=params.session_id)
        self.outcomes.append(await self.client.elicitation_create(form))
        return v1.PromptResponse(stop_reason="end_turn")


class FormClient(V2Client):
    async def elicitation_create(self, params: Any) -> Any:
        assert isinstance(params, v2.FormCreateElicitationRequest) and params.message == "Name?"
        return v2.AcceptCreateElicitationResponse(content={"name": "Ada"}, meta={"from": "v2"})


async def test_auth_config_options_mcp_servers_and_elicitation_reach_the_v1_agent() -> None:
    received: list[bytes] = []
    client = FormClient()
    agents: list[RawV1Agent] = []

    def make(conn: AgentSideConnection) -> RawV1Agent:
        agents.append(FullV1Agent(conn))
        return agents[-1]

    forms = v2.ClientCapabilities(elicitation=v2.ElicitationCapabilities(form=v2.ElicitationFormCapabilities()))
    http = v2.HttpMcpServer(name="docs", url="https://example.com/mcp", headers=[])
    async with adapted({v1: make}, client, received, caps=forms) as (_, agent, init):
        await agent.auth_login(v2.LoginAuthRequest(method_id="key"))
        new = await agent.session_new(v2.NewSessionRequest(cwd="/work", mcp_servers=[http]))
        answer = await agent.session_set_config_option(
            v2.IdSetSessionConfigOptionRequest(session_id="s1", config_id="model", value="big")
        )
        await prompt(agent, client, new.session_id, "x")
        await agent.auth_logout(v2.LogoutAuthRequest())
    v1_init, login, new_request, set_option, logout = agents[0].requests
    assert v1_init.client_capabilities.elicitation.form is not None  # the v2 client's offer, passed on
    assert [m.method_id for m in init.auth_methods] == ["key"] and init.auth_methods[0].type == "agent"
    assert isinstance(login, v1.AuthenticateRequest) and login.method_id == "key"
    assert isinstance(logout, v1.LogoutRequest)
    (server,) = new_request.mcp_servers
    assert isinstance(server, v1.HttpMcpServer) and server.url == "https://example.com/mcp"
    assert [(o.config_id, o.current_value) for o in new.config_options] == [("model", "small")]
    assert "id" not in set_option.extra_fields and (set_option.config_id, set_option.value) == ("model", "big")
    assert [(o.config_id, o.current_value) for o in answer.config_options] == [("model", "big")]
    (elicited,) = agents[0].outcomes
    assert isinstance(elicited, v1.AcceptCreateElicitationResponse) and elicited.content == {"name": "Ada"}
    assert elicited.meta == {"from": "v2"}
    states = [u["state"] for u in updates(received) if u.get("sessionUpdate") == "state_update"]
    assert states == ["running", "requires_action", "running", "idle"]  # the question paused the turn


async def test_cancel_mid_turn_ends_idle_cancelled_after_what_the_agent_said_while_stopping() -> None:
    received: list[bytes] = []
    client = V2Client()
    agents, handlers = raw_agents()
    async with adapted(handlers, client, received) as (_, agent, _init):
        new = await agent.session_new(v2.NewSessionRequest(cwd="/work"))
        await agent.session_prompt(
            v2.PromptRequest(session_id=new.session_id, prompt=[v2.TextContentBlock(text="wait")])
        )
        await agents[0].waiting.wait()
        with pytest.raises(RequestError) as busy:  # v1 runs one turn at a time
            await agent.session_prompt(
                v2.PromptRequest(session_id=new.session_id, prompt=[v2.TextContentBlock(text="x")])
            )
        await agent.session_cancel(v2.CancelSessionNotification(session_id=new.session_id))
        await client.idle.wait()
    assert busy.value.code == -32600 and "still running" in busy.value.data["detail"]
    items = updates(received)
    assert kinds(items)[-3:] == ["agent_message_chunk", "agent_message_chunk", "state_update idle"]
    assert items[-2]["content"]["text"] == "stopped"
    assert items[-1]["stopReason"] == "cancelled"


class SlowClient(V2Client):
    """A v2 client that answers permission requests only when ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = trio.Event()

    async def session_request_permission(self, params: v2.RequestPermissionRequest) -> v2.RequestPermissionResponse:
        self.asked.set()
        await self.release.wait()
        return await super().session_request_permission(params)


async def test_cancel_while_a_permission_waits_answers_the_agent_cancelled_and_ends_idle_cancelled() -> None:
    received: list[bytes] = []
    client = SlowClient()
    agents, handlers = raw_agents()
    async with adapted(handlers, client, received) as (_, agent, _init):
        new = await agent.session_new(v2.NewSessionRequest(cwd="/work"))
        prompt_text = [v2.TextContentBlock(text="turn")]
        await agent.session_prompt(v2.PromptRequest(session_id=new.session_id, prompt=prompt_text))
        await client.asked.wait()
        await agent.session_cancel(v2.CancelSessionNotification(session_id=new.session_id))
        await client.idle.wait()
    # the agent hears "cancelled" for its question, or its turn is cancelled first (its runtime's
    # session/cancel and the answer race on its side): never an approval
    assert [type(o) for o in agents[0].outcomes] in ([], [v1.CancelledRequestPermissionOutcome])
    items = updates(received)
    after = kinds(items)[kinds(items).index("permission") + 1 :]
    assert "state_update running" not in after  # a cancelled turn's next state is idle
    assert after[-1] == "state_update idle" and items[-1]["stopReason"] in ("cancelled", "end_turn")
    assert "tool_call_update" not in after or items[-2]["status"] == "failed"  # refused, never run


async def test_the_agent_leaving_mid_turn_ends_idle_error_and_the_client_leaving_cancels_the_agents_turn() -> None:
    received: list[bytes] = []
    client = V2Client()
    agents, handlers = raw_agents()
    async with adapted(handlers, client, received) as (front, agent, _init):
        new = await agent.session_new(v2.NewSessionRequest(cwd="/work"))
        await agent.session_prompt(
            v2.PromptRequest(session_id=new.session_id, prompt=[v2.TextContentBlock(text="wait")])
        )
        await client.chunk.wait()  # what the agent said reached the client (an update in flight may not)
        assert front.agent_conn is not None
        await front.agent_conn.aclose()
        await client.idle.wait()
    idle = updates(received)[-1]
    assert (idle["stopReason"], idle["error"]["code"]) == ("error", -32603)
    assert "the agent behind this adapter is gone" in idle["error"]["data"]["detail"]

    cancels: list[v1.CancelNotification] = []

    class Noting(RawV1Agent):
        async def session_cancel(self, params: v1.CancelNotification) -> None:
            cancels.append(params)

    agents = []

    def make(conn: AgentSideConnection) -> RawV1Agent:
        agents.append(Noting(conn))
        return agents[-1]

    front = V2Front()
    agent_stream, back_stream = memory_stream_pair()
    front_stream, client_stream = memory_stream_pair()
    with trio.fail_after(DEADLINE):
        async with (
            AgentSideConnection({v1: make}, agent_stream, agent_stream),
            ClientSideConnection(front.agent_handlers(), back_stream, back_stream),
        ):
            async with (
                AgentSideConnection(front, front_stream, front_stream),
                ClientSideConnection({v2: V2Client()}, client_stream, client_stream) as client_conn,
            ):
                await client_conn.initialize(
                    v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="c", version="1"))
                )
                new = await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
                wait = [v2.TextContentBlock(text="wait")]
                await client_conn.agent.session_prompt(v2.PromptRequest(session_id=new.session_id, prompt=wait))
                await agents[0].waiting.wait()
            # the client's connection is gone: the adapter told the agent to stop
            await front.wait_answered()
            while not cancels:
                await trio.sleep(0)
    assert [c.session_id for c in cancels] == [new.session_id]


async def test_close_of_a_running_session_the_agent_cannot_close_cancels_its_turn_and_forgets_it() -> None:
    received: list[bytes] = []
    client = V2Client()
    agents, handlers = raw_agents()
    async with adapted(handlers, client, received) as (front, agent, _init):
        new = await agent.session_new(v2.NewSessionRequest(cwd="/work"))
        await agent.session_prompt(
            v2.PromptRequest(session_id=new.session_id, prompt=[v2.TextContentBlock(text="wait")])
        )
        await agents[0].waiting.wait()
        await agent.session_close(v2.CloseSessionRequest(session_id=new.session_id))
        await client.idle.wait()
        listed = await agent.session_list(v2.ListSessionsRequest())
        assert front.agent_conn is not None and new.session_id not in front.agent_conn.sessions  # its fs roots too
    assert updates(received)[-1]["stopReason"] == "cancelled"
    assert listed.sessions == [] and front.sessions == {}


async def test_meta_unknown_fields_and_extension_methods_cross_the_adapter() -> None:
    received: list[bytes] = []
    seen: list[Any] = []

    class Ext(RawV1Agent):
        def __init__(self, conn: AgentSideConnection) -> None:
            super().__init__(conn)

            async def ping(params: Any) -> Any:
                seen.append(params)
                await conn.ext_notification("_pong", {"back": params["n"]})
                return {"n": params["n"] + 1}

            conn.on_ext_request("_ping", ping)

        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            seen.append(params)
            return v1.NewSessionResponse(session_id="s1", meta={"from": "v1"}, extra_fields={"futureField": 1})

        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            update = v1.AgentMessageChunkSessionUpdate(content=text("x"), meta={"m": 1})
            note = v1.SessionNotification(session_id=params.session_id, update=update, meta={"n": 2})
            await self.client.session_update(note)
            return v1.PromptResponse(stop_reason="end_turn")

    pongs: list[Any] = []
    client = V2Client()
    front = V2Front(ext_requests=["_ping"], ext_notifications=["_pong"])
    agent_stream, back_stream = memory_stream_pair()
    front_stream, client_stream = memory_stream_pair()
    client_conn = ClientSideConnection(
        {v2: client}, client_stream, client_stream, tap=lambda d, data: received.append(data) if d == "in" else None
    )

    async def pong(params: Any) -> None:
        pongs.append(params)

    client_conn.on_ext_notification("_pong", pong)
    with trio.fail_after(DEADLINE):
        async with (
            AgentSideConnection({v1: Ext}, agent_stream, agent_stream),
            ClientSideConnection(front.agent_handlers(), back_stream, back_stream),
            AgentSideConnection(front, front_stream, front_stream),
            client_conn,
        ):
            await client_conn.initialize(
                v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="c", version="1"))
            )
            new = await client_conn.agent.session_new(
                v2.NewSessionRequest(cwd="/work", meta={"to": "v1"}, extra_fields={"clientField": True})
            )
            await prompt(client_conn.agent, client, new.session_id, "x")
            answer = await client_conn.ext_request("_ping", {"n": 1})
            while not pongs:
                await trio.sleep(0)
    request = seen[0]
    assert (request.meta, request.extra_fields) == ({"to": "v1"}, {"clientField": True})
    assert (new.meta, new.extra_fields) == ({"from": "v1"}, {"futureField": 1})
    (chunk,) = [
        m for m in wire(received) if m.get("params", {}).get("update", {}).get("sessionUpdate") == "agent_message_chunk"
    ]
    assert chunk["params"]["_meta"] == {"n": 2} and chunk["params"]["update"]["_meta"] == {"m": 1}
    assert answer == {"n": 2} and seen[1] == {"n": 1} and pongs == [{"back": 1}]


async def test_cancel_of_an_agent_that_never_answers_is_idle_cancelled_after_the_grace(autojump_clock: Any) -> None:
    received: list[bytes] = []
    client = V2Client()

    class Deaf(RawV1Agent):
        async def session_cancel(self, params: v1.CancelNotification) -> None:
            pass

        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            self.waiting.set()
            with trio.CancelScope(shield=True):  # deaf to session/cancel until the test lets it go
                await released.wait()
            return v1.PromptResponse(stop_reason="end_turn")

    agents: list[RawV1Agent] = []
    released = trio.Event()

    def make(conn: AgentSideConnection) -> RawV1Agent:
        agents.append(Deaf(conn))
        return agents[-1]

    async with adapted({v1: make}, client, received, grace=2) as (_, agent, _init):
        new = await agent.session_new(v2.NewSessionRequest(cwd="/work"))
        await agent.session_prompt(v2.PromptRequest(session_id=new.session_id, prompt=[v2.TextContentBlock(text="x")]))
        await agents[0].waiting.wait()
        start = trio.current_time()
        await agent.session_cancel(v2.CancelSessionNotification(session_id=new.session_id))
        await client.idle.wait()
        assert 2 <= trio.current_time() - start < 3  # the grace, not the agent's hour
        released.set()
    assert updates(received)[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}


async def test_a_v1_error_is_idle_with_stop_reason_error_and_the_error() -> None:
    received: list[bytes] = []
    client = V2Client()
    _, handlers = raw_agents()
    async with adapted(handlers, client, received) as (_, agent, _init):
        new = await agent.session_new(v2.NewSessionRequest(cwd="/work"))
        await prompt(agent, client, new.session_id, "fail")
        again = await prompt(agent, client, new.session_id, "outside")  # the session takes the next prompt
    assert again.message_id
    idles = [u for u in updates(received) if u.get("state") == "idle"]
    assert idles[0] == {
        "sessionUpdate": "state_update",
        "state": "idle",
        "stopReason": "error",
        "error": {"code": -32000, "message": "quota exceeded", "data": {"retryAfter": 5}},
    }
    assert idles[1]["stopReason"] == "refusal"


async def test_resume_from_start_is_v1_load_replayed_and_the_mode_option_is_set_mode() -> None:
    received: list[bytes] = []
    client = V2Client()
    agents, handlers = raw_agents()
    async with adapted(handlers, client, received) as (_, agent, _init):
        resumed = await agent.session_resume(
            v2.ResumeSessionRequest(session_id="s0", cwd="/work", replay_from=v2.StartReplayFrom())
        )
        answer = await agent.session_set_config_option(
            v2.IdSetSessionConfigOptionRequest(session_id="s0", config_id="mode", value="code")
        )
        seen = await agent.session_resume(v2.ResumeSessionRequest(session_id="s0", cwd="/work"))
        unseen = await agent.session_resume(v2.ResumeSessionRequest(session_id="s9", cwd="/work"))
        listed = await agent.session_list(v2.ListSessionsRequest())
        await agent.session_close(v2.CloseSessionRequest(session_id="s0"))
        after = await agent.session_list(v2.ListSessionsRequest())
    load, set_mode, load_unseen = agents[0].requests[1:]
    assert isinstance(load, v1.LoadSessionRequest) and load.mcp_servers == [] and load.session_id == "s0"
    assert isinstance(set_mode, v1.SetSessionModeRequest) and set_mode.mode_id == "code"
    # no v1 resume: a session the adapter saw is answered by it, another is a load whose replay is not passed on
    assert isinstance(load_unseen, v1.LoadSessionRequest) and load_unseen.session_id == "s9"
    assert [o.current_value for o in resumed.config_options] == ["ask"]
    assert [(o.config_id, o.current_value) for o in answer.config_options] == [("mode", "code")]
    assert [(o.config_id, o.current_value) for o in seen.config_options] == [("mode", "code")]
    assert [o.config_id for o in unseen.config_options] == ["mode"]
    replayed = updates(received)
    assert [(u["sessionUpdate"], u["content"]["text"]) for u in replayed] == [
        ("user_message_chunk", "earlier"),
        ("agent_message_chunk", "answer"),
    ]  # once: neither later resume replayed
    assert all(u["messageId"] for u in replayed)
    listed_ids = [(s.session_id, s.cwd) for s in listed.sessions]
    assert listed_ids == [("s0", "/work"), ("s9", "/work")]  # the adapter's own list
    assert [s.session_id for s in after.sessions] == ["s9"]  # s0 closed by the adapter: forgotten


async def test_resume_with_replay_of_an_agent_without_load_session_is_32601_naming_v1() -> None:
    received: list[bytes] = []

    class NoLoad(RawV1Agent):
        async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
            return v1.InitializeResponse(protocol_version=1, agent_capabilities=v1.AgentCapabilities())

    async with adapted({v1: NoLoad}, V2Client(), received) as (_, agent, init):
        with pytest.raises(RequestError) as caught:
            await agent.session_resume(
                v2.ResumeSessionRequest(session_id="s0", cwd="/work", replay_from=v2.StartReplayFrom())
            )
    assert caught.value.code == -32601
    assert "loadSession" in caught.value.data["detail"] and "protocol version 1" in caught.value.data["detail"]
    assert init.info.name == "acp-trio-adapt"  # v1 agentInfo is optional, v2 info is not


async def test_resume_of_a_session_it_saw_is_replayed_by_the_adapter_when_the_agent_cannot_load() -> None:
    """v2 makes resume baseline; a v1 agent without loadSession still holds the session the
    adapter opened, so the adapter replays what it sent for it (v2 session-setup.mdx § Resuming)."""
    received: list[bytes] = []
    client = V2Client()

    class NoLoad(RawV1Agent):
        async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
            return v1.InitializeResponse(protocol_version=1, agent_capabilities=v1.AgentCapabilities())

    agents: list[RawV1Agent] = []

    def make(conn: AgentSideConnection) -> RawV1Agent:
        agents.append(NoLoad(conn))
        return agents[-1]

    async with adapted({v1: make}, client, received) as (_, agent, _init):
        new = await agent.session_new(v2.NewSessionRequest(cwd="/work"))
        receipt = await prompt(agent, client, new.session_id, "hi")
        live = updates(received)
        received.clear()
        await agent.session_resume(
            v2.ResumeSessionRequest(session_id=new.session_id, cwd="/work", replay_from=v2.StartReplayFrom())
        )
        await agent.session_resume(v2.ResumeSessionRequest(session_id=new.session_id, cwd="/work"))
    replayed = updates(received)
    assert [u for u in live if u.get("sessionUpdate") not in (None, "state_update")] == replayed
    assert [(u["sessionUpdate"], u["messageId"]) for u in replayed] == [
        ("user_message", receipt.message_id),
        ("agent_message_chunk", replayed[1]["messageId"]),
    ]
    assert replayed[1]["content"]["text"] == "hello"
    assert [type(r).__name__ for r in agents[0].requests] == ["NewSessionRequest", "PromptRequest"]  # no load


AGENT = [sys.executable, "-m", "acp_trio.demo", "--serve-agent", "--protocol", "1"]


@pytest.mark.one_interpreter
async def test_python_m_acp_trio_adapt_speak_2_serves_the_v1_demo_agent_to_a_v2_client(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("first line\nsecond line\n")
    command = [sys.executable, "-m", "acp_trio.adapt", "--speak", "2", "--", *AGENT]
    received: list[bytes] = []
    client = V2Client()

    def tap(direction: str, data: bytes) -> None:
        if direction == "in":
            received.append(data)

    with trio.fail_after(30):
        async with spawn_agent(command[0], command[1:], client={v2: client}, tap=tap) as conn:
            init = await conn.initialize(
                v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="c", version="1"))
            )
            assert init.protocol_version == 2
            new = await conn.agent.session_new(v2.NewSessionRequest(cwd=str(tmp_path)))
            await prompt(conn.agent, client, new.session_id, "summarize my notes")
    items = updates(received)
    assert items[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
    assert (tmp_path / "summary.txt").read_text().startswith("notes.txt has 2 non-empty lines")
    assert "tool_call_update" in kinds(items) and '"sessionUpdate": "tool_call"' not in json.dumps(items)


# -- the streaming fast path: text chunks cross as their wire JSON, a messageId added ----------------
class WireChunksV1Agent(RawV1Agent):
    """Streams its turn as raw JSON lines: text chunks with unknown fields and ``_meta`` at every
    level (keys in an order the typed way does not keep), one with ``annotations``, a thought with
    its own ``messageId``."""

    def sent(self, sid: str) -> list[dict[str, Any]]:
        first = {"update": {"futureUpdate": [1], "content": {"text": "Hel", "type": "text"}}, "sessionId": sid}
        first["update"].update({"_meta": {"u": 1}, "sessionUpdate": "agent_message_chunk"})
        first["update"]["content"].update({"_meta": {"c": 1}, "futureBlock": True})
        first.update({"_meta": {"n": 1}, "futureParams": "p"})
        second = {"sessionId": sid, "update": {"content": {"type": "text", "text": "lo"}}}
        second["update"]["sessionUpdate"] = "agent_message_chunk"
        noted = {"sessionId": sid, "update": {"sessionUpdate": "agent_message_chunk", "futureUpdate": 2}}
        noted["update"]["content"] = {"type": "text", "text": "!", "annotations": {"priority": 0.5}}
        thought = {"sessionId": sid, "update": {"sessionUpdate": "agent_thought_chunk", "messageId": "t1"}}
        thought["update"]["content"] = {"type": "text", "text": "hm", "_meta": {"t": 1}}
        return [first, second, noted, thought]

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        for sent in self.sent(params.session_id):
            await self.conn.connection.notify("session/update", sent)
        return v1.PromptResponse(stop_reason="end_turn")


async def test_text_chunks_cross_to_the_v2_client_as_read_with_a_message_id_unknown_fields_and_meta() -> None:
    received: list[bytes] = []
    agents: list[WireChunksV1Agent] = []

    def make(conn: AgentSideConnection) -> WireChunksV1Agent:
        agents.append(WireChunksV1Agent(conn))
        return agents[-1]

    client = V2Client()
    async with adapted({v1: make}, client, received) as (_, agent, _init):
        new = await agent.session_new(v2.NewSessionRequest(cwd="/work"))
        await prompt(agent, client, new.session_id, "go")
    first, second, noted, thought = agents[0].sent(new.session_id)
    chunks = [
        m["params"]
        for m in wire(received)
        if m.get("params", {}).get("update", {}).get("sessionUpdate") in ("agent_message_chunk", "agent_thought_chunk")
    ]
    assert len(chunks) == 4
    message_id = chunks[0]["update"]["messageId"]
    assert message_id.startswith("msg_")
    # the fast path: the params as read plus the messageId, their keys in the agent's order (the
    # typed way writes known fields first); unknown fields and _meta at every level survive
    for got, sent in zip(chunks[:2], (first, second), strict=True):
        assert got == {**sent, "update": {**sent["update"], "messageId": message_id}}
        assert list(got["update"]) == [*sent["update"], "messageId"]
        assert list(got) == list(sent)
    # annotations go the typed way, into the same message (the view's state is one for both ways)
    assert chunks[2] == {**noted, "update": {**noted["update"], "messageId": message_id}}
    assert next(iter(chunks[2]["update"])) == "sessionUpdate"
    # a chunk with its own messageId keeps it: the line is the agent's, byte for byte
    assert chunks[3] == thought
    assert any(orjson.dumps(thought) in line for line in received)


async def test_the_v1_agent_reads_session_cancel_before_the_cancelled_permission_answer() -> None:
    """v1 prompt-turn.mdx § Cancellation: the client sends ``session/cancel``, then answers its pending
    permission requests ``cancelled``; the v2 client does it in that order, and the adapter must pass
    them on in that order, turn after turn (was: the answer, relayed by another task, could overtake
    the cancel: tests/test_interop_adapt.py saw it in about 1 turn in 6)."""
    for _ in range(5):
        read: list[str] = []

        def tap(direction: str, data: bytes, read: list[str] = read) -> None:
            message = json.loads(data)
            if direction == "in" and message.get("method") == "session/cancel":
                read.append("cancel")
            elif direction == "in" and "outcome" in message.get("result", {}):
                read.append(f"answer {message['result']['outcome']['outcome']}")

        client = SlowClient()
        front = V2Front()
        agent_stream, back_stream = memory_stream_pair()
        front_stream, client_stream = memory_stream_pair()
        with trio.fail_after(DEADLINE):
            async with (
                AgentSideConnection({v1: RawV1Agent}, agent_stream, agent_stream, tap=tap),
                ClientSideConnection(front.agent_handlers(), back_stream, back_stream),
                AgentSideConnection(front, front_stream, front_stream),
                ClientSideConnection({v2: client}, client_stream, client_stream) as client_conn,
            ):
                await client_conn.initialize(
                    v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="c", version="1"))
                )
                agent = client_conn.agent
                new = await agent.session_new(v2.NewSessionRequest(cwd="/work"))
                await agent.session_prompt(
                    v2.PromptRequest(session_id=new.session_id, prompt=[v2.TextContentBlock(text="turn")])
                )
                await client.asked.wait()
                # the client's runtime answers the pending question "cancelled" as it sends the cancel
                await agent.session_cancel(v2.CancelSessionNotification(session_id=new.session_id))
                await client.idle.wait()
        assert read[:1] == ["cancel"], read


async def test_a_cancel_sent_right_after_the_prompt_reaches_the_v1_agent_after_that_prompt() -> None:
    """A v2 client may send ``session/cancel`` right after ``session/prompt``, before the receipt (as
    ``acp_trio.check``'s session.cancel does); the adapter runs the v1 prompt from a task of its own,
    and must not let the cancel overtake it (the agent would ignore it and end the turn end_turn)."""
    for _ in range(5):
        read: list[str] = []

        def tap(direction: str, data: bytes, read: list[str] = read) -> None:
            method = json.loads(data).get("method")
            if direction == "in" and method in ("session/prompt", "session/cancel"):
                read.append(method)

        client = V2Client()
        front = V2Front()
        agent_stream, back_stream = memory_stream_pair()
        front_stream, client_stream = memory_stream_pair()
        with trio.fail_after(DEADLINE):
            async with (
                AgentSideConnection({v1: RawV1Agent}, agent_stream, agent_stream, tap=tap),
                ClientSideConnection(front.agent_handlers(), back_stream, back_stream),
                AgentSideConnection(front, front_stream, front_stream),
                ClientSideConnection({v2: client}, client_stream, client_stream) as client_conn,
                trio.open_nursery() as nursery,
            ):
                await client_conn.initialize(
                    v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="c", version="1"))
                )
                agent = client_conn.agent
                new = await agent.session_new(v2.NewSessionRequest(cwd="/work"))
                prompt = v2.PromptRequest(session_id=new.session_id, prompt=[v2.TextContentBlock(text="wait")])
                nursery.start_soon(agent.session_prompt, prompt)
                await trio.lowlevel.checkpoint()  # the prompt is queued: both go out in one write
                await agent.session_cancel(v2.CancelSessionNotification(session_id=new.session_id))
                await client.idle.wait()
        assert read == ["session/prompt", "session/cancel"], read

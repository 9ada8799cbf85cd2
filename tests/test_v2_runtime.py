"""ACP v2 and v2_unstable on the runtime, end to end over an in-memory pair of typed connections.

Spec (draft): ``docs/protocol/v2/initialization.mdx`` (role-agnostic ``info`` and ``capabilities``,
object markers), ``prompt-lifecycle.mdx`` (the ``session/prompt`` receipt and ``state_update``),
``session-setup.mdx`` (``session/resume`` with ``replayFrom``), ``authentication.mdx``
(``auth/login``, ``auth/logout``), ``session-config-options.mdx``, ``extensibility.mdx`` (``_``-prefixed
custom values), ``session-delete.mdx``, ``migration.mdx`` (v1-only methods); unstable methods from
``schema/v2/schema.unstable.json``.  Capability rules themselves are unit-tested in
``test_capabilities_v2.py``; here they are checked at the connection level: refused calls raise
:class:`acp_trio.CapabilityError` and put nothing on the wire.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import orjson
import pytest
import trio
import trio.testing

import acp_trio
from acp_schema import v1, v2, v2_unstable
from acp_trio import UNSET, converter

DEADLINE = 10
Message = dict[str, Any]
Turn = Callable[["Agent", Any], Awaitable[Any]]

CLIENT_INFO: Message = {"name": "test-client", "title": "Test Client", "version": "1.0"}
AGENT_INFO: Message = {"name": "test-agent", "version": "2.0"}
# authentication.mdx
AGENT_LOGIN: Message = {
    "methodId": "agent-login",
    "name": "Agent login",
    "type": "agent",
    "description": "Sign in using the agent's login flow",
}
TERMINAL_LOGIN: Message = {
    "methodId": "terminal-login",
    "name": "Log in from the terminal",
    "type": "terminal",
    "args": ["--login"],
    "env": [{"name": "ACP_INTERACTIVE_LOGIN", "value": "1"}],
}
# session-config-options.mdx
CONFIG_OPTIONS: list[Message] = [
    {
        "configId": "mode",
        "name": "Session Mode",
        "category": "mode",
        "type": "select",
        "currentValue": "ask",
        "options": [{"value": "ask", "name": "Ask"}, {"value": "code", "name": "Code"}],
    },
    {"configId": "brave_mode", "name": "Brave Mode", "type": "boolean", "currentValue": False},
]


# -- the wire ------------------------------------------------------------------------------------


class Wire:
    """Every line each connection wrote, labelled with the side that wrote it."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, bytes]] = []

    def tap_for(self, side: str) -> acp_trio.Tap:
        def tap(direction: str, line: bytes) -> None:
            if direction == "out":
                self.lines.append((side, line))

        return tap

    def raw_sent(self, side: str | None = None) -> list[bytes]:
        return [line for s, line in self.lines if side is None or s == side]

    def sent(self, side: str | None = None) -> list[Message]:
        return [orjson.loads(line) for line in self.raw_sent(side)]

    def mark(self) -> int:
        return len(self.lines)

    def since(self, mark: int, side: str | None = None) -> list[Message]:
        return [orjson.loads(line) for s, line in self.lines[mark:] if side is None or s == side]

    def request(self, method: str, index: int = -1) -> Message:
        """The ``index``-th request ``method`` either side sent."""
        return [m for m in self.sent() if m.get("method") == method and "id" in m][index]

    def answer_to(self, method: str, index: int = -1) -> Message:
        """The response to the ``index``-th request ``method`` (from the other side)."""
        side = next(s for s, line in self.lines if orjson.loads(line) == self.request(method, index))
        other = "agent" if side == "client" else "client"
        request_id = self.request(method, index)["id"]
        return next(m for m in self.sent(other) if m.get("id") == request_id and "method" not in m)

    def updates(self) -> list[Message]:
        """The ``update`` of every ``session/update`` the agent sent, in order."""
        return [m["params"]["update"] for m in self.sent("agent") if m.get("method") == "session/update"]


def payload(line: bytes, key: str) -> bytes:
    """The exact bytes of the last top-level ``key`` (``params`` or ``result``) of a wire line."""
    marker = b'"' + key.encode() + b'":'
    start = line.index(marker) + len(marker)
    end = line.rstrip(b"\n")
    assert end.endswith(b"}")
    return end[start:-1]


@asynccontextmanager
async def connect(
    agent: Any, client: Any = None, variant: ModuleType = v2
) -> AsyncIterator[tuple[acp_trio.AgentSideConnection, acp_trio.ClientSideConnection, Wire]]:
    """``open_memory_pair`` of one variant, each end with its own tap; the block is bounded by ``DEADLINE``."""
    wire = Wire()
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(
            {variant: agent}, {variant: client or RecordingClient}, tap=wire.tap_for("?")
        ) as (agent_conn, client_conn):
            agent_conn.connection.tap = wire.tap_for("agent")
            client_conn.connection.tap = wire.tap_for("client")
            yield agent_conn, client_conn, wire


async def initialize(
    client_conn: acp_trio.ClientSideConnection, caps: Message | None = None, variant: ModuleType = v2
) -> Any:
    request = variant.InitializeRequest(
        protocol_version=2,
        info=converter.structure(CLIENT_INFO, variant.Implementation),
        capabilities=UNSET if caps is None else converter.structure(caps, variant.ClientCapabilities),
    )
    return await client_conn.initialize(request)


# -- handlers ------------------------------------------------------------------------------------


class RecordingClient:
    """A client handler of any v2 variant: records updates and permission requests in arrival order."""

    def __init__(self, conn: acp_trio.ClientSideConnection) -> None:
        self.conn = conn
        self.v: ModuleType = conn.variant
        self.notifications: list[Any] = []
        self.events: list[tuple[str, Any]] = []
        self.idle = trio.Event()
        self.asked = trio.Event()  # set when a permission request reached the handler
        self.hold_permission = False  # never answer a permission request (until cancelled)
        self.permission_outcome: Any = None  # what to answer (default: select "allow")

    async def session_update(self, params: Any) -> None:
        self.notifications.append(params)
        self.events.append(("update", params.update))
        if isinstance(params.update, self.v.IdleStateUpdateSessionUpdate):
            self.idle.set()

    async def session_request_permission(self, params: Any) -> Any:
        self.events.append(("permission", params))
        self.asked.set()
        if self.hold_permission:
            await trio.Event().wait()
        outcome = self.permission_outcome or self.v.SelectedRequestPermissionOutcome(option_id="allow")
        return self.v.RequestPermissionResponse(outcome=outcome)

    def trace(self) -> list[str]:
        """The events as short labels: ``state:running``, ``tool_call_update``, ``permission``..."""
        labels = []
        for kind, item in self.events:
            if kind == "permission":
                labels.append("permission")
            elif item.session_update == "state_update":
                labels.append(f"state:{item.state}")
            else:
                labels.append(item.session_update)
        return labels


class Agent:
    """A v2 agent of any v2 variant, recording every call; no ``initialize`` (the runtime answers)."""

    def __init__(self, conn: acp_trio.AgentSideConnection, turn: Turn | None = None) -> None:
        self.conn = conn
        self.v: ModuleType = conn.variant
        self.calls: list[tuple[str, Any]] = []
        self.turn = turn
        self.history: list[Any] = []  # what session/resume replays from the start
        self.config: list[Message] = [dict(option) for option in CONFIG_OPTIONS]
        self.outcomes: list[Any] = []

    async def send(self, session_id: str, update: Any) -> None:
        await self.conn.client.session_update(self.v.UpdateSessionNotification(session_id=session_id, update=update))

    def config_options(self) -> list[Any]:
        return [converter.structure(option, self.v.SessionConfigOption) for option in self.config]

    async def session_new(self, params: Any) -> Any:
        self.calls.append(("session/new", params))
        return self.v.NewSessionResponse(session_id="sess-1", config_options=self.config_options())

    async def session_prompt(self, params: Any) -> Any:
        self.calls.append(("session/prompt", params))
        turn = self.turn

        async def run() -> Any:
            return None if turn is None else await turn(self, params)

        self.conn.start_turn(params.session_id, run)
        return self.v.PromptResponse(message_id="msg-user-1")

    async def session_resume(self, params: Any) -> Any:
        self.calls.append(("session/resume", params))
        if isinstance(params.replay_from, self.v.StartReplayFrom):
            for update in self.history:
                await self.send(params.session_id, update)
        return self.v.ResumeSessionResponse(config_options=self.config_options())

    async def session_fork(self, params: Any) -> Any:  # v2_unstable only
        self.calls.append(("session/fork", params))
        return self.v.ForkSessionResponse(session_id="sess-fork-1")

    async def session_list(self, params: Any) -> Any:
        self.calls.append(("session/list", params))
        return self.v.ListSessionsResponse(sessions=[])

    async def session_close(self, params: Any) -> Any:
        self.calls.append(("session/close", params))
        return self.v.CloseSessionResponse()

    async def session_delete(self, params: Any) -> Any:
        self.calls.append(("session/delete", params))
        return self.v.DeleteSessionResponse()

    async def session_set_config_option(self, params: Any) -> Any:
        self.calls.append(("session/set_config_option", params))
        for option in self.config:
            if option["configId"] == params.config_id:
                option["currentValue"] = params.value
        return self.v.SetSessionConfigOptionResponse(config_options=self.config_options())

    async def auth_login(self, params: Any) -> Any:
        self.calls.append(("auth/login", params))
        return self.v.LoginAuthResponse()

    async def auth_logout(self, params: Any) -> Any:
        self.calls.append(("auth/logout", params))
        return self.v.LogoutAuthResponse()

    # a v1 method name: never routed on a v2 connection
    async def authenticate(self, params: Any) -> Any:
        self.calls.append(("authenticate", params))
        return {}

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]


class AnsweringAgent(Agent):
    """An :class:`Agent` whose own ``initialize`` answers ``answer`` (wire JSON, ``protocolVersion`` added)."""

    def __init__(self, conn: acp_trio.AgentSideConnection, answer: Message, turn: Turn | None = None) -> None:
        super().__init__(conn, turn)
        self.answer = answer

    async def initialize(self, params: Any) -> Any:
        self.calls.append(("initialize", params))
        return converter.structure({"protocolVersion": 2, **self.answer}, self.v.InitializeResponse)


def answering(answer: Message, turn: Turn | None = None) -> Callable[[acp_trio.AgentSideConnection], Agent]:
    return lambda conn: AnsweringAgent(conn, {"info": AGENT_INFO, **answer}, turn)


def with_turn(turn: Turn) -> Callable[[acp_trio.AgentSideConnection], Agent]:
    return lambda conn: Agent(conn, turn)


def text_prompt(variant: ModuleType = v2, session_id: str = "sess-1", *blocks: Any) -> Any:
    return variant.PromptRequest(session_id=session_id, prompt=[variant.TextContentBlock(text="hi"), *blocks])


# -- initialize: info and capabilities -------------------------------------------------------------


class TypedInitAgent(Agent):
    async def initialize(self, params: v2.InitializeRequest) -> v2.InitializeResponse:
        self.calls.append(("initialize", params))
        return v2.InitializeResponse(
            protocol_version=2,
            info=v2.Implementation(name="test-agent", title="Test Agent", version="2.0"),
            capabilities=v2.AgentCapabilities(
                session=v2.SessionCapabilities(
                    prompt=v2.PromptCapabilities(image=v2.PromptImageCapabilities()),
                    mcp=v2.McpCapabilities(http=v2.McpHttpCapabilities()),
                    delete=v2.SessionDeleteCapabilities(),
                ),
                auth=v2.AgentAuthCapabilities(),
            ),
            auth_methods=[v2.AgentAuthMethod(method_id="agent-login", name="Agent login")],
        )


async def test_info_and_capabilities_travel_both_ways_role_agnostic_with_object_markers() -> None:
    client_caps: Message = {"auth": {"terminal": {}}, "elicitation": {"form": {}}}
    async with connect(TypedInitAgent) as (agent_conn, client_conn, wire):
        response = await initialize(client_conn, client_caps)
        agent: Agent = agent_conn.handler

        # the agent read the client's role-agnostic fields, typed, with object markers
        (method, params), *_ = agent.calls
        assert method == "initialize" and isinstance(params, v2.InitializeRequest)
        assert (params.info.name, params.info.title, params.info.version) == ("test-client", "Test Client", "1.0")
        assert isinstance(params.capabilities.auth.terminal, v2.TerminalAuthCapabilities)
        assert isinstance(params.capabilities.elicitation.form, v2.ElicitationFormCapabilities)
        assert params.capabilities.elicitation.url is UNSET
        assert agent_conn.client_info == CLIENT_INFO
        assert agent_conn.client_capabilities == client_caps

        # the client read the agent's, typed and as wire JSON
        assert isinstance(response, v2.InitializeResponse)
        assert (response.info.name, response.info.title) == ("test-agent", "Test Agent")
        assert isinstance(response.capabilities.session.prompt.image, v2.PromptImageCapabilities)
        assert response.capabilities.session.prompt.audio is UNSET
        assert isinstance(response.auth_methods[0], v2.AgentAuthMethod)
        agent_caps: Message = {"session": {"prompt": {"image": {}}, "mcp": {"http": {}}, "delete": {}}, "auth": {}}
        assert client_conn.agent_capabilities == agent_caps
        assert client_conn.agent_auth_methods == [{"type": "agent", "methodId": "agent-login", "name": "Agent login"}]
        assert client_conn.initialize_response == {
            "protocolVersion": 2,
            "info": {"name": "test-agent", "title": "Test Agent", "version": "2.0"},
            "capabilities": agent_caps,
            "authMethods": [{"type": "agent", "methodId": "agent-login", "name": "Agent login"}],
        }
        for conn in (agent_conn, client_conn):
            assert (conn.protocol_version, conn.variant) == (2, v2)
        assert isinstance(client_conn.agent, v2.AgentPeer) and isinstance(agent_conn.client, v2.ClientPeer)

        # on the wire: v2 names only, no v1 clientInfo/clientCapabilities/agentInfo/agentCapabilities
        assert wire.request("initialize")["params"] == {
            "protocolVersion": 2,
            "info": CLIENT_INFO,
            "capabilities": client_caps,
        }
        assert wire.answer_to("initialize")["result"] == client_conn.initialize_response


@pytest.mark.parametrize(
    ("factory", "name", "caps"),
    [(Agent, "Agent", {"session": {}}), (lambda conn: _AuthOnly(conn), "_AuthOnly", {})],
    ids=["with-session_new", "without-session_new"],
)
async def test_an_agent_without_initialize_answers_info_and_the_session_surface_it_has(
    factory: Any, name: str, caps: Message
) -> None:
    async with connect(factory) as (_agent_conn, client_conn, wire):
        response = await initialize(client_conn)
        assert client_conn.initialize_response == {
            "protocolVersion": 2,
            "info": {"name": name, "version": "0"},
            "capabilities": caps,
        }
        assert response.info.name == name and client_conn.agent_auth_methods == []
        if caps:
            session = await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
            assert session.session_id == "sess-1" and "sess-1" in client_conn.sessions
        else:
            mark = wire.mark()
            with pytest.raises(acp_trio.CapabilityError) as info:
                await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
            assert info.value.capability == "session" and wire.since(mark) == []


class _AuthOnly:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn

    async def auth_login(self, params: v2.LoginAuthRequest) -> v2.LoginAuthResponse:
        return v2.LoginAuthResponse()


@pytest.mark.parametrize(
    ("caps", "method", "capability"),
    [
        ({"session": True}, "session/new", "session"),
        ({"session": {"delete": True}}, "session/delete", "session.delete"),
        ({"session": {"prompt": {"image": True}}}, "session/prompt", "session.prompt.image"),
    ],
    ids=["session-true", "delete-true", "image-true"],
)
async def test_boolean_markers_from_a_raw_agent_do_not_advertise(caps: Message, method: str, capability: str) -> None:
    """An agent speaking raw JSON answers v1-style booleans: a v2 client treats them as unsupported."""
    answer = {"protocolVersion": 2, "info": AGENT_INFO, "capabilities": caps}
    seen: list[str] = []
    wire = Wire()
    agent_stream, client_stream = trio.testing.memory_stream_pair()
    raw_agent = acp_trio.Connection(agent_stream, agent_stream)

    async def answer_initialize(params: Any) -> Any:
        seen.append("initialize")
        return answer

    raw_agent.routes["initialize"] = acp_trio.Route("initialize", "request", answer_initialize)
    client_conn = acp_trio.ClientSideConnection(
        RecordingClient, client_stream, client_stream, variant=v2, tap=wire.tap_for("client")
    )
    calls = {
        "session/new": lambda: client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work")),
        "session/delete": lambda: client_conn.agent.session_delete(v2.DeleteSessionRequest(session_id="s")),
        "session/prompt": lambda: client_conn.agent.session_prompt(
            text_prompt(v2, "s", v2.ImageContentBlock(data="aGk=", mime_type="image/png"))
        ),
    }
    with trio.fail_after(DEADLINE):
        async with raw_agent, client_conn:
            await initialize(client_conn)
            assert client_conn.agent_capabilities == caps  # kept as sent
            mark = wire.mark()
            with pytest.raises(acp_trio.CapabilityError) as info:
                await calls[method]()
            assert (info.value.method, info.value.capability) == (method, capability)
            assert wire.since(mark) == [] and seen == ["initialize"]


# -- the prompt lifecycle ------------------------------------------------------------------------


async def edit_with_permission(agent: Agent, params: Any) -> None:
    """A turn: the user message, a tool call that needs permission (``requires_action`` around the
    request, ``running`` after it), the agent's answer; returns ``None`` (stop reason ``end_turn``)."""
    v, sid = agent.v, params.session_id
    await agent.send(sid, v.UserMessageSessionUpdate(message_id="msg-user-1", content=params.prompt))
    await agent.send(
        sid, v.ToolCallUpdateSessionUpdate(tool_call_id="call-1", title="Edit main.py", kind="edit", status="pending")
    )
    await agent.send(sid, v.RequiresActionStateUpdateSessionUpdate())
    response = await agent.conn.client.session_request_permission(
        v.RequestPermissionRequest(
            session_id=sid,
            title="Edit main.py?",
            subject=v.ToolCallRequestPermissionSubject(tool_call=v.ToolCallUpdate(tool_call_id="call-1")),
            options=[
                v.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                v.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
            ],
        )
    )
    agent.outcomes.append(response.outcome)
    await agent.send(sid, v.RunningStateUpdateSessionUpdate())
    await agent.send(sid, v.ToolCallUpdateSessionUpdate(tool_call_id="call-1", status="completed"))
    await agent.send(
        sid, v.AgentMessageSessionUpdate(message_id="msg-agent-1", content=[v.TextContentBlock(text="Done.")])
    )


@pytest.mark.parametrize("variant", [v2, v2_unstable], ids=["v2", "v2_unstable"])
async def test_prompt_is_a_receipt_and_the_turn_runs_running_requires_action_running_idle(variant: ModuleType) -> None:
    async with connect(with_turn(edit_with_permission), variant=variant) as (agent_conn, client_conn, wire):
        await initialize(client_conn, variant=variant)
        await client_conn.agent.session_new(variant.NewSessionRequest(cwd="/work"))
        receipt = await client_conn.agent.session_prompt(text_prompt(variant))
        assert isinstance(receipt, variant.PromptResponse) and receipt.message_id == "msg-user-1"
        # the response is only the acceptance receipt: no stop reason
        assert wire.answer_to("session/prompt")["result"] == {"messageId": "msg-user-1"}

        client: RecordingClient = client_conn.handler
        await client.idle.wait()
        assert client.trace() == [
            "state:running",  # sent by the runtime (start_turn)
            "user_message",
            "tool_call_update",
            "state:requires_action",  # sent by the agent
            "permission",  # started only after requires_action was handled
            "state:running",
            "tool_call_update",
            "agent_message",
            "state:idle",  # sent by the runtime when the turn returned
        ]
        idle = client.events[-1][1]
        assert isinstance(idle, variant.IdleStateUpdateSessionUpdate)
        assert (idle.stop_reason, idle.error) == ("end_turn", UNSET)
        permission = client.events[4][1]
        assert isinstance(permission.subject, variant.ToolCallRequestPermissionSubject)
        agent: Agent = agent_conn.handler
        assert agent.outcomes == [variant.SelectedRequestPermissionOutcome(option_id="allow")]

        states = [u for u in wire.updates() if u["sessionUpdate"] == "state_update"]
        assert states == [
            {"sessionUpdate": "state_update", "state": "running"},
            {"sessionUpdate": "state_update", "state": "requires_action"},
            {"sessionUpdate": "state_update", "state": "running"},
            {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"},
        ]
        assert all(m["params"]["sessionId"] == "sess-1" for m in wire.sent("agent") if m.get("method"))
        # the receipt went out before the turn's first update (prompt-lifecycle.mdx sequence)
        agent_lines = wire.sent("agent")
        first_update = next(i for i, m in enumerate(agent_lines) if m.get("method") == "session/update")
        assert agent_lines.index(wire.answer_to("session/prompt")) < first_update


async def test_a_turn_returning_a_stop_reason_ends_idle_with_it() -> None:
    async def truncated(agent: Agent, params: Any) -> str:
        return "max_tokens"

    async with connect(with_turn(truncated)) as (_agent_conn, client_conn, wire):
        await initialize(client_conn)
        await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
        await client_conn.agent.session_prompt(text_prompt())
        client: RecordingClient = client_conn.handler
        await client.idle.wait()
        assert client.trace() == ["state:running", "state:idle"]
        assert wire.updates()[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "max_tokens"}


async def test_a_turn_raising_a_request_error_ends_idle_error_with_its_code_message_and_data() -> None:
    """A ``RequestError`` keeps what it says (the v1 prompt answer would carry it); any other
    exception is -32603 "Internal error", its details only in the agent's log."""

    async def refused(agent: Agent, params: Any) -> str:
        raise acp_trio.RequestError(-32000, "quota exceeded", {"retryAfter": 5})

    async def broken(agent: Agent, params: Any) -> str:
        raise ValueError("secret detail")

    for turn, error in (
        (refused, {"code": -32000, "message": "quota exceeded", "data": {"retryAfter": 5}}),
        (broken, {"code": -32603, "message": "Internal error"}),
    ):
        async with connect(with_turn(turn)) as (_agent_conn, client_conn, wire):
            await initialize(client_conn)
            await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
            await client_conn.agent.session_prompt(text_prompt())
            client: RecordingClient = client_conn.handler
            await client.idle.wait()
            idle = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "error", "error": error}
            assert wire.updates()[-1] == idle


async def test_session_cancel_while_requires_action_answers_the_pending_permission_cancelled() -> None:
    async with connect(with_turn(edit_with_permission)) as (agent_conn, client_conn, wire):
        await initialize(client_conn)
        await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
        client: RecordingClient = client_conn.handler
        client.hold_permission = True
        await client_conn.agent.session_prompt(text_prompt())
        await client.asked.wait()
        assert client.trace()[-2:] == ["state:requires_action", "permission"]

        mark = wire.mark()
        await client_conn.agent.session_cancel(v2.CancelSessionNotification(session_id="sess-1"))
        await client.idle.wait()
        # session/cancel went out first, then the runtime answered the held permission request "cancelled"
        sent = wire.since(mark, "client")
        assert sent == [
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "sess-1"}},
            {
                "jsonrpc": "2.0",
                "id": wire.request("session/request_permission")["id"],
                "result": {"outcome": {"outcome": "cancelled"}},
            },
        ]
        assert client.trace()[-1] == "state:idle"

        # the next prompt starts a new turn whose permission request reaches the handler and is answered
        client.hold_permission = False
        client.idle = trio.Event()
        await client_conn.agent.session_prompt(text_prompt())
        await client.idle.wait()
        assert client.events[-1][1].stop_reason == "end_turn"
        agent: Agent = agent_conn.handler
        assert agent.outcomes[-1] == v2.SelectedRequestPermissionOutcome(option_id="allow")
        assert wire.answer_to("session/request_permission")["result"] == {
            "outcome": {"outcome": "selected", "optionId": "allow"}
        }


async def test_session_cancel_while_requires_action_always_ends_the_turn_idle_cancelled() -> None:
    rounds = 20  # each round loses the race with probability 1/2: all pass by chance with probability 2**-20
    async with connect(with_turn(edit_with_permission)) as (_agent_conn, client_conn, _wire):
        await initialize(client_conn)
        await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
        client: RecordingClient = client_conn.handler
        client.hold_permission = True
        stop_reasons = []
        for _ in range(rounds):
            client.idle, client.asked = trio.Event(), trio.Event()
            await client_conn.agent.session_prompt(text_prompt())
            await client.asked.wait()
            await client_conn.agent.session_cancel(v2.CancelSessionNotification(session_id="sess-1"))
            await client.idle.wait()
            stop_reasons.append(client.events[-1][1].stop_reason)
        assert stop_reasons == ["cancelled"] * rounds


# -- session/resume with replayFrom ----------------------------------------------------------------


async def test_resume_with_replay_from_start_replays_history_before_answering_and_opens_the_session() -> None:
    history = [
        v2.UserMessageSessionUpdate(message_id="msg-u", content=[v2.TextContentBlock(text="Capital of France?")]),
        v2.AgentThoughtSessionUpdate(message_id="msg-t", content=[v2.TextContentBlock(text="Easy.")]),
        v2.AgentMessageSessionUpdate(message_id="msg-a", content=[v2.TextContentBlock(text="Paris.")]),
    ]
    async with connect(answering({"capabilities": {"session": {}}})) as (agent_conn, client_conn, wire):
        await initialize(client_conn)
        agent: Agent = agent_conn.handler
        agent.history = history
        client: RecordingClient = client_conn.handler

        response = await client_conn.agent.session_resume(
            v2.ResumeSessionRequest(
                session_id="sess_789xyz", cwd="/home/user/project", replay_from=v2.StartReplayFrom()
            )
        )
        # every replayed update was handled before session/resume returned
        assert [n.update for n in client.notifications] == history
        assert {n.session_id for n in client.notifications} == {"sess_789xyz"}
        assert isinstance(response, v2.ResumeSessionResponse)
        assert isinstance(response.config_options[0], v2.SelectSessionConfigOption)
        assert isinstance(agent.calls[-1][1].replay_from, v2.StartReplayFrom)
        for conn in (client_conn, agent_conn):
            session = conn.sessions["sess_789xyz"]
            assert (session.method, session.cwd) == ("session/resume", "/home/user/project")

        request = wire.request("session/resume")
        assert request["params"] == {
            "sessionId": "sess_789xyz",
            "cwd": "/home/user/project",
            "replayFrom": {"type": "start"},
        }
        agent_lines = wire.sent("agent")
        answer = agent_lines.index(wire.answer_to("session/resume"))
        assert [m["params"]["update"]["sessionUpdate"] for m in agent_lines[:answer] if m.get("method")] == [
            "user_message",
            "agent_thought",
            "agent_message",
        ]

        # without replayFrom: nothing on the wire about it, nothing replayed
        await client_conn.agent.session_resume(v2.ResumeSessionRequest(session_id="sess-2", cwd="/work"))
        assert wire.request("session/resume")["params"] == {"sessionId": "sess-2", "cwd": "/work"}
        assert agent.calls[-1][1].replay_from is UNSET
        assert len(client.notifications) == len(history)
        assert set(client_conn.sessions) == {"sess_789xyz", "sess-2"}


# -- authentication ------------------------------------------------------------------------------


async def test_auth_login_and_logout_are_sent_when_auth_methods_are_advertised() -> None:
    answer = {"capabilities": {}, "authMethods": [AGENT_LOGIN, TERMINAL_LOGIN]}
    async with connect(answering(answer)) as (agent_conn, client_conn, wire):
        response = await initialize(client_conn)
        assert [type(m) for m in response.auth_methods] == [v2.AgentAuthMethod, v2.TerminalAuthMethod]
        assert client_conn.agent_auth_methods == [AGENT_LOGIN, TERMINAL_LOGIN]
        agent: Agent = agent_conn.handler

        login = await client_conn.agent.auth_login(v2.LoginAuthRequest(method_id="agent-login"))
        assert isinstance(login, v2.LoginAuthResponse)
        assert wire.request("auth/login")["params"] == {"methodId": "agent-login"}
        assert wire.answer_to("auth/login")["result"] == {}

        # a terminal method, or one never advertised, is refused before sending
        mark = wire.mark()
        for method_id, detail in [("terminal-login", "terminal method"), ("sso", "not one of the advertised")]:
            with pytest.raises(acp_trio.CapabilityError, match=detail) as info:
                await client_conn.agent.auth_login(v2.LoginAuthRequest(method_id=method_id))
            assert (info.value.method, info.value.capability) == ("auth/login", "authMethods")
        assert wire.since(mark) == []

        logout = await client_conn.agent.auth_logout(v2.LogoutAuthRequest())
        assert isinstance(logout, v2.LogoutAuthResponse)
        assert wire.request("auth/logout")["params"] == {}
        assert wire.answer_to("auth/logout")["result"] == {}
        assert agent.methods() == ["initialize", "auth/login", "auth/logout"]
        assert agent.calls[1][1].method_id == "agent-login"

        # the auth surface does not open the session surface: capabilities has no "session"
        with pytest.raises(acp_trio.CapabilityError, match="session"):
            await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))


@pytest.mark.parametrize(
    "answer",
    [{"capabilities": {"session": {}}}, {"capabilities": {"auth": {}}, "authMethods": []}],
    ids=["authMethods-omitted", "authMethods-empty-with-capabilities-auth"],
)
async def test_auth_login_and_logout_are_refused_locally_without_auth_methods(answer: Message) -> None:
    async with connect(answering(answer)) as (agent_conn, client_conn, wire):
        await initialize(client_conn)
        mark = wire.mark()
        calls = [
            ("auth/login", lambda: client_conn.agent.auth_login(v2.LoginAuthRequest(method_id="agent-login"))),
            ("auth/logout", lambda: client_conn.agent.auth_logout(v2.LogoutAuthRequest())),
        ]
        for method, call in calls:
            with pytest.raises(acp_trio.CapabilityError, match="listed no authentication methods") as info:
                await call()
            assert (info.value.method, info.value.capability, info.value.peer) == (method, "authMethods", "agent")
        assert wire.since(mark) == []
        assert agent_conn.handler.methods() == ["initialize"]


# -- config options ------------------------------------------------------------------------------


async def test_set_config_option_and_config_option_update() -> None:
    async def switch_back_to_ask(agent: Agent, params: Any) -> None:
        agent.config[0]["currentValue"] = "ask"
        await agent.send(params.session_id, v2.ConfigOptionUpdateSessionUpdate(config_options=agent.config_options()))

    async with connect(with_turn(switch_back_to_ask)) as (_agent_conn, client_conn, wire):
        await initialize(client_conn)
        session = await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
        mode, brave = session.config_options
        assert isinstance(mode, v2.SelectSessionConfigOption) and isinstance(brave, v2.BooleanSessionConfigOption)
        assert (mode.current_value, mode.category, [o.value for o in mode.options]) == ("ask", "mode", ["ask", "code"])
        assert brave.current_value is False

        result = await client_conn.agent.session_set_config_option(
            v2.IdSetSessionConfigOptionRequest(session_id="sess-1", config_id="mode", value="code")
        )
        assert isinstance(result, v2.SetSessionConfigOptionResponse)
        assert [o.current_value for o in result.config_options] == ["code", False]
        result = await client_conn.agent.session_set_config_option(
            v2.BooleanSetSessionConfigOptionRequest(session_id="sess-1", config_id="brave_mode", value=True)
        )
        assert [o.current_value for o in result.config_options] == ["code", True]
        sent = [m["params"] for m in wire.sent("client") if m.get("method") == "session/set_config_option"]
        assert sent == [
            {"type": "id", "sessionId": "sess-1", "configId": "mode", "value": "code"},
            {"type": "boolean", "sessionId": "sess-1", "configId": "brave_mode", "value": True},
        ]
        assert wire.answer_to("session/set_config_option")["result"]["configOptions"][1] == {
            **CONFIG_OPTIONS[1],
            "currentValue": True,
        }

        # the agent changes an option itself: config_option_update with the full list
        await client_conn.agent.session_prompt(text_prompt())
        client: RecordingClient = client_conn.handler
        await client.idle.wait()
        update = next(u for kind, u in client.events if kind == "update" and u.session_update == "config_option_update")
        assert isinstance(update, v2.ConfigOptionUpdateSessionUpdate)
        assert [o.current_value for o in update.config_options] == ["ask", True]
        assert [u for u in wire.updates() if u["sessionUpdate"] == "config_option_update"] == [
            {
                "sessionUpdate": "config_option_update",
                "configOptions": [CONFIG_OPTIONS[0], {**CONFIG_OPTIONS[1], "currentValue": True}],
            }
        ]


# -- custom values: open enums and tagged unions ---------------------------------------------------

CUSTOM_UPDATES: list[Any] = [
    v2.SessionUpdateOther(session_update="_acme/weather", extra_fields={"sunny": True, "forecast": [{"t": 21.5}]}),
    v2.StateUpdateSessionUpdateOther(state="_acme_waiting_for_ci", extra_fields={"checks": 3}),
    v2.AgentMessageChunkSessionUpdate(
        message_id="msg-a",
        content=v2.ContentBlockOther(type="_acme/hologram", extra_fields={"frames": [1, 2, 3], "_meta": {"k": None}}),
    ),
    v2.ToolCallUpdateSessionUpdate(
        tool_call_id="call-9",
        title="Deploy",
        kind="_acme_deploy",
        status="_acme_queued",
        content=[v2.ToolCallContentOther(type="_acme/chart", extra_fields={"series": [[0, 1], [1, 4]]})],
    ),
    v2.ConfigOptionUpdateSessionUpdate(
        config_options=[
            v2.SessionConfigOptionOther(
                type="_acme_slider",
                config_id="temperature",
                name="Temperature",
                category="_acme_tuning",
                extra_fields={"currentValue": 0.7, "min": 0, "max": 1},
            )
        ]
    ),
]


async def test_custom_updates_enum_values_and_blocks_reach_the_client_intact_and_re_encode_byte_equal() -> None:
    async def custom_turn(agent: Agent, params: Any) -> str:
        for update in CUSTOM_UPDATES:
            await agent.send(params.session_id, update)
        return "_acme_budget_exhausted"  # a custom stop reason

    async with connect(with_turn(custom_turn)) as (_agent_conn, client_conn, wire):
        await initialize(client_conn)
        await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
        await client_conn.agent.session_prompt(text_prompt())
        client: RecordingClient = client_conn.handler
        await client.idle.wait()

        received = [n.update for n in client.notifications]
        assert received[1:-1] == CUSTOM_UPDATES  # same catch-all classes, same fields
        other, state, chunk, tool, config = received[1:-1]
        assert isinstance(other, v2.SessionUpdateOther) and other.extra_fields["forecast"] == [{"t": 21.5}]
        assert isinstance(state, v2.StateUpdateSessionUpdateOther) and state.state == "_acme_waiting_for_ci"
        assert isinstance(chunk.content, v2.ContentBlockOther) and chunk.content.type == "_acme/hologram"
        assert (tool.kind, tool.status) == ("_acme_deploy", "_acme_queued")
        assert isinstance(tool.content[0], v2.ToolCallContentOther)
        assert isinstance(config.config_options[0], v2.SessionConfigOptionOther)
        assert config.config_options[0].category == "_acme_tuning"
        idle = received[-1]
        assert isinstance(idle, v2.IdleStateUpdateSessionUpdate) and idle.stop_reason == "_acme_budget_exhausted"

        lines = [line for line in wire.raw_sent("agent") if b'"method":"session/update"' in line]
        assert len(lines) == len(client.notifications)
        for line, notification in zip(lines, client.notifications, strict=True):
            assert acp_trio.dumps(notification) == payload(line, "params")
        assert wire.updates()[1] == {"sessionUpdate": "_acme/weather", "sunny": True, "forecast": [{"t": 21.5}]}
        assert wire.updates()[3]["content"] == {"type": "_acme/hologram", "frames": [1, 2, 3], "_meta": {"k": None}}


async def test_custom_values_from_the_client_reach_the_agent_intact_and_re_encode_byte_equal() -> None:
    async def ask_custom(agent: Agent, params: Any) -> None:
        response = await agent.conn.client.session_request_permission(
            v2.RequestPermissionRequest(
                session_id=params.session_id,
                title="Run it?",
                subject=v2.RequestPermissionSubjectOther(type="_acme/job", extra_fields={"job": 7}),
                options=[v2.PermissionOption(option_id="hour", name="Allow for an hour", kind="_acme_allow_for_hour")],
            )
        )
        agent.outcomes.append(response.outcome)

    caps = {"session": {"mcp": {"stdio": {}}}}
    async with connect(answering({"capabilities": caps}, ask_custom)) as (agent_conn, client_conn, wire):
        await initialize(client_conn)
        client: RecordingClient = client_conn.handler
        client.permission_outcome = v2.RequestPermissionOutcomeOther(outcome="_acme_deferred", extra_fields={"by": 1})
        server = v2.McpServerOther(type="_acme_socket", extra_fields={"name": "tools", "path": "/tmp/tools.sock"})
        await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work", mcp_servers=[server]))
        sketch = v2.ContentBlockOther(type="_acme/sketch", extra_fields={"strokes": [[0, 0], [3, 4]]})
        await client_conn.agent.session_prompt(text_prompt(v2, "sess-1", sketch))
        await client.idle.wait()
        await client_conn.agent.session_set_config_option(
            v2.SetSessionConfigOptionRequestOther(
                type="_acme_range", session_id="sess-1", config_id="temperature", value=[0.2, 0.7]
            )
        )
        await client_conn.agent.session_resume(
            v2.ResumeSessionRequest(
                session_id="sess-1",
                cwd="/work",
                replay_from=v2.ReplayFromOther(type="_acme_from_message", extra_fields={"messageId": "msg-3"}),
            )
        )

        agent: Agent = agent_conn.handler
        by_method = dict(agent.calls)
        assert by_method["session/new"].mcp_servers == [server]
        assert by_method["session/prompt"].prompt[1] == sketch
        config = by_method["session/set_config_option"]
        assert isinstance(config, v2.SetSessionConfigOptionRequestOther) and config.value == [0.2, 0.7]
        replay = by_method["session/resume"].replay_from
        assert isinstance(replay, v2.ReplayFromOther) and replay.extra_fields == {"messageId": "msg-3"}
        assert agent.outcomes == [client.permission_outcome]  # the client's custom outcome, intact
        permission = next(item for kind, item in client.events if kind == "permission")
        assert isinstance(permission.subject, v2.RequestPermissionSubjectOther)
        assert permission.options[0].kind == "_acme_allow_for_hour"

        # what the agent decoded re-encodes to exactly the bytes the client sent
        sent = {orjson.loads(line)["method"]: line for line in wire.raw_sent("client") if b'"method"' in line}
        for method, params in by_method.items():
            if method != "initialize":
                assert acp_trio.dumps(params) == payload(sent[method], "params"), method
        answer = next(line for line in wire.raw_sent("client") if b'"_acme_deferred"' in line)
        assert acp_trio.dumps(v2.RequestPermissionResponse(outcome=agent.outcomes[0])) == payload(answer, "result")


# -- capability enforcement at the connection level ------------------------------------------------


def session_calls(client_conn: acp_trio.ClientSideConnection) -> dict[str, Callable[[], Awaitable[Any]]]:
    agent = client_conn.agent
    return {
        "session/new": lambda: agent.session_new(v2.NewSessionRequest(cwd="/work")),
        "session/resume": lambda: agent.session_resume(v2.ResumeSessionRequest(session_id="s", cwd="/work")),
        "session/list": lambda: agent.session_list(v2.ListSessionsRequest()),
        "session/prompt": lambda: agent.session_prompt(text_prompt(v2, "s")),
        "session/set_config_option": lambda: agent.session_set_config_option(
            v2.IdSetSessionConfigOptionRequest(session_id="s", config_id="mode", value="code")
        ),
        "session/close": lambda: agent.session_close(v2.CloseSessionRequest(session_id="s")),
        "session/delete": lambda: agent.session_delete(v2.DeleteSessionRequest(session_id="s")),
        "session/cancel": lambda: agent.session_cancel(v2.CancelSessionNotification(session_id="s")),
    }


@pytest.mark.parametrize(
    "answer",
    [{}, {"capabilities": {}}, {"capabilities": {"session": None, "auth": {}}}],
    ids=["capabilities-omitted", "capabilities-empty", "session-null"],
)
async def test_the_session_surface_is_refused_locally_when_the_agent_omits_capabilities_session(
    answer: Message,
) -> None:
    """The agent implements every session method, but its own initialize does not advertise ``session``."""
    async with connect(answering(answer)) as (agent_conn, client_conn, wire):
        await initialize(client_conn)
        mark = wire.mark()
        for method, call in session_calls(client_conn).items():
            with pytest.raises(acp_trio.CapabilityError, match="the session/\\* methods need it") as info:
                await call()
            assert (info.value.method, info.value.capability, info.value.peer) == (method, "session", "agent")
        assert wire.since(mark) == []
        assert agent_conn.handler.methods() == ["initialize"]
        assert len(client_conn.sessions) == 0


async def test_session_delete_needs_session_delete_while_close_is_baseline() -> None:
    async with connect(answering({"capabilities": {"session": {}}})) as (agent_conn, client_conn, wire):
        await initialize(client_conn)
        await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
        mark = wire.mark()
        with pytest.raises(acp_trio.CapabilityError) as info:
            await client_conn.agent.session_delete(v2.DeleteSessionRequest(session_id="sess-1"))
        assert (info.value.method, info.value.capability) == ("session/delete", "session.delete")
        assert wire.since(mark) == [] and "sess-1" in client_conn.sessions

        ended: list[tuple[str, str | None]] = []
        client_conn.sessions.on_end(lambda s: ended.append((s.session_id, s.end_reason)))
        await client_conn.agent.session_close(v2.CloseSessionRequest(session_id="sess-1"))
        assert ended == [("sess-1", "session/close")]
        assert "sess-1" not in client_conn.sessions and "sess-1" not in agent_conn.sessions

    async with connect(answering({"capabilities": {"session": {"delete": {}}}})) as (agent_conn, client_conn, wire):
        await initialize(client_conn)
        await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
        ended = []
        agent_conn.sessions.on_end(lambda s: ended.append((s.session_id, s.end_reason)))
        await client_conn.agent.session_delete(v2.DeleteSessionRequest(session_id="sess-1"))
        assert wire.request("session/delete")["params"] == {"sessionId": "sess-1"}
        assert ended == [("sess-1", "session/delete")]
        assert "sess-1" not in client_conn.sessions and agent_conn.handler.methods()[-1] == "session/delete"


IMAGE = v2.ImageContentBlock(data="iVBORw0KGgo=", mime_type="image/png")
AUDIO = v2.AudioContentBlock(data="UklGRg==", mime_type="audio/wav")
RESOURCE = v2.ResourceContentBlock(resource=v2.TextResourceContents(uri="file:///work/a.py", text="print(1)"))
LINK = v2.ResourceLinkContentBlock(uri="file:///work/b.py", name="b.py")


@pytest.mark.parametrize(
    ("prompt_caps", "block", "refused"),
    [
        ({}, IMAGE, "session.prompt.image"),
        ({"image": {}}, IMAGE, None),
        ({"image": {}}, AUDIO, "session.prompt.audio"),
        ({"image": {}, "audio": {}}, RESOURCE, "session.prompt.embeddedContext"),
        ({}, LINK, None),
    ],
    ids=["image-refused", "image-sent", "audio-refused", "resource-refused", "resource_link-baseline"],
)
async def test_prompt_content_needs_its_session_prompt_marker(
    prompt_caps: Message, block: Any, refused: str | None
) -> None:
    caps = {"session": {"prompt": prompt_caps}}
    async with connect(answering({"capabilities": caps})) as (agent_conn, client_conn, wire):
        await initialize(client_conn)
        await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
        mark = wire.mark()
        if refused is None:
            await client_conn.agent.session_prompt(text_prompt(v2, "sess-1", block))
            assert agent_conn.handler.calls[-1][1].prompt[1] == block
            assert wire.request("session/prompt")["params"]["prompt"][1] == converter.unstructure(block)
            return
        with pytest.raises(acp_trio.CapabilityError) as info:
            await client_conn.agent.session_prompt(text_prompt(v2, "sess-1", block))
        assert (info.value.capability, info.value.detail) == (refused, f"prompt[1] is a {block.type} block")
        assert wire.since(mark) == [] and agent_conn.handler.methods() == ["initialize", "session/new"]


async def test_v1_only_methods_are_refused_on_a_v2_only_connection_and_never_routed() -> None:
    async with connect(answering({"capabilities": {"session": {}}, "authMethods": [AGENT_LOGIN]})) as (
        agent_conn,
        client_conn,
        wire,
    ):
        await initialize(client_conn)
        mark = wire.mark()
        v1_agent = v1.AgentPeer(client_conn)
        v1_client = v1.ClientPeer(agent_conn)
        calls = {
            "authenticate": lambda: v1_agent.authenticate(v1.AuthenticateRequest(method_id="agent-login")),
            "logout": lambda: v1_agent.logout(v1.LogoutRequest()),
            "session/load": lambda: v1_agent.session_load(
                v1.LoadSessionRequest(session_id="s", cwd="/work", mcp_servers=[])
            ),
            "session/set_mode": lambda: v1_agent.session_set_mode(
                v1.SetSessionModeRequest(session_id="s", mode_id="code")
            ),
            "fs/write_text_file": lambda: v1_client.fs_write_text_file(
                v1.WriteTextFileRequest(session_id="s", path="/work/a", content="x")
            ),
            "terminal/create": lambda: v1_client.terminal_create(
                v1.CreateTerminalRequest(session_id="s", command="ls")
            ),
        }
        for method, call in calls.items():
            with pytest.raises(acp_trio.CapabilityError, match="v1-only method") as info:
                await call()
            assert (info.value.method, info.value.capability) == (method, "protocol version 2")
        assert wire.since(mark) == []

        # sent anyway (raw), a v1 method reaches no handler: the agent object's `authenticate` is not routed
        with pytest.raises(acp_trio.RequestError) as error:
            await client_conn.connection.request("authenticate", {"methodId": "agent-login"})
        assert error.value.code == acp_trio.METHOD_NOT_FOUND
        assert agent_conn.handler.methods() == ["initialize"]


# -- v2_unstable -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fork", [True, False], ids=["session.fork", "no-session.fork"])
async def test_unstable_session_fork_needs_session_fork_and_opens_the_fork(fork: bool) -> None:
    assert "session/fork" in v2_unstable.METHODS and "session/fork" not in v2.METHODS
    caps: Message = {"session": {"fork": {}} if fork else {}}
    async with connect(answering({"capabilities": caps}), variant=v2_unstable) as (agent_conn, client_conn, wire):
        response = await initialize(client_conn, variant=v2_unstable)
        assert isinstance(response, v2_unstable.InitializeResponse)
        assert isinstance(client_conn.agent, v2_unstable.AgentPeer) and client_conn.variant is v2_unstable
        assert (response.capabilities.session.fork is not UNSET) is fork
        await client_conn.agent.session_new(v2_unstable.NewSessionRequest(cwd="/work"))
        request = v2_unstable.ForkSessionRequest(session_id="sess-1", cwd="/work/fork")
        if not fork:
            mark = wire.mark()
            with pytest.raises(acp_trio.CapabilityError) as info:
                await client_conn.agent.session_fork(request)
            assert (info.value.method, info.value.capability) == ("session/fork", "session.fork")
            assert wire.since(mark) == [] and set(client_conn.sessions) == {"sess-1"}
            return
        forked = await client_conn.agent.session_fork(request)
        assert isinstance(forked, v2_unstable.ForkSessionResponse) and forked.session_id == "sess-fork-1"
        assert wire.request("session/fork")["params"] == {"sessionId": "sess-1", "cwd": "/work/fork"}
        for conn in (client_conn, agent_conn):
            assert set(conn.sessions) == {"sess-1", "sess-fork-1"}
            assert (conn.sessions["sess-fork-1"].method, conn.sessions["sess-fork-1"].cwd) == (
                "session/fork",
                "/work/fork",
            )


async def test_unstable_methods_are_refused_on_a_stable_v2_connection() -> None:
    caps = {"session": {"fork": {}}}  # even when the agent answers the unstable marker
    async with connect(answering({"capabilities": caps})) as (agent_conn, client_conn, wire):
        await initialize(client_conn)
        mark = wire.mark()
        with pytest.raises(acp_trio.CapabilityError, match="not part of protocol version 2") as info:
            await v2_unstable.AgentPeer(client_conn).session_fork(
                v2_unstable.ForkSessionRequest(session_id="s", cwd="/work")
            )
        assert (info.value.method, info.value.capability) == ("session/fork", "protocol version 2")
        assert wire.since(mark) == [] and agent_conn.handler.methods() == ["initialize"]


async def test_a_session_cancel_read_with_its_prompt_in_one_read_still_cancels_the_turn(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The prompt's handler has not started when the cancel is read: the turn it starts must still
    end idle/cancelled (found by acp_trio.check: the turn ran on to ask permission)."""

    async def long_turn(agent: Agent, params: Any) -> Any:
        await trio.sleep(60)
        return "end_turn"

    client_stream, agent_stream = trio.testing.memory_stream_pair()
    received = bytearray()

    async def until(predicate: Callable[[Message], bool]) -> Message:
        while True:
            for line in bytes(received).split(b"\n")[:-1]:
                message = orjson.loads(line)
                if predicate(message):
                    return dict(message)
            received.extend(await client_stream.receive_some())

    def line(message: Message) -> bytes:
        return orjson.dumps(message) + b"\n"

    with trio.fail_after(30):
        agent = {v2: lambda conn: Agent(conn, long_turn)}
        async with acp_trio.AgentSideConnection(agent, agent_stream, agent_stream):
            init = {"protocolVersion": 2, "info": CLIENT_INFO}
            await client_stream.send_all(line({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}))
            await until(lambda m: m.get("id") == 1)
            new = {"cwd": "/work"}
            await client_stream.send_all(line({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": new}))
            await until(lambda m: m.get("id") == 2)
            prompt = {"sessionId": "sess-1", "prompt": [{"type": "text", "text": "hi"}]}
            cancel = {"sessionId": "sess-1"}
            both = line({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt})
            both += line({"jsonrpc": "2.0", "method": "session/cancel", "params": cancel})
            await client_stream.send_all(both)  # one write: one read on the agent's side
            start = trio.current_time()

            def idle(m: Message) -> bool:
                update = (m.get("params") or {}).get("update") or {}
                return update.get("sessionUpdate") == "state_update" and update.get("state") == "idle"

            update = (await until(idle))["params"]["update"]
            assert update["stopReason"] == "cancelled"
            assert trio.current_time() - start < 1

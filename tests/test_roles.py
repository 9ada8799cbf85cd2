"""The typed agent/client layer: lifecycle, negotiation, capabilities, extensions, ordering, cancellation.

Every test joins an agent and a client in memory (``acp_trio.open_memory_pair``) and watches the
raw lines with a tap.  Spec pages: ``docs/protocol/v1/initialization.mdx``, ``extensibility.mdx``,
``prompt-turn.mdx``, ``cancellation.mdx``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol

import attrs
import orjson
import pytest
import trio
import trio.testing

import acp_trio
from acp_schema import v1, v1_unstable
from acp_trio import converter

# -- helpers -------------------------------------------------------------------------------------

Message = dict[str, Any]
DEADLINE = 30


class Wire:
    """Every raw line either connection wrote or read, labelled with the side that saw it."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, bytes]] = []  # (side, direction, raw line)
        self._waiters: list[tuple[Callable[[str, Message], bool], trio.Event]] = []

    def tap_for(self, side: str) -> acp_trio.Tap:
        def tap(direction: str, line: bytes) -> None:
            self.lines.append((side, direction, line))
            message = orjson.loads(line)
            for pred, event in self._waiters:
                if direction == "out" and pred(side, message):
                    event.set()

        return tap

    def raw_sent(self, side: str | None = None) -> list[bytes]:
        return [line for s, d, line in self.lines if d == "out" and (side is None or s == side)]

    def sent(self, side: str | None = None) -> list[Message]:
        return [orjson.loads(line) for line in self.raw_sent(side)]

    def sent_by(self) -> list[tuple[str, Message]]:
        return [(s, orjson.loads(line)) for s, d, line in self.lines if d == "out"]

    async def wait_sent(self, pred: Callable[[str, Message], bool]) -> None:
        """Wait until a line matching ``pred(side, message)`` was written (bound it with fail_after)."""
        if any(pred(side, message) for side, message in self.sent_by()):
            return
        event = trio.Event()
        self._waiters.append((pred, event))
        await event.wait()


@asynccontextmanager
async def connect(
    agent: Any, client: Any, **options: Any
) -> AsyncIterator[tuple[acp_trio.AgentSideConnection, acp_trio.ClientSideConnection, Wire]]:
    """``open_memory_pair`` with a tap on each side (so every line says who wrote it).

    The whole block must finish within ``DEADLINE`` seconds (virtual ones under the autojump clock).
    """
    wire = Wire()
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(agent, client, tap=wire.tap_for("?"), **options) as pair:
            agent_conn, client_conn = pair
            # open_memory_pair gives both ends the same tap; label each end's lines instead
            agent_conn.connection.tap = wire.tap_for("agent")
            client_conn.connection.tap = wire.tap_for("client")
            yield agent_conn, client_conn, wire


FULL_CLIENT_CAPS: Message = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}
FULL_AGENT_CAPS: Message = {
    "loadSession": True,
    "promptCapabilities": {"image": True, "audio": True, "embeddedContext": True},
    "mcpCapabilities": {"http": True, "sse": True},
    "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}, "additionalDirectories": {}},
    "auth": {"logout": {}},
}


def without(caps: Message, path: str) -> Message:
    """A deep copy of ``caps`` with the dotted capability ``path`` removed."""
    out = copy.deepcopy(caps)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[key]
    del node[last]
    return out


async def initialize(
    client_conn: acp_trio.ClientSideConnection, caps: Message | None = None, version: int = 1
) -> v1.InitializeResponse:
    request = v1.InitializeRequest(
        protocol_version=version,
        client_capabilities=converter.structure(FULL_CLIENT_CAPS if caps is None else caps, v1.ClientCapabilities),
    )
    response: v1.InitializeResponse = await client_conn.agent.initialize(request)
    return response


def chunk(session_id: str, text: str) -> v1.SessionNotification:
    return v1.SessionNotification(
        session_id=session_id, update=v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=text))
    )


def prompt(session_id: str = "s1", text: str = "hi") -> v1.PromptRequest:
    return v1.PromptRequest(session_id=session_id, prompt=[v1.TextContentBlock(text=text)])


def permission(session_id: str) -> v1.RequestPermissionRequest:
    return v1.RequestPermissionRequest(
        session_id=session_id,
        tool_call=v1.ToolCallUpdate(tool_call_id="t1"),
        options=[v1.PermissionOption(option_id="allow", name="Allow", kind="allow_once")],
    )


def read_request(session_id: str = "s1") -> v1.ReadTextFileRequest:
    return v1.ReadTextFileRequest(session_id=session_id, path="/work/a.txt")


def is_request(method: str) -> Callable[[str, Message], bool]:
    return lambda _side, m: m.get("method") == method and "id" in m


def is_error_for(side: str, request_id: Any, code: int) -> Callable[[str, Message], bool]:
    return lambda s, m: s == side and m.get("id") == request_id and m.get("error", {}).get("code") == code


class SessionAgent:
    """An agent with sessions, recording what reached it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        self.calls.append("session/new")
        return v1.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        self.calls.append("session/prompt")
        return v1.PromptResponse(stop_reason="end_turn")


# -- lifecycle and negotiation -------------------------------------------------------------------


async def test_requests_before_initialize_are_refused_without_calling_the_handler() -> None:
    agent = SessionAgent()

    async def extension(params: Any) -> Any:
        agent.calls.append("_acme/x")
        return {}

    async with connect(agent, object()) as (agent_conn, client_conn, wire):
        agent_conn.on_ext_request("_acme/x", extension)
        with pytest.raises(acp_trio.RequestError) as info:
            await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        assert info.value.code == acp_trio.INVALID_REQUEST
        with pytest.raises(acp_trio.RequestError) as ext_info:
            await client_conn.ext_request("_acme/x")
        assert ext_info.value.code == acp_trio.INVALID_REQUEST
        assert agent.calls == []
        assert [m["error"]["code"] for m in wire.sent("agent")] == [-32600, -32600]

        await initialize(client_conn)
        response = await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        assert response.session_id == "s1"
        assert await client_conn.ext_request("_acme/x") == {}
        assert agent.calls == ["session/new", "_acme/x"]


async def test_a_second_initialize_for_the_negotiated_version_gets_the_same_answer_and_keeps_the_first_negotiation() -> (
    None
):
    seen: list[int] = []

    class Agent:
        async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
            seen.append(params.protocol_version)
            return v1.InitializeResponse(
                protocol_version=1, agent_capabilities=v1.AgentCapabilities(load_session=len(seen) == 1)
            )

    async with connect(Agent(), object()) as (agent_conn, client_conn, wire):
        first = await initialize(client_conn)
        again = await initialize(client_conn, caps={})
        assert again == first
        answers = [m["result"] for side, m in wire.sent_by() if side == "agent" and "result" in m]
        assert answers[0] == answers[1] == {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}}
        assert seen == [1]  # the handler ran once
        assert agent_conn.client_capabilities == FULL_CLIENT_CAPS


async def test_a_second_initialize_for_another_version_is_refused_naming_the_negotiated_one() -> None:
    class Agent:
        async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
            return v1.InitializeResponse(protocol_version=1)

    async with connect(Agent(), object()) as (agent_conn, client_conn, _wire):
        await initialize(client_conn)
        for version in (2, 7):
            with pytest.raises(acp_trio.RequestError) as info:
                await client_conn.connection.request("initialize", {"protocolVersion": version})
            assert info.value.code == acp_trio.INVALID_REQUEST
            assert info.value.data["negotiatedVersion"] == 1
            assert info.value.data["requestedVersion"] == version
        assert agent_conn.protocol_version == 1


async def test_agent_answers_the_requested_version_when_it_supports_it() -> None:
    class Agent:
        async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
            return v1.InitializeResponse(protocol_version=params.protocol_version)

    async with connect(Agent(), object()) as (agent_conn, client_conn, wire):
        response = await initialize(client_conn, version=1)
        assert response.protocol_version == 1
        assert wire.sent("agent")[0]["result"]["protocolVersion"] == 1
        assert agent_conn.protocol_version == client_conn.protocol_version == 1


async def test_an_object_with_acp_handlers_is_served_by_the_handlers_it_returns() -> None:
    """``acp_handlers()`` (the hook a version-neutral agent uses) gives the ``{variant: handler}``
    mapping; negotiation then works as if that mapping had been passed."""
    seen: list[str] = []

    class V1Agent(SessionAgent):
        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            seen.append("v1")
            return await super().session_new(params)

    class Neutral:
        def acp_handlers(self) -> dict[Any, Any]:
            return {v1: V1Agent}

    async with connect(Neutral(), object()) as (agent_conn, client_conn, _wire):
        await initialize(client_conn, version=1)
        await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        assert seen == ["v1"]
        assert agent_conn.supported_versions == (1,)


def test_acp_handlers_must_return_a_variant_mapping_and_excludes_variant() -> None:
    class Bad:
        def acp_handlers(self) -> Any:
            return {"v1": object()}

    class Good:
        def acp_handlers(self) -> Any:
            return {v1: object()}

    with pytest.raises(TypeError, match="acp_handlers\\(\\) must return"):
        acp_trio._roles._versions_of(Bad(), None)
    with pytest.raises(TypeError, match="do not give variant="):
        acp_trio._roles._versions_of(Good(), v1)
    assert acp_trio._roles._versions_of(Good(), None)[1][0] is v1


@pytest.mark.parametrize("requested", [2, 99])
async def test_agent_answers_its_latest_version_when_asked_for_an_unsupported_one(requested: int) -> None:
    async with connect(SessionAgent(), object()) as (agent_conn, client_conn, wire):
        response = await initialize(client_conn, version=requested)
        assert wire.sent("client")[0]["params"]["protocolVersion"] == requested
        assert wire.sent("agent")[0]["result"]["protocolVersion"] == 1
        assert response.protocol_version == 1
        assert agent_conn.protocol_version == client_conn.protocol_version == 1


async def test_an_initialize_handler_answering_a_wrong_version_is_corrected_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Agent:
        async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
            return v1.InitializeResponse(protocol_version=5)

    caplog.set_level(logging.WARNING, logger="acp_trio")
    async with connect(Agent(), object()) as (_agent_conn, client_conn, wire):
        response = await initialize(client_conn, version=99)
        assert response.protocol_version == 1
        assert wire.sent("agent")[0]["result"]["protocolVersion"] == 1
    warnings = [r for r in caplog.records if r.name == "acp_trio" and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "5" in warnings[0].getMessage() and "protocolVersion" in warnings[0].getMessage()


async def test_client_closes_the_connection_when_the_agent_picks_a_version_it_does_not_speak() -> None:
    client_stream, agent_stream = trio.testing.memory_stream_pair()
    after_answer: list[bytes] = []

    async def raw_agent() -> None:
        buffer = b""
        while b"\n" not in buffer:
            buffer += await agent_stream.receive_some()
        request = orjson.loads(buffer.split(b"\n")[0])
        answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"protocolVersion": 7, "agentCapabilities": {}}}
        await agent_stream.send_all(orjson.dumps(answer) + b"\n")
        while data := await agent_stream.receive_some():  # until the client closes its end
            after_answer.append(data)
        after_answer.append(b"<eof>")

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(raw_agent)
            async with acp_trio.ClientSideConnection(object(), client_stream, client_stream) as conn:
                with pytest.raises(acp_trio.ProtocolVersionError) as info:
                    await initialize(conn)
                assert (info.value.requested, info.value.answered, info.value.supported) == (1, 7, (1,))
                assert "7" in str(info.value)
                assert conn.closed
                with pytest.raises(acp_trio.ConnectionClosed):
                    await conn.agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
    assert after_answer == [b"<eof>"]


@pytest.mark.parametrize("has_session_load", [False, True])
async def test_an_agent_without_initialize_gets_a_default_answer(has_session_load: bool) -> None:
    class Agent:
        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            return v1.NewSessionResponse(session_id="s1")

    class LoadingAgent(Agent):
        async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
            return v1.LoadSessionResponse()

    async with connect(LoadingAgent() if has_session_load else Agent(), object()) as (_a, client_conn, wire):
        response = await initialize(client_conn, version=3)
        assert response.protocol_version == 1
        assert (response.agent_capabilities.load_session is True) is has_session_load
        expected_caps = {"loadSession": True} if has_session_load else {}
        name = "LoadingAgent" if has_session_load else "Agent"  # named after its class (no agent_info)
        assert wire.sent("agent")[0]["result"] == {
            "protocolVersion": 1,
            "agentCapabilities": expected_caps,
            "agentInfo": {"name": name, "version": "0"},
        }
        assert client_conn.agent_capabilities == expected_caps


# -- capabilities --------------------------------------------------------------------------------


class FileClient:
    """A client that can do everything the capability rules guard."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        self.calls.append("fs/read_text_file")
        return v1.ReadTextFileResponse(content="text")

    async def fs_write_text_file(self, params: v1.WriteTextFileRequest) -> v1.WriteTextFileResponse:
        self.calls.append("fs/write_text_file")
        return v1.WriteTextFileResponse()

    async def terminal_create(self, params: v1.CreateTerminalRequest) -> v1.CreateTerminalResponse:
        self.calls.append("terminal/create")
        return v1.CreateTerminalResponse(terminal_id="term1")

    async def terminal_output(self, params: v1.TerminalOutputRequest) -> v1.TerminalOutputResponse:
        self.calls.append("terminal/output")
        return v1.TerminalOutputResponse(output="", truncated=False)

    async def terminal_wait_for_exit(self, params: v1.WaitForTerminalExitRequest) -> v1.WaitForTerminalExitResponse:
        self.calls.append("terminal/wait_for_exit")
        return v1.WaitForTerminalExitResponse(exit_code=0)

    async def terminal_kill(self, params: v1.KillTerminalRequest) -> v1.KillTerminalResponse:
        self.calls.append("terminal/kill")
        return v1.KillTerminalResponse()

    async def terminal_release(self, params: v1.ReleaseTerminalRequest) -> v1.ReleaseTerminalResponse:
        self.calls.append("terminal/release")
        return v1.ReleaseTerminalResponse()


CLIENT_CALLS: list[tuple[str, str, Callable[[Any], Awaitable[Any]]]] = [
    ("fs/read_text_file", "fs.readTextFile", lambda peer: peer.fs_read_text_file(read_request())),
    (
        "fs/write_text_file",
        "fs.writeTextFile",
        lambda peer: peer.fs_write_text_file(v1.WriteTextFileRequest(session_id="s1", path="/work/a", content="x")),
    ),
    (
        "terminal/create",
        "terminal",
        lambda peer: peer.terminal_create(v1.CreateTerminalRequest(session_id="s1", command="ls")),
    ),
    (
        "terminal/output",
        "terminal",
        lambda peer: peer.terminal_output(v1.TerminalOutputRequest(session_id="s1", terminal_id="term1")),
    ),
    (
        "terminal/wait_for_exit",
        "terminal",
        lambda peer: peer.terminal_wait_for_exit(v1.WaitForTerminalExitRequest(session_id="s1", terminal_id="term1")),
    ),
    (
        "terminal/kill",
        "terminal",
        lambda peer: peer.terminal_kill(v1.KillTerminalRequest(session_id="s1", terminal_id="term1")),
    ),
    (
        "terminal/release",
        "terminal",
        lambda peer: peer.terminal_release(v1.ReleaseTerminalRequest(session_id="s1", terminal_id="term1")),
    ),
]


@pytest.mark.parametrize(("method", "capability", "call"), CLIENT_CALLS, ids=[c[0] for c in CLIENT_CALLS])
async def test_agent_calls_to_unadvertised_client_methods_fail_locally_without_sending(
    method: str, capability: str, call: Callable[[Any], Awaitable[Any]]
) -> None:
    client = FileClient()
    async with connect(SessionAgent(), client) as (agent_conn, client_conn, wire):
        await initialize(client_conn, caps=without(FULL_CLIENT_CAPS, capability))
        await trio.testing.wait_all_tasks_blocked()
        before = len(wire.lines)
        with pytest.raises(acp_trio.CapabilityError) as info:
            await call(agent_conn.client)
        await trio.testing.wait_all_tasks_blocked()
        assert len(wire.lines) == before
        assert client.calls == []
        assert (info.value.method, info.value.capability, info.value.peer) == (method, capability, "client")
        assert method in str(info.value) and capability in str(info.value)


@pytest.mark.parametrize(("method", "capability", "call"), CLIENT_CALLS, ids=[c[0] for c in CLIENT_CALLS])
async def test_client_supports_says_beforehand_what_a_call_would_do(
    method: str, capability: str, call: Callable[[Any], Awaitable[Any]]
) -> None:
    async with connect(SessionAgent(), FileClient()) as (agent_conn, client_conn, _wire):
        assert not agent_conn.client_supports(method)  # before initialize: no capabilities
        await initialize(client_conn, caps=without(FULL_CLIENT_CAPS, capability))
        assert not agent_conn.client_supports(method)
        assert agent_conn.client_supports("session/request_permission")  # no capability needed
    async with connect(SessionAgent(), FileClient()) as (agent_conn, client_conn, _wire):
        await initialize(client_conn)
        assert agent_conn.client_supports(method)


@pytest.mark.parametrize(("method", "capability", "call"), CLIENT_CALLS, ids=[c[0] for c in CLIENT_CALLS])
async def test_agent_calls_to_advertised_client_methods_are_sent(
    method: str, capability: str, call: Callable[[Any], Awaitable[Any]]
) -> None:
    client = FileClient()
    async with connect(SessionAgent(), client) as (agent_conn, client_conn, wire):
        await initialize(client_conn, caps=FULL_CLIENT_CAPS)
        await call(agent_conn.client)
        assert client.calls == [method]
        assert [m["method"] for m in wire.sent("agent") if "method" in m] == [method]


class CapableAgent(SessionAgent):
    """An agent whose advertised capabilities are set per test (wire JSON)."""

    def __init__(self, caps: Message) -> None:
        super().__init__()
        self.caps = caps

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        wire = {"protocolVersion": 1, "agentCapabilities": self.caps}
        response: v1.InitializeResponse = converter.structure(wire, v1.InitializeResponse)
        return response

    async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
        self.calls.append("session/load")
        return v1.LoadSessionResponse()

    async def session_list(self, params: v1.ListSessionsRequest) -> v1.ListSessionsResponse:
        self.calls.append("session/list")
        return v1.ListSessionsResponse(sessions=[])

    async def session_resume(self, params: v1.ResumeSessionRequest) -> v1.ResumeSessionResponse:
        self.calls.append("session/resume")
        return v1.ResumeSessionResponse()

    async def session_close(self, params: v1.CloseSessionRequest) -> v1.CloseSessionResponse:
        self.calls.append("session/close")
        return v1.CloseSessionResponse()

    async def session_delete(self, params: v1.DeleteSessionRequest) -> v1.DeleteSessionResponse:
        self.calls.append("session/delete")
        return v1.DeleteSessionResponse()

    async def logout(self, params: v1.LogoutRequest) -> v1.LogoutResponse:
        self.calls.append("logout")
        return v1.LogoutResponse()


def _prompt_with(block: Any) -> v1.PromptRequest:
    return v1.PromptRequest(session_id="s1", prompt=[v1.TextContentBlock(text="look at this"), block])


AGENT_CALLS: list[tuple[str, str, str, Callable[[Any], Awaitable[Any]]]] = [
    (
        "session/load",
        "loadSession",
        "session/load",
        lambda peer: peer.session_load(v1.LoadSessionRequest(session_id="s1", cwd="/work", mcp_servers=[])),
    ),
    (
        "image",
        "promptCapabilities.image",
        "session/prompt",
        lambda peer: peer.session_prompt(_prompt_with(v1.ImageContentBlock(data="aGk=", mime_type="image/png"))),
    ),
    (
        "audio",
        "promptCapabilities.audio",
        "session/prompt",
        lambda peer: peer.session_prompt(_prompt_with(v1.AudioContentBlock(data="aGk=", mime_type="audio/wav"))),
    ),
    (
        "embedded-resource",
        "promptCapabilities.embeddedContext",
        "session/prompt",
        lambda peer: peer.session_prompt(
            _prompt_with(v1.ResourceContentBlock(resource=v1.TextResourceContents(uri="file:///a.txt", text="a")))
        ),
    ),
    (
        "mcp-http",
        "mcpCapabilities.http",
        "session/new",
        lambda peer: peer.session_new(
            v1.NewSessionRequest(cwd="/work", mcp_servers=[v1.HttpMcpServer(name="m", url="http://h/", headers=[])])
        ),
    ),
    (
        "session/list",
        "sessionCapabilities.list",
        "session/list",
        lambda peer: peer.session_list(v1.ListSessionsRequest()),
    ),
    (
        "session/resume",
        "sessionCapabilities.resume",
        "session/resume",
        lambda peer: peer.session_resume(v1.ResumeSessionRequest(session_id="s1", cwd="/work")),
    ),
    (
        "session/close",
        "sessionCapabilities.close",
        "session/close",
        lambda peer: peer.session_close(v1.CloseSessionRequest(session_id="s1")),
    ),
    (
        "session/delete",
        "sessionCapabilities.delete",
        "session/delete",
        lambda peer: peer.session_delete(v1.DeleteSessionRequest(session_id="s1")),
    ),
    ("logout", "auth.logout", "logout", lambda peer: peer.logout(v1.LogoutRequest())),
    (
        "additional-directories",
        "sessionCapabilities.additionalDirectories",
        "session/new",
        lambda peer: peer.session_new(
            v1.NewSessionRequest(cwd="/work", mcp_servers=[], additional_directories=["/other"])
        ),
    ),
    (
        "mcp-sse",
        "mcpCapabilities.sse",
        "session/new",
        lambda peer: peer.session_new(
            v1.NewSessionRequest(cwd="/work", mcp_servers=[v1.SseMcpServer(name="m", url="http://h/", headers=[])])
        ),
    ),
]


@pytest.mark.parametrize(("case", "capability", "method", "call"), AGENT_CALLS, ids=[c[0] for c in AGENT_CALLS])
async def test_client_calls_the_agent_did_not_advertise_fail_locally_without_sending(
    case: str, capability: str, method: str, call: Callable[[Any], Awaitable[Any]]
) -> None:
    agent = CapableAgent(without(FULL_AGENT_CAPS, capability))
    async with connect(agent, object()) as (_agent_conn, client_conn, wire):
        await initialize(client_conn)
        await trio.testing.wait_all_tasks_blocked()
        before = len(wire.lines)
        with pytest.raises(acp_trio.CapabilityError) as info:
            await call(client_conn.agent)
        await trio.testing.wait_all_tasks_blocked()
        assert len(wire.lines) == before
        assert agent.calls == []
        assert (info.value.method, info.value.capability, info.value.peer) == (method, capability, "agent")
        assert method in str(info.value) and capability in str(info.value)


@pytest.mark.parametrize(("case", "capability", "method", "call"), AGENT_CALLS, ids=[c[0] for c in AGENT_CALLS])
async def test_client_calls_the_agent_advertised_are_sent(
    case: str, capability: str, method: str, call: Callable[[Any], Awaitable[Any]]
) -> None:
    agent = CapableAgent(FULL_AGENT_CAPS)
    async with connect(agent, object()) as (_agent_conn, client_conn, wire):
        await initialize(client_conn)
        await call(client_conn.agent)
        assert agent.calls == [method]
        assert [m["method"] for m in wire.sent("client")] == ["initialize", method]


# -- extensions ----------------------------------------------------------------------------------


@attrs.define
class Echo:
    text: str
    count: int = 1


async def test_typed_extension_requests_work_in_both_directions() -> None:
    seen: list[Any] = []

    async def echo(params: Echo) -> Echo:
        seen.append(params)
        return Echo(text=params.text * 2, count=params.count + 1)

    async def read(params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        seen.append(params)
        return v1.ReadTextFileResponse(content=f"contents of {params.path}")

    async def plain(params: Any) -> Any:
        seen.append(params)
        return {"echo": params, "list": [1, None]}

    async with connect(SessionAgent(), object()) as (agent_conn, client_conn, wire):
        agent_conn.on_ext_request("_acme/echo", echo, params_type=Echo, result_type=Echo)
        agent_conn.on_ext_request("_acme/plain", plain)
        client_conn.on_ext_request(
            "_acme/read", read, params_type=v1.ReadTextFileRequest, result_type=v1.ReadTextFileResponse
        )
        client_conn.on_ext_request("_acme/plain", plain)
        await initialize(client_conn)

        result = await client_conn.ext_request(
            "_acme/echo", Echo(text="ab", count=2), params_type=Echo, result_type=Echo
        )
        assert result == Echo(text="abab", count=3)
        read_result = await agent_conn.ext_request(
            "_acme/read", read_request(), params_type=v1.ReadTextFileRequest, result_type=v1.ReadTextFileResponse
        )
        assert read_result == v1.ReadTextFileResponse(content="contents of /work/a.txt")
        assert await client_conn.ext_request("_acme/plain", {"k": "v"}) == {"echo": {"k": "v"}, "list": [1, None]}
        assert await agent_conn.ext_request("_acme/plain", [1, 2]) == {"echo": [1, 2], "list": [1, None]}

    assert seen == [Echo(text="ab", count=2), read_request(), {"k": "v"}, [1, 2]]
    requests = {m["method"]: m["params"] for m in wire.sent() if "method" in m}
    assert requests["_acme/echo"] == {"text": "ab", "count": 2}
    assert requests["_acme/read"] == {"sessionId": "s1", "path": "/work/a.txt"}


async def test_bad_params_for_a_typed_extension_request_are_answered_invalid_params() -> None:
    async def echo(params: Echo) -> Echo:
        raise AssertionError("not reached")

    async with connect(SessionAgent(), object()) as (agent_conn, client_conn, _wire):
        agent_conn.on_ext_request("_acme/echo", echo, params_type=Echo, result_type=Echo)
        await initialize(client_conn)
        with pytest.raises(acp_trio.RequestError) as info:
            await client_conn.ext_request("_acme/echo", {"text": 5})
        assert info.value.code == acp_trio.INVALID_PARAMS


async def test_extension_notifications_reach_their_handlers_in_both_directions() -> None:
    got: list[Any] = []
    both = trio.Semaphore(0)

    async def on_agent(params: Echo) -> None:
        got.append(("agent", params))
        both.release()

    async def on_client(params: Any) -> None:
        got.append(("client", params))
        both.release()

    async with connect(SessionAgent(), object()) as (agent_conn, client_conn, wire):
        agent_conn.on_ext_notification("_acme/ping", on_agent, params_type=Echo)
        client_conn.on_ext_notification("_zed.dev/file_opened", on_client)
        await initialize(client_conn)
        await client_conn.ext_notification("_acme/ping", Echo(text="p"), params_type=Echo)
        await agent_conn.ext_notification("_zed.dev/file_opened", {"path": "/work/a.rs"})
        with trio.fail_after(5):
            await both.acquire()
            await both.acquire()
    assert sorted(got, key=repr) == [("agent", Echo(text="p")), ("client", {"path": "/work/a.rs"})]
    notifications = [m for m in wire.sent() if m.get("method", "").startswith("_")]
    assert all("id" not in m for m in notifications)


async def test_unregistered_extension_requests_get_method_not_found_and_notifications_are_ignored() -> None:
    async with connect(SessionAgent(), object()) as (agent_conn, client_conn, wire):
        await initialize(client_conn)
        with pytest.raises(acp_trio.RequestError) as info:
            await client_conn.ext_request("_acme/unknown", {"a": 1})
        assert info.value.code == acp_trio.METHOD_NOT_FOUND == -32601
        with pytest.raises(acp_trio.RequestError) as info:
            await agent_conn.ext_request("_acme/unknown")
        assert info.value.code == -32601

        before = len(wire.sent("agent"))
        await client_conn.ext_notification("_acme/unknown_note", {"a": 1})
        await trio.testing.wait_all_tasks_blocked()
        assert len(wire.sent("agent")) == before  # nothing answered the notification
        response = await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        assert response.session_id == "s1"


@pytest.mark.parametrize(
    "method", ["_zed.dev/workspace/buffers", "_zed.dev/foo", "__double", "_Mixed.Case/with-dash:1"]
)
async def test_extension_method_names_are_kept_verbatim(method: str) -> None:
    got: list[Any] = []

    async def handler(params: Any) -> Any:
        got.append(params)
        return {"ok": True}

    async with connect(SessionAgent(), object()) as (agent_conn, client_conn, wire):
        agent_conn.on_ext_request(method, handler)
        client_conn.on_ext_notification(method, handler)
        await initialize(client_conn)
        assert await client_conn.ext_request(method, {"language": "rust"}) == {"ok": True}
        await agent_conn.ext_notification(method, {"n": 1})
        with trio.fail_after(5):
            while len(got) < 2:
                await trio.testing.wait_all_tasks_blocked()
    assert got == [{"language": "rust"}, {"n": 1}]
    expected = b'"method":' + orjson.dumps(method)
    assert sum(expected in line for line in wire.raw_sent()) == 2


async def test_meta_and_unknown_fields_pass_through_untouched_end_to_end() -> None:
    meta = {"traceparent": "00-80e1afed08e019fc1110464cfa66635c-7a085853722dc6d2-01", "zed.dev/debugMode": True}
    prompt_wire: Message = {
        "sessionId": "s1",
        "prompt": [{"type": "text", "text": "Hello", "_meta": {"k": [1, {"x": None}]}, "futureBlockField": 3}],
        "_meta": meta,
        "futureField": {"nested": ["a", 1.5, False]},
    }
    response_wire: Message = {"stopReason": "end_turn", "_meta": {"usage": {"tokens": 12}}, "futureResult": "x"}
    caps_wire: Message = {"loadSession": True, "_meta": {"zed.dev": {"workspace": True}}}
    ext_wire: Message = {"_meta": {"a": 1}, "anything": [{"b": None}]}
    seen: list[Any] = []

    class Agent(CapableAgent):
        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            seen.append(params)
            response: v1.PromptResponse = converter.structure(response_wire, v1.PromptResponse)
            return response

    async def ext(params: Any) -> Any:
        seen.append(params)
        return params

    async with connect(Agent(caps_wire), object()) as (agent_conn, client_conn, wire):
        agent_conn.on_ext_request("_acme/echo", ext)
        await initialize(client_conn)
        assert client_conn.agent_capabilities == caps_wire
        request = converter.structure(prompt_wire, v1.PromptRequest)
        response = await client_conn.agent.session_prompt(request)
        assert converter.unstructure(response) == response_wire
        assert response.meta == {"usage": {"tokens": 12}} and response.extra_fields == {"futureResult": "x"}
        assert await client_conn.ext_request("_acme/echo", ext_wire) == ext_wire

    received = seen[0]
    assert received.meta == meta and received.extra_fields == {"futureField": {"nested": ["a", 1.5, False]}}
    assert received.prompt[0].meta == {"k": [1, {"x": None}]}
    assert seen[1] == ext_wire
    by_method = {m["method"]: m for m in wire.sent("client") if "method" in m}
    assert by_method["session/prompt"]["params"] == prompt_wire
    assert by_method["_acme/echo"]["params"] == ext_wire
    results = [m["result"] for m in wire.sent("agent")]
    assert results == [{"protocolVersion": 1, "agentCapabilities": caps_wire}, response_wire, ext_wire]


async def test_extension_names_without_a_leading_underscore_are_refused() -> None:
    async def handler(params: Any) -> Any:
        return {}

    async with connect(SessionAgent(), object()) as (agent_conn, client_conn, wire):
        await initialize(client_conn)
        before = len(wire.lines)
        routes = [dict(agent_conn.connection.routes), dict(client_conn.connection.routes)]
        for conn in (agent_conn, client_conn):
            for name in ("acme/x", "zed.dev/foo", "session/prompt", ""):
                with pytest.raises(ValueError, match="_"):
                    conn.on_ext_request(name, handler)
                with pytest.raises(ValueError):
                    conn.on_ext_notification(name, handler)
                with pytest.raises(ValueError):
                    await conn.ext_request(name, {})
                with pytest.raises(ValueError):
                    await conn.ext_notification(name, {})
        await trio.testing.wait_all_tasks_blocked()
        assert len(wire.lines) == before
        assert routes == [agent_conn.connection.routes, client_conn.connection.routes]  # nothing registered


# -- ordering ------------------------------------------------------------------------------------


class TimedClient:
    """A client whose session/update handler takes as many seconds as the chunk's text says."""

    def __init__(self, durations: dict[str, float]) -> None:
        self.durations = durations
        self.events: list[tuple[float, str]] = []

    def record(self, event: str) -> None:
        self.events.append((trio.current_time(), event))

    async def session_update(self, params: v1.SessionNotification) -> None:
        text = params.update.content.text
        self.record(f"start {text}")
        await trio.sleep(self.durations[text])
        self.record(f"end {text}")

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        self.record("fs read")
        return v1.ReadTextFileResponse(content="data")


async def test_updates_of_one_session_are_handled_in_arrival_order_while_requests_run_concurrently(
    autojump_clock: trio.abc.Clock,
) -> None:
    client = TimedClient({"a": 3, "b": 1, "c": 2})
    async with connect(SessionAgent(), client) as (agent_conn, client_conn, _wire):
        await initialize(client_conn)
        start = trio.current_time()
        for text in "abc":
            await agent_conn.client.session_update(chunk("s1", text))
        response = await agent_conn.client.fs_read_text_file(read_request())
        client.record("agent got file")
        assert response.content == "data"
        with trio.fail_after(60):
            while len(client.events) < 8:
                await trio.sleep(0.5)

    times = {event: t - start for t, event in client.events}
    updates = [event for _t, event in client.events if event.startswith(("start", "end"))]
    assert updates == ["start a", "end a", "start b", "end b", "start c", "end c"]
    assert (times["end a"], times["end b"], times["end c"]) == pytest.approx((3, 4, 6))
    assert times["fs read"] == times["agent got file"] == 0  # not queued behind the slow update "a"


async def test_updates_of_different_sessions_are_handled_concurrently(autojump_clock: trio.abc.Clock) -> None:
    client = TimedClient({"a": 3, "b": 3})
    async with connect(SessionAgent(), client) as (agent_conn, client_conn, _wire):
        await initialize(client_conn)
        start = trio.current_time()
        await agent_conn.client.session_update(chunk("s1", "a"))
        await agent_conn.client.session_update(chunk("s2", "b"))
        with trio.fail_after(60):
            while len(client.events) < 4:
                await trio.sleep(0.5)
    assert {event: t - start for t, event in client.events} == {"start a": 0, "start b": 0, "end a": 3, "end b": 3}


async def test_a_permission_request_starts_after_its_sessions_earlier_updates_were_handled(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Client(TimedClient):
        async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
            self.record(f"permission {params.session_id}")
            return v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id="allow"))

    client = Client({"a": 3})
    async with connect(SessionAgent(), client) as (agent_conn, client_conn, _wire):
        await initialize(client_conn)
        start = trio.current_time()
        await agent_conn.client.session_update(chunk("s1", "a"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent_conn.client.session_request_permission, permission("s1"))
            nursery.start_soon(agent_conn.client.session_request_permission, permission("s2"))
            nursery.start_soon(agent_conn.client.fs_read_text_file, read_request("s1"))
    times = {event: t - start for t, event in client.events}
    assert times == pytest.approx({"start a": 0, "fs read": 0, "permission s2": 0, "end a": 3, "permission s1": 3})
    names = [event for _t, event in client.events]
    assert names.index("end a") < names.index("permission s1")


async def test_prompt_response_waits_for_the_handlers_of_earlier_updates(autojump_clock: trio.abc.Clock) -> None:
    client = TimedClient({"a": 2, "b": 5})

    class Agent(SessionAgent):
        def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
            super().__init__()
            self.conn = conn

        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            await self.conn.client.session_update(chunk(params.session_id, "a"))
            await self.conn.client.session_update(chunk(params.session_id, "b"))
            return v1.PromptResponse(stop_reason="end_turn")

    async with connect(Agent, client) as (_agent_conn, client_conn, wire):
        await initialize(client_conn)
        start = trio.current_time()
        response = await client_conn.agent.session_prompt(prompt())
        client.record("prompt returned")
    assert response.stop_reason == "end_turn"
    assert [event for _t, event in client.events] == ["start a", "end a", "start b", "end b", "prompt returned"]
    assert client.events[-1][0] - start == pytest.approx(7)
    # the agent answered at once; the client held the response back
    assert [m.get("method", "response") for m in wire.sent("agent")][-3:] == [
        "session/update",
        "session/update",
        "response",
    ]


# -- cancellation --------------------------------------------------------------------------------


async def test_session_cancel_ends_the_prompt_turn_with_stop_reason_cancelled_after_its_updates(
    autojump_clock: trio.abc.Clock,
) -> None:
    started = trio.Event()
    client = TimedClient({"before": 2, "after": 1})

    class Agent(SessionAgent):
        def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
            super().__init__()
            self.conn = conn

        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            await self.conn.client.session_update(chunk(params.session_id, "before"))
            started.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                # prompt-turn.mdx: updates after session/cancel are allowed before the response
                with trio.CancelScope(shield=True):
                    await self.conn.client.session_update(chunk(params.session_id, "after"))
                raise
            raise AssertionError("not reached")

    async with connect(Agent, client) as (_agent_conn, client_conn, wire):
        await initialize(client_conn)
        async with trio.open_nursery() as nursery:
            results: list[v1.PromptResponse] = []

            async def run_prompt() -> None:
                results.append(await client_conn.agent.session_prompt(prompt()))
                client.record("prompt returned")

            nursery.start_soon(run_prompt)
            with trio.fail_after(10):
                await started.wait()
            await client_conn.agent.session_cancel(v1.CancelNotification(session_id="s1"))

    assert results[0].stop_reason == "cancelled"
    assert [event for _t, event in client.events] == [
        "start before",
        "end before",
        "start after",
        "end after",
        "prompt returned",
    ]
    answer = wire.sent("agent")[-1]
    assert answer == {"jsonrpc": "2.0", "id": answer["id"], "result": {"stopReason": "cancelled"}}
    assert not any("error" in m for m in wire.sent())


async def test_a_session_cancel_read_with_its_prompt_in_one_read_still_cancels_the_turn(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The prompt's task has not started when the cancel is read: the turn must still be cancelled
    (found by acp_trio.check: a client that writes both at once got end_turn after the whole turn)."""
    client_stream, agent_stream = trio.testing.memory_stream_pair()

    class Agent(SessionAgent):
        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            await trio.sleep(60)
            return v1.PromptResponse(stop_reason="end_turn")

    async def read_until(buffer: bytearray, request_id: int) -> dict[str, Any]:
        while True:
            for line in bytes(buffer).split(b"\n")[:-1]:
                message = orjson.loads(line)
                if message.get("id") == request_id:
                    return dict(message)
            buffer += await client_stream.receive_some()

    with trio.fail_after(30):
        async with acp_trio.AgentSideConnection(Agent(), agent_stream, agent_stream):
            received = bytearray()
            init = {"protocolVersion": 1, "clientCapabilities": {}}
            await client_stream.send_all(
                orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}) + b"\n"
            )
            await read_until(received, 1)
            new = {"cwd": "/work", "mcpServers": []}
            await client_stream.send_all(
                orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": new}) + b"\n"
            )
            session_id = (await read_until(received, 2))["result"]["sessionId"]
            prompt_params = {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]}
            both = orjson.dumps({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt_params})
            both += b"\n" + orjson.dumps(
                {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}}
            )
            await client_stream.send_all(both + b"\n")  # one write: one read on the agent's side
            start = trio.current_time()
            answer = await read_until(received, 3)
            assert answer["result"] == {"stopReason": "cancelled"}
            assert trio.current_time() - start < 1


async def test_session_cancel_also_reaches_the_agents_own_handler_for_that_session_only(
    autojump_clock: trio.abc.Clock,
) -> None:
    cancelled: list[str] = []
    got: list[str] = []

    class Agent(SessionAgent):
        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            await trio.sleep(10)
            return v1.PromptResponse(stop_reason="end_turn")

        async def session_cancel(self, params: v1.CancelNotification) -> None:
            cancelled.append(params.session_id)

    async with connect(Agent(), object()) as (_agent_conn, client_conn, _wire):
        await initialize(client_conn)
        async with trio.open_nursery() as nursery:

            async def run_prompt(session_id: str) -> None:
                response = await client_conn.agent.session_prompt(prompt(session_id))
                got.append(f"{session_id} {response.stop_reason}")

            nursery.start_soon(run_prompt, "s1")
            nursery.start_soon(run_prompt, "s2")
            await trio.sleep(1)
            await client_conn.agent.session_cancel(v1.CancelNotification(session_id="s1"))
    assert cancelled == ["s1"]
    assert got == ["s1 cancelled", "s2 end_turn"]


async def test_permission_requests_of_a_cancelled_session_are_answered_cancelled(
    autojump_clock: trio.abc.Clock,
) -> None:
    outcomes: list[tuple[str, Any]] = []
    handler_calls: list[str] = []
    pending = {"s1": trio.Event(), "s2": trio.Event()}
    release_s2 = trio.Event()

    class Agent(SessionAgent):
        def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
            super().__init__()
            self.conn = conn

        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            sid = params.session_id
            # shielded, so the agent sees the client's answers even though its turn is cancelled
            with trio.CancelScope(shield=True):
                first = await self.conn.client.session_request_permission(permission(sid))
                outcomes.append((sid, first.outcome))
                if sid == "s1":
                    second = await self.conn.client.session_request_permission(permission(sid))
                    outcomes.append((sid, second.outcome))
            await trio.sleep(5)
            return v1.PromptResponse(stop_reason="end_turn")

    class Client:
        async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
            handler_calls.append(params.session_id)
            pending[params.session_id].set()
            if params.session_id == "s1":
                await trio.sleep_forever()
            await release_s2.wait()
            return v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id="allow"))

    stop_reasons: dict[str, str] = {}
    async with connect(Agent, Client()) as (_agent_conn, client_conn, wire):
        await initialize(client_conn)
        async with trio.open_nursery() as nursery:

            async def run_prompt(session_id: str) -> None:
                response = await client_conn.agent.session_prompt(prompt(session_id))
                stop_reasons[session_id] = response.stop_reason

            nursery.start_soon(run_prompt, "s1")
            nursery.start_soon(run_prompt, "s2")
            with trio.fail_after(10):
                await pending["s1"].wait()
                await pending["s2"].wait()
            await client_conn.agent.session_cancel(v1.CancelNotification(session_id="s1"))
            with trio.fail_after(10):
                while "s1" not in stop_reasons:
                    await trio.sleep(1)
            release_s2.set()

    assert outcomes == [
        ("s1", v1.CancelledRequestPermissionOutcome()),
        ("s1", v1.CancelledRequestPermissionOutcome()),
        ("s2", v1.SelectedRequestPermissionOutcome(option_id="allow")),
    ]
    assert sorted(handler_calls) == ["s1", "s2"]  # the second s1 request never reached the handler
    assert stop_reasons == {"s1": "cancelled", "s2": "end_turn"}
    client_results = [m["result"] for m in wire.sent("client") if "result" in m]
    assert client_results == [
        {"outcome": {"outcome": "cancelled"}},
        {"outcome": {"outcome": "cancelled"}},
        {"outcome": {"outcome": "selected", "optionId": "allow"}},
    ]


async def test_a_permission_handler_that_cancels_its_own_turn_is_answered_cancelled_and_the_connection_goes_on(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The client's handler sends session/cancel before its first await, so the cancellation reaches
    # its request while the reader is running it: the request answers "cancelled", and the reader
    # (whose task ran that step) goes on reading: the next turn works.
    outcomes: list[Any] = []

    class Agent(SessionAgent):
        def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
            super().__init__()
            self.conn = conn

        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            with trio.CancelScope(shield=True):
                answer = await self.conn.client.session_request_permission(permission(params.session_id))
            outcomes.append(answer.outcome)
            return v1.PromptResponse(stop_reason="end_turn")

    class Client:
        def __init__(self) -> None:
            self.conn: Any = None
            self.cancel_first = True

        async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
            if self.cancel_first:
                self.cancel_first = False
                await self.conn.agent.session_cancel(v1.CancelNotification(session_id=params.session_id))
            return v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id="allow"))

    client = Client()
    async with connect(Agent, client) as (_agent_conn, client_conn, _wire):
        client.conn = client_conn
        await initialize(client_conn)
        with trio.fail_after(10):
            first = await client_conn.agent.session_prompt(prompt("s1"))
            second = await client_conn.agent.session_prompt(prompt("s1"))
    assert outcomes == [v1.CancelledRequestPermissionOutcome(), v1.SelectedRequestPermissionOutcome(option_id="allow")]
    assert (first.stop_reason, second.stop_reason) == ("cancelled", "end_turn")  # the client cancelled the first


async def test_request_timeout_raises_and_cancels_the_peers_handler(autojump_clock: trio.abc.Clock) -> None:
    observed: list[str] = []

    class Client:
        async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
            observed.append("started")
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                observed.append("cancelled")
                raise
            raise AssertionError("not reached")

    async with connect(SessionAgent(), Client()) as (agent_conn, client_conn, wire):
        await initialize(client_conn)
        start = trio.current_time()
        with pytest.raises(acp_trio.RequestTimeout) as info:
            await agent_conn.client.fs_read_text_file(read_request(), timeout=5)
        assert trio.current_time() - start == pytest.approx(5)
        assert isinstance(info.value, TimeoutError)
        assert (info.value.method, info.value.timeout) == ("fs/read_text_file", 5)
        request_id = info.value.request_id
        with trio.fail_after(5):
            await wire.wait_sent(is_error_for("client", request_id, acp_trio.REQUEST_CANCELLED))
    assert observed == ["started", "cancelled"]
    assert wire.sent("agent")[-1] == {
        "jsonrpc": "2.0",
        "method": "$/cancel_request",
        "params": {"requestId": request_id},
    }
    assert acp_trio.REQUEST_CANCELLED == -32800


async def test_cancelling_a_prompt_call_cascades_across_the_wire(autojump_clock: trio.abc.Clock) -> None:
    """cancellation.mdx's cascading example, hop by hop."""
    events: list[str] = []
    client_blocked = trio.Event()

    class Agent(SessionAgent):
        def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
            super().__init__()
            self.conn = conn

        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            try:
                await self.conn.client.fs_read_text_file(read_request(params.session_id))
            except trio.Cancelled:
                events.append("agent prompt handler cancelled")
                raise
            raise AssertionError("not reached")

    class Client:
        async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
            client_blocked.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                events.append("client fs handler cancelled")
                raise
            raise AssertionError("not reached")

    async with connect(Agent, Client()) as (_agent_conn, client_conn, wire):
        await initialize(client_conn)
        async with trio.open_nursery() as nursery:
            caller = trio.CancelScope()

            async def call() -> None:
                with caller:
                    await client_conn.agent.session_prompt(prompt())
                events.append("caller cancelled")

            nursery.start_soon(call)
            with trio.fail_after(10):
                await client_blocked.wait()
            caller.cancel()

        sent = wire.sent_by()
        prompt_id = next(m["id"] for s, m in sent if m.get("method") == "session/prompt")
        read_id = next(m["id"] for s, m in sent if m.get("method") == "fs/read_text_file")
        with trio.fail_after(10):
            await wire.wait_sent(is_error_for("client", read_id, -32800))
            await wire.wait_sent(is_error_for("agent", prompt_id, -32800))

    def cancel_of(request_id: Any) -> Message:
        return {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": request_id}}

    hops = [(s, m) for s, m in wire.sent_by() if m.get("method") == "$/cancel_request" or "error" in m]
    client_cancel = hops.index(("client", cancel_of(prompt_id)))
    agent_cancel = hops.index(("agent", cancel_of(read_id)))
    client_error = next(i for i, (s, m) in enumerate(hops) if s == "client" and m.get("id") == read_id)
    agent_error = next(i for i, (s, m) in enumerate(hops) if s == "agent" and m.get("id") == prompt_id)
    assert client_cancel < agent_cancel < client_error
    assert client_cancel < agent_error
    assert len(hops) == 4
    assert events == ["caller cancelled", "agent prompt handler cancelled", "client fs handler cancelled"]


# -- variants and typed peers ----------------------------------------------------------------------


async def test_both_sides_work_with_the_v1_unstable_variant() -> None:
    u = v1_unstable
    updates: list[Any] = []

    class Agent:
        def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
            self.conn = conn

        async def session_new(self, params: Any) -> Any:
            return u.NewSessionResponse(session_id="s1")

        async def session_prompt(self, params: Any) -> Any:
            notification = u.SessionNotification(
                session_id=params.session_id,
                update=u.AgentMessageChunkSessionUpdate(content=u.TextContentBlock(text="hello")),
            )
            await self.conn.client.session_update(notification)
            return u.PromptResponse(stop_reason="end_turn")

    class Client:
        async def session_update(self, params: Any) -> None:
            updates.append(params)

    async with connect(Agent, Client(), variant=u) as (agent_conn, client_conn, _wire):
        assert isinstance(client_conn.agent, u.AgentPeer) and isinstance(agent_conn.client, u.ClientPeer)
        init = await client_conn.agent.initialize(u.InitializeRequest(protocol_version=1))
        assert isinstance(init, u.InitializeResponse) and init.protocol_version == 1
        session = await client_conn.agent.session_new(u.NewSessionRequest(cwd="/work", mcp_servers=[]))
        response = await client_conn.agent.session_prompt(
            u.PromptRequest(session_id=session.session_id, prompt=[u.TextContentBlock(text="hi")])
        )
    assert isinstance(response, u.PromptResponse) and response.stop_reason == "end_turn"
    assert len(updates) == 1 and isinstance(updates[0], u.SessionNotification)
    assert updates[0].update.content.text == "hello"


async def test_typed_peers_and_connection_properties_talk_to_the_other_side() -> None:
    class Client(FileClient):
        async def session_update(self, params: v1.SessionNotification) -> None:
            self.calls.append("session/update")

    client = Client()
    async with connect(SessionAgent(), client) as (agent_conn, client_conn, _wire):
        assert isinstance(client_conn.agent, v1.AgentPeer) and isinstance(agent_conn.client, v1.ClientPeer)
        await v1.AgentPeer(client_conn).initialize(
            v1.InitializeRequest(
                protocol_version=1, client_capabilities=converter.structure(FULL_CLIENT_CAPS, v1.ClientCapabilities)
            )
        )
        response = await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        assert response == v1.NewSessionResponse(session_id="s1")
        assert await v1.ClientPeer(agent_conn).fs_read_text_file(read_request()) == v1.ReadTextFileResponse(
            content="text"
        )
        assert await agent_conn.client.fs_read_text_file(read_request()) == v1.ReadTextFileResponse(content="text")
        await agent_conn.client.session_update(chunk("s1", "x"))
        with trio.fail_after(5):
            while "session/update" not in client.calls:
                await trio.testing.wait_all_tasks_blocked()
        assert agent_conn.client_capabilities == FULL_CLIENT_CAPS
    assert client.calls == ["fs/read_text_file", "fs/read_text_file", "session/update"]


# -- handler factories ---------------------------------------------------------------------------


class NoInitAgent:
    """A first agent as a new user writes it: no ``__init__``, so the runtime builds it without arguments."""

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        return v1.PromptResponse(stop_reason="end_turn")


class Prompting(Protocol):
    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse: ...


class NoInitProtocolAgent(NoInitAgent, Prompting):
    """The same, declared to follow a protocol: typing gives it an ``__init__(*args, **kwargs)``
    that inspect sees, but that refuses any argument."""


class NoInitV2Agent:
    async def session_new(self, params: Any) -> Any:
        from acp_schema import v2

        return v2.NewSessionResponse(session_id="s2")

    async def session_prompt(self, params: Any) -> Any:
        from acp_schema import v2

        return v2.PromptResponse(message_id="m1")


async def prompt_turn(client_conn: acp_trio.ClientSideConnection) -> v1.PromptResponse:
    session = await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
    response: v1.PromptResponse = await client_conn.agent.session_prompt(
        v1.PromptRequest(session_id=session.session_id, prompt=[v1.TextContentBlock(text="hi")])
    )
    return response


@pytest.mark.parametrize("agent_class", [NoInitAgent, NoInitProtocolAgent])
async def test_an_agent_class_without_init_is_built_without_arguments_and_serves_a_prompt_turn(
    agent_class: type[NoInitAgent],
) -> None:
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(agent_class, object()) as (agent_conn, client_conn):
            await initialize(client_conn)
            response = await prompt_turn(client_conn)
    assert response.stop_reason == "end_turn"
    assert type(agent_conn.handler) is agent_class


@pytest.mark.parametrize("version", [1, 2])
async def test_a_version_mapping_of_agent_classes_without_init_serves_the_negotiated_one(version: int) -> None:
    from acp_schema import v2

    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair({v1: NoInitAgent, v2: NoInitV2Agent}, {v1: object(), v2: object()}) as (
            agent_conn,
            client_conn,
        ):
            if version == 1:
                await client_conn.initialize(v1.InitializeRequest(protocol_version=1))
                assert (await prompt_turn(client_conn)).stop_reason == "end_turn"
            else:
                await client_conn.initialize(
                    v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="t", version="1"))
                )
                session = await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
                receipt = await client_conn.agent.session_prompt(
                    v2.PromptRequest(session_id=session.session_id, prompt=[v2.TextContentBlock(text="hi")])
                )
                assert (session.session_id, receipt.message_id) == ("s2", "m1")
    assert agent_conn.protocol_version == version
    assert type(agent_conn.handler) is (NoInitAgent if version == 1 else NoInitV2Agent)


async def test_a_class_taking_the_connection_gets_it_and_a_client_class_without_init_gets_none() -> None:
    received: list[v1.SessionNotification] = []

    class Agent:
        def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
            self.conn = conn

        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            return v1.NewSessionResponse(session_id="s1")

        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            await self.conn.client.session_update(chunk(params.session_id, "hello"))
            return v1.PromptResponse(stop_reason="end_turn")

    class Client:
        async def session_update(self, params: v1.SessionNotification) -> None:
            received.append(params)

    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (agent_conn, client_conn):
            await initialize(client_conn)
            assert (await prompt_turn(client_conn)).stop_reason == "end_turn"
    assert agent_conn.handler.conn is agent_conn
    assert type(client_conn.handler) is Client
    assert [update.update.content.text for update in received] == ["hello"]


async def test_a_factory_taking_more_than_the_connection_fails_at_once_saying_what_to_write() -> None:
    from acp_schema import v2

    class Agent:
        def __init__(self, conn: Any, model: str) -> None:
            self.model = model

    stream, _other = trio.testing.memory_stream_pair()
    for agent in (Agent, {v1: Agent, v2: NoInitV2Agent}):
        with pytest.raises(TypeError) as info:
            acp_trio.AgentSideConnection(agent, stream, stream)
        assert str(info.value) == (
            "cannot build the agent from Agent(conn: 'Any', model: 'str'): the runtime calls an agent factory "
            "with the connection (one positional argument), or with no argument when it takes none; give it "
            "__init__(self, conn) (or no required argument), bind the others with functools.partial(Agent, ...), "
            "or pass an agent object"
        )


async def test_an_agent_subclassing_the_agent_protocol_serves_only_what_it_implements() -> None:
    """``class MyAgent(v1.Agent)`` inherits a stub (returning ``None``) for every method of the
    protocol: those count as not implemented, so ``initialize`` gets the runtime's default answer
    (no ``loadSession``) and an unimplemented method -32601, not -32603."""

    class MyAgent(v1.Agent):
        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            return v1.NewSessionResponse(session_id="s1")

        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            return v1.PromptResponse(stop_reason="end_turn")

    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(MyAgent, object()) as (_agent_conn, client_conn):
            init = await initialize(client_conn)
            assert (await prompt_turn(client_conn)).stop_reason == "end_turn"
            with pytest.raises(acp_trio.RequestError) as info:
                await client_conn.connection.request("session/set_mode", {"sessionId": "s1", "modeId": "m"})
    assert init.agent_info is not None and init.agent_info.name == "MyAgent"
    assert converter.unstructure(init.agent_capabilities) == {}
    assert info.value.code == -32601

"""Protocol versions side by side: negotiation per connection, every pair of v1-only, v2-only and both.

Spec: ``docs/protocol/v2/migration.mdx`` ("Version negotiation", "Supporting v1 and v2 side by
side"), ``docs/protocol/v2/initialization.mdx``, ``prompt-lifecycle.mdx`` (the receipt and
``state_update``).  An agent or a client is given one handler per variant
(``{v1: V1Agent, v2: V2Agent}``); after ``initialize`` the connection speaks one version only.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import orjson
import pytest
import trio
import trio.testing

import acp_trio
from acp_schema import v1, v2

DEADLINE = 10


class V1Agent:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s-v1")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text="hello from v1"))
        await self.conn.client.session_update(v1.SessionNotification(session_id=params.session_id, update=chunk))
        return v1.PromptResponse(stop_reason="end_turn")


class V2Agent:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.release = trio.Event()
        self.wait_for_release = False

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id="s-v2")

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        session_id = params.session_id

        async def turn() -> str:
            chunk = v2.AgentMessageChunkSessionUpdate(
                message_id="m1", content=v2.TextContentBlock(text="hello from v2")
            )
            await self.conn.client.session_update(v2.UpdateSessionNotification(session_id=session_id, update=chunk))
            if self.wait_for_release:
                await self.release.wait()
            return "end_turn"

        self.conn.start_turn(session_id, turn)
        return v2.PromptResponse(message_id="u1")


class Client:
    """One client handler per version; records what reached it."""

    def __init__(self, conn: acp_trio.ClientSideConnection) -> None:
        self.conn = conn
        self.updates: list[Any] = []
        self.idle = trio.Event()

    async def session_update(self, params: Any) -> None:
        self.updates.append(params.update)
        if getattr(params.update, "state", None) == "idle":
            self.idle.set()


def agent_handlers(versions: tuple[int, ...]) -> dict[ModuleType, Any]:
    return {v1: V1Agent, v2: V2Agent} if versions == (1, 2) else ({v1: V1Agent} if versions == (1,) else {v2: V2Agent})


def client_handlers(versions: tuple[int, ...]) -> dict[ModuleType, Any]:
    return {module: Client for module in (v1, v2) if module.PROTOCOL_VERSION in versions}


def init_requests(versions: tuple[int, ...]) -> list[Any]:
    requests: list[Any] = []
    if 2 in versions:
        requests.append(v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="test", version="1")))
    if 1 in versions:
        requests.append(
            v1.InitializeRequest(protocol_version=1, client_info=v1.Implementation(name="test-v1", version="1"))
        )
    return requests


PAIRS = [(a, c) for a in ((1,), (2,), (1, 2)) for c in ((1,), (2,), (1, 2))]


def expected_version(agent: tuple[int, ...], client: tuple[int, ...]) -> int | None:
    requested = max(client)
    answered = requested if requested in agent else max(agent)
    return answered if answered in client else None


@pytest.mark.parametrize(("agent_versions", "client_versions"), PAIRS, ids=[f"agent{a}-client{c}" for a, c in PAIRS])
async def test_every_pair_negotiates_one_version_or_refuses_clearly(
    agent_versions: tuple[int, ...], client_versions: tuple[int, ...]
) -> None:
    expected = expected_version(agent_versions, client_versions)
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(agent_handlers(agent_versions), client_handlers(client_versions)) as (
            agent_conn,
            client_conn,
        ):
            assert agent_conn.supported_versions == agent_versions
            assert client_conn.supported_versions == client_versions
            if expected is None:
                with pytest.raises(acp_trio.ProtocolVersionError) as info:
                    await client_conn.initialize(*init_requests(client_versions))
                assert info.value.answered == max(agent_versions)
                assert info.value.supported == client_versions
                assert "closing the connection" in str(info.value)
                assert client_conn.closed
                return
            response = await client_conn.initialize(*init_requests(client_versions))
            variant = v1 if expected == 1 else v2
            assert isinstance(response, variant.InitializeResponse)
            assert response.protocol_version == expected
            for conn in (agent_conn, client_conn):
                assert conn.protocol_version == expected and conn.variant is variant
            # the agent read the info meant for its version from the merged request
            expected_info = "test" if expected == 2 else ("test-v1" if 1 in client_versions else None)
            assert (agent_conn.client_info or {}).get("name") == expected_info
            agent = client_conn.agent
            assert isinstance(agent, variant.AgentPeer)
            if expected == 1:
                session = await agent.session_new(v1.NewSessionRequest(cwd="/tmp", mcp_servers=[]))
                result = await agent.session_prompt(
                    v1.PromptRequest(session_id=session.session_id, prompt=[v1.TextContentBlock(text="hi")])
                )
                assert result.stop_reason == "end_turn"
            else:
                session = await agent.session_new(v2.NewSessionRequest(cwd="/tmp"))
                receipt = await agent.session_prompt(
                    v2.PromptRequest(session_id=session.session_id, prompt=[v2.TextContentBlock(text="hi")])
                )
                assert receipt.message_id == "u1"
                await client_conn.handlers[2].idle.wait()
            used: Client = client_conn.handlers[expected]
            assert client_conn.handler is used
            texts = [u.content.text for u in used.updates if hasattr(u, "content")]
            assert texts == [f"hello from v{expected}"]
            for version, handler in client_conn.handlers.items():
                if version != expected:
                    assert handler.updates == []  # the other version's handler saw nothing


async def test_v2_turn_reports_running_then_idle_and_session_cancel_ends_it_cancelled() -> None:
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair({v2: V2Agent}, {v2: Client}) as (agent_conn, client_conn):
            await client_conn.initialize(*init_requests((2,)))
            agent: V2Agent = agent_conn.handler
            client: Client = client_conn.handler
            agent.wait_for_release = True
            session = await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))
            await client_conn.agent.session_prompt(
                v2.PromptRequest(session_id=session.session_id, prompt=[v2.TextContentBlock(text="hi")])
            )
            await trio.testing.wait_all_tasks_blocked()
            assert [getattr(u, "state", None) for u in client.updates] == ["running", None]
            await client_conn.agent.session_cancel(v2.CancelSessionNotification(session_id=session.session_id))
            await client.idle.wait()
            idle = client.updates[-1]
            assert (idle.state, idle.stop_reason) == ("idle", "cancelled")


async def test_v2_turn_that_raises_ends_idle_with_error() -> None:
    class Failing(V2Agent):
        async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
            async def turn() -> str:
                raise RuntimeError("model crashed")

            self.conn.start_turn(params.session_id, turn)
            return v2.PromptResponse(message_id="u1")

    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair({v2: Failing}, {v2: Client}) as (_agent_conn, client_conn):
            await client_conn.initialize(*init_requests((2,)))
            session = await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))
            await client_conn.agent.session_prompt(
                v2.PromptRequest(session_id=session.session_id, prompt=[v2.TextContentBlock(text="hi")])
            )
            client: Client = client_conn.handler
            await client.idle.wait()
            idle = client.updates[-1]
            assert idle.stop_reason == "error"
            assert (idle.error.code, idle.error.message) == (acp_trio.INTERNAL_ERROR, "Internal error")


async def test_start_turn_is_refused_on_a_v1_connection() -> None:
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(V1Agent, Client) as (agent_conn, client_conn):
            await client_conn.initialize(*init_requests((1,)))

            async def turn() -> None:
                pass

            with pytest.raises(RuntimeError, match="protocol version 2"):
                agent_conn.start_turn("s", turn)


async def test_v1_only_methods_are_refused_on_a_v2_connection_without_sending() -> None:
    lines: list[bytes] = []
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(
            {v1: V1Agent, v2: V2Agent}, {v1: Client, v2: Client}, tap=lambda d, line: lines.append(line)
        ) as (agent_conn, client_conn):
            await client_conn.initialize(*init_requests((1, 2)))
            assert client_conn.protocol_version == 2
            sent = len(lines)
            with pytest.raises(acp_trio.CapabilityError, match="session/load"):
                await v1.AgentPeer(client_conn).session_load(
                    v1.LoadSessionRequest(session_id="s", cwd="/tmp", mcp_servers=[])
                )
            with pytest.raises(acp_trio.CapabilityError, match="fs/read_text_file"):
                await v1.ClientPeer(agent_conn).fs_read_text_file(v1.ReadTextFileRequest(session_id="s", path="/a"))
            assert len(lines) == sent


async def test_a_mapping_with_two_variants_of_one_version_is_refused() -> None:
    from acp_schema import v1_unstable

    send, receive = trio.testing.memory_stream_pair()
    with pytest.raises(ValueError, match="protocol version 1"):
        acp_trio.AgentSideConnection({v1: V1Agent, v1_unstable: V1Agent}, send, receive)
    with pytest.raises(TypeError, match="not both"):
        acp_trio.AgentSideConnection({v1: V1Agent}, send, receive, variant=v1)


async def test_a_v1_client_gets_a_v2_only_agents_answer_and_refuses() -> None:
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair({v2: V2Agent}, {v1: Client}) as (agent_conn, client_conn):
            with pytest.raises(acp_trio.ProtocolVersionError) as info:
                await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
            assert (info.value.requested, info.value.answered) == (1, 2)
            # the v2 agent answered with its version although the v1 request had no "info"
            assert agent_conn.protocol_version == 2


class SlowAcceptingAgent(V2Agent):
    """Waits for ``accept`` before starting the turn; the turn waits forever (until cancelled)."""

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        super().__init__(conn)
        self.accept = trio.Event()
        self.accepting = trio.Event()

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        self.accepting.set()
        await self.accept.wait()

        async def turn() -> str:
            await trio.sleep_forever()
            return "end_turn"

        self.conn.start_turn(params.session_id, turn)
        return v2.PromptResponse(message_id="u1")

    async def session_close(self, params: v2.CloseSessionRequest) -> v2.CloseSessionResponse:
        return v2.CloseSessionResponse()


async def test_v2_session_cancel_read_before_the_turn_starts_still_cancels_it() -> None:
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair({v2: SlowAcceptingAgent}, {v2: Client}) as (agent_conn, client_conn):
            await client_conn.initialize(*init_requests((2,)))
            agent: SlowAcceptingAgent = agent_conn.handler
            client: Client = client_conn.handler
            session = await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))
            prompt = v2.PromptRequest(session_id=session.session_id, prompt=[v2.TextContentBlock(text="hi")])
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client_conn.agent.session_prompt, prompt)
                await agent.accepting.wait()
                await client_conn.agent.session_cancel(v2.CancelSessionNotification(session_id=session.session_id))
                await trio.testing.wait_all_tasks_blocked()
                agent.accept.set()  # the handler now starts the turn: the cancel read before reaches it
            await client.idle.wait()
            assert [(u.state, getattr(u, "stop_reason", None)) for u in client.updates] == [
                ("running", None),
                ("idle", "cancelled"),
            ]
            # a later prompt is not affected by the old cancel
            agent.accept = trio.Event()
            agent.accept.set()
            client.idle = trio.Event()
            await client_conn.agent.session_prompt(prompt)
            await trio.testing.wait_all_tasks_blocked()
            assert client.updates[-1].state == "running"


async def test_v2_session_close_cancels_the_running_turn() -> None:
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair({v2: SlowAcceptingAgent}, {v2: Client}) as (agent_conn, client_conn):
            await client_conn.initialize(*init_requests((2,)))
            agent: SlowAcceptingAgent = agent_conn.handler
            agent.accept.set()
            client: Client = client_conn.handler
            session = await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))
            await client_conn.agent.session_prompt(
                v2.PromptRequest(session_id=session.session_id, prompt=[v2.TextContentBlock(text="hi")])
            )
            await trio.testing.wait_all_tasks_blocked()
            assert not client.idle.is_set()
            await client_conn.agent.session_close(v2.CloseSessionRequest(session_id=session.session_id))
            await client.idle.wait()
            assert client.updates[-1].stop_reason == "cancelled"
            assert session.session_id not in agent_conn.sessions


class BlockingPermissionClient(Client):
    async def session_request_permission(self, params: v2.RequestPermissionRequest) -> v2.RequestPermissionResponse:
        await trio.sleep_forever()
        raise AssertionError("unreachable")


async def test_v2_permission_request_withdrawn_by_the_agent_is_answered_with_the_cancelled_outcome(
    autojump_clock: trio.abc.Clock,
) -> None:
    lines: list[tuple[str, bytes]] = []
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(
            {v2: V2Agent}, {v2: BlockingPermissionClient}, tap=lambda d, line: lines.append((d, line))
        ) as (agent_conn, client_conn):
            await client_conn.initialize(*init_requests((2,)))
            option = v2.PermissionOption(option_id="allow", name="Allow", kind="allow_once")
            request = v2.RequestPermissionRequest(session_id="s", title="Run it?", options=[option])
            with pytest.raises(acp_trio.RequestTimeout):
                await agent_conn.client.session_request_permission(request, timeout=5)  # sends $/cancel_request
            await trio.testing.wait_all_tasks_blocked()
    answers = [orjson.loads(line) for d, line in lines if d == "out" and b'"outcome"' in line]
    assert answers and answers[-1]["result"] == {"outcome": {"outcome": "cancelled"}}


async def test_v2_agent_advertising_auth_methods_without_auth_handlers_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class AuthAgent(V2Agent):
        async def initialize(self, params: v2.InitializeRequest) -> v2.InitializeResponse:
            method = acp_trio.converter.structure(
                {"type": "agent", "methodId": "key", "name": "API key"}, v2.AuthMethod
            )
            return v2.InitializeResponse(
                protocol_version=2, info=v2.Implementation(name="a", version="1"), auth_methods=[method]
            )

        async def auth_login(self, params: Any) -> Any:
            raise AssertionError("not called")

    with trio.fail_after(DEADLINE), caplog.at_level("WARNING", logger="acp_trio"):
        async with acp_trio.open_memory_pair({v2: AuthAgent}, {v2: Client}) as (_agent_conn, client_conn):
            await client_conn.initialize(*init_requests((2,)))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("authMethods" in w and "auth_logout" in w and "auth_login" not in w for w in warnings), warnings


# -- naming the agent in the default initialize answer (initialization.mdx "Implementation Information")

NOTES_INFO = {"name": "notes-agent", "title": "Notes", "version": "0.1.0"}
AGENT_INFOS: dict[str, Any] = {
    "v1-class": v1.Implementation(name="notes-agent", title="Notes", version="0.1.0"),
    "v2-class": v2.Implementation(name="notes-agent", title="Notes", version="0.1.0"),
    "wire-json": dict(NOTES_INFO),
}


def named_agents(info: Any) -> tuple[type, type]:
    """A v1 and a v2 agent without ``initialize``, named by ``agent_info = info`` (none when ``info`` is None)."""

    class NotesV1(V1Agent):
        pass

    class NotesV2(V2Agent):
        pass

    if info is not None:
        NotesV1.agent_info = NotesV2.agent_info = info  # type: ignore[attr-defined]
    return NotesV1, NotesV2


def agent_as(given: str, v1_agent: type, v2_agent: type, version: int) -> Any:
    """The agent of protocol ``version`` given as a class, a factory function, or a ``{variant: agent}`` mapping."""
    one = v1_agent if version == 1 else v2_agent
    if given == "class":
        return one if version == 1 else {v2: one}
    if given == "factory":
        factory = lambda conn: one(conn)  # noqa: E731
        return factory if version == 1 else {v2: factory}
    return {v1: v1_agent, v2: v2_agent}


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("given", ["class", "factory", "mapping"])
@pytest.mark.parametrize("info", [*AGENT_INFOS, None])
async def test_the_default_initialize_answer_names_the_agent_from_agent_info_or_its_class(
    version: int, given: str, info: str | None
) -> None:
    v1_agent, v2_agent = named_agents(None if info is None else AGENT_INFOS[info])
    expected = NOTES_INFO if info is not None else {"name": f"NotesV{version}", "version": "0"}
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(agent_as(given, v1_agent, v2_agent, version), client_handlers((1, 2))) as (
            _agent_conn,
            client_conn,
        ):
            response = await client_conn.initialize(*init_requests((version,)))
    assert response.protocol_version == version
    wire = client_conn.initialize_response
    if version == 1:
        assert wire["agentInfo"] == expected and "info" not in wire
        assert response.agent_info == v1.Implementation(**expected)
    else:
        assert wire["info"] == expected and "agentInfo" not in wire
        assert response.info == v2.Implementation(**expected)


@pytest.mark.parametrize(
    "info", [{"name": "notes-agent"}, "notes-agent", v1.AgentCapabilities(), {"name": 1, "version": "1"}]
)
async def test_a_malformed_agent_info_fails_when_the_agent_is_built_saying_what_to_give(info: Any) -> None:
    v1_agent, _ = named_agents(info)
    with pytest.raises(TypeError) as raised:
        async with acp_trio.open_memory_pair(v1_agent, Client):
            pass
    message = str(raised.value)
    assert "NotesV1.agent_info" in message and "Implementation" in message and repr(info) in message


async def test_an_agent_with_its_own_initialize_answers_as_it_says_even_with_agent_info() -> None:
    class OwnAnswer(V1Agent):
        agent_info = "not used"  # only the default answer reads it

        async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
            return v1.InitializeResponse(protocol_version=1)

    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(OwnAnswer, Client) as (_agent_conn, client_conn):
            await client_conn.initialize(*init_requests((1,)))
    assert client_conn.initialize_response == {"protocolVersion": 1}

"""MCP over ACP (``acp_trio.mcp_over_acp``, unstable), in memory: our agent and our client.

Sources: the unstable schemas' ``McpServerAcp``, ``MessageMcpRequest``, ``MessageMcpResponse``,
``McpError``, ``MessageMcpNotification``, ``McpCapabilities.acp`` (v1) and ``session.mcp.acp``
(v2); ``docs/rfds/mcp-over-acp.mdx``.  The client serves an MCP server written with the official
``mcp`` SDK (``MCPServer``: tools, a resource, a prompt, a slow tool, a tool that reports
progress); the agent opens it in ``session/new`` with ``open_mcp_servers`` and gets a live
``mcp.ClientSession`` whose messages travel as ``mcp/message``.  A tap records the ACP wire, so
the tests see what was sent.  Every wait is bounded by ``trio.fail_after``; the slow tool waits
on an event, and time-outs run on the autojump clock.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import pytest
import trio
import trio.testing

pytest.importorskip("mcp")

import mcp
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

import acp_trio
from acp_schema import v1, v1_unstable, v2_unstable
from acp_trio import CapabilityError, RequestError, StandardClient
from acp_trio._capabilities import check_agent_call, check_agent_call_v2
from acp_trio.mcp import McpServers, open_mcp_servers
from acp_trio.mcp_over_acp import (
    RESOURCE_LIMIT_EXCEEDED,
    SERVER_UNAVAILABLE,
    McpServerRegistration,
    open_acp_transport,
    serve_mcp_server,
)

DEADLINE = 10  # seconds: everything is in memory


def make_server(release: trio.Event | None = None, entered: trio.Event | None = None) -> MCPServer:
    """Tools ``add``, ``fail``, ``slow`` (reports progress ``started``, waits for ``release``) and ``count``
    (reports progress three times), the resource ``notes://today``, the prompt ``greet``."""
    server = MCPServer("client-tools", instructions="tools the client serves over ACP")
    outcome: dict[str, str] = {}
    slow_ended = trio.Event()

    # async functions: the SDK runs plain functions in worker threads, these stay on the trio loop
    @server.tool()
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def fail() -> str:
        raise ToolError("this tool always fails")

    @server.tool()
    async def slow(ctx: Context) -> str:
        await ctx.report_progress(0, None, "started")  # sent only when the request has a progressToken
        if entered is not None:
            entered.set()
        try:
            if release is not None:
                await release.wait()
        except BaseException:
            outcome["slow"] = "cancelled"
            slow_ended.set()
            raise
        outcome["slow"] = "finished"
        slow_ended.set()
        return "done"

    @server.tool()
    async def count(ctx: Context) -> str:
        for step in (1, 2, 3):
            await ctx.report_progress(step, 3, f"step {step}")
        return "counted"

    @server.resource("notes://today", mime_type="text/plain")
    async def today() -> str:
        return "buy milk"

    @server.prompt()
    async def greet(name: str) -> str:
        return f"Say hello to {name}."

    server.outcome = outcome  # type: ignore[attr-defined]
    server.slow_ended = slow_ended  # type: ignore[attr-defined]
    return server


class Agent:
    """Advertises the acp transport; opens each session's MCP servers in ``session/new``."""

    advertise = True

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.mcp: dict[str, McpServers] = {}

    async def initialize(self, params: Any) -> Any:
        acp = self.conn.variant
        if acp is v2_unstable:
            mcp_caps = acp.McpCapabilities(acp=acp.McpAcpCapabilities() if self.advertise else None)
            caps = acp.AgentCapabilities(session=acp.SessionCapabilities(mcp=mcp_caps))  # close is baseline in v2
            return acp.InitializeResponse(
                protocol_version=2, info=acp.Implementation(name="agent", version="1"), capabilities=caps
            )
        mcp_caps = acp.McpCapabilities(acp=self.advertise) if acp is v1_unstable else acp.McpCapabilities()
        caps = acp.AgentCapabilities(
            mcp_capabilities=mcp_caps,
            session_capabilities=acp.SessionCapabilities(close=acp.SessionCloseCapabilities()),
        )
        return acp.InitializeResponse(protocol_version=1, agent_capabilities=caps)

    async def session_new(self, params: Any) -> Any:
        session_id = f"s{len(self.mcp) + 1}"
        self.mcp[session_id] = await open_mcp_servers(self.conn, session_id, params.mcp_servers or [], cwd=params.cwd)
        return self.conn.variant.NewSessionResponse(session_id=session_id)

    async def session_close(self, params: Any) -> Any:
        return self.conn.variant.CloseSessionResponse()


class Client:
    def __init__(self, conn: acp_trio.ClientSideConnection) -> None:
        self.conn = conn


class Wire:
    """The client's tap: every ACP message, decoded, as ``(direction, message)`` (``"out"``: the client sent it)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, direction: str, line: bytes) -> None:
        self.lines.append((direction, json.loads(line)))

    def methods(self, method: str) -> list[dict[str, Any]]:
        return [msg for _, msg in self.lines if msg.get("method") == method]


@asynccontextmanager
async def pair(
    acp: ModuleType, wire: Wire | None = None, agent: Any = Agent, client: Any = Client
) -> AsyncIterator[tuple[acp_trio.AgentSideConnection, acp_trio.ClientSideConnection]]:
    """An agent and a client in memory (as ``open_memory_pair``), the tap on the client only."""
    agent_stream, client_stream = trio.testing.memory_stream_pair()
    agent_conn = acp_trio.AgentSideConnection(agent, agent_stream, agent_stream, variant=acp)
    client_conn = acp_trio.ClientSideConnection(client, client_stream, client_stream, variant=acp, tap=wire)
    async with agent_conn, client_conn:
        yield agent_conn, client_conn


async def initialize(conn: acp_trio.ClientSideConnection, acp: ModuleType) -> None:
    if acp is v2_unstable:
        await conn.agent.initialize(
            acp.InitializeRequest(
                protocol_version=2,
                info=acp.Implementation(name="client", version="1"),
                capabilities=acp.ClientCapabilities(),
            )
        )
    else:
        await conn.agent.initialize(acp.InitializeRequest(protocol_version=1))


async def new_session(conn: acp_trio.ClientSideConnection, acp: ModuleType, servers: list[Any]) -> str:
    response = await conn.agent.session_new(acp.NewSessionRequest(cwd="/tmp", mcp_servers=servers))
    session_id: str = response.session_id
    return session_id


def text_of(result: mcp.types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp.types.TextContent), result
    return block.text


VARIANTS = pytest.mark.parametrize("acp", [v1_unstable, v2_unstable], ids=["v1_unstable", "v2_unstable"])


# -- the round trip ---------------------------------------------------------------------------------------------


@VARIANTS
async def test_an_agent_lists_and_calls_the_tools_of_a_server_the_client_serves_over_acp(acp: ModuleType) -> None:
    wire = Wire()
    with trio.fail_after(DEADLINE):
        async with pair(acp, wire) as (agent_conn, client_conn):
            await initialize(client_conn, acp)
            registration = serve_mcp_server(client_conn, make_server(), name="tools")
            assert isinstance(registration.declaration, acp.AcpMcpServer)
            session_id = await new_session(client_conn, acp, [registration.declaration])
            servers = agent_conn.handler.mcp[session_id]
            assert servers.errors == {}
            tools = servers["tools"]
            assert tools.transport == "acp" and tools.ok
            assert repr(tools) == "<McpServerConnection 'tools' (acp) connected>"
            assert tools.discover_result is not None and tools.initialize_result is None
            assert tools.discover_result.instructions == "tools the client serves over ACP"
            session = servers.sessions["tools"]
            assert session.server_info is not None and session.server_info.name == "client-tools"

            listed = await session.list_tools()
            assert {tool.name for tool in listed.tools} == {"add", "fail", "slow", "count"}
            assert text_of(await session.call_tool("add", {"a": 2, "b": 3})) == "5"

    # on the wire: session/new declared the server; every MCP request was an mcp/message request to the client
    (new,) = wire.methods("session/new")
    assert new["params"]["mcpServers"] == [{"type": "acp", "name": "tools", "serverId": registration.server_id}]
    requests = [msg for msg in wire.methods("mcp/message") if "id" in msg]
    assert [msg["params"]["method"] for msg in requests] == ["server/discover", "tools/list", "tools/call"]
    for msg in requests:
        params = msg["params"]
        assert params["serverId"] == registration.server_id
        assert params["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert len({msg["params"]["requestId"] for msg in requests}) == 3
    answers = {msg["id"]: msg for direction, msg in wire.lines if direction == "out" and "result" in msg}
    call = answers[requests[-1]["id"]]
    assert call["result"]["result"]["content"][0]["text"] == "5"  # the carrier: {"result": <MCP result>}


async def test_resources_prompts_and_errors_come_back_as_mcp_answers() -> None:
    with trio.fail_after(DEADLINE):
        async with pair(v1_unstable) as (agent_conn, client_conn):
            await initialize(client_conn, v1_unstable)
            registration = serve_mcp_server(client_conn, make_server(), name="tools")
            session_id = await new_session(client_conn, v1_unstable, [registration.declaration])
            session = agent_conn.handler.mcp[session_id].sessions["tools"]

            resources = await session.list_resources()
            assert [str(r.uri) for r in resources.resources] == ["notes://today"]
            read = await session.read_resource("notes://today")
            content = read.contents[0]
            assert isinstance(content, mcp.types.TextResourceContents) and content.text == "buy milk"
            prompt = await session.get_prompt("greet", {"name": "Ada"})
            message = prompt.messages[0].content
            assert isinstance(message, mcp.types.TextContent) and message.text == "Say hello to Ada."

            # a tool that raises: an MCP result with isError, as over any transport
            failed = await session.call_tool("fail", {})
            assert failed.is_error and "this tool always fails" in text_of(failed)
            # an MCP error (unknown resource) travels in the carrier's error and is raised by the session
            with pytest.raises(mcp.MCPError) as unknown:
                await session.read_resource("notes://missing")
            assert unknown.value.error.code == -32602  # what the MCP SDK answers for an unknown resource


async def test_progress_notifications_reach_the_request_they_belong_to_before_its_answer() -> None:
    wire = Wire()
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, total, message))

    with trio.fail_after(DEADLINE):
        async with pair(v1_unstable, wire) as (agent_conn, client_conn):
            await initialize(client_conn, v1_unstable)
            registration = serve_mcp_server(client_conn, make_server(), name="tools")
            session_id = await new_session(client_conn, v1_unstable, [registration.declaration])
            session = agent_conn.handler.mcp[session_id].sessions["tools"]
            result = await session.call_tool("count", {}, progress_callback=progress)
            assert text_of(result) == "counted"
            assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]

    notes = [msg for msg in wire.methods("mcp/message") if "id" not in msg]
    call = next(m for m in wire.methods("mcp/message") if "id" in m and m["params"]["method"] == "tools/call")
    assert [n["params"]["method"] for n in notes] == ["notifications/progress"] * 3
    assert {n["params"]["requestId"] for n in notes} == {call["params"]["requestId"]}
    assert {n["params"]["serverId"] for n in notes} == {registration.server_id}
    sent = [msg for direction, msg in wire.lines if direction == "out"]  # the client's side of the wire
    answer_at = next(i for i, msg in enumerate(sent) if msg.get("id") == call["id"] and "result" in msg)
    assert all(sent.index(n) < answer_at for n in notes)


# -- cancellation and the end of a session ---------------------------------------------------------------------


async def test_cancelling_an_mcp_call_cancels_its_acp_request_and_the_tool_on_the_client() -> None:
    wire = Wire()
    release, entered = trio.Event(), trio.Event()
    server = make_server(release, entered)
    with trio.fail_after(DEADLINE):
        async with pair(v1_unstable, wire) as (agent_conn, client_conn):
            await initialize(client_conn, v1_unstable)
            registration = serve_mcp_server(client_conn, server, name="tools")
            session_id = await new_session(client_conn, v1_unstable, [registration.declaration])
            session = agent_conn.handler.mcp[session_id].sessions["tools"]
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(session.call_tool, "slow", {})
                    await entered.wait()
                    assert registration.active_requests == 1
                    scope.cancel()
            await server.slow_ended.wait()  # type: ignore[attr-defined]
            assert server.outcome == {"slow": "cancelled"}  # type: ignore[attr-defined]
            assert registration.active_requests == 0
            # the session goes on
            assert text_of(await session.call_tool("add", {"a": 1, "b": 1})) == "2"

    call = next(m for m in wire.methods("mcp/message") if "id" in m and m["params"]["params"].get("name") == "slow")
    assert {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": call["id"]}} in [
        m for d, m in wire.lines if d == "in"
    ]
    (answer,) = [m for d, m in wire.lines if d == "out" and m.get("id") == call["id"] and "method" not in m]
    assert answer["error"]["code"] == acp_trio.REQUEST_CANCELLED


@VARIANTS
async def test_the_end_of_a_session_closes_its_acp_mcp_session_and_cancels_what_it_was_waiting_for(
    acp: ModuleType,
) -> None:
    release, entered = trio.Event(), trio.Event()
    server = make_server(release, entered)
    failures: list[BaseException] = []

    async def call_slow(session: mcp.ClientSession) -> None:
        try:
            await session.call_tool("slow", {})
        except Exception as exc:
            failures.append(exc)

    with trio.fail_after(DEADLINE):
        async with pair(acp) as (agent_conn, client_conn):
            await initialize(client_conn, acp)
            registration = serve_mcp_server(client_conn, server, name="tools")
            session_id = await new_session(client_conn, acp, [registration.declaration])
            servers = agent_conn.handler.mcp[session_id]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call_slow, servers.sessions["tools"])
                await entered.wait()
                await client_conn.agent.session_close(acp.CloseSessionRequest(session_id=session_id))
                await servers["tools"].wait_closed()
            assert servers["tools"].closed and servers["tools"].session is None and servers.errors == {}
            await server.slow_ended.wait()  # type: ignore[attr-defined]
            assert server.outcome == {"slow": "cancelled"}  # type: ignore[attr-defined]
            assert not registration.closed  # the client's server serves other sessions still
            other = await new_session(client_conn, acp, [registration.declaration])
            assert agent_conn.handler.mcp[other]["tools"].ok


async def test_a_closing_connection_fails_the_mcp_calls_in_flight_without_hanging() -> None:
    release, entered = trio.Event(), trio.Event()
    failures: list[BaseException] = []
    with trio.fail_after(DEADLINE):
        async with pair(v1_unstable) as (agent_conn, client_conn):
            await initialize(client_conn, v1_unstable)
            registration = serve_mcp_server(client_conn, make_server(release, entered), name="tools")
            session_id = await new_session(client_conn, v1_unstable, [registration.declaration])
            servers = agent_conn.handler.mcp[session_id]
            session = servers.sessions["tools"]

            async def call_slow() -> None:
                try:
                    await session.call_tool("slow", {})
                except BaseException as exc:
                    failures.append(exc)
                    raise

            agent_conn.start_soon(call_slow)
            await entered.wait()
            await client_conn.aclose()
            await servers.aclose()
        assert registration.closed
    assert failures  # the call did not return a result


async def test_two_sessions_share_one_declared_server_without_mixing_their_requests() -> None:
    wire = Wire()
    with trio.fail_after(DEADLINE):
        async with pair(v1_unstable, wire) as (agent_conn, client_conn):
            await initialize(client_conn, v1_unstable)
            registration = serve_mcp_server(client_conn, make_server(), name="tools")
            first = await new_session(client_conn, v1_unstable, [registration.declaration])
            second = await new_session(client_conn, v1_unstable, [registration.declaration])
            sessions = [agent_conn.handler.mcp[s].sessions["tools"] for s in (first, second)]
            results: list[str] = []

            async def add(session: mcp.ClientSession, a: int) -> None:
                results.append(text_of(await session.call_tool("add", {"a": a, "b": 100})))

            async with trio.open_nursery() as nursery:
                for a, session in enumerate(sessions * 5):
                    nursery.start_soon(add, session, a)
            assert sorted(results) == sorted(str(100 + a) for a in range(10))
    calls = [m["params"] for m in wire.methods("mcp/message") if "id" in m and m["params"]["method"] == "tools/call"]
    assert len(calls) == 10
    ids = [m["params"]["requestId"] for m in wire.methods("mcp/message") if "id" in m]
    assert len(ids) == len(set(ids))


# -- errors of the binding --------------------------------------------------------------------------------------


async def raw_call(
    agent_conn: acp_trio.AgentSideConnection, server_id: str, request_id: str, method: str, params: Any
) -> Any:
    """An ``mcp/message`` request sent by hand (no mcp.ClientSession): the carrier, or RequestError."""
    request = v1_unstable.MessageMcpRequest(server_id=server_id, request_id=request_id, method=method)
    if params is not None:
        request.params = params
    return await agent_conn.client.mcp_message(request)


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


async def test_the_client_refuses_what_the_binding_does_not_carry() -> None:
    release, entered = trio.Event(), trio.Event()
    with trio.fail_after(DEADLINE):
        async with pair(v1_unstable) as (agent_conn, client_conn):
            await initialize(client_conn, v1_unstable)
            registration = serve_mcp_server(
                client_conn, make_server(release, entered), name="tools", max_active_requests=1
            )
            sid = registration.server_id

            # a serverId nobody registered: outer -33001
            with pytest.raises(RequestError) as unknown:
                await raw_call(agent_conn, "nobody", "r1", "tools/list", {"_meta": MODERN_META})
            assert (unknown.value.code, unknown.value.data) == (SERVER_UNAVAILABLE, {"serverId": "nobody"})

            # an MCP request without the 2026-07-28 envelope, or the old handshake: inner MCP errors
            bare = await raw_call(agent_conn, sid, "r2", "tools/list", None)
            assert isinstance(bare, v1_unstable.ErrorMessageMcpResponse)
            assert bare.error.code == -32602 and "_meta" in bare.error.message
            handshake = await raw_call(agent_conn, sid, "r3", "initialize", {"protocolVersion": "2025-11-25"})
            assert isinstance(handshake, v1_unstable.ErrorMessageMcpResponse)
            assert handshake.error.code == -32022
            assert handshake.error.data == {"supported": ["2026-07-28"], "requested": "2025-11-25"}
            old = await raw_call(
                agent_conn,
                sid,
                "r4",
                "tools/list",
                {"_meta": {**MODERN_META, "io.modelcontextprotocol/protocolVersion": "2025-06-18"}},
            )
            assert isinstance(old, v1_unstable.ErrorMessageMcpResponse) and old.error.code == -32022
            # an MCP method the server does not have: an inner MCP error, not an outer one
            missing = await raw_call(agent_conn, sid, "r5", "no/such", {"_meta": MODERN_META})
            assert isinstance(missing, v1_unstable.ErrorMessageMcpResponse) and missing.error.code == -32601

            async with trio.open_nursery() as nursery:
                slow = {"_meta": MODERN_META, "name": "slow", "arguments": {}}
                nursery.start_soon(raw_call, agent_conn, sid, "busy", "tools/call", slow)
                await entered.wait()
                # the same requestId while it is active: outer -32602
                with pytest.raises(RequestError) as duplicate:
                    await raw_call(agent_conn, sid, "busy", "tools/list", {"_meta": MODERN_META})
                assert duplicate.value.code == -32602
                assert duplicate.value.data["requestId"] == "busy"
                # over max_active_requests: outer -33000
                with pytest.raises(RequestError) as limit:
                    await raw_call(agent_conn, sid, "r6", "tools/list", {"_meta": MODERN_META})
                assert limit.value.code == RESOURCE_LIMIT_EXCEEDED
                release.set()
            listed = await raw_call(agent_conn, sid, "busy", "tools/list", {"_meta": MODERN_META})  # free again
            assert isinstance(listed, v1_unstable.ResultMessageMcpResponse)
            assert {tool["name"] for tool in listed.result["tools"]} == {"add", "fail", "slow", "count"}


async def test_a_closed_registration_cancels_its_active_requests_and_refuses_later_ones() -> None:
    release, entered = trio.Event(), trio.Event()
    outcome: list[Any] = []

    async def call() -> None:
        try:
            await raw_call(agent_conn, sid, "r1", "tools/call", {"_meta": MODERN_META, "name": "slow", "arguments": {}})
        except RequestError as exc:
            outcome.append(exc.code)

    with trio.fail_after(DEADLINE):
        async with pair(v1_unstable) as (agent_conn, client_conn):
            await initialize(client_conn, v1_unstable)
            server = make_server(release, entered)
            registration = serve_mcp_server(client_conn, server, name="tools")
            sid = registration.server_id
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await entered.wait()
                await registration.aclose()
            assert outcome == [acp_trio.REQUEST_CANCELLED]
            assert registration.closed and repr(registration).endswith("closed>")
            with pytest.raises(RequestError) as gone:
                await raw_call(agent_conn, sid, "r2", "tools/list", {"_meta": MODERN_META})
            assert gone.value.code == SERVER_UNAVAILABLE
            with pytest.raises(ValueError, match="already registered"):
                serve_mcp_server(client_conn, make_server(), name="again", server_id=sid)


async def test_an_acp_server_the_client_does_not_serve_fails_alone() -> None:
    with trio.fail_after(DEADLINE):
        async with pair(v1_unstable) as (agent_conn, client_conn):
            await initialize(client_conn, v1_unstable)
            registration = serve_mcp_server(client_conn, make_server(), name="tools")
            ghost = v1_unstable.AcpMcpServer(name="ghost", server_id="never-registered")
            session_id = await new_session(client_conn, v1_unstable, [ghost, registration.declaration])
            servers = agent_conn.handler.mcp[session_id]
            assert list(servers.sessions) == ["tools"]
            error = servers.errors["ghost"]
            assert error.transport == "acp" and "MCP server registration unavailable" in error.reason
            assert isinstance(error.__cause__, mcp.MCPError) and error.__cause__.error.code == SERVER_UNAVAILABLE


# -- capabilities and variants ----------------------------------------------------------------------------------


class QuietAgent(Agent):
    advertise = False


@VARIANTS
async def test_a_client_declares_an_acp_server_only_to_an_agent_that_advertises_the_transport(acp: ModuleType) -> None:
    wire = Wire()
    capability = "mcpCapabilities.acp" if acp is v1_unstable else "session.mcp.acp"
    with trio.fail_after(DEADLINE):
        async with pair(acp, wire, agent=QuietAgent) as (_, client_conn):
            await initialize(client_conn, acp)
            registration = serve_mcp_server(client_conn, make_server(), name="tools")
            with pytest.raises(CapabilityError) as refused:
                await new_session(client_conn, acp, [registration.declaration])
            assert refused.value.capability == capability
            assert refused.value.detail == "mcpServers[0] uses the acp transport"
            # the client's mcp/message notifications need it too
            spec = acp.NOTIFICATIONS["mcp/message"]
            note = acp.MessageMcpNotification(
                server_id=registration.server_id, request_id="r", method="notifications/progress"
            )
            with pytest.raises(CapabilityError) as notify:
                await client_conn.send_notification(spec, note)
            assert notify.value.capability == capability
    assert wire.methods("session/new") == [] and wire.methods("mcp/message") == []


@pytest.mark.parametrize("method", ["session/new", "session/load", "session/resume", "session/fork"])
def test_every_v1_session_setup_request_needs_the_acp_marker_for_an_acp_server(method: str) -> None:
    params = {"sessionId": "s", "cwd": "/p", "mcpServers": [{"type": "acp", "name": "tools", "serverId": "x"}]}
    methods = {"loadSession": True, "sessionCapabilities": {"resume": {}, "fork": {}}}  # the methods themselves
    with pytest.raises(CapabilityError) as refused:
        check_agent_call(method, params, {**methods, "mcpCapabilities": {"http": True}})
    assert (refused.value.capability, refused.value.detail) == (
        "mcpCapabilities.acp",
        "mcpServers[0] uses the acp transport",
    )
    check_agent_call(method, params, {**methods, "mcpCapabilities": {"acp": True}})
    check_agent_call_v2("mcp/message", {}, {"session": {"mcp": {"acp": {}}}}, None)
    with pytest.raises(CapabilityError):
        check_agent_call_v2("mcp/message", {}, {"session": {"mcp": {"acp": True}}}, None)  # v2 markers are objects


async def test_stable_variants_have_no_mcp_over_acp_and_say_so() -> None:
    with trio.fail_after(DEADLINE):
        async with pair(v1) as (agent_conn, client_conn):
            await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
            with pytest.raises(CapabilityError, match="unstable variant"):
                serve_mcp_server(client_conn, make_server(), name="tools")
            # an agent on the stable schema gets the declaration as an unknown variant: that server fails alone
            acp_config = acp_trio.converter.structure({"type": "acp", "name": "tools", "serverId": "x"}, v1.McpServer)
            servers = await open_mcp_servers(agent_conn, "s1", [acp_config])
            assert "unstable variant" in servers.errors["tools"].reason
            with pytest.raises(CapabilityError):
                async with open_acp_transport(agent_conn, "x"):
                    pass


async def test_an_exception_in_the_body_of_open_acp_transport_comes_out_as_itself() -> None:
    with trio.fail_after(DEADLINE):
        async with pair(v1_unstable) as (agent_conn, client_conn):
            await initialize(client_conn, v1_unstable)
            with pytest.raises(KeyError, match="mine"):  # not an ExceptionGroup around it
                async with open_acp_transport(agent_conn, "x"):
                    raise KeyError("mine")


async def test_serve_mcp_server_refuses_what_is_not_an_mcp_server() -> None:
    with trio.fail_after(DEADLINE):
        async with pair(v1_unstable) as (_, client_conn):
            await initialize(client_conn, v1_unstable)
            with pytest.raises(TypeError, match="MCPServer"):
                serve_mcp_server(client_conn, object(), name="tools")
            with pytest.raises(ValueError, match="max_active_requests"):
                serve_mcp_server(client_conn, make_server(), name="tools", max_active_requests=0)


# -- the client batteries ---------------------------------------------------------------------------------------


async def test_a_standard_client_serves_mcp_servers_to_the_agent() -> None:
    with trio.fail_after(DEADLINE):
        async with pair(v1_unstable, client=StandardClient) as (agent_conn, client_conn):
            client: StandardClient = client_conn.handler
            await initialize(client_conn, v1_unstable)
            registration = client.serve_mcp_server(make_server(), name="tools", server_id="tools-1")
            assert isinstance(registration, McpServerRegistration)
            assert registration.declaration == v1_unstable.AcpMcpServer(name="tools", server_id="tools-1")
            session_id = await new_session(client_conn, v1_unstable, [registration.declaration])
            session = agent_conn.handler.mcp[session_id].sessions["tools"]
            assert text_of(await session.call_tool("add", {"a": 20, "b": 22})) == "42"


async def test_a_client_with_its_own_mcp_message_handler_still_gets_the_servers_it_does_not_register() -> None:
    seen: list[str] = []

    class OwnHandler(Client):
        async def mcp_message(self, params: v1_unstable.MessageMcpRequest) -> Any:
            seen.append(params.server_id)
            return v1_unstable.ResultMessageMcpResponse(result={"handled": "by the client object"})

    with trio.fail_after(DEADLINE):
        async with pair(v1_unstable, client=OwnHandler) as (agent_conn, client_conn):
            await initialize(client_conn, v1_unstable)
            serve_mcp_server(client_conn, make_server(), name="tools")
            answer = await raw_call(agent_conn, "elsewhere", "r1", "tools/list", {"_meta": MODERN_META})
            assert answer == v1_unstable.ResultMessageMcpResponse(result={"handled": "by the client object"})
    assert seen == ["elsewhere"]

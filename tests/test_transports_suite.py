"""One connection-level suite, run over every transport (issue 12: "every rule holds over every transport").

A transport only carries bytes between the two connections, so the same behaviours must hold over
each of them: a streamed turn in order, permission requests, ``session/cancel``, ``$/cancel_request``,
limits and bad input, and the end of input.  Each transport is a fixture that yields a
:class:`Link`: the two typed connections plus the client's raw output (to write bad lines) and a
way to end the client's output (the agent's input).  Add a transport by adding a link factory to
``LINKS``.  Waits are bounded with ``trio.fail_after``; pipes are real, so the clock is too.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio
import trio.testing

import acp_trio
from acp_schema import v1

DEADLINE = 10


class Link:
    """An agent and a client connected by some transport."""

    def __init__(
        self,
        agent_conn: acp_trio.AgentSideConnection,
        client_conn: acp_trio.ClientSideConnection,
        raw_send: Callable[[bytes], Any],
        end_client_output: Callable[[], Any],
        received: Received,
        *,
        initialized: bool = False,
    ) -> None:
        self.agent_conn = agent_conn
        self.client_conn = client_conn
        self.raw_send = raw_send  # async (bytes) -> None: written on the client's side, read by the agent
        self.end_client_output = end_client_output  # async () -> None: the agent's input ends
        self.received = received  # every message the client read, parsed (its tap)
        # initialize already done by the transport (Streamable HTTP: it opens the connection, once)
        self.initialized = initialized


class Received(list[Any]):
    """Every message the client read, parsed; :meth:`wait_until` waits for a condition on them."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = trio.Event()

    def tap(self, direction: str, line: bytes) -> None:
        if direction == "in":
            self.append(orjson.loads(line))
            self._changed.set()
            self._changed = trio.Event()

    async def wait_until(self, condition: Callable[[list[Any]], bool]) -> None:
        while not condition(self):
            await self._changed.wait()


@asynccontextmanager
async def memory_link(agent: Any, client: Any, **options: Any) -> AsyncIterator[Link]:
    to_agent_send, to_agent_receive = trio.testing.memory_stream_one_way_pair()
    to_client_send, to_client_receive = trio.testing.memory_stream_one_way_pair()
    received = Received()
    agent_conn = acp_trio.AgentSideConnection(agent, to_client_send, to_agent_receive, **options)
    client_conn = acp_trio.ClientSideConnection(client, to_agent_send, to_client_receive, tap=received.tap, **options)
    async with agent_conn, client_conn:
        yield Link(agent_conn, client_conn, to_agent_send.send_all, to_agent_send.aclose, received)


@asynccontextmanager
async def pipe_link(agent: Any, client: Any, **options: Any) -> AsyncIterator[Link]:
    """Two OS pipes, as between a client and the agent process it spawned (stdio's byte streams)."""
    to_agent_r, to_agent_w = os.pipe()
    to_client_r, to_client_w = os.pipe()
    streams = [trio.lowlevel.FdStream(fd) for fd in (to_agent_r, to_agent_w, to_client_r, to_client_w)]
    agent_in, client_out, client_in, agent_out = streams
    received = Received()
    agent_conn = acp_trio.AgentSideConnection(agent, agent_out, agent_in, **options)
    client_conn = acp_trio.ClientSideConnection(client, client_out, client_in, tap=received.tap, **options)
    try:
        async with agent_conn, client_conn:
            yield Link(agent_conn, client_conn, client_out.send_all, client_out.aclose, received)
    finally:
        for stream in streams:
            await trio.aclose_forcefully(stream)


@asynccontextmanager
async def websocket_link(agent: Any, client: Any, **options: Any) -> AsyncIterator[Link]:
    """A WebSocket on 127.0.0.1: our ASGI app on hypercorn's trio worker and ``connect_websocket``."""
    pytest.importorskip("hypercorn")
    pytest.importorskip("trio_websocket")
    from acp_trio._nursery import owned_nursery
    from acp_trio.transports.asgi import AcpApp, serve
    from acp_trio.transports.websocket import connect_websocket

    served: list[acp_trio.AgentSideConnection] = []
    made = trio.Event()

    def make_agent(conn: acp_trio.AgentSideConnection) -> Any:
        served.append(conn)
        made.set()
        return agent(conn)

    async def raw_send(data: bytes) -> None:  # one text frame per line, as a WebSocket client sends them
        for line in data.split(b"\n"):
            if line:
                await client_conn.websocket.send_message(line.decode())

    async def end_client_output() -> None:  # no half-close: the whole WebSocket closes
        await client_conn.websocket.aclose()

    received = Received()
    async with owned_nursery() as nursery:
        [bound] = await nursery.start(serve, AcpApp(make_agent, **options), "127.0.0.1", 0)
        url = bound.replace("http://", "ws://") + "/acp"
        async with connect_websocket(url, client, tap=received.tap, **options) as client_conn:
            await made.wait()
            yield Link(served[0], client_conn, raw_send, end_client_output, received)
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def http_link(agent: Any, client: Any, **options: Any) -> AsyncIterator[Link]:
    """Streamable HTTP on 127.0.0.1: our ASGI app on hypercorn's trio worker and ``connect_http``."""
    pytest.importorskip("hypercorn")
    httpx2 = pytest.importorskip("httpx2")
    from acp_trio._nursery import owned_nursery
    from acp_trio.transports.asgi import AcpApp, serve
    from acp_trio.transports.http import connect_http

    served: list[acp_trio.AgentSideConnection] = []
    made = trio.Event()

    def make_agent(conn: acp_trio.AgentSideConnection) -> Any:
        served.append(conn)
        made.set()
        return agent(conn)

    async def raw_send(data: bytes) -> None:  # one POST per line, as a Streamable HTTP client sends them
        headers = {"Content-Type": "application/json", "Acp-Connection-Id": client_conn.connection_id}
        for line in data.split(b"\n"):
            if line:
                answer = await raw.post(url, content=line, headers=headers)
                if answer.headers.get("content-type") == "application/json":  # the server's own JSON-RPC error
                    received.tap("in", answer.content)

    received = Received()
    async with owned_nursery() as nursery, httpx2.AsyncClient() as raw:
        [bound] = await nursery.start(serve, AcpApp(make_agent, **options), "127.0.0.1", 0)
        url = bound + "/acp"
        async with connect_http(url, client, tap=received.tap, **options) as client_conn:
            caps = getattr(client_conn.handler, "capabilities", None)  # a StandardClient's, say
            request = v1.InitializeRequest(protocol_version=1)
            if isinstance(caps, v1.ClientCapabilities):
                request.client_capabilities = caps
            await client_conn.agent.initialize(request)  # the HTTP connection starts here
            await made.wait()
            yield Link(served[0], client_conn, raw_send, client_conn.aclose, received, initialized=True)
        nursery.cancel_scope.cancel()


LINKS = {"memory": memory_link, "pipes": pipe_link, "websocket": websocket_link, "http": http_link}


@pytest.fixture(params=sorted(LINKS))
def link_factory(request: pytest.FixtureRequest) -> Any:
    return LINKS[request.param]


class Agent:
    """Streams ``N`` chunks per prompt (``N`` from the prompt text), asks permission when told to,
    waits forever when told to (until cancelled), and answers ``_test/slow`` after 60 s."""

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.client = v1.ClientPeer(conn)
        conn.on_ext_request("_test/slow", self.slow)
        self.slow_started = trio.Event()
        self.slow_cancelled = trio.Event()

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id=f"s{len(self.conn.sessions) + 1}")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        text = params.prompt[0].text if params.prompt and isinstance(params.prompt[0], v1.TextContentBlock) else ""
        if text == "ask":
            answer = await self.client.session_request_permission(
                v1.RequestPermissionRequest(
                    session_id=params.session_id,
                    tool_call=v1.ToolCallUpdate(tool_call_id="t1", title="Read"),
                    options=[v1.PermissionOption(option_id="ok", name="Allow", kind="allow_once")],
                )
            )
            said = "allowed" if isinstance(answer.outcome, v1.SelectedRequestPermissionOutcome) else "not allowed"
            await self.say(params.session_id, said)
            return v1.PromptResponse(stop_reason="end_turn")
        if text == "wait":
            await self.say(params.session_id, "waiting")
            await trio.sleep_forever()
        for n in range(int(text or 0)):
            await self.say(params.session_id, str(n))
        return v1.PromptResponse(stop_reason="end_turn")

    async def say(self, session_id: str, text: str) -> None:
        update = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=text))
        await self.client.session_update(v1.SessionNotification(session_id=session_id, update=update))

    async def slow(self, params: Any) -> Any:
        self.slow_started.set()
        try:
            await trio.sleep(60)
        finally:
            self.slow_cancelled.set()
        return {}


class Client:
    def __init__(self) -> None:
        self.chunks: dict[str, list[str]] = {}
        self.waiting = trio.Event()

    async def session_update(self, params: v1.SessionNotification) -> None:
        update = params.update
        if isinstance(update, v1.AgentMessageChunkSessionUpdate) and isinstance(update.content, v1.TextContentBlock):
            self.chunks.setdefault(params.session_id, []).append(update.content.text)
            if update.content.text == "waiting":
                self.waiting.set()

    async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        return v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id="ok"))


async def start(link: Link) -> str:
    if not link.initialized:
        await link.client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
    session = await link.client_conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
    return session.session_id


def prompt(session_id: str, text: str) -> v1.PromptRequest:
    return v1.PromptRequest(session_id=session_id, prompt=[v1.TextContentBlock(text=text)])


async def test_a_streamed_turn_arrives_whole_and_in_order_in_each_session(link_factory: Any) -> None:
    client = Client()
    with trio.fail_after(DEADLINE):
        async with link_factory(Agent, client) as link:
            first, second = await start(link), await start(link)
            async with trio.open_nursery() as nursery:
                for session_id in (first, second):
                    nursery.start_soon(link.client_conn.agent.session_prompt, prompt(session_id, "2000"))
    assert client.chunks == {first: [str(n) for n in range(2000)], second: [str(n) for n in range(2000)]}


async def test_a_permission_request_is_answered(link_factory: Any) -> None:
    client = Client()
    with trio.fail_after(DEADLINE):
        async with link_factory(Agent, client) as link:
            session_id = await start(link)
            response = await link.client_conn.agent.session_prompt(prompt(session_id, "ask"))
    assert response.stop_reason == "end_turn"
    assert client.chunks[session_id] == ["allowed"]


async def test_session_cancel_ends_the_turn_cancelled(link_factory: Any) -> None:
    client = Client()
    with trio.fail_after(DEADLINE):
        async with link_factory(Agent, client) as link:
            session_id = await start(link)
            async with trio.open_nursery() as nursery:
                result: list[Any] = []

                async def turn() -> None:
                    result.append(await link.client_conn.agent.session_prompt(prompt(session_id, "wait")))

                nursery.start_soon(turn)
                await client.waiting.wait()
                await link.client_conn.agent.session_cancel(v1.CancelNotification(session_id=session_id))
    assert result[0].stop_reason == "cancelled"


async def test_a_request_withdrawn_with_cancel_request_is_cancelled_on_the_agent(link_factory: Any) -> None:
    with trio.fail_after(DEADLINE):
        async with link_factory(Agent, Client()) as link:
            await start(link)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(link.client_conn.ext_request, "_test/slow")
                await link.agent_conn.handler.slow_started.wait()
                nursery.cancel_scope.cancel()  # the client gives up: $/cancel_request goes out
            await link.agent_conn.handler.slow_cancelled.wait()
            # the agent answers the withdrawn request -32800 (the client no longer waits for it)
            await link.received.wait_until(lambda got: any(m.get("error", {}).get("code") == -32800 for m in got))


async def test_bad_input_is_answered_and_the_connection_goes_on(link_factory: Any) -> None:
    # a bound against a hang, not a speed bar: over Streamable HTTP the 1,003 bad messages are as many
    # POSTs, about 5 s on an idle 2-core machine and past DEADLINE on a loaded one
    with trio.fail_after(6 * DEADLINE):
        async with link_factory(Agent, Client(), max_message_size=4096) as link:
            await start(link)
            await link.raw_send(b"{not json\n")
            big = {"jsonrpc": "2.0", "id": "big-1", "method": "session/new", "params": {"cwd": "/" + "x" * 5000}}
            await link.raw_send(orjson.dumps(big) + b"\n")
            await link.raw_send(b'{"jsonrpc":"2.0","id":"nope","method":"no/such/method"}\n')
            for _ in range(500):  # 1,000 bad requests in all with the loop below
                await link.raw_send(b'{"jsonrpc":"2.0","id":7,"method":"session/new","params":{"cwd":1}}\n')
                await link.raw_send(b'{"jsonrpc":"1.0","id":8,"method":"x"}\n')
            session_id = await start(link)  # still answering
            assert session_id

            def codes() -> list[tuple[Any, int]]:
                return [(m.get("id"), m["error"]["code"]) for m in link.received if "error" in m]

            await link.received.wait_until(lambda _: len(codes()) >= 1003)
            got = codes()
            assert (None, -32700) in got
            assert ("big-1", -32600) in got
            assert ("nope", -32601) in got
            assert got.count((7, -32602)) == 500 and got.count((8, -32600)) == 500
            assert len(link.agent_conn.connection._inbound) == 0  # no handler left running


# Only where the client can end its output and still read: a WebSocket or Streamable HTTP connection
# has no half-close.
@pytest.mark.parametrize("link_factory", ["memory", "pipes"], indirect=True)
async def test_the_end_of_the_agents_input_ends_a_waiting_turn_and_closes(link_factory: Any) -> None:
    client = Client()
    with trio.fail_after(DEADLINE):
        async with link_factory(Agent, client) as link:
            session_id = await start(link)
            prompt_line = {
                "jsonrpc": "2.0",
                "id": "p",
                "method": "session/prompt",
                "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "wait"}]},
            }
            await link.raw_send(orjson.dumps(prompt_line) + b"\n")
            await client.waiting.wait()
            await link.end_client_output()
            await link.agent_conn.wait_closed()
            await link.received.wait_until(lambda got: any(m.get("id") == "p" for m in got))
    assert [m["result"] for m in link.received if m.get("id") == "p"] == [{"stopReason": "cancelled"}]


def test_the_transports_package_names_the_remote_api_without_loading_its_libraries() -> None:
    import subprocess
    import sys

    code = (
        "import sys, acp_trio.transports as t\n"
        "assert not {'hypercorn', 'httpx2', 'trio_websocket'} & set(sys.modules), 'loaded at import'\n"
        "from acp_trio.transports.asgi import AcpApp\n"
        "assert t.AcpApp is AcpApp and callable(t.connect_websocket) and callable(t.connect_http)\n"
        "assert sorted(t.__all__) == sorted(t._LAZY)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


class Prober:
    """An agent that tries the client's files and terminals inside and outside the session's root."""

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.client = v1.ClientPeer(conn)
        self.seen: dict[str, Any] = {}

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="probe")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        root = self.conn.sessions[params.session_id].cwd
        for name, path in (("inside", os.path.join(root, "notes.txt")), ("outside", "/etc/passwd")):
            try:
                read = await self.client.fs_read_text_file(
                    v1.ReadTextFileRequest(session_id=params.session_id, path=path)
                )
                self.seen[name] = read.content
            except acp_trio.RequestError as exc:
                self.seen[name] = exc.code
        try:
            await self.client.terminal_create(
                v1.CreateTerminalRequest(session_id=params.session_id, command="true", cwd="/")
            )
            self.seen["terminal outside"] = "created"
        except acp_trio.RequestError as exc:
            self.seen["terminal outside"] = exc.code
        return v1.PromptResponse(stop_reason="end_turn")


async def test_the_client_batteries_keep_their_sandbox_whatever_the_transport(link_factory: Any, tmp_path: Any) -> None:
    (tmp_path / "notes.txt").write_text("mine\n", encoding="utf-8")
    with trio.fail_after(DEADLINE):
        async with link_factory(Prober, acp_trio.StandardClient) as link:
            client: acp_trio.StandardClient = link.client_conn.handler
            if not link.initialized:
                await link.client_conn.agent.initialize(
                    v1.InitializeRequest(protocol_version=1, client_capabilities=client.capabilities)
                )
            session = await link.client_conn.agent.session_new(v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[]))
            await link.client_conn.agent.session_prompt(prompt(session.session_id, "probe"))
            seen = link.agent_conn.handler.seen
    assert seen == {"inside": "mine\n", "outside": -32602, "terminal outside": -32602}

"""The Streamable HTTP client transport (``acp_trio.transports.http.connect_http``).

Spec: the RFD ``docs/rfds/streamable-http-websocket-transport.mdx`` (Streamable HTTP), as the
official TypeScript SDK 2.4.0 speaks it.  Two kinds of peer:

- the TypeScript SDK's ``AcpServer`` with its Node HTTP adapter (``tests/interop/ts_acp_http_server.mjs``),
  run under node as a real peer: the interoperability script of ``tests/test_interop.py``, a
  streamed turn of 1,000 updates, two sessions at once, a permission request, ``session/cancel``,
  a 409 (a second reader of a session's stream), a connection the server forgot, headers and
  cookies as the server saw them;
- a scripted server behind ``httpx2.MockTransport`` (in process, autojump clock) for the answers
  the TypeScript server never gives (401/403/410, 500) and for exact status handling.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import test_interop  # pytest's default ("prepend") import mode puts tests/ on sys.path
import trio
from test_interop import INTEROP, TIME_LIMIT, ts_sdk  # noqa: F401  (ts_sdk: the fixture)

from acp_schema import v1
from acp_trio import ClientSideConnection, ConnectionClosed, RequestError
from acp_trio._nursery import owned_nursery
from acp_trio.transports.cookies import CookieStore
from acp_trio.transports.http import HttpTransportClosed, connect_http  # imports httpx2 when connecting

httpx2 = pytest.importorskip("httpx2")  # the `remote` extra

INIT = v1.InitializeRequest(protocol_version=1, client_capabilities=v1.ClientCapabilities())


def prompt(session_id: str, text: str) -> v1.PromptRequest:
    return v1.PromptRequest(session_id=session_id, prompt=[v1.TextContentBlock(text=text)])


class Recorder:
    """A client: records each session's chunk texts, allows permission requests."""

    def __init__(self) -> None:
        self.texts: dict[str, list[str]] = {}
        self.permissions: list[str] = []
        self.waiting = trio.Event()
        self._changed = trio.Event()

    async def session_update(self, params: v1.SessionNotification) -> None:
        update = params.update
        assert isinstance(update, v1.AgentMessageChunkSessionUpdate)
        assert isinstance(update.content, v1.TextContentBlock)
        self.texts.setdefault(params.session_id, []).append(update.content.text)
        if update.content.text == "waiting":
            self.waiting.set()
        self._changed.set()
        self._changed = trio.Event()

    async def wait_texts(self, session_id: str, count: int) -> None:
        """Wait until ``count`` chunks of ``session_id`` arrived (bound it with fail_after)."""
        while len(self.texts.get(session_id, [])) < count:
            await self._changed.wait()

    async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        self.permissions.append(params.tool_call.tool_call_id)
        return v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id="allow"))


# -- the TypeScript SDK's AcpServer ------------------------------------------------------------


class TsServer:
    def __init__(self, url: str) -> None:
        self.url = url
        self.log: list[list[str]] = []  # per request: [method, acp-session-id, cookie, authorization]
        self.closed: list[list[str]] = []  # per response closed: [method, acp-session-id]
        self._changed = trio.Event()

    async def wait_closed(self, method: str, session_id: str) -> None:
        """Wait until the server saw every response to ``method`` with ``session_id`` so far close."""

        def opened() -> int:
            return sum(1 for entry in self.log if entry[:2] == [method, session_id])

        while self.closed.count([method, session_id]) < opened():
            await self._changed.wait()
            self._changed = trio.Event()


@asynccontextmanager
async def ts_http_server(npm_dir: Path, *args: str) -> AsyncIterator[TsServer]:
    """Run ``ts_acp_http_server.mjs``; yields its URL and the requests it logged; kills it on exit."""
    async with (
        test_interop.node_server("ts_acp_http_server.mjs", list(args), npm_dir) as (process, line),
        owned_nursery() as nursery,
    ):
        server = TsServer(f"http://127.0.0.1:{int(line.split()[1])}/acp")

        async def read_log() -> None:
            buffer = b""
            async for data in process.stderr:
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for text in lines:
                    if text.startswith(b"REQ\t"):
                        server.log.append(text.decode().split("\t")[1:])
                    elif text.startswith(b"CLOSED\t"):
                        server.closed.append(text.decode().split("\t")[1:])
                        server._changed.set()

        nursery.start_soon(read_log)
        yield server
        nursery.cancel_scope.cancel()


async def test_the_interop_script_over_streamable_http_against_the_typescript_acp_server(
    ts_sdk: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    with trio.fail_after(TIME_LIMIT):
        async with ts_http_server(ts_sdk, "interop") as server:
            ids: list[Any] = []

            @asynccontextmanager
            async def connect(client: Any) -> AsyncIterator[ClientSideConnection]:
                async with connect_http(server.url, client) as conn:
                    yield conn
                    ids.append(conn.connection_id)  # type: ignore[attr-defined]

            await test_interop.drive_foreign_agent(
                [], {}, tmp_path, agent_name="ts-sdk-interop-agent", greeting=" the TypeScript SDK", connect=connect
            )
    assert len(ids) == 1 and ids[0]  # the Acp-Connection-Id of the answer to initialize


async def test_streamed_turns_permission_and_cancel_in_two_sessions_against_the_typescript_acp_server(
    ts_sdk: Path,  # noqa: F811
) -> None:
    client = Recorder()
    cookies = CookieStore()
    with trio.fail_after(TIME_LIMIT):
        async with ts_http_server(ts_sdk) as server:
            headers = {"Authorization": "Bearer s3cret"}
            async with connect_http(server.url, client, headers=headers, cookies=cookies) as conn:
                assert conn.connection_id is None  # type: ignore[attr-defined]
                init = await conn.agent.initialize(INIT)
                assert init.agent_info is not None and init.agent_info.name == "ts-http-interop-agent"
                assert conn.connection_id  # type: ignore[attr-defined]
                first = (await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))).session_id
                second = (await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))).session_id
                stops: dict[str, str] = {}

                async def turn(session_id: str) -> None:
                    stops[session_id] = (await conn.agent.session_prompt(prompt(session_id, "stream 1000"))).stop_reason

                async with trio.open_nursery() as nursery:  # two streamed turns at once
                    nursery.start_soon(turn, first)
                    nursery.start_soon(turn, second)
                assert stops == {first: "end_turn", second: "end_turn"}
                assert client.texts == {first: [str(i) for i in range(1000)], second: [str(i) for i in range(1000)]}

                # a permission request on the session's stream, answered with its Acp-Session-Id
                client.texts.clear()
                asked = await conn.agent.session_prompt(prompt(second, "ask"))
                assert asked.stop_reason == "end_turn"
                assert client.permissions == ["http-ask"]
                assert client.texts == {second: ["asking", "permission: allow"]}

                # session/cancel (a notification: 202) ends the waiting turn
                async with trio.open_nursery() as nursery:
                    results: list[v1.PromptResponse] = []

                    async def wait_turn() -> None:
                        results.append(await conn.agent.session_prompt(prompt(first, "wait")))

                    nursery.start_soon(wait_turn)
                    await client.waiting.wait()
                    await conn.agent.session_cancel(v1.CancelNotification(session_id=first))
                assert results[0].stop_reason == "cancelled"
            assert conn.closed
    # what the server saw: the caller's header on every request, the affinity cookie echoed after
    # the first answer, each session's stream opened before the first POST for it, DELETE at the end
    log = server.log
    assert log and all(entry[3] == "Bearer s3cret" for entry in log), log
    assert log[0][:3] == ["POST", "-", "-"]
    assert all(entry[2].startswith("affinity=") for entry in log[1:]), log
    for session_id in (first, second):
        first_use = next(i for i, entry in enumerate(log) if entry[1] == session_id)
        assert log[first_use][0] == "GET", log
    assert log[-1][0] == "DELETE"
    assert cookies.header() == f"affinity={len(log)}"  # what the last answer set


async def test_a_second_reader_fails_one_session_with_409_until_session_load(ts_sdk: Path) -> None:  # noqa: F811
    client = Recorder()
    with trio.fail_after(TIME_LIMIT):
        async with ts_http_server(ts_sdk) as server, httpx2.AsyncClient(timeout=None) as other:
            async with connect_http(server.url, client) as conn:
                await conn.agent.initialize(INIT)
                connection_id = conn.connection_id  # type: ignore[attr-defined]
                healthy = (await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))).session_id
                # someone else reads the next session's stream first (the TypeScript server makes the
                # stream of an unknown session id; session ids here count up: ts-http-1, ts-http-2)
                stolen = f"ts-http-{int(healthy.rsplit('-', 1)[1]) + 1}"
                steal = {"Accept": "text/event-stream", "Acp-Connection-Id": connection_id, "Acp-Session-Id": stolen}
                async with other.stream("GET", server.url, headers=steal) as thief:
                    assert thief.status_code == 200
                    new = await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
                    assert new.session_id == stolen
                    with pytest.raises(RequestError) as failed:
                        await conn.agent.session_prompt(prompt(stolen, "stream 3"))
                    assert failed.value.code == -32603
                    assert "409" in failed.value.message and stolen in failed.value.message
                    # the other session goes on
                    done = await conn.agent.session_prompt(prompt(healthy, "stream 2"))
                    assert done.stop_reason == "end_turn" and client.texts[healthy] == ["0", "1"]
                    # still failed while not reattached
                    with pytest.raises(RequestError):
                        await conn.agent.session_prompt(prompt(stolen, "stream 3"))
                # the other reader left: session/load reattaches the session (and opens its stream)
                await server.wait_closed("GET", stolen)
                await conn.agent.session_load(v1.LoadSessionRequest(session_id=stolen, cwd="/", mcp_servers=[]))
                again = await conn.agent.session_prompt(prompt(stolen, "stream 3"))
                assert again.stop_reason == "end_turn"
                assert client.texts[stolen][-3:] == ["0", "1", "2"]


async def test_a_connection_the_server_forgot_closes_the_transport(ts_sdk: Path) -> None:  # noqa: F811
    with trio.fail_after(TIME_LIMIT):
        async with ts_http_server(ts_sdk) as server, httpx2.AsyncClient(timeout=None) as other:
            async with connect_http(server.url, Recorder()) as conn:
                await conn.agent.initialize(INIT)
                connection_id = conn.connection_id  # type: ignore[attr-defined]
                # the server drops the connection (as after its stall limit, or a restart behind a balancer)
                gone = await other.delete(server.url, headers={"Acp-Connection-Id": connection_id})
                assert gone.status_code == 202
                with pytest.raises(ConnectionClosed) as closed:
                    await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
                assert isinstance(closed.value, HttpTransportClosed)
                assert closed.value.url == server.url and server.url in str(closed.value)
                # the stream's end or the 404 to the POST, whichever came first, says so
                assert closed.value.status in (None, 404)
                assert "404" in str(closed.value) or "SSE stream" in str(closed.value)
                with pytest.raises(ConnectionClosed):
                    await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))


class StartOrder(httpx2.AsyncHTTPTransport):
    """An httpx2 transport that records the method of each request as the client starts it."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[str] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.started.append(request.method)
        return await super().handle_async_request(request)


async def test_the_bodys_exception_comes_out_as_itself(ts_sdk: Path) -> None:  # noqa: F811
    transport = StartOrder()
    with trio.fail_after(TIME_LIMIT):
        async with ts_http_server(ts_sdk) as server:
            with pytest.raises(KeyError, match="mine"):
                async with connect_http(server.url, Recorder(), transport=transport) as conn:
                    await conn.agent.initialize(INIT)
                    await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
                    raise KeyError("mine")
            # the server's log reaches this test through its stderr, read by another task: wait until
            # the DELETE's response closed there
            while not any(entry[0] == "DELETE" for entry in server.closed):
                await server._changed.wait()
                server._changed = trio.Event()
    # closed properly all the same: the DELETE is the last request the client started (the session
    # stream's GET, cancelled first, is never started after it).  The server's log cannot show that
    # order: a GET started just before, on a TCP connection of its own, may reach it after the DELETE
    # (CI: 'GET' == 'DELETE' as the log's last line, 1 run in about 3).
    assert transport.started[-1] == "DELETE", transport.started
    assert transport.started.count("DELETE") == 1, transport.started


# -- a scripted server behind httpx2.MockTransport ----------------------------------------------


class ScriptedServer:
    """A Streamable HTTP server in process: answers like the TypeScript server, statuses on demand.

    ``post_status``: method (``"response"``: our answer to an agent's request) → HTTP status to
    answer a POST of that method with (instead of 202);
    ``get_status``: session id (``None``: the connection's stream) → status for its GET.
    ``session/new`` answers ``<session_prefix>1``, ``<session_prefix>2``... (``s1``, ``s2``... by default); ``session/prompt`` answers ``end_turn`` after one chunk
    unless its text is ``"hang"``; ``session/load`` answers ``{}``.
    """

    URL = "http://acp.test/acp"

    def __init__(self) -> None:
        self.post_status: dict[str, int] = {}
        self.get_status: dict[str | None, int] = {}
        self.stream_content_type = "text/event-stream"
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.queues: dict[str | None, list[bytes]] = {}
        self.channels: dict[str | None, trio.MemorySendChannel[bytes]] = {}
        self.sessions = 0
        self.session_prefix = "s"
        self.http_versions: list[str] = []  # of each request, as the ASGI server saw it
        self.events: dict[str, trio.Event] = {}  # "POST session/prompt", "GET None", ...: set when it arrives
        self.init_headers: dict[str, str] = {"Acp-Connection-Id": "conn-1", "Set-Cookie": "lb=backend-7; Path=/"}
        self.accepted_headers: dict[str, dict[str, str]] = {}  # JSON-RPC method → headers of its 202

    def transport(self) -> Any:
        return httpx2.MockTransport(self.handle)

    def arrived(self, what: str) -> trio.Event:
        return self.events.setdefault(what, trio.Event())

    def send(self, route: str | None, message: dict[str, Any]) -> None:
        data = b"data: " + json.dumps(message).encode() + b"\n\n"
        channel = self.channels.get(route)
        if channel is None:
            self.queues.setdefault(route, []).append(data)
        else:
            channel.send_nowait(data)

    def end_stream(self, route: str | None) -> None:
        channel = self.channels.pop(route, None)
        if channel is not None:
            channel.close()

    async def handle(self, request: Any) -> Any:
        """The ``httpx2.MockTransport`` handler."""
        body = await request.aread()
        status, headers, content = self.respond(request.method, dict(request.headers.items()), body)
        return httpx2.Response(status, headers=headers, content=content)

    async def asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The same server as an ASGI application (served by hypercorn for the HTTP/2 test)."""
        if scope["type"] == "lifespan":
            while (event := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.http_versions.append(scope["http_version"])
        body, more = b"", True
        while more:
            event = await receive()
            body += event.get("body", b"")
            more = event.get("more_body", False)
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        status, answer_headers, content = self.respond(scope["method"], headers, body)
        raw = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in answer_headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        if isinstance(content, bytes):
            await send({"type": "http.response.body", "body": content})
            return
        async for chunk in content:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    def respond(
        self, method: str, raw_headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes | AsyncIterator[bytes]]:
        headers = {name.lower(): value for name, value in raw_headers.items()}
        message = json.loads(body) if body else None
        self.requests.append((method, headers, message))
        session = headers.get("acp-session-id")
        what = f"GET {session}" if method == "GET" else f"{method} {message and message.get('method')}"
        self.arrived(what).set()
        if method == "GET":
            status = self.get_status.get(session, 200)
            if status != 200:
                return status, {}, b"refused"
            send, receive = trio.open_memory_channel[bytes](1000)
            for data in self.queues.pop(session, []):
                send.send_nowait(data)
            self.channels[session] = send

            async def events() -> AsyncIterator[bytes]:
                yield b":\n\n"  # the headers go out at once (the client waits for them before POSTing)
                async with receive:
                    async for data in receive:
                        yield data

            return 200, {"Content-Type": self.stream_content_type, "Cache-Control": "no-cache"}, events()
        if method == "DELETE":
            return 202, {}, b""
        rpc_method = message.get("method")
        if rpc_method == "initialize":
            result = {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}, "authMethods": []}
            answer = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
            return 200, {**self.init_headers, "Content-Type": "application/json"}, answer
        status = self.post_status.get(rpc_method or "response", 202)
        if status != 202:
            return status, {"Content-Type": "text/plain"}, f"no {rpc_method or 'response'} today".encode()
        if rpc_method == "session/new":
            self.sessions += 1
            session_id = f"{self.session_prefix}{self.sessions}"
            self.send(None, {"jsonrpc": "2.0", "id": message["id"], "result": {"sessionId": session_id}})
        elif rpc_method == "session/load":
            self.send(None, {"jsonrpc": "2.0", "id": message["id"], "result": {}})
        elif rpc_method == "session/prompt":
            session_id = message["params"]["sessionId"]
            if message["params"]["prompt"][0]["text"] != "hang":
                chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
                self.send(session_id, {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": chunk}})  # fmt: skip
                self.send(session_id, {"jsonrpc": "2.0", "id": message["id"], "result": {"stopReason": "end_turn"}})
        return 202, self.accepted_headers.get(rpc_method or "response", {}), b""


@asynccontextmanager
async def scripted(server: ScriptedServer, client: Any = None, **options: Any) -> AsyncIterator[ClientSideConnection]:
    async with connect_http(server.URL, client or Recorder(), transport=server.transport(), **options) as conn:
        yield conn


async def new_session(conn: ClientSideConnection) -> str:
    return (await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))).session_id


@pytest.mark.parametrize("status", [401, 403, 404, 410])
async def test_401_403_404_410_close_the_transport_naming_status_and_url(autojump_clock: Any, status: int) -> None:
    server = ScriptedServer()
    server.post_status["session/new"] = status
    with trio.fail_after(30):
        async with scripted(server) as conn:
            await conn.agent.initialize(INIT)
            with pytest.raises(HttpTransportClosed) as closed:
                await new_session(conn)
            assert closed.value.status == status and closed.value.url == server.URL
            assert f"HTTP {status}" in str(closed.value) and server.URL in str(closed.value)
            assert "POST session/new" in str(closed.value)
            with pytest.raises(HttpTransportClosed):  # and it stays closed
                await conn.agent.session_load(v1.LoadSessionRequest(session_id="s1", cwd="/", mcp_servers=[]))


async def test_401_on_initialize_closes_the_transport(autojump_clock: Any) -> None:
    server = ScriptedServer()
    server.post_status["initialize"] = 401

    async def refuse(request: Any) -> Any:
        return httpx2.Response(401, text="bearer token required")

    with trio.fail_after(30):
        async with connect_http(server.URL, Recorder(), transport=httpx2.MockTransport(refuse)) as conn:
            with pytest.raises(HttpTransportClosed, match=r"HTTP 401 \(bearer token required\) to POST initialize"):
                await conn.agent.initialize(INIT)


async def test_another_http_error_fails_only_its_request(autojump_clock: Any) -> None:
    server = ScriptedServer()
    with trio.fail_after(30):
        async with scripted(server) as conn:
            await conn.agent.initialize(INIT)
            session_id = await new_session(conn)
            server.post_status["session/prompt"] = 503
            with pytest.raises(RequestError) as failed:
                await conn.agent.session_prompt(prompt(session_id, "x"))
            assert failed.value.code == -32603
            assert failed.value.data == {"status": 503, "body": "no session/prompt today"}
            del server.post_status["session/prompt"]
            assert (await conn.agent.session_prompt(prompt(session_id, "x"))).stop_reason == "end_turn"


async def failing_turn(conn: ClientSideConnection, session_id: str, failures: list[BaseException]) -> None:
    """A turn that hangs on the server: keeps what it fails with."""
    try:
        await conn.agent.session_prompt(prompt(session_id, "hang"))
    except ConnectionClosed as exc:
        failures.append(exc)


async def test_a_refused_answer_to_an_agent_request_closes_the_transport(autojump_clock: Any) -> None:
    # as the TS client does: else the agent waits for the answer, and the turn for the agent, forever
    server = ScriptedServer()
    client = Recorder()
    failures: list[BaseException] = []
    with trio.fail_after(30):
        async with scripted(server, client) as conn:
            await conn.agent.initialize(INIT)
            session_id = await new_session(conn)
            server.post_status["response"] = 413
            async with trio.open_nursery() as nursery:
                nursery.start_soon(failing_turn, conn, session_id, failures)
                await server.arrived("POST session/prompt").wait()
                tool_call = {"toolCallId": "t1", "title": "read"}
                options = [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]
                params = {"sessionId": session_id, "toolCall": tool_call, "options": options}
                server.send(session_id, {"jsonrpc": "2.0", "id": 7, "method": "session/request_permission", "params": params})  # fmt: skip
            assert client.permissions == ["t1"]
            [closed] = failures
            assert isinstance(closed, HttpTransportClosed)
            assert closed.status == 413 and closed.url == server.URL
            expected = f"the ACP server answered HTTP 413 (no response today) to POST (a response); the message was not delivered ({server.URL})"  # fmt: skip
            assert str(closed) == expected
            with pytest.raises(HttpTransportClosed):  # and it stays closed
                await new_session(conn)


async def test_a_refused_notification_closes_the_transport(autojump_clock: Any) -> None:
    server = ScriptedServer()
    failures: list[BaseException] = []
    with trio.fail_after(30):
        async with scripted(server) as conn:
            await conn.agent.initialize(INIT)
            session_id = await new_session(conn)
            server.post_status["session/cancel"] = 500
            async with trio.open_nursery() as nursery:
                nursery.start_soon(failing_turn, conn, session_id, failures)
                await server.arrived("POST session/prompt").wait()
                await conn.agent.session_cancel(v1.CancelNotification(session_id=session_id))
            [closed] = failures
            assert isinstance(closed, HttpTransportClosed)
            assert closed.status == 500 and "HTTP 500 (no session/cancel today) to POST session/cancel" in str(closed)


async def test_a_session_id_outside_iso_8859_1_fails_only_that_session(autojump_clock: Any) -> None:
    # ACP allows any string; Acp-Session-Id carries ISO-8859-1 bytes (as Node's fetch sends them)
    server = ScriptedServer()
    client = Recorder()
    with trio.fail_after(30):
        async with scripted(server, client) as conn:
            await conn.agent.initialize(INIT)
            server.session_prefix = "会话-"
            unsendable = await new_session(conn)
            server.session_prefix = "séance-"
            latin = await new_session(conn)
            with pytest.raises(RequestError, match=f"ACP session {unsendable} failed: its id cannot be sent in the Acp-Session-Id header") as failed:  # fmt: skip
                await conn.agent.session_prompt(prompt(unsendable, "x"))
            assert failed.value.code == -32603 and failed.value.data == {"sessionId": unsendable}
            assert "reattach" not in str(failed.value)  # session/load would fail the same way
            await conn.agent.session_cancel(v1.CancelNotification(session_id=unsendable))  # dropped with a warning
            assert (await conn.agent.session_prompt(prompt(latin, "x"))).stop_reason == "end_turn"
            assert client.texts == {latin: ["hi"]}
            assert {headers.get("acp-session-id") for _, headers, _ in server.requests} == {None, latin}


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ({"X-Team": "équipe ☃"}, "the 'X-Team' header cannot be sent: the character '☃'"),
        (
            {"Authorization": "Bearer a\r\nX-Evil: 1"},
            "the 'Authorization' header cannot be sent: the control character",
        ),
        ({"Bad Name": "v"}, "the header name 'Bad Name' is not an HTTP token"),
    ],
)
async def test_caller_headers_that_cannot_be_sent_raise_value_error_naming_the_header(
    headers: dict[str, str], named: str
) -> None:
    server = ScriptedServer()
    with pytest.raises(ValueError, match=named):
        async with scripted(server, headers=headers):
            pass
    assert server.requests == []


async def test_a_409_on_a_post_fails_that_session_until_it_is_reattached(autojump_clock: Any) -> None:
    server = ScriptedServer()
    with trio.fail_after(30):
        async with scripted(server) as conn:
            await conn.agent.initialize(INIT)
            first, second = await new_session(conn), await new_session(conn)
            server.post_status["session/prompt"] = 409
            with pytest.raises(RequestError, match=f"ACP session {first} failed: HTTP 409"):
                await conn.agent.session_prompt(prompt(first, "x"))
            del server.post_status["session/prompt"]
            posts = len(server.requests)
            with pytest.raises(RequestError, match="reattach it with session/load"):  # failed without a POST
                await conn.agent.session_prompt(prompt(first, "x"))
            assert len(server.requests) == posts
            assert (await conn.agent.session_prompt(prompt(second, "x"))).stop_reason == "end_turn"
            await conn.agent.session_load(v1.LoadSessionRequest(session_id=first, cwd="/", mcp_servers=[]))
            assert (await conn.agent.session_prompt(prompt(first, "x"))).stop_reason == "end_turn"


async def test_a_session_stream_that_ends_fails_only_that_sessions_requests(autojump_clock: Any) -> None:
    server = ScriptedServer()
    with trio.fail_after(30):
        async with scripted(server) as conn:
            await conn.agent.initialize(INIT)
            session_id = await new_session(conn)
            async with trio.open_nursery() as nursery:
                failures: list[RequestError] = []

                async def hang() -> None:
                    with pytest.raises(RequestError) as failed:
                        await conn.agent.session_prompt(prompt(session_id, "hang"))
                    failures.append(failed.value)

                nursery.start_soon(hang)
                await server.arrived("POST session/prompt").wait()
                server.end_stream(session_id)
            assert failures[0].code == -32603 and "SSE stream ended" in failures[0].message
            # the next message for the session opens its stream again
            assert (await conn.agent.session_prompt(prompt(session_id, "x"))).stop_reason == "end_turn"
            gets = [r for r in server.requests if r[0] == "GET" and r[1].get("acp-session-id") == session_id]
            assert len(gets) == 2


async def test_the_end_of_the_connection_stream_closes_the_transport(autojump_clock: Any) -> None:
    server = ScriptedServer()
    with trio.fail_after(30):
        async with scripted(server) as conn:
            await conn.agent.initialize(INIT)
            await server.arrived("GET None").wait()
            server.end_stream(None)
            with pytest.raises(HttpTransportClosed, match="ended the connection's SSE stream"):
                await conn.wait_closed()
                await new_session(conn)


async def test_an_oversized_event_closes_the_transport(autojump_clock: Any) -> None:
    server = ScriptedServer()
    with trio.fail_after(30):
        async with scripted(server, max_message_bytes=1000) as conn:
            await conn.agent.initialize(INIT)
            server.send(None, {"jsonrpc": "2.0", "method": "_big", "params": {"x": "y" * 2000}})
            await conn.wait_closed()
            error = conn.connection.close_error
            assert isinstance(error, HttpTransportClosed) and "1000 byte limit" in str(error)


async def test_a_stream_answered_with_another_content_type_closes_the_transport(autojump_clock: Any) -> None:
    server = ScriptedServer()
    server.stream_content_type = "application/json"
    with trio.fail_after(30):
        async with scripted(server) as conn:
            await conn.agent.initialize(INIT)
            await conn.wait_closed()
            error = conn.connection.close_error
            assert isinstance(error, HttpTransportClosed) and "text/event-stream" in str(error)
            assert "'application/json'" in str(error)


async def test_headers_and_cookies_on_every_request_and_across_a_reconnect(autojump_clock: Any) -> None:
    server = ScriptedServer()
    cookies = CookieStore()
    headers = {"Authorization": "Bearer t0k", "Acp-Connection-Id": "not mine"}
    with trio.fail_after(30):
        async with scripted(server, headers=headers, cookies=cookies) as conn:
            await conn.agent.initialize(INIT)
            session_id = await new_session(conn)
            await conn.agent.session_prompt(prompt(session_id, "x"))
        async with scripted(server, headers=headers, cookies=cookies) as conn:  # a reconnect
            await conn.agent.initialize(INIT)
    methods = [r[0] for r in server.requests]
    assert methods.count("DELETE") == 2
    assert all(r[1]["authorization"] == "Bearer t0k" for r in server.requests)
    first_init, second_init = (r for r in server.requests if r[2] and r[2].get("method") == "initialize")
    assert "cookie" not in first_init[1] and second_init[1]["cookie"] == "lb=backend-7"
    after_init = [r for r in server.requests if r is not first_init]
    assert all(r[1].get("cookie") == "lb=backend-7" for r in after_init)
    # the transport's own connection id wins over the caller's header, and the initialize POST has none
    assert "acp-connection-id" not in first_init[1]
    assert all(r[1]["acp-connection-id"] == "conn-1" for r in after_init if r is not second_init)
    sessioned = [r for r in server.requests if r[1].get("acp-session-id") == session_id]
    assert [r[0] for r in sessioned] == ["GET", "POST"]


async def test_a_cookie_set_by_a_later_answer_goes_on_the_next_post_of_the_session(autojump_clock: Any) -> None:
    # (the POST headers of a session are built once: a cookie that changes must still reach the next POST)
    server = ScriptedServer()
    with trio.fail_after(30):
        async with scripted(server) as conn:
            await conn.agent.initialize(INIT)
            session_id = await new_session(conn)
            await conn.agent.session_prompt(prompt(session_id, "x"))
            server.accepted_headers["session/prompt"] = {"Set-Cookie": "lb=backend-9"}
            await conn.agent.session_prompt(prompt(session_id, "y"))
            server.accepted_headers["session/prompt"] = {"Set-Cookie": "lb=; Max-Age=0"}
            await conn.agent.session_prompt(prompt(session_id, "z"))
            await conn.agent.session_prompt(prompt(session_id, "w"))
    prompts = [r[1].get("cookie") for r in server.requests if r[2] and r[2].get("method") == "session/prompt"]
    assert prompts == ["lb=backend-7", "lb=backend-7", "lb=backend-9", None]


async def test_an_initialize_answer_without_a_connection_id_closes_the_transport(autojump_clock: Any) -> None:
    server = ScriptedServer()
    server.init_headers = {}
    with trio.fail_after(30):
        async with scripted(server) as conn:
            with pytest.raises(HttpTransportClosed, match="no Acp-Connection-Id header"):
                await conn.agent.initialize(INIT)


async def test_a_request_before_initialize_fails_without_a_post(autojump_clock: Any) -> None:
    server = ScriptedServer()
    with trio.fail_after(30):
        async with scripted(server) as conn:
            with pytest.raises(RequestError, match="the first request must be initialize"):
                await new_session(conn)
            assert server.requests == []
            await conn.agent.initialize(INIT)
            assert await new_session(conn) == "s1"


async def test_an_unreachable_server_closes_the_transport_naming_the_url(autojump_clock: Any) -> None:
    async def unreachable(request: Any) -> Any:
        raise httpx2.ConnectError("connection refused", request=request)

    with trio.fail_after(30):
        async with connect_http(ScriptedServer.URL, Recorder(), transport=httpx2.MockTransport(unreachable)) as conn:
            with pytest.raises(HttpTransportClosed) as closed:
                await conn.agent.initialize(INIT)
    assert closed.value.status is None and closed.value.url == ScriptedServer.URL
    assert "POST initialize failed" in str(closed.value) and "connection refused" in str(closed.value)


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key (PEM files: certificate, key)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "acp-trio test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


async def test_https_with_a_server_that_offers_http2_too(tmp_path: Path) -> None:
    """Over TLS to hypercorn (which offers h2 and http/1.1 by ALPN): the default client speaks
    HTTP/1.1 (``http2=False``, see the module docstring), several streams open at once."""
    import ssl

    pytest.importorskip("hypercorn")
    pytest.importorskip("cryptography")
    from acp_trio.transports.asgi import serve

    cert, key = self_signed_certificate(tmp_path)
    server = ScriptedServer()
    with trio.fail_after(TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(
                lambda task_status: serve(
                    server.asgi, "127.0.0.1", 0, certfile=str(cert), keyfile=str(key), task_status=task_status
                )
            )
            url = bound.replace("http://", "https://") + "/acp"
            verify = ssl.create_default_context(cafile=str(cert))
            client = Recorder()
            async with connect_http(url, client, verify=verify) as conn:
                await conn.agent.initialize(INIT)
                first, second = await new_session(conn), await new_session(conn)
                for session_id in (first, second):
                    assert (await conn.agent.session_prompt(prompt(session_id, "x"))).stop_reason == "end_turn"
                assert client.texts == {first: ["hi"], second: ["hi"]}
            nursery.cancel_scope.cancel()
    assert set(server.http_versions) == {"1.1"}, server.http_versions
    assert [r[0] for r in server.requests].count("GET") == 3
    assert server.requests[-1][0] == "DELETE"


async def test_the_default_tls_context_is_built_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``verify=True`` (the default): every ``connect_http`` uses the process's one context, built
    at the first (building one loads the CA bundle: ~50 ms of CPU each, for ``http://`` too); the
    CA file comes from ``SSL_CERT_FILE``, read per key, so a changed variable gets a new context;
    a caller's own ``ssl.SSLContext`` is used as given."""
    import ssl

    import httpx2

    pytest.importorskip("hypercorn")
    pytest.importorskip("cryptography")
    from acp_trio.transports import http
    from acp_trio.transports.asgi import serve

    cert, key = self_signed_certificate(tmp_path)
    built: list[object] = []
    original = httpx2.create_ssl_context

    def counting(verify: Any = True, **kwargs: Any) -> ssl.SSLContext:
        context = original(verify, **kwargs)
        if verify is True:
            built.append(context)
        return context

    monkeypatch.setattr(http, "_default_contexts", {}, raising=False)
    monkeypatch.setattr(httpx2, "create_ssl_context", counting)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    server = ScriptedServer()
    with trio.fail_after(TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(
                lambda task_status: serve(
                    server.asgi, "127.0.0.1", 0, certfile=str(cert), keyfile=str(key), task_status=task_status
                )
            )
            url = bound.replace("http://", "https://") + "/acp"
            for _ in range(3):
                async with connect_http(url, Recorder()) as conn:
                    assert (await conn.agent.initialize(INIT)).protocol_version == 1
            assert len(built) == 1 and http.default_tls_context() is built[0]
            own = ssl.create_default_context(cafile=str(cert))
            async with connect_http(url, Recorder(), verify=own) as conn:
                await conn.agent.initialize(INIT)
            assert len(built) == 1
            # another SSL_CERT_FILE: another context, which does not trust the server's certificate
            monkeypatch.delenv("SSL_CERT_FILE")
            with pytest.raises(HttpTransportClosed, match=r"not trusted .*CERTIFICATE_VERIFY_FAILED.*cafile"):
                async with connect_http(url, Recorder()) as conn:
                    await conn.agent.initialize(INIT)
            assert len(built) == 2 and http.default_tls_context() is built[1]
            nursery.cancel_scope.cancel()


async def test_session_load_returns_after_a_replay_that_comes_later_on_the_session_stream(
    autojump_clock: Any,
) -> None:
    """The load answer arrives first (connection stream), the replay 30 ms later (session stream):
    session/load still returns with every replayed update delivered."""
    server = ScriptedServer()
    client = Recorder()
    with trio.fail_after(30):
        async with scripted(server, client) as conn:
            await conn.agent.initialize(INIT)
            session_id = await new_session(conn)
            async with trio.open_nursery() as nursery:

                async def replay_late() -> None:
                    await server.arrived("POST session/load").wait()
                    await trio.sleep(0.03)
                    for i in range(20):
                        chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": str(i)}}
                        params = {"sessionId": session_id, "update": chunk}
                        server.send(session_id, {"jsonrpc": "2.0", "method": "session/update", "params": params})

                nursery.start_soon(replay_late)
                await conn.agent.session_load(v1.LoadSessionRequest(session_id=session_id, cwd="/", mcp_servers=[]))
                assert client.texts == {session_id: [str(i) for i in range(20)]}


async def test_a_small_receive_buffer_slows_the_streams_and_loses_nothing(autojump_clock: Any) -> None:
    server = ScriptedServer()
    client = Recorder()
    with trio.fail_after(30):
        async with scripted(server, client, max_buffered_bytes=64) as conn:  # less than one message
            await conn.agent.initialize(INIT)
            session_id = await new_session(conn)
            for i in range(200):
                chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": str(i)}}
                params = {"sessionId": session_id, "update": chunk}
                server.send(session_id, {"jsonrpc": "2.0", "method": "session/update", "params": params})
            assert (await conn.agent.session_prompt(prompt(session_id, "x"))).stop_reason == "end_turn"
    assert client.texts[session_id] == [*map(str, range(200)), "hi"]


async def test_a_reconnect_loads_the_session_with_the_same_cookies(ts_sdk: Path) -> None:  # noqa: F811
    """The RFD's recipe after a lost transport: a new connection (same headers and cookie store),
    initialize, session/load.  Its replay comes on the session's stream and its response on the
    connection's, two streams read independently: the client holds the response until the
    session's stream has gone quiet, so session/load returns after the replayed updates (the
    TypeScript client lets the response overtake them)."""
    cookies = CookieStore()
    with trio.fail_after(TIME_LIMIT):
        async with ts_http_server(ts_sdk) as server:
            first = Recorder()
            async with connect_http(server.url, first, cookies=cookies) as conn:
                await conn.agent.initialize(INIT)
                session_id = await new_session(conn)
                await conn.agent.session_prompt(prompt(session_id, "stream 50"))
                old_id = conn.connection_id  # type: ignore[attr-defined]
            affinity = cookies.header()
            assert affinity is not None and affinity.startswith("affinity=")
            again = Recorder()
            async with connect_http(server.url, again, cookies=cookies) as conn:
                init = await conn.agent.initialize(INIT)
                assert init.agent_capabilities is not None and init.agent_capabilities.load_session
                assert conn.connection_id != old_id  # type: ignore[attr-defined]
                await conn.agent.session_load(v1.LoadSessionRequest(session_id=session_id, cwd="/", mcp_servers=[]))
                assert again.texts == {session_id: [str(i) for i in range(50)]}  # all replayed by then
    # the first connection's DELETE, then the new connection's initialize with the stored cookie
    deleted = [entry[0] for entry in server.log].index("DELETE")
    assert server.log[deleted + 1][:3] == ["POST", "-", affinity]


# -- failing to connect, with acp-trio's own server: one typed exception saying what to do ----------


class SessionAgent:
    """Numbers its sessions from s1 (served by AcpApp, one per connection)."""

    def __init__(self, conn: Any) -> None:
        self.sessions = 0

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        self.sessions += 1
        return v1.NewSessionResponse(session_id=f"s{self.sessions}")


@asynccontextmanager
async def acp_app_served(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` (an ``AcpApp``) on a free loopback port; yields its ``http://127.0.0.1:PORT/acp``."""
    pytest.importorskip("hypercorn")
    from acp_trio.transports.asgi import serve

    async with owned_nursery() as nursery:
        [bound] = await nursery.start(serve, app, "127.0.0.1", 0)
        try:
            yield bound + "/acp"
        finally:
            nursery.cancel_scope.cancel()


async def test_connecting_where_nothing_listens_raises_one_http_transport_closed_saying_so() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()  # nothing listens there now
    url = f"http://127.0.0.1:{port}/acp"
    with trio.fail_after(TIME_LIMIT):
        with pytest.raises(HttpTransportClosed) as closed:  # itself: an exception group would not match
            async with connect_http(url, Recorder()) as conn:
                await conn.agent.initialize(INIT)
        assert closed.value.status is None and closed.value.url == url
        assert str(closed.value) == (
            f"POST initialize failed: nothing listens on 127.0.0.1:{port} (connection refused): "
            f"start the ACP server there, or fix the host and port in the URL ({url})"
        )
        # and the body's own exception, raised after that failure, comes out as itself
        mine = KeyError("mine")
        with pytest.raises(KeyError) as raised:
            async with connect_http(url, Recorder()) as conn:
                with pytest.raises(HttpTransportClosed):
                    await conn.agent.initialize(INIT)
                raise mine
        assert raised.value is mine


async def test_a_401_from_acp_app_raises_one_http_transport_closed_saying_to_send_the_token() -> None:
    from acp_trio.transports.asgi import AcpApp

    with trio.fail_after(TIME_LIMIT):
        async with acp_app_served(AcpApp(SessionAgent, token="s3cret")) as url:
            with pytest.raises(HttpTransportClosed) as closed:
                async with connect_http(url, Recorder()) as conn:
                    await conn.agent.initialize(INIT)
            assert closed.value.status == 401 and closed.value.url == url
            assert str(closed.value) == (
                "the ACP server answered HTTP 401 (Unauthorized: send Authorization: Bearer <token>) to POST "
                "initialize; not authorized: send the token the server was started with: "
                f"connect_http(..., headers={{'Authorization': 'Bearer <token>'}}) ({url})"
            )
            with pytest.raises(HttpTransportClosed, match="did not accept the Authorization header") as closed:
                async with connect_http(url, Recorder(), headers={"Authorization": "Bearer wrong"}) as conn:
                    await conn.agent.initialize(INIT)
            assert closed.value.status == 401
            async with connect_http(url, Recorder(), headers={"Authorization": "Bearer s3cret"}) as conn:
                await conn.agent.initialize(INIT)
                assert await new_session(conn) == "s1"


async def test_a_404_to_initialize_says_to_check_the_path() -> None:
    from acp_trio.transports.asgi import AcpApp

    with trio.fail_after(TIME_LIMIT):
        async with acp_app_served(AcpApp(SessionAgent)) as url:
            other = url.replace("/acp", "/other")
            with pytest.raises(HttpTransportClosed) as closed:
                async with connect_http(other, Recorder()) as conn:
                    await conn.agent.initialize(INIT)
    assert closed.value.status == 404 and closed.value.url == other
    assert str(closed.value) == (
        "the ACP server answered HTTP 404 (Not found: ACP is served on /acp) to POST initialize; "
        f"no ACP endpoint at this URL: check its path (acp-trio's AcpApp serves /acp) ({other})"
    )


async def test_an_exception_raised_in_the_body_comes_out_as_itself_from_acp_app() -> None:
    from acp_trio.transports.asgi import AcpApp

    app = AcpApp(SessionAgent)
    mine = KeyError("mine")
    with trio.fail_after(TIME_LIMIT):
        async with acp_app_served(app) as url:
            with pytest.raises(KeyError) as raised:
                async with connect_http(url, Recorder()) as conn:
                    await conn.agent.initialize(INIT)
                    assert await new_session(conn) == "s1"
                    raise mine
            assert raised.value is mine
            await app.wait_idle()  # and the connection was closed (DELETE) all the same
            assert app.active_connections == 0


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            socket.gaierror(-2, "Name or service not known"),
            "cannot find the host 'acp.test' (Name or service not known)",
        ),
        (None, "nothing answered at acp.test:80 within 7 s (connect_timeout)"),
    ],
)
async def test_an_unknown_host_or_a_connect_timeout_says_so(autojump_clock: Any, error: Any, said: str) -> None:
    async def fail(request: Any) -> Any:
        if error is None:
            raise httpx2.ConnectTimeout("timed out", request=request)
        raise httpx2.ConnectError(str(error), request=request) from error

    with trio.fail_after(30):
        with pytest.raises(HttpTransportClosed) as closed:
            async with connect_http(
                ScriptedServer.URL, Recorder(), transport=httpx2.MockTransport(fail), connect_timeout=7
            ) as conn:
                await conn.agent.initialize(INIT)
    assert closed.value.status is None
    assert str(closed.value).startswith(f"POST initialize failed: {said}"), str(closed.value)
    assert str(closed.value).endswith(f"({ScriptedServer.URL})")


async def test_served_lets_the_clients_failure_out_as_itself_and_stops_serving_after_the_block() -> None:
    """``asgi.served``: the README-style example's own nursery no longer wraps a client's failure (a
    401 here, the user's case with a wrong port) in an ExceptionGroup; the port is free afterwards."""
    from acp_trio.transports.asgi import AcpApp, served

    with trio.fail_after(TIME_LIMIT):
        with pytest.raises(HttpTransportClosed) as closed:  # itself: a group would not match
            async with served(AcpApp(SessionAgent, token="s3cret"), "127.0.0.1", 0) as [bound]:
                async with connect_http(bound + "/acp", Recorder()) as conn:
                    await conn.agent.initialize(INIT)
        assert closed.value.status == 401
        port = int(bound.rsplit(":", 1)[1])
        with pytest.raises(OSError):  # nothing listens there once the block ended
            await trio.open_tcp_stream("127.0.0.1", port)
        mine = KeyError("mine")
        with pytest.raises(KeyError) as raised:
            async with served(AcpApp(SessionAgent), "127.0.0.1", 0) as [bound]:
                async with connect_http(bound + "/acp", Recorder()) as conn:
                    await conn.agent.initialize(INIT)
                    assert await new_session(conn) == "s1"
                raise mine
        assert raised.value is mine

"""The WebSocket transport: our ASGI server (``acp_trio.transports.asgi``) and client (``connect_websocket``).

Spec: the RFD ``docs/rfds/streamable-http-websocket-transport.mdx`` (WebSocket Request Flow,
Unified Endpoint Routing).  Everything runs in this process over real sockets on 127.0.0.1 (port
0), the server being hypercorn's trio worker; every test is bounded with ``trio.fail_after``.
"""

from __future__ import annotations

import contextlib
import functools
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trio
import trio.testing

import acp_trio
from acp_schema import v1
from acp_trio import converter

pytest.importorskip("hypercorn")
pytest.importorskip("trio_websocket")

from acp_trio.transports.asgi import AcpApp, serve
from acp_trio.transports.cookies import CookieStore
from acp_trio.transports.websocket import WebSocketConnectError, connect_websocket

DEADLINE = 30
STREAMED = 200


def chunk(session_id: str, text: str) -> v1.SessionNotification:
    return v1.SessionNotification(
        session_id=session_id, update=v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=text))
    )


def prompt(session_id: str, text: str) -> v1.PromptRequest:
    return v1.PromptRequest(session_id=session_id, prompt=[v1.TextContentBlock(text=text)])


class Agent:
    """One per connection: numbers its sessions from s1; streams, asks permission, or waits for cancel."""

    instances: ClassVar[list[Agent]] = []

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.sessions = 0
        self.waiting = trio.Event()
        Agent.instances.append(self)

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        self.sessions += 1
        return v1.NewSessionResponse(session_id=f"s{self.sessions}")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        sid = params.session_id
        block = params.prompt[0]
        assert isinstance(block, v1.TextContentBlock)
        word, _, count = block.text.partition(" ")
        if word == "ask":
            answer = await self.conn.client.session_request_permission(
                v1.RequestPermissionRequest(
                    session_id=sid,
                    tool_call=v1.ToolCallUpdate(tool_call_id="t1"),
                    options=[
                        v1.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                        v1.PermissionOption(option_id="deny", name="Deny", kind="reject_once"),
                    ],
                )
            )
            outcome = answer.outcome
            chosen = outcome.option_id if isinstance(outcome, v1.SelectedRequestPermissionOutcome) else "cancelled"
            await self.conn.client.session_update(chunk(sid, f"chosen {chosen}"))
        elif word == "wait":
            self.waiting.set()
            await trio.sleep_forever()
        elif word == "stream":
            for i in range(int(count)):
                await self.conn.client.session_update(chunk(sid, f"{sid}:{i}"))
        elif word == "flood":  # large updates until the client stops taking them
            while True:
                await self.conn.client.session_update(chunk(sid, "x" * 65536))
        elif word == "big":  # numbered 8 KiB updates
            for i in range(int(count)):
                await self.conn.client.session_update(chunk(sid, f"{i:06d}" + "y" * 8192))
        return v1.PromptResponse(stop_reason="end_turn")


class Client:
    def __init__(self, conn: acp_trio.ClientSideConnection) -> None:
        self.conn = conn
        self.texts: list[str] = []
        self.permission_requests = 0

    async def session_update(self, params: v1.SessionNotification) -> None:
        update = params.update
        assert isinstance(update, v1.AgentMessageChunkSessionUpdate)
        assert isinstance(update.content, v1.TextContentBlock)
        self.texts.append(update.content.text)

    async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        self.permission_requests += 1
        return v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id="allow"))


@asynccontextmanager
async def served(app: AcpApp) -> AsyncIterator[str]:
    """Serve ``app`` on a free loopback port; yields its ``ws://127.0.0.1:PORT/acp`` URL."""
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(serve, app, "127.0.0.1", 0)
        yield binds[0].replace("http://", "ws://") + "/acp"
        nursery.cancel_scope.cancel()


async def initialize(conn: acp_trio.ClientSideConnection) -> v1.InitializeResponse:
    request = v1.InitializeRequest(
        protocol_version=1, client_capabilities=converter.structure({}, v1.ClientCapabilities)
    )
    response: v1.InitializeResponse = await conn.agent.initialize(request)
    return response


async def new_session(conn: acp_trio.ClientSideConnection) -> str:
    response = await conn.agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
    return response.session_id


def client_of(conn: acp_trio.ClientSideConnection) -> Client:
    handler = conn.handler
    assert isinstance(handler, Client)
    return handler


async def test_initialize_session_new_and_a_streamed_turn_arrive_in_order() -> None:
    app = AcpApp(Agent)
    with trio.fail_after(DEADLINE):
        async with served(app) as url, connect_websocket(url, Client) as conn:
            assert (await initialize(conn)).protocol_version == 1
            # the RFD: the 101 answer names the connection; ours are unguessable
            assert conn.connection_id in app.connection_ids  # type: ignore[attr-defined]
            assert len(conn.connection_id) >= 32  # type: ignore[attr-defined]
            sid = await new_session(conn)
            response = await conn.agent.session_prompt(prompt(sid, f"stream {STREAMED}"))
            assert response.stop_reason == "end_turn"
            assert client_of(conn).texts == [f"{sid}:{i}" for i in range(STREAMED)]
        assert app.active_connections == 0


async def test_a_permission_request_reaches_the_client_and_its_answer_the_agent() -> None:
    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent)) as url, connect_websocket(url, Client) as conn:
            await initialize(conn)
            sid = await new_session(conn)
            response = await conn.agent.session_prompt(prompt(sid, "ask"))
            assert response.stop_reason == "end_turn"
            assert client_of(conn).permission_requests == 1
            assert client_of(conn).texts == ["chosen allow"]


async def test_session_cancel_ends_the_turn_with_stop_reason_cancelled() -> None:
    Agent.instances.clear()
    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent)) as url, connect_websocket(url, Client) as conn:
            await initialize(conn)
            sid = await new_session(conn)
            results: list[v1.PromptResponse] = []
            async with trio.open_nursery() as nursery:

                async def turn() -> None:
                    results.append(await conn.agent.session_prompt(prompt(sid, "wait")))

                nursery.start_soon(turn)
                await Agent.instances[-1].waiting.wait()
                await conn.agent.session_cancel(v1.CancelNotification(session_id=sid))
            assert [r.stop_reason for r in results] == ["cancelled"]


async def test_two_connections_at_once_each_have_their_own_agent_and_see_only_their_own_updates() -> None:
    Agent.instances.clear()
    app = AcpApp(Agent)
    seen: dict[str, list[str]] = {}
    with trio.fail_after(DEADLINE):
        async with served(app) as url:

            async def one(name: str) -> None:
                async with connect_websocket(url, Client) as conn:
                    await initialize(conn)
                    sid = await new_session(conn)
                    assert sid == "s1"  # each connection has its own agent, numbering from s1
                    await conn.agent.session_prompt(prompt(sid, f"stream {STREAMED}"))
                    seen[name] = client_of(conn).texts
                    seen[name + " id"] = [conn.connection_id]  # type: ignore[attr-defined]

            async with trio.open_nursery() as nursery:
                nursery.start_soon(one, "a")
                nursery.start_soon(one, "b")
    assert len(Agent.instances) == 2
    assert seen["a"] == seen["b"] == [f"s1:{i}" for i in range(STREAMED)]  # no update twice, none lost
    assert seen["a id"] != seen["b id"]
    assert app.active_connections == 0


async def test_an_upgrade_from_a_foreign_origin_is_refused_403_and_loopback_or_listed_origins_are_accepted() -> None:
    app = AcpApp(Agent, allowed_origins=["https://editor.example"])
    with trio.fail_after(DEADLINE):
        async with served(app) as url:
            with pytest.raises(WebSocketConnectError) as info:
                async with connect_websocket(url, Client, headers={"Origin": "http://evil.example:8765"}):
                    raise AssertionError("accepted")
            assert info.value.status == 403
            assert "evil.example" in str(info.value) and url in str(info.value)
            for origin in ("http://localhost:3000", "http://127.0.0.1:8765", "https://editor.example"):
                async with connect_websocket(url, Client, headers={"Origin": origin}) as conn:
                    await initialize(conn)
    assert app.active_connections == 0


async def test_an_offered_subprotocol_is_echoed_so_browsers_and_node_ws_clients_connect() -> None:
    from trio_websocket import open_websocket_url

    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent)) as url:
            async with open_websocket_url(url, subprotocols=["acp.v1", "other"]) as ws:
                assert ws.subprotocol == "acp.v1"
                await ws.send_message('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}')
                assert '"protocolVersion":1' in str(await ws.get_message())
            async with open_websocket_url(url) as ws:  # none offered: none chosen
                assert ws.subprotocol is None


async def test_a_missing_or_wrong_bearer_token_is_refused_401_on_every_route() -> None:
    app = AcpApp(Agent, token="s3cret")
    with trio.fail_after(DEADLINE):
        async with served(app) as url:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                with pytest.raises(WebSocketConnectError) as info:
                    async with connect_websocket(url, Client, headers=headers):
                        raise AssertionError("accepted")
                assert info.value.status == 401
            assert (await http_request(url, "POST", "/acp"))[0] == 401
            async with connect_websocket(url, Client, headers={"Authorization": "Bearer s3cret"}) as conn:
                await initialize(conn)


async def http_request(
    url: str, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
) -> tuple[int, str]:
    """One HTTP/1.1 request to the server of ``url``, written as given (a ``Host`` in ``headers``
    replaces the URL's); returns (status, body)."""
    host_port = url.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
    headers = dict(headers or {})
    lines = [f"{method} {path} HTTP/1.1", f"Host: {headers.pop('Host', host_port)}", "Connection: close"]
    lines += [f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
    async with stream:
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        data = b""
        while chunk := await stream.receive_some():
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body.decode()


async def test_streamable_http_methods_are_routed_and_other_paths_404() -> None:
    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent)) as url:
            # Streamable HTTP is served (tests/test_transport_http_server.py); bare requests are refused
            assert await http_request(url, "POST", "/acp") == (415, "Unsupported Media Type")
            assert await http_request(url, "GET", "/acp") == (406, "Not Acceptable")
            assert await http_request(url, "DELETE", "/acp") == (400, "Missing Acp-Connection-Id")
            assert (await http_request(url, "PUT", "/acp"))[0] == 405
            assert (await http_request(url, "POST", "/other"))[0] == 404
            with pytest.raises(WebSocketConnectError) as info:
                async with connect_websocket(url.replace("/acp", "/other"), Client):
                    raise AssertionError("accepted")
            assert info.value.status == 404


async def test_a_message_over_the_limit_closes_the_websocket_with_1009() -> None:
    app = AcpApp(Agent, max_message_bytes=4096)
    with trio.fail_after(DEADLINE):
        async with served(app) as url, connect_websocket(url, Client) as conn:
            await initialize(conn)
            sid = await new_session(conn)
            with pytest.raises(acp_trio.ConnectionClosed) as info:
                await conn.agent.session_prompt(prompt(sid, "stream 1 " + "x" * 8192))
            assert "1009" in str(info.value) and url in str(info.value)
        assert app.active_connections == 0


async def test_an_exception_raised_in_the_body_comes_out_as_itself() -> None:
    class Boom(Exception):
        pass

    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent)) as url:
            with pytest.raises(Boom):
                async with connect_websocket(url, Client) as conn:
                    await initialize(conn)
                    raise Boom


async def test_an_unreachable_server_raises_a_clear_error_naming_the_url() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()  # nothing listens there now
    url = f"ws://127.0.0.1:{port}/acp"
    with trio.fail_after(DEADLINE), pytest.raises(WebSocketConnectError) as info:
        async with connect_websocket(url, Client):
            raise AssertionError("connected")
    assert info.value.status is None and url in str(info.value)
    # one base for every transport's failure: except acp_trio.ConnectionClosed catches it
    assert isinstance(info.value, acp_trio.ConnectionClosed) and isinstance(info.value, ConnectionError)


async def start_a_flood_it_never_reads(ws: Any) -> None:
    """As a raw trio-websocket client: initialize, session/new, then a prompt whose updates it does not read."""
    await ws.send_message('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}')
    assert '"id":1' in str(await ws.get_message())
    await ws.send_message('{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}')
    assert '"s1"' in str(await ws.get_message())
    await ws.send_message(
        '{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":'
        '{"sessionId":"s1","prompt":[{"type":"text","text":"flood"}]}}'
    )


async def test_a_client_that_stops_reading_is_dropped_after_the_output_stall_timeout() -> None:
    import trio_websocket

    Agent.instances.clear()
    app = AcpApp(Agent, output_stall_timeout=0.5)
    with trio.fail_after(DEADLINE):
        async with served(app) as url, trio_websocket.open_websocket_url(url) as ws:
            await start_a_flood_it_never_reads(ws)
            agent_conn = Agent.instances[-1].conn
            await agent_conn.connection.wait_closed()  # given up on while the client still holds the socket
            assert "stalled" in str(agent_conn.connection.close_error)
            # once the client reads again, it gets what was in flight, then the close 1008
            with pytest.raises(trio_websocket.ConnectionClosed) as info:
                while True:
                    await ws.get_message()
            assert info.value.reason is not None and info.value.reason.code == 1008
        assert app.active_connections == 0


def test_the_default_origin_check_refuses_rebinding_names_and_allows_loopback() -> None:
    app = AcpApp(Agent)
    assert app.origin_allowed(None)  # not a browser
    assert app.origin_allowed("http://localhost:5173") and app.origin_allowed("http://[::1]:80")
    assert not app.origin_allowed("http://attacker.example:8765")
    assert not app.origin_allowed("null") and not app.origin_allowed("file://")
    assert AcpApp(Agent, allowed_origins=["*"]).origin_allowed("https://anything.example")


async def test_one_text_frame_is_one_message_even_pretty_printed_and_binary_frames_are_ignored() -> None:
    import json

    import trio_websocket

    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent)) as url, trio_websocket.open_websocket_url(url) as ws:
            pretty = json.dumps(
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}, indent=2
            )
            await ws.send_message(b"\x00binary frames are ignored")
            await ws.send_message(pretty)
            answer = json.loads(await ws.get_message())
            assert answer["id"] == 1 and answer["result"]["protocolVersion"] == 1
            # invalid JSON over several lines: one -32700 for the whole frame, not one per line
            await ws.send_message('{"jsonrpc": "2.0",\n "id": 2,\n "method": ')
            await ws.send_message(
                '{"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}'
            )
            replies = [json.loads(await ws.get_message()) for _ in range(2)]
            assert [r.get("error", {}).get("code") for r in replies] == [-32700, None]
            assert replies[1]["id"] == 3 and replies[1]["result"]["sessionId"] == "s1"


async def test_many_connections_opened_and_closed_leave_nothing_behind() -> None:
    app = AcpApp(Agent)
    with trio.fail_after(DEADLINE):
        async with served(app) as url:
            async with trio.open_nursery() as nursery:
                for _ in range(20):

                    async def one() -> None:
                        async with connect_websocket(url, Client) as conn:
                            await initialize(conn)
                            await conn.agent.session_prompt(prompt(await new_session(conn), "stream 10"))
                            assert client_of(conn).texts == [f"s1:{i}" for i in range(10)]

                    nursery.start_soon(one)
            await app.wait_idle()  # every server-side connection ends once its client left
    assert app.active_connections == 0


def test_the_remote_guides_websocket_example_runs_as_written(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]

    def python_block(path: Path, section: str) -> str:
        text = path.read_text(encoding="utf-8")
        match = re.compile(r"```python\n(.*?)```", re.S).search(text, text.index(f"## {section}\n"))
        assert match is not None
        return match.group(1)

    (tmp_path / "my_agent.py").write_text(python_block(root / "README.md", "Write an agent"), encoding="utf-8")
    remote = python_block(root / "docs" / "site" / "guides" / "remote.md", "WebSocket")
    (tmp_path / "my_remote.py").write_text(remote, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "my_remote.py"], capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["agent: notes.txt starts with: buy milk", "stop reason: end_turn"]


async def test_cookies_set_on_the_upgrade_go_back_on_the_next_one_with_the_same_store() -> None:
    app = AcpApp(Agent)
    upgrades: list[str | None] = []

    async def affinity(scope: Any, receive: Any, send: Any) -> None:
        """A load balancer's affinity cookie on every 101 answer; records each upgrade's Cookie header."""
        if scope["type"] == "websocket":
            upgrades.append(next((v.decode() for k, v in scope["headers"] if k == b"cookie"), None))

            async def send_with_cookie(message: Any) -> None:
                if message["type"] == "websocket.accept":
                    message = {
                        **message,
                        "headers": [*message.get("headers", []), (b"set-cookie", b"lb=node-7; Path=/")],
                    }
                await send(message)

            await app(scope, receive, send_with_cookie)
        else:
            await app(scope, receive, send)

    store = CookieStore()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(serve, affinity, "127.0.0.1", 0)
            url = bound.replace("http://", "ws://") + "/acp"
            for _ in range(2):  # a reconnect with the same store
                async with connect_websocket(url, Client, cookies=store, headers={"Cookie": "mine=1"}) as conn:
                    await initialize(conn)
            async with connect_websocket(url, Client) as conn:  # a fresh store
                await initialize(conn)
            nursery.cancel_scope.cancel()
    assert upgrades == ["mine=1", "lb=node-7; mine=1", None]


def test_the_cookie_store_keeps_name_value_pairs_and_drops_expired_ones() -> None:
    store = CookieStore()
    store.store([(b"Set-Cookie", b"a=1; Path=/; HttpOnly"), ("set-cookie", "b=2"), (b"content-type", b"x=y")])
    assert store.header() == "a=1; b=2"
    store.store([(b"set-cookie", b"a=; Max-Age=0"), (b"set-cookie", b"=nameless"), (b"set-cookie", b"novalue")])
    assert store.header() == "b=2"
    assert store.apply({"Authorization": "Bearer t", "cookie": "b=mine; c=3"}) == {
        "Authorization": "Bearer t",
        "Cookie": "b=mine; c=3",
    }
    store.clear()
    assert store.header() is None and store.apply({}) == {}


async def test_an_agent_factory_that_fails_closes_that_connection_1011_and_the_server_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    def flaky(conn: acp_trio.AgentSideConnection) -> Agent:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("no agent today")
        return Agent(conn)

    app = AcpApp(flaky)
    with trio.fail_after(DEADLINE):
        async with served(app) as url:
            with pytest.raises(acp_trio.ConnectionClosed) as info:
                async with connect_websocket(url, Client) as conn:
                    await initialize(conn)
            assert "1011" in str(info.value)
            async with connect_websocket(url, Client) as conn:
                await initialize(conn)
                assert await new_session(conn) == "s1"
    assert "no agent today" in caplog.text


async def test_wss_with_a_private_certificate_verified_through_ssl_context(tmp_path: Path) -> None:
    import ssl

    pytest.importorskip("cryptography")
    from test_transport_http import self_signed_certificate

    cert, key = self_signed_certificate(tmp_path)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(
                lambda task_status: serve(
                    AcpApp(Agent), "127.0.0.1", 0, certfile=str(cert), keyfile=str(key), task_status=task_status
                )
            )
            url = bound.replace("http://", "wss://").replace("https://", "wss://") + "/acp"
            trusted = ssl.create_default_context(cafile=str(cert))
            async with connect_websocket(url, Client, ssl_context=trusted) as conn:
                assert (await initialize(conn)).protocol_version == 1
            # without it the certificate is not trusted: said at once, not after connect_timeout
            with trio.fail_after(5), pytest.raises(WebSocketConnectError) as info:
                async with connect_websocket(url, Client, connect_timeout=60):
                    raise AssertionError("connected")
            assert "CERTIFICATE_VERIFY_FAILED" in str(info.value) and url in str(info.value)
            assert info.value.status is None
            nursery.cancel_scope.cancel()


async def test_wss_without_ssl_context_uses_the_processs_one_default_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ``wss://`` connection without ``ssl_context=`` shares one context, built at the first
    (building one loads the CA bundle, ~40 ms of CPU); ``SSL_CERT_FILE`` is read per key, so a
    changed variable gets a new context; a caller's ``ssl_context`` is used as given."""
    import ssl

    pytest.importorskip("cryptography")
    from test_transport_http import self_signed_certificate

    from acp_trio.transports import websocket

    cert, key = self_signed_certificate(tmp_path)
    built: list[ssl.SSLContext] = []
    original = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        context = original(*args, **kwargs)
        if not args and not kwargs:
            built.append(context)
        return context

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(
                lambda task_status: serve(
                    AcpApp(Agent), "127.0.0.1", 0, certfile=str(cert), keyfile=str(key), task_status=task_status
                )
            )
            monkeypatch.setattr(websocket, "_default_contexts", {}, raising=False)
            monkeypatch.setattr(ssl, "create_default_context", counting)
            monkeypatch.setenv("SSL_CERT_FILE", str(cert))
            url = bound.replace("http://", "wss://").replace("https://", "wss://") + "/acp"
            for _ in range(3):
                async with connect_websocket(url, Client) as conn:
                    assert (await initialize(conn)).protocol_version == 1
            assert len(built) == 1 and websocket.default_tls_context() is built[0]
            async with connect_websocket(url, Client, ssl_context=original(cafile=str(cert))) as conn:
                await initialize(conn)
            assert len(built) == 1
            monkeypatch.delenv("SSL_CERT_FILE")  # the system's CAs, which do not trust the certificate
            with pytest.raises(WebSocketConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                async with connect_websocket(url, Client):
                    raise AssertionError("connected")
            assert len(built) == 2 and websocket.default_tls_context() is built[1]
            nursery.cancel_scope.cancel()


async def test_a_client_that_never_reads_again_loses_its_tcp_connection_after_twice_the_stall(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import trio_websocket

    from acp_trio.transports import _hypercorn

    lost = trio.Event()
    original = _hypercorn.CoalescingTCPServer._lost

    async def record(self: Any) -> None:
        lost.set()
        await original(self)

    monkeypatch.setattr(_hypercorn.CoalescingTCPServer, "_lost", record)
    Agent.instances.clear()
    app = AcpApp(Agent, output_stall_timeout=0.3)
    with trio.fail_after(DEADLINE):
        async with served(app) as url, trio_websocket.open_websocket_url(url) as ws:
            await start_a_flood_it_never_reads(ws)
            await app.wait_idle()  # the ACP connection is given up on first (the stall)...
            await lost.wait()  # ...then, the client still taking nothing, its TCP connection is dropped
            # what reached the client's socket before is still readable; then the end, with no close frame
            with pytest.raises(trio_websocket.ConnectionClosed) as info:
                while True:
                    await ws.get_message()
            assert info.value.reason is not None and info.value.reason.code == 1006
        assert app.active_connections == 0


def test_the_fast_paths_find_the_library_hooks_they_rely_on() -> None:
    """trio-websocket's reader hook, hypercorn's TCPServer methods and the WebSocket stream hooks of
    ClosingWSStream (close 1007) exist in the installed versions."""
    from hypercorn.protocol import h2, h11
    from hypercorn.protocol.ws_stream import WSStream
    from hypercorn.trio.tcp_server import TCPServer
    from wsproto.connection import Connection

    from acp_trio.transports import _hypercorn, websocket

    assert websocket._batching_class() is not None
    for name in ("run", "protocol_send", "_close", "_read_data"):
        assert callable(getattr(TCPServer, name))
    assert callable(WSStream._handle_events) and callable(Connection.events)
    _hypercorn._use_closing_ws_stream()
    assert h11.WSStream is h2.WSStream is _hypercorn.ClosingWSStream  # type: ignore[attr-defined]
    # the lent reads and direct sends of AcpApp._run (_LentReads, _WebSocketIO.send_now): without these
    # they fall back to hypercorn's reader task and the writer, correct but a task hop slower
    import inspect

    ws_init = inspect.getsource(WSStream.__init__)
    for attribute in ("self.app_put", "self.connection", "self.state", "self.closed"):
        assert attribute in ws_init, attribute
    assert "self.buffer = bytearray(" in inspect.getsource(h11.H11WSConnection.__init__)
    assert "self.stream" in inspect.getsource(h11.H11Protocol.__init__)
    assert callable(getattr(_hypercorn.CoalescingTCPServer, "write_now", None))


async def test_the_client_reader_queues_a_bounded_number_of_bytes_and_keeps_order_and_the_size_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A raw wsproto server sends fragmented and whole messages; the client's batching reader
    stops reading at its byte budget, hands every message over whole and in order, and still
    closes 1009 on one over ``max_message_bytes``."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, Request, TextMessage

    from acp_trio.transports import websocket

    monkeypatch.setattr(websocket, "_QUEUED_BYTES", 64 * 1024)
    sent = [f"{i:04d}" + "x" * 8000 for i in range(100)]

    async def handler(stream: trio.SocketStream) -> None:
        proto = WSConnection(ConnectionType.SERVER)
        while True:
            proto.receive_data(await stream.receive_some(65536))
            if any(isinstance(event, Request) for event in proto.events()):
                break
        out = proto.send(AcceptConnection())
        out += proto.send(TextMessage(data="frag", message_finished=False))
        out += proto.send(TextMessage(data="mented", message_finished=True))
        for text in sent:
            out += proto.send(TextMessage(data=text))
        out += proto.send(TextMessage(data="y" * 200_000))  # over the client's limit
        await stream.send_all(out)
        with trio.move_on_after(DEADLINE):
            while await stream.receive_some(65536):
                pass

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
            port = listeners[0].socket.getsockname()[1]
            async with trio.open_nursery() as client_nursery:
                ws = await websocket._open_websocket(client_nursery, f"ws://127.0.0.1:{port}/acp", None, [], 100_000)
                assert await ws.get_message() == "fragmented"
                ws.taken(len("fragmented"))
                await trio.testing.wait_all_tasks_blocked()
                while ws.room.is_set():  # the reader has filled its budget and parked
                    await trio.testing.wait_all_tasks_blocked()
                assert 64 * 1024 < ws.queued_bytes <= 64 * 1024 + 8004
                got: list[str] = []
                while len(got) < len(sent):
                    got.append(await ws.get_message())
                    ws.taken(len(got[-1]))
                    got.extend(ws.more_messages(65536))
                assert got == sent
                with pytest.raises(Exception) as info:
                    await ws.get_message()
                assert "1009" in repr(info.value) or ws.closed.code == 1009
                client_nursery.cancel_scope.cancel()
            nursery.cancel_scope.cancel()


async def test_the_server_gives_memory_back_once_no_client_has_been_connected_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from acp_trio.transports import _hypercorn

    trims: list[int] = []
    released = trio.Event()

    def fake_trim(pad: int) -> int:
        trims.append(pad)  # called in a worker thread
        trio.from_thread.run_sync(released.set)
        return 1

    monkeypatch.setattr(_hypercorn, "_malloc_trim", lambda: fake_trim)
    app = AcpApp(Agent)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(functools.partial(serve, app, "127.0.0.1", 0, release_memory_when_idle=0.05))
            url = binds[0].replace("http://", "ws://") + "/acp"
            async with connect_websocket(url, Client) as conn:
                await initialize(conn)
                assert trims == []  # not while a client is connected
            await released.wait()
            assert trims == [0]
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("first", "reason"),
    [
        ('{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}', "must be initialize"),
        ('{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":1}}', "must include an ID"),
        ('{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}', "must be initialize"),
    ],
)
async def test_a_first_message_other_than_an_initialize_request_closes_the_websocket_1002(
    first: str, reason: str
) -> None:
    import trio_websocket

    app = AcpApp(Agent)
    with trio.fail_after(DEADLINE):
        async with served(app) as url, trio_websocket.open_websocket_url(url) as ws:
            await ws.send_message(first)
            with pytest.raises(trio_websocket.ConnectionClosed) as info:
                await ws.get_message()
            assert info.value.reason is not None and info.value.reason.code == 1002
            assert reason in (info.value.reason.reason or "")
        await app.wait_idle()


async def test_garbage_before_initialize_is_answered_and_the_websocket_stays_open() -> None:
    import json

    import trio_websocket

    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent)) as url, trio_websocket.open_websocket_url(url) as ws:
            await ws.send_message("{not json")
            assert json.loads(await ws.get_message())["error"]["code"] == -32700
            await ws.send_message('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}')
            assert json.loads(await ws.get_message())["result"]["protocolVersion"] == 1


async def test_a_connection_over_max_connections_is_refused_503_until_one_ends() -> None:
    app = AcpApp(Agent, max_connections=1)
    with trio.fail_after(DEADLINE):
        async with served(app) as url:
            async with connect_websocket(url, Client) as first:
                await initialize(first)
                with pytest.raises(WebSocketConnectError) as info:
                    async with connect_websocket(url, Client):
                        raise AssertionError("connected")
                assert info.value.status == 503 and "max_connections 1" in info.value.body
            await app.wait_idle()
            async with connect_websocket(url, Client) as again:  # the first has ended: room again
                assert (await initialize(again)).protocol_version == 1
    with pytest.raises(ValueError, match="max_connections"):
        AcpApp(Agent, max_connections=0)


async def test_cancelling_the_server_with_a_client_connected_ends_at_once() -> None:
    """The coalescing writer is cancelled with the server; the close frame written after it goes
    out directly instead of waiting for a writer that is gone (5 s of FLUSH_TIMEOUT before)."""
    import trio_websocket

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as outer:
            server_scope = trio.CancelScope()
            stopped = trio.Event()
            bound: list[str] = []
            started = trio.Event()

            async def run_server() -> None:
                with server_scope:
                    async with trio.open_nursery() as nursery:
                        bound.extend(await nursery.start(serve, AcpApp(Agent), "127.0.0.1", 0))
                        started.set()
                stopped.set()

            outer.start_soon(run_server)
            await started.wait()
            url = bound[0].replace("http://", "ws://") + "/acp"
            async with trio_websocket.open_websocket_url(url) as ws:
                await ws.send_message('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}')
                await ws.get_message()
                server_scope.cancel()
                with trio.fail_after(2):
                    await stopped.wait()


@pytest.mark.parametrize("compression", [False, True])
async def test_permessage_deflate_is_declined_unless_asked_for(compression: bool) -> None:
    """Node's clients and browsers offer permessage-deflate; hypercorn would accept it on its own."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, Request
    from wsproto.extensions import PerMessageDeflate

    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent, websocket_compression=compression)) as url:
            host, port = url.split("/")[2].split(":")
            stream = await trio.open_tcp_stream(host, int(port))
            proto = WSConnection(ConnectionType.CLIENT)
            await stream.send_all(
                proto.send(Request(host=f"{host}:{port}", target="/acp", extensions=[PerMessageDeflate()]))
            )
            accepted = None
            while accepted is None:
                proto.receive_data(await stream.receive_some(65536))
                accepted = next((e for e in proto.events() if isinstance(e, AcceptConnection)), None)
            names = [extension.name for extension in accepted.extensions]
            assert names == (["permessage-deflate"] if compression else [])
            await stream.aclose()


# -- the fast paths: eager sends, one yield a read, batches of messages -----------------------------


async def tcp_pair(receive_buffer: int | None = None) -> tuple[trio.SocketStream, trio.SocketStream]:
    """A connected TCP pair on 127.0.0.1: (the accepted side, the connecting side, whose receive
    buffer is set to ``receive_buffer`` bytes before it connects, so a writer fills it soon)."""
    import socket

    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    sock = trio.socket.socket()
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    await sock.connect(listener.socket.getsockname())
    accepted = await listener.accept()
    await listener.aclose()
    if receive_buffer is not None:
        accepted.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, receive_buffer)
    return accepted, trio.SocketStream(sock)


class Protocol:
    """Stands for hypercorn's protocol under a bare CoalescingTCPServer: records the events it is given."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.closed = trio.Event()

    async def handle(self, event: Any) -> None:
        from hypercorn.events import Closed

        self.events.append(event)
        if isinstance(event, Closed):
            self.closed.set()
        await trio.lowlevel.checkpoint()


def bare_output(stream: trio.SocketStream) -> Any:
    """A CoalescingTCPServer over ``stream`` with its output state set up and no task running."""
    from hypercorn.config import Config
    from hypercorn.trio.worker_context import WorkerContext

    from acp_trio.transports._hypercorn import CoalescingTCPServer

    server = CoalescingTCPServer(None, Config(), WorkerContext(None), {}, stream)  # type: ignore[arg-type]
    server.protocol = Protocol()  # type: ignore[assignment]
    server._start_output()
    return server


async def send_held(server: Any, *frames: bytes) -> None:
    from hypercorn.events import RawData

    server.hold()
    try:
        for frame in frames:
            await server.protocol_send(RawData(data=frame))
    finally:
        server.release()


async def read_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        more = await stream.receive_some(65536)
        assert more, "the peer closed early"
        data += more
    return bytes(data)


async def test_held_frames_reach_the_socket_at_release_without_the_writer_task_and_in_order() -> None:
    """The eager path: with no writer task at all, what was held goes out at ``release`` (one send);
    once the socket would block, the rest waits for the writer, which sends it after, in order."""
    with trio.fail_after(DEADLINE):
        ours, peer = await tcp_pair(receive_buffer=4096)
        server = bare_output(ours)
        await send_held(server, b"one,", b"two,")
        assert await read_exactly(peer, 8) == b"one,two,"  # no writer task exists: release sent them
        sent = bytearray()
        frame = 0
        while not server._pending:  # until the socket takes no more: the remainder stays buffered
            assert server.can_send_now()
            data = f"[{frame:05d}]".encode() * 200
            await send_held(server, data)
            sent += data
            frame += 1
        assert frame > 1  # some went out eagerly before the socket filled up
        assert server._ready.is_set() and not server._flushed.is_set()  # the writer is called for the rest
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._write_buffered)
            received = bytearray()

            async def read_all() -> None:
                while not received.endswith(b"END"):
                    received.extend(await peer.receive_some(65536))

            nursery.start_soon(read_all)
            from hypercorn.events import RawData

            for more in range(40):  # eager and buffered sends, and unheld ones, while the writer works
                data = f"<{more:03d}>".encode() * 300
                if more % 3:
                    await send_held(server, data)
                else:
                    await server.protocol_send(RawData(data=data))
                sent += data
            await send_held(server, b"END")
            sent += b"END"
            await server._flushed.wait()
            assert not server._pending
            nursery.cancel_scope.cancel()
        while not received.endswith(b"END"):
            received += await peer.receive_some(65536)
        assert bytes(received) == bytes(sent)
        await ours.aclose()
        await peer.aclose()


async def test_a_send_error_at_release_is_left_to_the_writer_which_reports_the_lost_connection() -> None:
    import socket
    import struct

    with trio.fail_after(DEADLINE):
        ours, peer = await tcp_pair()
        server = bare_output(ours)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._write_buffered)
            peer.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await peer.aclose()  # a reset: the next sends fail
            while not server.protocol.closed.is_set():
                await send_held(server, b"x" * 1000)
                await trio.testing.wait_all_tasks_blocked()
            assert not server.can_send_now()  # broken: nothing is taken eagerly any more
            nursery.cancel_scope.cancel()
        await ours.aclose()


async def test_a_message_of_several_full_reads_reaches_the_agent_whole() -> None:
    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent)) as url, connect_websocket(url, Client) as conn:
            await initialize(conn)
            request = v1.NewSessionRequest(cwd="/" + "z" * 300_000, mcp_servers=[])  # over four 64 KiB reads
            assert (await conn.agent.session_new(request)).session_id == "s1"
            assert await new_session(conn) == "s2"


async def test_the_server_reader_hands_hypercorn_every_byte_then_the_end_of_input() -> None:
    """Reads of 64 KiB (full: checkpoint, then read) and smaller ones (wait, then read), then EOF."""
    from hypercorn.events import Closed, RawData

    with trio.fail_after(DEADLINE):
        ours, peer = await tcp_pair()
        server = bare_output(ours)
        sent = bytes(range(256)) * 1000  # 256,000 bytes: several full reads
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._read_data)
            await peer.send_all(sent)
            await trio.testing.wait_all_tasks_blocked()
            await peer.send_all(b"and a little more")
            await peer.aclose()
        events = server.protocol.events
        assert all(isinstance(event, RawData) for event in events[:-1]) and isinstance(events[-1], Closed)
        assert b"".join(event.data for event in events[:-1]) == sent + b"and a little more"
        assert events[-2].data == b""  # the end of input, as hypercorn's own reader hands it
        await ours.aclose()


async def test_the_server_reader_honours_hypercorns_read_timeout(autojump_clock: trio.abc.Clock) -> None:
    from hypercorn.events import Closed

    ours, peer = await tcp_pair()
    server = bare_output(ours)
    server.config.read_timeout = 30
    with trio.fail_after(60):
        await server._read_data()  # the peer says nothing: the reader gives up after read_timeout
    assert [type(event) for event in server.protocol.events] == [Closed]
    await ours.aclose()
    await peer.aclose()


async def test_messages_received_together_are_handed_over_in_order_then_the_limit_closes_1009() -> None:
    """The server takes every message already received in one go; one over the limit among them
    ends the input after those before it (answered), and the WebSocket closes 1009."""
    to_app, from_client = trio.open_memory_channel[dict[str, Any]](10)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        await trio.lowlevel.checkpoint()

    for message in (
        {"type": "websocket.connect"},
        {
            "type": "websocket.receive",
            "text": '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}',
        },
        {"type": "websocket.receive", "bytes": b"ignored", "text": None},
        {
            "type": "websocket.receive",
            "text": '{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}',
        },
        {"type": "websocket.receive", "text": "x" * 5000},
        {
            "type": "websocket.receive",
            "text": '{"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}',
        },
    ):
        to_app.send_nowait(message)
    app = AcpApp(Agent, max_message_bytes=4096)
    scope = {"type": "websocket", "path": "/acp", "headers": [], "subprotocols": [], "http_version": "1.1"}
    with trio.fail_after(DEADLINE):
        await app(scope, from_client.receive, send)
    texts = [m["text"] for m in sent if m["type"] == "websocket.send"]
    assert ['"id":1' in texts[0], '"id":2' in texts[1], len(texts)] == [True, True, 2]
    assert sent[0]["type"] == "websocket.accept"
    assert sent[-1]["type"] == "websocket.close" and sent[-1]["code"] == 1009


async def test_a_client_that_reads_late_gets_every_update_in_order_through_eager_and_queued_sends() -> None:
    """The server sends eagerly while the socket takes its output, queues (the pump) once it does
    not, and sends eagerly again after: the client, reading only once everything is blocked, gets
    every update once and in order, then the turn's answer."""

    import trio_websocket

    count = 600  # about 5 MB: more than the sockets hold
    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent)) as url, trio_websocket.open_websocket_url(url) as ws:
            await _start_big_turn(ws, count)
            await trio.testing.wait_all_tasks_blocked()  # the server waits on the client's full socket
            assert await _read_big_turn(ws) == list(range(count))


async def _start_big_turn(ws: Any, count: int) -> None:
    """On a raw trio-websocket ``ws``: initialize, session/new, then a prompt streaming ``count``
    updates of about 8 KB (the test agent's ``big``), without reading them."""
    await ws.send_message('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}')
    await ws.get_message()
    await ws.send_message('{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}')
    await ws.get_message()
    await ws.send_message(
        '{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":'
        f'{{"sessionId":"s1","prompt":[{{"type":"text","text":"big {count}"}}]}}}}'
    )


async def _read_big_turn(ws: Any) -> list[int]:
    """The numbers of the updates read until the prompt's answer, which must be ``end_turn``."""
    import json

    seen: list[int] = []
    while True:
        message = json.loads(await ws.get_message())
        if "id" in message:
            assert message["result"]["stopReason"] == "end_turn"
            return seen
        seen.append(int(message["params"]["update"]["content"]["text"][:6]))


async def test_the_client_sends_a_batch_at_once_and_through_the_stream_when_the_socket_is_full() -> None:
    """``send_texts``: frames a batch with the library's wsproto connection; what the socket does not
    take, or a batch sent while another sender holds the lock, goes through ``send_all`` (False);
    the server gets every message once, in order."""
    import socket

    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, Request, TextMessage

    from acp_trio.transports import websocket

    got: list[str] = []
    done = trio.Event()
    reading = trio.Event()

    async def handler(stream: trio.SocketStream) -> None:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        proto = WSConnection(ConnectionType.SERVER)
        while True:
            proto.receive_data(await stream.receive_some(65536))
            if any(isinstance(event, Request) for event in proto.events()):
                break
        await stream.send_all(proto.send(AcceptConnection()))
        await reading.wait()  # the client fills its socket first
        parts: list[str] = []
        while not done.is_set():
            proto.receive_data(await stream.receive_some(65536))
            for event in proto.events():
                if isinstance(event, TextMessage):  # a message may come in parts
                    parts.append(event.data)
                    if event.message_finished:
                        got.append("".join(parts))
                        parts.clear()
                        if got[-1] == "END":
                            done.set()

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
            port = listeners[0].socket.getsockname()[1]
            async with trio.open_nursery() as client_nursery:
                ws = await websocket._open_websocket(client_nursery, f"ws://127.0.0.1:{port}/acp", None, [], 1 << 20)
                ws._stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
                assert await ws.send_texts(["a", "b"]) is True  # an empty socket takes them at once
                expected = ["a", "b"]
                results: list[bool] = []

                async def flood() -> None:
                    for i in range(100):
                        batch = [f"{i:04d}-{j}" + "w" * 4000 for j in range(5)]
                        results.append(await ws.send_texts(batch))
                        expected.extend(batch)

                async with trio.open_nursery() as flooding:
                    flooding.start_soon(flood)
                    await trio.testing.wait_all_tasks_blocked()  # the socket is full: flood waits in send_all
                    reading.set()
                assert False in results  # some waited in send_all for the socket
                outcome: list[bool] = []

                async def held_batch() -> None:
                    outcome.append(await ws.send_texts(["held"]))

                async with trio.open_nursery() as waiting:
                    await ws._stream_lock.acquire()  # another sender (a pong, the close) is sending
                    waiting.start_soon(held_batch)
                    await trio.testing.wait_all_tasks_blocked()
                    assert outcome == []  # the batch waits for the lock
                    ws._stream_lock.release()
                assert outcome == [False]
                expected.append("held")
                await ws.send_texts(["END"])
                expected.append("END")
                await done.wait()
                assert got == expected
                client_nursery.cancel_scope.cancel()
            nursery.cancel_scope.cancel()


async def test_a_line_stream_whose_batch_went_out_at_once_does_not_yield_but_is_still_cancellable() -> None:
    from acp_trio.transports._lines import LineSendStream

    batches: list[list[bytes]] = []
    at_once = True

    async def send_lines(lines: list[bytes]) -> bool:
        batches.append(lines)
        return at_once

    async def send_line(line: bytes) -> None:
        raise AssertionError("send_lines is used")

    stream = LineSendStream(send_line, send_lines=send_lines)
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await stream.send_all(b'{"a":1}\n\n{"b":2}\n{"c"')  # all at once: no schedule point
        assert ran == [] and batches == [[b'{"a":1}', b'{"b":2}']]
        at_once = False
        with trio.testing.assert_checkpoints():  # waited: a checkpoint, as trio streams have
            await stream.send_all(b":3}\n")
        assert batches[-1] == [b'{"c":3}']
    at_once = True
    with trio.CancelScope() as scope:
        scope.cancel()
        await stream.send_all(b'{"d":4}\n')
    assert scope.cancelled_caught and batches[-1] == [b'{"d":4}']  # sent, then the cancellation


async def test_lent_reads_go_to_the_borrower_then_back_to_hypercorns_reader_at_the_end_of_input() -> None:
    """lend_reads interrupts the reader's wait for the socket; while lent, read_inline reads (in the
    borrower's task) and hands hypercorn's protocol the same bytes; at the end of input it gives the
    reads back, and hypercorn's reader reads the end itself and closes as it always does."""
    from hypercorn.events import Closed, RawData

    with trio.fail_after(DEADLINE):
        ours, peer = await tcp_pair()
        server = bare_output(ours)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._read_data)
            await peer.send_all(b"before")
            await trio.testing.wait_all_tasks_blocked()  # hypercorn's reader read it and waits for more
            assert [event.data for event in server.protocol.events] == [b"before"]
            assert await server.lend_reads()
            await peer.send_all(b"lent")
            assert await server.read_inline()  # in this task
            assert server.protocol.events[-1].data == b"lent"
            await trio.testing.wait_all_tasks_blocked()
            assert len(server.protocol.events) == 2  # hypercorn's reader did not read meanwhile
            await peer.aclose()
            assert not await server.read_inline()  # the end: the reads go back
        events = server.protocol.events
        assert [type(event) for event in events] == [RawData, RawData, RawData, Closed]
        assert [event.data for event in events[:3]] == [b"before", b"lent", b""]
        assert not await server.lend_reads()  # nothing left to lend
        await ours.aclose()


async def test_the_servers_connection_reads_its_websocket_itself_and_sees_the_clients_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under serve(), what the client sends is read by the ACP connection's task (read_inline), not
    handed over by hypercorn's reader; the close handshake at the end still ends the server's side."""
    from acp_trio.transports._hypercorn import CoalescingTCPServer

    readers: set[trio.lowlevel.Task] = set()
    read_inline = CoalescingTCPServer.read_inline

    async def counted(self: CoalescingTCPServer, *args: Any) -> bool:
        readers.add(trio.lowlevel.current_task())
        return await read_inline(self, *args)

    monkeypatch.setattr(CoalescingTCPServer, "read_inline", counted)
    Agent.instances.clear()
    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent)) as url:
            async with connect_websocket(url, Client) as conn:
                await initialize(conn)
                sid = await new_session(conn)
                await conn.agent.session_prompt(prompt(sid, "ask"))
                assert client_of(conn).texts == ["chosen allow"]
            assert readers and all("reader" in task.name or "requests" in task.name for task in readers)
            await Agent.instances[0].conn.connection.wait_closed()  # the client's close reached it


async def test_the_client_sends_at_once_without_a_task_and_what_the_socket_leaves_goes_first_in_order() -> None:
    """``send_texts_now``: sends without yielding; while the lock is held it sends nothing (False);
    what a full socket does not take is sent by a task before any later frame, from send_texts_now,
    send_texts or the library's own _send (a ping here): the server gets every message once, in order."""
    import socket

    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, Ping, Request, TextMessage

    from acp_trio.transports import websocket

    got: list[str] = []
    done = trio.Event()
    reading = trio.Event()

    async def handler(stream: trio.SocketStream) -> None:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        proto = WSConnection(ConnectionType.SERVER)
        while True:
            proto.receive_data(await stream.receive_some(65536))
            if any(isinstance(event, Request) for event in proto.events()):
                break
        await stream.send_all(proto.send(AcceptConnection()))
        await reading.wait()  # the client fills its socket first
        parts: list[str] = []
        while not done.is_set():
            proto.receive_data(await stream.receive_some(65536))
            for event in proto.events():
                if isinstance(event, Ping):
                    got.append("PING")
                elif isinstance(event, TextMessage):
                    parts.append(event.data)
                    if event.message_finished:
                        got.append("".join(parts))
                        parts.clear()
                        if got[-1] == "END":
                            done.set()

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
            port = listeners[0].socket.getsockname()[1]
            async with trio.open_nursery() as client_nursery:
                ws = await websocket._open_websocket(client_nursery, f"ws://127.0.0.1:{port}/acp", None, [], 1 << 20)
                ws._stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
                expected: list[str] = []
                await ws._stream_lock.acquire()  # another sender holds the lock: nothing is sent
                assert ws.send_texts_now(["never"]) is False
                ws._stream_lock.release()
                left = False
                i = 0
                while not left:  # until the socket leaves part of a batch to the task
                    batch = [f"{i:04d}-{j}" + "w" * 4000 for j in range(5)]
                    assert ws.send_texts_now(batch) is True  # (no await: nothing else ran)
                    expected.extend(batch)
                    left = ws._rest is not None
                    i += 1
                assert ws.send_texts_now(["after"]) is False  # the rest goes first
                sent_later: list[bool] = []

                async def later() -> None:
                    sent_later.append(await ws.send_texts(["later"]))

                async with trio.open_nursery() as senders:
                    senders.start_soon(later)
                    senders.start_soon(ws._send, Ping(payload=b"p"))  # the library's own frames' path
                    await trio.testing.wait_all_tasks_blocked()
                    assert sent_later == []  # all wait for the socket, behind the rest
                    reading.set()
                assert sent_later == [False] and ws._rest is None
                await trio.testing.wait_all_tasks_blocked()  # (the rest's task, if a sender sent it, has ended)
                assert ws.send_texts_now(["END"]) is True
                await done.wait()
                assert [m for m in got if m != "PING"] == [*expected, "later", "END"]
                assert got.count("PING") == 1 and got.index("PING") >= len(expected)  # after the rest
                client_nursery.cancel_scope.cancel()
            nursery.cancel_scope.cancel()


async def test_a_line_streams_synchronous_send_takes_whole_lines_or_nothing() -> None:
    from acp_trio.transports._lines import LineSendStream

    taken: list[list[bytes]] = []
    accept = [True]

    def now(lines: list[bytes]) -> bool:
        if accept[0]:
            taken.append(lines)
        return accept[0]

    async def never(line: bytes) -> None:
        raise AssertionError("not used")

    assert LineSendStream(never).send_now is None  # no synchronous sender given
    stream = LineSendStream(never, send_lines_now=now)
    assert stream.send_now is not None
    assert stream.send_now(b'{"a":1}\n\n{"b":2}\n') == 17  # all taken; blank lines are no messages
    assert taken == [[b'{"a":1}', b'{"b":2}']]
    assert stream.send_now(b'{"c":3}') == 0  # not a complete line: left to send_all
    accept[0] = False
    assert stream.send_now(b'{"d":4}\n') == 0  # the transport would wait: none sent
    await stream.aclose()
    accept[0] = True
    assert stream.send_now(b'{"e":5}\n') == 0  # closed
    assert taken == [[b'{"a":1}', b'{"b":2}']]


async def test_the_server_sends_a_request_from_the_handlers_task_and_answers_from_the_readers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under serve(), a request the agent sends and the answers of a read go to the socket from the
    task that made them (CoalescingTCPServer.write_now), not through the connection's writer task,
    and the client's answers likewise (send_texts_now); a streamed turn still arrives in order."""
    from acp_trio.transports import websocket
    from acp_trio.transports._hypercorn import CoalescingTCPServer

    writers: dict[str, set[str]] = {"server": set(), "client": set()}
    write_now = CoalescingTCPServer.write_now
    cls = websocket._batching_class()
    send_texts_now = cls.send_texts_now

    def server_write(self: CoalescingTCPServer, data: bytes) -> bool:
        writers["server"].add(trio.lowlevel.current_task().name)
        return write_now(self, data)

    def client_write(self: Any, texts: list[str]) -> bool:
        writers["client"].add(trio.lowlevel.current_task().name)
        ok: bool = send_texts_now(self, texts)
        return ok

    monkeypatch.setattr(CoalescingTCPServer, "write_now", server_write)
    monkeypatch.setattr(cls, "send_texts_now", client_write)
    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent)) as url, connect_websocket(url, Client) as conn:
            await initialize(conn)
            sid = await new_session(conn)
            await conn.agent.session_prompt(prompt(sid, "ask"))
            await conn.agent.session_prompt(prompt(sid, f"stream {STREAMED}"))
            texts = client_of(conn).texts
            assert texts == ["chosen allow", *(f"{sid}:{i}" for i in range(STREAMED))]
    # the connections' readers and request tasks, and the test's (its requests): never a writer task
    assert writers["server"] and writers["client"]
    for names in writers.values():
        assert all(name.endswith((": reader", ": requests")) or name.startswith("<test ") for name in names), names


async def test_the_clients_connection_reads_its_websocket_itself_and_sees_the_servers_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """connect_websocket: after the handshake, what the server sends is read by the ACP connection's
    reader (receive_inline), not trio-websocket's reader task; a close from the server (1009 here)
    still reaches the client's requests with its code."""
    from acp_trio.transports import websocket

    cls = websocket._batching_class()
    receive_inline = cls.receive_inline
    readers: set[str] = set()

    async def counted(self: Any) -> bool:
        readers.add(trio.lowlevel.current_task().name)
        ok: bool = await receive_inline(self)
        return ok

    monkeypatch.setattr(cls, "receive_inline", counted)
    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent, max_message_bytes=10_000)) as url, connect_websocket(url, Client) as conn:
            await initialize(conn)
            sid = await new_session(conn)
            await conn.agent.session_prompt(prompt(sid, f"stream {STREAMED}"))
            assert client_of(conn).texts == [f"{sid}:{i}" for i in range(STREAMED)]
            assert readers == {"client: reader"}
            with pytest.raises(acp_trio.ConnectionClosed, match="1009"):
                await conn.agent.session_new(v1.NewSessionRequest(cwd="/" + "z" * 20_000, mcp_servers=[]))


async def test_a_handler_reading_for_its_answer_on_the_server_is_woken_when_the_connection_closes() -> None:
    """Over a WebSocket, as over a pipe, the agent's task that waits for the answer to its next request
    reads the input itself (the reader role, given with the answer to its previous one); closing the
    connection meanwhile wakes it at once (its wait on the socket is cancelled) and ends it."""

    class Silent(Client):
        async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
            if self.permission_requests == 0:
                return await super().session_request_permission(params)
            self.permission_requests += 1
            await trio.sleep_forever()
            raise AssertionError

    errors: list[BaseException] = []

    class Asking(Agent):
        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            request = v1.RequestPermissionRequest(
                session_id=params.session_id,
                tool_call=v1.ToolCallUpdate(tool_call_id="t1"),
                options=[v1.PermissionOption(option_id="allow", name="Allow", kind="allow_once")],
            )
            try:
                for _ in range(2):  # the second is never answered
                    await self.conn.client.session_request_permission(request)
            except BaseException as exc:
                errors.append(exc)
                raise
            return v1.PromptResponse(stop_reason="end_turn")

    Agent.instances.clear()
    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Asking)) as url, connect_websocket(url, Silent) as conn:
            await initialize(conn)
            sid = await new_session(conn)
            agent_conn = Agent.instances[0].conn.connection
            async with trio.open_nursery() as nursery:

                async def ask() -> None:
                    with pytest.raises(acp_trio.ConnectionClosed):
                        await conn.agent.session_prompt(prompt(sid, "ask twice"))

                nursery.start_soon(ask)
                while agent_conn._role_holder is None or not agent_conn._role_waiting:
                    await trio.sleep(0.01)  # the handler's task reads, waiting for the second answer
                await agent_conn.aclose()
            # closing cancels the running handler (as over a pipe); it was woken, not left reading
            assert len(errors) == 1 and isinstance(errors[0], (trio.Cancelled, acp_trio.ConnectionClosed))
            assert agent_conn._role_holder is None


def _server_tasks() -> tuple[int, int]:
    """(nurseries, pump tasks) under the task that runs :func:`serve` in this trio run."""
    todo = [trio.lowlevel.current_root_task()]
    servers = []
    while todo:
        task = todo.pop()
        if getattr(task.coro, "__qualname__", "") == "serve":
            servers.append(task)
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    assert len(servers) == 1
    nurseries = pumps = 0
    todo = servers
    while todo:
        task = todo.pop()
        pumps += getattr(task.coro, "__qualname__", "") == "_WebSocketIO.pump"
        for nursery in task.child_nurseries:
            nurseries += 1
            todo.extend(nursery.child_tasks)
    return nurseries, pumps


async def test_an_idle_websocket_connection_holds_no_pump_and_no_nursery_of_its_own_under_serve() -> None:
    """Memory per idle connection: a connection whose answers all went out at once holds no pump
    task, and a pump (when one is needed) runs in the lifespan's nursery, not in a nursery per
    connection: 20 idle connections add three nurseries each (hypercorn's TCP connection's and
    WebSocket stream's, and the ACP connection's), where a pump nursery per connection made four."""
    app = AcpApp(Agent)
    with trio.fail_after(DEADLINE):
        async with served(app) as url:
            await trio.testing.wait_all_tasks_blocked()
            nurseries_before, _ = _server_tasks()
            async with contextlib.AsyncExitStack() as stack:
                for _ in range(20):
                    conn = await stack.enter_async_context(connect_websocket(url, Client))
                    await initialize(conn)
                    await new_session(conn)
                await trio.testing.wait_all_tasks_blocked()
                nurseries, pumps = _server_tasks()
            assert pumps == 0
            assert (nurseries - nurseries_before) / 20 <= 3, (nurseries_before, nurseries)


async def test_an_idle_websocket_connection_makes_no_lot_scope_or_closure_it_does_not_use() -> None:
    """Objects per idle connection: memory, and the garbage collector's work (a full collection
    visits every live object: a server opening connections pays for each object its open ones
    hold).  Under serve(), an idle connection's parking lots (the Connection's written and serial
    lots, the lent reads' arrival lot), its pump's cancel scope and its allowed-methods set are made
    when first needed, until then one shared object or none; its routes' handlers and its direct
    sender are objects and methods, not closures (a function, a tuple and a cell per variable each)."""
    Agent.instances.clear()
    with trio.fail_after(DEADLINE):
        async with (
            served(AcpApp(Agent)) as url,
            connect_websocket(url, Client) as a,
            connect_websocket(url, Client) as b,
        ):
            for conn in (a, b):
                await initialize(conn)
                await new_session(conn)
            await trio.testing.wait_all_tasks_blocked()
            first, second = (agent.conn for agent in Agent.instances)
            assert first.connection._written_lot is second.connection._written_lot
            assert first.connection._serial_lot is second.connection._serial_lot
            assert first._allowed is second._allowed and not first._allowed
            assert first.sessions._on_open == first.sessions._on_end == ()
            for route in first.connection.routes.values():
                for hook in (route.handler, route.input_ended_result, route.on_receive):
                    assert getattr(hook, "__closure__", None) is None, (route.method, hook)
            send_stream: Any = first.connection._send_stream  # a MessageSendStream over the _WebSocketIO
            io = send_stream._send_text.__self__
            assert io.pump_scope is None and io.pump_done is None
            assert io.direct is not None  # (hypercorn's stream: answers went out directly)
            assert io.receive.__self__.arrived is None  # the lent reads: nobody waited for hypercorn's reader


async def test_without_lifespan_a_late_reader_still_gets_every_update_through_the_pump() -> None:
    """An ASGI server that runs no lifespan (here: a wrapper that answers it itself) gives the
    connection no lifespan nursery: the pump then runs in a nursery of the connection's own, and
    a client that reads only once the server is blocked gets every update in order."""

    import trio_websocket

    app = AcpApp(Agent)

    async def without_lifespan(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (event := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            del event
            await send({"type": "lifespan.shutdown.complete"})
            return
        await app(scope, receive, send)

    count = 600  # about 5 MB: more than the sockets hold, so the pump carries part of it
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(serve, without_lifespan, "127.0.0.1", 0)
            url = binds[0].replace("http://", "ws://") + "/acp"
            async with trio_websocket.open_websocket_url(url) as ws:
                await _start_big_turn(ws, count)
                await trio.testing.wait_all_tasks_blocked()
                assert app._nursery is None
                assert _server_tasks()[1] == 1  # the pump, in the connection's nursery
                assert await _read_big_turn(ws) == list(range(count))
            nursery.cancel_scope.cancel()

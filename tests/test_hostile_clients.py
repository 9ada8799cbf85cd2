"""The remote transports against hostile clients: the attacker's checklist (issue 32).

Each test plays one attack, on the wire, against a server on 127.0.0.1 and asserts what the server
answers and that the attack leaves other clients (and the server) unharmed:

- the bearer token on every route (WebSocket upgrade, ``POST``, ``GET``, ``DELETE``): missing,
  wrong, another scheme, the token in another case; the scheme in any case is accepted (RFC 7235
  § 2.1), with one or more spaces before the token;
- a browser's hostile ``Origin`` on every route, even with the token; a ``Host`` that is not a
  loopback name on a loopback server without a token (DNS rebinding);
- guessed or borrowed connection ids and session ids: a second client can neither read the first
  one's SSE streams nor post into its connection, and a session id it names is its own;
- malformed WebSocket input: binary frames, invalid JSON, a JSON-RPC batch (refused on both
  transports alike), text that is not UTF-8 (close ``1007``), frames that break RFC 6455 otherwise
  (``1002``), a message over the limit (``1009``, ``413`` over HTTP);
- slowloris: request headers that never end, headers over h11's limit, a body that stops coming;
- ``max_connections`` (the bridge's ``--max-connections``: no agent process starts for a refused
  connection), and ``idle_timeout`` against an ``initialize`` (or a held request) slower than it.

What is already pinned elsewhere is not repeated (tests/test_transport_websocket.py,
tests/test_transport_http_server.py, tests/test_bridge.py); a client that never reads is
tests/test_backpressure.py's.  One real ``python -m acp_trio.demo --serve`` process (with a token)
takes the attacks that need no special limits, one real ``python -m acp_trio.bridge --listen``
the ``--max-connections`` one; the rest run in-process (hypercorn through ``served``, or the ASGI
app driven directly with trio's autojump clock).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("hypercorn")
pytest.importorskip("trio_websocket")
pytest.importorskip("httpx2")

import httpx2
from test_transport_http_server import JSON, running
from test_transport_websocket import Agent, Client, client_of, http_request, initialize, new_session, prompt

from acp_trio.transports.asgi import AcpApp, served
from acp_trio.transports.http import connect_http

DEADLINE = 30
TOKEN = "s3cret-Token"
posix_only = pytest.mark.skipif(os.name != "posix", reason="the bridged agents are sh and cat")
INIT = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'
BATCH = b'[{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}]'
BATCH_REFUSED = {"code": -32600, "message": "Invalid request: JSON-RPC batches are not supported"}


# -- a WebSocket client that writes frames as given -------------------------------------------------
class RawWebSocket:
    """A WebSocket client over a bare TCP stream: the frames it sends are built byte by byte, so
    they may break RFC 6455 (text that is not UTF-8) as a well-behaved library never would.

    Frames go masked with the all-zero key (RFC 6455 § 5.3: a client masks every frame; a zero key
    leaves the payload as it is), and what the server sends is parsed as frames."""

    def __init__(self, stream: trio.SocketStream, answer: bytes, rest: bytes) -> None:
        self.stream = stream
        status_line, *fields = answer.decode("latin-1").split("\r\n")
        self.status = int(status_line.split(" ", 2)[1])
        self.headers = {name.lower(): value.strip() for name, _, value in (f.partition(":") for f in fields)}
        self.buffer = rest

    @classmethod
    @asynccontextmanager
    async def open(cls, url: str, headers: dict[str, str] | None = None) -> AsyncIterator[RawWebSocket]:
        """Connect to ``url`` (``ws://host:port/path``) and send the upgrade; ``status`` is the answer's."""
        host_port, _, path = url.split("//", 1)[1].partition("/")
        host, port = host_port.rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        fields = {
            "Host": host_port,
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version": "13",
            **(headers or {}),
        }
        head = f"GET /{path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
        async with stream:
            await stream.send_all(head.encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some()
                assert chunk, f"the server closed during the handshake: {data!r}"
                data += chunk
            answer, _, rest = data.partition(b"\r\n\r\n")
            yield cls(stream, answer, rest)

    async def send(self, payload: bytes | str, opcode: int = 0x1) -> None:
        """One frame, ``fin`` set (``0x1`` text, ``0x2`` binary); a ``str`` is sent as UTF-8."""
        data = payload.encode() if isinstance(payload, str) else payload
        size = len(data)
        if size < 126:
            length = bytes([0x80 | size])
        elif size < 1 << 16:
            length = bytes([0x80 | 126]) + size.to_bytes(2, "big")
        else:
            length = bytes([0x80 | 127]) + size.to_bytes(8, "big")
        await self.stream.send_all(bytes([0x80 | opcode]) + length + b"\0\0\0\0" + data)

    async def _take(self, size: int) -> bytes | None:
        while len(self.buffer) < size:
            try:
                chunk = await self.stream.receive_some()
            except trio.BrokenResourceError:  # reset: the server closed first
                return None
            if not chunk:
                return None
            self.buffer += chunk
        taken, self.buffer = self.buffer[:size], self.buffer[size:]
        return taken

    async def receive(self) -> tuple[int, bytes] | None:
        """The next frame from the server as ``(opcode, payload)``; ``None`` when the TCP connection ended."""
        head = await self._take(2)
        if head is None:
            return None
        size = head[1] & 0x7F
        if size >= 126:
            extended = await self._take(2 if size == 126 else 8)
            assert extended is not None
            size = int.from_bytes(extended, "big")
        payload = await self._take(size)
        assert payload is not None
        return head[0] & 0x0F, payload

    async def message(self) -> Any:
        """The next text frame, parsed (a close frame fails the test)."""
        frame = await self.receive()
        assert frame is not None and frame[0] == 0x1, frame
        return json.loads(frame[1])

    async def closed_with(self) -> tuple[int, str]:
        """Read until the server's close frame and answer it (RFC 6455 § 5.5.1); its ``(code, reason)``.
        The TCP connection must end after it."""
        while (frame := await self.receive()) is not None:
            if frame[0] == 0x8:
                try:
                    await self.send(frame[1][:2], opcode=0x8)
                except trio.BrokenResourceError:
                    pass  # the server failed the connection (RFC 6455 § 7.1.7) without waiting for the answer
                assert await self.receive() is None  # then the server closes the TCP connection
                return int.from_bytes(frame[1][:2], "big"), frame[1][2:].decode()
        raise AssertionError("the TCP connection ended without a close frame")


# -- a real demo server, with a token ----------------------------------------------------------------
def _start(command: list[str], marker: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``command`` (its own process group) and wait for the stderr line containing ``marker``;
    its stderr is drained by a thread from then on.  Returns the process and that line."""
    process = subprocess.Popen(command, stderr=subprocess.PIPE, start_new_session=True)
    assert process.stderr is not None
    watchdog = threading.Timer(DEADLINE, process.kill)  # a server that never says it listens fails the test
    watchdog.start()
    seen = []
    try:
        for raw in process.stderr:
            line = raw.decode(errors="replace")
            seen.append(line)
            if marker in line:
                break
        else:
            raise AssertionError(f"{command[:4]} ended before listening: {''.join(seen)}")
    finally:
        watchdog.cancel()
    threading.Thread(target=process.stderr.read, daemon=True).start()  # keep the pipe from filling
    return process, line


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()


@pytest.fixture(scope="module")
def demo_url() -> Iterator[str]:
    """``ws://127.0.0.1:PORT/acp`` of ``python -m acp_trio.demo --serve`` requiring ``TOKEN``."""
    command = [sys.executable, "-m", "acp_trio.demo", "--serve", "http://127.0.0.1:0", "--token", TOKEN]
    process, line = _start(command, "serving the demo agent on ")
    try:
        yield line.split(" on ", 1)[1].strip()
    finally:
        _stop(process)


AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def statuses(url: str, headers: dict[str, str]) -> dict[str, int]:
    """The status of each route for one set of headers: the WebSocket upgrade (``101`` when let
    in), a ``POST`` without a content type (``415``), a ``GET`` and a ``DELETE`` without a
    connection id (``400``): past the checks, each fails on something harmless."""
    found = {}
    async with RawWebSocket.open(url, headers) as ws:
        found["websocket"] = ws.status
    http = url.replace("ws://", "http://")
    found["POST"] = (await http_request(http, "POST", "/acp", headers, b"{}"))[0]
    found["GET"] = (await http_request(http, "GET", "/acp", {"Accept": "text/event-stream", **headers}))[0]
    found["DELETE"] = (await http_request(http, "DELETE", "/acp", headers))[0]
    return found


LET_IN = {"websocket": 101, "POST": 415, "GET": 400, "DELETE": 400}


# -- authentication ------------------------------------------------------------------------------------
async def test_every_route_refuses_a_missing_wrong_or_miscased_token_and_takes_any_case_of_the_scheme(
    demo_url: str,
) -> None:
    refused = [
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN.lower()}"},  # the token itself is case-sensitive
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Authorization": f"Bearer{TOKEN}"},
        {"Authorization": f"Bearer\t{TOKEN}"},  # RFC 7235: one or more SP, not a tab
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN} {TOKEN}"},
        {"authorization": f"Token {TOKEN}"},
    ]
    accepted = [
        {"Authorization": f"Bearer {TOKEN}"},
        {"Authorization": f"bearer {TOKEN}"},  # RFC 7235 § 2.1: the scheme is case-insensitive
        {"Authorization": f"BEARER {TOKEN}"},
        {"authorization": f"Bearer   {TOKEN}"},  # 1*SP between scheme and token
    ]
    with trio.fail_after(DEADLINE):
        for headers in refused:
            assert await statuses(demo_url, headers) == dict.fromkeys(LET_IN, 401), headers
        for headers in accepted:
            assert await statuses(demo_url, headers) == LET_IN, headers
        # a refusal says why and how, and names the scheme
        status, body = await http_request(demo_url.replace("ws://", "http://"), "POST", "/acp", {}, INIT)
        assert (status, body) == (401, "Unauthorized: send Authorization: Bearer <token>\n")


async def test_a_hostile_origin_is_refused_on_every_route_even_with_the_token(demo_url: str) -> None:
    hostile = [
        "http://evil.example",
        "https://evil.example:443",
        "null",  # sandboxed frames, file: pages, some redirects
        "http://localhost.evil.example:8765",
        "http://127.0.0.1.evil.example",
        "http://evil.example#@localhost",
        "file://",
        "chrome-extension://abcdefghijklmnop",
    ]
    with trio.fail_after(DEADLINE):
        for origin in hostile:
            assert await statuses(demo_url, {**AUTH, "Origin": origin}) == dict.fromkeys(LET_IN, 403), origin
        for origin in ("http://localhost:5173", "http://127.0.0.1", "http://[::1]:3000"):
            assert await statuses(demo_url, {**AUTH, "Origin": origin}) == LET_IN, origin


async def test_a_rebound_host_is_refused_on_a_loopback_server_without_a_token() -> None:
    """DNS rebinding: a page of ``evil.example`` whose name now resolves to 127.0.0.1 reaches the
    server as same-origin: its ``GET`` carries no ``Origin`` (Fetch: only a CORS or non-``GET``
    request does), but its ``Host`` is ``evil.example``."""
    rebound = [
        "evil.example:8765",
        "evil.example",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
        "xn--80ak6aa92e.com",
        "localhost:8765@evil.example",
    ]
    with trio.fail_after(DEADLINE):
        async with served(AcpApp(Agent), "127.0.0.1", 0) as [bound]:
            url = bound.replace("http://", "ws://") + "/acp"
            for host in rebound:
                assert await statuses(url, {"Host": host}) == dict.fromkeys(LET_IN, 403), host
            port = bound.rsplit(":", 1)[1]
            for host in (f"localhost:{port}", f"127.0.0.1:{port}", "[::1]", "127.0.0.2", "LOCALHOST"):
                assert await statuses(url, {"Host": host}) == LET_IN, host
            status, body = await http_request(bound, "POST", "/acp", {"Host": "evil.example"}, INIT)
            assert status == 403 and "Host 'evil.example' is not allowed" in body and "allowed_hosts" in body
        # names of your own (a reverse proxy, a tunnel) are listed; a token makes the Host check moot
        async with served(AcpApp(Agent, allowed_hosts=["acp.internal"]), "127.0.0.1", 0) as [bound]:
            url = bound.replace("http://", "ws://") + "/acp"
            assert await statuses(url, {"Host": "acp.internal:443"}) == LET_IN
            assert await statuses(url, {"Host": "evil.example"}) == dict.fromkeys(LET_IN, 403)
        async with served(AcpApp(Agent, token=TOKEN), "127.0.0.1", 0) as [bound]:
            url = bound.replace("http://", "ws://") + "/acp"
            assert await statuses(url, {**AUTH, "Host": "acp.example"}) == LET_IN
            assert await statuses(url, {"Host": "acp.example"}) == dict.fromkeys(LET_IN, 401)


# -- ids: guessing, borrowing, mismatching ------------------------------------------------------------
async def sse_events(response: Any, count: int) -> list[Any]:
    """The first ``count`` events of an SSE response (``data: <json>`` blocks; comments skipped)."""
    events: list[Any] = []
    data = b""
    async for chunk in response.aiter_bytes():
        data += chunk
        *blocks, data = data.split(b"\n\n")
        events += [json.loads(block[6:]) for block in blocks if block.startswith(b"data: ")]
        if len(events) >= count:
            return events
    raise AssertionError(f"the stream ended after {events}")


async def test_a_second_client_can_neither_read_nor_post_into_the_first_ones_connection() -> None:
    Agent.instances.clear()
    app = AcpApp(Agent)
    with trio.fail_after(DEADLINE):
        async with served(app, "127.0.0.1", 0) as [bound]:
            url = bound + "/acp"
            async with connect_http(url, Client) as victim, httpx2.AsyncClient() as attacker:
                await initialize(victim)
                victim_session = await new_session(victim)  # "s1"
                victim_id = victim.connection_id  # type: ignore[attr-defined]
                answer = await attacker.post(url, content=INIT, headers=JSON)
                own = answer.headers["acp-connection-id"]
                assert own != victim_id and len(own) >= 32  # 144 random bits each
                async with RawWebSocket.open(bound.replace("http://", "ws://") + "/acp") as ws:
                    await ws.send(INIT)
                    await ws.message()
                    ws_id = ws.headers["acp-connection-id"]
                guesses = [
                    secrets.token_urlsafe(24),
                    victim_id[:-1] + ("A" if victim_id[-1] != "A" else "B"),
                    victim_id[:8],
                    victim_id.upper() if victim_id.upper() != victim_id else victim_id.lower(),
                    victim_id + "=",
                    ws_id,  # a WebSocket's id names nothing over Streamable HTTP
                    "1",
                ]
                note = {"jsonrpc": "2.0", "method": "_note", "params": {}}
                for guess in guesses:
                    headers = {"acp-connection-id": guess}
                    stream = await attacker.get(url, headers={**headers, "accept": "text/event-stream"})
                    posted = await attacker.post(url, json=note, headers=headers)
                    deleted = await attacker.delete(url, headers=headers)
                    assert (stream.status_code, posted.status_code, deleted.status_code) == (404, 404, 404), guess
                    assert stream.text == posted.text == "Unknown Acp-Connection-Id"
                # the attacker's own connection, naming the victim's session: its own agent's session of that name
                headers = {"acp-connection-id": own, "acp-session-id": victim_session}
                mismatched = await attacker.post(
                    url,
                    json={"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": {"sessionId": "s2"}},
                    headers=headers,
                )
                assert (mismatched.status_code, mismatched.text) == (400, "Mismatched Acp-Session-Id")
                async with attacker.stream("GET", url, headers={**headers, "accept": "text/event-stream"}) as sse:
                    assert sse.status_code == 200
                    request = {"jsonrpc": "2.0", "id": 8, "method": "session/prompt"}
                    request["params"] = {"sessionId": victim_session, "prompt": [{"type": "text", "text": "stream 2"}]}
                    assert (await attacker.post(url, json=request, headers=headers)).status_code == 202
                    events = await sse_events(sse, 3)
                assert [e["params"]["update"]["content"]["text"] for e in events[:2]] == ["s1:0", "s1:1"]
                assert events[2] == {"jsonrpc": "2.0", "id": 8, "result": {"stopReason": "end_turn"}}
                assert len(Agent.instances) == 3  # the victim's, the attacker's, the WebSocket's: one agent each
                # the victim saw none of it, and its connection works as before
                victim_client = client_of(victim)
                assert victim_client.texts == []
                await victim.agent.session_prompt(prompt(victim_session, "stream 1"))
                assert victim_client.texts == ["s1:0"]
                assert victim_id in app.connection_ids


# -- malformed input ------------------------------------------------------------------------------------
async def test_malformed_websocket_input_is_answered_or_closed_with_the_rfc_6455_code() -> None:
    app = AcpApp(Agent, max_message_bytes=1000)
    with trio.fail_after(DEADLINE):
        async with served(app, "127.0.0.1", 0) as [bound]:
            url = bound.replace("http://", "ws://") + "/acp"
            async with RawWebSocket.open(url) as ws:
                await ws.send(b"\x00\xff binary frames are ignored", opcode=0x2)
                await ws.send(INIT)
                assert (await ws.message())["result"]["protocolVersion"] == 1
                await ws.send('{"jsonrpc": "2.0", "id": 2, "method": ')
                assert (await ws.message())["error"]["code"] == -32700
                await ws.send(b" []")  # any JSON array: refused as over Streamable HTTP, the connection goes on
                assert await ws.message() == {"jsonrpc": "2.0", "id": None, "error": BATCH_REFUSED}
                await ws.send(b"[1, 2")  # not JSON: a parse error, as for any text
                assert (await ws.message())["error"]["code"] == -32700
                await ws.send(BATCH)
                assert await ws.message() == {"jsonrpc": "2.0", "id": None, "error": BATCH_REFUSED}
                await ws.send(b'{"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}')
                assert (await ws.message())["result"]["sessionId"] == "s1"  # the batch's session/new never ran
                # text that is not UTF-8: 1007 (RFC 6455 § 8.1), then the TCP connection ends
                await ws.send(b'{"jsonrpc":"2.0","method":"_x","params":{"s":"\xff\xfe"}}')
                code, _ = await ws.closed_with()
                assert code == 1007
            async with RawWebSocket.open(url) as ws:
                await ws.send(
                    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"x":"\xc3"}}'
                )  # cut mid-character
                assert (await ws.closed_with())[0] == 1007
            for broken in (
                bytes([0x80 | 0x40 | 0x1, 0x80 | 2]) + b"\0\0\0\0{}",  # RSV1 set, no extension agreed
                bytes([0x80 | 0x1, 2]) + b"{}",  # unmasked (RFC 6455 § 5.1: the server must close)
                bytes([0x80 | 0x3, 0x80]) + b"\0\0\0\0",  # a reserved opcode
            ):
                async with RawWebSocket.open(url) as ws:
                    await ws.stream.send_all(broken)
                    assert (await ws.closed_with())[0] == 1002, broken  # a protocol error, said before the TCP close
            async with RawWebSocket.open(url) as ws:
                await ws.send(INIT)
                await ws.message()
                await ws.send(b'{"jsonrpc":"2.0","method":"_x","params":{"pad":"' + b"x" * 1000 + b'"}}')
                assert (await ws.closed_with())[0] == 1009
            await app.wait_idle()  # every connection the attacks closed is gone
            # Streamable HTTP: the same batch gets the same answer, the same oversize a 413
            async with httpx2.AsyncClient() as http:
                cid = (await http.post(bound + "/acp", content=INIT, headers=JSON)).headers["acp-connection-id"]
                batch = await http.post(bound + "/acp", content=BATCH, headers={**JSON, "acp-connection-id": cid})
                assert batch.status_code == 400 and batch.json() == {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": BATCH_REFUSED,
                }
                big = await http.post(bound + "/acp", content=b" " * 1001, headers={**JSON, "acp-connection-id": cid})
                assert big.status_code == 413


@posix_only
async def test_the_bridge_refuses_a_websocket_batch_before_its_agent_sees_it() -> None:
    """One rule for both transports, whoever serves: the bridged agent (``cat`` echoes what it reads) never gets the batch."""
    from acp_trio.bridge import serve_bridge

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(serve_bridge, ["cat"], "127.0.0.1", 0)
            async with RawWebSocket.open(bound.replace("http://", "ws://") + "/acp") as ws:
                await ws.send(BATCH)
                assert await ws.message() == {"jsonrpc": "2.0", "id": None, "error": BATCH_REFUSED}
                await ws.send(b'{"after":"the batch"}')
                assert await ws.message() == {"after": "the batch"}  # cat echoed this, and only this
            nursery.cancel_scope.cancel()


# -- slowloris ----------------------------------------------------------------------------------------------
async def test_headers_that_never_end_are_dropped_and_other_clients_are_served_meanwhile(demo_url: str) -> None:
    """hypercorn gives a connection ``keep_alive_timeout`` (5 s) to complete its request's headers,
    however it trickles them, and refuses headers over h11's 16 KiB with ``431``."""
    host, port = demo_url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    with trio.fail_after(DEADLINE):
        slow = [await trio.open_tcp_stream(host, int(port)) for _ in range(20)]
        started = trio.current_time()
        for stream in slow:
            await stream.send_all(b"GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
        for stream in slow[:10]:  # a byte more now and then does not buy more time
            await stream.send_all(b"b")
        # meanwhile, a client is served as usual
        async with RawWebSocket.open(demo_url, AUTH) as ws:
            await ws.send(INIT)
            assert (await ws.message())["result"]["protocolVersion"] == 1
            await ws.send(b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}')
            assert "sessionId" in (await ws.message())["result"]
        huge = await trio.open_tcp_stream(host, int(port))
        async with huge:
            await huge.send_all(b"GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: " + b"p" * 20000 + b"\r\n")
            answer = b""
            while chunk := await huge.receive_some():
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 431 ")
        for stream in slow:
            async with stream:
                assert await stream.receive_some() == b""  # closed by the server, no answer
        waited = trio.current_time() - started
        assert 4 <= waited <= 15, waited  # hypercorn's keep_alive_timeout, 5 s


async def test_a_post_body_that_never_completes_is_answered_408_after_request_timeout(autojump_clock: Any) -> None:
    """Slowloris on the body: headers complete (hypercorn's 5 s no longer applies), then a body that
    stops coming.  Without a bound its handler (and socket) would wait for ever."""
    from test_transport_http_server import Reply, Script

    class Trickled(Reply):
        """A POST whose declared body never arrives in full (the client stops sending)."""

        async def receive(self) -> dict[str, Any]:
            if not self._body_sent:
                self._body_sent = True
                return {"type": "http.request", "body": self._body, "more_body": True}
            await self.gone.wait()
            return {"type": "http.disconnect"}

    app = AcpApp(serve_streams=Script().serve)
    with trio.fail_after(600):  # (virtual seconds) without the bound, the test fails here
        await trickle_two_posts(app, Trickled)
    with pytest.raises(ValueError, match="request_timeout"):
        AcpApp(serve_streams=Script().serve, request_timeout=0)


async def handle(app: AcpApp, scope: dict[str, Any], reply: Any) -> None:
    """Run the app on one request, as ``Http.request`` does (``reply.returned`` once its handler returned)."""
    try:
        await app(scope, reply.receive, reply.send)
    finally:
        reply.returned.set()


async def trickle_two_posts(app: AcpApp, trickled: Any) -> None:
    async with running(app) as http:
        replies = []
        for length in (b"100", b"99999999"):  # within max_message_bytes, then over it (413 begun, the rest drained)
            reply = trickled(b'{"jsonrpc": "2.0", ')
            headers = [(b"content-type", b"application/json"), (b"content-length", length)]
            scope = {"type": "http", "http_version": "1.1", "method": "POST", "path": "/acp", "headers": headers}
            http.nursery.start_soon(handle, app, scope, reply)
            replies.append(reply)
        start = trio.current_time()
        assert await http.initialize()  # meanwhile, other clients are served
        assert await replies[0].text() == "Request body not received within 300.0 s" and replies[0].status == 408
        assert replies[0].headers["connection"] == "close"
        assert trio.current_time() - start == pytest.approx(300)
        assert replies[1].status == 413 and (await replies[1].text()).startswith("Request body exceeds")
        for reply in replies:
            await reply.returned.wait()


# -- max_connections and idle_timeout ---------------------------------------------------------------------
@posix_only
async def test_the_bridge_refuses_connections_over_max_connections_503_and_starts_no_agent_for_them(
    tmp_path: Path,
) -> None:
    import trio_websocket

    started = tmp_path / "started"
    agent = ["sh", "-c", f"echo started >> '{started}'; exec cat"]
    command = [sys.executable, "-m", "acp_trio.bridge", "--listen", "127.0.0.1:0", "--max-connections", "2"]
    process, line = _start([*command, "--", *agent], "bridge: serving ")
    url = next(word for word in line.split() if word.startswith("ws://"))
    try:
        with trio.fail_after(DEADLINE):
            async with RawWebSocket.open(url) as one, RawWebSocket.open(url) as two:
                for ws in (one, two):
                    await ws.send(b'{"ping":1}')
                    assert await ws.message() == {"ping": 1}  # its agent (cat) runs
                with pytest.raises(trio_websocket.ConnectionRejected) as info:
                    async with trio_websocket.open_websocket_url(url):
                        raise AssertionError("a third connection was accepted")
                assert info.value.status_code == 503
                assert b"max_connections 2" in (info.value.body or b"")
                async with httpx2.AsyncClient() as http:
                    refused = await http.post(url.replace("ws://", "http://"), content=INIT, headers=JSON)
                assert (refused.status_code, refused.text) == (503, "Too many ACP connections (max_connections 2)")
                assert started.read_text().split() == ["started", "started"]  # no agent for the refused ones
    finally:
        _stop(process)


@posix_only
async def test_the_demo_server_takes_the_bridges_limits_on_its_command_line() -> None:
    """``python -m acp_trio.demo --serve`` with ``--max-connections``, ``--allow-host`` and
    ``--idle-timeout``: a second connection is refused 503, a listed Host is let in, others 403."""
    command = [sys.executable, "-m", "acp_trio.demo", "--serve", "http://127.0.0.1:0", "--max-connections", "1"]
    command += ["--allow-host", "acp.test", "--idle-timeout", "60"]
    process, line = _start(command, "serving the demo agent on ")
    url = line.split(" on ", 1)[1].strip()
    try:
        with trio.fail_after(DEADLINE):
            async with RawWebSocket.open(url) as first:
                await first.send(INIT)
                assert (await first.message())["result"]["protocolVersion"] == 1
                async with RawWebSocket.open(url) as second:
                    assert second.status == 503
            http = url.replace("ws://", "http://")
            assert await http_request(http, "DELETE", "/acp", {"Host": "acp.test"}) == (
                400,
                "Missing Acp-Connection-Id",
            )
            status, body = await http_request(http, "DELETE", "/acp", {"Host": "evil.test"})
            assert status == 403 and "Host 'evil.test' is not allowed" in body
    finally:
        _stop(process)


async def test_max_connections_counts_websocket_and_streamable_http_together_for_the_demo_agent() -> None:
    from acp_trio.demo.agent import agents_for

    app = AcpApp(agents_for((1, 2)), max_connections=2)
    with trio.fail_after(DEADLINE):
        async with served(app, "127.0.0.1", 0) as [bound], httpx2.AsyncClient() as http:
            url, ws_url = bound + "/acp", bound.replace("http://", "ws://") + "/acp"
            async with RawWebSocket.open(ws_url) as ws:
                await ws.send(INIT)
                assert (await ws.message())["result"]["protocolVersion"] == 1
                opened = await http.post(url, content=INIT, headers=JSON)
                assert opened.status_code == 200
                async with RawWebSocket.open(ws_url) as third:
                    assert third.status == 503
                refused = await http.post(url, content=INIT, headers=JSON)
                assert (refused.status_code, refused.text) == (503, "Too many ACP connections (max_connections 2)")
                assert app.active_connections == 2
                gone = await http.delete(url, headers={"acp-connection-id": opened.headers["acp-connection-id"]})
                assert gone.status_code == 202
                while app.active_connections > 1:  # the deleted connection's agent ends
                    await app._ended.park()
                async with RawWebSocket.open(ws_url) as again:  # room again, for either transport
                    assert again.status == 101


async def slow_initialize(connection_id: str, to_client: trio.abc.SendStream, from_client: Any) -> None:
    """A bridged agent that takes 5 s to answer ``initialize``, then answers nothing else."""
    async for data in from_client:
        if b'"initialize"' in data:
            await trio.sleep(5)
            await to_client.send_all(b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}\n')


async def test_an_initialize_slower_than_idle_timeout_is_answered_and_the_idle_clock_starts_after_it(
    autojump_clock: Any,
) -> None:
    app = AcpApp(serve_streams=slow_initialize, idle_timeout=2)
    async with running(app) as http:
        start = trio.current_time()
        reply = await http.post(INIT)
        assert (reply.status, json.loads(await reply.body())["result"]) == (200, {"protocolVersion": 1})
        assert trio.current_time() - start == pytest.approx(5)
        cid = reply.headers["acp-connection-id"]
        assert app.connection_ids == {cid}
        answered = trio.current_time()
        await app.wait_idle()  # then no request and no stream: closed idle_timeout after the answer
        assert trio.current_time() - answered == pytest.approx(2)


async def test_a_request_held_longer_than_idle_timeout_keeps_its_connection(autojump_clock: Any) -> None:
    from test_transport_http_server import Script, emit

    script = Script()
    app = AcpApp(serve_streams=script.serve, idle_timeout=2, max_buffered_bytes=200, output_stall_timeout=60)
    async with running(app) as http:
        cid = await http.initialize()
        notes = [{"jsonrpc": "2.0", "method": "_n", "params": {"n": n, "pad": "x" * 80}} for n in range(3)]
        assert (await http.post(emit(*notes), cid)).status == 202
        await script.wait_written(1)  # over 200 bytes buffered for nobody: requests are held
        answered: list[int] = []
        done = trio.Event()

        async def held_request() -> None:
            reply = await http.post({"jsonrpc": "2.0", "id": 5, "method": "session/new", "params": {}}, cid)
            answered.append(reply.status)
            done.set()

        http.nursery.start_soon(held_request)
        await trio.sleep(10)  # five idle timeouts, with a request in progress all along
        assert answered == [] and app.connection_ids == {cid}
        stream = await http.stream(cid)  # the client reads: the held request goes through
        assert (await stream.wait_events(3)) == notes
        await done.wait()
        assert answered == [202]
        stream.leave()
        await http.request("DELETE", {"acp-connection-id": cid})
        await app.wait_idle()

"""Streamable HTTP, server side: ``AcpApp`` answering ``POST``/``GET``/``DELETE`` on ``/acp``.

Spec: the RFD ``docs/rfds/streamable-http-websocket-transport.mdx`` (Streamable HTTP, Unified
Endpoint Routing) and, where they differ, what the TypeScript SDK 2.4.0's ``AcpServer`` does
(statuses, routing, limits and their defaults).  Most tests drive the ASGI application in this
process (a scripted agent behind ``serve_streams``, so every byte the agent reads and writes is
known), with trio's autojump clock where time matters (keepalive, output stall).  The others run
hypercorn on 127.0.0.1: raw ``httpx2`` requests (413 read whole by a real client, HTTP/2 without
TLS), our ``connect_http``, and the TypeScript SDK's ``createHttpStream`` client under node playing
the interoperability script of ``tests/test_interop.py``.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import test_interop  # pytest's default ("prepend") import mode puts tests/ on sys.path
import trio
import trio.testing
from test_interop import INTEROP, TIME_LIMIT, ts_sdk  # noqa: F401  (the fixture: the SDK from npm, in the cache)

pytest.importorskip("hypercorn")
pytest.importorskip("httpx2")

import httpx2

from acp_trio.transports.asgi import AcpApp, serve

DEADLINE = 30
JSON = {"content-type": "application/json"}


# -- an in-process ASGI client ----------------------------------------------------------------------
class Reply:
    """One HTTP exchange with the app: its status, headers and the body bytes so far."""

    def __init__(self, body: bytes) -> None:
        self._body = body
        self._body_sent = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self.data = b""
        self.started = trio.Event()
        self.done = trio.Event()
        self.returned = trio.Event()  # the app's handler for this request returned
        self.gone = trio.Event()
        self._changed = trio.Event()
        self.stalled = False  # when set, a body write never completes (a client that stopped reading)

    async def receive(self) -> dict[str, Any]:
        if not self._body_sent:
            self._body_sent = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
            self.started.set()
        elif message["type"] == "http.response.body":
            if self.stalled:
                await trio.sleep_forever()
            self.data += message.get("body", b"")
            self._changed.set()
            self._changed = trio.Event()
            if not message.get("more_body", False):
                self.done.set()
                self.gone.set()  # as servers do once the response is complete
        await trio.lowlevel.checkpoint()

    def leave(self) -> None:
        """The client goes away (``http.disconnect``)."""
        self.gone.set()

    async def body(self) -> bytes:
        await self.done.wait()
        return self.data

    async def text(self) -> str:
        return (await self.body()).decode()

    def events(self) -> list[Any]:
        """The SSE events so far, each ``data`` parsed (checks the framing: ``data: <json>`` or ``:``)."""
        found = []
        for block in self.data.split(b"\n\n")[:-1]:
            if block == b":":
                continue
            assert block.startswith(b"data: ") and b"\n" not in block, block
            found.append(json.loads(block[6:]))
        return found

    async def wait_events(self, count: int) -> list[Any]:
        while len(self.events()) < count:
            if self.done.is_set():
                raise AssertionError(f"the stream ended after {self.events()}")
            await self._changed.wait()
        return self.events()


class Http:
    """Requests to an :class:`AcpApp` run in this process (its lifespan started)."""

    def __init__(self, app: AcpApp, nursery: trio.Nursery) -> None:
        self.app = app
        self.nursery = nursery

    async def request(self, method: str, headers: dict[str, str] | None = None, body: bytes = b"") -> Reply:
        reply = Reply(body)
        raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        scope = {"type": "http", "http_version": "1.1", "method": method, "path": "/acp", "headers": raw}

        async def handle() -> None:
            try:
                await self.app(scope, reply.receive, reply.send)
            finally:
                reply.returned.set()

        self.nursery.start_soon(handle)
        await reply.started.wait()
        return reply

    async def post(self, message: Any, connection_id: str | None = None, session_id: str | None = None) -> Reply:
        headers = dict(JSON)
        if connection_id:
            headers["acp-connection-id"] = connection_id
        if session_id:
            headers["acp-session-id"] = session_id
        body = message if isinstance(message, bytes) else json.dumps(message).encode()
        return await self.request("POST", headers, body)

    async def stream(self, connection_id: str, session_id: str | None = None) -> Reply:
        headers = {"accept": "text/event-stream", "acp-connection-id": connection_id}
        if session_id:
            headers["acp-session-id"] = session_id
        return await self.request("GET", headers)

    async def initialize(self) -> str:
        reply = await self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
        assert reply.status == 200, await reply.text()
        return reply.headers["acp-connection-id"]


@asynccontextmanager
async def running(app: AcpApp) -> AsyncIterator[Http]:
    async with trio.open_nursery() as nursery:
        to_app, app_in = trio.open_memory_channel[dict[str, Any]](10)
        app_out, from_app = trio.open_memory_channel[dict[str, Any]](10)
        nursery.start_soon(app, {"type": "lifespan"}, app_in.receive, app_out.send)
        await to_app.send({"type": "lifespan.startup"})
        assert (await from_app.receive())["type"] == "lifespan.startup.complete"
        yield Http(app, nursery)
        await to_app.send({"type": "lifespan.shutdown"})
        assert (await from_app.receive())["type"] == "lifespan.shutdown.complete"
        nursery.cancel_scope.cancel()


class Script:
    """An agent behind ``serve_streams``: records every line it reads, answers ``initialize`` with
    ``answer`` (bytes, written as they are), and writes the lines a ``_emit`` notification names."""

    INIT = b'{"jsonrpc":"2.0",  "id":0,"result":{"protocolVersion":1,"_x":{"kept":true}}}'

    def __init__(self, answer: bytes | None = INIT) -> None:
        self.answer = answer
        self.lines: list[bytes] = []
        self.read = trio.Event()
        self.ended = trio.Event()
        self.written = 0
        self._wrote = trio.Event()

    async def serve(
        self, connection_id: str, to_client: trio.abc.SendStream, from_client: trio.abc.ReceiveStream
    ) -> None:
        async with trio.open_nursery() as nursery:

            async def emit(lines: list[str]) -> None:
                for line in lines:
                    await to_client.send_all(line.encode() + b"\n")
                    self.written += 1
                    self._wrote.set()
                    self._wrote = trio.Event()

            buffer = b""
            async for data in from_client:
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    self.lines.append(line)
                    self.read.set()
                    self.read = trio.Event()
                    message = json.loads(line) if line.startswith(b"{") else {}
                    if message.get("method") == "initialize":
                        if self.answer is None:
                            return
                        await to_client.send_all(self.answer + b"\n")
                    elif message.get("method") == "_emit":
                        nursery.start_soon(emit, message["params"]["lines"])
            self.ended.set()

    async def wait_written(self, count: int) -> None:
        while self.written < count:
            await self._wrote.wait()

    async def wait_read(self, count: int) -> list[bytes]:
        while len(self.lines) < count:
            await self.read.wait()
        return self.lines


def emit(*messages: Any) -> dict[str, Any]:
    """A notification telling the scripted agent to write these messages (dicts or raw strings)."""
    lines = [m if isinstance(m, str) else json.dumps(m) for m in messages]
    return {"jsonrpc": "2.0", "method": "_emit", "params": {"lines": lines}}


def update(session_id: str, text: str) -> dict[str, Any]:
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": chunk}}


# -- initialize, statuses ----------------------------------------------------------------------------
async def test_initialize_opens_a_connection_answered_200_with_the_agents_answer_verbatim() -> None:
    script = Script()
    app = AcpApp(serve_streams=script.serve)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            body = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"_unknown":[1, 2]}}'
            reply = await http.post(body)
            assert reply.status == 200
            assert reply.headers["content-type"] == "application/json"
            assert await reply.body() == Script.INIT  # no connectionId added, spacing and unknown fields kept
            connection_id = reply.headers["acp-connection-id"]
            assert len(connection_id) >= 32 and app.connection_ids == {connection_id}
            assert script.lines == [body]  # the agent read what was POSTed, byte for byte
            second = await http.initialize()
            assert second != connection_id and app.active_connections == 2


async def test_without_a_lifespan_the_connection_lives_in_its_initialize_requests_task() -> None:
    script = Script()
    app = AcpApp(serve_streams=script.serve)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            http = Http(app, nursery)  # no lifespan.startup: an ASGI server that does not run it
            reply = await http.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
            assert (reply.status, await reply.body()) == (200, Script.INIT)
            cid = reply.headers["acp-connection-id"]
            assert not reply.returned.is_set()  # the handler goes on serving the connection
            stream = await http.stream(cid)
            await http.post(emit(update("s1", "a"), {"jsonrpc": "2.0", "method": "_n"}), cid)
            assert await stream.wait_events(1) == [{"jsonrpc": "2.0", "method": "_n"}]
            await http.request("DELETE", {"acp-connection-id": cid})
            await reply.returned.wait()
            await app.wait_idle()


async def test_initialize_fails_500_when_the_agent_ends_or_says_something_else_first() -> None:
    for answer in (None, b'{"jsonrpc":"2.0","method":"session/update","params":{}}'):
        script = Script(answer)
        app = AcpApp(serve_streams=script.serve)
        with trio.fail_after(DEADLINE):
            async with running(app) as http:
                reply = await http.post({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {}})
                assert reply.status == 500
                answer_body = json.loads(await reply.body())
                assert answer_body["id"] == "i" and answer_body["error"]["code"] == -32603
                assert answer_body["error"]["message"] == "Initialize failed"
                await app.wait_idle()  # the connection is gone


async def test_every_refusal_has_the_status_and_words_of_the_typescript_server() -> None:
    app = AcpApp(serve_streams=Script().serve, max_id_length=16)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            cid = await http.initialize()
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
            prompt = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "s1"}}
            cases: list[tuple[Reply, int, str]] = [
                (await http.request("POST", {"content-type": "text/plain"}, b"{}"), 415, "Unsupported Media Type"),
                (await http.request("POST", {}, b"{}"), 415, "Unsupported Media Type"),
                (await http.request("POST", {"content-type": "application/json; charset=utf-8"}, b"[1]"), 400, ""),
                (await http.post(b'"text"', cid), 400, "Invalid JSON-RPC message"),
                (await http.post({"jsonrpc": "2.0", "method": "session/new"}), 400, "Missing Acp-Connection-Id"),
                (await http.post({"jsonrpc": "2.0", "method": "x"}, "nope"), 404, "Unknown Acp-Connection-Id"),
                (await http.post(init, cid), 400, "Initialize not allowed on existing connection"),
                (await http.post({**init, "id": None}), 400, "Initialize request must include an ID"),
                (await http.post({**init, "id": [1]}), 400, "Initialize request ID must be a string or a number"),
                (await http.post(prompt, cid), 400, "Missing Acp-Session-Id"),
                (await http.post(prompt, cid, "s2"), 400, "Mismatched Acp-Session-Id"),
                (await http.post({"jsonrpc": "2.0", "method": "session/cancel"}, cid), 400, "Missing Acp-Session-Id"),
                (await http.post({**prompt, "params": {}}, cid, "s" * 17), 400, "Session ID exceeds maxIdLength (16)"),
                (await http.post({**prompt, "id": "r" * 17}, cid, "s1"), 400, "Request ID exceeds maxIdLength (16)"),
                (await http.request("GET", {"acp-connection-id": cid}), 406, "Not Acceptable"),
                (await http.request("GET", {"accept": "*/*", "acp-connection-id": cid}), 406, "Not Acceptable"),
                (await http.request("GET", {"accept": "text/event-stream"}), 400, "Missing Acp-Connection-Id"),
                (await http.stream("nope"), 404, "Unknown Acp-Connection-Id"),
                (await http.request("DELETE"), 400, "Missing Acp-Connection-Id"),
                (await http.request("DELETE", {"acp-connection-id": "nope"}), 404, "Unknown Acp-Connection-Id"),
                (await http.request("PUT", {"acp-connection-id": cid}), 405, "Method Not Allowed"),
            ]
            for reply, status, text in cases:
                assert (reply.status, await reply.text() if text else "") == (status, text)
                if text:
                    assert reply.headers["content-type"].startswith("text/plain")
            # a batch, and a body that is not JSON: JSON-RPC error bodies
            batch = await http.post(b'[{"jsonrpc":"2.0","id":1,"method":"x"}]', cid)
            assert batch.status == 400 and batch.headers["content-type"] == "application/json"
            assert json.loads(await batch.body())["error"] == {
                "code": -32600,
                "message": "Invalid request: JSON-RPC batches are not supported",
            }
            bad = await http.post(b"{not json", cid)
            assert bad.status == 400 and json.loads(await bad.body())["error"]["code"] == -32700
            assert app.active_connections == 1


async def test_a_body_over_max_message_bytes_is_413_whether_its_length_is_declared_or_not() -> None:
    script = Script()
    app = AcpApp(serve_streams=script.serve, max_message_bytes=100)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            cid = await http.initialize()
            big = json.dumps({"jsonrpc": "2.0", "method": "_big", "params": {"x": "y" * 100}}).encode()
            headers = {**JSON, "acp-connection-id": cid}
            declared = await http.request("POST", {**headers, "content-length": str(len(big))}, big)
            undeclared = await http.request("POST", headers, big)
            for reply in (declared, undeclared):
                assert (reply.status, await reply.text()) == (413, "Request body exceeds 100 bytes")
            small = await http.post({"jsonrpc": "2.0", "method": "_ok"}, cid)
            assert small.status == 202
            assert [json.loads(line)["method"] for line in await script.wait_read(2)] == ["initialize", "_ok"]


async def test_a_body_from_the_servers_event_queue_whole_or_in_parts_that_come_later(autojump_clock: Any) -> None:
    # hypercorn hands the application a memory channel's receive: a body already queued is taken at
    # once; one that is not all there yet is awaited (request_timeout, max_message_bytes as ever)
    script = Script()
    app = AcpApp(serve_streams=script.serve, max_message_bytes=100)
    async with running(app) as http:
        cid = await http.initialize()
        headers = [(b"content-type", b"application/json"), (b"acp-connection-id", cid.encode())]
        scope = {"type": "http", "http_version": "1.1", "method": "POST", "path": "/acp", "headers": headers}

        def post(*queued: bytes) -> tuple[Reply, trio.MemorySendChannel[dict[str, Any]]]:
            """A POST whose body parts ``queued`` are in the server's queue (more to come: the channel)."""
            to_app, events = trio.open_memory_channel[dict[str, Any]](10)
            for part in queued:
                to_app.send_nowait({"type": "http.request", "body": part, "more_body": True})
            reply = Reply(b"")
            http.nursery.start_soon(app, scope, events.receive, reply.send)
            return reply, to_app

        def note(n: int) -> bytes:
            return json.dumps({"jsonrpc": "2.0", "method": "_n", "params": {"n": n}}).encode()

        whole, to_app = post(note(1)[:10], note(1)[10:])
        to_app.send_nowait({"type": "http.request", "body": b"", "more_body": False})
        assert (await whole.text(), whole.status) == ("", 202)
        # the first part is queued, the rest comes later
        later, to_app = post(note(2)[:10])
        await trio.sleep(5)
        assert not later.started.is_set()
        await to_app.send({"type": "http.request", "body": note(2)[10:], "more_body": False})
        assert (await later.text(), later.status) == ("", 202)
        # over max_message_bytes across the parts: 413
        too_big, to_app = post(b"x" * 60)
        await trio.sleep(1)
        await to_app.send({"type": "http.request", "body": b"y" * 60, "more_body": False})
        assert (await too_big.text(), too_big.status) == ("Request body exceeds 100 bytes", 413)
        # a body whose rest never comes: 408 after request_timeout
        started = trio.current_time()
        stuck, to_app = post(note(3)[:10])
        assert (await stuck.text(), stuck.status) == ("Request body not received within 300.0 s", 408)
        assert trio.current_time() - started == pytest.approx(300)
        assert [json.loads(line)["params"]["n"] for line in (await script.wait_read(3))[1:]] == [1, 2]


async def test_a_bearer_token_guards_post_get_and_delete() -> None:
    app = AcpApp(serve_streams=Script().serve, token="s3cret")
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}).encode()
            for method in ("POST", "GET", "DELETE"):
                for auth in ({}, {"authorization": "Bearer wrong"}):
                    reply = await http.request(method, {**JSON, "accept": "text/event-stream", **auth}, init)
                    assert reply.status == 401 and reply.headers["www-authenticate"] == "Bearer"
            assert app.active_connections == 0
            ok = await http.request("POST", {**JSON, "authorization": "Bearer s3cret"}, init)
            assert ok.status == 200


async def test_each_token_origin_and_host_is_judged_even_after_others_passed() -> None:
    # (what passed the checks is remembered: a request that differs in any of them is judged again)
    init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}).encode()

    async def post(app: AcpApp, **headers: str) -> int:
        reply = Reply(init)
        raw = [(b"content-type", b"application/json"), *((k.encode(), v.encode()) for k, v in headers.items())]
        scope = {"type": "http", "http_version": "1.1", "method": "POST", "path": "/acp", "headers": raw}
        await app({**scope, "server": ("127.0.0.1", 8765)}, reply.receive, reply.send)
        return reply.status

    guarded = AcpApp(serve_streams=Script().serve, token="s3cret")
    plain = AcpApp(serve_streams=Script().serve)
    with trio.fail_after(DEADLINE):
        async with running(guarded), running(plain):
            for _ in range(2):
                assert await post(guarded, authorization="Bearer s3cret", host="127.0.0.1:8765") == 200
                assert await post(guarded, authorization="Bearer s3cre", host="127.0.0.1:8765") == 401
                assert await post(guarded, host="127.0.0.1:8765") == 401
                assert await post(guarded, authorization="Bearer s3cret", origin="http://evil.example") == 403
                assert await post(plain, host="localhost:8765") == 200
                assert await post(plain, host="evil.example:8765") == 403
                assert await post(plain, host="localhost:8765", origin="null") == 403
            for port in range(100):  # many that pass: what is remembered stays bounded
                assert await post(plain, host=f"127.0.0.1:{port}") == 200
            assert len(plain._passed) <= 64
            assert await post(plain, host="evil.example:8765") == 403


async def test_header_names_in_any_case_and_the_first_of_a_repeated_header() -> None:
    init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}).encode()
    app = AcpApp(serve_streams=Script().serve)

    async def post(*headers: tuple[bytes, bytes]) -> int:
        reply = Reply(init)
        scope = {"type": "http", "http_version": "1.1", "method": "POST", "path": "/acp", "headers": list(headers)}
        await app(scope, reply.receive, reply.send)
        return reply.status

    json_type, text_type = b"application/json", b"text/plain"
    with trio.fail_after(DEADLINE):
        async with running(app):
            assert await post((b"content-type", json_type), (b"content-type", text_type)) == 200
            assert await post((b"content-type", text_type), (b"content-type", json_type)) == 415
            assert await post((b"Content-Type", json_type), (b"content-type", text_type)) == 200
            assert await post((b"Content-Type", text_type), (b"content-type", json_type)) == 415


async def test_a_foreign_origin_is_refused_403_on_every_route_against_dns_rebinding() -> None:
    app = AcpApp(serve_streams=Script().serve, allowed_origins=["https://editor.example"])
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}).encode()
            rebound = {"origin": "http://evil.example:8765", "host": "evil.example:8765"}
            for method in ("POST", "GET", "DELETE"):
                reply = await http.request(method, {**JSON, "accept": "text/event-stream", **rebound}, init)
                assert reply.status == 403, method
            assert app.active_connections == 0
            for origin in ("http://localhost:3000", "https://editor.example", None):
                headers = {**JSON} if origin is None else {**JSON, "origin": origin}
                ok = await http.request("POST", headers, init)
                assert ok.status == 200, origin


# -- routing and buffering -----------------------------------------------------------------------------
async def test_output_goes_to_its_stream_and_waits_there_until_the_stream_is_opened() -> None:
    script = Script()
    app = AcpApp(serve_streams=script.serve)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            cid = await http.initialize()
            # client requests: session/new (connection route), session/prompt and session/load (session route)
            assert (
                await http.post({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}}, cid)
            ).status == 202
            prompt = {"jsonrpc": "2.0", "id": "1", "method": "session/prompt", "params": {"sessionId": "s1"}}
            assert (await http.post(prompt, cid, "s1")).status == 202
            load = {"jsonrpc": "2.0", "id": 3, "method": "session/load", "params": {"sessionId": "s1"}}
            assert (await http.post(load, cid, "s1")).status == 202
            ask = {"jsonrpc": "2.0", "id": 9, "method": "session/request_permission", "params": {"sessionId": "s1"}}
            lines = [
                {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}},  # → connection stream
                update("s1", "a"),  # → s1
                ask,  # → s1, and the client's answer must name s1
                {"jsonrpc": "2.0", "id": "1", "result": {"stopReason": "end_turn"}},  # id "1", not 1 → s1
                {"jsonrpc": "2.0", "id": 3, "result": {}},  # session/load → connection stream
                {"jsonrpc": "2.0", "method": "_note", "params": {}},  # no sessionId → connection stream
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}},  # → connection
            ]
            assert (await http.post(emit(*lines), cid)).status == 202
            await script.wait_written(len(lines))
            # nothing was read yet: the streams open now and get what waited for them, in order
            session = await http.stream(cid, "s1")
            connection = await http.stream(cid)
            assert session.status == connection.status == 200
            assert session.headers["content-type"] == "text/event-stream"
            assert session.headers["cache-control"] == "no-cache"
            assert await session.wait_events(3) == [lines[1], lines[2], lines[3]]
            assert await connection.wait_events(4) == [lines[0], lines[4], lines[5], lines[6]]
            assert session.data.startswith(b":\n\n")  # a comment first: the headers go out at once
            # the agent's request came on s1: the answer must carry Acp-Session-Id: s1
            answer = {"jsonrpc": "2.0", "id": 9, "result": {"outcome": {"outcome": "cancelled"}}}
            assert (await http.post(answer, cid)).status == 400
            assert (await http.post(answer, cid, "s2")).status == 400
            assert (await http.post(answer, cid, "s1")).status == 202
            await script.wait_read(6)
            assert json.loads(script.lines[-1]) == answer
            # one reader per stream; a session nobody mentioned gets a stream too (as the TypeScript server)
            assert (await http.stream(cid, "s1")).status == 409
            assert (await http.stream(cid)).status == 409
            assert (await http.stream(cid, "other")).status == 200
            # an object that is no JSON-RPC message is the agent's to answer
            assert (await http.post({"foo": 1}, cid)).status == 202
            assert json.loads((await script.wait_read(7))[-1]) == {"foo": 1}


async def test_a_closed_session_stream_keeps_what_it_did_not_send_for_the_next_reader() -> None:
    script = Script()
    app = AcpApp(serve_streams=script.serve)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            cid = await http.initialize()
            first = await http.stream(cid, "s1")
            await http.post(emit(update("s1", "1")), cid)
            assert await first.wait_events(1) == [update("s1", "1")]
            first.leave()
            await first.returned.wait()
            await http.post(emit(update("s1", "2"), update("s1", "3")), cid)
            await script.wait_written(3)
            second = await http.stream(cid, "s1")
            assert await second.wait_events(2) == [update("s1", "2"), update("s1", "3")]


async def test_sse_keepalive_comment_after_15_idle_seconds(autojump_clock: Any) -> None:
    app = AcpApp(serve_streams=Script().serve)
    async with running(app) as http:
        cid = await http.initialize()
        stream = await http.stream(cid)
        await trio.sleep(14)
        assert stream.data == b":\n\n"
        await trio.sleep(2)
        assert stream.data == b":\n\n:\n\n"
        stream.leave()


async def test_delete_ends_the_agents_input_and_every_stream() -> None:
    script = Script()
    app = AcpApp(serve_streams=script.serve)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            cid = await http.initialize()
            streams = [await http.stream(cid), await http.stream(cid, "s1")]
            deleted = await http.request("DELETE", {"acp-connection-id": cid})
            assert (deleted.status, await deleted.body()) == (202, b"")
            await script.ended.wait()
            for stream in streams:
                await stream.body()
            await app.wait_idle()
            assert (await http.request("DELETE", {"acp-connection-id": cid})).status == 404
            assert (await http.post({"jsonrpc": "2.0", "method": "_x"}, cid)).status == 404
            assert (await http.stream(cid)).status == 404


async def test_a_connection_with_no_request_and_no_open_stream_for_idle_timeout_is_closed(
    autojump_clock: Any,
) -> None:
    script = Script()
    app = AcpApp(serve_streams=script.serve, idle_timeout=60)
    async with running(app) as http:
        cid = await http.initialize()
        stream = await http.stream(cid)
        await trio.sleep(600)  # an open stream keeps it, however long
        assert app.connection_ids == {cid}
        stream.leave()
        await stream.returned.wait()
        await trio.sleep(50)
        assert (await http.post({"jsonrpc": "2.0", "method": "_x"}, cid)).status == 202  # a request renews it
        await trio.sleep(50)
        assert app.connection_ids == {cid}
        start = trio.current_time()
        await script.ended.wait()  # then 60 s of nothing: the agent's input ends, the connection goes
        assert 10 - 1e-6 <= trio.current_time() - start <= 10 + 1e-6
        await app.wait_idle()
        assert (await http.stream(cid)).status == 404


async def test_the_idle_timeout_watch_ends_with_its_connection() -> None:
    # it runs beside the connection in the lifespan's nursery: an agent that ends (no request, no
    # DELETE to wake anything) leaves no task there waiting for an idle_timeout that no longer
    # matters (on the real clock: nothing jumps ahead to wake it)
    stop = trio.Event()

    async def serve(connection_id: str, to_client: trio.abc.SendStream, from_client: trio.abc.ReceiveStream) -> None:
        await from_client.receive_some()  # initialize
        await to_client.send_all(Script.INIT + b"\n")
        await stop.wait()

    app = AcpApp(serve_streams=serve, idle_timeout=300)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            assert app._nursery is not None and not app._nursery.child_tasks
            await http.initialize()
            await trio.testing.wait_all_tasks_blocked()  # the initialize POST is over: nothing wakes the watch
            assert app._nursery.child_tasks
            stop.set()
            await app.wait_idle()
            await trio.testing.wait_all_tasks_blocked()
            assert not app._nursery.child_tasks


async def test_an_initialize_over_max_connections_is_refused_503() -> None:
    app = AcpApp(serve_streams=Script().serve, max_connections=1)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            cid = await http.initialize()
            body = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'
            refused = await http.post(body)
            assert (refused.status, await refused.text()) == (503, "Too many ACP connections (max_connections 1)")
            assert app.connection_ids == {cid}
            await http.request("DELETE", {"acp-connection-id": cid})
            await app.wait_idle()
            assert (await http.post(body)).status == 200


def test_idle_timeout_must_be_positive_or_none() -> None:
    with pytest.raises(ValueError, match="idle_timeout"):
        AcpApp(serve_streams=Script().serve, idle_timeout=0)
    assert AcpApp(serve_streams=Script().serve, idle_timeout=None).idle_timeout is None


# -- limits ----------------------------------------------------------------------------------------------
async def test_unread_output_at_max_buffered_bytes_holds_requests_then_the_stall_closes_the_connection(
    autojump_clock: Any,
) -> None:
    script = Script()
    app = AcpApp(serve_streams=script.serve, max_buffered_bytes=200, output_stall_timeout=5)
    async with running(app) as http:
        cid = await http.initialize()
        notes = [{"jsonrpc": "2.0", "method": "_n", "params": {"n": n, "pad": "x" * 80}} for n in range(6)]
        assert all(len(json.dumps(note)) > 100 for note in notes)
        assert (await http.post(emit(*notes), cid)).status == 202
        await trio.sleep(1)
        assert script.written == 1  # the second write waits: over 200 bytes are buffered for nobody
        start = trio.current_time()
        held = await http.post({"jsonrpc": "2.0", "id": 5, "method": "session/new", "params": {}}, cid)
        assert held.status == 404  # held before its 202 until the stall closed the connection
        assert trio.current_time() - start == pytest.approx(4, abs=0.5)
        await script.ended.wait()  # the agent's input ended
        assert (await http.post({"jsonrpc": "2.0", "method": "_x"}, cid)).status == 404
        await app.wait_idle()


async def test_a_reader_that_stops_reading_is_given_up_after_the_stall_timeout(autojump_clock: Any) -> None:
    script = Script()
    app = AcpApp(serve_streams=script.serve, max_buffered_bytes=200, output_stall_timeout=5)
    async with running(app) as http:
        cid = await http.initialize()
        stream = await http.stream(cid)
        stream.stalled = True  # its socket takes nothing more
        notes = [{"jsonrpc": "2.0", "method": "_n", "params": {"n": n, "pad": "x" * 80}} for n in range(6)]
        start = trio.current_time()
        await http.post(emit(*notes), cid)
        await script.ended.wait()  # the connection closed: the agent's input ended
        assert trio.current_time() - start == pytest.approx(5, abs=0.5)
        assert script.written < len(notes)
        assert (await http.post({"jsonrpc": "2.0", "method": "_x"}, cid)).status == 404
        stream.leave()
        await app.wait_idle()


async def test_a_reader_keeps_output_flowing_past_max_buffered_bytes() -> None:
    script = Script()
    app = AcpApp(serve_streams=script.serve, max_buffered_bytes=200, output_stall_timeout=5)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            cid = await http.initialize()
            stream = await http.stream(cid)
            notes = [{"jsonrpc": "2.0", "method": "_n", "params": {"n": n, "pad": "x" * 60}} for n in range(200)]
            await http.post(emit(*notes), cid)
            assert await stream.wait_events(200) == notes
            # the last send_all may still wait for the buffer to drain after its line was read:
            # let it return before the app shuts down (else it raises into the scripted agent)
            await script.wait_written(200)


async def test_more_unread_session_streams_than_allowed_close_the_connection() -> None:
    script = Script()
    app = AcpApp(serve_streams=script.serve, max_buffered_session_streams=2)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            cid = await http.initialize()
            opened = await http.stream(cid, "open")  # a stream with a reader does not count
            await http.post(emit(update("open", "0"), update("s1", "1"), update("s2", "2")), cid)
            await opened.wait_events(1)
            await script.wait_written(3)
            assert (await http.post({"jsonrpc": "2.0", "method": "_x"}, cid)).status == 202
            await http.post(emit(update("s3", "3")), cid)  # a third unread session stream
            await script.ended.wait()
            await opened.body()
            assert (await http.post({"jsonrpc": "2.0", "method": "_x"}, cid)).status == 404


async def test_a_thousand_bad_requests_and_three_hundred_connections_leave_nothing_behind() -> None:
    app = AcpApp(serve_streams=Script().serve)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            baseline = len(http.nursery.child_tasks)
            cid = await http.initialize()
            stream = await http.stream(cid)
            bad: list[tuple[dict[str, str], bytes]] = [
                ({}, b"{}"),  # 415
                (JSON, b"{oops"),  # 400 -32700
                (JSON, b"[]"),  # 400 batch
                ({**JSON, "acp-connection-id": "nope"}, b'{"jsonrpc":"2.0","method":"x"}'),  # 404
                ({**JSON, "acp-connection-id": cid}, b'{"jsonrpc":"2.0","id":1,"method":"session/prompt"}'),  # 400
            ]
            for n in range(1000):
                headers, body = bad[n % len(bad)]
                assert (await http.request("POST", headers, body)).status in (400, 404, 415)
            for _ in range(300):
                other = await http.initialize()
                streams = [await http.stream(other), await http.stream(other, "s1")]
                assert (await http.request("DELETE", {"acp-connection-id": other})).status == 202
                for opened in streams:
                    await opened.returned.wait()
            assert app.active_connections >= 1 and cid in app.connection_ids  # the first one is untouched
            await stream.wait_events(0)
            assert (await http.request("DELETE", {"acp-connection-id": cid})).status == 202
            await stream.returned.wait()
            await app.wait_idle()
            await trio.testing.wait_all_tasks_blocked()
            assert len(http.nursery.child_tasks) == baseline  # every request's handler returned
            assert not app._http_connections  # nothing kept for the closed connections


# -- over hypercorn ---------------------------------------------------------------------------------------
@asynccontextmanager
async def served(app: AcpApp) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        [bound] = await nursery.start(serve, app, "127.0.0.1", 0)
        yield bound + "/acp"
        nursery.cancel_scope.cancel()


async def test_over_hypercorn_a_client_reads_413_and_http2_without_tls_works() -> None:
    script = Script()
    app = AcpApp(serve_streams=script.serve, max_message_bytes=1000)
    with trio.fail_after(DEADLINE):
        async with served(app) as url, httpx2.AsyncClient() as h1:
            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
            answer = await h1.post(url, json=init)
            assert answer.status_code == 200 and answer.content == Script.INIT
            cid = answer.headers["acp-connection-id"]

            async def chunks() -> AsyncIterator[bytes]:
                for _ in range(100):
                    yield b" " * 1000

            too_big = await h1.post(url, content=chunks(), headers={**JSON, "acp-connection-id": cid})
            assert (too_big.status_code, too_big.text) == (413, "Request body exceeds 1000 bytes")
            # HTTP/2 with prior knowledge (h2c): the same exchange, no Connection header on the stream
            async with httpx2.AsyncClient(http1=False, http2=True) as h2:
                async with h2.stream(
                    "GET", url, headers={"accept": "text/event-stream", "acp-connection-id": cid}
                ) as sse:
                    assert sse.http_version == "HTTP/2" and sse.status_code == 200
                    assert "connection" not in sse.headers
                    note = {"jsonrpc": "2.0", "method": "_n", "params": {}}
                    posted = await h2.post(url, json=emit(note), headers={"acp-connection-id": cid})
                    assert posted.status_code == 202
                    got = b""
                    async for data in sse.aiter_bytes():
                        got += data
                        if b"data: " in got and got.endswith(b"\n\n"):
                            break
                    assert got == b":\n\ndata: " + json.dumps(note).encode() + b"\n\n"


async def test_our_http_client_over_hypercorn_reaches_a_serve_streams_agent_verbatim() -> None:
    from acp_trio.transports.http import connect_http

    script = Script()
    app = AcpApp(serve_streams=script.serve)
    with trio.fail_after(DEADLINE):
        async with served(app) as url:
            async with connect_http(url, object()) as conn:
                from acp_schema import v1

                await conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
                assert conn.connection_id in app.connection_ids  # type: ignore[attr-defined]
                await conn.ext_notification("_emit", {"lines": []})
                await script.wait_read(2)
            await app.wait_idle()  # leaving sent DELETE: the agent's input ended
            assert script.ended.is_set()


async def test_the_typescript_sdks_http_client_drives_our_acp_app(ts_sdk: Path, tmp_path: Path) -> None:  # noqa: F811
    sys.path.insert(0, str(INTEROP))
    try:
        from trio_agent import InteropAgent
    finally:
        sys.path.remove(str(INTEROP))
    app = AcpApp(InteropAgent)
    (tmp_path / "input.txt").write_text(test_interop.INPUT_TEXT, encoding="utf-8")
    with trio.fail_after(TIME_LIMIT):
        async with served(app) as url:
            summary = await test_interop.run_summary(
                ["node", str(INTEROP / "ts_client.mjs"), str(tmp_path), url], {"ACP_INTEROP_NPM_DIR": str(ts_sdk)}
            )
            await app.wait_idle()  # the client sent DELETE: our side's connection and agent ended
    assert summary["agentExit"] is None  # no agent process: the agent is remote
    summary["agentExit"] = {"code": 0}  # what the shared check expects of a spawned agent
    test_interop.check_foreign_client_summary(summary, tmp_path)


async def test_the_typescript_http_client_meets_a_409_and_reattaches_with_session_load(ts_sdk: Path) -> None:  # noqa: F811
    from acp_schema import v1

    async with trio.open_nursery() as nursery:
        url = ""

        class ReattachAgent:
            """Takes each new session's SSE stream itself (a raw GET) until ``_test/release``."""

            def __init__(self, conn: Any) -> None:
                self.conn = conn
                self.release_stream = trio.Event()
                conn.on_ext_request("_test/release", self.release)

            async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
                capabilities = v1.AgentCapabilities(load_session=True)
                return v1.InitializeResponse(protocol_version=1, agent_capabilities=capabilities)

            async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
                await nursery.start(self.hold, "s1")  # before the answer names the session to the client
                return v1.NewSessionResponse(session_id="s1")

            async def hold(self, session_id: str, task_status: Any) -> None:
                headers = {"accept": "text/event-stream", "acp-connection-id": self.conn.connection_id}
                async with httpx2.AsyncClient() as raw:
                    async with raw.stream("GET", url, headers={**headers, "acp-session-id": session_id}) as sse:
                        assert sse.status_code == 200
                        task_status.started()
                        await self.release_stream.wait()

            async def release(self, params: Any) -> Any:
                self.release_stream.set()
                return {}

            async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
                return v1.LoadSessionResponse()

            async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
                text = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text="hello"))
                await v1.ClientPeer(self.conn).session_update(
                    v1.SessionNotification(session_id=params.session_id, update=text)
                )
                return v1.PromptResponse(stop_reason="end_turn")

        app = AcpApp(ReattachAgent)
        with trio.fail_after(TIME_LIMIT):
            [bound] = await nursery.start(serve, app, "127.0.0.1", 0)
            url = bound + "/acp"
            summary = await test_interop.run_summary(
                ["node", str(INTEROP / "ts_http_reattach.mjs"), url], {"ACP_INTEROP_NPM_DIR": str(ts_sdk)}
            )
            await app.wait_idle()
        nursery.cancel_scope.cancel()
    assert summary["failed"]["error"]["code"] == -32603  # the 409 failed the session, sticky
    assert summary["loaded"] == {} and summary["prompt"] == {"stopReason": "end_turn"}
    assert summary["updates"] == ["hello"]  # once reattached, the session's stream delivers


async def test_the_bridge_serves_a_stdio_agent_to_the_typescript_http_client(ts_sdk: Path, tmp_path: Path) -> None:  # noqa: F811
    from acp_trio.bridge import serve_bridge

    (tmp_path / "input.txt").write_text(test_interop.INPUT_TEXT, encoding="utf-8")
    agent = [sys.executable, str(INTEROP / "trio_agent.py")]
    with trio.fail_after(TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(functools.partial(serve_bridge, agent, "127.0.0.1", 0))
            summary = await test_interop.run_summary(
                ["node", str(INTEROP / "ts_client.mjs"), str(tmp_path), bound + "/acp"],
                {"ACP_INTEROP_NPM_DIR": str(ts_sdk)},
            )
            nursery.cancel_scope.cancel()
    summary["agentExit"] = {"code": 0}  # the agent process is the bridge's
    test_interop.check_foreign_client_summary(summary, tmp_path)


async def test_hypercorns_request_events_reach_the_application_queued_without_a_yield() -> None:
    """``EagerTaskGroup`` (what ``serve`` makes hypercorn's TCP server use) queues a request's events for
    the application without a yield: the application, started with the request, finds its body and the
    body's end both queued at its first step (hypercorn's own put yields after each event: the
    application ran between them about half the time, found the body without its end and waited)."""
    from hypercorn.config import Config
    from hypercorn.trio import tcp_server

    from acp_trio.transports._hypercorn import EagerTaskGroup, _use_eager_task_group

    _use_eager_task_group()
    assert tcp_server.TaskGroup is EagerTaskGroup  # type: ignore[attr-defined]
    first_looks: list[list[dict[str, Any]]] = []

    async def app(scope: Any, receive: Any, send: Any, sync_spawn: Any, call_soon: Any) -> None:
        found = []
        while True:
            try:
                found.append(receive.__self__.receive_nowait())
            except trio.WouldBlock:
                break
        first_looks.append(found)

    async def server_send(event: Any) -> None:
        pass

    body = {"type": "http.request", "body": b"{}", "more_body": True}
    end = {"type": "http.request", "body": b"", "more_body": False}
    with trio.fail_after(DEADLINE):
        for _ in range(8):  # (hypercorn's own queue: all 8 whole about once in 256 runs)
            async with EagerTaskGroup() as group:
                put = await group.spawn_app(app, Config(), {"type": "http"}, server_send)
                await put(body)
                await put(end)
    assert first_looks == [[body, end]] * 8

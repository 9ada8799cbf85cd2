"""Opening many ACP connections from one client process: the ``connect`` scenario of the remote benchmark.

Usage: ``python connect_client.py URL --connections N [--concurrency K]``.  Opens ``N`` ACP
connections to the server at ``URL``, ``K`` (default 16) being opened at any time, each with
``initialize`` and ``session/new`` (answers checked: a result with the request's id), and keeps
them open.  The same client for every server, written against the wire, not against either side's
SDK, so its own cost is small and the same whoever serves:

- ``ws://`` URLs: one WebSocket per ACP connection (trio-websocket); each JSON-RPC message is a text
  frame.  An idle connection: its WebSocket, open.
- ``http://`` URLs (Streamable HTTP): ``POST`` ``initialize`` (the answer names the connection in
  ``Acp-Connection-Id``), ``GET`` the connection's SSE stream, ``POST`` ``session/new`` (``202``),
  and its answer read from that stream.  An idle connection: its SSE ``GET``, open, as a client
  keeps it to hear the agent (its own TCP connection); the ``POST`` s go over one keep-alive TCP
  connection per opener (``K`` in all), which the server sees as ``K`` more TCP connections, not
  one per ACP connection.  HTTP/1.1 parsed with h11.

Once all are open this prints ``{"connections": N, "ok": K, "errors": [...], "seconds": S}`` (``S``:
from the first connection's start to the last one's ``session/new`` answer) and waits until its
standard input closes (the driver reads the server's memory meanwhile); then it closes every
connection (WebSocket close; for HTTP, ``DELETE`` and the streams closed) and prints
``{"closed_seconds": S}``.  The client runs without the garbage collector (``gc.disable()``), so
that its cost per connection does not grow with the connections it holds.
"""

from __future__ import annotations

import argparse
import gc
import json
import select
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import h11
import trio
import trio_websocket

INITIALIZE = '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}'
SESSION_NEW = '{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}'


def answered(text: str | bytes, request_id: int) -> bool:
    """Whether ``text`` is the successful answer to request ``request_id`` (raises on an error answer)."""
    message = json.loads(text)
    if message.get("id") != request_id:
        return False
    if "result" not in message:
        raise RuntimeError(f"request {request_id} failed: {str(message)[:200]}")
    return True


# -- WebSocket ------------------------------------------------------------------------------------


async def open_ws(url: str, nursery: trio.Nursery, kept: list[Any]) -> None:
    ws = await trio_websocket.connect_websocket_url(nursery, url)
    kept.append(ws)
    await ws.send_message(INITIALIZE)
    while not answered(await ws.get_message(), 0):
        pass
    await ws.send_message(SESSION_NEW)
    while not answered(await ws.get_message(), 1):
        pass


async def close_ws(ws: Any) -> None:
    await ws.aclose()


# -- Streamable HTTP --------------------------------------------------------------------------------


KEEP_ALIVE_REUSE = 4.0
"""Seconds a keep-alive connection may have been idle and still be reused: servers close idle ones
(hypercorn after its ``keep_alive_timeout``, 5 s; Node's ``http`` server after its
``keepAliveTimeout``, 5 s, which it checks less often), and a request sent on a connection the
server has closed fails with no answer (h11: ``can't handle event type ConnectionClosed when
role=SERVER and state=SEND_RESPONSE``), as every ``POST`` of an opener kept waiting more than 5 s
by a loaded machine did."""


class Http:
    """One HTTP/1.1 client connection (h11 over a trio TCP stream); :meth:`request` reconnects first
    when the connection was idle for over :data:`KEEP_ALIVE_REUSE` seconds or the server closed it
    meanwhile, as HTTP clients do (httpcore checks the same before reusing a connection)."""

    def __init__(self, stream: trio.SocketStream, host: str, port: int) -> None:
        self.stream = stream
        self.host = f"{host}:{port}".encode()  # the Host header
        self.address = (host, port)
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since: float | None = None  # the last answer's end (None: never used)
        self.reopened = 0

    @classmethod
    async def open(cls, host: str, port: int) -> Http:
        return cls(await trio.open_tcp_stream(host, port), host, port)

    def _stale(self) -> bool:
        """Idle too long, or readable while idle (the server closed it, or sent what it should not)."""
        if self.idle_since is None:
            return False
        if time.monotonic() - self.idle_since > KEEP_ALIVE_REUSE:
            return True
        readable, _, _ = select.select([self.stream.socket.fileno()], [], [], 0)
        return bool(readable)

    async def _reopen(self) -> None:
        await self.stream.aclose()
        self.stream = await trio.open_tcp_stream(*self.address)
        self.h11 = h11.Connection(h11.CLIENT)
        self.reopened += 1

    async def _send(self, *events: Any) -> None:
        await self.stream.send_all(b"".join(self.h11.send(e) or b"" for e in events))

    async def next_event(self) -> Any:
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                data = await self.stream.receive_some(65536)
                self.h11.receive_data(data)
                continue
            return event

    async def request(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes = b""
    ) -> tuple[int, dict[bytes, bytes], bytes]:
        """One request on this keep-alive connection: (status, headers, body)."""
        if self._stale():
            await self._reopen()
        elif self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
        self.idle_since = None
        all_headers = [("host", self.host.decode()), ("content-length", str(len(body))), *headers]
        await self._send(
            h11.Request(method=method, target=path, headers=all_headers), h11.Data(data=body), h11.EndOfMessage()
        )
        response = await self.next_event()
        if not isinstance(response, h11.Response):
            raise RuntimeError(f"{method} {path}: {response!r}")
        parts = []
        while not isinstance(event := await self.next_event(), h11.EndOfMessage):
            if isinstance(event, h11.Data):
                parts.append(bytes(event.data))
        self.idle_since = time.monotonic()
        return response.status_code, dict(response.headers), b"".join(parts)

    async def aclose(self) -> None:
        await self.stream.aclose()


class HttpAcp:
    """One idle Streamable HTTP ACP connection: its id and its SSE ``GET``'s TCP connection."""

    def __init__(self, connection_id: str, sse: Http) -> None:
        self.id = connection_id
        self.sse = sse


async def open_http(url: str, posts: Http, kept: list[Any]) -> None:
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
    json_headers = [("content-type", "application/json"), ("accept", "application/json, text/event-stream")]
    status, headers, body = await posts.request("POST", path, json_headers, INITIALIZE.encode())
    if status != 200 or not answered(body, 0):
        raise RuntimeError(f"initialize: {status} {body[:200]!r}")
    connection_id = headers[b"acp-connection-id"].decode()
    sse = await Http.open(host, port)
    acp = HttpAcp(connection_id, sse)
    kept.append(acp)
    get = h11.Request(
        method="GET",
        target=path,
        headers=[("host", sse.host.decode()), ("accept", "text/event-stream"), ("acp-connection-id", connection_id)],
    )
    await sse._send(get, h11.EndOfMessage())
    response = await sse.next_event()
    if not isinstance(response, h11.Response) or response.status_code != 200:
        raise RuntimeError(f"GET (SSE): {response!r}")
    id_headers = [*json_headers, ("acp-connection-id", connection_id)]
    status, _, body = await posts.request("POST", path, id_headers, SESSION_NEW.encode())
    if status != 202:
        raise RuntimeError(f"session/new: {status} {body[:200]!r}")
    buffer = b""
    while True:  # SSE events: "data: <message>" lines, blank line between (comments start with ':')
        event = await sse.next_event()
        if not isinstance(event, h11.Data):
            raise RuntimeError(f"SSE stream ended: {event!r}")
        buffer += bytes(event.data)
        *events, buffer = buffer.split(b"\n\n")
        for block in events:
            for line in block.split(b"\n"):
                if line.startswith(b"data:") and answered(line[5:].strip(), 1):
                    return


async def close_http(url: str, acp: HttpAcp) -> None:
    parts = urlsplit(url)
    try:
        posts = await Http.open(parts.hostname or "127.0.0.1", parts.port or 80)
        await posts.request("DELETE", parts.path, [("acp-connection-id", acp.id)])
        await posts.aclose()
    finally:
        await acp.sse.aclose()


# -- driver -----------------------------------------------------------------------------------------


async def run(url: str, connections: int, concurrency: int) -> None:
    http = url.startswith("http")
    kept: list[Any] = []
    errors: list[str] = []
    todo = iter(range(connections))
    parts = urlsplit(url)
    async with trio.open_nursery() as ws_nursery:  # trio-websocket's per-connection reader tasks

        async def opener() -> None:
            posts = await Http.open(parts.hostname or "127.0.0.1", parts.port or 80) if http else None
            try:
                for _ in todo:
                    try:
                        if posts is not None:
                            await open_http(url, posts, kept)
                        else:
                            await open_ws(url, ws_nursery, kept)
                    except Exception as exc:  # counted and reported, the others go on
                        errors.append(repr(exc)[:300])
            finally:
                if posts is not None:
                    await posts.aclose()

        start = time.perf_counter()
        async with trio.open_nursery() as openers:
            for _ in range(concurrency):
                openers.start_soon(opener)
        seconds = time.perf_counter() - start
        ok = connections - len(errors)
        print(json.dumps({"connections": connections, "ok": ok, "errors": errors[:5], "seconds": seconds}), flush=True)
        stdin = trio.lowlevel.FdStream(sys.stdin.fileno())
        while await stdin.receive_some():
            pass
        start = time.perf_counter()
        left = iter(kept)

        async def closer() -> None:
            for item in left:
                await (close_http(url, item) if http else close_ws(item))

        async with trio.open_nursery() as closers:
            for _ in range(concurrency):
                closers.start_soon(closer)
        print(json.dumps({"closed_seconds": time.perf_counter() - start}), flush=True)
        ws_nursery.cancel_scope.cancel()


def main() -> None:
    # the client's own collector would scan every connection it holds again and again (its cost grows
    # with their number); without it the client, the same for every server, stays a small share
    gc.disable()
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    trio.run(run, args.url, args.connections, args.concurrency)


if __name__ == "__main__":
    main()

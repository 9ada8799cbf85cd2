"""Keep-alive HTTP/1.1 connections for the Streamable HTTP client's ``POST`` s, driven with h11.

Why not httpx2 for these: a ``POST`` through ``httpx2.AsyncClient`` (its request and response
models, the connection pool of httpcore2, h11 underneath) cost about 0.9 to 1.4 ms of CPU on the
benchmark machine, where the same exchange driven with h11 directly over a trio TCP stream costs
about 0.25 ms; a round trip of the agent's request (an SSE event) and the client's answer (a
``POST``) took about 2 ms of the client's CPU, half of the whole round trip.  The ``POST`` s of one
ACP connection go one at a time, so a small pool with no limits, no queueing and no HTTP/2 does.

Contract: :class:`Http11Pool` sends a request and reads its whole answer (status, headers, body up
to a limit) on an idle connection of its own, else a new one, and keeps the connection for the
next request when both sides may go on (RFC 9112 § 9.3: persistent connections); an idle
connection the server closed meanwhile (its socket reads as the end of input, or has bytes no
request asked for) is dropped before it is used, as httpcore does.  The request goes out in one
write (headers and body together).  Failures raise httpx2's exceptions, as ``httpx2.AsyncClient``
would for the same failure (``ConnectError`` from the ``OSError``, ``ConnectTimeout``,
``ReadError``, ``WriteError``, ``RemoteProtocolError``, ``LocalProtocolError``), so the caller
handles both clients alike; a connection whose request failed or was cancelled is closed.

Only for ``http://`` URLs with no proxy set in the environment (``http_proxy``, ``all_proxy``:
then httpx2, which honours them, sends everything); TLS, HTTP/2, a custom httpx2 transport stay
with httpx2 (see :func:`usable_for`).
"""

from __future__ import annotations

import select
import sys
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

import h11
import httpx2
import trio

_MAX_RECV = 65536


def usable_for(url: str, transport: Any) -> bool:
    """Whether :class:`Http11Pool` may send the requests to ``url``: ``http://``, no custom httpx2
    ``transport``, and no HTTP proxy set in the environment (httpx2 honours one; this pool does not)."""
    if transport is not None or urllib.parse.urlsplit(url).scheme != "http":
        return False
    proxies = urllib.request.getproxies_environment()
    return "http" not in proxies and "all" not in proxies


def _readable(sock: Any) -> bool:
    """Whether an idle socket has something to read: the server closed it, or sent what nobody asked for."""
    fd = sock.fileno()
    if fd < 0:
        return True
    if sys.platform == "win32" or not hasattr(select, "poll"):  # pragma: no cover - poll is POSIX
        readable, _, _ = select.select([fd], [], [], 0)
        return bool(readable)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class _Connection:
    """One TCP connection and its HTTP/1.1 state (h11)."""

    __slots__ = ("h11", "stream")

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)

    async def exchange(self, head: h11.Request, body: bytes | None, limit: int) -> tuple[int, list[Any], bytes | None]:
        """Send the request, read the answer: (status, header pairs, body or ``None`` when over ``limit``)."""
        conn = self.h11
        try:
            data = conn.send(head) or b""
            if body:
                data += conn.send(h11.Data(data=body)) or b""
            data += conn.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:
            raise httpx2.LocalProtocolError(str(exc)) from exc
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise httpx2.WriteError(str(exc) or "the connection broke while sending") from exc
        status = 0
        headers: list[Any] = []
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx2.RemoteProtocolError(str(exc)) from exc
            if event is h11.NEED_DATA:
                try:
                    chunk = await self.stream.receive_some(_MAX_RECV)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    raise httpx2.ReadError(str(exc) or "the connection broke while reading") from exc
                if not chunk and conn.their_state is h11.SEND_RESPONSE:
                    raise httpx2.RemoteProtocolError("Server disconnected without sending a response.")
                conn.receive_data(chunk)
            elif isinstance(event, h11.Response):
                status = event.status_code
                headers = event.headers.raw_items()
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    return status, headers, None  # the caller closes the connection (the rest is unread)
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return status, headers, b"".join(parts)
            elif isinstance(event, h11.ConnectionClosed):
                raise httpx2.RemoteProtocolError("Server disconnected without sending a response.")
            # an InformationalResponse (100 Continue, 103): the final answer follows

    def reusable(self) -> bool:
        """Both sides finished their message and may go on: ready for the next request."""
        conn = self.h11
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            return True
        return False


class Http11Pool:
    """Idle keep-alive HTTP/1.1 connections to one ``http://`` origin (see the module docstring).

    ``url``: the endpoint (``http://127.0.0.1:8765/acp``); ``connect_timeout``: seconds to open a
    TCP connection (``httpx2.ConnectTimeout`` past it); ``default_headers``: sent with every request
    unless the request has a header of that name (``User-Agent``, ``Accept``).
    """

    def __init__(self, url: str, connect_timeout: float, default_headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host = parts.hostname or ""
        self.port = parts.port or 80
        self.target = (parts.path or "/").encode("ascii") + (b"?" + parts.query.encode("ascii") if parts.query else b"")
        self.authority = parts.netloc.rpartition("@")[2].encode("ascii")
        self.connect_timeout = connect_timeout
        self.default_headers = list(default_headers)
        self._default_names = {name.lower() for name, _ in self.default_headers}
        self._idle: list[_Connection] = []
        self._closed = False

    async def _connect(self) -> _Connection:
        try:
            with trio.fail_after(self.connect_timeout):
                stream = await trio.open_tcp_stream(self.host, self.port)
        except trio.TooSlowError as exc:
            raise httpx2.ConnectTimeout(f"no TCP connection within {self.connect_timeout} s") from exc
        except OSError as exc:
            raise httpx2.ConnectError(str(exc)) from exc
        return _Connection(stream)

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not _readable(conn.stream.socket):
                return conn
            conn.stream.socket.close()  # the server closed it (its keep-alive timeout) or broke it
        return None

    def _head(self, method: str, headers: Sequence[tuple[bytes, bytes]], body: bytes | None) -> h11.Request:
        names = {name.lower() for name, _ in headers}
        wire: list[tuple[bytes, bytes]] = [(b"Host", self.authority)]
        if self._default_names - names:
            wire += [(name, value) for name, value in self.default_headers if name.lower() not in names]
        wire += headers
        if body is not None or method == "POST":
            wire.append((b"Content-Length", str(len(body or b"")).encode()))
        return h11.Request(method=method, target=self.target, headers=wire)

    async def request(
        self, method: str, headers: Sequence[tuple[bytes, bytes]], body: bytes | None, limit: int
    ) -> tuple[int, Mapping[str, str], list[tuple[str, str]], bytes | None]:
        """Send one request; return (status, headers by lower-case name, header pairs, body).

        ``headers``: the request's (bytes, ISO-8859-1), without ``Host`` and ``Content-Length``.
        The body is ``None`` when over ``limit`` bytes.  Raises httpx2's exceptions (see the module
        docstring); ``trio.ClosedResourceError`` once :meth:`aclose` was called.
        """
        if self._closed:
            raise trio.ClosedResourceError("the HTTP/1.1 connections were closed")
        try:
            head = self._head(method, headers, body)
        except h11.LocalProtocolError as exc:
            raise httpx2.LocalProtocolError(str(exc)) from exc
        conn = self._take_idle() or await self._connect()
        kept = False
        try:
            status, raw, content = await conn.exchange(head, body, limit)
            kept = content is not None and not self._closed and conn.reusable()
        finally:
            if kept:
                self._idle.append(conn)
            else:
                conn.stream.socket.close()
        pairs = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]
        by_name: dict[str, str] = {}
        for name, value in pairs:
            key = name.lower()
            by_name[key] = f"{by_name[key]}, {value}" if key in by_name else value
        return status, by_name, pairs, content

    def aclose_now(self) -> None:
        """Close every idle connection (a request in flight closes its own when it ends)."""
        self._closed = True
        while self._idle:
            self._idle.pop().stream.socket.close()


__all__ = ["Http11Pool", "usable_for"]

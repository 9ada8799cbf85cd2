"""The Streamable HTTP transport, client side: :func:`connect_http` to an ACP agent served remotely.

Spec: the RFD ``docs/rfds/streamable-http-websocket-transport.mdx`` ("Streamable HTTP"), and
where the RFD and the official TypeScript SDK 2.4.0 (``AcpServer``, ``createHttpStream``)
disagree, what the SDK does, since that is what servers speak today:

- ``POST`` of ``initialize`` without ``Acp-Connection-Id`` → ``200`` with the agent's JSON-RPC
  response as the body (verbatim) and the connection id in the ``Acp-Connection-Id`` header;
- every other message → ``POST`` with ``Acp-Connection-Id`` (and ``Acp-Session-Id`` for a session's
  messages: one whose ``params.sessionId`` is a string, or our response to a request that came on
  that session's stream) → ``202``, the answer comes later on an SSE stream;
- one connection-scoped ``GET`` stream (``Accept: text/event-stream``), opened after
  ``initialize``, and one session-scoped ``GET`` stream per session (``Acp-Session-Id``), opened
  when a response names a new ``sessionId`` and in any case *before* the first ``POST`` for that
  session (the client waits for its ``200``), as the TypeScript client does;
- ``DELETE`` with ``Acp-Connection-Id`` when the connection closes.

Each SSE event's ``data`` is one JSON-RPC message; the client does not resume streams
(``Last-Event-ID`` is deferred to a later version of the RFD).  The answer to ``session/load`` or
``session/resume`` comes on the connection's stream (the TypeScript server's choice) while the
replayed updates come on the session's, and nothing orders two streams: the client holds such an
answer until the session's stream has delivered nothing for 50 ms (at most 2 s), so the request
returns after its replay, as over stdio (``StandardClient.states.load`` relies on it).

Contract: like every transport (:mod:`acp_trio.transports`), this one only bridges the HTTP
exchange to a pair of trio byte streams of newline-delimited JSON and hands them to
:class:`~acp_trio.ClientSideConnection`, so the connection's rules (ordering, cancellation,
capabilities, negotiation, limits) hold unchanged.  Each line the connection writes is POSTed as
it is, one at a time and in order (a request's ``202`` is awaited before the next message goes,
so the server sees our messages in the order the connection wrote them); each SSE event becomes
one line of the input.  Two shortcuts keep a round trip to one task, as a bare httpx2 client's
(the SSE event in, the answer's ``POST`` out): when the connection is idle, an SSE stream's task
hands what it read to the connection itself (``Connection.deliver_lines``: its requests run there
and then, in the order read), and the task that has an answer POSTs it (``reader_sends``) instead of
waking the connection's writer.  That task then reads nothing meanwhile, so the stream's reading
moves to another task when a handler has to wait (the first goes on with the handler) or the
``POST`` waits more than 50 ms (a server that holds it until the client has read more).

What HTTP itself says about a message is turned into JSON-RPC where it
concerns one request, and into the connection's end where it concerns the transport:

- ``409`` (on a session's ``GET`` or ``POST``): that session has another reader; its pending and
  later requests fail with ``-32603`` until a ``session/load`` or ``session/resume`` for it
  reattaches it (its stream is opened again); its notifications and responses are dropped with a
  warning.  Other sessions go on.
- ``401``/``403``/``404``/``410``, any other non-2xx answer to a ``GET`` (but a session's 409), a
  network error, the connection-scoped stream ending, an SSE event over ``max_message_bytes``
  (as the TypeScript client): the transport closes; pending and later requests raise
  :class:`HttpTransportClosed` (a :class:`~acp_trio.ConnectionClosed`) naming the status and URL.
- any other non-2xx answer to a request: only that request fails, with ``-32603`` and
  ``data = {"status": ..., "body": ...}`` (the body parsed as JSON when it is, at most 8 KiB);
  to a notification (``session/cancel``) or our response to an agent's request: the transport
  closes (:class:`HttpTransportClosed` with that status), since the message is lost and nothing
  else would tell the agent or the caller (the turn waiting for it would hang); as the
  TypeScript client does.
- a session id that cannot be sent in the ``Acp-Session-Id`` header (a character outside
  ISO-8859-1, or a control character; ACP allows any string): only that session fails, as for a
  409 (its requests fail with ``-32603`` naming the session id, its notifications are dropped with
  a warning); other sessions go on.  Header values are sent as ISO-8859-1 bytes, as Node's
  ``fetch`` sends them, so ``séance-1`` works with both servers.
- a session's stream ending: only that session's pending requests fail (``-32603``); the next
  message for the session opens the stream again.

Libraries: httpx2 (the maintained continuation of httpx, by its author and now kept by
Pydantic; the same API, already installed with the ``mcp`` extra), with its ``http2`` extra
(h2).  HTTP/1.1 by default: the TypeScript server speaks only HTTP/1.1, and httpx2 2.16's HTTP/2
connection can stall one stream while several are open on it (measured: with two SSE streams
open on one HTTP/2 connection, to hypercorn or to Node's http2 server, an event written by the
server reached the client late or never in most runs; the class of read-lock deadlocks reported
against httpx2/httpcore, e.g. pydantic/httpx2 issues 1133 and 1216).  ``http2=True`` offers
HTTP/2 by ALPN on ``https://`` for a server that needs it.  It runs on trio natively
(httpcore2's trio backend).  The SSE framing is :mod:`acp_trio.transports._sse` (the HTML
standard's rules: CR, LF and CRLF line ends, comments, other fields ignored, a cap on an event's
size), which takes each network read whole: httpx2's ``EventSource``, used before, handed over
one event per ``await`` and cost half of the client's time per streamed update.

Needs the ``remote`` extra (``pip install acp-trio[remote]``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import ssl
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson
import trio

from .._connection import ConnectionClosed
from .._nursery import owned_nursery
from .._roles import ClientSideConnection
from ._lines import LineSendStream
from ._sse import SseParser, SseStreamError
from .cookies import CookieStore
from .websocket import bytes_to_line, text_to_line

if TYPE_CHECKING:
    import httpx2

log = logging.getLogger("acp_trio.http")

HEADER_CONNECTION_ID = "Acp-Connection-Id"
"""The RFD's header naming the ACP connection (set by the server on the answer to ``initialize``)."""
HEADER_SESSION_ID = "Acp-Session-Id"
"""The RFD's header naming the session (the ACP ``sessionId``) of a session-scoped request or stream."""
DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024
"""Largest message (an SSE event, the ``initialize`` answer) accepted by default, in bytes (32 MiB, as in TS)."""
DEFAULT_MAX_BUFFERED_BYTES = 4 * 1024 * 1024
"""Bytes of received messages buffered for the connection before the SSE streams stop reading (backpressure)."""
FATAL_STATUSES = frozenset({401, 403, 404, 410})
"""HTTP statuses that close the transport (unauthorized, forbidden, unknown connection, gone)."""
REATTACH_METHODS = frozenset({"session/load", "session/resume"})
"""Requests that reattach a session whose stream failed with 409."""

_default_contexts: dict[tuple[bool, str | None, str | None], ssl.SSLContext] = {}
_default_contexts_lock = threading.Lock()


def default_tls_context(http2: bool = False) -> ssl.SSLContext:
    """The process's shared ``ssl.SSLContext`` for ``verify=True`` (the default of :func:`connect_http`).

    Built on first use with ``httpx2.create_ssl_context(verify=True)`` (the system's trusted
    certificates, or the file or directory named by ``SSL_CERT_FILE``/``SSL_CERT_DIR``), then kept
    for the process: building one loads the CA bundle, about 50 ms of CPU, which every
    ``connect_http`` (and the bridge's ``--connect http://``) paid before, for ``http://`` URLs too.
    One context per ``http2`` value and per value of those two environment variables, so a changed
    ``SSL_CERT_FILE`` gets its own: httpcore2 sets the context's ALPN protocols before each TLS
    handshake (``http/1.1``, or ``h2`` and ``http/1.1``), and with one context per ``http2`` value
    it always sets the same ones on a given context.  Thread-safe: a lock makes sure one context is
    built per key even when trio runs in several threads.  Do not change the returned context (it
    is shared); pass your own ``ssl.SSLContext`` as ``verify=`` instead.
    """
    key = (http2, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    context = _default_contexts.get(key)
    if context is None:
        import httpx2

        with _default_contexts_lock:
            context = _default_contexts.get(key)
            if context is None:
                context = _default_contexts[key] = httpx2.create_ssl_context(verify=True)
    return context


INTERNAL_ERROR = -32603
_RESERVED = frozenset({HEADER_CONNECTION_ID.lower(), HEADER_SESSION_ID.lower()})  # never the caller's
_ERROR_BODY_BYTES = 8192
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 §5.1: a field name


def field_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be sent as an HTTP field value, or ``None`` when it can.

    RFC 9110 §5.5: visible characters of ISO-8859-1 (sent as those bytes, as Node's ``fetch``
    sends them), with spaces and tabs inside but not at either end; no control characters.
    """
    for index, char in enumerate(value):
        code = ord(char)
        if code > 0xFF:
            return f"the character {char!r} at index {index} is not in ISO-8859-1"
        if (code < 0x20 and char != "\t") or code == 0x7F:
            return f"the control character {char!r} at index {index} is not allowed"
    if value != value.strip(" \t"):
        return "it starts or ends with whitespace (which HTTP strips)"
    return None


def _wire(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    """The headers as bytes (ISO-8859-1); ``ValueError`` naming the header whose value is not."""
    try:
        return [(name.encode("ascii"), value.encode("latin-1")) for name, value in headers.items()]
    except UnicodeEncodeError:
        _check_headers(headers)
        raise


def _check_headers(headers: Mapping[str, str]) -> None:
    """``ValueError`` naming the first header that cannot be sent (its name or its value)."""
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise ValueError(f"the header name {name!r} is not an HTTP token (RFC 9110 §5.1)")
        problem = field_value_problem(value) if isinstance(value, str) else "it is not a str"
        if problem is not None:
            raise ValueError(f"the {name!r} header cannot be sent: {problem}")


class HttpTransportClosed(ConnectionClosed):
    """The Streamable HTTP transport closed: ``status`` (the HTTP status that closed it, or ``None``
    for a network error, a stream that ended, an oversized event) and ``url`` (the endpoint).

    ``str(exc)`` says both, what happened and what to do, e.g. ``the ACP server answered HTTP 404
    (Unknown Acp-Connection-Id) to POST session/prompt; the connection is gone (the server closed it
    or restarted): connect again (http://127.0.0.1:8765/acp)``, or, when no server listens at the
    URL, ``POST initialize failed: nothing listens on 127.0.0.1:8765 (connection refused): start
    the ACP server there, or fix the host and port in the URL (http://127.0.0.1:8765/acp)``.  It
    comes out of ``async with connect_http(...)`` as itself, never inside an exception group.
    """

    def __init__(self, reason: str, *, url: str, status: int | None = None, **details: Any) -> None:
        self.url = url
        self.status = status
        super().__init__(reason, **details)

    def clone(self) -> HttpTransportClosed:
        """A new exception with the same reason, URL and status (each raise gets its own traceback)."""
        return type(self)(self.reason, url=self.url, status=self.status)


def _id_key(request_id: Any) -> bytes:
    """A request id as a dict key that keeps ``1`` and ``"1"`` apart."""
    return orjson.dumps(request_id)


class _Inbox(trio.abc.ReceiveStream):
    """The connection's input: lines put by the SSE readers (and answers made up here), read as NDJSON.

    ``put`` waits while more than ``high_water`` bytes wait to be read, so a slow connection slows
    the SSE readers, and through them the server (instead of memory growing without bound).
    """

    def __init__(self, high_water: int) -> None:
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._high_water = high_water
        self._eof = False
        self._readable = trio.lowlevel.ParkingLot()
        self._space = trio.lowlevel.ParkingLot()

    async def put(self, line: bytes) -> None:
        # no checkpoint of its own when there is room: the SSE reader checkpoints on every read
        while self._size >= self._high_water and not self._eof:
            await self._space.park()
        self.put_nowait(line)

    def put_nowait(self, line: bytes) -> None:
        if self._eof or not line:  # an empty chunk would read as the end of stream
            return
        self._chunks.append(line)
        self._size += len(line)
        if self._readable:
            self._readable.unpark_all()

    @property
    def empty(self) -> bool:
        """Nothing waits to be read, and the input has not ended."""
        return not self._chunks and not self._eof

    def end(self) -> None:
        """No more input: the reader gets what is buffered, then the end of stream."""
        self._eof = True
        self._readable.unpark_all()
        self._space.unpark_all()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._chunks or self._eof:
            await trio.lowlevel.checkpoint()
        while not self._chunks:
            if self._eof:
                return b""
            await self._readable.park()
        limit = max_bytes if max_bytes is not None else 1 << 62
        parts: list[bytes] = []
        taken = 0
        while self._chunks and taken < limit:
            chunk = self._chunks.popleft()
            if taken + len(chunk) > limit:
                cut = limit - taken
                self._chunks.appendleft(chunk[cut:])
                chunk = chunk[:cut]
            parts.append(chunk)
            taken += len(chunk)
        self._size -= taken
        if self._size < self._high_water:
            self._space.unpark_all()
        return b"".join(parts)

    async def aclose(self) -> None:
        self.end()
        self._chunks.clear()
        self._size = 0
        await trio.lowlevel.checkpoint()


class _PostStream(LineSendStream):
    """The connection's output: each line POSTed (:meth:`_Exchange.post_lines`).

    ``reader_sends``: a send takes a round trip (the POST's answer), and may be awaited by any task,
    so :class:`~acp_trio.Connection`'s reader sends the answers of what it read itself instead of
    waking its writer task for them (one task step less per round trip)."""

    reader_sends = True


class _Reading(NamedTuple):
    """An SSE stream being read: its response, the iterator of its body and its parser (one task reads
    it at a time; :meth:`_Exchange._run_stream` hands it from task to task)."""

    response: httpx2.Response
    chunks: AsyncIterator[bytes]
    parser: SseParser


class _Stream:
    """One SSE ``GET`` stream (the connection's, or a session's): ``ready`` is set once it answered;
    ``event_at``: when it last delivered events (trio time)."""

    __slots__ = ("event_at", "ok", "ready", "scope")

    def __init__(self) -> None:
        self.ready = trio.Event()
        self.ok = False
        self.scope = trio.CancelScope()
        self.event_at = -math.inf


class _Exchange:
    """The HTTP side of one ACP connection: POSTs, SSE streams, routes, the pending requests."""

    def __init__(
        self,
        url: str,
        http: httpx2.AsyncClient,
        nursery: trio.Nursery,
        *,
        headers: Mapping[str, str],
        cookies: CookieStore,
        max_message_bytes: int,
        max_buffered_bytes: int,
        connect_timeout: float = 30.0,
        streams_http: httpx2.AsyncClient | None = None,
    ) -> None:
        self.url = url
        self.connect_timeout = connect_timeout
        self.http = http  # POSTs and DELETE
        self.streams_http = http if streams_http is None else streams_http  # the SSE streams' GETs
        self._parsed_url: httpx2.URL | None = None  # the URL parsed once (httpx2 parses a str at every request)
        self.base_headers = dict(headers)
        self.cookies = cookies
        self.nursery = nursery
        self.max_message_bytes = max_message_bytes
        self.inbox = _Inbox(max_buffered_bytes)
        self.connection_id: str | None = None
        self.fatal: HttpTransportClosed | None = None
        self.closing = False
        self.on_connection_id: Any = None
        # requests we POSTed and have no answer to yet: id key → (id, session id or None)
        self.pending: dict[bytes, tuple[Any, str | None]] = {}
        # the agent's requests waiting for our answer: id key → the session whose stream carried them
        self.inbound_routes: dict[bytes, str | None] = {}
        self.streams: dict[str | None, _Stream] = {}
        self.failed_sessions: dict[str, str] = {}  # session id → why (409)
        self._posts: set[trio.CancelScope] = set()
        # the POST headers of each session (None: the connection's), as sent, and the cookie version they carry
        self._post_headers: dict[str | None, tuple[int, list[tuple[bytes, bytes]]]] = {}
        # session/load and session/resume requests: id key → the session whose replay precedes the answer
        self.replaying: dict[bytes, str] = {}
        # the connection's Connection.deliver_lines: SSE readers hand it what they read, when it can take it
        self.deliver_lines: Callable[[bytes, Callable[[], object]], Awaitable[int]] | None = None

    # -- closing -----------------------------------------------------------------------------------
    def fail(self, reason: str, status: int | None = None) -> None:
        """Close the transport: the connection reads the end of its input and fails with this reason."""
        if self.fatal is not None or self.closing:
            return
        self.fatal = HttpTransportClosed(f"{reason} ({self.url})", url=self.url, status=status)
        log.warning("%s", self.fatal.reason)
        self.inbox.end()
        for scope in self._posts:
            scope.cancel()
        for stream in self.streams.values():
            stream.scope.cancel()

    async def closing_error(self, reason: str) -> ConnectionClosed:
        if self.fatal is not None:
            return self.fatal.clone()
        return HttpTransportClosed(f"{reason} ({self.url})", url=self.url)

    def _fatal_status(self, status: int, body: str, what: str) -> None:
        shown = " ".join(body.split())[:200]  # one line
        detail = f" ({shown})" if shown else ""
        sent = {name.lower() for name in self.base_headers}
        if status == 401:
            meaning = "not authorized: " + (
                "the server did not accept the Authorization header; send the token it was started with"
                if "authorization" in sent
                else "send the token the server was started with: "
                "connect_http(..., headers={'Authorization': 'Bearer <token>'})"
            )
        elif status == 403:
            meaning = "forbidden: the server does not let this client in" + (
                " (an Origin it does not allow? drop the header, or allow it: AcpApp(allowed_origins=[...]))"
                if "origin" in sent
                else ""
            )
        elif self.connection_id is None:  # 404/410 before a connection exists: the wrong URL
            meaning = "no ACP endpoint at this URL: check its path (acp-trio's AcpApp serves /acp)"
        else:
            meaning = "the connection is gone (the server closed it or restarted): connect again"
        self.fail(f"the ACP server answered HTTP {status}{detail} to {what}; {meaning}", status)

    # -- answers made up here --------------------------------------------------------------------
    def answer_error(self, request_id: Any, message: str, data: Any = None) -> None:
        """Fail one of our requests with ``-32603`` (as if the agent had answered it)."""
        self.pending.pop(_id_key(request_id), None)
        error: dict[str, Any] = {"code": INTERNAL_ERROR, "message": message}
        if data is not None:
            error["data"] = data
        self.inbox.put_nowait(orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}) + b"\n")

    def fail_session_requests(self, session_id: str, message: str) -> None:
        for request_id, session in list(self.pending.values()):
            if session == session_id:
                self.answer_error(request_id, message, {"sessionId": session_id})

    def fail_session(self, session_id: str, why: str) -> None:
        """A 409: the session fails until ``session/load`` or ``session/resume`` reattaches it."""
        log.warning("ACP session %s over %s failed: %s", session_id, self.url, why)
        self.failed_sessions[session_id] = why
        self.fail_session_requests(session_id, f"ACP session {session_id} failed: {why}")

    # -- HTTP ------------------------------------------------------------------------------------
    def _headers(self, session_id: str | None = None, **more: str) -> dict[str, str]:
        """The caller's headers (not the RFD's), then the transport's, then the stored cookies (the caller's win)."""
        own: dict[str, str] = {}
        if self.connection_id is not None:
            own[HEADER_CONNECTION_ID] = self.connection_id
        if session_id is not None:
            own[HEADER_SESSION_ID] = session_id
        own.update(more)
        lowered = {name.lower() for name in own} | _RESERVED
        headers = {name: value for name, value in self.base_headers.items() if name.lower() not in lowered}
        headers.update(own)
        return self.cookies.apply(headers)

    async def _read(self, response: httpx2.Response, limit: int) -> bytes | None:
        """The body, or ``None`` when it is over ``limit`` bytes."""
        parts: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                return None
            parts.append(chunk)
        return b"".join(parts)

    def _post_wire(self, session_id: str | None) -> list[tuple[bytes, bytes]]:
        """A message's POST headers as sent (``ValueError`` when one cannot be), built once per session
        and again only when the stored cookies change."""
        version = self.cookies.version
        cached = self._post_headers.get(session_id)
        if cached is not None and cached[0] == version:
            return cached[1]
        wire = _wire(self._headers(session_id, **{"Content-Type": "application/json"}))
        self._post_headers[session_id] = (version, wire)
        return wire

    async def _request(
        self,
        method: str,
        what: str,
        headers: dict[str, str] | None,
        content: bytes | None = None,
        limit: int = 0,
        session_id: str | None = None,
    ) -> tuple[int, Mapping[str, str], bytes | None]:
        """One HTTP request: (status, headers, body up to ``limit`` bytes); ``headers`` ``None``: a
        message's POST headers for ``session_id``.  A network error closes the transport; raises
        ``trio.BrokenResourceError`` once it is closed."""
        import httpx2

        if self.fatal is not None:
            raise trio.BrokenResourceError(self.fatal.reason)
        scope = trio.CancelScope()
        self._posts.add(scope)
        try:
            with scope:
                wire = self._post_wire(session_id) if headers is None else _wire(headers)
                url = self._parsed_url
                if url is None:
                    url = self._parsed_url = httpx2.URL(self.url)
                # what AsyncClient.stream does, without its context manager's generator
                response = await self.http.send(
                    self.http.build_request(method, url, headers=wire, content=content), stream=True
                )
                try:
                    self.cookies.store(response.headers.raw)
                    body = await self._read(response, max(limit, _ERROR_BODY_BYTES))
                    return response.status_code, response.headers, body
                finally:
                    await response.aclose()
        except httpx2.HTTPError as exc:
            self.fail(f"{what} failed: {_network_problem(exc, self.url, self.connect_timeout)}")
        except ValueError as exc:  # a header the server gave us (a connection id, a cookie) that cannot go back
            self.fail(f"{what} failed: {exc}")
        finally:
            self._posts.discard(scope)
        assert self.fatal is not None or self.closing
        raise trio.BrokenResourceError(self.fatal.reason if self.fatal else "the transport is closing")

    # -- sending ---------------------------------------------------------------------------------
    async def post_lines(self, lines: list[bytes]) -> bool:
        """``LineSendStream``'s batch send: POST each line in turn (see :meth:`post`); ``True`` when
        every one went out as a request (each passed schedule points: the stream adds none)."""
        posted = True
        for line in lines:
            posted = await self.post(line) and posted
        return posted

    async def post(self, line: bytes) -> bool:
        """POST one message the connection wrote (see the module docstring for what each answer does).

        Returns whether it was POSTed (``False``: it was answered or dropped here, without waiting)."""
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            msg = None
        message: dict[str, Any] = msg if isinstance(msg, dict) else {}
        method = message.get("method")
        is_request = isinstance(method, str) and "id" in message
        is_response = method is None and "id" in message and ("result" in message or "error" in message)
        request_id = message.get("id")
        what = f"POST {method}" if isinstance(method, str) else "POST (a response)" if is_response else "POST"
        if self.connection_id is None:
            if is_request and method == "initialize":
                await self._initialize(line, request_id)
                return True
            if is_request:
                self.answer_error(request_id, "Streamable HTTP: the first request must be initialize")
            else:
                log.warning("not sent to %s before initialize: %s", self.url, line[:200])
            return False
        params = message.get("params")
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if is_response:
            session_id = self.inbound_routes.pop(_id_key(request_id), None)
        if not isinstance(session_id, str):
            session_id = None
        if session_id is not None:
            if session_id in self.failed_sessions and not (is_request and method in REATTACH_METHODS):
                why = self.failed_sessions[session_id]
                if is_request:
                    # no reattaching a session whose id cannot be sent: it would fail again
                    hint = (
                        "" if field_value_problem(session_id) else "; reattach it with session/load or session/resume"
                    )
                    self.answer_error(
                        request_id, f"ACP session {session_id} failed: {why}{hint}", {"sessionId": session_id}
                    )
                else:
                    log.warning("dropped a message for the failed ACP session %s: %s", session_id, line[:200])
                return False
            self.failed_sessions.pop(session_id, None)
            if not await self.open_stream(session_id):
                why = self.failed_sessions.get(session_id, "its SSE stream could not be opened")
                if is_request:
                    self.answer_error(request_id, f"ACP session {session_id} failed: {why}", {"sessionId": session_id})
                elif self.fatal is None and not self.closing:
                    log.warning("dropped a message for the failed ACP session %s (%s): %s", session_id, why, line[:200])
                return False
        if is_request:
            self.pending[_id_key(request_id)] = (request_id, session_id)
            if method in _REPLAYING_METHODS and session_id is not None:
                self.replaying[_id_key(request_id)] = session_id
        status, _, body = await self._request("POST", what, None, line, session_id=session_id)
        if 200 <= status < 300:
            return True
        text = (body or b"")[:_ERROR_BODY_BYTES].decode("utf-8", "replace")
        if status in FATAL_STATUSES:
            self._fatal_status(status, text, what)
            raise trio.BrokenResourceError(self.fatal.reason if self.fatal else what)
        if status == 409 and session_id is not None:
            self.fail_session(session_id, f"HTTP 409 to {what}: {text[:200]}")
        elif is_request:
            self.answer_error(
                request_id, f"HTTP {status} from the ACP server ({self.url})", {"status": status, "body": _body(text)}
            )
        else:  # a notification or our answer to the agent: nothing else can report it (as the TS client)
            detail = f" ({text[:200]})" if text else ""
            self.fail(f"the ACP server answered HTTP {status}{detail} to {what}; the message was not delivered", status)
            raise trio.BrokenResourceError(self.fatal.reason if self.fatal else what)
        return True

    async def _initialize(self, line: bytes, request_id: Any) -> None:
        status, headers, body = await self._request(
            "POST",
            "POST initialize",
            self._headers(**{"Content-Type": "application/json"}),
            line,
            self.max_message_bytes,
        )
        if body is None:
            self.fail(f"the answer to initialize is over {self.max_message_bytes} bytes")
            return
        text = body.decode("utf-8", "replace")
        if status in FATAL_STATUSES:
            self._fatal_status(status, text[:_ERROR_BODY_BYTES], "POST initialize")
            return
        answer = _json_object(body)
        same_id = answer is not None and answer.get("id") == request_id and ("result" in answer or "error" in answer)
        if status != 200:
            if same_id:  # the server's own JSON-RPC error (the TypeScript server's -32603 "Initialize failed")
                self.inbox.put_nowait(text_to_line(text) + b"\n")
            else:
                self.answer_error(
                    request_id,
                    f"HTTP {status} from the ACP server ({self.url})",
                    {"status": status, "body": _body(text[:_ERROR_BODY_BYTES])},
                )
            return
        connection_id = headers.get(HEADER_CONNECTION_ID)
        if not connection_id:
            self.fail(f"the answer to initialize has no {HEADER_CONNECTION_ID} header")
            return
        if not same_id:
            self.fail(f"the answer to initialize is not a JSON-RPC response to it: {text[:200]!r}")
            return
        self.connection_id = connection_id
        if self.on_connection_id is not None:
            self.on_connection_id(connection_id)
        self.nursery.start_soon(self.open_stream, None)
        self.inbox.put_nowait(text_to_line(text) + b"\n")

    # -- receiving -------------------------------------------------------------------------------
    async def open_stream(self, session_id: str | None) -> bool:
        """Open the SSE stream of ``session_id`` (``None``: the connection's) unless it is open;
        wait until the server answered; return whether it is open."""
        stream = self.streams.get(session_id)
        if stream is not None and stream.ready.is_set():  # open (or just failed): no wait, no yield
            return stream.ok
        if stream is None:
            if self.fatal is not None or self.closing:
                return False
            problem = None if session_id is None else field_value_problem(session_id)
            if session_id is not None and problem is not None:
                # only this session is unusable over HTTP (other sessions go on): as a 409 does
                self.fail_session(session_id, f"its id cannot be sent in the {HEADER_SESSION_ID} header: {problem}")
                return False
            stream = self.streams[session_id] = _Stream()
            self.nursery.start_soon(self._run_stream, session_id, stream)
        await stream.ready.wait()
        return stream.ok

    async def _run_stream(self, session_id: str | None, stream: _Stream, reading: _Reading | None = None) -> None:
        """Open the SSE stream of ``session_id`` (``None``: the connection's) and read it until it ends;
        or, with ``reading`` (the open response, its body's iterator and the parser), go on reading it
        in this task: another task handed its reading on (see :meth:`_deliver`)."""
        import httpx2

        name = "the connection's SSE stream" if session_id is None else f"the SSE stream of ACP session {session_id}"
        what = f"GET ({name})"
        ended = "ended"
        response: httpx2.Response | None = None
        handed = False  # this task handed the reading on: the task that reads now ends the stream
        if reading is not None:
            scope = trio.CancelScope()  # the scope that cancels the stream's reading is the reader's
            if stream.scope.cancel_called:
                scope.cancel()
            stream.scope = scope
        try:
            with stream.scope:
                if reading is None:
                    headers = self._headers(session_id, Accept="text/event-stream")
                    request = self.streams_http.build_request("GET", self.url, headers=_wire(headers))
                    response = await self.streams_http.send(request, stream=True)
                    self.cookies.store(response.headers.raw)
                    status = response.status_code
                    if not 200 <= status < 300:
                        body = await self._read(response, _ERROR_BODY_BYTES)
                        text = (body or b"").decode("utf-8", "replace")
                        if status in FATAL_STATUSES:
                            self._fatal_status(status, text, what)
                        elif status == 409 and session_id is not None:
                            self.fail_session(session_id, f"HTTP 409 to {what}: {text[:200]}")
                        else:
                            self.fail(f"the ACP server answered HTTP {status} ({text[:200]}) to {what}", status)
                        return
                    content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
                    if content_type != "text/event-stream":
                        raise SseStreamError(f"expected an event stream (text/event-stream), got {content_type!r}")
                    stream.ok = True
                    stream.ready.set()
                    reading = _Reading(response, response.aiter_bytes(), SseParser(self.max_message_bytes))
                response = reading.response
                parser = reading.parser
                hand_on = partial(self.nursery.start_soon, self._run_stream, session_id, stream, reading)
                async for chunk in reading.chunks:
                    events = parser.feed(chunk)
                    if events:
                        stream.event_at = trio.current_time()
                        if await self._deliver(events, session_id, hand_on):
                            handed = True
                            return
        except (httpx2.HTTPError, SseStreamError) as exc:  # network errors, an oversized event, not an event stream
            ended = f"failed: {exc}"
            if session_id is None or isinstance(exc, SseStreamError):
                self.fail(f"{name} {ended}")
        except ValueError as exc:  # a header the server gave us (a connection id, a cookie) that cannot go back
            self.fail(f"{what} failed: {exc}")
        finally:
            if not handed:
                stream.ok = False
                stream.ready.set()
                if self.streams.get(session_id) is stream:
                    del self.streams[session_id]
                if response is not None:
                    with trio.CancelScope(shield=True):
                        await response.aclose()
        if self.closing or self.fatal is not None or stream.scope.cancelled_caught:
            return
        if session_id is None:
            self.fail(f"the server {ended} {name}")
        else:
            self.fail_session_requests(session_id, f"ACP session SSE stream {ended}")

    async def _deliver(self, events: list[bytes], session_id: str | None, hand_on: Callable[[], object]) -> bool:
        """Route and queue the messages of ``events`` (each an SSE event's data) for the connection: in
        this task when the connection can take them at once (``Connection.deliver_lines``: no task
        of its own woken), else through the inbox.  True when this task's reading was handed on
        (``hand_on()``: a request handler had to wait and this task went on with it, or its POST of
        the answers waited): this task then reads no more."""
        lines = []
        for data in events:
            line = bytes_to_line(data)
            if b'"id"' in line:  # a request or a response (notifications are the hot path: not parsed here)
                message = _json_object(line)
                if message is not None and "id" in message:
                    key = _id_key(message["id"])
                    if "method" in message:
                        self.inbound_routes[key] = session_id
                    elif "result" in message or "error" in message:
                        self.pending.pop(key, None)
                        replayed = self.replaying.pop(key, None)
                        if replayed is not None and session_id is None and replayed in self.streams:
                            # the answer to session/load came on the connection stream, its replay on
                            # the session's: hand it over once that stream has gone quiet
                            self.nursery.start_soon(self._deliver_after_replay, line, replayed)
                            continue
                        result = message.get("result")
                        new_session = result.get("sessionId") if isinstance(result, dict) else None
                        if isinstance(new_session, str) and new_session not in self.streams:
                            self.nursery.start_soon(self.open_stream, new_session)
            lines.append(line)
        if lines:
            lines.append(b"")
            data = b"\n".join(lines)
            deliver = self.deliver_lines
            if deliver is not None and self.inbox.empty:
                taken = await deliver(data, hand_on)
                if taken:
                    return taken == 2
            await self.inbox.put(data)
        return False

    async def _deliver_after_replay(self, line: bytes, session_id: str) -> None:
        """Queue a ``session/load``/``session/resume`` answer once the session's stream has delivered
        nothing for ``_REPLAY_SETTLE`` seconds since the answer came or since its last events (at
        most ``_REPLAY_WAIT`` seconds)."""
        arrived = trio.current_time()
        give_up = arrived + _REPLAY_WAIT
        while (stream := self.streams.get(session_id)) is not None and stream.ok:
            quiet_at = max(stream.event_at, arrived) + _REPLAY_SETTLE
            if quiet_at <= trio.current_time() or trio.current_time() >= give_up:
                break
            await trio.sleep_until(min(quiet_at, give_up))
        await self.inbox.put(line + b"\n")

    async def delete(self, timeout: float) -> None:
        """``DELETE`` the connection (bounded by ``timeout`` seconds; errors are logged)."""
        import httpx2

        if self.connection_id is None:
            return
        with trio.move_on_after(timeout):
            try:
                response = await self.http.request("DELETE", self.url, headers=_wire(self._headers()))
                self.cookies.store(response.headers.raw)
                if not 200 <= response.status_code < 300 and response.status_code != 404:
                    log.debug("DELETE %s answered HTTP %d", self.url, response.status_code)
            except (httpx2.HTTPError, ValueError) as exc:
                log.debug("DELETE %s failed: %r", self.url, exc)


_REPLAYING_METHODS = frozenset({"session/load", "session/resume"})
_REPLAY_SETTLE = 0.05
"""Seconds a session stream must deliver nothing before a held ``session/load`` answer goes to the connection."""
_REPLAY_WAIT = 2.0
"""Seconds at most a ``session/load`` answer is held while its session stream keeps delivering."""


def _network_problem(exc: BaseException, url: str, connect_timeout: float) -> str:
    """What a network error (an ``httpx2.HTTPError``) reaching ``url`` means, and what to do.

    ``nothing listens on 127.0.0.1:8765 (connection refused): start the ACP server there, or fix
    the host and port in the URL`` when every address was refused; the host not found; no answer
    within ``connect_timeout`` seconds; a certificate the client does not trust (what to pass); another
    TLS failure; else ``repr(exc)``.
    """
    import httpx2

    from ._address import connect_failure, where

    host, at = where(url)
    kind, why = connect_failure(exc)
    if kind == "refused":
        fix = "start the ACP server there, or fix the host and port in the URL"
        return f"nothing listens on {at} (connection refused): {fix}"
    if kind == "unknown-host":
        return f"cannot find the host {host!r} ({why}): fix the host in the URL"
    if isinstance(exc, httpx2.ConnectTimeout):
        return (
            f"nothing answered at {at} within {connect_timeout:g} s (connect_timeout): "
            "check that the server runs and that this host can reach it"
        )
    tls = _tls_error(exc)
    if isinstance(tls, ssl.SSLCertVerificationError):
        return (
            f"the TLS certificate of {at} is not trusted ({tls.verify_message or tls.reason}, "
            "CERTIFICATE_VERIFY_FAILED): for a private CA pass verify=ssl.create_default_context(cafile=...) "
            "or set SSL_CERT_FILE"
        )
    if tls is not None:
        return f"the TLS handshake with {at} failed: {tls}"
    return repr(exc)


def _tls_error(exc: BaseException) -> ssl.SSLError | None:
    """The ``ssl.SSLError`` behind a network error (httpcore2 wraps it, trio's ``SSLStream`` too)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ssl.SSLError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _json_object(data: bytes | str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _body(text: str) -> Any:
    """An error body for ``data.body``: its JSON value when it is JSON, else the text."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


@asynccontextmanager
async def connect_http(
    url: str,
    client: Any,
    *,
    headers: Mapping[str, str] | None = None,
    cookies: CookieStore | None = None,
    http2: bool = False,
    connect_timeout: float = 30.0,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
    close_timeout: float = 2.0,
    transport: httpx2.AsyncBaseTransport | None = None,
    verify: Any = True,
    **options: Any,
) -> AsyncIterator[ClientSideConnection]:
    """Connect to an ACP server over Streamable HTTP and yield the :class:`ClientSideConnection` (``async with``).

    ``url``: ``http://`` or ``https://`` URL of the server's endpoint (``http://127.0.0.1:8765/acp``).
    ``client``: the client object or factory (as for :func:`acp_trio.spawn_agent`); then call
    ``conn.agent.initialize(...)`` as over stdio (the first request must be ``initialize``: it
    creates the ACP connection on the server).  ``headers``: extra headers on every ``POST``,
    ``GET`` and ``DELETE`` (``{"Authorization": "Bearer ..."}``); the transport's own
    (``Acp-Connection-Id``, ``Acp-Session-Id``, ``Content-Type``, ``Accept``) win on a clash.
    ``cookies``: a :class:`~acp_trio.transports.cookies.CookieStore` that keeps what every answer's
    ``Set-Cookie`` sets and sends it on every later request (the RFD's affinity cookies); pass the
    same store to the next ``connect_http`` (or ``connect_websocket``) to keep the affinity on a
    reconnect; default: a fresh store for this connection.  ``http2``: also offer HTTP/2 (by ALPN
    on ``https://``; off by default, see the module docstring).  ``connect_timeout``: seconds to open a TCP
    connection (reads have no timeout: streams stay open, and requests have their own).
    ``max_message_bytes``: the largest SSE event or ``initialize`` answer accepted (default
    32 MiB; a larger one closes the transport).  ``max_buffered_bytes``: received bytes buffered
    for the connection before the streams stop reading (default 4 MiB).  ``close_timeout``:
    seconds for the ``DELETE`` when leaving.  ``transport``, ``verify``: for ``httpx2.AsyncClient``
    (a custom transport; TLS verification: ``True``, the default, uses the process's shared
    context, :func:`default_tls_context`, built once; an ``ssl.SSLContext`` of your own, e.g.
    ``ssl.create_default_context(cafile=...)`` for a private CA, or ``False``, is used as
    given).  ``options``: for the connection (``tap``, ``variant``,
    ``eof_grace``, ...).  ``conn.connection_id``: the server's ``Acp-Connection-Id`` once
    initialized (``None`` before).

    Errors (see the module docstring): a 401/403/404/410 answer, a network error or the end of
    the connection's stream close the transport: pending and later requests raise
    :class:`HttpTransportClosed` (a :class:`~acp_trio.ConnectionClosed`) with ``status`` and
    ``url``, saying what to do (no server at the URL: ``nothing listens on HOST:PORT (connection
    refused)``, ``status`` ``None``; ``401``: send the token; ``404`` to ``initialize``: check the
    path); the first request, ``initialize``, is the one that connects.  A 409 fails one
    session's requests (``RequestError`` ``-32603``) until ``session/load``/``session/resume``
    reattaches it; another HTTP error fails only its request
    (``-32603``, ``data = {"status": ..., "body": ...}``); a non-2xx answer to a notification or to
    our response to an agent's request closes the transport (:class:`HttpTransportClosed` with that
    status).  A session whose id cannot be sent in the ``Acp-Session-Id`` header (see
    :func:`field_value_problem`) fails alone, with ``-32603`` naming it.  Raises ``ValueError``
    naming the header, before connecting, when one of ``headers`` cannot be sent (a name that is
    not an HTTP token, a value outside ISO-8859-1 or with control characters, see
    :func:`field_value_problem`).  An exception raised in the body comes out as itself.  Leaving
    the block closes the connection, then sends ``DELETE`` for it.
    """
    async with open_exchange(
        url,
        headers=headers,
        cookies=cookies,
        http2=http2,
        connect_timeout=connect_timeout,
        max_message_bytes=max_message_bytes,
        max_buffered_bytes=max_buffered_bytes,
        close_timeout=close_timeout,
        transport=transport,
        verify=verify,
    ) as exchange:
        conn = ClientSideConnection(
            client,
            _PostStream(exchange.post, "the Streamable HTTP send stream", send_lines=exchange.post_lines),
            exchange.inbox,
            **options,
        )
        conn.connection.closing_error = exchange.closing_error
        exchange.deliver_lines = conn.connection.deliver_lines
        conn.connection_id = None  # type: ignore[attr-defined]

        def named(connection_id: str) -> None:
            conn.connection_id = connection_id  # type: ignore[attr-defined]

        exchange.on_connection_id = named
        try:
            async with conn:
                yield conn
        finally:
            with trio.CancelScope(shield=True):
                await conn.aclose()


@asynccontextmanager
async def open_exchange(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    cookies: CookieStore | None = None,
    http2: bool = False,
    connect_timeout: float = 30.0,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
    close_timeout: float = 2.0,
    transport: httpx2.AsyncBaseTransport | None = None,
    verify: Any = True,
) -> AsyncIterator[_Exchange]:
    """The Streamable HTTP exchange under :func:`connect_http`, at the level of NDJSON lines.

    Yields the exchange: ``await exchange.post(line)`` sends one message (a line without its
    ``\\n``; raises ``trio.BrokenResourceError`` once the transport is closed), and
    ``exchange.inbox`` is a ``trio.abc.ReceiveStream`` of the NDJSON lines received (the end of
    stream once the transport closed; ``exchange.fatal`` then says why).  The arguments are
    :func:`connect_http`'s.  Leaving the block sends ``DELETE`` (unless the transport failed).
    The bridge's ``--connect http://`` uses it to pass messages through verbatim.
    """
    import http.cookiejar

    import httpx2

    _check_headers(headers or {})

    # the cookies live in `cookies` (the same store as the WebSocket transport's), not in httpx2's jar
    no_jar = http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    # one TLS context for both pools (making one loads the CA bundle: tens of milliseconds), and
    # for the default, verify=True, the process's shared one (default_tls_context)
    tls: Any = verify
    if transport is None:
        tls = default_tls_context(http2) if verify is True else httpx2.create_ssl_context(verify=verify)

    def client() -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            cookies=no_jar,
            http2=http2,
            timeout=httpx2.Timeout(None, connect=connect_timeout),
            # every open SSE stream holds an HTTP/1.1 connection: never make a POST wait for one
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=20),
            transport=transport,
            verify=tls,
        )

    # Over HTTP/1.1 the SSE streams get a pool of their own: the POSTs' pool then holds the one
    # keep-alive connection they reuse, and httpcore, which scans its pool's connections at every
    # request and response, has one to look at instead of one more per open stream.  (A caller's
    # transport, or HTTP/2's single connection, is one pool.)
    client_http = client()
    streams_http = client() if transport is None and not http2 else client_http
    if streams_http is not client_http:  # HTTP/1.1 on httpx2's own transport: a POST in one write
        from ._http_wire import send_heads_with_bodies

        send_heads_with_bodies(client_http)
    async with client_http, contextlib.AsyncExitStack() as stack:
        if streams_http is not client_http:
            await stack.enter_async_context(streams_http)
        nursery = await stack.enter_async_context(owned_nursery())
        exchange = _Exchange(
            url,
            client_http,
            nursery,
            streams_http=streams_http,
            headers=headers or {},
            cookies=cookies if cookies is not None else CookieStore(),
            max_message_bytes=max_message_bytes,
            max_buffered_bytes=max_buffered_bytes,
            connect_timeout=connect_timeout,
        )
        try:
            yield exchange
        finally:
            with trio.CancelScope(shield=True):
                exchange.closing = True
                for stream in list(exchange.streams.values()):
                    # before the DELETE: a stream's GET not sent yet (a session's, opened at its
                    # session/new answer) is never sent, so none reaches the server after the DELETE
                    stream.scope.cancel()
                if exchange.fatal is None and exchange.connection_id is not None:
                    await exchange.delete(close_timeout)
                nursery.cancel_scope.cancel()


__all__ = [
    "DEFAULT_MAX_BUFFERED_BYTES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "FATAL_STATUSES",
    "HEADER_CONNECTION_ID",
    "HEADER_SESSION_ID",
    "HttpTransportClosed",
    "connect_http",
    "default_tls_context",
    "open_exchange",
]

"""The remote transport, server side: an ASGI application serving ACP agents on one ``/acp`` endpoint.

Spec: the RFD ``docs/rfds/streamable-http-websocket-transport.mdx`` ("Unified Endpoint Routing",
"Streamable HTTP", "WebSocket Request Flow").  :class:`AcpApp` routes ``/acp`` as the RFD does:

- ``GET`` with ``Upgrade: websocket``: a new ACP connection.  The 101 answer names it in the
  ``Acp-Connection-Id`` header (an unguessable ``secrets.token_urlsafe`` id); every text frame is
  one JSON-RPC message, binary frames are ignored; the client sends ``initialize`` first.  One
  agent object per accepted WebSocket (the factory is called with its connection), many at once.
- Streamable HTTP (where the RFD and the TypeScript SDK 2.4.0's ``AcpServer`` disagree, as the SDK
  does, since that is what clients speak today):

  - ``POST`` of ``initialize`` (no ``Acp-Connection-Id``): a new ACP connection; ``200`` with the
    agent's JSON-RPC answer as the body, verbatim, and the id in the ``Acp-Connection-Id`` header
    (``500`` with a ``-32603`` "Initialize failed" body when the agent ends or says something else
    first; ``400`` with the header, or with ``"id": null``).
  - any other ``POST`` (``Acp-Connection-Id``; ``Acp-Session-Id`` for a session's message: the
    methods of :data:`SESSION_SCOPED_METHODS`, any ``params.sessionId``, a response to a request
    that came on a session's stream; it must match ``params.sessionId``): ``202`` with no body, the
    answer comes on an SSE stream.  A request's answer goes on the stream the request was routed
    to (``session/load``'s on the connection's); the agent's requests and notifications go on their
    ``params.sessionId``'s stream, else the connection's.
  - ``GET`` with ``Accept: text/event-stream``: the connection's SSE stream, or with
    ``Acp-Session-Id`` that session's (created if new).  Each stream is a queue that exists before
    any ``GET`` (output waits for its reader) and has at most one reader (``409`` for a second).
    Each event is ``data: <one JSON-RPC message>``; a ``:`` comment goes out first and after every
    ``sse_keepalive`` idle seconds.  No ``Last-Event-ID`` (the RFD defers resumption).
  - ``DELETE``: ``202``; the connection ends (the agent's input ends, its streams end).
  - statuses: ``400`` text (missing/mismatched ids, ``Invalid JSON-RPC message``, an id over
    ``max_id_length``), ``400`` JSON (``-32700`` for a body that is not JSON, ``-32600`` for a batch),
    ``404`` (unknown or closed connection), ``405``, ``406`` (no ``text/event-stream`` in ``Accept``),
    ``409``, ``413`` (body over ``max_message_bytes``), ``415`` (not ``application/json``), ``499``
    (the client left first).  Connection ids are not shared with the WebSocket side.

Contract: each WebSocket, and each Streamable HTTP connection, is adapted to a pair of trio byte
streams of NDJSON (:class:`~acp_trio.transports.websocket.MessageReceiveStream` /
:class:`~acp_trio.transports.websocket.MessageSendStream`; over HTTP each POSTed body is one input
line and each output line is routed to its SSE stream, read with orjson but forwarded as written)
and handed to one :class:`~acp_trio.AgentSideConnection` (or ``serve_streams``), so every rule the
connection enforces holds unchanged.
Nothing is shared between connections but the application object: each has its own agent.
With ``host=`` (a :class:`~acp_trio.host.SessionHost`) the host serves each connection instead
(``host.serve_streams(..., principal=...)``): sessions belong to the host, a connection attaches to
them and detaches when it ends, and they are shared by connections of the same principal (below).

Security defaults: :func:`serve` binds ``127.0.0.1``.  An optional bearer ``token`` guards every
route (``401`` without ``Authorization: Bearer <token>``): the scheme in any case, then one or more
spaces (RFC 7235 § 2.1, RFC 6750 § 2.1: ``bearer  T`` is accepted, ``Bearer<TAB>T`` is not), then
the token, case-sensitive, compared with ``hmac.compare_digest``.  ``token`` may also map several
tokens to principals (``{token: principal}``, the principal a ``str`` naming who holds the token):
any listed token is accepted, each compared in constant time (the cost is linear in the number of
tokens).  A connection's principal is that of the token of the request that opened it (the
WebSocket upgrade, the ``initialize`` POST); a later ``POST``, ``GET`` or ``DELETE`` of that
Streamable HTTP connection carrying a token of another principal is answered ``404``, as for an
unknown ``Acp-Connection-Id``, so it learns nothing of the connection; a ``host`` is told the
principal, and attaches a connection only to sessions made under the same one
(``session/load``/``session/resume`` otherwise ``-32002``, as for a session that does not exist).
A request carrying an ``Origin`` header (a browser's: a WebSocket upgrade, or a POST, GET or DELETE
a page sends) is refused ``403`` unless that origin is a loopback one (``localhost``,
``127.0.0.1``, ``[::1]``, any port) or listed in ``allowed_origins``: checking it against the
request's own ``Host`` would not stop DNS rebinding, where the attacker's name is in both.  A
request without ``Origin`` (not a browser, or a browser's same-origin ``GET``) is let through that
check.  DNS rebinding (a page of ``evil.example`` whose name is made to resolve to 127.0.0.1, so
that the browser sends its requests here as same-origin ones): browsers always send ``Origin`` on a
WebSocket upgrade and on any request whose method is not ``GET`` or ``HEAD`` (Fetch, "append a
request Origin header"; ``null`` under a no-referrer policy, refused too), so such a page can
neither upgrade nor POST (``text/plain`` or not) nor DELETE; but its same-origin ``GET`` (an SSE
stream) carries no ``Origin``.  That ``GET`` needs a live ``Acp-Connection-Id``, 144 random bits
the page cannot learn (only the ``initialize`` POST's answer names it); and, without a ``token`` on
a loopback socket (the ASGI scope's ``server``), the ``Host`` header must be ``localhost``, an IP
address (no name, so nothing to rebind) or a name in ``allowed_hosts``, else ``403``: a rebound
page's ``Host`` is the attacker's name.  With a token, ``Host`` is not checked (the page does not
have the token).  A WebSocket upgrade that offers subprotocols gets the first one echoed (browsers
and Node's ``ws`` abort otherwise).

On a WebSocket the first request or notification must be ``initialize`` with an id (the RFD:
"the client must still send initialize as the first JSON-RPC message"), else the WebSocket is
closed with ``1002``; JSON that does not parse before it is answered ``-32700`` as usual.  With
``serve_streams`` (the bridge) every message goes through untouched, and the agent behind it rules,
with one exception, the same on both transports: a JSON array (a JSON-RPC batch, or ``[]``) is
answered ``{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid request:
JSON-RPC batches are not supported"}}`` (as a WebSocket message, the WebSocket staying open; as
the ``400`` body of a ``POST``) and never reaches the agent.  Why: the RFD takes no batches on
the remote transports ("Batch JSON-RPC requests return 501", "No batch requests"), the TypeScript
SDK 2.4.0 refuses them with these words on every transport, and a batch's entries could belong
to different sessions, which one ``Acp-Session-Id`` cannot route.  Over stdio the connection
still takes batches (the v2 draft's transports page allows them on stdio).
A text message that is not UTF-8 gets the close frame ``1007`` before the TCP connection is
closed (RFC 6455 § 8.1; under :func:`serve`, see :mod:`acp_trio.transports._hypercorn`).

Limits (close codes as the TypeScript SDK's server and RFC 6455): a message over
``max_message_bytes`` closes the WebSocket with ``1009``; a client that takes nothing for
``output_stall_timeout`` seconds while the agent has output for it is given up on: its ACP
connection (and agent) is closed at once, and the close frame ``1008`` queued behind what the
client has not read; a client that still takes nothing after as long again loses its TCP
connection (under :func:`serve`; that applies to Streamable HTTP streams too).  An
agent factory (or the runtime) that fails ends that connection only, closed with ``1011``.
Over Streamable HTTP, as the TypeScript server: a ``POST`` body over ``max_message_bytes`` is
``413``, one not received in full within ``request_timeout`` (300 s, Node's default under the
TypeScript server) ``408``, the TCP connection closed after it (request headers that never end
are hypercorn's: it closes the connection after its ``keep_alive_timeout``, 5 s, and answers
headers over h11's 16 KiB ``431``); output queued for a connection's SSE streams (read or not) counts against
``max_buffered_bytes``: at that mark the agent's writes wait, POSTed requests are held before their
``202``, and if no stream takes anything for ``output_stall_timeout`` seconds the connection is
closed (held requests get ``404``); more than ``max_buffered_session_streams`` session streams
holding output with no reader closes it too.  A client that vanishes without ``DELETE`` keeps its
connection until ``idle_timeout`` (300 s) passes with no request in progress and no open stream,
counted from the end of the last one (a request in progress: the ``initialize`` POST until its
answer, however slow the agent is to start, and any POST being handled or held), its agent
ends, or a limit closes it (the TypeScript server has no idle timeout).
Streamable HTTP connections outlive the ``initialize`` request: they run in the nursery of the
ASGI lifespan (hypercorn runs it), else in that request's task.

Serve it with :func:`serve` (hypercorn's trio worker) or any ASGI server running trio.  Needs the
``remote`` extra (``pip install acp-trio[remote]``).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import hmac
import ipaddress
import itertools
import logging
import math
import secrets
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson
import trio

from .._nursery import owned_nursery
from .._roles import AgentSideConnection
from ._lines import LineSendStream
from .websocket import (
    CLOSE_INTERNAL_ERROR,
    CLOSE_MESSAGE_TOO_BIG,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    CLOSE_PROTOCOL_ERROR,
    DEFAULT_MAX_MESSAGE_BYTES,
    HEADER_CONNECTION_ID,
    MessageReceiveStream,
    MessageSendStream,
)

if TYPE_CHECKING:
    from ..host import SessionHost

log = logging.getLogger("acp_trio.asgi")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_OUTPUT_STALL_TIMEOUT = 60.0
"""Seconds a client may take nothing while output waits for it (the TypeScript SDK's default)."""
DEFAULT_MAX_BUFFERED_BYTES = 64 * 1024 * 1024
"""Bytes of output a Streamable HTTP connection may hold for its client (the TypeScript SDK's default, 64 MiB)."""
DEFAULT_MAX_BUFFERED_SESSION_STREAMS = 1024
"""Session SSE streams holding output with no reader, per connection (the TypeScript SDK's default)."""
DEFAULT_MAX_ID_LENGTH = 1024
"""Longest session id or string request id, in UTF-16 code units (the TypeScript SDK's default)."""
DEFAULT_SSE_KEEPALIVE = 15.0
"""Seconds an SSE stream may stay idle before a ``:`` comment is sent (as the TypeScript server does)."""
HEADER_SESSION_ID = "Acp-Session-Id"
"""The RFD's header naming the session (the ACP ``sessionId``) of a session-scoped request or SSE stream."""
HEADER_CONNECTION_ID_LOWER = HEADER_CONNECTION_ID.lower().encode()
HEADER_SESSION_ID_LOWER = HEADER_SESSION_ID.lower().encode()
SESSION_SCOPED_METHODS = frozenset(
    {
        "session/cancel",
        "session/close",
        "session/delete",
        "session/fork",
        "session/load",
        "session/prompt",
        "session/resume",
        "session/set_config_option",
        "session/set_mode",
        "session/set_model",
    }
)
"""Client messages that need ``Acp-Session-Id`` even without ``params.sessionId`` (as the TypeScript server)."""
DEFAULT_IDLE_TIMEOUT = 300.0
"""Seconds without a request or an open stream after which a Streamable HTTP connection is closed."""
DEFAULT_REQUEST_TIMEOUT = 300.0
"""Seconds a POST's body may take to arrive in full (Node's ``requestTimeout``, under the TypeScript server)."""
_WS_BACKLOG_CHARS = 1 << 14
"""Characters of outgoing WebSocket messages queued for the pump before the connection's writer waits."""
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
TEXT_PLAIN = b"text/plain; charset=utf-8"


# -- Streamable HTTP: one ACP connection's state -----------------------------------------------------


class _HttpRefusal(Exception):
    """A POST/GET refused with ``status`` and a text/plain ``message`` (the TypeScript server's wording)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class _ConnectionGone(Exception):
    """The HTTP connection closed (or its agent ended) while a request was being handled: ``404``."""


class _Mailbox:
    """One outbound SSE stream's queue (the connection's, ``session_id=None``, or one session's).

    It exists before any ``GET``: lines queue until a receiver (at most one) attaches; a line
    handed to the receiver's socket is gone.  ``finished``: nothing more will be queued (the
    receiver drains, then its stream ends); ``aborted``: the queue was dropped (the connection closed).
    """

    __slots__ = ("aborted", "changed", "finished", "queue", "receiver", "session_id")

    def __init__(self, session_id: str | None) -> None:
        self.session_id = session_id
        self.queue: deque[bytes] = _NO_LINES  # a deque of its own from its first line on
        self.receiver = False
        self.finished = False
        self.aborted = False
        self.changed = trio.lowlevel.ParkingLot()


_NO_LINES: deque[bytes] = deque()
"""The empty queue every :class:`_Mailbox` starts with and goes back to once drained, shared and
never appended to (an empty deque holds a 64-slot block, about 0.75 KB, per idle stream)."""


def _id_key(value: Any) -> tuple[str, Any] | None:
    """A JSON-RPC id as a key keeping ``1`` and ``"1"`` apart (``None`` for a value that is no id)."""
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ("n", value)
    if value is None:
        return ("null", None)
    return None


def _has_id(message: dict[str, Any]) -> bool:
    return "id" in message and _id_key(message["id"]) is not None


def _response_key(message: Any) -> tuple[str, Any] | None:
    """The key (:func:`_id_key`) of the id ``message`` answers when it is a JSON-RPC response, else ``None``."""
    if (
        not isinstance(message, dict)
        or "method" in message
        or "id" not in message
        or ("result" not in message and "error" not in message)
        or message.get("jsonrpc") != "2.0"
    ):
        return None
    return _id_key(message["id"])


def _is_request(message: dict[str, Any]) -> bool:
    return message.get("jsonrpc") == "2.0" and isinstance(message.get("method"), str) and _has_id(message)


def _is_notification(message: dict[str, Any]) -> bool:
    return message.get("jsonrpc") == "2.0" and isinstance(message.get("method"), str) and "id" not in message


def _params_session_id(message: dict[str, Any]) -> str | None:
    params = message.get("params")
    session_id = params.get("sessionId") if isinstance(params, dict) else None
    return session_id if isinstance(session_id, str) else None


def _utf16_length(text: str) -> int:
    return len(text) + sum(1 for char in text if ord(char) > 0xFFFF) if not text.isascii() else len(text)


class _HttpConnection:
    """The server side of one Streamable HTTP ACP connection: its inbound queue, its SSE mailboxes
    and routes, and the limits (see :class:`AcpApp`).  Its agent reads and writes NDJSON byte
    streams like any transport's: POSTed bodies become input lines, output lines are routed here."""

    def __init__(self, app: AcpApp, connection_id: str, principal: str | None = None) -> None:
        self.app = app
        self.id = connection_id
        self.principal = principal  # fixed by the initialize POST: every later request must carry a token of it
        self.inbound_send, self.inbound_receive = trio.open_memory_channel[str](0)
        self.connection_stream = _Mailbox(None)
        self.session_streams: dict[str, _Mailbox] = {}
        self.buffered_bytes = 0
        self.buffered_session_streams = 0  # session mailboxes holding lines with no receiver
        self.pending_routes: dict[tuple[str, Any], str | None] = {}  # client request → stream of its answer
        self.client_response_routes: dict[tuple[str, Any], str | None] = {}  # agent request → its stream
        self.closed = False  # shut down: DELETE, a limit, the client gone during initialize
        self.routing_done = False  # the agent's output ended
        self.progress = trio.lowlevel.ParkingLot()  # buffered bytes went down, or the connection ended
        self.initial_key: tuple[str, Any] | None = None
        self.initial: bytes | None = None
        self.initial_error = ""
        self.initial_ready = trio.Event()
        self.receivers = 0  # SSE streams being read now
        self.requests = 0  # POSTs in progress: the initialize POST until its answer, a request held or being handled
        self.active_at = trio.current_time()  # the last request's start or end, or the last stream's end
        self.reaper: _Reaper | None = None  # what closes it once abandoned (idle_timeout), if anything
        self.reap_queued = False  # in its reaper's queue
        self.reap_over = False  # gone from its reaper's concerns (the connection ended)

    def touch(self) -> None:
        """A request for this connection arrived: it is not abandoned."""
        self.active_at = trio.current_time()

    def request_began(self) -> None:
        """A POST for this connection is in progress: activity until :meth:`request_ended` (idle_timeout).
        (No :meth:`touch`: the connection was touched as the request named it, or created for it.)"""
        self.requests += 1

    def request_ended(self) -> None:
        """A POST ended: the idle clock starts now if nothing else is in progress."""
        self.requests -= 1
        self.touch()
        self.attachment_changed()

    def attachment_changed(self) -> None:
        """A request or a stream ended: with neither left, the connection's reaper starts watching it."""
        if self.reaper is not None and not self.requests and not self.receivers:
            self.reaper.watch(self)

    def abandoned_for(self, idle: float, now: float) -> bool:
        """Whether the connection has had no request in progress and no open stream for ``idle`` seconds."""
        return not self.receivers and not self.requests and now >= self.active_at + idle

    # -- input (POST bodies) -----------------------------------------------------------------------
    async def next_text(self) -> str | None:
        try:
            return await self.inbound_receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return None

    async def write_inbound(self, text: str) -> None:
        """Hand a POSTed message to the agent's reader: at once when it waits for one (then the
        request's answer goes out without a yield first), else once it takes it."""
        if self.closed or self.routing_done:
            raise _ConnectionGone
        try:
            try:
                self.inbound_send.send_nowait(text)
            except trio.WouldBlock:
                await self.inbound_send.send(text)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise _ConnectionGone from None

    # -- limits ------------------------------------------------------------------------------------
    def check_id(self, label: str, value: str) -> None:
        limit = self.app.max_id_length
        if len(value) > limit // 2 and _utf16_length(value) > limit:
            raise _HttpRefusal(400, f"{label} exceeds maxIdLength ({limit})")

    async def wait_for_room(self) -> None:
        """Wait while the buffered output is at ``max_buffered_bytes``; a stall closes the connection."""
        stall = self.app.output_stall_timeout
        while not self.closed and not self.routing_done and self.buffered_bytes >= self.app.max_buffered_bytes:
            with trio.move_on_after(stall) as waited:
                await self.progress.park()
            if waited.cancelled_caught:
                self.close(
                    f"Connection output stalled for {stall} s (max_buffered_bytes {self.app.max_buffered_bytes})"
                )

    # -- output (the agent's lines) ------------------------------------------------------------------
    def _ensure_session(self, session_id: str) -> _Mailbox:
        self.check_id("Session ID", session_id)
        mailbox = self.session_streams.get(session_id)
        if mailbox is not None:
            return mailbox
        limit = self.app.max_buffered_session_streams
        if self.buffered_session_streams >= limit:
            raise _HttpRefusal(400, f"Connection exceeds maxBufferedSessionStreams ({limit})")
        mailbox = self.session_streams[session_id] = _Mailbox(session_id)
        self.buffered_session_streams += 1
        return mailbox

    def _route(self, line: bytes) -> _Mailbox:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            message = None  # not ours to judge (the bridge forwards what the agent wrote)
        if not isinstance(message, dict):
            return self.connection_stream
        key = _response_key(message)
        if key is not None:
            route = self.pending_routes.pop(key, None)
            result = message.get("result")
            if isinstance(result, dict) and isinstance(result.get("sessionId"), str):
                self.check_id("Session ID", result["sessionId"])
            return self.connection_stream if route is None else self._ensure_session(route)
        session_id = _params_session_id(message) if "method" in message else None
        if "method" in message and "id" in message:
            key = _id_key(message["id"])
            if key is not None:
                self.client_response_routes[key] = session_id
        return self.connection_stream if session_id is None else self._ensure_session(session_id)

    def send_lines_now(self, lines: list[bytes]) -> bool:
        """Queue lines the agent wrote for their SSE streams at once, without waiting or yielding
        (``LineSendStream``'s synchronous send: the connection sends a request or an answer
        without waking its writer task).  ``False``, nothing queued, when :meth:`send_line` has
        to handle them: the connection is closed or waits for its ``initialize`` answer, or its
        output would reach ``max_buffered_bytes`` (send_line then queues them and waits for room,
        as before).  A line that cannot be routed (an id over ``max_id_length``, too many session
        streams) closes the connection, as in :meth:`send_line`, and the lines are then refused
        (``False``: send_line raises)."""
        if (
            self.closed
            or self.initial_key is not None
            or self.buffered_bytes + sum(map(len, lines)) >= self.app.max_buffered_bytes
        ):
            return False
        routed: list[tuple[_Mailbox, bytes]] = []
        try:
            for line in lines:
                line = line.replace(b"\r", b" ")  # as in send_line
                routed.append((self._route(line), line))
        except _HttpRefusal as exc:
            self.close(str(exc))
            return False
        for mailbox, line in routed:
            self._push(mailbox, line)
        return True

    async def send_lines(self, lines: list[bytes]) -> bool:
        """``LineSendStream``'s batch send: every line of one write, at once when there is room
        (``True``: nothing waited), else one by one through :meth:`send_line` (``False``)."""
        if self.send_lines_now(lines):
            return True
        for line in lines:
            await self.send_line(line)
        return False

    async def send_line(self, line: bytes) -> None:
        """One line the agent wrote: the ``initialize`` answer, or a message for one SSE stream."""
        if self.closed:
            raise trio.BrokenResourceError(f"the Streamable HTTP connection {self.id[:8]} is closed")
        line = line.replace(b"\r", b" ")  # a raw CR can only be JSON whitespace; SSE would split there
        if self.initial_key is not None:
            message = _json_object(line)
            if _response_key(message) == self.initial_key:
                self.initial_key = None
                self.initial = line
                self.initial_ready.set()
                return
            self.initial_error = "Expected initialize response from agent"
            self.close(f"the agent's first message is not the answer to initialize: {line[:200]!r}")
            raise trio.BrokenResourceError(self.initial_error)
        try:
            mailbox = self._route(line)
        except _HttpRefusal as exc:
            self.close(str(exc))
            raise trio.BrokenResourceError(str(exc)) from None
        self._push(mailbox, line)
        await self.wait_for_room()
        if self.closed:
            raise trio.BrokenResourceError(f"the Streamable HTTP connection {self.id[:8]} is closed")

    def _push(self, mailbox: _Mailbox, line: bytes) -> None:
        if mailbox.finished:
            return
        if mailbox.queue is _NO_LINES:
            mailbox.queue = deque()
        mailbox.queue.append(line)
        self.buffered_bytes += len(line)
        mailbox.changed.unpark_all()

    async def stream_events(self, mailbox: _Mailbox, keepalive: float, send: Send) -> None:
        """Write ``mailbox``'s events on its SSE stream (``send``: the ASGI ``send``) as they come,
        in batches of at most 256 KiB, and a keepalive comment after ``keepalive`` idle seconds;
        return at the stream's end.  One cancel scope per idle period rather than one per wait:
        its deadline is set only while the stream waits for events."""
        while True:
            with trio.CancelScope() as idle:
                while (events := self.take_events(mailbox)) is not None:
                    if events:
                        await send({"type": "http.response.body", "body": events, "more_body": True})
                        continue
                    idle.deadline = trio.current_time() + keepalive
                    await mailbox.changed.park()
                    idle.deadline = math.inf
                    if idle.cancel_called:  # woken as the deadline passed: never cancel a send
                        break
                else:
                    return
            if idle.cancelled_caught:
                await send({"type": "http.response.body", "body": b":\n\n", "more_body": True})

    def take_events(self, mailbox: _Mailbox) -> bytes | None:
        """The SSE bytes of the events queued on ``mailbox`` (at most 256 KiB of them), ``b""`` when
        none is, ``None`` at the stream's end."""
        if not mailbox.queue:
            return None if mailbox.finished else b""
        parts: list[bytes] = []
        taken = 0
        queue = mailbox.queue
        while queue and taken < 262144:
            line = queue.popleft()
            taken += len(line)
            parts += (b"data: ", line, b"\n\n")
        if not queue:  # an idle stream holds no emptied deque (its block: 760 bytes)
            mailbox.queue = _NO_LINES
        self.buffered_bytes -= taken
        self.progress.unpark_all()
        return b"".join(parts)

    # -- SSE receivers -------------------------------------------------------------------------------
    def acquire(self, session_id: str | None) -> _Mailbox | None:
        """The mailbox for a ``GET`` (``None``: it already has a receiver → 409).  Raises
        :class:`_HttpRefusal` for an id over the limit, :class:`_ConnectionGone` once closed."""
        if session_id is None:
            mailbox = self.connection_stream
        else:
            self.check_id("Session ID", session_id)
            existing = self.session_streams.get(session_id)
            if existing is None:
                if self.closed or self.routing_done:
                    raise _ConnectionGone
                existing = self.session_streams[session_id] = _Mailbox(session_id)
                self.buffered_session_streams += 1
            mailbox = existing
        if mailbox.receiver or mailbox.aborted:
            return None
        mailbox.receiver = True
        if session_id is not None:
            self.buffered_session_streams -= 1
        return mailbox

    def release(self, mailbox: _Mailbox) -> None:
        if not mailbox.receiver:
            return
        mailbox.receiver = False
        if self.closed or mailbox.session_id is None:
            return
        if not mailbox.queue:
            if self.session_streams.get(mailbox.session_id) is mailbox:
                del self.session_streams[mailbox.session_id]
            mailbox.finished = mailbox.aborted = True
            return
        self.buffered_session_streams += 1
        limit = self.app.max_buffered_session_streams
        if not self.routing_done and self.buffered_session_streams > limit:
            self.close(f"Connection exceeds maxBufferedSessionStreams ({limit})")

    # -- ending ----------------------------------------------------------------------------------------
    def _unregister(self) -> None:
        if self.app._http_connections.get(self.id) is self:
            del self.app._http_connections[self.id]

    def close(self, reason: str | None = None) -> None:
        """Shut the connection down (``DELETE``, a limit): the agent's input ends, queued output is
        dropped, every SSE stream ends, later requests get ``404``."""
        if self.closed:
            return
        self.closed = True
        if reason:
            log.warning("Closing ACP connection %s: %s", self.id, reason)
        self._unregister()
        for mailbox in (self.connection_stream, *self.session_streams.values()):
            mailbox.queue.clear()
            mailbox.finished = mailbox.aborted = True
            mailbox.changed.unpark_all()
        self.session_streams.clear()
        self.buffered_bytes = self.buffered_session_streams = 0
        self.pending_routes.clear()
        self.client_response_routes.clear()
        self.inbound_send.close()
        self.progress.unpark_all()
        if not self.initial_ready.is_set():
            self.initial_error = self.initial_error or "the connection closed"
            self.initial_ready.set()

    def finish(self) -> None:
        """The agent ended (its output is over): streams drain what they hold, then end."""
        self.routing_done = True
        self._unregister()
        for mailbox in (self.connection_stream, *self.session_streams.values()):
            mailbox.finished = True
            mailbox.changed.unpark_all()
        self.inbound_receive.close()
        self.progress.unpark_all()
        if not self.initial_ready.is_set():
            self.initial_error = self.initial_error or "the agent ended before answering initialize"
            self.initial_ready.set()


class _Reaper:
    """Closes the Streamable HTTP connections of one nursery that stay abandoned for ``idle``
    seconds (``idle_timeout``: no request in progress and no open stream, counted from the end of
    the last one), with one task for all of them.

    A connection is queued (:meth:`watch`) each time it may have become abandoned, at most once at a
    time, under the moment it would be, and looked at again then: closed if it still is, queued
    again under its new moment if it was used meanwhile, dropped if it is in use (its next
    abandonment queues it again).  The task runs while a connection that has not ended is queued,
    and ends once none is (an ended connection's entry is dropped at the latest once ended ones are
    half the queue).  A connection per task, as before, cost each connection a task, its start, and
    a wake-up at every request's end.
    """

    def __init__(self, nursery: trio.Nursery, idle: float) -> None:
        self.nursery = nursery
        self.idle = idle
        self.queue: list[tuple[float, int, _HttpConnection]] = []  # a heap: (when, tie-breaker, connection)
        self.order = itertools.count()
        self.live = 0  # queued connections that have not ended
        self.running = False
        self.changed = trio.lowlevel.ParkingLot()  # the earliest moment, or live, changed

    def watch(self, conn: _HttpConnection) -> None:
        """``conn`` may be abandoned from now on: look at it ``idle`` seconds after its last activity."""
        if conn.reap_queued or conn.reap_over:
            return
        conn.reap_queued = True
        entry = (conn.active_at + self.idle, next(self.order), conn)
        heapq.heappush(self.queue, entry)
        self.live += 1
        if not self.running:
            self.running = True
            self.nursery.start_soon(self._run)
        elif self.queue[0] is entry:
            self.changed.unpark_all()

    def forget(self, conn: _HttpConnection) -> None:
        """``conn`` ended: no more reaping for it."""
        conn.reap_over = True
        if not conn.reap_queued:
            return
        self.live -= 1
        if self.live == 0 or len(self.queue) > 64 + 2 * self.live:  # mostly ended ones: let them go now
            self.queue = [entry for entry in self.queue if not entry[2].reap_over]
            heapq.heapify(self.queue)
            self.changed.unpark_all()

    async def _run(self) -> None:
        try:
            while self.live:
                with trio.move_on_at(self.queue[0][0]):
                    await self.changed.park()
                now = trio.current_time()
                while self.queue and self.queue[0][0] <= now:
                    conn = heapq.heappop(self.queue)[2]
                    conn.reap_queued = False
                    if conn.reap_over:
                        continue
                    self.live -= 1
                    if conn.closed or conn.routing_done or conn.requests or conn.receivers:
                        continue  # in use (queued again when it no longer is), or ending
                    if conn.abandoned_for(self.idle, now):
                        try:
                            conn.close(f"abandoned: no request and no open stream for {self.idle} s (idle_timeout)")
                        except Exception:  # pragma: no cover - the connection's trouble, not the other ones'
                            log.exception("ACP connection %s: idle_timeout failed", conn.id)
                    else:
                        self.watch(conn)  # used meanwhile: abandoned, if it stays so, idle after that
        finally:
            self.running = False


def _accepted_tokens(token: str | dict[str, str] | None) -> tuple[tuple[bytes, str | None], ...]:
    """``AcpApp``'s ``token`` as (token as UTF-8, principal) pairs: none, one whose principal is ``None``
    (a ``str`` token), or the mapping's.  Errors never show a token (they may be logged)."""
    if token is None:
        return ()
    if isinstance(token, str):
        return ((token.encode(), None),)
    if not token:
        raise ValueError("token={} accepts no token at all: give at least one {token: principal} pair, or token=None")
    pairs: list[tuple[bytes, str | None]] = []
    for key, principal in token.items():
        if not isinstance(key, str) or not isinstance(principal, str):
            raise TypeError(
                "token must map each token (a str) to its principal (a str naming who holds it), got a "
                f"{type(key).__name__} mapped to a {type(principal).__name__}"
            )
        if not key:
            raise ValueError(
                f"the empty token of principal {principal!r} would accept 'Authorization: Bearer ': remove it"
            )
        pairs.append((key.encode(), principal))
    return tuple(pairs)


def _json_object(data: bytes | str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class AcpApp:
    """An ASGI application serving an ACP agent to every client that connects to ``path``.

    ``agent``: a factory called with each new :class:`~acp_trio.AgentSideConnection`, returning
    that connection's agent (a class works; a ``{variant: factory}`` mapping as for the connection
    too).  Pass a factory, not an agent object: an object would be shared by every connection.
    ``path``: the endpoint (default ``/acp``).  ``token``: when set, every request must carry
    ``Authorization: Bearer <token>`` (else ``401``): a ``str``, the one token, or a mapping
    ``{token: principal}`` of the tokens accepted, each naming who holds it (a ``str``; several
    tokens may name one principal; ``ValueError`` for an empty mapping or an empty token,
    ``TypeError`` for a key or value that is no ``str``).  Each request's token is compared in
    constant time with every listed token, so the cost of a request's check is linear in the
    number of tokens (once per distinct ``Authorization`` header: passes are remembered).  A
    connection's principal is that of the token of the request that opens it (the WebSocket
    upgrade, the Streamable HTTP ``initialize`` POST); every later request of a Streamable HTTP
    connection (``POST``, ``GET``, ``DELETE``) must carry a token of the same principal, else it is
    answered ``404`` as for an unknown ``Acp-Connection-Id`` (nothing tells it the connection
    exists).  The principal is handed to ``host`` (below); with a ``str`` token or none it is
    ``None``.  ``allowed_origins``: browser origins allowed besides the loopback ones, on every
    route (exact ``scheme://host[:port]`` strings; ``"*"`` allows any).  ``allowed_hosts``: ``Host``
    names (without port) answered besides ``localhost`` and IP addresses when there is no ``token``
    and the server listens on loopback (a reverse proxy's or a tunnel's name; ``"*"``: any; else
    ``403``, against DNS rebinding).
    ``max_message_bytes``: the largest message a client may send (default
    16 MiB; larger closes the WebSocket with ``1009``; a larger POST body is ``413``).
    ``output_stall_timeout``: seconds (default 60).
    ``max_buffered_bytes`` (default 64 MiB), ``max_buffered_session_streams`` (default 1024),
    ``max_id_length`` (default 1024 UTF-16 units), ``sse_keepalive`` (seconds, default 15): the
    Streamable HTTP limits (see the module docstring; the TypeScript SDK's defaults).
    ``idle_timeout``: seconds (default 300) a Streamable HTTP connection may go with no request in
    progress (the ``initialize`` POST until its answer included) and no SSE stream open, counted
    from the end of the last one, before it is closed as abandoned (its agent ends; behind the
    bridge, its process); ``None`` keeps it until ``DELETE`` or a limit, as the TypeScript server does.
    ``request_timeout``: seconds (default 300) a ``POST``'s body may take to arrive in full, else
    ``408`` and the TCP connection is closed (a client that stops sending in mid-body).
    ``max_connections``: ACP connections served at once (WebSocket and Streamable HTTP together);
    one more is refused ``503`` (the upgrade, or the ``initialize`` POST); default ``None``, no
    limit, as the TypeScript server.  ``websocket_compression``: let a client that offers
    permessage-deflate have it (default ``False``, as the TypeScript server: deflating every small
    frame costs both sides far more CPU than loopback or LAN bandwidth saves; applies under hypercorn).
    ``health_path``: a path (say ``"/healthz"``) answering a load balancer's health check
    (HAProxy's ``option httpchk GET /healthz``, a Kubernetes readiness probe): ``GET`` or ``HEAD``
    is ``200`` ``ok`` while the app takes new sessions, ``503`` ``draining`` once :meth:`drain` was
    called; it needs no token and passes no ``Origin``/``Host`` check, and tells nothing of any
    connection or session (default ``None``: no such path, ``404``).
    ``connection_options``: for each connection (``tap``, ``eof_grace``, ``variant``, ...).
    ``serve_streams``: instead of ``agent``, ``async (connection_id, to_client, from_client)``
    serving each connection's NDJSON byte streams itself, returning when it is done (the bridge,
    :mod:`acp_trio.bridge`, runs a stdio agent process on them).
    ``host``: instead of ``agent`` or ``serve_streams``, a :class:`~acp_trio.host.SessionHost`
    (from :func:`~acp_trio.host.open_session_host`): each connection is served by
    ``host.serve_streams(connection_id, to_client, from_client, principal=P)``, ``P`` the
    connection's principal (see ``token``), so a session made under one principal cannot be
    attached to (``session/load``, ``session/resume``: ``-32002``) with a token of another
    (``docs/site/guides/host.md``).  Give exactly one of ``agent``, ``serve_streams`` and ``host``
    (else ``TypeError``); ``connection_options`` apply to ``agent`` only.

    ``active_connections`` counts the connections being served; ``connection_ids`` are theirs;
    :meth:`wait_idle` waits until there are none.
    """

    def __init__(
        self,
        agent: Any = None,
        *,
        serve_streams: Callable[[str, trio.abc.SendStream, trio.abc.ReceiveStream], Awaitable[None]] | None = None,
        host: SessionHost | None = None,
        path: str = "/acp",
        token: str | Mapping[str, str] | None = None,
        allowed_origins: Iterable[str] = (),
        allowed_hosts: Iterable[str] = (),
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        output_stall_timeout: float = DEFAULT_OUTPUT_STALL_TIMEOUT,
        max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
        max_buffered_session_streams: int = DEFAULT_MAX_BUFFERED_SESSION_STREAMS,
        max_id_length: int = DEFAULT_MAX_ID_LENGTH,
        sse_keepalive: float = DEFAULT_SSE_KEEPALIVE,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_connections: int | None = None,
        websocket_compression: bool = False,
        health_path: str | None = None,
        **connection_options: Any,
    ) -> None:
        if max_message_bytes <= 0:
            raise ValueError(f"max_message_bytes must be positive, got {max_message_bytes}")
        if output_stall_timeout <= 0:
            raise ValueError(f"output_stall_timeout must be positive seconds, got {output_stall_timeout}")
        for name, value in (
            ("max_buffered_bytes", max_buffered_bytes),
            ("max_buffered_session_streams", max_buffered_session_streams),
            ("max_id_length", max_id_length),
            ("sse_keepalive", sse_keepalive),
            ("request_timeout", request_timeout),
        ):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if health_path is not None and (not health_path.startswith("/") or health_path == path):
            raise ValueError(f"health_path must be a path of its own starting with '/', got {health_path!r}")
        if sum(given is not None for given in (agent, serve_streams, host)) != 1:
            raise TypeError("give AcpApp exactly one of an agent factory, serve_streams= and host=")
        self.agent = agent
        self.serve_streams = serve_streams
        self.host = host
        self.path = path
        self.token: str | dict[str, str] | None = token if token is None or isinstance(token, str) else dict(token)
        # each accepted token (UTF-8) and its principal (None for a single str token)
        self._tokens: tuple[tuple[bytes, str | None], ...] = _accepted_tokens(self.token)
        self.allowed_origins = frozenset(origin.rstrip("/").lower() for origin in allowed_origins)
        self.allowed_hosts = frozenset(host.lower() for host in allowed_hosts)
        # what requests that passed _refusal's checks carried (see there), with the principal of their
        # token: a client sends the same Authorization, Origin and Host on every request, so each is judged once
        self._passed: dict[tuple[bytes | None, bytes | None, bytes | None, Any], str | None] = {}
        self.max_message_bytes = max_message_bytes
        self.output_stall_timeout = output_stall_timeout
        self.max_buffered_bytes = max_buffered_bytes
        self.max_buffered_session_streams = max_buffered_session_streams
        self.max_id_length = max_id_length
        self.sse_keepalive = sse_keepalive
        if idle_timeout is not None and idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive seconds or None, got {idle_timeout}")
        self.idle_timeout = idle_timeout
        self.request_timeout = request_timeout
        if max_connections is not None and max_connections <= 0:
            raise ValueError(f"max_connections must be positive or None, got {max_connections}")
        self.max_connections = max_connections
        self.websocket_compression = websocket_compression
        self.health_path = health_path
        self._draining = False
        connection_options.setdefault("max_message_size", max_message_bytes + 1)
        self.connection_options = connection_options
        self.connection_ids: set[str] = set()
        self._ended = trio.lowlevel.ParkingLot()
        self._http_connections: dict[str, _HttpConnection] = {}
        self._nursery: trio.Nursery | None = None  # the lifespan's: Streamable HTTP connections run there
        self._reaper: _Reaper | None = None  # the lifespan nursery's (idle_timeout)

    def _full(self) -> bool:
        return self.max_connections is not None and len(self.connection_ids) >= self.max_connections

    @property
    def draining(self) -> bool:
        """Whether this app drains (:meth:`drain`, or its ``host``'s :meth:`~acp_trio.host.SessionHost.drain`)."""
        return self._draining or (self.host is not None and self.host.draining)

    def drain(self) -> None:
        """Start draining: ``health_path`` answers ``503`` from now on, so a load balancer sends no new
        client here; with ``host``, the host takes no new session (:meth:`~acp_trio.host.SessionHost.drain`:
        ``session/new`` answered -32603 ``data.reason`` ``"draining"``).  Connections are still
        accepted and served (a client reattaching to a session that still runs here).  Idempotent."""
        self._draining = True
        if self.host is not None:
            self.host.drain()

    async def _health(self, scope: Scope, send: Send) -> None:
        """``GET``/``HEAD`` ``health_path``: ``200`` ``ok`` while taking new sessions, ``503``
        ``draining`` while draining; no token, ``Origin`` or ``Host`` check (a load balancer's probe
        sends none of them, and the answer says nothing of any connection or session)."""
        method = scope.get("method", "")
        if method not in ("GET", "HEAD"):
            await _text_response(send, 405, "Method Not Allowed\n", [(b"allow", b"GET, HEAD")])
            return
        status, body = (503, b"draining\n") if self.draining else (200, b"ok\n")
        headers = [
            (b"content-type", TEXT_PLAIN),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})

    @property
    def active_connections(self) -> int:
        return len(self.connection_ids)

    async def wait_idle(self) -> None:
        """Wait until no connection is being served (its agent and connection closed)."""
        while self.connection_ids:
            await self._ended.park()
        await trio.lowlevel.checkpoint()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """The server's lifetime: Streamable HTTP connections outlive the requests that open them,
        so they run in a nursery held here (without lifespan, in their ``initialize`` request's task)."""
        async with trio.open_nursery() as nursery:
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self._nursery = nursery
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self._nursery = None
                    for conn in list(self._http_connections.values()):
                        conn.close()
                    nursery.cancel_scope.cancel()
                    break
        await send({"type": "lifespan.shutdown.complete"})

    # -- checks ------------------------------------------------------------------------------------
    def _authorized(self, scope: Scope) -> tuple[bool, str | None]:
        """``Authorization: Bearer <token>``: the scheme in any case, then one or more spaces (RFC 7235
        § 2.1, RFC 6750 § 2.1), then the token, compared in constant time (as for its length, not) with
        every accepted token, all of them whatever matched: whether it passed, and its principal."""
        if not self._tokens:
            return True, None
        scheme, _, credentials = (_header(scope, b"authorization") or b"").partition(b" ")
        presented = credentials.lstrip(b" ")
        matched = False
        principal = None
        for expected, holder in self._tokens:
            if hmac.compare_digest(presented, expected) and not matched:
                matched, principal = True, holder
        return scheme.lower() == b"bearer" and matched, principal

    def host_allowed(self, scope: Scope) -> bool:
        """Whether the request's ``Host`` is one this server answers (see the module docstring).

        Checked only without a token on a loopback socket (``scope["server"]``): ``localhost``, an IP
        address, a name in ``allowed_hosts`` (any port); a malformed ``Host`` is refused.
        """
        if self._tokens or not _loopback_socket(scope):
            return True
        raw = _header(scope, b"host")
        if raw is None:  # HTTP/1.0 (HTTP/1.1 and HTTP/2 servers demand it): no browser request
            return True
        name = _host_name(raw)
        if name is None:
            return False
        return name == "localhost" or name in self.allowed_hosts or "*" in self.allowed_hosts or _ip_literal(name)

    def origin_allowed(self, origin: str | None) -> bool:
        """Whether a request with this ``Origin`` header is accepted (see the module docstring)."""
        if origin is None:
            return True
        normalized = origin.rstrip("/").lower()
        if "*" in self.allowed_origins or normalized in self.allowed_origins:
            return True
        try:
            parts = urlsplit(normalized)
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and parts.hostname in LOOPBACK_HOSTS

    def _refusal(self, scope: Scope) -> tuple[tuple[int, str, list[tuple[bytes, bytes]]] | None, str | None]:
        """The path, token, ``Origin`` and ``Host`` checks: the refusal (``None`` when the request passed)
        and the principal of the request's token (``None`` without one, or with a ``str`` token)."""
        if scope.get("path") != self.path:
            return (404, f"Not found: ACP is served on {self.path}\n", []), None
        # The checks below depend only on these headers, the socket's address (scope["server"]) and
        # the settings (frozen), and so does the principal (a function of the Authorization header):
        # a combination that passed once passes again, with the same principal.  Only passes are kept
        # (a refusal is judged each time), at most _PASSED_KEPT of them.
        headers = _headers(scope)
        server = scope.get("server")
        key = (
            (headers.get(b"authorization"), headers.get(b"origin"), headers.get(b"host"), server)
            if server is None or type(server) is tuple
            else None
        )
        if key is not None:
            try:
                return None, self._passed[key]
            except KeyError:
                pass
        refusal, principal = self._checked(scope)
        if refusal is None and key is not None:
            if len(self._passed) >= _PASSED_KEPT:
                self._passed.clear()
            self._passed[key] = principal
        return refusal, principal

    def _checked(self, scope: Scope) -> tuple[tuple[int, str, list[tuple[bytes, bytes]]] | None, str | None]:
        """The token, ``Origin`` and ``Host`` checks (see the module docstring): the refusal, or ``None``;
        and the principal of the request's token."""
        authorized, principal = self._authorized(scope)
        if not authorized:
            return (401, "Unauthorized: send Authorization: Bearer <token>\n", [(b"www-authenticate", b"Bearer")]), None
        # every route, not only the WebSocket upgrade: a rebound page's POST is same-origin to the browser
        origin = _header(scope, b"origin")
        if not self.origin_allowed(None if origin is None else origin.decode("latin-1")):
            shown = origin.decode("latin-1", "replace") if origin else ""
            return (403, f"Forbidden: Origin {shown!r} is not allowed\n", []), None
        if not self.host_allowed(scope):
            shown = (_header(scope, b"host") or b"").decode("latin-1", "replace")
            refusal: tuple[int, str, list[tuple[bytes, bytes]]] = (
                403,
                f"Forbidden: Host {shown!r} is not allowed: without a token, a server on loopback answers only"
                " localhost and IP addresses (against DNS rebinding); list the name in allowed_hosts"
                " (the bridge's --allow-host) or require a token\n",
                [],
            )
            return refusal, None
        return None, principal

    # -- Streamable HTTP -------------------------------------------------------------------------------
    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.health_path is not None and scope.get("path") == self.health_path:
            await self._health(scope, send)
            return
        refusal, principal = self._refusal(scope)
        if refusal is not None:
            await _text_response(send, *refusal)
            return
        method = scope.get("method", "")
        try:
            if method == "POST":
                await self._http_post(scope, receive, send, principal)
            elif method == "GET":
                await self._http_get(scope, receive, send, principal)
            elif method == "DELETE":
                await self._http_delete(scope, send, principal)
            else:
                await _text_response(send, 405, "Method Not Allowed", [(b"allow", b"GET, POST, DELETE")])
        except _HttpRefusal as exc:
            await _text_response(send, exc.status, str(exc))
        except _ConnectionGone:
            await _text_response(send, 404, "Unknown Acp-Connection-Id")

    def _connection(self, scope: Scope, principal: str | None) -> _HttpConnection:
        """The connection named by the request's ``Acp-Connection-Id`` (400 without it, 404 unknown, or
        opened under another principal than the request's token's: nothing tells that it exists)."""
        raw = _header(scope, HEADER_CONNECTION_ID_LOWER)
        if not raw:
            raise _HttpRefusal(400, "Missing Acp-Connection-Id")
        conn = self._http_connections.get(raw.decode("latin-1"))
        if conn is None or conn.closed or conn.routing_done or conn.principal != principal:
            raise _ConnectionGone
        conn.touch()
        return conn

    async def _read_body(self, scope: Scope, receive: Receive, send: Send, length: bytes | None) -> bytes | None:
        """The request body, or ``None`` once answered ``413`` (over ``max_message_bytes``; the rest
        is read and dropped, so the client gets the answer), ``408`` (not received in full within
        ``request_timeout`` seconds; the TCP connection is closed after it) or when the client left.
        ``length``: the request's ``Content-Length`` header, if any."""
        answering: list[bool] = []  # the 413 answer has begun
        take = getattr(getattr(receive, "__self__", None), "receive_nowait", None)
        if take is not None:  # (hypercorn's queue of request events): a body already there is read at once
            taken: deque[Message] = deque()
            body = self._body_at_once(scope, take, taken, length)
            if body is not None:
                return body
            if taken:  # what was taken is received again, first, by the path that waits
                receive = functools.partial(_replayed, taken, receive)
        with trio.move_on_after(self.request_timeout):
            return await self._receive_body(scope, receive, send, answering, length)
        timeout = self.request_timeout
        log.warning("refused a POST on %s: its body did not arrive within %s s (request_timeout)", self.path, timeout)
        if answering:
            await send({"type": "http.response.body", "body": b""})
        else:
            text = f"Request body not received within {timeout} s"
            await _text_response(send, 408, text, [(b"connection", b"close")])
        return None

    def _body_at_once(
        self, scope: Scope, take: Callable[[], Message], taken: deque[Message], length: bytes | None
    ) -> bytes | None:
        """The whole body, when the server has received it all already (no yield, no timer): the
        common case of a small POST.  Else ``None``, with the events taken so far in ``taken``.
        ``length``: the request's ``Content-Length`` header, if any.  (The end of the message is
        waited for even when ``length`` bytes came: hypercorn closes a keep-alive connection whose
        response ended before h11 saw the request's end.)"""
        limit = self.max_message_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            return None
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                message = take()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return None
            taken.append(message)
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    async def _receive_body(
        self, scope: Scope, receive: Receive, send: Send, answering: list[bool], length: bytes | None
    ) -> bytes | None:
        limit = self.max_message_bytes
        too_big = length is not None and length.isdigit() and int(length) > limit
        parts: list[bytes] = []
        size = 0
        more = True
        while more and not too_big:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            more = bool(message.get("more_body", False))
            if size > limit:
                too_big = True
            else:
                parts.append(chunk)
        if not too_big:
            return b"".join(parts)
        text = f"Request body exceeds {limit} bytes"
        log.warning("refused a POST on %s: %s", self.path, text)
        await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", TEXT_PLAIN)]})
        await send({"type": "http.response.body", "body": text.encode(), "more_body": True})
        answering.append(True)
        while more:  # drained, so an HTTP/1.1 client that writes its whole body first reads the 413
            message = await receive()
            more = message["type"] != "http.disconnect" and bool(message.get("more_body", False))
        await send({"type": "http.response.body", "body": b""})
        return None

    async def _http_post(self, scope: Scope, receive: Receive, send: Send, principal: str | None) -> None:
        headers = _headers(scope)
        body = await self._read_body(scope, receive, send, headers.get(b"content-length"))
        if body is None:
            return
        content_type = headers.get(b"content-type")
        if (
            content_type != b"application/json"  # (what clients send: judged without a call)
            and (content_type or b"").split(b";", 1)[0].strip().lower() != b"application/json"
        ):
            raise _HttpRefusal(415, "Unsupported Media Type")
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            error = {"code": -32700, "message": "Parse error", "data": str(exc)}
            await _json_response(send, 400, {"jsonrpc": "2.0", "id": None, "error": error})
            return
        if type(message) is not dict:  # (orjson makes exactly dict and list: judged without a call)
            if type(message) is list:
                await _response(send, 400, _BATCH_REFUSAL.encode(), [(b"content-type", b"application/json")])
                return
            raise _HttpRefusal(400, "Invalid JSON-RPC message")
        text = body.decode("utf-8")
        named = headers.get(HEADER_CONNECTION_ID_LOWER)
        if message.get("method") == "initialize" and "id" in message and message.get("jsonrpc") == "2.0":
            if named:
                raise _HttpRefusal(400, "Initialize not allowed on existing connection")
            if message["id"] is None:
                raise _HttpRefusal(400, "Initialize request must include an ID")
            if _id_key(message["id"]) is None:  # an object or array: no answer could match it
                raise _HttpRefusal(400, "Initialize request ID must be a string or a number")
            if self._full():
                raise _HttpRefusal(503, f"Too many ACP connections (max_connections {self.max_connections})")
            if self._nursery is not None:
                await self._http_initialize(self._nursery, message, text, receive, send, principal, scope)
            else:  # no lifespan (a server without it): the connection lives in this request's task
                async with trio.open_nursery() as nursery:
                    await self._http_initialize(nursery, message, text, receive, send, principal, scope)
            return
        conn = self._connection(scope, principal)
        conn.request_began()
        try:
            await self._http_post_to(conn, headers, receive, send, message, text)
        finally:
            conn.request_ended()

    async def _http_post_to(
        self,
        conn: _HttpConnection,
        headers: dict[bytes, bytes],
        receive: Receive,
        send: Send,
        message: dict[str, Any],
        text: str,
    ) -> None:
        """A POST of ``message`` (its body: ``text``; the request's headers by lowercased name: ``headers``)
        other than ``initialize`` for ``conn``: ``202`` (held first while the connection's output is at
        ``max_buffered_bytes``), or a refusal."""
        method = message.get("method")
        raw_session = headers.get(HEADER_SESSION_ID_LOWER)
        header_session = raw_session.decode("latin-1") if raw_session else None
        answered = _response_key(message)
        if answered is not None:
            if answered in conn.client_response_routes:
                route = conn.client_response_routes[answered]
                if route is not None and header_session is None:
                    raise _HttpRefusal(400, "Missing Acp-Session-Id")
                if route is not None and header_session != route:
                    raise _HttpRefusal(400, "Mismatched Acp-Session-Id")
                del conn.client_response_routes[answered]
        else:
            params_session = _params_session_id(message)
            if (method in SESSION_SCOPED_METHODS or params_session is not None) and header_session is None:
                raise _HttpRefusal(400, "Missing Acp-Session-Id")
            if header_session is not None and params_session is not None and header_session != params_session:
                raise _HttpRefusal(400, "Mismatched Acp-Session-Id")
            route = header_session or params_session
            if route is not None:
                conn.check_id("Session ID", route)
            if not _is_notification(message):
                if isinstance(message.get("id"), str):
                    conn.check_id("Request ID", message["id"])
                if conn.buffered_bytes >= self.max_buffered_bytes:  # held until the client reads (or the stall)
                    if not await _unless_disconnected(receive, conn.wait_for_room):
                        await _text_response(send, 499, "Request aborted")
                        return
                    if conn.closed:
                        raise _ConnectionGone
            if _is_request(message):
                key = _id_key(message["id"])
                assert key is not None
                conn.pending_routes[key] = None if method == "session/load" else route
        await conn.write_inbound(text)
        await _response(send, 202, b"", [])

    async def _http_initialize(
        self,
        nursery: trio.Nursery,
        message: dict[str, Any],
        text: str,
        receive: Receive,
        send: Send,
        principal: str | None,
        scope: Scope,
    ) -> None:
        conn = _HttpConnection(self, secrets.token_urlsafe(24), principal)
        conn.initial_key = _id_key(message["id"])
        conn.request_began()  # however long the agent takes to answer, the idle clock waits for the answer
        self._http_connections[conn.id] = conn
        self.connection_ids.add(conn.id)
        nursery.start_soon(self._run_http, conn)
        idle = self.idle_timeout
        if idle is not None:  # one reaper per nursery: the lifespan's, else this request's (this connection's)
            if self._reaper is None or self._reaper.nursery is not nursery:
                reaper = _Reaper(nursery, idle)
                if nursery is self._nursery:
                    self._reaper = reaper
            else:
                reaper = self._reaper
            conn.reaper = reaper
        try:
            await self._http_initialize_answer(conn, message, text, receive, send, _tcp_server(scope))
        finally:
            conn.request_ended()

    async def _http_initialize_answer(
        self, conn: _HttpConnection, message: dict[str, Any], text: str, receive: Receive, send: Send, tcp: Any
    ) -> None:
        """Hand ``initialize`` to the new connection's agent and answer the POST with the agent's answer
        (``200``), else ``500`` (the agent ended or said something else) or ``499`` (the client left).
        ``tcp``: the request's coalescing TCP server (:func:`_tcp_server`), or ``None``."""

        async def initialize() -> None:
            try:
                await conn.write_inbound(text)
            except _ConnectionGone:
                pass
            await conn.initial_ready.wait()

        if not await _unless_disconnected(receive, initialize):
            conn.close("the client left before the answer to initialize")
            await _text_response(send, 499, "Request aborted")
            return
        if conn.initial is None:
            conn.close()
            error = {"code": -32603, "message": "Initialize failed", "data": conn.initial_error}
            await _json_response(send, 500, {"jsonrpc": "2.0", "id": message["id"], "error": error})
            return
        headers = [(b"content-type", b"application/json"), (HEADER_CONNECTION_ID_LOWER, conn.id.encode())]
        await _response(send, 200, conn.initial, headers, tcp)

    async def _run_http(self, conn: _HttpConnection) -> None:
        try:
            await self._serve(
                conn.id,
                LineSendStream(
                    conn.send_line,
                    "the Streamable HTTP send stream",
                    send_lines=conn.send_lines,
                    send_lines_now=conn.send_lines_now,
                ),
                MessageReceiveStream(conn.next_text),
                "http",
                conn.principal,
            )
        except Exception:  # the agent factory or the runtime failed: this connection ends, the server goes on
            log.exception("ACP connection %s failed", conn.id)
            conn.close()
        finally:
            conn.finish()
            if conn.reaper is not None:  # (its reaper's task ends with the last connection it watches)
                conn.reaper.forget(conn)
            self.connection_ids.discard(conn.id)
            self._ended.unpark_all()

    async def _http_get(self, scope: Scope, receive: Receive, send: Send, principal: str | None) -> None:
        accept = (_header(scope, b"accept") or b"").lower()
        if b"text/event-stream" not in accept:
            raise _HttpRefusal(406, "Not Acceptable")
        conn = self._connection(scope, principal)
        raw_session = _header(scope, HEADER_SESSION_ID_LOWER)
        mailbox = conn.acquire(raw_session.decode("latin-1") if raw_session else None)
        if mailbox is None:
            raise _HttpRefusal(409, "Outbound stream already has an active receiver")
        conn.receivers += 1
        try:
            headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
            if scope.get("http_version") in ("1.0", "1.1"):
                headers.append((b"connection", b"keep-alive"))
            with _one_write(_tcp_server(scope)):  # the head and the comment
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                # a comment first: the headers go out now whatever the server buffers (clients ignore it)
                await send({"type": "http.response.body", "body": b":\n\n", "more_body": True})

            stream = functools.partial(conn.stream_events, mailbox, self.sse_keepalive, send)
            if await _unless_disconnected(receive, stream):
                await send({"type": "http.response.body", "body": b""})
        except Exception as exc:  # the server lost the socket (what it raises then is its own)
            log.debug("ACP connection %s: SSE stream failed: %r", conn.id, exc)
        finally:
            conn.release(mailbox)
            conn.receivers -= 1
            conn.touch()
            conn.attachment_changed()

    async def _http_delete(self, scope: Scope, send: Send, principal: str | None) -> None:
        conn = self._connection(scope, principal)
        conn.close()
        await _response(send, 202, b"", [])

    # -- WebSocket ---------------------------------------------------------------------------------
    async def _reject(
        self, scope: Scope, send: Send, status: int, body: str, headers: list[tuple[bytes, bytes]]
    ) -> None:
        if "websocket.http.response" in scope.get("extensions", {}):
            start = {"type": "websocket.http.response.start", "status": status}
            start["headers"] = [(b"content-type", b"text/plain; charset=utf-8"), *headers]
            await send(start)
            await send({"type": "websocket.http.response.body", "body": body.encode()})
        else:  # the server answers 403
            await send({"type": "websocket.close", "code": CLOSE_POLICY_VIOLATION})

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        first = await receive()
        if first["type"] != "websocket.connect":
            return
        refusal, principal = self._refusal(scope)
        if refusal is None and self._full():
            refusal = (503, f"Too many ACP connections (max_connections {self.max_connections})", [])
        if refusal is not None:
            await self._reject(scope, send, *refusal)
            return
        connection_id = secrets.token_urlsafe(24)
        accept: Message = {
            "type": "websocket.accept",
            "headers": [(HEADER_CONNECTION_ID.lower().encode(), connection_id.encode())],
        }
        offered = scope.get("subprotocols") or []
        if offered:  # a client that offers subprotocols (browsers, Node's ws) aborts when none is echoed
            accept["subprotocol"] = offered[0]
        if not self.websocket_compression:
            _decline_compression(send)
        await send(accept)
        del first, accept  # not kept in this frame while the connection is open (objects the collector visits)
        self.connection_ids.add(connection_id)
        try:
            await self._run(connection_id, receive, send, _tcp_server(scope), principal)
        except Exception:  # the agent factory or the runtime failed: this connection ends, the server goes on
            log.exception("ACP connection %s failed", connection_id)
            with contextlib.suppress(Exception):
                await send({"type": "websocket.close", "code": CLOSE_INTERNAL_ERROR, "reason": "internal error"})
        finally:
            self.connection_ids.discard(connection_id)
            self._ended.unpark_all()

    def _serve(
        self,
        connection_id: str,
        to_client: trio.abc.SendStream,
        from_client: trio.abc.ReceiveStream,
        kind: str,
        principal: str | None = None,
    ) -> Awaitable[None]:
        """What serves one connection's NDJSON byte streams (whatever the transport) until it ends, to
        await at once; ``principal``: that of the token of the request that opened it.  (Not a
        coroutine function: the awaitable it returns runs without a coroutine frame of this one
        held for as long as the connection lives.)"""
        if self.serve_streams is not None:  # the bridge: bytes to a process, verbatim
            return self.serve_streams(connection_id, to_client, from_client)
        if self.host is not None:  # sessions owned by the host, attached to under the connection's principal
            return self.host.serve_streams(connection_id, to_client, from_client, principal=principal)
        conn = AgentSideConnection(
            self.agent, to_client, from_client, name=f"acp-{kind}-{connection_id[:8]}", **self.connection_options
        )
        conn.connection_id = connection_id  # type: ignore[attr-defined]
        # (its writer in the awaiting task: an idle connection holds less; the Connection's own, one
        # coroutine frame fewer than AgentSideConnection.serve_until_closed, which only calls it)
        return conn.connection.serve_until_closed()

    async def _run(
        self, connection_id: str, receive: Receive, send: Send, tcp: Any = None, principal: str | None = None
    ) -> None:
        """One WebSocket's ACP connection.  ``tcp``: the :class:`~acp_trio.transports._hypercorn.CoalescingTCPServer`
        that every frame of this WebSocket goes through (under :func:`serve`, HTTP/1.1), else ``None``;
        ``principal``: that of the upgrade request's token.

        The connection's state is one :class:`_WebSocketIO`.  Its pump task (started only when a
        message has to wait for the client) runs in the lifespan's nursery when there is one, so an
        idle connection holds no nursery of its own; without lifespan, in a nursery held here."""
        io = _WebSocketIO(self, connection_id, send, tcp, principal)
        # the server's queue of received messages (hypercorn's memory channel), to take several at once
        receive_nowait = getattr(getattr(receive, "__self__", None), "receive_nowait", None)
        # under serve(): the connection's reader reads the socket itself (no task switch a message)
        inbox = await _LentReads.take_over(tcp, send, receive_nowait)
        if inbox is not None:
            receive, receive_nowait = inbox.receive, inbox.receive_nowait
        io.receive, io.receive_nowait = receive, receive_nowait
        try:
            if self._nursery is not None:
                io.nursery = self._nursery
                await io.serve(inbox)
            else:
                async with trio.open_nursery() as nursery:
                    io.nursery = nursery
                    await io.serve(inbox)
        finally:
            if io.pump_done is not None:  # the pump writes what it holds, then ends
                try:
                    await io.pump_done.wait()  # (a stalled client keeps it until it reads or leaves)
                finally:
                    assert io.pump_scope is not None  # (made with pump_done)
                    io.pump_scope.cancel()  # this connection was cancelled: so is its pump
        if not io.disconnected:
            code, reason = io.close if io.close is not None else (CLOSE_NORMAL, "")
            try:
                await send({"type": "websocket.close", "code": code, "reason": reason[:120]})
            except Exception as exc:  # pragma: no cover - the socket went away meanwhile
                log.debug("ACP connection %s: close failed: %r", connection_id, exc)


class _WebSocketIO:
    """One WebSocket's ACP connection state (:meth:`AcpApp._run`): the text messages in, the text
    messages out, and the pump that carries what cannot go out at once.

    Outgoing messages go out directly when they can (``send_texts_now``, ``send_texts``: under
    :func:`serve`, framed and handed to the socket from the connection's writer); otherwise they
    are queued without a task switch per message, up to ``_WS_BACKLOG_CHARS``, for the pump, beyond
    which ``send_text`` waits (at most ``output_stall_timeout`` seconds without the client taking
    anything) for the pump.  The pump's task, its parking lots and the queue exist only once
    something had to wait: an idle connection holds none of them (memory per idle connection).
    One object with slots rather than closures over ``_run``'s locals, for the same reason.
    """

    __slots__ = (
        "app",
        "backlog",
        "close",
        "connection_id",
        "direct",
        "disconnected",
        "ended",
        "finished",
        "initialized",
        "nursery",
        "principal",
        "pump_done",
        "pump_lot",
        "pump_scope",
        "pumping",
        "queued",
        "receive",
        "receive_nowait",
        "send",
        "sender_lot",
        "taken_at",
        "tcp",
    )

    def __init__(self, app: AcpApp, connection_id: str, send: Send, tcp: Any, principal: str | None = None) -> None:
        self.app = app
        self.connection_id = connection_id
        self.principal = principal
        self.send = send
        self.tcp = tcp
        self.receive: Receive | None = None
        self.receive_nowait: Callable[[], Message] | None = None
        self.nursery: trio.Nursery | None = None
        self.close: tuple[int, str] | None = None  # why this side closes, first reason wins
        # the first request or notification was initialize (the RFD); the bridge stays transparent
        self.initialized = app.serve_streams is not None
        self.disconnected = False
        self.finished = False  # the input ended (a disconnect, a broken limit) while messages were taken ahead
        self.backlog: deque[str] = _NOTHING_QUEUED  # a deque of its own once something is queued
        self.queued = 0  # characters in the backlog
        self.ended = False  # no more output: the connection is done, or the pump stopped
        self.pumping = False  # the pump is inside send (a message taken from the backlog is on its way)
        self.taken_at = trio.current_time()  # when the client last took a message (the pump's send returned)
        self.pump_lot: trio.lowlevel.ParkingLot | None = None  # the pump waiting for the backlog
        self.sender_lot: trio.lowlevel.ParkingLot | None = None  # send_text waiting for the pump
        self.pump_done: trio.Event | None = None  # set when the pump has ended (None: never started)
        self.pump_scope: trio.CancelScope | None = None  # the pump's (made with pump_done)
        self.direct: Any = _direct_stream(send, tcp)  # hypercorn's stream, for send_now (or None)

    def stop(self, code: int, reason: str) -> None:
        """This side closes the WebSocket with ``code`` (the first reason given wins)."""
        log.warning("ACP connection %s: %s", self.connection_id, reason)
        if self.close is None:
            self.close = (code, reason)

    async def serve(self, inbox: _LentReads | None) -> None:
        to_client = MessageSendStream(
            self.send_text, send_texts=self.send_texts, send_texts_now=None if self.direct is None else self.send_now
        )
        from_client = MessageReceiveStream(self.next_text, self.more_texts if self.receive_nowait is not None else None)
        try:
            await self.app._serve(self.connection_id, to_client, from_client, "ws", self.principal)
        finally:
            if inbox is not None:  # hypercorn's reader reads again (the close handshake, the end)
                inbox.close()
            self.ended = True  # the pump writes what it holds, then ends
            if self.pump_lot is not None:
                self.pump_lot.unpark_all()

    # -- input ---------------------------------------------------------------------------------

    def accept(self, message: Message) -> str | bool | None:
        """One received ASGI message: its text, ``None`` for the end of input, ``False`` to skip it."""
        kind = message["type"]
        if kind == "websocket.disconnect":
            self.disconnected = True
            return None
        if kind != "websocket.receive":
            return False
        text = message.get("text")
        if text is None:
            log.debug("ACP connection %s: ignoring a binary frame", self.connection_id)
            return False
        limit = self.app.max_message_bytes
        nbytes = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if nbytes > limit:
            self.stop(CLOSE_MESSAGE_TOO_BIG, f"message of {nbytes} bytes exceeds the limit of {limit} bytes")
            return None
        if (text[:1] == "[" or text[:1].isspace()) and _is_batch(text):  # refused as over HTTP, never handed on
            if not self.ended:
                self.queue(_BATCH_REFUSAL)
            return False
        if not self.initialized:
            refused = _not_initialize_first(text)
            if refused is None:
                self.initialized = True
            elif refused:
                log.info("ACP connection %s: %s", self.connection_id, refused)
                if self.close is None:
                    self.close = (CLOSE_PROTOCOL_ERROR, refused)
                return None
        return str(text)

    async def next_text(self) -> str | None:
        if self.finished:
            return None
        receive = self.receive
        assert receive is not None
        while True:
            text = self.accept(await receive())
            if text is None or isinstance(text, str):
                return text

    def more_texts(self, max_bytes: int) -> list[str]:
        """The messages already received, up to ``max_bytes``, without waiting (one wake-up a batch)."""
        receive_nowait = self.receive_nowait
        assert receive_nowait is not None
        texts: list[str] = []
        total = 0
        while total < max_bytes and not self.finished:
            try:
                message = receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            text = self.accept(message)
            if text is None:
                self.finished = True  # handed over after the texts before it
            elif isinstance(text, str):
                texts.append(text)
                total += len(text)
        return texts

    # -- output --------------------------------------------------------------------------------

    def queue(self, text: str) -> None:
        """Queue ``text`` for the pump (started with the first message it has to carry)."""
        if self.backlog is _NOTHING_QUEUED:
            self.backlog = deque()
        self.backlog.append(text)
        self.queued += len(text)
        if self.pump_done is None:
            assert self.nursery is not None
            self.pump_done = trio.Event()
            self.pump_lot = trio.lowlevel.ParkingLot()
            self.pump_scope = trio.CancelScope()
            self.nursery.start_soon(self.pump)
        elif self.pump_lot:
            self.pump_lot.unpark()

    async def send_text(self, text: str) -> None:
        if self.ended:
            raise trio.BrokenResourceError("the WebSocket is closed")
        self.queue(text)
        if self.queued <= _WS_BACKLOG_CHARS:
            return
        # wait until the pump has sent half of the backlog (one wake-up per half, not per message);
        # the client must take something every `stall` seconds meanwhile
        stall = self.app.output_stall_timeout
        if self.sender_lot is None:
            self.sender_lot = trio.lowlevel.ParkingLot()
        waiting_since = trio.current_time()
        while self.queued > _WS_BACKLOG_CHARS // 2 and not self.ended:
            deadline = max(waiting_since, self.taken_at) + stall
            with trio.move_on_at(deadline):
                await self.sender_lot.park()
            if trio.current_time() < max(waiting_since, self.taken_at) + stall or self.ended:
                continue
            reason = f"output stalled: the client took nothing for {stall} s"
            self.stop(CLOSE_POLICY_VIOLATION, reason)
            raise trio.BrokenResourceError(reason)

    async def send_texts(self, texts: list[str]) -> bool:
        """Send one write's messages; ``True`` when they all went out at once, without waiting.

        Under :func:`serve`, while the pump holds nothing and the TCP connection's buffer has
        room, the messages are sent here, in the connection's writer task, and handed to the
        socket together (no task switch to the pump nor to the TCP writer); from the first one
        that would have to wait for room on, they go through the backlog and the pump as
        ``send_text``'s do (with the output stall limit).
        """
        tcp = self.tcp
        if tcp is None or self.backlog or self.pumping or self.ended:
            for text in texts:
                await self.send_text(text)
            return False
        sent = 0
        tcp.hold()
        try:
            for text in texts:
                if not tcp.can_send_now():
                    break
                await self.send({"type": "websocket.send", "text": text})  # buffered: no wait
                sent += 1
        except Exception as exc:  # the server lost the socket
            log.debug("ACP connection %s: send failed: %r", self.connection_id, exc)
            self.disconnected = self.ended = True
            if self.pump_lot is not None:
                self.pump_lot.unpark_all()
            raise trio.BrokenResourceError("the WebSocket is closed") from exc
        finally:
            tcp.release()
        # (taken_at needs no update: a later stall wait starts after this anyway)
        if sent == len(texts):
            return True
        for text in texts[sent:]:
            await self.send_text(text)
        return False

    def send_now(self, texts: list[str]) -> bool:
        """Send one write's messages at once from the calling task, if nothing waits before
        them and the TCP connection's buffer has room; else none (``False``).

        Under :func:`serve` (``direct``: hypercorn's WebSocket stream, see :func:`_direct_stream`):
        while the WebSocket is open (hypercorn's stream connected and not closed, wsproto's
        connection open) and the TCP connection's buffer has room, frames ``texts`` with the
        stream's wsproto connection, as hypercorn's ``app_send`` would, and hands the frames to the
        TCP connection (``write_now``: to the socket at once when its writer is idle), with no task
        switch and no await; the same frames, in the same order as hypercorn's own path.  (A
        method rather than a closure made per connection: a server holds many idle ones.)
        """
        stream = self.direct
        if self.backlog or self.pumping or self.ended:
            return False
        connected, open_, text_message = _direct
        tcp = self.tcp
        if stream.closed or stream.state is not connected or not tcp.can_send_now():
            return False
        connection = stream.connection
        if connection.state is not open_:
            return False
        ok: bool = tcp.write_now(b"".join([connection.send(text_message(data=text)) for text in texts]))
        return ok

    async def pump(self) -> None:
        """Send the backlog, in order, until the connection ends (in the lifespan's nursery, or
        ``_run``'s: it never raises, and it is cancelled with the connection)."""
        pump_lot, done, scope = self.pump_lot, self.pump_done, self.pump_scope
        assert pump_lot is not None and done is not None and scope is not None
        try:
            with scope:
                while True:
                    while not self.backlog:
                        if self.ended:
                            return
                        await pump_lot.park()
                    text = self.backlog.popleft()
                    self.queued -= len(text)
                    if self.sender_lot and self.queued <= _WS_BACKLOG_CHARS // 2:
                        self.sender_lot.unpark_all()
                    self.pumping = True
                    try:
                        await self.send({"type": "websocket.send", "text": text})
                    except Exception as exc:  # the server lost the socket
                        log.debug("ACP connection %s: send failed: %r", self.connection_id, exc)
                        self.disconnected = True
                        return
                    finally:
                        self.pumping = False
                    self.taken_at = trio.current_time()
        finally:
            self.ended = True
            if self.sender_lot is not None:
                self.sender_lot.unpark_all()
            done.set()


_direct: Any = None
"""``(ASGIWebsocketState.CONNECTED, ConnectionState.OPEN, wsproto's TextMessage)`` once
:func:`_direct_stream` imported them (hypercorn and wsproto are needed only under :func:`serve`)."""


def _direct_stream(send: Send, tcp: Any) -> Any:
    """hypercorn's WebSocket stream whose ``app_send`` is ``send``, under :func:`serve` (``tcp``: its
    ``CoalescingTCPServer``), for :meth:`_WebSocketIO.send_now`'s direct sends; else ``None``."""
    global _direct
    stream: Any = getattr(send, "__self__", None)
    if tcp is None or not hasattr(tcp, "write_now") or not hasattr(stream, "connection"):
        return None
    if _direct is None:
        from hypercorn.protocol.ws_stream import ASGIWebsocketState
        from wsproto.connection import ConnectionState
        from wsproto.events import TextMessage

        _direct = (ASGIWebsocketState.CONNECTED, ConnectionState.OPEN, TextMessage)
    return stream


class _LentReads:
    """A WebSocket's input read by the ACP connection's own reader (:meth:`AcpApp._run`), under :func:`serve`.

    hypercorn's reader task reads the socket, parses the frames and hands each message to the
    application's queue, whose reader (the connection's) it wakes: a task switch and a scheduler
    pass per message, on top of the connection's own.  Here the connection's reader takes the
    reads over (``CoalescingTCPServer.lend_reads``): when it wants a message and none is waiting,
    it reads the socket and hands the bytes to hypercorn's protocol stack in its own task
    (``read_inline``: the same parsing, events and checks, the same ASGI messages), which puts the
    messages in :attr:`inbox` instead of hypercorn's channel (``WSStream.app_put`` replaced) without
    waiting.  The socket is read only when the connection wants input.  At the end of input or
    on a read error, and when the connection ends (:meth:`close`), hypercorn's reader reads again
    and ends the WebSocket as usual; messages put after :meth:`close` are dropped.
    """

    def __init__(self, tcp: Any, channel_nowait: Callable[[], Message] | None) -> None:
        self.tcp = tcp
        self.channel_nowait = channel_nowait  # hypercorn's queue, until it is empty: what came before
        self.inbox: deque[Message] = _NOTHING_QUEUED  # a deque of its own once something is put
        # a receive waiting for hypercorn's reader to put (made by the first such wait: the reads are
        # mostly lent until the connection ends, and a lot is three objects the collector visits)
        self.arrived: trio.lowlevel.ParkingLot | None = None
        self.lent = False
        self.closed = False
        self.handle: Callable[[bytes], Awaitable[None]] | None = None  # where read_inline hands the bytes
        self.stream: Any = None  # hypercorn's WebSocket stream, when handle hands the bytes to it

    @classmethod
    async def take_over(cls, tcp: Any, send: Send, channel_nowait: Any) -> _LentReads | None:
        """Take the reads of the WebSocket whose ``send`` is hypercorn's ``WSStream.app_send``
        (``None``, nothing changed: another server, HTTP/2, TLS, a ``read_timeout``, ...)."""
        stream: Any = getattr(send, "__self__", None)
        if tcp is None or channel_nowait is None or not callable(getattr(stream, "app_put", None)):
            return None
        if not await tcp.lend_reads():
            return None  # hypercorn's reader goes on, its bounded queue holding its reader back
        # hypercorn's reader waits now: what it read is in its queue, and the rest is read here
        reads = cls(tcp, channel_nowait)
        reads.lent = True
        stream.app_put = reads.put  # (hypercorn's WSStream: its attribute, set once by spawn_app)
        # past HTTP/1.1's layers when they hold nothing: after the upgrade hypercorn's H11Protocol
        # hands every byte unchanged to the WebSocket stream as one Data event (H11WSConnection)
        h11: Any = getattr(getattr(tcp, "protocol", None), "protocol", None)
        if getattr(h11, "stream", None) is stream and not getattr(getattr(h11, "connection", None), "buffer", b"x"):
            global _data_event
            if _data_event is None:
                from hypercorn.protocol.events import Data

                _data_event = Data
            reads.stream = stream
            reads.handle = reads.handle_data
        return reads

    async def handle_data(self, data: bytes) -> None:
        """Hand ``data`` read from the socket to hypercorn's WebSocket stream (``read_inline``'s handler)."""
        stream = self.stream
        await stream.handle(_data_event(stream_id=stream.stream_id, data=data))

    async def put(self, message: Message) -> None:
        """hypercorn's ``app_put``: queue ``message`` for the connection, without waiting."""
        if self.closed:
            return
        if self.inbox is _NOTHING_QUEUED:
            self.inbox = deque()
        self.inbox.append(message)
        if self.arrived:  # (None, or a lot with nobody parked, is false)
            self.arrived.unpark()

    def receive_nowait(self) -> Message:
        """The next message received, in order; ``trio.WouldBlock`` if none is waiting."""
        if self.channel_nowait is not None:
            try:
                return self.channel_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                self.channel_nowait = None
        inbox = self.inbox
        if inbox:
            message = inbox.popleft()
            if not inbox:  # an idle connection holds no emptied deque (its block: 760 bytes)
                self.inbox = _NOTHING_QUEUED
            return message
        raise trio.WouldBlock

    async def receive(self) -> Message:
        """The next message: read from the socket while the reads are lent, else put by hypercorn's reader."""
        while True:
            try:
                return self.receive_nowait()  # (no schedule point: the socket's reads are them)
            except trio.WouldBlock:
                pass
            if self.lent:
                if not await self.tcp.read_inline(self.handle):
                    self.lent = False  # the end of input: hypercorn's reader reads it again and says so
            else:
                if self.arrived is None:
                    self.arrived = trio.lowlevel.ParkingLot()
                await self.arrived.park()

    def close(self) -> None:
        """The connection reads no more: hypercorn's reader takes the socket back."""
        self.closed = True
        self.inbox.clear()
        if self.lent:
            self.lent = False
            self.tcp.return_reads()


_data_event: Any = None
"""hypercorn's ``Data`` event, once :meth:`_LentReads.take_over` imported it."""

_NOTHING_QUEUED: deque[Any] = deque()
"""The empty queue a WebSocket connection's backlog and inbox start as, shared and never appended
to: each gets a deque of its own with its first message (an empty deque holds a 64-slot block,
about 0.75 KB, and most connections never queue anything there)."""


def _tcp_server(scope: Scope) -> Any:
    """The coalescing TCP server (:mod:`acp_trio.transports._hypercorn`) every frame of this WebSocket
    goes through, or ``None``: under another server, or over HTTP/2 (whose streams have flow control)."""
    module = sys.modules.get(f"{__package__}._hypercorn")  # imported by serve(); not needed otherwise
    if module is None or scope.get("http_version") != "1.1":
        return None
    return module.current_tcp_server()


def _decline_compression(send: Send) -> None:
    """Under hypercorn, make the upgrade answer accept no extension (permessage-deflate).

    ASGI gives an application no say in extensions, and hypercorn accepts permessage-deflate
    whenever a client offers it (Node's clients and browsers do): every frame is then deflated
    here and inflated there, which cost the TypeScript client 117 µs per streamed update (8,500
    updates/s against 60,000 from the TypeScript server, which leaves compression off).  hypercorn
    passes its WebSocket stream's ``app_send`` as ``send``, whose ``handshake`` holds the offered
    extensions until the accept: they are dropped there.  Under another server this does nothing.
    """
    handshake = getattr(getattr(send, "__self__", None), "handshake", None)
    if handshake is not None and hasattr(handshake, "extensions"):
        handshake.extensions = None


_BATCH_REFUSAL = orjson.dumps(
    {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Invalid request: JSON-RPC batches are not supported"},
    }
).decode()
"""The answer to a JSON-RPC batch on either transport (the TypeScript SDK's words; see the module docstring)."""


def _is_batch(text: str) -> bool:
    """Whether a message is a JSON array (a JSON-RPC batch, or an empty one); text that does not
    parse is not: the connection answers it ``-32700`` as usual."""
    if text.lstrip()[:1] != "[":
        return False
    try:
        return isinstance(orjson.loads(text), list)
    except orjson.JSONDecodeError:
        return False


def _not_initialize_first(text: str) -> str | None:
    """Why a WebSocket's first message breaks the RFD's "initialize first" rule (``None``: it is an
    initialize request; ``""``: it is no request or notification, so the rule is still to come).

    As the TypeScript server: a request or notification other than ``initialize``, or an
    ``initialize`` without an id, closes the WebSocket with 1002; JSON that does not parse, a
    batch or a response is answered or ignored by the connection as usual.
    """
    try:
        message = orjson.loads(text)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(message, dict) or "method" not in message:
        return ""
    if message["method"] != "initialize":
        return "First message must be initialize"
    if message.get("id") is None:
        return "Initialize request must include an ID"
    return None


async def _text_response(send: Send, status: int, body: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await _response(send, status, body.encode(), [(b"content-type", TEXT_PLAIN), *(headers or [])])


async def _json_response(send: Send, status: int, value: Any) -> None:
    await _response(send, status, orjson.dumps(value), [(b"content-type", b"application/json")])


async def _response(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]], tcp: Any = None) -> None:
    """A whole response: ``headers`` (``content-length`` added) and ``body``; with ``tcp`` (the
    request's coalescing TCP server, :func:`_tcp_server`) both go to the socket in one write."""
    headers.append((b"content-length", str(len(body)).encode()))
    with _one_write(tcp):
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@contextlib.contextmanager
def _one_write(tcp: Any) -> Iterator[None]:
    """What the ``with`` block sends goes to the socket in one write (the coalescing TCP server's
    ``hold``/``release``; ``tcp``: :func:`_tcp_server`'s, or ``None``: sent as it comes)."""
    if tcp is None:
        yield
        return
    tcp.hold()
    try:
        yield
    finally:
        tcp.release()


async def _replayed(taken: deque[Message], receive: Receive) -> Message:
    """``receive``, after the events in ``taken`` (taken from the server's queue already)."""
    if taken:
        await trio.lowlevel.checkpoint()
        return taken.popleft()
    return await receive()


async def _unless_disconnected(receive: Receive, work: Callable[[], Awaitable[None]]) -> bool:
    """Run ``work`` until it returns (``True``) or the client disconnects first (``False``, ``work``
    cancelled).  Events received meanwhile other than the disconnect are dropped (the request's body
    was read already).  Under :func:`serve` the server's queue of the request's events cancels
    ``work`` itself at the disconnect (``AppEvents.watch_disconnect``); elsewhere a task reads
    ``receive`` until it."""
    events: Any = getattr(receive, "__self__", None)
    watch = getattr(events, "watch_disconnect", None)
    if watch is not None:
        with trio.CancelScope() as scope:
            watch(scope)
            try:
                await work()
            finally:
                events.unwatch()
        return not scope.cancelled_caught
    done = False
    async with trio.open_nursery() as nursery:

        async def watcher() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(watcher)
        await work()
        done = True
        nursery.cancel_scope.cancel()
    return done


@functools.lru_cache(maxsize=64)
def _loopback_address(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:  # a Unix socket's path
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def _loopback_socket(scope: Scope) -> bool:
    """Whether the request came in on a loopback socket (the ASGI scope's ``server`` address)."""
    server = scope.get("server")
    return isinstance(server, (tuple, list)) and isinstance(server[0], str) and _loopback_address(server[0])


@functools.lru_cache(maxsize=64)  # (every request of a client names the same Host)
def _ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _host_name(raw: bytes) -> str | None:
    """The name of a ``Host`` header (RFC 9110 § 7.2: ``host [ ":" port ]``), lowercased, IPv6 without
    brackets; ``None`` when it is not of that form."""
    text = raw.decode("latin-1").strip().lower()
    if text.startswith("["):
        name, bracket, rest = text[1:].partition("]")
        if not bracket:
            return None
    else:
        name, colon, port = text.partition(":")
        rest = colon + port
    if rest and not (rest[0] == ":" and rest[1:].isdigit()):
        return None
    return name or None


_PASSED_KEPT = 64
"""How many combinations of ``Authorization``, ``Origin``, ``Host`` and socket address that passed
:meth:`AcpApp._refusal`'s checks are remembered (then forgotten all at once)."""
_HEADERS_KEY = "acp_trio.headers"
"""The scope's key for its headers by lowercased name (made by the first :func:`_header` of a request)."""


def _header(scope: Scope, name: bytes) -> bytes | None:
    """The value of the request's first ``name`` header (``name`` lowercased), or ``None``."""
    return _headers(scope).get(name)


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by lowercased name (the first of each), indexed once per request in
    the scope (ASGI lets an application add keys): a POST looks up seven of them."""
    headers: dict[bytes, bytes] | None = scope.get(_HEADERS_KEY)
    if headers is None:
        raw = scope.get("headers", ())
        # names lowercased already (ASGI servers lowercase them; hypercorn does): the first of each wins
        headers = dict(reversed(raw)) if type(raw) is list else None
        if headers is None or not b"".join(headers).islower():
            headers = {}
            for key, value in raw:
                headers.setdefault(key.lower(), value)
        scope[_HEADERS_KEY] = headers
    return headers


async def serve(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    certfile: str | None = None,
    keyfile: str | None = None,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    release_memory_when_idle: float | None = 1.0,
    also_bind: Iterable[tuple[str, int]] = (),
    gc_threshold2: int | None = 100,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve an ASGI ``app`` (an :class:`AcpApp`) with hypercorn on trio until cancelled.

    hypercorn's protocol stack (HTTP/1.1, HTTP/2, WebSocket) and lifespan run as in its trio
    worker, with one change: each TCP connection's output is coalesced into as few writes as the
    socket allows (:mod:`acp_trio.transports._hypercorn`), about 3.5x the frame rate of a stream of
    small messages.

    ``host``/``port``: where to listen (default ``127.0.0.1:8765``, loopback only; ``port=0``
    picks a free port).  ``also_bind``: more ``(host, port)`` addresses to listen on (an IPv6 one
    besides an IPv4 one, say), served alike.  ``certfile``/``keyfile``: PEM files for TLS (``wss://``).
    ``shutdown_trigger``: ``async () -> None`` whose return shuts the server down gracefully.
    ``task_status``: ``started`` with the bound URLs (``["http://127.0.0.1:41234"]``), for
    ``nursery.start``.  An :class:`AcpApp`'s ``max_message_bytes`` also caps hypercorn's buffer.
    ``release_memory_when_idle``: seconds with no client connected after which the process gives
    freed memory back to the OS (``gc.collect()``, then glibc's ``malloc_trim``), so a burst of
    connections does not leave it at its peak size; ``None`` never.
    ``gc_threshold2``: while serving, CPython's garbage collector walks the whole heap at most once
    per this many collections of its middle generation (``gc.set_threshold``'s third threshold,
    default 10; raised, never lowered, and restored when the last server of the process ends):
    with 2,000 connections open a full collection took about 140 ms, every connection stalled
    meanwhile, and with the default it ran every few hundred connections (45% of the CPU spent
    opening them); ``None`` leaves the collector alone
    (:data:`acp_trio.transports._hypercorn.SERVER_GC_THRESHOLD2` says more).
    A client that takes nothing for twice an :class:`AcpApp`'s ``output_stall_timeout`` loses its
    TCP connection.
    """
    from hypercorn.config import Config

    from ._hypercorn import serve_hypercorn

    config = Config()
    config.bind = [f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in [(host, port), *also_bind]]
    config.accesslog = None
    if certfile is not None:
        config.certfile = certfile
        config.keyfile = keyfile
    write_timeout = None
    if isinstance(app, AcpApp):
        config.websocket_max_message_size = app.max_message_bytes
        # the app gives up on a stalled client after output_stall_timeout and queues the close
        # frame; a client still taking nothing after as long again loses its TCP connection
        write_timeout = 2 * app.output_stall_timeout
    await serve_hypercorn(
        app,
        config,
        shutdown_trigger=shutdown_trigger,
        write_timeout=write_timeout,
        release_memory_when_idle=release_memory_when_idle,
        gc_threshold2=gc_threshold2,
        task_status=task_status,
    )


@contextlib.asynccontextmanager
async def served(app: Any, host: str = "127.0.0.1", port: int = 8765, **options: Any) -> AsyncIterator[list[str]]:
    """Serve ``app`` (an :class:`AcpApp`) for the duration of an ``async with`` block; yields the bound
    URLs (``["http://127.0.0.1:41234"]``).

    ``async with served(app, "127.0.0.1", 0) as [url]:`` is :func:`serve` started in a nursery that
    is cancelled when the block ends, with one difference: an exception raised in the block comes
    out as itself, not wrapped in an ``ExceptionGroup`` (``except acp_trio.ConnectionClosed`` around
    the block works, e.g. for a client's :class:`~acp_trio.transports.http.HttpTransportClosed`); a
    failure of the server's own tasks stays grouped beside it.  ``host``, ``port`` (``0``: a free
    port) and ``options`` (``certfile``, ``keyfile``, ``release_memory_when_idle``, ...) are
    :func:`serve`'s.  Raises ``OSError`` when the address cannot be bound (the port is taken).
    """
    async with owned_nursery() as nursery:
        urls: list[str] = await nursery.start(
            lambda task_status: serve(app, host, port, task_status=task_status, **options)
        )
        try:
            yield urls
        finally:
            nursery.cancel_scope.cancel()


__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_BUFFERED_BYTES",
    "DEFAULT_MAX_BUFFERED_SESSION_STREAMS",
    "DEFAULT_MAX_ID_LENGTH",
    "DEFAULT_OUTPUT_STALL_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_SSE_KEEPALIVE",
    "HEADER_SESSION_ID",
    "SESSION_SCOPED_METHODS",
    "AcpApp",
    "serve",
    "served",
]

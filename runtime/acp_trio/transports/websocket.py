"""The WebSocket transport, client side: :func:`connect_websocket` to an ACP agent served remotely.

Spec: the RFD ``docs/rfds/streamable-http-websocket-transport.mdx`` ("WebSocket Request Flow"): a
``GET /acp`` with ``Upgrade: websocket`` opens one ACP connection (the server names it in the
``Acp-Connection-Id`` header of its 101 answer); every JSON-RPC message is one WebSocket *text*
frame, binary frames are ignored; the client still sends ``initialize`` first.

Contract: like every transport (:mod:`acp_trio.transports`), this one only adapts the WebSocket to
a pair of trio byte streams of newline-delimited JSON and hands them to
:class:`~acp_trio.ClientSideConnection`, so the connection's rules (ordering, cancellation,
capabilities, negotiation, limits) hold unchanged.  One text frame becomes one line: a frame
holding raw line breaks (pretty-printed JSON) is compacted first, so it stays one message; each
line the connection writes becomes one text frame.  The same adapters serve the server side
(:mod:`acp_trio.transports.asgi`).

The WebSocket library is trio-websocket: native trio (its reader runs in our nursery, so the
connection's tasks, cancellation and errors stay structured), maintained, typed, and built on
wsproto, the same protocol engine hypercorn uses on the server side.  httpx-ws would add httpx and
anyio's layer for no gain here (the WebSocket needs no HTTP client features beyond the upgrade).

Needs the ``remote`` extra (``pip install acp-trio[remote]``).
"""

from __future__ import annotations

import logging
import math
import os
import ssl
import sys
import threading
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import orjson
import trio

from .._connection import ConnectionClosed
from .._nursery import owned_nursery
from .._roles import ClientSideConnection
from ._lines import LineSendStream
from .cookies import CookieStore

log = logging.getLogger("acp_trio.websocket")

HEADER_CONNECTION_ID = "Acp-Connection-Id"
"""The RFD's header naming the ACP connection (in the server's 101 answer to the upgrade)."""
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest WebSocket message accepted by default, in bytes (16 MiB, the TypeScript SDK's request-body limit)."""
CLOSE_NORMAL = 1000
CLOSE_PROTOCOL_ERROR = 1002
"""Close code when the first message is not ``initialize`` (the RFD's rule; as the TypeScript server)."""
CLOSE_POLICY_VIOLATION = 1008
"""Close code for a broken limit other than the message size (an output stall), as the TypeScript server uses."""
CLOSE_MESSAGE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011
_BATCH_BYTES = 64 * 1024
"""At most this many bytes of waiting messages are handed to the connection in one read."""
_QUEUED_BYTES = 1024 * 1024
"""The client's reader stops reading the socket while this many bytes of messages wait for the connection."""


class WebSocketConnectError(ConnectionClosed, ConnectionError):
    """The WebSocket to an ACP server could not be opened.

    A :class:`~acp_trio.ConnectionClosed` (so ``except acp_trio.ConnectionClosed`` catches every
    transport's failure alike: :class:`~acp_trio.transports.http.HttpTransportClosed` for
    Streamable HTTP, where the first exchange is ``initialize``) and a ``ConnectionError``.
    ``url``: the URL tried.  ``status``: the HTTP status the server refused the upgrade with
    (``401`` without the right bearer token, ``403`` for an Origin not allowed, ``404`` for
    another path, ...), or ``None`` when no HTTP answer came (refused TCP connection, DNS
    failure, TLS or handshake error, timeout).  ``body``: the refusal's body text (at most 1 KiB).
    """

    def __init__(self, url: str, message: str, *, status: int | None = None, body: str = "") -> None:
        self.url = url
        self.status = status
        self.body = body
        super().__init__(message)


def text_to_line(text: str) -> bytes:
    """One WebSocket text message → one NDJSON line (without its ``\\n``), its bytes unchanged.

    In valid JSON a raw ``\\r`` or ``\\n`` can only stand between tokens (strings escape them), so
    a message holding them becomes one line by turning each into a space: every other byte is kept
    (the bridge forwards messages verbatim).  One that is not valid JSON is made into a line that
    fails to parse, so the connection answers it ``-32700`` once, as a whole, instead of once per
    line.
    """
    return bytes_to_line(text.encode("utf-8", "surrogatepass"))


def bytes_to_line(data: bytes) -> bytes:
    """:func:`text_to_line` for a message already in UTF-8 bytes (an SSE event's data)."""
    if b"\n" not in data and b"\r" not in data:
        return data
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return b"\x00" + data.replace(b"\r", b" ").replace(b"\n", b" ")
    return data.replace(b"\r", b" ").replace(b"\n", b" ")


class MessageReceiveStream(trio.abc.ReceiveStream):
    """A ``trio.abc.ReceiveStream`` of NDJSON over a source of text messages.

    ``next_text``: ``async () -> str | None``, the next text message, ``None`` at the end (the
    WebSocket closed).  Each message comes out as one line (:func:`text_to_line` plus ``\\n``).
    ``more_texts``: optional ``() -> list[str]``, the messages already received that can be taken
    without waiting (``[]`` if none): each ``receive_some`` then hands the connection every message
    waiting, up to ``max_bytes``, instead of one, so a fast stream costs one wake-up per batch.
    """

    lendable = True
    """``receive_some`` may be called from any task (one at a time) and cancelled while it waits,
    losing nothing (the connection lets a request handler's task read while it waits for its
    response, as over a pipe); after the end it says ``b""`` again."""

    def __init__(
        self,
        next_text: Callable[[], Awaitable[str | None]],
        more_texts: Callable[[int], list[str]] | None = None,
    ) -> None:
        self._next_text = next_text
        self._more_texts = more_texts
        self._buffer = bytearray()
        self._eof = False

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next bytes of NDJSON (at most ``max_bytes``), waiting for a message when none is
        buffered; ``b""`` once the source has ended."""
        while not self._buffer:
            if self._eof:
                return b""
            text = await self._next_text()
            if text is None:
                self._eof = True
                return b""
            self._buffer += text_to_line(text)
            self._buffer += b"\n"
            if self._more_texts is not None:
                for more in self._more_texts(_BATCH_BYTES if max_bytes is None else max_bytes):
                    self._buffer += text_to_line(more)
                    self._buffer += b"\n"
        size = len(self._buffer) if max_bytes is None else max_bytes
        chunk = bytes(self._buffer[:size])
        del self._buffer[:size]
        return chunk

    async def aclose(self) -> None:
        """Drop what is buffered; ``receive_some`` answers ``b""`` from then on."""
        self._eof = True
        self._buffer.clear()
        await trio.lowlevel.checkpoint()


class MessageSendStream(LineSendStream):
    """A ``trio.abc.SendStream`` of NDJSON that sends each line as one text message.

    ``send_text``: ``async (str) -> None``, sends one message; a partial line waits for its end.
    ``send_texts``: optional ``async (list[str]) -> bool``, sends the messages of one ``send_all``
    together instead, and says whether it did so without waiting (see :class:`LineSendStream`).
    ``send_texts_now``: optional ``(list[str]) -> bool``, sends messages at once without waiting
    or yielding, or none of them (``False``); it makes ``send_now`` available (see
    :class:`~acp_trio.transports._lines.LineSendStream`).
    Errors from ``send_text`` come out as ``trio.BrokenResourceError`` (the connection then closes).
    """

    def __init__(
        self,
        send_text: Callable[[str], Awaitable[None]],
        *,
        send_texts: Callable[[list[str]], Awaitable[bool]] | None = None,
        send_texts_now: Callable[[list[str]], bool] | None = None,
    ) -> None:
        self._send_text = send_text
        self._send_texts = send_texts
        self._send_texts_now = send_texts_now
        super().__init__(
            self._send_message,
            "the WebSocket send stream",
            send_lines=None if send_texts is None else self._send_messages,
            send_lines_now=None if send_texts_now is None else self._send_messages_now,
        )

    # (methods, not closures: a server holds one of these per connection)
    async def _send_message(self, line: bytes) -> None:
        await self._send_text(line.decode("utf-8", "replace"))

    async def _send_messages(self, lines: list[bytes]) -> bool:
        assert self._send_texts is not None
        return await self._send_texts([line.decode("utf-8", "replace") for line in lines])

    def _send_messages_now(self, lines: list[bytes]) -> bool:
        assert self._send_texts_now is not None
        return self._send_texts_now([line.decode("utf-8", "replace") for line in lines])


def _reason_text(code: int | None, reason: str | None) -> str:
    if code is None:
        return "the WebSocket closed"
    return f"the WebSocket closed with code {code}" + (f" ({reason})" if reason else "")


_batching: Any = None


def _batching_class() -> Any:
    """trio-websocket's ``WebSocketConnection`` with a reader that queues messages without a wake-up each,
    and a writer that sends a batch of messages in one go, without a task switch when it can.

    The library hands every message to its queue with ``await send``, a scheduler round trip per
    message (about 9 µs here: half the time a stream of small updates takes).  This subclass puts a
    complete message in the queue with ``send_nowait`` while fewer than ``_QUEUED_BYTES`` wait, and
    otherwise waits until the consumer has taken enough (backpressure in bytes, not messages).
    Fragmented messages, the size limit (close 1009) and everything else stay the library's.

    The library's ``send_message`` takes its send lock (a yield, even when free), then sends one
    message with the stream's ``send_all`` (another yield): two scheduler passes a message.
    ``send_texts`` frames a batch of messages with the library's wsproto connection, takes the
    lock without waiting when it is free, and hands the frames to a plain TCP socket with one
    non-blocking ``send()``; only what the socket does not take goes through ``send_all`` (errors
    too, which the library's way then reports: ``ConnectionClosed``).  ``send_texts_now`` does the
    same synchronously, for a connection that sends from the task that produced the messages
    (no task switch to its writer): framed bytes the socket does not take are sent by a task before
    any other frame (the library's own ``_send`` flushes them first too).
    ``None`` if this trio-websocket lacks the hooks (then the library's own reader is used).
    """
    global _batching
    if _batching is not None:
        return _batching or None
    import trio_websocket
    from wsproto.connection import ConnectionState
    from wsproto.events import (
        AcceptConnection,
        BytesMessage,
        CloseConnection,
        Ping,
        Pong,
        RejectConnection,
        RejectData,
        Request,
        TextMessage,
    )
    from wsproto.utilities import RemoteProtocolError

    _OPEN, _CLOSED = ConnectionState.OPEN, ConnectionState.CLOSED

    base: Any = trio_websocket.WebSocketConnection
    hooks = (
        "_handle_message_event",
        "_reader_task",
        "_open_handshake",
        "_send_channel",
        "_recv_channel",
        "_stream",
        "_stream_lock",
        "_wsproto",
        "_close_reason",
        "_abort_web_socket",
        "_send",
        "_close_stream",
        "_initial_request",
        "_reader_running",
        "_receive_buffer_size",
        "_handle_accept_connection_event",
        "_handle_close_connection_event",
        "_handle_ping_event",
        "_handle_pong_event",
        "_handle_reject_connection_event",
        "_handle_reject_data_event",
        "_handle_request_event",
    )
    probe = base.__init__.__code__.co_names
    if not all(hasattr(base, name) or name in probe for name in hooks):
        _batching = False
        return None

    class BatchingWebSocketConnection(base):  # type: ignore[misc]
        _message_size: int
        _message_parts: list[Any]
        _max_message_size: int
        _send_channel: Any
        _recv_channel: Any

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.queued_bytes = 0
            self.room = trio.Event()
            self.room.set()
            # send_texts_now: framed bytes the socket did not take, sent by a task of `nursery`
            # (set by _open_websocket) before any other frame
            self.nursery: trio.Nursery | None = None
            self._rest: bytes | None = None
            # reads lent to the consumer (lend_reads): asked for; lent (the reader task waits on
            # _returned); the scope of the reader task's read (cancelled to lend at once)
            self._lend_wanted = False
            self._lent = False
            self._lent_event = trio.Event()
            self._returned = trio.Event()
            self._read_scope: trio.CancelScope | None = None
            self._inline_full = False
            self._handlers: dict[type, Any] = {}

        async def _handle_message_event(self, event: Any) -> None:
            size = self._message_size + len(event.data)
            if not event.message_finished or size > self._max_message_size:
                await super()._handle_message_event(event)
                return
            message = event.data
            if self._message_parts:
                message = message[:0].join([*self._message_parts, message])
            self._message_size = 0
            self._message_parts = []
            try:
                self._send_channel.send_nowait(message)
            except trio.WouldBlock:
                await self._send_channel.send(message)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return  # the consumer closed the queue (the connection is closing)
            self.queued_bytes += len(message)
            if self.queued_bytes > _QUEUED_BYTES and not self._lent:  # (lent: the reader is the consumer)
                self.room = trio.Event()
                await self.room.wait()

        # -- reads lent to the consumer ----------------------------------------------------------
        # The library's reader task reads the socket, parses the frames and queues each message for
        # the consumer (the ACP connection's reader), which it wakes: a task switch and a scheduler
        # pass per message.  Once the handshake is done the consumer may take the reads over
        # (lend_reads): when it wants a message and none is queued, receive_inline reads the socket
        # and handles the events with the library's handlers in the consumer's task; the reader
        # task waits meanwhile, and reads again once they are returned (at the end of input, a
        # read error, a close, or when the consumer stops reading): the library's ends, unchanged.

        def _event_handlers(self) -> dict[type, Any]:
            return {
                AcceptConnection: self._handle_accept_connection_event,
                BytesMessage: self._handle_message_event,
                CloseConnection: self._handle_close_connection_event,
                Ping: self._handle_ping_event,
                Pong: self._handle_pong_event,
                RejectConnection: self._handle_reject_connection_event,
                RejectData: self._handle_reject_data_event,
                Request: self._handle_request_event,
                TextMessage: self._handle_message_event,
            }

        async def _dispatch_events(self) -> bool:
            """Handle wsproto's pending events as the library's reader does; ``False`` once closed."""
            handlers = self._handlers
            for event in self._wsproto.events():
                kind = type(event)
                handler = handlers.get(kind)
                if handler is None:
                    log.warning("unknown WebSocket event %r", kind)
                    continue
                try:
                    if kind is TextMessage or kind is BytesMessage:
                        await handler(event)  # (queued without waiting while the reads are lent)
                    else:  # a pong, a close: sent whole even by a cancelled borrower
                        with trio.CancelScope(shield=True):
                            await handler(event)
                except trio_websocket.ConnectionClosed:
                    self._reader_running = False
                    return False
            return True

        async def _feed(self, data: bytes) -> None:
            """Hand bytes read to wsproto as the library's reader does (``b""``: the end of input)."""
            if not data:
                if self._wsproto.state != _CLOSED:  # TCP closed before the WebSocket: abnormal closure
                    await self._abort_web_socket()
                self._reader_running = False
                return
            if self._wsproto.state != _CLOSED:
                try:
                    self._wsproto.receive_data(data)
                except RemoteProtocolError as err:
                    with trio.CancelScope(shield=True):  # (the close frame is sent whole)
                        if err.event_hint:
                            await self._send(err.event_hint)
                        await self._close_stream()

        async def _reader_task(self) -> None:
            """The library's reader (the same handlers and ends), whose reads the consumer may take over."""
            self._handlers = self._event_handlers()
            if self._initial_request:
                try:
                    await self._send(self._initial_request)
                except trio_websocket.ConnectionClosed:
                    self._reader_running = False
            async with self._send_channel:
                while self._reader_running:
                    if not await self._dispatch_events():
                        break
                    if self._lend_wanted:
                        self._lent = True
                        self._lent_event.set()
                        await self._returned.wait()
                        self._lent = False
                        continue  # (the consumer may have ended the WebSocket meanwhile)
                    with trio.CancelScope() as scope:
                        self._read_scope = scope
                        try:
                            data = await self._stream.receive_some(self._receive_buffer_size)
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            await self._abort_web_socket()
                            break
                        finally:
                            self._read_scope = None
                    if scope.cancelled_caught:
                        continue  # lend_reads
                    await self._feed(data)
            self._lent_event.set()  # (a lend_reads waiting: nothing to lend)

        async def lend_reads(self) -> bool:
            """Let the calling task (the consumer) read the socket from now on (:meth:`receive_inline`);
            ``False`` when it cannot (TLS, Windows, the WebSocket already closing)."""
            stream = self._stream
            if not isinstance(stream, trio.SocketStream) or sys.platform == "win32" or self._lent_event.is_set():
                return False
            self._lend_wanted = True
            if self._read_scope is not None:
                self._read_scope.cancel()
            await self._lent_event.wait()
            return self._lent

        def return_reads(self) -> None:
            """The library's reader task reads again (idempotent)."""
            self._lend_wanted = False
            self._returned.set()

        async def receive_inline(self) -> bool:
            """While the reads are lent: one read of the socket in the calling task, its events handled
            (messages queued for :meth:`get_message`); ``False`` once the reads went back to the
            reader task (the end of input, a read error, the WebSocket closed), which ends the
            WebSocket as the library does.  Cancellable while it waits for the socket; the frames
            it answers (a pong, a close) are sent whole."""
            fd = self._stream.socket.fileno()
            if fd < 0:
                self.return_reads()
                return False
            if self._inline_full:
                await trio.lowlevel.checkpoint()
            else:
                await trio.lowlevel.wait_readable(fd)
            try:
                data = os.read(self._stream.socket.fileno(), self._receive_buffer_size)  # -1 once closed: EBADF
            except BlockingIOError:
                self._inline_full = False
                return True
            except OSError:  # the reader task reads again, meets it and aborts as the library does
                self.return_reads()
                return False
            if not data:
                self.return_reads()
                return False
            self._inline_full = len(data) == self._receive_buffer_size
            await self._feed(data)
            if not self._reader_running or not await self._dispatch_events() or not self._reader_running:
                self.return_reads()
                return False
            return True

        def next_message_nowait(self) -> str | bytes | None:
            """The next message queued, ``None`` if none; raises ``ConnectionClosed`` once the queue ended."""
            try:
                message: str | bytes = self._recv_channel.receive_nowait()
            except trio.WouldBlock:
                return None
            except (trio.ClosedResourceError, trio.EndOfChannel):
                raise trio_websocket.ConnectionClosed(self._close_reason) from None
            return message

        def taken(self, size: int) -> None:
            self.queued_bytes -= size
            if self.queued_bytes <= _QUEUED_BYTES:
                self.room.set()

        def send_texts_now(self, texts: list[str]) -> bool:
            """Send ``texts`` as text messages at once, without waiting or yielding; ``False`` (none
            sent) when another sender holds the send lock, the WebSocket is not open, or the
            stream is not a plain TCP socket.  What the socket does not take is sent by a task of
            the connection's nursery before any other frame (``_rest``); a send error is left to
            it (it aborts the WebSocket, as the library does)."""
            if self._close_reason or self._rest is not None or self.nursery is None or self._stream_lock.locked():
                return False
            stream = self._stream
            wsproto = self._wsproto
            if not isinstance(stream, trio.SocketStream) or sys.platform == "win32" or wsproto.state != _OPEN:
                return False
            fd = stream.socket.fileno()
            if fd < 0:
                return False
            data = b"".join([wsproto.send(TextMessage(data=text)) for text in texts])
            try:
                sent = os.write(fd, data)
            except OSError:  # would block, or broken: the task sends or reports
                sent = 0
            if sent < len(data):
                self._rest = data[sent:]
                self.nursery.start_soon(self._send_rest)
            return True

        async def _send_rest(self) -> None:
            try:
                async with self._stream_lock:
                    await self._flush_rest()
            except trio_websocket.ConnectionClosed:
                pass  # the WebSocket is aborted: its reader and every sender see it closed

        async def _flush_rest(self) -> None:
            """Send what ``send_texts_now`` left, if anything (the send lock held)."""
            rest, self._rest = self._rest, None
            if rest:
                await self._send_frames(rest)

        async def _send(self, event: Any) -> None:
            if self._rest is not None:  # (the library's own frames: pongs, the close)
                async with self._stream_lock:
                    await self._flush_rest()
            await super()._send(event)

        async def send_texts(self, texts: list[str]) -> bool:
            """Send ``texts`` as text messages, in order; ``True`` when done without waiting (no yield).

            Raises ``trio_websocket.ConnectionClosed`` as ``send_message`` does.
            """
            if self._close_reason:
                raise trio_websocket.ConnectionClosed(self._close_reason)
            wsproto = self._wsproto
            data = b"".join([wsproto.send(TextMessage(data=text)) for text in texts])
            lock = self._stream_lock
            try:
                lock.acquire_nowait()
            except trio.WouldBlock:  # another sender (a pong, the close) is sending: wait for it
                async with lock:
                    await self._flush_rest()
                    await self._send_frames(data)
                return False
            if self._rest is not None:
                try:
                    await self._flush_rest()
                    await self._send_frames(data)
                finally:
                    lock.release()
                return False
            try:
                stream = self._stream
                if isinstance(stream, trio.SocketStream) and sys.platform != "win32":
                    fd = stream.socket.fileno()  # -1 once closed
                    try:
                        sent = os.write(fd, data) if fd >= 0 else 0
                    except OSError:  # would block, or broken: send_all waits, or reports
                        sent = 0
                    if sent == len(data):
                        return True
                    data = data[sent:]
                await self._send_frames(data)
                return False
            finally:
                lock.release()

        async def _send_frames(self, data: bytes) -> None:
            """Send framed bytes, holding the send lock; a broken stream aborts the WebSocket (``ConnectionClosed``)."""
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await self._abort_web_socket()
                raise trio_websocket.ConnectionClosed(self._close_reason) from None

        def more_messages(self, max_bytes: int) -> list[str | bytes]:
            """The messages waiting in the queue, up to ``max_bytes`` (at least one if any), without waiting."""
            out: list[str | bytes] = []
            total = 0
            while total < max_bytes:
                try:
                    message = self._recv_channel.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                out.append(message)
                total += len(message)
            self.taken(total)
            return out

    _batching = BatchingWebSocketConnection
    return _batching


_default_contexts: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
_default_contexts_lock = threading.Lock()


def default_tls_context() -> ssl.SSLContext:
    """The process's shared ``ssl.SSLContext`` for ``wss://`` without ``ssl_context=`` (:func:`connect_websocket`).

    Built on first use with ``ssl.create_default_context()`` (the system's trusted certificates,
    or the file or directory named by ``SSL_CERT_FILE``/``SSL_CERT_DIR``), then kept for the
    process: building one loads the CA bundle, about 40 ms of CPU, which every ``wss://``
    connection paid before.  One context per value of those two environment variables, so a
    changed ``SSL_CERT_FILE`` gets its own.  Nothing here changes a context once built (trio's
    ``SSLStream`` only reads it), so connections share it safely; a lock makes sure one is built
    per key even when trio runs in several threads.  Do not change the returned context (it is
    shared); pass your own as ``ssl_context=`` instead.
    """
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    context = _default_contexts.get(key)
    if context is None:
        with _default_contexts_lock:
            context = _default_contexts.get(key)
            if context is None:
                context = _default_contexts[key] = ssl.create_default_context()
    return context


async def _open_websocket(
    nursery: trio.Nursery,
    url: str,
    ssl_context: ssl.SSLContext | None,
    extra: list[tuple[bytes, bytes]],
    max_bytes: int,
) -> Any:
    """Connect as ``trio_websocket.connect_websocket_url`` does, with :func:`_batching_class`'s reader."""
    import trio_websocket
    from wsproto import ConnectionType, WSConnection

    cls = _batching_class()
    if cls is None:
        if ssl_context is None and url.lower().startswith("wss:"):
            ssl_context = default_tls_context()  # trio-websocket would build one for each connection
        return await trio_websocket.connect_websocket_url(
            nursery, url, ssl_context, extra_headers=extra, max_message_size=max_bytes
        )
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("ws", "wss"):
        raise ValueError(f"a WebSocket URL starts with ws:// or wss://, not {url!r}")
    if parts.hostname is None:
        raise ValueError(f"the WebSocket URL {url!r} names no host")
    secure = parts.scheme == "wss"
    if ssl_context is not None and not secure:
        raise ValueError(f"ssl_context= is for wss:// URLs, not {url!r}")
    port = parts.port or (443 if secure else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    stream: trio.abc.Stream
    if secure:
        context = ssl_context or default_tls_context()
        tls = await trio.open_ssl_over_tcp_stream(parts.hostname, port, ssl_context=context, https_compatible=True)
        try:
            await tls.do_handshake()  # here, so a certificate problem is raised now and named
        except trio.BrokenResourceError as exc:
            await trio.aclose_forcefully(tls)
            cause = exc.__cause__ or exc
            raise ConnectionError(f"TLS handshake failed: {cause}") from cause
        stream = tls
    else:
        stream = await trio.open_tcp_stream(parts.hostname, port)
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    ws = cls(
        stream,
        WSConnection(ConnectionType.CLIENT),
        host=host if port in (80, 443) else f"{host}:{port}",
        path=target,
        client_extra_headers=extra,
        message_queue_size=math.inf,
        max_message_size=max_bytes,
        receive_buffer_size=_BATCH_BYTES,
    )
    ws.nursery = nursery
    nursery.start_soon(ws._reader_task)
    await ws._open_handshake.wait()
    return ws


@asynccontextmanager
async def connect_websocket(
    url: str,
    client: Any,
    *,
    headers: Mapping[str, str] | None = None,
    connect_timeout: float = 30.0,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    close_timeout: float = 2.0,
    cookies: CookieStore | None = None,
    ssl_context: ssl.SSLContext | None = None,
    **options: Any,
) -> AsyncIterator[ClientSideConnection]:
    """Open a WebSocket to an ACP server and yield the :class:`ClientSideConnection` (``async with``).

    ``url``: ``ws://`` or ``wss://`` URL of the server's endpoint (``ws://127.0.0.1:8765/acp``).
    ``client``: the client object or factory (as for :func:`acp_trio.spawn_agent`); then call
    ``conn.agent.initialize(...)`` as over stdio.  ``headers``: extra request headers for the
    upgrade (``{"Authorization": "Bearer ..."}``, ``{"Origin": ...}``, cookies).
    ``connect_timeout``: seconds for the TCP connection and the upgrade.  ``max_message_bytes``:
    the largest message accepted from the server (default 16 MiB; a larger one closes the
    WebSocket with 1009 and the connection).  ``close_timeout``: seconds to wait for the server's
    close handshake when leaving.  ``cookies``: a :class:`~acp_trio.transports.cookies.CookieStore`
    whose cookies go with the upgrade and which keeps those the server sets on its 101 answer (the
    RFD's cookie support, for load-balancer affinity); pass the same store when reconnecting
    (default: a fresh store, discarded with the connection).  ``ssl_context``: for ``wss://``, the
    ``ssl.SSLContext`` that verifies the server (default: the system's trusted certificates, in the
    process's shared context, :func:`default_tls_context`, built once; pass
    ``ssl.create_default_context(cafile=...)`` for a private CA, as ``connect_http``'s ``verify``).
    ``options``: for the connection (``tap``, ``variant``,
    ``eof_grace``, ...).  ``conn.connection_id`` is the server's ``Acp-Connection-Id`` (or ``None``);
    ``conn.websocket`` is the ``trio_websocket.WebSocketConnection``.

    Errors: a refused upgrade or an unreachable server raises :class:`WebSocketConnectError`
    naming the URL and the HTTP status.  When the WebSocket closes, pending and later requests
    raise :class:`~acp_trio.ConnectionClosed` saying the close code and reason.  An exception raised
    in the body comes out as itself.  Leaving the block closes the connection and the WebSocket
    (code 1000).
    """
    import trio_websocket

    store = CookieStore() if cookies is None else cookies
    sent = store.apply(headers or {})
    extra = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in sent.items()]
    opened = False
    try:
        async with owned_nursery() as nursery:
            try:
                with trio.fail_after(connect_timeout):
                    ws = await _open_websocket(nursery, url, ssl_context, extra, max_message_bytes)
            except (OSError, trio.TooSlowError, trio_websocket.HandshakeError, ValueError) as exc:
                raise _connect_error(url, exc, connect_timeout) from exc
            opened = True
            store.store(ws.handshake_headers)
            async with _connected(url, ws, nursery, client, close_timeout, options) as conn:
                yield conn
    except BaseExceptionGroup as group:
        # a refused upgrade fails trio-websocket's reader task, so it comes out of the nursery
        if opened:
            raise
        refused = group.subgroup(lambda exc: isinstance(exc, trio_websocket.HandshakeError))
        if refused is None:
            raise
        first: BaseException = refused
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise _connect_error(url, first, connect_timeout) from None


def _connect_error(url: str, exc: BaseException, connect_timeout: float) -> WebSocketConnectError:
    import trio_websocket

    if isinstance(exc, trio_websocket.ConnectionRejected):
        body = (exc.body or b"")[:1024].decode("utf-8", "replace").strip()
        return WebSocketConnectError(
            url,
            f"the ACP server at {url} refused the WebSocket upgrade: HTTP {exc.status_code}"
            + (f": {body}" if body else ""),
            status=exc.status_code,
            body=body,
        )
    if isinstance(exc, trio.TooSlowError):
        return WebSocketConnectError(url, f"cannot open the ACP WebSocket {url}: no answer within {connect_timeout} s")
    return WebSocketConnectError(url, f"cannot open the ACP WebSocket {url}: {exc!r}")


@asynccontextmanager
async def _connected(
    url: str, ws: Any, nursery: trio.Nursery, client: Any, close_timeout: float, options: dict[str, Any]
) -> AsyncIterator[ClientSideConnection]:
    import trio_websocket

    closed: list[tuple[int | None, str | None]] = []
    # the connection's reader reads the socket itself (no task switch a message): see _batching_class
    lent = await ws.lend_reads() if hasattr(ws, "lend_reads") else False

    async def next_text() -> str | None:
        nonlocal lent
        while True:
            try:
                message = ws.next_message_nowait() if lent else None
                if message is None:
                    if lent:
                        if not await ws.receive_inline():
                            lent = False  # the reader task has the reads back, and ends the WebSocket
                        continue
                    message = await ws.get_message()
            except trio_websocket.ConnectionClosed as exc:
                closed.append((exc.reason.code, exc.reason.reason) if exc.reason else (None, None))
                return None
            taken = getattr(ws, "taken", None)
            if taken is not None:
                taken(len(message))
            if isinstance(message, str):
                return message
            log.debug("ignoring a binary WebSocket frame from %s (%d bytes)", url, len(message))

    async def send_text(text: str) -> None:
        try:
            await ws.send_message(text)
        except trio_websocket.ConnectionClosed as exc:
            raise trio.BrokenResourceError(f"the WebSocket to {url} is closed") from exc

    async def send_texts(texts: list[str]) -> bool:
        try:
            done: bool = await ws.send_texts(texts)
        except trio_websocket.ConnectionClosed as exc:
            raise trio.BrokenResourceError(f"the WebSocket to {url} is closed") from exc
        return done

    async def closing_error(reason: str) -> ConnectionClosed:
        code, text = closed[0] if closed else (ws.closed.code, ws.closed.reason) if ws.closed else (None, None)
        return ConnectionClosed(f"{reason}; {_reason_text(code, text)} ({url})")

    def more_texts(max_bytes: int) -> list[str]:
        return [text for text in ws.more_messages(max_bytes) if isinstance(text, str)]

    batching = hasattr(ws, "more_messages")
    receive = MessageReceiveStream(next_text, more_texts if batching else None)
    send = MessageSendStream(
        send_text,
        send_texts=send_texts if batching else None,
        send_texts_now=ws.send_texts_now if batching else None,
    )
    conn = ClientSideConnection(client, send, receive, **options)
    conn.connection.closing_error = closing_error
    connection_id = None
    for name, value in ws.handshake_headers:
        if name.decode("latin-1").lower() == HEADER_CONNECTION_ID.lower():
            connection_id = value.decode("latin-1")
    conn.connection_id = connection_id  # type: ignore[attr-defined]
    conn.websocket = ws  # type: ignore[attr-defined]
    try:
        async with conn:
            yield conn
    finally:
        with trio.CancelScope(shield=True):
            await conn.aclose()
            if hasattr(ws, "return_reads"):
                ws.return_reads()  # the reader task reads the close handshake
            with trio.move_on_after(close_timeout):
                await ws.aclose(CLOSE_NORMAL)
            nursery.cancel_scope.cancel()


__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "HEADER_CONNECTION_ID",
    "MessageReceiveStream",
    "MessageSendStream",
    "WebSocketConnectError",
    "connect_websocket",
    "default_tls_context",
    "text_to_line",
]

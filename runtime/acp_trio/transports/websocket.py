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
import ssl
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
CLOSE_POLICY_VIOLATION = 1008
"""Close code for a broken limit other than the message size (an output stall), as the TypeScript server uses."""
CLOSE_MESSAGE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011


class WebSocketConnectError(ConnectionError):
    """The WebSocket to an ACP server could not be opened.

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
    data = text.encode("utf-8", "surrogatepass")
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
    """

    def __init__(self, next_text: Callable[[], Awaitable[str | None]]) -> None:
        self._next_text = next_text
        self._buffer = bytearray()
        self._eof = False

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while not self._buffer:
            if self._eof:
                return b""
            text = await self._next_text()
            if text is None:
                self._eof = True
                return b""
            self._buffer += text_to_line(text)
            self._buffer += b"\n"
        size = len(self._buffer) if max_bytes is None else max_bytes
        chunk = bytes(self._buffer[:size])
        del self._buffer[:size]
        return chunk

    async def aclose(self) -> None:
        self._eof = True
        self._buffer.clear()
        await trio.lowlevel.checkpoint()


class MessageSendStream(LineSendStream):
    """A ``trio.abc.SendStream`` of NDJSON that sends each line as one text message.

    ``send_text``: ``async (str) -> None``, sends one message; a partial line waits for its end.
    Errors from ``send_text`` come out as ``trio.BrokenResourceError`` (the connection then closes).
    """

    def __init__(self, send_text: Callable[[str], Awaitable[None]]) -> None:
        async def send_line(line: bytes) -> None:
            await send_text(line.decode("utf-8", "replace"))

        super().__init__(send_line, "the WebSocket send stream")


def _reason_text(code: int | None, reason: str | None) -> str:
    if code is None:
        return "the WebSocket closed"
    return f"the WebSocket closed with code {code}" + (f" ({reason})" if reason else "")


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
    ``ssl.SSLContext`` that verifies the server (default: the system's trusted certificates; pass
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
                    ws = await trio_websocket.connect_websocket_url(
                        nursery, url, ssl_context, extra_headers=extra, max_message_size=max_message_bytes
                    )
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

    async def next_text() -> str | None:
        while True:
            try:
                message = await ws.get_message()
            except trio_websocket.ConnectionClosed as exc:
                closed.append((exc.reason.code, exc.reason.reason) if exc.reason else (None, None))
                return None
            if isinstance(message, str):
                return message
            log.debug("ignoring a binary WebSocket frame from %s (%d bytes)", url, len(message))

    async def send_text(text: str) -> None:
        try:
            await ws.send_message(text)
        except trio_websocket.ConnectionClosed as exc:
            raise trio.BrokenResourceError(f"the WebSocket to {url} is closed") from exc

    async def closing_error(reason: str) -> ConnectionClosed:
        code, text = closed[0] if closed else (ws.closed.code, ws.closed.reason) if ws.closed else (None, None)
        return ConnectionClosed(f"{reason}; {_reason_text(code, text)} ({url})")

    conn = ClientSideConnection(client, MessageSendStream(send_text), MessageReceiveStream(next_text), **options)
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
    "text_to_line",
]

"""The remote transport, server side: an ASGI application serving ACP agents on one ``/acp`` endpoint.

Spec: the RFD ``docs/rfds/streamable-http-websocket-transport.mdx`` ("Unified Endpoint Routing",
"WebSocket Request Flow").  :class:`AcpApp` routes ``/acp`` as the RFD does:

- ``GET`` with ``Upgrade: websocket``: a new ACP connection.  The 101 answer names it in the
  ``Acp-Connection-Id`` header (an unguessable ``secrets.token_urlsafe`` id); every text frame is
  one JSON-RPC message, binary frames are ignored; the client sends ``initialize`` first.  One
  agent object per accepted WebSocket (the factory is called with its connection), many at once.
- ``POST``, ``GET`` with ``Accept: text/event-stream``, ``DELETE`` (Streamable HTTP): answered
  ``501`` for now; use the WebSocket.

Contract: each WebSocket is adapted to a pair of trio byte streams of NDJSON
(:class:`~acp_trio.transports.websocket.MessageReceiveStream` /
:class:`~acp_trio.transports.websocket.MessageSendStream`) and handed to one
:class:`~acp_trio.AgentSideConnection`, so every rule the connection enforces holds unchanged.
Nothing is shared between connections but the application object: each has its own agent.

Security defaults: :func:`serve` binds ``127.0.0.1``.  An optional bearer ``token`` guards every
route (``401`` without ``Authorization: Bearer <token>``).  A WebSocket upgrade carrying an
``Origin`` header (a browser's) is refused ``403`` unless that origin is a loopback one
(``localhost``, ``127.0.0.1``, ``[::1]``, any port) or listed in ``allowed_origins``: checking
against the request's own ``Host`` would not stop DNS rebinding, where the attacker's name is in
both.  A request without ``Origin`` (not a browser) is let through.

Limits (close codes as the TypeScript SDK's server and RFC 6455): a message over
``max_message_bytes`` closes the WebSocket with ``1009``; a client that takes nothing for
``output_stall_timeout`` seconds while the agent has output for it is given up on: its ACP
connection (and agent) is closed at once, and the WebSocket is closed with ``1008`` as soon as the
server can write again (hypercorn does not let an application abort a write in progress).  An
agent factory (or the runtime) that fails ends that connection only, closed with ``1011``.

Serve it with :func:`serve` (hypercorn's trio worker) or any ASGI server running trio.  Needs the
``remote`` extra (``pip install acp-trio[remote]``).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, cast
from urllib.parse import urlsplit

import trio

from .._roles import AgentSideConnection
from .websocket import (
    CLOSE_INTERNAL_ERROR,
    CLOSE_MESSAGE_TOO_BIG,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    DEFAULT_MAX_MESSAGE_BYTES,
    HEADER_CONNECTION_ID,
    MessageReceiveStream,
    MessageSendStream,
)

log = logging.getLogger("acp_trio.asgi")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_OUTPUT_STALL_TIMEOUT = 60.0
"""Seconds a client may take nothing while output waits for it (the TypeScript SDK's default)."""
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
STREAMABLE_HTTP_NOT_IMPLEMENTED = (
    "Streamable HTTP: not implemented yet. This server speaks ACP over WebSocket: GET /acp with Upgrade: websocket.\n"
)


class AcpApp:
    """An ASGI application serving an ACP agent to every client that connects to ``path``.

    ``agent``: a factory called with each new :class:`~acp_trio.AgentSideConnection`, returning
    that connection's agent (a class works; a ``{variant: factory}`` mapping as for the connection
    too).  Pass a factory, not an agent object: an object would be shared by every connection.
    ``path``: the endpoint (default ``/acp``).  ``token``: when set, every request must carry
    ``Authorization: Bearer <token>`` (else ``401``).  ``allowed_origins``: browser origins
    allowed to open a WebSocket besides the loopback ones (exact ``scheme://host[:port]`` strings;
    ``"*"`` allows any).  ``max_message_bytes``: the largest message a client may send (default
    16 MiB; larger closes with ``1009``).  ``output_stall_timeout``: seconds (default 60).
    ``connection_options``: for each connection (``tap``, ``eof_grace``, ``variant``, ...).
    ``serve_streams``: instead of ``agent``, ``async (connection_id, to_client, from_client)``
    serving each connection's NDJSON byte streams itself, returning when it is done (the bridge,
    :mod:`acp_trio.bridge`, runs a stdio agent process on them).

    ``active_connections`` counts the connections being served; ``connection_ids`` are theirs;
    :meth:`wait_idle` waits until there are none.
    """

    def __init__(
        self,
        agent: Any = None,
        *,
        serve_streams: Callable[[str, trio.abc.SendStream, trio.abc.ReceiveStream], Awaitable[None]] | None = None,
        path: str = "/acp",
        token: str | None = None,
        allowed_origins: Iterable[str] = (),
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        output_stall_timeout: float = DEFAULT_OUTPUT_STALL_TIMEOUT,
        **connection_options: Any,
    ) -> None:
        if max_message_bytes <= 0:
            raise ValueError(f"max_message_bytes must be positive, got {max_message_bytes}")
        if output_stall_timeout <= 0:
            raise ValueError(f"output_stall_timeout must be positive seconds, got {output_stall_timeout}")
        if (agent is None) == (serve_streams is None):
            raise TypeError("give AcpApp an agent factory or serve_streams=, one of the two")
        self.agent = agent
        self.serve_streams = serve_streams
        self.path = path
        self.token = token
        self.allowed_origins = frozenset(origin.rstrip("/").lower() for origin in allowed_origins)
        self.max_message_bytes = max_message_bytes
        self.output_stall_timeout = output_stall_timeout
        connection_options.setdefault("max_message_size", max_message_bytes + 1)
        self.connection_options = connection_options
        self.connection_ids: set[str] = set()
        self._ended = trio.lowlevel.ParkingLot()

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
            await self._http(scope, send)
        elif kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    # -- checks ------------------------------------------------------------------------------------
    def _authorized(self, scope: Scope) -> bool:
        if self.token is None:
            return True
        given = _header(scope, b"authorization") or b""
        return hmac.compare_digest(given, b"Bearer " + self.token.encode())

    def origin_allowed(self, origin: str | None) -> bool:
        """Whether a WebSocket upgrade with this ``Origin`` header is accepted (see the module docstring)."""
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

    def _refusal(self, scope: Scope) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        if scope.get("path") != self.path:
            return 404, f"Not found: ACP is served on {self.path}\n", []
        if not self._authorized(scope):
            return 401, "Unauthorized: send Authorization: Bearer <token>\n", [(b"www-authenticate", b"Bearer")]
        return None

    # -- HTTP --------------------------------------------------------------------------------------
    async def _http(self, scope: Scope, send: Send) -> None:
        refusal = self._refusal(scope)
        if refusal is None:
            method = scope.get("method", "")
            if method in ("POST", "GET", "DELETE"):
                refusal = 501, STREAMABLE_HTTP_NOT_IMPLEMENTED, []
            else:
                refusal = 405, f"Method {method} not allowed on {self.path}\n", [(b"allow", b"GET, POST, DELETE")]
        status, body, headers = refusal
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), *headers],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})

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
        refusal = self._refusal(scope)
        if refusal is None:
            origin = _header(scope, b"origin")
            if not self.origin_allowed(None if origin is None else origin.decode("latin-1")):
                shown = origin.decode("latin-1", "replace") if origin else ""
                refusal = 403, f"Forbidden: Origin {shown!r} is not allowed\n", []
        if refusal is not None:
            await self._reject(scope, send, *refusal)
            return
        connection_id = secrets.token_urlsafe(24)
        await send(
            {"type": "websocket.accept", "headers": [(HEADER_CONNECTION_ID.lower().encode(), connection_id.encode())]}
        )
        self.connection_ids.add(connection_id)
        try:
            await self._run(connection_id, receive, send)
        except Exception:  # the agent factory or the runtime failed: this connection ends, the server goes on
            log.exception("ACP connection %s failed", connection_id)
            with contextlib.suppress(Exception):
                await send({"type": "websocket.close", "code": CLOSE_INTERNAL_ERROR, "reason": "internal error"})
        finally:
            self.connection_ids.discard(connection_id)
            self._ended.unpark_all()

    async def _run(self, connection_id: str, receive: Receive, send: Send) -> None:
        close: list[tuple[int, str]] = []  # why this side closes, first reason wins
        disconnected = False
        limit = self.max_message_bytes
        stall = self.output_stall_timeout
        out_send, out_receive = trio.open_memory_channel[str](0)

        async def next_text() -> str | None:
            nonlocal disconnected
            while True:
                message = await receive()
                kind = message["type"]
                if kind == "websocket.disconnect":
                    disconnected = True
                    return None
                if kind != "websocket.receive":
                    continue
                text = message.get("text")
                if text is None:
                    log.debug("ACP connection %s: ignoring a binary frame", connection_id)
                    continue
                nbytes = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
                if nbytes > limit:
                    reason = f"message of {nbytes} bytes exceeds the limit of {limit} bytes"
                    log.warning("ACP connection %s: %s", connection_id, reason)
                    close.append((CLOSE_MESSAGE_TOO_BIG, reason))
                    return None
                return str(text)

        async def send_text(text: str) -> None:
            with trio.move_on_after(stall) as scope:
                await out_send.send(text)
            if scope.cancelled_caught:
                reason = f"output stalled: the client took nothing for {stall} s"
                log.warning("ACP connection %s: %s", connection_id, reason)
                close.append((CLOSE_POLICY_VIOLATION, reason))
                raise trio.BrokenResourceError(reason)

        async def pump() -> None:
            nonlocal disconnected
            async with out_receive:
                async for text in out_receive:
                    try:
                        await send({"type": "websocket.send", "text": text})
                    except Exception as exc:  # the server lost the socket
                        log.debug("ACP connection %s: send failed: %r", connection_id, exc)
                        disconnected = True
                        return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump)
            to_client, from_client = MessageSendStream(send_text), MessageReceiveStream(next_text)
            try:
                if self.serve_streams is not None:  # the bridge: bytes to a process, verbatim
                    await self.serve_streams(connection_id, to_client, from_client)
                    return
                conn = AgentSideConnection(
                    self.agent, to_client, from_client, name=f"acp-ws-{connection_id[:8]}", **self.connection_options
                )
                conn.connection_id = connection_id  # type: ignore[attr-defined]
                async with conn:
                    await conn.wait_closed()
            finally:
                # the pump writes what it holds, then ends (a stalled client keeps it until it reads or leaves)
                out_send.close()
        if not disconnected:
            code, reason = close[0] if close else (CLOSE_NORMAL, "")
            try:
                await send({"type": "websocket.close", "code": code, "reason": reason[:120]})
            except Exception as exc:  # pragma: no cover - the socket went away meanwhile
                log.debug("ACP connection %s: close failed: %r", connection_id, exc)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return cast(bytes, value)
    return None


async def serve(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    certfile: str | None = None,
    keyfile: str | None = None,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve an ASGI ``app`` (an :class:`AcpApp`) with hypercorn's trio worker until cancelled.

    ``host``/``port``: where to listen (default ``127.0.0.1:8765``, loopback only; ``port=0``
    picks a free port).  ``certfile``/``keyfile``: PEM files for TLS (``wss://``).
    ``shutdown_trigger``: ``async () -> None`` whose return shuts the server down gracefully.
    ``task_status``: ``started`` with the bound URLs (``["http://127.0.0.1:41234"]``), for
    ``nursery.start``.  An :class:`AcpApp`'s ``max_message_bytes`` also caps hypercorn's buffer.
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    if certfile is not None:
        config.certfile = certfile
        config.keyfile = keyfile
    if isinstance(app, AcpApp):
        config.websocket_max_message_size = app.max_message_bytes
    await hypercorn_serve(app, config, shutdown_trigger=shutdown_trigger, task_status=task_status)


__all__ = ["DEFAULT_OUTPUT_STALL_TIMEOUT", "AcpApp", "serve"]

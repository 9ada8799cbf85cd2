"""MCP over ACP (unstable): MCP servers that live in the client and travel over the ACP connection.

Needs the extra ``acp-trio[mcp]`` (the official MCP Python SDK) and an unstable schema variant
(``acp_schema.v1_unstable`` or ``acp_schema.v2_unstable``): the stable schemas have neither the
``acp`` transport nor ``mcp/message``.

Sources: the pinned unstable schemas, ``$defs`` ``McpServerAcp`` (``{"type": "acp", "name",
"serverId"}``), ``MessageMcpRequest``, ``MessageMcpResponse``, ``McpError``,
``MessageMcpNotification`` and the capability ``McpCapabilities.acp`` (v1:
``agentCapabilities.mcpCapabilities.acp: true``; v2: ``capabilities.session.mcp.acp: {}``); the RFD
``docs/rfds/mcp-over-acp.mdx`` (its ``mcp/connect``/``mcp/disconnect`` are gone from the pinned
schema: every ``mcp/message`` request now carries one MCP request on its own).  Where the schema is
silent (the inner MCP revision, the outer error codes) this module behaves as the official
TypeScript SDK 2.4.0 does, so the two interoperate (``tests/test_interop_mcp.py``).

The wire, in short:

- the client (the *provider*) declares a server in ``session/new`` (``load``, ``resume``, ``fork``)
  as ``{"type": "acp", "name": ..., "serverId": ...}``, only to an agent that advertises the
  capability above (enforced: :class:`~acp_trio.CapabilityError`, nothing sent);
- the agent (the *consumer*) sends each MCP request as an ``mcp/message`` request ``{serverId,
  requestId, method, params}``: ``requestId`` is a string the agent picks, unique among its active
  requests to that server; ``method``/``params`` are the inner MCP request's.  The answer is a
  carrier: ``{"result": <the MCP result>}`` or ``{"error": <the MCP error object>}``.  Outer ACP
  errors are for the binding itself: -32602 (a malformed envelope, or a ``requestId`` already
  active), -32800 (cancelled), -33000 (too many active requests), -33001 (no server with that
  ``serverId`` on this connection), -33002 (the server failed without an MCP answer);
- the inner messages speak MCP revision 2026-07-28, the stateless one: no ``initialize``
  handshake (the agent's ``mcp.ClientSession`` uses ``server/discover``), every request carries
  ``_meta`` ``io.modelcontextprotocol/protocolVersion`` and ``.../clientCapabilities``, and the
  server sends no requests of its own;
- MCP notifications that belong to a request (progress, log messages) go from the client to the
  agent as ``mcp/message`` notifications naming its ``serverId`` and ``requestId``, before the
  request's answer; notifications that belong to no request have no carrier and are dropped;
- cancelling an MCP request cancels its ``mcp/message`` request (``$/cancel_request``); the
  client cancels the server's handler (MCP ``notifications/cancelled`` inside).

Client side: :func:`serve_mcp_server` serves an MCP SDK server (``mcp.server.lowlevel.Server`` or
``mcp.server.mcpserver.MCPServer``: tools, resources, prompts) on a
:class:`~acp_trio.ClientSideConnection` and returns an :class:`McpServerRegistration` whose
``declaration`` goes into the session's ``mcp_servers``::

    from mcp.server.mcpserver import MCPServer
    from acp_schema import v1_unstable as acp
    from acp_trio.mcp_over_acp import serve_mcp_server

    tools = MCPServer("project-tools")

    @tools.tool()
    def add(a: int, b: int) -> int:
        return a + b

    # after initialize, when conn.agent_capabilities has mcpCapabilities.acp
    registration = serve_mcp_server(conn, tools, name="project-tools")
    await conn.agent.session_new(acp.NewSessionRequest(cwd=cwd, mcp_servers=[registration.declaration]))

(:meth:`acp_trio.StandardClient.serve_mcp_server` does the same for a standard client.)  The
server runs over the MCP SDK's own stream transport (``Server.run`` on memory object streams of
``SessionMessage``) in a background task of the connection, until the registration is closed or
the connection closes.

Agent side: :func:`acp_trio.mcp.open_mcp_servers` connects ``acp`` servers like the others (the
agent must advertise the capability); :func:`open_acp_transport` is the transport underneath: the
read and write streams of an ``mcp.ClientSession`` whose messages travel as ``mcp/message``.

Deliberately not here: the RFD's bridging of ``acp`` servers to stdio or HTTP for agents that
lack the capability, and the MCP 2025 handshake over this transport (the TypeScript SDK refuses it
too).
"""

from __future__ import annotations

import itertools
import logging
import math
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Protocol

import anyio
import mcp.types as mcp_types
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request
from mcp.shared.message import SessionMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ._capabilities import CapabilityError
from ._connection import ConnectionClosed, Route
from ._converter import DecodeError
from ._core import INTERNAL_ERROR, INVALID_PARAMS, REQUEST_CANCELLED, RequestError
from ._nursery import owned_nursery
from ._spec import UNSET, MethodSpec

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from ._connection import Connection

__all__ = [
    "BACKEND_FAILED",
    "METHOD",
    "RESOURCE_LIMIT_EXCEEDED",
    "SERVER_UNAVAILABLE",
    "McpServerRegistration",
    "open_acp_transport",
    "serve_mcp_server",
]

log = logging.getLogger("acp_trio.mcp_over_acp")

METHOD: Final = "mcp/message"
"""The ACP method: a request from agent to client, a notification from client to agent."""
RESOURCE_LIMIT_EXCEEDED: Final = -33000
"""Outer error: the server has as many active requests as it accepts (``max_active_requests``)."""
SERVER_UNAVAILABLE: Final = -33001
"""Outer error: no MCP server with that ``serverId`` is registered on this connection."""
BACKEND_FAILED: Final = -33002
"""Outer error: the MCP server (or its transport) failed without an MCP answer."""

_NOTIFICATION_BUFFER: Final = 256  # notifications waiting for an mcp.ClientSession to read them


class _Peer(Protocol):
    """What both sides need of a typed connection (an ``AgentSideConnection`` or ``ClientSideConnection``)."""

    variant: ModuleType
    protocol_version: int
    connection: Connection

    async def send_request(self, spec: MethodSpec, params: Any, *, timeout: float | None = None) -> Any: ...

    async def send_notification(self, spec: MethodSpec, params: Any) -> None: ...

    def start_soon(self, async_fn: Callable[..., Awaitable[object]], *args: Any, name: str | None = None) -> None: ...


def _spec(conn: _Peer, table: str, peer: str) -> MethodSpec:
    """The variant's ``mcp/message`` request or notification spec, or a :class:`CapabilityError` saying why not."""
    spec: MethodSpec | None = getattr(conn.variant, table).get(METHOD)
    if spec is None:
        raise CapabilityError(
            METHOD,
            f"protocol version {conn.protocol_version}",
            f"{conn.variant.__name__} has no {METHOD}: MCP over ACP needs an unstable variant "
            "(acp_schema.v1_unstable or acp_schema.v2_unstable)",
            peer=peer,
            text=f"{METHOD}: not part of the schema variant in use",
        )
    return spec


def _install(conn: _Peer, route: Route) -> Route | None:
    """Put ``route`` on the connection; return the route it replaces (the handler's own), if any."""
    routes = conn.connection.routes
    previous = routes.get(METHOD)
    routes[METHOD] = route
    return previous if previous is not None and previous is not route and previous.kind == route.kind else None


# -- client side: the provider --------------------------------------------------------------------------------


class McpServerRegistration:
    """One MCP server served to the agent over a client connection (see :func:`serve_mcp_server`).

    ``name``: the server's name in declarations.  ``server_id``: its ``serverId``, unique on the
    connection.  ``declaration``: the ``AcpMcpServer`` (of the connection's variant) to put into a
    session's ``mcp_servers``; the same declaration may go into several sessions.  ``closed``: True
    once :meth:`aclose` ran or the connection closed.  ``active_requests``: how many ``mcp/message``
    requests are being answered now.
    """

    def __init__(self, provider: _Provider, server: Any, name: str, server_id: str, max_active_requests: int) -> None:
        self.name = name
        self.server_id = server_id
        self._provider = provider
        self._server = server
        self._max_active = max_active_requests
        # MCP requests and cancellations we write; at most max_active_requests of each are ever queued
        self._to_server, self._server_input = anyio.create_memory_object_stream[SessionMessage | Exception](math.inf)
        self._server_output, self._from_server = anyio.create_memory_object_stream[SessionMessage](0)
        self._ids = itertools.count(1)
        self._pending: dict[Any, _PendingCall] = {}  # by the inner JSON-RPC id (an int)
        self._active: set[str] = set()  # the requestIds being answered
        self._closing = False
        self._disposed = False  # closed by aclose(): what was pending is answered -32800, not -33002
        self._done = trio.Event()

    @property
    def declaration(self) -> Any:
        """The ``{"type": "acp", "name", "serverId"}`` entry for ``mcp_servers`` (typed ``AcpMcpServer``)."""
        _spec(self._provider.conn, "REQUESTS", "client")  # raises when the variant has no MCP over ACP
        return self._provider.conn.variant.AcpMcpServer(name=self.name, server_id=self.server_id)

    @property
    def closed(self) -> bool:
        return self._closing

    @property
    def active_requests(self) -> int:
        return len(self._active)

    def __repr__(self) -> str:
        state = "closed" if self._closing else f"{len(self._active)} active"
        return f"<McpServerRegistration {self.name!r} serverId={self.server_id!r} {state}>"

    async def aclose(self) -> None:
        """Stop serving: later requests for this ``serverId`` answer -33001, the active ones -32800.

        Waits until the server's task ended (the MCP SDK bounds its own cleanup).  Idempotent.
        """
        if not self._closing:
            self._disposed = True
        self._stop()
        await self._done.wait()

    def _stop(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._provider.servers.pop(self.server_id, None)
        for local_id, pending in self._pending.items():  # answered now, whatever the server does at its end
            if not pending.done.is_set():
                self._cancel_inner(local_id)
                pending.done.set()
        self._to_server.close()  # end of input: Server.run returns

    def _cancel_inner(self, local_id: int) -> None:
        cancel = mcp_types.JSONRPCNotification(
            jsonrpc="2.0", method="notifications/cancelled", params={"requestId": local_id}
        )
        try:
            self._to_server.send_nowait(SessionMessage(cancel))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    # -- the server's task ---------------------------------------------------------------------------
    async def _run(self) -> None:
        server = _lowlevel(self._server)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_answers)
                # the MCP SDK's stream entry: one connection, the era chosen by the first request
                # (always 2026-07-28 here: _serve() refuses everything else before it gets this far)
                await server.run(self._server_input, self._server_output, server.create_initialization_options())
        except Exception:
            log.exception("MCP server %r (serverId %r) failed", self.name, self.server_id)
        finally:
            self._stop()
            for pending in self._pending.values():
                pending.done.set()  # no message: answered with an outer error
            self._done.set()
            log.debug("MCP server %r (serverId %r) stopped", self.name, self.server_id)

    async def _read_answers(self) -> None:
        async with self._from_server:
            async for item in self._from_server:
                message = item.message
                if isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError):
                    answered = self._pending.get(message.id) if message.id is not None else None
                    if answered is not None and not answered.done.is_set():
                        answered.message = message
                        answered.done.set()
                elif isinstance(message, mcp_types.JSONRPCNotification):
                    related = getattr(item.metadata, "related_request_id", None)
                    owner = self._pending.get(related) if isinstance(related, int) else None
                    if owner is None or owner.done.is_set():
                        log.debug("MCP server %r: %s belongs to no active request: dropped", self.name, message.method)
                        continue
                    await self._provider.notify(self.server_id, owner.request_id, message.method, message.params)
                else:  # a request: servers of the 2026-07-28 revision send none, and ACP carries none back
                    error = mcp_types.ErrorData(
                        code=mcp_types.METHOD_NOT_FOUND, message="MCP over ACP carries no server-to-client requests"
                    )
                    reply = mcp_types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
                    try:
                        self._to_server.send_nowait(SessionMessage(reply))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        pass

    # -- one mcp/message request -----------------------------------------------------------------------
    async def _serve(self, params: Any) -> Any:
        variant = self._provider.conn.variant
        request_id: str = params.request_id
        if request_id in self._active:
            raise RequestError.invalid_params(
                {"serverId": self.server_id, "requestId": request_id, "detail": "this requestId is already active"}
            )
        if len(self._active) >= self._max_active:
            raise RequestError(
                RESOURCE_LIMIT_EXCEEDED,
                "MCP over ACP: too many active requests",
                {"serverId": self.server_id, "maxActiveRequests": self._max_active},
            )
        inner = params.params if isinstance(params.params, dict) else None  # UNSET and null: no params
        refusal = _refuse_inner(params.method, inner)
        if refusal is not None:
            return variant.ErrorMessageMcpResponse(error=variant.McpError(**refusal))
        local_id = next(self._ids)
        pending = self._pending[local_id] = _PendingCall(request_id)
        self._active.add(request_id)
        try:
            request = mcp_types.JSONRPCRequest(jsonrpc="2.0", id=local_id, method=params.method, params=inner)
            try:
                self._to_server.send_nowait(SessionMessage(request))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pending.done.set()
            await pending.done.wait()
        except BaseException:
            if not pending.done.is_set():  # cancelled ($/cancel_request, or the connection closing)
                self._cancel_inner(local_id)
            raise
        finally:
            del self._pending[local_id]
            self._active.discard(request_id)
        answer = pending.message
        if answer is None:
            if self._disposed:
                raise RequestError(REQUEST_CANCELLED, "Request cancelled", {"detail": "the MCP server was closed"})
            raise RequestError(BACKEND_FAILED, "MCP server stopped before answering", {"serverId": self.server_id})
        if isinstance(answer, mcp_types.JSONRPCResponse):
            return variant.ResultMessageMcpResponse(result=answer.result)
        error = answer.error
        return variant.ErrorMessageMcpResponse(
            error=variant.McpError(
                code=error.code, message=error.message, data=UNSET if error.data is None else error.data
            )
        )


class _PendingCall:
    __slots__ = ("done", "message", "request_id")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.done = trio.Event()
        self.message: mcp_types.JSONRPCResponse | mcp_types.JSONRPCError | None = None


def _refuse_inner(method: str, params: dict[str, Any] | None) -> dict[str, Any] | None:
    """The inner MCP error for a request this binding does not pass to the server (as ``McpError`` fields), or None.

    MCP 2026-07-28 only: the ``initialize`` handshake is refused (-32022 naming the supported
    revisions), and the request's ``_meta`` must carry the per-request protocol version and client
    capabilities (the MCP SDK's own ladder, ``classify_inbound_request``: -32602 or -32022).
    """
    if method == "initialize":
        requested = params.get("protocolVersion") if params is not None else None
        data: dict[str, Any] = {"supported": list(MODERN_PROTOCOL_VERSIONS)}
        if isinstance(requested, str):
            data["requested"] = requested
        return {
            "code": mcp_types.UNSUPPORTED_PROTOCOL_VERSION,
            "message": "MCP over ACP speaks MCP 2026-07-28: no initialize handshake (use server/discover)",
            "data": data,
        }
    verdict = classify_inbound_request({"method": method, "params": params})
    if isinstance(verdict, InboundLadderRejection):
        refusal: dict[str, Any] = {"code": verdict.code, "message": verdict.message}
        if verdict.data is not None:
            refusal["data"] = verdict.data
        return refusal
    return None


class _Provider:
    """The MCP servers served on one client connection, and its ``mcp/message`` request route."""

    def __init__(self, conn: _Peer) -> None:
        self.conn = conn
        self.servers: dict[str, McpServerRegistration] = {}
        self.used_ids: set[str] = set()
        self._notification: MethodSpec | None = None
        self._route: Route | None = None
        self._previous: Route | None = None

    def install(self) -> None:
        """Route ``mcp/message`` requests here (again, if a version negotiation replaced the routes)."""
        spec = _spec(self.conn, "REQUESTS", "client")
        self._notification = _spec(self.conn, "NOTIFICATIONS", "client")
        if self._route is not None and self.conn.connection.routes.get(METHOD) is self._route:
            return
        self._route = Route(METHOD, "request", self.handle, params_type=spec.params_type, result_type=spec.result_type)
        self._previous = _install(self.conn, self._route)

    async def handle(self, params: Any) -> Any:
        server = self.servers.get(params.server_id)
        if server is None:
            if self._previous is not None:  # the client object's own mcp_message handler
                return await self._previous.handler(params)
            raise RequestError(
                SERVER_UNAVAILABLE, "MCP server registration unavailable", {"serverId": params.server_id}
            )
        return await server._serve(params)

    async def notify(self, server_id: str, request_id: str, method: str, params: dict[str, Any] | None) -> None:
        spec = self._notification
        assert spec is not None
        carrier = spec.params_type(server_id=server_id, request_id=request_id, method=method)
        if params is not None:
            carrier.params = params
        try:
            await self.conn.send_notification(spec, carrier)
        except CapabilityError as exc:  # the agent did not advertise the acp transport: it gets no notifications
            log.debug("dropped %s for MCP request %r: %s", method, request_id, exc)
        except ConnectionClosed:
            pass


_providers: weakref.WeakKeyDictionary[Any, _Provider] = weakref.WeakKeyDictionary()


def serve_mcp_server(
    conn: Any,
    server: Server[Any] | Any,
    *,
    name: str,
    server_id: str | None = None,
    max_active_requests: int = 64,
) -> McpServerRegistration:
    """Serve the MCP SDK ``server`` to the agent of ``conn`` over ``mcp/message``; return its registration.

    ``conn``: a running :class:`~acp_trio.ClientSideConnection` of an unstable variant, after
    ``initialize`` (a version negotiation after this call would drop the route).  ``server``: an
    ``mcp.server.lowlevel.Server`` or an ``mcp.server.mcpserver.MCPServer``.  ``name``: the name
    in the declaration.  ``server_id``: the ``serverId`` (default: ``name`` and a random UUID);
    the schema forbids reusing one on a connection.  ``max_active_requests``: requests answered at
    once; more get -33000.

    Put ``registration.declaration`` into ``session/new`` (or ``load``/``resume``/``fork``): the
    runtime refuses to send it to an agent that does not advertise the ``acp`` transport
    (:class:`~acp_trio.CapabilityError`).  The server serves until :meth:`McpServerRegistration.aclose`
    or the end of the connection.

    Raises :class:`~acp_trio.CapabilityError` when the connection's variant has no MCP over ACP
    (a stable one), ``ValueError`` for a ``server_id`` already used on this connection or a
    ``max_active_requests`` below 1, ``TypeError`` for a ``server`` that is not an MCP SDK server,
    :class:`~acp_trio.ConnectionClosed` when the connection is closed.
    """
    if max_active_requests < 1:
        raise ValueError("max_active_requests must be at least 1")
    _lowlevel(server)  # refuse what is not an MCP server before anything is registered
    provider = _providers.get(conn)
    if provider is None:
        provider = _providers[conn] = _Provider(conn)
    provider.install()
    chosen = server_id if server_id is not None else f"{name}:{uuid.uuid4()}"
    if chosen in provider.used_ids:
        raise ValueError(f"serverId {chosen!r} was already registered on this connection")
    registration = McpServerRegistration(provider, server, name, chosen, max_active_requests)
    conn.start_soon(registration._run, name=f"MCP server {name!r} over ACP")
    provider.used_ids.add(chosen)
    provider.servers[chosen] = registration
    log.debug("serving MCP server %r as serverId %r", name, chosen)
    return registration


def _lowlevel(server: Any) -> Server[Any]:
    from mcp.server.lowlevel import Server
    from mcp.server.mcpserver import MCPServer

    if isinstance(server, MCPServer):
        # MCPServer wraps a lowlevel Server and exposes no public accessor; the SDK's own in-memory
        # transport (mcp.client._memory) reads the same attribute
        inner: Server[Any] = server._lowlevel_server
        return inner
    if isinstance(server, Server):
        return server
    raise TypeError(f"expected an mcp.server.lowlevel.Server or mcp.server.mcpserver.MCPServer, got {server!r}")


# -- agent side: the consumer ---------------------------------------------------------------------------------


class _Consumer:
    """The ``mcp/message`` notification route of one agent connection: delivers each to the link
    whose request it names (a notification for no active request is dropped)."""

    def __init__(self, conn: _Peer) -> None:
        self.conn = conn
        self.active: dict[tuple[str, str], _Link] = {}  # (serverId, requestId) -> the link that sent it
        self._route: Route | None = None
        self._previous: Route | None = None
        self._unclaimed: dict[int, Any] = {}  # id(params) of notifications for the handler's own route

    def install(self) -> MethodSpec:
        spec = _spec(self.conn, "REQUESTS", "agent")
        notification = _spec(self.conn, "NOTIFICATIONS", "agent")
        if self._route is None or self.conn.connection.routes.get(METHOD) is not self._route:
            # delivered as the reader reads it (on_receive), so a request's notifications reach its
            # mcp.ClientSession before the answer read after them
            self._route = Route(
                METHOD, "notification", self._handle, params_type=notification.params_type, on_receive=self._deliver
            )
            self._previous = _install(self.conn, self._route)
        return spec

    def _deliver(self, params: Any) -> None:
        link = self.active.get((params.server_id, params.request_id))
        if link is not None:
            link.deliver(params.method, params.params if isinstance(params.params, dict) else None)
        elif self._previous is not None:
            self._unclaimed[id(params)] = params
        else:
            log.debug(
                "mcp/message notification for no active request (%r, %r): dropped", params.server_id, params.request_id
            )

    async def _handle(self, params: Any) -> None:
        if self._unclaimed.pop(id(params), None) is not None and self._previous is not None:
            await self._previous.handler(params)


_consumers: weakref.WeakKeyDictionary[Any, _Consumer] = weakref.WeakKeyDictionary()


class _Link:
    """One ``mcp.ClientSession``'s transport to one ``serverId``: its requests out, answers and notifications in."""

    def __init__(self, conn: _Peer, consumer: _Consumer, spec: MethodSpec, server_id: str) -> None:
        self.conn = conn
        self.consumer = consumer
        self.spec = spec
        self.server_id = server_id
        self.token = uuid.uuid4().hex[:16]  # requestIds of two links to one server never collide
        self.to_session, self.session_input = anyio.create_memory_object_stream[SessionMessage | Exception](
            _NOTIFICATION_BUFFER
        )
        self.session_output, self.from_session = anyio.create_memory_object_stream[SessionMessage](0)
        self.calls: dict[Any, trio.CancelScope] = {}  # inner JSON-RPC id -> its mcp/message request's scope

    def deliver(self, method: str, params: dict[str, Any] | None) -> None:
        notification = mcp_types.JSONRPCNotification(jsonrpc="2.0", method=method, params=params)
        try:
            self.to_session.send_nowait(SessionMessage(notification))
        except anyio.WouldBlock:
            log.warning("MCP server %r: %s dropped: the MCP session is not reading", self.server_id, method)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    def end(self) -> None:
        """The ACP connection closed: the MCP session reads end of stream (and fails what is pending)."""
        self.to_session.close()

    async def pump(self, nursery: trio.Nursery) -> None:
        async with self.from_session:
            async for item in self.from_session:
                message = item.message
                if isinstance(message, mcp_types.JSONRPCRequest):
                    request_id = f"{self.token}:{message.id}"
                    scope = self.calls[message.id] = trio.CancelScope()
                    self.consumer.active[(self.server_id, request_id)] = self
                    nursery.start_soon(self._forward, message, request_id, scope)
                elif isinstance(message, mcp_types.JSONRPCNotification) and message.method == "notifications/cancelled":
                    withdrawn = self.calls.get((message.params or {}).get("requestId"))
                    if withdrawn is not None:
                        withdrawn.cancel()  # the ACP request is withdrawn: $/cancel_request
                else:
                    # the binding carries requests (agent to client) and request-scoped notifications
                    # (client to agent) only; a 2026-07-28 server sends no requests to answer
                    log.debug("MCP over ACP carries no %s from the agent: dropped", type(message).__name__)

    async def _forward(self, message: mcp_types.JSONRPCRequest, request_id: str, scope: trio.CancelScope) -> None:
        key = (self.server_id, request_id)
        try:
            with scope:
                reply = await self._call(message, request_id)
            if scope.cancelled_caught or reply is None:
                return  # abandoned by the MCP session, or the connection closed
            await self.to_session.send(SessionMessage(reply))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the MCP session is gone
        finally:
            self.calls.pop(message.id, None)
            self.consumer.active.pop(key, None)

    async def _call(
        self, message: mcp_types.JSONRPCRequest, request_id: str
    ) -> mcp_types.JSONRPCResponse | mcp_types.JSONRPCError | None:
        variant = self.conn.variant
        carrier = variant.MessageMcpRequest(server_id=self.server_id, request_id=request_id, method=message.method)
        if message.params is not None:
            carrier.params = dict(message.params)

        def error(code: int, text: str, data: Any = None) -> mcp_types.JSONRPCError:
            return mcp_types.JSONRPCError(
                jsonrpc="2.0", id=message.id, error=mcp_types.ErrorData(code=code, message=text, data=data)
            )

        try:
            answer = await self.conn.send_request(self.spec, carrier)
        except RequestError as exc:  # a binding failure (-33001 ...): the MCP request fails with it
            return error(exc.code, exc.message, exc.data)
        except DecodeError as exc:
            return error(INTERNAL_ERROR, "invalid mcp/message response carrier", {"detail": str(exc)})
        except CapabilityError as exc:
            return error(INVALID_PARAMS, str(exc))
        except ConnectionClosed:
            self.end()
            return None
        if isinstance(answer, variant.ResultMessageMcpResponse):
            if not isinstance(answer.result, dict):
                return error(INTERNAL_ERROR, "the MCP result in the mcp/message response is not an object")
            return mcp_types.JSONRPCResponse(jsonrpc="2.0", id=message.id, result=answer.result)
        inner = answer.error
        return error(inner.code, inner.message, None if inner.data is UNSET else inner.data)


@asynccontextmanager
async def open_acp_transport(
    conn: Any, server_id: str
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """The read and write streams of an ``mcp.ClientSession`` talking to the client's server ``server_id``.

    ``conn``: the :class:`~acp_trio.AgentSideConnection` (an unstable variant).  ``server_id``:
    the ``serverId`` of an ``acp`` server the client declared.  Use the streams as any MCP SDK
    transport, with the 2026-07-28 revision (``await session.discover()``, not ``initialize()``)::

        async with open_acp_transport(conn, server.server_id) as (read, write):
            async with mcp.ClientSession(read, write) as session:
                await session.discover()
                tools = await session.list_tools()

    Each MCP request becomes an ``mcp/message`` request (its ``requestId``: a token of this
    transport and the MCP request id); the carrier's result or error becomes the MCP response, an
    outer ACP error becomes an MCP error with the same code, message and data.  Cancelling an MCP
    request cancels its ACP request.  Leaving the block cancels the requests still running.  When
    the ACP connection closes, the read stream ends (the session fails what it is waiting for).

    Raises :class:`~acp_trio.CapabilityError` when the connection's variant has no ``mcp/message``.
    """
    consumer = _consumers.get(conn)
    if consumer is None:
        consumer = _consumers[conn] = _Consumer(conn)
    spec = consumer.install()
    link = _Link(conn, consumer, spec, server_id)
    try:
        async with owned_nursery() as nursery:  # the body's exception comes out as itself
            nursery.start_soon(link.pump, nursery)
            try:
                yield link.session_input, link.session_output
            finally:
                nursery.cancel_scope.cancel()
    finally:
        link.to_session.close()
        link.session_input.close()
        link.session_output.close()
        for key in [key for key, owner in consumer.active.items() if owner is link]:
            del consumer.active[key]

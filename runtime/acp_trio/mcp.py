"""MCP servers for agents: a session's ``mcpServers`` as live ``mcp.ClientSession`` objects.

Needs the extra ``acp-trio[mcp]`` (the official MCP Python SDK, ``mcp>=2.3,<3``; it runs on anyio,
so it works under trio).  Importing ``acp_trio`` never imports ``mcp``; importing this module does.

A client lists MCP servers in ``session/new`` (and ``session/load``, ``session/resume``); the agent
connects to them and keeps them for the session (spec: ``docs/protocol/v1/session-setup.mdx``,
"MCP Servers"; schema ``$defs/McpServer``: ``McpServerStdio``, ``McpServerHttp``,
``McpServerSse``, and in the unstable variants ``McpServerAcp``: a server the client itself
serves over the ACP connection, see :mod:`acp_trio.mcp_over_acp`; the agent advertises
``mcpCapabilities.acp``, or ``session.mcp.acp`` in v2, and is served with an unstable variant).
:func:`open_mcp_servers` does that in one line of the handler::

    from acp_schema import v1
    from acp_trio import AgentSideConnection
    from acp_trio.mcp import McpServers, open_mcp_servers


    class MyAgent:
        def __init__(self, conn: AgentSideConnection) -> None:
            self.conn = conn
            self.mcp: dict[str, McpServers] = {}

        async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
            # clients send http / sse servers only to agents that advertise them (initialization.mdx);
            # with acp_schema.v1_unstable, McpCapabilities(acp=True) also gets the client's own servers
            caps = v1.AgentCapabilities(mcp_capabilities=v1.McpCapabilities(http=True, sse=True))
            return v1.InitializeResponse(protocol_version=1, agent_capabilities=caps)

        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            session_id = "sess_1"
            servers = await open_mcp_servers(self.conn, session_id, params.mcp_servers, cwd=params.cwd)
            self.mcp[session_id] = servers  # servers["name"].session: mcp.ClientSession (or .error)
            return v1.NewSessionResponse(session_id=session_id)

        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            for name, session in self.mcp[params.session_id].sessions.items():
                tools = await session.list_tools()  # then session.call_tool(tool_name, arguments)
            ...

Lifetime: every server is connected in a background task of the connection
(``conn.start_soon``), so it outlives the handler; it closes when the session ends
(``session/close`` or ``session/delete`` succeeds), when :meth:`McpServers.aclose` is called, or when
the connection closes, whichever comes first.  Closing is shielded from cancellation and bounded.
A stdio server is shut down as the MCP lifecycle says (MCP spec, ``basic/lifecycle``, "Shutdown",
stdio): close its stdin, wait for it to exit, then SIGTERM, wait, then SIGKILL.  The SDK's
``stdio_client`` already does exactly that (``mcp/client/stdio.py``, ``_stop_server_process``:
stdin closed, 2 s, SIGTERM to the server's process group, 2 s, SIGKILL, in a shielded scope), so
this module adds nothing there; ``tests/test_mcp.py`` checks the effect (the pid is gone).

A server that fails to start (the command does not exist, nobody listens at the URL, it does not
answer ``initialize`` within ``connect_timeout``, an unsupported transport) fails alone: its entry
has ``.error`` (a :class:`McpServerError`, also logged at WARNING) and ``.session is None``; the
other servers and the session are unaffected.

Secrets: ``env`` values are passed to the stdio server's environment and ``headers`` values to
every HTTP request, never logged; this module logs server names and transports only (note that the
generated config classes' ``repr`` shows the values: do not log the configs yourself).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from types import TracebackType
from typing import Any, Protocol, Self, TextIO, cast

import anyio
import mcp
import trio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client  # the SDK's client with its default MCP timeouts
from mcp.shared.message import SessionMessage

from ._sessions import SessionRegistry

__all__ = ["McpServerConnection", "McpServerError", "McpServers", "open_mcp_servers"]

log = logging.getLogger("acp_trio.mcp")

_TransportStreams = tuple[Any, Any]


class _Host(Protocol):
    """What :func:`open_mcp_servers` needs of a connection (an ``AgentSideConnection`` has it)."""

    @property
    def sessions(self) -> SessionRegistry: ...

    def start_soon(self, async_fn: Any, *args: Any, name: str | None = None) -> None: ...


class McpServerError(Exception):
    """One MCP server failed: it did not start, or its connection ended on its own.

    ``server``: the server's name (its key in :class:`McpServers`).  ``transport``: ``"stdio"``,
    ``"http"``, ``"sse"``, ``"acp"`` or the unsupported ``type``.  ``reason``: what happened (the underlying
    exception, if any, is ``__cause__``).  The message never contains ``env`` or ``headers`` values.
    """

    def __init__(self, server: str, transport: str, reason: str) -> None:
        super().__init__(f"MCP server {server!r} ({transport}) {reason}")
        self.server = server
        self.transport = transport
        self.reason = reason


class McpServerConnection:
    """One MCP server of a session and its live ``mcp.ClientSession``.

    ``name``: the key in :class:`McpServers` (the config's ``name``; a repeated name gets ``#2``,
    ``#3``... appended).  ``config``: the ``McpServer`` object as received (``McpServerStdio``,
    ``HttpMcpServer``, ``AcpMcpServer``...).  ``transport``: ``"stdio"``, ``"http"``, ``"sse"``,
    ``"acp"`` (or the unknown ``type``).  ``session``: the initialized ``mcp.ClientSession`` while
    the server is connected, else ``None``.  ``initialize_result``: the server's
    ``mcp.types.InitializeResult`` (``server_info``, ``capabilities``, ``instructions``), kept after
    it closes; ``None`` for an ``acp`` server, which speaks MCP 2026-07-28 and answers
    ``server/discover`` instead: its ``mcp.types.DiscoverResult`` is ``discover_result``
    (``capabilities``, ``instructions``; the name is ``session.server_info``).  ``error``: the
    :class:`McpServerError` when it failed to start or its connection ended on its own, else
    ``None``.
    """

    def __init__(self, name: str, config: Any, transport: str) -> None:
        self.name = name
        self.config = config
        self.transport = transport
        self.session: ClientSession | None = None
        self.initialize_result: mcp.types.InitializeResult | None = None
        self.discover_result: mcp.types.DiscoverResult | None = None
        self.error: McpServerError | None = None
        self._ready = trio.Event()  # connected, failed or stopped: the outcome of the start is known
        self._closed = trio.Event()  # its task ended: the transport is closed, the process gone
        self._wake = trio.Event()  # stop requested or the transport ended
        self._stop_requested = False
        self._transport_ended = False
        self._life = trio.CancelScope()  # around the connection; cancelled by a stop before it is ready

    @property
    def ok(self) -> bool:
        """True while the server is connected (``session`` is usable)."""
        return self.session is not None

    @property
    def _answered(self) -> bool:
        """The server answered ``initialize`` (or ``server/discover``): it was connected."""
        return self.initialize_result is not None or self.discover_result is not None

    @property
    def closed(self) -> bool:
        """True once the server's connection is closed (stopped, failed, or ended by the server)."""
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        """Wait until the connection is closed (for stdio: the server process is gone)."""
        await self._closed.wait()

    def __repr__(self) -> str:
        if self.session is not None:
            state = "connected"
        elif self.error is not None:
            state = f"failed: {self.error.reason}"
        else:
            state = "closed" if self.closed else "starting"
        return f"<McpServerConnection {self.name!r} ({self.transport}) {state}>"

    # -- state changes (called by the server's task and by McpServers) -------------------------------------------
    def _fail(self, reason: str, cause: BaseException | None = None) -> None:
        if self.error is None:
            error = McpServerError(self.name, self.transport, reason)
            error.__cause__ = cause
            self.error = error
            log.warning("%s", error)
            if cause is not None:
                log.debug("MCP server %r: the error's traceback", self.name, exc_info=cause)
        self._ready.set()

    def _request_stop(self) -> None:
        if self._stop_requested:
            return
        self._stop_requested = True
        if self.session is None and not self._ready.is_set():
            self._fail("was closed before it was ready")
        if self.session is None:
            self._life.cancel()
        self._wake.set()

    def _on_transport_end(self) -> None:
        self._transport_ended = True
        self._wake.set()


class McpServers(Mapping[str, McpServerConnection]):
    """The MCP servers of one session: a read-only mapping name → :class:`McpServerConnection`.

    Every entry is either connected (``.session``) or failed (``.error``) once
    :func:`open_mcp_servers` returned.  ``sessions``: the live ``mcp.ClientSession`` objects by
    name; ``errors``: the failures by name.  ``await aclose()`` closes them all (also usable as
    ``async with``); they close by themselves when the session ends or the connection closes.
    """

    def __init__(self, session_id: str, servers: Iterable[McpServerConnection]) -> None:
        self.session_id = session_id
        self._servers = {server.name: server for server in servers}
        self._done = trio.Event()

    def __getitem__(self, name: str) -> McpServerConnection:
        return self._servers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._servers)

    def __len__(self) -> int:
        return len(self._servers)

    def __repr__(self) -> str:
        return f"McpServers({self.session_id!r}, {list(self._servers.values())!r})"

    @property
    def sessions(self) -> dict[str, ClientSession]:
        """The connected servers' ``mcp.ClientSession`` objects, by name (a new dict each time)."""
        return {name: s.session for name, s in self._servers.items() if s.session is not None}

    @property
    def errors(self) -> dict[str, McpServerError]:
        """The servers that failed, by name: their :class:`McpServerError` (a new dict each time)."""
        return {name: s.error for name, s in self._servers.items() if s.error is not None}

    @property
    def closed(self) -> bool:
        """True once every server's connection is closed."""
        return self._done.is_set()

    async def aclose(self) -> None:
        """Close every server (shielded and bounded: see :func:`open_mcp_servers`) and wait for it.

        Idempotent; a stdio server's process is gone when this returns.
        """
        self._stop_all()
        await self._done.wait()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _stop_all(self) -> None:
        for server in self._servers.values():
            server._request_stop()


class _Options:
    __slots__ = ("base_env", "client_info", "conn", "cwd", "errlog", "session_options", "shutdown_timeout")

    def __init__(
        self,
        conn: _Host,
        cwd: str | None,
        base_env: Mapping[str, str] | None,
        errlog: TextIO | None,
        client_info: mcp.types.Implementation,
        session_options: Mapping[str, Any],
        shutdown_timeout: float,
    ) -> None:
        self.conn = conn
        self.cwd = cwd
        self.base_env = base_env
        self.errlog = errlog
        self.client_info = client_info
        self.session_options = session_options
        self.shutdown_timeout = shutdown_timeout


async def open_mcp_servers(
    conn: _Host,
    session_id: str,
    servers: Iterable[object],
    *,
    cwd: str | None = None,
    connect_timeout: float = 10.0,
    shutdown_timeout: float = 5.0,
    base_env: Mapping[str, str] | None = None,
    errlog: TextIO | None = None,
    client_info: mcp.types.Implementation | None = None,
    session_options: Mapping[str, Any] | None = None,
) -> McpServers:
    """Connect to a session's MCP servers; return once each one is connected or failed.

    ``conn``: the :class:`~acp_trio.AgentSideConnection` (anything with ``sessions`` and
    ``start_soon``).  ``session_id``: the session the servers belong to; they close when it ends
    (``conn.sessions.wait_ended``), which also works while its ``session/new`` handler still runs.
    ``servers``: the request's ``mcp_servers`` (``McpServer`` objects of any schema variant:
    stdio configs have ``command``/``args``/``env``, ``http`` and ``sse`` configs ``url``/``headers``,
    ``acp`` configs ``serverId``: their ``mcp.ClientSession`` talks to the client over ``mcp/message``,
    MCP revision 2026-07-28, connected with ``server/discover``; they need ``conn`` to be an
    ``AgentSideConnection`` of an unstable variant, else they fail with an :class:`McpServerError`).

    Options: ``cwd``: the stdio servers' working directory (pass the session's ``params.cwd``;
    default: this process's).  ``connect_timeout``: seconds for all servers together to start and
    answer ``initialize``; one that has not by then fails with a :class:`McpServerError`.
    ``shutdown_timeout``: seconds allowed for closing one server's MCP session and HTTP connection
    (a stdio server's process shutdown is bounded by the SDK: about 2 s after closing stdin, 2 s
    after SIGTERM, then SIGKILL; an ``acp`` server's requests still running are cancelled, which
    sends ``$/cancel_request``).  ``base_env``: the environment a stdio server starts from before
    its ``env`` entries are applied (default: the SDK's safe subset, ``HOME``, ``LOGNAME``, ``PATH``,
    ``SHELL``, ``TERM``, ``USER``; pass ``os.environ`` to inherit everything).  ``errlog``: where
    stdio servers' stderr goes (a file with a descriptor; default ``sys.stderr``).
    ``client_info``: the ``mcp.types.Implementation`` sent in ``initialize`` (default
    ``acp-trio``).  ``session_options``: more keyword arguments for ``mcp.ClientSession``
    (``sampling_callback``, ``logging_callback``, ``read_timeout_seconds``...).

    A failing server never raises here: see each entry's ``.error``.  Raises
    :class:`~acp_trio.ConnectionClosed` when the connection is already closed.  If the caller is
    cancelled while waiting, the servers are closed (in the background) and the cancellation
    propagates.  If the handler fails after this returned, ``await servers.aclose()``: a session that
    never opens never ends, so its servers would live until the connection closes.
    """
    entries: list[McpServerConnection] = []
    used: set[str] = set()
    for index, config in enumerate(servers):
        name = getattr(config, "name", None)
        if name is None:  # an unknown variant (McpServerOther) keeps its fields in extra_fields
            name = getattr(config, "extra_fields", {}).get("name")
        base = name if isinstance(name, str) and name else f"server-{index + 1}"
        key, n = base, 1
        while key in used:
            n += 1
            key = f"{base}#{n}"
        used.add(key)
        entries.append(McpServerConnection(key, config, _transport_of(config)))
    group = McpServers(session_id, entries)
    options = _Options(
        conn,
        cwd,
        base_env,
        errlog,
        client_info or mcp.types.Implementation(name="acp-trio", version=_version()),
        session_options or {},
        shutdown_timeout,
    )
    conn.start_soon(_run_group, group, conn.sessions, options, name=f"MCP servers of session {session_id!r}")
    try:
        with trio.move_on_after(connect_timeout):
            for server in group.values():
                await server._ready.wait()
    except BaseException:
        group._stop_all()
        raise
    for server in group.values():
        if not server._ready.is_set():
            server._fail(f"failed to start: not ready within {connect_timeout:g} s")
            server._request_stop()
    return group


# -- the background tasks --------------------------------------------------------------------------------------


async def _run_group(group: McpServers, sessions: SessionRegistry, options: _Options) -> None:
    try:
        async with trio.open_nursery() as outer:
            outer.start_soon(_stop_when_session_ends, group, sessions)
            async with trio.open_nursery() as inner:
                for server in group.values():
                    inner.start_soon(_serve, server, options, name=f"MCP server {server.name!r}")
            outer.cancel_scope.cancel()  # every server is closed: stop watching the session
    finally:
        group._done.set()


async def _stop_when_session_ends(group: McpServers, sessions: SessionRegistry) -> None:
    await sessions.wait_ended(group.session_id)
    if not group.closed:
        log.debug("session %r ended: closing its MCP servers", group.session_id)
    group._stop_all()


async def _serve(server: McpServerConnection, options: _Options) -> None:
    """Connect, hold the session until stopped (or the transport ends), then close it, bounded and shielded."""
    life = server._life
    try:
        with life:
            async with AsyncExitStack() as stack:
                try:
                    session, result = await _connect(stack, server, options)
                except Exception as exc:
                    server._fail(_start_failure(server, exc), exc)
                    return  # the stack closes what was opened (a stdio server is shut down)
                server.session = session
                if isinstance(result, mcp.types.DiscoverResult):
                    server.discover_result = result
                else:
                    server.initialize_result = result
                info = session.server_info
                name, version = (info.name, info.version) if info is not None else ("(unnamed)", "")
                log.info("MCP server %r (%s) ready: %s %s", server.name, server.transport, name, version)
                server._ready.set()
                try:
                    await server._wake.wait()
                finally:
                    # Closing must finish even when the connection is being cancelled, and not hang.
                    life.shield = True
                    life.deadline = trio.current_time() + options.shutdown_timeout
                    server.session = None
            if server._transport_ended and not server._stop_requested:
                server._fail("closed its connection (for stdio: the process exited)")
    except Exception as exc:
        if server._stop_requested or server.error is not None:
            log.debug("MCP server %r: error while closing", server.name, exc_info=exc)
        elif not server._answered:
            # a transport task failed while connecting (e.g. the HTTP connection was refused): the
            # transport's task group cancelled the connect and raised here, on leaving the stack
            server._fail(_start_failure(server, exc), exc)
        else:
            server._fail(f"stopped: {_describe(exc)}", exc)
    finally:
        server.session = None
        server._ready.set()
        server._closed.set()
        if life.cancelled_caught and server._stop_requested and server._answered:
            log.warning("MCP server %r: closing took longer than %g s", server.name, options.shutdown_timeout)
        log.debug("MCP server %r closed", server.name)


async def _connect(
    stack: AsyncExitStack, server: McpServerConnection, options: _Options
) -> tuple[ClientSession, mcp.types.InitializeResult | mcp.types.DiscoverResult]:
    config = server.config
    streams: _TransportStreams
    if server.transport == "stdio":
        env = dict(options.base_env) if options.base_env is not None else {}
        for variable in _list(getattr(config, "env", None)):
            env[variable.name] = variable.value
        params = StdioServerParameters(
            command=config.command,
            args=[str(arg) for arg in _list(getattr(config, "args", None))],
            env=env,
            cwd=options.cwd,
        )
        errlog = options.errlog if options.errlog is not None else sys.stderr
        streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
    elif server.transport == "http":
        http_client = create_mcp_http_client(headers=_headers(config))
        await stack.enter_async_context(http_client)
        streams = await stack.enter_async_context(streamable_http_client(_url(config), http_client=http_client))
    elif server.transport == "sse":
        transport = cast(
            AbstractAsyncContextManager[_TransportStreams], sse_client(_url(config), headers=_headers(config))
        )
        streams = await stack.enter_async_context(transport)
    elif server.transport == "acp":
        from .mcp_over_acp import open_acp_transport  # the client's own server, over mcp/message

        server_id = getattr(config, "server_id", None)
        if server_id is None:  # a variant without the acp transport keeps it in extra_fields
            server_id = getattr(config, "extra_fields", {}).get("serverId")
        if not isinstance(server_id, str):
            raise ValueError("the acp MCP server has no serverId string")
        # raises CapabilityError on a stable variant (no mcp/message)
        streams = await stack.enter_async_context(open_acp_transport(options.conn, server_id))
    else:
        raise ValueError(f"unsupported MCP transport {server.transport!r} (this agent speaks stdio, http, sse and acp)")
    read_stream, write_stream = streams
    session = await stack.enter_async_context(
        ClientSession(
            _WatchedReadStream(read_stream, server._on_transport_end),
            write_stream,
            client_info=options.client_info,
            **options.session_options,
        )
    )
    if server.transport == "acp":  # MCP 2026-07-28, the only revision MCP over ACP carries: no handshake
        return session, await session.discover()
    return session, await session.initialize()


class _WatchedReadStream:
    """The transport's read stream, telling its server when it ends (the server exited or hung up).

    ``ClientSession`` ends its receive loop quietly at end of stream; this is how the server's
    task learns of it, marks the server failed and closes it.
    """

    def __init__(self, inner: Any, on_end: Any) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        # the SDK reads the sender's contextvars snapshot from context-aware streams (duck-typed)
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_end()
            raise
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return cast("bool | None", await self._inner.__aexit__(exc_type, exc, tb))


# -- helpers ---------------------------------------------------------------------------------------------------


def _transport_of(config: object) -> str:
    """``"stdio"``, ``"http"``, ``"sse"``, ``"acp"``, or the unsupported ``type`` of an ``McpServer`` object."""
    tag = getattr(config, "type", None)
    if isinstance(tag, str):
        return tag
    if hasattr(config, "command"):
        return "stdio"  # v1 McpServerStdio: the untagged branch of the union
    # the named $defs (McpServerHttp, McpServerSse) carry no tag of their own
    kind = type(config).__name__
    if kind == "McpServerHttp":
        return "http"
    if kind == "McpServerSse":
        return "sse"
    return kind


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []  # absent (UNSET) in the v2 schema counts as empty


def _wire_field(config: Any, attribute: str, wire: str) -> Any:
    """A config's field: its attribute, or for a variant the schema at hand does not define (a v1
    ``sse`` server seen through v2's types, which have no ``sse``: ``McpServerOther``) the wire field
    kept in ``extra_fields``."""
    value = getattr(config, attribute, None)
    if value is None:
        value = getattr(config, "extra_fields", {}).get(wire)
    return value


def _url(config: Any) -> str:
    url = _wire_field(config, "url", "url")
    if not isinstance(url, str):
        raise ValueError(f"the {_transport_of(config)} MCP server has no url string")
    return url


def _headers(config: Any) -> dict[str, str]:
    """``{name: value}`` of a config's ``headers`` (``HttpHeader`` objects, or their wire objects
    when kept in ``extra_fields``)."""
    headers: dict[str, str] = {}
    for header in _list(_wire_field(config, "headers", "headers")):
        if isinstance(header, dict):
            name, value = header.get("name"), header.get("value")
            if not isinstance(name, str) or not isinstance(value, str):
                raise ValueError(f"an MCP server header is not a {{name, value}} pair of strings: {sorted(header)}")
            headers[name] = value
        else:
            headers[header.name] = header.value
    return headers


def _start_failure(server: McpServerConnection, exc: BaseException) -> str:
    if server._transport_ended:
        detail = "for stdio: the process exited, see its stderr" if server.transport == "stdio" else _describe(exc)
        return f"failed to start: the connection closed before the answer to initialize ({detail})"
    return f"failed to start: {_describe(exc)}"


def _describe(exc: BaseException) -> str:
    """A one-line description: the first leaf of an exception group, with its type."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@functools.cache
def _version() -> str:
    try:
        from importlib.metadata import version

        return version("acp-trio")
    except Exception:
        return "0"

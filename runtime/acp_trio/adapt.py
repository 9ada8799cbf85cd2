"""The adapter (issue 33): an agent that speaks one protocol version, served to a client that speaks the other.

This docstring describes :class:`V1Front` (a v2-only agent, a v1 client); :class:`V2Front` (a
v1-only agent, a v2 client, its ``fs/*`` and ``terminal/*`` answered by the adapter) documents
the other direction in its own docstring.

Contract: :class:`V1Front` sits between two connections it does not own: an
:class:`~acp_trio.AgentSideConnection` speaking v1 to the client (the front) and a
:class:`~acp_trio.ClientSideConnection` speaking v2 to the agent (the back).  Every message is
decoded, translated by the rows of :mod:`acp_trio._mapping` (the table of
``docs/protocol/v2/migration.mdx``) and sent on the other connection; what has no translation is
answered with a JSON-RPC error naming the method and the version, or (a notification) logged as a
warning on the ``acp_trio.adapt`` logger: never dropped silently.  Unknown fields and ``_meta``
survive: requests whose shape is the same in both versions are re-read from their wire JSON, the
others keep ``_meta`` and ``extra_fields`` field by field.

v1 client → v2 agent (method by method, the design's rows in brackets):

- ``initialize``: a v2 ``initialize`` (``info`` is the client's ``clientInfo``, else the
  adapter's); the client's ``elicitation`` capability is offered, ``fs``/``terminal`` are not (v2 has
  neither: migration.mdx § Client file system and terminal execution removed); the agent's ``info``,
  capabilities (L1, L2: v2's session baseline becomes ``loadSession`` and ``sessionCapabilities``
  list/resume/close) and auth methods are the v1 answer;
- ``authenticate`` / ``logout``: ``auth/login`` / ``auth/logout`` (L3);
- ``session/new``: the same with v2 MCP server configs (M1); the answer's ``configOptions`` as v1's
  plus ``modes`` from the ``category: "mode"`` option (L4, L10); its ``availableCommands`` (a v2
  field) follow as a v1 ``available_commands_update``;
- ``session/load``: ``session/resume`` with ``replayFrom: {"type": "start"}`` (L5), the replay
  projected to v1 (user messages included); -32601 naming v2 when the agent has no session
  capabilities at all;
- ``session/resume`` (without replay), ``session/list``, ``session/close``, ``session/delete``: the
  same (L6-L9);
- ``session/set_mode``: ``session/set_config_option`` on the session's ``category: "mode"`` option
  (L11); ``session/set_config_option``: the same, v1's untagged value request tagged ``id`` (L10);
- ``session/prompt``: v2 answers a receipt at once; the v1 answer waits for the agent's
  ``state_update`` ``idle`` of that session and carries its stop reason (T2: a reason v1 lacks is
  ``end_turn`` plus ``_meta["acp-trio/stopReason"]``); an idle with ``stopReason: "error"`` or an
  error answering the v2 request is the v1 error (T3);
- ``session/cancel``: the same; the v1 answer (``cancelled``) still waits for the agent's idle, at
  most ``cancel_grace`` seconds, so the updates the agent sends while it stops reach the client
  before it (v1 prompt-turn.mdx § Cancellation).

v2 agent → v1 client:

- ``session/update``: through one :class:`~acp_trio._views.V1View` per session (T5-T14, T20-T22,
  L12-L14); streamed text chunks are not decoded: their wire JSON is their v1 form and is sent as
  read (:meth:`~acp_trio._views.V1View.project_wire`), in order with the session's other updates;
  the others: ``tool_call`` then ``tool_call_update``, ``plan`` with every live plan, state updates
  not sent; a v2 diff of an added or deleted file is exact from its patch (``newText`` /
  ``oldText``), another one text with its patch (T13: :func:`~acp_trio._mapping.diff_v2_to_v1`);
  an update v1 cannot express is not sent and is logged (the turn goes on);
- ``session/request_permission``: rows T15-T17 (a synthetic v1 ``tool_call`` first when the
  request is about a command or nothing, reported ``completed``/``failed`` after the decision), the
  v1 outcome back (T18);
- ``elicitation/create`` / ``elicitation/complete``: the same, when the client offered elicitation.

Extension methods (``_``-prefixed) are forwarded verbatim both ways when named
(``ext_requests`` / ``ext_notifications``); the runtime routes by name, so an unnamed request
is answered -32601 and an unnamed notification ignored (a debug log line), as on any connection.

Entry points: :func:`serve_v2_agent_to_v1_client` / :func:`serve_v1_agent_to_v2_client` (stdio to
the client, the agent spawned) and ``python -m acp_trio.adapt --speak 1|2 [--no-client-fs]
[--ext-request _NAME ...] [--ext-notification _NAME ...] -- AGENT_CMD [ARG ...]`` (``--speak``: the
version spoken to the client).
"""

from __future__ import annotations

import argparse
import base64
import itertools
import logging
import math
import os
import shlex
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from types import ModuleType
from typing import Any, ClassVar, Generic, Self, TypeVar

import attrs
import trio

from acp_schema import v1, v2

from . import _capabilities
from ._capabilities import CapabilityError
from ._converter import DecodeError, converter
from ._core import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, RequestError
from ._mapping import (
    VersionError,
    agent_caps_to_v1,
    agent_caps_to_v2,
    auth_method_to_v1,
    auth_method_to_v2,
    client_caps_to_v1,
    client_caps_to_v2,
    config_options_to_v1,
    elicitation_to_v1,
    elicitation_to_v2,
    error_to_v2,
    idle_to_v1,
    mcp_server_to_v1,
    mcp_server_to_v2,
    modes_from_config,
    outcome_to_v1,
    outcome_to_v2,
    permission_to_v1,
    permission_to_v2,
    stop_reason_to_v2,
)
from ._roles import AgentSideConnection, ClientSideConnection, ConnectionClosed, ProtocolVersionError
from ._spec import UNSET, UnsetType
from ._views import V1View, V2View, _meta_is_object
from .fs import SessionFileSystem
from .terminals import TerminalManager

__all__ = [
    "DEFAULT_CANCEL_GRACE",
    "V1Front",
    "V2Front",
    "main",
    "serve_v1_agent_to_v2_client",
    "serve_v2_agent_to_v1_client",
]

log = logging.getLogger("acp_trio.adapt")

DEFAULT_CANCEL_GRACE = 5.0
"""Seconds a cancelled v1 ``session/prompt`` waits for the v2 agent's ``idle`` before answering
``cancelled`` anyway."""

ADAPTER_INFO = v2.Implementation(name="acp-trio-adapt", version="1")
"""The v2 ``info`` sent to the agent when the v1 client gave no ``clientInfo`` (required in v2)."""


def _relay(value: Any, target: Any) -> Any:
    """``value`` re-read as ``target`` of the other version from its wire JSON: the same shape,
    unknown fields and ``_meta`` included."""
    return _structure(converter.unstructure(value), target)


def _structure(wire: Any, target: Any) -> Any:
    return converter.structure(wire, target)


def _not_in(version: int, method: str, detail: str) -> RequestError:
    """-32601 for ``method``, which the agent (speaking protocol ``version``) lacks: ``detail`` says why."""
    return RequestError(
        METHOD_NOT_FOUND,
        "Method not found",
        {"method": method, "detail": f"{detail} (the agent behind this adapter speaks protocol version {version})"},
    )


def _agent_gone(method: str, exc: ConnectionClosed) -> RequestError:
    """-32603 for ``method``: the agent's connection closed before it answered (``exc`` says how:
    its exit status and last stderr lines when the adapter spawned it)."""
    detail = f"the agent behind this adapter is gone ({exc}): {method} was not answered"
    return RequestError(INTERNAL_ERROR, "Internal error", {"method": method, "detail": detail})


def _untranslatable(method: str, exc: Exception) -> RequestError:
    return RequestError(INVALID_PARAMS, "Invalid params", {"method": method, "detail": str(exc)})


def _forward_extensions(
    conn: Any, other: Callable[[], Any], ext_requests: Sequence[str], ext_notifications: Sequence[str]
) -> None:
    """Route ``ext_requests`` / ``ext_notifications`` arriving on ``conn`` to the connection
    ``other()`` returns, params and results as plain JSON (extensibility.mdx)."""

    def request(name: str) -> Callable[[Any], Any]:
        async def forward(params: Any) -> Any:
            target = other()
            if target is None:
                raise RequestError(METHOD_NOT_FOUND, "Method not found", {"method": name})
            return await target.ext_request(name, params)

        return forward

    def notification(name: str) -> Callable[[Any], Any]:
        async def forward(params: Any) -> None:
            target = other()
            if target is not None:
                await target.ext_notification(name, params)

        return forward

    for name in ext_requests:
        conn.on_ext_request(name, request(name))
    for name in ext_notifications:
        conn.on_ext_notification(name, notification(name))


def _check_ext_names(names: Sequence[str]) -> None:
    for name in names:
        if not name.startswith("_"):
            raise ValueError(f"extension method names start with '_' (extensibility.mdx), got {name!r}")


@attrs.define
class _Turn:
    """A v1 ``session/prompt`` waiting for the agent's ``idle``: its answer or its error."""

    ended: trio.Event = attrs.field(factory=trio.Event)
    response: v1.PromptResponse | None = None
    error: RequestError | None = None
    cancel_sent: bool = False  # a v2 session/cancel went to the agent for this turn
    cancel_read: bool = False  # the client's session/cancel was read (its handler may not have run yet)
    cancel_queued: trio.Event = attrs.field(factory=trio.Event)  # set once a cancel is queued to the agent

    def end(self, response: v1.PromptResponse | None = None, error: RequestError | None = None) -> None:
        if not self.ended.is_set():
            self.response, self.error = response, error
            self.ended.set()


_WIRE_CHUNKS = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"})


class _WireUpdate:
    """A v2 ``session/update`` of a streamed chunk as read (wire JSON), not decoded: what
    :class:`_WireDecode` hands the handler; ``session_id`` orders it with its session's others."""

    __slots__ = ("decode", "raw", "session_id", "update")

    def __init__(self, raw: dict[str, Any], decode: Callable[[Any], Any]) -> None:
        self.raw = raw
        self.session_id: str = raw["sessionId"]
        self.update: dict[str, Any] = raw["update"]
        self.decode = decode  # the typed way, when the view wants the update decoded after all

    def typed(self) -> Any:
        """The params decoded (the typed way), or ``None`` with a logged warning when they do not
        decode (as the runtime drops a notification with invalid params)."""
        try:
            return self.decode(self.raw)
        except Exception as exc:
            log.warning("dropping a session/update from the agent with invalid params: %s", exc)
            return None


class _WireDecode:
    """The agent connection's ``session/update`` decoder with the fast path: params with a string
    ``sessionId`` and a chunk ``update`` are a :class:`_WireUpdate`, the rest decoded by ``typed``."""

    __slots__ = ("typed",)

    def __init__(self, typed: Callable[[Any], Any]) -> None:
        self.typed = typed

    def __call__(self, raw: Any) -> Any:
        if type(raw) is dict and type(raw.get("sessionId")) is str:
            update = raw.get("update")
            if type(update) is dict and update.get("sessionUpdate") in _WIRE_CHUNKS:
                return _WireUpdate(raw, self.typed)
        return self.typed(raw)


@attrs.define
class _Session:
    """What the adapter keeps of one session: the v1 projection, the tool calls the v1 client holds
    a title for (design Q5), the session's v2 config options (for ``set_mode``), the pending turn."""

    view: V1View = attrs.field(factory=V1View)
    titled: set[str] = attrs.field(factory=set)
    config_options: list[Any] = attrs.field(factory=list)
    turn: _Turn | None = None
    closed: bool = False  # closed or deleted while a turn waited: forgotten once it is answered


_S = TypeVar("_S", "_Session", "_V2Session")


class _Front(Generic[_S]):
    """What both fronts share: the client connection (spoken :attr:`client_version`) and the agent
    connection (:attr:`agent_version`) with their wiring, extension methods forwarded verbatim both
    ways, the sessions seen, and the calls to the agent with their errors mapped (what the agent's
    capabilities do not cover: -32601 naming its version; its connection gone: -32603 saying so)."""

    client_version: ClassVar[ModuleType]
    """The protocol module spoken to the client (``acp_schema.v1`` or ``v2``)."""
    agent_version: ClassVar[ModuleType]
    """The protocol module spoken to the agent."""
    agent_speaks: ClassVar[int]
    """The agent's protocol version number (named in errors)."""
    dropped_setup_fields: ClassVar[tuple[str, ...]] = ()
    """Wire fields of a session setup request that the agent's version has no place for."""

    def __init__(
        self,
        *,
        cancel_grace: float,
        client_info: v2.Implementation | None,
        ext_requests: Sequence[str],
        ext_notifications: Sequence[str],
    ) -> None:
        _check_ext_names((*ext_requests, *ext_notifications))
        self.ext_requests = tuple(ext_requests)
        self.ext_notifications = tuple(ext_notifications)
        self.cancel_grace = cancel_grace
        self.client_info = client_info or ADAPTER_INFO
        self.client_conn: AgentSideConnection | None = None
        """The connection to the client (set when it is built)."""
        self.agent_conn: ClientSideConnection | None = None
        """The connection to the agent (set when it is built)."""
        self.sessions: dict[str, _S] = {}
        self._queue_update: Callable[[Any], bool] | None = None  # the client's session/update queue
        self._cancels_watched = False

    # -- wiring ------------------------------------------------------------------------------------
    def acp_handlers(self) -> dict[ModuleType, Callable[[AgentSideConnection], Self]]:
        """``{client_version: factory}``: the runtime's hook, so ``AgentSideConnection(front, ...)``
        speaks the client's version (and only it)."""
        return {self.client_version: self._attach_client}

    def agent_handlers(self) -> dict[ModuleType, Callable[[ClientSideConnection], Any]]:
        """``{agent_version: factory}``: the ``client`` argument of the connection to the agent
        (``spawn_agent(..., client=front.agent_handlers())``, ``ClientSideConnection``)."""
        return {self.agent_version: self._attach_agent}

    def _attach_client(self, conn: AgentSideConnection) -> Self:
        if self.client_conn is not None and self.client_conn is not conn:
            raise RuntimeError(f"a {type(self).__name__} serves one client connection; make one per connection")
        self.client_conn = conn
        _forward_extensions(conn, lambda: self.agent_conn, self.ext_requests, self.ext_notifications)
        return self

    def _attach_agent(self, conn: ClientSideConnection) -> Any:
        if self.agent_conn is not None and self.agent_conn is not conn:
            raise RuntimeError(f"a {type(self).__name__} talks to one agent connection; make one per connection")
        if self.agent_conn is None:
            self.agent_conn = conn
            _forward_extensions(conn, lambda: self.client_conn, self.ext_requests, self.ext_notifications)
            self._agent_attached(conn)
        return self._back()

    def _agent_attached(self, conn: ClientSideConnection) -> None:
        """The agent's connection was built (once)."""

    def _back(self) -> Any:
        """The client-side handler facing the agent."""
        raise NotImplementedError

    @property
    def _agent(self) -> Any:
        if self.agent_conn is None:
            raise RequestError(INTERNAL_ERROR, "Internal error", {"detail": "the adapter has no agent connection"})
        return self.agent_version.AgentPeer(self.agent_conn)

    @property
    def _client(self) -> Any:
        if self.client_conn is None:
            raise RuntimeError("the adapter has no client connection yet")
        return self.client_version.ClientPeer(self.client_conn)

    # -- sessions ----------------------------------------------------------------------------------
    def _new_session(self) -> _S:
        raise NotImplementedError

    def _session(self, session_id: str) -> _S:
        session = self.sessions.get(session_id)
        if session is None:  # a session the client knows from elsewhere (session/list): project from now on
            session = self.sessions[session_id] = self._new_session()
        return session

    def _forget(self, session_id: str) -> None:
        """Drop a closed or deleted session's state; a turn still running keeps it until its end
        (the agent cancels the turn on close: v2 session-setup.mdx)."""
        session = self.sessions.get(session_id)
        if session is not None:
            if session.turn is None:
                del self.sessions[session_id]
            else:
                session.closed = True

    # -- calls to the agent ------------------------------------------------------------------------
    async def _call(self, method: str, call: Callable[[], Any]) -> Any:
        """``await call()`` on the agent; a call its capabilities do not cover is
        :meth:`_uncovered`'s error, a closed agent connection -32603 saying so."""
        try:
            return await call()
        except CapabilityError as exc:
            raise self._uncovered(method, exc) from None
        except ConnectionClosed as exc:
            raise _agent_gone(method, exc) from None

    def _uncovered(self, method: str, exc: CapabilityError) -> RequestError:
        return _not_in(self.agent_speaks, method, str(exc))

    async def _relayed(self, method: str, params: Any, request_type: Any, call: str, answer_type: Any) -> Any:
        """A request of the same shape in both versions: ``params`` re-read as ``request_type``, sent
        with the agent peer's method ``call``, its answer re-read as ``answer_type``."""
        request = _relay(params, request_type)
        answer = await self._call(method, lambda: getattr(self._agent, call)(request))
        return _relay(answer, answer_type)

    async def _initialize_agent(self, request: Any) -> Any:
        """Send ``initialize`` to the agent: its answer (also kept as :attr:`agent_initialize`).
        -32603 when the agent answers another protocol version or its connection closes first
        (the error names how: an exit status, the last stderr lines)."""
        if self.agent_conn is None:
            raise RequestError(INTERNAL_ERROR, "Internal error", {"detail": "the adapter has no agent connection"})
        try:
            answer = await self.agent_conn.initialize(request)
        except ProtocolVersionError as exc:
            detail = f"the agent behind this adapter does not speak protocol version {self.agent_speaks}: {exc}"
            raise RequestError(INTERNAL_ERROR, "Internal error", {"detail": detail}) from None
        except ConnectionClosed as exc:
            raise _agent_gone("initialize", exc) from None
        self.agent_initialize = answer
        return answer

    def _mcp_servers(self, servers: Any) -> list[Any] | None:
        """A setup request's MCP server configs in the agent's version (row M1); ``None``: as they are."""
        raise NotImplementedError

    def _setup_request(self, params: Any, target: Any, method: str, **extra: Any) -> Any:
        """A ``session/new``/``load``/``resume`` request of the client's version as the agent's
        ``target``: the same fields, MCP server configs by row M1, ``extra`` added; -32602 naming
        the method for one with no form in the agent's version."""
        wire = converter.unstructure(params)
        for name in self.dropped_setup_fields:
            wire.pop(name, None)
        try:
            servers = self._mcp_servers(params.mcp_servers)
            if servers is not None:
                wire["mcpServers"] = [converter.unstructure(s) for s in servers]
            wire.update(extra)
            return _structure(wire, target)
        except (VersionError, DecodeError) as exc:
            raise _untranslatable(method, exc) from None

    # -- the streaming fast path -------------------------------------------------------------------
    def _stream_wire(self, conn: ClientSideConnection) -> None:
        """Read the agent's streamed chunks as wire JSON (call once its version is negotiated):
        ``session/update`` params whose ``update`` is a ``*_chunk`` are not decoded but handed over
        as :class:`_WireUpdate` (in the same per-session order: the runtime's serial queue), for
        the front's ``_forward_wire``; the rest decoded as before."""
        route = conn.connection.routes.get("session/update")
        if route is None or isinstance(route.decode, _WireDecode):
            return
        route.decode = _WireDecode(route.decode or conn.connection.converter.structure_fn(route.params_type))

    def _queue_wire(self, params: dict[str, Any]) -> bool:
        """Queue ``session/update`` with the wire JSON ``params`` to the client, after what was
        queued before (the same queue as the typed ones; session/update has no capability rule to
        check); ``True`` when the sender should now wait for the writer (:meth:`_send_wire`)."""
        queue = self._queue_update
        if queue is None:
            if self.client_conn is None:
                raise RuntimeError("the adapter has no client connection yet")
            queue = self._queue_update = self.client_conn.connection.notification_queue("session/update")
        return queue(params)

    async def _send_wire(self, params: dict[str, Any]) -> None:
        """:meth:`_queue_wire`, then wait while the client reads slower than the agent streams."""
        if self._queue_wire(params) and self.client_conn is not None:
            await self.client_conn.connection.wait_writable()

    async def _send_cancel(self, session_id: str, notification: Any) -> None:
        """Send ``session/cancel`` to the agent; when it cannot be sent (the agent is gone) a debug
        log line: the turn ends anyway."""
        try:
            await self._agent.session_cancel(notification)
        except (ConnectionClosed, RequestError) as exc:
            log.debug("session %s: the agent could not be told to cancel its turn: %s", session_id, exc)

    def _watch_cancels(self) -> None:
        """Note each ``session/cancel`` of the client as it is read (the runtime's ``on_receive``,
        before anything read after it is handled), so that :meth:`_asking` can tell an answer
        read after it to wait until the cancel has gone to the agent."""
        conn = self.client_conn
        route = conn.connection.routes.get("session/cancel") if conn is not None else None
        if route is None or self._cancels_watched:
            return
        self._cancels_watched = True
        inner = route.on_receive

        def on_receive(params: Any) -> None:
            if inner is not None:
                inner(params)
            session = self.sessions.get(getattr(params, "session_id", None))  # type: ignore[arg-type]
            if session is not None and session.turn is not None:
                session.turn.cancel_read = True

        route.on_receive = on_receive

    async def _cancel_first(self, session: Any) -> None:
        """Before the agent gets an answer the client gave after its ``session/cancel`` (a question
        answered ``cancelled``): wait until that cancel is queued to the agent, so that the agent
        reads them in the client's order (prompt-turn.mdx § Cancellation), whichever of their
        tasks runs first here; at most :attr:`cancel_grace` seconds."""
        turn = session.turn if session is not None else None
        if turn is not None and turn.cancel_read and not turn.cancel_queued.is_set():
            with trio.move_on_after(self.cancel_grace):
                await turn.cancel_queued.wait()

    # -- questions to the client -------------------------------------------------------------------
    async def _elicit_client(self, ask: Callable[[], Any]) -> Any:
        """``await ask()`` (``elicitation/create`` to the client); -32601 when the client did not
        offer elicitation (the agent was not offered it either)."""
        try:
            return await ask()
        except CapabilityError as exc:
            detail = f"the v{self.client_version.PROTOCOL_VERSION} client behind this adapter: {exc}"
            raise RequestError(
                METHOD_NOT_FOUND, "Method not found", {"method": "elicitation/create", "detail": detail}
            ) from None

    async def _elicitation_complete(self, params: Any) -> None:
        """The agent's ``elicitation/complete`` to the client (the same shape in both versions)."""
        try:
            notification = _relay(params, self.client_version.CompleteElicitationNotification)
            await self._client.elicitation_complete(notification)
        except (CapabilityError, DecodeError) as exc:
            log.warning(
                "elicitation/complete not sent to the v%s client: %s", self.client_version.PROTOCOL_VERSION, exc
            )


class _Back:
    """The client-side handler facing the agent: each method hands over to its front."""

    def __init__(self, front: Any) -> None:
        self.front = front

    async def session_request_permission(self, params: Any) -> Any:
        """The agent's ``session/request_permission`` → the client's version (rows T15-T18)."""
        return await self.front._permission(params)

    async def elicitation_create(self, params: Any) -> Any:
        """The agent's ``elicitation/create`` → the client's version (row T19; the client must have offered it)."""
        return await self.front._elicit(params)

    async def elicitation_complete(self, params: Any) -> None:
        """The agent's ``elicitation/complete`` → the client's."""
        await self.front._elicitation_complete(params)


class V1Front(_Front["_Session"]):
    """A v2-only agent served to a v1 client (see the module docstring for the method map).

    Wire it between two connections::

        front = V1Front()
        async with spawn_agent(cmd, args, client=front.agent_handlers()) as agent_conn:
            await serve_agent_stdio(front)            # or AgentSideConnection(front, ...)

    As an agent handler (``AgentSideConnection(front, ...)``, ``open_memory_pair(front, client)``,
    ``serve_agent_stdio(front)``) it speaks v1 only (its ``acp_handlers()`` is ``{v1: ...}``); one
    ``V1Front`` serves one client connection and one agent connection.  :meth:`agent_handlers` is the
    ``client`` argument of the ``ClientSideConnection`` to the agent (``{v2: ...}``).

    ``cancel_grace``: seconds a cancelled v1 prompt waits for the agent's ``idle`` (default
    :data:`DEFAULT_CANCEL_GRACE`).  ``client_info``: the v2 ``info`` sent to the agent when the v1
    client gives none (default :data:`ADAPTER_INFO`).  ``ext_requests`` / ``ext_notifications``:
    extension methods (names starting with ``_``: extensibility.mdx) forwarded verbatim both ways;
    the runtime routes methods by name, so others get its -32601 (requests) or are ignored with a
    debug log line (notifications), as on any connection.

    Errors the v1 client can get besides the agent's own: -32601 naming protocol version 2 for a
    method the agent lacks (``session/load`` without session capabilities, ``session/set_mode`` on
    a session without a mode option, a method its capabilities do not cover); -32602 naming the
    method for params the agent's capabilities do not cover (a stdio MCP server without
    ``session.mcp.stdio``: v1 implies stdio, v2 does not; design row L1) or that have no v2 form;
    -32603 when the agent answers ``initialize`` with another protocol version or its connection
    is gone (for ``initialize`` too: the error names how it went, e.g. the agent's exit status).
    """

    client_version: ClassVar[ModuleType] = v1
    agent_version: ClassVar[ModuleType] = v2
    agent_speaks = 2

    def __init__(
        self,
        *,
        cancel_grace: float = DEFAULT_CANCEL_GRACE,
        client_info: v2.Implementation | None = None,
        ext_requests: Sequence[str] = (),
        ext_notifications: Sequence[str] = (),
    ) -> None:
        super().__init__(
            cancel_grace=cancel_grace,
            client_info=client_info,
            ext_requests=ext_requests,
            ext_notifications=ext_notifications,
        )
        self.agent_initialize: v2.InitializeResponse | None = None
        """The agent's v2 ``initialize`` answer, once the client initialized."""
        self._synthetic = itertools.count(1)
        self._answered = trio.Event()  # set (and replaced) each time a v1 prompt is answered

    # -- wiring ------------------------------------------------------------------------------------
    def _agent_attached(self, conn: ClientSideConnection) -> None:
        conn.connection.add_close_callback(self._agent_closed)

    def _back(self) -> _V2Back:
        return _V2Back(self)

    def _new_session(self) -> _Session:
        return _Session()

    def _agent_closed(self, reason: str) -> None:
        """The agent's connection closed: every v1 prompt still waiting for its ``idle`` gets an
        error (-32603) saying so, rather than waiting for ever."""
        for session_id, session in self.sessions.items():
            if session.turn is not None:
                detail = f"the agent behind this adapter is gone ({reason}); session {session_id}'s turn has no end"
                session.turn.end(error=RequestError(INTERNAL_ERROR, "Internal error", {"detail": detail}))

    async def wait_answered(self) -> None:
        """Wait until no v1 ``session/prompt`` is waiting for the agent (each was answered)."""
        while any(s.turn is not None for s in self.sessions.values()):
            await self._answered.wait()

    def _uncovered(self, method: str, exc: CapabilityError) -> RequestError:
        """-32601 naming v2 for a method the agent's capabilities do not cover; -32602 when they
        cover the method but not these params."""
        if self.agent_conn is not None and self._offers(exc.method):  # the params need what it lacks
            data = {"method": method, "detail": f"{exc} (the agent behind this adapter speaks protocol version 2)"}
            return RequestError(INVALID_PARAMS, "Invalid params", data)
        return _not_in(2, method, str(exc))

    def _offers(self, method: str) -> bool:
        """Whether the agent's capabilities cover the v2 ``method`` itself (whatever its params)."""
        assert self.agent_conn is not None
        try:
            _capabilities.check_agent_call_v2(
                method, {}, self.agent_conn.agent_capabilities, self.agent_conn.agent_auth_methods
            )
        except CapabilityError:
            return False
        return True

    # -- v1 agent surface --------------------------------------------------------------------------
    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        """v1 ``initialize`` → v2 ``initialize`` (rows L1, L2, L3; migration.mdx § Capability
        reorganization, § Implementation information)."""
        info = self.client_info
        if isinstance(params.client_info, v1.Implementation):
            info = _relay(params.client_info, v2.Implementation)
        given = params.client_capabilities
        caps = client_caps_to_v2(given) if isinstance(given, v1.ClientCapabilities) else v2.ClientCapabilities()
        request = v2.InitializeRequest(
            protocol_version=2,
            info=info,
            capabilities=caps,
            meta=params.meta,
            extra_fields=params.extra_fields,
        )
        self._watch_cancels()
        answer: v2.InitializeResponse = await self._initialize_agent(request)
        assert self.agent_conn is not None
        self._stream_wire(self.agent_conn)
        methods = answer.auth_methods if isinstance(answer.auth_methods, list) else []
        agent_caps = answer.capabilities if isinstance(answer.capabilities, v2.AgentCapabilities) else None
        return v1.InitializeResponse(
            protocol_version=1,
            agent_capabilities=agent_caps_to_v1(agent_caps, logout=bool(methods))
            if agent_caps is not None
            else v1.AgentCapabilities(),
            auth_methods=_auth_methods_to_v1(methods),
            agent_info=_relay(answer.info, v1.Implementation),
            meta=answer.meta,
            extra_fields=answer.extra_fields,
        )

    async def authenticate(self, params: v1.AuthenticateRequest) -> v1.AuthenticateResponse:
        """v1 ``authenticate`` → v2 ``auth/login`` (row L3)."""
        request = v2.LoginAuthRequest(method_id=params.method_id, meta=params.meta, extra_fields=params.extra_fields)
        answer = await self._call("authenticate", lambda: self._agent.auth_login(request))
        return v1.AuthenticateResponse(meta=answer.meta, extra_fields=answer.extra_fields)

    async def logout(self, params: v1.LogoutRequest) -> v1.LogoutResponse:
        """v1 ``logout`` → v2 ``auth/logout`` (row L3)."""
        result: v1.LogoutResponse = await self._relayed(
            "logout", params, v2.LogoutAuthRequest, "auth_logout", v1.LogoutResponse
        )
        return result

    def _mcp_servers(self, servers: Any) -> list[Any] | None:
        """Row M1, v1 → v2."""
        return [mcp_server_to_v2(s) for s in servers] if isinstance(servers, list) else None

    def _session_answer(self, session: _Session, answer: Any, target: Any, **fields: Any) -> Any:
        """The v1 answer of a session setup request from v2's: ``configOptions`` (v1 names, row
        L10) and ``modes`` from the mode option (row L4); ``_meta`` and unknown fields kept."""
        options = answer.config_options if isinstance(answer.config_options, list) else None
        session.config_options = list(options or [])
        return target(
            modes=(modes_from_config(options) or UNSET) if options is not None else UNSET,
            config_options=config_options_to_v1(options) if options is not None else UNSET,
            meta=answer.meta,
            extra_fields=answer.extra_fields,
            **fields,
        )

    def _commands_later(self, session_id: str, answer: Any) -> None:
        """v2 answers ``session/new``/``resume`` with ``availableCommands``; v1 has no such field, so
        they follow as an ``available_commands_update`` (row L14) once the answer is out."""
        commands = getattr(answer, "available_commands", UNSET)
        if not isinstance(commands, list) or self.client_conn is None:
            return
        update = v2.AvailableCommandsUpdateSessionUpdate(available_commands=commands)

        async def send() -> None:
            await trio.lowlevel.checkpoint()
            await self._forward(session_id, update)

        self.client_conn.start_soon(send, name=f"adapt commands {session_id}")

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        """v1 ``session/new`` → v2 ``session/new`` (rows L4, M1; v2 session-setup.mdx)."""
        request = self._setup_request(params, v2.NewSessionRequest, "session/new")
        answer = await self._call("session/new", lambda: self._agent.session_new(request))
        session = self.sessions[answer.session_id] = _Session()
        result: v1.NewSessionResponse = self._session_answer(
            session, answer, v1.NewSessionResponse, session_id=answer.session_id
        )
        self._commands_later(answer.session_id, answer)
        return result

    async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
        """v1 ``session/load`` → v2 ``session/resume`` with ``replayFrom: {"type": "start"}`` (row L5;
        migration.mdx § session/load is gone): the replayed updates reach the client, projected,
        before the answer.  -32601 naming v2 when the agent advertised no session capabilities."""
        caps = self.agent_initialize.capabilities if self.agent_initialize is not None else UNSET
        if not (isinstance(caps, v2.AgentCapabilities) and isinstance(caps.session, v2.SessionCapabilities)):
            raise _not_in(2, "session/load", "the agent advertises no capabilities.session, so no session/resume")
        request = self._setup_request(params, v2.ResumeSessionRequest, "session/load", replayFrom={"type": "start"})
        session = self.sessions[params.session_id] = _Session(view=V1View(echo_user_messages=True))
        try:
            answer = await self._call("session/load", lambda: self._agent.session_resume(request))
        finally:
            session.view.echo_user_messages = False  # from now on the client sends its own messages
        result: v1.LoadSessionResponse = self._session_answer(session, answer, v1.LoadSessionResponse)
        self._commands_later(params.session_id, answer)
        return result

    async def session_resume(self, params: v1.ResumeSessionRequest) -> v1.ResumeSessionResponse:
        """v1 ``session/resume`` → v2 ``session/resume`` without ``replayFrom`` (row L6)."""
        request = self._setup_request(params, v2.ResumeSessionRequest, "session/resume")
        answer = await self._call("session/resume", lambda: self._agent.session_resume(request))
        session = self.sessions[params.session_id] = _Session()
        result: v1.ResumeSessionResponse = self._session_answer(session, answer, v1.ResumeSessionResponse)
        self._commands_later(params.session_id, answer)
        return result

    async def session_list(self, params: v1.ListSessionsRequest) -> v1.ListSessionsResponse:
        """v1 ``session/list`` → v2 ``session/list`` (row L7: the same shape)."""
        result: v1.ListSessionsResponse = await self._relayed(
            "session/list", params, v2.ListSessionsRequest, "session_list", v1.ListSessionsResponse
        )
        return result

    async def session_close(self, params: v1.CloseSessionRequest) -> v1.CloseSessionResponse:
        """v1 ``session/close`` → v2 ``session/close`` (row L8; the agent cancels the session's turn)."""
        result: v1.CloseSessionResponse = await self._relayed(
            "session/close", params, v2.CloseSessionRequest, "session_close", v1.CloseSessionResponse
        )
        self._forget(params.session_id)
        return result

    async def session_delete(self, params: v1.DeleteSessionRequest) -> v1.DeleteSessionResponse:
        """v1 ``session/delete`` → v2 ``session/delete`` (row L9)."""
        result: v1.DeleteSessionResponse = await self._relayed(
            "session/delete", params, v2.DeleteSessionRequest, "session_delete", v1.DeleteSessionResponse
        )
        self._forget(params.session_id)
        return result

    async def session_set_mode(self, params: v1.SetSessionModeRequest) -> v1.SetSessionModeResponse:
        """v1 ``session/set_mode`` → v2 ``session/set_config_option`` on the session's ``category:
        "mode"`` option (row L11; migration.mdx § Session modes become config options).  -32601
        naming v2 when the session has no such option (v2 has no modes)."""
        session = self._session(params.session_id)
        option = next(
            (o for o in session.config_options if getattr(o, "category", None) == "mode" and o.type == "select"), None
        )
        if option is None:
            raise _not_in(
                2, "session/set_mode", "v2 has no session modes and this session has no category 'mode' config option"
            )
        request = v2.IdSetSessionConfigOptionRequest(
            session_id=params.session_id,
            config_id=option.config_id,
            value=params.mode_id,
            meta=params.meta,
            extra_fields=params.extra_fields,
        )
        answer = await self._call("session/set_mode", lambda: self._agent.session_set_config_option(request))
        session.config_options = list(answer.config_options)
        return v1.SetSessionModeResponse(meta=answer.meta)

    async def session_set_config_option(self, params: Any) -> v1.SetSessionConfigOptionResponse:
        """v1 ``session/set_config_option`` → v2's (row L10): v1's untagged value request is v2's
        ``type: "id"``; the answer's options in v1 names."""
        wire = converter.unstructure(params)
        wire.setdefault("type", "id")
        try:
            request = _structure(wire, v2.SetSessionConfigOptionRequest)
        except DecodeError as exc:
            raise _untranslatable("session/set_config_option", exc) from None
        answer = await self._call("session/set_config_option", lambda: self._agent.session_set_config_option(request))
        self._session(params.session_id).config_options = list(answer.config_options)
        return v1.SetSessionConfigOptionResponse(
            config_options=config_options_to_v1(answer.config_options), meta=answer.meta
        )

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        """v1 ``session/prompt`` → v2 ``session/prompt`` (rows T1-T4; v2 prompt-lifecycle.mdx): the
        receipt comes at once; the answer is the agent's ``idle`` for this session.  Raises the
        agent's error (a v2 error answer, or ``idle`` with ``stopReason: "error"``); -32600 when a
        turn of the session is already waiting (v1 runs one at a time)."""
        session = self._session(params.session_id)
        if session.turn is not None:
            raise RequestError(
                INVALID_REQUEST,
                "Invalid request",
                {"method": "session/prompt", "detail": "a prompt turn of this session is still running"},
            )
        turn = session.turn = _Turn()  # before the request: a short turn's idle can overtake the receipt
        try:
            request = _relay(params, v2.PromptRequest)
            with trio.CancelScope(shield=True):  # withdrawn, the agent might never start (or end) the turn
                await self._call("session/prompt", lambda: self._agent.session_prompt(request))
            try:
                await turn.ended.wait()
            except trio.Cancelled:  # session/cancel: the updates the agent sends while it stops come first
                with trio.move_on_after(self.cancel_grace, shield=True):
                    if not (turn.cancel_sent or turn.cancel_read):  # cancelled otherwise (close, input ended)
                        await self._cancel_agent_turn(params.session_id, turn)
                    await turn.ended.wait()
                raise
        finally:
            if session.turn is turn:
                session.turn = None
                if session.closed and self.sessions.get(params.session_id) is session:
                    del self.sessions[params.session_id]
            self._answered.set()
            self._answered = trio.Event()
        if turn.error is not None:
            raise turn.error
        assert turn.response is not None
        return turn.response

    async def session_cancel(self, params: v1.CancelNotification) -> None:
        """v1 ``session/cancel`` → v2 ``session/cancel`` (row T4; the runtime already cancelled the
        v1 turn's wait, which keeps waiting for the agent's ``idle`` :attr:`cancel_grace` seconds)."""
        if self.agent_conn is None:
            return
        session = self.sessions.get(params.session_id)
        turn = session.turn if session is not None else None
        if turn is not None:
            turn.cancel_sent = True
        try:
            await self._agent.session_cancel(_relay(params, v2.CancelSessionNotification))
        finally:
            if turn is not None:
                turn.cancel_queued.set()

    async def _cancel_agent_turn(self, session_id: str, turn: _Turn) -> None:
        """Tell the agent to stop the turn whose v1 wait was cancelled without the client's
        ``session/cancel`` (yet): ``session/close``, or the client's input ended."""
        turn.cancel_sent = True
        await self._send_cancel(session_id, v2.CancelSessionNotification(session_id=session_id))
        turn.cancel_queued.set()

    # -- v2 agent → v1 client ----------------------------------------------------------------------
    async def _forward_wire(self, params: _WireUpdate) -> None:
        """A streamed chunk read as wire JSON: sent to the v1 client unchanged when its session's
        view says it is its own v1 form (:meth:`V1View.project_wire`: a text chunk, unknown fields
        and ``_meta`` included), else decoded and sent the typed way (:meth:`_forward`)."""
        raw = params.raw
        session = self.sessions.get(params.session_id) or self._session(params.session_id)
        if ("_meta" not in raw or type(raw["_meta"]) is dict) and session.view.project_wire(params.update):
            if self._queue_wire(raw) and self.client_conn is not None:  # _send_wire, inlined (hot)
                await self.client_conn.connection.wait_writable()
            return
        typed = params.typed()
        if typed is not None:
            await self._forward(typed.session_id, typed.update, typed.meta, typed.extra_fields)

    async def _forward(
        self, session_id: str, update: Any, meta: Any = UNSET, extra_fields: dict[str, Any] | None = None
    ) -> None:
        """One v2 ``session/update`` as the v1 updates its session's view projects it to; each
        carries the notification's ``_meta`` and unknown fields."""
        session = self._session(session_id)
        if isinstance(update, v2.IdleStateUpdateSessionUpdate) and session.turn is not None:
            try:
                response = idle_to_v1(update)
            except RequestError as exc:
                session.turn.end(error=exc)
            else:
                if response is not None:
                    session.turn.end(response)
        if isinstance(update, v2.ConfigOptionUpdateSessionUpdate):
            session.config_options = list(update.config_options)
        try:
            out = session.view.project(update)
        except VersionError as exc:
            log.warning("session %s: not sent to the v1 client: %s", session_id, exc)
            return
        for one in out:
            if isinstance(one, (v1.ToolCallSessionUpdate, v1.ToolCallUpdateSessionUpdate)) and one.title:
                session.titled.add(one.tool_call_id)
            notification = v1.SessionNotification(
                session_id=session_id, update=one, meta=meta, extra_fields=dict(extra_fields or {})
            )
            await self._client.session_update(notification)

    async def _permission(self, params: v2.RequestPermissionRequest) -> v2.RequestPermissionResponse:
        session = self._session(params.session_id)
        subject = params.subject
        titled = isinstance(subject, v2.ToolCallRequestPermissionSubject) and (
            subject.tool_call.tool_call_id in session.titled
        )
        synthetic_id = f"acp-trio-permission-{next(self._synthetic)}"
        try:
            synthetic, request = permission_to_v1(params, synthetic_id=synthetic_id, tool_call_titled=titled)
        except VersionError as exc:
            raise _untranslatable("session/request_permission", exc) from None
        if synthetic is not None:  # rows T16/T17: v1 asks about a tool call only
            await self._client.session_update(v1.SessionNotification(session_id=params.session_id, update=synthetic))
        answer = await self._client.session_request_permission(request)
        await self._cancel_first(session)
        outcome = outcome_to_v2(answer.outcome)
        if synthetic is not None:
            allowed = isinstance(outcome, v2.SelectedRequestPermissionOutcome) and any(
                o.option_id == outcome.option_id and o.kind in ("allow_once", "allow_always") for o in params.options
            )
            done = v1.ToolCallUpdateSessionUpdate(
                tool_call_id=synthetic_id, status="completed" if allowed else "failed"
            )
            await self._client.session_update(v1.SessionNotification(session_id=params.session_id, update=done))
        return v2.RequestPermissionResponse(outcome=outcome, meta=answer.meta, extra_fields=answer.extra_fields)

    async def _elicit(self, params: Any) -> Any:
        """v2 ``elicitation/create`` → v1's (row T19): a mode v1 lacks is -32602; a client that did
        not offer elicitation is -32601 (the agent was not offered it either)."""
        try:
            request = elicitation_to_v1(params)
        except VersionError as exc:
            raise _untranslatable("elicitation/create", exc) from None
        answer = await self._elicit_client(lambda: self._client.elicitation_create(request))
        await self._cancel_first(self.sessions.get(getattr(params, "session_id", "")))
        return _relay(answer, v2.CreateElicitationResponse)


class _V2Back(_Back):
    """The v2 client-side handler facing the agent: each method hands over to its :class:`V1Front`."""

    front: V1Front

    async def session_update(self, params: v2.UpdateSessionNotification | _WireUpdate) -> None:
        """v2 ``session/update`` → zero or more v1 ``session/update`` (the session's ``V1View``)."""
        if type(params) is _WireUpdate:
            await self.front._forward_wire(params)
            return
        assert not isinstance(params, _WireUpdate)
        await self.front._forward(params.session_id, params.update, params.meta, params.extra_fields)


# == the second direction: a v1-only agent served to a v2 client =====================================
DISABLED_FS_DETAIL = (
    "the v2 client behind this adapter has no file system or terminals (protocol version 2 removed "
    "fs/* and terminal/*: migration.mdx § Client file system and terminal execution removed), and the "
    "adapter was told not to answer them itself (--no-client-fs, V2Front(client_fs=False)): "
    "drop that option to have it answer from the session's cwd"
)


def _has(caps: Any, *path: str) -> bool:
    """Whether the wire JSON ``caps`` holds a value that is neither ``null`` nor ``false`` at ``path``."""
    node: Any = caps
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node is not None and node is not False


_V2_STATES = (
    v2.RunningStateUpdateSessionUpdate,
    v2.IdleStateUpdateSessionUpdate,
    v2.RequiresActionStateUpdateSessionUpdate,
    v2.StateUpdateSessionUpdateOther,
)


def _new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:12]}"


@attrs.define
class _V2Turn:
    """A v2 turn the adapter runs for a v1 ``session/prompt``: its receipt's ``messageId`` and the
    scope a ``session/cancel`` gives :attr:`V2Front.cancel_grace` seconds."""

    message_id: str
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    done: trio.Event = attrs.field(factory=trio.Event)
    cancel_sent: bool = False  # a v1 session/cancel went to the agent for this turn
    cancel_read: bool = False  # the client's session/cancel was read (its handler may not have run yet)
    cancel_queued: trio.Event = attrs.field(factory=trio.Event)  # set once that cancel is queued to the agent
    prompt_sent: trio.Event = attrs.field(factory=trio.Event)  # the v1 prompt is queued (or never will be)


@attrs.define
class _V2Session:
    """What the adapter keeps of one session for a v2 client: its ``V2View``, where it lives (for
    ``session/list`` answered by the adapter), its running turn."""

    view: V2View
    cwd: str | None = None
    additional_directories: list[str] = attrs.field(factory=list)
    turn: _V2Turn | None = None
    closed: bool = False  # closed while a turn ran: forgotten once the turn's idle is out
    quiet: bool = False  # the agent replays history the v2 client did not ask for (resume via load)
    history: list[tuple[Any, Any, dict[str, Any]] | dict[str, Any]] | None = None
    """The v2 updates sent for it (update, ``_meta``, unknown fields; or the ``session/update``
    params as sent, for a streamed chunk; no state updates), kept to serve ``session/resume`` for
    an agent that cannot load; ``None``: not kept."""


class _TerminalDisplay:
    """The terminals the adapter runs for a v1 agent, shown to the v2 client as agent-owned display
    terminals (the v1 agent's ``{type: terminal, terminalId}`` content passes unchanged, and v2
    clients render it from these updates: migration.mdx § Client file system and terminal execution
    removed): ``terminal_update`` with ``command`` and ``cwd`` once created, a
    ``terminal_output_chunk`` (base64) per read of output, ``terminal_update`` with ``exitStatus``
    once it exited.  One task sends them in order; output read before the create was answered
    waits for it."""

    def __init__(self, front: V2Front) -> None:
        self.front = front
        self._send, self._receive = trio.open_memory_channel[tuple[str, Any, Any]](math.inf)
        self._started = False

    def output(self, terminal: Any, data: bytes) -> None:
        """``TerminalManager``'s ``on_output`` (synchronous, must not block)."""
        self._send.send_nowait(("output", terminal, data))

    def created(self, terminal: Any) -> None:
        conn = self.front.client_conn
        if conn is None:
            return
        try:
            if not self._started:
                conn.start_soon(self._run, name="adapt terminal display")
                self._started = True
            conn.start_soon(self._exit, terminal, name=f"adapt terminal {terminal.terminal_id}")
        except ConnectionClosed:  # the client is gone: nobody to show it to (the agent still has it)
            return
        self._send.send_nowait(("created", terminal, None))

    async def _exit(self, terminal: Any) -> None:
        try:
            status = await terminal.wait_for_exit()
        except RequestError:  # released before it exited: nothing to show
            return
        self._send.send_nowait(("exited", terminal, status))

    async def _run(self) -> None:
        shown: set[str] = set()
        early: dict[str, list[bytes]] = {}
        async for kind, terminal, data in self._receive:
            tid, sid = terminal.terminal_id, terminal.session_id
            try:
                if kind == "output" and tid not in shown:
                    early.setdefault(tid, []).append(data)
                    continue
                if kind == "created":
                    shown.add(tid)
                    command = shlex.join([terminal.command, *terminal.args])
                    await self.front._update(
                        sid, v2.TerminalUpdateSessionUpdate(terminal_id=tid, command=command, cwd=terminal.cwd)
                    )
                    for chunk in early.pop(tid, []):
                        await self._chunk(sid, tid, chunk)
                elif kind == "output":
                    await self._chunk(sid, tid, data)
                else:
                    status = v2.TerminalExitStatus(
                        exit_code=UNSET if data.exit_code is None else data.exit_code,
                        signal=UNSET if data.signal is None else data.signal,
                    )
                    await self.front._update(sid, v2.TerminalUpdateSessionUpdate(terminal_id=tid, exit_status=status))
            except ConnectionClosed:
                return

    async def _chunk(self, session_id: str, terminal_id: str, data: bytes) -> None:
        encoded = base64.b64encode(data).decode("ascii")
        await self.front._update(session_id, v2.TerminalOutputChunkSessionUpdate(terminal_id=terminal_id, data=encoded))


class V2Front(_Front["_V2Session"]):
    """A v1-only agent served to a v2 client (issue 33, the adapter's second direction).

    Wire it between two connections::

        front = V2Front()
        async with spawn_agent(cmd, args, client=front.agent_handlers()) as agent_conn:
            await serve_agent_stdio(front)            # or AgentSideConnection(front, ...)

    As an agent handler it speaks v2 only (``acp_handlers()`` is ``{v2: ...}``); :meth:`agent_handlers`
    is the ``client`` argument of the v1 ``ClientSideConnection`` to the agent (``{v1: ...}``).  One
    ``V2Front`` serves one client connection and one agent connection.

    v2 client → v1 agent (the design's rows in brackets; ``docs/protocol/v2/migration.mdx``):

    - ``initialize``: v1's with the client's ``info`` as ``clientInfo`` and its capabilities (L1c:
      ``elicitation``), plus ``fs`` (read and write) and ``terminal``, which the adapter answers itself
      unless ``client_fs=False``; the agent's answer as v2: ``info`` (v1's ``agentInfo``, else
      :data:`ADAPTER_INFO`), capabilities (L1/L2: ``session`` with prompt markers and ``mcp.stdio``),
      auth methods (L3);
    - ``auth/login`` / ``auth/logout``: ``authenticate`` / ``logout`` (L3);
    - ``session/new``: the same, MCP servers by row M1 (v1 needs the list: ``[]`` when omitted); the
      answer's ``modes`` as a ``category: "mode"`` option when no option is one (L4);
    - ``session/prompt``: the receipt at once with a generated ``messageId``; a ``user_message`` with
      it, ``state_update`` ``running``, the v1 prompt; its answer is ``idle`` with its stop reason (T1,
      T2), a v1 error ``idle`` with ``stopReason: "error"`` and the error (T3); -32600 while a turn of
      the session runs (v1 runs one at a time);
    - ``session/cancel``: the same (T4); the turn's ``idle`` waits for the v1 answer (normally
      ``cancelled``) at most ``cancel_grace`` seconds, then says ``cancelled`` anyway;
    - ``session/resume``: with ``replayFrom: {"type": "start"}`` v1's ``session/load`` (L5; the replay
      projected); without, v1's ``session/resume`` when offered, else ``session/load`` whose replay
      is not passed on (v2 resume MUST NOT replay).  v2 makes resume baseline: for an agent with
      neither, a session this adapter opened is answered by the adapter (it lives in the agent
      process as long as the adapter runs), replayed from the updates the adapter sent for it
      (``keep_history``, default ``True``: they are kept in memory per session until it is
      closed).  -32601 naming v1 for another session, -32602 for another cursor type;
    - ``session/list``, ``session/close``: the same when the agent advertises them, else answered by
      the adapter from the sessions it saw (close: the turn cancelled, the session forgotten; L7,
      L8); ``session/delete``: the same when advertised;
    - ``session/set_config_option``: on the mode option made from v1 ``modes``, v1's
      ``session/set_mode`` (L11); otherwise v1's (untagged for ``type: "id"``, L10).

    v1 agent → v2 client:

    - ``session/update``: through one :class:`~acp_trio._views.V2View` per session (generated
      ``messageId`` s, ``tool_call`` → ``tool_call_update``, ``plan`` → ``plan_update``,
      ``current_mode_update`` → ``config_option_update``, ...); a text chunk's wire JSON is sent as
      read but for its ``messageId`` (:meth:`~acp_trio._views.V2View.project_wire`);
    - ``session/request_permission``: v2's (rows T15, T18) between ``state_update``
      ``requires_action`` and ``running``; ``elicitation/*`` likewise (T19) when the client offered it;
    - ``fs/read_text_file``, ``fs/write_text_file`` and ``terminal/*``: answered by the adapter with
      :class:`acp_trio.fs.SessionFileSystem` and :class:`acp_trio.terminals.TerminalManager` (the
      StandardClient's batteries) inside the session's ``cwd`` and ``additionalDirectories``;
      -32601 with a ``detail`` saying how to enable them when ``client_fs=False``.  Each terminal
      is also shown to the client as an agent-owned display terminal (``terminal_update`` with its
      command and cwd, ``terminal_output_chunk`` s, ``terminal_update`` with its exit status), which
      the agent's ``{type: terminal}`` tool call content refers to.

    ``cancel_grace``: seconds (default :data:`DEFAULT_CANCEL_GRACE`).  ``client_info``: the v1
    ``clientInfo`` when the client's ``info`` cannot be read as v1 (default :data:`ADAPTER_INFO`).
    ``ext_requests`` / ``ext_notifications``: as for :class:`V1Front`.  ``new_id``: makes the
    ``messageId`` s (default ``msg_<12 hex>``).  Errors the v2 client can get besides the agent's
    own: -32601 naming protocol version 1 for what the agent lacks; -32602 for params with no v1
    form; -32603 when the agent answers ``initialize`` with another version or is gone.
    """

    client_version: ClassVar[ModuleType] = v2
    agent_version: ClassVar[ModuleType] = v1
    agent_speaks = 1
    dropped_setup_fields = ("replayFrom",)  # v1 has no replay cursor: session/load replays, resume does not

    def __init__(
        self,
        *,
        client_fs: bool = True,
        cancel_grace: float = DEFAULT_CANCEL_GRACE,
        client_info: v2.Implementation | None = None,
        ext_requests: Sequence[str] = (),
        ext_notifications: Sequence[str] = (),
        new_id: Callable[[], str] | None = None,
        terminal_kill_grace: float = 2.0,
        keep_history: bool = True,
    ) -> None:
        super().__init__(
            cancel_grace=cancel_grace,
            client_info=client_info,
            ext_requests=ext_requests,
            ext_notifications=ext_notifications,
        )
        self.keep_history = keep_history
        self.client_fs = client_fs
        self.new_id = new_id or _new_message_id
        self.terminal_kill_grace = terminal_kill_grace
        self.agent_initialize: v1.InitializeResponse | None = None
        """The agent's v1 ``initialize`` answer, once the client initialized."""
        self.fs: SessionFileSystem | None = None
        """The file system the agent's ``fs/*`` calls use (``None`` with ``client_fs=False``)."""
        self.terminals: TerminalManager | None = None
        """The terminals the agent's ``terminal/*`` calls run (``None`` with ``client_fs=False``)."""
        self._display = _TerminalDisplay(self)

    # -- wiring ------------------------------------------------------------------------------------
    def _agent_attached(self, conn: ClientSideConnection) -> None:
        if self.client_fs:  # the StandardClient's batteries, rooted at each session's cwd
            self.fs = SessionFileSystem(conn.sessions)
            self.terminals = TerminalManager(
                conn, allowed_cwd="roots", kill_grace=self.terminal_kill_grace, on_output=self._display.output
            )

    def _back(self) -> _V1Back:
        return _V1Back(self)

    def _new_session(self) -> _V2Session:
        return _V2Session(view=V2View(new_id=self.new_id))

    async def wait_answered(self) -> None:
        """Wait until no turn the adapter runs for the client is waiting for the agent."""
        for session in list(self.sessions.values()):
            if session.turn is not None:
                await session.turn.done.wait()

    def _agent_offers(self, *path: str) -> bool:
        return self.agent_conn is not None and _has(self.agent_conn.agent_capabilities, *path)

    async def _update(
        self, session_id: str, update: Any, meta: Any = UNSET, extra: dict[str, Any] | None = None
    ) -> None:
        notification = v2.UpdateSessionNotification(
            session_id=session_id, update=update, meta=meta, extra_fields=dict(extra or {})
        )
        session = self.sessions.get(session_id)
        if session is not None and session.history is not None and not isinstance(update, _V2_STATES):
            session.history.append((update, meta, notification.extra_fields))
        await self._client.session_update(notification)

    # -- v2 agent surface --------------------------------------------------------------------------
    async def initialize(self, params: v2.InitializeRequest) -> v2.InitializeResponse:
        """v2 ``initialize`` → v1 ``initialize`` (rows L1, L1c, L2, L3; migration.mdx § Capability
        reorganization)."""
        try:
            info = _relay(params.info, v1.Implementation)
        except DecodeError:
            info = _relay(self.client_info, v1.Implementation)
        given = params.capabilities
        caps = client_caps_to_v1(
            given if isinstance(given, v2.ClientCapabilities) else v2.ClientCapabilities(),
            fs=self.client_fs,
            terminal=self.client_fs,
        )
        request = v1.InitializeRequest(
            protocol_version=1,
            client_info=info,
            client_capabilities=caps,
            meta=params.meta,
            extra_fields=params.extra_fields,
        )
        self._watch_cancels()
        answer: v1.InitializeResponse = await self._initialize_agent(request)
        assert self.agent_conn is not None
        self._stream_wire(self.agent_conn)
        agent_caps = (
            answer.agent_capabilities
            if isinstance(answer.agent_capabilities, v1.AgentCapabilities)
            else v1.AgentCapabilities()
        )
        methods = answer.auth_methods if isinstance(answer.auth_methods, list) else []
        return v2.InitializeResponse(
            protocol_version=2,
            info=_relay(answer.agent_info, v2.Implementation)
            if isinstance(answer.agent_info, v1.Implementation)
            else ADAPTER_INFO,
            capabilities=agent_caps_to_v2(agent_caps),
            auth_methods=[auth_method_to_v2(m) for m in methods],
            meta=answer.meta,
            extra_fields=answer.extra_fields,
        )

    async def auth_login(self, params: v2.LoginAuthRequest) -> v2.LoginAuthResponse:
        """v2 ``auth/login`` → v1 ``authenticate`` (row L3)."""
        request = v1.AuthenticateRequest(method_id=params.method_id, meta=params.meta, extra_fields=params.extra_fields)
        answer = await self._call("auth/login", lambda: self._agent.authenticate(request))
        result: v2.LoginAuthResponse = _relay(answer, v2.LoginAuthResponse)
        return result

    async def auth_logout(self, params: v2.LogoutAuthRequest) -> v2.LogoutAuthResponse:
        """v2 ``auth/logout`` → v1 ``logout`` (row L3; -32601 when the agent has no ``auth.logout``)."""
        result: v2.LogoutAuthResponse = await self._relayed(
            "auth/logout", params, v1.LogoutRequest, "logout", v2.LogoutAuthResponse
        )
        return result

    def _mcp_servers(self, servers: Any) -> list[Any] | None:
        """Row M1, v2 → v1 (v1 requires the list: ``[]`` when omitted)."""
        return [mcp_server_to_v1(s) for s in (servers if isinstance(servers, list) else [])]

    def _open(self, session_id: str, params: Any) -> _V2Session:
        session = self._session(session_id)
        session.cwd = params.cwd
        dirs = params.additional_directories
        session.additional_directories = list(dirs) if isinstance(dirs, list) else []
        return session

    @staticmethod
    def _seed(session: _V2Session, answer: Any) -> Any:
        """v1 ``modes`` / ``configOptions`` of a setup answer as v2's ``configOptions`` (L4, L10)."""
        modes = answer.modes if isinstance(answer.modes, v1.SessionModeState) else None
        options = answer.config_options if isinstance(answer.config_options, list) else []
        if modes is None and not isinstance(answer.config_options, list):
            session.view.seed()
            return UNSET
        return session.view.seed(modes=modes, config_options=options)

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        """v2 ``session/new`` → v1 ``session/new`` (rows L4, M1; v2 session-setup.mdx)."""
        request = self._setup_request(params, v1.NewSessionRequest, "session/new")
        answer = await self._call("session/new", lambda: self._agent.session_new(request))
        session = self._open(answer.session_id, params)
        if self.keep_history:
            session.history = []
        return v2.NewSessionResponse(
            session_id=answer.session_id,
            config_options=self._seed(session, answer),
            meta=answer.meta,
            extra_fields=answer.extra_fields,
        )

    async def session_resume(self, params: v2.ResumeSessionRequest) -> v2.ResumeSessionResponse:
        """v2 ``session/resume`` → v1 ``session/load`` (with ``replayFrom: start``: the replay
        projected, row L5) or ``session/resume`` (without: row L6; ``session/load`` with its replay
        not passed on when the agent cannot resume).  -32601 naming v1 when the agent has neither;
        -32602 for a ``replayFrom`` other than ``start``."""
        replay = params.replay_from
        if replay is not None and not isinstance(replay, (UnsetType, v2.StartReplayFrom)):
            detail = (
                f"replayFrom {getattr(replay, 'type', '?')!r}: only {{type: start}} (a v1 session/load) can be served"
            )
            raise RequestError(INVALID_PARAMS, "Invalid params", {"method": "session/resume", "detail": detail})
        start = isinstance(replay, v2.StartReplayFrom)
        can_load = self._agent_offers("loadSession")
        can_resume = self._agent_offers("sessionCapabilities", "resume")
        seen = self.sessions.get(params.session_id)
        if seen is not None and (seen.closed or seen.history is None or seen.turn is not None):
            seen = None
        if (start and not can_load) or (not start and not can_resume and seen is not None):
            if seen is None:
                what = "replay (loadSession)" if start else "resume or loadSession"
                raise _not_in(
                    1, "session/resume", f"the agent advertises no {what} and this adapter did not see the session"
                )
            return await self._resume_seen(params.session_id, seen, replay=start)
        if start or not can_resume:
            if not can_load:
                raise _not_in(1, "session/resume", "the agent advertises no resume or loadSession")
            request = self._setup_request(params, v1.LoadSessionRequest, "session/resume")
            session = self._open(params.session_id, params)
            session.quiet = not start
            if start:  # a replay starts the session's stream over
                session.view = V2View(new_id=self.new_id)
                session.history = [] if self.keep_history else None
            try:
                answer = await self._call("session/resume", lambda: self._agent.session_load(request))
            finally:
                session.quiet = False
        else:
            request = self._setup_request(params, v1.ResumeSessionRequest, "session/resume")
            session = self._open(params.session_id, params)
            answer = await self._call("session/resume", lambda: self._agent.session_resume(request))
        return v2.ResumeSessionResponse(
            config_options=self._seed(session, answer), meta=answer.meta, extra_fields=answer.extra_fields
        )

    async def _resume_seen(self, session_id: str, session: _V2Session, *, replay: bool) -> v2.ResumeSessionResponse:
        """``session/resume`` of a session this adapter opened and the agent still holds (it runs as
        long as the adapter), for an agent that cannot load or resume: the updates the adapter sent
        for it replayed when asked (v2 session-setup.mdx § Resuming Sessions), its config options."""
        if replay:
            for entry in list(session.history or ()):
                if isinstance(entry, dict):  # a streamed chunk, as sent
                    await self._send_wire({**entry, "sessionId": session_id})
                    continue
                update, meta, extra = entry
                notification = v2.UpdateSessionNotification(
                    session_id=session_id, update=update, meta=meta, extra_fields=dict(extra)
                )
                await self._client.session_update(notification)
        options = session.view.options
        return v2.ResumeSessionResponse(config_options=options if options else UNSET)

    async def session_list(self, params: v2.ListSessionsRequest) -> v2.ListSessionsResponse:
        """v2 ``session/list`` (baseline) → v1's when the agent advertises ``sessionCapabilities.list``
        (row L7); otherwise the sessions this adapter saw opened (filtered by ``cwd``; one page)."""
        if self._agent_offers("sessionCapabilities", "list"):
            result: v2.ListSessionsResponse = await self._relayed(
                "session/list", params, v1.ListSessionsRequest, "session_list", v2.ListSessionsResponse
            )
            return result
        seen = [
            v2.SessionInfo(
                session_id=session_id,
                cwd=session.cwd,
                additional_directories=session.additional_directories or UNSET,
            )
            for session_id, session in self.sessions.items()
            if session.cwd is not None
            and not session.closed
            and (not isinstance(params.cwd, str) or params.cwd == session.cwd)
        ]
        return v2.ListSessionsResponse(sessions=seen)

    async def session_close(self, params: v2.CloseSessionRequest) -> v2.CloseSessionResponse:
        """v2 ``session/close`` (baseline) → v1's when the agent advertises ``sessionCapabilities.close``
        (row L8); otherwise the adapter cancels the session's turn (v1 ``session/cancel``; its
        ``idle`` follows) and forgets the session."""
        session = self.sessions.get(params.session_id)
        if session is not None and session.turn is not None:
            await self._cancel(params.session_id, session.turn, _relay_cancel(params.session_id))
        if self._agent_offers("sessionCapabilities", "close"):
            result: v2.CloseSessionResponse = await self._relayed(
                "session/close", params, v1.CloseSessionRequest, "session_close", v2.CloseSessionResponse
            )
        else:
            if self.agent_conn is not None and params.session_id in self.agent_conn.sessions:
                self.agent_conn.sessions.end(params.session_id, "session/close")  # its fs roots and terminals
            result = v2.CloseSessionResponse()
        self._forget(params.session_id)
        return result

    async def session_delete(self, params: v2.DeleteSessionRequest) -> v2.DeleteSessionResponse:
        """v2 ``session/delete`` → v1's (row L9; -32601 naming v1 when the agent lacks it)."""
        result: v2.DeleteSessionResponse = await self._relayed(
            "session/delete", params, v1.DeleteSessionRequest, "session_delete", v2.DeleteSessionResponse
        )
        self._forget(params.session_id)
        return result

    async def session_set_config_option(self, params: Any) -> v2.SetSessionConfigOptionResponse:
        """v2 ``session/set_config_option`` → v1 ``session/set_mode`` on the mode option made from
        the agent's ``modes`` (row L11), else v1's (row L10: ``type: "id"`` untagged)."""
        session = self._session(params.session_id)
        if params.config_id == session.view.modes_option_id:
            if not isinstance(params, v2.IdSetSessionConfigOptionRequest):
                detail = f"the mode option {params.config_id!r} takes a mode id (type 'id')"
                raise RequestError(
                    INVALID_PARAMS, "Invalid params", {"method": "session/set_config_option", "detail": detail}
                )
            request = v1.SetSessionModeRequest(
                session_id=params.session_id,
                mode_id=params.value,
                meta=params.meta,
                extra_fields=params.extra_fields,
            )
            mode_answer = await self._call("session/set_config_option", lambda: self._agent.session_set_mode(request))
            (changed,) = session.view.project(v1.CurrentModeUpdateSessionUpdate(current_mode_id=params.value))
            return v2.SetSessionConfigOptionResponse(config_options=changed.config_options, meta=mode_answer.meta)
        wire = converter.unstructure(params)
        if wire.get("type") == "id":
            del wire["type"]
        try:
            v1_request = _structure(wire, v1.SetSessionConfigOptionRequest)
        except DecodeError as exc:
            raise _untranslatable("session/set_config_option", exc) from None
        answer = await self._call(
            "session/set_config_option", lambda: self._agent.session_set_config_option(v1_request)
        )
        (update,) = session.view.project(v1.ConfigOptionUpdateSessionUpdate(config_options=answer.config_options))
        return v2.SetSessionConfigOptionResponse(config_options=update.config_options, meta=answer.meta)

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        """v2 ``session/prompt`` → v1 ``session/prompt`` (rows T1-T3; v2 prompt-lifecycle.mdx): the
        receipt at once with a generated ``messageId``, after the ``user_message`` that carries it;
        a background task sends ``running``, waits for the v1 answer and sends ``idle`` with its
        stop reason (a v1 error: ``stopReason: "error"`` and the error).  -32600 while a turn of the
        session runs; -32602 for a prompt with no v1 form."""
        session = self._session(params.session_id)
        if session.turn is not None:
            detail = "a prompt turn of this session is still running (its agent speaks v1: one turn at a time)"
            raise RequestError(INVALID_REQUEST, "Invalid request", {"method": "session/prompt", "detail": detail})
        try:
            request = _relay(params, v1.PromptRequest)
        except DecodeError as exc:
            raise _untranslatable("session/prompt", exc) from None
        if self.client_conn is None:
            raise RuntimeError("the adapter has no client connection yet")
        turn = session.turn = _V2Turn(message_id=self.new_id())
        session.view.new_turn()
        try:
            await self._update(
                params.session_id, v2.UserMessageSessionUpdate(message_id=turn.message_id, content=list(params.prompt))
            )
            self.client_conn.start_soon(
                self._run_turn, params.session_id, session, turn, request, name=f"adapt turn {params.session_id}"
            )
        except BaseException:
            session.turn = None
            turn.done.set()
            raise
        return v2.PromptResponse(message_id=turn.message_id)

    async def _run_turn(self, session_id: str, session: _V2Session, turn: _V2Turn, request: v1.PromptRequest) -> None:
        """The v2 turn of one v1 ``session/prompt``: ``running``, the v1 request, ``idle``.  The idle
        says ``cancelled`` when :attr:`cancel_grace` ran out after a ``session/cancel`` (or the
        client left), ``error`` with -32603 when the adapter failed (logged)."""
        idle = v2.IdleStateUpdateSessionUpdate(stop_reason="cancelled")
        answered = False
        try:
            with turn.scope:
                await self._update(session_id, v2.RunningStateUpdateSessionUpdate())
                # a cancel waiting for the prompt (_cancel) runs once this task waits for the answer:
                # the request is queued to the agent by then
                turn.prompt_sent.set()
                try:
                    response = await self._call("session/prompt", lambda: self._agent.session_prompt(request))
                except RequestError as exc:
                    idle = error_to_v2(exc)
                else:
                    idle = stop_reason_to_v2(response)
                answered = True
        except ConnectionClosed:  # the client is gone: nobody to tell
            pass
        except Exception:
            log.exception("session %s: the adapter failed running the turn", session_id)
            idle = error_to_v2(RequestError(INTERNAL_ERROR, "Internal error", {"detail": "the adapter failed"}))
            answered = True
        finally:
            turn.prompt_sent.set()  # or never will be: a cancel waiting for it goes now
            with trio.CancelScope(shield=True):
                if not answered and not turn.cancel_sent:  # the client left: the agent stops its turn too
                    with trio.move_on_after(self.cancel_grace):
                        await self._tell_cancel(session_id, turn)
                try:
                    with trio.move_on_after(self.cancel_grace):
                        await self._update(session_id, idle)
                except ConnectionClosed:
                    pass
                if session.turn is turn:  # after the idle: the session's next turn comes after it
                    session.turn = None
                    if session.closed and self.sessions.get(session_id) is session:
                        del self.sessions[session_id]
                turn.done.set()

    async def _tell_cancel(self, session_id: str, turn: _V2Turn) -> None:
        turn.cancel_sent = True
        await self._send_cancel(session_id, _relay_cancel(session_id))
        turn.cancel_queued.set()

    async def _cancel(self, session_id: str, turn: _V2Turn, notification: v1.CancelNotification) -> None:
        """Tell the agent to cancel ``turn``; its ``idle`` waits for the v1 answer at most
        :attr:`cancel_grace` seconds more."""
        turn.scope.deadline = min(turn.scope.deadline, trio.current_time() + self.cancel_grace)
        turn.cancel_sent = True
        if not turn.prompt_sent.is_set():  # a cancel right after the prompt: it must not overtake it
            with trio.move_on_after(self.cancel_grace):
                await turn.prompt_sent.wait()
        await self._send_cancel(session_id, notification)
        turn.cancel_queued.set()

    async def session_cancel(self, params: v2.CancelSessionNotification) -> None:
        """v2 ``session/cancel`` → v1's (row T4); the turn's ``idle`` follows the agent's answer."""
        session = self.sessions.get(params.session_id)
        notification = _relay(params, v1.CancelNotification)
        if session is not None and session.turn is not None:
            await self._cancel(params.session_id, session.turn, notification)
        elif self.agent_conn is not None:
            await self._send_cancel(params.session_id, notification)

    # -- v1 agent → v2 client ----------------------------------------------------------------------
    async def _forward_wire(self, params: _WireUpdate) -> None:
        """A streamed chunk read as wire JSON: sent to the v2 client as it was read but for its
        ``messageId`` when its session's view can (:meth:`V2View.project_wire`: a text chunk,
        unknown fields and ``_meta`` included), else decoded and sent the typed way."""
        raw = params.raw
        session = self._session(params.session_id)
        update = session.view.project_wire(params.update) if _meta_is_object(raw) else None
        if update is None:
            typed = params.typed()
            if typed is not None:
                await self._forward(typed)
            return
        if session.quiet:  # a resume without replay served by v1's session/load
            return
        wire = dict(raw)
        wire["update"] = update
        if session.history is not None:
            session.history.append(wire)
        await self._send_wire(wire)

    async def _forward(self, params: v1.SessionNotification) -> None:
        """One v1 ``session/update`` as the v2 updates its session's view projects it to; each
        carries the notification's ``_meta`` and unknown fields."""
        session = self._session(params.session_id)
        try:
            out = session.view.project(params.update)
        except VersionError as exc:
            log.warning("session %s: not sent to the v2 client: %s", params.session_id, exc)
            return
        if session.quiet:  # a resume without replay served by v1's session/load
            return
        for one in out:
            await self._update(params.session_id, one, params.meta, params.extra_fields)

    async def _asking(
        self, session_id: str, ask: Callable[[], Any], cancelled: Callable[[Any], bool] = lambda _: False
    ) -> Any:
        """``await ask()`` (a question to the client) between ``requires_action`` and ``running``
        (row T22; v2 prompt-lifecycle.mdx), when a turn of the session runs; no ``running`` once
        the turn is being cancelled (its ``idle`` comes next), nor after an answer ``cancelled``
        says so (a v2 client answers its pending questions before it sends ``session/cancel``)."""
        session = self.sessions.get(session_id)
        running = session is not None and session.turn is not None
        if running:
            await self._update(session_id, v2.RequiresActionStateUpdateSessionUpdate())
        answer = await ask()
        turn = session.turn if session is not None else None
        await self._cancel_first(session)
        if running and turn is not None and not turn.cancel_sent and not cancelled(answer):
            await self._update(session_id, v2.RunningStateUpdateSessionUpdate())
        return answer

    async def _permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        request = permission_to_v2(params)
        answer = await self._asking(
            params.session_id,
            lambda: self._client.session_request_permission(request),
            lambda a: isinstance(a.outcome, v2.CancelledRequestPermissionOutcome),
        )
        return v1.RequestPermissionResponse(
            outcome=outcome_to_v1(answer.outcome, params.options), meta=answer.meta, extra_fields=answer.extra_fields
        )

    async def _elicit(self, params: Any) -> Any:
        """v1 ``elicitation/create`` → v2's (row T19); -32601 when the v2 client did not offer it."""
        request = elicitation_to_v2(params)
        session_id = getattr(params, "session_id", "")
        answer = await self._elicit_client(
            lambda: self._asking(session_id, lambda: self._client.elicitation_create(request))
        )
        return _relay(answer, v1.CreateElicitationResponse)

    def _batteries(self, method: str) -> tuple[SessionFileSystem, TerminalManager]:
        if self.fs is None or self.terminals is None:
            raise RequestError(METHOD_NOT_FOUND, "Method not found", {"method": method, "detail": DISABLED_FS_DETAIL})
        return self.fs, self.terminals


def _relay_cancel(session_id: str) -> v1.CancelNotification:
    return v1.CancelNotification(session_id=session_id)


class _V1Back(_Back):
    """The v1 client-side handler facing the agent: each method hands over to its :class:`V2Front`
    (``fs/*`` and ``terminal/*`` to its batteries)."""

    front: V2Front

    async def session_update(self, params: v1.SessionNotification | _WireUpdate) -> None:
        """v1 ``session/update`` → zero or more v2 ``session/update`` (the session's ``V2View``)."""
        if isinstance(params, _WireUpdate):
            await self.front._forward_wire(params)
            return
        await self.front._forward(params)

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        """Read inside the session's roots (:class:`~acp_trio.fs.SessionFileSystem`)."""
        fs, _ = self.front._batteries("fs/read_text_file")
        return await fs.fs_read_text_file(params)

    async def fs_write_text_file(self, params: v1.WriteTextFileRequest) -> v1.WriteTextFileResponse:
        """Write atomically inside the session's roots (:class:`~acp_trio.fs.SessionFileSystem`)."""
        fs, _ = self.front._batteries("fs/write_text_file")
        return await fs.fs_write_text_file(params)

    async def terminal_create(self, params: v1.CreateTerminalRequest) -> v1.CreateTerminalResponse:
        """Start a command in the session's roots (:class:`~acp_trio.terminals.TerminalManager`)."""
        _, terminals = self.front._batteries("terminal/create")
        answer = await terminals.terminal_create(params)
        self.front._display.created(terminals.terminals[answer.terminal_id])
        return answer

    async def terminal_output(self, params: v1.TerminalOutputRequest) -> v1.TerminalOutputResponse:
        """The terminal's output so far."""
        _, terminals = self.front._batteries("terminal/output")
        return await terminals.terminal_output(params)

    async def terminal_wait_for_exit(self, params: v1.WaitForTerminalExitRequest) -> v1.WaitForTerminalExitResponse:
        """Wait for the command to exit."""
        _, terminals = self.front._batteries("terminal/wait_for_exit")
        return await terminals.terminal_wait_for_exit(params)

    async def terminal_kill(self, params: v1.KillTerminalRequest) -> v1.KillTerminalResponse:
        """Kill the command; the terminal stays valid."""
        _, terminals = self.front._batteries("terminal/kill")
        return await terminals.terminal_kill(params)

    async def terminal_release(self, params: v1.ReleaseTerminalRequest) -> v1.ReleaseTerminalResponse:
        """Kill the command if it runs and forget the terminal."""
        _, terminals = self.front._batteries("terminal/release")
        return await terminals.terminal_release(params)


# -- rows the adapter needs beyond _mapping --------------------------------------------------------
def _auth_methods_to_v1(methods: Sequence[Any]) -> list[Any]:
    """Row L3, v2 → v1: the agent's auth methods (:func:`~acp_trio._mapping.auth_method_to_v1`);
    one of a type v1 lacks is left out with a logged warning (the others stay usable)."""
    out = []
    for method in methods:
        try:
            out.append(auth_method_to_v1(method))
        except VersionError as exc:
            log.warning("auth method not offered to the v1 client: %s", exc)
    return out


# -- entry points ------------------------------------------------------------------------------------
async def serve_v2_agent_to_v1_client(
    agent_argv: Sequence[str],
    *,
    cancel_grace: float = DEFAULT_CANCEL_GRACE,
    ext_requests: Sequence[str] = (),
    ext_notifications: Sequence[str] = (),
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    **options: Any,
) -> None:
    """Serve the v2-only agent ``agent_argv`` (program and arguments, no shell) to a v1 client on
    this process's stdin/stdout, until the client closes stdin.

    The agent is started with :func:`acp_trio.spawn_agent` (its own process group, stopped with
    the SIGTERM/SIGKILL ladder when the client leaves; ``env``/``cwd`` as there); the client side
    is :func:`acp_trio.transports.stdio.serve_agent_stdio`.  ``cancel_grace``, ``ext_requests``,
    ``ext_notifications``: see :class:`V1Front`.  ``options``: for both connections
    (``max_message_size``, ``eof_grace``, ...).
    Raises ``ValueError`` for an empty ``agent_argv`` and ``OSError`` when it cannot start.
    """
    if not agent_argv:
        raise ValueError("give the agent's command line: python -m acp_trio.adapt --speak 1 -- AGENT_CMD [ARG ...]")
    front = V1Front(cancel_grace=cancel_grace, ext_requests=ext_requests, ext_notifications=ext_notifications)
    await _serve_front(front, agent_argv, env, cwd, options)


async def serve_v1_agent_to_v2_client(
    agent_argv: Sequence[str],
    *,
    client_fs: bool = True,
    cancel_grace: float = DEFAULT_CANCEL_GRACE,
    ext_requests: Sequence[str] = (),
    ext_notifications: Sequence[str] = (),
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    **options: Any,
) -> None:
    """Serve the v1-only agent ``agent_argv`` (program and arguments, no shell) to a v2 client on
    this process's stdin/stdout, until the client closes stdin.

    As :func:`serve_v2_agent_to_v1_client`, the other way round (:class:`V2Front`): the agent is
    started with :func:`acp_trio.spawn_agent`, stopped when the client leaves; when the agent is
    gone its running turns end ``idle`` with ``stopReason: "error"`` (-32603) and the client is let
    go.  ``client_fs``: answer the agent's ``fs/*`` and ``terminal/*`` inside each session's ``cwd``
    (default) or refuse them (-32601).  ``options``: for both connections.  Raises ``ValueError``
    for an empty ``agent_argv`` and ``OSError`` when it cannot start.
    """
    if not agent_argv:
        raise ValueError("give the agent's command line: python -m acp_trio.adapt --speak 2 -- AGENT_CMD [ARG ...]")
    front = V2Front(
        client_fs=client_fs, cancel_grace=cancel_grace, ext_requests=ext_requests, ext_notifications=ext_notifications
    )
    await _serve_front(front, agent_argv, env, cwd, options)


async def _serve_front(
    front: V1Front | V2Front,
    agent_argv: Sequence[str],
    env: dict[str, str] | None,
    cwd: str | os.PathLike[str] | None,
    options: dict[str, Any],
) -> None:
    """Both directions' stdio service: ``front`` faces the client on this process's stdio."""
    from .transports.stdio import serve_agent_stdio

    await _run_front(
        front,
        agent_argv,
        lambda: serve_agent_stdio(front, **options),
        closing="the agent behind the adapter closed its connection",
        env=env,
        cwd=cwd,
        **options,
    )


async def _run_front(
    front: V1Front | V2Front,
    agent_argv: Sequence[str],
    serve_client: Callable[[], Awaitable[object]],
    *,
    closing: str,
    started: Callable[[Any], object] | None = None,
    **spawn_options: Any,
) -> None:
    """Run ``front`` between a client and the agent ``agent_argv`` (spawned behind it with
    :func:`acp_trio.spawn_agent` and ``spawn_options``): ``serve_client()`` serves the client's
    side with ``front`` as its handler (stdio here, a remote connection in the bridge) and returns
    when the client left; the agent is then stopped.  When the agent is gone first, its pending
    prompts are answered (an error) before the client's connection is closed with ``closing``.
    ``started(agent)``: called with the agent's connection once it runs (the bridge logs its pid).
    The body's exceptions come out as themselves."""
    from ._nursery import owned_nursery
    from .transports.stdio import spawn_agent

    async with (
        spawn_agent(agent_argv[0], agent_argv[1:], client=front.agent_handlers(), **spawn_options) as agent,
        owned_nursery() as nursery,
    ):
        if started is not None:
            started(agent)

        async def client_side() -> None:
            await serve_client()
            nursery.cancel_scope.cancel()  # the client left: stop the agent (spawn_agent's exit)

        nursery.start_soon(client_side)
        await agent.wait_closed()
        with trio.move_on_after(agent.connection.close_timeout):
            await front.wait_answered()
            await trio.lowlevel.checkpoint()
        if front.client_conn is not None:
            await front.client_conn.connection.aclose(closing)
        nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m acp_trio.adapt --speak 1 -- AGENT_CMD [ARG ...]``: a v2-only agent for a v1
    client on stdio (:func:`serve_v2_agent_to_v1_client`); ``--speak 2 [--no-client-fs]``: a
    v1-only agent for a v2 client (:func:`serve_v1_agent_to_v2_client`).  Exit 2 with one line on
    stderr for a usage error or an agent command that cannot start."""
    parser = argparse.ArgumentParser(
        prog="python -m acp_trio.adapt",
        description="Serve an ACP agent that speaks one protocol version to a client that speaks the other.",
    )
    parser.add_argument("--speak", type=int, choices=(1, 2), required=True, help="the version spoken to the client")
    parser.add_argument("--cancel-grace", type=float, default=DEFAULT_CANCEL_GRACE, help="seconds (default 5)")
    parser.add_argument(
        "--ext-request", action="append", default=[], metavar="_NAME", help="an extension request to forward"
    )
    parser.add_argument(
        "--ext-notification", action="append", default=[], metavar="_NAME", help="an extension notification to forward"
    )
    parser.add_argument(
        "--no-client-fs",
        action="store_true",
        help="--speak 2: refuse the agent's fs/* and terminal/* (-32601), not answer them in the session's cwd",
    )
    parser.add_argument("agent", nargs=argparse.REMAINDER, help="-- AGENT_CMD [ARG ...]")
    args = parser.parse_args(argv)
    agent = args.agent[1:] if args.agent[:1] == ["--"] else args.agent
    if not agent:
        parser.error(f"give the agent's command after --: --speak {args.speak} -- AGENT_CMD [ARG ...]")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    for name in (*args.ext_request, *args.ext_notification):
        if not name.startswith("_"):
            parser.error(f"extension method names start with '_': {name!r}")
    if args.no_client_fs and args.speak == 1:
        parser.error("--no-client-fs is for --speak 2 (a v2 client has no file system; a v1 one serves its own)")
    serve = serve_v2_agent_to_v1_client if args.speak == 1 else serve_v1_agent_to_v2_client
    extra: dict[str, Any] = {"client_fs": not args.no_client_fs} if args.speak == 2 else {}
    try:
        trio.run(
            lambda: serve(
                agent,
                cancel_grace=args.cancel_grace,
                ext_requests=args.ext_request,
                ext_notifications=args.ext_notification,
                **extra,
            )
        )
    except OSError as exc:  # the agent command cannot start: checked before anything runs
        parser.exit(2, f"python -m acp_trio.adapt: cannot start the agent: {exc}\n")


if __name__ == "__main__":
    main()

"""The session host: ACP sessions owned by a host object rather than by a client connection.

Contract: an ACP-aware router between client connections and agent instances, on NDJSON lines.
Each client connection gets a *home* agent instance (an :class:`~acp_trio.AgentSideConnection`
over in-memory streams, running the agent author's class unchanged) at its ``initialize``.  A
session made or loaded there is *live* in the host, owned by that instance; clients attach to it
(``session/new``, ``session/load``, ``session/resume``) and detach when their connection ends,
while its turn keeps running.  Messages are forwarded verbatim except the ids the router rewrites
(every client->agent request gets an instance-wide id; every agent->client request one id per
client copy), the ``_meta`` number it adds to each ``session/update``, and the ``initialize``
answer, to which it adds its attach token and what it serves itself (v1 ``loadSession``,
``sessionCapabilities.resume``).  It knows the
envelopes and the session-scoped methods of ACP v1 and v2, nothing of their payloads beyond
``sessionId``, ``state_update``, the setup answers' ``modes``/``configOptions``/``availableCommands``
and the updates that change them, and each client's ``initialize`` capabilities (an agent request
goes only to the attached clients that advertised what it needs).  The rules are in ``docs/site/guides/host.md``.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import math
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, Literal

import orjson
import trio
import trio.testing

from .._capabilities import CapabilityError, advertised, check_client_call, check_client_call_v2
from .._core import (
    DEFAULT_MAX_MESSAGE_SIZE,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    RESOURCE_NOT_FOUND,
    LineFramer,
    RequestError,
)
from .._nursery import owned_nursery
from .._roles import AgentSideConnection, ClientSideConnection
from ..session_store import SqliteSessionStore
from ._forward import PEER_META_KEY, Remote, peer_principal
from ._journal import Journal
from ._ownership import MOVED_REASON, OWNED_REASON, TAKEN_OVER_REASON, HostOwnership, owner_data

log = logging.getLogger("acp_trio.host")

UPDATE_META_KEY = "acp-trio/update"
"""``_meta`` key of a ``session/update`` sent by the host: its number in the session's journal
(extensibility.mdx: custom keys go in ``_meta``, named after the implementation)."""
CURRENT_META_KEY = "acp-trio/current"
"""``_meta`` key (``true``) of the ``state_update`` the host sends on ``session/resume``: the
session's current state, not a journaled update (it has no number)."""
LAST_META_KEY = "acp-trio/lastUpdate"
"""``_meta`` key of a ``session/load``/``session/resume`` answer given by the host: the number of
the last update of the session when the client went live (0: none yet)."""
CURSOR_TYPE = "_acp_trio_from"
"""The ``replayFrom`` type of the host's cursor: ``{"type": "_acp_trio_from", "update": N}``
replays updates N, N+1, ... (inclusive, as session-setup.mdx says of replay cursors; schema
``ReplayFromOther``: types beginning with ``_`` are reserved for implementations)."""
TURN_ENDED = "_acp_trio/turn_ended"
"""Extension notification (v1) the host sends to the clients attached to a session, other than
the one that prompted, when a ``session/prompt`` answer ends a turn: ``{"sessionId", "stopReason"}``,
or ``{"sessionId", "error"}`` (the JSON-RPC error object) when the answer was an error.  A v1
client that attaches later (``session/load``, ``session/resume``) while no turn runs gets the last
turn's, after its replay and before the answer."""
TURN_STARTED = "_acp_trio/turn_started"
"""Extension notification (v1, hosts with ownership only) the host journals, numbered, when a
``session/prompt`` starts a turn: ``{"sessionId"}``.  With :data:`TURN_ENDED`, journaled too on
such hosts, it lets the host that takes a session over see that a v1 turn was running (v2 has
``state_update``) and end it where the clients see it."""

SESSION_ENDED = "_acp_trio/session_ended"
"""Extension notification (v1 and v2) the host sends to the clients attached to a live session that
ends under them, before it detaches them: ``{"sessionId", "reason", "detail"}``.  ``reason`` is
``"agent instance ended"`` (the agent serving it exited or closed its connection, or the host failed
to handle its output: a journal append that raised) or ``"session closed"`` (another attached client
closed or deleted it); ``detail`` says more (the error, when there is one).  The session is no longer
live: its next request gets -32002.  Neither version's schema has a notification for a session that
ends (v2 ``session-setup.mdx`` "Closing Active Sessions" is the client's own ``session/close``)."""
SESSION_ENDED_REASON = "agent instance ended"
"""``reason`` of :data:`SESSION_ENDED` and ``data.reason`` of the -32603 answers when a session's
agent instance ended."""

ATTACH_META_KEY = "acp-trio/attach"
"""``_meta`` key of the host's ``initialize`` answer: a token naming the connection's agent
instance.  A client that reconnects with it in its ``initialize`` params' ``_meta`` gets that
instance as its home again (no new instance), if it still runs and the principal is the same."""
DRAINING_REASON = "draining"
"""``data.reason`` of the -32603 answer to a ``session/new`` (or ``session/fork``, or the
``session/load``/``session/resume`` of a session not live) while the host drains
(:meth:`SessionHost.drain`)."""
ATTACHED_META_KEY = "acp-trio/attached"
"""``_meta`` key (a boolean) of an ``initialize`` answer to a client that sent an attach token:
whether it was honoured (``false``: an unknown or ended instance's token, or another principal's;
the client got a new instance, and its token)."""


# requests a client sends to its home instance when the session is not live in the host
_HOME_SESSION_METHODS = frozenset({"session/load", "session/resume", "session/close", "session/delete"})
# answers that make a session live (the session id in the answer, or in the request)
_OPENING = frozenset({"session/new", "session/load", "session/resume", "session/fork"})
_ENDING = frozenset({"session/close", "session/delete"})
_DECLINE: dict[str, dict[str, Any]] = {
    "session/request_permission": {"outcome": {"outcome": "cancelled"}},
    "elicitation/create": {"action": "decline"},
}

Policy = Literal["wait", "reject", "cancel"]


def _event(event: str, message: str, client: _Client, session_id: str, *args: Any) -> None:
    """Log ``event`` about ``client`` and a session on ``acp_trio.host`` (INFO), its fields in the
    record's ``extra`` (``event``, ``session_id``, ``connection_id``, ``principal``) for a structured log."""
    if log.isEnabledFor(logging.INFO):
        fields = {
            "event": event,
            "session_id": session_id,
            "connection_id": client.connection_id,
            "principal": client.principal,
        }
        log.info(message, client.connection_id, session_id, *args, extra=fields)


def _is_lease_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is the PostgreSQL store's ``LeaseLostError`` (imported only with the store)."""
    return type(exc).__name__ == "LeaseLostError" and type(exc).__module__ == "acp_trio._store_pg"


def _dumps(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message)


def _error(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    """An error response line, without its newline (the error object is :class:`RequestError`'s)."""
    return _dumps({"jsonrpc": "2.0", "id": request_id, "error": RequestError(code, message, data).to_wire()})


def _with_meta(message: dict[str, Any], key: str, value: Any) -> bytes:
    """``message`` (a parsed notification or response) with ``_meta[key] = value`` on its
    params (or result), re-encoded; the parsed message itself is left alone."""
    field = "params" if "method" in message else "result"
    body = message.get(field)
    body = dict(body) if type(body) is dict else {}
    meta = body.get("_meta")
    meta = dict(meta) if type(meta) is dict else {}
    meta[key] = value
    body["_meta"] = meta
    return _dumps({**message, field: body})


DEFAULT_MAX_CLIENT_BACKLOG_BYTES = 64 * 1024 * 1024
"""Bytes of messages that may wait for one client connection (64 MiB, as ``AcpApp``'s
``max_buffered_bytes``): see :func:`open_session_host`'s ``max_client_backlog_bytes``."""
DEFAULT_JOURNAL_MAX_UPDATES = 100_000
"""Updates per session the default journal of :func:`open_session_host` holds (the oldest dropped
beyond), ``SqliteSessionStore.journal()``'s default."""
DEFAULT_JOURNAL_MAX_BYTES = 64 << 20
"""Bytes of update lines per session the default journal holds (64 MiB), ``SqliteSessionStore.journal()``'s
default."""
_DEFAULT_JOURNAL_FILE = "journal.sqlite3"  # the default journal's file, in the host's temporary directory
_REPLAY_SLICE = 64  # replayed updates prepared between two checkpoints (the first reach the client sooner)
_REPLAY_FIRST_PAGE = 64  # updates of a replay's first journal read (the first reach the client sooner)
_REPLAY_PAGE = 1000  # updates of each later read
_WRITE_BATCH = 1 << 20  # bytes of lines a client's writer joins into one send (a longer line goes alone)


class _Client:
    """One client connection being served."""

    def __init__(self, host: SessionHost, connection_id: str, principal: Any) -> None:
        self.max_backlog = host.max_client_backlog_bytes
        self.backlog = 0  # bytes put and not written yet (queued, or in the send under way)
        self.written = trio.lowlevel.ParkingLot()  # unparked after each send to the client
        self.scope = trio.CancelScope()  # serve_streams' own: cancelled when the client falls too far behind
        self.connection_id = connection_id
        self.principal = principal
        self.send, self.receive = trio.open_memory_channel[bytes](math.inf)
        self.home: _Instance | None = None
        self.version: int | None = None
        self.init_params: Any = None  # its initialize params (wire JSON): its capabilities
        self.sessions: set[str] = set()
        self.attaching: dict[str, list[tuple[int, bytes]]] = {}
        # per session, the number of the last update sent: a fan-out that comes after the replay
        # already gave it (its journal append was visible to the replay's read before it returned) is skipped
        self.delivered: dict[str, int] = {}
        self.ids = itertools.count(1)
        self.questions: dict[int, _Question] = {}  # router id -> question
        self.calls: dict[Any, tuple[_Instance, int]] = {}  # the client's request id -> its router id
        self.remotes: dict[str, Remote] = {}  # sessions forwarded to their owner host, by session id
        self.peer_questions: dict[int, tuple[Remote, Any]] = {}  # router id -> an owner's request and its id
        self.gone = False

    async def room(self, size: int) -> None:
        """Wait until ``size`` more bytes fit in the backlog (or nothing waits, or the client is
        gone); no checkpoint when they fit now.  For a replay, which may be longer than the bound."""
        while (
            not self.gone and self.max_backlog is not None and self.backlog and self.backlog + size > self.max_backlog
        ):
            await self.written.park()

    def put(self, line: bytes) -> None:
        """Queue ``line`` for the client.  A line past ``max_client_backlog_bytes`` of lines not
        written yet ends the connection (which detaches it), unless nothing else waits: one
        line, however long, always goes."""
        if self.gone:
            return
        waiting = self.backlog
        self.backlog = waiting + len(line) + 1
        if waiting and self.max_backlog is not None and self.backlog > self.max_backlog:
            log.warning(
                "client %s: more than %d bytes wait for it (max_client_backlog_bytes): it is disconnected, "
                "which detaches it",
                self.connection_id,
                self.max_backlog,
            )
            self.gone = True
            self.scope.cancel()
            self.receive.close()  # what waited for it is let go now
            return
        self.send.send_nowait(line)


class _Call:
    """A request forwarded to an agent instance, under a router id."""

    __slots__ = ("client", "client_id", "method", "on_answer", "params")

    def __init__(
        self,
        client: _Client | None,
        client_id: Any,
        method: str,
        params: Any,
        on_answer: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> None:
        self.client = client
        self.client_id = client_id
        self.method = method
        self.params = params
        self.on_answer = on_answer


class _Question:
    """A request an agent instance sent to its client(s): one copy per client it went to."""

    def __init__(self, instance: _Instance, message: dict[str, Any], session_id: str | None) -> None:
        self.instance = instance
        self.agent_id = message["id"]
        self.method: str = message["method"]
        self.message = message
        self.session_id = session_id
        self.copies: dict[_Client, int] = {}
        self.answered = False
        self.timer: trio.CancelScope | None = None


class _Session:
    def __init__(self, session_id: str, instance: _Instance, principal: Any) -> None:
        self.id = session_id
        self.instance = instance
        self.principal = principal
        self.clients: set[_Client] = set()
        self.setup: dict[str, Any] = {}
        self.state: dict[str, Any] = {"sessionUpdate": "state_update", "state": "idle"}
        self.prompting: _Client | None = None  # a session/prompt in flight (v1: the turn), and who sent it
        self.prompt_gone = False  # the prompting client left
        self.questions: list[_Question] = []
        self.loading: _Client | None = None  # the agent is loading it for this client: not live yet
        self.detached_at: float | None = None
        self.ttl: trio.CancelScope | None = None
        self.last = 0  # the number of the last update journaled
        self.states = 0  # state_update notifications read
        self.states_at_prompt = 0
        self.turn_ended: dict[str, Any] | None = None  # v1: the last turn's TURN_ENDED params, until a new prompt
        self.epoch: int | None = None  # its ownership lease's epoch (HostOwnership), None: none held
        self.claimed_at = 0.0  # trio.current_time() when the lease was claimed
        self.quiet = False  # being taken over: the agent's own replay and state while it loads are dropped

    @property
    def running(self) -> bool:
        return self.prompting is not None or self.state.get("state") not in (None, "idle")


class _Instance:
    """One agent instance, its input, and the requests in flight to it."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.send, self.receive = trio.open_memory_channel[bytes](math.inf)
        self.version: int | None = None
        self.home_clients: set[_Client] = set()
        self.sessions: set[str] = set()
        self.ids = itertools.count(1)
        self.calls: dict[int, _Call] = {}
        self.questions: dict[Any, _Question] = {}
        self.ended = False
        self.closing = False
        self.end_detail = "its output ended (the agent exited or closed its connection)"  # why it ended
        self.principal: Any = None  # of the client whose initialize made it
        self.token_hash: bytes | None = None  # sha256 of its attach token, once it answered initialize
        self.initialized: dict[str, Any] | None = None  # its first initialize answer (the result), as the host gave it
        self.agent_capabilities: Any = None  # its last initialize answer's capabilities, as the agent gave them


class SessionInfo:
    """What the host knows of one live session (a snapshot: see :meth:`SessionHost.sessions`)."""

    __slots__ = ("attached", "detached_since", "last_update", "pending_requests", "running", "session_id", "state")

    def __init__(self, session: _Session) -> None:
        self.session_id: str = session.id
        self.attached: int = len(session.clients)
        """Client connections attached now."""
        self.state: str = str(session.state.get("state", "idle"))
        """The last ``state_update`` state (v2), ``"idle"`` before any."""
        self.running: bool = session.running
        """A turn runs (v1: a ``session/prompt`` is unanswered; v2: not ``idle``, or a prompt in flight)."""
        self.last_update: int = session.last
        """The number of the last journaled update (0: none)."""
        self.detached_since: float | None = session.detached_at
        """``trio.current_time()`` when the last client detached, ``None`` while one is attached."""
        self.pending_requests: int = sum(1 for q in session.questions if not q.answered)
        """Agent->client requests of the session not answered yet."""

    def __repr__(self) -> str:
        return (
            f"SessionInfo(session_id={self.session_id!r}, attached={self.attached}, state={self.state!r}, "
            f"last_update={self.last_update}, pending_requests={self.pending_requests})"
        )


class SessionHost:
    """Sessions owned by a host, not by a connection (made by :func:`open_session_host`).

    Serve each client connection with :meth:`serve_streams` (``AcpApp(serve_streams=host.serve_streams)``
    over WebSocket and Streamable HTTP) or :meth:`connect` (in memory).  See the module docstring
    and ``docs/site/guides/host.md`` for the rules.
    """

    def __init__(
        self,
        agent_factory: Any,
        nursery: trio.Nursery,
        *,
        journal: Journal,
        detached_ttl: float | None,
        max_detached_sessions: int | None,
        unattended_timeout: float | None,
        unattended_policy: Policy,
        connection_options: dict[str, Any],
        serve_agent: Callable[[trio.abc.HalfCloseableStream], Awaitable[None]] | None = None,
        max_client_backlog_bytes: int | None = None,
        ownership: HostOwnership | None = None,
    ) -> None:
        self.max_client_backlog_bytes = max_client_backlog_bytes
        self.ownership = ownership
        """The host's :class:`~acp_trio.host.HostOwnership` (leases in PostgreSQL), or ``None``."""
        self.agent_factory = agent_factory
        self.serve_agent = serve_agent
        self.journal = journal
        self.detached_ttl = detached_ttl
        self.max_detached_sessions = max_detached_sessions
        self.unattended_timeout = unattended_timeout
        self.unattended_policy = unattended_policy
        self.connection_options = connection_options
        self.max_message_size: int = connection_options.get("max_message_size", DEFAULT_MAX_MESSAGE_SIZE)
        self._nursery = nursery
        self._sessions: dict[str, _Session] = {}
        self._instances: set[_Instance] = set()
        self._numbers = itertools.count(1)
        self._changed = trio.lowlevel.ParkingLot()
        self._serving: set[trio.CancelScope] = set()
        self._tokens: dict[bytes, _Instance] = {}  # sha256 of an attach token -> its instance
        self._clients: set[_Client] = set()
        self._abandoned = False  # abandon(): nothing forgotten or released on the way out
        self._closing = False  # _stop() was called: the host is on its way out
        self.draining = False
        """Whether the host drains (:meth:`drain`): it takes no new session."""
        self.max_sessions: int | None = None
        """Live sessions at once (``None``: no limit): past it, a ``session/new`` (or ``session/fork``,
        or the load or resume of a session not live) is answered -32603 with ``data.reason``
        ``"max_sessions"``, as while draining.  Set it after :func:`open_session_host`."""

    # -- the public surface -------------------------------------------------------------------------
    def sessions(self) -> dict[str, SessionInfo]:
        """A snapshot of the live sessions, by session id."""
        return {sid: SessionInfo(s) for sid, s in self._sessions.items() if s.loading is None}

    @property
    def instances(self) -> int:
        """Agent instances running now."""
        return len(self._instances)

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Return once ``predicate()`` is true, checked now and after every change of the host's
        state (a client attached or detached, an update journaled, a session closed, ...): for
        tests and monitoring.  Bound it with ``trio.fail_after``."""
        while not predicate():
            await self._changed.park()

    def _touch(self) -> None:
        self._changed.unpark_all()

    # -- draining: a host process that stops (python -m acp_trio.host) ---------------------------------
    def drain(self) -> None:
        """Take no new session from now on: a ``session/new``, a ``session/fork`` and the
        ``session/load``/``session/resume`` of a session not live here are answered -32603 "the host is
        draining" with ``data`` ``{"reason": "draining", "method"}`` (try another host); everything
        else goes on (clients attach to the live sessions, turns run and are prompted).  Idempotent;
        there is no undraining (a draining process is on its way out)."""
        if not self.draining:
            self.draining = True
            log.info(
                "draining: no new session; %d live, %d with a turn running",
                len(self._sessions),
                sum(1 for s in self._sessions.values() if s.running),
                extra={"event": "drain.started"},
            )
            self._touch()

    def running_turns(self) -> int:
        """Live sessions whose turn runs now (v1: a ``session/prompt`` unanswered; v2: also a state not ``idle``)."""
        return sum(1 for s in self._sessions.values() if s.running and s.loading is None)

    async def end_sessions(self, detail: str) -> int:
        """End every live session, as a client's ``session/close`` would for the other clients attached
        to it: if a turn runs, v2 clients get a ``state_update`` ``idle`` of the host's with stop reason
        ``cancelled``, v1 clients other than the prompter ``_acp_trio/turn_ended``; then every attached
        client gets ``_acp_trio/session_ended`` with reason ``"session closed"`` and ``detail``; the
        agent gets ``session/cancel`` and ``session/close``, the pending requests the declining answer.
        Then waits (bound it) until what was put for the clients has been written to them.  Returns
        the number of sessions ended.  For the end of a drain (``python -m acp_trio.host``)."""
        ended = [s for s in self._sessions.values() if s.loading is None]
        for session in ended:
            self._tell_ended(session, session.clients, "session closed", detail, "cancelled")
            await self._close_session(session, detail)
        while any(client.backlog and not client.gone for client in self._clients):
            await self._changed.park()
        return len(ended)

    def disconnect_clients(self) -> None:
        """End every client connection being served now, as if each had closed: its
        :meth:`serve_streams` returns (its transport then closes normally: a WebSocket's close
        frame after what was queued), and it detaches from its sessions.  The host goes on."""
        for scope in list(self._serving):
            scope.cancel()

    async def serve_streams(
        self,
        connection_id: str,
        to_client: trio.abc.SendStream,
        from_client: trio.abc.ReceiveStream,
        *,
        principal: Any = None,
    ) -> None:
        """Serve one client connection's NDJSON byte streams until the client is gone.

        ``connection_id``: a name for the logs; ``to_client`` / ``from_client``: any trio byte
        streams (``AcpApp(serve_streams=host.serve_streams)`` hands each WebSocket or Streamable
        HTTP connection's).  ``principal``: who the client is (a bearer token's subject), or
        ``None``; when both it and a session's creator's are set, attaching needs them equal.
        Returns when ``from_client`` ends (the client detaches from its sessions; their turns go
        on) or the host closes.  Never raises for what a client sends.
        """
        client = _Client(self, connection_id, principal)
        with client.scope as scope:
            self._serving.add(scope)
            self._clients.add(client)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._write_client, client, to_client)
                    try:
                        await self._read_client(client, from_client)
                    finally:
                        with trio.CancelScope(shield=True):
                            self._client_gone(client)
                        client.send.close()
            finally:
                self._serving.discard(scope)
                self._clients.discard(client)

    @asynccontextmanager
    async def connect(
        self, client: Any, *, principal: Any = None, **options: Any
    ) -> AsyncIterator[ClientSideConnection]:
        """A :class:`~acp_trio.ClientSideConnection` served by this host in memory (``async with
        host.connect(MyClient) as conn``); leaving the block closes it, which detaches it.
        ``client``, ``options``: as for :class:`~acp_trio.ClientSideConnection`; ``principal``:
        as for :meth:`serve_streams`."""
        client_stream, host_stream = trio.testing.memory_stream_pair()
        done = trio.Event()

        async def serve() -> None:
            try:
                await self.serve_streams(f"memory-{id(client_stream):x}", host_stream, host_stream, principal=principal)
            finally:
                done.set()

        self._nursery.start_soon(serve)
        conn = ClientSideConnection(client, client_stream, client_stream, **options)
        try:
            async with conn:
                yield conn
        finally:
            with trio.CancelScope(shield=True):
                await client_stream.aclose()
                await done.wait()

    async def aclose(self) -> None:
        """Stop serving: every client connection ends, every agent instance is cancelled (so is the
        body of the ``async with open_session_host(...)`` block, when called from it)."""
        self._stop()
        await trio.lowlevel.checkpoint()

    def abandon(self) -> None:
        """Stop at once as a process that is killed would: like :meth:`aclose`, but the sessions'
        journals are not forgotten and their ownership leases not released (they expire), so
        another host of the store takes them over.  For tests of takeover, and for a process that
        must exit at once."""
        self._abandoned = True
        self._stop()

    def _stop(self) -> None:
        self._closing = True
        for scope in list(self._serving):
            scope.cancel()
        self._nursery.cancel_scope.cancel()

    # -- client connections ---------------------------------------------------------------------------
    async def _write_client(self, client: _Client, to_client: trio.abc.SendStream) -> None:
        """Send what is put for ``client``, lines joined into sends of up to about 1 MiB; the
        bytes count against its backlog until their send returned."""
        try:
            async for line in client.receive:
                batch = [line, b"\n"]
                size = len(line) + 1
                while size < _WRITE_BATCH:
                    try:
                        more = client.receive.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    batch += (more, b"\n")
                    size += len(more) + 1
                data = b"".join(batch)
                del batch, line
                await to_client.send_all(data)
                client.backlog -= size
                client.written.unpark_all()
                if not client.backlog:
                    self._changed.unpark_all()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("client %s: its output closed", client.connection_id)
        finally:
            client.gone = True
            self._touch()
            with trio.CancelScope(shield=True):
                try:
                    await to_client.aclose()
                except Exception:
                    pass

    async def _read_client(self, client: _Client, from_client: trio.abc.ReceiveStream) -> None:
        framer = LineFramer(self.max_message_size)
        while True:
            try:
                data = await from_client.receive_some()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not data:
                for item in framer.close():
                    if type(item) is bytes:
                        await self._from_client(client, item)
                return
            for item in framer.feed(data):
                if type(item) is not bytes:
                    log.warning(
                        "client %s sent a message over %d bytes: dropped", client.connection_id, self.max_message_size
                    )
                    continue
                await self._from_client(client, item)

    async def _from_client(self, client: _Client, line: bytes) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            client.put(_error(None, -32700, "Parse error: a line that is not JSON"))
            return
        if type(message) is not dict:
            client.put(_error(None, INVALID_REQUEST, "Invalid request: a JSON-RPC message is an object"))
            return
        method = message.get("method")
        if type(method) is str:
            if "id" in message:
                try:
                    await self._client_request(client, message, method)
                except Exception as exc:  # the journal failed (a resume's read), say: this request fails, not the host
                    log.exception("client %s: handling its %s failed", client.connection_id, method)
                    client.put(
                        _error(
                            message["id"],
                            INTERNAL_ERROR,
                            f"Internal error: the host failed to handle {method}: {exc} "
                            "(its log has the details; try again)",
                            {"method": method},
                        )
                    )
            else:
                await self._client_notification(client, message, method)
        elif "id" in message:
            self._client_answer(client, message)

    async def _client_request(self, client: _Client, message: dict[str, Any], method: str) -> None:
        request_id = message["id"]
        params = message.get("params")
        session_id = params.get("sessionId") if type(params) is dict else None
        if method == "initialize":
            meta = params.get("_meta") if type(params) is dict else None
            if type(meta) is dict and PEER_META_KEY in meta:  # another host forwards a client of its own
                try:
                    _, acting = peer_principal(meta, self.ownership.peer_token if self.ownership else None)
                except ValueError as exc:
                    client.put(_error(request_id, INVALID_REQUEST, f"Invalid request: {exc}", {"method": method}))
                    return
                if acting is not None:
                    client.principal = acting
                meta = {k: v for k, v in meta.items() if k != PEER_META_KEY}  # the token never reaches the agent
                params = {**(params if type(params) is dict else {}), "_meta": meta}
                message = {**message, "params": params}
            client.init_params = params
            token = meta.get(ATTACH_META_KEY) if type(meta) is dict else None
            if client.home is None and type(token) is str:
                known = self._tokens.get(hashlib.sha256(token.encode()).digest())
                if (
                    known is not None
                    and not known.ended
                    and not known.closing
                    and known.initialized is not None
                    and known.principal == client.principal
                ):
                    client.home = known
                    known.home_clients.add(client)
                    client.version = known.version
                    result = {**known.initialized}
                    result["_meta"] = {**(result.get("_meta") or {}), ATTACH_META_KEY: token, ATTACHED_META_KEY: True}
                    client.put(_dumps({"jsonrpc": "2.0", "id": request_id, "result": result}))
                    self._touch()
                    return
            if client.home is None:
                client.home = self._start_instance()
                client.home.home_clients.add(client)
                client.home.principal = client.principal
            instance = client.home
            asked = type(token) is str

            async def initialized(answer: dict[str, Any]) -> None:
                result = answer.get("result")
                if type(result) is dict and type(result.get("protocolVersion")) is int:
                    instance.version = result["protocolVersion"]
                    client.version = instance.version
                    result = self._advertise(instance, result)
                    if instance.initialized is None:
                        instance.initialized = result
                        fresh = secrets.token_urlsafe(32)
                        instance.token_hash = hashlib.sha256(fresh.encode()).digest()
                        self._tokens[instance.token_hash] = instance
                    else:
                        fresh = None
                    meta = result.get("_meta")
                    meta = {**meta} if type(meta) is dict else {}
                    if fresh is not None:
                        meta[ATTACH_META_KEY] = fresh
                    if asked:
                        meta[ATTACHED_META_KEY] = False
                    answer["result"] = {**result, "_meta": meta}

            self._forward(instance, client, message, on_answer=initialized)
            return
        remote = client.remotes.get(session_id) if type(session_id) is str else None
        if remote is not None:  # forwarded to the session's owner: as it is
            remote.calls.add(request_id)
            remote.send.send_nowait(_dumps(message))
            return
        home = client.home
        if home is not None and home.ended:
            client.put(
                _error(
                    request_id,
                    INTERNAL_ERROR,
                    "this connection's agent instance ended: reconnect (initialize again) to go on",
                    {"method": method},
                )
            )
            return
        if home is None:
            client.put(
                _error(
                    request_id,
                    INVALID_REQUEST,
                    "Connection not initialized",
                    {"method": method, "detail": "send initialize first"},
                )
            )
            return
        session = self._sessions.get(session_id) if type(session_id) is str else None
        if (self.draining or self.max_sessions is not None) and (
            method in ("session/new", "session/fork")
            or (method in ("session/load", "session/resume") and type(session_id) is str and session is None)
        ):
            if self.draining:
                client.put(
                    _error(
                        request_id,
                        INTERNAL_ERROR,
                        f"the host is draining (it is shutting down): {method} is not taken here; try again on "
                        "another host (a load balancer sends it to one that is taking sessions)",
                        {"reason": DRAINING_REASON, "method": method},
                    )
                )
                return
            if self.max_sessions is not None and len(self._sessions) >= self.max_sessions:
                client.put(
                    _error(
                        request_id,
                        INTERNAL_ERROR,
                        f"the host runs its maximum of {self.max_sessions} live sessions (max_sessions): {method} "
                        "is not taken here; try again once a session ends, or on another host",
                        {"reason": "max_sessions", "max": self.max_sessions, "method": method},
                    )
                )
                return
        if method in ("session/load", "session/resume") and type(session_id) is str:
            if session is not None:
                await self._attach(client, message, method, session)
            elif self.ownership is not None:
                await self._take(client, message, method, session_id)
            else:
                self._load_on_home(client, message, method, session_id)
            return
        if type(session_id) is str and method.startswith("session/") and method != "session/new":
            if session is None and method in _HOME_SESSION_METHODS:
                self._forward(home, client, message)
                return
            if session is None or client not in session.clients:
                client.put(
                    _error(
                        request_id,
                        RESOURCE_NOT_FOUND,
                        f"Resource not found: session {session_id!r} is not attached to this connection",
                        {
                            "sessionId": session_id,
                            "detail": "attach it first with session/load (v1) or session/resume (v2), "
                            "or make one with session/new",
                        },
                    )
                )
                return
            if method == "session/prompt":
                if session.running:
                    client.put(
                        _error(
                            request_id,
                            INVALID_REQUEST,
                            f"A turn is running in session {session_id!r}: wait for it to end "
                            "(v2: state_update idle; v1: the prompt's answer) or cancel it with session/cancel, "
                            "then prompt again",
                            {"sessionId": session_id, "reason": "turn running"},
                        )
                    )
                    return
                session.prompting = client
                session.prompt_gone = False
                session.turn_ended = None
                session.states_at_prompt = session.states
                self._touch()
                if session.epoch is not None and (session.instance.version or 1) < 2:
                    # journaled before the agent sees the prompt: a host taking the session over sees the turn
                    try:
                        await self._journaled(session, TURN_STARTED, {"sessionId": session_id})
                    except BaseException:  # the journal failed: no turn (the client gets -32603)
                        session.prompting = None
                        self._touch()
                        raise
                    if self._sessions.get(session_id) is not session:  # its lease was lost: it ended here
                        client.put(
                            _error(
                                request_id,
                                RESOURCE_NOT_FOUND,
                                f"Resource not found: session {session_id!r} ended here ({TAKEN_OVER_REASON}): "
                                "resume it again",
                                {"sessionId": session_id, "reason": TAKEN_OVER_REASON},
                            )
                        )
                        return
            on_answer: Callable[[dict[str, Any]], Awaitable[None]] | None
            if method in _OPENING:  # session/fork: the new session lives on the same instance
                on_answer = self._opened(client, session.instance, method, params)
            else:
                on_answer = self._session_answer(client, session, method, params)
            self._forward(session.instance, client, message, on_answer=on_answer)
            return
        on_answer = self._opened(client, home, method, params) if method in _OPENING else None
        self._forward(home, client, message, on_answer=on_answer)

    @staticmethod
    def _advertise(instance: _Instance, result: dict[str, Any]) -> dict[str, Any]:
        """The ``initialize`` answer ``result`` with what the host serves itself added to the
        agent's capabilities (kept in ``instance.agent_capabilities``): v1 ``loadSession: true`` and
        ``sessionCapabilities.resume: {}``, since the host answers the load or resume of a live
        session whatever the agent supports (a client checks them before sending either).  v2
        needs nothing: ``session/resume`` is in the baseline of ``capabilities.session``
        (schema ``SessionCapabilities``), which an agent that makes sessions advertises."""
        if instance.version is None or instance.version >= 2:
            instance.agent_capabilities = result.get("capabilities")
            return result
        caps = result.get("agentCapabilities")
        instance.agent_capabilities = caps
        caps = dict(caps) if type(caps) is dict else {}
        caps["loadSession"] = True
        session_caps = caps.get("sessionCapabilities")
        session_caps = dict(session_caps) if type(session_caps) is dict else {}
        if type(session_caps.get("resume")) is not dict:
            session_caps["resume"] = {}
        caps["sessionCapabilities"] = session_caps
        return {**result, "agentCapabilities": caps}

    def _session_answer(
        self, client: _Client, session: _Session, method: str, params: Any
    ) -> Callable[[dict[str, Any]], Awaitable[None]] | None:
        async def answered(answer: dict[str, Any]) -> None:
            result = answer.get("result")
            if method == "session/prompt":
                prompter = session.prompting
                session.prompting = None
                version = session.instance.version or 1
                if version >= 2 and type(result) is dict and session.states == session.states_at_prompt:
                    # accepted, and its running state_update not read yet: running until a state_update says otherwise
                    session.state = {"sessionUpdate": "state_update", "state": "running"}
                self._touch()
                if version < 2:
                    report: dict[str, Any] = {"sessionId": session.id}
                    if type(result) is dict:
                        report["stopReason"] = result.get("stopReason")
                    else:  # the turn ended with an error answer
                        report["error"] = answer.get("error")
                    session.turn_ended = report
                    if session.epoch is not None:  # journaled, numbered, to every attached client
                        await self._journaled(session, TURN_ENDED, report)
                        return
                    ended = _dumps({"jsonrpc": "2.0", "method": TURN_ENDED, "params": report})
                    for other in session.clients:
                        # a client whose replay runs gets it after the replay (_attach)
                        if (other is not prompter or session.prompt_gone) and session.id not in other.attaching:
                            other.put(ended)
                return
            if type(result) is not dict:
                return
            if method in _ENDING:
                others = [other for other in session.clients if other is not client]
                self._tell_ended(session, others, "session closed", f"another client sent {method}", "cancelled")
                await self._drop_session(session, f"{method} from client {client.connection_id}")
            elif method == "session/set_config_option" and "configOptions" in result:
                session.setup["configOptions"] = result["configOptions"]
            elif method == "session/set_mode" and type(params) is dict:
                modes = session.setup.get("modes")
                if type(modes) is dict:
                    session.setup["modes"] = {**modes, "currentModeId": params.get("modeId")}

        return answered

    def _opened(
        self, client: _Client, home: _Instance, method: str, params: Any
    ) -> Callable[[dict[str, Any]], Awaitable[None]]:
        async def opened(answer: dict[str, Any]) -> None:
            result = answer.get("result")
            if type(result) is not dict:
                return
            session_id = result.get("sessionId")
            if type(session_id) is not str or session_id in self._sessions:
                return
            session = _Session(session_id, home, client.principal)
            if self.ownership is not None:  # owned before the client hears of it
                if not await self._claim_new(session, answer):
                    return
            session.setup = {k: v for k, v in result.items() if k not in ("sessionId", "_meta")}
            self._sessions[session_id] = session
            home.sessions.add(session_id)
            session.last = await self.journal.last(session_id)
            if not client.gone:
                session.clients.add(client)
                client.sessions.add(session_id)
            else:
                self._detached(session)
            _event("session.opened", "client %s opened session %s (%s)", client, session_id, method)
            self._touch()

        return opened

    def _can_load(self, client: _Client, message: dict[str, Any], method: str, session_id: str) -> bool:
        """Whether the home instance of ``client`` can load ``session_id`` (v1: it advertises
        ``loadSession`` or ``sessionCapabilities.resume``); if not, ``message`` is answered -32002."""
        home = client.home
        assert home is not None
        if (home.version or 1) < 2:  # the host advertised these for the live sessions it answers itself
            needed = ("loadSession",) if method == "session/load" else ("sessionCapabilities", "resume")
            if not advertised(home.agent_capabilities, needed):
                client.put(
                    _error(
                        message["id"],
                        RESOURCE_NOT_FOUND,
                        f"Resource not found: session {session_id!r} is not live in this host, and the agent "
                        f"cannot {method.removeprefix('session/')} sessions (it does not advertise "
                        f"{'.'.join(needed)}): attach a session the host is running, or start one with session/new",
                        {"sessionId": session_id, "method": method},
                    )
                )
                return False
        return True

    def _load_on_home(
        self, client: _Client, message: dict[str, Any], method: str, session_id: str, session: _Session | None = None
    ) -> None:
        """``session/load``/``session/resume`` of a session the host is not running: the home
        instance loads it (its replay goes to this client alone, unjournaled); once answered, the
        session is live there.  ``session``: already reserved (and its lease claimed) by :meth:`_take`."""
        home = client.home
        assert home is not None
        if session is None:
            if not self._can_load(client, message, method, session_id):
                return
            session = _Session(session_id, home, client.principal)
            session.loading = client
            self._sessions[session_id] = session
            home.sessions.add(session_id)
        loading = session

        async def loaded(answer: dict[str, Any]) -> None:
            session = loading
            result = answer.get("result")
            session.loading = None
            if type(result) is not dict:
                self._unreserve(session)
                return
            session.setup = {k: v for k, v in result.items() if k != "_meta"}
            session.last = await self.journal.last(session_id)
            if not client.gone:
                session.clients.add(client)
                client.sessions.add(session_id)
            else:
                self._detached(session)
            _event("session.opened", "client %s opened session %s (%s)", client, session_id, method)
            self._touch()

        self._forward(home, client, message, on_answer=loaded)

    async def _attach(self, client: _Client, message: dict[str, Any], method: str, session: _Session) -> None:
        """Attach ``client`` to the live ``session``: replay (v1 load: all; v2 resume: as
        ``replayFrom`` says), then (v2) the current ``state_update``, the answer, the pending
        requests, and live updates, with the journal's numbers as the fence between replay and live."""
        request_id = message["id"]
        params = message["params"]
        if session.loading is not None:
            client.put(
                _error(
                    request_id,
                    INVALID_REQUEST,
                    f"session {session.id!r} is being loaded by another connection: try again once it is",
                    {"sessionId": session.id},
                )
            )
            return
        if client.principal is not None and session.principal is not None and client.principal != session.principal:
            client.put(
                _error(
                    request_id,
                    RESOURCE_NOT_FOUND,
                    f"Resource not found: session {session.id!r}",
                    {"sessionId": session.id},
                )
            )
            return
        if client.version != session.instance.version:
            client.put(
                _error(
                    request_id,
                    INVALID_PARAMS,
                    f"session {session.id!r} runs on protocol version {session.instance.version}; this connection "
                    f"negotiated version {client.version}: reconnect with initialize protocolVersion "
                    f"{session.instance.version} to attach to it",
                    {"sessionId": session.id, "protocolVersion": session.instance.version},
                )
            )
            return
        if client in session.clients:
            client.put(
                _error(
                    request_id,
                    INVALID_REQUEST,
                    f"session {session.id!r} is already attached to this connection",
                    {"sessionId": session.id},
                )
            )
            return
        version = session.instance.version or 1
        start: int | None = None  # the first update to replay, None: no replay
        if method == "session/load":
            start = 1
        else:
            replay = params.get("replayFrom")
            if type(replay) is dict and replay.get("type") == "start":
                start = 1
            elif type(replay) is dict and replay.get("type") == CURSOR_TYPE:
                number = replay.get("update")
                if type(number) is not int or number < 1:
                    client.put(
                        _error(
                            request_id,
                            INVALID_PARAMS,
                            f'Invalid params: replayFrom {{"type": "{CURSOR_TYPE}"}} needs "update", a positive '
                            "integer: the number of the first update to replay",
                            {"replayFrom": replay},
                        )
                    )
                    return
                start = number
            elif replay is not None:
                client.put(
                    _error(
                        request_id,
                        INVALID_PARAMS,
                        f"Invalid params: replayFrom type {replay.get('type') if type(replay) is dict else replay!r} "
                        f'is not supported here: use "start", "{CURSOR_TYPE}" or none',
                        {"replayFrom": replay},
                    )
                )
                return
        if start is not None and start > 1:  # the cursor: still in the journal, and not past its end
            first = await self.journal.first(session.id)
            last = await self.journal.last(session.id)
            oldest = first or last + 1
            if start < oldest:
                client.put(
                    _error(
                        request_id,
                        INVALID_PARAMS,
                        f"Invalid params: update {start} of session {session.id!r} is no longer in the journal; "
                        f"the oldest available is {first}: resume from it, or with replayFrom start",
                        {"sessionId": session.id, "oldest": oldest},
                    )
                )
                return
            if start > last + 1:
                client.put(
                    _error(
                        request_id,
                        INVALID_PARAMS,
                        f"Invalid params: session {session.id!r} has {last} updates; update {start} does not exist yet",
                        {"sessionId": session.id, "last": last},
                    )
                )
                return
        if self._sessions.get(session.id) is not session:  # closed meanwhile
            client.put(_error(request_id, RESOURCE_NOT_FOUND, f"Resource not found: session {session.id!r}"))
            return
        # from here to the end of the replay, live updates for this client wait in its buffer; the
        # fence: the number of the last update the client has (or does not want)
        fence = session.last if start is None else start - 1
        client.attaching[session.id] = []
        session.clients.add(client)
        client.sessions.add(session.id)
        if session.ttl is not None:
            session.ttl.cancel()
            session.ttl = None
        session.detached_at = None
        try:
            if start is not None:
                # in pages up to the last update journaled now (later ones come through the buffer);
                # a short first page, so that the first updates reach the client soon
                end = max(session.last, await self.journal.last(session.id))
                after, limit, sent = start - 1, _REPLAY_FIRST_PAGE, 0
                while after < end:
                    lines = await self.journal.read(session.id, after, limit=limit)
                    if not lines:
                        break
                    if lines[0][0] > after + 1 and (start > 1 or sent):
                        # updates this replay needs were dropped while it was read (a session streaming
                        # past the journal's bound): refused as a cursor older than the journal holds, never a gap
                        self._refuse_attach(client, session, request_id, after + 1, lines[0][0], sent)
                        return
                    for number, line in lines:
                        numbered = self._numbered(line, number)
                        await client.room(len(numbered) + 1)  # a replay longer than max_client_backlog_bytes waits
                        client.put(numbered)
                        fence = number
                        sent += 1
                        if sent % _REPLAY_SLICE == 0:  # the client's writer sends what is ready meanwhile
                            await trio.lowlevel.checkpoint()
                    after, limit = fence, _REPLAY_PAGE
            # the buffer's updates past the fence go out (live ones keep joining it while this waits)
            buffer = client.attaching[session.id]
            i = 0
            while i < len(buffer):
                number, line = buffer[i]
                i += 1
                if number > fence:
                    await client.room(len(line) + 1)
                    client.put(line)
                    fence = number
        except BaseException as exc:
            client.attaching.pop(session.id, None)
            if isinstance(exc, Exception):  # the journal failed: the client stays connected, not attached
                session.clients.discard(client)
                client.sessions.discard(session.id)
                if not session.clients and self._sessions.get(session.id) is session:
                    self._detached(session)
            raise  # Cancelled: the connection ends, and _client_gone detaches it
        # no checkpoint from the buffer's last check to the end: then live
        del client.attaching[session.id]
        if self._sessions.get(session.id) is not session:  # it ended during the replay (it was told: SESSION_ENDED)
            client.put(
                _error(
                    request_id,
                    RESOURCE_NOT_FOUND,
                    f"Resource not found: session {session.id!r} ended while it was being attached",
                    {"sessionId": session.id},
                )
            )
            return
        client.delivered[session.id] = fence
        live_from = max(fence, session.last)
        if version >= 2:
            state = {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": session.id, "update": session.state, "_meta": {CURRENT_META_KEY: True}},
            }
            client.put(_dumps(state))
            keys = ("configOptions", "availableCommands")
        else:
            keys = ("modes", "configOptions")
            if session.turn_ended is not None and (session.epoch is None or start is None):
                # the last turn ended, and no other runs: how it ended (with ownership, a replay has it)
                ended = {"jsonrpc": "2.0", "method": TURN_ENDED, "params": session.turn_ended}
                client.put(_dumps(ended))
        result = {k: session.setup[k] for k in keys if k in session.setup}
        result["_meta"] = {LAST_META_KEY: live_from}
        client.put(_dumps({"jsonrpc": "2.0", "id": request_id, "result": result}))
        for question in session.questions:
            if not question.answered:
                self._ask(question, client)
        _event("client.attached", "client %s attached to session %s (%s)", client, session.id, method)
        self._touch()

    def _refuse_attach(
        self, client: _Client, session: _Session, request_id: Any, needed: int, oldest: int, sent: int
    ) -> None:
        """Undo an attach whose replay found update ``needed`` dropped from the journal (``sent``
        updates of it went out already) and answer it -32602 with ``data.oldest``; a session the
        client was the only one attached to is detached again."""
        del client.attaching[session.id]
        session.clients.discard(client)
        client.sessions.discard(session.id)
        if not session.clients and self._sessions.get(session.id) is session:
            self._detached(session)
        when = "while it was replayed" if sent else "before its replay was read"
        client.put(
            _error(
                request_id,
                INVALID_PARAMS,
                f"Invalid params: update {needed} of session {session.id!r} is no longer in the journal (dropped "
                f"{when}: the session streams past the journal's bound); the oldest available is {oldest}: "
                "resume from it, or with replayFrom start",
                {"sessionId": session.id, "oldest": oldest},
            )
        )
        self._touch()

    async def _client_notification(self, client: _Client, message: dict[str, Any], method: str) -> None:
        params = message.get("params")
        if method == "$/cancel_request":
            if type(params) is not dict:
                return
            request_id = params.get("requestId")
            try:
                target = client.calls.get(request_id)
                for remote in client.remotes.values():
                    if request_id in remote.calls:
                        remote.send.send_nowait(_dumps(message))
                        return
            except TypeError:
                return
            if target is not None:
                instance, router_id = target
                forwarded = {**message, "params": {**params, "requestId": router_id}}
                instance.send.send_nowait(_dumps(forwarded))
            return
        session_id = params.get("sessionId") if type(params) is dict else None
        if type(session_id) is str and session_id in client.remotes:
            client.remotes[session_id].send.send_nowait(_dumps(message))
            return
        if type(session_id) is str:
            session = self._sessions.get(session_id)
            if session is not None:
                if client in session.clients:
                    session.instance.send.send_nowait(_dumps(message))
                return  # another connection's session: ignored (a notification has no answer)
        if client.home is not None and not client.home.ended:
            client.home.send.send_nowait(_dumps(message))
        await trio.lowlevel.checkpoint()

    def _client_answer(self, client: _Client, message: dict[str, Any]) -> None:
        router_id = message.get("id")
        peer = client.peer_questions.pop(router_id, None) if type(router_id) is int else None
        if peer is not None:  # an owner host's request, forwarded: the answer goes back under its id
            remote, owner_id = peer
            remote.questions.pop(owner_id, None)
            answer = {k: v for k, v in message.items() if k in ("jsonrpc", "result", "error")}
            remote.send.send_nowait(_dumps({**answer, "id": owner_id}))
            return
        try:
            question = client.questions.pop(router_id)  # type: ignore[arg-type]
        except (KeyError, TypeError):
            log.debug("client %s answered request %r, not one it was asked: ignored", client.connection_id, router_id)
            return
        question.copies.pop(client, None)
        if question.answered:
            return
        answer = {k: v for k, v in message.items() if k in ("jsonrpc", "result", "error")}
        answer["id"] = question.agent_id
        self._settle(question, _dumps(answer))

    def _settle(self, question: _Question, answer: bytes) -> None:
        """``question`` is answered with ``answer`` (a wire line): it goes to the agent; the other
        clients' copies are withdrawn with ``$/cancel_request``."""
        if not question.instance.ended:
            question.instance.send.send_nowait(answer)
        self._withdraw(question)

    def _withdraw(self, question: _Question) -> None:
        """``question`` is settled: the copies clients still hold are withdrawn with ``$/cancel_request``."""
        question.answered = True
        if question.timer is not None:
            question.timer.cancel()
        question.instance.questions.pop(question.agent_id, None)
        for other, other_id in question.copies.items():
            other.questions.pop(other_id, None)
            other.put(_dumps({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": other_id}}))
        question.copies.clear()
        session = self._sessions.get(question.session_id) if question.session_id is not None else None
        if session is not None and question in session.questions:
            session.questions.remove(question)
        self._touch()

    def _client_gone(self, client: _Client) -> None:
        """The client's connection ended: it detaches from its sessions (their turns go on)."""
        client.gone = True
        for remote in client.remotes.values():
            remote.scope.cancel()
        for session_id in list(client.sessions):
            session = self._sessions.get(session_id)
            if session is None:
                continue
            session.clients.discard(client)
            if session.prompting is client:
                session.prompt_gone = True
            _event("client.detached", "client %s detached from session %s", client, session_id)
            if not session.clients:
                self._detached(session)
        client.sessions.clear()
        for question in list(client.questions.values()):
            question.copies.pop(client, None)
            if not question.answered and not question.copies:
                self._unattended(question)
        client.questions.clear()
        home = client.home
        if home is not None:
            home.home_clients.discard(client)
            self._maybe_end(home)
        self._touch()

    # -- sessions -------------------------------------------------------------------------------------
    def _detached(self, session: _Session) -> None:
        """``session`` has no client attached any more."""
        session.detached_at = trio.current_time()
        if self.detached_ttl is not None:
            scope = trio.CancelScope()
            session.ttl = scope
            self._nursery.start_soon(self._expire, session, scope)
        if self.max_detached_sessions is not None:
            detached = [s for s in self._sessions.values() if s.detached_at is not None and s.loading is None]
            if len(detached) > self.max_detached_sessions:
                oldest = min(detached, key=lambda s: s.detached_at or 0.0)
                reason = f"over max_detached_sessions={self.max_detached_sessions}"
                self._nursery.start_soon(self._close_session, oldest, reason)

    async def _expire(self, session: _Session, scope: trio.CancelScope) -> None:
        with scope:
            assert self.detached_ttl is not None
            await trio.sleep(self.detached_ttl)
        if not scope.cancelled_caught and not session.clients:
            await self._close_session(session, f"detached for detached_ttl={self.detached_ttl}s")

    async def _close_session(
        self, session: _Session, reason: str = "closed by the host", *, forget: bool = True
    ) -> None:
        """Cancel ``session``'s turn (``session/cancel``), close it on its instance
        (``session/close``; an agent without it answers -32601, which is fine), resolve its
        pending requests with the declining answer, and forget it."""
        if self._sessions.get(session.id) is not session:
            return
        instance = session.instance
        if not instance.ended:
            cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session.id}}
            instance.send.send_nowait(_dumps(cancel))
            router_id = next(instance.ids)
            instance.calls[router_id] = _Call(None, None, "session/close", None)
            close = {"jsonrpc": "2.0", "id": router_id, "method": "session/close", "params": {"sessionId": session.id}}
            instance.send.send_nowait(_dumps(close))
        for question in list(session.questions):
            if not question.answered:
                self._settle(question, self._declined(question))
        await self._drop_session(session, reason, forget=forget)

    async def _drop_session(self, session: _Session, reason: str = "closed", *, forget: bool = True) -> None:
        """Forget ``session``; ``forget``: its journal too (not when another host goes on with it).
        Its lease, if it holds one, is released after the journal is forgotten."""
        if self._sessions.get(session.id) is not session:
            return
        del self._sessions[session.id]
        log.info(
            "session %s ended: %s",
            session.id,
            reason,
            extra={"event": "session.closed", "session_id": session.id, "reason": reason},
        )
        session.instance.sessions.discard(session.id)
        if session.ttl is not None:
            session.ttl.cancel()
        for client in session.clients:
            client.sessions.discard(session.id)
            client.delivered.pop(session.id, None)
        session.clients.clear()
        self._maybe_end(session.instance)
        self._touch()
        epoch, session.epoch = session.epoch, None
        if self._abandoned:
            return
        try:
            if forget:
                await self.journal.forget(session.id)
        finally:
            if epoch is not None:
                await self._release(session.id, epoch)

    # -- ownership: leases in PostgreSQL (HostOwnership; issue 36 step 2) -------------------------------
    async def _append(self, session: _Session, lines: list[bytes]) -> int:
        """Journal ``lines`` of ``session``, fenced by its lease's epoch when it holds one."""
        if session.epoch is None:
            return await self.journal.append(session.id, lines)
        append: Any = self.journal.append
        number: int = await append(session.id, lines, epoch=session.epoch)
        return number

    async def _release(self, session_id: str, epoch: int) -> None:
        assert self.ownership is not None
        try:
            with trio.CancelScope(shield=True):
                await self.ownership.release(session_id, epoch)
        except Exception:  # it expires by itself
            log.warning("session %s: releasing its lease (epoch %d) failed", session_id, epoch, exc_info=True)

    async def _claim_new(self, session: _Session, answer: dict[str, Any]) -> bool:
        """Claim the lease of a session the agent just made (``session/new``, ``session/fork``);
        when it cannot be claimed, ``answer`` becomes a -32603 error and the agent closes it."""
        assert self.ownership is not None
        problem = None
        try:
            lease = await self.ownership.claim(session.id, session.principal)
        except Exception as exc:
            log.exception("session %s: claiming its lease failed", session.id)
            lease, problem = None, f"{type(exc).__name__}: {exc}"
        if lease is not None:
            session.epoch = lease.epoch
            session.claimed_at = trio.current_time()
            return True
        detail = problem or "another host holds its lease"
        answer.pop("result", None)
        answer["error"] = RequestError(
            INTERNAL_ERROR,
            f"Internal error: session {session.id!r} could not be owned by this host ({detail}): try again",
            {"reason": "lease", "detail": detail},
        ).to_wire()
        instance = session.instance
        if not instance.ended:
            router_id = next(instance.ids)
            instance.calls[router_id] = _Call(None, None, "session/close", None)
            close = {"jsonrpc": "2.0", "id": router_id, "method": "session/close", "params": {"sessionId": session.id}}
            instance.send.send_nowait(_dumps(close))
        return False

    async def _lost(self, session: _Session, detail: str) -> None:
        """``session``'s lease is lost (expired, or claimed by another host): it ends here, its
        clients told (:data:`SESSION_ENDED` reason ``"taken over"``), its journal kept, and this
        host never appends to it again."""
        if self._sessions.get(session.id) is not session:
            return
        session.epoch = None  # not released: it is not ours any more
        log.warning(
            "session %s: its lease is lost (%s): it ends here",
            session.id,
            detail,
            extra={"event": "session.lost", "session_id": session.id},
        )
        self._tell_ended(session, session.clients, TAKEN_OVER_REASON, detail, "error")
        await self._close_session(session, f"{TAKEN_OVER_REASON}: {detail}", forget=False)

    def _unreserve(self, session: _Session) -> None:
        """Undo the reservation of a session that did not become live (its load failed)."""
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
        session.instance.sessions.discard(session.id)
        if session.epoch is not None:
            epoch, session.epoch = session.epoch, None
            self._nursery.start_soon(self._release, session.id, epoch)
        self._maybe_end(session.instance)
        self._touch()

    async def _take(self, client: _Client, message: dict[str, Any], method: str, session_id: str) -> None:
        """``session/load``/``session/resume`` of a session not live here, with ownership: claim its
        lease (free or expired; held by a live host: -32603 with ``data.owner``), then load it: a
        session whose journal is empty (never live on a host of this store, or ended) as without
        ownership (the agent replays it); one with a journal is *taken over* (its host died or
        handed it over): the agent restores it without its replay, a turn the journal shows
        running is ended (v2: ``state_update`` ``idle`` with stop reason ``error``, journaled), and
        the client attaches through the journal's replay (cursor honoured).  Forwarding to the
        owner (issue 36 step 3) is not done: the client reconnects to the owner itself."""
        assert self.ownership is not None
        if not self._can_load(client, message, method, session_id):
            return
        home = client.home
        assert home is not None
        session = _Session(session_id, home, client.principal)
        session.loading = client
        self._sessions[session_id] = session
        home.sessions.add(session_id)
        try:
            # the session's principal, stored with its first lease: a client of another one is
            # answered as the host that runs it answers it (-32002, nothing about the session)
            stored = await self.ownership.principal_of(session_id)
            if stored is not None and client.principal is not None and str(client.principal) != stored:
                self._unreserve(session)
                client.put(
                    _error(
                        message["id"],
                        RESOURCE_NOT_FOUND,
                        f"Resource not found: session {session_id!r}",
                        {"sessionId": session_id},
                    )
                )
                return
            if stored is not None and client.principal is None:  # a host without authentication
                session.principal = stored
            lease = await self.ownership.claim(session_id, session.principal)
            held = await self.ownership.owner_of(session_id) if lease is None else None
            if held is not None and held.owner == self.ownership.owner:
                # a lease of ours on a session not live here (its release failed): give it up, claim anew
                await self.ownership.release(session_id, held.epoch)
                lease = await self.ownership.claim(session_id, session.principal)
                held = await self.ownership.owner_of(session_id) if lease is None else None
            last = await self.journal.last(session_id) if lease is not None else 0
        except BaseException:
            self._unreserve(session)
            raise
        if lease is None:
            self._unreserve(session)
            url = owner_data(held)["ownerUrl"] if held is not None and held.held else None
            if url is not None and self.ownership.peer_token is not None and not client.gone:
                remote = Remote(session_id, url)
                client.remotes[session_id] = remote
                self._nursery.start_soon(self._run_remote, client, remote, message)
                return
            data: dict[str, Any] = {"reason": OWNED_REASON, "sessionId": session_id, "method": method}
            data.update(owner_data(held) if held is not None else {"owner": None, "ownerUrl": None})
            where = f" at {data['ownerUrl']}" if data["ownerUrl"] else ""
            client.put(
                _error(
                    message["id"],
                    INTERNAL_ERROR,
                    f"session {session_id!r} runs on another host ({data['owner']}{where}): reconnect to it "
                    "(through the load balancer: with that host's affinity cookie), or try again once its lease "
                    "expires if that host is gone",
                    data,
                )
            )
            return
        session.epoch = lease.epoch
        session.claimed_at = trio.current_time()
        if not last:  # nothing journaled: the agent's own load, as without ownership
            self._load_on_home(client, message, method, session_id, session)
            return
        session.quiet = True
        params = dict(message["params"])
        if method == "session/resume":
            params.pop("replayFrom", None)
        request = {**message, "params": params}

        async def restored(answer: dict[str, Any]) -> None:
            result = answer.get("result")
            session.loading = None
            session.quiet = False
            if type(result) is not dict:
                self._unreserve(session)
                client.put(_dumps({**answer, "id": message["id"]}))
                return
            session.setup = {k: v for k, v in result.items() if k != "_meta"}
            self._nursery.start_soon(self._taken_over, client, message, method, session)

        router_id = next(home.ids)
        home.calls[router_id] = _Call(None, None, method, params, restored)
        home.send.send_nowait(_dumps({**request, "id": router_id}))

    async def _run_remote(self, client: _Client, remote: Remote, message: dict[str, Any]) -> None:
        """Serve ``client`` the session of ``remote`` through a connection to its owner host (the
        module ``_forward``): ``initialize`` as the client's with the peer token and its principal,
        then its ``message`` (the load or resume) as it is, then both ways until either side ends."""
        assert self.ownership is not None
        request_id = message["id"]
        init_id = "acp-trio/peer-initialize"
        meta = client.init_params.get("_meta") if type(client.init_params) is dict else None
        peer: dict[str, Any] = {"token": self.ownership.peer_token}
        if client.principal is not None:
            peer["principal"] = str(client.principal)
        init_params = {**(client.init_params or {}), "_meta": {**(meta or {}), PEER_META_KEY: peer}}
        init = {"jsonrpc": "2.0", "id": init_id, "method": "initialize", "params": init_params}
        attached = answered = False  # the client's load/resume: attached there; answered
        detail = "the connection to the session's owner host ended"
        _event("session.forwarded", "client %s: session %s forwarded to %s", client, remote.session_id, remote.url)
        try:
            with remote.scope:
                async with self.ownership.connect_peer(remote.url) as stream, trio.open_nursery() as nursery:

                    async def write() -> None:
                        async for line in remote.receive:
                            await stream.send_all(line + b"\n")

                    await stream.send_all(_dumps(init) + b"\n")
                    framer = LineFramer(self.max_message_size)
                    try:
                        while True:
                            data = await stream.receive_some()
                            items = framer.feed(data) if data else framer.close()
                            for item in items:
                                if type(item) is not bytes:
                                    continue
                                line: Any = orjson.loads(item)
                                if type(line) is not dict:
                                    continue
                                method = line.get("method")
                                if method is None:  # an answer
                                    if line.get("id") == init_id:
                                        if "error" in line:
                                            error = line["error"]
                                            client.put(_dumps({"jsonrpc": "2.0", "id": request_id, "error": error}))
                                            answered = True
                                            return
                                        remote.calls.add(request_id)
                                        await stream.send_all(_dumps(message) + b"\n")
                                        nursery.start_soon(write)
                                        continue
                                    remote.calls.discard(line.get("id"))
                                    if line.get("id") == request_id:
                                        answered = True
                                        if "error" in line:  # not attached there: this forward ends
                                            client.put(item)
                                            return
                                        attached = True
                                    client.put(item)
                                elif "id" in line:  # the owner's request to the client: an id of this host's
                                    router_id = next(client.ids)
                                    client.peer_questions[router_id] = (remote, line["id"])
                                    remote.questions[line["id"]] = router_id
                                    client.put(_dumps({**line, "id": router_id}))
                                elif method == "$/cancel_request":
                                    params = line.get("params")
                                    owner_id = params.get("requestId") if type(params) is dict else None
                                    known = type(owner_id) in (int, str)
                                    mine = remote.questions.pop(owner_id, None) if known else None
                                    if mine is not None and type(params) is dict:
                                        client.peer_questions.pop(mine, None)
                                        client.put(_dumps({**line, "params": {**params, "requestId": mine}}))
                                else:
                                    client.put(item)
                                    if method == SESSION_ENDED:
                                        attached = False  # it was told
                                        return
                            if not data:
                                return
                    finally:
                        nursery.cancel_scope.cancel()  # the writer
        except Exception as exc:
            detail = f"the connection to the session's owner host failed: {type(exc).__name__}: {exc}"
            log.warning("client %s: forwarding session %s to %s: %s", client, remote.session_id, remote.url, detail)
            if not answered:
                client.put(
                    _error(
                        request_id,
                        INTERNAL_ERROR,
                        f"Internal error: session {remote.session_id!r} runs on another host ({remote.url}) that "
                        f"this host could not reach ({exc}): try again",
                        {"reason": OWNED_REASON, "sessionId": remote.session_id, "ownerUrl": remote.url},
                    )
                )
        finally:
            if client.remotes.get(remote.session_id) is remote:
                del client.remotes[remote.session_id]
            for router_id in remote.questions.values():
                client.peer_questions.pop(router_id, None)
            remote.send.close()
            if attached and not client.gone:
                ended = {"sessionId": remote.session_id, "reason": MOVED_REASON, "detail": detail}
                client.put(_dumps({"jsonrpc": "2.0", "method": SESSION_ENDED, "params": ended}))

    async def _taken_over(self, client: _Client, message: dict[str, Any], method: str, session: _Session) -> None:
        """The agent restored ``session`` (taken over): numbering continues from the journal, a turn
        it shows running is ended visibly, then ``client`` attaches (replay from the journal)."""
        try:
            session.last = await self.journal.last(session.id)
            state, turn = await self._journal_state(session.id)
            if state is not None:
                session.state = state
            error = RequestError(
                INTERNAL_ERROR,
                f"the turn of session {session.id!r} ended: the host running it stopped",
                {"reason": TAKEN_OVER_REASON},
            ).to_wire()
            if (session.instance.version or 1) < 2 and turn == TURN_STARTED:
                report = {"sessionId": session.id, "error": error}
                await self._journaled(session, TURN_ENDED, report)
                session.turn_ended = report
            if (session.instance.version or 1) >= 2 and session.state.get("state") not in (None, "idle"):
                idle = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "error", "error": error}
                await self._journaled(session, "session/update", {"sessionId": session.id, "update": idle})
            _event("session.taken_over", "client %s took session %s over (%s)", client, session.id, method)
            if self._sessions.get(session.id) is not session:
                raise RuntimeError("it ended while it was taken over")
            if client.gone:
                self._detached(session)
                return
            await self._attach(client, message, method, session)
        except Exception as exc:
            log.exception("session %s: taking it over failed", session.id)
            client.put(
                _error(
                    message["id"],
                    INTERNAL_ERROR,
                    f"Internal error: the host failed to take session {session.id!r} over: {exc} (try again)",
                    {"method": method},
                )
            )
            if self._sessions.get(session.id) is session and not session.clients:
                self._detached(session)

    async def _journal_state(self, session_id: str) -> tuple[dict[str, Any] | None, str | None]:
        """The last ``state_update`` journaled for ``session_id`` (v2), or ``None``; and the method
        of the last :data:`TURN_STARTED` or :data:`TURN_ENDED` line (v1), or ``None``."""
        found: dict[str, Any] | None = None
        turn: str | None = None
        after = 0
        while True:
            lines = await self.journal.read(session_id, after, limit=_REPLAY_PAGE)
            if not lines:
                return found, turn
            for _, line in lines:
                if b'"state_update"' in line:
                    update = orjson.loads(line).get("params", {}).get("update")
                    if type(update) is dict and update.get("sessionUpdate") == "state_update":
                        found = update
                elif b"_acp_trio/turn_" in line:
                    method = orjson.loads(line).get("method")
                    if method in (TURN_STARTED, TURN_ENDED):
                        turn = method
            after = lines[-1][0]

    async def _renew_leases(self) -> None:
        """Renew this host's leases every third of their length, in one statement; a live session
        whose lease was not renewed (expired, claimed elsewhere) ends here (:meth:`_lost`)."""
        ownership = self.ownership
        assert ownership is not None
        while True:
            await trio.sleep(ownership.lease_seconds / 3)
            started = trio.current_time()
            try:
                renewed = {lease.session_id: lease.epoch for lease in await ownership.renew()}
            except Exception:
                log.warning("renewing the leases failed (they hold until they expire)", exc_info=True)
                continue
            for session in list(self._sessions.values()):
                if (
                    session.epoch is not None
                    and session.claimed_at < started
                    and renewed.get(session.id) != session.epoch
                ):
                    await self._lost(session, "its lease was not renewed in time (expired, or claimed by another host)")

    async def hand_over(self, detail: str = "the host is draining") -> int:
        """Hand every live session over to the other hosts of the store (the end of a drain with
        ownership): a turn still running is cancelled and its end journaled (v2 ``state_update``
        ``idle``, stop reason ``cancelled``), the attached clients are told (v2 ``idle`` / v1
        :data:`TURN_ENDED` as for a closed session, then :data:`SESSION_ENDED` with reason
        :data:`~acp_trio.host.MOVED_REASON`: resume it again, through the load balancer), the journal is
        kept and the lease released, so the next ``session/resume`` makes it live on another host at
        once (no lease to wait for).  Returns the number of sessions handed over.  Without ownership,
        :meth:`end_sessions`."""
        if self.ownership is None:
            return await self.end_sessions(detail)
        moved = [s for s in self._sessions.values() if s.loading is None]
        for session in moved:
            if session.running and (session.instance.version or 1) >= 2 and session.epoch is not None:
                idle = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}
                with contextlib.suppress(Exception):  # the journal failed: the next owner ends the turn itself
                    await self._journaled(session, "session/update", {"sessionId": session.id, "update": idle})
            elif session.prompting is not None and session.epoch is not None:  # v1: its end, journaled
                with contextlib.suppress(Exception):
                    await self._journaled(session, TURN_ENDED, {"sessionId": session.id, "stopReason": "cancelled"})
                session.prompting = None  # the clients have its end: _tell_ended sends none again
            if self._sessions.get(session.id) is not session:
                continue
            self._tell_ended(session, session.clients, MOVED_REASON, detail, "cancelled")
            await self._close_session(session, f"handed over: {detail}", forget=False)
        while any(client.backlog and not client.gone for client in self._clients):
            await self._changed.park()
        return len(moved)

    # -- agent instances ------------------------------------------------------------------------------
    def _start_instance(self) -> _Instance:
        instance = _Instance(next(self._numbers))
        self._instances.add(instance)
        self._nursery.start_soon(self._run_instance, instance, name=f"host agent instance {instance.number}")
        return instance

    def _maybe_end(self, instance: _Instance) -> None:
        """An instance with no home client and no live session ends: its input closes."""
        if not instance.home_clients and not instance.sessions and not instance.closing:
            instance.closing = True
            instance.send.close()

    async def _run_instance(self, instance: _Instance) -> None:
        # no buffer between the two: the agent's writes wait while the host journals what it read
        # before (a journal slower than the agent holds it back instead of its output piling up here)
        agent_stream, router_stream = trio.testing.lockstep_stream_pair()
        options = dict(self.connection_options)
        options.setdefault("name", f"host-agent-{instance.number}")

        async def serve() -> None:
            if self.serve_agent is None:
                conn = AgentSideConnection(self.agent_factory, agent_stream, agent_stream, **options)
                await conn.serve_until_closed()
                return
            try:  # an instance served elsewhere (the bridge: a process); its end is the stream's end
                await self.serve_agent(agent_stream)
            except Exception as exc:
                log.exception("agent instance %d: serve_agent failed", instance.number)
                instance.end_detail = f"serving it failed: {type(exc).__name__}: {exc}"
            finally:
                await trio.aclose_forcefully(agent_stream)

        async def write() -> None:
            try:
                async for line in instance.receive:
                    batch = [line, b"\n"]
                    while True:
                        try:
                            more = instance.receive.receive_nowait()
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
                        batch += (more, b"\n")
                    await router_stream.send_all(b"".join(batch))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                with trio.CancelScope(shield=True):
                    await router_stream.send_stream.aclose()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve)
                nursery.start_soon(write)
                await self._read_agent(instance, router_stream)
                nursery.cancel_scope.cancel()
        except Exception as exc:
            # a failure here (the journal's append raising: a full disk, a broken file) ends this
            # instance and its sessions, as the agent's own end would; the host and its other instances go on
            log.exception("agent instance %d ended: the host's handling of its messages failed", instance.number)
            cause: BaseException = exc
            while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
                cause = cause.exceptions[0]
            instance.end_detail = f"the host failed to handle its output: {type(cause).__name__}: {cause}"
        finally:
            with trio.CancelScope(shield=True):
                await self._instance_ended(instance)

    async def _read_agent(self, instance: _Instance, stream: trio.abc.ReceiveStream) -> None:
        """Read the agent's lines; consecutive ``session/update`` lines of one session read together
        are journaled in one append (the journal's cost is per append more than per line)."""
        framer = LineFramer(self.max_message_size)
        while True:
            try:
                data = await stream.receive_some()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            ended = not data  # then a last line without its newline still counts, as from a client
            batch: list[tuple[dict[str, Any], bytes]] = []
            batch_session: _Session | None = None
            for line in framer.close() if ended else framer.feed(data):
                if type(line) is not bytes:
                    log.warning(
                        "agent instance %d wrote a line over %d bytes: dropped",
                        instance.number,
                        framer.max_message_size,
                    )
                    continue
                try:
                    message = orjson.loads(line)
                except orjson.JSONDecodeError:
                    log.warning("agent instance %d wrote a line that is not JSON: dropped", instance.number)
                    continue
                if type(message) is not dict:
                    continue
                session = self._live_update_session(instance, message)
                if session is not None and session is batch_session:
                    batch.append((message, line))
                    continue
                if batch_session is not None:
                    await self._updates(batch_session, batch)
                    batch, batch_session = [], None
                if session is not None:
                    batch, batch_session = [(message, line)], session
                else:
                    await self._from_agent(instance, message, line)
            if batch_session is not None:
                await self._updates(batch_session, batch)
            if ended:
                return

    def _live_update_session(self, instance: _Instance, message: dict[str, Any]) -> _Session | None:
        """The live session (not being loaded) of ``message`` when it is its instance's ``session/update``."""
        if message.get("method") != "session/update" or "id" in message:
            return None
        params = message.get("params")
        session_id = params.get("sessionId") if type(params) is dict else None
        session = self._sessions.get(session_id) if type(session_id) is str else None
        if session is None or session.instance is not instance or session.loading is not None:
            return None
        return session

    async def _from_agent(self, instance: _Instance, message: dict[str, Any], line: bytes) -> None:
        method = message.get("method")
        if type(method) is not str:
            await self._agent_answer(instance, message)
            return
        params = message.get("params")
        session_id = params.get("sessionId") if type(params) is dict else None
        session = self._sessions.get(session_id) if type(session_id) is str else None
        if session is not None and session.instance is not instance:
            session = None
        if "id" in message:
            self._agent_question(instance, message, session)
            return
        if method == "$/cancel_request":  # the agent withdrew a request: so do its clients' copies
            question = instance.questions.get(params.get("requestId") if type(params) is dict else None)
            if question is not None:
                self._withdraw(question)
            return
        if session is None:
            audience = instance.home_clients
        elif session.loading is not None:  # the agent's own replay of a session it loads: to that client only
            if session.quiet:  # taken over: the journal replays it instead
                return
            audience = {session.loading}
        else:
            audience = session.clients
        for client in audience:
            client.put(line)

    async def _journaled(self, session: _Session, method: str, params: dict[str, Any]) -> None:
        """One notification of the host's own for ``session`` (``method``, ``params``: a ``session/update``
        or :data:`TURN_STARTED`/:data:`TURN_ENDED`), journaled and sent numbered, as :meth:`_updates`."""
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        await self._updates(session, [(message, _dumps(message))])

    async def _updates(self, session: _Session, batch: list[tuple[dict[str, Any], bytes]]) -> None:
        """Journal ``batch`` (the session's ``session/update`` messages and lines, in order), then
        send each, numbered, to the attached clients (to the buffer of one whose replay runs)."""
        try:
            last = await self._append(session, [line for _, line in batch])
        except Exception as exc:
            if not _is_lease_lost(exc):
                raise
            await self._lost(session, str(exc))
            return
        # no checkpoint from here to the end of the fan-out: see _attach
        if self._sessions.get(session.id) is not session:
            return  # closed meanwhile
        number = last - len(batch)
        for message, line in batch:
            number += 1
            self._track(session, message["params"].get("update"))
            numbered = self._numbered(line, number, message)
            for client in session.clients:
                buffer = client.attaching.get(session.id)
                if buffer is not None:
                    buffer.append((number, numbered))
                elif number > client.delivered.get(session.id, 0):
                    client.put(numbered)
                    client.delivered[session.id] = number
        session.last = last
        self._touch()

    @staticmethod
    def _track(session: _Session, update: Any) -> None:
        """Keep the session's current state and setup answer up to date with ``update``."""
        if type(update) is not dict:
            return
        kind = update.get("sessionUpdate")
        if kind == "state_update":
            session.state = update
            session.states += 1
        elif kind == "config_option_update" and "configOptions" in update:
            session.setup["configOptions"] = update["configOptions"]
        elif kind == "available_commands_update" and "availableCommands" in update:
            session.setup["availableCommands"] = update["availableCommands"]
        elif kind == "current_mode_update" and type(session.setup.get("modes")) is dict:
            session.setup["modes"] = {**session.setup["modes"], "currentModeId": update.get("currentModeId")}

    @staticmethod
    def _numbered(line: bytes, number: int, message: dict[str, Any] | None = None) -> bytes:
        if message is None:
            message = orjson.loads(line)
        return _with_meta(message, UPDATE_META_KEY, number)

    def _agent_question(self, instance: _Instance, message: dict[str, Any], session: _Session | None) -> None:
        try:
            hash(message["id"])
        except TypeError:
            log.warning("agent instance %d sent a request with an id that is not a string or number", instance.number)
            return
        question = _Question(instance, message, None if session is None else session.id)
        instance.questions[question.agent_id] = question
        if session is not None:
            session.questions.append(question)
            audience = session.clients if session.loading is None else {session.loading}
        else:
            audience = instance.home_clients
        for client in list(audience):
            if not client.gone and session is not None and session.id in client.attaching:
                continue  # it gets the question once its replay is done
            self._ask(question, client)
        if not question.copies:
            self._unattended(question)
        self._touch()

    def _ask(self, question: _Question, client: _Client) -> None:
        if client.gone or client in question.copies or not self._may_ask(question, client):
            return
        router_id = next(client.ids)
        question.copies[client] = router_id
        client.questions[router_id] = question
        client.put(_dumps({**question.message, "id": router_id}))
        if question.timer is not None:
            question.timer.cancel()
            question.timer = None

    @staticmethod
    def _may_ask(question: _Question, client: _Client) -> bool:
        """Whether ``client``'s own ``initialize`` capabilities allow the agent's ``question``
        (``fs/*`` needs ``fs.readTextFile``/``fs.writeTextFile``, ``terminal/*`` ``terminal``,
        ``elicitation/*`` ``elicitation`` and its mode; v1 and v2 ``initialization.mdx`` "Client
        Capabilities", ``elicitation.mdx`` "Checking support"): the rules of
        :mod:`acp_trio._capabilities`, which every acp-trio agent connection applies before it calls
        a client.  A method without a rule (``session/request_permission``, ``_`` extensions) goes
        to any client."""
        params = client.init_params if type(client.init_params) is dict else {}
        message = question.message
        try:
            if (question.instance.version or 1) >= 2:
                check_client_call_v2(question.method, message.get("params"), params.get("capabilities"))
            else:
                check_client_call(question.method, message.get("params"), params.get("clientCapabilities"))
        except CapabilityError:
            return False
        return True

    def _unattended(self, question: _Question) -> None:
        """No client holds ``question``: it waits for the next one, or the unattended policy."""
        if self.unattended_timeout is None or self.unattended_policy == "wait" or question.timer is not None:
            return
        scope = trio.CancelScope()
        question.timer = scope
        self._nursery.start_soon(self._unattended_expire, question, scope)

    async def _unattended_expire(self, question: _Question, scope: trio.CancelScope) -> None:
        with scope:
            assert self.unattended_timeout is not None
            await trio.sleep(self.unattended_timeout)
        if scope.cancelled_caught or question.answered or question.copies:
            return
        question.timer = None
        log.info(
            "agent request %s (%r) unanswered for unattended_timeout=%ss: %s",
            question.method,
            question.agent_id,
            self.unattended_timeout,
            self.unattended_policy,
        )
        if self.unattended_policy == "cancel" and question.session_id is not None and not question.instance.ended:
            cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": question.session_id}}
            question.instance.send.send_nowait(_dumps(cancel))
        self._settle(question, self._declined(question))

    def _declined(self, question: _Question) -> bytes:
        result = _DECLINE.get(question.method)
        if result is not None:
            return _dumps({"jsonrpc": "2.0", "id": question.agent_id, "result": result})
        return _error(
            question.agent_id,
            INTERNAL_ERROR,
            f"no client attached to answer {question.method} within unattended_timeout="
            f"{self.unattended_timeout}s (the host's unattended_policy={self.unattended_policy!r})",
            {"method": question.method},
        )

    async def _agent_answer(self, instance: _Instance, message: dict[str, Any]) -> None:
        router_id = message.get("id")
        call = instance.calls.pop(router_id, None) if type(router_id) is int else None
        if call is None:
            log.debug("agent instance %d answered request %r, not one in flight: ignored", instance.number, router_id)
            return
        client = call.client
        if client is not None:
            client.calls.pop(call.client_id, None)
        if call.on_answer is not None:
            try:
                await call.on_answer(message)
            except Exception:
                log.exception("the host's bookkeeping of a %s answer failed", call.method)
        if client is not None:
            client.put(_dumps({**message, "id": call.client_id}))

    def _forward(
        self,
        instance: _Instance,
        client: _Client,
        message: dict[str, Any],
        *,
        on_answer: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> None:
        request_id = message["id"]
        if instance.ended or instance.closing:
            client.put(_error(request_id, INTERNAL_ERROR, "the agent instance serving this session has ended"))
            return
        router_id = next(instance.ids)
        instance.calls[router_id] = _Call(client, request_id, message["method"], message.get("params"), on_answer)
        try:
            client.calls[request_id] = (instance, router_id)
        except TypeError:
            pass
        instance.send.send_nowait(_dumps({**message, "id": router_id}))

    async def _instance_ended(self, instance: _Instance) -> None:
        """The instance's agent connection ended: its requests to clients are withdrawn
        (``$/cancel_request``), its calls in flight fail (-32603, ``data.reason``
        :data:`SESSION_ENDED_REASON`), the clients attached to its sessions are told
        (:meth:`_tell_ended`) and detached, and its sessions are forgotten."""
        instance.ended = True
        instance.send.close()
        self._instances.discard(instance)
        if instance.token_hash is not None:
            self._tokens.pop(instance.token_hash, None)
        for question in list(instance.questions.values()):
            self._withdraw(question)
        data = {"reason": SESSION_ENDED_REASON, "detail": instance.end_detail}
        for call in instance.calls.values():
            if call.client is not None:
                call.client.put(
                    _error(
                        call.client_id,
                        INTERNAL_ERROR,
                        f"Internal error: the agent instance ended before answering {call.method} "
                        f"({instance.end_detail}): reconnect (initialize again) to go on",
                        {**data, "method": call.method},
                    )
                )
        instance.calls.clear()
        for session_id in list(instance.sessions):
            session = self._sessions.get(session_id)
            if session is not None:
                for question in session.questions:
                    question.answered = True
                    for other, other_id in question.copies.items():
                        other.questions.pop(other_id, None)
                session.questions.clear()
                self._tell_ended(session, session.clients, SESSION_ENDED_REASON, instance.end_detail, "error")
                try:
                    # a host with ownership that closes leaves its sessions to the others (journal
                    # kept, lease released): the next resume takes them over
                    keep = self.ownership is not None and self._closing
                    await self._drop_session(session, f"{SESSION_ENDED_REASON}: {instance.end_detail}", forget=not keep)
                except Exception:
                    log.exception("forgetting session %s failed", session_id)
        self._touch()

    def _tell_ended(
        self,
        session: _Session,
        clients: Iterable[_Client],
        reason: str,
        detail: str,
        stop_reason: Literal["error", "cancelled"],
    ) -> None:
        """Tell ``clients`` (attached to ``session``) that it ends under them.  If a turn runs: v2
        clients get a ``state_update`` ``idle`` with ``stop_reason`` (``error`` with the error
        object, schema ``ErrorStopReason``; ``cancelled`` for a session another client closed,
        which the schema's ``cancelled`` covers: "by closing the session"), marked
        ``_meta["acp-trio/current"]: true`` with no number (prompt-lifecycle.mdx: "the Agent MUST
        report idle when no foreground activity remains"); v1 clients other than the one whose
        ``session/prompt`` call is in flight (it gets that call's answer) get :data:`TURN_ENDED`
        with the error or the stop reason.  Then every one gets :data:`SESSION_ENDED`.  A client
        whose replay is under way is told too (its attach is then refused)."""
        ended = _dumps(
            {
                "jsonrpc": "2.0",
                "method": SESSION_ENDED,
                "params": {"sessionId": session.id, "reason": reason, "detail": detail},
            }
        )
        outcome: dict[str, Any] = {"stopReason": stop_reason}
        if stop_reason == "error":
            message = f"session {session.id!r} ended: {reason} ({detail})"
            outcome["error"] = RequestError(INTERNAL_ERROR, message, {"reason": reason, "detail": detail}).to_wire()
        running = session.running
        v2 = (session.instance.version or 1) >= 2
        for client in clients:
            if running and v2:
                idle = {"sessionUpdate": "state_update", "state": "idle", **outcome}
                update = {"sessionId": session.id, "update": idle, "_meta": {CURRENT_META_KEY: True}}
                client.put(_dumps({"jsonrpc": "2.0", "method": "session/update", "params": update}))
            elif running and (client is not session.prompting or session.prompt_gone):
                turn = {"sessionId": session.id}
                if stop_reason == "error":
                    turn["error"] = outcome["error"]
                else:
                    turn["stopReason"] = stop_reason
                client.put(_dumps({"jsonrpc": "2.0", "method": TURN_ENDED, "params": turn}))
            client.put(ended)


@asynccontextmanager
async def open_session_host(
    agent_factory: Any,
    *,
    journal: Journal | None = None,
    detached_ttl: float | None = 3600.0,
    max_detached_sessions: int | None = 100,
    unattended_timeout: float | None = None,
    unattended_policy: Policy = "wait",
    serve_agent: Callable[[trio.abc.HalfCloseableStream], Awaitable[None]] | None = None,
    max_client_backlog_bytes: int | None = DEFAULT_MAX_CLIENT_BACKLOG_BYTES,
    ownership: HostOwnership | None = None,
    **connection_options: Any,
) -> AsyncIterator[SessionHost]:
    """A :class:`SessionHost` running its agent instances in a nursery of its own (``async with
    open_session_host(MyAgent) as host``); leaving the block ends them.  An exception raised in
    the body comes out as itself.

    ``agent_factory``: as for :class:`~acp_trio.AgentSideConnection` (``AcpApp(agent)`` takes the
    same), one instance per client connection's ``initialize``.  ``journal``: where session
    updates are numbered and kept (:class:`~acp_trio.host.Journal`).  Default: a SQLite journal
    (``SqliteSessionStore(path).journal()``, holding at most :data:`DEFAULT_JOURNAL_MAX_UPDATES`
    updates and :data:`DEFAULT_JOURNAL_MAX_BYTES` bytes per session) in a private temporary directory
    (``tempfile.mkdtemp``, mode 0700, under ``TMPDIR``) made when the host opens and removed, file
    and all, when it closes: on disk, so the host's memory stays bounded whatever its sessions'
    journals hold (a ``TMPDIR`` on tmpfs keeps them in RAM, outside the process).  A
    journal passed here is the caller's (``SqliteSessionStore(PATH).journal()`` keeps its file; the
    caller closes the store after the host); :class:`~acp_trio.host.MemoryJournal` keeps them in
    this process's memory (for tests, and for hosts that accept the RAM: up to the bounds per
    session).
    ``detached_ttl``: seconds a session may stay with no client attached before its turn is
    cancelled (``session/cancel``) and it is closed (``session/close``); ``None``: forever.
    ``max_detached_sessions``: sessions with no client attached kept at once; one more closes the
    oldest detached one the same way (``None``: no limit).  ``unattended_timeout``: seconds an
    agent->client request may wait with no client to answer it before ``unattended_policy``
    resolves it: ``"wait"`` (never), ``"reject"`` (a declining answer: permission ``cancelled``,
    elicitation ``decline``, other methods a -32603 error), ``"cancel"`` (``session/cancel`` to
    the agent, then the same).  ``max_client_backlog_bytes``: bytes of messages that may wait for
    one client connection (one that reads slower than its sessions stream, or not at all; default
    :data:`DEFAULT_MAX_CLIENT_BACKLOG_BYTES`, 64 MiB; ``None``: no limit); a message past it ends
    that connection, which detaches it (its sessions go on): it can come back with
    ``session/resume`` and the cursor.  A message put while nothing waits always goes, however
    long (up to ``max_message_size``).
    ``connection_options``: for each agent connection (``variant``,
    ``tap``, ``max_message_size``, ...).  ``serve_agent``: ``await serve_agent(stream)`` serves one
    agent instance on the far end of ``stream`` (NDJSON; the host closes its side to end the instance,
    and the instance ends when ``stream`` does), instead of ``agent_factory`` (then ``None``) in this
    process: the bridge's ``--detach`` runs a stdio agent process there.  Raises ``ValueError`` for a
    bad limit or policy, ``OSError`` when the default journal's temporary directory cannot be made.

    ``ownership``: a :class:`~acp_trio.host.HostOwnership` (several host processes sharing one
    PostgreSQL store): the host owns the sessions it makes live by leases in the store, renews
    them, fences its journal appends by them, takes over sessions whose owner died, and answers
    the load or resume of a session another live host owns with -32603 ``data.reason``
    :data:`~acp_trio.host.OWNED_REASON`, ``data.owner``, ``data.ownerUrl`` (forwarding to the owner is
    not done yet).  ``journal`` then defaults to the ownership store's ``journal()``, and must be a
    journal of that store.  See ``docs/site/guides/host.md``.
    """
    if unattended_policy not in ("wait", "reject", "cancel"):
        raise ValueError(f'unattended_policy is "wait", "reject" or "cancel", got {unattended_policy!r}')
    for name, value in (
        ("detached_ttl", detached_ttl),
        ("unattended_timeout", unattended_timeout),
    ):
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be positive seconds or None, got {value!r}")
    if max_client_backlog_bytes is not None and max_client_backlog_bytes < 1:
        raise ValueError(f"max_client_backlog_bytes must be positive bytes or None, got {max_client_backlog_bytes!r}")
    if max_detached_sessions is not None and max_detached_sessions < 0:
        raise ValueError(f"max_detached_sessions must be >= 0 or None, got {max_detached_sessions!r}")
    store: SqliteSessionStore | None = None
    directory = ""
    if journal is None and ownership is not None:
        journal = ownership.store.journal(max_updates=DEFAULT_JOURNAL_MAX_UPDATES, max_bytes=DEFAULT_JOURNAL_MAX_BYTES)
    if journal is None:  # the default: SQLite in a private directory of this host's, removed when it closes
        directory = tempfile.mkdtemp(prefix="acp-trio-host-")  # mode 0700
        try:
            store = SqliteSessionStore(os.path.join(directory, _DEFAULT_JOURNAL_FILE))
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        journal = store.journal(max_updates=DEFAULT_JOURNAL_MAX_UPDATES, max_bytes=DEFAULT_JOURNAL_MAX_BYTES)
    try:
        async with owned_nursery() as nursery:
            host = SessionHost(
                agent_factory,
                nursery,
                journal=journal,
                detached_ttl=detached_ttl,
                max_detached_sessions=max_detached_sessions,
                unattended_timeout=unattended_timeout,
                unattended_policy=unattended_policy,
                connection_options=connection_options,
                serve_agent=serve_agent,
                max_client_backlog_bytes=max_client_backlog_bytes,
                ownership=ownership,
            )
            if ownership is not None:
                nursery.start_soon(host._renew_leases, name="host lease renewal")
            try:
                yield host
            finally:  # no checkpoint here: a Cancelled would replace the body's exception
                host._stop()
    finally:
        if store is not None:  # every instance has ended: nothing appends any more
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(store.close)
            shutil.rmtree(directory, ignore_errors=True)


__all__ = [
    "DEFAULT_JOURNAL_MAX_BYTES",
    "DEFAULT_JOURNAL_MAX_UPDATES",
    "SessionHost",
    "SessionInfo",
    "open_session_host",
]

"""Sessions that outlive the process: a persistent session store behind ``session/load``, list, resume, close, delete.

Contract: a :class:`SessionStore` keeps every session an agent opens (``session/new``, or ``load``
/ ``resume`` of a stored one): its id, ``cwd``, ``additionalDirectories``, MCP server configs,
title, timestamps, and, in order, every ``session/update`` the agent sent for it and every
``session/prompt`` it received, as the exact wire lines.  :class:`SqliteSessionStore` keeps them in
one SQLite file (standard library ``sqlite3``, WAL mode) whose path the agent chooses;
:class:`MemorySessionStore` in memory (tests; nothing survives the process).  One call in the
agent's constructor turns it on::

    from acp_trio import session_store

    STORE = session_store.SqliteSessionStore(os.path.expanduser("~/.my-agent/sessions.db"))

    class MyAgent:
        def __init__(self, conn: AgentSideConnection) -> None:
            self.store = session_store.enable(conn, STORE)  # a SessionRecorder

:func:`enable` gives the connection (protocol version 1) these default handlers, unless the agent
object defines its own (an own one may call the recorder's, e.g. ``await self.store.replay(id)``):

- ``session/load``: replays the stored conversation as ``session/update`` notifications in the
  original order (each prompt as ``user_message_chunk`` s, one per content block; the agent's
  updates byte for byte: messages, thoughts, tool calls and their updates up to their final state,
  plans, modes, config options, ...), then answers with the session's modes (``session/new``'s,
  with the latest ``currentModeId``) and latest config options;
- ``session/list``: stored sessions, most recently active first, ``cwd`` filter, opaque cursors
  (pages of ``page_size``; an invalid cursor answers -32602); ``SessionInfo`` carries
  ``title`` (the last ``session_info_update`` title, else the first prompt's first line),
  ``updatedAt`` (the last activity recorded, to the second), ``additionalDirectories`` when there
  are some and ``_meta`` (that of the last ``session_info_update`` carrying one);
- ``session/resume``: no replay, answers modes and config options like ``session/load``;
- ``session/close``: cancels the session's turn (as ``session/cancel`` does), stops recording and
  frees its in-memory state; the record stays;
- ``session/delete``: cancels and ends the session if open, removes the record (an unknown id
  succeeds, as the spec says);
- ``load``, ``resume`` and ``close`` of an id the store does not know answer -32002 (resource
  not found) with ``data: {"sessionId": ...}``;

and ``initialize`` (the default answer or the agent's own) advertises ``loadSession`` and
``sessionCapabilities.list/resume/close/delete``.  Recording starts when a session opens and
stops when it ends (``session/close``, ``session/delete``, the connection closing).

**Cost.**  The agent's thread pays a dictionary lookup per update; the line it sends is put
together from the session's cached envelope and the ``update`` object (byte for byte what the
runtime's encoder makes), and the connection hands the store what is kept of it (the ``update``
object, or for a chunk of bare text just the text) batch by batch, as it writes the batch.  A
writer thread (niceness 10) commits what is queued every ``commit_interval`` (25 ms) while lines
come, one transaction per round.  ``python benchmarks/bench_store.py`` measures it.

**What a crash can lose.**  A SIGKILL keeps every committed transaction (WAL); the file reopens
cleanly and earlier rows are never damaged.  It loses what was recorded after the last commit:
the round being written and the lines queued behind it (at most about ``commit_interval`` of
output, plus lines the connection had queued but not yet written to the client).  ``await
store.flush()`` returns once everything sent or received so far is committed.  ``durable=True``
also survives power loss and OS crashes (an fsync per round); by default those may lose the last
rounds, never the file's consistency.

**Secrets.**  MCP server ``env`` and ``headers`` values are not written (their names are); pass
``store_secrets=True`` to keep them.

Limits: protocol version 1 connections only (a v2 connection gets none of this); only updates sent
through the typed API (``conn.client.session_update``, builders, peers) are recorded, not raw
``conn.connection.notify`` calls; updates a session sends before its ``session/new`` returned
are not recorded.  A replay rebuilds a client's :class:`~acp_trio.SessionState` as it was live
(see ``tests/test_session_store.py``), except that two prompts with no agent output between them
replay as one user message, and tool calls a client marked cancelled locally are not marked again.
Sources: ``docs/protocol/v1/session-setup.mdx``, ``session-list.mdx``, ``session-delete.mdx``,
``prompt-turn.mdx``; the schema's ``LoadSessionRequest``, ``ListSessionsRequest``/``Response``,
``SessionInfo``, ``ResumeSessionRequest``, ``CloseSessionRequest``, ``DeleteSessionRequest``.
"""

from __future__ import annotations

import atexit
import copy
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
import trio

from ._core import RESOURCE_NOT_FOUND, RequestError
from ._sessions import SessionInfo
from ._spec import UNSET
from ._store_db import (
    DEFAULT_COMMIT_INTERVAL,
    KIND_PROMPT,
    META_UPDATES,
    SCHEMA_VERSION,
    TEXT_CHUNK_HEAD,
    TEXT_LINE_TAIL,
    UPDATE_LINE_TAIL,
    Database,
    Job,
    Log,
    StoredSession,
    StoreError,
    StoreVersionError,
    Writer,
    decode_cursor,
    encode_cursor,
    lines_of,
)

if TYPE_CHECKING:
    from ._roles import AgentSideConnection

log = logging.getLogger("acp_trio.session_store")

_SESSION_CAPABILITIES = ("list", "resume", "close", "delete")
_DEFAULT_HANDLERS = {
    "session/load": "session_load",
    "session/list": "session_list",
    "session/resume": "session_resume",
    "session/close": "session_close",
    "session/delete": "session_delete",
}


class StoredConversation:
    """What :meth:`SessionStore.conversation` returns: ``session`` (:class:`StoredSession`) and
    ``events``: ``(kind, line)`` in order, ``kind`` ``"update"`` (a ``session/update`` the agent
    sent) or ``"prompt"`` (a ``session/prompt`` it received), ``line`` the wire bytes (ending in ``\\n``)."""

    __slots__ = ("events", "session")

    def __init__(self, session: StoredSession, rows: list[tuple[int, bytes]]) -> None:
        self.session = session
        self.events: list[tuple[str, bytes]] = []
        for kind, data in rows:
            what = "prompt" if kind == KIND_PROMPT else "update"
            self.events.extend((what, line) for line in lines_of(kind, session.session_id, data).splitlines(True))

    def messages(self) -> list[tuple[str, Any]]:
        """``events`` with each line decoded (JSON-RPC message objects)."""
        return [(kind, orjson.loads(line)) for kind, line in self.events]


class SessionStore:
    """Where sessions are kept; use :class:`SqliteSessionStore` or :class:`MemorySessionStore`.

    Options: ``store_secrets`` (keep MCP ``env``/``headers`` values), ``page_size`` (sessions per
    ``session/list`` page).  The methods below are for the agent's own use (the handlers of
    :func:`enable` are built on them); call them from trio.  :meth:`close` writes what is queued
    and releases the database (also done at interpreter exit).
    """

    def __init__(
        self,
        database: Database,
        *,
        threaded: bool,
        store_secrets: bool,
        page_size: int,
        commit_interval: float = DEFAULT_COMMIT_INTERVAL,
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        self.store_secrets = store_secrets
        self.page_size = page_size
        self._writer = Writer(database, threaded=threaded, commit_interval=commit_interval)
        self._recorders: weakref.WeakSet[SessionRecorder] = weakref.WeakSet()
        if threaded:
            self._writer.start()
            ref = weakref.ref(self)

            def close_at_exit() -> None:
                store = ref()
                if store is not None:
                    store.close()

            self._atexit = close_at_exit
            atexit.register(close_at_exit)

    @property
    def path(self) -> str:
        """The database file (``":memory:"`` for the in-memory store)."""
        return self._writer.database.path

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Write everything recorded so far, stop the writer and close the database (idempotent, blocking)."""
        if self._writer.closed:
            return
        self._writer.stop()
        hook = getattr(self, "_atexit", None)
        if hook is not None:
            atexit.unregister(hook)

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- running jobs ------------------------------------------------------------------------------
    def _submit(self, fn: Callable[[Database], Any], after: bool = False) -> None:
        """Queue ``fn(database)`` without waiting (errors are logged)."""
        job = Job(_logged(fn), after)
        self._writer.submit(job)

    async def _call(self, fn: Callable[[Database], Any] | None, after: bool) -> Any:
        writer = self._writer
        if after:  # reads and flushes see every line sent so far, also those still in a connection's outbox
            here = threading.get_ident()
            for recorder in list(self._recorders):
                if recorder.thread == here:
                    recorder.conn.connection.hand_over_records()
        if not writer.threaded:
            await trio.lowlevel.checkpoint()
            job = Job(fn, after)
            writer.submit(job)
        else:
            job = Job(fn, after, trio.lowlevel.current_trio_token())
            writer.submit(job)
            assert job.done is not None
            await job.done.wait()  # cancelled: the job still runs, its result is dropped
        if job.error is not None:
            raise job.error
        return job.result

    # -- the API -----------------------------------------------------------------------------------
    async def flush(self) -> None:
        """Return once every line recorded so far is committed.  Raises :class:`StoreError` when writing fails."""
        await self._call(None, True)

    async def get(self, session_id: str) -> StoredSession | None:
        """The stored session ``session_id``, or ``None``."""
        session: StoredSession | None = await self._call(lambda db: db.get(session_id), True)
        return session

    async def list_sessions(
        self, *, cwd: str | None = None, cursor: str | None = None, limit: int | None = None
    ) -> tuple[list[StoredSession], str | None]:
        """One page of stored sessions, most recently active first: ``(sessions, next_cursor)``
        (``next_cursor`` ``None``: the last page).  ``cwd``: only sessions in that directory.
        ``limit``: page size (default ``page_size``).  Raises ``ValueError`` for an invalid cursor."""
        after = None
        if cursor is not None:
            after = decode_cursor(cursor)
            if after is None:
                raise ValueError(f"invalid cursor {cursor!r}")
        size = limit or self.page_size
        sessions, more = await self._call(lambda db: db.page(cwd, after, size), True)
        next_cursor = encode_cursor(sessions[-1].updated_us, sessions[-1].row_id) if more and sessions else None
        return sessions, next_cursor

    async def conversation(self, session_id: str) -> StoredConversation | None:
        """The stored session and its lines in order, or ``None`` (e.g. to rebuild the agent's own context)."""
        found = await self._rows(session_id)
        return StoredConversation(*found) if found is not None else None

    async def delete(self, session_id: str) -> bool:
        """Remove the session and its lines; False when there was none.  Its pending lines are dropped."""
        for entry in list(self._writer.logs):
            if entry.session_id == session_id:
                entry.dropped = True
        deleted: bool = await self._call(lambda db: db.delete(session_id), False)
        return deleted

    async def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` (``"ok"`` when the file is sound)."""
        result: str = await self._call(lambda db: db.check(), True)
        return result

    # -- for the recorder --------------------------------------------------------------------------
    async def _rows(self, session_id: str) -> tuple[StoredSession, list[tuple[int, bytes]]] | None:
        rows: tuple[StoredSession, list[tuple[int, bytes]]] | None = await self._call(
            lambda db: db.events(session_id), True
        )
        return rows

    def _attach(
        self, session_id: str, info: SessionInfo, fresh: bool, servers: list[Any], entry: Log | None = None
    ) -> Log:
        """A :class:`Log` for ``session_id`` (``entry``, or a new one), its row created (``fresh``) or reopened."""
        if self._writer.closed:
            raise RuntimeError(f"{self!r} is closed")
        if entry is None:
            entry = Log(session_id)
        dirs = orjson.dumps(list(info.additional_directories)).decode()
        mcp = orjson.dumps([_redacted(s) if not self.store_secrets else s for s in servers]).decode()
        logs = self._writer.logs

        def open_row(db: Database) -> None:
            try:
                if fresh:
                    for other in list(logs):  # a replaced session: its pending lines go with it
                        if other is not entry and other.session_id == session_id:
                            other.dropped = True
                    entry.row_id, entry.title_source = db.create(session_id, info.cwd, dirs, mcp)
                else:
                    entry.row_id, entry.title_source = db.reopen(session_id, info.cwd, dirs, mcp)
            except BaseException:
                entry.dropped = True  # no row to write its lines to
                raise

        self._submit(open_row)
        logs[entry] = None
        return entry

    def _set(self, session_id: str, **fields: Any) -> None:
        self._submit(lambda db: db.set_fields(session_id, fields))


class SqliteSessionStore(SessionStore):
    """Sessions in the SQLite file ``path`` (created when missing; WAL mode; several processes may share it).

    ``durable``: fsync every commit (survives power loss, costs an fsync per round; default: a
    commit survives the process dying, not the machine).  ``commit_interval``: seconds the writer
    lets lines gather before it commits them (at most that much output is lost when the process
    dies).  ``store_secrets``, ``page_size``: see :class:`SessionStore`.  Opening a file of an
    older store version migrates it; a newer or foreign one raises :class:`StoreVersionError`
    (nothing is changed).
    """

    def __init__(
        self,
        path: str,
        *,
        store_secrets: bool = False,
        durable: bool = False,
        page_size: int = 100,
        commit_interval: float = DEFAULT_COMMIT_INTERVAL,
    ) -> None:
        super().__init__(
            Database(str(path), durable=durable),
            threaded=True,
            store_secrets=store_secrets,
            page_size=page_size,
            commit_interval=commit_interval,
        )


class MemorySessionStore(SessionStore):
    """Sessions in memory, for tests: the same behaviour as :class:`SqliteSessionStore` without a
    file or a thread (lines are written when the store is next asked something)."""

    def __init__(self, *, store_secrets: bool = False, page_size: int = 100) -> None:
        super().__init__(Database(":memory:"), threaded=False, store_secrets=store_secrets, page_size=page_size)


def _logged(fn: Callable[[Database], Any]) -> Callable[[Database], Any]:
    def run(db: Database) -> Any:
        try:
            return fn(db)
        except Exception:
            log.exception("%s: a session store operation failed", db.path)
            return None

    return run


def _redacted(server: Any) -> Any:
    """An MCP server's wire config without the values of its ``env`` and ``headers``."""
    if type(server) is not dict:
        return server
    out = dict(server)
    for key in ("env", "headers"):
        items = out.get(key)
        if type(items) is list:
            out[key] = [
                {k: v for k, v in item.items() if k != "value"} if type(item) is dict else item for item in items
            ]
    return out


def _not_found(session_id: str) -> RequestError:
    return RequestError(RESOURCE_NOT_FOUND, "Resource not found", {"sessionId": session_id})


# -- the agent side ---------------------------------------------------------------------------------


class SessionRecorder:
    """What :func:`enable` returns: the store's handlers and recording on one agent connection.

    ``conn``, ``store``.  The ``session_*`` methods are the default handlers (call them from the
    agent's own to add to them); :meth:`replay` sends a stored conversation.  ``recording``: the
    ids of the sessions being recorded now.
    """

    def __init__(self, conn: AgentSideConnection, store: SessionStore) -> None:
        self.conn = conn
        self.store = store
        self.thread = threading.get_ident()  # the connection's (trio's) thread
        self._active: dict[str, Log] = {}
        self._record: Callable[[str, Any], bool | None] | None = None  # made once v1 is negotiated
        writer = store._writer

        def handed() -> None:
            if writer.idle:
                writer.wake()

        conn.connection.records_handed = handed
        conn.sessions.on_open(self._opened)
        conn.sessions.on_end(self._ended)
        store._recorders.add(self)
        conn.connection.request_line_hooks["session/prompt"] = self._prompt_line

    @property
    def recording(self) -> frozenset[str]:
        return frozenset(self._active)

    # -- runtime hooks (AgentSideConnection calls these) -------------------------------------------
    def notification_hook(self, method: str) -> Callable[[str, Any], bool | None] | None:
        if method == "session/update" and self.conn.protocol_version < 2:
            if self._record is None:  # the layout probe needs the negotiated (v1) variant
                self._record = self._make_record()
            return self._record
        return None

    def _make_record(self) -> Callable[[str, Any], bool | None]:
        # The hot path.  Params of exactly sessionId and update (the usual case; the layout is
        # checked once per connection below) make the line the session's head, the update object,
        # then "}}": the store keeps the object (for a chunk of bare text, just the text) and the
        # line is put together from it: the same bytes, encoded in one go, without a copy to keep.
        active = self._active
        connection = self.conn.connection
        queue = connection.queue_line_into
        encode = connection.encode_notification
        writer = self.store._writer
        wake = writer.wake
        dumps = orjson.dumps
        tail, text_tail = UPDATE_LINE_TAIL, TEXT_LINE_TAIL
        usual, texts = self._usual_layouts()

        def record(method: str, wire: Any) -> bool | None:
            entry = active.get(wire["sessionId"])
            if entry is None:
                return None
            update = wire["update"]
            kind = update.get("sessionUpdate")
            if kind in META_UPDATES:
                entry.add_meta(update)
            if not usual or len(wire) != 2 or connection.instrumentation is not None:
                line = encode(method, wire)
                full = queue(line, line[:-1], entry.add_lines)
            elif (
                kind == "agent_message_chunk" and texts and len(update) == 2 and len(content := update["content"]) == 2
            ):
                if content.get("type") == "text":
                    text = dumps(content["text"])
                    full = queue(entry.head_text + text + text_tail, text, entry.add_texts)
                else:
                    body = dumps(update)
                    full = queue(entry.head + body + tail, body, entry.add_bodies)
            else:
                body = dumps(update)
                full = queue(entry.head + body + tail, body, entry.add_bodies)
            if writer.idle:
                wake()
            return full

        return record

    def _usual_layouts(self) -> tuple[bool, bool]:
        """Whether the typed layer encodes ``session/update`` params as ``sessionId`` then ``update``,
        and a text chunk as :data:`TEXT_CHUNK_HEAD` says (else those lines are kept whole)."""
        spec = self.conn.variant.NOTIFICATIONS.get("session/update")
        if spec is None:
            return False, False
        conv = self.conn.connection.converter
        update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "probe"}}
        try:
            probe = conv.structure_fn(spec.params_type)({"sessionId": "probe", "update": update})
            wire = conv.unstructure_fn(spec.params_type)(probe)
        except Exception:
            return False, False
        if type(wire) is not dict or list(wire) != ["sessionId", "update"]:
            return False, False
        return True, orjson.dumps(wire["update"]) == TEXT_CHUNK_HEAD + b'"probe"}}'

    def _prompt_line(self, line: bytes, params: Any) -> None:
        session_id = params.get("sessionId") if type(params) is dict else None
        entry = self._active.get(session_id) if type(session_id) is str else None
        if entry is not None:
            self.conn.connection.hand_over_records()  # the updates queued before it come first
            entry.add_prompt(line)
            if self.store._writer.idle:
                self.store._writer.wake()

    def add_routes(self) -> None:
        """Route the default handlers the agent lacks, and watch the agent's own session routes."""
        conn = self.conn
        if conn.protocol_version >= 2:
            return
        routes = conn.connection.routes
        requests = conn.variant.REQUESTS
        for method, attr in _DEFAULT_HANDLERS.items():
            spec = requests.get(method)
            if spec is not None and method not in routes:
                conn._add_route(spec, getattr(self, attr))
            elif method == "session/delete" and method in routes:
                routes[method] = routes[method].with_handler(self._deleting(routes[method].handler))
        for method, wrap in (
            ("session/new", self._new),
            ("session/set_mode", self._set_mode),
            ("session/set_config_option", self._set_config_option),
        ):
            route = routes.get(method)
            if route is not None:
                routes[method] = route.with_handler(wrap(route.handler))

    def advertise(self, response: Any) -> None:
        """Add ``loadSession`` and ``sessionCapabilities.list/resume/close/delete`` to an ``initialize`` response."""
        conn = self.conn
        if conn.protocol_version >= 2:
            return
        variant = conn.variant
        caps = response.agent_capabilities
        caps = copy.copy(caps) if isinstance(caps, variant.AgentCapabilities) else variant.AgentCapabilities()
        caps.load_session = True
        session = caps.session_capabilities
        if isinstance(session, variant.SessionCapabilities):
            session = copy.copy(session)
        else:
            session = variant.SessionCapabilities()
        for name in _SESSION_CAPABILITIES:
            if getattr(session, name) in (UNSET, None):
                setattr(session, name, getattr(variant, f"Session{name.capitalize()}Capabilities")())
        caps.session_capabilities = session
        response.agent_capabilities = caps

    # -- sessions opening and ending -------------------------------------------------------------
    def _opened(self, info: SessionInfo) -> None:
        if self.conn.protocol_version >= 2 or self.store._writer.closed:
            return
        fresh = info.method not in ("session/load", "session/resume")
        current = self._active.get(info.session_id)
        if current is not None and fresh:  # a new session under the same id replaces it
            current.closed = True
            current = None
        conv = self.conn.connection.converter
        servers = [conv.unstructure(s) for s in info.mcp_servers]
        self._active[info.session_id] = self.store._attach(info.session_id, info, fresh, servers, current)

    def _ended(self, info: SessionInfo) -> None:
        entry = self._active.pop(info.session_id, None)
        if entry is not None:
            entry.closed = True
            self.store._writer.wake()
        if info.end_reason == "session/delete":
            for other in list(self.store._writer.logs):
                if other.session_id == info.session_id:
                    other.dropped = True
            session_id = info.session_id
            if not self.store._writer.closed:
                self.store._submit(lambda db: db.delete(session_id))

    # -- wrappers around the agent's own handlers ------------------------------------------------
    def _new(self, inner: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        conv = self.conn.connection.converter

        async def new(params: Any) -> Any:
            result = await inner(params)
            session_id = getattr(result, "session_id", None)
            if session_id in self._active:
                fields: dict[str, Any] = {}
                modes = getattr(result, "modes", None)
                if modes not in (None, UNSET):
                    fields["modes"] = orjson.dumps(conv.unstructure(modes)).decode()
                    fields["current_mode_id"] = modes.current_mode_id
                options = getattr(result, "config_options", None)
                if isinstance(options, list):
                    fields["config_options"] = orjson.dumps([conv.unstructure(o) for o in options]).decode()
                if fields:
                    self.store._set(session_id, **fields)
            return result

        return new

    def _set_mode(self, inner: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        async def set_mode(params: Any) -> Any:
            result = await inner(params)
            self.store._set(params.session_id, current_mode_id=params.mode_id)
            return result

        return set_mode

    def _set_config_option(self, inner: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        conv = self.conn.connection.converter

        async def set_config_option(params: Any) -> Any:
            result = await inner(params)
            options = getattr(result, "config_options", None)
            if isinstance(options, list):
                wire = orjson.dumps([conv.unstructure(o) for o in options]).decode()
                self.store._set(params.session_id, config_options=wire)
            return result

        return set_config_option

    def _deleting(self, inner: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        async def delete(params: Any) -> Any:
            result = await inner(params)
            await self.store.delete(params.session_id)
            return result

        return delete

    # -- the default handlers ---------------------------------------------------------------------
    def _setup(self, session: StoredSession) -> dict[str, Any]:
        setup: dict[str, Any] = {}
        if session.modes is not None:
            setup["modes"] = session.modes
        if session.config_options is not None:
            setup["configOptions"] = session.config_options
        return setup

    def _result(self, method: str, wire: dict[str, Any]) -> Any:
        spec = self.conn.variant.REQUESTS[method]
        return self.conn.connection.converter.structure_fn(spec.result_type)(wire)

    async def replay(self, session_id: str) -> StoredSession:
        """Send the stored conversation of ``session_id`` as ``session/update`` notifications, in order.

        Prompts become ``user_message_chunk`` updates (one per content block, with the prompt's
        ``messageId`` if it had one); the agent's updates go out as they were sent.  Returns the
        stored session; raises :class:`RequestError` -32002 when there is none.
        """
        found = await self.store._rows(session_id)
        if found is None:
            raise _not_found(session_id)
        session, rows = found
        connection = self.conn.connection
        for kind, data in rows:
            if kind == KIND_PROMPT:
                for line in data.splitlines():
                    self._user_chunks(session_id, line)
                continue
            data = lines_of(kind, session_id, data)
            if data and connection.queue_lines(data):
                await connection.wait_writable()
        return session

    def _user_chunks(self, session_id: str, line: bytes) -> None:
        try:
            params = orjson.loads(line).get("params") or {}
        except (orjson.JSONDecodeError, AttributeError):
            log.warning("session %r: skipping a stored prompt that does not decode", session_id)
            return
        message_id = params.get("messageId")
        for block in params.get("prompt") or ():
            update: dict[str, Any] = {"sessionUpdate": "user_message_chunk", "content": block}
            if type(message_id) is str:
                update["messageId"] = message_id
            self.conn.connection.queue_notification("session/update", {"sessionId": session_id, "update": update})

    async def session_load(self, params: Any) -> Any:
        """``session/load``: replay the stored conversation, then answer its modes and config options."""
        session = await self.replay(params.session_id)
        return self._result("session/load", self._setup(session))

    async def session_resume(self, params: Any) -> Any:
        """``session/resume``: no replay; answer the stored session's modes and config options."""
        session = await self.store.get(params.session_id)
        if session is None:
            raise _not_found(params.session_id)
        return self._result("session/resume", self._setup(session))

    async def session_list(self, params: Any) -> Any:
        """``session/list``: stored sessions, most recent first, ``cwd`` filter, cursor pagination."""
        cwd = params.cwd if isinstance(params.cwd, str) else None
        cursor = params.cursor if isinstance(params.cursor, str) else None
        try:
            sessions, next_cursor = await self.store.list_sessions(cwd=cwd, cursor=cursor)
        except ValueError:
            raise RequestError.invalid_params(
                {"path": "$.cursor", "detail": "not a cursor this agent gave out"}
            ) from None
        infos = []
        for s in sessions:
            info: dict[str, Any] = {"sessionId": s.session_id, "cwd": s.cwd, "updatedAt": s.updated_at}
            if s.additional_directories:
                info["additionalDirectories"] = list(s.additional_directories)
            if s.title is not None:
                info["title"] = s.title
            if s.meta is not None:
                info["_meta"] = s.meta
            infos.append(info)
        wire: dict[str, Any] = {"sessions": infos}
        if next_cursor is not None:
            wire["nextCursor"] = next_cursor
        return self._result("session/list", wire)

    async def _cancel_turn(self, session_id: str) -> None:
        cancel = self.conn.variant.NOTIFICATIONS.get("session/cancel")
        if cancel is not None and session_id in self.conn.sessions:
            await self.conn._session_cancel(cancel.params_type(session_id=session_id))

    async def session_close(self, params: Any) -> Any:
        """``session/close``: cancel the session's turn, stop recording it; the record stays."""
        session_id = params.session_id
        if session_id not in self.conn.sessions and await self.store.get(session_id) is None:
            raise _not_found(session_id)
        await self._cancel_turn(session_id)
        return self._result("session/close", {})

    async def session_delete(self, params: Any) -> Any:
        """``session/delete``: cancel and end the session if open, remove its record (unknown ids succeed)."""
        await self._cancel_turn(params.session_id)
        await self.store.delete(params.session_id)
        return self._result("session/delete", {})


def enable(conn: AgentSideConnection, store: SessionStore) -> SessionRecorder:
    """Keep ``conn``'s sessions in ``store`` and serve ``session/load``, ``list``, ``resume``, ``close``
    and ``delete`` from it (see the module docstring).  Call it from the agent's constructor (or
    before ``initialize``).  Returns the :class:`SessionRecorder`.  Raises ``TypeError`` for a
    client connection, ``RuntimeError`` when already enabled or the store is closed."""
    from ._roles import AgentSideConnection

    if not isinstance(conn, AgentSideConnection):
        raise TypeError(f"enable() needs an AgentSideConnection, got {type(conn).__name__}")
    if conn._session_store is not None:
        raise RuntimeError("a session store is already enabled on this connection")
    if store._writer.closed:
        raise RuntimeError(f"{store!r} is closed")
    recorder = SessionRecorder(conn, store)
    conn._session_store = recorder
    if getattr(conn, "handler", None) is not None:  # enabled after the routes were built
        recorder.add_routes()
        conn._notify_plans.clear()
    return recorder


__all__ = [
    "SCHEMA_VERSION",
    "MemorySessionStore",
    "SessionRecorder",
    "SessionStore",
    "SqliteSessionStore",
    "StoreError",
    "StoreVersionError",
    "StoredConversation",
    "StoredSession",
    "enable",
]

"""Sessions that outlive the process: a persistent session store behind ``session/load``, list, resume, close, delete.

Contract: a :class:`SessionStore` keeps every session an agent opens (``session/new``,
``session/fork``, or ``load`` / ``resume`` of a stored one), on protocol version 1 or 2: its id,
``cwd``, ``additionalDirectories``, MCP server configs, title, timestamps, and, in order, every
``session/update`` the agent sent for it and every ``session/prompt`` it received, as the exact
wire lines.  :class:`SqliteSessionStore` keeps them in
one SQLite file (standard library ``sqlite3``, WAL mode) whose path the agent chooses (the
embedded default); ``PostgresSessionStore(conninfo)`` in a PostgreSQL database, with the same
contract, for several host processes on several machines, and the ownership leases they share
(``claim``, ``renew``, ``release``, ``owner``; journal appends fenced by a lease's epoch: see
``acp_trio._store_pg``; the ``postgres`` extra); :class:`MemorySessionStore` in memory (tests;
nothing survives the process).  The choice is the constructor.  One call in the agent's
constructor turns it on::

    from acp_trio import session_store

    STORE = session_store.SqliteSessionStore(os.path.expanduser("~/.my-agent/sessions.db"))

    class MyAgent:
        def __init__(self, conn: AgentSideConnection) -> None:
            self.store = session_store.enable(conn, STORE)  # a SessionRecorder

:func:`enable` gives the connection these default handlers (those of the negotiated version),
unless the agent object defines its own (an own one may call the recorder's, e.g. ``await
self.store.replay(id)``):

- ``session/load``: replays the stored conversation as ``session/update`` notifications in the
  original order (each prompt as ``user_message_chunk`` s, one per content block; the agent's
  updates byte for byte: messages, thoughts, tool calls and their updates up to their final state,
  plans, modes, config options, ...), then answers with the session's modes (``session/new``'s,
  with the latest ``currentModeId``) and latest config options; prompts that follow one another
  with no update between them get a ``messageId`` each (``acp-trio-prompt-N``, N counting the
  replayed prompts, unless the prompt carried its own), so they replay as separate messages: the
  schema's ``ContentChunk.messageId`` is the only mark of a new message, and session-setup.mdx lets
  an agent give replayed messages opaque, unique ids (so a client's replayed state differs from
  its live one only in these user messages' ``message_id``);
- ``session/list``: stored sessions, most recently active first, ``cwd`` filter, opaque cursors
  (pages of ``page_size``; an invalid cursor answers -32602); ``SessionInfo`` carries
  ``title`` (the last ``session_info_update`` title, else the first prompt's first line),
  ``updatedAt`` (the last activity recorded, to the second), ``additionalDirectories`` when there
  are some and ``_meta`` (that of the last ``session_info_update`` carrying one);
- ``session/resume``: answers modes and config options like ``session/load``; v1: no replay; v2:
  ``replayFrom`` ``{"type": "start"}`` replays the conversation first (the agent's own
  ``user_message`` updates stand for its prompts; another cursor type answers -32602), then, with
  or without replay, the current ``state_update`` (``idle``, or ``running`` during a turn), as
  ``session-setup.mdx`` and the v2 schema's ``ResumeSessionResponse`` ask;
- ``session/close``: cancels the session's turn (as ``session/cancel`` does), stops recording and
  frees its in-memory state; the record stays;
- ``session/delete``: cancels and ends the session if open, removes the record (an unknown id
  succeeds, as the spec says);
- ``load``, ``resume`` and ``close`` of an id the store does not know answer -32002 (resource
  not found) with ``data: {"sessionId": ...}``; a session recorded under the other protocol
  version is not listed, and ``load`` / ``resume`` of it answer -32602 (``data.protocolVersion``);

and ``initialize`` (the default answer or the agent's own) advertises v1 ``loadSession`` and
``sessionCapabilities.list/resume/close/delete``, v2 ``session.delete`` (the rest is v2's baseline
``session``).  Recording starts when a session opens and stops when it ends (``session/close``,
``session/delete``, the connection closing); lines still being written to the client then are kept
once written (a connection that closes gives its writer at most ``close_timeout`` s).  A
``session/fork`` (unstable) starts as a copy of its parent's record: its history, title, modes and
config options.

**Sessions of ``acp_trio.neutral``** (an ``Agent`` with ``store`` set, not :func:`enable`) are
recorded in the canonical form whichever protocol version made them: ``protocol_version`` 2, the
agent's v2 ``update`` objects (a diff's exact v1 texts in their ``_meta``) and each
``session/prompt`` line, so the neutral layer replays them to v1 and v2 clients alike; a session
recorded by a v1 :func:`enable` connection is rewritten in that form (in one transaction) when the
neutral layer first loads it.

**Acknowledged means stored.**  The answer to ``session/new``, ``session/load``,
``session/resume``, ``session/fork`` and ``session/prompt`` (and, on v2, the ``state_update``
``idle`` that ends a turn) is sent only once its records and everything sent or received before
it are committed (fsynced with ``durable=True``): a crash right after a client got such an answer
loses nothing it acknowledged.  Updates in the middle of a turn may still lag by the window below.
A store that cannot write does not hold answers back (the error is logged; the lines are retried).

**Cost.**  The agent's thread pays a dictionary lookup per update; the line it sends is put
together from the session's cached envelope and the ``update`` object (byte for byte what the
runtime's encoder makes), and the connection hands the store what is kept of it (the ``update``
object, or for a chunk of bare text just the text) batch by batch, once the batch is written (a
write that fails keeps nothing).  A writer thread (niceness 10) commits what is queued every
``commit_interval`` (25 ms) while lines come, one transaction per round; an acknowledging answer
waits for one commit.  ``python benchmarks/bench_store.py`` measures both.

**What a crash can lose.**  A SIGKILL keeps every committed transaction (WAL); the file reopens
cleanly and earlier rows are never damaged.  It loses what was recorded after the last commit,
never anything acknowledged: in a turn that was not answered yet, the round being written and
the lines queued behind it (at most about ``commit_interval`` of output, plus lines the
connection had queued but not yet written to the client).  ``await store.flush()`` returns once
everything sent or received so far is committed.  ``durable=True``
also survives power loss and OS crashes (an fsync per round); by default those may lose the last
rounds, never the file's consistency.

**The session journal.**  ``store.journal(max_updates=100_000, max_bytes=64 << 20)`` gives a
:class:`SessionJournal` (a :class:`Journal`): numbered ``session/update`` lines per session id, for
a session host (``acp_trio.host``) to replay what a reattaching client missed (v2
``session/resume`` ``replayFrom``, session-setup.mdx § Resuming Sessions).  Numbers start at 1 per
session and are consecutive across calls and batches, in the order ``append`` is called; lines are
kept byte for byte (the exact wire line, ``bytes`` without its newline).  It is independent of the
recording above (a journaled session needs no record) and lives in the same file (tables
``journals`` and ``journal_lines``; schema version 4, older files migrated in place): numbers
survive a reopen, and a new process goes on after the last.  ``append`` returns once its lines are
committed, as the recording's acknowledging answers do; it does not wait for ``commit_interval``:
the writer commits at once, and appends made meanwhile share its next transaction, so batches and
concurrent sessions cost less per line than one awaited line at a time (``python
benchmarks/bench_journal.py`` on a loaded 2-CPU machine: 1,300 to 2,900 awaited one-line
appends/s, 10,000 to 22,000 lines/s in batches of 10, 30,000 to 75,000 in batches of 100: a host
appends the lines it read together in one call).  **Bounds**, per session: an ``append`` that takes the journal
over ``max_updates`` lines or ``max_bytes`` bytes (the sum of the lines' lengths) drops its oldest
lines until both hold again, in the same transaction; the newest line is always kept (alone when
it is longer than ``max_bytes``), so the numbering goes on, and ``first`` advances.  ``read(id,
after)`` returns what is held above ``after``: asked from before ``first``, it starts at
``first`` (the host answers such a cursor -32602 with the oldest number).  Memory stays bounded:
lines are read from the database, in pages when ``read`` is given a ``limit``, never kept per
session in the process; a file store reads on a connection of its own, in a worker thread, so a
replay neither waits behind the writer's commits nor holds up other sessions' appends.  ``forget``
deletes a session's lines (numbering starts again at 1);
:meth:`SessionStore.delete` forgets the session's journal too.  Errors: an append that cannot be
written raises :class:`StoreError` and stores nothing of that call (the next append gets the
numbers it would have had: no hole); a closed store raises ``RuntimeError``; an append cancelled
while it waits is still stored.  Two processes appending to one session's journal get consecutive
numbers too (each commit reads the last number under SQLite's write lock).

**Secrets.**  MCP server ``env`` and ``headers`` values are not written (their names are); pass
``store_secrets=True`` to keep them.

Limits: only updates sent through the typed API (``conn.client.session_update``, builders,
peers) are recorded, not raw ``conn.connection.notify`` calls; updates a session sends before its
``session/new`` (or fork) returned are not recorded; v2 ``state_update`` s are not kept (they are
live state, not history); a ``session/prompt`` inside a JSON-RPC batch is kept re-encoded on its
own (the array's bytes are not); a fork's copied prompt lines are its parent's requests as
received.  A replay rebuilds a client's :class:`~acp_trio.SessionState` as it was live (see
``tests/test_session_store.py``), except that tool calls a client marked cancelled locally are
not marked again.  Sources: ``docs/protocol/v1/session-setup.mdx``, ``session-list.mdx``,
``session-delete.mdx``, ``prompt-turn.mdx``, ``docs/protocol/v2/session-setup.mdx``,
``prompt-lifecycle.mdx``; the schema's ``LoadSessionRequest``, ``ListSessionsRequest``/``Response``,
``SessionInfo``, ``ResumeSessionRequest`` (``replayFrom``), ``CloseSessionRequest``,
``DeleteSessionRequest``, ``StateUpdate``, ``ForkSessionRequest`` (unstable).
"""

from __future__ import annotations

import atexit
import copy
import logging
import sqlite3
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

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
    JournalOp,
    Log,
    Reader,
    StoredSession,
    StoreError,
    StoreVersionError,
    Writer,
    decode_cursor,
    encode_cursor,
    journal_bounds,
    journal_read,
    lines_of,
)

if TYPE_CHECKING:
    from ._connection import Connection
    from ._roles import AgentSideConnection

log = logging.getLogger("acp_trio.session_store")

CANONICAL_VERSION = 2
"""The protocol version ``acp_trio.neutral`` records its sessions under: v2 updates, the form
both versions replay from (a v1 client gets them projected)."""

_SESSION_CAPABILITIES = ("list", "resume", "close", "delete")
_ACKNOWLEDGED = ("session/new", "session/load", "session/resume", "session/fork", "session/prompt")
"""Requests whose answer is sent only once the records before it are committed (acknowledged means stored)."""
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

    settle_timeout: float = 1.0
    """Seconds a read or :meth:`flush` waits at most for lines still being written to a client (see
    :meth:`flush`); lines not written by then are not seen by it (they are kept once written)."""

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
        # journal reads on a connection of their own: they never wait behind the writer's commits
        self._reader = Reader(database.path) if threaded and database.path not in (":memory:", "") else None
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
        if self._reader is not None:
            self._reader.close()
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

    async def _settle(self) -> None:
        """Let reads and flushes see the lines still being written to clients, waiting only for what the
        caller needs: the lines its own connection queued (when it runs in a task of a connection of
        this store, e.g. a handler), else those of every connection of this thread; at most
        :attr:`settle_timeout` s, so a client that stopped reading holds nobody else up."""
        here = threading.get_ident()
        connections = [r.conn.connection for r in list(self._recorders) if r.thread == here]
        own = _calling_connection(connections)
        waits = [c for c in ([own] if own is not None else connections) if c.records_pending]
        if not waits:
            return
        with trio.move_on_after(self.settle_timeout) as scope:
            if len(waits) == 1:
                await waits[0].wait_written()  # written: their records are in the logs
            else:
                async with trio.open_nursery() as nursery:
                    for connection in waits:
                        nursery.start_soon(connection.wait_written)
        if scope.cancelled_caught:
            log.debug("%s: lines still unwritten after %g s are not seen by this read", self.path, self.settle_timeout)

    async def _call(self, fn: Callable[[Database], Any] | None, after: bool, settle: bool = True) -> Any:
        writer = self._writer
        if after and settle:  # reads and flushes see the lines being written, also those still in an outbox
            await self._settle()
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

    async def _barrier(self, connection: Connection) -> None:
        """Return once every line ``connection`` queued so far is written and, with everything recorded
        before, committed (fsynced when durable).  Raises :class:`StoreError` when writing fails."""
        await connection.wait_written()
        await self._call(None, True, settle=False)

    # -- the API -----------------------------------------------------------------------------------
    async def flush(self) -> None:
        """Return once every line recorded so far is committed: every prompt received, and every update
        written to its client.  Lines still queued are waited for until written, at most
        :attr:`settle_timeout` s: those of the caller's own connection when called from one of its
        tasks (a handler, a background task), else those of every connection of this thread (a client
        that stopped reading delays no other connection's flush, and anyone's by at most that).  The
        reads (:meth:`get`, :meth:`list_sessions`, :meth:`conversation`) wait the same way.
        Raises :class:`StoreError` when writing fails."""
        await self._call(None, True)

    async def get(self, session_id: str) -> StoredSession | None:
        """The stored session ``session_id``, or ``None``."""
        session: StoredSession | None = await self._call(lambda db: db.get(session_id), True)
        return session

    async def list_sessions(
        self,
        *,
        cwd: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
        protocol_version: int | None = None,
    ) -> tuple[list[StoredSession], str | None]:
        """One page of stored sessions, most recently active first: ``(sessions, next_cursor)``
        (``next_cursor`` ``None``: the last page).  ``cwd``: only sessions in that directory.
        ``limit``: page size (default ``page_size``).  ``protocol_version``: only sessions recorded
        under that ACP version.  Raises ``ValueError`` for an invalid cursor."""
        after = None
        if cursor is not None:
            after = decode_cursor(cursor)
            if after is None:
                raise ValueError(f"invalid cursor {cursor!r}")
        size = limit or self.page_size
        sessions, more = await self._call(lambda db: db.page(cwd, after, size, protocol_version), True)
        next_cursor = encode_cursor(sessions[-1].updated_us, sessions[-1].row_id) if more and sessions else None
        return sessions, next_cursor

    async def conversation(self, session_id: str) -> StoredConversation | None:
        """The stored session and its lines in order, or ``None`` (e.g. to rebuild the agent's own context)."""
        found = await self._rows(session_id)
        return StoredConversation(*found) if found is not None else None

    async def delete(self, session_id: str) -> bool:
        """Remove the session and its lines, and forget its journal (:meth:`journal`); False when
        there was no stored session.  Its pending lines are dropped."""
        for entry in list(self._writer.logs):
            if entry.session_id == session_id:
                entry.dropped = True
        forget = self._queue_journal(JournalOp(session_id, None))  # in order with the journal's appends
        deleted: bool = await self._call(lambda db: db.delete(session_id), False)
        await self._journal_done(forget)
        return deleted

    def journal(self, *, max_updates: int = 100_000, max_bytes: int = 64 << 20) -> SessionJournal:
        """A :class:`SessionJournal` on this store: numbered ``session/update`` lines per session,
        at most ``max_updates`` lines and ``max_bytes`` bytes (the sum of the lines' lengths) held
        per session, the oldest dropped beyond.  Raises ``ValueError`` for a bound below 1."""
        return SessionJournal(self, max_updates=max_updates, max_bytes=max_bytes)

    def _queue_journal(self, op: JournalOp) -> JournalOp:
        """Queue ``op`` behind the journal operations queued so far (inline writer: apply it now)."""
        if self._writer.threaded:
            op.token = trio.lowlevel.current_trio_token()
            op.done = trio.Event()
        self._writer.submit_journal(op)
        return op

    async def _journal_done(self, op: JournalOp) -> int:
        """``op``'s result once committed; raises :class:`StoreError` when nothing of it was stored."""
        if op.done is not None:
            await op.done.wait()  # cancelled: the op is still applied, its result is dropped
        else:
            await trio.lowlevel.checkpoint()
        if op.error is not None:
            raise op.error
        return op.result

    async def _journal_op(self, op: JournalOp) -> int:
        """Queue ``op`` and return its result once committed; raises :class:`StoreError` when it
        could not be stored, ``RuntimeError`` when the store is closed."""
        return await self._journal_done(self._queue_journal(op))

    async def _journal_rows(self, session_id: str, after: int, limit: int | None) -> list[tuple[int, bytes]]:
        """What :meth:`SessionJournal.read` returns (a backend's hook)."""
        rows: list[tuple[int, bytes]] = await self._journal_read(lambda db: journal_read(db, session_id, after, limit))
        return rows

    async def _journal_bounds(self, session_id: str) -> tuple[int, int]:
        """``(first, last)`` of ``session_id``'s journal (``(0, 0)``: none; a backend's hook)."""
        bounds: tuple[int, int] = await self._journal_read(lambda db: journal_bounds(db, session_id))
        return bounds

    async def _journal_read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """``fn(connection)`` on the store's reader connection in a worker thread (a file store:
        committed data, not waiting for the writer), else as a job of the writer."""
        if self._reader is None:
            return await self._call(lambda db: fn(db.db), True, settle=False)
        if self._writer.closed:
            raise RuntimeError(f"{self!r} is closed")
        return await trio.to_thread.run_sync(self._reader.run, fn)

    leases = False
    """Whether the store keeps ownership leases (``SessionJournal.append(..., epoch=)`` is fenced by them)."""

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
        self,
        session_id: str,
        info: SessionInfo,
        fresh: bool,
        servers: list[Any],
        entry: Log | None = None,
        version: int = 1,
        fork: tuple[str, dict[str, Any]] | None = None,
    ) -> Log:
        """A :class:`Log` for ``session_id`` (``entry``, or a new one), its row created (``fresh``) or
        reopened; ``fork``: ``(parent id, fields)``, the row is a copy of the parent's, made behind
        the lines queued so far (the parent's included), then ``fields`` are set."""
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
                    if fork is not None:
                        row = db.fork(fork[0], session_id, info.cwd, dirs, mcp, version, fork[1])
                    else:
                        row = db.create(session_id, info.cwd, dirs, mcp, version)
                else:
                    row = db.reopen(session_id, info.cwd, dirs, mcp, version)
                entry.row_id, entry.title_source = row
            except BaseException:
                entry.dropped = True  # no row to write its lines to
                raise

        self._submit(open_row, after=fork is not None)
        logs[entry] = None
        return entry

    def _set(self, session_id: str, **fields: Any) -> None:
        self._submit(lambda db: db.set_fields(session_id, fields))

    # -- for acp_trio.neutral: sessions kept in the canonical (v2) form ------------------------------
    def _open_canonical(
        self,
        session_id: str,
        cwd: str,
        additional_directories: tuple[str, ...],
        servers: list[Any],
        fresh: bool,
        entry: Log | None = None,
    ) -> Log:
        """A :class:`Log` for a session of ``acp_trio.neutral`` (recorded as protocol version 2: its
        updates are v2 ``update`` objects), its row created (``fresh``) or reopened with these
        roots and MCP servers (wire JSON)."""
        info = SessionInfo(session_id, cwd, additional_directories)
        return self._attach(session_id, info, fresh, servers, entry, CANONICAL_VERSION)

    def _record(self, entry: Log, update: dict[str, Any]) -> None:
        """Keep one canonical update (v2 wire JSON of ``session/update``'s ``update``)."""
        if update.get("sessionUpdate") in META_UPDATES:
            entry.add_meta(update)
        entry.add_bodies(orjson.dumps(update))
        if self._writer.idle:
            self._writer.wake()

    def _record_prompt(self, entry: Log, line: bytes) -> None:
        """Keep a ``session/prompt`` line (the title and prompt count come from it; a canonical
        replay uses the ``user_message`` update instead)."""
        entry.add_prompt(line)
        if self._writer.idle:
            self._writer.wake()

    async def _commit(self) -> None:
        """Return once everything recorded so far is committed (no wait for connections' writes)."""
        await self._call(None, True, settle=False)

    async def _migrate(self, session_id: str, rows: list[tuple[int, bytes]]) -> bool:
        """Replace ``session_id``'s events by ``rows`` (``(kind, data)``) recorded as the canonical
        form, in one transaction; False when it is not stored."""
        done: bool = await self._call(lambda db: db.rewrite(session_id, rows, CANONICAL_VERSION), False)
        return done


class Journal(Protocol):
    """Numbered ``session/update`` lines per session, for a session host's replay on reattach.

    Numbers start at 1 per session id and are consecutive; a line is the exact wire line of a
    ``session/update`` (``bytes``, without the trailing newline).  :class:`SessionJournal` keeps
    them in a session store; any object with these methods does.
    """

    async def append(self, session_id: str, lines: Sequence[bytes]) -> int:
        """Add ``lines`` after the session's last; return the number of the last (the current last
        when ``lines`` is empty)."""
        ...

    async def read(self, session_id: str, after: int, *, limit: int | None = None) -> list[tuple[int, bytes]]:
        """``(number, line)`` of the lines held numbered above ``after``, in order, at most ``limit``."""
        ...

    async def first(self, session_id: str) -> int:
        """The oldest number held: 1 when nothing was dropped, 0 when the journal is empty."""
        ...

    async def last(self, session_id: str) -> int:
        """The newest number given, 0 when none."""
        ...

    async def forget(self, session_id: str) -> None:
        """Delete the session's lines; its numbering starts again at 1."""
        ...


class SessionJournal:
    """A :class:`Journal` in a :class:`SessionStore` (``store.journal()``): see the module docstring.

    ``store``; ``max_updates`` (lines) and ``max_bytes`` (bytes: the sum of the lines' lengths)
    bound what each session keeps: an :meth:`append` that goes over either drops the session's
    oldest lines until both hold again (its newest line is kept even when alone it is longer
    than ``max_bytes``), and :meth:`first` advances.  Call it from trio, like the store.  Errors:
    :class:`StoreError` when the store could not write (nothing of that call was stored: the
    numbers it would have had are given to the next append), ``RuntimeError`` when the store is
    closed, ``ValueError`` for bad arguments.  Numbers go up to 2^40 - 1 per session (an append
    past it raises :class:`StoreError`; :meth:`forget` starts again).
    """

    __slots__ = ("max_bytes", "max_updates", "store")

    def __init__(self, store: SessionStore, *, max_updates: int = 100_000, max_bytes: int = 64 << 20) -> None:
        if max_updates < 1 or max_bytes < 1:
            raise ValueError(f"journal bounds must be at least 1, got max_updates={max_updates}, max_bytes={max_bytes}")
        self.store = store
        self.max_updates = max_updates
        self.max_bytes = max_bytes

    def __repr__(self) -> str:
        return f"SessionJournal({self.store!r}, max_updates={self.max_updates}, max_bytes={self.max_bytes})"

    async def append(self, session_id: str, lines: Sequence[bytes], *, epoch: int | None = None) -> int:
        """Add ``lines`` (wire lines without their newline, in order) after the session's last line;
        return the number of the last one (of the session's last line when ``lines`` is empty).

        ``epoch``: fence the append by the session's ownership lease (a store with leases,
        ``PostgresSessionStore``: the ``epoch`` of the :class:`~acp_trio._store_pg.Lease` its
        ``claim`` gave): stored only while that lease holds (not expired, not claimed again since),
        else ``LeaseLostError`` and nothing stored.  ``None``: not fenced.  Another store raises
        ``ValueError`` for an epoch (it keeps no leases).

        Returns once they are committed, with everything recorded before (acknowledged means
        stored; fsynced with ``durable=True``): appends made while the writer commits share its
        next transaction, so concurrent callers and batches cost less per line than one awaited
        line at a time (see ``benchmarks/bench_journal.py``).  Appends are numbered in the order
        they are called, across tasks.  Cancelled while waiting: the lines are still stored (once
        a later ``append`` or :meth:`SessionStore.flush` returns, they are committed).
        Raises :class:`StoreError` (nothing stored), ``RuntimeError`` (store closed), ``TypeError``
        for a line that is not bytes.
        """
        kept = [line if type(line) is bytes else _line_bytes(line) for line in lines]
        op = JournalOp(session_id, kept, self.max_updates, self.max_bytes)
        if epoch is not None:
            if not self.store.leases:
                raise ValueError(f"{self.store!r} keeps no ownership leases: append without an epoch")
            op.epoch = epoch
        return await self.store._journal_op(op)

    async def read(self, session_id: str, after: int, *, limit: int | None = None) -> list[tuple[int, bytes]]:
        """``(number, line)`` of the session's lines numbered above ``after``, in order, at most
        ``limit`` of them (``None``: all), read from the database (page with ``limit`` and the last
        number read to bound memory; a file store reads on its own connection, never waiting for
        the writer).  Lines dropped by the bounds are not there: when ``after`` is
        below ``first - 1`` the lines start at :meth:`first` (whether that is an error is the
        caller's business).  Sees every append that returned before it was called.  Raises
        ``ValueError`` for a ``limit`` below 1."""
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        return await self.store._journal_rows(session_id, after, limit)

    async def first(self, session_id: str) -> int:
        """The oldest number still held: 1 when nothing was dropped, 0 when the journal is empty."""
        return (await self.store._journal_bounds(session_id))[0]

    async def last(self, session_id: str) -> int:
        """The number of the session's last line (0: none since the journal began or was forgotten)."""
        return (await self.store._journal_bounds(session_id))[1]

    async def forget(self, session_id: str) -> None:
        """Delete the session's lines (in order with the appends before it); numbering starts again at 1."""
        await self.store._journal_op(JournalOp(session_id, None))


def _line_bytes(line: Any) -> bytes:
    if isinstance(line, bytearray | memoryview):
        return bytes(line)
    raise TypeError(f"a journal line is bytes (a wire line without its newline), got {type(line).__name__}")


class SqliteSessionStore(SessionStore):
    """Sessions in the SQLite file ``path`` (created when missing; WAL mode; several processes may share it).

    ``durable``: fsync every commit (survives power loss, costs an fsync per round; default: a
    commit survives the process dying, not the machine).  ``commit_interval``: seconds the writer
    lets lines gather before it commits them (at most that much output of a turn not answered yet
    is lost when the process dies; an answer that ends something waits for its commit, not for the
    interval).  ``store_secrets``, ``page_size``: see :class:`SessionStore`.  Opening a file of an
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


def _calling_connection(connections: list[Connection]) -> Connection | None:
    """The connection among ``connections`` whose tasks (handlers, background tasks, and the tasks
    they start) include the current task, or ``None``."""
    nurseries = {id(c._nursery): c for c in connections if c._nursery is not None}
    if not nurseries:
        return None
    task: Any = trio.lowlevel.current_task()
    while task is not None:
        nursery = task.parent_nursery
        if nursery is None:
            return None
        found = nurseries.get(id(nursery))
        if found is not None:
            return found
        task = nursery.parent_task
    return None


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
    agent's own to add to them); :meth:`replay` sends a stored conversation, :meth:`send_state`
    the current state of a v2 session.  ``recording``: the ids of the sessions being recorded now.
    """

    def __init__(self, conn: AgentSideConnection, store: SessionStore) -> None:
        self.conn = conn
        self.store = store
        self.thread = threading.get_ident()  # the connection's (trio's) thread
        self._active: dict[str, Log] = {}
        self._forks: dict[str, tuple[SessionInfo, list[Any]]] = {}  # opened by session/fork, row not made yet
        self._closing: list[Log] = []  # ended sessions whose lines the connection is still writing
        self._records: dict[int, Callable[[str, Any], Any]] = {}  # per protocol version, made once negotiated
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
    def notification_hook(self, method: str) -> Callable[[str, Any], Any] | None:
        """Called by the connection for each outgoing notification method: the recorder for
        ``session/update`` (it stores each update once written), ``None`` for any other."""
        if method != "session/update":
            return None
        version = self.conn.protocol_version
        record = self._records.get(version)
        if record is None:  # the layout probe needs the negotiated variant
            record = self._records[version] = self._make_record()
        return record

    def _make_record(self) -> Callable[[str, Any], Any]:
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
        # v2: a state_update is live state, not history (it is not kept: session/resume sends the
        # current state); an idle one ends a turn, so it waits until what came before is committed
        special = META_UPDATES if self.conn.protocol_version < 2 else META_UPDATES | {"state_update"}
        held = self._send_committed

        def record(method: str, wire: Any) -> Any:
            entry = active.get(wire["sessionId"])
            if entry is None:
                return None
            update = wire["update"]
            kind = update.get("sessionUpdate")
            if kind in special:
                if kind == "state_update":
                    return held(method, wire) if update.get("state") == "idle" else None
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

    async def _send_committed(self, method: str, wire: Any) -> None:
        """Send a notification once every line before it is committed (a v2 ``state_update`` ``idle``)."""
        await self._committed("a state_update idle")
        if self.conn.connection.queue_notification(method, wire):
            await self.conn.connection.wait_writable()

    def _usual_layouts(self) -> tuple[bool, bool]:
        """Whether the typed layer encodes ``session/update`` params as ``sessionId`` then ``update``,
        and a text chunk as :data:`TEXT_CHUNK_HEAD` says (else those lines are kept whole)."""
        spec = self.conn.variant.NOTIFICATIONS.get("session/update")
        if spec is None:
            return False, False
        conv = self.conn.connection.converter

        def encoded(update: dict[str, Any]) -> Any:
            try:
                probe = conv.structure_fn(spec.params_type)({"sessionId": "probe", "update": update})
                return conv.unstructure_fn(spec.params_type)(probe)
            except Exception:
                return None

        text = {"type": "text", "text": "probe"}
        wire = encoded({"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": text})
        if type(wire) is not dict or list(wire) != ["sessionId", "update"]:
            return False, False
        bare = encoded({"sessionUpdate": "agent_message_chunk", "content": text})  # v1 only: v2 needs a messageId
        return True, type(bare) is dict and orjson.dumps(bare.get("update")) == TEXT_CHUNK_HEAD + b'"probe"}}'

    def _prompt_line(self, line: bytes, params: Any) -> None:
        session_id = params.get("sessionId") if type(params) is dict else None
        entry = self._active.get(session_id) if type(session_id) is str else None
        if entry is not None:  # behind the updates written so far (those still queued were not seen yet)
            entry.add_prompt(line)
            if self.store._writer.idle:
                self.store._writer.wake()

    def add_routes(self) -> None:
        """Route the default handlers the agent lacks, and watch the agent's own session routes."""
        conn = self.conn
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
            ("session/fork", self._fork),
            ("session/set_mode", self._set_mode),
            ("session/set_config_option", self._set_config_option),
        ):
            route = routes.get(method)
            if route is not None:
                routes[method] = route.with_handler(wrap(route.handler))
        for method in _ACKNOWLEDGED:  # outermost: the answer waits for the records the handler made
            route = routes.get(method)
            if route is not None:
                routes[method] = route.with_handler(self._durable(route.handler, method))

    def advertise(self, response: Any) -> None:
        """Add the session capabilities the store serves to an ``initialize`` response: v1
        ``loadSession`` and ``sessionCapabilities.list/resume/close/delete``; v2 ``session.delete``
        (``list``, ``resume`` and ``close`` are part of the baseline ``session``)."""
        conn = self.conn
        variant = conn.variant
        if conn.protocol_version >= 2:
            caps = response.capabilities
            caps = copy.copy(caps) if isinstance(caps, variant.AgentCapabilities) else variant.AgentCapabilities()
            session = caps.session
            session = (
                copy.copy(session)
                if isinstance(session, variant.SessionCapabilities)
                else variant.SessionCapabilities()
            )
            if session.delete in (UNSET, None):
                session.delete = variant.SessionDeleteCapabilities()
            caps.session = session
            response.capabilities = caps
            return
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
        if self.store._writer.closed:
            return
        fresh = info.method not in ("session/load", "session/resume")
        current = self._active.get(info.session_id)
        if current is not None and fresh:  # a new session under the same id replaces it
            current.closed = True
            current = None
        conv = self.conn.connection.converter
        servers = [conv.unstructure(s) for s in info.mcp_servers]
        if info.method == "session/fork":  # its row is a copy of the parent's, made by _fork once it answered
            entry = Log(info.session_id)
            self.store._writer.logs[entry] = None  # lines wait (no row yet)
            self._active[info.session_id] = entry
            self._forks[info.session_id] = (info, servers)
            return
        self._active[info.session_id] = self.store._attach(
            info.session_id, info, fresh, servers, current, self.conn.protocol_version
        )

    def _ended(self, info: SessionInfo) -> None:
        entry = self._active.pop(info.session_id, None)
        if entry is not None:
            self._close_when_written(entry)
        if info.end_reason == "session/delete":
            for other in list(self.store._writer.logs):
                if other.session_id == info.session_id:
                    other.dropped = True
            session_id = info.session_id
            if not self.store._writer.closed:
                self.store._submit(lambda db: db.delete(session_id))

    def _close_when_written(self, entry: Log) -> None:
        """Mark ``entry`` closed (the store's writer then lets it go once it is written) when the
        connection has written, or given up on, every line queued so far: the records of lines still
        queued or being written when a session ends (``session/close``, end of input, ``aclose``) are
        handed to ``entry`` only once written, and must find it still open.  Bounded by the
        connection: its writer ends at the latest ``close_timeout`` s after the connection closes."""
        connection = self.conn.connection
        if connection.records_pending:
            self._closing.append(entry)
            if len(self._closing) > 1:  # a task is already waiting for the connection's writer
                return
            nursery = connection._nursery  # not start_soon: a closing connection takes no background task
            try:
                if nursery is None:
                    raise RuntimeError("the connection is not running")
                nursery.start_soon(self._close_written, name="session store: close ended sessions' logs")
                return
            except RuntimeError:  # the connection's tasks are gone: nothing more will be written
                self._closing.remove(entry)
        entry.closed = True
        self.store._writer.wake()

    async def _close_written(self) -> None:
        closing = self._closing
        try:
            while closing:
                count = len(closing)
                await self.conn.connection.wait_written()  # what was queued when they ended, or the writer stopped
                for entry in closing[:count]:
                    entry.closed = True
                del closing[:count]
                self.store._writer.wake()
        finally:  # cancelled with the connection's tasks: its writer is gone too
            for entry in closing:
                entry.closed = True
            closing.clear()
            self.store._writer.wake()

    # -- wrappers around the agent's own handlers ------------------------------------------------
    async def _committed(self, what: str) -> None:
        """Wait until every line this connection sent or received so far is committed (the barrier
        of an answer that ends something).  A store that cannot write does not hold the answer back:
        the error is logged and the lines stay queued for the writer's next attempt."""
        store = self.store
        if store._writer.closed:
            return
        try:
            await store._barrier(self.conn.connection)
        except (StoreError, RuntimeError) as exc:
            log.error("%s: sending %s although its records are not committed: %s", store.path, what, exc)

    def _durable(self, inner: Callable[[Any], Awaitable[Any]], method: str) -> Callable[[Any], Awaitable[Any]]:
        """``inner`` whose answer (a result or an error) is sent only once the records before it are committed."""

        async def durable(params: Any) -> Any:
            try:
                result = await inner(params)
            except Exception:
                await self._committed(f"the {method} answer")
                raise
            await self._committed(f"the {method} answer")
            session_id = getattr(result, "session_id", None) or getattr(params, "session_id", None)
            entry = self._active.get(session_id) if type(session_id) is str else None
            if entry is not None and entry.row_id is None and method != "session/prompt":
                log.error("%s: session %r was answered but could not be stored", self.store.path, session_id)
            return result

        return durable

    def _setup_fields(self, result: Any) -> dict[str, Any]:
        """The stored columns set by a ``session/new`` (or fork) answer: modes and config options."""
        conv = self.conn.connection.converter
        fields: dict[str, Any] = {}
        modes = getattr(result, "modes", None)
        if modes not in (None, UNSET):
            fields["modes"] = orjson.dumps(conv.unstructure(modes)).decode()
            fields["current_mode_id"] = modes.current_mode_id
        options = getattr(result, "config_options", None)
        if isinstance(options, list):
            fields["config_options"] = orjson.dumps([conv.unstructure(o) for o in options]).decode()
        return fields

    def _new(self, inner: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        async def new(params: Any) -> Any:
            result = await inner(params)
            session_id = getattr(result, "session_id", None)
            if session_id in self._active:
                fields = self._setup_fields(result)
                if fields:
                    self.store._set(session_id, **fields)
            return result

        return new

    def _fork(self, inner: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        async def fork(params: Any) -> Any:
            result = await inner(params)
            session_id: Any = getattr(result, "session_id", None)
            pending = self._forks.pop(session_id, None)
            entry = self._active.get(pending[0].session_id) if pending is not None else None
            if pending is not None and entry is not None:
                info, servers = pending
                session_id = info.session_id
                try:  # the parent's lines written so far are in its log: the copy comes behind them
                    await self.conn.connection.wait_written()
                finally:
                    if not self.store._writer.closed:
                        fork_from = (params.session_id, self._setup_fields(result))
                        self.store._attach(
                            session_id, info, True, servers, entry, self.conn.protocol_version, fork_from
                        )
            return result

        return fork

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
        if session.modes is not None and self.conn.protocol_version < 2:
            setup["modes"] = session.modes
        if session.config_options is not None:
            setup["configOptions"] = session.config_options
        return setup

    def _result(self, method: str, wire: dict[str, Any]) -> Any:
        spec = self.conn.variant.REQUESTS[method]
        return self.conn.connection.converter.structure_fn(spec.result_type)(wire)

    def _check_version(self, session: StoredSession) -> None:
        version = self.conn.protocol_version
        if session.protocol_version != version:
            raise RequestError.invalid_params(
                {
                    "sessionId": session.session_id,
                    "protocolVersion": session.protocol_version,
                    "detail": f"the session was recorded under protocol version {session.protocol_version}; "
                    f"this connection speaks version {version}",
                }
            )

    async def _stored(self, session_id: str) -> StoredSession:
        session = await self.store.get(session_id)
        if session is None:
            raise _not_found(session_id)
        self._check_version(session)
        return session

    async def replay(self, session_id: str) -> StoredSession:
        """Send the stored conversation of ``session_id`` as ``session/update`` notifications, in order.

        Protocol version 1: prompts become ``user_message_chunk`` updates (one per content block,
        with the prompt's ``messageId`` if it had one; prompts that follow one another with no
        update between them each get a ``messageId`` so that they stay separate messages).  Version
        2: the agent's own ``user_message`` updates stand for the prompts (prompt-lifecycle.mdx),
        and ``state_update`` s were not kept (send the current state after: :meth:`send_state`).
        The agent's updates go out as they were sent.  Returns the stored session; raises
        :class:`RequestError` -32002 when there is none, -32602 when it was recorded under another
        protocol version.
        """
        found = await self.store._rows(session_id)
        if found is None:
            raise _not_found(session_id)
        session, rows = found
        self._check_version(session)
        connection = self.conn.connection
        v1 = self.conn.protocol_version < 2
        prompts = 0
        for i, (kind, data) in enumerate(rows):
            if kind == KIND_PROMPT:
                if not v1:
                    continue
                lines = data.splitlines()
                # a run of prompts with no update between them (across rows too): each its own message
                run = len(lines) > 1 or (i > 0 and rows[i - 1][0] == KIND_PROMPT)
                run = run or (i + 1 < len(rows) and rows[i + 1][0] == KIND_PROMPT)
                for line in lines:
                    prompts += 1
                    self._user_chunks(session_id, line, f"acp-trio-prompt-{prompts}" if run else None)
                continue
            data = lines_of(kind, session_id, data)
            if data and connection.queue_lines(data):
                await connection.wait_writable()
        return session

    def _user_chunks(self, session_id: str, line: bytes, message_id: str | None) -> None:
        try:
            params = orjson.loads(line).get("params") or {}
        except (orjson.JSONDecodeError, AttributeError):
            log.warning("session %r: skipping a stored prompt that does not decode", session_id)
            return
        own = params.get("messageId")
        if type(own) is str:
            message_id = own
        for block in params.get("prompt") or ():
            update: dict[str, Any] = {"sessionUpdate": "user_message_chunk", "content": block}
            if message_id is not None:
                update["messageId"] = message_id
            self.conn.connection.queue_notification("session/update", {"sessionId": session_id, "update": update})

    async def send_state(self, session_id: str) -> None:
        """Protocol version 2: send the session's current ``state_update`` (``running`` while a turn
        started with ``start_turn`` runs for it on this connection, else ``idle``), as
        ``session/resume`` must after any replay and before its answer (the schema's ``StateUpdate``)."""
        running = bool(self.conn._turns.get(session_id))
        update = {"sessionUpdate": "state_update", "state": "running" if running else "idle"}
        if self.conn.connection.queue_notification("session/update", {"sessionId": session_id, "update": update}):
            await self.conn.connection.wait_writable()

    async def session_load(self, params: Any) -> Any:
        """``session/load``: replay the stored conversation, then answer its modes and config options."""
        session = await self.replay(params.session_id)
        return self._result("session/load", self._setup(session))

    async def session_resume(self, params: Any) -> Any:
        """``session/resume``: answer the stored session's modes and config options.  Version 1: no
        replay.  Version 2: ``replayFrom`` ``{"type": "start"}`` replays the whole conversation
        first (another cursor type answers -32602); then the current state (:meth:`send_state`)."""
        if self.conn.protocol_version < 2:
            session = await self._stored(params.session_id)
            return self._result("session/resume", self._setup(session))
        replay_from = getattr(params, "replay_from", None)
        cursor = getattr(replay_from, "type", None)
        if replay_from not in (None, UNSET) and cursor != "start":
            raise RequestError.invalid_params(
                {
                    "path": "$.replayFrom.type",
                    "detail": f"unsupported replay cursor {cursor!r}: this agent replays from start",
                }
            )
        if cursor == "start":
            session = await self.replay(params.session_id)
        else:
            session = await self._stored(params.session_id)
        await self.send_state(params.session_id)
        return self._result("session/resume", self._setup(session))

    async def session_list(self, params: Any) -> Any:
        """``session/list``: stored sessions of this protocol version, most recent first, ``cwd`` filter, cursors."""
        cwd = params.cwd if isinstance(params.cwd, str) else None
        cursor = params.cursor if isinstance(params.cursor, str) else None
        try:
            sessions, next_cursor = await self.store.list_sessions(
                cwd=cwd, cursor=cursor, protocol_version=self.conn.protocol_version
            )
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


def __getattr__(name: str) -> Any:
    """``PostgresSessionStore``, ``Lease``, ``LeaseLostError``: imported when first asked for
    (they need the ``postgres`` extra: psycopg 3 and psycopg_pool)."""
    if name in ("PostgresSessionStore", "Lease", "LeaseLostError"):
        from . import _store_pg

        return getattr(_store_pg, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SCHEMA_VERSION",
    "Journal",
    "MemorySessionStore",
    "SessionJournal",
    "SessionRecorder",
    "SessionStore",
    "SqliteSessionStore",
    "StoreError",
    "StoreVersionError",
    "StoredConversation",
    "StoredSession",
    "enable",
]

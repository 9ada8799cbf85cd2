"""PostgreSQL under :mod:`acp_trio.session_store`: :class:`PostgresSessionStore`, and ownership leases.

**How it runs from trio: worker threads over synchronous psycopg 3.**  psycopg's async API
(``AsyncConnection``, ``psycopg_pool.AsyncConnectionPool``) waits on sockets through asyncio's
event loop (``psycopg.waiting`` calls ``asyncio.get_running_loop``), so it does not run under
trio without an asyncio loop beside it (trio-asyncio).  The SQLite store already runs its database
in a writer thread that batches every session's lines and the journals' appends into one
transaction per cycle (group commit: see ``acp_trio._store_db``); this store is the same
:class:`~acp_trio._store_db.Writer` (the same queues, ordering, acknowledgement and error rules)
driving :class:`PgDatabase` on one dedicated connection instead of ``sqlite3``.  Journal reads and
the lease operations run on a ``psycopg_pool.ConnectionPool`` in trio worker threads
(``trio.to_thread.run_sync``), so a replay or a lease renewal never waits behind the writer's
commits.  A thread per call costs about 50 µs; a round trip to the server costs more, and the
writer makes a constant number of them per cycle whatever the number of sessions and lines in it
(arrays and ``unnest``, not a statement per line).

**Schema** (version 1; the tables are prefixed ``acp_`` so the store can share a database; give it
a schema of its own with ``options=-csearch_path=NAME`` in the conninfo if you like)::

    acp_store(application TEXT PRIMARY KEY, version INTEGER)   -- one row: 'acp-trio session store'
    acp_sessions(id BIGINT identity PRIMARY KEY, session_id TEXT UNIQUE, cwd, additional_directories,
                 mcp_servers, title, title_source, meta, modes, current_mode_id, config_options,
                 created_us, updated_us, prompt_count, protocol_version)   -- as SQLite's sessions
    acp_events(session BIGINT → acp_sessions ON DELETE CASCADE, seq INTEGER, kind SMALLINT, data BYTEA,
               PRIMARY KEY (session, seq))                        -- as SQLite's events
    acp_journals(id BIGINT identity PRIMARY KEY, session_id TEXT UNIQUE)
    acp_journal_lines(journal BIGINT → acp_journals ON DELETE CASCADE, number BIGINT, start BIGINT,
                      data BYTEA, PRIMARY KEY (journal, number))  -- as SQLite's journal_lines
    acp_session_leases(session_id TEXT PRIMARY KEY, owner TEXT, epoch BIGINT, expires_at TIMESTAMPTZ)
    acp_lease_epochs: a sequence (every claim's epoch: larger than any given before, never reused)
    acp_session_principals(session_id TEXT PRIMARY KEY, principal TEXT)   -- who a session belongs to

Records are the SQLite store's (``kind``, ``data``: see ``acp_trio._store_db``), built by the same
functions, so both replay the same bytes.  Opening creates the schema, or migrates an older version
in place in one transaction, under a transaction-scoped advisory lock (processes opening one
database at once take turns); a newer version, or ``acp_`` tables without the version row, raise
:class:`~acp_trio._store_db.StoreVersionError` and change nothing.

**Leases** (ownership of a running session by one host process; issue 36): a row per owned session
with its ``owner`` (a host's id: make it unique per process start), its ``epoch`` (the fencing
token: a new, larger number at each claim) and ``expires_at``, all times from the server's clock
(``clock_timestamp()``), never a host's.  :meth:`PostgresSessionStore.claim` succeeds only when the
session is unowned or its lease has expired (one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE``:
of two hosts claiming at once exactly one gets it); :meth:`~PostgresSessionStore.renew` extends
every unexpired lease of one owner in one statement (an expired lease is lost: claim it again, which
gives a new epoch); :meth:`~PostgresSessionStore.release` gives one up; :meth:`~PostgresSessionStore.owner`
looks one up.  A journal append with ``epoch=`` (``SessionJournal.append``) is fenced: inside the
append's transaction it takes a share lock on the lease row and is applied only when the row still
has that epoch and has not expired, so an append and a claim are ordered one way or the other and
a host that lost its lease gets :class:`LeaseLostError` with nothing stored.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

import psycopg
import trio
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from ._store_db import (
    _SESSION_COLUMNS,  # the same columns, in StoredSession's order
    DEFAULT_COMMIT_INTERVAL,
    KIND_LINES,
    MAX_JOURNAL_NUMBER,
    TITLE_NONE,
    Chunk,
    JournalOp,
    Log,
    StoredSession,
    StoreError,
    StoreVersionError,
    _renamed,
    count_prompts,
    meta_fields,
    now_us,
    page_query,
    runs_of,
    touch_due,
    trim_first,
)
from .session_store import SessionStore

log = logging.getLogger("acp_trio.session_store")

PG_SCHEMA_VERSION: Final = 1
"""The PostgreSQL schema version this code writes (row ``acp_store``)."""
APPLICATION: Final = "acp-trio session store"
_LOCK_KEY: Final = 0x41435053  # "ACPS": pg_advisory_xact_lock while the schema is checked or made

_SCHEMA: Final = """
CREATE TABLE acp_store (application TEXT PRIMARY KEY, version INTEGER NOT NULL);
CREATE TABLE acp_sessions (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT NOT NULL UNIQUE,
    cwd TEXT NOT NULL,
    additional_directories TEXT NOT NULL DEFAULT '[]',
    mcp_servers TEXT NOT NULL DEFAULT '[]',
    title TEXT,
    title_source SMALLINT NOT NULL DEFAULT 0,
    meta TEXT,
    modes TEXT,
    current_mode_id TEXT,
    config_options TEXT,
    created_us BIGINT NOT NULL,
    updated_us BIGINT NOT NULL,
    prompt_count INTEGER NOT NULL DEFAULT 0,
    protocol_version SMALLINT NOT NULL DEFAULT 1
);
CREATE INDEX acp_sessions_recent ON acp_sessions (updated_us DESC, id DESC);
CREATE INDEX acp_sessions_cwd_recent ON acp_sessions (cwd, updated_us DESC, id DESC);
CREATE TABLE acp_events (
    session BIGINT NOT NULL REFERENCES acp_sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    kind SMALLINT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (session, seq)
);
CREATE TABLE acp_journals (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id TEXT NOT NULL UNIQUE
);
CREATE TABLE acp_journal_lines (
    journal BIGINT NOT NULL REFERENCES acp_journals (id) ON DELETE CASCADE,
    number BIGINT NOT NULL,
    start BIGINT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (journal, number)
);
CREATE SEQUENCE acp_lease_epochs;
CREATE TABLE acp_session_leases (
    session_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX acp_session_leases_owner ON acp_session_leases (owner);
CREATE TABLE acp_session_principals (session_id TEXT PRIMARY KEY, principal TEXT NOT NULL)
"""
_TABLES: Final = frozenset(
    {
        "acp_store",
        "acp_sessions",
        "acp_events",
        "acp_journals",
        "acp_journal_lines",
        "acp_session_leases",
        "acp_session_principals",
    }
)
_MIGRATIONS: Final[dict[int, Callable[[psycopg.Connection[Any]], None]]] = {}
"""Version N → N + 1, inside the opening transaction (none yet: version 1 is the first)."""

_INSERT_EVENTS: Final = """
INSERT INTO acp_events (session, seq, kind, data)
SELECT t.session, coalesce(b.top, -1) + row_number() OVER (PARTITION BY t.session ORDER BY t.ord), t.kind, t.data
FROM unnest(%s::bigint[], %s::smallint[], %s::bytea[]) WITH ORDINALITY AS t (session, kind, data, ord)
LEFT JOIN LATERAL (SELECT max(e.seq) AS top FROM acp_events e WHERE e.session = t.session) b ON true
"""
_JOURNAL_STATES: Final = """
SELECT j.session_id, j.id, lo.number, lo.start, hi.number, hi.start + length(hi.data)
FROM acp_journals j
LEFT JOIN LATERAL (SELECT number, start FROM acp_journal_lines WHERE journal = j.id ORDER BY number LIMIT 1) lo ON true
LEFT JOIN LATERAL (
    SELECT number, start, data FROM acp_journal_lines WHERE journal = j.id ORDER BY number DESC LIMIT 1
) hi ON true
WHERE j.session_id = ANY(%s)
"""
_INSERT_LINES: Final = (
    "INSERT INTO acp_journal_lines (journal, number, start, data) "
    "SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bytea[])"
)


class LeaseLostError(Exception):
    """A fenced journal append (``epoch=``) found the session's lease gone: expired, released, or
    claimed since by another host (a larger epoch).  Nothing of that append was stored; the host
    must stop running the session (another may own it now).  ``session_id``, ``epoch`` (the one given)."""

    def __init__(self, session_id: str, epoch: int) -> None:
        super().__init__(
            f"session {session_id!r}: the lease of epoch {epoch} is lost (expired or claimed by another "
            "host); nothing was appended: stop running the session, or claim it again"
        )
        self.session_id = session_id
        self.epoch = epoch


class Lease:
    """An ownership lease as stored: ``session_id``, ``owner`` (host id), ``epoch`` (fencing token,
    ``int``), ``expires_at`` (``datetime``, UTC, the server's clock), ``held`` (not expired when read)."""

    __slots__ = ("epoch", "expires_at", "held", "owner", "session_id")

    def __init__(self, session_id: str, owner: str, epoch: int, expires_at: datetime.datetime, held: bool) -> None:
        self.session_id = session_id
        self.owner = owner
        self.epoch = epoch
        self.expires_at = expires_at
        self.held = held

    def __repr__(self) -> str:
        return (
            f"Lease({self.session_id!r}, owner={self.owner!r}, epoch={self.epoch}, "
            f"expires_at={self.expires_at.isoformat()}, held={self.held})"
        )


def _redacted(conninfo: str) -> str:
    """``conninfo`` without its password (for logs, ``repr`` and errors)."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<conninfo>"
    params.pop("password", None)
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None})


class PgDatabase:
    """One PostgreSQL connection of sessions for the store's writer thread (one thread at a time):
    the methods of ``acp_trio._store_db.Database`` that :class:`~acp_trio.session_store.SessionStore`
    and its ``Writer`` call, in SQL for PostgreSQL.  Raises :class:`StoreVersionError` when the
    server cannot be reached or holds a schema this code does not read."""

    def __init__(self, conninfo: str, *, durable: bool = True, connect_timeout: float = 10.0) -> None:
        self.conninfo = conninfo
        self.path = _redacted(conninfo)
        self.durable = durable
        self.connect_timeout = connect_timeout
        self.db = self._connect()
        try:
            self._prepare()
        except psycopg.Error as exc:
            self.db.close()
            raise StoreVersionError(
                self.path, None, f"{self.path}: cannot create or check the session store's tables: {exc}"
            ) from exc
        except BaseException:
            self.db.close()
            raise

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            db = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=max(1, round(self.connect_timeout)))
        except psycopg.Error as exc:
            raise StoreVersionError(self.path, None, f"{self.path}: cannot open the session store: {exc}") from exc
        if not self.durable:
            db.execute("SET synchronous_commit = off")
        return db

    def _live(self) -> psycopg.Connection[Any]:
        """The connection, made again when the last one broke (the server restarted, the network
        dropped): the writer retries a failed batch, and that retry reconnects."""
        if self.db.closed or self.db.broken:
            self.db = self._connect()
        return self.db

    def close(self) -> None:
        self.db.close()

    @staticmethod
    @contextlib.contextmanager
    def _transaction(db: psycopg.Connection[Any]) -> Iterator[None]:
        """One transaction in pipeline mode: statements whose results are not read yet go to the
        server together (``BEGIN`` with the first, ``COMMIT`` with the last writes): a round trip
        per result the code waits for, not per statement."""
        with db.pipeline(), db.transaction():
            yield

    # -- opening, versions -------------------------------------------------------------------------
    def _prepare(self) -> None:
        db = self.db
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            found = {
                r[0]
                for r in db.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename = ANY(%s)",
                    (list(_TABLES),),
                )
            }
            if not found:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(
                    "INSERT INTO acp_store (application, version) VALUES (%s, %s)", (APPLICATION, PG_SCHEMA_VERSION)
                )
                return
            row = None
            if "acp_store" in found:
                row = db.execute("SELECT version FROM acp_store WHERE application = %s", (APPLICATION,)).fetchone()
            if row is None:
                raise self._version_error(
                    None,
                    f"{self.path} holds tables {', '.join(sorted(found))} but no acp-trio session store version: "
                    "give the store another database or schema (options=-csearch_path=NAME)",
                )
            version = int(row[0])
            if version > PG_SCHEMA_VERSION:
                raise self._version_error(
                    version,
                    f"{self.path} holds session store schema version {version}, written by a newer acp-trio; "
                    f"this one reads versions 1 to {PG_SCHEMA_VERSION}: upgrade acp-trio or give another database",
                )
            if version < PG_SCHEMA_VERSION:
                log.info(
                    "%s: migrating the session store from schema version %d to %d",
                    self.path,
                    version,
                    PG_SCHEMA_VERSION,
                )
                for step in range(version, PG_SCHEMA_VERSION):
                    _MIGRATIONS[step](db)
                db.execute("UPDATE acp_store SET version = %s WHERE application = %s", (PG_SCHEMA_VERSION, APPLICATION))

    def _version_error(self, found: int | None, message: str) -> StoreVersionError:
        error = StoreVersionError(self.path, found, message)
        error.supported = PG_SCHEMA_VERSION
        return error

    # -- sessions ----------------------------------------------------------------------------------
    def _insert(
        self, db: psycopg.Connection[Any], session_id: str, cwd: str, dirs: str, servers: str, version: int
    ) -> int:
        now = now_us()
        db.execute("DELETE FROM acp_sessions WHERE session_id = %s", (session_id,))
        row = db.execute(
            "INSERT INTO acp_sessions (session_id, cwd, additional_directories, mcp_servers, created_us, updated_us, "
            "protocol_version) VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (session_id, cwd, dirs, servers, now, now, version),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def create(self, session_id: str, cwd: str, dirs: str, servers: str, version: int = 1) -> tuple[int, int]:
        """A new record (a stored one with that id is replaced); returns ``(row id, title source)``."""
        db = self._live()
        with self._transaction(db):
            return self._insert(db, session_id, cwd, dirs, servers, version), TITLE_NONE

    def fork(
        self, parent_id: str, session_id: str, cwd: str, dirs: str, servers: str, version: int, fields: dict[str, Any]
    ) -> tuple[int, int]:
        """A new record ``session_id`` holding a copy of ``parent_id``'s lines and metadata, then
        ``fields`` (see ``Database.fork``).  Returns ``(row id, title source)``."""
        db = self._live()
        with self._transaction(db):
            row_id = self._insert(db, session_id, cwd, dirs, servers, version)
            parent = db.execute(
                "SELECT id, title, title_source, meta, modes, current_mode_id, config_options, prompt_count "
                "FROM acp_sessions WHERE session_id = %s",
                (parent_id,),
            ).fetchone()
            title_source = TITLE_NONE
            if parent is not None:
                parent_row, *copied = parent
                title_source = copied[1]
                db.execute(
                    "UPDATE acp_sessions SET title = %s, title_source = %s, meta = %s, modes = %s, "
                    "current_mode_id = %s, config_options = %s, prompt_count = %s WHERE id = %s",
                    (*copied, row_id),
                )
                db.execute(
                    "INSERT INTO acp_events (session, seq, kind, data) SELECT %s, seq, kind, data FROM acp_events "
                    "WHERE session = %s",
                    (row_id, parent_row),
                )
                # whole lines name their session: they name the fork now (bodies and texts take it when read)
                for seq, data in db.execute(
                    "SELECT seq, data FROM acp_events WHERE session = %s AND kind = %s", (row_id, KIND_LINES)
                ).fetchall():
                    db.execute(
                        "UPDATE acp_events SET data = %s WHERE session = %s AND seq = %s",
                        (_renamed(bytes(data), session_id), row_id, seq),
                    )
            if fields:
                if "title_source" in fields:
                    title_source = fields["title_source"]
                self._set(db, "id", row_id, fields)
            return row_id, title_source

    def reopen(self, session_id: str, cwd: str, dirs: str, servers: str, version: int = 1) -> tuple[int, int]:
        """Update a stored session's roots and MCP servers (load/resume), creating it when absent."""
        db = self._live()
        with self._transaction(db):
            row = db.execute(
                "UPDATE acp_sessions SET cwd = %s, additional_directories = %s, mcp_servers = %s "
                "WHERE session_id = %s RETURNING id, title_source",
                (cwd, dirs, servers, session_id),
            ).fetchone()
            if row is not None:
                return int(row[0]), int(row[1])
            return self._insert(db, session_id, cwd, dirs, servers, version), TITLE_NONE

    def rewrite(self, session_id: str, rows: list[tuple[int, bytes]], version: int) -> bool:
        """Replace the events of ``session_id`` by ``rows`` (``(kind, data)``) and mark it recorded
        under protocol ``version``, in one transaction; False when it is not stored."""
        db = self._live()
        with self._transaction(db):
            row = db.execute(
                "UPDATE acp_sessions SET protocol_version = %s WHERE session_id = %s RETURNING id",
                (version, session_id),
            ).fetchone()
            if row is None:
                return False
            db.execute("DELETE FROM acp_events WHERE session = %s", (row[0],))
            if rows:
                db.execute(
                    "INSERT INTO acp_events (session, seq, kind, data) "
                    "SELECT %s, ord - 1, kind, data "
                    "FROM unnest(%s::smallint[], %s::bytea[]) WITH ORDINALITY AS t (kind, data, ord)",
                    (row[0], [kind for kind, _ in rows], [data for _, data in rows]),
                )
            return True

    @staticmethod
    def _set(db: psycopg.Connection[Any], key: str, value: Any, fields: dict[str, Any]) -> None:
        assignments = sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(name)) for name in fields)
        db.execute(
            sql.SQL("UPDATE acp_sessions SET {} WHERE {} = %s").format(assignments, sql.Identifier(key)),
            (*fields.values(), value),
        )

    def set_fields(self, session_id: str, fields: dict[str, Any]) -> None:
        if fields:
            self._set(self._live(), "session_id", session_id, fields)

    def get(self, session_id: str) -> StoredSession | None:
        row = (
            self._live()
            .execute(f"SELECT {_SESSION_COLUMNS} FROM acp_sessions WHERE session_id = %s", (session_id,))
            .fetchone()
        )
        return StoredSession(row) if row is not None else None

    def page(
        self, cwd: str | None, after: tuple[int, int] | None, limit: int, version: int | None = None
    ) -> tuple[list[StoredSession], bool]:
        query, args = page_query(f"SELECT {_SESSION_COLUMNS} FROM acp_sessions", "%s", cwd, after, limit, version)
        rows = self._live().execute(query, args).fetchall()
        return [StoredSession(r) for r in rows[:limit]], len(rows) > limit

    def events(self, session_id: str) -> tuple[StoredSession, list[tuple[int, bytes]]] | None:
        db = self._live()
        with self._transaction(db):  # one snapshot: the row and its events
            session = self.get(session_id)
            if session is None:
                return None
            rows = (
                db.cursor(binary=True)  # bytea as it is
                .execute("SELECT kind, data FROM acp_events WHERE session = %s ORDER BY seq", (session.row_id,))
                .fetchall()
            )
        return session, [(int(kind), bytes(data)) for kind, data in rows]

    def delete(self, session_id: str) -> bool:
        cur = self._live().execute("DELETE FROM acp_sessions WHERE session_id = %s", (session_id,))
        return cur.rowcount > 0

    def touch(self, entry: Log) -> None:
        """Write the ``updated_us`` a throttled :meth:`write` left out (the log is done); errors are logged."""
        if entry.untouched_us and entry.row_id is not None:
            try:
                self._live().execute(
                    "UPDATE acp_sessions SET updated_us = %s WHERE id = %s", (entry.untouched_us, entry.row_id)
                )
            except (psycopg.Error, StoreVersionError):  # the writer thread goes on; the server may be back later
                log.exception("%s: updating a session's updated_at failed", self.path)
                return
            entry.touched_us, entry.untouched_us = entry.untouched_us, 0

    def check(self) -> str:
        """``"ok"`` when the server answers and the schema version is this code's."""
        row = self._live().execute("SELECT version FROM acp_store WHERE application = %s", (APPLICATION,)).fetchone()
        return "ok" if row is not None and row[0] == PG_SCHEMA_VERSION else f"schema version {row and row[0]}"

    # -- the batch -----------------------------------------------------------------------------------
    def write(
        self, batch: list[tuple[Log, list[Chunk], list[dict[str, Any]]]], journal: list[JournalOp] | None = None
    ) -> None:
        """Store each log's lines and metadata, then apply the journal operations, in one transaction
        (nothing is written when it raises; a fenced append whose lease is lost gets its own
        :class:`LeaseLostError` and is skipped, the rest is stored)."""
        now = now_us()
        db = self._live()
        with self._transaction(db):
            sessions: list[int] = []
            kinds: list[int] = []
            datas: list[bytes] = []
            touches: list[tuple[Log, int, dict[str, Any]]] = []
            for entry, items, meta in batch:
                fields = meta_fields(meta)
                runs = runs_of(items)
                for kind, data in runs:
                    sessions.append(entry.row_id)  # type: ignore[arg-type]
                    kinds.append(kind)
                    datas.append(data)
                prompts = count_prompts(entry, runs, fields)
                if touch_due(entry, now, prompts, fields):
                    touches.append((entry, prompts, fields))
            if datas:
                db.execute(_INSERT_EVENTS, (sessions, kinds, datas))
            plain = [(now, prompts, entry.row_id) for entry, prompts, fields in touches if not fields]
            if plain:
                with db.cursor() as cur:
                    cur.executemany(
                        "UPDATE acp_sessions SET updated_us = %s, prompt_count = prompt_count + %s WHERE id = %s", plain
                    )
            for entry, prompts, fields in touches:
                if fields:
                    self._set(db, "id", entry.row_id, {**fields, "updated_us": now})
                    if prompts:
                        db.execute(
                            "UPDATE acp_sessions SET prompt_count = prompt_count + %s WHERE id = %s",
                            (prompts, entry.row_id),
                        )
            if journal:
                self._journal(db, journal)

    def _journal(self, db: psycopg.Connection[Any], ops: list[JournalOp]) -> None:
        """Apply ``ops`` in order inside the caller's transaction, with the SQLite store's numbering
        and bounds (``Database._journal``): each append numbered on from its journal's last, every
        journal appended to trimmed to the bounds of its last append.  Fenced appends are checked
        first (one share-locking query); the journals' rows are locked in session id order (two
        writers never deadlock), so numbers stay consecutive when processes append to one journal."""
        fenced = sorted({op.session_id for op in ops if op.epoch is not None and op.lines is not None})
        growing = sorted({op.session_id for op in ops if op.lines})
        touched = sorted({op.session_id for op in ops})
        # sent together (pipeline mode): the fence's share locks, the journals' rows made and locked,
        # then their states, read by a later statement than the lock (a snapshot that sees the
        # lines another writer committed while this one waited for the lock)
        fence = (
            db.execute(
                "SELECT session_id, epoch FROM acp_session_leases WHERE session_id = ANY(%s) "
                "AND expires_at > clock_timestamp() ORDER BY session_id FOR SHARE",
                (fenced,),
            )
            if fenced
            else None
        )
        if growing:
            db.execute(
                "INSERT INTO acp_journals (session_id) SELECT unnest(%s::text[]) ORDER BY 1 ON CONFLICT DO NOTHING",
                (growing,),
            )
        db.execute("SELECT id FROM acp_journals WHERE session_id = ANY(%s) ORDER BY session_id FOR UPDATE", (touched,))
        found = db.execute(_JOURNAL_STATES, (touched,))
        if fence is not None:
            holding = dict(fence.fetchall())
            for op in ops:
                if op.epoch is not None and op.lines is not None and holding.get(op.session_id) != op.epoch:
                    op.error = LeaseLostError(op.session_id, op.epoch)
            ops = [op for op in ops if op.error is None]
        states: dict[str, list[int]] = {}  # session id -> [journal id, first, last, start of first, end of last]
        for session_id, journal_id, lo, lo_start, hi, hi_end in found.fetchall():
            states[session_id] = [journal_id, lo, hi, lo_start, hi_end] if hi is not None else [journal_id, 1, 0, 0, 0]
        rows: tuple[list[int], list[int], list[int], list[bytes]] = ([], [], [], [])
        bounds: dict[str, tuple[int, int]] = {}

        def insert_rows() -> None:
            if rows[0]:
                db.execute(_INSERT_LINES, rows)
                for column in rows:
                    column.clear()

        for op in ops:
            session_id = op.session_id
            state = states.setdefault(session_id, [0, 0, 0, 0, 0])
            if op.lines is None:  # forget
                if state[0]:
                    insert_rows()  # the lines appended before it in this batch go with it
                    db.execute("DELETE FROM acp_journals WHERE id = %s", (state[0],))
                state[:] = [0, 0, 0, 0, 0]
                bounds.pop(session_id, None)
                op.result = 0
                continue
            lines = op.lines
            if lines:
                if not state[0]:
                    row = db.execute(
                        "INSERT INTO acp_journals (session_id) VALUES (%s) RETURNING id", (session_id,)
                    ).fetchone()
                    assert row is not None
                    state[:] = [int(row[0]), 1, 0, 0, 0]
                last = state[2]
                if last + len(lines) > MAX_JOURNAL_NUMBER:
                    raise StoreError(
                        f"the journal of session {session_id!r} is at its last number ({MAX_JOURNAL_NUMBER}): "
                        "forget it to start again from 1"
                    )
                offset = state[4]
                for number, data in enumerate(lines, last + 1):
                    rows[0].append(state[0])
                    rows[1].append(number)
                    rows[2].append(offset)
                    rows[3].append(data)
                    offset += len(data)
                state[2] = last + len(lines)
                state[4] = offset
                bounds[session_id] = (op.max_updates, op.max_bytes)
            op.result = state[2]
        insert_rows()
        for session_id, (max_updates, max_bytes) in bounds.items():
            self._trim(db, states[session_id], max_updates, max_bytes)

    @staticmethod
    def _trim(db: psycopg.Connection[Any], state: list[int], max_updates: int, max_bytes: int) -> None:
        journal_id, first = state[0], state[1]

        def first_starting_at(low: int, high: int, offset: int) -> int | None:
            row = db.execute(
                "SELECT number FROM acp_journal_lines WHERE journal = %s AND number BETWEEN %s AND %s "
                "AND start >= %s ORDER BY number LIMIT 1",
                (journal_id, low, high, offset),
            ).fetchone()
            return int(row[0]) if row is not None else None

        new_first = trim_first(state, max_updates, max_bytes, first_starting_at)
        if new_first > first:
            db.execute("DELETE FROM acp_journal_lines WHERE journal = %s AND number < %s", (journal_id, new_first))
            state[1] = new_first


# -- reads and leases on the pool (worker threads) ---------------------------------------------------


def _journal_read(
    db: psycopg.Connection[Any], session_id: str, after: int, limit: int | None
) -> list[tuple[int, bytes]]:
    rows = (
        db.cursor(binary=True)  # bytea as it is: no hex text to decode (2.5x faster for 1,000 lines)
        .execute(
            "SELECT number, data FROM acp_journal_lines WHERE journal = "
            "(SELECT id FROM acp_journals WHERE session_id = %s) AND number > %s ORDER BY number LIMIT %s",
            (session_id, max(after, 0), limit),
        )
        .fetchall()
    )
    return [(int(number), bytes(data)) for number, data in rows]


def _journal_bounds(db: psycopg.Connection[Any], session_id: str) -> tuple[int, int]:
    row = db.execute(
        "SELECT min(number), max(number) FROM acp_journal_lines WHERE journal = "
        "(SELECT id FROM acp_journals WHERE session_id = %s)",
        (session_id,),
    ).fetchone()
    if row is None or row[1] is None:
        return 0, 0
    return int(row[0]), int(row[1])


_LEASE_COLUMNS: Final = "session_id, owner, epoch, expires_at, expires_at > clock_timestamp()"


def _lease(row: Any) -> Lease:
    return Lease(row[0], row[1], int(row[2]), row[3], bool(row[4]))


def _ttl(ttl: float) -> datetime.timedelta:
    if not ttl > 0:
        raise ValueError(f"a lease's ttl is a positive number of seconds, got {ttl!r}")
    return datetime.timedelta(seconds=ttl)


class PostgresSessionStore(SessionStore):
    """Sessions, their journals and their ownership leases in PostgreSQL (see the module docstring).

    ``conninfo``: a libpq connection string or URI (``"postgresql://user@host/db"``,
    ``"host=/run/postgresql dbname=acp"``); the database must exist and the user may create tables
    in it (the schema is created or migrated when the store opens).  ``durable``: ``True`` (default)
    keeps the server's ``synchronous_commit``: an acknowledged commit survives the server crashing;
    ``False`` sets it ``off`` for the store's writes (acknowledged writes survive the host process or
    its machine dying, the server's last ~0.6 s of commits may be lost if the server itself
    crashes).  ``commit_interval``, ``store_secrets``, ``page_size``: as
    :class:`~acp_trio.session_store.SqliteSessionStore`.  ``pool_size``: connections for journal
    reads and lease calls (the writer has one more of its own).  ``connect_timeout``: seconds.

    Raises :class:`~acp_trio.session_store.StoreVersionError` when the server cannot be reached or
    the database holds a newer or foreign schema (nothing is changed).  Needs the ``postgres``
    extra (psycopg 3, psycopg_pool).  Close it (or use ``with``) to write what is queued and close
    the connections; blocking, like the SQLite store's.
    """

    leases = True

    def __init__(
        self,
        conninfo: str,
        *,
        store_secrets: bool = False,
        durable: bool = True,
        page_size: int = 100,
        commit_interval: float = DEFAULT_COMMIT_INTERVAL,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
    ) -> None:
        if pool_size < 1 or page_size < 1:  # before anything is opened
            raise ValueError(f"pool_size and page_size must be at least 1, got {pool_size} and {page_size}")
        database = PgDatabase(conninfo, durable=durable, connect_timeout=connect_timeout)
        try:
            self._pool = ConnectionPool(
                conninfo,
                min_size=1,
                max_size=pool_size,
                kwargs={"autocommit": True},
                timeout=connect_timeout,
                name="acp-trio session store",
                open=True,
            )
        except BaseException:
            database.close()
            raise
        self._pool_lock = threading.Lock()
        super().__init__(
            database,  # type: ignore[arg-type]  # the same methods as _store_db.Database, for PostgreSQL
            threaded=True,
            store_secrets=store_secrets,
            page_size=page_size,
            commit_interval=commit_interval,
        )
        self._reader = None  # journal reads go to the pool

    def close(self) -> None:
        """Write everything recorded so far, stop the writer, close the connections (idempotent, blocking)."""
        super().close()
        self._pool.close()

    # -- the pool ----------------------------------------------------------------------------------
    def _run(self, fn: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        with self._pool.connection() as db:
            return fn(db)

    async def _pooled(self, fn: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        """``fn(connection)`` on a pooled connection (autocommit) in a worker thread."""
        if self._writer.closed:
            raise RuntimeError(f"{self!r} is closed")
        return await trio.to_thread.run_sync(self._run, fn)

    async def _journal_rows(self, session_id: str, after: int, limit: int | None) -> list[tuple[int, bytes]]:
        rows: list[tuple[int, bytes]] = await self._pooled(lambda db: _journal_read(db, session_id, after, limit))
        return rows

    async def _journal_bounds(self, session_id: str) -> tuple[int, int]:
        bounds: tuple[int, int] = await self._pooled(lambda db: _journal_bounds(db, session_id))
        return bounds

    # -- leases ------------------------------------------------------------------------------------
    async def claim(self, session_id: str, owner: str, ttl: float, principal: str | None = None) -> Lease | None:
        """Take ownership of ``session_id`` for ``owner`` (a host id) for ``ttl`` seconds (the
        server's clock), when it is unowned or its lease has expired: the new :class:`Lease`, with a
        new epoch larger than any given before; ``None`` when another lease holds (including one of
        ``owner``'s own: a host keeps a lease by :meth:`renew`).  Of concurrent claims exactly one
        succeeds.  ``principal``: who the session belongs to, stored with a successful claim when
        none is stored yet (never changed afterwards, and kept when the lease is released; read it
        with :meth:`principal`).  Raises ``ValueError`` for a ``ttl`` that is not positive,
        ``psycopg.Error`` when the server cannot be reached."""
        interval = _ttl(ttl)

        def claim(db: psycopg.Connection[Any]) -> Lease | None:
            with db.transaction():
                row = db.execute(
                    "INSERT INTO acp_session_leases AS l (session_id, owner, epoch, expires_at) "
                    "VALUES (%s, %s, nextval('acp_lease_epochs'), clock_timestamp() + %s) "
                    "ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch, "
                    "expires_at = excluded.expires_at WHERE l.expires_at <= clock_timestamp() "
                    f"RETURNING {_LEASE_COLUMNS}",
                    (session_id, owner, interval),
                ).fetchone()
                if row is not None and principal is not None:
                    db.execute(
                        "INSERT INTO acp_session_principals (session_id, principal) VALUES (%s, %s) "
                        "ON CONFLICT (session_id) DO NOTHING",
                        (session_id, principal),
                    )
            return _lease(row) if row is not None else None

        lease: Lease | None = await self._pooled(claim)
        return lease

    async def principal(self, session_id: str) -> str | None:
        """The principal stored for ``session_id`` by the first :meth:`claim` that gave one, or
        ``None`` (never claimed with one: the session is anyone's, as on a host without authentication)."""

        def principal(db: psycopg.Connection[Any]) -> str | None:
            row = db.execute(
                "SELECT principal FROM acp_session_principals WHERE session_id = %s", (session_id,)
            ).fetchone()
            return str(row[0]) if row is not None else None

        found: str | None = await self._pooled(principal)
        return found

    async def renew(self, owner: str, ttl: float) -> list[Lease]:
        """Extend every lease ``owner`` holds that has not expired to ``ttl`` seconds from now (the
        server's clock), in one statement; returns them (those that expired are lost and absent:
        claim those sessions again, with a new epoch, or let another host take them)."""
        interval = _ttl(ttl)

        def renew(db: psycopg.Connection[Any]) -> list[Lease]:
            rows = db.execute(
                "UPDATE acp_session_leases SET expires_at = clock_timestamp() + %s WHERE session_id IN ("
                "SELECT session_id FROM acp_session_leases WHERE owner = %s AND expires_at > clock_timestamp() "
                f"ORDER BY session_id FOR UPDATE) AND owner = %s RETURNING {_LEASE_COLUMNS}",
                (interval, owner, owner),
            ).fetchall()
            return [_lease(row) for row in rows]

        leases: list[Lease] = await self._pooled(renew)
        return leases

    async def release(self, session_id: str, epoch: int) -> bool:
        """Give up the lease of ``session_id`` with ``epoch`` (the session is unowned at once: any
        host may claim it); False when that lease was no longer there (claimed again since)."""

        def release(db: psycopg.Connection[Any]) -> bool:
            cur = db.execute("DELETE FROM acp_session_leases WHERE session_id = %s AND epoch = %s", (session_id, epoch))
            return cur.rowcount > 0

        released: bool = await self._pooled(release)
        return released

    async def owner(self, session_id: str) -> Lease | None:
        """The lease of ``session_id`` as stored (``held``: not expired), or ``None`` (never claimed, or released)."""

        def owner(db: psycopg.Connection[Any]) -> Lease | None:
            row = db.execute(
                f"SELECT {_LEASE_COLUMNS} FROM acp_session_leases WHERE session_id = %s", (session_id,)
            ).fetchone()
            return _lease(row) if row is not None else None

        lease: Lease | None = await self._pooled(owner)
        return lease

    async def expired(self, *, limit: int = 100) -> list[Lease]:
        """Up to ``limit`` leases that have expired, the longest expired first: sessions whose owner
        stopped renewing (died), for another host to claim."""

        def expired(db: psycopg.Connection[Any]) -> list[Lease]:
            rows = db.execute(
                f"SELECT {_LEASE_COLUMNS} FROM acp_session_leases WHERE expires_at <= clock_timestamp() "
                "ORDER BY expires_at LIMIT %s",
                (limit,),
            ).fetchall()
            return [_lease(row) for row in rows]

        leases: list[Lease] = await self._pooled(expired)
        return leases


__all__ = ["PG_SCHEMA_VERSION", "Lease", "LeaseLostError", "PgDatabase", "PostgresSessionStore"]

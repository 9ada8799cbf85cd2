"""The database under :mod:`acp_trio.session_store`: SQLite schema, migration, batched writes, a writer thread.

Contract: :class:`Database` owns one ``sqlite3`` connection and is used by one thread at a time.
:class:`Writer` runs it: a dedicated thread (a file store) or inline in the caller (the in-memory
store).  What a recorded session sends and receives goes into a :class:`Log` (one per session and
connection: ``deque`` s that the agent's thread appends to and only the writer pops from); the
writer takes whatever is queued and commits it in one transaction per cycle (every
``commit_interval``, 25 ms, while lines come), one ``events`` row per run of one kind.  Jobs
(create, list, load, delete...) go through the same writer, in order: "before" jobs run ahead of
the cycle's batch, "after" jobs (reads, flush) behind it, so a read sees every line recorded
before it was asked for.  Journal operations (:class:`JournalOp`: append, forget) go through the
same writer: queued in order, applied inside the cycle's transaction after its logs, each told its
result once that transaction is committed (or its error: nothing of it is stored).  They are
urgent, like jobs: a cycle starts at once, and what arrives while it commits goes into the next
one (group commit).

Schema version 4 (``PRAGMA user_version``; ``PRAGMA application_id`` = ``0x41435053``, "ACPS";
32 KiB pages, WAL checkpoints every 4 MiB)::

    sessions(id INTEGER PRIMARY KEY, session_id TEXT UNIQUE, cwd, additional_directories (JSON),
             mcp_servers (JSON, secrets removed unless asked), title, title_source (0 none,
             1 first prompt, 2 session_info_update), meta (JSON), modes (JSON SessionModeState),
             current_mode_id, config_options (JSON), created_us, updated_us, prompt_count,
             protocol_version (the ACP version the session was opened with: 1 or 2))
    events(id INTEGER PRIMARY KEY: sessions.id × 2^32 + the row's place in the session, kind, data BLOB)
    journals(id INTEGER PRIMARY KEY (below 2^23), session_id TEXT UNIQUE)
    journal_lines(id INTEGER PRIMARY KEY: journals.id × 2^40 + the line's number, start (bytes of the
                  journal's lines before this one since it began), data BLOB: the line)

``data`` holds one or more records, each ending in ``\\n``; by ``kind``: 0, ``session/update``
lines as sent; 1, ``session/prompt`` request lines as received; 2, the ``update`` objects of
``session/update`` lines as sent (the usual case: the line is :func:`update_line_head` of the
session, the object, then ``}}``); 3, the texts (JSON strings) of ``agent_message_chunk`` lines
whose content is a bare text block (:data:`TEXT_CHUNK_HEAD`, the string, ``}}``, then ``}}``):
:func:`lines_of` gives any row's lines back byte for byte.  A journal (``acp_trio.session_store``'s
``SessionJournal``) is independent of ``sessions``: its lines are numbered from 1 per session id,
one row each; the lowest and highest numbers held are its first and last (the newest line is never
dropped, so the numbering survives the bounds), and ``start`` gives the bytes held without a
counter row to rewrite (an append writes one page).

Older versions are migrated in place, in one transaction, when opened: version 1 (the first layout:
one ``events`` row per line, ``kind`` as text, timestamps as ISO text, no mode or config metadata),
version 2 (no ``protocol_version``: its sessions are version 1's) and version 3 (no journal
tables).  A newer version, or a database that is not a session store, raises :class:`StoreVersionError`.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import logging
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import orjson
import trio

log = logging.getLogger("acp_trio.session_store")

SCHEMA_VERSION: Final = 4
"""The schema version this code writes (``PRAGMA user_version``); it migrates versions 1 to 3."""
APPLICATION_ID: Final = 0x41435053  # "ACPS"
KIND_LINES: Final = 0  # session/update lines, whole
KIND_PROMPT: Final = 1  # session/prompt request lines
KIND_BODIES: Final = 2  # the "update" objects of session/update lines (see update_line_head)
KIND_TEXTS: Final = 3  # the texts of agent_message_chunk lines of a bare text block (see TEXT_CHUNK_HEAD)
TITLE_NONE: Final = 0
TITLE_FROM_PROMPT: Final = 1
TITLE_FROM_AGENT: Final = 2
_TITLE_LENGTH: Final = 100
_TOUCH_INTERVAL_US: Final = 1_000_000
_NICE: Final = 10  # the writer thread's niceness
_OPEN_TIMEOUT: Final = 30.0  # seconds opening a file waits for other processes opening or writing it
DEFAULT_COMMIT_INTERVAL: Final = 0.025
JOURNAL_SHIFT: Final = 40  # journal_lines.id = journals.id << JOURNAL_SHIFT | number
MAX_JOURNAL_NUMBER: Final = (1 << JOURNAL_SHIFT) - 1
"""The highest line number a journal gives (about 1.1 × 10^12 lines over a session's life)."""
_MAX_JOURNAL_ID: Final = (1 << (63 - JOURNAL_SHIFT)) - 1  # journal_lines ids stay positive 64-bit integers


def _event_ids(row_id: int) -> tuple[int, int]:
    """The ``events`` ids of the session with ``sessions.id`` ``row_id``: its rows, in order, by primary key."""
    return row_id << 32, (row_id << 32) + (1 << 32) - 1


_SCHEMA: Final = """
CREATE TABLE sessions (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL UNIQUE,
    cwd TEXT NOT NULL,
    additional_directories TEXT NOT NULL DEFAULT '[]',
    mcp_servers TEXT NOT NULL DEFAULT '[]',
    title TEXT,
    title_source INTEGER NOT NULL DEFAULT 0,
    meta TEXT,
    modes TEXT,
    current_mode_id TEXT,
    config_options TEXT,
    created_us INTEGER NOT NULL,
    updated_us INTEGER NOT NULL,
    prompt_count INTEGER NOT NULL DEFAULT 0,
    protocol_version INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX sessions_recent ON sessions (updated_us DESC, id DESC);
CREATE INDEX sessions_cwd_recent ON sessions (cwd, updated_us DESC, id DESC);
CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    kind INTEGER NOT NULL,
    data BLOB NOT NULL
);
"""
_JOURNAL_SCHEMA: Final = """
CREATE TABLE journals (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL UNIQUE
);
CREATE TABLE journal_lines (
    id INTEGER PRIMARY KEY,
    start INTEGER NOT NULL,
    data BLOB NOT NULL
);
"""

_SESSION_COLUMNS: Final = (
    "session_id, cwd, additional_directories, mcp_servers, title, meta, modes, current_mode_id, "
    "config_options, created_us, updated_us, prompt_count, id, protocol_version"
)


class StoreVersionError(Exception):
    """The database file cannot be used by this version of the session store.

    ``path``: the file.  ``found``: its schema version (``None`` when it is not a session store at
    all).  ``supported``: the version this code writes (older ones are migrated when opened).
    """

    def __init__(self, path: str, found: int | None, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.found = found
        self.supported = SCHEMA_VERSION


class StoreError(Exception):
    """Writing to the session store failed (the lines were kept and are retried; see the log)."""


class StoredSession:
    """One stored session, as :mod:`acp_trio.session_store` reports it.

    ``session_id``, ``cwd``, ``additional_directories`` (tuple of absolute paths), ``mcp_servers``
    (wire JSON of the last ``session/new``/``load``/``resume``; ``env`` and ``headers`` values are
    absent unless the store keeps secrets), ``title`` (``None``: none), ``created_at`` /
    ``updated_at`` (ISO 8601, UTC of the last line recorded),
    ``prompt_count`` (``session/prompt`` requests stored), ``modes`` (wire ``SessionModeState``
    from ``session/new``, its ``currentModeId`` kept current, or ``None``), ``config_options`` (wire
    ``SessionConfigOption`` list, the latest, or ``None``), ``meta`` (the ``_meta`` of the last
    ``session_info_update`` that carried one, or ``None``), ``protocol_version`` (the ACP version
    the session was recorded under: its lines are that version's).
    """

    __slots__ = (
        "additional_directories",
        "config_options",
        "created_at",
        "cwd",
        "mcp_servers",
        "meta",
        "modes",
        "prompt_count",
        "protocol_version",
        "row_id",
        "session_id",
        "title",
        "updated_at",
        "updated_us",
    )

    def __init__(self, row: tuple[Any, ...]) -> None:
        (
            self.session_id,
            self.cwd,
            dirs,
            servers,
            self.title,
            meta,
            modes,
            mode_id,
            config,
            created_us,
            updated_us,
            self.prompt_count,
            self.row_id,
            self.protocol_version,
        ) = row
        self.additional_directories: tuple[str, ...] = tuple(orjson.loads(dirs))
        self.mcp_servers: list[Any] = orjson.loads(servers)
        self.meta: dict[str, Any] | None = orjson.loads(meta) if meta is not None else None
        self.modes: dict[str, Any] | None = orjson.loads(modes) if modes is not None else None
        if self.modes is not None and mode_id is not None:
            self.modes["currentModeId"] = mode_id
        self.config_options: list[Any] | None = orjson.loads(config) if config is not None else None
        self.created_at = iso(created_us)
        self.updated_at = iso(updated_us)
        self.updated_us: int = updated_us

    def __repr__(self) -> str:
        return (
            f"StoredSession({self.session_id!r}, cwd={self.cwd!r}, title={self.title!r}, "
            f"prompts={self.prompt_count}, updated_at={self.updated_at!r})"
        )


def now_us() -> int:
    return time.time_ns() // 1000


def iso(us: int) -> str:
    """Microseconds since the epoch as ISO 8601 UTC with milliseconds (``2025-10-29T14:22:15.123Z``)."""
    moment = datetime.datetime.fromtimestamp(us / 1e6, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def encode_cursor(updated_us: int, row_id: int) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([updated_us, row_id])).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, int] | None:
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        return None
    if type(value) is list and len(value) == 2 and all(type(x) is int for x in value):
        return value[0], value[1]
    return None


def update_line_head(session_id: str) -> bytes:
    """What every ``session/update`` line of ``session_id`` the runtime encodes starts with when its
    params are exactly ``sessionId`` and ``update``: the line is this, the ``update`` object, then ``}}``."""
    return (
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":' + orjson.dumps(session_id) + b',"update":'
    )


UPDATE_LINE_TAIL: Final = b"}}\n"


TEXT_CHUNK_HEAD: Final = b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":'
"""How an ``agent_message_chunk`` update of a bare text block starts; then the JSON string, then ``}}``."""
TEXT_LINE_TAIL: Final = b"}}}}\n"


def lines_of(kind: int, session_id: str, data: bytes) -> bytes:
    """The wire lines of an ``events`` row (``data``: its records, each ending in ``\\n``), byte for byte:
    a :data:`KIND_BODIES` record is the line's ``update`` object, a :data:`KIND_TEXTS` one the
    text of an ``agent_message_chunk``; the other kinds are lines already."""
    if kind == KIND_BODIES:
        head, tail = update_line_head(session_id), UPDATE_LINE_TAIL
    elif kind == KIND_TEXTS:
        head, tail = update_line_head(session_id) + TEXT_CHUNK_HEAD, TEXT_LINE_TAIL
    else:
        return data
    if not data:
        return b""
    return head + data[:-1].replace(b"\n", tail + head) + tail


class Prompt:
    """Request lines of ``session/prompt`` in a :class:`Log` (joined by ``\\n``)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class Lines:
    """Whole ``session/update`` lines in a :class:`Log` (joined by ``\\n``): those not kept as bodies."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class Texts:
    """Texts of ``agent_message_chunk`` lines (JSON strings joined by ``\\n``) in a :class:`Log`."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


META_UPDATES: Final = frozenset({"session_info_update", "current_mode_update", "config_option_update"})
"""The ``sessionUpdate`` kinds that also change the stored session's metadata."""

Chunk = bytes | Lines | Prompt | Texts
"""What a :class:`Log` holds: ``update`` objects of ``session/update`` lines sent, joined by
``\\n`` (``bytes``: the usual case), whole lines (:class:`Lines`) or prompt lines (:class:`Prompt`)."""


class Log:
    """What one recorded session (on one connection) has sent and received, waiting for the writer.

    The agent's thread adds, in order: ``add_bodies`` (the ``update`` objects of ``session/update``
    lines, handed over by the connection once written: ``Connection.queue_line_into``),
    ``add_lines`` (whole lines, when the params were not the usual two keys), ``add_prompt`` (a
    ``session/prompt`` line received), ``add_meta`` (the wire ``update`` of a :data:`META_UPDATES`
    kind, as sent); only the writer takes (``deque`` appends and pops are atomic).  ``head``: see
    :func:`update_line_head`.  ``row_id`` is set by the writer once the session's row exists;
    ``closed``: nothing more will be added; ``dropped``: the session was deleted or replaced,
    pending lines are discarded.
    """

    __slots__ = (
        "add_bodies",
        "add_lines",
        "add_texts",
        "closed",
        "dropped",
        "head",
        "head_text",
        "items",
        "meta",
        "row_id",
        "session_id",
        "title_source",
        "touched_us",
        "untouched_us",
    )

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.head = update_line_head(session_id)
        self.head_text = self.head + TEXT_CHUNK_HEAD
        self.items: deque[Chunk] = deque()
        self.add_bodies = self.items.append
        # stored once: the connection tells sinks apart by identity
        self.add_lines = self._add_lines
        self.add_texts = self._add_texts
        self.meta: deque[dict[str, Any]] = deque()
        self.row_id: int | None = None
        self.title_source = TITLE_NONE
        self.touched_us = 0  # when the writer last wrote the session's updated_us
        self.untouched_us = 0  # the time of a later write not in updated_us yet (0: none)
        self.closed = False
        self.dropped = False

    def _add_lines(self, data: bytes) -> None:
        self.items.append(Lines(data))

    def _add_texts(self, data: bytes) -> None:
        self.items.append(Texts(data))

    def add_prompt(self, line: bytes) -> None:
        self.items.append(Prompt(line))

    def add_meta(self, update: dict[str, Any]) -> None:
        self.meta.append(update)

    def pending(self) -> bool:
        return bool(self.items) or bool(self.meta)

    def take(self) -> tuple[list[Chunk], list[dict[str, Any]]]:
        """Everything added so far, in order (the writer's side)."""
        items, meta = self.items, self.meta
        return [items.popleft() for _ in range(len(items))], [meta.popleft() for _ in range(len(meta))]

    def put_back(self, items: list[Chunk], meta: list[dict[str, Any]]) -> None:
        """Return what :meth:`take` gave (a write failed): ahead of what was added since."""
        self.items.extendleft(reversed(items))
        self.meta.extendleft(reversed(meta))

    def discard(self) -> None:
        self.items.clear()
        self.meta.clear()


_KINDS: Final[dict[type, int]] = {Lines: KIND_LINES, Prompt: KIND_PROMPT, Texts: KIND_TEXTS}


def _renamed(data: bytes, session_id: str) -> bytes:
    """Whole ``session/update`` lines (each ending in ``\\n``) with ``params.sessionId`` set to ``session_id``."""
    out = []
    for line in data.splitlines():
        try:
            message = orjson.loads(line)
            message["params"]["sessionId"] = session_id
            out.append(orjson.dumps(message))
        except (orjson.JSONDecodeError, TypeError, KeyError):
            out.append(line)
    out.append(b"")
    return b"\n".join(out)


def _title_of(prompt_line: bytes) -> str | None:
    try:
        params = orjson.loads(prompt_line).get("params") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return None
    for block in params.get("prompt") or ():
        if type(block) is dict and block.get("type") == "text" and type(block.get("text")) is str:
            for text_line in block["text"].splitlines():
                text: str = text_line.strip()
                if text:
                    return text if len(text) <= _TITLE_LENGTH else text[: _TITLE_LENGTH - 1].rstrip() + "…"
    return None


# -- the backend-independent part of a batch (shared with acp_trio._store_pg) -------------------------


def read_meta(update: dict[str, Any], fields: dict[str, Any]) -> None:
    """Session metadata from a :data:`META_UPDATES` update (wire JSON): title and ``_meta``, mode, config."""
    kind = update.get("sessionUpdate")
    if kind == "session_info_update":
        if "title" in update:
            fields["title"], fields["title_source"] = update["title"], TITLE_FROM_AGENT
        if "_meta" in update:
            value = update["_meta"]
            fields["meta"] = orjson.dumps(value).decode() if value is not None else None
    elif kind == "current_mode_update":
        fields["current_mode_id"] = update.get("currentModeId")
    elif kind == "config_option_update" and type(update.get("configOptions")) is list:
        fields["config_options"] = orjson.dumps(update["configOptions"]).decode()


def meta_fields(meta: list[dict[str, Any]]) -> dict[str, Any]:
    """The session columns (name -> value) the metadata updates ``meta`` set, the latest winning."""
    fields: dict[str, Any] = {}
    for update in meta:
        read_meta(update, fields)
    return fields


def runs_of(items: list[Chunk]) -> list[tuple[int, bytes]]:
    """``(kind, data)``: one ``events`` row per run of one kind of ``items``, records each ending in ``\\n``."""
    runs: list[tuple[int, list[bytes]]] = []
    for item in items:
        if type(item) is bytes:
            kind, data = KIND_BODIES, item
        else:
            assert isinstance(item, Lines | Prompt | Texts)
            kind, data = _KINDS[type(item)], item.data
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(data)
        else:
            runs.append((kind, [data]))
    out = []
    for kind, parts in runs:
        parts.append(b"")  # every line ends in \n
        out.append((kind, b"\n".join(parts)))
    return out


def count_prompts(entry: Log, runs: list[tuple[int, bytes]], fields: dict[str, Any]) -> int:
    """The prompts in ``runs``; sets ``fields`` title from the first prompt when the session has none yet."""
    prompts = 0
    for kind, data in runs:
        if kind != KIND_PROMPT:
            continue
        lines = data.splitlines()
        prompts += len(lines)
        if entry.title_source == TITLE_NONE and "title" not in fields:
            for line in lines:
                title = _title_of(line)
                if title is not None:
                    fields["title"], fields["title_source"] = title, TITLE_FROM_PROMPT
                    break
    return prompts


def touch_due(entry: Log, now: int, prompts: int, fields: dict[str, Any]) -> bool:
    """Whether a batch writes the session's row (``updated_us``, ``prompt_count`` + ``prompts``,
    ``fields``): at once for a prompt or metadata, else at most every second (each write of the
    row costs its pages; ``updated_at`` may lag by that much; :meth:`Database.touch` writes the
    last one when the log is done).  Updates ``entry``'s bookkeeping either way."""
    if "title_source" in fields:
        entry.title_source = fields["title_source"]
    if not prompts and not fields and now - entry.touched_us < _TOUCH_INTERVAL_US:
        entry.untouched_us = now
        return False
    entry.touched_us, entry.untouched_us = now, 0
    return True


def trim_first(
    state: list[int], max_updates: int, max_bytes: int, first_starting_at: Callable[[int, int, int], int | None]
) -> int:
    """The first number a journal (``state``: ``[id, first, last, start of first, end of last]``) keeps
    under its bounds: at most ``max_updates`` lines and ``max_bytes`` bytes, its newest line kept
    whatever its size.  ``first_starting_at(low, high, offset)``: the lowest number in ``low..high``
    whose line starts at ``offset`` or later (``None``: none)."""
    _, first, last, start, end = state
    new_first = max(first, last - max_updates + 1)
    if end - start > max_bytes:  # the first line to keep starts at most max_bytes before the end
        found = first_starting_at(new_first, last, end - max_bytes)
        new_first = found if found is not None else last
    return new_first


def _snapshot(db: sqlite3.Connection, fn: Callable[[], Any]) -> Any:
    """``fn()`` inside one read transaction of ``db`` (one snapshot of the file), unless one is open."""
    if db.in_transaction:
        return fn()
    db.execute("BEGIN")
    try:
        return fn()
    finally:
        if db.in_transaction:
            db.execute("COMMIT")


def _journal_id(db: sqlite3.Connection, session_id: str) -> int:
    row = db.execute("SELECT id FROM journals WHERE session_id = ?", (session_id,)).fetchone()
    return int(row[0]) if row is not None else 0


def _journal_state(db: sqlite3.Connection, journal_id: int) -> list[int]:
    """``[journal id, first, last, start of first, end of last]`` (numbers; byte offsets since the
    journal began) of a journal; a journal with no line (just made) is ``[id, 1, 0, 0, 0]``."""
    base = journal_id << JOURNAL_SHIFT
    span = (base, base + MAX_JOURNAL_NUMBER)
    newest = db.execute(
        "SELECT id - ?, start + length(data) FROM journal_lines WHERE id BETWEEN ? AND ? ORDER BY id DESC LIMIT 1",
        (base, *span),
    ).fetchone()
    if newest is None:
        return [journal_id, 1, 0, 0, 0]
    oldest = db.execute(
        "SELECT id - ?, start FROM journal_lines WHERE id BETWEEN ? AND ? ORDER BY id LIMIT 1", (base, *span)
    ).fetchone()
    return [journal_id, oldest[0], newest[0], oldest[1], newest[1]]


def journal_bounds(db: sqlite3.Connection, session_id: str) -> tuple[int, int]:
    """``(first, last)``: the oldest and newest numbers held by ``session_id``'s journal (``(0, 0)``: none)."""

    def bounds() -> tuple[int, int]:
        journal_id = _journal_id(db, session_id)
        state = _journal_state(db, journal_id) if journal_id else [0, 0, 0]
        return (state[1], state[2]) if state[2] else (0, 0)

    result: tuple[int, int] = _snapshot(db, bounds)
    return result


def journal_read(db: sqlite3.Connection, session_id: str, after: int, limit: int | None) -> list[tuple[int, bytes]]:
    """``(number, line)`` of the lines ``session_id``'s journal holds numbered above ``after``, in order,
    at most ``limit`` (``None``: all)."""

    def read() -> list[tuple[int, bytes]]:
        journal_id = _journal_id(db, session_id)
        if not journal_id:
            return []
        base = journal_id << JOURNAL_SHIFT
        rows: list[tuple[int, bytes]] = db.execute(
            "SELECT id - ?, data FROM journal_lines WHERE id BETWEEN ? AND ? ORDER BY id LIMIT ?",
            (base, base + max(after, 0) + 1, base + MAX_JOURNAL_NUMBER, -1 if limit is None else limit),
        ).fetchall()
        return rows

    result: list[tuple[int, bytes]] = _snapshot(db, read)
    return result


class Reader:
    """A second connection to a store's file, for journal reads that must not wait behind the
    writer thread's commits and jobs (a WAL reader sees every committed transaction, and neither
    blocks the writer nor waits for it).  Opened at the first read; one read at a time (a lock);
    any thread (``check_same_thread`` off)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self.closed = False

    def run(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """``fn(connection)``; raises ``RuntimeError`` once closed."""
        with self._lock:
            if self.closed:
                raise RuntimeError("the session store is closed")
            if self._db is None:
                self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
                self._db.execute("PRAGMA query_only = 1")
            return fn(self._db)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            if self._db is not None:
                self._db.close()
                self._db = None


def page_query(
    select: str, mark: str, cwd: str | None, after: tuple[int, int] | None, limit: int, version: int | None
) -> tuple[str, tuple[Any, ...]]:
    """``(sql, args)`` of one page of :meth:`Database.page` (and the PostgreSQL store's): ``select``
    (``SELECT columns FROM table``) filtered by protocol ``version`` and ``cwd``, after the cursor
    ``after`` (``(updated_us, id)``), newest first, ``limit + 1`` rows (the extra one says there is a
    next page); ``mark`` is the driver's parameter placeholder (``?``, ``%s``)."""
    where: list[str] = []
    args: list[Any] = []
    if version is not None:
        where.append(f"protocol_version = {mark}")
        args.append(version)
    if cwd is not None:
        where.append(f"cwd = {mark}")
        args.append(cwd)
    if after is not None:
        where.append(f"(updated_us, id) < ({mark}, {mark})")
        args.extend(after)
    if where:
        select += " WHERE " + " AND ".join(where)
    return f"{select} ORDER BY updated_us DESC, id DESC LIMIT {mark}", (*args, limit + 1)


class Database:
    """One SQLite database of sessions (see the module docstring); one thread at a time."""

    def __init__(self, path: str, *, durable: bool = False) -> None:
        self.path = path
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
        except sqlite3.Error as exc:
            raise StoreVersionError(path, None, f"{path}: cannot open the session store: {exc}") from exc
        try:
            self._prepare(durable)
        except BaseException:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    # -- opening, versions -------------------------------------------------------------------------
    def _prepare(self, durable: bool) -> None:
        """Check, migrate or create the schema.  Processes opening one file at once take turns: SQLite
        answers some of these steps (switching to WAL) "database is locked" at once, without waiting,
        so they are retried for up to :data:`_OPEN_TIMEOUT` s."""
        deadline = time.monotonic() + _OPEN_TIMEOUT
        pause = 0.005
        while True:
            try:
                self._prepare_once(durable)
                return
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreVersionError(
                        self.path, None, f"{self.path}: cannot open the session store: {exc} for {_OPEN_TIMEOUT:g} s"
                    ) from exc
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _prepare_once(self, durable: bool) -> None:
        db = self.db
        try:
            self._check(*self._identity())  # before changing anything: a foreign file stays as it was
            db.execute("PRAGMA page_size = 32768")  # a new file only: big pages, fewer writes per batch
            db.execute("PRAGMA wal_autocheckpoint = 128")  # 4 MiB of WAL, as the default 1000 pages of 4 KiB
            if self.path != ":memory:":
                db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and _busy(exc):
                raise  # another process is opening it too: _prepare tries again
            raise StoreVersionError(self.path, None, f"{self.path}: not a session store database ({exc})") from exc
        try:
            version, app, tables = self._identity()  # again, under the lock: another process may have been first
            if not tables and version == 0:
                _create_schema(db)
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            else:
                self._check(version, app, tables)
                if version < SCHEMA_VERSION:
                    log.info(
                        "%s: migrating the session store from schema version %d to %d",
                        self.path,
                        version,
                        SCHEMA_VERSION,
                    )
                    if version == 1:
                        _migrate_from_1(db)  # to the current layout at once
                    else:
                        if version == 2:
                            _migrate_2_to_3(db)
                        _migrate_3_to_4(db)
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _identity(self) -> tuple[int, int, list[str]]:
        """``(user_version, application_id, tables)``, read in one transaction (one snapshot: another
        process may be creating the schema meanwhile)."""
        db = self.db
        own = not db.in_transaction
        if own:
            db.execute("BEGIN")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            app = db.execute("PRAGMA application_id").fetchone()[0]
            tables = sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        finally:
            if own and db.in_transaction:
                db.execute("COMMIT")
        return version, app, tables

    def _check(self, version: int, app: int, tables: list[str]) -> None:
        """Raise :class:`StoreVersionError` unless the database is empty or a session store this code reads."""
        if not tables and version == 0:
            return
        if app != APPLICATION_ID:
            raise StoreVersionError(
                self.path,
                None,
                f"{self.path} is an SQLite database but not an acp-trio session store "
                f"(application_id {app:#x}, tables {', '.join(tables) or 'none'}): give another path",
            )
        if version > SCHEMA_VERSION:
            raise StoreVersionError(
                self.path,
                version,
                f"{self.path} holds session store schema version {version}, written by a newer acp-trio; "
                f"this one reads versions 1 to {SCHEMA_VERSION}: upgrade acp-trio or give another path",
            )
        if version < 1:
            raise StoreVersionError(self.path, version, f"{self.path}: unknown session store schema version {version}")

    # -- transactions ------------------------------------------------------------------------------
    def _begin(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def _end(self, ok: bool) -> None:
        if self.db.in_transaction:
            self.db.execute("COMMIT" if ok else "ROLLBACK")

    # -- sessions ----------------------------------------------------------------------------------
    def _drop_rows(self, session_id: str) -> bool:
        """Delete the record of ``session_id`` and its events (inside a transaction); whether it was stored."""
        row = self.db.execute("SELECT id FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
        if row is not None:
            self.db.execute("DELETE FROM events WHERE id BETWEEN ? AND ?", _event_ids(row[0]))
            self.db.execute("DELETE FROM sessions WHERE id = ?", (row[0],))
        return row is not None

    def create(self, session_id: str, cwd: str, dirs: str, servers: str, version: int = 1) -> tuple[int, int]:
        """A new record (a stored one with that id is replaced); returns ``(row id, title source)``."""
        self._begin()
        ok = False
        try:
            row_id = self._insert(session_id, cwd, dirs, servers, version)
            ok = True
        finally:
            self._end(ok)
        return row_id, TITLE_NONE

    def _insert(self, session_id: str, cwd: str, dirs: str, servers: str, version: int) -> int:
        now = now_us()
        self._drop_rows(session_id)
        cur = self.db.execute(
            "INSERT INTO sessions (session_id, cwd, additional_directories, mcp_servers, created_us, updated_us, "
            "protocol_version) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (session_id, cwd, dirs, servers, now, now, version),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def fork(
        self, parent_id: str, session_id: str, cwd: str, dirs: str, servers: str, version: int, fields: dict[str, Any]
    ) -> tuple[int, int]:
        """A new record ``session_id`` holding a copy of ``parent_id``'s lines and metadata (title,
        ``_meta``, modes, config options, prompt count), then ``fields``; a plain new record when
        the parent is not stored.  Returns ``(row id, title source)``."""
        self._begin()
        ok = False
        try:
            row_id = self._insert(session_id, cwd, dirs, servers, version)
            parent = self.db.execute(
                "SELECT id, title, title_source, meta, modes, current_mode_id, config_options, prompt_count "
                "FROM sessions WHERE session_id = ?",
                (parent_id,),
            ).fetchone()
            title_source = TITLE_NONE
            if parent is not None:
                parent_row, *copied = parent
                title_source = copied[1]
                self.db.execute(
                    "UPDATE sessions SET title = ?, title_source = ?, meta = ?, modes = ?, current_mode_id = ?, "
                    "config_options = ?, prompt_count = ? WHERE id = ?",
                    (*copied, row_id),
                )
                shift = (row_id - parent_row) << 32
                first, last = _event_ids(parent_row)
                self.db.execute(
                    "INSERT INTO events (id, kind, data) SELECT id + ?, kind, data FROM events "
                    "WHERE id BETWEEN ? AND ? ORDER BY id",
                    (shift, first, last),
                )
                # whole lines name their session: they name the fork now (bodies and texts take it when read)
                first, last = _event_ids(row_id)
                for event_id, data in self.db.execute(
                    "SELECT id, data FROM events WHERE id BETWEEN ? AND ? AND kind = ?", (first, last, KIND_LINES)
                ).fetchall():
                    self.db.execute(
                        "UPDATE events SET data = ? WHERE id = ?", (_renamed(bytes(data), session_id), event_id)
                    )
            if fields:
                if "title_source" in fields:
                    title_source = fields["title_source"]
                assignments = ", ".join(f"{name} = ?" for name in fields)
                self.db.execute(f"UPDATE sessions SET {assignments} WHERE id = ?", (*fields.values(), row_id))
            ok = True
        finally:
            self._end(ok)
        return row_id, title_source

    def reopen(self, session_id: str, cwd: str, dirs: str, servers: str, version: int = 1) -> tuple[int, int]:
        """Update a stored session's roots and MCP servers (load/resume), creating it when absent."""
        self._begin()
        ok = False
        try:
            row = self.db.execute(
                "SELECT id, title_source FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is not None:
                self.db.execute(
                    "UPDATE sessions SET cwd = ?, additional_directories = ?, mcp_servers = ? WHERE id = ?",
                    (cwd, dirs, servers, row[0]),
                )
                ok = True
                return row[0], row[1]
            ok = True
        finally:
            self._end(ok)
        return self.create(session_id, cwd, dirs, servers, version)

    def rewrite(self, session_id: str, rows: list[tuple[int, bytes]], version: int) -> bool:
        """Replace the events of ``session_id`` by ``rows`` (``(kind, data)``, in order) and mark it
        recorded under protocol ``version``, in one transaction (a session migrated to another record
        form); False (nothing done) when it is not stored."""
        self._begin()
        ok = False
        try:
            row = self.db.execute("SELECT id FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
            if row is not None:
                first, last = _event_ids(row[0])
                self.db.execute("DELETE FROM events WHERE id BETWEEN ? AND ?", (first, last))
                self.db.executemany(
                    "INSERT INTO events (id, kind, data) VALUES (?, ?, ?)",
                    [(first + i, kind, data) for i, (kind, data) in enumerate(rows)],
                )
                self.db.execute("UPDATE sessions SET protocol_version = ? WHERE id = ?", (version, row[0]))
            ok = True
        finally:
            self._end(ok)
        return row is not None

    def set_fields(self, session_id: str, fields: dict[str, Any]) -> None:
        if not fields:
            return
        assignments = ", ".join(f"{name} = ?" for name in fields)
        self.db.execute(f"UPDATE sessions SET {assignments} WHERE session_id = ?", (*fields.values(), session_id))

    def get(self, session_id: str) -> StoredSession | None:
        row = self.db.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
        return StoredSession(row) if row is not None else None

    def page(
        self, cwd: str | None, after: tuple[int, int] | None, limit: int, version: int | None = None
    ) -> tuple[list[StoredSession], bool]:
        sql, args = page_query(f"SELECT {_SESSION_COLUMNS} FROM sessions", "?", cwd, after, limit, version)
        rows = self.db.execute(sql, args).fetchall()
        return [StoredSession(r) for r in rows[:limit]], len(rows) > limit

    def events(self, session_id: str) -> tuple[StoredSession, list[tuple[int, bytes]]] | None:
        session = self.get(session_id)
        if session is None:
            return None
        rows = self.db.execute(
            "SELECT kind, data FROM events WHERE id BETWEEN ? AND ? ORDER BY id", _event_ids(session.row_id)
        ).fetchall()
        return session, rows

    def delete(self, session_id: str) -> bool:
        self._begin()
        ok = False
        try:
            existed = self._drop_rows(session_id)
            ok = True
        finally:
            self._end(ok)
        return existed

    # -- journals ----------------------------------------------------------------------------------
    def journal_id(self, session_id: str) -> int:
        """The ``journals.id`` of ``session_id``'s journal (0: none)."""
        return _journal_id(self.db, session_id)

    def journal_bounds(self, session_id: str) -> tuple[int, int]:
        """See :func:`journal_bounds`."""
        return journal_bounds(self.db, session_id)

    def _journal_state(self, journal_id: int) -> list[int]:
        return _journal_state(self.db, journal_id)

    def journal_read(self, session_id: str, after: int, limit: int | None) -> list[tuple[int, bytes]]:
        """See :func:`journal_read`."""
        return journal_read(self.db, session_id, after, limit)

    def _journal(self, ops: list[JournalOp]) -> None:
        """Apply ``ops`` in order, inside the caller's transaction: each append's lines numbered on
        from its journal's last, then every journal appended to trimmed to its bounds (those of its
        last append here).  Sets each op's ``result``.  Only ``journal_lines`` changes in the usual
        append (one page written per commit): a line's ``start`` (the bytes of the journal's lines
        before it, since it began) gives the bytes held, ``first`` and ``last`` are the lowest and
        highest numbers held."""
        states: dict[str, list[int]] = {}  # session id -> _journal_state (journal id 0: none)
        bounds: dict[str, tuple[int, int]] = {}  # the journals appended to, with the bounds to apply
        insert = "INSERT INTO journal_lines (id, start, data) VALUES (?, ?, ?)"
        for op in ops:
            session_id = op.session_id
            state = states.get(session_id)
            if state is None:
                journal_id = self.journal_id(session_id)
                state = states[session_id] = self._journal_state(journal_id) if journal_id else [0, 0, 0, 0, 0]
            if op.lines is None:  # forget
                if state[0]:
                    base = state[0] << JOURNAL_SHIFT
                    self.db.execute(
                        "DELETE FROM journal_lines WHERE id BETWEEN ? AND ?", (base, base + MAX_JOURNAL_NUMBER)
                    )
                    self.db.execute("DELETE FROM journals WHERE id = ?", (state[0],))
                state[:] = [0, 0, 0, 0, 0]
                bounds.pop(session_id, None)
                op.result = 0
                continue
            lines = op.lines
            if lines:
                if not state[0]:
                    state[:] = [self._new_journal(session_id), 1, 0, 0, 0]
                last = state[2]
                if last + len(lines) > MAX_JOURNAL_NUMBER:
                    raise StoreError(
                        f"the journal of session {session_id!r} is at its last number ({MAX_JOURNAL_NUMBER}): "
                        "forget it to start again from 1"
                    )
                number = (state[0] << JOURNAL_SHIFT) + last
                offset = state[4]
                rows = []
                for data in lines:
                    number += 1
                    rows.append((number, offset, data))
                    offset += len(data)
                self.db.executemany(insert, rows)
                state[2] = last + len(lines)
                state[4] = offset
                bounds[session_id] = (op.max_updates, op.max_bytes)
            op.result = state[2]
        for session_id, (max_updates, max_bytes) in bounds.items():
            self._trim(states[session_id], max_updates, max_bytes)

    def _trim(self, state: list[int], max_updates: int, max_bytes: int) -> None:
        """Drop the oldest lines of a journal (``state``: see :meth:`_journal_state`) until it holds at
        most ``max_updates`` lines and ``max_bytes`` bytes, keeping its newest line whatever its size
        (:func:`trim_first`)."""
        journal_id, first = state[0], state[1]
        base = journal_id << JOURNAL_SHIFT

        def first_starting_at(low: int, high: int, offset: int) -> int | None:
            row = self.db.execute(
                "SELECT id - ? FROM journal_lines WHERE id BETWEEN ? AND ? AND start >= ? ORDER BY id LIMIT 1",
                (base, base + low, base + high, offset),
            ).fetchone()
            return int(row[0]) if row is not None else None

        new_first = trim_first(state, max_updates, max_bytes, first_starting_at)
        if new_first > first:
            self.db.execute("DELETE FROM journal_lines WHERE id BETWEEN ? AND ?", (base + first, base + new_first - 1))
            state[1] = new_first
            kept = self.db.execute("SELECT start FROM journal_lines WHERE id = ?", (base + new_first,)).fetchone()
            state[3] = kept[0]

    def _new_journal(self, session_id: str) -> int:
        """The id of a new journal row for ``session_id`` (the next id, or the lowest free one once
        ids reach :data:`_MAX_JOURNAL_ID`)."""
        cur = self.db.execute("INSERT INTO journals (session_id) VALUES (?)", (session_id,))
        journal_id = cur.lastrowid
        assert journal_id is not None
        if journal_id <= _MAX_JOURNAL_ID:
            return journal_id
        (free,) = self.db.execute(
            "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM journals WHERE id = 1) THEN 1 ELSE "
            "(SELECT min(j.id) + 1 FROM journals j WHERE NOT EXISTS (SELECT 1 FROM journals k WHERE k.id = j.id + 1)) "
            "END"
        ).fetchone()
        if free > _MAX_JOURNAL_ID:
            raise StoreError(f"{self.path}: {_MAX_JOURNAL_ID} journals are kept: forget some to start another")
        self.db.execute("UPDATE journals SET id = ? WHERE id = ?", (free, journal_id))
        base = free << JOURNAL_SHIFT
        self.db.execute("DELETE FROM journal_lines WHERE id BETWEEN ? AND ?", (base, base + MAX_JOURNAL_NUMBER))
        return int(free)

    def touch(self, entry: Log) -> None:
        """Write the ``updated_us`` a throttled :meth:`write` left out (the log is done)."""
        if entry.untouched_us and entry.row_id is not None:
            self.db.execute("UPDATE sessions SET updated_us = ? WHERE id = ?", (entry.untouched_us, entry.row_id))
            entry.touched_us, entry.untouched_us = entry.untouched_us, 0

    def check(self) -> str:
        return str(self.db.execute("PRAGMA integrity_check").fetchone()[0])

    # -- the batch -----------------------------------------------------------------------------------
    def write(
        self, batch: list[tuple[Log, list[Chunk], list[dict[str, Any]]]], journal: list[JournalOp] | None = None
    ) -> None:
        """Store each log's lines and metadata, then apply the journal operations, in one transaction
        (nothing is written when it raises)."""
        now = now_us()
        self._begin()
        ok = False
        try:
            for entry, items, meta in batch:
                self._write_log(entry, items, meta, now)
            if journal:
                self._journal(journal)
            ok = True
        finally:
            self._end(ok)

    def _write_log(self, entry: Log, items: list[Chunk], meta: list[dict[str, Any]], now: int) -> None:
        execute = self.db.execute
        first, last = _event_ids(entry.row_id)  # type: ignore[arg-type]
        insert = (  # the next id of the session (another process may share the file: asked, not counted)
            "INSERT INTO events (id, kind, data) VALUES "
            f"((SELECT coalesce(max(id) + 1, {first}) FROM events WHERE id BETWEEN {first} AND {last}), ?, ?)"
        )
        fields = meta_fields(meta)
        runs = runs_of(items)
        for kind, data in runs:
            execute(insert, (kind, data))
        prompts = count_prompts(entry, runs, fields)
        if touch_due(entry, now, prompts, fields):
            assignments = "".join(f", {name} = ?" for name in fields)
            self.db.execute(
                f"UPDATE sessions SET updated_us = ?, prompt_count = prompt_count + ?{assignments} WHERE id = ?",
                (now, prompts, *fields.values(), entry.row_id),
            )


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` is SQLite's "busy" or "locked" (another connection holds the lock)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if type(code) is int:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _create_schema(db: sqlite3.Connection, schema: str = _SCHEMA + _JOURNAL_SCHEMA) -> None:
    for statement in schema.split(";"):  # not executescript: it would commit the caller's transaction
        if statement.strip():
            db.execute(statement)


def _migrate_2_to_3(db: sqlite3.Connection) -> None:
    """Version 2 → 3, inside the caller's transaction: ``protocol_version`` (every version 2 session is version 1's)."""
    db.execute("ALTER TABLE sessions ADD COLUMN protocol_version INTEGER NOT NULL DEFAULT 1")


def _migrate_3_to_4(db: sqlite3.Connection) -> None:
    """Version 3 → 4, inside the caller's transaction: the journal tables (empty)."""
    _create_schema(db, _JOURNAL_SCHEMA)


def _migrate_from_1(db: sqlite3.Connection) -> None:
    """Version 1 → the current layout, inside the caller's transaction: events batched by run,
    timestamps in µs, metadata columns (protocol version 1)."""
    db.execute("ALTER TABLE sessions RENAME TO sessions_v1")
    db.execute("ALTER TABLE events RENAME TO events_v1")
    _create_schema(db)
    rows = db.execute(
        "SELECT session_id, cwd, additional_directories, mcp_servers, title, created_at, updated_at "
        "FROM sessions_v1 ORDER BY rowid"
    ).fetchall()

    def us(text: Any) -> int:
        try:
            return int(datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp() * 1e6)
        except ValueError:
            return now_us()

    for session_id, cwd, dirs, servers, title, created, updated in rows:
        cur = db.execute(
            "INSERT INTO sessions (session_id, cwd, additional_directories, mcp_servers, title, title_source, "
            "created_us, updated_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                session_id,
                cwd,
                dirs or "[]",
                servers or "[]",
                title,
                TITLE_FROM_PROMPT if title is not None else TITLE_NONE,
                us(created),
                us(updated),
            ),
        )
        row_id = cur.lastrowid
        runs: list[tuple[int, list[bytes]]] = []
        for kind_text, line in db.execute(
            "SELECT kind, line FROM events_v1 WHERE session_id = ? ORDER BY id", (session_id,)
        ):
            kind = KIND_PROMPT if kind_text == "prompt" else KIND_LINES
            data = bytes(line) if bytes(line).endswith(b"\n") else bytes(line) + b"\n"
            if runs and runs[-1][0] == kind:
                runs[-1][1].append(data)
            else:
                runs.append((kind, [data]))
        prompts = 0
        assert row_id is not None
        for seq, (kind, lines) in enumerate(runs):
            db.execute(
                "INSERT INTO events (id, kind, data) VALUES (?, ?, ?)",
                (_event_ids(row_id)[0] + seq, kind, b"".join(lines)),
            )
            if kind == KIND_PROMPT:
                prompts += len(lines)
        db.execute("UPDATE sessions SET prompt_count = ? WHERE id = ?", (prompts, row_id))
    db.execute("DROP TABLE events_v1")
    db.execute("DROP TABLE sessions_v1")


# -- running it -------------------------------------------------------------------------------------


class Job:
    """A call ``fn(database)`` for the writer; ``after``: run it behind the cycle's batch (reads, flush).

    ``fn`` ``None``: a flush, which fails with :class:`StoreError` when that batch could not be written.
    ``token``: the trio token of the run waiting for it (``None``: nobody waits).
    """

    __slots__ = ("after", "done", "error", "fn", "result", "token")

    def __init__(self, fn: Callable[[Database], Any] | None, after: bool, token: Any = None) -> None:
        self.fn = fn
        self.after = after
        self.token = token
        self.done: trio.Event | None = trio.Event() if token is not None else None
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self, database: Database, batch_error: BaseException | None) -> None:
        try:
            if self.fn is not None:
                self.result = self.fn(database)
            elif batch_error is not None:
                raise StoreError(f"writing the session store failed: {batch_error!r}") from batch_error
        except BaseException as exc:  # delivered to whoever waits
            self.error = exc
        if self.done is not None:
            try:
                self.token.run_sync_soon(self.done.set)
            except trio.RunFinishedError:
                pass


class JournalOp:
    """An append to a session's journal (``lines``), or its forgetting (``lines`` ``None``), for the writer.

    Applied in the order queued, inside a cycle's transaction (see :meth:`Database._journal`);
    ``max_updates`` and ``max_bytes`` are the bounds an append applies.  Once the transaction is
    committed, ``result`` is the number of the last line of the journal (0 after a forget) and
    ``done`` is set (``token``: the trio token of the run waiting, as for :class:`Job`); when it
    failed, ``error`` is a :class:`StoreError` and nothing of the op was stored (see :func:`finish_all`).
    ``epoch``: the lease an append is fenced by (a store with leases, ``acp_trio._store_pg``: the
    append is applied only while that lease holds; ``None``: not fenced).  A backend may set
    ``error`` on one op before the commit (that op alone was not applied): :func:`finish_all` keeps it.
    """

    __slots__ = ("done", "epoch", "error", "lines", "max_bytes", "max_updates", "result", "session_id", "token")

    def __init__(
        self, session_id: str, lines: list[bytes] | None, max_updates: int = 0, max_bytes: int = 0, token: Any = None
    ) -> None:
        self.session_id = session_id
        self.lines = lines
        self.max_updates = max_updates
        self.max_bytes = max_bytes
        self.token = token
        self.done: trio.Event | None = trio.Event() if token is not None else None
        self.result = 0
        self.error: BaseException | None = None
        self.epoch: int | None = None


def finish_all(ops: list[JournalOp], error: BaseException | None) -> None:
    """Record ``error`` (``None``: committed) on every op of ``ops`` and wake their tasks: one
    callback per trio run, so tasks that appended together wake together (and append their next
    lines together, into one transaction)."""
    runs: dict[Any, list[trio.Event]] = {}
    for op in ops:
        if error is not None:
            op.error = StoreError(f"writing the session journal failed, nothing was stored: {error!r}")
            op.error.__cause__ = error
        if op.done is not None:
            runs.setdefault(op.token, []).append(op.done)
    for token, events in runs.items():

        def wake(events: list[trio.Event] = events) -> None:
            for event in events:
                event.set()

        try:
            token.run_sync_soon(wake)
        except trio.RunFinishedError:
            pass


class Writer:
    """Runs a :class:`Database`: the logs' lines in batches, and jobs, in order (see the module docstring).

    ``threaded``: a dedicated thread does it (``start`` / ``stop``); otherwise :meth:`cycle` runs in
    the caller's thread whenever a job is submitted.  ``commit_interval``: seconds the thread lets
    lines gather before it writes them (a job does not wait; a crash loses at most that much).
    """

    def __init__(self, database: Database, *, threaded: bool, commit_interval: float = DEFAULT_COMMIT_INTERVAL) -> None:
        self.database = database
        self.threaded = threaded
        self.commit_interval = commit_interval
        self._urgent = threading.Event()  # a job or stop: no gathering
        self.logs: dict[Log, None] = {}  # in the order they were opened: one session's logs are written in order
        self.jobs: deque[Job] = deque()
        self.journal: deque[JournalOp] = deque()
        self.idle = False  # the thread waits for work: whoever appends must wake it
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._failures = 0
        self.closed = False

    # -- producers -----------------------------------------------------------------------------------
    def wake(self) -> None:
        self._wake.set()

    def submit(self, job: Job) -> None:
        """Queue ``job`` (inline writer: run it, and a cycle, now)."""
        if self.closed:
            raise RuntimeError("the session store is closed")
        if not self.threaded:
            self.cycle([job])
            return
        self.jobs.append(job)
        self._urgent.set()
        self._wake.set()

    def submit_journal(self, op: JournalOp) -> None:
        """Queue ``op`` behind the journal operations queued before it; it goes into the next cycle,
        which starts at once (inline writer: run it now)."""
        if self.closed:
            raise RuntimeError("the session store is closed")
        self.journal.append(op)
        if not self.threaded:
            self.cycle([])
            return
        self._urgent.set()
        self._wake.set()

    # -- the thread ----------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"acp-trio session store {self.database.path}")
        self._thread.daemon = True
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Write what is queued, run the queued jobs, then end the thread (and close the database)."""
        if self.closed:
            return
        self.closed = True
        if self._thread is not None:
            self._stopping = True
            self._urgent.set()
            self._wake.set()
            self._thread.join(timeout)
        else:
            self.cycle([])
        if self._thread is None or not self._thread.is_alive():
            left = [self.journal.popleft() for _ in range(len(self.journal))]  # by a writer that gave up
            finish_all(left, RuntimeError("the session store was closed before this journal operation was written"))
        self.database.close()

    def _has_work(self) -> bool:
        return bool(self.jobs) or bool(self.journal) or any(entry.pending() for entry in list(self.logs))

    def _run(self) -> None:
        try:  # background work: the agent's own threads (and its client's) go first
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _NICE)
        except (AttributeError, OSError):
            pass
        while True:
            self.idle = False
            while True:
                if self.commit_interval > 0 and not self._stopping:
                    self._urgent.wait(self.commit_interval)  # let lines gather: one transaction for them
                    self._urgent.clear()
                jobs = [self.jobs.popleft() for _ in range(len(self.jobs))]
                if not self.cycle(jobs):
                    break
            if self._stopping and (not self._has_work() or self._failures):
                if self._failures:
                    lost = sum(1 for entry in list(self.logs) if entry.pending())
                    log.error("%s: closing with lines of %d session(s) not written", self.database.path, lost)
                return
            self.idle = True
            if self._has_work():  # something arrived before `idle` was seen
                continue
            self._wake.wait()
            self._wake.clear()

    def cycle(self, jobs: list[Job]) -> bool:
        """One round: the "before" jobs, the batch (one transaction), the "after" jobs.  True when it did something."""
        for job in jobs:
            if not job.after:
                job.run(self.database, None)
        wrote, error = self._write()
        for job in jobs:
            if job.after:
                job.run(self.database, error)
        return bool(jobs) or wrote

    def _write(self) -> tuple[bool, BaseException | None]:
        batch: list[tuple[Log, list[Chunk], list[dict[str, Any]]]] = []
        for entry in list(self.logs):
            if entry.dropped:
                entry.discard()
                self.logs.pop(entry, None)
                continue
            closed = entry.closed  # read first: once closed, nothing more is added after what pending() sees
            if not entry.pending():
                if closed:
                    self.logs.pop(entry, None)
                    try:
                        self.database.touch(entry)
                    except sqlite3.Error:
                        log.exception("%s: updating a session's updated_at failed", self.database.path)
                continue
            if entry.row_id is None:  # its row is being created: next round
                continue
            batch.append((entry, *entry.take()))
        journal = [self.journal.popleft() for _ in range(len(self.journal))]
        if not batch and not journal:
            return False, None
        try:
            self.database.write(batch, journal)
        except Exception as exc:
            for entry, items, meta in batch:  # keep them, in order, ahead of what came since
                entry.put_back(items, meta)
            finish_all(journal, exc)  # not kept: the callers are told nothing was stored
            self._failures += 1
            if self._failures == 1:
                log.exception("%s: writing the session store failed; retrying", self.database.path)
            if self.threaded:
                time.sleep(min(0.05 * self._failures, 1.0))
            return False, exc
        finish_all(journal, None)
        if self._failures:
            log.warning("%s: writing the session store works again", self.database.path)
            self._failures = 0
        return True, None


__all__ = [
    "APPLICATION_ID",
    "DEFAULT_COMMIT_INTERVAL",
    "MAX_JOURNAL_NUMBER",
    "META_UPDATES",
    "SCHEMA_VERSION",
    "Chunk",
    "Database",
    "Job",
    "JournalOp",
    "Lines",
    "Log",
    "Prompt",
    "Reader",
    "StoreError",
    "StoreVersionError",
    "StoredSession",
    "Texts",
    "Writer",
]

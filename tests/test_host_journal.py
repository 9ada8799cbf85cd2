"""The session journal of the session store (acp_trio.session_store.SessionJournal): numbered
``session/update`` lines per session for a session host's replay on reattach (issue 35).

The behaviours of the contract (numbering, bounds, forget, order) run on every implementation: the
SQLite store's journal (its writer thread), the in-memory store's, and the session host's own
``acp_trio.host.MemoryJournal``; the stores' (deleting a session, read pages, cancellation) on both
stores; the file's own (reopening, another process, SIGKILL, migration, failing writes, group
commit) on the file.
Every wait on the writer thread is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from acp_trio import _store_db, session_store
from acp_trio._store_db import APPLICATION_ID, JOURNAL_SHIFT

WAIT = 10  # seconds any one test waits for the writer thread at most


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[session_store.SessionStore]:
    made: session_store.SessionStore = (
        session_store.SqliteSessionStore(str(tmp_path / "journal.db"))
        if request.param == "sqlite"
        else session_store.MemorySessionStore()
    )
    try:
        yield made
    finally:
        made.close()


JournalFactory = Callable[..., session_store.Journal]


@pytest.fixture(params=["sqlite", "memory", "host"])
def make_journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JournalFactory]:
    """``make_journal(max_updates=..., max_bytes=...)``: a journal of each implementation of the
    contract: the SQLite store's, the in-memory store's, and the session host's own ``MemoryJournal``
    (the behaviours of the contract are the same whichever the host is given)."""
    if request.param == "host":
        host = pytest.importorskip("acp_trio.host")
        yield host.MemoryJournal
        return
    made: session_store.SessionStore = (
        session_store.SqliteSessionStore(str(tmp_path / "journal.db"))
        if request.param == "sqlite"
        else session_store.MemorySessionStore()
    )
    try:
        yield made.journal
    finally:
        made.close()


def line(session_id: str, i: int) -> bytes:
    """A ``session/update`` wire line (no newline) of about 150 bytes."""
    return (
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"' + session_id.encode() + b'",'
        b'"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"chunk %d "}}}}' % i
    )


async def test_numbers_start_at_1_and_are_consecutive_across_calls_and_batches(
    make_journal: JournalFactory,
) -> None:
    journal: session_store.Journal = make_journal()  # the protocol the host codes against
    with trio.fail_after(WAIT):
        assert (await journal.first("s1"), await journal.last("s1")) == (0, 0)
        assert await journal.append("s1", [line("s1", 0)]) == 1
        assert await journal.append("s1", [line("s1", i) for i in range(1, 5)]) == 5
        assert await journal.append("s1", []) == 5  # nothing added: the current last
        assert await journal.append("s2", [line("s2", 0), line("s2", 1)]) == 2  # per session
        assert await journal.append("s1", [line("s1", 5)]) == 6
        assert (await journal.first("s1"), await journal.last("s1")) == (1, 6)
        assert await journal.read("s1", 0) == [(i + 1, line("s1", i)) for i in range(6)]
        assert await journal.read("s1", 4) == [(5, line("s1", 4)), (6, line("s1", 5))]
        assert await journal.read("s1", 6) == [] and await journal.read("s1", 99) == []
        assert await journal.read("s2", 0) == [(1, line("s2", 0)), (2, line("s2", 1))]
        assert await journal.read("unknown", 0) == []


async def test_lines_come_back_byte_for_byte_and_read_pages_with_a_limit(store: session_store.SessionStore) -> None:
    journal = store.journal()
    odd: list[Any] = [b"", b"\x00\xff not utf-8", bytearray(b"from a bytearray"), b"x" * 100_000]
    with trio.fail_after(WAIT):
        assert await journal.append("s", odd) == 4
        assert [data for _, data in await journal.read("s", 0)] == [bytes(x) for x in odd]
        assert await journal.append("s", [line("s", i) for i in range(10)]) == 14
        pages: list[list[int]] = []
        after = 0
        while page := await journal.read("s", after, limit=4):
            pages.append([n for n, _ in page])
            after = page[-1][0]
        assert pages == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14]]
        with pytest.raises(TypeError, match="a journal line is bytes"):
            await journal.append("s", ["text"])  # type: ignore[list-item]
        with pytest.raises(ValueError, match="limit"):
            await journal.read("s", 0, limit=0)
        assert await journal.last("s") == 14  # the refused calls stored nothing
    with pytest.raises(ValueError, match="journal bounds"):
        store.journal(max_updates=0)


async def test_the_count_bound_drops_the_oldest_lines_and_first_advances(make_journal: JournalFactory) -> None:
    journal = make_journal(max_updates=5)
    with trio.fail_after(WAIT):
        assert await journal.append("s", [line("s", i) for i in range(3)]) == 3
        assert await journal.first("s") == 1
        assert await journal.append("s", [line("s", i) for i in range(3, 7)]) == 7
        assert (await journal.first("s"), await journal.last("s")) == (3, 7)
        expected = [(i + 1, line("s", i)) for i in range(2, 7)]
        assert await journal.read("s", 2) == expected  # after first - 1: everything held
        assert await journal.read("s", 0) == expected  # from before first: what is held, from first
        assert await journal.read("s", 4) == expected[2:]
        assert await journal.append("s", [line("s", i) for i in range(7, 20)]) == 20  # a batch over the bound
        assert (await journal.first("s"), await journal.last("s")) == (16, 20)
        assert [n for n, _ in await journal.read("s", 0)] == [16, 17, 18, 19, 20]
        assert await journal.append("other", [b"o"]) == 1 and await journal.first("other") == 1  # per session


async def test_reads_page_with_a_limit_from_the_oldest_held(make_journal: JournalFactory) -> None:
    """The host reads a replay in pages (``limit``); after the bound dropped lines, a page from
    before ``first`` starts at ``first``."""
    journal = make_journal(max_updates=8)
    with trio.fail_after(WAIT):
        assert await journal.append("s", [line("s", i) for i in range(10)]) == 10  # 3..10 held
        assert [n for n, _ in await journal.read("s", 0, limit=3)] == [3, 4, 5]
        assert [n for n, _ in await journal.read("s", 5, limit=3)] == [6, 7, 8]
        assert await journal.read("s", 8, limit=5) == [(9, line("s", 8)), (10, line("s", 9))]
        assert await journal.read("s", 10, limit=1) == []
        assert [n for n, _ in await journal.read("s", 4, limit=None)] == list(range(5, 11))
        with pytest.raises(ValueError):
            await journal.read("s", 0, limit=0)


async def test_the_byte_bound_drops_the_oldest_lines_and_keeps_the_newest_whatever_its_size(
    make_journal: JournalFactory,
) -> None:
    journal = make_journal(max_bytes=35)
    with trio.fail_after(WAIT):
        assert await journal.append("s", [b"%010d" % i for i in range(3)]) == 3  # 30 bytes: all held
        assert await journal.first("s") == 1
        assert await journal.append("s", [b"%010d" % 3]) == 4  # 40 bytes: the first one goes
        assert (await journal.first("s"), await journal.last("s")) == (2, 4)
        assert await journal.read("s", 0) == [(n, b"%010d" % (n - 1)) for n in (2, 3, 4)]
        assert await journal.append("s", [b"y" * 34, b"z" * 20]) == 6  # 20 + 34 > 35: only the newest fits
        assert (await journal.first("s"), await journal.last("s")) == (6, 6)
        assert await journal.append("s", [b"w" * 50]) == 7  # longer than the bound alone: kept, alone
        assert await journal.read("s", 0) == [(7, b"w" * 50)]
        assert await journal.append("s", [b"v"]) == 8  # and numbering goes on
        assert await journal.read("s", 5) == [(8, b"v")] and await journal.first("s") == 8
    both = make_journal(max_updates=3, max_bytes=25)
    with trio.fail_after(WAIT):
        assert await both.append("t", [b"%05d" % i for i in range(4)]) == 4  # the count bound is the one hit
        assert await both.read("t", 0) == [(2, b"00001"), (3, b"00002"), (4, b"00003")]


async def test_forget_deletes_the_lines_and_numbering_starts_again(make_journal: JournalFactory) -> None:
    journal = make_journal()
    with trio.fail_after(WAIT):
        await journal.append("s", [line("s", i) for i in range(4)])
        await journal.append("keep", [line("keep", 0)])
        await journal.forget("s")
        assert (await journal.first("s"), await journal.last("s"), await journal.read("s", 0)) == (0, 0, [])
        assert await journal.read("keep", 0) == [(1, line("keep", 0))]
        assert await journal.append("s", [b"again"]) == 1
        await journal.forget("never journaled")  # nothing to forget: fine


async def test_deleting_a_session_forgets_its_journal(store: session_store.SessionStore) -> None:
    journal = store.journal()
    database = store._writer.database
    with trio.fail_after(WAIT):
        await store._call(lambda db: db.create("s", "/work", "[]", "[]"), False)
        await journal.append("s", [line("s", i) for i in range(3)])
        await journal.append("no record", [b"x"])
        await journal.append("keep", [b"k"])
        assert await store.delete("s") is True
        assert await store.delete("no record") is False  # no stored session, but a journal: forgotten
        assert (await journal.last("s"), await journal.last("no record"), await journal.last("keep")) == (0, 0, 1)
        rows = await store._call(lambda db: db.db.execute("SELECT count(*) FROM journal_lines").fetchone()[0], True)
        assert rows == 1 and database.path == store.path


async def test_concurrent_appends_to_two_sessions_keep_each_sessions_order(make_journal: JournalFactory) -> None:
    journal = make_journal()
    sent: dict[str, list[bytes]] = {"a": [], "b": [], "c": []}
    numbers: dict[str, list[int]] = {"a": [], "b": [], "c": []}

    async def stream(session_id: str, batch: int) -> None:
        for i in range(0, 120, batch):
            lines = [line(session_id, j) for j in range(i, i + batch)]
            sent[session_id].extend(lines)
            numbers[session_id].append(await journal.append(session_id, lines))

    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream, "a", 1)
            nursery.start_soon(stream, "b", 3)
            nursery.start_soon(stream, "c", 4)  # a third session on the side
        assert numbers["a"] == list(range(1, 121)) and numbers["b"] == list(range(3, 121, 3))
        assert await journal.read("a", 0) == list(enumerate(sent["a"], 1))
        assert await journal.read("b", 0) == list(enumerate(sent["b"], 1))


async def test_appends_are_numbered_in_the_order_they_are_called(make_journal: JournalFactory) -> None:
    journal = make_journal()
    results: dict[int, int] = {}

    async def append(i: int) -> None:
        results[i] = await journal.append("s", [b"%d" % i])

    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(append, i)
        assert sorted(results.values()) == list(range(1, 51))
        assert [(n, int(data)) for n, data in await journal.read("s", 0)] == [
            (n, results_by(results, n)) for n in range(1, 51)
        ]


def results_by(results: dict[int, int], number: int) -> int:
    return next(i for i, n in results.items() if n == number)


async def test_appends_made_while_the_writer_is_busy_share_one_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = session_store.SqliteSessionStore(str(tmp_path / "group.db"))
    transactions: list[int] = []  # journal ops per transaction
    real = _store_db.Database.write

    def write(self: Any, batch: Any, journal: Any = None) -> None:
        transactions.append(len(journal or ()))
        real(self, batch, journal)

    monkeypatch.setattr(_store_db.Database, "write", write)
    entered, gate = threading.Event(), threading.Event()

    def busy(db: Any) -> None:  # holds the writer thread, as a long commit would
        entered.set()
        gate.wait(WAIT)

    try:
        journal = store.journal()
        numbers: dict[int, int] = {}

        async def append(i: int) -> None:
            numbers[i] = await journal.append(f"s{i % 2}", [b"%d" % i])

        with trio.fail_after(WAIT):
            store._submit(busy)
            await trio.to_thread.run_sync(entered.wait, WAIT)
            async with trio.open_nursery() as nursery:
                for i in range(40):
                    nursery.start_soon(append, i)
                await trio.testing.wait_all_tasks_blocked()  # every append queued, waiting for its commit
                gate.set()
            assert transactions == [40]
            for session_id in ("s0", "s1"):
                held = await journal.read(session_id, 0)
                assert [n for n, _ in held] == list(range(1, 21))
                assert all(numbers[int(data)] == n for n, data in held)  # each got the number it was stored under
    finally:
        gate.set()
        store.close()


async def test_reads_of_a_file_store_do_not_wait_for_the_writer(tmp_path: Path) -> None:
    """A replay's reads go on while the writer thread is busy (here held in a job: a long commit or
    another session's work), on a connection of their own; they see what was committed."""
    store = session_store.SqliteSessionStore(str(tmp_path / "reader.db"))
    entered, gate = threading.Event(), threading.Event()

    def busy(db: Any) -> None:
        entered.set()
        gate.wait(WAIT)

    try:
        journal = store.journal()
        with trio.fail_after(WAIT):
            await journal.append("s", [b"one", b"two"])
            store._submit(busy)
            await trio.to_thread.run_sync(entered.wait, WAIT)
        with trio.fail_after(WAIT / 2):  # well before the writer is let go
            assert await journal.read("s", 0) == [(1, b"one"), (2, b"two")]
            assert (await journal.first("s"), await journal.last("s")) == (1, 2)
        assert not gate.is_set()
    finally:
        gate.set()
        store.close()
    with pytest.raises(RuntimeError, match="closed"):
        await journal.read("s", 0)


async def test_an_append_cancelled_while_it_waits_is_still_stored(store: session_store.SessionStore) -> None:
    journal = store.journal()
    with trio.CancelScope() as scope:
        scope.cancel()
        await journal.append("s", [b"one", b"two"])
    assert scope.cancelled_caught
    with trio.fail_after(WAIT):
        await store.flush()  # returns once what was queued before it is committed
        assert await journal.read("s", 0) == [(1, b"one"), (2, b"two")]
        assert await journal.append("s", [b"three"]) == 3


@pytest.mark.one_interpreter  # interpreters started: SQLite and the store, not the Python version
async def test_numbers_survive_reopening_the_file_and_another_process_continues_them(tmp_path: Path) -> None:
    path = str(tmp_path / "j.db")
    with session_store.SqliteSessionStore(path) as first_store, trio.fail_after(WAIT):
        journal = first_store.journal(max_updates=4)
        await journal.append("s", [line("s", i) for i in range(6)])
    with session_store.SqliteSessionStore(path) as again, trio.fail_after(WAIT):
        journal = again.journal(max_updates=4)
        assert (await journal.first("s"), await journal.last("s")) == (3, 6)
        assert await journal.append("s", [line("s", 6)]) == 7
    program = (
        "import sys, trio\n"
        "from acp_trio import session_store\n"
        "async def main():\n"
        "    with session_store.SqliteSessionStore(sys.argv[1]) as store:\n"
        "        print(await store.journal(max_updates=4).append('s', [b'from the other process']))\n"
        "trio.run(main)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, path], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "8"
    with session_store.SqliteSessionStore(path) as last_store, trio.fail_after(WAIT):
        held = await last_store.journal().read("s", 0)
        assert [n for n, _ in held] == [5, 6, 7, 8] and held[-1][1] == b"from the other process"


APPENDER = """
import sys, trio
from acp_trio import session_store

async def main():
    with session_store.SqliteSessionStore(sys.argv[1]) as store:
        journal = store.journal()
        number, size = 0, 1
        while True:
            lines = [b"line %d" % (number + k + 1) for k in range(size)]
            number = await journal.append("s", lines)
            sys.stdout.write(f"{number}\\n")
            sys.stdout.flush()
            size = size % 7 + 1

trio.run(main)
"""


@pytest.mark.one_interpreter
@pytest.mark.skipif(os.name != "posix", reason="SIGKILL: POSIX only")
async def test_every_number_an_append_returned_survives_a_sigkill(tmp_path: Path) -> None:
    """Acknowledged means stored: a process appending in batches of 1 to 7 lines, printing each number
    ``append`` returned, is SIGKILLed mid-stream; the file holds every line up to the last number printed."""
    path = str(tmp_path / "killed.db")
    process = await trio.lowlevel.open_process([sys.executable, "-c", APPENDER, path], stdout=subprocess.PIPE)
    assert process.stdout is not None
    printed = 0
    try:
        with trio.fail_after(60):
            received = b""
            while printed < 500:
                chunk = await process.stdout.receive_some()
                assert chunk, "the appending process ended on its own"
                received += chunk
                *done, received = received.split(b"\n")
                if done:
                    printed = int(done[-1])
    finally:
        process.kill()
        with trio.fail_after(WAIT):
            await process.wait()
    assert process.returncode == -signal.SIGKILL
    with session_store.SqliteSessionStore(path) as store, trio.fail_after(WAIT):
        assert await store.integrity_check() == "ok"
        journal = store.journal()
        last = await journal.last("s")
        assert last >= printed
        held = await journal.read("s", 0)
        assert held == [(n, b"line %d" % n) for n in range(1, last + 1)]


RACER = """
import sys, trio
from acp_trio import session_store

async def main():
    numbers = []
    with session_store.SqliteSessionStore(sys.argv[1]) as store:
        journal = store.journal()
        for i in range(150):
            numbers.append(await journal.append("s", [b"%s %d" % (sys.argv[2].encode(), i)]))
    print(" ".join(map(str, numbers)))

trio.run(main)
"""


@pytest.mark.one_interpreter  # interpreters started: SQLite and the store, not the Python version
async def test_two_processes_appending_to_one_journal_get_consecutive_numbers(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    with session_store.SqliteSessionStore(path):  # made once: both processes open an existing file
        pass
    got: dict[str, list[int]] = {}

    async def race(name: str) -> None:
        done = await trio.run_process([sys.executable, "-c", RACER, path, name], capture_stdout=True)
        got[name] = [int(n) for n in done.stdout.split()]

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(race, "a")
            nursery.start_soon(race, "b")
    assert sorted(got["a"] + got["b"]) == list(range(1, 301))  # no number given twice, none skipped
    with session_store.SqliteSessionStore(path) as store, trio.fail_after(WAIT):
        held = dict(await store.journal().read("s", 0))
    for name, numbers in got.items():
        assert numbers == sorted(numbers)
        assert [held[n] for n in numbers] == [b"%s %d" % (name.encode(), i) for i in range(150)]


V3_SCHEMA = """
CREATE TABLE sessions (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL UNIQUE, cwd TEXT NOT NULL,
    additional_directories TEXT NOT NULL DEFAULT '[]', mcp_servers TEXT NOT NULL DEFAULT '[]', title TEXT,
    title_source INTEGER NOT NULL DEFAULT 0, meta TEXT, modes TEXT, current_mode_id TEXT, config_options TEXT,
    created_us INTEGER NOT NULL, updated_us INTEGER NOT NULL, prompt_count INTEGER NOT NULL DEFAULT 0,
    protocol_version INTEGER NOT NULL DEFAULT 1);
CREATE INDEX sessions_recent ON sessions (updated_us DESC, id DESC);
CREATE INDEX sessions_cwd_recent ON sessions (cwd, updated_us DESC, id DESC);
CREATE TABLE events (id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, data BLOB NOT NULL);
"""


async def test_a_version_3_file_is_migrated_in_place_and_journals(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    db = sqlite3.connect(path)
    db.executescript(V3_SCHEMA)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 3")
    db.execute(
        "INSERT INTO sessions (id, session_id, cwd, created_us, updated_us, protocol_version) "
        "VALUES (1, 's3', '/p', 1, 2, 2)"
    )
    db.execute("INSERT INTO events (id, kind, data) VALUES (?, 3, ?)", (1 << 32, b'"hello"\n'))
    db.commit()
    db.close()
    with session_store.SqliteSessionStore(str(path)) as store, trio.fail_after(WAIT):
        stored = await store.conversation("s3")
        assert stored is not None and stored.session.protocol_version == 2
        assert [m["params"]["update"]["content"]["text"] for _, m in stored.messages()] == ["hello"]
        journal = store.journal()
        assert await journal.last("s3") == 0
        assert await journal.append("s3", [line("s3", 0), line("s3", 1)]) == 2
        assert await journal.read("s3", 1) == [(2, line("s3", 1))]
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA user_version").fetchone()[0] == session_store.SCHEMA_VERSION == 4
    tables = {r[0] for r in check.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"sessions", "events", "journals", "journal_lines"}
    check.close()


async def test_a_store_that_cannot_write_reports_it_and_stores_nothing_of_that_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = session_store.SqliteSessionStore(str(tmp_path / "f.db"))
    real = _store_db.Database._journal
    failing = [False]

    def journal_ops(self: Any, ops: Any) -> None:
        if failing[0]:
            raise sqlite3.OperationalError("disk I/O error (test)")
        real(self, ops)

    monkeypatch.setattr(_store_db.Database, "_journal", journal_ops)
    try:
        journal = store.journal()
        with trio.fail_after(WAIT):
            assert await journal.append("s", [b"one"]) == 1
            failing[0] = True
            with pytest.raises(session_store.StoreError, match=r"nothing was stored.*disk I/O error"):
                await journal.append("s", [b"lost", b"lost too"])
            failing[0] = False
            assert await journal.last("s") == 1  # nothing of the failed call
            assert await journal.append("s", [b"two"]) == 2  # no hole in the numbers
            assert await journal.read("s", 0) == [(1, b"one"), (2, b"two")]
        assert "writing the session store failed" in caplog.text
    finally:
        store.close()
    with pytest.raises(RuntimeError, match="closed"):
        await journal.append("s", [b"after close"])


async def test_a_new_journal_reuses_a_free_id_once_ids_reach_their_limit(tmp_path: Path) -> None:
    path = str(tmp_path / "ids.db")
    top = (1 << (63 - JOURNAL_SHIFT)) - 1
    with session_store.SqliteSessionStore(path) as store, trio.fail_after(WAIT):
        journal = store.journal()
        await journal.append("low", [b"l"])  # id 1
        await store._call(
            lambda db: db.db.execute("INSERT INTO journals (id, session_id) VALUES (?, 'top')", (top,)),
            False,
        )
        assert await journal.append("next", [b"n1", b"n2"]) == 2
        ids = await store._call(lambda db: dict(db.db.execute("SELECT session_id, id FROM journals")), True)
        assert ids == {"low": 1, "top": top, "next": 2}
        assert await journal.read("next", 0) == [(1, b"n1"), (2, b"n2")] and await journal.read("low", 0) == [(1, b"l")]

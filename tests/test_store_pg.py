"""The PostgreSQL session store (acp_trio.session_store.PostgresSessionStore) and its ownership leases
(issue 36 step 1), on a real PostgreSQL server (tests/_postgres.py: a throwaway cluster per test
session, a schema per test).

The contract is the SQLite store's, so its tests run here again, unchanged, on PostgreSQL: the
functions of ``test_session_store.py`` (recording, replay byte for byte, list with cursors, resume,
close, delete, forks, "acknowledged means stored") and of ``test_host_journal.py`` (numbering,
bounds, forget, order, cancellation) are imported into this module, and an autouse fixture makes
``session_store.SqliteSessionStore(path)`` and ``MemorySessionStore()`` give PostgreSQL stores (a
schema per path: reopening a "file" reopens its schema) and ``committed(path, id)`` read the
PostgreSQL tables; ``store`` and ``make_journal`` are PostgreSQL stores here.  Left out: what is
SQLite's own (file migrations, other processes on one file, SIGKILL of the writer's process,
failing disk writes) and what needs trio's autojump clock (the store commits in a thread).

Then what only PostgreSQL has: the schema's version checks, two stores (two writer connections:
as two hosts) appending to one journal, the pool's reads beside the writer, and the leases: claim,
renew, release, expiry by the server's clock, two claimants racing over many sessions (exactly one
wins each), and fenced appends (a host that lost its lease cannot append).
Every wait on a thread or the server is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

import psycopg
import test_host_journal as journal_tests
import test_session_store as store_tests
from _postgres import PostgresServer, pg_conninfo, postgres_server  # noqa: F401
from test_host_journal import (  # noqa: F401  (collected here again, on PostgreSQL)
    test_an_append_cancelled_while_it_waits_is_still_stored,
    test_appends_are_numbered_in_the_order_they_are_called,
    test_concurrent_appends_to_two_sessions_keep_each_sessions_order,
    test_forget_deletes_the_lines_and_numbering_starts_again,
    test_lines_come_back_byte_for_byte_and_read_pages_with_a_limit,
    test_numbers_start_at_1_and_are_consecutive_across_calls_and_batches,
    test_reads_page_with_a_limit_from_the_oldest_held,
    test_the_byte_bound_drops_the_oldest_lines_and_keeps_the_newest_whatever_its_size,
    test_the_count_bound_drops_the_oldest_lines_and_first_advances,
)
from test_session_store import (  # noqa: F401  (collected here again, on PostgreSQL)
    test_a_forked_session_starts_with_a_copy_of_its_parents_history,
    test_a_new_session_under_a_stored_id_replaces_the_old_record,
    test_a_prompt_inside_a_json_rpc_batch_is_recorded,
    test_an_agent_can_define_its_own_handlers_and_build_on_the_recorders,
    test_an_agents_own_initialize_response_gets_the_capabilities_added,
    test_an_update_whose_write_failed_is_not_stored,
    test_capabilities_are_advertised_only_when_a_store_is_enabled,
    test_close_cancels_the_running_turn,
    test_closing_stops_recording_and_keeps_the_record,
    test_concurrent_sessions_writing_at_once_each_replay_their_own_conversation,
    test_delete_removes_the_record_and_unknown_ids_answer_resource_not_found,
    test_enable_after_the_connection_was_built,
    test_enable_refuses_a_second_store_a_closed_store_and_a_client_connection,
    test_lines_rebuilt_from_update_objects_are_the_bytes_the_runtime_sends,
    test_list_reports_additional_directories_and_the_meta_of_session_info_updates,
    test_load_replays_the_conversation_in_order_and_rebuilds_the_live_transcript,
    test_mcp_secrets_are_not_written_unless_asked,
    test_prompt_lines_are_kept_exactly_as_received_and_updates_as_sent,
    test_resume_does_not_replay_and_goes_on_recording,
    test_session_new_and_prompt_answers_are_sent_only_once_their_records_are_committed,
    test_set_mode_and_config_option_requests_update_the_load_response,
    test_titles_come_from_the_first_prompt_then_from_session_info_updates,
    test_two_prompts_with_no_output_between_them_replay_as_two_user_messages,
    test_v2_sessions_are_recorded_and_replay_through_resume_with_replay_from_start,
)

from acp_trio import _store_pg, session_store
from acp_trio._store_db import StoreVersionError
from acp_trio._store_pg import Lease, LeaseLostError, PgDatabase, PostgresSessionStore

# a server per xdist worker, a store per test: heavy, and nothing here depends on the interpreter
pytestmark = pytest.mark.one_interpreter

WAIT = 20  # seconds any one step waits for the server or the writer thread at most


class Stores:
    """The PostgreSQL stores a test made (closed at its end), and a schema per SQLite "path"."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.made: list[PostgresSessionStore] = []
        self.schemas: dict[str, str] = {}

    def conninfo_for(self, path: Any) -> str:
        key = str(path)
        if key not in self.schemas:
            name = "p" + hashlib.sha1(key.encode()).hexdigest()[:16]
            self.schemas[key] = self.server.conninfo(name)
        return self.schemas[key]

    def open(self, conninfo: str, **options: Any) -> PostgresSessionStore:
        store = PostgresSessionStore(conninfo, **options)
        self.made.append(store)
        return store

    def like_sqlite(self, path: Any, **options: Any) -> PostgresSessionStore:
        return self.open(self.conninfo_for(path), **options)

    def like_memory(self, **options: Any) -> PostgresSessionStore:
        return self.open(self.server.conninfo(), **options)

    def committed(self, path: Path, session_id: str) -> tuple[int, int] | None:
        """``test_session_store.committed`` on PostgreSQL: ``(prompts, updates)`` another connection sees."""
        with psycopg.connect(self.conninfo_for(path)) as db:
            row = db.execute("SELECT id FROM acp_sessions WHERE session_id = %s", (session_id,)).fetchone()
            if row is None:
                return None
            counts = [0, 0]
            for kind, data in db.execute("SELECT kind, data FROM acp_events WHERE session = %s", (row[0],)):
                counts[kind != 1] += bytes(data).count(b"\n")
            return counts[0], counts[1]

    def close(self) -> None:
        for store in self.made:
            store.close()


@pytest.fixture(autouse=True)
def stores(postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stores]:  # noqa: F811
    made = Stores(postgres_server)
    monkeypatch.setattr(session_store, "SqliteSessionStore", made.like_sqlite)
    monkeypatch.setattr(session_store, "MemorySessionStore", made.like_memory)
    monkeypatch.setattr(store_tests, "committed", made.committed)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def store(stores: Stores) -> session_store.SessionStore:
    """``test_host_journal``'s store, on PostgreSQL."""
    return stores.like_memory()


@pytest.fixture
def make_journal(stores: Stores) -> journal_tests.JournalFactory:
    """``test_host_journal``'s journal factory, on PostgreSQL."""
    return stores.like_memory().journal


def admin(conninfo: str) -> psycopg.Connection[Any]:
    return psycopg.connect(conninfo, autocommit=True)


# -- the store's own -------------------------------------------------------------------------------


async def test_a_deleted_session_forgets_its_journal_and_numbers_survive_reopening(stores: Stores) -> None:
    conninfo = stores.conninfo_for("reopen")
    with trio.fail_after(WAIT):
        with stores.open(conninfo) as first:
            journal = first.journal(max_updates=4)
            await first._call(lambda db: db.create("s", "/work", "[]", "[]"), False)
            assert await journal.append("s", [b"%d" % i for i in range(6)]) == 6
            assert await journal.append("keep", [b"k"]) == 1
        with stores.open(conninfo) as again:
            journal = again.journal(max_updates=4)
            assert (await journal.first("s"), await journal.last("s")) == (3, 6)
            assert await journal.append("s", [b"seven"]) == 7
            assert await again.delete("s") is True
            assert (await journal.last("s"), await journal.last("keep")) == (0, 1)
    for closed in (journal.read("keep", 0), journal.append("keep", [b"x"]), again.claim("keep", "host", 5)):
        with pytest.raises(RuntimeError, match="closed"):
            await closed
    with admin(conninfo) as db:
        assert db.execute("SELECT count(*) FROM acp_journal_lines").fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM acp_sessions").fetchone() == (0,)


async def test_two_stores_appending_to_one_journal_get_consecutive_numbers(stores: Stores) -> None:
    """Two writer connections (as two host processes) append to one session at once: the journal's
    row is locked per transaction, so the numbers are consecutive and each line is where it was told."""
    conninfo = stores.conninfo_for("two")
    one, two = stores.open(conninfo), stores.open(conninfo)
    told: dict[bytes, int] = {}

    async def append(journal: session_store.SessionJournal, name: bytes) -> None:
        for i in range(40):
            line = b"%s-%d" % (name, i)
            told[line] = await journal.append("shared", [line])

    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(append, one.journal(), b"one")
            nursery.start_soon(append, two.journal(), b"two")
        held = await one.journal().read("shared", 0)
    assert [n for n, _ in held] == list(range(1, 81))
    assert all(told[line] == n for n, line in held)


async def test_appends_made_while_the_writer_is_busy_share_one_transaction(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    transactions: list[int] = []
    real = PgDatabase.write

    def write(self: Any, batch: Any, journal: Any = None) -> None:
        transactions.append(len(journal or ()))
        real(self, batch, journal)

    monkeypatch.setattr(PgDatabase, "write", write)
    store = stores.like_memory()
    entered, gate = threading.Event(), threading.Event()

    def busy(db: Any) -> None:  # holds the writer thread, as a long commit would
        entered.set()
        gate.wait(WAIT)

    journal = store.journal()
    numbers: dict[int, int] = {}

    async def append(i: int) -> None:
        numbers[i] = await journal.append(f"s{i % 2}", [b"%d" % i])

    try:
        with trio.fail_after(WAIT):
            store._submit(busy)
            await trio.to_thread.run_sync(entered.wait, WAIT)
            async with trio.open_nursery() as nursery:
                for i in range(40):
                    nursery.start_soon(append, i)
                await trio.testing.wait_all_tasks_blocked()
                # the reads go to the pool: they do not wait for the writer
                assert await journal.read("s0", 0) == []
                gate.set()
            assert transactions == [40]
            for session_id in ("s0", "s1"):
                held = await journal.read(session_id, 0)
                assert [n for n, _ in held] == list(range(1, 21))
                assert all(numbers[int(data)] == n for n, data in held)
    finally:
        gate.set()


def test_a_newer_or_foreign_schema_is_refused_and_left_as_it_was(stores: Stores) -> None:
    newer = stores.conninfo_for("newer")
    PostgresSessionStore(newer).close()
    with admin(newer) as db:
        db.execute("UPDATE acp_store SET version = version + 1")
    with pytest.raises(StoreVersionError, match="newer acp-trio") as info:
        PostgresSessionStore(newer)
    assert (info.value.found, info.value.supported) == (_store_pg.PG_SCHEMA_VERSION + 1, _store_pg.PG_SCHEMA_VERSION)
    assert "password" not in info.value.path

    foreign = stores.conninfo_for("foreign")
    with admin(foreign) as db:
        db.execute("CREATE TABLE acp_sessions (x integer)")
    with pytest.raises(StoreVersionError, match="no acp-trio session store version"):
        PostgresSessionStore(foreign)
    with admin(foreign) as db:
        tables = db.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()
    assert tables == [("acp_sessions",)]

    with pytest.raises(StoreVersionError, match="cannot open the session store"):
        PostgresSessionStore(f"host={stores.server.socket_dir} port=1 user=postgres", connect_timeout=2)
    with pytest.raises(StoreVersionError, match="cannot create or check"):  # a search_path naming no schema
        PostgresSessionStore(f"{stores.server.admin} options='-csearch_path=no_such_schema'")


async def test_a_lost_connection_fails_that_append_and_the_writer_reconnects_for_the_next(stores: Stores) -> None:
    """The server ends the writer's connection (a restart, a network cut): the append in flight is
    told nothing was stored (StoreError), the next one reconnects and gets the numbers it would have
    had; a recorded session's lines are kept and written once the connection is back."""
    store = stores.like_memory()
    journal = store.journal()
    database: Any = store._writer.database
    with trio.fail_after(WAIT):
        assert await journal.append("s", [b"one"]) == 1
        with admin(stores.server.admin) as db:
            db.execute("SELECT pg_terminate_backend(%s)", (database.db.info.backend_pid,))
        with pytest.raises(session_store.StoreError):
            await journal.append("s", [b"lost"])
        assert await journal.append("s", [b"two"]) == 2
        assert await journal.read("s", 0) == [(1, b"one"), (2, b"two")]


async def test_an_older_schema_is_migrated_in_place_when_opened(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migrations run in the opening transaction, one version at a time (version 2 does not exist yet:
    a stand-in migration from 1 to 2 checks the mechanism)."""
    conninfo = stores.conninfo_for("migrate")
    with stores.open(conninfo) as first, trio.fail_after(WAIT):
        assert await first.journal().append("s", [b"kept"]) == 1
    steps: list[int] = []
    monkeypatch.setattr(_store_pg, "PG_SCHEMA_VERSION", 2)
    monkeypatch.setitem(_store_pg._MIGRATIONS, 1, lambda db: steps.append(1))
    with stores.open(conninfo) as again, trio.fail_after(WAIT):
        assert await again.journal().read("s", 0) == [(1, b"kept")]
        assert await again.integrity_check() == "ok"
    assert steps == [1]
    with admin(conninfo) as db:
        assert db.execute("SELECT version FROM acp_store").fetchone() == (2,)


async def test_list_pages_with_cursors_and_a_cwd_filter(stores: Stores) -> None:
    """``session/list``'s paging on PostgreSQL's row comparison (the SQLite test's 2,500 sessions made
    through the protocol take 15 s here; the records are made directly, with distinct and equal times)."""
    store = stores.like_memory(page_size=7)
    with trio.fail_after(WAIT):
        for i in range(120):
            await store._call(lambda db, i=i: db.create(f"s{i:03}", f"/proj{i % 3}", "[]", "[]"), False)
        with admin(store._writer.database.conninfo) as db:  # type: ignore[attr-defined]
            db.execute("UPDATE acp_sessions SET updated_us = 1000 + id / 2")  # pairs share a time: ties by id

        async def everything(**filters: Any) -> list[str]:
            seen: list[str] = []
            cursor = None
            while True:
                page, cursor = await store.list_sessions(cursor=cursor, **filters)
                assert len(page) <= 7
                seen.extend(s.session_id for s in page)
                if cursor is None:
                    return seen

        assert await everything() == [f"s{i:03}" for i in reversed(range(120))]
        assert await everything(cwd="/proj1") == [f"s{i:03}" for i in reversed(range(1, 120, 3))]
        assert await everything(cwd="/nowhere") == []
        with pytest.raises(ValueError, match="invalid cursor"):
            await store.list_sessions(cursor="not-a-cursor")


# -- leases ---------------------------------------------------------------------------------------


def expire(conninfo: str, session_id: str) -> None:
    """Make a lease expire now (as the server's clock passing its expiry would)."""
    with admin(conninfo) as db:
        db.execute(
            "UPDATE acp_session_leases SET expires_at = clock_timestamp() - interval '1 second' WHERE session_id = %s",
            (session_id,),
        )


async def test_a_claim_holds_until_released_or_expired_and_each_claim_has_a_larger_epoch(stores: Stores) -> None:
    conninfo = stores.conninfo_for("leases")
    store = stores.open(conninfo)
    with trio.fail_after(WAIT):
        first = await store.claim("s", "host-a", 30)
        assert isinstance(first, Lease) and (first.owner, first.held) == ("host-a", True)
        assert await store.claim("s", "host-b", 30) is None  # held
        assert await store.claim("s", "host-a", 30) is None  # held, even by its owner: renew keeps it
        owner = await store.owner("s")
        assert owner is not None and (owner.owner, owner.epoch) == ("host-a", first.epoch)
        await store.claim("other", "host-a", 30)
        renewed = await store.renew("host-a", 60)
        assert sorted(lease.session_id for lease in renewed) == ["other", "s"]
        assert all(lease.expires_at > first.expires_at for lease in renewed)
        assert await store.renew("host-b", 60) == []

        expire(conninfo, "s")
        owner = await store.owner("s")
        assert owner is not None and not owner.held
        assert [lease.session_id for lease in await store.expired()] == ["s"]
        assert [lease.session_id for lease in await store.renew("host-a", 60)] == ["other"]  # an expired one is lost
        second = await store.claim("s", "host-b", 30)
        assert second is not None and second.owner == "host-b" and second.epoch > first.epoch

        assert await store.release("s", first.epoch) is False  # not that lease any more
        assert await store.release("s", second.epoch) is True
        assert await store.owner("s") is None
        third = await store.claim("s", "host-a", 30)
        assert third is not None and third.epoch > second.epoch
        with pytest.raises(ValueError, match="positive"):
            await store.claim("s", "host-a", 0)


async def test_a_sessions_principal_is_stored_by_its_first_claim_and_outlives_its_leases(stores: Stores) -> None:
    store = stores.open(stores.conninfo_for("principals"))
    with trio.fail_after(WAIT):
        assert await store.principal("s") is None
        unnamed = await store.claim("s", "host-a", 30)  # no principal: none stored
        assert unnamed is not None and await store.principal("s") is None
        assert await store.release("s", unnamed.epoch)
        first = await store.claim("s", "host-a", 30, "alice")
        assert first is not None and await store.principal("s") == "alice"
        assert await store.claim("s", "host-b", 30, "bob") is None  # a failed claim stores nothing
        assert await store.release("s", first.epoch)
        second = await store.claim("s", "host-b", 30, "bob")  # never changed once stored
        assert second is not None and await store.principal("s") == "alice"


async def test_two_claimants_racing_over_many_sessions_each_win_exactly_one_claim(stores: Stores) -> None:
    """Two hosts (two stores: their own pools and connections) claim the same 150 sessions at the
    same moments, twice (unowned, then all expired): every session has exactly one winner, the
    stored owner is that winner, and every epoch is new."""
    conninfo = stores.conninfo_for("race")
    hosts = {"host-a": stores.open(conninfo, pool_size=4), "host-b": stores.open(conninfo, pool_size=4)}
    sessions = [f"s{i}" for i in range(150)]
    epochs: set[int] = set()

    async def race() -> dict[str, list[Lease]]:
        won: dict[str, list[Lease]] = {s: [] for s in sessions}
        start = trio.Event()

        async def claim(owner: str, session_id: str) -> None:
            await start.wait()
            lease = await hosts[owner].claim(session_id, owner, 30)
            if lease is not None:
                won[session_id].append(lease)

        async with trio.open_nursery() as nursery:
            for session_id in sessions:
                for owner in hosts:
                    nursery.start_soon(claim, owner, session_id)
            await trio.testing.wait_all_tasks_blocked()
            start.set()
        return won

    with trio.fail_after(WAIT * 3):
        for _round in range(2):
            won = await race()
            assert all(len(leases) == 1 for leases in won.values()), {s: w for s, w in won.items() if len(w) != 1}
            for session_id, (lease,) in won.items():
                stored = await hosts["host-a"].owner(session_id)
                assert stored is not None and (stored.owner, stored.epoch) == (lease.owner, lease.epoch)
                assert lease.epoch not in epochs
                epochs.add(lease.epoch)
            with admin(conninfo) as db:
                db.execute("UPDATE acp_session_leases SET expires_at = clock_timestamp() - interval '1 second'")
    assert len(epochs) == 2 * len(sessions)


async def test_a_host_that_lost_its_lease_cannot_append_and_nothing_of_it_is_stored(stores: Stores) -> None:
    conninfo = stores.conninfo_for("fenced")
    host_a, host_b = stores.open(conninfo), stores.open(conninfo)
    journal_a, journal_b = host_a.journal(), host_b.journal()
    with trio.fail_after(WAIT):
        lease_a = await host_a.claim("s", "host-a", 30)
        assert lease_a is not None
        assert await journal_a.append("s", [b"one", b"two"], epoch=lease_a.epoch) == 2
        assert await journal_a.append("other", [b"unfenced"]) == 1  # no epoch: not fenced
        expire(conninfo, "s")
        with pytest.raises(LeaseLostError) as info:  # expired: lost, even before anyone claims it
            await journal_a.append("s", [b"late"], epoch=lease_a.epoch)
        assert (info.value.session_id, info.value.epoch) == ("s", lease_a.epoch)
        lease_b = await host_b.claim("s", "host-b", 30)
        assert lease_b is not None
        with pytest.raises(LeaseLostError):  # claimed by another host since
            await journal_a.append("s", [b"later"], epoch=lease_a.epoch)
        assert await journal_b.append("s", [b"three"], epoch=lease_b.epoch) == 3
        assert await journal_b.read("s", 0) == [(1, b"one"), (2, b"two"), (3, b"three")]
        assert await host_a.release("s", lease_a.epoch) is False

        # in one transaction with other appends, the fenced one alone fails
        async def lost() -> None:
            with pytest.raises(LeaseLostError):
                await journal_a.append("s", [b"lost"], epoch=lease_a.epoch)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lost)
            nursery.start_soon(journal_a.append, "other", [b"two"])
        assert await journal_a.read("other", 0) == [(1, b"unfenced"), (2, b"two")]
        assert await journal_b.last("s") == 3
    with pytest.raises(ValueError, match="no ownership leases"):
        await session_store.SessionJournal(_sqlite_store(stores)).append("s", [b"x"], epoch=1)


def _sqlite_store(stores: Stores) -> session_store.SessionStore:
    """A real in-memory SQLite store (the fixture's patch makes MemorySessionStore PostgreSQL's)."""
    from acp_trio._store_db import Database

    return session_store.SessionStore(Database(":memory:"), threaded=False, store_secrets=False, page_size=10)


async def test_every_append_that_succeeded_is_ordered_before_the_claim_that_took_the_session(stores: Stores) -> None:
    """Host A appends without pause under its lease; its lease expires and host B claims the session:
    A's appends fail from then on, and every number A was given is at most B's last at its claim (no
    line of the old owner lands after the new one took over)."""
    conninfo = stores.conninfo_for("fence-race")
    host_a, host_b = stores.open(conninfo), stores.open(conninfo)
    journal_a = host_a.journal()
    given: list[int] = []
    twenty = trio.Event()
    with trio.fail_after(WAIT):
        lease_a = await host_a.claim("s", "host-a", 30)
        assert lease_a is not None
        given.append(await journal_a.append("s", [b"first"], epoch=lease_a.epoch))

        async def keep_appending() -> None:
            while True:
                try:
                    given.append(await journal_a.append("s", [b"a"], epoch=lease_a.epoch))
                except LeaseLostError:
                    return
                if len(given) >= 20:
                    twenty.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(keep_appending)
            await twenty.wait()  # A has appended a while, and goes on
            await trio.to_thread.run_sync(expire, conninfo, "s")
            lease_b = await host_b.claim("s", "host-b", 30)
            assert lease_b is not None
            last_at_claim = await host_b.journal().last("s")
        assert given == list(range(1, len(given) + 1))
        assert max(given) <= last_at_claim
        assert await host_b.journal().last("s") == last_at_claim


def test_the_lazy_exports_name_the_postgres_classes() -> None:
    assert session_store.PostgresSessionStore is PostgresSessionStore
    assert session_store.LeaseLostError is LeaseLostError
    with pytest.raises(AttributeError):
        session_store.NoSuchStore  # noqa: B018

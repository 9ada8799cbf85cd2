"""The PostgreSQL session store against the SQLite one, side by side, in one process (issue 36).

Usage::

    python benchmarks/bench_store_pg.py [--quick] [--repeats K] [--conninfo CONNINFO] [--json out.json]

Without ``--conninfo`` it starts a throwaway PostgreSQL server of its own (``tests/_postgres.py``:
the machine's server binaries, Debian's ``postgresql`` package; a Unix socket in a temporary
directory) with the server's defaults for durability (``fsync`` on, ``synchronous_commit`` on),
and stops it at the end.  Backends, each on a fresh database (SQLite: a file in a temporary
directory; PostgreSQL: a schema of its own):

- ``sqlite``: ``SqliteSessionStore(path)`` (its default: no fsync per commit, survives the process);
- ``sqlite-durable``: ``durable=True`` (an fsync per commit);
- ``pg``: ``PostgresSessionStore(conninfo)`` (its default ``durable=True``: the server's
  ``synchronous_commit = on``, a WAL flush per commit);
- ``pg-async-commit``: ``durable=False`` (``synchronous_commit = off``: survives a host's death,
  not the server's crash).

Scenarios (what a session host does):

1. ``create``: sessions created as ``session/new`` does (the record opened, then the answer waits
   for its commit): one after another, and 16 tasks at once: sessions/s.
2. ``append``: journal appends of one ~300-byte ``session/update`` line, each awaited (one
   session), and from 16 tasks at once (a session each; group commit); lines of 10 per append: lines/s.
3. ``list``: with 10,000 stored sessions (``--quick``: 2,000), ``list_sessions`` of the first page
   (100, as ``session/list`` without a cursor), of a page deep in (with the cursor of page 50), and
   of a ``cwd`` filter's first page: ms.
4. ``resume``: in the same store, the reads a reattaching client's ``session/resume`` makes of one
   session's journal of 1,000 lines (``first``, ``last``, then the lines from 0): ms; and
   ``conversation`` (the recorded history, 1,000 updates, what ``session/load`` replays): ms.

Medians of ``--repeats`` runs (default 3).  Verdicts: none; figures for the report.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

_HERE: Final = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE / "runtime"))
sys.path.insert(0, str(_HERE.parent / "tests"))

from _shared import dist_version, use_source_tree  # noqa: E402

use_source_tree()
import orjson  # noqa: E402
import trio  # noqa: E402

from acp_trio import session_store  # noqa: E402
from acp_trio._sessions import SessionInfo  # noqa: E402

BACKENDS: Final = ("sqlite", "sqlite-durable", "pg", "pg-async-commit")
TASKS: Final = 16


def update_line(session_id: str, i: int) -> bytes:
    text = f"chunk {i:06d}: " + "the quick brown fox jumps over the lazy dog; " * 4
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {
                "sessionId": session_id,
                "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}},
            },
        }
    )


LINES: Final = [update_line("sess_bench", i) for i in range(1000)]


class Backends:
    """Opens a fresh store of each backend."""

    def __init__(self, directory: Path, conninfo: Callable[[], str]) -> None:
        self.directory = directory
        self.conninfo = conninfo
        self.count = 0

    def open(self, backend: str) -> session_store.SessionStore:
        self.count += 1
        if backend.startswith("sqlite"):
            path = str(self.directory / f"store{self.count}.db")
            return session_store.SqliteSessionStore(path, durable=backend == "sqlite-durable")
        return session_store.PostgresSessionStore(self.conninfo(), durable=backend == "pg")


async def create_one(store: session_store.SessionStore, session_id: str, cwd: str = "/work") -> None:
    """What ``session/new`` does with the store: the record opened, the answer waits for its commit."""
    store._attach(session_id, SessionInfo(session_id, cwd, ()), True, [])
    await store._commit()


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


async def scenario_create(store: session_store.SessionStore, n: int) -> dict[str, float]:
    async def sequential() -> None:
        for i in range(n):
            await create_one(store, f"seq-{i}")

    async def concurrent() -> None:
        async def worker(k: int) -> None:
            for i in range(n // TASKS):
                await create_one(store, f"par-{k}-{i}")

        async with trio.open_nursery() as nursery:
            for k in range(TASKS):
                nursery.start_soon(worker, k)

    one = await timed(sequential)
    many = await timed(concurrent)
    return {"create_sequential_per_s": n / one, f"create_tasks{TASKS}_per_s": n // TASKS * TASKS / many}


async def scenario_append(store: session_store.SessionStore, n: int) -> dict[str, float]:
    journal = store.journal()

    async def one_by_one() -> None:
        for i in range(n):
            await journal.append("one", [LINES[i % 1000]])

    async def tasks() -> None:
        async def stream(k: int) -> None:
            for i in range(n // TASKS):
                await journal.append(f"task-{k}", [LINES[i % 1000]])

        async with trio.open_nursery() as nursery:
            for k in range(TASKS):
                nursery.start_soon(stream, k)

    async def tens() -> None:
        for i in range(n // 10):
            start = (i * 10) % 1000
            await journal.append("tens", LINES[start : start + 10])

    return {
        "append_one_per_s": n / await timed(one_by_one),
        f"append_tasks{TASKS}_per_s": n // TASKS * TASKS / await timed(tasks),
        "append_batch10_lines_per_s": n // 10 * 10 / await timed(tens),
    }


async def populate(store: session_store.SessionStore, sessions: int) -> str:
    """``sessions`` stored sessions (3 cwds), the last one with 1,000 recorded updates and a journal of
    1,000 lines; returns that session's id."""
    for i in range(sessions):
        store._attach(f"stored-{i:05}", SessionInfo(f"stored-{i:05}", f"/proj{i % 3}", ()), True, [])
        if i % 500 == 499:
            await store._commit()
    target = f"stored-{sessions - 1:05}"
    entry = store._attach(target, SessionInfo(target, "/proj0", ()), False, [])
    for i in range(1000):
        store._record(entry, orjson.loads(LINES[i])["params"]["update"])
    entry.closed = True
    await store.flush()
    journal = store.journal()
    for start in range(0, 1000, 100):
        await journal.append(target, LINES[start : start + 100])
    return target


async def scenario_reads(store: session_store.SessionStore, target: str) -> dict[str, float]:
    journal = store.journal()
    first_page: list[Any] = []

    async def page1() -> None:
        first_page[:] = [await store.list_sessions(limit=100)]

    out: dict[str, list[float]] = {"list_first_page_ms": [], "list_page_50_ms": [], "list_cwd_ms": []}
    out |= {"resume_journal_ms": [], "load_conversation_ms": []}
    cursor = None
    for _ in range(49):
        _, cursor = await store.list_sessions(cursor=cursor, limit=100)
    for _ in range(5):
        out["list_first_page_ms"].append(await timed(page1))
        out["list_page_50_ms"].append(await timed(lambda: store.list_sessions(cursor=cursor, limit=100)))
        out["list_cwd_ms"].append(await timed(lambda: store.list_sessions(cwd="/proj1", limit=100)))

        async def resume() -> None:
            await journal.first(target)
            await journal.last(target)
            assert len(await journal.read(target, 0)) == 1000

        async def load() -> None:
            conversation = await store.conversation(target)
            assert conversation is not None and len(conversation.events) == 1000

        out["resume_journal_ms"].append(await timed(resume))
        out["load_conversation_ms"].append(await timed(load))
    assert len(first_page[0][0]) == 100
    return {key: statistics.median(values) * 1e3 for key, values in out.items()}


async def run(backends: Backends, backend: str, quick: bool) -> dict[str, float]:
    n = 400 if quick else 2000
    stored = 2000 if quick else 10_000
    result: dict[str, float] = {}
    with backends.open(backend) as store:
        result |= await scenario_create(store, n // 2)
        result |= await scenario_append(store, n)
    with backends.open(backend) as store:
        target = await populate(store, stored)
        result |= await scenario_reads(store, target)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--conninfo", help="a PostgreSQL server to use (a schema per store is made in it)")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import psycopg

    server = None
    temp = Path(tempfile.mkdtemp(prefix="bench-store-pg-"))
    try:
        if args.conninfo is None:
            from _postgres import PostgresServer, server_bindir

            bindir = server_bindir()
            if bindir is None:
                print(
                    "no PostgreSQL server binaries: apt-get install -y postgresql, or give --conninfo", file=sys.stderr
                )
                return 1
            server = PostgresServer(Path(tempfile.mkdtemp(prefix="acp-trio-pg-")), bindir)
            server.start(durable=True)
            base = server.admin
        else:
            base = args.conninfo
        schemas = iter(range(1, 1_000_000))

        def conninfo() -> str:
            name = f"bench{next(schemas)}_{int(time.time())}"
            with psycopg.connect(base, autocommit=True) as db:
                db.execute(f'CREATE SCHEMA "{name}"')  # type: ignore[arg-type]
            return f"{base} options='-csearch_path={name}'"

        backends = Backends(temp, conninfo)
        chosen = [b for b in args.backends.split(",") if b]
        runs: dict[str, list[dict[str, float]]] = {b: [] for b in chosen}
        for _ in range(args.repeats):
            for backend in chosen:  # alternating: the machine's load falls on every backend alike
                runs[backend].append(trio.run(run, backends, backend, args.quick))
        medians = {b: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for b, rs in runs.items()}
        keys = list(next(iter(medians.values())))
        print(f"{'':28}" + "".join(f"{b:>17}" for b in chosen))
        for key in keys:
            print(f"{key:28}" + "".join(f"{medians[b][key]:>17,.1f}" for b in chosen))
        if args.json is not None:
            args.json.write_text(
                json.dumps(
                    {
                        "python": platform.python_version(),
                        "psycopg": dist_version("psycopg"),
                        "quick": args.quick,
                        "repeats": args.repeats,
                        "medians": medians,
                    },
                    indent=2,
                )
            )
        return 0
    finally:
        if server is not None:
            server.stop()
            shutil.rmtree(server.directory, ignore_errors=True)
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

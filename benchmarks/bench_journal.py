"""The session journal's cost (acp_trio.session_store.SessionJournal), in one process, on an SQLite file.

Usage::

    python benchmarks/bench_journal.py [--quick] [--repeats K] [--durable] [--json out.json]

Scenarios (each on a fresh store file in a temporary directory, default bounds unless said):

1. ``one``: one ``session/update`` line (~300 bytes) per ``append``, each awaited before the next
   (a host that journals every update before forwarding it): appends/s and the latency of one
   append (median, 99th percentile), and the CPU time of the process (all threads: the writer
   thread's commits count) per line.
2. ``tasks``: one line per ``append`` from 8 tasks at once, each its own session (8 detached
   sessions streaming): lines/s; appends made while the writer commits share its next transaction.
3. ``batch N``: N lines per ``append`` (N = 10, 100), awaited one after the other: lines/s.
4. ``pipelined``: the way a host keeps the agent's stream from waiting: a producer encodes each
   update (orjson, ~370 bytes) into a trio memory channel (1,000 lines) as fast as it can, and one journaling task
   appends whatever has gathered since its last append returned; against the same producer with a
   consumer that only drains the channel.  Reported: updates/s both ways and the producer's
   slowdown (the producer never waits on the database).
5. ``bound``: ``batch 10`` on a session already at ``max_updates`` (10,000): every append drops as
   many old lines as it adds.
6. ``read``: ``read(after=0)`` of 10,000 journaled lines in one call, and in pages of 1,000
   (``limit``), and the first page of 100 (what a reattaching client waits for): ms.
7. ``many``: 1,000 sessions of 100 lines each in one file; the reads a reattach makes for one of
   them (``first``, ``last``, its lines): ms.

Also reported: the process's peak RSS growth over the run (the journal is read from the database,
never kept in memory).  ``--durable`` runs the store with ``durable=True`` (an fsync per commit).
Verdicts: none (figures for the report; the bar the brief sets is that journaling one line must not
slow the agent's stream: compare ``pipelined``'s two rates).  Medians of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

_HERE: Final = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE / "runtime"))

from _shared import dist_version, runtime_build, use_source_tree  # noqa: E402

use_source_tree()
import orjson  # noqa: E402
import trio  # noqa: E402

import acp_trio  # noqa: E402
from acp_trio import session_store  # noqa: E402

SESSION: Final = "sess_bench_journal_0001"
READ_N: Final = 10_000
BOUND: Final = 10_000
MANY: Final = 1000  # sessions in the many-sessions scenario


def update_line(session_id: str, i: int) -> bytes:
    """A ``session/update`` wire line of about 300 bytes (an ``agent_message_chunk`` of text)."""
    text = f"chunk {i:06d}: " + "the quick brown fox jumps over the lazy dog; " * 4
    # a right-sized copy: orjson 3.13's own result holds about 4 KiB whatever its length, and the
    # lines a host journals are slices of what it read (its framer's), right-sized
    return bytes(
        memoryview(
            orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {
                        "sessionId": session_id,
                        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}},
                    },
                }
            )
        )
    )


LINES: Final = [update_line(SESSION, i) for i in range(1000)]  # cycled: encoding is not what is measured


class Clock:
    """Wall and process CPU time (all threads) of a block."""

    def __enter__(self) -> Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


async def one_per_call(journal: session_store.SessionJournal, n: int) -> dict[str, float]:
    latencies = []
    with Clock() as clock:
        for i in range(n):
            started = time.perf_counter()
            await journal.append(SESSION, [LINES[i % 1000]])
            latencies.append(time.perf_counter() - started)
    latencies.sort()
    return {
        "per_s": n / clock.wall,
        "latency_median_us": statistics.median(latencies) * 1e6,
        "latency_p99_us": latencies[int(len(latencies) * 0.99)] * 1e6,
        "cpu_per_line_us": clock.cpu / n * 1e6,
    }


async def tasks_one_per_call(journal: session_store.SessionJournal, n: int, tasks: int = 8) -> dict[str, float]:
    async def stream(k: int) -> None:
        session_id = f"{SESSION}-{k}"
        for i in range(n // tasks):
            await journal.append(session_id, [LINES[i % 1000]])

    with Clock() as clock:
        async with trio.open_nursery() as nursery:
            for k in range(tasks):
                nursery.start_soon(stream, k)
    total = n // tasks * tasks
    return {"per_s": total / clock.wall, "cpu_per_line_us": clock.cpu / total * 1e6}


async def batches(journal: session_store.SessionJournal, n: int, size: int) -> dict[str, float]:
    calls = n // size
    with Clock() as clock:
        for c in range(calls):
            start = (c * size) % 1000
            await journal.append(SESSION, LINES[start : start + size] if start + size <= 1000 else LINES[:size])
    return {"per_s": calls * size / clock.wall, "cpu_per_line_us": clock.cpu / (calls * size) * 1e6}


async def pipelined(journal: session_store.SessionJournal | None, n: int) -> dict[str, float]:
    """Producer encodes n updates into a channel; the consumer journals what gathered (or just drains)."""
    send, receive = trio.open_memory_channel[bytes](1000)
    produced_at = [0.0]

    async def producer() -> None:
        async with send:
            for i in range(n):
                await send.send(update_line(SESSION, i))
        produced_at[0] = time.perf_counter()

    async def consumer() -> None:
        async with receive:
            async for first in receive:
                lines = [first]
                while True:
                    try:
                        lines.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                if journal is not None:
                    await journal.append(SESSION, lines)

    with Clock() as clock:
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer)
            nursery.start_soon(producer)
    return {
        "producer_per_s": n / (produced_at[0] - started),
        "journaled_per_s": n / clock.wall,
        "cpu_per_line_us": clock.cpu / n * 1e6,
    }


async def at_bound(journal: session_store.SessionJournal, n: int) -> dict[str, float]:
    while await journal.last(SESSION) < BOUND:
        await journal.append(SESSION, LINES)
    result = await batches(journal, n, 10)
    assert await journal.first(SESSION) == await journal.last(SESSION) - BOUND + 1
    return result


async def reads(journal: session_store.SessionJournal) -> dict[str, float]:
    for _ in range(READ_N // 1000):
        await journal.append(SESSION, LINES)
    assert await journal.last(SESSION) == READ_N
    with Clock() as whole:
        lines = await journal.read(SESSION, 0)
    assert len(lines) == READ_N and lines[-1][0] == READ_N
    with Clock() as paged:
        after, count = 0, 0
        while page := await journal.read(SESSION, after, limit=1000):
            after, count = page[-1][0], count + len(page)
    assert count == READ_N
    with Clock() as first_page:  # what a reattaching client waits for before its first replayed update
        assert len(await journal.read(SESSION, 0, limit=100)) == 100
    return {"whole_ms": whole.wall * 1e3, "paged_ms": paged.wall * 1e3, "first_page_ms": first_page.wall * 1e3}


async def many(journal: session_store.SessionJournal) -> dict[str, float]:
    """MANY sessions of 100 lines each; then the reads of a reattach (last, first, the lines) of some of them."""
    for k in range(MANY):
        await journal.append(f"{SESSION}-{k}", LINES[:100])
    times = []
    for k in range(0, MANY, MANY // 20):
        with Clock() as clock:
            session_id = f"{SESSION}-{k}"
            assert (await journal.first(session_id), await journal.last(session_id)) == (1, 100)
            assert len(await journal.read(session_id, 0)) == 100
        times.append(clock.wall)
    return {"reattach_reads_ms": statistics.median(times) * 1e3}


async def fresh(
    tmp: Path, durable: bool, run: Callable[[session_store.SessionJournal], Awaitable[dict[str, float]]], **bounds: int
) -> dict[str, float]:
    path = tmp / f"journal-{time.perf_counter_ns()}.db"
    store = session_store.SqliteSessionStore(str(path), durable=durable)
    try:
        journal = store.journal(**bounds)
        return await run(journal)
    finally:
        store.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


async def run_all(tmp: Path, durable: bool, repeats: int, n: int) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {}
    scenarios: list[tuple[str, Callable[[session_store.SessionJournal], Awaitable[dict[str, float]]], dict[str, int]]]
    scenarios = [
        ("one", lambda j: one_per_call(j, n), {}),
        ("tasks", lambda j: tasks_one_per_call(j, n), {}),
        ("batch10", lambda j: batches(j, n * 5, 10), {}),
        ("batch100", lambda j: batches(j, n * 20, 100), {}),
        ("pipelined", lambda j: pipelined(j, n * 10), {}),
        ("bound", lambda j: at_bound(j, n * 5), {"max_updates": BOUND}),
        ("read", reads, {}),
        ("many", many, {}),
    ]
    for _ in range(repeats):
        for name, run, bounds in scenarios:
            if name == "pipelined":  # the producer alone right before: the machine's load drifts
                results.setdefault("pipelined_off", []).append(await pipelined(None, n * 10))
            results.setdefault(name, []).append(await fresh(tmp, durable, run, **bounds))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer lines and repeats")
    parser.add_argument("--repeats", type=int, help="runs of every scenario (default 5; --quick 2)")
    parser.add_argument("--durable", action="store_true", help="durable=True: an fsync per commit")
    parser.add_argument("--json", type=Path, help="also write the samples to this file")
    # (`nox -s bench -- --strict` passes it to every benchmark; the journal has no bar of its own)
    parser.add_argument("--strict", action="store_true", help="accepted for nox -s bench; no bar here")
    args = parser.parse_args(argv)
    repeats = args.repeats or (2 if args.quick else 5)
    n = 1000 if args.quick else 4000

    print(f"\nSession journal benchmark: Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}")
    print(f"acp-trio {dist_version('acp-trio')} ({runtime_build()}) [{Path(acp_trio.__file__ or '').parent}]")
    print(f"durable={args.durable}; {repeats} runs of each scenario; lines of {len(LINES[0])} bytes")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="acp-bench-journal-") as tmp:
        results = trio.run(run_all, Path(tmp), args.durable, repeats, n)
    rss_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024  # KiB -> MiB (Linux)

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    rows = [
        (f"one line per append, awaited ({n})", f"{med('one', 'per_s'):,.0f} appends/s"),
        (
            "  latency of one append: median / p99",
            f"{med('one', 'latency_median_us'):.0f} / {med('one', 'latency_p99_us'):.0f} µs",
        ),
        ("  process CPU per line (all threads)", f"{med('one', 'cpu_per_line_us'):.1f} µs"),
        (
            f"one line per append, 8 sessions at once ({n})",
            f"{med('tasks', 'per_s'):,.0f} lines/s; {med('tasks', 'cpu_per_line_us'):.1f} µs CPU/line",
        ),
        (
            f"batches of 10 lines ({n * 5})",
            f"{med('batch10', 'per_s'):,.0f} lines/s; {med('batch10', 'cpu_per_line_us'):.1f} µs CPU/line",
        ),
        (
            f"batches of 100 lines ({n * 20})",
            f"{med('batch100', 'per_s'):,.0f} lines/s; {med('batch100', 'cpu_per_line_us'):.1f} µs CPU/line",
        ),
        (
            f"batches of 10 at the bound ({BOUND:,} held)",
            f"{med('bound', 'per_s'):,.0f} lines/s; {med('bound', 'cpu_per_line_us'):.1f} µs CPU/line",
        ),
        (f"pipelined stream ({n * 10}): producer alone", f"{med('pipelined_off', 'producer_per_s'):,.0f} updates/s"),
        (
            "  producer while journaling what gathers",
            f"{med('pipelined', 'producer_per_s'):,.0f} updates/s "
            f"({med('pipelined', 'producer_per_s') / med('pipelined_off', 'producer_per_s'):.2f} x)",
        ),
        (
            "  all journaled",
            f"{med('pipelined', 'journaled_per_s'):,.0f} updates/s; "
            f"{med('pipelined', 'cpu_per_line_us'):.1f} µs CPU/line",
        ),
        (
            f"read of {READ_N:,} lines: one call / pages of 1,000",
            f"{med('read', 'whole_ms'):.1f} / {med('read', 'paged_ms'):.1f} ms",
        ),
        ("  the first 100 of them (a reattach's first page)", f"{med('read', 'first_page_ms'):.2f} ms"),
        (
            f"{MANY:,} sessions x 100 lines: one reattach's reads",
            f"{med('many', 'reattach_reads_ms'):.2f} ms",
        ),
        ("peak RSS growth over the whole run", f"{rss_growth:.1f} MiB"),
    ]
    print(f"\nMedians of {repeats} runs ({time.perf_counter() - started:.0f} s)")
    for label, value in rows:
        print(f"  {label:<52} {value}")
    if args.json:
        report = {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "durable": args.durable,
            "statistic": "median",
            "samples": results,
            "rss_growth_mib": rss_growth,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

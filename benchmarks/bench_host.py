"""The session host's cost (acp_trio.host), in one process, clients in memory (``host.connect``).

Usage::

    python benchmarks/bench_host.py [--quick] [--repeats K] [--json out.json]

A v2 agent whose turn sends N ``agent_message_chunk`` updates (about 200 bytes of text each) as fast
as it can, run three ways side by side: a direct client-agent pair (``open_memory_pair``, no
host), the host with its default journal (``journal=None``: SQLite, ``SqliteSessionStore(file).journal()``
in a temporary directory of the host's own), and the host with ``MemoryJournal`` (the default bounds,
``DEFAULT_JOURNAL_MAX_UPDATES`` and ``DEFAULT_JOURNAL_MAX_BYTES``).  Scenarios:

1. ``attached``: one client attached streams a turn of N updates (N = 10,000; ``--quick`` 2,000):
   updates/s from the ``session/prompt`` call to the client's ``state_update idle``.
2. ``detached``: the same turn with nobody attached (the client left before the turn began):
   updates journaled/s, from the turn's start to the host's ``idle``.
3. ``resume``: a new client resumes that session with ``replayFrom start`` (N updates and the
   turn's states replayed): ms to the first replayed update, and to the answer (the whole replay
   is in the client's hands); then another resumes with the host's cursor one past the last
   update: ms to the answer, the client live with nothing to replay (median of 10).
4. ``many``: M sessions (M = 1,000; ``--quick`` 200), each made by its own client connection
   (so its own agent instance) that ran a 20-update turn and left: the process's RSS growth per
   detached session (VmRSS, after a garbage collection; the instance, its connection and the
   journal's lines included), then ``replayFrom start`` of one of them (median of 20 picks): ms
   to the answer.  Each journal in a process of its own (a fresh heap).
5. ``big``: 20 sessions each made by its own client, which leaves; each runs a turn of B updates
   (B = 5,000, about 1.2 MB of lines; ``--quick`` 1,000) with nobody attached: the process's RSS
   growth (what a journal in memory holds, and what the default journal keeps on disk instead).
   In a process of its own, as ``many``.

The client is in memory: a transport (WebSocket, Streamable HTTP) adds its own cost on top, which
``bench_remote.py`` measures.  Verdicts: none (figures for the report).  Medians of ``--repeats``
runs (``many``: one run).
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

from _shared import dist_version, runtime_build, use_source_tree

use_source_tree()
import trio  # noqa: E402

import acp_trio  # noqa: E402
from acp_schema import v2  # noqa: E402
from acp_trio.host import (  # noqa: E402
    CURSOR_TYPE,
    DEFAULT_JOURNAL_MAX_BYTES,
    DEFAULT_JOURNAL_MAX_UPDATES,
    MemoryJournal,
    SessionHost,
    open_session_host,
)
from acp_trio.transports.memory import open_memory_pair  # noqa: E402

TEXT: Final = "the quick brown fox jumps over the lazy dog; " * 4 + "and then some"  # ~200 bytes
CHUNK: Final = v2.AgentMessageChunkSessionUpdate(message_id="m", content=v2.TextContentBlock(text=TEXT))
KINDS: Final = ("default", "memory")  # the host's default journal (SQLite in a temporary directory), MemoryJournal
PICKS: Final = 20  # sessions reattached in the many scenario
BIG_SESSIONS: Final = 20  # sessions of the big scenario


class Shared:
    """What the benchmark shares with every agent instance: the gate a ``wait`` turn waits on."""

    def __init__(self) -> None:
        self.gate = trio.Event()
        self.names = itertools.count(1)


class StreamAgent:
    """A v2 agent: the prompt ``"N"`` streams N chunks in its turn; ``"N wait"`` waits for the gate first."""

    def __init__(self, shared: Shared, conn: acp_trio.AgentSideConnection) -> None:
        self.shared = shared
        self.conn = conn

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id=f"s{next(self.shared.names)}")

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        sid = params.session_id
        words = getattr(params.prompt[0], "text", "").split()
        count, wait = int(words[0]), "wait" in words
        client = self.conn.client

        async def turn() -> str:
            if wait:
                await self.shared.gate.wait()
            for _ in range(count):
                await client.session_update(v2.UpdateSessionNotification(session_id=sid, update=CHUNK))
            return "end_turn"

        self.conn.start_turn(sid, turn)
        return v2.PromptResponse(message_id="u")


class Screen:
    """A v2 client that counts updates, notes when the first came, and sets ``idle`` at ``state_update idle``."""

    def __init__(self) -> None:
        self.count = 0
        self.first: float | None = None
        self.idle = trio.Event()

    async def session_update(self, params: v2.UpdateSessionNotification) -> None:
        self.count += 1
        if self.first is None:
            self.first = time.perf_counter()
        if isinstance(params.update, v2.IdleStateUpdateSessionUpdate):
            self.idle.set()


def prompt(session_id: str, words: str) -> v2.PromptRequest:
    return v2.PromptRequest(session_id=session_id, prompt=[v2.TextContentBlock(text=words)])


def resume(session_id: str, replay: Any = None) -> v2.ResumeSessionRequest:
    request = v2.ResumeSessionRequest(session_id=session_id, cwd="/tmp")
    if replay is not None:
        request.replay_from = replay
    return request


async def initialize(conn: acp_trio.ClientSideConnection) -> None:
    await conn.initialize(v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="bench", version="0")))


def rss_kib() -> int:
    """The process's resident set now (Linux ``/proc/self/status`` VmRSS), else its peak (KiB)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@asynccontextmanager
async def hosted(kind: str, shared: Shared, **options: Any) -> AsyncIterator[SessionHost]:
    """A host of :class:`StreamAgent` with the ``kind`` journal (``default``: ``journal=None``)."""
    factory = functools.partial(StreamAgent, shared)
    journal = (
        MemoryJournal(max_updates=DEFAULT_JOURNAL_MAX_UPDATES, max_bytes=DEFAULT_JOURNAL_MAX_BYTES)
        if kind == "memory"
        else None
    )
    async with open_session_host(factory, journal=journal, variant=v2, **options) as host:
        yield host


async def direct(n: int) -> dict[str, float]:
    screen = Screen()
    async with open_memory_pair(functools.partial(StreamAgent, Shared()), screen, variant=v2) as (_, conn):
        await initialize(conn)
        sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
        started = time.perf_counter()
        await conn.agent.session_prompt(prompt(sid, str(n)))
        await screen.idle.wait()
        return {"attached_per_s": n / (time.perf_counter() - started)}


async def through_host(kind: str, n: int) -> dict[str, float]:
    shared = Shared()
    out: dict[str, float] = {}
    async with hosted(kind, shared) as host:
        screen = Screen()
        async with host.connect(screen, variant=v2) as conn:  # attached
            await initialize(conn)
            sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
            started = time.perf_counter()
            await conn.agent.session_prompt(prompt(sid, str(n)))
            await screen.idle.wait()
            out["attached_per_s"] = n / (time.perf_counter() - started)
        async with host.connect(Screen(), variant=v2) as conn:  # detached: it leaves before the turn begins
            await initialize(conn)
            sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
            await conn.agent.session_prompt(prompt(sid, f"{n} wait"))
        await host.wait_until(lambda: host.sessions()[sid].attached == 0)
        started = time.perf_counter()
        shared.gate.set()
        await host.wait_until(lambda: host.sessions()[sid].state == "idle")
        out["detached_per_s"] = n / (time.perf_counter() - started)
        last = host.sessions()[sid].last_update
        screen = Screen()
        async with host.connect(screen, variant=v2) as conn:  # resume from the start
            await initialize(conn)
            started = time.perf_counter()
            await conn.agent.session_resume(resume(sid, v2.StartReplayFrom()))
            done = time.perf_counter()
            assert screen.first is not None and screen.count == last + 1, (screen.count, last)  # + the current state
            out["resume_first_ms"] = (screen.first - started) * 1e3
            out["resume_whole_ms"] = (done - started) * 1e3
        live = []
        for _ in range(10):
            async with host.connect(Screen(), variant=v2) as conn:  # resume with the cursor past the end: live
                await initialize(conn)
                cursor = v2.ReplayFromOther(type=CURSOR_TYPE, extra_fields={"update": last + 1})
                started = time.perf_counter()
                await conn.agent.session_resume(resume(sid, cursor))
                live.append(time.perf_counter() - started)
        out["resume_live_ms"] = statistics.median(live) * 1e3
        out["replayed"] = last
    return out


async def many(kind: str, m: int) -> dict[str, float]:
    shared = Shared()
    async with hosted(kind, shared, max_detached_sessions=None) as host:
        gc.collect()
        before = rss_kib()
        sids = []
        started = time.perf_counter()
        for _ in range(m):
            screen = Screen()
            async with host.connect(screen, variant=v2) as conn:
                await initialize(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(prompt(sid, "20"))
                await screen.idle.wait()
            sids.append(sid)
        await host.wait_until(lambda: all(info.attached == 0 for info in host.sessions().values()))
        made = time.perf_counter() - started
        gc.collect()
        grown = rss_kib() - before
        assert len(host.sessions()) == m and host.instances == m
        times = []
        for sid in sids[:: max(1, m // PICKS)][:PICKS]:
            screen = Screen()
            async with host.connect(screen, variant=v2) as conn:
                await initialize(conn)
                started = time.perf_counter()
                await conn.agent.session_resume(resume(sid, v2.StartReplayFrom()))
                times.append(time.perf_counter() - started)
        return {
            "rss_per_session_kib": grown / m,
            "rss_growth_mib": grown / 1024,
            "made_s": made,
            "reattach_ms": statistics.median(times) * 1e3,
        }


async def big(kind: str, b: int) -> dict[str, float]:
    shared = Shared()
    async with hosted(kind, shared) as host:
        sids = []
        for _ in range(BIG_SESSIONS):
            async with host.connect(Screen(), variant=v2) as conn:  # it leaves before the turn begins
                await initialize(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(prompt(sid, f"{b} wait"))
            sids.append(sid)
        await host.wait_until(lambda: all(info.attached == 0 for info in host.sessions().values()))
        gc.collect()
        before = rss_kib()
        started = time.perf_counter()
        shared.gate.set()
        await host.wait_until(lambda: all(host.sessions()[sid].state == "idle" for sid in sids))
        took = time.perf_counter() - started
        gc.collect()
        grown = rss_kib() - before
        return {"rss_growth_mib": grown / 1024, "journaled_per_s": BIG_SESSIONS * b / took}


def apart(scenario: str, kind: str, size: int) -> dict[str, float]:
    """:func:`many` or :func:`big` in a process of its own: RSS growth on a fresh heap."""
    done = subprocess.run(
        [sys.executable, __file__, "--apart", scenario, kind, str(size)], check=True, capture_output=True, text=True
    )
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


async def run_all(repeats: int, n: int, m: int, b: int) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {}
    for kind in KINDS:
        results[f"many-{kind}"] = [await trio.to_thread.run_sync(apart, "many", kind, m)]
        results[f"big-{kind}"] = [await trio.to_thread.run_sync(apart, "big", kind, b)]
    for _ in range(repeats):
        results.setdefault("direct", []).append(await direct(n))
        for kind in KINDS:
            results.setdefault(kind, []).append(await through_host(kind, n))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller turns, fewer sessions and repeats")
    parser.add_argument("--repeats", type=int, help="runs of every scenario but many (default 3; --quick 1)")
    parser.add_argument("--json", type=Path, help="also write the samples to this file")
    parser.add_argument("--strict", action="store_true", help="accepted for nox -s bench; no bar here")
    parser.add_argument("--apart", nargs=3, metavar=("SCENARIO", "KIND", "SIZE"), help=argparse.SUPPRESS)  # apart()
    args = parser.parse_args(argv)
    if args.apart:
        scenario, kind, size = args.apart
        print(json.dumps(trio.run(many if scenario == "many" else big, kind, int(size))))
        return 0
    repeats = args.repeats or (1 if args.quick else 3)
    n, m, b = (2_000, 200, 1_000) if args.quick else (10_000, 1_000, 5_000)

    print(f"\nSession host benchmark: Python {platform.python_version()}")
    print(f"acp-trio {dist_version('acp-trio')} ({runtime_build()}) [{Path(acp_trio.__file__ or '').parent}]")
    print(f"turns of {n:,} updates; {m:,} detached sessions; {repeats} runs; clients in memory")
    started = time.perf_counter()
    results = trio.run(run_all, repeats, n, m, b)

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    cell: Callable[[str, str, str], str] = lambda name, key, fmt: format(med(name, key), fmt)  # noqa: E731
    rows = [
        (
            f"a turn of {n:,} updates, a client attached (updates/s)",
            cell("direct", "attached_per_s", ",.0f"),
            *(cell(k, "attached_per_s", ",.0f") for k in KINDS),
        ),
        (
            "the same turn, nobody attached (journaled/s)",
            "-",
            *(cell(k, "detached_per_s", ",.0f") for k in KINDS),
        ),
        (
            f"resume, replayFrom start ({med('default', 'replayed'):,.0f}): first update (ms)",
            "-",
            *(cell(k, "resume_first_ms", ".1f") for k in KINDS),
        ),
        ("  the whole replay, to the answer (ms)", "-", *(cell(k, "resume_whole_ms", ".1f") for k in KINDS)),
        ("resume with the cursor at the end: live (ms)", "-", *(cell(k, "resume_live_ms", ".2f") for k in KINDS)),
        (
            f"{m:,} detached sessions: RSS per session (KiB)",
            "-",
            *(cell(f"many-{k}", "rss_per_session_kib", ",.0f") for k in KINDS),
        ),
        ("  their RSS growth (MiB)", "-", *(cell(f"many-{k}", "rss_growth_mib", ",.1f") for k in KINDS)),
        (
            "  reattach one of them, replayFrom start (ms)",
            "-",
            *(cell(f"many-{k}", "reattach_ms", ".2f") for k in KINDS),
        ),
        (
            f"{BIG_SESSIONS} detached turns of {b:,} updates: RSS growth (MiB)",
            "-",
            *(cell(f"big-{k}", "rss_growth_mib", ",.1f") for k in KINDS),
        ),
        ("  journaled/s, all sessions together", "-", *(cell(f"big-{k}", "journaled_per_s", ",.0f") for k in KINDS)),
    ]
    print(f"\nMedians of {repeats} runs ({time.perf_counter() - started:.0f} s)")
    print(f"  {'':<56} {'direct':>10} {'host+default':>12} {'host+memory':>12}")
    for label, *values in rows:
        print(f"  {label:<56} {values[0]:>10} {values[1]:>12} {values[2]:>12}")
    if args.json:
        report = {"python": platform.python_version(), "statistic": "median", "n": n, "m": m, "samples": results}
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

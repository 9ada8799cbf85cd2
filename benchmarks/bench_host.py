"""The session host's cost (acp_trio.host), in one process, clients in memory (``host.connect``).

Usage::

    python benchmarks/bench_host.py [--quick] [--repeats K] [--json out.json]

A v2 agent whose turn sends N ``agent_message_chunk`` updates (about 200 bytes of text each) as fast
as it can, run three ways side by side: a direct client-agent pair (``open_memory_pair``, no
host), the host with its default in-memory journal, and the host with the SQLite journal
(``SqliteSessionStore(file).journal()``, a fresh file in a temporary directory).  Scenarios:

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
import tempfile
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
from acp_trio.host import CURSOR_TYPE, Journal, SessionHost, open_session_host  # noqa: E402
from acp_trio.session_store import SqliteSessionStore  # noqa: E402
from acp_trio.transports.memory import open_memory_pair  # noqa: E402

TEXT: Final = "the quick brown fox jumps over the lazy dog; " * 4 + "and then some"  # ~200 bytes
CHUNK: Final = v2.AgentMessageChunkSessionUpdate(message_id="m", content=v2.TextContentBlock(text=TEXT))
KINDS: Final = ("memory", "sqlite")
PICKS: Final = 20  # sessions reattached in the many scenario


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
async def hosted(kind: str, tmp: Path, shared: Shared, **options: Any) -> AsyncIterator[SessionHost]:
    """A host of :class:`StreamAgent` with the ``kind`` journal (``memory``: the default one)."""
    factory = functools.partial(StreamAgent, shared)
    if kind == "memory":
        async with open_session_host(factory, variant=v2, **options) as host:
            yield host
        return
    path = tmp / f"journal-{time.perf_counter_ns()}.db"
    store = SqliteSessionStore(str(path))
    try:
        journal: Journal = store.journal()
        async with open_session_host(factory, journal=journal, variant=v2, **options) as host:
            yield host
    finally:
        store.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


async def direct(n: int) -> dict[str, float]:
    screen = Screen()
    async with open_memory_pair(functools.partial(StreamAgent, Shared()), screen, variant=v2) as (_, conn):
        await initialize(conn)
        sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
        started = time.perf_counter()
        await conn.agent.session_prompt(prompt(sid, str(n)))
        await screen.idle.wait()
        return {"attached_per_s": n / (time.perf_counter() - started)}


async def through_host(kind: str, tmp: Path, n: int) -> dict[str, float]:
    shared = Shared()
    out: dict[str, float] = {}
    async with hosted(kind, tmp, shared) as host:
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


async def many(kind: str, tmp: Path, m: int) -> dict[str, float]:
    shared = Shared()
    async with hosted(kind, tmp, shared, max_detached_sessions=None) as host:
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


def many_apart(kind: str, m: int) -> dict[str, float]:
    """:func:`many` in a process of its own: RSS growth on a fresh heap."""
    done = subprocess.run(
        [sys.executable, __file__, "--many", kind, str(m)], check=True, capture_output=True, text=True
    )
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


async def run_all(tmp: Path, repeats: int, n: int, m: int) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {}
    for kind in KINDS:
        results[f"many-{kind}"] = [await trio.to_thread.run_sync(many_apart, kind, m)]
    for _ in range(repeats):
        results.setdefault("direct", []).append(await direct(n))
        for kind in KINDS:
            results.setdefault(kind, []).append(await through_host(kind, tmp, n))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller turns, fewer sessions and repeats")
    parser.add_argument("--repeats", type=int, help="runs of every scenario but many (default 3; --quick 1)")
    parser.add_argument("--json", type=Path, help="also write the samples to this file")
    parser.add_argument("--strict", action="store_true", help="accepted for nox -s bench; no bar here")
    parser.add_argument("--many", nargs=2, metavar=("KIND", "M"), help=argparse.SUPPRESS)  # many_apart's child
    args = parser.parse_args(argv)
    if args.many:
        kind, m_text = args.many
        with tempfile.TemporaryDirectory(prefix="acp-bench-host-") as tmp:
            print(json.dumps(trio.run(many, kind, Path(tmp), int(m_text))))
        return 0
    repeats = args.repeats or (1 if args.quick else 3)
    n, m = (2_000, 200) if args.quick else (10_000, 1_000)

    print(f"\nSession host benchmark: Python {platform.python_version()}")
    print(f"acp-trio {dist_version('acp-trio')} ({runtime_build()}) [{Path(acp_trio.__file__ or '').parent}]")
    print(f"turns of {n:,} updates; {m:,} detached sessions; {repeats} runs; clients in memory")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="acp-bench-host-") as tmp:
        results = trio.run(run_all, Path(tmp), repeats, n, m)

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
            f"resume, replayFrom start ({med('memory', 'replayed'):,.0f}): first update (ms)",
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
    ]
    print(f"\nMedians of {repeats} runs ({time.perf_counter() - started:.0f} s)")
    print(f"  {'':<56} {'direct':>10} {'host+memory':>12} {'host+sqlite':>12}")
    for label, *values in rows:
        print(f"  {label:<56} {values[0]:>10} {values[1]:>12} {values[2]:>12}")
    if args.json:
        report = {"python": platform.python_version(), "statistic": "median", "n": n, "m": m, "samples": results}
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

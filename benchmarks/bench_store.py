"""The session store's bars (acp_trio.session_store), over stdio between two processes.

Usage::

    python benchmarks/bench_store.py [--quick] [--rounds R] [--repeats K] [--json out.json] [--strict]
    python benchmarks/bench_store.py --serve-agent [--store PATH [--durable]]   # the bench agent alone

Scenarios:

1. ``record``: the streaming benchmark's turn (one ``session/prompt`` during which the agent sends
   20,000 ``agent_message_chunk`` updates; see ``runtime/common.py``) against an agent without a
   store and one that records its sessions in an SQLite file.  Measured: the agent process's CPU
   time (all threads, so the store's writer thread counts) per update, from before the turn until
   the store has committed every update (a ``cpu`` prompt awaits ``store.flush()``, then reports
   ``time.process_time()``).  Bar: recording adds at most 10 % per update (median of medians).
2. ``load``: a stored conversation of 10,000 updates (one prompt, streamed chunks) is loaded with
   ``session/load``, timed by the client from sending the request until the whole replay was
   handled and the response arrived; against the same agent sending the same 10,000 updates from
   memory (prebuilt typed notifications, the ordinary send path; an extension request), in the
   same run, alternating.  Bar: load ≤ 2 x the in-memory send.
3. ``latency``: what "acknowledged means stored" costs an answer: the client's round trip of a
   ``session/new`` and of a short ``session/prompt`` turn (``stream 100``), against an agent without
   a store, one with a store (``durable=False``) and one with ``durable=True`` (an fsync per
   commit); each answer waits until its records, and every update before it, are committed.
   Reported (no bar): the medians and what the store adds to them.

Each round spawns fresh agent processes (the two ``record`` agents alternate their order per
round).  Verdicts use medians.  Exit status: 0; 1 if a scenario failed; 3 with ``--strict`` if a
bar is missed.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

_HERE: Final = Path(__file__).resolve().parent
_REPO: Final = _HERE.parent
sys.path.insert(0, str(_HERE / "runtime"))

from _shared import dist_version, subprocess_env, use_source_tree  # noqa: E402
from common import chunk_text  # noqa: E402

use_source_tree()
import trio  # noqa: E402

import acp_schema  # noqa: E402
import acp_trio  # noqa: E402
from acp_schema import v1  # noqa: E402
from acp_trio import session_store, spawn_agent  # noqa: E402

STREAM_N: Final = 20_000
LOAD_N: Final = 10_000
LATENCY_TURN: Final = 100  # updates in the short turn of the latency scenario
LATENCY_WARMUP: Final = 3
RECORD_BAR: Final = 1.10
LOAD_BAR: Final = 2.0


# -- the agent ------------------------------------------------------------------------------------


class BenchStoreAgent:
    """``stream N`` streams N chunks; ``cpu`` flushes the store and answers ``_meta.cpu``; the extension
    request ``_bench/memory`` sends ``n`` prebuilt notifications for ``sessionId`` from memory."""

    def __init__(self, conn: Any, store: session_store.SessionStore | None) -> None:
        self.conn = conn
        self.client = v1.ClientPeer(conn)
        self.store = store
        self.count = 0
        self._memory: list[v1.SessionNotification] = []
        if store is not None:
            session_store.enable(conn, store)
        conn.on_ext_request("_bench/memory", self._send_from_memory)

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        self.count += 1
        return v1.NewSessionResponse(session_id=f"sess_bench_{self.count:04d}")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        block = params.prompt[0]
        assert isinstance(block, v1.TextContentBlock)
        words = block.text.split()
        if words[0] == "cpu":
            writer = 0.0
            if self.store is not None:
                await self.store.flush()
                writer = _thread_cpu(self.store._writer._thread) if self.store._writer.threaded else 0.0
            return v1.PromptResponse(
                stop_reason="end_turn", meta={"cpu": time.process_time(), "writer": writer, "main": time.thread_time()}
            )
        update = self.client.session_update
        for i in range(int(words[1])):
            chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=chunk_text(i)))
            await update(v1.SessionNotification(session_id=params.session_id, update=chunk))
        return v1.PromptResponse(stop_reason="end_turn")

    async def _send_from_memory(self, params: Any) -> Any:
        n, session_id = params["n"], params["sessionId"]
        if len(self._memory) != n:
            self._memory = [
                v1.SessionNotification(
                    session_id=session_id,
                    update=v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=chunk_text(i))),
                )
                for i in range(n)
            ]
        update = self.client.session_update
        for notification in self._memory:
            await update(notification)
        return {}


def _thread_cpu(thread: Any) -> float:
    """CPU seconds of ``thread`` so far (Linux; 0.0 where unknown)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError, TypeError):
        return 0.0


def serve(store_path: str | None, durable: bool = False) -> None:
    store: session_store.SessionStore | None = None
    if store_path == ":memory:":
        store = session_store.MemorySessionStore()
    elif store_path:
        store = session_store.SqliteSessionStore(store_path, durable=durable)

    def make(conn: Any) -> BenchStoreAgent:
        return BenchStoreAgent(conn, store)

    acp_trio.run_agent_stdio(make)
    if store is not None:
        store.close()


# -- the client -----------------------------------------------------------------------------------


class Counter:
    def __init__(self, conn: Any) -> None:
        self.updates = 0

    async def session_update(self, params: v1.SessionNotification) -> None:
        self.updates += 1


async def _prompt(conn: Any, session_id: str, text: str) -> v1.PromptResponse:
    response: v1.PromptResponse = await conn.agent.session_prompt(
        v1.PromptRequest(session_id=session_id, prompt=[v1.TextContentBlock(text=text)]), timeout=300
    )
    return response


async def _start(conn: Any) -> str:
    await conn.agent.initialize(v1.InitializeRequest(protocol_version=1), timeout=60)
    session = await conn.agent.session_new(v1.NewSessionRequest(cwd=str(_HERE), mcp_servers=[]))
    return str(session.session_id)


def _agent_argv(store: str | None, durable: bool = False) -> list[str]:
    argv = [str(Path(__file__).resolve()), "--serve-agent", *(["--store", store] if store else [])]
    return [*argv, "--durable"] if durable else argv


async def _cpu_turn(conn: Any, session_id: str) -> tuple[float, float]:
    """One streamed turn: the agent's CPU seconds per update, and the writer thread's share."""
    before = (await _prompt(conn, session_id, "cpu")).meta
    conn.handler.updates = 0
    await _prompt(conn, session_id, f"stream {STREAM_N}")
    after = (await _prompt(conn, session_id, "cpu")).meta
    if conn.handler.updates != STREAM_N:
        raise RuntimeError(f"{conn.handler.updates} of {STREAM_N} updates arrived")
    assert isinstance(before, dict) and isinstance(after, dict)
    return (after["cpu"] - before["cpu"]) / STREAM_N, (after["writer"] - before["writer"]) / STREAM_N


async def record_cpu(env: dict[str, str], store: str | None, repeats: int) -> dict[str, list[float]]:
    """Per-update agent CPU seconds of ``repeats`` streamed turns (after one warm-up turn each).

    Without a store: ``{"off": [...]}``.  With one: ``"on"`` (a recorded session), ``"writer"`` (the
    writer thread's share of those) and ``"idle"`` (a session the store does not record, its turns
    alternating with the recorded one's: the same process, the same moments).
    """
    out: dict[str, list[float]] = {"off": []} if store is None else {"on": [], "writer": [], "idle": []}
    async with spawn_agent(sys.executable, _agent_argv(store), client=Counter, env=env) as conn:
        recorded = await _start(conn)
        other = None
        if store is not None:  # a closed session is not recorded; the agent still streams in it
            other = str((await conn.agent.session_new(v1.NewSessionRequest(cwd=str(_HERE), mcp_servers=[]))).session_id)
            await conn.agent.session_close(v1.CloseSessionRequest(session_id=other))
        for k in range(repeats + 1):
            cpu, writer = await _cpu_turn(conn, recorded)
            if k:
                out["off" if store is None else "on"].append(cpu)
                if store is not None:
                    out["writer"].append(writer)
            if other is not None:
                cpu, _ = await _cpu_turn(conn, other)
                if k:
                    out["idle"].append(cpu)
    return out


async def load_times(env: dict[str, str], store: str, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds for ``session/load`` of a 10,000-update conversation and for sending them from memory."""
    loads, memory = [], []
    async with spawn_agent(sys.executable, _agent_argv(store), client=Counter, env=env) as conn:
        client: Counter = conn.handler
        session_id = await _start(conn)
        await _prompt(conn, session_id, f"stream {LOAD_N}")
        await _prompt(conn, session_id, "cpu")  # flushed
        request = v1.LoadSessionRequest(session_id=session_id, cwd=str(_HERE), mcp_servers=[])
        for k in range(repeats + 1):
            for which in ("memory", "load") if k % 2 else ("load", "memory"):
                client.updates = 0
                start = time.perf_counter()
                if which == "load":
                    await conn.agent.session_load(request, timeout=300)
                    expected = LOAD_N + 2  # the prompt's chunk, the streamed chunks, the "cpu" prompt's chunk
                else:
                    await conn.ext_request("_bench/memory", {"sessionId": "sess_memory", "n": LOAD_N}, timeout=300)
                    expected = LOAD_N
                elapsed = time.perf_counter() - start
                if client.updates != expected:
                    raise RuntimeError(f"{which}: {client.updates} of {expected} updates arrived")
                if k:
                    (loads if which == "load" else memory).append(elapsed)
    return loads, memory


async def latencies(
    env: dict[str, str], store: str | None, durable: bool, samples: int
) -> tuple[list[float], list[float]]:
    """Seconds from sending until the answer arrived: ``session/new``, and ``session/prompt`` of a
    ``stream 100`` turn (``samples`` of each, after warm-ups), against one agent process."""
    new_times, prompt_times = [], []
    async with spawn_agent(sys.executable, _agent_argv(store, durable), client=Counter, env=env) as conn:
        session_id = await _start(conn)
        request = v1.NewSessionRequest(cwd=str(_HERE), mcp_servers=[])
        for k in range(samples + LATENCY_WARMUP):
            start = time.perf_counter()
            await conn.agent.session_new(request)
            new_time = time.perf_counter() - start
            start = time.perf_counter()
            await _prompt(conn, session_id, f"stream {LATENCY_TURN}")
            prompt_time = time.perf_counter() - start
            if k >= LATENCY_WARMUP:
                new_times.append(new_time)
                prompt_times.append(prompt_time)
    return new_times, prompt_times


_LATENCY_SIDES: Final = (("off", False, False), ("on", True, False), ("durable", True, True))


async def run_all(env: dict[str, str], rounds: int, repeats: int, tmp: Path) -> dict[str, list[float]]:
    """Every timed sample, by kind: ``off`` / ``on`` / ``writer`` / ``idle`` (seconds per update),
    ``memory`` / ``load`` (seconds per 10k updates), ``new_*`` / ``prompt_*`` (seconds per answer;
    ``off``, ``on``, ``durable``)."""
    samples: dict[str, list[float]] = {"off": [], "on": [], "writer": [], "idle": [], "load": [], "memory": []}
    for side, _, _ in _LATENCY_SIDES:
        samples[f"new_{side}"], samples[f"prompt_{side}"] = [], []
    for i in range(rounds):
        for recorded in (False, True) if i % 2 == 0 else (True, False):
            for key, values in (
                await record_cpu(env, str(tmp / f"record-{i}.db") if recorded else None, repeats)
            ).items():
                samples[key].extend(values)
        loads, memory = await load_times(env, str(tmp / f"load-{i}.db"), repeats)
        samples["load"].extend(loads)
        samples["memory"].extend(memory)
        sides = _LATENCY_SIDES if i % 2 == 0 else _LATENCY_SIDES[::-1]
        for side, stored, durable in sides:
            path = str(tmp / f"latency-{side}-{i}.db") if stored else None
            new_times, prompt_times = await latencies(env, path, durable, repeats * 5)
            samples[f"new_{side}"].extend(new_times)
            samples[f"prompt_{side}"].extend(prompt_times)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--serve-agent", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--durable", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, help="agent processes per scenario and side (default 6, quick 2)")
    parser.add_argument("--repeats", type=int, help="timed turns per process (default 6, quick 3)")
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write the results as JSON (PATH.store.json)")
    parser.add_argument("--strict", action="store_true", help="exit 3 when a bar is missed")
    parser.add_argument("--startup-runs", type=int, help=argparse.SUPPRESS)  # bench_runtime's, passed by nox
    args = parser.parse_args(argv)
    if args.serve_agent:
        serve(args.store, args.durable)
        return 0
    rounds = args.rounds or (2 if args.quick else 6)
    repeats = args.repeats or (3 if args.quick else 6)

    print(f"\nSession store benchmark: Python {platform.python_version()}, SQLite {session_store_sqlite_version()}")
    print(f"acp-trio {dist_version('acp-trio')} [{Path(acp_trio.__file__ or '').parent}], trio {dist_version('trio')}")
    print(f"{rounds} rounds x {repeats} timed turns (+1 warm-up) per agent process")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="acp-bench-store-") as tmp:
        env = subprocess_env(str(Path(tmp) / "pycache"), acp_schema, acp_trio)
        try:
            samples = trio.run(run_all, env, rounds, repeats, Path(tmp))
        except (RuntimeError, OSError, acp_trio.RequestError, acp_trio.ConnectionClosed) as exc:
            print(f"session store benchmark failed: {exc!r}")
            return 1
    med = {k: statistics.median(v) for k, v in samples.items()}
    best = {k: min(v) for k, v in samples.items()}
    record_ratio = med["on"] / med["off"]
    load_ratio = med["load"] / med["memory"]
    rows = [
        (
            f"agent CPU per update, stream {STREAM_N // 1000}k, µs",
            med["off"] * 1e6,
            med["on"] * 1e6,
            record_ratio,
            f"≤ {RECORD_BAR:.2f}",
            record_ratio <= RECORD_BAR,
        ),
        (
            f"{LOAD_N // 1000}k updates to the client, ms",
            med["memory"] * 1e3,
            med["load"] * 1e3,
            load_ratio,
            f"≤ {LOAD_BAR:.1f}",
            load_ratio <= LOAD_BAR,
        ),
    ]
    print("\nAll timed samples: median / best (n)")
    for key, label, scale, unit in (
        ("off", "CPU/update, no store", 1e6, "µs"),
        ("on", "CPU/update, recording", 1e6, "µs"),
        ("writer", "  of which the writer thread", 1e6, "µs"),
        ("idle", "CPU/update, store on, session not recorded", 1e6, "µs"),
        ("memory", "send 10k updates from memory", 1e3, "ms"),
        ("load", "session/load of 10k updates", 1e3, "ms"),
    ):
        values = samples[key]
        print(f"  {label:<44} {med[key] * scale:8.2f} / {best[key] * scale:<8.2f} {unit} ({len(values)})")
    print("\nAnswer latency, client round trip: median (n); what the store adds")
    for what, label in (("new", "session/new"), ("prompt", f"session/prompt, stream {LATENCY_TURN}")):
        off = med[f"{what}_off"]
        cells = [f"no store {off * 1e3:6.2f} ms"]
        for side, name in (("on", "store"), ("durable", "durable=True")):
            value = med[f"{what}_{side}"]
            cells.append(f"{name} {value * 1e3:6.2f} ms (+{(value - off) * 1e3:.2f})")
        print(f"  {label:<30} " + "; ".join(cells) + f"  ({len(samples[f'{what}_off'])} each)")
    paired = statistics.median(on / idle for on, idle in zip(samples["on"], samples["idle"], strict=True))
    print(
        f"  recording, best vs best: {best['on'] / best['off']:.3f}; "
        f"in one process, recorded vs not (median of adjacent turns): {paired:.3f}"
    )
    print("\nSession store bars (medians)")
    print(f"  {'measure':<44} {'baseline':>10} {'store':>10} {'ratio':>7} {'bar':>8}  verdict")
    for measure, base, store, ratio, bar, ok in rows:
        print(f"  {measure:<44} {base:>10.2f} {store:>10.2f} {ratio:>7.3f} {bar:>8}  {'PASS' if ok else 'FAIL'}")
    print(f"  (baselines: no store / send from memory; store: recording / session/load; {_elapsed(started)})")
    if args.json:
        path = args.json.with_name(f"{args.json.stem}.store{args.json.suffix or '.json'}")
        report = {
            "python": platform.python_version(),
            "statistic": "median",
            "samples": samples,
            "bars": [
                {"measure": m, "baseline": b, "store": s, "ratio": r, "bar": bar, "pass": ok}
                for m, b, s, r, bar, ok in rows
            ],
        }
        path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    if args.strict and not all(row[-1] for row in rows):
        return 3
    return 0


def session_store_sqlite_version() -> str:
    import sqlite3

    return sqlite3.sqlite_version


def _elapsed(started: float) -> str:
    return f"took {time.perf_counter() - started:.0f} s"


if __name__ == "__main__":
    sys.exit(main())

"""The same pydantic-ai agent served over stdio by acp-trio and by pydantic-acp: cold start and a streamed turn.

Usage: ``python benchmarks/bench_pydantic_ai.py [--quick] [--startups S] [--rounds R] [--repeats K]
[--chunks N] [--json PATH]``.

The agent is ``examples/pydantic_ai_agent/agent.py``'s ``agent`` (a scripted ``FunctionModel``, no
network), served by:

- ``acp-trio``: ``python -m acp_trio.integrations.pydantic_ai examples.pydantic_ai_agent.agent:agent``
  with this interpreter (pydantic-ai as installed here), the acp-trio it imports (a compiled wheel in
  ``nox -s bench``); when that one is compiled, also ``acp-trio (pure)``: the same command with the
  repository's ``runtime/`` first on ``PYTHONPATH`` (pure Python);
- ``pydantic-acp``: ``tests/interop/pydantic_acp_same.py`` (``run_acp(agent=agent)``) with the Python of
  the pydantic-acp 1.10.0 environment (pydantic-ai-slim 2.52.0), installed and cached by
  ``tests/interop/real_agents.py`` (``install_pydantic_acp``; skipped with the reason when it cannot be).

Measures, protocol version 1 (pydantic-acp speaks no other), one JSON-RPC client in this process
over the agent's pipes:

1. cold start: spawn → ``initialize`` answered → ``session/new`` answered (ms; the median of
   ``--startups`` runs per server after two warm-up runs, servers alternating);
2. a streamed turn: ``session/prompt`` ``stream N`` (the model yields N text chunks at once): the
   ``session/update`` notifications received until the prompt's answer, per second (the median of
   ``--repeats`` timed prompts after one warm-up, in each of ``--rounds`` server processes), and how
   many updates the turn brought (a server may merge chunks).

3. the floor: the same ``stream N`` run in one process by pydantic-ai alone
   (``agent.run_stream_events``, no ACP), with each server's Python: its events per second.

No bar: the figures go side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

_HERE: Final = Path(__file__).resolve().parent
_ROOT: Final = _HERE.parent
sys.path.insert(0, str(_ROOT / "tests" / "interop"))

from _shared import dist_version, runtime_build, use_source_tree  # noqa: E402
from bench_runtime import cpu_times, describe_load  # noqa: E402

use_source_tree()
from real_agents import PYDANTIC_ACP_VERSION, PYDANTIC_AI_VERSION, Unavailable, install_pydantic_acp  # noqa: E402

AGENT_REF: Final = "examples.pydantic_ai_agent.agent:agent"
ANSWER_TIMEOUT: Final = 120.0
"""Seconds any one answer may take before the run is abandoned (a bound, not a bar)."""


@dataclass
class Server:
    """One way to serve the agent: its label, command, environment, and what it runs on."""

    label: str
    argv: list[str]
    env: dict[str, str]
    about: str


@dataclass
class Results:
    startup_init: dict[str, list[float]] = field(default_factory=dict)
    startup_new: dict[str, list[float]] = field(default_factory=dict)
    turn_seconds: dict[str, list[float]] = field(default_factory=dict)
    turn_updates: dict[str, list[int]] = field(default_factory=dict)


class Client:
    """A minimal ACP v1 client over an agent process's pipes: requests out, answers and
    notifications in through a reader thread (so every wait is bounded)."""

    def __init__(self, server: Server) -> None:
        self.start = time.perf_counter()
        self.proc = subprocess.Popen(
            server.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=server.env,
            cwd=_ROOT,  # where ``examples`` is a package (the session's cwd is ``cwd``)
        )
        self.label = server.label
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self.inbox.put(json.loads(line))
        self.inbox.put(None)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """Send a request; return its answer's result and how many ``session/update`` came before it."""
        self.next_id += 1
        ident = self.next_id
        self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        updates = 0
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while True:
            try:
                message = self.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"{self.label}: no answer to {method} within {ANSWER_TIMEOUT:.0f} s") from None
            if message is None:
                raise RuntimeError(f"{self.label}: the agent exited before answering {method}")
            if message.get("method") == "session/update":
                updates += 1
            elif "method" in message and "id" in message:  # a request to the client: not offered here
                error = {"code": -32601, "message": f"not offered by the benchmark client: {message['method']}"}
                self.send({"jsonrpc": "2.0", "id": message["id"], "error": error})
            elif message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{self.label}: {method} answered {message['error']}")
                result: dict[str, Any] = message["result"]
                return result, updates

    def initialize(self) -> None:
        params = {
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
            "clientInfo": {"name": "bench-pydantic-ai", "version": "1"},
        }
        self.request("initialize", params)

    def new_session(self, cwd: str) -> str:
        result, _ = self.request("session/new", {"cwd": cwd, "mcpServers": []})
        session_id: str = result["sessionId"]
        return session_id

    def close(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def cold_start(server: Server, cwd: str) -> tuple[float, float]:
    """Seconds from spawning the server to the ``initialize`` answer, and to the ``session/new`` answer."""
    client = Client(server)
    try:
        client.initialize()
        initialized = time.perf_counter() - client.start
        client.new_session(cwd)
        created = time.perf_counter() - client.start
    finally:
        client.close()
    return initialized, created


def streamed_turns(server: Server, cwd: str, chunks: int, repeats: int) -> list[tuple[float, int]]:
    """One server process: a warm-up prompt, then ``repeats`` timed ``stream N`` prompts: (seconds, updates)."""
    client = Client(server)
    samples: list[tuple[float, int]] = []
    try:
        client.initialize()
        session_id = client.new_session(cwd)
        for i in range(repeats + 1):
            prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": f"stream {chunks}"}]}
            started = time.perf_counter()
            result, updates = client.request("session/prompt", prompt)
            elapsed = time.perf_counter() - started
            if result.get("stopReason") != "end_turn":
                raise RuntimeError(f"{server.label}: the turn ended {result!r}")
            if i:
                samples.append((elapsed, updates))
    finally:
        client.close()
    return samples


FLOOR: Final = """\
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[1])
from examples.pydantic_ai_agent.agent import agent
async def turn(n):
    started, events = time.perf_counter(), 0
    async with agent.run_stream_events(f"stream {n}") as stream:
        async for _ in stream:
            events += 1
    return time.perf_counter() - started, events
async def main(n, repeats):
    await turn(n)
    print(json.dumps([await turn(n) for _ in range(repeats)]))
asyncio.run(main(int(sys.argv[2]), int(sys.argv[3])))
"""
"""pydantic-ai alone: ``python -c FLOOR ROOT N REPEATS`` prints ``[[seconds, events], ...]``."""


def floor_rate(server: Server, chunks: int, repeats: int) -> float:
    """Events per second of ``stream N`` run by pydantic-ai alone with ``server``'s Python (the median)."""
    argv = [server.argv[0], "-c", FLOOR, str(_ROOT), str(chunks), str(repeats)]
    proc = subprocess.run(argv, env=server.env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{server.label}: pydantic-ai alone failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    samples = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(statistics.median(events / seconds for seconds, events in samples))


def servers(with_pure: bool) -> tuple[list[Server], list[str]]:
    """The servers to measure, and notes on those left out."""
    notes: list[str] = []
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    ours = [sys.executable, "-m", "acp_trio.integrations.pydantic_ai", AGENT_REF]
    build = runtime_build()
    found = [
        Server(
            "acp-trio",
            ours,
            env,
            f"acp-trio {dist_version('acp-trio')} ({build}), pydantic-ai-slim {dist_version('pydantic-ai-slim')}, "
            f"{sys.executable}",
        )
    ]
    if with_pure and build.startswith("compiled"):
        pure_env = {**env, "PYTHONPATH": os.pathsep.join([str(_ROOT / "runtime"), str(_ROOT / "generated")])}
        found.append(Server("acp-trio (pure)", ours, pure_env, "the same, runtime/ from the source tree (pure Python)"))
    try:
        python = install_pydantic_acp()
    except Unavailable as exc:
        notes.append(f"pydantic-acp left out: {exc}")
    else:
        script = str(_ROOT / "tests" / "interop" / "pydantic_acp_same.py")
        about = f"pydantic-acp {PYDANTIC_ACP_VERSION}, pydantic-ai-slim {PYDANTIC_AI_VERSION}, {python}"
        found.append(Server("pydantic-acp", [str(python), script], env, about))
    return found, notes


def rates(results: Results, label: str) -> list[float]:
    """Updates per second of each timed turn of server ``label``."""
    return [u / s for s, u in zip(results.turn_seconds[label], results.turn_updates[label], strict=True)]


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer runs and a shorter turn")
    parser.add_argument("--startups", type=int, help="cold starts per server (default 9, quick 3)")
    parser.add_argument("--rounds", type=int, help="server processes per server for the turn (default 3, quick 1)")
    parser.add_argument("--repeats", type=int, help="timed turns per process (default 3, quick 2)")
    parser.add_argument("--chunks", type=int, help="text chunks of the streamed turn (default 5000, quick 1000)")
    parser.add_argument("--no-pure", action="store_true", help="do not also run acp-trio from the source tree")
    parser.add_argument("--json", type=Path, help="also write the results as JSON (PATH with '.pydantic-ai')")
    parser.add_argument("--strict", action="store_true", help="accepted for nox -s bench; there is no bar")
    args = parser.parse_args(argv)
    startups = args.startups or (3 if args.quick else 9)
    rounds = args.rounds or (1 if args.quick else 3)
    repeats = args.repeats or (2 if args.quick else 3)
    chunks = args.chunks or (1000 if args.quick else 5000)
    print("\nThe same pydantic-ai agent (examples/pydantic_ai_agent) over stdio, protocol 1: acp-trio and pydantic-acp")
    found, notes = servers(not args.no_pure)
    for server in found:
        print(f"  {server.label}: {server.about}")
    for note in notes:
        print(f"  ({note})")
    print(f"  {startups} cold starts per server; {rounds} processes x (1 warm-up + {repeats} timed 'stream {chunks}')")
    started, load = time.perf_counter(), cpu_times()
    results = Results()
    with tempfile.TemporaryDirectory(prefix="acp-bench-pydantic-ai-") as cwd:
        for server in found:  # warm-up: byte-code caches, page cache
            cold_start(server, cwd)
            cold_start(server, cwd)
            results.startup_init[server.label], results.startup_new[server.label] = [], []
            results.turn_seconds[server.label], results.turn_updates[server.label] = [], []
        for i in range(startups):
            for server in found if i % 2 == 0 else found[::-1]:
                init, new = cold_start(server, cwd)
                results.startup_init[server.label].append(init)
                results.startup_new[server.label].append(new)
        for i in range(rounds):
            for server in found if i % 2 == 0 else found[::-1]:
                for seconds, updates in streamed_turns(server, cwd, chunks, repeats):
                    results.turn_seconds[server.label].append(seconds)
                    results.turn_updates[server.label].append(updates)
        floors = {server.label: floor_rate(server, chunks, repeats) for server in found}
    labels = [s.label for s in found]
    rows: list[tuple[str, dict[str, str]]] = [
        ("spawn → initialize answered, ms", {k: f"{_median(results.startup_init[k]) * 1e3:,.0f}" for k in labels}),
        ("spawn → session/new answered, ms", {k: f"{_median(results.startup_new[k]) * 1e3:,.0f}" for k in labels}),
        (
            f"'stream {chunks}' turn, updates/s",
            {k: f"{_median(rates(results, k)):,.0f}" for k in labels},
        ),
        (
            "pydantic-ai alone, events/s",
            {k: f"{floors[k]:,.0f}" for k in labels},
        ),
        (f"'stream {chunks}' turn, ms", {k: f"{_median(results.turn_seconds[k]) * 1e3:,.0f}" for k in labels}),
        (
            f"'stream {chunks}' turn, updates",
            {k: f"{_median([float(u) for u in results.turn_updates[k]]):,.0f}" for k in labels},
        ),
    ]
    width = max(len(k) for k in labels) + 4
    print(f"  {'':<36}" + "".join(f"{k:>{width}}" for k in labels))
    for name, cells in rows:
        print(f"  {name:<36}" + "".join(f"{cells[k]:>{width}}" for k in labels))
    print(f"(pydantic-ai benchmark took {time.perf_counter() - started:.0f} s; {describe_load(load, cpu_times())})")
    if args.json:
        path = args.json.with_name(f"{args.json.stem}.pydantic-ai{args.json.suffix or '.json'}")
        report = {
            "servers": {s.label: s.about for s in found},
            "notes": notes,
            "chunks": chunks,
            "startup_initialize_seconds": results.startup_init,
            "startup_session_new_seconds": results.startup_new,
            "turn_seconds": results.turn_seconds,
            "turn_updates": results.turn_updates,
            "pydantic_ai_alone_events_per_second": floors,
        }
        path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

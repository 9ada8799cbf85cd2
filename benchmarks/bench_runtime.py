"""acp-trio's runtime vs the official ACP Python SDK (``agent-client-protocol``) and a raw baseline, over stdio.

Usage::

    python benchmarks/bench_runtime.py [--quick] [--rounds R] [--repeats K] [--json out.json] [--strict]

Both ``acp_trio`` / ``acp_schema`` and the official SDK (import package ``acp``) must be importable
by this interpreter (the repository's ``generated/`` and ``runtime/`` are used when ``acp_trio`` is
not installed).  Every scenario runs between two processes over pipes; the scripts are in
``benchmarks/runtime/`` (``common.py`` describes the prompt commands).

Scenarios (issue 3's bars):

1. ``stream``: one ``session/prompt`` during which the agent sends 20,000 ``agent_message_chunk``
   ``session/update`` notifications, then ends the turn.  Timed by the client from sending the
   prompt to accepting its response; the client's ``session_update`` handler has counted all 20,000
   by then.  acp-trio on both sides vs the official SDK on both sides vs the raw baseline (two
   Python processes, no framework: the child writes one ``orjson.dumps`` line per update and the
   response line, the parent reads lines and ``orjson.loads`` each).  Bars: acp-trio's rate ≥ 4 x
   the official one; acp-trio's time ≤ 3 x the raw one.
2. ``read``: one prompt during which the agent issues 2,000 ``fs/read_text_file`` requests to the
   client (answered from memory), one after another, then with 64 in flight (64 worker tasks on
   both sides).  Bars: sequential rate ≥ the official one; 64 in flight ≥ 2 x the official one.
3. ``startup``: wall time from spawning the agent to reading its ``initialize`` response, measured
   by a neutral client (``subprocess`` and a blocking read): acp-trio's example agent
   (``python -m acp_trio.demo --serve-agent``) vs a minimal official-SDK agent
   (``runtime/official_agent.py``).  Fresh processes, alternating, byte code cached for both (a
   private PYTHONPYCACHEPREFIX), after two warm-up runs each.  Bar: ≤ 0.6 x the official time.

Statistics: each client process runs one warm-up prompt, then ``--repeats`` timed prompts per
scenario; ``--rounds`` client processes per side, alternating sides.  Verdicts use the **median**
of all timed prompts (the best is shown too); startup uses the median of ``--startup-runs`` runs.

Exit status: 0; 1 if a scenario failed to run; 3 with ``--strict`` if a bar is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

_HERE: Final = Path(__file__).resolve().parent
_SCRIPTS: Final = _HERE / "runtime"
_REPO: Final = _HERE.parent

from _shared import dist_version, subprocess_env  # noqa: E402  (after the constants it does not need)

try:
    import acp_schema
    import acp_trio
except ImportError:  # not installed: use the source tree
    sys.path[:0] = [str(_REPO / "generated"), str(_REPO / "runtime")]
    import acp_schema
    import acp_trio

STREAM_N: Final = 20_000
READ_N: Final = 2_000
WIDTH: Final = 64
STREAM: Final = f"stream {STREAM_N}"
READ_SEQ: Final = f"read {READ_N} 1"
READ_PAR: Final = f"read {READ_N} {WIDTH}"

INITIALIZE: Final = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,'
    b'"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true},'
    b'"clientInfo":{"name":"bench","version":"1"}}}\n'
)

SIDES: Final = {
    "acp-trio": ("trio_client.py", (STREAM, READ_SEQ, READ_PAR)),
    "official": ("official_client.py", (STREAM, READ_SEQ, READ_PAR)),
    "raw": ("raw_client.py", (STREAM,)),
}


def cpu_times() -> list[int] | None:
    """The machine's CPU counters (Linux ``/proc/stat``: user nice system idle iowait irq softirq steal), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    return [int(x) for x in fields[1:9]] if fields and fields[0] == "cpu" else None


def describe_load(before: list[int] | None, after: list[int] | None) -> str:
    """How busy the machine was during the run: the share of CPU time spent idle and stolen by the host."""
    if before is None or after is None:
        return "machine load: unknown"
    delta = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(delta) or 1
    idle, steal = delta[3] + delta[4], delta[7]
    return (
        f"machine during the run: {100 * idle / total:.0f}% idle, {100 * steal / total:.0f}% stolen by the host "
        f"({os.cpu_count()} CPUs); other load or steal makes both sides slower and the ratios noisier"
    )


# -- scenarios 1 and 2 ----------------------------------------------------------------------------


def run_client(side: str, env: dict[str, str], warmup: int, repeats: int) -> dict[str, list[float]]:
    script, commands = SIDES[side]
    argv = [sys.executable, str(_SCRIPTS / script), "--warmup", str(warmup), "--repeats", str(repeats), *commands]
    proc = subprocess.run(argv, env=env, cwd=_SCRIPTS, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{side} client failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, list[float]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run_scenarios(env: dict[str, str], rounds: int, repeats: int) -> dict[str, dict[str, list[float]]]:
    """Seconds per prompt: ``{side: {command: [seconds, ...]}}``, the sides alternating each round."""
    samples: dict[str, dict[str, list[float]]] = {side: {} for side in SIDES}
    order = list(SIDES)
    for i in range(rounds):
        for side in order if i % 2 == 0 else order[::-1]:
            for command, times in run_client(side, env, 1, repeats).items():
                samples[side].setdefault(command, []).extend(times)
    return samples


# -- scenario 3 -----------------------------------------------------------------------------------


def demo_agent_command(env: dict[str, str]) -> tuple[list[str], str]:
    """``python -m acp_trio.demo --serve-agent`` if it answers initialize, else the bench agent script."""
    demo = [sys.executable, "-m", "acp_trio.demo", "--serve-agent"]
    try:
        startup_time(demo, env)
    except Exception as exc:
        print(f"  (the example agent does not answer initialize: {exc}; using runtime/trio_agent.py)")
        return [sys.executable, str(_SCRIPTS / "trio_agent.py")], "runtime/trio_agent.py"
    return demo, "python -m acp_trio.demo --serve-agent"


def startup_time(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning ``argv`` to reading its initialize response line."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=_SCRIPTS
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(INITIALIZE)
        proc.stdin.flush()
        line = proc.stdout.readline()
        elapsed = time.perf_counter() - start
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    answer = json.loads(line) if line.strip() else None
    if not (isinstance(answer, dict) and answer.get("id") == 0 and "protocolVersion" in answer.get("result", {})):
        raise RuntimeError(f"no initialize response from {argv[1:]}: {line[:200]!r}")
    return elapsed


def run_startup(env: dict[str, str], runs: int) -> tuple[dict[str, list[float]], str]:
    trio_cmd, trio_label = demo_agent_command(env)
    commands = {"acp-trio": trio_cmd, "official": [sys.executable, str(_SCRIPTS / "official_agent.py")]}
    for argv in commands.values():  # warm up: byte-code cache, page cache
        startup_time(argv, env)
        startup_time(argv, env)
    samples: dict[str, list[float]] = {k: [] for k in commands}
    order = list(commands)
    for i in range(runs):
        for k in order if i % 2 == 0 else order[::-1]:
            samples[k].append(startup_time(commands[k], env))
    return samples, trio_label


# -- report ---------------------------------------------------------------------------------------


@dataclass
class Row:
    measure: str
    values: dict[str, float | None]  # per side
    ratio: float
    bar: str
    ok: bool


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def build_rows(samples: dict[str, dict[str, list[float]]], startup: dict[str, list[float]]) -> list[Row]:
    """The bars, from the medians."""

    def ms(side: str, command: str) -> float:
        return _median(samples[side][command]) * 1e3

    def per_s(side: str, command: str, n: int) -> float:
        return n / _median(samples[side][command])

    t, o, r = (per_s(side, STREAM, STREAM_N) for side in ("acp-trio", "official", "raw"))
    stream_rate = Row("stream 20k updates, msg/s", {"acp-trio": t, "official": o, "raw": r}, t / o, "≥ 4", t / o >= 4)
    t, o, r = (ms(side, STREAM) for side in ("acp-trio", "official", "raw"))
    stream_raw = Row("stream 20k updates, ms", {"acp-trio": t, "official": o, "raw": r}, t / r, "≤ 3 x raw", t / r <= 3)
    rows = [stream_rate, stream_raw]
    for command, label, bar in ((READ_SEQ, "sequential", 1), (READ_PAR, f"{WIDTH} in flight", 2)):
        t, o = per_s("acp-trio", command, READ_N), per_s("official", command, READ_N)
        values: dict[str, float | None] = {"acp-trio": t, "official": o, "raw": None}
        rows.append(Row(f"fs/read_text_file {label}, req/s", values, t / o, f"≥ {bar}", t / o >= bar))
    t, o = _median(startup["acp-trio"]) * 1e3, _median(startup["official"]) * 1e3
    values = {"acp-trio": t, "official": o, "raw": None}
    rows.append(Row("spawn → initialize response, ms", values, t / o, "≤ 0.6", t / o <= 0.6))
    return rows


def _cell(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def print_details(samples: dict[str, dict[str, list[float]]], startup: dict[str, list[float]]) -> None:
    print("\nPer scenario, ms per prompt: median / best (n timed prompts)")
    commands = [STREAM, READ_SEQ, READ_PAR]
    print(f"  {'scenario':<16} " + "  ".join(f"{side:>24}" for side in SIDES))
    for command in commands:
        cells = []
        for side in SIDES:
            xs = samples[side].get(command)
            cells.append(f"{_median(xs) * 1e3:>9.1f} / {min(xs) * 1e3:<7.1f}({len(xs):>2})" if xs else f"{'-':>24}")
        print(f"  {command:<16} " + "  ".join(f"{c:>24}" for c in cells))
    cells = [
        f"{_median(startup[s]) * 1e3:>9.1f} / {min(startup[s]) * 1e3:<7.1f}({len(startup[s]):>2})"
        if s in startup
        else f"{'-':>24}"
        for s in SIDES
    ]
    print(f"  {'startup':<16} " + "  ".join(f"{c:>24}" for c in cells))


def print_table(rows: list[Row]) -> None:
    print("\nRuntime bars (medians)")
    print(f"  {'measure':<38} {'acp-trio':>10} {'official':>10} {'raw':>10} {'ratio':>7} {'bar':>10}  verdict")
    for row in rows:
        v = row.values
        print(
            f"  {row.measure:<38} {_cell(v['acp-trio']):>10} {_cell(v['official']):>10} {_cell(v['raw']):>10}"
            f" {row.ratio:>7.2f} {row.bar:>10}  {'PASS' if row.ok else 'FAIL'}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and start-up runs")
    parser.add_argument("--rounds", type=int, help="client processes per side (default 5, quick 2)")
    parser.add_argument("--repeats", type=int, help="timed prompts per scenario per process (default 3, quick 2)")
    parser.add_argument("--startup-runs", type=int, help="start-up measurements per side (default 11, quick 5)")
    parser.add_argument(
        "--json",
        metavar="PATH",
        type=Path,
        help="also write the results as JSON (to PATH with '.runtime' before its suffix)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 3 when a bar is missed")
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 5)
    repeats = args.repeats or (2 if args.quick else 3)
    startup_runs = args.startup_runs or (5 if args.quick else 11)

    print(f"\nRuntime benchmark: Python {platform.python_version()} ({sys.executable})")
    print(
        f"acp-trio {dist_version('acp-trio')} [{Path(acp_trio.__file__ or '').parent}], trio {dist_version('trio')}; "
        f"agent-client-protocol {dist_version('agent-client-protocol')}; orjson {dist_version('orjson')}"
    )
    print(f"{rounds} client processes per side x (1 warm-up + {repeats} timed prompts) per scenario;", end=" ")
    print(f"{startup_runs} start-ups per side")
    started, load_before = time.perf_counter(), cpu_times()
    with tempfile.TemporaryDirectory(prefix="acp-bench-pycache-") as pycache:
        env = subprocess_env(pycache, acp_schema, acp_trio)
        try:
            startup, trio_agent = run_startup(env, startup_runs)
            samples = run_scenarios(env, rounds, repeats)
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
            print(f"runtime benchmark failed: {exc}")
            return 1
    print(f"start-up: acp-trio agent = {trio_agent}; official agent = runtime/official_agent.py")
    rows = build_rows(samples, startup)
    print_details(samples, startup)
    print_table(rows)
    print(
        f"\n(runtime benchmark took {time.perf_counter() - started:.0f} s; {describe_load(load_before, cpu_times())})"
    )

    if args.json:
        path = args.json.with_name(f"{args.json.stem}.runtime{args.json.suffix or '.json'}")
        report: dict[str, Any] = {
            "python": platform.python_version(),
            "versions": {d: dist_version(d) for d in ("acp-trio", "trio", "agent-client-protocol", "orjson")},
            "statistic": "median",
            "seconds_per_prompt": samples,
            "startup_seconds": startup,
            "startup_trio_agent": trio_agent,
            "bars": [
                {"measure": r.measure, "values": r.values, "ratio": r.ratio, "bar": r.bar, "pass": r.ok} for r in rows
            ],
        }
        path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {path}")

    if args.strict and not all(r.ok for r in rows):
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

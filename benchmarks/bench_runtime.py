"""acp-trio's runtime beside the official TypeScript SDK, the official Python SDK and a raw baseline, over stdio.

Usage::

    python benchmarks/bench_runtime.py [--quick] [--rounds R] [--repeats K] [--startup-runs S] [--json PATH]
                                       [--strict] [--placement kernel|same|split]

``acp_trio`` / ``acp_schema`` and the official Python SDK (``agent-client-protocol`` 0.12.1, import
package ``acp``) must be importable by this interpreter (the repository's ``generated/`` and
``runtime/`` are used when ``acp_trio`` is not installed).  The TypeScript side needs ``node`` and
``npm`` (20 or later): ``@agentclientprotocol/sdk`` 2.4.0 and zod are installed once by the interop
tests' installer (``tests/interop/real_agents.install_ts_sdk``, into
``${ACP_TRIO_CACHE:-~/.cache/acp-trio}/interop/npm-2.4.0``); without them the TypeScript column says
"-" and its bars are skipped.  Every scenario runs between two processes over pipes; the scripts are
in ``benchmarks/runtime/`` (``common.py`` describes the prompt commands):

* ``trio_agent.py`` / ``trio_client.py``: acp-trio as README.md teaches (``run_agent_stdio``,
  ``spawn_agent``, typed peers);
* ``trio_floor_agent.py``: the floor under any trio agent: trio and orjson only (no typed objects,
  no JSON-RPC layer), a task per request in flight, a raw wake-up per response;
* ``ts_*.mjs``: the TypeScript SDK as its README teaches (``agent()`` / ``client()`` builders,
  ``ndJsonStream`` over process stdio);
* ``official_*.py``: the official Python SDK (``run_agent``, ``spawn_agent_process``);
* ``raw_*.py``: no framework (blocking stdio, one ``orjson.dumps`` line per message, ``orjson.loads``
  per line read; requests answered at once, one write and flush each).

Pairs: each SDK's client with its own agent; for streaming and mixed updates two cross pairs,
acp-trio's agent → the raw client and the raw agent → acp-trio's client, to show each side's share
(and for issue 14's agent-side bars); and the bare trio
agent → the raw client (streaming, and reads one at a time and 64 in flight), the "floor" rows: what
trio itself leaves of raw's speed for an agent shaped like the bench's.

Scenarios (each one ``session/prompt``, timed by the client from sending it to accepting its response):

1. ``stream 20000``: 20,000 ``agent_message_chunk`` updates; each side's CPU per update (the agent's
   from ``/proc/<pid>/task/*/schedstat``, the client's own process CPU), per measured prompt.
2. ``mixed 20000``: the same 20,000 chunks with a ``tool_call`` and a ``tool_call_update`` after
   every 10 (24,000 updates).
3. ``read 2000 1`` / ``permission 2000``: 2,000 ``fs/read_text_file`` / ``session/request_permission``
   round trips from the agent to the client, one at a time.
4. ``read 2000 64``: 2,000 ``fs/read_text_file`` with 64 in flight (acp-trio's agent as README.md
   teaches: ``send_requests``; and, on its own row, with a task per request in flight, as the floor
   agent has).
5. start-up: wall time from spawning an agent to reading its ``initialize`` response, measured by a
   neutral client (``subprocess`` and a blocking read), and the agent's RSS (``VmRSS``) right then:
   acp-trio's agent of README.md "Write an agent" (``runtime/readme_agent.py``), acp-trio's example
   agent (``python -m acp_trio.demo --serve-agent``, for issue 3's bar), the TypeScript agent, the
   official agent and the raw agent.  Fresh processes, alternating, byte code cached (a private
   PYTHONPYCACHEPREFIX), after two warm-up runs each.
6. agent peak RSS: ``VmHWM`` of the agent read by its client after the last prompt of a client
   process (all of scenarios 1-4), just before the agent's stdin is closed.

Statistics: each client process runs one warm-up prompt, then ``--repeats`` timed prompts per
scenario; ``--rounds`` client processes per pair, alternating the order.  Every figure is the
**median** over all timed prompts (rates: the command's count ÷ the median time); start-up: the
median of ``--startup-runs`` runs.  "× raw" is the cost relative to raw (time, CPU or memory ÷
raw's; for rates raw's rate ÷ the side's): 1.0 is raw, 2.0 twice raw's cost.  The raw pair's
round trips are bimodal on a small machine: two processes blocked in ``read`` on a pipe take about
10 µs a round trip when the kernel keeps them on one CPU and about 50 µs when each wakes the other
across CPUs, so raw's sequential rates (and the ratios to them) can move by 5 x from run to run,
and its streaming time by 2 x (about 25 or 50 ms); the per-pair details print the best beside the
median.

Placement (``--placement``): by default the kernel places each pair's two processes, as it would a
user's, and the bimodality above is its choice of one CPU or two.  ``same`` runs both on one CPU
(round trips cost no cross-CPU wake-up; a stream is as slow as both sides' CPU added up); ``split``
runs the client on one CPU and moves every thread of its agent to another as soon as the client
has spawned it (the warm-up prompt absorbs the move): streams overlap, every round trip pays two
cross-CPU wake-ups.  Every pair, raw included, runs in the same placement.  The start-up scenario
is never pinned.

Bars: issue 14's (acp-trio vs the TypeScript SDK and raw) and issue 3's (vs the official Python SDK),
printed as PASS/FAIL lines (SKIP when the TypeScript SDK is not measured).

Exit status: 0; 1 if a scenario failed to run; 3 with ``--strict`` if a bar is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

_HERE: Final = Path(__file__).resolve().parent
_SCRIPTS: Final = _HERE / "runtime"
_REPO: Final = _HERE.parent

from _shared import dist_version, runtime_build, subprocess_env, use_source_tree  # noqa: E402  (after the constants it does not need)

use_source_tree()
import acp_schema  # noqa: E402
import acp_trio  # noqa: E402

STREAM_N: Final = 20_000
READ_N: Final = 2_000
PERMISSION_N: Final = 2_000
WIDTH: Final = 64
STREAM: Final = f"stream {STREAM_N}"
MIXED: Final = f"mixed {STREAM_N}"
MIXED_UPDATES: Final = STREAM_N + 2 * (STREAM_N // 10)  # common.expected("mixed", STREAM_N)
READ_SEQ: Final = f"read {READ_N} 1"
PERMISSION_SEQ: Final = f"permission {PERMISSION_N}"
READ_PAR: Final = f"read {READ_N} {WIDTH}"
READ_PAR_TASKS: Final = f"{READ_PAR} tasks"  # acp-trio's agent with a task per request in flight
COMMANDS: Final = (STREAM, MIXED, READ_SEQ, PERMISSION_SEQ, READ_PAR)
TS_SDK: Final = "@agentclientprotocol/sdk 2.4.0"
RSS_BAR_MB: Final = 35.0

INITIALIZE: Final = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,'
    b'"clientCapabilities":{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true},'
    b'"clientInfo":{"name":"bench","version":"1"}}}\n'
)

SIDES: Final = ("acp-trio", "ts", "official", "raw")
SIDE_NAMES: Final = {"acp-trio": "acp-trio", "ts": "TS SDK", "official": "official", "raw": "raw"}


@dataclass(frozen=True)
class Pair:
    key: str
    label: str
    argv: list[str]
    commands: tuple[str, ...]


def pairs(python: str, with_ts: bool) -> list[Pair]:
    """The client processes to run: each SDK's pair, the two cross pairs (streaming and mixed), the floor."""
    script = lambda name: str(_SCRIPTS / name)  # noqa: E731
    found = [
        Pair(
            "acp-trio",
            "acp-trio client ↔ acp-trio agent",
            [python, script("trio_client.py")],
            (*COMMANDS, READ_PAR_TASKS),
        ),
        Pair("ts", "TS SDK client ↔ TS SDK agent", ["node", script("ts_client.mjs")], COMMANDS),
        Pair("official", "official client ↔ official agent", [python, script("official_client.py")], COMMANDS),
        Pair("raw", "raw client ↔ raw agent", [python, script("raw_client.py")], COMMANDS),
        Pair(
            "trio-agent→raw",
            "raw client ↔ acp-trio agent",
            [python, script("raw_client.py"), "--agent", "trio_agent.py"],
            (STREAM, MIXED),
        ),
        Pair(
            "raw-agent→trio",
            "acp-trio client ↔ raw agent",
            [python, script("trio_client.py"), "--agent", "raw_agent.py"],
            (STREAM, MIXED),
        ),
        Pair(
            "trio-floor",
            "raw client ↔ bare trio agent (floor)",
            [python, script("raw_client.py"), "--agent", "trio_floor_agent.py"],
            (STREAM, READ_SEQ, READ_PAR),
        ),
    ]
    return [p for p in found if with_ts or p.key != "ts"]


def ts_sdk_dir() -> tuple[Path | None, str]:
    """The npm directory holding the TypeScript SDK (installed on first use by the interop tests'
    installer), or None and why not."""
    sys.path.insert(0, str(_REPO / "tests" / "interop"))
    try:
        from real_agents import Unavailable, install_ts_sdk
    except ImportError as exc:
        return None, f"not measured: tests/interop/real_agents.py not importable ({exc})"
    finally:
        sys.path.remove(str(_REPO / "tests" / "interop"))
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None, "not measured: node/npm not on PATH (install Node.js 20 or later)"
    try:
        return install_ts_sdk(), ""
    except Unavailable as exc:
        return None, f"not measured: {str(exc).splitlines()[0]}"


def node_version() -> str:
    try:
        return subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "not found"


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


# -- scenarios 1-4 and 6: client processes --------------------------------------------------------


@dataclass
class Samples:
    """Per pair: seconds per timed prompt, each side's CPU seconds per timed prompt, the agent's peak RSS."""

    seconds: dict[str, dict[str, list[float]]]
    cpu: dict[str, dict[str, dict[str, list[float]]]]  # pair → command → "agent"/"client" → [s, ...]
    hwm_kib: dict[str, list[int]]


PIN: tuple[int, int] | None = None
"""CPUs for the client and its agent (``--placement same`` or ``split``), or ``None`` to let the kernel place them."""


def run_client(pair: Pair, env: dict[str, str], warmup: int, repeats: int) -> dict[str, Any]:
    argv = [*pair.argv, "--warmup", str(warmup), "--repeats", str(repeats), *pair.commands]
    pin = PIN
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=_SCRIPTS,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, {pin[0]})) if pin is not None else None,
    )
    done = threading.Event()
    split = pin is not None and pin[0] != pin[1]  # the agent inherits the client's CPU; move it
    watcher = threading.Thread(target=pin_children, args=(proc.pid, pin[1], done), daemon=True) if split else None
    if watcher is not None:
        watcher.start()
    try:
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if watcher is not None:
        watcher.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{pair.label} failed (exit {proc.returncode}):\n{stderr[-3000:]}")
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


def pin_children(pid: int, cpu: int, done: threading.Event) -> None:
    """Until ``done``: move every thread of ``pid``'s child processes (the agent) to ``cpu``.

    Polls every 2 ms until the agent is found and moved, then every 100 ms: the threads the agent
    starts later inherit its CPU, and a poll every 2 ms through the whole run took CPU time (and
    wake-ups) from the pair it measures, on either CPU (this process is not pinned)."""
    pinned: set[int] = set()
    while not done.wait(0.1 if pinned else 0.002):
        children: list[str] = []
        try:  # every thread's children: trio starts processes from a worker thread
            for task in os.listdir(f"/proc/{pid}/task"):
                try:
                    children += Path(f"/proc/{pid}/task/{task}/children").read_text(encoding="ascii").split()
                except OSError:
                    continue
        except OSError:
            return
        for child in children:
            try:
                threads = {int(t) for t in os.listdir(f"/proc/{child}/task")}
            except OSError:
                continue
            for tid in threads - pinned:
                try:
                    os.sched_setaffinity(tid, {cpu})
                    pinned.add(tid)
                except OSError:
                    pass


def run_scenarios(run: list[Pair], env: dict[str, str], rounds: int, repeats: int) -> Samples:
    """``rounds`` client processes per pair, the order alternating each round."""
    samples = Samples({p.key: {} for p in run}, {p.key: {} for p in run}, {p.key: [] for p in run})
    for i in range(rounds):
        for pair in run if i % 2 == 0 else run[::-1]:
            result = run_client(pair, env, 1, repeats)
            for command in pair.commands:
                samples.seconds[pair.key].setdefault(command, []).extend(result[command])
                sides = samples.cpu[pair.key].setdefault(command, {"agent": [], "client": []})
                for side in ("agent", "client"):
                    sides[side].extend(result["cpu"][command][side])
            samples.hwm_kib[pair.key].append(result["agent_hwm_kib"])
    return samples


# -- scenario 5: start-up -------------------------------------------------------------------------


def demo_agent_command(env: dict[str, str]) -> tuple[list[str], str]:
    """``python -m acp_trio.demo --serve-agent`` if it answers initialize, else the bench agent script."""
    demo = [sys.executable, "-m", "acp_trio.demo", "--serve-agent"]
    try:
        startup_time(demo, env)
    except Exception as exc:
        print(f"  (the example agent does not answer initialize: {exc}; using runtime/trio_agent.py)")
        return [sys.executable, str(_SCRIPTS / "trio_agent.py")], "runtime/trio_agent.py"
    return demo, "python -m acp_trio.demo --serve-agent"


def startup_time(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Seconds from spawning ``argv`` to reading its initialize response line, and its RSS (KiB) right then."""
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
        rss = status_kib(proc.pid, "VmRSS") if line else 0
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
    return elapsed, rss


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


@dataclass
class Startup:
    seconds: dict[str, list[float]]
    rss_kib: dict[str, list[int]]
    agents: dict[str, str]  # key → what ran


def readme_agent_note() -> str:
    """Empty if ``runtime/readme_agent.py`` is README.md's "Write an agent" example as written, else a warning."""
    readme = (_REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Write an agent", 1)[-1]
    block = section.split("```python\n", 1)[-1].split("```", 1)[0]
    script = (_SCRIPTS / "readme_agent.py").read_text(encoding="utf-8")
    if script.split('"""\n', 2)[-1].strip() == block.strip():
        return ""
    return "  (runtime/readme_agent.py differs from README.md's 'Write an agent' example: copy it again)"


def run_startup(env: dict[str, str], runs: int, with_ts: bool) -> Startup:
    if note := readme_agent_note():
        print(note)
    demo_cmd, demo_label = demo_agent_command(env)
    py = sys.executable
    commands = {
        "acp-trio": ([py, str(_SCRIPTS / "readme_agent.py")], "runtime/readme_agent.py (README.md 'Write an agent')"),
        "acp-trio demo": (demo_cmd, demo_label),
        "ts": (["node", str(_SCRIPTS / "ts_agent.mjs")], "node runtime/ts_agent.mjs"),
        "official": ([py, str(_SCRIPTS / "official_agent.py")], "runtime/official_agent.py"),
        "raw": ([py, str(_SCRIPTS / "raw_agent.py")], "runtime/raw_agent.py"),
        "trio floor": (
            [py, str(_SCRIPTS / "trio_floor_agent.py")],
            "runtime/trio_floor_agent.py (trio and orjson only)",
        ),
    }
    if not with_ts:
        del commands["ts"]
    for argv, _ in commands.values():  # warm up: byte-code cache, page cache
        startup_time(argv, env)
        startup_time(argv, env)
    result = Startup({k: [] for k in commands}, {k: [] for k in commands}, {k: v[1] for k, v in commands.items()})
    order = list(commands)
    for i in range(runs):
        for k in order if i % 2 == 0 else order[::-1]:
            seconds, rss = startup_time(commands[k][0], env)
            result.seconds[k].append(seconds)
            result.rss_kib[k].append(rss)
    return result


# -- report ---------------------------------------------------------------------------------------


def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


@dataclass
class Row:
    measure: str
    unit: str
    values: dict[str, float | None]  # per side (SIDES)
    higher_is_better: bool = False

    def times_raw(self, side: str) -> float | None:
        """The side's cost relative to raw's (> 1: costlier than raw)."""
        v, r = self.values.get(side), self.values.get("raw")
        if v is None or r is None or v == 0 or r == 0:
            return None
        return r / v if self.higher_is_better else v / r


@dataclass
class Bar:
    issue: int
    text: str
    detail: str
    ok: bool | None  # None: not measured (SKIP)


def build_rows(samples: Samples, startup: Startup) -> list[Row]:
    def secs(pair: str, command: str) -> float | None:
        xs = samples.seconds.get(pair, {}).get(command)
        return _median(xs) if xs else None

    def per_side(f: Callable[[str], float | None]) -> dict[str, float | None]:
        return {side: f(side) for side in SIDES}

    def ms(command: str) -> Callable[[str], float | None]:
        return lambda side: None if (s := secs(side, command)) is None else s * 1e3

    def rate(command: str, n: int) -> Callable[[str], float | None]:
        return lambda side: None if (s := secs(side, command)) is None else n / s

    def cpu_us(who: str) -> Callable[[str], float | None]:
        def f(side: str) -> float | None:
            xs = samples.cpu.get(side, {}).get(STREAM, {}).get(who)
            return _median(xs) / STREAM_N * 1e6 if xs else None

        return f

    def mb(xs: Sequence[int] | None) -> float | None:
        return _median(xs) * 1024 / 1e6 if xs else None

    def cross(command: str, pair: str) -> dict[str, float | None]:
        """A cross pair (one side acp-trio's, the other raw's), in the acp-trio column, beside the raw pair."""
        value, base = secs(pair, command), secs("raw", command)
        return {"acp-trio": value and value * 1e3, "raw": base and base * 1e3}

    def floor(command: str, n: int | None = None) -> dict[str, float | None]:
        """The bare trio agent with the raw client, in the acp-trio column, beside the raw pair."""
        value, base = secs("trio-floor", command), secs("raw", command)
        if n is None:
            return {"acp-trio": value and value * 1e3, "raw": base and base * 1e3}
        return {"acp-trio": value and n / value, "raw": base and n / base}

    return [
        Row("stream 20k agent_message_chunk, pair", "ms", per_side(ms(STREAM))),
        Row("  acp-trio agent → raw client", "ms", cross(STREAM, "trio-agent→raw")),
        Row("  raw agent → acp-trio client", "ms", cross(STREAM, "raw-agent→trio")),
        Row("  floor: bare trio agent → raw client", "ms", floor(STREAM)),
        Row("stream 20k, pair", "msg/s", per_side(rate(STREAM, STREAM_N)), higher_is_better=True),
        Row("mixed 20k chunks + 4k tool call updates, pair", "ms", per_side(ms(MIXED))),
        Row("  acp-trio agent → raw client", "ms", cross(MIXED, "trio-agent→raw")),
        Row("  raw agent → acp-trio client", "ms", cross(MIXED, "raw-agent→trio")),
        Row("CPU per streamed update, agent", "µs", per_side(cpu_us("agent"))),
        Row("CPU per streamed update, client", "µs", per_side(cpu_us("client"))),
        Row("fs/read_text_file one at a time, pair", "req/s", per_side(rate(READ_SEQ, READ_N)), True),
        Row("  floor: bare trio agent → raw client", "req/s", floor(READ_SEQ, READ_N), True),
        Row("session/request_permission one at a time", "req/s", per_side(rate(PERMISSION_SEQ, PERMISSION_N)), True),
        Row(f"fs/read_text_file {WIDTH} in flight, pair", "req/s", per_side(rate(READ_PAR, READ_N)), True),
        Row(
            "  acp-trio agent with a task per request",
            "req/s",
            {"acp-trio": rate(READ_PAR_TASKS, READ_N)("acp-trio"), "raw": rate(READ_PAR, READ_N)("raw")},
            True,
        ),
        Row("  floor: bare trio agent → raw client", "req/s", floor(READ_PAR, READ_N), True),
        Row(
            "spawn → initialize answered (cold start)",
            "ms",
            per_side(lambda side: _median(startup.seconds[side]) * 1e3 if side in startup.seconds else None),
        ),
        Row(
            "  acp-trio example agent (demo)",
            "ms",
            {"acp-trio": _median(startup.seconds["acp-trio demo"]) * 1e3, "raw": _median(startup.seconds["raw"]) * 1e3},
        ),
        Row(
            "  floor: bare trio agent",
            "ms",
            {"acp-trio": _median(startup.seconds["trio floor"]) * 1e3, "raw": _median(startup.seconds["raw"]) * 1e3},
        ),
        Row("agent peak RSS (VmHWM, all of 1-4)", "MB", per_side(lambda side: mb(samples.hwm_kib.get(side)))),
        Row("agent RSS right after initialize", "MB", per_side(lambda side: mb(startup.rss_kib.get(side)))),
    ]


def build_bars(rows: list[Row]) -> list[Bar]:
    by = {row.measure.strip(): row for row in rows}

    def agent_side(pair: str) -> Row:
        """The cross pair "acp-trio agent → raw client" under the row ``pair`` (its label repeats under each)."""
        return rows[rows.index(by[pair]) + 1]

    def v(measure: str, side: str) -> float | None:
        return by[measure].values.get(side)

    def fmt(x: float | None, unit: str) -> str:
        return "-" if x is None else f"{_cell(x)} {unit}"

    bars: list[Bar] = []
    for measure, label in (
        ("fs/read_text_file one at a time, pair", "fs/read_text_file one at a time"),
        ("session/request_permission one at a time", "session/request_permission one at a time"),
    ):
        t, ts = v(measure, "acp-trio"), v(measure, "ts")
        ok = None if t is None or ts is None else t >= ts
        bars.append(Bar(14, f"{label}: rate ≥ the TS SDK pair's", f"{fmt(t, 'req/s')} vs {fmt(ts, 'req/s')}", ok))
        x = by[measure].times_raw("acp-trio")
        bars.append(Bar(14, f"{label}: within 2 x raw", f"{x:.2f} x raw" if x else "-", None if x is None else x <= 2))
    x = by[f"fs/read_text_file {WIDTH} in flight, pair"].times_raw("acp-trio")
    bars.append(
        Bar(14, f"fs/read_text_file {WIDTH} in flight: within 3 x raw", f"{x:.2f} x raw", None if x is None else x <= 3)
    )
    t, ts = (
        v("spawn → initialize answered (cold start)", "acp-trio"),
        v("spawn → initialize answered (cold start)", "ts"),
    )
    bars.append(
        Bar(
            14,
            "cold start (README agent) ≤ the TS SDK agent's",
            f"{fmt(t, 'ms')} vs {fmt(ts, 'ms')}",
            None if t is None or ts is None else t <= ts,
        )
    )
    # the streaming bars; "mixed updates (tool calls among text) likewise"
    for name, pair in (
        ("stream", "stream 20k agent_message_chunk, pair"),
        ("mixed", "mixed 20k chunks + 4k tool call updates, pair"),
    ):
        x = by[pair].times_raw("acp-trio")
        bars.append(Bar(14, f"{name} 20k pair: within 2.5 x raw", f"{x:.2f} x raw", None if x is None else x <= 2.5))
        x = agent_side(pair).times_raw("acp-trio")
        text = f"{name} 20k agent side (acp-trio agent → raw client): within 2 x the raw pair"
        bars.append(Bar(14, text, f"{x:.2f} x raw", None if x is None else x <= 2))
    rss = v("agent RSS right after initialize", "acp-trio")
    bars.append(
        Bar(
            14,
            f"agent RSS right after initialize (README agent) ≤ {RSS_BAR_MB:.0f} MB",
            fmt(rss, "MB"),
            None if rss is None else rss <= RSS_BAR_MB,
        )
    )
    # issue 3's, against the official Python SDK
    t, o = v("stream 20k, pair", "acp-trio"), v("stream 20k, pair", "official")
    bars.append(Bar(3, "stream 20k: rate ≥ 4 x the official SDK's", ratio(t, o), t / o >= 4 if t and o else None))
    x = by["stream 20k agent_message_chunk, pair"].times_raw("acp-trio")
    bars.append(Bar(3, "stream 20k: time ≤ 3 x raw", f"{x:.2f} x raw", None if x is None else x <= 3))
    t, o = (
        v("fs/read_text_file one at a time, pair", "acp-trio"),
        v("fs/read_text_file one at a time, pair", "official"),
    )
    bars.append(
        Bar(3, "fs/read_text_file one at a time: rate ≥ the official SDK's", ratio(t, o), t >= o if t and o else None)
    )
    t, o = (
        v(f"fs/read_text_file {WIDTH} in flight, pair", "acp-trio"),
        v(f"fs/read_text_file {WIDTH} in flight, pair", "official"),
    )
    bars.append(
        Bar(
            3,
            f"fs/read_text_file {WIDTH} in flight: rate ≥ 2 x the official SDK's",
            ratio(t, o),
            t / o >= 2 if t and o else None,
        )
    )
    t, o = v("acp-trio example agent (demo)", "acp-trio"), v("spawn → initialize answered (cold start)", "official")
    bars.append(
        Bar(3, "cold start (demo agent) ≤ 0.6 x the official agent's", ratio(t, o), t / o <= 0.6 if t and o else None)
    )
    return bars


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f} x" if a and b else "-"


def _cell(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def print_details(run: list[Pair], samples: Samples, startup: Startup) -> None:
    print("\nPer pair, ms per prompt: median / best (n timed prompts)")
    print(f"  {'pair':<34} " + "  ".join(f"{c:>22}" for c in COMMANDS))
    for pair in run:
        cells = []
        for command in COMMANDS:
            xs = samples.seconds[pair.key].get(command)
            cells.append(f"{_median(xs) * 1e3:>8.1f} / {min(xs) * 1e3:<6.1f}({len(xs):>2})" if xs else "-")
        print(f"  {pair.label:<34} " + "  ".join(f"{c:>22}" for c in cells))
    print("Start-up, spawn → initialize answered, ms: median / best (n); RSS right then, MB (median)")
    for key, xs in startup.seconds.items():
        rss = _median(startup.rss_kib[key]) * 1024 / 1e6
        print(
            f"  {key:<14} {_median(xs) * 1e3:>8.1f} / {min(xs) * 1e3:<6.1f}({len(xs):>2})  {rss:>6.1f} MB"
            f"   {startup.agents[key]}"
        )


def print_table(rows: list[Row]) -> None:
    print("\nRuntime over stdio, side by side (medians; × raw = the cost relative to raw's, 1.00 = raw)")
    head = "".join(f"{SIDE_NAMES[s]:>10}" for s in SIDES) + "".join(
        f"{SIDE_NAMES[s] + ' ×raw':>15}" for s in SIDES if s != "raw"
    )
    print(f"  {'path':<46} {'unit':>5}{head}")
    for row in rows:
        values = "".join(f"{_cell(row.values.get(s)):>10}" for s in SIDES)
        ratios = ""
        for side in SIDES[:-1]:
            x = row.times_raw(side)
            ratios += f"{'-' if x is None else f'{x:.2f}':>15}"
        print(f"  {row.measure:<46} {row.unit:>5}{values}{ratios}")


def print_bars(bars: list[Bar]) -> None:
    print("\nBars")
    for bar in bars:
        verdict = "SKIP" if bar.ok is None else "PASS" if bar.ok else "FAIL"
        print(f"  {verdict}  [issue {bar.issue:>2}] {bar.text}: {bar.detail}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and start-up runs")
    parser.add_argument("--rounds", type=int, help="client processes per pair (default 5, quick 2)")
    parser.add_argument("--repeats", type=int, help="timed prompts per scenario per process (default 3, quick 2)")
    parser.add_argument("--startup-runs", type=int, help="start-up measurements per agent (default 11, quick 5)")
    parser.add_argument(
        "--json",
        metavar="PATH",
        type=Path,
        help="also write the results as JSON (to PATH with '.runtime' before its suffix)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 3 when a bar is missed")
    parser.add_argument(
        "--placement",
        choices=("kernel", "same", "split"),
        default="kernel",
        help="where each pair's client and agent run: where the kernel puts them (default), both on one CPU, "
        "or each on its own CPU",
    )
    args = parser.parse_args(argv)
    global PIN
    cpus = sorted(os.sched_getaffinity(0))
    if args.placement == "same":
        PIN = (cpus[0], cpus[0])
    elif args.placement == "split":
        if len(cpus) < 2:
            parser.error("--placement split needs 2 CPUs")
        PIN = (cpus[0], cpus[1])
    rounds = args.rounds or (2 if args.quick else 5)
    repeats = args.repeats or (2 if args.quick else 3)
    startup_runs = args.startup_runs or (5 if args.quick else 11)

    npm_dir, ts_note = ts_sdk_dir()
    print(f"\nRuntime benchmark: Python {platform.python_version()} ({sys.executable}); node {node_version()}")
    print(
        f"acp-trio {dist_version('acp-trio')} [{Path(acp_trio.__file__ or '').parent}, {runtime_build()}], "
        f"trio {dist_version('trio')}; "
        f"agent-client-protocol {dist_version('agent-client-protocol')}; orjson {dist_version('orjson')}; "
        + (f"{TS_SDK} [{npm_dir}]" if npm_dir else f"TypeScript SDK {ts_note}")
    )
    print(f"{rounds} client processes per pair x (1 warm-up + {repeats} timed prompts) per scenario;", end=" ")
    print(f"{startup_runs} start-ups per agent")
    if PIN is None:
        print("each pair's client and agent run where the kernel puts them (--placement same|split to choose)")
    elif PIN[0] == PIN[1]:
        print(f"each pair's client and agent both run on CPU {PIN[0]} (--placement same)")
    else:
        print(f"each pair's client runs on CPU {PIN[0]} and its agent on CPU {PIN[1]} (--placement split)")
    started, load_before = time.perf_counter(), cpu_times()
    run = pairs(sys.executable, npm_dir is not None)
    with tempfile.TemporaryDirectory(prefix="acp-bench-pycache-") as pycache:
        env = subprocess_env(pycache, acp_schema, acp_trio)
        if npm_dir is not None:
            env["ACP_INTEROP_NPM_DIR"] = str(npm_dir)
        try:
            startup = run_startup(env, startup_runs, npm_dir is not None)
            samples = run_scenarios(run, env, rounds, repeats)
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as exc:
            print(f"runtime benchmark failed: {exc}")
            return 1
    rows = build_rows(samples, startup)
    bars = build_bars(rows)
    print_details(run, samples, startup)
    print_table(rows)
    print_bars(bars)
    print(
        f"\n(runtime benchmark took {time.perf_counter() - started:.0f} s; {describe_load(load_before, cpu_times())})"
    )

    if args.json:
        path = args.json.with_name(f"{args.json.stem}.runtime{args.json.suffix or '.json'}")
        report: dict[str, Any] = {
            "python": platform.python_version(),
            "node": node_version(),
            "versions": {d: dist_version(d) for d in ("acp-trio", "trio", "agent-client-protocol", "orjson")},
            "acp_trio_build": runtime_build(),
            "ts_sdk": TS_SDK if npm_dir else ts_note,
            "statistic": "median",
            "pairs": {p.key: p.label for p in run},
            "seconds_per_prompt": samples.seconds,
            "cpu_seconds_per_prompt": samples.cpu,
            "agent_peak_rss_kib": samples.hwm_kib,
            "startup_seconds": startup.seconds,
            "startup_rss_kib": startup.rss_kib,
            "startup_agents": startup.agents,
            "table": [
                {
                    "path": r.measure.strip(),
                    "unit": r.unit,
                    "values": r.values,
                    "times_raw": {s: r.times_raw(s) for s in SIDES[:-1]},
                }
                for r in rows
            ],
            "bars": [{"issue": b.issue, "bar": b.text, "measured": b.detail, "pass": b.ok} for b in bars],
        }
        path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {path}")

    if args.strict and any(b.ok is False for b in bars):
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

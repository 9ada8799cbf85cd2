"""Where a WebSocket round trip's CPU goes, on each side of acp-trio's pair: µs per round trip by component.

Usage: ``python rtt_profile.py [--repeats R] [--out DIR] [COMMAND]`` (default ``read 2000 1``).

Runs the command twice against a fresh ``trio_server.py`` with ``trio_client.py`` (one warm-up, R
timed prompts):

1. unprofiled, under ``perf stat`` when it is there (each process's CPU time, context switches and
   system calls: ``read``/``recvfrom``, ``write``/``sendto``, ``epoll_wait``, ``epoll_ctl``), else
   with the CPU times from ``/proc``;
2. both processes under cProfile with a CPU-time clock (``time.thread_time``: time a process spends
   preempted, or blocked in ``epoll_wait``, is not charged to anything), whose shares by component
   (the same components as ``bench_remote.py --profile``: trio, hypercorn, wsproto, trio-websocket,
   our adapters, the connection, ...) are scaled to run 1's CPU time per round trip.

Prints per side: CPU µs per round trip (run 1), system calls and context switches per round trip,
then each component's µs per round trip.  The profiler slows Python code more than C calls, so the
split is approximate; differences between two versions are what it is for.  The CPU of start-up,
``initialize``, ``session/new`` and the warm-up prompt is counted too (about 1 % for 2,000 round trips
per prompt and 3 prompts).
"""

from __future__ import annotations

import argparse
import json
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "runtime")]

from bench_remote import component  # noqa: E402  (the components of bench_remote.py --profile)
from common import expected, parse_command, process_cpu  # noqa: E402

EVENTS = (
    "task-clock",
    "context-switches",
    "syscalls:sys_enter_read",
    "syscalls:sys_enter_recvfrom",
    "syscalls:sys_enter_write",
    "syscalls:sys_enter_sendto",
    "syscalls:sys_enter_epoll_wait",
    "syscalls:sys_enter_epoll_ctl",
)

PROFILED = """
import cProfile, runpy, sys, time
out = sys.argv.pop(1)
profile = cProfile.Profile(time.thread_time)
sys.argv[0] = sys.argv[1]; del sys.argv[1]
try:
    profile.runcall(runpy.run_path, sys.argv[0], run_name="__main__")
finally:
    profile.dump_stats(out)
"""


def perf_usable() -> bool:
    if shutil.which("perf") is None:
        return False
    probe = subprocess.run(["perf", "stat", "-e", ",".join(EVENTS), "true"], capture_output=True, text=True)
    return probe.returncode == 0


def read_perf(path: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].replace(",", "").replace(".", "").isdigit():
            name = parts[2] if parts[1] == "msec" else parts[1]
            if name != "seconds":
                out[name.removeprefix("syscalls:sys_enter_")] = float(parts[0].replace(",", ""))
    return out


def run(command: str, repeats: int, profile_dir: Path | None, use_perf: bool, tmp: Path) -> dict[str, Any]:
    py = sys.executable
    server_argv = [py, str(HERE / "trio_server.py")]
    client_argv = [py, str(HERE / "trio_client.py")]
    if profile_dir is not None:
        server_argv = [py, "-c", PROFILED, str(profile_dir / "server.prof"), str(HERE / "trio_server.py")]
        client_argv = [py, "-c", PROFILED, str(profile_dir / "client.prof"), str(HERE / "trio_client.py")]
    server = subprocess.Popen(server_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=HERE)
    assert server.stdout is not None and server.stdin is not None
    info = json.loads(server.stdout.readline())
    url = f"ws://127.0.0.1:{info['port']}/acp"
    client = [*client_argv, url, "--warmup", "1", "--repeats", str(repeats), command]
    result: dict[str, Any] = {}
    try:
        if use_perf:
            events = ",".join(EVENTS)
            watcher = subprocess.Popen(["perf", "stat", "-e", events, "-p", str(info["pid"]), "-o", str(tmp / "s.txt")])
            time.sleep(0.3)
            done = subprocess.run(
                ["perf", "stat", "-e", events, "-o", str(tmp / "c.txt"), *client],
                capture_output=True,
                text=True,
                cwd=HERE,
            )
            watcher.send_signal(2)
            watcher.wait()
            result["server"], result["client"] = read_perf(tmp / "s.txt"), read_perf(tmp / "c.txt")
        else:
            before = process_cpu(info["pid"])
            done = subprocess.run(client, capture_output=True, text=True, cwd=HERE)
            result["server"] = {"task-clock": (process_cpu(info["pid"]) - before) * 1000}
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        result["times"] = json.loads(done.stdout.strip().splitlines()[-1])[command]
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    return result


def breakdown(path: Path) -> dict[str, float]:
    """Own CPU time per component (C calls charged to their only caller's component), as shares."""
    stats: Any = pstats.Stats(str(path)).stats
    totals: dict[str, float] = {}
    for (filename, _line, _name), (_cc, _nc, tottime, _ct, callers) in stats.items():
        label = component(filename)
        if filename == "~" or label.startswith("other Python"):
            owners = {component(c[0]) for c in callers} if callers else set()
            what = "C calls" if filename == "~" else "stdlib"
            label = f"{what} from {next(iter(owners))}" if len(owners) == 1 else f"{what}, shared"
        totals[label] = totals.get(label, 0.0) + tottime
    whole = sum(totals.values()) or 1.0
    return {k: v / whole for k, v in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="keep the profiles here")
    parser.add_argument("command", nargs="?", default="read 2000 1")
    args = parser.parse_args()
    kind, n, _ = parse_command(args.command)
    trips = expected(kind, n) * (1 + args.repeats)
    use_perf = perf_usable()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        plain = run(args.command, args.repeats, None, use_perf, tmp)
        out = args.out or tmp
        out.mkdir(parents=True, exist_ok=True)
        run(args.command, args.repeats, out, False, tmp)
        rates = [expected(kind, n) / t for t in plain["times"]]
        print(f"{args.command}: {', '.join(f'{r:,.0f}' for r in rates)} round trips/s unprofiled", end="")
        print(f" ({', '.join(f'{1e6 / r:.0f}' for r in rates)} µs each)")
        for side in ("server", "client"):
            counts = plain.get(side, {})
            cpu_us = counts.get("task-clock", 0.0) * 1000 / trips
            print(f"{side}: {cpu_us:.0f} µs CPU per round trip", end="")
            calls = {k: v / trips for k, v in counts.items() if k != "task-clock" and v}
            print("; per round trip: " + ", ".join(f"{k} {v:.2f}" for k, v in calls.items()) if calls else "")
            shares = breakdown(out / f"{side}.prof")
            for label, share in sorted(shares.items(), key=lambda kv: -kv[1])[:16]:
                print(f"  {share * cpu_us:7.1f} µs  {share * 100:5.1f}%  {label}")


if __name__ == "__main__":
    main()

"""What one Streamable HTTP round trip costs, counted on each side: acp-trio's pair against the floor.

Usage: ``python http_profile.py [--small N] [--large N] [--no-strace] [--top K] [--variant ours|floor ...]
[--kind read|permission] [--out DIR]``

A round trip is one ``fs/read_text_file`` of ``read N 1`` (with ``--kind permission``, one
``session/request_permission`` of ``permission N``, ours only): the agent's request goes out as an SSE
event on the session's stream, the client ``POST`` s its answer and gets ``202``.  Three variants:

- ``ours``: ``trio_server.py`` (``AcpApp`` on hypercorn, the bench agent) driven by
  ``trio_client.py`` (``connect_http``, the bench client);
- ``floor``: ``raw_ws_server.py`` (a bare ASGI app on hypercorn, no ACP) driven by
  ``raw_http_client.py`` (httpx2, no ACP): the same HTTP exchange, nothing decoded.
- ``floor1``: the floor with each ``POST`` 's head and body in one write (``raw_http_client.py
  --one-write``, as ``connect_http`` sends them; ``floor`` sends them in two, httpx2's way).

``ours`` and ``floor`` run unless ``--variant`` names others.  Each variant runs twice, ``read SMALL 1``
then ``read LARGE 1`` (one prompt each, no warm-up), and
every count is the difference over ``LARGE - SMALL`` round trips, so start-up, imports,
``initialize`` and ``session/new`` cancel out.  Counts do not depend on the machine's load (times
do), which is why this counts instead of timing:

- Python function calls (cProfile's call counts, C functions included) per round trip, in total
  and for the functions called most, with the package each belongs to;
- trio's scheduler work (an instrument): passes (one ``epoll_wait`` each), task steps, wake-ups;
- system calls per round trip (``strace -f -c``, a separate unprofiled run; skipped without
  strace or with ``--no-strace``).
"""

from __future__ import annotations

import argparse
import json
import pstats
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# runs SCRIPT with ARGS under cProfile (call counts) with a trio instrument counting scheduler work
COUNTED = """
import cProfile, json, runpy, sys, time
import trio
prof_out, count_out = sys.argv[1], sys.argv[2]
del sys.argv[1:3]
sys.argv[0] = sys.argv[1]; del sys.argv[1]
sys.path.insert(0, str(__import__("pathlib").Path(sys.argv[0]).resolve().parent))
counts = {"passes": 0, "steps": 0, "wakeups": 0}
class Counter(trio.abc.Instrument):
    def before_io_wait(self, timeout): counts["passes"] += 1
    def before_task_step(self, task): counts["steps"] += 1
    def task_scheduled(self, task): counts["wakeups"] += 1
real_run = trio.run
def run(*args, **kwargs):
    kwargs["instruments"] = [*kwargs.get("instruments", ()), Counter()]
    return real_run(*args, **kwargs)
trio.run = run
profile = cProfile.Profile(time.thread_time)
try:
    profile.runcall(runpy.run_path, sys.argv[0], run_name="__main__")
finally:
    profile.dump_stats(prof_out)
    open(count_out, "w").write(json.dumps(counts))
"""

VARIANTS = {
    "ours": ("trio_server.py", "trio_client.py", []),
    "floor": ("raw_ws_server.py", "raw_http_client.py", []),
    "floor1": ("raw_ws_server.py", "raw_http_client.py", ["--one-write"]),  # a POST's head and body in one write
}


def package(filename: str) -> str:
    if filename == "~":
        return "C"
    for name in (
        "acp_trio/transports",
        "acp_trio",
        "acp_schema",
        "hypercorn",
        "h11",
        "httpx2",
        "httpcore2",
        "trio",
        "anyio",
        "orjson",
        "benchmarks",
    ):
        if f"/{name}/" in filename:
            return name
    return "stdlib/other"


def run_once(variant: str, n: int, tmp: Path, counted: bool, strace: bool, kind: str = "read") -> dict[str, Any]:
    server_script, client_script, client_options = VARIANTS[variant]
    py = sys.executable
    prefix_s: list[str] = []
    prefix_c: list[str] = []
    if counted:
        prefix_s = ["-c", COUNTED, str(tmp / f"{variant}-{n}-server.prof"), str(tmp / f"{variant}-{n}-server.json")]
        prefix_c = ["-c", COUNTED, str(tmp / f"{variant}-{n}-client.prof"), str(tmp / f"{variant}-{n}-client.json")]
    server_argv = [py, *prefix_s, str(HERE / server_script)]
    if strace:
        server_argv = ["strace", "-f", "-c", "-o", str(tmp / f"{variant}-{n}-server.strace"), *server_argv]
    server = subprocess.Popen(server_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=HERE)
    assert server.stdout is not None and server.stdin is not None
    try:
        port = json.loads(server.stdout.readline())["port"]
        client_argv = [
            py,
            *prefix_c,
            str(HERE / client_script),
            f"http://127.0.0.1:{port}/acp",
            "--warmup",
            "0",
            "--repeats",
            "1",
            *client_options,
            command(kind, n),
        ]
        if strace:
            client_argv = ["strace", "-f", "-c", "-o", str(tmp / f"{variant}-{n}-client.strace"), *client_argv]
        done = subprocess.run(client_argv, capture_output=True, text=True, cwd=HERE, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"{variant} client failed: {done.stderr[-2000:]}")
        return {"seconds": json.loads(done.stdout.strip().splitlines()[-1])[command(kind, n)][0]}
    finally:
        server.stdin.close()
        server.wait(timeout=60)


def command(kind: str, n: int) -> str:
    """The bench command of ``n`` round trips of ``kind``: ``read N 1`` or ``permission N``."""
    return f"read {n} 1" if kind == "read" else f"permission {n}"


def calls(path: Path) -> dict[tuple[str, int, str], int]:
    stats: Any = pstats.Stats(str(path)).stats
    return {key: value[1] for key, value in stats.items()}


def syscalls(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0].replace(".", "").isdigit() and parts[-1] != "total":
            try:
                out[parts[-1]] = int(parts[3])
            except ValueError:
                continue
    return out


def per_trip(small: dict[Any, int], large: dict[Any, int], trips: int) -> dict[Any, float]:
    keys = set(small) | set(large)
    return {k: (large.get(k, 0) - small.get(k, 0)) / trips for k in keys}


def label(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    short = "/".join(Path(filename).parts[-2:])
    return f"{short}:{line}({name})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=1200)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-strace", action="store_true")
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    parser.add_argument("--out", type=Path, help="keep the profiles here")
    parser.add_argument(
        "--kind", choices=("read", "permission"), default="read", help="the round trip (the floor: read only)"
    )
    args = parser.parse_args()
    trips = args.large - args.small
    use_strace = not args.no_strace and shutil.which("strace") is not None
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = args.out or Path(tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        for variant in args.variant or (["ours", "floor"] if args.kind == "read" else ["ours"]):
            for n in (args.small, args.large):
                run_once(variant, n, tmp, counted=True, strace=False, kind=args.kind)
                if use_strace:
                    run_once(variant, n, tmp, counted=False, strace=True, kind=args.kind)
            print(
                f"== {variant}: per round trip ({command(args.kind, args.large)} less {command(args.kind, args.small)})"
            )
            for side in ("server", "client"):
                small = json.loads((tmp / f"{variant}-{args.small}-{side}.json").read_text())
                large = json.loads((tmp / f"{variant}-{args.large}-{side}.json").read_text())
                sched = per_trip(small, large, trips)
                fn = per_trip(
                    calls(tmp / f"{variant}-{args.small}-{side}.prof"),
                    calls(tmp / f"{variant}-{args.large}-{side}.prof"),
                    trips,
                )
                total = sum(fn.values())
                by_package: dict[str, float] = {}
                for key, value in fn.items():
                    by_package[package(key[0])] = by_package.get(package(key[0]), 0.0) + value
                print(
                    f"{side}: {total:.0f} calls; passes {sched['passes']:.2f}, steps {sched['steps']:.2f},"
                    f" wake-ups {sched['wakeups']:.2f}"
                )
                print(
                    "  by package: "
                    + ", ".join(
                        f"{k} {v:.0f}" for k, v in sorted(by_package.items(), key=lambda kv: -kv[1]) if v >= 0.5
                    )
                )
                if use_strace:
                    sc = per_trip(
                        syscalls(tmp / f"{variant}-{args.small}-{side}.strace"),
                        syscalls(tmp / f"{variant}-{args.large}-{side}.strace"),
                        trips,
                    )
                    print(
                        "  syscalls: "
                        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(sc.items(), key=lambda kv: -kv[1]) if v >= 0.05)
                    )
                for key, value in sorted(fn.items(), key=lambda kv: -kv[1])[: args.top]:
                    print(f"  {value:6.1f}  {label(key)}")


if __name__ == "__main__":
    main()

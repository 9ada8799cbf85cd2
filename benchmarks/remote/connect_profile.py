"""Where the server's CPU goes while clients open ACP connections: cProfile of the opening only.

Usage: ``python connect_profile.py [--connections N] [--http] [--top K] [--out PATH]``.  Runs the
remote benchmark's server (``AcpApp(BenchAgent)`` under :func:`~acp_trio.transports.asgi.serve`, as
``trio_server.py``) in this process, opens one warm-up connection, then profiles (cProfile timed
by this thread's CPU time, so time spent preempted by the client is not counted) while
``connect_client.py`` opens ``N`` (default 1,000) connections, each ``initialize`` and
``session/new``; the profile stops once they are all open (closing them is not profiled).  Prints
the CPU time per connection, the breakdown of the process's own time by component (as
``bench_remote.py --profile``), the ``K`` (default 30) functions with the most time of their own,
and the time spent under the entry points of each part of the connection's path.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import json
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "runtime"))

from bench_remote import profile_breakdown  # noqa: E402
from trio_agent import BenchAgent  # noqa: E402

from acp_trio.transports.asgi import AcpApp, serve  # noqa: E402

PARTS = (
    ("hypercorn/protocol/h11.py", "_handle_events", "hypercorn's HTTP/1.1 (request parsing, upgrade)"),
    ("hypercorn/protocol/ws_stream.py", "handle", "hypercorn's WebSocket stream (handshake, frames in)"),
    ("hypercorn/protocol/ws_stream.py", "app_send", "hypercorn's WebSocket sends (accept, frames out)"),
    ("hypercorn/protocol/http_stream.py", "handle", "hypercorn's HTTP stream (requests in)"),
    ("hypercorn/protocol/http_stream.py", "app_send", "hypercorn's HTTP sends (responses out)"),
    ("acp_trio/transports/asgi.py", "_websocket", "AcpApp._websocket (all of a WebSocket's ACP connection)"),
    ("acp_trio/transports/asgi.py", "_http_post", "AcpApp._http_post (every POST)"),
    ("acp_trio/transports/asgi.py", "_http_get", "AcpApp._http_get (the SSE stream)"),
    ("acp_trio/transports/asgi.py", "_run_http", "AcpApp._run_http (a Streamable HTTP connection)"),
    ("acp_trio/_roles.py", "__init__", "AgentSideConnection construction (_roles)"),
    ("acp_trio/_connection.py", "__aenter__", "Connection.__aenter__ (its tasks started)"),
    ("acp_trio/_connection.py", "_on_request", "requests read and dispatched"),
    ("acp_trio/_roles.py", "_initialize", "initialize (the runtime's handling)"),
    ("trio_agent.py", "session_new", "the bench agent's session_new"),
    ("acp_trio/_connection.py", "_writer", "the connection's writer"),
    ("acp_trio/transports/_hypercorn.py", "release", "the eager socket send"),
    ("trio/_core/_run.py", "spawn_impl", "trio: spawning tasks"),
    ("trio/_core/_run.py", "__aenter__", "trio: opening nurseries"),
    ("trio/_core/_run.py", "__aexit__", "trio: closing nurseries"),
    ("~", "<built-in method posix.write>", "os.write (the eager sends)"),
    ("~", "<method 'send' of '_socket.socket' objects>", "socket.send (the writer task's sends)"),
    ("~", "<built-in method posix.read>", "os.read (the reader)"),
)


class GcTimer:
    """CPU seconds and count of the garbage collector's runs, per generation (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.runs = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.seconds[info["generation"]] += time.thread_time() - self._started
            self.runs[info["generation"]] += 1


async def main(connections: int, http: bool, out: Path, gc_timer: GcTimer, profiling: bool = True) -> float:
    scheme = "http" if http else "ws"
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(functools.partial(serve, AcpApp(BenchAgent), "127.0.0.1", 0))
        url = f"{scheme}://{urls[0].split('://', 1)[1]}/acp"
        client = [sys.executable, str(HERE / "connect_client.py"), url]
        seconds = 0.0
        for n, profiled in ((1, False), (connections, True)):
            argv = [*client, "--connections", str(n)]
            proc = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            assert proc.stdout is not None and proc.stdin is not None
            profile = cProfile.Profile(time.thread_time)
            if profiled:
                cpu = time.thread_time()
                gc.callbacks.append(gc_timer)
                if profiling:
                    profile.enable()
            line = b""
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some()
                if not chunk:
                    raise RuntimeError("connect_client.py exited before reporting")
                line += chunk
            if profiled:
                gc.callbacks.remove(gc_timer)
                seconds = time.thread_time() - cpu
                if profiling:
                    profile.disable()
                    profile.dump_stats(out)
            result = json.loads(line)
            if result["ok"] != n:
                raise RuntimeError(f"connections failed: {result}")
            await proc.stdin.aclose()
            await proc.wait()
        nursery.cancel_scope.cancel()
    return seconds


def entry_times(path: Path) -> list[tuple[str, float]]:
    stats: dict[tuple[str, int, str], tuple[int, int, float, float, object]] = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    rows = []
    for needle, function, label in PARTS:
        seconds = sum(v[3] for (f, _l, n), v in stats.items() if needle in f and n == function)
        rows.append((label, seconds))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--no-profile", action="store_true", help="only the CPU time and the collector's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "connect.prof"
        n = args.connections
        gc_timer = GcTimer()
        cpu = trio.run(main, n, args.http, out, gc_timer, not args.no_profile)
        kind = "Streamable HTTP" if args.http else "WebSocket"
        print(
            f"{n} {kind} connections opened: server CPU {cpu * 1e3 / n:.2f} ms per connection"
            + ("" if args.no_profile else " under the profiler (cProfile, thread CPU time)")
        )
        print(
            "  of which the garbage collector (charged by cProfile to whatever allocated when it ran): "
            + ", ".join(
                f"generation {g}: {gc_timer.seconds[g] * 1e6 / n:.0f} µs ({gc_timer.runs[g]} runs)" for g in range(3)
            )
        )
        if args.no_profile:
            sys.exit(0)
        print("  own time by component, µs per connection:")
        for label, seconds, share in profile_breakdown(out)[:16]:
            print(f"    {seconds * 1e6 / n:8.0f} µs {share * 100:5.1f}%  {label}")
        print("  including what they call, µs per connection:")
        for label, seconds in entry_times(out):
            print(f"    {seconds * 1e6 / n:8.0f} µs  {label}")
        print(f"  the {args.top} functions with the most own time:")
        stats = pstats.Stats(str(out))
        stats.sort_stats("tottime").print_stats(args.top)

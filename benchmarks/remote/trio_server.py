"""acp-trio's server side of the remote benchmark: :class:`~acp_trio.transports.asgi.AcpApp` on hypercorn.

Usage: ``python trio_server.py [--bridge] [--profile PATH]``.  Serves ``/acp`` on 127.0.0.1 on a
free port, prints ``{"port": N, "pid": P}`` on stdout, and shuts down when its stdin closes.

- default: the bench agent of ``../runtime/trio_agent.py`` (an agent class as the README teaches:
  one ``async def`` per method, a typed ``ClientPeer``), one agent per WebSocket;
- ``--bridge``: :func:`acp_trio.bridge.serve_bridge` with that agent as a stdio process, one
  process per connection (what ``python -m acp_trio.bridge --listen`` runs).

``--profile PATH``: run under cProfile and write the statistics to PATH at shutdown (``--cpu-clock``:
timed by the thread's CPU time, not the wall clock, so time the process spent preempted, say by the
client it just woke with a write, is not charged to whatever it was doing).
``--count PATH``: count scheduler passes, task steps and wake-ups (``passes.py``'s instrument) and
write them to PATH as JSON at shutdown.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

import trio

RUNTIME = Path(__file__).resolve().parent.parent / "runtime"
sys.path.insert(0, str(RUNTIME))

from trio_agent import BenchAgent  # noqa: E402  (the shared bench agent, after its directory)

from acp_trio.bridge import serve_bridge  # noqa: E402
from acp_trio.transports.asgi import AcpApp, serve  # noqa: E402


async def main(bridge: bool) -> None:
    stdin = trio.lowlevel.FdStream(sys.stdin.fileno())

    async def stdin_closed() -> None:
        while await stdin.receive_some():
            pass

    async with trio.open_nursery() as nursery:
        if bridge:
            agent = [sys.executable, str(RUNTIME / "trio_agent.py")]
            urls = await nursery.start(functools.partial(serve_bridge, agent, "127.0.0.1", 0))
        else:
            urls = await nursery.start(functools.partial(serve, AcpApp(BenchAgent), "127.0.0.1", 0))
        port = int(urls[0].rsplit(":", 1)[1])
        print(json.dumps({"port": port, "pid": __import__("os").getpid()}), flush=True)
        await stdin_closed()
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bridge", action="store_true")
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--count", type=Path)
    parser.add_argument("--cpu-clock", action="store_true", help="--profile: time by this thread's CPU time")
    args = parser.parse_args()
    if args.count is not None:
        from passes import Counter

        counter = Counter()
        trio.run(main, args.bridge, instruments=[counter])
        args.count.write_text(json.dumps(counter.snapshot()))
    elif args.profile is None:
        trio.run(main, args.bridge)
    else:
        import cProfile

        with cProfile.Profile(time.thread_time if args.cpu_clock else time.perf_counter) as profile:
            trio.run(main, args.bridge)
        profile.dump_stats(args.profile)

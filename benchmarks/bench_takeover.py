"""Takeover time after SIGKILL between two session host processes sharing PostgreSQL (issue 36 step 2).

Usage::

    python benchmarks/bench_takeover.py [--lease SECONDS] [--kills N] [--json out.json]

It starts a throwaway PostgreSQL server (``tests/_postgres.py``, the machine's server binaries; the
test server's settings: no fsync), host process ``b`` and, for each kill, a host process ``a<k>``
(``python -m acp_trio.host --store postgresql://... --lease-seconds LEASE``, a neutral echo agent
given the host's store).  A WebSocket client makes a session on ``a<k>``, prompts a turn that
streams a chunk every 20 ms, and once it has seen a few, ``a<k>``'s process group is SIGKILLed.
Another client on ``b`` then sends ``session/resume`` every 20 ms (answered -32603 "owned by
another host" while ``a<k>``'s lease holds) until it is answered: the takeover time is from the
kill to that answer.  Median, worst and best over the kills (default lease 1 s, 10 kills).
Verdicts: none; figures for the report.  The expected figure is below the lease: the kill comes
part of the way into a renewal period (every ``lease / 3``), so less than a whole lease is left.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "tests"))

import trio  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lease", type=float, default=1.0, help="lease_seconds of the hosts (default 1)")
    parser.add_argument("--kills", type=int, default=10, help="host processes killed (default 10)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()

    import test_host_takeover_process as kit
    from _host_kit import Recorder, init2
    from _postgres import PostgresServer, server_bindir

    from acp_schema import v2
    from acp_trio import RequestError

    bindir = server_bindir()
    if bindir is None:
        sys.exit("the PostgreSQL server binaries were not found: apt-get install -y postgresql")
    kit.LEASE = args.lease
    where = Path(tempfile.mkdtemp(prefix="bench-takeover-"))
    pg = PostgresServer(Path(tempfile.mkdtemp(prefix="bench-takeover-pg-")), bindir)
    pg.start()
    results: list[float] = []
    try:
        pair = kit.Pair(where, pg, "after_drain_timeout")
        try:
            pair.start("b")
            for k in range(args.kills):
                name = f"a{k}"
                pair.start(name)

                async def once(name: str = name) -> float:
                    sid, _ = await kit.make_running_session(pair.ws(name))
                    os.killpg(pair.hosts[name].process.pid, signal.SIGKILL)
                    killed = time.monotonic()
                    async with kit.client(pair.ws("b"), Recorder()) as conn:
                        await init2(conn)
                        while True:
                            try:
                                await conn.agent.session_resume(v2.ResumeSessionRequest(session_id=sid, cwd="/tmp"))
                                return time.monotonic() - killed
                            except RequestError:
                                await trio.sleep(0.02)

                took = trio.run(once)
                pair.hosts[name].process.wait()
                results.append(took)
                print(f"kill {k + 1}: {took * 1000:.0f} ms", flush=True)
        finally:
            pair.stop()
    finally:
        pg.stop()
        shutil.rmtree(pg.directory, ignore_errors=True)
        shutil.rmtree(where, ignore_errors=True)
    figures = {
        "lease_seconds": args.lease,
        "renew_every_seconds": round(args.lease / 3, 3),
        "kills": len(results),
        "median_ms": round(statistics.median(results) * 1000),
        "worst_ms": round(max(results) * 1000),
        "best_ms": round(min(results) * 1000),
    }
    print(
        f"lease {args.lease:g} s (renewed every {args.lease / 3:.2f} s): takeover median {figures['median_ms']} ms, "
        f"worst {figures['worst_ms']} ms, best {figures['best_ms']} ms over {len(results)} kills"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

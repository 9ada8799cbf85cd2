"""The v1 ⇄ v2 adapter (``python -m acp_trio.adapt``) against a direct connection, over stdio.

Usage: ``python benchmarks/bench_adapt.py [--quick] [--rounds R] [--repeats K] [--strict]``.

Two pairings, each its own client process per round (the order alternating), one warm-up prompt and
``--repeats`` timed ones per command, the bench client of ``runtime/trio_client.py`` (v1):

- ``direct``: the v1 client spawning the v1 bench agent (``runtime/trio_agent.py``);
- ``adapter``: the same client spawning ``python -m acp_trio.adapt --speak 1 -- python
  runtime/trio_v2_agent.py``: the same commands served by a v2 agent, every message translated by
  the adapter process between them (issue 33: "a v2-only agent served to a v1 client");
- ``proxy``: the same client spawning ``runtime/stdio_proxy.py``, which spawns the v1 bench agent
  and copies bytes between the two pipes unchanged: the extra process and pipes of the adapter
  and nothing else, the floor of what any stdio adapter can get (reported, no bar).

Commands (``runtime/common.py``): ``stream 20000`` (updates/s; bar: the adapter at least half as
fast as the direct pair) and ``permission 2000`` (round trips one at a time: the adapter's added
latency per round trip, µs; no bar).  Medians of all timed prompts.  Exit status 3 with
``--strict`` when the bar is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

_HERE: Final = Path(__file__).resolve().parent
_RUNTIME: Final = _HERE / "runtime"

from _shared import subprocess_env, use_source_tree  # noqa: E402
from bench_runtime import cpu_times, describe_load  # noqa: E402

use_source_tree()
import acp_schema  # noqa: E402
import acp_trio  # noqa: E402

STREAM: Final = "stream 20000"
PERMISSION: Final = "permission 2000"
COUNTS: Final = {STREAM: 20_000, PERMISSION: 2_000}
PAIRINGS: Final = {
    "direct": "trio_agent.py",
    "adapter": "adapt:trio_v2_agent.py",
    "proxy": str(_RUNTIME / "stdio_proxy.py"),  # absolute: the client spawns it as it is
}
BAR: Final = 0.5


def run_client(agent: str, env: dict[str, str], repeats: int) -> dict[str, list[float]]:
    argv = [sys.executable, str(_RUNTIME / "trio_client.py"), "--agent", agent, "--warmup", "1"]
    argv += ["--repeats", str(repeats), STREAM, PERMISSION]
    proc = subprocess.run(argv, env=env, cwd=_RUNTIME, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{agent}: the bench client failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, list[float]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, help="client processes per pairing (default 3, quick 1)")
    parser.add_argument("--repeats", type=int, help="timed prompts per client process (default 3, quick 2)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON (PATH with '.adapt')")
    parser.add_argument("--strict", action="store_true", help="exit 3 when the bar is missed")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    repeats = args.repeats or (2 if args.quick else 3)
    print(f"\nThe v1 <-> v2 adapter over stdio (acp-trio {Path(acp_trio.__file__ or '').parent})")
    print(f"{rounds} client processes per pairing x (1 warm-up + {repeats} timed prompts)")
    started, load = time.perf_counter(), cpu_times()
    samples: dict[str, dict[str, list[float]]] = {key: {STREAM: [], PERMISSION: []} for key in PAIRINGS}
    with tempfile.TemporaryDirectory(prefix="acp-bench-adapt-") as tmp:
        env = subprocess_env(str(Path(tmp) / "pycache"), acp_schema, acp_trio)
        keys = list(PAIRINGS)
        for i in range(rounds):
            for key in keys if i % 2 == 0 else keys[::-1]:
                result = run_client(PAIRINGS[key], env, repeats)
                for command in (STREAM, PERMISSION):
                    samples[key][command].extend(result[command])
    rate = {key: {c: COUNTS[c] / statistics.median(xs) for c, xs in by.items()} for key, by in samples.items()}
    direct, adapter, proxy = rate["direct"], rate["adapter"], rate["proxy"]
    stream_ratio = adapter[STREAM] / direct[STREAM]
    added_us = (1 / adapter[PERMISSION] - 1 / direct[PERMISSION]) * 1e6
    proxy_added_us = (1 / proxy[PERMISSION] - 1 / direct[PERMISSION]) * 1e6
    ok = stream_ratio >= BAR
    print(f"  {'':<34}{'direct (v1 agent)':>20}{'adapter (v2 agent)':>20}{'ratio':>8}{'bare proxy':>14}{'ratio':>8}")
    for command, label in ((STREAM, "stream 20000, updates/s"), (PERMISSION, "permission 2000, round trips/s")):
        base = direct[command]
        print(
            f"  {label:<34}{base:>20,.0f}{adapter[command]:>20,.0f}{adapter[command] / base:>8.2f}"
            f"{proxy[command]:>14,.0f}{proxy[command] / base:>8.2f}"
        )
    print(
        f"  the adapter adds {added_us:,.0f} µs per permission round trip"
        f" (a bare proxy forwarding bytes: {proxy_added_us:,.0f} µs)"
    )
    print(f"  bar: the adapter streams at least {BAR:g}x as fast as the direct pair: {'PASS' if ok else 'FAIL'}")
    print(f"(adapter benchmark took {time.perf_counter() - started:.0f} s; {describe_load(load, cpu_times())})")
    if args.json:
        path = args.json.with_name(f"{args.json.stem}.adapt{args.json.suffix or '.json'}")
        report: dict[str, Any] = {
            "seconds_per_prompt": samples,
            "per_second": rate,
            "stream_ratio": stream_ratio,
            "added_us_per_round_trip": added_us,
            "proxy_stream_ratio": proxy[STREAM] / direct[STREAM],
            "proxy_added_us_per_round_trip": proxy_added_us,
            "bar": BAR,
            "pass": ok,
        }
        path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 3 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())

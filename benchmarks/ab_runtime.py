"""Two versions of acp-trio's runtime side by side: the acp-trio pair from each, and the raw pair, alternating.

Usage::

    python benchmarks/ab_runtime.py [--rounds N] [--placement kernel|same|split] BASE [COMMAND ...]

``BASE`` is a git revision of this repository (checked out into a temporary worktree) or a directory
holding another checkout, run from its source (pure Python); the other version ("this") is the
acp-trio this interpreter imports: this checkout's source, or the installed wheel (compiled by mypyc
where ``nox -s bench`` installed it; the header says which), so ``ab_runtime.py HEAD`` there shows
what compiling is worth.  Each round runs one client process
per pair (``benchmarks/runtime/trio_client.py`` driving ``trio_agent.py`` from BASE, then from this
checkout, then the raw pair; the order reverses every other round), each with 1 warm-up and 3 timed
prompts of every ``COMMAND`` (default: ``read 2000 1``, ``permission 2000``, ``read 2000 64``).
It prints, per command, the median wall time and both sides' CPU time per prompt (ms) for each
version and raw, each version's wall time as a multiple of raw's, and this checkout's over BASE's.

``bench_runtime.py`` measures each bar in one run, but its ratios follow the host's phase: runs
minutes apart differ by up to 1.7x.  Alternating the two versions within one run puts them in the
same phase, so this shows what a change is worth in wall time where the full benchmark cannot;
``instructions.py`` shows it in instructions.  ``--placement``: as for ``bench_runtime.py`` (where
the kernel puts the two processes, both on one CPU, or one CPU each).  Exit status 0, 1 if a run failed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

_HERE: Final = Path(__file__).resolve().parent
_REPO: Final = _HERE.parent
sys.path.insert(0, str(_HERE))
import bench_runtime as bench  # noqa: E402
from _shared import runtime_build, subprocess_env, use_source_tree  # noqa: E402

use_source_tree()
import acp_schema  # noqa: E402
import acp_trio  # noqa: E402

DEFAULT_COMMANDS: Final = ("read 2000 1", "permission 2000", "read 2000 64")


def version_env(base: dict[str, str], tree: Path) -> dict[str, str]:
    """``base`` with ``tree``'s runtime and generated packages first on PYTHONPATH."""
    env = dict(base)
    env["PYTHONPATH"] = f"{tree / 'runtime'}:{tree / 'generated'}"
    return env


def measure(base_tree: Path, rounds: int, commands: tuple[str, ...]) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(version, command) → wall and CPU seconds per prompt; versions ``base``, ``this``, ``raw``."""
    by_key = {p.key: p for p in bench.pairs(sys.executable, with_ts=False)}
    runs = [("base", by_key["acp-trio"]), ("this", by_key["acp-trio"]), ("raw", by_key["raw"])]
    results: dict[tuple[str, str], dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as pycache_base, tempfile.TemporaryDirectory() as pycache_this:
        # separate byte-code caches: the two trees' sources differ under the same module names
        envs = {
            "base": version_env(subprocess_env(pycache_base, acp_schema, acp_trio), base_tree),
            "this": subprocess_env(pycache_this, acp_schema, acp_trio),  # what this interpreter imports
            "raw": subprocess_env(pycache_this, acp_schema, acp_trio),
        }
        for i in range(rounds):
            for version, pair in runs if i % 2 == 0 else runs[::-1]:
                run = bench.Pair(pair.key, pair.label, pair.argv, commands)
                out: dict[str, Any] = bench.run_client(run, envs[version], 1, 3)
                for command in commands:
                    slot = results.setdefault((version, command), {"wall": [], "client": [], "agent": []})
                    slot["wall"] += out[command]
                    slot["client"] += out["cpu"][command]["client"]
                    slot["agent"] += out["cpu"][command]["agent"]
    return results


def report(results: dict[tuple[str, str], dict[str, list[float]]], commands: tuple[str, ...], base: str) -> None:
    med = statistics.median
    this = Path(acp_trio.__file__ or "").parent
    print(f"medians, ms per prompt; base = {base} (pure Python), this = {this} ({runtime_build()})")
    for command in commands:
        raw = med(results[("raw", command)]["wall"])
        for version in ("base", "this", "raw"):
            r = results[(version, command)]
            print(
                f"  {command:<16} {version:<5} wall {med(r['wall']) * 1e3:8.1f}  ({med(r['wall']) / raw:4.2f} x raw)"
                f"   CPU client {med(r['client']) * 1e3:7.1f}  agent {med(r['agent']) * 1e3:7.1f}"
            )
        ratio = med(results[("this", command)]["wall"]) / med(results[("base", command)]["wall"])
        print(f"  {command:<16} this / base, wall: {ratio:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=6, help="client processes per version (default 6)")
    parser.add_argument("--placement", choices=("kernel", "same", "split"), default="kernel")
    parser.add_argument("base", help="a git revision of this repository, or a directory with another checkout")
    parser.add_argument("commands", nargs="*", default=list(DEFAULT_COMMANDS))
    args = parser.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    if args.placement != "kernel" and len(cpus) < 2:
        parser.error("--placement same|split needs two CPUs")
    bench.PIN = None if args.placement == "kernel" else (cpus[0], cpus[0] if args.placement == "same" else cpus[1])
    commands = tuple(args.commands)
    try:
        if Path(args.base).is_dir():
            results = measure(Path(args.base).resolve(), args.rounds, commands)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                tree = Path(tmp) / "base"
                subprocess.run(
                    ["git", "-C", str(_REPO), "worktree", "add", "-q", "--detach", str(tree), args.base], check=True
                )
                try:
                    results = measure(tree, args.rounds, commands)
                finally:
                    subprocess.run(["git", "-C", str(_REPO), "worktree", "remove", "--force", str(tree)], check=False)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"ab_runtime: {exc}", file=sys.stderr)
        return 1
    report(results, commands, args.base)
    return 0


if __name__ == "__main__":
    sys.exit(main())

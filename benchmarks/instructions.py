"""Instructions per streamed update (or per round trip), on each side of the acp-trio pair, counted by callgrind.

Usage::

    python benchmarks/instructions.py [--runs N] [--raw] [SCENARIO ...]

Wall-clock and CPU-time figures on a shared machine swing by 10-30% from one run to the next; an
instruction count does not depend on what else the machine is doing, so it shows what a change to
the runtime's hot paths is worth (a few percent) where the timed benchmarks cannot.  For each side
and scenario (default ``stream 20000`` and ``mixed 20000``; any command of
``benchmarks/runtime/common.py``) this runs the bench pair twice with that side under ``valgrind
--tool=callgrind`` (user-space instructions only: the kernel's part of a read or write is not
counted), once with 1 timed prompt and once with 3 (each after 1 warm-up), and divides the
difference by the updates (or requests) of 2 prompts: start-up and warm-up cancel out.

- the **client** side: ``trio_client.py`` (written as README.md teaches) under callgrind, driving
  ``trio_agent.py``;
- the **agent** side: ``trio_agent.py`` under callgrind (``runtime/under_callgrind.py``), driven by
  the raw orjson client, so the figure is the agent's alone.

``--cache`` runs valgrind's cachegrind instead, with a simulated cache like one CPU of this machine
(L1 instruction and data caches of 32 KiB, and 1 MiB of L2 as the last level), and adds each side's
L1 misses per update, instructions (I1) and data (D1, reads and writes): a side that misses L1 more
often per update loses more to anything that slows refills (another guest on the same core, a
move to a cold core), which the instruction count does not show.

``--raw`` counts the raw orjson pair's sides the same way (``raw_agent.py`` driven by the raw client,
and ``raw_client.py`` driving ``raw_agent.py``) and prints acp-trio's count as a multiple of raw's:
the timed benchmark's "× raw" in instructions, which do not depend on where the kernel places the
two processes or how fast the host runs at the time (the timed ratios do, by up to 1.7x between runs).

Both processes get ``PYTHONHASHSEED=0`` and a private byte-code cache, filled by a run of each
client before the first count.  What remains of the spread
(about +-3% from run to run: how many lines each read brings depends on the two processes' relative
speed) is why ``--runs`` (default 3) repeats every measurement; the table shows the median and the
range.  Needs ``valgrind`` (Debian's package).  Exit status 0, 1 if a run failed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

_HERE: Final = Path(__file__).resolve().parent
_SCRIPTS: Final = _HERE / "runtime"
sys.path.insert(0, str(_SCRIPTS))
from _shared import runtime_build, subprocess_env, use_source_tree  # noqa: E402

use_source_tree()
from common import expected, parse_command  # noqa: E402

import acp_schema  # noqa: E402
import acp_trio  # noqa: E402

_COLLECTED: Final = re.compile(rb"Collected : (\d+)")
_SIDES: Final = ("agent", "client")
CACHE_ARGS: Final = ("--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", "--LL=1048576,16,64")
"""cachegrind's simulated cache for ``--cache``: one CPU of this machine (``lscpu``), its L2 as the last level."""


def count(
    side: str, command: str, repeats: int, env: dict[str, str], work: Path, pair: str = "trio", cache: bool = False
) -> tuple[int, ...]:
    """What the ``side`` process executed over a whole bench run of ``command`` with ``repeats``
    timed prompts (after 1 warm-up): (instructions,), or with ``cache`` (instructions, L1
    instruction misses, L1 data misses).  ``pair``: ``"trio"`` (acp-trio's side, driven by or
    driving what the module docstring says) or ``"raw"`` (the raw orjson side, likewise)."""
    out = work / f"valgrind.{pair}.{side}.{repeats}.out"
    if cache:
        options = ["--tool=cachegrind", *CACHE_ARGS, f"--cachegrind-out-file={out}"]
    else:
        options = ["--tool=callgrind", f"--callgrind-out-file={out}"]
    args = ["--warmup", "1", "--repeats", str(repeats), command]
    if side == "client":
        client, agent = ("trio_client.py", "trio_agent.py") if pair == "trio" else ("raw_client.py", "raw_agent.py")
        cmd = ["valgrind", *options, sys.executable, str(_SCRIPTS / client), "--agent", agent, *args]
        run_env = env
    else:
        cmd = [sys.executable, str(_SCRIPTS / "raw_client.py"), "--agent", "under_callgrind.py", *args]
        agent = "trio_agent.py" if pair == "trio" else "raw_agent.py"
        run_env = dict(env, ACP_CALLGRIND_AGENT=agent, ACP_VALGRIND_OPTIONS=" ".join(options))
    proc = subprocess.run(cmd, cwd=_SCRIPTS, env=run_env, capture_output=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{side} {command!r}: exit {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    if cache:  # the summary line: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
        summary = [line for line in out.read_text().splitlines() if line.startswith("summary:")]
        if not summary:
            raise RuntimeError(f"{side} {command!r}: cachegrind wrote no summary")
        ir, i1, _, _, d1r, _, _, d1w, _ = (int(x) for x in summary[-1].split()[1:])
        return ir, i1, d1r + d1w
    found = _COLLECTED.findall(proc.stderr)
    if not found:
        raise RuntimeError(f"{side} {command!r}: callgrind printed no count: {proc.stderr.decode()[-2000:]}")
    return (int(found[-1]),)


def per_unit(
    side: str, command: str, env: dict[str, str], work: Path, pair: str = "trio", cache: bool = False
) -> tuple[float, ...]:
    """:func:`count`'s figures per update (or request) of ``command`` on ``side``: (3 prompts - 1) / 2 prompts."""
    kind, n, _ = parse_command(command)
    one = count(side, command, 1, env, work, pair, cache)
    three = count(side, command, 3, env, work, pair, cache)
    return tuple((b - a) / (2 * expected(kind, n)) for a, b in zip(one, three, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="measurements per side and scenario (default 3)")
    parser.add_argument(
        "--raw",
        action="store_true",
        help="also count the raw orjson agent and client, and print acp-trio's count as a multiple of raw's",
    )
    parser.add_argument(
        "--cache",
        action="store_true",
        help="simulate one CPU's caches (cachegrind) and add L1 instruction and data misses per update",
    )
    parser.add_argument("scenarios", nargs="*", default=["stream 20000", "mixed 20000"])
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)")
        return 1
    print(f"acp-trio [{Path(acp_trio.__file__ or '').parent}, {runtime_build()}], Python {sys.version.split()[0]}")
    what = "cachegrind: instructions, L1 instruction misses (I1), L1 data misses (D1)" if args.cache else "callgrind"
    print(f"instructions per update (or request), {what}, median of {args.runs} (range)")
    with tempfile.TemporaryDirectory(prefix="acp-instructions-") as tmp:
        work = Path(tmp)
        env = subprocess_env(str(work / "pycache"), acp_schema, acp_trio)
        env["PYTHONHASHSEED"] = "0"
        for client in ("trio_client.py", "raw_client.py"):  # fill the byte-code cache: no run below compiles
            prime = [sys.executable, str(_SCRIPTS / client), "--agent", "trio_agent.py", "--warmup", "0"]
            prime += ["--repeats", "1", "stream 10"]
            subprocess.run(prime, cwd=_SCRIPTS, env=env, check=True, timeout=120, capture_output=True)
        for command in args.scenarios:
            medians: dict[str, dict[str, list[float]]] = {}
            for pair in ("trio", "raw") if args.raw else ("trio",):
                cells = []
                for side in _SIDES:
                    try:
                        runs = [per_unit(side, command, env, work, pair, args.cache) for _ in range(args.runs)]
                    except (RuntimeError, subprocess.TimeoutExpired) as exc:
                        print(f"failed: {exc}")
                        return 1
                    mid = medians.setdefault(pair, {})[side] = [statistics.median(x) for x in zip(*runs, strict=True)]
                    xs = [r[0] for r in runs]
                    cell = f"{side} {mid[0]:>8,.0f} ({min(xs):,.0f}-{max(xs):,.0f})"
                    if args.cache:
                        cell += f" I1 {mid[1]:,.0f} D1 {mid[2]:,.0f}"
                    cells.append(cell)
                label = command if pair == "trio" else "  raw"
                print(f"  {label:<16} " + "   ".join(cells))
                sys.stdout.flush()
            if args.raw:
                cells = []
                for side in _SIDES:
                    trio, raw = medians["trio"][side], medians["raw"][side]
                    cell = f"{side} {trio[0] / raw[0]:>8.2f}x"
                    if args.cache:
                        cell += f" I1 {trio[1] / raw[1]:.1f}x D1 {trio[2] / raw[2]:.1f}x"
                    cells.append(cell)
                print(f"  {'  acp-trio/raw':<16} " + "   ".join(cells))
    return 0


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    raise SystemExit(main())

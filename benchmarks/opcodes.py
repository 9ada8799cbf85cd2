"""Python opcodes per streamed update (or per round trip), by function, on one side of the acp-trio pair.

Usage::

    python benchmarks/opcodes.py [--side agent|client] [--top N] COMMAND

``benchmarks/instructions.py`` says how many instructions a side spends per update; this says where
the Python part of them goes.  The side runs under a ``sys.settrace`` hook that counts the opcodes
each function executes (installed by a ``sitecustomize`` on ``PYTHONPATH``, in that process only),
once with 1 timed prompt and once with 3 (each after 1 warm-up); the difference divided by the
updates (or requests) of 2 prompts is printed per function, largest first.  Tracing makes the run
about 30 times slower, not different: the counts repeat exactly.  The client side is
``trio_client.py`` driving ``trio_agent.py``; the agent side is ``trio_agent.py`` driven by the raw
client.  Both processes get a private byte-code cache, filled before the counted runs.  Exit status
0, 1 if a run failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Final

_HERE: Final = Path(__file__).resolve().parent
_SCRIPTS: Final = _HERE / "runtime"
sys.path.insert(0, str(_SCRIPTS))
from _shared import subprocess_env, use_source_tree  # noqa: E402

use_source_tree()
from common import expected, parse_command  # noqa: E402

import acp_schema  # noqa: E402
import acp_trio  # noqa: E402

# Loaded by every Python process started with the directory on PYTHONPATH; counts only in the
# process whose script is ACP_OPCODES_SCRIPT, and writes "count<TAB>function" lines at exit.
_SITECUSTOMIZE: Final = """
import atexit, collections, os, sys
if os.path.basename(sys.argv[0] if sys.argv else "") == os.environ.get("ACP_OPCODES_SCRIPT"):
    counts = collections.Counter()

    def _trace(frame, event, arg):
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        code = frame.f_code
        key = f"{code.co_filename}:{code.co_firstlineno}:{code.co_name}"

        def local(frame, event, arg):
            if event == "opcode":
                counts[key] += 1
            return local

        return local

    def _dump():
        sys.settrace(None)
        with open(os.environ["ACP_OPCODES_OUT"], "w") as out:
            out.writelines(f"{n}\\t{key}\\n" for key, n in counts.items())

    sys.settrace(_trace)
    atexit.register(_dump)
"""


def count(side: str, command: str, repeats: int, env: dict[str, str], work: Path) -> Counter[str]:
    """Opcodes per function the ``side`` process executed over a bench run of ``command``."""
    out = work / f"opcodes.{side}.{repeats}"
    script = "trio_client.py" if side == "client" else "raw_client.py"
    cmd = [sys.executable, str(_SCRIPTS / script), "--agent", "trio_agent.py"]
    cmd += ["--warmup", "1", "--repeats", str(repeats), command]
    run_env = dict(env, ACP_OPCODES_SCRIPT=f"trio_{side}.py", ACP_OPCODES_OUT=str(out))
    proc = subprocess.run(cmd, cwd=_SCRIPTS, env=run_env, capture_output=True, timeout=3600)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"{side} {command!r}: exit {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    counts: Counter[str] = Counter()
    for line in out.read_text().splitlines():
        n, key = line.split("\t", 1)
        counts[key] += int(n)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--side", choices=("agent", "client"), default="client")
    parser.add_argument("--top", type=int, default=40, help="functions to show (default 40)")
    parser.add_argument("command", help="a command of benchmarks/runtime/common.py, e.g. 'stream 20000'")
    args = parser.parse_args()
    kind, n, _ = parse_command(args.command)
    units = 2 * expected(kind, n)
    with tempfile.TemporaryDirectory(prefix="acp-opcodes-") as tmp:
        work = Path(tmp)
        (work / "site").mkdir()
        (work / "site" / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        env = subprocess_env(str(work / "pycache"), acp_schema, acp_trio)
        env["PYTHONPATH"] = os.pathsep.join([str(work / "site"), env.get("PYTHONPATH", "")])
        for client in ("trio_client.py", "raw_client.py"):  # fill the byte-code cache: no counted run compiles
            prime = [sys.executable, str(_SCRIPTS / client), "--agent", "trio_agent.py", "--warmup", "0"]
            prime += ["--repeats", "1", "stream 10"]
            subprocess.run(prime, cwd=_SCRIPTS, env=env, capture_output=True, timeout=120)
        try:
            one = count(args.side, args.command, 1, env, work)
            three = count(args.side, args.command, 3, env, work)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"failed: {exc}")
            return 1
    per_unit = {key: (three[key] - one.get(key, 0)) / units for key in three}
    print(f"{args.side}, {args.command!r}: {sum(per_unit.values()):,.0f} Python opcodes per update (or request)")
    for key, value in sorted(per_unit.items(), key=lambda kv: -kv[1])[: args.top]:
        if value < 0.5:
            break
        print(f"  {value:8.1f}  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

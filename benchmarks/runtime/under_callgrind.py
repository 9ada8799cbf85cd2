"""Run a bench agent under valgrind's callgrind, for ``benchmarks/instructions.py``.

The bench clients spawn ``--agent SCRIPT`` with this interpreter; given this script, the agent named
by ``ACP_CALLGRIND_AGENT`` (a file in this directory) runs under ``valgrind --tool=callgrind``,
which writes its counts to ``ACP_CALLGRIND_OUT`` (or under the options ``ACP_VALGRIND_TOOL`` gives,
space-separated: ``instructions.py --cache`` runs cachegrind).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
agent = HERE / os.environ["ACP_CALLGRIND_AGENT"]
out = os.environ["ACP_CALLGRIND_OUT"]
# ACP_VALGRIND_TOOL: the valgrind options instead (instructions.py --cache: cachegrind's, with its output file)
tool = os.environ.get("ACP_VALGRIND_TOOL", "").split() or ["--tool=callgrind", f"--callgrind-out-file={out}"]
os.execvp("valgrind", ["valgrind", *tool, sys.executable, str(agent)])

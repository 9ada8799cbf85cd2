"""Run a bench agent under valgrind's callgrind, for ``benchmarks/instructions.py``.

The bench clients spawn ``--agent SCRIPT`` with this interpreter; given this script, the agent named
by ``ACP_CALLGRIND_AGENT`` (a file in this directory) runs under ``valgrind --tool=callgrind``,
which writes its counts to ``ACP_CALLGRIND_OUT``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
agent = HERE / os.environ["ACP_CALLGRIND_AGENT"]
out = os.environ["ACP_CALLGRIND_OUT"]
os.execvp("valgrind", ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, str(agent)])

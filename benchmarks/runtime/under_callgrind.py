"""Run a bench agent under valgrind (callgrind or cachegrind), for ``benchmarks/instructions.py``.

The bench clients spawn ``--agent SCRIPT`` with this interpreter; given this script, the agent named
by ``ACP_CALLGRIND_AGENT`` (a file in this directory) runs under valgrind with the options
``ACP_VALGRIND_OPTIONS`` gives, space-separated (the tool, callgrind or cachegrind, and its output file).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
agent = HERE / os.environ["ACP_CALLGRIND_AGENT"]
options = os.environ["ACP_VALGRIND_OPTIONS"].split()
os.execvp("valgrind", ["valgrind", *options, sys.executable, str(agent)])

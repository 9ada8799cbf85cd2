"""An agent that writes ``argv[2]`` numbered lines to stderr during a prompt turn, then ends.

``argv[1]``: how it ends: ``exit3`` (exit status 3) or ``kill`` (SIGKILL to itself).  Used to
check what ``ConnectionClosed`` says.
"""

import os
import signal
import sys

from _common import EchoAgent

import acp_trio
from acp_schema import v1

HOW = sys.argv[1]
LINES = int(sys.argv[2]) if len(sys.argv) > 2 else 3


class CrashingAgent(EchoAgent):
    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        for i in range(LINES):
            sys.stderr.write(f"stderr line {i:03d} " + "." * 180 + "\n")
        sys.stderr.write("fatal: the model endpoint refused the key\n")
        sys.stderr.flush()
        if HOW == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)


acp_trio.run_agent_stdio(CrashingAgent)

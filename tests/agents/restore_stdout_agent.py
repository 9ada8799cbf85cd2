"""An agent that writes to stdout during and after serving, to show what ``serve_agent_stdio`` restores.

While serving, the ``initialize`` handler prints ``during-print`` (must land on stderr).  After
serving it writes ``after-print`` (via ``sys.stdout``), ``after-fd`` (fd 1), ``after-child`` (a
child process) and a report on ``sys.stdout`` and the blocking mode of fds 0 and 1.
"""

import os
import subprocess
import sys
from typing import Any

from _common import EchoAgent

import acp_trio
from acp_schema import v1

stdout_before = sys.stdout


class Agent(EchoAgent):
    async def initialize(self, params: v1.InitializeRequest) -> Any:
        print("during-print")
        return v1.InitializeResponse(
            protocol_version=params.protocol_version, agent_capabilities=v1.AgentCapabilities()
        )


acp_trio.run_agent_stdio(Agent)
print("after-print")
print(f"same-stdout={sys.stdout is stdout_before} blocking0={os.get_blocking(0)} blocking1={os.get_blocking(1)}")
sys.stdout.flush()
os.write(1, b"after-fd\n")
subprocess.run(["echo", "after-child"], check=True)

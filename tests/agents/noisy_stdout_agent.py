"""An agent that writes junk to its stdout while serving, three ways, on every ``_test/noise`` request.

``print`` (``junk-print N``), ``os.write(1, ...)`` (``junk-fd N``) and a child process inheriting
fd 1 (``junk-child N``), where N is the request's ``n``.  Answers ``{"n": N}``.
"""

import os
import subprocess
import sys
from typing import Any

from _common import EchoAgent

import acp_trio


class NoisyAgent(EchoAgent):
    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        conn.on_ext_request("_test/noise", self.noise)

    async def noise(self, params: Any) -> Any:
        n = params["n"]
        print(f"junk-print {n}")
        sys.stdout.flush()
        os.write(1, f"junk-fd {n}\n".encode())
        subprocess.run(["echo", f"junk-child {n}"], check=True)
        return {"n": n}


acp_trio.run_agent_stdio(NoisyAgent)

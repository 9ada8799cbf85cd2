"""An agent that writes 8 MiB to stderr before serving and 8 MiB more while answering initialize.

Lines are ``flood-before NNNNN xxx...`` / ``flood-during NNNNN xxx...`` (1024 bytes with the
newline), each flood followed by a ``flood-before-end`` / ``flood-during-end`` line.
"""

import sys
from typing import Any

from _common import EchoAgent

import acp_trio
from acp_schema import v1

LINES = 8192  # x 1 KiB = 8 MiB


def flood(tag: str) -> None:
    out = sys.stderr.buffer
    out.write(b"".join(f"flood-{tag} {i:05d} ".encode().ljust(1023, b"x") + b"\n" for i in range(LINES)))
    out.write(f"flood-{tag}-end\n".encode())
    out.flush()


class FloodAgent(EchoAgent):
    async def initialize(self, params: v1.InitializeRequest) -> Any:
        flood("during")
        return v1.InitializeResponse(
            protocol_version=params.protocol_version, agent_capabilities=v1.AgentCapabilities()
        )


flood("before")
acp_trio.run_agent_stdio(FloodAgent)

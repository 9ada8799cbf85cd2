"""Shared pieces of the agent scripts that ``tests/test_processes.py`` runs as real processes.

The scripts import this module from their own directory (Python puts a script's directory first
on ``sys.path``).
"""

from __future__ import annotations

import os
from typing import Any

from acp_schema import v1


def write_pid_file(path: str) -> None:
    """Write this process's pid to ``path`` atomically (a reader never sees a partial file)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, path)


class EchoAgent:
    """Creates sessions ``s1``, ``s2``, ...; a prompt streams its words back as message chunks.

    Extension request ``_test/env`` answers with the working directory, ``ACP_TRIO_TEST_VAR``, the
    names of the environment variables and the pid.
    """

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sessions = 0
        conn.on_ext_request("_test/env", self.env)

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        self.sessions += 1
        return v1.NewSessionResponse(session_id=f"s{self.sessions}")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        words = [w for block in params.prompt if isinstance(block, v1.TextContentBlock) for w in block.text.split()]
        for word in words:
            update = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=word))
            await self.conn.client.session_update(v1.SessionNotification(session_id=params.session_id, update=update))
        return v1.PromptResponse(stop_reason="end_turn")

    async def env(self, params: Any) -> Any:
        return {
            "cwd": os.getcwd(),
            "var": os.environ.get("ACP_TRIO_TEST_VAR"),
            "names": sorted(os.environ),
            "pid": os.getpid(),
        }

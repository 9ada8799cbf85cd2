"""The official-SDK bench client: spawns ``official_agent.py`` and times prompts like ``trio_client.py``.

Usage: ``python official_client.py [--agent SCRIPT] [--warmup W] [--repeats R] COMMAND...``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    FileSystemCapabilities,
    ReadTextFileResponse,
    RequestPermissionResponse,
)
from acp.stdio import spawn_agent_process
from common import FILE_CONTENT, client_args, time_prompts

HERE = Path(__file__).resolve().parent


class BenchClient:
    def __init__(self) -> None:
        self.updates = 0
        self.reads = 0
        self.permissions = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates += 1

    async def read_text_file(self, session_id: str, path: str, **kwargs: Any) -> ReadTextFileResponse:
        self.reads += 1
        return ReadTextFileResponse(content=FILE_CONTENT)

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.permissions += 1
        return RequestPermissionResponse(outcome=AllowedOutcome(option_id="allow", outcome="selected"))


async def run(agent_script: str, commands: list[str], warmup: int, repeats: int) -> dict[str, Any]:
    client = BenchClient()
    # the SDK trims the agent's environment; keep the interpreter's module path
    env = {k: os.environ[k] for k in ("PYTHONPATH", "PYTHONPYCACHEPREFIX") if k in os.environ}
    agent = str(HERE / agent_script)
    async with spawn_agent_process(client, sys.executable, agent, env=env) as (conn, process):
        caps = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True))
        await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=caps)
        session = await conn.new_session(cwd=str(HERE), mcp_servers=[])

        async def prompt(command: str) -> str:
            response = await conn.prompt(session_id=session.session_id, prompt=[text_block(command)])
            return str(response.stop_reason)

        return await time_prompts(commands, warmup, repeats, client, prompt, process.pid)


def main() -> None:
    args = client_args("official_agent.py")
    print(json.dumps(asyncio.run(run(args.agent, args.commands, args.warmup, args.repeats))))


if __name__ == "__main__":
    main()

"""The acp-trio bench client: spawns ``trio_agent.py``, initializes, opens a session, times prompts.

Usage: ``python trio_client.py [--agent SCRIPT] [--warmup W] [--repeats R] COMMAND...`` (commands:
see ``common.py``; ``--agent raw_agent.py`` drives the raw baseline's agent; ``--agent adapt:trio_v2_agent.py``
spawns ``python -m acp_trio.adapt --speak 1 -- python trio_v2_agent.py``: the v2 bench agent
served to this v1 client by the adapter).  Prints
``{"<command>": [seconds, ...], "cpu": ..., "agent_hwm_kib": ...}``: for each command, W
unmeasured prompts, then R measured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio
from common import FILE_CONTENT, client_args, time_prompts

from acp_schema import v1
from acp_trio import spawn_agent

HERE = Path(__file__).resolve().parent
ALLOW = v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id="allow"))


class BenchClient:
    def __init__(self, conn: Any) -> None:
        self.updates = 0
        self.reads = 0
        self.permissions = 0

    async def session_update(self, params: v1.SessionNotification) -> None:
        self.updates += 1

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        self.reads += 1
        return v1.ReadTextFileResponse(content=FILE_CONTENT)

    async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        self.permissions += 1
        return ALLOW


async def run(agent_script: str, commands: list[str], warmup: int, repeats: int) -> dict[str, Any]:
    argv = [str(HERE / agent_script)]
    if agent_script.startswith("adapt:"):  # through the v1 <-> v2 adapter (bench_adapt.py)
        argv = ["-m", "acp_trio.adapt", "--speak", "1", "--", sys.executable, str(HERE / agent_script[6:])]
    async with spawn_agent(sys.executable, argv, client=BenchClient) as conn:
        client: BenchClient = conn.handler
        agent = v1.AgentPeer(conn)
        caps = v1.ClientCapabilities(fs=v1.FileSystemCapabilities(read_text_file=True))
        await agent.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=caps))
        session = await agent.session_new(v1.NewSessionRequest(cwd=str(HERE), mcp_servers=[]))

        async def prompt(command: str) -> str:
            text = [v1.TextContentBlock(text=command)]
            response = await agent.session_prompt(v1.PromptRequest(session_id=session.session_id, prompt=text))
            return response.stop_reason

        return await time_prompts(commands, warmup, repeats, client, prompt, conn.process.pid)


def main() -> None:
    args = client_args("trio_agent.py")
    print(json.dumps(trio.run(run, args.agent, args.commands, args.warmup, args.repeats)))


if __name__ == "__main__":
    main()

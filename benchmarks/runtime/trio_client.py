"""The acp-trio bench client: spawns ``trio_agent.py``, initializes, opens a session, times prompts.

Usage: ``python trio_client.py [--warmup W] [--repeats R] COMMAND...`` (commands: see ``common.py``).
Prints ``{"<command>": [seconds, ...]}``: for each command, W unmeasured prompts, then R measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import trio
from common import FILE_CONTENT, parse_command

from acp_schema import v1
from acp_trio import spawn_agent

HERE = Path(__file__).resolve().parent


class BenchClient:
    def __init__(self, conn: Any) -> None:
        self.updates = 0
        self.reads = 0

    async def session_update(self, params: v1.SessionNotification) -> None:
        self.updates += 1

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        self.reads += 1
        return v1.ReadTextFileResponse(content=FILE_CONTENT)


async def run(commands: list[str], warmup: int, repeats: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {}
    async with spawn_agent(sys.executable, [str(HERE / "trio_agent.py")], client=BenchClient) as conn:
        client: BenchClient = conn.handler
        agent = v1.AgentPeer(conn)
        caps = v1.ClientCapabilities(fs=v1.FileSystemCapabilities(read_text_file=True))
        await agent.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=caps))
        session = await agent.session_new(v1.NewSessionRequest(cwd=str(HERE), mcp_servers=[]))
        for command in commands:
            kind, n, _ = parse_command(command)
            request = v1.PromptRequest(session_id=session.session_id, prompt=[v1.TextContentBlock(text=command)])
            times = results[command] = []
            for k in range(warmup + repeats):
                client.updates = client.reads = 0
                start = time.perf_counter()
                response = await agent.session_prompt(request)
                elapsed = time.perf_counter() - start
                got = client.updates if kind == "stream" else client.reads
                if response.stop_reason != "end_turn" or got != n:
                    raise AssertionError(f"{command}: stop reason {response.stop_reason!r}, {got} of {n} handled")
                if k >= warmup:
                    times.append(elapsed)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("commands", nargs="+")
    args = parser.parse_args()
    results = trio.run(run, args.commands, args.warmup, args.repeats)
    print(json.dumps(results))


if __name__ == "__main__":
    main()

"""acp-trio's client side of the remote benchmark, written as the README teaches.

Usage: ``python trio_client.py URL [--warmup W] [--repeats R] [--profile PATH] COMMAND...``
(commands as in ``../runtime/common.py``).  ``ws://`` URLs connect with
:func:`~acp_trio.transports.websocket.connect_websocket`, ``http://`` ones with
:func:`~acp_trio.transports.http.connect_http`; then ``initialize`` (advertising
``fs.readTextFile``), ``session/new`` and the timed prompts.  The client is the stdio bench's
(``../runtime/trio_client.py``: it counts updates and answers ``fs/read_text_file`` and
``session/request_permission``), timed and checked by ``common.time_prompts`` (every prompt must
end the turn having handled what its command asks).  Prints ``{"<command>": [seconds, ...]}``.
``--profile PATH``: write cProfile statistics.  ``--server-pid PID``: also each side's CPU seconds per
measured prompt (the server's from ``/proc``), under ``"cpu"`` as ``{"<command>": {"agent": [...],
"client": [...]}}`` (``common.Meter``; "agent" is the server process).
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runtime"))

from common import time_prompts
from trio_client import BenchClient

from acp_schema import v1
from acp_trio import ClientSideConnection

CAPABILITIES = v1.ClientCapabilities(fs=v1.FileSystemCapabilities(read_text_file=True))


def connect(url: str) -> AbstractAsyncContextManager[ClientSideConnection]:
    if url.startswith(("ws://", "wss://")):
        from acp_trio.transports.websocket import connect_websocket

        return connect_websocket(url, BenchClient)
    from acp_trio.transports.http import connect_http

    return connect_http(url, BenchClient)


async def run(
    url: str, commands: list[str], warmup: int, repeats: int, server_pid: int | None = None
) -> dict[str, Any]:
    async with connect(url) as conn:
        client: BenchClient = conn.handler
        agent = v1.AgentPeer(conn)
        await agent.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=CAPABILITIES))
        session = await agent.session_new(v1.NewSessionRequest(cwd=str(Path.cwd()), mcp_servers=[]))

        async def prompt(command: str) -> str:
            text = [v1.TextContentBlock(text=command)]
            response = await agent.session_prompt(v1.PromptRequest(session_id=session.session_id, prompt=text))
            return response.stop_reason

        return await time_prompts(commands, warmup, repeats, client, prompt, server_pid)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--server-pid", type=int)
    parser.add_argument("commands", nargs="+")
    args = parser.parse_args()
    if args.profile is None:
        result = trio.run(run, args.url, args.commands, args.warmup, args.repeats, args.server_pid)
    else:
        import cProfile

        with cProfile.Profile() as profile:
            result = trio.run(run, args.url, args.commands, args.warmup, args.repeats)
        profile.dump_stats(args.profile)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

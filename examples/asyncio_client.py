"""An asyncio program that drives an acp-trio client through a full prompt turn.

The program is asyncio (``asyncio.run``, an asyncio heartbeat task beside the turn, as in a FastAPI
or Textual app); the ACP client is acp-trio's, run by ``acp_trio.aio.trio_portal()``: trio in guest
mode on the running asyncio loop, in the same thread.  It spawns the example agent
(``python -m acp_trio.demo --serve-agent``) over stdio, lets it read ``notes.txt`` in a temporary
directory, prints the agent's streamed text and tool calls, and the stop reason.

Run it: ``python examples/asyncio_client.py`` (acp-trio installed; no extra needed for this
direction).
"""

import asyncio
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from acp_schema import v1
from acp_trio import SessionState, StandardClient, allow_kinds, spawn_agent
from acp_trio.aio import trio_portal


class PrintingClient(StandardClient):
    """Prints each streamed text chunk as it arrives, and each new tool call on a line of its own."""

    midline = False  # whether streamed text left the cursor in the middle of a line

    def on_update(self, state: SessionState, update: Any) -> None:
        if isinstance(update, v1.AgentMessageChunkSessionUpdate) and isinstance(update.content, v1.TextContentBlock):
            print(update.content.text, end="", flush=True)
            self.midline = not update.content.text.endswith("\n")
        elif isinstance(update, v1.ToolCallSessionUpdate):
            print(f"{chr(10) if self.midline else ''}[tool] {update.title}", flush=True)
            self.midline = False


async def one_turn(workdir: str, text: str) -> str:
    """Trio code: spawn the demo agent, initialize, open a session, run one turn; its stop reason."""
    command = ["-m", "acp_trio.demo", "--serve-agent"]
    client = partial(PrintingClient, policy=allow_kinds({"read"}))
    async with spawn_agent(sys.executable, command, client=client) as conn:
        handler: PrintingClient = conn.handler
        init = v1.InitializeRequest(protocol_version=1, client_capabilities=handler.capabilities)
        await conn.agent.initialize(init, timeout=30)
        session = await conn.agent.session_new(v1.NewSessionRequest(cwd=workdir, mcp_servers=[]))
        result = await handler.prompt(session.session_id, text)
        return str(result.stop_reason)


async def main() -> None:
    workdir = tempfile.mkdtemp()
    Path(workdir, "notes.txt").write_text("buy milk\ncall mum\n", encoding="utf-8")
    ticks = 0

    async def heartbeat() -> None:  # other asyncio work keeps running during the turn
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    beating = asyncio.create_task(heartbeat())
    async with trio_portal() as portal:
        stop_reason = await portal.run(one_turn, workdir, "Please summarize notes.txt into summary.txt.")
    beating.cancel()
    print(f"\nstop reason: {stop_reason} (the asyncio heartbeat ticked meanwhile: {'yes' if ticks else 'no'})")


if __name__ == "__main__":
    asyncio.run(main())

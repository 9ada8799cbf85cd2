"""Many WebSocket connections at once to one server: the concurrency scenario of the remote benchmark.

Usage: ``python many_client.py URL --connections C --updates N``.  Opens C connections with
:func:`~acp_trio.transports.websocket.connect_websocket` (all at once), each initializes, opens a
session and sends one ``session/prompt`` "stream N"; every connection checks that its N
``agent_message_chunk`` texts arrive in order (``token 0 …``, ``token 1 …``, …) before the turn
ends with ``end_turn``.  All connections are opened before any prompt is sent, and all are closed
before this prints ``{"connections": C, "ok": K, "errors": [...], "seconds": S}`` (S: from the
first prompt to the last response).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runtime"))

from common import chunk_text

from acp_schema import v1
from acp_trio.transports.websocket import connect_websocket


class OrderedClient:
    """Counts updates, and records the first one that is not the next chunk in order."""

    def __init__(self, conn: Any) -> None:
        self.updates = 0
        self.out_of_order: str | None = None

    async def session_update(self, params: v1.SessionNotification) -> None:
        update = params.update
        text = update.content.text if isinstance(update, v1.AgentMessageChunkSessionUpdate) else None
        if text != chunk_text(self.updates) and self.out_of_order is None:
            self.out_of_order = f"update {self.updates}: got {text!r}"
        self.updates += 1


async def one(url: str, n: int, opened: trio.Semaphore, go: trio.Event, done: list[float], errors: list[str]) -> None:
    try:
        async with connect_websocket(url, OrderedClient, connect_timeout=60) as conn:
            client: OrderedClient = conn.handler
            agent = v1.AgentPeer(conn)
            caps = v1.ClientCapabilities()
            await agent.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=caps), timeout=60)
            session = await agent.session_new(v1.NewSessionRequest(cwd=str(Path.cwd()), mcp_servers=[]))
            opened.release()
            await go.wait()
            text = [v1.TextContentBlock(text=f"stream {n}")]
            response = await agent.session_prompt(v1.PromptRequest(session_id=session.session_id, prompt=text))
            done.append(time.perf_counter())
            if response.stop_reason != "end_turn" or client.updates != n or client.out_of_order:
                errors.append(
                    f"stop reason {response.stop_reason!r}, {client.updates} of {n} updates"
                    + (f", out of order at {client.out_of_order}" if client.out_of_order else "")
                )
    except Exception as exc:  # counted and reported, the others go on
        errors.append(repr(exc)[:300])
        opened.release()


async def run(url: str, connections: int, n: int) -> dict[str, Any]:
    opened = trio.Semaphore(0, max_value=connections)
    go = trio.Event()
    done: list[float] = []
    errors: list[str] = []
    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(one, url, n, opened, go, done, errors)
        for _ in range(connections):
            await opened.acquire()
        start = time.perf_counter()
        go.set()
    seconds = (max(done) - start) if done else 0.0
    return {"connections": connections, "ok": connections - len(errors), "errors": errors[:5], "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--updates", type=int, default=2000)
    args = parser.parse_args()
    print(json.dumps(trio.run(run, args.url, args.connections, args.updates)))


if __name__ == "__main__":
    main()

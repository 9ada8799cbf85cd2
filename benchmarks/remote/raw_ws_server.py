"""The floor under the WebSocket pairings: hypercorn's trio worker and a bare ASGI app, no ACP.

Usage: ``python raw_ws_server.py``; prints ``{"port": N, "pid": P}`` and serves until its stdin
closes.  For each text frame ``stream N`` it sends N precomputed ``session/update`` notification
frames (the bench's chunk texts, compact JSON), one ASGI ``websocket.send`` each, then the frame
``{"jsonrpc":"2.0","id":0,"result":{"stopReason":"end_turn"}}``.  No framework, no decoding.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runtime"))

from common import SESSION_ID, chunk_text

from acp_trio.transports.asgi import serve

END = '{"jsonrpc":"2.0","id":0,"result":{"stopReason":"end_turn"}}'


def update(i: int) -> str:
    content = {"type": "text", "text": chunk_text(i)}
    params = {"sessionId": SESSION_ID, "update": {"sessionUpdate": "agent_message_chunk", "content": content}}
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params}, separators=(",", ":"))


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "websocket":
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    frames: list[str] = []
    while True:
        message = await receive()
        if message["type"] != "websocket.receive":
            return
        n = int(message["text"].split()[1])
        frames.extend(update(i) for i in range(len(frames), n))
        for i in range(n):
            await send({"type": "websocket.send", "text": frames[i]})
        await send({"type": "websocket.send", "text": END})


async def main() -> None:
    stdin = trio.lowlevel.FdStream(sys.stdin.fileno())
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(functools.partial(serve, app, "127.0.0.1", 0))
        print(json.dumps({"port": int(urls[0].rsplit(":", 1)[1]), "pid": os.getpid()}), flush=True)
        while await stdin.receive_some():
            pass
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)

"""The floor under the remote pairings: hypercorn's trio worker and a bare ASGI app, no ACP.

Usage: ``python raw_ws_server.py``; prints ``{"port": N, "pid": P}`` and serves until its stdin
closes.  What a pairing costs here is what hypercorn, the clients' libraries and trio cost with no
ACP runtime on either side (no decoding beyond finding an id, no dispatch, no typed objects):

WebSocket (any path):

- the text frame ``stream N``: N precomputed ``session/update`` notification frames (the bench's
  chunk texts, compact JSON), one ASGI ``websocket.send`` each, then :data:`END`;
- the text frame ``read N 1``: N round trips, each a precomputed ``fs/read_text_file`` request frame
  sent and the client's answer frame received (not decoded), then :data:`END`;
- any other frame starting with ``{``: a JSON-RPC request, answered ``{"result": {}}`` with its id
  (what ``connect_client.py`` needs: ``initialize`` and ``session/new``).

Streamable HTTP, just enough for ``connect_client.py`` and ``raw_http_client.py``:

- ``POST`` ``initialize``: ``200`` with the answer and a new ``Acp-Connection-Id``;
- ``GET`` with that header: the connection's SSE stream, kept open;
- ``POST`` of another request: ``202``, and its answer (``{"result": {}}``) sent on the stream;
  ``POST`` of the text ``read N 1`` (``text/plain``): ``202``, then the first of N request events
  on the stream; ``POST`` of an answer (a JSON object without ``method``): ``202``, then the next
  request event, or :data:`END` after the Nth;
- ``DELETE``: ``200``, the stream ends.
"""

from __future__ import annotations

import functools
import itertools
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
READ = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "fs/read_text_file",
        "params": {"sessionId": SESSION_ID, "path": "/tmp/acp-bench/file.txt"},
    },
    separators=(",", ":"),
)


def update(i: int) -> str:
    content = {"type": "text", "text": chunk_text(i)}
    params = {"sessionId": SESSION_ID, "update": {"sessionUpdate": "agent_message_chunk", "content": content}}
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params}, separators=(",", ":"))


def answer(request: str | bytes) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": json.loads(request)["id"], "result": {}}, separators=(",", ":"))


class HttpConnection:
    """One Streamable HTTP connection of the floor: its SSE events and its read round trips left."""

    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[bytes](1000)
        self.reads_left = 0


HTTP: dict[str, HttpConnection] = {}
IDS = itertools.count()


async def websocket(receive: Any, send: Any) -> None:
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    frames: list[str] = []
    while True:
        message = await receive()
        if message["type"] != "websocket.receive":
            return
        text = message["text"]
        if text.startswith("{"):
            await send({"type": "websocket.send", "text": answer(text)})
            continue
        kind, n = text.split()[0], int(text.split()[1])
        if kind == "read":
            for _ in range(n):
                await send({"type": "websocket.send", "text": READ})
                if (await receive())["type"] != "websocket.receive":
                    return
        else:
            frames.extend(update(i) for i in range(len(frames), n))
            for i in range(n):
                await send({"type": "websocket.send", "text": frames[i]})
        await send({"type": "websocket.send", "text": END})


def event(text: str) -> bytes:
    return f"data: {text}\n\n".encode()


async def http(scope: dict[str, Any], receive: Any, send: Any) -> None:
    headers = dict(scope["headers"])
    connection_id = headers.get(b"acp-connection-id", b"").decode()
    if scope["method"] == "GET":
        connection = HTTP[connection_id]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b": open\n\n", "more_body": True})
        async for data in connection.receive:
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["method"] == "DELETE":
        HTTP.pop(connection_id).send.close()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
        return
    if body.startswith(b"{") and b'"initialize"' in body:
        connection_id = f"c{next(IDS)}"
        HTTP[connection_id] = HttpConnection()
        out = answer(body).encode()
        start_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(out)).encode()),
            (b"acp-connection-id", connection_id.encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": start_headers})
        await send({"type": "http.response.body", "body": out})
        return
    await send({"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})
    connection = HTTP[connection_id]
    if body.startswith(b"read"):
        connection.reads_left = int(body.split()[1])
    elif b'"method"' in body:
        await connection.send.send(event(answer(body)))
        return
    if connection.reads_left:
        connection.reads_left -= 1
        await connection.send.send(event(READ))
    else:
        await connection.send.send(event(END))


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
    elif scope["type"] == "websocket":
        await websocket(receive, send)
    elif scope["type"] == "http":
        await http(scope, receive, send)


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

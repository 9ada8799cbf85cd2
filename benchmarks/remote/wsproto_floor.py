"""The lowest floor under the WebSocket round trips: trio's sockets and wsproto alone, one task per side.

Usage: ``python wsproto_floor.py --serve`` prints ``{"port": N, "pid": P}`` and serves until its
stdin closes; ``python wsproto_floor.py URL [--warmup W] [--repeats R] read N 1 ...`` is its client
and prints ``{"<command>": [seconds, ...]}`` like the other bench clients.

This is what any trio program that frames WebSocket messages with wsproto (as hypercorn and
trio-websocket do) pays for a round trip, with everything else taken away: no ASGI server, no
WebSocket client library, no reader tasks, no ACP; each side is one task that reads its socket,
feeds wsproto and writes wsproto's bytes back.  ``read N 1`` is the same exchange as the bench's
``fs/read_text_file`` round trips: the server sends a request frame, the client answers it, N times,
then the final response; ``stream N``: the server frames N ``session/update`` notifications (the
bench's chunk texts), 64 frames a write, then the final response, and the client parses them all.
Frames' texts are precomputed and nothing is decoded.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runtime"))

from common import SESSION_ID, chunk_text
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Message, Request, TextMessage

READ = (
    '{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file",'
    '"params":{"sessionId":"sess_bench","path":"/tmp/acp-bench/file.txt"}}'
)
ANSWER = '{"jsonrpc":"2.0","id":7,"result":{"content":"floor"}}'
END = '{"jsonrpc":"2.0","id":0,"result":{"stopReason":"end_turn"}}'
UPDATES: list[str] = []


def updates(n: int) -> list[str]:
    """The first ``n`` streamed notifications (compact JSON, as ``raw_ws_server.py`` sends them)."""
    while len(UPDATES) < n:
        content = {"type": "text", "text": chunk_text(len(UPDATES))}
        update = {"sessionUpdate": "agent_message_chunk", "content": content}
        message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SESSION_ID, "update": update}}
        UPDATES.append(json.dumps(message, separators=(",", ":")))
    return UPDATES[:n]


async def send_updates(ws: WSConnection, stream: trio.SocketStream, n: int) -> None:
    texts = updates(n)
    for start in range(0, n, 64):
        await stream.send_all(b"".join(ws.send(Message(data=text)) for text in texts[start : start + 64]))
    await stream.send_all(ws.send(Message(data=END)))


async def serve_one(stream: trio.SocketStream) -> None:
    ws = WSConnection(ConnectionType.SERVER)
    reads_left = 0
    text = ""
    while data := await stream.receive_some(65536):
        ws.receive_data(data)
        out = b""
        for event in ws.events():
            if isinstance(event, Request):
                out += ws.send(AcceptConnection())
            elif isinstance(event, CloseConnection):
                out += ws.send(event.response())
            elif isinstance(event, TextMessage):
                text += event.data  # (a frame split between reads comes in parts)
                if not event.message_finished:
                    continue
                command, text = text, ""
                if command.startswith("stream"):
                    await stream.send_all(out)
                    out = b""
                    await send_updates(ws, stream, int(command.split()[1]))
                    continue
                if command.startswith("read"):
                    reads_left = int(command.split()[1])
                if reads_left:
                    reads_left -= 1
                    out += ws.send(Message(data=READ))
                else:
                    out += ws.send(Message(data=END))
        if out:
            await stream.send_all(out)


async def serve() -> None:
    stdin = trio.lowlevel.FdStream(sys.stdin.fileno())
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, serve_one, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        print(json.dumps({"port": port, "pid": os.getpid()}), flush=True)
        while await stdin.receive_some():
            pass
        nursery.cancel_scope.cancel()


async def run(url: str, commands: list[str], warmup: int, repeats: int) -> dict[str, list[float]]:
    parts = urlsplit(url)
    stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", parts.port or 80)
    ws = WSConnection(ConnectionType.CLIENT)
    await stream.send_all(ws.send(Request(host=parts.netloc, target=parts.path or "/")))
    while not any(
        isinstance(e, AcceptConnection) for e in (ws.receive_data(await stream.receive_some(65536)), *ws.events())
    ):
        pass
    results: dict[str, list[float]] = {}
    for command in commands:
        n, streaming = int(command.split()[1]), command.startswith("stream")
        times = results[command] = []
        for k in range(warmup + repeats):
            start = time.perf_counter()
            await stream.send_all(ws.send(Message(data=command)))
            got, done, text = 0, False, ""
            while not done:
                ws.receive_data(await stream.receive_some(65536))
                out = b""
                for event in ws.events():
                    if not isinstance(event, TextMessage):
                        continue
                    text += event.data  # (a frame split between reads comes in parts)
                    if not event.message_finished:
                        continue
                    if text == END:
                        done = True
                    else:
                        got += 1
                        if not streaming:
                            out += ws.send(Message(data=ANSWER))
                    text = ""
                if out:
                    await stream.send_all(out)
            elapsed = time.perf_counter() - start
            if got != n:
                raise AssertionError(f"{command}: {got} of {n} messages")
            if k >= warmup:
                times.append(elapsed)
    await stream.aclose()
    return results


def main() -> None:
    if sys.argv[1:] == ["--serve"]:
        trio.run(serve)
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("commands", nargs="+")
    args = parser.parse_args()
    print(json.dumps(trio.run(run, args.url, args.commands, args.warmup, args.repeats)))


if __name__ == "__main__":
    main()

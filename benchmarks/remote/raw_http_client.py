"""The Streamable HTTP floor's client: httpx2 alone, no ACP (see ``raw_ws_server.py``).

Usage: ``python raw_http_client.py URL [--warmup W] [--repeats R] read N 1 ...``.  ``POST``
``initialize``, opens the connection's SSE stream (``GET``), then per prompt ``POST`` s the command
(``text/plain``) and, for each request event the stream brings, ``POST`` s :data:`ANSWER` (``202``)
until the final response, checking N requests came: a round trip is what one ``fs/read_text_file``
costs over Streamable HTTP (an SSE event in, a ``POST`` out), with the client library our
``connect_http`` uses and nothing decoded.  Prints ``{"<command>": [seconds, ...]}``; with
``--server-pid PID`` also each side's CPU seconds per measured prompt (``"cpu"``, as
``trio_client.py`` prints them).

``--one-write``: each request's head goes out with its body in one write (one ``sendto``, one TCP
segment), as ``connect_http``'s ``POST`` s do (:func:`acp_trio.transports._http_wire.send_heads_with_bodies`
wraps httpx2's network backend); without it, httpx2's own way: the head, then the body, two writes,
so the server reads the head, waits, then reads the body.  ``ab_rtt.py --floor-one-write`` and
``http_profile.py --variant floor1`` use it; ``bench_remote.py``'s HTTP floor does not (two writes).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx2
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "runtime"))

from common import Meter

INITIALIZE = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}'
ANSWER = b'{"jsonrpc":"2.0","id":7,"result":{"content":"floor"}}'
JSON = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


async def run(
    url: str,
    commands: list[str],
    warmup: int,
    repeats: int,
    server_pid: int | None = None,
    one_write: bool = False,
) -> dict[str, Any]:
    meter = Meter(server_pid)
    client = httpx2.AsyncClient()
    if one_write:
        from acp_trio.transports._http_wire import send_heads_with_bodies

        if not send_heads_with_bodies(client):
            raise RuntimeError("--one-write: httpx2's transport is not the layout _http_wire expects")
    async with client:
        initialized = await client.post(url, content=INITIALIZE, headers=JSON)
        initialized.raise_for_status()
        ids = {"acp-connection-id": initialized.headers["acp-connection-id"]}
        async with client.stream("GET", url, headers={**ids, "accept": "text/event-stream"}) as sse:
            lines = sse.aiter_lines()

            async def next_event() -> str:
                data = ""
                while (line := await anext(lines)) != "" or not data:
                    if line.startswith("data:"):
                        data = line[5:].strip()
                return data

            for command in commands:
                n = int(command.split()[1])
                for k in range(warmup + repeats):
                    meter.start()
                    posted = await client.post(
                        url, content=command.encode(), headers={**ids, "content-type": "text/plain"}
                    )
                    got = 0
                    while '"result"' not in (data := await next_event())[:40]:
                        got += 1
                        answered = await client.post(url, content=ANSWER, headers={**JSON, **ids})
                        if answered.status_code != 202:
                            raise AssertionError(f"answer: {answered.status_code}")
                    meter.stop(command, k >= warmup)
                    if posted.status_code != 202 or got != n:
                        raise AssertionError(f"{command}: {posted.status_code}, {got} of {n} requests ({data[:80]})")
    return meter.finish()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--server-pid", type=int)
    parser.add_argument("--one-write", action="store_true", help="a request's head and body in one write")
    parser.add_argument("commands", nargs="+")
    args = parser.parse_args()
    result = trio.run(run, args.url, args.commands, args.warmup, args.repeats, args.server_pid, args.one_write)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

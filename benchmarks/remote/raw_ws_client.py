"""The floor's client: trio-websocket alone, no ACP (see ``raw_ws_server.py``).

Usage: ``python raw_ws_client.py URL [--warmup W] [--repeats R] COMMAND...``; sends each command
(``stream N``, ``read N 1``) as one frame and counts frames until the final response, checking N
arrived; for ``read`` it answers each request frame with :data:`ANSWER` (precomputed, nothing
decoded).  Prints ``{"<command>": [seconds, ...]}`` like the other bench clients.
"""

from __future__ import annotations

import argparse
import json
import time

import trio
import trio_websocket

ANSWER = '{"jsonrpc":"2.0","id":7,"result":{"content":"floor"}}'


async def run(url: str, commands: list[str], warmup: int, repeats: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {}
    async with trio_websocket.open_websocket_url(url) as ws:
        for command in commands:
            n, read = int(command.split()[1]), command.startswith("read")
            times = results[command] = []
            for k in range(warmup + repeats):
                start = time.perf_counter()
                await ws.send_message(command)
                got = 0
                while '"result"' not in (message := str(await ws.get_message()))[:40]:
                    got += 1
                    if read:
                        await ws.send_message(ANSWER)
                elapsed = time.perf_counter() - start
                if got != n:
                    raise AssertionError(f"{command}: {got} of {n} frames ({message[:80]})")
                if k >= warmup:
                    times.append(elapsed)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("commands", nargs="+")
    args = parser.parse_args()
    print(json.dumps(trio.run(run, args.url, args.commands, args.warmup, args.repeats)))


if __name__ == "__main__":
    main()

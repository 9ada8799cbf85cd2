"""The raw baseline's client: spawns ``raw_agent.py``, writes prompt lines, reads and ``orjson.loads`` every line.

Usage: ``python raw_client.py [--warmup W] [--repeats R] COMMAND...`` (``stream N`` commands only).
Prints ``{"<command>": [seconds, ...]}`` like the other clients.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import orjson
from common import SESSION_ID, client_args, parse_command

HERE = Path(__file__).resolve().parent


def main() -> None:
    args = client_args()
    results: dict[str, list[float]] = {}
    agent = subprocess.Popen(
        [sys.executable, str(HERE / "raw_agent.py")], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert agent.stdin is not None and agent.stdout is not None
    readline, loads = agent.stdout.readline, orjson.loads
    request_id = 0
    for command in args.commands:
        kind, n, _ = parse_command(command)
        if kind != "stream":
            raise SystemExit(f"the raw baseline only streams, not {command!r}")
        times = results[command] = []
        for k in range(args.warmup + args.repeats):
            request_id += 1
            prompt = {"sessionId": SESSION_ID, "prompt": [{"type": "text", "text": command}]}
            line = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "session/prompt", "params": prompt})
            updates = 0
            start = time.perf_counter()
            agent.stdin.write(line + b"\n")
            agent.stdin.flush()
            while True:
                message = loads(readline())
                if "method" in message:
                    updates += 1
                elif message.get("id") == request_id:
                    break
            elapsed = time.perf_counter() - start
            if updates != n or message["result"]["stopReason"] != "end_turn":
                raise AssertionError(f"{command}: {updates} of {n} updates")
            if k >= args.warmup:
                times.append(elapsed)
    agent.stdin.close()
    agent.wait(timeout=10)
    print(json.dumps(results))


if __name__ == "__main__":
    main()

"""How long an agent in the middle of a streaming turn takes to exit after its stdin closes.

Issue 11, item 1: spawn ``tests/agents/long_turn_agent.py`` (a turn that streams a chunk every
10 ms for 15 s), drive it with raw lines (initialize, session/new, session/prompt), wait for the
turn to stream, close its stdin while still reading its stdout, and time until the process has
exited.  No signal is ever sent (a process still running after 20 s is reported as such).

    python benchmarks/eof_exit.py [--rounds N] [--protocol 1|2]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import trio

AGENT = Path(__file__).resolve().parent.parent / "tests" / "agents" / "long_turn_agent.py"


async def one_round(version: int) -> tuple[float | None, int | None, str]:
    args = [sys.executable, str(AGENT), "15", *(["--v2"] if version == 2 else [])]
    process = await trio.lowlevel.open_process(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    stdin, stdout = process.stdin, process.stdout
    assert stdin is not None and stdout is not None
    buffer = b""

    async def recv() -> Any:
        nonlocal buffer
        while b"\n" not in buffer:
            data = await stdout.receive_some(1 << 16)
            if not data:
                return None
            buffer += data
        line, buffer = buffer.split(b"\n", 1)
        return orjson.loads(line)

    async def call(request_id: int, method: str, params: Any) -> Any:
        await stdin.send_all(
            orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}) + b"\n"
        )
        while True:
            message = await recv()
            assert message is not None
            if message.get("id") == request_id and "method" not in message:
                return message

    init: dict[str, Any] = {"protocolVersion": version}
    if version == 2:
        init["info"] = {"name": "eof-exit", "version": "0"}
    await call(0, "initialize", init)
    new = await call(1, "session/new", {"cwd": "/", "mcpServers": []} if version == 1 else {"cwd": "/"})
    prompt = {"sessionId": new["result"]["sessionId"], "prompt": [{"type": "text", "text": "go"}]}
    await stdin.send_all(
        orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt}) + b"\n"
    )
    streamed = 0
    while streamed < 20:
        message = await recv()
        assert message is not None
        streamed += "method" in message
    await stdin.aclose()
    closed = time.perf_counter()
    answer = "no answer"
    with trio.move_on_after(20):
        while (message := await recv()) is not None:
            if message.get("id") == 2:
                answer = orjson.dumps(message["result"]).decode()
            elif message.get("params", {}).get("update", {}).get("state") == "idle":
                answer = orjson.dumps(message["params"]["update"]).decode()
        await process.wait()
        return time.perf_counter() - closed, process.returncode, answer
    process.kill()
    await process.wait()
    return None, None, answer


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--protocol", type=int, choices=(1, 2), default=1)
    options = parser.parse_args()
    times = []
    for _ in range(options.rounds):
        elapsed, code, answer = await one_round(options.protocol)
        if elapsed is None:
            print("still running 20 s after stdin closed (killed)")
            continue
        times.append(elapsed)
        print(f"exited {elapsed * 1000:7.1f} ms after stdin closed, status {code}; the turn answered {answer}")
    if times:
        median, worst = statistics.median(times) * 1000, max(times) * 1000
        print(f"median {median:.1f} ms, max {worst:.1f} ms over {len(times)} rounds")


if __name__ == "__main__":
    trio.run(main)

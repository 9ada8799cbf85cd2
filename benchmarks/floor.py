"""Per-message floors of the runtime benchmark, measured in one process (CPU time, best of N).

Prints what one streamed ``session/update`` costs to frame, parse and decode, what the raw baseline
spends on the same line, and what trio charges for a task and a cancel scope (each inbound request
gets both).  Run: ``python benchmarks/floor.py``.  These explain how close the stdio benchmarks can
get to the raw baseline; they are not bars.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson
import trio

from acp_schema import v1
from acp_trio import converter
from acp_trio._core import LineFramer, parse

LINE = orjson.dumps(
    {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": "sess_1",
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "token 5 of the streamed answer "},
            },
        },
    }
)
N = 20000


def best_us(fn: Callable[[], object], number: int = N, repeat: int = 15) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(number):
            fn()
        best = min(best, time.process_time() - start)
    return best / number * 1e6


async def trio_costs() -> tuple[float, float]:
    async def noop() -> None:
        pass

    best_task = best_scope = float("inf")
    for _ in range(5):
        start = time.process_time()
        async with trio.open_nursery() as nursery:
            for _ in range(N):
                nursery.start_soon(noop)
        best_task = min(best_task, (time.process_time() - start) / N * 1e6)
        start = time.process_time()
        for _ in range(N):
            with trio.CancelScope():
                pass
        best_scope = min(best_scope, (time.process_time() - start) / N * 1e6)
    return best_task, best_scope


def main() -> None:
    blob = (LINE + b"\n") * 400
    framer = LineFramer()
    params = orjson.loads(LINE)["params"]
    decode = converter.structure_fn(v1.SessionNotification)
    encode = converter.unstructure_fn(v1.SessionNotification)
    obj = decode(params)
    rows = [
        ("frame one line (in a 400-line chunk)", best_us(lambda: framer.feed(blob), 50) / 400),
        ("orjson.loads (the raw client's whole work)", best_us(lambda: orjson.loads(LINE))),
        ("parse: loads + JSON-RPC classification", best_us(lambda: parse(LINE))),
        ("decode params to SessionNotification", best_us(lambda: decode(params))),
        ("encode SessionNotification to JSON values", best_us(lambda: encode(obj))),
        ("orjson.dumps of the envelope", best_us(lambda: orjson.dumps({"jsonrpc": "2.0", "params": params}))),
    ]
    task, scope = trio.run(trio_costs)
    rows += [("trio: spawn and finish a task", task), ("trio: enter and exit a CancelScope", scope)]
    width = max(len(name) for name, _ in rows)
    print("Per-message floors, µs (CPU, best of 15)")
    for name, us in rows:
        print(f"  {name:<{width}}  {us:6.2f}")


if __name__ == "__main__":
    main()

"""What one idle ACP connection holds in the server: tracemalloc and trio's task tree, per connection.

Usage: ``python connect_memory.py [--connections N] [--http] [--top K] [--bridge]``.  Runs the remote
benchmark's server (``AcpApp(BenchAgent)`` under :func:`~acp_trio.transports.asgi.serve`, as
``trio_server.py``) in this process with :mod:`tracemalloc` on, opens one warm-up connection, then
``N`` (default 500) with ``connect_client.py`` (a child process: WebSocket, or Streamable HTTP with
``--http``), and once they are all open and idle compares a snapshot with the one taken before:
prints the bytes and blocks per connection that the Python allocator holds for them, grouped by
the line that allocated them (the ``K`` largest, default 25) and by file, and the trio tasks and
nurseries per connection.  tracemalloc sees Python's allocations only (not the kernel's socket
buffers, nor C libraries' own ``malloc``); the RSS per connection (``connect`` scenario of
``bench_remote.py``) includes those and the allocator's slack.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "runtime"))

from trio_agent import BenchAgent  # noqa: E402

from acp_trio.transports.asgi import AcpApp, serve  # noqa: E402


def tasks() -> collections.Counter[str]:
    """The running tasks by name (the coroutine's qualified name), and ``"nurseries"``."""
    counts: collections.Counter[str] = collections.Counter()
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        counts[getattr(task.coro, "__qualname__", task.name)] += 1
        for nursery in task.child_nurseries:
            counts["nurseries"] += 1
            todo.extend(nursery.child_tasks)
    return counts


async def connect(argv: list[str]) -> trio.Process:
    proc = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        chunk = await proc.stdout.receive_some()
        if not chunk:
            raise RuntimeError(f"{argv} exited before reporting")
        line += chunk
    result = json.loads(line)
    if result["ok"] != result["connections"]:
        raise RuntimeError(f"connections failed: {result}")
    return proc


async def close(proc: trio.Process) -> None:
    assert proc.stdin is not None
    await proc.stdin.aclose()
    await proc.wait()


def census() -> dict[str, tuple[int, int]]:
    """The objects the garbage collector tracks, by type: (count, bytes by ``sys.getsizeof``)."""
    counts: dict[str, list[int]] = {}
    for obj in gc.get_objects():
        kind = type(obj)
        entry = counts.setdefault(f"{kind.__module__}.{kind.__qualname__}", [0, 0])
        entry[0] += 1
        entry[1] += sys.getsizeof(obj)
    return {k: (v[0], v[1]) for k, v in counts.items()}


async def snapshot() -> tuple[tracemalloc.Snapshot, collections.Counter[str], dict[str, tuple[int, int]]]:
    await trio.sleep(1.0)  # let the last connections settle (their tasks park)
    gc.collect()
    return tracemalloc.take_snapshot(), tasks(), census()


async def main(connections: int, http: bool, top: int, frames: int) -> None:
    scheme = "http" if http else "ws"
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(functools.partial(serve, AcpApp(BenchAgent), "127.0.0.1", 0))
        url = f"{scheme}://{urls[0].split('://', 1)[1]}/acp"
        client = [sys.executable, str(HERE / "connect_client.py"), url]
        await close(await connect([*client, "--connections", "1"]))  # imports, caches: not per connection
        tracemalloc.start(frames)
        before, tasks_before, objects_before = await snapshot()
        proc = await connect([*client, "--connections", str(connections)])
        after, tasks_after, objects_after = await snapshot()
        tracemalloc.stop()
        await close(proc)
        nursery.cancel_scope.cancel()
    print(f"{connections} idle {'Streamable HTTP' if http else 'WebSocket'} connections, per connection:")
    total = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    blocks = sum(stat.count_diff for stat in after.compare_to(before, "filename"))
    print(f"  Python allocations (tracemalloc): {total / connections:,.0f} bytes in {blocks / connections:.1f} blocks")
    print("  by file:")
    for stat in after.compare_to(before, "filename")[:12]:
        name = stat.traceback[0].filename
        short = "/".join(name.split("/")[-3:])
        print(f"    {stat.size_diff / connections:8,.0f} B {stat.count_diff / connections:6.1f} blocks  {short}")
    print("  by line:")
    for stat in after.compare_to(before, "traceback" if frames > 1 else "lineno")[:top]:
        innermost, *outer = reversed(list(stat.traceback))  # the line that allocated, then its callers
        short = "/".join(innermost.filename.split("/")[-2:])
        size, count = stat.size_diff / connections, stat.count_diff / connections
        print(f"    {size:8,.0f} B {count:6.1f} blocks  {short}:{innermost.lineno}")
        for frame in outer:
            print(f"{'':38}from {'/'.join(frame.filename.split('/')[-2:])}:{frame.lineno}")
    print("  objects the garbage collector tracks, by type (count, bytes by sys.getsizeof, not what they refer to):")
    rows = []
    for kind, (count, size) in objects_after.items():
        count0, size0 = objects_before.get(kind, (0, 0))
        rows.append((kind, (count - count0) / connections, (size - size0) / connections))
    for kind, count, size in sorted(rows, key=lambda r: -r[2])[:top]:
        print(f"    {size:8,.0f} B {count:6.2f}  {kind}")
    print("  trio tasks (and nurseries) per connection:")
    diff = {k: (tasks_after[k] - tasks_before[k]) / connections for k in tasks_after | tasks_before}
    for name, count in sorted(diff.items(), key=lambda kv: -kv[1]):
        if count:
            print(f"    {count:5.2f}  {name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--frames", type=int, default=1, help="frames per traceback (grouped by traceback when > 1)")
    args = parser.parse_args()
    trio.run(main, args.connections, args.http, args.top, args.frames)

"""Scheduler work per round trip (or per update) of acp-trio's WebSocket pair, on each side.

Usage: ``python passes.py [--repeats R] [COMMAND ...]`` (default: ``read 2000 1``, ``permission 2000``,
``read 2000 64``, ``stream 20000``; commands as in ``../runtime/common.py``).

For each command a fresh ``trio_server.py --count PATH`` is started and this process connects to it
with :func:`~acp_trio.transports.websocket.connect_websocket` (the bench client of
``../runtime/trio_client.py``), then runs one warm-up prompt and ``R`` measured ones.  Both sides run
under a trio instrument (:class:`Counter`) that counts scheduler passes (``before_io_wait``: one
``epoll_wait`` each), task steps (``before_task_step``) and task wake-ups (``task_scheduled``).  The
client's counts cover the measured prompts only; the server's cover its whole life (start-up,
``initialize``, ``session/new`` and the warm-up: a few dozen passes, noise against 2,000 round trips).
Prints one line per command and side: passes, steps and wake-ups per round trip (or update), and
the CPU time each process used during the measured prompts (``time.process_time``; the server's
from ``/proc``), which unlike the counts depends on the machine and its load.  Counts
do not depend on the machine's speed or load the way times do (they can vary a little with how
the two processes interleave).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "runtime"))

from common import expected, handled, parse_command, process_cpu  # noqa: E402
from trio_client import BenchClient  # noqa: E402

from acp_schema import v1  # noqa: E402
from acp_trio.transports.websocket import connect_websocket  # noqa: E402

COMMANDS = ("read 2000 1", "permission 2000", "read 2000 64", "stream 20000")
CAPABILITIES = v1.ClientCapabilities(fs=v1.FileSystemCapabilities(read_text_file=True))


class Counter(trio.abc.Instrument):
    """Counts scheduler passes, task steps and task wake-ups."""

    def __init__(self) -> None:
        self.passes = self.steps = self.wakeups = 0

    def before_io_wait(self, timeout: float) -> None:
        self.passes += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        self.wakeups += 1

    def snapshot(self) -> dict[str, float]:
        return {"passes": self.passes, "steps": self.steps, "wakeups": self.wakeups}


async def drive(
    url: str, command: str, repeats: int, counter: Counter, server_pid: int | None = None
) -> dict[str, float]:
    kind, n, _ = parse_command(command)
    async with connect_websocket(url, BenchClient) as conn:
        client: BenchClient = conn.handler
        agent = v1.AgentPeer(conn)
        await agent.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=CAPABILITIES))
        session = await agent.session_new(v1.NewSessionRequest(cwd=str(Path.cwd()), mcp_servers=[]))
        text = [v1.TextContentBlock(text=command)]
        before: dict[str, float] = {}
        for k in range(1 + repeats):
            if k == 1:
                before = counter.snapshot()
                before["cpu"] = time.process_time()
                before["sys"] = resource.getrusage(resource.RUSAGE_SELF).ru_stime
                before["wall"] = time.perf_counter()
                before["server cpu"] = process_cpu(server_pid) if server_pid is not None else 0.0
            client.updates = client.reads = client.permissions = 0
            response = await agent.session_prompt(v1.PromptRequest(session_id=session.session_id, prompt=text))
            if response.stop_reason != "end_turn" or handled(kind, client) != expected(kind, n):
                raise AssertionError(f"{command}: {response.stop_reason}, {handled(kind, client)} handled")
        after = counter.snapshot()
        after["cpu"] = time.process_time()
        after["sys"] = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        after["wall"] = time.perf_counter()
        after["server cpu"] = process_cpu(server_pid) if server_pid is not None else 0.0
    return {key: after[key] - before[key] for key in after}


def measure(command: str, repeats: int) -> dict[str, Any]:
    kind, n, _ = parse_command(command)
    with tempfile.TemporaryDirectory() as tmp:
        count_path = Path(tmp) / "server.json"
        argv = [sys.executable, str(HERE / "trio_server.py"), "--count", str(count_path)]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            info = json.loads(proc.stdout.readline())
            url = f"ws://127.0.0.1:{info['port']}/acp"
            counter = Counter()
            client = trio.run(drive, url, command, repeats, counter, info["pid"], instruments=[counter])
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)
        server = json.loads(count_path.read_text())
    units = expected(kind, n)
    server = {key: value / ((1 + repeats) * units) for key, value in server.items()}
    server["cpu"] = client.pop("server cpu") / (repeats * units)
    return {"client": {key: value / (repeats * units) for key, value in client.items()}, "server": server}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("commands", nargs="*")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    print(
        f"{'command':<18}{'side':<8}{'passes':>8}{'steps':>8}{'wake-ups':>10}{'CPU µs':>8}   (per round trip or update)"
    )
    for command in args.commands or COMMANDS:
        results[command] = result = measure(command, args.repeats)
        for side in ("server", "client"):
            row = result[side]
            print(
                f"{command:<18}{side:<8}{row['passes']:>8.2f}{row['steps']:>8.2f}{row['wakeups']:>10.2f}"
                f"{row['cpu'] * 1e6:>8.1f}"
            )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""What the runtime scenarios share: the prompt commands, the streamed text, the file content.

Every scenario is one ``session/prompt`` whose single text block is a command the bench agents
understand:

* ``stream N``: send N ``agent_message_chunk`` session/update notifications, then end the turn;
* ``read N C``: issue N ``fs/read_text_file`` requests to the client with C of them in flight
  (C = 1: one after another), check every answer, then end the turn.

The client side prints one JSON object on stdout: ``{"<command>": [seconds, ...], ...}``, the time
from sending each measured ``session/prompt`` to accepting its response.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

SESSION_ID: Final = "sess_bench_0001"
FILE_CONTENT: Final = "def hello():\n    return 'world'\n"
"""What the clients answer to every ``fs/read_text_file``."""


def chunk_text(i: int) -> str:
    """The text of the ``i``-th streamed chunk (the same on every side)."""
    return f"token {i} of the streamed answer "


def file_path(i: int) -> str:
    """The path of the ``i``-th read."""
    return f"/bench/src/module_{i % 97}.py"


def parse_command(text: str) -> tuple[str, int, int]:
    """``"stream 20000"`` → ``("stream", 20000, 0)``; ``"read 2000 64"`` → ``("read", 2000, 64)``."""
    words = text.split()
    if words[0] == "stream":
        return "stream", int(words[1]), 0
    if words[0] == "read":
        return "read", int(words[1]), int(words[2])
    raise ValueError(f"unknown bench command {text!r}")


def client_args() -> argparse.Namespace:
    """The bench clients' command line: ``[--warmup W] [--repeats R] COMMAND...``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("commands", nargs="+")
    return parser.parse_args()


class Counters(Protocol):
    updates: int
    reads: int


async def time_prompts(
    commands: list[str], warmup: int, repeats: int, counters: Counters, prompt: Callable[[str], Awaitable[str]]
) -> dict[str, list[float]]:
    """For each command: ``warmup`` unmeasured then ``repeats`` measured prompts, in seconds.

    ``prompt(command)`` sends one ``session/prompt`` and returns its stop reason; ``counters`` is the
    client whose handlers count updates and reads.  Raises AssertionError when a prompt does not end
    with ``end_turn`` after handling every update or read.  Runs under trio and asyncio alike.
    """
    results: dict[str, list[float]] = {}
    for command in commands:
        kind, n, _ = parse_command(command)
        times = results[command] = []
        for k in range(warmup + repeats):
            counters.updates = counters.reads = 0
            start = time.perf_counter()
            stop_reason = await prompt(command)
            elapsed = time.perf_counter() - start
            got = counters.updates if kind == "stream" else counters.reads
            if stop_reason != "end_turn" or got != n:
                raise AssertionError(f"{command}: stop reason {stop_reason!r}, {got} of {n} handled")
            if k >= warmup:
                times.append(elapsed)
    return results

"""What the runtime scenarios share: the prompt commands, the streamed text, the file content, the meters.

Every scenario is one ``session/prompt`` whose single text block is a command the bench agents
understand:

* ``stream N``: send N ``agent_message_chunk`` session/update notifications, then end the turn;
* ``mixed N``: the same N chunks, and after every :data:`TOOL_EVERY` of them a ``tool_call``
  (status pending) and a ``tool_call_update`` (status completed) for it: N + 2 x (N // 10) updates;
* ``read N C``: issue N ``fs/read_text_file`` requests to the client with C of them in flight
  (C = 1: one after another), check every answer, then end the turn (``read N C tasks``: acp-trio's
  agent with a task per request in flight instead of ``send_requests``; the same for the others);
* ``permission N``: issue N ``session/request_permission`` requests, one after another (options
  :data:`PERMISSION_OPTIONS`, the client selects ``allow``), check every answer, then end the turn.

The client side prints one JSON object on stdout: ``{"<command>": [seconds, ...], ...}``, the time
from sending each measured ``session/prompt`` to accepting its response; the runtime benchmark's
clients add ``"cpu": {"<command>": {"agent": [s, ...], "client": [s, ...]}}`` (CPU seconds each
process used during each measured prompt: the agent's from ``/proc``, the client's own)
and ``"agent_hwm_kib"`` (the agent's peak RSS, ``VmHWM``, read after the last prompt, before the
client closes the agent's stdin).  The TypeScript client (``ts_client.mjs``) does the same.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

SESSION_ID: Final = "sess_bench_0001"
FILE_CONTENT: Final = "def hello():\n    return 'world'\n"
"""What the clients answer to every ``fs/read_text_file``."""
TOOL_EVERY: Final = 10
"""``mixed``: a tool call (two updates) after every this many text chunks."""
PERMISSION_OPTIONS: Final = (
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
)
"""The options of every ``session/request_permission`` (wire form); the clients select ``allow``."""


def chunk_text(i: int) -> str:
    """The text of the ``i``-th streamed chunk (the same on every side)."""
    return f"token {i} of the streamed answer "


def file_path(i: int) -> str:
    """The path of the ``i``-th read."""
    return f"/bench/src/module_{i % 97}.py"


def tool_call_id(i: int) -> str:
    """The id of the tool call after chunk ``i`` (``mixed``), or of the ``i``-th permission request."""
    return f"call_{i}"


def tool_title(i: int) -> str:
    """The title of that tool call."""
    return f"Read module_{i % 97}.py"


def parse_command(text: str) -> tuple[str, int, int]:
    """``"stream 20000"`` → ``("stream", 20000, 0)``; ``"read 2000 64"`` → ``("read", 2000, 64)``;
    ``"mixed 20000"`` → ``("mixed", 20000, 0)``; ``"permission 2000"`` → ``("permission", 2000, 1)``.
    ``"read 2000 64 tasks"`` is ``"read 2000 64"`` for every side but acp-trio's agent, which then
    runs a task per request in flight (a nursery of workers) instead of ``send_requests``."""
    words = text.split()
    if words[0] in ("stream", "mixed"):
        return words[0], int(words[1]), 0
    if words[0] == "read":
        return "read", int(words[1]), int(words[2])
    if words[0] == "permission":
        return "permission", int(words[1]), 1
    raise ValueError(f"unknown bench command {text!r}")


def expected(kind: str, n: int) -> int:
    """How many updates (``stream``, ``mixed``) or requests (``read``, ``permission``) the client handles."""
    return n + 2 * (n // TOOL_EVERY) if kind == "mixed" else n


def client_args(default_agent: str) -> argparse.Namespace:
    """The bench clients' command line: ``[--agent SCRIPT] [--warmup W] [--repeats R] COMMAND...``.

    ``--agent``: the agent script to spawn (a file in this directory; ``.py`` runs with this
    interpreter), default ``default_agent``.
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent", default=default_agent)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("commands", nargs="+")
    return parser.parse_args()


def process_cpu(pid: int) -> float:
    """CPU seconds process ``pid`` has used: the sum over its threads of ``/proc/<pid>/task/*/schedstat``
    (nanoseconds on the CPU), else ``/proc/<pid>/stat`` (user + system, in clock ticks)."""
    try:
        total = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` figure in KiB (``VmRSS``, ``VmHWM``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


class Meter:
    """Collects what a client prints: seconds per prompt and, given the agent's pid, both sides' CPU."""

    def __init__(self, agent_pid: int | None) -> None:
        self.agent_pid = agent_pid
        self.results: dict[str, Any] = {}
        self.cpu: dict[str, dict[str, list[float]]] = {}

    def start(self) -> None:
        self._agent = process_cpu(self.agent_pid) if self.agent_pid is not None else 0.0
        self._client = time.process_time()
        self._start = time.perf_counter()

    def stop(self, command: str, measured: bool) -> float:
        elapsed = time.perf_counter() - self._start
        client = time.process_time() - self._client
        if measured:
            self.results.setdefault(command, []).append(elapsed)
            if self.agent_pid is not None:
                cpu = self.cpu.setdefault(command, {"agent": [], "client": []})
                cpu["agent"].append(process_cpu(self.agent_pid) - self._agent)
                cpu["client"].append(client)
        return elapsed

    def finish(self) -> dict[str, Any]:
        """The JSON object to print; reads the agent's peak RSS (call before the agent exits)."""
        if self.agent_pid is not None:
            self.results["cpu"] = self.cpu
            self.results["agent_hwm_kib"] = status_kib(self.agent_pid, "VmHWM")
        return self.results


class Counters(Protocol):
    updates: int
    reads: int
    permissions: int


def handled(kind: str, counters: Any) -> int:
    """What ``counters`` counted for a command of ``kind``."""
    if kind in ("stream", "mixed"):
        return int(counters.updates)
    return int(counters.permissions if kind == "permission" else counters.reads)


async def time_prompts(
    commands: list[str],
    warmup: int,
    repeats: int,
    counters: Any,
    prompt: Callable[[str], Awaitable[str]],
    agent_pid: int | None = None,
) -> dict[str, Any]:
    """For each command: ``warmup`` unmeasured then ``repeats`` measured prompts, in seconds.

    ``prompt(command)`` sends one ``session/prompt`` and returns its stop reason; ``counters`` is the
    client whose handlers count updates, reads and permission requests (:class:`Counters`; one
    without ``permissions`` serves stream commands).  Raises AssertionError when a prompt does not
    end with ``end_turn`` after handling every update or request.  With ``agent_pid``, also each
    side's CPU per measured prompt and the agent's peak RSS (see the module docstring).  Runs under
    trio and asyncio alike.
    """
    meter = Meter(agent_pid)
    for command in commands:
        kind, n, _ = parse_command(command)
        for k in range(warmup + repeats):
            counters.updates = counters.reads = 0
            if hasattr(counters, "permissions"):
                counters.permissions = 0
            meter.start()
            stop_reason = await prompt(command)
            meter.stop(command, k >= warmup)
            got, want = handled(kind, counters), expected(kind, n)
            if stop_reason != "end_turn" or got != want:
                raise AssertionError(f"{command}: stop reason {stop_reason!r}, {got} of {want} handled")
    return meter.finish()

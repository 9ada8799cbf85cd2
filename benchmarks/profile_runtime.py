"""Where acp-trio's CPU goes, per request round trip and per streamed update, on each side of a pair.

Usage::

    python benchmarks/profile_runtime.py [--repeats R] [--json PATH]

Two measurements, side by side:

1. **Total**: the runtime benchmark's acp-trio pair (``benchmarks/runtime/trio_client.py``
   spawning ``trio_agent.py``, written as README.md teaches) runs each scenario; each process's CPU
   time per round trip (or update) comes from ``/proc`` as in ``bench_runtime.py`` (median of
   ``--repeats`` timed prompts).
2. **Steps**: every step of that message path that can run on its own is timed in this process on
   the scenario's exact messages and types (CPU time, best of 7 runs of 20,000 calls each): framing, JSON
   parse, classification, decoding into the generated classes, the bench's handler, encoding,
   the write system call (a pipe nobody waits on: what waking the peer adds is in the rest).

What the steps do not cover is **the rest**: the runtime's dispatch (routes, the request pool,
serial queues, the slot a caller waits on), trio's scheduler (a task switch per wake-up, one
``epoll_wait`` per scheduler pass, re-arming the descriptor) and the kernel's side of blocking
and waking on a pipe.  For reference the script also times trio's primitives here: a task switch,
a checkpoint, spawning a task, entering and leaving a cancel scope (what the request pool avoids).

Scenarios: ``read 2000 1`` and ``permission 2000`` (sequential round trips), ``read 2000 64``
(64 in flight) and ``stream 20000`` (streamed ``agent_message_chunk`` updates).

Exit status 0, 1 if a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

_HERE: Final = Path(__file__).resolve().parent
_SCRIPTS: Final = _HERE / "runtime"
_REPO: Final = _HERE.parent
sys.path.insert(0, str(_SCRIPTS))
from _shared import subprocess_env, use_source_tree  # noqa: E402

use_source_tree()
import orjson  # noqa: E402
import trio  # noqa: E402
from common import FILE_CONTENT, PERMISSION_OPTIONS, SESSION_ID, chunk_text, file_path, tool_call_id, tool_title  # noqa: E402

import acp_schema  # noqa: E402
import acp_trio  # noqa: E402
from acp_schema import v1  # noqa: E402
from acp_trio import _core  # noqa: E402
from acp_trio._converter import converter  # noqa: E402

SCENARIOS: Final = {
    "read 2000 1": ("round trip", 2000),
    "permission 2000": ("round trip", 2000),
    "read 2000 64": ("request", 2000),
    "stream 20000": ("update", 20000),
}
CALLS: Final = 20_000


def per_call(fn: Callable[[], object], calls: int = CALLS) -> float:
    """CPU microseconds per call of ``fn``: the best of 7 runs of ``calls`` calls."""
    best = float("inf")
    for _ in range(7):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, time.process_time() - start)
    return best / calls * 1e6


def run_coroutine(make: Callable[[], Any]) -> Callable[[], object]:
    """A function that runs the coroutine ``make()`` returns to completion (it must not suspend)."""

    def run() -> object:
        coro = make()
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value
        raise RuntimeError("the coroutine suspended")

    return run


def framing(line: bytes) -> Callable[[], object]:
    framer = _core.LineFramer()
    data = line + b"\n"
    return lambda: framer.feed(data)


def framing_chunk(line: bytes) -> float:
    """Framing per line when lines arrive 64 KiB at a time (streaming)."""
    framer = _core.LineFramer()
    per_chunk = (1 << 16) // (len(line) + 1)
    chunk = (line + b"\n") * per_chunk
    return per_call(lambda: framer.feed(chunk), 500) / per_chunk


def parse_steps(line: bytes) -> tuple[float, float]:
    """(orjson.loads, classification on top of it) of one line, microseconds."""
    loads = per_call(lambda: orjson.loads(line))
    return loads, max(per_call(lambda: _core.parse(line)) - loads, 0.0)


def write_step(data: bytes) -> float:
    """Microseconds of one ``os.write`` of ``data`` to a pipe (drained before it fills, the drain not counted)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    batch = max(1, min(16, (32 * 1024) // len(data)))  # never more than half of a 64 KiB pipe buffer

    def writes() -> None:
        for _ in range(batch):
            os.write(write_fd, data)

    def drain() -> None:
        while True:
            try:
                if not os.read(read_fd, 1 << 20):
                    return
            except BlockingIOError:
                return

    try:
        best = float("inf")
        for _ in range(7):
            spent = 0.0
            for _ in range(CALLS // batch):
                start = time.process_time()
                writes()
                spent += time.process_time() - start
                drain()
            best = min(best, spent)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    return best / (CALLS // batch * batch) * 1e6


def request_steps(
    method: str, params: Any, result: Any, handler: Callable[[Any], Any], build: Callable[[], Any]
) -> dict[str, dict[str, float]]:
    """Steps of one round trip of ``method``: the agent sends ``params`` (typed), the client's
    ``handler`` answers ``result``."""
    params_type, result_type = type(params), type(result)
    wire_params = converter.unstructure_fn(params_type)(params)
    wire_result = converter.unstructure_fn(result_type)(result)
    request_line = _core.encode_request(7, method, wire_params).rstrip(b"\n")
    response_line = _core.encode_result(7, wire_result).rstrip(b"\n")
    unstructure_params = converter.unstructure_fn(params_type)
    structure_params = converter.structure_fn(params_type)
    unstructure_result = converter.unstructure_fn(result_type)
    structure_result = converter.structure_fn(result_type)
    agent: dict[str, float] = {}
    client: dict[str, float] = {}
    agent["build the request (bench code)"] = per_call(build)
    agent["encode: typed → JSON"] = per_call(lambda: unstructure_params(params))
    agent["encode: JSON → line (orjson)"] = per_call(lambda: _core.encode_request(7, method, wire_params))
    agent["write (os.write)"] = write_step(request_line + b"\n")
    agent["framing"] = per_call(framing(response_line))
    agent["parse: orjson.loads"], agent["parse: classify"] = parse_steps(response_line)
    agent["decode: JSON → typed"] = per_call(lambda: structure_result(wire_result))
    client["framing"] = per_call(framing(request_line))
    client["parse: orjson.loads"], client["parse: classify"] = parse_steps(request_line)
    client["decode: JSON → typed"] = per_call(lambda: structure_params(wire_params))
    typed = structure_params(wire_params)
    client["handler (bench code)"] = per_call(run_coroutine(lambda: handler(typed)))
    client["encode: typed → JSON"] = per_call(lambda: unstructure_result(result))
    client["encode: JSON → line (orjson)"] = per_call(lambda: _core.encode_result(7, wire_result))
    client["write (os.write)"] = write_step(response_line + b"\n")
    return {"agent": agent, "client": client}


def stream_steps() -> dict[str, dict[str, float]]:
    def build() -> Any:
        chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=chunk_text(12345)))
        return v1.SessionNotification(session_id=SESSION_ID, update=chunk)

    notification = build()
    unstructure = converter.unstructure_fn(v1.SessionNotification)
    structure = converter.structure_fn(v1.SessionNotification)
    wire = unstructure(notification)
    line = _core.encode_notification("session/update", wire).rstrip(b"\n")
    per_write = 32  # the writer coalesces the lines queued while it wrote (the runtime joins 32 at a time)
    agent = {
        "build the update (bench code)": per_call(build),
        "encode: typed → JSON": per_call(lambda: unstructure(notification)),
        "encode: JSON → line (orjson)": per_call(lambda: _core.encode_notification("session/update", wire)),
        "write (os.write)": write_step((line + b"\n") * per_write) / per_write,
    }
    loads, classify = parse_steps(line)

    async def session_update(params: Any) -> None:  # trio_client.BenchClient.session_update
        return None

    typed = structure(wire)
    client = {
        "framing": framing_chunk(line),
        "parse: orjson.loads": loads,
        "parse: classify": classify,
        "decode: JSON → typed": per_call(lambda: structure(wire)),
        "handler (bench code)": per_call(run_coroutine(lambda: session_update(typed))),
    }
    return {"agent": agent, "client": client}


def all_steps() -> dict[str, dict[str, dict[str, float]]]:
    read_params = v1.ReadTextFileRequest(session_id=SESSION_ID, path=file_path(5))
    read_result = v1.ReadTextFileResponse(content=FILE_CONTENT)

    async def read_handler(params: Any) -> Any:  # trio_client.BenchClient.fs_read_text_file
        return read_result

    options = [v1.PermissionOption(option_id=o["optionId"], name=o["name"], kind=o["kind"]) for o in PERMISSION_OPTIONS]

    def build_permission() -> Any:
        tool_call = v1.ToolCallUpdate(tool_call_id=tool_call_id(5), title=tool_title(5), kind="edit")
        return v1.RequestPermissionRequest(session_id=SESSION_ID, tool_call=tool_call, options=options)

    allow = v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id="allow"))

    async def permission_handler(params: Any) -> Any:
        return allow

    read = request_steps(
        "fs/read_text_file",
        read_params,
        read_result,
        read_handler,
        lambda: v1.ReadTextFileRequest(session_id=SESSION_ID, path=file_path(5)),
    )
    permission = request_steps(
        "session/request_permission", build_permission(), allow, permission_handler, build_permission
    )
    return {"read 2000 1": read, "permission 2000": permission, "read 2000 64": read, "stream 20000": stream_steps()}


def trio_primitives() -> dict[str, float]:
    out: dict[str, float] = {}

    async def main() -> None:
        async def noop() -> None:
            pass

        async def spawn(n: int) -> None:
            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(noop)

        best = float("inf")
        for _ in range(5):
            start = time.process_time()
            await spawn(CALLS)
            best = min(best, time.process_time() - start)
        out["spawn a task (start, run, exit)"] = best / CALLS * 1e6

        def scopes() -> None:
            with trio.CancelScope():
                pass

        out["enter and leave a cancel scope"] = per_call(scopes)
        best = float("inf")
        for _ in range(5):
            start = time.process_time()
            for _ in range(CALLS):
                await trio.lowlevel.checkpoint()
            best = min(best, time.process_time() - start)
        out["checkpoint (a scheduler pass)"] = best / CALLS * 1e6
        tasks: list[Any] = [None, None]

        def abort(_: Any) -> trio.lowlevel.Abort:
            return trio.lowlevel.Abort.SUCCEEDED

        async def ponger(n: int) -> None:
            tasks[1] = trio.lowlevel.current_task()
            for _ in range(n):
                await trio.lowlevel.wait_task_rescheduled(abort)
                trio.lowlevel.reschedule(tasks[0])

        best = float("inf")
        for _ in range(3):
            tasks[0], tasks[1] = trio.lowlevel.current_task(), None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ponger, CALLS)
                while tasks[1] is None:
                    await trio.lowlevel.checkpoint()
                start = time.process_time()
                for _ in range(CALLS):
                    trio.lowlevel.reschedule(tasks[1])
                    await trio.lowlevel.wait_task_rescheduled(abort)
                best = min(best, time.process_time() - start)
        out["task switch (wake another task)"] = best / CALLS / 2 * 1e6

    trio.run(main)
    return out


def totals(repeats: int) -> dict[str, dict[str, float]]:
    """CPU microseconds per unit of each side, from a normal run of the pair."""
    argv = [sys.executable, str(_SCRIPTS / "trio_client.py"), "--warmup", "1", "--repeats", str(repeats), *SCENARIOS]
    with tempfile.TemporaryDirectory(prefix="acp-profile-pycache-") as pycache:
        env = subprocess_env(pycache, acp_schema, acp_trio)
        proc = subprocess.run(argv, cwd=_SCRIPTS, env=env, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the bench pair failed: {proc.stderr[-2000:]}")
    report = json.loads(proc.stdout)
    out: dict[str, dict[str, float]] = {}
    for command, (_, n) in SCENARIOS.items():
        cpu = report["cpu"][command]
        out[command] = {side: statistics.median(cpu[side]) / n * 1e6 for side in ("agent", "client")}
        out[command]["rate"] = n / statistics.median(report[command])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed prompts per scenario (default 5)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    try:
        total = totals(args.repeats)
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
        print(exc, file=sys.stderr)
        return 1
    steps = all_steps()
    names: list[str] = []
    for scenario in steps.values():
        for side in scenario.values():
            names += [n for n in side if n not in names]
    order = [n for n in names if "bench code" in n] + [n for n in names if "bench code" not in n]
    width = max(len(n) for n in order) + 2
    print("acp-trio pair over stdio: CPU microseconds per round trip / request / update, by step")
    print(" " * width + "".join(f"{c:>18s}" for c in SCENARIOS))
    print(" " * width + "".join(f"{'agent':>9s}{'client':>9s}" for _ in SCENARIOS))

    def row(label: str, values: list[float | None]) -> None:
        cells = "".join(f"{v:9.2f}" if v is not None else f"{'':9s}" for v in values)
        print(f"{label:<{width}s}{cells}")

    for name in order:
        row(name, [steps[c][side].get(name) for c in SCENARIOS for side in ("agent", "client")])
    rest = [total[c][side] - sum(steps[c][side].values()) for c in SCENARIOS for side in ("agent", "client")]
    row("the rest: dispatch, trio, kernel", rest)
    row("total CPU (from /proc)", [total[c][side] for c in SCENARIOS for side in ("agent", "client")])
    print(f"{'pair rate, per second':<{width}s}" + "".join(f"{total[c]['rate']:18,.0f}" for c in SCENARIOS))
    print("\ntrio's primitives here, microseconds:")
    primitives = trio_primitives()
    for name, value in primitives.items():
        print(f"  {name:<{width - 2}s}{value:9.2f}")
    if args.json:
        data = {"total": total, "steps": steps, "trio": primitives}
        args.json.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

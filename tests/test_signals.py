"""A server process stopped by SIGTERM or SIGINT stops its agents and exits 0 (acp_trio._signals).

``python -m acp_trio.bridge --listen`` used Python's defaults: SIGTERM (``kill``, systemd, a
container's stop) ended it at once, leaving an agent that ignores the end of its input running,
and Ctrl-C printed a traceback of exception groups and exited 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio_websocket
from _processes import alive

pytestmark = [
    pytest.mark.skipif(os.name != "posix", reason="POSIX signals and process groups"),
    pytest.mark.one_interpreter,  # signals and processes: the runtime's shutdown, not the interpreter's
]

AGENTS = Path(__file__).parent / "agents"


async def start(command: list[str]) -> tuple[trio.Process, str, bytearray]:
    """``command`` started; its WebSocket URL from the line it prints; what it printed so far."""
    process = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE, start_new_session=True)
    assert process.stderr is not None
    seen = bytearray()
    while b"/acp" not in seen:
        chunk = await process.stderr.receive_some(1 << 16)
        assert chunk, f"the server ended before serving: {seen.decode()}"
        seen += chunk
    url = next(word for word in seen.decode().split() if word.startswith("ws://") and word.endswith("/acp"))
    return process, url, seen


async def stop(process: trio.Process, signum: int, seen: bytearray) -> str:
    """Send ``signum``, wait for the exit; everything the process printed on stderr."""
    assert process.stderr is not None
    process.send_signal(signum)
    while chunk := await process.stderr.receive_some(1 << 16):
        seen += chunk
    await process.wait()
    return seen.decode()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_the_bridge_stops_its_agents_through_the_ladder_and_exits_0(tmp_path: Path, signum: int) -> None:
    pid_file = tmp_path / "agent.pid"
    command = [sys.executable, "-m", "acp_trio.bridge", "--listen", "127.0.0.1:0", "--"]
    command += [sys.executable, str(AGENTS / "stubborn_agent.py"), str(pid_file)]  # ignores EOF and SIGTERM
    with trio.fail_after(60):
        process, url, seen = await start(command)
        try:
            async with trio_websocket.open_websocket_url(url):
                while not pid_file.exists() or not pid_file.read_text():
                    await trio.sleep(0.02)
                agent = int(pid_file.read_text())
                printed = await stop(process, signum, seen)
        finally:
            if process.returncode is None:
                process.kill()
    name = signal.Signals(signum).name
    assert process.returncode == 0, printed
    assert "Traceback" not in printed, printed
    assert f"bridge: stopping on {name}" in printed, printed
    assert "sending SIGKILL" in printed, printed  # the whole ladder: stdin closed, SIGTERM ignored, SIGKILL
    assert not alive(agent), f"agent pid {agent} outlived the bridge"


async def test_the_demo_server_exits_0_on_sigterm() -> None:
    with trio.fail_after(60):
        process, url, seen = await start([sys.executable, "-m", "acp_trio.demo", "--serve", "http://127.0.0.1:0"])
        try:
            async with trio_websocket.open_websocket_url(url):
                printed = await stop(process, signal.SIGTERM, seen)
        finally:
            if process.returncode is None:
                process.kill()
    assert process.returncode == 0, printed
    assert "Traceback" not in printed, printed
    assert "demo: stopping on SIGTERM" in printed, printed

"""What bounds the agent processes of the bridge's ``--detach`` (issue 35, item 5).

``max_connections`` counts client connections and ``max_detached_sessions`` detached sessions; the
processes a client keeps by attaching to sessions on instances that are not its home are bounded
by ``max_agent_processes`` alone.  One test, with a small v2 agent that writes its pid (each
process counted by it, alive or reaped), on loopback sockets: ``max_agent_processes=2``,
``max_detached_sessions=1``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import trio
from test_bridge_detach import DEADLINE, alive, started  # tests/ is on sys.path (prepend mode)

from acp_schema import v2
from acp_trio import RequestError
from acp_trio.bridge import main, open_detach_host
from acp_trio.transports.asgi import AcpApp, serve
from acp_trio.transports.http import connect_http
from acp_trio.transports.websocket import connect_websocket

pytest.importorskip("hypercorn")

INIT = {"protocolVersion": 2, "info": {"name": "test-limits", "version": "1"}}
AGENT = """
import os, sys, acp_trio
from acp_schema import v2

open(sys.argv[1], "a").write(f"{os.getpid()}\\n")

class Agent:
    def __init__(self, conn):
        pass

    async def session_new(self, params):
        return v2.NewSessionResponse(session_id=f"session-of-{os.getpid()}")

acp_trio.run_agent_stdio({v2: Agent})
"""
"""A v2 agent that appends its pid to the file ``argv[1]`` and makes one session id per process
(lighter than the demo agent: only sessions are needed here)."""


class Quiet:
    """A v2 client that expects nothing of the agent."""

    async def session_update(self, params: object) -> None:
        pass


@pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX-only")
@pytest.mark.one_interpreter  # processes and sockets: the host's limits are tested in tests/test_host_limits.py
async def test_agent_processes_are_bounded_by_max_agent_processes_and_max_detached_sessions(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    cwd = str(tmp_path)

    def running() -> list[int]:
        return [pid for pid in started(pids) if alive(pid)]

    with trio.fail_after(DEADLINE):
        async with (
            open_detach_host(
                [sys.executable, "-c", AGENT, str(pids)], max_agent_processes=2, max_detached_sessions=1
            ) as host,
            trio.open_nursery() as nursery,
        ):
            binds: list[str] = await nursery.start(serve, AcpApp(host=host), "127.0.0.1", 0)
            url = binds[0] + "/acp"
            ws = url.replace("http", "ws", 1)

            async with connect_websocket(ws, Quiet(), variant=v2) as conn:  # alice: a session, left idle
                await conn.connection.request("initialize", INIT)
                first = (await conn.connection.request("session/new", {"cwd": cwd}))["sessionId"]
            await host.wait_until(lambda: host.sessions()[first].attached == 0)
            (alices,) = running()

            async with connect_http(url, Quiet(), variant=v2) as dashboard:  # a second process, attached to hers
                await dashboard.connection.request("initialize", INIT)
                resume = {"sessionId": first, "cwd": cwd, "replayFrom": {"type": "start"}}
                await dashboard.connection.request("session/resume", resume)
                assert len(running()) == 2 and host.sessions()[first].attached == 1  # no session detached now

                async with connect_websocket(ws, Quiet(), variant=v2) as conn:  # a third would be one too many
                    with pytest.raises(RequestError) as refused:
                        await conn.connection.request("initialize", INIT)
                    assert refused.value.code == -32603 and "--max-agent-processes" in refused.value.message
                    assert refused.value.data == {"reason": "max_agent_processes", "max": 2}
                    with pytest.raises(RequestError) as ended:  # its home instance ended: the host says so
                        await conn.connection.request("session/new", {"cwd": cwd})
                    assert ended.value.code == -32603 and "instance ended" in ended.value.message
                assert len(started(pids)) == 2  # no process was started for it
            await host.wait_until(lambda: host.instances == 1)  # the dashboard's own process ended with it
            assert running() == [alices]

            async with connect_websocket(ws, Quiet(), variant=v2) as conn:  # now there is room again
                await conn.connection.request("initialize", INIT)
                second = (await conn.connection.request("session/new", {"cwd": cwd}))["sessionId"]
            # two detached sessions, max_detached_sessions=1: alice's, detached longest ago, is closed,
            # and her process with it (no other session, no client)
            await host.wait_until(lambda: list(host.sessions()) == [second] and host.instances == 1)
            assert len(started(pids)) == 3 and not alive(alices) and len(running()) == 1
            nursery.cancel_scope.cancel()
    assert running() == []


def test_max_agent_processes_is_for_detach_and_takes_n_at_least_1(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        (["--max-agent-processes", "2"], "--max-agent-processes needs --detach"),
        (["--detach", "--max-agent-processes", "0"], "--max-agent-processes takes N >= 1, got 0"),
    ):
        with pytest.raises(SystemExit):
            main(["--listen", "127.0.0.1:0", *argv, "--", "agent"])
        assert message in capsys.readouterr().err

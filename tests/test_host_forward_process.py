"""Forwarding between two ``python -m acp_trio.host`` processes (issue 36 step 3), over the default
connector: a WebSocket from host ``b`` to host ``a``'s ``advertise_url`` with the hosts' token
(``peer_token_file``; the hosts also require a bearer token, the token file naming the hosts).  A
client of ``b`` resumes a session ``a`` runs and gets its replay and its live turn with ``a``'s
numbers.  The in-process tests are ``tests/test_host_forward.py``.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from _host_kit import Recorder, init2, new_session
from _postgres import pg_conninfo, postgres_server  # noqa: F401  (the fixtures)
from test_host_cli import HostProcess
from test_host_takeover_process import AGENT, idles, numbered, texts

from acp_schema import v2

if TYPE_CHECKING:
    from _postgres import PostgresServer

pytestmark = [pytest.mark.skipif(os.name != "posix", reason="signals"), pytest.mark.one_interpreter]

DEADLINE = 30
PEER_TOKEN = "peer-0123456789abcdef"


@pytest.fixture
def pg(request: pytest.FixtureRequest) -> PostgresServer:
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_client_of_one_host_process_is_served_a_session_another_runs(
    tmp_path: Path, pg: PostgresServer
) -> None:
    (tmp_path / "echo_agent.py").write_text(AGENT, encoding="utf-8")
    (tmp_path / "peer_token").write_text(PEER_TOKEN + "\n", encoding="utf-8")
    (tmp_path / "tokens").write_text(f"alice alice-token-0123456789\nhosts {PEER_TOKEN}\n", encoding="utf-8")
    pg.conninfo("forward")
    store = "postgresql://postgres@/postgres?" + urllib.parse.urlencode(
        {"host": str(pg.socket_dir), "port": pg.port, "options": "-csearch_path=forward"}
    )
    hosts: dict[str, HostProcess] = {}
    urls: dict[str, str] = {}
    try:
        for name in ("a", "b"):
            port = free_port()
            urls[name] = f"ws://127.0.0.1:{port}/acp"
            argv = [sys.executable, "-m", "acp_trio.host", "--agent", "echo_agent:Echo"]
            argv += ["--listen", f"127.0.0.1:{port}", "--store", store, "--host-id", name]
            argv += ["--advertise-url", urls[name], "--peer-token-file", str(tmp_path / "peer_token")]
            argv += ["--token-file", str(tmp_path / "tokens"), "--log-level", "info"]
            hosts[name] = HostProcess(argv, tmp_path)
            hosts[name].wait_for("listening")
        from acp_trio.transports.websocket import connect_websocket

        auth = {"Authorization": "Bearer alice-token-0123456789"}
        with trio.fail_after(DEADLINE):
            first = Recorder()
            async with connect_websocket(urls["a"], first, variant=v2, headers=auth) as conn:
                await init2(conn)
                sid = await new_session(conn)
                prompt = v2.PromptRequest(session_id=sid, prompt=[v2.TextContentBlock(text="slow 40")])
                await conn.agent.session_prompt(prompt)
                await first.until(lambda: len(texts(first)) >= 3)
                second = Recorder()
                async with connect_websocket(urls["b"], second, variant=v2, headers=auth) as other:
                    await init2(other)
                    resume = v2.ResumeSessionRequest(session_id=sid, cwd="/tmp", replay_from=v2.StartReplayFrom())
                    await other.agent.session_resume(resume)  # forwarded to a: no owner error
                    await second.until(lambda: len(idles(second)) == 1)
                    await first.until(lambda: len(idles(first)) == 1)
                    assert numbered(second) == numbered(first)  # a's numbers, the same updates
                    assert texts(second) == [str(i) for i in range(40)]
    finally:
        for host in hosts.values():
            host.stop()

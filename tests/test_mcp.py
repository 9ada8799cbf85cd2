"""MCP servers for agents (``acp_trio.mcp``), against real MCP servers.

Spec: ``docs/protocol/v1/session-setup.mdx`` ("MCP Servers": stdio, http, sse configs with ``env`` and
``headers``) and ``initialization.mdx`` (``mcpCapabilities``); the MCP lifecycle's stdio shutdown
(close stdin, wait, SIGTERM, wait, SIGKILL).  The servers are scripts in ``tests/mcp_servers/``
written with the official ``mcp`` SDK: over stdio (spawned by the code under test) and over
streamable HTTP and SSE on 127.0.0.1 (subprocesses started here, waited for by polling their port
with a bound).  An agent and a client talk ACP in memory; the agent opens the session's servers in
``session/new``.  Every wait is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("mcp")

import mcp
from _processes import alive

import acp_trio
from acp_schema import v1, v2
from acp_trio.mcp import McpServerError, McpServers, open_mcp_servers

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups and signals are POSIX-only")

SERVERS = Path(__file__).parent / "mcp_servers"
TOOLS = str(SERVERS / "tools_server.py")
DEADLINE = 25  # seconds for one test (real processes; the suite stays well under this)
SECRET_ENV = "env-secret-5d1f0c9e"
SECRET_HEADER = "header-secret-8a27b4d3"


def sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def text_of(result: mcp.types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, mcp.types.TextContent), result
    return block.text


def stdio(name: str, *args: str, env: dict[str, str] | None = None) -> v1.McpServerStdio:
    env_list = [v1.EnvVariable(name=k, value=v) for k, v in (env or {}).items()]
    return v1.McpServerStdio(name=name, command=sys.executable, args=[TOOLS, *args], env=env_list)


def headers(**values: str) -> list[v1.HttpHeader]:
    return [v1.HttpHeader(name=k.replace("_", "-"), value=v) for k, v in values.items()]


# -- HTTP servers: one subprocess per transport for the whole module --------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_listening(proc: subprocess.Popen[bytes], port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"MCP test server exited with {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"MCP test server not listening on port {port} within {timeout} s")


@pytest.fixture(scope="module")
def http_urls() -> Iterator[dict[str, str]]:
    """``{"http": streamable HTTP endpoint, "sse": SSE endpoint}`` of two running SDK servers."""
    procs: list[subprocess.Popen[bytes]] = []
    urls: dict[str, str] = {}
    try:
        ports = {}
        for mode in ("http", "sse"):
            port = ports[mode] = _free_port()
            procs.append(subprocess.Popen([sys.executable, TOOLS, mode, str(port)], stderr=subprocess.DEVNULL))
        for proc, (mode, port) in zip(procs, ports.items(), strict=True):
            _wait_listening(proc, port, timeout=20)
            urls[mode] = f"http://127.0.0.1:{port}/{'mcp' if mode == 'http' else 'sse'}"
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- the ACP pair ----------------------------------------------------------------------------------------------


class Agent:
    """Opens each new session's MCP servers; a prompt calls ``add`` on every connected server."""

    connect_timeout = 10.0

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.mcp: dict[str, McpServers] = {}
        self.sums: dict[str, str] = {}

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        caps = v1.AgentCapabilities(
            mcp_capabilities=v1.McpCapabilities(http=True, sse=True),
            session_capabilities=v1.SessionCapabilities(close=v1.SessionCloseCapabilities()),
        )
        return v1.InitializeResponse(protocol_version=1, agent_capabilities=caps)

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        session_id = f"s{len(self.mcp) + 1}"
        self.mcp[session_id] = await open_mcp_servers(
            self.conn, session_id, params.mcp_servers, cwd=params.cwd, connect_timeout=self.connect_timeout
        )
        return v1.NewSessionResponse(session_id=session_id)

    async def session_close(self, params: v1.CloseSessionRequest) -> v1.CloseSessionResponse:
        return v1.CloseSessionResponse()

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        for name, session in self.mcp[params.session_id].sessions.items():
            self.sums[name] = text_of(await session.call_tool("add", {"a": 2, "b": 3}))
        return v1.PromptResponse(stop_reason="end_turn")


class Client:
    def __init__(self, conn: acp_trio.ClientSideConnection) -> None:
        self.conn = conn


async def new_session(client_conn: acp_trio.ClientSideConnection, cwd: Path, servers: list[Any]) -> str:
    await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
    response = await client_conn.agent.session_new(v1.NewSessionRequest(cwd=str(cwd), mcp_servers=servers))
    session_id: str = response.session_id
    return session_id


async def prompt(client_conn: acp_trio.ClientSideConnection, session_id: str) -> str:
    request = v1.PromptRequest(session_id=session_id, prompt=[v1.TextContentBlock(text="go")])
    response = await client_conn.agent.session_prompt(request)
    stop_reason: str = response.stop_reason
    return stop_reason


# -- tests -----------------------------------------------------------------------------------------------------


async def test_stdio_http_and_sse_servers_list_and_call_tools(
    tmp_path: Path, http_urls: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("", "acp_trio", "mcp", "httpx2", "httpcore2"):
        caplog.set_level(logging.DEBUG, logger=name or None)
    configs = [
        stdio("local", env={"MY_TOKEN": SECRET_ENV}),
        v1.HttpMcpServer(name="remote", url=http_urls["http"], headers=headers(x_api_key=SECRET_HEADER)),
        v1.SseMcpServer(name="legacy", url=http_urls["sse"], headers=headers(x_api_key=SECRET_HEADER)),
    ]
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (agent_conn, client_conn):
            agent: Agent = agent_conn.handler
            session_id = await new_session(client_conn, tmp_path, configs)
            servers = agent.mcp[session_id]
            assert list(servers) == ["local", "remote", "legacy"]
            assert servers.errors == {}
            assert [s.transport for s in servers.values()] == ["stdio", "http", "sse"]
            assert all(s.ok and not s.closed for s in servers.values())
            assert set(servers.sessions) == {"local", "remote", "legacy"}
            assert repr(servers["local"]) == "<McpServerConnection 'local' (stdio) connected>"

            for name, session in servers.sessions.items():
                tools = {tool.name for tool in (await session.list_tools()).tools}
                assert {"add", "pid", "env_sha256", "header_sha256"} <= tools, name
                assert text_of(await session.call_tool("add", {"a": 20, "b": 22})) == "42"
                info = servers[name].initialize_result
                assert info is not None and info.server_info.name == "acp-trio-test-tools"

            # env reaches the stdio server, headers every HTTP request; the session's cwd is the server's
            local, remote, legacy = (servers.sessions[n] for n in ("local", "remote", "legacy"))
            assert text_of(await local.call_tool("env_sha256", {"name": "MY_TOKEN"})) == sha256(SECRET_ENV)
            assert text_of(await local.call_tool("cwd", {})) == str(tmp_path)
            for session in (remote, legacy):
                assert text_of(await session.call_tool("header_sha256", {"name": "x-api-key"})) == sha256(SECRET_HEADER)

            # the session works with them: the prompt handler calls a tool on each
            assert await prompt(client_conn, session_id) == "end_turn"
            assert agent.sums == {"local": "5", "remote": "5", "legacy": "5"}

            # session/close shuts the stdio server down (its process is gone) and closes the others
            pid = int(text_of(await local.call_tool("pid", {})))
            assert alive(pid)
            await client_conn.agent.session_close(v1.CloseSessionRequest(session_id=session_id))
            for server in servers.values():
                await server.wait_closed()  # closed by the end of the session, nothing else
            assert not alive(pid)
            assert servers.sessions == {} and servers.errors == {}
            assert all(s.closed and s.session is None and s.error is None for s in servers.values())
            await servers.aclose()  # idempotent: nothing left to do
            assert servers.closed

    # the secrets were applied, and never logged or shown in a repr
    assert any(r.name == "acp_trio.mcp" for r in caplog.records)
    assert any(r.name.startswith("mcp.") for r in caplog.records)
    for secret in (SECRET_ENV, SECRET_HEADER):
        assert secret not in caplog.text
        assert secret not in repr(servers)


async def test_servers_of_a_variant_the_schema_lacks_connect_from_their_wire_fields(
    tmp_path: Path, http_urls: dict[str, str]
) -> None:
    """A v1 ``sse`` server seen through v2's types (v2 has no ``sse``: the neutral layer's view of a v1
    session) is an ``McpServerOther`` with ``url`` and ``headers`` in ``extra_fields``.  Before: it
    failed to start, ``AttributeError: 'McpServerOther' object has no attribute 'url'``."""
    wire_headers = [{"name": "x-api-key", "value": SECRET_HEADER}]
    configs = [
        v2.McpServerOther(
            type="sse", extra_fields={"name": "legacy", "url": http_urls["sse"], "headers": wire_headers}
        ),
        v2.McpServerOther(
            type="http", extra_fields={"name": "remote", "url": http_urls["http"], "headers": wire_headers}
        ),
    ]
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (agent_conn, client_conn):
            session_id = await new_session(client_conn, tmp_path, [])
            servers = await open_mcp_servers(agent_conn, session_id, configs)
            try:
                assert servers.errors == {}
                assert [s.transport for s in servers.values()] == ["sse", "http"]
                for session in servers.sessions.values():
                    assert text_of(await session.call_tool("header_sha256", {"name": "x-api-key"})) == sha256(
                        SECRET_HEADER
                    )
            finally:
                await servers.aclose()


async def test_failing_servers_fail_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="acp_trio")
    nobody = f"http://127.0.0.1:{_free_port()}/mcp"
    configs = [
        v1.McpServerStdio(name="missing", command=str(tmp_path / "no-such-server"), args=[], env=[]),
        v1.McpServerStdio(name="missing", command="/bin/false", args=[], env=[]),  # exits at once
        v1.HttpMcpServer(name="nobody", url=nobody, headers=headers(authorization=SECRET_HEADER)),
        v1.McpServerOther(type="websocket", extra_fields={"name": "future", "url": "ws://x"}),  # no such transport
        stdio("good", env={"MY_TOKEN": SECRET_ENV}),
    ]
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (agent_conn, client_conn):
            agent: Agent = agent_conn.handler
            session_id = await new_session(client_conn, tmp_path, configs)
            servers = agent.mcp[session_id]
            assert list(servers) == ["missing", "missing#2", "nobody", "future", "good"]
            errors = servers.errors
            assert set(errors) == {"missing", "missing#2", "nobody", "future"}
            assert str(errors["missing"]).startswith("MCP server 'missing' (stdio) failed to start: FileNotFoundError")
            assert str(errors["missing#2"]) == (
                "MCP server 'missing#2' (stdio) failed to start: the connection closed before the answer to"
                " initialize (for stdio: the process exited, see its stderr)"
            )
            assert str(errors["nobody"]).startswith("MCP server 'nobody' (http) failed to start: ConnectError")
            assert "unsupported MCP transport 'websocket'" in str(errors["future"])
            assert repr(servers["nobody"]).startswith("<McpServerConnection 'nobody' (http) failed: failed to start")
            for name, error in errors.items():
                assert isinstance(error, McpServerError) and error.server == name
                assert servers[name].session is None and not servers[name].ok
                assert f"MCP server {name!r}" in caplog.text  # logged at WARNING
            # the session and the good server still work
            assert list(servers.sessions) == ["good"]
            assert await prompt(client_conn, session_id) == "end_turn"
            assert agent.sums == {"good": "5"}

            # the schema's untagged $defs (McpServerHttp, McpServerSse), built in code, work too
            untagged = [
                v1.McpServerHttp(name="h", url=nobody, headers=[]),
                v1.McpServerSse(name="s", url=nobody.replace("/mcp", "/sse"), headers=[]),
            ]
            async with await open_mcp_servers(agent_conn, session_id, untagged) as more:
                assert {name: error.transport for name, error in more.errors.items()} == {"h": "http", "s": "sse"}
                assert all("ConnectError" in error.reason for error in more.errors.values())
    assert SECRET_ENV not in caplog.text and SECRET_HEADER not in caplog.text


async def test_unresponsive_server_times_out_and_is_killed(tmp_path: Path) -> None:
    """A server that never answers fails after ``connect_timeout``; closing it takes every step of the
    MCP stdio shutdown: stdin closed (ignored), SIGTERM (ignored), then SIGKILL."""
    events = tmp_path / "events"
    config = v1.McpServerStdio(
        name="stubborn", command=sys.executable, args=[str(SERVERS / "stubborn_server.py"), str(events)], env=[]
    )
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (agent_conn, _client_conn):
            start = trio.current_time()
            async with await open_mcp_servers(agent_conn, "s1", [config], connect_timeout=1.5) as servers:
                assert trio.current_time() - start < 3  # it returned at the deadline, not after the shutdown
                error = servers["stubborn"].error
                assert error is not None and error.reason == "failed to start: not ready within 1.5 s"
            # leaving `async with` (aclose) waited for the shutdown
            assert servers["stubborn"].closed
    lines = events.read_text().splitlines()
    assert lines[0].startswith("pid ") and lines[1:] == ["eof", "sigterm"], lines
    assert not alive(int(lines[0].split()[1]))


async def test_connection_close_shuts_servers_down_and_a_dying_server_is_reported(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (agent_conn, client_conn):
            agent: Agent = agent_conn.handler
            session_id = await new_session(client_conn, tmp_path, [stdio("kept"), stdio("dying")])
            servers = agent.mcp[session_id]
            kept, dying = servers.sessions["kept"], servers.sessions["dying"]
            pids = [int(text_of(await s.call_tool("pid", {}))) for s in (kept, dying)]
            assert all(alive(pid) for pid in pids)

            # a server that exits mid-session: the call fails, the entry reports it, the others go on
            with pytest.raises(mcp.MCPError):
                await dying.call_tool("exit", {})
            await servers["dying"].wait_closed()
            error = servers["dying"].error
            assert error is not None and "closed its connection" in error.reason
            assert not alive(pids[1])
            assert list(servers.sessions) == ["kept"]
            assert await prompt(client_conn, session_id) == "end_turn"
    # the connection closed: its background tasks (the servers) were awaited, the process is gone
    assert servers.closed and not alive(pids[0])
    assert servers["kept"].error is None


async def test_cancelled_open_closes_its_servers(tmp_path: Path) -> None:
    """The caller of ``open_mcp_servers`` is cancelled while a server starts: that server is closed."""
    pid_file = tmp_path / "pid"
    script = "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); sys.stdin.read()"  # never answers
    config = v1.McpServerStdio(name="slow", command=sys.executable, args=["-c", script, str(pid_file)], env=[])
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (agent_conn, _client_conn):
            with trio.move_on_after(1) as scope:
                await open_mcp_servers(agent_conn, "s1", [config], connect_timeout=10)
            assert scope.cancelled_caught
            start = trio.current_time()
        # leaving the pair waited for the server's shutdown, which took no signal (it exits at end of stdin)
        assert trio.current_time() - start < 1.5
    assert not alive(int(pid_file.read_text()))


def test_importing_acp_trio_does_not_import_mcp() -> None:
    code = "import sys, acp_trio; acp_trio.AgentSideConnection; acp_trio.open_memory_pair; print(json.dumps('mcp' in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True, timeout=30
    )
    assert json.loads(out.stdout) is False

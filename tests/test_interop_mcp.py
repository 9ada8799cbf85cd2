"""MCP over ACP with the TypeScript SDK, both directions, over real stdio between real processes.

The official TypeScript SDK 2.4.0 (``@agentclientprotocol/sdk``, its unstable v1 entry point)
ships both halves of MCP over ACP (``mcp/message``, MCP servers of transport ``acp``): the
client's ``McpOverAcpProvider`` with ``fromMcpServer`` (an ``@modelcontextprotocol/server`` 2.4.0
server), and the agent's ``McpOverAcpCaller``.  Two pairings, each in protocol version 1
(``acp_schema.v1_unstable``, the SDK's ``unstable`` entry point: the MCP calls run in a prompt turn)
and 2 (``acp_schema.v2_unstable``, ``experimental/v2/unstable``: they run in an extension request,
which keeps the v2 prompt lifecycle out of it):

- a client written with the SDK (``tests/interop/ts_mcp_client.mjs``) serves its MCP server to
  acp-trio's agent (``tests/interop/trio_mcp_agent.py``, both versions side by side), which opens
  it with ``acp_trio.mcp.open_mcp_servers`` as a live ``mcp.ClientSession`` and uses it in a turn;
- acp-trio's client (``acp_trio.mcp_over_acp.serve_mcp_server``, an ``MCPServer`` of the Python
  MCP SDK) serves an MCP server to an agent written with the SDK (``tests/interop/ts_mcp_agent.mjs``),
  which calls it with ``McpOverAcpCaller``.

Each covers discovery, tools/list, a tools/call round trip, progress notifications routed to their
request, a resource, a prompt, an unknown tool, an unknown ``serverId`` (-33001) and a call
withdrawn by its caller (``$/cancel_request``, the tool on the other side cancelled).

The SDKs are installed once into ``${ACP_TRIO_CACHE:-~/.cache/acp-trio}/interop/`` (as in
``tests/test_interop.py``, whose install helper this uses): ``@agentclientprotocol/sdk`` 2.4.0,
``@modelcontextprotocol/server`` 2.4.0 (its optional peer for ``fromMcpServer``) and zod 4, in a
directory of their own.  The tests skip only when ``node``/``npm`` are missing; a failed install fails.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import test_interop  # pytest's default ("prepend") import mode puts tests/ on sys.path
import trio
from test_interop import INTEROP, TIME_LIMIT, TS_SDK, TS_SDK_VERSION

pytest.importorskip("mcp")

from test_mcp_over_acp import make_server  # the in-memory tests' MCP server (Python SDK)

from acp_schema import v1_unstable, v2_unstable
from acp_trio import ClientSideConnection, converter, spawn_agent
from acp_trio.mcp_over_acp import SERVER_UNAVAILABLE, serve_mcp_server

TS_MCP_SERVER = "@modelcontextprotocol/server"
TS_MCP_SERVER_VERSION = "2.4.0"
TRIO_MCP_AGENT = [sys.executable, str(INTEROP / "trio_mcp_agent.py")]
VERSIONS = pytest.mark.parametrize("version", [1, 2], ids=["v1_unstable", "v2_unstable"])


@pytest.fixture(scope="session")
def ts_mcp_sdk() -> Path:
    """The npm directory holding the ACP SDK, the MCP server SDK and zod (peer dependencies of both)."""
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        pytest.skip("node and npm are not on PATH: the TypeScript SDK interop tests need Node.js (20 or later)")
    target = test_interop._cache_dir() / f"npm-{TS_SDK_VERSION}-mcp-server-{TS_MCP_SERVER_VERSION}"
    packages = [f"{TS_SDK}@{TS_SDK_VERSION}", f"{TS_MCP_SERVER}@{TS_MCP_SERVER_VERSION}", "zod@^4.2.0"]
    return test_interop._installed(
        target,
        "\n".join(packages) + "\n",
        target / "node_modules" / "@modelcontextprotocol" / "server" / "package.json",
        [[npm, "install", "--no-audit", "--no-fund", "--no-save", *packages]],
        {"package.json": '{"name": "acp-trio-interop-mcp", "private": true}\n'},
    )


def chunk_json(updates: list[Any]) -> dict[str, Any]:
    """The one agent_message_chunk of the turn, parsed as the JSON report both agents send."""
    (text,) = [u["update"]["content"]["text"] for u in updates if u["update"]["sessionUpdate"] == "agent_message_chunk"]
    report: dict[str, Any] = json.loads(text)
    return report


# -- the TypeScript SDK's provider, serving acp-trio's agent --------------------------------------------------


@pytest.mark.one_interpreter  # a real peer's verdict (node): the other tests run the runtime on every interpreter
@VERSIONS
async def test_our_agent_uses_an_mcp_server_that_a_typescript_sdk_client_serves_over_acp(
    ts_mcp_sdk: Path, tmp_path: Path, version: int
) -> None:
    with trio.fail_after(TIME_LIMIT):
        proc = await trio.run_process(
            ["node", str(INTEROP / "ts_mcp_client.mjs"), str(version), str(tmp_path), *TRIO_MCP_AGENT],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "ACP_INTEROP_NPM_DIR": str(ts_mcp_sdk)},
        )
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0, f"ts_mcp_client.mjs exited {proc.returncode}:\n{stderr}"
    summary = json.loads(proc.stdout.decode("utf-8").splitlines()[-1])

    declaration = summary["declaration"]
    assert declaration["type"] == "acp" and declaration["name"] == "ts-tools"
    if version == 1:
        assert summary["initialize"]["agentCapabilities"]["mcpCapabilities"] == {"acp": True}
        assert summary["stopReason"] == "end_turn"
        seen = chunk_json(summary["updates"])
    else:
        assert summary["initialize"]["capabilities"] == {"session": {"mcp": {"acp": {}}}}
        seen = summary["report"]
    assert seen["protocolVersion"] == version
    assert seen["servers"] == {"ts-tools": "acp"} and seen["errors"] == {}
    assert seen["serverInfo"] == {"name": "ts-tools", "version": "2.4.0"}  # from server/discover
    assert seen["tools"] == ["add", "count", "slow"]
    assert seen["add"] == ["5"]
    assert seen["count"] == ["counted"]
    # the SDK's notifications/progress, carried as mcp/message notifications, reached the call's callback
    assert seen["progress"] == [[1, 3, "step 1"], [2, 3, "step 2"], [3, 3, "step 3"]]
    assert seen["resource"] == ["buy milk"]
    assert seen["prompt"] == ["Say hello to Ada."]
    assert seen["nope"] == {"code": -32602, "message": "Tool nope not found"}  # the SDK's inner error
    # our agent abandoned the slow call: $/cancel_request aborted the tool's signal on the client
    assert seen["slowCancelled"] is True
    assert summary["slow"] == {"started": True, "aborted": True}
    assert summary["agentExit"]["code"] == 0


# -- acp-trio's provider, serving the TypeScript SDK's caller -------------------------------------------------


class ProvidingClient:
    """Records updates; the test registers the MCP server once ``initialize`` has answered."""

    def __init__(self, conn: ClientSideConnection) -> None:
        self.conn = conn
        self.updates: list[Any] = []

    async def session_update(self, params: Any) -> None:
        self.updates.append(converter.unstructure(params))  # wire JSON, as the other test reads it


@VERSIONS
async def test_a_typescript_sdk_agent_calls_an_mcp_server_our_client_serves_over_acp(
    ts_mcp_sdk: Path, tmp_path: Path, version: int
) -> None:
    acp = v1_unstable if version == 1 else v2_unstable
    release, entered = trio.Event(), trio.Event()
    server = make_server(release, entered)
    wire: list[tuple[str, dict[str, Any]]] = []
    with trio.fail_after(TIME_LIMIT):
        async with spawn_agent(
            "node",
            [str(INTEROP / "ts_mcp_agent.mjs"), str(version)],
            client=ProvidingClient,
            variant=acp,
            tap=lambda direction, line: wire.append((direction, json.loads(line))),
            env={"ACP_INTEROP_NPM_DIR": str(ts_mcp_sdk)},
            cwd=tmp_path,
        ) as conn:
            if version == 1:
                init = await conn.agent.initialize(acp.InitializeRequest(protocol_version=1))
                assert init.agent_capabilities.mcp_capabilities.acp is True
            else:
                client_info = acp.Implementation(name="acp-trio-mcp-interop-client", version="1")
                init = await conn.agent.initialize(
                    acp.InitializeRequest(protocol_version=2, info=client_info, capabilities=acp.ClientCapabilities())
                )
                assert init.capabilities.session.mcp.acp == acp.McpAcpCapabilities()
            registration = serve_mcp_server(conn, server, name="py-tools")
            session = await conn.agent.session_new(
                acp.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[registration.declaration])
            )
            if version == 1:
                response = await conn.agent.session_prompt(
                    acp.PromptRequest(session_id=session.session_id, prompt=[acp.TextContentBlock(text="go")])
                )
                assert response.stop_reason == "end_turn"
                client: ProvidingClient = conn.handler
                seen = chunk_json(client.updates)
            else:
                seen = await conn.ext_request("_interop/use_mcp", {"sessionId": session.session_id})
            await server.slow_ended.wait()  # type: ignore[attr-defined]
            assert registration.active_requests == 0
    assert server.outcome == {"slow": "cancelled"}  # type: ignore[attr-defined]

    assert seen["servers"] == [{"type": "acp", "name": "py-tools", "serverId": registration.server_id}]
    discover = seen["discover"]["result"]
    assert discover["supportedVersions"] == ["2026-07-28"]
    assert discover["instructions"] == "tools the client serves over ACP"
    assert {tool["name"] for tool in seen["tools"]["result"]["tools"]} == {"add", "fail", "slow", "count"}
    assert seen["add"]["result"]["content"] == [{"type": "text", "text": "5"}]
    assert seen["count"]["result"]["content"][0]["text"] == "counted"
    # our server's progress: mcp/message notifications naming the caller's request, sent before its answer
    count = next(m for d, m in wire if d == "in" and m.get("params", {}).get("params", {}).get("name") == "count")
    sent = [m for d, m in wire if d == "out"]
    answer_at = next(i for i, m in enumerate(sent) if m.get("id") == count["id"] and "method" not in m)
    progress = [m["params"] for m in sent[:answer_at] if m.get("method") == "mcp/message"]
    assert [(n["requestId"], n["method"], n["params"]["progress"], n["params"]["message"]) for n in progress] == [
        (count["params"]["requestId"], "notifications/progress", step, f"step {step}") for step in (1, 2, 3)
    ]
    if version == 1:  # and the SDK's caller handed them to the call's onNotification
        assert [(n["method"], n["params"]["progress"], n["params"]["progressToken"]) for n in seen["progress"]] == [
            ("notifications/progress", step, "count-1") for step in (1, 2, 3)
        ]
    # (the SDK's v2 agent handles notifications behind an asynchronous initialization guard, so the
    # answer that follows them on the wire may settle the call first and they find no listener)
    assert seen["resource"]["result"]["contents"][0]["text"] == "buy milk"
    assert seen["prompt"]["result"]["messages"][0]["content"]["text"] == "Say hello to Ada."
    nope = seen["nope"]["result"]  # an unknown tool: the Python SDK answers a tool error result
    assert nope["isError"] is True and "nope" in nope["content"][0]["text"]
    assert seen["nobody"]["outer"]["code"] == SERVER_UNAVAILABLE
    assert seen["nobody"]["outer"]["data"] == {"serverId": "nobody"}
    # the SDK withdrew the slow call ($/cancel_request): our client cancelled the tool, answered -32800
    assert seen["slow"]["outer"]["code"] == -32800

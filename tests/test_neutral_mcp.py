"""The version-neutral agent API: MCP servers (``Agent.mcp_support``, ``Session.mcp_servers``).

migration.mdx § Capability reorganization and § MCP server configuration: the transports an agent
accepts are v1 ``agentCapabilities.mcpCapabilities`` (``http``, ``sse``; stdio implied) and v2
``capabilities.session.mcp`` (``stdio``, ``http`` markers; no ``sse``); a session's servers reach
the agent as v2 ``McpServer`` objects whatever the client's version.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from _neutral_kit import Client, connected

from acp_schema import v1, v2
from acp_trio import neutral

BOTH = pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])


class Plain(neutral.Agent):
    info = neutral.AgentInfo(name="plain", version="1")

    def __init__(self) -> None:
        super().__init__()
        self.servers: list[Any] = []

    async def new_session(self, session: neutral.Session) -> None:
        self.servers.extend(session.mcp_servers)

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        return "end_turn"


class Everything(Plain):
    mcp_support = neutral.McpSupport(stdio=True, http=True, sse=True)


class NoStdio(Plain):
    mcp_support = neutral.McpSupport(stdio=False, http=True)


def _initialize_answer(wire: Any) -> dict[str, Any]:
    answer: dict[str, Any] = next(m["result"] for m in wire.messages() if m.get("id") == 0)
    return answer


@pytest.mark.parametrize(
    ("agent", "v1_mcp", "v2_mcp"),
    [
        (Plain, {"http": False, "sse": False}, {"stdio": {}}),
        (Everything, {"http": True, "sse": True}, {"stdio": {}, "http": {}}),
        (NoStdio, {"http": True, "sse": False}, {"http": {}}),
    ],
    ids=["default-stdio", "all", "no-stdio"],
)
@BOTH
async def test_initialize_advertises_the_agents_mcp_transports_in_each_versions_place(
    variant: ModuleType, agent: type[Plain], v1_mcp: dict[str, Any], v2_mcp: dict[str, Any]
) -> None:
    async with connected(agent(), Client(variant)) as wire:
        answer = _initialize_answer(wire)
    if variant is v1:
        assert answer["agentCapabilities"]["mcpCapabilities"] == v1_mcp
        assert "mcp" not in answer["agentCapabilities"]
    else:
        assert answer["capabilities"]["session"]["mcp"] == v2_mcp
        assert "mcpCapabilities" not in answer["capabilities"]


async def test_an_agent_that_accepts_no_transport_advertises_no_v2_mcp_marker() -> None:
    class Nothing(Plain):
        mcp_support = neutral.McpSupport(stdio=False)

    async with connected(Nothing(), Client(v2)) as wire:
        assert "mcp" not in _initialize_answer(wire)["capabilities"]["session"]


@BOTH
async def test_the_session_gets_the_clients_mcp_servers_as_v2_configs(variant: ModuleType) -> None:
    agent = Everything()
    async with connected(agent, Client(variant)) as wire:
        if variant is v1:
            servers: list[Any] = [
                v1.McpServerStdio(
                    name="fs", command="/bin/mcp-fs", args=["--ro"], env=[v1.EnvVariable(name="K", value="v")]
                ),
                v1.HttpMcpServer(name="web", url="https://mcp.example/mcp", headers=[]),
            ]
            await wire.agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=servers))
        else:
            servers = [
                v2.StdioMcpServer(
                    name="fs", command="/bin/mcp-fs", args=["--ro"], env=[v2.EnvVariable(name="K", value="v")]
                ),
                v2.HttpMcpServer(name="web", url="https://mcp.example/mcp"),
            ]
            await wire.agent.session_new(v2.NewSessionRequest(cwd="/work", mcp_servers=servers))
    stdio, http = agent.servers
    assert isinstance(stdio, v2.StdioMcpServer) and isinstance(http, v2.HttpMcpServer)
    assert (stdio.name, stdio.command, stdio.args) == ("fs", "/bin/mcp-fs", ["--ro"])
    assert [(e.name, e.value) for e in stdio.env] == [("K", "v")]
    assert (http.name, http.url) == ("web", "https://mcp.example/mcp")

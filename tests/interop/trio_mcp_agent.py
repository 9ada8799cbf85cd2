"""An acp-trio agent that uses the MCP servers its client serves over ACP (``acp_schema.v1_unstable``).

Run by ``tests/test_interop_mcp.py`` (``python trio_mcp_agent.py``); the TypeScript SDK's client
(``ts_mcp_client.mjs``: ``McpOverAcpProvider`` and ``fromMcpServer``) drives it over stdio.

- ``initialize``: protocol version 1, ``mcpCapabilities.acp``, ``sessionCapabilities.close``;
- ``session/new``: opens the session's MCP servers (``acp_trio.mcp.open_mcp_servers``);
- ``session/prompt``: on the first connected server, lists its tools, calls ``add`` {2, 3}, calls
  ``count`` with a progress callback, reads ``notes://today``, gets the prompt ``greet`` {name: Ada},
  calls the unknown tool ``nope``, and calls ``slow``, cancelling it once the server reported its
  first progress; then it says one ``agent_message_chunk``: a JSON object of what it saw, and
  ends the turn ``end_turn``.  Failures are reported in that object (``"error"``), not raised;
- ``session/close``: closes the session (and its MCP servers).
"""

from __future__ import annotations

import json
from typing import Any

import mcp
import trio

from acp_schema import v1_unstable as acp
from acp_trio import AgentSideConnection, run_agent_stdio
from acp_trio.mcp import McpServers, open_mcp_servers


def describe(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, mcp.MCPError):
        return {"code": exc.error.code, "message": exc.error.message}
    return {"type": type(exc).__name__, "message": str(exc)}


def texts(result: Any) -> list[str]:
    return [block.text for block in result.content if isinstance(block, mcp.types.TextContent)]


class McpInteropAgent:
    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn
        self.mcp: dict[str, McpServers] = {}

    async def initialize(self, params: acp.InitializeRequest) -> acp.InitializeResponse:
        caps = acp.AgentCapabilities(
            mcp_capabilities=acp.McpCapabilities(acp=True),
            session_capabilities=acp.SessionCapabilities(close=acp.SessionCloseCapabilities()),
        )
        info = acp.Implementation(name="acp-trio-mcp-interop-agent", version="1")
        return acp.InitializeResponse(protocol_version=1, agent_capabilities=caps, agent_info=info)

    async def session_new(self, params: acp.NewSessionRequest) -> acp.NewSessionResponse:
        session_id = f"trio-session-{len(self.mcp) + 1}"
        self.mcp[session_id] = await open_mcp_servers(self.conn, session_id, params.mcp_servers, cwd=params.cwd)
        return acp.NewSessionResponse(session_id=session_id)

    async def session_close(self, params: acp.CloseSessionRequest) -> acp.CloseSessionResponse:
        return acp.CloseSessionResponse()

    async def session_prompt(self, params: acp.PromptRequest) -> acp.PromptResponse:
        servers = self.mcp[params.session_id]
        seen: dict[str, Any] = {
            "servers": {name: server.transport for name, server in servers.items()},
            "errors": {name: error.reason for name, error in servers.errors.items()},
        }
        if servers.sessions:
            session = next(iter(servers.sessions.values()))
            try:
                await self.use(session, seen)
            except Exception as exc:
                seen["error"] = describe(exc)
        update = acp.AgentMessageChunkSessionUpdate(content=acp.TextContentBlock(text=json.dumps(seen)))
        await self.conn.client.session_update(acp.SessionNotification(session_id=params.session_id, update=update))
        return acp.PromptResponse(stop_reason="end_turn")

    async def use(self, session: mcp.ClientSession, seen: dict[str, Any]) -> None:
        info = session.server_info
        seen["serverInfo"] = {"name": info.name, "version": info.version} if info is not None else None
        seen["tools"] = sorted(tool.name for tool in (await session.list_tools()).tools)
        seen["add"] = texts(await session.call_tool("add", {"a": 2, "b": 3}))

        progress: list[list[Any]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append([value, total, message])

        seen["count"] = texts(await session.call_tool("count", {}, progress_callback=on_progress))
        seen["progress"] = progress
        read = await session.read_resource("notes://today")
        seen["resource"] = [getattr(content, "text", None) for content in read.contents]
        prompt = await session.get_prompt("greet", {"name": "Ada"})
        seen["prompt"] = [getattr(message.content, "text", None) for message in prompt.messages]
        try:
            missing = await session.call_tool("nope", {})
            seen["nope"] = {"isError": missing.is_error, "text": texts(missing)}
        except mcp.MCPError as exc:
            seen["nope"] = describe(exc)

        started = trio.Event()
        answered: list[Any] = []

        async def on_slow_progress(value: float, total: float | None, message: str | None) -> None:
            started.set()

        async def call_slow() -> None:
            answered.append(await session.call_tool("slow", {}, progress_callback=on_slow_progress))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call_slow)
            with trio.fail_after(10):
                await started.wait()  # the tool runs on the client
            nursery.cancel_scope.cancel()  # the MCP call is abandoned: its mcp/message request is cancelled
        seen["slowCancelled"] = not answered


if __name__ == "__main__":
    run_agent_stdio(McpInteropAgent, variant=acp)

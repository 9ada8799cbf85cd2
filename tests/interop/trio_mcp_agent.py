"""An acp-trio agent that uses the MCP servers its client serves over ACP (``acp_schema.v1_unstable``
and ``v2_unstable`` side by side).

Run by ``tests/test_interop_mcp.py`` (``python trio_mcp_agent.py``); the TypeScript SDK's client
(``ts_mcp_client.mjs``: ``McpOverAcpProvider`` and ``fromMcpServer``) drives it over stdio.

- ``initialize``: v1: ``mcpCapabilities.acp``, ``sessionCapabilities.close``; v2:
  ``capabilities.session.mcp.acp``;
- ``session/new``: opens the session's MCP servers (``acp_trio.mcp.open_mcp_servers``);
- the report: on the first connected server, it lists its tools, calls ``add`` {2, 3}, calls
  ``count`` with a progress callback, reads ``notes://today``, gets the prompt ``greet`` {name: Ada},
  calls the unknown tool ``nope``, and calls ``slow``, cancelling it once the server reported its
  first progress; it reports what it saw as a JSON object (failures in ``"error"``, not raised);
- v1 ``session/prompt``: the report as one ``agent_message_chunk`` (JSON text), then ``end_turn``;
- the extension request ``_interop/use_mcp`` {sessionId} answers the report (both versions; the v2
  client uses it, so that the v2 prompt lifecycle stays out of this test);
- ``session/close``: closes the session (and its MCP servers).
"""

from __future__ import annotations

import json
from typing import Any

import mcp
import trio

from acp_schema import v1_unstable, v2_unstable
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
        conn.on_ext_request("_interop/use_mcp", self.use_mcp)

    async def initialize(self, params: Any) -> Any:
        acp = self.conn.variant
        if acp is v2_unstable:
            session = acp.SessionCapabilities(mcp=acp.McpCapabilities(acp=acp.McpAcpCapabilities()))
            info = acp.Implementation(name="acp-trio-mcp-interop-agent", version="1")
            return acp.InitializeResponse(
                protocol_version=2, info=info, capabilities=acp.AgentCapabilities(session=session)
            )
        caps = acp.AgentCapabilities(
            mcp_capabilities=acp.McpCapabilities(acp=True),
            session_capabilities=acp.SessionCapabilities(close=acp.SessionCloseCapabilities()),
        )
        info = acp.Implementation(name="acp-trio-mcp-interop-agent", version="1")
        return acp.InitializeResponse(protocol_version=1, agent_capabilities=caps, agent_info=info)

    async def session_new(self, params: Any) -> Any:
        session_id = f"trio-session-{len(self.mcp) + 1}"
        servers = params.mcp_servers or []  # optional in v2
        self.mcp[session_id] = await open_mcp_servers(self.conn, session_id, servers, cwd=params.cwd)
        return self.conn.variant.NewSessionResponse(session_id=session_id)

    async def session_close(self, params: Any) -> Any:
        return self.conn.variant.CloseSessionResponse()

    async def session_prompt(self, params: v1_unstable.PromptRequest) -> v1_unstable.PromptResponse:
        acp = v1_unstable
        seen = await self.report(params.session_id)
        update = acp.AgentMessageChunkSessionUpdate(content=acp.TextContentBlock(text=json.dumps(seen)))
        await self.conn.client.session_update(acp.SessionNotification(session_id=params.session_id, update=update))
        return acp.PromptResponse(stop_reason="end_turn")

    async def use_mcp(self, params: Any) -> dict[str, Any]:
        return await self.report(params["sessionId"])

    async def report(self, session_id: str) -> dict[str, Any]:
        servers = self.mcp[session_id]
        seen: dict[str, Any] = {
            "protocolVersion": self.conn.protocol_version,
            "servers": {name: server.transport for name, server in servers.items()},
            "errors": {name: error.reason for name, error in servers.errors.items()},
        }
        if servers.sessions:
            session = next(iter(servers.sessions.values()))
            try:
                await self.use(session, seen)
            except Exception as exc:
                seen["error"] = describe(exc)
        return seen

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
    run_agent_stdio({v1_unstable: McpInteropAgent, v2_unstable: McpInteropAgent})

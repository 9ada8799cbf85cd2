"""The MCP server the checker offers agents in ``session/new`` (check ``session.mcp``).

``python -m acp_trio.check._mcp_server RECORD stdio`` serves MCP on stdio; ``... RECORD http PORT``
serves Streamable HTTP at ``http://127.0.0.1:PORT/mcp`` and ``... RECORD sse PORT`` the legacy SSE
transport at ``/sse``.  Each run appends a line to the file ``RECORD`` when it starts (``stdio``)
and for every HTTP request it gets (``http POST /mcp``), so the checker can tell whether the agent
connected.  It has one tool, ``acp_check_ping``, answering ``pong``.  Written with the official
``mcp`` SDK (``pip install 'acp-trio[mcp]'``); HTTP is served by the SDK's own app under uvicorn.
"""

from __future__ import annotations

import sys
from typing import Any


def _record(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def main(argv: list[str]) -> None:
    from mcp.server.mcpserver import MCPServer

    record, mode = argv[0], argv[1]
    server = MCPServer(name="acp-check-mcp", version="1")

    @server.tool()
    def acp_check_ping() -> str:
        """Answers pong (the conformance checker's MCP server)."""
        _record(record, "tool acp_check_ping")
        return "pong"

    if mode == "stdio":
        _record(record, "stdio")
        server.run("stdio")
        return
    import uvicorn

    app = server.streamable_http_app() if mode == "http" else server.sse_app()

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            _record(record, f"{mode} {scope['method']} {scope['path']}")
        await app(scope, receive, send)

    uvicorn.run(recording, host="127.0.0.1", port=int(argv[2]), log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])

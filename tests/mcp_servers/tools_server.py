"""A small MCP server written with the official ``mcp`` SDK, for ``tests/test_mcp.py``.

Usage: ``python tools_server.py stdio`` or ``python tools_server.py http PORT`` (streamable
HTTP at ``http://127.0.0.1:PORT/mcp``) or ``python tools_server.py sse PORT`` (``/sse``).

Tools: ``add(a, b)``, ``pid()`` (this process id), ``cwd()``, ``env_sha256(name)`` and
``header_sha256(name)`` (the SHA-256 of an environment variable / request header, so the test can
check a secret arrived without the secret travelling back in a result), ``exit()`` (the process
exits at once, without answering).
"""

from __future__ import annotations

import hashlib
import os
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer(name="acp-trio-test-tools", version="1.0")


def _sha256(value: str | None) -> str:
    return "missing" if value is None else hashlib.sha256(value.encode()).hexdigest()


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
def cwd() -> str:
    """This server's working directory."""
    return os.getcwd()


@server.tool()
def env_sha256(name: str) -> str:
    """SHA-256 (hex) of the environment variable ``name``, or ``missing``."""
    return _sha256(os.environ.get(name))


@server.tool()
def header_sha256(name: str, ctx: Context) -> str:
    """SHA-256 (hex) of the request header ``name``, or ``missing``."""
    headers = ctx.headers or {}
    return _sha256(headers.get(name))


@server.tool(name="exit")
def exit_now() -> str:
    """Exit the process at once, without answering."""
    os._exit(3)


def main(argv: list[str]) -> None:
    mode = argv[0] if argv else "stdio"
    if mode == "stdio":
        server.run("stdio")
    elif mode == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
    elif mode == "sse":
        server.run("sse", host="127.0.0.1", port=int(argv[1]))
    else:
        sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""What a session brings to the model beside the agent's own tools: the session's MCP servers as
pydantic-ai ``MCPToolset`` s, and the v1 client's file system and terminals as function tools."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ToolReturn
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from acp_schema import v2
from acp_trio import CapabilityError, RequestError
from acp_trio import neutral as n

from ._aio import call_trio

__all__ = ["CLIENT_TOOLS", "client_toolset", "hold_toolsets", "mcp_toolset"]

log = logging.getLogger("acp_trio.integrations.pydantic_ai")

CLIENT_TOOLS = ("acp_read_text_file", "acp_write_text_file", "acp_run_command")
"""The names of the tools a v1 client's capabilities bring (``fs.readTextFile``,
``fs.writeTextFile``, ``terminal``); writing and running need the user's approval."""
OUTPUT_LIMIT = 256_000
"""Bytes of a command's output the client keeps (``outputByteLimit``: its last ones)."""
MCP_START_WAIT = 30.0
"""Seconds an MCP server of the session may take to start and answer ``initialize`` (pydantic-ai's
default, 5 s, is shorter than a Python MCP server's start on a loaded machine); past it the server
is left out of the session's tools and a warning is logged."""


def _prefix(name: str) -> str:
    """A tool-name prefix from an MCP server's name (letters, digits, ``_`` and ``-``)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or "mcp"


def mcp_toolset(server: Any, cwd: str) -> AbstractToolset[Any] | None:
    """The pydantic-ai toolset of one of a session's ``mcpServers`` (v2 objects: stdio, http, or a
    v1 ``sse`` config kept as v2's catch-all), its tools named ``<server>_<tool>``; ``None`` (and a
    warning) for a transport this integration does not know.  A stdio server runs in ``cwd``."""
    from fastmcp.client.transports import SSETransport, StdioTransport, StreamableHttpTransport
    from pydantic_ai.mcp import MCPToolset

    transport: Any
    if isinstance(server, v2.StdioMcpServer):
        args = list(server.args) if isinstance(server.args, list) else []
        env = {e.name: e.value for e in server.env} if isinstance(server.env, list) else None
        transport = StdioTransport(server.command, args, env=env or None, cwd=cwd, keep_alive=False)
    elif isinstance(server, v2.HttpMcpServer):
        headers = {h.name: h.value for h in server.headers} if isinstance(server.headers, list) else {}
        transport = StreamableHttpTransport(server.url, headers=headers)
    else:
        fields = getattr(server, "extra_fields", None) or {}
        if getattr(server, "type", fields.get("type")) != "sse" or not isinstance(fields.get("url"), str):
            log.warning("MCP server %r: transport not supported, left out", getattr(server, "name", server))
            return None
        headers = {h["name"]: h["value"] for h in fields.get("headers") or [] if isinstance(h, dict)}
        transport = SSETransport(fields["url"], headers=headers)
    name = getattr(server, "name", None) or "mcp"
    return MCPToolset(transport, id=_prefix(name), init_timeout=MCP_START_WAIT).prefixed(_prefix(name))


async def hold_toolsets(
    servers: Sequence[Any], cwd: str, opened: list[AbstractToolset[Any]], ready: Callable[[], object]
) -> None:
    """(asyncio) Make the toolset of each MCP server config (:func:`mcp_toolset`: here, since
    FastMCP's client takes the async library it is made in for its own), enter it (connect the
    server), put those that connected in ``opened``, call ``ready()``, then hold them open until
    cancelled; they are closed in this same task (anyio's rule for the cancel scopes of MCP
    clients).  A server that fails to start is logged and left out."""
    toolsets = [t for t in (mcp_toolset(s, cwd) for s in servers) if t is not None]
    async with AsyncExitStack() as stack:
        for toolset in toolsets:
            try:
                await stack.enter_async_context(toolset)
            except Exception as exc:
                log.warning("MCP toolset %s unavailable: %s", toolset.id or toolset, exc)
                continue
            opened.append(toolset)
        ready()
        await asyncio.Event().wait()


async def _client_call(what: str, path: str | None, call: Callable[[], Any]) -> Any:
    """``await call_trio(call)``; the client's error answer, or a relative ``path``, becomes a
    ``ToolFailed`` the model sees (a turn does not end because a tool call failed)."""
    if path is not None and not os.path.isabs(path):
        raise ToolFailed(f"{what}: the path must be absolute, not {path!r}")
    try:
        return await call_trio(call)
    except (RequestError, CapabilityError) as exc:
        raise ToolFailed(f"{what}: the client answered {exc}") from exc


def client_toolset(
    session: n.Session, report: Callable[[str], n.ToolCall | None] | None = None
) -> FunctionToolset[Any] | None:
    """The function tools the attached v1 client offers (:data:`CLIENT_TOOLS`): reading and
    writing its text files (unsaved editor buffers included; a write shown as a diff) and running
    a command in its terminal (shown live in the tool call); ``None`` when it offers none (v2
    clients never do).  ``report``: the ACP tool call of a pydantic-ai ``tool_call_id`` (where
    the terminal is shown)."""
    client = session.client
    reads, writes, runs = client.offers_files(), client.offers_files(write=True), client.offers_terminal()
    if not (reads or writes or runs):
        return None
    toolset: FunctionToolset[Any] = FunctionToolset()

    if reads:

        async def acp_read_text_file(path: str, line: int | None = None, limit: int | None = None) -> str:
            """Read a text file as the user's editor has it (unsaved changes included).

            Args:
                path: absolute path of the file.
                line: first line to read (1-based); default the first.
                limit: number of lines to read at most; default all.
            """
            fs = session.client_fs()
            text: str = await _client_call("read", path, partial(fs.read_text, path, line=line, limit=limit))
            return text

        toolset.add_function(acp_read_text_file)

    if writes:

        async def acp_write_text_file(path: str, content: str) -> ToolReturn:
            """Write a text file (create it, or replace its whole content) in the user's editor.

            Args:
                path: absolute path of the file.
                content: the file's new text.
            """
            fs = session.client_fs()

            async def write() -> str | None:
                old: str | None
                try:
                    old = await fs.read_text(path) if reads else None
                except RequestError:
                    old = None  # no such file yet
                await fs.write_text(path, content)
                return old

            old = await _client_call("write", path, write)
            return ToolReturn(return_value=f"wrote {path}", metadata=n.Diff(path, old, content))

        toolset.add_function(acp_write_text_file, requires_approval=True)

    if runs:

        async def acp_run_command(
            ctx: RunContext[Any], command: str, args: list[str] | None = None, cwd: str | None = None
        ) -> ToolReturn:
            """Run a command in the user's terminal and return its output and exit status.

            Args:
                command: the program to run (a shell is not implied: use "sh" with ["-c", "..."]).
                args: its arguments.
                cwd: absolute working directory; default the session's.
            """

            async def run() -> tuple[str, list[Any]]:
                terminals = session.client_terminal()
                async with terminals.open(
                    command, args=args or (), cwd=cwd or session.cwd, output_byte_limit=OUTPUT_LIMIT
                ) as term:
                    call = report(ctx.tool_call_id) if report is not None and ctx.tool_call_id else None
                    if call is not None:
                        await call.update(status="in_progress", content=[term])
                    status = await term.wait_for_exit()
                    output = await term.output()
                signal = status.signal
                ended = f"killed by {signal}" if isinstance(signal, str) else f"exit code {status.exit_code}"
                truncated = " (output truncated to its end)" if output.truncated else ""
                return f"[{ended}{truncated}]\n{output.output}", [term, f"[{ended}]"]

            if cwd is not None and not os.path.isabs(cwd):
                raise ToolFailed(f"run: cwd must be an absolute path, not {cwd!r}")
            text, shown = await _client_call("run", None, run)
            return ToolReturn(return_value=text, metadata=shown)

        toolset.add_function(acp_run_command, requires_approval=True)
    return toolset

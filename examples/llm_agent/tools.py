"""The tools the agent offers the model, and their ACP tool kinds.

Built in, offered in every session, on protocol version 1 and 2 alike (``acp_trio.neutral``):

- ``read_file {path, line?, limit?}``: ACP kind ``read``, reads through ``session.files`` (a v1
  client's ``fs/read_text_file`` when it offers it, so its unsaved buffers count; else the file
  itself, within the session's directories);
- ``write_file {path, content}``: kind ``edit``, shows the diff, writes through ``session.files``;
- ``run_command {command, cwd?}``: kind ``execute``, runs ``/bin/sh -c COMMAND`` in the agent's
  process (``ToolCall.run``), its output shown live as the tool call's display terminal (v2) or
  text (v1, which has no agent-owned terminal);

and each tool of the session's MCP servers as ``mcp__SERVER__TOOL``: kind ``read`` when the tool says
it is read-only (``annotations.readOnlyHint``), else ``other``; runs ``tools/call`` on that server.

Every call is reported as an ACP tool call and gated by ``session/request_permission``
(``docs/protocol/v1/tool-calls.mdx``, ``docs/protocol/v2/migration.mdx`` § Tool calls).  Tool
names match ``^[a-zA-Z0-9_-]{1,64}$`` (both APIs).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from .providers import ToolSpec

__all__ = ["BUILTIN_TOOLS", "READ_FILE", "RUN_COMMAND", "WRITE_FILE", "Tool", "mcp_tool_name"]

READ_FILE = "read_file"
WRITE_FILE = "write_file"
RUN_COMMAND = "run_command"


@dataclass
class Tool:
    """A tool of one session: ``spec`` (what the model sees), ``kind`` (the ACP tool kind: ``read``,
    ``edit``, ``execute``, ``other``),
    and for an MCP tool its ``server`` name and ``mcp_name`` (the tool's own name on that server)."""

    spec: ToolSpec
    kind: str
    server: str | None = None
    mcp_name: str | None = None


BUILTIN_TOOLS: dict[str, tuple[ToolSpec, str]] = {
    READ_FILE: (
        ToolSpec(
            READ_FILE,
            "Read a text file of the user's project.  Relative paths are relative to the project directory.",
            {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "the file, relative to the project or absolute"},
                    "line": {"type": "integer", "minimum": 1, "description": "first line to read (1-based)"},
                    "limit": {"type": "integer", "minimum": 1, "description": "how many lines to read at most"},
                },
                "required": ["path"],
            },
        ),
        "read",
    ),
    WRITE_FILE: (
        ToolSpec(
            WRITE_FILE,
            "Create or overwrite a text file of the user's project with the complete new content.  Relative"
            " paths are relative to the project directory.  The user sees the change and may refuse it.",
            {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "the file, relative to the project or absolute"},
                    "content": {"type": "string", "description": "the whole new content of the file"},
                },
                "required": ["path", "content"],
            },
        ),
        "edit",
    ),
    RUN_COMMAND: (
        ToolSpec(
            RUN_COMMAND,
            "Run a shell command (/bin/sh -c) in the user's project directory and return its exit status and"
            " output.  The user sees it run and may refuse it.",
            {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "the command line"},
                    "cwd": {"type": "string", "description": "working directory, relative to the project"},
                },
                "required": ["command"],
            },
        ),
        "execute",
    ),
}
"""name -> (spec, ACP tool kind)."""

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]+")


def mcp_tool_name(server: str, tool: str) -> str:
    """The name the model sees for MCP tool ``tool`` of server ``server``: ``mcp__SERVER__TOOL``, other
    characters as ``_``; longer than 64 characters, cut and ended with 8 hex digits of its SHA-256."""
    name = f"mcp__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"
    if len(name) <= 64:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[:55]}_{digest}"


def mcp_tool(server: str, tool: Any) -> Tool:
    """The :class:`Tool` for an ``mcp.types.Tool`` of ``server``."""
    annotations = getattr(tool, "annotations", None)
    read_only = bool(getattr(annotations, "read_only_hint", None))
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {"type": "object"}
    description = tool.description or getattr(tool, "title", None) or tool.name
    spec = ToolSpec(mcp_tool_name(server, tool.name), f"[MCP server {server}] {description}", dict(schema))
    return Tool(spec, "read" if read_only else "other", server=server, mcp_name=tool.name)

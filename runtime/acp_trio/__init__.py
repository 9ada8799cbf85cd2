"""acp-trio: a trio runtime and a cattrs converter for the Agent Client Protocol.

Importing this package is cheap: trio, the converter and the runtime load on first use of a name
that needs them (``acp_trio.converter``, ``acp_trio.spawn_agent``, ...).

- Typed connections: :class:`AgentSideConnection`, :class:`ClientSideConnection`.
- Transports (:mod:`acp_trio.transports`): :func:`serve_agent_stdio` / :func:`run_agent_stdio`
  (an agent on its own stdio), :func:`spawn_agent` (a client spawning an agent),
  :func:`open_memory_pair` (in memory).
- JSON-RPC: :class:`Connection`, :class:`Route`, :class:`RequestError` and the error codes.
- Sessions: ``conn.sessions`` (:class:`SessionRegistry` of :class:`SessionInfo`) on both sides.
- Errors: :class:`ConnectionClosed`, :class:`RequestTimeout`, :class:`CapabilityError`,
  :class:`ProtocolVersionError`, :class:`DecodeError`.
- Wire types: :data:`converter`, :func:`dumps`, :func:`loads`, :data:`UNSET`.

Batteries (modules, loaded on use):

- client side: :class:`StandardClient` (all of them in one client), :mod:`acp_trio.fs`
  (:class:`SessionFileSystem`), :mod:`acp_trio.terminals` (:class:`TerminalManager`),
  :mod:`acp_trio.permissions` (:class:`PermissionBroker` and the policies :func:`ask`,
  :func:`allow_kinds`, :func:`allow_all`, :func:`deny_all`), :mod:`acp_trio.elicitation`
  (``ElicitationBroker``: forms and URLs, checked with ``jsonschema``), :mod:`acp_trio.session_state`
  (:class:`SessionState`, :class:`SessionStates`); all of them for protocol versions 1 and 2;
  :mod:`acp_trio.mcp_over_acp` (MCP servers served to the agent over ``mcp/message``; unstable
  variants, extra ``acp-trio[mcp]``);
- agent side: :mod:`acp_trio.builders` (content blocks, tool calls, plans, permission options,
  session updates), :mod:`acp_trio.agent_terminal` (:func:`open_terminal`), :mod:`acp_trio.mcp`
  (a session's MCP servers, the client's ``acp`` ones too; extra ``acp-trio[mcp]``),
  :mod:`acp_trio.session_store` (sessions kept
  in SQLite behind ``session/load``, list, resume, close and delete), :mod:`acp_trio.host`
  (sessions owned by a host instead of a connection: turns that go on when the client leaves,
  reattach with replay, several clients on one session);
- both: :mod:`acp_trio.otel` (trace context in ``_meta``; extra ``acp-trio[otel]``),
  :mod:`acp_trio.aio` (asyncio libraries awaited from handlers, and acp-trio used from asyncio
  programs; extra ``acp-trio[asyncio]``).

Integrations: :mod:`acp_trio.integrations.pydantic_ai` (any ``pydantic_ai.Agent`` served over ACP,
v1 and v2; extra ``acp-trio[pydantic-ai]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._spec import UNSET, MethodSpec, UnsetType

if TYPE_CHECKING:
    from ._capabilities import CapabilityError
    from ._connection import Connection, Instrumentation, Route, Tap
    from ._converter import AcpConverter, DecodeError, dumps, loads, value_or_default
    from ._core import (
        AUTH_REQUIRED,
        INTERNAL_ERROR,
        INVALID_PARAMS,
        INVALID_REQUEST,
        METHOD_NOT_FOUND,
        PARSE_ERROR,
        REQUEST_CANCELLED,
        RESOURCE_NOT_FOUND,
        RequestError,
    )
    from ._errors import ConnectionClosed, RequestTimeout
    from ._roles import AgentSideConnection, ClientSideConnection, ProtocolVersionError
    from ._sessions import SessionInfo, SessionRegistry
    from .agent_terminal import TerminalHandle, open_terminal
    from .fs import SessionFileSystem
    from .permissions import PermissionBroker, allow_all, allow_kinds, ask, deny_all
    from .session_state import SessionState, SessionStates
    from .standard_client import StandardClient
    from .terminals import TerminalManager
    from .transports.memory import open_memory_pair
    from .transports.stdio import run_agent_stdio, serve_agent_stdio, spawn_agent, terminate_process_group

    converter: AcpConverter
    """The shared converter (:class:`AcpConverter`): ``converter.structure(data, PromptRequest)`` decodes
    wire JSON into the generated classes, ``converter.unstructure(obj)`` encodes them back."""

__all__ = [
    "AUTH_REQUIRED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
    "UNSET",
    "AcpConverter",
    "AgentSideConnection",
    "CapabilityError",
    "ClientSideConnection",
    "Connection",
    "ConnectionClosed",
    "DecodeError",
    "Instrumentation",
    "MethodSpec",
    "PermissionBroker",
    "ProtocolVersionError",
    "RequestError",
    "RequestTimeout",
    "Route",
    "SessionFileSystem",
    "SessionInfo",
    "SessionRegistry",
    "SessionState",
    "SessionStates",
    "StandardClient",
    "Tap",
    "TerminalHandle",
    "TerminalManager",
    "UnsetType",
    "allow_all",
    "allow_kinds",
    "ask",
    "converter",
    "deny_all",
    "dumps",
    "loads",
    "open_memory_pair",
    "open_terminal",
    "run_agent_stdio",
    "serve_agent_stdio",
    "spawn_agent",
    "terminate_process_group",
    "value_or_default",
]

_LAZY = {
    "_converter": ("AcpConverter", "DecodeError", "converter", "dumps", "loads", "value_or_default"),
    "_core": (
        "AUTH_REQUIRED",
        "INTERNAL_ERROR",
        "INVALID_PARAMS",
        "INVALID_REQUEST",
        "METHOD_NOT_FOUND",
        "PARSE_ERROR",
        "REQUEST_CANCELLED",
        "RESOURCE_NOT_FOUND",
        "RequestError",
    ),
    "_capabilities": ("CapabilityError",),
    "_connection": ("Connection", "Instrumentation", "Route", "Tap"),
    "_errors": ("ConnectionClosed", "RequestTimeout"),
    "_sessions": ("SessionInfo", "SessionRegistry"),
    "agent_terminal": ("TerminalHandle", "open_terminal"),
    "fs": ("SessionFileSystem",),
    "permissions": ("PermissionBroker", "allow_all", "allow_kinds", "ask", "deny_all"),
    "session_state": ("SessionState", "SessionStates"),
    "standard_client": ("StandardClient",),
    "terminals": ("TerminalManager",),
    "_roles": ("AgentSideConnection", "ClientSideConnection", "ProtocolVersionError"),
    "transports.stdio": ("run_agent_stdio", "serve_agent_stdio", "spawn_agent", "terminate_process_group"),
    "transports.memory": ("open_memory_pair",),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is not None:
        import importlib

        value = getattr(importlib.import_module(f"acp_trio.{module}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'acp_trio' has no attribute {name!r}")

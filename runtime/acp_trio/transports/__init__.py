"""Transports: how a connection's byte streams reach the peer.

Contract: a transport only builds a pair of byte streams (newline-delimited JSON-RPC) and hands
them to :class:`~acp_trio.AgentSideConnection` / :class:`~acp_trio.ClientSideConnection`, so every
rule the connection enforces (ordering, cancellation, capabilities, negotiation, limits) holds over
every transport without a second implementation (tests/test_transports_suite.py runs one suite
over each).

- :mod:`acp_trio.transports.stdio`: :func:`~acp_trio.serve_agent_stdio` /
  :func:`~acp_trio.run_agent_stdio` (an agent on its own stdin/stdout), :func:`~acp_trio.spawn_agent`
  (a client spawning an agent process) and :func:`open_agent_process` (the process alone);
- :mod:`acp_trio.transports.memory`: :func:`~acp_trio.open_memory_pair` (both ends in one process);
- remote, the ACP RFD "Streamable HTTP & WebSocket Transport" (extra ``acp-trio[remote]``):
  :mod:`acp_trio.transports.asgi` (:class:`AcpApp`, the server, and :func:`serve` on hypercorn),
  :mod:`acp_trio.transports.websocket` (:func:`connect_websocket`),
  :mod:`acp_trio.transports.http` (:func:`connect_http`), :mod:`acp_trio.transports.cookies`
  (:class:`CookieStore`, affinity across reconnects).

The stdio and memory names are exported from :mod:`acp_trio` itself.  The remote ones are
importable from here (``from acp_trio.transports import AcpApp, connect_websocket``); each loads
its libraries on first use, so importing this package needs none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .asgi import AcpApp, serve
    from .cookies import CookieStore
    from .http import HttpTransportClosed, connect_http
    from .stdio import AgentProcess, open_agent_process
    from .websocket import WebSocketConnectError, connect_websocket

_LAZY = {
    "AcpApp": "asgi",
    "serve": "asgi",
    "CookieStore": "cookies",
    "HttpTransportClosed": "http",
    "connect_http": "http",
    "AgentProcess": "stdio",
    "open_agent_process": "stdio",
    "WebSocketConnectError": "websocket",
    "connect_websocket": "websocket",
}

__all__ = [
    "AcpApp",
    "AgentProcess",
    "CookieStore",
    "HttpTransportClosed",
    "WebSocketConnectError",
    "connect_http",
    "connect_websocket",
    "open_agent_process",
    "serve",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'acp_trio.transports' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"acp_trio.transports.{module}"), name)
    globals()[name] = value
    return value

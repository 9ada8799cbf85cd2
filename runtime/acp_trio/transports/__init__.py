"""Transports: how a connection's byte streams reach the peer.

Contract: a transport only builds a pair of byte streams (newline-delimited JSON-RPC) and hands
them to :class:`~acp_trio.AgentSideConnection` / :class:`~acp_trio.ClientSideConnection`, so every
rule the connection enforces (ordering, cancellation, capabilities, negotiation, limits) holds over
every transport without a second implementation.

- :mod:`acp_trio.transports.stdio`: :func:`~acp_trio.serve_agent_stdio` /
  :func:`~acp_trio.run_agent_stdio` (an agent on its own stdin/stdout) and
  :func:`~acp_trio.spawn_agent` (a client spawning an agent process);
- :mod:`acp_trio.transports.memory`: :func:`~acp_trio.open_memory_pair` (both ends in one process);
- :mod:`acp_trio.transports.http`: :func:`~acp_trio.transports.http.connect_http` (a client reaching
  a remote agent over the RFD's Streamable HTTP; the ``remote`` extra, imported from there).

The public names of stdio and memory are exported from :mod:`acp_trio` itself; import them from there.
"""

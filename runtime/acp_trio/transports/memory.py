"""The in-memory transport: an agent and a client joined by trio's memory streams, in one process.

Contract: builds a pair of in-memory byte streams and hands them to :class:`AgentSideConnection`
and :class:`ClientSideConnection`; everything the connections enforce holds as over any other
transport.  No processes, no threads, no sockets, so it runs under trio's autojump clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from .._roles import AgentSideConnection, ClientSideConnection


@asynccontextmanager
async def open_memory_pair(
    agent: Any, client: Any, **options: Any
) -> AsyncIterator[tuple[AgentSideConnection, ClientSideConnection]]:
    """An agent and a client connected in memory (``async with ... as (agent_conn, client_conn)``).

    ``agent``/``client``: objects or factories as for the two connection classes; ``options``
    (``variant``, ``tap``, ``eof_grace``, ...) apply to both.  For tests and in-process use: no
    processes, no threads; works under trio's autojump clock.  An exception raised in the body
    comes out as itself.
    """
    from trio.testing import memory_stream_pair

    agent_stream, client_stream = memory_stream_pair()
    agent_conn = AgentSideConnection(agent, agent_stream, agent_stream, **options)
    client_conn = ClientSideConnection(client, client_stream, client_stream, **options)
    async with agent_conn, client_conn:  # each lets the body's exception out as itself
        yield agent_conn, client_conn


__all__ = ["open_memory_pair"]

"""The bridge: any stdio ACP agent behind a remote transport, and a remote agent behind stdio.

Contract: the bridge moves ACP messages between two transports *verbatim*: it never decodes and
re-encodes them, so unknown fields, unknown methods and ``_meta`` survive byte for byte.  It only
frames: one message per line on stdio (a raw CR or LF inside a message can only be JSON
whitespace, since JSON strings escape them, so it becomes a space).  It knows nothing of ACP's
methods.

- :func:`pump_agent_process`: one ACP connection's byte streams (from a server: see
  ``python -m acp_trio.bridge --listen``) served by a newly spawned stdio agent process, started
  and stopped with the same process-group ladder as :func:`acp_trio.spawn_agent`.  The remote
  side's end of input closes the agent's stdin (its shutdown signal); the agent's end of output
  closes the remote side.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

import trio

from ._nursery import owned_nursery
from .transports.stdio import open_agent_process

log = logging.getLogger("acp_trio.bridge")

_READ = 1 << 16


async def _copy(source: trio.abc.ReceiveStream, sink: trio.abc.SendStream) -> None:
    """Copy bytes until ``source`` ends (or either side breaks), then close ``sink``."""
    try:
        while data := await source.receive_some(_READ):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        log.debug("bridge: copy stopped: %r", exc)
    finally:
        await trio.aclose_forcefully(sink)


async def pump_agent_process(
    command: str | os.PathLike[str],
    args: Sequence[str],
    from_remote: trio.abc.ReceiveStream,
    to_remote: trio.abc.SendStream,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    shutdown_timeout: float = 2.0,
    stderr_logger: logging.Logger | None = None,
) -> None:
    """Serve one ACP connection with a new agent process: ``command``/``args`` (no shell).

    ``from_remote``: the client's messages, newline-delimited (bytes); they go to the agent's
    stdin unchanged.  ``to_remote``: where the agent's stdout goes, unchanged.  Returns when both
    directions ended; the process is then shut down (stdin closed, wait, SIGTERM, wait, SIGKILL to
    its group, each step ``shutdown_timeout`` seconds).  Raises ``OSError`` naming the command when
    it cannot be started.
    """
    async with open_agent_process(
        command, args, env=env, cwd=cwd, shutdown_timeout=shutdown_timeout, stderr_logger=stderr_logger
    ) as agent:
        log.info("bridge: agent pid %d serves a connection", agent.pid)
        async with owned_nursery() as nursery:

            async def inbound() -> None:
                await _copy(from_remote, agent.stdin)  # the remote ended: the agent sees end of input
                await trio.sleep(shutdown_timeout)  # let it answer what it can, then the ladder
                nursery.cancel_scope.cancel()

            async def outbound() -> None:
                await _copy(agent.stdout, to_remote)  # the agent's output ended: the remote side is closed
                nursery.cancel_scope.cancel()

            nursery.start_soon(inbound)
            nursery.start_soon(outbound)
        log.info("bridge: agent pid %d: the connection ended", agent.pid)


__all__ = ["pump_agent_process"]

"""Stop a server process on SIGINT or SIGTERM the way it stops at the end of its block.

``python -m acp_trio.bridge --listen`` and ``python -m acp_trio.demo --serve`` run until a signal.
Python's defaults do not suit a server: SIGINT raises ``KeyboardInterrupt`` wherever the program
is (a traceback of exception groups, exit status 1), and SIGTERM (``kill``, systemd's stop, a
container runtime's stop) ends the process at once, so the agent processes it started never go
through their shutdown ladder.  :func:`run_until_signalled` turns either signal into a
cancellation of the server's nursery: the server closes its connections and stops its agents
(stdin closed, then SIGTERM, then SIGKILL to their groups), then the process exits 0.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable

import trio


def run_until_signalled(serve: Callable[[], Awaitable[object]], *, name: str) -> int | None:
    """``trio.run(serve)``, stopped at the first SIGINT or SIGTERM: ``serve`` is cancelled, so
    its ``finally`` blocks and shielded cleanups run (a second signal while they run is ignored:
    SIGKILL still works).  Returns the signal's number (logged by ``acp_trio.NAME`` as ``NAME:
    stopping on SIGTERM``), or None when ``serve`` returned by itself.  Call it from the main thread
    (signal handlers)."""
    log = logging.getLogger(f"acp_trio.{name}")
    received: list[int] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

                async def watch() -> None:
                    async for signum in signals:
                        if not received:
                            received.append(signum)
                            log.info("%s: stopping on %s", name, signal.Signals(signum).name)
                            nursery.cancel_scope.cancel()

                nursery.start_soon(watch)
                await serve()
                nursery.cancel_scope.cancel()

    trio.run(main)
    return received[0] if received else None

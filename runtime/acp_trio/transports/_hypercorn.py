"""hypercorn's trio worker, with writes coalesced per TCP connection (used by :func:`asgi.serve`).

hypercorn writes every piece of output (each WebSocket frame, each HTTP body chunk) with its own
``send_all`` under a lock: two scheduler round trips and one ``send()`` system call per frame,
about 30 µs here, which capped a stream of small ACP messages over a WebSocket at about 32,000
frames a second whatever the application did (measured: a bare ASGI app sending precomputed
frames).  :class:`CoalescingTCPServer` is hypercorn's ``TCPServer`` with one change: output is
appended to a per-connection buffer without waiting, and one writer task sends everything
buffered with one ``send_all`` when the socket takes it (the same frames, in the same order; the
same bytes on the wire).  A sender waits only when more than ``high_water`` bytes are buffered, and
that wait, unlike hypercorn's shielded write, can be cancelled: so an application can give up on a
client that stopped reading (the ACP server's output stall timeout).

:func:`serve_hypercorn` runs hypercorn's HTTP/1.1, HTTP/2 and WebSocket protocol stack and its
ASGI lifespan with that server class; it replaces ``hypercorn.trio.serve`` for TCP (plain or TLS)
listeners, which is all :func:`acp_trio.transports.asgi.serve` binds.  It relies on hypercorn's
``trio.tcp_server.TCPServer`` (its ``protocol_send``, ``_close`` and ``stream``) and ``Lifespan``,
``WorkerContext``: the ``remote`` extra pins hypercorn below 0.19, and the tests check them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.utils import repr_socket_addr, wrap_app

log = logging.getLogger("acp_trio.serve")

HIGH_WATER = 64 * 1024
"""Bytes buffered for one TCP connection at which a sender waits for the socket to take them."""
SLICE = 64 * 1024
"""The writer hands the socket at most this many bytes at a time (its progress is seen per slice)."""
FLUSH_TIMEOUT = 5.0
"""Seconds a closing connection gives its buffered output to reach the socket before it is dropped."""


IDLE_RELEASE_DELAY = 1.0
"""Seconds without a TCP connection after which :func:`serve_hypercorn` gives freed memory back."""


_trim: Any = None


def _malloc_trim() -> Any:
    global _trim
    if _trim is None:
        _trim = False
        name = ctypes.util.find_library("c")
        if name is not None:
            try:
                _trim = ctypes.CDLL(name).malloc_trim
            except (OSError, AttributeError):  # not glibc
                pass
    return _trim or None


class _Idle:
    """Counts open TCP connections; once none has been open for ``delay`` seconds, releases memory once.

    Releasing: collect garbage cycles, then ``malloc_trim(0)`` (glibc's; elsewhere only the
    collection) so the C allocator returns its free pages to the OS.  Otherwise a server that has
    served many connections at once keeps the heap of its peak, freed but fragmented: measured,
    100 WebSocket connections streaming at once left the process at 2.4x its starting RSS.
    """

    def __init__(self, nursery: trio.Nursery, delay: float | None) -> None:
        self.nursery = nursery
        self.delay = delay
        self.open = 0
        self.generation = 0

    def opened(self) -> None:
        self.open += 1
        self.generation += 1

    def closed(self) -> None:
        self.open -= 1
        if self.open == 0 and self.delay is not None:
            self.nursery.start_soon(self._release, self.generation)

    async def _release(self, generation: int) -> None:
        await trio.sleep(self.delay or 0)
        if self.open or generation != self.generation:
            return  # a connection came meanwhile: its own close will try again
        gc.collect()
        trim = _malloc_trim()
        if trim is not None:
            await trio.to_thread.run_sync(trim, 0)
        log.debug("no connection for %s s: memory released", self.delay)


class CoalescingTCPServer(TCPServer):
    """hypercorn's ``TCPServer`` whose output goes through one buffer and one writer task per connection.

    ``write_timeout`` (class attribute, seconds, ``None`` for none): a sender that has waited this
    long for buffer room while the socket took nothing aborts the TCP connection (the application
    then sees a disconnect).  Set by :func:`serve_hypercorn`.
    """

    high_water = HIGH_WATER
    write_timeout: float | None = None
    idle: _Idle | None = None

    async def run(self) -> None:
        if self.idle is not None:
            self.idle.opened()
        try:
            await self._run_coalescing()
        finally:
            if self.idle is not None:
                self.idle.closed()

    async def _run_coalescing(self) -> None:
        self._pending = bytearray()
        self._ready = trio.Event()
        self._room = trio.Event()
        self._room.set()
        self._flushed = trio.Event()
        self._flushed.set()
        self._broken = False
        self._writer_done = False
        self._progress_at = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write_buffered)
            try:
                await super().run()
            finally:
                nursery.cancel_scope.cancel()

    async def _write_buffered(self) -> None:
        try:
            await self._write_loop()
        finally:  # cancelled (the server is going away): later output is written directly
            self._writer_done = True
            self._flushed.set()

    async def _write_loop(self) -> None:
        pending = self._pending
        while True:
            await self._ready.wait()
            self._ready = trio.Event()
            while pending:
                chunk = bytes(pending[:SLICE])
                del pending[:SLICE]
                if len(pending) < self.high_water:
                    self._room.set()
                try:
                    await self.stream.send_all(chunk)
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                    await self._lost()
                    return
                self._progress_at = trio.current_time()
            self._flushed.set()

    async def _lost(self) -> None:
        self._broken = True
        self._pending.clear()
        self._room.set()
        self._flushed.set()
        await self.protocol.handle(Closed())

    async def protocol_send(self, event: Event) -> None:
        if not isinstance(event, RawData):
            await super().protocol_send(event)
            return
        while len(self._pending) >= self.high_water and not self._broken:
            if self._room.is_set():
                self._room = trio.Event()
            if self.write_timeout is None:
                await self._room.wait()
                continue
            with trio.move_on_at(self._progress_at + self.write_timeout):
                await self._room.wait()
            if len(self._pending) >= self.high_water and trio.current_time() >= self._progress_at + self.write_timeout:
                # the peer has taken nothing for write_timeout seconds: drop it
                with trio.CancelScope(shield=True):
                    await self.stream.aclose()
                    await self._lost()
        if self._broken:
            await trio.lowlevel.checkpoint()
            return
        if self._writer_done:  # shutting down (a close frame): hypercorn's own shielded write
            data = bytes(self._pending) + event.data
            self._pending.clear()
            await super().protocol_send(RawData(data=data))
            return
        if not self._pending:
            self._progress_at = trio.current_time()  # the wait for the socket starts now
        self._pending += event.data
        if self._flushed.is_set():
            self._flushed = trio.Event()
        self._ready.set()

    async def _close(self) -> None:
        if not self._broken and not self._writer_done:
            with trio.move_on_after(FLUSH_TIMEOUT) as scope:
                scope.shield = True
                await self._flushed.wait()
        await super()._close()


async def serve_hypercorn(
    app: Any,
    config: Config,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    write_timeout: float | None = None,
    release_memory_when_idle: float | None = IDLE_RELEASE_DELAY,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``config``'s TCP binds with :class:`CoalescingTCPServer` until cancelled or shut down.

    Runs the ASGI lifespan first (startup must complete), reports the bound URLs through
    ``task_status`` (``["http://127.0.0.1:8765"]``, ``https://`` with TLS), and when
    ``shutdown_trigger`` returns, stops accepting and gives open connections
    ``config.graceful_timeout`` seconds before the lifespan shutdown.  ``write_timeout``: seconds
    a connection's output may wait on a peer that takes nothing before the TCP connection is
    dropped (``None``: wait as long as the peer keeps the connection open).
    ``release_memory_when_idle``: seconds with no TCP connection open after which freed memory
    is given back to the OS (``gc.collect()`` and glibc's ``malloc_trim``); ``None`` never.
    """
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")
    state: dict[str, Any] = {}
    lifespan = Lifespan(wrapped, config, state)
    context = WorkerContext(None)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as connections:
            sockets = config.create_sockets()
            ssl_context = config.create_ssl_context()
            listeners: list[trio.abc.Listener[Any]] = []
            urls = []
            for secure, group in ((True, sockets.secure_sockets), (False, sockets.insecure_sockets)):
                for sock in group:
                    sock.listen(config.backlog)
                    listener: trio.abc.Listener[Any] = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
                    if secure:
                        assert ssl_context is not None  # hypercorn makes secure sockets only with a certificate
                        listener = trio.SSLListener(listener, ssl_context, https_compatible=True)
                    listeners.append(listener)
                    urls.append(
                        f"{'https' if secure else 'http'}://{repr_socket_addr(sock.family, sock.getsockname())}"
                    )
            idle = _Idle(lifespan_nursery, release_memory_when_idle)
            attributes = {"write_timeout": write_timeout, "idle": idle}
            server_class = type("CoalescingTCPServer", (CoalescingTCPServer,), attributes)
            handler = functools.partial(server_class, wrapped, config, context, state.copy())
            try:
                async with trio.open_nursery() as accepting:
                    accepting.start_soon(
                        functools.partial(trio.serve_listeners, handler, listeners, handler_nursery=connections)
                    )
                    task_status.started(urls)
                    if shutdown_trigger is None:
                        await trio.sleep_forever()
                    await shutdown_trigger()
                    accepting.cancel_scope.cancel()
            finally:
                await context.terminated.set()
                connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()

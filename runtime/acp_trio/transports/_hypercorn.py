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

Fewer scheduler passes per message, where the socket is a plain TCP socket (not TLS; not on
Windows): the reader reads with one yield a read (after a read that drained the socket it waits
until the socket is readable, then reads, instead of trio's checkpoint, a read that fails and the
wait), and an application may send eagerly: between :meth:`CoalescingTCPServer.hold` and
:meth:`~CoalescingTCPServer.release` its frames are buffered without waking the writer, and
``release`` hands the buffer to the socket at once, without a task switch, when the writer is
idle (the same bytes in the same order; what the socket does not take, or a send error, goes to
the writer as before).  :func:`current_tcp_server` gives an ASGI application task the
connection's server (:mod:`acp_trio.transports.asgi` uses it for WebSocket messages).  There
too, HTTP/1.1 keep-alive costs no task: hypercorn's idle timer (a task started at every request's
end, cancelled at the next request's start) is a deadline on the reader's wait for the socket
(:class:`_KeepAliveDeadline`; relying on ``TCPServer``'s ``idle_task`` and ``_initiate_server_close``).

:func:`serve_hypercorn` runs hypercorn's HTTP/1.1, HTTP/2 and WebSocket protocol stack and its
ASGI lifespan with that server class; it replaces ``hypercorn.trio.serve`` for TCP (plain or TLS)
listeners, which is all :func:`acp_trio.transports.asgi.serve` binds.  It relies on hypercorn's
``trio.tcp_server.TCPServer`` (its ``protocol_send``, ``_close`` and ``stream``) and ``Lifespan``,
``WorkerContext``: the ``remote`` extra pins hypercorn below 0.19, and the tests check them.

One fix to hypercorn's WebSocket handling, process-wide once :func:`serve_hypercorn` runs
(:class:`ClosingWSStream`, relying on ``protocol.ws_stream.WSStream``'s ``send``, ``connection``
and ``_handle_events`` and on the ``h11`` and ``h2`` protocol modules' ``WSStream`` name): a
frame that breaks RFC 6455 (a text message that is not UTF-8) is answered with the close frame
of wsproto's verdict (``1007``) before the TCP connection is closed, where hypercorn 0.18 closed
it without one.  And one change to how hypercorn hands a request to the application (process-wide
too, :class:`EagerTaskGroup`, relying on ``trio.task_group``'s ``TaskGroup`` (its ``spawn_app``
and ``_nursery``) and ``_handle`` and on the ``trio.tcp_server`` module's ``TaskGroup`` name): the
application receives through an :class:`AppEvents` queue, where a request event is queued without
a yield when the queue has room, so a ``POST`` read whole in one read reaches the application
whole, and which can watch for the client's disconnect without a task reading it.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import ctypes.util
import errno
import functools
import gc
import logging
import math
import os
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ClassVar

import trio
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData
from hypercorn.protocol import h2 as hypercorn_h2
from hypercorn.protocol import h11 as hypercorn_h11
from hypercorn.protocol.events import Data, StreamClosed
from hypercorn.protocol.ws_stream import WSStream
from hypercorn.trio import tcp_server as hypercorn_tcp_server
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.task_group import _handle as hypercorn_handle
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.utils import repr_socket_addr, wrap_app
from wsproto.connection import ConnectionState
from wsproto.events import CloseConnection

log = logging.getLogger("acp_trio.serve")

HIGH_WATER = 64 * 1024
"""Bytes buffered for one TCP connection at which a sender waits for the socket to take them."""
SLICE = 64 * 1024
"""The writer hands the socket at most this many bytes at a time (its progress is seen per slice)."""
FLUSH_TIMEOUT = 5.0
"""Seconds a closing connection gives its buffered output to reach the socket before it is dropped."""


_ALREADY_SET = trio.Event()
"""An event that is set (and never waited on for long: ``wait`` returns at once), shared by every
connection whose buffer has room and nothing to flush; one that has to wait makes a new event."""
_ALREADY_SET.set()

_current_server: contextvars.ContextVar[CoalescingTCPServer | None] = contextvars.ContextVar(
    "acp_trio_tcp_server", default=None
)


def current_tcp_server() -> CoalescingTCPServer | None:
    """The :class:`CoalescingTCPServer` of the TCP connection the calling task serves, else ``None``.

    Set for the connection's task, so the ASGI application tasks hypercorn starts for it (which
    inherit its context) see it; ``None`` under any other server.
    """
    return _current_server.get()


IDLE_RELEASE_DELAY = 1.0
"""Seconds without a TCP connection after which :func:`serve_hypercorn` gives freed memory back."""


SERVER_GC_THRESHOLD2 = 100
"""CPython's third garbage collector threshold (``gc.set_threshold``'s ``threshold2``, default 10)
while :func:`serve_hypercorn` runs: a full collection at most once per 100 collections of the
middle generation (about 700,000 net allocations of container objects) instead of once per 10.

Why: a full collection walks every live object, and a server that holds connections holds many
(about 360 per idle ACP WebSocket connection, hypercorn's included).  With the default, CPython
collected the whole heap six times while 2,000 connections were opened, each pass longer than the
one before (about 140 ms at the end: every connection stalled meanwhile); that was 45% of the
server's CPU per connection opened (0.42 of 0.92 ms; 0.51 ms with 100, no full pass in that run).
The garbage cycles of closed connections wait longer for a full collection (at most about the
threshold's 700,000 allocations); the idle release (:class:`_Idle`) still collects whenever no
connection is open.  CPython's own rule stays: a full collection also waits until the objects
that survived younger collections are a quarter of those a full one last found."""

_gc_servers = 0
_gc_before: tuple[int, int, int] | None = None
_gc_set: tuple[int, int, int] | None = None


@contextlib.contextmanager
def _server_gc(threshold2: int | None) -> Iterator[None]:
    """Raise the garbage collector's third threshold to ``threshold2`` while the ``with`` block runs
    (never lower it; ``None``: leave it).  Process-wide, so counted: the first of several servers in
    one process raises it, the last one out restores what was there before, unless something else
    set other thresholds meanwhile (then those stay)."""
    global _gc_servers, _gc_before, _gc_set
    if threshold2 is None:
        yield
        return
    if _gc_servers == 0:
        _gc_before = gc.get_threshold()
        first, second, third = _gc_before
        _gc_set = (first, second, max(third, threshold2))
        gc.set_threshold(*_gc_set)
    _gc_servers += 1
    try:
        yield
    finally:
        _gc_servers -= 1
        if _gc_servers == 0 and _gc_before is not None and gc.get_threshold() == _gc_set:
            gc.set_threshold(*_gc_before)


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


class _KeepAliveDeadline:
    """hypercorn's keep-alive idle timer (``TCPServer.idle_task``) as a deadline on the reader's wait.

    hypercorn starts a task (``nursery.start``, behind a lock) each time a connection goes idle, at
    its start and at the end of every request, and cancels it when a request comes: on a keep-alive
    connection that is a task spawned and cancelled per request.  Here going idle only sets the
    deadline of the wait for the socket (:meth:`CoalescingTCPServer._wait_readable`): the same
    ``keep_alive_timeout`` counted from the same moment, closing the connection the same way
    (at once once the server shuts down), with no task.  Used where the server reads the socket
    itself (a plain TCP socket); elsewhere hypercorn's task stays.
    """

    __slots__ = ("server",)

    def __init__(self, server: CoalescingTCPServer) -> None:
        self.server = server

    async def restart(self, task_group: Any, action: Any) -> None:
        self.server._idle_from_now()

    async def stop(self) -> None:
        self.server._not_idle()


class _Lend(Exception):
    """hypercorn's reader stops waiting for the socket: :meth:`CoalescingTCPServer.lend_reads` asked for its reads."""


class _KeepAliveOver(Exception):
    """hypercorn's reader stops waiting for the socket: the connection was idle for ``keep_alive_timeout``."""


class CoalescingTCPServer(TCPServer):
    """hypercorn's ``TCPServer`` whose output goes through one buffer and one writer task per connection.

    ``write_timeout`` (class attribute, seconds, ``None`` for none): a sender that has waited this
    long for buffer room while the socket took nothing aborts the TCP connection (the application
    then sees a disconnect).  Set by :func:`serve_hypercorn`, as is ``keep_alive_waiting``: the
    connections idle now (keep-alive, waiting for a request), closed at once when the server shuts down.
    """

    high_water = HIGH_WATER
    write_timeout: float | None = None
    idle: _Idle | None = None
    keep_alive_waiting: ClassVar[set[CoalescingTCPServer]] = set()
    _writer_nursery: trio.Nursery | None = None  # _run_coalescing's: where the writer task starts

    async def run(self) -> None:
        if self.idle is not None:
            self.idle.opened()
        _current_server.set(self)  # this task's context: the application tasks started for it inherit it
        try:
            await self._run_coalescing()
        finally:
            self.keep_alive_waiting.discard(self)
            if self.idle is not None:
                self.idle.closed()

    async def _run_coalescing(self) -> None:
        self._start_output()
        async with trio.open_nursery() as nursery:
            self._writer_nursery = nursery  # where the writer task starts, when output first waits for it
            try:
                await super().run()
            finally:
                nursery.cancel_scope.cancel()
                if not self._writer_started:  # (a writer that ran says so itself, in its finally)
                    self._writer_done = True
                    self._flushed.set()

    def _start_output(self) -> None:
        """The output's state: an empty buffer and no writer task yet.

        The writer task (``_write_buffered``) starts the first time output has to wait for the
        socket (:meth:`_wake_writer`); until then every write goes to the socket at once
        (:meth:`release`), and a connection whose output never had to wait (most idle ones) holds
        no such task: a task, its frames and its scope are a good part of an idle connection's
        memory (about 3 KB)."""
        self._pending = bytearray()
        self._writer_nursery = None
        self._writer_started = False
        self._ready = _ALREADY_SET  # the writer's own event from its first wait on (none before it starts)
        # room in the buffer, and nothing left to flush: both true, until a sender replaces them with
        # new events to wait on; one shared event set for good meanwhile (an idle connection holds none)
        self._room = self._flushed = _ALREADY_SET
        self._broken = False
        self._writer_done = False
        self._sending = False  # the writer is inside send_all (a chunk is on its way)
        self._holding = False  # between hold() and release(): frames wait for release, not the writer
        self._progress_at = trio.current_time()
        # a plain TCP socket is read and written directly (not TLS, whose stream does its own I/O)
        self._socket: Any = (
            self.stream.socket if isinstance(self.stream, trio.SocketStream) and sys.platform != "win32" else None
        )
        # reads lent to an application task (lend_reads): asked for; lent (hypercorn's reader waits
        # on _returned); the scope of the reader's wait for the socket (cancelled to lend at once)
        self._lend_wanted = False
        self._lent = False
        self._lent_event = trio.Event()
        self._returned = trio.Event()
        self._wait_scope: trio.CancelScope | None = None
        self._inline_full = False  # the last inline read filled the buffer
        # keep-alive: when the idle connection is closed (inf: not idle); a deadline on the reader's
        # wait instead of hypercorn's task per idle period (_KeepAliveDeadline)
        self._idle_at = math.inf
        if self._socket is not None:
            self.idle_task = _KeepAliveDeadline(self)

    def _idle_from_now(self) -> None:
        """The connection went idle: closed after ``keep_alive_timeout`` seconds with no request
        (at once when the server is shutting down, as hypercorn's idle task)."""
        if self.context.terminated.is_set():
            self._idle_at = -math.inf
        else:
            self._idle_at = trio.current_time() + self.config.keep_alive_timeout
            self.keep_alive_waiting.add(self)
        if self._wait_scope is not None:
            self._wait_scope.deadline = self._idle_at

    def _not_idle(self) -> None:
        """A request began: no keep-alive deadline until the connection is idle again."""
        self._idle_at = math.inf
        self.keep_alive_waiting.discard(self)
        if self._wait_scope is not None:
            self._wait_scope.deadline = math.inf

    def shut_down_idle(self) -> None:
        """The server shuts down: an idle connection is closed now (as hypercorn's idle task does then)."""
        if self._idle_at != math.inf:
            self._idle_at = -math.inf
            if self._wait_scope is not None:
                self._wait_scope.deadline = -math.inf

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
                self._sending = True
                try:
                    await self.stream.send_all(chunk)
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                    await self._lost()
                    return
                finally:
                    self._sending = False
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
            self._wake_writer()  # held frames too: the writer drains what this sender waits on
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
        if self._holding:
            return
        if self._writer_started:
            self._wake_writer()  # the writer coalesces what the senders put meanwhile
        else:
            self.release()  # no writer yet: to the socket at once (the writer starts if it must wait)

    def _wake_writer(self) -> None:
        if self._flushed.is_set():
            self._flushed = trio.Event()
        self._ready.set()
        if not self._writer_started and self._writer_nursery is not None and not self._writer_done:
            self._writer_started = True
            self._writer_nursery.start_soon(self._write_buffered)

    def can_send_now(self) -> bool:
        """Whether output sent now is taken without waiting (no buffer over ``high_water``, not closing)."""
        return len(self._pending) < self.high_water and not self._broken and not self._writer_done

    def write_now(self, data: bytes) -> bool:
        """Send ``data`` (bytes of the protocol's output: framed WebSocket messages) without waiting:
        at once if the writer is idle (as :meth:`release` does), else after what is buffered;
        ``False``, nothing taken, when a sender would have to wait (:meth:`can_send_now` false)."""
        if not self.can_send_now():
            return False
        if not self._pending:
            self._progress_at = trio.current_time()
        self._pending += data
        if not self._holding:
            self.release()
        return True

    def hold(self) -> None:
        """Buffer the output sent from now on without waking the writer, until :meth:`release`.

        For a sender about to send several frames at once (a batch of messages) that has checked
        :meth:`can_send_now`: ``release`` then gives them all to the socket in one system call.
        A sender that has to wait for room meanwhile wakes the writer first, as usual.
        """
        self._holding = True

    def release(self) -> None:
        """End :meth:`hold`: send what is buffered at once if the writer is idle, else leave it to the writer.

        The eager send is one non-blocking ``send()`` of the whole buffer on a plain TCP socket,
        made only while the writer is not sending (so the bytes keep their order); what the socket
        does not take (it would block), or everything after a send error, is the writer's, which
        waits for the socket and reports errors as usual.
        """
        self._holding = False
        pending = self._pending
        if not pending or self._broken:
            return
        if self._socket is not None and not self._sending and not self._writer_done:
            fd = self._socket.fileno()  # -1 once the stream was closed
            try:
                sent = os.write(fd, pending) if fd >= 0 else 0
            except OSError:  # would block, or broken: the writer retries and reports
                sent = 0
            if sent:
                del pending[:sent]
                self._progress_at = trio.current_time()
                if not pending:
                    return
                if len(pending) < self.high_water:
                    self._room.set()
        self._wake_writer()

    async def _read_data(self) -> None:
        """hypercorn's reader, with one yield a read on a plain TCP socket (see :meth:`_receive`);
        while its reads are lent (:meth:`lend_reads`) it waits for them to come back."""
        if self._socket is None:
            await super()._read_data()
            self._lent_event.set()  # (lend_reads: nothing to lend)
            return
        timeout = self.config.read_timeout
        full = True  # the last read filled the buffer (at first: read as trio would)
        try:
            while True:
                if self._lend_wanted:
                    self._lent = True
                    self._lent_event.set()
                    await self._returned.wait()
                    self._lent = False
                    full = True  # read on at once: the borrower left input unread, maybe
                try:
                    if timeout is None:
                        data = await self._receive(full)
                    else:
                        with trio.fail_after(timeout):
                            data = await self._receive(full)
                except _Lend:
                    continue
                except _KeepAliveOver:
                    with trio.CancelScope(shield=True):  # as hypercorn's idle task closes it
                        await self._initiate_server_close()
                    break
                except (trio.ClosedResourceError, trio.BrokenResourceError, trio.TooSlowError):
                    break
                await self.protocol.handle(RawData(data))
                if not data:
                    break
                full = len(data) == MAX_RECV
        finally:
            self._lent_event.set()  # a borrower waiting in lend_reads: no reads to lend any more
        await self.protocol.handle(Closed())

    async def _receive(self, full: bool) -> bytes:
        """Read at most ``MAX_RECV`` bytes (``b""`` at the end of input).

        After a read that drained the socket (``full`` false), wait until it is readable, then
        read; after a full one, checkpoint (so what it woke runs) and read.  trio's
        ``receive_some`` instead checkpoints after every successful read and, when the socket is
        drained, first tries a read that fails: two yields and a wasted system call per message
        on a connection that takes turns.  Raises ``trio.ClosedResourceError`` once the stream was
        closed, ``trio.BrokenResourceError`` on a read error.
        """
        socket = self._socket
        if full:
            await trio.lowlevel.checkpoint()
        else:
            await self._wait_readable()
        while True:
            fd = socket.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("the stream was closed")
            try:
                return os.read(fd, MAX_RECV)
            except BlockingIOError:
                await self._wait_readable()
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    raise trio.ClosedResourceError("the stream was closed") from None
                raise trio.BrokenResourceError(exc) from exc

    async def _wait_readable(self) -> None:
        """Wait until the socket is readable; :class:`_Lend` if :meth:`lend_reads` asks for the reads
        meanwhile, :class:`_KeepAliveOver` if the connection stays idle past its keep-alive deadline."""
        fd = self._socket.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the stream was closed")
        if self._lend_wanted:
            raise _Lend
        with trio.CancelScope(deadline=self._idle_at) as scope:
            self._wait_scope = scope
            try:
                await trio.lowlevel.wait_readable(fd)
            finally:
                self._wait_scope = None
        if scope.cancelled_caught:
            if self._lend_wanted:
                raise _Lend
            raise _KeepAliveOver

    # -- reads lent to the application ----------------------------------------------------------
    async def lend_reads(self) -> bool:
        """Make the calling task this connection's reader: from now on it reads the socket itself
        (:meth:`read_inline`), and hypercorn's reader task waits until :meth:`return_reads`.

        For a WebSocket application whose own reader would otherwise be woken by hypercorn's for
        every message: reading and parsing in the application's task costs no task switch, and
        input is read only when the application wants more (backpressure: TCP's own).  Waits
        (one scheduler pass) until hypercorn's reader has let go.  Returns ``False`` when the
        reads cannot be lent (TLS, Windows, a ``read_timeout`` set, the input already over): the
        application then goes on receiving what hypercorn's reader hands it.
        """
        if self._socket is None or self.config.read_timeout is not None or self._lent_event.is_set():
            return False
        self._lend_wanted = True
        if self._wait_scope is not None:
            self._wait_scope.cancel()
        await self._lent_event.wait()
        self._lent_event = _ALREADY_SET  # set for good: the shared one says the same, and holds nothing
        return self._lent

    def return_reads(self) -> None:
        """End :meth:`lend_reads`: hypercorn's reader task reads the socket again (at the end of
        input, a read error, or when the application stops reading for good).  Idempotent."""
        self._lend_wanted = False
        self._returned.set()

    async def read_inline(self, handle: Callable[[bytes], Awaitable[None]] | None = None) -> bool:
        """One read of the socket in the task the reads are lent to, handed to hypercorn's protocol
        as its reader would (so what the application receives comes through its ``receive`` queue
        as usual, or however it took it over).  Waits until the socket is readable (after a read
        that filled the buffer: reads at once, after a checkpoint).  Handling what it read waits
        for nothing but in hypercorn's rare waits (a close, a pong waiting for buffer room).

        Returns ``False`` at the end of input or on a read error, having given the reads back to
        hypercorn's reader, which reads again, meets the same end, and ends the connection as it
        always does (the application then receives its ``websocket.disconnect``).
        ``handle``: ``async (bytes) -> None`` to hand the bytes to instead of the protocol (a
        WebSocket stream's own ``handle``, past HTTP/1.1's pass-through layers).
        """
        socket = self._socket
        if self._inline_full:
            await trio.lowlevel.checkpoint()
        else:
            fd = socket.fileno()
            if fd < 0:
                self.return_reads()
                return False
            await trio.lowlevel.wait_readable(fd)
        try:
            data = os.read(socket.fileno(), MAX_RECV)  # -1 once closed: EBADF
        except BlockingIOError:
            self._inline_full = False
            return True
        except OSError:
            self.return_reads()
            return False
        if not data:
            self.return_reads()
            return False
        self._inline_full = len(data) == MAX_RECV
        # (no yield here but where hypercorn waits: a close, a pong waiting for room; cancelled
        # there, what is left of the read stays in wsproto's buffer and a frame is sent whole or not)
        if handle is None:
            await self.protocol.handle(RawData(data))
        else:
            await handle(data)
        return True

    async def _close(self) -> None:
        if self._holding:  # closed by what a held send did (a response's end on a Connection: close request)
            self.release()
        if not self._broken and not self._writer_done:
            with trio.move_on_after(FLUSH_TIMEOUT) as scope:
                scope.shield = True
                await self._flushed.wait()
        await super()._close()


class ClosingWSStream(WSStream):
    """hypercorn's WebSocket stream, with the close frame RFC 6455 asks for when a client breaks the protocol.

    wsproto reports a frame that breaks RFC 6455 (a text message that is not UTF-8: ``1007``; a
    malformed frame: ``1002``) as a ``CloseConnection`` the client never sent, its own side still
    open; hypercorn 0.18 then closes the TCP connection without a close frame.  Here that verdict
    is answered first with a close frame of its code and reason (RFC 6455 § 7.1.7 and § 8.1: fail
    the connection, sending the close frame first), then the stream closes as before.  The only
    change; :func:`serve_hypercorn` makes hypercorn's HTTP/1.1 and HTTP/2 protocols use it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._close_frame = b""  # the answer to a broken frame, sent before the stream closes
        forward = self.send

        async def send(event: Any) -> None:
            if isinstance(event, StreamClosed) and self._close_frame:
                frame, self._close_frame = self._close_frame, b""
                await forward(Data(stream_id=self.stream_id, data=frame))
            await forward(event)

        self.send = send

    async def _handle_events(self) -> None:
        connection = self.connection
        if "events" not in vars(connection):  # once per WebSocket: watch wsproto's events
            parse = connection.events

            def events() -> Any:
                for event in parse():
                    if isinstance(event, CloseConnection) and connection.state is ConnectionState.OPEN:
                        # wsproto's verdict on a broken frame (a close from the client leaves OPEN first)
                        answer = CloseConnection(code=event.code, reason=(event.reason or "")[:120])
                        self._close_frame = connection.send(answer)
                    yield event

            connection.events = events  # type: ignore[method-assign]
        await super()._handle_events()


_DISCONNECTS = frozenset(("http.disconnect", "websocket.disconnect"))
_NO_EVENTS: deque[Any] = deque()
"""The empty queue an :class:`AppEvents` starts as, shared and never appended to."""


class AppEvents:
    """One ASGI application task's incoming events (its ``receive``), as hypercorn's trio worker hands them over.

    Replaces hypercorn's trio memory channel per request (two channel objects and their shared
    state, made for every request): a queue of at most ``limit`` events (hypercorn's
    ``max_app_queue_size``) that :meth:`put` fills without a yield while it has room (a full one
    waits for the application to take one), read by :meth:`receive` (a checkpoint, as a channel's)
    or :meth:`receive_nowait` (``trio.WouldBlock`` when empty).  The same events in the same order.

    :meth:`watch_disconnect`: for an application that reads nothing more but must stop when its
    client goes (a response waiting for an agent, an SSE stream): events are dropped from then on
    and a disconnect cancels the given scope, what a task reading ``receive`` until the disconnect
    would do, without the task.  ``asgi.py`` finds it as ``receive.__self__``.
    """

    __slots__ = ("_events", "_limit", "_receivers", "_room", "_watch")

    def __init__(self, limit: int) -> None:
        self._events: deque[Any] = _NO_EVENTS  # a deque of its own from the first event on
        self._limit = max(limit, 1)
        self._receivers: trio.lowlevel.ParkingLot | None = None  # made at the first wait for an event
        self._room: trio.lowlevel.ParkingLot | None = None  # made at the first wait for room (rare)
        self._watch: trio.CancelScope | None = None

    async def put(self, event: Any) -> None:
        """hypercorn's ``app_put``: queue ``event`` (at once while there is room, else once there is)."""
        if self._watch is not None:
            if event.get("type") in _DISCONNECTS:
                self._watch.cancel()
            return
        while len(self._events) >= self._limit:
            if self._room is None:
                self._room = trio.lowlevel.ParkingLot()
            await self._room.park()
            if self._watch is not None:  # watched meanwhile: this event is dropped or noted like the others
                await self.put(event)
                return
        if self._events is _NO_EVENTS:
            self._events = deque()
        self._events.append(event)
        if self._receivers:
            self._receivers.unpark()

    def receive_nowait(self) -> Any:
        """The next event; ``trio.WouldBlock`` if none is queued."""
        if not self._events:
            raise trio.WouldBlock
        event = self._events.popleft()
        if self._room:
            self._room.unpark()
        return event

    async def receive(self) -> Any:
        """The next event, once there is one (the application's ``receive``)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._events:
            event = self.receive_nowait()
            await trio.lowlevel.cancel_shielded_checkpoint()
            return event
        if self._receivers is None:
            self._receivers = trio.lowlevel.ParkingLot()
        while not self._events:
            await self._receivers.park()
        return self.receive_nowait()

    def watch_disconnect(self, scope: trio.CancelScope) -> None:
        """Until :meth:`unwatch`, drop the events that come (and those queued) and cancel ``scope``
        at a disconnect (at once if one is queued)."""
        self._watch = scope
        events = self._events
        while events:
            if events.popleft().get("type") in _DISCONNECTS:
                scope.cancel()
        self._events = _NO_EVENTS  # (a long watch, an SSE stream's, holds no emptied deque: 760 bytes)
        if self._room:
            self._room.unpark_all()

    def unwatch(self) -> None:
        """End :meth:`watch_disconnect`: events are queued again."""
        self._watch = None


class EagerTaskGroup(TaskGroup):
    """hypercorn's per-connection task group, whose applications receive through :class:`AppEvents`.

    hypercorn hands a request's events to its application through a trio memory channel whose
    ``send`` yields even when the queue has room: a ``POST`` that arrived whole (head and body in one
    read) goes in as three steps, the request, its body and the end of the body, and the
    application, started with the first, runs between them (about half the time it found the body
    without its end, and waited for it: a timer and a task switch).  Here an event the queue has room
    for is queued at once (the same events in the same order); a full queue waits as before.  The
    reader still yields at its next read of the socket.  :func:`serve_hypercorn` makes hypercorn's
    TCP server use it (its ``tcp_server`` module's ``TaskGroup`` name); it starts the application
    as hypercorn's own ``spawn_app`` does, with hypercorn's ``task_group._handle``.
    """

    async def spawn_app(self, app: Any, config: Config, scope: Any, send: Any) -> Callable[[Any], Awaitable[None]]:
        events = AppEvents(config.max_app_queue_size)
        assert self._nursery is not None
        self._nursery.start_soon(
            hypercorn_handle, app, config, scope, events.receive, send, trio.to_thread.run_sync, trio.from_thread.run
        )
        return events.put


def _use_eager_task_group() -> None:
    """Make hypercorn's TCP server create :class:`EagerTaskGroup` (process-wide)."""
    hypercorn_tcp_server.TaskGroup = EagerTaskGroup  # type: ignore[attr-defined]


def _use_closing_ws_stream() -> None:
    """Make hypercorn's HTTP/1.1 and HTTP/2 protocols create :class:`ClosingWSStream` (process-wide)."""
    hypercorn_h11.WSStream = ClosingWSStream  # type: ignore[attr-defined]
    hypercorn_h2.WSStream = ClosingWSStream  # type: ignore[attr-defined]


async def serve_hypercorn(
    app: Any,
    config: Config,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    write_timeout: float | None = None,
    release_memory_when_idle: float | None = IDLE_RELEASE_DELAY,
    gc_threshold2: int | None = SERVER_GC_THRESHOLD2,
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
    ``gc_threshold2``: the garbage collector's third threshold while serving (at least this; see
    :data:`SERVER_GC_THRESHOLD2`); ``None`` leaves the collector as it is.
    """
    with _server_gc(gc_threshold2):
        await _serve_hypercorn(app, config, shutdown_trigger, write_timeout, release_memory_when_idle, task_status)


async def _serve_hypercorn(
    app: Any,
    config: Config,
    shutdown_trigger: Callable[[], Awaitable[None]] | None,
    write_timeout: float | None,
    release_memory_when_idle: float | None,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    _use_closing_ws_stream()
    _use_eager_task_group()
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
            keep_alive_waiting: set[CoalescingTCPServer] = set()
            attributes = {"write_timeout": write_timeout, "idle": idle, "keep_alive_waiting": keep_alive_waiting}
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
                for waiting in list(keep_alive_waiting):
                    waiting.shut_down_idle()
                connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()

"""The trio shell around the sans-IO core: one JSON-RPC connection over a byte stream.

Contract: a :class:`Connection` reads newline-delimited JSON-RPC from a receive stream and writes
to a send stream.  A pool of tasks serves inbound requests, one of them reading at a time: the
reader frames and dispatches, and runs each request it read until the handler finishes or has to
wait (then it hands the reading to another task of the pool and goes on with that request), so a
handler that answers without waiting costs no task and no wake-up, and the answers to one read
leave in one write.  A handler that waits for the responses to its own requests, one after another,
reads them itself while it waits (the reading leaves the pool for its task until it waits for
anything else), so each round trip wakes one task, not two.  Each request can still be cancelled
alone (``$/cancel_request``, the end of input, closing).  One writer task sends whatever else is
queued in a single write; on a pipe, a request or an answer is written at once when nothing is
queued.  Inbound notifications that share an ordering key (a :class:`Route`'s ``serial_key``) run
one after another in arrival order, others run at once.  A response is handed to its caller only
after every ordered notification that arrived before it has been handled.

It knows JSON-RPC and ``$/cancel_request`` (the cancel method name is a parameter), and nothing of
ACP's methods: which methods exist, their params and result types and their ordering keys come in
as :class:`Route` objects from the typed layer (:mod:`acp_trio._roles`), built from the generated
method tables.
"""

from __future__ import annotations

import contextvars
import errno
import logging
import math
import os
import stat
import types
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, Final, Literal, Protocol, TypeAlias, cast

import orjson
import trio

from . import _core
from ._converter import DecodeError
from ._core import RequestError, RequestId
from ._errors import ConnectionClosed, RequestTimeout
from ._nursery import serving
from ._spec import MethodSpec

log = logging.getLogger("acp_trio.connection")

Tap: TypeAlias = Callable[[Literal["in", "out"], bytes], None]
"""A raw-message observer, called as ``tap(direction, line)`` for every message.

``direction`` is ``"in"`` or ``"out"``; an outgoing ``line`` ends in ``\\n``, an incoming one has no newline.
"""

Handler: TypeAlias = Callable[[Any], Awaitable[Any]]


class Instrumentation(Protocol):
    """Hooks a connection calls around every message it sends and every handler it runs.

    This is how tracing plugs in (:mod:`acp_trio.otel`) without the runtime knowing of it.  Both
    methods see JSON values (``params`` as on the wire), never typed objects.
    """

    def outbound(self, kind: Literal["request", "notification"], method: str, params: Any) -> Any:
        """Return the params to send for an outgoing message (``params`` itself, or a copy with
        more in its ``_meta``).  Must not raise."""
        ...

    def inbound(
        self, kind: Literal["request", "notification"], method: str, params: Any
    ) -> AbstractContextManager[object]:
        """A context manager the handler of an incoming message runs in (``params``: its JSON
        params, ``None`` when absent)."""
        ...


# Bytes queued before a sender waits for the writer.  About one pipe buffer: a sender that produces
# faster than the writer drains lets the writer start early (the peer starts reading sooner).
_HIGH_WATER = 1 << 16
_READ_SIZE = 1 << 16
_HANDOFF = 64  # messages the reader decodes before letting their handlers run
# Seconds the request pool's reader may spend sending its read's answers itself (a send stream with
# ``reader_sends``, see Connection) before the writer hands the reading to another pool task.
_READER_SEND_PATIENCE = 0.05
# Shared stand-ins an idle connection holds instead of objects of its own (memory per connection):
# never mutated; replaced by a new object where something is added or waited for.
_NO_SCOPES: Final[set[trio.CancelScope]] = set()
_NO_TASKS: Final[set[trio.lowlevel.Task]] = set()
_ALREADY_SET: Final = trio.Event()
_ALREADY_SET.set()
_NOBODY_PARKED: Final = trio.lowlevel.ParkingLot()
"""The parking lot a connection's ``_written_lot`` and ``_serial_lot`` start as, shared and never
parked in (unparking it does nothing): a connection gets a lot of its own when a task first waits
there, which most never do (a lot is three objects the garbage collector visits, per connection)."""
DEFAULT_EOF_GRACE = 0.25
"""Seconds a connection lets its handlers finish after its input ended, before cancelling them.

A quarter of a second lets a handler that is about to answer (a result already computed, a last
write) answer normally, and keeps an agent whose client closed its stdin well inside the first
step of a client's shutdown ladder (1 s): the official SDKs exit 21-215 ms after end of input."""
DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024
"""Bytes of output queued for the peer, not yet taken by the transport, at which a connection
stops reading its input until the transport takes them (4 MiB).

Backpressure in bytes: a peer that sends requests and never reads their answers (or reads slower
than it asks) is not read faster than it reads, so this side's memory stays bounded (about twice
this, plus the transport's own buffers) instead of growing with every answer it cannot send.  A
peer that reads, however slowly, is served in full; one that takes nothing at all is the
transport's to end (the remote server's ``output_stall_timeout``)."""
_FdStream: Any = getattr(trio.lowlevel, "FdStream", None)  # POSIX only
_parse_value = _core.parse_value
_loads = orjson.loads
_dumps = orjson.dumps
_JSONDecodeError = orjson.JSONDecodeError
_encode_request = _core.encode_request
_current_task = trio.lowlevel.current_task
_wait_task_rescheduled = trio.lowlevel.wait_task_rescheduled
_reschedule = trio.lowlevel.reschedule
_wait_readable = trio.lowlevel.wait_readable
_CoroutineType: Final = types.CoroutineType


class Route:
    """How to handle one inbound method.

    ``method``: the wire name.  ``kind``: ``"request"`` or ``"notification"``.  ``params_type`` /
    ``result_type``: annotations for the converter (``Any`` passes JSON through).  ``handler``:
    ``async (params) -> result``.  ``serial_key``: ``(params) -> key`` (``None``: no ordering); for
    notifications, those with equal keys are handled one at a time in arrival order; for requests,
    the handler starts only after the notifications with the same key that arrived before the
    request were handled (requests still run concurrently with each other).  A request whose
    handler is cancelled (``$/cancel_request``, the end of input after ``eof_grace``, or the
    connection closing) answers -32800 while the output is open.
    ``cancelled_result``: for requests, ``() -> result`` giving the result to answer instead of
    -32800 when the handler is cancelled (a permission request answered ``cancelled``, as ACP v2's
    schema asks).  ``input_ended_result``: for requests, ``() -> result`` to answer instead when the
    handler is cancelled because the input ended (``eof_grace``; a v1 prompt turn answers stop
    reason ``cancelled``); default ``cancelled_result``.
    ``cancel_group``: for requests, ``(params) -> key`` (``None``: in no group): the group
    :meth:`Connection.cancel_group` cancels (a client's questions of one session, when it cancels
    the session's turn), with ``group_cancelled_result``: ``() -> result``, what those requests
    answer then (default: as any cancelled request), even a handler that returned in the meantime.
    ``on_receive``: ``(params) -> None`` called synchronously by the reader as the notification or
    request arrives (a request: once accepted, before its handler's task starts), before anything
    read after it is handled (e.g. to cancel a scope before a response that follows it on the wire
    wakes anyone, or to register a prompt turn before a ``session/cancel`` read with it); it must
    not block.
    """

    __slots__ = (
        "cancel_group",
        "cancelled_result",
        "decode",
        "encode",
        "group_cancelled_result",
        "handler",
        "input_ended_result",
        "kind",
        "method",
        "on_receive",
        "params_type",
        "result_type",
        "serial_key",
    )

    def __init__(
        self,
        method: str,
        kind: Literal["request", "notification"],
        handler: Handler,
        *,
        params_type: Any = Any,
        result_type: Any = Any,
        serial_key: Callable[[Any], Hashable] | None = None,
        on_receive: Callable[[Any], None] | None = None,
        cancelled_result: Callable[[], Any] | None = None,
        input_ended_result: Callable[[], Any] | None = None,
        cancel_group: Callable[[Any], Hashable | None] | None = None,
        group_cancelled_result: Callable[[], Any] | None = None,
    ) -> None:
        self.method = method
        self.kind = kind
        self.handler = handler
        self.params_type = params_type
        self.result_type = result_type
        self.serial_key = serial_key
        self.on_receive = on_receive
        self.cancelled_result = cancelled_result
        self.input_ended_result = input_ended_result or cancelled_result
        self.cancel_group = cancel_group
        self.group_cancelled_result = group_cancelled_result or cancelled_result
        # the converter's functions for params_type / result_type, filled on first use
        self.decode: Callable[[Any], Any] | None = None
        self.encode: Callable[[Any], Any] | None = None

    def with_handler(self, handler: Handler) -> Route:
        """A copy of this route that calls ``handler``."""
        route = Route(
            self.method,
            self.kind,
            handler,
            params_type=self.params_type,
            result_type=self.result_type,
            serial_key=self.serial_key,
            on_receive=self.on_receive,
            cancelled_result=self.cancelled_result,
            input_ended_result=self.input_ended_result,
            cancel_group=self.cancel_group,
            group_cancelled_result=self.group_cancelled_result,
        )
        route.decode, route.encode = self.decode, self.encode
        return route


class _Slot:
    """One outbound request's wait for its response (lighter than a trio.Event: one waiter)."""

    __slots__ = ("done", "error", "result", "seq", "task")

    def __init__(self) -> None:
        self.done = False
        self.task: trio.lowlevel.Task | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.seq = 0

    def finish(self) -> None:
        self.done = True
        task, self.task = self.task, None
        if task is not None:
            _reschedule(task)

    def abort(self, _raise_cancel: Any) -> trio.lowlevel.Abort:
        self.task = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def wait(self) -> None:
        if self.done:
            await trio.lowlevel.checkpoint()
            return
        self.task = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self.abort)


class _FanSlot(_Slot):
    """One request of :meth:`Connection.request_many`: finishing it hands it to the call's :class:`_Fan`."""

    __slots__ = ("fan", "index", "request_id")

    def __init__(self, fan: _Fan, index: int, request_id: int) -> None:
        super().__init__()
        self.fan = fan
        self.index = index  # its place in the call's params
        self.request_id = request_id

    def finish(self) -> None:
        self.done = True
        fan = self.fan
        fan.done.append(self)
        task, fan.task = fan.task, None
        if task is not None:  # woken once for all the responses of one read
            _reschedule(task)


class _Fan:
    """The wait of one :meth:`Connection.request_many` call: the requests answered since it last
    looked, and its task while it waits for more."""

    __slots__ = ("done", "task")

    def __init__(self) -> None:
        self.done: list[_FanSlot] = []
        self.task: trio.lowlevel.Task | None = None

    def abort(self, _raise_cancel: Any) -> trio.lowlevel.Abort:
        self.task = None
        return trio.lowlevel.Abort.SUCCEEDED


class _Job:
    """One inbound request: what its pool task runs, and what cancels it."""

    __slots__ = (
        "bare",
        "batch",
        "cancel_requested",
        "coro",
        "finished",
        "group",
        "group_cancelled",
        "handed",
        "index",
        "line",
        "params",
        "request_id",
        "route",
        "scope",
        "seq",
        "yielded",
    )

    def __init__(self, request_id: RequestId | None, route: Route, params: Any, seq: int) -> None:
        self.request_id = request_id
        self.route = route
        self.params = params
        self.seq = seq  # its place among the messages read (ordering against notifications)
        self.batch: list[bytes | None] | None = None  # a batch's answers, where index is this one's
        self.index = -1
        self.line: bytes | None = None  # its answer, once the handler ended
        self.scope: trio.CancelScope | None = None  # its pool task's, while it runs
        self.cancel_requested = False  # cancelled before a pool task took it
        self.finished = False
        self.handed = False  # given to a pool task that has not started it
        self.coro: Any = None  # its coroutine, when the reader ran its first step
        self.bare = False  # coro is the handler's own (_run_job goes on with it), not _run_job's
        self.yielded: Any = None  # what that step yielded to trio
        self.group: Hashable | None = None  # its route's cancel group, if any
        self.group_cancelled = False  # cancelled with its group: answers the route's group_cancelled_result

    def cancel(self) -> None:
        if self.finished:
            return
        if self.scope is not None:
            self.scope.cancel()
        else:
            self.cancel_requested = True


class _ReadRole:
    """The token of the reader role in the request pool (one per connection)."""


_READ: Final = _ReadRole()
_HANDED: Final = _ReadRole()  # what _read_loop returns once it gave the role to a handler's task


class _PoolTask:
    """A task of the request pool, and what is handed to it while it waits idle."""

    __slots__ = ("task", "waiting", "work")

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.work: _Job | _ReadRole | None = None
        self.waiting = True

    def abort(self, _raise_cancel: Any) -> trio.lowlevel.Abort:
        self.waiting = False  # _give skips it; the connection is closing
        return trio.lowlevel.Abort.SUCCEEDED


class _SerialQueue:
    __slots__ = ("items", "running")

    def __init__(self) -> None:
        self.items: deque[tuple[int, Route, Any]] = deque()
        self.running = False


class Connection:
    """One JSON-RPC 2.0 connection over newline-delimited JSON.

    ``send_stream``/``receive_stream``: a ``trio.abc.SendStream`` and ``trio.abc.ReceiveStream``
    (pass the same ``trio.abc.Stream`` twice for a bidirectional stream).  ``routes``: method →
    :class:`Route` for what this side handles (consulted per message, so it may grow later).
    ``converter``: an :class:`acp_trio.AcpConverter` (default: the shared one).
    ``max_message_size``: cap on one inbound message, in bytes (default 32 MiB).  ``tap``: see
    :data:`Tap`.  ``cancel_method``: the notification that cancels a request
    (``"$/cancel_request"``), ``None`` to neither send nor honour one.  ``close_timeout``: seconds
    allowed for flushing and closing the stream when the connection closes.  ``name``: for logs.
    ``eof_grace``: seconds to let running handlers and background tasks finish after the input
    ends (end of stream, or a read error), before cancelling them (default
    :data:`DEFAULT_EOF_GRACE`, 0.25 s; ``None`` waits for them however long they take).  What
    they answer while the output is still open is written; then the connection closes.  The
    input's end is the peer's shutdown signal (the MCP stdio lifecycle), and nothing the peer
    asked for is worth running once nobody can ask about it.
    ``max_output_bytes``: while more than this many bytes of output wait for the transport to
    take them (a peer that does not read what it asked for), the connection reads no more input
    (default :data:`DEFAULT_MAX_OUTPUT_BYTES`, 4 MiB; at least 64 KiB): the peer's writes then
    wait in turn, and memory stays bounded.

    A send stream whose ``send_all`` takes a round trip and may be awaited by any task (a Streamable
    HTTP client's POSTs) says so with a true ``reader_sends`` attribute: the reader then sends the
    answers of what it read itself, rather than waking the writer task for them, and the writer
    has the reading go on in another task if such a send waits more than 50 ms.  A transport whose
    own tasks read its sources hands what they read to :meth:`deliver_lines`.

    Use it as an async context manager (``async with conn:``); leaving the block closes it.  While
    open, :meth:`request`/:meth:`notify` (JSON values) and :meth:`send_request`/:meth:`send_notification`
    (typed, via a :class:`MethodSpec`) send; all raise :class:`ConnectionClosed` once it closed.
    """

    def __init__(
        self,
        send_stream: trio.abc.SendStream,
        receive_stream: trio.abc.ReceiveStream,
        routes: Mapping[str, Route] | None = None,
        *,
        converter: Any = None,
        max_message_size: int = _core.DEFAULT_MAX_MESSAGE_SIZE,
        tap: Tap | None = None,
        cancel_method: str | None = "$/cancel_request",
        close_timeout: float = 2.0,
        name: str = "acp",
        instrumentation: Instrumentation | None = None,
        eof_grace: float | None = DEFAULT_EOF_GRACE,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        if max_output_bytes < _HIGH_WATER:
            raise ValueError(f"max_output_bytes must be at least {_HIGH_WATER} bytes, got {max_output_bytes}")
        if converter is None:
            from ._converter import converter as shared

            converter = shared
        self._send_stream = send_stream
        self._fd_stream: Any = send_stream if _FdStream is not None and isinstance(send_stream, _FdStream) else None
        # a message transport's synchronous send (LineSendStream.send_now), used where a pipe's
        # descriptor is written directly: (data) -> bytes taken, all or none
        self._send_now: Callable[[bytes | bytearray], int] | None = (
            None if self._fd_stream is not None else getattr(send_stream, "send_now", None)
        )
        # a transport whose send takes a round trip and may be awaited by any task (a Streamable HTTP
        # POST, see _send_as_reader): the reader sends the answers of a read itself, not the writer
        self._reader_sends = (
            self._fd_stream is None and self._send_now is None and getattr(send_stream, "reader_sends", False) is True
        )
        self._send_deadline = math.inf  # while the reader sends: when the writer hands the reading on
        self._writer_watch: trio.CancelScope | None = None  # the writer's idle wait (reader_sends only)
        self._sender_replaced = False  # the reader's send waited: the writer had the reading go on elsewhere
        self._send_hand_on: Callable[[], object] | None = None  # how, for a send of deliver_lines (else _give)
        self._reader_idle = False  # the pool's reader waits for input from the receive stream (deliver_lines)
        self._direct_framer: _core.LineFramer | None = None  # deliver_lines' (complete lines: it keeps nothing)
        self._receive_stream = receive_stream
        self._fd_receive: Any = receive_stream if _pollable_pipe(receive_stream) else None
        self.routes: dict[str, Route] = dict(routes or {})
        self.converter = converter
        self._framer = _core.LineFramer(max_message_size)
        self.tap = tap
        self.cancel_method = cancel_method
        self.close_timeout = close_timeout
        self.name = name
        self.instrumentation = instrumentation
        self.eof_grace = eof_grace
        self.max_output_bytes = max_output_bytes
        self.closing_error: Callable[[str], Awaitable[ConnectionClosed]] | None = None
        """Transport hook: ``async (reason) -> ConnectionClosed`` describing why the streams ended
        (end of input, a read or write error), e.g. with a spawned process's exit status and stderr
        (:func:`acp_trio.spawn_agent`).  Awaited once, shielded, at most 1 s, before anything fails."""
        self._background_scopes: set[trio.CancelScope] = _NO_SCOPES  # scopes of the tasks start_soon runs
        self._input_cancelled = False  # running handlers were cancelled because the input ended
        self._close_callbacks: list[Callable[[str], object]] = []
        self.records_handed: Callable[[], object] | None = None
        """Session store hook: called after the writer gave the records of a written batch to their sinks."""
        self.request_line_hooks: dict[str, Callable[[bytes, Any], object]] = {}
        """Session store hook (:mod:`acp_trio.session_store`): method → ``hook(line, params)``, called
        with the raw line and JSON params of each inbound request of that method, before it is handled."""
        # session store hook: what queue_line_into recorded since the writer last took the outbox, and
        # where each goes (one sink: _rec_sink; several: _rec_sinks, one per record)
        self._rec_records: list[bytes] = []
        self._rec_sink: Callable[[bytes], object] | None = None
        self._rec_sinks: list[Callable[[bytes], object]] | None = None
        self._rec_in_flight = False  # the batch being written carries records
        self._taken = 0  # batches the writer took from the outbox (wait_written)
        self._written = 0  # batches it wrote
        self._written_lot = _NOBODY_PARKED  # a lot of its own once a task waits (wait_written)
        self._written_waiters = 0  # tasks parked in _written_lot (a count: cheaper to test than the lot)
        # outbound requests awaiting their response: id -> the caller's slot; ids count up from 0
        self._pending: dict[RequestId, _Slot] = {}
        self._next_request_id = 0
        self._inbound: dict[RequestId | None, _Job] = {}  # running inbound requests
        self._groups: dict[Hashable, set[_Job]] = {}  # running inbound requests by cancel group
        self._new_jobs: list[_Job] = []  # requests read to be handed out (batches, the end of input)
        self._inline_requests = True  # the reader runs each request it reads at once (not at the end of input)
        # the request the reader ran that has to wait (it goes on with it), and the context its first step ran in
        self._waiting: tuple[_Job, contextvars.Context] | None = None
        # the cancel group of the request whose first step the reader runs with no job yet, and
        # whether its handler cancelled that group meanwhile (see cancel_group)
        self._first_group: Hashable | None = None
        self._first_group_cancelled = False
        self._idle: list[_PoolTask] = []  # request pool tasks waiting for work
        # The reader role out of the pool (see _read_for): the task of a request handler that reads
        # while it waits for its own response; the task the pool's reader woke last that may take
        # the role next; whether the holder waits for input; the pool tasks that can hold it (those
        # going on with a handler through _resume, which sees every one of its yields).
        self._role_holder: trio.lowlevel.Task | None = None
        self._role_offer: trio.lowlevel.Task | None = None
        self._role_waiting = False
        self._resumers: set[trio.lowlevel.Task] = _NO_TASKS
        # lent only where waking the holder (trio.lowlevel.notify_closing, see _fail_pending) wakes
        # no writer too: a pipe read by its own descriptor, not one socket descriptor for both ways
        fd_in: Any = self._fd_receive
        fd_out: Any = self._fd_stream
        self._can_lend = fd_in is not None and (fd_out is None or fd_out.fileno() != fd_in.fileno())
        # or a message transport's stream that says its reads may be made, and waited for, in any
        # task (MessageReceiveStream.lendable): the holder, a handler's task, is woken from such a
        # wait by the cancellation of its request when the connection closes (_mark_closed)
        if fd_in is None and getattr(receive_stream, "lendable", False):
            self._can_lend = True
        self._handed = 0  # requests handed to pool tasks that have not started them yet
        self._holding = False  # the reader runs request handlers: their output waits for _flush
        self._backlog: list[bytes | _core.OversizedMessage] = []  # framed lines the reader has not handled yet
        self._read_full = False  # the last read filled the buffer: more input is probably waiting
        self._read_reason = "end of stream"
        self._job_context: contextvars.Context | None = None  # what every request handler starts from
        self._queues: dict[Hashable, _SerialQueue] = {}
        self._serial_lot = _NOBODY_PARKED  # a lot of its own once a task waits (_park_serial)
        self._serial_waiting = 0  # tasks parked in _serial_lot (a counter: the lot's own __bool__ is a call)
        # the lines queued for the writer, in order: one buffer, so queueing a line is one copy, and a
        # backlog costs its length (orjson's bytes each keep a 4 KiB allocation while they live)
        self._outbox = bytearray()
        self._encoders: dict[str, Callable[[Any], bytes]] = {}  # method → its notification lines' encoder
        self._writing = False  # the writer is inside a send
        self._wake_writer = trio.Event()
        self._drained = _ALREADY_SET  # a new Event whenever a sender waits (_until_taken)
        self._drain_wanted = False  # a sender waits on _drained (set it when the writer takes the outbox)
        self._seq = 0
        self._closed: ConnectionClosed | None = None
        self._closed_event: trio.Event | None = None  # made by the first wait_closed
        self._writer_ended = False  # the writer task has ended (or never runs again)
        self._writer_done: trio.Event | None = None  # made by the first wait for the writer's end
        self._read_closed: ConnectionClosed | None = None
        self._busy = 0  # inbound handler tasks and notification queues still running
        self._nursery: trio.Nursery | None = None
        self._notify_nursery: trio.Nursery | None = None  # opened with the first notification handler
        self._notify_pending: list[tuple[Callable[..., Awaitable[object]], tuple[Any, ...], str]] | None = None
        # the notification nursery's body has ended (cancelled: the connection is closing, or its
        # input ended): that nursery takes no more tasks, so nothing read from now on is handled
        self._notify_ended = False
        self._service_scope = trio.CancelScope()
        self._cm: Any = None

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once the connection closed (locally, by end of stream, or by a write failure)."""
        return self._closed is not None

    @property
    def close_error(self) -> ConnectionClosed | None:
        """Why the connection closed (what its pending requests failed with; raise ``.clone()``), or ``None``."""
        return self._closed

    async def wait_closed(self) -> None:
        """Wait until the connection closes (for a server: until the peer goes away)."""
        if self._closed is not None:
            await trio.lowlevel.checkpoint()
            return
        if self._closed_event is None:
            self._closed_event = trio.Event()
        await self._closed_event.wait()

    async def _wait_writer_ended(self) -> None:
        """Wait until the writer task has ended (a checkpoint if it has)."""
        if self._writer_ended:
            await trio.lowlevel.checkpoint()
            return
        if self._writer_done is None:
            self._writer_done = trio.Event()
        await self._writer_done.wait()

    async def __aenter__(self) -> Connection:
        # the body's exception (a ConnectionClosed from a request, say) comes out as itself
        self._cm = serving(self._service, self.aclose)
        await self._cm.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> bool | None:
        cm, self._cm = self._cm, None
        result: bool | None = await cm.__aexit__(*exc)
        return result

    async def _service(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The connection's tasks: the reader (the request pool's first task) and, in this task, the
        writer.  A connection costs its tasks (their frames, scopes and nurseries are most of an idle
        one's memory, and every one is scanned by each full garbage collection): the writer runs in
        the task that holds the nursery rather than a task of its own, and the nursery notification
        handlers run in is opened with the first of them (:meth:`_start_notification`)."""
        with self._service_scope:
            async with trio.open_nursery() as inner:
                self._nursery = inner
                self._job_context = contextvars.copy_context()
                inner.start_soon(self._pool_task, _READ, name=f"{self.name}: reader")
                task_status.started()
                await self._writer()

    async def serve_until_closed(self) -> None:
        """Serve the connection in the calling task until it closes, then close it: what ``async
        with conn: await conn.wait_closed()`` does, with the writer in this task rather than in a
        task of its own (one task and one nursery fewer per connection, for a server holding many
        idle ones).  Returns once the connection closed (the peer went away, :meth:`aclose`, a
        write failure) and its streams are closed; :meth:`aclose` runs however this ends.  An
        exception from the connection's tasks comes out of its nursery (an exception group)."""
        try:
            async with trio.open_nursery() as inner:
                # the nursery's scope serves as the service scope (one scope fewer than _service's,
                # for a connection held in the calling task): cancelling it stops the reader and the writer
                if self._service_scope.cancel_called:  # closed before it ran
                    inner.cancel_scope.cancel()
                self._service_scope = inner.cancel_scope
                self._nursery = inner
                self._job_context = contextvars.copy_context()
                inner.start_soon(self._pool_task, _READ, name=f"{self.name}: reader")
                await self._writer()
                await self.aclose()  # closed and drained: close the streams, stop the reader and handlers
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()

    def _start_notification(self, async_fn: Callable[..., Awaitable[object]], *args: Any, name: str) -> None:
        """Run a notification handler (``async_fn(*args)``) in the notification nursery, which the first
        one opens (see :meth:`_notification_tasks`); until it is open they wait in ``_notify_pending``."""
        nursery = self._notify_nursery
        if nursery is not None:
            nursery.start_soon(async_fn, *args, name=name)
            return
        if self._notify_pending is None:
            self._notify_pending = []
            assert self._nursery is not None
            self._nursery.start_soon(self._notification_tasks, name=f"{self.name}: notifications")
        self._notify_pending.append((async_fn, args, name))

    async def _notification_tasks(self) -> None:
        """Hold the nursery that notification handlers run in: one cancel scope stops them all at the
        end of input, without a scope per notification (streamed updates are the hot path).  Opened
        with the first handler (a connection that is sent none has no such task), which runs here,
        in the nursery's body, as soon as a handler task would have (the reader's slices count on
        that); the handlers queued meanwhile get tasks.  If running handlers were cancelled at the
        end of input meanwhile (``_input_ended``), these are cancelled at once."""
        async with trio.open_nursery() as nursery:
            self._notify_nursery = nursery
            try:
                pending, self._notify_pending = self._notify_pending or [], None
                if self._input_cancelled:
                    nursery.cancel_scope.cancel()
                for async_fn, args, name in pending[1:]:
                    nursery.start_soon(async_fn, *args, name=name)
                if pending:
                    await pending[0][0](*pending[0][1])
                await trio.sleep_forever()
            finally:
                # (trio closes the nursery to new tasks once these end: see _on_lines)
                self._notify_ended = True

    async def aclose(self, reason: str = "connection closed") -> None:
        """Close: fail pending requests with :class:`ConnectionClosed`, cancel running handlers,
        flush what is queued and close both streams (shielded, at most ``close_timeout`` s each)."""
        self._mark_closed(reason)
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.close_timeout):
                await self._wait_writer_ended()
            with trio.move_on_after(self.close_timeout) as cs:
                try:
                    await self._send_stream.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
                    pass
            if cs.cancelled_caught:
                await trio.aclose_forcefully(self._send_stream)
            if self._receive_stream is not cast(object, self._send_stream):
                # a blocked reader gets ClosedResourceError and ends; the descriptor is released now
                await trio.aclose_forcefully(self._receive_stream)
        self._service_scope.cancel()

    def start_soon(self, async_fn: Callable[..., Awaitable[object]], *args: Any, name: str | None = None) -> None:
        """Run ``async_fn(*args)`` as a background task of this connection.

        It runs in the connection's nursery: it may outlive the handler that started it, and it is
        cancelled when the connection closes (its ``finally`` blocks run before ``async with conn``
        exits, so cleanup such as killing a child process is waited for).  An exception it raises is
        logged and closes nothing.  Raises :class:`ConnectionClosed` once the connection closed and
        ``RuntimeError`` before it runs (outside ``async with``).
        """
        self._check_open()
        if self._nursery is None:
            raise RuntimeError("the connection is not running: start tasks inside `async with conn:`")
        self._nursery.start_soon(self._background, async_fn, args, name=name or getattr(async_fn, "__name__", None))

    async def _background(self, async_fn: Callable[..., Awaitable[object]], args: tuple[Any, ...]) -> None:
        scope = trio.CancelScope()
        if self._background_scopes is _NO_SCOPES:
            self._background_scopes = set()
        self._background_scopes.add(scope)
        try:
            with scope:
                await async_fn(*args)
        except Exception:
            log.exception("%s: background task %r raised", self.name, async_fn)
        finally:
            self._background_scopes.discard(scope)
            if not self._background_scopes and self._serial_waiting:
                self._serial_lot.unpark_all()

    def add_close_callback(self, callback: Callable[[str], object]) -> None:
        """Call ``callback(reason)`` once when the connection closes (at once if it already has).

        Callbacks run synchronously, in the order added, inside the closing code: they must not
        block (start cleanup, e.g. send a signal or cancel a scope).  One that raises is logged.
        """
        if self._closed is not None:
            self._run_close_callback(callback, self._closed.reason)
        else:
            self._close_callbacks.append(callback)

    def _run_close_callback(self, callback: Callable[[str], object], reason: str) -> None:
        try:
            callback(reason)
        except Exception:
            log.exception("%s: close callback %r raised", self.name, callback)

    def _mark_closed(self, reason: str | ConnectionClosed) -> None:
        if self._closed is not None:
            return
        error = reason if isinstance(reason, ConnectionClosed) else ConnectionClosed(reason)
        self._closed = error
        log.debug("%s: closing (%s)", self.name, error.reason)
        callbacks, self._close_callbacks = self._close_callbacks, []
        for callback in callbacks:
            self._run_close_callback(callback, error.reason)
        self._fail_pending(error)
        for job in self._inbound.values():
            job.cancel()
        self._serial_lot.unpark_all()
        self._wake_writer.set()
        self._drained.set()
        if self._closed_event is not None:
            self._closed_event.set()

    def _fail_pending(self, error: ConnectionClosed) -> None:
        if self._role_waiting and self._fd_receive is not None:
            # a handler reads a pipe for its response: wake it (ClosedResourceError) to take the error
            # (on a message stream, the cancellation of its request that follows wakes it)
            fd = self._fd_receive.fileno()
            if fd >= 0:
                trio.lowlevel.notify_closing(fd)
        slots = list(self._pending.values())
        self._pending.clear()
        for slot in slots:
            slot.error = error.clone()
            slot.finish()

    def _check_open(self) -> None:
        if self._closed is not None:
            raise self._closed.clone()

    async def _closing_error(self, reason: str) -> ConnectionClosed:
        """``reason`` as a :class:`ConnectionClosed`, with what :attr:`closing_error` adds (bounded, shielded)."""
        if self.closing_error is not None:
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                try:
                    return await self.closing_error(reason)
                except Exception:
                    log.exception("%s: the closing_error hook raised", self.name)
        return ConnectionClosed(reason)

    def _task_done(self) -> None:
        self._busy -= 1
        if not self._busy and self._serial_waiting:
            self._serial_lot.unpark_all()

    # -- writing ---------------------------------------------------------------------------------
    def _enqueue(self, line: bytes, eager: bool = False) -> None:
        if self._closed is not None:
            return
        if self.tap is not None:
            self.tap("out", line)
        if eager and not self._outbox and not self._writing and self._fd_stream is not None:
            # Requests and responses go out at once when nothing is queued (a pipe): the peer can
            # start on them while this side goes on, instead of both sides taking turns in batches.
            # Notifications (streamed updates) are left to the writer, which coalesces them.  Safe
            # on the stream's fd: it is non-blocking, nothing else is sending (empty outbox, writer
            # not inside send_all) so order is kept, and fileno() is -1 once the stream is closed.
            fd = self._fd_stream.fileno()
            if fd >= 0:
                line = _write_at_once(fd, line)
                if not line:
                    return
        elif eager and self._send_now is not None and not self._outbox and not self._writing:
            if self._send_now(line):  # a message transport sends it now (all or none)
                return
        self._append(line)

    def _eager_sender(self) -> Callable[[bytes], None]:
        """A function that does what ``_enqueue(line, eager=True)`` does, with the checks that
        nothing can change before this side next awaits made once: for a burst of requests of
        :meth:`request_many`, each written as soon as it is made (the peer starts on it while this
        side makes the next; writing a burst at its end made the pair of 64 reads in flight slower)."""
        fd_stream = self._fd_stream
        if self.tap is not None or fd_stream is None or self._closed is not None or self._writing:
            return partial(self._enqueue, eager=True)
        fd = fd_stream.fileno()  # (-1 once the stream is closed)
        outbox = self._outbox  # (the writer swaps it for a new one only while this side awaits)
        append = self._append

        def send(line: bytes) -> None:
            if fd >= 0 and not outbox:
                line = _write_at_once(fd, line)
                if not line:
                    return
            append(line)

        return send

    def _append(self, line: bytes) -> None:
        """Queue ``line`` for the writer, waking it if the outbox was empty (unless the reader holds output)."""
        outbox = self._outbox
        if not outbox and not self._holding:  # the writer sleeps only on an empty outbox
            self._wake_writer.set()
        outbox += line

    def _flush(self, reader: bool = False) -> bool:
        """The reader is done with what it read: send what its request handlers queued (held while
        they ran, so one write takes all their answers), before the reader waits for input.

        True when the pool's reader (``reader``) is to send it itself (:meth:`_send_as_reader`)."""
        self._holding = False
        outbox = self._outbox
        if not outbox:
            return False
        fd_stream = self._fd_stream
        if self._writing or self._rec_records or self._closed is not None:
            self._wake_writer.set()
            return False
        if fd_stream is None and self._send_now is None:
            if reader and self._reader_sends:
                return True
            self._wake_writer.set()
            return False
        if fd_stream is None:  # a message transport's synchronous send: all or none
            assert self._send_now is not None
            sent = self._send_now(outbox)
        else:
            fd = fd_stream.fileno()
            try:
                sent = os.write(fd, outbox) if fd >= 0 else 0
            except OSError:  # would block, or broken: the writer retries and reports
                sent = 0
        if sent == len(outbox):
            outbox.clear()
            self._taken += 1
            self._written += 1
            if self._drain_wanted:
                self._drain_wanted = False
                self._drained.set()
            if self._written_waiters:
                self._written_lot.unpark_all()
            return False
        del outbox[:sent]
        self._wake_writer.set()
        return False

    async def _send_as_reader(self, hand_on: Callable[[], object] | None = None) -> bool:
        """The pool's reader sends the answers of its read itself (a send stream with ``reader_sends``:
        a Streamable HTTP POST, whose ``202`` takes a round trip), instead of waking the writer task
        to send them: one task step less per round trip.  Everything else is the writer's: ordering
        (nothing else is being sent: :meth:`_flush` checked), a write failure closing the connection.
        While it sends, the reader reads nothing; a peer that answers the send only once more of its
        output was read (its backpressure) would wait forever, so when the send takes more than
        ``_READER_SEND_PATIENCE`` seconds the writer gives the reading to another pool task
        (:meth:`_writer`), or calls ``hand_on`` for a transport's task in :meth:`deliver_lines`.
        Returns whether it did: the caller's reading goes on elsewhere, and it stops reading."""
        data, self._outbox = self._outbox, bytearray()
        if self._drain_wanted:
            self._drain_wanted = False
            self._drained.set()
        self._writing = True
        self._taken += 1
        self._sender_replaced = False
        self._send_hand_on = hand_on
        self._send_deadline = deadline = trio.current_time() + _READER_SEND_PATIENCE
        watch = self._writer_watch
        if watch is not None:
            watch.deadline = deadline
        try:
            await self._send_stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            await self._write_failed(exc)
            return self._sender_replaced
        finally:
            self._writing = False
            self._send_hand_on = None
            self._send_deadline = math.inf
            watch = self._writer_watch
            if watch is not None:
                watch.deadline = math.inf
            if self._outbox or self._closed is not None:  # queued meanwhile, or closing: the writer's
                self._wake_writer.set()
        self._written += 1
        if self._written_waiters:
            self._written_lot.unpark_all()
        return self._sender_replaced

    async def _write_failed(self, exc: BaseException) -> None:
        """A send of the outbox failed (the writer's or the reader's, :meth:`_send_as_reader`): what
        is queued is dropped and the connection closes with the transport's error."""
        log.debug("%s: write failed: %r", self.name, exc)
        self._outbox.clear()
        if self._closed is None:
            self._mark_closed(await self._closing_error(f"write failed: {exc!r}"))

    async def _until_taken(self) -> None:
        """Wait until the writer takes the outbox (it is then being sent) or the connection closes;
        at once when it closed or the writer ended (nothing would wake a wait begun after that: a
        turn's last ``state_update``, sent shielded while the connection closes, waited forever)."""
        if self._closed is not None or self._writer_ended:
            await trio.lowlevel.checkpoint()
            return
        if not self._drain_wanted:
            self._drained = trio.Event()
            self._drain_wanted = True
        await self._drained.wait()

    async def _backpressure(self) -> None:
        # Queue first, wait after: a message once queued is sent even if its sender is cancelled.
        if len(self._outbox) > _HIGH_WATER:
            await self._until_taken()
            self._check_open()

    async def _output_taken(self) -> None:
        """Backpressure on the input (see ``max_output_bytes``): the reader waits until the writer
        has taken the output queued so far, or the connection closed."""
        log.debug("%s: %d bytes of output wait for the peer: reading paused", self.name, len(self._outbox))
        while len(self._outbox) > self.max_output_bytes and self._closed is None:
            self._wake_writer.set()
            await self._until_taken()

    async def _writer(self) -> None:
        """The only task that writes: sends everything queued in one write, until closed and drained."""
        try:
            while True:
                if self._reader_sends:
                    # while the reader sends (_send_as_reader), this wait has its deadline: past it,
                    # the reader's send waits on the peer, and another pool task reads meanwhile
                    watch = self._writer_watch = trio.CancelScope(deadline=self._send_deadline)
                    with watch:
                        await self._wake_writer.wait()
                    self._writer_watch = None
                    if watch.cancelled_caught:
                        self._send_deadline = math.inf  # (once per send)
                        if self._writing and not self._sender_replaced and self._closed is None:
                            log.debug("%s: the reader's send waits: the reading goes on in another task", self.name)
                            self._sender_replaced = True
                            hand_on = self._send_hand_on
                            try:
                                if hand_on is None:
                                    self._new_context().run(self._give, _READ)
                                else:
                                    hand_on()
                            except Exception:  # (the nursery closed: the connection is closing)
                                log.exception("%s: handing the reading on failed", self.name)
                        continue
                    if self._writing:  # the reader sends: it wakes the writer again if more is queued
                        self._wake_writer = trio.Event()
                        continue
                else:
                    await self._wake_writer.wait()
                self._wake_writer = trio.Event()
                while self._outbox:
                    data, self._outbox = self._outbox, bytearray()  # a new buffer: data is not resized while sent
                    if self._drain_wanted:
                        self._drain_wanted = False
                        self._drained.set()
                    self._writing = True
                    self._taken += 1
                    # session store hook: the batch's records go to their sinks once it is written
                    records = self._take_records() if self._rec_records else None
                    try:
                        await self._send_stream.send_all(data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                        await self._write_failed(exc)
                        return
                    finally:
                        self._writing = False
                    if records is not None:
                        self._deliver_records(records)
                    self._written += 1
                    if self._written_waiters:
                        self._written_lot.unpark_all()
                if self._closed is not None:
                    return
        finally:
            self._rec_in_flight = False
            self._writer_ended = True
            self._drained.set()  # senders waiting for it (cancelled from outside: not closed yet)
            if self._writer_done is not None:
                self._writer_done.set()
            self._written_lot.unpark_all()

    # -- reading: the request pool ---------------------------------------------------------------
    # A task per request costs its spawn and a cancel scope (about 10 us here), and a scheduler pass
    # before it answers.  Instead, a pool of tasks serves the connection.  One of them holds the
    # reader role; it runs each request it reads itself, at once: a handler that finishes without
    # waiting (most answers a client gives) is answered before the reader reads on, with no task
    # started or woken and, when nothing can reach the request before that (no earlier
    # notification of its serial key still queued), no job either; the answers of one read
    # go out in one write.  When a handler has to wait, the reader hands its role (and the lines of
    # the read after that request) to an idle task of the pool, or a new one, and goes on with it.
    # A task runs inside one cancel scope, renewed only after a request it ran was cancelled; every
    # request starts in a fresh copy of the connection's context, so context variables a handler
    # sets reach no other.

    async def _pool_task(self, item: _Job | _ReadRole) -> None:
        me = _PoolTask(trio.lowlevel.current_task())
        work: _Job | _ReadRole | None = item
        while work is not None:
            scope = trio.CancelScope()
            job: _Job | None = None
            try:
                with scope:
                    while True:
                        if work is _READ:
                            work = await self._read_loop(scope, me)
                            if work is None:
                                return
                            if work is _HANDED:  # a handler's task reads now: wait for work
                                work = await self._park(me)
                                continue
                        assert isinstance(work, _Job)
                        job, work = work, None
                        if job.handed:
                            job.handed = False
                            self._handed -= 1
                        job.scope = scope
                        if job.coro is not None and not job.bare:  # _run_job started by the reader (this task)
                            await _resume(job.coro, job.yielded, self)
                        else:
                            if job.cancel_requested:
                                scope.cancel()
                            await self._run_job(job)
                        self._finish_job(job)
                        job = None
                        if scope.cancel_called:  # a handler that ignored its cancellation: renew the scope
                            break
                        work = await self._park(me)
            finally:
                if job is not None:  # cancelled: by its own scope (answered now) or with the connection
                    self._finish_job(job)
            if work is None:
                work = await self._park(me)

    async def _park(self, me: _PoolTask) -> _Job | _ReadRole:
        """Wait, idle, until :meth:`_give` hands this pool task a request or the reader role."""
        if self._job_context is not None:  # start the next request from the connection's context
            me.task.context = self._job_context.copy()
        me.waiting = True
        self._idle.append(me)
        await _wait_task_rescheduled(me.abort)
        work, me.work = me.work, None
        assert work is not None
        return work

    def _give(self, work: _Job | _ReadRole) -> None:
        """Hand a request or the reader role to an idle pool task, or to a new one."""
        if work is not _READ:
            assert isinstance(work, _Job)
            self._handed += 1
            work.handed = True
        idle = self._idle
        while idle:
            me = idle.pop()
            if me.waiting:
                me.work = work
                me.waiting = False
                _reschedule(me.task)
                return
        assert self._nursery is not None
        self._nursery.start_soon(self._pool_task, work, name=f"{self.name}: requests")

    def _run_new_jobs(self) -> None:
        """Run the requests of a batch the reader read, in order, each until it finishes or has to
        wait.  The first that waits becomes :attr:`_waiting` (the reader goes on with it, see
        :meth:`_read_loop`), and the requests after it are handed to other pool tasks."""
        jobs, self._new_jobs = self._new_jobs, []
        for i, job in enumerate(jobs):
            if job.cancel_requested:  # cancelled as it was read: it runs in its own scope, elsewhere
                self._give(job)
                continue
            if self._first_step(job, eager=False):  # a batch: its answers go out in one array
                for other in jobs[i + 1 :]:
                    self._give(other)
                return

    def _first_step(self, job: _Job, eager: bool) -> bool:
        """Run ``job``'s :meth:`_run_job` in the reader until it finishes (answered; ``eager`` as
        for :meth:`_finish_job`) or has to wait (it becomes :attr:`_waiting`, returns True)."""
        coro = self._run_job(job)
        context = self._new_context()
        try:
            # without job.scope: a cancellation during this step (the handler cancelling its own
            # group) marks the job, and must not cancel the reader's scope
            yielded = context.run(coro.send, None)
        except StopIteration:
            self._finish_job(job, eager=eager)
            return False
        job.coro, job.yielded = coro, yielded
        self._waiting = job, context
        return True

    async def _read_loop(self, scope: trio.CancelScope, me: _PoolTask) -> _Job | _ReadRole | None:
        """The reader role: read, frame and handle messages until a request has to wait (returns it,
        after handing the reader role to another pool task), a handler's task takes the role
        (returns ``_HANDED``, see :meth:`_read_for`) or the input ends (returns ``None`` after the
        end-of-input steps)."""
        fd_stream = self._fd_receive
        ended = True
        try:
            while True:
                if len(self._outbox) > self.max_output_bytes:
                    await self._output_taken()
                if not self._backlog:
                    try:
                        if fd_stream is not None:
                            fd = fd_stream.fileno()
                            if self._read_full or fd < 0:
                                data = await _read_pipe(fd_stream, self._read_full)
                            else:  # _read_pipe's common case, inlined: one frame less per read
                                await _wait_readable(fd)
                                try:
                                    data = os.read(fd_stream.fileno(), _READ_SIZE)  # -1 once closed: EBADF
                                except OSError:  # not readable after all, closed or broken: _read_pipe sorts it
                                    data = await _read_pipe(fd_stream, False)
                            self._read_full = len(data) == _READ_SIZE
                        else:
                            self._reader_idle = True
                            try:
                                data = bytes(await self._receive_stream.receive_some(_READ_SIZE))
                            finally:
                                self._reader_idle = False
                            self._read_full = len(data) == _READ_SIZE
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                        self._read_reason = f"read failed: {exc!r}"
                        break
                    if not data:
                        self._inline_requests = False  # the reader is ending: requests go to pool tasks
                        self._on_lines_to_pool(self._framer.close())
                        self._flush()
                        break
                    self._backlog = self._framer.feed_raw(data)
                # A large read holds hundreds of messages: they are handled in slices, so decoded
                # messages die young instead of piling up (and through the garbage collector's
                # generations) behind the reader, and the handlers they woke run in between.
                backlog = self._backlog
                if len(backlog) > _HANDOFF:
                    items = backlog[:_HANDOFF]
                    del backlog[:_HANDOFF]
                else:
                    items, self._backlog = backlog, []
                self._holding = True
                self._forget_role_offer()
                self._on_lines(items)
                if self._waiting is not None:  # a request that has to wait: this task goes on with it
                    waiting, me.task.context = self._waiting  # the rest runs where its first step did
                    self._waiting = None
                    waiting.scope = scope
                    if waiting.cancel_requested:
                        scope.cancel()
                    self._give(_READ)  # and another task reads on (the lines after it are in _backlog)
                    self._flush()
                    ended = False
                    return waiting
                if self._flush(reader=not self._backlog and not self._read_full and self._role_offer is None):
                    replaced = await self._send_as_reader()
                    self._forget_role_offer()
                    if replaced:  # another pool task reads now (see _writer)
                        ended = False
                        return _HANDED
                if self._role_offer is not None:
                    # The handler whose response this read brought reads from now on, while it waits
                    # for its next one: a round trip of a handler then wakes one task, not two.
                    offer, self._role_offer = self._role_offer, None
                    if self._can_lend and not self._backlog and not self._read_full and self._closed is None:
                        self._role_holder = offer
                        ended = False
                        return _HANDED
                if self._backlog or (self._queues and self._read_full):
                    # More to decode (the rest of this read, or the next read at once: this one
                    # filled the buffer): the handlers of this slice go first.  trio runs the
                    # tasks of one batch in either order, so when this task ran before the
                    # handlers it queued, it lets them go first once more (else two slices pile
                    # up, and the garbage collector has to walk them: 7-9% of a streaming
                    # client's CPU).
                    await trio.lowlevel.cancel_shielded_checkpoint()
                    if self._queues:
                        await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            self._holding = False
            if ended:
                if self._closed is None:
                    await self._input_ended(self._read_reason)
                # let output already queued go out before the service ends
                with trio.CancelScope(shield=True), trio.move_on_after(self.close_timeout):
                    await self._wait_writer_ended()
                self._service_scope.cancel()
        return None

    async def deliver_lines(self, data: bytes, hand_on: Callable[[], object]) -> int:
        """Transport hook: handle ``data`` (complete NDJSON lines, each ending in ``\\n``), read by a
        transport's own task, in that task, as the reader would once it read them from the receive
        stream, without waking it: one task step less per message read (a Streamable HTTP client's
        SSE readers; :mod:`acp_trio.transports.http`).

        Only when nothing can come before ``data``: the pool's reader waits for input and holds
        nothing read, and the caller's receive stream holds nothing unread (the caller checks that);
        the connection is open, its queued output under ``max_output_bytes``, and ``data`` at most
        64 messages.  Else returns 0 having done nothing: the caller writes ``data`` to the receive
        stream as usual.  Requests run at once, as the reader runs them; their answers are sent by
        this task when the send stream has ``reader_sends`` and nothing else is being sent.  The
        caller's reading must be able to go on in another task: ``hand_on()`` (synchronous, must
        not block) starts that.  It is called when a request handler has to wait (this task then
        goes on with that request until it is answered) and when this task's send waits on the peer
        for more than ``_READER_SEND_PATIENCE`` (0.05) seconds.  Returns 1 when ``data`` was
        handled, 2 when it was handled and ``hand_on`` was called: the caller then reads no more
        (its reading goes on elsewhere).  A write failure closes the connection, as the writer's do."""
        if (
            not self._reader_idle
            or self._closed is not None
            or self._read_closed is not None
            or self._backlog
            or self._waiting is not None
            or self._role_holder is not None
            or not self._inline_requests
            or self._notify_ended
            or len(self._outbox) > self.max_output_bytes
            or data.count(b"\n") > _HANDOFF
        ):
            return 0
        framer = self._direct_framer
        if framer is None:
            framer = self._direct_framer = _core.LineFramer(self._framer.max_message_size)
        self._holding = True
        self._forget_role_offer()
        # in the connection's context, not the caller's: what this starts (notification handlers, pool
        # tasks) sees none of the transport's variables, as when the pool's reader starts it
        context = self._new_context()
        context.run(self._on_lines, framer.feed_raw(data))
        waiting = self._take_waiting()
        if waiting is not None:  # a request that has to wait: this task goes on with it
            rest, self._backlog = self._backlog, []
            if rest:  # the lines after it, now and in order, as a reader that holds a request would
                context.run(self._on_lines_to_pool, rest)
            try:
                hand_on()
            except Exception:  # (the transport is closing)
                log.exception("%s: handing the reading on failed", self.name)
            self._flush()
            await self._go_on_with(*waiting)
            return 2
        handed = False
        if self._flush(reader=self._role_offer is None):
            handed = await self._send_as_reader(hand_on)
        self._forget_role_offer()  # (a handler's task takes the reading only from the pool's reader)
        return 2 if handed else 1

    def _take_waiting(self) -> tuple[_Job, contextvars.Context] | None:
        """Take :attr:`_waiting` (a method: mypy would keep it narrowed to ``None`` after the checks
        before :meth:`_on_lines` set it, see :meth:`_forget_role_offer`)."""
        waiting, self._waiting = self._waiting, None
        return waiting

    async def _go_on_with(self, job: _Job, context: contextvars.Context) -> None:
        """Go on, in this task (a transport's, see :meth:`deliver_lines`), with a request whose first
        step it ran, in its own cancel scope and in the context its first step ran in; answer it."""
        task = _current_task()
        saved, task.context = task.context, context  # (from the next step on: _resume yields first)
        try:
            with trio.CancelScope() as scope:
                job.scope = scope
                if job.cancel_requested:
                    scope.cancel()
                if job.coro is not None and not job.bare:
                    await _resume(job.coro, job.yielded, self)
                else:
                    await self._run_job(job)
        finally:
            task.context = saved
            self._finish_job(job)

    def _new_context(self) -> contextvars.Context:
        """A fresh copy of the connection's context: where each request and what starts it run."""
        base = self._job_context
        return base.copy() if base is not None else contextvars.copy_context()

    async def _input_ended(self, reason: str) -> None:
        """Nothing more can be read, so no response can come: fail what waits for one now; give
        running handlers and background tasks ``eof_grace`` seconds to finish and send their answers,
        then cancel them (their answers to a cancellation still go out), then close."""
        log.debug("%s: %s", self.name, reason)
        error = await self._closing_error(reason)
        self._read_closed = error
        self._fail_pending(error)
        if self.eof_grace is None:
            while (self._busy or self._background_scopes) and self._closed is None:
                await self._park_serial()
        elif self._busy or self._background_scopes:
            with trio.move_on_after(self.eof_grace):
                while (self._busy or self._background_scopes) and self._closed is None:
                    await self._park_serial()
            if (self._busy or self._background_scopes) and self._closed is None:
                log.debug("%s: cancelling what still runs %g s after the end of input", self.name, self.eof_grace)
                self._input_cancelled = True
                for job in list(self._inbound.values()):
                    job.cancel()
                for scope in self._background_scopes:
                    scope.cancel()
                if self._notify_nursery is not None:  # notification handlers, running or queued
                    self._notify_nursery.cancel_scope.cancel()
                with trio.move_on_after(self.close_timeout):  # what they answer to the cancellation goes out
                    while (self._busy or self._background_scopes) and self._closed is None:
                        await self._park_serial()
        self._mark_closed(error)

    def _forget_role_offer(self) -> None:
        """Drop an offer of the reader role that a read left (see :meth:`_read_loop`).  A method, not
        an assignment there: mypy would take the attribute for ``None`` until the offer is read back,
        after :meth:`_on_lines` set it, and mypyc compiles what mypy infers."""
        self._role_offer = None

    def _on_lines(self, items: list[bytes | _core.OversizedMessage]) -> None:
        """Handle the lines of one read (or a slice of them, as ``LineFramer.feed_raw`` gives them:
        each with its newline, blank ones included), in order: one call for all of them, not one
        per line, since a streamed update costs little more than that call.

        Nothing is handled once the connection closed, or its notification nursery ended (it is
        closing: cancelled from outside, before :meth:`aclose` marks it closed): a read can
        complete in the same scheduler pass as the close (trio's memory streams hand data over
        in the sender's ``send_all``), and what it holds is dropped, not started in a nursery
        that takes no more tasks.  Its requests could not be answered anyway."""
        if self._closed is not None or self._notify_ended:
            log.debug("%s: dropping %d lines read as the connection closed", self.name, len(items))
            return
        loads = _loads
        tap = self.tap
        # (Any, not bytes: an oversized line's marker, the one other item, fails to parse and goes its
        # way; a compiled module checks what it is told)
        lines: Iterator[Any] = iter(items)
        for item in lines:
            if tap is not None and type(item) is bytes and not item.isspace():  # (a blank line is no message)
                tap("in", _core.without_eol(item))
            try:
                obj = loads(item)  # (an oversized line's marker is no str or bytes: it fails here, no test before)
            except _JSONDecodeError as exc:
                if type(item) is not bytes:
                    self._on_oversized(item)
                elif not item.isspace():  # (a blank line: the framer keeps them, see feed_raw)
                    self._seq += 1
                    self._on_message(item, _core.parse_error(exc))
                continue
            self._seq += 1
            # The common cases go straight to their route, as _core.parse_value would classify them,
            # without a message object: a well-formed notification with object params (streamed
            # updates), a success response to one of our requests (an integer or string id, no other
            # member), and a request with object params and an integer or string id.
            if type(obj) is dict and obj.get("jsonrpc") == "2.0":
                if "id" not in obj:
                    method = obj.get("method")
                    params = obj.get("params")
                    if type(method) is str and type(params) is dict:
                        self._on_notification(method, params)
                        continue
                elif len(obj) == 3 and "result" in obj:
                    request_id = obj["id"]
                    if type(request_id) is int or type(request_id) is str:
                        self._on_result(request_id, obj["result"])
                        continue
                else:
                    method = obj.get("method")
                    params = obj.get("params")
                    request_id = obj["id"]
                    if (
                        type(method) is str
                        and type(params) is dict
                        and (type(request_id) is int or type(request_id) is str)
                    ):
                        if self.request_line_hooks:  # session store hook: raw request lines
                            self._request_line_hook(item, method, params)
                        # its answer goes out at once if it is the read's last line (one after another)
                        line = self._on_request(
                            request_id, method, params, None, item is items[-1] and not self._backlog
                        )
                        if line is not None:
                            self._enqueue(line)
                        elif self._waiting is not None:
                            break
                        continue
            self._on_message(item, _parse_value(obj))
            if self._waiting is not None:
                break
        else:
            return
        # A request that has to wait: the reader goes on with it, and the lines after it are left
        # for the task that takes the reader role.
        rest: list[bytes | _core.OversizedMessage] = list(lines)
        if rest:
            rest += self._backlog
            self._backlog = rest

    def _on_message(self, item: bytes, msg: Any) -> None:
        """Handle one line read, as :func:`_core.parse` classified it (``msg``)."""
        if type(msg) is _core.Batch:
            self._on_batch(msg)
        else:
            if self.request_line_hooks and type(msg) is _core.Request:  # session store hook: raw request lines
                self._request_line_hook(item, msg.method, msg.params)
            line = self._dispatch(msg, None)
            if line is not None:
                self._enqueue(line)

    def _on_oversized(self, item: _core.OversizedMessage) -> None:
        """A line over ``max_message_size``: its bytes are gone, but the id its first 4 KiB carry is
        answered (a request) or failed (a response to one of ours), so no one waits on it forever."""
        fields = _core.head_fields(item.head)
        request_id = fields.get("id")
        if not _core.is_request_id(request_id):
            request_id = None
        data = {"detail": "message too large", "limit": item.limit, "size": item.size}
        self._seq += 1
        if "method" not in fields and ("result" in fields or "error" in fields) and request_id is not None:
            log.warning("%s: dropped a response of more than %d bytes to request %r", self.name, item.limit, request_id)
            slot = self._pending.pop(request_id, None)
            if slot is not None:
                slot.error = RequestError(_core.INVALID_REQUEST, "Response too large", data)
                slot.seq = self._seq
                slot.finish()
            return
        log.warning("%s: dropped an inbound message of more than %d bytes (id %r)", self.name, item.limit, request_id)
        self._enqueue(_core.encode_error(request_id, RequestError.invalid_request(data)))

    def _dispatch(self, msg: Any, batch: list[bytes | None] | None) -> bytes | None:
        """Handle one message; returns a line to send now, if any.  In a batch, request answers go to ``batch``."""
        kind = type(msg)
        if kind is _core.Notification:
            self._on_notification(msg.method, msg.params)
        elif kind is _core.Request:
            return self._on_request(msg.id, msg.method, msg.params, batch)
        elif kind is _core.Response or kind is _core.ErrorResponse:
            self._on_response(msg)
        else:  # Invalid
            log.debug("%s: invalid message: %s", self.name, msg.error)
            return _core.encode_error(msg.id, msg.error)
        return None

    def _request_line_hook(self, line: bytes, method: str, params: Any) -> None:
        hook = self.request_line_hooks.get(method)
        if hook is not None:
            try:
                hook(_core.without_eol(line), params)
            except Exception:
                log.exception("%s: request line hook for %r raised", self.name, method)

    def _on_batch(self, batch: _core.Batch) -> None:
        answers: list[bytes | None] = []
        for msg in batch.items:
            if self.request_line_hooks and type(msg) is _core.Request and msg.id is not None:
                # session store hook: a batch's request, re-encoded on its own (the array's bytes are not kept)
                raw = _core.encode_request(msg.id, msg.method, msg.params).rstrip(b"\n")
                self._request_line_hook(raw, msg.method, msg.params)
            line = self._dispatch(msg, answers)
            if line is not None:
                answers.append(line)
        if self._new_jobs and self._inline_requests:  # its requests run now, as the reader's own do
            self._run_new_jobs()
        if answers:
            assert self._nursery is not None
            self._busy += 1
            self._nursery.start_soon(self._answer_batch, answers)

    async def _answer_batch(self, answers: list[bytes | None]) -> None:
        # request tasks fill their placeholder (None) when done; wait for all, then send one array
        try:
            while any(a is None for a in answers) and self._closed is None:
                await self._park_serial()
            parts = [a.rstrip(b"\n") for a in answers if a]
            if parts:
                self._enqueue(b"[" + b",".join(parts) + b"]\n")
        finally:
            self._task_done()

    # -- inbound notifications -------------------------------------------------------------------
    def _on_notification(self, method: str, raw: Any) -> None:
        """A notification read: ``method`` and its JSON params (``raw``: ``None`` when absent)."""
        if method == self.cancel_method and self.cancel_method is not None:
            self._on_cancel_request(raw)
            return
        route = self.routes.get(method)
        if route is None or route.kind != "notification":
            log.debug("%s: ignoring notification %r: no handler", self.name, method)
            return
        decode = route.decode
        if decode is None:
            decode = route.decode = self.converter.structure_fn(route.params_type)
        try:
            params = decode({} if raw is None else raw)
        except Exception as exc:
            log.warning("%s: dropping notification %r with invalid params: %s", self.name, method, exc)
            return
        if route.on_receive is not None:
            try:
                route.on_receive(params)
            except Exception:
                log.exception("%s: on_receive hook for %r raised", self.name, method)
        key = route.serial_key(params) if route.serial_key is not None else None
        if self.instrumentation is not None:
            route = self._traced_route(route, "notification", raw)
        if key is None:
            self._busy += 1
            self._start_notification(self._run_notification, route, params, True, name=method)
            return
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _SerialQueue()
        queue.items.append((self._seq, route, params))
        if not queue.running:
            queue.running = True
            self._busy += 1
            self._start_notification(self._drain_queue, key, queue, name=method)

    def _traced_route(self, route: Route, kind: Literal["request", "notification"], raw: Any) -> Route:
        """``route`` with its handler run inside ``instrumentation.inbound(kind, method, raw)``."""
        instrumentation = self.instrumentation
        assert instrumentation is not None
        handler = route.handler

        async def traced(params: Any) -> Any:
            with instrumentation.inbound(kind, route.method, raw):
                return await handler(params)

        return route.with_handler(traced)

    async def _run_notification(self, route: Route, params: Any, counted: bool = False) -> None:
        try:
            await route.handler(params)
        except Exception:
            log.exception("%s: notification handler for %r raised", self.name, route.method)
        finally:
            if counted:
                self._task_done()

    async def _drain_queue(self, key: Hashable, queue: _SerialQueue) -> None:
        items = queue.items
        try:
            while items:
                _seq, route, params = items[0]
                try:  # _run_notification, inlined: this loop runs once per streamed update
                    await route.handler(params)
                except Exception:
                    log.exception("%s: notification handler for %r raised", self.name, route.method)
                items.popleft()
                if self._serial_waiting:  # someone waits for the queues (a response, a batch, the reader)
                    self._serial_lot.unpark_all()
        finally:
            queue.running = False
            if not queue.items and self._queues.get(key) is queue:
                del self._queues[key]
            self._task_done()

    async def _park_serial(self) -> None:
        """Wait until the serial queues, the running requests or the background tasks change."""
        if self._serial_lot is _NOBODY_PARKED:
            self._serial_lot = trio.lowlevel.ParkingLot()
        self._serial_waiting += 1
        try:
            await self._serial_lot.park()
        finally:
            self._serial_waiting -= 1

    def _serial_blocked(self, seq: int) -> bool:
        for queue in self._queues.values():
            if queue.items and queue.items[0][0] < seq:
                return True
        return False

    async def _wait_key_before(self, key: Hashable, seq: int) -> None:
        while True:
            queue = self._queues.get(key)
            if queue is None or not queue.items or queue.items[0][0] >= seq or self._closed is not None:
                return
            await self._park_serial()

    async def _wait_serial_before(self, seq: int) -> None:
        while self._queues and self._closed is None and self._serial_blocked(seq):
            await self._park_serial()

    def _on_cancel_request(self, params: Any) -> None:
        request_id = params.get("requestId") if type(params) is dict else None
        inbound = self._inbound.get(request_id) if _core.is_request_id(request_id) else None
        if inbound is None or inbound.finished:
            log.debug("%s: cancel for unknown or finished request %r", self.name, request_id)
            return
        inbound.cancel()

    # -- inbound requests ------------------------------------------------------------------------
    def _on_request(
        self,
        request_id: RequestId | None,
        method: str,
        raw_params: Any,
        batch: list[bytes | None] | None,
        eager: bool = False,
    ) -> bytes | None:
        """An inbound request: returns an error line to send for one that cannot run.  Else it runs
        at once, in the reader (its answer queued, ``eager``: written at once if nothing is queued
        before it), or becomes :attr:`_waiting` if it has to wait; in a batch or at the end of
        input it joins :attr:`_new_jobs`."""
        route = self.routes.get(method)
        if route is None or route.kind != "request":
            log.debug("%s: method not found: %r", self.name, method)
            return _core.encode_error(request_id, RequestError.method_not_found(method))
        if request_id in self._inbound:
            return _core.encode_error(
                request_id, RequestError.invalid_request({"detail": "a request with this id is already running"})
            )
        decode = route.decode  # _decode, inlined: this runs for every request
        if decode is None:
            decode = route.decode = self.converter.structure_fn(route.params_type)
        try:
            params = decode({} if raw_params is None else raw_params)
        except Exception as exc:
            return _core.encode_error(request_id, RequestError.invalid_params(_decode_error_data(exc)))
        if route.on_receive is not None:
            try:
                route.on_receive(params)
            except Exception:
                log.exception("%s: on_receive hook for %r raised", self.name, method)
        if self.instrumentation is not None:
            route = self._traced_route(route, "request", raw_params)
        inline = batch is None and self._inline_requests
        if inline and (route.serial_key is None or not self._queues):
            # No wait for earlier notifications: run its handler now.  It gets a job only if it
            # has to wait, and most answers need nothing more.  A request in a cancel group joins
            # it then too: during this step only its own handler can cancel the group, and
            # cancel_group notes that for it (_first_group).
            group: Hashable | None = None
            if route.cancel_group is not None:
                group = self._group_of(route, params)
                if group is not None:
                    self._first_group, self._first_group_cancelled = group, False
            base = self._job_context  # _new_context, inlined: this runs for every request
            context = base.copy() if base is not None else contextvars.copy_context()
            try:
                coro = context.run(route.handler, params)
                if type(coro) is not _CoroutineType:  # an awaitable of another kind
                    coro = _awaited(coro)
                try:
                    # without job.scope: a cancellation during this step (the handler cancelling its
                    # own group) marks the job, and must not cancel the reader's scope
                    yielded = context.run(coro.send, None)
                except StopIteration as stop:
                    result = stop.value
                else:  # it has to wait: the reader goes on with it
                    job = self._inbound[request_id] = _Job(request_id, route, params, self._seq)
                    self._busy += 1
                    if group is not None:
                        self._first_group = None
                        self._join_group(job, group)
                        if self._first_group_cancelled:
                            job.group_cancelled = True
                            job.cancel()
                    job.coro, job.yielded, job.bare = coro, yielded, True
                    self._waiting = job, context
                    return None
                encode = route.encode
                if encode is None:
                    encode = route.encode = self.converter.unstructure_fn(route.result_type)
                line = _core.encode_result(request_id, encode(result))
            except RequestError as exc:
                line = _core.encode_error(request_id, exc)
            except Exception:
                log.exception("%s: handler for %r (request id %r) raised", self.name, method, request_id)
                line = _core.encode_error(request_id, RequestError.internal_error())
            if group is not None:
                self._first_group = None
                if self._first_group_cancelled:
                    line = self._cancelled_line(route, request_id, group_cancelled=True)
            # held for the one write after the read, unless nothing can join it
            self._enqueue(line, eager=eager and not self._handed)
            return None
        job = self._inbound[request_id] = _Job(request_id, route, params, self._seq)
        if route.cancel_group is not None:
            key = self._group_of(route, params)
            if key is not None:
                self._join_group(job, key)
        self._busy += 1
        if batch is not None:
            job.batch = batch
            job.index = len(batch)
            batch.append(None)
        if inline:  # it waits for earlier notifications of its serial key
            self._first_step(job, eager)
        else:
            self._new_jobs.append(job)
        return None

    def _join_group(self, job: _Job, key: Hashable) -> None:
        job.group = key
        self._groups.setdefault(key, set()).add(job)

    def _group_of(self, route: Route, params: Any) -> Hashable | None:
        """The cancel group of a request of ``route`` (which has one) with ``params``; ``None`` if it raises."""
        assert route.cancel_group is not None
        try:
            return route.cancel_group(params)
        except Exception:
            log.exception("%s: the cancel group of %r raised", self.name, route.method)
            return None

    def cancel_group(self, key: Hashable) -> None:
        """Cancel every running inbound request of the cancel group ``key`` (see :class:`Route`):
        each answers its route's ``group_cancelled_result``, at once or when its handler ends."""
        if self._first_group is not None and self._first_group == key:
            self._first_group_cancelled = True
        for job in list(self._groups.get(key, ())):
            if not job.finished:
                job.group_cancelled = True
                job.cancel()

    async def _run_job(self, job: _Job) -> None:
        """Run a request's handler (inside its pool task's scope), or go on with one whose first step
        the reader ran with no job (``job.bare``, see :meth:`_on_request`); a cancellation propagates."""
        route = job.route
        try:
            if job.bare:
                result = await _resume(job.coro, job.yielded, self)
            else:
                if route.serial_key is not None and self._queues:
                    key = route.serial_key(job.params)
                    if key is not None:
                        await self._wait_key_before(key, job.seq)
                result = await route.handler(job.params)
            encode = route.encode
            if encode is None:
                encode = route.encode = self.converter.unstructure_fn(route.result_type)
            job.line = _core.encode_result(job.request_id, encode(result))
        except RequestError as exc:
            job.line = _core.encode_error(job.request_id, exc)
        except Exception:
            log.exception("%s: handler for %r (request id %r) raised", self.name, route.method, job.request_id)
            job.line = _core.encode_error(job.request_id, RequestError.internal_error())

    def _finish_job(self, job: _Job, eager: bool = True) -> None:
        """Answer a request whose handler ended (with ``job.line``) or was cancelled (no line yet)."""
        job.finished = True
        job.scope = None
        job.coro = job.yielded = None
        request_id = job.request_id
        line = job.line
        if job.group is not None:
            group = self._groups.get(job.group)
            if group is not None:
                group.discard(job)
                if not group:
                    del self._groups[job.group]
            if job.group_cancelled:
                line = None
        if line is None:
            line = self._cancelled_line(job.route, request_id, job.group_cancelled)
        if self._inbound.get(request_id) is job:
            del self._inbound[request_id]
        batch = job.batch
        if batch is not None:
            batch[job.index] = line
            self._serial_lot.unpark_all()  # wake _answer_batch, which waits for every placeholder
        else:
            # at once, unless other requests handed out with it are about to answer: then one write takes them all
            self._enqueue(line, eager=eager and not self._handed)
        self._task_done()

    def _cancelled_line(self, route: Route, request_id: RequestId | None, group_cancelled: bool) -> bytes:
        """The answer of a request that was cancelled: with its group, at the end of input, or alone."""
        if group_cancelled:
            answer = route.group_cancelled_result
        elif self._input_cancelled:
            answer = route.input_ended_result
        else:
            answer = route.cancelled_result
        try:
            if answer is None:
                return _core.encode_error(request_id, RequestError.request_cancelled())
            encode = route.encode
            if encode is None:
                encode = route.encode = self.converter.unstructure_fn(route.result_type)
            return _core.encode_result(request_id, encode(answer()))
        except Exception:
            log.exception("%s: answering the cancelled request %r (id %r) failed", self.name, route.method, request_id)
            return _core.encode_error(request_id, RequestError.internal_error())

    # -- inbound responses -----------------------------------------------------------------------
    def _on_response(self, msg: _core.Response | _core.ErrorResponse) -> None:
        if type(msg) is _core.Response:
            self._on_result(msg.id, msg.result)
            return
        assert isinstance(msg, _core.ErrorResponse)
        slot = self._pending.pop(msg.id, None) if msg.id is not None else None
        if slot is None:
            log.debug("%s: dropping a response for unknown request id %r", self.name, msg.id)
            return
        slot.error = msg.error
        slot.seq = self._seq
        slot.finish()

    def _on_result(self, request_id: RequestId, result: Any) -> None:
        """A success response: wake the caller waiting on ``request_id`` with ``result``."""
        slot = self._pending.pop(request_id, None)
        if slot is None:
            log.debug("%s: dropping a response for unknown request id %r", self.name, request_id)
            return
        task = slot.task
        if task is None and type(slot) is _FanSlot:
            task = slot.fan.task
        if task is not None and task in self._resumers and self._role_holder is None:
            self._role_offer = task  # see _read_loop
        slot.result = result
        slot.seq = self._seq
        slot.finish()

    # -- outbound --------------------------------------------------------------------------------
    async def request(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """Send a request with JSON ``params``; return the JSON result.

        ``timeout``: seconds to wait for the response (``None``: no limit).  Raises
        :class:`RequestError` (the peer answered with an error), :class:`RequestTimeout` (after
        sending ``$/cancel_request``), :class:`ConnectionClosed`.  If the calling task is cancelled
        while waiting, ``$/cancel_request`` is sent for the request and the cancellation propagates.
        """
        if self._closed is not None:
            raise self._closed.clone()
        if self._read_closed is not None:
            raise self._read_closed.clone()
        if self.instrumentation is not None:
            params = self.instrumentation.outbound("request", method, params)
        slot = _Slot()
        request_id = self._next_request_id
        self._next_request_id = request_id + 1
        self._pending[request_id] = slot
        # at once when nothing is queued before it, even with others in flight: the peer starts on
        # each request while this side wakes the next caller, instead of the two sides taking
        # turns with batches (64 reads in flight: 45 -> 27 ms a pair, the same CPU)
        self._enqueue(_encode_request(request_id, method, params), eager=True)
        try:
            if len(self._outbox) > _HIGH_WATER:
                await self._backpressure()
            if timeout is None:
                if slot.done:
                    await trio.lowlevel.checkpoint()
                else:
                    task = _current_task()
                    if self._role_holder is task:
                        await self._read_for(slot, task)
                    else:  # slot.wait(), inlined: one frame less per request
                        slot.task = task
                        await _wait_task_rescheduled(slot.abort)
            else:
                with trio.move_on_after(timeout):
                    await slot.wait()
                if not slot.done:
                    self._cancel_outbound(request_id)
                    raise RequestTimeout(method, timeout, request_id)
        except BaseException:
            self._cancel_outbound(request_id)
            raise
        if self._queues:
            await self._wait_serial_before(slot.seq)
        if slot.error is not None:
            raise slot.error
        return slot.result

    # -- the reader role, held by a handler's task ------------------------------------------------
    # A request handler that sends requests one after another (an agent reading files or asking for
    # permissions during a prompt turn) would wake two tasks per round trip: the reader, which reads
    # the response, then the handler's.  Instead, when the pool's reader wakes a handler run by a
    # pool task (through _resume) with the response it read, it gives that task the reader role with
    # it (_read_loop), and parks.  While the handler waits for its next response it reads and handles
    # the input itself (_read_for); as soon as it yields to trio for anything else, or ends, _resume
    # hands the role back to the pool (_release_role).  Requests it reads go to pool tasks, not run
    # in it.  Input ended, a read error, a large read and a closed connection go back to the pool's
    # reader too, which handles them as it always does.

    async def _read_for(self, slot: _Slot | _Fan, task: trio.lowlevel.Task) -> None:
        """Hold the reader role in ``task`` (the caller of :meth:`request`, or of :meth:`request_many`:
        ``slot`` is then its :class:`_Fan`) until ``slot`` is answered (``slot.done``); hand it back
        to the pool and wait on ``slot`` when the input needs the pool's reader."""
        answered = False  # slot answered: the role stays with the task (_resume hands it back)
        try:
            answered = await self._read_until_answered(slot)
        finally:
            if not answered and self._role_holder is task:
                self._release_role()
        if not answered and not slot.done:
            slot.task = task
            await _wait_task_rescheduled(slot.abort)

    async def _read_until_answered(self, slot: _Slot | _Fan) -> bool:
        """:meth:`_read_for`'s reads: True once ``slot`` is answered, False when the input needs the
        pool's reader (closed, ended, failed, or a large read)."""
        fd_stream = self._fd_receive
        while True:
            if len(self._outbox) > self.max_output_bytes:  # (the pool's reader waits for the writer)
                return False
            if fd_stream is None:  # a message transport's lendable stream
                data = await self._receive_lent()
            else:
                fd = fd_stream.fileno()
                if fd < 0:
                    return False
                self._role_waiting = True
                try:
                    await _wait_readable(fd)
                except trio.ClosedResourceError:  # closed (see _fail_pending)
                    return False
                finally:
                    self._role_waiting = False
                try:
                    data = os.read(fd, _READ_SIZE)
                except BlockingIOError:
                    continue
                except OSError:  # the pool's reader meets it again, and reports it
                    return False
            if not data:  # the end of input (or closed, failed): the pool's reader ends the connection
                return False
            items = self._framer.feed_raw(data)
            full = len(data) == _READ_SIZE  # (_read_full is false while the role is lent)
            if full or len(items) > _HANDOFF:
                # a large read (and more may wait): the pool's reader handles it, a slice at a time
                self._backlog, self._read_full = items, full
                return False
            # in the connection's context, not the handler's: what this read starts (notification
            # handlers, pool tasks) and the hooks it runs see none of the handler's variables
            base = self._job_context  # _new_context, inlined: this runs for every read
            (base.copy() if base is not None else contextvars.copy_context()).run(self._on_lines_to_pool, items)
            self._flush()
            if self._closed is not None:
                return False
            if slot.done:
                return True

    async def _receive_lent(self) -> bytes:
        """One read of a lendable message stream in the role holder's task (see :meth:`_read_until_answered`);
        ``b""`` when the pool's reader is to take over: the end of input (the stream says it again)
        or an error (it fails again)."""
        self._role_waiting = True
        try:
            return bytes(await self._receive_stream.receive_some(_READ_SIZE))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return b""
        finally:
            self._role_waiting = False

    def _on_lines_to_pool(self, items: list[bytes | _core.OversizedMessage]) -> None:
        """:meth:`_on_lines` with every request read handed to a pool task, none run here: in a
        handler's task that holds the reader role (a first step run there would tie the request to
        it, see :meth:`_read_for`), and at the end of input."""
        inline, self._inline_requests = self._inline_requests, False
        self._holding = True
        try:
            self._on_lines(items)
        finally:
            self._inline_requests = inline
        jobs = self._new_jobs
        if jobs:
            self._new_jobs = []
            for job in jobs:
                self._give(job)

    def _release_role(self) -> None:
        """The handler's task stops reading: a pool task takes the reader role back (started, if
        none is idle, from the connection's context, not the handler's)."""
        self._role_holder = None
        try:
            self._new_context().run(self._give, _READ)
        except RuntimeError:  # the service's nursery is closed: nothing reads any more
            log.debug("%s: no pool task to take the reader role back", self.name)

    async def request_many(
        self, method: str, params: Iterable[Any], *, limit: int = 64, timeout: float | None = None
    ) -> list[Any]:
        """Send a request ``method`` for each JSON params of ``params``, at most ``limit`` in flight;
        return their JSON results, in the order of ``params``.

        What a task per request (each awaiting :meth:`request`) does, in one task: it is woken once
        for all the responses one read brings, not once per response, and sends the next requests
        then.  ``timeout``: seconds for the whole call (``None``: no limit).  When a request fails,
        ``$/cancel_request`` is sent for every one still in flight and nothing more is sent: raises
        :class:`RequestError` (the first error response to arrive), :class:`RequestTimeout` (naming
        the oldest request in flight), :class:`ConnectionClosed`; a cancellation of the calling
        task propagates the same way.  ``ValueError`` if ``limit`` is less than 1.  Like
        :meth:`request`, it returns once the notifications read before the last response were handled.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit!r}")
        todo = list(params)
        results: list[Any] = [None] * len(todo)
        if self.instrumentation is not None:
            todo = [self.instrumentation.outbound("request", method, p) for p in todo]
        fan = _Fan()
        in_flight: dict[int, _FanSlot] = {}
        sent = answered = seq = 0
        waited = False
        deadline = trio.current_time() + timeout if timeout is not None else math.inf
        try:
            with trio.CancelScope(deadline=deadline) as scope:
                while answered < len(todo):
                    if self._closed is not None:
                        raise self._closed.clone()
                    if self._read_closed is not None:
                        raise self._read_closed.clone()
                    send = self._eager_sender()
                    while sent < len(todo) and len(in_flight) < limit:
                        request_id = self._next_request_id
                        self._next_request_id = request_id + 1
                        line = _encode_request(request_id, method, todo[sent])  # (first: one that fails is not sent)
                        slot = _FanSlot(fan, sent, request_id)
                        self._pending[request_id] = in_flight[request_id] = slot
                        send(line)
                        sent += 1
                    if len(self._outbox) > _HIGH_WATER:
                        await self._backpressure()
                    if not fan.done:  # (answered at once only when the connection failed meanwhile)
                        waited = True
                        task = _current_task()
                        if self._role_holder is task:
                            await self._read_for(fan, task)
                        else:
                            fan.task = task
                            await _wait_task_rescheduled(fan.abort)
                    done, fan.done = fan.done, []
                    for slot in done:
                        del in_flight[slot.request_id]
                        if slot.error is not None:
                            raise slot.error
                        results[slot.index] = slot.result
                        seq = max(seq, slot.seq)
                    answered += len(done)
            if scope.cancelled_caught:
                raise RequestTimeout(method, cast(float, timeout), min(in_flight))
            if not waited:
                await trio.lowlevel.checkpoint()
        finally:
            for request_id in in_flight:
                self._cancel_outbound(request_id)
        if self._queues:
            await self._wait_serial_before(seq)
        return results

    def _cancel_outbound(self, request_id: int) -> None:
        if self._pending.pop(request_id, None) is not None and self.cancel_method is not None:
            log.debug("%s: cancelling outbound request %r", self.name, request_id)
            self._enqueue(_core.encode_notification(self.cancel_method, {"requestId": request_id}))

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification with JSON ``params``.  Raises :class:`ConnectionClosed`."""
        if self.queue_notification(method, params):
            await self._backpressure()

    def queue_notification(self, method: str, params: Any = None) -> bool:
        """Queue a notification without waiting; True when the sender should now wait for the writer
        (``await conn.wait_writable()``).  For hot loops that stream; raises :class:`ConnectionClosed`."""
        if self._closed is not None:
            raise self._closed.clone()
        encode = self._encoders.get(method)
        if encode is None or self.instrumentation is not None:
            line = self.encode_notification(method, params)  # fills _encoders
        else:  # the streaming hot path: no call to encode_notification
            line = encode(params)
        if self.tap is not None:
            self.tap("out", line)
        self._append(line)  # never eager: the writer coalesces notifications
        return len(self._outbox) > _HIGH_WATER

    def notification_queue(self, method: str) -> Callable[[Any], bool]:
        """:meth:`queue_notification` for one ``method``, as a function ``(params) -> bool``: the same,
        with the method's envelope encoded once, for a sender that streams one method."""
        prefix = _core.notification_prefix(method)
        dumps = _dumps

        def queue(params: Any) -> bool:
            if params is None or self._closed is not None or self.instrumentation is not None or self.tap is not None:
                return self.queue_notification(method, params)
            outbox = self._outbox  # _append, inlined, taking the line in its three parts
            if not outbox and not self._holding:
                self._wake_writer.set()
            outbox += prefix
            outbox += dumps(params)
            outbox += b"}\n"
            return len(outbox) > _HIGH_WATER

        return queue

    # -- session store hooks (acp_trio.session_store): the exact lines, recorded and replayed ------
    def encode_notification(self, method: str, params: Any = None) -> bytes:
        """The line :meth:`queue_notification` would send for ``method`` and JSON ``params`` (ends in ``\\n``)."""
        if self.instrumentation is not None:
            params = self.instrumentation.outbound("notification", method, params)
        encode = self._encoders.get(method)  # streamed updates come through here: one encoder per method
        if encode is None:
            encode = self._encoders[method] = _core.notification_encoder(method)
        return encode(params)

    def queue_line_into(self, line: bytes, record: bytes, sink: Callable[[bytes], object]) -> bool:
        """Queue the encoded message ``line`` (ends in ``\\n``); once the writer has written it, hand ``record``
        (what to keep of it) to ``sink``.  True when the sender should now ``await conn.wait_writable()``.

        When a batch was written, the writer calls ``sink(b"\\n".join(records))`` for each run of
        consecutive records with the same sink, in order; a batch whose write fails hands over none
        (what was not written is not kept).  Raises :class:`ConnectionClosed`.
        """
        if self._closed is not None:
            raise self._closed.clone()
        self._enqueue(line)
        records = self._rec_records
        if sink is not self._rec_sink:
            if not records:
                self._rec_sink = sink
            elif self._rec_sinks is None:  # a second sink in this batch: one sink per record from now on
                self._rec_sinks = [self._rec_sink] * len(records)  # type: ignore[list-item]
        if self._rec_sinks is not None:
            self._rec_sinks.append(sink)
        records.append(record)
        return len(self._outbox) > _HIGH_WATER

    @property
    def records_pending(self) -> bool:
        """Whether lines queued with :meth:`queue_line_into` wait to be written (their records not handed over yet)."""
        return bool(self._rec_records) or self._rec_in_flight

    def _take_records(self) -> tuple[list[bytes], Any, Any]:
        taken = self._rec_records, self._rec_sink, self._rec_sinks
        self._rec_records, self._rec_sink, self._rec_sinks = [], None, None
        self._rec_in_flight = True
        return taken

    def _deliver_records(self, taken: tuple[list[bytes], Any, Any]) -> None:
        """Hand the records of a written batch to their sinks, in order."""
        records, sink, sinks = taken
        self._rec_in_flight = False
        try:
            if sinks is None:
                sink(b"\n".join(records))
            else:
                start = 0
                for i in range(1, len(records) + 1):
                    if i == len(records) or sinks[i] is not sinks[start]:
                        sinks[start](b"\n".join(records[start:i]))
                        start = i
            if self.records_handed is not None:  # the store's writer may be asleep: there is work now
                self.records_handed()
        except Exception:
            log.exception("%s: a session store sink raised", self.name)

    async def wait_written(self) -> None:
        """Wait until every line queued so far has been written to the send stream, and the records of
        :meth:`queue_line_into` handed over (at once when nothing is queued).  Also returns when the
        writer stopped (the connection closed, or a write failed: then those lines were not written)."""
        target = self._taken + (1 if self._outbox else 0)
        if self._written >= target or self._writer_ended:
            await trio.lowlevel.checkpoint()
            return
        if self._written_lot is _NOBODY_PARKED:
            self._written_lot = trio.lowlevel.ParkingLot()
        while self._written < target and not self._writer_ended:
            self._written_waiters += 1
            try:
                await self._written_lot.park()
            finally:
                self._written_waiters -= 1

    def queue_lines(self, data: bytes) -> bool:
        """Queue already-encoded messages (``data``: one or more lines, each ending in ``\\n``) as they are;
        True when the sender should now ``await conn.wait_writable()``.  Raises :class:`ConnectionClosed`."""
        if self._closed is not None:
            raise self._closed.clone()
        if self.tap is not None and data.count(b"\n") > 1:
            for line in data.splitlines(keepends=True):
                self._enqueue(line)
        else:
            self._enqueue(data)
        return len(self._outbox) > _HIGH_WATER

    async def wait_writable(self) -> None:
        """Wait until the writer has taken what is queued beyond the high-water mark (64 KiB)."""
        if len(self._outbox) > _HIGH_WATER:
            await self._backpressure()

    async def send_request(self, spec: MethodSpec, params: Any, *, timeout: float | None = None) -> Any:
        """Typed :meth:`request`: encode ``params`` as ``spec.params_type``, decode the result as
        ``spec.result_type`` (raises :class:`acp_trio.DecodeError` if it does not fit)."""
        wire = self.converter.unstructure_fn(spec.params_type)(params)
        return self.decode_result(spec, await self.request(spec.method, wire, timeout=timeout))

    def decode_result(self, spec: MethodSpec, result: Any) -> Any:
        """Decode a JSON ``result`` as ``spec.result_type``; raises :class:`acp_trio.DecodeError`.

        ``null`` reads as ``{}`` when the result type has no required field: the spec's own examples
        (``fs/write_text_file``, ``session/load``) and peers on the official Python SDK answer the
        empty responses with ``"result": null``, and the TypeScript SDK reads that as ``{}`` too.
        """
        structure = self.converter.structure_fn(spec.result_type)
        if result is None:
            try:
                return structure({})
            except DecodeError:
                pass
        return structure(result)

    async def send_notification(self, spec: MethodSpec, params: Any) -> None:
        """Typed :meth:`notify`: encode ``params`` as ``spec.params_type``."""
        await self.notify(spec.method, self.converter.unstructure_fn(spec.params_type)(params))


def _write_at_once(fd: int, line: bytes) -> bytes:
    """Write ``line`` to the non-blocking ``fd`` now; return what was not written (``b""``: all of
    it), for the writer task to send.  A write that would block or fails writes nothing here: the
    writer retries it and reports a broken pipe."""
    try:
        sent = os.write(fd, line)
    except OSError:
        return line
    return line[sent:] if sent < len(line) else b""


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


@types.coroutine
def _resume(coro: Any, yielded: Any, conn: Connection) -> Any:
    """Go on with a coroutine whose first step ran by hand (``coro.send(None)`` returned ``yielded``):
    pass what it yields to trio and what trio sends or throws back, until it returns; as ``await``
    would have, in the same task.  The task may hold ``conn``'s reader role meanwhile (see
    :meth:`Connection._read_for`): it is handed back when the coroutine yields for anything but
    waiting for input in :meth:`Connection._read_for`, and when it ends."""
    task = _current_task()
    resumers = conn._resumers
    if resumers is _NO_TASKS:
        resumers = conn._resumers = set()
    resumers.add(task)
    try:
        while True:
            if conn._role_holder is task and not conn._role_waiting:
                conn._release_role()
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    yielded = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration as stop:
                    return stop.value
    finally:
        resumers.discard(task)
        if conn._role_holder is task:
            conn._release_role()


def _pollable_pipe(stream: Any) -> bool:
    """Whether ``stream`` is a ``trio.lowlevel.FdStream`` on a pipe or a socket (what :func:`_read_pipe`
    reads); a regular file or a device (stdin redirected from a file, ``/dev/null``) cannot be
    waited on with epoll, and its reads never block: those keep the stream's ``receive_some``."""
    if _FdStream is None or not isinstance(stream, _FdStream):
        return False
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def _read_pipe(stream: Any, full: bool) -> bytes:
    """One read (at most ``_READ_SIZE`` bytes) from a ``trio.lowlevel.FdStream``, like its ``receive_some``
    with one yield instead of two: when the last read drained the pipe (``full`` false), wait until
    it is readable and read, instead of checkpointing, trying a read that would fail, then waiting;
    after a full read, checkpoint (so the handlers it woke run) and read.  Raises
    ``trio.ClosedResourceError`` once the stream was closed, ``trio.BrokenResourceError`` on a read error."""
    if full:
        await trio.lowlevel.checkpoint()
    else:
        fd = stream.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the stream was closed")
        await trio.lowlevel.wait_readable(fd)
    fd = stream.fileno()  # again: the stream may have been closed meanwhile (-1: EBADF below)
    while True:
        try:
            return os.read(fd, _READ_SIZE)
        except BlockingIOError:
            await _wait_fd(stream)
            fd = stream.fileno()
        except OSError as exc:
            if exc.errno == errno.EBADF:
                raise trio.ClosedResourceError("the stream was closed") from None
            raise trio.BrokenResourceError from exc


async def _wait_fd(stream: Any) -> None:
    fd = stream.fileno()
    if fd < 0:
        raise trio.ClosedResourceError("the stream was closed")
    await trio.lowlevel.wait_readable(fd)


def _decode_error_data(exc: Exception) -> Any:
    path = getattr(exc, "json_path", None)
    if path is None:
        return {"detail": str(exc)}
    return {"path": path, "expected": getattr(exc, "expected", None), "detail": str(exc)}


__all__ = ["Connection", "ConnectionClosed", "RequestTimeout", "Route", "Tap"]

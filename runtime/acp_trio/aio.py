"""asyncio code inside acp-trio, and acp-trio inside asyncio programs (extra ``acp-trio[asyncio]``).

**asyncio inside acp-trio** (handlers awaiting asyncio-only libraries: pydantic-ai, LangChain, a model
SDK's asyncio client): wrap serving in :func:`open_loop`, then await asyncio code from any trio task
of the block with :func:`run` (a coroutine function) or :func:`iterate` (an async iterator)::

    async with acp_trio.aio.open_loop():
        await acp_trio.serve_agent_stdio(MyAgent())  # inside trio.run

    # in a handler (a trio task):
    reply = await acp_trio.aio.run(client.complete, prompt)
    async for chunk in acp_trio.aio.iterate(client.stream(prompt)):
        await turn.say(chunk)

It runs on trio-asyncio (``trio-asyncio>=0.16,<0.17``): one asyncio event loop per block, whose
callbacks and tasks run inside the trio run, in the same thread.  Chosen over the alternatives
because: no thread per call (a worker thread per ``asyncio.run`` would copy every object across
threads and multiply event loops); one loop for the whole block, so an asyncio client object made in
one handler (an HTTP connection pool, an MCP session) works in the next; asyncio libraries see a real
running loop (``asyncio.get_running_loop()``, ``create_task``, subprocesses, sockets, ``sniffio``
says ``"asyncio"``); and cancellation can cross because both sides share one scheduler.  anyio does
not run asyncio-only code under trio (it picks one backend per run), and trio's guest mode is the
other direction (trio on a running asyncio loop: :func:`trio_portal` below).

Cancellation and errors (trio → asyncio):

- a trio cancellation of the awaiting task (``session/cancel`` cancelling an agent's ``prompt``, a
  ``trio.move_on_after``) cancels the asyncio task (``asyncio.CancelledError`` at its current
  ``await``; its ``finally`` blocks run) and :func:`run` returns only once that task has finished,
  then raises ``trio.Cancelled``: the same bound as a trio handler, which also runs its cleanup
  before the turn ends;
- an asyncio task cancelled by asyncio code (``task.cancel()`` from elsewhere, a library cancelling
  its own work) is not a trio cancellation, so it raises :class:`CancelledByAsyncio` (an
  ``Exception``, the ``asyncio.CancelledError`` as its ``__cause__``): in a handler it is the
  runtime's -32603 like any other failure, never a silent stop;
- any other exception comes out as itself: a ``RequestError`` raised on the asyncio side reaches
  the client with its code, anything else is -32603, exactly as from a trio handler.

**acp-trio inside asyncio programs** (a FastAPI endpoint, a Textual app, ``asyncio.run``): open a
:func:`trio_portal` on the running asyncio loop and await trio functions through it::

    async with acp_trio.aio.trio_portal() as portal:
        stop_reason = await portal.run(one_turn, "hello")

It runs trio in guest mode (``trio.lowlevel.start_guest_run``) on the asyncio loop: trio's tasks
run in the loop's thread between asyncio's callbacks, no thread per call, and trio-asyncio is not
needed.  Guest mode rather than trio-asyncio's ``trio_as_aio``: the program keeps the loop it has
(``asyncio.run``'s, uvicorn's, uvloop), where ``trio_as_aio`` needs the whole program to run on
trio-asyncio's loop.  (On a loop that is trio-asyncio's already, the portal is a trio task of
that loop's run instead.)  An asyncio task
cancelled while awaiting :meth:`TrioPortal.run` cancels the trio task and raises
``asyncio.CancelledError`` once it has finished; a trio task cancelled from the trio side (the
portal closing under it) raises ``asyncio.CancelledError`` in its awaiter; exceptions come out as
themselves.  :meth:`TrioPortal.wrap_async_context` holds a trio context manager (a connection) open
across asyncio code.  Leaving the portal's block ends the trio run and waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import signal
import sys
import threading
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

import outcome
import trio

from ._nursery import body_unwrapped

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["CancelledByAsyncio", "Iteration", "TrioPortal", "iterate", "open_loop", "run", "trio_portal"]

_T = TypeVar("_T")
_P = ParamSpec("_P")

_WRAP_HINT = "wrap the trio code that serves or calls it in `async with acp_trio.aio.open_loop():`"


def _trio_asyncio() -> ModuleType:
    try:
        import trio_asyncio  # type: ignore[import-untyped]
    except ModuleNotFoundError as exc:  # pragma: no cover - the extra is installed in the tests
        raise ModuleNotFoundError(
            "acp_trio.aio runs asyncio code on trio-asyncio: pip install 'acp-trio[asyncio]'"
        ) from exc
    module: ModuleType = trio_asyncio
    _repair_anyio()
    return module


def _repair_anyio() -> None:
    """trio-asyncio replaces ``asyncio.get_running_loop`` and ``asyncio.current_task`` when
    imported; anyio's asyncio backend binds both by name when it is imported, so one imported first
    (anyio's pytest plugin, a library imported early) keeps asyncio's own, and anyio's cancel scopes,
    task groups and timeouts inside the loop fail with "no running event loop".  Point its bindings
    at the current functions."""
    backend = sys.modules.get("anyio._backends._asyncio")
    if backend is None:
        return
    for name in ("get_running_loop", "current_task"):
        current = getattr(asyncio, name)
        if getattr(backend, name, current) is not current:
            setattr(backend, name, current)


class CancelledByAsyncio(Exception):
    """The asyncio side was cancelled by asyncio code, not by trio.

    Raised by :func:`run` and :func:`iterate` when the asyncio task ends with
    ``asyncio.CancelledError`` while no trio cancellation asked for it (``task.cancel()`` called by
    other asyncio code, a library cancelling its own work).  An ``Exception``, so in a handler it
    becomes the runtime's -32603 (a trio handler's failure), never a silent stop; the original
    ``asyncio.CancelledError`` is its ``__cause__``.  To stop a turn, cancel the trio side
    (``session/cancel``, a cancel scope): that cancels the asyncio task too.
    """


def _current_loop() -> Any:
    """The trio-asyncio loop of the enclosing :func:`open_loop` block, or ``RuntimeError``."""
    trio.lowlevel.current_task()  # RuntimeError outside trio: "must be called from async context"
    loop = _trio_asyncio().current_loop.get()
    if loop is None:
        raise RuntimeError(f"acp_trio.aio: no asyncio loop is open in this trio task: {_WRAP_HINT}")
    if loop.is_closed():
        raise RuntimeError(
            f"acp_trio.aio: the asyncio loop this task inherited has closed (its open_loop() block ended): {_WRAP_HINT}"
        )
    return loop


@asynccontextmanager
async def open_loop() -> AsyncIterator[asyncio.AbstractEventLoop]:
    """An asyncio event loop (trio-asyncio's) for the block: ``async with open_loop() as loop:``.

    Every trio task started inside the block (the connections' handlers of a ``run_agent_stdio``,
    ``spawn_agent`` or ``AcpApp`` served in it) can await asyncio code with :func:`run` and
    :func:`iterate`.  Reentrant: inside an open loop it yields that loop and leaves it open.  The
    entry points do not open one by themselves: wrap serving in it (the integrations do it for their
    users).  Leaving the block cancels the asyncio tasks still running and waits for them, as
    ``asyncio.run`` does.  Must be called from trio (``RuntimeError`` otherwise); needs the extra
    ``acp-trio[asyncio]`` (``ModuleNotFoundError`` naming it otherwise).
    """
    trio_asyncio = _trio_asyncio()
    existing = trio_asyncio.current_loop.get()
    if existing is not None and not existing.is_closed():
        yield existing
        return
    async with body_unwrapped(trio_asyncio.open_loop()) as loop:  # its nurseries would group the body's exception
        yield loop


async def _call(async_fn: Callable[..., Awaitable[_T]], args: tuple[Any, ...], kwargs: dict[str, Any]) -> _T:
    # called inside the asyncio task: libraries that look for the running loop when called find it
    return await async_fn(*args, **kwargs)


async def run(async_fn: Callable[_P, Awaitable[_T]], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """From trio, await ``async_fn(*args, **kwargs)`` (an asyncio coroutine function) as an asyncio
    task on the loop of the enclosing :func:`open_loop`, and return its result.

    - A trio cancellation of the caller cancels the asyncio task (``asyncio.CancelledError`` at its
      current ``await``) and returns only once the task has finished (its ``finally`` blocks ran),
      then raises ``trio.Cancelled``.  If the task swallows the cancellation and returns a value,
      that value is returned and the caller's next checkpoint raises ``trio.Cancelled``.
    - The asyncio task cancelled by asyncio code: :class:`CancelledByAsyncio`.
    - Any other exception comes out as itself (``RequestError``: the client gets its code).

    Raises ``RuntimeError`` outside an :func:`open_loop` block (or after it ended), ``TypeError``
    when given a coroutine object (``run(fn(x))``) instead of the function and its arguments.
    """
    if inspect.iscoroutine(async_fn):
        async_fn.close()
        raise TypeError("acp_trio.aio.run takes the function and its arguments: run(fn, *args), not run(fn(*args))")
    loop = _current_loop()
    coro = _call(async_fn, args, kwargs)
    try:
        result: _T = await loop.run_aio_coroutine(coro)
    except asyncio.CancelledError as exc:  # trio did not ask for it: trio-asyncio raised trio.Cancelled then
        raise CancelledByAsyncio(
            f"the asyncio task running {_name(async_fn)} was cancelled by asyncio code, not by trio"
        ) from exc
    return result


def _name(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


class Iteration(AsyncIterator[_T], Generic[_T]):
    """What :func:`iterate` returns: a trio async iterator over an asyncio async iterable, and an
    async context manager that closes it (``async with iterate(x) as items: async for item in items``).

    One asyncio task iterates the source from its first item to its end (so an async generator that
    holds an anyio cancel scope or a ``contextvars`` value across ``yield`` works) and hands each
    item over a trio channel; it reads at most one item ahead of the consumer.  A trio cancellation
    while waiting for an item ends the iteration: the asyncio task is cancelled and awaited (the
    source's ``aclose()`` runs in it), then ``trio.Cancelled`` is raised; later ``__anext__`` calls
    raise ``StopAsyncIteration``.  Leaving early (``break``) closes the source when :meth:`aclose`
    runs (the ``async with`` form, ``contextlib.aclosing``), else when the :func:`open_loop` block
    ends.  The source's exception comes out of ``__anext__`` as itself; an asyncio-side
    cancellation as :class:`CancelledByAsyncio`.
    """

    def __init__(self, source: AsyncIterable[_T]) -> None:
        self._source = source
        self._task: asyncio.Task[None] | None = None
        self._receive: trio.MemoryReceiveChannel[_T] | None = None
        self._closed = False

    def __aiter__(self) -> Iteration[_T]:
        return self

    async def __aenter__(self) -> Iteration[_T]:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def __anext__(self) -> _T:
        if self._closed:
            raise StopAsyncIteration
        if self._receive is None:
            self._start()
        assert self._receive is not None
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            pass  # the source ended (or failed): the task's outcome says which
        except BaseException:
            await self.aclose()
            raise
        self._closed = True
        await self._outcome()
        raise StopAsyncIteration

    def _start(self) -> None:
        loop = _current_loop()
        send, self._receive = trio.open_memory_channel[_T](0)
        self._task = loop.create_task(self._pump(loop, send))

    async def _pump(self, loop: Any, send: trio.MemorySendChannel[_T]) -> None:
        # the asyncio task: the whole iteration, then the channel's end
        iterator = aiter(self._source)
        try:
            while True:
                try:
                    item = await anext(iterator)
                except StopAsyncIteration:
                    break
                try:
                    send.send_nowait(item)  # the consumer waits already: no trio task needed
                except trio.WouldBlock:
                    await loop.trio_as_future(send.send, item)
        finally:
            try:
                aclose = getattr(iterator, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                send.close()

    async def _outcome(self) -> None:
        """Wait (shielded: the task was cancelled or has ended) for the task; raise its exception."""
        assert self._task is not None
        with trio.CancelScope(shield=True):
            try:
                await _trio_asyncio().run_aio_future(self._task)
            except asyncio.CancelledError as exc:
                raise CancelledByAsyncio(
                    f"the asyncio task iterating {self._source!r} was cancelled by asyncio code, not by trio"
                ) from exc

    async def aclose(self) -> None:
        """Stop the iteration: cancel the asyncio task, wait until it has finished (the source's
        ``aclose()`` ran) and close the channel.  Idempotent.  An exception the source raised while
        closing (or while reading ahead, after the last item taken) comes out as itself."""
        if self._receive is None or self._task is None:
            self._closed = True
            return
        if self._task.done() and self._closed:
            return
        self._closed = True
        self._task.cancel()
        self._receive.close()
        with contextlib.suppress(CancelledByAsyncio, trio.BrokenResourceError):
            await self._outcome()


def iterate(source: AsyncIterable[_T]) -> Iteration[_T]:
    """From trio, iterate an asyncio async iterable (an LLM stream, an async generator):
    ``async for item in iterate(source)``; ``async with iterate(source) as items:`` closes it on
    leaving.  Inside an :func:`open_loop` block; the rules (one asyncio task for the whole
    iteration, cancellation, errors) are :class:`Iteration`'s.  Raises ``RuntimeError`` at the
    first item outside an :func:`open_loop` block.
    """
    return Iteration(source)


# -- the other direction: trio (guest mode) on a running asyncio loop ------------------------------

_portals: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TrioPortal] = weakref.WeakKeyDictionary()


class TrioPortal:
    """A trio run in guest mode on a running asyncio loop: what :func:`trio_portal` yields.

    :meth:`run` awaits a trio function from asyncio code of that loop.  One portal per loop (a
    second :func:`trio_portal` on the same loop shares it; the trio run ends when the last block
    leaves).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._users = 0
        self._closed = False
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._done: asyncio.Future[outcome.Outcome[None]] | None = None
        self._ready: asyncio.Future[None] | None = None  # set once the trio side serves

    async def _main(self, ready: asyncio.Future[None]) -> None:
        self._stop = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            ready.set_result(None)
            await self._stop.wait()
            nursery.cancel_scope.cancel()  # runs still pending: their awaiters get CancelledError

    def _stop_soon(self) -> None:
        assert self._token is not None and self._stop is not None
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._stop.set)

    async def run(self, async_fn: Callable[_P, Awaitable[_T]], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """From asyncio, await ``async_fn(*args, **kwargs)`` (a trio async function) as a trio task
        of this portal's run, and return its result.

        - The awaiting asyncio task cancelled (``task.cancel()``, ``asyncio.timeout``, a client
          leaving a FastAPI endpoint): the trio task is cancelled, ``run`` waits until it has
          finished, then raises ``asyncio.CancelledError``.
        - The trio task cancelled from the trio side (the portal's last block left while it ran):
          ``asyncio.CancelledError``.
        - Any exception comes out as itself.

        Raises ``RuntimeError`` when the portal is closed or awaited from another event loop or
        thread, ``TypeError`` for a coroutine object instead of the function and its arguments.
        """
        if inspect.iscoroutine(async_fn):
            async_fn.close()
            raise TypeError("TrioPortal.run takes the function and its arguments: run(fn, *args), not run(fn(*args))")
        if asyncio.get_running_loop() is not self._loop:
            raise RuntimeError("this trio portal belongs to another asyncio event loop: open one on this loop")
        if self._closed or self._token is None:
            raise RuntimeError("this trio portal is closed: await its run() inside `async with trio_portal():`")
        answer: asyncio.Future[_T] = self._loop.create_future()
        finished: asyncio.Future[None] = self._loop.create_future()
        scope = trio.CancelScope()
        call = functools.partial(async_fn, *args, **kwargs)

        def start() -> None:  # in the trio run
            try:
                assert self._nursery is not None
                self._nursery.start_soon(_serve, call, scope, answer, finished, name=call.func)
            except RuntimeError as exc:  # the nursery is closing
                if not answer.done():
                    answer.set_exception(RuntimeError(f"this trio portal is closing: {exc}"))
                if not finished.done():
                    finished.set_result(None)

        try:
            self._token.run_sync_soon(start)
        except trio.RunFinishedError:
            raise RuntimeError("this trio portal's trio run has ended") from None
        try:
            return await answer
        except asyncio.CancelledError:
            if not finished.done():  # the awaiter was cancelled: cancel the trio task, wait for it
                with contextlib.suppress(trio.RunFinishedError):
                    self._token.run_sync_soon(scope.cancel)
                await _wait_through_cancels(finished)
            raise

    def wrap_async_context(self, cm: AbstractAsyncContextManager[_T]) -> AbstractAsyncContextManager[_T]:
        """A trio async context manager (``spawn_agent(...)``, ``open_memory_pair(...)``) held open
        from asyncio: ``async with portal.wrap_async_context(spawn_agent(...)) as conn:``.

        Entering it starts a trio task of this portal that enters ``cm`` and waits; the block's
        value is what ``cm`` yields, usable from asyncio through :meth:`run` (``await
        portal.run(conn.agent.initialize, request)``) for as long as the block lasts, from any
        task of the loop (a FastAPI app's lifespan holds a connection its endpoints use).  Leaving
        the block exits ``cm`` in that same trio task and waits for it: an exception raised in the
        block is raised inside ``cm`` (which may suppress it), an asyncio cancellation of the block
        is a trio cancellation there; what ``cm``'s exit raises comes out as itself.  Raises what
        ``cm``'s entry raises, ``RuntimeError`` when the portal is closed.
        """
        return _HeldContext(self, cm)


class _HeldContext(AbstractAsyncContextManager[_T]):
    """:meth:`TrioPortal.wrap_async_context`'s asyncio context manager."""

    def __init__(self, portal: TrioPortal, cm: AbstractAsyncContextManager[_T]) -> None:
        self._portal = portal
        self._cm = cm
        self._leave = trio.Event()
        self._exit: BaseException | None = None
        self._held: asyncio.Future[None] | None = None

    async def _hold(self, entered: asyncio.Future[_T]) -> None:  # the trio task
        with trio.CancelScope() as scope:
            async with self._cm as value:
                if not entered.done():
                    entered.set_result(value)
                await self._leave.wait()
                if isinstance(self._exit, Exception):
                    raise self._exit
                if self._exit is not None:  # the asyncio block was cancelled: a trio cancellation here
                    scope.cancel()
                    await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> _T:
        entered: asyncio.Future[_T] = self._portal._loop.create_future()
        self._held = held = asyncio.ensure_future(self._portal.run(self._hold, entered))
        try:
            waiting: list[asyncio.Future[Any]] = [entered, held]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            held.cancel()
            await _wait_through_cancels(held)
            raise
        if not entered.done():  # cm's entry failed: held has its exception
            entered.cancel()
            await held
            raise RuntimeError("the trio context manager ended before it yielded")
        return entered.result()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        assert self._held is not None and self._portal._token is not None
        self._exit = exc
        with contextlib.suppress(trio.RunFinishedError):
            self._portal._token.run_sync_soon(self._leave.set)
        await _wait_through_cancels(self._held)
        try:
            self._held.result()
        except BaseException as raised:
            if raised is exc:
                return False  # cm let the block's exception out: it propagates as it was
            raise
        return exc is not None and isinstance(exc, Exception)  # cm suppressed the block's exception


def _settle(future: asyncio.Future[Any], how: Callable[[], object]) -> None:
    if not future.done():
        how()


async def _serve(
    call: Callable[[], Awaitable[_T]],
    scope: trio.CancelScope,
    answer: asyncio.Future[_T],
    finished: asyncio.Future[None],
) -> None:
    """A portal's trio task: run ``call`` in ``scope`` and settle the asyncio futures."""
    try:
        with scope:
            value = await call()
            _settle(answer, lambda: answer.set_result(value))
        if scope.cancelled_caught:  # cancelled for the asyncio awaiter, which is cancelled already
            _settle(answer, answer.cancel)
    except Exception as exc:
        if not answer.done():
            answer.set_exception(exc)
    except BaseException:  # trio.Cancelled from the trio side (the portal closing), KeyboardInterrupt
        _settle(answer, answer.cancel)
        raise
    finally:
        _settle(finished, lambda: finished.set_result(None))


async def _wait_through_cancels(future: asyncio.Future[Any]) -> None:
    """Await ``future`` even if the awaiting task is cancelled meanwhile (the cancellation is then
    re-raised once it is done)."""
    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError as exc:
            if not future.cancelled():  # the awaiting task was cancelled, not the future
                cancelled = exc
    if cancelled is not None:
        raise cancelled


def _host_sets_wakeup_fd() -> bool:
    """Whether the asyncio loop already uses ``signal.set_wakeup_fd`` (its ``add_signal_handler``):
    then trio must leave it alone (``host_uses_signal_set_wakeup_fd``)."""
    if threading.current_thread() is not threading.main_thread():
        return False  # trio installs none off the main thread
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    return fd != -1


def _on_trio_asyncio_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` is one of trio-asyncio's (:func:`open_loop`'s, or the loop ``asyncio.run``
    makes once ``trio_asyncio`` is imported: it installs its event loop policy), whose callbacks run
    inside a trio run.  Raises ``RuntimeError`` inside a trio run that is not such a loop's."""
    trio_asyncio = sys.modules.get("trio_asyncio")
    if trio_asyncio is not None and isinstance(loop, trio_asyncio.BaseTrioEventLoop):
        return True
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    raise RuntimeError("trio_portal() inside a trio run: call the trio code directly")


@asynccontextmanager
async def trio_portal() -> AsyncIterator[TrioPortal]:
    """From asyncio: a trio run in guest mode on the running loop for the block
    (``async with trio_portal() as portal: await portal.run(trio_fn, *args)``).

    Reentrant and shared: a second block on the same loop (nested, or in another asyncio task)
    yields the same :class:`TrioPortal`; the trio run ends when the last block leaves: its pending
    :meth:`TrioPortal.run` calls are cancelled (their awaiters get ``asyncio.CancelledError``) and
    leaving waits until the run has finished (shielded from the leaving task's own cancellation),
    so the loop never abandons a guest run.  An exception that ended the trio run itself (say
    ``KeyboardInterrupt``) is raised on leaving.

    On a trio-asyncio loop (asyncio code inside :func:`open_loop`; or ``asyncio.run`` in a process
    that imported ``trio_asyncio``, whose event loop policy then makes every new loop a trio-asyncio
    one) trio runs already: the portal is then a trio task of that run instead of a guest run, with
    the same rules.  Raises ``RuntimeError`` outside a running asyncio loop, and in trio code.
    """
    loop = asyncio.get_running_loop()
    portal = _portals.get(loop)
    if portal is not None and not portal._closed and portal._ready is not None:
        await asyncio.shield(portal._ready)  # another task is starting it: wait until it serves
        portal._ready.result()
    if portal is None or portal._closed:
        portal = TrioPortal(loop)
        ready: asyncio.Future[None] = loop.create_future()
        done: asyncio.Future[outcome.Outcome[None]] = loop.create_future()

        def done_callback(result: outcome.Outcome[None]) -> None:
            _settle(done, lambda: done.set_result(result))
            _settle(ready, lambda: ready.set_exception(RuntimeError("the trio run ended before it started")))

        if _on_trio_asyncio_loop(loop):  # trio runs this loop already: the portal is a trio task of it
            main: asyncio.Future[None] = loop.trio_as_future(portal._main, ready)  # type: ignore[attr-defined]
            main.add_done_callback(lambda future: done_callback(outcome.capture(future.result)))
        else:
            trio.lowlevel.start_guest_run(
                portal._main,
                ready,
                run_sync_soon_threadsafe=loop.call_soon_threadsafe,
                run_sync_soon_not_threadsafe=loop.call_soon,
                done_callback=done_callback,
                host_uses_signal_set_wakeup_fd=_host_sets_wakeup_fd(),
            )
        portal._done, portal._ready = done, ready
        _portals[loop] = portal
        try:
            await _wait_through_cancels(ready)
            ready.result()
        except BaseException:
            portal._closed = True
            _portals.pop(loop, None)
            if portal._stop is not None:
                portal._stop_soon()
            await _wait_through_cancels(done)
            raise
    portal._users += 1
    try:
        yield portal
    finally:
        portal._users -= 1
        if portal._users == 0:
            portal._closed = True
            if _portals.get(loop) is portal:
                del _portals[loop]
            portal._stop_soon()
            assert portal._done is not None
            await _wait_through_cancels(portal._done)
            portal._done.result().unwrap()

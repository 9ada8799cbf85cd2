"""A nursery owned by a context manager, whose body's exception comes out as itself.

Contract: :func:`owned_nursery` is ``trio.open_nursery()`` for context managers that run tasks
behind their ``async with`` block (a connection's reader and writer, a spawned agent's stderr
drain).  With strict exception groups (trio's default), an exception raised in the *body* of such
a context manager would come out wrapped in an ``ExceptionGroup``, so ``except ConnectionClosed``
would not catch it.  Here, when the group holds nothing but the body's exception (and ``Cancelled``
from tasks that were being cancelled anyway), the body's exception is re-raised unwrapped, with its
own traceback, cause and context.  A failure of an internal task stays grouped, with the body's
exception beside it: both matter, and neither may be dropped.  This follows trio's guidance on
nurseries as an implementation detail (python-trio/trio#2929): keep the grouping out of the user's
way where exactly one error is the user's own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypeVar

import trio

_T = TypeVar("_T")


def _only_body(group: BaseExceptionGroup[BaseException], body: BaseException) -> bool:
    for exc in group.exceptions:
        if exc is body or isinstance(exc, trio.Cancelled):
            continue
        if isinstance(exc, BaseExceptionGroup) and _only_body(exc, body):
            continue
        return False
    return True


def _contains(group: BaseExceptionGroup[BaseException], body: BaseException) -> bool:
    return any(
        exc is body or (isinstance(exc, BaseExceptionGroup) and _contains(exc, body)) for exc in group.exceptions
    )


@asynccontextmanager
async def body_unwrapped(manager: AbstractAsyncContextManager[_T]) -> AsyncIterator[_T]:
    """``manager`` (a context manager that runs tasks behind its block: a nursery, trio-asyncio's
    loop) whose body's exception propagates unwrapped (see the module docstring)."""
    body: BaseException | None = None
    try:
        async with manager as value:
            try:
                yield value
            except BaseException as exc:
                body = exc
                raise
    except BaseExceptionGroup as group:
        if body is None or not _contains(group, body) or not _only_body(group, body):
            raise
        cause, context, suppress = body.__cause__, body.__context__, body.__suppress_context__
        try:
            raise body
        finally:
            body.__cause__, body.__context__, body.__suppress_context__ = cause, context, suppress
            del body, group


def owned_nursery() -> AbstractAsyncContextManager[trio.Nursery]:
    """``trio.open_nursery()`` whose body's exception propagates unwrapped (see the module docstring)."""
    return body_unwrapped(trio.open_nursery())


@asynccontextmanager
async def serving(service: Callable[..., Awaitable[None]], close: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
    """Start ``service`` in an :func:`owned_nursery` (``nursery.start(service)``: it calls
    ``task_status.started()`` once it serves), run the body, then ``await close()`` however the
    body ended (a connection's ``async with``)."""
    async with owned_nursery() as nursery:
        await nursery.start(service)
        try:
            yield
        finally:
            await close()

"""The asyncio boundary the pydantic-ai integration crosses: pydantic-ai runs on asyncio, acp-trio
on trio; trio-asyncio runs an asyncio loop inside trio.

``open_loop`` opens the loop (reentrant); ``run`` awaits an asyncio coroutine function from trio
(trio cancellation cancels the asyncio task and waits for it to end); ``call_trio`` awaits a trio
function from asyncio code running on that loop (a tool of the agent that talks to the client).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio_asyncio  # type: ignore[import-untyped]

_T = TypeVar("_T")


def _repair_anyio() -> None:
    """trio-asyncio replaces ``asyncio.get_running_loop`` when imported; anyio's asyncio backend
    binds it by name when *it* is imported, so one imported first (anyio's pytest plugin does so)
    keeps the original, and every anyio call inside the loop fails with "no running event loop"
    (pydantic-ai's runs use anyio).  Point that binding at trio-asyncio's function."""
    backend = sys.modules.get("anyio._backends._asyncio")
    if backend is not None and getattr(backend, "get_running_loop", None) is not asyncio.get_running_loop:
        setattr(backend, "get_running_loop", asyncio.get_running_loop)  # noqa: B010


_repair_anyio()

NO_LOOP = (
    "no asyncio loop is open: pydantic-ai runs on asyncio; serve the agent inside "
    "`async with acp_trio.integrations.pydantic_ai.open_loop():` (serve() and main() open it for you)"
)


@asynccontextmanager
async def open_loop() -> AsyncIterator[None]:
    """An asyncio loop (trio-asyncio) for the block; inside an open one, that one (reentrant)."""
    if trio_asyncio.current_loop.get() is not None:
        yield
        return
    async with trio_asyncio.open_loop():
        yield


def _loop() -> Any:
    loop = trio_asyncio.current_loop.get()
    if loop is None:
        raise RuntimeError(NO_LOOP)
    return loop


async def run(async_fn: Callable[..., Awaitable[_T]], *args: Any) -> _T:
    """``await async_fn(*args)`` as an asyncio task of the open loop, from trio.  Raises
    ``RuntimeError`` (:data:`NO_LOOP`) when no loop is open."""
    result: _T = await _loop().run_aio_coroutine(async_fn(*args))
    return result


async def call_trio(async_fn: Callable[..., Awaitable[_T]], *args: Any) -> _T:
    """From asyncio code on the open loop: ``await async_fn(*args)`` as a trio task (cancelling the
    asyncio caller cancels it)."""
    result: _T = await _loop().trio_as_future(async_fn, *args)
    return result

"""The asyncio boundary the pydantic-ai integration crosses: pydantic-ai runs on asyncio, acp-trio
on trio.  From trio to asyncio it goes through :mod:`acp_trio.aio` (``open_loop``, ``run``: an
asyncio loop that trio-asyncio runs inside trio); :func:`call_trio` is the way back, for a tool of
the agent (asyncio code on that loop) that talks to the client (trio code).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio_asyncio  # type: ignore[import-untyped]

from acp_trio.aio import open_loop, run

__all__ = ["call_trio", "loop_is_open", "open_loop", "run"]

_T = TypeVar("_T")


def loop_is_open() -> bool:
    """Whether this trio task runs inside an open (not closed) :func:`open_loop` block."""
    loop = trio_asyncio.current_loop.get()
    return loop is not None and not loop.is_closed()


async def call_trio(async_fn: Callable[[], Awaitable[_T]]) -> _T:
    """From asyncio code on the open loop (a tool function of the agent): ``await async_fn()`` as a
    trio task of the loop (cancelling the asyncio caller cancels it); its exceptions come out as
    themselves.  Raises ``RuntimeError`` when no loop is open."""
    loop = trio_asyncio.current_loop.get()
    if loop is None:
        raise RuntimeError("no asyncio loop is open: serve the agent inside `async with acp_trio.aio.open_loop():`")
    result: _T = await loop.trio_as_future(async_fn)
    return result

"""The journal contract of the session host, and the in-memory journal (for tests).

Contract: a journal numbers each session's ``session/update`` wire lines 1, 2, ... (consecutive,
per session) as the host appends them, and gives back those after a number.  It may drop the
oldest lines of a session (its bounds are its own business): :meth:`Journal.first` then says the
oldest number it still holds.  It knows nothing of JSON, ACP or trio beyond being awaited.  The
on-disk journal is :meth:`acp_trio.session_store.SqliteSessionStore.journal` (SQLite; the host's
default, in a temporary file of its own).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import trio


@runtime_checkable
class Journal(Protocol):
    """Where a :class:`~acp_trio.host.SessionHost` keeps the ``session/update`` lines of its sessions.

    Lines are the exact wire lines the agent sent (``bytes``, without the trailing newline);
    numbers start at 1 per session and are consecutive.  All methods are awaited from trio.
    """

    async def append(self, session_id: str, lines: Sequence[bytes]) -> int:
        """Append ``lines`` to the session's journal, in order; returns the number of the last one."""
        ...

    async def read(self, session_id: str, after: int, *, limit: int | None = None) -> list[tuple[int, bytes]]:
        """The lines numbered above ``after`` still held, in order, as ``(number, line)``: at most
        ``limit`` of them (``None``: all; the host reads a replay in pages)."""
        ...

    async def first(self, session_id: str) -> int:
        """The oldest number still held: 1 if nothing was dropped, 0 if the journal is empty."""
        ...

    async def last(self, session_id: str) -> int:
        """The number of the last line appended (kept even when dropped), 0 if none."""
        ...

    async def forget(self, session_id: str) -> None:
        """Drop the session's journal; its numbering starts again at 1."""
        ...


class MemoryJournal:
    """A :class:`Journal` in this process's memory: gone with it.  For tests, and for hosts that
    accept the RAM: it holds up to its bounds per session, so a host keeps up to ``max_bytes`` times
    its sessions in memory (the host's default journal, SQLite, keeps them on disk).  Under trio's
    autojump clock (``trio.testing.MockClock(autojump_threshold=0)``, pytest-trio's ``autojump_clock``)
    pass this journal: the SQLite journal commits in a worker thread, and the clock jumps ahead while
    trio waits for it, so timeouts fire early.

    ``max_updates``: lines kept per session (default ``None``: no limit); ``max_bytes``: bytes of
    lines kept per session (default ``None``).  Past either bound the oldest lines of that session
    are dropped (at least the newest line is always kept), so :meth:`first` rises and a client
    whose replay cursor is older is refused by the host (-32602 with the oldest number available).
    """

    def __init__(self, *, max_updates: int | None = None, max_bytes: int | None = None) -> None:
        if max_updates is not None and max_updates < 1:
            raise ValueError(f"max_updates must be positive or None, got {max_updates}")
        if max_bytes is not None and max_bytes < 1:
            raise ValueError(f"max_bytes must be positive or None, got {max_bytes}")
        self.max_updates = max_updates
        self.max_bytes = max_bytes
        self._lines: dict[str, deque[tuple[int, bytes]]] = {}
        self._last: dict[str, int] = {}
        self._bytes: dict[str, int] = {}

    async def append(self, session_id: str, lines: Sequence[bytes]) -> int:
        """Keep ``lines`` (copied) under the session's next numbers, then drop the oldest past the
        bounds; returns the number of the last one (:meth:`Journal.append`)."""
        held = self._lines.setdefault(session_id, deque())
        number = self._last.get(session_id, 0)
        size = self._bytes.get(session_id, 0)
        for line in lines:
            number += 1
            held.append((number, bytes(line)))
            size += len(line)
        while len(held) > 1 and (
            (self.max_updates is not None and len(held) > self.max_updates)
            or (self.max_bytes is not None and size > self.max_bytes)
        ):
            size -= len(held.popleft()[1])
        self._last[session_id] = number
        self._bytes[session_id] = size
        await trio.lowlevel.checkpoint()
        return number

    async def read(self, session_id: str, after: int, *, limit: int | None = None) -> list[tuple[int, bytes]]:
        """``(number, line)`` of the lines held numbered above ``after``, in order (from
        :meth:`first` when ``after`` is older), at most ``limit`` of them (``None``: all;
        :meth:`Journal.read`).  Raises ``ValueError`` for a ``limit`` below 1."""
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        await trio.lowlevel.checkpoint()
        held = self._lines.get(session_id)
        if not held:
            return []
        start = max(0, after - held[0][0] + 1)
        stop = len(held) if limit is None else min(len(held), start + limit)
        if start == 0 and stop == len(held):
            return list(held)
        return [held[i] for i in range(start, stop)]

    async def first(self, session_id: str) -> int:
        """The oldest number held, 0 when none is (:meth:`Journal.first`)."""
        await trio.lowlevel.checkpoint()
        held = self._lines.get(session_id)
        return held[0][0] if held else 0

    async def last(self, session_id: str) -> int:
        """The number of the last line appended, 0 if none (:meth:`Journal.last`)."""
        await trio.lowlevel.checkpoint()
        return self._last.get(session_id, 0)

    async def forget(self, session_id: str) -> None:
        """Drop the session's lines and numbering (:meth:`Journal.forget`)."""
        self._lines.pop(session_id, None)
        self._last.pop(session_id, None)
        self._bytes.pop(session_id, None)
        await trio.lowlevel.checkpoint()


__all__ = ["Journal", "MemoryJournal"]

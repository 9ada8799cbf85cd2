"""A notification route that watches how many decoded notifications wait behind the reader."""

from __future__ import annotations

from typing import Any

import trio

from acp_trio import Route


class SliceWatch:
    """``route``: a notification ``method`` with one serial key whose params carry ``"i"``.  At each
    handler call, :attr:`most` keeps the largest number of notifications decoded (``on_receive``)
    but not yet handled, this one included; :attr:`done` is set after ``count`` handler calls."""

    def __init__(self, method: str, count: int) -> None:
        self.count = count
        self.received: list[int] = []
        self.handled: list[int] = []
        self.most = 0
        self.done = trio.Event()
        self.route = Route(method, "notification", self._handle, serial_key=lambda p: "one", on_receive=self._receive)

    def _receive(self, params: Any) -> None:
        self.received.append(params["i"])

    async def _handle(self, params: Any) -> None:
        self.handled.append(params["i"])
        self.most = max(self.most, len(self.received) - len(self.handled) + 1)
        if len(self.handled) == self.count:
            self.done.set()

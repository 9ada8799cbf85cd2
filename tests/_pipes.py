"""What the tests over real OS pipes share: a pipe as trio streams, an echo handler, and a reader of
the JSON messages a connection wrote."""

from __future__ import annotations

import os
from typing import Any

import orjson
import trio


def pipe() -> tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream]:
    """(read end, write end) of a new OS pipe."""
    r, w = os.pipe()
    return trio.lowlevel.FdStream(r), trio.lowlevel.FdStream(w)


async def echo(params: Any) -> Any:
    return params


class Messages:
    """The JSON messages read from ``stream``, line by line, a partial line kept for the next call."""

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self.stream = stream
        self.buf = b""

    async def take(self, n: int) -> list[Any]:
        """The next ``n`` messages; fails if a read brings more than those, or none (end of stream)."""
        got: list[Any] = []
        while len(got) < n:
            data = await self.stream.receive_some(1 << 16)
            assert data, "the writer closed the stream"
            self.buf += data
            *lines, self.buf = self.buf.split(b"\n")
            got += [orjson.loads(line) for line in lines]
        assert len(got) == n
        return got

    async def next(self) -> Any:
        """The next message (as :meth:`take`)."""
        return (await self.take(1))[0]

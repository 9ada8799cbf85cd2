"""One outgoing NDJSON byte stream cut into messages: what every message-based transport needs.

Contract: a connection writes newline-delimited JSON-RPC to a ``trio.abc.SendStream``; a transport
whose unit is a message (a WebSocket frame, a POST body, an SSE event) gets each complete line by
itself.  Knows nothing of JSON or ACP.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio


class LineSendStream(trio.abc.SendStream):
    """A ``trio.abc.SendStream`` of NDJSON that hands each complete, non-blank line to ``send_line``.

    ``send_line``: ``async (bytes) -> Any`` (the line without its ``\\n``; what it returns is
    ignored); a partial line waits for its end.  ``what``: names the stream in the error raised
    once it is closed.
    ``send_lines``: optional ``async (list[bytes]) -> bool``, used instead of ``send_line``: gets
    all the complete lines of one ``send_all`` at once (so a transport can send them together) and
    returns ``True`` when ``send_all`` needs no schedule point of its own: it sent them without
    waiting for anything, or it passed schedule points itself (an HTTP request per line); then
    ``send_all`` only raises ``trio.Cancelled`` if the task is cancelled.  Otherwise ``send_all``
    ends with a checkpoint, as every trio stream's does.
    ``send_lines_now``: optional ``(list[bytes]) -> bool``, a synchronous sender: sends complete
    lines at once, without waiting or yielding, and says whether it did (``False``: it sent none of
    them, as when its transport would have to wait); it makes :attr:`send_now` available.
    """

    send_now: Callable[[bytes | bytearray], int] | None
    """``None``, or (with ``send_lines_now``) a synchronous send for a connection with nothing else in
    flight: ``send_now(data)`` sends ``data``, complete lines, at once and returns ``len(data)``, or
    sends nothing and returns 0 (the transport would have to wait, the stream is closed, a partial
    line waits, ...); the caller then sends ``data`` with :meth:`send_all` as usual.  Never raises
    for a transport error (``send_all`` reports it).  :class:`acp_trio.Connection` uses it, as it
    writes a pipe's descriptor directly, to send a request or a read's answers without waking its
    writer task."""

    def __init__(
        self,
        send_line: Callable[[bytes], Awaitable[object]],
        what: str = "the send stream",
        *,
        send_lines: Callable[[list[bytes]], Awaitable[bool]] | None = None,
        send_lines_now: Callable[[list[bytes]], bool] | None = None,
    ) -> None:
        self._send_line = send_line
        self._send_lines = send_lines
        self._send_lines_now = send_lines_now
        self._what = what
        self._partial = b""
        self._closed = False
        self.send_now = None if send_lines_now is None else self._send_now

    def _send_now(self, data: bytes | bytearray) -> int:
        if self._closed or self._partial or data[-1:] != b"\n":
            return 0
        lines = [line for line in bytes(data).split(b"\n")[:-1] if line.strip()]
        if not lines:
            return len(data)
        assert self._send_lines_now is not None
        return len(data) if self._send_lines_now(lines) else 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            raise trio.ClosedResourceError(f"{self._what} is closed")
        *lines, self._partial = (self._partial + bytes(data)).split(b"\n")
        if self._send_lines is not None:
            lines = [line for line in lines if line.strip()]
            if lines and await self._send_lines(lines):
                # sent at once, or the sender yielded already (a writer waiting for its next batch
                # yields there): no second pass
                await trio.lowlevel.checkpoint_if_cancelled()
                return
        else:
            for line in lines:
                if line.strip():
                    await self._send_line(line)
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        self._closed = True
        await trio.lowlevel.checkpoint()

"""Newline-delimited framing: one UTF-8 JSON message per line, with a size cap.

ACP's stdio transport sends each JSON-RPC message as one line terminated by ``\\n``; messages
contain no raw newline.  The framer splits a byte stream into lines, drops blank lines, strips a
trailing ``\\r``, and refuses lines longer than ``max_message_size`` bytes without losing its place:
the oversized line is skipped up to its newline and reported once as an :class:`OversizedMessage`,
and the lines after it are framed as usual.
"""

from __future__ import annotations

from io import BytesIO as _BytesIO
from typing import Final

DEFAULT_MAX_MESSAGE_SIZE: Final = 32 * 1024 * 1024
"""Default cap on one message, in bytes (32 MiB), newline excluded."""

OVERSIZED_HEAD: Final = 4096
"""Bytes kept of the start of an oversized line (:attr:`OversizedMessage.head`), for its request id."""


def _eol_size(line: bytes) -> int:
    """How many bytes end ``line``: its newline and a CR before it (2, 1, or 0 for an unterminated line)."""
    if line[-1:] == b"\n":
        return 2 if line[-2:] == b"\r\n" else 1
    return 0


def without_eol(line: bytes) -> bytes:
    """A line as :meth:`LineFramer.feed_raw` gives it, without its newline and a CR before it (the
    line :meth:`LineFramer.feed` gives); an unterminated line (``close()``'s) is returned as it is."""
    n = _eol_size(line)
    return line[:-n] if n else line


class OversizedMessage:
    """A line longer than the framer's cap; its bytes were discarded.

    ``size``: how many bytes of it were seen when it was refused (at least ``limit + 1``).
    ``limit``: the cap, in bytes.  ``head``: its first bytes (at most :data:`OVERSIZED_HEAD`), so
    that the receiver can answer the request id they carry (:func:`acp_trio._core.head_fields`).
    """

    __slots__ = ("head", "limit", "size")

    def __init__(self, size: int, limit: int, head: bytes = b"") -> None:
        self.size = size
        self.limit = limit
        self.head = head

    def __repr__(self) -> str:
        return f"OversizedMessage(size={self.size}, limit={self.limit})"


class LineFramer:
    """Split a byte stream into message lines.

    ``feed(data)`` returns the complete lines (``bytes``, without the newline) and
    :class:`OversizedMessage` markers found so far, in stream order; ``feed_raw(data)`` the same
    lines as they came (each ending in its newline, blank ones included), for a reader that parses
    them at once.  ``close()`` returns the unterminated tail, if any, as a last line (a peer that
    exits without a final newline still gets its last message read).
    """

    __slots__ = ("_buf", "_discarding", "_dropped", "max_message_size")

    def __init__(self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        if max_message_size < 1:
            raise ValueError(f"max_message_size must be a positive number of bytes, got {max_message_size!r}")
        self.max_message_size = max_message_size
        self._buf = bytearray()
        self._discarding = False
        self._dropped = 0

    def feed(self, data: bytes | bytearray) -> list[bytes | OversizedMessage]:
        """The complete lines ``data`` ends (``bytes``, without the newline or a CR before it; blank
        lines dropped) and :class:`OversizedMessage` markers, in stream order."""
        return [
            without_eol(item) if type(item) is bytes else item
            for item in self.feed_raw(data)
            if type(item) is not bytes or not item.isspace()
        ]

    def feed_raw(self, data: bytes | bytearray) -> list[bytes | OversizedMessage]:
        """:meth:`feed` without its per-line work, for a reader that parses each line at once: every
        line as it came, ending in its newline (a CR before it kept), blank lines included.  JSON
        parsers take the trailing whitespace; the reader skips a line that is only whitespace.

        The size cap counts a line without its newline and without a CR before it."""
        limit = self.max_message_size
        if type(data) is bytes and not self._buf and not self._discarding:
            end = len(data) - 1
            # exactly one whole line: the common read of a request or a response
            if end >= 0 and data.find(b"\n") == end and (end <= limit or (end == limit + 1 and data[end - 1] == 13)):
                return [data]
        out: list[bytes | OversizedMessage] = []
        if not data:
            return out
        start = 0
        if self._discarding:
            nl = data.find(b"\n")
            if nl < 0:
                self._dropped += len(data)
                return out
            self._discarding = False
            start = nl + 1
            if start == len(data):
                return out
        if start:
            data = data[start:]
        buf = self._buf
        view: bytes | None = None
        if not buf:
            view = data if type(data) is bytes else bytes(data)
        elif data.find(b"\n") >= 0:
            view = bytes(buf) + data
        else:  # still no end of line: only the new bytes were searched
            buf += data
        tail: bytes | bytearray = buf
        if view is not None:
            # BytesIO.readlines finds each newline with memchr (3x faster than bytes.split, which
            # tests every byte), and shares ``view`` rather than copying it
            lines = _BytesIO(view).readlines()
            tail = lines.pop() if lines[-1][-1] != 10 else b""
            # (no line of a read within the limit can be over it: the search costs ~100 ns a line)
            if len(view) > limit and lines and len(max(lines, key=len)) > limit + 1:
                out = [self._capped(line, limit) for line in lines]
            else:
                out = lines  # type: ignore[assignment]  # (list is invariant: no copy for the wider type)
        rest = len(tail)
        # one byte of grace for a trailing CR: it may be the first half of the line's CRLF
        if rest > limit and not (rest == limit + 1 and tail[-1] == 13):
            out.append(OversizedMessage(rest, limit, bytes(tail[:OVERSIZED_HEAD])))
            self._discarding = True
            self._dropped = rest
            buf.clear()
        elif tail is not buf:
            buf[:] = tail
        return out

    @staticmethod
    def _capped(line: bytes, limit: int) -> bytes | OversizedMessage:
        """``line`` (ending in its newline), or its :class:`OversizedMessage` when it is over ``limit``."""
        size = len(line) - _eol_size(line)  # (no copy: the line may be megabytes)
        return OversizedMessage(size, limit, line[:OVERSIZED_HEAD]) if size > limit else line

    def close(self) -> list[bytes | OversizedMessage]:
        """End of stream: return the unterminated tail (if it is not blank) and reset."""
        tail = bytes(self._buf).rstrip(b"\r")
        self._buf.clear()
        self._discarding = False
        if tail and not tail.isspace():
            return [tail]
        return []

"""Newline-delimited framing: one UTF-8 JSON message per line, with a size cap.

ACP's stdio transport sends each JSON-RPC message as one line terminated by ``\\n``; messages
contain no raw newline.  The framer splits a byte stream into lines, drops blank lines, strips a
trailing ``\\r``, and refuses lines longer than ``max_message_size`` bytes without losing its place:
the oversized line is skipped up to its newline and reported once as an :class:`OversizedMessage`,
and the lines after it are framed as usual.
"""

from __future__ import annotations

from typing import Final

DEFAULT_MAX_MESSAGE_SIZE: Final = 32 * 1024 * 1024
"""Default cap on one message, in bytes (32 MiB), newline excluded."""


class OversizedMessage:
    """A line longer than the framer's cap; its bytes were discarded.

    ``size``: how many bytes of it were seen when it was refused (at least ``limit + 1``).
    ``limit``: the cap, in bytes.
    """

    __slots__ = ("limit", "size")

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit

    def __repr__(self) -> str:
        return f"OversizedMessage(size={self.size}, limit={self.limit})"


class LineFramer:
    """Split a byte stream into message lines.

    ``feed(data)`` returns the complete lines (``bytes``, without the newline) and
    :class:`OversizedMessage` markers found so far, in stream order.  ``close()`` returns the
    unterminated tail, if any, as a last line (a peer that exits without a final newline still gets
    its last message read).
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
        out: list[bytes | OversizedMessage] = []
        if not data:
            return out
        limit = self.max_message_size
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
        buf = self._buf
        if buf:
            buf += data[start:] if start else data
            view: bytes | bytearray = buf
            start = 0
        else:
            view = data
        end = len(view)
        while start < end:
            nl = view.find(b"\n", start)
            if nl < 0:
                break
            stop = nl - 1 if nl > start and view[nl - 1] == 13 else nl
            if stop - start > limit:
                out.append(OversizedMessage(stop - start, limit))
            elif stop > start:
                line = bytes(view[start:stop])
                if not line.isspace():
                    out.append(line)
            start = nl + 1
        rest = end - start
        # one byte of grace for a trailing CR: it may be the first half of the line's CRLF
        if rest > limit and not (rest == limit + 1 and view[end - 1] == 13):
            out.append(OversizedMessage(rest, limit))
            self._discarding = True
            self._dropped = rest
            buf.clear()
        elif view is buf:
            del buf[:start]
        else:
            buf[:] = view[start:]
        return out

    def close(self) -> list[bytes | OversizedMessage]:
        """End of stream: return the unterminated tail (if it is not blank) and reset."""
        tail = bytes(self._buf).rstrip(b"\r")
        self._buf.clear()
        self._discarding = False
        if tail and not tail.isspace():
            return [tail]
        return []

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

OVERSIZED_HEAD: Final = 4096
"""Bytes kept of the start of an oversized line (:attr:`OversizedMessage.head`), for its request id."""

_OPENERS: Final = frozenset((b"{", b"["))  # how a JSON-RPC message or batch starts


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
        limit = self.max_message_size
        if type(data) is bytes and not self._buf and not self._discarding:
            end = len(data) - 1
            if data.find(b"\n") == end:  # exactly one whole line: the common read of a request or a response
                if data[:1] in _OPENERS and data[end - 1] != 13 and end <= limit:
                    return [data[:end]]  # a JSON message, no CR
                line = data[:-2] if data.endswith(b"\r\n") else data[:-1]
                if len(line) <= limit:
                    return [line] if line and not line.isspace() else []
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
            # split() and a comprehension instead of a find() per line: this runs for every message
            if b"\r" in view:
                view = view.replace(b"\r\n", b"\n")  # a CR before the newline is not part of the line
            parts = view.split(b"\n")
            tail = parts.pop()
            # (no line of a read within the limit can be over it: max() with key=len costs ~100 ns a line)
            if len(view) > limit and parts and len(max(parts, key=len)) > limit:
                for part in parts:
                    if len(part) > limit:
                        out.append(OversizedMessage(len(part), limit, part[:OVERSIZED_HEAD]))
                    elif part and not part.isspace():
                        out.append(part)
            else:
                out = [part for part in parts if part and not part.isspace()]
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

    def close(self) -> list[bytes | OversizedMessage]:
        """End of stream: return the unterminated tail (if it is not blank) and reset."""
        tail = bytes(self._buf).rstrip(b"\r")
        self._buf.clear()
        self._discarding = False
        if tail and not tail.isspace():
            return [tail]
        return []

"""The connection's exceptions: :class:`ConnectionClosed` and :class:`RequestTimeout`.

Kept apart from :mod:`._connection`, which the wheel compiles with mypyc (``hatch_build.py``): an
exception class stays a plain Python class, which code anywhere can subclass
(``acp_trio.transports.websocket.WebSocketConnectError``, say).
"""

from __future__ import annotations

import signal as _signal
from typing import Any

from ._core import RequestId


class ConnectionClosed(Exception):
    """The connection closed (closed locally, end of stream, or a broken pipe) before the operation finished.

    ``reason``: a short human-readable cause.  When the peer is a process this side spawned
    (:func:`acp_trio.spawn_agent`), how it ended: ``pid``, ``exit_code`` (its exit status, or
    ``None``), ``signal`` (the number of the signal that killed it, or ``None``; both ``None``
    while it still runs) and ``stderr_tail`` (its last stderr lines, at most 20 lines / 4 KiB).
    ``str(exc)`` says all of it, so printing the exception tells the user why.
    """

    def __init__(
        self,
        reason: str = "connection closed",
        *,
        pid: int | None = None,
        exit_code: int | None = None,
        signal: int | None = None,
        stderr_tail: tuple[str, ...] = (),
    ) -> None:
        self.reason = reason
        self.pid = pid
        self.exit_code = exit_code
        self.signal = signal
        self.stderr_tail = stderr_tail
        super().__init__(self._describe())

    def _describe(self) -> str:
        text = self.reason
        if self.pid is not None:
            if self.signal is not None:
                try:
                    name = _signal.Signals(self.signal).name
                except ValueError:
                    name = f"signal {self.signal}"
                text += f"; the agent process (pid {self.pid}) was killed by {name}"
            elif self.exit_code is not None:
                text += f"; the agent process (pid {self.pid}) exited with code {self.exit_code}"
            else:
                text += f"; the agent process (pid {self.pid}) closed its output but is still running"
            if self.stderr_tail:
                text += "; its last stderr lines:\n" + "\n".join("    " + line for line in self.stderr_tail)
            elif self.signal is not None or self.exit_code:
                text += " and wrote nothing to stderr (run the command by hand to see why)"
        return text

    def __reduce__(self) -> Any:
        details = {"pid": self.pid, "exit_code": self.exit_code, "signal": self.signal, "stderr_tail": self.stderr_tail}
        return (_rebuild_closed, (self.reason, details))

    def clone(self) -> ConnectionClosed:
        """A new exception with the same reason and details (each raise gets its own traceback)."""
        return type(self)(
            self.reason, pid=self.pid, exit_code=self.exit_code, signal=self.signal, stderr_tail=self.stderr_tail
        )


def _rebuild_closed(reason: str, details: dict[str, Any]) -> ConnectionClosed:
    return ConnectionClosed(reason, **details)


class RequestTimeout(TimeoutError):
    """An outbound request got no response within its timeout; ``$/cancel_request`` was sent for it.

    ``method``: the request's method.  ``timeout``: the limit, in seconds.  ``request_id``: its id.
    """

    def __init__(self, method: str, timeout: float, request_id: RequestId) -> None:
        super().__init__(f"{method} (request id {request_id!r}) got no response within {timeout:g} s")
        self.method = method
        self.timeout = timeout
        self.request_id = request_id

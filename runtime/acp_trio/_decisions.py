"""The bookkeeping the client brokers share (:mod:`acp_trio.permissions`, :mod:`acp_trio.elicitation`).

Each broker lists the requests it is deciding by session (oldest first), decides one in its
entry's cancel scope (which a direct answer cancels), marks an entry cancelled from outside (the
runtime on ``session/cancel``, the connection closing) and calls its ``on_answer`` hook once each
request is answered.  Private: the brokers' docstrings are the contract.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

import trio


class Entry(Protocol):
    """What :class:`Decisions` needs of a broker's pending entry."""

    _scope: trio.CancelScope

    def cancel(self) -> bool:
        """Answer it as dismissed now; ``False`` when it was already answered."""
        ...

    def _cancelled_from_outside(self) -> None:
        """Record that the runtime cancelled it (``decided_by == "session/cancel"``)."""
        ...


EntryT = TypeVar("EntryT", bound=Entry)


class Decisions(Generic[EntryT]):
    """The entries a broker is deciding, by session id (``None``: not tied to a session)."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self._by_session: dict[str | None, list[EntryT]] = {}

    async def run(
        self,
        session_id: str | None,
        entry: EntryT,
        decide: Callable[[], Awaitable[None]],
        on_answer: Callable[[EntryT], object] | None,
    ) -> None:
        """List ``entry`` under ``session_id`` while ``await decide()`` (which settles it) runs in
        its scope; cancelled from outside: ``entry._cancelled_from_outside()`` and the exception
        goes on.  Then ``on_answer(entry)`` (see :func:`call_hook`)."""
        queue = self._by_session.setdefault(session_id, [])
        queue.append(entry)
        try:
            with entry._scope:
                await decide()
        except BaseException:
            entry._cancelled_from_outside()  # the runtime (session/cancel) answers it itself
            self.log.debug("%r cancelled from outside", entry)
            raise
        finally:
            queue.remove(entry)
            if not queue and self._by_session.get(session_id) is queue:
                del self._by_session[session_id]
            call_hook(self.log, "on_answer", on_answer, entry)

    def pending(self, session_id: str | None = None) -> list[EntryT]:
        """The entries being decided, oldest first: of ``session_id``, or all of them (``None``)."""
        if session_id is not None:
            return list(self._by_session.get(session_id, ()))
        return [entry for queue in self._by_session.values() for entry in queue]

    def cancel(self, session_id: str | None = None) -> int:
        """Answer the entries of ``session_id`` (``None``: all) as dismissed now; how many were pending."""
        return sum(entry.cancel() for entry in self.pending(session_id))


def call_hook(log: logging.Logger, name: str, hook: Callable[[Any], object] | None, entry: object) -> None:
    """``hook(entry)`` when there is one (``name``: the option it was given as, for the log); an
    exception it raises is logged, and so is an async hook (a plain function is expected: its
    coroutine is closed, not left unawaited)."""
    if hook is None:
        return
    try:
        result = hook(entry)
        if inspect.iscoroutine(result):
            result.close()
            log.error("%s callback %r is async; it must be a plain function", name, hook)
    except Exception:
        log.exception("%s callback %r raised for %r", name, hook, entry)


def check_seconds(name: str, value: object, *, optional: bool = True) -> None:
    """Raise ``ValueError`` unless ``value`` is a positive number of seconds (or ``None`` when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        allowed = " or None" if optional else ""
        raise ValueError(f"{name} must be a positive number of seconds{allowed}, got {value!r}")

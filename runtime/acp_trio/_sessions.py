"""The sessions a connection knows are open, on either side.

Both :class:`~acp_trio.AgentSideConnection` and :class:`~acp_trio.ClientSideConnection` keep a
:class:`SessionRegistry` as ``conn.sessions``.  A session opens when ``session/new`` or
``session/fork`` succeeds (its id comes from the response), or when ``session/load`` or
``session/resume`` succeeds (its id comes from the request).  It ends when ``session/close`` or
``session/delete`` for it succeeds, or when the connection closes.  Sources:
``docs/protocol/v1/session-setup.mdx`` and the schema's ``NewSessionRequest``,
``LoadSessionRequest``, ``ResumeSessionRequest``, ``CloseSessionRequest``.

The batteries hang per-session resources on it: the client's file-system handler reads a session's
``cwd`` and ``additionalDirectories`` from it, the terminal manager releases a session's terminals
when it ends, and an agent's MCP servers close with their session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import trio

log = logging.getLogger("acp_trio.sessions")

OPENED_BY_RESPONSE: Final = frozenset({"session/new", "session/fork"})
OPENED_BY_REQUEST: Final = frozenset({"session/load", "session/resume"})
ENDED_BY_REQUEST: Final = frozenset({"session/close", "session/delete"})
SESSION_METHODS: Final = OPENED_BY_RESPONSE | OPENED_BY_REQUEST | ENDED_BY_REQUEST


class SessionInfo:
    """One open session, as set up by the request that opened it.

    ``session_id``: the ``SessionId``.  ``cwd``: the absolute working directory sent with the
    request.  ``additional_directories``: the extra roots (``additionalDirectories``, absolute
    paths; empty when not sent).  ``mcp_servers``: the ``McpServer`` objects of the request (typed,
    of the connection's variant).  ``method``: the method that opened it (``"session/new"``...).
    ``end_reason``: ``None`` while open, then why it ended (``"session/close"``,
    ``"session/delete"`` or the connection's close reason).
    """

    __slots__ = ("additional_directories", "cwd", "end_reason", "mcp_servers", "method", "session_id")

    def __init__(
        self,
        session_id: str,
        cwd: str,
        additional_directories: tuple[str, ...] = (),
        mcp_servers: tuple[Any, ...] = (),
        method: str = "session/new",
    ) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.additional_directories = additional_directories
        self.mcp_servers = mcp_servers
        self.method = method
        self.end_reason: str | None = None

    @property
    def roots(self) -> tuple[str, ...]:
        """``cwd`` followed by ``additional_directories``: the directories the session may use."""
        return (self.cwd, *self.additional_directories)

    def __repr__(self) -> str:
        extra = self.additional_directories
        return f"SessionInfo({self.session_id!r}, cwd={self.cwd!r}, additional_directories={extra!r})"


SessionListener = Callable[[SessionInfo], object]


class SessionRegistry(Mapping[str, SessionInfo]):
    """The open sessions of one connection, by session id (a read-only mapping).

    ``on_open(callback)`` / ``on_end(callback)`` call ``callback(info)`` synchronously when a
    session opens or ends (callbacks must not block; one that raises is logged).
    ``await wait_ended(session_id)`` returns once that session ended or the connection closed.
    """

    def __init__(self) -> None:
        self._open: dict[str, SessionInfo] = {}
        self._ended_events: dict[str, trio.Event] = {}
        # tuples, replaced on each on_open/on_end: most connections have no listener, and an empty
        # tuple is shared where an empty list is one more object per connection for the collector
        self._on_open: tuple[SessionListener, ...] = ()
        self._on_end: tuple[SessionListener, ...] = ()
        self.closed: str | None = None

    # -- Mapping --------------------------------------------------------------------------------
    def __getitem__(self, session_id: str) -> SessionInfo:
        return self._open[session_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._open)

    def __len__(self) -> int:
        return len(self._open)

    def __repr__(self) -> str:
        return f"SessionRegistry({list(self._open)!r})"

    # -- listening ------------------------------------------------------------------------------
    def on_open(self, callback: SessionListener) -> None:
        """Call ``callback(info)`` for every session opened from now on."""
        self._on_open = (*self._on_open, callback)

    def on_end(self, callback: SessionListener) -> None:
        """Call ``callback(info)`` for every session that ends from now on (also when the connection closes)."""
        self._on_end = (*self._on_end, callback)

    async def wait_ended(self, session_id: str) -> None:
        """Wait until the session ``session_id`` ends or the connection closes.

        A session that is not open yet is waited for too (it may be opening: an agent's
        ``session/new`` handler is still running when it starts per-session work).
        """
        if self.closed is not None:
            return
        event = self._ended_events.get(session_id)
        if event is None:
            event = self._ended_events[session_id] = trio.Event()
        try:
            await event.wait()
        finally:
            # a cancelled waiter leaves no event behind for an id that never opened
            if not event.is_set() and session_id not in self._open and self._ended_events.get(session_id) is event:
                del self._ended_events[session_id]

    # -- updates (called by the connection) -----------------------------------------------------
    def open(self, info: SessionInfo) -> None:
        """Record ``info`` as open (replacing an open session with the same id)."""
        if self.closed is not None:
            return
        self._open[info.session_id] = info
        self._notify(self._on_open, info)

    def end(self, session_id: str, reason: str) -> None:
        """Record the end of ``session_id`` (no-op when it is not open and nobody waits for it)."""
        info = self._open.pop(session_id, None)
        event = self._ended_events.pop(session_id, None)
        if event is not None:
            event.set()
        if info is not None:
            info.end_reason = reason
            self._notify(self._on_end, info)

    def close(self, reason: str) -> None:
        """End every session: the connection closed."""
        if self.closed is not None:
            return
        self.closed = reason
        for session_id in [*self._open, *self._ended_events]:
            self.end(session_id, reason)

    @staticmethod
    def _notify(listeners: tuple[SessionListener, ...], info: SessionInfo) -> None:
        for callback in listeners:  # (a listener added meanwhile replaces the tuple: not called for this one)
            try:
                callback(info)
            except Exception:
                log.exception("session listener %r raised for %r", callback, info.session_id)


def info_from(method: str, session_id: str, params: Any) -> SessionInfo:
    """A :class:`SessionInfo` from typed request params (``NewSessionRequest`` and the like)."""
    extra = getattr(params, "additional_directories", None)
    servers = getattr(params, "mcp_servers", None)
    return SessionInfo(
        session_id,
        params.cwd,
        tuple(extra) if extra else (),
        tuple(servers) if servers else (),
        method,
    )

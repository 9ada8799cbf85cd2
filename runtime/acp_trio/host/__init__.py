"""Sessions owned by a host rather than a connection: detach, reattach, several clients on one session.

``open_session_host(MyAgent)`` runs the agent author's class, unchanged, behind an ACP-aware router:
a client connection's end detaches it and its sessions' turns keep running; every ``session/update``
is numbered and journaled; a client reattaches with ``session/load`` (v1) or ``session/resume`` (v2,
``replayFrom`` ``start`` or the host's cursor) and gets what it missed, then live updates.  The
rules: ``docs/site/guides/host.md``.
"""

from __future__ import annotations

from ._forward import PEER_CONNECT_TIMEOUT, PEER_META_KEY
from ._journal import Journal, MemoryJournal
from ._ownership import DEFAULT_LEASE_SECONDS, MOVED_REASON, OWNED_REASON, TAKEN_OVER_REASON, HostOwnership
from ._router import (
    ATTACH_META_KEY,
    ATTACHED_META_KEY,
    CURRENT_META_KEY,
    CURSOR_TYPE,
    DEFAULT_JOURNAL_MAX_BYTES,
    DEFAULT_JOURNAL_MAX_UPDATES,
    DRAINING_REASON,
    LAST_META_KEY,
    SESSION_ENDED,
    SESSION_ENDED_REASON,
    TURN_ENDED,
    TURN_STARTED,
    UPDATE_META_KEY,
    SessionHost,
    SessionInfo,
    open_session_host,
)

__all__ = [
    "ATTACHED_META_KEY",
    "ATTACH_META_KEY",
    "CURRENT_META_KEY",
    "CURSOR_TYPE",
    "DEFAULT_JOURNAL_MAX_BYTES",
    "DEFAULT_JOURNAL_MAX_UPDATES",
    "DEFAULT_LEASE_SECONDS",
    "DRAINING_REASON",
    "LAST_META_KEY",
    "MOVED_REASON",
    "OWNED_REASON",
    "PEER_CONNECT_TIMEOUT",
    "PEER_META_KEY",
    "SESSION_ENDED",
    "SESSION_ENDED_REASON",
    "TAKEN_OVER_REASON",
    "TURN_ENDED",
    "TURN_STARTED",
    "UPDATE_META_KEY",
    "HostOwnership",
    "Journal",
    "MemoryJournal",
    "SessionHost",
    "SessionInfo",
    "open_session_host",
]

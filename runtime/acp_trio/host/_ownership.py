"""Ownership of live sessions by one host process among several sharing a PostgreSQL store (issue 36 step 2).

A host given :class:`HostOwnership` (``open_session_host(agent, ownership=HostOwnership(store))``)
claims a session's lease in the store before it answers the request that makes the session live
in it, renews all its leases in one statement every ``lease_seconds / 3`` seconds, fences every
journal append by the lease's epoch, and releases the lease when the session ends.  The rules:
``docs/site/guides/host.md`` ("Several host processes: ownership and takeover").
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from .._store_pg import Lease, PostgresSessionStore

PeerConnector = Callable[[str], AbstractAsyncContextManager[trio.abc.Stream]]
"""``connect_peer(url)``: an async context manager yielding a byte stream of NDJSON lines to the
host at ``url`` (an owner's advertised URL), as a client connection of that host."""

DEFAULT_LEASE_SECONDS = 10.0
"""Default lease length (seconds).  A host renews every third of it, so a renewal may fail twice
(a slow or restarting database, a long pause of the process) before the lease is lost; another host
takes a dead host's sessions over at most this long after its last renewal.  Shorter: faster
takeover, more renewals (one ``UPDATE`` per host per third, whatever its number of sessions) and a
higher risk of losing a lease to a pause; longer: the reverse."""

TAKEN_OVER_REASON = "taken over"
"""``reason`` of :data:`~acp_trio.host.SESSION_ENDED` when the host lost a session's lease (it
expired, or another host claimed it): the session goes on elsewhere; resume it again."""
MOVED_REASON = "moved: resume it again"
"""``reason`` of :data:`~acp_trio.host.SESSION_ENDED` when a draining host handed a session over
(:meth:`~acp_trio.host.SessionHost.hand_over`): its lease is released, so the next ``session/resume``
(``session/load``), through the load balancer, makes it live on another host at once."""
OWNED_REASON = "owned by another host"
"""``data.reason`` of the -32603 answer to a ``session/load``/``session/resume`` of a session another
live host owns; ``data.owner`` is that host's id, ``data.ownerUrl`` its advertised URL (or ``null``)."""


class HostOwnership:
    """The ownership settings of one host process (see the module docstring).

    ``store``: a :class:`~acp_trio._store_pg.PostgresSessionStore` (imported as
    ``acp_trio.session_store.PostgresSessionStore``); the host's journal defaults to its ``journal()``
    (appends are fenced through it).  ``host_id``: this process's id
    (default: a new random one, ``uuid4().hex``; never reuse one across process starts).
    ``url``: the URL other hosts and clients may reach this host at (advertised in the owner error
    of another host; default ``None``).  ``lease_seconds``: :data:`DEFAULT_LEASE_SECONDS`.
    ``peer_token``: the hosts' shared secret for forwarding (``None``: no forwarding; a client
    reaching this host for a session another live host owns gets the owner error).  With it, this
    host serves such a client through a connection of its own to the owner's URL (the owner sees
    one more attached client), and accepts such connections from the other hosts: their
    ``initialize`` carries ``_meta["acp-trio/peer"]`` ``{"token", "principal"}``, and a matching
    token makes the connection act for that principal (a wrong one is refused; the token never
    reaches the agent).  Give every host the same one, and keep it as secret as the token file.
    ``connect_peer``: how to reach an owner (:data:`PeerConnector`; default: a WebSocket to the
    URL, ``ws://`` or ``wss://``, with ``Authorization: Bearer <peer_token>``, so that an owner
    with a token file needs a line ``PRINCIPAL <peer_token>`` in it for the hosts).
    Raises ``ValueError`` for a ``lease_seconds`` that is not positive, or an id or URL with a space.
    """

    def __init__(
        self,
        store: PostgresSessionStore,
        *,
        host_id: str | None = None,
        url: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        peer_token: str | None = None,
        connect_peer: PeerConnector | None = None,
    ) -> None:
        if not lease_seconds > 0:
            raise ValueError(f"lease_seconds must be positive seconds, got {lease_seconds!r}")
        host_id = uuid.uuid4().hex if host_id is None else host_id
        if not host_id or " " in host_id or (url is not None and " " in url):
            raise ValueError(f"host_id and url are non-empty and without spaces, got {host_id!r} and {url!r}")
        self.store = store
        self.host_id = host_id
        self.url = url
        self.lease_seconds = float(lease_seconds)
        if peer_token is not None and len(peer_token) < 16:
            raise ValueError("peer_token is a secret of at least 16 characters (secrets.token_urlsafe(32))")
        self.peer_token = peer_token
        self.connect_peer: PeerConnector = connect_peer if connect_peer is not None else self._websocket_peer
        # stored in the lease's owner column: the id, then the URL after a space (other hosts read both)
        self.owner = host_id if url is None else f"{host_id} {url}"

    def _websocket_peer(self, url: str) -> AbstractAsyncContextManager[trio.abc.Stream]:
        from ._forward import websocket_peer

        return websocket_peer(url, self.peer_token)

    def __repr__(self) -> str:
        return f"HostOwnership(host_id={self.host_id!r}, url={self.url!r}, lease_seconds={self.lease_seconds})"

    async def claim(self, session_id: str, principal: Any = None) -> Lease | None:
        """Claim ``session_id`` for this host (:meth:`PostgresSessionStore.claim`): the new lease,
        or ``None`` while another holds it.  ``principal``: the session's (stored as ``str`` with the
        first claim that gives one; ``None``: none).  Raises ``psycopg.Error`` when the server cannot be reached."""
        return await self.store.claim(
            session_id, self.owner, self.lease_seconds, None if principal is None else str(principal)
        )

    async def principal_of(self, session_id: str) -> str | None:
        """The principal stored for ``session_id`` (as ``str``), or ``None``: see :meth:`claim`."""
        return await self.store.principal(session_id)

    async def renew(self) -> list[Lease]:
        """Extend every lease this host holds by ``lease_seconds``, in one statement; the leases
        renewed (one missing is lost).  Raises ``psycopg.Error`` when the server cannot be reached."""
        return await self.store.renew(self.owner, self.lease_seconds)

    async def release(self, session_id: str, epoch: int) -> bool:
        """Give up the lease of ``session_id`` with ``epoch``; False when it was no longer ours."""
        return await self.store.release(session_id, epoch)

    async def owner_of(self, session_id: str) -> Lease | None:
        """The stored lease of ``session_id`` (whoever holds it), or ``None``."""
        return await self.store.owner(session_id)


def owner_data(lease: Any) -> dict[str, Any]:
    """``{"owner", "ownerUrl"}`` of a stored lease's owner column (``"ID"`` or ``"ID URL"``)."""
    owner_id, _, url = str(lease.owner).partition(" ")
    return {"owner": owner_id, "ownerUrl": url or None}


__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "MOVED_REASON",
    "OWNED_REASON",
    "TAKEN_OVER_REASON",
    "HostOwnership",
]

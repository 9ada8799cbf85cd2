"""Forwarding a session to its owner host (issue 36 step 3; see ``docs/site/guides/host.md``).

A client that reaches host B for a session S that another live host A owns (no affinity cookie: another
device, a lost cookie jar) is served S through a connection of B's own to A's advertised URL: B sends
the client's ``initialize`` (with ``_meta["acp-trio/peer"]``: the hosts' ``peer_token`` and the
client's principal, so A applies its own principal rule), then the client's ``session/load`` or
``session/resume`` verbatim; A sees one more attached client of S.  B relays S's messages both ways
as they are (A's update numbers pass through; B does not journal or renumber them); A's requests to
the client get ids of B's (the client may also have B's own requests pending) and their answers go
back under A's ids.  When the connection to A ends, the client is told ``_acp_trio/session_ended``
with reason ``"moved: resume it again"``: its next resume reaches the new owner or takes S over.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

PEER_META_KEY = "acp-trio/peer"
"""``initialize`` ``_meta`` key of a host forwarding a client: ``{"token": peer_token, "principal"}``.
The owner compares the token with its own ``peer_token`` (-32600 when it differs), serves the
connection as ``principal`` and removes the key before its agent sees the ``initialize``.  Source:
this library's forwarding between hosts (``docs/site/guides/host.md``, "Forwarding")."""


PEER_CONNECT_TIMEOUT = 5.0
"""Seconds the default connector waits for an owner's WebSocket (TCP and upgrade); past them the
client's load/resume is answered -32603 (``data.reason`` ``"owned by another host"``): try again.
Fixed; a ``HostOwnership(connect_peer=...)`` of your own sets its own wait."""


class Remote:
    """One session forwarded to its owner for one client: lines to the owner, the client's requests in flight."""

    def __init__(self, session_id: str, url: str) -> None:
        self.session_id = session_id
        self.url = url
        self.send, self.receive = trio.open_memory_channel[bytes](float("inf"))
        self.scope = trio.CancelScope()
        self.calls: set[Any] = set()  # ids of the client's requests sent to the owner, not answered yet
        self.questions: dict[Any, Any] = {}  # the owner's request id -> the id the client was given


def peer_principal(meta: Any, peer_token: str | None) -> tuple[bool, Any]:
    """Whether an ``initialize`` ``_meta`` carries the peer key, and the principal it acts for
    (``None``: none named).  Raises ``ValueError`` when the token does not match this host's."""
    if type(meta) is not dict or PEER_META_KEY not in meta:
        return False, None
    peer = meta[PEER_META_KEY]
    token = peer.get("token") if type(peer) is dict else None
    if peer_token is None or type(token) is not str or not hmac.compare_digest(token.encode(), peer_token.encode()):
        raise ValueError("a forwarding host's token (_meta acp-trio/peer) that this host does not accept")
    principal = peer.get("principal")
    return True, principal if type(principal) is str else None


class _WebSocketLines(trio.abc.Stream):
    """NDJSON lines over a WebSocket (one message per line), as a byte stream."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self._pending = b""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._pending += bytes(data)
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            if line:
                await self._ws.send_message(line.decode())

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        import trio_websocket

        try:
            message = await self._ws.get_message()
        except trio_websocket.ConnectionClosed:
            return b""
        return (message.encode() if isinstance(message, str) else bytes(message)) + b"\n"

    async def aclose(self) -> None:
        await self._ws.aclose()


@asynccontextmanager
async def websocket_peer(url: str, peer_token: str | None) -> AsyncIterator[trio.abc.Stream]:
    """The default :data:`~acp_trio.host._ownership.PeerConnector`: a WebSocket to ``url`` with
    ``Authorization: Bearer <peer_token>``; raises ``OSError`` or ``trio_websocket.HandshakeError``
    when the owner cannot be reached in :data:`PEER_CONNECT_TIMEOUT` seconds."""
    import trio_websocket

    from ..transports.websocket import DEFAULT_MAX_MESSAGE_BYTES

    headers = [(b"authorization", f"Bearer {peer_token}".encode())] if peer_token else []
    async with trio_websocket.open_websocket_url(
        url,
        extra_headers=headers,
        max_message_size=DEFAULT_MAX_MESSAGE_BYTES,
        connect_timeout=PEER_CONNECT_TIMEOUT,
        disconnect_timeout=2.0,
    ) as ws:
        yield _WebSocketLines(ws)


__all__ = ["PEER_CONNECT_TIMEOUT", "PEER_META_KEY", "Remote", "peer_principal", "websocket_peer"]

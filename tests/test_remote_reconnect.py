"""Reconnecting over a remote transport (issue 12, item 6): the session store keeps the conversation.

An agent served by :class:`AcpApp` keeps its sessions in a :class:`SqliteSessionStore` shared by
its connections.  A client runs a turn, loses its transport mid-session (the WebSocket goes away
without an ACP goodbye), reconnects with the same cookie store, initializes, ``session/load``s the
session and finds the conversation intact; a second turn then continues it.  Real sockets on
127.0.0.1, waits bounded with ``trio.fail_after``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

import acp_trio
from acp_schema import v1

pytest.importorskip("hypercorn")
pytest.importorskip("trio_websocket")

from acp_trio.session_store import SqliteSessionStore, enable
from acp_trio.transports.asgi import AcpApp, serve
from acp_trio.transports.cookies import CookieStore
from acp_trio.transports.websocket import connect_websocket


class EchoAgent:
    """Answers each prompt by streaming its words back; its sessions live in ``STORE``."""

    store: Any = None

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        enable(conn, self.store)

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="sess-reconnect")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        for block in params.prompt:
            assert isinstance(block, v1.TextContentBlock)
            for word in block.text.split():
                update = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=word))
                await self.conn.client.session_update(
                    v1.SessionNotification(session_id=params.session_id, update=update)
                )
        return v1.PromptResponse(stop_reason="end_turn")


def transcript(state: acp_trio.SessionState) -> list[tuple[str, str]]:
    return [(message.role, message.text) for message in state.messages]


async def test_a_client_that_lost_its_websocket_reconnects_and_loads_its_session_intact(tmp_path: Path) -> None:
    EchoAgent.store = SqliteSessionStore(tmp_path / "sessions.db")
    cookies = CookieStore()
    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                urls = await nursery.start(serve, AcpApp(EchoAgent), "127.0.0.1", 0)
                url = urls[0].replace("http", "ws", 1) + "/acp"

                async with connect_websocket(url, acp_trio.StandardClient, cookies=cookies) as conn:
                    client: acp_trio.StandardClient = conn.handler
                    await conn.agent.initialize(
                        v1.InitializeRequest(protocol_version=1, client_capabilities=client.capabilities)
                    )
                    session = await conn.agent.session_new(v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[]))
                    await client.prompt(session.session_id, "hello remote world")
                    before = transcript(client.states[session.session_id])
                    await conn.websocket.aclose()  # the transport is lost mid-session: no ACP goodbye
                    await conn.wait_closed()

                async with connect_websocket(url, acp_trio.StandardClient, cookies=cookies) as again:
                    client = again.handler
                    init = await again.agent.initialize(
                        v1.InitializeRequest(protocol_version=1, client_capabilities=client.capabilities)
                    )
                    assert init.agent_capabilities.load_session  # the store advertises session/load
                    await client.states.load(
                        again.agent,
                        v1.LoadSessionRequest(session_id=session.session_id, cwd=str(tmp_path), mcp_servers=[]),
                    )
                    assert transcript(client.states[session.session_id]) == before  # the conversation, replayed intact
                    await client.prompt(session.session_id, "and again")
                    after = transcript(client.states[session.session_id])
                nursery.cancel_scope.cancel()
    finally:
        EchoAgent.store.close()
    assert before == [("user", "hello remote world"), ("agent", "helloremoteworld")]
    assert after == [*before, ("user", "and again"), ("agent", "andagain")]

"""A FastAPI app whose endpoint runs ACP prompt turns through one acp-trio client connection.

FastAPI is asyncio; acp-trio's client is trio.  The app's lifespan opens ``acp_trio.aio.trio_portal()``
(trio in guest mode on the server's asyncio loop) and holds one connection to the demo agent
(``python -m acp_trio.demo --serve-agent``, spawned over stdio) open with
``portal.wrap_async_context``; ``POST /prompt`` opens a session in a temporary directory holding a
``notes.txt`` and runs one turn through the portal, then answers with the stop reason and the
agent's messages.  A client that goes away mid-turn cancels the endpoint's task, which cancels the
trio task of the turn: it sends ``session/cancel``.

Run it: ``pip install fastapi uvicorn``, then ``uvicorn examples.asyncio_fastapi:app`` from the
repository root, and ``curl -X POST localhost:8000/prompt -H 'content-type: application/json' -d
'{"text": "Summarize notes.txt"}'``.
"""

import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import trio
from fastapi import FastAPI  # type: ignore[import-not-found, unused-ignore]  # the lint session has no fastapi
from pydantic import BaseModel

from acp_schema import v1
from acp_trio import ClientSideConnection, StandardClient, allow_kinds, spawn_agent
from acp_trio.aio import TrioPortal, trio_portal

AGENT = [sys.executable, "-m", "acp_trio.demo", "--serve-agent"]


class Prompt(BaseModel):
    text: str


class Reply(BaseModel):
    stop_reason: str
    messages: list[str]  # the agent's messages of the turn, in order


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    client = partial(StandardClient, policy=allow_kinds({"read"}))  # permission asked to read: allowed; else denied
    async with (
        trio_portal() as portal,
        portal.wrap_async_context(spawn_agent(AGENT[0], AGENT[1:], client=client)) as conn,
    ):
        handler: StandardClient = conn.handler
        init = v1.InitializeRequest(protocol_version=1, client_capabilities=handler.capabilities)
        await portal.run(conn.agent.initialize, init, timeout=30)
        app.state.portal, app.state.conn = portal, conn
        yield  # the app serves; leaving shuts the agent down, then ends the trio run


app = FastAPI(lifespan=lifespan)


@app.post("/prompt")  # type: ignore[untyped-decorator, unused-ignore]  # (untyped there)
async def prompt(body: Prompt) -> Reply:
    portal: TrioPortal = app.state.portal
    conn: ClientSideConnection = app.state.conn
    return await portal.run(one_turn, conn, body.text)


async def one_turn(conn: ClientSideConnection, text: str) -> Reply:
    """Trio code: a session of its own in a fresh directory, one turn, the agent's messages."""
    workdir = tempfile.mkdtemp()
    Path(workdir, "notes.txt").write_text("buy milk\ncall mum\n", encoding="utf-8")
    session = await conn.agent.session_new(v1.NewSessionRequest(cwd=workdir, mcp_servers=[]))
    handler: StandardClient = conn.handler
    try:
        result = await handler.prompt(session.session_id, text)
    except trio.Cancelled:  # the HTTP client went away: end the ACP turn too (prompt-turn.mdx § Cancellation)
        with trio.CancelScope(shield=True):
            await handler.cancel(session.session_id)
        raise
    messages = [m.text.strip() for m in handler.states[session.session_id].messages if m.role == "agent"]
    return Reply(stop_reason=str(result.stop_reason), messages=messages)

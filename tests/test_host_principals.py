"""Bearer tokens as principals: ``AcpApp(host=host, token={token: principal})`` (issue 35, item 5).

A client with a token of principal A makes a session and leaves; a client with principal B's token
cannot attach to it (``session/resume`` in v2, ``session/load`` in v1: -32002, as for a session
that does not exist) and, over Streamable HTTP, cannot use A's connection id either (``404``, the
body of an unknown ``Acp-Connection-Id``); a client with another token of A's principal resumes it.
Real sockets on the loopback interface, over WebSocket and Streamable HTTP.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import trio
from _host_kit import DEADLINE, Control, Recorder, agents, init1, init2, new_session, text

from acp_schema import v1, v2
from acp_trio import RequestError
from acp_trio.host import open_session_host
from acp_trio.transports.asgi import AcpApp, served
from acp_trio.transports.http import connect_http
from acp_trio.transports.websocket import connect_websocket

pytest.importorskip("hypercorn")
httpx2 = pytest.importorskip("httpx2")

TOKENS = {"alice-laptop": "alice", "alice-phone": "alice", "bob-token": "bob"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


Connect = Callable[..., AbstractAsyncContextManager[Any]]


def connector(url: str, transport: str) -> Connect:
    """``connect(client, token, variant)`` over ``transport`` to the app at ``url`` (``http://.../acp``)."""

    def connect(client: Any, token: str, variant: Any) -> AbstractAsyncContextManager[Any]:
        if transport == "ws":
            return connect_websocket(url.replace("http://", "ws://"), client, headers=bearer(token), variant=variant)
        return connect_http(url, client, headers=bearer(token), variant=variant)

    return connect


@asynccontextmanager
async def hosted() -> AsyncIterator[tuple[Any, AcpApp, str]]:
    """A session host of the kit's agents behind ``AcpApp(host=..., token=TOKENS)``: (host, app, URL)."""
    async with open_session_host(agents(Control())) as host:
        app = AcpApp(host=host, token=TOKENS)
        async with served(app, "127.0.0.1", 0) as [bound]:
            yield host, app, bound + "/acp"


async def leave_a_session(connect: Connect, host: Any, variant: Any) -> tuple[str, list[str]]:
    """Alice (her laptop's token) makes a session, runs a turn of 5 updates to its end and leaves:
    the session id and the texts she saw."""
    alice = Recorder()
    async with connect(alice, "alice-laptop", variant) as conn:
        await (init2 if variant is v2 else init1)(conn)
        sid = await new_session(conn)
        await conn.agent.session_prompt(variant.PromptRequest(session_id=sid, prompt=text("count 5", variant)))
        await alice.until(lambda: len(alice.texts()) == 5)
    await host.wait_until(lambda: sid in host.sessions() and host.sessions()[sid].attached == 0)
    assert alice.texts() == ["0", "1", "2", "3", "4"]
    return sid, alice.texts()


async def attach(conn: Any, variant: Any, sid: str) -> Any:
    """``session/resume`` (v2, replaying from the start) or ``session/load`` (v1) of ``sid``."""
    if variant is v2:
        start = v2.StartReplayFrom()
        return await conn.agent.session_resume(v2.ResumeSessionRequest(session_id=sid, cwd="/tmp", replay_from=start))
    return await conn.agent.session_load(v1.LoadSessionRequest(session_id=sid, cwd="/tmp", mcp_servers=[]))


@pytest.mark.parametrize("transport", ["ws", "http"])
@pytest.mark.parametrize("variant", [v2, v1], ids=["v2-resume", "v1-load"])
async def test_another_principals_token_cannot_attach_and_another_token_of_the_same_principal_can(
    transport: str, variant: Any
) -> None:
    with trio.fail_after(DEADLINE):
        async with hosted() as (host, _, url):
            connect = connector(url, transport)
            sid, seen = await leave_a_session(connect, host, variant)
            bob = Recorder()
            async with connect(bob, "bob-token", variant) as conn:
                await (init2 if variant is v2 else init1)(conn)
                with pytest.raises(RequestError) as refused:
                    await attach(conn, variant, sid)
                assert refused.value.code == -32002
                # bob attached to nothing, saw nothing, and the session is still alice's and detached
                assert bob.updates == [] and host.sessions()[sid].attached == 0
            phone = Recorder()
            async with connect(phone, "alice-phone", variant) as conn:
                await (init2 if variant is v2 else init1)(conn)
                await attach(conn, variant, sid)
                await phone.until(lambda: len(phone.texts()) == len(seen))
                assert phone.texts() == seen
                assert host.sessions()[sid].attached == 1


async def test_another_principals_token_gets_404_on_a_live_streamable_http_connection() -> None:
    # Alice's connection stays open while requests naming it come with bob's token: each is answered as
    # a connection id that does not exist (the same 404 and body), and none of them touches it.
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 2}}
    with trio.fail_after(DEADLINE):
        async with hosted() as (host, app, url), httpx2.AsyncClient() as raw:
            alice = Recorder()
            async with connect_http(url, alice, headers=bearer("alice-laptop"), variant=v2) as conn:
                await init2(conn)
                sid = await new_session(conn)
                cid = conn.connection_id
                assert cid is not None and cid in app.connection_ids

                async def refused(token: str, connection_id: str) -> list[tuple[int, str]]:
                    """POST (resume alice's session), GET (its SSE stream), DELETE, naming ``connection_id``."""
                    named = {**bearer(token), "acp-connection-id": connection_id, "acp-session-id": sid}
                    resume = {"jsonrpc": "2.0", "id": 7, "method": "session/resume"}
                    resume["params"] = {"sessionId": sid, "cwd": "/tmp", "replayFrom": {"type": "start"}}
                    replies = [
                        await raw.post(
                            url, content=json.dumps(resume), headers={**named, "content-type": "application/json"}
                        ),
                        await raw.get(url, headers={**named, "accept": "text/event-stream"}),
                        await raw.delete(url, headers=named),
                    ]
                    return [(reply.status_code, reply.text) for reply in replies]

                unknown = await refused("bob-token", "x" * len(cid))
                assert unknown == [(404, "Unknown Acp-Connection-Id")] * 3
                for _ in range(2):  # (the second time, bob's and alice's headers have passed the checks before)
                    assert await refused("bob-token", cid) == unknown
                    assert cid in app.connection_ids  # bob's DELETE did not end it
                    # alice's connection works on, with either of her tokens
                    assert (
                        await raw.post(
                            url,
                            json={"jsonrpc": "2.0", "method": "_ping"},
                            headers={**bearer("alice-phone"), "acp-connection-id": cid},
                        )
                    ).status_code == 202
                    await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 2")))
                    await alice.until(lambda: alice.states()[-1:] == ["idle"])
                    assert alice.texts() == ["0", "1"]
                    alice.updates.clear()
                # a new connection of bob's over raw HTTP is bob's: alice's token cannot use it either
                opened = await raw.post(url, json=init, headers=bearer("bob-token"))
                assert opened.status_code == 200
                bobs = opened.headers["acp-connection-id"]
                gone = await raw.delete(url, headers={**bearer("alice-laptop"), "acp-connection-id": bobs})
                assert (gone.status_code, gone.text) == (404, "Unknown Acp-Connection-Id")
                ended = await raw.delete(url, headers={**bearer("bob-token"), "acp-connection-id": bobs})
                assert ended.status_code == 202
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)


def test_token_mappings_and_exactly_one_way_to_serve() -> None:
    async def streams(connection_id: str, to_client: Any, from_client: Any) -> None:
        pass

    class Agent:
        pass

    with pytest.raises(TypeError, match="exactly one of"):
        AcpApp()
    with pytest.raises(TypeError, match="exactly one of"):
        AcpApp(Agent, serve_streams=streams)
    with pytest.raises(TypeError, match="exactly one of"):
        AcpApp(Agent, host=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="accepts no token"):
        AcpApp(Agent, token={})
    with pytest.raises(ValueError, match="empty token of principal 'alice'") as empty:
        AcpApp(Agent, token={"": "alice"})
    with pytest.raises(TypeError, match="got a str mapped to a int") as wrong:
        AcpApp(Agent, token={"s3cret": 1})  # type: ignore[dict-item]
    assert "s3cret" not in str(wrong.value) and "s3cret" not in str(empty.value)
    tokens = {"a": "alice"}
    app = AcpApp(Agent, token=tokens)
    tokens["b"] = "bob"  # the app took a copy: a later change to the caller's mapping does not count
    assert app.token == {"a": "alice"}

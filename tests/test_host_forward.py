"""Forwarding a session to its live owner host (issue 36 step 3).

Two hosts in this process on one PostgreSQL database (``test_host_takeover``'s kit), with a
``peer_token``; a host reaches another's advertised URL (``ws://NAME``) through ``connect_peer``,
which here serves a memory stream pair with the other host's ``serve_streams`` (what its WebSocket
endpoint does).  A client of host B resumes a session host A owns and runs: B serves it through a
connection to A.  Rules: docs/site/guides/host.md ("Several host processes: ownership and takeover").
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from _host_kit import Recorder, connected, init2, new_session
from _postgres import pg_conninfo, postgres_server  # noqa: F401
from test_host_takeover import Node, expire, prompt_until_idle, resume, states, texts
from test_host_takeover import node as takeover_node

from acp_schema import v2
from acp_trio import RequestError, neutral
from acp_trio.host import MOVED_REASON, SESSION_ENDED, SessionHost
from acp_trio.session_store import PostgresSessionStore

DEADLINE = 20
PEER_TOKEN = "peer-secret-0123456789"
pytestmark = pytest.mark.one_interpreter  # a PostgreSQL server (shared with test_store_pg.py)


class Asker(neutral.Agent):
    """Says ``echo <prompt>``; ``hang`` then waits for :attr:`go` and says ``late``; ``ask`` asks
    a permission and says what was chosen."""

    def __init__(self, store: PostgresSessionStore) -> None:
        super().__init__()
        self.store = store
        self.go = trio.Event()

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        await turn.say(f"echo {turn.text}")
        if turn.text == "hang":
            await self.go.wait()
            await turn.say("late")
        if turn.text == "wait":  # until session/cancel
            await trio.sleep_forever()
        if turn.text == "ask":
            decision = await turn.ask_permission("may I?")
            await turn.say(f"chose {decision.option.option_id if decision.option else None}")
        return "end_turn"


@pytest.fixture
def conninfo(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("pg_conninfo"))


@contextlib.asynccontextmanager
async def node(
    conninfo: str, name: str, nursery: trio.Nursery, hosts: dict[str, SessionHost], token: str = PEER_TOKEN
) -> AsyncIterator[Node]:
    """A host named ``name`` at ``ws://name`` whose ``connect_peer`` reaches the hosts in ``hosts``."""

    @contextlib.asynccontextmanager
    async def connect_peer(url: str) -> AsyncIterator[trio.abc.Stream]:
        target = hosts[url.removeprefix("ws://")]
        near, far = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as inner:
            inner.start_soon(target.serve_streams, f"peer-{name}", far, far)
            try:
                yield near
            finally:
                await near.aclose()

    async with takeover_node(
        conninfo, name, nursery, agent_class=Asker, peer_token=token, connect_peer=connect_peer
    ) as started:
        hosts[name] = started.host
        yield started


def numbered(rec: Recorder) -> list[tuple[int, Any]]:
    return [(n, u) for n, u in zip(rec.numbers, rec.updates, strict=True) if n is not None]


async def test_a_client_of_another_host_is_served_the_live_session_through_its_owner(conninfo: str) -> None:
    hosts: dict[str, SessionHost] = {}
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with node(conninfo, "a", nursery, hosts) as a, node(conninfo, "b", nursery, hosts) as b:
                first = Recorder()
                async with connected(a.host, first, principal="alice") as conn:
                    await init2(conn)
                    sid = await new_session(conn)
                    await prompt_until_idle(conn, first, sid, "one")
                    await conn.agent.session_prompt(
                        v2.PromptRequest(session_id=sid, prompt=[v2.TextContentBlock(text="hang")])
                    )
                    await first.until(lambda: "echo hang" in texts(first))
                seen = numbered(first)  # a's first client is gone; the turn runs on a
                # bob, through b, gets what a would answer him
                probe = Recorder()
                async with connected(b.host, probe, principal="bob") as other:
                    await init2(other)
                    with pytest.raises(RequestError) as refused:
                        await resume(other, sid, v2.StartReplayFrom())
                assert (refused.value.code, refused.value.data) == (-32002, {"sessionId": sid})
                # alice, through b: the exact replay, then the live turn's end from a
                second = Recorder()
                async with connected(b.host, second, principal="alice") as conn:
                    await init2(conn)
                    await resume(conn, sid, v2.StartReplayFrom())
                    await second.until(lambda: len(numbered(second)) >= len(seen))
                    assert numbered(second)[: len(seen)] == seen
                    assert sid not in b.host.sessions() and a.host.sessions()[sid].attached == 1
                    a.agent.go.set()
                    await second.until(lambda: states(second)[-1:] == [("idle", "end_turn")])
                    assert texts(second)[-1] == "late"
                    got = [n for n, _ in numbered(second)]
                    assert got == list(range(1, got[-1] + 1))  # a's numbers, no gap, no duplicate
                    assert got[-1] == a.host.sessions()[sid].last_update
                    # a's agent asks; the client on b answers; the turn goes on with that answer
                    await prompt_until_idle(conn, second, sid, "ask")
                    assert len(second.asked) == 1 and texts(second)[-1] == "chose allow"
                    await prompt_until_idle(conn, second, sid, "two")
                    assert texts(second)[-1] == "echo two"
                    assert sid not in b.host.sessions()  # never live on b: forwarded
                    # session/cancel passes through b to a's agent
                    await conn.agent.session_prompt(
                        v2.PromptRequest(session_id=sid, prompt=[v2.TextContentBlock(text="wait")])
                    )
                    await second.until(lambda: texts(second)[-1] == "echo wait")
                    await conn.agent.session_cancel(v2.CancelSessionNotification(session_id=sid))
                    await second.until(lambda: states(second)[-1:] == [("idle", "cancelled")])
                    # a dies mid-forward: the client is told to resume again; once a's lease is
                    # gone, b takes the session over with the whole history
                    last = numbered(second)[-1][0]
                    a.host.abandon()
                    await second.until(lambda: any(m == SESSION_ENDED for m, _ in second.ext))
                    ended = next(p for m, p in second.ext if m == SESSION_ENDED)
                    assert ended["sessionId"] == sid and ended["reason"] == MOVED_REASON
                    expire(conninfo, "a")
                    third = Recorder()
                    async with connected(b.host, third, principal="alice") as again:
                        await init2(again)
                        await resume(again, sid, v2.StartReplayFrom())
                        assert [n for n, _ in numbered(third)] == list(range(1, last + 1))
                        assert sid in b.host.sessions()
                        await prompt_until_idle(again, third, sid, "three")
                        assert texts(third)[-1] == "echo three"
            nursery.cancel_scope.cancel()


async def test_a_peer_connection_acts_for_a_principal_only_with_the_hosts_token_which_the_agent_never_sees(
    conninfo: str,
) -> None:
    hosts: dict[str, SessionHost] = {}
    seen: list[Any] = []
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with node(conninfo, "a", nursery, hosts) as a:
                original = a.host._forward

                def forward(instance: Any, client: Any, message: Any, **options: Any) -> Any:
                    if message.get("method") == "initialize":  # what goes to the agent instance
                        seen.append(message)
                    return original(instance, client, message, **options)

                a.host._forward = forward  # type: ignore[method-assign]
                first = Recorder()
                async with connected(a.host, first, principal="alice") as conn:
                    await init2(conn)
                    sid = await new_session(conn)
                for token, principal in ((PEER_TOKEN[:-1] + "x", "alice"), (PEER_TOKEN, "alice")):
                    rec = Recorder()
                    async with connected(a.host, rec, principal="hosts") as peer:
                        meta = {"acp-trio/peer": {"token": token, "principal": principal}}
                        info = v2.Implementation(name="t", version="0")
                        request = v2.InitializeRequest(protocol_version=2, info=info, meta=meta)
                        if token != PEER_TOKEN:
                            with pytest.raises(RequestError) as refused:
                                await peer.initialize(request)
                            assert refused.value.code == -32600
                            continue
                        await peer.initialize(request)
                        await resume(peer, sid)  # acting for alice: her session
                assert a.host.sessions()[sid].attached == 0
    assert len(seen) == 2 and all("acp-trio/peer" not in str(message) for message in seen)  # alice's, the peer's


async def test_an_owner_that_cannot_be_reached_is_named_in_the_answer_and_nothing_stays_forwarded(
    conninfo: str,
) -> None:
    hosts: dict[str, SessionHost] = {}
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with node(conninfo, "a", nursery, hosts) as a, node(conninfo, "b", nursery, {}) as b:
                first = Recorder()
                async with connected(a.host, first) as conn:
                    await init2(conn)
                    sid = await new_session(conn)
                probe = Recorder()
                async with connected(b.host, probe) as other:  # b's connector knows no host: a is unreachable
                    await init2(other)
                    for _ in range(2):  # the second asks again: nothing of the first is left in the way
                        with pytest.raises(RequestError) as failed:
                            await resume(other, sid)
                        assert failed.value.code == -32603
                        assert failed.value.data == {
                            "reason": "owned by another host",
                            "sessionId": sid,
                            "ownerUrl": "ws://a",
                        }
                    new = await other.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))  # the connection goes on
                    assert str(new.session_id) in b.host.sessions()
            nursery.cancel_scope.cancel()

"""Ownership and takeover of sessions between session hosts sharing one PostgreSQL store (issue 36 step 2).

Hosts run in this process, each with its own agent object and its own ``PostgresSessionStore`` on
one database (as separate processes would), and ``HostOwnership`` leases.  A host "dies" with
:meth:`SessionHost.abandon` (nothing released or forgotten, as after SIGKILL); its leases are
made to expire by moving their ``expires_at`` into the past (what the server's clock would do
after ``lease_seconds``), so no test waits for time.  The process test (a real SIGKILL, the
takeover time) is ``tests/test_host_takeover_process.py``.  Rules: docs/site/guides/host.md
("Several host processes: ownership and takeover").
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio

pytest.importorskip("psycopg", reason="the postgres extra is not installed")

import psycopg
from _host_kit import Recorder, connected, init1, init2, new_session
from _postgres import pg_conninfo, postgres_server  # noqa: F401

from acp_schema import v1, v2
from acp_trio import RequestError, neutral
from acp_trio.host import (
    CURSOR_TYPE,
    MOVED_REASON,
    OWNED_REASON,
    SESSION_ENDED,
    TAKEN_OVER_REASON,
    TURN_ENDED,
    UPDATE_META_KEY,
    HostOwnership,
    SessionHost,
    open_session_host,
)
from acp_trio.session_store import PostgresSessionStore, StoreError

DEADLINE = 20
pytestmark = pytest.mark.one_interpreter  # a PostgreSQL server (shared with test_store_pg.py)


class Echo(neutral.Agent):
    """Says ``echo <prompt>``; a prompt ``hang`` says it then waits for :attr:`go` and says ``late``."""

    def __init__(self, store: PostgresSessionStore) -> None:
        super().__init__()
        self.store = store
        self.go = trio.Event()
        self.hanging = trio.Event()

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        await turn.say(f"echo {turn.text}")
        if turn.text == "hang":
            self.hanging.set()
            await self.go.wait()
            await turn.say("late")
        return "end_turn"


@pytest.fixture
def conninfo(request: pytest.FixtureRequest) -> str:
    """A schema of this test's own on the session's PostgreSQL server (``_postgres.pg_conninfo``)."""
    return str(request.getfixturevalue("pg_conninfo"))


class Node:
    def __init__(
        self, name: str, store: PostgresSessionStore, host: SessionHost, agent: Echo, stopped: trio.Event
    ) -> None:
        self.stopped = stopped  # set once its open_session_host block is left
        self.name = name
        self.store = store
        self.host = host
        self.agent = agent


@contextlib.asynccontextmanager
async def node(
    conninfo: str,
    name: str,
    nursery: trio.Nursery,
    lease_seconds: float = 10,
    agent_class: Callable[[PostgresSessionStore], Any] = Echo,
    **ownership_options: Any,
) -> AsyncIterator[Node]:
    """A host named ``name`` (its id; URL ``ws://name``) with its own store and agent (``agent_class(store)``),
    run in ``nursery`` (so that :meth:`SessionHost.abandon` stops it alone); ``ownership_options``: more
    keyword arguments for its :class:`HostOwnership` (``peer_token``, ``connect_peer``)."""
    store = PostgresSessionStore(conninfo, pool_size=2)
    agent = agent_class(store)
    ownership = HostOwnership(store, host_id=name, url=f"ws://{name}", lease_seconds=lease_seconds, **ownership_options)
    started: list[SessionHost] = []
    stopped = trio.Event()
    ready = trio.Event()

    async def run() -> None:
        try:
            async with open_session_host(agent, ownership=ownership) as host:
                started.append(host)
                ready.set()
                await trio.sleep_forever()
        finally:
            stopped.set()

    nursery.start_soon(run)
    await ready.wait()
    try:
        yield Node(name, store, started[0], agent, stopped)
    finally:
        started[0]._stop()
        with trio.CancelScope(shield=True):
            await stopped.wait()
            await trio.to_thread.run_sync(store.close)


def expire(conninfo: str, owner: str) -> None:
    """What ``lease_seconds`` without renewal does: ``owner``'s leases are past their end."""
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute(
            "UPDATE acp_session_leases SET expires_at = clock_timestamp() - interval '1 second' "
            "WHERE split_part(owner, ' ', 1) = %s",
            (owner,),
        )


def texts(rec: Recorder) -> list[str]:
    return [u.content.text for u in rec.updates if type(u).__name__ == "AgentMessageChunkSessionUpdate"]


def states(rec: Recorder) -> list[tuple[str, Any]]:
    found = [u for u in rec.updates if getattr(u, "session_update", None) == "state_update"]
    return [(u.state, r if isinstance(r := getattr(u, "stop_reason", None), str) else None) for u in found]


async def resume(conn: Any, sid: str, replay: Any = None) -> Any:
    return await conn.agent.session_resume(v2.ResumeSessionRequest(session_id=sid, cwd="/tmp", replay_from=replay))


async def prompt_until_idle(conn: Any, rec: Recorder, sid: str, text: str) -> None:
    idle_before = sum(1 for s in states(rec) if s[0] == "idle")
    await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=[v2.TextContentBlock(text=text)]))
    await rec.until(lambda: sum(1 for s in states(rec) if s[0] == "idle") > idle_before)


async def test_a_dead_hosts_session_is_taken_over_with_its_history_exact_and_its_turn_ended(conninfo: str) -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with node(conninfo, "a", nursery) as a, node(conninfo, "b", nursery) as b:
                first = Recorder()
                async with connected(a.host, first) as conn:
                    await init2(conn)
                    sid = await new_session(conn)
                    lease = await a.store.owner(sid)
                    assert lease is not None and lease.owner == "a ws://a" and lease.held
                    await prompt_until_idle(conn, first, sid, "one")
                    await conn.agent.session_prompt(
                        v2.PromptRequest(session_id=sid, prompt=[v2.TextContentBlock(text="hang")])
                    )
                    await first.until(lambda: "echo hang" in texts(first))
                    seen = list(zip(first.numbers, first.updates, strict=True))
                    # a, alive, owns it: b answers who does
                    probe = Recorder()
                    async with connected(b.host, probe) as other:
                        await init2(other)
                        with pytest.raises(RequestError) as owned:
                            await resume(other, sid)
                    assert owned.value.code == -32603
                    assert owned.value.data["reason"] == OWNED_REASON
                    assert (owned.value.data["owner"], owned.value.data["ownerUrl"]) == ("a", "ws://a")
                    a.host.abandon()  # as SIGKILL: nothing released, nothing forgotten
                expire(conninfo, "a")
                second = Recorder()
                async with connected(b.host, second) as conn:
                    await init2(conn)
                    await resume(conn, sid, v2.StartReplayFrom())
                    numbered = [(n, u) for n, u in zip(second.numbers, second.updates, strict=True) if n is not None]
                    # the whole history, exactly as the first client saw it live, then the turn's end
                    assert numbered[: len(seen)] == [(n, u) for n, u in seen if n is not None]
                    assert [n for n, _ in numbered] == list(range(1, len(numbered) + 1))
                    end = numbered[len(seen) :]
                    assert len(end) == 1 and (end[0][1].state, end[0][1].stop_reason) == ("idle", "error")
                    assert states(second)[-1] == ("idle", "error") and second.numbers[-1] is None  # current state
                    lease = await b.store.owner(sid)
                    assert lease is not None and lease.owner == "b ws://b"
                    # a new prompt works, its updates numbered after the journal's
                    await prompt_until_idle(conn, second, sid, "two")
                    assert texts(second)[-1] == "echo two"
                    assert second.numbers[-1] is not None and second.numbers[-1] > len(numbered)
                    # a client with a cursor gets exactly what follows it
                    cursor = Recorder()
                    async with connected(b.host, cursor) as third:
                        await init2(third)
                        await resume(third, sid, {"type": CURSOR_TYPE, "update": len(seen)})
                        got = [n for n in cursor.numbers if n is not None]
                        assert got == list(range(len(seen), second.numbers[-1] + 1))
            nursery.cancel_scope.cancel()


async def test_two_hosts_racing_to_take_over_one_session_one_wins_the_other_names_it(conninfo: str) -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with (
                node(conninfo, "a", nursery) as a,
                node(conninfo, "b", nursery) as b,
                node(conninfo, "c", nursery) as c,
            ):
                rec = Recorder()
                async with connected(a.host, rec) as conn:
                    await init2(conn)
                    sid = await new_session(conn)
                    await prompt_until_idle(conn, rec, sid, "one")
                    a.host.abandon()
                expire(conninfo, "a")
                outcomes: dict[str, Any] = {}

                async def take(n: Node) -> None:
                    r = Recorder()
                    async with connected(n.host, r) as conn:
                        await init2(conn)
                        try:
                            await resume(conn, sid)
                            outcomes[n.name] = "won"
                        except RequestError as exc:
                            outcomes[n.name] = exc

                async with trio.open_nursery() as race:
                    race.start_soon(take, b)
                    race.start_soon(take, c)
                winners = [name for name, o in outcomes.items() if o == "won"]
                assert len(winners) == 1, outcomes
                (loser,) = (o for o in outcomes.values() if o != "won")
                assert loser.data["reason"] == OWNED_REASON and loser.data["owner"] == winners[0]
                live = [n.name for n in (b, c) if sid in n.host.sessions()]
                assert live == winners
            nursery.cancel_scope.cancel()


async def test_a_host_whose_lease_was_taken_cannot_append_and_tells_its_clients(conninfo: str) -> None:
    """a is paused (its lease expires, it does not know); b takes the session; a's turn goes on:
    its next update is fenced off, nothing of it reaches the journal, a's client is told."""
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with node(conninfo, "a", nursery) as a, node(conninfo, "b", nursery) as b:
                on_a, on_b = Recorder(), Recorder()
                async with connected(a.host, on_a) as conn_a, connected(b.host, on_b) as conn_b:
                    await init2(conn_a)
                    await init2(conn_b)
                    sid = await new_session(conn_a)
                    await conn_a.agent.session_prompt(
                        v2.PromptRequest(session_id=sid, prompt=[v2.TextContentBlock(text="hang")])
                    )
                    await a.agent.hanging.wait()
                    await on_a.until(lambda: "echo hang" in texts(on_a))
                    expire(conninfo, "a")
                    await resume(conn_b, sid)
                    last = await b.store.journal().last(sid)
                    a.agent.go.set()  # a's turn says "late": fenced
                    await on_a.until(lambda: any(m == SESSION_ENDED for m, _ in on_a.ext))
                    (params,) = [p for m, p in on_a.ext if m == SESSION_ENDED]
                    assert params["reason"] == TAKEN_OVER_REASON
                    assert sid not in a.host.sessions()
                    assert "late" not in texts(on_a)
                    assert await b.store.journal().last(sid) == last  # nothing of a's
                    # b goes on
                    await prompt_until_idle(conn_b, on_b, sid, "two")
                    assert texts(on_b)[-1] == "echo two"
                    lease = await b.store.owner(sid)
                    assert lease is not None and lease.owner.startswith("b ")
            nursery.cancel_scope.cancel()


async def test_hand_over_releases_the_leases_so_another_host_takes_the_sessions_at_once(conninfo: str) -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with node(conninfo, "a", nursery) as a, node(conninfo, "b", nursery) as b:
                on_a = Recorder()
                async with connected(a.host, on_a) as conn:
                    await init2(conn)
                    sid = await new_session(conn)
                    await prompt_until_idle(conn, on_a, sid, "one")
                    a.host.drain()
                    assert await a.host.hand_over("the host is draining") == 1
                    await on_a.until(lambda: any(m == SESSION_ENDED for m, _ in on_a.ext))
                    (params,) = [p for m, p in on_a.ext if m == SESSION_ENDED]
                    assert params["reason"] == MOVED_REASON
                assert await a.store.owner(sid) is None  # released, not left to expire
                on_b = Recorder()
                async with connected(b.host, on_b) as conn:
                    await init2(conn)
                    await resume(conn, sid, v2.StartReplayFrom())
                    assert [n for n in on_b.numbers if n is not None] == [n for n in on_a.numbers if n is not None]
                    assert texts(on_b) == texts(on_a) == ["echo one"]
                    await prompt_until_idle(conn, on_b, sid, "two")
                    assert texts(on_b)[-1] == "echo two"
            nursery.cancel_scope.cancel()


async def test_a_v1_session_is_taken_over_without_the_agents_replay_and_its_turn_ended(conninfo: str) -> None:
    """v1 session/load on the new host: the journal's replay only (the agent's own is dropped), no
    duplicate; the turn that was running (journaled _acp_trio/turn_started, no turn_ended) is ended
    with a journaled _acp_trio/turn_ended carrying the error."""
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with node(conninfo, "a", nursery) as a, node(conninfo, "b", nursery) as b:
                on_a = Recorder()
                async with connected(a.host, on_a, v1) as conn:
                    await init1(conn)
                    sid = str(
                        (await conn.agent.session_new(v1.NewSessionRequest(cwd="/tmp", mcp_servers=[]))).session_id
                    )
                    await conn.agent.session_prompt(
                        v1.PromptRequest(session_id=sid, prompt=[v1.TextContentBlock(text="one")])
                    )
                    await on_a.until(lambda: [m for m, _ in on_a.ext] == [TURN_ENDED])  # the prompter gets it too

                    async def hang() -> None:
                        with contextlib.suppress(Exception):
                            await conn.agent.session_prompt(
                                v1.PromptRequest(session_id=sid, prompt=[v1.TextContentBlock(text="hang")])
                            )

                    nursery.start_soon(hang)
                    await on_a.until(lambda: "echo hang" in texts(on_a))
                    a.host.abandon()
                expire(conninfo, "a")
                on_b = Recorder()
                async with connected(b.host, on_b, v1) as conn:
                    await init1(conn)
                    await conn.agent.session_load(v1.LoadSessionRequest(session_id=sid, cwd="/tmp", mcp_servers=[]))
                    assert on_b.numbers == on_a.numbers and all(n is not None for n in on_b.numbers)
                    assert texts(on_b) == ["echo one", "echo hang"]
                    # the client handles notifications concurrently: by their numbers
                    await on_b.until(lambda: sum(1 for m, _ in on_b.ext if m == TURN_ENDED) == 2)
                    ended = sorted(
                        (p for m, p in on_b.ext if m == TURN_ENDED), key=lambda p: p["_meta"][UPDATE_META_KEY]
                    )
                    assert "stopReason" in ended[0] and ended[0]["_meta"][UPDATE_META_KEY] < on_a.numbers[-1]
                    assert ended[1]["error"]["data"]["reason"] == TAKEN_OVER_REASON
                    await conn.agent.session_prompt(
                        v1.PromptRequest(session_id=sid, prompt=[v1.TextContentBlock(text="two")])
                    )
                    assert texts(on_b) == ["echo one", "echo hang", "echo two"]
            nursery.cancel_scope.cancel()


async def test_a_host_that_closes_leaves_its_sessions_to_the_others_journal_kept_lease_released(conninfo: str) -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with node(conninfo, "a", nursery) as a, node(conninfo, "b", nursery) as b:
                on_a = Recorder()
                async with connected(a.host, on_a) as conn:
                    await init2(conn)
                    sid = await new_session(conn)
                    await prompt_until_idle(conn, on_a, sid, "one")
                await a.host.aclose()
                await a.stopped.wait()
                assert await a.store.owner(sid) is None  # released
                on_b = Recorder()
                async with connected(b.host, on_b) as conn:
                    await init2(conn)
                    await resume(conn, sid, v2.StartReplayFrom())
                    assert numbered_of(on_b) == numbered_of(on_a) and numbered_of(on_a)
            nursery.cancel_scope.cancel()


def numbered_of(rec: Recorder) -> list[tuple[int, Any]]:
    return [(n, u) for n, u in zip(rec.numbers, rec.updates, strict=True) if n is not None]


async def test_a_lease_of_its_own_left_behind_does_not_stop_a_host_from_loading_the_session(conninfo: str) -> None:
    """A release that failed leaves a lease of this host's on a session not live in it: its next
    resume there replaces that lease (a new epoch) instead of answering that the host itself owns it."""
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with node(conninfo, "a", nursery) as a:
                rec = Recorder()
                async with connected(a.host, rec) as conn:
                    await init2(conn)
                    sid = await new_session(conn)
                    await prompt_until_idle(conn, rec, sid, "one")
                    await conn.agent.session_close(v2.CloseSessionRequest(session_id=sid))
                assert await a.store.owner(sid) is None
                stale = await a.store.claim(sid, a.host.ownership.owner, 10)  # as if the release had failed
                assert stale is not None
                again = Recorder()
                async with connected(a.host, again) as conn:
                    await init2(conn)
                    await resume(conn, sid)
                lease = await a.store.owner(sid)
                assert lease is not None and lease.epoch > stale.epoch and sid in a.host.sessions()
            nursery.cancel_scope.cancel()


async def test_a_renewal_that_finds_the_lease_taken_ends_the_idle_session_here(conninfo: str) -> None:
    """No append to fail: a's renewal (every 0.1 s here) finds that b holds the lease now."""
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with node(conninfo, "a", nursery, lease_seconds=0.3) as a, node(conninfo, "b", nursery) as b:
                on_a, on_b = Recorder(), Recorder()
                async with connected(a.host, on_a) as conn_a, connected(b.host, on_b) as conn_b:
                    await init2(conn_a)
                    await init2(conn_b)
                    sid = await new_session(conn_a)
                    await prompt_until_idle(conn_a, on_a, sid, "one")
                    with psycopg.connect(conninfo, autocommit=True) as db:  # b claims it: a's lease ends now
                        db.execute(
                            "UPDATE acp_session_leases SET expires_at = clock_timestamp() WHERE session_id = %s", (sid,)
                        )
                    await resume(conn_b, sid)
                    await on_a.until(lambda: any(m == SESSION_ENDED for m, _ in on_a.ext))
                    (params,) = [p for m, p in on_a.ext if m == SESSION_ENDED]
                    assert params["reason"] == TAKEN_OVER_REASON
                    assert sid not in a.host.sessions() and sid in b.host.sessions()
                    lease = await b.store.owner(sid)
                    assert lease is not None and lease.owner.startswith("b ")  # a released nothing of b's
            nursery.cancel_scope.cancel()


async def test_a_v1_prompt_whose_turn_start_cannot_be_journaled_fails_and_leaves_no_turn_running(
    conninfo: str,
) -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with node(conninfo, "a", nursery) as a:
                journal = a.host.journal
                failing = [True]

                class Failing:
                    """The host's journal, whose next append raises (a database gone for a moment)."""

                    def __getattr__(self, name: str) -> Any:
                        return getattr(journal, name)

                    async def append(self, *args: Any, **kwargs: Any) -> int:
                        if failing and failing.pop():
                            raise StoreError("the database went away")
                        number: int = await journal.append(*args, **kwargs)
                        return number

                rec = Recorder()
                async with connected(a.host, rec, v1) as conn:
                    await init1(conn)
                    sid = str(
                        (await conn.agent.session_new(v1.NewSessionRequest(cwd="/tmp", mcp_servers=[]))).session_id
                    )
                    a.host.journal = Failing()  # type: ignore[assignment]
                    prompt = v1.PromptRequest(session_id=sid, prompt=[v1.TextContentBlock(text="one")])
                    with pytest.raises(RequestError) as failed:
                        await conn.agent.session_prompt(prompt)
                    assert failed.value.code == -32603 and "went away" in failed.value.message
                    assert not a.host.sessions()[sid].running
                    await conn.agent.session_prompt(prompt)  # the next prompt runs
                    assert texts(rec) == ["echo one"]
            nursery.cancel_scope.cancel()


async def test_another_principals_client_on_another_host_gets_not_found_never_the_session(conninfo: str) -> None:
    """The session's principal is stored with its lease: a client of another principal on a second host
    gets what it gets on the owner (-32002 "Resource not found", no owner named), alive or dead; the
    session's own principal takes it over."""
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            async with node(conninfo, "a", nursery) as a, node(conninfo, "b", nursery) as b:
                first = Recorder()
                async with connected(a.host, first, principal="alice") as conn:
                    await init2(conn)
                    sid = await new_session(conn)
                    await prompt_until_idle(conn, first, sid, "secret")
                    for phase in ("alive", "dead"):
                        if phase == "dead":
                            a.host.abandon()  # as SIGKILL
                            expire(conninfo, "a")
                        probe = Recorder()
                        async with connected(b.host, probe, principal="bob") as other:
                            await init2(other)
                            with pytest.raises(RequestError) as refused:
                                await resume(other, sid, v2.StartReplayFrom())
                        assert refused.value.code == -32002, phase
                        assert refused.value.data == {"sessionId": sid}, phase  # no owner, no URL
                        assert "echo secret" not in texts(probe)
                lease = await b.store.owner(sid)
                assert lease is not None and lease.owner == "a ws://a"  # bob's asking claimed nothing
                second = Recorder()
                async with connected(b.host, second, principal="alice") as conn:
                    await init2(conn)
                    await resume(conn, sid, v2.StartReplayFrom())
                    assert texts(second) == ["echo secret"]
                    await prompt_until_idle(conn, second, sid, "more")
                    assert texts(second)[-1] == "echo more"
            nursery.cancel_scope.cancel()

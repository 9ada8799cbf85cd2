"""The session host (acp_trio.host): one client, detach mid-turn, reattach with replay.

Spec: v2 ``session-setup.mdx`` (Resuming Sessions: ``replayFrom``, inclusive cursors, replay before
the answer), ``prompt-lifecycle.mdx`` (``state_update``), ``extensibility.mdx`` (``_meta``), the
v2 schema's ``ReplayFromOther`` (``_``-prefixed cursor types for implementations).  Everything in
memory (``host.connect``), under trio's autojump clock where time matters.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from _host_kit import DEADLINE, Control, Recorder, agents, connected, init2, text

from acp_schema import v2
from acp_trio import RequestError
from acp_trio.host import (
    CURRENT_META_KEY,
    CURSOR_TYPE,
    LAST_META_KEY,
    SESSION_ENDED,
    SESSION_ENDED_REASON,
    MemoryJournal,
    open_session_host,
)


def resume(session_id: str, replay: Any = None) -> v2.ResumeSessionRequest:
    request = v2.ResumeSessionRequest(session_id=session_id, cwd="/tmp")
    if replay is not None:
        request.replay_from = replay
    return request


def cursor(number: int) -> v2.ReplayFromOther:
    return v2.ReplayFromOther(type=CURSOR_TYPE, extra_fields={"update": number})


async def test_a_detached_turn_keeps_running_and_its_updates_are_journaled() -> None:
    control = Control()
    journal = MemoryJournal()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control), journal=journal) as host:
            rec = Recorder()
            async with host.connect(rec, variant=v2) as conn:
                await init2(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 3 wait count 0")))
                await rec.until(lambda: len(rec.texts()) == 3)
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            assert host.sessions()[sid].running
            control.gate.set()  # the turn goes on with nobody attached
            await control.until(lambda: control.turns_ended)
            await host.wait_until(lambda: host.sessions()[sid].state == "idle")
            lines = await journal.read(sid, 0)
            kinds = [line for _, line in lines]
            assert [n for n, _ in lines] == list(range(1, len(lines) + 1))
            assert b'"state":"idle"' in kinds[-1] and b'"stopReason":"end_turn"' in kinds[-1]
            assert host.sessions()[sid].last_update == len(lines)


async def test_resume_with_start_replays_everything_in_order_then_goes_live() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            first = Recorder()
            async with host.connect(first, variant=v2) as conn:
                await init2(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 4 wait count 0")))
                await first.until(lambda: len(first.texts()) == 4)
            seen_before = list(first.numbers)
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            second = Recorder()
            async with host.connect(second, variant=v2) as conn2:
                await init2(conn2)
                answer = await conn2.agent.session_resume(resume(sid, v2.StartReplayFrom()))
                replayed = len(second.updates)
                # the replay (user message, running, 4 chunks), then the current state, before the answer
                assert second.numbers[: replayed - 1] == seen_before
                assert second.numbers[-1] is None and second.states()[-1] == "running"
                assert answer.meta == {LAST_META_KEY: seen_before[-1]}
                control.gate.set()
                await second.until(lambda: second.states()[-1:] == ["idle"])
                live = second.numbers[replayed:]
                assert live == list(range(seen_before[-1] + 1, seen_before[-1] + 1 + len(live)))
                assert second.texts() == ["0", "1", "2", "3"]


async def test_resume_with_the_cursor_replays_only_what_was_missed_no_gap_no_duplicate() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            first = Recorder()
            async with host.connect(first, variant=v2) as conn:
                await init2(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 2 wait count 0")))
                await first.until(lambda: len(first.texts()) == 2)
            seen = max(n for n in first.numbers if n is not None)
            control.gate.set()  # updates made while detached
            await control.until(lambda: control.turns_ended)
            await host.wait_until(lambda: host.sessions()[sid].state == "idle")
            missed_to = host.sessions()[sid].last_update
            assert missed_to > seen
            second = Recorder()
            async with host.connect(second, variant=v2) as conn2:
                await init2(conn2)
                answer = await conn2.agent.session_resume(resume(sid, cursor(seen + 1)))
                assert second.numbers[:-1] == list(range(seen + 1, missed_to + 1))
                assert second.states()[-1] == "idle"
                assert answer.meta == {LAST_META_KEY: missed_to}
                # then live: a new turn's updates continue the numbering
                await conn2.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 2")))
                await second.until(lambda: second.states()[-1:] == ["idle"] and len(second.texts()) == 2)
                numbers = [n for n in second.numbers if n is not None]
                assert numbers == list(range(seen + 1, numbers[-1] + 1))


async def test_the_current_state_update_comes_before_the_resume_answer_and_is_marked_current() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            rec = Recorder()
            async with host.connect(rec, variant=v2) as conn:
                await init2(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
            rec2 = Recorder()
            metas: list[Any] = []

            async def update(params: Any) -> None:
                metas.append(params.meta)
                await Recorder.session_update(rec2, params)

            rec2.session_update = update  # type: ignore[method-assign]
            async with host.connect(rec2, variant=v2) as conn2:
                await init2(conn2)
                await conn2.agent.session_resume(resume(sid))  # no replay: the state alone
                assert rec2.states() == ["idle"]
                assert metas == [{CURRENT_META_KEY: True}]


async def test_a_cursor_older_than_the_journal_holds_is_refused_with_the_oldest_number() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control), journal=MemoryJournal(max_updates=3)) as host:
            rec = Recorder()
            async with host.connect(rec, variant=v2) as conn:
                await init2(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 6")))
                await rec.until(lambda: rec.states()[-1:] == ["idle"])
            last = host.sessions()[sid].last_update
            async with host.connect(Recorder(), variant=v2) as conn2:
                await init2(conn2)
                with pytest.raises(RequestError) as caught:
                    await conn2.agent.session_resume(resume(sid, cursor(2)))
                assert caught.value.code == -32602
                assert caught.value.data == {"sessionId": sid, "oldest": last - 2}
                with pytest.raises(RequestError) as caught:
                    await conn2.agent.session_resume(resume(sid, cursor(last + 2)))
                assert caught.value.code == -32602
                # start replays what is retained
                rec3 = Recorder()
            async with host.connect(rec3, variant=v2) as conn3:
                await init2(conn3)
                await conn3.agent.session_resume(resume(sid, v2.StartReplayFrom()))
                assert rec3.numbers[:-1] == [last - 2, last - 1, last]


async def test_the_bodys_exception_comes_out_as_itself() -> None:
    with trio.fail_after(DEADLINE), pytest.raises(ValueError, match="the body's"):
        async with open_session_host(agents(Control())) as host:
            async with host.connect(Recorder(), variant=v2) as conn:
                await init2(conn)
                raise ValueError("the body's")


async def test_the_sqlite_journal_serves_a_resume_with_the_cursor(tmp_path: Any) -> None:
    from acp_trio.session_store import SqliteSessionStore

    control = Control()
    with SqliteSessionStore(str(tmp_path / "host.db")) as store, trio.fail_after(DEADLINE):
        async with open_session_host(agents(control), journal=store.journal()) as host:
            first = Recorder()
            async with host.connect(first, variant=v2) as conn:
                await init2(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 30 wait after 30")))
                await first.until(lambda: len(first.texts()) == 30)
            control.gate.set()
            await host.wait_until(lambda: host.sessions()[sid].state == "idle")
            seen = max(n for n in first.numbers if n is not None)
            second = Recorder()
            async with host.connect(second, variant=v2) as conn2:
                await init2(conn2)
                await conn2.agent.session_resume(resume(sid, cursor(seen + 1)))
            numbers = [n for n in first.numbers + second.numbers if n is not None]
            assert numbers == list(range(1, host.sessions()[sid].last_update + 1))
            assert first.texts() + second.texts() == [str(i) for i in range(30)] + [f"+{i}" for i in range(30)]


class HeldReads:
    """A journal whose reads wait for ``release`` (the test streams updates while a replay is read),
    and whose first append reaching number ``hold_from`` waits for ``unhold`` after writing (an
    append visible to a read before it returns, as with SQLite's commit)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reading = trio.Event()
        self.release = trio.Event()
        self.hold_from: int | None = None
        self.held = trio.Event()
        self.unhold = trio.Event()

    async def append(self, session_id: str, lines: Any) -> int:
        number = int(await self.inner.append(session_id, lines))
        if self.hold_from is not None and number >= self.hold_from and not self.held.is_set():
            self.held.set()
            await self.unhold.wait()
        return number

    async def read(self, session_id: str, after: int, *, limit: int | None = None) -> list[tuple[int, bytes]]:
        self.reading.set()
        await self.release.wait()
        return list(await self.inner.read(session_id, after, limit=limit))

    async def first(self, session_id: str) -> int:
        return int(await self.inner.first(session_id))

    async def last(self, session_id: str) -> int:
        return int(await self.inner.last(session_id))

    async def forget(self, session_id: str) -> None:
        await self.inner.forget(session_id)


@pytest.mark.parametrize("journal_kind", ["memory", "sqlite"])
async def test_resuming_while_updates_stream_gives_every_update_once_in_order(journal_kind: str, tmp_path: Any) -> None:
    """The switch from replay to live happens while the agent streams (updates are journaled and
    sent live while the replay is read): the journal's numbers are the fence, so the resuming
    client gets 1..N with no gap and no duplicate."""
    from acp_trio.session_store import SqliteSessionStore

    control = Control()
    with SqliteSessionStore(str(tmp_path / "host.db")) as store, trio.fail_after(DEADLINE):
        journal = HeldReads(store.journal() if journal_kind == "sqlite" else MemoryJournal())
        async with open_session_host(agents(control), journal=journal) as host:
            first, second = Recorder(), Recorder()
            async with host.connect(first, variant=v2) as conn, host.connect(second, variant=v2) as conn2:
                await init2(conn)
                await init2(conn2)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(
                    v2.PromptRequest(session_id=sid, prompt=text("count 200 wait after 1300"))
                )
                await first.until(lambda: len(first.texts()) == 200)
                answers: list[Any] = []
                attached = trio.Event()

                async def attach() -> None:
                    answers.append(await conn2.agent.session_resume(resume(sid, v2.StartReplayFrom())))
                    attached.set()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(attach)
                    await journal.reading.wait()  # the host reads the replay; meanwhile the agent streams
                    before = host.sessions()[sid].last_update
                    journal.hold_from = before + 100
                    control.gate.set()
                    # updates before it are sent live (to the resuming client's buffer); that one is
                    # written, its fan-out not done
                    await journal.held.wait()
                    journal.release.set()
                    await attached.wait()  # the replay read that append: the client went live before its fan-out
                    journal.unhold.set()
                for rec in (first, second):
                    await rec.until(lambda rec=rec: rec.states()[-1:] == ["idle"])
                numbers = [n for n in second.numbers if n is not None]
                assert numbers == list(range(1, len(numbers) + 1))
                assert numbers[-1] == host.sessions()[sid].last_update
                assert second.texts() == [str(i) for i in range(200)] + [f"+{i}" for i in range(1300)]
                assert answers[0].meta[LAST_META_KEY] >= before + 100  # it went live after those


async def test_the_default_journal_is_sqlite_in_a_private_directory_removed_at_close() -> None:
    """open_session_host's default journal is SQLite (the host's memory stays bounded whatever the
    journals hold) in a 0700 directory of its own, bounded per session as SqliteSessionStore.journal()
    is by default; a detached session's updates are on disk, a resume replays them from there, and
    the directory is removed when the host closes."""
    import inspect
    import os
    import stat
    import tempfile

    from acp_trio.session_store import SessionJournal, SqliteSessionStore

    defaults = inspect.signature(SqliteSessionStore.journal).parameters
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            assert isinstance(host.journal, SessionJournal)
            assert host.journal.max_updates == defaults["max_updates"].default == 100_000
            assert host.journal.max_bytes == defaults["max_bytes"].default == 64 << 20
            path = host.journal.store.path
            directory = os.path.dirname(path)
            assert os.path.dirname(directory) == tempfile.gettempdir()
            assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
            first = Recorder()
            async with host.connect(first, variant=v2) as conn:
                await init2(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 5 wait count 0")))
                await first.until(lambda: len(first.texts()) == 5)
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            control.gate.set()  # the rest of the turn is journaled with nobody attached
            await host.wait_until(lambda: host.sessions()[sid].state == "idle")
            last = host.sessions()[sid].last_update
            with SqliteSessionStore(path) as other:  # another connection to the file: it is on disk
                on_disk = await other.journal().read(sid, 0)
            assert [n for n, _ in on_disk] == list(range(1, last + 1))
            second = Recorder()
            async with host.connect(second, variant=v2) as conn2:
                await init2(conn2)
                await conn2.agent.session_resume(resume(sid, v2.StartReplayFrom()))
            assert second.numbers[:-1] == list(range(1, last + 1))  # then the current state, unnumbered
            assert second.texts() == [str(i) for i in range(5)]
            assert os.path.exists(path)
    assert not os.path.exists(directory)


async def test_a_journal_given_to_the_host_is_kept_when_it_closes(tmp_path: Any) -> None:
    """The caller's journal is the caller's: the host neither closes its store nor removes its file
    (it forgets the sessions it ends, as with any journal)."""
    import os

    from acp_trio.session_store import SqliteSessionStore

    path = str(tmp_path / "kept.db")
    with SqliteSessionStore(path) as store, trio.fail_after(DEADLINE):
        async with open_session_host(agents(Control()), journal=store.journal()) as host:
            async with host.connect(Recorder(), variant=v2) as conn:
                await init2(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 2")))
            await host.wait_until(lambda: host.sessions()[sid].state == "idle")
            assert await store.journal().last(sid) == host.sessions()[sid].last_update > 0
        assert await store.journal().append("after", [b"{}"]) == 1  # the store is still open
    assert os.path.exists(path)


async def test_a_cursor_whose_updates_are_dropped_while_its_replay_is_read_is_refused_not_skipped() -> None:
    """The journal is at its bound and the session streams while the replay is read: the updates
    from the cursor on are gone by the time the read runs.  Before: the client got the replay from a
    later number, a silent gap.  Now: -32602 with data.oldest, the session detached again as before."""
    control = Control()
    journal = HeldReads(MemoryJournal(max_updates=5))
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control), journal=journal) as host:
            rec = Recorder()
            async with host.connect(rec, variant=v2) as conn:
                await init2(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 3 wait after 10")))
                await rec.until(lambda: len(rec.texts()) == 3)  # updates 1..5 held: user message, running, 0-2
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            rec2 = Recorder()
            async with host.connect(rec2, variant=v2) as conn2, trio.open_nursery() as nursery:
                await init2(conn2)
                failed: list[RequestError] = []

                async def attach() -> None:
                    with pytest.raises(RequestError) as caught:
                        await conn2.agent.session_resume(resume(sid, cursor(3)))  # held when asked
                    failed.append(caught.value)

                nursery.start_soon(attach)
                await journal.reading.wait()
                control.gate.set()  # 11 more updates: 3..11 dropped
                await host.wait_until(lambda: host.sessions()[sid].state == "idle")
                last = host.sessions()[sid].last_update
                journal.release.set()
            assert failed[0].code == -32602 and failed[0].data == {"sessionId": sid, "oldest": last - 4}
            assert rec2.numbers == []  # nothing of the session was sent to it
            assert host.sessions()[sid].attached == 0 and host.sessions()[sid].detached_since is not None


class FailingFor(MemoryJournal):
    """A memory journal whose appends for one session raise past its third update (a full disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: str | None = None

    async def append(self, session_id: str, lines: Any) -> int:
        number = await super().append(session_id, lines)
        if session_id == self.failing and number > 3:
            raise OSError("No space left on device")
        return number


async def test_a_journal_that_fails_ends_that_sessions_instance_not_the_host() -> None:
    """Before: the append's exception went up to the host's nursery, ending every session of the host."""
    control = Control()
    journal = FailingFor()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control), journal=journal) as host:
            a, b = Recorder(), Recorder()
            async with connected(host, a, v2) as conn_a, host.connect(b, variant=v2) as conn_b:
                await init2(conn_a)
                await init2(conn_b)
                sid_a = (await conn_a.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                sid_b = (await conn_b.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                journal.failing = sid_a
                await conn_a.agent.session_prompt(v2.PromptRequest(session_id=sid_a, prompt=text("count 5")))
                await host.wait_until(lambda: sid_a not in host.sessions())  # its instance ended
                # its client was told why, and that the turn ended (idle, stop reason error)
                await a.until(lambda: a.ext != [] and a.states()[-1:] == ["idle"])
                detail = "the host failed to handle its output: OSError: No space left on device"
                assert a.ext == [
                    (SESSION_ENDED, {"sessionId": sid_a, "reason": SESSION_ENDED_REASON, "detail": detail})
                ]
                assert a.states()[-1] == "idle" and a.updates[-1].stop_reason == "error"
                assert host.instances == 1
                await conn_b.agent.session_prompt(v2.PromptRequest(session_id=sid_b, prompt=text("count 5")))
                await b.until(lambda: b.states()[-1:] == ["idle"])
                assert b.texts() == [str(i) for i in range(5)] and b.numbers[-1] == host.sessions()[sid_b].last_update


class FailingReads(MemoryJournal):
    """A memory journal whose next read raises (a broken file)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    async def read(self, session_id: str, after: int, *, limit: int | None = None) -> list[tuple[int, bytes]]:
        if self.fail:
            self.fail = False
            raise OSError("database disk image is malformed")
        return await super().read(session_id, after, limit=limit)


async def test_a_replay_the_journal_cannot_read_fails_that_resume_and_the_session_stays_detached() -> None:
    """Before: the read's exception ended the client's connection, and through host.connect the host."""
    control = Control()
    journal = FailingReads()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control), journal=journal) as host:
            rec = Recorder()
            async with host.connect(rec, variant=v2) as conn:
                await init2(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 2")))
                await rec.until(lambda: rec.states()[-1:] == ["idle"])
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            rec2 = Recorder()
            async with host.connect(rec2, variant=v2) as conn2:
                await init2(conn2)
                journal.fail = True
                with pytest.raises(RequestError) as caught:
                    await conn2.agent.session_resume(resume(sid, v2.StartReplayFrom()))
                assert caught.value.code == -32603 and "database disk image is malformed" in caught.value.message
                info = host.sessions()[sid]
                assert info.attached == 0 and info.detached_since is not None  # its detached_ttl runs again
                await conn2.agent.session_resume(resume(sid, v2.StartReplayFrom()))  # the same connection retries
                assert rec2.numbers[:-1] == list(range(1, info.last_update + 1))


class SecondReadHeld(MemoryJournal):
    """A bounded memory journal whose second read waits for ``release`` (``reading`` set when it starts)."""

    def __init__(self, **bounds: int) -> None:
        super().__init__(**bounds)
        self.reads = 0
        self.reading = trio.Event()
        self.release = trio.Event()

    async def read(self, session_id: str, after: int, *, limit: int | None = None) -> list[tuple[int, bytes]]:
        self.reads += 1
        if self.reads == 2:
            self.reading.set()
            await self.release.wait()
        return await super().read(session_id, after, limit=limit)


async def test_a_replay_read_in_pages_refuses_to_go_on_past_updates_dropped_meanwhile() -> None:
    """The replay is read in pages (the first short, so its updates reach the client soon); when
    the journal drops the next page's updates before it is read, the resume is refused -32602 with
    data.oldest after the updates already sent, never continued with a gap."""
    control = Control()
    journal = SecondReadHeld(max_updates=300)
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control), journal=journal) as host:
            rec = Recorder()
            async with host.connect(rec, variant=v2) as conn:
                await init2(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(
                    v2.PromptRequest(session_id=sid, prompt=text("count 250 wait after 400"))
                )
                await rec.until(lambda: len(rec.texts()) == 250)  # 1..252 held
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            rec2 = Recorder()
            async with host.connect(rec2, variant=v2) as conn2, trio.open_nursery() as nursery:
                await init2(conn2)
                failed: list[RequestError] = []

                async def attach() -> None:
                    with pytest.raises(RequestError) as caught:
                        await conn2.agent.session_resume(resume(sid, v2.StartReplayFrom()))
                    failed.append(caught.value)

                nursery.start_soon(attach)
                await journal.reading.wait()  # the first page went out; the second is about to be read
                control.gate.set()
                await host.wait_until(lambda: host.sessions()[sid].state == "idle")
                last = host.sessions()[sid].last_update
                journal.release.set()
            assert failed[0].code == -32602 and failed[0].data == {"sessionId": sid, "oldest": last - 299}
            sent = rec2.numbers
            assert sent == list(range(1, len(sent) + 1)) and 0 < len(sent) < 252  # the first page only
            assert host.sessions()[sid].attached == 0 and host.sessions()[sid].detached_since is not None


class HeldAppends(MemoryJournal):
    """A memory journal whose appends wait for ``release`` (a journal slower than its agent)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = trio.Event()

    async def append(self, session_id: str, lines: Any) -> int:
        await self.release.wait()
        return await super().append(session_id, lines)


async def test_an_agent_that_outpaces_its_journal_waits_for_it() -> None:
    """The agent's output reaches the host through a stream without a buffer of its own (trio's
    lockstep pair): while an append waits, the agent's next write waits too, so a journal slower
    than its agent (the SQLite default against a fast agent) holds the agent back instead of
    piling its output up in the host's memory.  Fails with an unbounded pair: all 2,000 were sent."""
    sent = 0

    class Streamer:
        def __init__(self, conn: Any) -> None:
            self.conn = conn

        async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
            return v2.NewSessionResponse(session_id="s1")

        async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
            async def turn() -> str:
                nonlocal sent
                chunk = v2.AgentMessageChunkSessionUpdate(message_id="m", content=v2.TextContentBlock(text="x" * 200))
                for _ in range(2000):
                    await self.conn.client.session_update(v2.UpdateSessionNotification(session_id="s1", update=chunk))
                    sent += 1
                return "end_turn"

            self.conn.start_turn(params.session_id, turn)
            return v2.PromptResponse(message_id="u")

    journal = HeldAppends()
    with trio.fail_after(DEADLINE):
        async with open_session_host({v2: Streamer}, journal=journal) as host:
            async with host.connect(Recorder(), variant=v2) as conn:
                await init2(conn)
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("go")))
                await trio.testing.wait_all_tasks_blocked()
                assert sent < 1000  # held back (about 3 x the connection's 64 KiB high-water mark), not all sent
                journal.release.set()
                await host.wait_until(lambda: host.sessions()[sid].state == "idle")
                assert sent == 2000 and await journal.last(sid) == 2000 + 2  # with the running and idle states

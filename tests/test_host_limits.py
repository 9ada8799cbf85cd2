"""The session host's limits: detached_ttl, max_detached_sessions, and the unattended policy.

Spec: v2 ``prompt-lifecycle.mdx`` (Cancellation: pending permission requests are answered with the
``cancelled`` outcome), ``elicitation.mdx`` (``decline``), ``session-setup.mdx`` (``session/close``
cancels the session's work).  Time runs on trio's autojump clock.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from _host_kit import Control, Recorder, agents, connected, init2, new_session, text

from acp_schema import v1, v2
from acp_trio import RequestError
from acp_trio.host import CURSOR_TYPE, MemoryJournal, open_session_host

VIRTUAL_DEADLINE = 100_000  # seconds of the autojump clock: the tests wait hours of it, in no time


def prompt(session_id: str, words: str) -> v2.PromptRequest:
    return v2.PromptRequest(session_id=session_id, prompt=text(words))


async def detached_turn(host: Any, words: str) -> str:
    """A v2 client makes a session, prompts ``words`` and leaves; returns the session id."""
    async with connected(host, Recorder()) as conn:
        await init2(conn)
        sid = await new_session(conn)
        await conn.agent.session_prompt(prompt(sid, words))
    await host.wait_until(lambda: host.sessions()[sid].attached == 0)
    return sid


async def test_detached_ttl_cancels_the_turn_and_closes_the_session_then_the_instance_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    control = Control()
    with trio.fail_after(VIRTUAL_DEADLINE):
        async with open_session_host(agents(control), journal=MemoryJournal(), detached_ttl=60) as host:
            sid = await detached_turn(host, "wait")
            left = trio.current_time()
            await control.until(lambda: control.closed == [sid] and control.cancels == [sid])
            assert trio.current_time() - left >= 60
            await host.wait_until(lambda: not host.sessions() and host.instances == 0)


async def test_reattaching_before_the_ttl_keeps_the_session(autojump_clock: trio.testing.MockClock) -> None:
    control = Control()
    with trio.fail_after(VIRTUAL_DEADLINE):
        async with open_session_host(agents(control), journal=MemoryJournal(), detached_ttl=60) as host:
            sid = await detached_turn(host, "wait")
            await trio.sleep(50)
            async with connected(host, Recorder()) as conn:
                await init2(conn)
                await conn.agent.session_resume(v2.ResumeSessionRequest(session_id=sid, cwd="/tmp"))
                await trio.sleep(100)
                assert control.closed == [] and host.sessions()[sid].running


async def test_over_max_detached_sessions_the_oldest_detached_one_is_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    control = Control()
    with trio.fail_after(VIRTUAL_DEADLINE):
        async with open_session_host(agents(control), journal=MemoryJournal(), max_detached_sessions=1) as host:
            first = await detached_turn(host, "count 1")
            await trio.sleep(1)
            second = await detached_turn(host, "count 1")
            await control.until(lambda: control.closed == [first])
            await host.wait_until(lambda: list(host.sessions()) == [second])


async def test_unattended_reject_answers_a_permission_request_cancelled_after_the_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    control = Control()
    with trio.fail_after(VIRTUAL_DEADLINE):
        async with open_session_host(
            agents(control), journal=MemoryJournal(), unattended_timeout=30, unattended_policy="reject"
        ) as host:
            sid = await detached_turn(host, "wait ask")
            control.gate.set()
            await host.wait_until(lambda: host.sessions()[sid].pending_requests == 1)
            asked = trio.current_time()
            await control.until(lambda: len(control.outcomes) == 1)
            assert trio.current_time() - asked >= 30
            assert isinstance(control.outcomes[0], v2.CancelledRequestPermissionOutcome)
            await host.wait_until(lambda: host.sessions()[sid].state == "idle")
            assert control.cancels == []  # the turn went on, without the permission


async def test_unattended_cancel_cancels_the_turn_then_declines(autojump_clock: trio.testing.MockClock) -> None:
    control = Control()
    with trio.fail_after(VIRTUAL_DEADLINE):
        async with open_session_host(
            agents(control), journal=MemoryJournal(), unattended_timeout=30, unattended_policy="cancel"
        ) as host:
            sid = await detached_turn(host, "wait ask")
            control.gate.set()
            await control.until(lambda: control.cancels == [sid])
            await host.wait_until(lambda: host.sessions()[sid].state == "idle")
            rec = Recorder()
            async with connected(host, rec) as conn:
                await init2(conn)
                await conn.agent.session_resume(v2.ResumeSessionRequest(session_id=sid, cwd="/tmp"))
                assert rec.updates[-1].stop_reason == "cancelled" and rec.asked == []


async def test_unattended_wait_keeps_the_request_for_the_next_client(autojump_clock: trio.testing.MockClock) -> None:
    control = Control()
    with trio.fail_after(VIRTUAL_DEADLINE):
        async with open_session_host(
            agents(control), journal=MemoryJournal(), unattended_timeout=30, detached_ttl=None
        ) as host:  # "wait"
            sid = await detached_turn(host, "wait ask")
            control.gate.set()
            await trio.sleep(3600)
            assert host.sessions()[sid].pending_requests == 1 and control.outcomes == []


async def test_unattended_reject_answers_other_requests_with_an_internal_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    control = Control()
    with trio.fail_after(VIRTUAL_DEADLINE):
        async with open_session_host(
            agents(control), journal=MemoryJournal(), unattended_timeout=30, unattended_policy="reject"
        ) as host:
            caps = v1.ClientCapabilities(fs=v1.FileSystemCapabilities(read_text_file=True))
            async with connected(host, Recorder(), v1) as conn:
                await conn.agent.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=caps))
                sid = await new_session(conn)
                async with trio.open_nursery() as nursery:

                    async def prompt_and_leave() -> None:
                        with pytest.raises(Exception):  # noqa: B017  (the connection closes under it)
                            await conn.agent.session_prompt(
                                v1.PromptRequest(session_id=sid, prompt=text("wait read", v1))
                            )

                    nursery.start_soon(prompt_and_leave)
                    await host.wait_until(lambda: host.sessions()[sid].running)
                    await conn.aclose()
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            control.gate.set()
            await control.until(lambda: len(control.outcomes) == 1)
            error = control.outcomes[0]
            assert isinstance(error, RequestError) and error.code == -32603
            assert "fs/read_text_file" in error.message and "unattended_timeout=30" in error.message


class Streamer:
    """A v2 agent whose turn streams ``count N size K`` updates of K bytes of text each."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id="big")

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        words = " ".join(getattr(block, "text", "") for block in params.prompt).split()
        count, size = int(words[words.index("count") + 1]), int(words[words.index("size") + 1])

        async def turn() -> str:
            for i in range(count):
                content = v2.TextContentBlock(text=f"{i}:".ljust(size, "."))
                update = v2.AgentMessageChunkSessionUpdate(message_id="a", content=content)
                await self.conn.client.session_update(
                    v2.UpdateSessionNotification(session_id=params.session_id, update=update)
                )
            return "end_turn"

        user = v2.UserMessageSessionUpdate(message_id="u", content=params.prompt)
        await self.conn.client.session_update(v2.UpdateSessionNotification(session_id=params.session_id, update=user))
        self.conn.start_turn(params.session_id, turn)
        return v2.PromptResponse(message_id="u")


async def test_a_client_that_stops_reading_is_disconnected_past_max_client_backlog_bytes() -> None:
    """A client over a stream with no buffer (lockstep) stops reading while a turn streams 160
    updates of 64 KiB (10 MiB): once more than max_client_backlog_bytes (1 MiB) wait for it, the
    host ends its connection (the session goes on, detached).  The host's memory stays bounded: it
    grows by the journal's lines and less than 16 MiB more (the agent's side, the fan-out's copies;
    measured 6 MiB; without the bound, 164 MiB more: every update queued for the client, in
    orjson's allocations).  A client that resumes with
    the cursor after the last update the first one read gets every later update, once, in order."""
    import tracemalloc

    import orjson
    import trio.testing

    from acp_trio._core import LineFramer
    from acp_trio.host import UPDATE_META_KEY

    count, size, bound = 160, 64 * 1024, 1 << 20
    journal = MemoryJournal()
    with trio.fail_after(30):
        async with open_session_host({v2: Streamer}, journal=journal, max_client_backlog_bytes=bound) as host:
            client_side, host_side = trio.testing.lockstep_stream_pair()
            served = trio.Event()

            async def serve() -> None:
                await host.serve_streams("slow", host_side, host_side)
                served.set()

            lines = LineFramer()
            seen: list[int] = []  # the update numbers the slow client read

            async def call(request_id: int, method: str, params: Any) -> Any:
                message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
                await client_side.send_all(orjson.dumps(message) + b"\n")
                while True:
                    for line in lines.feed(await client_side.receive_some()):
                        answer = orjson.loads(line)
                        if answer.get("method") == "session/update":
                            seen.append(answer["params"]["_meta"][UPDATE_META_KEY])
                        if answer.get("id") == request_id:
                            return answer["result"]

            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve)
                await call(1, "initialize", {"protocolVersion": 2, "info": {"name": "slow", "version": "0"}})
                sid = (await call(2, "session/new", {"cwd": "/tmp"}))["sessionId"]
                tracemalloc.start()
                try:
                    before = tracemalloc.get_traced_memory()[0]
                    text = f"count {count} size {size}"
                    await call(3, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
                    await host.wait_until(lambda: host.sessions()[sid].state == "idle")  # the turn went on
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                assert served.is_set()  # it stopped reading: the host ended its connection
                assert host.sessions()[sid].attached == 0
                journaled = sum(len(line) for _, line in await journal.read(sid, 0))
                assert journaled > count * size
                assert peak - before < journaled + 16 * bound  # without the bound: 160 MiB more

            read = max(seen, default=0)
            rec = Recorder()
            async with connected(host, rec) as conn:
                await init2(conn)
                request = v2.ResumeSessionRequest(session_id=sid, cwd="/tmp")
                request.replay_from = v2.ReplayFromOther(type=CURSOR_TYPE, extra_fields={"update": read + 1})
                await conn.agent.session_resume(request)
                last = host.sessions()[sid].last_update
                await rec.until(lambda: len([n for n in rec.numbers if n is not None]) == last - read)
            assert [n for n in rec.numbers if n is not None] == list(range(read + 1, last + 1))
            assert len([t for t in rec.texts() if t.endswith(".")]) >= count - read

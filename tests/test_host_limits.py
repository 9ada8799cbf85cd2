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
from acp_trio.host import open_session_host

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
        async with open_session_host(agents(control), detached_ttl=60) as host:
            sid = await detached_turn(host, "wait")
            left = trio.current_time()
            await control.until(lambda: control.closed == [sid] and control.cancels == [sid])
            assert trio.current_time() - left >= 60
            await host.wait_until(lambda: not host.sessions() and host.instances == 0)


async def test_reattaching_before_the_ttl_keeps_the_session(autojump_clock: trio.testing.MockClock) -> None:
    control = Control()
    with trio.fail_after(VIRTUAL_DEADLINE):
        async with open_session_host(agents(control), detached_ttl=60) as host:
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
        async with open_session_host(agents(control), max_detached_sessions=1) as host:
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
        async with open_session_host(agents(control), unattended_timeout=30, unattended_policy="reject") as host:
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
        async with open_session_host(agents(control), unattended_timeout=30, unattended_policy="cancel") as host:
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
        async with open_session_host(agents(control), unattended_timeout=30, detached_ttl=None) as host:  # "wait"
            sid = await detached_turn(host, "wait ask")
            control.gate.set()
            await trio.sleep(3600)
            assert host.sessions()[sid].pending_requests == 1 and control.outcomes == []


async def test_unattended_reject_answers_other_requests_with_an_internal_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    control = Control()
    with trio.fail_after(VIRTUAL_DEADLINE):
        async with open_session_host(agents(control), unattended_timeout=30, unattended_policy="reject") as host:
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


async def test_a_client_that_stops_reading_is_detached_past_max_client_backlog() -> None:
    """A stream with no buffer (lockstep): once more than max_client_backlog messages wait for the
    client, the host ends its connection; the session goes on, detached."""
    import orjson
    import trio.testing

    from acp_trio._core import LineFramer

    control = Control()
    with trio.fail_after(10):
        async with open_session_host(agents(control), max_client_backlog=10) as host:
            client_side, host_side = trio.testing.lockstep_stream_pair()
            served = trio.Event()

            async def serve() -> None:
                await host.serve_streams("slow", host_side, host_side)
                served.set()

            lines = LineFramer()

            async def call(request_id: int, method: str, params: Any) -> Any:
                message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
                await client_side.send_all(orjson.dumps(message) + b"\n")
                while True:
                    for line in lines.feed(await client_side.receive_some()):
                        answer = orjson.loads(line)
                        if answer.get("id") == request_id:
                            return answer["result"]

            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve)
                await call(1, "initialize", {"protocolVersion": 2, "info": {"name": "slow", "version": "0"}})
                sid = (await call(2, "session/new", {"cwd": "/tmp"}))["sessionId"]
                await call(3, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "count 50"}]})
                await served.wait()  # it stopped reading: the host ended its connection
                await host.wait_until(lambda: host.sessions()[sid].attached == 0)
                await host.wait_until(lambda: host.sessions()[sid].state == "idle")  # the turn went on
                assert host.sessions()[sid].last_update >= 52

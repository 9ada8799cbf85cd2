"""The session host with several clients, requests the agent makes, and v1 clients.

Spec: v2 ``prompt-lifecycle.mdx`` (a new prompt after ``idle``; ``requires_action``; the client
answers pending permission requests ``cancelled`` on cancel), ``cancellation.mdx`` (``$/cancel_request``),
v1 ``session-setup.mdx`` (``session/load`` replays the conversation, then answers).  In memory;
the host's rules are in docs/site/guides/host.md.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import trio
import trio.testing
from _host_kit import DEADLINE, Control, Recorder, agents, connected, init1, init2, new_session, text

from acp_schema import v1, v2
from acp_trio import RequestError
from acp_trio._core import LineFramer
from acp_trio.host import SESSION_ENDED, TURN_ENDED, UPDATE_META_KEY, open_session_host


def resume(session_id: str, replay: Any = None) -> v2.ResumeSessionRequest:
    request = v2.ResumeSessionRequest(session_id=session_id, cwd="/tmp")
    if replay is not None:
        request.replay_from = replay
    return request


def prompt(session_id: str, words: str) -> v2.PromptRequest:
    return v2.PromptRequest(session_id=session_id, prompt=text(words))


async def test_two_clients_receive_the_same_updates_in_the_same_order() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            a, b = Recorder(), Recorder()
            async with connected(host, a) as conn_a, connected(host, b) as conn_b:
                await init2(conn_a)
                await init2(conn_b)
                sid = await new_session(conn_a)
                await conn_b.agent.session_resume(resume(sid))
                b.updates.clear()
                b.numbers.clear()
                await conn_a.agent.session_prompt(prompt(sid, "count 20"))
                for rec in (a, b):
                    await rec.until(lambda rec=rec: rec.states()[-1:] == ["idle"])
                assert a.numbers == b.numbers == list(range(1, len(a.numbers) + 1))
                assert a.texts() == b.texts() == [str(i) for i in range(20)]


async def test_a_second_prompt_while_a_turn_runs_is_refused_from_any_client() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            a, b = Recorder(), Recorder()
            async with connected(host, a) as conn_a, connected(host, b) as conn_b:
                await init2(conn_a)
                await init2(conn_b)
                sid = await new_session(conn_a)
                await conn_b.agent.session_resume(resume(sid))
                await conn_a.agent.session_prompt(prompt(sid, "wait"))
                for conn in (conn_b, conn_a):
                    with pytest.raises(RequestError) as caught:
                        await conn.agent.session_prompt(prompt(sid, "count 1"))
                    assert caught.value.code == -32600
                    assert "A turn is running" in caught.value.message and "session/cancel" in caught.value.message
                # any attached client may cancel it; then a prompt is accepted again
                await conn_b.agent.session_cancel(v2.CancelSessionNotification(session_id=sid))
                await a.until(lambda: a.states()[-1:] == ["idle"])
                assert type(a.updates[-1]).__name__ == "IdleStateUpdateSessionUpdate"
                assert a.updates[-1].stop_reason == "cancelled"
                await conn_b.agent.session_prompt(prompt(sid, "count 1"))
                await b.until(lambda: b.texts() == ["0"] and b.states()[-1:] == ["idle"])


async def test_a_permission_request_made_while_detached_goes_to_the_next_client_that_attaches() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            a = Recorder()
            async with connected(host, a) as conn_a:
                await init2(conn_a)
                sid = await new_session(conn_a)
                await conn_a.agent.session_prompt(prompt(sid, "wait ask"))
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            control.gate.set()
            await host.wait_until(lambda: host.sessions()[sid].pending_requests == 1)
            assert host.sessions()[sid].state == "requires_action"  # the agent reports it (journaled)
            b = Recorder(answer="allow")
            async with connected(host, b) as conn_b:
                await init2(conn_b)
                await conn_b.agent.session_resume(resume(sid))
                await b.until(lambda: b.states()[-1:] == ["idle"])
                assert len(b.asked) == 1 and b.states()[0] == "requires_action"
                assert b.texts() == ["permission: allow"]
            assert [o.option_id for o in control.outcomes] == ["allow"]


async def test_the_first_answer_wins_and_the_other_clients_copy_is_withdrawn() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            a, b = Recorder(answer="allow"), Recorder(answer=None)
            async with connected(host, b) as conn_b, connected(host, a) as conn_a:
                await init2(conn_a)
                await init2(conn_b)
                sid = await new_session(conn_a)
                await conn_b.agent.session_resume(resume(sid))
                await conn_a.agent.session_prompt(prompt(sid, "ask"))
                await b.until(lambda: b.withdrawn == 1)
                await a.until(lambda: a.states()[-1:] == ["idle"])
                assert len(a.asked) == len(b.asked) == 1
                assert [o.option_id for o in control.outcomes] == ["allow"]  # answered once
                assert a.texts() == ["permission: allow"]


async def test_a_client_cannot_answer_a_request_it_was_not_sent() -> None:
    """Router ids are per client: another connection's answer with the same id is ignored."""
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            a = Recorder(answer=None)
            stranger_side, host_side = trio.testing.memory_stream_pair()
            async with trio.open_nursery() as nursery, connected(host, a) as conn_a:
                nursery.start_soon(host.serve_streams, "stranger", host_side, host_side)
                await init2(conn_a)
                sid = await new_session(conn_a)
                await conn_a.agent.session_prompt(prompt(sid, "ask"))
                await a.until(lambda: len(a.asked) == 1)
                lines = LineFramer()
                init = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"protocolVersion": 2, "info": {"name": "x", "version": "0"}},
                }
                await stranger_side.send_all(orjson.dumps(init) + b"\n")
                got: list[Any] = []
                while not got:
                    got = [orjson.loads(line) for line in lines.feed(await stranger_side.receive_some())]
                assert got[0]["result"]["protocolVersion"] == 2
                for request_id in range(1, 4):  # whatever id a was given
                    forged = {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "result": {"outcome": {"outcome": "selected", "optionId": "allow"}},
                    }
                    await stranger_side.send_all(orjson.dumps(forged) + b"\n")
                prompt_b = {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": []},
                }
                await stranger_side.send_all(orjson.dumps(prompt_b) + b"\n")
                got = []
                while not got:
                    got = [orjson.loads(line) for line in lines.feed(await stranger_side.receive_some())]
                assert got[0]["id"] == 2 and got[0]["error"]["code"] == -32002  # not its session
                assert control.outcomes == []
                a.release.set()
                await a.until(lambda: a.states()[-1:] == ["idle"])
                assert [o.option_id for o in control.outcomes] == ["allow"]
                await stranger_side.aclose()


async def test_an_unknown_session_id_answers_resource_not_found() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            async with connected(host, Recorder()) as conn:
                await init2(conn)
                for call in (
                    conn.agent.session_prompt(prompt("nope", "count 1")),
                    conn.agent.session_resume(resume("nope", v2.StartReplayFrom())),  # the agent's own answer
                ):
                    with pytest.raises(RequestError) as caught:
                        await call
                    assert caught.value.code == -32002


async def test_attaching_from_another_protocol_version_is_refused_naming_both() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            async with connected(host, Recorder()) as conn2, connected(host, Recorder(), v1) as conn1:
                await init2(conn2)
                await init1(conn1)
                sid = await new_session(conn2)
                with pytest.raises(RequestError) as caught:
                    await conn1.agent.session_load(v1.LoadSessionRequest(session_id=sid, cwd="/tmp", mcp_servers=[]))
                assert caught.value.code == -32602
                assert "protocol version 2" in caught.value.message and "version 1" in caught.value.message


async def test_v1_load_of_a_live_session_replays_then_continues_live_and_reports_the_turns_end() -> None:
    """What a v1 client sees of a turn a previous connection started: the replay (numbered), the
    load answer, the turn's next updates live, then the host's _acp_trio/turn_ended notification
    (the session/prompt answer went to the connection that prompted, which left)."""
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            a = Recorder()
            async with trio.open_nursery() as nursery:
                async with connected(host, a, v1) as conn_a:
                    await init1(conn_a)
                    sid = await new_session(conn_a)

                    async def prompt_and_leave() -> None:
                        request = v1.PromptRequest(session_id=sid, prompt=text("count 2 wait after 2", v1))
                        with pytest.raises(Exception):  # noqa: B017  (the connection closes under it)
                            await conn_a.agent.session_prompt(request)

                    nursery.start_soon(prompt_and_leave)
                    await a.until(lambda: len(a.texts()) == 2)
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            assert host.sessions()[sid].running
            b = Recorder()
            async with connected(host, b, v1) as conn_b:
                await init1(conn_b)
                answer = await conn_b.agent.session_load(
                    v1.LoadSessionRequest(session_id=sid, cwd="/tmp", mcp_servers=[])
                )
                assert b.texts() == ["0", "1"] and b.numbers == [1, 2]
                assert answer.meta == {"acp-trio/lastUpdate": 2}
                with pytest.raises(RequestError) as caught:  # the turn still runs
                    await conn_b.agent.session_prompt(v1.PromptRequest(session_id=sid, prompt=text("count 1", v1)))
                assert caught.value.code == -32600
                control.gate.set()
                await b.until(lambda: len(b.ext) == 1)
                assert b.texts() == ["0", "1", "+0", "+1"] and b.numbers == [1, 2, 3, 4]
                assert b.ext[0][0] == TURN_ENDED and b.ext[0][1] == {"sessionId": sid, "stopReason": "end_turn"}
                result = await conn_b.agent.session_prompt(v1.PromptRequest(session_id=sid, prompt=text("count 1", v1)))
                assert result.stop_reason == "end_turn" and b.numbers[-1] == 5
                assert all(n is not None for n in b.numbers) and UPDATE_META_KEY == "acp-trio/update"


async def test_attaching_needs_the_same_principal_when_both_are_set() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            async with connected(host, Recorder(), principal="alice") as conn_a:
                await init2(conn_a)
                sid = await new_session(conn_a)
            async with connected(host, Recorder(), principal="mallory") as conn_m:
                await init2(conn_m)
                with pytest.raises(RequestError) as caught:
                    await conn_m.agent.session_resume(resume(sid, v2.StartReplayFrom()))
                assert caught.value.code == -32002
            assert host.sessions()[sid].attached == 0
            async with connected(host, Recorder(), principal="alice") as conn_a2:
                await init2(conn_a2)
                await conn_a2.agent.session_resume(resume(sid))
                assert host.sessions()[sid].attached == 1


async def test_a_client_closing_a_live_session_ends_it_for_everyone() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            a, b = Recorder(), Recorder()
            async with connected(host, a) as conn_a, connected(host, b) as conn_b:
                await init2(conn_a)
                await init2(conn_b)
                sid = await new_session(conn_a)
                await conn_b.agent.session_resume(resume(sid))
                await conn_a.agent.session_close(v2.CloseSessionRequest(session_id=sid))
                assert control.closed == [sid] and sid not in host.sessions()
                await b.until(lambda: b.ext != [])  # b is told; a, which closed it, knows
                detail = "another client sent session/close"
                assert b.ext == [(SESSION_ENDED, {"sessionId": sid, "reason": "session closed", "detail": detail})]
                assert a.ext == [] and b.states() == ["idle"]  # the resume's current state only: no turn ran
                with pytest.raises(RequestError) as caught:
                    await conn_b.agent.session_prompt(prompt(sid, "count 1"))
                assert caught.value.code == -32002


async def test_v1_the_other_clients_hear_of_a_turn_that_ended_with_an_error() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            a, b = Recorder(), Recorder()
            async with connected(host, a, v1) as conn_a, connected(host, b, v1) as conn_b:
                await init1(conn_a)
                await init1(conn_b)
                sid = await new_session(conn_a)
                await conn_b.agent.session_load(v1.LoadSessionRequest(session_id=sid, cwd="/tmp", mcp_servers=[]))
                with pytest.raises(RequestError):
                    await conn_a.agent.session_prompt(v1.PromptRequest(session_id=sid, prompt=text("count 1 fail", v1)))
                await b.until(lambda: len(b.ext) == 1)
                assert b.ext[0][1]["error"]["message"] == "the turn failed" and a.ext == []
                assert not host.sessions()[sid].running

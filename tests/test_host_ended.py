"""The clients attached to a session that ends under them are told, then detached.

The agent closes its connection mid-turn with a permission request pending at both attached
clients (v1 and v2), or while a client's replay is read; another client closes the session
mid-turn.  Spec: ``cancellation.mdx`` (``$/cancel_request`` withdraws a request), v2
``prompt-lifecycle.mdx`` ("the Agent MUST report idle when no foreground activity remains"; the
``error`` stop reason, schema ``ErrorStopReason``).  Neither version has a notification for a
session that ends, hence the host's ``_acp_trio/session_ended``.  In memory; the rules are in
docs/site/guides/host.md ("When a session ends under its clients").
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import orjson
import pytest
import trio
from _host_kit import DEADLINE, Agent1, Agent2, Control, Recorder, agents, connected, init1, init2, new_session, text

from acp_schema import v1, v2
from acp_trio import ConnectionClosed, RequestError
from acp_trio.host import (
    CURRENT_META_KEY,
    SESSION_ENDED,
    SESSION_ENDED_REASON,
    TURN_ENDED,
    MemoryJournal,
    open_session_host,
)


async def _ask_then_quit(agent: Any, variant: Any, sid: str) -> None:
    """Send one update, ask permission, and close the agent's connection once the gate opens."""
    if variant is v2:
        chunk: Any = v2.AgentMessageChunkSessionUpdate(message_id="a", content=v2.TextContentBlock(text="0"))
        request: Any = v2.RequestPermissionRequest(
            session_id=sid,
            title="Go on?",
            subject=v2.ToolCallRequestPermissionSubject(tool_call=v2.ToolCallUpdate(tool_call_id="c1")),
            options=[v2.PermissionOption(option_id="allow", name="Allow", kind="allow_once")],
        )
        await agent.send(sid, v2.RunningStateUpdateSessionUpdate())
        await agent.send(sid, chunk)
    else:
        chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text="0"))
        request = v1.RequestPermissionRequest(
            session_id=sid,
            tool_call=v1.ToolCallUpdate(tool_call_id="c1"),
            options=[v1.PermissionOption(option_id="allow", name="Allow", kind="allow_once")],
        )
        await agent.conn.client.session_update(v1.SessionNotification(session_id=sid, update=chunk))

    async def ask() -> None:
        with contextlib.suppress(ConnectionClosed):
            await agent.conn.client.session_request_permission(request)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await agent.control.gate.wait()
        await agent.conn.aclose()  # the agent goes away (as a process that exits)
        nursery.cancel_scope.cancel()


class Quitter1(Agent1):
    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        await _ask_then_quit(self, v1, params.session_id)
        return v1.PromptResponse(stop_reason="end_turn")


class Quitter2(Agent2):
    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        async def turn() -> str:
            await _ask_then_quit(self, v2, params.session_id)
            return "end_turn"

        self.conn.start_turn(params.session_id, turn)
        return v2.PromptResponse(message_id="u")


def kind(line: bytes) -> str:
    """A wire line as its method (a ``session/update`` as numbered or ``current``), or ``answer``."""
    message = orjson.loads(line)
    method = message.get("method")
    if method == "session/update":
        meta = message["params"].get("_meta") or {}
        return "session/update current" if meta.get(CURRENT_META_KEY) else "session/update numbered"
    return str(method) if method else "answer"


@pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])
async def test_clients_of_a_session_whose_agent_ends_are_told_and_detached(variant: Any) -> None:
    """Before: the pending permission request stayed pending at both clients, and nothing told
    them (v1: the prompter's call failed; the other client got nothing); their next request got -32002."""
    control = Control()
    factory = {v1: functools.partial(Quitter1, control), v2: functools.partial(Quitter2, control)}
    init = init1 if variant is v1 else init2
    with trio.fail_after(DEADLINE):
        async with open_session_host(factory) as host:
            a, b = Recorder(answer=None), Recorder(answer=None)
            wire_b: list[bytes] = []

            def tap(direction: str, line: bytes) -> None:
                if direction == "in":
                    wire_b.append(line)

            async with connected(host, a, variant) as conn_a, connected(host, b, variant, tap=tap) as conn_b:
                await init(conn_a)
                await init(conn_b)
                sid = await new_session(conn_a)
                if variant is v1:
                    load = v1.LoadSessionRequest(session_id=sid, cwd="/tmp", mcp_servers=[])
                    await conn_b.agent.session_load(load)
                else:
                    await conn_b.agent.session_resume(v2.ResumeSessionRequest(session_id=sid, cwd="/tmp"))
                prompt = variant.PromptRequest(session_id=sid, prompt=text("go", variant))
                async with trio.open_nursery() as nursery:
                    failed: list[RequestError] = []

                    async def turn() -> None:
                        try:
                            await conn_a.agent.session_prompt(prompt)
                        except RequestError as exc:
                            failed.append(exc)

                    nursery.start_soon(turn)
                    await a.until(lambda: len(a.asked) == 1)
                    await b.until(lambda: len(b.asked) == 1)
                    control.gate.set()
                    for rec in (a, b):
                        await rec.until(lambda rec=rec: any(m == SESSION_ENDED for m, _ in rec.ext))
                assert sid not in host.sessions()
                assert a.withdrawn == b.withdrawn == 1  # the pending permission request withdrawn from both
                for rec in (a, b):
                    params = dict(rec.ext)[SESSION_ENDED]
                    assert params["sessionId"] == sid and params["reason"] == SESSION_ENDED_REASON
                    assert "its output ended" in params["detail"]
                if variant is v1:
                    (error,) = failed  # the prompter's call
                    assert error.code == -32603 and error.data["reason"] == SESSION_ENDED_REASON
                    assert error.data["method"] == "session/prompt"
                    assert [m for m, _ in a.ext] == [SESSION_ENDED]
                    assert sorted(m for m, _ in b.ext) == sorted([TURN_ENDED, SESSION_ENDED])
                    assert dict(b.ext)[TURN_ENDED]["error"]["data"]["reason"] == SESSION_ENDED_REASON
                else:
                    assert failed == []  # a v2 prompt is answered at once
                    for rec in (a, b):
                        last = rec.updates[-1]
                        assert type(last).__name__ == "IdleStateUpdateSessionUpdate"
                        assert last.stop_reason == "error" and rec.numbers[-1] is None  # the host's, not journaled
                        assert [m for m, _ in rec.ext] == [SESSION_ENDED]
                # on b's wire: the request withdrawn, how the turn ended, then the session's end
                tail = [kind(line) for line in wire_b if kind(line) != "session/update numbered"][-3:]
                ended = TURN_ENDED if variant is v1 else "session/update current"
                assert tail == ["$/cancel_request", ended, SESSION_ENDED]
                with pytest.raises(RequestError) as caught:
                    await conn_b.agent.session_prompt(prompt)
                assert caught.value.code == -32002


async def test_a_session_another_client_closes_mid_turn_ends_its_turn_as_cancelled_for_the_others() -> None:
    """v2: the other attached client gets the host's idle state_update with stop reason cancelled
    (the schema's cancelled covers "closing the session"), then _acp_trio/session_ended."""
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            a, b = Recorder(), Recorder()
            async with connected(host, a) as conn_a, connected(host, b) as conn_b:
                await init2(conn_a)
                await init2(conn_b)
                sid = await new_session(conn_a)
                await conn_b.agent.session_resume(v2.ResumeSessionRequest(session_id=sid, cwd="/tmp"))
                await conn_a.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 1 wait")))
                await b.until(lambda: b.texts() == ["0"])
                await conn_a.agent.session_close(v2.CloseSessionRequest(session_id=sid))
                await b.until(lambda: b.ext != [] and b.states()[-1:] == ["idle"])
                assert b.updates[-1].stop_reason == "cancelled" and b.numbers[-1] is None
                detail = "another client sent session/close"
                assert b.ext == [(SESSION_ENDED, {"sessionId": sid, "reason": "session closed", "detail": detail})]
                assert a.ext == []
                control.gate.set()


class HeldRead(MemoryJournal):
    """A memory journal whose reads wait for ``release`` once ``hold`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.reading = trio.Event()
        self.release = trio.Event()

    async def read(self, session_id: str, after: int, *, limit: int | None = None) -> list[tuple[int, bytes]]:
        if self.hold:
            self.reading.set()
            await self.release.wait()
        return await super().read(session_id, after, limit=limit)


async def test_a_client_whose_replay_runs_when_the_instance_ends_is_told_and_its_resume_refused() -> None:
    control = Control()
    journal = HeldRead()
    with trio.fail_after(DEADLINE):
        async with open_session_host({v2: functools.partial(Quitter2, control)}, journal=journal) as host:
            a, b = Recorder(answer=None), Recorder()
            async with connected(host, a) as conn_a, connected(host, b) as conn_b:
                await init2(conn_a)
                await init2(conn_b)
                sid = await new_session(conn_a)
                await conn_a.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("go")))
                await a.until(lambda: len(a.asked) == 1)
                journal.hold = True
                async with trio.open_nursery() as nursery:
                    refused: list[RequestError] = []

                    async def attach() -> None:
                        with pytest.raises(RequestError) as caught:
                            await conn_b.agent.session_resume(
                                v2.ResumeSessionRequest(session_id=sid, cwd="/tmp", replay_from=v2.StartReplayFrom())
                            )
                        refused.append(caught.value)

                    nursery.start_soon(attach)
                    await journal.reading.wait()
                    control.gate.set()  # the agent goes away while b's replay is read
                    await host.wait_until(lambda: sid not in host.sessions())
                    journal.release.set()
                assert refused[0].code == -32002 and "ended while it was being attached" in refused[0].message
                await b.until(lambda: b.ext != [])
                assert [m for m, _ in b.ext] == [SESSION_ENDED] and b.numbers == [None]  # the host's idle only
                assert b.updates[0].stop_reason == "error"

"""The session host and v1 clients: what the host advertises, what a late client learns of a turn's
end, what cancelling one's own prompt does, and the order of a ``session/load``.

Spec: v1 ``initialization.mdx`` (a client checks ``loadSession`` and ``sessionCapabilities.resume``
before sending ``session/load``/``session/resume``), v1 ``session-setup.mdx`` (``session/load``
replays the conversation, then answers), ``cancellation.mdx`` (``$/cancel_request``).  In memory;
the rules are in docs/site/guides/host.md.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson
import pytest
import trio
import trio.testing
from _host_kit import DEADLINE, Agent1, Control, Recorder, agents, connected, init1, new_session, text

from acp_schema import v1
from acp_trio import RequestError
from acp_trio._core import LineFramer
from acp_trio.host import TURN_ENDED, UPDATE_META_KEY, MemoryJournal, open_session_host


class NoLoadAgent1(Agent1):
    """The tests' v1 agent without ``session/load`` (it advertises no ``loadSession``)."""

    session_load = None  # type: ignore[assignment]


def no_load_agents(control: Control) -> dict[Any, Any]:
    return {**agents(control), v1: functools.partial(NoLoadAgent1, control)}


def load(session_id: str) -> v1.LoadSessionRequest:
    return v1.LoadSessionRequest(session_id=session_id, cwd="/tmp", mcp_servers=[])


class Wire:
    """A raw client connection to the host: JSON-RPC lines out, every line in, in order."""

    def __init__(self, stream: trio.testing.MemoryStream | Any) -> None:
        self.stream = stream
        self.framer = LineFramer()
        self.lines: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send_all(orjson.dumps({"jsonrpc": "2.0", **message}) + b"\n")

    async def until_answer(self, request_id: int) -> list[dict[str, Any]]:
        """Read until the answer to ``request_id``; every line read so far, in order."""
        while not any(m.get("id") == request_id and "method" not in m for m in self.lines):
            self.lines += [orjson.loads(line) for line in self.framer.feed(await self.stream.receive_some())]
        return self.lines

    async def until_method(self, method: str) -> list[dict[str, Any]]:
        while not any(m.get("method") == method for m in self.lines):
            self.lines += [orjson.loads(line) for line in self.framer.feed(await self.stream.receive_some())]
        return self.lines


def kinds(lines: list[dict[str, Any]]) -> list[str]:
    """Each line as ``update N``, a method name, or ``answer ID``."""
    out = []
    for m in lines:
        if m.get("method") == "session/update":
            out.append(f"update {m['params']['_meta'][UPDATE_META_KEY]}")
        elif "method" in m:
            out.append(m["method"])
        else:
            out.append(f"answer {m['id']}")
    return out


async def leave_mid_turn(host: Any, words: str, *, answer: str | None = "allow") -> str:
    """A v1 client makes a session, prompts ``words``, and leaves once it saw the first update."""
    a = Recorder(answer=answer)
    async with trio.open_nursery() as nursery:
        async with connected(host, a, v1) as conn_a:
            await init1(conn_a)
            sid = await new_session(conn_a)

            async def prompt_and_leave() -> None:
                with pytest.raises(Exception):  # noqa: B017  (the connection closes under it)
                    await conn_a.agent.session_prompt(v1.PromptRequest(session_id=sid, prompt=text(words, v1)))

            nursery.start_soon(prompt_and_leave)
            await a.until(lambda: len(a.updates) >= 1)
    await host.wait_until(lambda: host.sessions()[sid].attached == 0)
    return sid


async def test_the_host_advertises_load_and_resume_so_our_v1_client_reattaches_an_agent_without_them() -> None:
    """The agent advertises no loadSession: the host's initialize answer does (and
    sessionCapabilities.resume), so acp-trio's v1 client sends session/load for a live session,
    which the host answers; a load or resume of a session not live gets the host's clear -32002."""
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(no_load_agents(control)) as host:
            sid = await leave_mid_turn(host, "count 2 wait after 1")
            b = Recorder()
            async with connected(host, b, v1) as conn_b:
                answer = await init1(conn_b)
                assert answer.agent_capabilities.load_session is True
                assert answer.agent_capabilities.session_capabilities.resume is not None
                await conn_b.agent.session_load(load(sid))  # refused by the client itself before the fix
                assert b.texts() == ["0", "1"] and b.numbers == [1, 2]
                control.gate.set()
                await b.until(lambda: b.texts()[-1:] == ["+0"])
                for call, missing in (
                    (conn_b.agent.session_load(load("elsewhere")), "loadSession"),
                    (
                        conn_b.agent.session_resume(v1.ResumeSessionRequest(session_id="elsewhere", cwd="/tmp")),
                        "sessionCapabilities.resume",
                    ),
                ):
                    with pytest.raises(RequestError) as caught:
                        await call
                    assert caught.value.code == -32002 and caught.value.data["sessionId"] == "elsewhere"
                    assert "not live in this host" in caught.value.message
                    assert f"does not advertise {missing}" in caught.value.message


async def test_a_load_of_a_session_not_live_still_reaches_an_agent_that_loads() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:  # Agent1 has session_load
            async with connected(host, Recorder(), v1) as conn:
                answer = await init1(conn)
                assert answer.agent_capabilities.load_session is True
                with pytest.raises(RequestError) as caught:
                    await conn.agent.session_load(load("elsewhere"))
                assert caught.value.code == -32002 and caught.value.message == "Resource not found"  # the agent's


async def test_a_v1_client_loading_after_the_turn_ended_gets_its_end_after_the_replay_before_the_answer() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            sid = await leave_mid_turn(host, "count 2 wait after 1")
            control.gate.set()
            await host.wait_until(lambda: not host.sessions()[sid].running)
            client_side, host_side = trio.testing.memory_stream_pair()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(host.serve_streams, "late", host_side, host_side)
                wire = Wire(client_side)
                await wire.send({"id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
                await wire.until_answer(1)
                await wire.send({"id": 2, "method": "session/load", "params": {"sessionId": sid, "cwd": "/tmp"}})
                lines = (await wire.until_answer(2))[1:]
                assert kinds(lines) == ["update 1", "update 2", "update 3", TURN_ENDED, "answer 2"]
                assert lines[3]["params"] == {"sessionId": sid, "stopReason": "end_turn"}
                await client_side.aclose()
                client_side, host_side = trio.testing.memory_stream_pair()  # v1 session/resume: no replay
                nursery.start_soon(host.serve_streams, "later", host_side, host_side)
                wire = Wire(client_side)
                await wire.send({"id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
                await wire.until_answer(1)
                await wire.send({"id": 2, "method": "session/resume", "params": {"sessionId": sid, "cwd": "/tmp"}})
                assert kinds((await wire.until_answer(2))[1:]) == [TURN_ENDED, "answer 2"]
                await client_side.aclose()
            b = Recorder()  # acp-trio's v1 client, with a handler for it
            async with connected(host, b, v1) as conn_b:
                await init1(conn_b)
                await conn_b.agent.session_load(load(sid))
                await b.until(lambda: len(b.ext) == 1)
                assert b.ext == [(TURN_ENDED, {"sessionId": sid, "stopReason": "end_turn"})]
                result = await conn_b.agent.session_prompt(v1.PromptRequest(session_id=sid, prompt=text("count 1", v1)))
                # its own prompt: the answer, no notification
                assert result.stop_reason == "end_turn" and len(b.ext) == 1
            c = Recorder()  # a new turn ran: a later client learns that one's end, no other
            async with connected(host, c, v1) as conn_c:
                await init1(conn_c)
                await conn_c.agent.session_load(load(sid))
                await c.until(lambda: len(c.ext) == 1)
                assert c.ext == [(TURN_ENDED, {"sessionId": sid, "stopReason": "end_turn"})]
                assert c.numbers == list(range(1, 5))


class GatedReads(MemoryJournal):
    """A memory journal whose next read waits for ``release`` (``reading`` is set when it starts)."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = trio.Event()
        self.release = trio.Event()

    async def read(self, session_id: str, after: int, *, limit: int | None = None) -> list[tuple[int, bytes]]:
        self.reading.set()
        await self.release.wait()
        return await super().read(session_id, after, limit=limit)


async def test_a_turn_ending_during_a_v1_clients_replay_is_reported_once_after_the_replay() -> None:
    """Before: the host put _acp_trio/turn_ended for the attaching client at once, ahead of the
    updates its replay was still reading."""
    control = Control()
    journal = GatedReads()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control), journal=journal) as host:
            sid = await leave_mid_turn(host, "count 2 wait")
            client_side, host_side = trio.testing.memory_stream_pair()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(host.serve_streams, "late", host_side, host_side)
                wire = Wire(client_side)
                await wire.send({"id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
                await wire.until_answer(1)
                await wire.send({"id": 2, "method": "session/load", "params": {"sessionId": sid, "cwd": "/tmp"}})
                await journal.reading.wait()
                control.gate.set()  # the turn ends while the replay is read
                await host.wait_until(lambda: not host.sessions()[sid].running)
                journal.release.set()
                lines = (await wire.until_answer(2))[1:]
                assert kinds(lines) == ["update 1", "update 2", TURN_ENDED, "answer 2"]
                await client_side.aclose()


async def test_a_v1_client_cancelling_its_own_prompt_call_cancels_the_turn() -> None:
    """What the guide tells v1 clients: cancelling the session/prompt call sends $/cancel_request,
    which the host forwards: the turn is cancelled (to detach, close the connection instead)."""
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            a, b = Recorder(), Recorder()
            async with connected(host, a, v1) as conn_a, connected(host, b, v1) as conn_b:
                await init1(conn_a)
                await init1(conn_b)
                sid = await new_session(conn_a)
                await conn_b.agent.session_load(load(sid))
                async with trio.open_nursery() as nursery:
                    scope = trio.CancelScope()

                    async def prompt() -> None:
                        with scope:
                            await conn_a.agent.session_prompt(
                                v1.PromptRequest(session_id=sid, prompt=text("count 1 wait", v1))
                            )

                    nursery.start_soon(prompt)
                    await b.until(lambda: len(b.texts()) == 1)
                    scope.cancel()
                await b.until(lambda: len(b.ext) == 1)
                assert b.ext[0][1]["error"]["code"] == -32800  # the agent's answer: request cancelled
                assert not host.sessions()[sid].running and not control.gate.is_set()
                assert control.turns_ended == []  # the turn never got past its wait


async def test_v1_load_order_replay_answer_then_the_pending_request() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            sid = await leave_mid_turn(host, "count 1 ask", answer=None)
            await host.wait_until(lambda: host.sessions()[sid].pending_requests == 1)
            client_side, host_side = trio.testing.memory_stream_pair()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(host.serve_streams, "late", host_side, host_side)
                wire = Wire(client_side)
                await wire.send({"id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
                await wire.until_answer(1)
                await wire.send({"id": 2, "method": "session/load", "params": {"sessionId": sid, "cwd": "/tmp"}})
                lines = (await wire.until_method("session/request_permission"))[1:]
                assert kinds(lines) == ["update 1", "answer 2", "session/request_permission"]
                await client_side.aclose()

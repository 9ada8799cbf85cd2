"""Session tracking on both sides, background tasks, close callbacks and the instrumentation hooks.

Spec: ``docs/protocol/v1/session-setup.mdx`` (sessions open with session/new, session/load,
session/resume; end with session/close).  Every test runs an agent and a client in memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Literal

import pytest
import trio

import acp_trio
from acp_schema import v1

DEADLINE = 30


class Agent:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.count = 0
        self.seen_in_handler: list[bool] = []

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        self.count += 1
        return v1.NewSessionResponse(session_id=f"s{self.count}")

    async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
        if params.session_id == "missing":
            raise acp_trio.RequestError(acp_trio.RESOURCE_NOT_FOUND, "no such session")
        return v1.LoadSessionResponse()

    async def session_close(self, params: v1.CloseSessionRequest) -> v1.CloseSessionResponse:
        self.seen_in_handler.append(params.session_id in self.conn.sessions)
        return v1.CloseSessionResponse()

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        caps = v1.AgentCapabilities(
            load_session=True,
            session_capabilities=v1.SessionCapabilities(
                close=v1.SessionCloseCapabilities(),
                additional_directories=v1.SessionAdditionalDirectoriesCapabilities(),
            ),
        )
        return v1.InitializeResponse(protocol_version=1, agent_capabilities=caps)


class Client:
    def __init__(self, conn: acp_trio.ClientSideConnection) -> None:
        self.conn = conn


async def _init(client_conn: acp_trio.ClientSideConnection) -> None:
    await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))


async def test_sessions_open_and_end_on_both_sides(tmp_path: Any) -> None:
    opened: list[tuple[str, str]] = []
    ended: list[tuple[str, str, str | None]] = []
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (agent_conn, client_conn):
            for side, conn in (("agent", agent_conn), ("client", client_conn)):

                def on_open(info: acp_trio.SessionInfo, side: str = side) -> None:
                    opened.append((side, info.session_id))

                def on_end(info: acp_trio.SessionInfo, side: str = side) -> None:
                    ended.append((side, info.session_id, info.end_reason))

                conn.sessions.on_open(on_open)
                conn.sessions.on_end(on_end)
            await _init(client_conn)
            agent = client_conn.agent
            extra = str(tmp_path / "extra")
            new = await agent.session_new(
                v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[], additional_directories=[extra])
            )
            assert new.session_id == "s1"
            for conn in (agent_conn, client_conn):
                info = conn.sessions["s1"]
                assert (info.cwd, info.additional_directories, info.method) == (str(tmp_path), (extra,), "session/new")
                assert info.roots == (str(tmp_path), extra)
                assert info.end_reason is None
            await agent.session_load(v1.LoadSessionRequest(session_id="old", cwd=str(tmp_path), mcp_servers=[]))
            assert set(client_conn.sessions) == set(agent_conn.sessions) == {"s1", "old"}
            # a failed load opens nothing
            with pytest.raises(acp_trio.RequestError):
                await agent.session_load(v1.LoadSessionRequest(session_id="missing", cwd=str(tmp_path), mcp_servers=[]))
            assert "missing" not in client_conn.sessions and "missing" not in agent_conn.sessions
            await agent.session_close(v1.CloseSessionRequest(session_id="s1"))
            assert agent_conn.handler.seen_in_handler == [True]  # still open while its handler runs
            assert set(client_conn.sessions) == set(agent_conn.sessions) == {"old"}
            assert ("agent", "s1", "session/close") in ended and ("client", "s1", "session/close") in ended
            await client_conn.aclose()
            await agent_conn.wait_closed()
    assert sorted(opened) == [("agent", "old"), ("agent", "s1"), ("client", "old"), ("client", "s1")]
    # the connection closing ends what was still open, with the close reason
    closing = [e for e in ended if e[1] == "old"]
    assert {side for side, _, _ in closing} == {"agent", "client"}
    assert all(reason and reason != "session/close" for _, _, reason in closing)
    assert len(client_conn.sessions) == len(agent_conn.sessions) == 0


async def test_wait_ended_returns_on_close_and_on_connection_close(tmp_path: Any) -> None:
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (agent_conn, client_conn):
            await _init(client_conn)
            agent = client_conn.agent
            await agent.session_new(v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[]))
            await agent.session_new(v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[]))
            done: list[str] = []

            async def watch(session_id: str) -> None:
                await agent_conn.sessions.wait_ended(session_id)
                done.append(session_id)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, "s1")
                nursery.start_soon(watch, "s2")
                await trio.testing.wait_all_tasks_blocked()
                assert done == []
                await agent.session_close(v1.CloseSessionRequest(session_id="s1"))
                await trio.testing.wait_all_tasks_blocked()
                assert done == ["s1"]
                await client_conn.aclose()
            assert done == ["s1", "s2"]
            # after the close nothing waits
            await agent_conn.sessions.wait_ended("never")


async def test_background_tasks_are_cancelled_and_awaited_at_close() -> None:
    events: list[str] = []
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (_agent_conn, client_conn):
            started = trio.Event()

            async def background(label: str) -> None:
                try:
                    started.set()
                    await trio.sleep_forever()
                finally:
                    with trio.CancelScope(shield=True):
                        await trio.sleep(0.5)  # cleanup that takes time is waited for
                        events.append(f"cleaned {label}")

            async def boom() -> None:
                raise RuntimeError("background failure")

            client_conn.start_soon(background, "x")
            client_conn.start_soon(boom)  # logged, closes nothing
            await started.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert not client_conn.closed
            await client_conn.aclose()
        assert events == ["cleaned x"]
        with pytest.raises(acp_trio.ConnectionClosed):
            client_conn.start_soon(background, "late")


async def test_start_soon_outside_async_with_is_an_error() -> None:
    send, receive = trio.testing.memory_stream_pair()
    conn = acp_trio.ClientSideConnection(Client, send, receive)

    async def noop() -> None:
        pass

    with pytest.raises(RuntimeError, match="not running"):
        conn.start_soon(noop)


async def test_close_callbacks_run_once_with_the_reason() -> None:
    reasons: list[str] = []
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (_agent_conn, client_conn):
            client_conn.connection.add_close_callback(reasons.append)

            def bad(reason: str) -> None:
                raise ValueError("callback failure")

            client_conn.connection.add_close_callback(bad)
            await client_conn.connection.aclose("bye")
            await client_conn.connection.aclose("again")
        client_conn.connection.add_close_callback(reasons.append)  # already closed: called at once
    assert reasons == ["bye", "bye"]


class Recorder:
    """An Instrumentation that stamps outgoing params and records handler runs."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.outbound_calls: list[tuple[str, str]] = []
        self.inbound_calls: list[tuple[str, str, Any]] = []
        self.active: list[str] = []

    def outbound(self, kind: Literal["request", "notification"], method: str, params: Any) -> Any:
        self.outbound_calls.append((kind, method))
        if type(params) is dict:
            return {**params, "_meta": {**(params.get("_meta") or {}), "from": self.label}}
        return params

    @contextlib.contextmanager
    def inbound(self, kind: Literal["request", "notification"], method: str, params: Any) -> Iterator[None]:
        meta = params.get("_meta") if type(params) is dict else None
        self.inbound_calls.append((kind, method, meta))
        self.active.append(method)
        try:
            yield
        finally:
            self.active.remove(method)


async def test_instrumentation_sees_every_message_and_wraps_handlers(tmp_path: Any) -> None:
    agent_rec, client_rec = Recorder("agent"), Recorder("client")
    seen_active: list[list[str]] = []

    class TracedAgent(Agent):
        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            seen_active.append(list(agent_rec.active))
            assert params.meta == {"from": "client"}  # the stamped _meta reached the typed params
            return await super().session_new(params)

    class TracedClient(Client):
        async def session_update(self, params: v1.SessionNotification) -> None:
            seen_active.append(list(client_rec.active))

    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(TracedAgent, TracedClient) as (agent_conn, client_conn):
            agent_conn.connection.instrumentation = agent_rec
            client_conn.connection.instrumentation = client_rec
            await _init(client_conn)
            new = await client_conn.agent.session_new(v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[]))
            chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text="hi"))
            await agent_conn.client.session_update(v1.SessionNotification(session_id=new.session_id, update=chunk))
            await client_conn.agent.session_cancel(v1.CancelNotification(session_id=new.session_id))
            await trio.testing.wait_all_tasks_blocked()
    assert client_rec.outbound_calls == [
        ("request", "initialize"),
        ("request", "session/new"),
        ("notification", "session/cancel"),
    ]
    assert agent_rec.outbound_calls == [("notification", "session/update")]
    assert [(k, m) for k, m, _ in agent_rec.inbound_calls] == [
        ("request", "initialize"),
        ("request", "session/new"),
        ("notification", "session/cancel"),
    ]
    assert all(meta == {"from": "client"} for _, _, meta in agent_rec.inbound_calls)
    assert client_rec.inbound_calls == [("notification", "session/update", {"from": "agent"})]
    # each handler ran inside its inbound context
    assert seen_active == [["session/new"], ["session/update"]]

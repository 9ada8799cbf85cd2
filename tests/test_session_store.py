"""The session store (acp_trio.session_store): recording, session/load replay, list, resume, close, delete.

In-memory pairs (``acp_trio.testing.pair``, ``open_memory_pair``) cover the protocol; ``tests/store_agents/store_agent.py``
runs as a real process for the restart, SIGKILL and concurrent-process tests (real clock, every
wait bounded by ``trio.fail_after``).
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

import acp_trio
import acp_trio.testing as testing
from acp_schema import v1, v2
from acp_trio import (
    AgentSideConnection,
    ConnectionClosed,
    RequestError,
    StandardClient,
    _store_db,
    open_memory_pair,
    session_store,
    spawn_agent,
)
from acp_trio import builders as b
from acp_trio._store_db import APPLICATION_ID, lines_of, update_line_head
from acp_trio.session_state import SessionState

AGENT = Path(__file__).parent / "store_agents" / "store_agent.py"
_spec = importlib.util.spec_from_file_location("store_agent", AGENT)
assert _spec is not None and _spec.loader is not None
store_agent = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(store_agent)
StoreAgent = store_agent.StoreAgent

posix_only = pytest.mark.skipif(os.name != "posix", reason="real processes and signals: POSIX only")


# -- helpers ----------------------------------------------------------------------------------------


class Recorder(StandardClient):
    """A StandardClient that also keeps every session/update line it reads, raw."""

    def __init__(self, conn: Any, **options: Any) -> None:
        super().__init__(conn, **options)
        self.lines: list[bytes] = []


def _tap(holder: list[Any]) -> Any:
    def tap(direction: str, line: bytes) -> None:
        if direction == "in" and holder and b'"method":"session/update"' in line:
            holder[0].lines.append(line)

    return tap


@asynccontextmanager
async def pair(store: session_store.SessionStore, agent: Any = None) -> AsyncIterator[tuple[Any, Any]]:
    """An initialized (agent connection, client connection) pair over ``store``."""
    holder: list[Any] = []
    factory = agent or functools.partial(StoreAgent, store=store)
    async with testing.pair(factory, Recorder, tap=_tap(holder)) as p:  # initialized
        holder.append(p.client)
        assert p.agent_conn is not None
        yield p.agent_conn, p.client_conn


async def new_session(client_conn: Any, cwd: str = "/work", **extra: Any) -> str:
    """session/new, its modes and config options applied to the client's state (as a client shows them)."""
    response = await client_conn.agent.session_new(v1.NewSessionRequest(cwd=cwd, mcp_servers=[], **extra))
    client_conn.handler.states.state(response.session_id).apply_setup(response)
    return str(response.session_id)


def load_request(session_id: str, cwd: str = "/work") -> v1.LoadSessionRequest:
    return v1.LoadSessionRequest(session_id=session_id, cwd=cwd, mcp_servers=[])


def assert_same_state(replayed: SessionState, live: SessionState) -> None:
    assert replayed.transcript == live.transcript
    assert replayed.tool_calls == live.tool_calls
    assert replayed.plan == live.plan
    assert replayed.current_mode_id == live.current_mode_id
    assert replayed.available_modes == live.available_modes
    assert replayed.config_options == live.config_options
    assert replayed.session_info == live.session_info
    assert replayed.available_commands == live.available_commands
    assert replayed.unknown == live.unknown


def agent_lines(lines: list[bytes]) -> list[bytes]:
    """The session/update lines that are not user_message_chunk (a replay makes those from prompts)."""
    return [line for line in lines if b'"sessionUpdate":"user_message_chunk"' not in line]


# -- enabling and capabilities ---------------------------------------------------------------------


async def test_capabilities_are_advertised_only_when_a_store_is_enabled() -> None:
    class Plain:
        def __init__(self, conn: Any) -> None:
            pass

        async def session_new(self, params: Any) -> v1.NewSessionResponse:
            return v1.NewSessionResponse(session_id="s1")

    async with open_memory_pair(Plain, StandardClient) as (_, client_conn):
        init = await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
        assert init.agent_capabilities.load_session is not True
        assert client_conn.agent_capabilities.get("sessionCapabilities") is None

    async with pair(session_store.MemorySessionStore()) as (_, client_conn):
        caps = client_conn.agent_capabilities
        assert caps["loadSession"] is True
        assert caps["sessionCapabilities"] == {"list": {}, "resume": {}, "close": {}, "delete": {}}


async def test_an_agents_own_initialize_response_gets_the_capabilities_added() -> None:
    class OwnInit(StoreAgent):  # type: ignore[misc,valid-type]
        async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
            caps = v1.AgentCapabilities(
                load_session=False,
                prompt_capabilities=v1.PromptCapabilities(embedded_context=True),
                session_capabilities=v1.SessionCapabilities(
                    additional_directories=v1.SessionAdditionalDirectoriesCapabilities()
                ),
            )
            return v1.InitializeResponse(protocol_version=1, agent_capabilities=caps)

    store = session_store.MemorySessionStore()
    async with pair(store, functools.partial(OwnInit, store=store)) as (_, client_conn):
        caps = client_conn.agent_capabilities
        assert caps["loadSession"] is True
        assert caps["promptCapabilities"]["embeddedContext"] is True
        assert set(caps["sessionCapabilities"]) == {"list", "resume", "close", "delete", "additionalDirectories"}


async def test_enable_refuses_a_second_store_a_closed_store_and_a_client_connection() -> None:
    store = session_store.MemorySessionStore()
    async with pair(store) as (agent_conn, client_conn):
        with pytest.raises(RuntimeError, match="already enabled"):
            session_store.enable(agent_conn, store)
        with pytest.raises(TypeError, match="AgentSideConnection"):
            session_store.enable(client_conn, store)
    store.close()
    store.close()  # idempotent

    class Late:
        def __init__(self, conn: AgentSideConnection) -> None:
            session_store.enable(conn, store)

    with pytest.raises(RuntimeError, match="closed"):
        async with open_memory_pair(Late, StandardClient):
            pass


# -- recording and replay ----------------------------------------------------------------------------


async def test_load_replays_the_conversation_in_order_and_rebuilds_the_live_transcript(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with session_store.SqliteSessionStore(str(path)) as store:
        async with pair(store) as (_, client_conn):
            client: Recorder = client_conn.handler
            sid = await new_session(client_conn)
            await client.prompt(sid, "talk hello there")
            await client.prompt(
                sid, [v1.TextContentBlock(text="talk again"), v1.TextContentBlock(text="(second block)")]
            )
            live = client.states[sid]
            live_lines = list(client.lines)
    # "restart": a new store object on the same file, a new connection and client
    with session_store.SqliteSessionStore(str(path)) as store:
        async with pair(store) as (_, client_conn):
            client = client_conn.handler
            with trio.fail_after(10):
                response = await client.states.load(client_conn.agent, load_request(sid))
            replayed = client.states[sid]
            assert_same_state(replayed, live)
            # the agent's updates come back byte for byte, in order; prompts as user_message_chunk
            assert agent_lines(client.lines) == live_lines
            users = [orjson.loads(line) for line in client.lines if b"user_message_chunk" in line]
            assert [u["params"]["update"]["content"]["text"] for u in users] == [
                "talk hello there",
                "talk again",
                "(second block)",
            ]
            # the response: session/new's modes with the latest mode, and the latest config options
            assert response.modes.current_mode_id == "code"
            assert [m.id for m in response.modes.available_modes] == ["ask", "code"]
            assert response.config_options[0].current_value == "large"
            assert replayed.current_mode_id == "code"
            # the session goes on being recorded after the load
            await client.prompt(sid, "stream 3")
            conversation = await store.conversation(sid)
            assert conversation is not None
            assert [kind for kind, _ in conversation.events].count("prompt") == 3


async def test_prompt_lines_are_kept_exactly_as_received_and_updates_as_sent() -> None:
    store = session_store.MemorySessionStore()
    sent: list[bytes] = []

    def tap(direction: str, line: bytes) -> None:
        if direction == "out" and b'"session/update"' in line:
            sent.append(line)

    async with open_memory_pair(functools.partial(StoreAgent, store=store), Recorder, tap=tap) as (_, client_conn):
        await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
        sid = await new_session(client_conn)
        raw = (
            '{"jsonrpc": "2.0", "id": 77, "method": "session/prompt", "params": {"sessionId": '
            + orjson.dumps(sid).decode()
            + ', "prompt": [{"type": "text", "text": "stream 4 \\u00e9"}]}}'
        )
        client_stream = client_conn.connection
        client_stream.queue_lines(raw.encode() + b"\n")
        with trio.fail_after(5):
            while len(sent) < 4:
                await trio.sleep(0)
        conversation = await store.conversation(sid)
    assert conversation is not None
    assert conversation.events[0] == ("prompt", raw.encode() + b"\n")
    assert [line for kind, line in conversation.events if kind == "update"] == sent
    assert conversation.session.title == "stream 4 é"


async def test_lines_rebuilt_from_update_objects_are_the_bytes_the_runtime_sends() -> None:
    conv_lines: list[bytes] = []
    store = session_store.MemorySessionStore()
    async with pair(store) as (agent_conn, client_conn):
        sid = await new_session(client_conn)
        for update in (
            b.agent_message('quotes " and \\ and \n newline, unicode é ☃ \U0001f600, <>&'),
            b.agent_message("with an id", message_id="m1"),
            b.agent_message(b.image_block("aGVsbG8=", "image/png")),
            b.agent_thought("a thought"),
            b.tool_call("c1", "Tool \u2028 line separator", kind="edit", raw_input={"nested": {"jsonrpc": "2.0"}}),
            b.agent_message("x" * 5000),
        ):
            notification = b.notification(sid, update)
            wire = agent_conn.connection.converter.unstructure(notification)
            conv_lines.append(agent_conn.connection.encode_notification("session/update", wire))
            await agent_conn.client.session_update(notification)
        rows = await store._rows(sid)
    assert rows is not None
    assert b"".join(lines_of(kind, sid, data) for kind, data in rows[1]) == b"".join(conv_lines)
    assert update_line_head('s\u00e9"q').startswith(b'{"jsonrpc":"2.0","method":"session/update"')


async def test_updates_with_extra_params_or_instrumentation_are_kept_as_whole_lines() -> None:
    class Tracing:
        def outbound(self, kind: str, method: str, params: Any) -> Any:
            if type(params) is dict:
                return {**params, "_meta": {"traceparent": "00-abc-def-01"}}
            return params

        def inbound(self, kind: str, method: str, params: Any) -> Any:
            import contextlib

            return contextlib.nullcontext()

    store = session_store.MemorySessionStore()
    async with pair(store) as (agent_conn, client_conn):
        client = client_conn.handler
        sid = await new_session(client_conn)
        await agent_conn.client.session_update(
            v1.SessionNotification(session_id=sid, update=b.agent_message("with meta"), meta={"k": 1})
        )
        agent_conn.connection.instrumentation = Tracing()
        await agent_conn.client.session_update(b.notification(sid, b.agent_message("traced")))
        agent_conn.connection.instrumentation = None
        await agent_conn.client.session_update(b.notification(sid, b.agent_message("plain")))
        with trio.fail_after(5):
            while len(client.lines) < 3:
                await trio.sleep(0)
        live = list(client.lines)
        conversation = await store.conversation(sid)
    assert conversation is not None
    assert [line.rstrip(b"\n") for _, line in conversation.events] == live
    assert b'"traceparent"' in live[1] and b'"_meta":{"k":1}' in live[0]


async def test_closing_stops_recording_and_keeps_the_record() -> None:
    store = session_store.MemorySessionStore()
    async with pair(store) as (agent_conn, client_conn):
        client = client_conn.handler
        sid = await new_session(client_conn)
        await client.prompt(sid, "stream 2")
        await client_conn.agent.session_close(v1.CloseSessionRequest(session_id=sid))
        assert sid not in agent_conn.sessions
        assert sid not in agent_conn._session_store.recording
        await agent_conn.client.session_update(b.notification(sid, b.agent_message("after close")))
        listed = await client_conn.agent.session_list(v1.ListSessionsRequest())
        assert [s.session_id for s in listed.sessions] == [sid]
        conversation = await store.conversation(sid)
        assert conversation is not None
        assert len(conversation.events) == 3
        assert b"after close" not in b"".join(line for _, line in conversation.events)
        # closing again: still stored, so it succeeds
        await client_conn.agent.session_close(v1.CloseSessionRequest(session_id=sid))


async def test_close_cancels_the_running_turn() -> None:
    started = trio.Event()

    class Slow(StoreAgent):  # type: ignore[misc,valid-type]
        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            started.set()
            await trio.sleep_forever()
            raise AssertionError("unreachable")

    store = session_store.MemorySessionStore()
    async with pair(store, functools.partial(Slow, store=store)) as (_, client_conn):
        sid = await new_session(client_conn)
        async with trio.open_nursery() as nursery:
            result: list[Any] = []

            async def prompt() -> None:
                result.append(await client_conn.handler.prompt(sid, "wait"))

            nursery.start_soon(prompt)
            with trio.fail_after(5):
                await started.wait()
                await client_conn.agent.session_close(v1.CloseSessionRequest(session_id=sid))
        assert result[0].stop_reason == "cancelled"


async def test_delete_removes_the_record_and_unknown_ids_answer_resource_not_found() -> None:
    store = session_store.MemorySessionStore()
    async with pair(store) as (agent_conn, client_conn):
        client = client_conn.handler
        sid = await new_session(client_conn)
        await client.prompt(sid, "stream 2")
        await client_conn.agent.session_delete(v1.DeleteSessionRequest(session_id=sid))
        assert sid not in agent_conn.sessions
        assert (await client_conn.agent.session_list(v1.ListSessionsRequest())).sessions == []
        assert await store.get(sid) is None
        # deleting what does not exist succeeds (session-delete.mdx)
        await client_conn.agent.session_delete(v1.DeleteSessionRequest(session_id=sid))
        await client_conn.agent.session_delete(v1.DeleteSessionRequest(session_id="never"))
        for call in (
            lambda: client_conn.agent.session_load(load_request(sid)),
            lambda: client_conn.agent.session_resume(v1.ResumeSessionRequest(session_id="nope", cwd="/w")),
            lambda: client_conn.agent.session_close(v1.CloseSessionRequest(session_id="nope")),
        ):
            with pytest.raises(RequestError) as info:
                await call()
            assert info.value.code == -32002
            assert info.value.data["sessionId"] in (sid, "nope")
        # the connection still works
        assert await new_session(client_conn)


async def test_resume_does_not_replay_and_goes_on_recording() -> None:
    store = session_store.MemorySessionStore()
    async with pair(store) as (_, client_conn):
        sid = await new_session(client_conn)
        await client_conn.handler.prompt(sid, "talk one")
    async with pair(store) as (agent_conn, client_conn):
        client = client_conn.handler
        client_conn.agent_capabilities["sessionCapabilities"]["additionalDirectories"] = {}
        response = await client_conn.agent.session_resume(
            v1.ResumeSessionRequest(session_id=sid, cwd="/work", additional_directories=["/extra"])
        )
        assert client.lines == []
        assert response.modes.current_mode_id == "code"
        assert agent_conn.sessions[sid].additional_directories == ("/extra",)
        await client.prompt(sid, "stream 2")
        stored = await store.get(sid)
        assert stored is not None and stored.additional_directories == ("/extra",)
        assert stored.prompt_count == 2


async def test_set_mode_and_config_option_requests_update_the_load_response() -> None:
    class Modes(StoreAgent):  # type: ignore[misc,valid-type]
        async def session_set_mode(self, params: v1.SetSessionModeRequest) -> v1.SetSessionModeResponse:
            return v1.SetSessionModeResponse()

        async def session_set_config_option(self, params: Any) -> Any:
            conv = self.conn.connection.converter
            return conv.structure(
                {"configOptions": store_agent.config_options(params.value)}, v1.SetSessionConfigOptionResponse
            )

    store = session_store.MemorySessionStore()
    async with pair(store, functools.partial(Modes, store=store)) as (_, client_conn):
        sid = await new_session(client_conn)
        await client_conn.agent.session_set_mode(v1.SetSessionModeRequest(session_id=sid, mode_id="code"))
        conv = client_conn.connection.converter
        await client_conn.agent.session_set_config_option(
            conv.structure({"sessionId": sid, "configId": "model", "value": "large"}, v1.SetSessionConfigOptionRequest)
        )
        response = await client_conn.agent.session_load(load_request(sid))
    assert response.modes.current_mode_id == "code"
    assert response.config_options[0].current_value == "large"


async def test_an_agent_can_define_its_own_handlers_and_build_on_the_recorders() -> None:
    calls: list[str] = []

    class Own(StoreAgent):  # type: ignore[misc,valid-type]
        async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
            calls.append("load")
            await self.recorder.replay(params.session_id)
            return v1.LoadSessionResponse()

        async def session_list(self, params: v1.ListSessionsRequest) -> v1.ListSessionsResponse:
            calls.append("list")
            return v1.ListSessionsResponse(sessions=[])

        async def session_delete(self, params: v1.DeleteSessionRequest) -> v1.DeleteSessionResponse:
            calls.append("delete")
            return v1.DeleteSessionResponse()

    store = session_store.MemorySessionStore()
    async with pair(store, functools.partial(Own, store=store)) as (_, client_conn):
        client = client_conn.handler
        sid = await new_session(client_conn)
        await client.prompt(sid, "stream 2")
        assert (await client_conn.agent.session_list(v1.ListSessionsRequest())).sessions == []
        client.lines.clear()
        await client_conn.agent.session_load(load_request(sid))
        assert len(client.lines) == 3  # the prompt's chunk and two updates
        await client_conn.agent.session_delete(v1.DeleteSessionRequest(session_id=sid))
        assert await store.get(sid) is None  # the store forgets what the agent deleted
    assert calls == ["list", "load", "delete"]


async def test_titles_come_from_the_first_prompt_then_from_session_info_updates() -> None:
    store = session_store.MemorySessionStore()
    async with pair(store) as (agent_conn, client_conn):
        client = client_conn.handler
        sid = await new_session(client_conn)
        await client.prompt(sid, "\n  stream 1 please\nsecond line")
        assert (await store.get(sid)).title == "stream 1 please"  # type: ignore[union-attr]
        await client.prompt(sid, "stream 1 another")
        assert (await store.get(sid)).title == "stream 1 please"  # type: ignore[union-attr]
        await agent_conn.client.session_update(b.notification(sid, b.session_info(title="Named")))
        listed = await client_conn.agent.session_list(v1.ListSessionsRequest())
        assert listed.sessions[0].title == "Named"
        await agent_conn.client.session_update(b.notification(sid, b.session_info(title=None)))
        await client.prompt(sid, "stream 1 yet another")
        listed = await client_conn.agent.session_list(v1.ListSessionsRequest())
        assert listed.sessions[0].title is v1.UNSET  # cleared by the agent, not taken from a prompt again


async def test_mcp_secrets_are_not_written_unless_asked() -> None:
    servers = [
        v1.McpServerStdio(
            name="fs", command="/bin/fs", args=["--x"], env=[v1.EnvVariable(name="API_KEY", value="secret123")]
        ),
        v1.HttpMcpServer(
            name="api",
            url="https://example.com/mcp",
            headers=[v1.HttpHeader(name="Authorization", value="Bearer token123")],
        ),
    ]
    for store_secrets in (False, True):
        store = session_store.MemorySessionStore(store_secrets=store_secrets)
        async with pair(store) as (_, client_conn):
            client_conn.agent_capabilities["mcpCapabilities"] = {"http": True}
            response = await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/w", mcp_servers=servers))
            stored = await store.get(response.session_id)
        assert stored is not None
        text = orjson.dumps(stored.mcp_servers)
        assert (b"secret123" in text) is store_secrets and (b"token123" in text) is store_secrets
        assert stored.mcp_servers[0]["env"][0]["name"] == "API_KEY"
        assert stored.mcp_servers[1]["headers"][0]["name"] == "Authorization"


async def test_a_new_session_under_a_stored_id_replaces_the_old_record() -> None:
    class FixedId(StoreAgent):  # type: ignore[misc,valid-type]
        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            return v1.NewSessionResponse(session_id="sess_fixed")

    store = session_store.MemorySessionStore()
    async with pair(store, functools.partial(FixedId, store=store)) as (_, client_conn):
        await new_session(client_conn)
        await client_conn.handler.prompt("sess_fixed", "stream 5")
        await new_session(client_conn, cwd="/other")
        await client_conn.handler.prompt("sess_fixed", "stream 1")
        conversation = await store.conversation("sess_fixed")
    assert conversation is not None and conversation.session.cwd == "/other"
    assert len(conversation.events) == 2


# -- concurrency -------------------------------------------------------------------------------------


async def test_concurrent_sessions_writing_at_once_each_replay_their_own_conversation(tmp_path: Path) -> None:
    path = str(tmp_path / "many.db")
    lives: dict[str, tuple[SessionState, list[bytes]]] = {}
    with session_store.SqliteSessionStore(path) as store:
        async with pair(store) as (_, client_conn):
            client = client_conn.handler
            ids = [await new_session(client_conn, cwd=f"/p{i}") for i in range(6)]
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    for i, sid in enumerate(ids):
                        nursery.start_soon(client.prompt, sid, f"stream {300 + i}")
                async with trio.open_nursery() as nursery:
                    for sid in ids:
                        nursery.start_soon(client.prompt, sid, "talk round two")
            for sid in ids:
                mine = [line for line in client.lines if sid.encode() in line]
                lives[sid] = (client.states[sid], mine)
    with session_store.SqliteSessionStore(path) as store:
        async with pair(store) as (_, client_conn):
            client = client_conn.handler
            for sid, (live, lines) in lives.items():
                client.lines.clear()
                await client.states.load(client_conn.agent, load_request(sid))
                assert_same_state(client.states[sid], live)
                assert agent_lines(client.lines) == lines
            assert await store.integrity_check() == "ok"


# -- versions ----------------------------------------------------------------------------------------

V1_SCHEMA = """
CREATE TABLE sessions (session_id TEXT PRIMARY KEY, cwd TEXT NOT NULL, additional_directories TEXT,
                       mcp_servers TEXT, title TEXT, created_at TEXT, updated_at TEXT);
CREATE TABLE events (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, kind TEXT NOT NULL, line BLOB NOT NULL);
"""


def _line(session_id: str, text: str) -> bytes:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return orjson.dumps(
        {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}}
    )


async def test_a_version_1_file_is_migrated_and_loads(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(V1_SCHEMA)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 1")
    db.execute(
        "INSERT INTO sessions VALUES ('old_1', '/proj', '[\"/lib\"]', '[]', 'Old talk', "
        "'2025-01-02T03:04:05Z', '2025-01-02T03:05:00.500Z')"
    )
    prompt = b'{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"old_1","prompt":[{"type":"text","text":"hi"}]}}'
    rows = [("prompt", prompt), ("update", _line("old_1", "hello ")), ("update", _line("old_1", "again"))]
    db.executemany("INSERT INTO events (session_id, kind, line) VALUES ('old_1', ?, ?)", rows)
    db.commit()
    db.close()

    with session_store.SqliteSessionStore(str(path)) as store:
        stored = await store.get("old_1")
        assert stored is not None
        assert (stored.cwd, stored.additional_directories, stored.title) == ("/proj", ("/lib",), "Old talk")
        assert stored.updated_at == "2025-01-02T03:05:00.500Z" and stored.prompt_count == 1
        async with pair(store) as (_, client_conn):
            client = client_conn.handler
            await client.states.load(client_conn.agent, load_request("old_1", "/proj"))
            assert [m.text for m in client.states["old_1"].messages] == ["hi", "hello again"]
            assert client.lines[1:] == [_line("old_1", "hello "), _line("old_1", "again")]
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA user_version").fetchone()[0] == session_store.SCHEMA_VERSION
    tables = {r[0] for r in check.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"sessions", "events", "journals", "journal_lines"}
    check.close()


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("newer", "schema version 99, written by a newer acp-trio"),
        ("foreign", "not an acp-trio session store"),
        ("garbage", "not a session store database"),
    ],
)
def test_files_this_version_cannot_use_are_refused_with_a_clear_message(
    tmp_path: Path, setup: str, message: str
) -> None:
    path = tmp_path / "x.db"
    if setup == "garbage":
        path.write_bytes(b"this is not sqlite" * 100)
    else:
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE notes (x)")
        if setup == "newer":
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute("PRAGMA user_version = 99")
        db.commit()
        db.close()
    before = path.read_bytes()
    with pytest.raises(session_store.StoreVersionError, match=message) as info:
        session_store.SqliteSessionStore(str(path))
    assert info.value.path == str(path) and info.value.supported == session_store.SCHEMA_VERSION
    assert path.read_bytes() == before  # nothing changed


_OPENER = """
import sys
from acp_trio import session_store
for line in sys.stdin:  # one path per round, given to every opener at once
    try:
        session_store.SqliteSessionStore(line.strip()).close()
        print("ok", flush=True)
    except Exception as exc:
        print(repr(exc), flush=True)
"""


@posix_only
def test_processes_opening_one_new_file_at_once_all_get_the_store(tmp_path: Path) -> None:
    # SQLite answers a second process switching the file to WAL "database is locked" without waiting,
    # and the schema's identity must be read in one snapshot while another process creates it.
    import subprocess

    openers = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        for _ in range(4)
    ]
    try:
        for round_ in range(10):
            path = tmp_path / f"new{round_}.db"
            for opener in openers:
                assert opener.stdin is not None
                opener.stdin.write(f"{path}\n")
            for opener in openers:
                assert opener.stdin is not None
                opener.stdin.flush()
            results = [opener.stdout.readline().strip() for opener in openers if opener.stdout is not None]
            assert results == ["ok"] * 4, f"round {round_}: {results}"
            check = sqlite3.connect(path)
            assert check.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
            assert check.execute("PRAGMA user_version").fetchone()[0] == session_store.SCHEMA_VERSION
            check.close()
    finally:
        for opener in openers:
            if opener.stdin is not None:
                opener.stdin.close()
        for opener in openers:
            opener.wait(timeout=30)


# -- listing -----------------------------------------------------------------------------------------


@pytest.mark.one_interpreter  # SQLite's cursors over 2,500 sessions: the database's logic, not the interpreter's
async def test_list_pages_through_thousands_of_sessions_with_cursors_and_a_cwd_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (a short commit interval: 2,500 sessions made one after another, each answer waiting for its commit;
    # and the writer thread at the test's own priority: at its niceness 10, on a machine whose CPUs other
    # processes keep busy (CI), each commit waited for the scheduler: 500 sessions took 19 s instead of 3 s,
    # for the same CPU; what this test checks is the listing, not the thread's priority)
    monkeypatch.setattr(_store_db, "_NICE", 0)
    with session_store.SqliteSessionStore(str(tmp_path / "list.db"), page_size=100, commit_interval=0.001) as store:
        async with pair(store) as (_, client_conn):
            agent = client_conn.agent
            with trio.fail_after(240):  # a hang guard: 2,500 commits took 64-74 s on a loaded 2-CPU machine
                created = [await new_session(client_conn, cwd=f"/proj{i % 3}") for i in range(2500)]

                async def everything(**filters: Any) -> list[v1.SessionInfo]:
                    seen: list[v1.SessionInfo] = []
                    cursor: Any = None
                    pages = 0
                    while True:
                        page = await agent.session_list(v1.ListSessionsRequest(cursor=cursor, **filters))
                        seen.extend(page.sessions)
                        pages += 1
                        assert len(page.sessions) <= 100
                        if not isinstance(page.next_cursor, str):
                            return seen
                        cursor = page.next_cursor

                listed = await everything()
                assert [s.session_id for s in listed] == created[::-1]  # most recently active first
                assert all(s.updated_at >= t.updated_at for s, t in itertools.pairwise(listed))
                in_one = await everything(cwd="/proj1")
                assert [s.session_id for s in in_one] == created[1::3][::-1]
                assert {s.cwd for s in in_one} == {"/proj1"}
                assert await everything(cwd="/nowhere") == []
            with pytest.raises(RequestError) as info:
                await agent.session_list(v1.ListSessionsRequest(cursor="not-a-cursor"))
            assert info.value.code == -32602


# -- real processes ----------------------------------------------------------------------------------


def _agent(path: Path) -> Any:
    return spawn_agent(sys.executable, [str(AGENT), "--store", str(path)], client=Recorder, shutdown_timeout=5)


async def _start(conn: Any, holder: list[Any]) -> None:
    holder.append(conn.handler)
    with trio.fail_after(30):
        await conn.agent.initialize(v1.InitializeRequest(protocol_version=1))


@posix_only
async def test_a_conversation_replayed_after_an_agent_restart_gives_an_identical_transcript(tmp_path: Path) -> None:
    path = tmp_path / "restart.db"
    holder: list[Any] = []
    async with spawn_agent(
        sys.executable, [str(AGENT), "--store", str(path)], client=Recorder, tap=_tap(holder)
    ) as conn:
        await _start(conn, holder)
        client = conn.handler
        with trio.fail_after(30):
            sid = await new_session(conn)
            await client.prompt(sid, "talk first")
            await client.prompt(sid, "stream 50")
            await client.prompt(sid, "talk second")
        live, live_lines = client.states[sid], list(client.lines)
    holder.clear()
    async with spawn_agent(
        sys.executable, [str(AGENT), "--store", str(path)], client=Recorder, tap=_tap(holder)
    ) as conn:
        await _start(conn, holder)
        client = conn.handler
        with trio.fail_after(30):
            listed = await conn.agent.session_list(v1.ListSessionsRequest())
            assert [(s.session_id, s.title) for s in listed.sessions] == [(sid, "Talk 2")]
            await client.states.load(conn.agent, load_request(sid))
        assert_same_state(client.states[sid], live)
        assert agent_lines(client.lines) == live_lines


@posix_only
async def test_an_agent_killed_mid_turn_keeps_what_was_committed_and_the_file_reopens(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    holder: list[Any] = []
    async with spawn_agent(
        sys.executable, [str(AGENT), "--store", str(path)], client=Recorder, tap=_tap(holder), shutdown_timeout=1
    ) as conn:
        await _start(conn, holder)
        client = conn.handler
        sid = await new_session(conn)
        flushed = trio.Event()
        killed_after: list[int] = []

        def on_update(state: Any, update: Any) -> None:
            text = getattr(update.content, "text", "")
            if text == "FLUSHED":
                flushed.set()
            elif flushed.is_set() and text.startswith("more ") and int(text.split()[1]) >= 200 and not killed_after:
                conn.process.send_signal(signal.SIGKILL)  # mid-turn, while the store is writing
                killed_after.append(len(client.lines))

        client.states.on_update = on_update
        with trio.fail_after(30), pytest.raises(ConnectionClosed):
            await client.prompt(sid, "flood 2000")
        live_lines = list(client.lines)
    assert killed_after, "the agent was not killed mid-turn"

    # a new process opens the file and replays what was committed: everything up to FLUSHED, then a prefix
    holder.clear()
    async with spawn_agent(
        sys.executable, [str(AGENT), "--store", str(path)], client=Recorder, tap=_tap(holder)
    ) as conn:
        await _start(conn, holder)
        client = conn.handler
        with trio.fail_after(30):
            await client.states.load(conn.agent, load_request(sid))
            replayed = agent_lines(client.lines)
    flushed_at = next(i for i, line in enumerate(live_lines) if b'"FLUSHED"' in line)
    assert len(replayed) >= flushed_at  # every update before FLUSHED was committed before it was sent
    common = min(len(replayed), len(live_lines))
    assert replayed[:common] == live_lines[:common]  # the same stream, in order, nothing damaged
    with session_store.SqliteSessionStore(str(path)) as store:
        assert await store.integrity_check() == "ok"


ACKED_ROUNDS = int(os.environ.get("ACP_TEST_ACKED_ROUNDS", "4"))


def _killing_tap(record: Any, kill_on: list[Any], process: list[Any]) -> Any:
    def tap(direction: str, line: bytes) -> None:
        if direction == "in" and kill_on and kill_on[0](line):
            process[0].send_signal(signal.SIGKILL)
            kill_on.clear()
        record(direction, line)

    return tap


@posix_only
async def test_what_was_answered_survives_a_sigkill_right_after_the_answer(tmp_path: Path) -> None:
    """Acknowledged means stored: the agent is SIGKILLed the moment the client reads the ``end_turn``
    answer of a 2,000-update turn (or a ``session/new`` answer); the next process replays all of it."""
    path = tmp_path / "acked.db"
    claims: list[tuple[str, int]] = []  # (session id, chunks streamed in its answered turns)
    for r in range(ACKED_ROUNDS * 2 + 1):
        holder: list[Any] = []
        kill_on: list[Any] = []  # a predicate on an inbound line: SIGKILL the agent as it is read
        process: list[Any] = []
        tap = _killing_tap(_tap(holder), kill_on, process)
        async with spawn_agent(
            sys.executable, [str(AGENT), "--store", str(path)], client=Recorder, tap=tap, shutdown_timeout=5
        ) as conn:
            process.append(conn.process)
            await _start(conn, holder)
            client = conn.handler
            with trio.fail_after(60):
                for sid, chunks in claims:  # everything answered so far is there
                    client.lines.clear()
                    await conn.agent.session_load(load_request(sid))
                    replayed = [line for line in client.lines if b'"agent_message_chunk"' in line]
                    assert len(replayed) == chunks, f"round {r}: {sid} replayed {len(replayed)} of {chunks} updates"
                if r == ACKED_ROUNDS * 2:
                    break
                if r % 2 == 0:  # killed as the end_turn answer is read
                    sid = await new_session(conn)
                    kill_on.append(lambda line: b'"stopReason":"end_turn"' in line)
                    response = await client.prompt(sid, "stream 2000")
                    assert response.stop_reason == "end_turn"
                    claims.append((sid, 2000))
                else:  # killed as the session/new answer is read
                    kill_on.append(lambda line: b'"result":{' in line and b'"sessionId"' in line)
                    claims.append((await new_session(conn), 0))
                with trio.fail_after(10):
                    await conn.process.wait()
    with session_store.SqliteSessionStore(str(path)) as store:
        assert await store.integrity_check() == "ok"


@posix_only
async def test_two_agent_processes_write_one_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    lives: dict[str, list[bytes]] = {}

    async def run_agent() -> None:
        holder: list[Any] = []
        async with spawn_agent(
            sys.executable, [str(AGENT), "--store", str(path)], client=Recorder, tap=_tap(holder)
        ) as conn:
            await _start(conn, holder)
            client = conn.handler
            ids = [await new_session(conn) for _ in range(2)]
            async with trio.open_nursery() as nursery:
                for sid in ids:
                    nursery.start_soon(client.prompt, sid, "stream 1500")
            for sid in ids:
                lives[sid] = [line for line in client.lines if sid.encode() in line]

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_agent)
            nursery.start_soon(run_agent)
    assert len(lives) == 4
    with session_store.SqliteSessionStore(str(path)) as store:
        async with pair(store) as (_, client_conn):
            client = client_conn.handler
            listed = await client_conn.agent.session_list(v1.ListSessionsRequest())
            assert {s.session_id for s in listed.sessions} == set(lives)
            for sid, lines in lives.items():
                client.lines.clear()
                await client_conn.agent.session_load(load_request(sid))
                assert agent_lines(client.lines) == lines
                assert len(lines) == 1500


# -- acknowledged means stored, and the gaps of the first version ---------------------------------------


def committed(path: Path, session_id: str) -> tuple[int, int] | None:
    """What another reader of the file sees of ``session_id``: ``(prompts, updates)`` committed, or ``None``."""
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT id FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        counts = [0, 0]
        for kind, data in db.execute(
            "SELECT kind, data FROM events WHERE id BETWEEN ? AND ?", (row[0] << 32, (row[0] << 32) + (1 << 32) - 1)
        ):
            counts[kind != 1] += bytes(data).count(b"\n")
        return counts[0], counts[1]
    finally:
        db.close()


async def test_session_new_and_prompt_answers_are_sent_only_once_their_records_are_committed(tmp_path: Path) -> None:
    path = tmp_path / "acked.db"
    with session_store.SqliteSessionStore(str(path), commit_interval=0.5) as store:  # a slow writer: nothing by luck
        async with pair(store) as (_, client_conn):
            sid = await new_session(client_conn)
            assert committed(path, sid) == (0, 0)
            await client_conn.handler.prompt(sid, "stream 300")
            assert committed(path, sid) == (1, 300)
            await client_conn.handler.prompt(sid, "talk more")
            assert committed(path, sid) == (2, 300 + 12)


class BreakableStream(trio.abc.SendStream):
    """A send stream whose writes fail (a broken pipe) once ``broken`` is set."""

    def __init__(self, inner: trio.abc.SendStream) -> None:
        self.inner = inner
        self.broken = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.broken:
            await trio.lowlevel.checkpoint()
            raise trio.BrokenResourceError("the pipe broke (test)")
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_an_update_whose_write_failed_is_not_stored() -> None:
    from trio.testing import memory_stream_pair

    store = session_store.MemorySessionStore()
    agent_stream, client_stream = memory_stream_pair()
    breakable = BreakableStream(agent_stream)
    agent_conn = AgentSideConnection(functools.partial(StoreAgent, store=store), breakable, agent_stream)
    client_conn = acp_trio.ClientSideConnection(Recorder, client_stream, client_stream)
    with trio.fail_after(10):
        async with agent_conn, client_conn:
            await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
            sid = await new_session(client_conn)
            await client_conn.handler.prompt(sid, "stream 2")
            breakable.broken = True
            await agent_conn.client.session_update(b.notification(sid, b.agent_message("never written")))
            await agent_conn.connection.wait_closed()
    conversation = await store.conversation(sid)
    assert conversation is not None
    texts = [m["params"]["update"]["content"]["text"] for k, m in conversation.messages() if k == "update"]
    assert texts == ["chunk 0 ", "chunk 1 "]


async def test_a_prompt_inside_a_json_rpc_batch_is_recorded() -> None:
    store = session_store.MemorySessionStore()
    async with pair(store) as (_, client_conn):
        sid = await new_session(client_conn)
        answered = trio.Event()

        def tap(direction: str, line: bytes) -> None:
            if direction == "in" and line.startswith(b"["):
                answered.set()

        client_conn.connection.tap = tap
        request = {"sessionId": sid, "prompt": [{"type": "text", "text": "stream 2 in a batch"}]}
        batch = [{"jsonrpc": "2.0", "id": 901, "method": "session/prompt", "params": request}]
        client_conn.connection.queue_lines(orjson.dumps(batch) + b"\n")
        with trio.fail_after(5):
            await answered.wait()
        conversation = await store.conversation(sid)
    assert conversation is not None
    assert [kind for kind, _ in conversation.events] == ["prompt", "update", "update"]
    prompt = conversation.messages()[0][1]
    assert (prompt["id"], prompt["method"], prompt["params"]) == (901, "session/prompt", request)
    assert conversation.session.title == "stream 2 in a batch"


async def test_two_prompts_with_no_output_between_them_replay_as_two_user_messages() -> None:
    store = session_store.MemorySessionStore()
    async with pair(store) as (_, client_conn):
        client = client_conn.handler
        sid = await new_session(client_conn)
        await client.prompt(sid, "stream 0 first")  # no agent output
        await client.prompt(sid, "stream 0 second")
        await client.prompt(sid, "stream 1 third")
        await client.prompt(sid, "stream 0 fourth")
        live = [(m.role, m.text) for m in client.states[sid].messages]
    assert live == [
        ("user", "stream 0 first"),
        ("user", "stream 0 second"),
        ("user", "stream 1 third"),
        ("agent", "chunk 0 "),
        ("user", "stream 0 fourth"),
    ]
    async with pair(store) as (_, client_conn):
        client = client_conn.handler
        await client.states.load(client_conn.agent, load_request(sid))
        assert [(m.role, m.text) for m in client.states[sid].messages] == live


async def test_a_forked_session_starts_with_a_copy_of_its_parents_history() -> None:
    from acp_schema import v1_unstable as vu

    class Forking(StoreAgent):  # type: ignore[misc,valid-type]
        async def session_fork(self, params: Any) -> Any:
            return vu.ForkSessionResponse(session_id=f"fork_of_{params.session_id}")

        async def session_prompt(self, params: Any) -> Any:
            return vu.PromptResponse(stop_reason=(await super().session_prompt(params)).stop_reason)

    class Lines:
        def __init__(self, conn: Any) -> None:
            self.lines: list[bytes] = []

        async def session_update(self, params: Any) -> None:
            pass

    async def prompt(client_conn: Any, sid: str, text: str) -> None:
        await client_conn.agent.session_prompt(
            vu.PromptRequest(session_id=sid, prompt=[vu.TextContentBlock(text=text)])
        )

    store = session_store.MemorySessionStore()
    holder: list[Any] = []
    factory = functools.partial(Forking, store=store)
    async with open_memory_pair(factory, Lines, tap=_tap(holder), variant=vu) as (agent_conn, client_conn):
        holder.append(client_conn.handler)
        client = client_conn.handler
        await client_conn.agent.initialize(vu.InitializeRequest(protocol_version=1))
        parent = (await client_conn.agent.session_new(vu.NewSessionRequest(cwd="/work", mcp_servers=[]))).session_id
        await prompt(client_conn, parent, "talk before the fork")
        await agent_conn.client.session_update(  # params beyond sessionId and update: kept as a whole line
            vu.SessionNotification(session_id=parent, update=b.agent_message("with meta"), meta={"k": 1})
        )
        with trio.fail_after(5):
            while b'"_meta"' not in client.lines[-1]:
                await trio.sleep(0)
        parent_lines = list(client.lines)
        fork = await client_conn.agent.session_fork(vu.ForkSessionRequest(session_id=parent, cwd="/work"))
        child = fork.session_id
        client.lines.clear()
        await prompt(client_conn, child, "talk in the fork")
        child_lines = list(client.lines)
        await prompt(client_conn, parent, "stream 1")  # the parent goes on on its own
    assert len(parent_lines) == 12 and len(child_lines) == 11
    expected = [line.replace(parent.encode(), child.encode()) for line in parent_lines] + child_lines
    async with pair(store) as (_, client_conn):
        client = client_conn.handler
        await client.states.load(client_conn.agent, load_request(child))
        assert agent_lines(client.lines) == expected
        users = [u.text for u in client.states[child].messages if u.role == "user"]
        assert users == ["talk before the fork", "talk in the fork"]
        stored = await store.get(child)
        assert stored is not None and (stored.title, stored.prompt_count) == ("Talk 2", 2)
        parent_stored = await store.conversation(parent)
        assert parent_stored is not None and [k for k, _ in parent_stored.events].count("prompt") == 2


# -- protocol version 2 ------------------------------------------------------------------------------


class V2StoreAgent:
    """A v2 agent on a session store: ``stream N`` streams N chunks of one agent message."""

    def __init__(self, conn: AgentSideConnection, store: session_store.SessionStore) -> None:
        self.conn = conn
        self.recorder = session_store.enable(conn, store)
        self.count = 0

    async def send(self, session_id: str, update: Any) -> None:
        await self.conn.client.session_update(v2.UpdateSessionNotification(session_id=session_id, update=update))

    async def session_new(self, params: Any) -> Any:
        self.count += 1
        return v2.NewSessionResponse(session_id=f"v2_sess_{self.count}_{id(self)}")

    async def session_prompt(self, params: Any) -> Any:
        self.count += 1
        sid, n = params.session_id, self.count
        await self.send(sid, v2.UserMessageSessionUpdate(message_id=f"u{n}", content=list(params.prompt)))
        words = params.prompt[0].text.split()

        async def turn() -> str:
            for i in range(int(words[1])):
                await self.send(
                    sid,
                    v2.AgentMessageChunkSessionUpdate(message_id=f"a{n}", content=v2.TextContentBlock(text=f"{i} ")),
                )
            return "end_turn"

        self.conn.start_turn(sid, turn)
        return v2.PromptResponse(message_id=f"u{n}")


class V2Client:
    """Keeps every session/update line it reads; ``idle`` is set by each ``state_update`` ``idle``."""

    def __init__(self, conn: Any) -> None:
        self.lines: list[bytes] = []
        self.idle = trio.Event()
        self.on_idle: Any = None

    async def session_update(self, params: Any) -> None:
        if isinstance(params.update, v2.IdleStateUpdateSessionUpdate):
            if self.on_idle is not None:
                self.on_idle(params.session_id)
            self.idle.set()


@asynccontextmanager
async def v2_pair(agent: Any) -> AsyncIterator[tuple[Any, Any]]:
    holder: list[Any] = []
    async with testing.pair(agent, V2Client, protocol=2, tap=_tap(holder)) as p:  # initialized
        holder.append(p.client)
        assert p.agent_conn is not None
        yield p.agent_conn, p.client_conn


async def v2_prompt(client_conn: Any, sid: str, text: str) -> None:
    client = client_conn.handler
    client.idle = trio.Event()
    await client_conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=[v2.TextContentBlock(text=text)]))
    with trio.fail_after(5):
        await client.idle.wait()


def updates_of(lines: list[bytes]) -> list[dict[str, Any]]:
    return [orjson.loads(line)["params"]["update"] for line in lines]


async def test_v2_sessions_are_recorded_and_replay_through_resume_with_replay_from_start(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    with session_store.SqliteSessionStore(str(path), commit_interval=0.5) as store:
        seen_at_idle: list[Any] = []
        async with v2_pair(functools.partial(V2StoreAgent, store=store)) as (_, client_conn):
            assert client_conn.agent_capabilities["session"]["delete"] == {}
            client = client_conn.handler
            sid = (await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))).session_id
            assert committed(path, sid) == (0, 0)  # answered: stored
            client.on_idle = lambda s: seen_at_idle.append(committed(path, s))
            await v2_prompt(client_conn, sid, "stream 3 please")
            await v2_prompt(client_conn, sid, "stream 2")
            # the idle state_update ends a v2 turn: what came before it was committed when it was sent
            assert seen_at_idle == [(1, 4), (2, 7)]
            live = [u for u in updates_of(client.lines) if u["sessionUpdate"] != "state_update"]
        assert [u["sessionUpdate"] for u in live] == ["user_message"] + ["agent_message_chunk"] * 3 + [
            "user_message"
        ] + ["agent_message_chunk"] * 2

        async with v2_pair(functools.partial(V2StoreAgent, store=store)) as (_, client_conn):
            client = client_conn.handler
            listed = await client_conn.agent.session_list(v2.ListSessionsRequest())
            assert [(s.session_id, s.title) for s in listed.sessions] == [(sid, "stream 3 please")]
            await client_conn.agent.session_resume(
                v2.ResumeSessionRequest(session_id=sid, cwd="/work", replay_from=v2.StartReplayFrom())
            )
            # the conversation, then the current state, all before the answer
            assert updates_of(client.lines) == [*live, {"sessionUpdate": "state_update", "state": "idle"}]
            client.lines.clear()
            await client_conn.agent.session_resume(v2.ResumeSessionRequest(session_id=sid, cwd="/work"))
            assert updates_of(client.lines) == [{"sessionUpdate": "state_update", "state": "idle"}]
            conv = client_conn.connection.converter
            with pytest.raises(RequestError) as info:
                await client_conn.agent.session_resume(
                    conv.structure(
                        {"sessionId": sid, "cwd": "/work", "replayFrom": {"type": "_since", "id": "x"}},
                        v2.ResumeSessionRequest,
                    )
                )
            assert info.value.code == -32602
            client.lines.clear()
            await v2_prompt(client_conn, sid, "stream 1")  # recording goes on after the resume
            assert committed(path, sid) == (3, 9)

        # a v1 connection neither lists nor loads a v2 session
        async with pair(store) as (_, client_conn):
            assert (await client_conn.agent.session_list(v1.ListSessionsRequest())).sessions == []
            with pytest.raises(RequestError) as info:
                await client_conn.agent.session_load(load_request(sid))
            assert info.value.code == -32602 and info.value.data["protocolVersion"] == 2


V2_SCHEMA = """
CREATE TABLE sessions (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL UNIQUE, cwd TEXT NOT NULL,
    additional_directories TEXT NOT NULL DEFAULT '[]', mcp_servers TEXT NOT NULL DEFAULT '[]', title TEXT,
    title_source INTEGER NOT NULL DEFAULT 0, meta TEXT, modes TEXT, current_mode_id TEXT, config_options TEXT,
    created_us INTEGER NOT NULL, updated_us INTEGER NOT NULL, prompt_count INTEGER NOT NULL DEFAULT 0);
CREATE TABLE events (id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, data BLOB NOT NULL);
"""


async def test_a_version_2_file_is_migrated_and_its_sessions_are_version_1s(tmp_path: Path) -> None:
    path = tmp_path / "v2layout.db"
    db = sqlite3.connect(path)
    db.executescript(V2_SCHEMA)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 2")
    db.execute("INSERT INTO sessions (id, session_id, cwd, created_us, updated_us) VALUES (1, 's2', '/p', 1, 2)")
    db.execute("INSERT INTO events (id, kind, data) VALUES (?, 3, ?)", (1 << 32, b'"hello"\n'))
    db.commit()
    db.close()
    with session_store.SqliteSessionStore(str(path)) as store:
        stored = await store.get("s2")
        assert stored is not None and stored.protocol_version == 1
        async with pair(store) as (_, client_conn):
            client = client_conn.handler
            assert [
                s.session_id for s in (await client_conn.agent.session_list(v1.ListSessionsRequest())).sessions
            ] == ["s2"]
            await client.states.load(client_conn.agent, load_request("s2", "/p"))
            assert [m.text for m in client.states["s2"].messages] == ["hello"]
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA user_version").fetchone()[0] == session_store.SCHEMA_VERSION == 4
    check.close()


# -- the store itself --------------------------------------------------------------------------------


async def test_the_memory_store_runs_under_the_autojump_clock_without_threads(autojump_clock: Any) -> None:
    store = session_store.MemorySessionStore()
    assert store._writer._thread is None
    async with pair(store) as (_, client_conn):
        sid = await new_session(client_conn)
        await trio.sleep(3600)  # virtual time
        await client_conn.handler.prompt(sid, "stream 3")
        conversation = await store.conversation(sid)
    assert conversation is not None
    assert [kind for kind, _ in conversation.messages()] == ["prompt", "update", "update", "update"]
    assert conversation.messages()[1][1]["params"]["update"]["content"]["text"] == "chunk 0 "


async def test_a_failing_write_keeps_the_lines_for_the_next_one_and_flush_reports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acp_trio import _store_db

    store = session_store.SqliteSessionStore(str(tmp_path / "f.db"), durable=True)
    real_write = _store_db.Database.write
    failing = [True]

    def write(self: Any, batch: Any, *journal: Any) -> None:
        if failing[0]:
            raise sqlite3.OperationalError("disk I/O error (test)")
        real_write(self, batch, *journal)

    monkeypatch.setattr(_store_db.Database, "write", write)
    try:
        async with pair(store) as (_, client_conn):
            sid = await new_session(client_conn)
            await client_conn.handler.prompt(sid, "stream 5")
            with trio.fail_after(10), pytest.raises(session_store.StoreError, match="disk I/O error"):
                await store.flush()
            failing[0] = False
            with trio.fail_after(10):
                await store.flush()
            conversation = await store.conversation(sid)
        assert conversation is not None and len(conversation.events) == 6
        texts = [m["params"]["update"]["content"]["text"] for k, m in conversation.messages() if k == "update"]
        assert texts == [f"chunk {i} " for i in range(5)]
    finally:
        store.close()


async def test_list_reports_additional_directories_and_the_meta_of_session_info_updates() -> None:
    store = session_store.MemorySessionStore()
    async with pair(store) as (agent_conn, client_conn):
        client_conn.agent_capabilities["sessionCapabilities"]["additionalDirectories"] = {}
        sid = await new_session(client_conn, additional_directories=["/lib"])
        info = b.session_info(title="Tagged")
        info.meta = {"tags": ["a"]}
        await agent_conn.client.session_update(b.notification(sid, info))
        listed = (await client_conn.agent.session_list(v1.ListSessionsRequest(cwd="/work"))).sessions
    assert [(s.session_id, s.additional_directories, s.title, s.meta) for s in listed] == [
        (sid, ["/lib"], "Tagged", {"tags": ["a"]})
    ]


async def test_enable_after_the_connection_was_built() -> None:
    store = session_store.MemorySessionStore()

    class Later:
        def __init__(self, conn: AgentSideConnection) -> None:
            self.conn = conn

        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            return v1.NewSessionResponse(session_id="later_1")

    async with open_memory_pair(Later, StandardClient) as (agent_conn, client_conn):
        recorder = session_store.enable(agent_conn, store)
        await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
        assert client_conn.agent_capabilities["loadSession"] is True
        await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/w", mcp_servers=[]))
        assert recorder.recording == frozenset({"later_1"})
        await agent_conn.client.session_update(b.notification("later_1", b.agent_message("hi")))
        conversation = await store.conversation("later_1")
    assert conversation is not None and len(conversation.events) == 1


# -- a client that stops reading -------------------------------------------------------------------


class GatedStream(trio.abc.SendStream):
    """A send stream that stalls while ``open`` is not set (a client that stops reading its input);
    ``entered`` is set when a write starts waiting on the gate."""

    def __init__(self, inner: trio.abc.SendStream) -> None:
        self.inner = inner
        self.open = trio.Event()
        self.open.set()
        self.entered = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if not self.open.is_set():
            self.entered.set()
            await self.open.wait()
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.open.wait()

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def gated_pair(store: session_store.SessionStore) -> AsyncIterator[tuple[Any, Any, GatedStream, Any]]:
    """An initialized pair over ``store`` whose agent writes through a :class:`GatedStream`; also
    yields the client's send stream (closing it ends the agent's input)."""
    from trio.testing import memory_stream_one_way_pair

    to_client, from_agent = memory_stream_one_way_pair()
    to_agent, from_client = memory_stream_one_way_pair()
    gate = GatedStream(to_client)
    holder: list[Any] = []
    agent_conn = AgentSideConnection(functools.partial(StoreAgent, store=store), gate, from_client)
    client_conn = acp_trio.ClientSideConnection(Recorder, to_agent, from_agent, tap=_tap(holder))
    holder.append(client_conn.handler)
    async with client_conn, agent_conn:
        await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
        yield agent_conn, client_conn, gate, to_agent


@pytest.mark.parametrize("ending", ["aclose", "end of input", "session/close"])
async def test_lines_written_while_a_session_ends_are_stored(autojump_clock: Any, ending: str) -> None:
    # The client reads slowly: five updates are still being written when the session ends; meanwhile
    # another connection makes the store's writer run a round.  What the client got is stored.
    store = session_store.MemorySessionStore()
    async with pair(store) as (_, other_client), gated_pair(store) as (agent_conn, client_conn, gate, to_agent):
        sid = await new_session(client_conn)
        ended = trio.Event()
        agent_conn.sessions.on_end(lambda info: ended.set())
        gate.open = trio.Event()
        for i in range(5):
            await agent_conn.client.session_update(b.notification(sid, b.agent_message(f"chunk {i} ")))
        with trio.fail_after(1):
            await gate.entered.wait()  # the writer is inside send_all with the five records
        async with trio.open_nursery() as nursery:
            if ending == "aclose":
                nursery.start_soon(agent_conn.connection.aclose)
            elif ending == "end of input":
                await to_agent.aclose()
            else:
                close = functools.partial(client_conn.agent.session_close, v1.CloseSessionRequest(session_id=sid))
                nursery.start_soon(close)
            with trio.fail_after(1):
                await ended.wait()
            await new_session(other_client)  # a writer round while the lines are still unwritten
            gate.open.set()
        if ending != "session/close":  # the client reads up to the end of the agent's output
            with trio.fail_after(5):
                await agent_conn.connection.aclose()
                await client_conn.connection.wait_closed()
        received = [orjson.loads(line)["params"]["update"]["content"]["text"] for line in client_conn.handler.lines]
        conversation = await store.conversation(sid)
    assert received == [f"chunk {i} " for i in range(5)]
    assert conversation is not None
    texts = [m["params"]["update"]["content"]["text"] for k, m in conversation.messages() if k == "update"]
    assert texts == received


async def test_a_client_that_stops_reading_holds_up_no_other_connection(autojump_clock: Any) -> None:
    store = session_store.MemorySessionStore()
    async with gated_pair(store) as (a_agent, a_client, a_gate, _), pair(store) as (_, b_client):
        a_sid = await new_session(a_client)
        b_sid = await new_session(b_client)
        a_gate.open = trio.Event()  # A's client stops reading; its agent streams an update
        await a_agent.client.session_update(b.notification(a_sid, b.agent_message("unread")))
        with trio.fail_after(1):
            await a_gate.entered.wait()
        assert a_agent.connection.records_pending
        with trio.fail_after(0.1):  # B's requests do not wait for A's client at all
            listed = await b_client.agent.session_list(v1.ListSessionsRequest())
            await b_client.handler.states.load(b_client.agent, load_request(b_sid))
            await b_client.agent.session_resume(v1.ResumeSessionRequest(session_id=b_sid, cwd="/work"))
        assert {s.session_id for s in listed.sessions} == {a_sid, b_sid}
        with trio.fail_after(5):  # outside any connection: bounded (settle_timeout, 1 s)
            await store.flush()
        conversation = await store.conversation(a_sid)
        assert conversation is not None and conversation.events == []  # not written, not stored (yet)
        a_gate.open.set()
        with trio.fail_after(5):
            await store.flush()  # A's line is written now: it is kept
        conversation = await store.conversation(a_sid)
    assert conversation is not None
    assert [m["params"]["update"]["content"]["text"] for _, m in conversation.messages()] == ["unread"]

"""The version-neutral agent API with a session store (``Agent.store``; issue 33, design step 8).

A session is recorded in the canonical form (v2 updates, a ``Diff``'s v1 texts beside its update)
whichever version made it, so another agent object (another process) with the same store loads it
on v1 or resumes it on v2 (``replayFrom: {type: start}``) and the client ends with what it would
have had watching live (the same check as ``test_neutral_lifecycle``'s, through the store).  A store
file written by a v1 ``session_store.enable`` connection (the form before) still opens; its sessions
load on both versions and are migrated to the canonical form in place.  Acknowledged means stored:
another reader of the file sees what an answer acknowledged the moment it arrives.  The last test
runs the demo agent with ``--store`` in real processes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
from _neutral_kit import Client, connected
from test_neutral_lifecycle import Notes, live, summary

from acp_schema import v1, v2
from acp_trio import AgentSideConnection, RequestError, neutral, spawn_agent
from acp_trio._spec import UNSET
from acp_trio.session_store import MemorySessionStore, SessionStore, SqliteSessionStore, enable

COMBINATIONS = pytest.mark.parametrize(
    ("made_on", "loaded_on"),
    [(v2, v1), (v1, v2), (v1, v1), (v2, v2)],
    ids=["made-v2-loaded-v1", "made-v1-resumed-v2", "made-v1-loaded-v1", "made-v2-resumed-v2"],
)


def stored_agent(store: SessionStore) -> Notes:
    agent = Notes()
    agent.store = store
    return agent


async def load(agent: neutral.Agent, variant: ModuleType, session_id: str, cwd: str = "/work") -> tuple[Any, Any]:
    """Load (v1) or resume from the start (v2) ``session_id`` on a new connection to ``agent``: the
    client's summary of the session afterwards, and the answer."""
    client = Client(variant)
    async with connected(agent, client) as wire:
        if variant is v1:
            answer: Any = await wire.agent.session_load(
                v1.LoadSessionRequest(session_id=session_id, cwd=cwd, mcp_servers=[])
            )
        else:
            answer = await wire.agent.session_resume(
                v2.ResumeSessionRequest(session_id=session_id, cwd=cwd, replay_from=v2.StartReplayFrom())
            )
    state = client.states.state(session_id)
    state.apply_setup(answer)
    return summary(state), answer


@COMBINATIONS
async def test_a_stored_session_replays_in_another_agent_object_on_either_version_as_shown_live(
    made_on: ModuleType, loaded_on: ModuleType
) -> None:
    store = MemorySessionStore()
    async with connected(stored_agent(store), Client(made_on)) as first:
        session_id = await first.new_session()
        await first.prompt(session_id, "hi")
    later = stored_agent(store)  # holds nothing in memory: everything comes from the store
    shown, answer = await load(later, loaded_on, session_id)
    assert shown == await live(loaded_on)
    assert later.calls == [f"resume {session_id} v{loaded_on.PROTOCOL_VERSION}"]
    assert [o.current_value for o in answer.config_options] == ["code"]  # the value the turn set
    stored = await store.get(session_id)
    assert stored is not None and stored.protocol_version == 2 and stored.title == "Notes"


@pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])
async def test_list_close_and_delete_serve_the_stored_sessions_of_both_versions(variant: ModuleType) -> None:
    store = MemorySessionStore(page_size=1)
    made: list[str] = []
    for maker in (v1, v2):
        async with connected(stored_agent(store), Client(maker)) as wire:
            made.append(await wire.new_session())
            await wire.prompt(made[-1], "hi")
    agent = stored_agent(store)
    async with connected(agent, Client(variant)) as wire:
        first = await wire.agent.session_list(variant.ListSessionsRequest())
        second = await wire.agent.session_list(variant.ListSessionsRequest(cursor=first.next_cursor))
        with pytest.raises(RequestError) as bad_cursor:
            await wire.agent.session_list(variant.ListSessionsRequest(cursor="x"))
        await wire.agent.session_close(variant.CloseSessionRequest(session_id=made[0]))  # stored, not open here
        with pytest.raises(RequestError) as unknown:
            await wire.agent.session_close(variant.CloseSessionRequest(session_id="sess_nope"))
        await wire.agent.session_delete(variant.DeleteSessionRequest(session_id=made[1]))
        after = await wire.agent.session_list(variant.ListSessionsRequest())
    assert [s.session_id for s in first.sessions + second.sessions] == [made[1], made[0]]  # most recent first
    assert first.sessions[0].title == "Notes" and second.next_cursor in (None, UNSET)
    assert bad_cursor.value.code == -32602 and unknown.value.code == -32002
    assert [s.session_id for s in after.sessions] == [made[0]]
    assert await store.get(made[1]) is None


async def test_a_store_file_of_a_v1_recording_connection_loads_on_both_versions_migrated_in_place(
    tmp_path: Path,
) -> None:
    """The form before: a v1 connection with ``session_store.enable`` kept v1 wire lines."""
    path = str(tmp_path / "sessions.db")
    old = Notes()

    def recording(conn: AgentSideConnection) -> Any:
        enable(conn, store)
        return neutral.handlers(old, (1,))[v1](conn)

    store = SqliteSessionStore(path)
    try:
        async with connected({v1: recording}, Client(v1)) as wire:
            session_id = await wire.new_session()
            await wire.prompt(session_id, "hi")
        await store.flush()
        before = await store.get(session_id)
    finally:
        store.close()
    assert before is not None and before.protocol_version == 1

    store = SqliteSessionStore(path)  # a later process, with the neutral store
    try:
        shown_v1, _ = await load(stored_agent(store), v1, session_id)
        migrated = await store.get(session_id)
        shown_v2, _ = await load(stored_agent(store), v2, session_id)  # from the migrated record
        again_v1, _ = await load(stored_agent(store), v1, session_id)
    finally:
        store.close()
    expected_v1, expected_v2 = await live(v1), await live(v2)
    assert shown_v1 == expected_v1 == again_v1
    assert migrated is not None and migrated.protocol_version == 2
    # v1 showed the terminal as text and had one plan: what v2 gets back is that, the rest exact
    for key in ("messages", "plan", "title", "options"):
        assert shown_v2[key] == expected_v2[key], key
    assert [t[:3] for t in shown_v2["tools"]] == [t[:3] for t in expected_v2["tools"]]
    assert shown_v2["tools"][0] == expected_v2["tools"][0]  # the diff, exact


@pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])
async def test_acknowledged_means_stored_another_reader_sees_what_each_answer_acknowledged(
    variant: ModuleType, tmp_path: Path
) -> None:
    path = str(tmp_path / "sessions.db")
    store = SqliteSessionStore(path, commit_interval=30.0)  # nothing is committed but what answers wait for
    reader = SqliteSessionStore(path)
    try:
        async with connected(stored_agent(store), Client(variant)) as wire:
            session_id = await wire.new_session()
            assert await reader.get(session_id) is not None
            await wire.prompt(session_id, "hi")  # v1: the answer; v2: the receipt, then idle
            found = await reader.conversation(session_id)
    finally:
        store.close()
        reader.close()
    assert found is not None
    updates = [m["params"]["update"] for kind, m in found.messages() if kind == "update"]
    assert updates[0]["sessionUpdate"] == "user_message"
    assert updates[-1]["sessionUpdate"] == "agent_message_chunk" and updates[-1]["content"]["text"] == "Done."


# -- the demo agent with --store, in real processes --------------------------------------------------
@pytest.mark.one_interpreter  # three agent processes; the layer's logic, not Python's
@pytest.mark.skipif(sys.platform == "win32", reason="the stdio transport is POSIX-only")
async def test_the_demo_agent_with_a_store_resumes_a_session_of_either_version_in_another_process(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("alpha beta\ngamma\n", encoding="utf-8")
    store = str(tmp_path / "sessions.db")
    command = [sys.executable, "-m", "acp_trio.demo", "--serve-agent", "--store", store]
    cwd = str(tmp_path)

    async def run(variant: ModuleType, body: Any) -> Any:
        client = Client(variant)
        env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        async with spawn_agent(command[0], command[1:], client={variant: client}, env=env, cwd=cwd) as conn:
            if variant is v1:
                await conn.initialize(v1.InitializeRequest(protocol_version=1))
            else:
                info = v2.Implementation(name="test", version="1")
                await conn.initialize(v2.InitializeRequest(protocol_version=2, info=info))
            return await body(conn, client)

    async def make(conn: Any, client: Client) -> str:
        m = client.variant
        new = await conn.agent.session_new(
            v1.NewSessionRequest(cwd=cwd, mcp_servers=[]) if m is v1 else v2.NewSessionRequest(cwd=cwd)
        )
        client.idle = trio.Event()
        await conn.agent.session_prompt(
            m.PromptRequest(session_id=new.session_id, prompt=[m.TextContentBlock(text="go")])
        )
        if m is v2:
            await client.idle.wait()
        session_id: str = new.session_id
        return session_id

    def reload(session_id: str) -> Any:
        async def body(conn: Any, client: Client) -> Any:
            if client.variant is v1:
                await conn.agent.session_load(v1.LoadSessionRequest(session_id=session_id, cwd=cwd, mcp_servers=[]))
            else:
                request = v2.ResumeSessionRequest(session_id=session_id, cwd=cwd, replay_from=v2.StartReplayFrom())
                await conn.agent.session_resume(request)
            listed = await conn.agent.session_list(client.variant.ListSessionsRequest())
            state = client.states.state(session_id)
            return [(m.role, m.text) for m in state.messages], [s.session_id for s in listed.sessions]

        return body

    with trio.fail_after(60):
        made_v2 = await run(v2, make)
        made_v1 = await run(v1, make)
        on_v1, listed = await run(v1, reload(made_v2))
        on_v2, _ = await run(v2, reload(made_v1))
    assert listed == [made_v1, made_v2]
    for messages in (on_v1, on_v2):
        assert messages[0] == ("user", "go")
        assert messages[-1][0] == "agent" and "Done: summary.txt says" in messages[-1][1]

"""Folding the ``session/update`` stream into live session state, and replaying ``session/load``.

Spec: ``docs/protocol/v1/prompt-turn.mdx`` (Agent Reports Output, Message IDs),
``tool-calls.mdx``, ``agent-plan.mdx``, ``session-modes.mdx``, ``session-config-options.mdx``,
``slash-commands.mdx``, ``session-list.mdx`` (session_info_update), ``session-setup.mdx``
(Loading Sessions), ``draft/prompt-turn.mdx`` (notices, compaction, usage).  Wire examples are
the spec's own where it has one.
"""

from __future__ import annotations

import logging
import typing
from typing import Any

import pytest
import trio

import acp_trio
from acp_schema import v1, v1_unstable
from acp_trio import converter
from acp_trio.session_state import (
    CompactionEntry,
    MessageEntry,
    SessionInfoState,
    SessionState,
    SessionStates,
    ToolCallEntry,
)

DEADLINE = 30

# One wire example of every v1 SessionUpdate variant (and an unknown one), as a live stream.
WIRE: list[dict[str, Any]] = [
    {"sessionUpdate": "user_message_chunk", "messageId": "u1", "content": {"type": "text", "text": "What's the"}},
    {"sessionUpdate": "user_message_chunk", "messageId": "u1", "content": {"type": "text", "text": " capital?"}},
    {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "Geography."}},
    {"sessionUpdate": "agent_message_chunk", "messageId": "a1", "content": {"type": "text", "text": "Let me check"}},
    {
        "sessionUpdate": "tool_call",
        "toolCallId": "call_001",
        "title": "Reading configuration file",
        "kind": "read",
        "status": "pending",
        "rawInput": {"path": "/p/config.json"},
    },
    {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call_001",
        "status": "in_progress",
        "content": [{"type": "content", "content": {"type": "text", "text": "Found 3 configuration files..."}}],
    },
    {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call_001",
        "status": "completed",
        "locations": [{"path": "/p/config.json", "line": 42}],
        "rawOutput": {"ok": True},
    },
    {"sessionUpdate": "agent_message_chunk", "messageId": "a2", "content": {"type": "text", "text": "Paris."}},
    {"sessionUpdate": "plan", "entries": [{"content": "Answer", "priority": "high", "status": "completed"}]},
    {
        "sessionUpdate": "available_commands_update",
        "availableCommands": [{"name": "web", "description": "Search the web", "input": {"hint": "query"}}],
    },
    {"sessionUpdate": "current_mode_update", "currentModeId": "code"},
    {
        "sessionUpdate": "config_option_update",
        "configOptions": [
            {
                "id": "mode",
                "name": "Session Mode",
                "type": "select",
                "currentValue": "code",
                "options": [{"value": "ask", "name": "Ask"}, {"value": "code", "name": "Code"}],
            }
        ],
    },
    {"sessionUpdate": "session_info_update", "title": "Capitals", "_meta": {"tags": ["geo"]}},
    {"sessionUpdate": "usage_update", "used": 53000, "size": 200000, "cost": {"amount": 0.045, "currency": "USD"}},
    {"sessionUpdate": "notice", "severity": "warning", "title": "MCP server unavailable"},
    {"sessionUpdate": "compaction_update", "compactionId": "cmp_001", "status": "in_progress"},
    {
        "sessionUpdate": "compaction_summary_chunk",
        "compactionId": "cmp_001",
        "content": {"type": "text", "text": "Q: "},
    },
    {
        "sessionUpdate": "compaction_summary_chunk",
        "compactionId": "cmp_001",
        "content": {"type": "text", "text": "Paris"},
    },
    {"sessionUpdate": "compaction_update", "compactionId": "cmp_001", "status": "completed"},
    {"sessionUpdate": "_acme_future", "payload": [1, 2]},
]


def notification(update: dict[str, Any], session_id: str = "s1") -> v1.SessionNotification:
    result: v1.SessionNotification = converter.structure(
        {"sessionId": session_id, "update": update}, v1.SessionNotification
    )
    return result


def text(value: str) -> v1.TextContentBlock:
    return v1.TextContentBlock(text=value)


def agent_chunk(value: str, message_id: str | None = None) -> v1.AgentMessageChunkSessionUpdate:
    chunk = v1.AgentMessageChunkSessionUpdate(content=text(value))
    if message_id is not None:
        chunk.message_id = message_id
    return chunk


def user_chunk(value: str, message_id: str | None = None) -> v1.UserMessageChunkSessionUpdate:
    chunk = v1.UserMessageChunkSessionUpdate(content=text(value))
    if message_id is not None:
        chunk.message_id = message_id
    return chunk


def summary(state: SessionState) -> list[tuple[str, ...]]:
    """The transcript as (kind, ...) tuples: messages with their text, tool calls with their status."""
    out: list[tuple[str, ...]] = []
    for entry in state.transcript:
        if isinstance(entry, MessageEntry):
            out.append((entry.role, entry.text))
        elif isinstance(entry, ToolCallEntry):
            out.append(("tool", entry.tool_call_id, entry.status))
        else:
            out.append(("compaction", entry.compaction_id, entry.status or ""))
    return out


# -- every variant, from the wire ----------------------------------------------------------------


def test_the_wire_examples_cover_every_v1_update_variant() -> None:
    # a new variant in a regenerated schema must get a fold (or a deliberate decision) here
    classes = {type(notification(update).update) for update in WIRE}
    assert classes == set(typing.get_args(v1.SessionUpdate))


def test_a_wire_stream_of_every_variant_folds_into_the_live_state() -> None:
    state = SessionState()
    for update in WIRE:
        state.apply(notification(update))

    assert state.session_id == "s1"  # adopted from the first notification
    assert state.update_count == len(WIRE)
    assert summary(state) == [
        ("user", "What's the capital?"),
        ("thought", "Geography."),
        ("agent", "Let me check"),
        ("tool", "call_001", "completed"),
        ("agent", "Paris."),
        ("compaction", "cmp_001", "completed"),
    ]
    assert [m.message_id for m in state.messages] == ["u1", None, "a1", "a2"]
    assert state.messages[0].content == [text("What's the"), text(" capital?")]

    call = state.tool_calls["call_001"]
    assert call == ToolCallEntry(
        "call_001",
        title="Reading configuration file",
        kind="read",
        status="completed",
        content=[v1.ContentToolCallContent(content=text("Found 3 configuration files..."))],
        locations=[v1.ToolCallLocation(path="/p/config.json", line=42)],
        raw_input={"path": "/p/config.json"},
        raw_output={"ok": True},
        announced=True,
    )
    assert call.finished and state.tool_kind("call_001") == "read" and state.tool_kind("nope") is None

    assert state.plan is not None
    assert [(e.content, e.priority, e.status) for e in state.plan.entries] == [("Answer", "high", "completed")]
    assert [c.name for c in state.available_commands] == ["web"]
    assert state.current_mode_id == "code"
    assert converter.unstructure(state.config_options) == [WIRE[11]["configOptions"][0]]
    assert state.session_info == SessionInfoState(title="Capitals", updated_at=None, meta={"tags": ["geo"]})
    assert state.usage is not None and (state.usage.used, state.usage.size) == (53000, 200000)
    assert state.usage.cost == v1.Cost(amount=0.045, currency="USD")
    assert [(n.severity, n.title) for n in state.notices] == [("warning", "MCP server unavailable")]
    assert state.compactions["cmp_001"].text == "Q: Paris"

    # the unknown variant is kept verbatim: it encodes back to exactly what arrived
    assert [converter.unstructure(u) for u in state.unknown] == [WIRE[-1]]
    assert isinstance(state.unknown[0], v1.SessionUpdateOther)


def test_updates_built_with_the_generated_classes_fold_the_same_way() -> None:
    state = SessionState("s1")
    state.apply(v1.UserMessageChunkSessionUpdate(content=text("hi")))
    state.apply(v1.AgentThoughtChunkSessionUpdate(content=text("hm")))
    state.apply(v1.ToolCallSessionUpdate(tool_call_id="t", title="grep", kind="search"))
    state.apply(v1.ToolCallUpdateSessionUpdate(tool_call_id="t", status="failed"))
    state.apply(v1.PlanSessionUpdate(entries=[v1.PlanEntry(content="a", priority="low", status="pending")]))
    state.apply(v1.CurrentModeUpdateSessionUpdate(current_mode_id="ask"))
    state.apply(v1.AvailableCommandsUpdateSessionUpdate(available_commands=[]))
    state.apply(v1.UsageUpdateSessionUpdate(used=1, size=10))
    state.apply(v1.SessionInfoUpdateSessionUpdate(updated_at="2025-01-01T00:00:00Z"))
    state.apply(v1.NoticeSessionUpdate(severity="info", title="fyi"))
    assert summary(state) == [("user", "hi"), ("thought", "hm"), ("tool", "t", "failed")]
    assert state.tool_calls["t"].kind == "search" and state.tool_calls["t"].title == "grep"
    assert state.plan is not None and state.plan.entries[0].content == "a"
    assert state.current_mode_id == "ask" and state.available_commands == []
    assert state.usage == v1.UsageUpdateSessionUpdate(used=1, size=10)
    assert state.session_info.updated_at == "2025-01-01T00:00:00Z"
    assert len(state.notices) == 1 and state.unknown == [] and state.update_count == 10


# -- messages ------------------------------------------------------------------------------------


def test_consecutive_chunks_of_one_role_merge_and_another_role_or_entry_starts_a_new_message() -> None:
    state = SessionState.replay(
        [
            agent_chunk("Hel"),
            agent_chunk("lo"),
            v1.PlanSessionUpdate(entries=[]),  # not a transcript entry: the message goes on
            agent_chunk("!"),
            v1.AgentThoughtChunkSessionUpdate(content=text("think")),
            agent_chunk("More"),
            v1.ToolCallSessionUpdate(tool_call_id="t", title="x"),
            v1.ToolCallUpdateSessionUpdate(tool_call_id="t", status="completed"),
            agent_chunk("After"),
        ]
    )
    assert summary(state) == [
        ("agent", "Hello!"),
        ("thought", "think"),
        ("agent", "More"),
        ("tool", "t", "completed"),
        ("agent", "After"),
    ]


def test_message_ids_split_join_and_are_adopted() -> None:
    state = SessionState.replay(
        [
            agent_chunk("a", "m1"),
            agent_chunk("b"),  # no id: joins the open message
            agent_chunk("c", "m2"),  # a different id: a new message
            agent_chunk("d", "m2"),
            v1.ToolCallSessionUpdate(tool_call_id="t", title="x"),
            agent_chunk("e", "m1"),  # an earlier message's id: joins that message, where it is
            agent_chunk("f"),  # nothing open: a new message
            agent_chunk("g", "m3"),  # the open message had no id: it adopts m3
            agent_chunk("h", "m3"),
        ]
    )
    assert [(m.message_id, m.text) for m in state.messages] == [("m1", "abe"), ("m2", "cd"), ("m3", "fgh")]


def test_the_same_message_id_in_another_role_is_another_message() -> None:
    state = SessionState.replay([user_chunk("q", "x"), agent_chunk("a", "x"), user_chunk("q2", "x")])
    assert [(m.role, m.text) for m in state.messages] == [("user", "qq2"), ("agent", "a")]


def test_message_text_concatenates_text_blocks_and_content_keeps_every_block() -> None:
    image = v1.ImageContentBlock(data="AAAA", mime_type="image/png")
    link = v1.ResourceLinkContentBlock(uri="file:///a.txt", name="a.txt")
    state = SessionState.replay(
        [
            agent_chunk("see "),
            v1.AgentMessageChunkSessionUpdate(content=image),
            agent_chunk("and"),
            v1.AgentMessageChunkSessionUpdate(content=link),
        ]
    )
    [message] = state.messages
    assert message.text == "see and"
    assert message.content == [text("see "), image, text("and"), link]


def test_a_user_message_the_client_records_is_its_own_entry() -> None:
    state = SessionState("s1")
    recorded = state.add_user_message([text("hello")])
    state.apply(user_chunk(" echoed"))
    assert summary(state) == [("user", "hello"), ("user", " echoed")]
    assert recorded is state.messages[0]


# -- tool calls ----------------------------------------------------------------------------------


def test_a_tool_call_update_changes_only_the_fields_it_sets() -> None:
    state = SessionState("s1")
    state.apply(
        v1.ToolCallSessionUpdate(
            tool_call_id="t",
            title="Edit",
            name="edit_file",
            kind="edit",
            content=[v1.DiffToolCallContent(path="/a", new_text="x")],
            locations=[v1.ToolCallLocation(path="/a")],
            raw_input={"p": 1},
            meta={"k": 1},
        )
    )
    before = state.tool_calls["t"]
    assert (before.status, before.name) == ("pending", "edit_file")  # status defaults to pending
    # null and absent fields leave the entry unchanged
    state.apply(
        notification(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "t",
                "title": None,
                "kind": None,
                "content": None,
                "locations": None,
                "name": None,
                "rawInput": None,
            }
        ).update
    )
    assert state.tool_calls["t"] == ToolCallEntry(
        "t",
        title="Edit",
        name="edit_file",
        kind="edit",
        content=[v1.DiffToolCallContent(path="/a", new_text="x")],
        locations=[v1.ToolCallLocation(path="/a")],
        raw_input={"p": 1},
        meta={"k": 1},
        announced=True,
    )
    state.apply(v1.ToolCallUpdateSessionUpdate(tool_call_id="t", title="Edited", content=[], meta={"k": 2}))
    entry = state.tool_calls["t"]
    assert (entry.title, entry.content, entry.meta, entry.kind) == ("Edited", [], {"k": 2}, "edit")
    assert entry.locations == [v1.ToolCallLocation(path="/a")]  # replaced only when sent
    assert entry is before  # updated in place
    state.apply(
        v1.ToolCallUpdateSessionUpdate(
            tool_call_id="t",
            name="write_file",
            locations=[v1.ToolCallLocation(path="/b", line=3)],
            raw_input={"p": 2},
            raw_output="done",
        )
    )
    assert (entry.name, entry.locations, entry.raw_input, entry.raw_output) == (
        "write_file",
        [v1.ToolCallLocation(path="/b", line=3)],
        {"p": 2},
        "done",
    )
    assert (entry.title, entry.meta) == ("Edited", {"k": 2})


def test_an_update_for_an_unknown_tool_call_creates_it() -> None:
    state = SessionState("s1")
    state.apply(v1.ToolCallUpdateSessionUpdate(tool_call_id="late", status="in_progress", kind="fetch"))
    entry = state.tool_calls["late"]
    assert (entry.title, entry.kind, entry.status, entry.announced) == ("", "fetch", "in_progress", False)
    assert state.transcript == [entry]
    # its tool_call arriving afterwards fills it in, in place
    state.apply(v1.ToolCallSessionUpdate(tool_call_id="late", title="Fetch", status="completed"))
    assert state.transcript == [entry] and entry.announced and entry.title == "Fetch"
    assert entry.kind == "other"  # a tool_call replaces every field: kind defaults to other


def test_cancel_unfinished_tool_calls_marks_them_and_later_updates_still_apply() -> None:
    state = SessionState.replay(
        [
            v1.ToolCallSessionUpdate(tool_call_id="done", title="a", status="completed"),
            v1.ToolCallSessionUpdate(tool_call_id="running", title="b", status="in_progress"),
            v1.ToolCallSessionUpdate(tool_call_id="waiting", title="c"),
        ]
    )
    marked = state.cancel_unfinished_tool_calls()
    assert [e.tool_call_id for e in marked] == ["running", "waiting"]
    assert [e.cancelled for e in state.tool_calls.values()] == [False, True, True]
    assert state.cancel_unfinished_tool_calls() == []
    state.apply(v1.ToolCallUpdateSessionUpdate(tool_call_id="running", status="failed"))
    assert state.tool_calls["running"].status == "failed"


# -- patches, compaction, unknown ---------------------------------------------------------------


def test_session_info_update_patches_absent_fields_keep_and_null_clears() -> None:
    state = SessionState("s1")
    state.apply(v1.SessionInfoUpdateSessionUpdate(title="T", updated_at="2025-01-01T00:00:00Z", meta={"a": 1}))
    state.apply(v1.SessionInfoUpdateSessionUpdate(meta={"b": 2}))
    assert state.session_info == SessionInfoState("T", "2025-01-01T00:00:00Z", {"b": 2})
    state.apply(notification({"sessionUpdate": "session_info_update", "title": None}).update)
    assert state.session_info == SessionInfoState(None, "2025-01-01T00:00:00Z", {"b": 2})


def test_compaction_patches_and_summary_chunks() -> None:
    state = SessionState("s1")
    state.apply(agent_chunk("before"))
    state.apply(v1.CompactionUpdateSessionUpdate(compaction_id="c", status="in_progress", meta={"x": 1}))
    state.apply(agent_chunk("between"))
    state.apply(v1.CompactionSummaryChunkSessionUpdate(compaction_id="c", content=text("one ")))
    state.apply(v1.CompactionSummaryChunkSessionUpdate(compaction_id="c", content=text("two")))
    assert state.compactions["c"].text == "one two"
    state.apply(v1.CompactionUpdateSessionUpdate(compaction_id="c", status="_vendor_state", summary=[text("new")]))
    assert state.compactions["c"] == CompactionEntry("c", "_vendor_state", [text("new")], None, {"x": 1})
    state.apply(
        notification(
            {
                "sessionUpdate": "compaction_update",
                "compactionId": "c",
                "status": "failed",
                "summary": None,
                "error": "quota",
                "_meta": None,
            }
        ).update
    )
    assert state.compactions["c"] == CompactionEntry("c", "failed", [], "quota", None)
    # its first update fixed its position; a chunk for an unknown compaction creates one
    state.apply(v1.CompactionSummaryChunkSessionUpdate(compaction_id="d", content=text("x")))
    assert summary(state) == [
        ("agent", "before"),
        ("compaction", "c", "failed"),
        ("agent", "between"),
        ("compaction", "d", ""),
    ]


def test_unknown_variants_are_kept_verbatim_in_order() -> None:
    foreign = v1_unstable.PlanRemovedSessionUpdate(plan_id="p")  # a class of another schema variant
    state = SessionState("s1")
    state.apply(notification({"sessionUpdate": "_acme/one", "a": 1}))
    state.apply(agent_chunk("hi"))
    state.apply(notification({"sessionUpdate": "brand_new", "b": {"c": [None]}}))
    state.apply(foreign)  # type: ignore[arg-type]
    assert [converter.unstructure(u) for u in state.unknown[:2]] == [
        {"sessionUpdate": "_acme/one", "a": 1},
        {"sessionUpdate": "brand_new", "b": {"c": [None]}},
    ]
    assert state.unknown[2] is foreign and len(state.unknown) == 3
    assert summary(state) == [("agent", "hi")]
    assert state.update_count == 4


def test_bad_input_raises_a_clear_error_and_changes_nothing() -> None:
    state = SessionState("s1")
    with pytest.raises(ValueError, match="session 's2' cannot be applied to the state of session 's1'"):
        state.apply(v1.SessionNotification(session_id="s2", update=agent_chunk("x")))
    with pytest.raises(TypeError, match="got dict"):
        state.apply({"sessionUpdate": "agent_message_chunk"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got int"):
        state.apply(3)  # type: ignore[arg-type]
    assert state.update_count == 0 and state.transcript == [] and state.unknown == []


def test_apply_setup_takes_modes_and_config_options() -> None:
    state = SessionState("s1")
    state.apply(v1.CurrentModeUpdateSessionUpdate(current_mode_id="old"))
    modes = v1.SessionModeState(
        current_mode_id="ask",
        available_modes=[v1.SessionMode(id="ask", name="Ask"), v1.SessionMode(id="code", name="Code")],
    )
    option: Any = converter.structure(WIRE[11]["configOptions"][0], v1.SelectSessionConfigOption)
    state.apply_setup(v1.NewSessionResponse(session_id="s1", modes=modes, config_options=[option]))
    assert state.current_mode_id == "ask"
    assert [m.id for m in state.available_modes] == ["ask", "code"]
    assert state.config_options == [option]
    state.apply_setup(v1.LoadSessionResponse())  # nothing in it: nothing changes
    assert state.current_mode_id == "ask" and state.config_options == [option]
    assert "SessionState('s1'" in repr(state)


# -- SessionStates as a client handler -----------------------------------------------------------


class StreamingAgent:
    """Streams ``self.turn`` (wire updates) during each prompt, and replays ``history`` on session/load."""

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.turn: list[dict[str, Any]] = WIRE
        self.history: list[dict[str, Any]] = []

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s1")

    async def _stream(self, session_id: str, updates: list[dict[str, Any]]) -> None:
        for update in updates:
            await self.conn.client.session_update(notification(update, session_id))

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        await self._stream(params.session_id, self.turn)
        return v1.PromptResponse(stop_reason="end_turn")

    async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
        if params.session_id == "missing":
            raise acp_trio.RequestError(acp_trio.RESOURCE_NOT_FOUND, "no such session")
        await self._stream(params.session_id, self.history)
        modes = v1.SessionModeState(current_mode_id="code", available_modes=[v1.SessionMode(id="code", name="Code")])
        return v1.LoadSessionResponse(modes=modes)


async def prompt(client_conn: acp_trio.ClientSideConnection, session_id: str) -> None:
    await client_conn.agent.session_prompt(v1.PromptRequest(session_id=session_id, prompt=[text("go")]))


async def test_session_states_fold_each_sessions_stream_over_a_connection() -> None:
    seen: list[tuple[str | None, str]] = []

    async def on_update(state: SessionState, update: Any) -> None:
        await trio.sleep(0)
        seen.append((state.session_id, update.session_update))

    states = SessionStates(on_update)
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(StreamingAgent, states) as (_agent_conn, client_conn):
            await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
            await prompt(client_conn, "s1")
            await prompt(client_conn, "s2")
            # the prompt's response arrives after its updates were folded in
            assert sorted(states) == ["s1", "s2"] and len(states) == 2
    reference = SessionState.replay([notification(u) for u in WIRE])
    for session_id in ("s1", "s2"):
        state = states[session_id]
        assert summary(state) == summary(reference)
        assert state.tool_calls == reference.tool_calls
        assert state.session_info == reference.session_info and state.update_count == len(WIRE)
    assert seen == [(sid, u["sessionUpdate"]) for sid in ("s1", "s2") for u in WIRE]
    assert states.tool_kind("s1", "call_001") == "read"
    assert states.tool_kind("s1", "nope") is None and states.tool_kind("s9", "call_001") is None
    states.discard("s2")
    states.discard("s2")
    assert list(states) == ["s1"] and "s1" in repr(states)
    with pytest.raises(KeyError):
        states["s2"]


async def test_an_on_update_callback_that_raises_is_logged_and_the_state_still_updated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    def broken(state: SessionState, update: Any) -> None:
        calls.append(update.content.text)
        if update.content.text == "x":
            raise RuntimeError("ui gone")

    states = SessionStates(broken)
    with caplog.at_level(logging.ERROR, logger="acp_trio.session_state"):
        await states.session_update(v1.SessionNotification(session_id="s1", update=agent_chunk("x")))
        await states.session_update(v1.SessionNotification(session_id="s1", update=agent_chunk("y")))
    assert states["s1"].messages[0].text == "xy"
    assert calls == ["x", "y"]
    assert sum("on_update callback" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(TypeError, match="on_update must be callable"):
        SessionStates(on_update=5)  # type: ignore[arg-type]


async def test_session_load_replay_rebuilds_the_state_before_the_load_returns() -> None:
    history: list[dict[str, Any]] = [
        {
            "sessionUpdate": "user_message_chunk",
            "messageId": "msg_user_8f7a1",
            "content": {"type": "text", "text": "What's the capital of France?"},
        },
        {
            "sessionUpdate": "agent_message_chunk",
            "messageId": "msg_agent_c42b9",
            "content": {"type": "text", "text": "The capital of France is Paris."},
        },
        {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Look up", "kind": "search", "status": "completed"},
        {"sessionUpdate": "current_mode_update", "currentModeId": "ask"},
    ]

    def make_agent(conn: acp_trio.AgentSideConnection) -> StreamingAgent:
        agent = StreamingAgent(conn)
        agent.history = history
        return agent

    states = SessionStates()
    stale = states.state("sess_789xyz")
    stale.apply(agent_chunk("stale"))
    request = v1.LoadSessionRequest(session_id="sess_789xyz", cwd="/home/user/project", mcp_servers=[])
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(make_agent, states) as (_agent_conn, client_conn):
            await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
            response = await states.load(client_conn.agent, request, timeout=10)
            state = states["sess_789xyz"]
            assert state is not stale  # reset: the replay is not appended to an old transcript
            assert summary(state) == [
                ("user", "What's the capital of France?"),
                ("agent", "The capital of France is Paris."),
                ("tool", "c1", "completed"),
            ]
            assert [m.message_id for m in state.messages] == ["msg_user_8f7a1", "msg_agent_c42b9"]
            # the response's modes are the current ones: applied after the replay
            assert response.modes and state.current_mode_id == "code"
            assert [m.id for m in state.available_modes] == ["code"]

            # a session the agent cannot load: the error reaches the caller
            with pytest.raises(acp_trio.RequestError) as excinfo:
                await states.load(
                    client_conn.agent, v1.LoadSessionRequest(session_id="missing", cwd="/", mcp_servers=[])
                )
            assert excinfo.value.code == acp_trio.RESOURCE_NOT_FOUND
            assert states["missing"].transcript == []


async def test_session_state_and_the_broker_can_share_one_client() -> None:
    # the documented composition: assign the handlers as attributes of the client object
    from acp_trio.permissions import PermissionBroker, allow_all

    states = SessionStates()
    broker = PermissionBroker(allow_all())

    class Client:
        def __init__(self) -> None:
            self.session_update = states.session_update
            self.session_request_permission = broker.session_request_permission

    class Agent(StreamingAgent):
        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            await self._stream(params.session_id, [WIRE[4]])
            response = await self.conn.client.session_request_permission(
                v1.RequestPermissionRequest(
                    session_id=params.session_id,
                    tool_call=v1.ToolCallUpdate(tool_call_id="call_001"),
                    options=[v1.PermissionOption(option_id="ok", name="OK", kind="allow_once")],
                )
            )
            assert response.outcome == v1.SelectedRequestPermissionOutcome(option_id="ok")
            await self._stream(params.session_id, [WIRE[6]])
            return v1.PromptResponse(stop_reason="end_turn")

    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client()) as (_agent_conn, client_conn):
            await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
            await prompt(client_conn, "s1")
    assert states["s1"].tool_calls["call_001"].status == "completed"

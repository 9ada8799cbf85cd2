"""Folding v2 (and v2_unstable) ``session/update`` streams into live session state with the upsert rules.

Spec: ``docs/protocol/v2/migration.mdx`` (Updates are upserts; the ``session/update`` variant
table; Messages and message IDs; Tool calls; Agent-owned terminal display; Plans; Session setup),
``v2/prompt-lifecycle.mdx`` (Message IDs, Report Completion, Session States, Cancellation),
``v2/tool-calls.mdx``, ``v2/agent-plan.mdx``, ``v2/session-setup.mdx`` (``replayFrom``);
``schema/v2/schema.json`` (``ToolCallUpdate`` resets, ``_meta`` key patches, ``StateUpdate``,
``UsageUpdate.cost``).  Wire examples are the spec's own where it has one.
"""

from __future__ import annotations

import base64
import logging
import typing
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import acp_trio
from acp_schema import v1, v2, v2_unstable
from acp_trio import converter
from acp_trio.session_state import (
    CompactionEntry,
    MessageEntry,
    SessionInfoState,
    SessionMessageEntry,
    SessionState,
    SessionStates,
    SubagentEntry,
    TerminalEntry,
    ToolCallEntry,
)
from acp_trio.upsert import patch_fields

DEADLINE = 30


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def text_wire(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


CONFIG_OPTION: dict[str, Any] = {
    "configId": "mode",
    "name": "Session Mode",
    "category": "mode",
    "type": "select",
    "currentValue": "code",
    "options": [{"value": "ask", "name": "Ask"}, {"value": "code", "name": "Code"}],
}
COMMAND: dict[str, Any] = {
    "type": "command",
    "name": "web",
    "description": "Search the web",
    "input": {"type": "text", "hint": "query"},
}

# One live v2 turn that uses every v2 SessionUpdate variant (and an unknown one).
LIVE: list[dict[str, Any]] = [
    {"sessionUpdate": "user_message", "messageId": "u1", "content": [text_wire("What's the capital?")]},
    {"sessionUpdate": "state_update", "state": "_acme_warming_up", "progress": 0.5},
    {"sessionUpdate": "state_update", "state": "running"},
    {"sessionUpdate": "agent_thought_chunk", "messageId": "th1", "content": text_wire("Geo")},
    {"sessionUpdate": "agent_thought_chunk", "messageId": "th1", "content": text_wire("graphy.")},
    {"sessionUpdate": "agent_message_chunk", "messageId": "a1", "content": text_wire("Let me check")},
    {
        "sessionUpdate": "plan_update",
        "plan": {
            "type": "items",
            "planId": "plan-1",
            "entries": [{"content": "Answer", "priority": "high", "status": "pending"}],
        },
    },
    {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call_001",
        "title": "Look up",
        "kind": "search",
        "status": "pending",
        "rawInput": {"q": "capital of France"},
    },
    {"sessionUpdate": "state_update", "state": "requires_action"},
    {"sessionUpdate": "state_update", "state": "running"},
    {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call_001",
        "status": "in_progress",
        "content": [{"type": "terminal", "terminalId": "term_001"}],
    },
    {"sessionUpdate": "terminal_update", "terminalId": "term_001", "command": "grep -r Paris", "cwd": "/p"},
    {"sessionUpdate": "terminal_output_chunk", "terminalId": "term_001", "data": b64(b"Par")},
    {"sessionUpdate": "terminal_output_chunk", "terminalId": "term_001", "data": b64(b"is\n")},
    {"sessionUpdate": "terminal_update", "terminalId": "term_001", "exitStatus": {"exitCode": 0}},
    {
        "sessionUpdate": "tool_call_content_chunk",
        "toolCallId": "call_001",
        "content": {"type": "content", "content": text_wire("Found it")},
    },
    {"sessionUpdate": "tool_call_update", "toolCallId": "call_001", "status": "completed"},
    {"sessionUpdate": "agent_thought", "messageId": "th1", "_meta": {"tokens": 3}},
    {"sessionUpdate": "agent_message_chunk", "messageId": "a2", "content": text_wire("Paris.")},
    {"sessionUpdate": "agent_message", "messageId": "a2", "content": [text_wire("Paris!")]},
    {"sessionUpdate": "user_message_chunk", "messageId": "u2", "content": text_wire("Thanks")},
    {
        "sessionUpdate": "plan_update",
        "plan": {
            "type": "items",
            "planId": "plan-1",
            "entries": [{"content": "Answer", "priority": "high", "status": "completed"}],
        },
    },
    {"sessionUpdate": "available_commands_update", "availableCommands": [COMMAND]},
    {"sessionUpdate": "config_option_update", "configOptions": [CONFIG_OPTION]},
    {"sessionUpdate": "session_info_update", "title": "Capitals", "_meta": {"tags": ["geo"]}},
    {"sessionUpdate": "usage_update", "used": 53000, "size": 200000, "cost": {"amount": 0.045, "currency": "USD"}},
    {"sessionUpdate": "notice", "severity": "warning", "title": "MCP server unavailable"},
    {"sessionUpdate": "compaction_update", "compactionId": "cmp_001", "status": "in_progress"},
    {"sessionUpdate": "compaction_summary_chunk", "compactionId": "cmp_001", "content": text_wire("Q: Paris")},
    {"sessionUpdate": "compaction_update", "compactionId": "cmp_001", "status": "completed"},
    {"sessionUpdate": "_acme_future", "payload": [1, 2]},
    {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"},
]

# The same history as a session/resume replay: whole messages, final tool call, terminal snapshot.
REPLAY: list[dict[str, Any]] = [
    {"sessionUpdate": "user_message", "messageId": "u1", "content": [text_wire("What's the capital?")]},
    {"sessionUpdate": "agent_thought", "messageId": "th1", "content": [text_wire("Geo"), text_wire("graphy.")]},
    {"sessionUpdate": "agent_thought", "messageId": "th1", "_meta": {"tokens": 3}},
    {"sessionUpdate": "agent_message", "messageId": "a1", "content": [text_wire("Let me check")]},
    {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call_001",
        "title": "Look up",
        "kind": "search",
        "status": "completed",
        "rawInput": {"q": "capital of France"},
        "content": [
            {"type": "terminal", "terminalId": "term_001"},
            {"type": "content", "content": text_wire("Found it")},
        ],
    },
    {
        "sessionUpdate": "terminal_update",
        "terminalId": "term_001",
        "command": "grep -r Paris",
        "cwd": "/p",
        "output": {"data": b64(b"Paris\n")},
        "exitStatus": {"exitCode": 0},
    },
    {"sessionUpdate": "agent_message", "messageId": "a2", "content": [text_wire("Paris!")]},
    {"sessionUpdate": "user_message", "messageId": "u2", "content": [text_wire("Thanks")]},
    {
        "sessionUpdate": "plan_update",
        "plan": {
            "type": "items",
            "planId": "plan-1",
            "entries": [{"content": "Answer", "priority": "high", "status": "completed"}],
        },
    },
    {
        "sessionUpdate": "compaction_update",
        "compactionId": "cmp_001",
        "status": "completed",
        "summary": [text_wire("Q: Paris")],
    },
    {"sessionUpdate": "session_info_update", "title": "Capitals", "_meta": {"tags": ["geo"]}},
    {"sessionUpdate": "state_update", "state": "idle"},  # the current-state snapshot after the replay
]


def notification(update: dict[str, Any], session_id: str = "s1", variant: Any = v2) -> Any:
    return converter.structure({"sessionId": session_id, "update": update}, variant.UpdateSessionNotification)


def text(value: str) -> v2.TextContentBlock:
    return v2.TextContentBlock(text=value)


def item(value: str) -> v2.ContentToolCallContent:
    return v2.ContentToolCallContent(content=text(value))


def summary(state: SessionState) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for entry in state.transcript:
        if isinstance(entry, MessageEntry):
            out.append((entry.role, entry.message_id or "", entry.text))
        elif isinstance(entry, ToolCallEntry):
            out.append(("tool", entry.tool_call_id, entry.status))
        else:
            out.append(("compaction", entry.compaction_id, entry.status or ""))
    return out


def history(state: SessionState) -> dict[str, Any]:
    """What a replay must rebuild: the transcript, entities and plans (not live-only run details)."""
    return {
        "transcript": summary(state),
        "messages": [(m.role, m.message_id, m.content, m.meta) for m in state.messages],
        "tool_calls": state.tool_calls,
        "terminals": state.terminals,
        "plans": {plan_id: converter.unstructure(plan) for plan_id, plan in state.plans.items()},
        "compactions": state.compactions,
        "session_info": state.session_info,
        "run_state": state.run_state,
    }


# -- every variant, from the wire ------------------------------------------------------------------


def test_the_wire_examples_cover_every_v2_update_variant() -> None:
    classes = {type(notification(update).update) for update in LIVE}
    assert classes == set(typing.get_args(v2.SessionUpdate))


def test_a_live_v2_turn_folds_into_the_state() -> None:
    state = SessionState()
    for update in LIVE:
        state.apply(notification(update))

    assert state.session_id == "s1" and state.update_count == len(LIVE)
    assert summary(state) == [
        ("user", "u1", "What's the capital?"),
        ("thought", "th1", "Geography."),
        ("agent", "a1", "Let me check"),
        ("tool", "call_001", "completed"),
        ("agent", "a2", "Paris!"),
        ("user", "u2", "Thanks"),
        ("compaction", "cmp_001", "completed"),
    ]
    assert state.message("thought", "th1") is state.messages[1]
    assert state.messages[1].meta == {"tokens": 3} and state.message("agent", "th1") is None

    call = state.tool_calls["call_001"]
    assert call == ToolCallEntry(
        "call_001",
        title="Look up",
        kind="search",
        status="completed",
        content=[v2.TerminalToolCallContent(terminal_id="term_001"), item("Found it")],
        raw_input={"q": "capital of France"},
        announced=True,
    )
    assert call.finished and state.tool_kind("call_001") == "search"

    terminal = state.terminals["term_001"]
    assert (terminal.command, terminal.cwd, bytes(terminal.output), terminal.text) == (
        "grep -r Paris",
        "/p",
        b"Paris\n",
        "Paris\n",
    )
    assert terminal.exited and terminal.exit_status == v2.TerminalExitStatus(exit_code=0)

    [plan] = state.plans.values()
    assert isinstance(plan, v2.ItemsPlanUpdateContent) and plan.plan_id == "plan-1"
    assert [(e.content, e.status) for e in plan.entries] == [("Answer", "completed")]
    assert state.plan is None  # the v1 attribute

    assert (state.run_state, state.idle, state.stop_reason, state.idle_count) == ("idle", True, "end_turn", 1)
    assert [converter.unstructure(c) for c in state.available_commands] == [COMMAND]
    assert [converter.unstructure(o) for o in state.config_options] == [CONFIG_OPTION]
    assert state.session_info == SessionInfoState(title="Capitals", meta={"tags": ["geo"]})
    assert state.usage is not None and (state.usage.used, state.usage.size) == (53000, 200000)
    assert [(n.severity, n.title) for n in state.notices] == [("warning", "MCP server unavailable")]
    assert state.compactions["cmp_001"] == CompactionEntry("cmp_001", "completed", [text("Q: Paris")])

    # the unknown state and the unknown variant are kept verbatim, in order
    assert [converter.unstructure(u) for u in state.unknown] == [LIVE[1], LIVE[-2]]
    assert isinstance(state.unknown[0], v2.StateUpdateSessionUpdateOther)
    assert isinstance(state.unknown[1], v2.SessionUpdateOther)


def test_generated_objects_fold_like_their_wire_form() -> None:
    built = [
        v2.UserMessageSessionUpdate(message_id="u1", content=[text("hi")]),
        v2.RunningStateUpdateSessionUpdate(),
        v2.AgentMessageChunkSessionUpdate(message_id="a1", content=text("he")),
        v2.AgentMessageChunkSessionUpdate(message_id="a1", content=text("llo")),
        v2.ToolCallUpdateSessionUpdate(tool_call_id="t", title="grep", kind="search"),
        v2.ToolCallContentChunkSessionUpdate(tool_call_id="t", content=item("hit")),
        v2.ToolCallUpdateSessionUpdate(tool_call_id="t", status="completed"),
        v2.IdleStateUpdateSessionUpdate(stop_reason="max_tokens"),
    ]
    from_objects = SessionState.replay(built, "s1")
    from_wire = SessionState.replay([notification(converter.unstructure(u)) for u in built])
    assert history(from_objects) == history(from_wire)
    assert summary(from_objects) == [("user", "u1", "hi"), ("agent", "a1", "hello"), ("tool", "t", "completed")]
    assert from_objects.stop_reason == from_wire.stop_reason == "max_tokens"


# -- messages ----------------------------------------------------------------------------------------


def test_whole_message_upserts_and_chunks_compose_in_arrival_order() -> None:
    # prompt-lifecycle.mdx, Message IDs: [A], +B -> [A, B]; [C] -> [C]; +D -> [C, D]
    state = SessionState("s1")
    state.apply(notification({"sessionUpdate": "agent_message", "messageId": "m", "content": [text_wire("A")]}))
    state.apply(v2.AgentMessageChunkSessionUpdate(message_id="m", content=text("B")))
    [message] = state.messages
    assert message.content == [text("A"), text("B")]
    state.apply(v2.AgentMessageSessionUpdate(message_id="m", content=[text("C")]))
    state.apply(notification({"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": text_wire("D")}))
    assert state.messages == [message] and message.content == [text("C"), text("D")]


def test_message_content_omitted_keeps_null_and_empty_clear_and_meta_patches_by_key() -> None:
    state = SessionState("s1")
    state.apply(v2.UserMessageSessionUpdate(message_id="u", content=[text("hi")], meta={"a": 1, "b": 2}))
    [message] = state.messages
    # omitted content: unchanged; _meta patched by top-level key; unknown wire fields kept
    state.apply(
        notification({"sessionUpdate": "user_message", "messageId": "u", "_meta": {"b": None, "c": 3}, "_x": 1})
    )
    assert (message.content, message.meta, message.extra_fields) == ([text("hi")], {"a": 1, "c": 3}, {"_x": 1})
    state.apply(notification({"sessionUpdate": "user_message", "messageId": "u", "content": None}))
    assert message.content == [] and message.meta == {"a": 1, "c": 3}
    state.apply(v2.UserMessageSessionUpdate(message_id="u", content=[text("again")]))
    state.apply(notification({"sessionUpdate": "user_message", "messageId": "u", "content": [], "_meta": None}))
    assert (message.content, message.meta) == ([], None)
    assert state.messages == [message]  # every update patched the one message


def test_a_new_message_id_starts_a_message_and_keeps_its_first_position() -> None:
    state = SessionState("s1")
    state.apply(v2.AgentMessageSessionUpdate(message_id="m1"))  # no content: starts empty
    state.apply(v2.AgentMessageChunkSessionUpdate(message_id="m2", content=text("second")))
    state.apply(v2.ToolCallUpdateSessionUpdate(tool_call_id="t", title="x"))
    state.apply(v2.AgentMessageChunkSessionUpdate(message_id="m1", content=text("first")))  # joins m1 where it is
    state.apply(v2.AgentMessageSessionUpdate(message_id="m2", content=[text("2nd")]))
    assert summary(state) == [("agent", "m1", "first"), ("agent", "m2", "2nd"), ("tool", "t", "pending")]


def test_each_message_type_has_its_own_id_space_and_chunk_meta_is_not_stored() -> None:
    state = SessionState("s1")
    state.apply(v2.UserMessageChunkSessionUpdate(message_id="x", content=text("q"), meta={"chunk": 1}))
    state.apply(v2.AgentMessageChunkSessionUpdate(message_id="x", content=text("a")))
    state.apply(v2.AgentThoughtSessionUpdate(message_id="x", content=[text("t")]))
    state.apply(v2.UserMessageChunkSessionUpdate(message_id="x", content=text("q2")))
    assert summary(state) == [("user", "x", "qq2"), ("agent", "x", "a"), ("thought", "x", "t")]
    assert state.messages[0].meta is None


# -- tool calls ----------------------------------------------------------------------------------


def test_the_first_tool_call_update_creates_it_with_the_protocol_defaults() -> None:
    state = SessionState("s1")
    state.apply(notification({"sessionUpdate": "tool_call_update", "toolCallId": "call_001"}))
    entry = state.tool_calls["call_001"]
    assert entry == ToolCallEntry("call_001", announced=True)  # no title, kind other, status pending
    assert (entry.title, entry.kind, entry.status, entry.name) == ("", "other", "pending", None)
    assert state.transcript == [entry]


def test_tool_call_updates_omitted_unchanged_null_cleared_value_replaced() -> None:
    state = SessionState("s1")
    state.apply(
        notification(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "t",
                "name": "edit_file",
                "title": "Edit",
                "kind": "edit",
                "status": "in_progress",
                "content": [{"type": "content", "content": text_wire("one")}],
                "locations": [{"path": "/a", "line": 1}],
                "rawInput": {"p": 1},
                "rawOutput": {"ok": False},
                "capabilities": {"cancel": {}},
                "_meta": {"k": 1, "j": 2},
            }
        )
    )
    entry = state.tool_calls["t"]
    full = attrs.evolve(entry)
    state.apply(v2.ToolCallUpdateSessionUpdate(tool_call_id="t"))  # everything omitted
    assert entry == full
    state.apply(v2.ToolCallUpdateSessionUpdate(tool_call_id="t", title="Edited", meta={"j": None, "i": 3}))
    assert (entry.title, entry.meta, entry.kind, entry.content) == ("Edited", {"k": 1, "i": 3}, "edit", full.content)
    state.apply(
        notification(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "t",
                "name": None,
                "title": None,
                "kind": None,
                "status": None,
                "content": None,
                "locations": None,
                "rawInput": None,
                "rawOutput": None,
                "capabilities": None,
                "_meta": None,
            }
        )
    )
    assert entry == ToolCallEntry("t", announced=True)  # null resets title/kind/status, clears the rest
    assert state.transcript == [entry]  # patched in place


def test_tool_call_content_chunks_append_and_a_content_update_replaces_them() -> None:
    # tool-calls.mdx, Streaming Content
    state = SessionState("s1")
    state.apply(v2.ToolCallContentChunkSessionUpdate(tool_call_id="t", content=item("a")))  # unseen id: created
    entry = state.tool_calls["t"]
    assert entry.announced is False and entry.content == [item("a")]
    state.apply(v2.ToolCallUpdateSessionUpdate(tool_call_id="t", title="Run"))
    assert entry.announced and entry.content == [item("a")]
    state.apply(
        notification(
            {
                "sessionUpdate": "tool_call_content_chunk",
                "toolCallId": "t",
                "content": {"type": "content", "content": text_wire("b")},
                "_meta": {"chunk": 1},
            }
        )
    )
    assert entry.content == [item("a"), item("b")] and entry.meta is None  # chunk _meta is chunk-scoped
    state.apply(v2.ToolCallUpdateSessionUpdate(tool_call_id="t", content=[item("c")]))
    state.apply(v2.ToolCallContentChunkSessionUpdate(tool_call_id="t", content=item("d")))
    assert entry.content == [item("c"), item("d")]
    state.apply(v2.ToolCallUpdateSessionUpdate(tool_call_id="t", content=[]))
    assert entry.content == []


def test_cancelled_is_a_final_tool_call_status() -> None:
    state = SessionState("s1")
    state.apply(v2.ToolCallUpdateSessionUpdate(tool_call_id="a", status="cancelled"))
    state.apply(v2.ToolCallUpdateSessionUpdate(tool_call_id="b", status="in_progress"))
    assert state.tool_calls["a"].finished
    assert [e.tool_call_id for e in state.cancel_unfinished_tool_calls()] == ["b"]


# -- plans -----------------------------------------------------------------------------------------


def test_plan_updates_replace_the_plan_of_their_id() -> None:
    state = SessionState("s1")
    entries = [v2.PlanEntry(content="a", priority="high", status="pending")]
    state.apply(v2.PlanUpdateSessionUpdate(plan=v2.ItemsPlanUpdateContent(plan_id="p1", entries=entries)))
    state.apply(v2.PlanUpdateSessionUpdate(plan=v2.ItemsPlanUpdateContent(plan_id="p2", entries=[])))
    state.apply(
        notification({"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "p1", "entries": []}})
    )
    assert list(state.plans) == ["p1", "p2"] and state.plans["p1"].entries == []  # replaced, position kept
    # a custom plan type is kept verbatim and still replaces the plan of its id
    custom = {"type": "_acme_graph", "planId": "p2", "nodes": [1]}
    state.apply(notification({"sessionUpdate": "plan_update", "plan": custom}))
    assert isinstance(state.plans["p2"], v2.PlanUpdateContentOther)
    assert converter.unstructure(state.plans["p2"]) == custom
    assert state.transcript == [] and state.unknown == []


# -- terminals -------------------------------------------------------------------------------------


def test_terminal_snapshots_replace_chunks_append_and_patches_apply() -> None:
    # migration.mdx, Agent-owned terminal display
    state = SessionState("s1")
    state.apply(v2.TerminalOutputChunkSessionUpdate(terminal_id="t", data=b64(b"\xe2\x82")))  # first seen: a chunk
    state.apply(v2.TerminalOutputChunkSessionUpdate(terminal_id="t", data=b64(b"\xac!")))  # splits a code point
    terminal = state.terminals["t"]
    assert bytes(terminal.output) == "€!".encode() and terminal.text == "€!" and terminal.command is None
    state.apply(
        notification(
            {
                "sessionUpdate": "terminal_update",
                "terminalId": "t",
                "command": "cargo test",
                "cwd": "/workspace",
                "output": {"data": b64(b"running 1 test\r\n")},
                "size": {"cols": 80, "rows": 24},
                "_meta": {"a": 1},
            }
        )
    )
    assert bytes(terminal.output) == b"running 1 test\r\n"  # the snapshot replaced everything
    state.apply(v2.TerminalOutputChunkSessionUpdate(terminal_id="t", data=b64(b"ok\r\n")))
    assert bytes(terminal.output) == b"running 1 test\r\nok\r\n"
    state.apply(v2.TerminalUpdateSessionUpdate(terminal_id="t", exit_status=v2.TerminalExitStatus(signal="SIGTERM")))
    assert terminal.exited and terminal.command == "cargo test" and terminal.size == v2.TerminalSize(cols=80, rows=24)
    state.apply(
        notification(
            {
                "sessionUpdate": "terminal_update",
                "terminalId": "t",
                "command": None,
                "output": None,
                "exitStatus": None,
                "_meta": {"a": None},
            }
        )
    )
    assert terminal == TerminalEntry("t", cwd="/workspace", size=v2.TerminalSize(cols=80, rows=24), meta={})
    assert state.transcript == []  # terminals are display state referenced by tool call content


def test_invalid_base64_is_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    state = SessionState("s1")
    with caplog.at_level(logging.WARNING, logger="acp_trio.session_state"):
        state.apply(v2.TerminalOutputChunkSessionUpdate(terminal_id="t", data=b64(b"ok")))
        state.apply(v2.TerminalOutputChunkSessionUpdate(terminal_id="t", data="not base64!"))
        state.apply(v2.TerminalUpdateSessionUpdate(terminal_id="t", output=v2.TerminalOutput(data="%%")))
    assert bytes(state.terminals["t"].output) == b"ok"
    assert sum("not valid base64" in r.getMessage() for r in caplog.records) == 2


# -- run state -------------------------------------------------------------------------------------


def test_state_updates_track_the_run_state_and_the_stop_reason() -> None:
    state = SessionState("s1")
    assert (state.run_state, state.idle, state.stop_reason) == ("idle", True, None)  # a new session is idle
    state.apply(
        notification(
            {
                "sessionUpdate": "state_update",
                "state": "running",
                "background": [{"type": "terminal", "terminalId": "bg"}],
            }
        )
    )
    assert (state.run_state, state.idle) == ("running", False)
    assert state.background == [v2.TerminalBackgroundWork(terminal_id="bg")]
    state.apply(v2.RequiresActionStateUpdateSessionUpdate())
    assert state.run_state == "requires_action" and state.background is None  # not reported
    state.apply(notification({"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}))
    assert (state.run_state, state.stop_reason, state.idle_count) == ("idle", "cancelled", 1)
    state.apply(v2.IdleStateUpdateSessionUpdate())  # a repeated snapshot: the stop reason stands
    assert (state.stop_reason, state.idle_count) == ("cancelled", 2)
    state.apply(v2.RunningStateUpdateSessionUpdate())
    assert state.stop_reason is None  # work in progress: nothing stopped yet
    error = {"code": -32603, "message": "model unavailable"}
    state.apply(notification({"sessionUpdate": "state_update", "state": "idle", "stopReason": "error", "error": error}))
    assert state.stop_reason == "error" and converter.unstructure(state.stop_error) == error
    assert isinstance(state.last_state_update, v2.IdleStateUpdateSessionUpdate)


def test_an_unknown_state_is_never_idle_and_is_kept_verbatim() -> None:
    state = SessionState("s1")
    state.apply(notification({"sessionUpdate": "state_update", "state": "_acme_paused", "why": "quota"}))
    assert (state.run_state, state.idle) == ("_acme_paused", False)
    assert [converter.unstructure(u) for u in state.unknown] == [
        {"sessionUpdate": "state_update", "state": "_acme_paused", "why": "quota"}
    ]


async def test_wait_idle_waits_for_an_idle_update_after_the_mark() -> None:
    state = SessionState("s1")
    assert await state.wait_idle() is None  # idle now, no mark: at once
    results: list[str | None] = []
    mark = state.idle_count

    async def waiter() -> None:
        results.append(await state.wait_idle(after=mark))

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            state.apply(v2.IdleStateUpdateSessionUpdate(stop_reason="stale"))  # before the turn: counts (after mark)
    assert results == ["stale"]

    mark = state.idle_count
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            state.apply(v2.RunningStateUpdateSessionUpdate())
            state.apply(notification({"sessionUpdate": "state_update", "state": "_acme_paused"}))
            await trio.testing.wait_all_tasks_blocked()
            assert results == ["stale"]  # running and an unknown state do not end the wait
            state.apply(v2.IdleStateUpdateSessionUpdate(stop_reason="end_turn"))
    assert results == ["stale", "end_turn"]


async def test_session_states_wait_idle_follows_a_reset_and_fails_on_discard() -> None:
    states = SessionStates()
    results: list[str | None] = []

    async def waiter(mark: int) -> None:
        results.append(await states.wait_idle("s1", after=mark))

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter, states.state("s1").idle_count)
            await trio.testing.wait_all_tasks_blocked()
            fresh = states.reset("s1")  # e.g. a replay: the new state starts idle, which does not count
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
            await states.session_update(
                notification({"sessionUpdate": "state_update", "state": "idle", "stopReason": "refusal"})
            )
        assert results == ["refusal"] and states["s1"] is fresh

        async def discarded_waiter() -> None:
            with pytest.raises(KeyError):
                await states.wait_idle("s1", after=fresh.idle_count)
            results.append("gone")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(discarded_waiter)
            await trio.testing.wait_all_tasks_blocked()
            states.discard("s1")
    assert results == ["refusal", "gone"]


# -- other variants ------------------------------------------------------------------------------


def test_session_info_usage_commands_and_config_options() -> None:
    state = SessionState("s1")
    state.apply(v2.SessionInfoUpdateSessionUpdate(title="T", updated_at="2025-01-01T00:00:00Z", meta={"a": 1}))
    state.apply(v2.SessionInfoUpdateSessionUpdate(meta={"b": 2}))  # v2 _meta: patched by key
    assert state.session_info == SessionInfoState("T", "2025-01-01T00:00:00Z", {"a": 1, "b": 2})
    state.apply(notification({"sessionUpdate": "session_info_update", "title": None, "_meta": None}))
    assert state.session_info == SessionInfoState(None, "2025-01-01T00:00:00Z", None)

    state.apply(
        notification(
            {"sessionUpdate": "usage_update", "used": 1, "size": 10, "cost": {"amount": 0.5, "currency": "EUR"}}
        )
    )
    later = v2.UsageUpdateSessionUpdate(used=2, size=10)
    state.apply(later)  # cost omitted: the last reported cost stands
    assert state.usage is not None and state.usage.used == 2 and state.usage.cost == v2.Cost(amount=0.5, currency="EUR")
    assert later.cost is acp_trio.UNSET  # the update object itself is not changed
    state.apply(notification({"sessionUpdate": "usage_update", "used": 3, "size": 10, "cost": None}))
    state.apply(v2.UsageUpdateSessionUpdate(used=4, size=10))
    assert state.usage.used == 4 and state.usage.cost is None  # cleared, and stays cleared

    state.apply(notification({"sessionUpdate": "available_commands_update", "availableCommands": [COMMAND]}))
    state.apply(notification({"sessionUpdate": "config_option_update", "configOptions": [CONFIG_OPTION]}))
    state.apply(v2.AvailableCommandsUpdateSessionUpdate(available_commands=[]))
    assert state.available_commands == [] and len(state.config_options) == 1


def test_v2_compactions_are_upserts_with_appending_summary_chunks() -> None:
    state = SessionState("s1")
    state.apply(v2.CompactionUpdateSessionUpdate(compaction_id="c", status="in_progress", meta={"a": 1, "b": 2}))
    state.apply(v2.CompactionSummaryChunkSessionUpdate(compaction_id="c", content=text("one ")))
    state.apply(v2.CompactionSummaryChunkSessionUpdate(compaction_id="c", content=text("two")))
    entry = state.compactions["c"]
    assert entry.text == "one two"
    state.apply(
        notification(
            {"sessionUpdate": "compaction_update", "compactionId": "c", "status": "completed", "_meta": {"a": None}}
        )
    )
    assert (entry.status, entry.text, entry.meta) == ("completed", "one two", {"b": 2})  # summary omitted: kept
    state.apply(v2.CompactionUpdateSessionUpdate(compaction_id="c", status="completed", summary=[text("new")]))
    state.apply(v2.CompactionSummaryChunkSessionUpdate(compaction_id="c", content=text("!")))
    assert entry.text == "new!"
    state.apply(
        notification(
            {
                "sessionUpdate": "compaction_update",
                "compactionId": "c",
                "status": "failed",
                "summary": None,
                "error": "quota",
            }
        )
    )
    assert entry == CompactionEntry("c", "failed", [], "quota", {"b": 2}) and state.transcript == [entry]


def test_unknown_variants_are_kept_verbatim_in_order() -> None:
    state = SessionState("s1")
    state.apply(notification({"sessionUpdate": "_acme/one", "a": 1}))
    state.apply(v2.AgentMessageChunkSessionUpdate(message_id="m", content=text("hi")))
    state.apply(notification({"sessionUpdate": "brand_new", "b": {"c": [None]}}))
    assert [converter.unstructure(u) for u in state.unknown] == [
        {"sessionUpdate": "_acme/one", "a": 1},
        {"sessionUpdate": "brand_new", "b": {"c": [None]}},
    ]
    assert summary(state) == [("agent", "m", "hi")] and state.update_count == 3


def test_one_state_takes_updates_of_either_version() -> None:
    state = SessionState("s1")
    state.apply(
        v1.SessionNotification(
            session_id="s1", update=v1.UserMessageChunkSessionUpdate(content=v1.TextContentBlock(text="v1"))
        )
    )
    state.apply(v2.AgentMessageSessionUpdate(message_id="a", content=[text("v2")]))
    state.apply(v1.ToolCallSessionUpdate(tool_call_id="t", title="x", kind="read"))
    state.apply(v2.ToolCallUpdateSessionUpdate(tool_call_id="t", status="completed", kind=None))
    assert summary(state) == [("user", "", "v1"), ("agent", "a", "v2"), ("tool", "t", "completed")]
    assert state.tool_calls["t"].kind == "other"
    with pytest.raises(ValueError, match="session 's2'"):
        state.apply(notification({"sessionUpdate": "state_update", "state": "running"}, session_id="s2"))
    with pytest.raises(TypeError, match="got dict"):
        state.apply({"sessionUpdate": "state_update"})  # type: ignore[arg-type]
    assert state.update_count == 4 and state.run_state == "idle"


def test_apply_setup_takes_v2_config_options_and_commands() -> None:
    state = SessionState("s1")
    response = converter.structure(
        {"sessionId": "s1", "configOptions": [CONFIG_OPTION], "availableCommands": [COMMAND]}, v2.NewSessionResponse
    )
    state.apply_setup(response)
    assert [converter.unstructure(o) for o in state.config_options] == [CONFIG_OPTION]
    assert [converter.unstructure(c) for c in state.available_commands] == [COMMAND]
    state.apply_setup(v2.ResumeSessionResponse())  # lacks both: nothing changes
    assert len(state.config_options) == len(state.available_commands) == 1


@pytest.mark.parametrize(
    ("patch_type", "entry_type"),
    [
        (v2.ToolCallUpdateSessionUpdate, ToolCallEntry),
        (v2_unstable.ToolCallUpdateSessionUpdate, ToolCallEntry),
        (v2.UserMessageSessionUpdate, MessageEntry),
        (v2_unstable.SessionMessageSessionUpdate, SessionMessageEntry),
        (v2.TerminalUpdateSessionUpdate, TerminalEntry),
        (v2_unstable.TerminalUpdateSessionUpdate, TerminalEntry),
        (v2.CompactionUpdateSessionUpdate, CompactionEntry),
        (v2.SessionInfoUpdateSessionUpdate, SessionInfoState),
        (v2_unstable.SubagentUpdateSessionUpdate, SubagentEntry),
    ],
)
def test_every_patch_field_has_a_home_in_its_entry(patch_type: type, entry_type: type) -> None:
    # a field a regenerated schema adds must not be dropped silently by the fold
    required = {a.name for a in attrs.fields(patch_type) if a.default is attrs.NOTHING}
    sample = patch_type(**{name: "x" for name in required})
    assert set(patch_fields(sample)) <= {a.name for a in attrs.fields(entry_type)}


# -- v2_unstable -------------------------------------------------------------------------------------

UNSTABLE_EXTRA: list[dict[str, Any]] = [
    {"sessionUpdate": "state_update", "state": "unknown"},
    {"sessionUpdate": "plan_update", "plan": {"type": "markdown", "planId": "md", "content": "## Steps"}},
    {"sessionUpdate": "plan_removed", "planId": "plan-1"},
    {"sessionUpdate": "subagent_update", "sessionId": "child", "title": "Researcher", "state": {"state": "running"}},
    {"sessionUpdate": "subagent_update", "sessionId": "child", "title": None, "cwd": "/p", "_meta": {"k": 1}},
    {"sessionUpdate": "session_message_chunk", "messageId": "sm", "content": text_wire("ping ")},
    {"sessionUpdate": "session_message", "messageId": "sm", "senderSessionId": "child", "_meta": {"k": 1}},
    {"sessionUpdate": "session_message_chunk", "messageId": "sm", "content": text_wire("pong")},
]


def test_v2_unstable_streams_fold_too() -> None:
    stream = LIVE + UNSTABLE_EXTRA
    classes = {type(notification(update, variant=v2_unstable).update) for update in stream}
    assert classes == set(typing.get_args(v2_unstable.SessionUpdate))
    state = SessionState.replay([notification(update, variant=v2_unstable) for update in stream])
    stable = SessionState.replay([notification(update) for update in LIVE])
    assert summary(state) == [*summary(stable), ("session", "sm", "ping pong")]
    session_message = state.messages[-1]
    assert isinstance(session_message, SessionMessageEntry)
    assert (session_message.sender_session_id, session_message.recipient_session_id, session_message.meta) == (
        "child",
        None,
        {"k": 1},
    )
    assert list(state.plans) == ["md"]  # plan-1 removed; the markdown plan kept
    assert state.plans["md"].content == "## Steps"
    assert state.subagents["child"] == SubagentEntry(
        "child", state=v2_unstable.RunningStateUpdate(), cwd="/p", meta={"k": 1}
    )
    assert (state.run_state, state.idle, state.stop_reason) == ("unknown", False, None)
    [(call, stable_call)] = zip(state.tool_calls.values(), stable.tool_calls.values(), strict=True)
    assert converter.unstructure(call.content) == converter.unstructure(stable_call.content)
    assert isinstance(call.content[0], v2_unstable.TerminalToolCallContent)  # the classes of the stream's variant


# -- over a connection: a live turn, then a resume with replay ------------------------------------


class V2Agent:
    """Answers session/prompt at once and streams LIVE afterwards; replays REPLAY on session/resume."""

    def __init__(self, conn: acp_trio.AgentSideConnection, nursery: trio.Nursery) -> None:
        self.conn = conn
        self.nursery = nursery

    async def initialize(self, params: v2.InitializeRequest) -> v2.InitializeResponse:
        return v2.InitializeResponse(
            protocol_version=2,
            info=v2.Implementation(name="agent", version="1"),
            capabilities=v2.AgentCapabilities(session=v2.SessionCapabilities()),
        )

    async def _stream(self, session_id: str, updates: list[dict[str, Any]]) -> None:
        for update in updates:
            await self.conn.client.session_update(notification(update, session_id))

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        self.nursery.start_soon(self._stream, params.session_id, LIVE)  # the turn goes on after the response
        return v2.PromptResponse(message_id="u1")

    async def session_resume(self, params: v2.ResumeSessionRequest) -> v2.ResumeSessionResponse:
        if params.replay_from:
            await self._stream(params.session_id, REPLAY)
        else:
            await self._stream(params.session_id, [{"sessionUpdate": "state_update", "state": "idle"}])
        return converter.structure({"configOptions": [CONFIG_OPTION]}, v2.ResumeSessionResponse)


async def test_a_live_turn_then_a_resume_replay_rebuild_the_same_transcript() -> None:
    seen: list[str] = []
    states = SessionStates(lambda state, update: seen.append(update.session_update))
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            agent_factory = lambda conn: V2Agent(conn, nursery)  # noqa: E731
            async with acp_trio.open_memory_pair(agent_factory, states, variant=v2) as (_agent_conn, client_conn):
                await client_conn.agent.initialize(
                    v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="client", version="1"))
                )
                mark = states.state("s1").idle_count
                response = await client_conn.agent.session_prompt(
                    v2.PromptRequest(session_id="s1", prompt=[text("go")])
                )
                assert await states.wait_idle("s1", after=mark) == "end_turn"
                live = states["s1"]
                assert live.message("user", response.message_id) is live.messages[0]
                assert seen == [u["sessionUpdate"] for u in LIVE]

                # reattach without replay: the state is kept, the snapshot folds into it
                await states.resume(client_conn.agent, v2.ResumeSessionRequest(session_id="s1", cwd="/p"))
                assert states["s1"] is live and live.update_count == len(LIVE) + 1

                request = v2.ResumeSessionRequest(session_id="s1", cwd="/p", replay_from=v2.StartReplayFrom())
                resumed = await states.resume(client_conn.agent, request, timeout=10)
                replayed = states["s1"]
                assert replayed is not live  # reset, then rebuilt from the replay before resume returned
                assert [converter.unstructure(o) for o in replayed.config_options] == [CONFIG_OPTION]
                assert resumed.config_options
            nursery.cancel_scope.cancel()
    assert history(replayed) == history(live)
    assert replayed.update_count == len(REPLAY)
    # the same history replayed offline folds the same way
    assert history(SessionState.replay([notification(u) for u in REPLAY])) == history(live)

"""The two views (issue 33, ``acp_trio._views``): one session's updates projected to the other version.

Sans-IO: sequences of updates go in, the updates to send come out, checked as wire JSON against
``docs/protocol/v2/migration.mdx`` (v1: ``tool_call``, whole-content ``tool_call_update``, one
``plan``, ``current_mode_update``; v2: ``messageId`` s, upserts, ``plan_update``).  The folding
tests apply the input and the output to :class:`acp_trio.session_state.SessionState` and require
the same messages, tool calls and plan: what a client of either version ends up showing.
"""

from __future__ import annotations

import base64
import itertools
from typing import Any

import pytest

from acp_schema import v1, v2
from acp_trio import _mapping as m
from acp_trio import converter
from acp_trio._views import V1View, V2View
from acp_trio.session_state import SessionState

PATH = "/work/a.txt"


def text2(text: str) -> v2.TextContentBlock:
    return v2.TextContentBlock(text=text)


def text1(text: str) -> v1.TextContentBlock:
    return v1.TextContentBlock(text=text)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def project_all(view: V1View | V2View, updates: list[Any]) -> list[Any]:
    out: list[Any] = []
    for update in updates:
        out.extend(view.project(update))
    return out


def wire(updates: list[Any], union: Any) -> list[dict[str, Any]]:
    """The updates' wire JSON, each checked to decode as ``union``'s member of its own class."""
    out = []
    for update in updates:
        data = converter.unstructure(update)
        again = converter.structure(data, union)
        assert type(again) is type(update) and not type(again).__name__.endswith("Other")
        out.append(data)
    return out


def fold(updates: list[Any]) -> SessionState:
    state = SessionState("s")
    state.apply_all(updates)
    return state


def messages(state: SessionState) -> list[tuple[str, str]]:
    return [(e.role, e.text) for e in state.messages]


def tool_calls(state: SessionState) -> list[tuple[str, str, str, str, list[Any]]]:
    """Each tool call's id, title, kind, status and content as wire JSON (the same in both
    versions for ``content`` items)."""
    return [
        (t.tool_call_id, t.title, t.kind, t.status, [converter.unstructure(c) for c in t.content])
        for t in state.tool_calls.values()
    ]


def v1_plan(state: SessionState) -> list[tuple[str, str, str]]:
    return [(e.content, e.priority, e.status) for e in (state.plan.entries if state.plan else [])]


def v2_plan(state: SessionState) -> list[tuple[str, str, str]]:
    return [(e.content, e.priority, e.status) for plan in state.plans.values() for e in plan.entries]


def plan2(plan_id: str, *entries: tuple[str, str]) -> v2.PlanUpdateSessionUpdate:
    items = [v2.PlanEntry(content=c, priority="medium", status=s) for c, s in entries]
    return v2.PlanUpdateSessionUpdate(plan=v2.ItemsPlanUpdateContent(plan_id=plan_id, entries=items))


# -- V1View: v2 → v1 --------------------------------------------------------------------------------------
def a_v2_turn() -> list[Any]:
    return [
        v2.UserMessageSessionUpdate(message_id="msg_u", content=[text2("hi")]),
        v2.RunningStateUpdateSessionUpdate(),
        v2.AgentThoughtChunkSessionUpdate(message_id="m1", content=text2("Planning.")),
        v2.AgentMessageChunkSessionUpdate(message_id="m2", content=text2("Hello ")),
        v2.AgentMessageChunkSessionUpdate(message_id="m2", content=text2("world")),
        plan2("p1", ("Edit a.txt", "pending")),
        v2.ToolCallUpdateSessionUpdate(tool_call_id="c1", title="Edit a.txt", kind="edit", status="pending"),
        v2.RequiresActionStateUpdateSessionUpdate(),
        v2.RunningStateUpdateSessionUpdate(),
        v2.ToolCallContentChunkSessionUpdate(
            tool_call_id="c1", content=v2.ContentToolCallContent(content=text2("step 1"))
        ),
        v2.ToolCallContentChunkSessionUpdate(
            tool_call_id="c1", content=v2.ContentToolCallContent(content=text2("step 2"))
        ),
        v2.ToolCallUpdateSessionUpdate(tool_call_id="c1", status="completed"),
        plan2("p2", ("Check", "in_progress")),
        plan2("p1", ("Edit a.txt", "completed")),
        v2.AgentMessageChunkSessionUpdate(message_id="m3", content=text2("Done.")),
        v2.IdleStateUpdateSessionUpdate(stop_reason="end_turn"),
    ]


def step(n: int) -> dict[str, Any]:
    return {"type": "content", "content": {"type": "text", "text": f"step {n}"}}


def test_v1_view_turn_is_v1_chunks_tool_call_whole_content_and_one_plan() -> None:
    out = wire(project_all(V1View(), a_v2_turn()), v1.SessionUpdate)
    chunk = "agent_message_chunk"
    assert out == [  # no user_message (the v1 client sent it), no state_update (the pending request says it)
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "Planning."}, "messageId": "m1"},
        {"sessionUpdate": chunk, "content": {"type": "text", "text": "Hello "}, "messageId": "m2"},
        {"sessionUpdate": chunk, "content": {"type": "text", "text": "world"}, "messageId": "m2"},
        {"sessionUpdate": "plan", "entries": [{"content": "Edit a.txt", "priority": "medium", "status": "pending"}]},
        {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Edit a.txt", "kind": "edit", "status": "pending"},
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "content": [step(1)]},
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "content": [step(1), step(2)]},
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"},
        {
            "sessionUpdate": "plan",
            "entries": [
                {"content": "Edit a.txt", "priority": "medium", "status": "pending"},
                {"content": "Check", "priority": "medium", "status": "in_progress"},
            ],
        },
        {
            "sessionUpdate": "plan",  # p1 keeps its place: plans in creation order
            "entries": [
                {"content": "Edit a.txt", "priority": "medium", "status": "completed"},
                {"content": "Check", "priority": "medium", "status": "in_progress"},
            ],
        },
        {"sessionUpdate": chunk, "content": {"type": "text", "text": "Done."}, "messageId": "m3"},
    ]


def test_v1_view_output_folds_to_the_same_messages_tool_calls_and_plan_as_the_v2_input() -> None:
    updates = a_v2_turn()
    projected = project_all(V1View(echo_user_messages=True), updates)
    live, shown = fold(updates), fold(projected)
    assert (
        messages(shown)
        == messages(live)
        == [
            ("user", "hi"),
            ("thought", "Planning."),
            ("agent", "Hello world"),
            ("agent", "Done."),
        ]
    )
    assert [e.message_id for e in shown.messages] == [e.message_id for e in live.messages]
    assert tool_calls(shown) == tool_calls(live)
    assert (
        v1_plan(shown) == v2_plan(live) == [("Edit a.txt", "medium", "completed"), ("Check", "medium", "in_progress")]
    )


def test_v1_view_shows_v2_only_statuses_as_the_nearest_v1_ones_with_the_original_in_meta() -> None:
    view = V1View()
    view.project(v2.ToolCallUpdateSessionUpdate(tool_call_id="c1", title="Run"))
    (update,) = wire(
        view.project(v2.ToolCallUpdateSessionUpdate(tool_call_id="c1", status="cancelled")), v1.SessionUpdate
    )
    assert update == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "status": "failed",
        "_meta": {"acp-trio/status": "cancelled"},
    }
    (plan,) = wire(view.project(plan2("p1", ("a", "cancelled"))), v1.SessionUpdate)
    assert plan["entries"][0]["status"] == "completed"
    assert plan["entries"][0]["_meta"] == {"acp-trio/status": "cancelled"}


def test_v1_view_sends_a_display_terminal_as_the_text_of_the_tool_calls_showing_it() -> None:
    view = V1View()
    assert view.project(v2.TerminalUpdateSessionUpdate(terminal_id="t1", command="cargo test", cwd="/work")) == []
    created = v2.ToolCallUpdateSessionUpdate(
        tool_call_id="c1", title="Test", kind="execute", content=[v2.TerminalToolCallContent(terminal_id="t1")]
    )
    chunk = v2.TerminalOutputChunkSessionUpdate(terminal_id="t1", data=b64("ok 1\n\xe2\x9c".encode("latin-1")))
    rest = v2.TerminalOutputChunkSessionUpdate(terminal_id="t1", data=b64("\x93\n".encode("latin-1")))
    exited = v2.TerminalUpdateSessionUpdate(terminal_id="t1", exit_status=v2.TerminalExitStatus(exit_code=0))
    snapshot = v2.TerminalUpdateSessionUpdate(terminal_id="t1", output=v2.TerminalOutput(data=b64(b"all\n")))
    out = wire(project_all(view, [created, chunk, rest, exited, snapshot]), v1.SessionUpdate)

    def shown(text: str) -> list[dict[str, Any]]:
        return [{"type": "content", "content": {"type": "text", "text": text}}]

    assert out[0]["sessionUpdate"] == "tool_call"
    assert [u["content"] for u in out] == [
        shown("$ cargo test\n"),
        shown("$ cargo test\nok 1\n\ufffd"),  # a split code point: its bytes are kept for the next chunk
        shown("$ cargo test\nok 1\n\u2713\n"),
        shown("$ cargo test\nok 1\n\u2713\n[exit 0]"),
        shown("$ cargo test\nall\n[exit 0]"),  # a snapshot replaces the bytes
    ]
    assert all(u["toolCallId"] == "c1" for u in out)
    assert view.project(v2.TerminalOutputChunkSessionUpdate(terminal_id="t2", data=b64(b"x"))) == []  # shown nowhere


def test_v1_view_shows_a_terminal_referenced_before_its_first_update_once_that_comes() -> None:
    view = V1View()
    created = v2.ToolCallUpdateSessionUpdate(
        tool_call_id="c1",
        title="Build",
        content=[
            v2.ContentToolCallContent(content=text2("building")),
            v2.TerminalToolCallContent(terminal_id="t9"),
        ],
    )
    building = {"type": "content", "content": {"type": "text", "text": "building"}}
    (first,) = wire(view.project(created), v1.SessionUpdate)
    assert first["content"] == [building]  # nothing known of t9 yet
    (second,) = wire(view.project(v2.TerminalUpdateSessionUpdate(terminal_id="t9", command="make")), v1.SessionUpdate)
    assert second == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "content": [building, {"type": "content", "content": {"type": "text", "text": "$ make\n"}}],
    }


def test_v1_view_sends_the_exact_v1_hint_and_appends_chunks_after_it() -> None:
    diff = m.Diff(PATH, "old\n", "new\n")
    view = V1View()
    created = v2.ToolCallUpdateSessionUpdate(tool_call_id="c1", title="Edit", content=[m.diff_to_v2(diff)])
    (first,) = wire(view.project(created, m.diff_to_v1(diff)), v1.SessionUpdate)
    assert first["content"] == [{"type": "diff", "path": PATH, "oldText": "old\n", "newText": "new\n"}]
    more = v2.ToolCallContentChunkSessionUpdate(
        tool_call_id="c1", content=v2.ContentToolCallContent(content=text2("ok"))
    )
    (second,) = wire(view.project(more), v1.SessionUpdate)
    assert second["content"] == [
        {"type": "diff", "path": PATH, "oldText": "old\n", "newText": "new\n"},
        {"type": "content", "content": {"type": "text", "text": "ok"}},
    ]
    (no_hint,) = wire(V1View().project(created), v1.SessionUpdate)  # the adapter's case: the patch as text
    assert no_hint["content"][0]["content"]["text"].startswith(f"modify {PATH}\n```diff\n")
    # without a hint, an added file's patch holds the file: exact texts still (row T13)
    added = v2.ToolCallUpdateSessionUpdate(tool_call_id="c2", content=[m.diff_to_v2(m.Diff(PATH, None, "n\n"))])
    (exact,) = wire(V1View().project(added), v1.SessionUpdate)
    assert exact["content"] == [{"type": "diff", "path": PATH, "newText": "n\n"}]


def test_v1_view_maps_a_whole_message_only_while_the_client_holds_none_of_it(caplog: pytest.LogCaptureFixture) -> None:
    view = V1View()
    whole = v2.AgentMessageSessionUpdate(message_id="m1", content=[text2("a"), text2("b")])
    assert [u["content"]["text"] for u in wire(view.project(whole), v1.SessionUpdate)] == ["a", "b"]
    with pytest.raises(m.VersionError, match="cannot retract"):
        view.project(v2.AgentMessageSessionUpdate(message_id="m1", content=[text2("c")]))
    assert view.project(v2.AgentMessageSessionUpdate(message_id="m2", content=None)) == []
    assert view.project(v2.AgentMessageSessionUpdate(message_id="m1", meta={"k": 1})) == []
    assert "_meta-only upsert" in caplog.text
    assert view.project(v2.UserMessageSessionUpdate(message_id="u", content=[text2("hi")])) == []
    echoed = V1View(echo_user_messages=True).project(v2.UserMessageSessionUpdate(message_id="u", content=[text2("hi")]))
    assert wire(echoed, v1.SessionUpdate) == [
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hi"}, "messageId": "u"}
    ]


def test_v1_view_passes_text_chunks_as_their_wire_json_and_keeps_the_state_project_keeps() -> None:
    """The streaming fast path (:meth:`V1View.project_wire`): a text ``*_chunk`` is its own v1
    form, and what the typed way makes of it is the same JSON."""
    view = V1View()
    chunk = {
        "sessionUpdate": "agent_message_chunk",
        "messageId": "m1",
        "content": {"type": "text", "text": "a", "_meta": {"c": 1}, "futureBlock": [1]},
        "_meta": {"u": 1},
        "futureUpdate": True,
    }
    assert view.project_wire(chunk)
    typed = converter.structure(chunk, v2.SessionUpdate)
    assert wire(V1View().project(typed), v1.SessionUpdate) == [chunk]
    thought = {"sessionUpdate": "agent_thought_chunk", "messageId": "t", "content": {"type": "text", "text": "x"}}
    assert view.project_wire(thought)
    # the chunk was recorded as project() records it: the client holds part of m1 now
    with pytest.raises(m.VersionError, match="cannot retract"):
        view.project(v2.AgentMessageSessionUpdate(message_id="m1", content=[text2("A")]))
    # the rest goes the typed way
    typed_ways = [
        {**chunk, "content": {"type": "text", "text": "a", "annotations": {"priority": 1}}},
        {**chunk, "content": {"type": "image", "data": "AA==", "mimeType": "image/png"}},
        {**chunk, "content": {"type": "text", "text": 1}},
        {**chunk, "content": {"type": "text", "text": "a", "_meta": "not an object"}},
        {**chunk, "_meta": None},
        {**chunk, "messageId": None},
        {"sessionUpdate": "agent_message", "messageId": "m2", "content": [{"type": "text", "text": "a"}]},
        {"sessionUpdate": "usage_update", "used": 1, "size": 2},
    ]
    assert [view.project_wire(u) for u in typed_ways] == [False] * len(typed_ways)
    # so does the chunk after a dropped update: it carries the count
    assert view.project(converter.structure({"sessionUpdate": "_progress"}, v2.SessionUpdate)) == []
    assert not view.project_wire(thought)


def test_v1_view_drops_unknown_variants_with_a_warning_and_counts_them_on_the_next_update(
    caplog: pytest.LogCaptureFixture,
) -> None:
    view = V1View()
    unknown = converter.structure({"sessionUpdate": "_progress", "pct": 5}, v2.SessionUpdate)
    other_plan = converter.structure(
        {"sessionUpdate": "plan_update", "plan": {"type": "markdown", "planId": "p", "text": "# x"}}, v2.SessionUpdate
    )
    assert view.project(unknown) == []
    assert view.project(other_plan) == []
    assert "'_progress' has no v1 form" in caplog.text and "'markdown'" in caplog.text
    (next_one,) = wire(view.project(v2.UsageUpdateSessionUpdate(used=1, size=2)), v1.SessionUpdate)
    assert next_one == {"sessionUpdate": "usage_update", "used": 1, "size": 2, "_meta": {"acp-trio/dropped": 2}}
    (after,) = wire(view.project(v2.UsageUpdateSessionUpdate(used=2, size=2)), v1.SessionUpdate)
    assert "_meta" not in after


def test_v1_view_drops_unknown_content_types_and_keeps_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    view = V1View()
    video = converter.structure({"type": "_video", "url": "https://v/1"}, v2.ContentBlock)
    widget = converter.structure({"type": "_widget", "id": "w"}, v2.ToolCallContent)
    assert view.project(v2.AgentMessageChunkSessionUpdate(message_id="m1", content=video)) == []
    created = v2.ToolCallUpdateSessionUpdate(
        tool_call_id="c1",
        title="Show",
        content=[widget, v2.ContentToolCallContent(content=video), v2.ContentToolCallContent(content=text2("ok"))],
    )
    (first,) = wire(view.project(created), v1.SessionUpdate)
    assert first["content"] == [{"type": "content", "content": {"type": "text", "text": "ok"}}]
    assert first["_meta"] == {"acp-trio/dropped": 3}
    whole = v2.AgentMessageSessionUpdate(message_id="m2", content=[video, text2("caption")])
    (caption,) = wire(view.project(whole), v1.SessionUpdate)
    assert caption["content"] == {"type": "text", "text": "caption"}
    assert caption["_meta"] == {"acp-trio/dropped": 1}
    assert "'_video'" in caplog.text and "'_widget'" in caplog.text


def test_v1_view_sends_current_mode_update_when_the_mode_option_changes() -> None:
    def options(mode: str, verbose: bool) -> v2.ConfigOptionUpdateSessionUpdate:
        return v2.ConfigOptionUpdateSessionUpdate(
            config_options=[
                v2.SelectSessionConfigOption(
                    config_id="mode",
                    name="Mode",
                    category="mode",
                    current_value=mode,
                    options=[v2.SessionConfigSelectOption(value="ask", name="Ask")],
                ),
                v2.BooleanSessionConfigOption(config_id="verbose", name="Verbose", current_value=verbose),
            ]
        )

    view = V1View()
    kinds = [
        [u["sessionUpdate"] for u in wire(view.project(update), v1.SessionUpdate)]
        for update in (options("ask", False), options("ask", True), options("code", True))
    ]
    assert kinds == [
        ["config_option_update", "current_mode_update"],
        ["config_option_update"],  # the mode did not change
        ["config_option_update", "current_mode_update"],
    ]


# -- V2View: v1 → v2 --------------------------------------------------------------------------------------
def counter() -> Any:
    numbers = itertools.count(1)
    return lambda: f"msg_{next(numbers)}"


def a_v1_turn() -> list[Any]:
    content = [v1.ContentToolCallContent(content=text1("read 3 lines"))]
    return [
        v1.UserMessageChunkSessionUpdate(content=text1("hi ")),
        v1.UserMessageChunkSessionUpdate(content=text1("there")),
        v1.AgentThoughtChunkSessionUpdate(content=text1("Thinking.")),
        v1.AgentMessageChunkSessionUpdate(content=text1("Let me ")),
        v1.PlanSessionUpdate(entries=[v1.PlanEntry(content="Read", priority="high", status="pending")]),
        v1.AgentMessageChunkSessionUpdate(content=text1("read.")),  # a plan does not end the message
        v1.ToolCallSessionUpdate(tool_call_id="c1", title="Read", kind="read", status="pending", content=content),
        v1.ToolCallUpdateSessionUpdate(tool_call_id="c1", status="completed", title=None),
        v1.ToolCallSessionUpdate(tool_call_id="c1", title="Read again"),  # replaces every field in v1
        v1.AgentMessageChunkSessionUpdate(content=text1("Done.")),  # after a tool call: a new message
        v1.AgentMessageChunkSessionUpdate(content=text1("!"), message_id="own"),
        v1.PlanSessionUpdate(entries=[v1.PlanEntry(content="Read", priority="high", status="completed")]),
    ]


def test_v2_view_turn_is_message_ids_upserts_and_one_plan_id() -> None:
    out = wire(project_all(V2View(plan_id="plan_s", new_id=counter()), a_v1_turn()), v2.SessionUpdate)
    ids = [(u["sessionUpdate"], u.get("messageId")) for u in out if "messageId" in u]
    assert ids == [
        ("user_message_chunk", "msg_1"),
        ("user_message_chunk", "msg_1"),
        ("agent_thought_chunk", "msg_2"),
        ("agent_message_chunk", "msg_3"),
        ("agent_message_chunk", "msg_3"),
        ("agent_message_chunk", "msg_4"),
        ("agent_message_chunk", "msg_4"),
    ]
    calls = [u for u in out if u["sessionUpdate"] == "tool_call_update"]
    assert calls[0] == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "title": "Read",
        "kind": "read",
        "status": "pending",
        "content": [{"type": "content", "content": {"type": "text", "text": "read 3 lines"}}],
    }
    assert calls[1] == {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"}
    assert calls[2]["title"] == "Read again" and calls[2]["content"] is None and calls[2]["status"] is None
    plans = [u["plan"] for u in out if u["sessionUpdate"] == "plan_update"]
    assert [(p["type"], p["planId"], p["entries"][0]["status"]) for p in plans] == [
        ("items", "plan_s", "pending"),
        ("items", "plan_s", "completed"),
    ]


def test_v2_view_output_folds_to_the_same_messages_tool_calls_and_plan_as_the_v1_input() -> None:
    updates = a_v1_turn()
    projected = project_all(V2View(), updates)
    live, shown = fold(updates), fold(projected)
    assert (
        messages(shown)
        == messages(live)
        == [
            ("user", "hi there"),
            ("thought", "Thinking."),
            ("agent", "Let me read."),
            ("agent", "Done.!"),  # v1 gives the open message the chunk's id: one message
        ]
    )
    assert tool_calls(shown) == tool_calls(live) == [("c1", "Read again", "other", "pending", [])]
    assert v2_plan(shown) == v1_plan(live) == [("Read", "high", "completed")]


def test_v2_view_maps_current_mode_update_to_the_seeded_mode_option() -> None:
    view = V2View()
    with pytest.raises(m.VersionError, match="protocol version 2"):
        view.project(v1.CurrentModeUpdateSessionUpdate(current_mode_id="code"))
    modes = v1.SessionModeState(
        current_mode_id="ask",
        available_modes=[v1.SessionMode(id="ask", name="Ask"), v1.SessionMode(id="code", name="Code")],
    )
    verbose = v1.BooleanSessionConfigOption(id="verbose", name="Verbose", current_value=False)
    seeded = view.seed(modes=modes, config_options=[verbose])
    assert [(o.config_id, o.current_value) for o in seeded] == [("verbose", False), ("mode", "ask")]
    (update,) = wire(view.project(v1.CurrentModeUpdateSessionUpdate(current_mode_id="code")), v2.SessionUpdate)
    assert update["sessionUpdate"] == "config_option_update"
    assert [(o["configId"], o["currentValue"]) for o in update["configOptions"]] == [
        ("verbose", False),
        ("mode", "code"),
    ]
    own_mode = v1.SelectSessionConfigOption(
        id="m",
        name="M",
        category="mode",
        current_value="ask",
        options=[v1.SessionConfigSelectOption(value="ask", name="Ask")],
    )
    assert [o.config_id for o in V2View().seed(modes=modes, config_options=[own_mode])] == ["m"]  # no second one


def test_v2_view_keeps_the_mode_option_made_from_modes_across_a_v1_config_option_update() -> None:
    """A v1 agent's ``config_option_update`` never holds its modes (v1 sends them apart): the v2
    list keeps the mode option ``seed`` made, with its current value, and a later
    ``current_mode_update`` still maps (it raised VersionError before)."""
    view = V2View()
    modes = v1.SessionModeState(
        current_mode_id="ask",
        available_modes=[v1.SessionMode(id="ask", name="Ask"), v1.SessionMode(id="code", name="Code")],
    )
    view.seed(modes=modes, config_options=[])
    assert view.modes_option_id == "mode"
    view.project(v1.CurrentModeUpdateSessionUpdate(current_mode_id="code"))
    verbose = v1.BooleanSessionConfigOption(id="verbose", name="Verbose", current_value=True)
    (update,) = wire(view.project(v1.ConfigOptionUpdateSessionUpdate(config_options=[verbose])), v2.SessionUpdate)
    assert [(o["configId"], o["currentValue"]) for o in update["configOptions"]] == [
        ("verbose", True),
        ("mode", "code"),
    ]
    (again,) = view.project(v1.CurrentModeUpdateSessionUpdate(current_mode_id="ask"))
    assert [(o.config_id, o.current_value) for o in again.config_options] == [("verbose", True), ("mode", "ask")]
    assert [o.config_id for o in view.options] == ["verbose", "mode"]


def test_v2_view_gives_a_text_chunks_wire_json_the_message_id_project_gives() -> None:
    """The fast path of the adapter's second direction (:meth:`V2View.project_wire`): the same
    ``messageId`` s as :meth:`V2View.project`, whichever way each chunk goes; the rest ``None``."""
    wired_ids, typed_ids = itertools.count(), itertools.count()
    wired = V2View(new_id=lambda: f"g{next(wired_ids)}")
    typed = V2View(new_id=lambda: f"g{next(typed_ids)}")
    chunks = [
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a", "_meta": {"c": 1}}, "x": 1},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "b"}, "messageId": "v1"},
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "t"}, "_meta": {"u": 1}},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "c"}},
    ]
    out = [wired.project_wire(c) for c in chunks]
    assert out == [{**c, "messageId": "g0"} for c in chunks[:2]] + [
        {**chunks[2], "messageId": "g1"},
        {**chunks[3], "messageId": "g2"},
    ]
    assert [wire(typed.project(converter.structure(c, v1.SessionUpdate)), v2.SessionUpdate)[0] for c in chunks] == out
    # the annotated or non-text chunk, a bad messageId or _meta, another update: the typed way
    for update in (
        {**chunks[3], "content": {"type": "text", "text": "c", "annotations": {"priority": 1}}},
        {**chunks[3], "content": {"type": "image", "data": "AA==", "mimeType": "image/png"}},
        {**chunks[3], "messageId": 7},
        {**chunks[3], "_meta": []},
        {"sessionUpdate": "plan", "entries": []},
    ):
        assert wired.project_wire(update) is None


def test_v2_view_forwards_an_unknown_v1_variant_as_v2s_catch_all() -> None:
    unknown = converter.structure({"sessionUpdate": "_progress", "pct": 5}, v1.SessionUpdate)
    (forwarded,) = V2View().project(unknown)
    assert type(forwarded) is v2.SessionUpdateOther
    assert converter.unstructure(forwarded) == {"sessionUpdate": "_progress", "pct": 5}


def test_a_v2_turn_through_both_views_folds_to_what_it_was() -> None:
    updates = a_v2_turn()
    back = project_all(V2View(), project_all(V1View(echo_user_messages=True), updates))
    live, again = fold(updates), fold(back)
    assert messages(again) == messages(live)
    assert tool_calls(again) == tool_calls(live)
    assert v2_plan(again) == v2_plan(live)  # two v2 plans come back as the one v1 plan's entries

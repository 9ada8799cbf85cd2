"""The v2 upsert helper (acp_trio.upsert): omitted = unchanged, null = cleared, value = replaced, chunks append.

Spec: ``docs/protocol/v2/migration.mdx`` ("Updates are upserts", Messages and message IDs, Tool
calls, Agent-owned terminal display), ``v2/prompt-lifecycle.mdx`` (Message IDs),
``v2/tool-calls.mdx`` (Reporting, Streaming Content); ``schema/v2/schema.json`` (``ToolCallUpdate``:
``kind`` null resets to ``other``, ``status`` to ``pending``; ``_meta``: "An object patches the
stored metadata by top-level key").  Each rule is checked on generated objects and on wire JSON.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from acp_schema import v1, v2, v2_unstable
from acp_trio import UNSET, converter
from acp_trio.upsert import append_item, apply_patch, patch_fields, patch_mapping, patch_value, upsert

TOOL_CALL_CLEARED = {"title": "", "kind": "other", "status": "pending", "content": [], "locations": []}


def text(value: str) -> v2.TextContentBlock:
    return v2.TextContentBlock(text=value)


def item(value: str) -> v2.ContentToolCallContent:
    return v2.ContentToolCallContent(content=text(value))


def wire_update(update: dict[str, Any]) -> Any:
    """A wire ``session/update``'s update, decoded as the runtime decodes it."""
    notification = converter.structure({"sessionId": "s1", "update": update}, v2.UpdateSessionNotification)
    return notification.update


@attrs.define
class Call:
    """A stand-in state entry: the helper works on any attrs object."""

    tool_call_id: str
    title: str = ""
    name: str | None = None
    kind: str = "other"
    status: str = "pending"
    content: list[Any] = attrs.field(factory=list)
    locations: list[Any] = attrs.field(factory=list)
    raw_input: Any = None
    raw_output: Any = None
    capabilities: Any = None
    meta: dict[str, Any] | None = None
    extra_fields: dict[str, Any] = attrs.field(factory=dict)


@attrs.define
class Message:
    message_id: str
    content: list[Any] = attrs.field(factory=list)
    meta: dict[str, Any] | None = None


def full_call() -> Call:
    return Call(
        "call_001",
        title="Reading configuration file",
        name="read_file",
        kind="read",
        status="in_progress",
        content=[item("one")],
        locations=[v2.ToolCallLocation(path="/p/a", line=3)],
        raw_input={"path": "/p/a"},
        raw_output={"ok": True},
        capabilities=v2.ToolCallCapabilities(cancel=v2.ToolCallCancelCapabilities()),
        meta={"a": 1, "b": {"x": 1}},
        extra_fields={"_vendor": 1},
    )


# -- the single-value rules ------------------------------------------------------------------------


def test_patch_value_omitted_keeps_null_clears_a_value_replaces() -> None:
    assert patch_value("old", UNSET, cleared="") == "old"
    assert patch_value("old", None, cleared="") == ""
    assert patch_value("old", "new", cleared="") == "new"
    cleared: list[int] = []
    assert patch_value([1], None, cleared=cleared) == [] and patch_value([1], None, cleared=cleared) is not cleared
    given = [2, 3]
    result = patch_value([1], given, cleared=[])
    assert result == [2, 3] and result is not given  # a concrete array replaces, copied
    assert patch_value([1], [], cleared=[]) == []  # [] clears like null


def test_patch_mapping_patches_meta_by_top_level_key() -> None:
    stored = {"a": 1, "b": {"x": 1}, "c": 3}
    assert patch_mapping(stored, UNSET) == stored and patch_mapping(stored, UNSET) is not stored
    assert patch_mapping(None, UNSET) is None
    assert patch_mapping(stored, None) is None  # null clears
    # keys it omits are unchanged, a key set to null is removed, others replace without nested merging
    assert patch_mapping(stored, {"b": {"y": 2}, "c": None, "d": 4}) == {"a": 1, "b": {"y": 2}, "d": 4}
    assert stored == {"a": 1, "b": {"x": 1}, "c": 3}  # never mutated
    assert patch_mapping(None, {"a": 1, "z": None}) == {"a": 1}
    assert patch_mapping(None, {}) == {}  # an object, even empty, sets metadata


def test_patch_fields_are_every_field_but_union_tags_and_extra_fields() -> None:
    assert patch_fields(v2.ToolCallUpdateSessionUpdate(tool_call_id="t")) == [
        "tool_call_id",
        "name",
        "title",
        "kind",
        "status",
        "content",
        "locations",
        "raw_input",
        "raw_output",
        "capabilities",
        "meta",
    ]
    assert patch_fields(v2.AgentMessageSessionUpdate(message_id="m")) == ["message_id", "content", "meta"]
    with pytest.raises(TypeError, match="attrs object"):
        patch_fields({"title": "x"})


# -- tool calls --------------------------------------------------------------------------------------


def test_omitted_fields_leave_the_tool_call_unchanged() -> None:
    call = full_call()
    assert apply_patch(call, v2.ToolCallUpdateSessionUpdate(tool_call_id="call_001"), cleared=TOOL_CALL_CLEARED) is call
    assert call == full_call()
    apply_patch(call, wire_update({"sessionUpdate": "tool_call_update", "toolCallId": "call_001"}))
    assert call == full_call()


def test_null_clears_each_tool_call_field_to_its_protocol_default() -> None:
    every_null = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call_001",
        "title": None,
        "name": None,
        "kind": None,
        "status": None,
        "content": None,
        "locations": None,
        "rawInput": None,
        "rawOutput": None,
        "capabilities": None,
        "_meta": None,
    }
    patch = wire_update(every_null)
    assert patch.title is None and patch.raw_input is None  # the wire's null survives decoding
    call = apply_patch(full_call(), patch, cleared=TOOL_CALL_CLEARED)
    # title unset (""), kind resets to other, status to pending, collections empty, the rest None
    assert call == Call("call_001", extra_fields={"_vendor": 1})
    built = v2.ToolCallUpdateSessionUpdate(
        tool_call_id="call_001",
        title=None,
        name=None,
        kind=None,
        status=None,
        content=None,
        locations=None,
        raw_input=None,
        raw_output=None,
        capabilities=None,
        meta=None,
    )
    assert apply_patch(full_call(), built, cleared=TOOL_CALL_CLEARED) == call


def test_values_replace_and_arrays_replace_the_whole_collection() -> None:
    call = full_call()
    patch = wire_update(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "call_001",
            "title": "Edited",
            "kind": "edit",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "two"}}],
            "locations": [],
            "rawOutput": "done",
            "capabilities": {},
        }
    )
    apply_patch(call, patch, cleared=TOOL_CALL_CLEARED)
    assert (call.title, call.kind, call.status, call.raw_output) == ("Edited", "edit", "completed", "done")
    assert call.content == [item("two")] and call.locations == []  # [] clears like null
    assert call.capabilities == v2.ToolCallCapabilities()
    assert (call.name, call.raw_input) == ("read_file", {"path": "/p/a"})  # omitted: unchanged
    assert call.content is not patch.content  # copied: a later chunk does not touch the patch
    append_item(call, "content", item("three"))
    assert patch.content == [item("two")] and call.content == [item("two"), item("three")]


def test_chunks_append_and_a_later_whole_content_replaces_them() -> None:
    # tool-calls.mdx, Streaming Content: a chunk appends, a tool_call_update with content replaces all
    call = Call("t")
    for chunk in (
        wire_update(
            {
                "sessionUpdate": "tool_call_content_chunk",
                "toolCallId": "t",
                "content": {"type": "content", "content": {"type": "text", "text": "a"}},
                "_meta": {"chunk": True},
            }
        ),
        v2.ToolCallContentChunkSessionUpdate(tool_call_id="t", content=item("b")),
    ):
        append_item(call, "content", chunk.content)
    assert call.content == [item("a"), item("b")] and call.meta is None  # a chunk's _meta is chunk-scoped
    apply_patch(call, v2.ToolCallUpdateSessionUpdate(tool_call_id="t", content=[item("c")]))
    append_item(call, "content", item("d"))
    assert call.content == [item("c"), item("d")]
    apply_patch(call, v2.ToolCallUpdateSessionUpdate(tool_call_id="t", content=[]))
    assert call.content == []


def test_meta_is_patched_by_key_and_extra_fields_by_the_same_three_states() -> None:
    call = full_call()
    apply_patch(
        call,
        wire_update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call_001",
                "_meta": {"a": None, "b": {"y": 2}, "c": 3},
                "_vendor": None,
                "_other": [1],
            }
        ),
    )
    assert call.meta == {"b": {"y": 2}, "c": 3}
    assert call.extra_fields == {"_other": [1]}  # null removed _vendor, a value added _other
    apply_patch(call, wire_update({"sessionUpdate": "tool_call_update", "toolCallId": "call_001", "_meta": None}))
    assert call.meta is None and call.extra_fields == {"_other": [1]}  # omitted extra keys: unchanged


def test_tags_are_not_copied_and_unknown_targets_are_ignored() -> None:
    @attrs.define
    class Tagged:
        session_update: str = "mine"
        title: str | None = None

    target = Tagged()
    apply_patch(target, v2.ToolCallUpdateSessionUpdate(tool_call_id="t", title="T", kind="read"))
    assert target == Tagged("mine", "T")  # sessionUpdate is a tag; kind has no home here
    with pytest.raises(TypeError, match="current state"):
        apply_patch({"title": None}, v2.ToolCallUpdateSessionUpdate(tool_call_id="t"))


def test_only_skip_cleared_and_merge_options() -> None:
    call = full_call()
    patch = v2.ToolCallUpdateSessionUpdate(tool_call_id="other", title="T", status=None, meta={"z": 1})
    apply_patch(call, patch, only={"title", "status"}, cleared={"status": "pending"})
    assert (call.tool_call_id, call.title, call.status, call.meta) == (
        "call_001",
        "T",
        "pending",
        {"a": 1, "b": {"x": 1}},
    )
    call = full_call()
    apply_patch(call, patch, skip={"tool_call_id", "title"}, merge=())
    assert (call.tool_call_id, call.title, call.status, call.meta) == (
        "call_001",
        "Reading configuration file",
        None,
        {"z": 1},
    )


def test_the_helper_is_variant_agnostic() -> None:
    # the current state may itself be a generated object, patched by another variant's update
    current = v2.ToolCallUpdate(tool_call_id="t", title="Old", kind="read", meta={"k": 1})
    apply_patch(current, v2_unstable.ToolCallUpdateSessionUpdate(tool_call_id="t", title="New", meta={"j": 2}))
    assert (current.title, current.kind, current.meta) == ("New", "read", {"k": 1, "j": 2})
    info = v1.SessionInfoUpdateSessionUpdate(title="T", updated_at="2025-01-01T00:00:00Z")
    apply_patch(info, v2.SessionInfoUpdateSessionUpdate(title=None))
    assert (info.title, info.updated_at) == (None, "2025-01-01T00:00:00Z")


# -- messages ----------------------------------------------------------------------------------------


def test_the_spec_example_whole_message_then_chunks_then_a_replacement() -> None:
    # prompt-lifecycle.mdx, Message IDs: agent_message [A], chunk B -> [A, B]; agent_message [C] -> [C]; chunks append
    store: dict[str, Message] = {}
    stream = [
        {"sessionUpdate": "agent_message", "messageId": "m", "content": [{"type": "text", "text": "A"}]},
        {"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": {"type": "text", "text": "B"}},
        {"sessionUpdate": "agent_message", "messageId": "m", "content": [{"type": "text", "text": "C"}]},
        {"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": {"type": "text", "text": "D"}},
    ]
    seen: list[list[str]] = []
    for raw in stream:
        update = wire_update(raw)
        if raw["sessionUpdate"].endswith("_chunk"):
            message = store.setdefault("m", Message("m"))
            append_item(message, "content", update.content)
        else:
            message, _ = upsert(store, "m", update, lambda: Message("m"), cleared={"content": []})
        seen.append([block.text for block in message.content])
    assert seen == [["A"], ["A", "B"], ["C"], ["C", "D"]]


@pytest.mark.parametrize("cleared_with", [None, []])
def test_message_content_omitted_keeps_null_or_empty_clears(cleared_with: list[Any] | None) -> None:
    message = Message("m", [text("A"), text("B")], {"k": 1})
    apply_patch(message, v2.UserMessageSessionUpdate(message_id="m", meta={"j": 2}), cleared={"content": []})
    assert message == Message("m", [text("A"), text("B")], {"k": 1, "j": 2})  # only _meta changed
    apply_patch(
        message,
        wire_update({"sessionUpdate": "user_message", "messageId": "m", "content": cleared_with}),
        cleared={"content": []},
    )
    assert message.content == [] and message.meta == {"k": 1, "j": 2}


def test_upsert_creates_with_defaults_then_patches_in_place() -> None:
    store: dict[str, Call] = {}
    first = v2.ToolCallUpdateSessionUpdate(tool_call_id="t", title="Read", status="pending")
    entry, created = upsert(store, "t", first, lambda: Call("t"), cleared=TOOL_CALL_CLEARED)
    assert created and store == {"t": entry}
    assert entry == Call("t", title="Read")  # omitted fields on a new id: the defaults (kind other)
    again, created = upsert(
        store, "t", v2.ToolCallUpdateSessionUpdate(tool_call_id="t", status="completed"), lambda: Call("x")
    )
    assert again is entry and not created and entry.status == "completed" and entry.title == "Read"


def test_append_item_starts_a_missing_list() -> None:
    @attrs.define
    class Loose:
        content: Any = UNSET

    for start in (UNSET, None):
        loose = Loose(start)
        assert append_item(loose, "content", 1) is loose and loose.content == [1]

"""The compiled hooks' fast paths decide exactly as the full paths do.

Each compiled class hook has fast paths for the common shapes (structure: the required keys and no
other, or a function specialized to the object's keys when it carries optional fields, values of
the right kind; unstructure: no optional field set, no extra fields) and falls through to its full
path for anything else.  Here a converter with the fast paths and one without
(``AcpConverter(fast_paths=False)``) decode the same inputs: every JSON-RPC example of the spec
pages (``tests/golden``), and each of them mutated one place at a time (a key removed, a value
replaced by another JSON kind, an unknown key added, at every depth).  They must return equal
objects that encode to the same bytes (keys in the same order), or raise the same ``DecodeError``
(message and JSON path).
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_trio import DecodeError
from acp_trio._converter import _LEARN_AFTER, _MAX_DEPTH, AcpConverter

GOLDEN = Path(__file__).parent / "golden"
VARIANTS = ("v1", "v1_unstable", "v2", "v2_unstable")
REPLACEMENTS: tuple[Any, ...] = (None, 0, 1.5, True, "x", [], {}, {"type": "text"}, [{"type": "text", "text": "t"}])


def _examples(variant: str) -> list[tuple[Any, Any]]:
    mod = importlib.import_module(f"acp_schema.{variant}")
    out = []
    for m in json.loads((GOLDEN / f"{variant}.json").read_text(encoding="utf-8"))["messages"]:
        msg = m["message"]
        if m["kind"] == "error":
            out.append((mod.Error, msg["error"]))
            continue
        spec = (mod.NOTIFICATIONS if m["kind"] == "notification" else mod.REQUESTS).get(m["method"])
        if spec is None:  # an extension method
            continue
        if m["kind"] in ("request", "notification"):
            out.append((spec.params_type, msg.get("params")))
        else:
            out.append((spec.result_type, msg["result"]))
    return out


def _mutations(value: Any) -> Iterator[Any]:
    """``value`` changed in one place: at every object, each key removed, each value replaced by
    each of ``REPLACEMENTS``, an unknown key added; at every array, each item replaced likewise."""
    if isinstance(value, dict):
        yield {**value, "zzUnknown": 1}
        for key, item in value.items():
            yield {k: v for k, v in value.items() if k != key}
            for other in REPLACEMENTS:
                yield {**value, key: other}
            for changed in _mutations(item):
                yield {**value, key: changed}
    elif isinstance(value, list):
        for i, item in enumerate(value):
            for other in REPLACEMENTS:
                yield [*value[:i], other, *value[i + 1 :]]
            for changed in _mutations(item):
                yield [*value[:i], changed, *value[i + 1 :]]


def _outcome(conv: AcpConverter, value: Any, t: Any) -> tuple[str, Any]:
    try:
        obj = conv.structure(value, t)
    except DecodeError as exc:
        return "error", (str(exc), exc.json_path)
    return "value", obj


@pytest.mark.parametrize("variant", VARIANTS)
def test_fast_and_full_paths_agree_on_the_spec_examples_and_their_mutations(variant: str) -> None:
    fast, full = AcpConverter(), AcpConverter(fast_paths=False)
    examples = _examples(variant)
    assert len(examples) >= 50
    compared = decoded = 0
    for t, example in examples:
        for value in (example, *_mutations(example)):
            got, want = _outcome(fast, value, t), _outcome(full, value, t)
            assert got == want, (t, value)
            compared += 1
            if got[0] == "value":
                decoded += 1
                obj = got[1]
                assert orjson.dumps(fast.unstructure(obj)) == orjson.dumps(full.unstructure(obj)), (t, value)
    # the mutations reach both paths: many decode (fast path or full), many are rejected
    assert compared > 3_000
    assert 0.1 < decoded / compared < 0.9


def test_the_fast_paths_are_taken() -> None:
    """The common shapes go through the fast path (a failure there would only cost speed; this
    pins that the fast path exists and is used, by its code's line numbers)."""
    from acp_schema import v1

    conv = AcpConverter()
    wire = {
        "sessionId": "s",
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}},
    }
    structure = conv.structure_fn(v1.SessionNotification)
    unstructure = conv.unstructure_fn(v1.SessionNotification)
    out, seen = _traced("return", lambda: unstructure(structure(wire)))
    assert out == wire
    # both returned from their fast path, which is the first lines of the function
    lines = [line for name, line, _ in seen if name.endswith("_SessionNotification")]
    assert len(lines) == 2 and all(line < 20 for line in lines), lines


def _traced(event: str, call: Callable[[], Any]) -> tuple[Any, list[tuple[str, int, bool]]]:
    """``call()`` and, for each ``event`` ("call" or "return") of a generated function during it,
    in order: the function's name, its line then, and whether its full path ran (it counts the
    keys it has read in ``n``)."""
    seen: list[tuple[str, int, bool]] = []

    def trace(frame: Any, what: str, arg: Any) -> Any:
        name = frame.f_code.co_name
        if what == event and name.startswith(("structure_", "unstructure_")):
            seen.append((name, frame.f_lineno, "n" in frame.f_locals))
        return trace

    sys.settrace(trace)
    try:
        out = call()
    finally:
        sys.settrace(None)
    return out, seen


def _returned_from(fn: Any, value: Any) -> tuple[Any, list[str]]:
    """``fn(value)`` and the names of the generated functions that returned during the call."""
    out, seen = _traced("return", lambda: fn(value))
    return out, [name for name, _, _ in seen]


def test_an_object_with_optional_fields_is_built_by_the_function_of_its_shape() -> None:
    from acp_schema import v1

    fast, full = AcpConverter(), AcpConverter(fast_paths=False)
    structure = fast.structure_fn(v1.ToolCallUpdate)
    wire = {"toolCallId": "t1", "title": "Edit x", "kind": "edit"}
    for _ in range(2):  # learned on the first value, looked up on the second
        obj, names = _returned_from(structure, wire)
        assert obj == full.structure(wire, v1.ToolCallUpdate)
        assert names == ["structure_ToolCallUpdate_shape0", "structure_ToolCallUpdate"]
    # the same keys with a value the shape's checks reject: the full path decides, as it would alone
    for bad in ({"toolCallId": "t1", "title": None, "kind": "edit"}, {"toolCallId": "t1", "title": "x", "kind": "?"}):
        got, want = _outcome(fast, bad, v1.ToolCallUpdate), _outcome(full, bad, v1.ToolCallUpdate)
        assert got == want
    # keys in another order are another shape; an unknown key is never specialized
    _, names = _returned_from(structure, {"kind": "edit", "toolCallId": "t1", "title": "Edit x"})
    assert names[0] == "structure_ToolCallUpdate_shape1"
    odd = {"toolCallId": "t1", "title": "x", "zzUnknown": 1}
    obj, names = _returned_from(structure, odd)
    assert names == ["structure_ToolCallUpdate"] and obj.extra_fields == {"zzUnknown": 1}


def test_shapes_beyond_the_limit_decode_by_the_full_path() -> None:
    import itertools

    from acp_schema import v1

    fast, full = AcpConverter(), AcpConverter(fast_paths=False)
    structure = fast.structure_fn(v1.ToolCallUpdate)
    optional = {"title": "t", "kind": "read", "status": "pending", "rawInput": {"a": 1}, "locations": [{"path": "/p"}]}
    learned: set[str] = set()
    shapes = 0
    for k in range(1, len(optional) + 1):
        for keys in itertools.permutations(optional, k):
            wire = {"toolCallId": "t1", **{key: optional[key] for key in keys}}
            obj, names = _returned_from(structure, wire)
            assert obj == full.structure(wire, v1.ToolCallUpdate)
            assert orjson.dumps(fast.unstructure(obj)) == orjson.dumps(full.unstructure(obj))
            learned.update(name for name in names if "_shape" in name)
            shapes += 1
    assert shapes > 300
    assert len(learned) == 16  # _MAX_SHAPES: the rest took the full path


# --- tagged unions inlined in a parent's fast path --------------------------------------------------

_CHUNK = {
    "sessionId": "s",
    "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}},
}


def _learnt(conv: AcpConverter, t: Any, *values: Any) -> None:
    """Decode and re-encode ``values`` enough times for each union level to learn its members
    (``_LEARN_AFTER`` values each, one level after the other)."""
    for _ in range(_MAX_DEPTH * _LEARN_AFTER):
        for value in values:
            conv.unstructure(conv.structure(value, t))


def test_learnt_union_members_are_decoded_and_encoded_inline() -> None:
    """Once a member has come, a parent's fast path decodes (and encodes) it with no call to the
    member's hook: a streamed update is one generated function each way, not three."""
    from acp_schema import v1

    conv = AcpConverter()
    _learnt(conv, v1.SessionNotification, _CHUNK)
    structure, unstructure = conv.structure_fn(v1.SessionNotification), conv.unstructure_fn(v1.SessionNotification)
    (obj, out), seen = _traced("call", lambda: (obj := structure(_CHUNK), unstructure(obj)))
    assert [name for name, _, _ in seen] == ["structure_SessionNotification", "unstructure_SessionNotification"]
    assert obj == AcpConverter(fast_paths=False).structure(_CHUNK, v1.SessionNotification)
    assert type(obj.update) is v1.AgentMessageChunkSessionUpdate and type(obj.update.content) is v1.TextContentBlock
    assert orjson.dumps(out) == orjson.dumps(_CHUNK)


class _Tag(str):
    """A tag that compares equal to a known one but is not a ``str`` (the full path rejects it)."""


def _chunk(update: Any) -> dict[str, Any]:
    return {"sessionId": "s", "update": update}


NEAR_MISSES: tuple[Any, ...] = (
    # an inlined member's key count with other keys: a required key missing, an unknown one
    _chunk({"sessionUpdate": "agent_message_chunk", "messageId": "m"}),
    _chunk({"sessionUpdate": "agent_message_chunk", "zz": {"type": "text", "text": "x"}}),
    _chunk({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "zz": "x"}}),
    # its optional keys, its values of another kind, a null
    _chunk({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}, "messageId": "m"}),
    _chunk({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": 5}}),
    _chunk({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": None}}),
    _chunk({"sessionUpdate": "agent_message_chunk", "content": None}),
    _chunk({"sessionUpdate": "agent_message_chunk", "content": "text"}),
    _chunk({"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "AA", "mimeType": "i/p"}}),
    _chunk({"sessionUpdate": "agent_message_chunk", "content": {"type": "zz", "text": "x"}}),
    _chunk({"sessionUpdate": "agent_message_chunk", "content": {"type": ["text"], "text": "x"}}),
    # a tag equal to the member's that is not a str, at either level
    _chunk({"sessionUpdate": _Tag("agent_message_chunk"), "content": {"type": "text", "text": "x"}}),
    _chunk({"sessionUpdate": "agent_message_chunk", "content": {"type": _Tag("text"), "text": "x"}}),
    # other members, an unknown tag, no tag, not an object
    _chunk({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "x"}}),
    _chunk({"sessionUpdate": "zz_unknown", "content": {"type": "text", "text": "x"}}),
    _chunk({"content": {"type": "text", "text": "x"}}),
    _chunk(["agent_message_chunk"]),
    _chunk(None),
)


@pytest.mark.parametrize("value", NEAR_MISSES, ids=range(len(NEAR_MISSES)))
def test_inlined_members_decide_exactly_as_the_full_path(value: Any) -> None:
    from acp_schema import v1

    fast, full = AcpConverter(), AcpConverter(fast_paths=False)
    _learnt(fast, v1.SessionNotification, _CHUNK)
    for _ in range(_LEARN_AFTER + 1):  # (at the end, whatever the value taught is inlined too)
        got, want = _outcome(fast, value, v1.SessionNotification), _outcome(full, value, v1.SessionNotification)
        assert got == want
        if got[0] == "value":
            encoded = orjson.dumps(fast.unstructure(got[1]))
            assert encoded == orjson.dumps(full.unstructure(got[1]))


def test_a_learnt_message_and_all_its_mutations_decide_as_the_full_path() -> None:
    from acp_schema import v1

    fast, full = AcpConverter(), AcpConverter(fast_paths=False)
    tool_call = _chunk({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read", "kind": "read"})
    _learnt(fast, v1.SessionNotification, _CHUNK, tool_call)
    for example in (_CHUNK, tool_call):
        for value in (example, *_mutations(example)):
            got, want = _outcome(fast, value, v1.SessionNotification), _outcome(full, value, v1.SessionNotification)
            assert got == want, value
            if got[0] == "value":
                assert orjson.dumps(fast.unstructure(got[1])) == orjson.dumps(full.unstructure(got[1])), value


def test_an_inlined_class_with_optional_fields_or_extra_fields_encodes_as_the_full_path() -> None:
    from acp_schema import v1

    fast, full = AcpConverter(), AcpConverter(fast_paths=False)
    _learnt(fast, v1.SessionNotification, _CHUNK)
    text = v1.TextContentBlock(text="x")
    for obj in (
        v1.SessionNotification(session_id="s", update=v1.AgentMessageChunkSessionUpdate(content=text, message_id="m")),
        v1.SessionNotification(
            session_id="s",
            update=v1.AgentMessageChunkSessionUpdate(content=text, extra_fields={"zz": 1}),
        ),
        v1.SessionNotification(
            session_id="s",
            update=v1.AgentMessageChunkSessionUpdate(
                content=v1.TextContentBlock(text="x", annotations=v1.Annotations(priority=0.5))
            ),
        ),
        v1.SessionNotification(
            session_id="s",
            update=v1.AgentMessageChunkSessionUpdate(content=v1.ImageContentBlock(data="AA", mime_type="i/p")),
        ),
        v1.SessionNotification(session_id="s", update=v1.AgentThoughtChunkSessionUpdate(content=text)),
    ):
        for _ in range(_LEARN_AFTER + 1):
            assert orjson.dumps(fast.unstructure(obj)) == orjson.dumps(full.unstructure(obj))


def test_a_site_inlines_a_bounded_number_of_members() -> None:
    """Past ``_MAX_INLINE`` members of one union field, the others keep their own hooks (and decode
    the same); the hook's code stays bounded however many members come."""
    from acp_schema import v1
    from acp_trio._converter import _MAX_INLINE

    fast, full = AcpConverter(), AcpConverter(fast_paths=False)
    text = {"type": "text", "text": "x"}
    updates = [
        {"sessionUpdate": "user_message_chunk", "content": text},
        {"sessionUpdate": "agent_message_chunk", "content": text},
        {"sessionUpdate": "agent_thought_chunk", "content": text},
        {"sessionUpdate": "current_mode_update", "currentModeId": "m"},
        {"sessionUpdate": "plan", "entries": []},
        {"sessionUpdate": "available_commands_update", "availableCommands": []},
    ]
    assert len(updates) > _MAX_INLINE
    structure = fast.structure_fn(v1.SessionNotification)
    _learnt(fast, v1.SessionNotification, *map(_chunk, updates))
    for k, update in enumerate(updates):
        obj, names = _returned_from(structure, _chunk(update))
        assert obj == full.structure(_chunk(update), v1.SessionNotification)
        inlined = names == ["structure_SessionNotification"]
        assert inlined == (k < _MAX_INLINE), (k, names)


def test_another_shape_of_an_inlined_member_goes_to_its_hook_not_to_the_full_path() -> None:
    """A tool call update with its content instead of its status has the key count of the learnt
    one: the inlined fetch misses a key and hands the value to the member's hook, and the parent
    still returns from its fast path (the full path, which counts keys in ``n``, never runs)."""
    from acp_schema import v1

    fast, full = AcpConverter(), AcpConverter(fast_paths=False)
    status = _chunk({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"})
    content = _chunk({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "title": "Read x"})
    _learnt(fast, v1.SessionNotification, status)
    structure = fast.structure_fn(v1.SessionNotification)
    for value in (content, status, content):
        obj, seen = _traced("return", lambda value=value: structure(value))
        returns = [(name, full_path_ran) for name, _, full_path_ran in seen]
        assert obj == full.structure(value, v1.SessionNotification)
        assert returns[-1] == ("structure_SessionNotification", False), returns
        through_hook = ("structure_ToolCallUpdateSessionUpdate", False) in returns
        assert len(returns) == 1 if value is status else through_hook, returns


@pytest.mark.one_interpreter  # a hypothesis sweep of the converter's decisions (40-80 s of CPU); the other tests here run on every interpreter
@pytest.mark.parametrize("variant", ["v1", "v2"])
def test_learning_from_any_updates_in_any_order_decides_as_the_full_path(variant: str) -> None:
    """Schema-valid ``session/update`` params (hypothesis-jsonschema, from the pinned schema) and a
    sample of their one-place mutations, in drawn order, ``_LEARN_AFTER`` times over, through a fresh
    converter that learns from them: every outcome is the full path's (the same object, or the same error)."""
    from _schema_strategies import strategy_for
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    t = importlib.import_module(f"acp_schema.{variant}").NOTIFICATIONS["session/update"].params_type

    @settings(
        max_examples=15,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(values=st.lists(strategy_for(variant, t.__name__), min_size=1, max_size=6), data=st.data())
    def learn(values: list[Any], data: st.DataObject) -> None:
        mutated = [data.draw(st.sampled_from(list(_mutations(value)))) for value in values for _ in range(3)]
        fast, full = AcpConverter(), AcpConverter(fast_paths=False)
        for value in [*values, *mutated] * _LEARN_AFTER:
            got, want = _outcome(fast, value, t), _outcome(full, value, t)
            assert got == want, value
            if got[0] == "value":  # (json, not orjson: the schema's integers may exceed 64 bits)
                assert json.dumps(fast.unstructure(got[1])) == json.dumps(full.unstructure(got[1])), value

    learn()


def test_a_member_that_comes_a_few_times_takes_no_place_from_those_that_stream() -> None:
    """A session's available commands come once; the four updates that stream after them are the
    ones inlined (a member is learnt at its ``_LEARN_AFTER``-th value, not its first)."""
    from acp_schema import v1
    from acp_trio._converter import _MAX_INLINE

    fast = AcpConverter()
    text = {"type": "text", "text": "x"}
    once = _chunk({"sessionUpdate": "available_commands_update", "availableCommands": []})
    streamed = [
        _chunk({"sessionUpdate": "agent_message_chunk", "content": text}),
        _chunk({"sessionUpdate": "agent_thought_chunk", "content": text}),
        _chunk({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Read", "kind": "read"}),
        _chunk({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed"}),
    ]
    assert len(streamed) == _MAX_INLINE
    structure = fast.structure_fn(v1.SessionNotification)
    for _ in range(_LEARN_AFTER - 1):
        structure(once)
    _learnt(fast, v1.SessionNotification, *streamed)
    for value in streamed:
        _, names = _returned_from(structure, value)
        assert names == ["structure_SessionNotification"], (value, names)
    _, names = _returned_from(structure, once)
    assert names == ["structure_AvailableCommandsUpdateSessionUpdate", "structure_SessionNotification"], names


def test_an_inlined_class_with_an_optional_field_set_is_encoded_inline_too() -> None:
    """A v1 agent that sets ``messageId`` on every chunk: the chunk's class is inlined in the
    notification's encode, its optional fields and all (the chunk's own function is not called)."""
    from acp_schema import v1

    fast, full = AcpConverter(), AcpConverter(fast_paths=False)
    obj = v1.SessionNotification(
        session_id="s",
        update=v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text="x"), message_id="m"),
    )
    unstructure = fast.unstructure_fn(v1.SessionNotification)
    for _ in range(_MAX_DEPTH * _LEARN_AFTER):
        unstructure(obj)
    out, seen = _traced("call", lambda: unstructure(obj))
    assert [name for name, _, _ in seen] == ["unstructure_SessionNotification", "unstructure_TextContentBlock"]
    assert orjson.dumps(out) == orjson.dumps(full.unstructure(obj))
    assert out["update"]["messageId"] == "m"

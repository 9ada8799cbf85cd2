"""The converter's wire rules: exact round trips, unknown data kept, leniency, and typed decode errors."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from acp_schema import v1, v2, v2_unstable
from acp_trio import UNSET, AcpConverter, DecodeError, converter, dumps, loads, value_or_default


def round_trip(value: Any, t: Any) -> Any:
    return converter.unstructure(converter.structure(value, t))


def test_absent_optional_fields_are_unset_and_stay_absent() -> None:
    block = converter.structure({"type": "text", "text": "hi"}, v1.ContentBlock)
    assert isinstance(block, v1.TextContentBlock)
    assert block.annotations is UNSET and block.meta is UNSET
    assert converter.unstructure(block) == {"type": "text", "text": "hi"}


def test_explicit_null_stays_null_where_the_schema_allows_it() -> None:
    value = {"type": "text", "text": "hi", "annotations": None, "_meta": None}
    block = converter.structure(value, v1.ContentBlock)
    assert block.annotations is None and block.meta is None
    assert converter.unstructure(block) == value


def test_camel_case_wire_names_and_meta_pass_through_untouched() -> None:
    meta = {"traceparent": "00-abc-def-01", "nested": {"x": [1, None, {"y": False}]}}
    value = {"sessionId": "s1", "prompt": [{"type": "text", "text": "a"}], "_meta": meta}
    req = converter.structure(value, v1.PromptRequest)
    assert req.session_id == "s1" and req.meta == meta
    assert round_trip(value, v1.PromptRequest) == value


def test_unknown_fields_inside_known_structs_survive_decode_and_encode() -> None:
    value = {"sessionId": "s1", "prompt": [{"type": "text", "text": "a", "futureField": {"k": 1}}], "newTop": [1, 2]}
    req = converter.structure(value, v1.PromptRequest)
    assert req.extra_fields == {"newTop": [1, 2]}
    assert round_trip(value, v1.PromptRequest) == value


@pytest.mark.parametrize("variant", [v1, v2])
def test_unknown_union_variant_decodes_to_the_catch_all_and_re_encodes_exactly(variant: Any) -> None:
    value = {"type": "hologram", "frames": [1, 2, 3], "_meta": {"a": 1}}
    block = converter.structure(value, variant.ContentBlock)
    assert isinstance(block, variant.ContentBlockOther)
    assert block.type == "hologram"
    assert converter.unstructure(block) == value


def test_unknown_session_update_in_v1_is_kept_verbatim() -> None:
    value = {"sessionId": "s", "update": {"sessionUpdate": "weather_report", "sunny": True}}
    note = converter.structure(value, v1.SessionNotification)
    assert isinstance(note.update, v1.SessionUpdateOther)
    assert converter.unstructure(note) == value


def test_nested_tags_dispatch_on_both_levels() -> None:
    value = {
        "sessionId": "s",
        "update": {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"},
    }
    note = converter.structure(value, v2_unstable.UpdateSessionNotification)
    assert isinstance(note.update, v2_unstable.IdleStateUpdateSessionUpdate)
    assert note.update.stop_reason == "end_turn"
    assert converter.unstructure(note) == value
    unknown_state = {"sessionId": "s", "update": {"sessionUpdate": "state_update", "state": "dreaming", "x": 1}}
    note = converter.structure(unknown_state, v2_unstable.UpdateSessionNotification)
    assert isinstance(note.update, v2_unstable.StateUpdateSessionUpdateOther)
    assert converter.unstructure(note) == unknown_state


def test_partially_tagged_union_picks_the_untagged_member_when_the_tag_is_missing() -> None:
    stdio = {"name": "fs", "command": "/bin/mcp", "args": [], "env": []}
    http = {"type": "http", "name": "web", "url": "https://x", "headers": []}
    ws = {"type": "websocket", "name": "w", "url": "wss://x"}
    servers = converter.structure({"cwd": "/", "mcpServers": [stdio, http, ws]}, v1.NewSessionRequest).mcp_servers
    assert [type(s) for s in servers] == [v1.McpServerStdio, v1.HttpMcpServer, v1.McpServerOther]
    assert round_trip({"cwd": "/", "mcpServers": [stdio, http, ws]}, v1.NewSessionRequest)["mcpServers"] == [
        stdio,
        http,
        ws,
    ]


def test_open_enum_accepts_custom_values_and_closed_enum_rejects_unknown_ones() -> None:
    assert converter.structure("_acme_kind", v2.ToolKind) == "_acme_kind"
    with pytest.raises(DecodeError) as info:
        converter.structure({"sessionId": "s", "stopReason": "bored"}, v1.PromptResponse)
    assert info.value.json_path == "$.stopReason"


def test_wrong_type_names_the_path_and_expected_type() -> None:
    value = {"sessionId": "s", "prompt": [{"type": "text", "text": "ok"}, {"type": "text", "text": 5}]}
    with pytest.raises(DecodeError) as info:
        converter.structure(value, v1.PromptRequest)
    assert info.value.json_path == "$.prompt[1].text"
    assert info.value.expected == "string"
    assert info.value.path == ("prompt", 1, "text")
    assert "$.prompt[1].text" in str(info.value)


def test_missing_required_field_names_the_path() -> None:
    with pytest.raises(DecodeError) as info:
        converter.structure({"prompt": []}, v1.PromptRequest)
    assert info.value.json_path == "$.sessionId"
    assert "missing" in str(info.value)


def test_unknown_tag_in_a_closed_position_is_a_typed_error() -> None:
    # decoding a specific variant class: its tag is fixed
    with pytest.raises(DecodeError) as info:
        converter.structure({"type": "image", "text": "x"}, v1.TextContentBlock)
    assert info.value.json_path == "$.type"
    # a tagged union without a catch-all can be built, but the generated ones all have one; a tag
    # that is not a string is never a variant name
    with pytest.raises(DecodeError) as info:
        converter.structure({"sessionId": "s", "prompt": [{"type": 7}]}, v1.PromptRequest)
    assert info.value.json_path == "$.prompt[0].type"


def test_not_an_object_is_a_typed_error() -> None:
    with pytest.raises(DecodeError) as info:
        converter.structure({"sessionId": "s", "prompt": "text"}, v1.PromptRequest)
    assert info.value.json_path == "$.prompt"


def test_default_on_error_leaves_the_field_unset_and_keeps_the_raw_value_for_relays() -> None:
    value = {"type": "text", "text": "hi", "annotations": {"priority": "very"}}
    block = converter.structure(value, v1.ContentBlock)
    assert block.annotations is not UNSET  # annotations decodes; its bad `priority` is dropped to UNSET
    assert block.annotations.priority is UNSET
    assert converter.unstructure(block) == value


@pytest.mark.parametrize("bad", [None, "all", 3, {"entry": 1}])
def test_default_on_error_gives_a_required_field_its_default(bad: Any) -> None:
    # Plan.entries is required, default-on-error and skip-invalid-items: a value that is not an
    # array decodes as no entries (it used to crash the decoder with UnboundLocalError)
    value = {"sessionId": "s", "update": {"sessionUpdate": "plan", "entries": bad}}
    note = converter.structure(value, v1.SessionNotification)
    assert note.update.entries == []
    assert note.update.extra_fields == {"entries": bad}  # the raw value, as for an optional field
    assert converter.unstructure(note)["update"] == {"sessionUpdate": "plan", "entries": []}


def test_skip_invalid_items_drops_invalid_list_items() -> None:
    value = {
        "sessionId": "s",
        "update": {
            "sessionUpdate": "tool_call",
            "toolCallId": "t",
            "title": "x",
            "locations": [{"path": "/a"}, {"line": 3}, {"path": "/b"}],
        },
    }
    note = converter.structure(value, v1.SessionNotification)
    assert [loc.path for loc in note.update.locations] == ["/a", "/b"]


def test_default_on_null_gives_the_empty_default() -> None:
    value = {"name": "fs", "command": "/bin/mcp", "args": None, "env": None}
    server = converter.structure(value, v1.McpServerStdio)
    assert server.args == [] and server.env == []


def test_value_or_default_reads_schema_defaults_without_knowing_about_unset() -> None:
    caps = converter.structure({}, v1.AgentCapabilities)
    assert caps.load_session is UNSET and not caps.load_session
    assert value_or_default(caps, "load_session") is False
    prompt_caps = value_or_default(caps, "prompt_capabilities")
    assert isinstance(prompt_caps, v1.PromptCapabilities)
    assert prompt_caps.image is False
    assert value_or_default(converter.structure({"loadSession": True}, v1.AgentCapabilities), "load_session") is True


def test_json_bytes_helpers_round_trip() -> None:
    raw = b'{"sessionId":"s","prompt":[{"type":"text","text":"hi"}],"_meta":null}'
    req = loads(raw, v1.PromptRequest)
    assert isinstance(req, v1.PromptRequest)
    assert orjson.loads(dumps(req)) == orjson.loads(raw)


def test_building_a_message_by_hand_encodes_to_the_wire_shape() -> None:
    req = v1.PromptRequest(
        session_id="s",
        prompt=[
            v1.TextContentBlock(text="look"),
            v1.ImageContentBlock(data="AAAA", mime_type="image/png"),
            v1.ResourceLinkContentBlock(name="a.py", uri="file:///a.py"),
        ],
    )
    assert converter.unstructure(req) == {
        "sessionId": "s",
        "prompt": [
            {"type": "text", "text": "look"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource_link", "name": "a.py", "uri": "file:///a.py"},
        ],
    }


def test_untagged_union_chooses_the_member_whose_required_fields_are_present() -> None:
    text = {"uri": "file:///a", "text": "x"}
    blob = {"uri": "file:///b", "blob": "AAAA"}
    assert isinstance(converter.structure(text, v1.EmbeddedResourceResource), v1.TextResourceContents)
    assert isinstance(converter.structure(blob, v1.EmbeddedResourceResource), v1.BlobResourceContents)


def test_request_ids_are_integers_strings_or_null_never_booleans() -> None:
    assert converter.structure(3, v1.RequestId) == 3
    assert converter.structure("a", v1.RequestId) == "a"
    assert converter.structure(None, v1.RequestId) is None
    with pytest.raises(DecodeError):
        converter.structure(True, v1.RequestId)


def test_null_is_kept_where_the_field_type_alias_admits_it() -> None:
    value = {"requestId": None}
    note = converter.structure(value, v1.CancelRequestNotification)
    assert note.request_id is None
    assert converter.unstructure(note) == value


def test_null_is_kept_in_unconstrained_fields() -> None:
    from acp_schema import v2_unstable as v

    value = {"code": -1, "message": "boom", "data": None}
    err = converter.structure(value, v.McpError)
    assert err.data is None
    assert converter.unstructure(err) == value


def test_a_def_that_is_also_a_union_branch_round_trips_with_and_without_its_tag() -> None:
    # standalone, the schema's RunningStateUpdate has no `state`; as a StateUpdate variant it has one
    alone = converter.structure({}, v2.RunningStateUpdate)
    assert alone.state is UNSET
    assert converter.unstructure(alone) == {}
    variant = converter.structure({"state": "running"}, v2.StateUpdate)
    assert isinstance(variant, v2.RunningStateUpdate)
    assert converter.unstructure(variant) == {"state": "running"}
    assert converter.unstructure(v2.RunningStateUpdate()) == {"state": "running"}


def test_integer_literals_never_accept_booleans() -> None:
    assert converter.structure(-32601, v1.ErrorCode) == -32601
    with pytest.raises(DecodeError):
        converter.structure(True, v1.ErrorCode)
    with pytest.raises(DecodeError):
        converter.structure(["unhashable"], v1.ToolKind)


def test_top_level_scalars_and_lists_are_checked_not_coerced() -> None:
    with pytest.raises(DecodeError):
        converter.structure(5, v1.SessionId)
    with pytest.raises(DecodeError) as info:
        converter.structure([{"type": "text", "text": "a"}, 3], list[v1.ContentBlock])
    assert info.value.json_path == "$[1]"


# messages whose nested classes, union branches and list items a fresh converter meets for the first time,
# some of them invalid right there
FIRST_MEETINGS: list[tuple[Any, dict[str, Any]]] = [
    (v1.PromptRequest, {"sessionId": "s", "prompt": [{"type": "text", "text": 5}]}),
    (v1.PromptRequest, {"sessionId": "s", "prompt": [{"type": "text", "text": "a"}, {"type": "image", "data": "x"}]}),
    (
        v1.PromptRequest,
        {
            "sessionId": "s",
            "prompt": [{"type": "text", "text": "a"}, {"type": "image", "data": "x", "mimeType": "i/p"}],
        },
    ),
    (
        v1.SessionNotification,
        {
            "sessionId": "s",
            "update": {
                "sessionUpdate": "tool_call",
                "toolCallId": "c",
                "title": "t",
                "content": [{"type": "content", "content": {"type": "text", "text": "x"}}],
                "locations": [{"path": 3}],
            },
        },
    ),
    (
        v1.SessionNotification,
        {
            "sessionId": "s",
            "update": {"sessionUpdate": "tool_call", "toolCallId": "c", "title": "t", "locations": [{"path": "/p"}]},
        },
    ),
    (v1.InitializeRequest, {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": "yes"}}}),
    (v1.InitializeRequest, {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True}}}),
    (v1.NewSessionRequest, {"cwd": "/", "mcpServers": [{"name": "n", "command": "c", "args": [], "env": [{}]}]}),
    (v1.NewSessionRequest, {"cwd": "/", "mcpServers": [{"name": "n", "command": "c", "args": [], "env": []}]}),
]


def test_a_fresh_converter_decodes_and_encodes_nested_values_alike_on_first_and_later_meetings() -> None:
    def outcome(conv: AcpConverter, t: Any, value: dict[str, Any]) -> tuple[Any, ...]:
        try:
            decoded = conv.structure(value, t)
        except DecodeError as exc:
            return ("error", exc.json_path, exc.expected)
        return ("ok", conv.unstructure(decoded))

    fresh = AcpConverter()
    first = [outcome(fresh, t, value) for t, value in FIRST_MEETINGS]
    again = [outcome(fresh, t, value) for t, value in FIRST_MEETINGS]
    assert first == again == [outcome(converter, t, value) for t, value in FIRST_MEETINGS]
    assert [o[0] for o in first] == ["error", "error", "ok", "ok", "ok", "ok", "ok", "error", "ok"]
    assert [o[1] for o in first if o[0] == "error"] == [
        "$.prompt[0].text",
        "$.prompt[1].mimeType",
        "$.mcpServers[0].env[0].name",
    ]
    assert first[2][1] == FIRST_MEETINGS[2][1]
    assert first[3][1]["update"]["locations"] == []  # skip-invalid-items, met first on an invalid item
    assert first[5][1] == FIRST_MEETINGS[5][1]  # default-on-error keeps the raw value, met first on it

"""``acp_trio.builders``: every builder's wire JSON against the spec pages' examples and the schema.

Expected JSON is copied from ``docs/protocol/v1/{content,tool-calls,agent-plan,prompt-turn,terminals,
session-modes,slash-commands}.mdx`` (the ``params`` of each example message); every result is also
validated against its ``$defs`` entry of ``schema/v1/schema.json``.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import trio

import acp_trio
from acp_schema import v1
from acp_trio import builders as b
from acp_trio import converter
from acp_trio.testing import FakeClient, pair

SCHEMA = Path(__file__).resolve().parents[1] / "schema" / "v1" / "schema.json"
SID = "sess_abc123def456"


@functools.cache
def _defs() -> dict[str, Any]:
    defs: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))["$defs"]
    return defs


@functools.cache
def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$defs": _defs(), "$ref": f"#/$defs/{name}"})


def wire(obj: Any, schema_def: str) -> Any:
    """The wire JSON of ``obj``, after checking it validates against ``$defs/<schema_def>``."""
    data = converter.unstructure(obj)
    validator(schema_def).validate(data)
    return data


# -- content blocks (content.mdx) ------------------------------------------------------------------


def test_text_block_matches_content_page() -> None:
    assert wire(b.text_block("What's the weather like today?"), "ContentBlock") == {
        "type": "text",
        "text": "What's the weather like today?",
    }


def test_image_block_encodes_bytes_and_keeps_base64_str() -> None:
    data = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB"  # the content page's example, without its "..."
    expected = {"type": "image", "mimeType": "image/png", "data": data}
    assert wire(b.image_block(base64.b64decode(data), "image/png"), "ContentBlock") == expected
    assert wire(b.image_block(data, "image/png"), "ContentBlock") == expected
    with_uri = b.image_block(bytearray(b"\x89PNG"), "image/png", uri="https://example.com/a.png")
    assert wire(with_uri, "ContentBlock") == {
        "type": "image",
        "mimeType": "image/png",
        "data": "iVBORw==",
        "uri": "https://example.com/a.png",
    }


def test_audio_block_matches_content_page() -> None:
    data = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8A"  # the content page's example, cut to whole base64 quads
    assert wire(b.audio_block(data, "audio/wav"), "ContentBlock") == {
        "type": "audio",
        "mimeType": "audio/wav",
        "data": data,
    }
    assert converter.unstructure(b.audio_block(b"RIFF", "audio/wav"))["data"] == "UklGRg=="


def test_embedded_text_resource_matches_content_page() -> None:
    block = b.embedded_text_resource(
        "file:///home/user/script.py", "def hello():\n    print('Hello, world!')", mime_type="text/x-python"
    )
    assert wire(block, "ContentBlock") == {
        "type": "resource",
        "resource": {
            "uri": "file:///home/user/script.py",
            "mimeType": "text/x-python",
            "text": "def hello():\n    print('Hello, world!')",
        },
    }


def test_embedded_blob_resource_encodes_bytes() -> None:
    block = b.embedded_blob_resource("file:///home/user/a.bin", b"\x00\x01\xff")
    assert wire(block, "ContentBlock") == {
        "type": "resource",
        "resource": {"uri": "file:///home/user/a.bin", "blob": "AAH/"},
    }
    typed = b.embedded_blob_resource("file:///a.pdf", "JVBERg==", mime_type="application/pdf")
    assert wire(typed, "ContentBlock")["resource"] == {
        "uri": "file:///a.pdf",
        "blob": "JVBERg==",
        "mimeType": "application/pdf",
    }


def test_resource_link_matches_content_page() -> None:
    link = b.resource_link("file:///home/user/document.pdf", "document.pdf", mime_type="application/pdf", size=1024000)
    assert wire(link, "ContentBlock") == {
        "type": "resource_link",
        "uri": "file:///home/user/document.pdf",
        "name": "document.pdf",
        "mimeType": "application/pdf",
        "size": 1024000,
    }
    full = b.resource_link("https://example.com/r", "r", title="R", description="about r")
    assert wire(full, "ContentBlock") == {
        "type": "resource_link",
        "uri": "https://example.com/r",
        "name": "r",
        "title": "R",
        "description": "about r",
    }


def test_annotations_on_every_content_block() -> None:
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    ann = b.content_annotations(audience=["user"], priority=1, last_modified=when)
    expected = {"audience": ["user"], "priority": 1.0, "lastModified": "2025-01-02T03:04:05+00:00"}
    blocks = [
        b.text_block("x", annotations=ann),
        b.image_block(b"x", "image/png", annotations=ann),
        b.audio_block(b"x", "audio/wav", annotations=ann),
        b.resource_link("file:///x", "x", annotations=ann),
        b.embedded_text_resource("file:///x", "x", annotations=ann),
        b.embedded_blob_resource("file:///x", b"x", annotations=ann),
    ]
    for block in blocks:
        assert wire(block, "ContentBlock")["annotations"] == expected
    assert wire(b.content_annotations(), "Annotations") == {}
    assert wire(b.content_annotations(last_modified="2025-01-02"), "Annotations") == {"lastModified": "2025-01-02"}


# -- tool call content (tool-calls.mdx "Content", "Following the Agent") ----------------------------


def test_tool_content_diff_terminal_location_match_tool_calls_page() -> None:
    assert wire(b.tool_content("Analysis complete. Found 3 issues."), "ToolCallContent") == {
        "type": "content",
        "content": {"type": "text", "text": "Analysis complete. Found 3 issues."},
    }
    assert wire(
        b.diff("/home/user/project/src/config.json", '{\n  "debug": true\n}', old_text='{\n  "debug": false\n}'),
        "ToolCallContent",
    ) == {
        "type": "diff",
        "path": "/home/user/project/src/config.json",
        "oldText": '{\n  "debug": false\n}',
        "newText": '{\n  "debug": true\n}',
    }
    assert wire(b.terminal("term_xyz789"), "ToolCallContent") == {"type": "terminal", "terminalId": "term_xyz789"}
    assert wire(b.location("/home/user/project/src/main.py", line=42), "ToolCallLocation") == {
        "path": "/home/user/project/src/main.py",
        "line": 42,
    }


def test_diff_of_a_new_file_omits_old_text_and_paths_may_be_pathlike() -> None:
    assert wire(b.diff(PurePosixPath("/work/new.txt"), "hello\n"), "ToolCallContent") == {
        "type": "diff",
        "path": "/work/new.txt",
        "newText": "hello\n",
    }
    assert wire(b.location(Path("/work/a.py")), "ToolCallLocation") == {"path": "/work/a.py"}
    assert wire(b.location("C:\\Users\\me\\a.py"), "ToolCallLocation") == {"path": "C:\\Users\\me\\a.py"}


# -- tool calls (tool-calls.mdx, prompt-turn.mdx, terminals.mdx) -----------------------------------


def test_tool_call_matches_creating_example() -> None:
    update = b.tool_call("call_001", "Reading configuration file", kind="read", status="pending")
    assert wire(b.notification(SID, update), "SessionNotification") == {
        "sessionId": SID,
        "update": {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_001",
            "title": "Reading configuration file",
            "kind": "read",
            "status": "pending",
        },
    }


def test_tool_call_sets_only_the_fields_passed() -> None:
    assert wire(b.tool_call("call_001", "Analyzing Python code"), "SessionUpdate") == {
        "sessionUpdate": "tool_call",
        "toolCallId": "call_001",
        "title": "Analyzing Python code",
    }
    assert wire(b.tool_call_update("call_001"), "SessionUpdate") == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call_001",
    }


def test_tool_call_with_every_field() -> None:
    update = b.tool_call(
        "call_9",
        "Edit a.py",
        kind="edit",
        status="in_progress",
        name="apply_patch",
        content=["note", b.diff("/w/a.py", "new", old_text="old"), b.image_block(b"x", "image/png")],
        locations=["/w/a.py", b.location("/w/b.py", line=3)],
        raw_input={"path": "/w/a.py"},
        raw_output=None,
    )
    assert wire(update, "SessionUpdate") == {
        "sessionUpdate": "tool_call",
        "toolCallId": "call_9",
        "title": "Edit a.py",
        "kind": "edit",
        "status": "in_progress",
        "name": "apply_patch",
        "content": [
            {"type": "content", "content": {"type": "text", "text": "note"}},
            {"type": "diff", "path": "/w/a.py", "oldText": "old", "newText": "new"},
            {"type": "content", "content": {"type": "image", "mimeType": "image/png", "data": "eA=="}},
        ],
        "locations": [{"path": "/w/a.py"}, {"path": "/w/b.py", "line": 3}],
        "rawInput": {"path": "/w/a.py"},
        "rawOutput": None,
    }


def test_tool_call_embeds_a_terminal_as_in_terminals_page() -> None:
    update = b.tool_call(
        "call_002", "Running tests", kind="execute", status="in_progress", content=b.terminal("term_xyz789")
    )
    assert wire(b.notification(SID, update), "SessionNotification") == {
        "sessionId": SID,
        "update": {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_002",
            "title": "Running tests",
            "kind": "execute",
            "status": "in_progress",
            "content": [{"type": "terminal", "terminalId": "term_xyz789"}],
        },
    }


def test_tool_call_update_matches_updating_and_prompt_turn_examples() -> None:
    progress = b.tool_call_update("call_001", status="in_progress", content="Found 3 configuration files...")
    assert wire(b.notification(SID, progress), "SessionNotification") == {
        "sessionId": SID,
        "update": {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "call_001",
            "status": "in_progress",
            "content": [{"type": "content", "content": {"type": "text", "text": "Found 3 configuration files..."}}],
        },
    }
    started = b.tool_call_update("call_001", status="in_progress")
    assert wire(started, "SessionUpdate") == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call_001",
        "status": "in_progress",
    }
    text = "Analysis complete:\n- No syntax errors found"
    done = b.tool_call_update("call_001", status="completed", content=[b.tool_content(b.text_block(text))])
    assert wire(done, "SessionUpdate")["content"] == [{"type": "content", "content": {"type": "text", "text": text}}]


def test_tool_call_update_sends_every_field_passed_and_empty_content_clears() -> None:
    update = b.tool_call_update(
        "c",
        title="T",
        kind="search",
        name="grep",
        content=[],
        locations=Path("/w"),
        raw_input=[1],
        raw_output="ok",
    )
    assert wire(update, "SessionUpdate") == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c",
        "title": "T",
        "kind": "search",
        "name": "grep",
        "content": [],
        "locations": [{"path": "/w"}],
        "rawInput": [1],
        "rawOutput": "ok",
    }


# -- permission (tool-calls.mdx "Requesting Permission", session-modes.mdx) -------------------------


def test_permission_request_matches_tool_calls_page() -> None:
    request = b.permission_request(
        SID,
        "call_001",
        [
            b.permission_option("allow-once", "Allow once", "allow_once"),
            b.permission_option("reject-once", "Reject", "reject_once"),
        ],
    )
    assert wire(request, "RequestPermissionRequest") == {
        "sessionId": SID,
        "toolCall": {"toolCallId": "call_001"},
        "options": [
            {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
            {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
        ],
    }


def test_permission_tool_call_matches_session_modes_example() -> None:
    # session-modes.mdx puts a bare text block in `content`; the schema wants a ToolCallContent item.
    tool_call = b.permission_tool_call(
        "call_switch_mode_001",
        title="Ready for implementation",
        kind="switch_mode",
        status="pending",
        content="## Implementation Plan...",
    )
    options = [
        b.permission_option("code", "Yes, and auto-accept all actions", "allow_always"),
        b.permission_option("ask", "Yes, and manually accept actions", "allow_once"),
    ]
    assert wire(b.permission_request(SID, tool_call, options), "RequestPermissionRequest") == {
        "sessionId": SID,
        "toolCall": {
            "toolCallId": "call_switch_mode_001",
            "title": "Ready for implementation",
            "kind": "switch_mode",
            "status": "pending",
            "content": [{"type": "content", "content": {"type": "text", "text": "## Implementation Plan..."}}],
        },
        "options": [
            {"optionId": "code", "name": "Yes, and auto-accept all actions", "kind": "allow_always"},
            {"optionId": "ask", "name": "Yes, and manually accept actions", "kind": "allow_once"},
        ],
    }


def test_permission_request_copies_a_sent_tool_call() -> None:
    sent = b.tool_call("call_1", "Read a", kind="read", status="pending", locations=["/w/a"])
    request = b.permission_request(SID, sent, b.permission_options("allow_once"))
    assert wire(request, "RequestPermissionRequest")["toolCall"] == {
        "toolCallId": "call_1",
        "title": "Read a",
        "kind": "read",
        "status": "pending",
        "locations": [{"path": "/w/a"}],
    }
    assert request.tool_call.locations is not sent.locations  # a copy: editing one leaves the other alone
    from_update = b.permission_request(SID, b.tool_call_update("call_1", status="in_progress"), b.permission_options())
    assert wire(from_update, "RequestPermissionRequest")["toolCall"] == {
        "toolCallId": "call_1",
        "status": "in_progress",
    }


def test_permission_options_standard_set() -> None:
    assert [wire(o, "PermissionOption") for o in b.permission_options()] == [
        {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
        {"optionId": "allow-always", "name": "Allow always", "kind": "allow_always"},
        {"optionId": "reject-once", "name": "Reject once", "kind": "reject_once"},
        {"optionId": "reject-always", "name": "Reject always", "kind": "reject_always"},
    ]
    assert [o.kind for o in b.permission_options("reject_once", "allow_once")] == ["reject_once", "allow_once"]


# -- plans (agent-plan.mdx, prompt-turn.mdx) ----------------------------------------------------------


def test_plan_matches_agent_plan_page() -> None:
    update = b.plan(
        [
            b.plan_entry("Analyze the existing codebase structure", priority="high"),
            b.plan_entry("Identify components that need refactoring", priority="high", status="pending"),
            "Create unit tests for critical functions",
        ]
    )
    assert wire(b.notification(SID, update), "SessionNotification") == {
        "sessionId": SID,
        "update": {
            "sessionUpdate": "plan",
            "entries": [
                {"content": "Analyze the existing codebase structure", "priority": "high", "status": "pending"},
                {"content": "Identify components that need refactoring", "priority": "high", "status": "pending"},
                {"content": "Create unit tests for critical functions", "priority": "medium", "status": "pending"},
            ],
        },
    }
    assert wire(b.plan_entry("x", priority="low", status="completed"), "PlanEntry") == {
        "content": "x",
        "priority": "low",
        "status": "completed",
    }
    assert wire(b.plan(e for e in ()), "SessionUpdate") == {"sessionUpdate": "plan", "entries": []}


# -- other session updates ----------------------------------------------------------------------------


def test_agent_message_matches_prompt_turn_example() -> None:
    text = "I'll analyze your code for potential issues. Let me examine it..."
    update = b.agent_message(text, message_id="msg_agent_c42b9")
    assert wire(b.notification(SID, update), "SessionNotification") == {
        "sessionId": SID,
        "update": {
            "sessionUpdate": "agent_message_chunk",
            "messageId": "msg_agent_c42b9",
            "content": {"type": "text", "text": text},
        },
    }


def test_message_chunks_take_str_or_blocks() -> None:
    assert wire(b.agent_thought("hmm"), "SessionUpdate") == {
        "sessionUpdate": "agent_thought_chunk",
        "content": {"type": "text", "text": "hmm"},
    }
    link = b.resource_link("file:///a", "a")
    assert wire(b.user_message(link, message_id="m1"), "SessionUpdate") == {
        "sessionUpdate": "user_message_chunk",
        "messageId": "m1",
        "content": {"type": "resource_link", "uri": "file:///a", "name": "a"},
    }


def test_current_mode_uses_the_schema_key() -> None:
    page_example = {"sessionUpdate": "current_mode_update", "modeId": "code"}  # session-modes.mdx
    with pytest.raises(jsonschema.ValidationError):
        validator("SessionUpdate").validate(page_example)
    assert wire(b.current_mode("code"), "SessionUpdate") == {
        "sessionUpdate": "current_mode_update",
        "currentModeId": "code",
    }


def test_available_commands_matches_slash_commands_page() -> None:
    update = b.available_commands(
        [
            b.available_command("web", "Search the web for information", input_hint="query to search for"),
            b.available_command("test", "Run tests for the current project"),
            b.available_command(
                "plan", "Create a detailed implementation plan", input_hint="description of what to plan"
            ),
        ]
    )
    assert wire(b.notification(SID, update), "SessionNotification") == {
        "sessionId": SID,
        "update": {
            "sessionUpdate": "available_commands_update",
            "availableCommands": [
                {
                    "name": "web",
                    "description": "Search the web for information",
                    "input": {"hint": "query to search for"},
                },
                {"name": "test", "description": "Run tests for the current project"},
                {
                    "name": "plan",
                    "description": "Create a detailed implementation plan",
                    "input": {"hint": "description of what to plan"},
                },
            ],
        },
    }


def test_session_info_sends_only_what_was_passed_and_none_clears() -> None:
    assert wire(b.session_info(title="Fix the tests"), "SessionUpdate") == {
        "sessionUpdate": "session_info_update",
        "title": "Fix the tests",
    }
    assert wire(b.session_info(title=None, updated_at=None), "SessionUpdate") == {
        "sessionUpdate": "session_info_update",
        "title": None,
        "updatedAt": None,
    }
    when = datetime(2025, 6, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    assert wire(b.session_info(updated_at=when), "SessionUpdate") == {
        "sessionUpdate": "session_info_update",
        "updatedAt": "2025-06-01T12:00:00+02:00",
    }
    assert wire(b.session_info(), "SessionUpdate") == {"sessionUpdate": "session_info_update"}


# -- ids ------------------------------------------------------------------------------------------------


def test_tool_call_ids() -> None:
    ids = b.ToolCallIds()
    assert [next(ids) for _ in range(3)] == ["call_001", "call_002", "call_003"]
    assert next(iter(b.ToolCallIds("tc", start=1000))) == "tc_1000"
    fresh = {b.new_tool_call_id() for _ in range(200)}
    assert len(fresh) == 200
    assert all(i.startswith("call_") and len(i) == len("call_") + 16 for i in fresh)
    assert b.new_tool_call_id("edit").startswith("edit_")


# -- bad input ---------------------------------------------------------------------------------------

BAD: list[tuple[Callable[[], object], type[Exception], str]] = [
    (lambda: b.text_block(3), TypeError, "text_block: text must be a str"),  # type: ignore[arg-type]
    (lambda: b.image_block("not base64!", "image/png"), ValueError, "image_block: data"),
    (lambda: b.image_block("abc", "image/png"), ValueError, "image_block: data"),  # bad padding
    (lambda: b.image_block(12, "image/png"), TypeError, "image_block: data must be bytes"),  # type: ignore[arg-type]
    (lambda: b.image_block(b"x", "png"), ValueError, "image_block: mime_type must be a MIME type"),
    (lambda: b.image_block(b"x", "image/png", uri="/a.png"), ValueError, "image_block: uri must be a URI"),
    (lambda: b.audio_block(b"x", ""), ValueError, "audio_block: mime_type"),
    (lambda: b.resource_link("document.pdf", "d"), ValueError, "resource_link: uri must be a URI"),
    (lambda: b.resource_link("file:///d", "d", size=-1), ValueError, "resource_link: size must be between 0"),
    (lambda: b.resource_link("file:///d", "d", size=True), TypeError, "resource_link: size must be an int"),
    (lambda: b.resource_link("file:///d", 5), TypeError, "resource_link: name must be a str"),  # type: ignore[arg-type]
    (lambda: b.embedded_text_resource("file:///a", b"x"), TypeError, "embedded_text_resource: text"),  # type: ignore[arg-type]
    (lambda: b.embedded_blob_resource("file:///a", "!!"), ValueError, "embedded_blob_resource: blob"),
    (
        lambda: b.text_block("x", annotations={"priority": 1}),
        TypeError,
        "text_block: annotations must be a v1.Annotations",
    ),  # type: ignore[arg-type]
    (lambda: b.content_annotations(priority=1.5), ValueError, "content_annotations: priority must be between"),
    (lambda: b.content_annotations(priority=float("nan")), ValueError, "content_annotations: priority"),
    (lambda: b.content_annotations(priority="high"), TypeError, "content_annotations: priority must be a number"),  # type: ignore[arg-type]
    (lambda: b.content_annotations(audience=["admin"]), ValueError, "content_annotations: audience[0] must be one of"),  # type: ignore[list-item]
    (lambda: b.content_annotations(audience="user"), TypeError, "content_annotations: audience must be a list"),  # type: ignore[arg-type]
    (lambda: b.content_annotations(last_modified=datetime(2025, 1, 1)), ValueError, "timezone-aware"),
    (lambda: b.diff("src/config.json", "x"), ValueError, "diff: path must be an absolute path, got 'src/config.json'"),
    (lambda: b.diff("file:///a", "x"), ValueError, "diff: path must be an absolute path"),
    (lambda: b.diff(b"/a", "x"), TypeError, "diff: path must be a str or os.PathLike"),  # type: ignore[arg-type]
    (lambda: b.diff("/a", None), TypeError, "diff: new_text must be a str"),  # type: ignore[arg-type]
    (lambda: b.location("", line=1), ValueError, "location: path must be an absolute path"),
    (lambda: b.location("/a", line=0), ValueError, "location: line (1-based) must be between 1"),
    (lambda: b.location("/a", line=2**32), ValueError, "location: line"),
    (lambda: b.location("/a", line="3"), TypeError, "location: line (1-based) must be an int"),  # type: ignore[arg-type]
    (lambda: b.terminal(""), ValueError, "terminal: terminal_id must not be empty"),
    (
        lambda: b.tool_content({"type": "text", "text": "x"}),
        TypeError,
        "tool_content: block must be a str or a v1 content block",
    ),  # type: ignore[arg-type]
    (lambda: b.tool_call("", "t"), ValueError, "tool_call: tool_call_id must not be empty"),
    (lambda: b.tool_call("c", "t", kind="write"), ValueError, "tool_call: kind must be one of 'read'"),  # type: ignore[arg-type]
    (lambda: b.tool_call("c", "t", status="done"), ValueError, "tool_call: status must be one of"),  # type: ignore[arg-type]
    (lambda: b.tool_call("c", "t", content={"type": "text"}), TypeError, "tool_call: content must be a list, got dict"),  # type: ignore[arg-type]
    (lambda: b.tool_call("c", "t", content=["ok", 3]), TypeError, "tool_call: content[1] must be a str"),  # type: ignore[list-item]
    (
        lambda: b.tool_call("c", "t", locations=["rel/a.py"]),
        ValueError,
        "tool_call: locations[0] must be an absolute path",
    ),
    (lambda: b.tool_call("c", "t", locations=42), TypeError, "tool_call: locations must be a list"),  # type: ignore[arg-type]
    (lambda: b.tool_call_update("c", status="cancelled"), ValueError, "tool_call_update: status must be one of"),  # type: ignore[arg-type]
    (lambda: b.tool_call_update("c", title=1), TypeError, "tool_call_update: title must be a str"),  # type: ignore[arg-type]
    (lambda: b.permission_tool_call("c", kind="x"), ValueError, "permission_tool_call: kind"),  # type: ignore[arg-type]
    (lambda: b.permission_option("a", "A", "allow"), ValueError, "permission_option: kind must be one of"),  # type: ignore[arg-type]
    (lambda: b.permission_option("", "A", "allow_once"), ValueError, "permission_option: option_id must not be empty"),
    (lambda: b.permission_options("allow_once", "allow_once"), ValueError, "permission_options: kinds must not repeat"),
    (lambda: b.permission_options("maybe"), ValueError, "permission_options: kinds[0] must be one of"),  # type: ignore[arg-type]
    (lambda: b.permission_request(SID, "c", []), ValueError, "permission_request: options must offer at least one"),
    (
        lambda: b.permission_request(SID, "c", b.permission_options() + b.permission_options("allow_once")),
        ValueError,
        "options[4] repeats option id 'allow-once'",
    ),
    (
        lambda: b.permission_request(SID, "c", [{"optionId": "a"}]),
        TypeError,
        "permission_request: options[0] must be a v1.PermissionOption",
    ),  # type: ignore[list-item]
    (
        lambda: b.permission_request(SID, {"toolCallId": "c"}, b.permission_options()),
        TypeError,
        "permission_request: tool_call must be",
    ),  # type: ignore[arg-type]
    (
        lambda: b.permission_request("", "c", b.permission_options()),
        ValueError,
        "permission_request: session_id must not be empty",
    ),
    (
        lambda: b.plan_entry("x", priority="urgent"),
        ValueError,
        "plan_entry: priority must be one of 'high', 'medium', 'low'",
    ),  # type: ignore[arg-type]
    (lambda: b.plan_entry("x", status="failed"), ValueError, "plan_entry: status must be one of"),  # type: ignore[arg-type]
    (lambda: b.plan("just one"), TypeError, "plan: entries must be a list, got str"),
    (lambda: b.plan([{"content": "x"}]), TypeError, "plan: entries[0] must be a v1.PlanEntry or a str"),  # type: ignore[list-item]
    (lambda: b.agent_message(None), TypeError, "agent_message: content must be a str or a v1 content block"),  # type: ignore[arg-type]
    (lambda: b.agent_message("x", message_id=5), TypeError, "agent_message: message_id must be a str"),  # type: ignore[arg-type]
    (lambda: b.agent_thought(b"x"), TypeError, "agent_thought: content"),  # type: ignore[arg-type]
    (lambda: b.user_message(1), TypeError, "user_message: content"),  # type: ignore[arg-type]
    (lambda: b.current_mode(""), ValueError, "current_mode: mode_id must not be empty"),
    (lambda: b.available_command("/web", "d"), ValueError, "available_command: name must not start with '/'"),
    (lambda: b.available_command("web", "d", input_hint=1), TypeError, "available_command: input_hint"),  # type: ignore[arg-type]
    (
        lambda: b.available_commands([b.available_command("a", "x"), b.available_command("a", "y")]),
        ValueError,
        "commands[1] repeats the name 'a'",
    ),
    (
        lambda: b.available_commands([("a", "x")]),
        TypeError,
        "available_commands: commands[0] must be a v1.AvailableCommand",
    ),  # type: ignore[list-item]
    (lambda: b.session_info(title=3), TypeError, "session_info: title must be a str"),  # type: ignore[arg-type]
    (
        lambda: b.session_info(updated_at=datetime(2025, 1, 1)),
        ValueError,
        "session_info: updated_at must be a timezone-aware",
    ),
    (lambda: b.session_info(updated_at=""), ValueError, "session_info: updated_at must not be empty"),
    (
        lambda: b.notification(SID, {"sessionUpdate": "plan"}),
        TypeError,
        "notification: update must be a v1 session update",
    ),  # type: ignore[arg-type]
    (
        lambda: b.notification(SID, v1.PlanEntry(content="x", priority="low", status="pending")),
        TypeError,
        "got PlanEntry",
    ),  # type: ignore[arg-type]
    (lambda: b.notification("", b.agent_message("x")), ValueError, "notification: session_id must not be empty"),
    (lambda: b.new_tool_call_id(""), ValueError, "new_tool_call_id: prefix must not be empty"),
    (lambda: b.ToolCallIds(start=-1), ValueError, "ToolCallIds: start must be between 0"),
]


@pytest.mark.parametrize(("build", "error", "message"), BAD, ids=[message for _b, _e, message in BAD])
def test_bad_input_raises_naming_the_argument(
    build: Callable[[], object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        build()
    assert message in str(info.value)


# -- ToolCallReporter ----------------------------------------------------------------------------------


class RecordingClient:
    """Stands in for ``v1.ClientPeer``: records the wire JSON of what is sent, answers permission."""

    def __init__(self, outcome: v1.RequestPermissionOutcome | None = None) -> None:
        self.sent: list[Any] = []
        self.outcome = outcome or v1.SelectedRequestPermissionOutcome(option_id="allow-once")
        self.timeouts: list[float | None] = []

    async def session_update(self, params: v1.SessionNotification) -> None:
        self.sent.append(wire(params, "SessionNotification"))

    async def session_request_permission(
        self, params: v1.RequestPermissionRequest, *, timeout: float | None = None
    ) -> v1.RequestPermissionResponse:
        self.sent.append(wire(params, "RequestPermissionRequest"))
        self.timeouts.append(timeout)
        return v1.RequestPermissionResponse(outcome=self.outcome)


async def test_reporter_sends_the_tool_call_lifecycle() -> None:
    client = RecordingClient()
    tc = b.ToolCallReporter(
        client,
        SID,
        "Reading configuration file",
        kind="read",
        tool_call_id="call_001",
        locations=["/w/c.json"],
        raw_input={"p": 1},
    )
    assert tc.status is None
    await tc.start()
    chosen = await tc.request_permission(timeout=5)
    assert chosen is not None and chosen.kind == "allow_once"
    await tc.update(status="in_progress", title="Reading c.json")
    await tc.complete(["Found 3 configuration files..."], raw_output={"n": 3})
    assert tc.status == "completed"
    assert client.timeouts == [5]
    assert client.sent == [
        {
            "sessionId": SID,
            "update": {
                "sessionUpdate": "tool_call",
                "toolCallId": "call_001",
                "title": "Reading configuration file",
                "kind": "read",
                "status": "pending",
                "locations": [{"path": "/w/c.json"}],
                "rawInput": {"p": 1},
            },
        },
        {
            "sessionId": SID,
            "toolCall": {"toolCallId": "call_001", "title": "Reading configuration file", "kind": "read"},
            "options": [converter.unstructure(o) for o in b.permission_options()],
        },
        {
            "sessionId": SID,
            "update": {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call_001",
                "status": "in_progress",
                "title": "Reading c.json",
            },
        },
        {
            "sessionId": SID,
            "update": {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call_001",
                "status": "completed",
                "content": [{"type": "content", "content": {"type": "text", "text": "Found 3 configuration files..."}}],
                "rawOutput": {"n": 3},
            },
        },
    ]


async def test_reporter_fail_start_content_and_generated_id() -> None:
    client = RecordingClient()
    tc = b.ToolCallReporter(client, SID, "Run tests", kind="execute")
    assert tc.tool_call_id.startswith("call_")
    await tc.start(status="in_progress", content=b.terminal("term_1"))
    await tc.fail("exit code 1")
    assert [m["update"] for m in client.sent] == [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": tc.tool_call_id,
            "title": "Run tests",
            "kind": "execute",
            "status": "in_progress",
            "content": [{"type": "terminal", "terminalId": "term_1"}],
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": tc.tool_call_id,
            "status": "failed",
            "content": [{"type": "content", "content": {"type": "text", "text": "exit code 1"}}],
        },
    ]
    assert tc.status == "failed"


async def test_reporter_permission_outcomes() -> None:
    cancelled = RecordingClient(v1.CancelledRequestPermissionOutcome())
    tc = b.ToolCallReporter(cancelled, SID, "t")
    await tc.start()
    assert await tc.request_permission() is None

    options = [b.permission_option("yes", "Yes", "allow_once"), b.permission_option("no", "No", "reject_once")]
    chose_no = RecordingClient(v1.SelectedRequestPermissionOutcome(option_id="no"))
    tc = b.ToolCallReporter(chose_no, SID, "t", tool_call_id="c7")
    await tc.start()
    await tc.update(kind="edit")
    assert await tc.request_permission(options) is options[1]
    assert chose_no.sent[-1]["toolCall"] == {"toolCallId": "c7", "title": "t", "kind": "edit"}

    rogue = RecordingClient(v1.SelectedRequestPermissionOutcome(option_id="sure"))
    tc = b.ToolCallReporter(rogue, SID, "t")
    await tc.start()
    with pytest.raises(ValueError, match="selected option id 'sure', which was not offered"):
        await tc.request_permission()


async def test_reporter_misuse_raises() -> None:
    client = RecordingClient()
    with pytest.raises(ValueError, match="tool_call: kind must be one of"):
        b.ToolCallReporter(client, SID, "t", kind="write")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ToolCallReporter: session_id must not be empty"):
        b.ToolCallReporter(client, "", "t")
    tc = b.ToolCallReporter(client, SID, "t")
    for call in (tc.update(status="in_progress"), tc.request_permission(), tc.complete(), tc.fail()):
        with pytest.raises(RuntimeError, match="call start\\(\\) first"):
            await call
    with pytest.raises(ValueError, match=r"ToolCallReporter\.start: status must be one of"):
        await tc.start(status="done")  # type: ignore[arg-type]
    assert client.sent == []
    await tc.start()
    with pytest.raises(RuntimeError, match="already started"):
        await tc.start()
    assert len(client.sent) == 1


async def test_reporter_over_a_real_connection() -> None:
    """``ToolCallReporter`` with ``v1.ClientPeer`` and the runtime, in memory: the client (the test kit's
    ``FakeClient``, which rejects) receives the calls."""
    client = FakeClient(permission="reject")

    class Agent:
        def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
            self.client = v1.ClientPeer(conn)

        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            tc = b.ToolCallReporter(self.client, params.session_id, "Delete a", kind="delete", tool_call_id="call_1")
            await tc.start()
            option = await tc.request_permission(b.permission_options("allow_once", "reject_once"))
            assert option is not None
            await (tc.fail("Rejected") if option.kind == "reject_once" else tc.complete())
            await self.client.session_update(b.notification(params.session_id, b.agent_message("done")))
            return v1.PromptResponse(stop_reason="end_turn")

    with trio.fail_after(10):
        async with pair(Agent, client):
            assert await client.prompt("s1", "rm a") == "end_turn"
    assert client.permission_answers == ["reject-once"]
    [asked] = client.permission_requests
    received = [converter.unstructure(update) for _, update in client.updates]
    received.insert(1, converter.unstructure(asked.tool_call))
    assert received == [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_1",
            "title": "Delete a",
            "kind": "delete",
            "status": "pending",
        },
        {"toolCallId": "call_1", "title": "Delete a", "kind": "delete"},
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "call_1",
            "status": "failed",
            "content": [{"type": "content", "content": {"type": "text", "text": "Rejected"}}],
        },
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "done"}},
    ]

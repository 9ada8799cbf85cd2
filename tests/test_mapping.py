"""The v1 ⇄ v2 mapping rows (issue 33, ``acp_trio._mapping``): one test per row and direction.

Each test is pure (no I/O): it maps an object of one protocol version and checks the result twice:
it decodes as the target version's generated class (:func:`wire` re-reads the encoded JSON with
the shared converter and requires the same class and the same JSON back), and its wire JSON is
exactly what ``docs/protocol/v2/migration.mdx`` says that version's form is.  The last test checks
that every row of ``_mapping.ROWS`` names tests that exist here.
"""

from __future__ import annotations

import sys
from typing import Any

import attrs
import pytest

from acp_schema import v1, v2
from acp_trio import _mapping as m
from acp_trio import converter
from acp_trio._core import RequestError

PATH = "/work/a.txt"


def wire(obj: Any, target: Any) -> Any:
    """``obj``'s wire JSON, after checking it decodes as ``target`` (a class or union of the target
    version) into an object of ``obj``'s own class (not the catch-all) that encodes the same."""
    data = converter.unstructure(obj)
    again = converter.structure(data, target)
    assert type(again) is type(obj), f"{type(obj).__name__} decodes as {type(again).__name__}"
    assert not type(again).__name__.endswith("Other")
    assert converter.unstructure(again) == data
    return data


# -- capabilities (L1, L2) --------------------------------------------------------------------------
def test_agent_caps_to_v1() -> None:
    caps = v2.AgentCapabilities(
        session=v2.SessionCapabilities(
            prompt=v2.PromptCapabilities(
                image=v2.PromptImageCapabilities(), embedded_context=v2.PromptEmbeddedContextCapabilities()
            ),
            mcp=v2.McpCapabilities(stdio=v2.McpStdioCapabilities(), http=v2.McpHttpCapabilities()),
            delete=v2.SessionDeleteCapabilities(),
        )
    )
    assert wire(m.agent_caps_to_v1(caps, logout=True), v1.AgentCapabilities) == {
        "loadSession": True,
        "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
        "mcpCapabilities": {"http": True, "sse": False},
        "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}},
        "auth": {"logout": {}},
    }
    assert wire(m.agent_caps_to_v1(v2.AgentCapabilities()), v1.AgentCapabilities) == {}


def test_agent_caps_to_v2() -> None:
    caps = v1.AgentCapabilities(
        load_session=True,
        prompt_capabilities=v1.PromptCapabilities(image=True, audio=False, embedded_context=True),
        mcp_capabilities=v1.McpCapabilities(http=True, sse=True),
        session_capabilities=v1.SessionCapabilities(list=v1.SessionListCapabilities()),
    )
    assert wire(m.agent_caps_to_v2(caps), v2.AgentCapabilities) == {
        "session": {
            "prompt": {"image": {}, "embeddedContext": {}},
            "mcp": {"stdio": {}, "http": {}},
        }
    }


def test_client_caps_to_v1() -> None:
    caps = v2.ClientCapabilities(elicitation=v2.ElicitationCapabilities(form=v2.ElicitationFormCapabilities()))
    assert wire(m.client_caps_to_v1(caps), v1.ClientCapabilities) == {"elicitation": {"form": {}}}
    assert wire(m.client_caps_to_v1(v2.ClientCapabilities(), fs=True, terminal=True), v1.ClientCapabilities) == {
        "fs": {"readTextFile": True, "writeTextFile": True},
        "terminal": True,
    }


def test_client_caps_to_v2() -> None:
    caps = v1.ClientCapabilities(
        fs=v1.FileSystemCapabilities(read_text_file=True, write_text_file=True),
        terminal=True,
        elicitation=v1.ElicitationCapabilities(url=v1.ElicitationUrlCapabilities()),
    )
    assert wire(m.client_caps_to_v2(caps), v2.ClientCapabilities) == {"elicitation": {"url": {}}}


# -- config options and modes (L4, L10, L12) --------------------------------------------------------
def mode_option_v2(current: str = "ask") -> v2.SelectSessionConfigOption:
    return v2.SelectSessionConfigOption(
        config_id="mode",
        name="Mode",
        category="mode",
        current_value=current,
        options=[
            v2.SessionConfigSelectOption(value="ask", name="Ask"),
            v2.SessionConfigSelectOption(value="code", name="Code", description="Writes code"),
        ],
    )


def test_modes_from_config() -> None:
    verbose = v2.BooleanSessionConfigOption(config_id="verbose", name="Verbose", current_value=False)
    modes = m.modes_from_config([verbose, mode_option_v2("code")])
    assert modes is not None
    assert wire(modes, v1.SessionModeState) == {
        "currentModeId": "code",
        "availableModes": [
            {"id": "ask", "name": "Ask"},
            {"id": "code", "name": "Code", "description": "Writes code"},
        ],
    }
    assert m.modes_from_config([verbose]) is None


def test_modes_to_config() -> None:
    modes = v1.SessionModeState(
        current_mode_id="ask",
        available_modes=[v1.SessionMode(id="ask", name="Ask"), v1.SessionMode(id="code", name="Code")],
    )
    assert wire(m.modes_to_config(modes), v2.SessionConfigOption) == {
        "type": "select",
        "configId": "mode",
        "name": "Mode",
        "category": "mode",
        "currentValue": "ask",
        "options": [{"value": "ask", "name": "Ask"}, {"value": "code", "name": "Code"}],
    }


def test_config_option_to_v1() -> None:
    grouped = v2.SelectSessionConfigOption(
        config_id="model",
        name="Model",
        category="model",
        current_value="fast",
        options=[
            v2.SessionConfigSelectGroup(
                group_id="small", name="Small", options=[v2.SessionConfigSelectOption(value="fast", name="Fast")]
            )
        ],
    )
    assert wire(m.config_option_to_v1(grouped), v1.SessionConfigOption) == {
        "type": "select",
        "id": "model",
        "name": "Model",
        "category": "model",
        "currentValue": "fast",
        "options": [{"group": "small", "name": "Small", "options": [{"value": "fast", "name": "Fast"}]}],
    }
    boolean = v2.BooleanSessionConfigOption(config_id="verbose", name="Verbose", current_value=True)
    assert wire(m.config_option_to_v1(boolean), v1.SessionConfigOption) == {
        "type": "boolean",
        "id": "verbose",
        "name": "Verbose",
        "currentValue": True,
    }


def test_config_option_to_v2() -> None:
    option = v1.SelectSessionConfigOption(
        id="model",
        name="Model",
        current_value="fast",
        options=[
            v1.SessionConfigSelectGroup(
                group="small", name="Small", options=[v1.SessionConfigSelectOption(value="fast", name="Fast")]
            )
        ],
    )
    assert wire(m.config_option_to_v2(option), v2.SessionConfigOption) == {
        "type": "select",
        "configId": "model",
        "name": "Model",
        "currentValue": "fast",
        "options": [{"groupId": "small", "name": "Small", "options": [{"value": "fast", "name": "Fast"}]}],
    }


def test_config_options_to_v1_leaves_out_unknown(caplog: pytest.LogCaptureFixture) -> None:
    unknown = converter.structure({"type": "_slider", "configId": "t", "name": "T"}, v2.SessionConfigOption)
    with pytest.raises(m.VersionError, match="protocol version 1"):
        m.config_option_to_v1(unknown)
    kept = m.config_options_to_v1([unknown, mode_option_v2()])
    assert [wire(o, v1.SessionConfigOption)["id"] for o in kept] == ["mode"]
    assert "_slider" in caplog.text


def test_config_update_to_v1() -> None:
    update = v2.ConfigOptionUpdateSessionUpdate(config_options=[mode_option_v2("code")])
    options_update, mode_update = m.config_update_to_v1(update)
    assert wire(options_update, v1.SessionUpdate)["configOptions"][0]["id"] == "mode"
    assert wire(mode_update, v1.SessionUpdate) == {"sessionUpdate": "current_mode_update", "currentModeId": "code"}
    verbose = v2.BooleanSessionConfigOption(config_id="verbose", name="Verbose", current_value=False)
    (only,) = m.config_update_to_v1(v2.ConfigOptionUpdateSessionUpdate(config_options=[verbose]))
    assert wire(only, v1.SessionUpdate) == {
        "sessionUpdate": "config_option_update",
        "configOptions": [{"type": "boolean", "id": "verbose", "name": "Verbose", "currentValue": False}],
    }


def test_current_mode_to_v2() -> None:
    verbose = v2.BooleanSessionConfigOption(config_id="verbose", name="Verbose", current_value=False)
    update = m.current_mode_to_v2(
        v1.CurrentModeUpdateSessionUpdate(current_mode_id="code"), [verbose, mode_option_v2()]
    )
    data = wire(update, v2.SessionUpdate)
    assert data["sessionUpdate"] == "config_option_update"
    assert [(o["configId"], o["currentValue"]) for o in data["configOptions"]] == [("verbose", False), ("mode", "code")]


def test_current_mode_to_v2_without_mode_option() -> None:
    with pytest.raises(m.VersionError, match="protocol version 2") as caught:
        m.current_mode_to_v2(v1.CurrentModeUpdateSessionUpdate(current_mode_id="code"), [])
    assert "Session modes become config options" in caught.value.detail


# -- same-shape updates (L13, T21) ------------------------------------------------------------------
def test_same_shape_to_v1() -> None:
    info = v2.SessionInfoUpdateSessionUpdate(title="Notes", updated_at=None)
    assert wire(m.same_shape_to_v1(info), v1.SessionUpdate) == {
        "sessionUpdate": "session_info_update",
        "title": "Notes",
        "updatedAt": None,
    }
    usage = v2.UsageUpdateSessionUpdate(used=1200, size=200_000, cost=v2.Cost(amount=0.5, currency="USD"))
    assert wire(m.same_shape_to_v1(usage), v1.SessionUpdate) == {
        "sessionUpdate": "usage_update",
        "used": 1200,
        "size": 200_000,
        "cost": {"amount": 0.5, "currency": "USD"},
    }


def test_same_shape_to_v2() -> None:
    usage = v1.UsageUpdateSessionUpdate(used=1, size=2)
    assert wire(m.same_shape_to_v2(usage), v2.SessionUpdate) == {"sessionUpdate": "usage_update", "used": 1, "size": 2}


# -- slash commands (L14) ---------------------------------------------------------------------------
def test_commands_to_v1(caplog: pytest.LogCaptureFixture) -> None:
    other_input = converter.structure({"type": "_choice", "choices": ["a"]}, v2.AvailableCommandInput)
    other_command = converter.structure({"type": "_macro", "name": "m", "description": "A macro"}, v2.AvailableCommand)
    update = v2.AvailableCommandsUpdateSessionUpdate(
        available_commands=[
            v2.CommandAvailableCommand(
                name="search", description="Search", input=v2.TextAvailableCommandInput(hint="query")
            ),
            v2.CommandAvailableCommand(name="pick", description="Pick", input=other_input),
            other_command,
        ]
    )
    assert wire(m.commands_to_v1(update), v1.SessionUpdate) == {
        "sessionUpdate": "available_commands_update",
        "availableCommands": [
            {"name": "search", "description": "Search", "input": {"hint": "query"}},
            {"name": "pick", "description": "Pick"},
            {"name": "m", "description": "A macro"},
        ],
    }
    assert "pick" in caplog.text


def test_commands_to_v2() -> None:
    update = v1.AvailableCommandsUpdateSessionUpdate(
        available_commands=[
            v1.AvailableCommand(name="search", description="Search", input=v1.UnstructuredCommandInput(hint="q")),
            v1.AvailableCommand(name="plain", description="Plain"),
        ]
    )
    assert wire(m.commands_to_v2(update), v2.SessionUpdate) == {
        "sessionUpdate": "available_commands_update",
        "availableCommands": [
            {"type": "command", "name": "search", "description": "Search", "input": {"type": "text", "hint": "q"}},
            {"type": "command", "name": "plain", "description": "Plain"},
        ],
    }


# -- MCP server configs ------------------------------------------------------------------------------
def test_mcp_server_to_v1() -> None:
    stdio = v2.StdioMcpServer(name="fs", command="/usr/bin/mcp-fs")
    assert wire(m.mcp_server_to_v1(stdio), v1.McpServer) == {
        "name": "fs",
        "command": "/usr/bin/mcp-fs",
        "args": [],
        "env": [],
    }
    http = v2.HttpMcpServer(name="linear", url="https://mcp.linear.app/mcp")
    assert wire(m.mcp_server_to_v1(http), v1.McpServer) == {
        "type": "http",
        "name": "linear",
        "url": "https://mcp.linear.app/mcp",
        "headers": [],
    }
    sse = converter.structure({"type": "sse", "name": "s", "url": "https://x/sse", "headers": []}, v2.McpServer)
    assert wire(m.mcp_server_to_v1(sse), v1.McpServer)["type"] == "sse"
    unknown = converter.structure({"type": "_ws", "name": "w"}, v2.McpServer)
    with pytest.raises(m.VersionError, match="_ws"):
        m.mcp_server_to_v1(unknown)


def test_mcp_server_to_v2() -> None:
    stdio = v1.McpServerStdio(
        name="fs", command="/usr/bin/mcp-fs", args=["--root", "/p"], env=[v1.EnvVariable(name="A", value="1")]
    )
    assert wire(m.mcp_server_to_v2(stdio), v2.McpServer) == {
        "type": "stdio",
        "name": "fs",
        "command": "/usr/bin/mcp-fs",
        "args": ["--root", "/p"],
        "env": [{"name": "A", "value": "1"}],
    }
    http = v1.HttpMcpServer(name="h", url="https://h/mcp", headers=[v1.HttpHeader(name="X", value="y")])
    assert wire(m.mcp_server_to_v2(http), v2.McpServer) == {
        "type": "http",
        "name": "h",
        "url": "https://h/mcp",
        "headers": [{"name": "X", "value": "y"}],
    }
    sse = v1.SseMcpServer(name="s", url="https://s/sse", headers=[])
    kept = m.mcp_server_to_v2(sse)  # v2 removed sse: kept verbatim as an unknown transport
    assert type(kept).__name__ == "McpServerOther"
    assert converter.unstructure(kept) == {"type": "sse", "name": "s", "url": "https://s/sse", "headers": []}


# -- stop reasons (T2, T3) ----------------------------------------------------------------------------
def test_stop_reason_to_v1() -> None:
    assert wire(m.stop_reason_to_v1("max_tokens"), v1.PromptResponse) == {"stopReason": "max_tokens"}
    assert wire(m.stop_reason_to_v1("_handoff"), v1.PromptResponse) == {
        "stopReason": "end_turn",
        "_meta": {"acp-trio/stopReason": "_handoff"},
    }


def test_idle_to_v1() -> None:
    response = m.idle_to_v1(v2.IdleStateUpdateSessionUpdate(stop_reason="cancelled"))
    assert response is not None
    assert wire(response, v1.PromptResponse) == {"stopReason": "cancelled"}
    assert m.idle_to_v1(v2.IdleStateUpdateSessionUpdate()) is None  # idle without an end: no answer


def test_idle_to_v1_error() -> None:
    error = v2.Error(code=-32000, message="model unavailable", data={"retryAfter": 5})
    with pytest.raises(RequestError) as caught:
        m.idle_to_v1(v2.IdleStateUpdateSessionUpdate(stop_reason="error", error=error))
    assert (caught.value.code, caught.value.message, caught.value.data) == (
        -32000,
        "model unavailable",
        {"retryAfter": 5},
    )


def test_stop_reason_to_v2() -> None:
    assert wire(m.stop_reason_to_v2(v1.PromptResponse(stop_reason="refusal")), v2.SessionUpdate) == {
        "sessionUpdate": "state_update",
        "state": "idle",
        "stopReason": "refusal",
    }
    round_trip = m.stop_reason_to_v2(m.stop_reason_to_v1("_handoff"))
    assert wire(round_trip, v2.SessionUpdate) == {
        "sessionUpdate": "state_update",
        "state": "idle",
        "stopReason": "_handoff",
    }


def test_error_to_v2() -> None:
    update = m.error_to_v2(RequestError(-32603, "Internal error", {"detail": "boom"}))
    assert wire(update, v2.SessionUpdate) == {
        "sessionUpdate": "state_update",
        "state": "idle",
        "stopReason": "error",
        "error": {"code": -32603, "message": "Internal error", "data": {"detail": "boom"}},
    }


# -- messages (T5, T6, T7) -----------------------------------------------------------------------------
def test_chunk_to_v1() -> None:
    chunk = v2.AgentMessageChunkSessionUpdate(message_id="msg_1", content=v2.TextContentBlock(text="hi"))
    assert wire(m.chunk_to_v1(chunk), v1.SessionUpdate) == {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "hi"},
        "messageId": "msg_1",
    }
    thought = v2.AgentThoughtChunkSessionUpdate(message_id="msg_2", content=v2.TextContentBlock(text="hm"))
    assert wire(m.chunk_to_v1(thought), v1.SessionUpdate)["sessionUpdate"] == "agent_thought_chunk"


def test_chunk_to_v2() -> None:
    chunk = v1.UserMessageChunkSessionUpdate(content=v1.TextContentBlock(text="hi"))
    assert wire(m.chunk_to_v2(chunk, "msg_gen"), v2.SessionUpdate) == {
        "sessionUpdate": "user_message_chunk",
        "messageId": "msg_gen",
        "content": {"type": "text", "text": "hi"},
    }
    own = v1.AgentThoughtChunkSessionUpdate(content=v1.TextContentBlock(text="hm"), message_id="msg_own")
    assert wire(m.chunk_to_v2(own, "msg_gen"), v2.SessionUpdate)["messageId"] == "msg_own"


def test_message_to_v1() -> None:
    blocks: list[v2.ContentBlock] = [v2.TextContentBlock(text="a"), v2.TextContentBlock(text="b")]
    chunks = m.message_to_v1(v2.UserMessageSessionUpdate(message_id="msg_u", content=blocks))
    assert [wire(c, v1.SessionUpdate) for c in chunks] == [
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "a"}, "messageId": "msg_u"},
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "b"}, "messageId": "msg_u"},
    ]
    assert m.message_to_v1(v2.AgentMessageSessionUpdate(message_id="msg_a", content=None)) == []


def test_content_to_v1() -> None:
    link = v2.ResourceLinkContentBlock(name="a", uri="file:///a", icons=[v2.Icon(src="https://i/x.png")])
    assert wire(m.content_to_v1(link), v1.ContentBlock) == {
        "type": "resource_link",
        "name": "a",
        "uri": "file:///a",
        "icons": [{"src": "https://i/x.png"}],  # v2-only field, kept as an unknown one
    }
    unknown = converter.structure({"type": "_video", "url": "x"}, v2.ContentBlock)
    with pytest.raises(m.VersionError, match="_video"):
        m.content_to_v1(unknown)


def test_content_to_v2() -> None:
    image = v1.ImageContentBlock(data="aGk=", mime_type="image/png")
    assert wire(m.content_to_v2(image), v2.ContentBlock) == {"type": "image", "data": "aGk=", "mimeType": "image/png"}


# -- tool calls (T8-T12) ------------------------------------------------------------------------------
def test_tool_status_to_v1() -> None:
    assert m.tool_status_to_v1("completed") == ("completed", {})
    assert m.tool_status_to_v1("cancelled") == ("failed", {"status": "cancelled"})
    assert m.tool_status_to_v1("paused") == ("in_progress", {"status": "paused"})
    assert m.tool_status_to_v1("_queued") == ("in_progress", {"status": "_queued"})


def test_tool_kind_to_v1() -> None:
    assert m.tool_kind_to_v1("edit") == ("edit", {})
    assert m.tool_kind_to_v1("_deploy") == ("other", {"kind": "_deploy"})


def test_tool_call_to_v1_create() -> None:
    update = v2.ToolCallUpdateSessionUpdate(
        tool_call_id="c1",
        title="Edit a.txt",
        kind="edit",
        status="cancelled",
        locations=[v2.ToolCallLocation(path=PATH)],
        content=[v2.ContentToolCallContent(content=v2.TextContentBlock(text="x"))],
        raw_input={"path": PATH},
    )
    assert wire(m.tool_call_to_v1(update, create=True), v1.SessionUpdate) == {
        "sessionUpdate": "tool_call",
        "toolCallId": "c1",
        "title": "Edit a.txt",
        "kind": "edit",
        "status": "failed",
        "content": [{"type": "content", "content": {"type": "text", "text": "x"}}],
        "locations": [{"path": PATH}],
        "rawInput": {"path": PATH},
        "_meta": {"acp-trio/status": "cancelled"},
    }
    untitled = m.tool_call_to_v1(v2.ToolCallUpdateSessionUpdate(tool_call_id="c2"), create=True)
    assert wire(untitled, v1.SessionUpdate) == {"sessionUpdate": "tool_call", "toolCallId": "c2", "title": ""}


def test_tool_call_to_v1_clears() -> None:
    update = v2.ToolCallUpdateSessionUpdate(
        tool_call_id="c1", title=None, kind=None, status=None, content=None, locations=None, meta=None
    )
    assert wire(m.tool_call_to_v1(update, create=False), v1.SessionUpdate) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "title": "",
        "kind": "other",
        "status": "pending",
        "content": [],
        "locations": [],
        "_meta": {},
    }
    patch = v2.ToolCallUpdateSessionUpdate(tool_call_id="c1", status="in_progress")
    assert wire(m.tool_call_to_v1(patch, create=False), v1.SessionUpdate) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "status": "in_progress",
    }


def test_tool_call_to_v2() -> None:
    created = v1.ToolCallSessionUpdate(
        tool_call_id="c1",
        title="Read",
        kind="read",
        status="pending",
        content=[v1.DiffToolCallContent(path=PATH, old_text="a\n", new_text="b\n")],
    )
    data = wire(m.tool_call_to_v2(created), v2.SessionUpdate)
    assert {k: v for k, v in data.items() if k != "content"} == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "title": "Read",
        "kind": "read",
        "status": "pending",
    }
    assert data["content"][0]["changes"] == [{"operation": "modify", "path": PATH, "fileType": "text"}]
    patch = v1.ToolCallUpdateSessionUpdate(  # v1 null: unchanged, so omitted (a v2 null would clear)
        tool_call_id="c1", status="completed", title=None, raw_input=None, content=None
    )
    assert wire(m.tool_call_to_v2(patch), v2.SessionUpdate) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "status": "completed",
    }


def test_tool_call_to_v2_replacing_tool_call() -> None:
    again = v1.ToolCallSessionUpdate(tool_call_id="c1", title="Read again")
    assert wire(m.tool_call_to_v2(again, known=True), v2.SessionUpdate) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "title": "Read again",
        "name": None,
        "kind": None,
        "status": None,
        "content": None,
        "locations": None,
        "rawInput": None,
        "rawOutput": None,
        "_meta": None,
    }


def test_tool_call_rows_keep_unknown_fields_and_meta_both_ways() -> None:
    data = {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "title": "T", "_meta": {"k": 1}, "_x": 2}
    update2 = converter.structure(data, v2.SessionUpdate)
    assert wire(m.tool_call_to_v1(update2, create=False), v1.SessionUpdate) == data
    assert wire(m.tool_call_to_v1(update2, create=True), v1.SessionUpdate) == {**data, "sessionUpdate": "tool_call"}
    update1 = converter.structure(data, v1.SessionUpdate)
    assert wire(m.tool_call_to_v2(update1), v2.SessionUpdate) == data
    chunk = {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "a"},
        "messageId": "m",
        "_x": 1,
    }
    assert wire(m.chunk_to_v1(converter.structure(chunk, v2.SessionUpdate)), v1.SessionUpdate) == chunk
    assert wire(m.chunk_to_v2(converter.structure(chunk, v1.SessionUpdate), "g"), v2.SessionUpdate) == chunk


def test_tool_content_to_v1() -> None:
    item = v2.ContentToolCallContent(content=v2.TextContentBlock(text="ok"))
    assert wire(m.tool_content_to_v1(item), v1.ToolCallContent) == {
        "type": "content",
        "content": {"type": "text", "text": "ok"},
    }
    with pytest.raises(m.VersionError, match="V1View"):
        m.tool_content_to_v1(v2.TerminalToolCallContent(terminal_id="t1"))


def test_tool_content_to_v2() -> None:
    terminal = v1.TerminalToolCallContent(terminal_id="term_1")
    assert wire(m.tool_content_to_v2(terminal), v2.ToolCallContent) == {"type": "terminal", "terminalId": "term_1"}


# -- diffs (T13) ---------------------------------------------------------------------------------------
def test_git_patch() -> None:
    assert m.git_patch(PATH, "old\n", "new\n") == (
        f"diff --git {PATH} {PATH}\n--- {PATH}\n+++ {PATH}\n@@ -1 +1 @@\n-old\n+new\n"
    )
    assert m.git_patch(PATH, None, "x") == (
        f"diff --git {PATH} {PATH}\nnew file mode 100644\n--- /dev/null\n+++ {PATH}\n@@ -0,0 +1 @@\n"
        "+x\n\\ No newline at end of file\n"
    )
    assert m.git_patch(PATH, None, "") == f"diff --git {PATH} {PATH}\nnew file mode 100644\n"  # an empty new file
    assert m.git_patch("/b", "same\n", "same\n", old_path="/a") == "diff --git /a /b\nrename from /a\nrename to /b\n"
    assert m.git_patch(PATH, "same\n", "same\n") == ""


def test_diff_to_v2() -> None:
    assert wire(m.diff_to_v2(m.Diff(PATH, "old\n", None)), v2.ToolCallContent) == {
        "type": "diff",
        "changes": [{"operation": "delete", "path": PATH, "fileType": "text"}],
        "patch": {
            "format": "git_patch",
            "text": f"diff --git {PATH} {PATH}\ndeleted file mode 100644\n--- {PATH}\n+++ /dev/null\n"
            "@@ -1 +0,0 @@\n-old\n",
        },
    }
    moved = m.diff_to_v2(m.Diff("/b", "x\n", "x\n", old_path="/a", mime_type="text/plain"))
    assert wire(moved, v2.ToolCallContent)["changes"] == [
        {"operation": "move", "fileType": "text", "mimeType": "text/plain", "oldPath": "/a", "path": "/b"}
    ]
    unchanged = wire(m.diff_to_v2(m.Diff(PATH, "x\n", "x\n")), v2.ToolCallContent)
    assert "patch" not in unchanged


def test_diff_to_v1() -> None:
    assert [wire(d, v1.ToolCallContent) for d in m.diff_to_v1(m.Diff(PATH, None, "new\n"))] == [
        {"type": "diff", "path": PATH, "newText": "new\n"}
    ]
    assert [wire(d, v1.ToolCallContent) for d in m.diff_to_v1(m.Diff(PATH, "old\n", None))] == [
        {"type": "diff", "path": PATH, "oldText": "old\n", "newText": ""}
    ]
    assert [wire(d, v1.ToolCallContent) for d in m.diff_to_v1(m.Diff("/b", "x\n", "y\n", old_path="/a"))] == [
        {"type": "diff", "path": "/a", "oldText": "x\n", "newText": ""},
        {"type": "diff", "path": "/b", "newText": "y\n"},
    ]


def test_diff_v1_to_v2() -> None:
    added = v1.DiffToolCallContent(path=PATH, old_text=None, new_text="n\n", meta={"k": 1})
    assert wire(m.diff_v1_to_v2(added), v2.ToolCallContent) == {
        "type": "diff",
        "changes": [{"operation": "add", "path": PATH, "fileType": "text"}],
        "patch": {
            "format": "git_patch",
            "text": f"diff --git {PATH} {PATH}\nnew file mode 100644\n--- /dev/null\n+++ {PATH}\n@@ -0,0 +1 @@\n+n\n",
        },
        "_meta": {"k": 1},
    }


def test_diff_v2_to_v1() -> None:
    diff = m.diff_to_v2(m.Diff(PATH, "old\n", "new\n"))
    assert wire(m.diff_v2_to_v1(diff), v1.ToolCallContent) == {
        "type": "content",
        "content": {
            "type": "text",
            "text": f"modify {PATH}\n```diff\ndiff --git {PATH} {PATH}\n--- {PATH}\n+++ {PATH}\n"
            "@@ -1 +1 @@\n-old\n+new\n```",
        },
    }
    moved = v2.DiffToolCallContent(changes=[v2.MoveDiffChange(old_path="/a", path="/b")])
    assert wire(m.diff_v2_to_v1(moved), v1.ToolCallContent)["content"]["text"] == "move /a -> /b"


def test_diff_v2_to_v1_is_exact_for_an_added_or_deleted_file() -> None:
    """The patch of an added or deleted file holds the whole file: v1 gets its texts, not a text item."""
    added = attrs.evolve(m.diff_to_v2(m.Diff(PATH, None, "a\nb")), meta={"k": 1})
    assert wire(m.diff_v2_to_v1(added), v1.ToolCallContent) == {
        "type": "diff",
        "path": PATH,
        "newText": "a\nb",  # "\\ No newline at end of file" read back
        "_meta": {"k": 1},
    }
    deleted = m.diff_to_v2(m.Diff(PATH, "old\n", None))
    assert wire(m.diff_v2_to_v1(deleted), v1.ToolCallContent) == {
        "type": "diff",
        "path": PATH,
        "oldText": "old\n",
        "newText": "",
    }
    # an "add" whose patch does not hold the file (a context line) is the text item
    partial = v2.DiffToolCallContent(
        changes=[v2.AddDiffChange(path=PATH)], patch=v2.DiffPatch(format="git_patch", text="@@ -1 +1,2 @@\n x\n+y\n")
    )
    assert wire(m.diff_v2_to_v1(partial), v1.ToolCallContent)["content"]["text"].startswith(f"add {PATH}\n```diff")


# -- display terminals (T14) ---------------------------------------------------------------------------
def test_terminal_to_v1() -> None:
    text = m.terminal_text("cargo test", b"ok\n\xff", v2.TerminalExitStatus(exit_code=0))
    assert text == "$ cargo test\nok\n\ufffd\n[exit 0]"
    assert m.terminal_text(None, b"", v2.TerminalExitStatus(signal="SIGTERM")) == "[SIGTERM]"
    assert m.terminal_text("sleep 9", b"", None) == "$ sleep 9\n"
    assert wire(m.terminal_to_v1(text), v1.ToolCallContent) == {
        "type": "content",
        "content": {"type": "text", "text": text},
    }


# -- permission requests (T15-T18) ---------------------------------------------------------------------
OPTIONS = [
    v2.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    v2.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]
V1_OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]


def test_permission_to_v1_tool_call() -> None:
    subject = v2.ToolCallRequestPermissionSubject(tool_call=v2.ToolCallUpdate(tool_call_id="c1"))
    request = v2.RequestPermissionRequest(
        session_id="s", title="Allow editing?", description="It edits a.txt", subject=subject, options=OPTIONS
    )
    synthetic, v1_request = m.permission_to_v1(request, synthetic_id="unused")
    assert synthetic is None
    assert wire(v1_request, v1.RequestPermissionRequest) == {
        "sessionId": "s",
        "toolCall": {"toolCallId": "c1"},
        "options": V1_OPTIONS,
        "_meta": {"acp-trio/title": "Allow editing?", "acp-trio/description": "It edits a.txt"},
    }
    _, untitled = m.permission_to_v1(request, synthetic_id="unused", tool_call_titled=False)
    assert wire(untitled, v1.RequestPermissionRequest)["toolCall"] == {"toolCallId": "c1", "title": "Allow editing?"}
    bad = v2.RequestPermissionRequest(
        session_id="s", title="?", options=[v2.PermissionOption(option_id="x", name="X", kind="_defer")]
    )
    with pytest.raises(m.VersionError, match="permission option kind"):
        m.permission_to_v1(bad, synthetic_id="c9")


def test_permission_to_v1_command() -> None:
    subject = v2.CommandRequestPermissionSubject(command="cargo test", cwd="/work")
    request = v2.RequestPermissionRequest(session_id="s", title="Run tests?", subject=subject, options=OPTIONS)
    synthetic, v1_request = m.permission_to_v1(request, synthetic_id="perm_1")
    assert synthetic is not None
    assert wire(synthetic, v1.SessionUpdate) == {
        "sessionUpdate": "tool_call",
        "toolCallId": "perm_1",
        "title": "cargo test",
        "kind": "execute",
        "status": "pending",
        "rawInput": {"command": "cargo test", "cwd": "/work"},
    }
    assert wire(v1_request, v1.RequestPermissionRequest)["toolCall"] == {"toolCallId": "perm_1"}
    attached = v2.CommandRequestPermissionSubject(command="cargo test", cwd="/work", tool_call_id="c1")
    none, on_call = m.permission_to_v1(attrs.evolve(request, subject=attached), synthetic_id="perm_2")
    assert none is None
    assert wire(on_call, v1.RequestPermissionRequest)["toolCall"] == {"toolCallId": "c1"}


def test_permission_to_v1_no_subject() -> None:
    request = v2.RequestPermissionRequest(session_id="s", title="Continue?", options=OPTIONS)
    synthetic, v1_request = m.permission_to_v1(request, synthetic_id="perm_1")
    assert synthetic is not None
    assert wire(synthetic, v1.SessionUpdate) == {
        "sessionUpdate": "tool_call",
        "toolCallId": "perm_1",
        "title": "Continue?",
        "kind": "other",
        "status": "pending",
    }
    assert wire(v1_request, v1.RequestPermissionRequest) == {
        "sessionId": "s",
        "toolCall": {"toolCallId": "perm_1"},
        "options": V1_OPTIONS,
        "_meta": {"acp-trio/title": "Continue?"},
    }


def test_permission_to_v2() -> None:
    request = v1.RequestPermissionRequest(
        session_id="s",
        tool_call=v1.ToolCallUpdate(tool_call_id="c1", title="Run rm -rf build?"),
        options=[v1.PermissionOption(option_id="allow", name="Allow", kind="allow_once")],
    )
    assert wire(m.permission_to_v2(request), v2.RequestPermissionRequest) == {
        "sessionId": "s",
        "title": "Run rm -rf build?",
        "subject": {"type": "tool_call", "toolCall": {"toolCallId": "c1", "title": "Run rm -rf build?"}},
        "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
    }
    v2_request = v2.RequestPermissionRequest(session_id="s", title="Allow?", description="d", options=OPTIONS)
    _, there = m.permission_to_v1(v2_request, synthetic_id="perm_1")
    back = wire(m.permission_to_v2(there), v2.RequestPermissionRequest)
    assert (back["title"], back["description"], "_meta" in back) == ("Allow?", "d", False)


def test_outcome_to_v1() -> None:
    selected = v2.SelectedRequestPermissionOutcome(option_id="allow")
    assert wire(m.outcome_to_v1(selected, OPTIONS), v1.RequestPermissionOutcome) == {
        "outcome": "selected",
        "optionId": "allow",
    }
    unknown = converter.structure({"outcome": "_deferred"}, v2.RequestPermissionOutcome)
    assert wire(m.outcome_to_v1(unknown, OPTIONS), v1.RequestPermissionOutcome) == {
        "outcome": "selected",
        "optionId": "reject",
    }
    assert wire(m.outcome_to_v1(unknown, OPTIONS[:1]), v1.RequestPermissionOutcome) == {"outcome": "cancelled"}


def test_outcome_to_v2() -> None:
    cancelled = v1.CancelledRequestPermissionOutcome()
    assert wire(m.outcome_to_v2(cancelled), v2.RequestPermissionOutcome) == {"outcome": "cancelled"}


# -- plans (T20) ---------------------------------------------------------------------------------------
def test_plan_to_v1() -> None:
    first = [v2.PlanEntry(content="a", priority="high", status="completed")]
    second = [
        v2.PlanEntry(content="b", priority="low", status="cancelled"),
        v2.PlanEntry(content="c", priority="_urgent", status="_blocked"),
    ]
    assert wire(m.plan_to_v1([first, second]), v1.SessionUpdate) == {
        "sessionUpdate": "plan",
        "entries": [
            {"content": "a", "priority": "high", "status": "completed"},
            {"content": "b", "priority": "low", "status": "completed", "_meta": {"acp-trio/status": "cancelled"}},
            {
                "content": "c",
                "priority": "medium",
                "status": "pending",
                "_meta": {"acp-trio/status": "_blocked", "acp-trio/priority": "_urgent"},
            },
        ],
    }


def test_plan_to_v2() -> None:
    update = v1.PlanSessionUpdate(entries=[v1.PlanEntry(content="a", priority="high", status="pending")])
    assert wire(m.plan_to_v2(update, "plan_s1"), v2.SessionUpdate) == {
        "sessionUpdate": "plan_update",
        "plan": {
            "type": "items",
            "planId": "plan_s1",
            "entries": [{"content": "a", "priority": "high", "status": "pending"}],
        },
    }


# -- the rest: content chunks (T11), states (T22), auth methods (L3), elicitation (T19) ----------------
def test_content_chunk_to_v1() -> None:
    chunk = v2.ToolCallContentChunkSessionUpdate(
        tool_call_id="c1", content=v2.ContentToolCallContent(content=v2.TextContentBlock(text="b")), meta={"k": 1}
    )
    so_far = [
        v1.ContentToolCallContent(content=v1.TextContentBlock(text="a")),
        v1.ContentToolCallContent(content=v1.TextContentBlock(text="b")),
    ]
    items = [{"type": "content", "content": {"type": "text", "text": t}} for t in "ab"]
    assert wire(m.content_chunk_to_v1(chunk, so_far, create=False), v1.SessionUpdate) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "content": items,
    }
    assert wire(m.content_chunk_to_v1(chunk, so_far, create=True), v1.SessionUpdate) == {
        "sessionUpdate": "tool_call",
        "toolCallId": "c1",
        "title": "",
        "content": items,
    }


def test_state_to_v1() -> None:
    assert m.state_to_v1(v2.RunningStateUpdateSessionUpdate()) is None
    assert m.state_to_v1(v2.RequiresActionStateUpdateSessionUpdate()) is None
    unknown = converter.structure({"sessionUpdate": "state_update", "state": "_paused"}, v2.SessionUpdate)
    assert m.state_to_v1(unknown) is None
    ended = m.state_to_v1(v2.IdleStateUpdateSessionUpdate(stop_reason="max_turn_requests"))
    assert ended is not None
    assert wire(ended, v1.PromptResponse) == {"stopReason": "max_turn_requests"}


def test_auth_method_to_v1() -> None:
    agent = v2.AgentAuthMethod(method_id="agent-login", name="Agent login", description="Sign in")
    assert wire(m.auth_method_to_v1(agent), v1.AuthMethod) == {
        "id": "agent-login",
        "name": "Agent login",
        "description": "Sign in",
    }
    terminal = v2.TerminalAuthMethod(
        method_id="tui", name="TUI", args=["--login"], env=[v2.EnvVariable(name="MODE", value="login")]
    )
    assert wire(m.auth_method_to_v1(terminal), v1.AuthMethod) == {
        "type": "terminal",
        "id": "tui",
        "name": "TUI",
        "args": ["--login"],
        "env": {"MODE": "login"},
    }
    unknown = converter.structure({"type": "_oauth", "methodId": "o", "name": "O"}, v2.AuthMethod)
    with pytest.raises(m.VersionError, match="_oauth"):
        m.auth_method_to_v1(unknown)


def test_auth_method_to_v2() -> None:
    agent = v1.AuthMethodAgent(id="agent-login", name="Agent login")
    assert wire(m.auth_method_to_v2(agent), v2.AuthMethod) == {
        "type": "agent",
        "methodId": "agent-login",
        "name": "Agent login",
    }
    terminal = v1.TerminalAuthMethod(id="tui", name="TUI", env={"MODE": "login"})
    assert wire(m.auth_method_to_v2(terminal), v2.AuthMethod) == {
        "type": "terminal",
        "methodId": "tui",
        "name": "TUI",
        "env": [{"name": "MODE", "value": "login"}],
    }


ELICIT = {
    "mode": "form",
    "sessionId": "s",
    "message": "Which branch?",
    "requestedSchema": {"type": "object", "properties": {"branch": {"type": "string"}}, "required": ["branch"]},
}


def test_elicitation_to_v1() -> None:
    request = converter.structure(ELICIT, v2.CreateElicitationRequest)
    assert wire(m.elicitation_to_v1(request), v1.CreateElicitationRequest) == ELICIT
    unknown = converter.structure({"mode": "_voice", "message": "Say it"}, v2.CreateElicitationRequest)
    with pytest.raises(m.VersionError, match="protocol version 1"):
        m.elicitation_to_v1(unknown)


def test_elicitation_to_v2() -> None:
    request = converter.structure(ELICIT, v1.CreateElicitationRequest)
    assert wire(m.elicitation_to_v2(request), v2.CreateElicitationRequest) == ELICIT


def test_every_row_names_tests_that_exist() -> None:
    here = sys.modules[__name__]
    keys = [row.key for row in m.ROWS]
    assert len(keys) == len(set(keys))
    for row in m.ROWS:
        assert row.tests, row.key
        for name in row.tests:
            assert callable(getattr(here, name, None)), f"row {row.key} names {name}, which is not in {__file__}"

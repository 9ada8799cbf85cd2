"""A corpus of typical ACP v1 messages, written by hand, for the codec benchmark (``bench.py``).

Each entry is ``(method, part, payload)`` where ``part`` is ``"params"`` (of a request or a
notification) or ``"result"`` (of a request's response), and ``payload`` is the JSON value exactly
as it travels on the wire.  The payloads deliberately carry a few explicit ``null`` / ``false`` /
``[]`` values the schema admits: a codec that round-trips them exactly must keep them.

``python benchmarks/corpus.py`` validates every payload with ``jsonschema`` against the matching
``$defs`` entry of ``schema/v1/schema.json`` (see ``validate_corpus``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final, Literal

Part = Literal["params", "result"]
Message = tuple[str, Part, dict[str, Any]]

SCHEMA_PATH: Final = Path(__file__).resolve().parent.parent / "schema" / "v1" / "schema.json"

SESSION_ID: Final = "sess_01JZ8Q4M6T2B7X3K9PVR5CWD0E"

# A 1x1 transparent PNG.
_PNG_1X1: Final = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

INITIALIZE_PARAMS: Final[dict[str, Any]] = {
    "protocolVersion": 1,
    "clientCapabilities": {
        "fs": {"readTextFile": True, "writeTextFile": True},
        "terminal": True,
        "auth": {"terminal": False},
        "_meta": None,
    },
    "clientInfo": {"name": "zed", "title": "Zed", "version": "0.201.4"},
    "_meta": None,
}

INITIALIZE_RESULT: Final[dict[str, Any]] = {
    "protocolVersion": 1,
    "agentCapabilities": {
        "loadSession": True,
        "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
        "mcpCapabilities": {"http": True, "sse": False},
    },
    "authMethods": [],
    "agentInfo": {"name": "example-agent", "title": None, "version": "1.4.2"},
}

NEW_SESSION_PARAMS: Final[dict[str, Any]] = {
    "cwd": "/home/alice/src/widgets",
    "mcpServers": [
        {
            "name": "filesystem",
            "command": "/usr/local/bin/mcp-server-filesystem",
            "args": ["--root", "/home/alice/src/widgets", "--read-only"],
            "env": [{"name": "LOG_LEVEL", "value": "info"}],
        },
        {
            "type": "http",
            "name": "issues",
            "url": "https://mcp.example.com/issues",
            "headers": [{"name": "Authorization", "value": "Bearer 3f9c2e71a0b84d6e"}],
        },
    ],
}

NEW_SESSION_RESULT: Final[dict[str, Any]] = {
    "sessionId": SESSION_ID,
    "modes": {
        "currentModeId": "default",
        "availableModes": [
            {"id": "default", "name": "Always ask", "description": "Prompts for permission on first use of each tool"},
            {"id": "acceptEdits", "name": "Accept edits", "description": None},
            {"id": "plan", "name": "Plan mode"},
        ],
    },
}

PROMPT_PARAMS: Final[dict[str, Any]] = {
    "sessionId": SESSION_ID,
    "prompt": [
        {"type": "text", "text": "Why does `parse_config` reject this file? The screenshot shows the error."},
        {"type": "image", "mimeType": "image/png", "data": _PNG_1X1, "annotations": None},
        {
            "type": "resource_link",
            "uri": "file:///home/alice/src/widgets/config/settings.toml",
            "name": "settings.toml",
            "mimeType": "application/toml",
            "size": 2048,
        },
    ],
}

PROMPT_RESULT: Final[dict[str, Any]] = {"stopReason": "end_turn", "_meta": None}

AGENT_MESSAGE_CHUNK: Final[dict[str, Any]] = {
    "sessionId": SESSION_ID,
    "update": {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "I'll start by reading `config/settings.toml` and the parser."},
    },
}

TOOL_CALL: Final[dict[str, Any]] = {
    "sessionId": SESSION_ID,
    "update": {
        "sessionUpdate": "tool_call",
        "toolCallId": "call_7f3a9b",
        "title": "Read src/widgets/config.py",
        "kind": "read",
        "status": "in_progress",
        "content": [
            {"type": "content", "content": {"type": "text", "text": "Reading lines 40-120 of config.py"}},
        ],
        "locations": [{"path": "/home/alice/src/widgets/src/widgets/config.py", "line": 40}],
        "rawInput": {
            "path": "/home/alice/src/widgets/src/widgets/config.py",
            "offset": 40,
            "limit": 80,
            "encoding": None,
            "follow_symlinks": False,
            "exclude": [],
        },
    },
}

TOOL_CALL_UPDATE: Final[dict[str, Any]] = {
    "sessionId": SESSION_ID,
    "update": {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "call_b2c4d1",
        "status": "completed",
        "title": None,
        "content": [
            {
                "type": "diff",
                "path": "/home/alice/src/widgets/src/widgets/config.py",
                "oldText": "    if not raw.get('name'):\n        raise ConfigError('missing name')\n",
                "newText": "    if 'name' not in raw:\n        raise ConfigError('missing name')\n",
            },
        ],
        "locations": [],
    },
}

PLAN: Final[dict[str, Any]] = {
    "sessionId": SESSION_ID,
    "update": {
        "sessionUpdate": "plan",
        "entries": [
            {
                "content": "Reproduce the parse failure with the attached settings.toml",
                "priority": "high",
                "status": "completed",
            },
            {"content": "Fix the empty-name check in parse_config", "priority": "high", "status": "in_progress"},
            {
                "content": "Add a regression test for names that are empty strings",
                "priority": "medium",
                "status": "pending",
            },
        ],
    },
}

REQUEST_PERMISSION_PARAMS: Final[dict[str, Any]] = {
    "sessionId": SESSION_ID,
    "toolCall": {
        "toolCallId": "call_b2c4d1",
        "title": "Edit src/widgets/config.py",
        "kind": "edit",
        "status": "pending",
        "rawInput": {"path": "/home/alice/src/widgets/src/widgets/config.py", "replace_all": False},
    },
    "options": [
        {"optionId": "allow-once", "name": "Allow", "kind": "allow_once"},
        {"optionId": "allow-always", "name": "Always allow edits", "kind": "allow_always"},
        {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
    ],
}

REQUEST_PERMISSION_RESULT: Final[dict[str, Any]] = {"outcome": {"outcome": "selected", "optionId": "allow-once"}}

CORPUS: Final[list[Message]] = [
    ("initialize", "params", INITIALIZE_PARAMS),
    ("initialize", "result", INITIALIZE_RESULT),
    ("session/new", "params", NEW_SESSION_PARAMS),
    ("session/new", "result", NEW_SESSION_RESULT),
    ("session/prompt", "params", PROMPT_PARAMS),
    ("session/prompt", "result", PROMPT_RESULT),
    ("session/update", "params", AGENT_MESSAGE_CHUNK),
    ("session/update", "params", TOOL_CALL),
    ("session/update", "params", TOOL_CALL_UPDATE),
    ("session/update", "params", PLAN),
    ("session/request_permission", "params", REQUEST_PERMISSION_PARAMS),
    ("session/request_permission", "result", REQUEST_PERMISSION_RESULT),
]

# The `$defs` entry of the v1 schema each (method, part) is an instance of.  The official SDK's
# pydantic models and acp-trio's attrs classes carry the same names.
DEF_NAMES: Final[dict[tuple[str, Part], str]] = {
    ("initialize", "params"): "InitializeRequest",
    ("initialize", "result"): "InitializeResponse",
    ("session/new", "params"): "NewSessionRequest",
    ("session/new", "result"): "NewSessionResponse",
    ("session/prompt", "params"): "PromptRequest",
    ("session/prompt", "result"): "PromptResponse",
    ("session/update", "params"): "SessionNotification",
    ("session/request_permission", "params"): "RequestPermissionRequest",
    ("session/request_permission", "result"): "RequestPermissionResponse",
}


def label(method: str, part: Part, payload: dict[str, Any]) -> str:
    """A short name for a corpus entry, e.g. ``session/update:tool_call``."""
    update = payload.get("update")
    if method == "session/update" and isinstance(update, dict):
        return f"{method}:{update.get('sessionUpdate')}"
    return f"{method} {part}"


def validate_corpus(schema_path: Path = SCHEMA_PATH) -> list[str]:
    """Validate every payload against its ``$defs`` entry; return the problems (empty: all valid).

    Needs ``jsonschema``.  Also checks that the ``$defs`` entry carries the entry's ``x-method``.
    """
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped,unused-ignore]

    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    defs: dict[str, Any] = schema["$defs"]
    problems: list[str] = []
    for method, part, payload in CORPUS:
        name = DEF_NAMES[(method, part)]
        where = label(method, part, payload)
        if defs[name].get("x-method") != method:
            problems.append(f"{where}: $defs/{name} has x-method {defs[name].get('x-method')!r}")
        validator = Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": defs})
        for err in validator.iter_errors(payload):
            path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
            problems.append(f"{where}: ${path}: {err.message}")
    return problems


if __name__ == "__main__":
    found = validate_corpus()
    for problem in found:
        print(problem)
    print(f"{len(CORPUS)} messages, {len(found)} problem(s)")
    sys.exit(1 if found else 0)

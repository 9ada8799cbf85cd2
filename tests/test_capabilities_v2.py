"""ACP v2 capability enforcement (``acp_trio._capabilities``): wire JSON in, raise or return.

Wire dicts come from the v2 spec pages' examples: ``docs/protocol/v2/initialization.mdx``,
``migration.mdx``, ``authentication.mdx``, ``session-setup.mdx``, ``session-list.mdx``,
``session-delete.mdx``, ``prompt-lifecycle.mdx``, ``content.mdx``, ``elicitation.mdx``; unstable
rules from ``schema/v2/schema.unstable.json``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from acp_schema import v1, v1_unstable, v2, v2_unstable
from acp_trio._capabilities import (
    V1_ONLY_METHODS,
    CapabilityError,
    agent_rules_apply_v2,
    check_agent_call_v2,
    check_client_call_v2,
    check_method_in_version,
    client_rules_apply_v2,
)

Message = dict[str, Any]

# -- wire examples from the spec pages ----------------------------------------------------------

# initialization.mdx, the agent's initialize response
INIT_AGENT_CAPS: Message = {
    "session": {
        "prompt": {"image": {}, "audio": {}, "embeddedContext": {}},
        "mcp": {"stdio": {}, "http": {}},
    }
}
# migration.mdx, "v2 response"
MIGRATION_AGENT_CAPS: Message = {
    "session": {
        "prompt": {"image": {}, "embeddedContext": {}},
        "mcp": {"stdio": {}, "http": {}},
        "delete": {},
        "additionalDirectories": {},
    }
}
# every stable and unstable agent marker
ALL_AGENT_CAPS: Message = {
    "session": {
        "prompt": {"image": {}, "audio": {}, "embeddedContext": {}},
        "mcp": {"stdio": {}, "http": {}, "acp": {}},
        "delete": {},
        "additionalDirectories": {},
        "systemPrompt": {"mode": {"override": {}}},
        "fork": {},
        "archive": {},
        "status": {},
        "title": {},
    },
    "auth": {"status": {}},
    "providers": {},
}
# authentication.mdx
AGENT_LOGIN: Message = {
    "methodId": "agent-login",
    "name": "Agent login",
    "type": "agent",
    "description": "Sign in using the agent's login flow",
}
TERMINAL_LOGIN: Message = {
    "methodId": "terminal-login",
    "name": "Log in from the terminal",
    "type": "terminal",
    "args": ["--login"],
    "env": [{"name": "ACP_INTERACTIVE_LOGIN", "value": "1"}],
}
# session-setup.mdx
STDIO_SERVER: Message = {
    "type": "stdio",
    "name": "workspace-tools",
    "command": "/path/to/mcp-server",
    "args": ["--stdio"],
    "env": [],
}
HTTP_SERVER: Message = {
    "type": "http",
    "name": "api-server",
    "url": "https://api.example.com/mcp",
    "headers": [{"name": "Authorization", "value": "Bearer token123"}],
}
SESSION_NEW: Message = {"cwd": "/home/user/project", "mcpServers": [STDIO_SERVER]}
SESSION_RESUME: Message = {"sessionId": "sess_789xyz", "cwd": "/home/user/project", "mcpServers": [STDIO_SERVER]}
SESSION_RESUME_REPLAY: Message = {
    "sessionId": "sess_789xyz",
    "cwd": "/home/user/project",
    "replayFrom": {"type": "start"},
}
SESSION_RESUME_DIRS: Message = {
    "sessionId": "sess_789xyz",
    "cwd": "/home/user/project",
    "additionalDirectories": ["/home/user/shared-lib", "/home/user/product-docs"],
}
# content.mdx blocks
TEXT: Message = {"type": "text", "text": "What's the weather like today?"}
IMAGE: Message = {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB..."}
AUDIO: Message = {"type": "audio", "mimeType": "audio/wav", "data": "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAAB..."}
RESOURCE: Message = {
    "type": "resource",
    "resource": {"uri": "file:///home/user/script.py", "mimeType": "text/x-python", "text": "def hello(): ..."},
}
RESOURCE_LINK: Message = {
    "type": "resource_link",
    "uri": "file:///home/user/document.pdf",
    "name": "document.pdf",
    "mimeType": "application/pdf",
    "size": 1024000,
}
# elicitation.mdx
ELICIT_FORM: Message = {
    "sessionId": "sess_abc123",
    "mode": "form",
    "message": "How should I approach this refactoring?",
    "requestedSchema": {
        "type": "object",
        "properties": {"strategy": {"type": "string", "enum": ["conservative", "balanced", "aggressive"]}},
        "required": ["strategy"],
    },
}
ELICIT_URL: Message = {
    "requestId": 12,
    "mode": "url",
    "elicitationId": "github-oauth-001",
    "url": "https://agent.example.com/connect?elicitationId=github-oauth-001",
    "message": "Please authorize access to your repositories.",
}
ELICIT_COMPLETE: Message = {"elicitationId": "github-oauth-001"}

# Marker values: only an object advertises (migration.mdx, "Support markers are objects, not booleans").
ADVERTISING = [pytest.param({}, id="{}"), pytest.param({"_meta": {"x": 1}}, id="object")]
NOT_ADVERTISING = [
    pytest.param(None, id="null"),
    pytest.param(True, id="true"),
    pytest.param(False, id="false"),
    pytest.param("yes", id="string"),
    pytest.param([], id="array"),
]
ABSENT = object()


def prompt(*blocks: Message) -> Message:
    return {"sessionId": "sess_abc123def456", "prompt": list(blocks)}


def with_marker(caps: Message, path: tuple[str, ...], value: Any) -> Message:
    """A deep copy of ``caps`` with ``path`` set to ``value`` (removed for ``ABSENT``), creating parents."""
    out = copy.deepcopy(caps)
    node = out
    for key in path[:-1]:
        if type(node.get(key)) is not dict:
            node[key] = {}
        node = node[key]
    if value is ABSENT:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return out


def refused_agent(method: str, params: Any, caps: Any, auth: Any = None) -> CapabilityError:
    with pytest.raises(CapabilityError) as info:
        check_agent_call_v2(method, params, caps, auth)
    assert info.value.method == method and info.value.peer == "agent"
    return info.value


def refused_client(method: str, params: Any, caps: Any) -> CapabilityError:
    with pytest.raises(CapabilityError) as info:
        check_client_call_v2(method, params, caps)
    assert info.value.method == method and info.value.peer == "client"
    return info.value


# -- markers ------------------------------------------------------------------------------------

# (method, params, capabilities without the marker, path of the marker)
MARKER_RULES = [
    pytest.param("session/new", {"cwd": "/home/user/project"}, {}, ("session",), id="session"),
    pytest.param(
        "session/delete", {"sessionId": "sess_abc123def456"}, {"session": {}}, ("session", "delete"), id="delete"
    ),
    pytest.param(
        "session/prompt", prompt(IMAGE), {"session": {"prompt": {}}}, ("session", "prompt", "image"), id="image"
    ),
    pytest.param(
        "session/new",
        {"cwd": "/p", "mcpServers": [HTTP_SERVER]},
        {"session": {}},
        ("session", "mcp", "http"),
        id="http",
    ),
    pytest.param(
        "session/resume", SESSION_RESUME_DIRS, {"session": {}}, ("session", "additionalDirectories"), id="dirs"
    ),
]


@pytest.mark.parametrize(("method", "params", "caps", "path"), MARKER_RULES)
@pytest.mark.parametrize("value", ADVERTISING)
def test_an_object_marker_advertises(
    method: str, params: Message, caps: Message, path: tuple[str, ...], value: Any
) -> None:
    check_agent_call_v2(method, params, with_marker(caps, path, value), None)


@pytest.mark.parametrize(("method", "params", "caps", "path"), MARKER_RULES)
@pytest.mark.parametrize("value", [pytest.param(ABSENT, id="absent"), *NOT_ADVERTISING])
def test_absent_null_and_booleans_do_not_advertise(
    method: str, params: Message, caps: Message, path: tuple[str, ...], value: Any
) -> None:
    error = refused_agent(method, params, with_marker(caps, path, value))
    assert error.capability == ".".join(path)


@pytest.mark.parametrize("value", [pytest.param(ABSENT, id="absent"), *NOT_ADVERTISING])
def test_a_non_object_parent_hides_its_markers(value: Any) -> None:
    """``session.prompt: true`` (a v1-style boolean group) advertises no prompt extension."""
    caps = with_marker({"session": {}}, ("session", "prompt"), value)
    assert refused_agent("session/prompt", prompt(IMAGE), caps).capability == "session.prompt.image"


@pytest.mark.parametrize("caps", [None, [], "session", 1], ids=repr)
def test_capabilities_that_are_not_an_object_advertise_nothing(caps: Any) -> None:
    assert refused_agent("session/new", SESSION_NEW, caps).capability == "session"
    assert refused_client("elicitation/create", ELICIT_FORM, caps).capability == "elicitation"


# -- the session surface ------------------------------------------------------------------------

CLIENT_SENT_SESSION_METHODS = sorted(m for m, s in v2.METHODS.items() if s.side == "agent" and m.startswith("session/"))
BASELINE = ["session/new", "session/list", "session/resume", "session/close", "session/prompt", "session/cancel"]


def test_the_computed_session_surface_holds_the_baseline() -> None:
    assert set(BASELINE) | {"session/set_config_option", "session/delete"} <= set(CLIENT_SENT_SESSION_METHODS)


@pytest.mark.parametrize("method", CLIENT_SENT_SESSION_METHODS)
@pytest.mark.parametrize("value", [pytest.param(ABSENT, id="absent"), *NOT_ADVERTISING])
def test_every_session_method_needs_the_session_surface(method: str, value: Any) -> None:
    caps = with_marker({"auth": {}}, ("session",), value)
    error = refused_agent(method, {"sessionId": "sess_abc123def456"}, caps)
    assert error.capability == "session"
    assert "session/*" in str(error)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("session/new", SESSION_NEW),
        ("session/new", {"cwd": "/home/user/project"}),  # mcpServers is optional in v2
        ("session/resume", SESSION_RESUME),
        ("session/resume", SESSION_RESUME_REPLAY),
        ("session/list", {"cwd": "/home/user/project", "cursor": "eyJwYWdlIjogMn0="}),
        ("session/list", {}),
        ("session/close", {"sessionId": "sess_789xyz"}),
        ("session/prompt", prompt(TEXT, RESOURCE_LINK)),
        ("session/cancel", {"sessionId": "sess_abc123def456"}),
        ("session/set_config_option", {"sessionId": "sess_abc123def456", "configId": "mode", "value": "code"}),
    ],
)
def test_the_baseline_needs_nothing_but_session(method: str, params: Message) -> None:
    """session-list.mdx, session-setup.mdx: list/resume/close have no markers of their own."""
    check_agent_call_v2(method, params, {"session": {"mcp": {"stdio": {}}}}, None)


def test_initialize_and_the_v1_session_markers_do_not_matter() -> None:
    check_agent_call_v2("initialize", {"protocolVersion": 2, "capabilities": {}}, {}, None)
    v1_style = {"loadSession": True, "sessionCapabilities": {"list": {}, "resume": {}, "close": {}}}
    assert refused_agent("session/list", {}, v1_style).capability == "session"


def test_session_delete_needs_session_delete() -> None:
    params = {"sessionId": "sess_abc123def456"}
    check_agent_call_v2("session/delete", params, {"session": {"delete": {}}}, None)  # session-delete.mdx
    check_agent_call_v2("session/delete", params, MIGRATION_AGENT_CAPS, None)
    assert refused_agent("session/delete", params, INIT_AGENT_CAPS).capability == "session.delete"
    assert refused_agent("session/delete", params, {"session": {"delete": None}}).capability == "session.delete"


# -- prompt content -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "path"),
    [
        (IMAGE, ("session", "prompt", "image")),
        (AUDIO, ("session", "prompt", "audio")),
        (RESOURCE, ("session", "prompt", "embeddedContext")),
    ],
    ids=["image", "audio", "resource"],
)
def test_rich_prompt_blocks_need_their_prompt_marker(block: Message, path: tuple[str, ...]) -> None:
    check_agent_call_v2("session/prompt", prompt(TEXT, block), INIT_AGENT_CAPS, None)
    caps = with_marker(INIT_AGENT_CAPS, path, ABSENT)
    error = refused_agent("session/prompt", prompt(TEXT, block), caps)
    assert error.capability == ".".join(path)
    assert error.detail == f"prompt[1] is a {block['type']} block"


def test_the_prompt_lifecycle_example_needs_embedded_context() -> None:
    params = prompt(
        {"type": "text", "text": "Can you analyze this code for potential issues?"},
        {"type": "resource", "resource": {"uri": "file:///home/user/project/main.py", "text": "def f(): ..."}},
    )
    check_agent_call_v2("session/prompt", params, MIGRATION_AGENT_CAPS, None)
    assert refused_agent("session/prompt", params, {"session": {}}).capability == "session.prompt.embeddedContext"


def test_audio_is_refused_by_the_migration_example_agent() -> None:
    assert refused_agent("session/prompt", prompt(AUDIO), MIGRATION_AGENT_CAPS).capability == "session.prompt.audio"


@pytest.mark.parametrize(
    "block", [TEXT, RESOURCE_LINK, {"type": "_acme_widget"}, {"type": "future_block"}, {"text": "no type"}, "junk"]
)
def test_baseline_and_unknown_blocks_need_no_marker(block: Any) -> None:
    check_agent_call_v2("session/prompt", prompt(block), {"session": {}}, None)


def test_prompt_blocks_are_only_checked_on_session_prompt() -> None:
    check_agent_call_v2("session/new", {"cwd": "/p", "prompt": [IMAGE]}, {"session": {}}, None)


# -- MCP transports and session setup fields ----------------------------------------------------


@pytest.mark.parametrize("method", ["session/new", "session/resume"])
@pytest.mark.parametrize(
    ("server", "path"),
    [(STDIO_SERVER, ("session", "mcp", "stdio")), (HTTP_SERVER, ("session", "mcp", "http"))],
    ids=["stdio", "http"],
)
def test_mcp_servers_need_their_transport_marker(method: str, server: Message, path: tuple[str, ...]) -> None:
    params = {"sessionId": "s", "cwd": "/home/user/project", "mcpServers": [server]}
    check_agent_call_v2(method, params, INIT_AGENT_CAPS, None)
    error = refused_agent(method, params, with_marker(INIT_AGENT_CAPS, path, ABSENT))
    assert error.capability == ".".join(path)
    assert error.detail == f"mcpServers[0] uses the {server['type']} transport"


def test_stdio_is_no_longer_baseline() -> None:
    """migration.mdx: ``stdio`` is now an explicit capability (``session.mcp.stdio``)."""
    assert (
        refused_agent("session/new", SESSION_NEW, {"session": {"mcp": {"http": {}}}}).capability == "session.mcp.stdio"
    )


def test_sse_servers_are_refused_by_v2_agents() -> None:
    sse = {"type": "sse", "name": "old", "url": "https://example.com/sse", "headers": []}
    params = {"cwd": "/p", "mcpServers": [STDIO_SERVER, sse]}
    error = refused_agent("session/new", params, ALL_AGENT_CAPS)
    assert error.capability == "session.mcp.sse" and error.detail == "mcpServers[1] uses the sse transport"


@pytest.mark.parametrize("server", [{"type": "_acme_pipe", "name": "x"}, {"name": "untyped"}, None])
def test_unknown_transports_need_no_marker(server: Any) -> None:
    check_agent_call_v2("session/new", {"cwd": "/p", "mcpServers": [server]}, {"session": {}}, None)


@pytest.mark.parametrize("method", ["session/new", "session/resume"])
@pytest.mark.parametrize("dirs", [pytest.param(["/home/user/shared-lib"], id="some"), pytest.param([], id="empty")])
def test_additional_directories_need_their_marker(method: str, dirs: list[str]) -> None:
    """session-setup.mdx: "Clients MUST only send additionalDirectories when the Agent advertises" it."""
    params = {"sessionId": "sess_789xyz", "cwd": "/home/user/project", "additionalDirectories": dirs}
    check_agent_call_v2(method, params, MIGRATION_AGENT_CAPS, None)
    error = refused_agent(method, params, INIT_AGENT_CAPS)
    assert error.capability == "session.additionalDirectories"
    assert error.detail == "params carry additionalDirectories"


@pytest.mark.parametrize("params", [{"cwd": "/p"}, {"cwd": "/p", "additionalDirectories": None}])
def test_no_additional_directories_need_no_marker(params: Message) -> None:
    check_agent_call_v2("session/new", params, {"session": {}}, None)


def test_session_list_ignores_additional_directories() -> None:
    check_agent_call_v2("session/list", {"additionalDirectories": ["/x"]}, {"session": {}}, None)


# -- authentication -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "auth_methods",
    [
        pytest.param(None, id="omitted"),
        pytest.param([], id="empty"),
        pytest.param(["agent-login"], id="no-objects"),
        pytest.param([{"name": "no id", "type": "agent"}], id="no-methodId"),
        pytest.param({"methodId": "agent-login"}, id="not-a-list"),
    ],
)
@pytest.mark.parametrize("method", ["auth/login", "auth/logout"])
def test_the_auth_methods_need_advertised_auth_methods(method: str, auth_methods: Any) -> None:
    caps = {"session": {}, "auth": {}}  # capabilities.auth is orthogonal
    error = refused_agent(method, {"methodId": "agent-login"} if method == "auth/login" else {}, caps, auth_methods)
    assert error.capability == "authMethods"


@pytest.mark.parametrize("auth_methods", [[AGENT_LOGIN], [TERMINAL_LOGIN, AGENT_LOGIN], [TERMINAL_LOGIN]])
def test_logout_is_available_with_any_auth_method(auth_methods: list[Message]) -> None:
    """authentication.mdx "Logging Out": no separate logout marker; capabilities need not be present."""
    check_agent_call_v2("auth/logout", {}, {}, auth_methods)


def test_login_with_an_advertised_agent_method() -> None:
    check_agent_call_v2("auth/login", {"methodId": "agent-login"}, {}, [TERMINAL_LOGIN, AGENT_LOGIN])
    custom = {"methodId": "sso", "name": "SSO", "type": "_acme_sso"}
    check_agent_call_v2("auth/login", {"methodId": "sso"}, {}, [custom])  # custom types define their own flow


def test_login_refuses_an_unadvertised_method_id() -> None:
    error = refused_agent("auth/login", {"methodId": "other"}, {}, [AGENT_LOGIN])
    assert error.capability == "authMethods"
    assert error.detail == "methodId 'other' is not one of the advertised authMethods"


def test_login_refuses_a_terminal_method() -> None:
    """authentication.mdx: "Clients MUST NOT pass a terminal method"."""
    error = refused_agent("auth/login", {"methodId": "terminal-login"}, {}, [AGENT_LOGIN, TERMINAL_LOGIN])
    assert error.detail is not None and "terminal method" in error.detail


def test_the_v1_logout_marker_does_not_advertise_auth_logout() -> None:
    refused_agent("auth/logout", {}, {"auth": {"logout": {}}}, [])


# -- unstable agent markers ---------------------------------------------------------------------

UNSTABLE_METHOD_RULES = [
    ("session/fork", {"sessionId": "s", "cwd": "/p"}, ("session", "fork")),
    ("session/archive", {"sessionId": "s"}, ("session", "archive")),
    ("session/unarchive", {"sessionId": "s"}, ("session", "archive")),
    ("session/status", {"sessionId": "s"}, ("session", "status")),
    ("session/set_title", {"sessionId": "s", "title": "t"}, ("session", "title")),
    ("auth/status", {}, ("auth", "status")),
    ("providers/list", {}, ("providers",)),
    ("providers/set", {"providerId": "p"}, ("providers",)),
    ("providers/disable", {"providerId": "p"}, ("providers",)),
]


def test_the_unstable_rules_cover_the_unstable_agent_methods() -> None:
    extra = {m for m, s in v2_unstable.METHODS.items() if s.side == "agent" and m not in v2.METHODS}
    assert extra == {method for method, _, _ in UNSTABLE_METHOD_RULES}


@pytest.mark.parametrize(("method", "params", "path"), UNSTABLE_METHOD_RULES)
def test_unstable_methods_need_their_marker(method: str, params: Message, path: tuple[str, ...]) -> None:
    check_agent_call_v2(method, params, ALL_AGENT_CAPS, [AGENT_LOGIN])
    caps = with_marker(ALL_AGENT_CAPS, path, {"_meta": {}})
    check_agent_call_v2(method, params, caps, None)
    for value in (ABSENT, None, True):
        assert refused_agent(method, params, with_marker(ALL_AGENT_CAPS, path, value)).capability == ".".join(path)


def test_auth_status_does_not_need_auth_methods() -> None:
    check_agent_call_v2("auth/status", {}, {"auth": {"status": {}}}, None)


def test_session_list_archived_filter_needs_session_archive() -> None:
    check_agent_call_v2("session/list", {"archived": "include"}, {"session": {"archive": {}}}, None)
    check_agent_call_v2("session/list", {"archived": None}, {"session": {}}, None)
    error = refused_agent("session/list", {"archived": "only"}, {"session": {}})
    assert error.capability == "session.archive"


@pytest.mark.parametrize("method", ["session/new", "session/resume", "session/fork"])
def test_system_prompt_needs_session_system_prompt(method: str) -> None:
    caps = {"session": {"fork": {}, "mcp": {"acp": {}}}}
    append = {"sessionId": "s", "cwd": "/p", "systemPrompt": {"mode": "append", "content": [TEXT]}}
    override = {"sessionId": "s", "cwd": "/p", "systemPrompt": {"mode": "override", "content": [TEXT]}}
    assert refused_agent(method, append, caps).capability == "session.systemPrompt"
    caps["session"]["systemPrompt"] = {}
    check_agent_call_v2(method, append, caps, None)
    assert refused_agent(method, override, caps).capability == "session.systemPrompt.mode.override"
    caps["session"]["systemPrompt"] = {"mode": {"override": {}}}
    check_agent_call_v2(method, override, caps, None)


def test_acp_mcp_servers_need_session_mcp_acp() -> None:
    params = {"cwd": "/p", "mcpServers": [{"type": "acp", "name": "editor", "id": "mcp-1"}]}
    check_agent_call_v2("session/new", params, ALL_AGENT_CAPS, None)
    assert refused_agent("session/new", params, INIT_AGENT_CAPS).capability == "session.mcp.acp"


def test_session_fork_checks_setup_params() -> None:
    params = {"sessionId": "s", "cwd": "/p", "mcpServers": [HTTP_SERVER], "additionalDirectories": ["/x"]}
    caps = {"session": {"fork": {}, "mcp": {"http": {}}}}
    assert refused_agent("session/fork", params, caps).capability == "session.additionalDirectories"
    caps["session"]["additionalDirectories"] = {}
    check_agent_call_v2("session/fork", params, caps, None)


# -- client capabilities ------------------------------------------------------------------------


@pytest.mark.parametrize("value", [pytest.param(ABSENT, id="absent"), *NOT_ADVERTISING])
def test_elicitation_needs_the_elicitation_object(value: Any) -> None:
    caps = with_marker({"auth": {"terminal": {}}}, ("elicitation",), value)
    assert refused_client("elicitation/create", ELICIT_FORM, caps).capability == "elicitation"


@pytest.mark.parametrize(
    "elicitation",
    [{}, {"form": None, "url": None}, {"form": True, "url": True}, {"url": {}}],
    ids=["empty", "nulls", "booleans", "url-only"],
)
def test_form_mode_needs_elicitation_form(elicitation: Message) -> None:
    """elicitation.mdx: "{} and {"form":null,"url":null} advertise no supported modes" (unlike MCP)."""
    error = refused_client("elicitation/create", ELICIT_FORM, {"elicitation": elicitation})
    assert error.capability == "elicitation.form" and error.detail == "mode is 'form'"


@pytest.mark.parametrize(
    "elicitation", [{}, {"form": {}}, {"form": {}, "url": None}], ids=["empty", "form-only", "url-null"]
)
def test_url_mode_needs_elicitation_url(elicitation: Message) -> None:
    error = refused_client("elicitation/create", ELICIT_URL, {"elicitation": elicitation})
    assert error.capability == "elicitation.url" and error.detail == "mode is 'url'"


def test_advertised_modes_may_be_requested() -> None:
    both = {"elicitation": {"form": {}, "url": {}}}  # elicitation.mdx "Checking support"
    check_client_call_v2("elicitation/create", ELICIT_FORM, both)
    check_client_call_v2("elicitation/create", ELICIT_URL, both)
    check_client_call_v2("elicitation/create", ELICIT_FORM, {"elicitation": {"form": {"_meta": {}}}})
    check_client_call_v2("elicitation/create", ELICIT_URL, {"elicitation": {"url": {}}})


def test_unknown_elicitation_modes_need_only_the_elicitation_object() -> None:
    check_client_call_v2("elicitation/create", {"mode": "_acme_voice", "message": "?"}, {"elicitation": {}})
    refused_client("elicitation/create", {"mode": "_acme_voice", "message": "?"}, {})


def test_elicitation_complete_needs_url_mode() -> None:
    check_client_call_v2("elicitation/complete", ELICIT_COMPLETE, {"elicitation": {"url": {}}})
    for caps in ({}, {"elicitation": {}}, {"elicitation": {"form": {}}}, {"elicitation": {"url": True}}):
        assert refused_client("elicitation/complete", ELICIT_COMPLETE, caps).capability == "elicitation.url"


@pytest.mark.parametrize(
    "method",
    sorted(m for m, s in v2_unstable.METHODS.items() if s.side == "client" and not m.startswith("elicitation/")),
)
def test_other_client_methods_need_no_capability(method: str) -> None:
    """session/update and session/request_permission are baseline (overview.mdx "Client")."""
    check_client_call_v2(method, {"sessionId": "s"}, {})
    assert not client_rules_apply_v2(method)


def test_the_client_auth_terminal_marker_gates_no_call() -> None:
    """auth.terminal governs which auth methods an agent advertises, not a method the agent calls."""
    check_client_call_v2("session/request_permission", {"sessionId": "s"}, {"auth": None})


# -- whether the rules apply --------------------------------------------------------------------

ALL_METHODS = sorted(set(v1_unstable.METHODS) | set(v2_unstable.METHODS) | {"_acme/ping", "session/_acme_x"})


def raises(check: Any, *args: Any) -> bool:
    try:
        check(*args)
    except CapabilityError:
        return True
    return False


@pytest.mark.parametrize("method", ALL_METHODS)
def test_agent_rules_apply_exactly_where_the_check_can_raise(method: str) -> None:
    """With nothing advertised, every rule that exists for a method fires."""
    assert agent_rules_apply_v2(method) == raises(check_agent_call_v2, method, {}, {}, None)
    if not agent_rules_apply_v2(method):
        assert not raises(check_agent_call_v2, method, {"prompt": [IMAGE], "mcpServers": [HTTP_SERVER]}, None, None)


@pytest.mark.parametrize("method", ALL_METHODS)
def test_client_rules_apply_exactly_where_the_check_can_raise(method: str) -> None:
    assert client_rules_apply_v2(method) == raises(check_client_call_v2, method, {"mode": "form"}, {})


def test_hot_paths_skip_the_checks() -> None:
    assert not client_rules_apply_v2("session/update")
    assert not client_rules_apply_v2("session/request_permission")
    for method in ("initialize", "$/cancel_request", "tool_call/cancel", "terminal/cancel", "_acme/ping"):
        assert not agent_rules_apply_v2(method)
    assert agent_rules_apply_v2("session/cancel") and agent_rules_apply_v2("auth/logout")


# -- methods outside the negotiated version -----------------------------------------------------

V1_ONLY = sorted(set(v1.METHODS) - set(v2.METHODS))


def test_the_v1_only_table_is_v1_minus_v2() -> None:
    assert set(V1_ONLY_METHODS) == set(V1_ONLY)
    assert set(v1_unstable.METHODS) - set(v2_unstable.METHODS) == set(V1_ONLY)
    assert {
        "fs/read_text_file",
        "terminal/create",
        "session/load",
        "session/set_mode",
        "authenticate",
        "logout",
    } <= set(V1_ONLY)


@pytest.mark.parametrize("methods", [v2.METHODS, v2_unstable.METHODS], ids=["v2", "v2_unstable"])
@pytest.mark.parametrize("method", V1_ONLY)
def test_v1_only_methods_are_refused_on_v2(method: str, methods: Any) -> None:
    with pytest.raises(CapabilityError) as info:
        check_method_in_version(method, methods, 2)
    error = info.value
    assert error.method == method and error.capability == "protocol version 2"
    assert error.detail is not None and error.detail.startswith(f"{method} is a v1-only method")
    assert error.peer == v1.METHODS[method].side  # whose method it was in v1
    assert str(error).startswith(f"{method}: not part of protocol version 2")


def test_v1_only_details_name_the_replacement() -> None:
    def detail(method: str) -> str:
        with pytest.raises(CapabilityError) as info:
            check_method_in_version(method, v2.METHODS, 2)
        return info.value.detail or ""

    assert "auth/login" in detail("authenticate")
    assert "auth/logout" in detail("logout")
    assert "session/resume" in detail("session/load") and "replayFrom" in detail("session/load")
    assert "session/set_config_option" in detail("session/set_mode")
    assert "MCP server" in detail("fs/read_text_file") and "MCP server" in detail("terminal/kill")


@pytest.mark.parametrize(("variant", "version"), [(v1, 1), (v1_unstable, 1), (v2, 2), (v2_unstable, 2)])
def test_the_variants_own_methods_pass(variant: Any, version: int) -> None:
    for method in variant.METHODS:
        check_method_in_version(method, variant.METHODS, version)


@pytest.mark.parametrize("method", ["_acme/ping", "_session/x", "_", "_fs/read_text_file"])
@pytest.mark.parametrize(("methods", "version"), [(v1.METHODS, 1), (v2.METHODS, 2), ({}, 2)])
def test_extension_methods_always_pass(method: str, methods: Any, version: int) -> None:
    check_method_in_version(method, methods, version)


def test_unstable_methods_need_the_unstable_table() -> None:
    check_method_in_version("session/fork", v2_unstable.METHODS, 2)
    with pytest.raises(CapabilityError) as info:
        check_method_in_version("session/fork", v2.METHODS, 2)
    assert info.value.peer == "peer"
    assert info.value.detail == "session/fork is not in the protocol version 2 method table"


def test_v2_methods_are_refused_on_v1_without_the_v1_only_label() -> None:
    with pytest.raises(CapabilityError) as info:
        check_method_in_version("auth/login", v1.METHODS, 1)
    assert info.value.capability == "protocol version 1"
    assert info.value.detail == "auth/login is not in the protocol version 1 method table"


def test_the_default_message_is_unchanged() -> None:
    error = CapabilityError("fs/read_text_file", "fs.readTextFile", "x", peer="client")
    assert str(error) == "fs/read_text_file: the client did not advertise the 'fs.readTextFile' capability (x)"

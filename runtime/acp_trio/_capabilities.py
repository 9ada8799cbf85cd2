"""Which capability a peer must have advertised before a method (or a kind of params) may be sent to it.

Contract: rules are data, checked against wire JSON (the ``initialize`` capabilities as received,
the params as they will be sent), so one set of rules serves every v1 variant.  A capability counts
as advertised when its value is ``true`` or an object (the schema's object markers such as
``sessionCapabilities.list: {}``); absent, ``false`` and ``null`` mean unsupported, as
``docs/protocol/v1/initialization.mdx`` requires ("treat all capabilities omitted ... as UNSUPPORTED").

v1 elicitation (``docs/protocol/v1/elicitation.mdx`` "Checking support", "URL completion"):
``elicitation/create`` needs ``elicitation`` and, for mode ``form``/``url``, ``elicitation.form`` /
``elicitation.url`` (``{}`` advertises no mode); ``elicitation/complete`` needs ``elicitation.url``.

ACP v2 (``docs/protocol/v2``, draft) has its own rules, below the v1 ones, checked by
:func:`check_agent_call_v2`, :func:`check_client_call_v2` and :func:`check_method_in_version`.
Markers are objects, not booleans: a v2 capability counts as advertised only when its value is a
JSON object (``{}`` or an object with fields); absent, ``null``, ``true``, ``false`` and any other
value mean unsupported (``migration.mdx`` "Support markers are objects, not booleans"; the schema
types each marker as object-or-null with ``x-deserialize-default-on-error``, so a malformed marker
such as ``true`` decodes to "unsupported").  Rules and the spec text each comes from:

- every ``session/*`` method a client sends needs ``session`` (``initialization.mdx`` Agent
  Capabilities: "Omitted or ``null`` means the Agent does not support session methods"; ``{}``
  is the baseline ``session/new``, ``list``, ``resume``, ``close``, ``prompt``, ``cancel``;
  ``migration.mdx`` "Capability reorganization": no ``list``/``resume``/``close`` markers);
- ``session/delete`` needs ``session.delete`` (``session-delete.mdx`` "Checking Support");
- ``auth/login`` and ``auth/logout`` need a non-empty ``authMethods`` list, whatever
  ``capabilities.auth`` says (``authentication.mdx`` "Advertising Authentication",
  ``initialization.mdx``, ``migration.mdx`` "Authentication"); ``auth/login``'s ``methodId`` must
  name an advertised method, and not a ``terminal`` one (``authentication.mdx`` "Agent-handled
  authentication": "Clients MUST NOT pass a ``terminal`` method");
- ``session/prompt`` blocks: ``image``, ``audio``, ``resource`` need ``session.prompt.image``,
  ``.audio``, ``.embeddedContext``; ``text`` and ``resource_link`` are baseline
  (``initialization.mdx`` "Session Prompt Capabilities", ``content.mdx``, ``prompt-lifecycle.mdx``);
- ``mcpServers`` on ``session/new``/``session/resume``: ``stdio`` needs ``session.mcp.stdio``,
  ``http`` needs ``session.mcp.http`` (``session-setup.mdx`` "Checking Transport Support");
  ``sse`` was removed in v2 and has no marker (``migration.mdx`` "MCP server configuration"), so
  it needs ``session.mcp.sse``, which a v2 agent does not define;
- ``additionalDirectories`` present (even ``[]``) on ``session/new``/``session/resume`` needs
  ``session.additionalDirectories`` (``session-setup.mdx`` "Additional Workspace Roots": "Clients
  MUST only send ``additionalDirectories`` when the Agent advertises" it);
- ``elicitation/create`` needs ``elicitation`` and, for mode ``form``/``url``,
  ``elicitation.form``/``elicitation.url`` (``elicitation.mdx`` "Checking support": ``{}``
  advertises no mode); ``elicitation/complete`` needs ``elicitation.url``: it only follows a URL
  elicitation, which needs that marker (``elicitation.mdx`` "URL completion"; an inference);
- unstable (``schema/v2/schema.unstable.json``, ``$defs`` named after the marker):
  ``session/fork`` needs ``session.fork``, ``session/archive``/``session/unarchive`` and the
  ``archived`` filter of ``session/list`` need ``session.archive``, ``session/status`` needs
  ``session.status``, ``session/set_title`` needs ``session.title``, ``auth/status`` needs
  ``auth.status``, ``providers/*`` need ``providers``, an ``acp`` MCP server needs
  ``session.mcp.acp``, and so do the client's ``mcp/message`` notifications (they answer
  requests to such a server), ``systemPrompt`` on ``session/new``/``resume``/``fork`` needs
  ``session.systemPrompt`` (mode ``override`` also ``session.systemPrompt.mode.override``);
- v1-only methods (``fs/*``, ``terminal/create`` ... ``terminal/kill``, ``session/load``,
  ``session/set_mode``, ``authenticate``, ``logout``) are refused on a v2 connection, and any
  method outside the negotiated variant's method table is refused; ``_``-prefixed extension
  methods always pass (``migration.mdx`` "Method changes", ``extensibility.mdx``).

v1 unstable (``schema/v1/schema.unstable.json``, ``McpCapabilities.acp``; the RFD
``docs/rfds/mcp-over-acp.mdx`` "Capability advertising"): an ``acp`` MCP server in ``mcpServers``
needs ``mcpCapabilities.acp``, and so does the client's ``mcp/message`` notification.  The
agent's ``mcp/message`` requests need no client capability (clients advertise nothing for it);
they may only name a server the client declared, which the client's provider checks
(:mod:`acp_trio.mcp_over_acp`, -33001).

Not checked here: per-object markers (a tool call's or terminal's ``capabilities.cancel`` for
``tool_call/cancel``/``terminal/cancel``) need session state; unknown content block, transport
and elicitation mode types (``_``-prefixed extensions or future values) have no marker to check.

This module is ACP knowledge; it knows nothing about connections.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

CapabilityPath = tuple[str, ...]

# What a client must advertise (``clientCapabilities``) for an agent to call a method.
CLIENT_METHOD_RULES: Final[Mapping[str, CapabilityPath]] = {
    "fs/read_text_file": ("fs", "readTextFile"),
    "fs/write_text_file": ("fs", "writeTextFile"),
    "terminal/create": ("terminal",),
    "terminal/output": ("terminal",),
    "terminal/wait_for_exit": ("terminal",),
    "terminal/kill": ("terminal",),
    "terminal/release": ("terminal",),
    "elicitation/create": ("elicitation",),
    "elicitation/complete": ("elicitation", "url"),
}

# Client methods whose verdict also depends on the params (not only on the method): elicitation/create's mode.
CLIENT_PARAM_RULE_METHODS: Final = frozenset({"elicitation/create"})

# What an agent must advertise (``agentCapabilities``) for a client to call a method.
AGENT_METHOD_RULES: Final[Mapping[str, CapabilityPath]] = {
    "session/load": ("loadSession",),
    "session/list": ("sessionCapabilities", "list"),
    "session/resume": ("sessionCapabilities", "resume"),
    "session/close": ("sessionCapabilities", "close"),
    "session/delete": ("sessionCapabilities", "delete"),
    "logout": ("auth", "logout"),
    # unstable: the client's mcp/message notifications serve acp MCP servers, which only such an agent gets
    "mcp/message": ("mcpCapabilities", "acp"),
}

_PROMPT_BLOCK_RULES: Final[Mapping[str, CapabilityPath]] = {
    "image": ("promptCapabilities", "image"),
    "audio": ("promptCapabilities", "audio"),
    "resource": ("promptCapabilities", "embeddedContext"),
}
_MCP_TRANSPORT_RULES: Final[Mapping[str, CapabilityPath]] = {
    "http": ("mcpCapabilities", "http"),
    "sse": ("mcpCapabilities", "sse"),
    "acp": ("mcpCapabilities", "acp"),  # unstable
}
# the requests that carry mcpServers and additionalDirectories (session/fork: v1 unstable)
_SESSION_SETUP: Final = frozenset({"session/new", "session/load", "session/resume", "session/fork"})
_ELICITATION_MODE_RULES: Final[Mapping[str, CapabilityPath]] = {
    "form": ("elicitation", "form"),
    "url": ("elicitation", "url"),
}


class CapabilityError(Exception):
    """A call the peer did not advertise support for; nothing was sent.

    ``method``: the method that was refused.  ``capability``: the dotted capability path that is
    missing (``"fs.readTextFile"``).  ``detail``: which part of the params needed it, if any
    (``"prompt[1] is an image block"``).  ``peer``: ``"agent"`` or ``"client"``, whose capability it is.
    ``text``: the message before the detail, when "did not advertise" does not fit (a method
    outside the negotiated protocol version).
    """

    def __init__(
        self, method: str, capability: str, detail: str | None = None, *, peer: str = "peer", text: str | None = None
    ) -> None:
        if text is None:
            text = f"{method}: the {peer} did not advertise the {capability!r} capability"
        if detail:
            text += f" ({detail})"
        super().__init__(text)
        self.method = method
        self.capability = capability
        self.detail = detail
        self.peer = peer


def advertised(capabilities: Any, path: CapabilityPath) -> bool:
    """True if ``path`` leads to ``true`` or an object in the wire ``capabilities`` object."""
    value = capabilities
    for key in path:
        if type(value) is not dict:
            return False
        value = value.get(key)
    return value is True or type(value) is dict


def _param_needs(method: str, params: Any) -> Iterator[tuple[CapabilityPath, str]]:
    if type(params) is not dict:
        return
    if method == "session/prompt":
        for i, block in enumerate(params.get("prompt") or ()):
            kind = block.get("type") if type(block) is dict else None
            rule = _PROMPT_BLOCK_RULES.get(kind) if isinstance(kind, str) else None
            if rule is not None:
                yield rule, f"prompt[{i}] is a {kind} block"
    if method in _SESSION_SETUP:
        for i, server in enumerate(params.get("mcpServers") or ()):
            kind = server.get("type") if type(server) is dict else None
            rule = _MCP_TRANSPORT_RULES.get(kind) if isinstance(kind, str) else None
            if rule is not None:
                yield rule, f"mcpServers[{i}] uses the {kind} transport"
        if params.get("additionalDirectories"):
            yield ("sessionCapabilities", "additionalDirectories"), "additionalDirectories is not empty"


def check_agent_call(method: str, params: Any, agent_capabilities: Any) -> None:
    """Raise :class:`CapabilityError` if a client may not send ``method`` with wire ``params``."""
    rule = AGENT_METHOD_RULES.get(method)
    if rule is not None and not advertised(agent_capabilities, rule):
        raise CapabilityError(method, ".".join(rule), peer="agent")
    for path, detail in _param_needs(method, params):
        if not advertised(agent_capabilities, path):
            raise CapabilityError(method, ".".join(path), detail, peer="agent")


def check_client_call(method: str, params: Any, client_capabilities: Any) -> None:
    """Raise :class:`CapabilityError` if an agent may not send ``method`` with wire ``params`` to a client.

    The verdict depends on ``params`` only for :data:`CLIENT_PARAM_RULE_METHODS`.
    """
    rule = CLIENT_METHOD_RULES.get(method)
    if rule is not None and not advertised(client_capabilities, rule):
        raise CapabilityError(method, ".".join(rule), peer="client")
    if method == "elicitation/create" and type(params) is dict:
        mode = params.get("mode")
        path = _ELICITATION_MODE_RULES.get(mode) if isinstance(mode, str) else None
        if path is not None and not advertised(client_capabilities, path):
            raise CapabilityError(method, ".".join(path), f"mode is {mode!r}", peer="client")


# -- ACP v2 ----------------------------------------------------------------------------------------

# A method whose name starts with the key belongs to a surface the agent advertises with the path.
AGENT_SURFACE_RULES_V2: Final[Mapping[str, CapabilityPath]] = {
    "session/": ("session",),
}

# What an agent must advertise (``capabilities``) for a client to call a method, beyond its surface.
AGENT_METHOD_RULES_V2: Final[Mapping[str, CapabilityPath]] = {
    "session/delete": ("session", "delete"),
    # unstable
    "session/fork": ("session", "fork"),
    "session/archive": ("session", "archive"),
    "session/unarchive": ("session", "archive"),
    "session/status": ("session", "status"),
    "session/set_title": ("session", "title"),
    "auth/status": ("auth", "status"),
    "providers/list": ("providers",),
    "providers/set": ("providers",),
    "providers/disable": ("providers",),
    "mcp/message": ("session", "mcp", "acp"),
}

# Methods available only when the initialize response lists one or more authentication methods.
AUTH_SURFACE_METHODS_V2: Final = frozenset({"auth/login", "auth/logout"})

# Authentication method types a client must not pass to ``auth/login``, and why.
_LOGIN_REFUSED_AUTH_TYPES_V2: Final[Mapping[str, str]] = {
    "terminal": "the client runs terminal methods itself and must not send them to auth/login",
}

# What a client must advertise (``capabilities``) for an agent to call a method.
CLIENT_METHOD_RULES_V2: Final[Mapping[str, CapabilityPath]] = {
    "elicitation/create": ("elicitation",),
    "elicitation/complete": ("elicitation", "url"),
}

_PROMPT_BLOCK_RULES_V2: Final[Mapping[str, CapabilityPath]] = {
    "image": ("session", "prompt", "image"),
    "audio": ("session", "prompt", "audio"),
    "resource": ("session", "prompt", "embeddedContext"),
}
_MCP_TRANSPORT_RULES_V2: Final[Mapping[str, CapabilityPath]] = {
    "stdio": ("session", "mcp", "stdio"),
    "http": ("session", "mcp", "http"),
    "sse": ("session", "mcp", "sse"),  # removed in v2: no v2 agent advertises it
    "acp": ("session", "mcp", "acp"),  # unstable
}
_SESSION_SETUP_V2: Final = frozenset({"session/new", "session/resume", "session/fork"})
# Params fields that need a capability whenever they are present and not null, per method.
_PARAM_FIELD_RULES_V2: Final[Mapping[str, Mapping[str, CapabilityPath]]] = {
    **{
        method: {
            "additionalDirectories": ("session", "additionalDirectories"),
            "systemPrompt": ("session", "systemPrompt"),  # unstable
        }
        for method in sorted(_SESSION_SETUP_V2)
    },
    "session/list": {"archived": ("session", "archive")},  # unstable
}
_SYSTEM_PROMPT_MODE_RULES_V2: Final[Mapping[str, CapabilityPath]] = {
    "override": ("session", "systemPrompt", "mode", "override"),  # unstable; "append" is baseline
}
_ELICITATION_MODE_RULES_V2: Final[Mapping[str, CapabilityPath]] = {
    "form": ("elicitation", "form"),
    "url": ("elicitation", "url"),
}

# Methods of protocol version 1 that version 2 removed: whose method it is, and what replaced it.
V1_ONLY_METHODS: Final[Mapping[str, tuple[str, str]]] = {
    "authenticate": ("agent", "renamed to auth/login"),
    "logout": ("agent", "renamed to auth/logout"),
    "session/load": ("agent", 'use session/resume with replayFrom {"type": "start"}'),
    "session/set_mode": ("agent", "use session/set_config_option"),
    "fs/read_text_file": ("client", "the client file system methods are gone; offer files through an MCP server"),
    "fs/write_text_file": ("client", "the client file system methods are gone; offer files through an MCP server"),
    **{
        f"terminal/{name}": ("client", "client terminal execution is gone; offer commands through an MCP server")
        for name in ("create", "output", "release", "wait_for_exit", "kill")
    },
}

_AGENT_PARAM_METHODS_V2: Final = frozenset({"session/prompt", *_SESSION_SETUP_V2, *_PARAM_FIELD_RULES_V2})
_AGENT_RULE_METHODS_V2: Final = frozenset({*AGENT_METHOD_RULES_V2, *AUTH_SURFACE_METHODS_V2, *_AGENT_PARAM_METHODS_V2})
_AGENT_SURFACE_PREFIXES_V2: Final = tuple(AGENT_SURFACE_RULES_V2)
_CLIENT_RULE_METHODS_V2: Final = frozenset(CLIENT_METHOD_RULES_V2)


def advertised_v2(capabilities: Any, path: CapabilityPath) -> bool:
    """True if ``path`` leads to an object in the wire v2 ``capabilities`` object (``true`` does not count)."""
    value = capabilities
    for key in path:
        if type(value) is not dict:
            return False
        value = value.get(key)
    return type(value) is dict


def _auth_method_types(auth_methods: Any) -> dict[str, Any]:
    """``methodId`` -> ``type`` of the advertised authentication methods (entries that are objects with a string id)."""
    if type(auth_methods) is not list:
        return {}
    return {
        entry["methodId"]: entry.get("type")
        for entry in auth_methods
        if type(entry) is dict and isinstance(entry.get("methodId"), str)
    }


def _typed_entries(items: Any, table: Mapping[str, CapabilityPath]) -> Iterator[tuple[int, str, CapabilityPath]]:
    if type(items) is not list:
        return
    for i, item in enumerate(items):
        kind = item.get("type") if type(item) is dict else None
        if isinstance(kind, str) and kind in table:
            yield i, kind, table[kind]


def _agent_param_needs_v2(method: str, params: Any) -> Iterator[tuple[CapabilityPath, str]]:
    if type(params) is not dict:
        return
    if method == "session/prompt":
        for i, kind, rule in _typed_entries(params.get("prompt"), _PROMPT_BLOCK_RULES_V2):
            yield rule, f"prompt[{i}] is a {kind} block"
    if method in _SESSION_SETUP_V2:
        for i, kind, rule in _typed_entries(params.get("mcpServers"), _MCP_TRANSPORT_RULES_V2):
            yield rule, f"mcpServers[{i}] uses the {kind} transport"
    for field, rule in _PARAM_FIELD_RULES_V2.get(method, {}).items():
        if params.get(field) is not None:
            yield rule, f"params carry {field}"
    system_prompt = params.get("systemPrompt") if method in _SESSION_SETUP_V2 else None
    if type(system_prompt) is dict:
        mode = system_prompt.get("mode")
        if isinstance(mode, str) and mode in _SYSTEM_PROMPT_MODE_RULES_V2:
            yield _SYSTEM_PROMPT_MODE_RULES_V2[mode], f"systemPrompt uses the {mode} mode"


def agent_rules_apply_v2(method: str) -> bool:
    """Whether :func:`check_agent_call_v2` can raise for ``method`` at all."""
    return method in _AGENT_RULE_METHODS_V2 or method.startswith(_AGENT_SURFACE_PREFIXES_V2)


def client_rules_apply_v2(method: str) -> bool:
    """Whether :func:`check_client_call_v2` can raise for ``method`` at all."""
    return method in _CLIENT_RULE_METHODS_V2


def check_agent_call_v2(method: str, params: Any, capabilities: Any, auth_methods: Any) -> None:
    """Raise :class:`CapabilityError` if a v2 client may not send ``method`` with wire ``params``.

    ``capabilities``: the agent's ``initialize`` result ``capabilities`` (wire JSON);
    ``auth_methods``: its ``authMethods`` (wire list, or ``None`` when omitted).
    """
    for prefix, path in AGENT_SURFACE_RULES_V2.items():
        if method.startswith(prefix) and not advertised_v2(capabilities, path):
            raise CapabilityError(method, ".".join(path), f"the {prefix}* methods need it", peer="agent")
    if method in AUTH_SURFACE_METHODS_V2:
        types = _auth_method_types(auth_methods)
        if not types:
            raise CapabilityError(method, "authMethods", "the agent listed no authentication methods", peer="agent")
        method_id = params.get("methodId") if method == "auth/login" and type(params) is dict else None
        if isinstance(method_id, str):
            if method_id not in types:
                detail = f"methodId {method_id!r} is not one of the advertised authMethods"
                raise CapabilityError(method, "authMethods", detail, peer="agent")
            kind = types[method_id]
            reason = _LOGIN_REFUSED_AUTH_TYPES_V2.get(kind) if isinstance(kind, str) else None
            if reason is not None:
                detail = f"methodId {method_id!r} is a {kind} method: {reason}"
                raise CapabilityError(method, "authMethods", detail, peer="agent")
    rule = AGENT_METHOD_RULES_V2.get(method)
    if rule is not None and not advertised_v2(capabilities, rule):
        raise CapabilityError(method, ".".join(rule), peer="agent")
    if method in _AGENT_PARAM_METHODS_V2:
        for path, detail in _agent_param_needs_v2(method, params):
            if not advertised_v2(capabilities, path):
                raise CapabilityError(method, ".".join(path), detail, peer="agent")


def check_client_call_v2(method: str, params: Any, capabilities: Any) -> None:
    """Raise :class:`CapabilityError` if a v2 agent may not send ``method`` with wire ``params`` to a client.

    ``capabilities``: the client's ``initialize`` params ``capabilities`` (wire JSON).  The verdict
    for ``elicitation/create`` depends on ``params`` (its ``mode``), not only on the method.
    """
    rule = CLIENT_METHOD_RULES_V2.get(method)
    if rule is not None and not advertised_v2(capabilities, rule):
        raise CapabilityError(method, ".".join(rule), peer="client")
    if method == "elicitation/create" and type(params) is dict:
        mode = params.get("mode")
        path = _ELICITATION_MODE_RULES_V2.get(mode) if isinstance(mode, str) else None
        if path is not None and not advertised_v2(capabilities, path):
            raise CapabilityError(method, ".".join(path), f"mode is {mode!r}", peer="client")


def check_method_in_version(method: str, methods: Mapping[str, Any], version: int) -> None:
    """Raise :class:`CapabilityError` if ``method`` is not in ``methods``, the negotiated variant's method table.

    ``version``: the negotiated protocol version.  Extension methods (``_``-prefixed) always pass.
    """
    if method.startswith("_") or method in methods:
        return
    capability = f"protocol version {version}"
    v1_only = V1_ONLY_METHODS.get(method) if version >= 2 else None
    if v1_only is not None:
        peer, replacement = v1_only
        detail = f"{method} is a v1-only method; {replacement}"
        text = f"{method}: not part of protocol version {version}, the version negotiated with the {peer}"
    else:
        peer = "peer"
        detail = f"{method} is not in the protocol version {version} method table"
        text = f"{method}: not part of protocol version {version}, the negotiated version"
    raise CapabilityError(method, capability, detail, peer=peer, text=text)

"""Which capability a peer must have advertised before a method (or a kind of params) may be sent to it.

Contract: rules are data, checked against wire JSON (the ``initialize`` capabilities as received,
the params as they will be sent), so one set of rules serves every v1 variant.  A capability counts
as advertised when its value is ``true`` or an object (the schema's object markers such as
``sessionCapabilities.list: {}``); absent, ``false`` and ``null`` mean unsupported, as
``docs/protocol/v1/initialization.mdx`` requires ("treat all capabilities omitted ... as UNSUPPORTED").

This module is ACP v1 knowledge; it knows nothing about connections.
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
}

# What an agent must advertise (``agentCapabilities``) for a client to call a method.
AGENT_METHOD_RULES: Final[Mapping[str, CapabilityPath]] = {
    "session/load": ("loadSession",),
    "session/list": ("sessionCapabilities", "list"),
    "session/resume": ("sessionCapabilities", "resume"),
    "session/close": ("sessionCapabilities", "close"),
    "session/delete": ("sessionCapabilities", "delete"),
    "logout": ("auth", "logout"),
}

_PROMPT_BLOCK_RULES: Final[Mapping[str, CapabilityPath]] = {
    "image": ("promptCapabilities", "image"),
    "audio": ("promptCapabilities", "audio"),
    "resource": ("promptCapabilities", "embeddedContext"),
}
_MCP_TRANSPORT_RULES: Final[Mapping[str, CapabilityPath]] = {
    "http": ("mcpCapabilities", "http"),
    "sse": ("mcpCapabilities", "sse"),
}
_SESSION_SETUP: Final = frozenset({"session/new", "session/load", "session/resume"})


class CapabilityError(Exception):
    """A call the peer did not advertise support for; nothing was sent.

    ``method``: the method that was refused.  ``capability``: the dotted capability path that is
    missing (``"fs.readTextFile"``).  ``detail``: which part of the params needed it, if any
    (``"prompt[1] is an image block"``).  ``peer``: ``"agent"`` or ``"client"``, whose capability it is.
    """

    def __init__(self, method: str, capability: str, detail: str | None = None, *, peer: str = "peer") -> None:
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
    """Raise :class:`CapabilityError` if an agent may not send ``method`` to a client."""
    rule = CLIENT_METHOD_RULES.get(method)
    if rule is not None and not advertised(client_capabilities, rule):
        raise CapabilityError(method, ".".join(rule), peer="client")

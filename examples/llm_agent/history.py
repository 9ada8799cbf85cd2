"""The conversation as the model sees it, independent of the provider, and how it is rebuilt from the
session store on ``session/load``.

A conversation is a list of items: :class:`UserText` (a prompt), :class:`AssistantText` (what the
model said), :class:`Thinking` (Anthropic thinking blocks, kept only within a live session: they are
needed again only in the turn that made them), :class:`ToolUse` (a tool call of the model: its
provider call id, tool name and JSON arguments) and :class:`ToolResult` (what the agent sent back for
it).  ``providers.py`` turns the list into each API's request format.

The session store (:mod:`acp_trio.session_store`) keeps the ACP side of the conversation: every
``session/prompt`` and every ``session/update`` the agent sent.  The agent reports each model tool
call as an ACP tool call whose ``toolCallId`` is the provider's call id, whose ``rawInput`` is
``{"tool": name, "arguments": {...}}`` and whose final ``tool_call_update`` carries ``rawOutput``
``{"output": text, "isError": bool}``, the exact text the model got, so :func:`from_stored`
rebuilds the model's view from the store alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AssistantText",
    "Item",
    "Thinking",
    "ToolResult",
    "ToolUse",
    "UserText",
    "close_dangling",
    "from_stored",
    "prompt_text",
]

CANCELLED_RESULT = "The user cancelled this tool call before it finished."
"""The result given to the model for a tool call that has none (its turn was cancelled)."""


@dataclass
class UserText:
    """The user's prompt (text blocks joined; resources included as text)."""

    text: str


@dataclass
class AssistantText:
    """Text the model produced (``agent_message_chunk`` s of one stretch joined)."""

    text: str


@dataclass
class Thinking:
    """An Anthropic thinking block: its text and ``signature`` (sent back with the turn's tool results)."""

    text: str
    signature: str


@dataclass
class ToolUse:
    """A tool call of the model: ``call_id`` (the provider's id, also the ACP ``toolCallId``), ``name``
    (the tool name offered to the model) and ``arguments`` (the decoded JSON object)."""

    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class ToolResult:
    """What the agent answered to the tool call ``call_id``: ``output`` text, ``is_error``."""

    call_id: str
    output: str
    is_error: bool = False


Item = UserText | AssistantText | Thinking | ToolUse | ToolResult


def prompt_text(blocks: Iterable[Any]) -> str:
    """The text of a ``session/prompt``'s content blocks (wire JSON objects or ``acp_schema.v1`` blocks):
    text blocks as they are, resource links as ``[name](uri)``, embedded text resources with their URI."""
    parts: list[str] = []
    for block in blocks:
        wire = block if isinstance(block, dict) else _wire(block)
        kind = wire.get("type")
        if kind == "text":
            parts.append(str(wire.get("text", "")))
        elif kind == "resource_link":
            parts.append(f"[{wire.get('name', '')}]({wire.get('uri', '')})")
        elif kind == "resource":
            resource = wire.get("resource") or {}
            if isinstance(resource, dict) and "text" in resource:
                parts.append(f"<resource uri={resource.get('uri', '')!r}>\n{resource['text']}\n</resource>")
        # images and audio are not sent: the agent advertises neither capability
    return "\n".join(parts)


def _wire(block: Any) -> dict[str, Any]:
    from acp_trio import converter

    wire = converter.unstructure(block)
    return wire if isinstance(wire, dict) else {}


def close_dangling(items: list[Item]) -> None:
    """Give every :class:`ToolUse` without a :class:`ToolResult` the result :data:`CANCELLED_RESULT`,
    placed before the next :class:`UserText` (both APIs need a result for every call before the
    conversation goes on)."""
    answered = {item.call_id for item in items if isinstance(item, ToolResult)}
    fixed: list[Item] = []
    pending: list[ToolUse] = []
    for item in [*items, None]:
        if item is None or isinstance(item, UserText):
            fixed.extend(ToolResult(use.call_id, CANCELLED_RESULT, is_error=True) for use in pending)
            pending = []
        if item is None:
            break
        if isinstance(item, ToolUse) and item.call_id not in answered:
            pending.append(item)
        fixed.append(item)
    items[:] = fixed


def from_stored(events: Sequence[tuple[str, Any]]) -> list[Item]:
    """Rebuild the conversation from a stored session's messages (``StoredConversation.messages()``:
    ``("prompt", request)`` and ``("update", notification)`` pairs of wire JSON, in order)."""
    items: list[Item] = []
    uses: dict[str, ToolUse] = {}
    results: dict[str, ToolResult] = {}
    for kind, message in events:
        params = message.get("params") or {}
        if kind == "prompt":
            items.append(UserText(prompt_text(params.get("prompt") or ())))
            continue
        update = params.get("update") or {}
        tag = update.get("sessionUpdate")
        if tag == "agent_message_chunk":
            content = update.get("content") or {}
            text = content.get("text") if isinstance(content, dict) else None
            if not isinstance(text, str):
                continue
            if items and isinstance(items[-1], AssistantText):
                items[-1].text += text
            else:
                items.append(AssistantText(text))
        elif tag == "tool_call":
            raw = update.get("rawInput")
            call_id = update.get("toolCallId")
            if isinstance(raw, dict) and isinstance(raw.get("tool"), str) and isinstance(call_id, str):
                arguments = raw.get("arguments")
                use = ToolUse(call_id, raw["tool"], arguments if isinstance(arguments, dict) else {})
                uses[call_id] = use
                items.append(use)
        elif tag == "tool_call_update":
            raw = update.get("rawOutput")
            call_id = update.get("toolCallId")
            if call_id in uses and isinstance(raw, dict) and isinstance(raw.get("output"), str):
                result = ToolResult(call_id, raw["output"], bool(raw.get("isError")))
                if call_id in results:
                    results[call_id].output, results[call_id].is_error = result.output, result.is_error
                else:
                    results[call_id] = result
                    items.append(result)
    close_dangling(items)
    return items

"""The conversation as the model sees it, independent of the provider.

A conversation is a list of items: :class:`UserText` (a prompt), :class:`AssistantText` (what the
model said), :class:`Thinking` (Anthropic thinking blocks, needed again only in the turn that made
them), :class:`ToolUse` (a tool call of the model: its provider call id, tool name and JSON
arguments) and :class:`ToolResult` (what the agent sent back for it).  ``providers.py`` turns the
list into each API's request format.  The agent keeps one list per session for as long as the
session is known (``session/load`` and ``session/resume`` continue it, on either protocol version).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from acp_schema import v2

__all__ = [
    "AssistantText",
    "Item",
    "Thinking",
    "ToolResult",
    "ToolUse",
    "UserText",
    "close_dangling",
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


def prompt_text(blocks: Iterable[object]) -> str:
    """The text of a prompt's content blocks (``acp_schema.v2`` classes: ``neutral.Turn.prompt``,
    v1 prompts converted): text blocks as they are,
    resource links as ``[name](uri)``, embedded text resources with their URI (images and audio are
    not sent: the agent advertises neither capability)."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, v2.TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, v2.ResourceLinkContentBlock):
            parts.append(f"[{block.name}]({block.uri})")
        elif isinstance(block, v2.ResourceContentBlock) and isinstance(block.resource, v2.TextResourceContents):
            parts.append(f"<resource uri={block.resource.uri!r}>\n{block.resource.text}\n</resource>")
    return "\n".join(parts)


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

"""The conversation as the model sees it, independent of the provider.

A conversation is a list of items: :class:`UserText` (a prompt), :class:`AssistantText` (what the
model said), :class:`Thinking` (Anthropic thinking blocks, needed again only in the turn that made
them), :class:`ToolUse` (a tool call of the model: its provider call id, tool name and JSON
arguments) and :class:`ToolResult` (what the agent sent back for it).  ``providers.py`` turns the
list into each API's request format.  The agent keeps one list per session for as long as the
session is known in its process (``session/load`` and ``session/resume`` continue it, on either
protocol version).

A session kept in a session store (``--store``: ``acp_trio.neutral``'s ``Agent.store``) is loaded also
by a new process, on either protocol version: the store keeps the ACP side of the conversation, the
canonical (v2) updates of every prompt and everything the agent sent (:func:`from_updates`; a store
file of a v1 ``session_store.enable`` connection: :func:`from_stored`).  The agent reports each
model tool call as an ACP tool call whose ``toolCallId`` is the provider's call id, whose
``rawInput`` is ``{"tool": name, "arguments": {...}}`` and whose final ``tool_call_update``
carries ``rawOutput`` ``{"output": text, "isError": bool}``, the exact text the model got, so
:func:`from_updates` rebuilds the model's view from the
store alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from acp_schema import v1, v2
from acp_trio import SessionState, converter
from acp_trio.session_state import MessageEntry, ToolCallEntry

__all__ = [
    "AssistantText",
    "Item",
    "Thinking",
    "ToolResult",
    "ToolUse",
    "UserText",
    "close_dangling",
    "from_stored",
    "from_updates",
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
    """The text of a prompt's content blocks (``acp_schema.v2`` classes, as in ``neutral.Turn.prompt``,
    or ``acp_schema.v1`` ones, as a stored v1 prompt has them): text blocks as they are,
    resource links as ``[name](uri)``, embedded text resources with their URI (images and audio are
    not sent: the agent advertises neither capability)."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, (v2.TextContentBlock, v1.TextContentBlock)):
            parts.append(block.text)
        elif isinstance(block, (v2.ResourceLinkContentBlock, v1.ResourceLinkContentBlock)):
            parts.append(f"[{block.name}]({block.uri})")
        elif isinstance(block, (v2.ResourceContentBlock, v1.ResourceContentBlock)) and isinstance(
            block.resource, (v2.TextResourceContents, v1.TextResourceContents)
        ):
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


def from_updates(updates: Iterable[Any]) -> list[Item]:
    """Rebuild the conversation from a session's canonical history (``acp_trio.neutral``'s
    ``Session.history``: v2 updates, e.g. of a session loaded from the agent's store), folded by
    :class:`acp_trio.SessionState` as :func:`from_stored` does."""
    state = SessionState()
    for update in updates:
        state.apply(v2.UpdateSessionNotification(session_id="history", update=update))
    return _items(state)


def from_stored(events: Sequence[tuple[str, Any]]) -> list[Item]:
    """Rebuild the conversation from a stored session's messages (``StoredConversation.messages()``:
    ``("prompt", request)`` and ``("update", notification)`` pairs of wire JSON, in order), folded by
    :class:`acp_trio.SessionState` into its transcript: prompts and agent messages become text items,
    each tool call whose ``rawInput`` names a tool becomes a :class:`ToolUse`, followed by its
    :class:`ToolResult` when its last ``rawOutput`` carries one."""
    state = SessionState()
    for kind, message in events:
        params = message.get("params") or {}
        if kind == "prompt":
            state.add_user_message(converter.structure(params, v1.PromptRequest).prompt)
        else:
            state.apply(converter.structure(params, v1.SessionNotification))
    return _items(state)


def _items(state: SessionState) -> list[Item]:
    """The model's items of a folded transcript (see :func:`from_stored`)."""
    items: list[Item] = []
    for entry in state.transcript:
        if isinstance(entry, MessageEntry) and entry.role == "user":
            items.append(UserText(prompt_text(entry.content)))
        elif isinstance(entry, MessageEntry) and entry.role == "agent":
            items.append(AssistantText(entry.text))
        elif isinstance(entry, ToolCallEntry):
            raw, out = entry.raw_input, entry.raw_output
            if not (isinstance(raw, dict) and isinstance(raw.get("tool"), str)):
                continue
            arguments = raw.get("arguments")
            items.append(ToolUse(entry.tool_call_id, raw["tool"], arguments if isinstance(arguments, dict) else {}))
            if isinstance(out, dict) and isinstance(out.get("output"), str):
                items.append(ToolResult(entry.tool_call_id, out["output"], bool(out.get("isError"))))
    close_dangling(items)
    return items

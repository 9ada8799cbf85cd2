"""The pydantic-ai message history of a session, rebuilt from its canonical ACP updates.

A session kept in a store (``acp_trio.neutral``'s ``Agent.store``) holds what the client saw: the
canonical (v2) updates of every turn.  The integration reports each function tool call of the model
as an ACP tool call whose ``toolCallId`` is pydantic-ai's ``tool_call_id``, whose ``rawInput`` is the
call's arguments (a JSON object) and whose last update carries ``rawOutput``
``{"tool": name, "outcome": outcome, "content": content}`` (:func:`raw_output`: the tool's name,
``ToolReturnPart.outcome`` and the content the model got, as JSON).  :func:`messages_from_updates`
folds those updates back into pydantic-ai ``ModelMessage`` s: each ``user_message`` a
``ModelRequest`` with a ``UserPromptPart``; the agent's text between them ``TextPart`` s of a
``ModelResponse``; each tool call with a ``rawOutput`` a ``ToolCallPart`` in the response and a
``ToolReturnPart`` in the request that follows it.  Thoughts are left out (a provider may refuse a
thinking block without its signature); a tool call that never got a result (its turn was
cancelled) is left out with it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)
from pydantic_core import to_jsonable_python

from acp_schema import v2

__all__ = ["messages_from_updates", "prompt_content", "raw_output"]

_OUTCOMES = ("success", "failed", "denied", "interrupted", "retried")


def raw_output(part: ToolReturnPart) -> dict[str, Any]:
    """The ``rawOutput`` of a finished tool call: ``{"tool": name, "outcome": outcome, "content":
    content}`` (the content as JSON; a value JSON cannot hold becomes its ``str``)."""
    return {
        "tool": part.tool_name,
        "outcome": part.outcome,
        "content": to_jsonable_python(part.content, fallback=str, bytes_mode="base64"),
    }


def prompt_content(blocks: Sequence[Any]) -> str | list[UserContent]:
    """A prompt's content blocks (``acp_schema.v2``) as a pydantic-ai user prompt: a ``str`` when
    they are all text (joined by blank lines), else a list: text as ``str``, a resource link as
    ``[name](uri)``, an embedded text resource with its URI, an image or audio block as
    ``BinaryContent``, an embedded blob resource as ``BinaryContent`` of its MIME type."""
    parts: list[UserContent] = []
    for block in blocks:
        if isinstance(block, v2.TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, v2.ResourceLinkContentBlock):
            parts.append(f"[{block.name}]({block.uri})")
        elif isinstance(block, v2.ResourceContentBlock):
            resource = block.resource
            if isinstance(resource, v2.TextResourceContents):
                parts.append(f'<resource uri="{resource.uri}">\n{resource.text}\n</resource>')
            elif isinstance(resource, v2.BlobResourceContents):
                mime = resource.mime_type if isinstance(resource.mime_type, str) else "application/octet-stream"
                binary = _binary(resource.blob, mime)
                if binary is not None:
                    parts.append(binary)
        elif isinstance(block, (v2.ImageContentBlock, v2.AudioContentBlock)):
            binary = _binary(block.data, block.mime_type)
            if binary is not None:
                parts.append(binary)
    if all(isinstance(p, str) for p in parts):
        return "\n\n".join(p for p in parts if isinstance(p, str))
    return parts


def _binary(data: str, mime: str) -> BinaryContent | None:
    try:
        return BinaryContent(data=base64.b64decode(data, validate=True), media_type=mime)
    except (binascii.Error, ValueError):
        return None


def _text(content: Any) -> str | None:
    return content.text if isinstance(content, v2.TextContentBlock) else None


def messages_from_updates(updates: Iterable[Any], *, stop_at: str | None = None) -> list[ModelMessage]:
    """The pydantic-ai messages of a session's canonical history (``Session.history``: v2
    updates), as described in the module docstring.  ``stop_at``: a ``user_message`` id at which to
    stop (that prompt and what follows are left out)."""
    items = list(updates)
    finished: dict[str, Any] = {}
    for update in items:
        if isinstance(update, v2.ToolCallUpdateSessionUpdate):
            raw = update.raw_output
            if isinstance(raw, dict) and isinstance(raw.get("tool"), str):
                finished[update.tool_call_id] = raw
    messages: list[ModelMessage] = []
    response: list[ModelResponsePart] = []
    returns: list[ModelRequestPart] = []
    seen: set[str] = set()
    text_of: str | None = None  # the messageId the last TextPart of `response` came from

    def flush() -> None:
        nonlocal response, returns, text_of
        if response:
            messages.append(ModelResponse(parts=response))
        if returns:
            messages.append(ModelRequest(parts=returns))
        response, returns, text_of = [], [], None

    for update in items:
        if isinstance(update, v2.UserMessageSessionUpdate):
            if stop_at is not None and update.message_id == stop_at:
                break
            flush()
            content = update.content if isinstance(update.content, list) else []
            messages.append(ModelRequest(parts=[UserPromptPart(prompt_content(content))]))
        elif isinstance(update, v2.AgentMessageChunkSessionUpdate):
            text = _text(update.content)
            if text is None:
                continue
            if returns:
                flush()
            last = response[-1] if response else None
            if isinstance(last, TextPart) and text_of == update.message_id:
                response[-1] = TextPart(last.content + text)
            else:
                response.append(TextPart(text))
                text_of = update.message_id
        elif isinstance(update, v2.ToolCallUpdateSessionUpdate) and update.tool_call_id in finished:
            call_id = update.tool_call_id
            out: dict[str, Any] = finished[call_id]
            if call_id not in seen:
                seen.add(call_id)
                if returns:
                    flush()
                args = update.raw_input if isinstance(update.raw_input, dict) else {}
                response.append(ToolCallPart(str(out["tool"]), args, call_id))
                text_of = None
            if update.raw_output is out:
                outcome = out.get("outcome")
                tool: str = out["tool"]
                returns.append(
                    ToolReturnPart(
                        tool,
                        out.get("content"),
                        call_id,
                        outcome=outcome if outcome in _OUTCOMES else "success",
                    )
                )
    flush()
    return messages

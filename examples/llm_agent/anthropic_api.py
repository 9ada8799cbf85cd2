"""The Anthropic Messages API behind :class:`~.providers.Provider` (``client.messages.create(..., stream=True)``).

Event types: ``anthropic.types.raw_message_stream_event`` (with ``text_delta``, ``thinking_delta``,
``signature_delta``, ``input_json_delta``); messages: ``MessageParam``; tools: ``ToolParam``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Literal

import anthropic
from anthropic import types as anthropic_types

from .history import AssistantText, Item, Thinking, ToolResult, ToolUse, UserText
from .providers import (
    KEY_VARIABLES,
    Finished,
    ModelEvent,
    ProviderError,
    Settings,
    TextDelta,
    ThinkingDone,
    ThoughtDelta,
    TokenUsage,
    ToolCallDone,
    ToolSpec,
    api_error,
    close_quietly,
    decode_arguments,
    missing_key,
)

__all__ = ["AnthropicProvider", "anthropic_messages"]


# -- Anthropic: the Messages API -------------------------------------------------------------------


def anthropic_messages(items: Sequence[Item]) -> list[dict[str, Any]]:
    """The conversation as Messages API ``messages`` (``MessageParam``): consecutive items of one role
    merged into one message, tool results first in theirs (as the API requires), empty text dropped."""
    messages: list[dict[str, Any]] = []

    def add(role: str, block: dict[str, Any]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})

    for item in items:
        if isinstance(item, UserText):
            add("user", {"type": "text", "text": item.text or "(empty prompt)"})
        elif isinstance(item, AssistantText):
            if item.text:
                add("assistant", {"type": "text", "text": item.text})
        elif isinstance(item, Thinking):
            add("assistant", {"type": "thinking", "thinking": item.text, "signature": item.signature})
        elif isinstance(item, ToolUse):
            add("assistant", {"type": "tool_use", "id": item.call_id, "name": item.name, "input": item.arguments})
        elif isinstance(item, ToolResult):
            add(
                "user",
                {"type": "tool_result", "tool_use_id": item.call_id, "content": item.output, "is_error": item.is_error},
            )
    for message in messages:
        if message["role"] == "user":
            message["content"].sort(key=lambda block: block["type"] != "tool_result")
    return messages


_ANTHROPIC_STOP: dict[str, Literal["end_turn", "tool_use", "max_tokens", "refusal"]] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "pause_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
}


class AnthropicProvider:
    """The Anthropic Messages API (``client.messages.create(..., stream=True)``: the raw stream events)."""

    name = "anthropic"
    key_variables = KEY_VARIABLES["anthropic"]

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: anthropic.AsyncAnthropic | None = None

    def _get_client(self) -> anthropic.AsyncAnthropic:
        if self._client is None:
            if not any(os.environ.get(name) for name in self.key_variables):
                raise missing_key(self.name, self.key_variables)
            self._client = anthropic.AsyncAnthropic(
                base_url=self.settings.base_url,
                max_retries=self.settings.max_retries,
                http_client=self.settings.http_client,
            )
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await close_quietly(client)

    async def stream(
        self, system: str, items: Sequence[Item], tools: Sequence[ToolSpec]
    ) -> AsyncGenerator[ModelEvent, None]:
        client = self._get_client()
        options: dict[str, Any] = {
            "model": self.settings.model,
            "max_tokens": self.settings.max_tokens,
            "messages": anthropic_messages(items),
        }
        if system:
            options["system"] = system
        if tools:
            options["tools"] = [
                {"name": tool.name, "description": tool.description, "input_schema": tool.parameters} for tool in tools
            ]
        if self.settings.thinking_budget:
            options["thinking"] = {"type": "enabled", "budget_tokens": self.settings.thinking_budget}
        try:
            stream = await client.messages.create(stream=True, **options)
        except anthropic.APIError as exc:
            raise api_error(self.name, exc, connection_failed=isinstance(exc, anthropic.APIConnectionError)) from exc
        try:
            blocks: dict[int, dict[str, str]] = {}
            input_tokens = cached = output_tokens = 0
            stop: str | None = None
            async for event in stream:
                if isinstance(event, anthropic_types.RawMessageStartEvent):
                    usage = event.message.usage
                    cached = usage.cache_read_input_tokens or 0
                    input_tokens = usage.input_tokens + cached + (usage.cache_creation_input_tokens or 0)
                    output_tokens = usage.output_tokens
                elif isinstance(event, anthropic_types.RawContentBlockStartEvent):
                    block = event.content_block
                    entry = {"type": block.type, "text": "", "signature": ""}
                    if isinstance(block, anthropic_types.ToolUseBlock):
                        entry.update(id=block.id, name=block.name)
                    blocks[event.index] = entry
                elif isinstance(event, anthropic_types.RawContentBlockDeltaEvent):
                    delta = event.delta
                    entry = blocks.setdefault(event.index, {"type": "text", "text": "", "signature": ""})
                    if isinstance(delta, anthropic_types.TextDelta):
                        yield TextDelta(delta.text)
                    elif isinstance(delta, anthropic_types.ThinkingDelta):
                        entry["text"] += delta.thinking
                        yield ThoughtDelta(delta.thinking)
                    elif isinstance(delta, anthropic_types.SignatureDelta):
                        entry["signature"] += delta.signature
                    elif isinstance(delta, anthropic_types.InputJSONDelta):
                        entry["text"] += delta.partial_json
                elif isinstance(event, anthropic_types.RawContentBlockStopEvent):
                    entry = blocks.pop(event.index, {})
                    if entry.get("type") == "tool_use":
                        arguments, error = decode_arguments(entry["text"])
                        yield ToolCallDone(entry["id"], entry["name"], arguments, error)
                    elif entry.get("type") == "thinking":
                        yield ThinkingDone(entry["text"], entry["signature"])
                elif isinstance(event, anthropic_types.RawMessageDeltaEvent):
                    stop = event.delta.stop_reason
                    output_tokens = event.usage.output_tokens
                elif isinstance(event, anthropic_types.RawMessageStopEvent):
                    yield TokenUsage(input_tokens, output_tokens, None, cached)
                    yield Finished(_ANTHROPIC_STOP.get(stop or "end_turn", "end_turn"))
                    return
            raise ProviderError(self.name, "anthropic: the stream ended without message_stop (retry the prompt)")
        except anthropic.APIError as exc:
            raise api_error(self.name, exc, connection_failed=isinstance(exc, anthropic.APIConnectionError)) from exc
        finally:
            await close_quietly(stream)

"""The OpenAI Responses API behind :class:`~.providers.Provider` (``client.responses.create(..., stream=True)``).

Event types: ``openai.types.responses.response_stream_event``; input items: ``ResponseInputItemParam``;
tools: ``FunctionToolParam``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import openai
from openai.types import responses as openai_types

from .history import AssistantText, Item, ToolResult, ToolUse, UserText
from .providers import (
    KEY_VARIABLES,
    Finished,
    ModelEvent,
    ProviderError,
    Settings,
    TextDelta,
    ThoughtDelta,
    TokenUsage,
    ToolCallDone,
    ToolSpec,
    api_error,
    close_quietly,
    decode_arguments,
    missing_key,
)

__all__ = ["OpenAIProvider", "openai_input"]


# -- OpenAI: the Responses API ---------------------------------------------------------------------


def openai_input(items: Sequence[Item]) -> list[dict[str, Any]]:
    """The conversation as Responses API input items (``ResponseInputItemParam``): messages,
    ``function_call`` and ``function_call_output`` items.  Thinking items are Anthropic's and skipped."""
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, UserText):
            out.append({"type": "message", "role": "user", "content": item.text})
        elif isinstance(item, AssistantText):
            if item.text:
                out.append({"type": "message", "role": "assistant", "content": item.text})
        elif isinstance(item, ToolUse):
            out.append(
                {
                    "type": "function_call",
                    "call_id": item.call_id,
                    "name": item.name,
                    "arguments": json.dumps(item.arguments),
                }
            )
        elif isinstance(item, ToolResult):
            out.append({"type": "function_call_output", "call_id": item.call_id, "output": item.output})
    return out


class OpenAIProvider:
    """The OpenAI Responses API (``client.responses.create(..., stream=True)``), stateless
    (``store: false``; the whole conversation goes with each request)."""

    name = "openai"
    key_variables = KEY_VARIABLES["openai"]

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: openai.AsyncOpenAI | None = None

    def _get_client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            key = os.environ.get(self.key_variables[0])
            if not key:
                raise missing_key(self.name, self.key_variables)
            self._client = openai.AsyncOpenAI(
                api_key=key,
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
            "input": openai_input(items),
            "store": False,
            "max_output_tokens": self.settings.max_tokens,
        }
        if system:
            options["instructions"] = system
        if tools:
            options["tools"] = [
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "strict": False,
                }
                for tool in tools
            ]
        if self.settings.reasoning_effort:
            options["reasoning"] = {"effort": self.settings.reasoning_effort, "summary": "auto"}
        try:
            stream = await client.responses.create(stream=True, **options)
        except openai.APIError as exc:
            raise api_error(self.name, exc, connection_failed=isinstance(exc, openai.APIConnectionError)) from exc
        try:
            called = False
            refused = False
            async for event in stream:
                if isinstance(event, openai_types.ResponseTextDeltaEvent):
                    yield TextDelta(event.delta)
                elif isinstance(event, openai_types.ResponseRefusalDeltaEvent):
                    refused = True
                    yield TextDelta(event.delta)
                elif isinstance(
                    event,
                    (openai_types.ResponseReasoningSummaryTextDeltaEvent, openai_types.ResponseReasoningTextDeltaEvent),
                ):
                    yield ThoughtDelta(event.delta)
                elif isinstance(event, openai_types.ResponseOutputItemDoneEvent):
                    item = event.item
                    if isinstance(item, openai_types.ResponseFunctionToolCall):
                        called = True
                        arguments, error = decode_arguments(item.arguments)
                        yield ToolCallDone(item.call_id, item.name, arguments, error)
                elif isinstance(event, openai_types.ResponseErrorEvent):
                    raise ProviderError(
                        self.name,
                        f"openai error event: {event.message} (the stream reported an error)",
                        code=event.code,
                        body=event.model_dump(mode="json"),
                    )
                elif isinstance(event, openai_types.ResponseFailedEvent):
                    failure = event.response.error
                    message = failure.message if failure is not None else "the response failed"
                    raise ProviderError(
                        self.name,
                        f"openai response failed: {message}",
                        code=failure.code if failure is not None else None,
                        body=event.response.model_dump(mode="json", include={"id", "error", "status"}),
                    )
                elif isinstance(event, (openai_types.ResponseCompletedEvent, openai_types.ResponseIncompleteEvent)):
                    usage = event.response.usage
                    if usage is not None:
                        yield TokenUsage(
                            usage.input_tokens,
                            usage.output_tokens,
                            usage.output_tokens_details.reasoning_tokens,
                            usage.input_tokens_details.cached_tokens,
                        )
                    details = event.response.incomplete_details
                    if isinstance(event, openai_types.ResponseIncompleteEvent) and details is not None:
                        yield Finished("refusal" if details.reason == "content_filter" else "max_tokens")
                    else:
                        yield Finished("refusal" if refused else "tool_use" if called else "end_turn")
                    return
            raise ProviderError(self.name, "openai: the stream ended without response.completed (retry the prompt)")
        except openai.APIError as exc:
            raise api_error(self.name, exc, connection_failed=isinstance(exc, openai.APIConnectionError)) from exc
        finally:
            await close_quietly(stream)

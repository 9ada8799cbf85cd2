"""The two model APIs behind one streaming interface: OpenAI's Responses API and Anthropic's Messages
API, through their official async SDKs used as they are.

Both SDKs run on httpx2 and anyio, so their async clients run inside trio directly (anyio detects
trio; httpx2's connection pool uses trio's sockets): no thread, no asyncio loop.  The one
asyncio-only path in them is the garbage-collection fallback of an unclosed client
(``AsyncHttpxClientWrapper.__del__``); the agent closes its client explicitly
(:meth:`Provider.aclose`, ``async with`` as the SDKs document), so that path never runs.

:meth:`Provider.stream` sends the conversation (``history.Item`` s), the system prompt and the tools,
and yields provider-neutral events: :class:`TextDelta`, :class:`ThoughtDelta`, :class:`ThinkingDone`,
:class:`ToolCallDone`, :class:`TokenUsage` and finally :class:`Finished`.  Errors of the API (an HTTP
status, an error event in the stream, a connection failure, a missing key) raise :class:`ProviderError`.
Leaving the iteration early (``session/cancel`` cancels the consumer) closes the HTTP response at once,
shielded from the cancellation, so the server sees the connection go away.

Sources: the SDKs' stream event types (``openai.types.responses.response_stream_event``,
``anthropic.types.raw_message_stream_event``) and request params (``ResponseInputItemParam``,
``FunctionToolParam``; ``MessageParam``, ``ToolParam``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import httpx2
import trio

from .history import Item

__all__ = [
    "CLOSE_TIMEOUT",
    "KEY_VARIABLES",
    "Finished",
    "ModelEvent",
    "Provider",
    "ProviderError",
    "Settings",
    "TextDelta",
    "ThinkingDone",
    "ThoughtDelta",
    "TokenUsage",
    "ToolCallDone",
    "ToolSpec",
    "api_error",
    "close_quietly",
    "decode_arguments",
    "make_provider",
    "missing_key",
]

KEY_VARIABLES: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
}
"""The environment variables each provider's SDK reads its key from, the usual one first."""
CLOSE_TIMEOUT = 1.0
"""Seconds the agent waits at most for an HTTP response to close when a stream is abandoned."""


@dataclass
class Settings:
    """What the command line chooses (see ``__main__.py``).

    ``provider``: ``"openai"`` or ``"anthropic"``; ``model``: the model name, passed as is;
    ``base_url``: the API root as the SDK takes it (OpenAI's ends in ``/v1``; Anthropic's has no
    ``/v1``), ``None`` for the SDK's default (or its ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``);
    ``max_retries``: the SDK's retries of failed requests (429, 5xx, connection errors);
    ``max_tokens``: output tokens per model call; ``reasoning_effort``: OpenAI ``reasoning.effort``
    (with ``summary: auto``, so summaries stream as thoughts), ``None`` to send no ``reasoning``;
    ``thinking_budget``: Anthropic extended thinking's ``budget_tokens``, ``None`` for none;
    ``context_window``: the model's context size in tokens, for ``usage_update``'s ``size``;
    ``system_prompt``: the instructions; ``http_client``: an ``httpx2.AsyncClient`` for the SDK
    (tests give one with an in-process transport), ``None`` for the SDK's own.
    """

    provider: Literal["openai", "anthropic"]
    model: str
    base_url: str | None = None
    max_retries: int = 2
    max_tokens: int = 8192
    reasoning_effort: str | None = None
    thinking_budget: int | None = None
    context_window: int = 128_000
    system_prompt: str = ""
    http_client: httpx2.AsyncClient | None = field(default=None, repr=False)


@dataclass
class ToolSpec:
    """A tool offered to the model: ``name`` (``^[a-zA-Z0-9_-]{1,64}$``, as both APIs require),
    ``description``, ``parameters`` (a JSON Schema object)."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class TextDelta:
    """A piece of the model's answer."""

    text: str


@dataclass
class ThoughtDelta:
    """A piece of the model's reasoning (an OpenAI reasoning summary or reasoning text, Anthropic thinking)."""

    text: str


@dataclass
class ThinkingDone:
    """A complete Anthropic thinking block, with the ``signature`` the API wants back with tool results."""

    text: str
    signature: str


@dataclass
class ToolCallDone:
    """A complete tool call: ``call_id``, ``name``, ``arguments`` (decoded; ``{}`` when they do not
    decode, then ``error`` says why)."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    error: str | None = None


@dataclass
class TokenUsage:
    """Tokens of one model call: ``input_tokens`` (all of the prompt, cached ones included),
    ``output_tokens`` (reasoning included), ``reasoning_tokens`` and ``cached_tokens`` (``None`` when the
    API does not say)."""

    input_tokens: int
    output_tokens: int
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass
class Finished:
    """The model call ended: ``reason`` ``"end_turn"``, ``"tool_use"`` (it wants tool results),
    ``"max_tokens"`` or ``"refusal"``."""

    reason: Literal["end_turn", "tool_use", "max_tokens", "refusal"]


ModelEvent = TextDelta | ThoughtDelta | ThinkingDone | ToolCallDone | TokenUsage | Finished


class ProviderError(Exception):
    """The model API failed: ``provider``, ``message`` (what happened and what to do), ``status``
    (the HTTP status, ``None`` for a connection failure or an error event in a stream), ``code``
    (the API's error code or type, if any), ``body`` (the API's JSON error body, if any),
    ``auth`` (true when the key is missing or refused)."""

    def __init__(
        self,
        provider: str,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        body: Any = None,
        auth: bool = False,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.message = message
        self.status = status
        self.code = code
        self.body = body
        self.auth = auth


class Provider(Protocol):
    """One model API.  ``name``: ``"openai"`` / ``"anthropic"``; ``key_variables``: the environment
    variables the SDK reads its key from."""

    name: str
    key_variables: tuple[str, ...]

    def stream(self, system: str, items: Sequence[Item], tools: Sequence[ToolSpec]) -> AsyncGenerator[ModelEvent, None]:
        """Send one request and yield its events (an async generator: close it with ``aclosing``)."""
        ...

    async def aclose(self) -> None:
        """Close the SDK client (its connection pool)."""
        ...


def decode_arguments(text: str) -> tuple[dict[str, Any], str | None]:
    if not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return {}, f"the arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(value, dict):
        return {}, f"the arguments must be a JSON object, got {type(value).__name__}"
    return value, None


async def close_quietly(stream: Any) -> None:
    """Close an SDK stream (its HTTP response) or client (its connection pool), shielded from
    cancellation, bounded by ``CLOSE_TIMEOUT`` seconds; an error while closing is ignored."""
    with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
        try:
            await stream.close()
        except Exception:
            pass


def api_error(provider: str, exc: Exception, *, connection_failed: bool = False) -> ProviderError:
    """An SDK exception as a :class:`ProviderError` that says what to do."""
    status = getattr(exc, "status_code", None)
    if status == 200:  # an error event inside a stream that began well
        status = None
    body = getattr(exc, "body", None)
    message = getattr(exc, "message", None) or str(exc)
    code: str | None = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            message = str(inner.get("message") or message)
            raw_code = inner.get("code") or inner.get("type")
            code = str(raw_code) if raw_code is not None else None
    variable = KEY_VARIABLES[provider][0]
    if status in (401, 403):
        hint = f"the API refused the key: check {variable}"
    elif status == 429:
        hint = "rate limited or out of quota: wait and retry, or raise --max-retries"
    elif status is not None and status >= 500:
        hint = "the API failed on its side: retry later"
    elif connection_failed:
        hint = "could not reach the API: check --base-url and the network"
    elif status is None:
        hint = "the stream reported an error"
    else:
        hint = "the API rejected the request"
    where = f"HTTP {status}" if status is not None else "error"
    return ProviderError(
        provider,
        f"{provider} {where}: {message} ({hint})",
        status=status,
        code=code,
        body=body,
        auth=status in (401, 403),
    )


def missing_key(provider: str, variables: tuple[str, ...]) -> ProviderError:
    names = " or ".join(variables)
    return ProviderError(
        provider,
        f"no API key: set {names} in the environment the client starts this agent with",
        auth=True,
    )


def make_provider(settings: Settings) -> Provider:
    """The :class:`Provider` for ``settings.provider`` (only that provider's SDK is imported)."""
    if settings.provider == "openai":
        from .openai_api import OpenAIProvider

        return OpenAIProvider(settings)
    from .anthropic_api import AnthropicProvider

    return AnthropicProvider(settings)

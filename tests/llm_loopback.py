"""A loopback model server for the example LLM agent's tests: it plays the OpenAI Responses API and the
Anthropic Messages API, streaming (SSE), from a script of replies.

``Loopback(replies)`` is an ASGI app: ``POST /v1/responses`` answers in the OpenAI Responses
streaming format (``response.created``, ``response.output_item.added``,
``response.output_text.delta``, ``response.reasoning_summary_text.delta``,
``response.function_call_arguments.delta``, ..., ``response.completed`` with ``usage``) and
``POST /v1/messages`` in the Anthropic Messages streaming format (``message_start``,
``content_block_start`` / ``_delta`` (``text_delta``, ``thinking_delta``, ``signature_delta``,
``input_json_delta``) / ``_stop``, ``message_delta`` with ``usage``, ``message_stop``), as the
official SDKs parse them (``openai.types.responses.*Event``, ``anthropic.types.RawMessageStreamEvent``).
Each request takes the next reply of the script, a list of parts: :class:`Text`, :class:`Reasoning`,
:class:`ToolCall` (arguments streamed in pieces), :class:`Usage`, :class:`StreamError` (an error
event mid-stream), :class:`Hang` (the stream stays open until the client goes away), or a whole
:class:`HttpError` reply (a status and a JSON error body, no stream).

It records every request (``requests``: path and JSON body) and when a client went away in the middle
of a stream (``disconnected``, ``disconnected_at`` on trio's clock).   ``serve_models`` of
``tests/interop/model_server.py`` (the interop tests' model server, whose SSE and ASGI helpers this
one shares) runs it with hypercorn's trio worker on 127.0.0.1 (port 0); :class:`StreamingAsgiTransport` runs it in process for an
``httpx2.AsyncClient`` (unlike ``httpx2.ASGITransport`` it streams, and closing the response tells the
app ``http.disconnect``), so tests can use trio's autojump clock.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2
import trio
from interop.model_server import lifespan, pieces, send_chunk, send_json, sse, start_sse


@dataclass
class Text:
    """Model text, streamed in ``pieces`` deltas."""

    text: str
    pieces: int = 3


@dataclass
class Reasoning:
    """Reasoning: an OpenAI reasoning summary, an Anthropic thinking block (with a signature)."""

    text: str
    pieces: int = 2


@dataclass
class ToolCall:
    """A function call / ``tool_use`` block whose JSON arguments stream in ``pieces`` deltas."""

    name: str
    arguments: dict[str, Any]
    call_id: str
    pieces: int = 3


@dataclass
class Usage:
    """Token usage of the reply (OpenAI ``response.completed`` usage, Anthropic ``message_start``/``message_delta``)."""

    input_tokens: int
    output_tokens: int
    reasoning_tokens: int = 0
    cached_tokens: int = 0


@dataclass
class StreamError:
    """An error event in the middle of the stream (OpenAI ``error``, Anthropic ``event: error``)."""

    message: str
    code: str = "server_error"


@dataclass
class Hang:
    """Keep the stream open, sending nothing more, until the client disconnects."""


@dataclass
class HttpError:
    """A whole reply: this HTTP status with the provider's JSON error body, no stream."""

    status: int
    message: str


Part = Text | Reasoning | ToolCall | Usage | StreamError | Hang
Reply = list[Part] | HttpError


@dataclass
class Request:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class Loopback:
    """The ASGI app; ``replies`` are served in order, one per request (a request past the end gets a 500),
    unless ``respond`` is given: then each request's reply is ``respond(path, body)`` (for clients
    whose prompts come in no fixed order, such as ``python -m acp_trio.check``)."""

    replies: list[Reply]
    respond: Callable[[str, dict[str, Any]], Reply] | None = None
    requests: list[Request] = field(default_factory=list)
    hanging: trio.Event = field(default_factory=trio.Event)
    disconnected: trio.Event = field(default_factory=trio.Event)
    disconnected_at: float | None = None
    hang_started_at: float | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.requests.append(Request(path, json.loads(body or b"{}"), headers))
        if path not in ("/v1/responses", "/v1/messages"):
            await send_json(send, 404, {"error": {"message": f"no route {path}"}})
            return
        if self.respond is not None:
            reply: Reply = self.respond(path, self.requests[-1].body)
        elif self.replies:
            reply = self.replies.pop(0)
        else:
            reply = HttpError(500, "the loopback script has no more replies")
        if isinstance(reply, HttpError):
            await self._error(send, path, reply)
            return
        await start_sse(send)
        render = _openai_events if path == "/v1/responses" else _anthropic_events
        for chunk in render(reply, self.requests[-1].body.get("model", "loopback")):
            if chunk is None:  # Hang
                self.hang_started_at = trio.current_time()
                self.hanging.set()
                while (await receive())["type"] != "http.disconnect":
                    pass
                self.disconnected_at = trio.current_time()
                self.disconnected.set()
                return
            await send_chunk(send, chunk)
            await trio.lowlevel.checkpoint()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _error(self, send: Any, path: str, reply: HttpError) -> None:
        if path == "/v1/responses":
            payload: dict[str, Any] = {
                "error": {"message": reply.message, "type": "server_error", "param": None, "code": str(reply.status)}
            }
        else:
            payload = {"type": "error", "error": {"type": "api_error", "message": reply.message}}
        await send_json(send, reply.status, payload)


# -- OpenAI Responses (openai/types/responses/response_stream_event.py) ------------------------------


def _openai_events(reply: list[Part], model: str) -> list[bytes | None]:
    out: list[bytes | None] = []
    seq = 0

    def event(kind: str, **data: Any) -> None:
        nonlocal seq
        out.append(sse(kind, {"type": kind, "sequence_number": seq, **data}))
        seq += 1

    def response(status: str, output: list[Any], usage: Any = None) -> dict[str, Any]:
        return {
            "id": "resp_loopback",
            "object": "response",
            "created_at": 1_700_000_000,
            "status": status,
            "model": model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
            "temperature": None,
            "top_p": None,
        }

    event("response.created", response=response("in_progress", []))
    output: list[Any] = []
    usage: Any = None
    for part in reply:
        index = len(output)
        if isinstance(part, Text):
            item_id = f"msg_{index}"
            item = {"type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": []}
            event("response.output_item.added", output_index=index, item=item)
            empty = {"type": "output_text", "text": "", "annotations": []}
            event("response.content_part.added", item_id=item_id, output_index=index, content_index=0, part=empty)
            for piece in pieces(part.text, part.pieces):
                event(
                    "response.output_text.delta",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    delta=piece,
                    logprobs=[],
                )
            event(
                "response.output_text.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                text=part.text,
                logprobs=[],
            )
            done = {**item, "status": "completed", "content": [{**empty, "text": part.text}]}
            event("response.output_item.done", output_index=index, item=done)
            output.append(done)
        elif isinstance(part, Reasoning):
            item_id = f"rs_{index}"
            item = {"type": "reasoning", "id": item_id, "summary": []}
            event("response.output_item.added", output_index=index, item=item)
            event(
                "response.reasoning_summary_part.added",
                item_id=item_id,
                output_index=index,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            )
            for piece in pieces(part.text, part.pieces):
                event(
                    "response.reasoning_summary_text.delta",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    delta=piece,
                )
            event(
                "response.reasoning_summary_text.done",
                item_id=item_id,
                output_index=index,
                summary_index=0,
                text=part.text,
            )
            done = {**item, "summary": [{"type": "summary_text", "text": part.text}]}
            event("response.output_item.done", output_index=index, item=done)
            output.append(done)
        elif isinstance(part, ToolCall):
            item_id = f"fc_{index}"
            arguments = json.dumps(part.arguments)
            item = {
                "type": "function_call",
                "id": item_id,
                "call_id": part.call_id,
                "name": part.name,
                "arguments": "",
                "status": "in_progress",
            }
            event("response.output_item.added", output_index=index, item=item)
            for piece in pieces(arguments, part.pieces):
                event("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=piece)
            event("response.function_call_arguments.done", item_id=item_id, output_index=index, arguments=arguments)
            done = {**item, "arguments": arguments, "status": "completed"}
            event("response.output_item.done", output_index=index, item=done)
            output.append(done)
        elif isinstance(part, Usage):
            usage = {
                "input_tokens": part.input_tokens,
                "input_tokens_details": {"cached_tokens": part.cached_tokens},
                "output_tokens": part.output_tokens,
                "output_tokens_details": {"reasoning_tokens": part.reasoning_tokens},
                "total_tokens": part.input_tokens + part.output_tokens,
            }
        elif isinstance(part, StreamError):
            event("error", code=part.code, message=part.message, param=None)
            return out
        elif isinstance(part, Hang):
            out.append(None)
            return out
    event("response.completed", response=response("completed", output, usage))
    return out


# -- Anthropic Messages (anthropic/types/raw_message_stream_event.py) -------------------------------


def _anthropic_events(reply: list[Part], model: str) -> list[bytes | None]:
    out: list[bytes | None] = []

    def event(kind: str, **data: Any) -> None:
        out.append(sse(kind, {"type": kind, **data}))

    usage = next((part for part in reply if isinstance(part, Usage)), None)
    start_usage = {
        "input_tokens": usage.input_tokens - usage.cached_tokens if usage else 0,  # Anthropic: uncached only
        "output_tokens": 1,
        "cache_read_input_tokens": usage.cached_tokens if usage else 0,
        "cache_creation_input_tokens": 0,
    }
    message = {
        "id": "msg_loopback",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    event("message_start", message=message)
    out.append(b'event: ping\ndata: {"type": "ping"}\n\n')
    index = 0
    stop_reason = "end_turn"
    for part in reply:
        if isinstance(part, Text):
            event("content_block_start", index=index, content_block={"type": "text", "text": ""})
            for piece in pieces(part.text, part.pieces):
                event("content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
            event("content_block_stop", index=index)
            index += 1
        elif isinstance(part, Reasoning):
            event(
                "content_block_start", index=index, content_block={"type": "thinking", "thinking": "", "signature": ""}
            )
            for piece in pieces(part.text, part.pieces):
                event("content_block_delta", index=index, delta={"type": "thinking_delta", "thinking": piece})
            event("content_block_delta", index=index, delta={"type": "signature_delta", "signature": f"sig-{index}"})
            event("content_block_stop", index=index)
            index += 1
        elif isinstance(part, ToolCall):
            block = {"type": "tool_use", "id": part.call_id, "name": part.name, "input": {}}
            event("content_block_start", index=index, content_block=block)
            for piece in pieces(json.dumps(part.arguments), part.pieces):
                event("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": piece})
            event("content_block_stop", index=index)
            index += 1
            stop_reason = "tool_use"
        elif isinstance(part, StreamError):
            out.append(sse("error", {"type": "error", "error": {"type": "overloaded_error", "message": part.message}}))
            return out
        elif isinstance(part, Hang):
            out.append(None)
            return out
    delta_usage = {"output_tokens": usage.output_tokens if usage else 1}
    event("message_delta", delta={"stop_reason": stop_reason, "stop_sequence": None}, usage=delta_usage)
    event("message_stop")
    return out


# -- in process -------------------------------------------------------------------------------------


class _Body(httpx2.AsyncByteStream):
    def __init__(self, chunks: trio.MemoryReceiveChannel[bytes], closed: trio.Event) -> None:
        self._chunks = chunks
        self._closed = closed

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk

    async def aclose(self) -> None:
        self._closed.set()
        await self._chunks.aclose()


class StreamingAsgiTransport(httpx2.AsyncBaseTransport):
    """An ``httpx2`` transport that runs an ASGI app in ``nursery`` and streams its answer: each
    ``http.response.body`` reaches the client as it is sent, and closing the response (or the client
    going away) gives the app ``http.disconnect``."""

    def __init__(self, app: Any, nursery: trio.Nursery) -> None:
        self.app = app
        self.nursery = nursery

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        started: trio.Event = trio.Event()
        head: dict[str, Any] = {}
        send_chunk, receive_chunk = trio.open_memory_channel[bytes](1000)
        closed = trio.Event()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for (k, v) in request.headers.raw],
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "server": (request.url.host, request.url.port),
            "client": ("127.0.0.1", 1),
            "root_path": "",
        }
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await closed.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                head["status"] = message["status"]
                head["headers"] = message.get("headers", [])
                started.set()
            elif message["type"] == "http.response.body":
                if closed.is_set():
                    return
                if message.get("body"):
                    try:
                        send_chunk.send_nowait(message["body"])
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        return
                if not message.get("more_body"):
                    await send_chunk.aclose()

        async def run_app() -> None:
            try:
                await self.app(scope, receive, send)
            finally:
                await send_chunk.aclose()

        self.nursery.start_soon(run_app)
        await started.wait()
        return httpx2.Response(head["status"], headers=head["headers"], stream=_Body(receive_chunk, closed))


def requests_to(app: Loopback, path: str) -> Sequence[Request]:
    """The recorded requests to ``path``."""
    return [r for r in app.requests if r.path == path]

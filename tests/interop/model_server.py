"""A loopback stand-in for the model APIs that real ACP agents call, so they run with no network or key.

``claude-agent-acp`` runs Claude Code, which calls the Anthropic Messages API at
``ANTHROPIC_BASE_URL``; ``codex-acp`` runs the Codex CLI core, which calls the OpenAI Responses API
at the ``base_url`` of its model provider (``config.toml`` under ``CODEX_HOME``); gemini-cli calls
the Gemini API at ``GOOGLE_GEMINI_BASE_URL``; qwen-code, opencode and pydantic-acp (a pydantic-ai
``openai-chat:`` model) call OpenAI Chat Completions at their configured base URL.  This server
answers all four on one port, with a plain ASGI callable served by hypercorn's trio worker:

- ``POST /v1/messages``: a Messages API answer, streamed as server-sent events when the request
  asks ``"stream": true`` (``message_start``, ``content_block_*``, ``message_delta``,
  ``message_stop``), else one JSON message;
- ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}`` (N: a rough count of the request);
- ``POST /v1/responses``: a Responses API answer streamed as server-sent events
  (``response.created``, ``response.output_item.added``, ``response.output_text.delta``...,
  ``response.output_item.done``, ``response.completed``);
- ``POST /v1beta/models/{model}:generateContent`` (one ``GenerateContentResponse``) and
  ``:streamGenerateContent?alt=sse`` (one per piece as ``data:`` events, the last with
  ``finishReason: STOP``): the Gemini API; a request for structured output
  (``generationConfig.responseMimeType: application/json`` with a ``responseJsonSchema``, as
  gemini-cli's model router sends at each turn) gets JSON fitting the schema (:func:`value_for`);
  ``:countTokens``: ``{"totalTokens": N}``;
- ``POST /v1/chat/completions``: OpenAI Chat Completions, streamed as ``data:`` chunks
  (``chat.completion.chunk``, a usage chunk when ``stream_options.include_usage``, then
  ``data: [DONE]``) when ``"stream": true``, else one ``chat.completion``;
- ``GET /v1/models``: a one-model list in both APIs' shapes;
- anything else: 404 with a JSON error body.

Every answer is the text :data:`ANSWER`, cut into ``deltas`` pieces sent ``delay`` seconds apart
(defaults: 24 pieces, 0.05 s: a turn of about 1.2 s, so a ``session/cancel`` sent right after the
prompt lands mid-turn).  A user message containing :data:`TOOL_MARKER` followed by a path
(``acp-tool-read:/tmp/x.txt``), with no tool result after it, is answered with a tool call that
reads that file instead: the Messages API's ``Read`` tool when the request offers it; for the
Responses API whichever shell tool the request offers (``shell_command``, ``exec_command`` or
``shell``) runs ``cat``; for the Gemini API and Chat Completions the read tool the request
declares (:func:`tool_call_for`: gemini-cli's and qwen-code's ``read_file``, opencode's ``read``).
:data:`WRITE_MARKER` (``acp-tool-write:/tmp/new.txt``) does the same with the write tool
(``write_file``, ``write``, the Messages API's ``Write``) and :data:`WRITE_CONTENT` as the file's
text (not the Responses API).  The follow-up request carrying the tool result (a ``functionResponse`` part,
a ``tool`` message) gets the text answer.

Every request is logged as one JSON line (time, method, path, query, user agent, the model, whether
it streams, the body size, how many tools it offers, whether it got a ``text`` or ``tool`` answer,
and which tool) to ``log`` (a file path, or stderr when ``None``): that is how one learns which
endpoints an agent really calls; ``dump`` (``--dump DIR``) also keeps each request's body.

Run alone: ``python tests/interop/model_server.py [--port 0] [--log FILE] [--dump DIR] [--deltas N]
[--delay S]`` prints ``http://127.0.0.1:PORT`` on stdout once it listens.  In a trio program:
``url = await nursery.start(serve_models, ModelServer(...))``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

ANSWER = "Hello! This is the loopback model server answering in one short sentence, slowly, piece by piece."
TOOL_MARKER = "acp-tool-read:"
WRITE_MARKER = "acp-tool-write:"
WRITE_CONTENT = "Written by the loopback model server through the agent's write tool.\n"
MODEL = "loopback-model"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def pieces(text: str, count: int) -> list[str]:
    """``text`` cut into ``count`` (at least 1) consecutive non-empty pieces, joined back exactly."""
    count = max(1, min(count, len(text)))
    size, extra = divmod(len(text), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One server-sent event: ``event: EVENT``, ``data: <data as compact JSON>``, a blank line."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def sse_data(data: dict[str, Any]) -> bytes:
    """One server-sent event with no event name: ``data: <data as compact JSON>``, a blank line
    (the Gemini API's and Chat Completions' streams)."""
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _text_of(content: Any) -> str:
    """The text of a message's ``content`` (a string or a list of blocks/parts), tool results excluded."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "input_text")
        )
    return ""


def _tool_path(messages: Any, answered: Callable[[Any], bool]) -> str | None:
    """The path to read when the newest user message naming :data:`TOOL_MARKER` has no tool result after it.

    Scans ``messages`` (Messages API ``messages`` or Responses API ``input`` items) newest first:
    a tool result (``answered``) first means the tool call was made already.  Other messages
    (Claude Code appends a ``system`` one) are passed over.
    """
    wanted = _tool_request(messages, answered, lambda m: _text_of(m.get("content")), markers=(TOOL_MARKER,))
    return None if wanted is None else wanted[1]


def _tool_request(
    messages: Any,
    answered: Callable[[Any], bool],
    text_of: Callable[[dict[str, Any]], str],
    user_roles: tuple[str, ...] = ("user",),
    markers: tuple[str, ...] = (TOOL_MARKER, WRITE_MARKER),
) -> tuple[str, str] | None:
    """``("read" | "write", path)`` when the newest user message naming a marker (:data:`TOOL_MARKER`,
    :data:`WRITE_MARKER`) has no tool result after it, else ``None``.

    ``messages`` newest first: a tool result (``answered``) first means the call was made already;
    ``text_of(message)``: a message's text; a message of a role not in ``user_roles`` is passed over.
    """
    if not isinstance(messages, list):
        return None
    pattern = re.compile("(" + "|".join(re.escape(m) for m in markers) + r")(\S+)")
    for message in reversed(messages):
        if not isinstance(message, dict):
            continue
        if answered(message):
            return None
        if message.get("role") in user_roles:
            found = pattern.findall(text_of(message))
            if found:
                marker, path = found[-1]
                return ("write" if marker == WRITE_MARKER else "read"), path.rstrip(".,;:)\"'`")
    return None


def _has_tool_result(message: Any) -> bool:
    """A Messages API message carrying a ``tool_result`` block."""
    content = message.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def _is_tool_output(item: Any) -> bool:
    """A Responses API input item carrying a function call's output."""
    return item.get("type") == "function_call_output"


def _tool_names(request: dict[str, Any]) -> set[Any]:
    """The names of the tools a request offers the model."""
    tools = request.get("tools")
    return {t.get("name") for t in tools if isinstance(t, dict)} if isinstance(tools, list) else set()


SHELL_TOOLS = ("shell_command", "exec_command", "shell")


READ_TOOLS = ("read_file", "read", "Read", "read_text_file", "view")
WRITE_TOOLS = ("write_file", "write", "Write", "write_text_file", "create_file")
PATH_PARAMS = ("file_path", "absolute_path", "filePath", "path")
CONTENT_PARAMS = ("content", "contents", "text")


def _properties(schema: Any) -> dict[str, Any]:
    """The ``properties`` of a tool's JSON schema (``{}`` when it has none)."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    return props if isinstance(props, dict) else {}


def tool_call_for(kind: str, path: str, offered: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The tool call (name, arguments) that reads (``kind`` ``"read"``) or writes ``path``, with one
    of the tools ``offered`` (name -> parameters' JSON schema), or ``None`` when none fits.

    Picks the first of :data:`READ_TOOLS` / :data:`WRITE_TOOLS` offered, else any tool whose name
    holds ``read`` / ``write``; the path goes in its first parameter named in :data:`PATH_PARAMS`,
    a write's text (:data:`WRITE_CONTENT`) in the first named in :data:`CONTENT_PARAMS`.
    """
    preferred = READ_TOOLS if kind == "read" else WRITE_TOOLS
    names = [n for n in preferred if n in offered] + sorted(n for n in offered if kind in n.lower())
    for name in names:
        props = _properties(offered[name])
        path_param = next((p for p in PATH_PARAMS if p in props), None)
        if path_param is None:
            continue
        if kind == "read":
            return name, {path_param: path}
        content_param = next((p for p in CONTENT_PARAMS if p in props), None)
        if content_param is not None:
            return name, {path_param: path, content_param: WRITE_CONTENT}
    return None


def value_for(schema: Any) -> Any:
    """A small value that satisfies the JSON schema ``schema`` (object, array, string, number,
    integer, boolean; ``enum``: its first member; OpenAPI's upper-case type names too): what a
    structured-output request (Gemini's ``responseJsonSchema``) is answered with."""
    if not isinstance(schema, dict):
        return "loopback"
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind or ("object" if "properties" in schema else "string")).lower()
    if kind == "object":
        props = _properties(schema)
        required = schema.get("required") or list(props)
        return {name: value_for(props.get(name)) for name in required}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        low = schema.get("minimum", 1)
        return int(low) if kind == "integer" else low
    if kind == "boolean":
        return False
    return "loopback"


def _gemini_tools(request: dict[str, Any]) -> dict[str, Any]:
    """The functions a Gemini API request declares: name -> parameters' JSON schema."""
    out: dict[str, Any] = {}
    for group in request.get("tools") or []:
        for decl in (group.get("functionDeclarations") or []) if isinstance(group, dict) else []:
            if isinstance(decl, dict) and decl.get("name"):
                out[decl["name"]] = decl.get("parametersJsonSchema") or decl.get("parameters") or {}
    return out


def _chat_tools(request: dict[str, Any]) -> dict[str, Any]:
    """The functions a Chat Completions request offers: name -> parameters' JSON schema."""
    out: dict[str, Any] = {}
    for tool in request.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name"):
            out[function["name"]] = function.get("parameters") or {}
    return out


def _gemini_text(content: dict[str, Any]) -> str:
    parts = content.get("parts")
    return "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict)) if isinstance(parts, list) else ""


def _gemini_answered(content: Any) -> bool:
    """A Gemini ``contents`` entry carrying a ``functionResponse`` part."""
    parts = content.get("parts")
    return isinstance(parts, list) and any(isinstance(p, dict) and "functionResponse" in p for p in parts)


def _chat_answered(message: Any) -> bool:
    """A Chat Completions message carrying a tool's result."""
    return message.get("role") in ("tool", "function")


GEMINI_PATH = re.compile(r"^/(v1[a-z0-9]*)/models/([^/:]+):([A-Za-z]+)$")


@dataclass
class ModelServer:
    """The ASGI application.  ``deltas``: pieces per answer; ``delay``: seconds between pieces;
    ``log``: a file path for the request log (JSON lines), or ``None`` for stderr; ``dump``: a
    directory to save each request's body in (``NNNN-<path>.json``), or ``None``."""

    deltas: int = 24
    delay: float = 0.05
    log: str | None = None
    dump: str | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def _record(self, entry: dict[str, Any]) -> None:
        self.requests.append(entry)
        line = json.dumps(entry, sort_keys=True)
        if self.log is None:
            print(f"model-server: {line}", file=sys.stderr, flush=True)
        else:
            with open(self.log, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            request = json.loads(body) if body else {}
        except ValueError:
            request = {}
        if not isinstance(request, dict):
            request = {}
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"]
        route = path.removeprefix("/v1")
        gemini = GEMINI_PATH.match(path)
        tool_path = None
        call: tuple[str, dict[str, Any]] | None = None  # Gemini API and Chat Completions: (name, arguments)
        tools = len(request.get("tools") or [])
        if route == "/messages" and "Read" in _tool_names(request):
            wanted = _tool_request(request.get("messages"), _has_tool_result, lambda m: _text_of(m.get("content")))
            if wanted is not None and wanted[0] == "read":
                call = ("Read", {"file_path": wanted[1]})
            elif wanted is not None and "Write" in _tool_names(request):
                call = ("Write", {"file_path": wanted[1], "content": WRITE_CONTENT})
        elif route == "/responses" and self._shell_tools(request):
            tool_path = _tool_path(request.get("input"), _is_tool_output)
        elif gemini:
            offered = _gemini_tools(request)
            tools = len(offered)
            wanted = _tool_request(request.get("contents"), _gemini_answered, _gemini_text)
            call = None if wanted is None else tool_call_for(*wanted, offered)
        elif route == "/chat/completions":
            offered = _chat_tools(request)
            tools = len(offered)
            wanted = _tool_request(request.get("messages"), _chat_answered, lambda m: _text_of(m.get("content")))
            call = None if wanted is None else tool_call_for(*wanted, offered)
        if self.dump is not None:
            number = len(self.requests) + 1
            name = re.sub(r"[^A-Za-z0-9.-]+", "_", path).strip("_")
            with open(os.path.join(self.dump, f"{number:04d}-{name}.json"), "wb") as f:
                f.write(bytes(body))
        self._record(
            {
                "time": round(time.time(), 3),
                "method": scope["method"],
                "path": path,
                "query": scope.get("query_string", b"").decode("latin-1"),
                "user_agent": headers.get("user-agent", ""),
                "model": request.get("model"),
                "stream": request.get("stream"),
                "bytes": len(body),
                "tools": tools,
                "answer": "tool" if tool_path is not None or call is not None else "text",
                **({"tool": call[0]} if call is not None else {}),
            }
        )
        if scope["method"] == "POST" and route == "/messages":
            await self._messages(request, call, send)
        elif scope["method"] == "POST" and route == "/messages/count_tokens":
            await send_json(send, 200, {"input_tokens": max(1, len(body) // 4)})
        elif scope["method"] == "POST" and route == "/responses":
            await self._responses(request, tool_path, send)
        elif scope["method"] == "POST" and gemini and gemini.group(3) in ("generateContent", "streamGenerateContent"):
            await self._gemini(request, gemini.group(2), gemini.group(3) == "streamGenerateContent", call, send)
        elif scope["method"] == "POST" and gemini and gemini.group(3) == "countTokens":
            await send_json(send, 200, {"totalTokens": max(1, len(body) // 4)})
        elif scope["method"] == "POST" and route == "/chat/completions":
            await self._chat(request, call, send)
        elif scope["method"] == "GET" and route == "/models":
            entry = {"id": MODEL, "object": "model", "type": "model", "display_name": MODEL, "created_at": 0}
            await send_json(send, 200, {"object": "list", "data": [entry], "models": [], "has_more": False})
        else:
            await send_json(send, 404, {"type": "error", "error": {"type": "not_found_error", "message": f"no {path}"}})

    # -- the Anthropic Messages API -------------------------------------------------------------------
    async def _messages(self, request: dict[str, Any], call: tuple[str, dict[str, Any]] | None, send: Send) -> None:
        """``call``: the tool call to answer with (``Read`` or ``Write``, its input), else the text."""
        number = next(self._ids)
        model = request.get("model") or MODEL
        usage = {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if call is not None:
            name, tool_input = call
            block: dict[str, Any] = {"type": "tool_use", "id": f"toolu_loopback_{number}", "name": name, "input": {}}
            stop_reason = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            stop_reason = "end_turn"
        message = {
            "id": f"msg_loopback_{number}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        if not request.get("stream"):
            if call is not None:
                content = [{**block, "input": tool_input}]
            else:
                content = [{"type": "text", "text": ANSWER}]
            done = {**message, "content": content, "stop_reason": stop_reason, "usage": {**usage, "output_tokens": 20}}
            await send_json(send, 200, done)
            return
        await start_sse(send)
        await send_chunk(send, sse("message_start", {"type": "message_start", "message": message}))
        await send_chunk(
            send, sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
        )
        if call is not None:
            delta = {"type": "input_json_delta", "partial_json": json.dumps(tool_input)}
            await send_chunk(
                send, sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
            )
        else:
            for piece in pieces(ANSWER, self.deltas):
                await trio.sleep(self.delay)
                delta = {"type": "text_delta", "text": piece}
                await send_chunk(
                    send, sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
                )
        await send_chunk(send, sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
        end = {"stop_reason": stop_reason, "stop_sequence": None}
        await send_chunk(
            send, sse("message_delta", {"type": "message_delta", "delta": end, "usage": {"output_tokens": 20}})
        )
        await send_chunk(send, sse("message_stop", {"type": "message_stop"}))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # -- the OpenAI Responses API ---------------------------------------------------------------------
    @staticmethod
    def _shell_tools(request: dict[str, Any]) -> list[str]:
        """The shell tools a Responses API request offers, in :data:`SHELL_TOOLS` order."""
        names = _tool_names(request)
        return [name for name in SHELL_TOOLS if name in names]

    async def _responses(self, request: dict[str, Any], tool_path: str | None, send: Send) -> None:
        number = next(self._ids)
        response_id = f"resp_loopback_{number}"
        base = {"id": response_id, "object": "response", "created_at": int(time.time()), "model": request.get("model")}
        await start_sse(send)
        await send_chunk(
            send, sse("response.created", {"type": "response.created", "response": {**base, "status": "in_progress"}})
        )
        if tool_path is not None:
            tools = self._shell_tools(request)
            if "shell_command" in tools:
                name, arguments = "shell_command", {"command": f"cat {tool_path}"}
            elif "exec_command" in tools:
                name, arguments = "exec_command", {"cmd": f"cat {tool_path}"}
            else:
                name, arguments = "shell", {"command": ["cat", tool_path]}
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_loopback_{number}",
                "call_id": f"call_loopback_{number}",
                "name": name,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
            added = {"type": "response.output_item.added", "output_index": 0, "item": item}
            await send_chunk(send, sse("response.output_item.added", added))
        else:
            item_id = f"msg_loopback_{number}"
            opened = {"type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": []}
            added = {"type": "response.output_item.added", "output_index": 0, "item": opened}
            await send_chunk(send, sse("response.output_item.added", added))
            part = {"type": "output_text", "text": "", "annotations": []}
            part_added = {
                "type": "response.content_part.added",
                "item_id": item_id,
                "output_index": 0,
                "content_index": 0,
                "part": part,
            }
            await send_chunk(send, sse("response.content_part.added", part_added))
            for piece in pieces(ANSWER, self.deltas):
                await trio.sleep(self.delay)
                delta = {
                    "type": "response.output_text.delta",
                    "item_id": item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": piece,
                }
                await send_chunk(send, sse("response.output_text.delta", delta))
            item = {
                "type": "message",
                "id": item_id,
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
            }
        done = {"type": "response.output_item.done", "output_index": 0, "item": item}
        await send_chunk(send, sse("response.output_item.done", done))
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 20,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 30,
        }
        completed = {**base, "status": "completed", "output": [item], "usage": usage}
        await send_chunk(send, sse("response.completed", {"type": "response.completed", "response": completed}))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # -- the Gemini API (generativelanguage.googleapis.com) ----------------------------------------------
    async def _gemini(
        self, request: dict[str, Any], model: str, stream: bool, call: tuple[str, dict[str, Any]] | None, send: Send
    ) -> None:
        number = next(self._ids)
        base = {"modelVersion": model, "responseId": f"loopback-{number}"}
        usage = {"promptTokenCount": 10, "candidatesTokenCount": 20, "totalTokenCount": 30}

        def chunk(parts: list[dict[str, Any]], finish: bool) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            if finish:
                candidate["finishReason"] = "STOP"
            return {"candidates": [candidate], "usageMetadata": usage, **base}

        config = request.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        parts: list[dict[str, Any]] = []
        texts: list[str] | None
        if call is not None:
            parts = [{"functionCall": {"id": f"call_loopback_{number}", "name": call[0], "args": call[1]}}]
            texts = None
        elif config.get("responseMimeType") == "application/json" and schema is not None:
            texts = [json.dumps(value_for(schema))]  # structured output (gemini-cli's router, its checks)
        else:
            texts = pieces(ANSWER, self.deltas) if stream else [ANSWER]
        if not stream:
            parts = parts if texts is None else [{"text": "".join(texts)}]
            await send_json(send, 200, chunk(parts, True))
            return
        await start_sse(send)
        if texts is None:
            await send_chunk(send, sse_data(chunk(parts, True)))
        else:
            for i, piece in enumerate(texts):
                await trio.sleep(self.delay)
                await send_chunk(send, sse_data(chunk([{"text": piece}], i == len(texts) - 1)))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # -- OpenAI Chat Completions --------------------------------------------------------------------
    async def _chat(self, request: dict[str, Any], call: tuple[str, dict[str, Any]] | None, send: Send) -> None:
        number = next(self._ids)
        base = {
            "id": f"chatcmpl-loopback-{number}",
            "created": int(time.time()),
            "model": request.get("model") or MODEL,
        }
        usage = {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}
        tool_call = None
        if call is not None:
            function = {"name": call[0], "arguments": json.dumps(call[1])}
            tool_call = {"id": f"call_loopback_{number}", "type": "function", "function": function}
        finish = "stop" if tool_call is None else "tool_calls"
        if not request.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": ANSWER if tool_call is None else None}
            if tool_call is not None:
                message["tool_calls"] = [tool_call]
            choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            await send_json(send, 200, {**base, "object": "chat.completion", "choices": [choice], "usage": usage})
            return

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            return sse_data({**base, "object": "chat.completion.chunk", "choices": [choice]})

        await start_sse(send)
        if tool_call is not None:
            opened = {**tool_call, "index": 0, "function": {"name": call[0] if call else "", "arguments": ""}}
            await send_chunk(send, chunk({"role": "assistant", "content": None, "tool_calls": [opened]}))
            arguments = {"index": 0, "function": {"arguments": tool_call["function"]["arguments"]}}
            await send_chunk(send, chunk({"tool_calls": [arguments]}))
        else:
            await send_chunk(send, chunk({"role": "assistant", "content": ""}))
            for piece in pieces(ANSWER, self.deltas):
                await trio.sleep(self.delay)
                await send_chunk(send, chunk({"content": piece}))
        await send_chunk(send, chunk({}, finish))
        if (request.get("stream_options") or {}).get("include_usage"):
            await send_chunk(send, sse_data({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage}))
        await send_chunk(send, b"data: [DONE]\n\n")
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def lifespan(receive: Receive, send: Send) -> None:
    """Answer an ASGI ``lifespan`` scope (hypercorn starts one): nothing to set up or tear down."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    """A whole JSON response: ``status``, ``content-type: application/json``, ``body``."""
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})


async def start_sse(send: Send) -> None:
    """The start of a 200 ``text/event-stream`` response (events follow with :func:`send_chunk`)."""
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})


async def send_chunk(send: Send, data: bytes) -> None:
    """One more piece of the response body (more follows)."""
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def serve_models(
    app: Callable[[Scope, Receive, Send], Awaitable[None]],
    port: int = 0,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``127.0.0.1:port`` (0: any free port) until cancelled; ``nursery.start`` gets
    its base URL, ``http://127.0.0.1:PORT`` (no ``/v1``)."""
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.5

    class _Status:
        def started(self, binds: list[str] | None = None) -> None:
            bound = (binds or [""])[0]
            task_status.started(bound.rstrip("/"))

    await serve(app, config, task_status=_Status())  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A loopback stand-in for the Anthropic and OpenAI model APIs.")
    parser.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: any free one)")
    parser.add_argument("--log", help="log each request as a JSON line to this file (default: stderr)")
    parser.add_argument("--dump", help="save each request's body into this directory")
    parser.add_argument("--deltas", type=int, default=24, help="pieces per streamed answer (default 24)")
    parser.add_argument("--delay", type=float, default=0.05, help="seconds between pieces (default 0.05)")
    options = parser.parse_args(argv)
    app = ModelServer(deltas=options.deltas, delay=options.delay, log=options.log, dump=options.dump)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_models, app, options.port)
            print(url, flush=True)

    trio.run(run)


if __name__ == "__main__":
    main()

"""The example pydantic-ai agent: a scripted model (no network), two tools, one of them needing approval.

``agent`` is a plain ``pydantic_ai.Agent`` -- nothing in this file knows about ACP -- so that the same
object can be served by acp-trio (``python -m acp_trio.integrations.pydantic_ai
examples.pydantic_ai_agent.agent:agent``) and by pydantic-acp (``tests/interop/pydantic_acp_same.py``)
and the two compared.  It imports and runs with pydantic-ai 2.52 (the newest pydantic-acp 1.10.0
allows) and 2.68.

Tools (``async``: no worker thread per call):

- ``read_note(path)``: the text of a note file (relative paths from the process's working directory);
  a missing or unreadable file is told to the model, not raised.
- ``write_note(path, text)``: writes the note, creating it; declared ``requires_approval=True``, so
  pydantic-ai defers it until the user approves (the ACP servers ask ``session/request_permission``).

The model (:func:`script` / :func:`stream`, a ``FunctionModel``) decides from what it is sent only,
so a run is the same every time and a continued conversation (``session/load``) shows what the model
saw.  The latest user prompt selects the script:

- ``stream N`` (``stream N slow``): N text chunks ``"w<i> "`` (slow: 10 ms apart, a turn to cancel);
- a prompt mentioning ``note``: a thought, then ``read_note(path)`` (the first word
  ending ``.md`` or ``.txt``, default ``notes.md``); once it returns, if the prompt says append, add,
  write or save: ``write_note(path, old text + a line)`` (the line: the prompt's first quoted text)
  and, when a tool whose name ends in ``word_count`` is offered (``notes_mcp.py``, an MCP server),
  ``word_count(text)`` beside it; then (written, denied, or nothing to write) a streamed summary
  of the tool results;
- anything else: a short greeting.

Every answer that ends a turn ends with ``(turn K; earlier prompts: [...])``: the user prompts the
model saw before this one, so a test can tell that the history survived.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import (
    AgentInfo,
    DeltaThinkingCalls,
    DeltaThinkingPart,
    DeltaToolCall,
    DeltaToolCalls,
    FunctionModel,
)

DEFAULT_NOTE = "notes.md"
SLOW_CHUNK_SECONDS = 0.01
"""Seconds between the chunks of a ``stream N slow`` answer."""
_STREAM = re.compile(r"^\s*stream\s+(\d+)(\s+slow)?\s*$", re.IGNORECASE)
_PATH = re.compile(r"[\w./~-]+\.(?:md|txt)\b")
_QUOTED = re.compile(r"\"([^\"]+)\"|'([^']+)'")
_WRITE = re.compile(r"\b(?:append|add|write|save)\b", re.IGNORECASE)


# -- what the model sees ------------------------------------------------------------------------------


def _prompt_text(part: UserPromptPart) -> str:
    if isinstance(part.content, str):
        return part.content
    return " ".join(item for item in part.content if isinstance(item, str))


@dataclass
class Seen:
    """What the latest request shows the model: the user prompts so far (the last is this turn's),
    the tool results returned since that prompt (name -> content), a retry prompt's text if any."""

    prompts: list[str]
    results: dict[str, str]
    retry: str | None


def seen(messages: list[ModelMessage]) -> Seen:
    prompts: list[str] = []
    results: dict[str, str] = {}
    retry: str | None = None
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                prompts.append(_prompt_text(part))
                results, retry = {}, None  # a new turn: earlier results are the earlier turns'
            elif isinstance(part, ToolReturnPart):
                results[part.tool_name] = part.model_response_str()
            elif isinstance(part, RetryPromptPart):
                retry = part.model_response()
    return Seen(prompts, results, retry)


# -- the script: what the model answers ---------------------------------------------------------------


@dataclass
class Think:
    text: str


@dataclass
class Say:
    text: str


@dataclass
class Call:
    tool: str
    args: dict[str, str]
    call_id: str


Step = Think | Say | Call


def _signature(view: Seen) -> str:
    return f"(turn {len(view.prompts)}; earlier prompts: {json.dumps(view.prompts[:-1])})"


def _words(text: str) -> Iterator[str]:
    """``text`` in chunks of a word and its following space (a streamed answer)."""
    yield from re.findall(r"\S+\s*|\s+", text)


def script(messages: list[ModelMessage], info: AgentInfo) -> tuple[list[Step], bool]:
    """The model's answer to ``messages``: its steps, and whether to stream them slowly."""
    view = seen(messages)
    prompt = view.prompts[-1] if view.prompts else ""
    turn = len(view.prompts)
    if view.retry is not None:
        return [Say(f"A tool call went wrong: {view.retry} {_signature(view)}")], False
    if (match := _STREAM.match(prompt)) is not None:
        return [Say(f"w{i} ") for i in range(int(match.group(1)))], match.group(2) is not None
    if "note" not in prompt.lower():
        return [Say(chunk) for chunk in _words(f"Hello! I keep notes for you. {_signature(view)}")], False
    found = _PATH.search(prompt)
    path = found.group(0) if found else DEFAULT_NOTE
    writes = _WRITE.search(prompt) is not None
    if "write_note" in view.results or ("read_note" in view.results and not writes):
        lines = [f"Done with {path}.", f"read_note: {view.results.get('read_note', '(not read)')}"]
        if "write_note" in view.results:
            lines.append(f"write_note: {view.results['write_note']}")
        counted = [v for k, v in view.results.items() if k.endswith("word_count")]
        if counted:
            lines.append(f"word_count (MCP): {counted[0]} words")
        lines.append(_signature(view))
        return [Say(chunk) for chunk in _words("\n".join(lines))], False
    if "read_note" in view.results:
        old = view.results["read_note"]
        quoted = _QUOTED.search(prompt)
        line = next(g for g in quoted.groups() if g) if quoted else f"noted in turn {turn}"
        text = (old if old.endswith("\n") or not old else old + "\n") if not old.startswith("(") else ""
        text += line + "\n"
        steps: list[Step] = [Call("write_note", {"path": path, "text": text}, f"t{turn}-write")]
        steps += [
            Call(tool.name, {"text": text}, f"t{turn}-count")
            for tool in info.function_tools
            if tool.name.endswith("word_count")
        ][:1]
        return steps, False
    plan = "read it first, then write it (that needs approval)" if writes else "read it"
    return [
        Think(f"The user wants a note in {path}: {plan}."),
        Call("read_note", {"path": path}, f"t{turn}-read"),
    ], False


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model's answer, not streamed (``FunctionModel``'s ``function``)."""
    steps, _ = script(messages, info)
    parts: list[ModelResponsePart] = []
    for step in steps:
        if isinstance(step, Think):
            parts.append(ThinkingPart(content=step.text))
        elif isinstance(step, Say):
            if parts and isinstance(parts[-1], TextPart):
                parts[-1] = TextPart(content=parts[-1].content + step.text)
            else:
                parts.append(TextPart(content=step.text))
        else:
            parts.append(ToolCallPart(tool_name=step.tool, args=step.args, tool_call_id=step.call_id))
    return ModelResponse(parts=parts, model_name="notes-script")


async def stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls | DeltaThinkingCalls]:
    """The model's answer, streamed (``FunctionModel``'s ``stream_function``): text a word at a time."""
    steps, slow = script(messages, info)
    for index, step in enumerate(steps):
        if slow and index:
            await asyncio.sleep(SLOW_CHUNK_SECONDS)
        if isinstance(step, Think):
            yield {index + 1: DeltaThinkingPart(content=step.text)}
        elif isinstance(step, Say):
            yield step.text
        else:
            yield {index + 1: DeltaToolCall(name=step.tool, json_args=json.dumps(step.args), tool_call_id=step.call_id)}


# -- the agent ----------------------------------------------------------------------------------------

agent: Agent[None, str] = Agent(
    FunctionModel(respond, stream_function=stream, model_name="notes-script"),
    name="notes",
    instructions="You keep the user's notes: read a note before you change it.",
)


@agent.tool_plain
async def read_note(path: str) -> str:
    """Read the note at ``path`` (a text file; relative paths from the working directory)."""
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        return f"(cannot read {path}: {exc.strerror or exc})"


@agent.tool_plain(requires_approval=True)
async def write_note(path: str, text: str) -> str:
    """Write ``text`` as the note at ``path``, creating the file (needs the user's approval)."""
    try:
        Path(path).expanduser().write_text(text, encoding="utf-8")
    except OSError as exc:
        return f"(cannot write {path}: {exc.strerror or exc})"
    return f"wrote {len(text)} characters to {path}"

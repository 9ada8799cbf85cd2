"""Scripted pydantic-ai agents for the pydantic-ai integration's tests (no network): the model is a
``FunctionModel`` whose stream answers by the last prompt's text.  Also served over stdio by
``python -m acp_trio.integrations.pydantic_ai test_pydantic_ai_agents:agent`` (run from tests/).

Scripts (the prompt's text): ``hello`` streams two text chunks; ``think`` a thought then text;
``tools`` calls ``read_file`` and ``add`` at once, then answers with their results; ``delete``
calls ``delete_file`` (needs approval), then answers with its result; ``mcp`` calls ``tools_add`` (of
an MCP server named ``tools``); ``offered`` lists the tools offered; ``read PATH`` / ``write PATH``
call the client's file tools, ``run COMMAND ARGS...`` its terminal; ``forever`` streams text until cancelled; ``history`` answers with the history it got (:func:`summary`); anything else is
echoed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, DeltaToolCall, FunctionModel

STREAMED: list[str] = []
"""Every text chunk the ``forever`` script produced."""
STOPPED: list[BaseException] = []
"""How each ``forever`` stream ended (the exception thrown into it: cancellation, generator exit)."""


def last_prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    last = messages[-1]
    if isinstance(last, ModelRequest):
        return [p for p in last.parts if isinstance(p, ToolReturnPart)]
    return []


def summary(messages: list[ModelMessage]) -> str:
    """The history as the model got it, one token per part: ``U:text`` (user prompt), ``T:text``
    (text), ``C:name`` (tool call), ``R:name=content`` (tool return), ``?:kind`` (anything else)."""
    out: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                out.append(f"U:{part.content}")
            elif isinstance(part, TextPart):
                out.append(f"T:{part.content}")
            elif isinstance(part, ToolCallPart):
                out.append(f"C:{part.tool_name}{part.args_as_dict()}")
            elif isinstance(part, ToolReturnPart):
                out.append(f"R:{part.tool_name}={part.content}/{part.outcome}")
            elif not isinstance(part, SystemPromptPart):
                out.append(f"?:{part.part_kind}")
    return " | ".join(out)


async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    prompt = last_prompt(messages)
    done = returns(messages)
    if done:
        yield "results: " + "; ".join(f"{p.tool_name}={p.content}" for p in done)
        return
    if prompt == "hello":
        yield "Hello"
        yield ", world"
    elif prompt == "think":
        yield {0: DeltaThinkingPart(content="pondering")}
        yield {1: DeltaThinkingPart(content=" more")}
    elif prompt == "tools":
        yield {0: DeltaToolCall(name="read_file", json_args='{"path": "/work/a.txt"}', tool_call_id="c1")}
        yield {1: DeltaToolCall(name="add", json_args='{"a": 2, "b": 3}', tool_call_id="c2")}
    elif prompt == "delete":
        yield {0: DeltaToolCall(name="delete_file", json_args='{"path": "/work/old.txt"}', tool_call_id="d1")}
    elif prompt == "mcp":
        yield {0: DeltaToolCall(name="tools_add", json_args='{"a": 20, "b": 22}', tool_call_id="m1")}
    elif prompt == "offered":
        yield " ".join(sorted(t.name for t in info.function_tools))
    elif prompt.startswith("write "):
        path = prompt.removeprefix("write ")
        yield {
            0: DeltaToolCall(
                name="acp_write_text_file", json_args=json.dumps({"path": path, "content": "new\n"}), tool_call_id="w1"
            )
        }
    elif prompt.startswith("run "):
        argv = prompt.removeprefix("run ").split()
        args = json.dumps({"command": argv[0], "args": argv[1:]})
        yield {0: DeltaToolCall(name="acp_run_command", json_args=args, tool_call_id="x1")}
    elif prompt.startswith("read "):
        path = prompt.removeprefix("read ")
        yield {0: DeltaToolCall(name="acp_read_text_file", json_args=json.dumps({"path": path}), tool_call_id="r1")}
    elif prompt == "forever":
        try:
            while True:
                STREAMED.append("tick")
                yield "tick "
                await asyncio.sleep(0.001)
        except BaseException as exc:
            STOPPED.append(exc)
            raise
    elif prompt == "history":
        yield summary(messages).removesuffix(" | U:history")
    else:
        yield f"echo: {prompt}"


def make_agent() -> Agent[None, str]:
    """A new agent (tools: ``read_file``, ``add``; ``delete_file`` needs approval)."""
    made: Agent[None, str] = Agent(FunctionModel(stream_function=stream), name="test-pydantic-ai")

    @made.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    @made.tool_plain(metadata={"acp_kind": "think"})
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @made.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    return made


agent = make_agent()


def served() -> Any:
    """The agent as ``PydanticAIAgent`` with two models to choose from (the same script), for
    ``python -m acp_trio.check``'s config option check."""
    from acp_trio.integrations.pydantic_ai import PydanticAIAgent

    models = {"scripted": FunctionModel(stream_function=stream), "also-scripted": FunctionModel(stream_function=stream)}
    return PydanticAIAgent(make_agent(), models=models)

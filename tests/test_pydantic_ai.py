"""The pydantic-ai integration (``acp_trio.integrations.pydantic_ai``, issue 34): real pydantic-ai
agents on scripted ``FunctionModel`` s (``test_pydantic_ai_agents``), served in memory to clients of
both protocol versions through the neutral layer, inside trio-asyncio's loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import pytest
from _neutral_kit import Client, Wire, connected
from test_pydantic_ai_agents import make_agent

from acp_schema import v1, v2
from acp_trio.integrations.pydantic_ai import PydanticAIAgent, open_loop, tool_kind

BOTH = pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])


@asynccontextmanager
async def served(agent: PydanticAIAgent, client: Client, **caps: bool) -> AsyncIterator[Wire]:
    async with open_loop(), connected(agent, client, **caps) as wire:
        yield wire


def texts(wire: Wire, kind: str = "agent_message_chunk") -> str:
    return "".join(u["content"]["text"] for u in wire.updates() if u.get("sessionUpdate") == kind)


def tool_updates(wire: Wire) -> list[dict[str, Any]]:
    return [u for u in wire.updates() if u.get("sessionUpdate") in ("tool_call", "tool_call_update")]


@BOTH
async def test_text_streams_as_agent_message_chunks(variant: ModuleType) -> None:
    async with served(PydanticAIAgent(make_agent()), Client(variant)) as wire:
        session = await wire.new_session()
        wire.clear()
        answer = await wire.prompt(session, "hello")
        chunks = [u["content"]["text"] for u in wire.updates() if u.get("sessionUpdate") == "agent_message_chunk"]
        assert chunks == ["Hello", ", world"]
        if variant is v1:
            assert answer.stop_reason == "end_turn"
            usage = answer.meta["acp-trio/usage"]
        else:
            idle = next(u for u in wire.updates() if u.get("state") == "idle")
            assert idle["stopReason"] == "end_turn"
            usage = idle["_meta"]["acp-trio/usage"]
        assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
        assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]


@BOTH
async def test_thinking_streams_as_thought_chunks(variant: ModuleType) -> None:
    async with served(PydanticAIAgent(make_agent()), Client(variant)) as wire:
        session = await wire.new_session()
        wire.clear()
        await wire.prompt(session, "think")
        assert texts(wire, "agent_thought_chunk") == "pondering more"


@BOTH
async def test_tool_calls_are_acp_tool_calls_with_raw_input_and_output(variant: ModuleType) -> None:
    async with served(PydanticAIAgent(make_agent()), Client(variant)) as wire:
        session = await wire.new_session()
        wire.clear()
        await wire.prompt(session, "tools")
        updates = tool_updates(wire)
        first = {u["toolCallId"]: u for u in reversed(updates)}
        last = {u["toolCallId"]: u for u in updates}
        assert set(first) == {"c1", "c2"}
        assert first["c1"]["title"] == "read_file" and first["c1"]["kind"] == "read"
        assert first["c1"]["rawInput"] == {"path": "/work/a.txt"}
        assert first["c1"]["locations"] == [{"path": "/work/a.txt"}]
        assert first["c2"]["kind"] == "other" and first["c2"]["rawInput"] == {"a": 2, "b": 3}
        assert last["c1"]["status"] == "completed"
        assert last["c1"]["rawOutput"] == {
            "tool": "read_file",
            "outcome": "success",
            "content": "contents of /work/a.txt",
        }
        assert last["c2"]["rawOutput"]["content"] == 5
        assert last["c2"]["content"] == [{"type": "content", "content": {"type": "text", "text": "5"}}]
        if variant is v1:
            assert [u["sessionUpdate"] for u in updates][:2] == ["tool_call", "tool_call"]
        assert texts(wire) == "results: read_file=contents of /work/a.txt; add=5"


def test_tool_kind_guesses_from_the_name() -> None:
    assert [tool_kind(n) for n in ("read_file", "writeFile", "run_tests", "web-fetch", "add", "grep")] == [
        "read",
        "edit",
        "execute",
        "fetch",
        "other",
        "search",
    ]

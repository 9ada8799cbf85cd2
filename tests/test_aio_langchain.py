"""LangChain inside an acp-trio agent through :mod:`acp_trio.aio` (issue 34: asyncio frameworks
inside acp-trio).  langchain-core's async API runs on asyncio only: under bare trio its ``astream``
fails with ``RuntimeError: no running event loop``; inside ``aio.open_loop()`` a turn streams a
LangChain chat model's chunks with ``aio.iterate``, in both protocol versions, and
``session/cancel`` cancels the LangChain stream (its generator sees ``CancelledError``) before the
turn ends ``cancelled``.  Real langchain-core (its fake chat model and ``RunnableGenerator``), no
network."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from acp_trio import aio, neutral
from acp_trio.testing import FakeClient, pair

pytest.importorskip("langchain_core")
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable, RunnableGenerator

DEADLINE = 10  # seconds; each of these takes milliseconds
ANSWER = "hello from a LangChain model"


def chat_model() -> GenericFakeChatModel:
    """langchain-core's fake chat model: it streams ``ANSWER`` word by word (and the spaces)."""
    return GenericFakeChatModel(messages=iter([AIMessage(content=ANSWER)]))


class LangChainAgent(neutral.Agent):
    """A turn streams what a LangChain runnable yields for the prompt's text (its ``astream``)."""

    info = neutral.AgentInfo(name="langchain-agent", version="1")

    def __init__(self, runnable: Runnable[Any, Any]) -> None:
        super().__init__()
        self.runnable = runnable

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        async with aio.iterate(self.runnable.astream(turn.text)) as chunks:
            async for chunk in chunks:
                await turn.say(getattr(chunk, "content", chunk))
        return "end_turn"


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")  # LangChain's, failing
async def test_bare_trio_cannot_run_langchain_so_aio_is_needed() -> None:
    stream = chat_model().astream("hi")
    with pytest.raises(RuntimeError, match="no running event loop"):
        await stream.__anext__()


@pytest.mark.parametrize("protocol", [1, 2])
async def test_a_turn_streams_a_langchain_chat_model(protocol: int) -> None:
    client = FakeClient()
    with trio.fail_after(DEADLINE):
        async with aio.open_loop(), pair(LangChainAgent(chat_model()), client, protocol=protocol):
            session_id = await client.new_session("/work")
            stop_reason = await client.prompt(session_id, "say hello")
    assert stop_reason == "end_turn"
    assert client.states[session_id].messages[-1].text == ANSWER
    chunks = [u for _, u in client.updates if u.session_update == "agent_message_chunk"]
    assert len(chunks) == len(ANSWER.split(" ")) * 2 - 1  # streamed: a chunk per word and per space


class FirstChunk(FakeClient):
    """The test kit's client, with an event set at the first agent message chunk."""

    def __init__(self) -> None:
        super().__init__()
        self.chunk = trio.Event()

    async def session_update(self, params: Any) -> None:
        await super().session_update(params)
        if params.update.session_update == "agent_message_chunk":
            self.chunk.set()


@pytest.mark.parametrize("protocol", [1, 2])
async def test_session_cancel_cancels_the_langchain_stream_before_the_turn_ends(protocol: int) -> None:
    events: list[str] = []

    async def stalls(inputs: AsyncIterator[str]) -> AsyncIterator[str]:  # a chunk, then a model that hangs
        try:
            async for text in inputs:
                yield f"thinking about {text}"
            await asyncio.Event().wait()
            yield "never"
        except asyncio.CancelledError:
            events.append("LangChain's stream saw CancelledError")
            raise
        finally:
            events.append("LangChain's stream's finally ran")

    client = FirstChunk()
    with trio.fail_after(DEADLINE):
        async with aio.open_loop(), pair(LangChainAgent(RunnableGenerator(stalls)), client, protocol=protocol):
            session_id = await client.new_session("/work")
            async with trio.open_nursery() as nursery:

                async def cancel_after_the_first_chunk() -> None:
                    await client.chunk.wait()
                    await client.cancel(session_id)

                nursery.start_soon(cancel_after_the_first_chunk)
                stop_reason = await client.prompt(session_id, "the plan")
                events.append(f"the client got {stop_reason}")
    assert events == [
        "LangChain's stream saw CancelledError",
        "LangChain's stream's finally ran",
        "the client got cancelled",
    ]
    assert client.states[session_id].messages[-1].text == "thinking about the plan"

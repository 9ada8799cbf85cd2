"""A connection that closes while its peer still sends (issue 35: the session host's clients leave mid-turn).

A read can complete as the connection closes: the transport had the data before the cancellation
reached the reader (trio's memory streams hand it over in ``send_all``).  The connection's
nurseries take no more tasks by then, and what that read holds (a streamed ``session/update``, a
request, a batch) is dropped, not handled: before, starting its handler raised
``RuntimeError: Nursery is closed to new arrivals`` out of ``async with conn``.

``Gate`` makes that moment exact: its read in progress is finished by the test, shielded from the
connection's cancellation, after the connection's nurseries closed.  The last test is the case as
it came up: a client leaving ``open_memory_pair`` while the agent streams (a race; it failed in
about one try in ten).
"""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
import trio
import trio.testing
from _host_kit import Control, Recorder, agents, init1, init2, text

import acp_trio
from acp_schema import v1, v2

VARIANTS = [pytest.param(v1, id="v1"), pytest.param(v2, id="v2")]


class Gate(trio.abc.ReceiveStream):
    """A receive stream the test feeds; a read in progress ends only with data (never cancelled),
    and one started after ``aclose`` raises ``trio.ClosedResourceError``."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[bytes](math.inf)
        self.closed = False

    def feed(self, *messages: Any) -> None:
        self._send.send_nowait(b"".join(orjson.dumps(m) + b"\n" for m in messages))

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.closed:
            raise trio.ClosedResourceError("the gate was closed")
        with trio.CancelScope(shield=True):
            return await self._receive.receive()

    async def aclose(self) -> None:
        self.closed = True
        await trio.lowlevel.checkpoint()


def update(variant: Any, session_id: str, words: str) -> dict[str, Any]:
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": words}}
    if variant is v2:
        chunk["messageId"] = "m"
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": chunk}}


def permission(variant: Any, request_id: int) -> dict[str, Any]:
    options = [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]
    params: dict[str, Any] = {"sessionId": "s1", "options": options}
    if variant is v2:
        params["title"] = "Go on?"
        params["subject"] = {"type": "tool_call", "toolCall": {"toolCallId": "c1"}}
    else:
        params["toolCall"] = {"toolCallId": "c1"}
    return {"jsonrpc": "2.0", "id": request_id, "method": "session/request_permission", "params": params}


async def close_then_feed(
    conn: acp_trio.ClientSideConnection | acp_trio.AgentSideConnection, gate: Gate, late: Any
) -> None:
    """Once the connection closed and everything waits (its nurseries closed, the reader in the
    gate's read), finish that read with ``late``."""
    await conn.connection.wait_closed()
    await trio.testing.wait_all_tasks_blocked()
    gate.feed(*late)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("late", ["update, same session", "update, other session", "request", "batch"])
async def test_client_drops_what_it_reads_as_it_closes(variant: Any, late: str, autojump_clock: Any) -> None:
    """A client connection whose read completes after it closed drops what it read: no
    ``RuntimeError`` out of ``async with``, and no handler runs."""
    gate = Gate()
    rec = Recorder(answer=None)  # a permission request would wait: its handler needs a task
    messages = {
        "update, same session": [update(variant, "s1", "late")],
        "update, other session": [update(variant, "s2", "late")],
        "request": [permission(variant, 7)],
        "batch": [[permission(variant, 8), permission(variant, 9)]],
    }[late]
    conn = acp_trio.ClientSideConnection(rec, trio.testing.MemorySendStream(), gate, variant=variant)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(close_then_feed, conn, gate, messages)
            async with conn:
                gate.feed(update(variant, "s1", "first"))  # the notification nursery is open
                await rec.until(lambda: len(rec.updates) == 1)
    assert [u.content.text for u in rec.updates] == ["first"]
    assert rec.asked == []


class Agent:
    """Records the prompts and cancels it is sent; a prompt waits forever."""

    def __init__(self, variant: Any) -> None:
        self.variant = variant
        self.seen: list[str] = []

    async def session_new(self, params: Any) -> Any:
        return self.variant.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params: Any) -> Any:
        self.seen.append("prompt")
        await trio.sleep_forever()

    async def session_cancel(self, params: Any) -> None:
        self.seen.append("cancel")


@pytest.mark.parametrize("variant", VARIANTS)
async def test_agent_drops_what_it_reads_as_it_closes(variant: Any, autojump_clock: Any) -> None:
    """The agent's side: a ``session/prompt`` (its handler waits) and a ``session/cancel`` read after
    the connection closed are dropped: the agent sees neither."""
    gate = Gate()
    out = trio.testing.MemorySendStream()
    agent = Agent(variant)
    conn = acp_trio.AgentSideConnection(agent, out, gate, variant=variant)
    init: dict[str, Any] = {"protocolVersion": variant.PROTOCOL_VERSION}
    if variant is v2:
        init["info"] = {"name": "t", "version": "0"}
    new: dict[str, Any] = {"cwd": "/tmp"}
    if variant is v1:
        new["mcpServers"] = []
    prompt = {"sessionId": "s1", "prompt": [{"type": "text", "text": "hello"}]}
    late = [
        {"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt},
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}},
    ]
    written = bytearray()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(close_then_feed, conn, gate, late)
            async with conn:
                gate.feed(
                    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
                    {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": new},
                )
                while b'"id":2' not in written:
                    written += await out.get_data()
    assert agent.seen == []


async def leave_while_streaming(variant: Any) -> int:
    """Leave ``open_memory_pair`` (the client's side) once 100 updates of a 10,000-update turn came; the count got."""
    rec = Recorder()
    async with acp_trio.open_memory_pair(agents(Control()), {variant: rec}) as (_, conn):
        await (init2(conn) if variant is v2 else init1(conn))
        sid = (await conn.agent.session_new(variant.NewSessionRequest(cwd="/tmp", mcp_servers=[]))).session_id
        async with trio.open_nursery() as nursery:
            prompt = variant.PromptRequest(session_id=sid, prompt=text("count 10000", variant))
            nursery.start_soon(conn.agent.session_prompt, prompt)
            await rec.until(lambda: len(rec.updates) > 100)
            nursery.cancel_scope.cancel()
    return len(rec.updates)


@pytest.mark.parametrize("variant", VARIANTS)
async def test_client_leaves_a_memory_pair_while_updates_stream(variant: Any) -> None:
    """The case as it came up: the client leaves ``open_memory_pair`` while the agent streams a
    turn's updates.  A race (the read must complete in the same scheduler pass as the close): 10
    tries per version; each leaves with no error out of ``async with``."""
    for _ in range(10):
        with trio.fail_after(10):
            assert await leave_while_streaming(variant) > 100


class Stalled(trio.abc.SendStream):
    """A peer that never reads: a send waits until cancelled."""

    async def send_all(self, data: Any) -> None:
        await trio.sleep_forever()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.sleep_forever()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def test_a_wait_for_the_writer_begun_after_the_close_returns(autojump_clock: Any) -> None:
    """A sender that queued past the high-water mark before the connection closed, and waits for
    the writer after (a v2 turn's last ``state_update``, sent shielded as the connection closes),
    gets ``ConnectionClosed`` at once: it waited forever (the writer that would wake it had ended),
    and so did the ``async with`` holding its task."""
    from acp_trio._connection import Connection

    conn = Connection(Stalled(), trio.testing.MemoryReceiveStream(), close_timeout=1.0)
    with trio.fail_after(10):
        async with conn:
            conn.queue_notification("x", {"pad": "." * 100_000})  # the writer takes it, and blocks
            await trio.sleep(0.1)
            assert conn.queue_notification("x", {"pad": "." * 100_000})  # past the high-water mark
            await conn.aclose()
            with pytest.raises(acp_trio.ConnectionClosed):
                await conn.wait_writable()

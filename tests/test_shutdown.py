"""End of input and exceptions out of the context managers, in memory (issue 11, items 1 and 2).

- When a connection's input ends, running handlers and background tasks get ``eof_grace``
  seconds, then are cancelled; a v1 prompt turn answers stop reason ``cancelled``, a v2 turn
  reports ``idle``/``cancelled``, a client's permission request answers the ``cancelled`` outcome;
  then the connection closes.  Virtual time (autojump clock): the figures are exact.
- An exception raised in the body of ``open_memory_pair`` or a connection's ``async with`` comes
  out as itself, not inside an ``ExceptionGroup``; an internal task failure stays grouped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio
import trio.testing
from trio.testing import MockClock

import acp_trio
from acp_schema import v1, v2
from acp_trio._connection import DEFAULT_EOF_GRACE
from acp_trio._nursery import owned_nursery


class Lines:
    """Every line each side wrote, parsed."""

    def __init__(self) -> None:
        self.by: dict[str, list[Any]] = {"agent": [], "client": []}
        self.changed = trio.Event()

    def tap(self, side: str) -> acp_trio.Tap:
        def tap(direction: str, line: bytes) -> None:
            if direction == "out":
                self.by[side].append(orjson.loads(line))
                self.changed.set()
                self.changed = trio.Event()

        return tap

    async def wait_for(self, side: str, pred: Any) -> Any:
        while True:
            for message in self.by[side]:
                if pred(message):
                    return message
            await self.changed.wait()


@asynccontextmanager
async def pair(
    agent: Any, client: Any, **options: Any
) -> AsyncIterator[tuple[acp_trio.AgentSideConnection, acp_trio.ClientSideConnection, Any, Any, Lines]]:
    """Connections over two one-way memory streams, so each direction can end on its own.

    Yields ``(agent_conn, client_conn, to_agent, to_client, lines)``: closing ``to_agent`` (the
    client's output) ends the agent's input, closing ``to_client`` ends the client's input.
    """
    lines = Lines()
    to_agent_send, to_agent_receive = trio.testing.memory_stream_one_way_pair()
    to_client_send, to_client_receive = trio.testing.memory_stream_one_way_pair()
    agent_conn = acp_trio.AgentSideConnection(
        agent, to_client_send, to_agent_receive, tap=lines.tap("agent"), **options
    )
    client_conn = acp_trio.ClientSideConnection(
        client, to_agent_send, to_client_receive, tap=lines.tap("client"), **options
    )
    async with agent_conn, client_conn:
        yield agent_conn, client_conn, to_agent_send, to_client_send, lines


class StreamingAgent:
    """v1: a prompt turn that streams a chunk every 10 ms for 15 s."""

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.turn_cancelled = False

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        try:
            for n in range(1500):
                update = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=f"{n}"))
                await self.conn.client.session_update(v1.SessionNotification(session_id="s1", update=update))
                await trio.sleep(0.01)
        except trio.Cancelled:
            self.turn_cancelled = True
            raise
        return v1.PromptResponse(stop_reason="end_turn")


class Quiet:
    async def session_update(self, params: Any) -> None:
        pass


def is_answer(request_id: Any) -> Any:
    return lambda m: m.get("id") == request_id and "method" not in m


async def test_v1_a_turn_running_when_the_input_ends_answers_cancelled_after_the_grace(
    autojump_clock: MockClock,
) -> None:
    with trio.fail_after(30):
        async with pair(StreamingAgent, Quiet(), eof_grace=0.25) as (agent_conn, client_conn, to_agent, _tc, lines):
            await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
            await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
            await client_conn.connection._send_stream.send_all(  # the prompt as a raw request line
                b'{"jsonrpc":"2.0","id":"p","method":"session/prompt","params":{"sessionId":"s1","prompt":[]}}\n'
            )
            await trio.sleep(1)  # the turn streams
            await to_agent.aclose()  # the client's output ends: the agent's input ends
            ended = trio.current_time()
            answer = await lines.wait_for("agent", is_answer("p"))
            assert trio.current_time() - ended == pytest.approx(0.25)
            await agent_conn.wait_closed()
    assert answer["result"] == {"stopReason": "cancelled"}
    assert agent_conn.handler.turn_cancelled


class V2Agent:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        async def turn() -> str:
            await trio.sleep(15)
            return "end_turn"

        self.conn.start_turn(params.session_id, turn)
        return v2.PromptResponse(message_id="m1")


async def test_v2_a_turn_running_when_the_input_ends_reports_idle_cancelled(autojump_clock: MockClock) -> None:
    with trio.fail_after(30):
        async with pair({v2: V2Agent}, {v2: Quiet()}) as (agent_conn, client_conn, to_agent, _tc, lines):
            await client_conn.initialize(
                v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="t", version="0"))
            )
            await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/"))
            await client_conn.agent.session_prompt(v2.PromptRequest(session_id="s1", prompt=[]))
            await to_agent.aclose()
            idle = await lines.wait_for(
                "agent", lambda m: m.get("method") == "session/update" and m["params"]["update"].get("state") == "idle"
            )
            await agent_conn.wait_closed()
    assert idle["params"]["update"] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}


class PermissionAgent:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s1")


class WaitingClient:
    """A client whose permission handler waits for a user who never answers."""

    def __init__(self) -> None:
        self.asked = trio.Event()

    async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        self.asked.set()
        await trio.sleep_forever()
        raise AssertionError("not reached")


async def test_a_client_whose_agent_output_ends_cancels_its_handlers_and_closes(autojump_clock: MockClock) -> None:
    client = WaitingClient()
    with trio.fail_after(30):
        async with pair(PermissionAgent, client) as (agent_conn, client_conn, _ta, to_client, lines):
            await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
            await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
            await agent_conn.connection._send_stream.send_all(
                b'{"jsonrpc":"2.0","id":9,"method":"session/request_permission","params":{"sessionId":"s1",'
                b'"toolCall":{"toolCallId":"t1"},"options":[]}}\n'
            )
            await client.asked.wait()
            await to_client.aclose()  # the agent's output ends: the client's input ends
            ended = trio.current_time()
            answer = await lines.wait_for("client", is_answer(9))
            assert trio.current_time() - ended == pytest.approx(DEFAULT_EOF_GRACE)
            await client_conn.wait_closed()
    assert answer["result"] == {"outcome": {"outcome": "cancelled"}}


# -- exceptions out of the context managers ------------------------------------------------------


async def test_an_exception_in_the_body_of_open_memory_pair_comes_out_as_itself() -> None:
    with pytest.raises(acp_trio.ConnectionClosed) as info:
        async with acp_trio.open_memory_pair(PermissionAgent, Quiet()) as (_agent_conn, client_conn):
            await client_conn.aclose()
            await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
    assert type(info.value) is acp_trio.ConnectionClosed  # not an ExceptionGroup around it

    class Boom(Exception):
        pass

    try:
        async with acp_trio.open_memory_pair(PermissionAgent, Quiet()):
            raise Boom("from the body") from KeyError("its own cause")
    except Boom as exc:
        assert isinstance(exc.__cause__, KeyError)  # the cause is kept
    else:
        raise AssertionError("Boom should have come out")


async def test_a_connection_body_exception_comes_out_as_itself() -> None:
    left, _right = trio.testing.memory_stream_pair()
    with pytest.raises(ValueError, match="mine"):
        async with acp_trio.Connection(left, left):
            raise ValueError("mine")


async def test_an_internal_task_failure_stays_grouped_beside_the_body_exception() -> None:
    async def fails(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        raise RuntimeError("internal")

    with pytest.RaisesGroup(RuntimeError, ValueError, flatten_subgroups=True):
        async with owned_nursery() as nursery:
            await nursery.start(fails)
            raise ValueError("body")

    with pytest.RaisesGroup(RuntimeError):
        async with owned_nursery() as nursery:
            await nursery.start(fails)

"""Many requests in flight from one task: ``Connection.request_many`` and the typed
``send_requests`` of both sides (results in order, the limit, errors, timeouts, cancellation,
capabilities, ordering against notifications)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from test_connection import RawPeer, connected
from trio.testing import MockClock

from acp_schema import v1
from acp_trio import (
    CapabilityError,
    ConnectionClosed,
    RequestError,
    RequestTimeout,
    open_memory_pair,
)

READ = "fs/read_text_file"


async def answer(peer: RawPeer, count: int, reply: Any = None, *, seen: list[Any] | None = None) -> list[Any]:
    """Answer ``count`` requests as they come (``reply(msg)`` -> result; default: the params back);
    return the requests in arrival order."""
    got: list[Any] = []
    while len(got) < count:
        msg = await peer.recv()
        if "id" not in msg:
            continue
        got.append(msg)
        if seen is not None:
            seen.append(msg)
        result = reply(msg) if reply is not None else msg["params"]
        await peer.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
    return got


async def test_results_come_in_the_order_of_the_params_with_at_most_limit_in_flight(autojump_clock: MockClock) -> None:
    async with connected() as (conn, peer):
        in_flight: list[int] = []
        answered: list[Any] = []

        async def reverse_answerer() -> None:
            # take every request the connection sends, and answer the outstanding ones newest first
            waiting: list[Any] = []
            while len(answered) < 10:
                with trio.move_on_after(1):
                    while True:
                        msg = await peer.recv()
                        waiting.append(msg)
                in_flight.append(len(waiting))
                for msg in reversed(waiting):
                    answered.append(msg["params"]["i"])
                    await peer.send({"jsonrpc": "2.0", "id": msg["id"], "result": {"i2": msg["params"]["i"] * 2}})
                waiting.clear()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reverse_answerer)
            results = await conn.request_many("test/double", [{"i": i} for i in range(10)], limit=3)
        assert results == [{"i2": i * 2} for i in range(10)]
        assert max(in_flight) == 3  # never more than the limit unanswered
        assert sorted(answered) == list(range(10)) and answered != list(range(10))  # answered out of order


async def test_no_params_is_no_request(autojump_clock: MockClock) -> None:
    async with connected() as (conn, peer):
        assert await conn.request_many("test/x", []) == []
        await peer.ping()  # nothing was sent before the ping's answer
        with pytest.raises(ValueError, match="limit"):
            await conn.request_many("test/x", [{}], limit=0)


async def test_an_error_response_cancels_the_rest_and_raises_it(autojump_clock: MockClock) -> None:
    async with connected() as (conn, peer):

        async def fail_the_second() -> None:
            first = [await peer.recv() for _ in range(4)]  # limit 4: four requests, then it waits
            await peer.send({"jsonrpc": "2.0", "id": first[1]["id"], "error": {"code": -32002, "message": "not found"}})
            cancels = [await peer.recv() for _ in range(3)]
            assert sorted(c["params"]["requestId"] for c in cancels) == sorted(
                m["id"] for m in first if m is not first[1]
            )
            assert all(c["method"] == "$/cancel_request" for c in cancels)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fail_the_second)
            with pytest.raises(RequestError) as info:
                await conn.request_many("test/x", [{"i": i} for i in range(20)], limit=4)
        assert info.value.code == -32002
        await peer.ping()  # and nothing more was sent: no fifth request


async def test_a_timeout_cancels_what_is_in_flight_and_raises_request_timeout(autojump_clock: MockClock) -> None:
    async with connected() as (conn, peer):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer, peer, 2)  # answers two, then the rest hang
            with pytest.raises(RequestTimeout) as info:
                await conn.request_many("test/slow", [{"i": i} for i in range(5)], limit=3, timeout=10)
        assert info.value.timeout == 10 and info.value.method == "test/slow"
        unanswered, cancelled = [], []
        while len(cancelled) < 3:
            msg = await peer.recv()
            if msg["method"] == "$/cancel_request":
                cancelled.append(msg["params"]["requestId"])
            else:
                unanswered.append(msg["id"])
        assert sorted(cancelled) == sorted(unanswered) and len(unanswered) == 3  # the last three, in flight
        assert info.value.request_id == min(cancelled)
        await peer.ping()


async def test_cancelling_the_caller_cancels_every_request_in_flight(autojump_clock: MockClock) -> None:
    async with connected() as (conn, peer):
        scope = trio.CancelScope()
        sent: list[Any] = []

        async def call() -> None:
            with scope:
                await conn.request_many("test/slow", [{"i": i} for i in range(5)])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            sent = [await peer.recv() for _ in range(5)]
            scope.cancel()
        assert scope.cancelled_caught
        cancels = [await peer.recv() for _ in range(5)]
        assert sorted(c["params"]["requestId"] for c in cancels) == sorted(m["id"] for m in sent)
        await peer.send({"jsonrpc": "2.0", "id": sent[0]["id"], "result": "too late"})  # dropped
        await peer.ping()


async def test_the_connection_closing_fails_the_call(autojump_clock: MockClock) -> None:
    async with connected() as (conn, peer):
        async with trio.open_nursery() as nursery:

            async def close_after_one() -> None:
                await answer(peer, 1)
                await peer.recv()
                await peer.send_stream.aclose()

            nursery.start_soon(close_after_one)
            with pytest.raises(ConnectionClosed):
                await conn.request_many("test/x", [{"i": i} for i in range(3)], limit=2)


async def test_notifications_read_before_the_last_response_are_handled_first(autojump_clock: MockClock) -> None:
    """As for one request: the call returns after the updates that preceded the responses on the wire."""
    handled: list[int] = []

    async def slow_update(params: Any) -> None:
        await trio.sleep(1)
        handled.append(params["n"])

    from acp_trio import Route

    route = Route("test/update", "notification", slow_update, serial_key=lambda p: "s")
    async with connected(route) as (conn, peer):

        async def respond() -> None:
            msgs = [await peer.recv() for _ in range(2)]
            await peer.notify("test/update", {"n": 1})
            await peer.send(*({"jsonrpc": "2.0", "id": m["id"], "result": m["params"]} for m in msgs))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(respond)
            assert await conn.request_many("test/x", [{"i": 0}, {"i": 1}]) == [{"i": 0}, {"i": 1}]
            assert handled == [1]


# -- typed: send_requests ----------------------------------------------------------------------------


class ReadingClient:
    def __init__(self, conn: Any) -> None:
        self.reads: list[str] = []

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        self.reads.append(params.path)
        await trio.sleep(0.01 * (len(params.path) % 3))  # answers out of order
        return v1.ReadTextFileResponse(content=f"contents of {params.path}")


class QuietAgent:
    def __init__(self, conn: Any) -> None:
        pass


@asynccontextmanager
async def pair(read: bool = True) -> AsyncIterator[tuple[Any, Any]]:
    async with open_memory_pair(QuietAgent, ReadingClient) as (agent_conn, client_conn):
        caps = v1.ClientCapabilities(fs=v1.FileSystemCapabilities(read_text_file=read))
        await v1.AgentPeer(client_conn).initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=caps))
        yield agent_conn, client_conn


async def test_send_requests_sends_typed_requests_and_returns_typed_results_in_order(autojump_clock: MockClock) -> None:
    async with pair() as (agent_conn, client_conn):
        paths = [f"/src/{'x' * (i % 5)}{i}.py" for i in range(40)]
        requests = [v1.ReadTextFileRequest(session_id="s", path=p) for p in paths]
        by_spec = await agent_conn.send_requests(v1.REQUESTS[READ], requests, limit=8)
        by_name = await agent_conn.send_requests(READ, requests[:3])
    assert [r.content for r in by_spec] == [f"contents of {p}" for p in paths]
    assert all(isinstance(r, v1.ReadTextFileResponse) for r in by_spec + by_name)
    assert [r.content for r in by_name] == [f"contents of {p}" for p in paths[:3]]
    assert sorted(client_conn.handler.reads) == sorted(paths + paths[:3])


async def test_send_requests_checks_every_capability_before_sending_anything(autojump_clock: MockClock) -> None:
    async with pair(read=False) as (agent_conn, client_conn):
        with pytest.raises(CapabilityError):
            await agent_conn.send_requests(READ, [v1.ReadTextFileRequest(session_id="s", path="/a")])
        await trio.testing.wait_all_tasks_blocked()
        assert client_conn.handler.reads == []


async def test_send_requests_refuses_what_it_cannot_fan_out(autojump_clock: MockClock) -> None:
    async with pair() as (agent_conn, client_conn):
        with pytest.raises(ValueError, match="not a request this side sends"):
            await agent_conn.send_requests("session/prompt", [])  # the client sends it, not the agent
        with pytest.raises(ValueError, match="not a request this side sends"):
            await agent_conn.send_requests("no/such", [])
        with pytest.raises(ValueError, match="one at a time"):
            await client_conn.send_requests("session/new", [v1.NewSessionRequest(cwd="/", mcp_servers=[])])

"""Backpressure in bytes (issue 32, defect 1): a peer that sends requests and never reads the
answers cannot grow this side's memory.

A connection stops reading its input while more than ``max_output_bytes`` of output wait for the
transport (:data:`acp_trio._connection.DEFAULT_MAX_OUTPUT_BYTES`); the peer's writes then wait in
turn.  Over a WebSocket, a client that still takes nothing for ``output_stall_timeout`` seconds is
closed with ``1008``.  Checked three ways: a :class:`Connection` over a stream that takes nothing,
the remote demo server (a real process, its peak RSS read from ``/proc``) flooded by a client that
never reads while another client is served, and the stall close under trio's autojump clock.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio
import trio.testing

from acp_schema import v1
from acp_trio import Connection, Route
from acp_trio._core import LineFramer

pytestmark = pytest.mark.trio

BIG_NAME = "x" * 60_000  # an unknown method's name: its -32601 answer echoes it (about 60 KB)


def _unknown_request(request_id: int) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": BIG_NAME}) + b"\n"


async def test_a_connection_stops_reading_while_its_unsent_output_is_over_the_limit() -> None:
    """The peer writes 200 requests whose answers are 60 KB each (12 MB) and reads nothing: the
    connection reads until about ``max_output_bytes`` wait, then no more (the peer's writes
    block); once the peer reads, every request is answered, in order, none dropped."""
    to_conn_send, to_conn_receive = trio.testing.lockstep_stream_pair()
    from_conn_send, from_conn_receive = trio.testing.lockstep_stream_pair()
    limit = 256 * 1024
    conn = Connection(from_conn_send, to_conn_receive, {}, max_output_bytes=limit)
    total = 200
    sent = 0

    async def flood() -> None:
        nonlocal sent
        for request_id in range(total):
            await to_conn_send.send_all(_unknown_request(request_id))
            sent += 1

    async with conn, trio.open_nursery() as nursery:
        nursery.start_soon(flood)
        await trio.testing.wait_all_tasks_blocked()  # the flood waits for the connection to read, which waits for us
        queued = len(conn._outbox)
        assert sent < total, "the connection read everything although nobody took its answers"
        assert queued <= limit + 2 * len(_unknown_request(0)) + 1024, queued
        # the peer reads now: everything is answered, in order
        framer = LineFramer()
        answered: list[Any] = []
        with trio.fail_after(60):
            while len(answered) < total:
                data = await from_conn_receive.receive_some(1 << 16)
                answered += [orjson.loads(line) for line in framer.feed(data) if isinstance(line, bytes)]
        assert sent == total
        assert [message["id"] for message in answered] == list(range(total))
        assert {message["error"]["code"] for message in answered} == {-32601}
        nursery.cancel_scope.cancel()


async def test_max_output_bytes_is_checked() -> None:
    send, receive = trio.testing.memory_stream_pair()
    with pytest.raises(ValueError, match="max_output_bytes must be at least 65536 bytes"):
        Connection(send, receive, {}, max_output_bytes=1000)


async def test_handlers_answering_slower_than_the_peer_reads_are_not_paused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A peer that reads is served in full however much output each request makes: the limit
    pauses reading, it never drops nor reorders (20 answers of 1 MB through a 256 KiB limit)."""
    to_conn_send, to_conn_receive = trio.testing.memory_stream_one_way_pair()
    from_conn_send, from_conn_receive = trio.testing.memory_stream_one_way_pair()
    payload = "y" * 1_000_000

    async def big(params: Any) -> str:
        return payload

    conn = Connection(
        from_conn_send, to_conn_receive, {"test/big": Route("test/big", "request", big)}, max_output_bytes=256 * 1024
    )
    async with conn:
        requests = b"".join(orjson.dumps({"jsonrpc": "2.0", "id": n, "method": "test/big"}) + b"\n" for n in range(20))
        await to_conn_send.send_all(requests)
        framer = LineFramer()
        answers: list[Any] = []
        with trio.fail_after(60):
            while len(answers) < 20:
                data = await from_conn_receive.receive_some(1 << 20)
                answers += [orjson.loads(line) for line in framer.feed(data) if isinstance(line, bytes)]
        assert [answer["id"] for answer in answers] == list(range(20))
        assert all(answer["result"] == payload for answer in answers)


# -- the remote demo server, a real process ---------------------------------------------------------


def _memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the peak) of a process, in KiB."""
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status if line.startswith(("VmRSS", "VmHWM")))
    return {name: int(value.split()[0]) for name, value in fields.items()}


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        return [int(child) for child in children.read().split()]


DEMO_SERVER = [sys.executable, "-m", "acp_trio.demo", "--serve", "http://127.0.0.1:0"]
DEMO_BRIDGE = [
    sys.executable, "-m", "acp_trio.bridge", "--listen", "127.0.0.1:0", "--",
    sys.executable, "-m", "acp_trio.demo", "--serve-agent",
]  # fmt: skip


@asynccontextmanager
async def _server(command: list[str]) -> AsyncIterator[tuple[str, trio.Process]]:
    """Run a server (the remote demo server or the bridge): its ws:// URL and its process."""
    pytest.importorskip("hypercorn")
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            lambda task_status: trio.run_process(
                command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False, task_status=task_status
            )
        )
        assert process.stderr is not None
        seen = b""
        with trio.fail_after(30):
            while (found := re.search(rb"serving .* on (ws://\S+)", seen)) is None:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, f"the server ended before it listened: {seen.decode(errors='replace')}"
                seen += chunk

        async def drain(stream: Any) -> None:  # its log is not read by anyone: keep the pipe flowing
            while await stream.receive_some(65536):
                pass

        nursery.start_soon(drain, process.stderr)
        try:
            yield found.group(1).decode(), process
        finally:
            process.terminate()


@asynccontextmanager
async def _never_reading_websocket(url: str) -> AsyncIterator[Any]:
    """A trio-websocket client whose messages nobody reads (its queue holds one).  Leaving it is
    bounded: its close handshake may wait on a server that (rightly) no longer reads it, and
    trio-websocket 0.12's reader task, blocked on that full queue, is never woken once a cancelled
    send has aborted the connection (the flood below is cancelled mid-send)."""
    trio_websocket = pytest.importorskip("trio_websocket")
    with trio.CancelScope() as leaving, contextlib.suppress(trio_websocket.DisconnectionTimeout):
        async with trio_websocket.open_websocket_url(url, message_queue_size=1, disconnect_timeout=2) as hostile:
            try:
                yield hostile
            finally:
                leaving.deadline = trio.current_time() + 5


INITIALIZE = orjson.dumps(
    {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
).decode()


@pytest.mark.one_interpreter  # processes and sockets, seconds of CPU: the logic is not the interpreter's
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the server's RSS from /proc")
@pytest.mark.parametrize("command", [DEMO_SERVER, DEMO_BRIDGE], ids=["demo-server", "bridge"])
async def test_a_client_that_never_reads_does_not_grow_the_server_and_others_are_served(command: list[str]) -> None:
    """Issue 32's attack: after ``initialize``, 3,000 requests of an unknown method with a 60 KB
    name (each answer echoes it: 180 MB of answers), nothing read.  The server stops reading that
    WebSocket (it took +172 MiB before; the bridge and its agent +171 MiB); its peak RSS stays
    within 16 MiB of what it was (behind the bridge: the bridge's, and the flooded agent process's
    over the peak of an agent process that served one session), and a second client keeps being
    served (sessions and prompt turns) the whole time."""
    pytest.importorskip("trio_websocket")
    from acp_trio.transports.websocket import connect_websocket

    class Client:
        async def session_update(self, params: v1.SessionNotification) -> None:
            pass

        async def session_request_permission(
            self, params: v1.RequestPermissionRequest
        ) -> v1.RequestPermissionResponse:  # rejected: the demo agent's turn stops there, touching no file
            reject = next(o for o in params.options if o.kind.startswith("reject"))
            return v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id=reject.option_id))

    frames = 3000
    sent = 0
    async with _server(command) as (url, process):
        async with connect_websocket(url, Client) as good:  # warm: one connection served first
            await good.agent.initialize(v1.InitializeRequest(protocol_version=1))
            session = await good.agent.session_new(v1.NewSessionRequest(cwd="/tmp", mcp_servers=[]))
            agents = _children(process.pid)  # behind the bridge: this connection's agent process
            warm_agent = _memory(agents[0])["VmHWM"] if agents else 0
        before = _memory(process.pid)
        async with _never_reading_websocket(url) as hostile:
            await hostile.send_message(INITIALIZE)
            flooded: set[int] = set()  # behind the bridge: the hostile connection's agent process
            with trio.fail_after(30):
                while agents and not flooded:
                    flooded = set(_children(process.pid)) - set(agents)
                    await trio.testing.wait_all_tasks_blocked(0.01)

            async def flood() -> None:
                nonlocal sent
                for request_id in range(1, frames + 1):
                    await hostile.send_message(
                        orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": BIG_NAME}).decode()
                    )
                    sent += 1

            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood)
                async with connect_websocket(url, Client) as good:
                    await good.agent.initialize(v1.InitializeRequest(protocol_version=1))
                    # served while the flood goes on: until the flood has made no progress for 100
                    # turns in a row (the server stopped reading it), or it is all sent (a failure)
                    still, last, turns = 0, -1, 0
                    with trio.fail_after(120):
                        while still < 100 and sent < frames:
                            session = await good.agent.session_new(v1.NewSessionRequest(cwd="/tmp", mcp_servers=[]))
                            prompt: list[Any] = [v1.TextContentBlock(type="text", text="hello")]
                            answer = await good.agent.session_prompt(
                                v1.PromptRequest(session_id=session.session_id, prompt=prompt)
                            )
                            assert answer.stop_reason == "end_turn"
                            turns += 1
                            still = still + 1 if sent == last else 0
                            last = sent
                after = _memory(process.pid)
                flooded_agent = max((_memory(pid)["VmHWM"] for pid in flooded), default=0)
                nursery.cancel_scope.cancel()
    grown_mib = (after["VmHWM"] - before["VmRSS"]) / 1024
    agent_grown_mib = (flooded_agent - warm_agent) / 1024
    print(f"{command[2]}: {sent} requests read, peak RSS +{grown_mib:.1f} MiB, agent +{agent_grown_mib:.1f} MiB")
    assert sent < frames, f"the server read all {frames} requests (180 MB of answers) from a client that reads nothing"
    assert grown_mib < 16, f"the server's peak RSS grew {grown_mib:.0f} MiB ({sent} requests read)"
    assert agent_grown_mib < 16, f"the flooded agent process's peak RSS grew {agent_grown_mib:.0f} MiB"
    assert turns >= 100


async def test_a_client_that_takes_nothing_for_the_stall_timeout_is_closed_1008(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Paused reading is not forever: once the client has taken nothing for ``output_stall_timeout``
    seconds while output waits for it, its ACP connection (and agent) ends, with the close frame
    ``1008`` queued behind what it did not take (its TCP connection goes after as long again)."""
    trio_websocket = pytest.importorskip("trio_websocket")
    from acp_trio.demo.agent import agents_for
    from acp_trio.transports.asgi import AcpApp, served

    # real time (trio's autojump clock would also fire hypercorn's own timers while sockets work)
    app = AcpApp(agents_for((1,)), output_stall_timeout=0.5)
    async with served(app, "127.0.0.1", 0) as urls:
        url = urls[0].replace("http", "ws", 1) + "/acp"
        async with trio_websocket.open_websocket_url(url, message_queue_size=1) as hostile:
            await hostile.send_message(INITIALIZE)

            async def flood() -> None:
                with contextlib.suppress(trio_websocket.ConnectionClosed):
                    for request_id in range(1, 3001):
                        await hostile.send_message(
                            orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": BIG_NAME}).decode()
                        )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood)
                with trio.fail_after(30):
                    await app.wait_idle()  # the server gave up on it: its ACP connection ended
                nursery.cancel_scope.cancel()
    stalled = [record.getMessage() for record in caplog.records if "output stalled" in record.getMessage()]
    assert stalled and "the client took nothing for 0.5 s" in stalled[0], caplog.text


@pytest.mark.one_interpreter  # processes and sockets, seconds of CPU: the logic is not the interpreter's
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the server's RSS from /proc")
async def test_streamable_http_holds_the_posts_of_a_client_that_never_opens_its_stream() -> None:
    """The same attack over Streamable HTTP: ``initialize``, then 3,000 POSTed requests whose
    answers (60 KB each) wait for an SSE stream the client never opens.  At ``max_buffered_bytes``
    (64 MiB, the TypeScript server's default) the server holds the POSTs before their ``202``
    (the agent stops reading its input); its peak RSS stays within that plus 16 MiB."""
    httpx = pytest.importorskip("httpx2")
    frames = 3000
    sent = 0
    async with _server(DEMO_SERVER) as (url, process):
        base = url.replace("ws", "http", 1)
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(timeout=None) as http:
            answer = await http.post(base, content=INITIALIZE, headers=headers)
            assert answer.status_code == 200, answer.text
            headers["acp-connection-id"] = answer.headers["acp-connection-id"]
            before = _memory(process.pid)

            async def flood() -> None:
                nonlocal sent
                for request_id in range(1, frames + 1):
                    body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": BIG_NAME})
                    accepted = await http.post(base, content=body, headers=headers)
                    assert accepted.status_code == 202, accepted.text
                    sent += 1

            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood)
                # until the flood has made no progress for 100 checks in a row (the POSTs are held)
                still, last = 0, -1
                with trio.fail_after(120):
                    while still < 100 and sent < frames:
                        await trio.testing.wait_all_tasks_blocked(0.01)
                        still = still + 1 if sent == last else 0
                        last = sent
                after = _memory(process.pid)
                nursery.cancel_scope.cancel()
    grown_mib = (after["VmHWM"] - before["VmRSS"]) / 1024
    print(f"streamable http: {sent} requests accepted, peak RSS +{grown_mib:.1f} MiB")
    assert sent < frames, f"the server accepted all {frames} requests (180 MB of answers) for a stream nobody reads"
    assert grown_mib < 64 + 16, f"the server's peak RSS grew {grown_mib:.0f} MiB ({sent} requests accepted)"

"""A request handler that waits for its own responses over a pipe reads them itself (the reader
role leaves the request pool for its task), and hands the reading back whenever it waits for
anything else, ends, is cancelled, or the input needs the pool's reader (end of input, a large
read, the connection closing).  Everything a handler can observe stays as it was: these tests
drive each of those hand-backs and check what the handler and its peer see."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio
from _pipes import Messages, echo, pipe
from trio.testing import MockClock

from acp_trio import Connection, ConnectionClosed, RequestError, RequestTimeout, Route
from acp_trio._connection import _HANDOFF

pytestmark = pytest.mark.skipif(not hasattr(trio.lowlevel, "FdStream"), reason="POSIX pipes only")

RUN = "test/run"  # the agent's handler under test
ECHO = "test/echo"  # what it asks its peer
NOTE = "test/note"


def serve_run(agent: Connection, run: Callable[[Connection, Any], Awaitable[Any]]) -> None:
    """Route ``test/run`` on ``agent`` to ``run(agent, params)``."""

    async def handler(params: Any) -> Any:
        return await run(agent, params)

    agent.routes[RUN] = Route(RUN, "request", handler)


@asynccontextmanager
async def pair(
    run: Callable[[Connection, Any], Awaitable[Any]],
    client_routes: dict[str, Route] | None = None,
    agent_routes: dict[str, Route] | None = None,
) -> AsyncIterator[tuple[Connection, Connection]]:
    """An agent whose ``test/run`` handler is ``run(agent, params)`` and a client answering
    ``test/echo`` (plus ``client_routes``), connected by two OS pipes."""
    agent_in, client_out = pipe()
    client_in, agent_out = pipe()
    routes = {ECHO: Route(ECHO, "request", echo), **(client_routes or {})}
    client = Connection(client_out, client_in, routes, name="client")
    agent = Connection(agent_out, agent_in, agent_routes, name="agent")
    serve_run(agent, run)
    async with agent, client:
        yield agent, client


@asynccontextmanager
async def raw_peer(
    run: Callable[[Connection, Any], Awaitable[Any]], agent_routes: dict[str, Route] | None = None
) -> AsyncIterator[tuple[Connection, trio.lowlevel.FdStream, Messages]]:
    """An agent as in :func:`pair`, and the test as its peer: the agent's input pipe's write end,
    and its output read line by line."""
    agent_in, to_agent = pipe()
    from_agent, agent_out = pipe()
    agent = Connection(agent_out, agent_in, agent_routes, name="agent")
    serve_run(agent, run)
    async with agent:
        yield agent, to_agent, Messages(from_agent)
        await to_agent.aclose()


def line(message: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", **message}) + b"\n"


async def until_the_handler_reads(agent: Connection, to_agent: trio.lowlevel.FdStream, lines: Messages) -> Any:
    """Send ``test/run`` (id 7), answer its handler's first question, and return its second one,
    whose answer the handler now waits for, reading the input itself."""
    await to_agent.send_all(line({"id": 7, "method": RUN, "params": {}}))
    first = await lines.next()
    await to_agent.send_all(line({"id": first["id"], "result": first["params"]}))
    second = await lines.next()
    assert agent._role_waiting
    return second


class Steps(trio.abc.Instrument):
    """Task steps, by the name of the connection whose task took them (``agent: ...``)."""

    def __init__(self) -> None:
        self.by_side: Counter[str] = Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.by_side[task.name.split(":", 1)[0]] += 1


async def test_a_handler_asking_one_question_after_another_takes_one_task_step_per_round_trip() -> None:
    """The response wakes the handler's task alone: no reader task reads it first and wakes it."""
    n = 200

    async def run(agent: Connection, params: Any) -> Any:
        steps = Steps()
        trio.lowlevel.add_instrument(steps)
        try:
            results = [await agent.request(ECHO, {"i": i}) for i in range(n)]
        finally:
            trio.lowlevel.remove_instrument(steps)
        return {"results": results, "agent_steps": steps.by_side["agent"]}

    async with pair(run) as (_, client):
        with trio.fail_after(20):
            answer = await client.request(RUN, {})
    assert answer["results"] == [{"i": i} for i in range(n)]
    # one step per round trip, and a few to hand the reader role over at the start (two per round trip without it)
    assert answer["agent_steps"] <= n + 5


async def test_the_handler_hands_the_reading_back_when_it_waits_for_anything_else() -> None:
    """After a response, the handler waits for a notification its peer sends later: the pool reads it."""
    noted = trio.Event()
    ready = trio.Event()

    async def on_note(params: Any) -> None:
        noted.set()

    async def run(agent: Connection, params: Any) -> Any:
        first = await agent.request(ECHO, {"i": 1})
        assert agent._role_holder is trio.lowlevel.current_task()  # it holds the reader role now
        await agent.notify("test/ready", {})
        await noted.wait()  # only the pool's reader can read the note
        return first

    async def on_ready(params: Any) -> None:
        ready.set()

    client_routes = {"test/ready": Route("test/ready", "notification", on_ready)}
    async with pair(run, client_routes, {NOTE: Route(NOTE, "notification", on_note)}) as (agent, client):
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                answers: list[Any] = []

                async def call() -> None:
                    answers.append(await client.request(RUN, {}))

                nursery.start_soon(call)
                await ready.wait()
                await client.notify(NOTE, {})
    assert answers == [{"i": 1}]
    assert agent._role_holder is None


async def test_a_handler_that_ends_holding_the_reader_role_hands_it_back() -> None:
    async def run(agent: Connection, params: Any) -> Any:
        return await agent.request(ECHO, params)  # returns with the reader role

    async with pair(run, agent_routes={ECHO: Route(ECHO, "request", echo)}) as (agent, client):
        with trio.fail_after(20):
            for i in range(5):  # each is read by the pool again
                assert await client.request(RUN, {"i": i}) == {"i": i}
                assert await client.request(ECHO, {"j": i}) == {"j": i}  # answered by the pool's reader
        assert agent._role_holder is None


async def test_requests_read_by_the_handler_run_in_pool_tasks_and_can_ask_questions_too() -> None:
    """While the handler waits for its response, its peer asks the agent something first; that
    request (which itself asks the client a question) runs in a task of its own."""
    ping_tasks: list[trio.lowlevel.Task] = []
    run_tasks: list[trio.lowlevel.Task] = []

    async def run(agent: Connection, params: Any) -> Any:
        run_tasks.append(trio.lowlevel.current_task())
        results = []
        for i in range(3):
            results.append(await agent.request(ECHO, {"i": i}))
        return results

    client_conn: list[Connection] = []

    async def asks_back(params: Any) -> Any:  # the client's answer to the agent's test/echo
        pong = await client_conn[0].request("test/ping", params)
        return {"pong": pong}

    agent_side: list[Connection] = []

    async def ping(params: Any) -> Any:
        ping_tasks.append(trio.lowlevel.current_task())
        return await agent_side[0].request("test/plain", params)  # a question of its own

    client_routes = {
        ECHO: Route(ECHO, "request", asks_back),
        "test/plain": Route("test/plain", "request", echo),
    }
    async with pair(run, client_routes, {"test/ping": Route("test/ping", "request", ping)}) as (agent, client):
        client_conn.append(client)
        agent_side.append(agent)
        with trio.fail_after(20):
            assert await client.request(RUN, {}) == [{"pong": {"i": i}} for i in range(3)]
    assert len(ping_tasks) == 3
    assert all(task is not run_tasks[0] for task in ping_tasks)


async def test_a_handler_cancelled_while_it_reads_hands_the_reading_back() -> None:
    started = trio.Event()
    outcome: list[BaseException] = []

    async def stuck(params: Any) -> Any:  # the client never answers the second question
        if params["i"] == 1:
            started.set()
            await trio.sleep_forever()
        return params

    async def run(agent: Connection, params: Any) -> Any:
        try:
            for i in range(3):
                await agent.request(ECHO, {"i": i})
        except BaseException as exc:
            outcome.append(exc)
            raise
        return "unreachable"

    echo_route = {ECHO: Route(ECHO, "request", echo)}
    async with pair(run, {ECHO: Route(ECHO, "request", stuck)}, echo_route) as (agent, client):
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                errors: list[RequestError] = []

                async def call() -> None:
                    try:
                        await client.request(RUN, {}, timeout=None)
                    except RequestError as exc:
                        errors.append(exc)

                nursery.start_soon(call)
                await started.wait()
                assert agent._role_waiting  # the handler reads, waiting for its answer
                # the client gives up on test/run: $/cancel_request, which the handler reads itself
                await client.notify("$/cancel_request", {"requestId": 0})
            assert [e.code for e in errors] == [-32800]
            assert isinstance(outcome[0], trio.Cancelled)
            assert agent._role_holder is None
            # the pool reads again: a new request is answered
            assert await client.request(ECHO, {"after": True}) == {"after": True}


@pytest.mark.parametrize(("end", "reason"), [("close", "closed by the test"), ("input", "end of stream")])
async def test_the_connection_ending_while_the_handler_reads_fails_its_request_with_connection_closed(
    end: str, reason: str
) -> None:
    """Closed by this side (``aclose``) or by the peer (the end of the agent's input)."""
    outcome: list[BaseException] = []

    async def run(agent: Connection, params: Any) -> Any:
        await agent.request(ECHO, {"i": 0})
        try:
            await agent.request(ECHO, {"i": 1})
        except BaseException as exc:
            outcome.append(exc)
            raise
        return None

    async with raw_peer(run) as (agent, to_agent, lines):
        with trio.fail_after(20):
            assert (await until_the_handler_reads(agent, to_agent, lines))["params"] == {"i": 1}
            if end == "close":
                await agent.aclose(reason)
            else:
                await to_agent.aclose()
                await agent.wait_closed()
    assert type(outcome[0]) is ConnectionClosed
    assert reason in str(outcome[0])
    assert agent.close_error is not None and reason in agent.close_error.reason


@pytest.mark.parametrize("notes", [3, _HANDOFF * 4])
async def test_ordered_notifications_read_with_the_response_are_handled_before_it_returns(notes: int) -> None:
    """A few (handled by the handler's task) or more than one slice (handed back to the pool's reader)."""
    seen: list[int] = []

    async def on_note(params: Any) -> None:
        seen.append(params["k"])
        await trio.lowlevel.checkpoint()

    async def run(agent: Connection, params: Any) -> Any:
        await agent.request(ECHO, {"i": 0})
        await agent.request(ECHO, {"i": 1})  # read with the notes before it
        return list(seen)

    routes = {NOTE: Route(NOTE, "notification", on_note, serial_key=lambda p: "session")}
    async with raw_peer(run, routes) as (agent, to_agent, lines):
        with trio.fail_after(20):
            second = await until_the_handler_reads(agent, to_agent, lines)
            burst = b"".join(line({"method": NOTE, "params": {"k": k}}) for k in range(notes))
            await to_agent.send_all(burst + line({"id": second["id"], "result": second["params"]}))
            answer = await lines.next()
    assert answer == {"jsonrpc": "2.0", "id": 7, "result": list(range(notes))}


async def test_a_request_with_a_timeout_from_the_role_holder_waits_as_any_other() -> None:
    async def run(agent: Connection, params: Any) -> Any:
        first = await agent.request(ECHO, {"i": 0})
        second = await agent.request(ECHO, {"i": 1}, timeout=10)
        third = await agent.request(ECHO, {"i": 2})
        return [first, second, third]

    async with pair(run) as (_, client):
        with trio.fail_after(20):
            assert await client.request(RUN, {}) == [{"i": 0}, {"i": 1}, {"i": 2}]


async def test_an_error_response_read_by_the_handler_is_raised_to_it() -> None:
    async def failing(params: Any) -> Any:
        if params["i"] == 1:
            raise RequestError(-32001, "no such file", {"i": 1})
        return params

    async def run(agent: Connection, params: Any) -> Any:
        await agent.request(ECHO, {"i": 0})
        try:
            await agent.request(ECHO, {"i": 1})
        except RequestError as exc:
            return {"code": exc.code, "message": exc.message, "after": await agent.request(ECHO, {"i": 2})}
        return None

    async with pair(run, {ECHO: Route(ECHO, "request", failing)}) as (_, client):
        with trio.fail_after(20):
            assert await client.request(RUN, {}) == {"code": -32001, "message": "no such file", "after": {"i": 2}}


async def test_request_many_from_the_role_holder_reads_its_responses_itself() -> None:
    n = 300

    async def run(agent: Connection, params: Any) -> Any:
        await agent.request(ECHO, {"first": True})  # brings the reader role
        steps = Steps()
        trio.lowlevel.add_instrument(steps)
        try:
            results = await agent.request_many(ECHO, [{"i": i} for i in range(n)], limit=8)
        finally:
            trio.lowlevel.remove_instrument(steps)
        return {"results": results, "agent_steps": steps.by_side["agent"], "holder": agent._role_holder is not None}

    async with pair(run) as (_, client):
        with trio.fail_after(20):
            answer = await client.request(RUN, {})
    assert answer["results"] == [{"i": i} for i in range(n)]
    assert answer["holder"]  # still reading when request_many returned
    # one step per read of responses at most (two without the reader role: the reader's, then the caller's)
    assert answer["agent_steps"] <= n + 5


async def test_request_many_timing_out_while_its_caller_reads_hands_the_reading_back(autojump_clock: MockClock) -> None:
    async def silent(params: Any) -> Any:
        if params.get("i") == 3:
            await trio.sleep_forever()
        return params

    async def run(agent: Connection, params: Any) -> Any:
        await agent.request(ECHO, {"first": True})
        try:
            await agent.request_many(ECHO, [{"i": i} for i in range(6)], limit=2, timeout=5)
        except RequestTimeout as exc:
            return {"timed_out": exc.request_id, "holder": agent._role_holder}
        return None

    echo_route = {ECHO: Route(ECHO, "request", echo)}
    async with pair(run, {ECHO: Route(ECHO, "request", silent)}, echo_route) as (_, client):
        with trio.fail_after(20):
            answer = await client.request(RUN, {})
            assert answer == {"timed_out": 4, "holder": None}  # ids 0 (first), 1-3, 4 = {"i": 3}
            assert await client.request(ECHO, {"after": True}) == {"after": True}


async def test_session_cancel_read_by_a_prompt_turn_reading_files_ends_it_cancelled() -> None:
    """ACP over pipes, typed as users write it: the prompt turn reads files one after another, and
    the client's session/cancel arrives while the turn waits for a read (read by the turn itself)."""
    from acp_schema import v1
    from acp_trio import AgentSideConnection, ClientSideConnection

    stuck = trio.Event()
    agent_conns: list[AgentSideConnection] = []
    reads: list[str] = []

    class Agent:
        def __init__(self, conn: AgentSideConnection) -> None:
            self.client = v1.ClientPeer(conn)
            agent_conns.append(conn)

        async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
            return v1.InitializeResponse(protocol_version=1)

        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            return v1.NewSessionResponse(session_id="s1")

        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            block = params.prompt[0]
            assert isinstance(block, v1.TextContentBlock)
            for i in range(int(block.text)):
                request = v1.ReadTextFileRequest(session_id=params.session_id, path=f"/f{i}")
                response = await self.client.fs_read_text_file(request)
                reads.append(response.content)
            return v1.PromptResponse(stop_reason="end_turn")

        async def session_cancel(self, params: v1.CancelNotification) -> None:
            pass

    class Client:
        def __init__(self, conn: ClientSideConnection) -> None:
            pass

        async def session_update(self, params: v1.SessionNotification) -> None:
            pass

        async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
            if params.path == "/f2" and not stuck.is_set():
                stuck.set()
                await trio.sleep_forever()  # until the agent cancels this read
            return v1.ReadTextFileResponse(content=params.path)

    agent_in, client_out = pipe()
    client_in, agent_out = pipe()
    agent_conn = AgentSideConnection(Agent, agent_out, agent_in)
    client_conn = ClientSideConnection(Client, client_out, client_in)
    async with agent_conn, client_conn:
        agent = v1.AgentPeer(client_conn)
        with trio.fail_after(20):
            caps = v1.ClientCapabilities(fs=v1.FileSystemCapabilities(read_text_file=True))
            await agent.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=caps))
            await agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
            responses: list[v1.PromptResponse] = []
            async with trio.open_nursery() as nursery:

                async def turn() -> None:
                    text = [v1.TextContentBlock(text="5")]
                    responses.append(await agent.session_prompt(v1.PromptRequest(session_id="s1", prompt=text)))

                nursery.start_soon(turn)
                await stuck.wait()
                assert agent_conns[0].connection._role_waiting  # the turn reads, waiting for /f2
                await agent.session_cancel(v1.CancelNotification(session_id="s1"))
            assert [r.stop_reason for r in responses] == ["cancelled"]
            assert reads == ["/f0", "/f1"]
            # the connection goes on: the next turn reads all its files
            text = [v1.TextContentBlock(text="3")]
            again = await agent.session_prompt(v1.PromptRequest(session_id="s1", prompt=text))
    assert again.stop_reason == "end_turn"
    assert reads == ["/f0", "/f1", "/f0", "/f1", "/f2"]


async def test_one_socket_descriptor_for_both_ways_keeps_the_reading_in_the_pool() -> None:
    """Waking a handler that reads would wake a writer waiting on the same descriptor too, so the
    reading is not lent there; requests one after another still work."""
    import socket

    agent_sock, client_sock = socket.socketpair()
    agent_stream = trio.lowlevel.FdStream(agent_sock.detach())
    client_stream = trio.lowlevel.FdStream(client_sock.detach())
    holders: list[Any] = []

    async def run(agent: Connection, params: Any) -> Any:
        results = []
        for i in range(5):
            results.append(await agent.request(ECHO, {"i": i}))
            holders.append(agent._role_holder)
        return results

    agent = Connection(agent_stream, agent_stream, name="agent")
    serve_run(agent, run)
    client = Connection(client_stream, client_stream, {ECHO: Route(ECHO, "request", echo)}, name="client")
    async with agent, client:
        with trio.fail_after(20):
            assert await client.request(RUN, {}) == [{"i": i} for i in range(5)]
    assert holders == [None] * 5


async def test_what_the_handler_reads_runs_in_the_connections_context_not_the_handlers() -> None:
    """A context variable the reading handler set reaches neither the notification handler nor the
    request handler started from what it read (each request starts from the connection's context)."""
    import contextvars

    who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="unset")
    seen: dict[str, str] = {}

    async def on_note(params: Any) -> None:
        seen["notification"] = who.get()

    async def ask(params: Any) -> Any:
        seen["request"] = who.get()
        return "ok"

    async def run(agent: Connection, params: Any) -> Any:
        who.set("the handler")
        await agent.request(ECHO, {"i": 0})
        await agent.request(ECHO, {"i": 1})
        return who.get()

    routes = {NOTE: Route(NOTE, "notification", on_note), "test/ask": Route("test/ask", "request", ask)}
    async with raw_peer(run, routes) as (agent, to_agent, lines):
        with trio.fail_after(20):
            second = await until_the_handler_reads(agent, to_agent, lines)
            await to_agent.send_all(line({"method": NOTE, "params": {}}) + line({"id": 8, "method": "test/ask"}))
            assert await lines.next() == {"jsonrpc": "2.0", "id": 8, "result": "ok"}
            await to_agent.send_all(line({"id": second["id"], "result": second["params"]}))
            assert await lines.next() == {"jsonrpc": "2.0", "id": 7, "result": "the handler"}
    assert seen == {"notification": "unset", "request": "unset"}

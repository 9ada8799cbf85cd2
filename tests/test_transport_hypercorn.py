"""hypercorn's trio worker as :func:`acp_trio.transports._hypercorn.serve_hypercorn` runs it: HTTP/1.1
keep-alive, the application's event queues, and the garbage collector's threshold while serving.

hypercorn closes a connection that stays idle (no request in progress) for ``keep_alive_timeout``
seconds, and closes idle ones at once when the server shuts down.  ``serve_hypercorn`` keeps both
rules on a plain TCP socket with a deadline on its reader's wait rather than hypercorn's task per
idle period.  Real sockets on 127.0.0.1 and short timeouts (wall clock: the server waits on the
socket), each test bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import functools
import gc
import inspect
from typing import Any

import pytest
import trio
import trio.testing

pytest.importorskip("hypercorn")

from hypercorn.config import Config

from acp_trio.transports._hypercorn import SERVER_GC_THRESHOLD2, serve_hypercorn

DEADLINE = 30
KEEP_ALIVE = 0.5
REQUEST = b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
INITIALIZE = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'


def post(body: bytes, *headers: str) -> bytes:
    """A ``POST /acp`` of a JSON ``body`` as bytes on the wire, with more ``headers`` (``"Name: value"``)."""
    head = "".join(f"{h}\r\n" for h in ("Host: 127.0.0.1", "Content-Type: application/json", *headers))
    return f"POST /acp HTTP/1.1\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


async def connect(url: str) -> trio.SocketStream:
    """A TCP connection to the server at ``url`` (``http://HOST:PORT``, as serve reports it)."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    return await trio.open_tcp_stream(host, int(port))


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/x``: ``ok`` at once; ``/slow``: a body in two parts ``2 * KEEP_ALIVE`` seconds apart."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].rsplit(".", 1)[1]
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
    if scope["path"] == "/slow":
        await send({"type": "http.response.body", "body": b"ok", "more_body": True})
        await trio.sleep(2 * KEEP_ALIVE)
        await send({"type": "http.response.body", "body": b"\r\n"})
    else:
        await send({"type": "http.response.body", "body": b"ok\r\n"})


def config(keep_alive: float = KEEP_ALIVE) -> Config:
    result = Config()
    result.bind = ["127.0.0.1:0"]
    result.accesslog = None
    result.keep_alive_timeout = keep_alive
    result.graceful_timeout = 20
    return result


async def answer(stream: trio.SocketStream) -> bytes:
    """One whole response (its body ends with CRLF here)."""
    data = b""
    while not data.endswith(b"\r\n\r\nok\r\n"):
        chunk = await stream.receive_some()
        assert chunk, data
        data += chunk
    return data


async def closed_by_server(stream: trio.SocketStream) -> float:
    """Seconds until the server closes ``stream`` (it sends nothing meanwhile)."""
    started = trio.current_time()
    assert await stream.receive_some() == b""
    return trio.current_time() - started


class Spawns(trio.abc.Instrument):
    def __init__(self) -> None:
        self.count = 0
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if "open_tcp_stream" not in task.name:  # (the test's client connecting)
            self.count += 1
            self.names.append(task.name)


async def test_an_idle_keep_alive_connection_closes_after_keep_alive_timeout_and_a_request_costs_one_task() -> None:
    """After each answer the connection has ``keep_alive_timeout`` to send its next request; a request
    made meanwhile is served and the clock starts again from its answer.  A request cycle starts one
    task, the application's (hypercorn's own idle timer started a task per idle period too)."""
    spawns = Spawns()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            [url] = await nursery.start(functools.partial(serve_hypercorn, app, config()))
            async with await connect(url) as stream:
                await stream.send_all(REQUEST)
                await answer(stream)
                await trio.sleep(KEEP_ALIVE / 2)
                trio.lowlevel.add_instrument(spawns)
                await stream.send_all(REQUEST)
                assert (await answer(stream)).startswith(b"HTTP/1.1 200 ")
                trio.lowlevel.remove_instrument(spawns)
                waited = await closed_by_server(stream)
                assert KEEP_ALIVE * 0.8 <= waited <= KEEP_ALIVE + 5, waited
            nursery.cancel_scope.cancel()
    assert spawns.count == 1


async def test_a_response_slower_than_keep_alive_timeout_is_not_cut() -> None:
    """The keep-alive clock stops while a request is in progress (a slow answer, an SSE stream)."""
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            [url] = await nursery.start(functools.partial(serve_hypercorn, app, config()))
            async with await connect(url) as stream:
                await stream.send_all(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                started = trio.current_time()
                assert (await answer(stream)).startswith(b"HTTP/1.1 200 ")
                assert trio.current_time() - started >= 2 * KEEP_ALIVE * 0.9
                waited = await closed_by_server(stream)  # and then idle as usual
                assert KEEP_ALIVE * 0.8 <= waited <= KEEP_ALIVE + 5, waited
            nursery.cancel_scope.cancel()


async def test_a_shutdown_closes_idle_keep_alive_connections_at_once() -> None:
    """As hypercorn: once the server shuts down, an idle connection is closed without waiting for its
    keep-alive timeout (here 60 s) or the graceful timeout (20 s)."""
    shutdown = trio.Event()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            serving = functools.partial(serve_hypercorn, app, config(60.0), shutdown_trigger=shutdown.wait)
            [url] = await nursery.start(serving)
            async with await connect(url) as stream:
                await stream.send_all(REQUEST)
                await answer(stream)
                fresh = await connect(url)  # idle from its start
                await trio.sleep(0.1)
                shutdown.set()
                with trio.fail_after(5):
                    await closed_by_server(stream)
                    await closed_by_server(fresh)
                await fresh.aclose()


# -- the application's events: AppEvents --------------------------------------------------------------
async def test_app_events_are_queued_without_a_yield_and_received_in_order() -> None:
    from acp_trio.transports._hypercorn import AppEvents

    events = AppEvents(2)
    first, second, third = ({"type": "http.request", "n": n} for n in range(3))
    with trio.fail_after(DEADLINE):
        await events.put(first)  # no yield: (a yield would let the task below run first)
        await events.put(second)
        assert events.receive_nowait() is first
        async with trio.open_nursery() as nursery:
            nursery.start_soon(events.put, third)  # the queue has room for 2: waits for the receive below
            await trio.testing.wait_all_tasks_blocked()
            assert await events.receive() is second
            assert await events.receive() is third
        with pytest.raises(trio.WouldBlock):
            events.receive_nowait()
        async with trio.open_nursery() as nursery:
            received: list[Any] = []

            async def receive() -> None:
                received.append(await events.receive())

            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            await events.put(first)
        assert received == [first]


async def test_app_events_watching_for_the_disconnect_cancels_a_scope_without_a_task() -> None:
    """What a task reading ``receive`` until ``http.disconnect`` did: what comes meanwhile is dropped;
    the disconnect, whether it comes later or is queued already, cancels the scope."""
    from acp_trio.transports._hypercorn import AppEvents

    events = AppEvents(10)
    body = {"type": "http.request", "body": b"", "more_body": False}
    with trio.fail_after(DEADLINE):
        await events.put(body)
        with trio.CancelScope() as scope:
            events.watch_disconnect(scope)
            await events.put(body)  # dropped, as the queued one
            await trio.testing.wait_all_tasks_blocked()
            assert not scope.cancel_called
            await events.put({"type": "http.disconnect"})
            await trio.sleep_forever()
        assert scope.cancelled_caught
        events.unwatch()
        with pytest.raises(trio.WouldBlock):
            events.receive_nowait()
        await events.put({"type": "http.disconnect"})
        with trio.CancelScope() as scope:
            events.watch_disconnect(scope)  # the disconnect queued already: cancelled at once
            await trio.sleep_forever()
        assert scope.cancelled_caught
        events.unwatch()
        await events.put(body)  # queued again
        assert events.receive_nowait() is body


async def test_a_full_queue_watched_meanwhile_lets_its_waiting_put_go() -> None:
    from acp_trio.transports._hypercorn import AppEvents

    events = AppEvents(1)
    body = {"type": "http.request", "body": b"x", "more_body": True}
    with trio.fail_after(DEADLINE):
        await events.put(body)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(events.put, {"type": "http.disconnect"})  # waits for room
            await trio.testing.wait_all_tasks_blocked()
            with trio.CancelScope() as scope:
                events.watch_disconnect(scope)
                await trio.sleep_forever()
            assert scope.cancelled_caught


# -- Streamable HTTP under serve(): a client that leaves ---------------------------------------------
async def test_a_client_leaving_an_sse_stream_or_an_unanswered_initialize_ends_them_with_no_watcher_task() -> None:
    """The SSE stream's ``GET`` ends when its client closes the TCP connection (the stream can be
    opened again, no 409), and so does an ``initialize`` whose answer the client stopped waiting for
    (its connection is closed); with no task reading the request's events meanwhile: opening an SSE
    stream starts two tasks, the TCP connection's and the application's."""
    import json

    from acp_trio.transports.asgi import AcpApp, serve

    silent = trio.Event()  # the agent reads initialize and never answers while this is set

    async def agent(connection_id: str, to_client: Any, from_client: Any) -> None:
        async for data in from_client:
            for line in data.splitlines():
                message = json.loads(line)
                if message.get("method") == "initialize" and not silent.is_set():
                    answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"protocolVersion": 1}}
                    await to_client.send_all(json.dumps(answer).encode() + b"\n")

    app = AcpApp(serve_streams=agent)
    spawns = Spawns()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            [url] = await nursery.start(functools.partial(serve, app, "127.0.0.1", 0))
            async with await connect(url) as posts:
                await posts.send_all(post(INITIALIZE))
                data = b""
                while b"\r\n\r\n" not in data:
                    data += await posts.receive_some()
            connection_id = data.split(b"acp-connection-id: ", 1)[1].split(b"\r\n", 1)[0].decode()
            get = f"GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAcp-Connection-Id: {connection_id}\r\n\r\n"
            for attempt in range(2):
                if attempt:
                    trio.lowlevel.add_instrument(spawns)
                sse = await connect(url)
                await sse.send_all(get.encode())
                data = b""
                while b":\n\n" not in data:
                    data += await sse.receive_some()
                assert data.startswith(b"HTTP/1.1 200 "), data  # (the second: no 409, the first stream ended)
                await trio.testing.wait_all_tasks_blocked(0.05)
                if attempt:
                    trio.lowlevel.remove_instrument(spawns)
                await sse.aclose()
                while app._http_connections[connection_id].receivers:
                    await trio.sleep(0.01)
            silent.set()
            before = app.active_connections
            async with await connect(url) as posts:
                await posts.send_all(post(INITIALIZE))
                while app.active_connections == before:
                    await trio.sleep(0.01)
            while app.active_connections > before:  # closed: the client left before the answer
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert spawns.count == 2, spawns.names


# -- idle_timeout: one reaper for every connection ----------------------------------------------------
async def test_abandoned_connections_are_closed_each_idle_timeout_after_its_last_use_by_one_task(
    autojump_clock: Any,
) -> None:
    """Each connection is closed ``idle_timeout`` after its own last request or stream (one used
    meanwhile lives on), and all of them are watched by one task in the lifespan's nursery beside
    the connections' own, gone once no connection is left to watch."""
    from test_transport_http_server import Script, running

    from acp_trio.transports.asgi import AcpApp

    scripts: list[Script] = []

    async def serve(connection_id: str, to_client: Any, from_client: Any) -> None:
        script = Script()
        scripts.append(script)
        await script.serve(connection_id, to_client, from_client)

    app = AcpApp(serve_streams=serve, idle_timeout=60)
    async with running(app) as http:
        assert app._nursery is not None
        ids = []
        for _ in range(5):
            ids.append(await http.initialize())
            await trio.sleep(10)
        await trio.testing.wait_all_tasks_blocked()
        assert len(app._nursery.child_tasks) == 5 + 1  # the connections, and one reaper
        assert (await http.post({"jsonrpc": "2.0", "method": "_x"}, ids[1])).status == 202  # at 50 s
        start = trio.current_time()
        await scripts[0].ended.wait()
        assert trio.current_time() - start == pytest.approx(10)  # opened at 0 s: closed at 60 s
        await scripts[2].ended.wait()
        assert trio.current_time() - start == pytest.approx(30)  # at 80 s, after the third's 20 s
        await trio.testing.wait_all_tasks_blocked()
        assert set(app.connection_ids) == {ids[1], ids[3], ids[4]}
        await scripts[1].ended.wait()
        assert trio.current_time() - start == pytest.approx(60)  # used at 50 s: closed at 110 s
        await app.wait_idle()
        await trio.testing.wait_all_tasks_blocked()
        assert not app._nursery.child_tasks


async def test_the_reapers_queue_lets_go_of_connections_that_ended() -> None:
    from test_transport_http_server import Script, running

    from acp_trio.transports.asgi import AcpApp

    app = AcpApp(serve_streams=Script().serve, idle_timeout=300)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            kept = await http.initialize()  # queued, for 300 s
            for _ in range(200):  # each queued once initialized, then deleted
                cid = await http.initialize()
                await http.request("DELETE", {"acp-connection-id": cid})
            while len(app.connection_ids) > 1:
                await app._ended.park()
            assert app._reaper is not None
            assert len(app._reaper.queue) <= 64 + 2
            assert app._reaper.live == 1 and app.connection_ids == {kept}


async def initialize_answered(connection_id: str, to_client: Any, from_client: Any) -> None:
    """A bridge-style ``serve_streams`` that answers every line it reads as the initialize above."""
    async for _ in from_client:
        await to_client.send_all(b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}\n')


async def test_the_initialize_answer_and_the_sse_streams_head_go_out_whole_in_one_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ``initialize`` POST's answer (head and body) and an SSE stream's head with its first
    comment are each one write to the socket (one segment for the client to read), not two."""
    import os

    from acp_trio.transports import _hypercorn
    from acp_trio.transports.asgi import AcpApp, serve

    written: list[bytes] = []
    write = os.write

    def recording(fd: int, data: Any) -> int:
        written.append(bytes(data))
        return write(fd, data)

    monkeypatch.setattr(_hypercorn.os, "write", recording)  # (the module's os: the same os module)

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            [url] = await nursery.start(
                functools.partial(serve, AcpApp(serve_streams=initialize_answered), "127.0.0.1", 0)
            )
            async with await connect(url) as posts:
                await posts.send_all(post(INITIALIZE))
                data = b""
                while not data.endswith(b"}"):
                    data += await posts.receive_some()
                connection_id = data.split(b"acp-connection-id: ", 1)[1].split(b"\r\n", 1)[0]
                async with await connect(url) as sse:
                    get = b"GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                    await sse.send_all(get + b"Acp-Connection-Id: " + connection_id + b"\r\n\r\n")
                    data = b""
                    while not data.endswith(b":\n\n\r\n"):
                        data += await sse.receive_some()
            nursery.cancel_scope.cancel()
    [answer] = [w for w in written if w.startswith(b"HTTP/1.1 200 ") and b"application/json" in w]
    assert answer.endswith(b'"result":{"protocolVersion":1}}'), answer
    [stream] = [w for w in written if w.startswith(b"HTTP/1.1 200 ") and b"text/event-stream" in w]
    assert stream.endswith(b"\r\n\r\n3\r\n:\n\n\r\n"), stream


async def test_an_idle_stream_and_a_watched_request_hold_no_emptied_queue() -> None:
    """An SSE stream's queue, once drained, and a request's events, once watched for the disconnect,
    go back to one shared empty deque (an emptied deque keeps its 0.75 KB block, per idle stream)."""
    from test_transport_http_server import Script, emit, running

    from acp_trio.transports import _hypercorn, asgi

    events = _hypercorn.AppEvents(10)
    await events.put({"type": "http.request", "body": b"", "more_body": False})
    with trio.CancelScope() as scope:
        events.watch_disconnect(scope)
    assert events._events is _hypercorn._NO_EVENTS
    app = asgi.AcpApp(serve_streams=Script().serve)
    with trio.fail_after(DEADLINE):
        async with running(app) as http:
            cid = await http.initialize()
            mailbox = app._http_connections[cid].connection_stream
            assert mailbox.queue is asgi._NO_LINES
            note = {"jsonrpc": "2.0", "method": "_note"}  # (no sessionId: the connection's stream)
            assert (await http.post(emit(note, note), cid)).status == 202
            stream = await http.stream(cid)
            await stream.wait_events(2)
            assert mailbox.queue is asgi._NO_LINES
            stream.leave()


async def test_an_answer_sent_in_one_write_still_arrives_whole_when_the_request_closes_the_connection() -> None:
    """``Connection: close`` (urllib's way): hypercorn closes the TCP connection as the answer ends,
    within the send that ends it; what that send holds for its one write goes out first."""
    from acp_trio.transports.asgi import AcpApp, serve

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            [url] = await nursery.start(
                functools.partial(serve, AcpApp(serve_streams=initialize_answered), "127.0.0.1", 0)
            )
            async with await connect(url) as stream:
                await stream.send_all(post(INITIALIZE, "Connection: close"))
                data = b""
                while chunk := await stream.receive_some():
                    data += chunk
            nursery.cancel_scope.cancel()
    assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b'"result":{"protocolVersion":1}}'), data


# -- the garbage collector while serving ------------------------------------------------------------


@pytest.fixture
def gc_thresholds() -> Any:
    """The process's collector thresholds, put back after the test whatever it did."""
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


async def test_serving_raises_the_collectors_third_threshold_and_the_last_server_out_restores_it(
    gc_thresholds: tuple[int, int, int],
) -> None:
    """Two servers in one process: the first raises ``threshold2`` to SERVER_GC_THRESHOLD2, the second
    leaves it, and it is back to what it was only once both have ended; the first two thresholds
    are never touched."""
    first, second, _ = gc_thresholds
    gc.set_threshold(first, second, 10)
    raised = (first, second, SERVER_GC_THRESHOLD2)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as outer:
            await outer.start(functools.partial(serve_hypercorn, app, config()))
            assert gc.get_threshold() == raised
            async with trio.open_nursery() as inner:
                await inner.start(functools.partial(serve_hypercorn, app, config()))
                assert gc.get_threshold() == raised
                inner.cancel_scope.cancel()
            assert gc.get_threshold() == raised  # the other server still runs
            outer.cancel_scope.cancel()
    assert gc.get_threshold() == (first, second, 10)


async def test_the_collector_is_left_alone_when_asked_and_a_higher_threshold_is_kept(
    gc_thresholds: tuple[int, int, int],
) -> None:
    first, second, _ = gc_thresholds
    for before, threshold2, during in [(10, None, 10), (500, SERVER_GC_THRESHOLD2, 500), (10, 40, 40)]:
        gc.set_threshold(first, second, before)
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                await nursery.start(functools.partial(serve_hypercorn, app, config(), gc_threshold2=threshold2))
                assert gc.get_threshold()[2] == during, (before, threshold2)
                nursery.cancel_scope.cancel()
        assert gc.get_threshold()[2] == before


async def test_thresholds_set_by_someone_else_while_serving_stay_when_the_server_ends(
    gc_thresholds: tuple[int, int, int],
) -> None:
    first, second, _ = gc_thresholds
    gc.set_threshold(first, second, 10)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(serve_hypercorn, app, config()))
            gc.set_threshold(first, second, 7)  # the application's own choice
            nursery.cancel_scope.cancel()
    assert gc.get_threshold() == (first, second, 7)


def test_asgi_serve_passes_the_same_default() -> None:
    from acp_trio.transports.asgi import serve

    assert inspect.signature(serve).parameters["gc_threshold2"].default == SERVER_GC_THRESHOLD2

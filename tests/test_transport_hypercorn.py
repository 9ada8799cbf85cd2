"""hypercorn's trio worker as :func:`acp_trio.transports._hypercorn.serve_hypercorn` runs it: HTTP/1.1 keep-alive.

hypercorn closes a connection that stays idle (no request in progress) for ``keep_alive_timeout``
seconds, and closes idle ones at once when the server shuts down.  ``serve_hypercorn`` keeps both
rules on a plain TCP socket with a deadline on its reader's wait rather than hypercorn's task per
idle period.  Real sockets on 127.0.0.1 and short timeouts (wall clock: the server waits on the
socket), each test bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import trio

pytest.importorskip("hypercorn")

from hypercorn.config import Config

from acp_trio.transports._hypercorn import serve_hypercorn

DEADLINE = 30
KEEP_ALIVE = 0.5
REQUEST = b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


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

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.count += 1


async def test_an_idle_keep_alive_connection_closes_after_keep_alive_timeout_and_a_request_costs_one_task() -> None:
    """After each answer the connection has ``keep_alive_timeout`` to send its next request; a request
    made meanwhile is served and the clock starts again from its answer.  A request cycle starts one
    task, the application's (hypercorn's own idle timer started a task per idle period too)."""
    spawns = Spawns()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            [url] = await nursery.start(functools.partial(serve_hypercorn, app, config()))
            host, port = url.split("//", 1)[1].rsplit(":", 1)
            async with await trio.open_tcp_stream(host, int(port)) as stream:
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
            host, port = url.split("//", 1)[1].rsplit(":", 1)
            async with await trio.open_tcp_stream(host, int(port)) as stream:
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
            host, port = url.split("//", 1)[1].rsplit(":", 1)
            async with await trio.open_tcp_stream(host, int(port)) as stream:
                await stream.send_all(REQUEST)
                await answer(stream)
                fresh = await trio.open_tcp_stream(host, int(port))  # idle from its start
                await trio.sleep(0.1)
                shutdown.set()
                with trio.fail_after(5):
                    await closed_by_server(stream)
                    await closed_by_server(fresh)
                await fresh.aclose()

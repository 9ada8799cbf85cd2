"""The Connection over real OS pipes (``trio.lowlevel.FdStream``), where requests and responses are
written at once when nothing is queued and the writer takes over what does not fit in the pipe."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio
from _pipes import Messages, echo, pipe
from _slices import SliceWatch

from acp_trio import Connection, ConnectionClosed, Route
from acp_trio._connection import _HANDOFF

pytestmark = pytest.mark.skipif(not hasattr(trio.lowlevel, "FdStream"), reason="POSIX pipes only")

ECHO = "test/echo"
SEEN = "test/seen"


@asynccontextmanager
async def connected(routes: dict[str, Route], **options: Any) -> AsyncIterator[tuple[Connection, Connection]]:
    """A caller and a server connected by two pipes; the server handles ``routes``."""
    a_in, b_out = pipe()
    b_in, a_out = pipe()
    caller = Connection(a_out, a_in, name="caller")
    server = Connection(b_out, b_in, routes, name="server", **options)
    async with caller, server:
        yield caller, server


def record_writes(monkeypatch: pytest.MonkeyPatch, stream: trio.lowlevel.FdStream) -> list[bytes]:
    """The bytes of every ``os.write`` to ``stream``'s fd from now on, one item per write."""
    writes: list[bytes] = []
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        if fd == stream.fileno():
            writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    return writes


async def test_many_concurrent_requests_bigger_than_the_pipe_all_get_their_own_answer() -> None:
    routes = {ECHO: Route(ECHO, "request", echo)}
    results: dict[int, Any] = {}
    async with connected(routes) as (caller, _):

        async def call(i: int) -> None:
            results[i] = await caller.request(ECHO, {"i": i, "pad": str(i) * 20_000})

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for i in range(64):
                    nursery.start_soon(call, i)
    assert results == {i: {"i": i, "pad": str(i) * 20_000} for i in range(64)}


async def test_a_response_many_times_the_pipe_size_arrives_whole() -> None:
    big = "x" * (3 << 20)

    async def huge(params: Any) -> str:
        return big

    async with connected({ECHO: Route(ECHO, "request", huge)}) as (caller, _):
        with trio.fail_after(20):
            assert await caller.request(ECHO, {}) == big


async def test_a_request_sent_after_queued_notifications_reaches_the_peer_after_them() -> None:
    lines: list[bytes] = []

    def tap(direction: str, line: bytes) -> None:
        if direction == "in":
            lines.append(line)

    async def seen(params: Any) -> None:
        pass

    routes = {ECHO: Route(ECHO, "request", echo), SEEN: Route(SEEN, "notification", seen)}
    async with connected(routes, tap=tap) as (caller, _):
        with trio.fail_after(20):
            for i in range(2000):  # more than the high-water mark: the writer sends some while we queue
                await caller.notify(SEEN, {"i": i})
            assert await caller.request(ECHO, {"last": True}) == {"last": True}
    methods = [orjson.loads(line)["method"] for line in lines]
    assert methods == [SEEN] * 2000 + [ECHO]
    assert [orjson.loads(line)["params"]["i"] for line in lines[:-1]] == list(range(2000))


async def test_a_request_to_a_peer_whose_pipe_is_closed_fails_with_connection_closed() -> None:
    a_in, b_out = pipe()
    b_in, a_out = pipe()
    caller = Connection(a_out, a_in, name="caller")
    async with caller:
        await b_in.aclose()  # nobody will ever read what the caller writes
        with trio.fail_after(10), pytest.raises(ConnectionClosed):
            await caller.request(ECHO, {})
        await b_out.aclose()


async def test_a_request_with_others_in_flight_is_in_the_pipe_when_its_caller_parks() -> None:
    """Each request goes out in its caller's own step when nothing is queued before it, even with
    other requests waiting for answers: the peer can start on it while this side wakes the next
    caller, instead of the writer's task sending the callers' requests as one batch later."""
    a_in, b_out = pipe()
    b_in, a_out = pipe()
    os.set_blocking(b_in.fileno(), False)
    caller = Connection(a_out, a_in, name="caller")
    found: dict[int, bytes] = {}

    class AfterStep(trio.abc.Instrument):
        def __init__(self) -> None:
            self.watch: dict[trio.lowlevel.Task, int] = {}

        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            i = self.watch.pop(task, None)
            if i is not None:  # the caller's step that sent request i ended: what is in the pipe now?
                try:
                    found[i] = os.read(b_in.fileno(), 1 << 16)
                except BlockingIOError:
                    found[i] = b""

    instrument = AfterStep()
    trio.lowlevel.add_instrument(instrument)
    try:
        async with caller:
            async with trio.open_nursery() as nursery:

                async def call(i: int) -> None:
                    instrument.watch[trio.lowlevel.current_task()] = i
                    await caller.request(ECHO, {"i": i})

                for i in range(3):  # nobody answers: all three stay in flight
                    nursery.start_soon(call, i)
                with trio.fail_after(10):
                    while len(found) < 3:
                        await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
    finally:
        trio.lowlevel.remove_instrument(instrument)
        await b_in.aclose()
        await b_out.aclose()
    for i in range(3):
        assert [orjson.loads(line)["params"] for line in found[i].splitlines()] == [{"i": i}]


async def test_answers_to_requests_read_at_once_go_out_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader holds the answers of one read for one write (the last one too: it joins the
    others); a request read alone is answered in one write as well."""
    a_in, b_out = pipe()
    b_in, a_out = pipe()
    server = Connection(b_out, b_in, {ECHO: Route(ECHO, "request", echo)}, name="server")
    writes = record_writes(monkeypatch, b_out)
    answers = Messages(a_in).take

    def requests(ids: range) -> bytes:
        return b"".join(
            orjson.dumps({"jsonrpc": "2.0", "id": i, "method": ECHO, "params": {"i": i}}) + b"\n" for i in ids
        )

    async with server:
        with trio.fail_after(10):
            await a_out.send_all(requests(range(30)))
            assert [m["id"] for m in await answers(30)] == list(range(30))
            assert len(writes) == 1
            await a_out.send_all(requests(range(30, 31)))
            assert [m["result"] for m in await answers(1)] == [{"i": 30}]
            assert len(writes) == 2
    for stream in (a_in, a_out):
        await stream.aclose()


@pytest.mark.parametrize("tapped", [False, True])
async def test_request_many_writes_each_request_as_it_is_made(monkeypatch: pytest.MonkeyPatch, tapped: bool) -> None:
    """request_many writes each request of a round (the first ``limit``, then one for each answer
    of a read) on its own, when nothing is queued before it, so the peer starts on it while this
    side makes the next.  (One write per round costs 5% fewer instructions per request, but with
    64 reads in flight the pair's rate fell from 113-121k to 76k req/s: the peer waited for the
    whole round.)  A tap sees every line on its own."""
    a_in, b_out = pipe()
    b_in, a_out = pipe()
    taps: list[bytes] = []
    caller = Connection(a_out, a_in, name="caller", tap=(lambda way, line: taps.append(line)) if tapped else None)
    writes = record_writes(monkeypatch, a_out)
    requests = Messages(b_in).take

    async def answer(batch: list[Any]) -> None:
        await b_out.send_all(
            b"".join(orjson.dumps({"jsonrpc": "2.0", "id": m["id"], "result": m["params"]}) + b"\n" for m in batch)
        )

    results: list[Any] = []
    async with caller:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    results.extend(await caller.request_many(ECHO, [{"i": i} for i in range(11)], limit=8))

                nursery.start_soon(run)
                first = await requests(8)
                await answer(first[:3])  # one read of 3 answers: 3 more requests, in one write
                second = await requests(3)
                await answer(first[3:] + second)
    for stream in (a_in, a_out, b_in, b_out):
        await stream.aclose()
    assert results == [{"i": i} for i in range(11)]
    assert [m["params"] for m in first + second] == [{"i": i} for i in range(11)]
    assert [len(w.splitlines()) for w in writes] == [1] * 11
    if tapped:
        assert [orjson.loads(line)["params"] for line in taps if b'"method"' in line] == results


@pytest.mark.parametrize("tapped", [False, True])
async def test_request_many_sends_what_it_encoded_before_params_that_do_not_encode(tapped: bool) -> None:
    """Params that are not JSON (orjson's ``TypeError``) end request_many with that error: the
    requests encoded before them were sent, each its own line, and are cancelled; the one that
    did not encode is neither sent nor cancelled."""
    a_in, b_out = pipe()
    b_in, a_out = pipe()
    caller = Connection(a_out, a_in, name="caller", tap=(lambda way, line: None) if tapped else None)
    received = Messages(b_in).take
    async with caller:
        with trio.fail_after(10):
            with pytest.raises(TypeError):
                await caller.request_many(ECHO, [{"i": 0}, {"i": 1}, {"i": object()}, {"i": 3}], limit=8)
            got = await received(4)
    for stream in (a_in, a_out, b_in, b_out):
        await stream.aclose()
    requests, cancels = got[:2], got[2:]
    assert [(m["method"], m["params"]) for m in requests] == [(ECHO, {"i": 0}), (ECHO, {"i": 1})]
    assert [(m["method"], m["params"]["requestId"]) for m in cancels] == [
        ("$/cancel_request", requests[0]["id"]),
        ("$/cancel_request", requests[1]["id"]),
    ]


async def test_a_stream_of_notifications_many_reads_long_is_handled_a_slice_at_a_time() -> None:
    """Full reads of streamed updates: the reader decodes at most one slice (``_HANDOFF``
    messages) before the handlers of the updates it queued run, also where one read ends and the
    next begins, so decoded updates never pile up behind the reader."""
    watch = SliceWatch(SEEN, 3_000)  # about 100 bytes a line: several full 64 KiB reads, each ending inside a slice
    async with connected({SEEN: watch.route}) as (caller, _):
        for i in range(watch.count):
            caller.queue_notification(SEEN, {"i": i, "pad": "x" * 50})
        with trio.fail_after(20):
            await watch.done.wait()
    assert watch.handled == list(range(watch.count))
    assert watch.most <= _HANDOFF

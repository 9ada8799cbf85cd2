"""The Streamable HTTP client sends an HTTP/1.1 request's head and body in one write
(``acp_trio.transports._http_wire``): one ``sendto`` and one TCP segment per POST, so the server
takes the body with the head instead of waiting for it."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from test_transport_http import INIT, TIME_LIMIT, Recorder, SessionAgent, acp_app_served, new_session

pytest.importorskip("httpx2")  # the `remote` extra
pytest.importorskip("hypercorn")
httpcore2 = pytest.importorskip("httpcore2")

from acp_trio.transports._http_wire import _HeadWithBodyStream  # noqa: E402
from acp_trio.transports.http import connect_http  # noqa: E402


class Recording(httpcore2.AsyncNetworkStream):  # type: ignore[misc]
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.to_read = [b"HTTP/1.1 202 Accepted\r\n\r\n"]

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self.writes.append(buffer)
        await trio.lowlevel.checkpoint()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return self.to_read.pop(0) if self.to_read else b""


async def test_a_head_goes_out_with_the_write_that_follows_it() -> None:
    raw = Recording()
    stream = _HeadWithBodyStream(raw)
    await stream.write(b"POST /acp HTTP/1.1\r\n\r\n")
    assert raw.writes == []  # held
    await stream.write(b'{"jsonrpc":"2.0"}')
    await stream.write(b"")  # the end of the message (no bytes with a Content-Length)
    assert raw.writes == [b'POST /acp HTTP/1.1\r\n\r\n{"jsonrpc":"2.0"}']
    await stream.read(1024)
    await stream.write(b"GET /acp HTTP/1.1\r\n\r\n")  # the next request's head: held again
    await stream.write(b"")  # a request without a body: its head goes alone
    assert raw.writes[1:] == [b"GET /acp HTTP/1.1\r\n\r\n"]
    await stream.write(b"DELETE /acp HTTP/1.1\r\n\r\n")  # (the first write since a read already wrote)
    assert raw.writes[2:] == [b"DELETE /acp HTTP/1.1\r\n\r\n"]
    await stream.read(1024)
    await stream.write(b"POST /acp HTTP/1.1\r\n\r\n")
    await stream.read(1024)  # a read sends what is held first
    assert raw.writes[3:] == [b"POST /acp HTTP/1.1\r\n\r\n"]


async def test_connect_http_posts_each_message_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    from acp_trio.transports.asgi import AcpApp

    sent: list[bytes] = []
    send_all = trio.SocketStream.send_all

    async def recorded(self: trio.SocketStream, data: Any) -> None:
        sent.append(bytes(data))
        await send_all(self, data)

    monkeypatch.setattr(trio.SocketStream, "send_all", recorded)
    with trio.fail_after(TIME_LIMIT):
        async with acp_app_served(AcpApp(SessionAgent)) as url:
            async with connect_http(url, Recorder()) as conn:
                await conn.agent.initialize(INIT)
                assert await new_session(conn) == "s1"
    posts = [data for data in sent if data.startswith(b"POST ")]
    assert len(posts) == 2  # initialize, session/new
    for data in posts:
        _head, _, body = data.partition(b"\r\n\r\n")
        assert body.startswith(b'{"jsonrpc":"2.0"'), data  # the body went with its head

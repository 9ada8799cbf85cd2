"""The Streamable HTTP client's network streams: an HTTP/1.1 request's head goes out with its body.

httpcore2's HTTP/1.1 connection writes a request's head (request line and headers) and its body as
two writes, so a ``POST`` costs two ``sendto`` calls and, on a connection with ``TCP_NODELAY`` (what
trio sets), two TCP segments: the server reads the head, waits, then reads the body.  Measured on
a ``read`` round trip between :func:`~acp_trio.transports.http.connect_http` and
:class:`~acp_trio.transports.asgi.AcpApp` on hypercorn: the server's task steps per round trip
fall from 15.0 to 13.0 and its Python calls from 2,252 to 2,043 when the two go in one write (its
POST handler takes the body at once instead of waiting for it).

:class:`HeadWithBody` wraps httpcore2's network backend; its streams hold the first write after a
read (or the connection's first write: the head of the next request, as HTTP/1.1 without
pipelining writes a request only once the previous response was read) until the next write, which
httpcore2 makes at once (the body's first chunk, or the end of the message: an empty write when
there is no body), and send the two together.  A read sends what is held first.  For HTTP/1.1
only: an HTTP/2 connection interleaves frames of several streams.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpcore2
from httpcore2 import AsyncNetworkBackend, AsyncNetworkStream


class _HeadWithBodyStream(AsyncNetworkStream):
    """A network stream that sends a request's head with the write that follows it."""

    __slots__ = ("_head_next", "_held", "_stream")

    def __init__(self, stream: AsyncNetworkStream) -> None:
        self._stream = stream
        self._held: bytes | None = None  # a request's head, until the write that follows it
        self._head_next = True  # the next write is a request's head (the first, or the first after a read)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        held = self._held
        if held is not None:
            self._held = None
            buffer = held + buffer
        elif self._head_next and buffer:
            self._head_next = False
            self._held = buffer  # httpcore2 writes the body (or the end of the message) next, at once
            return
        await self._stream.write(buffer, timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        held = self._held
        if held is not None:  # (httpcore2 always writes the end of the message first: never here)
            self._held = None
            await self._stream.write(held, timeout)
        self._head_next = True
        return await self._stream.read(max_bytes, timeout)

    async def aclose(self) -> None:
        self._held = None
        await self._stream.aclose()

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> AsyncNetworkStream:
        return _HeadWithBodyStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class HeadWithBody(AsyncNetworkBackend):
    """httpcore2's network backend ``backend``, whose streams send a request's head with its body
    (see the module docstring); for HTTP/1.1 connection pools only."""

    def __init__(self, backend: AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> AsyncNetworkStream:
        stream = await self._backend.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return _HeadWithBodyStream(stream)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> AsyncNetworkStream:
        stream = await self._backend.connect_unix_socket(path, timeout=timeout, socket_options=socket_options)
        return _HeadWithBodyStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def send_heads_with_bodies(client: Any) -> bool:
    """Make the HTTP/1.1 ``httpx2.AsyncClient`` ``client`` (built with its default transport, no
    request made yet) send each request's head with its body; True when it could.  It reaches
    into httpx2's default transport for its httpcore2 pool (``_transport._pool``), which httpx2
    does not expose: with another layout it changes nothing and returns False."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    if not isinstance(pool, httpcore2.AsyncConnectionPool):
        return False
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(backend, AsyncNetworkBackend):
        return False
    pool._network_backend = HeadWithBody(backend)
    return True

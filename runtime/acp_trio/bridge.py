"""The bridge: any stdio ACP agent behind a remote transport, and a remote agent behind stdio.

Contract: the bridge moves ACP messages between two transports *verbatim*: it never decodes and
re-encodes them, so unknown fields, unknown methods and ``_meta`` survive byte for byte.  It only
frames: one message per line on stdio (a raw CR or LF inside a message can only be JSON
whitespace, since JSON strings escape them, so it becomes a space).  It knows nothing of ACP's
methods.  With ``--listen`` the server in front refuses what no agent gets on either remote
transport, whatever the agent would say: a JSON array (a JSON-RPC batch, answered ``-32600``),
text that is not UTF-8 (close ``1007``), a request over ``--max-connections`` (``503``) (see
:mod:`acp_trio.transports.asgi`).

- :func:`pump_agent_process`: one ACP connection's byte streams (from a server: see
  ``python -m acp_trio.bridge --listen``) served by a newly spawned stdio agent process, started
  and stopped with the same process-group ladder as :func:`acp_trio.spawn_agent`.  The remote
  side's end of input closes the agent's stdin (its shutdown signal); the agent's end of output
  closes the remote side.
- :func:`serve_bridge` (``--listen HOST:PORT -- AGENT_CMD...``): an :class:`~acp_trio.transports.asgi.AcpApp`
  whose every ACP connection, over WebSocket or Streamable HTTP on ``/acp``, gets its own agent
  process (one process per ACP connection).
- :func:`connect_bridge` (``--connect ws://host:port/acp`` or ``http://...``): this process's stdin/stdout carried
  to a remote ACP server, so an editor can spawn it as if it were a local agent.

Command line (needs ``pip install 'acp-trio[remote]'``)::

    python -m acp_trio.bridge --listen 127.0.0.1:8765 [--token T] [--allow-origin O] [--allow-host H]
                              [--idle-timeout S] [--max-connections N] -- AGENT_CMD [ARG ...]
    python -m acp_trio.bridge --connect ws://127.0.0.1:8765/acp [--header 'Authorization: Bearer T']

``--listen`` serves both remote transports; ``--connect`` speaks either (``ws://``, ``http://``).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import trio

from ._nursery import owned_nursery
from .transports.stdio import open_agent_process

log = logging.getLogger("acp_trio.bridge")

_READ = 1 << 16


async def _copy(source: trio.abc.ReceiveStream, sink: trio.abc.SendStream) -> None:
    """Copy bytes until ``source`` ends (or either side breaks), then close ``sink``."""
    try:
        while data := await source.receive_some(_READ):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        log.debug("bridge: copy stopped: %r", exc)
    finally:
        await trio.aclose_forcefully(sink)


async def pump_agent_process(
    command: str | os.PathLike[str],
    args: Sequence[str],
    from_remote: trio.abc.ReceiveStream,
    to_remote: trio.abc.SendStream,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    shutdown_timeout: float = 2.0,
    stderr_logger: logging.Logger | None = None,
) -> None:
    """Serve one ACP connection with a new agent process: ``command``/``args`` (no shell).

    ``from_remote``: the client's messages, newline-delimited (bytes); they go to the agent's
    stdin unchanged.  ``to_remote``: where the agent's stdout goes, unchanged.  Returns when both
    directions ended; the process is then shut down (stdin closed, wait, SIGTERM, wait, SIGKILL to
    its group, each step ``shutdown_timeout`` seconds).  Raises ``OSError`` naming the command when
    it cannot be started.
    """
    async with open_agent_process(
        command, args, env=env, cwd=cwd, shutdown_timeout=shutdown_timeout, stderr_logger=stderr_logger
    ) as agent:
        log.info("bridge: agent pid %d serves a connection", agent.pid)
        async with owned_nursery() as nursery:

            async def inbound() -> None:
                await _copy(from_remote, agent.stdin)  # the remote ended: the agent sees end of input
                await trio.sleep(shutdown_timeout)  # let it answer what it can, then the ladder
                nursery.cancel_scope.cancel()

            async def outbound() -> None:
                await _copy(agent.stdout, to_remote)  # the agent's output ended: the remote side is closed
                nursery.cancel_scope.cancel()

            nursery.start_soon(inbound)
            nursery.start_soon(outbound)
        log.info("bridge: agent pid %d: the connection ended", agent.pid)


async def serve_bridge(
    command: Sequence[str],
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    token: str | None = None,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
    shutdown_timeout: float = 2.0,
    idle_timeout: float | None = 300.0,
    max_connections: int | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the stdio agent ``command`` (program and arguments) on ``host:port/acp`` (WebSocket and
    Streamable HTTP) until cancelled: each ACP connection gets its own agent process, its messages
    passed verbatim.

    ``token``/``allowed_origins``/``allowed_hosts``/``idle_timeout``/``max_connections``: as for
    :class:`~acp_trio.transports.asgi.AcpApp` (``idle_timeout``: seconds after which an abandoned
    Streamable HTTP connection, and so its agent process, is shut down; ``max_connections``: agent
    processes at once, one more connection is refused ``503`` before any process starts).  ``task_status``:
    started with the bound URLs.  Raises ``OSError`` naming the command at once when it cannot run.
    """
    from .transports.asgi import AcpApp, serve
    from .transports.stdio import _resolve_command

    if not command:
        raise ValueError("the bridge needs an agent command after --")
    _resolve_command(command[0], None, None)  # a missing agent is named before anything listens
    program, args = command[0], list(command[1:])

    async def one_connection(connection_id: str, to_client: trio.abc.SendStream, from_client: Any) -> None:
        log.info("bridge: connection %s…", connection_id[:8])
        await pump_agent_process(program, args, from_client, to_client, shutdown_timeout=shutdown_timeout)

    app = AcpApp(
        serve_streams=one_connection,
        token=token,
        allowed_origins=allowed_origins,
        allowed_hosts=allowed_hosts,
        idle_timeout=idle_timeout,
        max_connections=max_connections,
    )
    await serve(app, host, port, task_status=task_status)


async def connect_bridge(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    stdin: trio.abc.ReceiveStream | None = None,
    stdout: trio.abc.SendStream | None = None,
) -> None:
    """Carry ACP messages between this process's stdin/stdout (or the given streams) and the remote
    ACP server at ``url``, verbatim, until either side ends.

    ``ws://`` or ``wss://``: each stdin line is sent as one text message; each message received is
    written as one line.  The end of stdin closes the WebSocket normally; the end of the WebSocket
    closes stdout.  ``http://`` or ``https://`` (Streamable HTTP): each stdin line is POSTed
    (:func:`acp_trio.transports.http.open_exchange`), each SSE event is written as one line; HTTP
    failures that concern one request come back as its JSON-RPC error, those that end the
    transport close stdout (the reason is logged); the end of stdin sends ``DELETE``.
    ``headers``: extra HTTP headers (``Authorization``).  Raises
    :class:`~acp_trio.transports.websocket.WebSocketConnectError` naming the URL when a WebSocket
    cannot be opened.
    """
    if url.startswith(("http://", "https://")):
        await _connect_http_bridge(url, headers, stdin, stdout)
        return
    from trio_websocket import ConnectionClosed as WebSocketClosed
    from trio_websocket import HandshakeError, open_websocket_url

    from .transports.websocket import DEFAULT_MAX_MESSAGE_BYTES, WebSocketConnectError, text_to_line

    source, sink = _stdio(stdin, stdout)
    extra = [(name.encode(), value.encode()) for name, value in (headers or {}).items()]
    try:
        async with open_websocket_url(url, extra_headers=extra, max_message_size=DEFAULT_MAX_MESSAGE_BYTES) as ws:

            async def upstream() -> None:
                async for line in _lines_of(source, DEFAULT_MAX_MESSAGE_BYTES):
                    # a text frame must be UTF-8: bytes that are not become U+FFFD
                    await ws.send_message(line.decode("utf-8", "replace"))
                await ws.aclose()  # end of input: a normal close

            async def downstream() -> None:
                try:
                    while True:
                        message = await ws.get_message()
                        if isinstance(message, str):
                            await sink.send_all(text_to_line(message) + b"\n")
                except WebSocketClosed:
                    pass
                finally:
                    await trio.aclose_forcefully(sink)

            async with owned_nursery() as nursery:

                async def down_then_stop() -> None:
                    await downstream()
                    nursery.cancel_scope.cancel()  # the remote is gone: nothing more to carry

                nursery.start_soon(upstream)
                nursery.start_soon(down_then_stop)
    except HandshakeError as exc:
        raise WebSocketConnectError(url, f"cannot connect to {url}: {exc}") from exc
    except OSError as exc:
        raise WebSocketConnectError(url, f"cannot connect to {url}: {exc}") from exc


async def _connect_http_bridge(
    url: str,
    headers: Mapping[str, str] | None,
    stdin: trio.abc.ReceiveStream | None,
    stdout: trio.abc.SendStream | None,
) -> None:
    from .transports.http import DEFAULT_MAX_MESSAGE_BYTES, open_exchange

    source, sink = _stdio(stdin, stdout)
    async with open_exchange(url, headers=headers) as exchange, owned_nursery() as nursery:

        async def upstream() -> None:
            try:
                async for line in _lines_of(source, DEFAULT_MAX_MESSAGE_BYTES):
                    if line.strip():
                        await exchange.post(line)
            except trio.BrokenResourceError:
                return  # the transport closed: downstream ends too
            nursery.cancel_scope.cancel()  # end of input: DELETE (leaving open_exchange)

        async def downstream() -> None:
            await _copy(exchange.inbox, sink)
            nursery.cancel_scope.cancel()  # the remote is gone: nothing more to carry

        nursery.start_soon(upstream)
        nursery.start_soon(downstream)


def _stdio(
    stdin: trio.abc.ReceiveStream | None, stdout: trio.abc.SendStream | None
) -> tuple[trio.abc.ReceiveStream, trio.abc.SendStream]:
    """The given streams, or duplicates of this process's stdin and stdout."""
    source = stdin if stdin is not None else trio.lowlevel.FdStream(os.dup(0))
    sink = stdout if stdout is not None else trio.lowlevel.FdStream(os.dup(1))
    return source, sink


async def _lines_of(source: trio.abc.ReceiveStream, max_bytes: int) -> AsyncIterator[bytes]:
    """The NDJSON lines read from ``source`` until it ends; a line over ``max_bytes`` is dropped with a warning."""
    from ._core import LineFramer, OversizedMessage

    framer = LineFramer(max_bytes)
    while True:
        data = await source.receive_some(_READ)
        for line in framer.feed(data) if data else framer.close():
            if isinstance(line, OversizedMessage):
                log.warning("bridge: dropped a line of %d bytes from stdin", line.size)
            else:
                yield line
        if not data:
            return


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m acp_trio.bridge``: see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m acp_trio.bridge",
        description="Serve a stdio ACP agent remotely (--listen), or carry stdio to a remote one (--connect).",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--listen", metavar="HOST:PORT", help="serve AGENT_CMD on HOST:PORT/acp (WebSocket, HTTP)")
    mode.add_argument(
        "--connect", metavar="URL", help="carry stdin/stdout to the ACP server at URL (ws://... or http://...)"
    )
    parser.add_argument("--token", help="--listen: require Authorization: Bearer TOKEN")
    parser.add_argument("--allow-origin", action="append", default=[], help="--listen: a browser origin to allow")
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        help="--listen without --token on loopback: a Host name to accept besides localhost and IP addresses",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="--listen: shut down an HTTP connection (and its agent) idle this long (default 300)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="--listen: at most N connections (agent processes) at once; more are refused 503",
    )
    parser.add_argument("--header", action="append", default=[], help="--connect: an extra header, 'Name: value'")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- AGENT_CMD [ARG ...] (with --listen)")
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    if options.listen:
        host, _, port = options.listen.rpartition(":")
        if not host or not port.isdigit() or not command:
            parser.error("--listen HOST:PORT -- AGENT_CMD [ARG ...]")

        async def listen() -> None:
            async with trio.open_nursery() as nursery:
                urls = await nursery.start(
                    functools.partial(
                        serve_bridge,
                        command,
                        host.strip("[]"),
                        int(port),
                        token=options.token,
                        allowed_origins=options.allow_origin,
                        allowed_hosts=options.allow_host,
                        idle_timeout=options.idle_timeout,
                        max_connections=options.max_connections,
                    )
                )
                print(f"bridge: serving {' '.join(command)} on {urls[0].replace('http', 'ws', 1)}/acp", file=sys.stderr)

        trio.run(listen)
        return
    if command:
        parser.error("--connect takes no agent command")
    headers = header_options(parser, options.header)
    trio.run(functools.partial(connect_bridge, options.connect, headers=headers))


def header_options(parser: argparse.ArgumentParser, values: Sequence[str]) -> dict[str, str]:
    """``--header 'Name: value'`` options as a dict; a value without a colon is a usage error."""
    headers = {}
    for header in values:
        name, sep, value = header.partition(":")
        if not sep:
            parser.error(f"--header {header!r}: expected 'Name: value'")
        headers[name.strip()] = value.strip()
    return headers


__all__ = ["connect_bridge", "main", "pump_agent_process", "serve_bridge"]


if __name__ == "__main__":
    main()

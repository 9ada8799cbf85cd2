"""The bridge: any stdio ACP agent behind a remote transport, and a remote agent behind stdio.

Contract: the bridge moves ACP messages between two transports *verbatim*: it never decodes and
re-encodes them, so unknown fields, unknown methods and ``_meta`` survive byte for byte.  It only
frames: one message per line on stdio (a raw CR or LF inside a message can only be JSON
whitespace, since JSON strings escape them, so it becomes a space).  It knows nothing of ACP's
methods.  The two exceptions are asked for by name: ``--listen --speak`` (:func:`adapt_agent_process`),
where the v1 ⇄ v2 adapter decodes, translates and re-encodes every message, on the terms of
:mod:`acp_trio.adapt`; and ``--listen --detach`` (:func:`open_detach_host`), where the session
host's router reads envelopes and session ids, rewrites request ids and numbers each
``session/update`` in its ``_meta``.  With ``--listen`` the server in front refuses what no agent gets on either remote
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
  process (one process per ACP connection).  SIGTERM or SIGINT (Ctrl-C) stops it: connections
  closed, every agent process stopped by the ladder, exit status 0.
- :func:`adapt_agent_process` (``--listen HOST:PORT --speak 1|2 -- AGENT_CMD...``): as
  :func:`pump_agent_process`, but through the v1 ⇄ v2 adapter (:mod:`acp_trio.adapt`), run in
  this process on the connection: the remote client is spoken protocol version ``--speak``, the
  agent the other one.  This is the one mode that decodes messages (it has to, to translate
  them); what the adapter keeps and what it cannot translate is :mod:`acp_trio.adapt`'s contract.
- :func:`open_detach_host` (``--listen HOST:PORT --detach -- AGENT_CMD...``): the session host
  (:mod:`acp_trio.host`) in front of stdio agent processes, one per agent instance: a client's
  connection ending *detaches* it, and the agent process goes on while it has live sessions; a
  client that comes back resumes (v2 ``session/resume``, with ``replayFrom`` ``start`` or the host's
  cursor) or loads (v1 ``session/load``) a live session and gets what it missed, then live updates;
  the agent's requests wait for a client.  Here the bridge is ACP-aware (the host's router: envelopes,
  ids and the session-scoped methods; each message's payload is still passed as the agent wrote it,
  with the host's ``_meta`` number added to each ``session/update``).  The rules are the host's
  (``docs/site/guides/host.md``).
- :func:`connect_bridge` (``--connect ws://host:port/acp`` or ``http://...``): this process's stdin/stdout carried
  to a remote ACP server, so an editor can spawn it as if it were a local agent.

Command line (needs ``pip install 'acp-trio[remote]'``)::

    python -m acp_trio.bridge --listen 127.0.0.1:8765 [--token T | --token-file PATH]
                              [--allow-origin O] [--allow-host H] [--idle-timeout S] [--max-connections N]
                              [--speak 1|2 [--no-client-fs] [--cancel-grace S]
                               [--ext-request _NAME ...] [--ext-notification _NAME ...]]
                              [--detach [--detached-ttl S] [--max-detached-sessions N]
                               [--unattended-timeout S] [--unattended-policy wait|reject|cancel]
                               [--max-agent-processes N] [--journal PATH]]
                              -- AGENT_CMD [ARG ...]
    python -m acp_trio.bridge --connect ws://127.0.0.1:8765/acp [--header 'Authorization: Bearer T']

``--listen`` serves both remote transports; ``--connect`` speaks either (``ws://``, ``http://``).
``--speak`` is for ``--listen`` only: ``--connect`` carries stdio verbatim, and an editor that
needs the other version from a remote agent runs the stdio adapter around it (``python -m
acp_trio.adapt --speak 1 -- python -m acp_trio.bridge --connect URL``); the combination is a
usage error that says so.  ``--detach --speak N`` puts the adapter between the session host and
each agent process: the host and its clients speak version ``N``.  ``--token-file PATH`` gives
several bearer tokens, each with its principal (:func:`read_token_file`), instead of one
``--token`` (the two do not combine), and keeps them out of the command line (``ps``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import orjson
import trio

from ._nursery import owned_nursery
from ._signals import run_until_signalled
from .transports.stdio import open_agent_process

if TYPE_CHECKING:
    from .host import Journal, SessionHost

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


async def adapt_agent_process(
    speak: int,
    command: str | os.PathLike[str],
    args: Sequence[str],
    from_remote: trio.abc.ReceiveStream,
    to_remote: trio.abc.SendStream,
    *,
    client_fs: bool = True,
    cancel_grace: float | None = None,
    ext_requests: Sequence[str] = (),
    ext_notifications: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    shutdown_timeout: float = 2.0,
    stderr_logger: logging.Logger | None = None,
    name: str = "bridge-speak",
) -> None:
    """Serve one ACP connection with a new agent process through the v1 ⇄ v2 adapter.

    ``speak``: the protocol version spoken to the remote client, 1 or 2; the agent ``command`` /
    ``args`` (no shell) is spoken the other one (``speak=1``: a v2-only agent,
    :class:`acp_trio.adapt.V1Front`; ``speak=2``: a v1-only agent, :class:`acp_trio.adapt.V2Front`).
    ``from_remote`` / ``to_remote``: the client's NDJSON byte streams, as for
    :func:`pump_agent_process`, here served by an :class:`~acp_trio.AgentSideConnection` in this
    process whose handler is the adapter's front; the agent is spawned with
    :func:`acp_trio.spawn_agent` (``env``, ``cwd``, ``shutdown_timeout`` seconds per step of its
    shutdown ladder, ``stderr_logger``) and its connection is the front's back.  No adapter process
    and no second stdio hop: each message is decoded once, translated, and encoded once.

    ``client_fs`` (``speak=2`` only): answer the agent's ``fs/*`` and ``terminal/*`` calls inside
    each session's ``cwd`` on this host (default), or refuse them with -32601.  ``cancel_grace``
    (seconds; ``None``: :data:`acp_trio.adapt.DEFAULT_CANCEL_GRACE`), ``ext_requests``,
    ``ext_notifications``: as for the fronts.  ``name``: the client connection's name in logs.

    Returns when the client's connection ended (the agent is then shut down) or the agent's did
    (prompts still waiting get the adapter's -32603 first, then the client's side is closed).
    Raises ``ValueError`` for another ``speak`` or for ``client_fs=False`` with ``speak=1``, and
    ``OSError`` naming the command when it cannot be started.
    """
    from ._roles import AgentSideConnection
    from .adapt import DEFAULT_CANCEL_GRACE, V1Front, V2Front, _run_front

    if speak not in (1, 2):
        raise ValueError(f"speak is the protocol version spoken to the client, 1 or 2, got {speak!r}")
    _check_speak(speak, client_fs)
    grace = DEFAULT_CANCEL_GRACE if cancel_grace is None else cancel_grace
    front: V1Front | V2Front
    if speak == 1:
        front = V1Front(cancel_grace=grace, ext_requests=ext_requests, ext_notifications=ext_notifications)
    else:
        front = V2Front(
            client_fs=client_fs, cancel_grace=grace, ext_requests=ext_requests, ext_notifications=ext_notifications
        )

    async def serve_client() -> None:
        async with AgentSideConnection(front, to_remote, from_remote, name=name) as conn:
            await conn.wait_closed()

    try:
        await _run_front(
            front,
            [os.fspath(command), *args],
            serve_client,
            closing="the agent behind the bridge closed its connection",
            started=lambda agent: log.info(
                "bridge: agent pid %d serves a connection (adapted, v%d to the client)", agent.process.pid, speak
            ),
            env=env,
            cwd=cwd,
            shutdown_timeout=shutdown_timeout,
            stderr_logger=stderr_logger,
        )
    finally:
        await trio.aclose_forcefully(to_remote)
    log.info("bridge: an adapted connection ended")


def _check_speak(speak: int | None, client_fs: bool) -> None:
    if speak not in (None, 1, 2):
        raise ValueError(
            f"speak is the protocol version spoken to the client, 1 or 2 (or None: verbatim), got {speak!r}"
        )
    if not client_fs and speak != 2:
        raise ValueError("client_fs=False is for speak=2: only a v1 agent behind a v2 client calls fs/* and terminal/*")


def _check_adapter(
    speak: int | None, client_fs: bool, ext_requests: Sequence[str], ext_notifications: Sequence[str]
) -> None:
    """The adapter's options: ``ValueError`` for what :func:`serve_bridge` refuses."""
    _check_speak(speak, client_fs)
    if speak is None and (ext_requests or ext_notifications):
        raise ValueError("ext_requests / ext_notifications are for speak=1 or 2: without it every message passes")
    for method in (*ext_requests, *ext_notifications):
        if not method.startswith("_"):
            raise ValueError(f"extension method names start with '_' (extensibility.mdx), got {method!r}")


async def _refuse_instance(stream: trio.abc.HalfCloseableStream, limit: int) -> None:
    """Answer the ``initialize`` that started an agent instance (the first line the host sends it)
    with the ``max_agent_processes`` error, and end the instance."""
    from ._core import INTERNAL_ERROR, LineFramer, RequestError

    framer = LineFramer(1 << 24)
    first: bytes | None = None
    while first is None:
        data = await stream.receive_some(_READ)
        lines = [line for line in (framer.feed(data) if data else framer.close()) if isinstance(line, bytes)]
        if lines:
            first = lines[0]
        elif not data:
            return  # the client left before its initialize reached here
    try:
        request_id = orjson.loads(first).get("id")
    except (orjson.JSONDecodeError, AttributeError):
        return
    message = (
        f"the bridge runs its maximum of {limit} agent processes (--max-agent-processes): try again once "
        "a session ends, or reconnect to your own process with its attach token (_meta acp-trio/attach)"
    )
    error = RequestError(INTERNAL_ERROR, message, {"reason": "max_agent_processes", "max": limit})
    log.warning("bridge: an initialize refused: %d agent processes run (max_agent_processes)", limit)
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error.to_wire()}) + b"\n")


@asynccontextmanager
async def open_detach_host(
    command: Sequence[str],
    *,
    journal: Journal | None = None,
    detached_ttl: float | None = 3600.0,
    max_detached_sessions: int | None = 100,
    unattended_timeout: float | None = None,
    unattended_policy: Literal["wait", "reject", "cancel"] = "wait",
    max_agent_processes: int | None = None,
    speak: int | None = None,
    client_fs: bool = True,
    cancel_grace: float | None = None,
    ext_requests: Sequence[str] = (),
    ext_notifications: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    shutdown_timeout: float = 2.0,
) -> AsyncIterator[SessionHost]:
    """A :class:`~acp_trio.host.SessionHost` whose agent instances are processes of the stdio agent
    ``command`` (program and arguments, no shell), one per instance (``async with``; leaving the
    block stops them all).  Serve clients with ``AcpApp(host=host, token={token: principal})``
    (what ``--listen --detach`` does; each connection under its token's principal) or ``host.connect``.

    Each client connection's ``initialize`` starts a process (its *home* instance, as the host's
    rules say); a session made there lives in the host, owned by that process, which keeps running
    while the session lives, with or without a client attached.  A process with no client and no
    live session ends: its stdin closes, then the ladder of :func:`pump_agent_process` (wait,
    SIGTERM, SIGKILL to its group, each ``shutdown_timeout`` seconds).  ``journal``: where the
    sessions' updates are numbered and kept (default: :func:`acp_trio.host.open_session_host`'s, a
    SQLite journal in a temporary directory removed when the host closes; ``SqliteSessionStore(PATH).journal()``
    keeps the file).
    ``detached_ttl``, ``max_detached_sessions``, ``unattended_timeout``, ``unattended_policy``: as
    for :func:`acp_trio.host.open_session_host` (a session closed by them ends its process once it
    has no other).  ``env``, ``cwd``: the agent's.

    ``max_agent_processes``: agent processes at once (``None``: no limit), counted from their start
    to their exit (the shutdown ladder included).  An ``initialize`` that needs one more (a client
    without an attach token, or with one of an ended instance) is answered -32603 with ``data``
    ``{"reason": "max_agent_processes", "max": N}``, and its connection's home instance has ended
    (its later requests are answered -32603, the instance ended); no process starts.  The bound covers what
    ``max_connections`` and ``max_detached_sessions`` do not: processes kept for sessions a client
    attached to on instances that are not its home.

    ``speak`` (1 or 2): each process is served through the v1 ⇄ v2 adapter, as by
    :func:`adapt_agent_process` (``client_fs``, ``cancel_grace``, ``ext_requests``,
    ``ext_notifications`` as there): the adapter sits between the host's router and the process, so
    the router, its journal and every client speak version ``speak`` and the agent the other one
    (client ⇄ router ⇄ adapter ⇄ agent process).  Raises ``OSError`` naming the command at once when
    it cannot run, ``ValueError`` for an empty command, a bad limit, or a ``speak`` / ``client_fs``
    / extension name that :func:`serve_bridge` refuses.
    """
    from .host import open_session_host
    from .transports.stdio import _resolve_command

    if not command:
        raise ValueError("the bridge needs an agent command after --")
    _check_adapter(speak, client_fs, ext_requests, ext_notifications)
    if max_agent_processes is not None and max_agent_processes < 1:
        raise ValueError(f"max_agent_processes must be >= 1 or None, got {max_agent_processes!r}")
    _resolve_command(command[0], env, cwd)  # a missing agent is named before anything is served
    program, args = command[0], list(command[1:])
    running = 0

    async def serve_agent(stream: trio.abc.HalfCloseableStream) -> None:
        nonlocal running
        if max_agent_processes is not None and running >= max_agent_processes:
            await _refuse_instance(stream, max_agent_processes)
            return
        running += 1
        try:
            await serve_process(stream)
        finally:
            running -= 1

    async def serve_process(stream: trio.abc.HalfCloseableStream) -> None:
        if speak is None:
            await pump_agent_process(program, args, stream, stream, env=env, cwd=cwd, shutdown_timeout=shutdown_timeout)
            return
        await adapt_agent_process(
            speak,
            program,
            args,
            stream,
            stream,
            client_fs=client_fs,
            cancel_grace=cancel_grace,
            ext_requests=ext_requests,
            ext_notifications=ext_notifications,
            env=env,
            cwd=cwd,
            shutdown_timeout=shutdown_timeout,
            name=f"bridge-detach-v{speak}",
        )

    if speak is not None:
        from . import adapt  # noqa: F401  (imported now rather than by the first client's initialize)

    async with open_session_host(
        None,
        journal=journal,
        detached_ttl=detached_ttl,
        max_detached_sessions=max_detached_sessions,
        unattended_timeout=unattended_timeout,
        unattended_policy=unattended_policy,
        serve_agent=serve_agent,
    ) as host:
        yield host


async def serve_bridge(
    command: Sequence[str],
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    token: str | Mapping[str, str] | None = None,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
    shutdown_timeout: float = 2.0,
    idle_timeout: float | None = 300.0,
    max_connections: int | None = None,
    speak: int | None = None,
    client_fs: bool = True,
    cancel_grace: float | None = None,
    ext_requests: Sequence[str] = (),
    ext_notifications: Sequence[str] = (),
    detach: bool = False,
    detached_ttl: float | None = 3600.0,
    max_detached_sessions: int | None = 100,
    unattended_timeout: float | None = None,
    unattended_policy: Literal["wait", "reject", "cancel"] = "wait",
    max_agent_processes: int | None = None,
    journal: str | os.PathLike[str] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the stdio agent ``command`` (program and arguments) on ``host:port/acp`` (WebSocket and
    Streamable HTTP) until cancelled: each ACP connection gets its own agent process, its messages
    passed verbatim; or, with ``speak`` (1 or 2), translated by the v1 ⇄ v2 adapter in this process
    (:func:`adapt_agent_process`: the client is spoken version ``speak``, the agent the other;
    ``client_fs``, ``cancel_grace``, ``ext_requests``, ``ext_notifications`` as there).

    ``token``/``allowed_origins``/``allowed_hosts``/``idle_timeout``/``max_connections``: as for
    :class:`~acp_trio.transports.asgi.AcpApp` (``token``: one bearer token, or ``{token: principal}``,
    as :func:`read_token_file` reads one; ``idle_timeout``: seconds after which an abandoned
    Streamable HTTP connection, and so its agent process, is shut down; ``max_connections``: agent
    processes at once, one more connection is refused ``503`` before any process starts).  ``task_status``:
    started with the bound URLs.

    ``detach``: the agent processes run behind a session host (:func:`open_detach_host`, with
    ``detached_ttl``, ``max_detached_sessions``, ``unattended_timeout``, ``unattended_policy``,
    ``max_agent_processes``, and ``speak`` and its options: the adapter then runs between the host
    and each process): they outlive their clients' connections while they have live sessions
    (``max_connections`` then counts connections, not processes: ``max_agent_processes`` does).
    With a ``token`` mapping, each connection is served under its token's principal, and a session
    made under one principal is attached to only by a connection of the same
    (``docs/site/guides/host.md``).  ``journal``: a SQLite file for the
    sessions' journal (:class:`~acp_trio.session_store.SqliteSessionStore`, kept when the bridge stops;
    default: a SQLite file in a private temporary directory, removed when the bridge stops).

    Raises ``OSError`` naming the command at once when it cannot run, ``ValueError`` for an empty
    command, a ``speak`` / ``client_fs`` that :func:`adapt_agent_process` refuses, or a ``journal``
    or ``max_agent_processes`` without ``detach``.
    """
    from .transports.asgi import AcpApp, serve
    from .transports.stdio import _resolve_command

    if not command:
        raise ValueError("the bridge needs an agent command after --")
    _check_adapter(speak, client_fs, ext_requests, ext_notifications)
    if journal is not None and not detach:
        raise ValueError("journal is for detach: without it nothing is journaled")
    if max_agent_processes is not None and not detach:
        raise ValueError("max_agent_processes is for detach: without it max_connections bounds the processes")
    _resolve_command(command[0], None, None)  # a missing agent is named before anything listens
    program, args = command[0], list(command[1:])
    app_options: dict[str, Any] = {
        "token": token,
        "allowed_origins": allowed_origins,
        "allowed_hosts": allowed_hosts,
        "idle_timeout": idle_timeout,
        "max_connections": max_connections,
    }
    if detach:
        await _serve_detached(
            command,
            host,
            port,
            app_options,
            journal=journal,
            detached_ttl=detached_ttl,
            max_detached_sessions=max_detached_sessions,
            unattended_timeout=unattended_timeout,
            unattended_policy=unattended_policy,
            shutdown_timeout=shutdown_timeout,
            host_options={
                "max_agent_processes": max_agent_processes,
                "speak": speak,
                "client_fs": client_fs,
                "cancel_grace": cancel_grace,
                "ext_requests": ext_requests,
                "ext_notifications": ext_notifications,
            },
            task_status=task_status,
        )
        return
    if speak is not None:
        from . import adapt  # noqa: F401  (imported now rather than by the first client's connection)

    async def one_connection(connection_id: str, to_client: trio.abc.SendStream, from_client: Any) -> None:
        log.info("bridge: connection %s…", connection_id[:8])
        if speak is None:
            await pump_agent_process(program, args, from_client, to_client, shutdown_timeout=shutdown_timeout)
            return
        await adapt_agent_process(
            speak,
            program,
            args,
            from_client,
            to_client,
            client_fs=client_fs,
            cancel_grace=cancel_grace,
            ext_requests=ext_requests,
            ext_notifications=ext_notifications,
            shutdown_timeout=shutdown_timeout,
            name=f"bridge-v{speak}-{connection_id[:8]}",
        )

    app = AcpApp(serve_streams=one_connection, **app_options)
    await serve(app, host, port, task_status=task_status)


async def _serve_detached(
    command: Sequence[str],
    host: str,
    port: int,
    app_options: dict[str, Any],
    *,
    journal: str | os.PathLike[str] | None,
    detached_ttl: float | None,
    max_detached_sessions: int | None,
    unattended_timeout: float | None,
    unattended_policy: Literal["wait", "reject", "cancel"],
    shutdown_timeout: float,
    host_options: dict[str, Any],
    task_status: trio.TaskStatus[list[str]],
) -> None:
    """``serve_bridge(detach=True)``: the host of :func:`open_detach_host` served on ``host:port``,
    each connection under the principal of its bearer token (``AcpApp(host=...)``)."""
    from .transports.asgi import AcpApp, serve

    store = None
    if journal is not None:
        from .session_store import SqliteSessionStore

        store = SqliteSessionStore(os.fspath(journal))
    try:
        async with open_detach_host(
            command,
            journal=None if store is None else store.journal(),
            detached_ttl=detached_ttl,
            max_detached_sessions=max_detached_sessions,
            unattended_timeout=unattended_timeout,
            unattended_policy=unattended_policy,
            shutdown_timeout=shutdown_timeout,
            **host_options,
        ) as session_host:
            app = AcpApp(host=session_host, **app_options)
            await serve(app, host, port, task_status=task_status)
    finally:
        if store is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(store.close)


_BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750 § 2.1, b64token


def read_token_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """The bearer tokens of a token file, as ``{token: principal}`` (``AcpApp``'s ``token=``).

    The file (UTF-8; a byte order mark is skipped) has one ``PRINCIPAL TOKEN`` line per token: the
    principal (who holds the token: one word, several tokens may name the same) and the token
    (RFC 6750 § 2.1 ``b64token``: letters, digits, ``-._~+/``, then optional ``=``;
    ``python -c 'import secrets; print(secrets.token_urlsafe(32))'`` makes one), separated by
    spaces or tabs.  Blank lines and lines whose first character other
    than a space is ``#`` are skipped.  A file other users may read is logged as a warning (the
    tokens are secrets: ``chmod 600`` it).

    Raises ``ValueError`` naming the file and the line (never a token) for a line that is not two
    words, a token that is not a ``b64token``, a token given twice, a file with no token, or one
    that is not UTF-8; ``OSError`` when the file cannot be read.
    """
    name = os.fspath(path)
    with open(name, "rb") as file:
        mode = os.fstat(file.fileno()).st_mode
        data = file.read()
    try:
        text = data.decode("utf-8-sig")  # a byte order mark (some editors write one) is no principal's
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    if mode & 0o077:
        log.warning(
            "bridge: %s holds bearer tokens and other users may read it (mode %o): chmod 600 it", name, mode & 0o777
        )
    tokens: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) != 2:
            raise ValueError(f"{name}, line {number}: expected 'PRINCIPAL TOKEN' (two words), got {len(words)} word(s)")
        principal, token = words
        if not _BEARER_TOKEN.fullmatch(token):
            raise ValueError(
                f"{name}, line {number}: the token of {principal!r} is not a bearer token "
                "(RFC 6750 § 2.1: letters, digits and -._~+/, then optional '=')"
            )
        if token in tokens:
            raise ValueError(f"{name}, line {number}: the token of line {lines[token]} again: each token once")
        tokens[token] = principal
        lines[token] = number
    if not tokens:
        raise ValueError(f"{name}: no 'PRINCIPAL TOKEN' line: no client could connect")
    return tokens


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
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help="--listen: accept the bearer tokens of PATH, one 'PRINCIPAL TOKEN' line each (instead of --token; "
        "with --detach, a session is attached to only under its maker's principal)",
    )
    parser.add_argument("--allow-origin", action="append", default=[], help="--listen: a browser origin to allow")
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        help="--listen without a token on loopback: a Host name to accept besides localhost and IP addresses",
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
        help="--listen: at most N connections at once (without --detach, as many agent processes); "
        "more are refused 503",
    )
    parser.add_argument(
        "--speak",
        type=int,
        choices=(1, 2),
        help="--listen: speak this protocol version to each client, the other one to the agent (the v1/v2 adapter)",
    )
    parser.add_argument(
        "--no-client-fs",
        action="store_true",
        help="--speak 2: refuse the agent's fs/* and terminal/* (-32601) rather than run them in the session's cwd",
    )
    parser.add_argument(
        "--cancel-grace",
        type=float,
        metavar="SECONDS",
        help="--speak: seconds a cancelled turn waits for the agent to end it (default 5)",
    )
    parser.add_argument(
        "--ext-request", action="append", default=[], metavar="_NAME", help="--speak: an extension request to forward"
    )
    parser.add_argument(
        "--ext-notification",
        action="append",
        default=[],
        metavar="_NAME",
        help="--speak: an extension notification to forward",
    )
    parser.add_argument(
        "--detach",
        action="store_true",
        help="--listen: agent processes outlive their clients' connections; a client resumes (v2) or loads (v1) "
        "a live session and gets what it missed (the session host)",
    )
    parser.add_argument(
        "--detached-ttl",
        type=float,
        metavar="SECONDS",
        help="--detach: close a session this long without a client (its turn cancelled; default 3600)",
    )
    parser.add_argument(
        "--max-detached-sessions",
        type=int,
        metavar="N",
        help="--detach: at most N sessions without a client; one more closes the oldest (default 100)",
    )
    parser.add_argument(
        "--unattended-timeout",
        type=float,
        metavar="SECONDS",
        help="--detach: resolve an agent's request no client answered this long, by --unattended-policy",
    )
    parser.add_argument(
        "--unattended-policy",
        choices=("wait", "reject", "cancel"),
        help="--detach: what --unattended-timeout does: wait (default), reject, cancel (the turn, then reject)",
    )
    parser.add_argument(
        "--max-agent-processes",
        type=int,
        metavar="N",
        help="--detach: at most N agent processes at once; an initialize that needs one more is refused "
        "(default: no limit)",
    )
    parser.add_argument(
        "--journal",
        metavar="PATH",
        help="--detach: keep the sessions' updates in this SQLite file, kept when the bridge stops "
        "(default: a SQLite file in a private temporary directory, removed when the bridge stops)",
    )
    parser.add_argument("--header", action="append", default=[], help="--connect: an extra header, 'Name: value'")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- AGENT_CMD [ARG ...] (with --listen)")
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    speak_options = _speak_options(options)
    if options.connect and (options.speak or speak_options):
        given = "--speak" if options.speak else speak_options[0]
        parser.error(
            f"{given} is for --listen; --connect carries stdio verbatim.  To speak the other protocol version"
            " to a remote agent, run the adapter around it: python -m acp_trio.adapt --speak 1|2 --"
            " python -m acp_trio.bridge --connect URL"
        )
    if options.listen and not options.speak and speak_options:
        parser.error(f"{speak_options[0]} needs --speak 1|2 (without it the bridge passes every message verbatim)")
    if options.no_client_fs and options.speak == 1:
        parser.error("--no-client-fs is for --speak 2 (a v2 client has no file system; a v1 one serves its own)")
    for method in (*options.ext_request, *options.ext_notification):
        if not method.startswith("_"):
            parser.error(f"extension method names start with '_': {method!r}")
    detach_options = _detach_options(options)
    if options.connect and (options.detach or detach_options):
        parser.error(f"{'--detach' if options.detach else detach_options[0]} is for --listen")
    if options.listen and not options.detach and detach_options:
        parser.error(f"{detach_options[0]} needs --detach")
    if options.connect and options.token_file is not None:
        parser.error("--token-file is for --listen (--connect sends a token with --header 'Authorization: Bearer T')")
    if options.token is not None and options.token_file is not None:
        parser.error(
            "--token and --token-file do not combine: put the token in the file as a line 'PRINCIPAL TOKEN' "
            "(--token has no principal, and shows in ps)"
        )
    for flag, value in (("--detached-ttl", options.detached_ttl), ("--unattended-timeout", options.unattended_timeout)):
        if value is not None and not value > 0:
            parser.error(f"{flag} takes positive seconds, got {value}")
    if options.max_detached_sessions is not None and options.max_detached_sessions < 0:
        parser.error(f"--max-detached-sessions takes N >= 0, got {options.max_detached_sessions}")
    if options.max_agent_processes is not None and options.max_agent_processes < 1:
        parser.error(f"--max-agent-processes takes N >= 1, got {options.max_agent_processes}")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    token: str | dict[str, str] | None = options.token
    if options.token_file is not None:
        try:
            token = read_token_file(options.token_file)
        except (OSError, ValueError) as exc:
            parser.error(f"--token-file: {exc}")
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
                        token=token,
                        allowed_origins=options.allow_origin,
                        allowed_hosts=options.allow_host,
                        idle_timeout=options.idle_timeout,
                        max_connections=options.max_connections,
                        speak=options.speak,
                        client_fs=not options.no_client_fs,
                        cancel_grace=options.cancel_grace,
                        ext_requests=options.ext_request,
                        ext_notifications=options.ext_notification,
                        detach=options.detach,
                        detached_ttl=3600.0 if options.detached_ttl is None else options.detached_ttl,
                        max_detached_sessions=(
                            100 if options.max_detached_sessions is None else options.max_detached_sessions
                        ),
                        unattended_timeout=options.unattended_timeout,
                        unattended_policy=options.unattended_policy or "wait",
                        max_agent_processes=options.max_agent_processes,
                        journal=options.journal,
                    )
                )
                adapted = f" (adapted: protocol {options.speak} to clients)" if options.speak else ""
                if options.detach:
                    adapted = " (detached sessions kept" + (
                        f"; protocol {options.speak} to clients)" if options.speak else ")"
                    )
                if isinstance(token, dict):
                    adapted += f" for {len(set(token.values()))} principal(s)"
                url = urls[0].replace("http", "ws", 1)
                print(f"bridge: serving {' '.join(command)}{adapted} on {url}/acp", file=sys.stderr)

        run_until_signalled(listen, name="bridge")  # SIGINT, SIGTERM: agents stopped by their ladder, exit 0
        return
    if command:
        parser.error("--connect takes no agent command")
    headers = header_options(parser, options.header)
    trio.run(functools.partial(connect_bridge, options.connect, headers=headers))


def _speak_options(options: argparse.Namespace) -> list[str]:
    """The adapter's options given besides ``--speak`` (their flags), in a fixed order."""
    given = [
        ("--no-client-fs", options.no_client_fs),
        ("--cancel-grace", options.cancel_grace is not None),
        ("--ext-request", bool(options.ext_request)),
        ("--ext-notification", bool(options.ext_notification)),
    ]
    return [flag for flag, present in given if present]


def _detach_options(options: argparse.Namespace) -> list[str]:
    """The session host's options given besides ``--detach`` (their flags), in a fixed order."""
    given = [
        ("--detached-ttl", options.detached_ttl is not None),
        ("--max-detached-sessions", options.max_detached_sessions is not None),
        ("--unattended-timeout", options.unattended_timeout is not None),
        ("--unattended-policy", options.unattended_policy is not None),
        ("--max-agent-processes", options.max_agent_processes is not None),
        ("--journal", options.journal is not None),
    ]
    return [flag for flag, present in given if present]


def header_options(parser: argparse.ArgumentParser, values: Sequence[str]) -> dict[str, str]:
    """``--header 'Name: value'`` options as a dict; a value without a colon is a usage error."""
    headers = {}
    for header in values:
        name, sep, value = header.partition(":")
        if not sep:
            parser.error(f"--header {header!r}: expected 'Name: value'")
        headers[name.strip()] = value.strip()
    return headers


__all__ = [
    "adapt_agent_process",
    "connect_bridge",
    "main",
    "open_detach_host",
    "pump_agent_process",
    "read_token_file",
    "serve_bridge",
]


if __name__ == "__main__":
    main()

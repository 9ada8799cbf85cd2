"""``python -m acp_trio.demo``: the example client talking to an agent over stdio.

Usage::

    python -m acp_trio.demo                        # spawn the example agent, run one prompt turn
    python -m acp_trio.demo --protocol 2           # the same, in protocol version 2
    python -m acp_trio.demo --agent -- CMD ARGS... # the example client against any ACP agent
    python -m acp_trio.demo --serve-agent          # only the example agent, on stdio
    python -m acp_trio.demo --store PATH           # sessions kept in PATH: a second run loads the last one
    python -m acp_trio.demo --serve http://127.0.0.1:8765   # the example agent, remote (WebSocket on /acp)
    python -m acp_trio.demo --url ws://127.0.0.1:8765/acp   # the example client against a remote agent

Options: ``--protocol {1,2}`` (the client's protocol version, default 1; with ``--serve-agent``
the one version to serve, default both side by side), ``--cwd DIR`` (session directory; default a
new temporary directory holding a ``notes.txt``), ``--prompt TEXT``, ``--timeout SECONDS`` (for
``initialize``; default 30), ``--turn-timeout SECONDS`` (version 2: how long to wait for the turn
to end; default 120), ``--deny`` (answer permission requests with a "reject" option),
``--no-fs-read`` (protocol 1: advertise ``fs.writeTextFile`` but not ``fs.readTextFile``, so the
agent reads files itself and writes through the client: gemini-cli 0.61.0 can create a file
through a client only so, since it cannot tell the client's -32002 for a missing file from other
errors), ``--mcp-server 'NAME=COMMAND ARGS...'`` (repeatable: a stdio MCP server the client
offers the agent in ``session/new`` and ``session/load``, its command found on ``PATH`` and sent as
an absolute path; the rest split as a shell would), ``-v`` (log
the runtime and the agent's stderr to stderr), ``--store PATH`` (the example agent keeps
its sessions in the SQLite file PATH, whichever protocol version made them; the client loads
(protocol 1) or resumes with a replay from the start (``--protocol 2``) the most recent one,
printing the stored conversation, and continues it; with ``--serve-agent``, only the agent's side
of it), ``--token T``
(with ``--serve``/``--url``: the bearer token the server requires and the client sends).
With ``--serve``, the server's limits, as ``python -m acp_trio.bridge --listen`` has them
(:class:`acp_trio.transports.asgi.AcpApp`'s options): ``--max-connections N`` (ACP connections at
once, WebSocket and Streamable HTTP together; more are refused ``503``), ``--idle-timeout SECONDS``
(a Streamable HTTP connection with no request in progress and no open stream this long is shut
down; default 300), ``--allow-origin ORIGIN`` and ``--allow-host NAME`` (repeatable: a browser
origin, and a ``Host`` name besides ``localhost`` and IP addresses, to let in).
Remote serving and connecting need ``pip install 'acp-trio[remote]'``.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import attrs
import trio

from acp_schema import v1, v2
from acp_trio import UNSET, CapabilityError, ConnectionClosed, ProtocolVersionError, RequestError, spawn_agent

if TYPE_CHECKING:  # the clients are imported where they run: serving the agent loads none of them
    from .client import AgentStderr, DemoClient, TranscriptClient
    from .client_v2 import DemoClientV2

NOTES = """\
Shopping list for the release:
- regenerate the bindings
- run the interop tests
- write the changelog
"""


Connect = Callable[[Any], AbstractAsyncContextManager[Any]]
"""``connect(client_factory)``: an async context manager yielding a ``ClientSideConnection``."""


def spawning(command: list[str], stderr: logging.Logger | None = None) -> Connect:
    """Connect by spawning ``command`` as the agent (stdio); ``stderr``: the logger of its stderr
    lines (default ``acp_trio.agent.stderr``)."""
    return lambda client: spawn_agent(command[0], command[1:], client=client, stderr_logger=stderr)


def _connecting(command: list[str] | Connect) -> tuple[Connect, AgentStderr | None]:
    """How to reach the agent of ``command``, and what keeps a spawned agent's last stderr lines
    (``None`` for a :data:`Connect`)."""
    from .client import AgentStderr

    if not isinstance(command, list):
        return command, None
    stderr = AgentStderr()
    return spawning(command, stderr.logger), stderr


def remote(url: str, token: str | None = None) -> Connect:
    """Connect to the remote agent at ``url``: ``ws://``/``wss://`` (WebSocket) or ``http://``/``https://``
    (Streamable HTTP); ``token``: sent as ``Authorization: Bearer``."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    if url.startswith(("ws://", "wss://")):
        from acp_trio.transports.websocket import connect_websocket

        return lambda client: connect_websocket(url, client, headers=headers)
    from acp_trio.transports.http import connect_http  # type: ignore[import-not-found, unused-ignore]

    return lambda client: connect_http(url, client, headers=headers)  # type: ignore[no-any-return, unused-ignore]


async def run_demo(
    command: list[str] | Connect,
    workdir: Path,
    prompt: str,
    *,
    out: TextIO,
    init_timeout: float = 30.0,
    allow: bool = True,
    resume: bool = False,
    fs_read: bool = True,
    mcp_servers: Sequence[StdioServer] = (),
) -> int:
    """Spawn ``command`` as an ACP agent (or connect with a :data:`Connect`), run one prompt turn in
    ``workdir``, print the transcript.

    ``allow``: answer permission requests with an "allow" option (else a "reject" one).
    ``fs_read``: advertise ``fs.readTextFile`` (else only ``fs.writeTextFile``).  ``mcp_servers``:
    the stdio MCP servers offered in ``session/new`` and ``session/load`` (:func:`mcp_server`).  ``resume``:
    continue the most recent session the agent lists (``session/list``, then ``session/load``,
    which prints the stored conversation), if it has one.  Returns a process exit status: 0 when
    the turn ended, 1 on a protocol or connection error (an agent's -32603 comes with the end of its
    stderr: :func:`acp_trio.demo.client.error_lines`).
    """
    from .client import CLIENT_INFO, demo_client_factory

    connect, stderr = _connecting(command)
    async with connect(demo_client_factory(out, allow=allow)) as conn:
        client: DemoClient = conn.handler
        agent = v1.AgentPeer(conn)
        capabilities = client.capabilities
        if not fs_read and capabilities.fs:
            capabilities = attrs.evolve(capabilities, fs=attrs.evolve(capabilities.fs, read_text_file=False))
        try:
            init = await agent.initialize(
                v1.InitializeRequest(protocol_version=1, client_capabilities=capabilities, client_info=CLIENT_INFO),
                timeout=init_timeout,
            )
            info = init.agent_info
            name = (info.title or info.name) if info else "an unnamed agent"
            client.say(f"connected to {name}, protocol version {init.protocol_version}")
            servers: list[v1.McpServer] = [
                v1.McpServerStdio(name=name, command=command, args=list(args), env=[])
                for name, command, args in mcp_servers
            ]
            session_id = await _load_latest(agent, client, workdir, servers) if resume else None
            if session_id is None:
                session = await agent.session_new(v1.NewSessionRequest(cwd=str(workdir), mcp_servers=servers))
                session_id = session.session_id
                client.say(f"session {session_id} in {workdir}")
            client.say(f"you: {prompt}")
            result = await client.prompt(session_id, prompt)
            client.say(f"[turn ended: {result.stop_reason}]")
        except ProtocolVersionError as exc:
            client.say(f"error: {version_refusal(exc)}")
            return 1
        except (RequestError, CapabilityError, ConnectionClosed, TimeoutError) as exc:
            return _failed(client, exc, stderr)
    _print_summary(workdir, out)
    return 0


async def _load_latest(
    agent: v1.AgentPeer, client: DemoClient, workdir: Path, servers: list[v1.McpServer]
) -> str | None:
    """``--store``: load the agent's most recent session into ``workdir``, printing the replay; its id, or None."""
    caps = client.conn.agent_capabilities
    if not caps.get("loadSession") or "list" not in (caps.get("sessionCapabilities") or {}):
        client.say("the agent does not offer session/list and session/load: starting a new session")
        return None
    listed = await agent.session_list(v1.ListSessionsRequest())
    if not listed.sessions:
        return None
    latest = listed.sessions[0]
    client.say(
        f"loading session {latest.session_id} ({latest.title or 'untitled'}, {latest.updated_at}) into {workdir}"
    )

    def replayed(state: Any, update: Any) -> None:  # the stored prompts are user_message_chunk updates
        if isinstance(update, v1.UserMessageChunkSessionUpdate) and isinstance(update.content, v1.TextContentBlock):
            client.say(f"you (earlier): {update.content.text}")
        else:
            client.on_update(state, update)

    client.states.on_update = replayed
    try:
        request = v1.LoadSessionRequest(session_id=latest.session_id, cwd=str(workdir), mcp_servers=servers)
        await client.states.load(agent, request)
    finally:
        client.states.on_update = client.on_update
    client.say("[end of the stored conversation]")
    return latest.session_id


async def run_demo_v2(
    command: list[str] | Connect,
    workdir: Path,
    prompt: str,
    *,
    out: TextIO,
    init_timeout: float = 30.0,
    turn_timeout: float = 120.0,
    allow: bool = True,
    resume: bool = False,
    mcp_servers: Sequence[StdioServer] = (),
) -> int:
    """:func:`run_demo` in protocol version 2: the ``session/prompt`` response is only a receipt,
    so this waits (at most ``turn_timeout`` seconds) for the ``idle`` state that ends the turn.
    ``resume``: continue the most recent session the agent lists (``session/list``, then
    ``session/resume`` with ``replayFrom: {"type": "start"}``, which prints the stored conversation).

    Returns 0 when the turn ended, 1 on a protocol or connection error, when the turn ended with
    stop reason ``error``, or when the turn did not end in time (it is then cancelled with
    ``session/cancel``).
    """
    from .client_v2 import CLIENT_INFO as CLIENT_INFO_V2
    from .client_v2 import demo_client_v2_factory

    connect, stderr = _connecting(command)
    async with connect({v2: demo_client_v2_factory(out, allow=allow)}) as conn:
        client: DemoClientV2 = conn.handler
        try:
            init = await conn.initialize(
                v2.InitializeRequest(protocol_version=2, info=CLIENT_INFO_V2, capabilities=client.capabilities_v2),
                timeout=init_timeout,
            )
            name = init.info.title or init.info.name
            client.say(f"connected to {name}, protocol version {init.protocol_version}")
            agent = v2.AgentPeer(conn)
            session_id = await _resume_latest_v2(agent, client, workdir) if resume else None
            if session_id is None:
                servers: list[v2.McpServer] = [
                    v2.StdioMcpServer(name=name, command=command, args=list(args))
                    for name, command, args in mcp_servers
                ]
                new = v2.NewSessionRequest(cwd=str(workdir), mcp_servers=servers or UNSET)
                session_id = (await agent.session_new(new)).session_id
                client.say(f"session {session_id} in {workdir}")
            client.say(f"you: {prompt}")
            stop_reason = await client.run_turn(session_id, prompt, timeout=turn_timeout)
            if stop_reason is None:
                client.say(f"error: the turn did not end within {turn_timeout:g} seconds; cancelling it")
                await agent.session_cancel(v2.CancelSessionNotification(session_id=session_id))
                await client.wait_idle(session_id, 5.0)
                return 1
            error = client.states.state(session_id).stop_error
            if stop_reason == "error" and isinstance(error, v2.Error):  # printed: "[turn ended: error: ...]"
                data = None if error.data is UNSET else error.data
                return _failed(client, RequestError(error.code, error.message, data), stderr, said=True)
        except ProtocolVersionError as exc:
            client.say(f"error: {version_refusal(exc)}")
            return 1
        except (RequestError, CapabilityError, ConnectionClosed, TimeoutError) as exc:
            return _failed(client, exc, stderr)
    _print_summary(workdir, out)
    return 0


async def _resume_latest_v2(agent: v2.AgentPeer, client: DemoClientV2, workdir: Path) -> str | None:
    """``--store`` in protocol version 2: resume the agent's most recent session into ``workdir``
    with the whole conversation replayed and printed; its id, or None (no session listed)."""
    listed = await agent.session_list(v2.ListSessionsRequest())
    if not listed.sessions:
        return None
    latest = listed.sessions[0]
    client.say(
        f"resuming session {latest.session_id} ({latest.title or 'untitled'}, {latest.updated_at}) into {workdir}"
    )

    def replayed(state: Any, update: Any) -> None:  # the stored prompts come back as user messages
        if isinstance(update, v2.UserMessageSessionUpdate | v2.UserMessageChunkSessionUpdate):
            blocks = update.content if isinstance(update.content, list) else [update.content]
            text = "".join(b.text for b in blocks if isinstance(b, v2.TextContentBlock))
            client.say(f"you (earlier): {text}")
        else:
            client.on_update(state, update)

    client.states.on_update = replayed
    try:
        request = v2.ResumeSessionRequest(
            session_id=latest.session_id, cwd=str(workdir), replay_from=v2.StartReplayFrom()
        )
        await client.states.resume(agent, request)
    finally:
        client.states.on_update = client.on_update
    client.say("[end of the stored conversation]")
    return latest.session_id


def _failed(client: TranscriptClient, exc: Exception, stderr: AgentStderr | None, *, said: bool = False) -> int:
    """Print ``exc`` (unless ``said``) and, for an agent's -32603, the end of its stderr and how to
    see the rest (:func:`acp_trio.demo.client.error_lines`); the exit status, 1."""
    from .client import error_lines, error_text

    if not said:
        client.say(f"error: {error_text(exc)}")
    for line in error_lines(exc, None if stderr is None else stderr.lines, shown=stderr is not None and stderr.shown):
        client.say(line)
    return 1


def version_refusal(exc: ProtocolVersionError) -> str:
    """The demo's one line for an agent that answered ``initialize`` with another protocol version
    than the ``--protocol`` asked: what it chose, and which ``--protocol`` talks to it."""
    said = f"the agent chose protocol version {exc.answered!r} (we asked for {exc.requested!r})"
    if exc.answered == 1:
        hint = "drop --protocol 2 to talk to it in version 1"
    elif exc.answered == 2:
        hint = "pass --protocol 2 to talk to it in version 2"
    else:
        return f"{said}: this demo speaks protocol versions 1 and 2"
    return f"{said}: it does not speak protocol version {exc.requested}; {hint}"


def _print_summary(workdir: Path, out: TextIO) -> None:
    """After a turn: what the agent wrote into ``summary.txt``, if anything."""
    summary = workdir / "summary.txt"
    if summary.exists():
        out.write(f"summary.txt now reads: {summary.read_text(encoding='utf-8')}")


StdioServer = tuple[str, str, tuple[str, ...]]
"""A stdio MCP server the demo client offers: its name, its command (an absolute path) and its arguments."""


def mcp_server(spec: str) -> StdioServer:
    """``--mcp-server``'s value, ``NAME=COMMAND ARGS...`` (split as a POSIX shell would), as a
    :data:`StdioServer`; ``COMMAND`` is looked up on ``PATH`` unless it is a path.  Raises
    ``ValueError`` naming what is wrong (no ``=``, an empty name or command, a command not found)."""
    name, equals, rest = spec.partition("=")
    words = shlex.split(rest) if equals else []
    if not equals or not name.strip() or not words:
        raise ValueError(f"--mcp-server {spec!r}: give NAME=COMMAND [ARGS...], e.g. notes=python notes_mcp.py")
    found = shutil.which(words[0])
    if found is None:
        raise ValueError(f"--mcp-server {spec!r}: command {words[0]!r} not found")
    return name.strip(), os.path.abspath(found), tuple(words[1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acp_trio.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve-agent", action="store_true", help="serve the example agent on stdio")
    parser.add_argument("--agent", action="store_true", help="drive the agent command given after --")
    parser.add_argument(
        "--protocol",
        type=int,
        choices=(1, 2),
        help="protocol version of the client (default 1); with --serve-agent the only one served (default both)",
    )
    parser.add_argument("--cwd", type=Path, help="session directory (default: a temporary one with notes.txt)")
    parser.add_argument("--prompt", default="Please summarize notes.txt into summary.txt.")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for initialize")
    parser.add_argument(
        "--turn-timeout", type=float, default=120.0, help="protocol 2: seconds to wait for the turn to end"
    )
    parser.add_argument("--deny", action="store_true", help="answer permission requests with a reject option")
    parser.add_argument(
        "--no-fs-read",
        action="store_true",
        help="protocol 1: advertise fs.writeTextFile but not fs.readTextFile (the agent reads files itself)",
    )
    parser.add_argument(
        "--mcp-server",
        action="append",
        default=[],
        metavar="'NAME=COMMAND ARGS...'",
        help="offer the agent this stdio MCP server in session/new (repeatable; COMMAND found on PATH)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log the runtime and agent stderr")
    parser.add_argument("--store", metavar="PATH", help="keep sessions in PATH; continue the last one")
    parser.add_argument("--serve", metavar="URL", help="serve the example agent remotely (http://HOST:PORT)")
    parser.add_argument("--url", help="run the client against the remote agent at URL (ws://.../acp or http://...)")
    parser.add_argument("--token", help="--serve: require this bearer token; --url: send it")
    parser.add_argument(
        "--max-connections", type=int, metavar="N", help="--serve: at most N connections at once; more get 503"
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="--serve: shut down a Streamable HTTP connection idle this long (default 300)",
    )
    parser.add_argument("--allow-origin", action="append", default=[], help="--serve: a browser origin to allow")
    parser.add_argument(
        "--allow-host", action="append", default=[], help="--serve: a Host name to accept besides localhost and IPs"
    )
    parser.add_argument("command", nargs="*", help="agent command and arguments (after --)")
    args = parser.parse_args(argv)

    if args.serve:
        from .agent import serve_remote

        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
        serve_remote(
            args.serve,
            (args.protocol,) if args.protocol else (1, 2),
            token=args.token,
            max_connections=args.max_connections,
            idle_timeout=args.idle_timeout,
            allowed_origins=args.allow_origin,
            allowed_hosts=args.allow_host,
        )
        return 0
    if args.url and (args.agent or args.store):
        parser.error("--url drives a remote agent: no --agent command, no --store")

    if args.store and args.agent:
        parser.error("--store is for the example agent (an --agent command keeps its sessions its own way)")
    if args.serve_agent:
        from .agent import serve

        serve((args.protocol,) if args.protocol else (1, 2), store=args.store)
        return 0
    if args.agent and not args.command:
        parser.error("--agent needs a command: python -m acp_trio.demo --agent -- CMD ARGS...")
    if args.command and not args.agent:
        parser.error("give --agent before -- CMD ...")
    try:
        mcp_servers = [mcp_server(spec) for spec in args.mcp_server]
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s"
    )
    if not args.verbose:
        logging.getLogger("acp_trio.agent.stderr").setLevel(logging.WARNING)
    command: list[str] | Connect = (
        args.command if args.agent else [sys.executable, "-m", "acp_trio.demo", "--serve-agent"]
    )
    if args.store and isinstance(command, list):
        command += ["--protocol", str(args.protocol or 1), "--store", str(Path(args.store).resolve())]
    if args.url:
        try:
            command = remote(args.url, args.token)
        except ImportError as exc:
            print(f"error: --url needs the remote transports: pip install 'acp-trio[remote]' ({exc})", file=sys.stderr)
            return 2

    def go(workdir: Path) -> int:
        try:
            if args.protocol == 2:
                return trio.run(
                    lambda: run_demo_v2(
                        command,
                        workdir.resolve(),
                        args.prompt,
                        out=sys.stdout,
                        init_timeout=args.timeout,
                        turn_timeout=args.turn_timeout,
                        allow=not args.deny,
                        resume=bool(args.store),
                        mcp_servers=mcp_servers,
                    )
                )
            return trio.run(
                lambda: run_demo(
                    command,
                    workdir.resolve(),
                    args.prompt,
                    out=sys.stdout,
                    init_timeout=args.timeout,
                    allow=not args.deny,
                    resume=bool(args.store),
                    fs_read=not args.no_fs_read,
                    mcp_servers=mcp_servers,
                )
            )
        except OSError as exc:
            if isinstance(command, list):
                print(f"error: cannot start the agent {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
            else:
                print(f"error: {exc}", file=sys.stderr)
            return 2

    if args.cwd is not None:
        return go(args.cwd)
    with tempfile.TemporaryDirectory(prefix="acp-trio-demo-") as tmp:
        (Path(tmp) / "notes.txt").write_text(NOTES, encoding="utf-8")
        return go(Path(tmp))


if __name__ == "__main__":
    sys.exit(main())

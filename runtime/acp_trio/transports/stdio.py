"""The stdio transport: an agent serving its own stdin/stdout, and a client spawning an agent.

Contract: these functions only build byte streams and hand them to :class:`AgentSideConnection` /
:class:`ClientSideConnection`.  Process handling follows the stdio shutdown of the MCP lifecycle
(``../shared/seeds/mcp-lifecycle``): close the child's stdin, wait, SIGTERM, wait, SIGKILL; the
child runs in its own process group and signals go to the whole group, so a wrapper script's
children go too.  POSIX only.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import trio

from .._connection import ConnectionClosed
from .._core import LineFramer, OversizedMessage
from .._nursery import owned_nursery
from .._roles import AgentSideConnection, ClientSideConnection

log = logging.getLogger("acp_trio.stdio")
agent_stderr_log = logging.getLogger("acp_trio.agent.stderr")


PIPE_SIZE: Final = 1 << 20
"""Bytes of kernel buffer asked for the pipe that carries an agent's output (its stdout), where
its streamed updates go: 1 MiB, Linux's default ``/proc/sys/fs/pipe-max-size``, instead of the
default 64 KiB.  A streaming agent then seldom finds the pipe full, so it blocks and is woken
less (20,000 streamed updates: 3-20% less of the agent's CPU time in our runs, and up to as much
wall time)."""


def grow_pipe(fd: int, size: int | None = PIPE_SIZE) -> int | None:
    """Ask the kernel for a ``size``-byte buffer (bytes) on the pipe ``fd`` (Linux ``F_SETPIPE_SZ``;
    it rounds up to a power of two pages), if its buffer is smaller; return the buffer's size
    after, or ``None`` when it is unknown: ``size`` ``None``, not Linux, ``fd`` not a pipe, or
    the kernel refused (over ``/proc/sys/fs/pipe-max-size``, or the user's pipe budget
    ``pipe-user-pages-soft`` spent).  Never raises: a pipe keeps working at any size."""
    get, set_ = getattr(fcntl, "F_GETPIPE_SZ", None), getattr(fcntl, "F_SETPIPE_SZ", None)
    if size is None or get is None or set_ is None:
        return None
    try:
        now = fcntl.fcntl(fd, get)
        return now if now >= size else fcntl.fcntl(fd, set_, size)
    except OSError:
        return None


async def serve_agent_stdio(agent: Any, *, pipe_size: int | None = PIPE_SIZE, **options: Any) -> None:
    """Serve ``agent`` on this process's stdin/stdout until the client closes stdin.

    ``agent``: as for :class:`AgentSideConnection` (an object, or a factory: a class built with
    the connection when its ``__init__`` takes it, else with no argument);
    ``options``: its keyword options (``variant``, ``tap``, ``max_message_size``, ``eof_grace``, ...).
    ``pipe_size``: bytes of kernel buffer asked for stdout when it is a pipe (:func:`grow_pipe`;
    default :data:`PIPE_SIZE`, 1 MiB; ``None`` leaves it as it is).

    Closing stdin is the client's shutdown signal: once it is read, running handlers and
    background tasks get ``eof_grace`` seconds (default 0.25) to finish, then are cancelled (a
    prompt turn cut short answers stop reason ``cancelled`` while stdout is still open), and this
    function returns, so the process can exit long before the client's SIGTERM.

    While serving, the protocol owns the original stdout: file descriptor 1 and ``sys.stdout``
    point at stderr, so a stray ``print`` (or a child process inheriting fd 1) cannot corrupt the
    message stream.  Both are restored afterwards.
    """
    sys.stdout.flush()
    protocol_out = os.dup(1)
    grow_pipe(protocol_out, pipe_size)
    protocol_in = os.dup(0)
    saved_stdout_fd = os.dup(1)
    os.dup2(2, 1)
    saved_stdout = sys.stdout
    sys.stdout = sys.stderr
    send = trio.lowlevel.FdStream(protocol_out)
    receive = trio.lowlevel.FdStream(protocol_in)
    try:
        async with AgentSideConnection(agent, send, receive, **options) as conn:
            await conn.wait_closed()
    finally:
        sys.stdout = saved_stdout
        os.dup2(saved_stdout_fd, 1)
        os.close(saved_stdout_fd)
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(receive)
            await trio.aclose_forcefully(send)


def run_agent_stdio(agent: Any, **options: Any) -> None:
    """Synchronous entry point: ``trio.run(serve_agent_stdio, agent, **options)`` (for ``__main__``).

    ``agent``: as for :class:`AgentSideConnection`, e.g. the agent class (built with the connection
    when its ``__init__(self, conn)`` takes it, else with no argument); without an ``initialize``
    method it is named in the runtime's ``initialize`` answer by its class attribute ``agent_info``
    (``agent_info = v1.Implementation(name="notes-agent", version="0.1.0")``), else by its class name.
    """
    trio.run(lambda: serve_agent_stdio(agent, **options))


STDERR_TAIL_LINES = 20
"""Lines of a spawned agent's stderr kept for :class:`ConnectionClosed` (``stderr_tail``)."""
STDERR_TAIL_BYTES = 4096
"""Bytes of a spawned agent's stderr kept for :class:`ConnectionClosed`, at most (UTF-8)."""


class _StderrTail:
    """The last lines an agent wrote to stderr, bounded by :data:`STDERR_TAIL_LINES` and :data:`STDERR_TAIL_BYTES`."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self.done = trio.Event()  # stderr reached its end (every writer is gone) or was closed

    def add(self, line: str) -> None:
        if len(line.encode()) > STDERR_TAIL_BYTES:
            line = "…" + line.encode()[-STDERR_TAIL_BYTES + 3 :].decode("utf-8", "ignore")
        self.lines.append(line)

    def last(self) -> tuple[str, ...]:
        kept: list[str] = []
        size = 0
        for line in reversed(self.lines):
            size += len(line.encode()) + 1
            if size > STDERR_TAIL_BYTES:
                break
            kept.append(line)
        return tuple(reversed(kept))


async def _drain_stderr(stream: trio.abc.ReceiveStream, logger: logging.Logger, limit: int, tail: _StderrTail) -> None:
    framer = LineFramer(limit)
    try:
        while True:
            try:
                data = await stream.receive_some(1 << 16)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            items = framer.feed(data) if data else framer.close()
            for item in items:
                if type(item) is OversizedMessage:
                    logger.info("[%d bytes of stderr without a newline, not shown]", item.size)
                    tail.add(f"[{item.size} bytes without a newline]")
                else:
                    assert isinstance(item, bytes)
                    text = item.decode("utf-8", "replace")
                    logger.info("%s", text)
                    tail.add(text)
            if not data:
                return
    finally:
        tail.done.set()


def _resolve_command(command: str, env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None) -> str:
    """The program ``spawn_agent`` will run; raises a clear ``OSError`` naming it when it cannot."""
    if cwd is not None and not os.path.isdir(cwd):
        raise NotADirectoryError(errno.ENOTDIR, f"the agent's working directory does not exist: {os.fspath(cwd)!r}")
    if os.sep in command:
        where = os.path.join(cwd, command) if cwd is not None and not os.path.isabs(command) else command
        if not os.path.exists(where):
            raise FileNotFoundError(errno.ENOENT, f"agent command not found: {command!r} (no such file)", command)
        if os.path.isdir(where) or not os.access(where, os.X_OK):
            raise PermissionError(errno.EACCES, f"agent command is not an executable file: {command!r}", command)
        return command
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    if shutil.which(command, path=path) is None:
        raise FileNotFoundError(
            errno.ENOENT, f"agent command not found: {command!r} is not an executable on PATH ({path})", command
        )
    return command


def _closing_error(process: trio.Process, tail: _StderrTail, exit_wait: float) -> Any:
    async def describe(reason: str) -> ConnectionClosed:
        # the agent's output ended or broke: it has usually exited at the same moment; say how
        with trio.move_on_after(exit_wait):
            await process.wait()
        code = process.returncode
        if code is not None:
            with trio.move_on_after(0.2):  # its last stderr lines, unless a grandchild holds stderr open
                await tail.done.wait()
        return ConnectionClosed(
            reason,
            pid=process.pid,
            exit_code=code if code is not None and code >= 0 else None,
            signal=-code if code is not None and code < 0 else None,
            stderr_tail=tail.last(),
        )

    return describe


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - group id reused by another user
        return False
    return True


async def _wait_exit(process: trio.Process, timeout: float) -> bool:
    with trio.move_on_after(timeout):
        await process.wait()
        return True
    return False


async def _group_gone(pgid: int, timeout: float) -> bool:
    with trio.move_on_after(timeout):
        while _signal_group(pgid, 0):
            await trio.sleep(0.02)
        return True
    return False


async def terminate_process_group(process: trio.Process, timeout: float) -> None:
    """Stop ``process`` (already sent EOF on stdin) and everything in its process group.

    Waits up to ``timeout`` seconds for it to exit, then sends SIGTERM to the group and waits
    again, then SIGKILL.  Children left in the group after the leader exits (a wrapper's
    children) get SIGTERM, then SIGKILL after ``timeout``.  Never raises for a process already gone.
    """
    pgid = process.pid
    if not await _wait_exit(process, timeout):
        log.info("agent (pid %d) did not exit after stdin closed; sending SIGTERM to its group", pgid)
        _signal_group(pgid, signal.SIGTERM)
        if not await _wait_exit(process, timeout):
            log.warning("agent (pid %d) ignored SIGTERM; sending SIGKILL to its group", pgid)
            _signal_group(pgid, signal.SIGKILL)
            await process.wait()
    if _signal_group(pgid, signal.SIGTERM) and not await _group_gone(pgid, timeout):
        _signal_group(pgid, signal.SIGKILL)


class AgentProcess:
    """An agent process started by :func:`open_agent_process`: its pipes and how it ended.

    ``process``: the ``trio.Process``; ``stdin`` / ``stdout``: its pipes as trio streams (write
    requests to one, read answers from the other, newline-delimited JSON-RPC); ``pid``.
    """

    def __init__(self, process: trio.Process, tail: _StderrTail) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.stdin: trio.abc.SendStream = process.stdin
        self.stdout: trio.abc.ReceiveStream = process.stdout
        self.pid = process.pid
        self._describe = _closing_error(process, tail, 0.5)

    async def describe_exit(self, reason: str) -> ConnectionClosed:
        """A :class:`ConnectionClosed` for ``reason`` saying how the process ended: exit code or
        signal and its last stderr lines (waits at most 0.5 s for the exit status)."""
        error: ConnectionClosed = await self._describe(reason)
        return error


@asynccontextmanager
async def open_agent_process(
    command: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    inherit_env: bool = True,
    cwd: str | os.PathLike[str] | None = None,
    shutdown_timeout: float = 2.0,
    stderr_logger: logging.Logger | None = None,
    pipe_size: int | None = PIPE_SIZE,
) -> AsyncIterator[AgentProcess]:
    """Start an agent process with piped stdio and yield it (``async with``): the process half of
    :func:`spawn_agent`, for code that moves its bytes itself (the bridge, :mod:`acp_trio.bridge`).

    Arguments as for :func:`spawn_agent`.  The command is checked first (a clear ``OSError``
    naming it); the process runs in its own process group; its stderr is read continuously into
    ``stderr_logger`` (default ``acp_trio.agent.stderr``) and its last lines kept for
    :meth:`AgentProcess.describe_exit`.  Leaving the block closes its stdin, waits, then SIGTERMs
    and finally SIGKILLs the group, each step ``shutdown_timeout`` seconds (shielded).  An
    exception raised in the body comes out as itself.
    """
    full_env: dict[str, str] | None = None
    if env is not None:
        full_env = {**os.environ, **env} if inherit_env else dict(env)
    elif not inherit_env:
        full_env = {}
    program = _resolve_command(os.fspath(command), full_env, cwd)
    process = await trio.lowlevel.open_process(
        [program, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    if isinstance(process.stdout, trio.lowlevel.FdStream):  # (always, on POSIX)
        grow_pipe(process.stdout.fileno(), pipe_size)
    logger = stderr_logger or agent_stderr_log
    tail = _StderrTail()
    try:
        async with owned_nursery() as nursery:
            nursery.start_soon(_drain_stderr, process.stderr, logger, 1 << 20, tail)
            try:
                yield AgentProcess(process, tail)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(process.stdin)  # end of input: the agent's signal to exit
                    await terminate_process_group(process, shutdown_timeout)
                    # stderr reaches EOF once every writer in the group is gone; don't wait for stragglers
                    nursery.cancel_scope.cancel()
                    await trio.aclose_forcefully(process.stderr)
                    await trio.aclose_forcefully(process.stdout)
    finally:
        if process.returncode is None:  # pragma: no cover - only if cancelled before shutdown began
            _signal_group(process.pid, signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await process.wait()


@asynccontextmanager
async def spawn_agent(
    command: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    client: Any,
    env: Mapping[str, str] | None = None,
    inherit_env: bool = True,
    cwd: str | os.PathLike[str] | None = None,
    shutdown_timeout: float = 2.0,
    stderr_logger: logging.Logger | None = None,
    pipe_size: int | None = PIPE_SIZE,
    **options: Any,
) -> AsyncIterator[ClientSideConnection]:
    """Spawn an ACP agent and yield the :class:`ClientSideConnection` to it (``async with``).

    ``command``/``args``: the program and its arguments (no shell).  ``client``: the client object
    or factory (see :class:`ClientSideConnection`).  ``env``: variables for the agent, added to this
    process's environment (or replacing it when ``inherit_env=False``).  ``cwd``: its working
    directory.  ``stderr_logger``: where its stderr goes, line by line at INFO (default the
    ``acp_trio.agent.stderr`` logger); stderr is read continuously so a chatty agent never stalls.
    ``shutdown_timeout``: seconds for each shutdown step.  ``pipe_size``: bytes of kernel buffer
    asked for the pipe of the agent's output (:func:`grow_pipe`; default :data:`PIPE_SIZE`, 1 MiB;
    ``None``: the system's default, 64 KiB on Linux).  ``options``: for the connection
    (``eof_grace``, ``tap``, ``max_message_size``, ...).

    Errors: the command is checked first, so a program that does not exist or cannot run raises
    ``FileNotFoundError`` / ``PermissionError`` naming it (a missing ``cwd``: ``NotADirectoryError``)
    before anything starts.  When the agent's output ends (it exited or crashed), pending and
    later requests raise :class:`ConnectionClosed` saying how the process ended: ``exit_code`` or
    ``signal`` and its last stderr lines (``stderr_tail``, at most 20 lines / 4 KiB), waiting at
    most 0.5 s for the exit status.  An exception raised in the ``async with`` body comes out as
    itself (``except acp_trio.ConnectionClosed`` works); a failure inside the runtime's own tasks
    comes out as an ``ExceptionGroup`` holding it (and the body's exception, if any).

    The agent runs in its own process group.  Leaving the block closes the connection, closes
    the agent's stdin, waits, then SIGTERMs and finally SIGKILLs the group (shielded from
    cancellation, bounded by 3 × ``shutdown_timeout`` plus the wait for a killed process).
    ``conn.process`` is the ``trio.Process``.  Raises ``OSError`` if the program cannot start.

    A wrapper script that starts the agent as a background job (``agent &``) must hand it stdin
    explicitly: a non-interactive ``sh`` gives background jobs ``/dev/null`` as stdin.
    """
    async with open_agent_process(
        command,
        args,
        env=env,
        inherit_env=inherit_env,
        cwd=cwd,
        shutdown_timeout=shutdown_timeout,
        stderr_logger=stderr_logger,
        pipe_size=pipe_size,
    ) as agent:
        conn = ClientSideConnection(client, agent.stdin, agent.stdout, **options)
        conn.process = agent.process  # type: ignore[attr-defined]
        conn.connection.closing_error = agent.describe_exit
        async with conn:  # leaving it closes the connection first; then the process is shut down
            yield conn


__all__ = [
    "PIPE_SIZE",
    "AgentProcess",
    "grow_pipe",
    "open_agent_process",
    "run_agent_stdio",
    "serve_agent_stdio",
    "spawn_agent",
    "terminate_process_group",
]

"""Client-side terminals: ``terminal/create``, ``output``, ``wait_for_exit``, ``kill`` and ``release``.

Source: ``docs/protocol/v1/terminals.mdx`` and the schema's ``CreateTerminalRequest``,
``TerminalOutputResponse``, ``TerminalExitStatus``, ``WaitForTerminalExitResponse``.

A :class:`TerminalManager` runs the commands an agent asks for as real processes under trio and
answers the five ``terminal/*`` methods with the ``acp_schema.v1`` types.  Bind its methods on the
client object (the connection finds handlers by attribute when it is built)::

    class MyClient:
        def __init__(self, conn: ClientSideConnection) -> None:
            self.terminals = TerminalManager(conn)
            self.terminal_create = self.terminals.terminal_create
            self.terminal_output = self.terminals.terminal_output
            self.terminal_wait_for_exit = self.terminals.terminal_wait_for_exit
            self.terminal_kill = self.terminals.terminal_kill
            self.terminal_release = self.terminals.terminal_release

and advertise ``clientCapabilities.terminal = true`` in ``initialize`` (agents may not call
``terminal/*`` otherwise).

What it does:

- the command runs without a shell (``command`` is the program, looked up on ``PATH``, ``args`` its
  arguments; ask for a shell with ``command="sh", args=["-c", "..."]``), with stdin from
  ``/dev/null``, stderr merged into stdout, in a process group of its own;
- ``env`` is applied over the client's environment; ``cwd`` (absolute) defaults to the session's
  ``cwd``;
- output is read continuously (a command that floods never stalls) into a buffer that keeps at most
  ``outputByteLimit`` bytes (default :data:`DEFAULT_OUTPUT_BYTE_LIMIT`): earlier output is dropped
  from the front, at a UTF-8 character boundary, and ``truncated`` becomes true;
- on Linux the command runs under a small supervisor (``acp_trio/_reaper.py``, a second Python
  process started with ``sys.executable -I -S``: 10 to 20 ms more per ``terminal/create``) that is
  a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): every descendant of the command stays
  below it, also one that leaves the process group and session (a double fork with ``setsid()``,
  what daemons and some dev servers do).  It writes nothing to the command's output and reports
  the command's pid and exit to the manager over a socket;
- ``terminal/kill`` and ``terminal/release`` send SIGTERM (then SIGCONT) to the command and every
  process it started, then SIGKILL to those left after ``kill_grace`` seconds; the exit status
  reports ``exitCode``, or ``signal`` (``"SIGKILL"``...) for a command a signal ended;
- the exit (``terminal/wait_for_exit``, ``exitStatus``) is the command's own: it does not wait for
  background jobs or daemons the command left running.  Those run on until the terminal is killed
  or released, as a shell's jobs do; release answers once every one of them is gone;
- every terminal of a session is released when the session ends (``session/close``,
  ``session/delete``) and when the connection closes.  If the client process dies without closing
  (even SIGKILL), each supervisor sees the end of its socket and stops everything itself (SIGTERM,
  SIGKILL after ``kill_grace``).  ``PR_SET_PDEATHSIG`` is not used: it follows the thread that
  started the process, and trio starts processes from worker threads that exit when idle.

Without the supervisor (not Linux, ``supervise=False``, or a command that kills its supervisor)
the command runs in a process group of its own as its own session leader, and the group is
signalled: background jobs that stay in the group are stopped with it, a process that leaves the
group (``setsid``) escapes and survives release, the end of the session and the client's exit.
If ``prctl`` fails the supervisor still stops what it can find below it, and a warning is logged.
A command can always escape deliberately (it runs as the client's user: it can kill its
supervisor, or ask a service manager to start a process).

POSIX only.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Final, Literal

import trio

from acp_schema import v1

from ._core import INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND, RequestError
from ._roles import ClientSideConnection
from ._sessions import SessionInfo
from ._spec import UNSET
from .transports.stdio import _signal_group

log = logging.getLogger("acp_trio.terminals")

DEFAULT_OUTPUT_BYTE_LIMIT: Final = 1 << 20
"""Bytes of output kept for a terminal whose ``terminal/create`` sets no ``outputByteLimit`` (1 MiB)."""

_READ_SIZE: Final = 1 << 16
_DRAIN_READS: Final = 16  # reads of _READ_SIZE after the command exits: more than a pipe holds
_KILL_WAIT: Final = 5.0  # seconds to wait for the group to vanish after SIGKILL before giving up
_POLL: Final = 0.02  # seconds between checks for live members of a process group
_REAPER: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_reaper.py")

OutputListener = Callable[["Terminal", bytes], object]


class Terminal:
    """One terminal of a :class:`TerminalManager`: a running (or finished) command and its output.

    Read-only for users.  ``terminal_id``, ``session_id``: its ids.  ``command``, ``args``,
    ``cwd``: what runs where.  ``output_byte_limit``: bytes of output kept (``None``: no limit).
    ``pid``: the command's process id, which is also its process group and session id.
    ``process``: the ``trio.Process`` of its supervisor, or of the command when it runs without one.
    ``subreaper``: whether it runs under a supervisor that is a child subreaper (see the module).
    ``exit_status``: the ``v1.TerminalExitStatus`` once the command exited, else ``None`` (both
    fields ``None`` when its supervisor was killed, so its exit could not be observed).
    ``truncated``: whether output was dropped to stay within the limit.  ``retained_bytes``: bytes of
    output held now (at most ``output_byte_limit``).  ``released``: true once ``terminal/release``,
    the end of its session or of the connection removed it from its manager.
    """

    def __init__(
        self,
        terminal_id: str,
        session_id: str,
        command: str,
        args: tuple[str, ...],
        cwd: str,
        output_byte_limit: int | None,
        process: trio.Process,
        on_output: OutputListener | None = None,
        *,
        pid: int | None = None,
        supervisor: _Supervisor | None = None,
        subreaper: bool = False,
    ) -> None:
        self.terminal_id = terminal_id
        self.session_id = session_id
        self.command = command
        self.args = args
        self.cwd = cwd
        self.output_byte_limit = output_byte_limit
        self.process = process
        self.pid: int = process.pid if pid is None else pid
        self.subreaper = subreaper
        self.exit_status: v1.TerminalExitStatus | None = None
        self.truncated = False
        self.released = False
        self._on_output = on_output
        self._buffer = bytearray()
        self._eof = False
        self._settled = trio.Event()  # exited, or closed without an exit status
        self._closed = trio.Event()
        self._kill_pending = False
        self._scope = trio.CancelScope()
        self._nursery: trio.Nursery | None = None
        self._sigterm_at: float | None = None
        self._group_sigterm_at: float | None = None
        self._supervisor = supervisor
        self._supervisor_lost = False

    def __repr__(self) -> str:
        state = "running" if self.exit_status is None else "exited"
        return f"Terminal({self.terminal_id!r}, session={self.session_id!r}, pid={self.pid}, {state})"

    @property
    def retained_bytes(self) -> int:
        """Bytes of output held now (never more than ``output_byte_limit``)."""
        return len(self._buffer)

    # -- reading ---------------------------------------------------------------------------------
    def output(self) -> v1.TerminalOutputResponse:
        """The output so far as a ``terminal/output`` response (``exitStatus`` only once exited).

        Bytes are decoded as UTF-8 (invalid bytes become U+FFFD); while the command runs, a
        character whose last bytes have not arrived yet is left out until they do.
        """
        data = bytes(self._buffer)
        if self.exit_status is None:
            data = data[: _complete_end(data)]
        return v1.TerminalOutputResponse(
            output=data.decode("utf-8", "replace"),
            truncated=self.truncated,
            exit_status=self.exit_status if self.exit_status is not None else UNSET,
        )

    async def wait_for_exit(self) -> v1.TerminalExitStatus:
        """Wait until the command exits; its exit status.

        Raises ``RequestError`` (-32603) if the terminal was released and its process could not
        be reaped (it survived SIGKILL).
        """
        await self._settled.wait()
        if self.exit_status is None:
            raise RequestError(
                INTERNAL_ERROR,
                "Terminal released before its command exited",
                {"terminalId": self.terminal_id, "pid": self.pid},
            )
        return self.exit_status

    async def wait_closed(self) -> None:
        """Wait until the terminal was released and its command and descendants stopped and reaped."""
        await self._closed.wait()

    def _feed(self, data: bytes | bytearray) -> None:
        buffer = self._buffer
        buffer += data
        limit = self.output_byte_limit
        if limit is not None and len(buffer) > limit:
            del buffer[: len(buffer) - limit]
            self.truncated = True
            # start at a character boundary: skip the continuation bytes of a character cut in two
            skip = 0
            while skip < 3 and skip < len(buffer) and buffer[skip] & 0xC0 == 0x80:
                skip += 1
            del buffer[:skip]
        if self._on_output is not None:
            try:
                self._on_output(self, bytes(data))
            except Exception:
                log.exception("on_output callback raised for terminal %r", self.terminal_id)

    async def _pump(self) -> None:
        """Read the command's output until end of file, keeping at most the limit."""
        stream = self.process.stdout
        assert stream is not None
        try:
            while not self._eof:
                data = await stream.receive_some(_READ_SIZE)
                if not data:
                    self._eof = True
                    break
                self._feed(data)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self._eof = True

    def _drain_now(self) -> None:
        """Read what is in the pipe now without waiting (the command exited: all it wrote is there)."""
        stream = self.process.stdout
        if stream is None or self._eof:
            return
        fd = stream.fileno()  # type: ignore[attr-defined]  # a trio.lowlevel.FdStream on POSIX
        for _ in range(_DRAIN_READS):
            try:
                data = os.read(fd, _READ_SIZE)
            except (BlockingIOError, OSError):
                return
            if not data:
                self._eof = True
                return
            self._feed(data)

    # -- exit ------------------------------------------------------------------------------------
    async def _reap(self) -> None:
        supervisor = self._supervisor
        if supervisor is None:
            self._record_exit(await self.process.wait())
            return
        while (line := await supervisor.next_line()) is not None:
            self._supervisor_said(line)
        await self._supervisor_exited()
        if self.exit_status is None:  # the supervisor died before the command: it runs on unsupervised
            while _pid_alive(self.pid):
                await trio.sleep(_POLL)
            self._record_exit(None)

    def _supervisor_said(self, line: str) -> None:
        word, _, rest = line.partition(" ")
        if word == "status":
            self._record_exit(int(rest))
        elif word == "crash":
            log.warning("terminal %r: its supervisor failed: %s", self.terminal_id, rest)

    async def _supervisor_exited(self) -> None:
        """Wait until the supervisor exited; read what it said last."""
        assert self._supervisor is not None
        returncode = await self.process.wait()
        while (line := self._supervisor.line_now()) is not None:
            self._supervisor_said(line)
        if not self._supervisor.done and not self._supervisor_lost:
            self._supervisor_lost = True
            log.warning(
                "terminal %r: its supervisor (pid %d) ended (%d) before the command's descendants: "
                "stopping the command's process group without it",
                self.terminal_id,
                self.process.pid,
                returncode,
            )

    def _record_exit(self, returncode: int | None) -> None:
        """Record the command's exit (``subprocess``'s return code; ``None``: not known)."""
        if self.exit_status is not None:
            return
        self._drain_now()
        if returncode is None:  # its supervisor was killed: the command was no child of ours to wait for
            self.exit_status = v1.TerminalExitStatus(exit_code=None, signal=None)
        elif returncode >= 0:
            self.exit_status = v1.TerminalExitStatus(exit_code=returncode, signal=None)
        else:
            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = f"signal {-returncode}"
            self.exit_status = v1.TerminalExitStatus(exit_code=None, signal=name)
        log.debug("terminal %r (pid %d) exited: %r", self.terminal_id, self.pid, self.exit_status)
        self._settled.set()

    def _kill(self, grace: float) -> None:
        """Start stopping the command in the background (see :meth:`_stop_group`)."""
        if self._nursery is not None:
            self._nursery.start_soon(self._stop_group, grace)
        else:  # not running yet: _run starts it
            self._kill_pending = True

    async def _stop_group(self, grace: float) -> None:
        """Stop the command and everything it started: SIGTERM, then SIGKILL ``grace`` seconds later.

        With a supervisor, it does the signalling (to every descendant, also those that left the
        process group); without one, or if it died, the command's process group is signalled.
        """
        if self._supervisor is not None and await self._stop_supervised(grace):
            return
        await self._stop_process_group(grace)

    async def _stop_supervised(self, grace: float) -> bool:
        """Have the supervisor stop everything; whether it did (else the group must be stopped)."""
        supervisor = self._supervisor
        assert supervisor is not None
        if self._sigterm_at is None:
            self._sigterm_at = trio.current_time()
            if self.process.returncode is None:
                supervisor.send(b"t")
        with trio.move_on_at(self._sigterm_at + grace):
            await self._supervisor_exited()
            return supervisor.done
        log.info(
            "terminal %r (pid %d) outlived SIGTERM by %g s: sending SIGKILL to it and its descendants",
            self.terminal_id,
            self.pid,
            grace,
        )
        supervisor.send(b"k")
        with trio.move_on_after(_KILL_WAIT):
            await self._supervisor_exited()
            return supervisor.done
        log.warning("terminal %r: its supervisor (pid %d) is stuck: killing it", self.terminal_id, self.process.pid)
        self.process.kill()
        return False

    async def _stop_process_group(self, grace: float) -> None:
        """SIGTERM the process group (once), SIGKILL it ``grace`` seconds later if anything lives."""
        pgid = self.pid
        if self._group_sigterm_at is None:
            if self.process.returncode is not None and not _group_alive(pgid):
                if self._supervisor is None:
                    self._record_exit(self.process.returncode)
                elif self.exit_status is None and not _pid_alive(pgid):
                    self._record_exit(None)
                return
            self._group_sigterm_at = trio.current_time()
            _signal_group(pgid, signal.SIGTERM)
            _signal_group(pgid, signal.SIGCONT)  # a stopped process handles SIGTERM only once continued
        with trio.move_on_at(self._group_sigterm_at + grace):
            await self._wait_gone()
            return
        log.info(
            "terminal %r (pid %d) outlived SIGTERM by %g s: sending SIGKILL to its group", self.terminal_id, pgid, grace
        )
        _signal_group(pgid, signal.SIGKILL)
        with trio.move_on_after(_KILL_WAIT):
            await self._wait_gone()
            return
        log.warning("terminal %r (pid %d): processes of its group survived SIGKILL", self.terminal_id, pgid)

    async def _wait_gone(self) -> None:
        returncode = await self.process.wait()
        if self._supervisor is None:
            self._record_exit(returncode)
        while _group_alive(self.pid):
            await trio.sleep(_POLL)
        self._record_exit(None)  # the supervisor died before the command (else its exit was recorded)

    async def _run(self, grace: float) -> None:
        """The terminal's life: read output and wait for the exit until released; then stop everything."""
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    nursery.start_soon(self._pump)
                    nursery.start_soon(self._reap)
                    if self._kill_pending:
                        nursery.start_soon(self._stop_group, grace)
                    await trio.sleep_forever()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                try:
                    await self._stop_group(grace)
                finally:
                    stream = self.process.stdout
                    if stream is not None:
                        await trio.aclose_forcefully(stream)
                    if self._supervisor is not None:
                        self._supervisor.close()
                    self._closed.set()
                    self._settled.set()
                    log.debug("terminal %r closed", self.terminal_id)


class TerminalManager:
    """Runs the terminals of one client connection (``docs/protocol/v1/terminals.mdx``).

    ``conn``: the :class:`~acp_trio.ClientSideConnection`; its ``sessions`` supply each session's
    ``cwd`` and roots and end its terminals, and ``conn.start_soon`` runs one background task per
    terminal.  ``default_output_byte_limit``: bytes of output kept when ``terminal/create`` sets no
    ``outputByteLimit`` (``None``: keep everything).  ``kill_grace``: seconds between SIGTERM and
    SIGKILL when a terminal is killed or released.  ``allowed_cwd``: ``"any"`` (default) or
    ``"roots"``: the working directory must then be the session's ``cwd`` or one of its
    ``additionalDirectories``, or lie beneath one.  ``on_output``: called as
    ``on_output(terminal, data)`` with every chunk of output read (bytes, before truncation; for
    showing live output; must not block).  ``supervise``: run each command under the subreaper
    supervisor (``None``, the default: where :func:`supervisor_available`; ``True`` elsewhere raises
    ``ValueError``; ``False``: the command alone in its process group, as without it).

    ``terminals``: the live terminals by id (a read-only mapping of :class:`Terminal`).

    Errors (``RequestError``): -32002 for a session that is not open (data ``field: "sessionId"``),
    a terminal id that is unknown, released or of another session (``field: "terminalId"``), and a
    command that does not exist (``field: "command"``); -32602 for invalid params (``field`` names
    which: ``"cwd"``, ``"env[0].name"``, ``"args[1]"``, ``"outputByteLimit"``, ``"command"``).
    """

    def __init__(
        self,
        conn: ClientSideConnection,
        *,
        default_output_byte_limit: int | None = DEFAULT_OUTPUT_BYTE_LIMIT,
        kill_grace: float = 2.0,
        allowed_cwd: Literal["any", "roots"] = "any",
        on_output: OutputListener | None = None,
        supervise: bool | None = None,
    ) -> None:
        if supervise is None:
            supervise = supervisor_available()
        elif supervise and not supervisor_available():
            raise ValueError("supervise=True needs Linux (a child subreaper) and sys.executable")
        if default_output_byte_limit is not None and default_output_byte_limit < 0:
            raise ValueError("default_output_byte_limit must be >= 0 or None")
        if kill_grace < 0:
            raise ValueError("kill_grace must be >= 0 seconds")
        if allowed_cwd not in ("any", "roots"):
            raise ValueError(f"allowed_cwd must be 'any' or 'roots', got {allowed_cwd!r}")
        self.conn = conn
        self.default_output_byte_limit = default_output_byte_limit
        self.kill_grace = kill_grace
        self.allowed_cwd = allowed_cwd
        self.on_output = on_output
        self.supervise = supervise
        self._warned_subreaper = False
        self._terminals: dict[str, Terminal] = {}
        self._ids = itertools.count(1)
        conn.sessions.on_end(self._session_ended)
        conn.connection.add_close_callback(self._connection_closed)

    @property
    def terminals(self) -> Mapping[str, Terminal]:
        """The live (not released) terminals, by terminal id."""
        return self._terminals

    # -- terminal/create -------------------------------------------------------------------------
    async def terminal_create(self, params: v1.CreateTerminalRequest) -> v1.CreateTerminalResponse:
        """``terminal/create``: start ``command`` with ``args`` and return its ``terminalId`` at once.

        Raises ``RequestError`` -32002 (session not open, command not found) or -32602 (invalid
        ``cwd``, ``env``, ``args``, ``outputByteLimit``, or a command that cannot be executed).
        """
        session_id = params.session_id
        info = self._session(session_id)
        command = params.command
        if not command or "\0" in command:
            raise _invalid("command", "the command must be a non-empty string without NUL characters", command)
        args = tuple(params.args or ())
        for i, arg in enumerate(args):
            if "\0" in arg:
                raise _invalid(f"args[{i}]", "arguments cannot contain NUL characters", arg)
        env = dict(os.environ)
        for i, var in enumerate(params.env or ()):
            name, value = var.name, var.value
            if not name or "=" in name or "\0" in name:
                raise _invalid(f"env[{i}].name", "a variable name must be non-empty, without '=' or NUL", name)
            if "\0" in value:
                raise _invalid(f"env[{i}].value", "a variable value cannot contain NUL characters", value)
            env[name] = value
        cwd = self._cwd(params.cwd, info)
        limit = params.output_byte_limit
        if limit is UNSET or limit is None:
            limit = self.default_output_byte_limit
        elif limit < 0:
            raise _invalid("outputByteLimit", "the limit must be a number of bytes >= 0", limit)

        if self.supervise:
            process, pid, supervisor, subreaper = await self._spawn_supervised(command, args, env, cwd)
        else:
            process, pid, supervisor, subreaper = await self._spawn(command, args, env, cwd), None, None, False
        terminal_id = f"term_{next(self._ids)}"
        terminal = Terminal(
            terminal_id,
            session_id,
            command,
            args,
            cwd,
            limit,
            process,
            self.on_output,
            pid=pid,
            supervisor=supervisor,
            subreaper=subreaper,
        )
        if self.conn.sessions.get(session_id) is not info or self.conn.closed:
            await self._abandon(terminal)
            raise RequestError(
                RESOURCE_NOT_FOUND,
                "Session ended",
                {
                    "field": "sessionId",
                    "sessionId": session_id,
                    "detail": "the session ended while the command started",
                },
            )
        self._terminals[terminal_id] = terminal
        try:
            self.conn.start_soon(terminal._run, self.kill_grace, name=f"terminal {terminal_id}")
        except BaseException:
            self._terminals.pop(terminal_id, None)
            await self._abandon(terminal)
            raise
        log.debug("terminal %r (pid %d) started: %r %r in %r", terminal_id, terminal.pid, command, args, cwd)
        return v1.CreateTerminalResponse(terminal_id=terminal_id)

    def _session(self, session_id: str) -> SessionInfo:
        info = self.conn.sessions.get(session_id)
        if info is None:
            raise RequestError(
                RESOURCE_NOT_FOUND,
                "Session not found",
                {"field": "sessionId", "sessionId": session_id, "detail": "no open session has this id"},
            )
        return info

    def _cwd(self, requested: object, info: SessionInfo) -> str:
        if isinstance(requested, str):
            cwd, source = requested, "cwd"
            if "\0" in cwd or not os.path.isabs(cwd):
                raise _invalid("cwd", "the working directory must be an absolute path", cwd)
        else:
            cwd, source = info.cwd, "the session's cwd"
        if not os.path.isdir(cwd):
            raise _invalid("cwd", f"{source} is not an existing directory", cwd)
        if self.allowed_cwd == "roots" and not _within_roots(cwd, info.roots):
            raise _invalid("cwd", "the working directory is outside the session's roots", cwd)
        return cwd

    async def _spawn_supervised(
        self, command: str, args: tuple[str, ...], env: dict[str, str], cwd: str
    ) -> tuple[trio.Process, int, _Supervisor, bool]:
        """Start ``command`` under its supervisor (``_reaper.py``): the supervisor's process, the
        command's pid, the control channel, and whether the supervisor is a subreaper."""
        ours, theirs = socket.socketpair()
        try:
            if os.path.isfile(_REAPER):
                argv = [sys.executable, "-I", "-S", _REAPER]
            else:  # no source file next to this one (a zip): import it
                argv = [sys.executable, "-I", "-m", "acp_trio._reaper"]
            argv += [str(theirs.fileno()), repr(float(self.kill_grace)), "--", command, *args]
            process = await self._spawn(command, args, env, cwd, argv=argv, pass_fds=(theirs.fileno(),))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        supervisor = _Supervisor(ours)
        try:
            first = await supervisor.next_line()
            word, _, rest = (first or "").partition(" ")
            if word == "error":  # it exits at once: no command ran
                code = int(rest)
                await self._spawn(command, args, env, cwd, error=OSError(code, os.strerror(code), command))
            if word != "pid":
                detail = f"its supervisor failed: {first or 'no answer'}"
                raise RequestError(INTERNAL_ERROR, "Cannot start the command", {"field": "command", "detail": detail})
        except BaseException:
            supervisor.send(b"k")
            with trio.CancelScope(shield=True):
                with trio.move_on_after(_KILL_WAIT):
                    await process.wait()
                if process.stdout is not None:
                    await trio.aclose_forcefully(process.stdout)
            supervisor.close()
            raise
        pid_text, _, subreaper = rest.partition(" ")
        if subreaper != "1" and not self._warned_subreaper:
            self._warned_subreaper = True
            log.warning("prctl(PR_SET_CHILD_SUBREAPER) failed: a process that leaves its terminal's group can escape")
        return process, int(pid_text), supervisor, subreaper == "1"

    async def _spawn(
        self,
        command: str,
        args: tuple[str, ...],
        env: dict[str, str],
        cwd: str,
        *,
        argv: list[str] | None = None,
        pass_fds: tuple[int, ...] = (),
        error: OSError | None = None,
    ) -> trio.Process:
        """Start ``argv`` (default: the command) as the terminal's process, errors as ``RequestError``.

        ``error``: raise this error of starting the command (reported by its supervisor) instead.
        """
        try:
            if error is not None:
                raise error
            try:
                return await trio.lowlevel.open_process(
                    [command, *args] if argv is None else argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,
                    pass_fds=pass_fds,
                )
            except OSError as exc:
                if argv is None or exc.filename != argv[0]:
                    raise
                log.warning("terminal/create: cannot start the terminal supervisor %r: %r", argv[0], exc)
                detail = f"cannot run the terminal supervisor {argv[0]!r}: {exc.strerror}"
                data = {"field": "command", "command": command, "detail": detail}
                raise RequestError(INTERNAL_ERROR, "Cannot start the command", data) from None
        except FileNotFoundError as exc:
            if exc.filename == cwd:
                raise _invalid("cwd", "the working directory does not exist", cwd) from None
            detail = "no such program (run without a shell: put arguments in args, or use sh -c)"
            raise RequestError(
                RESOURCE_NOT_FOUND,
                "Command not found",
                {"field": "command", "command": command, "detail": detail},
            ) from None
        except (PermissionError, IsADirectoryError, NotADirectoryError) as exc:
            raise RequestError(
                INVALID_PARAMS,
                "Command cannot be executed",
                {"field": "command", "command": command, "detail": exc.strerror},
            ) from None
        except OSError as exc:
            log.warning("terminal/create: cannot start %r: %r", command, exc)
            raise RequestError(
                INTERNAL_ERROR,
                "Cannot start the command",
                {"field": "command", "command": command, "detail": exc.strerror or str(exc)},
            ) from None
        except ValueError as exc:  # anything the checks above missed
            raise _invalid("command", str(exc), command) from None

    @staticmethod
    async def _abandon(terminal: Terminal) -> None:
        if terminal._supervisor is not None:
            terminal._supervisor.send(b"k")
        else:
            _signal_group(terminal.pid, signal.SIGKILL)
        with trio.CancelScope(shield=True):
            with trio.move_on_after(_KILL_WAIT):
                await terminal.process.wait()
            if terminal.process.stdout is not None:
                await trio.aclose_forcefully(terminal.process.stdout)
            if terminal._supervisor is not None:
                terminal._supervisor.close()
            terminal._closed.set()
            terminal._settled.set()

    # -- the other methods -----------------------------------------------------------------------
    def _lookup(self, session_id: str, terminal_id: str) -> Terminal:
        terminal = self._terminals.get(terminal_id)
        if terminal is None or terminal.session_id != session_id:
            raise RequestError(
                RESOURCE_NOT_FOUND,
                "Terminal not found",
                {
                    "field": "terminalId",
                    "terminalId": terminal_id,
                    "sessionId": session_id,
                    "detail": "no live terminal of this session has this id (never created, or released)",
                },
            )
        return terminal

    async def terminal_output(self, params: v1.TerminalOutputRequest) -> v1.TerminalOutputResponse:
        """``terminal/output``: the output so far, ``truncated``, and ``exitStatus`` once exited.

        Raises ``RequestError`` -32002 for an unknown or released terminal.
        """
        return self._lookup(params.session_id, params.terminal_id).output()

    async def terminal_wait_for_exit(self, params: v1.WaitForTerminalExitRequest) -> v1.WaitForTerminalExitResponse:
        """``terminal/wait_for_exit``: wait until the command exits; its ``exitCode`` / ``signal``.

        Cancellable (``$/cancel_request``).  Raises ``RequestError`` -32002 for an unknown or
        released terminal.
        """
        status = await self._lookup(params.session_id, params.terminal_id).wait_for_exit()
        return v1.WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def terminal_kill(self, params: v1.KillTerminalRequest) -> v1.KillTerminalResponse:
        """``terminal/kill``: SIGTERM the command and its descendants, SIGKILL them after ``kill_grace``.

        Answers once the command exited (what it started is stopped in the background); the
        terminal stays valid for ``terminal/output`` and ``terminal/wait_for_exit``.  Raises
        ``RequestError`` -32002 for an unknown or released terminal.
        """
        terminal = self._lookup(params.session_id, params.terminal_id)
        terminal._kill(self.kill_grace)
        await terminal.wait_for_exit()
        return v1.KillTerminalResponse()

    async def terminal_release(self, params: v1.ReleaseTerminalRequest) -> v1.ReleaseTerminalResponse:
        """``terminal/release``: kill the command if it runs (as :meth:`terminal_kill`) and forget the id.

        Answers once the command and every process it started are gone.  Raises ``RequestError`` -32002 for
        an unknown or already released terminal.
        """
        terminal = self._lookup(params.session_id, params.terminal_id)
        self.release(terminal)
        await terminal.wait_closed()
        return v1.ReleaseTerminalResponse()

    def release(self, terminal: Terminal) -> None:
        """Release ``terminal`` now: forget its id and stop its command and descendants in the
        background (``await terminal.wait_closed()`` to wait for that)."""
        if self._terminals.get(terminal.terminal_id) is terminal:
            del self._terminals[terminal.terminal_id]
        terminal.released = True
        terminal._scope.cancel()

    def _session_ended(self, info: SessionInfo) -> None:
        for terminal in [t for t in self._terminals.values() if t.session_id == info.session_id]:
            log.debug("session %r ended (%s): releasing terminal %r", info.session_id, info.end_reason, terminal)
            self.release(terminal)

    def _connection_closed(self, reason: str) -> None:
        for terminal in list(self._terminals.values()):
            self.release(terminal)


def supervisor_available() -> bool:
    """Whether terminals can run under a subreaper supervisor here: Linux, with ``sys.executable``
    a Python interpreter (not a frozen application, whose executable would not run ``_reaper.py``)."""
    return sys.platform.startswith("linux") and bool(sys.executable) and not getattr(sys, "frozen", False)


class _Supervisor:
    """The client's end of a terminal supervisor's control socket (the protocol is in ``_reaper``)."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._buffer = bytearray()
        self._lines: collections.deque[str] = collections.deque()
        self.eof = False
        self.closed = False
        self.done = False  # it said "done": it exited with no descendant left

    def _fill(self) -> None:
        while not self.eof and not self.closed:
            try:
                data = self._sock.recv(4096)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.eof = True
                return
            self._buffer += data
            while (end := self._buffer.find(b"\n")) >= 0:
                line = self._buffer[:end].decode("ascii", "replace")
                del self._buffer[: end + 1]
                if line == "done":
                    self.done = True
                self._lines.append(line)

    def line_now(self) -> str | None:
        """The next line if one arrived, else ``None`` (without waiting)."""
        self._fill()
        return self._lines.popleft() if self._lines else None

    async def next_line(self) -> str | None:
        """The next line; ``None`` once the supervisor closed its end (it exited)."""
        while True:
            line = self.line_now()
            if line is not None or self.eof or self.closed:
                return line
            await trio.lowlevel.wait_readable(self._sock)

    def send(self, command: bytes) -> None:
        """``b"t"``: stop everything (SIGTERM, SIGKILL after its grace); ``b"k"``: SIGKILL everything now."""
        if self.closed:
            return
        try:
            self._sock.send(command, socket.MSG_NOSIGNAL)
        except OSError:  # it exited already
            pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            trio.lowlevel.notify_closing(self._sock)
            self._sock.close()


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (exists and is not a zombie)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def _invalid(field: str, detail: str, value: object) -> RequestError:
    return RequestError(INVALID_PARAMS, "Invalid params", {"field": field, "value": value, "detail": detail})


def _complete_end(data: bytes) -> int:
    """Length of ``data`` without a trailing UTF-8 sequence whose last bytes are still missing."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        byte = data[n - back]
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back for the lead byte
            continue
        need = 2 if 0xC0 <= byte < 0xE0 else 3 if 0xE0 <= byte < 0xF0 else 4 if 0xF0 <= byte < 0xF8 else 1
        return n - back if back < need else n
    return n


def _within_roots(path: str, roots: tuple[str, ...]) -> bool:
    real = os.path.realpath(path)
    for root in roots:
        root_real = os.path.realpath(root)
        try:
            if os.path.commonpath([real, root_real]) == root_real:
                return True
        except ValueError:
            continue
    return False


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie (dead, awaiting its reaper)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not os.path.exists("/proc/self/stat"):
        return True  # no /proc: a group of zombies counts as alive
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
            return True
    return False


__all__ = ["DEFAULT_OUTPUT_BYTE_LIMIT", "Terminal", "TerminalManager", "supervisor_available"]

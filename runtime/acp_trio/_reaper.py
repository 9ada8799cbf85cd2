"""A terminal command's supervisor: a child subreaper that leaves no descendant behind (Linux).

:class:`acp_trio.terminals.TerminalManager` starts it, with the terminal's ``cwd``, environment,
stdin and output pipe, as::

    python -I -S _reaper.py CONTROL_FD GRACE -- COMMAND [ARG ...]

It runs as a file of its own and imports only modules built into the interpreter and ``ctypes``
(never trio nor acp_trio), so it starts in about as long as a bare interpreter; ``-I`` keeps the
command's ``PYTHON*`` variables away from it.  It never writes to the command's output: its own
fds 1 and 2 point at ``/dev/null`` and only the command gets the originals.

1. It becomes a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): a descendant whose parent
   exits (a double fork that calls ``setsid()``, a daemon) is reparented to it instead of to init.
2. It starts COMMAND (looked up on the ``PATH`` of the environment) in a session and process group
   of its own, with SIGPIPE and SIGXFSZ back at their defaults, as ``subprocess`` does.
3. It reports on CONTROL_FD (a socket to the client), one ASCII line each: ``pid <pid> <0|1>``
   once the command runs (1: it is a subreaper), or ``error <errno>`` if the command cannot be
   started (it then exits with 127); ``status <returncode>`` when the command exits (the
   convention of ``subprocess``: the exit code, or minus the number of the signal that ended it);
   ``done`` just before it exits, when no descendant is left; ``crash <text>`` on an internal error.
4. It reaps every child, the command and the orphans reparented to it.  Left alone it exits once
   the command has exited and no descendant is left.
5. It stops everything on ``t`` read from CONTROL_FD, on end of file there (the client is gone,
   even killed with SIGKILL) and on SIGTERM, SIGINT or SIGHUP (those the client did not ignore):
   SIGTERM, then SIGCONT, to the command's process group and to every descendant alive then (found
   in ``/proc`` by following parent ids down from itself); SIGKILL to all of them GRACE seconds
   later, or at once on ``k``, repeated until none is left; then it exits.
6. It exits as the command did: with the same exit code, or killed by the same signal (raised on
   itself with the default disposition, core dumps disabled).

A descendant can still escape by killing the supervisor itself (it runs as the same user).
"""

from __future__ import annotations

import os
import select
import sys
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs more than the rest of the start-up
if TYPE_CHECKING:
    import signal as _signal
else:
    import _signal  # the C module: ``signal`` would import enum (about 4 ms)

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
_KILL_POLL = 0.05  # seconds between rounds of SIGKILL while descendants remain
_CORE_SIGNALS = frozenset(
    {
        _signal.SIGQUIT,
        _signal.SIGILL,
        _signal.SIGTRAP,
        _signal.SIGABRT,
        _signal.SIGBUS,
        _signal.SIGFPE,
        _signal.SIGSEGV,
        _signal.SIGXCPU,
        _signal.SIGXFSZ,
        _signal.SIGSYS,
    }
)

_stop_requested = False


def _prctl(option: int, value: int) -> bool:
    """``prctl(option, value)`` through libc; false if it failed or there is no prctl."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        zero = ctypes.c_ulong(0)
        return int(libc.prctl(option, ctypes.c_ulong(value), zero, zero, zero)) == 0
    except (OSError, AttributeError):
        return False


def _send(control: int, line: str) -> None:
    try:
        os.write(control, line.encode("ascii", "replace") + b"\n")
    except OSError:  # the client is gone: nobody to tell
        pass


def _descendants() -> set[int] | None:
    """Pids of every process below this one (from ``/proc``); ``None`` without ``/proc``."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    children: dict[int, list[int]] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
            try:
                stat = os.read(fd, 512)
            finally:
                os.close(fd)
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split(None, 2)  # after "pid (comm) ": state ppid ...
        if len(fields) >= 2:
            children.setdefault(int(fields[1]), []).append(int(name))
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        for pid in children.get(todo.pop(), ()):
            if pid not in found:
                found.add(pid)
                todo.append(pid)
    return found


def _signal_all(sig: int, group: int | None) -> None:
    """Send ``sig`` to process group ``group`` (while its leader is unreaped) and every descendant.

    A descendant below the first level could exit and its pid be reused between the scan and the
    signal; pids are not reused that fast in practice.
    """
    if group is not None:
        try:
            os.killpg(group, sig)
        except OSError:
            pass
    for pid in _descendants() or ():
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _on_stop(signum: int, frame: object) -> None:
    global _stop_requested
    _stop_requested = True


def _on_child(signum: int, frame: object) -> None:
    pass  # the wakeup fd wakes the loop


def _exit_as(status: int) -> None:
    """Exit with ``status`` (a ``subprocess`` return code): an exit code, or die of the signal."""
    if status >= 0:
        os._exit(status)
    sig = -status
    try:
        _signal.signal(sig, _signal.SIG_DFL)
    except (OSError, ValueError):  # SIGKILL and SIGSTOP cannot be caught: already the default
        pass
    if sig in _CORE_SIGNALS:
        _prctl(PR_SET_DUMPABLE, 0)  # die of the signal without leaving a core of the supervisor
    try:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass
    os._exit(128 + sig)


def _spawn(command: list[str], out: int, err: int) -> int:
    """Start ``command`` in a new session, its output on ``out`` and ``err``; its pid.

    Raises the ``OSError`` of ``execvpe`` if it cannot be started.  A fork and an exec, as
    ``subprocess`` does: ``posix_spawn`` in glibc leaves its internal signals (32, 33) ignored in
    the command, which a command started directly would not inherit.
    """
    errors_r, errors_w = os.pipe()  # closed on exec: nothing read means the command runs
    pid = os.fork()
    if pid == 0:
        try:
            os.close(errors_r)
            os.setsid()
            os.dup2(out, 1)
            os.dup2(err, 2)
            for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):  # ignored by the interpreter; our handlers reset on exec
                _signal.signal(sig, _signal.SIG_DFL)
            os.execvpe(command[0], command, os.environ)
        except OSError as exc:
            os.write(errors_w, str(exc.errno or 0).encode())
        finally:
            os._exit(127)
    os.close(errors_w)
    try:
        report = b""
        while chunk := os.read(errors_r, 32):
            report += chunk
    finally:
        os.close(errors_r)
    if report:
        os.waitpid(pid, 0)
        code = int(report)
        raise OSError(code, os.strerror(code), command[0])
    return pid


def run(control: int, grace: float, command: list[str]) -> int:
    """Supervise ``command`` (see the module docstring); its return code once no descendant is left."""
    os.set_inheritable(control, False)
    out, err = os.dup(1), os.dup(2)  # the command's output; ours goes nowhere
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    _signal.set_wakeup_fd(wake_w)
    _signal.signal(_signal.SIGCHLD, _on_child)
    for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        if _signal.getsignal(sig) != _signal.SIG_IGN:
            _signal.signal(sig, _on_stop)

    subreaper = _prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        pid = _spawn(command, out, err)
    except OSError as exc:
        _send(control, f"error {exc.errno or 0}")
        return 127
    finally:
        os.close(out)
        os.close(err)
    _send(control, f"pid {pid} {int(subreaper)}")

    status: int | None = None
    stop_at: float | None = None  # when SIGTERM went out
    kill = False
    listening = True  # to the control socket, until its end of file
    while True:
        try:
            while True:
                child, wait_status = os.waitpid(-1, os.WNOHANG)
                if child == 0:
                    break
                if child == pid:
                    status = os.waitstatus_to_exitcode(wait_status)
                    _send(control, f"status {status}")
        except ChildProcessError:
            break  # no child left, so no descendant either: they would have been reparented to us
        now = time.monotonic()
        if _stop_requested and stop_at is None:
            stop_at = now
            group = pid if status is None or not subreaper else None  # a reaped leader's pgid may be reused
            _signal_all(_signal.SIGTERM, group)
            _signal_all(_signal.SIGCONT, group)  # a stopped process handles SIGTERM only once continued
        if stop_at is not None and now >= stop_at + grace:
            kill = True
        if kill:
            _signal_all(_signal.SIGKILL, pid if status is None or not subreaper else None)
            timeout: float | None = _KILL_POLL
        elif stop_at is not None:
            timeout = min(stop_at + grace - now, 3600.0)  # select refuses an infinite timeout
        else:
            timeout = None
        readable, _, _ = select.select([wake_r, control] if listening else [wake_r], [], [], timeout)
        if wake_r in readable:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        if control in readable:
            try:
                data = os.read(control, 64)
            except OSError:
                data = b""
            if not data:
                listening = False
                _on_stop(0, None)
            if b"t" in data:
                _on_stop(0, None)
            if b"k" in data:
                _on_stop(0, None)
                kill = True
    _send(control, "done")
    return 0 if status is None else status


def main(argv: list[str]) -> None:
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: _reaper.py CONTROL_FD GRACE -- COMMAND [ARG ...]\n")
        os._exit(2)
    control = int(argv[1])
    try:
        status = run(control, float(argv[2]), argv[4:])
    except BaseException as exc:  # a bug: say so, and leave nothing behind
        _send(control, f"crash {type(exc).__name__}: {exc}")
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and _descendants():
            _signal_all(_signal.SIGKILL, None)
            try:
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            except ChildProcessError:
                break
            time.sleep(_KILL_POLL)
        os._exit(70)
    _exit_as(status)


if __name__ == "__main__":
    main(sys.argv)

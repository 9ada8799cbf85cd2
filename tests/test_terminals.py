"""Terminals end to end: ``TerminalManager`` on the client, ``open_terminal`` on the agent.

Spec: ``docs/protocol/v1/terminals.mdx``.  Each test runs an agent and a client in memory; the
client runs real processes (small ``sys.executable -c`` scripts).  Waits use the real clock, each
bounded by ``trio.fail_after``; readiness of a child comes from the manager's ``on_output`` hook,
never from a sleep.  A process is gone when its pid no longer exists (our children, which the
manager reaps) or is a zombie (a grandchild, which only its reaper can remove).
"""

from __future__ import annotations

import fcntl
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import acp_trio
from acp_schema import v1
from acp_trio.agent_terminal import TerminalHandle, open_terminal
from acp_trio.terminals import DEFAULT_OUTPUT_BYTE_LIMIT, Terminal, TerminalManager

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups and signals are POSIX-only")

PY = sys.executable
DEADLINE = 15
GRACE = 0.3  # kill_grace: seconds between SIGTERM and SIGKILL

SLEEPER = "import time\nprint('ready', flush=True)\nwhile True: time.sleep(1)"
STUBBORN = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(1)"
)


class Agent:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.count = 0

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        caps = v1.AgentCapabilities(session_capabilities=v1.SessionCapabilities(close=v1.SessionCloseCapabilities()))
        return v1.InitializeResponse(protocol_version=1, agent_capabilities=caps)

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        self.count += 1
        return v1.NewSessionResponse(session_id=f"s{self.count}")

    async def session_close(self, params: v1.CloseSessionRequest) -> v1.CloseSessionResponse:
        return v1.CloseSessionResponse()


class Client:
    """Delegates terminal/* to a TerminalManager and records every chunk of output it reads."""

    def __init__(self, conn: acp_trio.ClientSideConnection, **options: Any) -> None:
        options.setdefault("kill_grace", GRACE)
        self.terminals = TerminalManager(conn, on_output=self._on_output, **options)
        self.terminal_create = self.terminals.terminal_create
        self.terminal_output = self.terminals.terminal_output
        self.terminal_wait_for_exit = self.terminals.terminal_wait_for_exit
        self.terminal_kill = self.terminals.terminal_kill
        self.terminal_release = self.terminals.terminal_release
        self.seen: dict[str, bytearray] = {}
        self.slow_reader = 0.0  # seconds the output hook blocks per chunk: a reader that lags behind
        self._changed = trio.Event()

    def _on_output(self, terminal: Terminal, data: bytes) -> None:
        self.seen.setdefault(terminal.terminal_id, bytearray()).extend(data)
        if self.slow_reader:
            time.sleep(self.slow_reader)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_seen(self, terminal_id: str, needle: bytes = b"", *, size: int = 0) -> None:
        """Wait until the output read for ``terminal_id`` contains ``needle`` and has ``size`` bytes."""
        while True:
            seen = self.seen.get(terminal_id, b"")
            if needle in seen and len(seen) >= size:
                return
            await self._changed.wait()


class Pair:
    def __init__(self, agent_conn: acp_trio.AgentSideConnection, client_conn: acp_trio.ClientSideConnection) -> None:
        self.agent_conn = agent_conn
        self.client_conn = client_conn
        self.client: Client = client_conn.handler
        self.manager: TerminalManager = self.client.terminals
        self.session_id = ""

    async def new_session(self, cwd: Path) -> str:
        response = await self.client_conn.agent.session_new(v1.NewSessionRequest(cwd=str(cwd), mcp_servers=[]))
        session_id: str = response.session_id
        return session_id

    def pid(self, handle: TerminalHandle) -> int:
        return self.manager.terminals[handle.terminal_id].pid

    async def create(self, session_id: str, code: str, **fields: Any) -> str:
        """terminal/create of ``python -c code`` sent raw (no handle: nothing releases it)."""
        request = v1.CreateTerminalRequest(session_id=session_id, command=PY, args=["-c", code], **fields)
        response = await self.agent_conn.client.terminal_create(request)
        terminal_id: str = response.terminal_id
        return terminal_id


@asynccontextmanager
async def pair(cwd: Path, **options: Any) -> AsyncIterator[Pair]:
    async with acp_trio.open_memory_pair(Agent, functools.partial(Client, **options)) as (agent_conn, client_conn):
        caps = v1.ClientCapabilities(terminal=True)
        await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=caps))
        p = Pair(agent_conn, client_conn)
        p.session_id = await p.new_session(cwd)
        yield p


def python(code: str) -> dict[str, Any]:
    return {"command": PY, "args": ["-c", code]}


def assert_reaped(pid: int) -> None:
    """Our direct child: once reaped, the pid no longer exists."""
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def is_gone(pid: int) -> bool:
    """True if ``pid`` no longer runs: no such process, or a zombie (dead, waiting for a reaper)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    except OSError:  # no /proc
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return any(line.split()[1] == "Z" for line in status.splitlines() if line.startswith("State:"))


def error_field(exc: pytest.ExceptionInfo[acp_trio.RequestError]) -> Any:
    assert isinstance(exc.value.data, dict)
    return exc.value.data["field"]


# -- running commands ---------------------------------------------------------------------------


async def test_output_exit_code_and_release_through_the_handle(tmp_path: Path) -> None:
    code = "import sys\nprint('hello')\nprint('oops', file=sys.stderr, flush=True)\nsys.exit(3)"
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(code)) as term:
                assert term.terminal_id in p.manager.terminals
                pid = p.pid(term)
                status = await term.wait_for_exit()
                assert (status.exit_code, status.signal) == (3, None)
                out = await term.output()
                assert out.output == "hello\noops\n"  # stderr merged into stdout
                assert out.truncated is False
                assert isinstance(out.exit_status, v1.TerminalExitStatus)
                assert (out.exit_status.exit_code, out.exit_status.signal) == (3, None)
            assert term.released
            assert p.manager.terminals == {}
            assert_reaped(pid)


async def test_output_before_exit_has_no_exit_status_and_stdin_is_empty(tmp_path: Path) -> None:
    code = "import sys, time\nprint('stdin:', repr(sys.stdin.read()), flush=True)\nwhile True: time.sleep(1)"
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(code)) as term:
                await p.client.wait_seen(term.terminal_id, b"\n")
                out = await term.output()
                assert out.output == "stdin: ''\n"
                assert out.exit_status is acp_trio.UNSET


async def test_env_is_applied_over_the_client_environment_and_cwd_defaults_to_the_session(tmp_path: Path) -> None:
    code = "import os\nprint(os.environ['ACP_TERM_VAR'], 'PATH' in os.environ, os.getcwd(), sep='|')"
    sub = tmp_path / "sub"
    sub.mkdir()
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(code), env={"ACP_TERM_VAR": "x y"}) as term:
                await term.wait_for_exit()
                value, has_path, cwd = (await term.output()).output.rstrip("\n").split("|")
            assert (value, has_path) == ("x y", "True")
            assert os.path.samefile(cwd, tmp_path)
            env = [v1.EnvVariable(name="ACP_TERM_VAR", value="z")]
            async with open_terminal(p.agent_conn, p.session_id, **python(code), env=env, cwd=str(sub)) as term:
                await term.wait_for_exit()
                value, _, cwd = (await term.output()).output.rstrip("\n").split("|")
            assert value == "z"
            assert os.path.samefile(cwd, sub)


async def test_no_shell_runs_arguments_verbatim(tmp_path: Path) -> None:
    code = "import sys\nprint(sys.argv[1:])"
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, PY, args=["-c", code, "$HOME", "a b;c", "*"]) as term:
                await term.wait_for_exit()
                assert (await term.output()).output == "['$HOME', 'a b;c', '*']\n"
            async with open_terminal(p.agent_conn, p.session_id, "sh", args=["-c", "echo $((6 * 7))"]) as term:
                await term.wait_for_exit()
                assert (await term.output()).output == "42\n"


async def test_a_signal_death_reports_the_signal_name_and_no_exit_code(tmp_path: Path) -> None:
    code = "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)"
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            wire: list[bytes] = []
            p.agent_conn.connection.tap = lambda direction, line: wire.append(line) if direction == "in" else None
            async with open_terminal(p.agent_conn, p.session_id, **python(code)) as term:
                status = await term.wait_for_exit()
                assert (status.exit_code, status.signal) == (None, "SIGTERM")
            assert any(b'"exitCode":null' in line and b'"signal":"SIGTERM"' in line for line in wire)


# -- output limits ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "limit", "expected", "truncated"),
    [
        ("€" * 10, 7, "€€", True),  # the cut falls inside a 3-byte character: skip its tail
        ("a" + "é" * 5, 4, "éé", True),  # the cut falls on a boundary
        ("a" + "é" * 5, 5, "éé", True),
        ("😀" * 3, 6, "😀", True),
        ("ab€", 5, "ab€", False),  # exactly the limit: nothing dropped
        ("abc", 0, "", True),
    ],
)
async def test_truncation_drops_from_the_front_at_a_character_boundary(
    tmp_path: Path, data: str, limit: int, expected: str, truncated: bool
) -> None:
    code = f"import sys\nsys.stdout.buffer.write({data.encode()!r})"
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(code), output_byte_limit=limit) as term:
                await term.wait_for_exit()
                out = await term.output()
                assert (out.output, out.truncated) == (expected, truncated)
                assert len(out.output.encode()) <= limit


async def test_invalid_utf8_is_replaced_and_a_partial_character_waits_for_its_last_byte(tmp_path: Path) -> None:
    code = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGUSR1, lambda *_: (os.write(1, b'\\xac'), os._exit(0)))\n"
        "os.write(1, b'\\xff|x\\xe2\\x82')\n"
        "while True: signal.pause()"
    )
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(code)) as term:
                await p.client.wait_seen(term.terminal_id, b"\xe2\x82")
                assert (await term.output()).output == "\ufffd|x"  # no U+FFFD for the half-arrived "€"
                os.kill(p.pid(term), signal.SIGUSR1)
                await term.wait_for_exit()
                assert (await term.output()).output == "\ufffd|x€"


async def test_the_default_limit_applies_when_the_request_sets_none(tmp_path: Path) -> None:
    code = "import sys\nsys.stdout.write('ab' * 20)"
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path, default_output_byte_limit=10) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(code)) as term:
                await term.wait_for_exit()
                out = await term.output()
                assert (out.output, out.truncated) == ("ab" * 5, True)
                assert p.manager.terminals[term.terminal_id].output_byte_limit == 10
    assert DEFAULT_OUTPUT_BYTE_LIMIT == 1 << 20


async def test_a_flood_is_drained_to_the_end_keeping_only_the_limit(tmp_path: Path) -> None:
    code = "import os\nchunk = b'y' * 65536\nfor _ in range(128): os.write(1, chunk)\nos.write(1, b'END')"
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(code), output_byte_limit=1000) as term:
                assert (await term.wait_for_exit()).exit_code == 0  # the writer never blocked for good
                out = await term.output()
                assert out.truncated is True
                assert out.output == "y" * 997 + "END"
                assert p.manager.terminals[term.terminal_id].retained_bytes == 1000
                assert len(p.client.seen[term.terminal_id]) == 128 * 65536 + 3


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="needs Linux pipe sizes")
async def test_the_exit_status_comes_after_all_output_the_command_wrote(tmp_path: Path) -> None:
    # The child fills a 1 MiB pipe in one write and exits at once; the reader lags (a blocking
    # output hook), so the exit is seen long before the pipe is read.  Output asked for right after
    # the exit status must still hold everything.
    code = (
        "import fcntl, os\n"
        "fcntl.fcntl(1, fcntl.F_SETPIPE_SZ, 1 << 20)\n"
        "os.write(1, b'x' * (640 << 10) + b'END')\n"
        "os._exit(0)"
    )
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            p.client.slow_reader = 0.02
            terminal = p.manager.terminals[await p.create(p.session_id, code, output_byte_limit=1 << 20)]
            assert (await terminal.wait_for_exit()).exit_code == 0
            out = terminal.output()  # no checkpoint since the exit was recorded: the reader had no turn
            assert len(out.output) == (640 << 10) + 3 and out.output.endswith("END")


async def test_an_endless_flood_keeps_memory_bounded_and_release_still_stops_it(tmp_path: Path) -> None:
    code = "import os\nchunk = b'z' * 65536\nwhile True: os.write(1, chunk)"
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(code), output_byte_limit=4096) as term:
                terminal = p.manager.terminals[term.terminal_id]
                for round in range(1, 4):
                    await p.client.wait_seen(term.terminal_id, size=round * (4 << 20))  # 4 MiB more each round
                    assert terminal.retained_bytes <= 4096
                    out = await term.output()  # requests are still answered during the flood
                    assert out.truncated and out.output == "z" * len(out.output) and 0 < len(out.output) <= 4096
            assert_reaped(terminal.pid)
            assert terminal.exit_status is not None and terminal.exit_status.signal == "SIGTERM"


# -- kill and release -------------------------------------------------------------------------


async def test_kill_keeps_the_terminal_for_output_and_wait(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(SLEEPER)) as term:
                await p.client.wait_seen(term.terminal_id, b"ready\n")
                pid = p.pid(term)
                await term.kill()
                assert_reaped(pid)  # kill answers once the command exited
                out = await term.output()
                assert out.output == "ready\n"
                assert isinstance(out.exit_status, v1.TerminalExitStatus) and out.exit_status.signal == "SIGTERM"
                assert (await term.wait_for_exit()).signal == "SIGTERM"
                await term.kill()  # killing an exited command is fine
                assert term.terminal_id in p.manager.terminals


async def test_kill_escalates_to_sigkill_for_a_command_that_ignores_sigterm(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(STUBBORN)) as term:
                await p.client.wait_seen(term.terminal_id, b"ready\n")
                started = trio.current_time()
                await term.kill()
                assert trio.current_time() - started >= GRACE
                status = await term.wait_for_exit()
                assert (status.exit_code, status.signal) == (None, "SIGKILL")


async def test_a_wait_that_times_out_is_cancelled_and_the_command_keeps_running(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(SLEEPER)) as term:
                with pytest.raises(acp_trio.RequestTimeout):
                    await term.wait_for_exit(timeout=0.2)
                assert (await term.output()).exit_status is acp_trio.UNSET
                os.kill(p.pid(term), 0)  # still running
                await term.kill()
                assert (await term.wait_for_exit(timeout=5)).signal == "SIGTERM"


@pytest.mark.parametrize("job_ignores_sigterm", [False, True])
async def test_release_kills_the_command_and_its_background_jobs(tmp_path: Path, job_ignores_sigterm: bool) -> None:
    job = "import os, signal, time\n"
    if job_ignores_sigterm:
        job += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    job += "print('ready', os.getpid(), flush=True)\ntime.sleep(60)"
    code = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {job!r}])\nwhile True: time.sleep(1)"
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(code)) as term:
                await p.client.wait_seen(term.terminal_id, b"\n")
                pid = p.pid(term)
                grandchild = int(p.client.seen[term.terminal_id].split()[1])
                assert not is_gone(grandchild)
                started = trio.current_time()
                await term.release()
                assert (trio.current_time() - started >= GRACE) == job_ignores_sigterm
                await term.release()  # idempotent
                assert_reaped(pid)
                assert is_gone(grandchild)  # release answered after the whole group was gone
                assert term.terminal_id not in p.manager.terminals
                with pytest.raises(RuntimeError, match="released"):
                    await term.output()


async def test_open_terminal_releases_on_error_and_on_cancellation(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            with pytest.raises(ValueError, match="boom"):
                async with open_terminal(p.agent_conn, p.session_id, **python(STUBBORN)) as term:
                    await p.client.wait_seen(term.terminal_id, b"ready\n")
                    pid = p.pid(term)
                    raise ValueError("boom")
            assert_reaped(pid)
            with trio.CancelScope() as scope:
                async with open_terminal(p.agent_conn, p.session_id, **python(SLEEPER)) as term:
                    pid = p.pid(term)
                    scope.cancel()
                    await trio.sleep_forever()
            assert scope.cancelled_caught
            assert_reaped(pid)
            assert p.manager.terminals == {}


async def test_the_handle_embeds_in_a_tool_call(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python("print(1)")) as term:
                content = term.content()
                assert acp_trio.converter.unstructure(content) == {"type": "terminal", "terminalId": term.terminal_id}
                update = v1.ToolCallSessionUpdate(tool_call_id="call_1", title="run", content=[content])
                await p.agent_conn.client.session_update(v1.SessionNotification(session_id=p.session_id, update=update))


# -- bad requests -------------------------------------------------------------------------------


async def test_a_command_that_does_not_exist_is_a_clear_error(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            for command in ("acp-no-such-command-xyz", str(tmp_path / "missing"), "echo hello"):
                with pytest.raises(acp_trio.RequestError) as exc:
                    async with open_terminal(p.agent_conn, p.session_id, command):
                        pass
                assert exc.value.code == acp_trio.RESOURCE_NOT_FOUND
                assert exc.value.message == "Command not found"
                assert exc.value.data["command"] == command and error_field(exc) == "command"
            (tmp_path / "plain.txt").write_text("not a program")
            with pytest.raises(acp_trio.RequestError) as exc:
                async with open_terminal(p.agent_conn, p.session_id, str(tmp_path / "plain.txt")):
                    pass
            assert exc.value.code == acp_trio.INVALID_PARAMS and error_field(exc) == "command"
            assert p.manager.terminals == {}


@pytest.mark.parametrize(
    ("fields", "code", "field"),
    [
        ({"session_id": "nope"}, acp_trio.RESOURCE_NOT_FOUND, "sessionId"),
        ({"cwd": "relative/dir"}, acp_trio.INVALID_PARAMS, "cwd"),
        ({"cwd": "/no/such/dir/acp"}, acp_trio.INVALID_PARAMS, "cwd"),
        ({"env": [v1.EnvVariable(name="A=B", value="x")]}, acp_trio.INVALID_PARAMS, "env[0].name"),
        ({"env": [v1.EnvVariable(name="OK", value="x"), v1.EnvVariable(name="", value="x")]}, -32602, "env[1].name"),
        ({"env": [v1.EnvVariable(name="OK", value="a\0b")]}, acp_trio.INVALID_PARAMS, "env[0].value"),
        ({"args": ["-c", "pass\0"]}, acp_trio.INVALID_PARAMS, "args[1]"),
        ({"command": ""}, acp_trio.INVALID_PARAMS, "command"),
        ({"output_byte_limit": -1}, acp_trio.INVALID_PARAMS, "outputByteLimit"),
    ],
)
async def test_invalid_create_params_answer_an_error_naming_the_field(
    tmp_path: Path, fields: dict[str, Any], code: int, field: str
) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            params: dict[str, Any] = {"session_id": p.session_id, "command": PY, "args": ["-c", "pass"]} | fields
            with pytest.raises(acp_trio.RequestError) as exc:
                await p.agent_conn.client.terminal_create(v1.CreateTerminalRequest(**params))
            assert exc.value.code == code
            assert error_field(exc) == field
            assert p.manager.terminals == {}


async def test_unknown_released_and_foreign_terminal_ids_are_errors(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            other = await p.new_session(tmp_path)
            terminal_id = await p.create(p.session_id, "print(1)")
            client = p.agent_conn.client
            for session_id, tid in (("s1", "term_nope"), (other, terminal_id)):
                ids: dict[str, Any] = {"session_id": session_id, "terminal_id": tid}
                calls = [
                    client.terminal_output(v1.TerminalOutputRequest(**ids)),
                    client.terminal_wait_for_exit(v1.WaitForTerminalExitRequest(**ids)),
                    client.terminal_kill(v1.KillTerminalRequest(**ids)),
                    client.terminal_release(v1.ReleaseTerminalRequest(**ids)),
                ]
                for call in calls:
                    with pytest.raises(acp_trio.RequestError) as exc:
                        await call
                    assert exc.value.code == acp_trio.RESOURCE_NOT_FOUND
                    assert exc.value.data == {
                        "field": "terminalId",
                        "terminalId": tid,
                        "sessionId": session_id,
                        "detail": "no live terminal of this session has this id (never created, or released)",
                    }
            ids = {"session_id": p.session_id, "terminal_id": terminal_id}
            await client.terminal_release(v1.ReleaseTerminalRequest(**ids))
            with pytest.raises(acp_trio.RequestError) as exc:
                await client.terminal_output(v1.TerminalOutputRequest(**ids))
            assert exc.value.code == acp_trio.RESOURCE_NOT_FOUND
            with pytest.raises(acp_trio.RequestError) as exc:
                await client.terminal_release(v1.ReleaseTerminalRequest(**ids))
            assert exc.value.code == acp_trio.RESOURCE_NOT_FOUND


async def test_allowed_cwd_roots_confines_the_working_directory(tmp_path: Path) -> None:
    inside = tmp_path / "inside"
    inside.mkdir()
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path, allowed_cwd="roots") as p:
            with pytest.raises(acp_trio.RequestError) as exc:
                await p.create(p.session_id, "pass", cwd=str(tmp_path.parent))
            assert exc.value.code == acp_trio.INVALID_PARAMS and error_field(exc) == "cwd"
            async with open_terminal(
                p.agent_conn, p.session_id, **python("import os; print(os.getcwd())"), cwd=str(inside)
            ) as term:
                assert (await term.wait_for_exit()).exit_code == 0


# -- sessions and the connection ----------------------------------------------------------------


async def test_session_close_releases_only_that_sessions_terminals(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            other = await p.new_session(tmp_path)
            async with open_terminal(p.agent_conn, p.session_id, **python(STUBBORN)) as doomed:
                kept_id = await p.create(other, SLEEPER)
                await p.client.wait_seen(doomed.terminal_id, b"ready\n")
                await p.client.wait_seen(kept_id, b"ready\n")
                doomed_terminal = p.manager.terminals[doomed.terminal_id]
                kept = p.manager.terminals[kept_id]
                await p.client_conn.agent.session_close(v1.CloseSessionRequest(session_id=p.session_id))
                assert doomed.terminal_id not in p.manager.terminals and doomed_terminal.released
                await doomed_terminal.wait_closed()
                assert_reaped(doomed_terminal.pid)
                assert doomed_terminal.exit_status is not None and doomed_terminal.exit_status.signal == "SIGKILL"
                with pytest.raises(acp_trio.RequestError) as exc:
                    await doomed.output()
                assert exc.value.code == acp_trio.RESOURCE_NOT_FOUND
            # leaving the block after the session ended: the failed release is logged, not raised
            assert any("terminal/release failed" in r.getMessage() for r in caplog.records)
            assert list(p.manager.terminals) == [kept_id]
            os.kill(kept.pid, 0)
            ids: dict[str, Any] = {"session_id": other, "terminal_id": kept_id}
            out = await p.agent_conn.client.terminal_output(v1.TerminalOutputRequest(**ids))
            assert out.output == "ready\n" and out.exit_status is acp_trio.UNSET
            await p.agent_conn.client.terminal_release(v1.ReleaseTerminalRequest(**ids))
            assert_reaped(kept.pid)


async def test_closing_the_connection_stops_every_terminal(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            other = await p.new_session(tmp_path)
            ids = [
                await p.create(p.session_id, STUBBORN),
                await p.create(other, SLEEPER),
                await p.create(other, "print('ready')"),
            ]
            for terminal_id in ids:
                await p.client.wait_seen(terminal_id, b"ready\n")
            terminals = [p.manager.terminals[terminal_id] for terminal_id in ids]
            finished = terminals[2]
            await finished.wait_for_exit()
        # leaving open_memory_pair closed both connections, which waited for the terminals' cleanup
        for terminal in terminals:
            assert terminal.released
            assert_reaped(terminal.pid)
        assert p.manager.terminals == {}
        signals = [t.exit_status.signal if t.exit_status else "running" for t in terminals]
        assert signals == ["SIGKILL", "SIGTERM", None]
        with pytest.raises(acp_trio.ConnectionClosed):
            await p.create(p.session_id, "pass")


async def test_terminal_calls_need_the_terminal_capability(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client) as (agent_conn, client_conn):
            await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
            session = await client_conn.agent.session_new(v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[]))
            with pytest.raises(acp_trio.CapabilityError):
                async with open_terminal(agent_conn, session.session_id, PY):
                    pass
            assert client_conn.handler.terminals.terminals == {}


# -- races on the client side (the manager's methods called directly) ---------------------------


def our_children() -> set[int]:
    """Pids of the live (not zombie) child processes of this test process (empty without /proc)."""
    found: set[int] = set()
    if not Path("/proc/self/stat").exists():
        return found
    me = str(os.getpid()).encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            if fields[1] == me and fields[0] != b"Z":
                found.add(int(entry.name))
    return found


async def test_a_kill_that_arrives_before_the_terminal_task_runs_still_kills(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            request = v1.CreateTerminalRequest(session_id=p.session_id, **python(SLEEPER))
            created = await p.manager.terminal_create(request)  # no checkpoint after start_soon
            ids: dict[str, Any] = {"session_id": p.session_id, "terminal_id": created.terminal_id}
            await p.manager.terminal_kill(v1.KillTerminalRequest(**ids))
            waited = await p.manager.terminal_wait_for_exit(v1.WaitForTerminalExitRequest(**ids))
            assert (waited.exit_code, waited.signal) == (None, "SIGTERM")
            await p.manager.terminal_release(v1.ReleaseTerminalRequest(**ids))
            assert p.manager.terminals == {}


async def test_a_session_that_ends_while_the_command_starts_leaves_no_process(tmp_path: Path) -> None:
    before = our_children()
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            request = v1.CreateTerminalRequest(session_id=p.session_id, **python(SLEEPER))
            errors: list[acp_trio.RequestError] = []

            async def create() -> None:
                with pytest.raises(acp_trio.RequestError) as exc:
                    await p.manager.terminal_create(request)
                errors.append(exc.value)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(create)
                await trio.testing.wait_all_tasks_blocked()  # create waits for the process to start
                p.client_conn.sessions.end(p.session_id, "session/close")
            assert errors[0].code == acp_trio.RESOURCE_NOT_FOUND and errors[0].message == "Session ended"
            assert p.manager.terminals == {}
            assert our_children() == before


async def test_no_child_process_outlives_the_connection(tmp_path: Path) -> None:
    before = our_children()
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            for code in (STUBBORN, SLEEPER, STUBBORN):
                terminal_id = await p.create(p.session_id, code)
                await p.client.wait_seen(terminal_id, b"ready\n")
            assert len(our_children() - before) == 3 or not Path("/proc/self/stat").exists()
    assert our_children() == before


@pytest.mark.parametrize(
    "options",
    [{"default_output_byte_limit": -1}, {"kill_grace": -1.0}, {"allowed_cwd": "anywhere"}],
)
async def test_manager_options_are_checked(options: dict[str, Any]) -> None:
    _agent_stream, client_stream = trio.testing.memory_stream_pair()
    conn = acp_trio.ClientSideConnection(object(), client_stream, client_stream)
    with pytest.raises(ValueError):
        TerminalManager(conn, **options)


# -- processes that leave the group: the supervisor (a child subreaper, Linux) --------------------

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"), reason="child subreapers are Linux-only"
)
CLIENT = Path(__file__).parent / "agents" / "terminal_client.py"


def daemonize(*, ignore_sigterm: bool = False, then: str = "while True: time.sleep(1)") -> str:
    """A command that starts a daemon the usual way (fork, ``setsid()``, fork again, stdio to
    /dev/null), prints ``daemon <pid>`` once the daemon runs, then runs ``then``."""
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN)" if ignore_sigterm else "pass"
    return (
        "import os, signal, sys, time\n"
        "r, w = os.pipe()\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    os.close(r)\n"
        "    os.setsid()  # leaves the terminal's process group and session\n"
        "    if os.fork() == 0:\n"
        f"        {ignore}\n"
        "        null = os.open(os.devnull, os.O_RDWR)\n"
        "        for fd in (0, 1, 2): os.dup2(null, fd)\n"
        "        os.write(w, str(os.getpid()).encode())\n"
        "        os.close(w)\n"
        "        while True: time.sleep(1)\n"
        "    os._exit(0)\n"
        "os.close(w)\n"
        "os.waitpid(child, 0)\n"
        "print('daemon', os.read(r, 64).decode(), flush=True)\n"
        f"{then}"
    )


@pytest.fixture
def daemons() -> Iterator[list[int]]:
    """Pids of daemons a test started; any still running at the end is killed (a failed test leaks none)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            if b"setsid" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


async def wait_exited(pid: int) -> None:
    """Wait until ``pid`` (not necessarily our child) has exited: its pidfd becomes readable."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)


async def start_daemon(p: Pair, terminal_id: str, daemons: list[int]) -> int:
    await p.client.wait_seen(terminal_id, b"\n")
    daemon = int(p.client.seen[terminal_id].split()[1])
    daemons.append(daemon)
    assert not is_gone(daemon)
    return daemon


@linux_only
@pytest.mark.parametrize("ignore_sigterm", [False, True])
async def test_release_stops_a_daemon_that_left_the_process_group(
    tmp_path: Path, daemons: list[int], ignore_sigterm: bool
) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(
                p.agent_conn, p.session_id, **python(daemonize(ignore_sigterm=ignore_sigterm))
            ) as term:
                daemon = await start_daemon(p, term.terminal_id, daemons)
                terminal = p.manager.terminals[term.terminal_id]
                started = trio.current_time()
                await term.release()
                if ignore_sigterm:
                    assert trio.current_time() - started >= GRACE  # SIGTERM, then SIGKILL after kill_grace
                assert is_gone(daemon)  # release answered after every descendant was gone
                assert_reaped(terminal.pid)
                assert terminal.exit_status is not None and terminal.exit_status.signal == "SIGTERM"


@linux_only
async def test_kill_stops_a_daemon_that_left_the_process_group(tmp_path: Path, daemons: list[int]) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(daemonize())) as term:
                daemon = await start_daemon(p, term.terminal_id, daemons)
                await term.kill()  # answers once the command exited; the rest is stopped right after
                assert (await term.wait_for_exit()).signal == "SIGTERM"
                with trio.fail_after(5):
                    await wait_exited(daemon)
                assert term.terminal_id in p.manager.terminals


@linux_only
async def test_the_exit_is_the_commands_and_its_daemon_lives_until_release(tmp_path: Path, daemons: list[int]) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            code = daemonize(then="sys.exit(4)")
            async with open_terminal(p.agent_conn, p.session_id, **python(code)) as term:
                daemon = await start_daemon(p, term.terminal_id, daemons)
                status = await term.wait_for_exit()  # does not wait for the daemon
                assert (status.exit_code, status.signal) == (4, None)
                assert not is_gone(daemon)
                await term.release()
                assert is_gone(daemon)


@linux_only
async def test_session_end_and_connection_close_stop_daemons_that_left_the_group(
    tmp_path: Path, daemons: list[int]
) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            other = await p.new_session(tmp_path)
            closed_id = await p.create(p.session_id, daemonize(ignore_sigterm=True))
            kept_id = await p.create(other, daemonize())
            closed_daemon = await start_daemon(p, closed_id, daemons)
            kept_daemon = await start_daemon(p, kept_id, daemons)
            closed = p.manager.terminals[closed_id]
            await p.client_conn.agent.session_close(v1.CloseSessionRequest(session_id=p.session_id))
            await closed.wait_closed()
            assert is_gone(closed_daemon)
            assert not is_gone(kept_daemon)
        # leaving open_memory_pair closed the connection, which waited for the terminals' cleanup
        assert is_gone(kept_daemon)


@linux_only
async def test_a_killed_client_leaves_no_process_behind(tmp_path: Path, daemons: list[int]) -> None:
    with trio.fail_after(DEADLINE):
        client = await trio.lowlevel.open_process(
            [PY, str(CLIENT), PY, "-c", daemonize(ignore_sigterm=True)], stdout=subprocess.PIPE
        )
        try:
            assert client.stdout is not None
            line = b""
            while not line.endswith(b"\n"):
                chunk = await client.stdout.receive_some()
                assert chunk, "the client exited before the terminal printed"
                line += chunk
            supervisor, command, _, daemon = (int(word) if word.isdigit() else 0 for word in line.split())
            daemons.extend({supervisor, command, daemon})
            assert not is_gone(command) and not is_gone(daemon)
        finally:
            client.kill()  # SIGKILL: the client cleans up nothing
            await client.wait()
            if client.stdout is not None:
                await client.stdout.aclose()
        with trio.fail_after(8):  # the supervisor's own ladder: SIGTERM, SIGKILL after kill_grace (2 s)
            for pid in (command, daemon, supervisor):
                await wait_exited(pid)


@linux_only
async def test_a_signal_death_is_reported_and_mirrored_by_the_supervisor(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python("import os\nos.abort()")) as term:
                status = await term.wait_for_exit()
                assert (status.exit_code, status.signal) == (None, "SIGABRT")
                terminal = p.manager.terminals[term.terminal_id]
                assert terminal.subreaper and terminal.process.pid != terminal.pid
                assert await terminal.process.wait() == -signal.SIGABRT  # the supervisor died of it too


@linux_only
async def test_a_command_that_kills_its_supervisor_is_still_stopped_with_its_group(tmp_path: Path) -> None:
    code = (
        "import os, signal, time\n"
        "if b'_reaper' in open(f'/proc/{os.getppid()}/cmdline', 'rb').read():\n"
        "    os.kill(os.getppid(), signal.SIGKILL)\n"
        "    print('killed', flush=True)\n"
        "while True: time.sleep(1)"
    )
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(code)) as term:
                await p.client.wait_seen(term.terminal_id, b"killed\n")
                terminal = p.manager.terminals[term.terminal_id]
                await terminal.process.wait()
                assert (await term.output()).exit_status is acp_trio.UNSET  # the command still runs
                await term.release()
                assert is_gone(terminal.pid)
                # its exit was not observed (not our child): neither exit code nor signal
                assert terminal.exit_status == v1.TerminalExitStatus(exit_code=None, signal=None)


async def test_supervise_false_runs_the_command_directly(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(tmp_path, supervise=False) as p:
            async with open_terminal(p.agent_conn, p.session_id, **python(SLEEPER)) as term:
                await p.client.wait_seen(term.terminal_id, b"ready\n")
                terminal = p.manager.terminals[term.terminal_id]
                assert terminal.process.pid == terminal.pid and not terminal.subreaper
            assert_reaped(terminal.pid)
            assert terminal.exit_status is not None and terminal.exit_status.signal == "SIGTERM"

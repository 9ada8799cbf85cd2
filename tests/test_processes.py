"""Real agent processes: ``spawn_agent`` and ``serve_agent_stdio`` end to end.

Each agent is a small script in ``tests/agents/`` run with ``sys.executable``.  Waits use the real
clock (these are real processes), each bounded by ``trio.fail_after``.  The only polling loop is
:func:`wait_gone`, which checks that a process no longer exists (there is no event for the death
of a process that is not our child).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import acp_trio
from acp_schema import v1
from acp_trio.transports.stdio import PIPE_SIZE, grow_pipe

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups and signals are POSIX-only")

AGENTS = Path(__file__).parent / "agents"
QUICK = 0.5  # shutdown_timeout where the test expects signals to be needed
PATIENT = 5.0  # shutdown_timeout where the agent should exit by itself (a signal would change its exit status)
FLOOD_LINES = 8192  # per flood in stderr_flood_agent.py


def agent(name: str) -> str:
    return str(AGENTS / f"{name}.py")


class Client:
    """Records every session/update it receives as ``(session_id, update)``."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []

    async def session_update(self, params: v1.SessionNotification) -> None:
        self.updates.append((params.session_id, params.update))


def initialize_request() -> v1.InitializeRequest:
    return v1.InitializeRequest(protocol_version=1, client_capabilities=v1.ClientCapabilities())


def new_session_request() -> v1.NewSessionRequest:
    return v1.NewSessionRequest(cwd="/", mcp_servers=[])


def prompt_request(session_id: str, text: str) -> v1.PromptRequest:
    return v1.PromptRequest(session_id=session_id, prompt=[v1.TextContentBlock(text=text)])


class LineCollector(logging.Handler):
    """Collects the messages of a logger; :meth:`wait_for` waits until one contains a text."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logging.DEBUG)
        self.logger = logger
        self.lines: list[str] = []
        self._wanted: dict[str, trio.Event] = {}

    def emit(self, record: logging.LogRecord) -> None:
        # called by the stderr reader task, in the trio thread: setting trio events is fine
        line = record.getMessage()
        self.lines.append(line)
        for text, event in self._wanted.items():
            if text in line:
                event.set()

    async def wait_for(self, text: str) -> None:
        if any(text in line for line in self.lines):
            return
        await self._wanted.setdefault(text, trio.Event()).wait()


@pytest.fixture
def stderr_lines(request: pytest.FixtureRequest) -> Iterator[LineCollector]:
    logger = logging.getLogger(f"tests.agent_stderr.{request.node.name}")
    collector = LineCollector(logger)
    logger.addHandler(collector)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield collector
    logger.removeHandler(collector)


def is_gone(pid: int) -> bool:
    """True if ``pid`` no longer runs: no such process, or a zombie (dead, waiting to be reaped)."""
    if Path("/proc/self").exists():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return True
        for line in status.splitlines():
            if line.startswith("State:"):
                return line.split()[1] == "Z"
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


async def wait_gone(pid: int, timeout: float = 2.0) -> None:
    """Wait until ``pid`` is gone (polling: a process that is not our child gives no event)."""
    with trio.fail_after(timeout):
        while not is_gone(pid):
            await trio.sleep(0.01)


def kill_if_alive(pid: int) -> None:
    """Cleanup after a failed test: never leave a stubborn agent behind."""
    if not is_gone(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stdio_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "acp_trio.stdio"]


# -- a well-behaved agent -------------------------------------------------------------------------


async def test_well_behaved_agent_serves_a_prompt_turn_and_exits_by_itself_when_stdin_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="acp_trio.stdio")
    client = Client()
    with trio.fail_after(8):
        async with acp_trio.spawn_agent(
            sys.executable, [agent("echo_agent")], client=client, shutdown_timeout=PATIENT
        ) as conn:
            process = conn.process
            answer = await conn.agent.initialize(initialize_request())
            assert answer.protocol_version == 1
            session = await conn.agent.session_new(new_session_request())
            assert session.session_id == "s1"
            response = await conn.agent.session_prompt(prompt_request("s1", "one two three"))
            assert response.stop_reason == "end_turn"
            # the updates streamed during the turn were all handled, in order, before its answer
            assert [(sid, update.content.text) for sid, update in client.updates] == [
                ("s1", "one"),
                ("s1", "two"),
                ("s1", "three"),
            ]
            assert all(isinstance(update, v1.AgentMessageChunkSessionUpdate) for _, update in client.updates)
            assert process.returncode is None
        assert process.returncode == 0  # exited on its own: a signal would give a negative status
    assert stdio_log(caplog) == []  # no SIGTERM/SIGKILL step was logged


@pytest.mark.parametrize("stdin", ["file", "pipe"])
def test_an_agent_answers_what_its_stdin_holds_whether_a_file_or_a_pipe(tmp_path: Path, stdin: str) -> None:
    lines = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}},
        {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}},
    ]
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    path = tmp_path / "input.jsonl"
    path.write_bytes(data)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if stdin == "file":  # a regular file cannot be waited on with epoll; its reads never block
        with path.open("rb") as source:
            proc = subprocess.run(
                [sys.executable, agent("echo_agent")], stdin=source, capture_output=True, env=env, timeout=30
            )
    else:
        proc = subprocess.run(
            [sys.executable, agent("echo_agent")], input=data, capture_output=True, env=env, timeout=30
        )
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [a.get("id") for a in answers] == [0, 1], proc.stderr.decode()[-2000:]
    assert answers[0]["result"]["protocolVersion"] == 1 and "sessionId" in answers[1]["result"]
    assert proc.returncode == 0


async def test_spawn_agent_raises_oserror_when_the_program_does_not_exist(tmp_path: Path) -> None:
    with trio.fail_after(5), pytest.raises(OSError):
        async with acp_trio.spawn_agent(tmp_path / "no-such-agent", client=Client()):
            pytest.fail("the block must not run")


# -- stderr ---------------------------------------------------------------------------------------


def flood_line(tag: str, index: int) -> str:
    return f"flood-{tag} {index:05d} ".ljust(1023, "x")


async def test_agent_flooding_stderr_does_not_stall_and_its_lines_reach_the_stderr_logger(
    stderr_lines: LineCollector,
) -> None:
    with trio.fail_after(60):  # a hang guard: a stalled pipe never ends; an interpreter start under load takes seconds
        async with acp_trio.spawn_agent(
            sys.executable,
            [agent("stderr_flood_agent")],
            client=Client(),
            stderr_logger=stderr_lines.logger,
            shutdown_timeout=PATIENT,
        ) as conn:
            # 8 MiB before serving and 8 MiB inside the initialize handler: far beyond a pipe buffer
            answer = await conn.agent.initialize(initialize_request())
            assert answer.protocol_version == 1
            await stderr_lines.wait_for("flood-during-end")
            session = await conn.agent.session_new(new_session_request())
            assert session.session_id == "s1"
        assert conn.process.returncode == 0
    flood = [line for line in stderr_lines.lines if line.startswith("flood-")]
    assert len(flood) == 2 * FLOOD_LINES + 2  # every line, none lost or merged
    assert flood[0] == flood_line("before", 0)
    assert flood[FLOOD_LINES - 1] == flood_line("before", FLOOD_LINES - 1)
    assert flood[FLOOD_LINES] == "flood-before-end"
    assert flood[FLOOD_LINES + 1] == flood_line("during", 0)
    assert flood[-2] == flood_line("during", FLOOD_LINES - 1)
    assert flood[-1] == "flood-during-end"


async def test_junk_written_to_stdout_while_serving_goes_to_stderr_and_leaves_the_protocol_intact(
    stderr_lines: LineCollector,
) -> None:
    inbound: list[bytes] = []

    def tap(direction: str, line: bytes) -> None:
        if direction == "in":
            inbound.append(line)

    answers: dict[int, Any] = {}
    with trio.fail_after(8):
        async with acp_trio.spawn_agent(
            sys.executable,
            [agent("noisy_stdout_agent")],
            client=Client(),
            stderr_logger=stderr_lines.logger,
            shutdown_timeout=PATIENT,
            tap=tap,
        ) as conn:
            await conn.agent.initialize(initialize_request())

            async def noise(n: int) -> None:
                answers[n] = await conn.ext_request("_test/noise", {"n": n})

            async with trio.open_nursery() as nursery:
                for n in range(5):
                    nursery.start_soon(noise, n)
            session = await conn.agent.session_new(new_session_request())
            response = await conn.agent.session_prompt(prompt_request(session.session_id, "still fine"))
            assert response.stop_reason == "end_turn"
            for n in range(5):
                for kind in ("print", "fd", "child"):
                    await stderr_lines.wait_for(f"junk-{kind} {n}")
        assert conn.process.returncode == 0
    assert answers == {n: {"n": n} for n in range(5)}
    assert inbound, "the tap saw the agent's messages"
    for line in inbound:
        assert b"junk" not in line
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0"
    for n in range(5):
        assert {f"junk-print {n}", f"junk-fd {n}", f"junk-child {n}"} <= set(stderr_lines.lines)


# -- shutdown -------------------------------------------------------------------------------------


async def test_agent_ignoring_stdin_eof_and_sigterm_is_killed_with_sigkill(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="acp_trio.stdio")
    with trio.fail_after(8):
        async with acp_trio.spawn_agent(
            sys.executable, [agent("stubborn_agent")], client=Client(), shutdown_timeout=QUICK
        ) as conn:
            process = conn.process
            try:
                await conn.agent.initialize(initialize_request())  # SIGTERM is ignored from here on
                started = trio.current_time()
            except BaseException:
                kill_if_alive(process.pid)
                raise
        elapsed = trio.current_time() - started
    assert process.returncode == -signal.SIGKILL
    assert elapsed >= 2 * QUICK  # it waited after closing stdin and again after SIGTERM
    messages = stdio_log(caplog)
    assert any("SIGTERM" in message for message in messages)
    assert any("SIGKILL" in message for message in messages)


async def test_cancelling_the_block_still_shuts_the_agent_down() -> None:
    with trio.fail_after(8):
        with trio.CancelScope() as scope:
            async with acp_trio.spawn_agent(
                sys.executable, [agent("stubborn_agent")], client=Client(), shutdown_timeout=QUICK
            ) as conn:
                process = conn.process
                await conn.agent.initialize(initialize_request())
                scope.cancel()
                await trio.sleep_forever()
        assert scope.cancelled_caught
    assert process.returncode == -signal.SIGKILL


async def test_agent_dying_mid_request_fails_the_pending_request_with_connection_closed() -> None:
    with trio.fail_after(8):
        async with acp_trio.spawn_agent(
            sys.executable, [agent("dying_agent")], client=Client(), shutdown_timeout=QUICK
        ) as conn:
            await conn.agent.initialize(initialize_request())
            session = await conn.agent.session_new(new_session_request())
            with trio.fail_after(3), pytest.raises(acp_trio.ConnectionClosed):
                await conn.agent.session_prompt(prompt_request(session.session_id, "please die"))
            with pytest.raises(acp_trio.ConnectionClosed):  # later requests fail at once too
                await conn.agent.session_new(new_session_request())
        assert conn.process.returncode == 3


WRAPPERS = {
    # the agent runs as a background job of the shell, which waits for it; a background job's
    # stdin would be /dev/null, so it gets the shell's stdin through fd 3
    "background-and-wait": 'exec 3<&0; "$1" "$2" "$3" <&3 3<&- & wait',
    # the agent runs in the foreground, but as a child: the shell has a command left to run
    "foreground-child": '"$1" "$2" "$3"; exit $?',
}


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("agent_name", ["echo_agent", "stubborn_agent"])
async def test_agent_started_through_a_wrapper_shell_does_not_outlive_the_block(
    wrapper: str, agent_name: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "agent.pid"
    args = ["-c", WRAPPERS[wrapper], "wrapper", sys.executable, agent(agent_name), str(pid_file)]
    agent_pid: int | None = None
    try:
        with trio.fail_after(8):
            # the well-behaved agent gets time to exit by itself: a SIGTERM would change the wrapper's status
            timeout = PATIENT if agent_name == "echo_agent" else QUICK
            async with acp_trio.spawn_agent("/bin/sh", args, client=Client(), shutdown_timeout=timeout) as conn:
                wrapper_process = conn.process
                await conn.agent.initialize(initialize_request())  # the pid file is written before serving
                agent_pid = int(pid_file.read_text())
                assert agent_pid != wrapper_process.pid  # a child of the wrapper, not exec'd in its place
                assert os.getpgid(agent_pid) == wrapper_process.pid
                assert not is_gone(agent_pid)
            assert wrapper_process.returncode is not None
            if agent_name == "echo_agent":
                assert wrapper_process.returncode == 0  # stdin EOF was enough for both
            await wait_gone(agent_pid)
    finally:
        if agent_pid is not None:
            kill_if_alive(agent_pid)


# -- the agent side -------------------------------------------------------------------------------


async def test_serve_agent_stdio_restores_stdout_after_serving() -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
    with trio.fail_after(8):
        result = await trio.run_process(
            [sys.executable, agent("restore_stdout_agent")],
            stdin=json.dumps(request).encode() + b"\n",  # then EOF: the agent stops serving
            capture_stdout=True,
            capture_stderr=True,
        )
    lines = result.stdout.decode().splitlines()
    answer = json.loads(lines[0])
    assert answer["id"] == 1
    assert answer["result"]["protocolVersion"] == 1
    assert lines[1:] == [
        "after-print",
        "same-stdout=True blocking0=True blocking1=True",
        "after-fd",
        "after-child",
    ]
    assert "during-print" in result.stderr.decode().splitlines()


async def test_spawn_agent_applies_env_and_cwd(tmp_path: Path) -> None:
    with trio.fail_after(8):
        async with acp_trio.spawn_agent(
            sys.executable,
            [agent("echo_agent")],
            client=Client(),
            env={"ACP_TRIO_TEST_VAR": "from the test"},
            cwd=tmp_path,
            shutdown_timeout=PATIENT,
        ) as conn:
            await conn.agent.initialize(initialize_request())
            answer = await conn.ext_request("_test/env")
    assert os.path.samefile(answer["cwd"], tmp_path)
    assert answer["var"] == "from the test"
    assert set(os.environ) <= set(answer["names"])  # the rest of the environment is inherited


async def test_spawn_agent_without_inherit_env_passes_only_the_given_env(tmp_path: Path) -> None:
    with trio.fail_after(8):
        async with acp_trio.spawn_agent(
            sys.executable,
            [agent("echo_agent")],
            client=Client(),
            env={"ACP_TRIO_TEST_VAR": "alone"},
            inherit_env=False,
            cwd=str(tmp_path),
            shutdown_timeout=PATIENT,
        ) as conn:
            await conn.agent.initialize(initialize_request())
            answer = await conn.ext_request("_test/env")
    assert os.path.samefile(answer["cwd"], tmp_path)
    assert answer["var"] == "alone"
    # Python itself may add LC_CTYPE (PEP 538 locale coercion); nothing else may appear
    assert set(answer["names"]) - {"LC_CTYPE"} == {"ACP_TRIO_TEST_VAR"}


# -- the pipe of the agent's output ----------------------------------------------------------------

_PIPE_MAX = Path("/proc/sys/fs/pipe-max-size")
needs_pipe_sizes = pytest.mark.skipif(
    not hasattr(fcntl, "F_GETPIPE_SZ") or not _PIPE_MAX.exists() or int(_PIPE_MAX.read_text()) < PIPE_SIZE,
    reason="Linux pipes that can hold PIPE_SIZE bytes",
)


@needs_pipe_sizes
def test_grow_pipe_grows_a_pipe_and_never_shrinks_it(tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        before = fcntl.fcntl(r, fcntl.F_GETPIPE_SZ)
        assert grow_pipe(w, None) is None
        assert fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) == before
        assert grow_pipe(w, 4 * before) == 4 * before
        assert fcntl.fcntl(r, fcntl.F_GETPIPE_SZ) == 4 * before  # one pipe: either end sees it
        assert grow_pipe(r, before) == 4 * before  # already bigger: left as it is
        assert fcntl.fcntl(w, fcntl.F_GETPIPE_SZ) == 4 * before
    finally:
        os.close(r)
        os.close(w)
    with open(tmp_path / "file", "wb") as f:
        assert grow_pipe(f.fileno()) is None  # not a pipe: nothing, and no error


@needs_pipe_sizes
@pytest.mark.parametrize(
    ("client_size", "agent_size", "grown"),
    [(PIPE_SIZE, PIPE_SIZE, True), (None, PIPE_SIZE, True), (PIPE_SIZE, None, True), (None, None, False)],
)
async def test_the_pipe_of_the_agents_output_is_grown_by_either_side(
    client_size: int | None, agent_size: int | None, grown: bool
) -> None:
    """spawn_agent grows the pipe it reads the agent from, and serve_agent_stdio the pipe of its
    stdout, to PIPE_SIZE bytes unless told ``pipe_size=None``."""
    script = (
        f"import sys; sys.path.insert(0, {str(AGENTS)!r}); import acp_trio; from _common import EchoAgent; "
        f"acp_trio.run_agent_stdio(EchoAgent, pipe_size={agent_size!r})"
    )
    with trio.fail_after(8):
        async with acp_trio.spawn_agent(
            sys.executable, ["-c", script], client=Client(), pipe_size=client_size, shutdown_timeout=PATIENT
        ) as conn:
            await conn.agent.initialize(initialize_request())  # answered: the agent is serving
            size = fcntl.fcntl(conn.process.stdout.fileno(), fcntl.F_GETPIPE_SZ)
    assert (size == PIPE_SIZE) if grown else (size < PIPE_SIZE)

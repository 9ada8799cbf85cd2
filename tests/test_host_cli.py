"""``python -m acp_trio.host`` (issue 36, step 4): one session host process from a config file.

In this process (cheap): ``AcpApp``'s health check (no token, ``200`` then ``503`` once draining),
a draining host's refusal of ``session/new`` while its running turn finishes, ``max_sessions``,
:func:`acp_trio.host._cli.drain` on a turn that outlives ``drain_timeout`` (trio's autojump clock),
the config's errors (exit status 2, the key named), the flags over the file, the JSON log lines.

In processes (``one_interpreter``): one host process per module serves real clients
(``connect_websocket``, ``connect_http``) with a token file; another is sent SIGTERM while a turn
waits on its client's answer (so the drain's window is certain, not a race): the health check is
``503``, a new session is refused, the turn ends ``end_turn``, the client is told the session
ended, the process exits 0; the guide's config and command, as printed on a free port, serve the
demo client.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from _host_kit import Agent2, Control, Recorder, connected, init2, new_session, text

from acp_schema import v2
from acp_trio import RequestError
from acp_trio.host import DRAINING_REASON, SESSION_ENDED, MemoryJournal, open_session_host
from acp_trio.host._cli import JsonFormatter, build_parser, drain, load_settings, main
from acp_trio.transports.asgi import AcpApp

pytestmark = pytest.mark.skipif(os.name != "posix", reason="signals")

DEADLINE = 30
GUIDE = Path(__file__).parent.parent / "docs" / "site" / "guides" / "host.md"
INFO = v2.Implementation(name="test-host-cli", version="1")


# -- in this process: the health check and the drain ------------------------------------------------


async def call(app: AcpApp, path: str, method: str = "GET", headers: Any = ()) -> tuple[int, bytes]:
    """One HTTP request to the ASGI ``app`` (no server): its status and body."""
    sent: list[Any] = []

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": list(headers), "server": ("127.0.0.1", 80)}
    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def test_the_health_check_needs_no_token_and_turns_503_once_draining() -> None:
    control = Control()
    async with open_session_host(functools.partial(Agent2, control), journal=MemoryJournal(), variant=v2) as host:
        app = AcpApp(host=host, token="T", health_path="/healthz")
        assert await call(app, "/healthz") == (200, b"ok\n")  # no Authorization
        assert await call(app, "/healthz", "HEAD") == (200, b"")
        assert (await call(app, "/healthz", "POST"))[0] == 405
        assert (await call(app, "/acp"))[0] == 401  # the token still guards ACP
        app.drain()
        assert host.draining
        assert await call(app, "/healthz") == (503, b"draining\n")
        assert await call(app, "/healthz", "HEAD") == (503, b"")
    without = AcpApp(agent=Agent2)
    assert (await call(without, "/healthz"))[0] == 404  # no health_path: no such route
    with pytest.raises(ValueError, match="health_path"):
        AcpApp(agent=Agent2, health_path="/acp")


async def test_a_draining_host_refuses_new_sessions_and_lets_the_running_turn_finish() -> None:
    control = Control()
    async with open_session_host(functools.partial(Agent2, control), journal=MemoryJournal(), variant=v2) as host:
        app = AcpApp(host=host, health_path="/healthz")
        first, second = Recorder(), Recorder()
        with trio.fail_after(10):
            async with connected(host, first) as a, connected(host, second) as b:
                await init2(a)
                await init2(b)
                sid = await new_session(a)
                await a.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 2 wait after 1")))
                await host.wait_until(lambda: host.running_turns() == 1)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(drain, app, host, 60.0)
                    await host.wait_until(lambda: host.draining)
                    assert await call(app, "/healthz") == (503, b"draining\n")
                    with pytest.raises(RequestError) as refused:
                        await new_session(b)
                    assert refused.value.code == -32603
                    assert refused.value.data == {"reason": DRAINING_REASON, "method": "session/new"}
                    assert "draining" in str(refused.value)
                    control.gate.set()  # the turn goes on and ends by itself
                    await first.until(lambda: "idle" in first.states())
                    await first.until(lambda: any(m == SESSION_ENDED for m, _ in first.ext))
                assert host.sessions() == {}
        assert first.texts() == ["0", "1", "+0"]
        assert first.updates[-1].stop_reason == "end_turn"  # finished, not cut short
        [(_, ended)] = [(m, p) for m, p in first.ext if m == SESSION_ENDED]
        assert ended["sessionId"] == sid and ended["reason"] == "session closed"
        assert ended["detail"] == "the host shut down (drained)"


async def test_a_turn_past_drain_timeout_is_ended_cancelled_and_its_client_told(autojump_clock: Any) -> None:
    control = Control()
    async with open_session_host(functools.partial(Agent2, control), journal=MemoryJournal(), variant=v2) as host:
        app = AcpApp(host=host, health_path="/healthz")
        rec = Recorder()
        async with connected(host, rec) as conn:
            await init2(conn)
            sid = await new_session(conn)
            await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("wait")))
            await host.wait_until(lambda: host.running_turns() == 1)
            started = trio.current_time()
            await drain(app, host, 30.0)
            assert trio.current_time() - started == pytest.approx(30.0, abs=1.0)
            await rec.until(lambda: any(m == SESSION_ENDED for m, _ in rec.ext))
            with trio.fail_after(5):
                await conn.wait_closed()  # the drain closed the client's connection once it was told
        idle = [u for u in rec.updates if type(u).__name__ == "IdleStateUpdateSessionUpdate"]
        assert [u.stop_reason for u in idle] == ["cancelled"]
        [(_, ended)] = rec.ext
        assert ended["reason"] == "session closed" and "drain_timeout=30s" in ended["detail"]
        assert control.cancels == [sid] and control.closed == [sid]  # the agent was told: cancel, then close


async def test_max_sessions_refuses_one_more_session_new() -> None:
    control = Control()
    async with open_session_host(functools.partial(Agent2, control), journal=MemoryJournal(), variant=v2) as host:
        host.max_sessions = 1
        rec = Recorder()
        with trio.fail_after(10):
            async with connected(host, rec) as conn:
                await init2(conn)
                await new_session(conn)
                with pytest.raises(RequestError) as refused:
                    await new_session(conn)
        assert refused.value.code == -32603
        assert refused.value.data == {"reason": "max_sessions", "max": 1, "method": "session/new"}


async def test_stop_taking_takes_the_host_out_of_rotation_and_drain_now_ends_it() -> None:
    """:func:`serve_host`'s ``stop_taking`` (SIGUSR1): health ``503`` and no new session while the
    session already there goes on taking prompts; ``drain_now`` (SIGTERM) then ends it."""
    from acp_trio.host._cli import Settings, serve_host
    from acp_trio.transports.websocket import connect_websocket

    settings = Settings(agent="tests:Agent2", protocol=2, listen=[("127.0.0.1", 0)], store="memory:")
    settings.loaded_agent = functools.partial(Agent2, Control())  # what agent names, as main() loads it
    drain_now, stop_taking = trio.Event(), trio.Event()
    rec, late = Recorder(), Recorder()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery, httpx.AsyncClient() as http:
            [url] = await nursery.start(
                functools.partial(serve_host, settings, MemoryJournal(), drain_now, stop_taking=stop_taking)
            )
            ws = url.replace("http", "ws", 1) + "/acp"
            async with connect_websocket(ws, rec, variant=v2) as conn, connect_websocket(ws, late, variant=v2) as other:
                await init2(conn)
                await init2(other)
                sid = await new_session(conn)
                stop_taking.set()
                await trio.testing.wait_all_tasks_blocked()  # serve_host's task saw it
                assert (await http.get(url + "/healthz")).status_code == 503
                with pytest.raises(RequestError) as refused:
                    await new_session(other)
                assert refused.value.data["reason"] == DRAINING_REASON
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 2")))
                await rec.until(lambda: "idle" in rec.states())  # the session goes on
                drain_now.set()
                await conn.wait_closed()  # drained: its session ended, its connection closed
    assert rec.texts() == ["0", "1"]


# -- the config: errors name the key, flags override the file ------------------------------------------


@pytest.mark.parametrize(
    ("config", "flags", "said"),
    [
        ('agent = "m:A"\nmax_conections = 3\n', [], "unknown key 'max_conections' (did you mean 'max_connections'?)"),
        ('agent = "m:A"\nmax_connections = "ten"\n', [], "max_connections: expected an integer >= 1, got 'ten'"),
        ('agent = "m:A"\nunattended_policy = "drop"\n', [], "expected one of 'wait', 'reject', 'cancel', got 'drop'"),
        ('agent = "m:A"\n[limits]\nmax_connections = 3\n', [], "unknown key 'limits'"),
        ('agent = "m:A"\ncommand = ["x"]\n', [], "give exactly one of agent"),
        ('agent = "m:A"\nstore = "mysql://db"\n', [], "store: expected sqlite:///PATH, postgresql://"),
        ('agent = "m:A"\nlisten = ["localhost"]\n', [], "listen: expected HOST:PORT"),
        ('agent = "m:A"\nspeak = 2\n', [], "speak is for command"),
        ('agent = "m:A"\ncertfile = "host.toml"\n', [], "certfile and keyfile go together"),
        ('agent = "m:A"\n', ["--max-connections", "0"], "--max-connections: max_connections: expected an integer >= 1"),
        ('agent = "m:A"\n', ["--drain-timeout", "soon"], "--drain-timeout: drain_timeout: expected seconds >= 0"),
        ('agent = "no_such_module_here:Agent"\n', [], "agent: cannot import 'no_such_module_here'"),
        ('agent = "m:A"\nagent = "m:B"\n', [], "not TOML"),
        ('command = "python -m agent"\n', [], "command: expected a list of non-empty strings, got 'python -m agent'"),
        ('agent = "acp_trio.demo.agent:DemoAgent"\nprotocol = 2\n', [], "chooses its protocol versions itself"),
    ],
)
def test_a_bad_config_exits_2_naming_the_key(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    config: str,
    flags: Any,
    said: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "host.toml").write_text(config, encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        main(["--config", "host.toml", *flags])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


def test_a_postgresql_url_maps_to_the_postgresql_store_or_says_it_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    from acp_trio.host import _cli

    if importlib.util.find_spec("acp_trio._store_pg") is not None:
        assert _cli.store_scheme("postgresql://acp@db.example/acp") == "postgresql"
        assert _cli.store_scheme("postgres://acp@db.example/acp") == "postgresql"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_cli.importlib.util, "find_spec", lambda name: None)  # a build without it
    with pytest.raises(SystemExit) as exited:
        main(["--agent", "m:A", "--store", "postgresql://acp@db.example/acp"])
    assert exited.value.code == 2
    assert "store: postgresql:// needs acp_trio's PostgreSQL store" in capsys.readouterr().err


def test_flags_override_the_file(tmp_path: Path) -> None:
    config = tmp_path / "host.toml"
    config.write_text(
        'agent = "m:A"\nlisten = ["127.0.0.1:1", "[::1]:2"]\nmax_connections = 5\ndrain_timeout = 3\n'
        'store = "sqlite:///sessions.db"\n',
        encoding="utf-8",
    )
    options = build_parser().parse_args(["--config", str(config), "--max-connections", "7", "--listen", "0.0.0.0:9"])
    settings = load_settings(options)
    assert settings.max_connections == 7  # the flag
    assert settings.listen == [("0.0.0.0", 9)]  # the flag's list replaces the file's
    assert settings.drain_timeout == 3.0 and settings.store == "sqlite:///sessions.db"  # the file
    assert settings.max_detached_sessions == 100 and settings.health_path == "/healthz"  # the defaults
    options = build_parser().parse_args(["--config", str(config), "--", "python", "-m", "agent"])
    with pytest.raises(ValueError, match="exactly one of agent"):
        load_settings(options)  # a command besides the file's agent


def test_an_address_in_use_is_logged_and_exits_1(caplog: pytest.LogCaptureFixture) -> None:
    import socket

    from acp_trio.host._cli import Settings, run

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = Settings(agent="acp_trio.demo.agent:DemoAgent", store="memory:", listen=[("127.0.0.1", port)])
        with caplog.at_level(logging.INFO, "acp_trio.host"):
            assert run(settings) == 1
    [error] = [r for r in caplog.records if getattr(r, "event", None) == "error"]
    assert error.levelno == logging.ERROR and "Address already in use" in error.getMessage()


def test_a_log_record_is_one_json_object_with_its_event_and_fields() -> None:
    record = logging.LogRecord("acp_trio.host", logging.INFO, __file__, 1, "client %s attached", ("c1",), None)
    record.event = "client.attached"
    record.session_id = "s1"
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["event"] == "client.attached" and entry["session_id"] == "s1"
    assert entry["message"] == "client c1 attached" and entry["level"] == "info" and entry["logger"] == "acp_trio.host"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", entry["time"])


# -- in processes ------------------------------------------------------------------------------------------

AGENT = '''
import trio
from acp_schema import v2


class AskingAgent:
    """A v2 agent whose turn says "before", asks permission, says "after" and ends."""

    def __init__(self, conn):
        self.conn = conn

    async def session_new(self, params):
        return v2.NewSessionResponse(session_id=f"s-{id(self):x}")

    async def say(self, sid, words):
        chunk = v2.AgentMessageChunkSessionUpdate(message_id="m", content=v2.TextContentBlock(text=words))
        await self.conn.client.session_update(v2.UpdateSessionNotification(session_id=sid, update=chunk))

    async def session_prompt(self, params):
        sid = params.session_id

        async def turn():
            await self.say(sid, "before")
            option = v2.PermissionOption(option_id="go", name="Go", kind="allow_once")
            subject = v2.ToolCallRequestPermissionSubject(tool_call=v2.ToolCallUpdate(tool_call_id="c1"))
            request = v2.RequestPermissionRequest(session_id=sid, title="Go on?", subject=subject, options=[option])
            await self.conn.client.session_request_permission(request)
            await self.say(sid, "after")
            return "end_turn"

        self.conn.start_turn(sid, turn)
        return v2.PromptResponse(message_id="u")
'''
TOKENS = "alice aaaaaaaaaaaaaaaa\nbob bbbbbbbbbbbbbbbb\n"
AUTH = {"Authorization": "Bearer aaaaaaaaaaaaaaaa"}


class HostProcess:
    """A ``python -m acp_trio.host`` process; a thread reads its stderr's lines (the JSON log)."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.process = subprocess.Popen(argv, cwd=cwd, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.lines.append("")  # end of output
            self.changed.notify_all()

    def events(self) -> list[dict[str, Any]]:
        with self.changed:
            return [json.loads(line) for line in self.lines if line.startswith("{")]

    def wait_for(self, event: str, timeout: float = DEADLINE) -> dict[str, Any]:
        """The first log entry of ``event``, waiting up to ``timeout`` seconds for it."""
        with self.changed:
            found = self.changed.wait_for(
                lambda: any(e["event"] == event for e in self._parsed()) or "" in self.lines, timeout
            )
            entries = [e for e in self._parsed() if e["event"] == event]
        assert found and entries, f"no {event!r} in the host's log:\n{''.join(self.lines)}"
        return entries[0]

    def _parsed(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines if line.startswith("{")]

    @property
    def url(self) -> str:
        return str(self.wait_for("listening")["url"])

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait()
        finally:
            self.reader.join(timeout=DEADLINE)


def host_dir(where: Path, config: str) -> Path:
    (where / "asking_agent.py").write_text(AGENT, encoding="utf-8")
    (where / "tokens.txt").write_text(TOKENS, encoding="utf-8")
    (where / "tokens.txt").chmod(0o600)
    (where / "host.toml").write_text(config, encoding="utf-8")
    return where


CONFIG = """
agent = "asking_agent:AskingAgent"
protocol = 2
store = "sqlite:///sessions.db"
listen = ["127.0.0.1:0"]
token_file = "tokens.txt"
drain_timeout = 20
"""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    """One host process for the module's tests that do not stop it."""
    where = host_dir(tmp_path_factory.mktemp("host"), CONFIG)
    running = HostProcess([sys.executable, "-m", "acp_trio.host", "--config", "host.toml"], where)
    try:
        yield running
    finally:
        assert running.stop() == 0


class Screen(Recorder):
    """A recorder whose permission answers wait for :attr:`release` (``answer=None``)."""

    def __init__(self) -> None:
        super().__init__(answer=None)


@pytest.mark.one_interpreter
@pytest.mark.xdist_group("host-cli-shared")  # one worker (noxfile's --dist loadgroup): one shared process
@pytest.mark.parametrize("transport", ["websocket", "http"])
async def test_the_process_serves_a_real_client(shared: HostProcess, transport: str) -> None:
    from acp_trio.transports.http import connect_http
    from acp_trio.transports.websocket import connect_websocket

    url = await trio.to_thread.run_sync(lambda: shared.url)
    screen = Screen()
    screen.release.set()
    connect = connect_websocket if transport == "websocket" else connect_http
    target = (url.replace("http", "ws", 1) if transport == "websocket" else url) + "/acp"
    with trio.fail_after(DEADLINE):
        async with connect(target, screen, variant=v2, headers=AUTH) as conn:
            await init2(conn)
            sid = await new_session(conn)
            await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("go")))
            await screen.until(lambda: "idle" in screen.states())
    assert screen.texts() == ["before", "after"]
    assert screen.numbers[:2] == [1, 2]  # journaled and numbered by the host
    opened = await trio.to_thread.run_sync(lambda: shared.wait_for("session.opened"))
    assert opened["principal"] == "alice"
    assert any(e["event"] == "session.opened" and e["session_id"] == sid for e in shared.events())


@pytest.mark.one_interpreter
@pytest.mark.xdist_group("host-cli-shared")
async def test_the_health_check_answers_without_a_token_and_acp_needs_one(shared: HostProcess) -> None:
    url = await trio.to_thread.run_sync(lambda: shared.url)
    with trio.fail_after(DEADLINE):
        async with httpx.AsyncClient() as http:
            health = await http.get(url + "/healthz")
            acp = await http.post(url + "/acp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize"})
    assert (health.status_code, health.text) == (200, "ok\n")
    assert acp.status_code == 401


@pytest.mark.one_interpreter
async def test_sigterm_drains_lets_the_turn_finish_and_exits_0(tmp_path: Path) -> None:
    where = host_dir(tmp_path, CONFIG)
    running = HostProcess([sys.executable, "-m", "acp_trio.host", "--config", "host.toml"], where)
    try:
        url = await trio.to_thread.run_sync(lambda: running.url)
        ws = url.replace("http", "ws", 1) + "/acp"
        screen, late = Screen(), Recorder()
        with trio.fail_after(DEADLINE):
            async with (
                connected_ws(ws, screen) as conn,
                connected_ws(ws, late) as other,
                httpx.AsyncClient() as http,
            ):
                sid = await new_session(conn)
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("go")))
                await screen.until(lambda: screen.asked)  # the turn waits for this client's answer
                assert (await http.get(url + "/healthz")).status_code == 200
                running.process.send_signal(signal.SIGTERM)
                await trio.to_thread.run_sync(lambda: running.wait_for("drain.started"))
                health = await http.get(url + "/healthz")
                assert (health.status_code, health.text) == (503, "draining\n")
                with pytest.raises(RequestError) as refused:
                    await new_session(other)
                assert refused.value.data["reason"] == DRAINING_REASON
                screen.release.set()  # the turn goes on, and ends
                await screen.until(lambda: any(m == SESSION_ENDED for m, _ in screen.ext))
            code = await trio.to_thread.run_sync(lambda: running.process.wait(DEADLINE))
    finally:
        running.stop()
    assert code == 0
    assert screen.texts() == ["before", "after"]
    assert screen.updates[-1].stop_reason == "end_turn"
    finished = running.wait_for("drain.finished")
    assert finished["turns_cut"] == 0 and finished["sessions_ended"] == 1
    events = [e["event"] for e in running.events()]
    assert events.index("stopping") < events.index("drain.started") < events.index("drain.finished")
    assert events[-1] == "stopped"


def connected_ws(url: str, rec: Recorder) -> Any:
    """``connect_websocket`` with alice's token, initialized (v2), recording the host's notifications."""
    from contextlib import asynccontextmanager

    from acp_trio.host import TURN_ENDED
    from acp_trio.transports.websocket import connect_websocket

    @asynccontextmanager
    async def connect() -> Any:
        async with connect_websocket(url, rec, variant=v2, headers=AUTH) as conn:
            for method in (TURN_ENDED, SESSION_ENDED):

                async def ended(params: Any, method: str = method) -> None:
                    rec.ext.append((method, params))
                    rec.changed.unpark_all()

                conn.on_ext_notification(method, ended)
            await init2(conn)
            yield conn

    return connect()


@pytest.mark.one_interpreter
async def test_a_stdio_command_over_tls_on_two_addresses_until_drained(tmp_path: Path) -> None:
    """``command`` (the bridge's detach host: one agent process), ``certfile``/``keyfile`` and two
    ``listen`` addresses, through :func:`serve_host` in this process; setting its event drains it."""
    import ssl

    pytest.importorskip("cryptography")
    from test_transport_http import self_signed_certificate

    from acp_schema import v1
    from acp_trio.host._cli import Settings, serve_host
    from acp_trio.transports.websocket import connect_websocket

    cert, key = self_signed_certificate(tmp_path)
    settings = Settings(
        command=[sys.executable, "-m", "acp_trio.demo", "--serve-agent"],
        listen=[("127.0.0.1", 0), ("127.0.0.1", 0)],
        certfile=str(cert),
        keyfile=str(key),
        store="memory:",
    )
    trusted = ssl.create_default_context(cafile=str(cert))
    drain_now = trio.Event()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(serve_host, settings, MemoryJournal(), drain_now)
            assert len(urls) == 2 and all(url.startswith("https://") for url in urls)
            for url in urls:
                async with httpx.AsyncClient(verify=trusted) as http:
                    assert (await http.get(url + "/healthz")).status_code == 200
            async with connect_websocket(
                urls[1].replace("https", "wss", 1) + "/acp", Recorder(), ssl_context=trusted
            ) as conn:
                answer = await conn.initialize(v1.InitializeRequest(protocol_version=1))
                assert answer.agent_info is not None and "demo" in answer.agent_info.name
            drain_now.set()  # serve_host drains (no session: at once) and returns


def guide_block(lang: str, first: str) -> str:
    """The text of the host guide's ``lang`` block whose first line starts with ``first``."""
    blocks = re.findall(rf"^```{lang}\n(.*?)^```", GUIDE.read_text(encoding="utf-8"), re.S | re.M)
    [found] = [b for b in blocks if b.startswith(first)]
    return found


@pytest.mark.one_interpreter
def test_the_guides_config_and_command_serve_the_demo_client(tmp_path: Path) -> None:
    """The guide's host.toml and command, as printed but on a free port; its demo client command, with that port."""
    config = guide_block("toml", "# host.toml")
    assert "127.0.0.1:8765" in config
    (tmp_path / "host.toml").write_text(config.replace("127.0.0.1:8765", "127.0.0.1:0"), encoding="utf-8")
    tokens = guide_block("text", "# PRINCIPAL TOKEN")
    (tmp_path / "tokens.txt").write_text(tokens, encoding="utf-8")
    (tmp_path / "tokens.txt").chmod(0o600)
    [command] = guide_block("sh", "python -m acp_trio.host").splitlines()
    running = HostProcess([sys.executable, *command.split()[1:]], tmp_path)
    try:
        port = running.url.rsplit(":", 1)[1]
        [client] = guide_block("sh", "python -m acp_trio.demo --url").splitlines()
        argv = [sys.executable, *client.replace(":8765/", f":{port}/").split()[1:]]
        work = tmp_path / "work"
        work.mkdir()
        (work / "notes.txt").write_text("one two three\n", encoding="utf-8")
        demo = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=DEADLINE)
    finally:
        code = running.stop()
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "[turn ended: end_turn]" in demo.stdout
    assert code == 0
    assert (tmp_path / "sessions.db").exists()  # store = "sqlite:///sessions.db", relative to the working directory
    assert running.wait_for("session.opened")["principal"] == "alice"

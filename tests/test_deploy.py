"""The deployment guide's pieces, running (issue 36, steps 3 and 5): three ``python -m acp_trio.host``
processes behind HAProxy, their sessions in PostgreSQL.

One cluster per module (:class:`Cluster`): a throwaway PostgreSQL server (``tests/_postgres.py``),
three host processes started from the guide's ``host.toml`` (its ``listen`` and ``store`` given
as flags, which override the file, and a small counting agent of this module), and HAProxy from
the guide's configuration (``tests/_haproxy.py``: the addresses filled in, checks every 200 ms),
TLS at the balancer with a self-signed certificate.  Every test leaves the cluster as it found it:
three hosts up (a test that stops one starts it again: a rolling restart).

- Affinity: clients over WebSocket and Streamable HTTP, each with its own
  :class:`~acp_trio.transports.cookies.CookieStore`, make a session each, prompt, leave, come back
  with their store and resume their session with ``replayFrom start``: the same numbered updates,
  from the host that made it (HAProxy's ``ACPHOST`` cookie; the host's log says the client
  attached to the live session there, and no other host opened it).
- Drain (the guide's rolling restart): SIGUSR1 takes a host out of rotation (HAProxy sees its
  ``503``); new clients' sessions go to the others with no error, while its own clients (their
  cookie) still reach their live sessions on it (``option persist``); SIGTERM then drains it, it
  exits 0, and the host started again on its address is back in rotation.
- SIGKILL: HAProxy marks the host down; new clients and clients whose cookie names it are served
  by the others (``option redispatch``).
- With ownership (issue 36 step 2; skipped without it, :data:`TAKEOVER`): a session whose host is
  SIGKILLed mid-turn is taken over by another host once its lease expires; a SIGTERM drain hands
  its sessions over and their clients, told ``moved``, resume at once on another host with no error
  (HAProxy's ``retry-on``: without it, a reconnect that reaches the draining host as it closes got
  HAProxy's ``502``, once in nine runs here).
"""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
from _haproxy import HAProxy, fill, free_port, guide_block, guide_config, haproxy_binary
from _host_kit import Recorder, init2, new_session, text
from test_host_cli import HostProcess

from acp_schema import v2
from acp_trio import RequestError
from acp_trio.transports.cookies import CookieStore

if TYPE_CHECKING:
    from _postgres import PostgresServer

pytest_plugins = ["_postgres"]

pytestmark = [
    pytest.mark.skipif(os.name != "posix", reason="signals, HAProxy"),
    pytest.mark.one_interpreter,
    pytest.mark.xdist_group("deploy-cluster"),  # one worker: one cluster
]

DEADLINE = 60
CLIENTS = 20  # 10 over each transport
KILL_CLIENTS = 200  # issue 36 step 5: 100 over each transport
CONNECTING = 20  # of them connecting at once (TLS, initialize): 200 at once overflowed a loaded host's backlog
HOSTS = 3
TOKEN = "Vq3cM0hTnB2wR8yKd5Lx-uJ7pZs1gE4fA9oXiYbC6tQ"  # the host guide's alice
AUTH = {"Authorization": f"Bearer {TOKEN}"}

AGENT = '''
import os

import trio
from acp_schema import v2

HELD: dict[str, trio.Event] = {}  # "hold" turns wait here, by key, until a "release" prompt on this host


class CountingAgent:
    """A v2 agent: "count N" streams N chunks; "hold N M KEY" N chunks, then waits until a prompt
    "release KEY" on the same host process, then M chunks.  It resumes any session (its conversation
    is the host's journal): what a host that takes a session over asks of it."""

    def __init__(self, conn):
        self.conn = conn

    async def session_new(self, params):
        return v2.NewSessionResponse(session_id=f"{os.environ['DEPLOY_HOST']}-{id(self):x}")

    async def session_resume(self, params):
        return v2.ResumeSessionResponse()

    async def session_close(self, params):
        return v2.CloseSessionResponse()

    async def session_prompt(self, params):
        sid = params.session_id
        how, *args = params.prompt[0].text.split()

        async def chunks(count):
            for i in range(count):
                chunk = v2.AgentMessageChunkSessionUpdate(message_id="m", content=v2.TextContentBlock(text=str(i)))
                await self.conn.client.session_update(v2.UpdateSessionNotification(session_id=sid, update=chunk))

        async def turn():
            if how == "count":
                await chunks(int(args[0]))
            elif how == "hold":
                await chunks(int(args[0]))
                await HELD.setdefault(args[2], trio.Event()).wait()
                await chunks(int(args[1]))
            elif how == "release":
                HELD.setdefault(args[0], trio.Event()).set()
            return "end_turn"

        self.conn.start_turn(sid, turn)
        return v2.PromptResponse(message_id="u")
'''


def takeover_available() -> bool:
    """Whether this host process takes a dead host's sessions over (issue 36 step 2): it has a
    lease setting (``lease_seconds``)."""
    from acp_trio.host import _cli

    return any(option.key.startswith("lease") for option in _cli.OPTIONS)


TAKEOVER = takeover_available()


class Host(HostProcess):
    """A host process (its JSON log read by a thread: :class:`test_host_cli.HostProcess`) with its own environment."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            argv, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()


class Cluster:
    """PostgreSQL, three host processes, HAProxy in front (see the module docstring)."""

    def __init__(self, where: Path, pg: PostgresServer) -> None:
        from test_transport_http import self_signed_certificate

        self.where = where
        cert, key = self_signed_certificate(where)
        (where / "acp.pem").write_bytes(cert.read_bytes() + key.read_bytes())  # HAProxy's crt: both in one
        self.trust = ssl.create_default_context(cafile=str(cert))
        (where / "deploy_agent.py").write_text(AGENT, encoding="utf-8")
        (where / "host.toml").write_text(guide_block("toml", "# host.toml"), encoding="utf-8")
        (where / "tokens.txt").write_text(f"# PRINCIPAL TOKEN\nalice {TOKEN}\n", encoding="utf-8")
        (where / "tokens.txt").chmod(0o600)
        self.store = pg.url("acp")  # the store's schema
        self.ports = [free_port() for _ in range(HOSTS)]
        self.hosts: list[Host | None] = [None] * HOSTS
        for i in range(HOSTS):
            self.start_host(i)
        self.port = free_port()
        socket_path = where / "haproxy.sock"
        config = fill(
            guide_config(),
            servers=[("127.0.0.1", port) for port in self.ports],
            bind=("127.0.0.1", self.port),
            stats_socket=socket_path,
            certificate=where / "acp.pem",
            inter="200ms",
        )
        self.haproxy = HAProxy(config, where, socket_path)
        self.haproxy.start()
        self.haproxy.wait_states(lambda s: list(s.values()) == ["UP"] * HOSTS)

    def start_host(self, i: int) -> Host:
        """Start host ``h{i+1}`` on its port (the guide's file; listen, store, agent as flags)."""
        argv = [sys.executable, "-m", "acp_trio.host", "--config", "host.toml"]
        argv += ["--listen", f"127.0.0.1:{self.ports[i]}", "--store", self.store]
        argv += ["--agent", "deploy_agent:CountingAgent", "--protocol", "2", "--log-level", "info"]
        if TAKEOVER:
            argv += ["--lease-seconds", "2"]  # a killed host's sessions are taken over 2 s after at most
        env = dict(os.environ, DEPLOY_HOST=f"h{i + 1}", PYTHONPATH=str(self.where))
        host = self.hosts[i] = Host(argv, self.where, env)
        host.wait_for("listening")
        return host

    def ensure_up(self) -> None:
        """Start again any host a test stopped, and wait until HAProxy has all of them up."""
        for i, host in enumerate(self.hosts):
            if host is None or host.process.poll() is not None:
                self.start_host(i)
        self.haproxy.wait_states(lambda s: set(s.values()) == {"UP"})

    def host(self, name: str) -> Host:
        host = self.hosts[int(name[1:]) - 1]
        assert host is not None
        return host

    def close(self) -> None:
        self.haproxy.stop()
        for host in self.hosts:
            if host is not None:
                host.stop()

    def url(self, transport: str) -> str:
        return f"{'wss' if transport == 'websocket' else 'https'}://127.0.0.1:{self.port}/acp"

    @asynccontextmanager
    async def client(self, transport: str, rec: Recorder, cookies: CookieStore) -> Any:
        """A v2 client through HAProxy (TLS), with ``cookies``, initialized."""
        from acp_trio.transports.http import connect_http
        from acp_trio.transports.websocket import connect_websocket

        url = self.url(transport)
        if transport == "websocket":
            opened = connect_websocket(url, rec, variant=v2, headers=AUTH, cookies=cookies, ssl_context=self.trust)
        else:
            opened = connect_http(url, rec, variant=v2, headers=AUTH, cookies=cookies, verify=self.trust)
        async with opened as conn:
            await init2(conn)
            yield conn


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer) -> Iterator[Cluster]:
    if haproxy_binary() is None:
        pytest.fail("HAProxy was not found: install Debian's haproxy package (apt-get install -y haproxy)")
    pytest.importorskip("cryptography")
    running = Cluster(tmp_path_factory.mktemp("deploy"), postgres_server)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def cluster(deployment: Cluster) -> Cluster:
    """The module's cluster with its three hosts up (a host an earlier test stopped started again)."""
    deployment.ensure_up()
    return deployment


def owner(cookies: CookieStore) -> str:
    """The host HAProxy's ``ACPHOST`` cookie names (``h1``...)."""
    header = cookies.header() or ""
    [name] = [value for key, _, value in (p.strip().partition("=") for p in header.split(";")) if key == "ACPHOST"]
    return name


def numbered(rec: Recorder) -> list[tuple[int, Any]]:
    return [(n, u) for n, u in zip(rec.numbers, rec.updates, strict=True) if n is not None]


async def make_session(
    cluster: Cluster, transport: str, cookies: CookieStore, prompt: str = "count 5"
) -> tuple[str, Recorder]:
    """A client makes a session, prompts, sees its turn end and leaves."""
    rec = Recorder()
    async with cluster.client(transport, rec, cookies) as conn:
        sid = await new_session(conn)
        await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text(prompt)))
        await rec.until(lambda: "idle" in rec.states())
    return sid, rec


async def come_back(cluster: Cluster, transport: str, cookies: CookieStore, sid: str, last: int) -> Recorder:
    """A client comes back with ``cookies`` and resumes ``sid`` from the start, up to update ``last``."""
    rec = Recorder()
    async with cluster.client(transport, rec, cookies) as conn:
        resume = v2.ResumeSessionRequest(session_id=sid, cwd="/tmp", replay_from=v2.StartReplayFrom())
        await conn.agent.session_resume(resume)
        await rec.until(lambda: last in rec.numbers)
    return rec


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux's ``/proc``; 0.0 elsewhere)."""
    stat = Path(f"/proc/{pid}/stat")
    if not stat.exists():
        return 0.0
    fields = stat.read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def idles(rec: Recorder) -> list[Any]:
    """The numbered (journaled) ``state_update idle`` s ``rec`` got."""
    return [u for _, u in numbered(rec) if type(u).__name__ == "IdleStateUpdateSessionUpdate"]


def logged(cluster: Cluster, event: str, sid: str) -> set[str]:
    """The hosts whose log has ``event`` for session ``sid``."""
    return {
        f"h{i + 1}"
        for i, host in enumerate(cluster.hosts)
        if host is not None and any(e["event"] == event and e.get("session_id") == sid for e in host.events())
    }


async def test_clients_come_back_through_the_balancer_to_their_live_session(cluster: Cluster) -> None:
    made: list[tuple[str, CookieStore, str, Recorder]] = []

    async def one(transport: str) -> None:
        cookies = CookieStore()
        sid, rec = await make_session(cluster, transport, cookies)
        made.append((transport, cookies, sid, rec))

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            for i in range(CLIENTS):
                nursery.start_soon(one, ("websocket", "http")[i % 2])
        back: dict[str, Recorder] = {}

        async def again(transport: str, cookies: CookieStore, sid: str, rec: Recorder) -> None:
            back[sid] = await come_back(cluster, transport, cookies, sid, max(n for n, _ in numbered(rec)))

        async with trio.open_nursery() as nursery:
            for entry in made:
                nursery.start_soon(again, *entry)
    owners = {sid: owner(cookies) for _, cookies, sid, _ in made}
    assert set(owners.values()) == {"h1", "h2", "h3"}  # spread over the three
    for _, _, sid, rec in made:
        assert sid.startswith(owners[sid] + "-")  # the agent that made it ran on the cookie's host
        assert [n for n, _ in numbered(rec)] == list(range(1, len(numbered(rec)) + 1))
        assert numbered(back[sid]) == numbered(rec)  # the replay: the same updates, the same numbers
        assert "idle" in back[sid].states()
    await trio.to_thread.run_sync(lambda: cluster.host("h1").wait_for("client.attached"))
    for sid, name in owners.items():
        assert logged(cluster, "session.opened", sid) == {name}  # made there, live there: no other host opened it
        assert name in logged(cluster, "client.attached", sid)


async def test_a_host_out_of_rotation_keeps_its_clients_and_takes_no_new_one_then_drains(cluster: Cluster) -> None:
    """The guide's rolling restart of one host."""
    # a session on the host about to be drained: clients until one lands there
    mine: list[tuple[str, CookieStore, Recorder]] = []
    with trio.fail_after(DEADLINE):
        while not mine:
            cookies = CookieStore()
            sid, rec = await make_session(cluster, "websocket", cookies)
            if owner(cookies) == "h2":
                mine.append((sid, cookies, rec))
    [(sid, cookies, rec)] = mine
    h2 = cluster.host("h2")
    h2.process.send_signal(signal.SIGUSR1)
    states = await trio.to_thread.run_sync(lambda: cluster.haproxy.wait_states(lambda s: s["h2"] == "DOWN"))
    assert states == {"h1": "UP", "h2": "DOWN", "h3": "UP"}
    with trio.fail_after(DEADLINE):
        new: list[CookieStore] = []

        async def one(transport: str) -> None:
            store = CookieStore()
            await make_session(cluster, transport, store)  # no error: none lands on the drained host
            new.append(store)

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(one, ("websocket", "http")[i % 2])
        assert {owner(store) for store in new} == {"h1", "h3"}  # round robin over the two in rotation
        last = max(n for n, _ in numbered(rec))
        back = await come_back(cluster, "http", cookies, sid, last)  # its own client still reaches it
    assert numbered(back) == numbered(rec)
    assert owner(cookies) == "h2"
    h2.process.send_signal(signal.SIGTERM)
    code = await trio.to_thread.run_sync(lambda: h2.process.wait(DEADLINE))
    assert code == 0
    finished = h2.wait_for("drain.finished")
    assert finished["turns_cut"] == 0 and finished["sessions_ended"] >= 1
    await trio.to_thread.run_sync(lambda: cluster.start_host(1))  # the new version, on the same address
    states = await trio.to_thread.run_sync(lambda: cluster.haproxy.wait_states(lambda s: s["h2"] == "UP"))
    assert set(states.values()) == {"UP"}


async def test_a_killed_host_is_taken_out_and_its_clients_are_served_by_the_others(cluster: Cluster) -> None:
    with trio.fail_after(DEADLINE):
        cookies = CookieStore()
        while True:
            cookies.clear()
            await make_session(cluster, "websocket", cookies)
            if owner(cookies) == "h3":
                break
    h3 = cluster.host("h3")
    os.killpg(h3.process.pid, signal.SIGKILL)
    await trio.to_thread.run_sync(h3.process.wait)
    await trio.to_thread.run_sync(lambda: cluster.haproxy.wait_states(lambda s: s["h3"] == "DOWN"))
    with trio.fail_after(DEADLINE):
        fresh = CookieStore()
        await make_session(cluster, "http", fresh)
        assert owner(fresh) in ("h1", "h2")
        for transport in ("websocket", "http"):  # a client whose cookie names the dead host: redispatched
            await make_session(cluster, transport, cookies)
            assert owner(cookies) in ("h1", "h2")
            cookies.store([("set-cookie", "ACPHOST=h3")])


@pytest.mark.skipif(not TAKEOVER, reason="issue 36 step 2 (ownership leases, takeover) is not in this host yet")
async def test_every_session_survives_the_kill_of_a_host_in_the_middle_of_turns(
    cluster: Cluster, record_property: Any
) -> None:
    """Issue 36 step 5: 200 clients (100 over WebSocket, 100 over Streamable HTTP) make a session
    each, spread over the three hosts, start a turn (3 updates, then it waits for a release, then 3
    more), see its first 3 updates and leave; h1 is SIGKILLed while all 200 turns run, and h2's and
    h3's turns are released.  Every client comes back with its cookie store and resumes from the
    start: nothing it saw is missing, the numbers have no gap.  Those of h1 reach another host
    (HAProxy), which takes the session over once h1's lease has expired (they retry until then):
    the turn the kill cut ends with ``idle``, stop reason ``error``, and the session takes the next
    prompt there.  The others are still live where they were: their turn ends ``end_turn`` with all
    6 updates.  Reported (``record_property`` and a printed line): the takeover time, from the kill
    to the first and to the last of h1's sessions resumed on another host; the wall time, the CPU
    of the clients (this process) and of the three hosts."""
    import resource

    made: list[tuple[str, str, CookieStore, Recorder, str]] = []
    key = f"k{trio.current_time()}"  # this run's turns, released by this run only

    connecting = trio.CapacityLimiter(CONNECTING)

    @asynccontextmanager
    async def client(transport: str, rec: Recorder, cookies: CookieStore) -> Any:
        """:meth:`Cluster.client`, at most ``CONNECTING`` of them connecting at once."""
        async with AsyncExitStack() as stack:
            async with connecting:
                conn = await stack.enter_async_context(cluster.client(transport, rec, cookies))
            yield conn

    async def start(transport: str) -> None:
        cookies, rec = CookieStore(), Recorder()
        async with client(transport, rec, cookies) as conn:
            sid = await new_session(conn)
            await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text(f"hold 3 3 {key}")))
            await rec.until(lambda: len(rec.texts()) >= 3)
        made.append((transport, sid, cookies, rec, owner(cookies)))

    back: dict[str, Recorder] = {}
    served: dict[str, float] = {}  # h1's sessions: when another host answered their resume

    async def resume(transport: str, sid: str, cookies: CookieStore, rec: Recorder, first: str) -> None:
        again = Recorder()
        async with client(transport, again, cookies) as conn:
            request = v2.ResumeSessionRequest(session_id=sid, cwd="/tmp", replay_from=v2.StartReplayFrom())
            while True:  # h1's sessions: until its lease expired and this host took the session over
                try:
                    await conn.agent.session_resume(request)
                    break
                except RequestError:
                    assert first == "h1"
                    await trio.sleep(0.2)
            if first == "h1":
                served[sid] = trio.current_time()
            await again.until(lambda: len(idles(again)) == 1)
            if first == "h1":
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 2")))
                await again.until(lambda: len(idles(again)) == 2)
        back[sid] = again

    async def release(i: int) -> None:
        """A prompt ``release`` on host ``i`` itself (not through HAProxy): its held turns go on."""
        from acp_trio.transports.websocket import connect_websocket

        rec = Recorder()
        url = f"ws://127.0.0.1:{cluster.ports[i]}/acp"
        async with connect_websocket(url, rec, variant=v2, headers=AUTH) as conn:
            await init2(conn)
            sid = await new_session(conn)
            await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text(f"release {key}")))
            await rec.until(lambda: "idle" in rec.states())

    victim = cluster.host("h1")
    hosts = [cluster.host(name).process.pid for name in ("h1", "h2", "h3")]
    hosts_cpu = -sum(map(cpu_seconds, hosts))
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    began = trio.current_time()
    with trio.fail_after(2 * DEADLINE):  # 400 connections: a loaded machine's pace
        async with trio.open_nursery() as nursery:
            for i in range(KILL_CLIENTS):
                nursery.start_soon(start, ("websocket", "http")[i % 2])
        hosts_cpu += cpu_seconds(hosts[0])
        killed = trio.current_time()
        os.killpg(victim.process.pid, signal.SIGKILL)  # every turn is held: running on all three
        await trio.to_thread.run_sync(victim.process.wait)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(release, 1)
            nursery.start_soon(release, 2)
            for entry in sorted(made, key=lambda entry: entry[-1] != "h1"):  # h1's connect first
                nursery.start_soon(resume, *entry)
    ended = trio.current_time()
    used = resource.getrusage(resource.RUSAGE_SELF)
    hosts_cpu += sum(map(cpu_seconds, hosts[1:]))
    assert len(made) == KILL_CLIENTS and {first for *_, first in made} == {"h1", "h2", "h3"}
    for _, sid, cookies, rec, first in made:
        seen, got = numbered(rec), numbered(back[sid])
        assert got[: len(seen)] == seen  # nothing acknowledged is lost
        assert [n for n, _ in got] == list(range(1, len(got) + 1))
        if first == "h1":
            assert owner(cookies) in ("h2", "h3")
            assert [u.stop_reason for u in idles(back[sid])] == ["error", "end_turn"]
            assert back[sid].texts() == ["0", "1", "2", "0", "1"]  # the cut turn's 3, the next one's 2
        else:
            assert owner(cookies) == first
            assert [u.stop_reason for u in idles(back[sid])] == ["end_turn"]
            assert back[sid].texts() == ["0", "1", "2", "0", "1", "2"]
    on_h1 = sorted(served[sid] - killed for _, sid, *_, first in made if first == "h1")
    assert on_h1
    figures = {
        "clients": KILL_CLIENTS,
        "on_killed_host": len(on_h1),
        "takeover_first_s": round(on_h1[0], 3),
        "takeover_all_s": round(on_h1[-1], 3),
        "wall_s": round(ended - began, 3),
        "clients_cpu_s": round(used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime, 3),
        "hosts_cpu_s": round(hosts_cpu, 3),
    }
    for name, value in figures.items():
        record_property(name, value)
    print("\nkill test: " + ", ".join(f"{name} {value}" for name, value in figures.items()))


def test_the_guides_haproxy_config_is_accepted_as_printed(tmp_path: Path) -> None:
    """``haproxy -c`` on the guide's file as printed but for its certificate's and socket's paths,
    and with the guide's ``default-server`` line for TLS to the hosts in place of the first."""
    binary = haproxy_binary()
    if binary is None:
        pytest.fail("HAProxy was not found: install Debian's haproxy package (apt-get install -y haproxy)")
    pytest.importorskip("cryptography")
    from test_transport_http import self_signed_certificate

    cert, key = self_signed_certificate(tmp_path)
    pem = tmp_path / "acp.pem"
    pem.write_bytes(cert.read_bytes() + key.read_bytes())
    config = guide_config().replace("/etc/haproxy/acp.pem", str(pem)).replace("/run/haproxy/", f"{tmp_path}/")
    assert "cookie ACPHOST insert indirect nocache httponly" in config
    for line in (
        "option httpchk GET /healthz",
        "option redispatch",
        "option persist",
        "timeout tunnel 1h",
        "retries 2",
        "retry-on conn-failure empty-response 503",
    ):
        assert line in config
    [plain] = [line for line in config.splitlines() if line.strip().startswith("default-server")]
    [to_hosts] = guide_block("text", "    default-server").splitlines()
    assert to_hosts.startswith(plain)
    for text_ in (config, config.replace(plain, to_hosts.replace("/etc/haproxy/hosts-ca.pem", str(cert)))):
        (tmp_path / "haproxy.cfg").write_text(text_, encoding="utf-8")
        run = subprocess.run([binary, "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr


def guide_host_config() -> dict[str, Any]:
    import tomllib

    return tomllib.loads(guide_block("toml", "# host.toml"))


def test_the_guides_sql_makes_a_role_whose_store_opens(postgres_server: PostgresServer) -> None:
    """The guide's SQL as printed, as the server's superuser; then the store opens as that role,
    in that database, and makes its tables there."""
    import psycopg

    from acp_trio._store_pg import PostgresSessionStore

    sql = guide_block("text", "-- PostgreSQL")
    with psycopg.connect(postgres_server.admin, autocommit=True) as db:
        for statement in filter(str.strip, re.sub(r"--.*", "", sql).split(";")):
            db.execute(statement)  # type: ignore[call-overload]  # the guide's own text
    url = re.sub(r"@[^/]+/", "@/", guide_host_config()["store"])  # the guide's user, password, database
    url += "?" + urllib.parse.urlencode({"host": str(postgres_server.socket_dir), "port": postgres_server.port})
    with PostgresSessionStore(url):
        pass
    with psycopg.connect(url) as db:
        owners = db.execute("SELECT tableowner FROM pg_tables WHERE tablename LIKE 'acp_%'").fetchall()
    assert owners and {row[0] for row in owners} == {"acp"}


def test_the_guides_systemd_unit_runs_the_host_long_enough_to_drain() -> None:
    import configparser
    import shlex

    from acp_trio.host._cli import build_parser

    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    unit.read_string(guide_block("text", "# /etc/systemd/system/acp-host.service"))
    service = unit["Service"]
    words = shlex.split(service["ExecStart"])
    assert words[1:3] == ["-m", "acp_trio.host"]
    assert build_parser().parse_args(words[3:]).config == "host.toml"
    assert service["WorkingDirectory"] == "/etc/acp-host" and "/etc/acp-host" in guide_block("toml", "# host.toml")
    assert service["KillSignal"] == "SIGTERM" and service["KillMode"] == "mixed"  # the host alone: it drains
    assert float(service["TimeoutStopSec"].rstrip("s")) > guide_host_config()["drain_timeout"] + 5


def test_the_guides_kubernetes_manifests_agree_with_the_host_and_haproxy() -> None:
    """On paper, but consistent: the probe is the host's health check, the port its ``listen``, the
    grace period covers preStop and the drain, the cookie is HAProxy's, the image runs the host."""
    import json
    import shlex

    yaml = pytest.importorskip("yaml")
    from acp_trio.host._cli import DEFAULT_HEALTH_PATH, build_parser

    host = guide_host_config()
    [port] = {int(address.rpartition(":")[2]) for address in host["listen"]}
    deployment, service, ingress = yaml.safe_load_all(guide_block("text", "# acp-host.yaml"))
    assert [deployment["kind"], service["kind"], ingress["kind"]] == ["Deployment", "Service", "Ingress"]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["ports"] == [{"containerPort": port}]
    assert container["readinessProbe"]["httpGet"] == {"path": DEFAULT_HEALTH_PATH, "port": port}
    assert "httpGet" not in container["livenessProbe"]  # a draining pod is not dead
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pre_stop + host["drain_timeout"] + 5
    assert container["volumeMounts"][0]["mountPath"] == "/etc/acp-host"
    assert service["spec"]["ports"] == [{"port": port, "targetPort": port}]
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    assert annotations["nginx.ingress.kubernetes.io/session-cookie-name"] in guide_config()  # ACPHOST
    assert annotations["nginx.ingress.kubernetes.io/affinity-mode"] == "persistent"
    [path] = ingress["spec"]["rules"][0]["http"]["paths"]
    assert path["path"] == "/acp" and path["backend"]["service"] == {"name": "acp-host", "port": {"number": port}}
    dockerfile = guide_block("text", "# Dockerfile")
    entry = json.loads(re.search(r"^ENTRYPOINT (.*)$", dockerfile, re.M)[1])  # type: ignore[index]
    assert build_parser().parse_args(entry[3:]).config == "host.toml" and entry[:3] == ["python", "-m", "acp_trio.host"]
    assert f"WORKDIR {container['volumeMounts'][0]['mountPath']}" in dockerfile and f"EXPOSE {port}" in dockerfile
    [install] = [shlex.split(line) for line in dockerfile.splitlines() if "pip install" in line]
    from test_docs_snippets import check_pip

    check_pip([word for word in install[1:] if word != "--no-cache-dir"])  # the extras exist


@pytest.mark.skipif(not TAKEOVER, reason="issue 36 step 2 (ownership leases, hand over) is not in this host yet")
@pytest.mark.parametrize("transport", ["websocket", "http"])
async def test_a_drained_hosts_sessions_move_to_the_others_with_no_error(cluster: Cluster, transport: str) -> None:
    """SIGTERM hands the host's sessions over (issue 36 step 2): its attached client is told
    ``moved``, reconnects at once with its cookie, and its first resume succeeds on another host
    (HAProxy's ``retry-on``: the draining host's closed connection is retried elsewhere, not a 502),
    with the same numbered updates."""
    from acp_trio.host import SESSION_ENDED
    from acp_trio.host._ownership import MOVED_REASON

    async def session_on_h2() -> tuple[str, CookieStore, Recorder] | None:
        """A session on h2 whose client stays until h2, SIGTERMed, tells it the session moved."""
        cookies, rec = CookieStore(), Recorder()
        async with cluster.client(transport, rec, cookies) as conn:

            async def ended(params: Any) -> None:
                rec.ext.append((SESSION_ENDED, params))
                rec.changed.unpark_all()

            conn.on_ext_notification(SESSION_ENDED, ended)
            sid = await new_session(conn)
            if owner(cookies) != "h2":
                return None
            await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 3")))
            await rec.until(lambda: "idle" in rec.states())
            cluster.host("h2").process.send_signal(signal.SIGTERM)
            await rec.until(lambda: bool(rec.ext))
        return sid, cookies, rec

    with trio.fail_after(DEADLINE):
        while (made := await session_on_h2()) is None:
            pass
        sid, cookies, rec = made
        [(_, told)] = rec.ext
        assert told["sessionId"] == sid and told["reason"] == MOVED_REASON
        back = await come_back(cluster, transport, cookies, sid, max(n for n, _ in numbered(rec)))
    assert owner(cookies) in ("h1", "h3")  # HAProxy's new cookie: the host that took it
    assert numbered(back) == numbered(rec)
    assert await trio.to_thread.run_sync(lambda: cluster.host("h2").process.wait(DEADLINE)) == 0

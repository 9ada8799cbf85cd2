"""Host processes behind HAProxy against one host alone (issue 36's bar: sessions created per second
and updates streamed per second in total, the ratio, and where the time goes).

Usage::

    python benchmarks/bench_deploy.py [--quick] [--store sqlite|postgresql|postgresql://...] [--repeats 1]
                                      [--clients 50] [--workers 2] [--seconds 5] [--json out.json]

Three setups, run one after the other on this machine's loopback, each with fresh host processes
(``python -m acp_trio.host``, a v2 agent of this file's that streams as fast as it can, log level
``warning``):

- ``1 host``: the clients connect to the host directly;
- ``1 host + HAProxy``: through HAProxy, the deployment guide's configuration
  (``docs/site/guides/deploy.md``, via ``tests/_haproxy.py``) with one server and plain HTTP
  (no TLS anywhere: what is compared is the balancer's and the hosts' work, not TLS's);
- ``3 hosts + HAProxy``: the same with three servers.

Two workloads per setup, each for ``--seconds`` (5; ``--quick`` 2) after every client is connected:

- ``new``: each client, in a loop, opens a WebSocket, initializes, makes a session and closes:
  sessions created per second, in total (a connection, an agent instance and a session each; the
  session is then detached and kept, up to the host's ``max_detached_sessions``);
- ``stream``: each client holds one WebSocket and one session, and prompts ``count 100`` again and
  again (each turn 100 ``agent_message_chunk`` updates, journaled, numbered, sent): updates the
  clients received per second, in total.

``--clients`` clients (50) spread over ``--workers`` client processes (2), each a trio program of
this file (``--worker``).  CPU seconds of every process over the measured window: each host,
HAProxy, the client processes, and the PostgreSQL server (its postmaster and backends) when
``--store postgresql``, and ``others``: the rest of the machine's (``/proc/stat``: other users'
work competes for the same CPUs); then the servers' CPU milliseconds (hosts, HAProxy, PostgreSQL)
per session and per update.  On a machine of two
CPUs, the three hosts and the balancer compete with the clients for the same two: more processes
cannot make it faster there; the CPU per session/update says what a machine of its own per host
would carry.

``--takeover K`` (with ``--store postgresql``), instead: 3 hosts behind HAProxy with
``--lease-seconds`` (2); K times, a client makes a session on the host HAProxy picks, starts a turn
(an update every 50 ms) and leaves; that host is SIGKILLed; the client reconnects through HAProxy
with its cookie (naming the dead host) and resumes, again and again until another host has taken
the session over: seconds from the kill to the resume answered (median, worst); the host is then
started again.

``--repeats K``: each setup K times, in turn (each setup first once in three), with fresh host
processes each time; shown: the run of median rate, and the range.

``--store sqlite`` (default): each host its own SQLite file (a machine's own disk).
``--store postgresql``: one PostgreSQL server shared by the hosts, started for the run
(``tests/_postgres.py``, durable: fsync on), a schema per setup; or ``--store postgresql://...``
an existing server (a schema per setup is created in it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "tests"))
from _shared import dist_version, runtime_build, use_source_tree  # noqa: E402

use_source_tree()

AGENT = '''
import trio
from acp_schema import v2


class Agent:
    """A v2 agent whose turn streams N chunks as fast as it can ("count N"), or 50 ms apart ("slow N").
    It resumes any session (what a host that takes a session over asks of it)."""

    def __init__(self, conn):
        self.conn = conn
        self.made = 0

    async def session_new(self, params):
        self.made += 1
        return v2.NewSessionResponse(session_id=f"s{id(self):x}-{self.made}")

    async def session_close(self, params):
        return v2.CloseSessionResponse()

    async def session_resume(self, params):
        return v2.ResumeSessionResponse()

    async def session_prompt(self, params):
        sid = params.session_id
        how, count = params.prompt[0].text.split()

        async def turn():
            for i in range(int(count)):
                if how == "slow":
                    await trio.sleep(0.05)
                chunk = v2.AgentMessageChunkSessionUpdate(message_id="m", content=v2.TextContentBlock(text=f"{i:>40}"))
                await self.conn.client.session_update(v2.UpdateSessionNotification(session_id=sid, update=chunk))
            return "end_turn"

        self.conn.start_turn(sid, turn)
        return v2.PromptResponse(message_id="u")
'''
TURN = 100  # updates per turn of the stream workload


# -- the client worker (a process of its own) ----------------------------------------------------


def worker(url: str, clients: int, scenario: str, seconds: float) -> dict[str, Any]:
    """``clients`` clients of ``scenario`` for ``seconds``: once they are ready (``stream``: each
    connected with its session), print ``ready``, read the start time (``time.time()``) from stdin."""
    import trio

    from acp_schema import v2
    from acp_trio.transports.cookies import CookieStore
    from acp_trio.transports.websocket import connect_websocket

    init = v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="bench", version="1"))
    counts = [0]
    errors: list[str] = []
    window: list[float] = []
    start = [0.0]
    go = trio.Event()
    ready = [0]
    all_ready = trio.Event()

    class Client:
        def __init__(self) -> None:
            self.updates = 0
            self.idle = trio.Event()

        async def session_update(self, params: Any) -> None:
            update = params.update
            if isinstance(update, v2.AgentMessageChunkSessionUpdate):
                self.updates += 1
            elif isinstance(update, v2.IdleStateUpdateSessionUpdate):
                self.idle.set()

    def is_ready() -> None:
        ready[0] += 1
        if ready[0] == clients:
            all_ready.set()

    async def new_loop() -> None:
        cookies = CookieStore()
        is_ready()
        await go.wait()
        end = start[0] + seconds
        while time.time() < end:
            async with connect_websocket(url, Client(), variant=v2, cookies=cookies) as conn:
                await conn.agent.initialize(init)
                await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))
            if time.time() < end:
                counts[0] += 1

    async def stream_loop() -> None:
        client = Client()
        async with connect_websocket(url, client, variant=v2) as conn:
            await conn.agent.initialize(init)
            sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
            is_ready()
            await go.wait()
            end = start[0] + seconds
            prompt = [v2.TextContentBlock(text=f"count {TURN}")]
            while time.time() < end:
                client.idle = trio.Event()
                before = client.updates
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=prompt))
                await client.idle.wait()
                if time.time() < end:
                    counts[0] += client.updates - before

    async def coordinate() -> None:
        await all_ready.wait()
        print("ready", flush=True)
        start[0] = float(await trio.to_thread.run_sync(sys.stdin.readline))
        await trio.sleep(max(0.0, start[0] - time.time()))
        go.set()
        window.append(time.process_time())
        await trio.sleep(max(0.0, start[0] + seconds - time.time()))
        window.append(time.process_time())

    async def guarded(fn: Any) -> None:
        try:
            await fn()
        except Exception as exc:  # a failed client is counted, not fatal
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            is_ready()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(coordinate)
            for _ in range(clients):
                nursery.start_soon(guarded, new_loop if scenario == "new" else stream_loop)

    trio.run(main)
    return {"count": counts[0], "cpu": window[1] - window[0], "errors": errors}


# -- processes -----------------------------------------------------------------------------------


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> float:
    """CPU seconds every process of the machine has used (``/proc/stat``: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its live children (a PostgreSQL postmaster and its backends)."""
    total = 0.0
    with contextlib.suppress(OSError):
        total += cpu_of(pid)
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                total += tree_cpu(int(child))
    return total


class Hosts:
    """``count`` host processes on free ports, each with ``stores[i]``."""

    def __init__(self, where: Path, stores: list[str], flags: tuple[str, ...] = ()) -> None:
        from _haproxy import free_port

        (where / "bench_agent.py").write_text(AGENT, encoding="utf-8")
        self.where, self.stores, self.flags = where, stores, flags
        self.ports = [free_port() for _ in stores]
        self.processes: list[subprocess.Popen[bytes]] = []
        for i in range(len(stores)):
            self.processes.append(self._start(i))
        for port in self.ports:
            wait_healthy(port)

    def _start(self, i: int) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(self.where), os.environ.get("PYTHONPATH", "")]))
        argv = [sys.executable, "-m", "acp_trio.host", "--agent", "bench_agent:Agent", "--protocol", "2"]
        argv += ["--listen", f"127.0.0.1:{self.ports[i]}", "--store", self.stores[i], "--log-level", "warning"]
        argv += ["--max-detached-sessions", "100", "--max-connections", "1000", *self.flags]
        return subprocess.Popen(argv, cwd=self.where, env=env, start_new_session=True)

    def restart(self, i: int) -> None:
        """Start host ``i`` again on its port (after it was killed) and wait for its health check."""
        self.processes[i] = self._start(i)
        wait_healthy(self.ports[i])

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def wait_healthy(port: int, timeout: float = 30.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the host on port {port} did not answer its health check in {timeout:g} s")
        time.sleep(0.05)


@contextlib.contextmanager
def balancer(where: Path, ports: list[int]) -> Iterator[Any]:
    from _haproxy import HAProxy, fill, free_port, guide_config

    port = free_port()
    socket_path = where / "haproxy.sock"
    config = fill(
        guide_config(),
        servers=[("127.0.0.1", p) for p in ports],
        bind=("127.0.0.1", port),
        stats_socket=socket_path,
        certificate=None,
    )
    haproxy = HAProxy(config, where, socket_path)
    haproxy.start()
    try:
        haproxy.wait_states(lambda s: set(s.values()) == {"UP"})
        haproxy.port = port  # type: ignore[attr-defined]
        yield haproxy
    finally:
        haproxy.stop()


def measure(
    url: str, scenario: str, clients: int, workers: int, seconds: float, watched: dict[str, int], tree: set[str]
) -> dict[str, Any]:
    """Run ``workers`` client processes of ``scenario``; CPU of ``watched`` processes over the window."""
    shares = [clients // workers + (1 if i < clients % workers else 0) for i in range(workers)]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", url, str(share), scenario, repr(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for share in shares
    ]
    for proc in procs:  # every client connected (stream), every worker's imports done
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    start_at = time.time() + 0.2
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(f"{start_at!r}\n")
        proc.stdin.flush()
    time.sleep(max(0.0, start_at - time.time()))
    before = {name: (tree_cpu if name in tree else cpu_of)(pid) for name, pid in watched.items()}
    machine_before = machine_cpu()
    time.sleep(seconds)
    machine = machine_cpu() - machine_before
    after = {name: (tree_cpu if name in tree else cpu_of)(pid) for name, pid in watched.items()}
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        results.append(json.loads(out.strip().splitlines()[-1]))
    count = sum(r["count"] for r in results)
    cpu = {name: after[name] - before[name] for name in watched}
    cpu["clients"] = sum(r["cpu"] for r in results)  # over the same window
    errors = [e for r in results for e in r["errors"]]
    cpu["others"] = max(0.0, machine - sum(cpu.values()))  # the machine's other processes (other users)
    return {"count": count, "per_second": count / seconds, "cpu": cpu, "errors": errors[:5], "failed": len(errors)}


def run_setup(
    name: str, where: Path, stores: list[str], through: bool, args: argparse.Namespace, pg_pid: int | None
) -> dict[str, Any]:
    where.mkdir()
    hosts = Hosts(where, stores)
    try:
        with contextlib.ExitStack() as stack:
            watched = {f"host{i + 1}": p.pid for i, p in enumerate(hosts.processes)}
            if through:
                haproxy = stack.enter_context(balancer(where, hosts.ports))
                url = f"ws://127.0.0.1:{haproxy.port}/acp"
                watched["haproxy"] = haproxy.process.pid
            else:
                url = f"ws://127.0.0.1:{hosts.ports[0]}/acp"
            if pg_pid is not None:
                watched["postgresql"] = pg_pid
            out = {}
            for scenario in ("new", "stream"):
                out[scenario] = measure(
                    url, scenario, args.clients, args.workers, args.seconds, watched, {"postgresql"}
                )
                print(
                    f"  {name:20} {scenario:7} {out[scenario]['per_second']:>10,.0f}/s  "
                    f"failed {out[scenario]['failed']}",
                    file=sys.stderr,
                )
            return out
    finally:
        hosts.stop()


def takeover(where: Path, store: str, kills: int, lease_seconds: float) -> list[float]:
    """Seconds from the SIGKILL of a session's host to its ``session/resume`` answered by another
    host (through HAProxy, the client's cookie naming the dead host), ``kills`` times; the killed
    host is started again between kills and the next session made on whichever host HAProxy picks."""
    import trio

    from acp_schema import v2
    from acp_trio.transports.cookies import CookieStore
    from acp_trio.transports.websocket import connect_websocket

    where.mkdir()
    hosts = Hosts(where, [store] * 3, ("--lease-seconds", f"{lease_seconds:g}"))
    init = v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="bench", version="1"))
    times: list[float] = []

    class Client:
        def __init__(self) -> None:
            self.updates = 0

        async def session_update(self, params: Any) -> None:
            self.updates += 1

    try:
        with balancer(where, hosts.ports) as haproxy:
            url = f"ws://127.0.0.1:{haproxy.port}/acp"
            for _ in range(kills):

                async def one() -> float:
                    cookies, client = CookieStore(), Client()
                    async with connect_websocket(url, client, variant=v2, cookies=cookies) as conn:
                        await conn.agent.initialize(init)
                        sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd="/tmp"))).session_id
                        prompt = [v2.TextContentBlock(text="slow 1000")]
                        await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=prompt))
                        while client.updates < 3:
                            await trio.sleep(0.01)
                    victim = int((cookies.header() or "").partition("ACPHOST=h")[2].split(";")[0]) - 1
                    killed = time.monotonic()
                    os.killpg(hosts.processes[victim].pid, signal.SIGKILL)
                    hosts.processes[victim].wait()
                    resume = v2.ResumeSessionRequest(session_id=sid, cwd="/tmp")
                    while True:
                        try:
                            async with connect_websocket(url, Client(), variant=v2, cookies=cookies) as conn:
                                await conn.agent.initialize(init)
                                await conn.agent.session_resume(resume)
                                took = time.monotonic() - killed
                                break
                        except Exception:  # RequestError: the lease not yet expired; a connection error
                            await trio.sleep(0.02)
                    hosts.restart(victim)
                    haproxy.wait_states(lambda s: set(s.values()) == {"UP"})
                    return took

                times.append(trio.run(one))
                print(f"  takeover {len(times)}: {times[-1]:.3f} s", file=sys.stderr)
    finally:
        hosts.stop()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--store", default="sqlite", help="sqlite, postgresql, or a postgresql:// URL")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--takeover", type=int, default=0, metavar="K", help="with a postgresql store: K kills")
    parser.add_argument("--lease-seconds", type=float, default=2.0, help="the hosts' lease_seconds for --takeover")
    parser.add_argument("--repeats", type=int, default=1, help="runs of every setup, alternating; the median is shown")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", nargs=4, metavar=("URL", "CLIENTS", "SCENARIO", "SECONDS"))
    args = parser.parse_args()
    if args.worker:
        url, clients, scenario, seconds = args.worker
        print(json.dumps(worker(url, int(clients), scenario, float(seconds))))
        return 0
    args.seconds = args.seconds or (2.0 if args.quick else 5.0)
    from _haproxy import haproxy_binary

    if haproxy_binary() is None:
        print("HAProxy was not found: apt-get install -y haproxy", file=sys.stderr)
        return 1
    temp = Path(tempfile.mkdtemp(prefix="bench-deploy-"))
    server = None
    try:
        pg_pid = None
        if args.store == "sqlite":

            def stores(setup: str, n: int) -> list[str]:
                return [f"sqlite:///{temp / setup}-h{i + 1}.db" for i in range(n)]

        elif args.store == "postgresql" or args.store.startswith(("postgresql://", "postgres://")):
            import psycopg

            if args.store == "postgresql":
                from _postgres import PostgresServer, server_bindir

                bindir = server_bindir()
                if bindir is None:
                    print("no PostgreSQL server binaries: apt-get install -y postgresql", file=sys.stderr)
                    return 1
                server = PostgresServer(Path(tempfile.mkdtemp(prefix="acp-trio-pg-")), bindir)
                server.start(durable=True)
                admin = server.admin
                base = "postgresql://postgres@/postgres?" + urllib.parse.urlencode(
                    {"host": str(server.socket_dir), "port": server.port}
                )
                pg_pid = int((server.data / "postmaster.pid").read_text().split()[0])
            else:
                admin = base = args.store

            def stores(setup: str, n: int) -> list[str]:
                schema = f"bench_{setup.replace('-', '_')}_{int(time.time())}"
                with psycopg.connect(admin, autocommit=True) as db:
                    db.execute(f'CREATE SCHEMA "{schema}"')  # type: ignore[arg-type]  # our own name
                options = urllib.parse.quote(f"-csearch_path={schema}")
                return [f"{base}{'&' if '?' in base else '?'}options={options}"] * n

        else:
            parser.error("--store: sqlite, postgresql, or a postgresql:// URL")
        if args.takeover:
            if args.store == "sqlite":
                parser.error("--takeover needs --store postgresql (sessions owned by leases)")
            import statistics

            [url] = set(stores("takeover", 1))
            times = takeover(temp / "takeover", url, args.takeover, args.lease_seconds)
            print(
                f"takeover after SIGKILL, 3 hosts + HAProxy, lease_seconds {args.lease_seconds:g}, {len(times)} kills: "
                f"median {statistics.median(times):.3f} s, worst {max(times):.3f} s, best {min(times):.3f} s"
            )
            if args.json is not None:
                args.json.write_text(json.dumps({"lease_seconds": args.lease_seconds, "takeover_seconds": times}))
            return 0
        setups = [
            ("1 host", "one", 1, False),
            ("1 host + HAProxy", "one-lb", 1, True),
            ("3 hosts + HAProxy", "three-lb", 3, True),
        ]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in setups}
        for repeat in range(args.repeats):
            for name, setup, n, through in setups[repeat % 3 :] + setups[: repeat % 3]:  # each first in turn
                where = temp / f"{setup}-{repeat}"
                runs[name].append(run_setup(name, where, stores(f"{setup}-{repeat}", n), through, args, pg_pid))
        results = {
            name: {scenario: median_run(r, scenario) for scenario in ("new", "stream")} for name, r in runs.items()
        }
        report(results, args)
        if args.json is not None:
            args.json.write_text(
                json.dumps(
                    {
                        "python": platform.python_version(),
                        "acp_trio": dist_version("acp-trio"),
                        "build": runtime_build(),
                        "cpus": os.cpu_count(),
                        "store": args.store if "://" not in args.store else "postgresql (URL)",
                        "clients": args.clients,
                        "workers": args.workers,
                        "seconds": args.seconds,
                        "repeats": args.repeats,
                        "results": results,
                    },
                    indent=2,
                )
            )
        return 0
    finally:
        if server is not None:
            server.stop()
            shutil.rmtree(server.directory, ignore_errors=True)
        shutil.rmtree(temp, ignore_errors=True)


def median_run(runs: list[dict[str, Any]], scenario: str) -> dict[str, Any]:
    """The run of ``scenario`` whose rate is the median (the lower one of an even count), its CPU figures with it."""
    ordered = sorted((run[scenario] for run in runs), key=lambda result: result["per_second"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["rates"] = [round(result["per_second"], 1) for result in ordered]
    return chosen


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    names = list(results)
    print(
        f"store {args.store.split('://')[0]}, {args.clients} clients in {args.workers} processes, "
        f"{args.seconds:g} s each, {os.cpu_count()} CPUs, {runtime_build()}"
    )
    print(f"{'':34}" + "".join(f"{n:>20}" for n in names))
    for scenario, unit, per in (("new", "sessions/s", "session"), ("stream", "updates/s", "update")):
        rates = [results[n][scenario]["per_second"] for n in names]
        print(f"{scenario + ': ' + unit:34}" + "".join(f"{r:>20,.0f}" for r in rates))
        if args.repeats > 1:
            spread = [
                f"{min(results[n][scenario]['rates']):,.0f}-{max(results[n][scenario]['rates']):,.0f}" for n in names
            ]
            print(f"{'  range of the runs':34}" + "".join(f"{c:>20}" for c in spread))
        print(
            f"{'  ratio to 1 host':34}" + "".join(f"{r / rates[0] if rates[0] else float('nan'):>20.2f}" for r in rates)
        )
        print(f"{'  failed clients':34}" + "".join(f"{results[n][scenario]['failed']:>20}" for n in names))
        kinds = sorted({k.rstrip("0123456789") for n in names for k in results[n][scenario]["cpu"]})
        for kind in kinds:
            cells = []
            for n in names:
                cpu = results[n][scenario]["cpu"]
                total = sum(v for k, v in cpu.items() if k.rstrip("0123456789") == kind)
                cells.append(f"{total:>8.2f} s" if any(k.rstrip("0123456789") == kind for k in cpu) else "-")
            print(f"{'  CPU ' + kind + ('s (sum)' if kind == 'host' else ''):34}" + "".join(f"{c:>20}" for c in cells))
        per_unit = []
        for n in names:
            result = results[n][scenario]
            server_cpu = sum(v for k, v in result["cpu"].items() if k not in ("clients", "others"))
            per_unit.append(1000 * server_cpu / max(1, result["count"]))
        print(f"{f'  server CPU ms per {per}':34}" + "".join(f"{v:>20.3f}" for v in per_unit))


if __name__ == "__main__":
    sys.exit(main())

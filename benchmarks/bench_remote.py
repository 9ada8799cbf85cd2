"""acp-trio's remote transports (WebSocket, Streamable HTTP, the bridge) vs the TypeScript SDK's, on loopback.

Usage::

    python benchmarks/bench_remote.py [--quick] [--rounds R] [--repeats K] [--connections C]
                                      [--connect N] [--connect-concurrency K]
                                      [--only stream,scenarios,many,connect,tls]
                                      [--json out.json] [--strict] [--profile DIR]

Needs the ``remote`` extra (``pip install -e '.[remote]'``) and, for the TypeScript side, ``node``
and ``npm`` (20 or later): ``@agentclientprotocol/sdk`` 2.4.0, zod and ``ws`` are installed once into
``${ACP_TRIO_CACHE:-~/.cache/acp-trio}/interop/npm-2.4.0-ws-8.18.3`` (the directory the interop
tests use).  Without node the TypeScript rows say "not measured".  Every server and client is its
own process; the scripts are in ``benchmarks/remote/`` and the agent and prompt commands are
those of ``benchmarks/runtime/`` (``common.py``).

Scenarios (1 to 3: issue 12's bars; 4: issue 14's side-by-side report, with issue 32's round-trip
bars; 5: issue 32's connection bars).  ``--only`` runs some of them: ``stream`` (1 and 3's
streams), ``scenarios`` (4's round trips over WebSocket, Streamable HTTP and the bridge), ``many``
(2), ``connect`` (5), ``tls`` (6); the rows of what did not run are left out:

1. ``stream``: one ``session/prompt`` during which the agent sends 20,000 ``agent_message_chunk``
   updates, timed by the client from sending the prompt to its response (all updates counted).
   WebSocket: acp-trio's pair (``AcpApp`` on hypercorn serving the bench agent;
   ``connect_websocket``) vs the TypeScript SDK's pair (``AcpServer`` with its Node adapter and
   ``ws``; ``createWebSocketStream``); the crossed pairs are shown too (no bar), and the floor
   under ours: a bare ASGI app on hypercorn sending the same 20,000 frames, precomputed, to a bare
   trio-websocket client (``remote/raw_ws_*.py``), no ACP on either side.  Streamable HTTP:
   our ``connect_http`` and the SDK's ``createHttpStream``, both against the SDK's ``AcpServer``,
   and our server when it serves Streamable HTTP (probed: a ``POST`` ``initialize``; while it
   answers ``501`` the row says "not measured: not implemented").  Bars: our rate ≥ theirs.
2. ``many``: one fresh acp-trio server process, C (100) WebSocket connections opened at once, each
   streaming a 2,000-update turn; every connection checks its updates arrive in order.  Then a
   second wave the same (its RSS after shows whether memory kept after the first is reused).  The
   server's RSS is read from ``/proc/<pid>/status`` (``VmRSS`` sampled every 20 ms, ``VmHWM``):
   after start-up and one warm-up connection ("start"), at the peak, and once all connections
   closed and the RSS settled ("after").  Bars: all delivered in order, no error; after ≤ 1.1 x
   start.
3. ``bridge``: the bench agent as a stdio process behind ``serve_bridge`` (what ``python -m
   acp_trio.bridge --listen`` runs), driven by ``connect_websocket`` and by ``connect_http``, vs
   the same agent spawned directly over stdio (``spawn_agent``, ``runtime/trio_client.py``).
   Bar: bridge ≥ 0.5 x direct, shown for each transport.
4. ``WebSocket, the runtime benchmark's scenarios``: the commands of ``bench_runtime.py`` (defined in
   ``runtime/common.py``) over WebSocket on the four pairings of scenario 1 (our pair, the TS pair,
   and the crossed pairs), in one table: ``stream 20000`` (scenario 1's figures, not run again),
   ``mixed 20000`` (the same chunks with a ``tool_call`` and a ``tool_call_update`` after every 10:
   24,000 updates), ``read 2000 1`` (2,000 ``fs/read_text_file`` requests from the agent to the
   client, one at a time), ``permission 2000`` (2,000 ``session/request_permission``, one at a
   time, the client selecting ``allow``) and ``read 2000 64`` (64 reads in flight).  Both servers'
   agents serve every command (ours is ``runtime/trio_agent.py``'s; ``remote/ts_server.mjs`` does what
   ``runtime/ts_agent.mjs`` does); both clients advertise ``fs.readTextFile``, answer the requests
   (content ``common.FILE_CONTENT``; option ``allow``) and fail unless every prompt ends its turn
   having handled exactly what its command asks (``common.expected``: updates for stream and mixed,
   answered requests for read and permission).  Per scenario and pairing: the median rate (updates/s
   or round trips/s), × the TS pair's, and the median ms per prompt.  Each pairing and command is
   its own client process (``--rounds`` of them); one that fails is reported in the table and the
   others go on.  The same over Streamable HTTP, our pair (``connect_http`` → ``AcpApp``) and the
   TS pair (``createHttpStream`` → ``AcpServer``): ``read 2000 1``, ``permission 2000`` and
   ``read 2000 64``.  And the bridge in one table with the direct stdio pair and our own WebSocket
   pair (``stream 20000``, ``read 2000 1``, ``permission 2000``), with whose each part of the
   bridge's time is, per update or round trip: the direct pair's (the agent, the client, stdio),
   the WebSocket transport's (our WS pair less the direct pair), the bridge's own hop (the bridge
   less our WS pair: the bridge process, its forwarding, the agent's stdio pipe).  Bars: over
   WebSocket, ``read 2000 1``, ``permission 2000`` and ``read 2000 64`` of our pair ≥ the TS pair's;
   over Streamable HTTP, ``read 2000 1`` and ``permission 2000`` likewise (``read 2000 64`` shown).
   The bridge's bar stays scenario 3's (streaming); its round trips are shown against both pairs.
5. ``connect``: ``N`` (``--connect``, 2,000; ``--quick`` 500) ACP connections opened from one
   client process (``remote/connect_client.py``: trio-websocket, and h11 for Streamable HTTP;
   the same client for both servers, written against the wire), ``--connect-concurrency``
   (16) being opened at a time, each ``initialize`` + ``session/new``, then kept open idle, against
   ``trio_server.py`` (``AcpApp`` serving the bench agent) and ``ts_server.mjs`` (``AcpServer``).
   Each server is a fresh process per round, warmed up with 50 connections opened and closed.
   Over WebSocket an idle connection is its open WebSocket; over Streamable HTTP, its SSE ``GET``
   held open (its own TCP connection; the ``POST`` s go over one keep-alive connection per opener).
   Measured: connections opened per second (from the first one's start to the last
   ``session/new`` answer), the server's RSS per idle connection (``VmRSS`` 2 s after all are
   open less ``VmRSS`` before, over ``N``; a process's RSS, so for node the V8 heap as it grew) and
   the server's CPU ms per connection (``/proc``, while they were opened; shown, no bar: the
   rate depends on the client too, and on the machine's load).  Medians of ``--rounds`` fresh
   server processes.  Bars, for each transport: connections/s ≥ the TS server's; KiB per idle
   connection ≤ the TS server's.  ``remote/connect_profile.py`` (cProfile of the opening) and
   ``remote/connect_memory.py`` (tracemalloc and trio's tasks per idle connection) look closer.

6. ``tls``: what opening one connection costs a client, with and without TLS
   (``remote/tls_connect.py``): one client process opens 40 (``--quick`` 20) connections one
   after another to an ``AcpApp`` serving the bench agent, each ``initialize`` and leave, for
   ``ws://``, ``wss://``, ``http://`` and ``https://`` (a self-signed certificate, trusted through
   ``SSL_CERT_FILE``: a bundle of the system's CA certificates and it), and ``wss://`` and
   ``https://`` again with a new ``ssl.SSLContext`` per connection, which every connection paid
   before the process's shared context (``default_tls_context``; issue 32).  Medians of the
   client's CPU ms and wall ms per connection; no bar.

Floors, with no ACP on either side (rows marked "floor"; no bar): what the libraries under our
transports cost by themselves, so that a missed bar can be told from one no implementation on
them can reach (a missed bar then says ``FAIL (floor 0.88×)``: the floor's own ratio).

- ``remote/wsproto_floor.py``: trio's sockets and wsproto alone, one task per side, no ASGI server,
  no client library: ``read 2000 1`` (request frame out, answer frame back) and ``stream 20000``
  (framed 64 a write): the most any trio program framing with wsproto (as hypercorn and
  trio-websocket do) can do; shown against the TS pair's round trips and the direct stdio stream.
- ``remote/raw_ws_server.py`` (a bare ASGI app on hypercorn, through our ``serve``) with
  ``raw_ws_client.py`` (trio-websocket) for ``read 2000 1`` and ``stream 20000``, with
  ``raw_http_client.py`` (httpx2; an SSE event in, a ``POST`` out) for ``read 2000 1`` over
  Streamable HTTP, and with ``connect_client.py`` in scenario 5 (it answers ``initialize`` and
  ``session/new`` and nothing else).

Closer looks at the round trips: ``remote/ab_rtt.py`` times several source trees (or compiled
installs), the TS pair and the floor interleaved, over WebSocket or (``--http``) Streamable HTTP,
with each side's CPU per round trip; ``remote/http_profile.py`` counts what one Streamable HTTP
round trip runs on each side of our pair and of the floor (Python calls, trio task steps and
scheduler passes, system calls), which unlike times does not depend on the machine's load.

``--profile DIR``: afterwards, one more acp-trio WebSocket stream (20,000 updates, 3 turns) with
its server and client under cProfile; the statistics go to DIR and a breakdown of each process's
own time by component (trio, hypercorn, wsproto, trio-websocket, our adapters, the connection, the
codec, ...) is printed.

Statistics: ``--rounds`` client processes per pairing (sides alternating), each with one warm-up
prompt and ``--repeats`` timed prompts; verdicts use the **median** of all timed prompts.
Exit status: 0; 1 if a scenario failed to run (a client of scenarios 1, 3 or 4: after the report);
3 with ``--strict`` if a bar is missed.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

_HERE: Final = Path(__file__).resolve().parent
_REMOTE: Final = _HERE / "remote"
_RUNTIME: Final = _HERE / "runtime"
_REPO: Final = _HERE.parent

from _shared import dist_version, runtime_build, subprocess_env, use_source_tree  # noqa: E402
from bench_runtime import COMMANDS, MIXED, PERMISSION_SEQ, READ_PAR, READ_SEQ, cpu_times, describe_load  # noqa: E402

sys.path.append(str(_RUNTIME))
from common import expected, parse_command  # noqa: E402  (the prompt commands, from benchmarks/runtime)

use_source_tree()
import acp_schema  # noqa: E402
import acp_trio  # noqa: E402

STREAM_N: Final = 20_000
MANY_N: Final = 2_000
STREAM: Final = f"stream {STREAM_N}"
assert COMMANDS[0] == STREAM
WS_COMMANDS: Final = (MIXED, READ_SEQ, PERMISSION_SEQ, READ_PAR)
"""The runtime benchmark's scenarios besides ``stream``, run over WebSocket by :func:`run_ws_scenarios`."""
WS_PAIRS: Final = ("ws-ours", "ws-ts", "ws-ours-ts", "ws-ts-ours")
"""The WebSocket pairings they run on (the first two are ours and the TS SDK's pair)."""
HTTP_COMMANDS: Final = (READ_SEQ, PERMISSION_SEQ, READ_PAR)
"""The round-trip scenarios run over Streamable HTTP, on our pair and the TS SDK's."""
BRIDGE_COMMANDS: Final = (READ_SEQ, PERMISSION_SEQ)
"""The round-trip scenarios run through the bridge and on the direct stdio pair (besides ``stream``)."""
SCENARIO_TIMEOUT: Final = 300.0
TS_SDK: Final = "@agentclientprotocol/sdk@2.4.0"
TS_PACKAGES: Final = (TS_SDK, "zod@^3.25.76", "ws@8.18.3")
NOT_IMPLEMENTED: Final = "not measured: not implemented"
INITIALIZE: Final = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}'
)


# -- the TypeScript SDK ---------------------------------------------------------------------------


def ts_sdk_dir() -> tuple[Path | None, str]:
    """The npm directory holding the SDK, zod and ws (installed on first use), or None and why not."""
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        return None, "not measured: node/npm not on PATH"
    root = os.environ.get("ACP_TRIO_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "acp-trio")
    target = Path(root) / "interop" / "npm-2.4.0-ws-8.18.3"
    marker, what = target / ".acp-trio-installed", "\n".join(TS_PACKAGES) + "\n"

    def ready() -> bool:
        return marker.is_file() and marker.read_text() == what and (target / "node_modules" / "ws").is_dir()

    if ready():
        return target, ""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            (target / "package.json").write_text('{"name": "acp-trio-interop-ws", "private": true}\n')
            print(f"  installing {' '.join(TS_PACKAGES)} into {target} ...")
            proc = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--no-save", *TS_PACKAGES],
                cwd=target,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if proc.returncode != 0 or not (target / "node_modules" / "ws").is_dir():
                return None, f"not measured: npm install failed ({proc.stderr.strip()[-200:]})"
            marker.write_text(what)
    return target, ""


def node_version() -> str:
    try:
        return subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return "none"


# -- processes ------------------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    pid: int

    def url(self, scheme: str) -> str:
        return f"{scheme}://127.0.0.1:{self.port}/acp"


@contextmanager
def server(name: str, argv: list[str], env: dict[str, str], log: IO[bytes]) -> Iterator[Server]:
    """Start a server script; it prints ``{"port": N, "pid": P}`` and exits when its stdin closes."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, cwd=_REMOTE)
    assert proc.stdout is not None and proc.stdin is not None
    try:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{name} server exited ({proc.wait()}) before printing its port")
        info = json.loads(line)
        yield Server(name, proc, int(info["port"]), int(info.get("pid", proc.pid)))
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_json(argv: list[str], env: dict[str, str], what: str, timeout: float = 600) -> Any:
    proc = subprocess.run(argv, env=env, cwd=_REMOTE, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def serves_streamable_http(url: str) -> bool:
    """Whether the server at ``url`` answers a Streamable HTTP ``initialize`` (200) rather than 501."""
    request = urllib.request.Request(
        url, data=INITIALIZE, method="POST", headers={"Content-Type": "application/json", "Accept": "*/*"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            ok = answer.status == 200
            connection_id = answer.headers.get("Acp-Connection-Id")
    except (urllib.error.URLError, OSError):
        return False
    if ok and connection_id:  # end the connection just opened
        delete = urllib.request.Request(url, method="DELETE", headers={"Acp-Connection-Id": connection_id})
        try:
            urllib.request.urlopen(delete, timeout=10).close()
        except (urllib.error.URLError, OSError):
            pass
    return ok


# -- scenario 1 and 3: streaming --------------------------------------------------------------------


@dataclass
class Pairing:
    key: str
    label: str
    argv: list[str] | None  # None: not measured
    note: str = ""
    server_pid: int | None = None  # its server process, whose CPU time is read from /proc (None: stdio)
    streams: bool = True  # whether scenario 1 runs it (the round-trip floors do not stream)


def stream_pairings(
    py: str,
    ours: Server,
    bridge: Server,
    floor: Server,
    wsproto_floor: Server,
    ts: Server | None,
    ts_note: str,
    ours_http: bool,
) -> list[Pairing]:
    trio_client = [py, str(_REMOTE / "trio_client.py")]
    ts_client = ["node", str(_REMOTE / "ts_client.mjs")]

    def ours_to(url: str) -> list[str]:
        return [*trio_client, url]

    def ts_to(url: str) -> list[str]:
        return [*ts_client, url]

    http_note = "" if ours_http else NOT_IMPLEMENTED
    tp = ts.pid if ts else None
    pairings = [
        Pairing("ws-ours", "WS: connect_websocket → AcpApp", ours_to(ours.url("ws")), "", ours.pid),
        Pairing("ws-ts", "WS: createWebSocketStream → AcpServer", ts and ts_to(ts.url("ws")), ts_note, tp),
        Pairing("ws-ours-ts", "WS: connect_websocket → AcpServer", ts and ours_to(ts.url("ws")), ts_note, tp),
        Pairing("ws-ts-ours", "WS: createWebSocketStream → AcpApp", ts and ts_to(ours.url("ws")), ts_note, ours.pid),
        Pairing("http-ours-ts", "HTTP: connect_http → AcpServer", ts and ours_to(ts.url("http")), ts_note, tp),
        Pairing("http-ts", "HTTP: createHttpStream → AcpServer", ts and ts_to(ts.url("http")), ts_note, tp),
        Pairing(
            "http-ours",
            "HTTP: connect_http → AcpApp",
            ours_to(ours.url("http")) if ours_http else None,
            http_note,
            ours.pid,
        ),
        Pairing(
            "http-ts-ours",
            "HTTP: createHttpStream → AcpApp",
            ts_to(ours.url("http")) if ts and ours_http else None,
            ts_note or http_note,
            ours.pid,
        ),
        Pairing(
            "bridge",
            "bridge: connect_websocket → serve_bridge → stdio agent",
            ours_to(bridge.url("ws")),
            "",
            bridge.pid,
        ),
        Pairing(
            "bridge-http",
            "bridge: connect_http → serve_bridge → stdio agent",
            ours_to(bridge.url("http")),
            "",
            bridge.pid,
        ),
        Pairing("direct", "stdio: spawn_agent → agent", [py, str(_RUNTIME / "trio_client.py")]),
        Pairing(
            "ws-floor",
            "WS floor, no ACP: trio-websocket → bare ASGI app on hypercorn",
            [py, str(_REMOTE / "raw_ws_client.py"), floor.url("ws")],
            "",
            floor.pid,
        ),
        Pairing(
            "ws-wsproto-floor",
            "WS floor, no ACP: trio + wsproto alone, one task per side",
            [py, str(_REMOTE / "wsproto_floor.py"), wsproto_floor.url("ws")],
            "",
            wsproto_floor.pid,
        ),
        Pairing(
            "http-floor",
            "HTTP floor, no ACP: httpx2 → bare ASGI app on hypercorn",
            [py, str(_REMOTE / "raw_http_client.py"), floor.url("http")],
            "",
            floor.pid,
            streams=False,
        ),
    ]
    return pairings


def client_argv(argv: list[str], repeats: int, *commands: str) -> list[str]:
    """A bench client's command line: one warm-up and ``repeats`` timed prompts of each command."""
    if argv[0] == "node":
        return [*argv, "1", str(repeats), *commands]
    return [*argv, "--warmup", "1", "--repeats", str(repeats), *commands]


def process_cpu(pid: int) -> float:
    """Seconds of CPU used by process ``pid`` and its waited-for children (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_streams(
    pairings: list[Pairing], env: dict[str, str], rounds: int, repeats: int
) -> tuple[dict[str, list[float]], dict[str, dict[str, float]], dict[str, str]]:
    """Seconds per 20,000-update prompt, per pairing: ``rounds`` client processes each, order alternating;
    the CPU seconds per update of each side (``{"server": s, "client": s}``; the client's includes
    its children, so the directly spawned agent counts as the "client" side), over all prompts; and
    why a pairing failed (``{key: note}``; its note says so too, it is not run again, the others go on)."""
    samples: dict[str, list[float]] = {p.key: [] for p in pairings if p.argv and p.streams}
    cpu: dict[str, dict[str, float]] = {p.key: {"server": 0.0, "client": 0.0} for p in pairings if p.argv and p.streams}
    failed: dict[str, str] = {}
    order = [p for p in pairings if p.argv and p.streams]
    for i in range(rounds):
        for pairing in order if i % 2 == 0 else order[::-1]:
            assert pairing.argv is not None
            if pairing.key in failed:
                continue
            argv = client_argv(pairing.argv, repeats, STREAM)
            server_before = process_cpu(pairing.server_pid) if pairing.server_pid else 0.0
            client_before = children_cpu()
            try:
                samples[pairing.key].extend(run_json(argv, env, pairing.label, timeout=SCENARIO_TIMEOUT)[STREAM])
            except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as exc:
                failed[pairing.key] = pairing.note = failure_note(exc)
                print(f"  {pairing.label}, {STREAM}: {str(exc)[-1500:]}")
                continue
            cpu[pairing.key]["client"] += children_cpu() - client_before
            if pairing.server_pid:
                cpu[pairing.key]["server"] += process_cpu(pairing.server_pid) - server_before
    for key in failed:
        del samples[key], cpu[key]
    updates = rounds * (1 + repeats) * STREAM_N
    return samples, {k: {side: t / updates for side, t in v.items()} for k, v in cpu.items()}, failed


SCENARIO_RUNS: Final = {
    **{key: WS_COMMANDS for key in WS_PAIRS},
    "http-ours": HTTP_COMMANDS,
    "http-ts": HTTP_COMMANDS,
    "bridge": BRIDGE_COMMANDS,
    "direct": BRIDGE_COMMANDS,
    **{key: (READ_SEQ,) for key in ("ws-floor", "ws-wsproto-floor", "http-floor")},
}
"""Pairing key → the commands besides ``stream`` that :func:`run_scenarios` runs on it."""


def run_scenarios(
    pairings: list[Pairing], env: dict[str, str], rounds: int, repeats: int
) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, str]]]:
    """Seconds per prompt of each command of :data:`SCENARIO_RUNS` on its pairing, and why not where
    one failed (``{key: {command: note}}``).  ``rounds`` client processes per pairing and command, each
    with one warm-up and ``repeats`` timed prompts, the pairings' order alternating; the client checks
    that every prompt ends its turn having handled the updates or answered the requests its command
    asks (``common.expected``).  A failed run is noted and the others go on."""
    order = [p for p in pairings if p.key in SCENARIO_RUNS and p.argv]
    samples: dict[str, dict[str, list[float]]] = {p.key: {c: [] for c in SCENARIO_RUNS[p.key]} for p in order}
    failed: dict[str, dict[str, str]] = {p.key: {} for p in order}
    for i in range(rounds):
        for pairing in order if i % 2 == 0 else order[::-1]:
            assert pairing.argv is not None
            for command in SCENARIO_RUNS[pairing.key]:
                if command in failed[pairing.key]:
                    continue
                argv = client_argv(pairing.argv, repeats, command)
                try:
                    result = run_json(argv, env, f"{pairing.label}, {command}", timeout=SCENARIO_TIMEOUT)
                    samples[pairing.key][command].extend(result[command])
                except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as exc:
                    failed[pairing.key][command] = failure_note(exc)
                    print(f"  {pairing.label}, {command}: {str(exc)[-1500:]}")
    return samples, failed


def failure_note(exc: Exception) -> str:
    """One line saying why a client run failed: the last error line of its stderr, if any."""
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"failed: timed out after {exc.timeout:g} s"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return "failed: " + ((errors or lines or ["?"])[-1])[:160]


# -- scenario 2: many connections -------------------------------------------------------------------


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def settled_rss(pid: int, seconds: float = 3.0) -> int:
    """The RSS ``seconds`` after the call (sampled every 100 ms meanwhile; the last sample).

    A fixed wait, not "once it stops falling": ``serve()`` gives freed memory back to the OS
    after 1 s without a connection (``release_memory_when_idle``), so the RSS falls in one step.
    """
    deadline = time.monotonic() + seconds
    now = rss_kib(pid)
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = rss_kib(pid)
    return now


def run_many(py: str, env: dict[str, str], connections: int, log: IO[bytes]) -> dict[str, Any]:
    client = [py, str(_REMOTE / "many_client.py")]
    with server("acp-trio (many)", [py, str(_REMOTE / "trio_server.py")], env, log) as srv:
        cold = settled_rss(srv.pid)
        run_json([*client, srv.url("ws"), "--connections", "1", "--updates", str(MANY_N)], env, "warm-up connection")
        start = settled_rss(srv.pid)
        peak, stop = start, threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                try:
                    peak = max(peak, rss_kib(srv.pid))
                except (OSError, RuntimeError):
                    return
                stop.wait(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            argv = [*client, srv.url("ws"), "--connections", str(connections), "--updates", str(MANY_N)]
            result = run_json(argv, env, f"{connections} connections")
        finally:
            stop.set()
            sampler.join()
        peak = max(peak, rss_kib(srv.pid, "VmHWM"))
        after = settled_rss(srv.pid)
        # a second wave: an RSS that stays where the first left it is memory kept for reuse, one that grows is a leak
        again = run_json(argv, env, f"{connections} connections, second wave")
        if again["ok"] != connections:
            result["ok"] = min(result["ok"], again["ok"])
            result["errors"] = [*result["errors"], *again["errors"]][:5]
        after_second = settled_rss(srv.pid)
    result.update(
        rss_cold_kib=cold,
        rss_start_kib=start,
        rss_peak_kib=peak,
        rss_after_kib=after,
        rss_after_second_kib=after_second,
    )
    return dict(result)


# -- scenario 5: opening connections ---------------------------------------------------------------

CONNECT_N: Final = 2_000
CONNECT_N_QUICK: Final = 500
CONNECT_CONCURRENCY: Final = 16
CONNECT_WARMUP: Final = 50
CONNECT_SERVERS: Final = ("ours", "ts", "floor")
"""Our server, the TS SDK's, and the floor: a bare ASGI app on hypercorn (``remote/raw_ws_server.py``)
that answers ``initialize`` and ``session/new`` with no ACP runtime: what hypercorn and trio cost."""


def connect_once(
    argv: list[str], env: dict[str, str], srv: Server, url: str, n: int, concurrency: int
) -> dict[str, Any]:
    """One ``connect_client.py`` run of ``n`` connections against ``srv``: its report, plus the server's
    RSS before and once they are all open and idle (KiB), and its CPU seconds while they were opened."""
    client = [*argv, url, "--connections", str(n), "--concurrency", str(concurrency)]
    rss_before, cpu_before = settled_rss(srv.pid, 2.0), process_cpu(srv.pid)
    proc = subprocess.Popen(client, env=env, cwd=_REMOTE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = proc.stdout.readline()
        cpu_after = process_cpu(srv.pid)
        if not line:
            raise RuntimeError(f"connect_client.py exited ({proc.wait()}) before reporting")
        result: dict[str, Any] = json.loads(line)
        rss_after = settled_rss(srv.pid, 2.0)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    result.update(rss_before_kib=rss_before, rss_after_kib=rss_after, server_cpu_s=cpu_after - cpu_before)
    return result


def run_connect(
    py: str, env: dict[str, str], log: IO[bytes], ts_ready: bool, n: int, rounds: int, concurrency: int
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """``{transport: {server: [one result per round]}}``: ``rounds`` fresh server processes per server and
    transport (``ws``, ``http``), the servers' order alternating, each warmed up with
    :data:`CONNECT_WARMUP` connections (opened, then closed) before ``n`` are opened and measured."""
    argv = [py, str(_REMOTE / "connect_client.py")]
    servers = {
        "ours": [py, str(_REMOTE / "trio_server.py")],
        "ts": ["node", str(_REMOTE / "ts_server.mjs")],
        "floor": [py, str(_REMOTE / "raw_ws_server.py")],
    }
    results: dict[str, dict[str, list[dict[str, Any]]]] = {t: {k: [] for k in CONNECT_SERVERS} for t in ("ws", "http")}
    for i in range(rounds):
        for transport in ("ws", "http"):
            for key in CONNECT_SERVERS if i % 2 == 0 else CONNECT_SERVERS[::-1]:
                if key == "ts" and not ts_ready:
                    continue
                with server(f"{key} (connect)", servers[key], env, log) as srv:
                    url = srv.url(transport)
                    connect_once(argv, env, srv, url, CONNECT_WARMUP, concurrency)
                    results[transport][key].append(connect_once(argv, env, srv, url, n, concurrency))
    return results


def connect_summary(results: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per transport and server: medians over the rounds of connections/s, KiB per idle connection and
    server CPU ms per connection (``{}`` where not measured; ``"errors"`` where a round failed some)."""
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for transport, by_server in results.items():
        summary[transport] = {}
        for key, runs in by_server.items():
            if not runs:
                summary[transport][key] = {}
                continue
            n = runs[0]["connections"]
            summary[transport][key] = {
                "connections": n,
                "ok": min(r["ok"] for r in runs),
                "errors": [e for r in runs for e in r["errors"]][:5],
                "per_second": statistics.median(r["connections"] / r["seconds"] for r in runs),
                "kib_per_connection": statistics.median(
                    (r["rss_after_kib"] - r["rss_before_kib"]) / r["connections"] for r in runs
                ),
                "cpu_ms_per_connection": statistics.median(r["server_cpu_s"] * 1e3 / r["connections"] for r in runs),
                "rounds": runs,
            }
    return summary


def print_connect(summary: dict[str, dict[str, dict[str, Any]]], concurrency: int) -> None:
    some = next((cell for cells in summary.values() for cell in cells.values() if cell), None)
    if some is None:
        return
    print(
        f"\nOpening {some['connections']:,} ACP connections (initialize + session/new each, {concurrency} being opened"
        " at a time) from one client process (remote/connect_client.py), kept open idle; medians of"
        f" {len(some['rounds'])} fresh server processes each:"
    )
    print(f"  {'':<34}{'connections/s':>14}{'KiB/idle conn.':>16}{'server CPU ms/conn.':>21}  RSS MiB before → after")
    labels = {"ours": "AcpApp (trio_server.py)", "ts": "AcpServer (ts_server.mjs)", "floor": "floor: bare ASGI, no ACP"}
    for transport, cells in summary.items():
        for key, cell in cells.items():
            label = f"{'WS' if transport == 'ws' else 'HTTP'}: {labels[key]}"
            if not cell:
                print(f"  {label:<34}not measured")
                continue
            rss = ", ".join(
                f"{r['rss_before_kib'] / 1024:.0f} → {r['rss_after_kib'] / 1024:.0f}" for r in cell["rounds"]
            )
            print(
                f"  {label:<34}{cell['per_second']:>14,.0f}{cell['kib_per_connection']:>16.1f}"
                f"{cell['cpu_ms_per_connection']:>21.2f}  {rss}"
            )
            for error in cell["errors"]:
                print(f"    error: {error}")


# -- profile ----------------------------------------------------------------------------------------

COMPONENTS: Final = (
    ("acp_trio/transports/asgi.py", "our ASGI app (asgi.py: pump, next_text, send_text)"),
    ("acp_trio/transports/websocket.py", "our adapters (websocket.py: Message*Stream, client hooks)"),
    ("acp_trio/_connection.py", "the connection (_connection.py)"),
    ("acp_trio/_roles.py", "roles, typed dispatch (_roles.py)"),
    ("acp_trio/_core", "codec and JSON-RPC (_core)"),
    ("acp_trio/", "acp_trio, other"),
    ("acp_schema/", "acp_schema (generated)"),
    ("benchmarks/", "the bench agent/client"),
    ("hypercorn/", "hypercorn"),
    ("trio_websocket/", "trio-websocket"),
    ("wsproto/", "wsproto"),
    ("h11/", "h11"),
    ("cattrs/", "cattrs"),
    ("trio/", "trio (scheduler, sockets, channels)"),
    ("~", "builtins and C calls (orjson, socket, ...)"),
)


def component(filename: str) -> str:
    for needle, label in COMPONENTS:
        if needle in filename:
            return label
    return "other Python (stdlib, ...)"


def profile_breakdown(path: Path) -> list[tuple[str, float, float]]:
    """(component, seconds of own time, share) for one process's cProfile file, largest first.

    Time waiting in epoll (trio's idle) is its own component; C calls and the standard library
    (``contextlib`` under trio's cancel scopes, ...) are charged to their caller's component when
    all their callers are in one."""
    stats: Any = pstats.Stats(str(path)).stats
    totals: dict[str, float] = {}
    for (filename, _line, name), (_cc, _nc, tottime, _ct, callers) in stats.items():
        label = component(filename)
        if filename == "~" and "poll" in name:
            label = "idle: waiting for I/O (epoll)"
        elif filename == "~" or label.startswith("other Python"):
            owners = {component(c[0]) for c in callers} if callers else set()
            what = "C calls" if filename == "~" else "stdlib"
            label = f"{what} from {next(iter(owners))}" if len(owners) == 1 else f"{what}, shared"
        totals[label] = totals.get(label, 0.0) + tottime
    whole = sum(totals.values()) or 1.0
    return sorted(((k, v, v / whole) for k, v in totals.items()), key=lambda x: -x[1])


ENTRY_POINTS: Final = {
    "server": (
        ("benchmarks/runtime/trio_agent.py", "_stream", "the agent's loop: build, encode, queue each update"),
        ("acp_trio/_connection.py", "_writer", "the connection's writer, incl. MessageSendStream and send_text"),
        ("acp_trio/transports/asgi.py", "send_texts", "our eager sends, incl. hypercorn's send path"),
        ("acp_trio/transports/asgi.py", "pump", "our pump (output the socket could not take at once)"),
        ("acp_trio/transports/_hypercorn.py", "release", "the eager socket send, incl. the send() syscall"),
        ("hypercorn/protocol/ws_stream.py", "app_send", "hypercorn's send path: wsproto frame, lock, trio socket"),
        ("trio/_highlevel_socket.py", "send_all", "trio's send_all (the TCP writer), incl. send()"),
    ),
    "client": (
        ("trio_websocket/_impl.py", "_reader_task", "trio-websocket's reader: recv, wsproto parse, hand-off"),
        ("acp_trio/_connection.py", "_reader", "the connection's reader, incl. MessageReceiveStream"),
        ("acp_trio/transports/websocket.py", "receive_some", "MessageReceiveStream.receive_some, incl. get_message"),
        ("acp_trio/_connection.py", "_on_notification", "decoding and dispatching each update"),
    ),
}


def inclusive_times(path: Path, side: str) -> list[tuple[str, float, float]]:
    """(what, seconds including callees, share of the process's busy time) for the ``ENTRY_POINTS``."""
    stats: Any = pstats.Stats(str(path)).stats
    idle = sum(v[2] for (f, _l, n), v in stats.items() if f == "~" and "poll" in n)
    busy = (sum(v[2] for v in stats.values()) - idle) or 1.0
    rows = []
    for needle, function, label in ENTRY_POINTS[side]:
        seconds = sum(v[3] for (f, _l, n), v in stats.items() if needle in f and n == function)
        rows.append((label, seconds, seconds / busy))
    return rows


def run_profile(py: str, env: dict[str, str], out: Path, log: IO[bytes]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    server_stats, client_stats = out / "ws_server.prof", out / "ws_client.prof"
    argv = [py, str(_REMOTE / "trio_server.py"), "--profile", str(server_stats)]
    with server("acp-trio (profiled)", argv, env, log) as srv:
        client = [py, str(_REMOTE / "trio_client.py"), srv.url("ws"), "--profile", str(client_stats)]
        times = run_json([*client, "--warmup", "0", "--repeats", "3", STREAM], env, "profiled client")[STREAM]
    print(f"\nProfile (cProfile, own time per component) of 3 WebSocket turns of {STREAM_N:,} updates")
    print(f"  under the profiler: {', '.join(f'{STREAM_N / t:,.0f}' for t in times)} msg/s; stats in {out}")
    for title, path in (
        ("server process (AcpApp on hypercorn + the bench agent)", server_stats),
        ("client process (connect_websocket)", client_stats),
    ):
        print(f"  {title}:")
        for label, seconds, share in profile_breakdown(path)[:14]:
            print(f"    {share * 100:5.1f}%  {seconds:6.2f} s  {label}")
        print("    including what they call, share of the busy (not idle) time:")
        for label, seconds, share in inclusive_times(path, "server" if path == server_stats else "client"):
            print(f"    {share * 100:5.1f}%  {seconds:6.2f} s  {label}")


# -- report ---------------------------------------------------------------------------------------


@dataclass
class Row:
    measure: str
    ours: str
    theirs: str
    ratio: float | None
    bar: str
    ok: bool | None  # None: no bar (shown for information) or not measured
    note: str = ""


def _rate(xs: list[float] | None) -> float | None:
    return STREAM_N / statistics.median(xs) if xs else None


def _cell(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    return (f"{v:,.0f}" if v >= 100 else f"{v:.1f}") + unit


def build_rows(
    pairings: list[Pairing],
    samples: dict[str, list[float]],
    cpu: dict[str, dict[str, float]],
    many: dict[str, Any] | None,
    scenarios: dict[str, dict[str, list[float]]] | None = None,
    failed: dict[str, dict[str, str]] | None = None,
    connect: dict[str, dict[str, dict[str, Any]]] | None = None,
) -> list[Row]:
    """The bars and the information rows of every scenario that ran (``samples`` empty: scenario 1
    and the bridge's stream did not run; ``scenarios``, ``many``, ``connect``: ``None`` when not run)."""
    by_key = {p.key: p for p in pairings}

    def versus(measure: str, ours: str, theirs: str, bar: float | None, per_turn: bool = False) -> Row:
        a, b = samples.get(ours), samples.get(theirs)
        if not a or not b:
            note = by_key[ours].note if not a else by_key[theirs].note
            return Row(measure, "-", "-", None, f"≥ {bar:g}" if bar else "", None, note or "not measured")
        if per_turn:
            ma, mb = statistics.median(a) * 1e3, statistics.median(b) * 1e3
            return Row(measure, _cell(ma), _cell(mb), ma / mb, "", None)
        ra, rb = _rate(a), _rate(b)
        assert ra is not None and rb is not None
        return Row(
            measure, _cell(ra), _cell(rb), ra / rb, f"≥ {bar:g}" if bar else "", None if bar is None else ra / rb >= bar
        )

    def cpu_row(measure: str, ours: str, theirs: str, side: str) -> Row:
        if ours not in cpu or theirs not in cpu:
            return Row(measure, "-", "-", None, "", None, by_key[ours if ours not in cpu else theirs].note)
        a, b = cpu[ours][side] * 1e6, cpu[theirs][side] * 1e6
        return Row(measure, _cell(a), _cell(b), a / b if b else None, "", None)

    def round_trips(measure: str, command: str, ours: str, theirs: str, bar: float | None) -> Row:
        """Round trips (or updates) per second of ``command``: pairing ``ours`` against ``theirs``."""
        assert scenarios is not None
        count, _unit = scenario_unit(command)
        rates = []
        for key in (ours, theirs):
            xs = scenarios.get(key, {}).get(command)
            if not xs:
                note = (failed or {}).get(key, {}).get(command) or by_key[key].note or "not measured"
                return Row(measure, "-", "-", None, f"≥ {bar:g}" if bar else "", None, note)
            rates.append(count / statistics.median(xs))
        ratio = rates[0] / rates[1]
        verdict = None if bar is None else ratio >= bar
        return Row(measure, _cell(rates[0]), _cell(rates[1]), ratio, f"≥ {bar:g}" if bar else "", verdict)

    rows: list[Row] = []
    if samples:
        rows += [
            versus("WS stream 20k, msg/s: our pair | TS pair", "ws-ours", "ws-ts", 1),
            versus("WS stream 20k, ms/turn: our pair | TS pair", "ws-ours", "ws-ts", None, per_turn=True),
            cpu_row("WS server CPU µs/update: AcpApp | AcpServer", "ws-ours", "ws-ts", "server"),
            cpu_row("WS client CPU µs/update: connect_websocket | TS client", "ws-ours", "ws-ts", "client"),
            versus("WS msg/s: our pair | floor (hypercorn, trio-websocket)", "ws-ours", "ws-floor", None),
            cpu_row("WS server CPU µs/update: AcpApp | floor", "ws-ours", "ws-floor", "server"),
            versus("WS msg/s: our client | TS client → TS server", "ws-ours-ts", "ws-ts", None),
            versus("WS msg/s: TS client → our server | TS pair", "ws-ts-ours", "ws-ts", None),
            versus("HTTP stream 20k, msg/s: our client | TS client → TS server", "http-ours-ts", "http-ts", 1),
            versus("HTTP ms/turn: our client | TS client → TS server", "http-ours-ts", "http-ts", None, per_turn=True),
            versus("HTTP stream 20k, msg/s: our pair | TS pair", "http-ours", "http-ts", 1),
            versus("HTTP msg/s: TS client → our server | TS pair", "http-ts-ours", "http-ts", None),
            versus("bridge, msg/s: WS → bridge → stdio | stdio direct", "bridge", "direct", 0.5),
            versus("bridge, msg/s: HTTP → bridge → stdio | stdio direct", "bridge-http", "direct", 0.5),
            versus("bridge, msg/s: WS → bridge → stdio | our WS pair", "bridge", "ws-ours", None),
            versus("WS msg/s floor: trio + wsproto alone | stdio direct", "ws-wsproto-floor", "direct", None),
        ]
        # the bridge's bar against what WebSocket framing alone allows (no ACP, no bridge hop)
        ws_bridge, wsproto_floor = rows[-4], rows[-1]
        if ws_bridge.ok is False and wsproto_floor.ratio is not None:
            ws_bridge.note = f"floor {wsproto_floor.ratio:.2f}×"
    if scenarios is not None:
        floors = [
            round_trips(f"WS read 2000 1, floor: {what} | TS pair", READ_SEQ, key, "ws-ts", None)
            for key, what in (("ws-wsproto-floor", "trio + wsproto alone"), ("ws-floor", "hypercorn, trio-websocket"))
        ]
        floors.append(
            round_trips("HTTP read 2000 1, floor: hypercorn, httpx2 | TS pair", READ_SEQ, "http-floor", "http-ts", None)
        )
        rows += [
            round_trips("WS read 2000 1, round trips/s: our pair | TS pair", READ_SEQ, "ws-ours", "ws-ts", 1),
            round_trips("WS permission 2000, round trips/s: our pair | TS pair", PERMISSION_SEQ, "ws-ours", "ws-ts", 1),
            round_trips("WS read 2000 64 (in flight): our pair | TS pair", READ_PAR, "ws-ours", "ws-ts", 1),
            round_trips("HTTP read 2000 1, round trips/s: our pair | TS pair", READ_SEQ, "http-ours", "http-ts", 1),
            round_trips(
                "HTTP permission 2000, round trips/s: our pair | TS pair", PERMISSION_SEQ, "http-ours", "http-ts", 1
            ),
            round_trips("HTTP read 2000 64 (in flight): our pair | TS pair", READ_PAR, "http-ours", "http-ts", None),
            round_trips("bridge read 2000 1: WS → bridge → stdio | stdio direct", READ_SEQ, "bridge", "direct", None),
            round_trips("bridge read 2000 1: WS → bridge → stdio | our WS pair", READ_SEQ, "bridge", "ws-ours", None),
            *floors,
        ]
        # a bar the libraries' own floor (no ACP at all) misses is out of reach on them: say so next to it
        ws_floor, http_floor = floors[0].ratio, floors[2].ratio
        for row in rows:
            floor = (
                ws_floor if row.measure.startswith("WS ") else http_floor if row.measure.startswith("HTTP ") else None
            )
            if row.ok is False and floor is not None and floor < 1 and "round trips/s" in row.measure:
                row.note = f"floor {floor:.2f}×"
    if connect is not None:
        for transport, name in (("ws", "WS"), ("http", "HTTP")):
            ours, theirs = connect[transport]["ours"], connect[transport]["ts"]
            what = f"{name} {ours['connections']:,} connections" if ours else f"{name} connections"
            if not ours or not theirs:
                note = "not measured" if not ours else "not measured: no TypeScript server"
                rows.append(Row(f"{what}, opened/s: AcpApp | AcpServer", "-", "-", None, "≥ 1", None, note))
                rows.append(
                    Row(f"{name} KiB per idle connection (RSS): AcpApp | AcpServer", "-", "-", None, "≤ 1", None, note)
                )
                continue
            complete = ours["ok"] == ours["connections"] and theirs["ok"] == theirs["connections"]
            rate = ours["per_second"] / theirs["per_second"]
            opened = Row(
                f"{what}, opened/s: AcpApp | AcpServer",
                _cell(ours["per_second"]),
                _cell(theirs["per_second"]),
                rate,
                "≥ 1",
                complete and rate >= 1,
                "" if complete else "failed: some connections were not opened",
            )
            kib, their_kib = ours["kib_per_connection"], theirs["kib_per_connection"]
            held = Row(
                f"{name} KiB per idle connection (RSS): AcpApp | AcpServer",
                _cell(kib),
                _cell(their_kib),
                kib / their_kib if their_kib > 0 else None,
                "≤ 1",
                kib <= their_kib,
            )
            a, b = ours["cpu_ms_per_connection"], theirs["cpu_ms_per_connection"]
            rows += [
                opened,
                held,
                Row(
                    f"{name} server CPU ms per connection: AcpApp | AcpServer", f"{a:.2f}", f"{b:.2f}", a / b, "", None
                ),
            ]
            floor = connect[transport].get("floor")
            if floor:  # hypercorn and trio with no ACP runtime: what our server cannot go below
                floor_rate = floor["per_second"] / theirs["per_second"]
                floor_kib = floor["kib_per_connection"]
                floor_ratio = floor_kib / their_kib if their_kib > 0 else None
                rows += [
                    Row(
                        f"{name} opened/s: floor (bare ASGI on hypercorn) | AcpServer",
                        _cell(floor["per_second"]),
                        _cell(theirs["per_second"]),
                        floor_rate,
                        "",
                        None,
                    ),
                    Row(
                        f"{name} KiB per idle connection: floor | AcpServer",
                        _cell(floor_kib),
                        _cell(their_kib),
                        floor_ratio,
                        "",
                        None,
                    ),
                ]
                if opened.ok is False and complete and floor_rate < 1:
                    opened.note = f"floor {floor_rate:.2f}×"
                if held.ok is False and floor_ratio is not None and floor_ratio > 1:
                    held.note = f"floor {floor_ratio:.2f}×"
    if many is not None:
        n, ok = many["connections"], many["ok"]
        rows.append(Row(f"{n} WS connections x {MANY_N:,}: in order, no error", f"{ok}/{n}", "", None, "all", ok == n))
        start, peak, after = many["rss_start_kib"] / 1024, many["rss_peak_kib"] / 1024, many["rss_after_kib"] / 1024
        rows.append(Row("server RSS MiB: peak | start", _cell(peak), _cell(start), peak / start, "", None))
        rows.append(
            Row(
                "server RSS MiB: after close | start",
                _cell(after),
                _cell(start),
                after / start,
                "≤ 1.1",
                after / start <= 1.1,
            )
        )
    return rows


def print_details(pairings: list[Pairing], samples: dict[str, list[float]], cpu: dict[str, dict[str, float]]) -> None:
    print(f"\nPer pairing, one prompt of {STREAM_N:,} updates: median / best ms (n timed prompts), median msg/s;")
    print("CPU µs per update (all prompts, warm-ups included) of the server process and of the client process")
    print(f"  {'pairing':<58} {'median / best ms (n)':>24} {'msg/s':>9} {'server':>7} {'client':>7}")
    for p in pairings:
        xs = samples.get(p.key)
        if xs:
            med = statistics.median(xs)
            server_us = f"{cpu[p.key]['server'] * 1e6:.1f}" if p.server_pid else "-"
            print(
                f"  {p.label:<58} {med * 1e3:>8.1f} / {min(xs) * 1e3:<8.1f}({len(xs):>2}) {STREAM_N / med:>9,.0f}"
                f" {server_us:>7} {cpu[p.key]['client'] * 1e6:>7.1f}"
            )
        else:
            print(f"  {p.label:<58} {p.note}")


WS_COLUMNS: Final = (
    ("ws-ours", "our pair"),
    ("ws-ts", "TS pair"),
    ("ws-ours-ts", "ours → TS server"),
    ("ws-ts-ours", "TS → our server"),
)
"""The side-by-side table's columns: pairing key, heading (client → server for the crossed pairs)."""


def scenario_unit(command: str) -> tuple[int, str]:
    """What one prompt of ``command`` carries: (updates or round trips, their unit)."""
    kind, n, _ = parse_command(command)
    return expected(kind, n), "updates/s" if kind in ("stream", "mixed") else "round trips/s"


HTTP_COLUMNS: Final = (("http-ours", "our pair"), ("http-ts", "TS pair"))
BRIDGE_COLUMNS: Final = (("direct", "stdio direct"), ("ws-ours", "our WS pair"), ("bridge", "WS → bridge → stdio"))


def scenario_table(
    pairings: list[Pairing],
    stream_samples: dict[str, list[float]],
    samples: dict[str, dict[str, list[float]]],
    failed: dict[str, dict[str, str]],
    columns: Sequence[tuple[str, str]] = WS_COLUMNS,
    commands: Sequence[str] = COMMANDS,
    base: str = "ws-ts",
) -> dict[str, dict[str, Any]]:
    """``{command: {key: {"seconds": [...], "median_s", "per_second", "vs_base"} or {"note": why}}}``
    for each of ``commands`` (``stream`` from :func:`run_streams`) and pairing of ``columns``;
    ``vs_base``: the rate over pairing ``base``'s."""
    by_key = {p.key: p for p in pairings}
    table: dict[str, dict[str, Any]] = {}
    for command in commands:
        count, _unit = scenario_unit(command)
        cells: dict[str, Any] = {}
        for key, _heading in columns:
            xs = stream_samples.get(key) if command == STREAM else samples.get(key, {}).get(command)
            if xs:
                median = statistics.median(xs)
                cells[key] = {"seconds": xs, "median_s": median, "per_second": count / median}
            else:
                note = failed.get(key, {}).get(command) or by_key[key].note or "not measured"
                cells[key] = {"note": note}
        base_rate = cells[base].get("per_second")
        for cell in cells.values():
            if "per_second" in cell:
                cell["vs_base"] = cell["per_second"] / base_rate if base_rate else None
        table[command] = cells
    return table


def print_scenarios(table: dict[str, dict[str, Any]], columns: Sequence[tuple[str, str]], title: str) -> None:
    print(f"\n{title}")
    print(f"  {'scenario':<17} {'unit':<14}" + "".join(f"{h:>24}" for _k, h in columns))
    for command, cells in table.items():
        _count, unit = scenario_unit(command)
        rates, times = [], []
        for key, _heading in columns:
            cell = cells[key]
            if "per_second" in cell:
                x = cell.get("vs_base")
                rates.append(f"{cell['per_second']:,.0f} {'-' if x is None else f'{x:.2f}'}×")
                times.append(f"{cell['median_s'] * 1e3:,.1f} ms ({len(cell['seconds'])})")
            else:
                rates.append(cell["note"] if len(cell["note"]) <= 22 else "(see below)")
                times.append("")
        print(f"  {command:<17} {unit:<14}" + "".join(f"{c:>24}" for c in rates))
        print((f"  {'':<17} {'ms/prompt':<14}" + "".join(f"{c:>24}" for c in times)).rstrip())
    notes: dict[tuple[str, str], list[str]] = {}  # (column, note) -> the scenarios it is about
    for command, cells in table.items():
        for key, heading in columns:
            note = cells[key].get("note", "")
            if len(note) > 22:
                notes.setdefault((heading, note), []).append(command)
    for (heading, note), commands in notes.items():
        which = "every scenario" if len(commands) == len(table) else ", ".join(commands)
        print(f"  {heading} ({which}): {note}")


def print_ws_scenarios(table: dict[str, dict[str, Any]]) -> None:
    print_scenarios(
        table,
        WS_COLUMNS,
        "WebSocket, the runtime benchmark's scenarios side by side (benchmarks/runtime/common.py; bars below):"
        "\nper prompt, median rate (updates/s or round trips/s) and × the TS pair's rate (> 1: faster);"
        "\nthen median ms per prompt (n timed prompts).  Crossed pairs: client → server",
    )


def print_bridge(table: dict[str, dict[str, Any]]) -> None:
    """The bridge's table and whose each part of its time is: the direct stdio pair's (agent and
    stdio), the WebSocket transport's (our WS pair less the direct pair), the bridge's own hop (the
    bridge less our WS pair: a second process, its stdio pipe and its forwarding)."""
    print_scenarios(
        table,
        BRIDGE_COLUMNS,
        "The bridge (python -m acp_trio.bridge: WS → serve_bridge → the agent as a stdio process) against the"
        "\ndirect stdio pair (spawn_agent) and our own WebSocket pair (AcpApp serving the agent in-process);"
        "\nrates × the direct pair's",
    )
    print("  whose time, µs per update or round trip (medians): direct pair | + WS transport | + bridge hop")
    for command, cells in table.items():
        count, _unit = scenario_unit(command)
        if not all("median_s" in cells[k] for k, _ in BRIDGE_COLUMNS):
            continue
        direct, ws, bridge = (cells[k]["median_s"] * 1e6 / count for k, _ in BRIDGE_COLUMNS)
        print(f"  {command:<17} {direct:>9.1f} | {ws - direct:>+9.1f} | {bridge - ws:>+9.1f}  (bridge: {bridge:.1f})")


def print_many(many: dict[str, Any]) -> None:
    n, seconds = many["connections"], many["seconds"]
    rate = n * MANY_N / seconds if seconds else 0.0
    print(
        f"\n{n} WebSocket connections x {MANY_N:,} updates, one acp-trio server: "
        f"{many['ok']}/{n} in order and without error, "
        f"{seconds:.2f} s from the first prompt to the last response ({rate:,.0f} updates/s in all)"
    )
    for error in many["errors"]:
        print(f"  error: {error}")
    print(
        "  server RSS: "
        + ", ".join(
            f"{label} {many[key] / 1024:.1f} MiB"
            for label, key in (
                ("after start-up", "rss_cold_kib"),
                ("start (after a warm-up connection)", "rss_start_kib"),
                ("peak", "rss_peak_kib"),
                ("after all closed", "rss_after_kib"),
                ("after a second wave", "rss_after_second_kib"),
            )
        )
    )


def print_table(rows: list[Row]) -> None:
    print("\nRemote transport bars (medians; 'ours | theirs' names the two columns)")
    print(f"  {'measure':<62} {'ours':>9} {'theirs':>9} {'ratio':>6} {'bar':>6}  verdict")
    for r in rows:
        verdict = "PASS" if r.ok else "FAIL" if r.ok is not None else (r.note or "(info)")
        if r.ok is False and r.note:
            verdict = f"FAIL ({r.note})"
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        print(f"  {r.measure:<62} {r.ours:>9} {r.theirs:>9} {ratio:>6} {r.bar:>6}  {verdict}")


SCENARIOS: Final = ("stream", "scenarios", "many", "connect", "tls")
"""What ``--only`` chooses from: scenarios 1 and 3's streams, the round-trip tables (4: WebSocket,
Streamable HTTP, the bridge), 2 (many connections streaming), 5 (opening connections), 6 (one
client's connection cost with and without TLS)."""


def run_tls(py: str, env: dict[str, str], connects: int) -> dict[str, dict[str, Any]]:
    """Scenario 6: ``remote/tls_connect.py --json``'s report (``{case: {cpu_ms, wall_ms, per_second, connects}}``)."""
    argv = [py, str(_REMOTE / "tls_connect.py"), "--json", "--connects", str(connects)]
    result: dict[str, dict[str, Any]] = run_json(argv, env, "tls_connect.py", timeout=300)
    return result


def print_tls(tls: dict[str, dict[str, Any]]) -> None:
    some = next(iter(tls.values()), None)
    if some is None:
        return
    print(
        f"\nOne client opening connections one after another ({some['connects']} per case, initialize each;"
        " remote/tls_connect.py), medians per connection:"
    )
    print(f"  {'':<38}{'client CPU ms':>14}{'wall ms':>10}{'connections/s':>15}")
    for label, cell in tls.items():
        print(f"  {label:<38}{cell['cpu_ms']:>14.1f}{cell['wall_ms']:>10.1f}{cell['per_second']:>15.1f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--rounds", type=int, help="client processes per pairing (default 3, quick 1)")
    parser.add_argument("--repeats", type=int, help="timed prompts per client process (default 3, quick 2)")
    parser.add_argument("--connections", type=int, default=100, help="concurrent WebSocket connections (default 100)")
    parser.add_argument(
        "--connect",
        type=int,
        metavar="N",
        help=f"connections the connect scenario opens (default {CONNECT_N:,}, quick {CONNECT_N_QUICK})",
    )
    parser.add_argument(
        "--connect-concurrency",
        type=int,
        default=CONNECT_CONCURRENCY,
        metavar="K",
        help=f"connections being opened at a time (default {CONNECT_CONCURRENCY})",
    )
    parser.add_argument(
        "--only",
        metavar="NAMES",
        help=f"run only these scenarios, comma-separated: {', '.join(SCENARIOS)} (default: all)",
    )
    parser.add_argument(
        "--json", metavar="PATH", type=Path, help="also write the results as JSON (PATH with '.remote')"
    )
    parser.add_argument("--strict", action="store_true", help="exit 3 when a bar is missed")
    parser.add_argument("--profile", metavar="DIR", type=Path, help="also profile our WebSocket pair (cProfile)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    repeats = args.repeats or (2 if args.quick else 3)
    only = set(SCENARIOS) if args.only is None else {name.strip() for name in args.only.split(",") if name.strip()}
    if only - set(SCENARIOS):
        parser.error(
            f"--only: unknown scenario {', '.join(sorted(only - set(SCENARIOS)))} (one of {', '.join(SCENARIOS)})"
        )
    connect_n = args.connect or (CONNECT_N_QUICK if args.quick else CONNECT_N)

    try:
        import hypercorn  # noqa: F401
        import trio_websocket  # noqa: F401
    except ImportError as exc:
        print(f"remote benchmark: needs the 'remote' extra (pip install -e '.[remote]'): {exc}")
        return 1
    npm_dir, ts_note = ts_sdk_dir()
    print(f"\nRemote transport benchmark: Python {platform.python_version()} ({sys.executable}); node {node_version()}")
    print(
        f"acp-trio {dist_version('acp-trio')} [{Path(acp_trio.__file__ or '').parent}, {runtime_build()}], "
        f"trio {dist_version('trio')}, hypercorn {dist_version('hypercorn')}, trio-websocket "
        f"{dist_version('trio-websocket')}, wsproto {dist_version('wsproto')}, httpx2 {dist_version('httpx2')}; "
        "TypeScript SDK: " + (f"{TS_SDK} [{npm_dir}]" if npm_dir else ts_note)
    )
    print(
        f"{rounds} client processes per pairing x (1 warm-up + {repeats} timed prompts); loopback, one process per side"
        + ("" if only == set(SCENARIOS) else f"; only: {', '.join(s for s in SCENARIOS if s in only)}")
    )
    started, load_before = time.perf_counter(), cpu_times()
    py = sys.executable
    pairings: list[Pairing] = []
    samples: dict[str, list[float]] = {}
    cpu: dict[str, dict[str, float]] = {}
    scenario_samples: dict[str, dict[str, list[float]]] | None = None
    failed: dict[str, dict[str, str]] = {}
    stream_failed: dict[str, str] = {}
    many: dict[str, Any] | None = None
    connect: dict[str, dict[str, dict[str, Any]]] | None = None
    tls: dict[str, dict[str, Any]] | None = None
    with tempfile.TemporaryDirectory(prefix="acp-bench-remote-") as tmp:
        env = subprocess_env(str(Path(tmp) / "pycache"), acp_schema, acp_trio)
        if npm_dir is not None:
            env["ACP_INTEROP_NPM_DIR"] = str(npm_dir)
        log_path = Path(tmp) / "servers.log"
        try:
            with open(log_path, "wb") as log:
                if only & {"stream", "scenarios"}:
                    with (
                        server("acp-trio", [py, str(_REMOTE / "trio_server.py")], env, log) as ours,
                        server("bridge", [py, str(_REMOTE / "trio_server.py"), "--bridge"], env, log) as bridge,
                        server("floor", [py, str(_REMOTE / "raw_ws_server.py")], env, log) as floor,
                        server("wsproto floor", [py, str(_REMOTE / "wsproto_floor.py"), "--serve"], env, log) as wsf,
                    ):
                        ours_http = serves_streamable_http(ours.url("http"))
                        ts_argv = ["node", str(_REMOTE / "ts_server.mjs")]
                        with server("TypeScript", ts_argv, env, log) if npm_dir else _none() as ts:
                            pairings = stream_pairings(py, ours, bridge, floor, wsf, ts, ts_note, ours_http)
                            if "stream" in only:
                                samples, cpu, stream_failed = run_streams(pairings, env, rounds, repeats)
                            if "scenarios" in only:
                                scenario_samples, failed = run_scenarios(pairings, env, rounds, repeats)
                if "many" in only:
                    many = run_many(py, env, args.connections, log)
                if "connect" in only:
                    results = run_connect(
                        py, env, log, npm_dir is not None, connect_n, rounds, args.connect_concurrency
                    )
                    connect = connect_summary(results)
                if "tls" in only:
                    tls = run_tls(py, env, 20 if args.quick else 40)
                if args.profile:
                    run_profile(py, env, args.profile, log)
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, OSError) as exc:
            print(f"remote benchmark failed: {exc}")
            print(log_path.read_text(errors="replace")[-3000:] if log_path.exists() else "")
            return 1
    rows = build_rows(pairings, samples, cpu, many, scenario_samples, failed, connect)
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    if samples:
        print_details(pairings, samples, cpu)
    if samples or scenario_samples is not None:
        s_samples = scenario_samples or {}
        stream_only = (STREAM,) if scenario_samples is None else ()
        tables["ws"] = scenario_table(
            pairings, samples, s_samples, failed, WS_COLUMNS, stream_only or COMMANDS, "ws-ts"
        )
        print_ws_scenarios(tables["ws"])
        http_commands = stream_only or (STREAM, *HTTP_COMMANDS)
        tables["http"] = scenario_table(pairings, samples, s_samples, failed, HTTP_COLUMNS, http_commands, "http-ts")
        print_scenarios(
            tables["http"],
            HTTP_COLUMNS,
            "Streamable HTTP (connect_http → AcpApp | createHttpStream → AcpServer), the same scenarios;"
            " × the TS pair's",
        )
        bridge_commands = stream_only or (STREAM, *BRIDGE_COMMANDS)
        tables["bridge"] = scenario_table(
            pairings, samples, s_samples, failed, BRIDGE_COLUMNS, bridge_commands, "direct"
        )
        print_bridge(tables["bridge"])
    if many is not None:
        print_many(many)
    if connect is not None:
        print_connect(connect, args.connect_concurrency)
    if tls is not None:
        print_tls(tls)
    print_table(rows)
    print(f"\n(remote benchmark took {time.perf_counter() - started:.0f} s; {describe_load(load_before, cpu_times())})")

    if args.json:
        path = args.json.with_name(f"{args.json.stem}.remote{args.json.suffix or '.json'}")
        by_key = {p.key: p for p in pairings}
        report: dict[str, Any] = {
            "python": platform.python_version(),
            "node": node_version(),
            "build": runtime_build(),
            "versions": {d: dist_version(d) for d in ("acp-trio", "trio", "hypercorn", "trio-websocket", "wsproto")},
            "statistic": "median",
            "scenarios_run": [s for s in SCENARIOS if s in only],
            "updates_per_prompt": STREAM_N,
            "seconds_per_prompt": {p.label: samples.get(p.key) or p.note for p in pairings} if samples else {},
            "cpu_seconds_per_update": {p.label: cpu[p.key] for p in pairings if p.key in cpu},
            **{
                f"{name}_scenarios": {
                    command: {
                        "unit": scenario_unit(command)[1],
                        "per_prompt": scenario_unit(command)[0],
                        "pairings": {by_key[key].label: cell for key, cell in cells.items()},
                    }
                    for command, cells in table.items()
                }
                for name, table in tables.items()
            },
            "many": many,
            "connect": connect,
            "tls": tls,
            "bars": [
                {
                    "measure": r.measure,
                    "ours": r.ours,
                    "theirs": r.theirs,
                    "ratio": r.ratio,
                    "bar": r.bar,
                    "pass": r.ok,
                    "note": r.note,
                }
                for r in rows
            ],
        }
        path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    if any(failed.values()) or stream_failed:
        return 1
    if args.strict and any(r.ok is False for r in rows):
        return 3
    return 0


@contextmanager
def _none() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    sys.exit(main())

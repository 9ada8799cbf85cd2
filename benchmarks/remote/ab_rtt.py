"""Round trips over WebSocket, A/B: acp-trio pairs from several source trees, and the TypeScript pair, interleaved.

Usage::

    python ab_rtt.py [--tree NAME=DIR ...] [--ts] [--rounds R] [--repeats K] [COMMAND ...]

Each ``--tree NAME=DIR`` is a copy of the repository's ``runtime/`` and ``generated/`` (``DIR``
holds both; default: this checkout, named ``main``): its server (``trio_server.py``) and its client
(``trio_client.py``) run with ``PYTHONPATH`` on that copy, so two versions of the runtime are
measured side by side under the same load (make a copy of a commit with ``git archive COMMIT
runtime generated | tar -x -C DIR``).  ``--ts``: also the TypeScript SDK's pair (``ts_server.mjs``
and ``ts_client.mjs``; ``ACP_INTEROP_NPM_DIR`` or ``~/.cache/acp-trio/interop/npm-2.4.0-ws-8.18.3``).
``--crossed``: also the last tree's client against the TS server (``NAME>ts``) and the TS client
against the last tree's server (``ts>NAME``).
``--http``: over Streamable HTTP instead (``http://`` URLs: ``connect_http`` → ``AcpApp``, and the
TS pair's ``createHttpStream`` → ``AcpServer``).  ``--floor``: also the floor with no ACP on either
side (``raw_ws_server.py``, a bare ASGI app on hypercorn, driven by ``raw_ws_client.py`` over
WebSocket or ``raw_http_client.py`` over HTTP), for ``read N 1`` only, run with ``--python``; over HTTP
its client sends a ``POST`` 's head and body in two writes (httpx2's way).  ``--floor-one-write`` (with
``--http``): also that floor with each ``POST`` in one write (``floor1``: ``raw_http_client.py
--one-write``, as ``connect_http`` sends them).
``--python``: the interpreter for the acp-trio sides (default: this one).  ``--tree NAME=-``: what
that interpreter has installed; ``--tree NAME=/path/to/venv/bin/python``: that interpreter and what
it has installed (a venv with a compiled wheel: the compiled runtime).

Every variant keeps one server for the whole run; each round runs one client process per variant
and command (the order of the variants alternates between rounds), one warm-up prompt and
``--repeats`` timed ones.  Prints, per command, each variant's median rate (round trips or updates
per second over all timed prompts), its spread (min-max of the per-prompt rates) and the ratio to
the first variant, and for acp-trio's pairs and the HTTP floor the median CPU time per round trip
(or update) of the server and of the client (``--server-pid``: CPU time depends far less on the
machine's load than the rate does).  Commands as in ``../runtime/common.py`` (default ``read 2000 1``,
``permission 2000``, ``read 2000 64``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent / "runtime"))

from common import expected, parse_command  # noqa: E402

DEFAULT_COMMANDS = ("read 2000 1", "permission 2000", "read 2000 64")


def env_for(tree: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([f"{tree}/runtime", f"{tree}/generated"])
    npm = env.get("ACP_INTEROP_NPM_DIR") or str(Path.home() / ".cache/acp-trio/interop/npm-2.4.0-ws-8.18.3")
    env["ACP_INTEROP_NPM_DIR"] = npm
    return env


def start(argv: list[str], env: dict[str, str], stack: ExitStack) -> tuple[int, int]:
    """Start a server (stopped when ``stack`` closes): its (port, pid)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=HERE)
    assert proc.stdout is not None and proc.stdin is not None

    def stop() -> None:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()

    stack.callback(stop)
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"{argv} exited before printing its port")
    info = json.loads(line)
    return int(info["port"]), int(info["pid"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", action="append", default=[], help="NAME=DIR (DIR '-': what --python has installed)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--ts", action="store_true")
    parser.add_argument("--crossed", action="store_true", help="also the crossed pairs (implies --ts)")
    parser.add_argument("--http", action="store_true", help="over Streamable HTTP instead of WebSocket")
    parser.add_argument("--floor", action="store_true", help="also the floor (no ACP; read N 1 only)")
    parser.add_argument(
        "--floor-one-write",
        action="store_true",
        help="with --http: also the floor whose client sends a POST's head and body in one write ('floor1')",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("commands", nargs="*", default=list(DEFAULT_COMMANDS))
    args = parser.parse_args()
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("main", str(REPO))]
    scheme = "http" if args.http else "ws"
    variants: list[tuple[str, list[str], dict[str, str]]] = []
    with ExitStack() as stack:
        for name, tree in trees:
            python = args.python
            if tree.endswith("/python") or tree.endswith("/python3"):  # an interpreter: what it has installed
                python, tree = tree, "-"
            env = env_for(None if tree == "-" else tree)
            port, pid = start([python, str(HERE / "trio_server.py")], env, stack)
            client = [python, str(HERE / "trio_client.py"), f"{scheme}://127.0.0.1:{port}/acp", "--warmup", "1"]
            client += ["--server-pid", str(pid)]
            variants.append((name, [*client, "--repeats", str(args.repeats)], env))
        if args.ts or args.crossed:
            env = env_for(None)
            port, _ = start(["node", str(HERE / "ts_server.mjs")], env, stack)
            ts_client = ["node", str(HERE / "ts_client.mjs")]
            variants.append(("ts", [*ts_client, f"{scheme}://127.0.0.1:{port}/acp", "1", str(args.repeats)], env))
            if args.crossed:  # the last tree's client against the TS server, the TS client against its server
                name, argv, tree_env = variants[-2]
                ours = [*argv[:2], f"{scheme}://127.0.0.1:{port}/acp", *argv[3:]]
                variants.append((f"{name}>ts", ours, tree_env))
                variants.append((f"ts>{name}", [*ts_client, argv[2], "1", str(args.repeats)], env))
        if args.floor:
            env = env_for(None)
            port, pid = start([args.python, str(HERE / "raw_ws_server.py")], env, stack)
            floor_client = "raw_http_client.py" if args.http else "raw_ws_client.py"
            argv = [args.python, str(HERE / floor_client), f"{scheme}://127.0.0.1:{port}/acp", "--warmup", "1"]
            if args.http:
                argv += ["--server-pid", str(pid)]
            variants.append(("floor", [*argv, "--repeats", str(args.repeats)], env))
        if args.floor_one_write and args.http:  # (its own server: the two floors' connections do not meet)
            env = env_for(None)
            port, pid = start([args.python, str(HERE / "raw_ws_server.py")], env, stack)
            argv = [args.python, str(HERE / "raw_http_client.py"), f"http://127.0.0.1:{port}/acp", "--warmup", "1"]
            argv += ["--server-pid", str(pid), "--one-write"]
            variants.append(("floor1", [*argv, "--repeats", str(args.repeats)], env))
        rates: dict[tuple[str, str], list[float]] = {}
        cpus: dict[tuple[str, str], list[tuple[float, float]]] = {}  # (server, client) CPU µs per round trip
        for r in range(args.rounds):
            order = variants if r % 2 == 0 else variants[::-1]
            for command in args.commands:
                kind, n, _ = parse_command(command)
                for name, argv, env in order:
                    if name.startswith("floor") and not (kind == "read" and command.split()[2:] == ["1"]):
                        continue  # the floor does sequential reads only
                    proc = subprocess.run(
                        [*argv, command], env=env, cwd=HERE, capture_output=True, text=True, timeout=600
                    )
                    if proc.returncode != 0:
                        raise RuntimeError(f"{name} {command}: {proc.stderr[-2000:]}")
                    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
                    rates.setdefault((command, name), []).extend(expected(kind, n) / s for s in result[command])
                    line = f"  round {r + 1} {command!r} {name}: " + ", ".join(
                        f"{expected(kind, n) / s:,.0f}/s" for s in result[command]
                    )
                    cpu = result.get("cpu", {}).get(command)
                    if cpu:
                        per = 1e6 / expected(kind, n)
                        pairs = [(a * per, c * per) for a, c in zip(cpu["agent"], cpu["client"], strict=True)]
                        cpus.setdefault((command, name), []).extend(pairs)
                        line += "; CPU µs (server+client): " + ", ".join(f"{a:.0f}+{c:.0f}" for a, c in pairs)
                    print(line, flush=True)
    for command in args.commands:
        first = None
        print(command)
        for name, _, _ in variants:
            if (command, name) not in rates:
                continue
            values = rates[(command, name)]
            median = statistics.median(values)
            first = first or median
            line = f"  {name:10s} {median:10,.0f}/s  ({min(values):,.0f}-{max(values):,.0f})  x{median / first:.2f}"
            if (command, name) in cpus:
                server = statistics.median(p[0] for p in cpus[(command, name)])
                client = statistics.median(p[1] for p in cpus[(command, name)])
                line += f"  CPU µs per round trip: server {server:.0f}, client {client:.0f}"
            print(line)


if __name__ == "__main__":
    main()

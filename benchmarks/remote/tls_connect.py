"""What opening one connection costs the client, with and without TLS, and with the process's shared TLS context.

Usage: ``python tls_connect.py [--connects N] [--json]``.  Makes a self-signed certificate for
127.0.0.1 (``openssl req``, in a temporary directory), starts a server process (this file with
``--serve``: ``AcpApp`` serving the bench agent of ``../runtime/trio_agent.py`` on two loopback
ports, one plain and one with that certificate), then opens ``N`` (default 40) connections one
after another for each of ``ws://``, ``wss://``, ``http://`` and ``https://``, each doing
``initialize`` and leaving, after one warm-up connection.  The client trusts the certificate
through ``SSL_CERT_FILE`` (a bundle: the system's CA certificates and this one, so that loading it
costs what loading the system's does), so the default ``verify=True`` / ``ssl_context=None`` path runs: the
process's shared context (``acp_trio.transports.http.default_tls_context``,
``acp_trio.transports.websocket.default_tls_context``, built once).  For comparison,
``https://`` and ``wss://`` again with a new ``ssl.SSLContext`` per connection (loading the
certificates each time), which is what every ``connect_http`` (``http://`` included) and every
``wss://`` connection paid before the shared context.

Prints one line per case: client CPU ms and wall ms per connection (medians over the ``N``
connections), and connections per second; ``--json``: one JSON object instead.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

RUNTIME = Path(__file__).resolve().parent.parent / "runtime"
sys.path.insert(0, str(RUNTIME))


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (PEM files: certificate, key), made by ``openssl``."""
    if shutil.which("openssl") is None:
        raise SystemExit("tls_connect.py: needs the openssl command (Debian: apt-get install openssl)")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def serve(cert: str, key: str) -> None:
    """The server process: plain and TLS ports printed as ``{"plain": P, "tls": Q}``; ends when stdin closes."""
    from trio_agent import BenchAgent

    from acp_trio.transports.asgi import AcpApp
    from acp_trio.transports.asgi import serve as serve_asgi

    app = AcpApp(BenchAgent, max_connections=None)
    async with trio.open_nursery() as nursery:
        plain = await nursery.start(serve_asgi, app, "127.0.0.1", 0)
        tls = await nursery.start(lambda task_status: serve_asgi(
            app, "127.0.0.1", 0, certfile=cert, keyfile=key, task_status=task_status
        ))  # fmt: skip
        ports = {"plain": int(plain[0].rsplit(":", 1)[1]), "tls": int(tls[0].rsplit(":", 1)[1])}
        print(json.dumps(ports), flush=True)
        stdin = trio.lowlevel.FdStream(sys.stdin.fileno())
        while await stdin.receive_some():
            pass
        nursery.cancel_scope.cancel()


class Client:
    async def session_update(self, params: Any) -> None:
        pass


async def measure(kind: str, url: str, n: int, cafile: str | None) -> dict[str, Any]:
    """``n`` sequential connections (``initialize`` each) after one warm-up: per-connection CPU and wall
    ms.  ``cafile``: a new ``ssl.SSLContext`` for each connection, loading it (the old behaviour)."""
    from acp_schema import v1
    from acp_trio.transports.http import connect_http
    from acp_trio.transports.websocket import connect_websocket

    init = v1.InitializeRequest(protocol_version=1, client_capabilities=v1.ClientCapabilities())

    async def one() -> None:
        if kind == "http":
            verify: Any = True if cafile is None else ssl.create_default_context(cafile=cafile)
            async with connect_http(url, Client, verify=verify) as conn:
                await conn.agent.initialize(init)
        else:
            context = None if cafile is None else ssl.create_default_context(cafile=cafile)
            async with connect_websocket(url, Client, ssl_context=context) as conn:
                await conn.agent.initialize(init)

    await one()
    cpu, wall = [], []
    started = time.perf_counter()
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        await one()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    elapsed = time.perf_counter() - started
    return {
        "cpu_ms": statistics.median(cpu),
        "wall_ms": statistics.median(wall),
        "per_second": n / elapsed,
        "connects": n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--connects", type=int, default=40, help="connections per case (default 40)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--serve", nargs=2, metavar=("CERT", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        trio.run(serve, *args.serve)
        return
    with tempfile.TemporaryDirectory(prefix="acp-bench-tls-") as tmp:
        cert, key = make_certificate(Path(tmp))
        # the system's CA bundle plus this certificate: every context loads as much as a real one does
        bundle = Path(tmp) / "bundle.pem"
        system = ssl.get_default_verify_paths().cafile
        bundle.write_bytes((Path(system).read_bytes() if system else b"") + cert.read_bytes())
        os.environ["SSL_CERT_FILE"] = str(bundle)  # the default path trusts it
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(cert), str(key)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdin is not None and server.stdout is not None
        try:
            line = server.stdout.readline()
            if not line:
                raise SystemExit(f"tls_connect.py: the server exited ({server.wait()}) before it listened")
            ports = json.loads(line)
            plain, tls = f"127.0.0.1:{ports['plain']}", f"127.0.0.1:{ports['tls']}"
            cases = [
                ("ws://", "ws", f"ws://{plain}/acp", None),
                ("wss://, shared context", "ws", f"wss://{tls}/acp", None),
                ("wss://, a context per connection", "ws", f"wss://{tls}/acp", str(bundle)),
                ("http://", "http", f"http://{plain}/acp", None),
                ("https://, shared context", "http", f"https://{tls}/acp", None),
                ("https://, a context per connection", "http", f"https://{tls}/acp", str(bundle)),
            ]
            results = {label: trio.run(measure, kind, url, args.connects, cafile) for label, kind, url, cafile in cases}
        finally:
            server.stdin.close()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    if args.json:
        print(json.dumps(results))
        return
    for label, cell in results.items():
        print(
            f"{label:<38}{cell['cpu_ms']:>8.1f} ms CPU{cell['wall_ms']:>8.1f} ms wall"
            f"{cell['per_second']:>8.1f}/s  ({cell['connects']} connections)"
        )


if __name__ == "__main__":
    main()

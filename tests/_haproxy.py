"""HAProxy in front of host processes, for the deployment tests and benchmark (issue 36, steps 3 and 5).

The configuration is the deployment guide's (``docs/site/guides/deploy.md``, the ``text`` block
whose first line is ``# /etc/haproxy/haproxy.cfg``): :func:`guide_config` reads it and
:func:`fill` puts in what differs on this machine, and nothing else:

- each ``server`` line of the guide's backend becomes one line per host given (``h1``, ``h2``, ...,
  each with its ``cookie``), the guide's first server line the pattern, its address the host's;
- ``bind :443 ssl crt /etc/haproxy/acp.pem ...``: a loopback port, and the test's certificate (a
  PEM of certificate then key), or without ``ssl crt ...`` at all when there is none (``certificate=None``);
- ``stats socket /run/haproxy/admin.sock``: a socket in the test's directory;
- ``inter 2s``: the health checks' interval, shorter for a test that waits for them.

So the guide's balancing, cookie, health check, redispatch, retries and timeouts are the tested ones.

:class:`HAProxy` runs ``/usr/sbin/haproxy -f CFG -db`` (foreground; Debian's ``haproxy`` package,
2.6 here: ``.ci/run`` installs it), checks the file first (``-c``), reads server states from the
stats socket (:meth:`HAProxy.states`, :meth:`HAProxy.wait_states`) and stops with SIGTERM (then
SIGKILL).  No binary: :func:`haproxy_binary` is ``None`` and the fixtures fail saying what to install.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "site" / "guides" / "deploy.md"
CONFIG_FIRST_LINE = "# /etc/haproxy/haproxy.cfg"
INSTALL_HINT = "HAProxy was not found: install Debian's haproxy package (apt-get install -y haproxy)"


def haproxy_binary() -> str | None:
    """``/usr/sbin/haproxy`` (Debian's), else ``haproxy`` on ``PATH``, else ``None``."""
    if os.access("/usr/sbin/haproxy", os.X_OK):
        return "/usr/sbin/haproxy"
    return shutil.which("haproxy")


def guide_block(lang: str, first: str, guide: Path = GUIDE) -> str:
    """The text of ``guide``'s one ``lang`` fenced block whose first line starts with ``first``."""
    blocks = re.findall(rf"^```{lang}\n(.*?)^```", guide.read_text(encoding="utf-8"), re.S | re.M)
    found = [b for b in blocks if b.startswith(first)]
    if len(found) != 1:
        raise LookupError(f"{guide}: {len(found)} ```{lang} blocks start with {first!r}, expected 1")
    return found[0]


def guide_config() -> str:
    """The deployment guide's HAProxy configuration, as printed."""
    return guide_block("text", CONFIG_FIRST_LINE)


_SERVER = re.compile(r"^(?P<indent>\s+)server\s+(?P<name>\S+)\s+(?P<address>\S+)(?P<rest>.*)$")


def fill(
    config: str,
    *,
    servers: Sequence[tuple[str, int]],
    bind: tuple[str, int],
    stats_socket: Path,
    certificate: Path | None,
    inter: str | None = None,
) -> str:
    """``config`` (:func:`guide_config`) for this machine (see the module docstring).  Raises
    ``ValueError`` when a line it fills in is not there (the guide changed shape)."""

    def sub(pattern: str, replacement: str | Callable[[re.Match[str]], str], text: str) -> str:
        out, count = re.subn(pattern, replacement, text, flags=re.M)
        if count != 1:
            raise ValueError(f"the guide's HAProxy config: expected one line matching {pattern!r}, found {count}")
        return out

    lines = config.splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if _SERVER.match(line)]
    if not at:
        raise ValueError("the guide's HAProxy config has no server line")
    first = _SERVER.match(lines[at[0]])
    assert first is not None
    rest = first["rest"].replace(first["name"], "{name}")  # "cookie h1" -> "cookie h2"
    ours = [
        f"{first['indent']}server h{i} {host}:{port}{rest.format(name=f'h{i}')}\n"
        for i, (host, port) in enumerate(servers, 1)
    ]
    config = "".join(lines[: at[0]] + ours + [line for i, line in enumerate(lines) if i > at[0] and i not in at])

    def bind_line(match: re.Match[str]) -> str:
        tls = f" ssl crt {certificate}{match['tls_rest']}" if certificate is not None else ""
        return f"{match['indent']}bind {bind[0]}:{bind[1]}{tls}"

    config = sub(r"^(?P<indent>\s+)bind \S+ ssl crt \S+(?P<tls_rest>.*)$", bind_line, config)
    config = sub(r"(?<=stats socket )\S+", str(stats_socket), config)
    if inter is not None:
        config = sub(r"(?<= inter )\S+", inter, config)
    return config


class HAProxy:
    """One HAProxy process running ``config`` (written to ``directory/haproxy.cfg``)."""

    def __init__(self, config: str, directory: Path, stats_socket: Path) -> None:
        binary = haproxy_binary()
        if binary is None:
            raise RuntimeError(INSTALL_HINT)
        self.binary = binary
        self.directory = directory
        self.path = directory / "haproxy.cfg"
        self.path.write_text(config, encoding="utf-8")
        self.stats_socket = stats_socket
        self.log = directory / "haproxy.log"
        self.process: subprocess.Popen[bytes] | None = None

    def check(self) -> None:
        """``haproxy -c``: raises ``RuntimeError`` with HAProxy's message for a file it refuses."""
        run = subprocess.run([self.binary, "-c", "-f", str(self.path)], capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise RuntimeError(f"haproxy -c refused {self.path}:\n{run.stdout}{run.stderr}")

    def start(self, timeout: float = 10.0) -> None:
        """Check the file, start HAProxy in the foreground, and wait (``timeout`` seconds at most)
        for its stats socket to answer."""
        self.check()
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [self.binary, "-f", str(self.path), "-db"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"haproxy exited {self.process.returncode}:\n{self.log.read_text(errors='replace')}")
            try:
                self.command("show info")
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"haproxy's stats socket did not answer in {timeout:g} s") from None
                time.sleep(0.02)

    def command(self, line: str) -> str:
        """One command of HAProxy's runtime API on the stats socket, and its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5.0)
            sock.connect(str(self.stats_socket))
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def states(self, backend: str = "acp_hosts") -> dict[str, str]:
        """``{server: status}`` of ``backend`` from ``show stat``: ``UP``, ``DOWN``, ``UP 1/2``
        (going down), ``DOWN 1/2`` (coming up), ``NOLB``, ``MAINT``, ``DRAIN``..."""
        text = self.command("show stat").lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {
            row["svname"]: row["status"]
            for row in rows
            if row["pxname"] == backend and row["svname"] not in ("FRONTEND", "BACKEND")
        }

    def cpu_seconds(self) -> float:
        """User and system CPU seconds HAProxy has used (``/proc/PID/stat``)."""
        assert self.process is not None
        return process_cpu_seconds(self.process.pid)

    def wait_states(self, want: Callable[[dict[str, str]], bool], timeout: float = 30.0) -> dict[str, str]:
        """Poll :meth:`states` (every 50 ms) until ``want(states)``; raises ``TimeoutError`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.states()
            if want(states):
                return states
            if time.monotonic() > deadline:
                raise TimeoutError(f"HAProxy's servers after {timeout:g} s: {states}")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM (HAProxy's hard stop), then SIGKILL after 5 seconds."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (Linux ``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick; another process may take it later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

"""A throwaway PostgreSQL server for the tests: ``postgres_server`` (session-scoped fixture).

It runs the machine's own server binaries (Debian's ``postgresql`` package: ``pg_config
--bindir``, else the newest ``/usr/lib/postgresql/*/bin``): ``initdb`` into a temporary directory,
then ``pg_ctl start`` listening only on a Unix socket in that directory (no TCP port: nothing to
collide with, no other user reaches it), with ``fsync``, ``synchronous_commit`` and
``full_page_writes`` off (a test server: speed over crash safety).  PostgreSQL refuses to run as
root, so when the tests run as root the directory is given to the ``postgres`` user and the server
runs as it (``runuser -u postgres --``).  The server is stopped (``-m immediate``) and its
directory removed at the end of the session (of each xdist worker: one server per worker).

Each test takes a schema of its own: ``postgres_server.conninfo()`` creates an empty schema and
returns a conninfo whose ``search_path`` is it (the store's tables are made there); schemas are
cheap, a database per test would cost a copy of the template.

No server binaries: the fixture fails and says to install them (``apt-get install -y
postgresql``).  Pulled in by ``pytest_plugins = ["_postgres"]`` in a test module.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

INSTALL_HINT = (
    "the PostgreSQL server binaries (initdb, pg_ctl) were not found: install Debian's postgresql package "
    "(apt-get install -y postgresql) or put its bin directory on PATH"
)


def server_bindir() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``: ``pg_config --bindir``, the newest
    ``/usr/lib/postgresql/N/bin``, else ``PATH``; ``None`` when there is none."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))

    def version(path: str) -> float:
        try:
            return float(Path(path).parent.name)
        except ValueError:
            return 0.0

    candidates.extend(Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True))
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(Path(initdb).parent)
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    return None


class PostgresServer:
    """A running throwaway server: ``directory`` (data, socket, log), ``bindir``, ``port`` (the
    socket's number: ``.s.PGSQL.<port>``), ``admin`` (a conninfo to the ``postgres`` database)."""

    def __init__(self, directory: Path, bindir: Path) -> None:
        self.directory = directory
        self.bindir = bindir
        self.data = directory / "data"
        self.socket_dir = directory
        self.port = 5432
        self.log = directory / "server.log"
        self._as_postgres: list[str] = []
        self._schemas = itertools.count(1)
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                raise RuntimeError("running as root needs runuser (util-linux) to start PostgreSQL as its own user")
            shutil.chown(directory, "postgres", "postgres")
            self._as_postgres = ["runuser", "-u", "postgres", "--"]

    @property
    def admin(self) -> str:
        return f"host={self.socket_dir} port={self.port} user=postgres dbname=postgres"

    def _run(self, *command: str) -> None:
        result = subprocess.run([*self._as_postgres, *command], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(command)} failed ({result.returncode}): {result.stderr}{result.stdout}\n{log}"
            )

    def start(self, *, durable: bool = False) -> None:
        """``initdb``, then start the server; ``durable``: the server's defaults (``fsync``,
        ``synchronous_commit``, ``full_page_writes`` on: for benchmarks), else all three off."""
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
            "--no-instructions",
        )
        options = f"-c listen_addresses='' -k {self.socket_dir} -p {self.port} -c max_connections=100"
        if not durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=32MB"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def conninfo(self, schema: str | None = None) -> str:
        """A conninfo to a new empty schema (``schema``, or ``t<N>``): the store's tables go there."""
        return f"{self.admin} options='-csearch_path={self._new_schema(schema)}'"

    def url(self, schema: str | None = None) -> str:
        """As :meth:`conninfo`, as a ``postgresql://`` URL (what a host's ``store`` takes): the
        server's socket directory and port in its query, the new schema in ``options``."""
        import urllib.parse

        query = {
            "host": str(self.socket_dir),
            "port": self.port,
            "options": f"-csearch_path={self._new_schema(schema)}",
        }
        return "postgresql://postgres@/postgres?" + urllib.parse.urlencode(query)

    def _new_schema(self, schema: str | None) -> str:
        import psycopg

        name = schema or f"t{next(self._schemas)}"
        with psycopg.connect(self.admin, autocommit=True) as db:
            db.execute(f'CREATE SCHEMA "{name}"')  # type: ignore[arg-type]  # the test's own name
        return name


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for this test session (see the module docstring)."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        pytest.fail("psycopg 3 and psycopg_pool are not installed: pip install 'acp-trio[postgres]'", pytrace=False)
    bindir = server_bindir()
    if bindir is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    directory = Path(tempfile.mkdtemp(prefix="acp-trio-pg-"))
    server = PostgresServer(directory, bindir)
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def pg_conninfo(postgres_server: PostgresServer) -> str:
    """A conninfo to a schema of this test's own on the session's server."""
    return postgres_server.conninfo()

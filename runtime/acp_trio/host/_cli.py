"""``python -m acp_trio.host``: run one session host process from a config file.

The process serves one :class:`~acp_trio.host.SessionHost` (``docs/site/guides/host.md``) over
WebSocket and Streamable HTTP (:class:`~acp_trio.transports.asgi.AcpApp` on ``path``), with a
health endpoint for a load balancer, a graceful drain on SIGTERM and structured logs on stderr.

Command line (needs ``pip install 'acp-trio[remote]'``)::

    python -m acp_trio.host [--config host.toml] [--agent MODULE:NAME | -- AGENT_CMD [ARG ...]]
                            [--store URL] [--listen HOST:PORT ...] [--token T | --token-file PATH]
                            [--certfile PEM --keyfile PEM] [--max-connections N] [--max-sessions N]
                            [--drain-timeout S] [--log-format json|text] ...

Every key of the config file (TOML, one flat table: ``max_connections = 200``) is also a flag
(``--max-connections 200``) that overrides it; :data:`OPTIONS` lists them.  A bad key or value
stops the process before it listens, exit status 2, with a message naming the key and what it takes.

Signals: SIGTERM or SIGINT drains (:func:`drain`): the health endpoint answers ``503`` at once,
``session/new`` is refused (-32603, ``data.reason`` ``"draining"``), running turns go on up to
``drain_timeout`` seconds, then every session is ended (its attached clients get
``_acp_trio/session_ended``) and the process exits 0.  A second signal ends the drain at once.
SIGUSR1 does the first step alone (out of rotation: ``503``, no new session; sessions and turns go
on), and a later SIGTERM the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import difflib
import functools
import importlib
import importlib.util
import inspect
import logging
import os
import signal
import sys
import tomllib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import trio

from ._ownership import DEFAULT_LEASE_SECONDS

if TYPE_CHECKING:
    from ..transports.asgi import AcpApp
    from ._journal import Journal
    from ._router import SessionHost

log = logging.getLogger("acp_trio.host.process")

DEFAULT_LISTEN = "127.0.0.1:8765"
DEFAULT_HEALTH_PATH = "/healthz"
DEFAULT_DRAIN_TIMEOUT = 30.0
"""Seconds a drain lets running turns go on before it ends their sessions."""
_FLUSH_TIMEOUT = 5.0  # seconds the end of a drain waits for the clients to be told


class ConfigError(ValueError):
    """A bad config key or value: the message names the key and what it takes."""


@dataclass(frozen=True)
class Option:
    """One setting: its config key (its flag is ``--`` and the key with ``-`` for ``_``)."""

    key: str
    kind: str  # str, path, strings, int, count, seconds, choice
    help: str
    choices: tuple[Any, ...] = ()
    minimum: float = 0

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


OPTIONS: tuple[Option, ...] = (
    Option("agent", "str", "MODULE:NAME of an acp-trio agent run in this process (a class or factory AcpApp takes)"),
    Option("command", "strings", "a stdio agent's command, program and arguments (flag: after --), one process each"),
    Option("protocol", "choice", "with agent: the protocol version of a one-version agent class", (1, 2)),
    Option("speak", "choice", "with command: the v1/v2 adapter between the host and the agent", (1, 2)),
    Option("store", "str", "where journals are kept: sqlite:///PATH, memory:, postgresql://... (default: a temp file)"),
    Option("listen", "strings", f"HOST:PORT to listen on, several allowed (default {DEFAULT_LISTEN})"),
    Option("path", "str", "the ACP endpoint (default /acp)"),
    Option("health_path", "str", f"the load balancer's health check (default {DEFAULT_HEALTH_PATH})"),
    Option("certfile", "path", "PEM certificate: serve TLS (https://, wss://)"),
    Option("keyfile", "path", "PEM private key of certfile"),
    Option("token", "str", "the one bearer token clients must send"),
    Option("token_file", "path", "bearer tokens with their principals, one 'PRINCIPAL TOKEN' line each"),
    Option("allowed_origins", "strings", "browser origins allowed besides loopback ones"),
    Option("allowed_hosts", "strings", "Host names answered on loopback without a token"),
    Option("max_connections", "count", "client connections at once (more are refused 503)", minimum=1),
    Option("max_sessions", "count", "live sessions at once (a session/new past it is refused)", minimum=1),
    Option("max_detached_sessions", "count", "sessions with no client kept at once (default 100)"),
    Option("max_agent_processes", "count", "with command: agent processes at once", minimum=1),
    Option("detached_ttl", "seconds", "close a session this long without a client (default 3600)"),
    Option("idle_timeout", "seconds", "close a Streamable HTTP connection idle this long (default 300)"),
    Option("unattended_timeout", "seconds", "resolve an agent request no client answered this long"),
    Option("unattended_policy", "choice", "what unattended_timeout does (default wait)", ("wait", "reject", "cancel")),
    Option("drain_timeout", "seconds", f"seconds a drain lets turns run (default {DEFAULT_DRAIN_TIMEOUT:g})"),
    Option(
        "lease_seconds",
        "seconds",
        f"with a postgresql store: the sessions' ownership lease (default {DEFAULT_LEASE_SECONDS:g})",
    ),
    Option("host_id", "str", "with a postgresql store: this process's id in the leases (default: a random one)"),
    Option("advertise_url", "str", "with a postgresql store: the URL other hosts name for this one's sessions"),
    Option(
        "peer_token_file",
        "path",
        "with a postgresql store: the hosts' shared secret (the file's one line), to forward a session to its owner",
    ),
    Option(
        "handover",
        "choice",
        "with a postgresql store, when a drain hands its sessions over (default after_drain_timeout)",
        ("after_drain_timeout", "at_once"),
    ),
    Option("log_format", "choice", "stderr: one JSON object per line, or text (default json)", ("json", "text")),
    Option("log_level", "choice", "default info", ("debug", "info", "warning", "error")),
)
_BY_KEY = {option.key: option for option in OPTIONS}


@dataclass
class Settings:
    """A host process's resolved settings (:func:`load_settings`)."""

    agent: str | None = None
    command: list[str] = field(default_factory=list)
    protocol: int | None = None
    speak: int | None = None
    store: str | None = None
    listen: list[tuple[str, int]] = field(default_factory=list)
    path: str = "/acp"
    health_path: str = DEFAULT_HEALTH_PATH
    certfile: str | None = None
    keyfile: str | None = None
    token: str | dict[str, str] | None = None
    allowed_origins: list[str] = field(default_factory=list)
    allowed_hosts: list[str] = field(default_factory=list)
    max_connections: int | None = None
    max_sessions: int | None = None
    max_detached_sessions: int = 100
    max_agent_processes: int | None = None
    detached_ttl: float = 3600.0
    idle_timeout: float = 300.0
    unattended_timeout: float | None = None
    unattended_policy: str = "wait"
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    host_id: str | None = None
    advertise_url: str | None = None
    peer_token: str | None = None
    handover: str = "after_drain_timeout"
    log_format: str = "json"
    log_level: str = "info"
    loaded_agent: Any = None  # what agent names, once imported (load_agent)


# -- the config: file and flags --------------------------------------------------------------------------


def _checked(option: Option, value: Any, where: str) -> Any:
    """``value`` of ``option`` as given in ``where`` (the file, or the flag), checked and converted."""

    def bad(takes: str) -> ConfigError:
        return ConfigError(f"{where}: {option.key}: expected {takes}, got {value!r}")

    kind = option.kind
    if kind in ("str", "path"):
        if type(value) is not str or not value:
            raise bad("a non-empty string")
        if kind == "path" and not os.path.isfile(value):
            raise ConfigError(f"{where}: {option.key}: no such file: {value!r}")
        return value
    if kind == "strings":
        values = [value] if type(value) is str and option.key != "command" else value
        if type(values) is not list or not values or not all(type(v) is str and v for v in values):
            raise bad("a list of non-empty strings")
        return list(values)
    if kind == "choice":
        if value not in option.choices or type(value) is bool:
            raise bad("one of " + ", ".join(repr(c) for c in option.choices))
        return value
    if kind == "count":
        if type(value) is not int or value < option.minimum:
            raise bad(f"an integer >= {option.minimum:g}")
        return value
    if kind == "seconds":
        if type(value) not in (int, float) or not value >= 0 or (value == 0 and option.key != "drain_timeout"):
            raise bad("a positive number of seconds" if option.key != "drain_timeout" else "seconds >= 0")
        return float(value)
    raise AssertionError(kind)  # pragma: no cover


def _flag_value(option: Option, text: str) -> Any:
    """A flag's text as the config's value type."""
    if option.kind in ("count",) or (option.kind == "choice" and type(option.choices[0]) is int):
        try:
            return int(text)
        except ValueError:
            return text
    if option.kind == "seconds":
        try:
            return float(text)
        except ValueError:
            return text
    return text


def read_config(path: str) -> dict[str, Any]:
    """The keys of the TOML config file ``path``, checked (not yet combined: :func:`load_settings`).

    Raises :class:`ConfigError` naming the file and the key for an unknown key (with the closest
    known one), a value of the wrong type or range, a file that is missing or not TOML."""
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not TOML: {exc}") from None
    values = {}
    for key, value in data.items():
        option = _BY_KEY.get(key)
        if option is None:
            close = difflib.get_close_matches(key, _BY_KEY, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{path}: unknown key {key!r}{hint}; the keys are: {', '.join(_BY_KEY)} (one flat table: no [sections])"
            )
        values[key] = _checked(option, value, path)
    return values


def load_settings(options: argparse.Namespace) -> Settings:
    """The config file's values (``options.config``), overridden by the flags given; checked.

    Raises :class:`ConfigError` for a bad key or value, a missing agent, or keys that do not combine."""
    values = read_config(options.config) if options.config else {}
    for option in OPTIONS:
        given = getattr(options, option.key, None)
        if option.key == "command":
            given = options.command[1:] if options.command[:1] == ["--"] else options.command
            given = given or None
        if given is not None:
            values[option.key] = _checked(option, given, option.flag)
    settings = Settings()
    for key, value in values.items():
        if key == "listen":
            settings.listen = [_address(text) for text in value]
        elif key in ("token_file", "peer_token_file"):
            continue
        else:
            setattr(settings, key, value)
    if not settings.listen:
        settings.listen = [_address(DEFAULT_LISTEN)]
    _combine(settings, values)
    return settings


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"listen: expected HOST:PORT (an IPv6 address in brackets: [::1]:8765), got {text!r}")
    return host.strip("[]"), int(port)


def _combine(settings: Settings, values: dict[str, Any]) -> None:
    """The checks between keys."""
    if (settings.agent is None) == (not settings.command):
        raise ConfigError(
            "the agent: give exactly one of agent = 'MODULE:NAME' (run in this process) and "
            "command = ['program', 'arg', ...] (a stdio agent, one process per agent instance; flag: -- CMD ...)"
        )
    if settings.agent is not None and ":" not in settings.agent:
        raise ConfigError(
            f"agent: expected 'MODULE:NAME' (a module to import, then a name in it), got {settings.agent!r}"
        )
    for key, needs in (("protocol", "agent"), ("speak", "command"), ("max_agent_processes", "command")):
        if key in values and not values.get(needs):
            raise ConfigError(f"{key} is for {needs}: the other kind of agent does not take it")
    if "token" in values and "token_file" in values:
        raise ConfigError("token and token_file do not combine: put the token in the file as a line 'PRINCIPAL TOKEN'")
    if ("certfile" in values) != ("keyfile" in values):
        raise ConfigError("certfile and keyfile go together: the certificate and its private key (PEM)")
    for key in ("path", "health_path"):
        if not getattr(settings, key).startswith("/"):
            raise ConfigError(f"{key}: expected a path starting with '/', got {getattr(settings, key)!r}")
    if settings.path == settings.health_path:
        raise ConfigError(f"path and health_path are both {settings.path!r}: give the health check a path of its own")
    scheme = store_scheme(settings.store)
    for key in ("lease_seconds", "host_id", "advertise_url", "handover", "peer_token_file"):
        if key in values and scheme != "postgresql":
            raise ConfigError(f"{key} is for a postgresql:// store (sessions owned by one host among several)")
    if scheme == "postgresql" and settings.command:
        raise ConfigError(
            "store: a postgresql:// store runs sessions owned by one host among several, which needs agent "
            "(in this process) for now: a stdio agent command (the bridge) does not take over sessions yet"
        )
    if settings.host_id is not None and " " in settings.host_id:
        raise ConfigError(f"host_id: expected no spaces, got {settings.host_id!r}")
    if "peer_token_file" in values:
        try:
            with open(values["peer_token_file"], encoding="utf-8") as file:
                settings.peer_token = file.read().strip()
        except OSError as exc:
            raise ConfigError(f"peer_token_file: {exc}") from None
        if len(settings.peer_token) < 16 or any(c.isspace() for c in settings.peer_token):
            raise ConfigError(
                "peer_token_file: expected one line, a secret of at least 16 characters without spaces "
                "(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
    if "token_file" in values:
        from ..bridge import read_token_file

        try:
            settings.token = read_token_file(values["token_file"])
        except (OSError, ValueError) as exc:
            raise ConfigError(f"token_file: {exc}") from None


# -- the store: one place maps a URL to a journal ----------------------------------------------------------


def store_scheme(url: str | None) -> str | None:
    """The kind of store ``url`` names: ``None`` (the host's default, a SQLite file in a temporary
    directory removed when the process stops), ``"memory"`` (``memory:``, for tests),
    ``"sqlite"`` (``sqlite:///PATH``, as SQLAlchemy writes it: ``sqlite:///host.db`` is relative to
    the working directory, ``sqlite:////var/lib/acp/host.db`` absolute), ``"postgresql"``
    (``postgresql://...`` or ``postgres://...``, a libpq connection URI).  Raises :class:`ConfigError` for another."""
    if url is None:
        return None
    if url == "memory:":
        return "memory"
    if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        return "sqlite"
    if url.startswith(("postgresql://", "postgres://")):
        if importlib.util.find_spec("acp_trio._store_pg") is None:
            raise ConfigError(
                f"store: {url.split('://')[0]}:// needs acp_trio's PostgreSQL store, which this version does not "
                "have yet; use sqlite:///PATH"
            )
        return "postgresql"
    raise ConfigError(
        f"store: expected sqlite:///PATH, postgresql://USER@HOST/DB or memory:, got {url.split(':')[0]!r}: URL"
    )


def open_store(url: str | None) -> tuple[Journal | None, Callable[[], None]]:
    """The journal the store ``url`` names (:func:`store_scheme`) and the function that closes its
    store (blocking; call it once the host has closed).  ``(None, ...)`` for the host's default.
    The one place a store URL becomes a store.  Raises what the store's constructor raises
    (``OSError``, :class:`~acp_trio.session_store.StoreVersionError`: a file or server it cannot use)."""
    scheme = store_scheme(url)
    if scheme is None or url is None:
        return None, lambda: None
    if scheme == "memory":
        from ._journal import MemoryJournal

        return MemoryJournal(), lambda: None
    store: Any
    if scheme == "sqlite":
        from ..session_store import SqliteSessionStore

        store = SqliteSessionStore(url.removeprefix("sqlite:///"))
    else:  # issue 36 step 1: the PostgreSQL store, with the SQLite store's journal()
        store = importlib.import_module("acp_trio._store_pg").PostgresSessionStore(url)
    return store.journal(), store.close


def load_agent(spec: str) -> Any:
    """What ``agent = "MODULE:NAME"`` names, as :class:`~acp_trio.transports.asgi.AcpApp` takes it: a
    class or factory called with each agent connection, a ``{variant: factory}`` mapping, or an object
    with ``acp_handlers()``; a subclass of :class:`acp_trio.neutral.Agent` is instantiated with no
    arguments (one object serves every connection).  ``NAME`` may be dotted.  Raises :class:`ConfigError`."""
    module_name, _, name = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"agent: cannot import {module_name!r}: {exc}") from None
    for part in name.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"agent: {module_name!r} has no {name!r}") from None
    from ..neutral import Agent

    if inspect.isclass(target) and issubclass(target, Agent):
        return target()
    return target


def _speaks_its_own_versions(agent: Any) -> bool:
    if isinstance(agent, dict) or (not inspect.isclass(agent) and callable(getattr(agent, "acp_handlers", None))):
        return True
    return False


# -- structured logs -------------------------------------------------------------------------------------

_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``event`` (the
    record's ``extra`` ``event``, else ``"log"``), ``message``, the record's other ``extra`` fields
    (``session_id``, ``connection_id``, ``url``, ...) and ``error`` (the traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None) or "log",
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure_logging(log_format: str, level: str) -> None:
    """Log to stderr: ``json`` (:class:`JsonFormatter`) or ``text``, at ``level`` and above."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


# -- the process -----------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def open_host(settings: Settings, journal: Journal | None) -> AsyncIterator[SessionHost]:
    """The session host ``settings`` describe: the agent in this process (:func:`~acp_trio.host.open_session_host`)
    or a stdio agent command (:func:`acp_trio.bridge.open_detach_host`, the bridge's ``--detach``)."""
    limits: dict[str, Any] = {
        "journal": journal,
        "detached_ttl": settings.detached_ttl,
        "max_detached_sessions": settings.max_detached_sessions,
        "unattended_timeout": settings.unattended_timeout,
        "unattended_policy": settings.unattended_policy,
    }
    opened: contextlib.AbstractAsyncContextManager[SessionHost]
    store: Any = getattr(journal, "store", None)
    ownership = None
    if getattr(store, "leases", False):  # PostgreSQL: sessions owned by one host among several (issue 36)
        from ._ownership import HostOwnership

        ownership = HostOwnership(
            store,
            host_id=settings.host_id,
            url=settings.advertise_url,
            lease_seconds=settings.lease_seconds,
            peer_token=settings.peer_token,
        )
    if settings.command:
        from ..bridge import open_detach_host

        opened = open_detach_host(
            settings.command, max_agent_processes=settings.max_agent_processes, speak=settings.speak, **limits
        )
    else:
        from . import open_session_host

        assert settings.agent is not None
        options: dict[str, Any] = {}
        if settings.protocol is not None:
            options["variant"] = importlib.import_module(f"acp_schema.v{settings.protocol}")
        agent = settings.loaded_agent if settings.loaded_agent is not None else load_agent(settings.agent)
        from ..neutral import Agent

        if ownership is not None and isinstance(agent, Agent) and agent.store is None:
            # its sessions in the same database, so that another host's instance restores them (takeover)
            agent.store = store
        opened = open_session_host(agent, **limits, ownership=ownership, **options)
    async with opened as host:
        host.max_sessions = settings.max_sessions
        yield host


async def drain(app: AcpApp, host: SessionHost, timeout: float, *, handover_at_once: bool = False) -> None:
    """Drain ``host`` served by ``app``: the health check answers ``503`` and ``session/new`` is
    refused at once (:meth:`AcpApp.drain`); running turns go on for up to ``timeout`` seconds; then
    every live session is ended, its attached clients told (:meth:`SessionHost.end_sessions`), and
    the client connections closed (:meth:`SessionHost.disconnect_clients`), each step bounded by 5 seconds.

    A host with ownership (a ``postgresql://`` store) hands its sessions over instead of ending
    them (:meth:`SessionHost.hand_over`: leases released, clients told to resume again, through
    the balancer, on another host, which takes them at once); ``handover_at_once``: without
    waiting for the running turns first (they are cut, their end journaled)."""
    started = trio.current_time()
    app.drain()
    with trio.move_on_after(0 if handover_at_once and host.ownership is not None else timeout):
        await host.wait_until(lambda: host.running_turns() == 0)
    cut = host.running_turns()
    if cut:
        detail = f"the host shut down: drain_timeout={timeout:g}s passed with the turn running"
    else:
        detail = "the host shut down (drained)"
    ended = 0
    with trio.move_on_after(_FLUSH_TIMEOUT):
        ended = await (host.hand_over(detail) if host.ownership is not None else host.end_sessions(detail))
    host.disconnect_clients()  # their transports close normally (a WebSocket's close frame)
    with trio.move_on_after(_FLUSH_TIMEOUT):
        await app.wait_idle()
    seconds = round(trio.current_time() - started, 3)
    log.info(
        "drain finished in %.3f s: %d session(s) ended, %d with a turn cut short",
        seconds,
        ended,
        cut,
        extra={"event": "drain.finished", "seconds": seconds, "sessions_ended": ended, "turns_cut": cut},
    )


async def serve_host(
    settings: Settings,
    journal: Journal | None,
    drain_now: trio.Event,
    *,
    stop_taking: trio.Event | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the host ``settings`` describe, its sessions journaled in ``journal`` (:func:`open_store`),
    until ``drain_now`` is set, then :func:`drain` and return (cancel it to stop at once).
    ``stop_taking``: once set, the host takes no new session and the health check answers ``503``
    (the drain's first step, :meth:`AcpApp.drain`), while everything else goes on until ``drain_now``.
    ``task_status``: started with the bound URLs."""
    from ..transports.asgi import AcpApp, serve

    async with open_host(settings, journal) as host:
        app = AcpApp(
            host=host,
            path=settings.path,
            health_path=settings.health_path,
            token=settings.token,
            allowed_origins=settings.allowed_origins,
            allowed_hosts=settings.allowed_hosts,
            max_connections=settings.max_connections,
            idle_timeout=settings.idle_timeout,
        )
        (first_host, first_port), *more = settings.listen
        async with trio.open_nursery() as nursery:
            urls: list[str] = await nursery.start(
                functools.partial(
                    serve,
                    app,
                    first_host,
                    first_port,
                    also_bind=more,
                    certfile=settings.certfile,
                    keyfile=settings.keyfile,
                )
            )
            agent = settings.agent or " ".join(settings.command)
            for url in urls:
                log.info(
                    "listening on %s (ACP on %s, health check on %s)",
                    url,
                    settings.path,
                    settings.health_path,
                    extra={
                        "event": "listening",
                        "url": url,
                        "path": settings.path,
                        "health_path": settings.health_path,
                        "agent": agent,
                        "store": _shown_store(settings.store),
                    },
                )
            if stop_taking is not None:

                async def out_of_rotation() -> None:
                    await stop_taking.wait()
                    app.drain()

                nursery.start_soon(out_of_rotation)
            task_status.started(urls)
            await drain_now.wait()
            await drain(app, host, settings.drain_timeout, handover_at_once=settings.handover == "at_once")
            nursery.cancel_scope.cancel()


def _shown_store(url: str | None) -> str:
    """The store URL for the log, without a password."""
    if url is None:
        return "default (a temporary SQLite file)"
    scheme, sep, rest = url.partition("://")
    credentials, at, where = rest.rpartition("@")
    if at and ":" in credentials:
        return f"{scheme}{sep}{credentials.split(':')[0]}:***@{where}"
    return url


def run(settings: Settings) -> int:
    """Serve until SIGTERM or SIGINT, drain, return 0; 1 when the store cannot be opened or the
    server cannot serve (an address in use), logged as an ``error`` event.  A second signal during
    the drain stops at once.  SIGUSR1 takes the host out of rotation (``stop_taking`` of
    :func:`serve_host`: no new session, health check ``503``) and leaves the rest to a later SIGTERM."""
    try:
        journal, close_store = open_store(settings.store)
    except Exception as exc:
        log.error(
            "store %s: cannot open it: %s: %s",
            _shown_store(settings.store),
            type(exc).__name__,
            exc,
            extra={"event": "error", "store": _shown_store(settings.store)},
        )
        return 1

    async def main() -> None:
        drain_now, stop_taking = trio.Event(), trio.Event()
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGUSR1) as signals:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async for signum in signals:
                        name = signal.Signals(signum).name
                        if signum == signal.SIGUSR1:
                            log.info("%s: no new session", name, extra={"event": "out_of_rotation", "signal": name})
                            stop_taking.set()
                        elif not drain_now.is_set():
                            log.info("%s: draining", name, extra={"event": "stopping", "signal": name})
                            drain_now.set()
                        else:
                            log.warning("%s again: stopping now", name, extra={"event": "stopping", "signal": name})
                            nursery.cancel_scope.cancel()

                nursery.start_soon(watch)
                await serve_host(settings, journal, drain_now, stop_taking=stop_taking)
                nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    except Exception as exc:
        cause: BaseException = exc
        while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
            cause = cause.exceptions[0]
        if isinstance(cause, OSError):  # an address in use or not ours, a certificate that cannot be read
            log.error("cannot serve: %s", cause, extra={"event": "error"})
        else:
            log.error("the host failed: %s: %s", type(cause).__name__, cause, exc_info=cause, extra={"event": "error"})
        return 1
    finally:
        close_store()  # every agent instance has ended: nothing appends any more
    log.info("stopped", extra={"event": "stopped"})
    return 0


_METAVARS = {
    "agent": "MODULE:NAME",
    "store": "URL",
    "listen": "HOST:PORT",
    "certfile": "PEM",
    "keyfile": "PEM",
    "token_file": "PATH",
    "peer_token_file": "PATH",
    "allowed_origins": "ORIGIN",
    "allowed_hosts": "HOST",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m acp_trio.host",
        description="Run one ACP session host process: an agent behind WebSocket and Streamable HTTP, its sessions "
        "outliving client connections (docs/site/guides/host.md).  Every config key is also a flag that overrides it.",
    )
    parser.add_argument("--config", metavar="PATH", help="a TOML file of the keys below (flat: max_connections = 200)")
    for option in OPTIONS:
        if option.key == "command":
            continue
        metavar = {"count": "N", "seconds": "SECONDS", "strings": option.key.upper().rstrip("S")}.get(option.kind)
        if option.kind == "choice":
            metavar = "|".join(str(choice) for choice in option.choices)
        metavar = _METAVARS.get(option.key, metavar)
        kwargs: dict[str, Any] = {"dest": option.key, "help": option.help, "metavar": metavar or option.key.upper()}
        if option.kind == "strings":
            kwargs["action"] = "append"
        else:
            kwargs["type"] = functools.partial(_flag_value, option)
        parser.add_argument(option.flag, **kwargs)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- AGENT_CMD [ARG ...]: the command key")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m acp_trio.host``: see the module docstring.  Exits 2 for a bad config or flag."""
    parser = build_parser()
    options = parser.parse_args(argv)
    try:
        settings = load_settings(options)
        if settings.agent is not None:
            settings.loaded_agent = load_agent(settings.agent)  # a bad one named before anything listens
            if settings.protocol is not None and _speaks_its_own_versions(settings.loaded_agent):
                raise ConfigError(
                    f"protocol: {settings.agent} chooses its protocol versions itself (a {{variant: factory}} "
                    "mapping or acp_handlers()): leave protocol out"
                )
        if settings.command:
            from ..transports.stdio import _resolve_command

            try:
                _resolve_command(settings.command[0], None, None)
            except OSError as exc:
                raise ConfigError(f"command: {exc}") from None
    except ConfigError as exc:
        parser.error(str(exc))
    configure_logging(settings.log_format, settings.log_level)
    sys.exit(run(settings))

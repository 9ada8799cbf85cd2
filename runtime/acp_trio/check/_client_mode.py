"""The checker's client mode: check an ACP *client* by playing a scripted agent to it.

``python -m acp_trio.check --client -- CLIENT_CMD... {AGENT}`` (in code: :func:`run_client_checks`)
starts the client with the argument ``{AGENT}`` replaced by the command of a stand-in agent
(:mod:`acp_trio.check._scripted_agent`; a token that merely contains ``{AGENT}`` gets the command
as one shell-quoted string).  The stand-in relays its stdio to this module over a unix socket, so
the checker itself is the agent and sees every byte; it also reports its stdin closing and the
signals it gets.

The client runs its own script (``initialize``, ``session/new``, one or more ``session/prompt``),
so the checks happen inside the turns it starts:

- **run 1, turn 1** (the probe turn): an unknown extension request (it must get -32601); a
  permission request (it must get a valid outcome); ``fs/read_text_file`` and
  ``fs/write_text_file`` inside the session's ``cwd`` (when advertised) and out of it: an absolute
  path elsewhere, ``cwd/../…``, a symlink in ``cwd`` pointing out, a relative path (refused, or
  resolved against ``cwd``); ``terminal/create`` (run when advertised, refused and not run when
  not); a known update with unknown fields and an update of an unknown kind (each followed by a
  request, which must still be answered); a ``session/prompt`` answer with an unknown field.
  The probes send ``fs/*`` and ``terminal/*`` even to a client that did not advertise them, on
  purpose: that is how "refuses what it did not advertise" is seen.
- **run 1, turn 2** (when the client prompts again): a turn held open (at most ``cancel_wait``
  seconds) with a permission request pending, for the client to cancel: after ``session/cancel``
  the pending request must be answered ``cancelled`` and the client must still take updates.
- **run 1, shutdown**: the stand-in exits once its stdin closes; the client must close it.
- **run 2** (a lingering stand-in, which ignores its stdin closing and SIGTERM): the client must
  end it with signals (SIGTERM, then SIGKILL).  When run 1 had a single turn, run 2's first turn
  is the held-open one.

"The next request must still be answered" uses an unknown extension request, or, for a client
that leaves those unanswered (reported once, by ``jsonrpc.unknown-method``), a permission request.
A probe that the client's own exit, or its cancelling of the probe turn, cuts short is SKIP.

Verdicts: FAIL where the client breaks a MUST, its own advertised capabilities, or mishandles a
message that is valid against the pinned schema (unknown fields everywhere; unknown update kinds in
v2, whose unions are open); WARN where the rule is a SHOULD or only drawn in the spec's diagrams
(the root set as a file system boundary, closing stdin then signalling), and for an unknown update
kind in v1 (outside the v1 schema, so surviving it is robustness, not conformance).

The files the probes use are made by the checker: ``.acp-check-*`` in the session's ``cwd``
(removed afterwards) and a directory of its own outside it.  Every wait is bounded: a silent
client is a FAIL, never a hang.  Whole-run checks: every line the client writes is one JSON-RPC
message, every message validates against the pinned schema (the agent side's params, the client
side's results).
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import trio

from .._core import LineFramer, OversizedMessage
from . import _scripted_agent
from ._base import JSONRPC, Result, Status
from ._schema import wire_schema
from ._scripted_agent import FrameReader, frame
from ._wire import START_TIMEOUT, error_code, show, show_line

if TYPE_CHECKING:
    from . import Report

AGENT_PLACEHOLDER = "{AGENT}"
V1 = "docs/protocol/v1"
V2 = "docs/protocol/v2"


@dataclass(frozen=True)
class ClientCheck:
    """One rule about clients: ``name`` (for ``--only``/``--skip``), what it checks, its sources
    (``source``: protocol 1; ``source_v2``: protocol 2, default the same)."""

    name: str
    title: str
    source: str
    source_v2: str = ""

    def source_for(self, protocol: int) -> str:
        """The rule's spec source for that protocol version."""
        return (self.source_v2 or self.source) if protocol >= 2 else self.source


CLIENT_CHECKS: tuple[ClientCheck, ...] = (
    ClientCheck(
        "client.initialize",
        "initialize is the client's first request",
        f"{V1}/initialization.mdx (Clients MUST initialize the connection before a session)",
        f"{V2}/initialization.mdx (Clients MUST initialize the connection before a session)",
    ),
    ClientCheck(
        "client.session-new",
        "session/new gives an absolute cwd",
        f"{V1}/session-setup.mdx § Working Directory",
        f"{V2}/session-setup.mdx § Working Directory",
    ),
    ClientCheck("jsonrpc.unknown-method", "an unknown request gets -32601", f"{JSONRPC} § 5.1"),
    ClientCheck(
        "permission.answer",
        "session/request_permission gets an offered option or cancelled",
        f"{V1}/tool-calls.mdx § Requesting Permission",
        f"{V2}/tool-calls.mdx § Requesting Permission",
    ),
    ClientCheck(
        "fs.capability",
        "fs/* is refused unless advertised",
        f"{V1}/file-system.mdx § Checking Support; {V1}/initialization.mdx § Client Capabilities",
        f"{V2}/migration.mdx § Client file system and terminal execution removed",
    ),
    ClientCheck(
        "fs.read",
        "fs/read_text_file inside cwd returns the file",
        f"{V1}/file-system.mdx § Reading Files",
        f"{V2}/migration.mdx § Client file system and terminal execution removed",
    ),
    ClientCheck(
        "fs.write",
        "fs/write_text_file inside cwd creates the file",
        f"{V1}/file-system.mdx § Writing Files",
        f"{V2}/migration.mdx § Client file system and terminal execution removed",
    ),
    ClientCheck(
        "fs.roots",
        "fs/* outside the session's roots is refused (absolute, .., symlink, relative)",
        f"{V1}/session-setup.mdx § Working Directory (the session's root set SHOULD bound file system operations)",
        f"{V2}/migration.mdx § Client file system and terminal execution removed",
    ),
    ClientCheck(
        "terminal.capability",
        "terminal/* runs when advertised, is refused (and runs nothing) when not",
        f"{V1}/terminals.mdx § Checking Support; § Executing Commands",
        f"{V2}/migration.mdx § Client file system and terminal execution removed",
    ),
    ClientCheck(
        "updates.unknown-fields",
        "a known update with unknown fields is survived",
        f"{V1}/extensibility.mdx (field names are reserved for future protocol versions)",
        f"{V2}/migration.mdx § Extensibility and forward compatibility",
    ),
    ClientCheck(
        "updates.unknown-variant",
        "a session/update of an unknown kind is survived",
        f"{V1}/prompt-turn.mdx § 3. Agent Reports Output (v1 closes the union: WARN only)",
        f"{V2}/migration.mdx § Migration checklist: Clients (tolerate unknown sessionUpdate types)",
    ),
    ClientCheck(
        "session.prompt-response",
        "a session/prompt answer with an unknown field is survived",
        f"{V1}/extensibility.mdx (field names are reserved for future protocol versions)",
        f"{V2}/migration.mdx § Extensibility and forward compatibility",
    ),
    ClientCheck(
        "session.cancel",
        "after session/cancel, pending permission requests are answered cancelled; updates still taken",
        f"{V1}/prompt-turn.mdx § Cancellation",
        f"{V2}/prompt-lifecycle.mdx § Cancellation",
    ),
    ClientCheck(
        "lifecycle.stdin",
        "the client closes the agent's stdin when done",
        f"{V1}/transports.mdx § stdio (the client closes stdin, then terminates the process)",
        f"{V2}/transports.mdx § stdio",
    ),
    ClientCheck(
        "lifecycle.terminate",
        "an agent still running after its stdin closed is terminated (SIGTERM, then SIGKILL)",
        f"{V1}/transports.mdx § stdio (the client closes stdin, then terminates the process)",
        f"{V2}/transports.mdx § stdio",
    ),
    ClientCheck(
        "stdin.jsonrpc",
        "every line the client writes is one JSON-RPC message",
        f"{V1}/transports.mdx § stdio",
        f"{V2}/transports.mdx § stdio",
    ),
    ClientCheck("schema.valid", "every message validates against the pinned schema", "schema/v1/schema.json"),
)
"""The client checks of ``python -m acp_trio.check --client``, in the order they run."""

_PROBES = (
    "jsonrpc.unknown-method",
    "permission.answer",
    "fs.capability",
    "fs.read",
    "fs.write",
    "fs.roots",
    "terminal.capability",
    "updates.unknown-fields",
    "updates.unknown-variant",
)
"""The checks made in the probe turn (SKIP when the client cancels that turn first)."""

_PERMISSION_OPTIONS = [
    {"optionId": "acp-check-allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "acp-check-reject", "name": "Reject", "kind": "reject_once"},
]


class ClientGone(Exception):
    """The stand-in agent's connection ended (the client closed it, exited, or killed the agent)."""


# -- the schema, from the agent's side ----------------------------------------------------------
class ClientSchema:
    """Validates what a client sends: its requests and notifications against the params an agent
    handles (``x-side`` ``agent``), its answers against the results of client-side methods."""

    def __init__(self, variant: str) -> None:
        self.wire = wire_schema(variant)
        self.results = self.wire.client_results

    def check_from_client(self, method: str, params: Any, is_request: bool) -> str | None:
        """A request or notification from the client: ``None``, or "what: why" (extensions unchecked)."""
        if method.startswith("_"):
            return None
        name = self.wire.params.get(("agent", method)) or self.wire.params.get(("protocol", method))
        if name is None:
            kind = "request" if is_request else "notification"
            return f"{kind} {method}: no such method for an agent in the {self.wire.variant} schema"
        return self.wire.problem(params, name, f"{method} params")

    def check_answer(self, method: str | None, message: dict[str, Any]) -> str | None:
        """The client's answer to the stand-in's ``method`` request (``None``: an id never sent)."""
        if "error" in message:
            if "result" in message:
                return f"an answer with both result and error (id {message.get('id')!r})"
            return self.wire.problem(message["error"], "Error", f"error answering {method or 'an unknown id'}")
        if "result" not in message:
            return f"a message with neither method, result nor error: {orjson.dumps(message).decode()[:120]}"
        if method is None or method not in self.results:
            return None
        return self.wire.problem(message["result"], self.results[method], f"{method} result")


# -- the checker's end of the stand-in agent ------------------------------------------------------
class AgentEnd:
    """The stand-in agent's socket, as the agent: reads what the client writes, writes to it.

    ``on_request(message)`` (set by the script) answers the client's requests, one task each.
    Records the lines, the messages, their schema problems, and the stand-in's reports
    (``stdin_closed``, ``signals``, ``goodbye``; ``gone`` once the socket ended)."""

    def __init__(self, stream: trio.SocketStream, schema: ClientSchema, nursery: trio.Nursery) -> None:
        self.stream = stream
        self.schema = schema
        self.nursery = nursery
        self.on_request: Callable[[dict[str, Any]], Any] | None = None
        self.received: list[dict[str, Any]] = []
        self.not_jsonrpc: list[str] = []
        self.invalid: list[str] = []
        self.stdin_closed: float | None = None
        self.signals: list[tuple[float, int]] = []
        self.goodbye = False
        self.gone: float | None = None
        self.hello: dict[str, Any] = {}
        self.last_activity = time.monotonic()
        self._changed = trio.lowlevel.ParkingLot()
        self._sent: dict[str, str] = {}  # our request id (JSON text) → method
        self._next_id = 0
        self._send_lock = trio.Lock()
        self.own_problems: list[str] = []  # schema problems of what the stand-in sent
        self._asked: dict[str, str] = {}  # the client's request id (JSON text) → method
        self.cancels: list[tuple[float, Any, int]] = []  # (time, params, index in received) of each session/cancel

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    async def send(self, message: dict[str, Any]) -> None:
        if "method" in message and "id" in message:
            self._sent[orjson.dumps(message["id"]).decode()] = message["method"]
        self._check_own(message)
        self.touch()
        async with self._send_lock:
            try:
                await self.stream.send_all(frame(b"D", orjson.dumps(message) + b"\n"))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise ClientGone("the agent's connection is closed") from exc

    def _check_own(self, message: dict[str, Any]) -> None:
        """What the stand-in itself sends, against the schema (the tests hold it to the deliberate probes)."""
        method = message.get("method")
        if isinstance(method, str):
            problem = self.schema.wire.check_from_agent(method, message.get("params"), "id" in message)
        else:
            asked = self._asked.get(orjson.dumps(message.get("id")).decode())
            problem = self.schema.wire.check_response(asked, message)
        if problem:
            self.own_problems.append(problem)

    async def notify(self, method: str, params: Any) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def update(self, session_id: str, update: dict[str, Any]) -> None:
        await self.notify("session/update", {"sessionId": session_id, "update": update})

    async def request(self, method: str, params: Any, timeout: float) -> dict[str, Any]:
        """Send a request; its answer (raises ``trio.TooSlowError`` after ``timeout`` s, :class:`ClientGone`)."""
        self._next_id += 1
        request_id = f"acp-check-{self._next_id}"
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return await self.wait_for(lambda m: "method" not in m and m.get("id") == request_id, timeout)

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        with trio.fail_after(timeout):
            while True:
                for message in self.received:
                    if predicate(message):
                        return message
                if self.gone is not None:
                    raise ClientGone("the agent's connection closed")
                await self._changed.park()

    async def wait_gone(self, timeout: float) -> bool:
        with trio.move_on_after(timeout):
            while self.gone is None:
                await self._changed.park()
            return True
        return False

    async def wait_change(self) -> None:
        await self._changed.park()

    async def read_forever(self) -> None:
        reader = FrameReader(self.stream)
        framer = LineFramer(64 * 1024 * 1024)
        try:
            while True:
                got = await reader.next()
                if got is None:
                    for line in framer.close():
                        if not isinstance(line, OversizedMessage):
                            await self._on_line(line)
                    return
                kind, payload = got
                self.touch()
                now = time.monotonic()
                if kind == b"D":
                    for line in framer.feed(payload):
                        if isinstance(line, OversizedMessage):
                            self.not_jsonrpc.append(f"a line of {line.size} bytes")
                        else:
                            await self._on_line(line)
                elif kind == b"E":
                    self.stdin_closed = now
                elif kind == b"S":
                    self.signals.append((now, int(payload)))
                elif kind == b"B":
                    self.goodbye = True
                elif kind == b"H":
                    self.hello = json.loads(payload)
                self._changed.unpark_all()
        finally:
            self.gone = time.monotonic()
            self._changed.unpark_all()

    async def _on_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.not_jsonrpc.append(show_line(line))
            return
        batch = isinstance(message, list) and bool(message) and self.schema.wire.variant.startswith("v2")
        for entry in message if batch else [message]:  # v2: transports.mdx § JSON-RPC Batch Messages
            if not isinstance(entry, dict) or entry.get("jsonrpc") != "2.0":
                self.not_jsonrpc.append(show_line(line))
                return
        for entry in message if batch else [message]:
            await self._on_message(entry)

    async def _on_message(self, message: dict[str, Any]) -> None:
        self.received.append(message)
        self._changed.unpark_all()
        method = message.get("method")
        if isinstance(method, str):
            schema = self.schema
            asked = (
                message.get("params", {}).get("protocolVersion") if isinstance(message.get("params"), dict) else None
            )
            if method == "initialize" and asked in (1, 2) and f"v{asked}" != schema.wire.variant:
                schema = ClientSchema(f"v{asked}")  # the request is in the version it asks for
            problem = schema.check_from_client(method, message.get("params"), "id" in message)
        else:
            problem = self.schema.check_answer(self._sent.get(orjson.dumps(message.get("id")).decode()), message)
        if problem:
            self.invalid.append(problem)
        if method == "session/cancel":
            self.cancels.append((time.monotonic(), message.get("params"), len(self.received) - 1))
        if isinstance(method, str) and "id" in message:
            self._asked[orjson.dumps(message["id"]).decode()] = method
        if isinstance(method, str) and "id" in message and self.on_request is not None:
            self.nursery.start_soon(self.on_request, message)

    async def answer(self, message: dict[str, Any], result: Any = None, error: dict[str, Any] | None = None) -> None:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message.get("id")}
        if error is not None:
            reply["error"] = error
        else:
            reply["result"] = result
        try:
            await self.send(reply)
        except ClientGone:
            pass


# -- the script -------------------------------------------------------------------------------------
@dataclass
class Settings:
    """One checker run's settings (seconds for the timeouts; see :func:`run_client_checks`)."""

    protocol: int
    answer_timeout: float
    cancel_wait: float
    shutdown_timeout: float
    selected: Callable[[str], bool]
    progress: Callable[[str], None] | None
    start_timeout: float = START_TIMEOUT
    answers_unknown: bool = True  # learned in run 1: it answers unknown extension requests (else pings ask permission)


@dataclass
class Files:
    """What the probes read and write: a token file and a symlink in ``cwd``, a directory outside."""

    cwd: Path
    outside: Path
    token: str
    made: list[Path] = field(default_factory=list)

    @property
    def inside_file(self) -> Path:
        return self.cwd / ".acp-check-inside.txt"

    @property
    def written_file(self) -> Path:
        return self.cwd / ".acp-check-written.txt"

    @property
    def link(self) -> Path:
        return self.cwd / ".acp-check-link.txt"

    @property
    def outside_file(self) -> Path:
        return self.outside / "secret.txt"

    def make(self) -> str | None:
        """Create them; ``None``, or why not."""
        try:
            for stale in (self.inside_file, self.written_file, self.link):  # left by a checker that was killed
                if stale.is_symlink() or stale.exists():
                    stale.unlink()
            self.outside_file.write_text(f"outside {self.token}\n", encoding="utf-8")
            self.inside_file.write_text(f"inside {self.token}\n", encoding="utf-8")
            self.made.append(self.inside_file)
            self.made.append(self.written_file)
            os.symlink(self.outside_file, self.link)
            self.made.append(self.link)
        except OSError as exc:
            return f"cannot create the probe files in {self.cwd}: {exc.strerror or exc}"
        return None

    def remove(self) -> None:
        for path in self.made:
            try:
                path.unlink()
            except OSError:
                pass


class Script:
    """The stand-in agent's behaviour over one run, and what it observed (``results``)."""

    def __init__(self, end: AgentEnd, settings: Settings, outside: Path, run: int, hold_first: bool) -> None:
        self.end = end
        self.s = settings
        self.outside = outside
        self.run = run
        self.hold_first = hold_first  # run 2: hold turn 1 open for a cancel
        self.results: dict[str, Result] = {}
        self.in_flight: dict[str, Result] = {}  # a probe's verdict should the client go away during it
        self.capabilities: dict[str, Any] = {}
        self.initialized = False
        self.session_requested = False
        self.first_request: str | None = None
        self.sessions: dict[str, Files] = {}
        self.turns = 0
        self.turn_running = False
        self.probe_answer_at: float | None = None  # when the probe turn's answer was sent
        self.probe_answer_index = 0  # how many messages had come by then
        self.held = False
        self.probe_cancelled = False
        end.on_request = self.on_request

    @property
    def v2(self) -> bool:
        return self.s.protocol >= 2

    def note(self, name: str, status: Status, observed: str) -> None:
        self.results.setdefault(name, Result(status, observed))

    def _progress(self, name: str) -> None:
        if self.s.progress is not None:
            self.s.progress(name)

    # -- the client's requests -------------------------------------------------------------------
    async def on_request(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        assert isinstance(params, dict)
        if self.first_request is None:
            self.first_request = str(method)
        try:
            if method == "initialize":
                await self._initialize(message, params)
            elif method == "session/new":
                await self._session_new(message, params)
            elif method == "session/prompt":
                await self._prompt(message, params)
            elif self.v2 and method == "session/list":  # v2 baseline methods of the session surface
                await self.end.answer(message, {"sessions": []})
            elif self.v2 and method == "session/close":
                await self.end.answer(message, {})
            else:
                error = {"code": -32601, "message": f"Method not found: {method} (the acp-trio checker's agent)"}
                await self.end.answer(message, error=error)
        except ClientGone:
            pass

    async def _initialize(self, message: dict[str, Any], params: dict[str, Any]) -> None:
        self.initialized = True
        asked = params.get("protocolVersion")
        key = "capabilities" if self.v2 else "clientCapabilities"
        capabilities = params.get(key)
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}
        if self.first_request == "initialize" and isinstance(asked, int) and asked < self.s.protocol:
            self.note(
                "client.initialize",
                Status.WARN,
                f"it asked protocolVersion {asked}; the checker's agent speaks {self.s.protocol} only"
                f" (run the checker with --protocol {asked})",
            )
        elif self.first_request == "initialize":
            caps = show(self.capabilities, 120)
            self.note("client.initialize", Status.PASS, f"first request; protocolVersion {asked!r}, {key} {caps}")
        else:
            self.note("client.initialize", Status.FAIL, f"its first request was {self.first_request}, not initialize")
        info = {"name": "acp-trio-check", "title": "acp-trio checker (scripted agent)", "version": "1"}
        if self.v2:
            result: dict[str, Any] = {
                "protocolVersion": 2,
                "info": info,
                "capabilities": {"session": {}},
                "authMethods": [],
            }
        else:
            result = {
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": False},
                "authMethods": [],
                "agentInfo": info,
            }
        await self.end.answer(message, result)

    async def _session_new(self, message: dict[str, Any], params: dict[str, Any]) -> None:
        self.session_requested = True
        cwd = params.get("cwd")
        session_id = f"sess_acp_check_{self.run}_{len(self.sessions) + 1}"
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            self.note("client.session-new", Status.FAIL, f"cwd {cwd!r} is not an absolute path")
        else:
            self.note("client.session-new", Status.PASS, f"cwd {cwd}")
        if isinstance(cwd, str) and os.path.isabs(cwd):
            files = Files(Path(cwd), self.outside, secrets.token_hex(8))
            self.sessions[session_id] = files
        await self.end.answer(message, {"sessionId": session_id})

    async def _prompt(self, message: dict[str, Any], params: dict[str, Any]) -> None:
        session_id = str(params.get("sessionId"))
        self.turns += 1
        turn = self.turns
        self.turn_running = True
        message_id = f"msg_acp_check_{self.run}_{turn}"
        try:
            if self.v2:
                content = params.get("prompt") if isinstance(params.get("prompt"), list) else []
                user = {"sessionUpdate": "user_message", "messageId": f"{message_id}_user", "content": content}
                await self.end.update(session_id, user)
                await self.end.answer(message, {"messageId": f"{message_id}_user", "acpCheckFutureField": True})
                await self.end.update(session_id, {"sessionUpdate": "state_update", "state": "running"})
            stop = "end_turn"
            if self.run == 1 and turn == 1:
                cancels = len(self.end.cancels)
                await self._probe_turn(session_id, message_id)
                if len(self.end.cancels) > cancels:  # cancelled while probing: end it as asked
                    stop = "cancelled"
            elif (self.run == 1 and turn == 2) or (self.hold_first and turn == 1):
                stop = await self._hold_turn(session_id, message_id)
            await self.end.update(session_id, self._chunk(message_id, "acp-check: done"))
            # taken before the answer goes out: a client can read it, and close the agent's stdin,
            # before this task runs again (the close would then seem to come first)
            answered_at = time.monotonic()
            if self.v2:
                idle: dict[str, Any] = {"sessionUpdate": "state_update", "state": "idle", "stopReason": stop}
                if self.run == 1 and turn == 1:
                    idle["acpCheckFutureField"] = {"nested": [1, 2]}
                await self.end.update(session_id, idle)
            else:
                result: dict[str, Any] = {"stopReason": stop}
                if self.run == 1 and turn == 1:
                    result["acpCheckFutureField"] = {"nested": [1, 2]}
                await self.end.answer(message, result)
            if self.run == 1 and turn == 1:
                self.probe_answer_at = answered_at
                self.probe_answer_index = len(self.end.received)
        finally:
            self.turn_running = False

    def _chunk(self, message_id: str, text: str) -> dict[str, Any]:
        update: dict[str, Any] = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
        if self.v2:
            update["messageId"] = message_id
        return update

    def _tool_call(self, call_id: str, title: str, status: str, *, first: bool) -> dict[str, Any]:
        kind = "tool_call" if first and not self.v2 else "tool_call_update"
        update: dict[str, Any] = {"sessionUpdate": kind, "toolCallId": call_id, "status": status}
        if first:
            update.update(title=title, kind="other")
        return update

    def _permission_params(self, session_id: str, call_id: str, title: str) -> dict[str, Any]:
        if self.v2:
            return {
                "sessionId": session_id,
                "title": title,
                "subject": {"type": "tool_call", "toolCall": {"toolCallId": call_id, "title": title}},
                "options": _PERMISSION_OPTIONS,
            }
        return {
            "sessionId": session_id,
            "toolCall": {"toolCallId": call_id, "title": title, "kind": "other"},
            "options": _PERMISSION_OPTIONS,
        }

    async def _ask(self, method: str, params: Any) -> dict[str, Any] | None:
        """A request to the client; its answer, or ``None`` when none came in time."""
        try:
            return await self.end.request(method, params, self.s.answer_timeout)
        except trio.TooSlowError:
            return None

    # -- turn 1 of run 1: the probes ---------------------------------------------------------------
    async def _probe_turn(self, session_id: str, message_id: str) -> None:
        """The probes, one after the other; a ``session/cancel`` stops them (the rest are SKIP)."""
        files = self.sessions.get(session_id)
        cancels = len(self.end.cancels)
        await self.end.update(session_id, self._chunk(message_id, "acp-check: probing the client. "))
        why = "session/new gave no absolute cwd" if files is None else files.make() or ""
        steps: list[Callable[[str], Awaitable[None]]] = [
            self._unknown_method_probe,
            self._permission_probe,
            lambda sid: self._fs_probes(sid, files, why),
            lambda sid: self._terminal_probe(sid, files),
            lambda sid: self._unknown_probes(sid, message_id),
        ]
        try:
            for step in steps:
                if len(self.end.cancels) > cancels:
                    self.probe_cancelled = True
                    for name in _PROBES:
                        self.note(name, Status.SKIP, "the client cancelled the probe turn (session/cancel) before this")
                    return
                if self.end.gone is not None:
                    for name in _PROBES:
                        self.note(name, Status.SKIP, "the client had closed the connection before this probe")
                    return
                await step(session_id)
        finally:
            if files is not None:
                files.remove()

    async def _unknown_method_probe(self, session_id: str) -> None:
        if not self.s.selected("jsonrpc.unknown-method"):
            return
        self._progress("jsonrpc.unknown-method")
        answer = await self._ask("_acp_check/no_such_method", {"sessionId": session_id})
        self.s.answers_unknown = answer is not None
        if answer is None:
            self.note("jsonrpc.unknown-method", Status.FAIL, f"no answer within {self.s.answer_timeout:g} s")
        elif error_code(answer) == -32601:
            self.note("jsonrpc.unknown-method", Status.PASS, "-32601")
        else:
            self.note("jsonrpc.unknown-method", Status.FAIL, f"answered {show(answer, 160)}")

    async def _permission_probe(self, session_id: str) -> None:
        if not self.s.selected("permission.answer"):
            return
        self._progress("permission.answer")
        call = "acp_check_permission"
        await self.end.update(session_id, self._tool_call(call, "acp-check: a permission probe", "pending", first=True))
        answer = await self._ask("session/request_permission", self._permission_params(session_id, call, "acp-check"))
        if answer is None:
            self.note("permission.answer", Status.FAIL, f"no answer within {self.s.answer_timeout:g} s")
        else:
            outcome = (answer.get("result") or {}).get("outcome") if isinstance(answer.get("result"), dict) else None
            offered = {o["optionId"] for o in _PERMISSION_OPTIONS}
            if not isinstance(outcome, dict):
                self.note("permission.answer", Status.FAIL, f"answered {show(answer, 160)}")
            elif outcome.get("outcome") == "selected" and outcome.get("optionId") in offered:
                self.note("permission.answer", Status.PASS, f"selected {outcome.get('optionId')}")
            elif outcome.get("outcome") == "cancelled":
                self.note("permission.answer", Status.PASS, "cancelled")
            else:
                self.note("permission.answer", Status.FAIL, f"answered an outcome not offered: {show(outcome, 160)}")
        await self.end.update(session_id, self._tool_call(call, "", "completed", first=False))

    async def _fs_probes(self, session_id: str, files: Files | None, why: str) -> None:
        fs = self.capabilities.get("fs") if not self.v2 else None
        fs = fs if isinstance(fs, dict) else {}
        can_read, can_write = fs.get("readTextFile") is True, fs.get("writeTextFile") is True
        names = ("fs.capability", "fs.read", "fs.write", "fs.roots")
        if not any(self.s.selected(n) for n in names):
            return
        self._progress("fs")
        if why or files is None:
            for name in names:
                self.note(name, Status.SKIP, why)
            return
        read = {"sessionId": session_id, "path": str(files.inside_file)}
        write_path = files.written_file
        write = {"sessionId": session_id, "path": str(write_path), "content": f"written {files.token}\n"}
        # fs.capability: what it did not advertise is refused
        refused_ok: list[str] = []
        problems: list[str] = []
        for method, params, advertised in (
            ("fs/read_text_file", read, can_read),
            ("fs/write_text_file", write, can_write),
        ):
            if advertised:
                continue
            answer = await self._ask(method, params)
            if answer is None:
                problems.append(f"{method} got no answer within {self.s.answer_timeout:g} s")
            elif "error" not in answer:
                problems.append(f"{method} answered {show(answer.get('result'), 80)} without advertising it")
            else:
                refused_ok.append(f"{method} refused ({error_code(answer)})")
        if not can_write and write_path.exists():
            problems.append(f"{write_path} was written though writeTextFile is not advertised")
        what = "protocol 2 has no client file system" if self.v2 else f"fs {show(fs, 80)}"
        if problems:
            self.note("fs.capability", Status.FAIL, "; ".join(problems))
        elif refused_ok:
            self.note("fs.capability", Status.PASS, f"{what}: " + ", ".join(refused_ok))
        else:
            self.note("fs.capability", Status.PASS, f"{what}: both advertised")
        if self.v2:
            for name in ("fs.read", "fs.write", "fs.roots"):
                self.note(name, Status.SKIP, "protocol 2 has no client file system")
            return
        # fs.read / fs.write inside cwd
        if not can_read:
            self.note("fs.read", Status.SKIP, "the client does not advertise fs.readTextFile")
        else:
            answer = await self._ask("fs/read_text_file", read)
            expected = files.inside_file.read_text(encoding="utf-8")
            content = (
                (answer.get("result") or {}).get("content")
                if answer and isinstance(answer.get("result"), dict)
                else None
            )
            if answer is None:
                self.note("fs.read", Status.FAIL, f"no answer within {self.s.answer_timeout:g} s")
            elif content == expected:
                self.note("fs.read", Status.PASS, f"{files.inside_file.name} read back exactly")
            else:
                self.note("fs.read", Status.FAIL, f"reading {files.inside_file} answered {show(answer, 160)}")
        if not can_write:
            self.note("fs.write", Status.SKIP, "the client does not advertise fs.writeTextFile")
        else:
            answer = await self._ask("fs/write_text_file", write)
            try:
                on_disk: str | None = write_path.read_text(encoding="utf-8")
            except OSError:
                on_disk = None
            if answer is None:
                self.note("fs.write", Status.FAIL, f"no answer within {self.s.answer_timeout:g} s")
            elif "error" in answer:
                self.note("fs.write", Status.FAIL, f"writing a new file in cwd answered {show(answer['error'], 160)}")
            elif on_disk != write["content"]:
                self.note("fs.write", Status.FAIL, f"answered success, but the file holds {on_disk!r}")
            else:
                self.note("fs.write", Status.PASS, f"{write_path.name} created with the content sent")
        # fs.roots: escapes
        if not (can_read or can_write):
            self.note("fs.roots", Status.SKIP, "the client advertises no fs method (fs.capability covers refusal)")
            return
        await self._roots_probe(session_id, files, can_read, can_write)

    async def _roots_probe(self, session_id: str, files: Files, can_read: bool, can_write: bool) -> None:
        outside = files.outside_file
        dotdot = str(files.cwd) + "/" + os.path.relpath(outside, files.cwd)
        escapes = [
            ("an absolute path outside cwd", str(outside)),
            ("cwd/../…", dotdot),
            ("a symlink in cwd pointing out", str(files.link)),
        ]
        leaks: list[str] = []
        refused = 0
        relative_how = ""
        if can_read:
            for label, path in escapes:
                answer = await self._ask("fs/read_text_file", {"sessionId": session_id, "path": path})
                if answer is None:
                    leaks.append(f"read of {label} ({path}) got no answer within {self.s.answer_timeout:g} s")
                elif "error" not in answer:
                    leaks.append(f"read of {label} ({path}) answered {show(answer.get('result'), 80)}")
                else:
                    refused += 1
            # relative: refused, or resolved against cwd (session-setup.mdx: cwd is the base)
            relative = files.inside_file.name
            answer = await self._ask("fs/read_text_file", {"sessionId": session_id, "path": relative})
            content = (answer or {}).get("result")
            text = content.get("content") if isinstance(content, dict) else None
            if answer is None:
                leaks.append(f"read of the relative path {relative!r} got no answer")
            elif "error" in answer:
                relative_how = "refused"
            elif text != f"inside {files.token}\n":
                leaks.append(
                    f"read of the relative path {relative!r} was not resolved against cwd: {show(content, 80)}"
                )
            else:  # inside: cwd is the base for relative paths (session-setup.mdx § Working Directory)
                relative_how = "resolved against cwd"
        if can_write:
            for label, path in escapes:
                target = Path(path)
                params = {"sessionId": session_id, "path": path, "content": f"escaped {files.token}\n"}
                answer = await self._ask("fs/write_text_file", params)
                changed = target.exists() and f"escaped {files.token}" in target.read_text(encoding="utf-8")
                if changed or (answer is not None and "error" not in answer):
                    leaks.append(
                        f"write to {label} ({path}) " + ("changed the file" if changed else "answered success")
                    )
                elif answer is None:
                    leaks.append(f"write to {label} ({path}) got no answer within {self.s.answer_timeout:g} s")
                else:
                    refused += 1
                files.outside_file.write_text(f"outside {files.token}\n", encoding="utf-8")
        if leaks:
            self.note("fs.roots", Status.WARN, f"{len(leaks)} not refused: " + "; ".join(leaks))
        else:
            relative = f"; the relative path {relative_how}" if relative_how else ""
            self.note("fs.roots", Status.PASS, f"{refused} escapes refused (absolute, .., symlink){relative}")

    async def _terminal_probe(self, session_id: str, files: Files | None) -> None:
        if not self.s.selected("terminal.capability"):
            return
        self._progress("terminal.capability")
        advertised = not self.v2 and self.capabilities.get("terminal") is True
        marker = self.outside / f"terminal-ran-{secrets.token_hex(4)}"
        script = "import sys; open(sys.argv[1], 'w').write('ran'); print('acp-check-terminal-output')"
        params: dict[str, Any] = {
            "sessionId": session_id,
            "command": sys.executable,
            "args": ["-c", script, str(marker)],
        }
        if files is not None:
            params["cwd"] = str(files.cwd)
        answer = await self._ask("terminal/create", params)
        name = "terminal.capability"
        if answer is None:
            self.note(name, Status.FAIL, f"terminal/create got no answer within {self.s.answer_timeout:g} s")
            return
        if not advertised:
            what = "protocol 2 has no client terminal" if self.v2 else "terminal not advertised"
            with trio.move_on_after(0.5):  # a process it started anyway may take a moment
                while not marker.exists():
                    await trio.sleep(0.05)
            if "error" not in answer or marker.exists():
                ran = "and the command ran" if marker.exists() else "(the command did not run)"
                got = show(answer.get("result", answer.get("error")), 100)
                self.note(name, Status.FAIL, f"{what}, yet terminal/create answered {got} {ran}")
            else:
                self.note(name, Status.PASS, f"{what}: terminal/create refused ({error_code(answer)}), nothing ran")
            return
        result = answer.get("result") if isinstance(answer.get("result"), dict) else None
        terminal_id = result.get("terminalId") if result else None
        if not isinstance(terminal_id, str):
            self.note(name, Status.FAIL, f"terminal advertised, but terminal/create answered {show(answer, 160)}")
            return
        ids = {"sessionId": session_id, "terminalId": terminal_id}
        exited = await self._ask("terminal/wait_for_exit", ids)
        output = await self._ask("terminal/output", ids)
        released = await self._ask("terminal/release", ids)
        exit_code = ((exited or {}).get("result") or {}).get("exitCode") if exited else None
        text = ((output or {}).get("result") or {}).get("output") if output else None
        problems = []
        if exit_code != 0:
            problems.append(f"terminal/wait_for_exit answered {show(exited, 160) if exited else 'nothing'}")
        if not isinstance(text, str) or "acp-check-terminal-output" not in text:
            problems.append(f"terminal/output answered {show(output, 160) if output else 'nothing'}")
        if released is None or "error" in released:
            problems.append(f"terminal/release answered {show(released, 160) if released else 'nothing'}")
        if problems:
            self.note(name, Status.FAIL, "terminal advertised: " + "; ".join(problems))
        else:
            self.note(name, Status.PASS, "terminal advertised: create, wait_for_exit (0), output, release all answered")

    async def _unknown_probes(self, session_id: str, message_id: str) -> None:
        if self.s.selected("updates.unknown-fields"):
            self._progress("updates.unknown-fields")
            chunk = self._chunk(message_id, "acp-check: a chunk with fields from the future. ")
            chunk["acpCheckFutureField"] = {"nested": True}
            chunk["content"]["acpCheckFutureField"] = 1
            what = "a chunk with unknown fields"
            if not await self._survives("updates.unknown-fields", session_id, chunk, what, True):
                if self.s.selected("updates.unknown-variant"):  # it may not have seen the client go yet
                    why = "the client stopped answering after updates.unknown-fields"
                    self.note("updates.unknown-variant", Status.SKIP, why)
                return
        if self.s.selected("updates.unknown-variant"):
            self._progress("updates.unknown-variant")
            update = {"sessionUpdate": "acp_check_future_kind", "acpCheckData": {"n": 1}}
            await self._survives(
                "updates.unknown-variant", session_id, update, "sessionUpdate acp_check_future_kind", self.v2
            )

    async def _survives(self, name: str, session_id: str, update: dict[str, Any], what: str, strict: bool) -> bool:
        """Send ``update``, then a request the client must answer; note ``name``; whether it answered."""
        status = Status.FAIL if strict else Status.WARN
        # if the client's exit ends this run before the ping fails, that exit is still the verdict
        self.in_flight[name] = Result(status, f"after {what}, the client went away")
        try:
            await self.end.update(session_id, update)
            answer = await self._ping(session_id, what)
        except ClientGone:
            answer = None
        if answer is not None:
            self.note(name, Status.PASS, f"after {what}, the next request was answered")
            return True
        gone = "the connection closed" if self.end.gone is not None else f"no answer within {self.s.answer_timeout:g} s"
        self.note(name, status, f"after {what}, the next request got no answer ({gone})")
        return False

    async def _ping(self, session_id: str, after: str) -> dict[str, Any] | None:
        """A request the client must answer: an unknown extension method, or (for a client that leaves
        those unanswered, already reported by jsonrpc.unknown-method) a permission request."""
        if self.s.answers_unknown:
            return await self._ask("_acp_check/ping", {"after": after})
        call = f"acp_check_ping_{len(self.end.received)}"
        await self.end.update(session_id, self._tool_call(call, f"acp-check: after {after}", "pending", first=True))
        answer = await self._ask("session/request_permission", self._permission_params(session_id, call, "acp-check"))
        await self.end.update(session_id, self._tool_call(call, "", "completed", first=False))
        return answer

    # -- a turn held open for a cancel ------------------------------------------------------------
    async def _hold_turn(self, session_id: str, message_id: str) -> str:
        if not self.s.selected("session.cancel"):
            return "end_turn"
        self._progress("session.cancel")
        self.held = True
        call = "acp_check_hold"
        await self.end.update(
            session_id, self._tool_call(call, "acp-check: waiting for a cancel", "pending", first=True)
        )
        cancels_before = len(self.end.cancels)
        answers: list[dict[str, Any] | None] = []
        answered = trio.Event()

        async def ask() -> None:
            try:
                params = self._permission_params(session_id, call, "acp-check: cancel me")
                answers.append(await self.end.request("session/request_permission", params, self.s.cancel_wait + 60))
            except (trio.TooSlowError, ClientGone):
                answers.append(None)
            answered.set()

        start = time.monotonic()
        cancelled = False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            with trio.move_on_after(self.s.cancel_wait):
                while len(self.end.cancels) == cancels_before and self.end.gone is None:
                    self.end.touch()
                    with trio.move_on_after(0.5):
                        await self.end.wait_change()
            cancelled = len(self.end.cancels) > cancels_before
            if cancelled:
                with trio.move_on_after(self.s.answer_timeout):
                    await answered.wait()
            nursery.cancel_scope.cancel()
        if not cancelled:
            await self.end.update(session_id, self._tool_call(call, "", "completed", first=False))
            self.note(
                "session.cancel",
                Status.SKIP,
                f"the client never cancelled (a turn was held open {self.s.cancel_wait:g} s with a permission request)",
            )
            return "end_turn"
        cancelled_at, _params, cancel_index = self.end.cancels[cancels_before]
        answer = answers[0] if answers else None
        pending = answer is None or _index_of(self.end, answer) > cancel_index
        problems: list[str] = []
        outcome = ((answer or {}).get("result") or {}).get("outcome") if answer else None
        if pending:
            if answer is None:
                problems.append(
                    f"the pending permission request got no answer within {self.s.answer_timeout:g} s of session/cancel"
                )
            elif not isinstance(outcome, dict) or outcome.get("outcome") != "cancelled":
                problems.append(
                    "the pending permission request was answered "
                    f"{show(answer.get('result') or answer, 100)}, not cancelled"
                )
        # updates after the cancel, then a request: still taken
        try:
            await self.end.update(session_id, self._tool_call(call, "", "failed", first=False))
            await self.end.update(session_id, self._chunk(message_id, "acp-check: stopped. "))
            ping = await self._ping(session_id, "session/cancel")
        except ClientGone:
            ping = None
        if ping is None:
            problems.append("after session/cancel, updates and a request went unanswered (the client stopped reading?)")
        waited = cancelled_at - start
        if problems:
            self.note("session.cancel", Status.FAIL, "; ".join(problems))
        elif pending:
            self.note(
                "session.cancel",
                Status.PASS,
                f"cancelled after {waited:.1f} s; the pending permission request was answered cancelled;"
                " updates still taken",
            )
        else:
            self.note(
                "session.cancel",
                Status.PASS,
                f"cancelled after {waited:.1f} s (no permission request pending then); updates still taken",
            )
        return "cancelled"


def _index_of(end: AgentEnd, message: dict[str, Any]) -> int:
    """Where ``message`` is among the messages received (they are in arrival order)."""
    return next((i for i, m in enumerate(end.received) if m is message), len(end.received))


# -- running the client -------------------------------------------------------------------------------
def agent_command(socket_path: str, linger: bool) -> list[str]:
    """The argv of the stand-in agent (a file run by this Python, whatever ``PYTHONPATH`` the client gives it)."""
    command = [sys.executable, _scripted_agent.__file__, "--connect", socket_path]
    return [*command, "--linger"] if linger else command


def substitute(command: Sequence[str], agent: list[str]) -> list[str]:
    """``command`` with the token ``{AGENT}`` replaced by ``agent`` (a token containing it: by ``agent``
    shell-quoted).  Raises ``ValueError`` when no token holds ``{AGENT}``."""
    out: list[str] = []
    found = False
    for token in command:
        if token == AGENT_PLACEHOLDER:
            out.extend(agent)
            found = True
        elif AGENT_PLACEHOLDER in token:
            out.append(token.replace(AGENT_PLACEHOLDER, shlex.join(agent)))
            found = True
        else:
            out.append(token)
    if not found:
        raise ValueError(f"the client command has no {AGENT_PLACEHOLDER} argument: put it where the agent command goes")
    return out


@dataclass
class Shutdown:
    """What the stand-in saw of its shutdown, frozen when the client was done (or given up on)."""

    stdin_closed: float | None
    signals: list[tuple[float, int]]
    gone: float | None
    goodbye: bool


@dataclass
class RunOutcome:
    """One start of the client: the script and its end, how the client exited, what the agent saw."""

    script: Script | None
    end: AgentEnd | None
    exit_code: int | None
    stderr_tail: str
    started: bool
    note: str = ""
    shutdown: Shutdown | None = None
    stopped: bool = False  # the checker had to end the client


async def _drain(stream: trio.abc.ReceiveStream | None, keep: bytearray) -> None:
    if stream is None:
        return
    try:
        while data := await stream.receive_some(1 << 16):
            keep += data
            del keep[:-4096]
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def _one_run(
    command: Sequence[str], settings: Settings, schema: ClientSchema, outside: Path, run: int, hold_first: bool
) -> RunOutcome:
    """Start the client with the stand-in (run 2: lingering) and play until it has shut the agent down."""
    linger = run == 2
    directory = tempfile.mkdtemp(prefix="acp-check-sock-")
    socket_path = os.path.join(directory, "agent.sock")
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.bind(socket_path)
    sock.listen(4)
    listener = trio.SocketListener(sock)
    argv = substitute(command, agent_command(socket_path, linger))
    stderr = bytearray()
    outcome = RunOutcome(None, None, None, "", False)
    try:
        process = await _spawn(argv)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, process.stdout, bytearray())
            nursery.start_soon(_drain, process.stderr, stderr)
            try:
                await _play(process, listener, settings, schema, outside, run, hold_first, linger, outcome)
            finally:
                with trio.CancelScope(shield=True):
                    await _stop(process, outcome)
                    outcome.exit_code = process.returncode
                nursery.cancel_scope.cancel()
    finally:
        await listener.aclose()
        shutil.rmtree(directory, ignore_errors=True)
    outcome.stderr_tail = stderr.decode("utf-8", "replace").strip()[-400:]
    return outcome


async def _spawn(argv: list[str]) -> trio.Process:
    import subprocess

    return await trio.lowlevel.open_process(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )


async def _stop(process: trio.Process, outcome: RunOutcome) -> None:
    """Let the client exit by itself (a few seconds), else end its process group (ours: we started it)."""
    with trio.move_on_after(5):
        await process.wait()
        return
    outcome.stopped = True
    for signum, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
        with trio.move_on_after(wait):
            await process.wait()
            return


async def _play(
    process: trio.Process,
    listener: trio.SocketListener,
    settings: Settings,
    schema: ClientSchema,
    outside: Path,
    run: int,
    hold_first: bool,
    linger: bool,
    outcome: RunOutcome,
) -> None:
    async with trio.open_nursery() as nursery:
        stream: trio.SocketStream | None = None
        with trio.move_on_after(settings.start_timeout):
            async with trio.open_nursery() as race:

                async def accept() -> None:
                    nonlocal stream
                    stream = await listener.accept()
                    race.cancel_scope.cancel()

                async def exits() -> None:
                    await process.wait()
                    await trio.sleep(0.5)  # an agent it started just before exiting may still be connecting
                    race.cancel_scope.cancel()

                race.start_soon(accept)
                race.start_soon(exits)
        if stream is None:
            outcome.note = (
                f"the client exited (code {process.returncode}) without starting the agent"
                if process.returncode is not None
                else f"the client did not start the agent within {settings.start_timeout:g} s "
                f"(--start-timeout {settings.start_timeout:g}: a client slow to start needs a larger one)"
            )
            return
        outcome.started = True
        end = AgentEnd(stream, schema, nursery)
        script = Script(end, settings, outside, run, hold_first)
        outcome.end, outcome.script = end, script
        nursery.start_soon(end.read_forever)
        await _watch(process, end, script, settings, linger, outcome)
        nursery.cancel_scope.cancel()
    with trio.move_on_after(1) as scope:
        scope.shield = True
        await stream.aclose()


async def _watch(
    process: trio.Process, end: AgentEnd, script: Script, settings: Settings, linger: bool, outcome: RunOutcome
) -> None:
    """Wait, bounded, for the client to be done with the agent, then freeze what the agent saw of its
    shutdown into ``outcome.shutdown`` (before the checker ends anything itself)."""
    try:
        await _wait_shutdown(process, end, script, settings, linger, outcome)
    finally:
        outcome.shutdown = Shutdown(end.stdin_closed, list(end.signals), end.gone, end.goodbye)


async def _wait_shutdown(
    process: trio.Process, end: AgentEnd, script: Script, settings: Settings, linger: bool, outcome: RunOutcome
) -> None:
    idle = settings.answer_timeout + 5.0  # a turn's probes each wait at most answer_timeout
    # until the client is done with the agent: its stdin closed, a signal, the socket gone, or idle
    while end.gone is None and end.stdin_closed is None and not end.signals:
        if process.returncode is not None:
            with trio.move_on_after(1):  # the stdin EOF of an exited client arrives promptly
                while end.stdin_closed is None and end.gone is None:
                    await end.wait_change()
            break
        if time.monotonic() - end.last_activity > idle:
            outcome.note = f"the client sent nothing for {idle:g} s and did not close the agent's stdin"
            return
        with trio.move_on_after(0.2):
            await end.wait_change()
    if not linger:
        await end.wait_gone(settings.shutdown_timeout)
        return
    # the lingering agent: each step (stdin closed, each signal) gets a fresh bound
    seen_signals = len(end.signals)
    deadline = time.monotonic() + settings.shutdown_timeout
    while end.gone is None:
        if len(end.signals) > seen_signals:
            seen_signals = len(end.signals)
            deadline = time.monotonic() + settings.shutdown_timeout
        if process.returncode is not None:
            await end.wait_gone(1)
            if end.gone is None:
                outcome.note = f"the client exited (code {process.returncode}) leaving the agent running"
            return
        if time.monotonic() > deadline:
            step = "its stdin closed" if not end.signals else signal.Signals(end.signals[-1][1]).name
            outcome.note = f"the client did nothing more for {settings.shutdown_timeout:g} s after {step}"
            return
        with trio.move_on_after(0.2):
            await end.wait_change()


# -- the verdicts ---------------------------------------------------------------------------------------
def _lifecycle_stdin(first: RunOutcome, settings: Settings) -> Result:
    seen = first.shutdown
    if first.end is None or seen is None:
        return Result(Status.SKIP, first.note or "the client never started the agent")
    signalled = seen.signals[0][0] if seen.signals else None
    if seen.stdin_closed is not None and (signalled is None or seen.stdin_closed <= signalled):
        return Result(Status.PASS, "the agent's stdin closed, then the agent exited")
    if signalled is not None:
        name = signal.Signals(seen.signals[0][1]).name
        return Result(Status.WARN, f"the client sent {name} to the agent without closing its stdin first")
    if seen.gone is not None:
        return Result(Status.WARN, "the agent was killed without its stdin being closed first")
    return Result(
        Status.WARN,
        first.note or f"the agent's stdin was still open {settings.shutdown_timeout:g} s after the last message",
    )


def _lifecycle_terminate(second: RunOutcome) -> Result:
    seen = second.shutdown
    if second.end is None or seen is None:
        return Result(Status.SKIP, second.note or "the client never started the (lingering) agent")
    names = [signal.Signals(s).name for _t, s in seen.signals]
    sent = f"sent {', '.join(names)}" if names else "sent no signal"
    what = "an agent ignoring its stdin closing and SIGTERM"
    if seen.gone is not None and not seen.goodbye:
        killed = f"the client {sent}, then killed it (SIGKILL)" if names else "the client killed it (SIGKILL) at once"
        return Result(Status.PASS, f"{what}: {killed}")
    return Result(Status.WARN, f"{what}: the client {sent}; {second.note or 'it was still running'}")


def _prompt_response(first: RunOutcome) -> Result:
    script, end, seen = first.script, first.end, first.shutdown
    if script is None or end is None or script.probe_answer_at is None:
        return Result(Status.SKIP, "the probe turn never ended (see the checks before)")
    if script.probe_cancelled:
        return Result(Status.SKIP, "the client cancelled the probe turn (its answer then says cancelled)")
    what = f"after {'its answer' if script.v2 else 'the session/prompt answer'} with an unknown field, the client"
    later = [m["method"] for m in end.received[script.probe_answer_index :] if isinstance(m.get("method"), str)]
    if later:
        return Result(Status.PASS, f"{what} sent {later[0]}")
    closed = seen is not None and seen.stdin_closed is not None and seen.stdin_closed >= script.probe_answer_at
    if first.stopped:
        return Result(Status.SKIP, f"{what} did nothing more and was stopped by the checker (see lifecycle.stdin)")
    if first.exit_code not in (0, None):
        return Result(Status.FAIL, f"{what} exited with code {first.exit_code}")
    if closed:
        return Result(Status.PASS, f"{what} closed the agent's stdin")
    return Result(Status.FAIL, f"{what} did nothing more")


async def run_client_checks(
    command: Sequence[str],
    *,
    protocol: int = 1,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    answer_timeout: float = 10.0,
    cancel_wait: float = 5.0,
    shutdown_timeout: float = 10.0,
    start_timeout: float = START_TIMEOUT,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Check the ACP client ``command`` (program and arguments, one of them ``{AGENT}``); a
    :class:`~acp_trio.check.Report` (``kind`` ``"client"``), one finding per :data:`CLIENT_CHECKS`
    entry selected.

    ``protocol``: the version the stand-in agent speaks (1 or 2).  ``only``/``skip``: check names
    or prefixes.  ``answer_timeout``: seconds the client may take to answer each request of the
    stand-in.  ``cancel_wait``: seconds a turn is held open for the client to cancel (0: never).
    ``shutdown_timeout``: seconds for each shutdown step (closing stdin, then each signal).
    ``start_timeout``: seconds the client may take to start the agent (``--start-timeout``).
    ``progress``: called with each check's name as it starts.  The client is started twice (a
    second time with an agent that lingers).  Raises ``ValueError`` when no argument is
    ``{AGENT}`` or the protocol is not 1 or 2, ``OSError`` when the client cannot be started.
    """
    from . import Finding, Report, _selected

    if protocol not in (1, 2):
        raise ValueError(f"protocol must be 1 or 2, got {protocol}")
    substitute(command, ["agent"])  # a usage error before anything starts
    if not command or (not shutil.which(command[0]) and not os.path.exists(command[0])):
        raise OSError(f"cannot start the client {command[0] if command else ''!r}: no such program")

    def selected(name: str) -> bool:
        return _selected(name, only, skip)

    settings = Settings(protocol, answer_timeout, cancel_wait, shutdown_timeout, selected, progress, start_timeout)
    schema = ClientSchema(f"v{protocol}")
    report = Report(list(command), protocol)
    outside = Path(tempfile.mkdtemp(prefix="acp-check-outside-"))
    try:
        if progress is not None:
            progress("run 1: the probe turn")
        first = await _one_run(command, settings, schema, outside, 1, False)
        need_second = selected("lifecycle.terminate") or (
            selected("session.cancel") and first.script is not None and not first.script.held
        )
        second = RunOutcome(None, None, None, "", False, "not run")
        if need_second and first.started:
            if progress is not None:
                progress("run 2: a lingering agent")
            hold = first.script is not None and not first.script.held and cancel_wait > 0
            second = await _one_run(command, settings, schema, outside, 2, hold)
    finally:
        shutil.rmtree(outside, ignore_errors=True)
    results: dict[str, Result] = {}
    for outcome in (first, second):
        if outcome.script is not None:
            for name, result in outcome.script.results.items():
                results.setdefault(name, result)
            for name, result in outcome.script.in_flight.items():
                results.setdefault(name, result)
    gone_note = first.note or (
        f"the client exited (code {first.exit_code}) before this probe" if first.exit_code is not None else ""
    )
    if not first.started:
        why = first.note or "the client never started the agent"
        if first.stderr_tail:
            why += f"; its stderr ends: {first.stderr_tail[-200:]}"
        results.setdefault("client.initialize", Result(Status.FAIL, why))
    elif first.script is not None and not first.script.initialized:
        results.setdefault(
            "client.initialize",
            Result(Status.FAIL, f"no initialize within {answer_timeout:g} s ({gone_note or 'silent'})"),
        )
    if "lifecycle.stdin" not in results:
        results["lifecycle.stdin"] = _lifecycle_stdin(first, settings)
    if selected("lifecycle.terminate"):
        results["lifecycle.terminate"] = _lifecycle_terminate(second)
    results["session.prompt-response"] = _prompt_response(first)
    if first.script is not None and not first.script.held and "session.cancel" not in results:
        results["session.cancel"] = Result(
            Status.SKIP, "the client never prompted a turn that could be held open for a cancel"
        )
    ends = [o.end for o in (first, second) if o.end is not None]
    messages = sum(len(e.received) for e in ends)
    not_jsonrpc = [line for e in ends for line in e.not_jsonrpc]
    invalid = [problem for e in ends for problem in e.invalid]
    for name, problems, fine in (
        ("stdin.jsonrpc", not_jsonrpc, f"{messages} messages, every line JSON-RPC"),
        ("schema.valid", invalid, f"{messages} messages valid against v{protocol}"),
    ):
        if problems:
            distinct = list(dict.fromkeys(problems))
            more = f" (and {len(distinct) - 1} other problems, listed below)" if len(distinct) > 1 else ""
            results[name] = Result(
                Status.FAIL, distinct[0] + more, details=tuple(distinct) if len(distinct) > 1 else ()
            )
        elif messages:
            results[name] = Result(Status.PASS, fine)
        else:
            results[name] = Result(Status.SKIP, "no message was received")
    for check in CLIENT_CHECKS:
        if not selected(check.name):
            continue
        found = results.get(check.name)
        if found is not None:
            result = found
        else:
            reason = gone_note or "the client's script never reached this probe"
            script = first.script
            if script is not None and not script.initialized:
                reason = "the client never sent initialize"
            elif script is not None and not script.session_requested:
                reason = "the client never sent session/new"
            elif script is not None and script.turns == 0:
                reason = "the client never sent session/prompt"
            result = Result(Status.SKIP, reason)
        source = check.source_for(protocol).replace("schema/v1/", f"schema/v{protocol}/")
        report.findings.append(
            Finding(check.name, check.title, result.status, result.observed, source, 0.0, details=result.details)
        )
    return report

"""The checker's side of the wire: a scripted ACP client that speaks raw NDJSON to an agent process.

It writes exactly the bytes a check asks for (malformed JSON included), reads every line the agent
writes, and records what the rules are checked against: lines that are not one JSON-RPC message,
messages that do not validate against the pinned schema, requests the agent sends for
capabilities the checker's client did not advertise (the capabilities of the ``initialize`` it
sent on that connection), and what the agent wrote on stderr.  Requests from the agent are
answered as a plain client would: ``session/request_permission`` with the first ``allow`` option
(else cancelled) unless a check holds it back, ``fs/*`` and ``terminal/*`` with ``-32601`` unless
advertised (then ``fs/read_text_file`` from the files of :attr:`WirePeer.files`, ``-32002`` for
others, ``fs/write_text_file`` into that dict, and terminals that run nothing and exit 0),
anything else with ``-32601``.
"""

from __future__ import annotations

import itertools
import logging
import math
import shlex
import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

from .._core import LineFramer, OversizedMessage
from .._errors import ConnectionClosed
from ..transports.stdio import AgentProcess, open_agent_process
from ._schema import WireSchema, wire_schema

MAX_LINE = 64 * 1024 * 1024


@dataclass
class Observations:
    """What every agent process of one run did wrong on the wire (shared by all checks)."""

    not_jsonrpc: list[str] = field(default_factory=list)  # lines on stdout that are not one message
    invalid: list[str] = field(default_factory=list)  # schema violations, each "what: why"
    uncapable: list[str] = field(default_factory=list)  # fs/terminal requests without the capability
    tool_calls: list[str] = field(default_factory=list)  # tool_call_update for a tool call never reported
    stderr: list[str] = field(default_factory=list)  # stderr lines that are not logs (JSON-RPC, not UTF-8)
    stderr_lines: int = 0
    tool_call_count: int = 0  # tool_call updates seen
    messages: int = 0

    def note_stderr(self, lines: Sequence[str]) -> None:
        """transports.mdx § stdio: the agent MAY write UTF-8 strings to stderr for logging."""
        self.stderr_lines += len(lines)
        for line in lines:
            if "\ufffd" in line:
                self.stderr.append(f"a stderr line that is not UTF-8: {show_line(line.encode())}")
                continue
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(message, dict) and message.get("jsonrpc") == "2.0":
                shown = show_line(line.encode())
                self.stderr.append(f"a JSON-RPC message on stderr (protocol goes on stdout): {shown}")


class AgentGone(Exception):
    """The agent process ended, or closed its stdout, while a check waited for it (or wrote to it).

    ``waiting_for``: the method of the request the check was sending or awaiting the answer to
    (``None`` while it waited for a notification); ``ended``: how the agent's process ended, a
    :class:`~acp_trio.ConnectionClosed` with ``exit_code``, ``signal`` and ``stderr_tail`` (``None``
    when the agent is not a process: in memory, or remote).  ``str(exc)`` is one line for the report.
    """

    def __init__(self, waiting_for: str | None = None, ended: ConnectionClosed | None = None) -> None:
        self.waiting_for = waiting_for
        self.ended = ended
        super().__init__(self._describe())

    @property
    def exited(self) -> bool:
        """Whether the agent's process is known to have ended (an exit code or a signal)."""
        return self.ended is not None and (self.ended.exit_code is not None or self.ended.signal is not None)

    def _describe(self) -> str:
        if self.ended is None:
            return "the agent closed its stdout (the process ended?)"
        when = f" while the checker waited for its answer to {self.waiting_for}" if self.waiting_for else ""
        if not self.exited:
            return f"the agent closed its stdout{when}; its process is still running"
        lines = [line for line in self.ended.stderr_tail if line.strip()]
        said = f"; its last stderr line: {lines[-1].strip()[:300]}" if lines else "; it wrote nothing to stderr"
        return f"{exit_text(self.ended)}{when}{said}"


def exit_text(ended: ConnectionClosed) -> str:
    """How an agent process ended, from :meth:`AgentProcess.describe_exit`: ``the agent exited with
    code 1``, ``the agent was killed by SIGKILL``, or ``the agent closed its stdout but is still running``."""
    if ended.signal is not None:
        try:
            name = signal.Signals(ended.signal).name
        except ValueError:
            name = f"signal {ended.signal}"
        return f"the agent was killed by {name}"
    if ended.exit_code is not None:
        return f"the agent exited with code {ended.exit_code}"
    return "the agent closed its stdout but is still running"


class AgentExited(OSError):
    """The checks cannot run: the agent process exited (or was killed) before answering the first
    ``initialize`` of the run, having written no JSON-RPC message.  ``command``: the agent command;
    ``exit_code`` / ``signal``: how it ended (one of them ``None``); ``stderr_tail``: its last stderr
    lines (at most 20 lines / 4 KiB); ``stdout``: the first lines it wrote on stdout, none of them
    JSON-RPC.  ``str(exc)`` says all of it: one line, then the stderr lines indented (``the agent
    exited with code 1 before answering initialize; its last stderr lines:`` then the traceback), or
    what to run to see why when it wrote nothing.  An ``OSError``, as an agent command that cannot
    be started."""

    def __init__(self, command: Sequence[str], ended: ConnectionClosed, stdout: Sequence[bytes] = ()) -> None:
        self.command = list(command)
        self.exit_code = ended.exit_code
        self.signal = ended.signal
        self.stderr_tail = ended.stderr_tail
        self.stdout = [show_line(line) for line in stdout if line.strip()][:3]
        text = f"{exit_text(ended)} before answering initialize"
        if self.stdout:
            text += "; its stdout, where only JSON-RPC belongs, said: " + " | ".join(self.stdout)
        if self.stderr_tail:
            text += "; its last stderr lines:\n" + "\n".join("  " + line for line in self.stderr_tail)
        else:
            text += f"; it wrote nothing to stderr: run {shlex.join(self.command)} by hand to see why"
            if self.exit_code == 0:
                text += " (an ACP agent serves the requests on its stdin until stdin closes: is this its command?)"
        super().__init__(text)

    def __str__(self) -> str:
        return str(self.args[0])


START_TIMEOUT = 30.0
"""Seconds an agent may take, from its start, to answer ``initialize`` (``--start-timeout``): twice
the slowest start seen (opencode answers ``initialize`` after 10 to 13 s; pydantic-acp took over 10 s
on a busy machine), and the default of acp-tck's ``--startup-timeout``.  Only an agent
that never answers pays it, once: the run stops at ``initialize.version``."""


class StartTimeout(trio.TooSlowError):
    """The agent answered no ``initialize`` within ``seconds`` of its start (its process started, or
    its connection opened), while the checker waited for the answer to ``waiting_for`` (a method, or
    ``None`` for any message).  ``str(exc)`` is the report's line, naming ``--start-timeout``."""

    def __init__(self, waiting_for: str | None, seconds: float) -> None:
        self.waiting_for = waiting_for
        self.seconds = seconds
        what = f"no answer to {waiting_for}" if waiting_for else "no message"
        super().__init__(
            f"{what} within {seconds:g} s of the agent's start (--start-timeout {seconds:g}): "
            "an agent slow to start needs a larger --start-timeout"
        )


class WirePeer:
    """One agent process, driven line by line (see :func:`run_with_peer`).

    ``start_timeout``: until the agent has answered an ``initialize`` (a result or an error), every
    wait for it ends ``start_timeout`` seconds after the peer was made (its process started, its
    connection opened), whatever the wait's own timeout, and raises :class:`StartTimeout`; after
    that, each wait has its own.  (An agent served by a runtime may answer other requests while its
    ``initialize`` handler is still busy: its start-up is over when ``initialize`` is.)
    """

    def __init__(
        self, target: Any, schema: WireSchema, seen: Observations, *, start_timeout: float = START_TIMEOUT
    ) -> None:
        self.target = target
        self.start_timeout = start_timeout
        self.opened = trio.current_time()
        self.started = False  # whether the agent has answered an initialize: its start-up is over
        self.started_at: float | None = None  # when it did (trio.current_time())
        self.schema = schema
        self.seen = seen
        self.capabilities: dict[str, Any] = {}  # the client capabilities of the initialize sent, wire JSON
        self.files: dict[str, str] = {}  # absolute path → text: what fs/read_text_file serves, and writes
        self.hold_permissions = False  # leave session/request_permission unanswered (see ``pending``)
        self.pending: list[dict[str, Any]] = []  # the permission requests held back
        self.agent_requests: list[str] = []  # the method of every request the agent sent, in order
        self._terminals = 0
        self.received: list[dict[str, Any]] = []  # every message, in order
        self.raw: list[bytes] = []  # every line, in order
        self._sent_methods: dict[str, str] = {}  # our request id (as JSON text) → method
        self._changed = trio.lowlevel.ParkingLot()
        self.ended = False
        self._next_id = 1
        self._tool_calls: set[tuple[Any, Any]] = set()  # (session id, tool call id) reported by tool_call
        # the reading task answers the agent's requests while a check sends its own: one writer at a time
        self._send_lock = trio.StrictFIFOLock()

    # -- writing -----------------------------------------------------------------------------------
    async def send_raw(self, data: bytes, *, method: str | None = None, request_id: Any = None) -> None:
        """Write ``data`` to the agent's stdin, whole, after any write already under way.  Raises
        :class:`AgentGone` (``waiting_for``: ``method``) when the agent closed its stdin (it ended).
        ``request_id`` (with ``method``): the id of the request ``data`` is, so that its answer is
        known as the answer to ``method``."""
        if method is not None and request_id is not None:
            self._sent_methods[orjson.dumps(request_id).decode()] = method
        starting = not self.started  # a write that waits for the agent (a POST held until its answer)
        try:
            with trio.move_on_at(self._deadline(math.inf)) as sending:
                await self._write(data)
        except trio.BrokenResourceError:
            raise await self.gone(method) from None
        if sending.cancelled_caught:
            raise self._too_slow(starting, method)

    async def _write(self, data: bytes) -> None:
        async with self._send_lock:
            await self.target.stdin.send_all(data)

    async def send(self, message: dict[str, Any]) -> None:
        method = None
        if "method" in message and "id" in message:
            method = message["method"]
            self._sent_methods[orjson.dumps(message["id"]).decode()] = method
            if method == "initialize" and isinstance(message.get("params"), dict):
                # v1 advertises fs and terminal in clientCapabilities; v2 has neither method
                self.capabilities = dict(message["params"].get("clientCapabilities") or {})
        await self.send_raw(orjson.dumps(message) + b"\n", method=method if isinstance(method, str) else None)

    async def gone(self, waiting_for: str | None) -> AgentGone:
        """The :class:`AgentGone` for an agent whose stdout ended (or stdin broke) while a check was
        sending or awaiting ``waiting_for``: for a process, how it ended and its last stderr lines
        (waits at most 0.7 s for them)."""
        describe = getattr(self.target, "describe_end", None)
        ended = await describe() if describe is not None else None
        return AgentGone(waiting_for, ended)

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def request(
        self, method: str, params: Any = None, *, id: Any = None, timeout: float = 10.0
    ) -> dict[str, Any]:
        """Send a request and wait (at most ``timeout`` seconds) for the response with its id."""
        request_id = self.new_id() if id is None else id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.response(request_id, timeout)

    async def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    # -- reading -----------------------------------------------------------------------------------
    def _deadline(self, timeout: float) -> float:
        """When a wait of ``timeout`` seconds begun now ends: before the agent has answered an
        ``initialize``, the end of its start-up time instead (see :class:`WirePeer`)."""
        if not self.started:
            return self.opened + self.start_timeout
        return trio.current_time() + timeout

    def _started_late(self) -> bool:
        """Whether the agent answered its first ``initialize`` after its start-up time."""
        return self.started_at is not None and self.started_at > self.opened + self.start_timeout

    def _too_slow(self, starting: bool, waiting_for: str | None) -> trio.TooSlowError:
        """The error of a wait that timed out; ``starting``: whether it began in the start-up time (its
        answer may have come in just as that ended: it still came too late)."""
        return StartTimeout(waiting_for, self.start_timeout) if starting else trio.TooSlowError()

    async def response(self, request_id: Any, timeout: float) -> dict[str, Any]:
        """The response whose id equals ``request_id``, within ``timeout`` seconds (before the agent
        answered an ``initialize``: within its start-up time); raises ``trio.TooSlowError``
        (:class:`StartTimeout` during the start-up time) or :class:`AgentGone`."""
        method = self._sent_methods.get(orjson.dumps(request_id).decode())
        starting = not self.started
        with trio.move_on_at(self._deadline(timeout)) as waited:
            while True:
                for message in self.received:
                    if "method" not in message and message.get("id", math.nan) == request_id:
                        if type(message.get("id")) is type(request_id):
                            if starting and self._started_late():  # seen only after a write held until
                                raise self._too_slow(starting, method)  # the answer (Streamable HTTP)
                            return message
                if self.ended:
                    break
                await self._changed.park()
        if waited.cancelled_caught:
            raise self._too_slow(starting, method)
        raise await self.gone(method)

    async def wait_for(self, predicate: Any, timeout: float, start: int = 0) -> dict[str, Any]:
        """The first message from ``received[start]`` on that satisfies ``predicate`` (waits at most
        ``timeout`` seconds, or the start-up time before an ``initialize`` answer: ``trio.TooSlowError``,
        :class:`StartTimeout`; :class:`AgentGone` if the agent went away first)."""
        starting = not self.started
        with trio.move_on_at(self._deadline(timeout)) as waited:
            while True:
                for message in self.received[start:]:
                    if predicate(message):
                        return message
                if self.ended:
                    break
                await self._changed.park()
        if waited.cancelled_caught:
            raise self._too_slow(starting, None)
        raise await self.gone(None)

    async def read_forever(self) -> None:
        framer = LineFramer(MAX_LINE)
        try:
            while True:
                try:
                    data = await self.target.stdout.receive_some(1 << 16)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                for line in framer.feed(data) if data else framer.close():
                    if isinstance(line, OversizedMessage):
                        self.seen.not_jsonrpc.append(f"a line of {line.size} bytes (over {MAX_LINE})")
                        continue
                    await self._on_line(line)
                if not data:
                    return
        finally:
            self.ended = True
            self._changed.unpark_all()

    async def _on_line(self, line: bytes) -> None:
        self.raw.append(line)
        if not line.strip():
            return
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.seen.not_jsonrpc.append(show_line(line))
            return
        if isinstance(message, list) and message and not self.schema.variant.startswith("v1"):
            # v2 transports.mdx § JSON-RPC Batch Messages: a line may hold a batch (one or more messages)
            if all(isinstance(entry, dict) and entry.get("jsonrpc") == "2.0" for entry in message):
                for entry in message:
                    await self._on_message(entry)
                return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self.seen.not_jsonrpc.append(show_line(line))
            return
        await self._on_message(message)

    async def _on_message(self, message: dict[str, Any]) -> None:
        self.seen.messages += 1
        self.received.append(message)
        self._changed.unpark_all()
        method = message.get("method")
        if isinstance(method, str):
            problem = self.schema.check_from_agent(method, message.get("params"), "id" in message)
        else:
            sent = self._sent_methods.get(orjson.dumps(message.get("id")).decode())
            problem = self._schema_of_answer(sent, message).check_response(sent, message)
            if sent == "initialize" and not self.started:
                self.started, self.started_at = True, trio.current_time()
        if problem:
            self.seen.invalid.append(problem)
        if method == "session/update" and self.schema.variant.startswith("v1"):  # v2: upserts
            self._track_tool_calls(message.get("params"))
        if isinstance(method, str) and "id" in message:
            self.agent_requests.append(method)
            if method == "session/request_permission" and self.hold_permissions:
                self.pending.append(message)
                return
            await self._answer(message)

    def _schema_of_answer(self, method: str | None, message: dict[str, Any]) -> WireSchema:
        """initialization.mdx § Version Negotiation: an ``initialize`` answer is in the shape of the
        version it negotiates (an agent asked for 999 answers its own latest)."""
        result = message.get("result")
        if method == "initialize" and isinstance(result, dict):
            version = result.get("protocolVersion")
            if type(version) is int and f"v{version}" != self.schema.variant:
                try:
                    return wire_schema(f"v{version}")
                except ModuleNotFoundError:  # a version this acp-trio does not know: keep ours
                    pass
        return self.schema

    def _track_tool_calls(self, params: Any) -> None:
        """tool-calls.mdx: a ``tool_call_update`` updates a tool call the agent reported with ``tool_call``."""
        if not isinstance(params, dict) or not isinstance(params.get("update"), dict):
            return
        update = params["update"]
        key = (params.get("sessionId"), update.get("toolCallId"))
        kind = update.get("sessionUpdate")
        if kind == "tool_call":
            self._tool_calls.add(key)
            self.seen.tool_call_count += 1
        elif kind == "tool_call_update" and key not in self._tool_calls:
            self.seen.tool_calls.append(f"tool_call_update for {key[1]!r} in session {key[0]!r}, never reported")

    async def answer(self, request: dict[str, Any], *, result: Any = None, error: Any = None) -> None:
        """Send the response to ``request`` (a request the agent sent): ``error`` if given, else ``result``."""
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        if error is not None:
            reply["error"] = error
        else:
            reply["result"] = result
        try:
            await self._write(orjson.dumps(reply) + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _answer(self, message: dict[str, Any]) -> None:
        method = message["method"]
        raw_params = message.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        fs = self.capabilities.get("fs") or {}
        if method == "session/request_permission":
            options = params.get("options") or []
            allow = next(
                (o for o in options if isinstance(o, dict) and str(o.get("kind", "")).startswith("allow")), None
            )
            if allow is not None:
                await self.answer(
                    message, result={"outcome": {"outcome": "selected", "optionId": allow.get("optionId")}}
                )
            else:
                await self.answer(message, result={"outcome": {"outcome": "cancelled"}})
        elif method == "fs/read_text_file" and fs.get("readTextFile"):
            path = params.get("path")
            if isinstance(path, str) and path in self.files:
                await self.answer(message, result={"content": self.files[path]})
            else:
                await self.answer(
                    message, error={"code": -32002, "message": "Resource not found", "data": {"path": path}}
                )
        elif method == "fs/write_text_file" and fs.get("writeTextFile"):
            if isinstance(params.get("path"), str) and isinstance(params.get("content"), str):
                self.files[params["path"]] = params["content"]
            await self.answer(message, result={})
        elif method.startswith("terminal/") and self.capabilities.get("terminal"):
            await self.answer(message, result=self._terminal(method))
        elif method.startswith(("fs/", "terminal/")):
            self.seen.uncapable.append(f"{method} (the client advertised {_caps_text(self.capabilities)})")
            await self.answer(message, error={"code": -32601, "message": f"Method not found: {method}"})
        else:
            await self.answer(message, error={"code": -32601, "message": f"Method not found: {method}"})

    def _terminal(self, method: str) -> Any:
        """terminals.mdx: a terminal that runs nothing and has exited 0."""
        if method == "terminal/create":
            self._terminals += 1
            return {"terminalId": f"term_acp_check_{self._terminals}"}
        if method == "terminal/output":
            return {"output": "", "truncated": False, "exitStatus": {"exitCode": 0}}
        if method == "terminal/wait_for_exit":
            return {"exitCode": 0}
        return {}


def _caps_text(capabilities: dict[str, Any]) -> str:
    return orjson.dumps(capabilities).decode()


def show_line(line: bytes) -> str:
    """A raw line for a report: decoded (invalid UTF-8 replaced), cut at 120 characters."""
    text = line.decode("utf-8", "replace")
    return text if len(text) <= 120 else text[:117] + "..."


def show(message: Any, limit: int = 200) -> str:
    """A message as compact JSON for a report, cut at ``limit`` characters."""
    text = orjson.dumps(message).decode()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_code(message: dict[str, Any]) -> Any:
    """The ``error.code`` of a response, or ``None``."""
    error = message.get("error")
    return error.get("code") if isinstance(error, dict) else None


class _StderrLines(logging.Handler):
    """Keeps the lines of one agent's stderr (``open_agent_process`` logs each at INFO)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) < 10_000:
            self.lines.append(record.getMessage())


class ProcessTarget:
    """An agent process as the checker sees it: ``stdin``, ``stdout``, its exit, its stderr lines."""

    def __init__(self, agent: AgentProcess, stderr_lines: list[str], command: Sequence[str] = ()) -> None:
        self.stdin: trio.abc.SendStream = agent.stdin
        self.stdout: trio.abc.ReceiveStream = agent.stdout
        self._agent = agent
        self._process = agent.process
        self.stderr_lines = stderr_lines
        self.command = list(command)

    async def wait_exit(self) -> str:
        """Wait until it exits; say how (``"code 0"``)."""
        await self._process.wait()
        return f"code {self._process.returncode}"

    async def describe_end(self) -> ConnectionClosed:
        """How the process ended, once its stdout did: exit code or signal (``None`` both while it
        still runs) and its last stderr lines; waits at most 0.7 s for them."""
        return await self._agent.describe_exit("the agent closed its stdout")


class MemoryTarget:
    """An agent object served by an :class:`~acp_trio.AgentSideConnection` in this process."""

    def __init__(self, stdin: trio.abc.SendStream, stdout: trio.abc.ReceiveStream, ended: trio.Event) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self._ended = ended

    async def wait_exit(self) -> str:
        await self._ended.wait()
        return "its connection closed"


_loggers = itertools.count()  # one logger name per agent process, unique in this interpreter


def process_target(command: Sequence[str], shutdown_timeout: float) -> Any:
    @asynccontextmanager
    async def open_target() -> AsyncIterator[ProcessTarget]:
        logger = logging.getLogger(f"acp_trio.check.stderr.{next(_loggers)}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        handler = _StderrLines()
        logger.addHandler(handler)
        try:
            async with open_agent_process(
                command[0], list(command[1:]), shutdown_timeout=shutdown_timeout, stderr_logger=logger
            ) as agent:
                yield ProcessTarget(agent, handler.lines, command)
        finally:
            logger.removeHandler(handler)
            logging.Logger.manager.loggerDict.pop(logger.name, None)

    return open_target


def memory_target(agent: Any, options: dict[str, Any]) -> Any:
    """Serve ``agent`` (an object or a factory, as for ``AgentSideConnection``) in memory per check."""

    @asynccontextmanager
    async def open_target() -> AsyncIterator[MemoryTarget]:
        from trio.testing import memory_stream_one_way_pair

        from .._roles import AgentSideConnection

        to_agent, agent_input = memory_stream_one_way_pair()
        agent_output, from_agent = memory_stream_one_way_pair()
        ended = trio.Event()

        async def serve() -> None:
            try:
                async with AgentSideConnection(agent, agent_output, agent_input, **options) as conn:
                    await conn.wait_closed()
            finally:
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(agent_output)
                ended.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            try:
                yield MemoryTarget(to_agent, from_agent, ended)
            finally:
                await trio.aclose_forcefully(to_agent)
                with trio.move_on_after(2):
                    await ended.wait()
                nursery.cancel_scope.cancel()

    return open_target


class AgentUnreachable(ConnectionError):
    """The checks cannot run: the agent's server at ``url`` refused the connection (``status``: the
    HTTP status, 401 without the right bearer token, 403 for an Origin not allowed, ...) or nothing
    answered there (``status`` ``None``).  ``str(exc)`` is one line saying which and what to pass
    or do instead.  An ``OSError``, as an agent command that cannot be started."""

    def __init__(self, url: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status

    def __str__(self) -> str:
        return str(self.args[0])


_MEANINGS = {401: "not authorized", 403: "forbidden", 404: "not found"}


def refusal(url: str, headers: dict[str, str], status: int, body: str = "") -> AgentUnreachable:
    """The :class:`AgentUnreachable` for a server that answered the connection (the WebSocket
    upgrade, or the ``initialize`` POST) with the HTTP ``status`` (``body``: its text, if known)."""
    sent = {name.lower(): value for name, value in headers.items()}
    said = f"the server at {url} refused the connection with HTTP {status}"
    if status == 401 and "authorization" in sent:
        hint = "it did not accept the token of --header 'Authorization: ...'; pass the one it was started with"
    elif status == 401:
        hint = "pass its bearer token with --header 'Authorization: Bearer TOKEN'"
    elif status == 403 and "origin" in sent:
        hint = (
            f"it does not allow the Origin {sent['origin']!r} sent with --header; drop that header, "
            "or allow the origin on the server (AcpApp(allowed_origins=[...]))"
        )
    elif status == 403:
        hint = "it does not let this client in: see what it requires (--header 'Name: value' sends a header)"
    elif status == 404:
        hint = "check the path of --url (acp-trio's servers answer on /acp)"
    else:
        hint = "the checks need a server that accepts an ACP connection there"
    meaning = _MEANINGS.get(status) or " ".join(body.split())[:200]
    return AgentUnreachable(url, f"{said}{f' ({meaning})' if meaning else ''}: {hint}", status)


async def reach(url: str, timeout: float = 10.0) -> None:
    """Open (and close) a TCP connection to the host and port of ``url``; raises
    :class:`AgentUnreachable` saying why when none opens within ``timeout`` seconds, ``ValueError``
    for a port that is not one."""
    from ..transports._address import connect_failure, where

    try:
        host, at = where(url, strict=True)
    except ValueError as exc:
        raise ValueError(f"--url {url!r}: {exc}") from None
    fix = "start the agent's server, or fix the host and port of --url"
    try:
        with trio.fail_after(timeout):
            stream = await trio.open_tcp_stream(host, int(at.rsplit(":", 1)[1]))
    except trio.TooSlowError:
        raise AgentUnreachable(url, f"nothing answered at {at} within {timeout:g} s: {fix}") from None
    except OSError as exc:
        kind, why = connect_failure(exc)
        if kind == "refused":
            raise AgentUnreachable(url, f"nothing is listening at {at} (connection refused): {fix}") from None
        if kind == "unknown-host":
            raise AgentUnreachable(url, f"cannot find the host {host!r} ({why}): fix the host of --url") from None
        raise AgentUnreachable(url, f"cannot connect to {at} ({exc.strerror or exc}): {fix}") from None
    await trio.aclose_forcefully(stream)


class RemoteTarget:
    """An ACP server reached over WebSocket or Streamable HTTP: one new ACP connection per check."""

    def __init__(self, stdin: trio.abc.SendStream, stdout: trio.abc.ReceiveStream) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.remote = True

    async def wait_exit(self) -> str:
        raise NotImplementedError("a remote agent has no process to wait for")


def remote_target(url: str, headers: dict[str, str]) -> Any:
    """``ws://``/``wss://``: each line is one text frame; ``http://``/``https://``: each line is POSTed
    and each SSE event read back as a line (:func:`acp_trio.transports.http.open_exchange`)."""

    @asynccontextmanager
    async def open_target() -> AsyncIterator[RemoteTarget]:
        if url.startswith(("ws://", "wss://")):
            async with _websocket(url, headers) as target:
                yield target
            return
        from ..transports._lines import LineSendStream
        from ..transports.http import open_exchange

        async with open_exchange(url, headers=headers) as exchange:
            try:
                yield RemoteTarget(LineSendStream(exchange.post, "the Streamable HTTP send stream"), exchange.inbox)
            except Exception:
                _raise_refusal(url, headers, exchange)
                raise
            _raise_refusal(url, headers, exchange)

    return open_target


def _raise_refusal(url: str, headers: dict[str, str], exchange: Any) -> None:
    """Streamable HTTP: a server that answered the ``initialize`` POST 401, 403, 404 or 410 closed
    the exchange before it began (``exchange.fatal``); raise that as :class:`AgentUnreachable`."""
    fatal = exchange.fatal
    if fatal is not None and exchange.connection_id is None:
        if fatal.status is not None:
            raise refusal(url, headers, fatal.status) from None
        raise AgentUnreachable(url, f"the server at {url} did not answer initialize: {fatal.reason}") from None


@asynccontextmanager
async def _websocket(url: str, headers: dict[str, str]) -> AsyncIterator[RemoteTarget]:
    """One WebSocket to ``url`` as a :class:`RemoteTarget`; a refused upgrade (or no server) raises
    :class:`AgentUnreachable`."""
    import trio_websocket

    from ..transports.websocket import MessageReceiveStream, MessageSendStream, _open_websocket

    opened = False
    try:
        async with trio.open_nursery() as nursery:
            extra = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
            ws = await _open_websocket(nursery, url, None, extra, MAX_LINE)
            opened = True

            async def next_text() -> str | None:
                try:
                    message = await ws.get_message()
                except trio_websocket.ConnectionClosed:
                    return None
                ws.taken(len(message))
                return message if isinstance(message, str) else message.decode("utf-8", "replace")

            try:
                yield RemoteTarget(MessageSendStream(ws.send_message), MessageReceiveStream(next_text))
            finally:
                with trio.move_on_after(2) as scope:
                    scope.shield = True
                    await ws.aclose()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # a refused upgrade fails trio-websocket's reader task, so it comes out of the nursery
        failure = (OSError, trio_websocket.HandshakeError)
        refused = None if opened else group.subgroup(lambda exc: isinstance(exc, failure))
        if refused is None:
            raise
        first: BaseException = refused
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise _ws_refusal(url, headers, first) from None


def _ws_refusal(url: str, headers: dict[str, str], exc: BaseException) -> AgentUnreachable:
    import trio_websocket

    if isinstance(exc, trio_websocket.ConnectionRejected):
        body = (exc.body or b"")[:1024].decode("utf-8", "replace").strip()
        return refusal(url, headers, exc.status_code, body)
    return AgentUnreachable(url, f"cannot open the WebSocket {url}: {exc}")


async def run_with_peer(
    open_target: Any,
    schema: WireSchema,
    seen: Observations,
    body: Any,
    *,
    start_timeout: float = START_TIMEOUT,
) -> Any:
    """Open a fresh target, run ``await body(peer)``, then shut it down; returns ``body``'s result.
    The target's stderr lines (a process's) go to ``seen`` once it has exited.  ``start_timeout``:
    the seconds the agent may take to answer ``initialize`` (:class:`WirePeer`)."""
    async with open_target() as target:
        async with trio.open_nursery() as nursery:
            peer = WirePeer(target, schema, seen, start_timeout=start_timeout)
            nursery.start_soon(peer.read_forever)
            try:
                result = await body(peer)
            finally:
                nursery.cancel_scope.cancel()
    seen.note_stderr(getattr(target, "stderr_lines", ()))
    return result

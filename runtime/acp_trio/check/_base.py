"""What every check is made of: results, the run's context, and the client moves they share
(``initialize``, ``session/new``, a prompt turn in protocol 1 or 2)."""

from __future__ import annotations

import enum
import math
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from ._script import Script
from ._wire import START_TIMEOUT, AgentExited, AgentGone, StartTimeout, WirePeer
from ._wire import error_code as error_code
from ._wire import show as show

JSONRPC = "JSON-RPC 2.0 specification"
INIT = "docs/protocol/v1/initialization.mdx"
PROMPT = "docs/protocol/v1/prompt-turn.mdx"
SETUP = "docs/protocol/v1/session-setup.mdx"

CANCEL_BOUND = 2.0
"""Seconds an agent may take to end a turn after ``session/cancel`` ("as soon as possible")."""
STOP_REASONS = {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}
"""Protocol 1's stop reasons (``$defs/StopReason``); protocol 2 adds ``error`` and ``_``-prefixed
custom ones (``$defs/IdleStateUpdate``)."""


class Status(enum.Enum):
    """A finding's verdict: ``PASS``, ``FAIL`` (a broken rule: exit status 1), ``WARN`` (a SHOULD, or
    something suspicious) or ``SKIP`` (not applicable, with the reason)."""

    PASS = "PASS"
    FAIL = "FAIL"
    WARN = "WARN"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Result:
    """What one check concluded: its ``status`` and what it ``observed``; ``start_timeout``: whether
    it is a FAIL because the agent answered no ``initialize`` within its start-up time (``--start-timeout``);
    ``details``: every distinct problem, when a check over the whole run found several."""

    status: Status
    observed: str
    start_timeout: bool = False
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class Check:
    """One rule: ``name`` (dotted, for ``--only``/``--skip``), what it checks, its ``source``."""

    name: str
    title: str
    source: str
    run: Callable[[Context], Awaitable[Result]]
    protocols: tuple[int, ...] = (1, 2)
    turns: int = 2  # its time budget: this many turn timeouts, plus 60 s


@dataclass
class Context:
    """What a check gets: a way to run a body against a fresh agent, and the run's settings."""

    protocol: int
    with_peer: Callable[[Callable[[WirePeer], Awaitable[Any]]], Awaitable[Any]]
    cwd: str
    turn_timeout: float
    script: Script = field(default_factory=Script.default)
    http: bool = False
    start_timeout: float = START_TIMEOUT  # seconds an agent may take, from its start, to answer initialize

    @property
    def prompt(self) -> str:
        return self.script.text

    @property
    def notes_path(self) -> str:
        """A file the checker's client serves (``fs/read_text_file``) in the session directory."""
        return os.path.join(self.cwd, "acp-check-notes.txt")


def passed(observed: str) -> Result:
    return Result(Status.PASS, observed)


def failed(observed: str) -> Result:
    return Result(Status.FAIL, observed)


class Failed(Exception):
    """A check body's verdict: FAIL with this text (raised from shared moves like :func:`new_session`)."""


NO_CAPABILITIES: dict[str, Any] = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
ALL_CAPABILITIES: dict[str, Any] = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}
_CLIENT_INFO = {"name": "acp-trio-check", "version": "1"}


def initialize_params(version: int, protocol: int, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    """The checker's ``initialize`` params in ``protocol``'s shape (v2: ``info``, ``capabilities``).

    ``capabilities``: the protocol-1 client capabilities (default: no fs, no terminal)."""
    if protocol >= 2:
        return {"protocolVersion": version, "info": _CLIENT_INFO, "capabilities": {}}
    caps = NO_CAPABILITIES if capabilities is None else capabilities
    return {"protocolVersion": version, "clientCapabilities": caps, "clientInfo": _CLIENT_INFO}


async def initialize(
    peer: WirePeer,
    version: int,
    timeout: float = 10.0,
    id: Any = None,
    protocol: int | None = None,
    capabilities: dict[str, Any] | None = None,
) -> dict[str, Any]:
    params = initialize_params(version, version if protocol is None else protocol, capabilities)
    return await peer.request("initialize", params, id=id, timeout=timeout)


async def agent_capabilities(peer: WirePeer, ctx: Context, capabilities: dict[str, Any] | None = None) -> Any:
    """``initialize`` in the run's protocol; the capabilities it answered (protocol 1
    ``agentCapabilities``, 2 ``capabilities``; raises :class:`Failed`)."""
    answer = await initialize(peer, ctx.protocol, capabilities=capabilities)
    result = answer.get("result")
    if not isinstance(result, dict):
        raise Failed(f"initialize answered {show(answer)}")
    caps = result.get("capabilities" if ctx.protocol >= 2 else "agentCapabilities")
    return caps if isinstance(caps, dict) else {}


def session_capability(ctx: Context, caps: dict[str, Any], name: str) -> bool:
    """Whether the agent advertised the session method ``name`` (``list``, ``resume``, ``close``,
    ``delete``): protocol 1 ``sessionCapabilities.NAME``; protocol 2 ``session`` (the baseline list,
    resume and close) or ``session.NAME``."""
    if ctx.protocol >= 2:
        session = caps.get("session")
        if not isinstance(session, dict):
            return False
        return name in ("list", "resume", "close") or session.get(name) is not None
    session = caps.get("sessionCapabilities")
    return isinstance(session, dict) and session.get(name) is not None


def prompt_capabilities(ctx: Context, caps: dict[str, Any]) -> dict[str, Any]:
    """Protocol 1 ``promptCapabilities``; protocol 2 ``session.prompt``."""
    found = (caps.get("session") or {}).get("prompt") if ctx.protocol >= 2 else caps.get("promptCapabilities")
    return found if isinstance(found, dict) else {}


def agent_info(result: dict[str, Any]) -> Any:
    return result.get("agentInfo") if "agentInfo" in result else result.get("info")


async def new_session_result(peer: WirePeer, ctx: Context, **extra: Any) -> dict[str, Any]:
    """``session/new`` in the checker's directory; its result (raises :class:`Failed` naming the answer)."""
    params: dict[str, Any] = {"cwd": ctx.cwd, "mcpServers": [], **extra}
    answer = await peer.request("session/new", params, timeout=30)
    result = answer.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("sessionId"), str):
        if error_code(answer) == -32000:
            raise Failed(
                "session/new answered -32000 (authentication required): the checker does not authenticate; "
                "give the agent its credentials through its environment"
            )
        raise Failed(f"session/new answered {show(answer)}")
    return result


async def new_session(peer: WirePeer, ctx: Context) -> str:
    session_id: str = (await new_session_result(peer, ctx))["sessionId"]
    return session_id


def text_prompt(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


@dataclass
class Turn:
    """A prompt turn the checker started: its request id and where the wire stood when it began."""

    session_id: str
    request_id: int
    start: int  # index into peer.received when the request was sent
    sent: float  # time.monotonic() of the request


@dataclass
class TurnEnd:
    """How a turn ended: ``stop`` is the stop reason (protocol 1: the response's; protocol 2: the
    ``state_update`` ``idle``'s), ``None`` when the request failed (``answer`` holds the error)."""

    stop: str | None
    answer: dict[str, Any]
    updates: list[dict[str, Any]]  # every session/update ``update`` of the session during the turn
    ended: float  # time.monotonic() when the end was seen
    protocol: int = 1  # the run's protocol version


async def start_turn(peer: WirePeer, session_id: str, prompt: list[dict[str, Any]]) -> Turn:
    request_id = peer.new_id()
    start = len(peer.received)
    params = {"sessionId": session_id, "prompt": prompt}
    await peer.send({"jsonrpc": "2.0", "id": request_id, "method": "session/prompt", "params": params})
    return Turn(session_id, request_id, start, time.monotonic())


def session_updates(peer: WirePeer, session_id: str, start: int, end: int | None = None) -> list[dict[str, Any]]:
    """The ``update`` objects of ``session_id``'s ``session/update`` notifications in ``received[start:end]``."""
    found = []
    for message in peer.received[start:end]:
        params = message.get("params")
        if message.get("method") == "session/update" and isinstance(params, dict):
            if params.get("sessionId") == session_id and isinstance(params.get("update"), dict):
                found.append(params["update"])
    return found


def _is_idle(session_id: str) -> Callable[[dict[str, Any]], bool]:
    def idle(message: dict[str, Any]) -> bool:
        params = message.get("params")
        if message.get("method") != "session/update" or not isinstance(params, dict):
            return False
        update = params.get("update")
        return (
            params.get("sessionId") == session_id
            and isinstance(update, dict)
            and update.get("sessionUpdate") == "state_update"
            and update.get("state") == "idle"
        )

    return idle


async def finish_turn(peer: WirePeer, ctx: Context, turn: Turn, timeout: float | None = None) -> TurnEnd:
    """Wait (``timeout`` seconds, default the run's turn timeout) for the turn's end: protocol 1 the
    ``session/prompt`` response (prompt-turn.mdx); protocol 2 the response (it accepts the prompt)
    and then a ``state_update`` with ``state: "idle"`` (docs/protocol/v2/prompt-lifecycle.mdx)."""
    with trio.fail_after(ctx.turn_timeout if timeout is None else timeout):
        answer = await peer.response(turn.request_id, math.inf)
        if ctx.protocol < 2 or "result" not in answer:
            result = answer.get("result")
            stop = result.get("stopReason") if isinstance(result, dict) else None
            updates = session_updates(peer, turn.session_id, turn.start)
            return TurnEnd(stop, answer, updates, time.monotonic(), protocol=ctx.protocol)
        idle = _is_idle(turn.session_id)
        end = await peer.wait_for(idle, math.inf, start=turn.start)
        updates = session_updates(peer, turn.session_id, turn.start, peer.received.index(end) + 1)
        stop = end["params"]["update"].get("stopReason")
        reason = stop if isinstance(stop, str) else ""
        return TurnEnd(reason, answer, updates, time.monotonic(), protocol=ctx.protocol)


async def run_turn(peer: WirePeer, ctx: Context, session_id: str, prompt: list[dict[str, Any]]) -> TurnEnd:
    """A whole prompt turn (:func:`start_turn`, then :func:`finish_turn`)."""
    return await finish_turn(peer, ctx, await start_turn(peer, session_id, prompt))


def turn_failure(end: TurnEnd) -> str | None:
    """What is wrong with how a turn ended, or ``None``: an error, or a stop reason outside the
    schema's (an idle ``state_update`` without one is allowed here: ``session.prompt`` warns)."""
    if end.stop is None:
        return f"session/prompt answered {show(end.answer)}"
    if end.stop == "" or end.stop in STOP_REASONS:
        return None
    if end.protocol >= 2 and (end.stop == "error" or end.stop.startswith("_")):
        return None
    return f"the turn ended with stopReason {end.stop!r}, not one the schema knows"


async def expect(ctx: Context, body: Callable[[WirePeer], Awaitable[Result]], timeout_text: str) -> Result:
    """Run ``body`` against a fresh agent; a timeout, a :class:`Failed` or a vanished agent is a FAIL
    (saying how its process ended and its last stderr line; for an agent that answered no
    ``initialize`` within its start-up time, ``no answer to initialize within 30 s of the agent's start (--start-timeout
    30)...``).  An agent process that ended before answering the run's first ``initialize`` raises
    :class:`AgentExited` instead: the run stops."""

    async def guarded(peer: WirePeer) -> Result:
        try:
            return await body(peer)
        except BaseExceptionGroup as group:  # a body's own nursery: one verdict inside is still a verdict
            leaves = _leaves(group)
            if len(leaves) != 1 or not isinstance(leaves[0], (trio.TooSlowError, Failed, AgentGone)):
                raise
            problem: BaseException = leaves[0]
        except (trio.TooSlowError, Failed, AgentGone) as exc:
            problem = exc
        if isinstance(problem, StartTimeout):  # it never said a word: slow to start, or silent
            return Result(Status.FAIL, str(problem), start_timeout=True)
        if isinstance(problem, trio.TooSlowError):
            return failed(timeout_text)
        if isinstance(problem, AgentGone) and problem.ended is not None and _never_answered(problem, peer):
            # it cannot even answer initialize: the other checks would all fail the same way
            raise AgentExited(getattr(peer.target, "command", ()), problem.ended, peer.raw)
        return failed(str(problem))

    result: Result = await ctx.with_peer(guarded)
    return result


def _never_answered(problem: AgentGone, peer: WirePeer) -> bool:
    """Whether the agent's process ended before answering the first ``initialize`` of the run,
    having written no JSON-RPC message in it (:class:`AgentExited`)."""
    return problem.exited and problem.waiting_for == "initialize" and not peer.seen.messages


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


def default_cwd() -> str:
    return os.path.realpath(tempfile.gettempdir())

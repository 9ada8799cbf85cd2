"""The checks: each drives a fresh agent process and returns a :class:`Result`.

Every rule comes from the spec pages (``docs/protocol/v1/*.mdx`` of agentclientprotocol/
agent-client-protocol), the pinned schema, or JSON-RPC 2.0, named in ``Check.source``.
"""

from __future__ import annotations

import enum
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import trio

from ._wire import AgentGone, WirePeer

JSONRPC = "JSON-RPC 2.0 specification"


class Status(enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    WARN = "WARN"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Result:
    status: Status
    observed: str


@dataclass(frozen=True)
class Check:
    """One rule: ``name`` (dotted, for ``--only``/``--skip``), what it checks, its ``source``."""

    name: str
    title: str
    source: str
    run: Callable[[Context], Awaitable[Result]]
    protocols: tuple[int, ...] = (1, 2)


@dataclass
class Context:
    """What a check gets: a way to run a body against a fresh agent, and the run's settings."""

    protocol: int
    with_peer: Callable[[Callable[[WirePeer], Awaitable[Any]]], Awaitable[Any]]
    cwd: str
    turn_timeout: float
    prompt: str
    http: bool = False


def passed(observed: str) -> Result:
    return Result(Status.PASS, observed)


def failed(observed: str) -> Result:
    return Result(Status.FAIL, observed)


CLIENT_CAPABILITIES: dict[str, Any] = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}


def initialize_params(version: int, protocol: int) -> dict[str, Any]:
    """The checker's ``initialize`` params in ``protocol``'s shape (v2: ``info``, ``capabilities``)."""
    if protocol >= 2:
        return {"protocolVersion": version, "info": _CLIENT_INFO, "capabilities": {}}
    return {"protocolVersion": version, "clientCapabilities": CLIENT_CAPABILITIES, "clientInfo": _CLIENT_INFO}


async def initialize(
    peer: WirePeer, version: int, timeout: float = 10.0, id: Any = None, protocol: int | None = None
) -> dict[str, Any]:
    params = initialize_params(version, version if protocol is None else protocol)
    return await peer.request("initialize", params, id=id, timeout=timeout)


def _agent_info(result: dict[str, Any]) -> Any:
    return result.get("agentInfo") if "agentInfo" in result else result.get("info")


_CLIENT_INFO = {"name": "acp-trio-check", "version": "1"}


def _error_code(message: dict[str, Any]) -> Any:
    error = message.get("error")
    return error.get("code") if isinstance(error, dict) else None


# -- initialize --------------------------------------------------------------------------------------
async def check_version(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        answer = await initialize(peer, ctx.protocol)
        result = answer.get("result")
        if not isinstance(result, dict):
            return failed(f"initialize answered {orjson.dumps(answer).decode()[:200]}")
        version = result.get("protocolVersion")
        if version != ctx.protocol:
            return failed(f"asked protocolVersion {ctx.protocol}, it answered {version!r}")
        return passed(f"protocolVersion {version}")

    return await _expect(ctx, body, "initialize got no answer within 10 s")


async def check_newer_version(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        answer = await initialize(peer, 999, protocol=ctx.protocol)
        result = answer.get("result")
        if not isinstance(result, dict):
            return failed(f"initialize with protocolVersion 999 answered {orjson.dumps(answer).decode()[:200]}")
        version = result.get("protocolVersion")
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version < 999:
            return failed(
                f"asked 999 (unsupported), it answered protocolVersion {version!r}: not a version it supports"
            )
        return passed(f"asked 999, it answered its own latest, {version}")

    return await _expect(ctx, body, "initialize got no answer within 10 s")


async def check_info(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        result = (await initialize(peer, ctx.protocol)).get("result") or {}
        info = _agent_info(result)
        if not isinstance(info, dict) or not info.get("name"):
            field = "info" if ctx.protocol >= 2 else "agentInfo"
            return Result(Status.WARN, f"no {field}.name in the initialize result")
        return passed(f"agentInfo {info.get('name')} {info.get('version', '')}".rstrip())

    return await _expect(ctx, body, "initialize got no answer within 10 s")


# -- JSON-RPC hygiene --------------------------------------------------------------------------------
async def check_parse_error(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        if ctx.http:
            return Result(Status.SKIP, "over Streamable HTTP the server answers malformed input with an HTTP status")
        await initialize(peer, ctx.protocol)
        await peer.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": \n')
        answer = await peer.wait_for(lambda m: "method" not in m and m.get("id") is None, 5)
        if _error_code(answer) != -32700 or answer.get("id") is not None:
            return failed(f"malformed JSON answered {orjson.dumps(answer).decode()[:200]}")
        return passed("-32700 with id null")

    return await _expect(ctx, body, "malformed JSON got no answer within 5 s (expected -32700)")


async def check_invalid_request(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        if ctx.http:
            return Result(Status.SKIP, "over Streamable HTTP the server answers malformed input with an HTTP status")
        await initialize(peer, ctx.protocol)
        await peer.send_raw(b'{"jsonrpc":"2.0","id":"bad-1","method":42}\n')
        answer = await peer.response("bad-1", 5)
        if _error_code(answer) != -32600:
            return failed(f"a request whose method is a number answered {orjson.dumps(answer).decode()[:200]}")
        return passed("-32600")

    return await _expect(ctx, body, "an invalid request got no answer within 5 s (expected -32600)")


async def check_unknown_method(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await initialize(peer, ctx.protocol)
        answer = await peer.request("_acp_check/no_such_method", {}, timeout=5)
        if _error_code(answer) != -32601:
            return failed(f"an unknown method answered {orjson.dumps(answer).decode()[:200]}")
        return passed("-32601")

    return await _expect(ctx, body, "an unknown method got no answer within 5 s (expected -32601)")


async def check_notifications_unanswered(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await initialize(peer, ctx.protocol)
        await peer.notify("_acp_check/note", {"hello": 1})
        await peer.notify("session/cancel", {"sessionId": "sess_acp_check_none"})
        await peer.request("_acp_check/after", {}, timeout=5)  # answered: the notifications were read
        stray = [m for m in peer.received if "method" not in m and m.get("id") is None]
        if stray:
            return failed(f"answered a notification: {orjson.dumps(stray[0]).decode()[:200]}")
        return passed("an unknown notification and a session/cancel got no answer")

    return await _expect(ctx, body, "the request after two notifications got no answer within 5 s")


async def check_ids_echoed(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await peer.send_raw(
            b'{"jsonrpc":"2.0","id":"id \\u00e9 \\"q\\"","method":"initialize","params":'
            + orjson.dumps(initialize_params(ctx.protocol, ctx.protocol))
            + b"}\n"
        )
        try:
            await peer.response('id é "q"', 10)
        except trio.TooSlowError:
            return failed('the string id "id é \\"q\\"" got no answer with the same id within 10 s')
        big = 9007199254740993  # 2**53 + 1: a double would round it to 2**53
        await peer.send_raw(b'{"jsonrpc":"2.0","id":9007199254740993,"method":"_acp_check/echo","params":{}}\n')
        try:
            await peer.response(big, 5)
        except trio.TooSlowError:
            rounded = any(m.get("id") == big - 1 and "method" not in m for m in peer.received)
            if rounded:
                return failed("the id 9007199254740993 (2**53+1) came back as 9007199254740992: parsed as a double")
            return failed("the id 9007199254740993 (2**53+1) got no answer with the same id within 5 s")
        return passed('string id "id é \\"q\\"" and integer id 2**53+1 echoed exactly')

    return await _expect(ctx, body, "no answer within the bound")


# -- sessions ----------------------------------------------------------------------------------------
async def new_session(peer: WirePeer, ctx: Context) -> str:
    answer = await peer.request("session/new", {"cwd": ctx.cwd, "mcpServers": []}, timeout=30)
    session_id = (answer.get("result") or {}).get("sessionId")
    if not isinstance(session_id, str):
        raise _Failed(f"session/new answered {orjson.dumps(answer).decode()[:200]}")
    return session_id


class _Failed(Exception):
    pass


async def check_session_new(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await initialize(peer, ctx.protocol)
        return passed(f"sessionId {await new_session(peer, ctx)!r}")

    return await _expect(ctx, body, "session/new got no answer within 30 s")


CANCEL_BOUND = 2.0
"""Seconds an agent may take to end a turn after ``session/cancel`` ("as soon as possible")."""
STOP_REASONS = {"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"}


async def check_prompt(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await initialize(peer, ctx.protocol)
        session_id = await new_session(peer, ctx)
        prompt = [{"type": "text", "text": ctx.prompt}]
        answer = await peer.request(
            "session/prompt", {"sessionId": session_id, "prompt": prompt}, timeout=ctx.turn_timeout
        )
        stop = (answer.get("result") or {}).get("stopReason")
        updates = [m for m in peer.received if m.get("method") == "session/update"]
        if stop not in STOP_REASONS:
            return failed(f"session/prompt answered {orjson.dumps(answer).decode()[:200]}")
        wrong = [u for u in updates if (u.get("params") or {}).get("sessionId") != session_id]
        if wrong:
            return failed(f"a session/update for another session: {orjson.dumps(wrong[0]).decode()[:200]}")
        return passed(f"stopReason {stop}, {len(updates)} session/update notifications")

    return await _expect(ctx, body, f"session/prompt got no answer within {ctx.turn_timeout} s")


async def check_cancel(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await initialize(peer, ctx.protocol)
        session_id = await new_session(peer, ctx)
        request_id = peer.new_id()
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": ctx.prompt}]}
        request = {"jsonrpc": "2.0", "id": request_id, "method": "session/prompt", "params": prompt}
        cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}}
        await peer.send(request)
        await peer.send(cancel)
        sent = time.monotonic()
        try:
            answer = await peer.response(request_id, 10)
        except trio.TooSlowError:
            return failed("the turn was not answered within 10 s of session/cancel")
        waited = time.monotonic() - sent
        if "error" in answer:
            return failed(f"the cancelled turn answered an error: {orjson.dumps(answer['error']).decode()[:200]}")
        stop = (answer.get("result") or {}).get("stopReason")
        if stop == "cancelled" and waited <= CANCEL_BOUND:
            return passed(f"stopReason cancelled {waited * 1000:.0f} ms after session/cancel")
        if stop == "cancelled":
            return failed(f"stopReason cancelled, but {waited:.1f} s after session/cancel (bound {CANCEL_BOUND} s)")
        if waited < 0.5:
            return Result(Status.WARN, f"stopReason {stop!r}: the turn may have ended before the cancel was read")
        return failed(f"stopReason {stop!r} {waited:.1f} s after session/cancel (must be cancelled)")

    return await _expect(ctx, body, "no answer within the bound")


# 1x1 transparent PNG and a tiny WAV, for the image and audio blocks
_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
_WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA="


async def check_content_types(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        result = (await initialize(peer, ctx.protocol)).get("result") or {}
        prompt_caps = (result.get("agentCapabilities") or {}).get("promptCapabilities") or {}
        path = os.path.join(ctx.cwd, "acp-check-notes.txt")
        uri = "file://" + path
        blocks: dict[str, dict[str, Any]] = {
            "resource_link": {"type": "resource_link", "uri": uri, "name": "acp-check-notes.txt"},
        }
        if prompt_caps.get("image"):
            blocks["image"] = {"type": "image", "data": _PNG, "mimeType": "image/png"}
        if prompt_caps.get("audio"):
            blocks["audio"] = {"type": "audio", "data": _WAV, "mimeType": "audio/wav"}
        if prompt_caps.get("embeddedContext"):
            resource = {"uri": uri, "text": "buy milk", "mimeType": "text/plain"}
            blocks["resource"] = {"type": "resource", "resource": resource}
        session_id = await new_session(peer, ctx)
        refused = []
        for kind, block in blocks.items():
            prompt = [{"type": "text", "text": ctx.prompt}, block]
            answer = await peer.request(
                "session/prompt", {"sessionId": session_id, "prompt": prompt}, timeout=ctx.turn_timeout
            )
            stop = (answer.get("result") or {}).get("stopReason")
            if stop not in STOP_REASONS:
                refused.append(f"{kind}: {orjson.dumps(answer.get('error') or answer).decode()[:120]}")
        if refused:
            return failed("a prompt with a content block it must accept failed: " + "; ".join(refused))
        return passed("text with " + ", ".join(blocks) + " accepted")

    return await _expect(ctx, body, f"a prompt got no answer within {ctx.turn_timeout} s")


async def check_load(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        result = (await initialize(peer, ctx.protocol)).get("result") or {}
        capabilities = result.get("agentCapabilities") or {}
        if not capabilities.get("loadSession"):
            return Result(Status.SKIP, "the agent does not advertise loadSession")
        session_id = await new_session(peer, ctx)
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": ctx.prompt}]}
        await peer.request("session/prompt", prompt, timeout=ctx.turn_timeout)
        before = len(peer.received)
        request_id = peer.new_id()
        params = {"sessionId": session_id, "cwd": ctx.cwd, "mcpServers": []}
        await peer.send({"jsonrpc": "2.0", "id": request_id, "method": "session/load", "params": params})
        answer = await peer.response(request_id, ctx.turn_timeout)
        if "error" in answer:
            return failed(f"session/load of a session it just made answered {orjson.dumps(answer).decode()[:200]}")
        cut = peer.received.index(answer)
        replayed = [
            m
            for m in peer.received[before:cut]
            if m.get("method") == "session/update" and (m.get("params") or {}).get("sessionId") == session_id
        ]
        with trio.move_on_after(0.5):  # anything replayed after the answer is late
            late = await peer.wait_for(
                lambda m: (
                    peer.received.index(m) > cut
                    and m.get("method") == "session/update"
                    and (m.get("params") or {}).get("sessionId") == session_id
                ),
                0.5,
            )
            return failed(f"a replayed update came after the session/load answer: {orjson.dumps(late).decode()[:160]}")
        if not replayed:
            return failed("session/load answered without replaying the conversation (no session/update before it)")
        return passed(f"{len(replayed)} updates replayed, then the answer")

    return await _expect(ctx, body, "no answer within the bound")


async def check_cancel_request(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await initialize(peer, ctx.protocol)
        session_id = await new_session(peer, ctx)
        request_id = peer.new_id()
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": ctx.prompt}]}
        await peer.send({"jsonrpc": "2.0", "id": request_id, "method": "session/prompt", "params": prompt})
        await peer.notify("$/cancel_request", {"requestId": request_id})
        try:
            answer = await peer.response(request_id, ctx.turn_timeout)
        except trio.TooSlowError:
            return failed(f"the request named in $/cancel_request got no response within {ctx.turn_timeout} s")
        if _error_code(answer) == -32800:
            return passed("-32800 (request cancelled)")
        if "error" in answer:
            return passed(f"an error response ({_error_code(answer)}): a response, as required")
        return passed("a result: a response, as required")

    return await _expect(ctx, body, "no answer within the bound")


# -- lifecycle ---------------------------------------------------------------------------------------
async def check_eof_exit(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        if getattr(peer.target, "remote", False):
            return Result(Status.SKIP, "a remote agent: there is no stdin to close")
        await initialize(peer, ctx.protocol)
        await peer.target.stdin.aclose()
        start = time.monotonic()
        with trio.move_on_after(5):
            how = await peer.target.wait_exit()
            took = time.monotonic() - start
            return passed(f"exited {took * 1000:.0f} ms after its stdin closed ({how})")
        return Result(Status.WARN, "still running 5 s after its stdin closed")

    return await _expect(ctx, body, "initialize got no answer")


async def _expect(ctx: Context, body: Callable[[WirePeer], Awaitable[Result]], timeout_text: str) -> Result:
    async def guarded(peer: WirePeer) -> Result:
        try:
            return await body(peer)
        except trio.TooSlowError:
            return failed(timeout_text)
        except _Failed as exc:
            return failed(str(exc))
        except AgentGone as exc:
            return failed(f"{exc} (the process ended?)")

    result: Result = await ctx.with_peer(guarded)
    return result


INIT = "docs/protocol/v1/initialization.mdx"
PROMPT = "docs/protocol/v1/prompt-turn.mdx"
CHECKS: tuple[Check, ...] = (
    Check("initialize.version", "answers the protocol version asked", f"{INIT} § Version Negotiation", check_version),
    Check(
        "initialize.newer-version",
        "an unsupported higher version gets the agent's latest",
        f"{INIT} § Version Negotiation",
        check_newer_version,
    ),
    Check("initialize.info", "names itself (agentInfo)", f"{INIT} § Implementation Information", check_info),
    Check("jsonrpc.parse-error", "malformed JSON gets -32700", f"{JSONRPC} § 5.1", check_parse_error),
    Check("jsonrpc.invalid-request", "an invalid request gets -32600", f"{JSONRPC} § 5.1", check_invalid_request),
    Check(
        "jsonrpc.unknown-method",
        "an unknown method gets -32601",
        f"{JSONRPC} § 5.1; docs/protocol/v1/extensibility.mdx § Custom Requests",
        check_unknown_method,
    ),
    Check(
        "jsonrpc.notifications",
        "notifications are never answered",
        f"{JSONRPC} § 4.1; docs/protocol/v1/extensibility.mdx § Custom Notifications",
        check_notifications_unanswered,
    ),
    Check("jsonrpc.ids", "string and large integer ids echoed exactly", f"{JSONRPC} § 5", check_ids_echoed),
    Check(
        "session.new",
        "session/new answers a session id",
        "docs/protocol/v1/session-setup.mdx § Creating a Session",
        check_session_new,
    ),
    Check("session.prompt", "a text prompt ends with a stop reason", f"{PROMPT} § Stop Reasons", check_prompt, (1,)),
    Check(
        "session.cancel",
        "session/cancel ends the turn with cancelled",
        f"{PROMPT} § Cancellation",
        check_cancel,
        (1,),
    ),
    Check(
        "session.content-types",
        "prompts with resource_link (baseline) and each advertised content type are accepted",
        f"{INIT} § Prompt capabilities",
        check_content_types,
        (1,),
    ),
    Check(
        "session.load",
        "session/load replays the conversation, then answers (when advertised)",
        "docs/protocol/v1/session-setup.mdx § Loading a Session",
        check_load,
        (1,),
    ),
    Check(
        "jsonrpc.cancel-request",
        "a request named by $/cancel_request still gets a response",
        "docs/protocol/v1/cancellation.mdx § $/cancel_request Notification",
        check_cancel_request,
    ),
    Check(
        "lifecycle.eof",
        "exits once its stdin closes",
        "docs/protocol/v1/transports.mdx § stdio (the client closes stdin, then terminates the process)",
        check_eof_exit,
    ),
)


def default_cwd() -> str:
    return os.path.realpath(tempfile.gettempdir())

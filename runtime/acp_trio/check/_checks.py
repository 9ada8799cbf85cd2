"""The checks: each drives a fresh agent process and returns a :class:`Result`.

Every rule comes from the spec pages (``docs/protocol/v1/*.mdx`` and ``docs/protocol/v2/*.mdx`` of
agentclientprotocol/agent-client-protocol), the pinned schema, or JSON-RPC 2.0, named in
``Check.source``.  The session-method checks are in :mod:`._session_checks`.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import trio

from . import _session_checks as sc
from ._base import (
    CANCEL_BOUND,
    INIT,
    JSONRPC,
    PROMPT,
    SETUP,
    Check,
    Context,
    Failed,
    Result,
    Status,
    agent_capabilities,
    agent_info,
    default_cwd,
    error_code,
    expect,
    failed,
    finish_turn,
    initialize,
    initialize_params,
    new_session,
    passed,
    prompt_capabilities,
    run_turn,
    session_updates,
    show,
    start_turn,
    text_prompt,
    turn_failure,
)
from ._wire import WirePeer


# -- initialize --------------------------------------------------------------------------------------
def unspoken_version(asked: int, answered: int) -> str:
    """What ``initialize.version`` says when the agent answered another protocol version than the
    one asked (it does not speak it: ``initialization.mdx`` § Version Negotiation), and what to run."""
    said = f"the agent answered protocolVersion {answered} to an initialize asking {asked}: it does not speak "
    if answered == 1:
        hint = f"drop --protocol {asked} to check it in version 1"
    elif answered == 2:
        hint = "pass --protocol 2 to check it in version 2"
    else:
        hint = "this checker knows protocol versions 1 and 2 only"
    return f"{said}protocol version {asked}; {hint}"


async def check_version(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        answer = await initialize(peer, ctx.protocol)
        result = answer.get("result")
        if not isinstance(result, dict):
            return failed(f"initialize answered {show(answer)} (it MUST answer a version it supports)")
        version = result.get("protocolVersion")
        if type(version) is not int or version < 1:
            return failed(f"asked protocolVersion {ctx.protocol}, it answered {version!r}: not a version")
        if version != ctx.protocol:
            return failed(unspoken_version(ctx.protocol, version))
        return passed(f"protocolVersion {version}")

    return await expect(ctx, body, "initialize got no answer within 10 s")


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

    return await expect(ctx, body, "initialize got no answer within 10 s")


async def check_info(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        result = (await initialize(peer, ctx.protocol)).get("result") or {}
        info = agent_info(result)
        if not isinstance(info, dict) or not info.get("name"):
            field = "info" if ctx.protocol >= 2 else "agentInfo"
            return Result(Status.WARN, f"no {field}.name in the initialize result")
        return passed(f"agentInfo {info.get('name')} {info.get('version', '')}".rstrip())

    return await expect(ctx, body, "initialize got no answer within 10 s")


# -- JSON-RPC hygiene --------------------------------------------------------------------------------
async def check_parse_error(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        if ctx.http:
            return Result(Status.SKIP, "over Streamable HTTP the server answers malformed input with an HTTP status")
        await initialize(peer, ctx.protocol)
        await peer.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": \n')
        answer = await peer.wait_for(lambda m: "method" not in m and m.get("id") is None, 5)
        if error_code(answer) != -32700 or answer.get("id") is not None:
            return failed(f"malformed JSON answered {orjson.dumps(answer).decode()[:200]}")
        return passed("-32700 with id null")

    return await expect(ctx, body, "malformed JSON got no answer within 5 s (expected -32700)")


async def check_invalid_request(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        if ctx.http:
            return Result(Status.SKIP, "over Streamable HTTP the server answers malformed input with an HTTP status")
        await initialize(peer, ctx.protocol)
        await peer.send_raw(b'{"jsonrpc":"2.0","id":"bad-1","method":42}\n')

        def answer_to_it(message: dict[str, Any]) -> bool:  # JSON-RPC § 5: id null when not detected
            return "method" not in message and (message.get("id") == "bad-1" or message.get("id", 0) is None)

        answer = await peer.wait_for(answer_to_it, 5)
        if error_code(answer) != -32600:
            return failed(f"a request whose method is a number answered {orjson.dumps(answer).decode()[:200]}")
        return passed(f"-32600 with id {show(answer.get('id'))}")

    return await expect(ctx, body, "an invalid request got no answer within 5 s (expected -32600)")


async def check_unknown_method(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await initialize(peer, ctx.protocol)
        answer = await peer.request("_acp_check/no_such_method", {}, timeout=5)
        if error_code(answer) != -32601:
            return failed(f"an unknown method answered {orjson.dumps(answer).decode()[:200]}")
        return passed("-32601")

    return await expect(ctx, body, "an unknown method got no answer within 5 s (expected -32601)")


async def check_notifications_unanswered(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await initialize(peer, ctx.protocol)
        await peer.notify("_acp_check/note", {"hello": 1})
        await peer.notify("session/cancel", {"sessionId": "sess_acp_check_none"})
        await peer.request("_acp_check/after", {}, timeout=5)  # answered: the notifications were read

        def stray(message: dict[str, Any]) -> bool:
            return "method" not in message and message.get("id") is None

        with trio.move_on_after(0.5):  # a handler may answer a little after the request that followed
            answered = await peer.wait_for(stray, 0.5)
            return failed(f"answered a notification: {show(answered)}")
        return passed("an unknown notification and a session/cancel got no answer")

    return await expect(ctx, body, "the request after two notifications got no answer within 5 s")


async def check_ids_echoed(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await peer.send_raw(
            b'{"jsonrpc":"2.0","id":"id \\u00e9 \\"q\\"","method":"initialize","params":'
            + orjson.dumps(initialize_params(ctx.protocol, ctx.protocol))
            + b"}\n",
            method="initialize",
            request_id='id é "q"',
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
                return Result(
                    Status.WARN,
                    "the id 9007199254740993 (2**53+1) came back as 9007199254740992: parsed as a double "
                    "(JSON-RPC: the same value; RFC 8259 § 6 promises exact integers only up to 2**53-1)",
                )
            return failed("the id 9007199254740993 (2**53+1) got no answer with the same id within 5 s")
        return passed('string id "id é \\"q\\"" and integer id 2**53+1 echoed exactly')

    return await expect(ctx, body, "no answer within the bound")


async def check_before_initialize(ctx: Context) -> Result:
    """initialization.mdx: clients MUST initialize first; JSON-RPC: every request gets a response."""

    async def body(peer: WirePeer) -> Result:
        if getattr(peer.target, "remote", False):
            return Result(Status.SKIP, "a remote transport opens its ACP connection with initialize, its first message")
        early = await peer.request("session/new", {"cwd": ctx.cwd, "mcpServers": []}, timeout=5)
        answer = await initialize(peer, ctx.protocol)
        if not isinstance(answer.get("result"), dict):
            return failed(f"after a request before initialize, initialize answered {show(answer)}")
        if "error" in early:
            return passed(f"session/new before initialize answered error {error_code(early)}; initialize then worked")
        return Result(
            Status.WARN,
            "session/new before initialize got a session (a result): a client that skipped negotiation "
            "was served without knowing its version or capabilities",
        )

    return await expect(ctx, body, "session/new sent before initialize got no answer within 5 s")


async def check_capabilities_well_formed(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        answer = await initialize(peer, ctx.protocol)
        result = answer.get("result")
        if not isinstance(result, dict):
            return failed(f"initialize answered {show(answer)}")
        methods = result.get("authMethods") or []
        key = "id" if ctx.protocol < 2 else "methodId"  # the schema's AuthMethod: v2 renamed the field
        ids = [m.get(key) for m in methods if isinstance(m, dict)]
        repeated = sorted({i for i in ids if ids.count(i) > 1}, key=str)
        if repeated:
            return failed(f"authMethods repeat the id {repeated[0]!r}")
        caps = result.get("agentCapabilities") if ctx.protocol < 2 else result.get("capabilities")
        if caps is None:
            caps = {}
        if not isinstance(caps, dict):
            return failed(f"the agent's capabilities are not an object: {show(caps)}")
        advertised = sorted(_true_paths(caps))
        return passed(
            "capabilities: "
            + (", ".join(advertised) if advertised else "none beyond the baseline")
            + f"; authMethods: {', '.join(map(str, ids)) if ids else 'none'} (shapes: see schema.valid)"
        )

    return await expect(ctx, body, "initialize got no answer within 10 s")


def _true_paths(node: Any, prefix: str = "") -> list[str]:
    """The dotted paths of the capabilities an agent advertises (true, or a non-null object)."""
    found: list[str] = []
    if not isinstance(node, dict):
        return found
    for key, value in node.items():
        if key == "_meta":
            continue
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            deeper = _true_paths(value, path + ".")
            found.extend(deeper or [path])
        elif value is True:
            found.append(path)
    return found


# -- sessions ----------------------------------------------------------------------------------------
async def check_session_new(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await initialize(peer, ctx.protocol)
        return passed(f"sessionId {await new_session(peer, ctx)!r}")

    return await expect(ctx, body, "session/new got no answer within 30 s")


async def check_prompt(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await initialize(peer, ctx.protocol)
        session_id = await new_session(peer, ctx)
        turn = await start_turn(peer, session_id, text_prompt(ctx.prompt))
        end = await finish_turn(peer, ctx, turn)
        problem = turn_failure(end)
        if problem:
            return failed(problem)
        stray = [
            m
            for m in peer.received[turn.start :]
            if m.get("method") == "session/update" and (m.get("params") or {}).get("sessionId") != session_id
        ]
        if stray:
            return failed(f"a session/update for another session: {show(stray[0])}")
        if ctx.protocol >= 2:
            kinds = [u.get("sessionUpdate") for u in end.updates]
            if "user_message" not in kinds and "user_message_chunk" not in kinds:
                return failed(
                    "no user_message (or user_message_chunk) update reported the prompt "
                    "(docs/protocol/v2/prompt-lifecycle.mdx § Prompt Accepted: MUST)"
                )
            states = [u.get("state") for u in end.updates if u.get("sessionUpdate") == "state_update"]
            if "running" not in states and "requires_action" not in states:
                return failed(
                    "the turn went idle without a state_update running first "
                    "(docs/protocol/v2/prompt-lifecycle.mdx § Agent Reports Output: MUST)"
                )
            if not end.stop:
                return Result(
                    Status.WARN,
                    "the turn's idle state_update has no stopReason "
                    "(docs/protocol/v2/prompt-lifecycle.mdx: agents SHOULD include one)",
                )
            return passed(f"accepted, {len(end.updates)} session/update notifications, idle with {end.stop}")
        return passed(f"stopReason {end.stop}, {len(end.updates)} session/update notifications")

    return await expect(ctx, body, f"the prompt turn did not end within {ctx.turn_timeout} s")


def judge_cancelled(end: Any, waited: float, what: str) -> Result:
    """prompt-turn.mdx § Cancellation: the turn ends with ``cancelled``, "as soon as possible"; in
    protocol 2 a prompt refused with -32800 before it was accepted started no work to cancel (a WARN:
    the spec's signal is an idle ``state_update`` with ``cancelled``)."""
    if end.stop is None and error_code(end.answer) == -32800 and end.protocol >= 2:
        return Result(
            Status.WARN,
            f"the prompt was refused with -32800 {waited * 1000:.0f} ms after {what}, before it was accepted "
            "(docs/protocol/v2/prompt-lifecycle.mdx § Cancellation reports cancellation as state_update idle, "
            "stopReason cancelled)",
        )
    if end.stop is None:
        return failed(f"the turn ended with an error after {what}: {show(end.answer.get('error'))}")
    if end.stop == "cancelled" and waited <= CANCEL_BOUND:
        return passed(f"stopReason cancelled {waited * 1000:.0f} ms after {what}")
    if end.stop == "cancelled":
        return failed(f"stopReason cancelled, but {waited:.1f} s after {what} (bound {CANCEL_BOUND} s)")
    if waited < 0.5:
        return Result(Status.WARN, f"stopReason {end.stop!r}: the turn may have ended before {what} was read")
    return failed(f"stopReason {end.stop!r} {waited:.1f} s after {what} (must be cancelled)")


async def check_cancel(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await initialize(peer, ctx.protocol)
        session_id = await new_session(peer, ctx)
        turn = await start_turn(peer, session_id, text_prompt(ctx.script.long))
        await peer.notify("session/cancel", {"sessionId": session_id})
        sent = time.monotonic()
        try:
            end = await finish_turn(peer, ctx, turn, 10)
        except trio.TooSlowError:
            return failed("the turn did not end within 10 s of session/cancel")
        return judge_cancelled(end, end.ended - sent, "session/cancel")

    return await expect(ctx, body, "no answer within the bound")


# 1x1 transparent PNG and a tiny WAV, for the image and audio blocks
_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
_WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA="


async def check_content_types(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        prompt_caps = prompt_capabilities(ctx, await agent_capabilities(peer, ctx))
        uri = "file://" + ctx.notes_path
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
            end = await run_turn(peer, ctx, session_id, [*text_prompt(ctx.prompt), block])
            if turn_failure(end):
                refused.append(f"{kind}: {show(end.answer.get('error') or end.answer, 120)}")
        if refused:
            return failed("a prompt with a content block it must accept failed: " + "; ".join(refused))
        return passed("text with " + ", ".join(blocks) + " accepted")

    return await expect(ctx, body, f"a prompt got no answer within {ctx.turn_timeout} s")


REPLAY_KINDS = ("user_message", "agent_message", "agent_thought", "tool_call")
"""The update kinds that carry the conversation (a replay), by prefix."""


async def check_load(ctx: Context) -> Result:
    """v1 ``session/load`` (when ``loadSession``); v2 ``session/resume`` with ``replayFrom: start``."""

    async def body(peer: WirePeer) -> Result:
        capabilities = await agent_capabilities(peer, ctx)
        v2 = ctx.protocol >= 2
        if not v2 and not capabilities.get("loadSession"):
            return Result(Status.SKIP, "the agent does not advertise loadSession")
        if v2 and not isinstance(capabilities.get("session"), dict):
            return Result(Status.SKIP, "the agent does not advertise the session methods (session)")
        session_id = await new_session(peer, ctx)
        await run_turn(peer, ctx, session_id, text_prompt(ctx.prompt))
        before = len(peer.received)
        request_id = peer.new_id()
        params: dict[str, Any] = {"sessionId": session_id, "cwd": ctx.cwd, "mcpServers": []}
        method = "session/resume" if v2 else "session/load"
        if v2:
            params["replayFrom"] = {"type": "start"}
        await peer.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        answer = await peer.response(request_id, ctx.turn_timeout)
        if "error" in answer:
            return failed(f"{method} of a session it just made answered {show(answer)}")
        cut = peer.received.index(answer)
        replayed = session_updates(peer, session_id, before, cut)

        def replay_after_answer(message: dict[str, Any]) -> bool:
            params = message.get("params") or {}
            update = params.get("update") if isinstance(params, dict) else None
            return (
                message.get("method") == "session/update"
                and params.get("sessionId") == session_id
                and isinstance(update, dict)
                and str(update.get("sessionUpdate", "")).startswith(REPLAY_KINDS)
            )

        with trio.move_on_after(0.5):  # conversation replayed after the answer is late
            late = await peer.wait_for(replay_after_answer, 0.5, start=cut + 1)
            return failed(f"a replayed update came after the {method} answer: {show(late, 160)}")
        if not replayed:
            return failed(f"{method} answered without replaying the conversation (no session/update before it)")
        return passed(f"{len(replayed)} updates replayed, then the answer")

    return await expect(ctx, body, "no answer within the bound")


async def check_cancel_request(ctx: Context) -> Result:
    async def body(peer: WirePeer) -> Result:
        await initialize(peer, ctx.protocol)
        session_id = await new_session(peer, ctx)
        request_id = (await start_turn(peer, session_id, text_prompt(ctx.prompt))).request_id
        await peer.notify("$/cancel_request", {"requestId": request_id})
        try:
            answer = await peer.response(request_id, ctx.turn_timeout)
        except trio.TooSlowError:
            return failed(f"the request named in $/cancel_request got no response within {ctx.turn_timeout} s")
        if error_code(answer) == -32800:
            return passed("-32800 (request cancelled)")
        if "error" in answer:
            return passed(f"an error response ({error_code(answer)}): a response, as required")
        return passed("a result: a response, as required")

    return await expect(ctx, body, "no answer within the bound")


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

    return await expect(ctx, body, "initialize got no answer")


V2 = "docs/protocol/v2"
CHECKS: tuple[Check, ...] = (
    Check("initialize.version", "answers the protocol version asked", f"{INIT} § Version Negotiation", check_version),
    Check(
        "initialize.newer-version",
        "an unsupported higher version gets the agent's latest",
        f"{INIT} § Version Negotiation",
        check_newer_version,
    ),
    Check("initialize.info", "names itself (agentInfo)", f"{INIT} § Implementation Information", check_info),
    Check(
        "initialize.capabilities",
        "capabilities and authMethods well-formed (ids unique)",
        f"{INIT} § Agent Capabilities; docs/protocol/v1/authentication.mdx",
        check_capabilities_well_formed,
    ),
    Check(
        "initialize.before",
        "a request before initialize is answered, and initialize still works",
        f"{INIT} (clients MUST initialize first); {JSONRPC} § 4 (every request is answered)",
        check_before_initialize,
    ),
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
    Check("session.new", "session/new answers a session id", f"{SETUP} § Creating a Session", check_session_new),
    Check(
        "session.prompt",
        "a text prompt ends with a stop reason (v2: accepted, user_message, running, idle)",
        f"{PROMPT} § Stop Reasons; {V2}/prompt-lifecycle.mdx",
        check_prompt,
    ),
    Check(
        "session.cancel",
        "session/cancel ends the turn with cancelled",
        f"{PROMPT} § Cancellation; {V2}/prompt-lifecycle.mdx",
        check_cancel,
    ),
    Check(
        "session.cancel-permission",
        "session/cancel with a permission request pending: answered cancelled, the turn ends cancelled",
        f"{PROMPT} § Cancellation",
        sc.check_cancel_permission,
    ),
    Check(
        "session.content-types",
        "prompts with resource_link (baseline) and each advertised content type are accepted",
        f"{INIT} § Prompt capabilities",
        check_content_types,
    ),
    Check(
        "session.load",
        "session/load (v2: resume with replayFrom start) replays the conversation, then answers",
        f"{SETUP} § Loading a Session; {V2}/session-setup.mdx § Resuming Sessions",
        check_load,
    ),
    Check(
        "session.mcp",
        "session/new with an MCP server of each supported transport (stdio; http, sse when advertised)",
        f"{SETUP} § MCP Servers",
        sc.check_mcp,
    ),
    Check(
        "session.list", "session/list lists; the cwd filter holds", "docs/protocol/v1/session-list.mdx", sc.check_list
    ),
    Check(
        "session.resume",
        "session/resume answers without replaying",
        f"{SETUP} § Resuming Sessions",
        sc.check_resume,
    ),
    Check(
        "session.close",
        "session/close cancels the running turn",
        f"{SETUP} § Closing Sessions",
        sc.check_close,
    ),
    Check(
        "session.delete",
        "session/delete deletes, and a missing session silently",
        "docs/protocol/v1/session-delete.mdx",
        sc.check_delete,
    ),
    Check(
        "session.set-mode",
        "session/set_mode to a listed mode is answered",
        "docs/protocol/v1/session-modes.mdx",
        sc.check_set_mode,
        (1,),
    ),
    Check(
        "session.set-config-option",
        "session/set_config_option answers every option with the new value; unknown ids rejected",
        "docs/protocol/v1/session-config-options.mdx § Setting a Config Option",
        sc.check_set_config_option,
    ),
    Check(
        "capabilities.variations",
        "a turn under each client capability set (none, fs read, fs write, terminal, all)",
        f"{INIT} § Client Capabilities",
        sc.check_capability_variations,
        (1,),
        len(sc.VARIATIONS) + 1,
    ),
    Check(
        "script.expectations",
        "each scripted prompt shows the behaviours it expects",
        "--script (tool-calls.mdx, prompt-turn.mdx, file-system.mdx, terminals.mdx)",
        sc.check_script,
        turns=10,
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
"""The agent checks of ``python -m acp_trio.check``, in the order they run."""

__all__ = [
    "CHECKS",
    "Check",
    "Context",
    "Failed",
    "Result",
    "Status",
    "default_cwd",
    "initialize_params",
]

"""The checks of the optional session methods, the client-capability variations, the scripted
behaviours and cancellation with a permission request pending."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from functools import partial
from typing import Any

import trio

from ._base import (
    ALL_CAPABILITIES,
    CANCEL_BOUND,
    NO_CAPABILITIES,
    Context,
    Failed,
    Result,
    Status,
    agent_capabilities,
    error_code,
    expect,
    failed,
    finish_turn,
    new_session,
    new_session_result,
    passed,
    run_turn,
    session_capability,
    session_updates,
    show,
    start_turn,
    text_prompt,
    turn_failure,
)
from ._wire import WirePeer

NOTES_TEXT = "buy milk\ncall the plumber\n"
"""What the checker's client serves as ``acp-check-notes.txt`` in the session directory."""

VARIATIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("none", NO_CAPABILITIES),
    ("fs.readTextFile", {"fs": {"readTextFile": True, "writeTextFile": False}, "terminal": False}),
    ("fs.writeTextFile", {"fs": {"readTextFile": False, "writeTextFile": True}, "terminal": False}),
    ("terminal", {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": True}),
    ("all", ALL_CAPABILITIES),
)
"""The client capability sets ``capabilities.variations`` advertises, one connection each (protocol 1)."""


def _skip(why: str) -> Result:
    return Result(Status.SKIP, why)


def _requests(peer: WirePeer, prefixes: tuple[str, ...] = ("fs/", "terminal/")) -> list[str]:
    return [m for m in peer.agent_requests if m.startswith(prefixes)]


async def check_capability_variations(ctx: Context) -> Result:
    """initialization.mdx § Client Capabilities: one turn per capability set; the run-wide
    ``capabilities.client`` judges every fs/terminal request against the set of its connection."""
    prompt = ctx.script.expecting("fs_read") or ctx.script.expecting("tool_call")
    text = prompt.text if prompt is not None else ctx.prompt
    seen: list[str] = []
    errors: list[str] = []
    for label, capabilities in VARIATIONS:

        async def body(peer: WirePeer, capabilities: dict[str, Any] = capabilities, label: str = label) -> Result:
            await agent_capabilities(peer, ctx, capabilities)
            session_id = await new_session(peer, ctx)
            end = await run_turn(peer, ctx, session_id, text_prompt(text))
            problem = turn_failure(end)
            if problem and end.stop is not None:
                return failed(f"with client capabilities {label}: {problem}")
            if problem:  # an error response is a response: noted, not a rule broken
                errors.append(f"{label}: {problem}")
            used = sorted(set(_requests(peer)))
            seen.append(f"{label}: {', '.join(used) if used else 'no fs/terminal request'}")
            return passed("")

        result = await expect(ctx, body, f"with client capabilities {label}: the turn did not end in time")
        if result.status is not Status.PASS:
            return result
    if errors:
        return Result(Status.WARN, "the turn ended in an error with client capabilities " + "; ".join(errors))
    return passed("; ".join(seen))


async def _session_if_advertised(peer: WirePeer, ctx: Context, method: str) -> str | None:
    """``initialize``; then, if the agent advertises ``session/<method>``, a new session's id."""
    if not session_capability(ctx, await agent_capabilities(peer, ctx), method):
        return None
    return await new_session(peer, ctx)


async def check_list(ctx: Context) -> Result:
    """session-list.mdx: ``session/list`` answers ``sessions``; a ``cwd`` filter keeps to that directory."""

    async def body(peer: WirePeer) -> Result:
        session_id = await _session_if_advertised(peer, ctx, "list")
        if session_id is None:
            return _skip("the agent does not advertise session/list")
        await run_turn(peer, ctx, session_id, text_prompt(ctx.prompt))
        everything = await peer.request("session/list", {}, timeout=30)
        filtered = await peer.request("session/list", {"cwd": ctx.cwd}, timeout=30)
        for name, answer in (("session/list", everything), (f"session/list with cwd {ctx.cwd}", filtered)):
            result = answer.get("result")
            if not isinstance(result, dict) or not isinstance(result.get("sessions"), list):
                return failed(f"{name} answered {show(answer)}")
        sessions = [s for s in filtered["result"]["sessions"] if isinstance(s, dict)]
        elsewhere = [s for s in sessions if s.get("cwd") != ctx.cwd]
        if elsewhere:
            return failed(f"session/list filtered by cwd {ctx.cwd} listed a session in {elsewhere[0].get('cwd')!r}")
        listed = {s.get("sessionId") for s in everything["result"]["sessions"] if isinstance(s, dict)}
        if session_id not in listed:
            return Result(Status.WARN, f"the session it just made and prompted ({session_id}) is not listed")
        return passed(f"{len(listed)} sessions listed, the new one among them; the cwd filter held")

    return await expect(ctx, body, "session/list got no answer within 30 s")


async def check_resume(ctx: Context) -> Result:
    """session-setup.mdx § Resuming Sessions: answers without replaying the conversation."""

    async def body(peer: WirePeer) -> Result:
        session_id = await _session_if_advertised(peer, ctx, "resume")
        if session_id is None:
            return _skip("the agent does not advertise session/resume")
        await run_turn(peer, ctx, session_id, text_prompt(ctx.prompt))
        before = len(peer.received)
        answer = await peer.request(
            "session/resume", {"sessionId": session_id, "cwd": ctx.cwd, "mcpServers": []}, timeout=30
        )
        if not isinstance(answer.get("result"), dict):
            return failed(f"session/resume of a session it just made answered {show(answer)}")
        cut = peer.received.index(answer)
        replayed = [
            u
            for u in session_updates(peer, session_id, before, cut)
            if str(u.get("sessionUpdate", "")).startswith(("user_message", "agent_message", "tool_call"))
        ]
        if replayed:
            return failed(f"session/resume replayed the conversation before answering: {show(replayed[0], 160)}")
        end = await run_turn(peer, ctx, session_id, text_prompt(ctx.prompt))
        problem = turn_failure(end)
        if problem:
            return failed(f"a prompt to the resumed session: {problem}")
        return passed("answered without a replay; the resumed session took a prompt")

    return await expect(ctx, body, "session/resume (or a turn) got no answer in time")


async def check_close(ctx: Context) -> Result:
    """session-setup.mdx § Closing Sessions: cancels the running turn as ``session/cancel`` would."""

    async def body(peer: WirePeer) -> Result:
        session_id = await _session_if_advertised(peer, ctx, "close")
        if session_id is None:
            return _skip("the agent does not advertise session/close")
        turn = await start_turn(peer, session_id, text_prompt(ctx.script.long))
        sent = time.monotonic()
        answer = await peer.request("session/close", {"sessionId": session_id}, timeout=10)
        if not isinstance(answer.get("result"), dict):
            return failed(f"session/close answered {show(answer)}")
        try:
            end = await finish_turn(peer, ctx, turn, 10)
        except trio.TooSlowError:
            return failed("the turn running in the closed session did not end within 10 s")
        waited = end.ended - sent
        if end.stop not in ("cancelled", None) and waited >= 0.5:
            return failed(f"the running turn ended {end.stop!r} {waited:.1f} s after session/close (must be cancelled)")
        if end.stop == "cancelled" and waited > CANCEL_BOUND:
            return failed(
                f"the running turn ended cancelled {waited:.1f} s after session/close (bound {CANCEL_BOUND} s)"
            )
        how = (
            "cancelled" if end.stop == "cancelled" else f"ended {end.stop or 'with an error'} (maybe before the close)"
        )
        return passed(f"answered; the running turn {how} {waited * 1000:.0f} ms after session/close")

    return await expect(ctx, body, "session/close got no answer within 10 s")


async def check_delete(ctx: Context) -> Result:
    """session-delete.mdx: deletes; a session that never existed SHOULD succeed silently."""

    async def body(peer: WirePeer) -> Result:
        session_id = await _session_if_advertised(peer, ctx, "delete")
        if session_id is None:
            return _skip("the agent does not advertise session/delete")
        answer = await peer.request("session/delete", {"sessionId": session_id}, timeout=10)
        if not isinstance(answer.get("result"), dict):
            return failed(f"session/delete of a session it just made answered {show(answer)}")
        again = await peer.request("session/delete", {"sessionId": "sess_acp_check_never_existed"}, timeout=10)
        if not isinstance(again.get("result"), dict):
            return Result(Status.WARN, f"deleting a session that never existed answered {show(again)} (SHOULD succeed)")
        return passed("deleted; a session that never existed deleted silently")

    return await expect(ctx, body, "session/delete got no answer within 10 s")


async def check_set_mode(ctx: Context) -> Result:
    """session-modes.mdx: ``session/set_mode`` to a listed mode is answered; protocol 1 only."""

    async def body(peer: WirePeer) -> Result:
        await agent_capabilities(peer, ctx)
        result = await new_session_result(peer, ctx)
        modes = result.get("modes")
        available = [m.get("id") for m in (modes or {}).get("availableModes") or [] if isinstance(m, dict)]
        if not available:
            return _skip("session/new offered no modes")
        current = modes.get("currentModeId") if isinstance(modes, dict) else None
        target = next((m for m in available if m != current), available[0])
        answer = await peer.request(
            "session/set_mode", {"sessionId": result["sessionId"], "modeId": target}, timeout=10
        )
        if not isinstance(answer.get("result"), dict):
            return failed(f"session/set_mode to the listed mode {target!r} answered {show(answer)}")
        return passed(f"set mode {target!r} (of {len(available)})")

    return await expect(ctx, body, "session/set_mode got no answer within 10 s")


def _select_values(option: dict[str, Any]) -> list[Any]:
    """The values of a ``select`` config option (its ``options``, flat or in groups)."""
    values: list[Any] = []
    for entry in option.get("options") or []:
        if not isinstance(entry, dict):
            continue
        if "value" in entry:
            values.append(entry["value"])
        for inner in entry.get("options") or []:
            if isinstance(inner, dict) and "value" in inner:
                values.append(inner["value"])
    return values


async def check_set_config_option(ctx: Context) -> Result:
    """session-config-options.mdx: answers the complete options with the new current value; an
    unknown ``configId`` is rejected (protocol 2: MUST, -32602)."""

    async def body(peer: WirePeer) -> Result:
        await agent_capabilities(peer, ctx)
        result = await new_session_result(peer, ctx)
        key = "configId" if ctx.protocol >= 2 else "id"
        options = [o for o in result.get("configOptions") or [] if isinstance(o, dict)]
        choice = next((o for o in options if o.get("type") == "select" and len(_select_values(o)) >= 2), None)
        if choice is None:
            return _skip("session/new offered no select config option with two values")
        config_id = choice.get(key)
        value = next(v for v in _select_values(choice) if v != choice.get("currentValue"))
        params = {"sessionId": result["sessionId"], "configId": config_id, "value": value}
        if ctx.protocol >= 2:  # v2 tags the value's type ($defs/SetSessionConfigOptionRequest)
            params["type"] = "id"
        answer = await peer.request("session/set_config_option", params, timeout=10)
        got = answer.get("result")
        if not isinstance(got, dict) or not isinstance(got.get("configOptions"), list):
            return failed(f"session/set_config_option {config_id}={value!r} answered {show(answer)}")
        now = next((o for o in got["configOptions"] if isinstance(o, dict) and o.get(key) == config_id), None)
        if now is None or now.get("currentValue") != value:
            return failed(f"after setting {config_id}={value!r} the answer shows {show(now)}")
        bad = dict(params, configId="acp_check_no_such_option")
        rejected = await peer.request("session/set_config_option", bad, timeout=10)
        if ctx.protocol >= 2 and error_code(rejected) != -32602:
            return failed(f"an unknown configId answered {show(rejected)} (MUST be -32602)")
        if "error" not in rejected:
            return Result(Status.WARN, f"an unknown configId was accepted: {show(rejected)}")
        return passed(f"set {config_id}={value!r}; the answer carries it; an unknown configId was rejected")

    return await expect(ctx, body, "session/set_config_option got no answer within 10 s")


async def check_cancel_permission(ctx: Context) -> Result:
    """prompt-turn.mdx § Cancellation: with a permission request pending, the client sends
    ``session/cancel`` and answers the request ``cancelled``; the turn ends ``cancelled``."""
    prompt = ctx.script.expecting("permission")
    if prompt is None:
        return _skip('no prompt makes the agent ask permission (give --script with expect = ["permission"])')

    async def body(peer: WirePeer) -> Result:
        await agent_capabilities(peer, ctx, ALL_CAPABILITIES)
        session_id = await new_session(peer, ctx)
        peer.hold_permissions = True
        turn = await start_turn(peer, session_id, text_prompt(prompt.text))
        asked = await peer.wait_for(lambda m: m.get("method") == "session/request_permission", ctx.turn_timeout)
        await peer.notify("session/cancel", {"sessionId": session_id})
        sent = time.monotonic()
        for pending in peer.pending:
            await peer.answer(pending, result={"outcome": {"outcome": "cancelled"}})
        try:
            end = await finish_turn(peer, ctx, turn, 10)
        except trio.TooSlowError:
            return failed("the turn did not end within 10 s of session/cancel with a permission request pending")
        if end.stop is None:
            return failed(f"the turn ended with an error: {show(end.answer.get('error'))}")
        waited = end.ended - sent
        if end.stop != "cancelled":
            return failed(f"stopReason {end.stop!r} after session/cancel during {asked['method']} (must be cancelled)")
        if waited > CANCEL_BOUND:
            return failed(f"stopReason cancelled, but {waited:.1f} s after session/cancel (bound {CANCEL_BOUND} s)")
        return passed(f"permission pending, cancelled: stopReason cancelled {waited * 1000:.0f} ms later")

    return await expect(ctx, body, f"prompt {prompt.name!r} asked no permission within {ctx.turn_timeout} s")


_SHOWN_BY = {
    "tool_call": lambda u, r: any(x.get("sessionUpdate") in ("tool_call", "tool_call_update") for x in u),
    "permission": lambda u, r: "session/request_permission" in r,
    "plan": lambda u, r: any(str(x.get("sessionUpdate", "")).startswith("plan") for x in u),
    "message": lambda u, r: any(str(x.get("sessionUpdate", "")).startswith("agent_message") for x in u),
    "thought": lambda u, r: any(str(x.get("sessionUpdate", "")).startswith("agent_thought") for x in u),
    "fs_read": lambda u, r: "fs/read_text_file" in r,
    "fs_write": lambda u, r: "fs/write_text_file" in r,
    "terminal": lambda u, r: "terminal/create" in r,
}


async def check_script(ctx: Context) -> Result:
    """Each scripted prompt with ``expect`` shows those behaviours (the client advertises all)."""
    scripted = [p for p in ctx.script.prompts.values() if p.expect]
    if not scripted:
        return _skip("no prompt names behaviours to expect (--script)")
    shown: list[str] = []
    for prompt in scripted:

        async def body(peer: WirePeer, prompt: Any = prompt) -> Result:
            await agent_capabilities(peer, ctx, ALL_CAPABILITIES)
            session_id = await new_session(peer, ctx)
            end = await run_turn(peer, ctx, session_id, text_prompt(prompt.text))
            problem = turn_failure(end)
            if problem:
                raise Failed(f"prompt {prompt.name!r}: {problem}")
            missing = [b for b in prompt.expect if not _SHOWN_BY[b](end.updates, peer.agent_requests)]
            if missing:
                return failed(f"prompt {prompt.name!r} showed no {', '.join(missing)}")
            shown.append(f"{prompt.name}: {', '.join(prompt.expect)}")
            return passed("")

        result = await expect(ctx, body, f"prompt {prompt.name!r}: the turn did not end in time")
        if result.status is not Status.PASS:
            return result
    return passed("; ".join(shown))


MCP_CONNECT_WAIT = 3.0
"""Seconds the checker waits, after ``session/new``, for the agent to contact its MCP servers."""
MCP_SERVER_START = 60.0
"""Seconds the checker's own MCP server process (http, sse) may take to listen: a Python process
importing the MCP SDK, seconds on a busy machine.  One that does not listen by then makes the check
a SKIP (the checker's problem, not the agent's)."""


def _mcp_transports(ctx: Context, caps: dict[str, Any]) -> list[str]:
    """stdio (v1: every agent; v2: ``session.mcp.stdio``), then http and sse as advertised."""
    if ctx.protocol >= 2:
        mcp = (caps.get("session") or {}).get("mcp") or {}
        return [t for t in ("stdio", "http") if isinstance(mcp, dict) and mcp.get(t) is not None]
    mcp = caps.get("mcpCapabilities") or {}
    return ["stdio"] + [t for t in ("http", "sse") if isinstance(mcp, dict) and mcp.get(t)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _serve_mcp(nursery: trio.Nursery, record: str, transport: str) -> str:
    """Start the checker's MCP server over ``transport`` (http or sse); its URL once it accepts."""
    port = _free_port()
    command = [sys.executable, "-m", "acp_trio.check._mcp_server", record, transport, str(port)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    nursery.start_soon(
        partial(trio.run_process, command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    )
    with trio.fail_after(MCP_SERVER_START):
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.05)
                continue
            await stream.aclose()
            break
    return f"http://127.0.0.1:{port}/{'mcp' if transport == 'http' else 'sse'}"


async def _serve_mcp_into(nursery: trio.Nursery, record: str, transport: str, urls: dict[str, str]) -> None:
    """``urls[transport]``: the URL of the checker's MCP server over ``transport``, once it listens
    (left out when it did not within :data:`MCP_SERVER_START` seconds)."""
    try:
        urls[transport] = await _serve_mcp(nursery, record, transport)
    except trio.TooSlowError:
        pass


async def check_mcp(ctx: Context) -> Result:
    """session-setup.mdx § MCP Servers: ``session/new`` with an MCP server of each transport the
    agent supports (stdio always in protocol 1) is answered with a session."""
    if importlib.util.find_spec("mcp") is None:
        return _skip("the checker's MCP server needs the official MCP SDK: pip install 'acp-trio[mcp]'")

    async def body(peer: WirePeer) -> Result:
        caps = await agent_capabilities(peer, ctx)
        transports = _mcp_transports(ctx, caps)
        if not transports:
            return _skip("the agent advertises no MCP transport")
        with tempfile.TemporaryDirectory(prefix="acp-check-mcp-") as tmp:
            record = os.path.join(tmp, "record.txt")
            open(record, "w").close()
            async with trio.open_nursery() as nursery:
                servers: list[dict[str, Any]] = []
                urls: dict[str, str] = {}
                async with trio.open_nursery() as starting:  # the network servers start side by side
                    for transport in transports:
                        if transport != "stdio":
                            starting.start_soon(_serve_mcp_into, nursery, record, transport, urls)
                missing = [t for t in transports if t != "stdio" and t not in urls]
                if missing:
                    nursery.cancel_scope.cancel()
                    return _skip(
                        f"the checker's own MCP server ({', '.join(missing)}) did not listen within "
                        f"{MCP_SERVER_START:.0f} s: a busy machine? run the check again"
                    )
                for transport in transports:
                    name = f"acp-check-{transport}"
                    if transport == "stdio":
                        server: dict[str, Any] = {
                            "name": name,
                            "command": sys.executable,
                            "args": ["-m", "acp_trio.check._mcp_server", record, "stdio"],
                            "env": [{"name": "PYTHONPATH", "value": os.pathsep.join(p for p in sys.path if p)}],
                        }
                        if ctx.protocol >= 2:
                            server["type"] = "stdio"
                    else:
                        server = {"type": transport, "name": name, "url": urls[transport], "headers": []}
                    servers.append(server)
                result = await new_session_result(peer, ctx, mcpServers=servers)
                contacted: set[str] = set()
                with trio.move_on_after(MCP_CONNECT_WAIT):
                    while contacted != set(transports):
                        with open(record, encoding="utf-8") as f:
                            contacted = {line.split()[0] for line in f if line.strip()} & set(transports)
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        late = f"not contacted within {MCP_CONNECT_WAIT:.0f} s (it may connect on first use)"
        seen = [f"{t}: {'contacted' if t in contacted else late}" for t in transports]
        return passed(f"session {result['sessionId']!r} with " + "; ".join(seen))

    return await expect(ctx, body, "session/new with MCP servers got no answer within 30 s")

"""The ACP side of the example LLM agent: sessions, prompt turns, tool calls, permissions, usage,
written once on the version-neutral API (:mod:`acp_trio.neutral`) and served to protocol version 1
and 2 clients alike.

One prompt turn (``docs/protocol/v1/prompt-turn.mdx``, ``docs/protocol/v2/prompt-lifecycle.mdx``)
is a loop: send the conversation to the model and stream its answer (text with ``turn.say``,
reasoning with ``turn.think``); when the model asks for tools, report each as an ACP tool call
(``turn.tool``, kind as in :mod:`.tools`), ask permission (``ToolCall.ask_permission``), run it
(files through ``session.files``, commands with ``ToolCall.run``, the session's MCP servers),
report the outcome (``complete`` / a ``failed`` update) and send the results back to the model;
until the model ends its answer.  The turn ends ``end_turn``, ``max_tokens``, ``refusal``,
``max_turn_requests`` (more than ``max_steps`` model calls) or, after ``session/cancel``,
``cancelled`` (the layer cancels the turn; the HTTP stream in flight is closed at once).  A failing
model API ends the turn with a JSON-RPC error (-32000 for a missing or refused key, else -32603;
``data``: ``provider``, ``status``, ``code``, ``body``): v1 answers ``session/prompt`` with it, v2
ends the turn ``idle`` with ``stopReason: "error"`` and that error.

Modes: the session's config option ``mode`` (``category: "mode"``: v1 ``modes`` and
``session/set_mode`` too): ``ask`` (the default) asks permission before every tool call; ``read``
runs tools of kind ``read`` (``read_file``, read-only MCP tools) without asking.

Usage: after each model call a ``usage_update`` (``used`` = the call's input plus output tokens,
what the context holds now; ``size`` = ``--context-window``); at the turn's end the sums over its
model calls (:func:`turn_end`: v1's prompt answer and v2's ``idle`` carry them under
``_meta["acp-trio/usage"]``).

Sessions are the layer's (``neutral.Agent.sessions``): ``session/load`` (v1) and ``session/resume``
with ``replayFrom: {type: start}`` (v2) replay a session made on either version; the model's view
of the conversation (:mod:`.history`) is kept per session id beside it, so the model continues
where it was.  Both live as long as this process; with a session store (``--store``: the layer's
``Agent.store``) every session is kept in it, and a new process loads it on either version,
rebuilding the model's view from the session's history (:func:`.history.from_updates`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import trio

from acp_schema import v1
from acp_trio import AUTH_REQUIRED, INTERNAL_ERROR, AgentSideConnection, RequestError, SessionRegistry
from acp_trio import neutral as n

from .history import (
    CANCELLED_RESULT,
    AssistantText,
    Item,
    Thinking,
    ToolResult,
    ToolUse,
    UserText,
    close_dangling,
    from_updates,
    prompt_text,
)
from .providers import (
    Finished,
    Provider,
    ProviderError,
    Settings,
    TextDelta,
    ThinkingDone,
    ThoughtDelta,
    TokenUsage,
    ToolCallDone,
    make_provider,
)
from .tools import BUILTIN_TOOLS, READ_FILE, RUN_COMMAND, WRITE_FILE, Tool, mcp_tool

if TYPE_CHECKING:
    from acp_trio.mcp import McpServers
    from acp_trio.session_store import SessionStore

__all__ = ["AGENT_INFO", "DENIED_RESULT", "MODES", "PERMISSION_OPTIONS", "LlmAgent", "default_system_prompt"]

log = logging.getLogger("examples.llm_agent")

AGENT_INFO = n.AgentInfo(name="acp-trio-llm-agent", title="acp-trio LLM agent (example)", version="1")
MCP_MISSING = (
    "they need the official mcp SDK, the mcp extra: "
    "pip install -e '.[mcp]' from the repository root, or pip install mcp"
)
"""Logged when a session comes with MCP servers and ``acp_trio.mcp`` cannot import ``mcp``."""
DENIED_RESULT = "The user denied permission for this tool call. Do not retry it; ask the user how to proceed."
"""The tool result the model gets for a call the user refused."""
MAX_OUTPUT_CHARS = 60_000
"""A file or command output longer than this is cut for the model (the rest is said to be cut)."""
COMMAND_OUTPUT_BYTES = 256_000
"""Bytes of a command's output kept (a client terminal's ``outputByteLimit``: its last ones; else its first)."""
PERMISSION_OPTIONS = (
    n.Option("allow-once", "Allow once", "allow_once"),
    n.Option("allow-always", "Allow always", "allow_always"),
    n.Option("reject-once", "Reject once", "reject_once"),
    n.Option("reject-always", "Reject always", "reject_always"),
)
"""The choices of every permission request; an "always" one holds for that tool for the rest of the session."""
MODES = n.mode_option(
    [
        n.Choice("ask", "Ask", "Ask permission before every tool call"),
        n.Choice("read", "Read freely", "Read files and run read-only MCP tools without asking; ask before the rest"),
    ]
)
"""The session's one config option (``category: "mode"``, so also v1's ``modes`` and ``session/set_mode``)."""


def default_system_prompt(cwd: str) -> str:
    """The instructions the model gets when ``--system`` is not given."""
    return (
        "You are a coding agent working in the user's project directory, "
        f"{cwd}.  Use the tools to read and change its files and to run commands there; "
        "relative paths are relative to that directory.  Every tool call needs the user's permission: "
        "when one is denied, do not retry it.  Answer concisely."
    )


def turn_end(stop_reason: str, spent: Sequence[TokenUsage]) -> n.TurnEnd:
    """The turn's end: its stop reason and, when the model reported tokens, their sums over the
    turn's model calls (``n.Usage``: v1's prompt answer and v2's ``idle`` carry it under
    ``_meta["acp-trio/usage"]``)."""
    if not spent:
        return n.TurnEnd(stop_reason)

    def total(counts: list[int | None]) -> int | None:
        known = [c for c in counts if c is not None]
        return sum(known) if known else None

    inputs, outputs = sum(u.input_tokens for u in spent), sum(u.output_tokens for u in spent)
    usage = n.Usage(
        total_tokens=inputs + outputs,
        input_tokens=inputs,
        output_tokens=outputs,
        thought_tokens=total([u.reasoning_tokens for u in spent]),
        cached_read_tokens=total([u.cached_tokens for u in spent]),
    )
    return n.TurnEnd(stop_reason, usage=usage)


class ToolFailure(Exception):
    """A tool call failed; the message goes to the model as an error result."""


@dataclass
class Conversation:
    """What the agent keeps per session beside the layer's :class:`~acp_trio.neutral.Session`: the
    model's ``history``, its MCP servers, the tools offered, the permission choices made "always"."""

    history: list[Item] = field(default_factory=list)
    mcp: McpServers | None = None
    tools: dict[str, Tool] | None = None
    always: dict[str, bool] = field(default_factory=dict)  # tool name -> allowed (True) / rejected (False)


@dataclass
class _McpHost:
    """Where a session's MCP servers run (``acp_trio.mcp.open_mcp_servers``'s host): the agent's own
    nursery and session registry, since a neutral session outlives the connection that opened it."""

    nursery: trio.Nursery
    sessions: SessionRegistry = field(default_factory=SessionRegistry)

    def start_soon(self, async_fn: Any, *args: Any, name: str | None = None) -> None:
        self.nursery.start_soon(async_fn, *args, name=name)


class LlmAgent(n.Agent):
    """The agent: one object for every connection, v1 and v2 (``serve_agent_stdio(agent)``,
    ``open_memory_pair(agent, client)``), used inside ``async with agent.running():``.

    ``settings``: :class:`~.providers.Settings`; ``store``: the session store every session is kept
    in (:attr:`acp_trio.neutral.Agent.store`: loaded in a later process on either version; ``None``:
    this process only);
    ``max_steps``: model calls per turn before it ends ``max_turn_requests``; ``command_timeout``:
    seconds a ``run_command`` may run before it is killed.
    """

    info = AGENT_INFO
    mcp_support = n.McpSupport(stdio=True, http=True, sse=True)
    """The MCP transports it connects to (``acp_trio.mcp``): v1 ``mcpCapabilities {http, sse}``,
    v2 ``session.mcp {stdio, http}``."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: SessionStore | None = None,
        max_steps: int = 25,
        command_timeout: float = 300.0,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.store = store
        self.max_steps = max_steps
        self.command_timeout = command_timeout
        self.provider: Provider = make_provider(settings)
        self.conversations: dict[str, Conversation] = {}
        self._mcp_host: _McpHost | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[LlmAgent]:
        """The agent's lifetime: its sessions' MCP servers run in it; on leaving they are shut down
        and the SDK client (its connection pool) is closed."""
        async with trio.open_nursery() as nursery:
            self._mcp_host = host = _McpHost(nursery)
            try:
                yield self
            finally:
                self._mcp_host = None
                host.sessions.close("the agent stopped")  # each server closes, shielded and bounded
                await self.provider.aclose()

    def acp_handlers(self) -> dict[ModuleType, Callable[[AgentSideConnection], Any]]:
        """What a connection given this agent serves: :meth:`handlers_for` protocol versions 1 and 2."""
        return self.handlers_for(self.versions)

    def handlers_for(self, versions: Sequence[int]) -> dict[ModuleType, Callable[[AgentSideConnection], Any]]:
        """``neutral.handlers(self, versions)`` (with a :attr:`store`, the layer keeps every session
        in it, both versions)."""
        return n.handlers(self, versions)

    def config_options(self, session: n.Session) -> Sequence[n.ConfigOption]:
        return (MODES,)

    # -- sessions ----------------------------------------------------------------------------------
    async def new_session(self, session: n.Session) -> None:
        conversation = self.conversations[session.id] = Conversation()
        await self._open_mcp(session, conversation)

    async def resume_session(self, session: n.Session) -> None:
        """v1 ``session/load`` / ``session/resume``, v2 ``session/resume`` (the layer replayed the
        updates): the model's history goes on; the MCP servers are the request's."""
        conversation = self.conversations.get(session.id)
        if conversation is None:  # a session of the store, made by another process
            conversation = self.conversations[session.id] = Conversation()
            conversation.history = from_updates(session.history)
        self._close_mcp(session.id, conversation)
        conversation.tools = None
        await self._open_mcp(session, conversation)

    async def close_session(self, session: n.Session) -> None:
        conversation = self.conversations.get(session.id)
        if conversation is not None:
            self._close_mcp(session.id, conversation)

    async def delete_session(self, session_id: str) -> None:
        conversation = self.conversations.pop(session_id, None)
        if conversation is not None:
            self._close_mcp(session_id, conversation)

    def _close_mcp(self, session_id: str, conversation: Conversation) -> None:
        if conversation.mcp is not None and self._mcp_host is not None:
            self._mcp_host.sessions.end(session_id, "closed")
        conversation.mcp = None

    async def _open_mcp(self, session: n.Session, conversation: Conversation) -> None:
        servers = session.mcp_servers
        if not servers:  # the MCP SDK is imported only for sessions that have servers (it takes a while)
            return
        try:
            from acp_trio.mcp import open_mcp_servers
        except ModuleNotFoundError as exc:  # the mcp extra is not installed: a session without its servers
            if (exc.name or "").partition(".")[0] != "mcp":
                raise
            log.warning("session %s: its %d MCP server(s) are not used: %s", session.id, len(servers), MCP_MISSING)
            return
        if self._mcp_host is None:
            raise RuntimeError("LlmAgent: serve it inside `async with agent.running():` (its MCP servers run there)")
        conversation.mcp = await open_mcp_servers(self._mcp_host, session.id, servers, cwd=session.cwd)
        for name, error in conversation.mcp.errors.items():
            log.warning("session %s: MCP server %r unavailable: %s", session.id, name, error)

    # -- the turn ----------------------------------------------------------------------------------
    async def prompt(self, turn: n.Turn) -> n.StopReason | n.TurnEnd:
        session = turn.session
        conversation = self.conversations.setdefault(session.id, Conversation())
        close_dangling(conversation.history)  # a cancelled turn may have left calls without results
        conversation.history.append(UserText(prompt_text(turn.prompt)))
        try:
            return await self._turn(turn, conversation)
        except ProviderError as exc:
            log.warning("session %s: %s", session.id, exc.message)
            data = {"provider": exc.provider, "status": exc.status, "code": exc.code, "body": exc.body}
            raise RequestError(AUTH_REQUIRED if exc.auth else INTERNAL_ERROR, exc.message, data) from exc

    async def _turn(self, turn: n.Turn, conversation: Conversation) -> n.TurnEnd:
        session = turn.session
        spent: list[TokenUsage] = []  # each model call's tokens: the turn's usage at its end
        tools = await self._tools(session, conversation)
        system = self.settings.system_prompt or default_system_prompt(session.cwd)
        specs = [tool.spec for tool in tools.values()]
        for _ in range(self.max_steps):
            calls: list[ToolCallDone] = []
            finished: Finished | None = None
            history = conversation.history
            async with aclosing(self.provider.stream(system, list(history), specs)) as events:
                async for event in events:
                    if isinstance(event, TextDelta):
                        if history and isinstance(history[-1], AssistantText):
                            history[-1].text += event.text
                        else:
                            history.append(AssistantText(event.text))
                        await turn.say(event.text)
                    elif isinstance(event, ThoughtDelta):
                        await turn.think(event.text)
                    elif isinstance(event, ThinkingDone):
                        history.append(Thinking(event.text, event.signature))
                    elif isinstance(event, ToolCallDone):
                        history.append(ToolUse(event.call_id, event.name, event.arguments))
                        calls.append(event)
                    elif isinstance(event, TokenUsage):
                        spent.append(event)
                        used = event.input_tokens + event.output_tokens
                        await turn.usage(used=used, size=self.settings.context_window)
                    elif isinstance(event, Finished):
                        finished = event
            if calls:
                for call in calls:
                    history.append(await self._call_tool(turn, conversation, tools, call))
                continue
            reason = finished.reason if finished is not None else "end_turn"
            return turn_end("end_turn" if reason == "tool_use" else reason, spent)
        return turn_end("max_turn_requests", spent)

    # -- tools -------------------------------------------------------------------------------------
    async def _tools(self, session: n.Session, conversation: Conversation) -> dict[str, Tool]:
        """The tools of this session (built at its first turn, again after a load or resume): the
        built-in ones, then each connected MCP server's."""
        if conversation.tools is not None:
            return conversation.tools
        tools = {name: Tool(spec, kind) for name, (spec, kind) in BUILTIN_TOOLS.items()}
        if conversation.mcp is not None:
            for server, mcp_session in conversation.mcp.sessions.items():
                try:
                    listed = await mcp_session.list_tools()
                except Exception as exc:
                    log.warning("session %s: MCP server %r: tools/list failed: %s", session.id, server, exc)
                    continue
                for mcp_def in listed.tools:
                    tool = mcp_tool(server, mcp_def)
                    tools.setdefault(tool.spec.name, tool)
        conversation.tools = tools
        return tools

    @staticmethod
    def _path(session: n.Session, arguments: dict[str, Any], key: str = "path") -> str:
        value = arguments.get(key)
        if not isinstance(value, str) or not value:
            raise ToolFailure(f"missing argument {key!r} (a path)")
        return os.path.normpath(os.path.join(session.cwd, value))

    @staticmethod
    def _title(tool: Tool, arguments: dict[str, Any]) -> str:
        name = tool.spec.name
        if name in (READ_FILE, WRITE_FILE) and isinstance(arguments.get("path"), str):
            verb = "Read" if name == READ_FILE else "Write"
            return f"{verb} {arguments['path']}"
        if name == RUN_COMMAND and isinstance(arguments.get("command"), str):
            return f"Run `{arguments['command']}`"
        if tool.server is not None:
            return f"{tool.server}: {tool.mcp_name}"
        return name

    async def _call_tool(
        self, turn: n.Turn, conversation: Conversation, tools: dict[str, Tool], call: ToolCallDone
    ) -> ToolResult:
        """Report, ask permission for, run and report one tool call; the result for the model."""
        session = turn.session
        tool = tools.get(call.name)
        raw_input = {"tool": call.name, "arguments": call.arguments}
        locations: list[str] = []
        if tool is not None and tool.spec.name in (READ_FILE, WRITE_FILE):
            try:
                locations = [self._path(session, call.arguments)]
            except ToolFailure:
                pass
        preview, old = await self._preview(session, tool, call.arguments) if tool is not None else ([], None)
        reported = await turn.tool(
            self._title(tool, call.arguments) if tool is not None else call.name,
            kind=tool.kind if tool is not None else "other",
            tool_call_id=call.call_id,
            locations=locations,
            raw_input=raw_input,
            content=preview,
        )

        async def fail(message: str) -> ToolResult:
            await reported.update(status="failed", content=[message], raw_output={"output": message, "isError": True})
            return ToolResult(call.call_id, message, is_error=True)

        if tool is None:
            return await fail(f"There is no tool named {call.name!r}.")
        if call.error is not None:
            return await fail(f"Cannot run {call.name}: {call.error}.")
        choice = conversation.always.get(call.name)
        if choice is None and tool.kind == "read" and session.config.get(MODES.config_id) == "read":
            choice = True  # the user chose the mode that reads without asking
        if choice is None:
            decision = await reported.ask_permission(
                f"Allow {reported.title or call.name}?", options=PERMISSION_OPTIONS
            )
            if decision.cancelled:  # the turn is being cancelled (the layer reported the call cancelled)
                await trio.lowlevel.checkpoint()
                return ToolResult(call.call_id, CANCELLED_RESULT, is_error=True)
            if decision.option is not None and decision.option.kind.endswith("always"):
                conversation.always[call.name] = decision.allowed
            choice = decision.allowed
        if not choice:
            return await fail(DENIED_RESULT)
        await reported.update(status="in_progress")
        try:
            output, content = await self._run(session, tool, call.arguments, reported, old)
        except ToolFailure as exc:
            return await fail(str(exc))
        except RequestError as exc:  # a v1 client refused: -32002 no such file, a path outside the session, ...
            return await fail(f"The client refused: {exc.message} (JSON-RPC {exc.code}).")
        except (OSError, ValueError) as exc:  # a local file outside the session's directories, missing, ...
            return await fail(f"{type(exc).__name__}: {exc}")
        if len(output) > MAX_OUTPUT_CHARS:
            output = output[:MAX_OUTPUT_CHARS] + f"\n[... cut: {len(output) - MAX_OUTPUT_CHARS} more characters]"
        raw_output = {"output": output, "isError": False}
        if content is None:
            await reported.complete(raw_output=raw_output)  # the content stays (a display terminal)
        else:
            await reported.complete(content, raw_output=raw_output)
        return ToolResult(call.call_id, output)

    async def _preview(
        self, session: n.Session, tool: Tool, arguments: dict[str, Any]
    ) -> tuple[list[n.ToolContentLike], str | None]:
        """What the user sees before deciding (a write's diff, a command's command line), and the
        file's text before a write (``None``: a new file)."""
        if tool.spec.name == WRITE_FILE and isinstance(arguments.get("content"), str):
            try:
                path = self._path(session, arguments)
                old: str | None = await session.files.read_text(path, missing=None)
            except (ToolFailure, RequestError, OSError, ValueError):
                return [], None  # the write itself will say what is wrong
            return [n.Diff(path, old, arguments["content"])], old
        if tool.spec.name == RUN_COMMAND and isinstance(arguments.get("command"), str):
            return [f"$ {arguments['command']}"], None
        return [], None

    async def _run(
        self, session: n.Session, tool: Tool, arguments: dict[str, Any], reported: n.ToolCall, old: str | None
    ) -> tuple[str, list[n.ToolContentLike] | None]:
        """Run an allowed tool call: (the text for the model, the tool call's final content; ``None``:
        keep what it shows)."""
        name = tool.spec.name
        if name == READ_FILE:
            text: str = await session.files.read_text(self._path(session, arguments))
            line, limit = arguments.get("line"), arguments.get("limit")
            if isinstance(line, int) or isinstance(limit, int):
                lines = text.splitlines(keepends=True)
                start = max(line - 1, 0) if isinstance(line, int) else 0
                end = start + limit if isinstance(limit, int) else None
                text = "".join(lines[start:end])
            return text, [f"{len(text.splitlines())} line(s)"]
        if name == WRITE_FILE:
            path = self._path(session, arguments)
            content = arguments.get("content")
            if not isinstance(content, str):
                raise ToolFailure("missing argument 'content' (the new text of the file)")
            await session.files.write_text(path, content)
            return f"Wrote {len(content)} characters to {path}.", [n.Diff(path, old, content)]
        if name == RUN_COMMAND:
            return await self._run_command(session, arguments, reported)
        return await self._call_mcp(session, tool, arguments)

    async def _run_command(
        self, session: n.Session, arguments: dict[str, Any], reported: n.ToolCall
    ) -> tuple[str, list[n.ToolContentLike] | None]:
        """``/bin/sh -c COMMAND``: in a v1 client's terminal when it offers them (the client runs and
        shows it), else in this process (``ToolCall.run``: a display terminal)."""
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolFailure("missing argument 'command'")
        cwd = self._path(session, arguments, "cwd") if arguments.get("cwd") else session.cwd
        if session.client.offers_terminal():
            return await self._run_in_client_terminal(session, command, cwd, reported)
        result = await reported.run(
            ["/bin/sh", "-c", command], cwd=cwd, timeout=self.command_timeout, max_output=COMMAND_OUTPUT_BYTES
        )
        if result.timed_out:
            ended = f"killed after {self.command_timeout:g} s"
        elif result.signal is not None:
            ended = f"killed by {result.signal}"
        else:
            ended = f"exit code {result.exit_code}"
        cut = (
            f" (output cut to its first {COMMAND_OUTPUT_BYTES} bytes)"
            if len(result.output) >= COMMAND_OUTPUT_BYTES
            else ""
        )
        return f"[{ended}{cut}]\n{result.output.decode('utf-8', errors='replace')}", None

    async def _run_in_client_terminal(
        self, session: n.Session, command: str, cwd: str, reported: n.ToolCall
    ) -> tuple[str, list[n.ToolContentLike]]:
        """v1 ``terminal/*``: the command in a terminal the client runs, embedded in the tool call."""
        terminals = session.client_terminal()
        async with terminals.open(
            "/bin/sh", args=["-c", command], cwd=cwd, output_byte_limit=COMMAND_OUTPUT_BYTES
        ) as term:
            await reported.update(content=[f"$ {command}", term])
            timed_out = False
            try:
                await term.wait_for_exit(timeout=self.command_timeout)
            except TimeoutError:
                timed_out = True
                await term.kill()
            result = await term.output()
        status = result.exit_status
        if timed_out:
            ended = f"killed after {self.command_timeout:g} s"
        elif status is None or not isinstance(status, v1.TerminalExitStatus):
            ended = "ended"
        elif status.signal:
            ended = f"killed by {status.signal}"
        else:
            ended = f"exit code {status.exit_code}"
        truncated = " (output truncated to its end)" if result.truncated else ""
        return f"[{ended}{truncated}]\n{result.output}", [f"$ {command}", term, f"[{ended}]"]

    async def _call_mcp(
        self, session: n.Session, tool: Tool, arguments: dict[str, Any]
    ) -> tuple[str, list[n.ToolContentLike]]:
        conversation = self.conversations.get(session.id)
        servers = conversation.mcp if conversation is not None else None
        mcp_session = servers.sessions.get(tool.server or "") if servers is not None else None
        if mcp_session is None or tool.mcp_name is None:
            raise ToolFailure(f"the MCP server {tool.server!r} is not connected")
        try:
            result = await mcp_session.call_tool(tool.mcp_name, arguments)
        except Exception as exc:
            raise ToolFailure(f"MCP server {tool.server!r}: {exc}") from exc
        parts: list[str] = []
        for block in result.content:
            text = getattr(block, "text", None)
            parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')} content]")
        text = "\n".join(parts)
        if result.is_error:
            raise ToolFailure(text or f"the MCP tool {tool.mcp_name!r} failed")
        return text, [text] if text else []

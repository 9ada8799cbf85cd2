"""The ACP side of the example LLM agent: sessions, prompt turns, tool calls, permissions, usage.

One prompt turn (``docs/protocol/v1/prompt-turn.mdx``) is a loop: send the conversation to the model
and stream its answer (text as ``agent_message_chunk``, reasoning as ``agent_thought_chunk``); when
the model asks for tools, report each as an ACP tool call (``tool_call``, kind as in
:mod:`.tools`), ask ``session/request_permission``, run it through the client (``fs/*``,
``terminal/*``) or the session's MCP server, report the outcome (``tool_call_update``) and send
the results back to the model; until the model ends its answer.  The turn answers ``end_turn``,
``max_tokens``, ``refusal``, ``max_turn_requests`` (more than ``max_steps`` model calls) or,
after ``session/cancel``, ``cancelled`` (the runtime cancels the turn; the HTTP stream in flight
is closed at once).  A failing model API answers the ``session/prompt`` with a JSON-RPC error
(-32000 for a missing or refused key, else -32603; ``data``: ``provider``, ``status``, ``code``,
``body``).

Usage: after each model call a ``usage_update`` (stable v1: ``used`` = the call's input plus output
tokens, what the context holds now; ``size`` = ``--context-window``), and the turn's token counts in
the ``session/prompt`` answer's ``_meta.usage`` (``inputTokens``, ``outputTokens``, ``totalTokens``,
``thoughtTokens``, ``cachedReadTokens``: the shape of the unstable schema's ``PromptResponse.usage``).

Sessions live in a session store (:mod:`acp_trio.session_store`; SQLite with ``--store PATH``, else
in memory), which records every prompt and update; ``session/load`` replays them and rebuilds the
model's view of the conversation from them (:func:`.history.from_stored`).
"""

from __future__ import annotations

import logging
import os
import uuid
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import trio

from acp_schema import v1
from acp_trio import AUTH_REQUIRED, INTERNAL_ERROR, AgentSideConnection, RequestError, open_terminal, session_store
from acp_trio import builders as b

from .history import (
    CANCELLED_RESULT,
    AssistantText,
    Item,
    Thinking,
    ToolResult,
    ToolUse,
    UserText,
    close_dangling,
    from_stored,
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

__all__ = ["AGENT_INFO", "DENIED_RESULT", "LlmAgent", "default_system_prompt"]

log = logging.getLogger("examples.llm_agent")

AGENT_INFO = v1.Implementation(name="acp-trio-llm-agent", title="acp-trio LLM agent (example)", version="1")
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
"""``outputByteLimit`` of ``run_command``'s terminals."""

StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]


def default_system_prompt(cwd: str) -> str:
    """The instructions the model gets when ``--system`` is not given."""
    return (
        "You are a coding agent working in the user's project directory, "
        f"{cwd}.  Use the tools to read and change its files and to run commands there; "
        "relative paths are relative to that directory.  Every tool call needs the user's permission: "
        "when one is denied, do not retry it.  Answer concisely."
    )


class ToolFailure(Exception):
    """A tool call failed; the message goes to the model as an error result."""


@dataclass
class Session:
    """What the agent keeps per session: ``cwd``, the model's ``history``, its MCP servers, the
    tools offered, the permission choices made "always", token totals."""

    cwd: str
    history: list[Item] = field(default_factory=list)
    mcp: McpServers | None = None
    tools: dict[str, Tool] | None = None
    always: dict[str, bool] = field(default_factory=dict)  # tool name -> allowed (True) / rejected (False)


@dataclass
class TurnUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    thought_tokens: int | None = None
    cached_tokens: int | None = None

    def add(self, usage: TokenUsage) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        if usage.reasoning_tokens is not None:
            self.thought_tokens = (self.thought_tokens or 0) + usage.reasoning_tokens
        if usage.cached_tokens is not None:
            self.cached_tokens = (self.cached_tokens or 0) + usage.cached_tokens

    def wire(self) -> dict[str, int]:
        out = {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.input_tokens + self.output_tokens,
        }
        if self.thought_tokens is not None:
            out["thoughtTokens"] = self.thought_tokens
        if self.cached_tokens is not None:
            out["cachedReadTokens"] = self.cached_tokens
        return out


class LlmAgent:
    """The agent; one per connection: ``LlmAgent(conn, settings, store)`` (see ``__main__.py``).

    ``settings``: :class:`~.providers.Settings`; ``store``: where sessions are kept (a
    ``session_store.SessionStore``; a fresh ``MemorySessionStore`` when ``None``); ``max_steps``:
    model calls per turn before it ends ``max_turn_requests``; ``command_timeout``: seconds a
    ``run_command`` may run before it is killed.
    """

    def __init__(
        self,
        conn: AgentSideConnection,
        settings: Settings,
        store: session_store.SessionStore | None = None,
        *,
        max_steps: int = 25,
        command_timeout: float = 300.0,
    ) -> None:
        self.conn = conn
        self.client = v1.ClientPeer(conn)
        self.settings = settings
        self.max_steps = max_steps
        self.command_timeout = command_timeout
        self.provider: Provider = make_provider(settings)
        self.recorder = session_store.enable(conn, store if store is not None else session_store.MemorySessionStore())
        self.sessions: dict[str, Session] = {}
        self._closer_started = False

    # -- lifecycle ---------------------------------------------------------------------------------
    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        return v1.InitializeResponse(
            protocol_version=self.conn.protocol_version,
            agent_capabilities=v1.AgentCapabilities(
                load_session=True,
                prompt_capabilities=v1.PromptCapabilities(image=False, audio=False, embedded_context=True),
                mcp_capabilities=v1.McpCapabilities(http=True, sse=True),
            ),
            auth_methods=[],
            agent_info=AGENT_INFO,
        )

    def _start_closer(self) -> None:
        if not self._closer_started:
            self._closer_started = True
            self.conn.start_soon(self._close_provider_at_end, name="llm-agent: close the SDK client")

    async def _close_provider_at_end(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            await self.provider.aclose()

    async def _open(self, session_id: str, cwd: str, servers: list[v1.McpServer]) -> Session:
        if not os.path.isabs(cwd):
            raise RequestError.invalid_params({"path": "$.cwd", "detail": "cwd must be an absolute path"})
        self._start_closer()
        session = Session(cwd=cwd)
        if not servers:  # the MCP SDK is imported only for sessions that have servers (it takes a while)
            self.sessions[session_id] = session
            return session
        try:
            from acp_trio.mcp import open_mcp_servers
        except ModuleNotFoundError as exc:  # the mcp extra is not installed: a session without its servers
            if (exc.name or "").partition(".")[0] != "mcp":
                raise
            log.warning("session %s: its %d MCP server(s) are not used: %s", session_id, len(servers), MCP_MISSING)
            self.sessions[session_id] = session
            return session
        session.mcp = await open_mcp_servers(self.conn, session_id, servers, cwd=cwd)
        for name, error in session.mcp.errors.items():
            log.warning("session %s: MCP server %r unavailable: %s", session_id, name, error)
        self.sessions[session_id] = session
        return session

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        session_id = f"sess_{uuid.uuid4().hex[:16]}"
        await self._open(session_id, params.cwd, list(params.mcp_servers))
        return v1.NewSessionResponse(session_id=session_id)

    async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
        """Replay the stored conversation (the store's handler), then rebuild the model's history from it."""
        response: v1.LoadSessionResponse = await self.recorder.session_load(params)
        conversation = await self.recorder.store.conversation(params.session_id)
        session = await self._open(params.session_id, params.cwd, list(params.mcp_servers))
        if conversation is not None:
            session.history = from_stored(conversation.messages())
        return response

    def _session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(session_id)
        return session

    # -- the turn ----------------------------------------------------------------------------------
    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        session_id = params.session_id
        session = self._session(session_id)
        close_dangling(session.history)  # a cancelled turn may have left calls without results
        session.history.append(UserText(prompt_text(params.prompt)))
        usage = TurnUsage()
        try:
            stop = await self._turn(session_id, session, usage)
        except ProviderError as exc:
            log.warning("session %s: %s", session_id, exc.message)
            data = {"provider": exc.provider, "status": exc.status, "code": exc.code, "body": exc.body}
            raise RequestError(AUTH_REQUIRED if exc.auth else INTERNAL_ERROR, exc.message, data) from exc
        return v1.PromptResponse(stop_reason=stop, meta={"usage": usage.wire()})

    async def _send(self, session_id: str, update: v1.SessionUpdate) -> None:
        await self.client.session_update(b.notification(session_id, update))

    async def _turn(self, session_id: str, session: Session, usage: TurnUsage) -> StopReason:
        tools = await self._tools(session_id, session)
        system = self.settings.system_prompt or default_system_prompt(session.cwd)
        specs = [tool.spec for tool in tools.values()]
        for _ in range(self.max_steps):
            calls: list[ToolCallDone] = []
            finished: Finished | None = None
            history = session.history
            async with aclosing(self.provider.stream(system, list(history), specs)) as events:
                async for event in events:
                    if isinstance(event, TextDelta):
                        if history and isinstance(history[-1], AssistantText):
                            history[-1].text += event.text
                        else:
                            history.append(AssistantText(event.text))
                        await self._send(session_id, b.agent_message(event.text))
                    elif isinstance(event, ThoughtDelta):
                        await self._send(session_id, b.agent_thought(event.text))
                    elif isinstance(event, ThinkingDone):
                        history.append(Thinking(event.text, event.signature))
                    elif isinstance(event, ToolCallDone):
                        history.append(ToolUse(event.call_id, event.name, event.arguments))
                        calls.append(event)
                    elif isinstance(event, TokenUsage):
                        usage.add(event)
                        used = event.input_tokens + event.output_tokens
                        await self._send(
                            session_id, v1.UsageUpdateSessionUpdate(used=used, size=self.settings.context_window)
                        )
                    elif isinstance(event, Finished):
                        finished = event
            if calls:
                for call in calls:
                    history.append(await self._call_tool(session_id, session, tools, call))
                continue
            reason = finished.reason if finished is not None else "end_turn"
            return "end_turn" if reason == "tool_use" else reason
        return "max_turn_requests"

    # -- tools -------------------------------------------------------------------------------------
    async def _tools(self, session_id: str, session: Session) -> dict[str, Tool]:
        """The tools of this session (built once, at its first turn): the built-in ones the client's
        capabilities allow, then each connected MCP server's."""
        if session.tools is not None:
            return session.tools
        tools: dict[str, Tool] = {}
        for name, (spec, kind, method) in BUILTIN_TOOLS.items():
            if self.conn.client_supports(method):
                tools[name] = Tool(spec, kind)
        if session.mcp is not None:
            for server, mcp_session in session.mcp.sessions.items():
                try:
                    listed = await mcp_session.list_tools()
                except Exception as exc:
                    log.warning("session %s: MCP server %r: tools/list failed: %s", session_id, server, exc)
                    continue
                for mcp_def in listed.tools:
                    tool = mcp_tool(server, mcp_def)
                    tools.setdefault(tool.spec.name, tool)
        session.tools = tools
        return tools

    def _path(self, session: Session, arguments: dict[str, Any], key: str = "path") -> str:
        value = arguments.get(key)
        if not isinstance(value, str) or not value:
            raise ToolFailure(f"missing argument {key!r} (a path)")
        return os.path.normpath(os.path.join(session.cwd, value))

    def _title(self, tool: Tool, arguments: dict[str, Any], session: Session) -> str:
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
        self, session_id: str, session: Session, tools: dict[str, Tool], call: ToolCallDone
    ) -> ToolResult:
        """Report, ask permission for, run and report one tool call; the result for the model."""
        tool = tools.get(call.name)
        raw_input = {"tool": call.name, "arguments": call.arguments}
        title = self._title(tool, call.arguments, session) if tool is not None else call.name
        locations: list[str] = []
        if tool is not None and tool.spec.name in (READ_FILE, WRITE_FILE):
            try:
                locations = [self._path(session, call.arguments)]
            except ToolFailure:
                pass
        reporter = b.ToolCallReporter(
            self.client,
            session_id,
            title,
            kind=tool.kind if tool is not None else "other",
            name=call.name,
            tool_call_id=call.call_id,
            locations=locations or None,
            raw_input=raw_input,
        )

        async def fail(message: str) -> ToolResult:
            await reporter.fail([message], raw_output={"output": message, "isError": True})
            return ToolResult(call.call_id, message, is_error=True)

        if tool is None:
            await reporter.start(status="pending")
            return await fail(f"There is no tool named {call.name!r}.")
        preview = await self._preview(session_id, session, tool, call.arguments)
        await reporter.start(status="pending", content=preview)
        if call.error is not None:
            return await fail(f"Cannot run {call.name}: {call.error}.")
        choice = session.always.get(call.name)
        if choice is None:
            option = await reporter.request_permission(b.permission_options())
            if option is None:  # answered "cancelled": the turn is being cancelled
                await trio.lowlevel.checkpoint()
                return await fail(CANCELLED_RESULT)
            if option.kind.endswith("always"):
                session.always[call.name] = option.kind == "allow_always"
            choice = option.kind.startswith("allow")
        if not choice:
            return await fail(DENIED_RESULT)
        await reporter.update(status="in_progress")
        try:
            output, content = await self._run(session_id, session, tool, call.arguments, reporter)
        except ToolFailure as exc:
            return await fail(str(exc))
        except RequestError as exc:  # the client refused: -32002 no such file, a path outside the session, ...
            return await fail(f"The client refused: {exc.message} (JSON-RPC {exc.code}).")
        if len(output) > MAX_OUTPUT_CHARS:
            output = output[:MAX_OUTPUT_CHARS] + f"\n[... cut: {len(output) - MAX_OUTPUT_CHARS} more characters]"
        await reporter.complete(content, raw_output={"output": output, "isError": False})
        return ToolResult(call.call_id, output)

    async def _preview(
        self, session_id: str, session: Session, tool: Tool, arguments: dict[str, Any]
    ) -> list[Any] | None:
        """What the user sees before deciding: a write's diff, a command's command line."""
        if tool.spec.name == WRITE_FILE and isinstance(arguments.get("content"), str):
            try:
                path = self._path(session, arguments)
            except ToolFailure:
                return None
            old: str | None = None
            if self.conn.client_supports("fs/read_text_file"):
                try:
                    old = (
                        await self.client.fs_read_text_file(v1.ReadTextFileRequest(session_id=session_id, path=path))
                    ).content
                except RequestError:
                    old = None  # a new file
            return [b.diff(path, arguments["content"], old_text=old)]
        if tool.spec.name == RUN_COMMAND and isinstance(arguments.get("command"), str):
            return [f"$ {arguments['command']}"]
        return None

    async def _run(
        self, session_id: str, session: Session, tool: Tool, arguments: dict[str, Any], reporter: b.ToolCallReporter
    ) -> tuple[str, list[Any]]:
        """Run an allowed tool call: (the text for the model, the tool call content for the client)."""
        name = tool.spec.name
        if name == READ_FILE:
            path = self._path(session, arguments)
            request = v1.ReadTextFileRequest(session_id=session_id, path=path)
            if isinstance(arguments.get("line"), int):
                request.line = arguments["line"]
            if isinstance(arguments.get("limit"), int):
                request.limit = arguments["limit"]
            text = (await self.client.fs_read_text_file(request)).content
            return text, [f"{len(text.splitlines())} line(s)"]
        if name == WRITE_FILE:
            path = self._path(session, arguments)
            content = arguments.get("content")
            if not isinstance(content, str):
                raise ToolFailure("missing argument 'content' (the new text of the file)")
            await self.client.fs_write_text_file(
                v1.WriteTextFileRequest(session_id=session_id, path=path, content=content)
            )
            return f"Wrote {len(content)} characters to {path}.", [b.diff(path, content)]
        if name == RUN_COMMAND:
            return await self._run_command(session_id, session, arguments, reporter)
        return await self._call_mcp(session, tool, arguments)

    async def _run_command(
        self, session_id: str, session: Session, arguments: dict[str, Any], reporter: b.ToolCallReporter
    ) -> tuple[str, list[Any]]:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolFailure("missing argument 'command'")
        cwd = self._path(session, arguments, "cwd") if arguments.get("cwd") else session.cwd
        async with open_terminal(
            self.conn, session_id, "/bin/sh", args=["-c", command], cwd=cwd, output_byte_limit=COMMAND_OUTPUT_BYTES
        ) as term:
            await reporter.update(content=[f"$ {command}", term.content()])
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
        text = f"[{ended}{truncated}]\n{result.output}"
        return text, [f"$ {command}", term.content(), f"[{ended}]"]

    async def _call_mcp(self, session: Session, tool: Tool, arguments: dict[str, Any]) -> tuple[str, list[Any]]:
        servers = session.mcp
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

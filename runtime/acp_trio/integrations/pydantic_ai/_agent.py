"""The ACP agent made of a pydantic-ai agent (see the package docstring)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.exceptions import AgentRunError, ModelHTTPError, ToolFailed, UsageLimitExceeded
from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResult, AgentRunResultEvent
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.usage import RunUsage
from pydantic_core import to_json

from acp_trio import INTERNAL_ERROR, RequestError
from acp_trio import neutral as n
from acp_trio.agent_terminal import TerminalHandle

from . import _aio
from ._history import messages_from_updates, prompt_content, raw_output
from ._tools import client_toolset, hold_toolsets

if TYPE_CHECKING:
    from acp_trio.session_store import SessionStore

__all__ = [
    "APPROVAL_OPTIONS",
    "DENIED_MESSAGE",
    "KIND_METADATA",
    "PydanticAIAgent",
    "tool_kind",
]

log = logging.getLogger("acp_trio.integrations.pydantic_ai")

CLOSE_WAIT = 5.0
"""Seconds a run being torn down (cancelled turn, failure) is waited for at most."""
NO_LOOP = (
    "the pydantic-ai agent is served without its asyncio loop: wrap serving in "
    "`async with acp_trio.aio.open_loop():` (serve_stdio, run_stdio and the command line do)"
)
"""The error a prompt gets when no asyncio loop is open (-32603, also logged)."""
MCP_START_WAIT = 30.0
"""Seconds ``session/new`` (``load``, ``resume``) waits at most for the session's MCP servers to
connect; one not connected by then is left out of the session."""
DENIED_MESSAGE = "The user denied this tool call. Do not retry it; ask the user how to proceed."
"""What the model gets for a tool call the user refused (pydantic-ai's ``ToolDenied`` message)."""
EXTERNAL_MESSAGE = "This tool call cannot be completed here: the ACP client runs no external tools."
"""What the model gets for a deferred call that is not an approval (``CallDeferred``: no one over
ACP can run it)."""
APPROVAL_OPTIONS = (
    n.Option("allow-once", "Allow once", "allow_once"),
    n.Option("allow-always", "Always allow this tool", "allow_always"),
    n.Option("reject-once", "Reject", "reject_once"),
    n.Option("reject-always", "Always reject this tool", "reject_always"),
)
"""The choices of a permission request; an "always" one holds for that tool for the rest of the session."""

_KIND_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("delete", ("delete", "remove", "unlink", "rm")),
    ("move", ("move", "rename", "mv")),
    ("edit", ("write", "edit", "create", "update", "patch", "replace", "append", "insert", "save", "modify")),
    ("search", ("search", "grep", "find", "glob", "query", "lookup")),
    ("read", ("read", "get", "list", "view", "cat", "show", "open", "load", "ls")),
    ("execute", ("run", "exec", "execute", "shell", "bash", "command", "terminal", "sh")),
    ("fetch", ("fetch", "http", "url", "download", "web", "browse", "request")),
    ("think", ("think", "reason", "plan")),
)


def tool_kind(name: str) -> str:
    """The ACP tool kind (``read``, ``edit``, ``delete``, ``move``, ``search``, ``execute``,
    ``think``, ``fetch`` or ``other``; tool-calls.mdx) a tool's name suggests: its words (split at
    ``_``, ``-``, ``.``, ``/`` and case changes) looked up, the first word that names a kind wins
    (``read_file`` -> ``read``, ``run_tests`` -> ``execute``, ``add`` -> ``other``)."""
    words: list[str] = []
    current = ""
    for ch in name:
        if ch in "_-./: " or (ch.isupper() and current and not current[-1].isupper()):
            if current:
                words.append(current.lower())
            current = "" if ch in "_-./: " else ch
        else:
            current += ch
    if current:
        words.append(current.lower())
    for word in words:
        for kind, names in _KIND_WORDS:
            if word in names:
                return kind
    return "other"


KIND_METADATA = "acp_kind"
"""The key of a pydantic-ai tool's ``metadata`` that gives its ACP tool kind
(``@agent.tool_plain(metadata={"acp_kind": "edit"})``)."""


def _metadata_kinds(toolsets: Sequence[AbstractToolset[Any]], prefix: str = "") -> dict[str, str]:
    """``{tool name: kind}`` from the :data:`KIND_METADATA` of the function tools among
    ``toolsets`` (nested in combined, wrapped and prefixed toolsets too)."""
    from pydantic_ai.toolsets import CombinedToolset, FunctionToolset, PrefixedToolset, WrapperToolset

    found: dict[str, str] = {}
    for toolset in toolsets:
        if isinstance(toolset, FunctionToolset):
            for name, tool in toolset.tools.items():
                kind = (tool.metadata or {}).get(KIND_METADATA)
                if isinstance(kind, str):
                    found[prefix + name] = kind
        elif isinstance(toolset, PrefixedToolset):
            found.update(_metadata_kinds([toolset.wrapped], f"{prefix}{toolset.prefix}_"))
        elif isinstance(toolset, WrapperToolset):
            found.update(_metadata_kinds([toolset.wrapped], prefix))
        elif isinstance(toolset, CombinedToolset):
            found.update(_metadata_kinds(toolset.toolsets, prefix))
    return found


def _locations(args: Mapping[str, Any]) -> list[str]:
    """The absolute paths among a tool call's arguments (``path``, ``file``, ``filename``...)."""
    found: list[str] = []
    for key, value in args.items():
        if isinstance(value, str) and os.path.isabs(value) and any(w in key.lower() for w in ("path", "file", "dir")):
            found.append(value)
    return found


def _tool_content(part: ToolReturnPart) -> list[n.ToolContentLike]:
    """A finished tool call's ACP content: the tool's ``ToolReturn(metadata=...)`` when it is a
    :class:`~acp_trio.neutral.Diff`, a client terminal or a list of them (and text), else the text
    the model got."""
    meta = part.metadata
    items = meta if isinstance(meta, (list, tuple)) else [meta]
    shown = [item for item in items if isinstance(item, (n.Diff, TerminalHandle, str))]
    if shown and len(shown) == len(items):
        return list(shown)
    text = part.model_response_str()
    return [text] if text else []


@dataclass
class _Conversation:
    """What the agent keeps per session beside the layer's session: ``messages`` (pydantic-ai's
    history; ``None``: to be rebuilt from the session's canonical updates), the MCP toolsets, the
    tools the user allowed or rejected for good, the ACP ids used."""

    messages: list[ModelMessage] | None = None
    toolsets: list[AbstractToolset[Any]] = field(default_factory=list)
    mcp_scope: trio.CancelScope | None = None
    always: dict[str, bool] = field(default_factory=dict)
    call_ids: set[str] = field(default_factory=set)


class PydanticAIAgent(n.Agent):
    """Any pydantic-ai agent served over ACP, to protocol version 1 and 2 clients alike (one object
    for every connection: ``serve_stdio(agent)``, ``open_memory_pair(agent, client)``; serve it
    inside :func:`open_loop`).

    ``agent``: the ``pydantic_ai.Agent`` (any ``AbstractAgent``); ``name`` / ``version`` /
    ``title``: the ``initialize`` answer's agent info (default the agent's ``name``, else
    ``"pydantic-ai-agent"``, and ``"0"``); ``store``: where sessions are kept
    (:attr:`acp_trio.neutral.Agent.store`, e.g. a ``SqliteSessionStore``; ``None``: this process
    only); ``models``: the model choices, ``{value: model}`` (a pydantic-ai ``Model`` or a model
    name such as ``"openai:gpt-5.2"``): a session config option ``model`` (category ``model``), the
    first one current (none given: the agent's own model, no option); ``options``: more session
    config options (:class:`~acp_trio.neutral.ConfigOption`: selects and booleans);
    ``model_settings``: from a session's config values (``{config_id: value}``) to the
    ``ModelSettings`` of its next run (``None``: none); ``deps``: from the session to the run's
    ``deps`` (for agents with a ``deps_type``); ``tool_kinds``: ``{tool name: ACP kind}`` where the
    name alone (:func:`tool_kind`) guesses wrong (a tool's ``metadata`` may say it too:
    :data:`KIND_METADATA`); ``tool_title``: from a tool's name and arguments to its tool call's
    title (default the name); ``client_tools``: offer the v1 client's file
    system and terminal as tools when it advertises them; ``versions``: the protocol versions
    served.
    """

    mcp_support = n.McpSupport(stdio=True, http=True, sse=True)
    """The MCP transports a session's servers may use (pydantic-ai's ``MCPToolset``, on FastMCP)."""

    def __init__(
        self,
        agent: AbstractAgent[Any, Any],
        *,
        name: str | None = None,
        version: str = "0",
        title: str | None = None,
        store: SessionStore | None = None,
        models: Mapping[str, Model | str] | None = None,
        options: Sequence[n.ConfigOption] = (),
        model_settings: Callable[[Mapping[str, str | bool]], ModelSettings | None] | None = None,
        deps: Callable[[n.Session], Any] | None = None,
        tool_kinds: Mapping[str, str] | None = None,
        tool_title: Callable[[str, Mapping[str, Any]], str] | None = None,
        client_tools: bool = True,
        versions: Sequence[int] = (1, 2),
    ) -> None:
        super().__init__()
        self.agent = agent
        # the layer reads these class attributes through the instance: this object's own values
        vars(self)["info"] = n.AgentInfo(name=name or agent.name or "pydantic-ai-agent", version=version, title=title)
        vars(self)["versions"] = tuple(versions)
        self.store = store
        self.models: dict[str, Model | str] = dict(models or {})
        self.options = tuple(options)
        self.model_settings = model_settings
        self.deps = deps
        self.tool_kinds = dict(tool_kinds or {})
        self.tool_title = tool_title
        self.client_tools = client_tools
        self.conversations: dict[str, _Conversation] = {}
        ids = [o.config_id for o in self.options]
        if "model" in ids and self.models:
            raise ValueError("config option 'model' is the model choice: give the models, or rename the option")
        if len(set(ids)) != len(ids):
            raise ValueError(f"config option ids must be unique, not {ids}")

    # -- configuration ---------------------------------------------------------------------------
    def config_options(self, session: n.Session) -> Sequence[n.ConfigOption]:
        """The model choice (when :attr:`models` has any) then the user's options."""
        found: list[n.ConfigOption] = []
        if self.models:
            choices = tuple(n.Choice(value, value) for value in self.models)
            found.append(n.ConfigOption("model", "Model", current=choices[0].value, choices=choices, category="model"))
        found.extend(self.options)
        return found

    def _model(self, session: n.Session) -> Model | str | None:
        if not self.models:
            return None
        value = session.config.get("model")
        return self.models.get(value) if isinstance(value, str) else next(iter(self.models.values()))

    # -- sessions --------------------------------------------------------------------------------
    def _conversation(self, session: n.Session) -> _Conversation:
        conversation = self.conversations.get(session.id)
        if conversation is None:
            conversation = self.conversations[session.id] = _Conversation()
        return conversation

    async def new_session(self, session: n.Session) -> None:
        """A new session: an empty history; its MCP servers connected (:meth:`_open_mcp`)."""
        conversation = self.conversations[session.id] = _Conversation(messages=[])
        await self._open_mcp(session, conversation)

    async def resume_session(self, session: n.Session) -> None:
        """Loaded or resumed (maybe made by another process: its history is rebuilt from the
        session's canonical updates on its next turn); the request's MCP servers replace those
        it had."""
        conversation = self._conversation(session)
        self._close_mcp(conversation)
        await self._open_mcp(session, conversation)

    async def close_session(self, session: n.Session) -> None:
        """Closed: its MCP servers stop (its history stays, for a later load)."""
        conversation = self.conversations.get(session.id)
        if conversation is not None:
            self._close_mcp(conversation)

    async def delete_session(self, session_id: str) -> None:
        """Deleted: its history is forgotten and its MCP servers stop."""
        conversation = self.conversations.pop(session_id, None)
        if conversation is not None:
            self._close_mcp(conversation)

    def _close_mcp(self, conversation: _Conversation) -> None:
        if conversation.mcp_scope is not None:
            conversation.mcp_scope.cancel()
        conversation.mcp_scope = None
        conversation.toolsets = []

    async def _open_mcp(self, session: n.Session, conversation: _Conversation) -> None:
        """Connect the session's ``mcpServers`` as pydantic-ai ``MCPToolset`` s, held open by a
        background task of the session (``Session.start_soon``) until the session is closed,
        deleted or attached elsewhere; waits at most :data:`MCP_START_WAIT` seconds."""
        if not session.mcp_servers:
            return
        scope = conversation.mcp_scope = trio.CancelScope()
        opened: list[AbstractToolset[Any]] = []
        ready = trio.Event()

        async def hold() -> None:
            try:
                with scope:
                    await _aio.run(hold_toolsets, session.mcp_servers, session.cwd, opened, ready.set)
            finally:
                ready.set()

        session.start_soon(hold, name=f"session {session.id}: MCP servers")
        with trio.move_on_after(MCP_START_WAIT):
            await ready.wait()
        conversation.toolsets = opened

    # -- the turn --------------------------------------------------------------------------------
    async def prompt(self, turn: n.Turn) -> n.TurnEnd:
        """One ACP prompt turn: pydantic-ai runs until the model answers without tools, each
        approval a permission request between runs (see the package docstring)."""
        session = turn.session
        if not _aio.loop_is_open():
            log.error("%s", NO_LOOP)
            raise RequestError(INTERNAL_ERROR, NO_LOOP)
        conversation = self._conversation(session)
        if conversation.messages is None:
            conversation.messages = messages_from_updates(session.history, stop_at=turn.user_message_id)
        runner = _TurnRunner(self, turn, conversation)
        try:
            runner.kinds = _metadata_kinds(self.agent.toolsets)
        except NotImplementedError:  # an AbstractAgent that does not list its toolsets
            runner.kinds = {}
        try:
            return await runner.run(prompt_content(turn.prompt))
        except BaseException:
            conversation.messages = None  # what the client saw is what the next turn continues from
            raise


class _TurnRunner:
    """One prompt turn: the runs of pydantic-ai it takes and the ACP tool calls they make."""

    def __init__(self, owner: PydanticAIAgent, turn: n.Turn, conversation: _Conversation) -> None:
        self.owner = owner
        self.turn = turn
        self.conversation = conversation
        self.calls: dict[str, n.ToolCall] = {}  # pydantic-ai tool_call_id -> its ACP tool call
        self.usage = RunUsage()
        self.streamed: dict[int, str] = {}  # part index -> text sent of it, in the current model response
        self.kinds: dict[str, str] = {}  # tool name -> ACP kind its metadata gives

    async def run(self, user_prompt: Any) -> n.TurnEnd:
        turn = self.turn
        deferred: DeferredToolResults | None = None
        prompt: Any = user_prompt
        while True:
            try:
                result = await self._run_once(prompt, deferred)
            except UsageLimitExceeded as exc:
                log.info("session %s: %s", turn.session.id, exc)
                return n.TurnEnd("max_turn_requests", usage=self._usage())
            except AgentRunError as exc:
                data: dict[str, Any] = {"error": type(exc).__name__}
                if isinstance(exc, ModelHTTPError):
                    data.update(status=exc.status_code, model=exc.model_name)
                raise RequestError(INTERNAL_ERROR, f"the pydantic-ai run failed: {exc}", data) from exc
            self.usage = self.usage + result.usage
            self.conversation.messages = list(result.all_messages())
            output = result.output
            if not isinstance(output, DeferredToolRequests):
                if not isinstance(output, str):  # structured output (an output tool): shown as JSON
                    turn.new_message()
                    await turn.say(to_json(output, fallback=str).decode())
                return n.TurnEnd(self._stop_reason(self.conversation.messages), usage=self._usage())
            deferred = await self._decide(output)
            prompt = None

    def _stop_reason(self, messages: Sequence[ModelMessage]) -> str:
        last = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
        reason = last.finish_reason if last is not None else None
        return {"length": "max_tokens", "content_filter": "refusal"}.get(reason or "", "end_turn")

    def _usage(self) -> n.Usage | None:
        used = self.usage
        if not (used.input_tokens or used.output_tokens):
            return None
        return n.Usage(
            total_tokens=used.input_tokens + used.output_tokens,
            input_tokens=used.input_tokens,
            output_tokens=used.output_tokens,
            thought_tokens=getattr(used, "output_reasoning_tokens", 0) or None,
            cached_read_tokens=used.cache_read_tokens or None,
            cached_write_tokens=used.cache_write_tokens or None,
        )

    def _output_type(self) -> Any:
        agent = self.owner.agent
        declared = agent.output_type
        listed = declared if isinstance(declared, (list, tuple)) else [declared]
        if DeferredToolRequests in listed or getattr(agent, "_output_validators", None):
            return None  # already there; or not allowed (pydantic-ai: no run output_type with validators)
        return [*listed, DeferredToolRequests]

    async def _run_once(self, prompt: Any, deferred: DeferredToolResults | None) -> AgentRunResult[Any]:
        owner, session = self.owner, self.turn.session
        settings = owner.model_settings(dict(session.config)) if owner.model_settings is not None else None
        toolsets: list[AbstractToolset[Any]] = [*self.conversation.toolsets]
        if owner.client_tools:
            offered = client_toolset(session, self.calls.get)
            if offered is not None:
                toolsets.append(offered)
        context = owner.agent.run_stream_events(
            prompt,
            output_type=self._output_type(),
            message_history=self.conversation.messages,
            deferred_tool_results=deferred,
            model=owner._model(session),
            model_settings=settings,
            deps=owner.deps(session) if owner.deps is not None else None,
            toolsets=toolsets or None,
        )
        events = await _aio.run(context.__aenter__)
        result: AgentRunResult[Any] | None = None
        self.streamed = {}
        try:
            while True:
                try:
                    event = await _aio.run(events.__anext__)
                except StopAsyncIteration:
                    break
                if isinstance(event, AgentRunResultEvent):
                    result = event.result
                else:
                    await self._event(event)
        finally:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + CLOSE_WAIT
                await _aio.run(context.__aexit__, None, None, None)
        if result is None:
            raise RuntimeError("the pydantic-ai run ended without a result")
        return result

    # -- events ----------------------------------------------------------------------------------
    async def _event(self, event: Any) -> None:
        turn = self.turn
        if isinstance(event, PartStartEvent):
            part = event.part
            if isinstance(part, TextPart):
                await self._stream(event.index, part.content, turn.say)
            elif isinstance(part, ThinkingPart):
                await self._stream(event.index, part.content, turn.think)
        elif isinstance(event, PartDeltaEvent):
            delta = event.delta
            if isinstance(delta, TextPartDelta) and delta.content_delta:
                self.streamed[event.index] = self.streamed.get(event.index, "") + delta.content_delta
                await turn.say(delta.content_delta)
            elif isinstance(delta, ThinkingPartDelta) and delta.content_delta:
                self.streamed[event.index] = self.streamed.get(event.index, "") + delta.content_delta
                await turn.think(delta.content_delta)
        elif isinstance(event, FunctionToolCallEvent):
            await self._called(event.part, executing=event.args_valid is not None)
        elif isinstance(event, FunctionToolResultEvent):
            await self._returned(event.part)

    async def _stream(self, index: int, text: str, send: Callable[[str], Any]) -> None:
        """A part (re)started at ``index`` with ``text``: send what was not sent of it yet."""
        before = self.streamed.get(index, "")
        new = text[len(before) :] if text.startswith(before) else text
        self.streamed[index] = text
        if new:
            await send(new)

    def _acp_id(self, call_id: str) -> str:
        """An ACP id for a pydantic-ai tool call id, unique in the session (models reuse ids)."""
        used = self.conversation.call_ids
        acp_id, count = call_id, 1
        while acp_id in used:
            count += 1
            acp_id = f"{call_id}-{count}"
        used.add(acp_id)
        return acp_id

    async def _report(self, part: ToolCallPart, status: str) -> n.ToolCall:
        call = self.calls.get(part.tool_call_id)
        if call is not None:
            return call
        owner = self.owner
        args = part.args_as_dict()
        name = part.tool_name
        kind = owner.tool_kinds.get(name) or self.kinds.get(name) or tool_kind(name)
        title = owner.tool_title(name, args) if owner.tool_title is not None else name
        call = await self.turn.tool(
            title,
            kind=kind,
            status=status,
            raw_input=args,
            locations=_locations(args),
            tool_call_id=self._acp_id(part.tool_call_id),
        )
        self.calls[part.tool_call_id] = call
        return call

    async def _called(self, part: ToolCallPart, *, executing: bool) -> None:
        call = self.calls.get(part.tool_call_id)
        if call is None:
            await self._report(part, "pending")
        elif executing and call.status == "pending":
            await call.update(status="in_progress")

    async def _returned(self, part: ToolReturnPart) -> None:
        call = self.calls.get(part.tool_call_id)
        if call is None:
            call = await self._report(ToolCallPart(part.tool_name, {}, part.tool_call_id), "pending")
        content = _tool_content(part)
        raw = raw_output(part)
        if part.outcome == "success":
            await call.complete(content, raw_output=raw)
        else:
            await call.update(status="failed", content=content, raw_output=raw)

    # -- approvals -------------------------------------------------------------------------------
    async def _decide(self, requests: DeferredToolRequests) -> DeferredToolResults:
        """Ask the user about each call needing approval (``session/request_permission``); an
        "always" answer holds for that tool in the session.  Calls deferred for another reason
        (``CallDeferred``) get a failure: no one runs them over ACP."""
        approvals: dict[str, Any] = {}
        always = self.conversation.always
        for part in requests.approvals:
            call = await self._report(part, "pending")
            allowed = always.get(part.tool_name)
            if allowed is None:
                decision = await call.ask_permission(
                    f"Allow {part.tool_name}?",
                    description=f"The agent wants to call {part.tool_name} with {part.args_as_json_str()}",
                    options=APPROVAL_OPTIONS,
                )
                if decision.cancelled:
                    await trio.lowlevel.checkpoint()  # the turn is cancelled: raises trio.Cancelled
                allowed = decision.allowed
                if decision.option is not None and decision.option.kind.endswith("_always"):
                    always[part.tool_name] = allowed
            approvals[part.tool_call_id] = True if allowed else ToolDenied(DENIED_MESSAGE)
        calls: dict[str, Any] = {part.tool_call_id: ToolFailed(EXTERNAL_MESSAGE) for part in requests.calls}
        return DeferredToolResults(approvals=approvals, calls=calls)

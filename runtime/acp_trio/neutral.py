"""A version-neutral agent API (prototype, issue 33): one agent, served to v1 and v2 clients alike.

Contract: the author subclasses :class:`Agent` and writes the prompt turn once against
:class:`Turn` (``say``, ``think``, ``tool``, ``plan``) and :class:`ToolCall` (``update``,
``complete``, ``fail``, ``ask_permission``).  :func:`handlers` turns the agent into the
``{variant: factory}`` mapping every entry point takes (``run_agent_stdio``, ``AcpApp``,
``open_memory_pair``), so the runtime's ``initialize`` negotiation picks v1 or v2 per connection
and builds that version's surface.  Each output is made once, as a v2 update (the canonical form:
every entity has an id); a v2 connection sends it as it is, a v1 connection sends what
:class:`V1View` projects it to, as ``docs/protocol/v2/migration.mdx`` maps them:

- ``user_message`` acknowledgment, receipt and ``state_update`` (``running``,
  ``requires_action`` around a permission request, ``idle`` with the stop reason) exist in v2 only;
  on v1 the pending ``session/prompt`` is the turn and its answer carries the stop reason;
- the first ``tool_call_update`` of an id becomes v1's ``tool_call``; tool status ``cancelled``
  (v2 only) becomes ``failed``;
- ``plan_update`` (``planId``) becomes v1's ``plan``, whose entries are those of every plan of the
  session in creation order (v1's ``plan`` replaces the whole list);
- a :class:`Diff` is v2 ``changes`` plus a ``git_patch`` and v1 ``path``/``oldText``/``newText``,
  both exact because the author gave the texts (the v1 form travels beside the v2 update);
- a v2 update with no v1 form raises :class:`VersionError` naming the version: never sent as v1's
  catch-all (a strict v1 client would drop the connection), never dropped silently.

What it deliberately does not do yet (see ``/work/briefs/33-api.md``, the design): sessions beyond
new/list/close/resume without replay, config options and modes, elicitation, display terminals,
the session store, the adapter.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from types import ModuleType
from typing import Any, ClassVar, TypeAlias, get_args

import attrs

from acp_schema import v1, v2

from ._converter import DecodeError, converter
from ._core import RequestError
from ._mapping import Diff, VersionError, diff_to_v1, diff_to_v2, diff_v2_to_v1
from ._roles import AgentSideConnection
from ._spec import UNSET, UnsetType

__all__ = [
    "ALLOW_OR_REJECT",
    "Agent",
    "AgentInfo",
    "ContentLike",
    "Decision",
    "Diff",
    "Option",
    "Plan",
    "PlanEntry",
    "Session",
    "StopReason",
    "ToolCall",
    "Turn",
    "V1View",
    "VersionError",
    "diff_to_v1",
    "diff_to_v2",
    "diff_v2_to_v1",
    "handlers",
]

StopReason: TypeAlias = str
"""``end_turn``, ``max_tokens``, ``max_turn_requests``, ``refusal``, ``cancelled`` (both versions)."""
ContentLike: TypeAlias = "str | v2.ContentBlock"


@attrs.frozen
class AgentInfo:
    """The agent's name: v1 ``agentInfo``, v2 ``info`` (schema ``$defs/Implementation``)."""

    name: str
    version: str
    title: str | None = None


@attrs.frozen
class Option:
    """A permission option (``optionId``, ``name``, ``kind``; the same in both versions)."""

    option_id: str
    name: str
    kind: str


ALLOW_OR_REJECT = (Option("allow", "Allow", "allow_once"), Option("reject", "Reject", "reject_once"))
_ALLOWING = ("allow_once", "allow_always")


@attrs.frozen
class Decision:
    """The answer to a permission request.  ``option``: the chosen one, ``None`` when the request was
    cancelled or answered with an outcome this layer does not know (never an approval)."""

    option: Option | None
    cancelled: bool = False

    @property
    def allowed(self) -> bool:
        """Whether an ``allow_once`` / ``allow_always`` option was chosen."""
        return self.option is not None and self.option.kind in _ALLOWING


@attrs.frozen
class PlanEntry:
    """One plan entry (``content``, ``priority``, ``status``; the same in both versions, v2 adds
    status ``cancelled``)."""

    content: str
    status: str = "pending"
    priority: str = "medium"


def _v1_value(value: Any, alias: Any, where: str, fallback: str | None = None) -> Any:
    """``value`` when v1's closed enum ``alias`` has it, else ``fallback``; without a fallback
    :class:`VersionError` (v2's enums are open, v1's are not)."""
    if value in get_args(alias):
        return value
    if fallback is not None:
        return fallback
    raise VersionError(1, where, f"v1 knows only {', '.join(get_args(alias))}, not {value!r}")


def _to_v1(value: Any, target: Any, where: str) -> Any:
    """A v2 object whose wire shape v1 shares (content blocks, locations, ...) as the v1 type;
    :class:`VersionError` when v1 has no such shape."""
    if isinstance(value, v2.DiffToolCallContent):
        return diff_v2_to_v1(value)
    try:
        result = converter.structure(converter.unstructure(value), target)
    except DecodeError as exc:
        raise VersionError(1, where, f"the v2 {type(value).__name__} has no v1 form ({exc})") from None
    if type(result).__name__.endswith("Other"):  # v1's catch-all: v1 has no such variant
        raise VersionError(1, where, f"v1 has no {type(value).__name__}")
    return result


def _to_v2(value: Any, target: Any) -> Any:
    return converter.structure(converter.unstructure(value), target)


def _block(content: ContentLike) -> v2.ContentBlock:
    return v2.TextContentBlock(text=content) if isinstance(content, str) else content


class V1View:
    """Row by row, the v1 form of one session's v2 updates (sans-IO; one per connection).

    :meth:`project` returns the v1 updates to send for a v2 one; ``v1_content``, when given, is the
    exact v1 rendering of the update's tool call ``content`` (a :class:`Diff`'s texts, which its v2
    form does not carry).  Raises :class:`VersionError` for a v2 update v1 cannot express.
    """

    _STATUS: ClassVar[dict[str, str]] = {"cancelled": "failed"}  # row T10

    def __init__(self) -> None:
        self._tool_calls: set[str] = set()
        self._plans: dict[str, list[v1.PlanEntry]] = {}

    def project(self, update: Any, v1_content: Sequence[Any] | None = None) -> list[Any]:
        """The v1 updates for the v2 ``update`` (possibly none: v2 state the v1 wire leaves implicit)."""
        if isinstance(update, v2.AgentMessageChunkSessionUpdate):
            return [
                v1.AgentMessageChunkSessionUpdate(
                    content=_to_v1(update.content, v1.ContentBlock, "content"), message_id=update.message_id
                )
            ]
        if isinstance(update, v2.AgentThoughtChunkSessionUpdate):
            return [
                v1.AgentThoughtChunkSessionUpdate(
                    content=_to_v1(update.content, v1.ContentBlock, "content"), message_id=update.message_id
                )
            ]
        if isinstance(update, v2.UserMessageSessionUpdate):  # row T1: implicit in v1's request
            return []
        if isinstance(
            update,
            (
                v2.RunningStateUpdateSessionUpdate,
                v2.IdleStateUpdateSessionUpdate,
                v2.RequiresActionStateUpdateSessionUpdate,
            ),
        ):
            return []  # rows T2, T22: the pending request (and its answer) say it in v1
        if isinstance(update, v2.ToolCallUpdateSessionUpdate):
            return [self._tool_call(update, v1_content)]
        if isinstance(update, v2.PlanUpdateSessionUpdate):
            return [self._plan(update)]
        raise VersionError(1, f"session/update {type(update).__name__}", "no v1 mapping (migration.mdx § At a glance)")

    def _content(self, update: v2.ToolCallUpdateSessionUpdate, v1_content: Sequence[Any] | None) -> Any:
        if v1_content is not None:
            return list(v1_content)
        if isinstance(update.content, list):
            return [_to_v1(item, v1.ToolCallContent, "tool call content") for item in update.content]
        return update.content  # UNSET, or None (cleared)

    def _tool_call(self, update: v2.ToolCallUpdateSessionUpdate, v1_content: Sequence[Any] | None) -> Any:
        status: Any = update.status
        if isinstance(status, str):  # row T10
            status = _v1_value(self._STATUS.get(status, status), v1.ToolCallStatus, "tool call status")
        kind: Any = update.kind
        if isinstance(kind, str):  # v2's open ToolKind: a kind v1 lacks is shown as "other"
            kind = _v1_value(kind, v1.ToolKind, "tool call kind", "other")
        content = self._content(update, v1_content)
        locations = (
            [_to_v1(loc, v1.ToolCallLocation, "location") for loc in update.locations]
            if isinstance(update.locations, list)
            else update.locations
        )
        if update.tool_call_id not in self._tool_calls:  # row T8: the first sight creates it
            self._tool_calls.add(update.tool_call_id)
            return v1.ToolCallSessionUpdate(
                tool_call_id=update.tool_call_id,
                title=update.title if isinstance(update.title, str) else "",
                kind=UNSET if kind is None else kind,
                status=UNSET if status is None else status,
                content=content if isinstance(content, list) else UNSET,
                locations=locations if isinstance(locations, list) else UNSET,
                raw_input=update.raw_input,
                raw_output=update.raw_output,
                meta=update.meta,
            )
        # row T9: v1 has no null patch: a cleared list is sent empty
        return v1.ToolCallUpdateSessionUpdate(
            tool_call_id=update.tool_call_id,
            title=update.title,
            kind=kind,
            status=status,
            content=[] if content is None else content,
            locations=[] if locations is None else locations,
            raw_input=update.raw_input,
            raw_output=update.raw_output,
            meta=update.meta,
        )

    def _plan(self, update: v2.PlanUpdateSessionUpdate) -> Any:
        plan = update.plan
        if not isinstance(plan, v2.ItemsPlanUpdateContent):
            raise VersionError(1, "plan_update of another type than items", "v1 plans are entry lists")
        self._plans[plan.plan_id] = [  # row T20: v1 has no cancelled entry (design Q3)
            v1.PlanEntry(
                content=e.content,
                priority=_v1_value(e.priority, v1.PlanEntryPriority, "plan entry priority", "medium"),
                status=_v1_value(
                    "completed" if e.status == "cancelled" else e.status, v1.PlanEntryStatus, "plan status"
                ),
            )
            for e in plan.entries
        ]
        return v1.PlanSessionUpdate(entries=[entry for entries in self._plans.values() for entry in entries])


# -- wires: one per connection, the version's way to send ------------------------------------------
class _Wire:
    version: int

    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn

    async def update(self, session_id: str, update: Any, v1_content: Sequence[Any] | None = None) -> None:
        raise NotImplementedError

    async def ask_permission(self, session_id: str, title: str, tool_call_id: str, options: Sequence[Option]) -> Any:
        raise NotImplementedError


class _V2Wire(_Wire):
    version = 2

    def __init__(self, conn: AgentSideConnection) -> None:
        super().__init__(conn)
        self.client = v2.ClientPeer(conn)

    async def update(self, session_id: str, update: Any, v1_content: Sequence[Any] | None = None) -> None:
        await self.client.session_update(v2.UpdateSessionNotification(session_id=session_id, update=update))

    async def ask_permission(self, session_id: str, title: str, tool_call_id: str, options: Sequence[Option]) -> Any:
        request = v2.RequestPermissionRequest(
            session_id=session_id,
            title=title,
            subject=v2.ToolCallRequestPermissionSubject(tool_call=v2.ToolCallUpdate(tool_call_id=tool_call_id)),
            options=[v2.PermissionOption(option_id=o.option_id, name=o.name, kind=o.kind) for o in options],
        )
        await self.update(session_id, v2.RequiresActionStateUpdateSessionUpdate())  # row T15
        response = await self.client.session_request_permission(request)
        if not isinstance(response.outcome, v2.CancelledRequestPermissionOutcome):
            await self.update(session_id, v2.RunningStateUpdateSessionUpdate())
        return response.outcome


class _V1Wire(_Wire):
    version = 1

    def __init__(self, conn: AgentSideConnection) -> None:
        super().__init__(conn)
        self.client = v1.ClientPeer(conn)
        self.views: dict[str, V1View] = {}

    async def update(self, session_id: str, update: Any, v1_content: Sequence[Any] | None = None) -> None:
        view = self.views.setdefault(session_id, V1View())
        for one in view.project(update, v1_content):
            await self.client.session_update(v1.SessionNotification(session_id=session_id, update=one))

    async def ask_permission(self, session_id: str, title: str, tool_call_id: str, options: Sequence[Option]) -> Any:
        # row T15: v1 has no prompt copy; the tool call keeps its own title (design Q5)
        request = v1.RequestPermissionRequest(
            session_id=session_id,
            tool_call=v1.ToolCallUpdate(tool_call_id=tool_call_id),
            options=[
                v1.PermissionOption(
                    option_id=o.option_id, name=o.name, kind=_v1_value(o.kind, v1.PermissionOptionKind, "option kind")
                )
                for o in options
            ],
        )
        return (await self.client.session_request_permission(request)).outcome


# -- the author's objects --------------------------------------------------------------------------
@attrs.define
class Session:
    """One session: ``id``, ``cwd`` (absolute), and the protocol version of the connection it is on."""

    id: str
    cwd: str
    protocol_version: int


class Turn:
    """One prompt turn of ``session``: ``prompt`` (v2 content blocks; v1 ones converted), ``text``
    (its text blocks joined)."""

    def __init__(self, session: Session, wire: _Wire, prompt: list[v2.ContentBlock]) -> None:
        self.session = session
        self.prompt = prompt
        self.text = "".join(b.text for b in prompt if isinstance(b, v2.TextContentBlock))
        self._wire = wire
        self._message: tuple[str, str] | None = None  # (kind, messageId) of the message being streamed
        self._tools = 0
        self._plans = 0

    async def _send(self, update: Any, v1_content: Sequence[Any] | None = None) -> None:
        await self._wire.update(self.session.id, update, v1_content)

    def _message_id(self, kind: str) -> str:
        if self._message is None or self._message[0] != kind:
            self._message = (kind, f"msg_{uuid.uuid4().hex[:12]}")
        return self._message[1]

    def new_message(self) -> None:
        """The next :meth:`say` or :meth:`think` starts a new message (a new ``messageId``)."""
        self._message = None

    async def say(self, content: ContentLike) -> None:
        """Stream ``content`` (a ``str`` is a text block) as part of the agent's current message:
        ``agent_message_chunk`` in both versions, with the message's ``messageId``."""
        update = v2.AgentMessageChunkSessionUpdate(message_id=self._message_id("agent"), content=_block(content))
        await self._send(update)

    async def think(self, content: ContentLike) -> None:
        """Stream ``content`` as the agent's current thought (``agent_thought_chunk``, both versions)."""
        update = v2.AgentThoughtChunkSessionUpdate(message_id=self._message_id("thought"), content=_block(content))
        await self._send(update)

    async def tool(
        self,
        title: str,
        *,
        kind: str = "other",
        locations: Sequence[str] = (),
        status: str = "pending",
        tool_call_id: str | None = None,
    ) -> ToolCall:
        """Report a new tool call (v1 ``tool_call``, v2 the first ``tool_call_update`` of its id)
        and return it.  ``locations``: absolute paths."""
        self._tools += 1
        self._message = None
        call = ToolCall(self, tool_call_id or f"call_{self._tools}_{uuid.uuid4().hex[:8]}")
        update = v2.ToolCallUpdateSessionUpdate(
            tool_call_id=call.tool_call_id,
            title=title,
            kind=kind,
            status=status,
            locations=[v2.ToolCallLocation(path=p) for p in locations] if locations else UNSET,
        )
        await self._send(update)
        call.status = status
        return call

    async def plan(self, entries: Sequence[PlanEntry | str], *, plan_id: str | None = None) -> Plan:
        """Publish a plan (v1 ``plan``, v2 ``plan_update``) and return it; a ``str`` is a pending entry."""
        self._plans += 1
        self._message = None
        plan = Plan(self, plan_id or f"plan_{self._plans}")
        await plan.set(entries)
        return plan


class ToolCall:
    """A tool call of a :class:`Turn`: patch it with :meth:`update`, end it with :meth:`complete`
    or :meth:`fail`, ask about it with :meth:`ask_permission`."""

    def __init__(self, turn: Turn, tool_call_id: str) -> None:
        self.turn = turn
        self.tool_call_id = tool_call_id
        self.status = "pending"

    async def update(
        self,
        *,
        status: str | UnsetType = UNSET,
        title: str | UnsetType = UNSET,
        content: Sequence[ContentLike | Diff] | UnsetType = UNSET,
        raw_output: Any = UNSET,
    ) -> None:
        """Patch the tool call (``tool_call_update``, both versions): fields left ``UNSET`` stay as
        they are; ``content`` replaces the whole list (a ``str`` or content block is wrapped, a
        :class:`Diff` becomes each version's diff).  Status ``cancelled`` is ``failed`` on v1."""
        v2_content: list[v2.ToolCallContent] | UnsetType = UNSET
        v1_content: list[Any] | None = None
        if not isinstance(content, UnsetType):
            v2_content = [
                diff_to_v2(item) if isinstance(item, Diff) else v2.ContentToolCallContent(content=_block(item))
                for item in content
            ]
            if any(isinstance(item, Diff) for item in content):  # the exact v1 form travels beside
                v1_content = []
                for item, c in zip(content, v2_content, strict=True):
                    if isinstance(item, Diff):
                        v1_content.extend(diff_to_v1(item))
                    else:
                        v1_content.append(_to_v1(c, v1.ToolCallContent, "content"))
        update = v2.ToolCallUpdateSessionUpdate(
            tool_call_id=self.tool_call_id, status=status, title=title, content=v2_content, raw_output=raw_output
        )
        await self.turn._send(update, v1_content)
        if isinstance(status, str):
            self.status = status

    async def complete(self, content: Sequence[ContentLike | Diff] | UnsetType = UNSET) -> None:
        """Status ``completed``, with ``content`` when given."""
        await self.update(status="completed", content=content)

    async def fail(self, reason: str | None = None) -> None:
        """Status ``failed``, with ``reason`` as its content when given."""
        await self.update(status="failed", content=UNSET if reason is None else [reason])

    async def ask_permission(self, title: str, *, options: Sequence[Option] = ALLOW_OR_REJECT) -> Decision:
        """Ask the user about this tool call (``session/request_permission``): v2 with ``title`` and
        the tool call as ``subject``, reporting ``requires_action`` while it waits and ``running``
        after; v1 with the tool call only (v1 has no prompt copy).  An outcome this layer does not
        know is never an approval."""
        self.turn._message = None
        outcome = await self.turn._wire.ask_permission(self.turn.session.id, title, self.tool_call_id, options)
        if getattr(outcome, "outcome", None) == "cancelled":
            return Decision(None, cancelled=True)
        chosen = getattr(outcome, "option_id", None)
        return Decision(next((o for o in options if o.option_id == chosen), None))


class Plan:
    """A plan of a :class:`Turn`: :meth:`set` replaces its entries, :meth:`mark` one entry's status."""

    def __init__(self, turn: Turn, plan_id: str) -> None:
        self.turn = turn
        self.plan_id = plan_id
        self.entries: tuple[PlanEntry, ...] = ()

    async def set(self, entries: Sequence[PlanEntry | str]) -> None:
        """Replace the plan's entries and publish it (v1 ``plan``, v2 ``plan_update``)."""
        self.entries = tuple(PlanEntry(e) if isinstance(e, str) else e for e in entries)
        wire = [v2.PlanEntry(content=e.content, priority=e.priority, status=e.status) for e in self.entries]
        plan = v2.ItemsPlanUpdateContent(plan_id=self.plan_id, entries=wire)
        await self.turn._send(v2.PlanUpdateSessionUpdate(plan=plan))

    async def mark(self, index: int, status: str) -> None:
        """Set entry ``index``'s status and publish the plan again."""
        entries = list(self.entries)
        entries[index] = attrs.evolve(entries[index], status=status)
        await self.set(entries)


class Agent:
    """Subclass it and write :meth:`prompt`; one object serves every connection, v1 and v2 alike
    (:func:`handlers`)."""

    info: ClassVar[AgentInfo] = AgentInfo(name="acp-trio-agent", version="0")

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}

    async def new_session(self, session: Session) -> None:
        """Set up a new session; raise ``RequestError`` to refuse it."""

    async def prompt(self, turn: Turn) -> StopReason:
        """Run one prompt turn and return its stop reason."""
        raise NotImplementedError


# -- the surfaces: one handler object per connection and version -----------------------------------
class _Surface:
    def __init__(self, agent: Agent, wire: _Wire) -> None:
        self.agent = agent
        self.wire = wire
        self.conn = wire.conn

    def _session(self, session_id: str) -> Session:
        session = self.agent.sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(session_id)
        session.protocol_version = self.wire.version
        return session

    async def _new(self, cwd: str) -> str:
        if not os.path.isabs(cwd):
            raise RequestError.invalid_params({"path": "$.cwd", "detail": "cwd must be an absolute path"})
        session = Session(f"sess_{uuid.uuid4().hex[:12]}", cwd, self.wire.version)
        await self.agent.new_session(session)
        self.agent.sessions[session.id] = session
        return session.id


class _V1Surface(_Surface):
    def __init__(self, agent: Agent, conn: AgentSideConnection) -> None:
        super().__init__(agent, _V1Wire(conn))

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        info = self.agent.info
        return v1.InitializeResponse(
            protocol_version=1,
            agent_capabilities=v1.AgentCapabilities(
                prompt_capabilities=v1.PromptCapabilities(embedded_context=True),
            ),
            auth_methods=[],
            agent_info=v1.Implementation(name=info.name, version=info.version, title=info.title or UNSET),
        )

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id=await self._new(params.cwd))

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        session = self._session(params.session_id)
        prompt = [_to_v2(block, v2.ContentBlock) for block in params.prompt]
        stop_reason = await self.agent.prompt(Turn(session, self.wire, prompt))  # row T1/T2: the answer ends it
        # row T2: a stop reason v1 lacks (v2's are open) ends the turn end_turn, the value in _meta
        known = _v1_value(stop_reason, v1.StopReason, "stop reason", "end_turn")
        meta: dict[str, Any] | UnsetType = UNSET if known == stop_reason else {"acp-trio/stopReason": stop_reason}
        return v1.PromptResponse(stop_reason=known, meta=meta)


class _V2Surface(_Surface):
    def __init__(self, agent: Agent, conn: AgentSideConnection) -> None:
        super().__init__(agent, _V2Wire(conn))

    async def initialize(self, params: v2.InitializeRequest) -> v2.InitializeResponse:
        info = self.agent.info
        prompt = v2.PromptCapabilities(embedded_context=v2.PromptEmbeddedContextCapabilities())
        return v2.InitializeResponse(
            protocol_version=2,
            info=v2.Implementation(name=info.name, version=info.version, title=info.title or UNSET),
            capabilities=v2.AgentCapabilities(session=v2.SessionCapabilities(prompt=prompt)),
            auth_methods=[],
        )

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id=await self._new(params.cwd))

    async def session_list(self, params: v2.ListSessionsRequest) -> v2.ListSessionsResponse:
        cwd = params.cwd if isinstance(params.cwd, str) else None
        found = [s for s in self.agent.sessions.values() if cwd is None or s.cwd == cwd]
        return v2.ListSessionsResponse(sessions=[v2.SessionInfo(session_id=s.id, cwd=s.cwd) for s in found])

    async def session_resume(self, params: v2.ResumeSessionRequest) -> v2.ResumeSessionResponse:
        self._session(params.session_id)
        if params.replay_from is not None and not isinstance(params.replay_from, UnsetType):
            raise RequestError.invalid_params({"path": "$.replayFrom", "detail": "this prototype does not replay"})
        return v2.ResumeSessionResponse()

    async def session_close(self, params: v2.CloseSessionRequest) -> v2.CloseSessionResponse:
        self._session(params.session_id)  # the runtime cancelled its turn already
        return v2.CloseSessionResponse()

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        session = self._session(params.session_id)
        message_id = f"msg_user_{uuid.uuid4().hex[:12]}"
        # row T1: where the user message went, then the receipt; start_turn sends running / idle
        await self.wire.update(
            session.id, v2.UserMessageSessionUpdate(message_id=message_id, content=list(params.prompt))
        )
        turn = Turn(session, self.wire, list(params.prompt))
        self.conn.start_turn(session.id, partial(self.agent.prompt, turn))
        return v2.PromptResponse(message_id=message_id)


def handlers(agent: Agent, versions: Sequence[int] = (1, 2)) -> dict[ModuleType, Callable[[AgentSideConnection], Any]]:
    """``{variant: factory}`` serving ``agent`` in the protocol ``versions`` given (default both):
    pass it to ``run_agent_stdio``, ``AcpApp``, ``open_memory_pair`` or ``AgentSideConnection``;
    the client's ``initialize`` picks the version.  Raises ``ValueError`` for a version this layer
    does not speak."""
    surfaces: dict[int, tuple[ModuleType, Callable[[AgentSideConnection], Any]]] = {
        1: (v1, partial(_V1Surface, agent)),
        2: (v2, partial(_V2Surface, agent)),
    }
    unknown = sorted(set(versions) - set(surfaces))
    if unknown or not versions:
        raise ValueError(f"protocol versions {unknown or list(versions)}: this layer speaks 1 and 2")
    return dict(surfaces[version] for version in sorted(set(versions)))

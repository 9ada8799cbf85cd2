"""A version-neutral agent API (prototype, issue 33): one agent, served to v1 and v2 clients alike.

Contract: the author subclasses :class:`Agent` and writes the prompt turn once against
:class:`Turn` (``say``, ``think``, ``tool``, ``plan``) and :class:`ToolCall` (``update``,
``complete``, ``fail``, ``ask_permission``).  :func:`handlers` turns the agent into the
``{variant: factory}`` mapping every entry point takes (``run_agent_stdio``, ``AcpApp``,
``open_memory_pair``), so the runtime's ``initialize`` negotiation picks v1 or v2 per connection
and builds that version's surface.  Each output is made once, as a v2 update (the canonical form:
every entity has an id); a v2 connection sends it as it is, a v1 connection sends what
:class:`V1View` (``acp_trio._views``) projects it to with the rows of ``acp_trio._mapping``, as
``docs/protocol/v2/migration.mdx`` maps them:

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
  catch-all (a strict v1 client would drop the connection), never dropped silently (an unknown
  variant, which this layer never makes, is dropped with a logged warning and counted in ``_meta``).

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
from typing import Any, ClassVar, TypeAlias

import attrs

from acp_schema import v1, v2

from ._core import RequestError
from ._mapping import (
    Diff,
    VersionError,
    content_to_v2,
    diff_to_v1,
    diff_to_v2,
    diff_v2_to_v1,
    permission_options_to_v1,
    stop_reason_to_v1,
    tool_content_to_v1,
)
from ._roles import AgentSideConnection
from ._spec import UNSET, UnsetType
from ._views import V1View

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


def _block(content: ContentLike) -> v2.ContentBlock:
    return v2.TextContentBlock(text=content) if isinstance(content, str) else content


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
            options=permission_options_to_v1(
                [v2.PermissionOption(option_id=o.option_id, name=o.name, kind=o.kind) for o in options]
            ),
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
                        v1_content.append(tool_content_to_v1(c))
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
        prompt = [content_to_v2(block) for block in params.prompt]
        stop_reason = await self.agent.prompt(Turn(session, self.wire, prompt))  # row T1/T2: the answer ends it
        return stop_reason_to_v1(stop_reason)  # row T2: one v1 lacks is end_turn, the value in _meta


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

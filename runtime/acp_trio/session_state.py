"""Fold the ``session/update`` stream of a session into live state: transcript, tool calls, plans, run state, ...

Contract: :class:`SessionState` holds what the agent reported about one session, updated by
:meth:`SessionState.apply` with each session notification (``v1.SessionNotification``,
``v2.UpdateSessionNotification`` or ``v2_unstable.UpdateSessionNotification``) or bare
``SessionUpdate`` variant of those schemas, in arrival order; it dispatches on the update's class,
so one state takes updates of either protocol version.  :class:`SessionStates` is a client
handler (it has ``session_update``) that keeps one :class:`SessionState` per session id.

**v1** folding rules:

- **messages**: ``user_message_chunk``, ``agent_message_chunk`` and ``agent_thought_chunk`` append
  their ``ContentBlock`` to a :class:`MessageEntry` (role ``"user"``, ``"agent"``, ``"thought"``).
  A chunk joins the last transcript entry when that is a message of the same role and the
  ``messageId`` s do not differ (a missing id matches; the first id seen is adopted); a chunk whose
  ``messageId`` names an earlier message of the same role joins that message wherever it is (the
  spec: chunks with the same ``messageId`` belong to the same message); anything else starts a
  new message.  ``MessageEntry.text`` concatenates the text blocks;
- **tool calls**: ``tool_call`` creates a :class:`ToolCallEntry` (``kind`` defaults to
  ``"other"``, ``status`` to ``"pending"``, as the spec says), or replaces every field of an
  existing one in place; ``tool_call_update`` changes only the fields it sets (absent or ``null``
  leaves a field unchanged; ``content`` and ``locations`` are replaced whole), and creates the
  entry when the id is unknown (``announced`` is then ``False``);
- ``plan`` (replaced whole), ``available_commands_update``, ``current_mode_update``,
  ``config_option_update`` and ``usage_update`` keep the latest value;
  ``session_info_update`` patches :attr:`SessionState.session_info` (absent: unchanged, ``null``:
  cleared); ``notice`` is appended to :attr:`SessionState.notices` (not to the transcript: notices
  are not history); ``compaction_update`` / ``compaction_summary_chunk`` keep a
  :class:`CompactionEntry` per ``compactionId`` whose first update fixes its transcript position
  (patch fields: absent unchanged, ``null`` cleared; a chunk appends to the summary, a concrete
  ``summary`` replaces it).

**v2** (and ``v2_unstable``) folding rules: every upsert goes through :mod:`acp_trio.upsert`
(omitted = unchanged, ``null`` = cleared, value = replaced, chunks append, ``_meta`` patched by
top-level key, unknown wire fields kept in ``extra_fields`` by the same rule):

- **messages** are keyed by ``(role, messageId)`` (each message type has its own id space);
  ``user_message`` / ``agent_message`` / ``agent_thought`` upsert the whole message (new id: a new
  :class:`MessageEntry` at the end of the transcript with empty content unless given; ``content``
  omitted: unchanged, ``null`` or ``[]``: cleared, an array: replaces everything, chunks included;
  ``_meta`` patched), the ``*_chunk`` variants append their block to the current content (creating
  the message when the id is new; a chunk's ``_meta`` is chunk-scoped and not stored).  An entry
  keeps the position where its id first appeared.  (``v2_unstable`` ``session_message`` /
  ``session_message_chunk``: the same, role ``"session"``, as :class:`SessionMessageEntry`);
- **tool calls**: the first ``tool_call_update`` for an id creates the :class:`ToolCallEntry`
  (defaults: no title ``""``, ``kind`` ``"other"``, ``status`` ``"pending"``; ``announced``
  ``True``) and later ones patch it; ``null`` resets ``title`` to ``""``, ``kind`` to ``"other"``,
  ``status`` to ``"pending"``, ``content``/``locations`` to ``[]``, anything else to ``None``;
  ``tool_call_content_chunk`` appends one ``ToolCallContent`` (creating the entry, ``announced``
  ``False``, when the id is new);
- **plans**: ``plan_update`` replaces the plan content stored under its ``planId`` in
  :attr:`SessionState.plans` (any ``type``, unknown ones verbatim; a new id is added at the end);
  ``v2_unstable`` ``plan_removed`` deletes it;
- **terminals** (Agent-owned, display only): ``terminal_update`` upserts a :class:`TerminalEntry`
  by ``terminalId`` (``output`` is a replacement snapshot, base64-decoded; ``null`` empties it);
  ``terminal_output_chunk`` appends its independently decoded bytes (invalid base64 is logged and
  skipped);
- **run state**: ``state_update`` sets :attr:`SessionState.run_state` (``"idle"`` until one
  arrives, as a new session is; ``"running"``, ``"requires_action"``, ``"idle"``, or an unknown
  state's string, which is never treated as idle; such updates are also kept in ``unknown``).  An
  idle update that carries ``stopReason`` or ``error`` sets :attr:`~SessionState.stop_reason` /
  :attr:`~SessionState.stop_error` (one without either, e.g. a repeated snapshot, leaves them);
  any other state clears them.  :meth:`SessionState.wait_idle` / :meth:`SessionStates.wait_idle`
  wait for idle;
- ``config_option_update`` and ``available_commands_update`` replace their list;
  ``session_info_update`` is an upsert of :attr:`SessionState.session_info`; ``usage_update``
  keeps the latest update, with an omitted ``cost`` carried over from the previous one;
  ``notice`` and compactions as in v1 (``_meta`` patched by key); ``v2_unstable``
  ``subagent_update`` upserts a :class:`SubagentEntry` in :attr:`SessionState.subagents`.

Anything else (``SessionUpdateOther``: a variant the schema does not know, including
``_``-prefixed custom ones, or an update object of another schema variant such as ``v1_unstable``)
is kept verbatim, in order, in :attr:`SessionState.unknown`.

Importing this module loads only ``acp_schema.v1``: the v2 rules are registered for ``acp_schema.v2``
(or ``v2_unstable``) when the first object of that variant reaches a state, which exists only once
a v2 connection loaded it, so a v1 client never pays for importing the v2 schema (about 140 ms
each for ``v2`` and ``v2_unstable``).  The type aliases below name v2 types for type checkers only.

For v1 ``session/load`` and v2 ``session/resume`` with ``replayFrom: {"type": "start"}`` the agent
replays the history as ``session/update`` before its response, and the runtime hands a response
over only after the updates before it were handled, so the same folding rebuilds the transcript:
:meth:`SessionStates.load` / :meth:`SessionStates.resume` reset the state, send the request, and
apply the response's setup (modes, config options, commands).

Sources: ``docs/protocol/v1/prompt-turn.mdx`` (Agent Reports Output, Message IDs, Cancellation),
``tool-calls.mdx``, ``agent-plan.mdx``, ``session-modes.mdx``, ``session-config-options.mdx``,
``slash-commands.mdx``, ``session-list.mdx`` (Updating Session Metadata), ``session-setup.mdx``
(Loading Sessions), ``draft/prompt-turn.mdx`` (Session Notices, Session Compaction, Session Usage
Updates); ``docs/protocol/v2/migration.mdx`` (Updates are upserts, Messages and message IDs, Tool
calls, Plans, Agent-owned terminal display), ``v2/prompt-lifecycle.mdx`` (Message IDs, Session
States, Stop Reasons), ``v2/tool-calls.mdx``, ``v2/agent-plan.mdx``, ``v2/session-setup.mdx``
(replayFrom); the schemas' ``$defs/SessionUpdate`` variants (``schema/v2/schema.json`` for the
``_meta`` key patch, ``kind``/``status`` resets, ``StateUpdate`` and ``UsageUpdate.cost``).
"""

from __future__ import annotations

import base64
import binascii
import inspect
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeAlias, TypeVar

import attrs
import trio

from acp_schema import v1

from ._spec import UNSET
from .upsert import append_item, apply_patch, upsert

if TYPE_CHECKING:  # the v2 variants load when a v2 object first reaches a state (see _learn_variant)
    from acp_schema import v2, v2_unstable

log = logging.getLogger("acp_trio.session_state")

Role: TypeAlias = Literal["user", "agent", "thought", "session"]
"""Who a message is from: ``user_message(_chunk)`` → ``"user"``, ``agent_message(_chunk)`` →
``"agent"``, ``agent_thought(_chunk)`` → ``"thought"``; ``"session"``: a ``v2_unstable``
``session_message(_chunk)`` (a message exchanged with another session)."""

ContentBlock: TypeAlias = "v1.ContentBlock | v2.ContentBlock | v2_unstable.ContentBlock"
"""A message's content block, of any schema variant."""

ToolCallContent: TypeAlias = "v1.ToolCallContent | v2.ToolCallContent | v2_unstable.ToolCallContent"
"""A tool call's content item, of any schema variant."""

ToolCallLocation: TypeAlias = "v1.ToolCallLocation | v2.ToolCallLocation | v2_unstable.ToolCallLocation"
"""A tool call's location, of any schema variant."""

SessionNotification: TypeAlias = (
    "v1.SessionNotification | v2.UpdateSessionNotification | v2_unstable.UpdateSessionNotification"
)
"""A ``session/update`` notification's params, of any schema variant :class:`SessionState` folds."""

SessionUpdate: TypeAlias = "v1.SessionUpdate | v2.SessionUpdate | v2_unstable.SessionUpdate"
"""A ``SessionUpdate`` variant, of any schema variant :class:`SessionState` folds."""

UpdateCallback: TypeAlias = Callable[["SessionState", Any], "Awaitable[object] | object"]
"""``on_update(state, update)``: called after ``update`` (a :data:`SessionUpdate` variant) was
folded into ``state``; may be sync or async."""

_TEXT = "text"
_NOTIFICATIONS: set[type] = {v1.SessionNotification}
"""The session notification classes of the variants registered so far (v1 now, v2 ones on first sight)."""


def _text_of(blocks: Iterable[Any]) -> str:
    return "".join(block.text for block in blocks if getattr(block, "type", None) == _TEXT)


def _is_set(value: Any) -> bool:
    """Whether a patch field carries a value (not ``UNSET`` and not ``null``)."""
    return value is not None and value is not v1.UNSET


@attrs.define(eq=True)
class MessageEntry:
    """One message of the transcript: the chunks and whole-message updates of one message, merged.

    ``role``: :data:`Role`.  ``content``: its ``ContentBlock`` objects in order.  ``message_id``:
    its ``messageId`` (``None`` when no v1 chunk carried one; always set in v2).  ``meta``: the
    message's ``_meta`` as v2 whole-message updates patched it (chunk ``_meta`` is not stored).
    ``extra_fields``: wire fields the schema does not define, patched the same way.
    """

    role: Role
    content: list[ContentBlock] = attrs.field(factory=list)
    message_id: str | None = None
    meta: dict[str, Any] | None = None
    extra_fields: dict[str, Any] = attrs.field(factory=dict)

    @property
    def text(self) -> str:
        """The text of its ``text`` blocks, concatenated (other block types contribute nothing)."""
        return _text_of(self.content)


@attrs.define(eq=True)
class SessionMessageEntry(MessageEntry):
    """A ``v2_unstable`` ``session_message``: a message sent to or received from another session
    (role ``"session"``), with its links (``None``: not reported or cleared)."""

    sender_session_id: str | None = None
    recipient_session_id: str | None = None
    sender_message_id: str | None = None
    recipient_message_id: str | None = None


@attrs.define(eq=True)
class ToolCallEntry:
    """A tool call with its latest state (v1 ``tool_call`` / ``tool_call_update`` s, or v2 upserts, folded in).

    Fields as in the schema's ``ToolCall`` (snake_case): ``title`` (``""``: none yet, or cleared),
    ``name`` (``None``: unknown), ``kind`` (``ToolKind``, default ``"other"``), ``status``
    (``ToolCallStatus``, default ``"pending"``), ``content`` (``ToolCallContent`` list),
    ``locations`` (``ToolCallLocation`` list), ``raw_input`` / ``raw_output`` (JSON, ``None``:
    not sent), ``meta`` (``_meta``), ``capabilities`` (v2 ``ToolCallCapabilities`` or ``None``),
    ``extra_fields`` (v2: unknown wire fields).  ``announced``: a v1 ``tool_call`` or a v2
    ``tool_call_update`` reported it (``False`` when only a v1 ``tool_call_update`` or a v2
    ``tool_call_content_chunk`` did).  ``cancelled``: the client marked it cancelled
    (:meth:`SessionState.cancel_unfinished_tool_calls`); later updates still apply.
    """

    tool_call_id: str
    title: str = ""
    name: str | None = None
    kind: str = "other"
    status: str = "pending"
    content: list[ToolCallContent] = attrs.field(factory=list)
    locations: list[ToolCallLocation] = attrs.field(factory=list)
    raw_input: Any = None
    raw_output: Any = None
    meta: dict[str, Any] | None = None
    announced: bool = False
    cancelled: bool = False
    capabilities: Any = None
    extra_fields: dict[str, Any] = attrs.field(factory=dict)

    @property
    def finished(self) -> bool:
        """Whether ``status`` is final: ``"completed"``, ``"failed"`` or (v2) ``"cancelled"``."""
        return self.status in ("completed", "failed", "cancelled")


@attrs.define(eq=True)
class CompactionEntry:
    """A context compaction (``compaction_update`` / ``compaction_summary_chunk``, by ``compactionId``).

    ``status``: ``CompactionStatus`` (``"in_progress"``, ``"completed"``, ``"failed"``,
    ``"cancelled"`` or an unknown string kept as is; ``None`` until one is sent).  ``summary``: the
    retained summary's ``ContentBlock`` list.  ``error``: the error text, if any.  ``meta``: ``_meta``.
    ``extra_fields``: unknown wire fields (v2).
    """

    compaction_id: str
    status: str | None = None
    summary: list[ContentBlock] = attrs.field(factory=list)
    error: str | None = None
    meta: dict[str, Any] | None = None
    extra_fields: dict[str, Any] = attrs.field(factory=dict)

    @property
    def text(self) -> str:
        """The summary's text blocks, concatenated."""
        return _text_of(self.summary)


@attrs.define(eq=True)
class TerminalEntry:
    """An Agent-owned display terminal (v2 ``terminal_update`` / ``terminal_output_chunk``, by ``terminalId``).

    ``command``, ``cwd``: ``None`` until reported (or cleared).  ``output``: the retained bytes
    (the latest ``output`` snapshot, decoded, plus the chunks after it; may split UTF-8 sequences
    and contain terminal escapes).  ``exit_status``: the ``TerminalExitStatus`` (``None``: not
    exited).  ``size``: ``TerminalSize`` or ``None``.  ``capabilities``: ``TerminalCapabilities``
    or ``None``.  ``meta``: ``_meta`` (patched by key).  ``extra_fields``: unknown wire fields.
    Display only: no input or process control.
    """

    terminal_id: str
    command: str | None = None
    cwd: str | None = None
    output: bytearray = attrs.field(factory=bytearray)
    exit_status: Any = None
    size: Any = None
    capabilities: Any = None
    meta: dict[str, Any] | None = None
    extra_fields: dict[str, Any] = attrs.field(factory=dict)

    @property
    def exited(self) -> bool:
        """Whether an ``exitStatus`` was reported (and not cleared)."""
        return self.exit_status is not None

    @property
    def text(self) -> str:
        """``output`` decoded as UTF-8 (invalid sequences replaced; escapes kept): for a sanitized view."""
        return self.output.decode("utf-8", errors="replace")


@attrs.define(eq=True)
class SubagentEntry:
    """A child session this session owns (``v2_unstable`` ``subagent_update``, upserted by ``sessionId``).

    ``title``, ``description``, ``cwd``, ``additional_directories``: ``None`` until reported or
    when cleared.  ``capabilities``: ``SubagentSessionCapabilities`` or ``None``.  ``state``: the
    child's mirrored ``StateUpdate`` (``None``: unconfirmed).  ``meta`` / ``extra_fields`` as usual.
    """

    session_id: str
    title: str | None = None
    description: str | None = None
    capabilities: Any = None
    state: Any = None
    cwd: str | None = None
    additional_directories: list[str] | None = None
    meta: dict[str, Any] | None = None
    extra_fields: dict[str, Any] = attrs.field(factory=dict)


@attrs.define(eq=True)
class SessionInfoState:
    """The session metadata ``session_info_update`` maintains: ``title``, ``updated_at`` (ISO 8601
    string, wire ``updatedAt``) and ``meta`` (``_meta``: replaced whole by v1 updates, patched by
    key by v2 ones); ``None``: not set or cleared."""

    title: str | None = None
    updated_at: str | None = None
    meta: dict[str, Any] | None = None


TranscriptEntry: TypeAlias = MessageEntry | ToolCallEntry | CompactionEntry
"""An entry of :attr:`SessionState.transcript`."""

SessionSetupResponse: TypeAlias = (
    "v1.NewSessionResponse | v1.LoadSessionResponse | v1.ResumeSessionResponse | v2.NewSessionResponse "
    "| v2.ResumeSessionResponse | v2_unstable.NewSessionResponse | v2_unstable.ResumeSessionResponse"
)
"""A response that carries a session's initial ``modes`` (v1), ``configOptions`` and (v2) ``availableCommands``."""

_ROLES: dict[type, Role] = {
    v1.UserMessageChunkSessionUpdate: "user",
    v1.AgentMessageChunkSessionUpdate: "agent",
    v1.AgentThoughtChunkSessionUpdate: "thought",
}

_TOOL_CALL_CLEARED: dict[str, Any] = {"title": "", "kind": "other", "status": "pending", "content": [], "locations": []}
"""What ``null`` resets a v2 tool call field to (schema ``ToolCallUpdate``); other fields: ``None``."""

_STATE_OTHERS: set[type] = set()
"""The ``StateUpdateSessionUpdateOther`` classes of the v2 variants registered so far."""


def _decode(data: str, terminal_id: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        log.warning("terminal %r: output that is not valid base64 was skipped", terminal_id)
        return None


class SessionState:
    """The live state of one session, folded from its ``session/update`` stream (see the module docstring).

    ``session_id``: the session's id; ``None`` adopts the id of the first notification applied.

    Attributes (read them; :meth:`apply` writes them):

    - ``transcript``: :data:`TranscriptEntry` list in arrival order (messages, tool calls, compactions);
    - ``tool_calls``: ``toolCallId`` → :class:`ToolCallEntry`;
    - ``compactions``: ``compactionId`` → :class:`CompactionEntry`;
    - ``plan``: the latest ``v1.PlanSessionUpdate`` (``.entries``: ``PlanEntry`` list) or ``None``;
      ``plans``: v2 ``planId`` → the plan content of its latest ``plan_update`` (e.g.
      ``v2.ItemsPlanUpdateContent`` with ``.entries``; unknown types verbatim), in first-seen order;
    - ``terminals``: v2 ``terminalId`` → :class:`TerminalEntry`;
    - ``run_state``: v2 foreground state (``"idle"``, ``"running"``, ``"requires_action"``, or an
      unknown state's string); ``stop_reason`` / ``stop_error``: the ``stopReason`` / ``error`` of
      the idle update that ended the last foreground work (``None``: none reported, or work is in
      progress); ``background``: the latest reported ``BackgroundWork`` list (``None``: not
      reported); ``last_state_update``: the latest ``state_update`` object; ``idle_count``: how many
      idle ``state_update`` s were applied (a mark for :meth:`wait_idle`);
    - ``current_mode_id``: the ``SessionModeId`` or ``None``; ``available_modes``: ``SessionMode``
      list (from :meth:`apply_setup`) (v1 only);
    - ``config_options``: ``SessionConfigOption`` list; ``available_commands``: ``AvailableCommand`` list;
    - ``session_info``: :class:`SessionInfoState`; ``usage``: the latest ``UsageUpdateSessionUpdate``
      (``used``/``size`` in tokens, ``cost``) or ``None``;
    - ``notices``: every ``NoticeSessionUpdate``, in order;
    - ``subagents``: ``v2_unstable`` child ``sessionId`` → :class:`SubagentEntry`;
    - ``unknown``: updates of variants this fold does not know, verbatim, in order;
    - ``update_count``: how many updates were applied.
    """

    def __init__(self, session_id: str | None = None) -> None:
        self.session_id = session_id
        self.transcript: list[TranscriptEntry] = []
        self.tool_calls: dict[str, ToolCallEntry] = {}
        self.compactions: dict[str, CompactionEntry] = {}
        self.plan: v1.PlanSessionUpdate | None = None
        self.plans: dict[str, Any] = {}
        self.terminals: dict[str, TerminalEntry] = {}
        self.run_state: str = "idle"
        self.stop_reason: str | None = None
        self.stop_error: Any = None
        self.background: list[Any] | None = None
        self.last_state_update: Any = None
        self.idle_count = 0
        self.current_mode_id: str | None = None
        self.available_modes: list[v1.SessionMode] = []
        self.config_options: list[Any] = []
        self.available_commands: list[Any] = []
        self.session_info = SessionInfoState()
        self.usage: (
            v1.UsageUpdateSessionUpdate | v2.UsageUpdateSessionUpdate | v2_unstable.UsageUpdateSessionUpdate | None
        ) = None
        self.notices: list[Any] = []
        self.subagents: dict[str, SubagentEntry] = {}
        self.unknown: list[Any] = []
        self.update_count = 0
        self._open_message: MessageEntry | None = None  # the message the next v1 chunk may join
        self._messages_by_id: dict[tuple[Role, str], MessageEntry] = {}
        self._changed: trio.Event | None = None  # set (and dropped) after each update, for waiters

    def __repr__(self) -> str:
        return (
            f"SessionState({self.session_id!r}, transcript={len(self.transcript)} entries, "
            f"tool_calls={len(self.tool_calls)}, run_state={self.run_state!r}, updates={self.update_count})"
        )

    # -- views -----------------------------------------------------------------------------------
    @property
    def messages(self) -> list[MessageEntry]:
        """The message entries of the transcript (user, agent, thought and session), in order."""
        return [entry for entry in self.transcript if isinstance(entry, MessageEntry)]

    def message(self, role: Role, message_id: str) -> MessageEntry | None:
        """The message of ``role`` with ``message_id`` (e.g. the user message whose id the v2
        ``session/prompt`` response returned), or ``None``."""
        return self._messages_by_id.get((role, message_id))

    def tool_kind(self, tool_call_id: str) -> str | None:
        """The ``ToolKind`` of the tool call ``tool_call_id``, or ``None`` when it is unknown."""
        entry = self.tool_calls.get(tool_call_id)
        return entry.kind if entry is not None else None

    @property
    def idle(self) -> bool:
        """Whether the last reported foreground state is ``idle`` (also before any ``state_update``)."""
        return self.run_state == "idle"

    # -- folding ---------------------------------------------------------------------------------
    def apply(self, update: SessionNotification | SessionUpdate) -> None:
        """Fold one update in: a session notification or a bare ``SessionUpdate`` variant (v1, v2, v2_unstable).

        Raises ``ValueError`` for a notification of another session (nothing changes) and
        ``TypeError`` for an object that is neither (no ``sessionUpdate`` tag).
        """
        item: Any = update
        kind = type(item)
        if kind not in _HANDLERS and kind not in _NOTIFICATIONS:
            _learn_variant(kind)
        if kind in _NOTIFICATIONS:
            if self.session_id is None:
                self.session_id = item.session_id
            elif item.session_id != self.session_id:
                raise ValueError(
                    f"a session/update of session {item.session_id!r} cannot be applied to the state of "
                    f"session {self.session_id!r}"
                )
            item = item.update
            if type(item) not in _HANDLERS:
                _learn_variant(type(item))
        update = item
        handler = _HANDLERS.get(type(update))
        if handler is None:
            if not isinstance(getattr(update, "session_update", None), str):
                raise TypeError(
                    "expected a session notification or a SessionUpdate variant (v1, v2 or v2_unstable), "
                    f"got {type(update).__name__}"
                )
            self.unknown.append(update)
        else:
            handler(self, update)
        self.update_count += 1
        self._notify()

    def apply_all(self, updates: Iterable[SessionNotification | SessionUpdate]) -> None:
        """:meth:`apply` each of ``updates`` in order (stops at the first error, which it raises)."""
        for update in updates:
            self.apply(update)

    @classmethod
    def replay(
        cls, updates: Iterable[SessionNotification | SessionUpdate], session_id: str | None = None
    ) -> SessionState:
        """A new state with ``updates`` applied in order (e.g. a recorded, ``session/load`` or
        ``session/resume`` replayed history)."""
        state = cls(session_id)
        state.apply_all(updates)
        return state

    def apply_setup(self, response: SessionSetupResponse) -> None:
        """Take the initial ``modes`` (v1: current and available), ``configOptions`` and (v2)
        ``availableCommands`` from the response to ``session/new``, ``session/load`` or
        ``session/resume`` (fields it lacks change nothing)."""
        modes = getattr(response, "modes", UNSET)
        if isinstance(modes, v1.SessionModeState):
            self.current_mode_id = modes.current_mode_id
            self.available_modes = list(modes.available_modes)
        if isinstance(response.config_options, list):
            self.config_options = list(response.config_options)
        commands = getattr(response, "available_commands", UNSET)
        if isinstance(commands, list):
            self.available_commands = list(commands)

    def add_user_message(self, content: Iterable[ContentBlock], message_id: str | None = None) -> MessageEntry:
        """Record a user message the client sent itself (e.g. the ``prompt`` of a v1 ``session/prompt``,
        which v1 agents do not echo) as a new transcript entry; later chunks do not join it.  (A v2
        agent acknowledges the prompt with a ``user_message``, which is the source of truth: v2
        clients need not record it.)"""
        entry = MessageEntry("user", list(content), message_id)
        self.transcript.append(entry)
        self._open_message = None
        return entry

    def cancel_unfinished_tool_calls(self) -> list[ToolCallEntry]:
        """Mark every tool call not ``completed``/``failed``/``cancelled`` as ``cancelled`` and return them.

        The spec (``prompt-turn.mdx``, Cancellation): the client SHOULD mark the turn's unfinished
        tool calls cancelled as soon as it sends ``session/cancel``; updates still apply afterwards.
        """
        marked = [entry for entry in self.tool_calls.values() if not entry.finished and not entry.cancelled]
        for entry in marked:
            entry.cancelled = True
        return marked

    # -- waiting ---------------------------------------------------------------------------------
    def _notify(self) -> None:
        event, self._changed = self._changed, None
        if event is not None:
            event.set()

    async def _wait_change(self) -> None:
        if self._changed is None:
            self._changed = trio.Event()
        await self._changed.wait()

    def _idle_after(self, after: int | None) -> bool:
        return self.idle and (after is None or self.idle_count > after)

    async def wait_idle(self, *, after: int | None = None) -> str | None:
        """Wait until the session reports ``idle`` and return :attr:`stop_reason`.

        ``after``: an earlier :attr:`idle_count`; then only an idle ``state_update`` applied after
        that mark counts (take it before sending ``session/prompt``: the prompt's response does not
        mean that its ``running`` update arrived).  ``None``: return at once when idle now.  Does
        not time out: bound it with ``trio.fail_after``.
        """
        while not self._idle_after(after):
            await self._wait_change()
        return self.stop_reason

    # -- v1 per variant --------------------------------------------------------------------------
    def _chunk(self, update: v1.UserMessageChunkSessionUpdate) -> None:
        role = _ROLES[type(update)]
        message_id = update.message_id if isinstance(update.message_id, str) else None
        entry = self._messages_by_id.get((role, message_id)) if message_id is not None else None
        if entry is None:
            last = self._open_message
            if (
                last is not None
                and last.role == role
                and (message_id is None or last.message_id is None or last.message_id == message_id)
            ):
                entry = last
                if message_id is not None and entry.message_id is None:
                    entry.message_id = message_id
                    self._messages_by_id[(role, message_id)] = entry
            else:
                entry = MessageEntry(role, [], message_id)
                self.transcript.append(entry)
                if message_id is not None:
                    self._messages_by_id[(role, message_id)] = entry
            self._open_message = entry
        entry.content.append(update.content)

    def _append_entry(self, entry: TranscriptEntry) -> None:
        self.transcript.append(entry)
        self._open_message = None

    def _tool_call(self, update: v1.ToolCallSessionUpdate) -> None:
        entry = self._tool_call_entry(update.tool_call_id)
        entry.announced = True
        entry.title = update.title
        entry.name = update.name if isinstance(update.name, str) else None
        entry.kind = update.kind if isinstance(update.kind, str) else "other"
        entry.status = update.status if isinstance(update.status, str) else "pending"
        entry.content = list(update.content) if isinstance(update.content, list) else []
        entry.locations = list(update.locations) if isinstance(update.locations, list) else []
        entry.raw_input = update.raw_input if update.raw_input is not v1.UNSET else None
        entry.raw_output = update.raw_output if update.raw_output is not v1.UNSET else None
        entry.meta = update.meta if isinstance(update.meta, dict) else None

    def _tool_call_update(self, update: v1.ToolCallUpdateSessionUpdate) -> None:
        entry = self._tool_call_entry(update.tool_call_id)
        if isinstance(update.title, str):
            entry.title = update.title
        if isinstance(update.name, str):
            entry.name = update.name
        if isinstance(update.kind, str):
            entry.kind = update.kind
        if isinstance(update.status, str):
            entry.status = update.status
        if isinstance(update.content, list):
            entry.content = list(update.content)
        if isinstance(update.locations, list):
            entry.locations = list(update.locations)
        if _is_set(update.raw_input):
            entry.raw_input = update.raw_input
        if _is_set(update.raw_output):
            entry.raw_output = update.raw_output
        if isinstance(update.meta, dict):
            entry.meta = update.meta

    def _plan(self, update: v1.PlanSessionUpdate) -> None:
        self.plan = update

    def _available_commands(self, update: v1.AvailableCommandsUpdateSessionUpdate) -> None:
        self.available_commands = list(update.available_commands)

    def _current_mode(self, update: v1.CurrentModeUpdateSessionUpdate) -> None:
        self.current_mode_id = update.current_mode_id

    def _config_options(self, update: v1.ConfigOptionUpdateSessionUpdate) -> None:
        self.config_options = list(update.config_options)

    def _session_info(self, update: v1.SessionInfoUpdateSessionUpdate) -> None:
        info = self.session_info
        if update.title is not v1.UNSET:
            info.title = update.title
        if update.updated_at is not v1.UNSET:
            info.updated_at = update.updated_at
        if update.meta is not v1.UNSET:
            info.meta = update.meta

    def _usage(self, update: v1.UsageUpdateSessionUpdate) -> None:
        self.usage = update

    def _notice(self, update: v1.NoticeSessionUpdate) -> None:
        self.notices.append(update)

    def _compaction(self, compaction_id: str) -> CompactionEntry:
        entry = self.compactions.get(compaction_id)
        if entry is None:
            entry = self.compactions[compaction_id] = CompactionEntry(compaction_id)
            self._append_entry(entry)
        return entry

    def _compaction_update(self, update: v1.CompactionUpdateSessionUpdate) -> None:
        entry = self._compaction(update.compaction_id)
        entry.status = update.status
        if update.summary is not v1.UNSET:
            entry.summary = list(update.summary) if update.summary is not None else []
        if update.error is not v1.UNSET:
            entry.error = update.error
        if update.meta is not v1.UNSET:
            entry.meta = update.meta

    def _compaction_summary_chunk(self, update: v1.CompactionSummaryChunkSessionUpdate) -> None:
        self._compaction(update.compaction_id).summary.append(update.content)

    # -- v2 per variant --------------------------------------------------------------------------
    def _message(self, role: Role, message_id: str) -> MessageEntry:
        """The message ``(role, message_id)``, created empty at the end of the transcript when new."""
        entry = self._messages_by_id.get((role, message_id))
        if entry is None:
            entry = (
                SessionMessageEntry(role, [], message_id) if role == "session" else MessageEntry(role, [], message_id)
            )
            self._messages_by_id[(role, message_id)] = entry
            self._append_entry(entry)
        return entry

    def _message_upsert(self, update: v2.UserMessageSessionUpdate) -> None:
        entry = self._message(_ROLES[type(update)], update.message_id)
        apply_patch(entry, update, cleared={"content": []}, skip=("message_id",))

    def _message_chunk(self, update: v2.UserMessageChunkSessionUpdate) -> None:
        append_item(self._message(_ROLES[type(update)], update.message_id), "content", update.content)

    def _tool_call_entry(self, tool_call_id: str) -> ToolCallEntry:
        entry = self.tool_calls.get(tool_call_id)
        if entry is None:
            entry = self.tool_calls[tool_call_id] = ToolCallEntry(tool_call_id)
            self._append_entry(entry)
        return entry

    def _tool_call_upsert(self, update: v2.ToolCallUpdateSessionUpdate) -> None:
        entry = self._tool_call_entry(update.tool_call_id)
        entry.announced = True
        apply_patch(entry, update, cleared=_TOOL_CALL_CLEARED, skip=("tool_call_id",))

    def _tool_call_content_chunk(self, update: v2.ToolCallContentChunkSessionUpdate) -> None:
        append_item(self._tool_call_entry(update.tool_call_id), "content", update.content)

    def _terminal_update(self, update: v2.TerminalUpdateSessionUpdate) -> None:
        terminal_id = update.terminal_id
        entry, _ = upsert(
            self.terminals, terminal_id, update, lambda: TerminalEntry(terminal_id), skip=("terminal_id", "output")
        )
        if update.output is None:
            entry.output = bytearray()
        elif update.output is not UNSET:
            data = _decode(update.output.data, terminal_id)
            if data is not None:
                entry.output = bytearray(data)

    def _terminal_output_chunk(self, update: v2.TerminalOutputChunkSessionUpdate) -> None:
        entry = self.terminals.get(update.terminal_id)
        if entry is None:
            entry = self.terminals[update.terminal_id] = TerminalEntry(update.terminal_id)
        data = _decode(update.data, update.terminal_id)
        if data is not None:
            entry.output += data

    def _plan_update(self, update: v2.PlanUpdateSessionUpdate) -> None:
        self.plans[update.plan.plan_id] = update.plan

    def _plan_removed(self, update: v2_unstable.PlanRemovedSessionUpdate) -> None:
        self.plans.pop(update.plan_id, None)

    def _state_update(self, update: Any) -> None:
        self.run_state = update.state
        self.last_state_update = update
        background = getattr(update, "background", UNSET)
        self.background = list(background) if isinstance(background, list) else None
        if update.state == "idle":
            self.idle_count += 1
            reason, error = update.stop_reason, update.error
            if _is_set(reason) or _is_set(error):
                self.stop_reason = reason if isinstance(reason, str) else None
                self.stop_error = error if _is_set(error) else None
        else:
            self.stop_reason = None
            self.stop_error = None
        if type(update) in _STATE_OTHERS:
            self.unknown.append(update)  # a state this schema does not know: kept verbatim too

    def _session_info_upsert(self, update: v2.SessionInfoUpdateSessionUpdate) -> None:
        apply_patch(self.session_info, update)

    def _usage_upsert(self, update: v2.UsageUpdateSessionUpdate) -> None:
        previous = self.usage
        if update.cost is UNSET and previous is not None and previous.cost is not UNSET:
            cost: Any = previous.cost
            update = attrs.evolve(update, cost=cost)  # omitted cost: the last one stands
        self.usage = update

    def _compaction_upsert(self, update: v2.CompactionUpdateSessionUpdate) -> None:
        entry = self._compaction(update.compaction_id)
        apply_patch(entry, update, cleared={"summary": []}, skip=("compaction_id",))

    def _subagent_upsert(self, update: v2_unstable.SubagentUpdateSessionUpdate) -> None:
        child = update.session_id
        upsert(self.subagents, child, update, lambda: SubagentEntry(child), skip=("session_id",))


_HANDLERS: dict[type, Callable[[SessionState, Any], None]] = {
    v1.UserMessageChunkSessionUpdate: SessionState._chunk,
    v1.AgentMessageChunkSessionUpdate: SessionState._chunk,
    v1.AgentThoughtChunkSessionUpdate: SessionState._chunk,
    v1.ToolCallSessionUpdate: SessionState._tool_call,
    v1.ToolCallUpdateSessionUpdate: SessionState._tool_call_update,
    v1.PlanSessionUpdate: SessionState._plan,
    v1.AvailableCommandsUpdateSessionUpdate: SessionState._available_commands,
    v1.CurrentModeUpdateSessionUpdate: SessionState._current_mode,
    v1.ConfigOptionUpdateSessionUpdate: SessionState._config_options,
    v1.SessionInfoUpdateSessionUpdate: SessionState._session_info,
    v1.UsageUpdateSessionUpdate: SessionState._usage,
    v1.NoticeSessionUpdate: SessionState._notice,
    v1.CompactionUpdateSessionUpdate: SessionState._compaction_update,
    v1.CompactionSummaryChunkSessionUpdate: SessionState._compaction_summary_chunk,
}
_V2_RULES: tuple[tuple[str, Callable[[SessionState, Any], None], Role | None], ...] = (
    ("UserMessageChunkSessionUpdate", SessionState._message_chunk, "user"),
    ("UserMessageSessionUpdate", SessionState._message_upsert, "user"),
    ("AgentMessageChunkSessionUpdate", SessionState._message_chunk, "agent"),
    ("AgentMessageSessionUpdate", SessionState._message_upsert, "agent"),
    ("AgentThoughtChunkSessionUpdate", SessionState._message_chunk, "thought"),
    ("AgentThoughtSessionUpdate", SessionState._message_upsert, "thought"),
    ("RunningStateUpdateSessionUpdate", SessionState._state_update, None),
    ("IdleStateUpdateSessionUpdate", SessionState._state_update, None),
    ("RequiresActionStateUpdateSessionUpdate", SessionState._state_update, None),
    ("StateUpdateSessionUpdateOther", SessionState._state_update, None),
    ("ToolCallContentChunkSessionUpdate", SessionState._tool_call_content_chunk, None),
    ("ToolCallUpdateSessionUpdate", SessionState._tool_call_upsert, None),
    ("TerminalUpdateSessionUpdate", SessionState._terminal_update, None),
    ("TerminalOutputChunkSessionUpdate", SessionState._terminal_output_chunk, None),
    ("PlanUpdateSessionUpdate", SessionState._plan_update, None),
    ("AvailableCommandsUpdateSessionUpdate", SessionState._available_commands, None),
    ("ConfigOptionUpdateSessionUpdate", SessionState._config_options, None),
    ("SessionInfoUpdateSessionUpdate", SessionState._session_info_upsert, None),
    ("UsageUpdateSessionUpdate", SessionState._usage_upsert, None),
    ("NoticeSessionUpdate", SessionState._notice, None),
    ("CompactionUpdateSessionUpdate", SessionState._compaction_upsert, None),
    ("CompactionSummaryChunkSessionUpdate", SessionState._compaction_summary_chunk, None),
    # v2_unstable only
    ("UnknownStateUpdateSessionUpdate", SessionState._state_update, None),
    ("PlanRemovedSessionUpdate", SessionState._plan_removed, None),
    ("SubagentUpdateSessionUpdate", SessionState._subagent_upsert, None),
    ("SessionMessageSessionUpdate", SessionState._message_upsert, "session"),
    ("SessionMessageChunkSessionUpdate", SessionState._message_chunk, "session"),
)
"""The v2 folding rules by generated class name: (class, handler, message role or ``None``); a
variant registers the classes it has."""

_V2_VARIANTS: Final = frozenset({"acp_schema.v2", "acp_schema.v2_unstable"})
"""The schema variants folded by the v2 rules, registered when their first object arrives."""
_REGISTERED: set[str] = set()


def _register_v2(variant: ModuleType) -> None:
    """Fold the updates of ``variant`` (``acp_schema.v2`` or ``v2_unstable``) by the v2 rules."""
    for name, handler, role in _V2_RULES:
        cls = getattr(variant, name, None)
        if cls is None:
            continue
        _HANDLERS[cls] = handler
        if role is not None:
            _ROLES[cls] = role
    _NOTIFICATIONS.add(variant.UpdateSessionNotification)
    _STATE_OTHERS.add(variant.StateUpdateSessionUpdateOther)
    _REGISTERED.add(variant.__name__)


def _learn_variant(kind: type) -> None:
    """Register the v2 rules for the variant ``kind`` belongs to, if it is a v2 one not registered yet.

    Importing this module does not import ``acp_schema.v2`` (about 140 ms, and as much again for
    ``v2_unstable``): a v1 client never pays for it.  An object of a v2 class exists only once its
    variant was imported, so this looks the module up and imports nothing.
    """
    package = kind.__module__.rpartition(".")[0]
    if package in _V2_VARIANTS and package not in _REGISTERED:
        variant = sys.modules.get(package)
        if variant is not None:
            _register_v2(variant)


class _SessionLoader(Protocol):
    async def session_load(
        self, params: v1.LoadSessionRequest, *, timeout: float | None = None
    ) -> v1.LoadSessionResponse: ...


_Params = TypeVar("_Params", contravariant=True)
_Result = TypeVar("_Result", covariant=True)
_ResumeRequest = TypeVar("_ResumeRequest", "v2.ResumeSessionRequest", "v2_unstable.ResumeSessionRequest")
_ResumeResponse = TypeVar("_ResumeResponse", "v2.ResumeSessionResponse", "v2_unstable.ResumeSessionResponse")


class _SessionResumer(Protocol[_Params, _Result]):
    async def session_resume(self, params: _Params, *, timeout: float | None = None) -> _Result: ...


class SessionStates(Mapping[str, SessionState]):
    """A client ``session_update`` handler keeping a :class:`SessionState` per session (a read-only mapping).

    ``states[session_id]`` is the state of a session an update arrived for (``KeyError`` before
    that; :meth:`state` creates it).  ``on_update(state, update)``: called (sync or async) after
    each update was folded in; an exception it raises is logged on ``acp_trio.session_state`` and
    does not undo the update.  Use it as the client, or as the client's ``session_update``::

        states = SessionStates()

        class Client:
            def __init__(self) -> None:
                self.session_update = states.session_update

    It takes the notifications of v1 and v2 connections alike.  The runtime calls
    ``session_update`` one at a time per session, in arrival order.  States are kept until
    :meth:`discard` (e.g. ``conn.sessions.on_end(lambda info: states.discard(info.session_id))``).
    """

    def __init__(self, on_update: UpdateCallback | None = None) -> None:
        if on_update is not None and not callable(on_update):
            raise TypeError(f"on_update must be callable (state, update) -> None, got {on_update!r}")
        self.on_update = on_update
        self._states: dict[str, SessionState] = {}

    # -- Mapping --------------------------------------------------------------------------------
    def __getitem__(self, session_id: str) -> SessionState:
        return self._states[session_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)

    def __repr__(self) -> str:
        return f"SessionStates({list(self._states)!r})"

    # -- the handler -----------------------------------------------------------------------------
    async def session_update(self, params: SessionNotification) -> None:
        """Fold ``params.update`` into the state of ``params.session_id``, then call ``on_update``."""
        state = self.state(params.session_id)
        state.apply(params)
        if self.on_update is None:
            return
        try:
            result = self.on_update(state, params.update)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("on_update callback %r raised for session %r", self.on_update, params.session_id)

    # -- management ------------------------------------------------------------------------------
    def state(self, session_id: str) -> SessionState:
        """The state of ``session_id``, created empty when there is none."""
        state = self._states.get(session_id)
        if state is None:
            state = self._states[session_id] = SessionState(session_id)
        return state

    def reset(self, session_id: str) -> SessionState:
        """Replace the state of ``session_id`` by an empty one (e.g. before a replay) and return it."""
        old = self._states.get(session_id)
        state = self._states[session_id] = SessionState(session_id)
        if old is not None:
            old._notify()  # waiters move to the new state
        return state

    def discard(self, session_id: str) -> None:
        """Forget the state of ``session_id`` (no-op when there is none)."""
        old = self._states.pop(session_id, None)
        if old is not None:
            old._notify()

    def tool_kind(self, session_id: str, tool_call_id: str) -> str | None:
        """The ``ToolKind`` of a tool call announced in ``session_id``, or ``None`` (a
        :data:`acp_trio.permissions.KindLookup` for :func:`acp_trio.permissions.allow_kinds`)."""
        state = self._states.get(session_id)
        return state.tool_kind(tool_call_id) if state is not None else None

    async def wait_idle(self, session_id: str, *, after: int | None = None) -> str | None:
        """Wait until ``session_id`` reports ``idle`` (v2 ``state_update``) and return its stop reason.

        ``after``: a mark taken from ``states.state(session_id).idle_count`` before sending
        ``session/prompt``; only an idle update applied after it counts (``None``: return at once
        when idle now).  Typical v2 turn::

            mark = states.state(sid).idle_count
            await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=blocks))
            with trio.fail_after(600):
                stop_reason = await states.wait_idle(sid, after=mark)

        When :meth:`reset` replaces the state meanwhile (a replay), the wait goes on with the new
        state and needs an idle update applied to it.  Raises ``KeyError`` when the session is
        :meth:`discard` ed meanwhile.  Does not time out: bound it with ``trio.fail_after``.
        """
        state = self.state(session_id)
        while not state._idle_after(after):
            await state._wait_change()
            current = self._states.get(session_id)
            if current is None:
                raise KeyError(session_id)
            if current is not state:
                state, after = current, 0
        return state.stop_reason

    async def load(
        self, agent: _SessionLoader, request: v1.LoadSessionRequest, *, timeout: float | None = None
    ) -> v1.LoadSessionResponse:
        """Load a (v1) session and rebuild its state from the replayed history.

        ``agent``: the typed agent proxy (``v1.AgentPeer(conn)`` or ``conn.agent``) of the
        connection this object handles ``session/update`` for.  Resets the state of
        ``request.session_id``, sends ``session/load`` (``timeout`` in seconds) and applies the
        response (:meth:`SessionState.apply_setup`); when it returns, every replayed update has
        been folded in.  Raises what the request raises (``RequestError``, ``CapabilityError``
        without ``loadSession``, ``RequestTimeout``, ``ConnectionClosed``); the state then holds
        whatever was replayed.
        """
        state = self.reset(request.session_id)
        response = await agent.session_load(request, timeout=timeout)
        state.apply_setup(response)
        return response

    async def resume(
        self,
        agent: _SessionResumer[_ResumeRequest, _ResumeResponse],
        request: _ResumeRequest,
        *,
        timeout: float | None = None,
    ) -> _ResumeResponse:
        """Resume a (v2) session; with ``replayFrom: {"type": "start"}``, rebuild its state from the replay.

        ``agent``: the typed agent proxy (``conn.agent``) of the connection this object handles
        ``session/update`` for.  When ``request.replay_from`` is the ``start`` cursor, the state of
        ``request.session_id`` is reset first (the agent replays the whole conversation before it
        responds); without a cursor (reattach, no replay) or with another one, the state is kept
        and the updates fold into it.  Sends ``session/resume`` (``timeout`` in seconds) and
        applies the response (:meth:`SessionState.apply_setup`); when it returns, the replay and
        the agent's current-state ``state_update`` have been folded in.  Raises what the request
        raises; the state then holds whatever was replayed.
        """
        if getattr(request.replay_from, "type", None) == "start":
            state = self.reset(request.session_id)
        else:
            state = self.state(request.session_id)
        response = await agent.session_resume(request, timeout=timeout)
        self._states.get(request.session_id, state).apply_setup(response)
        return response


__all__ = [
    "CompactionEntry",
    "ContentBlock",
    "MessageEntry",
    "Role",
    "SessionInfoState",
    "SessionMessageEntry",
    "SessionNotification",
    "SessionSetupResponse",
    "SessionState",
    "SessionStates",
    "SessionUpdate",
    "SubagentEntry",
    "TerminalEntry",
    "ToolCallContent",
    "ToolCallEntry",
    "ToolCallLocation",
    "TranscriptEntry",
    "UpdateCallback",
]

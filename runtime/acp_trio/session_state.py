"""Fold the ``session/update`` stream of a session into live state: transcript, tool calls, plan, mode, ...

Contract: :class:`SessionState` holds what the agent reported about one session, updated by
:meth:`SessionState.apply` with each ``v1.SessionNotification`` (or bare ``SessionUpdate``
variant) in arrival order.  :class:`SessionStates` is a client handler (it has
``session_update``) that keeps one :class:`SessionState` per session id.  Folding rules:

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
  ``summary`` replaces it);
- anything else (``v1.SessionUpdateOther``: a variant this schema does not know, or an update
  object of another schema variant) is kept verbatim, in order, in :attr:`SessionState.unknown`.

For ``session/load`` the agent replays the history as ``session/update`` before its response,
and the runtime hands a response over only after the updates before it were handled, so the same
folding rebuilds the transcript: :meth:`SessionStates.load` resets the state, loads, and applies
the response's modes and config options.

Sources: ``docs/protocol/v1/prompt-turn.mdx`` (Agent Reports Output, Message IDs, Cancellation),
``tool-calls.mdx``, ``agent-plan.mdx``, ``session-modes.mdx``, ``session-config-options.mdx``,
``slash-commands.mdx``, ``session-list.mdx`` (Updating Session Metadata), ``session-setup.mdx``
(Loading Sessions), ``draft/prompt-turn.mdx`` (Session Notices, Session Compaction, Session Usage
Updates); schema ``$defs/SessionUpdate`` and its variants.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, Protocol, TypeAlias

import attrs

from acp_schema import v1

log = logging.getLogger("acp_trio.session_state")

Role: TypeAlias = Literal["user", "agent", "thought"]
"""Who a message is from: ``user_message_chunk`` → ``"user"``, ``agent_message_chunk`` →
``"agent"``, ``agent_thought_chunk`` → ``"thought"``."""

UpdateCallback: TypeAlias = Callable[["SessionState", Any], "Awaitable[object] | object"]
"""``on_update(state, update)``: called after ``update`` (a ``v1.SessionUpdate`` variant) was folded
into ``state``; may be sync or async."""

_TEXT = "text"


def _text_of(blocks: Iterable[Any]) -> str:
    return "".join(block.text for block in blocks if getattr(block, "type", None) == _TEXT)


def _is_set(value: Any) -> bool:
    """Whether a patch field carries a value (not ``UNSET`` and not ``null``)."""
    return value is not None and value is not v1.UNSET


@attrs.define(eq=True)
class MessageEntry:
    """One message of the transcript: the chunks of one user, agent or thought message, merged.

    ``role``: :data:`Role`.  ``content``: its ``ContentBlock`` objects in arrival order.
    ``message_id``: the ``messageId`` its chunks carried (``None`` when none did).
    """

    role: Role
    content: list[v1.ContentBlock] = attrs.field(factory=list)
    message_id: str | None = None

    @property
    def text(self) -> str:
        """The text of its ``text`` blocks, concatenated (other block types contribute nothing)."""
        return _text_of(self.content)


@attrs.define(eq=True)
class ToolCallEntry:
    """A tool call with its latest state (``tool_call`` then ``tool_call_update`` s folded in).

    Fields as in the schema's ``ToolCall`` (snake_case): ``title`` (``""`` until one is sent),
    ``name`` (``None``: unknown), ``kind`` (``ToolKind``, default ``"other"``), ``status``
    (``ToolCallStatus``, default ``"pending"``), ``content`` (``ToolCallContent`` list),
    ``locations`` (``ToolCallLocation`` list), ``raw_input`` / ``raw_output`` (JSON, ``None``:
    not sent), ``meta`` (``_meta``).  ``announced``: a ``tool_call`` update introduced it (``False``
    when a ``tool_call_update`` for an unknown id created it).  ``cancelled``: the client marked it
    cancelled (:meth:`SessionState.cancel_unfinished_tool_calls`); later updates still apply.
    """

    tool_call_id: str
    title: str = ""
    name: str | None = None
    kind: str = "other"
    status: str = "pending"
    content: list[v1.ToolCallContent] = attrs.field(factory=list)
    locations: list[v1.ToolCallLocation] = attrs.field(factory=list)
    raw_input: Any = None
    raw_output: Any = None
    meta: dict[str, Any] | None = None
    announced: bool = False
    cancelled: bool = False

    @property
    def finished(self) -> bool:
        """Whether ``status`` is ``"completed"`` or ``"failed"``."""
        return self.status in ("completed", "failed")


@attrs.define(eq=True)
class CompactionEntry:
    """A context compaction (``compaction_update`` / ``compaction_summary_chunk``, by ``compactionId``).

    ``status``: ``CompactionStatus`` (``"in_progress"``, ``"completed"``, ``"failed"``,
    ``"cancelled"`` or an unknown string kept as is; ``None`` until one is sent).  ``summary``: the
    retained summary's ``ContentBlock`` list.  ``error``: the error text, if any.  ``meta``: ``_meta``.
    """

    compaction_id: str
    status: str | None = None
    summary: list[v1.ContentBlock] = attrs.field(factory=list)
    error: str | None = None
    meta: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        """The summary's text blocks, concatenated."""
        return _text_of(self.summary)


@attrs.define(eq=True)
class SessionInfoState:
    """The session metadata ``session_info_update`` maintains: ``title``, ``updated_at`` (ISO 8601
    string, wire ``updatedAt``) and ``meta`` (``_meta``, replaced whole); ``None``: not set or cleared."""

    title: str | None = None
    updated_at: str | None = None
    meta: dict[str, Any] | None = None


TranscriptEntry: TypeAlias = MessageEntry | ToolCallEntry | CompactionEntry
"""An entry of :attr:`SessionState.transcript`."""

SessionSetupResponse: TypeAlias = v1.NewSessionResponse | v1.LoadSessionResponse | v1.ResumeSessionResponse
"""A response that carries a session's initial ``modes`` and ``configOptions``."""

_ROLES: dict[type, Role] = {
    v1.UserMessageChunkSessionUpdate: "user",
    v1.AgentMessageChunkSessionUpdate: "agent",
    v1.AgentThoughtChunkSessionUpdate: "thought",
}


class SessionState:
    """The live state of one session, folded from its ``session/update`` stream (see the module docstring).

    ``session_id``: the session's id; ``None`` adopts the id of the first notification applied.

    Attributes (read them; :meth:`apply` writes them):

    - ``transcript``: :data:`TranscriptEntry` list in arrival order (messages, tool calls, compactions);
    - ``tool_calls``: ``toolCallId`` → :class:`ToolCallEntry`;
    - ``compactions``: ``compactionId`` → :class:`CompactionEntry`;
    - ``plan``: the latest ``v1.PlanSessionUpdate`` (``.entries``: ``PlanEntry`` list) or ``None``;
    - ``current_mode_id``: the ``SessionModeId`` or ``None``; ``available_modes``: ``SessionMode``
      list (from :meth:`apply_setup`);
    - ``config_options``: ``SessionConfigOption`` list; ``available_commands``: ``AvailableCommand`` list;
    - ``session_info``: :class:`SessionInfoState`; ``usage``: the latest
      ``v1.UsageUpdateSessionUpdate`` (``used``/``size`` in tokens, ``cost``) or ``None``;
    - ``notices``: every ``v1.NoticeSessionUpdate``, in order;
    - ``unknown``: updates of variants this fold does not know, verbatim, in order;
    - ``update_count``: how many updates were applied.
    """

    def __init__(self, session_id: str | None = None) -> None:
        self.session_id = session_id
        self.transcript: list[TranscriptEntry] = []
        self.tool_calls: dict[str, ToolCallEntry] = {}
        self.compactions: dict[str, CompactionEntry] = {}
        self.plan: v1.PlanSessionUpdate | None = None
        self.current_mode_id: str | None = None
        self.available_modes: list[v1.SessionMode] = []
        self.config_options: list[v1.SessionConfigOption] = []
        self.available_commands: list[v1.AvailableCommand] = []
        self.session_info = SessionInfoState()
        self.usage: v1.UsageUpdateSessionUpdate | None = None
        self.notices: list[v1.NoticeSessionUpdate] = []
        self.unknown: list[Any] = []
        self.update_count = 0
        self._open_message: MessageEntry | None = None  # the message the next chunk may join
        self._messages_by_id: dict[tuple[Role, str], MessageEntry] = {}

    def __repr__(self) -> str:
        return (
            f"SessionState({self.session_id!r}, transcript={len(self.transcript)} entries, "
            f"tool_calls={len(self.tool_calls)}, updates={self.update_count})"
        )

    # -- views -----------------------------------------------------------------------------------
    @property
    def messages(self) -> list[MessageEntry]:
        """The message entries of the transcript (user, agent and thought), in order."""
        return [entry for entry in self.transcript if isinstance(entry, MessageEntry)]

    def tool_kind(self, tool_call_id: str) -> str | None:
        """The ``ToolKind`` of the tool call ``tool_call_id``, or ``None`` when it is unknown."""
        entry = self.tool_calls.get(tool_call_id)
        return entry.kind if entry is not None else None

    # -- folding ---------------------------------------------------------------------------------
    def apply(self, update: v1.SessionNotification | v1.SessionUpdate) -> None:
        """Fold one update in: a ``v1.SessionNotification`` or a bare ``v1.SessionUpdate`` variant.

        Raises ``ValueError`` for a notification of another session (nothing changes) and
        ``TypeError`` for an object that is neither (no ``sessionUpdate`` tag).
        """
        if isinstance(update, v1.SessionNotification):
            if self.session_id is None:
                self.session_id = update.session_id
            elif update.session_id != self.session_id:
                raise ValueError(
                    f"a session/update of session {update.session_id!r} cannot be applied to the state of "
                    f"session {self.session_id!r}"
                )
            update = update.update
        handler = _HANDLERS.get(type(update))
        if handler is None:
            if not isinstance(getattr(update, "session_update", None), str):
                raise TypeError(
                    f"expected a v1.SessionNotification or a v1.SessionUpdate variant, got {type(update).__name__}"
                )
            self.unknown.append(update)
        else:
            handler(self, update)
        self.update_count += 1

    def apply_all(self, updates: Iterable[v1.SessionNotification | v1.SessionUpdate]) -> None:
        """:meth:`apply` each of ``updates`` in order (stops at the first error, which it raises)."""
        for update in updates:
            self.apply(update)

    @classmethod
    def replay(
        cls, updates: Iterable[v1.SessionNotification | v1.SessionUpdate], session_id: str | None = None
    ) -> SessionState:
        """A new state with ``updates`` applied in order (e.g. a recorded or ``session/load`` history)."""
        state = cls(session_id)
        state.apply_all(updates)
        return state

    def apply_setup(self, response: SessionSetupResponse) -> None:
        """Take the initial ``modes`` (current and available) and ``configOptions`` from the response
        to ``session/new``, ``session/load`` or ``session/resume`` (fields it lacks change nothing)."""
        modes = response.modes
        if isinstance(modes, v1.SessionModeState):
            self.current_mode_id = modes.current_mode_id
            self.available_modes = list(modes.available_modes)
        if isinstance(response.config_options, list):
            self.config_options = list(response.config_options)

    def add_user_message(self, content: Iterable[v1.ContentBlock], message_id: str | None = None) -> MessageEntry:
        """Record a user message the client sent itself (e.g. the ``prompt`` of ``session/prompt``,
        which agents do not echo) as a new transcript entry; later chunks do not join it."""
        entry = MessageEntry("user", list(content), message_id)
        self.transcript.append(entry)
        self._open_message = None
        return entry

    def cancel_unfinished_tool_calls(self) -> list[ToolCallEntry]:
        """Mark every tool call not ``completed``/``failed`` as ``cancelled`` and return them.

        The spec (``prompt-turn.mdx``, Cancellation): the client SHOULD mark the turn's unfinished
        tool calls cancelled as soon as it sends ``session/cancel``; updates still apply afterwards.
        """
        marked = [entry for entry in self.tool_calls.values() if not entry.finished and not entry.cancelled]
        for entry in marked:
            entry.cancelled = True
        return marked

    # -- per variant -----------------------------------------------------------------------------
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
        entry = self.tool_calls.get(update.tool_call_id)
        if entry is None:
            entry = self.tool_calls[update.tool_call_id] = ToolCallEntry(update.tool_call_id)
            self._append_entry(entry)
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
        entry = self.tool_calls.get(update.tool_call_id)
        if entry is None:
            entry = self.tool_calls[update.tool_call_id] = ToolCallEntry(update.tool_call_id)
            self._append_entry(entry)
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


class _SessionLoader(Protocol):
    async def session_load(
        self, params: v1.LoadSessionRequest, *, timeout: float | None = None
    ) -> v1.LoadSessionResponse: ...


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

    The runtime calls ``session_update`` one at a time per session, in arrival order.  States are
    kept until :meth:`discard` (e.g. ``conn.sessions.on_end(lambda info: states.discard(info.session_id))``).
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
    async def session_update(self, params: v1.SessionNotification) -> None:
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
        """Replace the state of ``session_id`` by an empty one (e.g. before ``session/load``) and return it."""
        state = self._states[session_id] = SessionState(session_id)
        return state

    def discard(self, session_id: str) -> None:
        """Forget the state of ``session_id`` (no-op when there is none)."""
        self._states.pop(session_id, None)

    def tool_kind(self, session_id: str, tool_call_id: str) -> str | None:
        """The ``ToolKind`` of a tool call announced in ``session_id``, or ``None`` (a
        :data:`acp_trio.permissions.KindLookup` for :func:`acp_trio.permissions.allow_kinds`)."""
        state = self._states.get(session_id)
        return state.tool_kind(tool_call_id) if state is not None else None

    async def load(
        self, agent: _SessionLoader, request: v1.LoadSessionRequest, *, timeout: float | None = None
    ) -> v1.LoadSessionResponse:
        """Load a session and rebuild its state from the replayed history.

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


__all__ = [
    "CompactionEntry",
    "MessageEntry",
    "Role",
    "SessionInfoState",
    "SessionSetupResponse",
    "SessionState",
    "SessionStates",
    "ToolCallEntry",
    "TranscriptEntry",
    "UpdateCallback",
]

"""The two views (issue 33): one session's ``session/update`` stream projected to the other version.

Contract: a view is sans-IO and per session: :meth:`V1View.project` takes one v2 update (the
canonical form of the neutral layer, and what a v2-only agent sends behind the adapter) and returns
the v1 updates that say the same to a v1 client, in order; :meth:`V2View.project` does the inverse
for a v1 update.  Each view holds only the state the stateful rows need; every per-object mapping
is a row function of :mod:`acp_trio._mapping`.

``V1View`` (v2 → v1; ``docs/protocol/v2/migration.mdx`` § At a glance, § Tool calls, § Plans):

- ``*_chunk`` messages: the same, ``messageId`` kept (T5/T6; for a text chunk's wire JSON,
  :meth:`V1View.project_wire` says so without decoding it: the adapter's streaming path); whole-message upserts
  (``agent_message``...): one chunk per block while the v1 client holds nothing of that message,
  else :class:`~acp_trio._mapping.VersionError` (v1 cannot retract chunks: T7); ``user_message``:
  nothing on a live turn (the v1 client sent it: T1), chunks when ``echo_user_messages`` (replay);
- ``state_update``: nothing (v1's pending ``session/prompt`` says it: T2, T22);
- the first ``tool_call_update`` of an id is v1's ``tool_call`` (T8), later ones ``tool_call_update``
  (T9, T10); ``tool_call_content_chunk``: a ``tool_call_update`` with the whole content so far
  (T11); a ``v1_content`` hint replaces the update's content with its exact v1 rendering (T13);
- display terminals (``terminal_update``, ``terminal_output_chunk``): every tool call showing the
  terminal gets its content again, the terminal as text (T14);
- ``plan_update``: one v1 ``plan`` with every live plan's entries (T20);
- ``config_option_update``: the same, plus ``current_mode_update`` when the mode option's value
  changed (L12); ``available_commands_update``: L14; session info, usage, notices, compactions:
  the same shape;
- an unknown variant (v2's catch-all ``SessionUpdateOther``, a plan, content block or tool call
  content item of an unknown type) is not sent (a strict v1 client would drop the connection): it
  is dropped with a logged warning, and the next update sent carries ``_meta["acp-trio/dropped"]``:
  how many were (design Q6).

``V2View`` (v1 → v2): chunks get ``messageId`` s (the v1 one, else one per run of chunks of one
role, as :class:`~acp_trio.session_state.SessionState` groups them; for a text chunk's wire JSON,
:meth:`V2View.project_wire` sets it without decoding the rest); ``tool_call`` is a
``tool_call_update`` (a repeated one clears what it omits); ``plan`` is a ``plan_update`` with one
``planId`` per session; ``current_mode_update`` is a ``config_option_update`` of the session's
options (seeded with :meth:`V2View.seed` from the session's ``modes``/``configOptions``); unknown
v1 variants are forwarded as v2's catch-all (v2 receivers preserve them).
"""

from __future__ import annotations

import base64
import binascii
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from acp_schema import v1, v2

from . import _mapping as m
from ._converter import DecodeError
from ._spec import UNSET, UnsetType

__all__ = ["V1View", "V2View"]

log = logging.getLogger("acp_trio.neutral")

_ROLES: dict[type, str] = {
    v2.UserMessageChunkSessionUpdate: "user",
    v2.UserMessageSessionUpdate: "user",
    v2.AgentMessageChunkSessionUpdate: "agent",
    v2.AgentMessageSessionUpdate: "agent",
    v2.AgentThoughtChunkSessionUpdate: "thought",
    v2.AgentThoughtSessionUpdate: "thought",
}
_CHUNKS = (
    v2.UserMessageChunkSessionUpdate,
    v2.AgentMessageChunkSessionUpdate,
    v2.AgentThoughtChunkSessionUpdate,
)
_STATES = (
    v2.RunningStateUpdateSessionUpdate,
    v2.IdleStateUpdateSessionUpdate,
    v2.RequiresActionStateUpdateSessionUpdate,
    v2.StateUpdateSessionUpdateOther,
)
_SAME_SHAPE_V2 = (
    v2.SessionInfoUpdateSessionUpdate,
    v2.UsageUpdateSessionUpdate,
    v2.NoticeSessionUpdate,
    v2.CompactionUpdateSessionUpdate,
    v2.CompactionSummaryChunkSessionUpdate,
)
_SAME_SHAPE_V1 = (
    v1.SessionInfoUpdateSessionUpdate,
    v1.UsageUpdateSessionUpdate,
    v1.NoticeSessionUpdate,
    v1.CompactionUpdateSessionUpdate,
    v1.CompactionSummaryChunkSessionUpdate,
)


def _wire_names(*classes: type) -> frozenset[str]:
    """The JSON field names the generated ``classes`` know (their ``_meta`` included)."""
    return frozenset(f.metadata["acp"].wire for c in classes for f in attrs.fields(c) if "acp" in f.metadata)


_WIRE_CHUNK_ROLES: dict[Any, str] = {
    "user_message_chunk": "user",
    "agent_message_chunk": "agent",
    "agent_thought_chunk": "thought",
}
"""The v2 chunk updates whose v1 form is the same JSON (rows T5/T6: ``messageId`` kept), by role."""
_CHUNK_OTHER_FIELDS = _wire_names(
    *_CHUNKS, v1.UserMessageChunkSessionUpdate, v1.AgentMessageChunkSessionUpdate, v1.AgentThoughtChunkSessionUpdate
) - {"sessionUpdate", "messageId", "content", "_meta"}
"""Fields a chunk of either version knows besides those :meth:`V1View.project_wire` checks (none
today): a chunk with one goes the typed way."""
_TEXT_OTHER_FIELDS = _wire_names(v1.TextContentBlock, v2.TextContentBlock) - {"type", "text", "_meta"}
"""A text block's known fields :meth:`V1View.project_wire` does not check (``annotations``)."""
_V1_WIRE_CHUNKS: dict[Any, type] = {
    "user_message_chunk": v1.UserMessageChunkSessionUpdate,
    "agent_message_chunk": v1.AgentMessageChunkSessionUpdate,
    "agent_thought_chunk": v1.AgentThoughtChunkSessionUpdate,
}
"""The v1 chunk updates by wire name: the kind :meth:`V2View._message_id` groups by."""


def _plain_text_chunk(update: dict[str, Any]) -> bool:
    """Whether the wire ``update`` (a chunk) holds a ``text`` block and only fields that are the
    same JSON in both versions: ``_meta`` objects, no ``annotations`` (unknown fields are kept as
    they are either way)."""
    content = update.get("content")
    if type(content) is not dict or content.get("type") != "text" or type(content.get("text")) is not str:
        return False
    # _meta_is_object, inlined: this runs once per streamed chunk
    if ("_meta" in update and type(update["_meta"]) is not dict) or (
        "_meta" in content and type(content["_meta"]) is not dict
    ):
        return False
    if _CHUNK_OTHER_FIELDS and not _CHUNK_OTHER_FIELDS.isdisjoint(update):
        return False
    return _TEXT_OTHER_FIELDS.isdisjoint(content)


@attrs.define
class _Fixed:
    """Tool call content given in its exact v1 form (a hint), sent as it is."""

    items: list[Any]


@attrs.define
class _Terminal:
    """A display terminal as far as v1 needs it: its command, bytes and exit."""

    command: str | None = None
    output: bytearray = attrs.field(factory=bytearray)
    exit_status: v2.TerminalExitStatus | None = None


class V1View:
    """v2 → v1 for one session (see the module docstring).

    ``echo_user_messages``: send ``user_message`` upserts as v1 chunks (a replay: the v1 client did
    not send them); ``False`` on a live turn, where the client's own ``session/prompt`` is the
    message (migration.mdx § The new prompt lifecycle: "Implicit (the request itself)").
    """

    def __init__(self, *, echo_user_messages: bool = False) -> None:
        self.echo_user_messages = echo_user_messages
        self._tool_calls: dict[str, list[Any]] = {}  # id -> content slots: v2 item or _Fixed
        self._plans: dict[str, list[v2.PlanEntry]] = {}  # planId -> entries, creation order
        self._terminals: dict[str, _Terminal] = {}
        self._messages: set[tuple[str, str]] = set()  # (role, messageId) the client holds content of
        self._mode: str | None = None  # the mode value the client was last told
        self._dropped = 0  # unknown updates not sent since the last sent one

    def project(self, update: Any, v1_content: Sequence[Any] | None = None) -> list[Any]:
        """The v1 updates (``acp_schema.v1.SessionUpdate`` variants) that say what the v2 ``update``
        says, in order; ``[]`` for v2 state a v1 client leaves implicit.  ``v1_content``: the exact
        v1 rendering of a ``tool_call_update``'s ``content`` (the neutral layer's :class:`Diff`
        texts).  Raises :class:`~acp_trio._mapping.VersionError` for a known v2 update v1 cannot
        express (nothing is sent, the view's state is unchanged)."""
        out = self._project(update, v1_content)
        if out and self._dropped:
            first = out[0]
            meta = m._meta_with(first.meta, {"dropped": self._dropped})
            out[0] = attrs.evolve(first, meta=meta)
            self._dropped = 0
        return out

    def project_wire(self, update: dict[str, Any]) -> bool:
        """Whether the v2 ``update`` (its wire JSON, ``session/update``'s ``update``) is its own v1
        form, to be sent unchanged; the state :meth:`project` keeps is updated as it would be.

        The streaming fast path (issue 33's bar): a ``*_chunk`` of a ``text`` block with a
        ``messageId`` is the same JSON in v1 (rows T5/T6: v1's optional ``messageId`` kept), unknown
        fields and ``_meta`` included.  ``False`` for anything else (another update or block, a
        field of the wrong type, ``annotations``, a ``_meta`` that is not an object) and when the
        next update sent must carry the count of dropped ones: then decode it and call
        :meth:`project`, which checks it fully."""
        role = _WIRE_CHUNK_ROLES.get(update.get("sessionUpdate"))
        if role is None or self._dropped:
            return False
        message_id = update.get("messageId")
        if type(message_id) is not str or not _plain_text_chunk(update):
            return False
        self._messages.add((role, message_id))  # a chunk: always appends (as _message)
        return True

    def _project(self, update: Any, v1_content: Sequence[Any] | None) -> list[Any]:
        if isinstance(update, _STATES):
            return []
        role = _ROLES.get(type(update))
        if role is not None:
            return self._message(role, update)
        if isinstance(update, v2.ToolCallUpdateSessionUpdate):
            return [self._tool_call(update, v1_content)]
        if isinstance(update, v2.ToolCallContentChunkSessionUpdate):
            return [self._content_chunk(update)]
        if isinstance(update, v2.TerminalUpdateSessionUpdate):
            return self._terminal_update(update)
        if isinstance(update, v2.TerminalOutputChunkSessionUpdate):
            return self._terminal_chunk(update)
        if isinstance(update, v2.PlanUpdateSessionUpdate):
            return self._plan(update)
        if isinstance(update, v2.ConfigOptionUpdateSessionUpdate):
            return self._config(update)
        if isinstance(update, v2.AvailableCommandsUpdateSessionUpdate):
            return [m.commands_to_v1(update)]
        if isinstance(update, _SAME_SHAPE_V2):
            return [m.same_shape_to_v1(update)]
        if isinstance(update, v2.SessionUpdateOther):
            return self._drop(f"session/update {update.session_update!r}")
        raise m.VersionError(
            1, f"session/update {type(update).__name__}", "no v1 mapping (migration.mdx § At a glance)"
        )

    def _drop(self, what: str) -> list[Any]:
        log.warning("%s has no v1 form; not sent to the v1 client (a strict one would disconnect)", what)
        self._dropped += 1
        return []

    # -- messages (T1, T5-T7) --------------------------------------------------------------------
    def _message(self, role: str, update: Any) -> list[Any]:
        key = (role, update.message_id)
        if isinstance(update, _CHUNKS):
            if m._is_other(update.content):
                return self._drop(f"{update.session_update} of a {update.content.type!r} block")
            self._messages.add(key)  # a chunk: always appends
            return [m.chunk_to_v1(update)]
        if isinstance(update.content, UnsetType):
            log.warning("%s %s: a _meta-only upsert has no v1 form; not sent", update.session_update, update.message_id)
            return []
        if role == "user" and not self.echo_user_messages:
            self._messages.add(key)
            return []
        if key in self._messages:
            raise m.VersionError(
                1,
                f"{update.session_update} replacing message {update.message_id}",
                "v1 clients only append chunks and cannot retract what they hold "
                "(migration.mdx § Whole-message upserts): send the rest as chunks",
            )
        blocks = update.content if isinstance(update.content, list) else []
        known = []
        for block in blocks:
            if m._is_other(block):
                self._drop(f"{update.session_update} block of type {block.type!r}")
            else:
                known.append(block)
        chunks = m.message_to_v1(attrs.evolve(update, content=known))
        if chunks:
            self._messages.add(key)
        return chunks

    # -- tool calls (T8-T14) ---------------------------------------------------------------------
    def _render(self, slots: list[Any]) -> list[Any]:
        out: list[Any] = []
        for slot in slots:
            if isinstance(slot, _Fixed):
                out.extend(slot.items)
            elif isinstance(slot, v2.TerminalToolCallContent):
                term = self._terminals.get(slot.terminal_id)
                if term is None:  # nothing known of it yet: shown once its terminal_update comes
                    continue
                out.append(m.terminal_to_v1(m.terminal_text(term.command, bytes(term.output), term.exit_status)))
            else:
                out.append(m.tool_content_to_v1(slot))
        return out

    def _known(self, items: Sequence[Any]) -> list[Any]:
        """``items`` without the tool call content v1 cannot show and the v2 union does not know
        (an unknown type, or a content item of an unknown block type): each dropped and counted."""
        out = []
        for item in items:
            block = item.content if isinstance(item, v2.ContentToolCallContent) else None
            if m._is_other(item) or m._is_other(block):
                self._drop(f"tool call content of type {getattr(block or item, 'type', '?')!r}")
            else:
                out.append(item)
        return out

    def _tool_call(self, update: v2.ToolCallUpdateSessionUpdate, v1_content: Sequence[Any] | None) -> Any:
        create = update.tool_call_id not in self._tool_calls
        slots = self._tool_calls.get(update.tool_call_id, [])
        content: Any = UNSET
        if v1_content is not None:
            slots = [_Fixed(list(v1_content))]
        elif isinstance(update.content, list):
            slots = self._known(update.content)
        elif update.content is None:
            slots = []
        if v1_content is not None or not isinstance(update.content, UnsetType):
            content = self._render(slots)
        result = m.tool_call_to_v1(update, create=create, content=content)
        self._tool_calls[update.tool_call_id] = slots
        return result

    def _content_chunk(self, update: v2.ToolCallContentChunkSessionUpdate) -> Any:
        slots = [*self._tool_calls.get(update.tool_call_id, []), *self._known([update.content])]
        create = update.tool_call_id not in self._tool_calls
        result = m.content_chunk_to_v1(update, self._render(slots), create=create)
        self._tool_calls[update.tool_call_id] = slots
        return result

    def _showing(self, terminal_id: str) -> list[Any]:
        """A ``tool_call_update`` with the whole content of each tool call showing the terminal."""
        out = []
        for tool_call_id, slots in self._tool_calls.items():
            if any(isinstance(s, v2.TerminalToolCallContent) and s.terminal_id == terminal_id for s in slots):
                out.append(v1.ToolCallUpdateSessionUpdate(tool_call_id=tool_call_id, content=self._render(slots)))
        return out

    def _terminal_update(self, update: v2.TerminalUpdateSessionUpdate) -> list[Any]:
        term = self._terminals.setdefault(update.terminal_id, _Terminal())
        if not isinstance(update.command, UnsetType):
            term.command = update.command
        if isinstance(update.output, v2.TerminalOutput):  # a replacement snapshot
            term.output = bytearray(_decode(update.output.data, update.terminal_id))
        elif update.output is None:
            term.output = bytearray()
        if not isinstance(update.exit_status, UnsetType):
            term.exit_status = update.exit_status
        return self._showing(update.terminal_id)

    def _terminal_chunk(self, update: v2.TerminalOutputChunkSessionUpdate) -> list[Any]:
        term = self._terminals.setdefault(update.terminal_id, _Terminal())
        term.output += _decode(update.data, update.terminal_id)
        return self._showing(update.terminal_id)

    # -- plans, config options (T20, L12) ----------------------------------------------------------
    def _plan(self, update: v2.PlanUpdateSessionUpdate) -> list[Any]:
        plan = update.plan
        if not isinstance(plan, v2.ItemsPlanUpdateContent):
            return self._drop(f"plan_update of type {getattr(plan, 'type', '?')!r}")
        self._plans[plan.plan_id] = list(plan.entries)  # a known id keeps its place: creation order
        result = m.plan_to_v1(list(self._plans.values()))
        return [attrs.evolve(result, meta=update.meta)]

    def _config(self, update: v2.ConfigOptionUpdateSessionUpdate) -> list[Any]:
        out = m.config_update_to_v1(update)
        if len(out) > 1:
            mode = out[1].current_mode_id
            if mode == self._mode:
                out.pop()
            self._mode = mode
        return out


def _meta_is_object(wire: dict[str, Any]) -> bool:
    """Whether ``wire`` has no ``_meta`` or a JSON object there (what decoding keeps as it is)."""
    return "_meta" not in wire or type(wire["_meta"]) is dict


def _decode(data: str, terminal_id: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        log.warning("terminal %s: output that is not base64 is left out of the v1 text", terminal_id)
        return b""


class V2View:
    """v1 → v2 for one session (see the module docstring).

    ``plan_id``: the ``planId`` of the session's one v1 plan.  ``new_id``: makes a ``messageId``
    (default ``msg_<12 hex>``).
    """

    def __init__(self, *, plan_id: str = "plan", new_id: Callable[[], str] | None = None) -> None:
        self.plan_id = plan_id
        self._new_id = new_id or (lambda: f"msg_{uuid.uuid4().hex[:12]}")
        self._open: tuple[type, str] | None = None  # (chunk class, messageId) the next chunk may join
        self._open_generated = False  # the open message's id is ours (the v1 chunks had none)
        self._aliases: dict[tuple[type, str], str] = {}  # (chunk class, v1 messageId) -> v2 messageId
        self._tool_calls: set[str] = set()
        self._options: list[Any] = []  # the session's v2 config options
        self._modes_id: str | None = None  # configId of the mode option made from v1 modes (seed)

    def seed(
        self, *, modes: v1.SessionModeState | None = None, config_options: Sequence[v1.SessionConfigOption] = ()
    ) -> list[v2.SessionConfigOption]:
        """Learn the session's options from its ``session/new`` / ``session/load`` answer and return
        them as v2's ``configOptions``: the v1 options, plus ``modes`` as a ``category: "mode"``
        option when none of them is one (migration.mdx § Session modes become config options)."""
        options: list[Any] = [m.config_option_to_v2(o) for o in config_options]
        self._modes_id = None
        if modes is not None and m.modes_from_config(options) is None:
            made = m.modes_to_config(modes)
            options.append(made)
            self._modes_id = made.config_id
        self._options = options
        return list(options)

    def new_turn(self) -> None:
        """A prompt turn starts (its ``user_message`` went out apart from :meth:`project`): the
        agent's next chunk without a ``messageId`` starts a new message, not the last turn's."""
        self._open = None

    @property
    def options(self) -> list[Any]:
        """The session's v2 ``configOptions`` as the client was last told them."""
        return list(self._options)

    @property
    def modes_option_id(self) -> str | None:
        """The ``configId`` of the mode option :meth:`seed` made from v1 ``modes`` (the agent has
        no such config option: setting it is v1's ``session/set_mode``), else ``None``."""
        return self._modes_id

    def _with_modes(self, options: list[Any]) -> list[Any]:
        """``options`` (a v1 agent's new list) plus the mode option made from its ``modes``, which
        that list never holds (v1 sends modes apart)."""
        made = next((o for o in self._options if getattr(o, "config_id", None) == self._modes_id), None)
        if made is None or m.modes_from_config(options) is not None:
            return options
        return [*options, made]

    def project(self, update: Any) -> list[Any]:
        """The v2 updates (``acp_schema.v2.SessionUpdate`` variants) for the v1 ``update``.  Raises
        :class:`~acp_trio._mapping.VersionError` for a ``current_mode_update`` when the session has
        no mode option (call :meth:`seed` first)."""
        if isinstance(update, v1.UserMessageChunkSessionUpdate | v1.AgentMessageChunkSessionUpdate):
            return [self._chunk(update)]
        if isinstance(update, v1.AgentThoughtChunkSessionUpdate):
            return [self._chunk(update)]
        if isinstance(update, v1.ToolCallSessionUpdate | v1.ToolCallUpdateSessionUpdate):
            known = update.tool_call_id in self._tool_calls
            if not known:
                self._tool_calls.add(update.tool_call_id)
                self._open = None  # a new transcript entry: the next chunk starts a new message
            return [m.tool_call_to_v2(update, known=known)]
        if isinstance(update, v1.PlanSessionUpdate):
            return [m.plan_to_v2(update, self.plan_id)]
        if isinstance(update, v1.CurrentModeUpdateSessionUpdate):
            result = m.current_mode_to_v2(update, self._options)
            self._options = list(result.config_options)
            return [result]
        if isinstance(update, v1.ConfigOptionUpdateSessionUpdate):
            self._options = self._with_modes([m.config_option_to_v2(o) for o in update.config_options])
            return [v2.ConfigOptionUpdateSessionUpdate(config_options=list(self._options), meta=update.meta)]
        if isinstance(update, v1.AvailableCommandsUpdateSessionUpdate):
            return [m.commands_to_v2(update)]
        if isinstance(update, _SAME_SHAPE_V1):
            return [m.same_shape_to_v2(update)]
        try:  # an unknown v1 variant: v2's union is open, receivers preserve it (migration.mdx § Extensibility)
            return [m._same(update, v2.SessionUpdate)]
        except DecodeError as exc:
            log.warning("a v1 session/update with no v2 form was not forwarded: %s", exc)
            return []

    def project_wire(self, update: dict[str, Any]) -> dict[str, Any] | None:
        """The v2 form of the v1 ``update`` (its wire JSON) when it is the same JSON but for its
        ``messageId`` (the streaming fast path of the adapter's second direction): a text
        ``*_chunk``, unknown fields and ``_meta`` kept, ``messageId`` set as :meth:`project` sets
        it (and the state updated as there).  ``None`` for anything else (another update or block,
        ``annotations``, a field of the wrong type, a ``_meta`` that is not an object): decode it and
        call :meth:`project`."""
        kind = _V1_WIRE_CHUNKS.get(update.get("sessionUpdate"))
        if kind is None:
            return None
        own = update.get("messageId")
        if (own is not None and type(own) is not str) or not _plain_text_chunk(update):
            return None
        out = dict(update)
        out["messageId"] = self._message_id(kind, own)
        return out

    def _chunk(self, update: Any) -> Any:
        """The chunk with the ``messageId`` of :meth:`_message_id`."""
        own = update.message_id if isinstance(update.message_id, str) else None
        message_id = self._message_id(type(update), own)
        return m.chunk_to_v2(attrs.evolve(update, message_id=UNSET), message_id)

    def _message_id(self, kind: type, own: str | None) -> str:
        """The v2 ``messageId`` of a v1 chunk of ``kind`` (its class) with its own id ``own``, which
        keeps v1's grouping (``SessionState``'s v1 rule): a chunk without an id joins the open
        message of its role, else starts one with a new id; a chunk with an id joins the message
        that has it, or adopts the open message of its role when that one has only a generated id
        (v1 then gives it this id; v2 keeps the generated one)."""
        same_kind_open = self._open is not None and self._open[0] is kind
        if own is not None:
            alias = self._aliases.get((kind, own))
            if alias is not None:
                message_id = alias
            elif same_kind_open and self._open_generated:
                assert self._open is not None
                message_id = self._aliases[(kind, own)] = self._open[1]
            else:
                message_id = self._aliases[(kind, own)] = own
            generated = False
        elif same_kind_open:
            assert self._open is not None
            message_id, generated = self._open[1], self._open_generated
        else:
            message_id, generated = self._new_id(), True
        self._open, self._open_generated = (kind, message_id), generated
        return message_id

"""A version-neutral agent API (issue 33): one agent, served to v1 and v2 clients alike.

Contract: the author subclasses :class:`Agent` and writes the prompt turn once against
:class:`Turn` (``say``, ``think``, ``tool``, ``plan``, ``ask_permission``, ``elicit``) and
:class:`ToolCall` (``update``, ``append``, ``complete``, ``fail``, ``ask_permission``).
:func:`handlers` (or the agent itself: it has ``acp_handlers()``) turns the agent into the
``{variant: factory}`` mapping every entry point takes (``run_agent_stdio``, ``AcpApp``,
``open_memory_pair``), so the runtime's ``initialize`` negotiation picks v1 or v2 per connection
and builds that version's surface.  Each output is made once, as a v2 update (the canonical form:
every entity has an id); a v2 connection sends it as it is, a v1 connection sends what
:class:`V1View` (``acp_trio._views``) projects it to with the rows of ``acp_trio._mapping``, as
``docs/protocol/v2/migration.mdx`` maps them:

- ``user_message`` acknowledgment, receipt and ``state_update`` (``running``,
  ``requires_action`` while a permission request or an elicitation waits, ``idle`` with the stop
  reason) exist in v2 only (§ The new prompt lifecycle); on v1 the pending ``session/prompt`` is
  the turn and its answer carries the stop reason;
- the first ``tool_call_update`` of an id becomes v1's ``tool_call``; tool status ``cancelled``
  (v2 only) becomes ``failed`` (§ Tool calls);
- ``plan_update`` (``planId``) becomes v1's ``plan``, whose entries are those of every plan of the
  session in creation order (§ Plans);
- a :class:`Diff` is v2 ``changes`` plus a ``git_patch`` and v1 ``path``/``oldText``/``newText``,
  both exact because the author gave the texts (§ Diff content);
- a permission request is about a tool call in v1 and has a ``title`` and a ``subject`` in v2
  (§ Permission requests): on v1 a question about no tool call gets a synthetic ``tool_call``
  (kind ``execute`` for a command, ``other`` otherwise) that the layer reports ``completed``,
  ``failed`` or cancelled once answered;
- a v2 update with no v1 form raises :class:`VersionError` naming the version, never sent as
  v1's catch-all (a strict v1 client would drop the connection).

Cancellation is trio's: ``session/cancel`` cancels ``prompt()`` (v1 answers ``cancelled``, v2
ends ``idle`` ``cancelled``).  A permission request or elicitation waiting when it arrives is
awaited under a shield for the client's ``cancelled`` answer (prompt-turn.mdx: the client MUST
answer them so), at most :data:`CANCEL_GRACE` seconds; the question then returns
``Decision(None, cancelled=True)`` / ``Elicited("cancel")`` and the next checkpoint of the turn
raises ``trio.Cancelled``.

Sessions belong to the :class:`Agent` object, not to a connection: each keeps its history in
this process in the canonical form (v2 updates, plus the exact v1 rendering of a :class:`Diff`
beside its update), so v1 ``session/load`` and v2 ``session/resume`` with ``replayFrom: {type:
start}`` replay a session made on either version, projected to the loading connection's
(§ Session setup and lifecycle); ``session/list``, ``session/close`` (cancels the running turn, keeps
the history) and ``session/delete`` (forgets it) work on both.  Config options are the author's
:class:`ConfigOption` s; the ``category: "mode"`` one is also v1's ``modes`` and ``session/set_mode``
(§ Session modes become config options).

With :attr:`Agent.store` (an ``acp_trio.session_store`` store) the sessions outlive the process:
each is recorded in the canonical form (v2 ``update`` objects; a :class:`Diff`'s exact v1 texts under
``_meta["acp-trio/v1Content"]`` of its update, removed when read back; each ``session/prompt`` line
for the title and prompt count), so a later process loads (v1) or resumes (v2, from the start) a
session made on either version, and lists, closes and deletes them.  A session a v1 connection with
``acp_trio.session_store.enable`` recorded (v1 wire lines: the store's form before) is converted with
:class:`~acp_trio._views.V2View` and rewritten in the canonical form, in place, when first loaded.
Acknowledged means stored, as the store promises (:data:`STORE_WAIT`).  An agent without a store
whose v1 connection has a store enabled (``enable`` before its handler is built) still serves
``session/load``, ``resume``, ``list`` and ``close`` of that connection's stored v1 sessions from it.

What it does not do yet (see ``/work/briefs/33-api.md``, the design): authentication methods,
slash commands, whole-message upserts.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import logging
import os
import signal as _signal
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, TypeVar

import attrs
import orjson
import trio

from acp_schema import v1, v2

from . import _capabilities, fs
from ._connection import ConnectionClosed
from ._converter import converter
from ._core import RequestError
from ._mapping import (
    Diff,
    VersionError,
    agent_caps_to_v1,
    config_options_to_v1,
    content_to_v2,
    diff_to_v1,
    diff_to_v2,
    diff_v2_to_v1,
    elicitation_to_v1,
    mcp_server_to_v2,
    modes_from_config,
    outcome_to_v2,
    permission_to_v1,
    stop_reason_to_v1,
    tool_call_to_v2,
    tool_content_to_v1,
)
from ._roles import AgentSideConnection
from ._spec import UNSET, UnsetType
from ._views import V1View
from .agent_terminal import TerminalHandle, open_terminal

if TYPE_CHECKING:
    from ._store_db import Log
    from .session_store import SessionStore, StoredConversation

__all__ = [
    "ALLOW_OR_REJECT",
    "CANCEL_GRACE",
    "STORE_WAIT",
    "TERMINAL_FLUSH_BYTES",
    "TERMINAL_FLUSH_DELAY",
    "USAGE_META",
    "Agent",
    "AgentInfo",
    "Choice",
    "ClientFiles",
    "ClientTerminals",
    "ClientView",
    "Command",
    "CompletedCommand",
    "ConfigOption",
    "ContentLike",
    "Cost",
    "Decision",
    "Diff",
    "DisplayTerminal",
    "Elicited",
    "McpSupport",
    "Option",
    "Plan",
    "PlanEntry",
    "Session",
    "SessionFiles",
    "StopReason",
    "ToolCall",
    "ToolContentLike",
    "Turn",
    "TurnEnd",
    "Usage",
    "V1View",
    "VersionError",
    "diff_to_v1",
    "diff_to_v2",
    "diff_v2_to_v1",
    "handlers",
    "mode_option",
]

StopReason: TypeAlias = str
"""``end_turn``, ``max_tokens``, ``max_turn_requests``, ``refusal``, ``cancelled`` (both versions)."""
ContentLike: TypeAlias = "str | v2.ContentBlock"
"""What :meth:`Turn.say` and :meth:`Turn.think` take: a ``str`` (a text block) or a content block
(``acp_schema.v2.ContentBlock``; a v1 connection gets it converted, migration.mdx § Content blocks)."""
ToolContentLike: TypeAlias = "str | v2.ContentBlock | Diff | v2.ToolCallContent | TerminalHandle"
"""What a tool call's content may hold: a ``str`` (a text block), a content block, a :class:`Diff`
(exact in both versions), a v2 tool call content item, or a v1 client terminal (``TerminalHandle``
of :mod:`acp_trio.agent_terminal`, shown as its output on v2)."""

TERMINAL_FLUSH_BYTES = 4096
"""Row T14 on v1: bytes of display terminal output held before the tool call's text is re-sent."""
TERMINAL_FLUSH_DELAY = 0.1
"""Row T14 on v1: seconds held display terminal output waits at most before it is sent."""

STORE_WAIT = 10.0
"""Seconds an answer that must be stored first (acknowledged means stored: ``acp_trio.session_store``)
waits at most for the store's commit; past it (or when writing fails) the answer goes out and the
error is logged."""
V1_HINT = "acp-trio/v1Content"
"""The ``_meta`` key under which a stored canonical update keeps its exact v1 rendering (a
:class:`Diff`'s texts): removed when the update is read back."""

log = logging.getLogger("acp_trio.neutral")

CANCEL_GRACE = 5.0
"""Seconds a question (permission request, elicitation) waiting when its turn is cancelled is
still awaited for the client's ``cancelled`` answer before it is abandoned (the runtime then
cancels the request: v2 ``$/cancel_request``)."""

_T = TypeVar("_T")


@attrs.frozen
class AgentInfo:
    """The agent's name: v1 ``agentInfo``, v2 ``info`` (schema ``$defs/Implementation``)."""

    name: str
    version: str
    title: str | None = None


@attrs.frozen
class McpSupport:
    """The MCP transports the agent accepts in a session's ``mcpServers`` (``session/new``,
    ``session/load``, ``session/resume``): v1 ``agentCapabilities.mcpCapabilities`` (``http``,
    ``sse``; stdio is not advertised there: every v1 agent must accept it), v2
    ``capabilities.session.mcp`` (``stdio``, ``http`` markers; v2 has no ``sse``: migration.mdx
    § MCP server configuration, § Capability reorganization).  ``stdio=False`` shows on v2 only;
    ``sse`` on v1 only.  The configs reach the agent as :attr:`Session.mcp_servers`."""

    stdio: bool = True
    http: bool = False
    sse: bool = False


@attrs.frozen
class Cost:
    """What something cost: ``amount`` in ``currency`` (an ISO 4217 code, e.g. ``"USD"``): v1 and
    v2 ``Cost`` (schema ``$defs/Cost``)."""

    amount: float
    currency: str


@attrs.frozen
class Usage:
    """A turn's token counts (the unstable schemas' ``Usage``: ``totalTokens``, ``inputTokens``,
    ``outputTokens``, optional ``thoughtTokens``, ``cachedReadTokens``, ``cachedWriteTokens``); the
    stable schemas have no place for it, so it travels under ``_meta["acp-trio/usage"]`` in that
    shape (see :class:`TurnEnd`)."""

    total_tokens: int
    input_tokens: int
    output_tokens: int
    thought_tokens: int | None = None
    cached_read_tokens: int | None = None
    cached_write_tokens: int | None = None

    def wire(self) -> dict[str, int]:
        """The unstable schema's ``Usage`` JSON (the ``None`` counts left out)."""
        names = {
            "total_tokens": "totalTokens",
            "input_tokens": "inputTokens",
            "output_tokens": "outputTokens",
            "thought_tokens": "thoughtTokens",
            "cached_read_tokens": "cachedReadTokens",
            "cached_write_tokens": "cachedWriteTokens",
        }
        return {wire: value for name, wire in names.items() if (value := getattr(self, name)) is not None}


USAGE_META = "acp-trio/usage"
"""The ``_meta`` key of a :class:`TurnEnd`'s usage on the stable schemas (the unstable ones have a
``usage`` field there)."""


@attrs.frozen
class TurnEnd:
    """What :meth:`Agent.prompt` may return instead of a bare stop reason: ``stop_reason``; ``usage``
    (:class:`Usage`, the turn's token counts); ``meta`` (``_meta`` of the turn's end).  v1: the
    ``session/prompt`` answer carries ``_meta`` (with the usage under :data:`USAGE_META`); v2: the
    ``idle`` ``state_update`` does (prompt-turn.mdx, prompt-lifecycle.mdx)."""

    stop_reason: str = "end_turn"
    usage: Usage | None = None
    meta: Mapping[str, Any] | None = None

    def meta_wire(self) -> dict[str, Any] | None:
        """``meta`` with the usage added under :data:`USAGE_META`; ``None`` when both are absent."""
        if self.meta is None and self.usage is None:
            return None
        out = dict(self.meta or {})
        if self.usage is not None:
            out[USAGE_META] = self.usage.wire()
        return out


@attrs.frozen
class Choice:
    """One value of a select :class:`ConfigOption` (v1/v2 ``SessionConfigSelectOption``; for the
    mode option also a v1 ``SessionMode``)."""

    value: str
    name: str
    description: str | None = None


@attrs.frozen
class ConfigOption:
    """A session configuration option (v1 session-config-options.mdx; v2 the same, ``configId``):
    a select (``choices`` given, ``current`` one of their values) or a boolean (no ``choices``,
    ``current`` a ``bool``).  ``category``: ``"mode"`` (on v1 also the session's ``modes``: row L4),
    ``"model"``, ``"model_config"``, ``"thought_level"`` or ``"_custom"``.  ``current``: the value a
    new session starts with; :attr:`Session.config` holds each session's own."""

    config_id: str
    name: str
    current: str | bool
    choices: tuple[Choice, ...] = ()
    category: str | None = None
    description: str | None = None


@attrs.frozen
class Option:
    """A permission option (``optionId``, ``name``, ``kind``: ``allow_once``, ``allow_always``,
    ``reject_once``, ``reject_always``; the same in both versions)."""

    option_id: str
    name: str
    kind: str


ALLOW_OR_REJECT = (Option("allow", "Allow", "allow_once"), Option("reject", "Reject", "reject_once"))
"""The options :meth:`Turn.ask_permission` and :meth:`ToolCall.ask_permission` offer by default:
``allow`` (``allow_once``) and ``reject`` (``reject_once``)."""
_ALLOWING = ("allow_once", "allow_always")


@attrs.frozen
class Decision:
    """The answer to a permission request (row T18).  ``option``: the chosen one, ``None`` when the
    request was cancelled (``cancelled`` true: ``session/cancel`` arrived while it waited) or
    answered with an outcome this layer does not know (never an approval: migration.mdx
    § Permission requests)."""

    option: Option | None
    cancelled: bool = False

    @property
    def allowed(self) -> bool:
        """Whether an ``allow_once`` / ``allow_always`` option was chosen."""
        return self.option is not None and self.option.kind in _ALLOWING


@attrs.frozen
class Command:
    """The subject of a permission request about running a command (v2 ``subject: {type:
    command}``; v1: a synthetic ``execute`` tool call titled with it).  ``cwd``: absolute."""

    command: str
    cwd: str


@attrs.frozen
class Elicited:
    """The answer to an elicitation (``elicitation/create``, row T19).  ``action``: ``accept``,
    ``decline`` or ``cancel`` (also when the turn was cancelled while it waited), or an action this
    layer does not know; ``content``: the accepted form's values (``None`` otherwise)."""

    action: str
    content: Mapping[str, Any] | None = None

    @property
    def accepted(self) -> bool:
        """Whether the user accepted (``action == "accept"``)."""
        return self.action == "accept"


@attrs.frozen
class PlanEntry:
    """One plan entry (``content``, ``priority``, ``status``; the same in both versions, v2 adds
    status ``cancelled``)."""

    content: str
    status: str = "pending"
    priority: str = "medium"


def _block(content: ContentLike) -> v2.ContentBlock:
    return v2.TextContentBlock(text=content) if isinstance(content, str) else content


_ACTIVITY = itertools.count()


def _now() -> str:
    """ISO 8601 UTC, seconds (``SessionInfo.updatedAt``)."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@attrs.frozen
class _SessionRef:
    session_id: str


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


# -- wires: one per connection, the version's way to send ------------------------------------------
class _Wire:
    """How one connection sends the canonical (v2) output of the sessions attached to it."""

    version: int

    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn

    async def update(self, session_id: str, update: Any, v1_content: Sequence[Any] | None = None) -> None:
        raise NotImplementedError

    async def ask_permission(self, request: v2.RequestPermissionRequest) -> Any:
        """Send the request; the (v2) outcome."""
        raise NotImplementedError

    async def elicit(self, request: Any) -> Any:
        """Send ``elicitation/create`` (a v2 request); the (v2-shaped) response's wire JSON."""
        raise NotImplementedError

    def check_elicitation(self, mode: str) -> None:
        """Raise :class:`CapabilityError` (nothing sent) when the client did not offer ``mode``."""
        wire = {"mode": mode}
        if self.conn.client_supports("elicitation/create", wire):
            return
        check = _capabilities.check_client_call_v2 if self.version >= 2 else _capabilities.check_client_call
        check("elicitation/create", wire, self.conn.client_capabilities)
        raise _capabilities.CapabilityError("elicitation/create", f"elicitation.{mode}", peer="client")


class _V2Wire(_Wire):
    version = 2

    def __init__(self, conn: AgentSideConnection) -> None:
        super().__init__(conn)
        self.client = v2.ClientPeer(conn)

    async def update(self, session_id: str, update: Any, v1_content: Sequence[Any] | None = None) -> None:
        await self.client.session_update(v2.UpdateSessionNotification(session_id=session_id, update=update))

    async def _waiting(self, session_id: str, ask: Callable[[], Awaitable[_T]], answered: Callable[[_T], bool]) -> _T:
        # rows T15/T19/T22: requires_action while the question waits, running once answered
        await self.update(session_id, v2.RequiresActionStateUpdateSessionUpdate())
        result = await ask()
        if answered(result):
            await self.update(session_id, v2.RunningStateUpdateSessionUpdate())
        return result

    async def ask_permission(self, request: v2.RequestPermissionRequest) -> Any:
        response = await self._waiting(
            request.session_id,
            partial(self.client.session_request_permission, request),
            lambda r: not isinstance(r.outcome, v2.CancelledRequestPermissionOutcome),
        )
        return response.outcome

    async def elicit(self, request: Any) -> Any:
        response = await self._waiting(
            request.session_id,
            partial(self.client.elicitation_create, request),
            lambda r: getattr(r, "action", None) != "cancel",
        )
        return converter.unstructure(response)


class _V1Wire(_Wire):
    version = 1

    def __init__(self, conn: AgentSideConnection) -> None:
        super().__init__(conn)
        self.client = v1.ClientPeer(conn)
        self.views: dict[str, V1View] = {}
        # row T14: per session, the latest projection of display terminal output not sent yet and
        # how many output bytes it holds; sends go one at a time so a flush keeps its place
        self._held: dict[str, tuple[list[Any], int]] = {}
        self._sending = trio.Lock()

    def view(self, session_id: str) -> V1View:
        return self.views.setdefault(session_id, V1View())

    async def _send(self, session_id: str, updates: Sequence[Any]) -> None:
        for one in updates:
            await self.client.session_update(v1.SessionNotification(session_id=session_id, update=one))

    async def _lock(self) -> None:
        """Take ``_sending``, at once when it is free: a streamed chunk then costs no scheduler pass
        (as on v2, whose sends do not wait either), where ``async with`` would yield for each."""
        try:
            self._sending.acquire_nowait()
        except trio.WouldBlock:
            await self._sending.acquire()

    async def update(self, session_id: str, update: Any, v1_content: Sequence[Any] | None = None) -> None:
        await self._lock()
        try:
            await self._update(session_id, update, v1_content)
        finally:
            self._sending.release()

    async def _update(self, session_id: str, update: Any, v1_content: Sequence[Any] | None) -> None:
        out = self.view(session_id).project(update, v1_content)
        if isinstance(update, v2.TerminalOutputChunkSessionUpdate):
            # row T14: v1 re-sends the tool call's whole text for each chunk, so a burst of output
            # is coalesced: sent once TERMINAL_FLUSH_BYTES are held, or TERMINAL_FLUSH_DELAY
            # seconds after the first held chunk, or before anything else of the session
            _, size = self._held.get(session_id, ([], 0))
            size += len(update.data) * 3 // 4
            if size < TERMINAL_FLUSH_BYTES:
                if session_id not in self._held:
                    self.conn.start_soon(self._flush_later, session_id, name=f"terminal output {session_id}")
                self._held[session_id] = (out, size)
                return
        held, _ = self._held.pop(session_id, ([], 0))
        if isinstance(update, v2.TerminalOutputChunkSessionUpdate):
            held = []  # superseded: the new projection has all the output
        await self._send(session_id, [*held, *out])

    async def flush(self, session_id: str) -> None:
        """Send the session's held display terminal output now (before a question, or the answer
        that ends a v1 turn)."""
        await self._lock()
        try:
            held, _ = self._held.pop(session_id, ([], 0))
            await self._send(session_id, held)
        finally:
            self._sending.release()

    async def _flush_later(self, session_id: str) -> None:
        await trio.sleep(TERMINAL_FLUSH_DELAY)
        await self.flush(session_id)

    async def ask_permission(self, request: v2.RequestPermissionRequest) -> Any:
        # rows T15-T17: v1 asks about a tool call only; one is made up when the question has none
        synthetic, v1_request = permission_to_v1(request, synthetic_id=_new_id("permission"))
        await self.flush(request.session_id)
        if synthetic is not None:  # through the view, which must know the id from now on
            await self.update(request.session_id, tool_call_to_v2(synthetic))
        outcome: Any = v2.CancelledRequestPermissionOutcome()
        try:
            outcome = outcome_to_v2((await self.client.session_request_permission(v1_request)).outcome)
        finally:
            if synthetic is not None:  # the layer reports the question it made up as answered
                status = "cancelled"
                if isinstance(outcome, v2.SelectedRequestPermissionOutcome):
                    kinds = {o.option_id: o.kind for o in request.options}
                    status = "completed" if kinds.get(outcome.option_id) in _ALLOWING else "failed"
                with trio.CancelScope(shield=True):
                    done = v2.ToolCallUpdateSessionUpdate(tool_call_id=synthetic.tool_call_id, status=status)
                    await self.update(request.session_id, done)
        return outcome

    async def elicit(self, request: Any) -> Any:
        await self.flush(request.session_id)
        response = await self.client.elicitation_create(elicitation_to_v1(request))
        return converter.unstructure(response)


# -- the author's objects --------------------------------------------------------------------------
class ClientView:
    """What the connection a session is attached to knows of its client: ``info`` (the client's
    ``Implementation`` as wire JSON, or ``None``), ``protocol_version`` and the capability questions
    below (the client's ``initialize`` capabilities; initialization.mdx)."""

    def __init__(self, conn: AgentSideConnection) -> None:
        self._conn = conn

    @property
    def info(self) -> Mapping[str, Any] | None:
        """The client's ``clientInfo`` (v1) / ``info`` (v2) as wire JSON, ``None`` when not sent."""
        return self._conn.client_info

    @property
    def protocol_version(self) -> int:
        """The connection's negotiated protocol version (1 or 2)."""
        return self._conn.protocol_version

    def can_elicit(self, mode: str = "form") -> bool:
        """Whether the client offered elicitation in ``mode`` (``form`` / ``url``)."""
        return self._conn.client_supports("elicitation/create", {"mode": mode})

    def offers_files(self, write: bool = False) -> bool:
        """v1: whether the client offered ``fs.readTextFile`` (``write``: ``fs.writeTextFile``);
        v2: always ``False`` (migration.mdx § Client file system and terminal execution removed)."""
        if self.protocol_version >= 2:
            return False
        return self._conn.client_supports("fs/write_text_file" if write else "fs/read_text_file")

    def offers_terminal(self) -> bool:
        """v1: whether the client offered ``terminal``; v2: always ``False``."""
        return self.protocol_version < 2 and self._conn.client_supports("terminal/create")


class Session:
    """One session, held by the :class:`Agent` across connections and protocol versions.

    ``id``; ``cwd`` (absolute); ``additional_directories`` (absolute); ``mcp_servers`` (v2
    ``McpServer`` objects; v1 ones converted); ``protocol_version`` and ``client``
    (:class:`ClientView`) of the connection it is attached to now; ``title``.
    """

    def __init__(
        self,
        agent: Agent,
        session_id: str,
        cwd: str,
        wire: _Wire,
        *,
        additional_directories: Sequence[str] = (),
        mcp_servers: Sequence[Any] = (),
    ) -> None:
        self.id = session_id
        self.cwd = cwd
        self.additional_directories = tuple(additional_directories)
        self.mcp_servers = tuple(mcp_servers)
        self.title: str | None = None
        self.updated_at = _now()
        self._activity = next(_ACTIVITY)  # orders session/list within the same second
        self._agent = agent
        self._wire = wire
        self._turn: Turn | None = None
        self._history: list[tuple[Any, Sequence[Any] | None]] = []  # canonical (v2 update, v1 hint)
        self._log: Log | None = None  # where its records go in the agent's store
        self._background: set[trio.CancelScope] = set()  # of its start_soon tasks
        self.config: dict[str, str | bool] = {}
        """Each config option's current value, by ``config_id``."""
        self.config = {o.config_id: o.current for o in agent.config_options(self)}

    @property
    def protocol_version(self) -> int:
        """1 or 2: the version of the connection the session is attached to now (it changes when
        a client of the other version loads or resumes it)."""
        return self._wire.version

    @property
    def client(self) -> ClientView:
        """What the attached connection knows of its client (:class:`ClientView`)."""
        return ClientView(self._wire.conn)

    def __repr__(self) -> str:
        return f"Session({self.id!r}, cwd={self.cwd!r}, protocol_version={self.protocol_version})"

    @property
    def history(self) -> tuple[Any, ...]:
        """The conversation so far, in order, as the canonical v2 updates (``acp_schema.v2``
        ``SessionUpdate`` variants: ``user_message`` for each prompt, the agent's chunks, tool
        call upserts...; no ``state_update``): also what a session loaded from the agent's
        :attr:`Agent.store` holds, e.g. to rebuild a model's context."""
        return tuple(update for update, _ in self._history)

    def _record(self, update: Any, v1_content: Sequence[Any] | None = None) -> None:
        """Keep one canonical update in the history (and the agent's store)."""
        self._history.append((update, v1_content))
        self.updated_at = _now()
        self._activity = next(_ACTIVITY)
        store = self._agent.store
        if store is not None and self._log is not None:
            store._record(self._log, _stored_form(update, v1_content))

    def _record_prompt(self, prompt: Sequence[Any]) -> None:
        """Keep the ``session/prompt`` line in the agent's store (its title and prompt count)."""
        store = self._agent.store
        if store is not None and self._log is not None:
            params = {"sessionId": self.id, "prompt": [converter.unstructure(b) for b in prompt]}
            store._record_prompt(
                self._log, orjson.dumps({"jsonrpc": "2.0", "method": "session/prompt", "params": params})
            )

    async def _send(self, update: Any, v1_content: Sequence[Any] | None = None) -> None:
        """Send one canonical update to the attached connection and keep it in the history
        (``state_update`` s are the connection's, not the conversation's: not kept)."""
        if not isinstance(update, _STATES):
            self._record(update, v1_content)
        await self._wire.update(self.id, update, v1_content)

    def config_options(self) -> list[v2.SessionConfigOption]:
        """The agent's options for this session with this session's values (v2 objects)."""
        out: list[v2.SessionConfigOption] = []
        for option in self._agent.config_options(self):
            current = self.config.get(option.config_id, option.current)
            description = UNSET if option.description is None else option.description
            category = UNSET if option.category is None else option.category
            if option.choices:
                choices = [
                    v2.SessionConfigSelectOption(
                        value=c.value, name=c.name, description=UNSET if c.description is None else c.description
                    )
                    for c in option.choices
                ]
                out.append(
                    v2.SelectSessionConfigOption(
                        config_id=option.config_id,
                        name=option.name,
                        description=description,
                        category=category,
                        current_value=str(current),
                        options=choices,
                    )
                )
            else:
                out.append(
                    v2.BooleanSessionConfigOption(
                        config_id=option.config_id,
                        name=option.name,
                        description=description,
                        category=category,
                        current_value=bool(current),
                    )
                )
        return out

    def _config_changed(self) -> v2.ConfigOptionUpdateSessionUpdate:
        update = v2.ConfigOptionUpdateSessionUpdate(config_options=self.config_options())
        self._record(update)
        return update

    async def set_config(self, config_id: str, value: str | bool) -> None:
        """The agent changes an option's value itself (rows L10, L12): ``config_option_update``
        with every option (both versions); v1 also ``current_mode_update`` when the mode option
        changed, keeping v1's modes in sync.  Raises ``KeyError`` for an option
        :meth:`Agent.config_options` does not list."""
        if config_id not in {o.config_id for o in self._agent.config_options(self)}:
            raise KeyError(f"{config_id!r} is not one of this session's config options")
        self.config[config_id] = value
        await self._wire.update(self.id, self._config_changed())

    @property
    def roots(self) -> tuple[str, ...]:
        """``cwd`` then ``additional_directories``: the directories the session may use."""
        return (self.cwd, *self.additional_directories)

    @property
    def files(self) -> SessionFiles:
        """Text files of the session (:class:`SessionFiles`): the v1 client's (its unsaved buffers)
        when it offered them, else this process's within :attr:`roots` (row L16)."""
        return SessionFiles(self)

    def client_fs(self) -> ClientFiles:
        """The v1 client's file system (``fs/read_text_file``, ``fs/write_text_file``).  Raises
        :class:`VersionError` on v2, which has none (row L15; migration.mdx § Client file system
        and terminal execution removed): use :attr:`files`, or an MCP server of the client."""
        if self.protocol_version >= 2:
            raise VersionError(
                self.protocol_version,
                "fs/read_text_file",
                "migration.mdx § Client file system and terminal execution removed: read the file yourself "
                "(session.files) or ask the client for an MCP server",
            )
        return ClientFiles(self)

    def client_terminal(self) -> ClientTerminals:
        """The v1 client's terminals (``terminal/*``: :meth:`ClientTerminals.open`).  Raises
        :class:`VersionError` on v2, which has none (row L15): run the command yourself
        (:meth:`ToolCall.run`, shown to the client as a display terminal)."""
        if self.protocol_version >= 2:
            raise VersionError(
                self.protocol_version,
                "terminal/create",
                "migration.mdx § Client file system and terminal execution removed: run it yourself "
                "(ToolCall.run shows it as an agent-owned display terminal)",
            )
        return ClientTerminals(self)

    def start_soon(self, async_fn: Callable[..., Awaitable[object]], *args: Any, name: str | None = None) -> None:
        """Run ``await async_fn(*args)`` in the background for this session (e.g. its MCP servers,
        a watcher): a task of the connection the session is attached to, cancelled when the session
        is closed (``session/close``, before :meth:`Agent.close_session`) or deleted, when a client
        loads or resumes it on another connection, and when that connection ends.  An exception it
        raises is logged, not raised into the connection.  Raises ``RuntimeError`` when the
        connection is closed."""
        scope = trio.CancelScope()
        label = name or f"session {self.id}: {getattr(async_fn, '__qualname__', 'background task')}"

        async def run() -> None:
            try:
                with scope:
                    await async_fn(*args)
            except Exception:
                log.exception("%s raised", label)
            finally:
                self._background.discard(scope)

        self._wire.conn.start_soon(run, name=label)
        self._background.add(scope)

    def _stop_background(self) -> None:
        """Cancel the :meth:`start_soon` tasks (they end at their next checkpoint)."""
        for scope in list(self._background):
            scope.cancel()
        self._background.clear()

    async def say(self, content: ContentLike) -> None:
        """An agent message outside any turn (v2: background output; v1: a chunk the client shows
        in the session): ``agent_message_chunk`` with a message id of its own."""
        await self._send(v2.AgentMessageChunkSessionUpdate(message_id=_new_id("msg"), content=_block(content)))

    async def set_title(self, title: str | None) -> None:
        """Set the session's title (``session_info_update``, both versions; row L13)."""
        self.title = title
        await self._send(v2.SessionInfoUpdateSessionUpdate(title=title))


class ClientFiles:
    """The v1 client's file system for one session (``fs/*``; file-system.mdx): the client's view,
    unsaved editor buffers included.  Calls the client did not offer raise
    :class:`~acp_trio.CapabilityError` (nothing sent)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._client = v1.ClientPeer(session._wire.conn)

    async def read_text(self, path: str, *, line: int | None = None, limit: int | None = None) -> str:
        """``fs/read_text_file``: the text of ``path`` (absolute), from 1-based ``line``, at most
        ``limit`` lines.  Raises the client's :class:`~acp_trio.RequestError` (-32002: missing)."""
        request = v1.ReadTextFileRequest(
            session_id=self._session.id,
            path=path,
            line=UNSET if line is None else line,
            limit=UNSET if limit is None else limit,
        )
        return (await self._client.fs_read_text_file(request)).content

    async def write_text(self, path: str, text: str) -> None:
        """``fs/write_text_file``: replace (or create) ``path`` (absolute) with ``text``."""
        request = v1.WriteTextFileRequest(session_id=self._session.id, path=path, content=text)
        await self._client.fs_write_text_file(request)


class ClientTerminals:
    """The v1 client's terminals for one session (terminals.mdx)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def open(
        self, command: str, *, args: Sequence[str] = (), cwd: str | None = None, output_byte_limit: int | None = None
    ) -> AbstractAsyncContextManager[TerminalHandle]:
        """``async with session.client_terminal().open("pytest", args=["-q"]) as term:`` a terminal the
        client runs (``terminal/create``), released on leaving (``acp_trio.agent_terminal.open_terminal``).
        Raises :class:`~acp_trio.CapabilityError` when the client did not offer ``terminal``."""
        return open_terminal(
            self._session._wire.conn,
            self._session.id,
            command,
            args=args,
            cwd=cwd,
            output_byte_limit=output_byte_limit,
        )


class _Missing:
    pass


_RAISE: Any = _Missing()
MAX_READ_BYTES = 16 * 1024 * 1024
"""Bytes :class:`SessionFiles` reads from a local file at most (larger: ``OSError``)."""


class SessionFiles:
    """A session's text files (row L16), the same call on both versions: on v1 through the client
    (``fs/read_text_file`` / ``fs/write_text_file``, so unsaved editor buffers count) when it
    offered that method, else this process's files, which must lie within the session's
    :attr:`Session.roots` (``cwd`` and ``additionalDirectories``; the ``acp_trio.fs`` rules:
    symlinks resolved, atomic writes).  UTF-8 text.

    Errors: a path outside the roots raises ``PermissionError`` naming them; a missing file
    ``FileNotFoundError`` (or the ``missing`` value given to :meth:`read_text`); a relative path
    ``ValueError``; the client's answers other than "not found" its :class:`~acp_trio.RequestError`.
    """

    def __init__(self, session: Session) -> None:
        self._session = session

    async def read_text(self, path: str, *, missing: Any = _RAISE) -> Any:
        """The text of ``path`` (absolute); ``missing``: returned instead of raising
        ``FileNotFoundError`` when there is no such file (``missing=None``)."""
        session = self._session
        if session.client.offers_files():
            try:
                return await ClientFiles(session).read_text(path)
            except RequestError as exc:
                if exc.code == -32002 and missing is not _RAISE:
                    return missing
                raise
        try:
            return await trio.to_thread.run_sync(_read_local, path, session.roots)
        except FileNotFoundError:
            if missing is _RAISE:
                raise
            return missing

    async def write_text(self, path: str, text: str) -> None:
        """Replace (or create, with missing parent directories) ``path`` (absolute) with ``text``."""
        session = self._session
        if session.client.offers_files(write=True):
            await ClientFiles(session).write_text(path, text)
            return
        await trio.to_thread.run_sync(_write_local, path, session.roots, text)


def _detail(exc: fs.FsError) -> str:
    data = exc.data
    return str(data.get("detail")) if isinstance(data, dict) else str(exc)


def _local_error(exc: fs.FsError, path: str, roots: Sequence[str]) -> Exception:
    if isinstance(exc, fs.PathOutsideRoots):
        return PermissionError(f"{path} is outside the session's directories {list(roots)}")
    if isinstance(exc, fs.FsNotFound):
        return FileNotFoundError(f"{path}: no such file")
    if isinstance(exc, fs.InvalidPath):
        return ValueError(f"{path}: {_detail(exc)}")
    return OSError(_detail(exc))


def _read_local(path: str, roots: Sequence[str]) -> str:
    try:
        resolved = fs.resolve_in_roots(path, roots)
    except fs.FsError as exc:
        raise _local_error(exc, path, roots) from None
    with open(resolved, "rb") as f:
        data = f.read(MAX_READ_BYTES + 1)
    if len(data) > MAX_READ_BYTES:
        raise OSError(f"{path} is larger than {MAX_READ_BYTES} bytes")
    return data.decode("utf-8")


def _write_local(path: str, roots: Sequence[str], text: str) -> None:
    try:
        fs._write_atomic(path, roots, text.encode("utf-8"), False, MAX_READ_BYTES)
    except fs.FsError as exc:
        raise _local_error(exc, path, roots) from None


_STATES = (
    v2.RunningStateUpdateSessionUpdate,
    v2.IdleStateUpdateSessionUpdate,
    v2.RequiresActionStateUpdateSessionUpdate,
)


class Turn:
    """One prompt turn of ``session``: ``prompt`` (v2 content blocks; v1 ones converted), ``text``
    (its text blocks joined), ``user_message_id`` (v2: the receipt's; v1: generated, never sent)."""

    def __init__(self, session: Session, prompt: list[v2.ContentBlock], user_message_id: str) -> None:
        self.session = session
        self.prompt = prompt
        self.text = "".join(b.text for b in prompt if isinstance(b, v2.TextContentBlock))
        self.user_message_id = user_message_id
        self._cancel = trio.Event()
        self._message: tuple[str, str] | None = None  # (kind, messageId) of the message being streamed
        self._tools = 0
        self._plans = 0

    @property
    def cancelled(self) -> bool:
        """Whether ``session/cancel`` (or ``session/close``) arrived for this turn."""
        return self._cancel.is_set()

    async def _send(self, update: Any, v1_content: Sequence[Any] | None = None) -> None:
        # a cancelled turn stops at its next output, even where sending would not reach a checkpoint
        await trio.lowlevel.checkpoint_if_cancelled()
        await self.session._send(update, v1_content)

    def _message_id(self, kind: str) -> str:
        if self._message is None or self._message[0] != kind:
            self._message = (kind, _new_id("msg"))
        return self._message[1]

    def new_message(self) -> None:
        """The next :meth:`say` or :meth:`think` starts a new message (a new ``messageId``)."""
        self._message = None

    async def say(self, content: ContentLike) -> None:
        """Stream ``content`` (a ``str`` is a text block) as part of the agent's current message:
        ``agent_message_chunk`` in both versions, with the message's ``messageId`` (rows T5)."""
        update = v2.AgentMessageChunkSessionUpdate(message_id=self._message_id("agent"), content=_block(content))
        await self._send(update)

    async def think(self, content: ContentLike) -> None:
        """Stream ``content`` as the agent's current thought (``agent_thought_chunk``, both versions; T6)."""
        update = v2.AgentThoughtChunkSessionUpdate(message_id=self._message_id("thought"), content=_block(content))
        await self._send(update)

    async def tool(
        self,
        title: str,
        *,
        kind: str = "other",
        locations: Sequence[str] = (),
        status: str = "pending",
        raw_input: Any = UNSET,
        tool_call_id: str | None = None,
        content: Sequence[ToolContentLike] = (),
    ) -> ToolCall:
        """Report a new tool call (v1 ``tool_call``, v2 the first ``tool_call_update`` of its id;
        row T8) and return it.  ``locations``: absolute paths; ``raw_input``: JSON."""
        self._tools += 1
        self._message = None
        call = ToolCall(self, tool_call_id or f"call_{self._tools}_{uuid.uuid4().hex[:8]}")
        v2_content, v1_content = _tool_content(content) if content else (UNSET, None)
        update = v2.ToolCallUpdateSessionUpdate(
            tool_call_id=call.tool_call_id,
            title=title,
            kind=kind,
            status=status,
            content=v2_content,
            locations=[v2.ToolCallLocation(path=p) for p in locations] if locations else UNSET,
            raw_input=raw_input,
        )
        await self._send(update, v1_content)
        call.status = status
        call.title = title
        if not isinstance(v2_content, UnsetType):
            call.content = tuple(v2_content)
        return call

    async def plan(self, entries: Sequence[PlanEntry | str], *, plan_id: str | None = None) -> Plan:
        """Publish a plan (v1 ``plan``, v2 ``plan_update``; row T20) and return it; a ``str`` is a
        pending entry."""
        self._plans += 1
        self._message = None
        plan = Plan(self, plan_id or f"plan_{self._plans}_{uuid.uuid4().hex[:8]}")
        await plan.set(entries)
        return plan

    async def usage(self, used: int, size: int, *, cost: Cost | None = None) -> None:
        """Report the context window: ``used`` of ``size`` tokens, and the session's ``cost`` so far
        when given (``usage_update``, the same in both versions; row T21)."""
        spent = UNSET if cost is None else v2.Cost(amount=cost.amount, currency=cost.currency)
        await self._send(v2.UsageUpdateSessionUpdate(used=used, size=size, cost=spent))

    async def _question(self, ask: Callable[[], Awaitable[_T]]) -> _T | None:
        """``await ask()`` shielded from the turn's cancellation, so the client's ``cancelled``
        answer is read (prompt-turn.mdx § Cancellation); ``None`` when, the turn cancelled, no
        answer came within :data:`CANCEL_GRACE` seconds.  What ``ask`` raises comes out as itself
        (not in an exception group)."""
        result: _T | None = None
        error: Exception | None = None
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:

                async def grace() -> None:
                    await self._cancel.wait()
                    await trio.sleep(CANCEL_GRACE)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(grace)
                try:
                    result = await ask()
                except Exception as exc:  # re-raised below, outside the nursery
                    error = exc
                nursery.cancel_scope.cancel()
        if error is not None:
            raise error
        return result

    async def _permission(
        self, title: str, description: str | None, subject: Any, options: Sequence[Option]
    ) -> Decision:
        self._message = None
        request = v2.RequestPermissionRequest(
            session_id=self.session.id,
            title=title,
            description=UNSET if description is None else description,
            subject=subject,
            options=[v2.PermissionOption(option_id=o.option_id, name=o.name, kind=o.kind) for o in options],
        )
        outcome = await self._question(partial(self.session._wire.ask_permission, request))
        if outcome is None or isinstance(outcome, v2.CancelledRequestPermissionOutcome):
            return Decision(None, cancelled=True)
        chosen = getattr(outcome, "option_id", None)
        return Decision(next((o for o in options if o.option_id == chosen), None))  # unknown: not allowed

    async def ask_permission(
        self,
        title: str,
        *,
        description: str | None = None,
        command: Command | None = None,
        options: Sequence[Option] = ALLOW_OR_REJECT,
    ) -> Decision:
        """Ask the user ``title`` (``session/request_permission``) about no tool call (row T17) or
        about running ``command`` (row T16).  v2: ``title``, ``description`` and the subject
        (``command`` or none), ``requires_action`` while it waits and ``running`` once answered.
        v1 asks about tool calls only: a synthetic ``tool_call`` (kind ``execute`` titled with the
        command and ``rawInput {command, cwd}``, else kind ``other`` titled ``title``) is reported
        first, then ``completed`` (allowed), ``failed`` (rejected) or ``failed`` with
        ``_meta["acp-trio/status"] == "cancelled"`` (cancelled).  Returns the :class:`Decision`;
        cancelled by ``session/cancel``: ``Decision(None, cancelled=True)``.  Raises
        :class:`VersionError` on v1 for an option kind v1 lacks."""
        subject: Any = UNSET
        if command is not None:
            subject = v2.CommandRequestPermissionSubject(command=command.command, cwd=command.cwd)
        return await self._permission(title, description, subject, options)

    async def _elicit(self, request: Any, mode: str) -> Elicited:
        wire = self.session._wire
        wire.check_elicitation(mode)
        self._message = None
        answer = await self._question(partial(wire.elicit, request))
        if answer is None:
            return Elicited("cancel")
        action = answer.get("action")
        content = answer.get("content")
        return Elicited(action if isinstance(action, str) else "cancel", content if isinstance(content, dict) else None)

    async def elicit(self, message: str, schema: Mapping[str, Any], *, tool_call_id: str | None = None) -> Elicited:
        """Ask the user to fill in a form (``elicitation/create`` mode ``form``, both versions; row
        T19): ``schema`` is the restricted JSON Schema of ``requestedSchema`` (an object of
        primitive properties; elicitation.mdx).  v2: ``requires_action`` while it waits.  Raises
        :class:`~acp_trio.CapabilityError` (nothing sent) when the client did not offer
        ``elicitation.form``, ``DecodeError`` when ``schema`` is not such a schema."""
        requested = converter.structure(dict(schema), v2.ElicitationSchema)
        request = v2.FormCreateElicitationRequest(
            session_id=self.session.id,
            message=message,
            requested_schema=requested,
            tool_call_id=UNSET if tool_call_id is None else tool_call_id,
        )
        return await self._elicit(request, "form")

    async def elicit_url(self, message: str, url: str, *, tool_call_id: str | None = None) -> Elicited:
        """Send the user to ``url`` (``elicitation/create`` mode ``url``, both versions; row T19);
        the answer says whether they agreed to go.  Raises :class:`~acp_trio.CapabilityError`
        (nothing sent) when the client did not offer ``elicitation.url``."""
        request = v2.UrlCreateElicitationRequest(
            session_id=self.session.id,
            message=message,
            url=url,
            elicitation_id=_new_id("elicit"),
            tool_call_id=UNSET if tool_call_id is None else tool_call_id,
        )
        return await self._elicit(request, "url")


_TOOL_CONTENT = (v2.ContentToolCallContent, v2.DiffToolCallContent, v2.TerminalToolCallContent, v2.ToolCallContentOther)


def _tool_content(content: Sequence[ToolContentLike]) -> tuple[list[v2.ToolCallContent], list[Any] | None]:
    """The v2 items of ``content`` and, when a :class:`Diff` or a v1 client terminal
    (:class:`~acp_trio.agent_terminal.TerminalHandle`) is among them, the exact v1 rendering of the
    whole list (row T13: the v1 hint; a client terminal is v1's ``{type: terminal, terminalId}``,
    terminals.mdx § Embedding in Tool Calls, and exists on v1 connections only)."""
    v2_content: list[v2.ToolCallContent] = []
    for item in content:
        if isinstance(item, Diff):
            v2_content.append(diff_to_v2(item))
        elif isinstance(item, TerminalHandle):
            v2_content.append(v2.TerminalToolCallContent(terminal_id=item.terminal_id))
        elif isinstance(item, _TOOL_CONTENT):
            v2_content.append(item)
        else:
            v2_content.append(v2.ContentToolCallContent(content=_block(item)))
    if not any(isinstance(item, (Diff, TerminalHandle)) for item in content):
        return v2_content, None
    v1_content: list[Any] = []
    for item, c in zip(content, v2_content, strict=True):
        if isinstance(item, Diff):
            v1_content.extend(diff_to_v1(item))
        elif isinstance(item, TerminalHandle):
            v1_content.append(item.content())
        else:
            v1_content.append(tool_content_to_v1(c))
    return v2_content, v1_content


class ToolCall:
    """A tool call of a :class:`Turn`: ``tool_call_id``, and its current ``title``, ``status`` and
    ``content`` (v2 items).  Patch it with :meth:`update`, end it with :meth:`complete` or
    :meth:`fail`, ask about it with :meth:`ask_permission`."""

    def __init__(self, turn: Turn, tool_call_id: str) -> None:
        self.turn = turn
        self.tool_call_id = tool_call_id
        self.title = ""
        self.status = "pending"
        self.content: tuple[v2.ToolCallContent, ...] = ()

    async def update(
        self,
        *,
        status: str | UnsetType = UNSET,
        title: str | UnsetType = UNSET,
        kind: str | UnsetType = UNSET,
        content: Sequence[ToolContentLike] | UnsetType | None = UNSET,
        locations: Sequence[str] | UnsetType | None = UNSET,
        raw_input: Any = UNSET,
        raw_output: Any = UNSET,
    ) -> None:
        """Patch the tool call (``tool_call_update``, both versions; rows T9, T10): fields left
        ``UNSET`` stay as they are, ``None`` clears (``content``, ``locations``), a value replaces
        (``content`` the whole list: a ``str`` or content block is wrapped, a :class:`Diff`
        becomes each version's diff).  Status ``cancelled`` is ``failed`` on v1 (``_meta``
        ``acp-trio/status`` keeps it)."""
        v2_content: Any = content
        v1_content: list[Any] | None = None
        if content is not None and not isinstance(content, UnsetType):
            v2_content, v1_content = _tool_content(content)
        locs: Any = locations
        if locations is not None and not isinstance(locations, UnsetType):
            locs = [v2.ToolCallLocation(path=p) for p in locations]
        update = v2.ToolCallUpdateSessionUpdate(
            tool_call_id=self.tool_call_id,
            status=status,
            title=title,
            kind=kind,
            content=v2_content,
            locations=locs,
            raw_input=raw_input,
            raw_output=raw_output,
        )
        await self.turn._send(update, v1_content)
        if isinstance(status, str):
            self.status = status
        if isinstance(title, str):
            self.title = title
        if content is None:
            self.content = ()
        elif isinstance(v2_content, list):
            self.content = tuple(v2_content)

    async def append(self, item: ToolContentLike) -> None:
        """Add one content item (v2 ``tool_call_content_chunk``; v1: ``tool_call_update`` with the
        whole content so far, row T11).  Raises ``TypeError`` for a :class:`Diff` (give it in
        :meth:`update`'s whole list: v1 needs its exact form there)."""
        (v2_item,), hint = _tool_content([item])
        if hint is not None:
            raise TypeError("append a Diff with update(content=[..., diff]): v1 needs its exact form in the whole list")
        await self.turn._send(v2.ToolCallContentChunkSessionUpdate(tool_call_id=self.tool_call_id, content=v2_item))
        self.content = (*self.content, v2_item)

    async def terminal(self, command: str, *, cwd: str, terminal_id: str | None = None) -> DisplayTerminal:
        """Show a command this agent runs itself as a display terminal in this tool call (row T14):
        v2 ``terminal_update`` (``command``, ``cwd``) and the tool call's ``terminal`` content; v1,
        which has no agent-owned terminal, gets the tool call's content as text: ``$ command``, the
        output and the exit line.  ``cwd``: absolute; ``terminal_id``: the id to use (default a new
        ``term_<hex>``; it must be unique in the session).  Write to it and end it with the returned
        :class:`DisplayTerminal`."""
        terminal = DisplayTerminal(self, terminal_id or _new_id("term"))
        update = v2.TerminalUpdateSessionUpdate(terminal_id=terminal.terminal_id, command=command, cwd=cwd)
        await self.turn._send(update)
        await self.append(v2.TerminalToolCallContent(terminal_id=terminal.terminal_id))
        return terminal

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        timeout: float | None = None,
        max_output: int = 1024 * 1024,
        terminal_id: str | None = None,
    ) -> CompletedCommand:
        """Run ``argv`` (program and arguments, no shell) in ``cwd`` (absolute), its stdout and
        stderr streamed into a :class:`DisplayTerminal` of this tool call (:meth:`terminal`, the
        command shown as the arguments joined by spaces; ``terminal_id`` as there), and report its
        exit there.  ``timeout``
        (seconds): then the process is killed (``SIGKILL``); cancellation kills it too.  Returns
        the :class:`CompletedCommand` (``output``: its first ``max_output`` bytes).  Raises
        ``ValueError`` for a relative ``cwd``, ``OSError`` when the program cannot be started
        (reported as exit code 127 first)."""
        if not os.path.isabs(cwd):
            raise ValueError(f"cwd must be an absolute path, not {cwd!r}")
        terminal = await self.terminal(" ".join(argv), cwd=cwd, terminal_id=terminal_id)
        output = bytearray()
        try:
            process = await trio.lowlevel.open_process(
                list(argv), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError:
            with trio.CancelScope(shield=True):
                await terminal.exit(code=127)
            raise
        timed_out = False
        try:
            assert process.stdout is not None
            with trio.move_on_after(float("inf") if timeout is None else timeout) as scope:
                async for data in process.stdout:
                    if len(output) < max_output:
                        output += data[: max_output - len(output)]
                    await terminal.write(bytes(data))
                await process.wait()
            timed_out = scope.cancelled_caught
        finally:
            with trio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                    await process.wait()
                code = -9 if process.returncode is None else process.returncode
                if code < 0:
                    await terminal.exit(signal=_signal.Signals(-code).name)
                else:
                    await terminal.exit(code=code)
        if code < 0:
            return CompletedCommand(None, _signal.Signals(-code).name, bytes(output), timed_out)
        return CompletedCommand(code, None, bytes(output), timed_out)

    async def complete(
        self, content: Sequence[ToolContentLike] | UnsetType = UNSET, *, raw_output: Any = UNSET
    ) -> None:
        """Status ``completed``, with ``content`` when given."""
        await self.update(status="completed", content=content, raw_output=raw_output)

    async def fail(self, reason: str | None = None, *, raw_output: Any = UNSET) -> None:
        """Status ``failed``, with ``reason`` as its content and ``raw_output`` (any JSON value, e.g.
        the tool's error output) when given."""
        await self.update(status="failed", content=UNSET if reason is None else [reason], raw_output=raw_output)

    async def ask_permission(
        self, title: str, *, description: str | None = None, options: Sequence[Option] = ALLOW_OR_REJECT
    ) -> Decision:
        """Ask the user about this tool call (``session/request_permission``, row T15): v2 with
        ``title``, ``description`` and the tool call as ``subject``, ``requires_action`` while it
        waits and ``running`` once answered; v1 with the tool call only (v1 has no prompt copy: the
        tool call keeps its title, ``title`` and ``description`` go in the request's ``_meta``).
        An outcome this layer does not know is never an approval.  Cancelled by ``session/cancel``
        while it waits: the tool call is reported ``cancelled`` (v1 ``failed``) and
        ``Decision(None, cancelled=True)`` returned; the turn's next checkpoint raises
        ``trio.Cancelled``."""
        subject = v2.ToolCallRequestPermissionSubject(tool_call=v2.ToolCallUpdate(tool_call_id=self.tool_call_id))
        decision = await self.turn._permission(title, description, subject, options)
        if decision.cancelled:
            with trio.CancelScope(shield=True):
                await self.update(status="cancelled")
        return decision


@attrs.frozen
class CompletedCommand:
    """What :meth:`ToolCall.run` ran: ``exit_code`` (``None`` when a signal ended it), ``signal``
    (``"SIGKILL"``...), ``output`` (stdout and stderr interleaved, bytes), ``timed_out``."""

    exit_code: int | None
    signal: str | None
    output: bytes
    timed_out: bool = False


class DisplayTerminal:
    """An agent-owned display terminal of a tool call (v2 migration.mdx § Agent-owned terminal
    display; row T14): :meth:`write` output, :meth:`exit` once.  ``terminal_id``."""

    def __init__(self, call: ToolCall, terminal_id: str) -> None:
        self.call = call
        self.terminal_id = terminal_id
        self.exited = False

    async def write(self, data: bytes) -> None:
        """Append ``data`` (raw bytes) to the output: v2 ``terminal_output_chunk`` (base64); v1 the
        tool call's text again (UTF-8, invalid bytes as U+FFFD)."""
        if data:
            chunk = base64.b64encode(data).decode("ascii")
            await self.call.turn._send(v2.TerminalOutputChunkSessionUpdate(terminal_id=self.terminal_id, data=chunk))

    async def exit(self, *, code: int | None = None, signal: str | None = None) -> None:
        """The command ended with exit ``code`` or ``signal`` (``"SIGTERM"``): v2 ``terminal_update``
        with ``exitStatus``; v1 a last line ``[exit N]`` / ``[SIGTERM]``.  Raises ``RuntimeError``
        the second time."""
        if self.exited:
            raise RuntimeError(f"terminal {self.terminal_id} already exited")
        self.exited = True
        status = v2.TerminalExitStatus(
            exit_code=UNSET if code is None else code, signal=UNSET if signal is None else signal
        )
        await self.call.turn._send(v2.TerminalUpdateSessionUpdate(terminal_id=self.terminal_id, exit_status=status))


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
    """Subclass it and write :meth:`prompt`; one object serves every connection, v1 and v2 alike:
    pass it to ``run_agent_stdio``, ``AcpApp`` or ``open_memory_pair`` (its :meth:`acp_handlers`
    gives them :func:`handlers`).  ``sessions``: the sessions it holds, by id."""

    info: ClassVar[AgentInfo] = AgentInfo(name="acp-trio-agent", version="0")
    versions: ClassVar[tuple[int, ...]] = (1, 2)
    """The protocol versions :meth:`acp_handlers` serves (the feature flag: ``(1,)`` serves v1 only)."""
    mcp_support: ClassVar[McpSupport] = McpSupport()
    """The MCP transports advertised in ``initialize`` (default stdio only, which every v1 agent
    accepts); the servers a client gives are :attr:`Session.mcp_servers`."""
    store: SessionStore | None = None
    """Where the sessions are kept (an ``acp_trio.session_store`` ``SqliteSessionStore``), so they
    outlive the process; ``None`` (default): in this process only.  With a store, each session is
    recorded in the canonical form (v2 updates, a :class:`Diff`'s v1 texts beside its update), and
    ``session/load`` (v1), ``session/resume`` (both; v2 ``replayFrom: {type: start}`` replays),
    ``session/list``, ``session/close`` and ``session/delete`` serve the stored sessions whichever
    version and process made them.  A session recorded by an ``acp_trio.session_store.enable``
    v1 connection (an older store file) is migrated to the canonical form, in place, when first
    loaded.  Acknowledged means stored: the answers to ``session/new``, ``load``, ``resume`` and
    ``prompt`` (v1's answer; v2's receipt and ``idle``) go out once what came before is committed
    (at most :data:`STORE_WAIT` s).  Do not also ``session_store.enable`` the store on the agent's
    connections: that records the same sessions a second time, as v1 lines."""

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}

    def acp_handlers(self) -> dict[ModuleType, Callable[[AgentSideConnection], Any]]:
        """``handlers(self, self.versions)``: what a connection given this agent serves."""
        return handlers(self, self.versions)

    async def new_session(self, session: Session) -> None:
        """Set up a new session; raise ``RequestError`` to refuse it."""

    async def resume_session(self, session: Session) -> None:
        """A client attaches to ``session`` again (v1 ``session/load`` / ``session/resume``, v2
        ``session/resume``), possibly on another connection and protocol version; the layer has
        replayed the history already when asked to.  Raise ``RequestError`` to refuse it."""

    async def close_session(self, session: Session) -> None:
        """The client closed ``session`` (``session/close``), after the layer cancelled its turn;
        the session stays known (its history can be loaded again) until deleted."""

    async def delete_session(self, session_id: str) -> None:
        """The client deleted the session (``session/delete``; also for an id this agent never
        knew, which succeeds: the spec's rule); the layer forgot it already."""

    def config_options(self, session: Session) -> Sequence[ConfigOption]:
        """The session's configuration options (default none); ``current`` is a new session's value."""
        return ()

    async def set_config_option(self, session: Session, config_id: str, value: str | bool) -> None:
        """The client sets ``config_id`` to ``value`` (``session/set_config_option``, and v1's
        ``session/set_mode`` on the mode option: row L11).  Default: accept one of a select's
        choices or a ``bool`` for a boolean option, else raise ``RequestError`` -32602 (nothing
        changes); the layer then stores the value in ``session.config``.  Override to act on it
        (call ``super()`` to keep the checks); raising refuses the change."""
        option = next((o for o in self.config_options(session) if o.config_id == config_id), None)
        if option is None:
            raise RequestError.invalid_params({"path": "$.configId", "detail": f"no config option {config_id!r}"})
        if option.choices:
            values = [c.value for c in option.choices]
            if not isinstance(value, str) or value not in values:
                detail = f"{value!r} is not one of {config_id!r}'s values {values}"
                raise RequestError.invalid_params({"path": "$.value", "detail": detail})
        elif not isinstance(value, bool):
            detail = f"{config_id!r} is a boolean option: give true or false"
            raise RequestError.invalid_params({"path": "$.value", "detail": detail})

    async def prompt(self, turn: Turn) -> StopReason | TurnEnd:
        """Run one prompt turn (required) and return its stop reason (or a :class:`TurnEnd`: the stop
        reason with the turn's usage and ``_meta``): ``end_turn``, ``max_tokens``,
        ``max_turn_requests``, ``refusal`` or ``cancelled`` (v1's answer, v2's ``idle``; a value v1
        lacks is ``end_turn`` there, the original in ``_meta["acp-trio/stopReason"]``: row T2).
        ``session/cancel`` (or ``session/close``) cancels it as trio does: let ``trio.Cancelled``
        out.  Raising ``RequestError``: v1 answers ``session/prompt`` with it; v2 ends the turn
        ``idle`` with ``stopReason: "error"`` (the runtime's -32603; row T3).  Anything else: -32603,
        logged."""
        raise NotImplementedError


# -- the store's records: canonical updates, v1 hints ---------------------------------------------
def _stored_form(update: Any, v1_content: Sequence[Any] | None) -> dict[str, Any]:
    """``update``'s wire JSON, with its exact v1 content under ``_meta[V1_HINT]`` when it has one."""
    wire: dict[str, Any] = converter.unstructure(update)
    if v1_content is not None:
        meta = wire.get("_meta")
        wire["_meta"] = {**(meta if isinstance(meta, dict) else {}), V1_HINT: converter.unstructure(list(v1_content))}
    return wire


def _read_stored(wire: dict[str, Any]) -> tuple[Any, list[Any] | None]:
    """The canonical update and its v1 hint back from :func:`_stored_form`'s JSON."""
    hint: list[Any] | None = None
    meta = wire.get("_meta")
    if isinstance(meta, dict) and V1_HINT in meta:
        meta = dict(meta)
        raw = meta.pop(V1_HINT)
        wire = {**wire, "_meta": meta} if meta else {k: v for k, v in wire.items() if k != "_meta"}
        hint = [_decode(item, v1.ToolCallContent) for item in raw]
    return _decode(wire, v2.SessionUpdate), hint


def _decode(data: Any, target: Any) -> Any:
    """``data`` (wire JSON) as ``target`` (a class or a union of the generated types)."""
    return converter.structure(data, target)


def _canonical_history(found: StoredConversation) -> list[tuple[Any, Sequence[Any] | None]]:
    """The history of a session recorded in the canonical form (v2 lines; prompts are skipped:
    their ``user_message`` updates stand for them).  An update that does not decode is skipped
    with a warning."""
    history: list[tuple[Any, Sequence[Any] | None]] = []
    for kind, message in found.messages():
        update = (message.get("params") or {}).get("update")
        if kind != "update" or not isinstance(update, dict) or update.get("sessionUpdate") == "state_update":
            continue
        try:
            history.append(_read_stored(update))
        except Exception as exc:  # a record this version cannot read: the rest still replays
            log.warning("session %s: a stored update is skipped: %s", found.session.session_id, exc)
    return history


def _v1_history(found: StoredConversation) -> list[tuple[Any, Sequence[Any] | None]]:
    """The canonical history of a session recorded by a v1 connection (``session_store.enable``):
    each prompt a ``user_message``, each v1 update through :class:`~acp_trio._views.V2View`; a v1
    diff is kept beside its update, exact, as the v1 hint."""
    from ._views import V2View

    stored = found.session
    view = V2View()
    modes = converter.structure(stored.modes, v1.SessionModeState) if stored.modes else None
    options: list[Any] = [_decode(o, v1.SessionConfigOption) for o in stored.config_options or []]
    view.seed(modes=modes, config_options=options)
    history: list[tuple[Any, Sequence[Any] | None]] = []
    for kind, message in found.messages():
        params = message.get("params") or {}
        try:
            if kind == "prompt":
                view.new_turn()
                blocks = converter.structure(params, v1.PromptRequest).prompt
                content = [content_to_v2(b) for b in blocks]
                history.append((v2.UserMessageSessionUpdate(message_id=_new_id("msg_user"), content=content), None))
                continue
            update = converter.structure(params, v1.SessionNotification).update
            hint = None
            if isinstance(update, v1.ToolCallSessionUpdate | v1.ToolCallUpdateSessionUpdate):
                items = update.content if isinstance(update.content, list) else []
                if any(isinstance(i, v1.DiffToolCallContent) for i in items):
                    hint = list(items)
            history.extend((one, hint) for one in view.project(update))
        except Exception as exc:  # VersionError, DecodeError: the rest still replays
            log.warning("session %s: a stored v1 %s is skipped: %s", stored.session_id, kind, exc)
    return history


def _rows_of(history: Sequence[tuple[Any, Sequence[Any] | None]]) -> list[tuple[int, bytes]]:
    """The store's rows of a canonical history (one row of update bodies)."""
    from ._store_db import KIND_BODIES

    if not history:
        return []
    return [(KIND_BODIES, b"".join(orjson.dumps(_stored_form(u, h)) + b"\n" for u, h in history))]


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
        session._wire = self.wire
        return session

    async def _new(self, params: Any, mcp_servers: Sequence[Any]) -> Session:
        if not os.path.isabs(params.cwd):
            raise RequestError.invalid_params({"path": "$.cwd", "detail": "cwd must be an absolute path"})
        extra = params.additional_directories
        session = Session(
            self.agent,
            _new_id("sess"),
            params.cwd,
            self.wire,
            additional_directories=extra if isinstance(extra, list) else (),
            mcp_servers=mcp_servers,
        )
        store = self.agent.store
        if store is not None:
            session._log = store._open_canonical(
                session.id, session.cwd, session.additional_directories, _servers_wire(mcp_servers), fresh=True
            )
        try:
            await self.agent.new_session(session)
        except BaseException:
            if store is not None:
                with trio.CancelScope(shield=True):
                    await store.delete(session.id)
            raise
        self.agent.sessions[session.id] = session
        await self._committed("the session/new answer")
        return session

    async def _committed(self, what: str) -> None:
        """Acknowledged means stored: return once everything recorded so far is committed in the
        agent's store (none: at once); at most :data:`STORE_WAIT` s, shielded (a cancelled turn's
        ``idle`` waits too); a store that cannot write is logged, not raised."""
        store = self.agent.store
        if store is None:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(STORE_WAIT) as waited:
            try:
                await store._commit()
            except Exception as exc:
                log.error("%s: sending %s although its records are not committed: %s", store.path, what, exc)
        if waited.cancelled_caught:
            log.error("%s: sending %s although its records are not committed after %g s", store.path, what, STORE_WAIT)

    async def _restore(self, params: Any, mcp_servers: Sequence[Any]) -> None:
        """A load/resume of a session this process does not hold, from the agent's store: the
        session is made from the request and its stored history (a v1 record is migrated to the
        canonical form in place first), so :meth:`_attach` finds it.  Nothing when the agent has
        no store or holds the session; -32002 when the store has none either."""
        store = self.agent.store
        session_id = params.session_id
        if store is None or session_id in self.agent.sessions:
            return
        if not os.path.isabs(params.cwd):
            raise RequestError.invalid_params({"path": "$.cwd", "detail": "cwd must be an absolute path"})
        found = await store.conversation(session_id)
        if found is None:
            raise RequestError.resource_not_found(session_id)
        stored = found.session
        if stored.protocol_version < 2:
            history = _v1_history(found)
            await store._migrate(session_id, _rows_of(history))
        else:
            history = _canonical_history(found)
        session = Session(self.agent, session_id, params.cwd, self.wire, mcp_servers=mcp_servers)
        session._history = history
        session.title = stored.title
        session.updated_at = stored.updated_at
        for option in stored.config_options or []:  # v1 "id", v2 "configId"
            config_id = option.get("configId", option.get("id")) if isinstance(option, dict) else None
            if config_id in session.config and isinstance(option.get("currentValue"), str | bool):
                session.config[config_id] = option["currentValue"]
        for update, _ in history:  # the values as last told, whichever record form said them
            if isinstance(update, v2.ConfigOptionUpdateSessionUpdate):
                for one in update.config_options:
                    config_id, value = getattr(one, "config_id", None), getattr(one, "current_value", None)
                    if config_id in session.config and isinstance(value, str | bool):
                        session.config[config_id] = value
        self.agent.sessions[session_id] = session

    async def _reattach(self, params: Any, mcp_servers: Sequence[Any]) -> Session:
        """:meth:`_attach`, the session restored from the agent's store first when needed, and its
        record reopened there with the request's roots and MCP servers."""
        await self._restore(params, mcp_servers)
        session = self._attach(params, mcp_servers)
        store = self.agent.store
        if store is not None:
            session._log = store._open_canonical(
                session.id,
                session.cwd,
                session.additional_directories,
                _servers_wire(session.mcp_servers),
                fresh=False,
                entry=session._log,
            )
        return session

    def _attach(self, params: Any, mcp_servers: Sequence[Any]) -> Session:
        """The session of a load/resume request, now on this connection with the request's
        ``cwd``, ``additionalDirectories`` and MCP servers; -32002 for an id this agent does not know.
        Its background tasks of another connection are cancelled (:meth:`Session.start_soon`)."""
        held = self.agent.sessions.get(params.session_id)
        if held is not None and held._wire is not self.wire:
            held._stop_background()
        session = self._session(params.session_id)
        if not os.path.isabs(params.cwd):
            raise RequestError.invalid_params({"path": "$.cwd", "detail": "cwd must be an absolute path"})
        session.cwd = params.cwd
        extra = params.additional_directories
        session.additional_directories = tuple(extra) if isinstance(extra, list) else ()
        session.mcp_servers = tuple(mcp_servers)
        return session

    async def _summaries(self, params: Any) -> tuple[list[_Summary], str | None]:
        """The sessions of ``session/list`` (rows L7), most recently active first, ``cwd``
        filtered, and the next page's cursor: with a store, its sessions (pages of its
        ``page_size``); else all this agent holds, one page (-32602 for a cursor: none is given out)."""
        cwd = params.cwd if isinstance(params.cwd, str) else None
        cursor = params.cursor if isinstance(params.cursor, str) else None
        store = self.agent.store
        if store is not None:
            try:
                stored, next_cursor = await store.list_sessions(cwd=cwd, cursor=cursor)
            except ValueError:
                raise RequestError.invalid_params(
                    {"path": "$.cursor", "detail": "not a cursor this agent gave out"}
                ) from None
            summaries = [
                _Summary(s.session_id, s.cwd, s.title, s.updated_at, tuple(s.additional_directories)) for s in stored
            ]
            return summaries, next_cursor
        if cursor is not None:
            raise RequestError.invalid_params({"path": "$.cursor", "detail": "not a cursor this agent gave out"})
        found = sorted(
            (s for s in self.agent.sessions.values() if cwd is None or s.cwd == cwd),
            key=lambda s: s._activity,
            reverse=True,
        )
        return [_Summary(s.id, s.cwd, s.title, s.updated_at, s.additional_directories) for s in found], None

    async def _close(self, session_id: str) -> None:
        """Row L8: the runtime cancelled the session's turn as it read the request; its questions get
        their grace period, then the agent hears of it; the history is kept."""
        await self.session_cancel(_SessionRef(session_id))
        store = self.agent.store
        if session_id not in self.agent.sessions and store is not None and await store.get(session_id) is not None:
            return  # stored, not open in this process: nothing to cancel or tell
        session = self._session(session_id)
        session._stop_background()
        await self.agent.close_session(session)

    async def _delete(self, session_id: str) -> None:
        """Row L9: forget the session (an unknown id succeeds)."""
        await self.session_cancel(_SessionRef(session_id))
        forgotten = self.agent.sessions.pop(session_id, None)
        if forgotten is not None:
            forgotten._stop_background()
        if self.agent.store is not None:
            await self.agent.store.delete(session_id)
        await self.agent.delete_session(session_id)

    async def _set_config(self, session_id: str, config_id: str, value: str | bool) -> Session:
        session = self._session(session_id)
        await self.agent.set_config_option(session, config_id, value)
        session.config[config_id] = value
        update = session._config_changed()  # kept: a replay ends with the current values
        if self.wire.version < 2:  # v1 keeps modes in sync: the client hears current_mode_update too
            await self.wire.update(session.id, update)
        return session

    async def _run_turn(self, turn: Turn) -> StopReason | TurnEnd:
        session = turn.session
        session._turn = turn
        try:
            return await self.agent.prompt(turn)
        finally:
            if session._turn is turn:
                session._turn = None
            await self._committed("the turn's end")  # v1's answer, v2's idle: acknowledged means stored

    async def session_cancel(self, params: Any) -> None:
        """Called by the runtime after it cancelled the session's turn: the turn's questions get
        their grace period (:data:`CANCEL_GRACE`)."""
        session = self.agent.sessions.get(params.session_id)
        if session is not None and session._turn is not None:
            session._turn._cancel.set()


@attrs.frozen
class _Summary:
    """One session of ``session/list``."""

    session_id: str
    cwd: str
    title: str | None
    updated_at: str
    additional_directories: tuple[str, ...]


def _servers_wire(servers: Sequence[Any]) -> list[Any]:
    """MCP server configs (v2 objects) as the store keeps them (wire JSON)."""
    return [converter.unstructure(s) for s in servers]


def _capabilities_v2(mcp: McpSupport) -> v2.AgentCapabilities:
    """What the layer implements (rows L1, L2): embedded context in prompts, the v2 baseline
    (list, resume with replay from start, close), ``delete`` and ``additionalDirectories``, and
    the agent's MCP transports (``session.mcp``, omitted when it accepts none); v1 gets the same
    through ``agent_caps_to_v1`` (``loadSession``, ``sessionCapabilities``, ``mcpCapabilities``)."""
    markers = v2.McpCapabilities(
        stdio=v2.McpStdioCapabilities() if mcp.stdio else UNSET,
        http=v2.McpHttpCapabilities() if mcp.http else UNSET,
    )
    return v2.AgentCapabilities(
        session=v2.SessionCapabilities(
            prompt=v2.PromptCapabilities(embedded_context=v2.PromptEmbeddedContextCapabilities()),
            mcp=markers if mcp.stdio or mcp.http else UNSET,
            delete=v2.SessionDeleteCapabilities(),
            additional_directories=v2.SessionAdditionalDirectoriesCapabilities(),
        )
    )


def _capabilities_v1(mcp: McpSupport) -> v1.AgentCapabilities:
    """:func:`_capabilities_v2` as v1 has it (rows L1, L2), with ``mcpCapabilities.sse`` (v1 only)."""
    caps = agent_caps_to_v1(_capabilities_v2(mcp))
    caps.mcp_capabilities = v1.McpCapabilities(http=mcp.http, sse=mcp.sse)
    return caps


class _V1Surface(_Surface):
    wire: _V1Wire

    def __init__(self, agent: Agent, conn: AgentSideConnection) -> None:
        super().__init__(agent, _V1Wire(conn))

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        info = self.agent.info
        return v1.InitializeResponse(
            protocol_version=1,
            agent_capabilities=_capabilities_v1(self.agent.mcp_support),
            auth_methods=[],
            agent_info=v1.Implementation(name=info.name, version=info.version, title=info.title or UNSET),
        )

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        session = await self._new(params, [mcp_server_to_v2(s) for s in params.mcp_servers])
        return v1.NewSessionResponse(session_id=session.id, **self._setup(session))

    @staticmethod
    def _setup(session: Session) -> dict[str, Any]:
        """v1's ``modes`` and ``configOptions`` of a session setup answer (rows L4, L10)."""
        options = session.config_options()
        if not options:
            return {}
        modes = modes_from_config(options)
        return {"config_options": config_options_to_v1(options), "modes": UNSET if modes is None else modes}

    async def _from_store(self, params: Any, answer: _T, mcp_servers: Sequence[Any]) -> _T:
        """``session/load`` / ``session/resume`` on a connection with a v1 session store
        (``acp_trio.session_store.enable``): the store answered (and replayed) already; the session
        is attached to this connection (made from the request, with the stored config values, when
        this process does not hold it), so prompts can follow; the view learns its in-process
        history silently."""
        session = self.agent.sessions.get(params.session_id)
        if session is None:
            if not os.path.isabs(params.cwd):
                raise RequestError.invalid_params({"path": "$.cwd", "detail": "cwd must be an absolute path"})
            extra = params.additional_directories
            session = Session(
                self.agent,
                params.session_id,
                params.cwd,
                self.wire,
                additional_directories=extra if isinstance(extra, list) else (),
                mcp_servers=mcp_servers,
            )
            stored = getattr(answer, "config_options", None)
            stored = stored if isinstance(stored, list) else []
            for option in stored:
                if option.id in session.config:
                    session.config[option.id] = option.current_value
            self.agent.sessions[session.id] = session
        else:
            session = self._attach(params, mcp_servers)
        view = self.wire.views[session.id] = V1View()
        for update, hint in list(session._history):
            view.project(update, hint)
        await self.agent.resume_session(session)
        return answer

    async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
        """Row L5: replay the session's history (made on either version) through a fresh
        :class:`V1View` that also sends the user's messages, then answer its modes and options.
        On a connection with a v1 session store (``acp_trio.session_store.enable``) the store
        replays and answers (:meth:`_from_store`)."""
        servers = [mcp_server_to_v2(s) for s in params.mcp_servers]
        recorder = self.conn._session_store if self.agent.store is None else None
        if recorder is not None:
            answer: v1.LoadSessionResponse = await recorder.session_load(params)
            return await self._from_store(params, answer, servers)
        session = await self._reattach(params, servers)
        view = self.wire.views[session.id] = V1View(echo_user_messages=True)
        for update, hint in list(session._history):
            for one in view.project(update, hint):
                await self.wire.client.session_update(v1.SessionNotification(session_id=session.id, update=one))
        view.echo_user_messages = False
        await self.agent.resume_session(session)
        await self._committed("the session/load answer")
        return v1.LoadSessionResponse(**self._setup(session))

    async def session_resume(self, params: v1.ResumeSessionRequest) -> v1.ResumeSessionResponse:
        """Row L6: reattach without replay (the view learns the history silently, so later updates
        of its tool calls are ``tool_call_update`` s)."""
        servers = params.mcp_servers if isinstance(params.mcp_servers, list) else []
        recorder = self.conn._session_store if self.agent.store is None else None
        if recorder is not None:
            answer: v1.ResumeSessionResponse = await recorder.session_resume(params)
            return await self._from_store(params, answer, [mcp_server_to_v2(s) for s in servers])
        session = await self._reattach(params, [mcp_server_to_v2(s) for s in servers])
        view = self.wire.views[session.id] = V1View()
        for update, hint in list(session._history):
            view.project(update, hint)
        await self.agent.resume_session(session)
        await self._committed("the session/resume answer")
        return v1.ResumeSessionResponse(**self._setup(session))

    async def session_list(self, params: v1.ListSessionsRequest) -> v1.ListSessionsResponse:
        """Row L7 (``sessionCapabilities.list``); with a v1 session store, the store's sessions."""
        recorder = self.conn._session_store if self.agent.store is None else None
        if recorder is not None:
            listed: v1.ListSessionsResponse = await recorder.session_list(params)
            return listed
        summaries, next_cursor = await self._summaries(params)
        return v1.ListSessionsResponse(
            sessions=[
                v1.SessionInfo(
                    session_id=s.session_id,
                    cwd=s.cwd,
                    title=s.title,
                    updated_at=s.updated_at,
                    additional_directories=list(s.additional_directories) or UNSET,
                )
                for s in summaries
            ],
            next_cursor=UNSET if next_cursor is None else next_cursor,
        )

    async def session_close(self, params: v1.CloseSessionRequest) -> v1.CloseSessionResponse:
        """Row L8 (``sessionCapabilities.close``); with a v1 session store, a stored session this
        process does not hold is closed by the store."""
        recorder = self.conn._session_store if self.agent.store is None else None
        if recorder is not None and params.session_id not in self.agent.sessions:
            closed: v1.CloseSessionResponse = await recorder.session_close(params)
            return closed
        await self._close(params.session_id)
        self.wire.views.pop(params.session_id, None)
        return v1.CloseSessionResponse()

    async def session_delete(self, params: v1.DeleteSessionRequest) -> v1.DeleteSessionResponse:
        """Row L9 (``sessionCapabilities.delete``)."""
        await self._delete(params.session_id)
        self.wire.views.pop(params.session_id, None)
        return v1.DeleteSessionResponse()

    async def session_set_config_option(self, params: Any) -> v1.SetSessionConfigOptionResponse:
        """Row L10 (v1 names: ``configId``, ``value``)."""
        session = await self._set_config(params.session_id, params.config_id, params.value)
        return v1.SetSessionConfigOptionResponse(config_options=config_options_to_v1(session.config_options()))

    async def session_set_mode(self, params: v1.SetSessionModeRequest) -> v1.SetSessionModeResponse:
        """Row L11: v1's ``session/set_mode`` sets the ``category: "mode"`` option; -32602 when the
        session has none or ``modeId`` is not one of its values."""
        session = self._session(params.session_id)
        mode = next((o for o in self.agent.config_options(session) if o.category == "mode" and o.choices), None)
        if mode is None:
            raise RequestError.invalid_params({"path": "$.sessionId", "detail": "this session has no modes"})
        await self._set_config(session.id, mode.config_id, params.mode_id)
        return v1.SetSessionModeResponse()

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        session = self._session(params.session_id)
        prompt = [content_to_v2(block) for block in params.prompt]
        turn = Turn(session, prompt, _new_id("msg_user"))
        session._record_prompt(prompt)
        # row T1: kept as the canonical user_message (V1View sends nothing for it live)
        await session._send(v2.UserMessageSessionUpdate(message_id=turn.user_message_id, content=list(prompt)))
        try:
            ended = await self._run_turn(turn)  # rows T1/T2: the answer ends it
        finally:
            with trio.CancelScope(shield=True), contextlib.suppress(ConnectionClosed):
                await self.wire.flush(session.id)  # held terminal output goes before the answer
        end = ended if isinstance(ended, TurnEnd) else TurnEnd(ended)
        answer = stop_reason_to_v1(end.stop_reason)  # row T2: one v1 lacks is end_turn, the value in _meta
        meta = end.meta_wire()
        if meta is not None:
            answer.meta = {**(answer.meta if isinstance(answer.meta, dict) else {}), **meta}
        return answer


class _V2Surface(_Surface):
    def __init__(self, agent: Agent, conn: AgentSideConnection) -> None:
        super().__init__(agent, _V2Wire(conn))

    async def _idle_of(self, turn: Turn) -> Any:
        """The turn for ``start_turn``: what ends it as the ``idle`` update's fields."""
        return await _idle_fields(await self._run_turn(turn))

    async def initialize(self, params: v2.InitializeRequest) -> v2.InitializeResponse:
        info = self.agent.info
        return v2.InitializeResponse(
            protocol_version=2,
            info=v2.Implementation(name=info.name, version=info.version, title=info.title or UNSET),
            capabilities=_capabilities_v2(self.agent.mcp_support),
            auth_methods=[],
        )

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        servers = params.mcp_servers if isinstance(params.mcp_servers, list) else []
        session = await self._new(params, servers)
        options = session.config_options()
        return v2.NewSessionResponse(session_id=session.id, config_options=options or UNSET)

    async def session_set_config_option(self, params: Any) -> v2.SetSessionConfigOptionResponse:
        """Row L10: the response carries every option with its current value."""
        session = await self._set_config(params.session_id, params.config_id, params.value)
        return v2.SetSessionConfigOptionResponse(config_options=session.config_options())

    async def session_list(self, params: v2.ListSessionsRequest) -> v2.ListSessionsResponse:
        """Row L7 (baseline)."""
        summaries, next_cursor = await self._summaries(params)
        return v2.ListSessionsResponse(
            sessions=[
                v2.SessionInfo(
                    session_id=s.session_id,
                    cwd=s.cwd,
                    title=s.title,
                    updated_at=s.updated_at,
                    additional_directories=list(s.additional_directories) or UNSET,
                )
                for s in summaries
            ],
            next_cursor=UNSET if next_cursor is None else next_cursor,
        )

    async def session_resume(self, params: v2.ResumeSessionRequest) -> v2.ResumeSessionResponse:
        """Rows L5/L6: ``replayFrom: {type: start}`` replays the whole history (made on either
        version) as it was recorded; without ``replayFrom`` nothing is replayed; another cursor
        answers -32602.  Then the current ``state_update`` (``running`` while a turn of the session
        runs, else ``idle``), then the answer with the options."""
        replay = params.replay_from
        if replay is not None and not isinstance(replay, UnsetType) and not isinstance(replay, v2.StartReplayFrom):
            detail = f"replay cursor {getattr(replay, 'type', '?')!r}: this agent replays from start only"
            raise RequestError.invalid_params({"path": "$.replayFrom.type", "detail": detail})
        servers = params.mcp_servers if isinstance(params.mcp_servers, list) else []
        session = await self._reattach(params, servers)
        if isinstance(replay, v2.StartReplayFrom):
            for update, _ in list(session._history):
                await self.wire.update(session.id, update)
        state: Any = v2.RunningStateUpdateSessionUpdate() if session._turn else v2.IdleStateUpdateSessionUpdate()
        await self.wire.update(session.id, state)
        await self.agent.resume_session(session)
        await self._committed("the session/resume answer")
        return v2.ResumeSessionResponse(config_options=session.config_options() or UNSET)

    async def session_close(self, params: v2.CloseSessionRequest) -> v2.CloseSessionResponse:
        """Row L8 (baseline)."""
        await self._close(params.session_id)
        return v2.CloseSessionResponse()

    async def session_delete(self, params: v2.DeleteSessionRequest) -> v2.DeleteSessionResponse:
        """Row L9 (``session.delete``)."""
        await self._delete(params.session_id)
        return v2.DeleteSessionResponse()

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        session = self._session(params.session_id)
        turn = Turn(session, list(params.prompt), _new_id("msg_user"))
        session._record_prompt(params.prompt)
        # row T1: where the user message went, then the receipt; start_turn sends running / idle
        await session._send(v2.UserMessageSessionUpdate(message_id=turn.user_message_id, content=list(params.prompt)))
        await self._committed("the session/prompt receipt")
        self.conn.start_turn(session.id, partial(self._idle_of, turn))
        return v2.PromptResponse(message_id=turn.user_message_id)


async def _idle_fields(ended: StopReason | TurnEnd) -> Any:
    """What ``start_turn`` puts in the ``idle`` update: the stop reason, or with a :class:`TurnEnd`
    its fields (``stopReason``, ``_meta`` with the usage)."""
    if not isinstance(ended, TurnEnd):
        return ended
    fields: dict[str, Any] = {"stopReason": ended.stop_reason}
    meta = ended.meta_wire()
    if meta is not None:
        fields["_meta"] = meta
    return fields


def mode_option(
    choices: Sequence[Choice],
    *,
    current: str | None = None,
    config_id: str = "mode",
    name: str = "Mode",
    description: str | None = None,
) -> ConfigOption:
    """A session's mode option: a select :class:`ConfigOption` of ``category: "mode"`` (so also v1's
    ``modes`` and ``session/set_mode``: row L4; migration.mdx § Session modes become config
    options) whose values are ``choices``, starting at ``current`` (default the first).  Raises
    ``ValueError`` for no choices or a ``current`` that is not one of them."""
    values = [c.value for c in choices]
    if not values:
        raise ValueError("a mode option needs at least one choice")
    start = values[0] if current is None else current
    if start not in values:
        raise ValueError(f"current mode {start!r} is not one of {values}")
    return ConfigOption(
        config_id, name, current=start, choices=tuple(choices), category="mode", description=description
    )


def handlers(agent: Agent, versions: Sequence[int] = (1, 2)) -> dict[ModuleType, Callable[[AgentSideConnection], Any]]:
    """``{variant: factory}`` serving ``agent`` in the protocol ``versions`` given (default both):
    pass it to ``run_agent_stdio``, ``AcpApp``, ``open_memory_pair`` or ``AgentSideConnection``
    (or pass the agent itself: :meth:`Agent.acp_handlers`); the client's ``initialize`` picks the
    version.  Raises ``ValueError`` for a version this layer does not speak."""
    surfaces: dict[int, tuple[ModuleType, Callable[[AgentSideConnection], Any]]] = {
        1: (v1, partial(_V1Surface, agent)),
        2: (v2, partial(_V2Surface, agent)),
    }
    unknown = sorted(set(versions) - set(surfaces))
    if unknown or not versions:
        raise ValueError(f"protocol versions {unknown or list(versions)}: this layer speaks 1 and 2")
    return dict(surfaces[version] for version in sorted(set(versions)))

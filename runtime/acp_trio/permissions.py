"""A client-side broker for ``session/request_permission``: pluggable policies, timeouts, cancellation.

Contract: :class:`PermissionBroker` is a client handler (it has ``session_request_permission``)
that answers every permission request through a *policy* and never leaves one hanging, in either
protocol version: it takes the ``RequestPermissionRequest`` of any schema variant (v1: the tool
call in ``toolCall``; v2: a required ``title``, optional ``description`` and an optional
``subject``, a ``tool_call`` or a ``command``) and answers with the ``RequestPermissionResponse``
of the request's own variant (:data:`PermissionRequest`):

- a **policy** is an async callable ``(request) -> str | None`` returning the ``optionId`` of one
  of ``request.options`` to select, or ``None`` for the ``cancelled`` outcome
  (:data:`PermissionPolicy`; in v1 ``cancelled`` reports a cancelled turn, in v2 it also means
  "dismissed or declined by policy": not approved either way).  Provided: :func:`ask` (an async
  callback, e.g. an editor dialog), :func:`allow_kinds` (an allow-list by the ``ToolKind`` of
  what is asked about, :func:`tool_kind_of`), :func:`deny_all`, :func:`allow_all`;
  :func:`permission_title` and :func:`tool_call_id_of` read a request of either version;
- ``timeout`` (seconds): a policy that has not decided in time is cancelled and ``on_timeout``
  (default :func:`deny_all`) decides instead, within another ``timeout`` seconds, after which the
  broker answers as :func:`deny_all` does;
- the broker never invents an option id: a policy that returns an id not in ``request.options``
  (or anything but a ``str``/``None``), or raises, is logged at ERROR on the
  ``acp_trio.permissions`` logger and the request is answered as :func:`deny_all` would
  (fail closed: ``reject_once``, else ``reject_always``, else ``cancelled``) rather than with a
  JSON-RPC error the agent could not act on;
- every request being decided is listed by :meth:`PermissionBroker.pending` as a
  :class:`PendingPermission`, which a UI may answer directly (:meth:`PendingPermission.select`,
  :meth:`PendingPermission.cancel`); :meth:`PermissionBroker.cancel_session` answers all of a
  session's pending requests ``cancelled``;
- when the client sends ``session/cancel`` (``await conn.agent.session_cancel(...)``), the runtime
  (:class:`~acp_trio.ClientSideConnection`) cancels the broker's handlers of that session and
  answers them, and any new request of that session until its turn ends (v1: the prompt's
  response; v2: the ``idle`` state update), ``cancelled`` (the spec's MUST); on v2 it also answers
  ``cancelled`` to a request the agent withdraws with ``$/cancel_request`` (schema
  ``RequestPermissionOutcome``).  The broker drops such requests from
  :meth:`~PermissionBroker.pending` and records ``decided_by == "session/cancel"``.

Use it as the client, or as its ``session_request_permission``::

    broker = PermissionBroker(allow_kinds({"read", "search"}), timeout=60)

    class Client:
        def __init__(self) -> None:
            self.session_request_permission = broker.session_request_permission

Importing this module does not import ``acp_schema.v2``: a v2 request arrives with its variant loaded.

Sources: ``docs/protocol/v1/tool-calls.mdx`` (Requesting Permission, Permission Options),
``prompt-turn.mdx`` (Cancellation); ``docs/protocol/v2/tool-calls.mdx`` (Requesting Permission),
``v2/migration.mdx`` (Permission requests), ``v2/prompt-lifecycle.mdx`` (Cancellation); schema
``$defs`` (v1 and v2): ``RequestPermissionRequest``, ``RequestPermissionSubject``,
``RequestPermissionOutcome``, ``PermissionOption``, ``PermissionOptionKind``, ``ToolKind``.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Awaitable, Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import trio

from acp_schema import v1

from ._decisions import Decisions, check_seconds

if TYPE_CHECKING:
    from acp_schema import v2

log = logging.getLogger("acp_trio.permissions")

PermissionRequest: TypeAlias = "v1.RequestPermissionRequest | v2.RequestPermissionRequest"
"""A ``session/request_permission`` request of either protocol version (the unstable variants'
requests have the same shape and work too)."""

PermissionOption: TypeAlias = "v1.PermissionOption | v2.PermissionOption"
"""An option a permission request offers (``option_id``, ``name``, ``kind``)."""

PermissionPolicy: TypeAlias = Callable[[Any], Awaitable[str | None]]
"""Decides one permission request: ``async (request) -> optionId | None`` (``request``: a
:data:`PermissionRequest`).

Return the ``optionId`` of one of ``request.options`` to answer ``{"outcome": "selected",
"optionId": ...}``, or ``None`` to answer ``{"outcome": "cancelled"}``.  A policy may take as long
as it likes (the broker's ``timeout`` bounds it, cancelling it with ``trio.Cancelled``)."""

KindLookup: TypeAlias = Callable[[str, str], str | None]
"""``(session_id, tool_call_id) -> ToolKind | None``: the kind of a tool call announced earlier
(e.g. :meth:`acp_trio.session_state.SessionStates.tool_kind`)."""

DecidedBy: TypeAlias = Literal["policy", "timeout", "fallback", "select", "cancel", "session/cancel"]
"""Who decided a request: ``"policy"`` (the broker's policy, in time), ``"timeout"`` (``on_timeout``
after the policy ran out of time), ``"fallback"`` (the deny fallback: a policy raised, returned an
id not offered, or ``on_timeout`` ran out of time too), ``"select"`` / ``"cancel"`` (a
:class:`PendingPermission` answered directly, or :meth:`PermissionBroker.cancel_session`),
``"session/cancel"`` (the handler was cancelled from outside: the client sent ``session/cancel``
and the runtime answered ``cancelled``, or the connection closed)."""

ALLOW_KINDS: tuple[v1.PermissionOptionKind, ...] = ("allow_once", "allow_always")
"""The option kinds that allow, most restrictive first."""
REJECT_KINDS: tuple[v1.PermissionOptionKind, ...] = ("reject_once", "reject_always")
"""The option kinds that reject, most restrictive first."""
COMMAND_TOOL_KIND = "execute"
"""The ``ToolKind`` a v2 ``command`` permission subject counts as (the spec's kind for "running
commands or code"; the subject itself has no kind)."""


def variant_of(message: Any) -> ModuleType:
    """The generated schema variant module (``acp_schema.v1``, ``acp_schema.v2``, ...) ``message``
    (a generated object) belongs to; ``TypeError`` for anything else.  Imports nothing."""
    package = type(message).__module__.rpartition(".")[0]
    module = sys.modules.get(package) if package.startswith("acp_schema.") else None
    if module is None or not isinstance(getattr(module, "PROTOCOL_VERSION", None), int):
        raise TypeError(f"expected an object of a generated acp_schema variant, got {type(message).__name__}")
    return module


def tool_call_id_of(request: PermissionRequest) -> str | None:
    """The ``toolCallId`` of the tool call a permission request is about, or ``None``.

    v1: ``request.toolCall.toolCallId``.  v2: the ``tool_call`` subject's ``toolCall.toolCallId``,
    or a ``command`` subject's optional ``toolCallId``; ``None`` without a subject, for another
    subject type, or when the command names no tool call.
    """
    tool_call = getattr(request, "tool_call", None)
    if tool_call is None:
        subject: Any = getattr(request, "subject", None)
        kind = getattr(subject, "type", None)
        if kind == "tool_call":
            tool_call = subject.tool_call
        elif kind == "command":
            tool_call_id = subject.tool_call_id
            return tool_call_id if isinstance(tool_call_id, str) else None
    tool_call_id = getattr(tool_call, "tool_call_id", None)
    return tool_call_id if isinstance(tool_call_id, str) else None


def permission_title(request: PermissionRequest) -> str:
    """What to show as the question: v2 ``title``; v1 (which has none) the tool call's ``title``,
    else its ``toolCallId``."""
    title = getattr(request, "title", None)
    if isinstance(title, str):
        return title
    tool_call: Any = getattr(request, "tool_call", None)
    if tool_call is not None and isinstance(tool_call.title, str) and tool_call.title:
        return str(tool_call.title)
    return tool_call_id_of(request) or "permission request"


def choose_option(options: Iterable[PermissionOption], kinds: Iterable[str]) -> str | None:
    """The ``optionId`` of the first option whose ``kind`` is ``kinds[0]``, else ``kinds[1]``, ...

    ``options``: the request's ``PermissionOption`` list (earlier options win among equals).
    Returns ``None`` when no option has one of ``kinds``.
    """
    options = list(options)
    for kind in kinds:
        for option in options:
            if option.kind == kind:
                return option.option_id
    return None


def deny_choice(request: PermissionRequest) -> str | None:
    """What :func:`deny_all` answers, synchronously: the ``reject_once`` option, else
    ``reject_always``, else ``None`` (``cancelled``: nothing to reject with)."""
    return choose_option(request.options, REJECT_KINDS)


def deny_all() -> PermissionPolicy:
    """A policy that rejects everything: selects a ``reject_once`` option, else ``reject_always``,
    else answers ``cancelled`` (the request offered no way to reject)."""

    async def deny(request: PermissionRequest) -> str | None:
        return deny_choice(request)

    return deny


def allow_all() -> PermissionPolicy:
    """A policy that allows everything: selects an ``allow_once`` option, else ``allow_always``;
    a request that offers neither is answered as :func:`deny_all` does."""

    async def allow(request: PermissionRequest) -> str | None:
        choice = choose_option(request.options, ALLOW_KINDS)
        return choice if choice is not None else deny_choice(request)

    return allow


def tool_kind_of(request: PermissionRequest, kind_of: KindLookup | None = None) -> str:
    """The ``ToolKind`` of what a request asks about.

    v1: ``request.toolCall.kind``; v2: the ``tool_call`` subject's ``toolCall.kind``, or
    :data:`COMMAND_TOOL_KIND` (``"execute"``) for a ``command`` subject.  When that is not set:
    ``kind_of(session_id, tool_call_id)`` (the kind the earlier tool call update announced) when
    given and known; else ``"other"`` (the spec's default kind, ``tool-calls.mdx``; also a v2
    request without a subject or with an unknown subject type).
    """
    subject: Any = getattr(request, "subject", None)
    if getattr(subject, "type", None) == "command":
        return COMMAND_TOOL_KIND
    tool_call: Any = getattr(request, "tool_call", None)
    if tool_call is None and getattr(subject, "type", None) == "tool_call":
        tool_call = subject.tool_call
    kind = getattr(tool_call, "kind", None)
    if isinstance(kind, str):
        return kind
    tool_call_id = tool_call_id_of(request)
    if kind_of is not None and tool_call_id is not None:
        known = kind_of(request.session_id, tool_call_id)
        if isinstance(known, str):
            return known
    return "other"


def allow_kinds(
    kinds: Iterable[v1.ToolKind | str],
    otherwise: PermissionPolicy | None = None,
    *,
    kind_of: KindLookup | None = None,
) -> PermissionPolicy:
    """A policy that allows tool calls whose ``ToolKind`` is in ``kinds`` and hands the rest to ``otherwise``.

    ``kinds``: e.g. ``{"read", "search"}`` (schema ``$defs/ToolKind``; a missing kind counts as
    ``"other"``).  An allowed kind selects an ``allow_once`` option, else ``allow_always``; a
    request of an allowed kind that offers neither goes to ``otherwise`` too.  ``otherwise``:
    the policy for everything else (default :func:`deny_all`).  ``kind_of``: looks up the kind
    of a tool call the request names without a kind (see :func:`tool_kind_of`), e.g.
    ``SessionStates.tool_kind``.  Raises ``TypeError`` when ``kinds`` is a single string.
    """
    if isinstance(kinds, str):
        raise TypeError(f"allow_kinds takes a collection of ToolKind strings, not the string {kinds!r}")
    allowed = frozenset(kinds)
    fallback = otherwise if otherwise is not None else deny_all()

    async def allow_listed(request: PermissionRequest) -> str | None:
        if tool_kind_of(request, kind_of) in allowed:
            choice = choose_option(request.options, ALLOW_KINDS)
            if choice is not None:
                return choice
        return await fallback(request)

    return allow_listed


def ask(callback: Callable[[Any], Awaitable[str | None]]) -> PermissionPolicy:
    """A policy that asks ``callback`` (e.g. shows the options in an editor dialog).

    ``callback``: ``async (request) -> optionId | None`` (``request``: a :data:`PermissionRequest`;
    ``None``: the user dismissed the request, answered ``cancelled``).  It is cancelled
    (``trio.Cancelled``) when the broker's timeout expires, on ``session/cancel`` or when the
    request is answered otherwise: close the dialog in a ``finally``.  Raises ``TypeError`` when
    ``callback`` is not callable.
    """
    if not callable(callback):
        raise TypeError(f"ask() takes an async callable (request) -> option id | None, got {callback!r}")

    async def asking(request: PermissionRequest) -> str | None:
        return await callback(request)

    return asking


class PendingPermission:
    """One ``session/request_permission`` the broker is deciding (listed by :meth:`PermissionBroker.pending`).

    ``request``: the :data:`PermissionRequest` (v1 or v2).  ``deadline``: the ``trio.current_time()``
    at which the policy's time runs out (``math.inf`` without a timeout).  Once answered,
    ``option_id`` holds the selected ``optionId`` (``None``: ``cancelled``) and ``decided_by``
    says who decided (:data:`DecidedBy`; ``None`` while pending).
    """

    __slots__ = ("_scope", "deadline", "decided_by", "option_id", "request")

    def __init__(self, request: PermissionRequest, deadline: float) -> None:
        self.request = request
        self.deadline = deadline
        self.option_id: str | None = None
        self.decided_by: DecidedBy | None = None
        self._scope = trio.CancelScope()

    @property
    def session_id(self) -> str:
        """The request's ``sessionId``."""
        return self.request.session_id

    @property
    def tool_call_id(self) -> str | None:
        """The ``toolCallId`` of the tool call the request asks about (:func:`tool_call_id_of`;
        ``None`` for a v2 request about no tool call)."""
        return tool_call_id_of(self.request)

    @property
    def title(self) -> str:
        """The question to show (:func:`permission_title`)."""
        return permission_title(self.request)

    @property
    def options(self) -> list[Any]:
        """The options the agent offered (:data:`PermissionOption`: ``option_id``, ``name``, ``kind``)."""
        return list(self.request.options)

    @property
    def answered(self) -> bool:
        """Whether an answer was decided."""
        return self.decided_by is not None

    def select(self, option_id: str) -> bool:
        """Answer with the option ``option_id`` now, whatever the policy is doing (it is cancelled).

        Returns ``False`` (and changes nothing) when the request was already answered.  Raises
        ``ValueError`` when ``option_id`` is not one of :attr:`options`.
        """
        if option_id not in {option.option_id for option in self.request.options}:
            offered = [option.option_id for option in self.request.options]
            raise ValueError(f"option {option_id!r} was not offered by this permission request (offered: {offered})")
        return self._settle(option_id, "select")

    def cancel(self) -> bool:
        """Answer ``cancelled`` now (the policy is cancelled).  ``False`` when already answered."""
        return self._settle(None, "cancel")

    def _settle(self, option_id: str | None, decided_by: DecidedBy) -> bool:
        if self.decided_by is not None:
            return False
        self.option_id = option_id
        self.decided_by = decided_by
        self._scope.cancel()
        return True

    def _cancelled_from_outside(self) -> None:
        self.option_id, self.decided_by = None, "session/cancel"

    def __repr__(self) -> str:
        state = f"decided_by={self.decided_by!r}, option_id={self.option_id!r}" if self.answered else "pending"
        return f"PendingPermission(session_id={self.session_id!r}, tool_call_id={self.tool_call_id!r}, {state})"


class PermissionBroker:
    """Answers ``session/request_permission`` through ``policy`` (a client handler; see the module docstring).

    ``policy``: a :data:`PermissionPolicy` (:func:`ask`, :func:`allow_kinds`, :func:`deny_all`,
    :func:`allow_all` or your own).  ``timeout``: seconds the policy may take (``None``: no
    limit); then ``on_timeout`` (default :func:`deny_all`) decides, within another ``timeout``
    seconds, else the :func:`deny_all` answer is sent.  ``on_answer(entry)``: called (sync) with
    the :class:`PendingPermission` once each request is answered, ``entry.decided_by`` saying how
    (for an audit log or a UI; an exception it raises is logged).  Raises ``TypeError`` for a policy that is
    not callable and ``ValueError`` for a timeout that is not a positive number of seconds.

    One broker serves one connection (pending requests are keyed by session id), whichever
    protocol version it negotiates.
    """

    def __init__(
        self,
        policy: PermissionPolicy,
        *,
        timeout: float | None = None,
        on_timeout: PermissionPolicy | None = None,
        on_answer: Callable[[PendingPermission], object] | None = None,
    ) -> None:
        if not callable(policy):
            raise TypeError(f"policy must be an async callable (request) -> option id | None, got {policy!r}")
        if on_timeout is not None and not callable(on_timeout):
            raise TypeError(f"on_timeout must be an async callable (request) -> option id | None, got {on_timeout!r}")
        if on_answer is not None and not callable(on_answer):
            raise TypeError(f"on_answer must be callable (PendingPermission) -> None, got {on_answer!r}")
        check_seconds("timeout", timeout)
        self.policy = policy
        self.timeout = timeout
        self.on_timeout = on_timeout if on_timeout is not None else deny_all()
        self.on_answer = on_answer
        self._decisions: Decisions[PendingPermission] = Decisions(log)

    # -- the handler -----------------------------------------------------------------------------
    async def session_request_permission(self, params: Any) -> Any:
        """Decide ``params`` (a :data:`PermissionRequest`; see the class docstring) and answer
        ``selected`` or ``cancelled`` with the ``RequestPermissionResponse`` of its variant.

        While deciding, the request is listed by :meth:`pending`.  Cancellation from outside (the
        runtime on ``session/cancel``) propagates: the runtime answers ``cancelled``.
        """
        deadline = math.inf if self.timeout is None else trio.current_time() + self.timeout
        entry = PendingPermission(params, deadline)

        async def decide() -> None:
            entry._settle(*await self._decide(params))

        await self._decisions.run(params.session_id, entry, decide, self.on_answer)
        variant = variant_of(params)
        if entry.option_id is None:
            return variant.RequestPermissionResponse(outcome=variant.CancelledRequestPermissionOutcome())
        outcome = variant.SelectedRequestPermissionOutcome(option_id=entry.option_id)
        return variant.RequestPermissionResponse(outcome=outcome)

    async def _decide(self, request: PermissionRequest) -> tuple[str | None, DecidedBy]:
        if self.timeout is None:
            return await self._consult(self.policy, request, "policy")
        with trio.move_on_after(self.timeout):
            return await self._consult(self.policy, request, "policy")
        log.info(
            "permission request %r of session %r: no decision within %s s, asking on_timeout",
            permission_title(request),
            request.session_id,
            self.timeout,
        )
        with trio.move_on_after(self.timeout):
            return await self._consult(self.on_timeout, request, "timeout")
        log.error(
            "permission request %r of session %r: on_timeout did not decide within %s s either; answering as deny_all",
            permission_title(request),
            request.session_id,
            self.timeout,
        )
        return deny_choice(request), "fallback"

    @staticmethod
    async def _consult(
        policy: PermissionPolicy, request: PermissionRequest, decided_by: DecidedBy
    ) -> tuple[str | None, DecidedBy]:
        try:
            choice: Any = await policy(request)
        except Exception:
            log.exception(
                "permission policy %r raised for %r; answering as deny_all",
                policy,
                permission_title(request),
            )
            return deny_choice(request), "fallback"
        if choice is None:
            return None, decided_by
        if isinstance(choice, str) and any(option.option_id == choice for option in request.options):
            return choice, decided_by
        offered = [option.option_id for option in request.options]
        log.error(
            "permission policy %r chose %r, which is not one of the offered options %r (%r); answering as deny_all",
            policy,
            choice,
            offered,
            permission_title(request),
        )
        return deny_choice(request), "fallback"

    # -- inspection and control ------------------------------------------------------------------
    def pending(self, session_id: str | None = None) -> list[PendingPermission]:
        """The requests being decided, oldest first: of ``session_id``, or of every session (``None``)."""
        return self._decisions.pending(session_id)

    def cancel_session(self, session_id: str) -> int:
        """Answer every pending request of ``session_id`` ``cancelled`` now; returns how many.

        This answers locally; it does not cancel the agent's turn (send ``session/cancel`` for
        that, which makes the runtime answer them ``cancelled`` too).
        """
        return self._decisions.cancel(session_id)

    def cancel_all(self) -> int:
        """Answer every pending request of every session ``cancelled`` now; returns how many."""
        return self._decisions.cancel()


__all__ = [
    "ALLOW_KINDS",
    "COMMAND_TOOL_KIND",
    "REJECT_KINDS",
    "DecidedBy",
    "KindLookup",
    "PendingPermission",
    "PermissionBroker",
    "PermissionOption",
    "PermissionPolicy",
    "PermissionRequest",
    "allow_all",
    "allow_kinds",
    "ask",
    "choose_option",
    "deny_all",
    "deny_choice",
    "permission_title",
    "tool_call_id_of",
    "tool_kind_of",
    "variant_of",
]

"""A client-side broker for ``elicitation/create`` and ``elicitation/complete``: forms, URLs, policies, cancellation.

Contract: :class:`ElicitationBroker` is a client handler (it has ``elicitation_create`` and
``elicitation_complete``) that answers every elicitation an agent sends, in either protocol
version (it answers with the ``CreateElicitationResponse`` of the request's own schema variant),
and never leaves one hanging:

- **modes**: the broker answers the modes it advertises (``modes``, default ``("form", "url")``;
  :meth:`ElicitationBroker.capabilities` builds the ``elicitation`` client capability from them).
  A request in a mode it does not advertise, including a custom or future one, is answered
  JSON-RPC -32602 (the spec's rule), with ``data`` naming the mode and the advertised modes;
- **form mode**: the ``requestedSchema`` is checked before anyone is asked: it must be a valid
  JSON Schema (``jsonschema``'s meta-schema check for its dialect, default 2020-12) and a flat
  form: ``type`` ``"object"``, every property of a type a form can render (``string``,
  ``number``, ``integer``, ``boolean``, ``array``), every ``required`` name a property.  A schema
  that is not is answered -32602 with ``data`` ``{"path": "$.requestedSchema...", "detail": ...}``.
  An accepted answer's ``content`` is checked against the schema before it is sent (each value
  an ``ElicitationContentValue``: string, number, boolean or list of strings; no field the schema
  does not define; the schema's own keywords, and ``format`` as far as ``jsonschema``'s format
  checkers go);
- **hostile schemas**: no schema can stall the client.  Patterns are ECMA-262 regular
  expressions matched with RE2 (``google-re2``) in linear time, never with Python's backtracking
  ``re`` (``^(a+)+$`` against ``"a" * 40 + "!"`` would run for hours); a pattern RE2 cannot
  compile (lookaround, backreferences) and ``patternProperties`` are answered -32602.  The checks
  (the schema with its defaults when the request arrives, then the answer) run in a worker thread
  and end after ``check_timeout`` seconds (default :data:`CHECK_TIMEOUT`); a schema that takes
  longer (``jsonschema`` can be made to work exponentially) is answered -32602 naming the field
  whose default or value was being checked.  See :class:`FormSchema`;
- **URL mode**: ``accept`` means the user consented to open the URL (the policy opens it, or has
  it opened, the broker never does); an accepted URL elicitation waits in
  :meth:`ElicitationBroker.awaiting_completion` until the agent's ``elicitation/complete`` for
  its ``elicitationId`` (:meth:`PendingElicitation.wait_completed`, ``on_complete``), or until its
  session ends or the connection closes (:meth:`ElicitationBroker.drop_session`; the completion
  may come after the turn, so a cancelled turn does not drop it); unknown, dropped or already
  completed ids are ignored, as the spec requires;
- a **policy** is an async callable ``(PendingElicitation) -> ElicitationAnswer | None``
  (:data:`ElicitationPolicy`; ``None``: dismissed, answered ``cancel``).  Provided:
  :func:`decline_all` (the default), :func:`ask_user` (an async callback, e.g. a dialog),
  :func:`accept_defaults` (the form's declared defaults, for runs without a user);
- **failures**: a policy that raises, returns something else, or accepts with content that does
  not fit the schema is logged at ERROR on ``acp_trio.elicitation`` and the request is answered
  ``cancel`` (nothing was validly chosen); ``timeout`` (seconds): a policy that has not decided in
  time is cancelled and ``cancel`` is answered;
- **cancelled with the turn**: when the client sends ``session/cancel`` (or closes or deletes the
  session), the runtime (:class:`~acp_trio.ClientSideConnection`) cancels the broker's handlers
  of that session's elicitations and answers them, and new ones of that session until the turn
  ends, ``{"action": "cancel"}``; ``decided_by`` is then ``"session/cancel"``.  A request-scoped
  elicitation (``requestId``, no session) is not tied to a turn.

Every elicitation being decided is listed by :meth:`ElicitationBroker.pending` as a
:class:`PendingElicitation`, which a UI may answer directly (:meth:`PendingElicitation.accept`,
``decline``, ``cancel``).

The broker checks, it does not render: showing the agent's name, the message, the full URL and
its host, and letting the user review the values are the policy's job (``elicitation.mdx`` "User
interaction requirements", "URL security").  ``jsonschema`` is imported on the first form request.

Sources: ``docs/protocol/v1/elicitation.mdx`` and ``docs/protocol/v2/elicitation.mdx`` (Checking
support, Creating an elicitation, Form mode, URL mode, Responses, URL completion);
``prompt-turn.mdx`` / ``v2/prompt-lifecycle.mdx`` (Cancellation); schema ``$defs``:
``CreateElicitationRequest``, ``ElicitationSchema``, ``ElicitationPropertySchema``,
``CreateElicitationResponse``, ``ElicitationContentValue``, ``CompleteElicitationNotification``,
``ElicitationCapabilities``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs
import trio

from ._core import RequestError
from ._decisions import Decisions, call_hook, check_seconds
from .permissions import variant_of

if TYPE_CHECKING:
    from acp_schema import v1, v2

log = logging.getLogger("acp_trio.elicitation")

Mode: TypeAlias = Literal["form", "url"]
"""An elicitation mode this broker can advertise."""

Action: TypeAlias = Literal["accept", "decline", "cancel"]
"""How an elicitation is answered (``CreateElicitationResponse``'s ``action``)."""

ElicitationRequest: TypeAlias = "v1.CreateElicitationRequest | v2.CreateElicitationRequest"
"""An ``elicitation/create`` request of either protocol version (a form, URL or other mode variant)."""

DecidedBy: TypeAlias = Literal["policy", "timeout", "fallback", "accept", "decline", "cancel", "session/cancel"]
"""Who decided an elicitation: ``"policy"`` (in time), ``"timeout"`` (the policy ran out of time:
``cancel``), ``"fallback"`` (the policy raised, returned something else or content that does not
fit: ``cancel``), ``"accept"`` / ``"decline"`` / ``"cancel"`` (a :class:`PendingElicitation`
answered directly, or :meth:`ElicitationBroker.cancel_session`), ``"session/cancel"`` (cancelled
from outside: the client cancelled the session's turn, or the connection closed)."""

FORM_FIELD_TYPES: frozenset[str] = frozenset({"string", "number", "integer", "boolean", "array"})
"""The property types a form renders (schema ``$defs/ElicitationPropertySchema``)."""

MODES: tuple[Mode, ...] = ("form", "url")
"""Every mode this broker knows."""


class FormSchemaError(ValueError):
    """A ``requestedSchema`` this client cannot render as a form.

    ``path``: a JSONPath into the request params (``"$.requestedSchema.properties.age"``).
    ``detail``: what is wrong.  Answered on the wire as -32602 with both in ``data``.
    """

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


@attrs.frozen
class ElicitationAnswer:
    """What a policy answers: ``action`` (:data:`Action`) and, for ``accept`` in form mode, the
    ``content`` (field name → string, number, boolean or list of strings).

    Build one with :meth:`accept`, :meth:`decline` or :meth:`cancel`.  ``content`` is ignored for
    ``decline``/``cancel`` and for URL mode (the interaction happens out of band).
    """

    action: Action
    content: Mapping[str, Any] | None = None

    @classmethod
    def accept(cls, content: Mapping[str, Any] | None = None) -> ElicitationAnswer:
        """The user submitted ``content`` (form mode) or consented to open the URL (URL mode)."""
        return cls("accept", content)

    @classmethod
    def decline(cls) -> ElicitationAnswer:
        """The user explicitly declined."""
        return cls("decline")

    @classmethod
    def cancel(cls) -> ElicitationAnswer:
        """The user dismissed the interaction without choosing."""
        return cls("cancel")


ElicitationPolicy: TypeAlias = Callable[["PendingElicitation"], Awaitable[ElicitationAnswer | None]]
"""Decides one elicitation: ``async (pending) -> ElicitationAnswer | None`` (``None``: dismissed,
answered ``cancel``).  It may take as long as it likes: the broker's ``timeout``, the turn's
cancellation or a direct answer cancel it (``trio.Cancelled``: close the dialog in a ``finally``)."""


def decline_all() -> ElicitationPolicy:
    """A policy that declines every elicitation (the default)."""

    async def decline(pending: PendingElicitation) -> ElicitationAnswer:
        return ElicitationAnswer.decline()

    return decline


def ask_user(
    callback: Callable[[PendingElicitation], Awaitable[ElicitationAnswer | None]],
) -> ElicitationPolicy:
    """A policy that asks ``callback`` (e.g. renders the form or shows the URL in a dialog).

    ``callback``: ``async (pending) -> ElicitationAnswer | None``; it may check values with
    :meth:`PendingElicitation.validate` and start from :meth:`PendingElicitation.defaults`.
    Raises ``TypeError`` when ``callback`` is not callable.
    """
    if not callable(callback):
        raise TypeError(f"ask_user() takes an async callable (pending) -> ElicitationAnswer | None, got {callback!r}")

    async def asking(pending: PendingElicitation) -> ElicitationAnswer | None:
        return await callback(pending)

    return asking


def accept_defaults(otherwise: ElicitationPolicy | None = None) -> ElicitationPolicy:
    """A policy for runs without a user: accept a form with its declared defaults
    (:meth:`PendingElicitation.defaults`) when they satisfy the schema, else ask ``otherwise``
    (default :func:`decline_all`); URL elicitations go to ``otherwise`` too.

    Accepting without showing the form skips the review the spec asks clients to offer users:
    use it only where the user configured it (tests, headless runs).
    """
    fallback = otherwise if otherwise is not None else decline_all()

    async def defaults(pending: PendingElicitation) -> ElicitationAnswer | None:
        if pending.mode == "form":
            content = pending.defaults()  # the defaults were checked with the schema, off the event loop
            if not await pending.validate_async(content):
                return ElicitationAnswer.accept(content)
        return await fallback(pending)

    return defaults


def _is_content_value(value: Any) -> bool:
    """Whether ``value`` is an ``ElicitationContentValue``: string, number, boolean or list of strings."""
    if isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


CHECK_TIMEOUT = 0.25
"""Seconds a form's checks may take in all: checking its defaults when the request arrives, or
one answer (see :class:`FormSchema`).  Checks that run longer make the schema count as too costly
to check (-32602)."""

PATTERN_WORK_LIMIT = 10_000_000
"""The most work one ``pattern`` check may cost: the string's length in UTF-8 bytes times the size
of the pattern's RE2 program (about 0.1 s when RE2 has to fall back on its slowest matcher).  A
longer string does not fit the field."""

_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("acp_trio_form_check_deadline", default=math.inf)

# keywords whose values are subschemas (JSON Schema drafts 4 to 2020-12): where a keyword can sit
_SUBSCHEMA_KEYWORDS = frozenset(
    {
        "additionalItems", "additionalProperties", "contains", "else", "if", "items", "not",
        "propertyNames", "then", "unevaluatedItems", "unevaluatedProperties",
    }
)  # fmt: skip
_SUBSCHEMA_LIST_KEYWORDS = frozenset({"allOf", "anyOf", "items", "oneOf", "prefixItems"})
_SUBSCHEMA_MAP_KEYWORDS = frozenset(
    {"$defs", "definitions", "dependencies", "dependentSchemas", "patternProperties", "properties"}
)
_ECMA_ESCAPE = re.compile(r"\\(?:u\{([0-9A-Fa-f]{1,6})\}|u([0-9A-Fa-f]{4})|.)", re.DOTALL)


class _TooCostly(Exception):
    """A form check ran past its deadline."""


@functools.lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> Any:
    """The compiled RE2 program of ``pattern``, a JSON Schema ``pattern`` (ECMA-262 syntax).

    RE2 matches in time linear in the text, whatever the pattern: an agent's pattern cannot make
    the client backtrack for hours, as Python's ``re`` does on ``^(a+)+$``.  It has JSON Schema's
    recommended subset of ECMA-262 and more (classes, quantifiers, groups, named groups
    ``(?<name>...)``, ``\\d`` as ASCII digits; ``\\uXXXX`` and ``\\u{X...}`` are translated), but no
    lookaround (``(?=``, ``(?!``, ``(?<=``), no backreferences (``\\1``) and repetition counts up
    to 1000.  Raises ``ValueError`` saying why RE2 cannot compile ``pattern``.
    """
    import re2  # type: ignore[import-untyped]  # google-re2, imported with the first form

    def translate(match: re.Match[str]) -> str:
        code = match.group(1) or match.group(2)
        return match.group(0) if code is None else f"\\x{{{code}}}"

    options = re2.Options()
    options.log_errors = False  # the error is raised, not written to stderr
    options.never_capture = True
    try:
        return re2.compile(_ECMA_ESCAPE.sub(translate, pattern), options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(
            f"this client checks patterns in linear time (RE2: no lookaround, backreferences or "
            f"repetition counts over 1000) and cannot check this one: {reason}"
        ) from None


def _is_regex(instance: object) -> bool:
    """The ``regex`` format: a pattern :func:`compile_pattern` compiles."""
    return not isinstance(instance, str) or compile_pattern(instance) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    """The ``pattern`` keyword, matched with RE2 (:func:`compile_pattern`), not Python's ``re``,
    on strings within :data:`PATTERN_WORK_LIMIT`."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "string"):
        return
    program = compile_pattern(pattern)
    size = len(instance.encode("utf-8", "surrogatepass"))
    most = PATTERN_WORK_LIMIT // max(program.programsize, 1)
    if size > most:
        yield ValidationError(f"{size} bytes is too long to check against {pattern!r} (at most {most})")
    elif program.search(instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _bounded(keyword: Callable[..., Any]) -> Callable[..., Any]:
    """``keyword`` (a jsonschema keyword function) ending the check once its deadline passed."""

    def check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if time.monotonic() > _deadline.get():
            raise _TooCostly
        return keyword(validator, value, instance, schema)

    return check


_bounded_classes: dict[type, Any] = {}


def _bounded_validator_class(base: Any) -> Any:
    """``base`` (a jsonschema validator class) with RE2 ``pattern`` and ``regex`` format and every
    keyword bounded by the check's deadline."""
    bounded = _bounded_classes.get(base)
    if bounded is None:
        import jsonschema

        formats = jsonschema.FormatChecker(())
        formats.checkers = dict(base.FORMAT_CHECKER.checkers)
        formats.checks("regex", raises=ValueError)(_is_regex)
        keywords = {name: _bounded(keyword) for name, keyword in base.VALIDATORS.items()}
        keywords["pattern"] = _bounded(_pattern)
        extend: Any = jsonschema.validators.extend  # untyped in types-jsonschema
        bounded = _bounded_classes[base] = extend(base, keywords, format_checker=formats)
    return bounded


def _subschemas(schema: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``schema`` and every schema inside it (by the keywords that hold subschemas), with their paths."""
    yield path, schema
    for key, value in schema.items():
        if key in _SUBSCHEMA_KEYWORDS and isinstance(value, Mapping):
            yield from _subschemas(value, f"{path}.{key}")
        elif key in _SUBSCHEMA_LIST_KEYWORDS and isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, Mapping):
                    yield from _subschemas(item, f"{path}.{key}[{index}]")
        elif key in _SUBSCHEMA_MAP_KEYWORDS and isinstance(value, Mapping):
            for name, item in value.items():
                if isinstance(item, Mapping):
                    yield from _subschemas(item, f"{path}.{key}.{name}")


class FormSchema:
    """A checked form-mode ``requestedSchema`` (wire JSON) and its validator.

    ``schema``: the schema as a dict.  ``check_timeout``: seconds the checks may take in all, each
    time (default :data:`CHECK_TIMEOUT`).  Raises :class:`FormSchemaError` when it is not a valid
    JSON Schema, not a flat form (see the module docstring), or too costly to check.

    Nothing the agent sends can make a check run long: a ``pattern`` is matched with RE2 in
    linear time (:func:`compile_pattern`: a pattern RE2 cannot compile is refused, path
    ``...pattern``; a string too long for the pattern's :data:`PATTERN_WORK_LIMIT` does not fit),
    ``patternProperties`` (which ``jsonschema`` matches with Python's backtracking
    ``re``) is refused, and every check ends after ``check_timeout`` seconds (a schema can make
    ``jsonschema`` work exponentially, e.g. ``allOf`` of ``$ref`` s doubling at each level).  The
    declared defaults are checked here, so a default that cannot be checked in time is refused
    naming its field.  Construct it and call :meth:`validate` in a worker thread to keep an event
    loop running meanwhile (:class:`ElicitationBroker` does; :meth:`PendingElicitation.validate_async`).
    """

    __slots__ = ("_defaults", "_validator", "check_timeout", "schema")

    def __init__(self, schema: Mapping[str, Any], *, check_timeout: float = CHECK_TIMEOUT) -> None:
        import jsonschema  # the first form elicitation pays for it, not every client

        self.schema = dict(schema)
        self.check_timeout = check_timeout
        fields = self.schema.get("properties")
        for name, field in fields.items() if isinstance(fields, dict) else ():
            kind = field.get("type") if isinstance(field, dict) else None
            if kind not in FORM_FIELD_TYPES:  # first: a custom type would only fail the meta-schema, less clearly
                renders = ", ".join(sorted(FORM_FIELD_TYPES))
                raise FormSchemaError(
                    f"$.requestedSchema.properties.{name}",
                    f"type {kind!r} is not a form field type this client renders ({renders})",
                )
        base: Any = jsonschema.validators.validator_for(self.schema, default=jsonschema.Draft202012Validator)
        validator_class = _bounded_validator_class(base)
        try:
            for path, subschema in _subschemas(self.schema, "$.requestedSchema"):
                if "patternProperties" in subschema:
                    raise FormSchemaError(
                        f"{path}.patternProperties",
                        "a form lists its fields in properties; patternProperties is not one",
                    )
            # the dialect's meta-schema, with the regex format of RE2: every pattern must compile
            base.check_schema(self.schema, format_checker=validator_class.FORMAT_CHECKER)
        except jsonschema.SchemaError as exc:
            where = "".join(f"[{part!r}]" if isinstance(part, int) else f".{part}" for part in exc.absolute_path)
            cause = exc.cause if isinstance(exc.cause, ValueError) else None
            detail = str(cause) if cause is not None else f"not a valid JSON Schema: {exc.message}"
            raise FormSchemaError(f"$.requestedSchema{where}", detail) from None
        except RecursionError:
            raise FormSchemaError("$.requestedSchema", "nested too deeply to check") from None
        if self.schema.get("type", "object") != "object":
            raise FormSchemaError("$.requestedSchema.type", f"a form is an object, not {self.schema.get('type')!r}")
        properties = self.schema.get("properties") or {}
        for name in self.schema.get("required") or ():
            if name not in properties:
                raise FormSchemaError("$.requestedSchema.required", f"{name!r} is required but not a property")
        self._validator = validator_class(self.schema, format_checker=validator_class.FORMAT_CHECKER)
        self._defaults = self._find_defaults()

    @property
    def properties(self) -> dict[str, dict[str, Any]]:
        """The fields: name → property schema (wire JSON), in the schema's order."""
        properties: dict[str, dict[str, Any]] = self.schema.get("properties") or {}
        return properties

    @property
    def required(self) -> list[str]:
        """The names of the required fields."""
        return list(self.schema.get("required") or ())

    def validate(self, content: Any) -> list[str]:
        """What is wrong with ``content`` as the answer to this form (``[]``: nothing).

        Each problem is a sentence that starts with the field's name when it concerns one; an
        answer that could not be checked within ``check_timeout`` seconds gets one saying so.
        """
        try:
            return self.check(content)
        except FormSchemaError as exc:
            where = exc.path.removeprefix("$.requestedSchema").removeprefix(".properties.")
            return [f"{where}: {exc.detail}" if where else exc.detail]

    def check(self, content: Any) -> list[str]:
        """:meth:`validate`, but a check that does not end within ``check_timeout`` seconds raises
        :class:`FormSchemaError` (the path names the field whose value was being checked, else
        ``$.requestedSchema``): the schema is too costly to check, whatever the answer."""
        if not isinstance(content, Mapping):
            return [f"the content must be an object of field values, not {type(content).__name__}"]
        errors: list[str] = []
        for name, value in content.items():
            if not isinstance(name, str) or name not in self.properties:
                errors.append(f"{name!r}: not a field of this form")
            elif not _is_content_value(value):
                errors.append(f"{name}: {value!r} is not a string, number, boolean or list of strings")
        if errors:
            return errors
        with self._deadline():
            for name, value in content.items():  # each field on its own first: a costly check names its field
                with self._blame(f"$.requestedSchema.properties.{name}", "a value of this field"):
                    for _ in self._validator.iter_errors({name: value}):
                        pass
            with self._blame("$.requestedSchema", "an answer"):
                found = list(self._validator.iter_errors(dict(content)))
        for error in sorted(found, key=lambda e: list(map(str, e.path))):
            where = ".".join(str(part) for part in error.absolute_path)
            errors.append(f"{where}: {error.message}" if where else error.message)
        return errors

    def defaults(self) -> dict[str, Any]:
        """The declared ``default`` of each field that has one fitting its own field schema
        (checked once, when the schema was)."""
        return dict(self._defaults)

    def _find_defaults(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        with self._deadline():
            for name, field in self.properties.items():
                default = field.get("default")
                if default is None or not _is_content_value(default):
                    continue
                with self._blame(f"$.requestedSchema.properties.{name}", "its default"):
                    errors = self._validator.iter_errors({name: default})
                    if not [e for e in errors if list(e.absolute_path)[:1] == [name]]:
                        result[name] = default
        return result

    @contextlib.contextmanager
    def _deadline(self) -> Iterator[None]:
        token = _deadline.set(time.monotonic() + self.check_timeout)
        try:
            yield
        finally:
            _deadline.reset(token)

    @contextlib.contextmanager
    def _blame(self, path: str, what: str) -> Iterator[None]:
        """Checks of ``what`` that cannot finish raise :class:`FormSchemaError` at ``path``."""
        import referencing.exceptions

        try:
            yield
        except _TooCostly:
            raise FormSchemaError(
                path, f"checking {what} took longer than {self.check_timeout:g} s: the form is too costly to check"
            ) from None
        except RecursionError:
            raise FormSchemaError(path, f"checking {what} nests too deeply") from None
        except referencing.exceptions.Unresolvable as exc:
            raise FormSchemaError(path, f"checking {what} needs a $ref this client cannot resolve: {exc}") from None


class PendingElicitation:
    """One ``elicitation/create`` the broker is deciding (listed by :meth:`ElicitationBroker.pending`).

    ``request``: the typed request (:data:`ElicitationRequest`).  ``mode``: ``"form"``, ``"url"``
    (or another mode's string).  ``message``: what the agent asks.  ``session_id`` /
    ``tool_call_id`` / ``request_id``: its scope (``None`` when absent).  Form mode: ``form``
    (:class:`FormSchema`) and ``schema`` (its wire JSON).  URL mode: ``url`` and
    ``elicitation_id``.  ``deadline``: the ``trio.current_time()`` at which the policy's time runs
    out (``math.inf`` without a timeout).  Once answered: ``answer`` (:class:`ElicitationAnswer`)
    and ``decided_by`` (:data:`DecidedBy`; ``None`` while pending); an accepted URL elicitation
    then waits for ``completed`` (:meth:`wait_completed`), until its session ends or the
    connection closes (then ``dropped``).
    """

    def __init__(self, request: Any, form: FormSchema | None, deadline: float) -> None:
        self.request = request
        self.form = form
        self.deadline = deadline
        self.answer: ElicitationAnswer | None = None
        self.decided_by: DecidedBy | None = None
        self.completed = False
        self.dropped = False
        self._completed = trio.Event()
        self._scope = trio.CancelScope()

    # -- what is asked ----------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        """The request's ``mode``."""
        return str(self.request.mode)

    @property
    def message(self) -> str:
        """The agent's question."""
        return str(self.request.message)

    @property
    def session_id(self) -> str | None:
        """The ``sessionId`` of a session-scoped elicitation, else ``None``."""
        value = self.request.session_id
        return value if isinstance(value, str) else None

    @property
    def tool_call_id(self) -> str | None:
        """The ``toolCallId`` the elicitation is tied to, else ``None``."""
        value = self.request.tool_call_id
        return value if isinstance(value, str) else None

    @property
    def request_id(self) -> str | int | None:
        """The ``requestId`` of a request-scoped elicitation, else ``None``."""
        value = self.request.request_id
        return value if isinstance(value, str | int) and not isinstance(value, bool) else None

    @property
    def schema(self) -> dict[str, Any] | None:
        """Form mode: the ``requestedSchema`` as wire JSON (``None`` in other modes)."""
        return self.form.schema if self.form is not None else None

    @property
    def url(self) -> str | None:
        """URL mode: the URL to open after the user's consent (``None`` in other modes)."""
        value = getattr(self.request, "url", None)
        return value if isinstance(value, str) else None

    @property
    def elicitation_id(self) -> str | None:
        """URL mode: the ``elicitationId`` a later ``elicitation/complete`` names."""
        value = getattr(self.request, "elicitation_id", None)
        return value if isinstance(value, str) else None

    @property
    def answered(self) -> bool:
        """Whether an answer was decided."""
        return self.decided_by is not None

    # -- checking ---------------------------------------------------------------------------------
    def validate(self, content: Any) -> list[str]:
        """Form mode: what is wrong with ``content`` as the answer (``[]``: it fits); other modes: ``[]``.

        Runs in the calling thread for at most the form's ``check_timeout`` seconds
        (:class:`FormSchema`); :meth:`validate_async` runs it in a worker thread."""
        return self.form.validate(content) if self.form is not None else []

    async def validate_async(self, content: Any) -> list[str]:
        """:meth:`validate` in a worker thread: the event loop runs on meanwhile."""
        return await trio.to_thread.run_sync(self.validate, content, abandon_on_cancel=True)

    def defaults(self) -> dict[str, Any]:
        """Form mode: the fields' declared defaults that fit (to pre-fill a form); other modes: ``{}``."""
        return self.form.defaults() if self.form is not None else {}

    def check(self, answer: Any) -> ElicitationAnswer:
        """``answer`` as it will be sent: a valid :class:`ElicitationAnswer` with ``content`` only
        where it belongs (accepted form).  Raises ``ValueError`` naming the problems otherwise, and
        :class:`FormSchemaError` (a ``ValueError``) when the form is too costly to check
        (:meth:`FormSchema.check`)."""
        if not isinstance(answer, ElicitationAnswer) or answer.action not in ("accept", "decline", "cancel"):
            raise ValueError(f"expected an ElicitationAnswer (accept, decline or cancel), got {answer!r}")
        if answer.action != "accept" or self.form is None:
            return ElicitationAnswer(answer.action)
        content = dict(answer.content) if answer.content is not None else {}
        errors = self.form.check(content)
        if errors:
            raise ValueError("the answer does not fit the requested schema: " + "; ".join(errors))
        return ElicitationAnswer("accept", content)

    # -- answering directly -------------------------------------------------------------------------
    def accept(self, content: Mapping[str, Any] | None = None) -> bool:
        """Answer ``accept`` (with ``content`` in form mode) now; the policy is cancelled.

        Returns ``False`` (and changes nothing) when already answered.  Raises ``ValueError`` when
        ``content`` does not fit the form.
        """
        if self.answered:
            return False
        return self._settle(self.check(ElicitationAnswer.accept(content)), "accept")

    def decline(self) -> bool:
        """Answer ``decline`` now.  ``False`` when already answered."""
        return self._settle(ElicitationAnswer.decline(), "decline")

    def cancel(self) -> bool:
        """Answer ``cancel`` now.  ``False`` when already answered."""
        return self._settle(ElicitationAnswer.cancel(), "cancel")

    def _settle(self, answer: ElicitationAnswer, decided_by: DecidedBy) -> bool:
        if self.decided_by is not None:
            return False
        self.answer = answer
        self.decided_by = decided_by
        self._scope.cancel()
        return True

    def _cancelled_from_outside(self) -> None:
        self.answer, self.decided_by = ElicitationAnswer.cancel(), "session/cancel"

    # -- URL completion ---------------------------------------------------------------------------
    async def wait_completed(self) -> bool:
        """URL mode: wait until the agent sends ``elicitation/complete`` for this elicitation
        (``True``) or it is dropped because its session ended or the connection closed (``False``;
        :meth:`ElicitationBroker.drop_session`).  Does not time out: bound it with ``trio.fail_after``."""
        await self._completed.wait()
        return self.completed

    def _complete(self) -> None:
        self.completed = True
        self._completed.set()

    def _drop(self) -> None:
        self.dropped = True
        self._completed.set()

    def __repr__(self) -> str:
        state = f"decided_by={self.decided_by!r}, answer={self.answer!r}" if self.answered else "pending"
        return f"PendingElicitation(mode={self.mode!r}, session_id={self.session_id!r}, {state})"


class ElicitationBroker:
    """Answers ``elicitation/create`` through ``policy`` and tracks ``elicitation/complete`` (a client handler).

    ``policy``: an :data:`ElicitationPolicy` (default :func:`decline_all`).  ``modes``: the modes
    to advertise and answer (``()``: none: every request is answered -32602, and
    :meth:`capabilities` is ``None``).  ``timeout``: seconds the policy may take (``None``: no
    limit), then ``cancel`` is answered.  ``on_answer(entry)``: called (sync) with the
    :class:`PendingElicitation` once each request is answered; ``on_complete(entry)``: once an
    accepted URL elicitation completes (exceptions they raise are logged).  ``check_timeout``:
    seconds a form's checks may take in all, each time (:class:`FormSchema`; they run in a worker
    thread).  Raises ``TypeError`` for callables that are not, ``ValueError`` for an unknown mode
    or a timeout that is not a positive number of seconds.  See the module docstring for the rules.

    One broker serves one connection, whichever protocol version it negotiates.  Accepted URL
    elicitations wait for their completion until :meth:`drop_session` / :meth:`drop_all`
    (:class:`~acp_trio.StandardClient` calls them when a session ends and when the connection
    closes; wire them to ``conn.sessions.on_end`` yourself when you use the broker alone).
    """

    def __init__(
        self,
        policy: ElicitationPolicy | None = None,
        *,
        modes: Iterable[Mode] = MODES,
        timeout: float | None = None,
        on_answer: Callable[[PendingElicitation], object] | None = None,
        on_complete: Callable[[PendingElicitation], object] | None = None,
        check_timeout: float = CHECK_TIMEOUT,
    ) -> None:
        if policy is not None and not callable(policy):
            raise TypeError(f"policy must be an async callable (pending) -> ElicitationAnswer | None, got {policy!r}")
        for name, hook in (("on_answer", on_answer), ("on_complete", on_complete)):
            if hook is not None and not callable(hook):
                raise TypeError(f"{name} must be callable (PendingElicitation) -> None, got {hook!r}")
        if isinstance(modes, str):
            raise TypeError(f"modes takes a collection of modes, not the string {modes!r}")
        chosen = tuple(dict.fromkeys(modes))
        unknown = [mode for mode in chosen if mode not in MODES]
        if unknown:
            raise ValueError(f"unknown elicitation mode(s) {unknown}: this broker answers {list(MODES)}")
        check_seconds("timeout", timeout)
        check_seconds("check_timeout", check_timeout, optional=False)
        self.policy = policy if policy is not None else decline_all()
        self.check_timeout = check_timeout
        self.modes: tuple[Mode, ...] = chosen
        self.timeout = timeout
        self.on_answer = on_answer
        self.on_complete = on_complete
        self._decisions: Decisions[PendingElicitation] = Decisions(log)
        self._awaiting: dict[str, PendingElicitation] = {}

    # -- capabilities ------------------------------------------------------------------------------
    def capabilities(self, variant: ModuleType) -> Any:
        """The ``ElicitationCapabilities`` of ``variant`` (``acp_schema.v1``, ``acp_schema.v2``, ...)
        advertising :attr:`modes` (``form: {}``, ``url: {}``), or ``None`` when there are none."""
        if not self.modes:
            return None
        markers: dict[str, Any] = {}  # a mode not advertised is left out (not null)
        if "form" in self.modes:
            markers["form"] = variant.ElicitationFormCapabilities()
        if "url" in self.modes:
            markers["url"] = variant.ElicitationUrlCapabilities()
        return variant.ElicitationCapabilities(**markers)

    # -- the handlers ------------------------------------------------------------------------------
    async def elicitation_create(self, params: Any) -> Any:
        """Answer ``params`` (an :data:`ElicitationRequest`) with the ``CreateElicitationResponse``
        of its variant (see the class docstring).

        Raises :class:`~acp_trio.RequestError` -32602 (answered on the wire) for a mode not
        advertised or a form schema that is not one, or that proved too costly to check (its
        defaults, or the answer, took longer than ``check_timeout`` seconds).  Cancellation from
        outside (the runtime on ``session/cancel``) propagates: the runtime answers ``cancel``.
        """
        mode = params.mode
        if mode not in self.modes:
            raise RequestError.invalid_params(
                {
                    "path": "$.mode",
                    "detail": f"this client does not advertise the {mode!r} elicitation mode",
                    "mode": mode,
                    "advertised": list(self.modes),
                }
            )
        form: FormSchema | None = None
        if mode == "form":
            from ._converter import converter

            schema = converter.unstructure(params.requested_schema)
            try:  # in a worker thread: the event loop runs on while an agent's schema is checked
                form = await trio.to_thread.run_sync(
                    functools.partial(FormSchema, schema, check_timeout=self.check_timeout), abandon_on_cancel=True
                )
            except FormSchemaError as exc:
                log.warning("elicitation/create with a form this client cannot render: %s", exc)
                raise RequestError.invalid_params({"path": exc.path, "detail": exc.detail}) from None
        deadline = math.inf if self.timeout is None else trio.current_time() + self.timeout
        entry = PendingElicitation(params, form, deadline)
        refused: list[FormSchemaError] = []

        async def decide() -> None:
            try:
                entry._settle(*await self._decide(entry))
            except FormSchemaError as exc:  # the answer could not be checked: the schema is too costly
                refused.append(exc)
                entry._settle(ElicitationAnswer.cancel(), "fallback")

        await self._decisions.run(entry.session_id, entry, decide, self.on_answer)
        for refusal in refused:
            log.warning("elicitation %r: %s", entry.message, refusal)
            raise RequestError.invalid_params({"path": refusal.path, "detail": refusal.detail})
        final = entry.answer
        assert final is not None
        elicitation_id = entry.elicitation_id
        if final.action == "accept" and mode == "url" and elicitation_id is not None:
            self._awaiting[elicitation_id] = entry
        return self._response(variant_of(params), final)

    async def elicitation_complete(self, params: Any) -> None:
        """``elicitation/complete``: mark the accepted URL elicitation ``params.elicitation_id``
        completed (``on_complete`` runs, :meth:`PendingElicitation.wait_completed` returns);
        unknown or already completed ids are ignored (logged at DEBUG), as the spec requires."""
        entry = self._awaiting.pop(params.elicitation_id, None)
        if entry is None:
            log.debug("ignoring elicitation/complete for unknown or completed id %r", params.elicitation_id)
            return
        entry._complete()
        call_hook(log, "on_complete", self.on_complete, entry)

    @staticmethod
    def _response(variant: ModuleType, answer: ElicitationAnswer) -> Any:
        if answer.action == "accept":
            if answer.content is None:
                return variant.AcceptCreateElicitationResponse()
            return variant.AcceptCreateElicitationResponse(content=dict(answer.content))
        if answer.action == "decline":
            return variant.DeclineCreateElicitationResponse()
        return variant.CancelCreateElicitationResponse()

    async def _decide(self, entry: PendingElicitation) -> tuple[ElicitationAnswer, DecidedBy]:
        if self.timeout is None:
            return await self._consult(entry)
        with trio.move_on_after(self.timeout):
            return await self._consult(entry)
        log.info("elicitation %r: no decision within %s s; answering cancel", entry.message, self.timeout)
        return ElicitationAnswer.cancel(), "timeout"

    async def _consult(self, entry: PendingElicitation) -> tuple[ElicitationAnswer, DecidedBy]:
        try:
            answer: Any = await self.policy(entry)
        except Exception:
            log.exception("elicitation policy %r raised for %r; answering cancel", self.policy, entry.message)
            return ElicitationAnswer.cancel(), "fallback"
        if answer is None:
            return ElicitationAnswer.cancel(), "policy"
        try:
            return await trio.to_thread.run_sync(entry.check, answer, abandon_on_cancel=True), "policy"
        except FormSchemaError:
            raise
        except ValueError as exc:
            log.error("elicitation policy %r answered %r: %s; answering cancel", self.policy, entry.message, exc)
            return ElicitationAnswer.cancel(), "fallback"

    # -- inspection and control ----------------------------------------------------------------------
    def pending(self, session_id: str | None = None) -> list[PendingElicitation]:
        """The elicitations being decided, oldest first: of ``session_id``, or of every session and
        none (``None``)."""
        return self._decisions.pending(session_id)

    def awaiting_completion(self) -> list[PendingElicitation]:
        """The accepted URL elicitations whose ``elicitation/complete`` has not arrived, oldest first."""
        return list(self._awaiting.values())

    def cancel_session(self, session_id: str) -> int:
        """Answer every pending elicitation of ``session_id`` ``cancel`` now; returns how many (the
        agent's turn goes on: send ``session/cancel`` to end it)."""
        return self._decisions.cancel(session_id)

    def cancel_all(self) -> int:
        """Answer every pending elicitation ``cancel`` now; returns how many."""
        return self._decisions.cancel()

    def drop_session(self, session_id: str) -> int:
        """Stop waiting for the completion of the accepted URL elicitations of ``session_id`` (its
        session ended): they leave :meth:`awaiting_completion`, their ``wait_completed`` returns
        ``False`` and a later ``elicitation/complete`` for them is ignored.  Returns how many."""
        return self._drop([key for key, entry in self._awaiting.items() if entry.session_id == session_id])

    def drop_all(self) -> int:
        """:meth:`drop_session` for every session and the request-scoped elicitations too (the
        connection closed).  Returns how many."""
        return self._drop(list(self._awaiting))

    def _drop(self, elicitation_ids: list[str]) -> int:
        for elicitation_id in elicitation_ids:
            self._awaiting.pop(elicitation_id)._drop()
        return len(elicitation_ids)


__all__ = [
    "CHECK_TIMEOUT",
    "FORM_FIELD_TYPES",
    "MODES",
    "PATTERN_WORK_LIMIT",
    "Action",
    "DecidedBy",
    "ElicitationAnswer",
    "ElicitationBroker",
    "ElicitationPolicy",
    "ElicitationRequest",
    "FormSchema",
    "FormSchemaError",
    "Mode",
    "PendingElicitation",
    "accept_defaults",
    "ask_user",
    "compile_pattern",
    "decline_all",
]

"""OpenTelemetry trace context over ACP: ``_meta.traceparent`` / ``tracestate`` / ``baggage``.

Needs the ``otel`` extra (``pip install acp-trio[otel]``, i.e. ``opentelemetry-api``); this module
imports OpenTelemetry when it is imported.  Nothing else in ``acp_trio`` imports it: connections
without ``instrumentation=`` never load OpenTelemetry.

Use::

    from acp_trio import otel

    async with acp_trio.spawn_agent("my-agent", client=MyClient, instrumentation=otel.instrument()) as conn:
        ...

:class:`OpenTelemetryInstrumentation` implements :class:`acp_trio.Instrumentation`:

- Outgoing requests and notifications carry the *current* context, injected by a
  ``TextMapPropagator`` (default: the global one, W3C Trace Context + W3C Baggage unless
  configured otherwise) into ``params["_meta"]``: the root keys ``traceparent``, ``tracestate`` and
  ``baggage`` that the ACP spec reserves for W3C trace context (``docs/protocol/v1/extensibility.mdx``,
  "The ``_meta`` Field"; https://www.w3.org/TR/trace-context/, https://www.w3.org/TR/baggage/).
  No span is started for an outgoing message (the runtime's hook is not called around the wait
  for a response); wrap calls in your own span to see them.
- Every incoming request and notification runs its handler inside a new span, the child of the
  context extracted from its ``_meta`` (a root span when there is none or it is malformed), with
  the extracted baggage current too.  So a handler's own outgoing messages (``session/update``
  sent while handling ``session/prompt``, ``fs/read_text_file`` requests, ...) continue the trace.

Span shape, after the OpenTelemetry RPC / JSON-RPC semantic conventions
(https://opentelemetry.io/docs/specs/semconv/rpc/json-rpc/): the name is the method
(``"session/prompt"``); the kind is ``SERVER`` for a request and ``CONSUMER`` for a notification
(there is no response to serve).  Attributes, set at creation (so samplers see them):
``rpc.system.name`` and ``rpc.system`` = ``"jsonrpc"``, ``rpc.method`` = the method,
``jsonrpc.protocol.version`` and ``rpc.jsonrpc.version`` = ``"2.0"`` (current names and the
names before semantic conventions 1.39 both, for backends on either), ``acp.session.id`` when the params carry a string
``sessionId``.  The ambient span of the handler's task, if any (what was current when the
connection was opened), is added as a link, as the MCP conventions recommend.  See
:class:`OpenTelemetryInstrumentation` for how errors and cancellation end a span.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from contextvars import Token
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import trio
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider

from ._core import INTERNAL_ERROR, RequestError

if TYPE_CHECKING:
    from ._connection import Instrumentation

log = logging.getLogger("acp_trio.otel")

TRACER_NAME = "acp_trio"
"""The instrumentation scope name of the spans this module starts."""

CANCELLED_ATTRIBUTE = "acp.cancelled"
"""Boolean span attribute set to ``True`` when a handler was cancelled (``$/cancel_request`` or the
connection closing); such a span keeps an unset status."""

SESSION_ID_ATTRIBUTE = "acp.session.id"
"""String span attribute: the ``sessionId`` of the incoming params, when they carry one."""

_META = "_meta"
_TRACEPARENT = "traceparent"
_TRACESTATE = "tracestate"


def _qualified_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _only_cancelled(exc: BaseException) -> bool:
    """True for ``trio.Cancelled`` and for exception groups made only of it."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        _matched, rest = exc.split(trio.Cancelled)
        return rest is None
    return False


class _InboundSpan:
    """The context manager :meth:`OpenTelemetryInstrumentation.inbound` returns (one use)."""

    __slots__ = ("_instrumentation", "_kind", "_method", "_params", "_span", "_token")

    def __init__(
        self,
        instrumentation: OpenTelemetryInstrumentation,
        kind: Literal["request", "notification"],
        method: str,
        params: Any,
    ) -> None:
        self._instrumentation = instrumentation
        self._kind = kind
        self._method = method
        self._params = params
        self._span: Span | None = None
        self._token: Token[Context] | None = None

    def __enter__(self) -> Span | None:
        try:
            self._start()
        except Exception:  # never keep the handler from running
            log.debug("could not start a span for %s %r", self._kind, self._method, exc_info=True)
            self._finish()
        return self._span

    def _start(self) -> None:
        inst = self._instrumentation
        params = self._params
        parent = inst.extract(params)
        ambient = trace.get_current_span().get_span_context()
        remote = trace.get_current_span(parent).get_span_context()
        links = [Link(ambient)] if ambient.is_valid and ambient != remote else None
        attributes: dict[str, str] = {
            "rpc.system.name": "jsonrpc",
            "rpc.system": "jsonrpc",
            "rpc.method": self._method,
            "jsonrpc.protocol.version": "2.0",
            "rpc.jsonrpc.version": "2.0",
        }
        if type(params) is dict:
            session_id = params.get("sessionId")
            if type(session_id) is str:
                attributes[SESSION_ID_ATTRIBUTE] = session_id
        kind = SpanKind.SERVER if self._kind == "request" else SpanKind.CONSUMER
        span = inst.tracer.start_span(self._method, context=parent, kind=kind, attributes=attributes, links=links)
        self._span = span
        self._token = otel_context.attach(trace.set_span_in_context(span, parent))

    def _finish(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            otel_context.detach(token)
        span, self._span = self._span, None
        if span is not None:
            span.end()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        span = self._span
        try:
            if span is not None and exc is not None:
                self._record(span, exc)
        except Exception:
            log.debug("could not record the outcome of %s %r", self._kind, self._method, exc_info=True)
        finally:
            self._finish()

    def _record(self, span: Span, exc: BaseException) -> None:
        if _only_cancelled(exc):
            span.set_attribute(CANCELLED_ATTRIBUTE, True)
            return
        span.record_exception(exc)
        if isinstance(exc, RequestError):
            code: int | None = exc.code
            description = exc.message
        else:
            code = INTERNAL_ERROR if self._kind == "request" else None  # what the runtime answers
            description = f"{type(exc).__name__}: {exc}"
        if code is not None:
            span.set_attribute("error.type", str(code))
            span.set_attribute("rpc.response.status_code", str(code))
            span.set_attribute("rpc.jsonrpc.error_code", code)
            span.set_attribute("rpc.jsonrpc.error_message", description)
        else:
            span.set_attribute("error.type", _qualified_name(exc))
        span.set_status(Status(StatusCode.ERROR, description))


class OpenTelemetryInstrumentation:
    """An :class:`acp_trio.Instrumentation` that propagates OpenTelemetry context in ``_meta``.

    Pass it as ``instrumentation=`` to :class:`acp_trio.AgentSideConnection`,
    :class:`acp_trio.ClientSideConnection`, :func:`acp_trio.spawn_agent`,
    :func:`acp_trio.open_memory_pair` (both sides), :func:`acp_trio.run_agent_stdio`.  It keeps no
    per-connection state: one instance may serve many connections.

    ``tracer_provider``: where spans go (default: the global provider, looked up through a proxy,
    so one set later still applies).  ``propagator``: the ``TextMapPropagator`` that writes and
    reads the ``_meta`` keys (default: the global one, ``opentelemetry.propagate.get_global_textmap()``,
    looked up per message).

    Errors and cancellation: when the handler raises, the span records the exception, gets status
    ``ERROR`` and ``error.type``.  For a :class:`acp_trio.RequestError` (and, for a request, any
    other exception, which the runtime answers with -32603) the JSON-RPC error code is recorded as
    ``rpc.jsonrpc.error_code`` (int), ``rpc.response.status_code`` and ``error.type`` (strings),
    the message as ``rpc.jsonrpc.error_message`` and the status description.  For another exception
    in a notification handler ``error.type`` is the exception's qualified class name.  A handler
    cancelled by trio (``$/cancel_request``, the connection closing) ends its span with
    :data:`CANCELLED_ATTRIBUTE` = ``True`` and no error status.  Nothing here raises into the
    connection: a failure to inject, extract or start a span is logged at DEBUG on
    ``acp_trio.otel`` and the message goes out, or the handler runs, untraced.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        propagator: TextMapPropagator | None = None,
    ) -> None:
        self.tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        self.propagator = propagator

    def _propagator(self) -> TextMapPropagator:
        return self.propagator if self.propagator is not None else propagate.get_global_textmap()

    # -- the Instrumentation protocol --------------------------------------------------------------
    def outbound(self, kind: Literal["request", "notification"], method: str, params: Any) -> Any:
        """The params to send: ``params`` with the current context added to its ``_meta``.

        ``params``: the JSON params (dict, list or ``None``).  Returns:

        - a dict: a shallow copy whose ``_meta`` is a copy of the original ``_meta`` (every key kept)
          plus the keys the propagator wrote (``traceparent``, ``tracestate``, ``baggage`` by default);
          the caller's dicts are not mutated;
        - ``None``: ``{"_meta": {...}}`` when something was injected, else ``None``;
        - ``params`` itself when nothing was injected (no current span, no baggage), for list
          (positional) params, and when ``_meta`` is present but not an object.

        A key the caller already put in ``_meta`` wins over the injected one, and when the caller set
        ``traceparent`` the injected ``tracestate`` is dropped too (the two describe one parent): an
        explicit trace context (say, one forwarded from elsewhere) is passed on unchanged, and
        injected ``baggage`` still joins it if the caller set none.  Never raises (on a propagator
        failure, ``params`` is returned unchanged).
        """
        try:
            return self._inject(params)
        except Exception:
            log.debug("could not inject trace context into %s %r", kind, method, exc_info=True)
            return params

    def inbound(
        self, kind: Literal["request", "notification"], method: str, params: Any
    ) -> AbstractContextManager[Span | None]:
        """A context manager that runs the handler of an incoming message in a new span.

        ``kind``/``method``: the message's.  ``params``: its JSON params, as received; the parent
        context is extracted from ``params["_meta"]`` (see :meth:`extract`).  Entering it starts the
        span and makes it (and the extracted baggage) current; ``as`` gives the span (``None`` if it
        could not start).  Leaving it records the outcome (see the class docs) and ends the span.
        Neither entering nor leaving raises, and the handler's exception propagates unchanged.
        """
        return _InboundSpan(self, kind, method, params)

    # -- helpers ---------------------------------------------------------------------------------
    def extract(self, params: Any) -> Context:
        """The context carried by JSON ``params``: what the propagator reads from ``params["_meta"]``.

        Only string values of a ``_meta`` object are read.  Returns an empty ``Context`` (no parent
        span, no baggage) when ``params`` is not an object, ``_meta`` is absent or not an object, or
        the values are malformed (the W3C propagators ignore an invalid ``traceparent``); the
        caller's current context is never mixed in.  Never raises.
        """
        empty = Context()
        meta = params.get(_META) if type(params) is dict else None
        if type(meta) is not dict or not meta:
            return empty
        carrier = {key: value for key, value in meta.items() if type(key) is str and type(value) is str}
        if not carrier:
            return empty
        try:
            return self._propagator().extract(carrier, context=empty)
        except Exception:
            log.debug("ignoring a malformed trace context in _meta: %r", carrier, exc_info=True)
            return empty

    def _inject(self, params: Any) -> Any:
        if params is not None and type(params) is not dict:
            return params  # positional params have no _meta
        meta: Any = params.get(_META) if params is not None else None
        if meta is not None and type(meta) is not dict:
            return params  # a malformed _meta is the caller's: leave it alone
        injected: dict[str, str] = {}
        self._propagator().inject(injected)
        if not injected:
            return params
        if meta:
            if _TRACEPARENT in meta:
                injected.pop(_TRACESTATE, None)
            injected = {key: value for key, value in injected.items() if key not in meta}
            if not injected:
                return params
            new_meta: dict[str, Any] = {**meta, **injected}
        else:
            new_meta = dict(injected)
        if params is None:
            return {_META: new_meta}
        return {**params, _META: new_meta}


def instrument(
    *, tracer_provider: TracerProvider | None = None, propagator: TextMapPropagator | None = None
) -> OpenTelemetryInstrumentation:
    """An :class:`OpenTelemetryInstrumentation`, for ``instrumentation=`` of a connection.

    ``spawn_agent(cmd, client=C, instrumentation=otel.instrument())`` on a client;
    ``run_agent_stdio(A, instrumentation=otel.instrument())`` in an agent.  ``tracer_provider`` /
    ``propagator``: as for :class:`OpenTelemetryInstrumentation` (default: the global ones).
    """
    return OpenTelemetryInstrumentation(tracer_provider=tracer_provider, propagator=propagator)


if TYPE_CHECKING:

    def _conforms(instrumentation: OpenTelemetryInstrumentation) -> Instrumentation:
        return instrumentation  # mypy checks that the class implements the runtime's protocol


__all__ = [
    "CANCELLED_ATTRIBUTE",
    "SESSION_ID_ATTRIBUTE",
    "TRACER_NAME",
    "OpenTelemetryInstrumentation",
    "instrument",
]

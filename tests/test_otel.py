"""Trace context over ACP (``acp_trio.otel``): ``_meta.traceparent`` / ``tracestate`` / ``baggage``.

Spec: ``docs/protocol/v1/extensibility.mdx`` ("The ``_meta`` Field": root keys reserved for W3C
trace context) and W3C Trace Context / Baggage.  Spans go to an ``InMemorySpanExporter`` through a
``TracerProvider`` passed explicitly; the global provider is never set.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import trio
import trio.testing
from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import acp_trio
from acp_schema import v1
from acp_trio import otel

DEADLINE = 30
W3C = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])


class Traces:
    """A provider exporting to memory, an instrumentation using it, and a tracer for the test's own spans."""

    def __init__(self, propagator: TextMapPropagator | None = W3C) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.instrumentation = otel.OpenTelemetryInstrumentation(tracer_provider=self.provider, propagator=propagator)
        self.tracer = self.provider.get_tracer("tests")

    def spans(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.spans(name)
        return span


def traceparent(span: ReadableSpan | trace.Span) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


@contextlib.contextmanager
def with_baggage(**items: str) -> Iterator[None]:
    ctx = otel_context.get_current()
    for key, value in items.items():
        ctx = baggage.set_baggage(key, value, ctx)
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


class Wire:
    """A tap keeping the decoded messages, per direction, of one side."""

    def __init__(self) -> None:
        self.out: list[Any] = []

    def __call__(self, direction: str, line: bytes) -> None:
        if direction == "out":
            self.out.append(orjson.loads(line))

    def sent(self, method: str) -> list[Any]:
        return [m for m in self.out if m.get("method") == method]


class Agent:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.seen: list[dict[str, Any]] = []
        self.prompt_started = trio.Event()

    def _observe(self, params: Any) -> None:
        self.seen.append(
            {
                "span": trace.get_current_span().get_span_context(),
                "user": baggage.get_baggage("user"),
                "meta": params.meta,
            }
        )

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        return v1.InitializeResponse(protocol_version=1, agent_capabilities=v1.AgentCapabilities(load_session=True))

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        self._observe(params)
        chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text="hi"))
        await self.conn.client.session_update(v1.SessionNotification(session_id="s1", update=chunk))
        return v1.NewSessionResponse(session_id="s1")

    async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
        if params.session_id == "missing":
            raise acp_trio.RequestError(acp_trio.RESOURCE_NOT_FOUND, "no such session")
        raise RuntimeError("load exploded")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        if params.session_id == "nursery":
            async with trio.open_nursery() as nursery:  # cancellation arrives as a group through the nursery
                nursery.start_soon(trio.sleep_forever)
                self.prompt_started.set()
        else:
            self.prompt_started.set()
            await trio.sleep_forever()
        return v1.PromptResponse(stop_reason="end_turn")


class Client:
    def __init__(self, conn: acp_trio.ClientSideConnection) -> None:
        self.conn = conn
        self.seen: list[dict[str, Any]] = []
        self.fail = False

    async def session_update(self, params: v1.SessionNotification) -> None:
        self.seen.append(
            {
                "span": trace.get_current_span().get_span_context(),
                "user": baggage.get_baggage("user"),
                "meta": params.meta,
            }
        )
        if self.fail:
            raise ValueError("client handler failed")


async def _init(client_conn: acp_trio.ClientSideConnection) -> None:
    await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))


def _new(cwd: Any, meta: dict[str, Any] | None = None) -> v1.NewSessionRequest:
    if meta is None:
        return v1.NewSessionRequest(cwd=str(cwd), mcp_servers=[])
    return v1.NewSessionRequest(cwd=str(cwd), mcp_servers=[], meta=meta)


# -- through a connection pair ---------------------------------------------------------------------


async def test_handler_spans_continue_the_callers_trace_both_ways(tmp_path: Any) -> None:
    t = Traces()
    agent_wire, client_wire = Wire(), Wire()
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client, instrumentation=t.instrumentation) as (a, c):
            a.connection.tap, c.connection.tap = agent_wire, client_wire
            await _init(c)  # no current span: nothing injected, the handler's span is a root
            with t.tracer.start_as_current_span("caller") as caller:
                new = await c.agent.session_new(_new(tmp_path))
            assert new.session_id == "s1"
    caller_ctx = caller.get_span_context()

    # the wire: the request carries the caller's context; initialize carried none
    assert "_meta" not in client_wire.sent("initialize")[0]["params"]
    assert client_wire.sent("session/new")[0]["params"]["_meta"] == {"traceparent": traceparent(caller)}

    # the agent's handler span: a SERVER child of the caller's span, current while the handler ran
    handler = t.one("session/new")
    assert handler.kind is SpanKind.SERVER
    assert handler.parent is not None and handler.parent.is_remote
    assert (handler.parent.trace_id, handler.parent.span_id) == (caller_ctx.trace_id, caller_ctx.span_id)
    assert handler.context is not None and handler.context.trace_id == caller_ctx.trace_id
    assert a.handler.seen[0]["span"] == handler.context
    assert handler.status.status_code is StatusCode.UNSET
    assert dict(handler.attributes or {}) == {
        "rpc.system.name": "jsonrpc",
        "rpc.system": "jsonrpc",
        "rpc.method": "session/new",
        "jsonrpc.protocol.version": "2.0",
        "rpc.jsonrpc.version": "2.0",
    }
    assert handler.instrumentation_scope is not None and handler.instrumentation_scope.name == "acp_trio"

    # the session/update the handler sent carries the handler's context; the client's span chains to it
    assert agent_wire.sent("session/update")[0]["params"]["_meta"] == {"traceparent": traceparent(handler)}
    update = t.one("session/update")
    assert update.kind is SpanKind.CONSUMER
    assert update.parent is not None and update.parent.span_id == handler.context.span_id
    assert update.context is not None and update.context.trace_id == caller_ctx.trace_id
    assert c.handler.seen[0]["span"] == update.context
    assert (update.attributes or {})["acp.session.id"] == "s1"

    # initialize ran as a root span of its own trace
    init = t.one("initialize")
    assert init.parent is None and init.context is not None and init.context.trace_id != caller_ctx.trace_id


async def test_baggage_crosses_to_the_agent_and_back(tmp_path: Any) -> None:
    t = Traces()
    client_wire = Wire()
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client, instrumentation=t.instrumentation) as (a, c):
            c.connection.tap = client_wire
            await _init(c)
            with with_baggage(user="alice"), t.tracer.start_as_current_span("caller"):
                await c.agent.session_new(_new(tmp_path))
            assert baggage.get_baggage("user") is None  # the test's own context is restored
    assert client_wire.sent("session/new")[0]["params"]["_meta"]["baggage"] == "user=alice"
    assert a.handler.seen[0]["user"] == "alice"  # the agent's handler sees the caller's baggage
    assert c.handler.seen[0]["user"] == "alice"  # and passes it on with its own messages


async def test_existing_meta_keys_are_kept(tmp_path: Any) -> None:
    t = Traces()
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client, instrumentation=t.instrumentation) as (a, c):
            await _init(c)
            meta = {"zed.dev/debugMode": True, "requestId": "r-1"}
            request = _new(tmp_path, meta)
            with t.tracer.start_as_current_span("caller") as caller:
                await c.agent.session_new(request)
    assert request.meta == {"zed.dev/debugMode": True, "requestId": "r-1"}  # not mutated
    assert a.handler.seen[0]["meta"] == {**meta, "traceparent": traceparent(caller)}


async def test_a_malformed_traceparent_is_passed_on_and_tolerated(tmp_path: Any) -> None:
    t = Traces()
    client_wire = Wire()
    explicit = {"traceparent": "00-not-a-trace-context-01", "tracestate": "vendor=x"}
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client, instrumentation=t.instrumentation) as (a, c):
            c.connection.tap = client_wire
            await _init(c)
            with with_baggage(user="bob"), t.tracer.start_as_current_span("caller") as caller:
                new = await c.agent.session_new(_new(tmp_path, explicit))
            assert new.session_id == "s1"  # the handler ran and answered
    # the caller's explicit traceparent (and its tracestate) won; the baggage still joined it
    assert client_wire.sent("session/new")[0]["params"]["_meta"] == {**explicit, "baggage": "user=bob"}
    handler = t.one("session/new")
    assert handler.parent is None  # a new root span ...
    assert handler.context is not None and handler.context.trace_id != caller.get_span_context().trace_id
    assert a.handler.seen[0]["user"] == "bob"  # ... and the rest of _meta still read


async def test_a_request_error_marks_the_span(tmp_path: Any) -> None:
    t = Traces()
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client, instrumentation=t.instrumentation) as (_a, c):
            await _init(c)
            load = v1.LoadSessionRequest(session_id="missing", cwd=str(tmp_path), mcp_servers=[])
            with pytest.raises(acp_trio.RequestError) as info:
                await c.agent.session_load(load)
            assert info.value.code == acp_trio.RESOURCE_NOT_FOUND
            load = v1.LoadSessionRequest(session_id="other", cwd=str(tmp_path), mcp_servers=[])
            with pytest.raises(acp_trio.RequestError) as info:
                await c.agent.session_load(load)
            assert info.value.code == acp_trio.INTERNAL_ERROR
    not_found, crashed = t.spans("session/load")
    assert not_found.status.status_code is StatusCode.ERROR
    assert not_found.status.description == "no such session"
    attributes = dict(not_found.attributes or {})
    assert attributes["rpc.jsonrpc.error_code"] == acp_trio.RESOURCE_NOT_FOUND
    assert attributes["rpc.jsonrpc.error_message"] == "no such session"
    assert attributes["rpc.response.status_code"] == attributes["error.type"] == str(acp_trio.RESOURCE_NOT_FOUND)
    assert attributes["acp.session.id"] == "missing"
    assert [e.name for e in not_found.events] == ["exception"]
    assert (not_found.events[0].attributes or {})["exception.type"] == "acp_trio._core._errors.RequestError"
    # another exception is answered with -32603, and recorded so
    assert crashed.status.status_code is StatusCode.ERROR
    assert (crashed.attributes or {})["rpc.jsonrpc.error_code"] == acp_trio.INTERNAL_ERROR
    assert (crashed.events[0].attributes or {})["exception.message"] == "load exploded"


async def test_a_failing_notification_handler_marks_its_span(tmp_path: Any) -> None:
    t = Traces()
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client, instrumentation=t.instrumentation) as (_a, c):
            c.handler.fail = True
            await _init(c)
            new = await c.agent.session_new(_new(tmp_path))  # the connection goes on
            assert new.session_id == "s1"
    update = t.one("session/update")
    assert update.status.status_code is StatusCode.ERROR
    assert (update.attributes or {})["error.type"] == "ValueError"
    assert "rpc.jsonrpc.error_code" not in (update.attributes or {})  # a notification has no response


@pytest.mark.parametrize("session_id", ["direct", "nursery"])
async def test_a_cancelled_handler_ends_its_span_without_an_error(session_id: str) -> None:
    t = Traces()
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client, instrumentation=t.instrumentation) as (a, c):
            await _init(c)
            prompt = v1.PromptRequest(session_id=session_id, prompt=[v1.TextContentBlock(text="hi")])
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(c.agent.session_prompt, prompt)
                    await a.handler.prompt_started.wait()
                    scope.cancel()  # the client sends $/cancel_request; the agent cancels the handler
            assert scope.cancelled_caught
            await trio.testing.wait_all_tasks_blocked()
            assert len(t.spans("session/prompt")) == 1  # ended while the connection runs
    span = t.one("session/prompt")
    assert (span.attributes or {})[otel.CANCELLED_ATTRIBUTE] is True
    assert span.status.status_code is StatusCode.UNSET
    assert not span.events  # no exception recorded
    assert span.end_time is not None


async def test_the_ambient_span_of_the_connection_is_linked(tmp_path: Any) -> None:
    t = Traces()
    agent_stream, client_stream = trio.testing.memory_stream_pair()
    agent_conn = acp_trio.AgentSideConnection(Agent, agent_stream, agent_stream, instrumentation=t.instrumentation)
    client_conn = acp_trio.ClientSideConnection(Client, client_stream, client_stream, instrumentation=t.instrumentation)
    with trio.fail_after(DEADLINE):
        async with contextlib.AsyncExitStack() as stack:
            with t.tracer.start_as_current_span("agent process") as app:
                await stack.enter_async_context(agent_conn)  # handler tasks inherit this context
            await stack.enter_async_context(client_conn)
            await _init(client_conn)
            with t.tracer.start_as_current_span("caller") as caller:
                await client_conn.agent.session_new(_new(tmp_path))
    handler = t.one("session/new")
    assert handler.parent is not None and handler.parent.span_id == caller.get_span_context().span_id
    assert [link.context for link in handler.links] == [app.get_span_context()]
    assert not t.one("session/update").links  # the client side was opened outside any span


async def test_the_global_propagator_is_the_default(tmp_path: Any) -> None:
    t = Traces()
    inst = otel.instrument(tracer_provider=t.provider)  # no propagator: the global one, looked up per message
    assert inst.propagator is None
    client_wire = Wire()
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent, Client, instrumentation=inst) as (_a, c):
            c.connection.tap = client_wire
            await _init(c)
            with t.tracer.start_as_current_span("caller") as caller:
                await c.agent.session_new(_new(tmp_path))
    assert {"traceparent", "baggage"} <= propagate.get_global_textmap().fields  # tracecontext,baggage by default
    assert client_wire.sent("session/new")[0]["params"]["_meta"]["traceparent"] == traceparent(caller)
    handler = t.one("session/new")
    assert handler.parent is not None and handler.parent.span_id == caller.get_span_context().span_id


# -- the hooks directly ----------------------------------------------------------------------------


def test_outbound_copies_and_never_mutates() -> None:
    t = Traces()
    inst = t.instrumentation
    params = {"sessionId": "s1", "_meta": {"zed.dev/x": 1}}
    with t.tracer.start_as_current_span("caller") as caller:
        out = inst.outbound("request", "session/prompt", params)
        from_none = inst.outbound("notification", "_ext/ping", None)
        positional = [1, 2]
        assert inst.outbound("request", "_ext/sum", positional) is positional
        odd = {"_meta": "not an object"}
        assert inst.outbound("request", "_ext/odd", odd) is odd
        empty_meta: dict[str, Any] = {"_meta": {}}
        assert inst.outbound("request", "_ext/e", empty_meta)["_meta"] == {"traceparent": traceparent(caller)}
    assert params == {"sessionId": "s1", "_meta": {"zed.dev/x": 1}}
    assert out == {"sessionId": "s1", "_meta": {"zed.dev/x": 1, "traceparent": traceparent(caller)}}
    assert from_none == {"_meta": {"traceparent": traceparent(caller)}}
    assert empty_meta == {"_meta": {}}
    # nothing current: nothing injected, the same objects go out
    assert inst.outbound("request", "session/prompt", params) is params
    assert inst.outbound("notification", "_ext/ping", None) is None


def test_outbound_keeps_an_explicit_trace_context() -> None:
    t = Traces()
    explicit = {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "baggage": "user=carol"}
    with t.tracer.start_as_current_span("caller") as caller:
        sc = caller.get_span_context()
        state = trace.TraceState([("vendor", "v")])
        current = trace.NonRecordingSpan(trace.SpanContext(sc.trace_id, sc.span_id, False, sc.trace_flags, state))
        with with_baggage(user="dave"), trace.use_span(current):
            params = {"_meta": dict(explicit)}
            # the propagator would write traceparent, tracestate and baggage: the caller's keys win,
            # and the tracestate of another parent is not put next to the caller's traceparent
            assert t.instrumentation.outbound("request", "m", params) is params
            only_parent = {"_meta": {"traceparent": explicit["traceparent"]}}
            with_baggage_added = t.instrumentation.outbound("request", "m", only_parent)
            injected = t.instrumentation.outbound("request", "m", {})
    assert with_baggage_added == {"_meta": {"traceparent": explicit["traceparent"], "baggage": "user=dave"}}
    assert injected == {"_meta": {"traceparent": traceparent(caller), "tracestate": "vendor=v", "baggage": "user=dave"}}


def test_outbound_survives_a_failing_propagator() -> None:
    class Broken(TextMapPropagator):
        def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
            raise RuntimeError("extract broke")

        def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
            raise RuntimeError("inject broke")

        @property
        def fields(self) -> set[str]:
            return {"traceparent"}

    t = Traces(propagator=Broken())
    params = {"sessionId": "s1"}
    with t.tracer.start_as_current_span("caller"):
        assert t.instrumentation.outbound("request", "session/prompt", params) is params
    with t.instrumentation.inbound("request", "session/prompt", {"_meta": {"traceparent": "x"}}) as span:
        assert span is not None and span.is_recording()
    assert t.one("session/prompt").parent is None


@pytest.mark.parametrize(
    "params",
    [
        None,
        [1, 2],
        {"_meta": "garbage"},
        {"_meta": ["traceparent"]},
        {"_meta": {"traceparent": 5, "baggage": {"user": "x"}}},
        {"_meta": {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"}},  # all-zero ids are invalid
        {"_meta": {"traceparent": "ff-" + "a" * 32 + "-" + "b" * 16 + "-01"}},  # version ff is invalid
        {"_meta": {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01-extra"}},
        {"_meta": {"baggage": "%%%;;;==="}},
    ],
)
def test_inbound_tolerates_malformed_context(params: Any) -> None:
    t = Traces()
    ran = []
    with t.instrumentation.inbound("notification", "session/update", params) as span:
        ran.append(trace.get_current_span())
    assert ran == [span]
    finished = t.one("session/update")
    assert finished.parent is None and finished.kind is SpanKind.CONSUMER
    assert trace.get_current_span() is trace.INVALID_SPAN  # the context is restored


def test_inbound_extracts_a_valid_context_and_restores_the_current_one() -> None:
    t = Traces()
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    params = {
        "sessionId": "s9",
        "_meta": {"traceparent": f"00-{trace_id}-{span_id}-01", "tracestate": "rojo=00f067aa0ba902b7"},
    }
    with t.instrumentation.inbound("request", "session/prompt", params):
        current = trace.get_current_span().get_span_context()
    span = t.one("session/prompt")
    assert span.parent is not None and (span.parent.trace_id, span.parent.span_id) == (
        int(trace_id, 16),
        int(span_id, 16),
    )
    assert span.context is not None and span.context == current
    assert span.context.trace_state.get("rojo") == "00f067aa0ba902b7"
    assert (span.attributes or {})["acp.session.id"] == "s9"
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_inbound_context_comes_from_the_message_not_the_ambient_one() -> None:
    t = Traces()
    params = {"_meta": {"baggage": "user=remote"}}
    with with_baggage(user="ambient", team="local"), t.tracer.start_as_current_span("ambient") as ambient:
        with t.instrumentation.inbound("request", "session/new", params):
            seen = (baggage.get_baggage("user"), baggage.get_baggage("team"))
        with t.instrumentation.inbound("request", "session/new", None):
            seen_without = (baggage.get_baggage("user"), baggage.get_baggage("team"))
        assert baggage.get_baggage("user") == "ambient"  # restored
    assert seen == ("remote", None)
    assert seen_without == (None, None)
    for span in t.spans("session/new"):
        assert span.parent is None  # no remote parent: a root, linked to the ambient span
        assert [link.context for link in span.links] == [ambient.get_span_context()]


class _Provider(trace.NoOpTracerProvider):
    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return self.tracer


def test_inbound_runs_the_handler_when_no_span_can_start() -> None:
    class Raising(trace.NoOpTracer):
        def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
            raise RuntimeError("tracer broke")

    inst = otel.OpenTelemetryInstrumentation(tracer_provider=_Provider(Raising()), propagator=W3C)
    ran = []
    with inst.inbound("request", "session/new", {}) as span:
        ran.append(span)
    assert ran == [None]
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_inbound_ends_the_span_when_recording_the_outcome_fails() -> None:
    ended: list[bool] = []

    class Fragile(trace.NonRecordingSpan):
        def record_exception(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("span broke")

        def end(self, end_time: int | None = None) -> None:
            ended.append(True)

    class Tracer(trace.NoOpTracer):
        def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
            return Fragile(trace.INVALID_SPAN_CONTEXT)

    inst = otel.OpenTelemetryInstrumentation(tracer_provider=_Provider(Tracer()), propagator=W3C)
    with pytest.raises(ValueError, match="handler"):
        with inst.inbound("request", "session/new", {}):
            raise ValueError("handler failed")
    assert ended == [True]


def test_inbound_lets_the_handlers_exception_through() -> None:
    t = Traces()
    with pytest.raises(KeyError):
        with t.instrumentation.inbound("notification", "_ext/note", {}):
            raise KeyError("k")
    span = t.one("_ext/note")
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "KeyError"


# -- without the extra -----------------------------------------------------------------------------

_NO_OTEL = textwrap.dedent(
    """
    import sys
    import trio
    import acp_trio
    from acp_schema import v1

    class Agent:
        def __init__(self, conn):
            self.conn = conn
        async def initialize(self, params):
            return v1.InitializeResponse(protocol_version=1)
        async def session_new(self, params):
            chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text="hi"))
            await self.conn.client.session_update(v1.SessionNotification(session_id="s1", update=chunk))
            return v1.NewSessionResponse(session_id="s1")

    class Client:
        def __init__(self, conn):
            self.updates = 0
        async def session_update(self, params):
            self.updates += 1

    async def main():
        with trio.fail_after(30):
            async with acp_trio.open_memory_pair(Agent, Client) as (a, c):
                await c.agent.initialize(v1.InitializeRequest(protocol_version=1))
                new = await c.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
                assert new.session_id == "s1" and c.handler.updates == 1

    trio.run(main)
    loaded = sorted(n for n in sys.modules if n.partition(".")[0] == "opentelemetry" or n == "acp_trio.otel")
    print("LOADED", loaded)
    """
)


def test_connections_without_instrumentation_never_import_opentelemetry() -> None:
    result = subprocess.run([sys.executable, "-c", _NO_OTEL], capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "LOADED []"

"""The elicitation battery: ``elicitation/create`` (form and URL mode) and ``elicitation/complete``, v1 and v2.

Spec: ``docs/protocol/v1/elicitation.mdx`` and ``docs/protocol/v2/elicitation.mdx`` (Checking
support: each mode explicit; Form mode: the client SHOULD validate values; URL mode: ``accept`` is
consent; Responses: ``accept``/``decline``/``cancel``; URL completion: unknown ids ignored; a mode
the client did not advertise is answered -32602), ``prompt-turn.mdx`` / ``v2/prompt-lifecycle.mdx``
(Cancellation).  Agents and clients run in memory (``acp_trio.open_memory_pair``), one agent per
protocol version running the same elicitations; ``StandardClient`` is the client.
"""

from __future__ import annotations

import functools
import io
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import orjson
import pytest
import trio
import trio.lowlevel
import trio.testing

import acp_trio
import acp_trio.testing as testing
from acp_schema import v1, v2
from acp_trio import StandardClient, converter
from acp_trio.elicitation import (
    ElicitationAnswer,
    ElicitationBroker,
    FormSchema,
    FormSchemaError,
    PendingElicitation,
    accept_defaults,
    ask_user,
    decline_all,
)

DEADLINE = 10
VARIANTS = pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "strategy": {"type": "string", "enum": ["conservative", "balanced", "aggressive"], "default": "balanced"},
        "steps": {"type": "integer", "minimum": 1, "maximum": 10},
    },
    "required": ["strategy"],
}
QUESTION = "How should I approach this refactoring?"


def form(variant: ModuleType, session_id: str = "s", schema: dict[str, Any] = SCHEMA) -> Any:
    wire = {"mode": "form", "sessionId": session_id, "message": QUESTION, "requestedSchema": schema}
    return converter.structure(wire, variant.CreateElicitationRequest)


def url(variant: ModuleType, session_id: str = "s", elicitation_id: str = "github-oauth-001") -> Any:
    wire = {
        "mode": "url",
        "sessionId": session_id,
        "elicitationId": elicitation_id,
        "url": f"https://agent.example.com/connect?elicitationId={elicitation_id}",
        "message": "Please authorize access to your repositories.",
    }
    return converter.structure(wire, variant.CreateElicitationRequest)


def complete(variant: ModuleType, elicitation_id: str) -> Any:
    return variant.CompleteElicitationNotification(elicitation_id=elicitation_id)


class _Agent:
    """Sends each of ``self.asks`` (``(variant, session_id) -> request``, or ``("complete", id)``)
    during its turn, recording the answers (or the ``RequestError``); requests are shielded so a
    cancelled turn still sees the client's answer."""

    variant: ModuleType

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.asks: list[Any] = []
        self.answers: list[Any] = []
        self.asking = trio.Event()

    async def run(self, session_id: str) -> None:
        for ask in self.asks:
            if isinstance(ask, tuple):
                await self.conn.client.elicitation_complete(complete(self.variant, ask[1]))
                continue
            self.asking.set()
            with trio.CancelScope(shield=True):
                try:
                    self.answers.append(await self.conn.client.elicitation_create(ask(self.variant, session_id)))
                except acp_trio.RequestError as exc:
                    self.answers.append(exc)
        await trio.sleep(0)  # a checkpoint: a turn cancelled meanwhile ends here


class Agent1(_Agent):
    variant = v1

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        caps = v1.AgentCapabilities(session_capabilities=v1.SessionCapabilities(close=v1.SessionCloseCapabilities()))
        return v1.InitializeResponse(protocol_version=1, agent_capabilities=caps)

    async def session_close(self, params: v1.CloseSessionRequest) -> v1.CloseSessionResponse:
        return v1.CloseSessionResponse()

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        await self.run(params.session_id)
        return v1.PromptResponse(stop_reason="end_turn")


class Agent2(_Agent):
    variant = v2

    async def session_close(self, params: v2.CloseSessionRequest) -> v2.CloseSessionResponse:
        return v2.CloseSessionResponse()

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id="s")

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        async def turn() -> str:
            await self.run(params.session_id)
            return "end_turn"

        self.conn.start_turn(params.session_id, turn)
        return v2.PromptResponse(message_id="u1")


AGENTS: dict[ModuleType, type[_Agent]] = {v1: Agent1, v2: Agent2}


@asynccontextmanager
async def pair(
    variant: ModuleType, asks: list[Any], lines: list[Any] | None = None, **client_options: Any
) -> AsyncIterator[tuple[_Agent, acp_trio.ClientSideConnection, StandardClient]]:
    """An agent of ``variant`` that will send ``asks`` and an initialized StandardClient with a session ``s``."""

    def tap(direction: str, line: bytes) -> None:
        if lines is not None and direction == "out":
            lines.append(orjson.loads(line))

    def make_agent(conn: acp_trio.AgentSideConnection) -> _Agent:
        agent = AGENTS[variant](conn)
        agent.asks = asks
        return agent

    client_factory = functools.partial(StandardClient, **client_options)
    async with testing.pair(make_agent, client_factory, protocol=variant, tap=tap) as p:  # initialized
        client: StandardClient = p.client
        assert await client.new_session("/tmp") == "s"
        yield p.agent, p.client_conn, client


def results(lines: list[Any]) -> list[Any]:
    """The results the client sent that answer elicitations (``{"action": ...}``)."""
    return [m["result"] for m in lines if isinstance(m.get("result"), dict) and "action" in m["result"]]


# -- form mode -------------------------------------------------------------------------------------


@VARIANTS
async def test_a_form_is_answered_through_the_policy_in_the_agents_version(variant: ModuleType) -> None:
    seen: list[PendingElicitation] = []

    async def dialog(pending: PendingElicitation) -> ElicitationAnswer:
        seen.append(pending)
        return ElicitationAnswer.accept({"strategy": "aggressive", "steps": 3})

    lines: list[Any] = []
    with trio.fail_after(DEADLINE):
        async with pair(variant, [form], lines, elicitation=ask_user(dialog)) as (agent, _conn, client):
            result = await client.prompt("s", "refactor")
            assert result.stop_reason == "end_turn"
    assert agent.answers == [variant.AcceptCreateElicitationResponse(content={"strategy": "aggressive", "steps": 3})]
    assert results(lines) == [{"action": "accept", "content": {"strategy": "aggressive", "steps": 3}}]
    [pending] = seen
    assert (pending.mode, pending.message, pending.session_id, pending.tool_call_id) == ("form", QUESTION, "s", None)
    assert pending.schema == SCHEMA
    assert pending.defaults() == {"strategy": "balanced"}
    assert (pending.decided_by, pending.answer) == (
        "policy",
        ElicitationAnswer.accept({"strategy": "aggressive", "steps": 3}),
    )


@VARIANTS
@pytest.mark.parametrize(
    ("options", "advertised"),
    [
        ({}, None),
        ({"elicitation": decline_all()}, {"form": {}, "url": {}}),
        ({"elicitation": decline_all(), "elicitation_modes": ("form",)}, {"form": {}}),
    ],
    ids=["no-policy", "policy", "form-only"],
)
async def test_elicitation_is_advertised_only_with_a_policy_and_with_its_modes(
    variant: ModuleType, options: dict[str, Any], advertised: Any
) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(variant, [], **options) as (agent, _conn, _client):
            caps = agent.conn.client_capabilities
            assert caps.get("elicitation") == advertised
            assert ("fs" in caps) is (variant is v1)  # v2 clients offer no file system


@VARIANTS
async def test_without_a_policy_the_agent_cannot_ask_and_a_raw_request_gets_invalid_params(variant: ModuleType) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(variant, []) as (agent, _conn, _client):
            with pytest.raises(acp_trio.CapabilityError, match="'elicitation'"):
                await agent.conn.client.elicitation_create(form(variant))
            wire = converter.unstructure(form(variant))
            with pytest.raises(acp_trio.RequestError) as info:
                await agent.conn.connection.request("elicitation/create", wire)
    assert info.value.code == acp_trio.INVALID_PARAMS
    assert info.value.data["mode"] == "form" and info.value.data["advertised"] == []


@VARIANTS
async def test_a_mode_the_client_did_not_advertise_is_refused_unsent_and_answered_invalid_params(
    variant: ModuleType,
) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(variant, [], elicitation=decline_all(), elicitation_modes=("form",)) as (agent, _conn, _c):
            with pytest.raises(acp_trio.CapabilityError, match=r"'elicitation\.url'.*mode is 'url'"):
                await agent.conn.client.elicitation_create(url(variant))
            with pytest.raises(acp_trio.CapabilityError, match=r"'elicitation\.url'"):
                await agent.conn.client.elicitation_complete(complete(variant, "e1"))
            with pytest.raises(acp_trio.RequestError) as info:
                await agent.conn.connection.request("elicitation/create", converter.unstructure(url(variant)))
            assert info.value.code == acp_trio.INVALID_PARAMS
            assert info.value.data["advertised"] == ["form"]
            custom = {"mode": "_wizard", "sessionId": "s", "message": "?"}
            with pytest.raises(acp_trio.RequestError) as info:
                await agent.conn.connection.request("elicitation/create", custom)
            assert info.value.code == acp_trio.INVALID_PARAMS and info.value.data["mode"] == "_wizard"


BAD_SCHEMAS = {
    "bad-pattern": (
        {"type": "object", "properties": {"name": {"type": "string", "pattern": "("}}},
        "$.requestedSchema.properties.name.pattern",
    ),
    "negative-length": (
        {"type": "object", "properties": {"name": {"type": "string", "minLength": -1}}},
        "$.requestedSchema.properties.name.minLength",
    ),
    "custom-field-type": (
        {"type": "object", "properties": {"color": {"type": "_color"}}},
        "$.requestedSchema.properties.color",
    ),
    "nested-object": (
        {"type": "object", "properties": {"address": {"type": "object", "properties": {}}}},
        "$.requestedSchema.properties.address",
    ),
    "required-not-a-property": (
        {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["age"]},
        "$.requestedSchema.required",
    ),
    # patterns are checked in linear time (RE2): lookaround and backreferences cannot be
    "lookahead-pattern": (
        {"type": "object", "properties": {"pin": {"type": "string", "pattern": "^(?=.*[0-9]).{4,}$"}}},
        "$.requestedSchema.properties.pin.pattern",
    ),
    "backreference-pattern": (
        {"type": "object", "properties": {"word": {"type": "string", "pattern": "^(a)\\1$"}}},
        "$.requestedSchema.properties.word.pattern",
    ),
    # matched against property names by jsonschema with Python's backtracking re; a form lists its fields
    "pattern-properties": (
        {"type": "object", "properties": {"name": {"type": "string"}}, "patternProperties": {"^n": {}}},
        "$.requestedSchema.patternProperties",
    ),
}


@VARIANTS
@pytest.mark.parametrize(("schema", "path"), list(BAD_SCHEMAS.values()), ids=list(BAD_SCHEMAS))
async def test_a_requested_schema_that_is_no_valid_flat_form_is_answered_invalid_params_naming_the_field(
    variant: ModuleType, schema: dict[str, Any], path: str
) -> None:
    asked: list[Any] = []

    async def dialog(pending: PendingElicitation) -> ElicitationAnswer:
        asked.append(pending)
        return ElicitationAnswer.decline()

    with trio.fail_after(DEADLINE):
        async with pair(variant, [lambda v, sid: form(v, sid, schema)], elicitation=ask_user(dialog)) as (
            agent,
            _conn,
            client,
        ):
            await client.prompt("s", "go")
    [error] = agent.answers
    assert isinstance(error, acp_trio.RequestError) and error.code == acp_trio.INVALID_PARAMS
    assert error.data["path"] == path and error.data["detail"]
    assert asked == []  # nobody was asked to fill a form that cannot be one


@VARIANTS
@pytest.mark.parametrize(
    ("answer", "logged"),
    [
        (ElicitationAnswer.accept({"strategy": "reckless"}), "'reckless' is not one of"),
        (ElicitationAnswer.accept({"steps": 3}), "'strategy' is a required property"),
        (ElicitationAnswer.accept({"strategy": "balanced", "steps": 11}), "steps: 11 is greater than the maximum"),
        (ElicitationAnswer.accept({"strategy": "balanced", "extra": "x"}), "'extra': not a field of this form"),
        (ElicitationAnswer.accept({"strategy": "balanced", "steps": True}), "steps: True is not of type 'integer'"),
        ("accept", "expected an ElicitationAnswer"),
    ],
    ids=["not-in-enum", "missing-required", "over-maximum", "unknown-field", "bool-for-integer", "not-an-answer"],
)
async def test_an_answer_that_does_not_fit_the_schema_is_never_sent_the_agent_gets_cancel(
    variant: ModuleType, answer: Any, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def dialog(pending: PendingElicitation) -> Any:
        return answer

    lines: list[Any] = []
    with caplog.at_level(logging.ERROR, logger="acp_trio.elicitation"), trio.fail_after(DEADLINE):
        async with pair(variant, [form], lines, elicitation=ask_user(dialog)) as (agent, _conn, client):
            await client.prompt("s", "go")
    assert agent.answers == [variant.CancelCreateElicitationResponse()]
    assert results(lines) == [{"action": "cancel"}]
    assert logged in caplog.text


async def test_a_policy_that_raises_is_logged_and_answered_cancel(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(pending: PendingElicitation) -> ElicitationAnswer:
        raise RuntimeError("dialog crashed")

    broker = ElicitationBroker(broken)
    with caplog.at_level(logging.ERROR, logger="acp_trio.elicitation"):
        response = await broker.elicitation_create(form(v1))
    assert response == v1.CancelCreateElicitationResponse()
    assert "dialog crashed" in caplog.text


async def test_a_ui_answers_a_pending_form_directly_and_invalid_content_is_refused_before_sending() -> None:
    broker = ElicitationBroker(ask_user(lambda pending: trio.sleep_forever()))  # type: ignore[arg-type,return-value]
    answered: list[PendingElicitation] = []
    broker.on_answer = answered.append
    responses: list[Any] = []
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                responses.append(await broker.elicitation_create(form(v2)))

            nursery.start_soon(ask)
            while not broker.pending():
                await trio.sleep(0)
            [pending] = broker.pending("s")
            with pytest.raises(ValueError, match="'reckless' is not one of"):
                pending.accept({"strategy": "reckless"})
            assert not pending.answered
            assert pending.accept({"strategy": "conservative"}) is True
            assert pending.decline() is False  # already answered
    assert responses == [v2.AcceptCreateElicitationResponse(content={"strategy": "conservative"})]
    assert [(p.decided_by, p.answer) for p in answered] == [
        ("accept", ElicitationAnswer.accept({"strategy": "conservative"}))
    ]
    assert broker.pending() == []


async def test_a_policy_that_does_not_decide_in_time_is_cancelled_and_cancel_is_answered(
    autojump_clock: trio.abc.Clock,
) -> None:
    exited: list[str] = []

    async def slow(pending: PendingElicitation) -> ElicitationAnswer:
        try:
            await trio.sleep_forever()
        finally:
            exited.append(pending.message)
        raise AssertionError("unreachable")

    broker = ElicitationBroker(slow, timeout=30)
    start = trio.current_time()
    response = await broker.elicitation_create(form(v1))
    assert response == v1.CancelCreateElicitationResponse()
    assert trio.current_time() == pytest.approx(start + 30)
    assert exited == [QUESTION]


async def test_decline_all_is_the_default_and_accept_defaults_accepts_only_defaults_that_fit() -> None:
    assert await ElicitationBroker().elicitation_create(form(v2)) == v2.DeclineCreateElicitationResponse()
    defaults = ElicitationBroker(accept_defaults())
    assert await defaults.elicitation_create(form(v2)) == v2.AcceptCreateElicitationResponse(
        content={"strategy": "balanced"}
    )
    no_default = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    assert await defaults.elicitation_create(form(v2, schema=no_default)) == v2.DeclineCreateElicitationResponse()
    assert await defaults.elicitation_create(url(v2)) == v2.DeclineCreateElicitationResponse()


def test_form_schema_checks_fields_formats_and_defaults() -> None:
    schema = FormSchema(
        {
            "type": "object",
            "properties": {
                "email": {"type": "string", "format": "email"},
                "when": {"type": "string", "format": "date", "default": "not a date"},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "default": ["a"]},
                "ratio": {"type": "number", "default": 0.5},
            },
        }
    )
    assert schema.validate({"email": "someone@example.com", "tags": ["b"], "ratio": 2}) == []
    assert schema.validate({"email": "nobody"}) == ["email: 'nobody' is not a 'email'"]
    assert schema.validate({"when": "2026-13-40"}) == ["when: '2026-13-40' is not a 'date'"]
    assert schema.validate({"tags": ["c"]}) == ["tags.0: 'c' is not one of ['a', 'b']"]
    assert schema.validate({"ratio": float("nan")}) == [
        "ratio: nan is not a string, number, boolean or list of strings"
    ]
    assert schema.validate(["not", "an", "object"]) == ["the content must be an object of field values, not list"]
    assert schema.defaults() == {"tags": ["a"], "ratio": 0.5}  # the default that is no date is left out
    with pytest.raises(FormSchemaError) as info:
        FormSchema({"type": "array"})
    assert info.value.path == "$.requestedSchema.type"


# -- hostile schemas cannot freeze the client ------------------------------------------------------

REDOS = "^(a+)+$"  # Python's backtracking re takes about 2**n steps for "a" * n + "!"
HOSTILE = "a" * 40 + "!"


async def _answer(content: dict[str, Any]) -> ElicitationAnswer:
    return ElicitationAnswer.accept(content)


@pytest.mark.timeout(60)  # before: Python's re ran these checks on the event loop's thread for hours
async def test_a_catastrophic_pattern_is_checked_in_linear_time_in_defaults_answers_and_validate() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": REDOS, "default": HOSTILE}}}
    with trio.fail_after(DEADLINE):
        defaults = ElicitationBroker(accept_defaults())
        # the default does not match its pattern: it is left out, and the form is accepted without it
        assert await defaults.elicitation_create(form(v1, schema=schema)) == v1.AcceptCreateElicitationResponse(
            content={}
        )
        answers = iter([{"name": HOSTILE}, {"name": "aaaa"}])
        broker = ElicitationBroker(ask_user(lambda pending: _answer(next(answers))))
        assert await broker.elicitation_create(form(v2, schema=schema)) == v2.CancelCreateElicitationResponse()
        assert await broker.elicitation_create(form(v2, schema=schema)) == v2.AcceptCreateElicitationResponse(
            content={"name": "aaaa"}
        )
        assert FormSchema(schema).validate({"name": HOSTILE}) == [f"name: {HOSTILE!r} does not match {REDOS!r}"]
        # linear, but in the pattern's size too: a long string against a large pattern is refused unchecked
        large = "(?:[ab]{1000})" * 8 + "c"
        long_form = FormSchema({"type": "object", "properties": {"x": {"type": "string", "pattern": large}}})
        assert long_form.validate({"x": "ab" * 500_000}) == [
            f"x: 1000000 bytes is too long to check against {large!r} (at most 1249)"
        ]
        plain = FormSchema({"type": "object", "properties": {"x": {"type": "string", "pattern": "^[ab]+c$"}}})
        assert plain.validate({"x": "ab" * 500_000 + "c"}) == []  # a small pattern checks long strings


def test_patterns_are_ecma_262_regular_expressions() -> None:
    schema = FormSchema(
        {
            "type": "object",
            "properties": {
                "digits": {"type": "string", "pattern": "^\\d+$"},  # ECMA-262: ASCII digits only
                "accent": {"type": "string", "pattern": "^\\u00e9+$"},
                "named": {"type": "string", "pattern": "^(?<word>[a-z]+)$"},  # an ECMA-262 named group
            },
        }
    )
    assert schema.validate({"digits": "123", "accent": "\u00e9\u00e9", "named": "abc"}) == []
    arabic_indic_three = "\u0663"
    assert schema.validate({"digits": arabic_indic_three}) == [
        f"digits: {arabic_indic_three!r} does not match '^\\\\d+$'"
    ]


def costly_schema(levels: int, default: bool) -> dict[str, Any]:
    """A form whose checking doubles with each level (an allOf of two $refs to the next level)."""
    defs: dict[str, Any] = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(levels)}
    defs[f"d{levels}"] = {"type": "object"}
    field: dict[str, Any] = {"type": "string", **({"default": "x"} if default else {})}
    return {"type": "object", "properties": {"name": field}, "allOf": [{"$ref": "#/$defs/d0"}], "$defs": defs}


@pytest.mark.timeout(60)  # before: the check ran on the event loop's thread for days
@pytest.mark.parametrize("default", [True, False], ids=["its-default", "the-answer"])
async def test_a_form_too_costly_to_check_is_refused_naming_the_field_and_the_loop_keeps_running(
    default: bool,
) -> None:
    broker = ElicitationBroker(ask_user(lambda pending: _answer({"name": "x"})), check_timeout=1)
    errors: list[acp_trio.RequestError] = []
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                with pytest.raises(acp_trio.RequestError) as info:
                    await broker.elicitation_create(form(v1, schema=costly_schema(40, default)))
                errors.append(info.value)

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            assert errors == []  # the check runs in a worker thread: this task ran meanwhile
    [error] = errors
    assert error.code == acp_trio.INVALID_PARAMS
    assert error.data["path"] == "$.requestedSchema.properties.name"
    assert "took longer than 1 s" in error.data["detail"]


# -- URL mode --------------------------------------------------------------------------------------


@VARIANTS
async def test_an_accepted_url_elicitation_waits_for_elicitation_complete_and_unknown_ids_are_ignored(
    variant: ModuleType,
) -> None:
    completed: list[str | None] = []
    opened: list[PendingElicitation] = []

    async def consent(pending: PendingElicitation) -> ElicitationAnswer:
        opened.append(pending)
        return ElicitationAnswer.accept({"ignored": "content"})  # URL mode sends no content

    lines: list[Any] = []
    asks = [url, ("complete", "never-asked"), ("complete", "github-oauth-001"), ("complete", "github-oauth-001")]
    with trio.fail_after(DEADLINE):
        async with pair(variant, asks, lines, elicitation=ask_user(consent)) as (agent, _conn, client):
            client.elicitation.on_complete = lambda entry: completed.append(entry.elicitation_id)
            await client.prompt("s", "connect github")
            [pending] = opened
            await pending.wait_completed()  # v2: the idle update may be handled before the completion
            assert client.elicitation.awaiting_completion() == [] and pending.completed
    assert agent.answers == [variant.AcceptCreateElicitationResponse()]
    assert results(lines) == [{"action": "accept"}]
    assert pending.url == "https://agent.example.com/connect?elicitationId=github-oauth-001"
    assert completed == ["github-oauth-001"]  # once: the unknown and the repeated id were ignored


async def test_wait_completed_returns_when_the_agent_reports_completion() -> None:
    broker = ElicitationBroker(ask_user(lambda pending: _accept()))
    assert await broker.elicitation_create(url(v1, elicitation_id="e7")) == v1.AcceptCreateElicitationResponse()
    [pending] = broker.awaiting_completion()
    assert (pending.elicitation_id, pending.completed) == ("e7", False)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pending.wait_completed)
            await broker.elicitation_complete(complete(v1, "e7"))
    assert pending.completed and broker.awaiting_completion() == []


async def _accept() -> ElicitationAnswer:
    return ElicitationAnswer.accept()


@VARIANTS
@pytest.mark.parametrize("end", ["session/close", "connection-closed"])
async def test_an_accepted_url_elicitation_is_dropped_when_its_session_ends_or_the_connection_closes(
    variant: ModuleType, end: str
) -> None:
    waited: list[bool] = []
    with trio.fail_after(DEADLINE):
        async with pair(variant, [url], elicitation=ask_user(lambda pending: _accept())) as (_agent, conn, client):
            await client.prompt("s", "connect github")
            [pending] = client.elicitation.awaiting_completion()
            async with trio.open_nursery() as nursery:

                async def wait() -> None:
                    waited.append(await pending.wait_completed())

                nursery.start_soon(wait)
                await trio.testing.wait_all_tasks_blocked()
                if end == "session/close":
                    await conn.agent.session_close(variant.CloseSessionRequest(session_id="s"))
                else:
                    await conn.aclose()
            assert client.elicitation.awaiting_completion() == []
    assert waited == [False] and not pending.completed  # dropped, not completed


def test_the_broker_drops_awaiting_url_elicitations_by_session_or_all() -> None:
    broker = ElicitationBroker(ask_user(lambda pending: _accept()))
    trio.run(broker.elicitation_create, url(v1, "s1", "e1"))
    trio.run(broker.elicitation_create, url(v1, "s2", "e2"))
    assert broker.drop_session("s1") == 1
    assert [p.elicitation_id for p in broker.awaiting_completion()] == ["e2"]
    assert broker.drop_all() == 1 and broker.awaiting_completion() == []


# -- cancelled with the turn -----------------------------------------------------------------------


@VARIANTS
async def test_a_pending_elicitation_is_answered_cancel_when_the_turn_is_cancelled(variant: ModuleType) -> None:
    exited: list[str] = []

    async def dialog(pending: PendingElicitation) -> ElicitationAnswer:
        try:
            await trio.sleep_forever()
        finally:
            exited.append(pending.message)
        raise AssertionError("unreachable")

    answered: list[PendingElicitation] = []
    lines: list[Any] = []
    outcome: list[Any] = []
    with trio.fail_after(DEADLINE):
        async with pair(variant, [form], lines, elicitation=ask_user(dialog)) as (agent, _conn, client):
            client.elicitation.on_answer = answered.append
            async with trio.open_nursery() as nursery:

                async def prompt() -> None:
                    outcome.append(await client.prompt("s", "go"))

                nursery.start_soon(prompt)
                await agent.asking.wait()
                while not client.elicitation.pending("s"):
                    await trio.sleep(0)
                await client.cancel("s")
    assert [r.stop_reason for r in outcome] == ["cancelled"]
    assert results(lines) == [{"action": "cancel"}]
    assert agent.answers == [variant.CancelCreateElicitationResponse()]
    assert exited == [QUESTION]  # the dialog was closed
    assert [p.decided_by for p in answered] == ["session/cancel"]


async def test_a_request_scoped_elicitation_is_not_tied_to_a_session_turn() -> None:
    release = trio.Event()

    async def dialog(pending: PendingElicitation) -> ElicitationAnswer:
        await release.wait()
        return ElicitationAnswer.accept({"strategy": "balanced"})

    def scoped(variant: ModuleType, session_id: str) -> Any:
        wire = {"mode": "form", "requestId": 7, "message": QUESTION, "requestedSchema": SCHEMA}
        return converter.structure(wire, variant.CreateElicitationRequest)

    with trio.fail_after(DEADLINE):
        async with pair(v1, [scoped], elicitation=ask_user(dialog)) as (agent, _conn, client):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.prompt, "s", "go")
                await agent.asking.wait()
                while not client.elicitation.pending():
                    await trio.sleep(0)
                [pending] = client.elicitation.pending()
                assert (pending.session_id, pending.request_id) == (None, 7)
                await client.cancel("s")  # the session's turn ends; the request-scoped question stays
                await trio.testing.wait_all_tasks_blocked()
                assert client.elicitation.pending() == [pending] and not pending.answered
                release.set()
    assert agent.answers == [v1.AcceptCreateElicitationResponse(content={"strategy": "balanced"})]


# -- the demo client answers on the terminal ---------------------------------------------------------


async def test_the_demo_client_asks_a_form_on_the_terminal_and_sends_it_after_review() -> None:
    from acp_trio.demo.client import DemoClient

    typed = io.StringIO("4\n3\n\nx\ne\n\n2\n\ns\n")  # 4: out of range; 3; no steps; x?; edit: keep, 2; send
    shown = io.StringIO()
    out = io.StringIO()
    client_factory: Callable[[Any], DemoClient] = lambda conn: DemoClient(  # noqa: E731
        conn, out, ask_in=typed, ask_out=shown, interactive=True
    )
    agent: Any = None
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent1, client_factory) as (agent_conn, client_conn):
            agent = agent_conn.handler
            agent.asks = [form]
            client: DemoClient = client_conn.handler
            assert client.capabilities.elicitation  # the demo asks on the terminal: it advertises elicitation
            await client.initialize()
            sid = await client.new_session("/tmp")
            await client.prompt(sid, "go")
    assert agent.answers == [v1.AcceptCreateElicitationResponse(content={"strategy": "aggressive", "steps": 2})]
    questions = shown.getvalue()
    assert f"the agent asks: {QUESTION}" in questions  # Agent1 sends no agentInfo
    assert "strategy (1: conservative; 2: balanced; 3: aggressive) (required) [balanced]: " in questions
    assert "strategy: '4' is not one of ['conservative', 'balanced', 'aggressive']" in questions
    assert "Your answers: {'strategy': 'aggressive'}" in questions  # reviewed, then edited
    assert "Your answers: {'strategy': 'aggressive', 'steps': 2}" in questions
    assert f"[elicitation] the agent asks: {QUESTION}\n" in out.getvalue()
    assert "[elicitation] answered accept {'strategy': 'aggressive', 'steps': 2}" in out.getvalue()


async def test_the_terminal_form_shows_what_the_agent_sent_with_control_characters_escaped() -> None:
    from acp_trio.demo.client import TerminalForm

    said: list[str] = []
    shown = io.StringIO()
    typed = io.StringIO("\n\ns\ny\n")  # the default; send; open the URL
    terminal_form = TerminalForm(
        said.append, lambda: "agent\x1b]0;title\x07", ask_in=typed, ask_out=shown, interactive=True
    )
    broker = ElicitationBroker(ask_user(terminal_form))
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "\x1b[31mName", "description": "\x1b[2K", "default": "x\x1b[8my"},
        },
    }
    wire = {"mode": "form", "sessionId": "s", "message": "Hi\r\x1b[2KSafe question", "requestedSchema": schema}
    link = {
        "mode": "url",
        "sessionId": "s",
        "elicitationId": "e1",
        "url": "https://evil.example/\x1b[1A\rhttps://bank.example/\u202elanif",
        "message": "Log in\u202e",
    }
    with trio.fail_after(DEADLINE):
        assert await broker.elicitation_create(converter.structure(wire, v1.CreateElicitationRequest)) == (
            v1.AcceptCreateElicitationResponse(content={"name": "x\x1b[8my"})
        )
        assert await broker.elicitation_create(converter.structure(link, v1.CreateElicitationRequest)) == (
            v1.AcceptCreateElicitationResponse()
        )
    everything = shown.getvalue() + "\n".join(said)
    assert not any(c in everything for c in "\x1b\x07\r\u202e")
    for escaped in ("\\x1b]0;title\\x07", "Hi\\r\\x1b[2KSafe question", "\\x1b[31mName", "\\x1b[2K", "x\\x1b[8my"):
        assert escaped in everything
    assert "https://evil.example/\\x1b[1A\\rhttps://bank.example/\\u202elanif" in everything
    assert "host: evil.example" in everything


async def _until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await trio.sleep(0)


async def test_a_withdrawn_terminal_question_does_not_swallow_the_next_answer() -> None:
    import os

    from acp_trio.demo.client import TerminalForm

    shown = io.StringIO()
    read_end, write_end = os.pipe()
    with open(write_end, "w") as keyboard, open(read_end) as ask_in:
        broker = ElicitationBroker(
            ask_user(TerminalForm(lambda line: None, lambda: "agent", ask_in=ask_in, ask_out=shown, interactive=True))
        )
        responses: list[Any] = []
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:

                async def ask(elicitation_id: str) -> None:
                    responses.append(await broker.elicitation_create(url(v1, elicitation_id=elicitation_id)))

                nursery.start_soon(ask, "e1")
                await _until(lambda: "Open it?" in shown.getvalue())
                [first] = broker.pending()
                first.cancel()  # withdrawn while the terminal waits for a line
                await _until(lambda: responses == [v1.CancelCreateElicitationResponse()])
                keyboard.write("y\n")  # typed for the withdrawn question: it answers nothing
                keyboard.flush()
                await _until(lambda: "ignored" in shown.getvalue())
                nursery.start_soon(ask, "e2")
                await _until(lambda: shown.getvalue().count("Open it?") == 2)
                keyboard.write("d\n")  # the answer to the question on screen reaches it
                keyboard.flush()
        assert responses == [v1.CancelCreateElicitationResponse(), v1.DeclineCreateElicitationResponse()]
        keyboard.close()  # end of input: no reader thread is left blocked


@pytest.mark.parametrize(
    ("asks", "expected", "line"),
    [
        ([form], v1.AcceptCreateElicitationResponse(content={"strategy": "balanced"}), "the form's defaults"),
        ([url], v1.DeclineCreateElicitationResponse(), "declined (no terminal to ask on)"),
    ],
    ids=["form", "url"],
)
async def test_the_demo_client_without_a_terminal_uses_the_defaults_or_declines(
    asks: list[Any], expected: Any, line: str
) -> None:
    from acp_trio.demo.client import DemoClient

    out = io.StringIO()
    agent: Any = None
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(Agent1, lambda conn: DemoClient(conn, out, interactive=False)) as (
            agent_conn,
            client_conn,
        ):
            agent = agent_conn.handler
            agent.asks = asks
            client: DemoClient = client_conn.handler
            await client.initialize()
            await client.prompt(await client.new_session("/tmp"), "go")
    assert agent.answers == [expected]
    assert line in out.getvalue()


class SlowCompletionClient(StandardClient):
    """Takes a few scheduling rounds to handle ``elicitation/complete``."""

    async def elicitation_complete(self, params: Any) -> None:
        for _ in range(20):
            await trio.lowlevel.checkpoint()
        await super().elicitation_complete(params)


async def test_elicitation_complete_is_handled_before_a_response_that_follows_it() -> None:
    # v1: the prompt's response follows the completion on the wire (in v2 the turn ends with a
    # session/update, which is ordered per session, not with notifications outside sessions)
    variant = v1

    def make_agent(conn: acp_trio.AgentSideConnection) -> _Agent:
        agent = AGENTS[variant](conn)
        agent.asks = [url, ("complete", "github-oauth-001")]
        return agent

    client_factory = functools.partial(SlowCompletionClient, elicitation=ask_user(lambda pending: _accept()))
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair({variant: make_agent}, {variant: client_factory}) as (_, client_conn):
            client: StandardClient = client_conn.handler
            await client.initialize()
            await client.prompt(await client.new_session("/tmp"), "connect")
            # the agent reported completion before it ended the turn: the client has seen it
            assert client.elicitation.awaiting_completion() == []


@VARIANTS
async def test_the_demo_agent_asks_about_the_word_count_and_the_users_answer_shapes_the_summary(
    variant: ModuleType, tmp_path: Any
) -> None:
    from acp_trio.demo.agent import DemoAgent
    from acp_trio.demo.client import DemoClient
    from acp_trio.demo.client_v2 import DemoClientV2

    (tmp_path / "notes.txt").write_text("alpha beta\ngamma\n", encoding="utf-8")
    shown = io.StringIO()
    client_class: Any = DemoClient if variant is v1 else DemoClientV2

    def make_client(conn: Any) -> Any:  # "n": no word count; "s": send
        return client_class(conn, io.StringIO(), ask_in=io.StringIO("n\ns\n"), ask_out=shown, interactive=True)

    with trio.fail_after(30):
        async with acp_trio.open_memory_pair(DemoAgent(), {variant: make_client}) as (_, client_conn):
            client: Any = client_conn.handler
            await client.initialize()
            result = await client.prompt(await client.new_session(tmp_path), "summarize")
            assert result.stop_reason == "end_turn"
    assert "acp-trio demo agent asks: Should summary.txt give the word count?" in shown.getvalue()
    assert (tmp_path / "summary.txt").read_text(encoding="utf-8") == (
        "notes.txt has 2 non-empty lines; the first is: alpha beta\n"  # no "It has 3 words."
    )

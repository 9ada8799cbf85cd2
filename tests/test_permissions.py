"""The permission broker: policies, option validation, timeouts, pending requests and cancellation.

Spec: ``docs/protocol/v1/tool-calls.mdx`` (Requesting Permission, Permission Options) and
``prompt-turn.mdx`` (Cancellation: the client MUST answer pending permission requests
``cancelled``).  Unit tests call the broker directly; end-to-end tests join an agent and a client
with ``acp_trio.open_memory_pair``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import trio
import trio.testing

import acp_trio
from acp_schema import v1
from acp_trio import converter
from acp_trio.permissions import (
    PendingPermission,
    PermissionBroker,
    PermissionPolicy,
    allow_all,
    allow_kinds,
    ask,
    choose_option,
    deny_all,
    tool_kind_of,
)
from acp_trio.session_state import SessionStates

DEADLINE = 30
ALL_KINDS: list[v1.PermissionOptionKind] = ["allow_once", "allow_always", "reject_once", "reject_always"]


def options(*kinds: v1.PermissionOptionKind) -> list[v1.PermissionOption]:
    return [v1.PermissionOption(option_id=f"opt-{kind}", name=kind, kind=kind) for kind in kinds]


def request(
    *kinds: v1.PermissionOptionKind,
    session_id: str = "s1",
    tool_call_id: str = "call_1",
    tool_kind: v1.ToolKind | None = None,
) -> v1.RequestPermissionRequest:
    tool_call = v1.ToolCallUpdate(tool_call_id=tool_call_id)
    if tool_kind is not None:
        tool_call.kind = tool_kind
    return v1.RequestPermissionRequest(session_id=session_id, tool_call=tool_call, options=options(*kinds))


def selected(response: v1.RequestPermissionResponse) -> str | None:
    """The selected option id, or None for the cancelled outcome (anything else fails the test)."""
    outcome = response.outcome
    if isinstance(outcome, v1.CancelledRequestPermissionOutcome):
        return None
    assert isinstance(outcome, v1.SelectedRequestPermissionOutcome)
    return outcome.option_id


def blocking(started: trio.Event | None = None, exited: list[str] | None = None) -> PermissionPolicy:
    """A policy (an ``ask`` callback) that never decides, recording when it starts and is cancelled."""

    async def wait_forever(req: v1.RequestPermissionRequest) -> str | None:
        if started is not None:
            started.set()
        try:
            await trio.sleep_forever()
        finally:
            if exited is not None:
                exited.append(req.tool_call.tool_call_id)
        raise AssertionError("unreachable")

    return ask(wait_forever)


# -- policies ------------------------------------------------------------------------------------


def test_choose_option_prefers_kinds_in_order_then_the_earliest_option() -> None:
    opts = [
        v1.PermissionOption(option_id="always", name="Always", kind="allow_always"),
        v1.PermissionOption(option_id="once-a", name="Once", kind="allow_once"),
        v1.PermissionOption(option_id="once-b", name="Once again", kind="allow_once"),
    ]
    assert choose_option(opts, ["allow_once", "allow_always"]) == "once-a"
    assert choose_option(opts, ["allow_always", "allow_once"]) == "always"
    assert choose_option(opts, ["reject_once"]) is None
    assert choose_option([], ["allow_once"]) is None


@pytest.mark.parametrize(
    ("offered", "expected"),
    [
        (ALL_KINDS, "opt-reject_once"),
        (["allow_once", "reject_always"], "opt-reject_always"),
        (["reject_always", "reject_once"], "opt-reject_once"),
        (["allow_once", "allow_always"], None),  # nothing to reject with: cancelled
        ([], None),
    ],
)
async def test_deny_all_picks_reject_once_else_reject_always_else_cancelled(
    offered: list[v1.PermissionOptionKind], expected: str | None
) -> None:
    assert await deny_all()(request(*offered)) == expected


@pytest.mark.parametrize(
    ("offered", "expected"),
    [
        (ALL_KINDS, "opt-allow_once"),
        (["reject_once", "allow_always"], "opt-allow_always"),
        (["reject_always", "reject_once"], "opt-reject_once"),  # no allow option: denied
        ([], None),
    ],
)
async def test_allow_all_picks_allow_once_else_allow_always_else_denies(
    offered: list[v1.PermissionOptionKind], expected: str | None
) -> None:
    assert await allow_all()(request(*offered)) == expected


async def test_allow_kinds_allows_listed_kinds_and_hands_the_rest_to_otherwise() -> None:
    seen: list[str] = []

    async def otherwise(req: v1.RequestPermissionRequest) -> str | None:
        seen.append(req.tool_call.tool_call_id)
        return "opt-reject_always"

    policy = allow_kinds(["read", "search"], otherwise)
    assert await policy(request(*ALL_KINDS, tool_kind="read", tool_call_id="r")) == "opt-allow_once"
    assert await policy(request("allow_always", "reject_once", tool_kind="search")) == "opt-allow_always"
    assert await policy(request(*ALL_KINDS, tool_kind="execute", tool_call_id="x")) == "opt-reject_always"
    # an allowed kind without an allow option goes to otherwise too
    assert await policy(request("reject_once", tool_kind="read", tool_call_id="no-allow")) == "opt-reject_always"
    assert seen == ["x", "no-allow"]


async def test_allow_kinds_defaults_to_deny_all_and_treats_a_missing_kind_as_other() -> None:
    assert await allow_kinds({"edit"})(request(*ALL_KINDS)) == "opt-reject_once"
    assert await allow_kinds({"other"})(request(*ALL_KINDS)) == "opt-allow_once"


async def test_allow_kinds_looks_up_the_kind_of_a_tool_call_announced_earlier() -> None:
    known = {("s1", "call_read"): "read", ("s1", "call_exec"): "execute"}

    def kind_of(session_id: str, tool_call_id: str) -> str | None:
        return known.get((session_id, tool_call_id))

    policy = allow_kinds({"read"}, kind_of=kind_of)
    assert await policy(request(*ALL_KINDS, tool_call_id="call_read")) == "opt-allow_once"
    assert await policy(request(*ALL_KINDS, tool_call_id="call_exec")) == "opt-reject_once"
    assert await policy(request(*ALL_KINDS, tool_call_id="call_unknown")) == "opt-reject_once"
    # a kind carried by the request itself wins over the lookup
    assert await policy(request(*ALL_KINDS, tool_call_id="call_exec", tool_kind="read")) == "opt-allow_once"
    assert tool_kind_of(request(tool_call_id="call_exec"), kind_of) == "execute"
    assert tool_kind_of(request(tool_call_id="call_unknown"), kind_of) == "other"


def test_policy_factories_reject_bad_arguments() -> None:
    with pytest.raises(TypeError, match="collection of ToolKind strings"):
        allow_kinds("read")
    with pytest.raises(TypeError, match="async callable"):
        ask("yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1.5, math.nan, True, "5"])
def test_broker_rejects_a_timeout_that_is_not_a_positive_number(timeout: Any) -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        PermissionBroker(deny_all(), timeout=timeout)


def test_broker_rejects_policies_that_are_not_callable() -> None:
    with pytest.raises(TypeError, match="policy must be"):
        PermissionBroker("allow")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_timeout must be"):
        PermissionBroker(deny_all(), on_timeout=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_answer must be"):
        PermissionBroker(deny_all(), on_answer=3)  # type: ignore[arg-type]


# -- the broker, called directly -----------------------------------------------------------------


async def test_the_broker_answers_what_the_policy_decides() -> None:
    answers: list[tuple[str | None, str | None]] = []
    broker = PermissionBroker(allow_all(), on_answer=lambda e: answers.append((e.option_id, e.decided_by)))
    response = await broker.session_request_permission(request(*ALL_KINDS))
    assert converter.unstructure(response) == {"outcome": {"outcome": "selected", "optionId": "opt-allow_once"}}

    async def dismiss(req: v1.RequestPermissionRequest) -> str | None:
        return None

    broker.policy = ask(dismiss)
    response = await broker.session_request_permission(request(*ALL_KINDS))
    assert converter.unstructure(response) == {"outcome": {"outcome": "cancelled"}}
    assert answers == [("opt-allow_once", "policy"), (None, "policy")]
    assert broker.pending() == []


@pytest.mark.parametrize("choice", ["opt-made-up", 42, ""])
async def test_an_option_id_that_was_not_offered_is_logged_and_answered_as_deny_all(
    choice: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async def invent(req: v1.RequestPermissionRequest) -> Any:
        return choice

    answers: list[PendingPermission] = []
    broker = PermissionBroker(invent, on_answer=answers.append)
    with caplog.at_level(logging.ERROR, logger="acp_trio.permissions"):
        response = await broker.session_request_permission(request("allow_once", "reject_always"))
    assert selected(response) == "opt-reject_always"
    assert [(a.option_id, a.decided_by) for a in answers] == [("opt-reject_always", "fallback")]
    assert any(
        "not one of the offered options" in r.getMessage() and repr(choice) in r.getMessage() for r in caplog.records
    )

    # nothing to reject with: the fallback answers cancelled, never an invented option
    response = await broker.session_request_permission(request("allow_once"))
    assert selected(response) is None


async def test_a_policy_that_raises_is_logged_and_answered_as_deny_all(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(req: v1.RequestPermissionRequest) -> str | None:
        raise RuntimeError("dialog crashed")

    broker = PermissionBroker(broken)
    with caplog.at_level(logging.ERROR, logger="acp_trio.permissions"):
        response = await broker.session_request_permission(request(*ALL_KINDS))
    assert selected(response) == "opt-reject_once"
    [record] = [r for r in caplog.records if r.name == "acp_trio.permissions"]
    assert "raised" in record.getMessage()
    assert record.exc_info is not None and "dialog crashed" in str(record.exc_info[1])


async def test_a_policy_that_does_not_decide_in_time_is_cancelled_and_on_timeout_decides(
    autojump_clock: trio.abc.Clock,
) -> None:
    exited: list[str] = []
    answers: list[PendingPermission] = []
    broker = PermissionBroker(blocking(exited=exited), timeout=5, on_answer=answers.append)
    start = trio.current_time()
    with trio.fail_after(DEADLINE):
        response = await broker.session_request_permission(request(*ALL_KINDS))
    assert trio.current_time() - start == pytest.approx(5)
    assert selected(response) == "opt-reject_once"  # the default on_timeout: deny_all
    assert exited == ["call_1"]  # the policy was cancelled
    assert [a.decided_by for a in answers] == ["timeout"]
    assert answers[0].deadline == pytest.approx(start + 5)

    broker.on_timeout = allow_all()
    with trio.fail_after(DEADLINE):
        response = await broker.session_request_permission(request(*ALL_KINDS))
    assert selected(response) == "opt-allow_once"


async def test_an_on_timeout_that_does_not_decide_either_gets_the_deny_fallback(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    broker = PermissionBroker(blocking(), timeout=3, on_timeout=blocking())
    start = trio.current_time()
    with caplog.at_level(logging.ERROR, logger="acp_trio.permissions"), trio.fail_after(DEADLINE):
        response = await broker.session_request_permission(request("allow_once", "reject_always"))
    assert trio.current_time() - start == pytest.approx(6)
    assert selected(response) == "opt-reject_always"
    assert any("did not decide" in r.getMessage() for r in caplog.records)


async def test_pending_requests_are_listed_and_can_be_answered_directly() -> None:
    broker = PermissionBroker(blocking())
    responses: dict[str, v1.RequestPermissionResponse] = {}

    async def call(req: v1.RequestPermissionRequest) -> None:
        responses[req.tool_call.tool_call_id] = await broker.session_request_permission(req)

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, request(*ALL_KINDS, tool_call_id="a"))
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(call, request(*ALL_KINDS, tool_call_id="b"))
            nursery.start_soon(call, request(*ALL_KINDS, session_id="s2", tool_call_id="c"))
            await trio.testing.wait_all_tasks_blocked()

            assert [p.tool_call_id for p in broker.pending("s1")] == ["a", "b"]
            assert [p.tool_call_id for p in broker.pending()] == ["a", "b", "c"]
            assert broker.pending("nope") == []
            first = broker.pending("s1")[0]
            assert not first.answered and first.deadline == math.inf
            assert first.options == request(*ALL_KINDS).options
            with pytest.raises(ValueError, match="not offered"):
                first.select("opt-made-up")
            assert first.select("opt-allow_always") is True
            assert first.select("opt-reject_once") is False  # already answered: unchanged
            assert first.cancel() is False
            assert broker.cancel_session("s1") == 1  # only b was still pending
            assert broker.cancel_all() == 1  # c
    assert {k: selected(v) for k, v in responses.items()} == {"a": "opt-allow_always", "b": None, "c": None}
    assert broker.pending() == []
    assert "decided_by='select'" in repr(first)


async def test_an_on_answer_callback_that_raises_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def broken(entry: PendingPermission) -> None:
        raise RuntimeError("audit log full")

    broker = PermissionBroker(allow_all(), on_answer=broken)
    with caplog.at_level(logging.ERROR, logger="acp_trio.permissions"):
        response = await broker.session_request_permission(request(*ALL_KINDS))
    assert selected(response) == "opt-allow_once"
    assert any("on_answer callback" in r.getMessage() for r in caplog.records)


# -- end to end ----------------------------------------------------------------------------------


class PermissionAgent:
    """An agent whose prompt turn reports a tool call and asks permission for it (shielded, so a
    cancelled turn still sees the client's answer, as the AgentSideConnection docstring says)."""

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.tool_kind: v1.ToolKind = "execute"
        self.kind_in_request = True
        self.offered: list[v1.PermissionOptionKind] = ALL_KINDS
        self.outcomes: list[Any] = []

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        client = self.conn.client
        await client.session_update(
            v1.SessionNotification(
                session_id=params.session_id,
                update=v1.ToolCallSessionUpdate(tool_call_id="call_1", title="Run it", kind=self.tool_kind),
            )
        )
        req = request(*self.offered, session_id=params.session_id, tool_kind=None)
        if self.kind_in_request:
            req.tool_call.kind = self.tool_kind
        with trio.CancelScope(shield=True):
            response = await client.session_request_permission(req)
        self.outcomes.append(response.outcome)
        await trio.sleep(1)  # the turn goes on: a session/cancel arriving now ends it
        return v1.PromptResponse(stop_reason="end_turn")


async def run_turn(
    client: Any, configure: Callable[[PermissionAgent], None] = lambda agent: None, tap: Any = None
) -> tuple[PermissionAgent, str]:
    agents: list[PermissionAgent] = []

    def make_agent(conn: acp_trio.AgentSideConnection) -> PermissionAgent:
        agent = PermissionAgent(conn)
        configure(agent)
        agents.append(agent)
        return agent

    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(make_agent, client, tap=tap) as (_agent_conn, client_conn):
            await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
            response = await client_conn.agent.session_prompt(
                v1.PromptRequest(session_id="s1", prompt=[v1.TextContentBlock(text="go")])
            )
    return agents[0], response.stop_reason


def kind(tool_kind: v1.ToolKind) -> Callable[[PermissionAgent], None]:
    def configure(agent: PermissionAgent) -> None:
        agent.tool_kind = tool_kind

    return configure


@pytest.mark.parametrize(
    ("make_policy", "tool_kind", "expected"),
    [
        (allow_all, "execute", "opt-allow_once"),
        (deny_all, "read", "opt-reject_once"),
        (lambda: allow_kinds({"read", "search"}), "read", "opt-allow_once"),
        (lambda: allow_kinds({"read", "search"}), "execute", "opt-reject_once"),
        (lambda: allow_kinds({"read"}, otherwise=allow_all()), "edit", "opt-allow_once"),
    ],
)
async def test_each_policy_answers_the_agent_over_a_connection(
    make_policy: Callable[[], PermissionPolicy], tool_kind: v1.ToolKind, expected: str, autojump_clock: trio.abc.Clock
) -> None:
    lines: list[tuple[str, bytes]] = []
    broker = PermissionBroker(make_policy())
    agent, stop_reason = await run_turn(broker, kind(tool_kind), tap=lambda d, line: lines.append((d, line)))
    assert agent.outcomes == [v1.SelectedRequestPermissionOutcome(option_id=expected)]
    assert stop_reason == "end_turn"
    wire = [orjson.loads(line) for direction, line in lines if direction == "out"]
    results = [m["result"] for m in wire if "result" in m and "outcome" in m["result"]]
    assert results == [{"outcome": {"outcome": "selected", "optionId": expected}}]


async def test_an_ask_callback_answers_the_agent_over_a_connection(autojump_clock: trio.abc.Clock) -> None:
    asked: list[list[str]] = []

    async def dialog(req: v1.RequestPermissionRequest) -> str | None:
        asked.append([option.name for option in req.options])
        await trio.sleep(0)
        return "opt-allow_always"

    agent, _ = await run_turn(PermissionBroker(ask(dialog)))
    assert asked == [ALL_KINDS]
    assert agent.outcomes == [v1.SelectedRequestPermissionOutcome(option_id="opt-allow_always")]


async def test_allow_kinds_uses_the_kind_from_the_tool_call_update_the_request_refers_to(
    autojump_clock: trio.abc.Clock,
) -> None:
    # the request names the tool call by id only; its kind came with the earlier tool_call update,
    # which the runtime folds into the session state before the permission request starts
    states = SessionStates()
    broker = PermissionBroker(allow_kinds({"read"}, kind_of=states.tool_kind))

    class Client:
        session_update = states.session_update
        session_request_permission = broker.session_request_permission

    def configure(agent: PermissionAgent) -> None:
        agent.tool_kind, agent.kind_in_request = "read", False

    agent, _ = await run_turn(Client(), configure)
    assert agent.outcomes == [v1.SelectedRequestPermissionOutcome(option_id="opt-allow_once")]
    agent, _ = await run_turn(Client(), kind("execute"))
    assert agent.outcomes == [v1.SelectedRequestPermissionOutcome(option_id="opt-reject_once")]


async def test_a_request_nobody_answers_is_answered_per_on_timeout_over_a_connection(
    autojump_clock: trio.abc.Clock,
) -> None:
    answered_at: list[float] = []
    broker = PermissionBroker(blocking(), timeout=20, on_answer=lambda e: answered_at.append(trio.current_time()))
    start = trio.current_time()
    agent, stop_reason = await run_turn(broker)
    assert agent.outcomes == [v1.SelectedRequestPermissionOutcome(option_id="opt-reject_once")]
    assert stop_reason == "end_turn"
    assert answered_at == [pytest.approx(start + 20)]


async def test_a_permission_request_pending_when_the_turn_is_cancelled_is_answered_cancelled(
    autojump_clock: trio.abc.Clock,
) -> None:
    asking = trio.Event()
    exited: list[str] = []
    answers: list[PendingPermission] = []
    broker = PermissionBroker(blocking(asking, exited), timeout=1000, on_answer=answers.append)
    lines: list[bytes] = []
    agents: list[PermissionAgent] = []

    def make_agent(conn: acp_trio.AgentSideConnection) -> PermissionAgent:
        agents.append(PermissionAgent(conn))
        return agents[-1]

    def tap(direction: str, line: bytes) -> None:
        if direction == "out":
            lines.append(line)

    stop_reasons: list[str] = []
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(make_agent, broker, tap=tap) as (_agent_conn, client_conn):
            await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1))

            async def prompt() -> None:
                response = await client_conn.agent.session_prompt(
                    v1.PromptRequest(session_id="s1", prompt=[v1.TextContentBlock(text="go")])
                )
                stop_reasons.append(response.stop_reason)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(prompt)
                await asking.wait()
                assert [p.tool_call_id for p in broker.pending("s1")] == ["call_1"]
                await client_conn.agent.session_cancel(v1.CancelNotification(session_id="s1"))
    assert agents[0].outcomes == [v1.CancelledRequestPermissionOutcome()]
    assert stop_reasons == ["cancelled"]
    assert broker.pending("s1") == [] and broker.pending() == []
    assert exited == ["call_1"]  # the policy's dialog was cancelled
    assert [(a.option_id, a.decided_by) for a in answers] == [(None, "session/cancel")]
    wire = [orjson.loads(line) for line in lines]
    assert [m["result"] for m in wire if "result" in m and "outcome" in m["result"]] == [
        {"outcome": {"outcome": "cancelled"}}
    ]
    assert trio.current_time() < 1000  # answered at once, not by the timeout


async def test_a_ui_answers_a_pending_request_over_a_connection(autojump_clock: trio.abc.Clock) -> None:
    asking = trio.Event()
    broker = PermissionBroker(blocking(asking))

    async def answer_when_asked() -> None:
        await asking.wait()
        [entry] = broker.pending("s1")
        entry.select("opt-allow_always")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer_when_asked)
        agent, _ = await run_turn(broker)
    assert agent.outcomes == [v1.SelectedRequestPermissionOutcome(option_id="opt-allow_always")]

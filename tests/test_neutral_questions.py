"""The version-neutral agent API (issue 33, step 4): permission requests and elicitation, written
once, seen on each wire (design rows T15-T19, T22; ``docs/protocol/v2/migration.mdx``
§ Permission requests, § The new prompt lifecycle).

v2 asks with a ``title`` and a ``subject`` and reports ``requires_action`` while the question
waits, ``running`` once answered; v1 asks about a tool call only, so a question about no tool call
gets a synthetic one, reported ``completed``/``failed`` after the answer.  ``session/cancel`` while
a question waits ends the turn ``cancelled`` on both, with the tool call reported cancelled (v1:
``failed`` plus ``_meta["acp-trio/status"]``).
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest
import trio
from _neutral_kit import Client, connected
from trio.testing import memory_stream_pair

from acp_schema import v1, v2
from acp_trio import AgentSideConnection, CapabilityError, neutral

BOTH = pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])


class Asking(neutral.Agent):
    """Asks one question per turn, chosen by the prompt's text; keeps what came back."""

    info = neutral.AgentInfo(name="asking", version="1")

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[Any] = []

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        if turn.text == "command":
            decision = await turn.ask_permission(
                "Run the tests?", description="pytest -q in /work", command=neutral.Command("pytest -q", "/work")
            )
            self.answers.append(decision)
        elif turn.text == "plain":
            self.answers.append(await turn.ask_permission("Go on?"))
        elif turn.text == "tool":
            call = await turn.tool("Edit a.txt", kind="edit")
            decision = await call.ask_permission("Allow editing a.txt?")
            self.answers.append(decision)
            if decision.cancelled:
                await call.update(status="failed")  # never sent: the turn is cancelled
            await call.complete(["edited"])
        elif turn.text == "form":
            schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
            self.answers.append(await turn.elicit("Your name?", schema))
        await turn.say("after")
        return "end_turn"


@BOTH
async def test_a_command_permission_is_a_command_subject_on_v2_and_a_synthetic_execute_tool_call_on_v1(
    variant: ModuleType,
) -> None:
    agent = Asking()
    async with connected(agent, Client(variant)) as wire:
        session_id = await wire.new_session()
        await wire.prompt(session_id, "command")
    assert agent.answers == [neutral.Decision(neutral.ALLOW_OR_REJECT[0])]
    assert agent.answers[0].allowed
    updates = wire.updates()
    if variant is v1:
        assert wire.kinds() == ["tool_call", "permission", "tool_call_update", "agent_message_chunk"]
        synthetic, permission, done, _ = updates
        call_id = synthetic["toolCallId"]
        assert synthetic == {
            "sessionUpdate": "tool_call",
            "toolCallId": call_id,
            "title": "pytest -q",
            "kind": "execute",
            "status": "pending",
            "rawInput": {"command": "pytest -q", "cwd": "/work"},
        }
        assert permission["permission"]["toolCall"] == {"toolCallId": call_id}
        assert permission["permission"]["_meta"] == {
            "acp-trio/title": "Run the tests?",
            "acp-trio/description": "pytest -q in /work",
        }
        assert done == {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "completed"}
    else:
        assert wire.kinds() == [
            "user_message",
            "state:running",
            "state:requires_action",
            "permission",
            "state:running",
            "agent_message_chunk",
            "state:idle",
        ]
        request = updates[3]["permission"]
        assert request["title"] == "Run the tests?"
        assert request["description"] == "pytest -q in /work"
        assert request["subject"] == {"type": "command", "command": "pytest -q", "cwd": "/work"}
        assert "toolCall" not in request


@BOTH
async def test_a_rejected_question_about_nothing_is_a_failed_synthetic_tool_call_on_v1_and_no_subject_on_v2(
    variant: ModuleType,
) -> None:
    agent = Asking()
    async with connected(agent, Client(variant, permission="reject")) as wire:
        session_id = await wire.new_session()
        await wire.prompt(session_id, "plain")
    (decision,) = agent.answers
    assert decision.option == neutral.ALLOW_OR_REJECT[1] and not decision.allowed and not decision.cancelled
    updates = wire.updates()
    if variant is v1:
        synthetic, permission, done, _ = updates
        assert (synthetic["kind"], synthetic["title"], synthetic["status"]) == ("other", "Go on?", "pending")
        assert "rawInput" not in synthetic
        assert permission["permission"]["toolCall"] == {"toolCallId": synthetic["toolCallId"]}
        assert done["status"] == "failed" and done["toolCallId"] == synthetic["toolCallId"]
    else:
        (request,) = [u["permission"] for u in updates if "permission" in u]
        assert request["title"] == "Go on?"
        assert "subject" not in request and "description" not in request


@BOTH
async def test_an_answer_naming_no_offered_option_is_never_an_approval(variant: ModuleType) -> None:
    agent = Asking()
    async with connected(agent, Client(variant, permission="sudo")) as wire:
        session_id = await wire.new_session()
        await wire.prompt(session_id, "tool")
    assert agent.answers == [neutral.Decision(None)]
    assert not agent.answers[0].allowed


@BOTH
async def test_session_cancel_while_a_permission_request_waits_cancels_the_turn_and_reports_the_tool_call_cancelled(
    variant: ModuleType,
) -> None:
    agent = Asking()
    client = Client(variant, permission="wait")  # only session/cancel answers it (the runtime: "cancelled")
    async with connected(agent, client) as wire:
        session_id = await wire.new_session()
        results: list[Any] = []

        async def prompt() -> None:
            results.append(await wire.prompt(session_id, "tool"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(prompt)
            await client.asked.wait()
            await wire.cancel(session_id)
    assert agent.answers == [neutral.Decision(None, cancelled=True)]
    updates = wire.updates()
    if variant is v1:
        assert [r.stop_reason for r in results] == ["cancelled"]
        assert wire.kinds() == ["tool_call", "permission", "tool_call_update"]
        cancelled = updates[-1]
        assert cancelled["status"] == "failed"  # v1 lacks "cancelled" (row T10)
        assert cancelled["_meta"] == {"acp-trio/status": "cancelled"}
    else:
        assert wire.kinds() == [
            "user_message",
            "state:running",
            "tool_call_update",
            "state:requires_action",
            "permission",
            "tool_call_update",
            "state:idle",
        ]  # no running after the cancelled question, nothing the agent did after it
        assert updates[-2]["status"] == "cancelled"
        assert updates[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}


@BOTH
async def test_an_elicitation_waits_in_requires_action_on_v2_and_returns_the_accepted_content(
    variant: ModuleType,
) -> None:
    agent = Asking()
    async with connected(agent, Client(variant), elicitation=True) as wire:
        session_id = await wire.new_session()
        await wire.prompt(session_id, "form")
    assert agent.answers == [neutral.Elicited("accept", {"name": "x"})]
    assert agent.answers[0].accepted
    updates = wire.updates()
    (request,) = [u["elicitation"] for u in updates if "elicitation" in u]
    assert request["mode"] == "form" and request["message"] == "Your name?" and request["sessionId"] == session_id
    assert request["requestedSchema"]["properties"] == {"name": {"type": "string"}}
    if variant is v2:
        kinds = wire.kinds()
        at = kinds.index("elicitation")
        assert kinds[at - 1 : at + 2] == ["state:requires_action", "elicitation", "state:running"]


@BOTH
async def test_session_cancel_while_an_elicitation_waits_returns_cancel(variant: ModuleType) -> None:
    agent = Asking()
    client = Client(variant, elicitation="wait")
    async with connected(agent, client, elicitation=True) as wire:
        session_id = await wire.new_session()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wire.prompt, session_id, "form")
            await client.asked.wait()
            await wire.cancel(session_id)
    assert agent.answers == [neutral.Elicited("cancel")]
    assert "agent_message_chunk" not in wire.kinds()  # the turn ended at its next checkpoint


class Eliciting(neutral.Agent):
    info = neutral.AgentInfo(name="eliciting", version="1")

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[Exception] = []
        self.could: list[bool] = []

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        self.could.append(turn.session.client.can_elicit("form"))
        try:
            await turn.elicit_url("Sign in", "https://example.com/login")
        except CapabilityError as exc:
            self.errors.append(exc)
        return "end_turn"


@BOTH
async def test_an_elicitation_the_client_did_not_offer_raises_capability_error_and_sends_nothing(
    variant: ModuleType,
) -> None:
    agent = Eliciting()
    async with connected(agent, Client(variant), elicitation=True) as wire:  # form offered, url not
        session_id = await wire.new_session()
        await wire.prompt(session_id)
    assert agent.could == [True]
    (error,) = agent.errors
    assert "elicitation.url" in str(error)
    assert "elicitation" not in wire.kinds()
    assert "state:requires_action" not in wire.kinds()


def test_a_decision_allows_only_an_allow_option() -> None:
    assert neutral.Decision(neutral.Option("a", "A", "allow_always")).allowed
    assert not neutral.Decision(neutral.Option("r", "R", "reject_always")).allowed
    assert not neutral.Decision(neutral.Option("x", "X", "_custom")).allowed
    assert not neutral.Decision(None, cancelled=True).allowed


async def test_a_client_that_never_answers_a_cancelled_question_is_given_up_on_after_the_grace(
    autojump_clock: trio.abc.Clock,
) -> None:
    """prompt-turn.mdx: a client MUST answer a pending permission request ``cancelled`` once it sent
    ``session/cancel``.  One that does not holds the turn for :data:`~acp_trio.neutral.CANCEL_GRACE`
    seconds at most: the question is abandoned, the tool call reported cancelled, the prompt answered
    ``cancelled``.  (A raw client over memory streams: the runtime's own client always answers.)"""
    agent = Asking()
    agent_stream, client_stream = memory_stream_pair()
    buffer = b""

    async def send(message: dict[str, Any]) -> None:
        await client_stream.send_all(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    async def read() -> dict[str, Any]:
        nonlocal buffer
        while b"\n" not in buffer:
            buffer += await client_stream.receive_some()
        line, buffer = buffer.split(b"\n", 1)
        return dict(json.loads(line))

    async def answer(request_id: int) -> dict[str, Any]:
        while True:
            message = await read()
            if message.get("id") == request_id and "method" not in message:
                return message

    with trio.fail_after(60):  # virtual seconds
        async with AgentSideConnection(agent, agent_stream, agent_stream):
            await send({"id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
            await answer(0)
            await send({"id": 1, "method": "session/new", "params": {"cwd": "/work", "mcpServers": []}})
            session_id = (await answer(1))["result"]["sessionId"]
            prompt = [{"type": "text", "text": "tool"}]
            await send({"id": 2, "method": "session/prompt", "params": {"sessionId": session_id, "prompt": prompt}})
            while (question := await read()).get("method") != "session/request_permission":
                pass
            cancelled_at = trio.current_time()
            await send({"method": "session/cancel", "params": {"sessionId": session_id}})
            after = []
            while True:
                message = await read()
                if message.get("id") == 2:
                    break
                after.append(message)
            waited = trio.current_time() - cancelled_at
    assert message["result"] == {"stopReason": "cancelled"}
    assert neutral.CANCEL_GRACE <= waited < neutral.CANCEL_GRACE + 1
    assert agent.answers == [neutral.Decision(None, cancelled=True)]
    withdrawn, *rest = after  # the runtime withdraws the abandoned request (v1: a no-op to the client)
    assert withdrawn == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": question["id"]}}
    updates = [m["params"]["update"] for m in rest]
    assert [(u["sessionUpdate"], u["status"]) for u in updates] == [("tool_call_update", "failed")]
    assert updates[0]["_meta"] == {"acp-trio/status": "cancelled"}


class CustomOption(neutral.Agent):
    info = neutral.AgentInfo(name="custom-option", version="1")

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[Exception] = []

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        call = await turn.tool("Deploy")
        options = [neutral.Option("later", "Ask me later", "_defer"), *neutral.ALLOW_OR_REJECT]
        try:
            await call.ask_permission("Deploy now?", options=options)
        except neutral.VersionError as exc:
            self.errors.append(exc)
        return "end_turn"


@BOTH
async def test_an_option_kind_v1_lacks_raises_version_error_on_v1_and_is_sent_on_v2(variant: ModuleType) -> None:
    agent = CustomOption()
    async with connected(agent, Client(variant)) as wire:
        session_id = await wire.new_session()
        await wire.prompt(session_id)
    questions = [u["permission"] for u in wire.updates() if "permission" in u]
    if variant is v1:
        (error,) = agent.errors
        assert error.version == 1 and "permission option kind" in str(error)
        assert questions == []  # nothing sent
    else:
        assert agent.errors == []
        assert [o["kind"] for o in questions[0]["options"]] == ["_defer", "allow_once", "reject_once"]

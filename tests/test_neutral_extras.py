"""The version-neutral agent API: a turn's end with usage and ``_meta`` (``TurnEnd``), a failed tool
call's ``rawOutput``, usage cost, a session's background tasks (``Session.start_soon``) and the
mode option helper (``mode_option``), on both protocol versions."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
import trio
from _neutral_kit import Client, connected

from acp_schema import v1, v2
from acp_trio import neutral

BOTH = pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])


class Ending(neutral.Agent):
    """A turn with a failed tool call, usage with a cost, and an end with usage and ``_meta``."""

    info = neutral.AgentInfo(name="ending", version="1")

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason | neutral.TurnEnd:
        call = await turn.tool("Run it", kind="execute")
        await call.fail("exit 2", raw_output={"stderr": "boom"})
        await turn.usage(120, 1000, cost=neutral.Cost(0.25, "USD"))
        if turn.text == "plain":
            return "end_turn"
        usage = neutral.Usage(total_tokens=30, input_tokens=20, output_tokens=10, thought_tokens=4)
        return neutral.TurnEnd("max_tokens", usage=usage, meta={"vendor/trace": "t1"})


def _end_meta(variant: ModuleType, wire: Any, answer: Any) -> tuple[str, Any]:
    """The stop reason and the ``_meta`` of the turn's end on the wire: v1 the prompt answer, v2 idle."""
    if variant is v1:
        result = next(m["result"] for m in reversed(wire.messages()) if "stopReason" in (m.get("result") or {}))
        return result["stopReason"], result.get("_meta")
    idle = next(u for u in reversed(wire.updates()) if u.get("state") == "idle")
    return idle["stopReason"], idle.get("_meta")


@BOTH
async def test_a_turn_end_carries_its_usage_and_meta_and_a_failed_call_its_raw_output(variant: ModuleType) -> None:
    async with connected(Ending(), Client(variant)) as wire:
        session_id = await wire.new_session()
        answer = await wire.prompt(session_id, "hi")
        updates = wire.updates()
        stop_reason, meta = _end_meta(variant, wire, answer)
        wire.clear()
        await wire.prompt(session_id, "plain")
        plain = _end_meta(variant, wire, None)
    assert stop_reason == "max_tokens"
    assert meta == {
        "vendor/trace": "t1",
        "acp-trio/usage": {"totalTokens": 30, "inputTokens": 20, "outputTokens": 10, "thoughtTokens": 4},
    }
    assert plain == ("end_turn", None)
    failed = [u for u in updates if u.get("status") == "failed"]
    assert failed and failed[-1]["rawOutput"] == {"stderr": "boom"}
    usage = next(u for u in updates if u.get("sessionUpdate") == "usage_update")
    assert (usage["used"], usage["size"], usage["cost"]) == (120, 1000, {"amount": 0.25, "currency": "USD"})


class Background(neutral.Agent):
    """Each session starts a background task that records how it ended."""

    info = neutral.AgentInfo(name="background", version="1")

    def __init__(self) -> None:
        super().__init__()
        self.started = trio.Event()
        self.ended: list[str] = []

    async def new_session(self, session: neutral.Session) -> None:
        session.start_soon(self._watch, session.id)

    async def _watch(self, session_id: str) -> None:
        try:
            self.started.set()
            await trio.sleep_forever()
        finally:
            self.ended.append(session_id)

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        return "end_turn"


@pytest.mark.parametrize("how", ["close", "delete", "connection-end"])
@BOTH
async def test_a_sessions_background_task_ends_with_the_session_or_its_connection(
    variant: ModuleType, how: str
) -> None:
    agent = Background()
    async with connected(agent, Client(variant)) as wire:
        session_id = await wire.new_session()
        await agent.started.wait()
        await wire.prompt(session_id, "hi")  # a turn does not end it
        await trio.testing.wait_all_tasks_blocked()
        assert agent.ended == []
        if how == "close":
            await wire.agent.session_close(variant.CloseSessionRequest(session_id=session_id))
        elif how == "delete":
            await wire.agent.session_delete(variant.DeleteSessionRequest(session_id=session_id))
        if how != "connection-end":
            with trio.fail_after(5):
                while not agent.ended:
                    await trio.sleep(0)
            assert agent.ended == [session_id]
    assert agent.ended == [session_id]


def test_mode_option_is_a_select_of_category_mode_starting_at_the_first_choice_unless_told() -> None:
    choices = [neutral.Choice("ask", "Ask"), neutral.Choice("code", "Code")]
    option = neutral.mode_option(choices, description="How it works")
    assert option == neutral.ConfigOption(
        "mode", "Mode", current="ask", choices=tuple(choices), category="mode", description="How it works"
    )
    assert neutral.mode_option(choices, current="code").current == "code"
    with pytest.raises(ValueError, match="not one of"):
        neutral.mode_option(choices, current="yolo")
    with pytest.raises(ValueError, match="at least one choice"):
        neutral.mode_option([])

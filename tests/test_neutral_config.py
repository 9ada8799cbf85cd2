"""The version-neutral agent API (issue 33, step 6): config options and modes, written once, seen on
each wire (design rows L4, L10-L12; ``docs/protocol/v2/migration.mdx`` § Session modes become config
options; v1 ``session-config-options.mdx`` § Relationship to Session Modes).

The author lists :class:`~acp_trio.neutral.ConfigOption` s; the one of ``category: "mode"`` is also
v1's ``modes`` (sent with ``configOptions``), v1's ``session/set_mode`` sets it, and a change of it
reaches a v1 client as ``config_option_update`` plus ``current_mode_update``; v2 has only the
option (``configId``) and ``config_option_update``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from _neutral_kit import Client, connected

from acp_schema import v1, v2
from acp_trio import RequestError, neutral

BOTH = pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])

MODE = neutral.ConfigOption(
    "mode",
    "Mode",
    current="ask",
    category="mode",
    choices=(neutral.Choice("ask", "Ask", "Ask first"), neutral.Choice("code", "Code")),
)
VERBOSE = neutral.ConfigOption("verbose", "Verbose", current=False)


class Configured(neutral.Agent):
    info = neutral.AgentInfo(name="configured", version="1")

    def __init__(self) -> None:
        super().__init__()
        self.set: list[tuple[str, str | bool]] = []

    def config_options(self, session: neutral.Session) -> list[neutral.ConfigOption]:
        return [MODE, VERBOSE]

    async def set_config_option(self, session: neutral.Session, config_id: str, value: str | bool) -> None:
        await super().set_config_option(session, config_id, value)
        self.set.append((config_id, value))

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        await turn.session.set_config("mode", "code")
        await turn.session.set_config("verbose", True)
        return "end_turn"


def setup_result(wire: Any) -> dict[str, Any]:
    (answer,) = [
        m["result"] for m in wire.messages() if isinstance(m.get("result"), dict) and "sessionId" in m["result"]
    ]
    return dict(answer)


async def test_a_v1_session_gets_the_mode_option_as_modes_too() -> None:
    async with connected(Configured(), Client(v1)) as wire:
        await wire.new_session()
        answer = setup_result(wire)
    assert answer["modes"] == {
        "currentModeId": "ask",
        "availableModes": [{"id": "ask", "name": "Ask", "description": "Ask first"}, {"id": "code", "name": "Code"}],
    }
    mode, verbose = answer["configOptions"]
    assert (mode["id"], mode["type"], mode["category"], mode["currentValue"]) == ("mode", "select", "mode", "ask")
    assert verbose == {"id": "verbose", "name": "Verbose", "type": "boolean", "currentValue": False}


async def test_a_v2_session_gets_config_options_only() -> None:
    async with connected(Configured(), Client(v2)) as wire:
        await wire.new_session()
        answer = setup_result(wire)
    assert "modes" not in answer
    mode, verbose = answer["configOptions"]
    assert (mode["configId"], mode["currentValue"]) == ("mode", "ask")
    assert [o["value"] for o in mode["options"]] == ["ask", "code"]
    assert verbose == {"configId": "verbose", "name": "Verbose", "type": "boolean", "currentValue": False}


@BOTH
async def test_the_agent_changing_the_mode_is_config_option_update_and_on_v1_current_mode_update(
    variant: ModuleType,
) -> None:
    agent = Configured()
    async with connected(agent, Client(variant)) as wire:
        session_id = await wire.new_session()
        wire.clear()
        await wire.prompt(session_id)
    session = agent.sessions[session_id]
    assert session.config == {"mode": "code", "verbose": True}
    updates = [u for u in wire.updates() if u["sessionUpdate"] not in ("user_message", "state_update")]
    if variant is v1:
        assert [u["sessionUpdate"] for u in updates] == [
            "config_option_update",
            "current_mode_update",
            "config_option_update",  # the mode did not change: no current_mode_update
        ]
        assert updates[1] == {"sessionUpdate": "current_mode_update", "currentModeId": "code"}
        assert [o["currentValue"] for o in updates[2]["configOptions"]] == ["code", True]
        assert updates[0]["configOptions"][0]["id"] == "mode"
    else:
        assert [u["sessionUpdate"] for u in updates] == ["config_option_update", "config_option_update"]
        assert [o["currentValue"] for o in updates[1]["configOptions"]] == ["code", True]
        assert updates[0]["configOptions"][0]["configId"] == "mode"


async def test_v1_set_mode_sets_the_mode_option_and_keeps_modes_and_options_in_sync() -> None:
    agent = Configured()
    async with connected(agent, Client(v1)) as wire:
        session_id = await wire.new_session()
        wire.clear()
        await wire.agent.session_set_mode(v1.SetSessionModeRequest(session_id=session_id, mode_id="code"))
        with pytest.raises(RequestError) as refused:
            await wire.agent.session_set_mode(v1.SetSessionModeRequest(session_id=session_id, mode_id="yolo"))
        answer = await wire.agent.session_set_config_option(
            v1.ValueIdSetSessionConfigOptionRequest(session_id=session_id, config_id="mode", value="ask")
        )
    assert agent.set == [("mode", "code"), ("mode", "ask")]
    assert agent.sessions[session_id].config["mode"] == "ask"
    assert refused.value.code == -32602 and "'yolo' is not one of 'mode'" in str(refused.value.data)
    assert [o.current_value for o in answer.config_options] == ["ask", False]
    modes = [u["currentModeId"] for u in wire.updates() if u["sessionUpdate"] == "current_mode_update"]
    assert modes == ["code", "ask"]


@BOTH
async def test_set_config_option_checks_the_value_against_the_option(variant: ModuleType) -> None:
    agent = Configured()
    async with connected(agent, Client(variant)) as wire:
        session_id = await wire.new_session()
        boolean = variant.BooleanSetSessionConfigOptionRequest
        answer = await wire.agent.session_set_config_option(
            boolean(session_id=session_id, config_id="verbose", value=True)
        )
        errors = []
        for config_id, value in (("verbose", "yes"), ("nope", "x")):
            request: Any = (
                v1.ValueIdSetSessionConfigOptionRequest if variant is v1 else v2.IdSetSessionConfigOptionRequest
            )(session_id=session_id, config_id=config_id, value=value)
            with pytest.raises(RequestError) as caught:
                await wire.agent.session_set_config_option(request)
            errors.append(caught.value)
    assert [o.current_value for o in answer.config_options] == ["ask", True]
    assert agent.set == [("verbose", True)]
    assert [e.code for e in errors] == [-32602, -32602]
    assert "boolean option" in str(errors[0].data) and "no config option 'nope'" in str(errors[1].data)

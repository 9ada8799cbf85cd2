"""``python -m acp_trio.integrations.pydantic_ai module:attr``: a pydantic-ai agent served over real
stdio, driven by acp-trio's client in both protocol versions; the command line's usage errors."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
from _neutral_kit import Client, Wire, v1_caps, v2_caps

from acp_schema import v1, v2
from acp_trio import spawn_agent

TESTS = Path(__file__).parent
COMMAND = ["-m", "acp_trio.integrations.pydantic_ai"]


async def _initialize(conn: Any, variant: ModuleType) -> str:
    if variant is v1:
        answer = await conn.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=v1_caps()))
        name: str = answer.agent_info.name
    else:
        info = v2.Implementation(name="t", version="1")
        answer = await conn.initialize(v2.InitializeRequest(protocol_version=2, info=info, capabilities=v2_caps()))
        name = answer.info.name
    return name


def _texts(wire: Wire) -> str:
    return "".join(u["content"]["text"] for u in wire.updates() if u.get("sessionUpdate") == "agent_message_chunk")


@pytest.mark.one_interpreter  # spawns Python processes that import pydantic-ai: the command line's subject
@pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])
async def test_a_turn_with_tools_and_an_approval_over_stdio_then_a_load_in_a_new_process(
    variant: ModuleType, tmp_path: Path
) -> None:
    received: list[bytes] = []
    tap = lambda d, data: received.append(data) if d == "in" else None  # noqa: E731
    client = Client(variant, permission="allow-once")
    args = [*COMMAND, "test_pydantic_ai_agents:agent", "--name", "scripted", "--store", str(tmp_path / "s.db")]
    with trio.fail_after(60):
        async with spawn_agent(sys.executable, args, client={variant: client}, cwd=TESTS, tap=tap) as conn:
            assert await _initialize(conn, variant) == "scripted"
            wire = Wire(conn, client, received)
            session = await wire.new_session(str(tmp_path))
            await wire.prompt(session, "tools")
            await wire.prompt(session, "delete")
            updates = wire.updates()
            wire.clear()
            await wire.prompt(session, "history")
            kept = _texts(wire)
    chunks = "".join(u["content"]["text"] for u in updates if u.get("sessionUpdate") == "agent_message_chunk")
    assert chunks == "results: read_file=contents of /work/a.txt; add=5results: delete_file=deleted /work/old.txt"
    asked = [u["permission"] for u in updates if "permission" in u]
    assert len(asked) == 1
    if variant is v1:
        assert asked[0]["toolCall"]["toolCallId"] == "d1"
    else:
        assert asked[0]["subject"]["toolCall"]["toolCallId"] == "d1"
    done = [u for u in updates if u.get("toolCallId") == "d1" and u.get("status") == "completed"]
    assert done and done[-1]["rawOutput"]["content"] == "deleted /work/old.txt"
    assert kept.startswith("U:tools | C:read_file{'path': '/work/a.txt'} | C:add{'a': 2, 'b': 3} | R:read_file=")
    # a new process on the same store: the model continues with the same history
    received.clear()
    with trio.fail_after(60):
        async with spawn_agent(sys.executable, args, client={variant: client}, cwd=TESTS, tap=tap) as conn:
            await _initialize(conn, variant)
            wire = Wire(conn, client, received)
            if variant is v1:
                await wire.agent.session_load(
                    v1.LoadSessionRequest(session_id=session, cwd=str(tmp_path), mcp_servers=[])
                )
            else:
                await wire.agent.session_resume(v2.ResumeSessionRequest(session_id=session, cwd=str(tmp_path)))
            wire.clear()
            await wire.prompt(session, "history")
            rebuilt = _texts(wire)
    assert rebuilt == f"{kept} | U:history | T:{kept}"


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("nocolon", "expected module:attr"),
        ("no_such_module_xyz:agent", "no module named 'no_such_module_xyz'"),
        ("test_pydantic_ai_agents:nothing", "has no attribute 'nothing'"),
        ("test_pydantic_ai_agents:STREAMED", "is 'list', not a pydantic_ai Agent"),
        ("test_pydantic_ai_agents:agent --model nosuch", "--model nosuch: pydantic-ai knows no such model"),
    ],
)
def test_a_usage_error_names_what_is_wrong(
    reference: str, message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from acp_trio.integrations.pydantic_ai.__main__ import main

    monkeypatch.chdir(TESTS)
    with pytest.raises(SystemExit) as exited:
        main(reference.split())
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_the_guides_zed_entry_gives_the_command_line_arguments_it_takes() -> None:
    import json
    import re

    from acp_trio.integrations.pydantic_ai.__main__ import parse_args

    guide = (TESTS.parent / "docs" / "site" / "guides" / "pydantic-ai.md").read_text(encoding="utf-8")
    [block] = re.findall(r"```json\n(.*?)```", guide, re.S)
    [server] = json.loads(block)["agent_servers"].values()
    assert server["args"][:2] == ["-m", "acp_trio.integrations.pydantic_ai"] and server["command"].endswith("/python")
    parsed = parse_args(server["args"][2:])
    assert (parsed.agent, parsed.store) == ("my_agent:agent", "/path/to/sessions.db")
    assert "PYTHONPATH" in server["env"]


def test_the_command_line_builds_the_agent_it_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from acp_trio.integrations.pydantic_ai import PydanticAIAgent
    from acp_trio.integrations.pydantic_ai.__main__ import build, parse_args

    monkeypatch.chdir(TESTS)
    agent = build(parse_args(["test_pydantic_ai_agents:agent", "--name", "n", "--protocol", "2", "--model", "test"]))
    assert (agent.info.name, agent.versions, list(agent.models)) == ("n", (2,), ["test"])
    assert agent.store is None
    made = build(parse_args(["test_pydantic_ai_agents:make_agent"]))  # a factory: called
    assert made.info.name == "test-pydantic-ai" and made.agent is not agent.agent
    ready = build(parse_args(["test_pydantic_ai_agents:served", "--store", str(tmp_path / "s.db")]))
    assert isinstance(ready, PydanticAIAgent) and list(ready.models) == ["scripted", "also-scripted"]
    assert ready.store is not None
    ready.store.close()

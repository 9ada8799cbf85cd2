"""The pydantic-ai integration (``acp_trio.integrations.pydantic_ai``, issue 34): real pydantic-ai
agents on scripted ``FunctionModel`` s (``test_pydantic_ai_agents``), served in memory to clients of
both protocol versions through the neutral layer, inside trio-asyncio's loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import pytest
import trio
from _neutral_kit import DEADLINE, Client, Wire, connected
from test_pydantic_ai_agents import make_agent

from acp_schema import v1, v2
from acp_trio.integrations.pydantic_ai import PydanticAIAgent, open_loop, tool_kind

BOTH = pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])


@asynccontextmanager
async def served(
    agent: PydanticAIAgent, client: Client, deadline: float = DEADLINE, **caps: bool
) -> AsyncIterator[Wire]:
    async with open_loop(), connected(agent, client, deadline=deadline, **caps) as wire:
        yield wire


def texts(wire: Wire, kind: str = "agent_message_chunk") -> str:
    return "".join(u["content"]["text"] for u in wire.updates() if u.get("sessionUpdate") == kind)


def tool_updates(wire: Wire) -> list[dict[str, Any]]:
    return [u for u in wire.updates() if u.get("sessionUpdate") in ("tool_call", "tool_call_update")]


@BOTH
async def test_text_streams_as_agent_message_chunks(variant: ModuleType) -> None:
    async with served(PydanticAIAgent(make_agent()), Client(variant)) as wire:
        session = await wire.new_session()
        wire.clear()
        answer = await wire.prompt(session, "hello")
        chunks = [u["content"]["text"] for u in wire.updates() if u.get("sessionUpdate") == "agent_message_chunk"]
        assert chunks == ["Hello", ", world"]
        if variant is v1:
            assert answer.stop_reason == "end_turn"
            usage = answer.meta["acp-trio/usage"]
        else:
            idle = next(u for u in wire.updates() if u.get("state") == "idle")
            assert idle["stopReason"] == "end_turn"
            usage = idle["_meta"]["acp-trio/usage"]
        assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
        assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]


@BOTH
async def test_thinking_streams_as_thought_chunks(variant: ModuleType) -> None:
    async with served(PydanticAIAgent(make_agent()), Client(variant)) as wire:
        session = await wire.new_session()
        wire.clear()
        await wire.prompt(session, "think")
        assert texts(wire, "agent_thought_chunk") == "pondering more"


@BOTH
async def test_tool_calls_are_acp_tool_calls_with_raw_input_and_output(variant: ModuleType) -> None:
    async with served(PydanticAIAgent(make_agent()), Client(variant)) as wire:
        session = await wire.new_session()
        wire.clear()
        await wire.prompt(session, "tools")
        updates = tool_updates(wire)
        first = {u["toolCallId"]: u for u in reversed(updates)}
        last = {u["toolCallId"]: u for u in updates}
        assert set(first) == {"c1", "c2"}
        assert first["c1"]["title"] == "read_file" and first["c1"]["kind"] == "read"
        assert first["c1"]["rawInput"] == {"path": "/work/a.txt"}
        assert first["c1"]["locations"] == [{"path": "/work/a.txt"}]
        assert first["c2"]["kind"] == "think"  # the tool's metadata {"acp_kind": "think"}
        assert first["c2"]["rawInput"] == {"a": 2, "b": 3}
        assert last["c1"]["status"] == "completed"
        assert last["c1"]["rawOutput"] == {
            "tool": "read_file",
            "outcome": "success",
            "content": "contents of /work/a.txt",
        }
        assert last["c2"]["rawOutput"]["content"] == 5
        assert last["c2"]["content"] == [{"type": "content", "content": {"type": "text", "text": "5"}}]
        if variant is v1:
            assert [u["sessionUpdate"] for u in updates][:2] == ["tool_call", "tool_call"]
        assert texts(wire) == "results: read_file=contents of /work/a.txt; add=5"


async def test_a_tool_title_function_titles_the_tool_calls() -> None:
    def title(name: str, args: Any) -> str:
        return f"{name}: {args.get('path', '')}".rstrip(": ")

    async with served(PydanticAIAgent(make_agent(), tool_title=title), Client(v2)) as wire:
        session = await wire.new_session()
        wire.clear()
        await wire.prompt(session, "tools")
        titles = {u["toolCallId"]: u["title"] for u in tool_updates(wire) if "title" in u}
        assert titles == {"c1": "read_file: /work/a.txt", "c2": "add"}


def test_tool_kind_guesses_from_the_name() -> None:
    assert [tool_kind(n) for n in ("read_file", "writeFile", "run_tests", "web-fetch", "add", "grep")] == [
        "read",
        "edit",
        "execute",
        "fetch",
        "other",
        "search",
    ]


@BOTH
@pytest.mark.parametrize("choice", ["allow-once", "reject-once"])
async def test_a_tool_needing_approval_asks_permission_about_its_tool_call(variant: ModuleType, choice: str) -> None:
    async with served(PydanticAIAgent(make_agent()), Client(variant, permission=choice)) as wire:
        session = await wire.new_session()
        wire.clear()
        await wire.prompt(session, "delete")
        updates = wire.updates()
        asked = [u["permission"] for u in updates if "permission" in u]
        assert len(asked) == 1
        about = asked[0]["toolCall"] if variant is v1 else asked[0]["subject"]["toolCall"]
        assert about["toolCallId"] == "d1"
        assert [o["optionId"] for o in asked[0]["options"]] == [
            "allow-once",
            "allow-always",
            "reject-once",
            "reject-always",
        ]
        calls = [u for u in tool_updates(wire) if u["toolCallId"] == "d1"]
        assert calls[0]["status"] == "pending" and calls[0]["rawInput"] == {"path": "/work/old.txt"}
        assert calls[0]["kind"] == "delete"
        if choice == "allow-once":
            assert calls[-1]["status"] == "completed"
            assert texts(wire) == "results: delete_file=deleted /work/old.txt"
        else:
            assert calls[-1]["status"] == "failed"
            assert calls[-1]["rawOutput"]["outcome"] == "denied"
            assert texts(wire).startswith("results: delete_file=The user denied this tool call.")


@BOTH
async def test_an_always_answer_holds_for_the_tool_in_the_session(variant: ModuleType) -> None:
    async with served(PydanticAIAgent(make_agent()), Client(variant, permission="allow-always")) as wire:
        session = await wire.new_session()
        await wire.prompt(session, "delete")
        wire.clear()
        await wire.prompt(session, "delete")
        assert not [u for u in wire.updates() if "permission" in u]
        assert texts(wire) == "results: delete_file=deleted /work/old.txt"
        other = await wire.new_session()
        wire.clear()
        await wire.prompt(other, "delete")
        assert len([u for u in wire.updates() if "permission" in u]) == 1


@BOTH
async def test_session_cancel_stops_the_model_stream_and_ends_the_turn_cancelled(variant: ModuleType) -> None:
    from test_pydantic_ai_agents import STOPPED

    STOPPED.clear()
    async with served(PydanticAIAgent(make_agent()), Client(variant)) as wire:
        session = await wire.new_session()
        ended: list[Any] = []
        done = trio.Event()

        async def turn() -> None:
            ended.append(await wire.prompt(session, "forever"))
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(turn)
            await wire.client.seen("agent_message_chunk")
            assert not STOPPED
            with trio.fail_after(2):
                await wire.cancel(session)
                await done.wait()
        assert len(STOPPED) == 1  # the model's stream was closed before the turn ended
        if variant is v1:
            assert ended[0].stop_reason == "cancelled"
        else:
            idle = [u for u in wire.updates() if u.get("state") == "idle"]
            assert idle[-1]["stopReason"] == "cancelled"
        wire.clear()
        await wire.prompt(session, "hello")  # the session goes on
        assert texts(wire) == "Hello, world"


async def _history_of(wire: Wire, session: str) -> str:
    wire.clear()
    await wire.prompt(session, "history")
    return texts(wire)


async def _reattach(wire: Wire, session: str, cwd: str) -> None:
    if wire.client.variant is v1:
        await wire.agent.session_load(v1.LoadSessionRequest(session_id=session, cwd=cwd, mcp_servers=[]))
    else:
        await wire.agent.session_resume(v2.ResumeSessionRequest(session_id=session, cwd=cwd))


@pytest.mark.parametrize(("first", "then"), [(v1, v1), (v2, v2), (v1, v2), (v2, v1)], ids=["1-1", "2-2", "1-2", "2-1"])
async def test_a_stored_session_continues_with_its_history_in_another_agent(
    first: ModuleType, then: ModuleType, tmp_path: Any
) -> None:
    from acp_trio.session_store import SqliteSessionStore

    path = str(tmp_path / "sessions.db")
    cwd = str(tmp_path)
    with SqliteSessionStore(path) as store:
        async with served(PydanticAIAgent(make_agent(), store=store), Client(first, permission="allow-once")) as wire:
            session = await wire.new_session(cwd)
            for text in ("hello", "tools", "delete"):
                await wire.prompt(session, text)
            kept = await _history_of(wire, session)
    assert kept.startswith("U:hello | T:Hello, world | U:tools | C:read_file{'path': '/work/a.txt'} | C:add")
    assert "R:delete_file=deleted /work/old.txt/success | T:results: delete_file=deleted /work/old.txt" in kept
    with SqliteSessionStore(path) as store:
        async with served(PydanticAIAgent(make_agent(), store=store), Client(then)) as wire:
            await _reattach(wire, session, cwd)
            rebuilt = await _history_of(wire, session)
    assert rebuilt == kept + f" | U:history | T:{kept}"


@BOTH
async def test_after_a_cancelled_turn_the_history_is_what_the_client_saw(variant: ModuleType) -> None:
    async with served(PydanticAIAgent(make_agent()), Client(variant, permission="wait")) as wire:
        session = await wire.new_session()
        await wire.prompt(session, "hello")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wire.prompt, session, "delete")
            await wire.client.asked.wait()
            await wire.cancel(session)
        history = await _history_of(wire, session)
    # the call that was never answered is left out with its turn's nothing else
    assert history == "U:hello | T:Hello, world | U:delete"


MCP_SERVER = str(__import__("pathlib").Path(__file__).parent / "mcp_servers" / "tools_server.py")


@pytest.mark.one_interpreter  # starts an MCP server process (python + the mcp SDK: seconds)
@BOTH
async def test_the_sessions_mcp_servers_are_tools_of_the_model(variant: ModuleType, tmp_path: Any) -> None:
    import sys

    # an MCP server process: python and the mcp SDK take seconds to start, 10 s and more on a loaded
    # machine (CI's 2 CPUs, four pytest workers: the in-memory DEADLINE timed out there)
    async with served(PydanticAIAgent(make_agent()), Client(variant), deadline=120) as wire:
        m = variant
        server = m.McpServerStdio if variant is v1 else v2.StdioMcpServer
        config = server(name="tools", command=sys.executable, args=[MCP_SERVER, "stdio"], env=[])
        new = await wire.agent.session_new(m.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[config]))
        wire.clear()
        await wire.prompt(new.session_id, "mcp")
        last = {u["toolCallId"]: u for u in tool_updates(wire)}
        assert last["m1"]["status"] == "completed"
        assert texts(wire) == "results: tools_add=42"
        await wire.agent.session_close(m.CloseSessionRequest(session_id=new.session_id))


async def test_a_v1_client_with_fs_gets_file_tools_and_a_write_is_a_diff() -> None:
    client = Client(v1, permission="allow-once", files={"/work/a.txt": "old\n"})
    async with served(PydanticAIAgent(make_agent()), client, fs=True) as wire:
        session = await wire.new_session()
        wire.clear()
        await wire.prompt(session, "offered")
        assert texts(wire) == "acp_read_text_file acp_write_text_file add delete_file read_file"
        wire.clear()
        await wire.prompt(session, "read /work/a.txt")
        assert texts(wire) == "results: acp_read_text_file=old\n"
        wire.clear()
        assert (await wire.prompt(session, "read a.txt")).stop_reason == "end_turn"
        failed = [u for u in tool_updates(wire) if u.get("status") == "failed"]
        assert failed and "the path must be absolute, not 'a.txt'" in failed[0]["rawOutput"]["content"]
        wire.clear()
        await wire.prompt(session, "read /work/missing.txt")  # the client's error answer: a failed tool call
        assert texts(wire).startswith("results: acp_read_text_file=read: the client answered")
        wire.clear()
        await wire.prompt(session, "write /work/a.txt")
        assert client.written == {"/work/a.txt": "new\n"}
        last = {u["toolCallId"]: u for u in tool_updates(wire)}
        assert last["w1"]["status"] == "completed"
        assert last["w1"]["content"] == [
            {"type": "diff", "path": "/work/a.txt", "oldText": "old\n", "newText": "new\n"}
        ]
        assert next(u for u in tool_updates(wire) if u["toolCallId"] == "w1")["kind"] == "edit"


@BOTH
async def test_clients_without_fs_get_no_client_tools(variant: ModuleType) -> None:
    async with served(PydanticAIAgent(make_agent()), Client(variant)) as wire:
        session = await wire.new_session()
        wire.clear()
        await wire.prompt(session, "offered")
        assert texts(wire) == "add delete_file read_file"


def _model(name: str) -> Any:
    from pydantic_ai.models.function import FunctionModel

    async def stream(messages: Any, info: Any) -> Any:
        yield f"{name} settings={dict(info.model_settings or {})}"

    return FunctionModel(stream_function=stream, model_name=name)


@BOTH
async def test_the_model_and_the_authors_options_are_session_config_options(variant: ModuleType) -> None:
    from acp_trio import neutral

    agent = PydanticAIAgent(
        make_agent(),
        models={"small": _model("small"), "large": _model("large")},
        options=[neutral.ConfigOption("careful", "Careful", current=False)],
        model_settings=lambda config: {"temperature": 0.0} if config["careful"] else None,
    )
    async with served(agent, Client(variant)) as wire:
        m = variant
        new = await wire.agent.session_new(
            m.NewSessionRequest(cwd="/work", mcp_servers=[]) if variant is v1 else v2.NewSessionRequest(cwd="/work")
        )
        options = {o.config_id if variant is v2 else o.id: o for o in new.config_options}
        assert [c.value for c in options["model"].options] == ["small", "large"]
        assert options["model"].current_value == "small" and options["model"].category == "model"
        assert options["careful"].current_value is False
        session = new.session_id
        wire.clear()
        await wire.prompt(session, "hi")
        assert texts(wire) == "small settings={}"
        select = v1.ValueIdSetSessionConfigOptionRequest if variant is v1 else v2.IdSetSessionConfigOptionRequest
        await wire.agent.session_set_config_option(select(session_id=session, config_id="model", value="large"))
        boolean = variant.BooleanSetSessionConfigOptionRequest
        await wire.agent.session_set_config_option(boolean(session_id=session, config_id="careful", value=True))
        wire.clear()
        await wire.prompt(session, "hi")
        assert texts(wire) == "large settings={'temperature': 0.0}"


def test_a_model_option_of_the_author_beside_models_is_refused() -> None:
    from acp_trio import neutral

    with pytest.raises(ValueError, match="config option 'model' is the model choice"):
        PydanticAIAgent(make_agent(), models={"a": "test"}, options=[neutral.ConfigOption("model", "M", current=True)])


class TerminalClient(Client):
    """A v1 client whose terminals "run" a command at once: its output is the command line."""

    def __init__(self) -> None:
        super().__init__(v1, permission="allow-once")
        self.created: list[v1.CreateTerminalRequest] = []
        self.released: list[str] = []

    async def terminal_create(self, params: v1.CreateTerminalRequest) -> v1.CreateTerminalResponse:
        self.created.append(params)
        return v1.CreateTerminalResponse(terminal_id=f"term{len(self.created)}")

    async def terminal_output(self, params: v1.TerminalOutputRequest) -> v1.TerminalOutputResponse:
        command = self.created[-1]
        return v1.TerminalOutputResponse(output=" ".join([command.command, *command.args]) + "\n", truncated=False)

    async def terminal_wait_for_exit(self, params: v1.WaitForTerminalExitRequest) -> v1.WaitForTerminalExitResponse:
        return v1.WaitForTerminalExitResponse(exit_code=3)

    async def terminal_kill(self, params: v1.KillTerminalRequest) -> v1.KillTerminalResponse:
        return v1.KillTerminalResponse()

    async def terminal_release(self, params: v1.ReleaseTerminalRequest) -> v1.ReleaseTerminalResponse:
        self.released.append(params.terminal_id)
        return v1.ReleaseTerminalResponse()


async def test_a_v1_client_with_a_terminal_runs_commands_shown_in_the_tool_call() -> None:
    client = TerminalClient()
    async with served(PydanticAIAgent(make_agent()), client, terminal=True) as wire:
        session = await wire.new_session("/proj")
        wire.clear()
        await wire.prompt(session, "run make test")
    assert [(c.command, c.args, c.cwd) for c in client.created] == [("make", ["test"], "/proj")]
    assert client.released == ["term1"]
    assert [u["permission"]["toolCall"]["toolCallId"] for u in wire.updates() if "permission" in u] == ["x1"]
    calls = [u for u in tool_updates(wire) if u["toolCallId"] == "x1"]
    assert calls[0]["kind"] == "execute"
    assert {"type": "terminal", "terminalId": "term1"} in next(u["content"] for u in calls if u.get("content"))
    assert calls[-1]["status"] == "completed"
    assert calls[-1]["content"] == [
        {"type": "terminal", "terminalId": "term1"},
        {"type": "content", "content": {"type": "text", "text": "[exit code 3]"}},
    ]
    assert texts(wire) == "results: acp_run_command=[exit code 3]\nmake test\n"


@BOTH
async def test_a_structured_output_is_said_as_json(variant: ModuleType) -> None:
    from dataclasses import dataclass

    from pydantic_ai import Agent
    from pydantic_ai.models.function import DeltaToolCall, FunctionModel

    @dataclass
    class City:
        name: str
        population: int

    async def stream(messages: Any, info: Any) -> Any:
        [output] = info.output_tools
        yield {0: DeltaToolCall(name=output.name, json_args='{"name": "Paris", "population": 2100000}')}

    structured = Agent(FunctionModel(stream_function=stream), output_type=City)
    async with served(PydanticAIAgent(structured), Client(variant)) as wire:
        session = await wire.new_session()
        wire.clear()
        await wire.prompt(session, "a city")
        assert texts(wire) == '{"name":"Paris","population":2100000}'
        assert not tool_updates(wire)  # the output tool is not a tool call of the user's


async def test_without_the_asyncio_loop_a_prompt_is_an_error_saying_to_open_it() -> None:
    from acp_trio import RequestError

    async with connected(PydanticAIAgent(make_agent()), Client(v1)) as wire:
        session = await wire.new_session()
        with pytest.raises(RequestError) as failed:
            await wire.prompt(session, "hello")
    assert failed.value.code == -32603
    assert "open_loop()" in str(failed.value)

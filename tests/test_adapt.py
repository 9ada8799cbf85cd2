"""The adapter, first direction (issue 33): a v2-only agent served to a v1 client by ``acp_trio.adapt``.

Everything runs in memory: the agent (the neutral prototype served v2 only, or a raw v2 agent)
on one memory stream pair, :class:`acp_trio.adapt.V1Front` between, a plain v1 client on another
pair.  Each test reads the JSON lines the v1 client received (a client-side tap) and checks them
against ``docs/protocol/v2/migration.mdx``'s mapping: ``tool_call`` then ``tool_call_update``,
``plan``, a diff's ``oldText``/``newText``, the stop reason in the prompt answer, and nothing of
v2 (``state_update``, ``user_message``, ``plan_update``, ...) on the v1 wire.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import trio
from trio.testing import memory_stream_pair

from acp_schema import v1, v2
from acp_trio import AgentSideConnection, ClientSideConnection, ConnectionClosed, RequestError, neutral, spawn_agent
from acp_trio._converter import converter
from acp_trio._spec import UNSET, UnsetType
from acp_trio.adapt import V1Front

DEADLINE = 10  # seconds; a turn takes milliseconds in memory
PATH = "/work/a.txt"
NEW = "/work/new.txt"


class V1Client:
    """A plain v1 client: allows every permission request (or the ``answer`` option), notes updates."""

    def __init__(self, answer: str = "allow") -> None:
        self.answer = answer
        self.updates: list[Any] = []
        self.tool_call_seen = trio.Event()

    async def session_update(self, params: v1.SessionNotification) -> None:
        self.updates.append(params.update)
        if isinstance(params.update, v1.ToolCallSessionUpdate):
            self.tool_call_seen.set()

    async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        return v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id=self.answer))

    async def elicitation_create(self, params: Any) -> Any:
        assert isinstance(params, v1.FormCreateElicitationRequest)
        return v1.AcceptCreateElicitationResponse(content={"name": "Ada"}, meta={"from": "v1"})


@asynccontextmanager
async def adapted(
    agent: Any, client: Any, received: list[bytes], caps: v1.ClientCapabilities | None = None, grace: float = 5
) -> AsyncIterator[tuple[V1Front, Any]]:
    """``agent`` (handlers speaking v2) behind a :class:`V1Front`, driven by the v1 ``client``;
    yields the front and the v1 client's ``AgentPeer``.  ``received``: the v1 client's input lines."""
    front = V1Front(cancel_grace=grace)
    agent_stream, back_stream = memory_stream_pair()
    front_stream, client_stream = memory_stream_pair()
    agent_conn = AgentSideConnection(agent, agent_stream, agent_stream)
    back_conn = ClientSideConnection(front.agent_handlers(), back_stream, back_stream)
    front_conn = AgentSideConnection(front, front_stream, front_stream)
    client_conn = ClientSideConnection(
        {v1: client}, client_stream, client_stream, tap=lambda d, data: received.append(data) if d == "in" else None
    )
    with trio.fail_after(DEADLINE):
        async with agent_conn, back_conn, front_conn, client_conn:
            init = await client_conn.initialize(
                v1.InitializeRequest(
                    protocol_version=1,
                    client_info=v1.Implementation(name="v1-client", version="1"),
                    client_capabilities=caps or UNSET,
                )
            )
            assert init.protocol_version == 1
            assert back_conn.protocol_version == 2  # the agent was spoken to in v2
            yield front, client_conn.agent


def wire(received: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in received]


def turn_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session updates (their ``update``), permission requests (``{"permission": params}``) and
    the prompt answer (``{"answer": result}``) the client read, in order."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.get("method") == "session/update":
            out.append(message["params"]["update"])
        elif message.get("method") == "session/request_permission":
            out.append({"permission": message["params"]})
        elif "stopReason" in message.get("result", {}):
            out.append({"answer": message["result"]})
    return out


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [next(iter(u)) if "sessionUpdate" not in u else u["sessionUpdate"] for u in updates]


# -- a full turn of the neutral prototype agent, served v2 only ------------------------------------
class TurnAgent(neutral.Agent):
    info = neutral.AgentInfo(name="turn-agent", version="1", title="Turn")

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        await turn.think("Planning.")
        await turn.say("Hello ")
        await turn.say(f"you said {turn.text!r}")
        plan = await turn.plan(["Edit a.txt"])
        call = await turn.tool("Edit a.txt", kind="edit", locations=[PATH])
        decision = await call.ask_permission(f"Allow editing {PATH}?")
        if not decision.allowed:
            await call.fail("denied")
            return "end_turn"
        await call.update(status="in_progress")
        await call.complete([neutral.Diff(NEW, None, "hello\nworld"), neutral.Diff(PATH, "old\n", "new\n")])
        await plan.mark(0, "completed")
        await turn.say("Done.")
        return "end_turn"


async def test_a_full_turn_of_a_v2_only_agent_reaches_the_v1_client_as_v1() -> None:
    received: list[bytes] = []
    async with adapted(neutral.handlers(TurnAgent(), versions=(2,)), V1Client(), received) as (front, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        result = await agent.session_prompt(
            v1.PromptRequest(session_id=new.session_id, prompt=[v1.TextContentBlock(text="hi")])
        )
    assert result.stop_reason == "end_turn"
    assert front.agent_initialize is not None and front.agent_initialize.info.name == "turn-agent"
    messages = wire(received)
    (init,) = [m for m in messages if m.get("id") == 0 and "result" in m]
    assert init["result"]["agentInfo"] == {"name": "turn-agent", "version": "1", "title": "Turn"}
    assert init["result"]["agentCapabilities"]["loadSession"] is True  # v2's resume, with replay from start
    updates = turn_messages(messages)
    assert kinds(updates) == [
        "agent_thought_chunk",
        "agent_message_chunk",
        "agent_message_chunk",
        "plan",
        "tool_call",
        "permission",
        "tool_call_update",
        "tool_call_update",
        "plan",
        "agent_message_chunk",
        "answer",
    ]
    thought, hello, said, plan, created, permission, progress, done, plan_done, last, answer = updates
    assert thought["content"] == {"type": "text", "text": "Planning."}
    assert hello["content"] == {"type": "text", "text": "Hello "}
    assert said["content"]["text"] == "you said 'hi'"
    assert hello["messageId"] == said["messageId"] != last["messageId"]
    assert plan == {
        "sessionUpdate": "plan",
        "entries": [{"content": "Edit a.txt", "priority": "medium", "status": "pending"}],
    }
    assert plan_done["entries"] == [{"content": "Edit a.txt", "priority": "medium", "status": "completed"}]
    call_id = created["toolCallId"]
    assert created == {
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": "Edit a.txt",
        "kind": "edit",
        "status": "pending",
        "locations": [{"path": PATH}],
    }
    request = permission["permission"]
    assert request == {
        "sessionId": new.session_id,
        "toolCall": {"toolCallId": call_id},  # the tool call keeps its title (design Q5)
        "options": [
            {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
            {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
        ],
        "_meta": {"acp-trio/title": f"Allow editing {PATH}?"},  # the v2 question, not lost
    }
    assert progress == {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"}
    assert done["status"] == "completed"
    added, modified = done["content"]
    assert added == {"type": "diff", "path": NEW, "newText": "hello\nworld"}  # exact: the patch holds the file
    assert "oldText" not in added
    assert modified["type"] == "content"  # a modification's patch has hunks only: its changes and patch as text
    text = modified["content"]["text"]
    assert text.startswith(f"modify {PATH}\n```diff\ndiff --git {PATH} {PATH}\n")
    assert "-old\n+new\n" in text
    assert answer == {"answer": {"stopReason": "end_turn"}}
    flat = json.dumps(messages)
    for v2_only in ("state_update", 'user_message"', "plan_update", "requires_action", "planId", 'git_patch"'):
        assert v2_only not in flat


async def test_a_denied_permission_reaches_the_agent_and_its_failed_tool_call_the_client() -> None:
    received: list[bytes] = []
    async with adapted(neutral.handlers(TurnAgent(), versions=(2,)), V1Client("reject"), received) as (_, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        result = await agent.session_prompt(
            v1.PromptRequest(session_id=new.session_id, prompt=[v1.TextContentBlock(text="hi")])
        )
    assert result.stop_reason == "end_turn"
    updates = turn_messages(wire(received))
    assert kinds(updates)[-3:] == ["permission", "tool_call_update", "answer"]
    failed = updates[-2]
    assert failed["status"] == "failed"
    assert failed["content"] == [{"type": "content", "content": {"type": "text", "text": "denied"}}]


# -- cancellation ------------------------------------------------------------------------------------
class SlowAgent(neutral.Agent):
    """Starts a tool call and waits; cancelled, it reports the tool call ``cancelled`` first."""

    info = neutral.AgentInfo(name="slow-agent", version="1")

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = False
        self.stopped = trio.Event()

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        call = await turn.tool("Run tests", kind="execute")
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.cancelled = True
            self.stopped.set()
            with trio.CancelScope(shield=True):
                await call.update(status="cancelled")
            raise
        return "end_turn"


async def test_session_cancel_mid_turn_answers_cancelled_after_the_agents_last_updates() -> None:
    received: list[bytes] = []
    client = V1Client()
    slow = SlowAgent()
    async with adapted(neutral.handlers(slow, versions=(2,)), client, received) as (_, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        results: list[Any] = []

        async def prompt() -> None:
            prompt = [v1.TextContentBlock(text="run them")]
            results.append(await agent.session_prompt(v1.PromptRequest(session_id=new.session_id, prompt=prompt)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(prompt)
            await client.tool_call_seen.wait()
            await agent.session_cancel(v1.CancelNotification(session_id=new.session_id))
    assert slow.cancelled  # the cancel reached the v2 agent
    assert [r.stop_reason for r in results] == ["cancelled"]
    updates = turn_messages(wire(received))
    assert kinds(updates) == ["tool_call", "tool_call_update", "answer"]  # the agent's last word came first
    assert updates[1]["status"] == "failed"  # v1 has no cancelled tool status (row T10)
    assert updates[1]["_meta"] == {"acp-trio/status": "cancelled"}
    assert updates[2] == {"answer": {"stopReason": "cancelled"}}


# -- a raw v2 agent: updates v1 cannot express, load, modes, errors ---------------------------------
MODE = v2.SelectSessionConfigOption(
    config_id="mode",
    name="Mode",
    category="mode",
    current_value="ask",
    options=[
        v2.SessionConfigSelectOption(value="ask", name="Ask"),
        v2.SessionConfigSelectOption(value="code", name="Code"),
    ],
)


class RawV2Agent:
    """A v2 agent written against the generated types, with what the neutral prototype lacks."""

    agent_info = v2.Implementation(name="raw-v2", version="1")
    commands = False  # answer session/new with availableCommands

    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn
        self.client = v2.ClientPeer(conn)
        self.requests: list[Any] = []
        self.outcomes: list[Any] = []

    async def send(self, session_id: str, update: Any) -> None:
        await self.client.session_update(v2.UpdateSessionNotification(session_id=session_id, update=update))

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        self.requests.append(params)
        commands = [v2.CommandAvailableCommand(name="sum", description="Summarize")] if self.commands else UNSET
        return v2.NewSessionResponse(session_id="s1", config_options=[MODE], available_commands=commands)

    async def session_resume(self, params: v2.ResumeSessionRequest) -> v2.ResumeSessionResponse:
        self.requests.append(params)
        if params.replay_from is not None and not isinstance(params.replay_from, UnsetType):
            user = v2.UserMessageSessionUpdate(message_id="u1", content=[v2.TextContentBlock(text="earlier")])
            await self.send(params.session_id, user)
            said = v2.AgentMessageSessionUpdate(message_id="a1", content=[v2.TextContentBlock(text="answer")])
            await self.send(params.session_id, said)
        return v2.ResumeSessionResponse(config_options=[MODE], meta={"kept": True})

    async def session_set_config_option(self, params: Any) -> v2.SetSessionConfigOptionResponse:
        self.requests.append(params)
        return v2.SetSessionConfigOptionResponse(config_options=[MODE])

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        text = "".join(b.text for b in params.prompt if isinstance(b, v2.TextContentBlock))
        if text == "reject":
            raise RequestError(-32602, "Invalid params", {"detail": "no prompts today"})
        self.conn.start_turn(params.session_id, lambda: self.turn(params.session_id, text))
        return v2.PromptResponse(message_id="u2")

    async def turn(self, session_id: str, text: str) -> str:
        if text == "fail":
            raise RuntimeError("never")  # a bug in the agent: the runtime's idle with stopReason error, -32603
        if text == "elicit":
            schema = converter.structure(
                {"type": "object", "properties": {"name": {"type": "string"}}}, v2.ElicitationSchema
            )
            form = v2.FormCreateElicitationRequest(message="Name?", requested_schema=schema, session_id=session_id)
            self.outcomes.append(await self.client.elicitation_create(form))
            return "paused_for_review"  # a stop reason v1 lacks
        if text == "ask":
            subject = v2.CommandRequestPermissionSubject(command="make test", cwd="/work")
            options = [
                v2.PermissionOption(option_id="yes", name="Yes", kind="allow_once"),
                v2.PermissionOption(option_id="no", name="No", kind="reject_once"),
            ]
            request = v2.RequestPermissionRequest(
                session_id=session_id, title="Run make test?", subject=subject, options=options
            )
            self.outcomes.append((await self.client.session_request_permission(request)).outcome)
            said = v2.AgentMessageChunkSessionUpdate(
                message_id="m2", content=v2.TextContentBlock(text="ran"), meta={"trace": "t1"}
            )
            await self.client.session_update(
                v2.UpdateSessionNotification(
                    session_id=session_id, update=said, meta={"seq": 7}, extra_fields={"futureField": 2}
                )
            )
            return "end_turn"
        await self.send(
            session_id, v2.AgentMessageChunkSessionUpdate(message_id="m1", content=v2.TextContentBlock(text="a"))
        )
        unknown = converter.structure({"sessionUpdate": "future_thing", "x": 1}, v2.SessionUpdate)
        await self.send(session_id, unknown)  # v2's open union: v1 has no form for it
        replace = v2.AgentMessageSessionUpdate(message_id="m1", content=[v2.TextContentBlock(text="A")])
        await self.send(session_id, replace)  # v1 clients cannot retract chunks
        await self.send(
            session_id, v2.AgentMessageChunkSessionUpdate(message_id="m1", content=v2.TextContentBlock(text="b"))
        )
        return "refusal"


async def test_updates_v1_cannot_express_are_logged_not_sent_and_the_turn_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    received: list[bytes] = []
    with caplog.at_level(logging.WARNING):
        async with adapted({v2: RawV2Agent}, V1Client(), received) as (_, agent):
            new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
            result = await agent.session_prompt(
                v1.PromptRequest(session_id=new.session_id, prompt=[v1.TextContentBlock(text="go")])
            )
    assert result.stop_reason == "refusal"
    updates = turn_messages(wire(received))
    assert kinds(updates) == ["agent_message_chunk", "agent_message_chunk", "answer"]
    first, second, _ = updates
    assert first["content"]["text"] == "a"
    assert second["content"]["text"] == "b"
    assert second["_meta"] == {"acp-trio/dropped": 1}  # the unknown update, counted on the next one sent
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'future_thing'" in w and "no v1 form" in w for w in warnings)
    assert any("agent_message replacing message m1" in w and "protocol version 1" in w for w in warnings)


async def test_an_agent_turn_ending_in_error_is_the_v1_prompts_error() -> None:
    received: list[bytes] = []
    async with adapted({v2: RawV2Agent}, V1Client(), received) as (_, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        with pytest.raises(RequestError) as caught:
            await agent.session_prompt(
                v1.PromptRequest(session_id=new.session_id, prompt=[v1.TextContentBlock(text="fail")])
            )
    assert caught.value.code == -32603  # the v2 runtime reports an agent's bug as internal error


async def test_a_v2_error_answering_the_prompt_is_the_v1_prompts_error_and_the_session_takes_the_next() -> None:
    received: list[bytes] = []
    async with adapted({v2: RawV2Agent}, V1Client(), received) as (_, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        with pytest.raises(RequestError) as caught:
            prompt = [v1.TextContentBlock(text="reject")]
            await agent.session_prompt(v1.PromptRequest(session_id=new.session_id, prompt=prompt))
        again = await agent.session_prompt(
            v1.PromptRequest(session_id=new.session_id, prompt=[v1.TextContentBlock(text="go")])
        )
    assert (caught.value.code, caught.value.data) == (-32602, {"detail": "no prompts today"})
    assert again.stop_reason == "refusal"


def raw_agents() -> tuple[list[RawV2Agent], dict[Any, Any]]:
    """The v2 handlers of :class:`RawV2Agent`, and the list its instances go to."""
    agents: list[RawV2Agent] = []

    def make(conn: AgentSideConnection) -> RawV2Agent:
        agents.append(RawV2Agent(conn))
        return agents[-1]

    return agents, {v2: make}


async def test_session_new_gives_modes_and_set_mode_is_the_mode_config_option() -> None:
    received: list[bytes] = []
    agents, handlers = raw_agents()
    async with adapted(handlers, V1Client(), received) as (_, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        await agent.session_set_mode(v1.SetSessionModeRequest(session_id=new.session_id, mode_id="code"))
    assert new.modes is not None and new.modes.current_mode_id == "ask"
    assert [m.id for m in new.modes.available_modes] == ["ask", "code"]
    (answer,) = [m for m in wire(received) if m.get("id") == 1 and "result" in m]
    assert answer["result"]["configOptions"][0]["id"] == "mode"  # v1's field name (row L10)
    assert "configId" not in answer["result"]["configOptions"][0]
    _, set_option = agents[0].requests
    assert isinstance(set_option, v2.IdSetSessionConfigOptionRequest)
    assert (set_option.session_id, set_option.config_id, set_option.value) == ("s1", "mode", "code")


async def test_session_load_is_resume_replayed_from_the_start() -> None:
    received: list[bytes] = []
    agents, handlers = raw_agents()
    async with adapted(handlers, V1Client(), received) as (_, agent):
        loaded = await agent.session_load(v1.LoadSessionRequest(session_id="s0", cwd="/work", mcp_servers=[]))
    (resume,) = agents[0].requests
    assert isinstance(resume, v2.ResumeSessionRequest)
    assert isinstance(resume.replay_from, v2.StartReplayFrom)
    assert loaded.modes is not None and loaded.modes.current_mode_id == "ask"
    assert loaded.meta == {"kept": True}
    updates = turn_messages(wire(received))
    assert updates == [
        {"sessionUpdate": "user_message_chunk", "messageId": "u1", "content": {"type": "text", "text": "earlier"}},
        {"sessionUpdate": "agent_message_chunk", "messageId": "a1", "content": {"type": "text", "text": "answer"}},
    ]


async def test_a_v1_prompt_waiting_when_the_agent_goes_away_gets_an_error() -> None:
    received: list[bytes] = []
    client = V1Client()
    agents: list[AgentSideConnection] = []

    def slow(conn: AgentSideConnection) -> Any:
        agents.append(conn)
        return neutral.handlers(SlowAgent(), versions=(2,))[v2](conn)

    async with adapted({v2: slow}, client, received) as (_, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        errors: list[RequestError] = []

        async def prompt() -> None:
            prompt = [v1.TextContentBlock(text="run them")]
            try:
                await agent.session_prompt(v1.PromptRequest(session_id=new.session_id, prompt=prompt))
            except RequestError as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(prompt)
            await client.tool_call_seen.wait()
            await agents[0].aclose()  # the agent's end closes mid-turn
    (error,) = errors
    assert error.code == -32603
    assert "the agent behind this adapter is gone" in error.data["detail"]


AGENT_SCRIPT = """
from acp_trio import neutral
from acp_trio.transports.stdio import run_agent_stdio

class Hello(neutral.Agent):
    info = neutral.AgentInfo(name="hello-v2", version="1")

    async def prompt(self, turn):
        await turn.say("hello from v2")
        return "end_turn"

run_agent_stdio(neutral.handlers(Hello(), versions=(2,)))
"""


@pytest.mark.one_interpreter
async def test_python_m_acp_trio_adapt_speak_1_serves_a_v2_only_agent_to_a_v1_client_on_stdio() -> None:
    received: list[bytes] = []
    command = [sys.executable, "-m", "acp_trio.adapt", "--speak", "1", "--", sys.executable, "-c", AGENT_SCRIPT]
    tap = lambda d, data: received.append(data) if d == "in" else None  # noqa: E731
    with trio.fail_after(30):  # two interpreters start
        async with spawn_agent(command[0], command[1:], client={v1: V1Client()}, tap=tap) as conn:
            init = await conn.initialize(v1.InitializeRequest(protocol_version=1))
            assert init.agent_info is not None and init.agent_info.name == "hello-v2"
            new = await conn.agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
            prompt = [v1.TextContentBlock(text="hi")]
            result = await conn.agent.session_prompt(v1.PromptRequest(session_id=new.session_id, prompt=prompt))
    assert result.stop_reason == "end_turn"
    updates = turn_messages(wire(received))
    assert [u.get("sessionUpdate") for u in updates[:-1]] == ["agent_message_chunk"]
    assert updates[0]["content"] == {"type": "text", "text": "hello from v2"}


async def test_an_agent_exiting_during_initialize_is_a_v1_error_naming_the_exit() -> None:
    """The agent reads ``initialize`` and exits: the v1 client's ``initialize`` is answered -32603
    with the exit status in its detail (was: a bare -32603 "Internal error", no data)."""
    agent = "import sys; sys.stdin.readline(); sys.stderr.write('no v2 here\\n'); sys.exit(3)"
    command = [sys.executable, "-m", "acp_trio.adapt", "--speak", "1", "--", sys.executable, "-c", agent]
    with trio.fail_after(30):  # two interpreters start
        async with spawn_agent(command[0], command[1:], client={v1: V1Client()}) as conn:
            with pytest.raises(RequestError) as caught:
                await conn.initialize(v1.InitializeRequest(protocol_version=1))
    assert caught.value.code == -32603
    assert caught.value.data["method"] == "initialize"
    detail = caught.value.data["detail"]
    assert "the agent behind this adapter is gone" in detail and "initialize was not answered" in detail
    assert "3" in detail and "no v2 here" in detail, detail


class CommandsAgent(RawV2Agent):
    commands = True


async def test_permission_on_a_command_is_a_synthetic_v1_tool_call_and_meta_and_unknown_fields_survive() -> None:
    received: list[bytes] = []
    agents: list[RawV2Agent] = []

    def make(conn: AgentSideConnection) -> RawV2Agent:
        agents.append(CommandsAgent(conn))
        return agents[-1]

    async with adapted({v2: make}, V1Client("yes"), received) as (_, agent):
        new_request = converter.structure(
            {"cwd": "/work", "mcpServers": [], "_meta": {"editor": "x"}, "futureField": [1]}, v1.NewSessionRequest
        )
        new = await agent.session_new(new_request)
        result = await agent.session_prompt(
            v1.PromptRequest(session_id=new.session_id, prompt=[v1.TextContentBlock(text="ask")])
        )
    assert result.stop_reason == "end_turn"
    (seen,) = agents[0].requests
    assert converter.unstructure(seen) == {
        "cwd": "/work",
        "mcpServers": [],
        "_meta": {"editor": "x"},
        "futureField": [1],
    }
    assert agents[0].outcomes == [v2.SelectedRequestPermissionOutcome(option_id="yes")]
    messages = wire(received)
    answer_at = next(i for i, m in enumerate(messages) if m.get("result", {}).get("sessionId") == "s1")
    commands_at = next(
        i
        for i, m in enumerate(messages)
        if m.get("params", {}).get("update", {}).get("sessionUpdate") == "available_commands_update"
    )
    assert answer_at < commands_at  # v2 answers session/new with its commands; v1 hears them after the answer
    assert messages[commands_at]["params"]["update"]["availableCommands"] == [
        {"name": "sum", "description": "Summarize"}
    ]
    updates = turn_messages(messages[commands_at + 1 :])
    assert kinds(updates) == ["tool_call", "permission", "tool_call_update", "agent_message_chunk", "answer"]
    synthetic, permission, decided, said, _ = updates
    call_id = synthetic["toolCallId"]
    assert synthetic == {
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": "make test",
        "kind": "execute",
        "status": "pending",
        "rawInput": {"command": "make test", "cwd": "/work"},
    }
    assert permission["permission"]["toolCall"] == {"toolCallId": call_id}
    assert permission["permission"]["_meta"] == {"acp-trio/title": "Run make test?"}
    assert decided == {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "completed"}
    assert said["_meta"] == {"trace": "t1"}
    (notification,) = [m for m in messages if m.get("params", {}).get("update") == said]
    assert notification["params"]["_meta"] == {"seq": 7}
    assert notification["params"]["futureField"] == 2


async def test_session_load_without_v2_session_capabilities_is_not_offered_and_is_32601_naming_v2() -> None:
    class Bare:  # no session methods: the runtime advertises no capabilities.session
        pass

    received: list[bytes] = []
    async with adapted({v2: Bare}, V1Client(), received) as (_, agent):
        with pytest.raises(RequestError) as caught:  # a client that ignores loadSession: false
            await agent._sender.connection.request("session/load", {"sessionId": "s0", "cwd": "/w", "mcpServers": []})
    (init,) = [m for m in wire(received) if m.get("id") == 0]
    assert "loadSession" not in init["result"]["agentCapabilities"]  # not offered to begin with
    assert caught.value.code == -32601
    assert "protocol version 2" in caught.value.data["detail"]
    assert caught.value.data["method"] == "session/load"


async def test_session_list_and_close_and_set_config_option_reach_the_agent() -> None:
    received: list[bytes] = []
    agents, handlers = raw_agents()
    async with adapted(neutral.handlers(TurnAgent(), versions=(2,)), V1Client(), received) as (_, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        listed = await agent.session_list(v1.ListSessionsRequest(cwd="/work"))
        assert [(s.session_id, s.cwd) for s in listed.sessions] == [(new.session_id, "/work")]
        await agent.session_close(v1.CloseSessionRequest(session_id=new.session_id))
    async with adapted(handlers, V1Client(), received) as (_, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        answer = await agent.session_set_config_option(
            v1.ValueIdSetSessionConfigOptionRequest(session_id=new.session_id, config_id="mode", value="code")
        )
    assert [o.id for o in answer.config_options] == ["mode"]
    _, set_option = agents[0].requests
    assert isinstance(set_option, v2.IdSetSessionConfigOptionRequest)  # v1's untagged value request, tagged "id"
    assert (set_option.config_id, set_option.value) == ("mode", "code")


async def test_elicitation_passes_through_fs_and_terminal_are_not_offered_and_a_v2_only_stop_reason_is_mapped() -> None:
    received: list[bytes] = []
    agents, handlers = raw_agents()
    caps = v1.ClientCapabilities(
        fs=v1.FileSystemCapabilities(read_text_file=True, write_text_file=True),
        terminal=True,
        elicitation=v1.ElicitationCapabilities(form=v1.ElicitationFormCapabilities()),
    )
    async with adapted(handlers, V1Client(), received, caps) as (_, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        result = await agent.session_prompt(
            v1.PromptRequest(session_id=new.session_id, prompt=[v1.TextContentBlock(text="elicit")])
        )
    assert agents[0].conn.client_capabilities == {"elicitation": {"form": {}}}  # v2 has no fs/terminal
    assert agents[0].conn.client_info == {"name": "v1-client", "version": "1"}
    (answer,) = agents[0].outcomes
    assert answer == v2.AcceptCreateElicitationResponse(content={"name": "Ada"}, meta={"from": "v1"})
    (asked,) = [m for m in wire(received) if m.get("method") == "elicitation/create"]
    assert asked["params"]["message"] == "Name?" and asked["params"]["mode"] == "form"
    assert result.stop_reason == "end_turn"  # row T2: a stop reason v1 lacks
    assert result.meta == {"acp-trio/stopReason": "paused_for_review"}


async def test_named_extension_methods_are_forwarded_verbatim_both_ways() -> None:
    notes: list[Any] = []

    class ExtAgent:
        def __init__(self, conn: AgentSideConnection) -> None:
            self.conn = conn

            async def echo(params: Any) -> Any:
                await conn.ext_notification("_test/note", {"heard": params})
                return {"echo": params}

            conn.on_ext_request("_test/echo", echo)

    front = V1Front(ext_requests=["_test/echo"], ext_notifications=["_test/note"])
    agent_stream, back_stream = memory_stream_pair()
    front_stream, client_stream = memory_stream_pair()
    client_conn = ClientSideConnection({v1: V1Client()}, client_stream, client_stream)

    noted = trio.Event()

    async def note(params: Any) -> None:
        notes.append(params)
        noted.set()

    client_conn.on_ext_notification("_test/note", note)
    with trio.fail_after(DEADLINE):
        async with (
            AgentSideConnection({v2: ExtAgent}, agent_stream, agent_stream),
            ClientSideConnection(front.agent_handlers(), back_stream, back_stream),
            AgentSideConnection(front, front_stream, front_stream),
            client_conn,
        ):
            await client_conn.initialize(v1.InitializeRequest(protocol_version=1))
            answer = await client_conn.ext_request("_test/echo", {"x": [1, None], "_meta": {"k": 1}})
            await noted.wait()
            with pytest.raises(RequestError) as caught:
                await client_conn.ext_request("_test/unnamed", {})
    assert answer == {"echo": {"x": [1, None], "_meta": {"k": 1}}}
    assert notes == [{"heard": {"x": [1, None], "_meta": {"k": 1}}}]
    assert caught.value.code == -32601
    with pytest.raises(ValueError, match="start with '_'"):
        V1Front(ext_requests=["test/echo"])


async def test_session_close_mid_turn_answers_the_prompt_cancelled_at_the_agents_idle() -> None:
    received: list[bytes] = []
    client = V1Client()
    slow = SlowAgent()
    # a grace longer than the deadline: the answer must come from the agent's idle, not the grace's end
    async with adapted(neutral.handlers(slow, versions=(2,)), client, received, grace=3 * DEADLINE) as (front, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        results: list[Any] = []

        async def prompt() -> None:
            prompt = [v1.TextContentBlock(text="run them")]
            results.append(await agent.session_prompt(v1.PromptRequest(session_id=new.session_id, prompt=prompt)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(prompt)
            await client.tool_call_seen.wait()
            await agent.session_close(v1.CloseSessionRequest(session_id=new.session_id))
        assert new.session_id not in front.sessions  # forgotten once its turn was answered
    assert slow.cancelled
    assert [r.stop_reason for r in results] == ["cancelled"]


async def test_the_clients_input_ending_mid_turn_cancels_the_agents_turn() -> None:
    received: list[bytes] = []
    client = V1Client()
    slow = SlowAgent()
    async with adapted(neutral.handlers(slow, versions=(2,)), client, received, grace=3 * DEADLINE) as (_, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))

        async def prompt() -> None:
            with pytest.raises(ConnectionClosed):
                prompt = [v1.TextContentBlock(text="run them")]
                await agent.session_prompt(v1.PromptRequest(session_id=new.session_id, prompt=prompt))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(prompt)
            await client.tool_call_seen.wait()
            await agent._sender.aclose()  # the v1 client leaves without session/cancel
            await slow.stopped.wait()  # the adapter told the agent to stop
    assert slow.cancelled


async def test_a_stdio_mcp_server_for_an_agent_without_mcp_stdio_is_32602_naming_the_capability_and_v2() -> None:
    received: list[bytes] = []
    _, handlers = raw_agents()  # the runtime's default initialize answer: capabilities.session only
    server = v1.McpServerStdio(name="files", command="/bin/mcp-files", args=[], env=[])
    async with adapted(handlers, V1Client(), received) as (_, agent):
        with pytest.raises(RequestError) as caught:
            await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[server]))
    assert caught.value.code == -32602  # session/new exists; its params need what v2 makes optional
    detail = caught.value.data["detail"]
    assert "'session.mcp.stdio'" in detail and "protocol version 2" in detail


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--speak", "2"], "give the agent's command after --: --speak 2"),
        (["--speak", "1", "--no-client-fs", "--", "agent"], "--no-client-fs is for --speak 2"),
        (["--speak", "2", "--", "/nonexistent/agent"], "cannot start the agent: [Errno 2] agent command not found"),
        (["--speak", "1"], "give the agent's command after --"),
        (["--speak", "1", "--ext-request", "zed/x", "--", "agent"], "extension method names start with '_'"),
        (["--speak", "1", "--", "/nonexistent/agent"], "cannot start the agent: [Errno 2] agent command not found"),
    ],
)
def test_the_command_line_exits_2_with_one_line_saying_why(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from acp_trio.adapt import main

    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert says in capsys.readouterr().err


# -- the streaming fast path (issue 33's bar): text chunks cross as their wire JSON ---------------
def _chunk(sid: str, text: str, **more: Any) -> dict[str, Any]:
    """``session/update`` params of an agent_message_chunk, keys in an order the typed way does not keep."""
    update = {"futureUpdate": {"x": [1, 2]}, "content": {"text": text, "type": "text"}, "messageId": "m1"}
    update.update(more)
    update["sessionUpdate"] = "agent_message_chunk"
    return {"update": update, "sessionId": sid}


class WireChunksAgent(RawV2Agent):
    """Streams its turn as raw JSON lines: text chunks with unknown fields and ``_meta`` at every
    level, one with ``annotations``, an update v1 lacks, and a thought."""

    def sent(self, sid: str) -> list[dict[str, Any]]:
        first = _chunk(sid, "Hel", _meta={"u": 1})
        first["update"]["content"].update({"_meta": {"c": 1}, "futureBlock": True})
        first.update({"_meta": {"n": 1}, "futureParams": "p"})
        noted = _chunk(sid, "lo")
        noted["update"]["content"]["annotations"] = {"priority": 0.5}
        thought = {"sessionId": sid, "update": {"sessionUpdate": "agent_thought_chunk", "messageId": "t1"}}
        thought["update"]["content"] = {"type": "text", "text": "hm", "_meta": {"t": 1}}
        unknown = {"sessionId": sid, "update": {"sessionUpdate": "future_update", "x": 1}}
        return [first, noted, thought, unknown, _chunk(sid, "!", _meta={"u": 2})]

    async def turn(self, session_id: str, text: str) -> str:
        for params in self.sent(session_id):
            await self.conn.connection.notify("session/update", params)
        return "end_turn"


async def test_text_chunks_cross_to_the_v1_client_byte_for_byte_with_unknown_fields_and_meta() -> None:
    received: list[bytes] = []
    agents: list[WireChunksAgent] = []

    def make(conn: AgentSideConnection) -> WireChunksAgent:
        agents.append(WireChunksAgent(conn))
        return agents[-1]

    async with adapted({v2: make}, V1Client(), received) as (_, agent):
        new = await agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
        result = await agent.session_prompt(
            v1.PromptRequest(session_id=new.session_id, prompt=[v1.TextContentBlock(text="go")])
        )
    assert result.stop_reason == "end_turn"
    first, noted, thought, _unknown, last = agents[0].sent(new.session_id)
    lines = [line for line in received if b'"session/update"' in line]
    assert len(lines) == 4  # the update v1 lacks is not sent
    # the fast path: the agent's params as they were read, key order included (the typed way
    # writes known fields first); unknown fields and _meta at every level survive
    assert orjson.dumps(first) in lines[0]
    assert orjson.dumps(thought) in lines[2]
    # annotations go the typed way: the same JSON, not the same bytes
    assert json.loads(lines[1])["params"] == noted
    assert orjson.dumps(noted) not in lines[1]
    # the chunk after a dropped update says how many were dropped, beside its own _meta
    params = json.loads(lines[3])["params"]
    assert params["update"]["_meta"] == {"u": 2, "acp-trio/dropped": 1}
    del params["update"]["_meta"], last["update"]["_meta"]
    assert params == last


async def test_the_v2_agent_reads_session_cancel_before_the_cancelled_permission_answer() -> None:
    """The client sends ``session/cancel``, then answers its pending permission requests ``cancelled``
    (prompt-turn.mdx § Cancellation); the adapter passes them on to the v2 agent in that order."""
    for _ in range(5):
        read: list[str] = []
        asked = trio.Event()

        class WaitingClient(V1Client):
            async def session_request_permission(self, params: Any, asked: trio.Event = asked) -> Any:
                asked.set()
                await trio.sleep_forever()  # answered "cancelled" by the runtime as the client cancels

        def tap(direction: str, data: bytes, read: list[str] = read) -> None:
            message = json.loads(data)
            if direction == "in" and message.get("method") == "session/cancel":
                read.append("cancel")
            elif direction == "in" and "outcome" in message.get("result", {}):
                read.append(f"answer {message['result']['outcome']['outcome']}")

        front = V1Front()
        agent_stream, back_stream = memory_stream_pair()
        front_stream, client_stream = memory_stream_pair()
        with trio.fail_after(DEADLINE):
            async with (
                AgentSideConnection({v2: RawV2Agent}, agent_stream, agent_stream, tap=tap),
                ClientSideConnection(front.agent_handlers(), back_stream, back_stream),
                AgentSideConnection(front, front_stream, front_stream),
                ClientSideConnection({v1: WaitingClient()}, client_stream, client_stream) as client_conn,
                trio.open_nursery() as nursery,
            ):
                await client_conn.initialize(v1.InitializeRequest(protocol_version=1))
                new = await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
                prompt = v1.PromptRequest(session_id=new.session_id, prompt=[v1.TextContentBlock(text="ask")])
                nursery.start_soon(client_conn.agent.session_prompt, prompt)
                await asked.wait()
                await client_conn.agent.session_cancel(v1.CancelNotification(session_id=new.session_id))
        assert read[:1] == ["cancel"], read

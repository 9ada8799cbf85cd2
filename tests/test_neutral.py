"""The version-neutral agent API (issue 33): one turn written once, seen on each wire, and the entry points.

A tiny :class:`acp_trio.neutral.Agent` thinks, streams text, publishes a plan, reports a tool call,
asks permission for it, completes it with a diff, marks the plan done and ends ``end_turn``.  It is
served by :func:`acp_trio.neutral.handlers` to an in-memory v1 client and an in-memory v2 client;
each test reads the JSON lines that client received and checks them against
``docs/protocol/v2/migration.mdx``'s mapping (v1: ``tool_call``, ``plan``, ``oldText``/``newText``,
the stop reason in the prompt answer; v2: ``user_message``, ``state_update``, upserts with ids,
``plan_update``, ``changes`` + ``git_patch``).
"""

from __future__ import annotations

import json
import sys
from types import ModuleType
from typing import Any

import pytest
import trio
from _neutral_kit import Client as KitClient
from _neutral_kit import connected
from trio.testing import memory_stream_pair

from acp_schema import v1, v2
from acp_trio import AgentSideConnection, ClientSideConnection, RequestError, neutral, open_memory_pair, spawn_agent

DEADLINE = 10  # seconds; the turn takes milliseconds in memory
PATH = "/work/a.txt"


class TinyAgent(neutral.Agent):
    info = neutral.AgentInfo(name="tiny", version="1", title="Tiny")

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
        await call.complete([neutral.Diff(PATH, "old\n", "new\n")])
        await plan.mark(0, "completed")
        await turn.say("Done.")
        return "end_turn"


class Client:
    """Allows every permission request; notes the v2 turn's end."""

    def __init__(self, variant: ModuleType) -> None:
        self.variant = variant
        self.idle = trio.Event()

    async def session_update(self, params: Any) -> None:
        if isinstance(params.update, v2.IdleStateUpdateSessionUpdate):
            self.idle.set()

    async def session_request_permission(self, params: Any) -> Any:
        m = self.variant
        return m.RequestPermissionResponse(outcome=m.SelectedRequestPermissionOutcome(option_id="allow"))


async def one_turn(variant: ModuleType) -> tuple[list[dict[str, Any]], Any]:
    """Run the tiny agent's turn for a client of ``variant``; the messages that client read (wire
    JSON, in order) and the ``session/prompt`` result."""
    received: list[bytes] = []
    agent_stream, client_stream = memory_stream_pair()
    client = Client(variant)
    agent_conn = AgentSideConnection(neutral.handlers(TinyAgent()), agent_stream, agent_stream)
    client_conn = ClientSideConnection(
        {variant: client},
        client_stream,
        client_stream,
        tap=lambda d, data: received.append(data) if d == "in" else None,
    )
    with trio.fail_after(DEADLINE):
        async with agent_conn, client_conn:
            if variant is v1:
                await client_conn.initialize(v1.InitializeRequest(protocol_version=1))
                new = await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/work", mcp_servers=[]))
                prompt: list[v1.ContentBlock] = [v1.TextContentBlock(text="hi")]
                result = await client_conn.agent.session_prompt(
                    v1.PromptRequest(session_id=new.session_id, prompt=prompt)
                )
            else:
                info = v2.Implementation(name="test-client", version="1")
                await client_conn.initialize(v2.InitializeRequest(protocol_version=2, info=info))
                new = await client_conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
                prompt2: list[v2.ContentBlock] = [v2.TextContentBlock(text="hi")]
                result = await client_conn.agent.session_prompt(
                    v2.PromptRequest(session_id=new.session_id, prompt=prompt2)
                )
                await client.idle.wait()
            assert client_conn.protocol_version == variant.PROTOCOL_VERSION
    return [json.loads(line) for line in received], result  # the tap hands one message per call


def turn_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session updates and permission requests of the turn, in order: an update as its
    ``update`` object, a permission request as ``{"permission": params}``."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.get("method") == "session/update":
            out.append(message["params"]["update"])
        elif message.get("method") == "session/request_permission":
            out.append({"permission": message["params"]})
    return out


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [
        "permission"
        if "permission" in u
        else (f"state:{u['state']}" if u["sessionUpdate"] == "state_update" else u["sessionUpdate"])
        for u in updates
    ]


async def test_one_turn_on_a_v1_client_is_v1_chunks_tool_call_plan_and_the_stop_reason_in_the_answer() -> None:
    messages, result = await one_turn(v1)
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
    ]
    assert result.stop_reason == "end_turn"
    thought, hello, said, plan, created, permission, progress, done, plan_done, last = updates
    assert hello["content"] == {"type": "text", "text": "Hello "}
    assert said["content"]["text"] == "you said 'hi'"
    assert hello["messageId"] == said["messageId"] != last["messageId"]  # the tool call ended that message
    assert thought["messageId"] != hello["messageId"]
    assert plan == {
        "sessionUpdate": "plan",
        "entries": [{"content": "Edit a.txt", "priority": "medium", "status": "pending"}],
    }
    assert plan_done["entries"][0]["status"] == "completed"
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
    assert request["toolCall"] == {"toolCallId": call_id}
    assert "title" not in request and "subject" not in request  # v2-only fields never reach v1
    assert [o["optionId"] for o in request["options"]] == ["allow", "reject"]
    assert progress == {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"}
    assert done["status"] == "completed"
    assert done["content"] == [{"type": "diff", "path": PATH, "oldText": "old\n", "newText": "new\n"}]


async def test_one_turn_on_a_v2_client_is_user_message_state_updates_upserts_and_idle() -> None:
    messages, result = await one_turn(v2)
    updates = turn_messages(messages)
    assert kinds(updates) == [
        "user_message",
        "state:running",
        "agent_thought_chunk",
        "agent_message_chunk",
        "agent_message_chunk",
        "plan_update",
        "tool_call_update",
        "state:requires_action",
        "permission",
        "state:running",
        "tool_call_update",
        "tool_call_update",
        "plan_update",
        "agent_message_chunk",
        "state:idle",
    ]
    user, _, thought, hello, said, plan, created, _, permission, _, progress, done, plan_done, last, idle = updates
    assert user["content"] == [{"type": "text", "text": "hi"}]
    assert result.message_id == user["messageId"]  # the receipt names the acknowledged user message
    assert hello["messageId"] == said["messageId"] != last["messageId"]
    assert thought["messageId"] != hello["messageId"]
    assert plan["plan"] == {
        "type": "items",
        "planId": plan["plan"]["planId"],
        "entries": [{"content": "Edit a.txt", "priority": "medium", "status": "pending"}],
    }
    assert plan_done["plan"]["planId"] == plan["plan"]["planId"]
    assert plan_done["plan"]["entries"][0]["status"] == "completed"
    call_id = created["toolCallId"]
    assert created == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "title": "Edit a.txt",
        "kind": "edit",
        "status": "pending",
        "locations": [{"path": PATH}],
    }
    request = permission["permission"]
    assert request["title"] == f"Allow editing {PATH}?"
    assert request["subject"] == {"type": "tool_call", "toolCall": {"toolCallId": call_id}}
    assert "toolCall" not in request
    assert progress == {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"}
    (diff,) = done["content"]
    assert diff["changes"] == [{"operation": "modify", "path": PATH, "fileType": "text"}]
    assert diff["patch"]["format"] == "git_patch"
    assert diff["patch"]["text"].startswith(f"diff --git {PATH} {PATH}\n")
    assert "-old\n+new\n" in diff["patch"]["text"]
    assert "oldText" not in diff and "newText" not in diff
    assert idle == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}


def test_v1_view_refuses_a_v2_update_v1_cannot_express_rather_than_sending_v1s_catch_all() -> None:
    view = neutral.V1View()
    view.project(v2.AgentMessageChunkSessionUpdate(message_id="m1", content=v2.TextContentBlock(text="Hel")))
    replace = v2.AgentMessageSessionUpdate(message_id="m1", content=[v2.TextContentBlock(text="Hello")])
    with pytest.raises(neutral.VersionError, match="protocol version 1") as caught:
        view.project(replace)  # v1 clients only append chunks
    assert caught.value.version == 1
    assert "agent_message replacing message m1" in str(caught.value)


def test_v1_view_maps_a_cancelled_tool_call_to_failed_and_merges_plans() -> None:
    view = neutral.V1View()
    view.project(v2.ToolCallUpdateSessionUpdate(tool_call_id="c1", title="Run"))
    (update,) = view.project(v2.ToolCallUpdateSessionUpdate(tool_call_id="c1", status="cancelled"))
    assert isinstance(update, v1.ToolCallUpdateSessionUpdate)
    assert update.status == "failed"
    entry = v2.PlanEntry(content="a", priority="high", status="pending")
    view.project(v2.PlanUpdateSessionUpdate(plan=v2.ItemsPlanUpdateContent(plan_id="p1", entries=[entry])))
    second = v2.PlanEntry(content="b", priority="low", status="cancelled")
    (merged,) = view.project(v2.PlanUpdateSessionUpdate(plan=v2.ItemsPlanUpdateContent(plan_id="p2", entries=[second])))
    assert [(e.content, e.status) for e in merged.entries] == [("a", "pending"), ("b", "completed")]


def test_v1_view_shows_a_v2_diff_without_its_texts_as_its_changes_and_patch() -> None:
    view = neutral.V1View()
    diff = neutral.diff_to_v2(neutral.Diff(PATH, "old\n", "new\n"))
    (created,) = view.project(v2.ToolCallUpdateSessionUpdate(tool_call_id="c1", title="Edit", content=[diff]))
    assert isinstance(created, v1.ToolCallSessionUpdate)
    assert isinstance(created.content, list)
    (item,) = created.content
    assert isinstance(item, v1.ContentToolCallContent)
    assert isinstance(item.content, v1.TextContentBlock)
    text = item.content.text
    assert text.startswith(f"modify {PATH}\n```diff\ndiff --git {PATH} {PATH}\n")
    assert "-old\n+new" in text and text.endswith("```")


# -- entry points: the agent itself (acp_handlers) ---------------------------------------------------
class Named(neutral.Agent):
    info = neutral.AgentInfo(name="named", version="2.0")

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        await turn.say("ok")
        return "end_turn"


@pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])
async def test_open_memory_pair_serves_the_agent_itself_in_the_version_the_client_speaks(variant: ModuleType) -> None:
    client = Client(variant)
    with trio.fail_after(DEADLINE):
        async with open_memory_pair(Named(), {variant: client}) as (agent_conn, client_conn):
            if variant is v1:
                answer = await client_conn.initialize(v1.InitializeRequest(protocol_version=1))
                assert answer.agent_info.name == "named"
            else:
                info = v2.Implementation(name="c", version="1")
                answer = await client_conn.initialize(v2.InitializeRequest(protocol_version=2, info=info))
                assert answer.info.name == "named"
            assert agent_conn.protocol_version == variant.PROTOCOL_VERSION
            assert isinstance(agent_conn.handler, neutral._V1Surface if variant is v1 else neutral._V2Surface)


def test_an_agent_limited_to_one_version_serves_only_that_one() -> None:
    class OnlyV1(Named):
        versions = (1,)

    assert list(OnlyV1().acp_handlers()) == [v1]
    with pytest.raises(ValueError, match="this layer speaks 1 and 2"):
        neutral.handlers(Named(), (3,))


async def test_acp_app_serves_the_agent_itself_one_connection_per_client() -> None:
    from acp_trio.transports.asgi import AcpApp

    app: Any = AcpApp(Named())  # an ASGI callable, driven by hand here
    answers: list[dict[str, Any]] = []

    async def post(params: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}).encode()
        sent = False
        out = b""

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await trio.sleep_forever()
            raise AssertionError

        async def send(message: dict[str, Any]) -> None:
            nonlocal out
            if message["type"] == "http.response.start":
                assert message["status"] == 200
            elif message["type"] == "http.response.body":
                out += message.get("body", b"")
                if not message.get("more_body"):
                    answers.append(json.loads(out))

        headers = [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream")]
        scope = {"type": "http", "http_version": "1.1", "method": "POST", "path": "/acp", "headers": headers}
        await app(scope, receive, send)

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            to_app, app_in = trio.open_memory_channel[dict[str, Any]](10)
            app_out, from_app = trio.open_memory_channel[dict[str, Any]](10)
            nursery.start_soon(app, {"type": "lifespan"}, app_in.receive, app_out.send)
            await to_app.send({"type": "lifespan.startup"})
            assert (await from_app.receive())["type"] == "lifespan.startup.complete"
            await post({"protocolVersion": 1})
            await post({"protocolVersion": 2, "info": {"name": "c", "version": "1"}})
            await to_app.send({"type": "lifespan.shutdown"})
            assert (await from_app.receive())["type"] == "lifespan.shutdown.complete"
            nursery.cancel_scope.cancel()
    v1_answer, v2_answer = (a["result"] for a in answers)
    assert (v1_answer["protocolVersion"], v1_answer["agentInfo"]["name"]) == (1, "named")
    assert (v2_answer["protocolVersion"], v2_answer["info"]["name"]) == (2, "named")


STDIO_AGENT = """
from acp_trio import neutral, run_agent_stdio

class Named(neutral.Agent):
    info = neutral.AgentInfo(name="named", version="2.0")

    async def prompt(self, turn):
        await turn.say("ok")
        return "end_turn"

run_agent_stdio(Named())
"""


@pytest.mark.one_interpreter  # a process: seconds of CPU, nothing the interpreter version changes
async def test_run_agent_stdio_serves_the_agent_itself_to_a_v2_client() -> None:
    client = Client(v2)
    with trio.fail_after(30):
        async with spawn_agent(sys.executable, ["-c", STDIO_AGENT], client={v2: client}) as conn:
            info = v2.Implementation(name="c", version="1")
            answer = await conn.initialize(v2.InitializeRequest(protocol_version=2, info=info))
            assert (answer.protocol_version, answer.info.name) == (2, "named")
            new = await conn.agent.session_new(v2.NewSessionRequest(cwd="/work"))
            prompt: list[v2.ContentBlock] = [v2.TextContentBlock(text="hi")]
            receipt = await conn.agent.session_prompt(v2.PromptRequest(session_id=new.session_id, prompt=prompt))
            assert receipt.message_id.startswith("msg_user_")
            await client.idle.wait()


class Refusing(neutral.Agent):
    info = neutral.AgentInfo(name="refusing", version="1")

    async def new_session(self, session: neutral.Session) -> None:
        await session.set_title("Fresh")
        await session.say("Ready when you are.")  # outside any turn

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        raise RequestError(-32000, "Authentication required", {"detail": "log in first"})


@pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])
async def test_a_turn_raising_request_error_is_the_v1_answer_and_a_v2_idle_error(variant: ModuleType) -> None:
    async with connected(Refusing(), KitClient(variant)) as wire:
        session_id = await wire.new_session()
        if variant is v1:
            with pytest.raises(RequestError) as caught:
                await wire.prompt(session_id)
            assert (caught.value.code, caught.value.data) == (-32000, {"detail": "log in first"})
        else:
            await wire.prompt(session_id)
            idle = wire.updates()[-1]
            error = {"code": -32000, "message": "Authentication required", "data": {"detail": "log in first"}}
            assert (idle["state"], idle["stopReason"], idle["error"]) == ("idle", "error", error)
        first = wire.updates()[:2]
    assert first[0] == {"sessionUpdate": "session_info_update", "title": "Fresh"}
    assert first[1]["sessionUpdate"] == "agent_message_chunk"
    assert first[1]["content"] == {"type": "text", "text": "Ready when you are."}

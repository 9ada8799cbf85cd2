"""The version-neutral agent API (issue 33, step 7): the session lifecycle without a store (design
rows L2, L5-L9; ``docs/protocol/v2/migration.mdx`` § Session setup and lifecycle: ``session/load``
is gone, v2 resumes with ``replayFrom: {type: start}``).

The layer keeps each session's history in this process, in the canonical (v2) form with the exact
v1 renderings beside it, so a session made on one version replays on the other: v1 ``session/load``
projects it through a fresh ``V1View``; v2 ``session/resume`` from start sends it as recorded.  The
check is the client's own fold (:class:`~acp_trio.session_state.SessionState`): the client that
loads a session ends with the transcript, tool calls, plan and options a client of its version
would have had watching the same turn live.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
import trio
from _neutral_kit import Client, connected

from acp_schema import v1, v2
from acp_trio import RequestError, neutral
from acp_trio._converter import converter
from acp_trio.session_state import SessionState

BOTH = pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])
MODE = neutral.ConfigOption(
    "mode",
    "Mode",
    current="ask",
    category="mode",
    choices=(neutral.Choice("ask", "Ask"), neutral.Choice("code", "Code")),
)


class Notes(neutral.Agent):
    """A turn with a bit of everything the history must carry; ``wait`` turns block in a tool call."""

    info = neutral.AgentInfo(name="notes", version="1")

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def config_options(self, session: neutral.Session) -> list[neutral.ConfigOption]:
        return [MODE]

    async def resume_session(self, session: neutral.Session) -> None:
        self.calls.append(f"resume {session.id} v{session.protocol_version}")

    async def close_session(self, session: neutral.Session) -> None:
        self.calls.append(f"close {session.id}")

    async def delete_session(self, session_id: str) -> None:
        self.calls.append(f"delete {session_id}")

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        if turn.text == "wait":
            call = await turn.tool("Run tests", kind="execute")
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await call.update(status="cancelled")
        await turn.think("Reading.")
        await turn.say("Let me ")
        await turn.say("look.")
        plan = await turn.plan(["Read", "Write"])
        call = await turn.tool("Edit a.txt", kind="edit", locations=["/work/a.txt"])
        await call.complete([neutral.Diff("/work/a.txt", "old\n", "new\n")])
        term = await (await turn.tool("Test", kind="execute")).terminal("pytest", cwd="/work")
        await term.write(b"1 passed\n")
        await term.exit(code=0)
        await plan.mark(0, "completed")
        await turn.session.set_title("Notes")
        await turn.session.set_config("mode", "code")
        await turn.say("Done.")
        return "end_turn"


def summary(state: SessionState) -> dict[str, Any]:
    """What a user sees of a session, without ids: messages by role, tool calls in order with their
    content, the plan's entries, the title, the mode and options."""
    plan = (
        [(e.content, e.status) for e in state.plan.entries]
        if state.plan is not None
        else [(e.content, e.status) for p in state.plans.values() for e in p.entries]
    )
    tools = []
    for call in state.tool_calls.values():
        content = converter.unstructure(call.content)
        if state.terminals:  # v2: the terminal by its output, not its id
            content = [state.terminals[c["terminalId"]].text if c.get("type") == "terminal" else c for c in content]
        tools.append((call.title, call.kind, call.status, content))
    options = [(o.current_value, o.category) for o in state.config_options]
    return {
        "messages": [(m.role, m.text) for m in state.messages],
        "tools": tools,
        "plan": plan,
        "title": state.session_info.title,
        "mode": state.current_mode_id,
        "options": options,
    }


async def live(variant: ModuleType) -> dict[str, Any]:
    """The summary of a client of ``variant`` that watched the turn live."""
    client = Client(variant)
    async with connected(Notes(), client) as wire:
        session_id = await wire.new_session()
        state = client.states.state(session_id)
        if variant is v1:
            new = [m for m in wire.messages() if "result" in m and "sessionId" in (m["result"] or {})][-1]
            state.apply_setup(converter.structure(new["result"], v1.NewSessionResponse))
            state.add_user_message([v1.TextContentBlock(text="hi")])  # a v1 client's own message
        else:
            new = [m for m in wire.messages() if "result" in m and "sessionId" in (m["result"] or {})][-1]
            state.apply_setup(converter.structure(new["result"], v2.NewSessionResponse))
        await wire.prompt(session_id, "hi")
    return summary(state)


@pytest.mark.parametrize(
    ("made_on", "loaded_on"),
    [(v2, v1), (v1, v2), (v1, v1), (v2, v2)],
    ids=["made-v2-loaded-v1", "made-v1-resumed-v2", "made-v1-loaded-v1", "made-v2-resumed-v2"],
)
async def test_a_session_replays_on_either_version_as_that_version_would_have_shown_it_live(
    made_on: ModuleType, loaded_on: ModuleType
) -> None:
    agent = Notes()
    async with connected(agent, Client(made_on)) as first:
        session_id = await first.new_session()
        await first.prompt(session_id, "hi")
    loader = Client(loaded_on)
    async with connected(agent, loader) as second:  # another connection, the same agent object
        if loaded_on is v1:
            response: Any = await second.agent.session_load(
                v1.LoadSessionRequest(session_id=session_id, cwd="/work", mcp_servers=[])
            )
        else:
            response = await second.agent.session_resume(
                v2.ResumeSessionRequest(session_id=session_id, cwd="/work", replay_from=v2.StartReplayFrom())
            )
        kinds = second.kinds()
    state = loader.states.state(session_id)
    state.apply_setup(response)
    assert summary(state) == await live(loaded_on)
    assert agent.calls == [f"resume {session_id} v{loaded_on.PROTOCOL_VERSION}"]
    if loaded_on is v2:
        assert kinds[-1] == "state:idle" and kinds.count("state:idle") == 1  # the current state, after the replay
        assert "state:running" not in kinds
    else:
        assert kinds[0] == "user_message_chunk"  # v1 replays the user's message too
        assert not any(k.startswith("state") or k in ("user_message", "plan_update") for k in kinds)


@BOTH
async def test_resume_without_replay_sends_no_history_and_another_cursor_is_refused(variant: ModuleType) -> None:
    agent = Notes()
    async with connected(agent, Client(variant)) as first:
        session_id = await first.new_session()
        await first.prompt(session_id, "hi")
    async with connected(agent, Client(variant)) as second:
        kind: Any = v1.ResumeSessionRequest if variant is v1 else v2.ResumeSessionRequest
        response = await second.agent.session_resume(kind(session_id=session_id, cwd="/work"))
        if variant is v2:
            with pytest.raises(RequestError) as refused:
                await second.agent.session_resume(
                    v2.ResumeSessionRequest(
                        session_id=session_id, cwd="/work", replay_from=v2.ReplayFromOther(type="_x")
                    )
                )
            assert refused.value.code == -32602
        with pytest.raises(RequestError) as unknown:
            await second.agent.session_resume(kind(session_id="sess_nope", cwd="/work"))
        kinds = second.kinds()
    assert unknown.value.code == -32002
    assert kinds == ([] if variant is v1 else ["state:idle"])
    assert [o.current_value for o in response.config_options] == ["code"]


@BOTH
async def test_list_shows_the_sessions_of_every_connection_most_recent_first_filtered_by_cwd(
    variant: ModuleType,
) -> None:
    agent = Notes()
    async with connected(agent, Client(v2)) as other:
        older = await other.new_session("/elsewhere")
    async with connected(agent, Client(variant)) as wire:
        newer = await wire.new_session()
        await wire.prompt(newer, "hi")
        everything = await wire.agent.session_list(variant.ListSessionsRequest())
        here = await wire.agent.session_list(variant.ListSessionsRequest(cwd="/work"))
        with pytest.raises(RequestError) as refused:
            await wire.agent.session_list(variant.ListSessionsRequest(cursor="x"))
    assert [s.session_id for s in everything.sessions] == [newer, older]
    assert [(s.session_id, s.title) for s in here.sessions] == [(newer, "Notes")]
    assert isinstance(here.sessions[0].updated_at, str) and here.sessions[0].updated_at.endswith("Z")
    assert refused.value.code == -32602


@BOTH
async def test_close_cancels_the_running_turn_and_keeps_the_history(variant: ModuleType) -> None:
    agent = Notes()
    client = Client(variant)
    async with connected(agent, client) as wire:
        session_id = await wire.new_session()
        results: list[Any] = []

        async def prompt() -> None:
            results.append(await wire.prompt(session_id, "wait"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(prompt)
            await client.seen("tool_call" if variant is v1 else "tool_call_update")
            await wire.agent.session_close(variant.CloseSessionRequest(session_id=session_id))
    assert agent.calls == [f"close {session_id}"]
    if variant is v1:
        assert [r.stop_reason for r in results] == ["cancelled"]
    else:
        assert wire.updates()[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}
    assert session_id in agent.sessions  # closed, not forgotten: it can be loaded again
    history = [type(u).__name__ for u, _ in agent.sessions[session_id]._history]
    assert history[-1] == "ToolCallUpdateSessionUpdate"  # the cancelled tool call is the last word


@BOTH
async def test_delete_forgets_the_session_and_an_unknown_id_succeeds(variant: ModuleType) -> None:
    agent = Notes()
    async with connected(agent, Client(variant)) as wire:
        session_id = await wire.new_session()
        await wire.agent.session_delete(variant.DeleteSessionRequest(session_id=session_id))
        await wire.agent.session_delete(variant.DeleteSessionRequest(session_id="sess_never"))
        listed = await wire.agent.session_list(variant.ListSessionsRequest())
        with pytest.raises(RequestError) as gone:
            await wire.agent.session_close(variant.CloseSessionRequest(session_id=session_id))
    assert agent.calls == [f"delete {session_id}", "delete sess_never"]
    assert listed.sessions == [] and agent.sessions == {}
    assert gone.value.code == -32002


@BOTH
async def test_the_layer_advertises_the_lifecycle_it_implements(variant: ModuleType) -> None:
    async with connected(Notes(), Client(variant)) as wire:
        (answer,) = [m["result"] for m in wire.messages() if m.get("id") == 0]
    if variant is v1:
        caps = answer["agentCapabilities"]
        assert caps["loadSession"] is True
        assert set(caps["sessionCapabilities"]) == {"list", "resume", "close", "delete", "additionalDirectories"}
    else:
        session = answer["capabilities"]["session"]
        assert session["delete"] == {} and session["additionalDirectories"] == {}


class Longrunning(neutral.Agent):
    """Starts a tool call in one turn and finishes it in a later one (kept across connections)."""

    info = neutral.AgentInfo(name="long", version="1")

    def __init__(self) -> None:
        super().__init__()
        self.pending: neutral.ToolCall | None = None

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        if self.pending is None:
            self.pending = await turn.tool("Index the repository", kind="search", status="in_progress")
        else:
            await self.pending.complete(["indexed"])
        return "end_turn"


async def test_a_v1_client_resuming_without_replay_gets_updates_of_known_tool_calls_as_updates() -> None:
    """Row L6: no replay, but the connection's view learns the history, so a tool call the client
    already has is a ``tool_call_update`` (a second ``tool_call`` would replace it in v1)."""
    agent = Longrunning()
    async with connected(agent, Client(v1)) as first:
        session_id = await first.new_session()
        await first.prompt(session_id)
    async with connected(agent, Client(v1)) as second:
        await second.agent.session_resume(v1.ResumeSessionRequest(session_id=session_id, cwd="/work"))
        await second.prompt(session_id, "finish")
    assert first.kinds() == ["tool_call"]
    (done,) = second.updates()
    assert done["sessionUpdate"] == "tool_call_update" and done["status"] == "completed"

"""The client batteries on protocol version 2: ``PermissionBroker``, ``SessionState`` and ``StandardClient``.

Spec: ``docs/protocol/v2/tool-calls.mdx`` (Requesting Permission: ``title``, ``subject``, the
``cancelled`` outcome), ``v2/migration.mdx`` (Version negotiation, Permission requests, the prompt
lifecycle), ``v2/prompt-lifecycle.mdx`` (Cancellation: the client MUST answer pending permission
requests ``cancelled``).  Agents and clients run in memory (``acp_trio.open_memory_pair``); one
test runs a fresh interpreter, because what it checks is what an import loads.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
import trio

import acp_trio
from acp_schema import v1, v2
from acp_trio import StandardClient, allow_all, allow_kinds, ask
from acp_trio.permissions import PendingPermission, PermissionBroker, permission_title, tool_call_id_of, tool_kind_of
from acp_trio.standard_client import TurnResult

DEADLINE = 10


def options(variant: ModuleType = v2) -> list[Any]:
    return [
        variant.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
        variant.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
    ]


def tool_call_request(tool_call_id: str = "call-1", kind: str | None = None) -> v2.RequestPermissionRequest:
    tool_call = v2.ToolCallUpdate(tool_call_id=tool_call_id)
    if kind is not None:
        tool_call.kind = kind  # type: ignore[assignment]
    return v2.RequestPermissionRequest(
        session_id="s-v2",
        title="Read notes.txt?",
        subject=v2.ToolCallRequestPermissionSubject(tool_call=tool_call),
        options=options(),
    )


class Agent2:
    """A v2 agent: each prompt reports a tool call (kind ``read``) and asks permission for it by id
    only (``subject.toolCall`` without a kind), then says which option it got."""

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.outcomes: list[Any] = []
        self.asking = trio.Event()

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id="s-v2")

    async def send(self, session_id: str, update: Any) -> None:
        await self.conn.client.session_update(v2.UpdateSessionNotification(session_id=session_id, update=update))

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        sid = params.session_id

        async def turn() -> str:
            await self.send(sid, v2.UserMessageSessionUpdate(message_id="u1", content=params.prompt))
            await self.send(sid, v2.ToolCallUpdateSessionUpdate(tool_call_id="call-1", title="Read", kind="read"))
            await self.send(sid, v2.RequiresActionStateUpdateSessionUpdate())
            self.asking.set()
            response = await self.conn.client.session_request_permission(tool_call_request())
            self.outcomes.append(response.outcome)
            await self.send(sid, v2.RunningStateUpdateSessionUpdate())
            allowed = isinstance(response.outcome, v2.SelectedRequestPermissionOutcome)
            await self.send(sid, v2.ToolCallUpdateSessionUpdate(tool_call_id="call-1", status="completed"))
            text = f"permission: {response.outcome.option_id if allowed else 'none'}"
            await self.send(
                sid, v2.AgentMessageChunkSessionUpdate(message_id="a1", content=v2.TextContentBlock(text=text))
            )
            return "end_turn"

        self.conn.start_turn(sid, turn)
        return v2.PromptResponse(message_id="u1")


class Agent1:
    """The same turn in v1 (the permission request names the tool call by id only)."""

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.outcomes: list[Any] = []

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s-v1")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        sid = params.session_id
        client = self.conn.client
        update = v1.ToolCallSessionUpdate(tool_call_id="call-1", title="Read", kind="read")
        await client.session_update(v1.SessionNotification(session_id=sid, update=update))
        response = await client.session_request_permission(
            v1.RequestPermissionRequest(
                session_id=sid, tool_call=v1.ToolCallUpdate(tool_call_id="call-1"), options=options(v1)
            )
        )
        self.outcomes.append(response.outcome)
        allowed = isinstance(response.outcome, v1.SelectedRequestPermissionOutcome)
        text = f"permission: {response.outcome.option_id if allowed else 'none'}"
        chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=text))
        await client.session_update(v1.SessionNotification(session_id=sid, update=chunk))
        return v1.PromptResponse(stop_reason="end_turn")


# -- the permission broker on v2 requests --------------------------------------------------------


async def test_policies_read_the_kind_of_a_v2_tool_call_subject_and_answer_in_v2() -> None:
    broker = PermissionBroker(allow_kinds({"read"}))
    response = await broker.session_request_permission(tool_call_request(kind="read"))
    assert response == v2.RequestPermissionResponse(outcome=v2.SelectedRequestPermissionOutcome(option_id="allow"))
    response = await broker.session_request_permission(tool_call_request(kind="edit"))
    assert response.outcome == v2.SelectedRequestPermissionOutcome(option_id="reject")
    assert tool_kind_of(tool_call_request()) == "other"
    assert tool_kind_of(tool_call_request(), lambda sid, tid: "read" if (sid, tid) == ("s-v2", "call-1") else None) == (
        "read"
    )


async def test_a_v2_command_subject_counts_as_execute_and_a_request_without_subject_as_other() -> None:
    command = v2.RequestPermissionRequest(
        session_id="s",
        title="Run the tests?",
        subject=v2.CommandRequestPermissionSubject(command="pytest", cwd="/p", tool_call_id="call-9"),
        options=options(),
    )
    bare = v2.RequestPermissionRequest(session_id="s", title="Proceed?", options=options())
    assert (tool_kind_of(command), tool_call_id_of(command), permission_title(command)) == (
        "execute",
        "call-9",
        "Run the tests?",
    )
    assert (tool_kind_of(bare), tool_call_id_of(bare), permission_title(bare)) == ("other", None, "Proceed?")
    broker = PermissionBroker(allow_kinds({"execute"}))
    assert (await broker.session_request_permission(command)).outcome.option_id == "allow"
    assert (await broker.session_request_permission(bare)).outcome.option_id == "reject"


async def test_a_v2_dismissal_answers_the_v2_cancelled_outcome_and_pending_entries_describe_v2_requests() -> None:
    seen: list[PendingPermission] = []

    async def dismiss(request: Any) -> str | None:
        seen.extend(broker.pending())
        return None

    broker = PermissionBroker(ask(dismiss))
    response = await broker.session_request_permission(tool_call_request())
    assert response == v2.RequestPermissionResponse(outcome=v2.CancelledRequestPermissionOutcome())
    assert [(p.title, p.tool_call_id, p.session_id) for p in seen] == [("Read notes.txt?", "call-1", "s-v2")]
    assert [o.option_id for o in seen[0].options] == ["allow", "reject"]


# -- StandardClient on v2 ------------------------------------------------------------------------


async def test_standard_client_runs_a_v2_turn_and_allow_kinds_sees_the_kind_announced_earlier(
    tmp_path: Path,
) -> None:
    with trio.fail_after(DEADLINE):
        client_factory = functools.partial(StandardClient, policy=allow_kinds({"read"}))
        async with acp_trio.open_memory_pair({v2: Agent2}, {v2: client_factory}) as (agent_conn, client_conn):
            client: StandardClient = client_conn.handler
            await client.initialize(timeout=DEADLINE)
            assert client_conn.protocol_version == 2
            sid = await client.new_session(tmp_path)
            result = await client.prompt(sid, "read it")
            assert isinstance(result, TurnResult)
            assert (result.stop_reason, result.error, result.message_id) == ("end_turn", None, "u1")
            agent: Agent2 = agent_conn.handler
            assert agent.outcomes == [v2.SelectedRequestPermissionOutcome(option_id="allow")]
            state = client.states[sid]
            assert [m.text for m in state.messages] == ["read it", "permission: allow"]
            assert state.tool_calls["call-1"].status == "completed" and state.run_state == "idle"


async def test_standard_client_cancel_on_v2_answers_the_pending_permission_cancelled_and_ends_the_turn(
    tmp_path: Path,
) -> None:
    lines: list[bytes] = []
    asked = trio.Event()

    async def never(request: Any) -> str | None:
        asked.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    client_factory = functools.partial(StandardClient, policy=ask(never))
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(
            {v2: Agent2}, {v2: client_factory}, tap=lambda d, line: lines.append(line) if d == "out" else None
        ) as (_agent_conn, client_conn):
            client: StandardClient = client_conn.handler
            await client.initialize()
            sid = await client.new_session(tmp_path)
            results: list[Any] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_prompt, client, sid, results)
                await asked.wait()
                assert [p.title for p in client.permissions.pending(sid)] == ["Read notes.txt?"]
                await client.cancel(sid)
            assert [r.stop_reason for r in results if isinstance(r, TurnResult)] == ["cancelled"]
            assert client.permissions.pending() == []
    wire = [orjson.loads(line) for line in lines]
    assert {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}} in wire
    answers = [m["result"] for m in wire if "result" in m and "outcome" in (m["result"] or {})]
    assert answers == [{"outcome": {"outcome": "cancelled"}}]


async def run_prompt(client: StandardClient, sid: str, results: list[Any]) -> None:
    results.append(await client.prompt(sid, "read it"))


async def test_a_v2_turn_that_does_not_end_in_time_is_cancelled_and_prompt_raises_timeout_error(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    async def never(request: Any) -> str | None:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    client_factory = functools.partial(StandardClient, policy=ask(never))
    with trio.fail_after(1000):
        async with acp_trio.open_memory_pair({v2: Agent2}, {v2: client_factory}) as (_agent_conn, client_conn):
            client: StandardClient = client_conn.handler
            await client.initialize()
            sid = await client.new_session(tmp_path)
            with pytest.raises(TimeoutError, match="did not end within 30 s; session/cancel was sent"):
                await client.prompt(sid, "read it", timeout=30)
            await client.states.wait_idle(sid)  # the agent ended the turn cancelled
            assert client.states[sid].stop_reason == "cancelled"
            assert client.permissions.pending() == []


async def test_a_v2_prompt_raises_connection_closed_when_the_agent_goes_away_mid_turn(tmp_path: Path) -> None:
    async def hang_up(request: Any) -> str | None:
        await client.conn.aclose()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    client_factory = functools.partial(StandardClient, policy=ask(hang_up))
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair({v2: Agent2}, {v2: client_factory}) as (_agent_conn, client_conn):
            client: StandardClient = client_conn.handler
            await client.initialize()
            sid = await client.new_session(tmp_path)
            with pytest.raises(acp_trio.ConnectionClosed) as info:
                await client.prompt(sid, "read it")
            # the connection's own error (a spawned agent's exit status and stderr are in it), and where it hit
            closed = client_conn.connection.close_error
            assert closed is not None and str(info.value) == str(closed) and info.value is not closed
            assert "while waiting for the turn of session 's-v2' to end" in info.value.__notes__


AGENTS_DIR = Path(__file__).parent / "agents"


async def test_a_v2_prompt_says_how_the_agent_process_ended_when_it_dies_mid_turn(tmp_path: Path) -> None:
    make = StandardClient.for_versions(v2)
    agent = [str(AGENTS_DIR / "crashing_agent_v2.py")]
    with trio.fail_after(30):
        async with acp_trio.spawn_agent(sys.executable, agent, client=make, shutdown_timeout=2) as conn:
            client: StandardClient = conn.handler
            await client.initialize(timeout=20)
            sid = await client.new_session(tmp_path, timeout=20)
            with pytest.raises(acp_trio.ConnectionClosed) as info:
                await client.prompt(sid, "go", timeout=20)
    assert info.value.exit_code == 3
    assert info.value.stderr_tail[-1:] == ("fatal: the model endpoint refused the key",)
    assert "exited with code 3" in str(info.value) and "refused the key" in str(info.value)


class SilentAgent2:
    """A v2 agent whose turns never end by themselves and that ends a session on session/close
    without reporting ``idle`` (a buggy or hostile agent)."""

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.prompted = trio.Event()

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id="s-v2")

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        self.prompted.set()
        return v2.PromptResponse(message_id="u1")

    async def session_close(self, params: v2.CloseSessionRequest) -> v2.CloseSessionResponse:
        return v2.CloseSessionResponse()


@pytest.mark.parametrize("how", ["session/close", "discarded"])
async def test_a_v2_prompt_whose_session_ends_first_raises_session_ended_not_connection_closed(
    tmp_path: Path, how: str
) -> None:
    from acp_trio.standard_client import SessionEnded

    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair({v2: SilentAgent2}, {v2: StandardClient}) as (agent_conn, client_conn):
            client: StandardClient = client_conn.handler
            await client.initialize()
            sid = await client.new_session(tmp_path)
            errors: list[BaseException] = []
            async with trio.open_nursery() as nursery:

                async def prompt() -> None:
                    with pytest.raises(SessionEnded) as info:
                        await client.prompt(sid, "go")
                    errors.append(info.value)

                nursery.start_soon(prompt)
                await agent_conn.handler.prompted.wait()
                if how == "session/close":  # the agent reports no idle; the client forgets ended sessions
                    client_conn.sessions.on_end(lambda info: client.states.discard(info.session_id))
                    await client_conn.agent.session_close(v2.CloseSessionRequest(session_id=sid))
                else:
                    client.states.discard(sid)
            assert not client_conn.closed  # the connection is fine: only the session ended
    [error] = errors
    assert isinstance(error, SessionEnded) and not isinstance(error, acp_trio.ConnectionClosed)
    assert (error.session_id, error.reason) == (sid, how)
    assert f"session {sid!r} ended ({how}) before its turn did" in str(error)


@pytest.mark.parametrize("agent_versions", [(1,), (2,), (1, 2)], ids=["v1-agent", "v2-agent", "both-agent"])
async def test_for_versions_is_one_client_object_that_works_whichever_version_is_negotiated(
    tmp_path: Path, agent_versions: tuple[int, ...]
) -> None:
    agents = {v1: Agent1, v2: Agent2}
    agent = {variant: cls for variant, cls in agents.items() if variant.PROTOCOL_VERSION in agent_versions}
    make = StandardClient.for_versions(policy=allow_all())
    assert set(make) == {v1, v2} and len(set(make.values())) == 1
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(agent, make) as (agent_conn, client_conn):
            client: StandardClient = client_conn.handler
            response = await client.initialize("test-client", "1")
            expected = max(agent_versions)
            assert response.protocol_version == expected == client_conn.protocol_version
            # one object served both versions' routes: the one built first is the one in use
            assert len({id(h) for h in client_conn.handlers.values()}) == 1 and client_conn.handler is client
            name = (agent_conn.client_info or {}).get("name")
            assert name == "test-client"
            sid = await client.new_session(tmp_path)
            result = await client.prompt(sid, "read it")
            assert result.stop_reason == "end_turn"
            assert client.states[sid].messages[-1].text == "permission: allow"
            assert client.states[sid].tool_calls["call-1"].kind == "read"


async def test_capabilities_per_version_advertise_what_each_version_has() -> None:
    async with acp_trio.open_memory_pair(Agent1, StandardClient) as (_agent_conn, client_conn):
        client: StandardClient = client_conn.handler
        assert client.capabilities_v2 == v2.ClientCapabilities()  # v2 clients offer no fs or terminals
        assert client.capabilities_for(v1) == client.capabilities
        requests = client.initialize_requests("c", "1")
        assert [type(r) for r in requests] == [v1.InitializeRequest]  # a v1-only connection offers v1 only


async def test_the_v2_demo_client_answers_permission_through_the_battery_and_folds_state(tmp_path: Path) -> None:
    import io

    from acp_trio.demo.agent import DemoAgent
    from acp_trio.demo.client_v2 import DemoClientV2, demo_client_v2_factory

    (tmp_path / "notes.txt").write_text("alpha beta\n", encoding="utf-8")
    out = io.StringIO()
    with trio.fail_after(30):
        async with acp_trio.open_memory_pair(DemoAgent(), {v2: demo_client_v2_factory(out, allow=False)}) as (
            _agent_conn,
            client_conn,
        ):
            client: DemoClientV2 = client_conn.handler
            assert isinstance(client, StandardClient) and isinstance(client.permissions, PermissionBroker)
            await client.initialize()
            sid = await client.new_session(tmp_path)
            assert await client.run_turn(sid, "go", timeout=20) == "end_turn"
            state = client.states[sid]
            assert state.tool_calls["call_read"].status == "failed"
            assert state.stop_reason == "end_turn"
    assert "(tool call_read): choosing 'Reject' (reject_once)" in out.getvalue()


# -- what importing the client batteries costs a v1 client --------------------------------------

V1_CLIENT = textwrap.dedent(
    """
    import sys
    import trio
    import acp_trio.session_state
    import acp_trio.standard_client
    import acp_trio.permissions
    import acp_trio.elicitation
    from acp_schema import v1
    from acp_trio import StandardClient, allow_all, open_memory_pair


    class Agent:
        def __init__(self, conn):
            self.conn = conn

        async def session_new(self, params):
            return v1.NewSessionResponse(session_id="s")

        async def session_prompt(self, params):
            update = v1.ToolCallSessionUpdate(tool_call_id="c", title="Read", kind="read")
            await self.conn.client.session_update(v1.SessionNotification(session_id="s", update=update))
            await self.conn.client.session_request_permission(v1.RequestPermissionRequest(
                session_id="s", tool_call=v1.ToolCallUpdate(tool_call_id="c"),
                options=[v1.PermissionOption(option_id="a", name="Allow", kind="allow_once")]))
            chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text="done"))
            await self.conn.client.session_update(v1.SessionNotification(session_id="s", update=chunk))
            return v1.PromptResponse(stop_reason="end_turn")


    async def main():
        async with open_memory_pair(Agent, lambda conn: StandardClient(conn, policy=allow_all())) as (_, conn):
            client = conn.handler
            await client.initialize()
            sid = await client.new_session("/tmp")
            result = await client.prompt(sid, "go")
            assert result.stop_reason == "end_turn", result
            assert client.states[sid].messages[-1].text == "done"


    trio.run(main)
    loaded = sorted(name for name in sys.modules if name.startswith("acp_schema.v2"))
    print(" ".join(loaded) or "none")
    """
)


def test_a_v1_client_on_the_batteries_never_imports_the_v2_schema() -> None:
    result = subprocess.run([sys.executable, "-c", V1_CLIENT], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "none"

"""``acp_trio.StandardClient``: the client batteries (fs, terminals, permissions, session state) composed.

Every test runs an agent and a :class:`~acp_trio.StandardClient` in memory
(``acp_trio.testing.pair(Agent, functools.partial(StandardClient, ...))``); the agents talk through the
typed client proxy and the builders, terminals run real ``sys.executable -c`` processes.  Waits
use the real clock bounded by ``trio.fail_after``; readiness comes from events, never sleeps.
Sources: ``docs/protocol/v1/file-system.mdx``, ``terminals.mdx``, ``tool-calls.mdx``,
``prompt-turn.mdx``, ``initialization.mdx``.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import acp_trio
import acp_trio.testing as testing
from acp_schema import v1
from acp_trio import builders as b
from acp_trio.agent_terminal import open_terminal
from acp_trio.fs import FsError
from acp_trio.session_state import MessageEntry, SessionState, ToolCallEntry
from acp_trio.terminals import Terminal

pytestmark = pytest.mark.skipif(os.name != "posix", reason="terminals use process groups and signals (POSIX)")

PY = sys.executable
DEADLINE = 10
SLEEPER = "import time\nprint('ready', flush=True)\nwhile True: time.sleep(1)"


class Agent:
    """Advertises session/close and additional directories; sessions are ``s1``, ``s2``, ...;
    ``session/prompt`` runs :meth:`turn` (subclasses override it)."""

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.count = 0
        self.outcomes: list[v1.PermissionOption | None] = []

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        caps = v1.AgentCapabilities(
            session_capabilities=v1.SessionCapabilities(
                close=v1.SessionCloseCapabilities(),
                additional_directories=v1.SessionAdditionalDirectoriesCapabilities(),
            )
        )
        return v1.InitializeResponse(protocol_version=1, agent_capabilities=caps)

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        self.count += 1
        return v1.NewSessionResponse(session_id=f"s{self.count}")

    async def session_close(self, params: v1.CloseSessionRequest) -> v1.CloseSessionResponse:
        return v1.CloseSessionResponse()

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        return v1.PromptResponse(stop_reason=await self.turn(params.session_id))

    async def turn(self, session_id: str) -> v1.StopReason:
        return "end_turn"

    async def send(self, session_id: str, update: v1.SessionUpdate) -> None:
        await self.conn.client.session_update(b.notification(session_id, update))


@asynccontextmanager
async def pair(
    agent: Callable[[acp_trio.AgentSideConnection], Agent] = Agent,
    client: Callable[..., acp_trio.StandardClient] = acp_trio.StandardClient,
    **options: Any,
) -> AsyncIterator[tuple[acp_trio.AgentSideConnection, acp_trio.ClientSideConnection, acp_trio.StandardClient]]:
    """An initialized pair whose client is ``client(conn, **options)``, advertising ``client.capabilities``
    (the test kit's pair: it initializes with the StandardClient's own requests)."""
    async with testing.pair(agent, functools.partial(client, **options)) as p:
        assert p.agent_conn is not None
        yield p.agent_conn, p.client_conn, p.client


async def new_session(client_conn: acp_trio.ClientSideConnection, cwd: Path, *extra: Path) -> str:
    request = v1.NewSessionRequest(cwd=str(cwd), mcp_servers=[])
    if extra:
        request.additional_directories = [str(d) for d in extra]
    response = await client_conn.agent.session_new(request)
    session_id: str = response.session_id
    return session_id


def raw(session_id: str, **fields: Any) -> dict[str, Any]:
    return {"sessionId": session_id, **fields}


# -- capabilities ---------------------------------------------------------------------------------


async def test_default_capabilities_offer_fs_read_write_and_terminals(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair() as (agent_conn, client_conn, client):
            assert client.capabilities == v1.ClientCapabilities(
                fs=v1.FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
            )
            assert agent_conn.client_capabilities == {
                "fs": {"readTextFile": True, "writeTextFile": True},
                "terminal": True,
            }
            assert client.terminals is not None
            sid = await new_session(client_conn, tmp_path)
            target = tmp_path / "new.txt"
            await agent_conn.client.fs_write_text_file(
                v1.WriteTextFileRequest(session_id=sid, path=str(target), content="hi\n")
            )
            assert target.read_text() == "hi\n"


async def test_writable_false_drops_write_and_a_write_gets_the_fs_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("kept\n")
    with trio.fail_after(DEADLINE):
        async with pair(writable=False) as (agent_conn, client_conn, client):
            assert client.capabilities.fs == v1.FileSystemCapabilities(read_text_file=True, write_text_file=False)
            assert client.capabilities.terminal is True
            assert agent_conn.client_capabilities["fs"] == {"readTextFile": True, "writeTextFile": False}
            sid = await new_session(client_conn, tmp_path)
            path = str(tmp_path / "a.txt")
            # an agent that respects the capabilities does not even send it
            with pytest.raises(acp_trio.CapabilityError):
                await agent_conn.client.fs_write_text_file(
                    v1.WriteTextFileRequest(session_id=sid, path=path, content="x")
                )
            # one that ignores them gets the fs module's -32601
            with pytest.raises(acp_trio.RequestError) as exc:
                await agent_conn.connection.request("fs/write_text_file", raw(sid, path=path, content="x"))
            assert exc.value.code == acp_trio.METHOD_NOT_FOUND
            assert isinstance(exc.value.data, dict) and exc.value.data["method"] == "fs/write_text_file"
            assert "writeTextFile" in exc.value.data["detail"]
            with pytest.raises(FsError) as direct:
                await client.fs_write_text_file(v1.WriteTextFileRequest(session_id=sid, path=path, content="x"))
            assert direct.value.code == acp_trio.METHOD_NOT_FOUND
            assert (tmp_path / "a.txt").read_text() == "kept\n"
            # reads still work
            read = await agent_conn.client.fs_read_text_file(v1.ReadTextFileRequest(session_id=sid, path=path))
            assert read.content == "kept\n"


async def test_terminals_false_drops_terminal_and_terminal_methods_answer_method_not_found(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(terminals=False) as (agent_conn, client_conn, client):
            assert client.capabilities.terminal is False
            assert client.capabilities.fs == v1.FileSystemCapabilities(read_text_file=True, write_text_file=True)
            assert agent_conn.client_capabilities.get("terminal") is False
            assert client.terminals is None
            sid = await new_session(client_conn, tmp_path)
            with pytest.raises(acp_trio.CapabilityError):
                async with open_terminal(agent_conn, sid, PY, args=["-c", "pass"]):
                    pass
            with pytest.raises(acp_trio.RequestError) as exc:
                await agent_conn.connection.request(
                    "terminal/create", raw(sid, command=PY, args=["-c", "open('ran', 'w')"])
                )
            assert exc.value.code == acp_trio.METHOD_NOT_FOUND
            assert exc.value.data == {"method": "terminal/create"}
            for method in ("terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release"):
                with pytest.raises(acp_trio.RequestError) as exc:
                    await agent_conn.connection.request(method, raw(sid, terminalId="term_1"))
                assert exc.value.code == acp_trio.METHOD_NOT_FOUND and exc.value.data == {"method": method}
    assert not (tmp_path / "ran").exists()


# -- a whole prompt turn --------------------------------------------------------------------------


class WorkingAgent(Agent):
    """Plans, streams a message, edits notes.txt behind a permission request, runs a script in a
    client terminal, reports both tool calls and ends the turn."""

    terminal_output = ""

    async def turn(self, session_id: str) -> v1.StopReason:
        client = self.conn.client
        notes = os.path.join(self.conn.sessions[session_id].cwd, "notes.txt")
        await self.send(session_id, b.plan([b.plan_entry("Edit notes", status="in_progress"), "Run the script"]))
        await self.send(session_id, b.agent_message("Editing ", message_id="m1"))
        await self.send(session_id, b.agent_message("notes.", message_id="m1"))

        edit = b.ToolCallReporter(
            client, session_id, "Uppercase notes", kind="edit", tool_call_id="edit", locations=[notes]
        )
        await edit.start()
        option = await edit.request_permission()
        self.outcomes.append(option)
        if option is None or not option.kind.startswith("allow"):
            await edit.fail("not allowed")
            return "end_turn"
        await edit.update(status="in_progress")
        old = (await client.fs_read_text_file(v1.ReadTextFileRequest(session_id=session_id, path=notes))).content
        new = old.upper()
        await client.fs_write_text_file(v1.WriteTextFileRequest(session_id=session_id, path=notes, content=new))
        await edit.complete(b.diff(notes, new, old_text=old))

        run = b.ToolCallReporter(client, session_id, "Run the script", kind="execute", tool_call_id="run")
        await run.start()
        code = "import os; print('ran in', os.path.basename(os.getcwd()))"
        async with open_terminal(self.conn, session_id, PY, args=["-c", code]) as term:
            await run.update(status="in_progress", content=term.content())
            status = await term.wait_for_exit()
            self.terminal_output = (await term.output()).output
        await run.complete(raw_output={"exitCode": status.exit_code})
        await self.send(
            session_id,
            b.plan(
                [b.plan_entry("Edit notes", status="completed"), b.plan_entry("Run the script", status="completed")]
            ),
        )
        await self.send(session_id, b.agent_message("Done.", message_id="m2"))
        return "end_turn"


async def test_a_full_prompt_turn_is_folded_into_the_session_state(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    notes = work / "notes.txt"
    notes.write_text("hello\nworld\n")
    with trio.fail_after(DEADLINE):
        async with pair(WorkingAgent, policy=acp_trio.allow_all()) as (agent_conn, client_conn, client):
            sid = await new_session(client_conn, work)
            response = await client.prompt(sid, "Uppercase my notes")
            assert response.stop_reason == "end_turn"
            agent: WorkingAgent = agent_conn.handler
            assert [o.option_id if o else None for o in agent.outcomes] == ["allow-once"]
            assert agent.terminal_output == "ran in work\n"
            assert client.terminals is not None and dict(client.terminals.terminals) == {}
            assert client.permissions.pending() == []

            state = client.states[sid]
            entries = [
                e.role if isinstance(e, MessageEntry) else getattr(e, "tool_call_id", e) for e in state.transcript
            ]
            assert entries == ["user", "agent", "edit", "run", "agent"]
            assert [(m.role, m.text) for m in state.messages] == [
                ("user", "Uppercase my notes"),
                ("agent", "Editing notes."),
                ("agent", "Done."),
            ]
            edit, run = state.tool_calls["edit"], state.tool_calls["run"]
            assert (edit.kind, edit.status, edit.title, edit.cancelled) == (
                "edit",
                "completed",
                "Uppercase notes",
                False,
            )
            assert edit.content == [b.diff(str(notes), "HELLO\nWORLD\n", old_text="hello\nworld\n")]
            assert [loc.path for loc in edit.locations] == [str(notes)]
            assert (run.kind, run.status, run.raw_output) == ("execute", "completed", {"exitCode": 0})
            assert len(run.content) == 1 and isinstance(run.content[0], v1.TerminalToolCallContent)
            assert run.content[0].terminal_id.startswith("term_")
            assert state.plan is not None
            assert [(e.content, e.status) for e in state.plan.entries] == [
                ("Edit notes", "completed"),
                ("Run the script", "completed"),
            ]
    assert notes.read_text() == "HELLO\nWORLD\n"


# -- permissions ----------------------------------------------------------------------------------


class AskingAgent(Agent):
    """Asks permission twice: with all four standard options, then with allow options only."""

    async def turn(self, session_id: str) -> v1.StopReason:
        for call_id, options in (
            ("all", b.permission_options()),
            ("allow", b.permission_options("allow_once", "allow_always")),
        ):
            tc = b.ToolCallReporter(self.conn.client, session_id, f"Tool {call_id}", kind="read", tool_call_id=call_id)
            await tc.start()
            option = await tc.request_permission(options)
            self.outcomes.append(option)
            if option is None or not option.kind.startswith("allow"):
                await tc.fail("denied")
            else:
                await tc.complete("done")
        return "end_turn"


async def test_the_default_policy_denies(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(AskingAgent) as (agent_conn, client_conn, client):
            sid = await new_session(client_conn, tmp_path)
            assert (await client.prompt(sid, "go")).stop_reason == "end_turn"
            agent: AskingAgent = agent_conn.handler
            # reject_once when offered; cancelled when the request offers no way to reject
            assert [o.option_id if o else None for o in agent.outcomes] == ["reject-once", None]
            assert {k: t.status for k, t in client.states[sid].tool_calls.items()} == {
                "all": "failed",
                "allow": "failed",
            }


async def test_allow_all_policy_allows(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(AskingAgent, policy=acp_trio.allow_all()) as (agent_conn, client_conn, client):
            sid = await new_session(client_conn, tmp_path)
            await client.prompt(sid, "go")
            agent: AskingAgent = agent_conn.handler
            assert [o.option_id if o else None for o in agent.outcomes] == ["allow-once", "allow-once"]
            assert {k: t.status for k, t in client.states[sid].tool_calls.items()} == {
                "all": "completed",
                "allow": "completed",
            }


# -- cancellation ---------------------------------------------------------------------------------


class CancellableAgent(Agent):
    """Finishes one tool call, then asks permission for another (shielded, so the client's
    ``cancelled`` answer is seen even though session/cancel cancelled the turn)."""

    async def turn(self, session_id: str) -> v1.StopReason:
        done = b.ToolCallReporter(self.conn.client, session_id, "Look around", kind="read", tool_call_id="done")
        await done.start()
        await done.complete("nothing to see")
        pending = b.ToolCallReporter(self.conn.client, session_id, "Delete it", kind="delete", tool_call_id="pending")
        await pending.start()
        with trio.CancelScope(shield=True):
            option = await pending.request_permission()
        self.outcomes.append(option)
        await trio.lowlevel.checkpoint()  # the turn was cancelled: this raises
        return "end_turn"


async def test_a_cancelled_turn_marks_its_unfinished_tool_calls_cancelled(tmp_path: Path) -> None:
    asking = trio.Event()
    dialog: list[str] = []

    async def blocking_dialog(request: v1.RequestPermissionRequest) -> str | None:
        dialog.append(f"shown {request.tool_call.tool_call_id}")
        asking.set()
        try:
            await trio.sleep_forever()
        finally:
            dialog.append("closed")

    with trio.fail_after(DEADLINE):
        async with pair(CancellableAgent, policy=acp_trio.ask(blocking_dialog)) as (agent_conn, client_conn, client):
            sid = await new_session(client_conn, tmp_path)
            responses: list[v1.PromptResponse] = []

            async def prompt() -> None:
                responses.append(await client.prompt(sid, "clean up"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(prompt)
                await asking.wait()
                state = client.states[sid]
                assert [p.tool_call_id for p in client.permissions.pending(sid)] == ["pending"]
                assert not state.tool_calls["pending"].cancelled
                await client.cancel(sid)
            assert [r.stop_reason for r in responses] == ["cancelled"]
            agent: CancellableAgent = agent_conn.handler
            assert agent.outcomes == [None]  # the agent saw the "cancelled" outcome
            assert dialog == ["shown pending", "closed"]
            assert client.permissions.pending() == []
            assert state.tool_calls["pending"].cancelled and state.tool_calls["pending"].status == "pending"
            assert not state.tool_calls["done"].cancelled and state.tool_calls["done"].status == "completed"


# -- subclassing ----------------------------------------------------------------------------------


class ReportingAgent(Agent):
    """Sends one update of each common kind, then reads a file through the client."""

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        super().__init__(conn)
        self.sent: list[Any] = []
        self.read = ""

    async def turn(self, session_id: str) -> v1.StopReason:
        path = os.path.join(self.conn.sessions[session_id].cwd, "data.txt")
        self.sent = [
            b.agent_thought("thinking"),
            b.plan(["step"]),
            b.agent_message("a"),
            b.tool_call("t1", "Read data", kind="read", locations=[path]),
            b.tool_call_update("t1", status="in_progress"),
            b.agent_message("b"),
            b.tool_call_update("t1", status="completed", content=["3 lines"]),
        ]
        for update in self.sent:
            await self.send(session_id, update)
        response = await self.conn.client.fs_read_text_file(v1.ReadTextFileRequest(session_id=session_id, path=path))
        self.read = response.content
        return "end_turn"


class RecordingClient(acp_trio.StandardClient):
    def __init__(self, conn: acp_trio.ClientSideConnection, **options: Any) -> None:
        super().__init__(conn, **options)
        self.seen: list[tuple[SessionState, Any, int]] = []
        self.reads: list[str] = []

    def on_update(self, state: SessionState, update: Any) -> None:
        self.seen.append((state, update, state.update_count))

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        self.reads.append(params.path)
        response = await super().fs_read_text_file(params)
        response.content = response.content.replace("secret", "[redacted]")
        return response


async def test_a_subclass_sees_every_update_in_order_and_can_wrap_handlers(tmp_path: Path) -> None:
    data = tmp_path / "data.txt"
    data.write_text("one\nsecret\nthree\n")
    with trio.fail_after(DEADLINE):
        async with pair(ReportingAgent, RecordingClient) as (agent_conn, client_conn, client):
            assert isinstance(client, RecordingClient)
            sid = await new_session(client_conn, tmp_path)
            await client.prompt(sid, "report")
            agent: ReportingAgent = agent_conn.handler
            state = client.states[sid]
            assert [update for _, update, _ in client.seen] == agent.sent
            assert all(s is state for s, _, _ in client.seen)
            # called after each update was folded in
            assert [count for _, _, count in client.seen] == list(range(1, len(agent.sent) + 1))
            assert client.reads == [str(data)]
            assert agent.read == "one\n[redacted]\nthree\n"
            assert state.tool_calls["t1"] == ToolCallEntry(
                "t1",
                title="Read data",
                kind="read",
                status="completed",
                content=[b.tool_content("3 lines")],
                locations=[b.location(data)],
                announced=True,
            )


# -- roots ----------------------------------------------------------------------------------------


async def test_paths_outside_the_session_roots_are_refused(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret\n")
    with trio.fail_after(DEADLINE):
        async with pair() as (agent_conn, client_conn, _client):
            sid = await new_session(client_conn, work)
            sneaky = str(work / ".." / "secret.txt")
            with pytest.raises(acp_trio.RequestError) as exc:
                await agent_conn.client.fs_read_text_file(v1.ReadTextFileRequest(session_id=sid, path=sneaky))
            assert exc.value.code == acp_trio.INVALID_PARAMS
            assert isinstance(exc.value.data, dict)
            assert exc.value.data["resolved"] == os.path.realpath(secret)
            assert exc.value.data["roots"] == [str(work)]
            assert "top secret" not in repr(exc.value.data)
            with pytest.raises(acp_trio.RequestError) as exc:
                await agent_conn.client.fs_write_text_file(
                    v1.WriteTextFileRequest(session_id=sid, path=str(tmp_path / "planted.txt"), content="x")
                )
            assert exc.value.code == acp_trio.INVALID_PARAMS
    assert not (tmp_path / "planted.txt").exists()
    assert secret.read_text() == "top secret\n"


@pytest.mark.parametrize("terminal_cwd", ["roots", "any"])
async def test_terminal_cwd_outside_the_roots_is_refused_unless_any(tmp_path: Path, terminal_cwd: str) -> None:
    work, extra, outside = tmp_path / "work", tmp_path / "extra", tmp_path / "outside"
    for d in (work, extra, outside):
        d.mkdir()
    code = "import os; print(os.path.basename(os.getcwd()))"
    options: dict[str, Any] = {} if terminal_cwd == "roots" else {"terminal_cwd": "any"}
    with trio.fail_after(DEADLINE):
        async with pair(**options) as (agent_conn, client_conn, client):
            sid = await new_session(client_conn, work, extra)
            for inside in (work, extra):  # cwd and additionalDirectories are roots
                async with open_terminal(agent_conn, sid, PY, args=["-c", code], cwd=str(inside)) as term:
                    assert (await term.wait_for_exit()).exit_code == 0
                    assert (await term.output()).output == f"{inside.name}\n"
            if terminal_cwd == "roots":
                with pytest.raises(acp_trio.RequestError) as exc:
                    async with open_terminal(agent_conn, sid, PY, args=["-c", code], cwd=str(outside)):
                        pass
                assert exc.value.code == acp_trio.INVALID_PARAMS
                assert isinstance(exc.value.data, dict) and exc.value.data["field"] == "cwd"
            else:
                async with open_terminal(agent_conn, sid, PY, args=["-c", code], cwd=str(outside)) as term:
                    assert (await term.wait_for_exit()).exit_code == 0
                    assert (await term.output()).output == "outside\n"
            assert client.terminals is not None and dict(client.terminals.terminals) == {}


# -- session end ----------------------------------------------------------------------------------


async def test_session_close_releases_that_sessions_running_terminals(tmp_path: Path) -> None:
    ready: dict[str, trio.Event] = {}

    def on_output(terminal: Terminal, data: bytes) -> None:
        if b"ready" in data:
            ready.setdefault(terminal.terminal_id, trio.Event()).set()

    with trio.fail_after(DEADLINE):
        async with pair(kill_grace=0.5, on_output=on_output) as (agent_conn, client_conn, client):
            assert client.terminals is not None
            closing = await new_session(client_conn, tmp_path)
            staying = await new_session(client_conn, tmp_path)
            ids: dict[str, str] = {}
            for sid in (closing, staying):
                # raw terminal/create through the proxy: nothing on the agent side releases it
                response = await agent_conn.client.terminal_create(
                    v1.CreateTerminalRequest(session_id=sid, command=PY, args=["-c", SLEEPER])
                )
                ids[sid] = response.terminal_id
                await ready.setdefault(response.terminal_id, trio.Event()).wait()
            doomed = client.terminals.terminals[ids[closing]]
            kept = client.terminals.terminals[ids[staying]]
            os.kill(doomed.pid, 0)  # running
            await client_conn.agent.session_close(v1.CloseSessionRequest(session_id=closing))
            assert ids[closing] not in client.terminals.terminals and doomed.released
            await doomed.wait_closed()
            with pytest.raises(ProcessLookupError):
                os.kill(doomed.pid, 0)
            with pytest.raises(acp_trio.RequestError) as exc:
                await agent_conn.client.terminal_output(
                    v1.TerminalOutputRequest(session_id=closing, terminal_id=ids[closing])
                )
            assert exc.value.code == acp_trio.RESOURCE_NOT_FOUND
            # the other session's terminal runs on
            assert list(client.terminals.terminals) == [ids[staying]] and not kept.released
            os.kill(kept.pid, 0)
        # the connection closing releases the rest
        await kept.wait_closed()
        with pytest.raises(ProcessLookupError):
            os.kill(kept.pid, 0)


class KindlessAgent(Agent):
    """Announces a read tool call, then asks permission naming it by id only (no kind)."""

    async def turn(self, session_id: str) -> v1.StopReason:
        await self.send(session_id, b.tool_call("t1", "Read a file", kind="read"))
        response = await self.conn.client.session_request_permission(
            b.permission_request(session_id, "t1", b.permission_options())
        )
        outcome = response.outcome
        self.outcomes.append(
            b.permission_option(outcome.option_id, "chosen", "allow_once")
            if isinstance(outcome, v1.SelectedRequestPermissionOutcome)
            else None
        )
        return "end_turn"


async def test_allow_kinds_sees_the_kind_announced_earlier_in_the_session(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        policy = acp_trio.allow_kinds({"read"})
        async with pair(KindlessAgent, policy=policy) as (agent_conn, client_conn, client):
            sid = await new_session(client_conn, tmp_path)
            await client.prompt(sid, "go")
            agent: KindlessAgent = agent_conn.handler
            assert [o.option_id if o else None for o in agent.outcomes] == ["allow-once"]


async def test_a_prompt_refused_before_sending_is_not_recorded(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair() as (_agent_conn, client_conn, client):
            sid = await new_session(client_conn, tmp_path)
            image = v1.ImageContentBlock(data="aGk=", mime_type="image/png")
            with pytest.raises(acp_trio.CapabilityError):
                await client.prompt(sid, [image])  # the agent did not advertise promptCapabilities.image
            assert client.states[sid].messages == []
            await client.prompt(sid, "hello")
            assert [m.text for m in client.states[sid].messages] == ["hello"]

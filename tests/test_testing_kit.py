"""``acp_trio.testing``: the test kit (pair, FakeClient, FakeAgent, transcripts, replay, conformance tests).

Every test runs in memory (the kit uses no processes or threads), v1 and v2, except one that
records an agent process's wire to replay it in memory (about 1.5 s).  The agents here make up their session and tool call ids (``uuid4``), so the
replays exercise id binding.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

import acp_trio
from acp_schema import v1, v2
from acp_trio import builders as b
from acp_trio import converter
from acp_trio import neutral as n
from acp_trio.testing import (
    FakeAgent,
    FakeClient,
    Pair,
    Transcript,
    assert_replays,
    conformance_tests,
    pair,
    record,
    replay,
)

DEADLINE = 10
NOTES = "/w/notes.txt"


class NotesAgent:
    """v1: asks permission to read ``/w/notes.txt``; when allowed reads it, writes ``/w/summary.txt``
    and says the first line.  Session ids and tool call ids are random."""

    agent_info = v1.Implementation(name="notes-agent", version="1")  # the subclass below answers initialize alike
    greeting = "notes start with"

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.client = v1.ClientPeer(conn)
        self.outcomes: list[str | None] = []

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id=f"sess-{uuid.uuid4().hex[:8]}")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        sid = params.session_id
        read = b.ToolCallReporter(self.client, sid, "Read notes", kind="read", locations=[NOTES])
        await read.start()
        option = await read.request_permission()
        self.outcomes.append(None if option is None else option.kind)
        if option is None or option.kind.startswith("reject"):
            await read.fail()
            await self.client.session_update(b.notification(sid, b.agent_message("not allowed")))
            return v1.PromptResponse(stop_reason="end_turn")
        notes = await self.client.fs_read_text_file(v1.ReadTextFileRequest(session_id=sid, path=NOTES))
        await read.complete(["read"])
        first = notes.content.splitlines()[0]
        await self.client.fs_write_text_file(
            v1.WriteTextFileRequest(session_id=sid, path="/w/summary.txt", content=first + "\n")
        )
        await self.client.session_update(b.notification(sid, b.agent_message(f"{self.greeting} {first}")))
        return v1.PromptResponse(stop_reason="end_turn")


class ShoutingNotesAgent(NotesAgent):
    greeting = "NOTES START WITH"


def v2_update(session_id: str, update: dict[str, Any]) -> v2.UpdateSessionNotification:
    return v2.UpdateSessionNotification(session_id=session_id, update=converter.structure(update, v2.SessionUpdate))


class V2Agent:
    """v2: a turn that reports a tool call, asks permission about it, and answers with one message."""

    reply = "hello from v2"

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn
        self.outcomes: list[Any] = []

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id=f"sess-{uuid.uuid4().hex[:8]}")

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        sid = params.session_id
        client = self.conn.client

        async def turn() -> str:
            call = f"call-{uuid.uuid4().hex[:6]}"
            await client.session_update(
                v2_update(
                    sid, {"sessionUpdate": "tool_call_update", "toolCallId": call, "title": "Look", "kind": "read"}
                )
            )
            request = converter.structure(
                {
                    "sessionId": sid,
                    "title": "Look around?",
                    "subject": {"type": "tool_call", "toolCall": {"toolCallId": call}},
                    "options": [
                        {"optionId": "yes", "name": "Yes", "kind": "allow_once"},
                        {"optionId": "no", "name": "No", "kind": "reject_once"},
                    ],
                },
                v2.RequestPermissionRequest,
            )
            answer = await client.session_request_permission(request)
            self.outcomes.append(converter.unstructure(answer.outcome))
            await client.session_update(
                v2_update(
                    sid,
                    {
                        "sessionUpdate": "agent_message",
                        "messageId": f"m-{uuid.uuid4().hex[:6]}",
                        "content": [{"type": "text", "text": self.reply}],
                    },
                )
            )
            return "end_turn"

        self.conn.start_turn(sid, turn)
        return v2.PromptResponse(message_id=f"u-{uuid.uuid4().hex[:6]}")


async def notes_turn(p: Pair) -> str:
    """The scripted client's side of a v1 conversation: a session, one prompt; the session id."""
    sid: str = await p.client.new_session("/w")
    assert await p.client.prompt(sid, "summarize my notes") == "end_turn"
    return sid


# -- pair and FakeClient ---------------------------------------------------------------------------


async def test_a_v1_pair_serves_files_allows_and_records_every_update() -> None:
    client = FakeClient(files={NOTES: "buy milk\ncall mum\n"})
    with trio.fail_after(DEADLINE):
        async with pair(NotesAgent, client) as p:
            assert p.protocol_version == 1 and p.initialize_response.protocol_version == 1
            assert p.agent_conn is not None
            assert p.agent_conn.client_capabilities == {
                "fs": {"readTextFile": True, "writeTextFile": True},
                "terminal": False,
            }
            sid = await notes_turn(p)
            state = client.states[sid]
            assert state.messages[-1].text == "notes start with buy milk"
            assert state.messages[0].role == "user"
            [tool] = state.tool_calls.values()
            assert (tool.title, tool.kind, tool.status) == ("Read notes", "read", "completed")
            assert client.reads == [NOTES]
            assert client.written == {"/w/summary.txt": "buy milk\n"}
            assert client.files["/w/summary.txt"] == "buy milk\n"
            assert [r.tool_call.title for r in client.permission_requests] == ["Read notes"]
            assert client.permission_answers == ["allow-once"]  # the builders' option ids
            assert p.agent.outcomes == ["allow_once"]
            kinds = [update.session_update for _, update in client.updates]
            assert kinds == ["tool_call", "tool_call_update", "agent_message_chunk"]
            assert {session for session, _ in client.updates} == {sid}
    assert p.transcript.methods("client->agent") == ["initialize", "session/new", "session/prompt"]
    assert p.transcript.methods("agent->client") == [
        "session/update",
        "session/request_permission",
        "fs/read_text_file",
        "session/update",
        "fs/write_text_file",
        "session/update",
    ]


@pytest.mark.parametrize(
    ("permission", "answered", "outcome"),
    [
        ("reject", "reject-once", "reject_once"),
        ("cancel", None, None),
        (lambda request: "reject-always", "reject-always", "reject_always"),
    ],
    ids=["reject", "cancel", "callable"],
)
async def test_the_fake_client_answers_permission_by_policy(permission: Any, answered: Any, outcome: Any) -> None:
    client = FakeClient(files={NOTES: "x\n"}, permission=permission)
    with trio.fail_after(DEADLINE):
        async with pair(NotesAgent, client) as p:
            sid = await notes_turn(p)
            assert client.permission_answers == [answered]
            assert p.agent.outcomes == [outcome]
            assert client.states[sid].messages[-1].text == "not allowed"
            assert client.reads == [] and client.written == {}


async def test_an_async_permission_callable_sees_the_request() -> None:
    seen: list[str] = []

    async def choose(request: Any) -> str:
        seen.append(request.tool_call.title)
        return "allow-always"

    client = FakeClient(files={NOTES: "x\n"}, permission=choose)
    with trio.fail_after(DEADLINE):
        async with pair(NotesAgent, client) as p:
            await notes_turn(p)
    assert seen == ["Read notes"] and client.permission_answers == ["allow-always"]
    assert p.agent.outcomes == ["allow_always"]


def test_a_bad_permission_policy_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="permission must be 'allow', 'reject', 'cancel' or a callable"):
        FakeClient(permission="maybe")  # type: ignore[arg-type]


async def test_the_fake_file_system_answers_errors_like_a_client_should() -> None:
    client = FakeClient(files={"/w/a.txt": "one\ntwo\nthree\n"}, writable=False)
    with trio.fail_after(DEADLINE):
        async with pair(NotesAgent, client) as p:
            assert p.agent_conn is not None
            assert p.agent_conn.client_capabilities["fs"] == {"readTextFile": True, "writeTextFile": False}
            sid = await p.client.new_session("/w")
            request = p.agent_conn.connection.request
            read = await request("fs/read_text_file", {"sessionId": sid, "path": "/w/a.txt", "line": 2, "limit": 1})
            assert read == {"content": "two\n"}
            with pytest.raises(acp_trio.RequestError) as missing:
                await request("fs/read_text_file", {"sessionId": sid, "path": "/w/b.txt"})
            assert missing.value.code == acp_trio.RESOURCE_NOT_FOUND and missing.value.data == {"uri": "/w/b.txt"}
            with pytest.raises(acp_trio.RequestError) as relative:
                await request("fs/read_text_file", {"sessionId": sid, "path": "a.txt"})
            assert relative.value.code == acp_trio.INVALID_PARAMS
            with pytest.raises(acp_trio.RequestError) as line:
                await request("fs/read_text_file", {"sessionId": sid, "path": "/w/a.txt", "line": 0})
            assert line.value.code == acp_trio.INVALID_PARAMS and line.value.data["path"] == "$.line"
            with pytest.raises(acp_trio.RequestError) as write:
                await request("fs/write_text_file", {"sessionId": sid, "path": "/w/a.txt", "content": "x"})
            assert write.value.code == acp_trio.METHOD_NOT_FOUND
            with pytest.raises(acp_trio.RequestError) as terminal:
                await request("terminal/create", {"sessionId": sid, "command": "ls"})
            assert terminal.value.code == acp_trio.METHOD_NOT_FOUND
            assert client.reads == ["/w/a.txt", "/w/b.txt", "a.txt", "/w/a.txt"] and client.written == {}


async def test_advertised_capabilities_can_be_scripted() -> None:
    client = FakeClient(capabilities={"fs": {"readTextFile": False}, "terminal": True})
    with trio.fail_after(DEADLINE):
        async with pair(NotesAgent, client) as p:
            assert p.agent_conn is not None
            assert p.agent_conn.client_capabilities == {"fs": {"readTextFile": False}, "terminal": True}


async def test_a_fake_client_serves_one_connection_and_says_so() -> None:
    client = FakeClient()
    with pytest.raises(RuntimeError, match="not connected"):
        client.conn  # noqa: B018
    with trio.fail_after(DEADLINE):
        async with pair(NotesAgent, client):
            with pytest.raises(RuntimeError, match="already serves another connection"):
                async with pair(NotesAgent, client):
                    pass


async def test_a_v2_pair_runs_a_turn_to_its_idle_stop_reason() -> None:
    client = FakeClient()
    with trio.fail_after(DEADLINE):
        async with pair(V2Agent, client, protocol=2) as p:
            assert p.protocol_version == 2
            sid = await client.new_session("/w")
            assert await client.prompt(sid, "look") == "end_turn"
            state = client.state(sid)
            assert state.run_state == "idle" and state.messages[-1].text == "hello from v2"
            [tool] = state.tool_calls.values()
            assert tool.title == "Look"
            assert [r.title for r in client.permission_requests] == ["Look around?"]
            assert client.permission_answers == ["yes"]
            assert p.agent.outcomes == [{"outcome": "selected", "optionId": "yes"}]
            kinds = [u.session_update for _, u in client.updates]
            assert kinds == ["state_update", "tool_call_update", "agent_message", "state_update"]


async def test_pair_takes_variant_mappings_and_a_standard_client() -> None:
    make = acp_trio.StandardClient.for_versions(policy=acp_trio.allow_all())
    with trio.fail_after(DEADLINE):
        async with pair({v1: NotesAgent, v2: V2Agent}, make) as p:
            assert p.protocol_version == 2  # the StandardClient offers 2, the agent speaks it
            assert isinstance(p.client, acp_trio.StandardClient)
            sid = await p.client.new_session("/w")
            result = await p.client.prompt(sid, "look")
            assert result.stop_reason == "end_turn"


@pytest.mark.parametrize("protocol", [0, 3])
async def test_pair_refuses_an_unknown_protocol(protocol: int) -> None:
    with pytest.raises(ValueError, match="protocol must be 1 or 2"):
        async with pair(NotesAgent, protocol=protocol):
            pass


# -- the fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def acp_agent() -> Any:
    return {v1: NotesAgent, v2: V2Agent}


@pytest.fixture
def acp_client() -> FakeClient:
    return FakeClient(files={NOTES: "from the fixture\n"})


@pytest.mark.parametrize("acp_protocol", [1, 2])
async def test_the_acp_pair_fixture_connects_acp_agent_in_each_protocol(acp_pair: Pair, acp_protocol: int) -> None:
    assert acp_pair.protocol_version == acp_protocol
    assert isinstance(acp_pair.client, FakeClient)
    with trio.fail_after(DEADLINE):
        sid = await acp_pair.client.new_session("/w")
        assert await acp_pair.client.prompt(sid, "hello") == "end_turn"
    assert acp_pair.transcript.methods("client->agent")[:2] == ["initialize", "session/new"]


def test_the_fake_client_fixture_is_a_fresh_fake_client(fake_client: FakeClient) -> None:
    assert isinstance(fake_client, FakeClient) and fake_client.updates == []


# -- transcripts -----------------------------------------------------------------------------------


async def recorded_notes(tmp_path: Path | None = None) -> Transcript:
    async with pair(NotesAgent, FakeClient(files={NOTES: "buy milk\n"})) as p:
        await notes_turn(p)
    return p.transcript


async def test_a_transcript_saves_as_ndjson_and_loads_back(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        transcript = await recorded_notes()
    path = tmp_path / "notes.ndjson"
    transcript.save(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(transcript) == 15
    first = json.loads(lines[0])
    assert set(first) == {"dir", "message"} and first["dir"] == "client->agent"
    assert first["message"]["method"] == "initialize" and first["message"]["jsonrpc"] == "2.0"
    assert Transcript.load(path) == transcript
    assert transcript.lines()[:2] == ["client->agent request initialize (id 0)", "agent->client response (id 0)"]


def test_a_bad_transcript_file_names_the_line() -> None:
    good = '{"dir": "client->agent", "message": {"jsonrpc": "2.0", "method": "x"}}\n'
    with pytest.raises(ValueError, match=r"t.ndjson:3: expected an object with 'dir'"):
        Transcript.loads(good + "\n" + '{"dir": "sideways", "message": {}}\n', source="t.ndjson")
    with pytest.raises(ValueError, match=r"<string>:1: not JSON"):
        Transcript.loads("{nope\n")
    with pytest.raises(ValueError, match=r"<string>:2: the entry has no 'message'"):
        Transcript.loads(good + '{"dir": "agent->client"}\n')
    raw = Transcript.loads('{"dir": "agent->client", "raw": "garbage"}\n')
    assert raw[0].raw == "garbage" and raw[0].message is None
    assert Transcript.loads(raw.dumps()) == raw


async def test_record_captures_a_connection_in_both_directions_and_keeps_its_tap() -> None:
    seen: list[str] = []
    with trio.fail_after(DEADLINE):
        async with acp_trio.open_memory_pair(
            NotesAgent, FakeClient().bind, tap=lambda direction, line: seen.append(direction)
        ) as (agent_conn, client_conn):
            with record(agent_conn) as transcript:
                await client_conn.handler.initialize()
                await client_conn.handler.new_session("/w")
            await client_conn.handler.new_session("/w")  # after the block: not recorded
    assert transcript.methods() == ["initialize", "session/new"]
    assert [e.direction for e in transcript] == ["client->agent", "agent->client"] * 2
    assert len(seen) == 12  # both connections' taps went on: 3 requests and 3 responses, seen twice
    with pytest.raises(TypeError, match="AgentSideConnection or ClientSideConnection"):
        with record(object()):
            pass


# -- replay ----------------------------------------------------------------------------------------


async def test_the_same_agent_replays_its_transcript_despite_new_ids() -> None:
    with trio.fail_after(DEADLINE):
        transcript = await recorded_notes()
        result = await assert_replays(transcript, NotesAgent)
    assert result.ok and result.matched == len(transcript)
    recorded_sid = transcript[3].message["result"]["sessionId"]
    replayed_sid = result.observed[3].message["result"]["sessionId"]
    assert recorded_sid != replayed_sid  # a new random id, bound to the recorded one


async def test_a_v2_transcript_replays_from_a_file(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with pair(V2Agent, protocol=2) as p:
            sid = await p.client.new_session("/w")
            await p.client.prompt(sid, "look")
        p.transcript.save(tmp_path / "v2.ndjson")
        result = await assert_replays(tmp_path / "v2.ndjson", V2Agent)
    assert result.matched == len(p.transcript)
    assert "session/request_permission" in p.transcript.methods("agent->client")


async def test_the_wire_of_an_agent_process_replays_against_the_agent_object_in_memory() -> None:
    """``transcript.tap("client")`` records a real stdio session (``spawn_agent``); it then replays in memory."""
    serve = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import acp_trio; "
        "from test_testing_kit import NotesAgent; acp_trio.run_agent_stdio(NotesAgent)"
    )
    transcript = Transcript()
    client = FakeClient(files={NOTES: "buy milk\n"})
    with trio.fail_after(60):
        async with acp_trio.spawn_agent(
            sys.executable, ["-c", serve], client=client.bind, tap=transcript.tap("client")
        ):
            await client.initialize()
            sid = await client.new_session("/w")
            assert await client.prompt(sid, "summarize my notes") == "end_turn"
        assert transcript.methods("agent->client")[-1] == "session/update" and len(transcript) == 15
        await assert_replays(transcript, NotesAgent)


async def test_a_divergent_replay_names_the_first_different_message_with_a_diff() -> None:
    with trio.fail_after(DEADLINE):
        transcript = await recorded_notes()
        result = await replay(transcript, ShoutingNotesAgent)
    assert result.divergence is not None
    assert result.divergence.index == 13 and result.matched == 13
    text = str(result.divergence)
    assert text.startswith(
        "replay diverged at message 14 of 15: expected agent->client notification session/update "
        "(agent_message_chunk), observed something else\nafter:\n"
    )
    assert "  agent->client request fs/write_text_file (id 2)\n" in text
    assert "--- recorded\n+++ observed\n" in text
    assert '-        "text": "notes start with buy milk",\n+        "text": "NOTES START WITH buy milk",' in text
    with pytest.raises(AssertionError, match="replay diverged at message 14 of 15"):
        await assert_replays(transcript, ShoutingNotesAgent)


async def test_a_divergent_v2_replay_shows_the_changed_message_with_its_ids_bound() -> None:
    class Changed(V2Agent):
        reply = "goodbye from v2"

    with trio.fail_after(DEADLINE):
        async with pair(V2Agent, protocol=2) as p:
            sid = await p.client.new_session("/w")
            await p.client.prompt(sid, "look")
        first = await replay(p.transcript, Changed)
        assert first.divergence is not None and first.divergence.index == 1  # the default initialize answer
        assert '-      "name": "V2Agent",\n+      "name": "Changed",' in first.divergence.diff  # names the class

        def without_info(message: Any) -> Any:
            if isinstance(message.get("result"), dict):
                message["result"].pop("info", None)
            return message

        result = await replay(p.transcript, Changed, normalize=without_info)
    assert result.divergence is not None
    expected = result.divergence.expected
    assert expected is not None and expected.label() == "agent->client notification session/update (agent_message)"
    recorded_message_id = expected.message["params"]["update"]["messageId"]
    # the random ids were bound: the diff shows the recorded ones and only the text differs
    changed = [line for line in result.divergence.diff.splitlines()[2:] if line[:1] in "+-"]
    assert changed == ['-          "text": "hello from v2",', '+          "text": "goodbye from v2",']
    assert result.divergence.actual["params"]["update"]["messageId"] == recorded_message_id


def test_replay_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        FakeAgent(Transcript(), timeout=0)
    with pytest.raises(TypeError, match="a Transcript or the path of a transcript file"):
        FakeAgent(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="direction must be"):
        Transcript().add("up", b"{}")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="side must be 'client' or 'agent'"):
        Transcript().tap("server")  # type: ignore[arg-type]


async def test_normalize_hides_what_legitimately_varies() -> None:
    def lower_text(message: Any) -> Any:
        update = message.get("params", {}).get("update", {})
        if "content" in update and "text" in update["content"]:
            update["content"]["text"] = update["content"]["text"].lower()
        return message

    with trio.fail_after(DEADLINE):
        transcript = await recorded_notes()
        await assert_replays(transcript, ShoutingNotesAgent, normalize=lower_text)


async def test_a_silent_agent_diverges_after_the_timeout(autojump_clock: MockClock) -> None:
    class Silent(NotesAgent):
        async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
            await trio.sleep_forever()
            raise AssertionError("unreachable")

    transcript = await recorded_notes()
    start = trio.current_time()
    result = await replay(transcript, Silent, timeout=3)
    assert result.divergence is not None
    assert str(result.divergence).startswith(
        "replay diverged at message 6 of 15: expected agent->client notification session/update (tool_call), "
        "but nothing came within 3 s"
    )
    assert trio.current_time() - start == pytest.approx(3, abs=0.5)


async def test_an_agent_that_says_more_than_recorded_diverges() -> None:
    with trio.fail_after(DEADLINE):
        transcript = await recorded_notes()
        result = await replay(transcript[:5], NotesAgent)  # up to the prompt: its turn was not recorded
    assert result.divergence is not None and result.divergence.index == 5
    assert result.divergence.reason == (
        "the transcript ended, but the agent sent more: notification session/update (tool_call)"
    )


# -- FakeAgent -------------------------------------------------------------------------------------


async def test_a_fake_agent_plays_a_recorded_agent_to_a_client() -> None:
    with trio.fail_after(DEADLINE):
        transcript = await recorded_notes()
        fake = FakeAgent(transcript)
        client = FakeClient(files={NOTES: "buy milk\n"})
        async with pair(fake, client) as p:
            assert p.agent_conn is None and p.agent is fake
            sid = await notes_turn(p)
            assert client.states[sid].messages[-1].text == "notes start with buy milk"
            assert client.written == {"/w/summary.txt": "buy milk\n"}
    fake.assert_played()
    assert len(fake.observed) == len(transcript)


async def test_a_client_that_strays_from_the_fake_agent_fails_with_the_diff(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        (await recorded_notes()).save(tmp_path / "t.ndjson")
        fake = FakeAgent.from_file(tmp_path / "t.ndjson")
        with pytest.raises(AssertionError) as failure:
            async with pair(fake, FakeClient(files={NOTES: "buy milk\n"})) as p:
                sid = await p.client.new_session("/w")
                await p.client.prompt(sid, "something else")
    text = str(failure.value)
    assert text.startswith("replay diverged at message 5 of 15: expected client->agent request session/prompt (id 2)")
    assert '-        "text": "summarize my notes",\n+        "text": "something else",' in text
    assert isinstance(failure.value.__cause__, acp_trio.ConnectionClosed)  # what the client saw


async def test_a_fake_agent_plays_a_v2_transcript_and_refuses_to_play_twice() -> None:
    with trio.fail_after(DEADLINE):
        async with pair(V2Agent, protocol=2) as recorded:
            sid = await recorded.client.new_session("/w")
            await recorded.client.prompt(sid, "look")
        fake = FakeAgent(recorded.transcript)
        assert fake.protocol_version == 2
        async with pair(fake) as p:  # the protocol comes from the transcript
            assert p.protocol_version == 2
            sid = await p.client.new_session("/w")
            assert await p.client.prompt(sid, "look") == "end_turn"
            assert p.client.state(sid).messages[-1].text == "hello from v2"
        fake.assert_played()
        with pytest.raises(RuntimeError, match="already played"):
            async with pair(fake):
                pass


async def test_a_fake_agent_not_played_to_the_end_says_what_is_next() -> None:
    with trio.fail_after(DEADLINE):
        fake = FakeAgent(await recorded_notes())
        with pytest.raises(AssertionError, match="session/new"):
            async with pair(fake) as p:
                with pytest.raises(AssertionError, match="not played to the end: 13 left, next client->agent request"):
                    fake.assert_played()
                assert p.initialize_response.protocol_version == 1


# -- conformance as pytest tests -------------------------------------------------------------------

test_the_notes_agent_conforms = conformance_tests(NotesAgent, only=["initialize", "jsonrpc.ids", "schema"])


def test_conformance_tests_make_one_test_per_check_and_fail_with_the_finding() -> None:
    class Sessionless(NotesAgent):  # session/new fails: a FAIL of session.new
        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            raise acp_trio.RequestError.internal_error("no sessions today")

    tests = conformance_tests(Sessionless, only=["session.new", "jsonrpc.ids"])
    [mark] = tests.pytestmark  # type: ignore[attr-defined]
    assert mark.args == ("check", ["jsonrpc.ids", "session.new"])
    tests("jsonrpc.ids")  # passes
    with pytest.raises(pytest.fail.Exception) as failure:
        tests("session.new")
    assert str(failure.value).startswith("FAIL session.new: ")
    assert "(session/new answers a session id; docs/protocol/v1/session-setup.mdx § Creating a Session)" in str(
        failure.value
    )
    assert "acp-trio check: <in memory: " in str(failure.value)  # the whole report follows
    with pytest.raises(ValueError, match="protocol must be 1 or 2"):
        conformance_tests(Sessionless, protocol=3)


# -- the plugin runs async tests under trio with no configuration ----------------------------------

# A project's test file, as a user writes it: async tests and the acp_pair fixture, no marker.
PLAIN_TESTS = """
import pytest
import trio

from acp_schema import v1


class Agent:
    def __init__(self, conn):
        self.conn = conn

    async def session_new(self, params):
        return v1.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params):
        return v1.PromptResponse(stop_reason="end_turn")


@pytest.fixture
def acp_agent():
    return Agent


async def test_an_async_test_runs_under_trio():
    trio.lowlevel.current_task()  # RuntimeError outside trio
    await trio.lowlevel.checkpoint()


@pytest.mark.parametrize("acp_protocol", [1])
async def test_the_acp_pair_fixture_works(acp_pair):
    with trio.fail_after(10):
        sid = await acp_pair.client.new_session("/w")
        assert await acp_pair.client.prompt(sid, "hi") == "end_turn"


class TestInAClass:
    async def test_a_method(self):
        trio.lowlevel.current_task()


def test_a_sync_test_is_left_alone():
    with pytest.raises(RuntimeError):
        trio.lowlevel.current_task()
"""

# Which event loop runs the calling test: "asyncio", "trio" (or RuntimeError: none).
RUNNING = """
import asyncio

import trio


def running():
    try:
        asyncio.get_running_loop()
        return "asyncio"
    except RuntimeError:
        trio.lowlevel.current_task()
        return "trio"
"""

# Tests another async plugin claims next to one it does not (anyio's plugin is installed with anyio).
ANYIO_TESTS = (
    RUNNING
    + """
import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_marked_anyio_runs_under_anyio():
    assert running() == "asyncio"


async def test_using_anyio_backend_runs_under_anyio(anyio_backend):
    assert running() == "asyncio"


async def test_unmarked_runs_under_trio():
    assert running() == "trio"
"""
)

# A module whose tests anyio claims by its module-level marker.
ANYIO_MODULE = (
    RUNNING
    + """
import pytest

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_a_module_marked_anyio_runs_under_anyio():
    assert running() == "asyncio"
"""
)

# A stand-in for pytest-asyncio (not installed here): its `asyncio_mode` ini value and `asyncio`
# marker, and a pyfunc_call that runs a marked test (every async test in auto mode) in asyncio.run.
FAKE_PYTEST_ASYNCIO = """
import asyncio
import inspect

import pytest


def pytest_addoption(parser):
    parser.addini("asyncio_mode", "strict or auto", default="strict")


def pytest_configure(config):
    config.addinivalue_line("markers", "asyncio: run the test in asyncio")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    auto = pyfuncitem.config.getini("asyncio_mode") == "auto"
    if inspect.iscoroutinefunction(pyfuncitem.obj) and (auto or pyfuncitem.get_closest_marker("asyncio")):
        arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**arguments))
        return True
    return None
"""

# A test the stand-in claims by its marker, and one it claims only in its auto mode (else trio runs it).
MARKED = "\nimport pytest\n\n\n@pytest.mark.asyncio\nasync def test_marked():\n    assert running() == 'asyncio'\n"
UNMARKED = "\n\nasync def test_unmarked():\n    assert running() == {!r}\n"
STRICT_TESTS = MARKED + UNMARKED.format("trio")


def run_pytest(directory: Path, *args: str) -> str:
    """pytest in a process in ``directory`` (no pytest.ini there); its output and ``-rA`` summary.
    Without langsmith's plugin (here only through langchain-core, for tests/test_aio_langchain.py):
    it claims no test and its import was about half of each process's start-up."""
    import subprocess

    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:langsmith_plugin", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=directory,
        check=False,
    )
    return result.stdout + result.stderr


PROJECTS = "plain", "anyio", "asyncio"
"""The directories of :func:`projects_run`, one project's tests each."""


@pytest.fixture(scope="module")
def projects_run(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One pytest process over three projects' tests side by side (a directory each, no pytest.ini):
    plain async tests (:data:`PLAIN_TESTS`), tests anyio claims next to one it does not, and tests a
    stand-in for pytest-asyncio claims in strict mode (its conftest.py in its directory: its hooks see
    only that directory's tests).  One process instead of three: pytest's start-up with every plugin of
    the venv is most of each run's time."""
    root = tmp_path_factory.mktemp("projects")
    projects = [p for p in PROJECTS if p != "anyio" or importlib.util.find_spec("anyio") is not None]
    for project in projects:
        (root / project).mkdir()
    (root / "plain" / "test_plain.py").write_text(PLAIN_TESTS, encoding="utf-8")
    if "anyio" in projects:
        (root / "anyio" / "test_anyio.py").write_text(ANYIO_TESTS, encoding="utf-8")
        (root / "anyio" / "test_anyio_module.py").write_text(ANYIO_MODULE, encoding="utf-8")
    (root / "asyncio" / "conftest.py").write_text(FAKE_PYTEST_ASYNCIO, encoding="utf-8")
    (root / "asyncio" / "test_strict.py").write_text(RUNNING + STRICT_TESTS, encoding="utf-8")
    return run_pytest(root, *projects)


def outcomes(output: str, project: str) -> list[str]:
    """The ``-rA`` summary's outcome words (PASSED, FAILED, ERROR, ...) of ``project``'s tests."""
    return re.findall(rf"^(\w+) {project}/\S+\.py::", output, re.M)


# one worker runs the tests that read projects_run (noxfile's --dist loadgroup): one process, not one per worker
projects = pytest.mark.xdist_group("testing_kit_projects")


@projects
@pytest.mark.one_interpreter  # pytest in a process: the plugins' interplay, not the interpreter's
def test_async_tests_and_the_acp_pair_fixture_run_under_trio_with_no_configuration(projects_run: str) -> None:
    assert outcomes(projects_run, "plain") == ["PASSED"] * 4, projects_run
    assert "failed" not in projects_run and "error" not in projects_run, projects_run


@pytest.mark.one_interpreter  # pytest in a process: the plugins' interplay, not the interpreter's
def test_a_project_that_sets_trio_mode_sees_no_change(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n", encoding="utf-8")
    (tmp_path / "test_plain.py").write_text(PLAIN_TESTS, encoding="utf-8")
    output = run_pytest(tmp_path)
    assert "4 passed" in output and "failed" not in output and "error" not in output, output


@projects
@pytest.mark.one_interpreter  # pytest in a process: the plugins' interplay, not the interpreter's
def test_tests_anyio_claims_are_left_to_anyio(projects_run: str, tmp_path: Path) -> None:
    pytest.importorskip("anyio")
    assert outcomes(projects_run, "anyio") == ["PASSED"] * 4 and "failed" not in projects_run, projects_run
    # in anyio's auto mode anyio runs every async test, once per backend
    auto = "\n\nasync def test_auto(request):\n    assert running() == request.node.callspec.params['anyio_backend']\n"
    (tmp_path / "test_auto.py").write_text(RUNNING + auto, encoding="utf-8")
    output = run_pytest(tmp_path, "-o", "anyio_mode=auto", "test_auto.py")
    assert "PASSED test_auto.py::test_auto[asyncio]" in output and "failed" not in output, output


@projects
@pytest.mark.one_interpreter  # pytest in a process: the plugins' interplay, not the interpreter's
def test_tests_pytest_asyncio_claims_are_left_to_it(projects_run: str, tmp_path: Path) -> None:
    assert outcomes(projects_run, "asyncio") == ["PASSED"] * 2 and "failed" not in projects_run, projects_run
    (tmp_path / "conftest.py").write_text(FAKE_PYTEST_ASYNCIO, encoding="utf-8")
    (tmp_path / "test_auto.py").write_text(RUNNING + MARKED + UNMARKED.format("asyncio"), encoding="utf-8")
    output = run_pytest(tmp_path, "-o", "asyncio_mode=auto", "test_auto.py")
    assert "2 passed" in output and "failed" not in output, output


@pytest.mark.one_interpreter  # pytest in a process: the plugins' interplay, not the interpreter's
def test_without_pytest_trio_an_async_test_fails_naming_what_to_install(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text(PLAIN_TESTS, encoding="utf-8")
    output = run_pytest(tmp_path, "-p", "no:trio")  # as if pytest-trio were not installed
    assert "1 passed, 3 errors" in output, output
    assert (
        "test_an_async_test_runs_under_trio is an async test and nothing runs it: acp_trio.testing runs async "
        "tests under trio with pytest-trio, which is not installed (or is disabled by -p no:trio). "
        "Install it: pip install 'acp-trio[testing]'"
    ) in output, output
    assert "not natively supported" not in output, output


class NeutralNotes(n.Agent):
    """A version-neutral agent (``acp_trio.neutral``): one object, v1 and v2."""

    info = n.AgentInfo(name="neutral-notes", version="1")

    async def prompt(self, turn: n.Turn) -> str:
        read = await turn.tool("Read notes", kind="read", locations=[NOTES])
        decision = await read.ask_permission("Read the notes?")
        if not decision.allowed:
            await read.fail()
            return "end_turn"
        await read.complete()
        await turn.say("allowed")
        return "end_turn"


@pytest.mark.parametrize("protocol", [1, 2])
async def test_pair_and_replay_serve_a_version_neutral_agent_object(protocol: int) -> None:
    """``pair(agent_object)`` and ``assert_replays(..., agent_object)`` serve a neutral agent through its
    ``acp_handlers()`` (as AgentSideConnection does), in the protocol asked; they wrapped it as a
    plain handler object before, which answered ``session/new`` -32601."""
    agent = NeutralNotes()
    client = FakeClient(permission="allow")
    with trio.fail_after(DEADLINE):
        async with pair(agent, client, protocol=protocol) as p:
            assert p.protocol_version == protocol
            sid = await client.new_session("/w")
            assert await client.prompt(sid, "read") == "end_turn"
        assert client.state(sid).messages[-1].text == "allowed"
        assert list(agent.sessions) == [sid]
        result = await assert_replays(p.transcript, NeutralNotes())
    assert result.ok and result.matched == len(p.transcript)

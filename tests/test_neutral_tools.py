"""The version-neutral agent API (issue 33, step 5): display terminals, ``ToolCall.run``, content
chunks and the session's files, written once, seen on each wire (design rows T11, T14, L15, L16;
``docs/protocol/v2/migration.mdx`` § Agent-owned terminal display, § Streaming tool-call content,
§ Client file system and terminal execution removed).

v2 shows a command the agent runs as a ``terminal`` content item plus ``terminal_update`` /
``terminal_output_chunk``; v1 has no agent-owned terminal, so the tool call's content is the
terminal as text (``$ command``, output, ``[exit N]``).  ``session.files`` reads through a v1 client
that offers ``fs`` and locally (within the session's roots) otherwise; ``client_fs()`` and
``client_terminal()`` exist on v1 only.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
from _neutral_kit import Client, connected

from acp_schema import v1, v2
from acp_trio import RequestError, neutral

BOTH = pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])


class Tools(neutral.Agent):
    """One behaviour per prompt text; what it saw goes in ``seen``."""

    info = neutral.AgentInfo(name="tools", version="1")

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        session = turn.session
        if turn.text == "terminal":
            call = await turn.tool("Build", kind="execute", status="in_progress")
            term = await call.terminal("make all", cwd="/work")
            await term.write(b"ok \xff\n")
            await term.exit(code=2)
            await call.fail()
        elif turn.text == "append":
            call = await turn.tool("Search", kind="search", content=["first"])
            await call.append("second")
            self.seen.append(call.content)
        elif turn.text == "run":
            call = await turn.tool("Run", kind="execute")
            script = "import sys; print('out'); print('err', file=sys.stderr, flush=True); sys.exit(3)"
            self.seen.append(await call.run([sys.executable, "-c", script], cwd=session.cwd))
        elif turn.text.startswith("files"):
            cwd = Path(session.cwd)
            await session.files.write_text(str(cwd / "sub" / "new.txt"), "written\n")
            self.seen.append(await session.files.read_text(str(cwd / "notes.txt")))
            self.seen.append(await session.files.read_text(str(cwd / "nothing.txt"), missing=None))
            for path in ("/etc/hostname", str(cwd / ".." / "escape.txt")):
                try:
                    await session.files.read_text(path)
                except (PermissionError, RequestError) as exc:
                    self.seen.append(str(exc))
        elif turn.text == "client":
            for get in (session.client_fs, session.client_terminal):
                try:
                    self.seen.append(get())
                except neutral.VersionError as exc:
                    self.seen.append(exc)
            if session.protocol_version == 1:
                self.seen.append(await session.client_fs().read_text("/work/buffer.txt"))
            self.seen.append((session.client.offers_files(), session.client.offers_terminal()))
        return "end_turn"


@BOTH
async def test_a_display_terminal_is_terminal_updates_on_v2_and_the_tool_calls_text_on_v1(variant: ModuleType) -> None:
    async with connected(Tools(), Client(variant)) as wire:
        session_id = await wire.new_session()
        await wire.prompt(session_id, "terminal")
    updates = [u for u in wire.updates() if u["sessionUpdate"] not in ("user_message", "state_update")]
    if variant is v1:
        assert [u["sessionUpdate"] for u in updates] == ["tool_call"] + ["tool_call_update"] * 4
        texts = [[c["content"]["text"] for c in u["content"]] for u in updates[1:4]]
        assert texts == [["$ make all\n"], ["$ make all\nok \ufffd\n"], ["$ make all\nok \ufffd\n[exit 2]"]]
        assert updates[4] == {
            "sessionUpdate": "tool_call_update",
            "toolCallId": updates[0]["toolCallId"],
            "status": "failed",
        }
        assert "terminal" not in str(updates)  # no v2 terminal item or update reaches v1
    else:
        kinds = [u["sessionUpdate"] for u in updates]
        assert kinds == [
            "tool_call_update",
            "terminal_update",
            "tool_call_content_chunk",
            "terminal_output_chunk",
            "terminal_update",
            "tool_call_update",
        ]
        created, opened, shown, output, exited, _ = updates
        terminal_id = opened["terminalId"]
        assert opened == {
            "sessionUpdate": "terminal_update",
            "terminalId": terminal_id,
            "command": "make all",
            "cwd": "/work",
        }
        assert shown["content"] == {"type": "terminal", "terminalId": terminal_id}
        assert shown["toolCallId"] == created["toolCallId"]
        assert base64.b64decode(output["data"]) == b"ok \xff\n"
        assert exited == {"sessionUpdate": "terminal_update", "terminalId": terminal_id, "exitStatus": {"exitCode": 2}}


@BOTH
async def test_appended_content_is_a_chunk_on_v2_and_the_whole_content_again_on_v1(variant: ModuleType) -> None:
    agent = Tools()
    async with connected(agent, Client(variant)) as wire:
        session_id = await wire.new_session()
        await wire.prompt(session_id, "append")
    (content,) = agent.seen
    assert [c.content.text for c in content] == ["first", "second"]
    last = [u for u in wire.updates() if u["sessionUpdate"].startswith("tool_call")][-1]
    if variant is v1:
        assert last["sessionUpdate"] == "tool_call_update"
        assert [c["content"]["text"] for c in last["content"]] == ["first", "second"]
    else:
        assert last == {
            "sessionUpdate": "tool_call_content_chunk",
            "toolCallId": last["toolCallId"],
            "content": {"type": "content", "content": {"type": "text", "text": "second"}},
        }


@pytest.mark.one_interpreter  # the one real process of these tests
async def test_run_spawns_argv_streams_its_output_into_the_terminal_and_reports_its_exit(tmp_path: Path) -> None:
    agent = Tools()
    async with connected(agent, Client(v1)) as wire:
        session_id = await wire.new_session(cwd=str(tmp_path))
        await wire.prompt(session_id, "run")
    (done,) = agent.seen
    assert (done.exit_code, done.signal, done.timed_out) == (3, None, False)
    assert sorted(done.output.split()) == [b"err", b"out"]
    last = wire.updates()[-1]["content"][0]["content"]["text"]
    assert last.startswith(f"$ {sys.executable} -c import sys;")
    assert "out\n" in last and "err\n" in last and last.endswith("[exit 3]")


@BOTH
async def test_session_files_are_local_within_the_roots_when_the_client_offers_none(
    variant: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("my notes\n")
    agent = Tools()
    async with connected(agent, Client(variant)) as wire:
        session_id = await wire.new_session(cwd=str(tmp_path))
        await wire.prompt(session_id, "files")
    assert (tmp_path / "sub" / "new.txt").read_text() == "written\n"
    notes, nothing, *refused = agent.seen
    assert (notes, nothing) == ("my notes\n", None)
    assert len(refused) == 2
    assert all(f"outside the session's directories ['{tmp_path}']" in r for r in refused)


async def test_session_files_go_through_a_v1_client_that_offers_its_file_system(tmp_path: Path) -> None:
    buffers = {str(tmp_path / "notes.txt"): "unsaved buffer\n"}
    client = Client(v1, files=buffers)
    agent = Tools()
    async with connected(agent, client, fs=True) as wire:
        session_id = await wire.new_session(cwd=str(tmp_path))
        await wire.prompt(session_id, "files")
    assert client.written == {str(tmp_path / "sub" / "new.txt"): "written\n"}
    assert not (tmp_path / "sub").exists()  # nothing written locally
    assert agent.seen[0] == "unsaved buffer\n"
    assert agent.seen[1] is None  # the client's "not found" is the missing value


async def test_client_fs_and_terminal_raise_version_error_on_v2() -> None:
    agent = Tools()
    async with connected(agent, Client(v2)) as wire:
        session_id = await wire.new_session()
        await wire.prompt(session_id, "client")
    fs_error, terminal_error, offers = agent.seen
    assert isinstance(fs_error, neutral.VersionError) and fs_error.version == 2
    assert "fs/read_text_file does not exist in protocol version 2" in str(fs_error)
    assert "session.files" in str(fs_error)
    assert isinstance(terminal_error, neutral.VersionError) and "terminal/create" in str(terminal_error)
    assert offers == (False, False)


async def test_client_fs_and_terminal_are_the_v1_clients() -> None:
    agent = Tools()
    client = Client(v1, files={"/work/buffer.txt": "buffer"})
    async with connected(agent, client, fs=True, terminal=True) as wire:
        session_id = await wire.new_session()
        await wire.prompt(session_id, "client")
    files, terminals, text, offers = agent.seen
    assert isinstance(files, neutral.ClientFiles) and isinstance(terminals, neutral.ClientTerminals)
    assert text == "buffer"
    assert offers == (True, True)


class Chatty(neutral.Agent):
    """A burst of small writes, a pause, one big write, the exit."""

    info = neutral.AgentInfo(name="chatty", version="1")

    async def prompt(self, turn: neutral.Turn) -> neutral.StopReason:
        call = await turn.tool("Build", kind="execute")
        term = await call.terminal("make", cwd="/work")
        for i in range(10):
            await term.write(b"line %d\n" % i)
        await trio.sleep(1)
        await term.write(b"x" * 5000)
        await trio.sleep(1)
        await term.exit(code=0)
        return "end_turn"


async def test_v1_coalesces_a_burst_of_terminal_output_and_sends_a_large_write_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Row T14: each v1 update re-sends the tool call's whole text, so a burst is held for
    TERMINAL_FLUSH_DELAY seconds (or TERMINAL_FLUSH_BYTES) and sent once; v2 gets every chunk."""
    client = Client(v1)
    async with connected(Chatty(), client) as wire:
        session_id = await wire.new_session()
        start = trio.current_time()
        await wire.prompt(session_id)
    texts = [
        (round(at - start, 3), u.content[0].content.text)
        for at, u in client.arrivals
        if isinstance(u, v1.ToolCallUpdateSessionUpdate) and u.content
    ]
    burst = "".join(f"line {i}\n" for i in range(10))
    assert texts == [
        (0.0, "$ make\n"),
        (neutral.TERMINAL_FLUSH_DELAY, f"$ make\n{burst}"),  # ten writes, one update
        (1.0, f"$ make\n{burst}{'x' * 5000}"),  # over TERMINAL_FLUSH_BYTES: at once
        (2.0, f"$ make\n{burst}{'x' * 5000}\n[exit 0]"),
    ]


async def test_v2_gets_every_terminal_output_chunk(autojump_clock: trio.abc.Clock) -> None:
    async with connected(Chatty(), Client(v2)) as wire:
        session_id = await wire.new_session()
        await wire.prompt(session_id)
    assert wire.kinds().count("terminal_output_chunk") == 11

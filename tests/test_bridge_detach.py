"""``python -m acp_trio.bridge --listen --detach`` (issue 35, item 4): any stdio agent behind the session host.

The demo agent (``python -m acp_trio.demo --serve-agent``), one process per agent instance, behind
:func:`acp_trio.bridge.open_detach_host` served on loopback sockets (WebSocket and Streamable HTTP):
a client leaves mid-turn, the agent process goes on, another client resumes (v2, the host's cursor)
or loads (v1) the live session and gets what it missed exactly once, in order, and the request the
agent is waiting on.  Each process is counted by the pid it writes before it becomes the demo agent
(``os.execv``: the same pid); one with no client and no live session ends.  Waits are bounded with
``trio.fail_after``; the TTL test runs on the real clock (processes), with a short TTL.  Two small
agents given with ``python -c`` wait on a FIFO the test opens, so that what the agent does while
nobody is attached is certain: a permission request, and the second half of a 2,000-update turn
whose client process was SIGKILLed.
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from _processes import alive

from acp_schema import v1, v2
from acp_trio import ConnectionClosed
from acp_trio.bridge import main, open_detach_host
from acp_trio.host import CURRENT_META_KEY, CURSOR_TYPE, TURN_ENDED, UPDATE_META_KEY, SessionHost
from acp_trio.transports.asgi import AcpApp, serve

pytestmark = [
    pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX-only"),
    pytest.mark.one_interpreter,  # processes and sockets: the host's rules are tested in tests/test_host*.py
]

DEADLINE = 30
INFO = v2.Implementation(name="test-detach-client", version="1")
BECOME_DEMO = (
    "import os, sys; open(sys.argv[1], 'a').write(f'{os.getpid()}\\n'); "
    "os.execv(sys.executable, [sys.executable, '-m', 'acp_trio.demo', '--serve-agent'])"
)


def demo_command(pids: Path) -> list[str]:
    """The demo agent, after appending its pid to ``pids`` (the same process: ``execv``)."""
    return [sys.executable, "-c", BECOME_DEMO, str(pids)]


def started(pids: Path) -> list[int]:
    return [int(line) for line in pids.read_text().split()] if pids.exists() else []


def notes_dir(tmp_path: Path) -> str:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("one two three\n", encoding="utf-8")
    return str(work)


class Client:
    """A client (v1 or v2) recording each update with the host's number, and the permission
    requests; it answers them ``allow_once`` unless ``answer`` is false (then it never does)."""

    def __init__(self, *, answer: bool = True) -> None:
        self.answer = answer
        self.updates: list[tuple[int | None, Any]] = []
        self.asked: list[Any] = []
        self.turn_ended: list[Any] = []
        self.changed = trio.lowlevel.ParkingLot()

    async def until(self, predicate: Any) -> None:
        while not predicate():
            await self.changed.park()

    def watch_turn_ended(self, conn: Any) -> None:
        """Record the host's ``_acp_trio/turn_ended`` notifications on ``conn`` in :attr:`turn_ended`."""

        async def ended(params: Any) -> None:
            self.turn_ended.append(params)
            self.changed.unpark_all()

        conn.on_ext_notification(TURN_ENDED, ended)

    async def session_update(self, params: Any) -> None:
        meta = params.meta if isinstance(params.meta, dict) else {}
        number = meta.get(UPDATE_META_KEY)
        assert number is not None or meta.get(CURRENT_META_KEY) is True  # numbered, or the current state
        self.updates.append((number, params.update))
        self.changed.unpark_all()

    async def session_request_permission(self, params: Any) -> Any:
        self.asked.append(params)
        self.changed.unpark_all()
        if not self.answer:
            await trio.sleep_forever()
        variant = v2 if hasattr(params, "subject") else v1
        allow = next(o for o in params.options if o.kind == "allow_once")
        return variant.RequestPermissionResponse(
            outcome=variant.SelectedRequestPermissionOutcome(option_id=allow.option_id)
        )

    def numbers(self) -> list[int]:
        return [n for n, _ in self.updates if n is not None]

    def kinds(self) -> list[str]:
        return [type(u).__name__ for n, u in self.updates if n is not None]

    def idle(self) -> bool:
        return any(isinstance(u, v2.IdleStateUpdateSessionUpdate) for n, u in self.updates if n is not None)


def steady(kinds: list[str]) -> list[str]:
    return [kind for kind in kinds if kind != "TerminalOutputChunkSessionUpdate"]


@asynccontextmanager
async def bridge(pids: Path, **options: Any) -> AsyncIterator[tuple[SessionHost, str]]:
    """``open_detach_host`` around the pid-writing demo agent, served on a free loopback port;
    yields the host and ``http://127.0.0.1:PORT/acp``."""
    async with open_detach_host(demo_command(pids), **options) as host, trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(serve, AcpApp(serve_streams=host.serve_streams), "127.0.0.1", 0)
        yield host, binds[0] + "/acp"
        nursery.cancel_scope.cancel()


async def test_a_websocket_client_leaves_mid_turn_and_another_resumes_over_http_with_the_cursor(tmp_path: Path) -> None:
    from acp_trio.transports.http import connect_http
    from acp_trio.transports.websocket import connect_websocket

    pids = tmp_path / "pids"
    cwd = notes_dir(tmp_path)
    with trio.fail_after(DEADLINE):
        async with bridge(pids) as (host, url):
            # the same turn, uninterrupted, in a session of its own: what the two clients should see together
            whole = Client()
            async with connect_websocket(url.replace("http", "ws", 1), whole, variant=v2) as conn:
                await conn.initialize(v2.InitializeRequest(protocol_version=2, info=INFO))
                new = await conn.agent.session_new(v2.NewSessionRequest(cwd=cwd))
                prompt = [v2.TextContentBlock(text="summarize")]
                await conn.agent.session_prompt(v2.PromptRequest(session_id=new.session_id, prompt=prompt))
                await whole.until(whole.idle)
            await host.wait_until(lambda: host.instances == 1)  # the session lives on, detached

            laptop = Client(answer=False)
            async with connect_websocket(url.replace("http", "ws", 1), laptop, variant=v2) as conn:
                init = await conn.initialize(v2.InitializeRequest(protocol_version=2, info=INFO))
                assert init.info.name == "acp-trio-demo-agent"  # the agent's own answer, through the host
                new = await conn.agent.session_new(v2.NewSessionRequest(cwd=cwd))
                sid = new.session_id
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=prompt))
                await laptop.until(lambda: laptop.asked)  # the turn waits on the user: the laptop leaves
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            info = host.sessions()[sid]
            assert (info.running, info.pending_requests) == (True, 1)
            assert host.instances == 2  # a process per instance: the whole run's and the laptop's
            assert len(started(pids)) == 2 and all(alive(pid) for pid in started(pids))
            seen = laptop.numbers()[-1]

            phone = Client()
            async with connect_http(url, phone, variant=v2) as conn:
                await conn.initialize(v2.InitializeRequest(protocol_version=2, info=INFO))
                cursor = v2.ReplayFromOther(type=CURSOR_TYPE, extra_fields={"update": seen + 1})
                await conn.agent.session_resume(v2.ResumeSessionRequest(session_id=sid, cwd=cwd, replay_from=cursor))
                await phone.until(phone.idle)
                last = host.sessions()[sid].last_update
                assert len(started(pids)) == 3 and host.instances == 3  # the phone's initialize: its own process
            home = started(pids)[2]
            await host.wait_until(lambda: host.instances == 2)  # the phone's home: no client, no session
            assert not alive(home)  # ...its process stopped and reaped
    assert laptop.numbers() + phone.numbers() == list(range(1, last + 1))  # each once, in order
    # the same turn as the uninterrupted one (the word count's output comes in as many chunks as it is read in)
    assert steady(laptop.kinds() + phone.kinds()) == steady(whole.kinds())
    assert len(phone.asked) == 1 and phone.asked[0].session_id == sid  # the request the agent waited on
    assert (Path(cwd) / "summary.txt").read_text(encoding="utf-8").endswith("It has 3 words.\n")
    assert not any(alive(pid) for pid in started(pids))  # leaving the host stopped every process


async def test_a_detached_session_past_its_ttl_is_closed_and_its_process_stops(tmp_path: Path) -> None:
    from acp_trio.transports.websocket import connect_websocket

    pids = tmp_path / "pids"
    cwd = notes_dir(tmp_path)
    with trio.fail_after(DEADLINE):
        async with bridge(pids, detached_ttl=0.5) as (host, url):
            client = Client(answer=False)
            async with connect_websocket(url.replace("http", "ws", 1), client, variant=v2) as conn:
                await conn.initialize(v2.InitializeRequest(protocol_version=2, info=INFO))
                new = await conn.agent.session_new(v2.NewSessionRequest(cwd=cwd))
                prompt = [v2.TextContentBlock(text="summarize")]
                await conn.agent.session_prompt(v2.PromptRequest(session_id=new.session_id, prompt=prompt))
                await client.until(lambda: client.asked)
            (pid,) = started(pids)
            assert new.session_id in host.sessions() and alive(pid)  # detached: the process goes on
            await host.wait_until(lambda: not host.sessions())  # the TTL: session/cancel, session/close
            await host.wait_until(lambda: host.instances == 0)
            assert not alive(pid)  # no client, no live session: its stdin closed and it was reaped
    assert (Path(cwd) / "summary.txt").exists() is False  # the turn was cancelled at the permission request


async def test_a_v1_client_loads_a_live_session_and_sees_the_turn_end(tmp_path: Path) -> None:
    from acp_trio.transports.http import connect_http
    from acp_trio.transports.websocket import connect_websocket

    pids = tmp_path / "pids"
    cwd = notes_dir(tmp_path)
    with trio.fail_after(DEADLINE):
        async with bridge(pids) as (host, url):
            first = Client(answer=False)
            async with trio.open_nursery() as nursery:
                async with connect_websocket(url.replace("http", "ws", 1), first, variant=v1) as conn:
                    await conn.initialize(v1.InitializeRequest(protocol_version=1))
                    new = await conn.agent.session_new(v1.NewSessionRequest(cwd=cwd, mcp_servers=[]))
                    sid = new.session_id
                    prompt = v1.PromptRequest(session_id=sid, prompt=[v1.TextContentBlock(text="summarize")])
                    nursery.start_soon(prompt_until_gone, conn, prompt)
                    await first.until(lambda: first.asked)
                # the connection closed under the prompt's call (cancelling the call would cancel the turn)
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            second = Client()
            async with connect_http(url, second, variant=v1) as conn:
                second.watch_turn_ended(conn)
                await conn.initialize(v1.InitializeRequest(protocol_version=1))
                await conn.agent.session_load(v1.LoadSessionRequest(session_id=sid, cwd=cwd, mcp_servers=[]))
                await second.until(lambda: second.turn_ended)
    numbers = second.numbers()
    assert numbers == list(range(1, len(numbers) + 1))  # the whole journal replayed, then live: each once
    assert numbers[: len(first.numbers())] == first.numbers()
    assert len(second.asked) == 1 and second.turn_ended[0] == {"sessionId": sid, "stopReason": "end_turn"}
    assert (Path(cwd) / "summary.txt").exists()


async def prompt_until_gone(conn: Any, prompt: v1.PromptRequest) -> None:
    """A v1 ``session/prompt`` whose connection closes before the answer (leaving, not cancelling:
    a cancelled call sends ``$/cancel_request``, which cancels the turn)."""
    with pytest.raises(ConnectionClosed):
        await conn.agent.session_prompt(prompt)


GATED_AGENT = """
import sys, trio, acp_trio
from acp_schema import v1

class Agent:
    def __init__(self, conn):
        self.conn = conn

    async def initialize(self, params):
        # the host answers session/load of a live session; a client checks the capability first
        return v1.InitializeResponse(protocol_version=1, agent_capabilities=v1.AgentCapabilities(load_session=True))

    async def session_new(self, params):
        return v1.NewSessionResponse(session_id="gated")

    async def say(self, sid, text):
        chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=text))
        await self.conn.client.session_update(v1.SessionNotification(session_id=sid, update=chunk))

    async def session_prompt(self, params):
        sid = params.session_id
        for word in ("one", "two", "three"):
            await self.say(sid, word)
        # the gate: a FIFO, whose open returns once the test opens it to write
        await trio.to_thread.run_sync(lambda: open(sys.argv[1]).read(), abandon_on_cancel=True)
        options = [v1.PermissionOption(option_id="allow", name="Allow", kind="allow_once")]
        request = v1.RequestPermissionRequest(session_id=sid, tool_call=v1.ToolCallUpdate(tool_call_id="c1"), options=options)
        answer = await self.conn.client.session_request_permission(request)
        await self.say(sid, "outcome: " + getattr(answer.outcome, "option_id", answer.outcome.outcome))
        return v1.PromptResponse(stop_reason="end_turn")

acp_trio.run_agent_stdio(Agent)
"""
"""A v1 agent whose turn says three words, waits for the FIFO ``argv[1]`` to be opened for
writing, then asks permission and says the outcome."""


@pytest.mark.parametrize("policy", ["wait", "reject"])
async def test_a_request_made_while_nobody_is_attached_waits_for_the_next_client_or_the_policy(
    tmp_path: Path, policy: str
) -> None:
    from acp_trio.transports.http import connect_http
    from acp_trio.transports.websocket import connect_websocket

    gate = tmp_path / "gate"
    os.mkfifo(gate)
    command = [sys.executable, "-c", GATED_AGENT, str(gate)]
    options: dict[str, Any] = {"unattended_timeout": 0.2, "unattended_policy": policy}
    with trio.fail_after(DEADLINE):
        async with open_detach_host(command, **options) as host, trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(serve, AcpApp(serve_streams=host.serve_streams), "127.0.0.1", 0)
            url = binds[0] + "/acp"
            first = Client(answer=False)
            async with trio.open_nursery() as prompts:
                async with connect_websocket(url.replace("http", "ws", 1), first, variant=v1) as conn:
                    await conn.initialize(v1.InitializeRequest(protocol_version=1))
                    sid = (await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))).session_id
                    prompt = v1.PromptRequest(session_id=sid, prompt=[v1.TextContentBlock(text="go")])
                    prompts.start_soon(prompt_until_gone, conn, prompt)
                    await first.until(lambda: len(first.updates) == 3)
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            await trio.to_thread.run_sync(gate.write_text, "go", abandon_on_cancel=True)  # now the agent asks
            if policy == "wait":
                await host.wait_until(lambda: host.sessions()[sid].pending_requests == 1)
            else:  # unattended_timeout later, the policy answers for the user: permission cancelled
                await host.wait_until(lambda: not host.sessions()[sid].running)  # and the turn ended
            assert host.sessions()[sid].attached == 0  # it was asked with nobody attached
            second = Client()
            async with connect_http(url, second, variant=v1) as conn:
                second.watch_turn_ended(conn)
                await conn.initialize(v1.InitializeRequest(protocol_version=1))
                await conn.agent.session_load(v1.LoadSessionRequest(session_id=sid, cwd="/", mcp_servers=[]))
                # wait: the turn it answered for ends; reject: it ended before, the host says so after the replay
                await second.until(lambda: second.turn_ended)
            nursery.cancel_scope.cancel()
    said = [update.content.text for _, update in second.updates]
    assert second.numbers() == [1, 2, 3, 4]
    if policy == "wait":
        assert said == ["one", "two", "three", "outcome: allow"]
        assert len(second.asked) == 1 and second.asked[0].session_id == sid  # the waiting request, to the new client
    else:
        assert said == ["one", "two", "three", "outcome: cancelled"]
        assert second.asked == []  # answered by the policy, never sent again
        assert second.turn_ended == [{"sessionId": sid, "stopReason": "end_turn"}]  # ended before it came
    assert first.asked == []


STREAMING_AGENT = """
import sys, trio, acp_trio
from acp_schema import v2

class Agent:
    def __init__(self, conn):
        self.conn = conn

    async def session_new(self, params):
        return v2.NewSessionResponse(session_id="streaming")

    async def session_prompt(self, params):
        sid = params.session_id

        async def turn():
            for i in range(2000):
                if i == 1000:  # the gate: a FIFO, whose open returns once the test opens it to write
                    await trio.to_thread.run_sync(lambda: open(sys.argv[1]).read(), abandon_on_cancel=True)
                chunk = v2.AgentMessageChunkSessionUpdate(message_id="m", content=v2.TextContentBlock(text=str(i)))
                await self.conn.client.session_update(v2.UpdateSessionNotification(session_id=sid, update=chunk))
            return "end_turn"

        self.conn.start_turn(sid, turn)
        return v2.PromptResponse(message_id="u")

acp_trio.run_agent_stdio({v2: Agent})
"""
"""A v2 agent whose turn streams 2,000 chunks ("0" to "1999"), waiting after the first 1,000 for
the FIFO ``argv[1]`` to be opened for writing."""


async def test_a_client_process_killed_mid_turn_leaves_the_turn_to_finish_for_the_next_client(tmp_path: Path) -> None:
    """A client process (``python -m acp_trio.bridge --connect``, driven over its stdio) is
    SIGKILLed after 1,000 updates of a 2,000-update turn; the other 1,000 are journaled with nobody
    attached; a client resuming over Streamable HTTP with the cursor ends up with every update
    exactly once, in order, and the turn's ``idle``."""
    import json
    import signal

    from acp_trio.transports.http import connect_http

    gate = tmp_path / "gate"
    os.mkfifo(gate)
    with trio.fail_after(DEADLINE):
        async with open_detach_host([sys.executable, "-c", STREAMING_AGENT, str(gate)]) as host:
            async with trio.open_nursery() as nursery:
                binds: list[str] = await nursery.start(serve, AcpApp(serve_streams=host.serve_streams), "127.0.0.1", 0)
                url = binds[0] + "/acp"
                client = await trio.lowlevel.open_process(
                    [sys.executable, "-m", "acp_trio.bridge", "--connect", url.replace("http", "ws", 1)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                assert client.stdin is not None and client.stdout is not None
                killed: list[dict[str, Any]] = []
                buffer = b""

                async def read_until(done: Any) -> None:
                    nonlocal buffer
                    assert client.stdout is not None
                    while not done():
                        chunk = await client.stdout.receive_some()
                        assert chunk, "the client process ended"
                        buffer += chunk
                        *complete, buffer = buffer.split(b"\n")
                        killed.extend(json.loads(line) for line in complete if line.strip())

                def request(number: int, method: str, params: Any) -> bytes:
                    return (
                        json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params}).encode()
                        + b"\n"
                    )

                info = {"name": "killed-client", "version": "1"}
                await client.stdin.send_all(request(0, "initialize", {"protocolVersion": 2, "info": info}))
                await client.stdin.send_all(request(1, "session/new", {"cwd": "/tmp"}))
                await read_until(lambda: any(m.get("id") == 1 for m in killed))
                prompt = {"sessionId": "streaming", "prompt": [{"type": "text", "text": "go"}]}
                await client.stdin.send_all(request(2, "session/prompt", prompt))
                await read_until(lambda: sum(1 for m in killed if m.get("method") == "session/update") >= 1000)
                client.send_signal(signal.SIGKILL)
                await client.wait()
                await host.wait_until(lambda: host.sessions()["streaming"].attached == 0)
                await trio.to_thread.run_sync(gate.write_text, "go", abandon_on_cancel=True)
                await host.wait_until(lambda: host.sessions()["streaming"].state == "idle")  # finished, detached
                seen = [m["params"]["_meta"][UPDATE_META_KEY] for m in killed if m.get("method") == "session/update"]
                last = host.sessions()["streaming"].last_update
                resumed = Client()
                async with connect_http(url, resumed, variant=v2) as conn:
                    await conn.initialize(v2.InitializeRequest(protocol_version=2, info=INFO))
                    cursor = v2.ReplayFromOther(type=CURSOR_TYPE, extra_fields={"update": seen[-1] + 1})
                    resume = v2.ResumeSessionRequest(session_id="streaming", cwd="/tmp", replay_from=cursor)
                    await conn.agent.session_resume(resume)
                    await resumed.until(lambda: resumed.numbers()[-1:] == [last])
                nursery.cancel_scope.cancel()
    assert seen + resumed.numbers() == list(range(1, last + 1))  # every update exactly once, in order
    texts = [
        m["params"]["update"]["content"]["text"]
        for m in killed
        if m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    ]
    texts += [
        u.content.text for n, u in resumed.updates if n is not None and isinstance(u, v2.AgentMessageChunkSessionUpdate)
    ]
    assert texts == [str(i) for i in range(2000)]
    assert resumed.idle()


# -- the command line ------------------------------------------------------------------------------------

GUIDE = Path(__file__).parent.parent / "docs" / "site" / "guides" / "host.md"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--listen", "127.0.0.1:0", "--detached-ttl", "5", "--", "agent"], "--detached-ttl needs --detach"),
        (["--listen", "127.0.0.1:0", "--journal", "j.db", "--", "agent"], "--journal needs --detach"),
        (["--connect", "ws://127.0.0.1:1/acp", "--detach"], "--detach is for --listen"),
        (["--listen", "127.0.0.1:0", "--detach", "--cancel-grace", "1", "--", "agent"], "--cancel-grace needs --speak"),
        (["--listen", "127.0.0.1:0", "--detach", "--detached-ttl", "0", "--", "agent"], "positive seconds"),
        (["--listen", "127.0.0.1:0", "--detach", "--unattended-policy", "later", "--", "agent"], "invalid choice"),
    ],
)
def test_bad_detach_options_are_usage_errors_naming_them(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


def guide_line(start: str) -> list[str]:
    """The host guide's command line that starts with ``start``, on a free port, with this interpreter."""
    (line,) = [line for line in GUIDE.read_text(encoding="utf-8").splitlines() if line.startswith(start)]
    words = shlex.split(line, comments=True)
    return [sys.executable if w == "python" else "127.0.0.1:0" if w == "127.0.0.1:8765" else w for w in words]


async def test_the_guides_detach_command_keeps_a_turn_for_the_next_client(tmp_path: Path) -> None:
    from acp_trio.transports.http import connect_http
    from acp_trio.transports.websocket import connect_websocket

    command = guide_line("python -m acp_trio.bridge --listen 127.0.0.1:8765 --detach --detached-ttl")
    journal = tmp_path / "journal.db"
    command = [str(journal) if w == "journal.db" else w for w in command]
    cwd = notes_dir(tmp_path)
    bridge_process = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE, start_new_session=True)
    assert bridge_process.stderr is not None
    first, second = Client(answer=False), Client()
    try:
        with trio.fail_after(DEADLINE):
            seen = b""
            while b"/acp\n" not in seen:
                chunk = await bridge_process.stderr.receive_some(1 << 16)
                assert chunk, f"the bridge ended: {seen.decode()}"
                seen += chunk
            url = next(w for w in seen.decode().split() if w.startswith("ws://"))
            async with connect_websocket(url, first, variant=v2) as conn:
                await conn.initialize(v2.InitializeRequest(protocol_version=2, info=INFO))
                new = await conn.agent.session_new(v2.NewSessionRequest(cwd=cwd))
                prompt = [v2.TextContentBlock(text="summarize")]
                await conn.agent.session_prompt(v2.PromptRequest(session_id=new.session_id, prompt=prompt))
                await first.until(lambda: first.asked)
            async with connect_http(url.replace("ws", "http", 1), second, variant=v2) as conn:
                await conn.initialize(v2.InitializeRequest(protocol_version=2, info=INFO))
                start = v2.StartReplayFrom()
                resume = v2.ResumeSessionRequest(session_id=new.session_id, cwd=cwd, replay_from=start)
                await conn.agent.session_resume(resume)
                await second.until(second.idle)
    finally:
        bridge_process.terminate()
        with trio.move_on_after(10):
            await bridge_process.wait()
    assert second.numbers() == list(range(1, len(second.numbers()) + 1))  # the whole turn, from the start
    assert second.numbers()[: len(first.numbers())] == first.numbers()
    assert len(second.asked) == 1
    assert journal.exists()  # --journal: the updates were kept in that SQLite file


def test_serve_bridge_and_open_detach_host_refuse_a_journal_without_detach_and_bad_adapter_options() -> None:
    from acp_trio.bridge import serve_bridge

    for options, message in (
        ({"journal": "j.db"}, "journal is for detach"),
        ({"detach": True, "speak": 3}, "speak is the protocol version"),
        ({"detach": True, "ext_requests": ["_x"]}, "are for speak=1 or 2"),
        ({"detach": True, "speak": 1, "client_fs": False}, "client_fs=False is for speak=2"),
    ):
        with pytest.raises(ValueError, match=message):
            trio.run(functools.partial(serve_bridge, ["agent"], "127.0.0.1", 0, **options))

    async def opened(**options: Any) -> None:
        async with open_detach_host([sys.executable], **options):
            pass  # pragma: no cover

    with pytest.raises(ValueError, match="extension method names start with '_'"):
        trio.run(functools.partial(opened, speak=2, ext_notifications=["x"]))

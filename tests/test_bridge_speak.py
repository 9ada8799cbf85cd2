"""``python -m acp_trio.bridge --listen --speak 1|2`` (issue 33, item 3): an agent that speaks one
protocol version served remotely to clients that speak the other, through the v1 ⇄ v2 adapter
run in the bridge on each connection (:func:`acp_trio.bridge.adapt_agent_process`).

The agent is the demo agent run as a real process speaking one version only
(``python -m acp_trio.demo --serve-agent --protocol 1|2``); the bridge is served in this process
(:func:`acp_trio.bridge.serve_bridge`) and the client connects over WebSocket or Streamable HTTP.
Each turn: text, a permission request answered ``allow``, the stop reason.  Waits are bounded
with ``trio.fail_after``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from acp_schema import v1, v2
from acp_trio.bridge import adapt_agent_process, main, serve_bridge

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX-only")

AGENTS = Path(__file__).parent / "agents"
DEMO_V1 = [sys.executable, "-m", "acp_trio.demo", "--serve-agent", "--protocol", "1"]
DEMO_V2 = [sys.executable, "-m", "acp_trio.demo", "--serve-agent", "--protocol", "2"]


def notes_dir(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("one two three\n", encoding="utf-8")
    return tmp_path


def wire_updates(received: list[bytes]) -> list[dict[str, Any]]:
    """The ``session/update`` payloads among the client's input lines, in order."""
    messages = [json.loads(line) for chunk in received for line in chunk.splitlines() if line.strip()]
    return [m["params"]["update"] for m in messages if m.get("method") == "session/update"]


def said(updates: list[dict[str, Any]]) -> str:
    return "".join(u["content"]["text"] for u in updates if u.get("sessionUpdate") == "agent_message_chunk")


class V1Client:
    """A v1 client that allows what it is asked and notes the permission requests."""

    def __init__(self) -> None:
        self.asked: list[v1.RequestPermissionRequest] = []

    async def session_update(self, params: v1.SessionNotification) -> None:
        pass

    async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        self.asked.append(params)
        allow = next(o for o in params.options if o.kind == "allow_once")
        return v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id=allow.option_id))


class V2Client:
    """A v2 client that allows what it is asked, notes the permission requests and the turn's ``idle``."""

    def __init__(self) -> None:
        self.asked: list[v2.RequestPermissionRequest] = []
        self.idle = trio.Event()

    async def session_update(self, params: v2.UpdateSessionNotification) -> None:
        if isinstance(params.update, v2.IdleStateUpdateSessionUpdate):
            self.idle.set()

    async def session_request_permission(self, params: v2.RequestPermissionRequest) -> v2.RequestPermissionResponse:
        self.asked.append(params)
        allow = next(o for o in params.options if o.kind == "allow_once")
        return v2.RequestPermissionResponse(outcome=v2.SelectedRequestPermissionOutcome(option_id=allow.option_id))


@pytest.mark.one_interpreter
async def test_a_v1_client_over_websocket_gets_a_v2_only_agent_through_speak_1(tmp_path: Path) -> None:
    from acp_trio.transports.websocket import connect_websocket

    cwd = str(notes_dir(tmp_path))
    received: list[bytes] = []
    client = V1Client()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(functools.partial(serve_bridge, DEMO_V2, "127.0.0.1", 0, speak=1))
            url = urls[0].replace("http", "ws", 1) + "/acp"
            tap = lambda d, data: received.append(data) if d == "in" else None  # noqa: E731
            async with connect_websocket(url, {v1: client}, tap=tap) as conn:
                init = await conn.initialize(v1.InitializeRequest(protocol_version=1))
                assert init.protocol_version == 1
                assert init.agent_info is not None and init.agent_info.name == "acp-trio-demo-agent"
                new = await conn.agent.session_new(v1.NewSessionRequest(cwd=cwd, mcp_servers=[]))
                prompt = [v1.TextContentBlock(text="summarize my notes")]
                answer = await conn.agent.session_prompt(v1.PromptRequest(session_id=new.session_id, prompt=prompt))
            nursery.cancel_scope.cancel()
    assert answer.stop_reason == "end_turn"  # v1's prompt answer, made from the v2 agent's idle
    (asked,) = client.asked
    assert asked.tool_call.tool_call_id  # v1 asks about a tool call
    updates = wire_updates(received)
    kinds = [u["sessionUpdate"] for u in updates]
    assert "state_update" not in kinds and "plan_update" not in kinds  # nothing v2-only reached the v1 client
    assert "tool_call" in kinds and "plan" in kinds  # the v2 upserts as v1's tool_call and plan
    first_call = next(u for u in updates if u["sessionUpdate"] == "tool_call")
    assert first_call["toolCallId"] == asked.tool_call.tool_call_id
    text = said(updates)
    assert text.startswith("Let me read your notes") and "Done: summary.txt says" in text
    summary = (tmp_path / "summary.txt").read_text(encoding="utf-8")  # the v2 agent wrote it itself
    assert summary == "notes.txt has 1 non-empty lines; the first is: one two three\nIt has 3 words.\n"


@pytest.mark.one_interpreter
async def test_a_v2_client_over_streamable_http_gets_a_v1_only_agent_through_speak_2(tmp_path: Path) -> None:
    pytest.importorskip("httpx2")
    from acp_trio.transports.http import connect_http

    cwd = str(notes_dir(tmp_path))
    received: list[bytes] = []
    client = V2Client()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(functools.partial(serve_bridge, DEMO_V1, "127.0.0.1", 0, speak=2))
            tap = lambda d, data: received.append(data) if d == "in" else None  # noqa: E731
            async with connect_http(urls[0] + "/acp", {v2: client}, tap=tap) as conn:
                init = await conn.initialize(v2.InitializeRequest(protocol_version=2, info=INFO))
                assert init.protocol_version == 2
                assert init.info.name == "acp-trio-demo-agent"
                new = await conn.agent.session_new(v2.NewSessionRequest(cwd=cwd))
                prompt = [v2.TextContentBlock(text="summarize my notes")]
                receipt = await conn.agent.session_prompt(v2.PromptRequest(session_id=new.session_id, prompt=prompt))
                assert receipt.message_id  # v2: the receipt at once, made up by the adapter
                await client.idle.wait()
            nursery.cancel_scope.cancel()
    (asked,) = client.asked
    assert asked.subject is not None
    updates = wire_updates(received)
    kinds = [u["sessionUpdate"] for u in updates]
    assert "tool_call" not in kinds and "plan" not in kinds  # the v1 agent's updates as v2's
    states = [u["state"] for u in updates if u["sessionUpdate"] == "state_update"]
    assert states == ["running", "requires_action", "running", "idle"]
    assert updates[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
    assert all(u.get("messageId") for u in updates if u["sessionUpdate"] == "agent_message_chunk")
    text = said(updates)
    assert text.startswith("Let me read your notes") and "Done: summary.txt says" in text
    # the v1 agent's fs/* and terminal/* calls were answered by the bridge within the session's cwd:
    # it read notes.txt, counted its words in a terminal, and wrote summary.txt
    summary = (tmp_path / "summary.txt").read_text(encoding="utf-8")
    assert summary == "notes.txt has 1 non-empty lines; the first is: one two three\nIt has 3 words.\n"


INFO = v2.Implementation(name="test-v2-client", version="1")


# -- what --speak does not take: usage errors that name the combination ------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--connect", "ws://127.0.0.1:1/acp", "--speak", "1"], "--speak is for --listen"),
        (["--connect", "ws://127.0.0.1:1/acp", "--no-client-fs"], "--no-client-fs is for --listen"),
        (
            ["--listen", "127.0.0.1:0", "--speak", "1", "--no-client-fs", "--", "agent"],
            "--no-client-fs is for --speak 2",
        ),
        (["--listen", "127.0.0.1:0", "--ext-request", "_x/y", "--", "agent"], "--ext-request needs --speak 1|2"),
        (["--listen", "127.0.0.1:0", "--cancel-grace", "1", "--", "agent"], "--cancel-grace needs --speak 1|2"),
        (["--listen", "127.0.0.1:0", "--speak", "2", "--ext-request", "x/y", "--", "agent"], "start with '_'"),
        (["--listen", "127.0.0.1:0", "--speak", "3", "--", "agent"], "invalid choice: 3"),
    ],
)
def test_bad_speak_combinations_are_usage_errors_naming_them(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err


def test_connect_with_speak_says_how_to_adapt_a_remote_agent(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--connect", "ws://127.0.0.1:1/acp", "--speak", "2"])
    assert "python -m acp_trio.adapt --speak 1|2 -- python -m acp_trio.bridge --connect URL" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"speak": 3}, "1 or 2"),
        ({"speak": 1, "client_fs": False}, "client_fs=False is for speak=2"),
        ({"client_fs": False}, "client_fs=False is for speak=2"),
        ({"ext_requests": ["_x"]}, "are for speak=1 or 2"),
        ({"speak": 2, "ext_notifications": ["x"]}, "start with '_'"),
    ],
)
async def test_serve_bridge_refuses_bad_speak_options_before_it_listens(options: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        await serve_bridge(["cat"], "127.0.0.1", 0, **options)


@pytest.mark.parametrize("speak", [0, 3, None])
async def test_adapt_agent_process_refuses_a_version_it_cannot_speak(speak: Any) -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    with trio.fail_after(10), pytest.raises(ValueError, match="1 or 2"):
        await adapt_agent_process(speak, "cat", [], receive, send)


# -- the bridge's options hold with --speak (the server in front is the same) ----------------------------


async def test_with_speak_the_token_is_still_required_and_no_agent_starts_without_it(tmp_path: Path) -> None:
    from acp_trio.transports.websocket import WebSocketConnectError, connect_websocket

    started = tmp_path / "started"
    agent = [sys.executable, "-c", f"open({str(started)!r}, 'w')"]
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(functools.partial(serve_bridge, agent, "127.0.0.1", 0, token="s3cret", speak=2))
            url = urls[0].replace("http", "ws", 1) + "/acp"
            with pytest.raises(WebSocketConnectError, match="401"):
                async with connect_websocket(url, {v2: V2Client()}):
                    pass
            nursery.cancel_scope.cancel()
    assert not started.exists()  # refused before any agent process


@pytest.mark.one_interpreter
async def test_ext_request_names_an_extension_the_adapter_forwards_to_the_agent() -> None:
    from acp_trio import RequestError
    from acp_trio.transports.websocket import connect_websocket

    echo = [sys.executable, str(AGENTS / "echo_agent.py")]  # v1; answers _test/env with its pid
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            serving = functools.partial(serve_bridge, echo, "127.0.0.1", 0, speak=2, ext_requests=["_test/env"])
            urls = await nursery.start(serving)
            async with connect_websocket(urls[0].replace("http", "ws", 1) + "/acp", {v2: V2Client()}) as conn:
                await conn.initialize(v2.InitializeRequest(protocol_version=2, info=INFO))
                env = await conn.ext_request("_test/env", {})
                with pytest.raises(RequestError) as unnamed:
                    await conn.ext_request("_test/other", {})
            nursery.cancel_scope.cancel()
    assert isinstance(env["pid"], int) and env["pid"] != os.getpid()  # the agent process answered
    assert unnamed.value.code == -32601  # not named: the adapter does not forward it


# -- one agent process per connection, ended with it ----------------------------------------------------


async def serve_adapted(app_options: dict[str, Any], *agent: str, speak: int = 1) -> Any:
    """An ``AcpApp`` whose connections are served by :func:`adapt_agent_process` (as ``serve_bridge``
    builds it), so that a test can wait for its connections to end."""
    from acp_trio.transports.asgi import AcpApp

    async def one(connection_id: str, to_client: trio.abc.SendStream, from_client: trio.abc.ReceiveStream) -> None:
        await adapt_agent_process(speak, agent[0], agent[1:], from_client, to_client, shutdown_timeout=5)

    return AcpApp(serve_streams=one, **app_options)


class AgentStarted(logging.Handler):
    """Notes the pid of each agent process the bridge logs as started, and wakes who waits for one."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.pids: list[int] = []
        self.started = trio.Event()

    def emit(self, record: logging.LogRecord) -> None:  # called in trio's thread, by the bridge's task
        if "serves a connection" in record.msg:
            self.pids.append(record.args[0])  # type: ignore[index]
            self.started.set()


async def test_the_client_leaving_ends_its_agent_process_and_the_agent_ending_closes_the_client() -> None:
    from acp_trio.transports.asgi import serve
    from acp_trio.transports.websocket import connect_websocket

    logger = logging.getLogger("acp_trio.bridge")
    handler = AgentStarted()
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.INFO
    try:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                app = await serve_adapted({}, "cat")  # an agent that waits for the end of its input
                urls = await nursery.start(serve, app, "127.0.0.1", 0)
                url = urls[0].replace("http", "ws", 1) + "/acp"
                async with connect_websocket(url, {v1: V1Client()}):
                    await handler.started.wait()
                await app.wait_idle()  # the client left: the connection's service returned...
                (pid,) = handler.pids
                with pytest.raises(ProcessLookupError):
                    os.kill(pid, 0)  # ...after the agent process was shut down and reaped
                nursery.cancel_scope.cancel()
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                app = await serve_adapted({}, "true")  # an agent that exits at once
                urls = await nursery.start(serve, app, "127.0.0.1", 0)
                async with connect_websocket(urls[0].replace("http", "ws", 1) + "/acp", {v1: V1Client()}) as conn:
                    await conn.wait_closed()  # the agent is gone: the bridge closed the client's connection
                nursery.cancel_scope.cancel()
    finally:
        logger.removeHandler(handler)
        logger.level = level


# -- the remote guide's command lines, run -----------------------------------------------------------------

GUIDE = Path(__file__).parent.parent / "docs" / "site" / "guides" / "remote.md"


def guide_line(start: str) -> list[str]:
    """The remote guide's command line that starts with ``start`` (comment dropped), on a free
    port, with this interpreter for ``python``."""
    (line,) = [line for line in GUIDE.read_text(encoding="utf-8").splitlines() if line.startswith(start)]
    words = shlex.split(line, comments=True)
    words = [sys.executable if w == "python" else "127.0.0.1:0" if w == "127.0.0.1:8765" else w for w in words]
    return words


@pytest.mark.one_interpreter
async def test_the_guides_speak_2_command_serves_the_v1_demo_agent_to_a_v2_client(tmp_path: Path) -> None:
    from acp_trio.transports.websocket import connect_websocket

    command = guide_line("python -m acp_trio.bridge --listen 127.0.0.1:8765 --speak 2 --")
    assert command[-3:] == ["--serve-agent", "--protocol", "1"]
    bridge = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE, start_new_session=True)
    assert bridge.stderr is not None
    client = V2Client()
    try:
        with trio.fail_after(30):
            seen = b""
            while b"/acp\n" not in seen:
                chunk = await bridge.stderr.receive_some(1 << 16)
                assert chunk, f"the bridge ended: {seen.decode()}"
                seen += chunk
            assert b"(adapted: protocol 2 to clients)" in seen
            url = next(w for w in seen.decode().split() if w.startswith("ws://"))
            async with connect_websocket(url, {v2: client}) as conn:
                init = await conn.initialize(v2.InitializeRequest(protocol_version=2, info=INFO))
                assert (init.protocol_version, init.info.name) == (2, "acp-trio-demo-agent")
                new = await conn.agent.session_new(v2.NewSessionRequest(cwd=str(notes_dir(tmp_path))))
                prompt = [v2.TextContentBlock(text="summarize")]
                await conn.agent.session_prompt(v2.PromptRequest(session_id=new.session_id, prompt=prompt))
                await client.idle.wait()
    finally:
        bridge.terminate()
        with trio.move_on_after(10):
            await bridge.wait()
    assert len(client.asked) == 1
    assert "It has 3 words." in (tmp_path / "summary.txt").read_text(encoding="utf-8")

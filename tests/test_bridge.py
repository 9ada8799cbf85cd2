"""The bridge's process side (issue 12, item 5): any stdio agent serves one connection's streams.

``pump_agent_process`` moves bytes verbatim between a remote connection (here trio memory
streams standing in for a server's WebSocket or HTTP connection) and a spawned agent process.
Real processes, waits bounded with ``trio.fail_after``.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from _processes import alive

import acp_trio
from acp_schema import v1
from acp_trio.bridge import pump_agent_process

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX-only")

AGENTS = Path(__file__).parent / "agents"


async def test_bytes_pass_through_verbatim_both_ways() -> None:
    to_agent_send, to_agent_receive = trio.testing.memory_stream_one_way_pair()
    from_agent_send, from_agent_receive = trio.testing.memory_stream_one_way_pair()
    lines = [
        b'{"jsonrpc":"2.0","id":"x-1","method":"_vendor/unknown","params":{"keep":[1,2.50,"\\u00e9"],"_meta":{}}}\n',
        b'{"jsonrpc": "2.0",   "method": "session/update", "params": {"sessionId": "s", "zzz": null}}\n',
    ]
    received = b""
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump_agent_process, "cat", [], to_agent_receive, from_agent_send)
            for line in lines:
                await to_agent_send.send_all(line)
            while received.count(b"\n") < len(lines):
                received += await from_agent_receive.receive_some(1 << 16)
            await to_agent_send.aclose()  # the remote ends: cat sees EOF and exits, the pump returns
            assert await from_agent_receive.receive_some(1 << 16) == b""  # and the remote side was closed
    assert received == b"".join(lines)  # byte for byte: spacing, number spelling, escapes, unknown fields


async def test_a_client_runs_a_turn_through_the_bridge_and_the_agent_exits_when_the_remote_ends(
    tmp_path: Path,
) -> None:
    to_agent_send, to_agent_receive = trio.testing.memory_stream_one_way_pair()
    from_agent_send, from_agent_receive = trio.testing.memory_stream_one_way_pair()
    pid_file = tmp_path / "agent.pid"

    class Client:
        def __init__(self) -> None:
            self.words: list[str] = []

        async def session_update(self, params: v1.SessionNotification) -> None:
            assert isinstance(params.update, v1.AgentMessageChunkSessionUpdate)
            assert isinstance(params.update.content, v1.TextContentBlock)
            self.words.append(params.update.content.text)

    client = Client()
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                pump_agent_process,
                sys.executable,
                [str(AGENTS / "echo_agent.py"), str(pid_file)],
                to_agent_receive,
                from_agent_send,
            )
            async with acp_trio.ClientSideConnection(client, to_agent_send, from_agent_receive) as conn:
                await conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
                session = await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
                response = await conn.agent.session_prompt(
                    v1.PromptRequest(session_id=session.session_id, prompt=[v1.TextContentBlock(text="one two")])
                )
                assert response.stop_reason == "end_turn"
                pid = int(pid_file.read_text())
                assert alive(pid)
        # leaving the connection closed its output: the agent saw EOF, exited, and the pump returned
    assert client.words == ["one", "two"]
    assert not alive(pid)


async def test_an_agent_that_dies_closes_the_remote_side() -> None:
    _to_agent_send, to_agent_receive = trio.testing.memory_stream_one_way_pair()
    from_agent_send, from_agent_receive = trio.testing.memory_stream_one_way_pair()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                pump_agent_process,
                sys.executable,
                ["-c", "print('bye', flush=True)"],
                to_agent_receive,
                from_agent_send,
            )
            got = b""
            while chunk := await from_agent_receive.receive_some(1 << 16):
                got += chunk
    assert got == b"bye\n"  # then end of stream: the remote side was closed, and the pump returned


async def test_a_missing_agent_command_is_named() -> None:
    _send, receive = trio.testing.memory_stream_one_way_pair()
    send, _receive = trio.testing.memory_stream_one_way_pair()
    with pytest.raises(FileNotFoundError, match="no-such-agent-for-the-bridge"):
        await pump_agent_process("no-such-agent-for-the-bridge", [], receive, send)


# -- over the network: --listen serves a stdio agent on a WebSocket, --connect carries stdio to one ----------


class Words:
    def __init__(self) -> None:
        self.words: list[str] = []

    async def session_update(self, params: v1.SessionNotification) -> None:
        assert isinstance(params.update, v1.AgentMessageChunkSessionUpdate)
        assert isinstance(params.update.content, v1.TextContentBlock)
        self.words.append(params.update.content.text)


async def run_turn(conn: acp_trio.ClientSideConnection, text: str) -> Any:
    await conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
    session = await conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
    response = await conn.agent.session_prompt(
        v1.PromptRequest(session_id=session.session_id, prompt=[v1.TextContentBlock(text=text)])
    )
    assert response.stop_reason == "end_turn"
    return await conn.ext_request("_test/env")


async def test_listen_gives_each_websocket_connection_its_own_agent_process() -> None:
    from acp_trio.bridge import serve_bridge
    from acp_trio.transports.websocket import connect_websocket

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(serve_bridge, [sys.executable, str(AGENTS / "echo_agent.py")], "127.0.0.1", 0)
            url = urls[0].replace("http", "ws", 1) + "/acp"
            clients = [Words(), Words()]
            async with connect_websocket(url, clients[0]) as one, connect_websocket(url, clients[1]) as two:
                env_one, env_two = await run_turn(one, "a b"), await run_turn(two, "c")
                assert env_one["pid"] != env_two["pid"]  # one agent process per ACP connection
            pids = [env_one["pid"], env_two["pid"]]
            with trio.fail_after(10):  # the connections closed: each agent saw EOF and exited
                while any(alive(pid) for pid in pids):
                    await trio.sleep(0.02)  # polling a process that is not our child: no event to wait on
            nursery.cancel_scope.cancel()
    assert clients[0].words == ["a", "b"] and clients[1].words == ["c"]


async def test_connect_carries_stdio_to_a_remote_agent_verbatim() -> None:
    from acp_trio.bridge import connect_bridge, serve_bridge

    to_bridge_send, to_bridge_receive = trio.testing.memory_stream_one_way_pair()
    from_bridge_send, from_bridge_receive = trio.testing.memory_stream_one_way_pair()
    lines = [
        b'{"jsonrpc":"2.0","id":"x-1","method":"_vendor/unknown","params":{"keep":[1,2.50,"\\u00e9"],"_meta":{}}}\n',
        b'{"jsonrpc": "2.0",   "method": "session/update", "params": {"zzz": null}}\n',
    ]
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(serve_bridge, ["cat"], "127.0.0.1", 0)  # the remote agent echoes
            url = urls[0].replace("http", "ws", 1) + "/acp"
            nursery.start_soon(functools.partial(connect_bridge, url, stdin=to_bridge_receive, stdout=from_bridge_send))
            for line in lines:
                await to_bridge_send.send_all(line)
            received = b""
            while received.count(b"\n") < len(lines):
                received += await from_bridge_receive.receive_some(1 << 16)
            await to_bridge_send.aclose()  # end of stdin: the WebSocket closes, cat exits
            assert await from_bridge_receive.receive_some(1 << 16) == b""  # and stdout was closed
            nursery.cancel_scope.cancel()
    assert received == b"".join(lines)  # stdio → WebSocket → stdio agent → back, byte for byte


async def test_connect_over_streamable_http_carries_stdio_to_a_remote_agent() -> None:
    import json

    pytest.importorskip("httpx2")
    from acp_trio.bridge import connect_bridge, serve_bridge

    to_bridge_send, to_bridge_receive = trio.testing.memory_stream_one_way_pair()
    from_bridge_send, from_bridge_receive = trio.testing.memory_stream_one_way_pair()
    lines = [
        b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}\n',
        b'{"jsonrpc":"2.0","id":"x-1","method":"_vendor/unknown","params":{"keep":[1,2.50]}}\n',
        b'{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}\n',
    ]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            agent = [sys.executable, str(AGENTS / "echo_agent.py")]
            urls = await nursery.start(serve_bridge, agent, "127.0.0.1", 0)
            url = urls[0] + "/acp"
            nursery.start_soon(functools.partial(connect_bridge, url, stdin=to_bridge_receive, stdout=from_bridge_send))
            for line in lines:
                await to_bridge_send.send_all(line)
            received = b""
            while received.count(b"\n") < len(lines):
                received += await from_bridge_receive.receive_some(1 << 16)
            answers = {json.dumps(m["id"]): m for m in map(json.loads, received.splitlines())}
            assert answers["0"]["result"]["protocolVersion"] == 1
            assert answers['"x-1"']["error"]["code"] == -32601  # the remote agent's own answer, id kept
            assert isinstance(answers["2"]["result"]["sessionId"], str)
            await to_bridge_send.aclose()  # end of stdin: DELETE, and stdout is closed
            assert await from_bridge_receive.receive_some(1 << 16) == b""
            nursery.cancel_scope.cancel()


async def test_an_editor_spawns_the_connect_bridge_as_its_agent() -> None:
    """Real processes end to end: spawn_agent(bridge --connect) → WebSocket → bridge --listen → echo agent."""
    listen = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-m",
            "acp_trio.bridge",
            "--listen",
            "127.0.0.1:0",
            "--",
            sys.executable,
            str(AGENTS / "echo_agent.py"),
        ],
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert listen.stderr is not None
    try:
        with trio.fail_after(30):
            seen = b""
            while b"/acp\n" not in seen:
                chunk = await listen.stderr.receive_some(1 << 16)
                assert chunk, f"the listening bridge ended: {seen.decode()}"
                seen += chunk
            url = next(w for w in seen.decode().split() if w.startswith("ws://"))
            client = Words()
            async with acp_trio.spawn_agent(
                sys.executable, ["-m", "acp_trio.bridge", "--connect", url], client=client
            ) as conn:
                await run_turn(conn, "through two bridges")
            assert conn.process.returncode == 0  # the connect bridge exited by itself on EOF
            assert client.words == ["through", "two", "bridges"]
    finally:
        listen.terminate()
        with trio.move_on_after(10):
            await listen.wait()


async def test_connect_survives_a_line_that_is_not_utf8() -> None:
    from acp_trio.bridge import connect_bridge, serve_bridge

    to_bridge_send, to_bridge_receive = trio.testing.memory_stream_one_way_pair()
    from_bridge_send, from_bridge_receive = trio.testing.memory_stream_one_way_pair()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(serve_bridge, ["cat"], "127.0.0.1", 0)
            url = urls[0].replace("http", "ws", 1) + "/acp"
            nursery.start_soon(functools.partial(connect_bridge, url, stdin=to_bridge_receive, stdout=from_bridge_send))
            await to_bridge_send.send_all(b'{"bad": "\xff"}\n{"good": 1}\n')
            received = b""
            while received.count(b"\n") < 2:
                received += await from_bridge_receive.receive_some(1 << 16)
            nursery.cancel_scope.cancel()
    assert received == '{"bad": "\ufffd"}\n{"good": 1}\n'.encode()  # carried on, the bad byte replaced

"""The bridge's process side (issue 12, item 5): any stdio agent serves one connection's streams.

``pump_agent_process`` moves bytes verbatim between a remote connection (here trio memory
streams standing in for a server's WebSocket or HTTP connection) and a spawned agent process.
Real processes, waits bounded with ``trio.fail_after``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

import acp_trio
from acp_schema import v1
from acp_trio.bridge import pump_agent_process

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX-only")

AGENTS = Path(__file__).parent / "agents"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


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
                assert pid_alive(pid)
        # leaving the connection closed its output: the agent saw EOF, exited, and the pump returned
    assert client.words == ["one", "two"]
    assert not pid_alive(pid)


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

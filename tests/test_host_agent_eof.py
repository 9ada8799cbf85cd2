"""The host reads an agent's last line even without its newline, as it reads a client's (a stdio agent
behind the bridge's ``--detach`` may end its output that way)."""

from __future__ import annotations

import orjson
import pytest
import trio

from acp_schema import v1
from acp_trio.host import open_session_host

pytestmark = pytest.mark.trio


async def test_an_agents_last_line_without_its_newline_is_delivered() -> None:
    async def serve_agent(stream: trio.abc.HalfCloseableStream) -> None:
        line = b""
        while b"\n" not in line:
            line += await stream.receive_some()
        request = orjson.loads(line.split(b"\n")[0])
        answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"protocolVersion": 1, "agentCapabilities": {}}}
        await stream.send_all(orjson.dumps(answer))  # no newline, then the end of output
        await stream.send_eof()

    with trio.fail_after(10):
        async with open_session_host(None, serve_agent=serve_agent) as host, host.connect(object()) as conn:
            answer = await conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
    assert answer.protocol_version == 1

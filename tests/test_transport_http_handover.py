"""The Streamable HTTP client's SSE readers hand what they read to the connection in their own task
(``Connection.deliver_lines``), and POST the answers themselves: the stream is read on, by another
task, when a handler has to wait for what comes after it on the same stream, or when the server
holds the POST of an answer until the client has read more."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from test_transport_http import INIT, Recorder, ScriptedServer, new_session, prompt, scripted

from acp_schema import v1

httpx2 = pytest.importorskip("httpx2")  # the `remote` extra


def permission_request(session_id: str, request_id: int) -> dict[str, Any]:
    options = [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]
    params = {
        "sessionId": session_id,
        "toolCall": {"toolCallId": f"t{request_id}", "title": "read"},
        "options": options,
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": "session/request_permission", "params": params}


def text_update(session_id: str, text: str) -> dict[str, Any]:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}}


class PatientRecorder(Recorder):
    """Answers a permission request only once the update ``waiting`` arrived (it comes after it)."""

    async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        await self.waiting.wait()
        return await super().session_request_permission(params)


class HoldingServer(ScriptedServer):
    """Holds the POST of the client's answers while ``hold`` is an unset event."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: trio.Event | None = None

    async def handle(self, request: Any) -> Any:
        if request.method == "POST" and self.hold is not None:
            message = json.loads(await request.aread())
            if "method" not in message:
                await self.hold.wait()
        return await super().handle(request)


def answers(server: ScriptedServer) -> list[Any]:
    return [message for method, _, message in server.requests if method == "POST" and "method" not in message]


async def test_a_handler_waiting_for_what_follows_it_on_its_stream_gets_it(autojump_clock: Any) -> None:
    server = ScriptedServer()
    client = PatientRecorder()
    with trio.fail_after(30):
        async with scripted(server, client) as conn:
            await conn.agent.initialize(INIT)
            session_id = await new_session(conn)
            server.send(session_id, permission_request(session_id, 7))
            server.send(session_id, text_update(session_id, "waiting"))
            await server.arrived("POST None").wait()  # the answer
            assert client.permissions == ["t7"]
            [answer] = answers(server)
            assert answer["id"] == 7 and answer["result"]["outcome"]["optionId"] == "allow"
            # and the session's stream is still read
            assert (await conn.agent.session_prompt(prompt(session_id, "x"))).stop_reason == "end_turn"
            assert client.texts[session_id] == ["waiting", "hi"]


async def test_an_answer_held_by_the_server_until_more_is_read_gets_through(autojump_clock: Any) -> None:
    server = HoldingServer()
    client = Recorder()
    with trio.fail_after(30):
        async with scripted(server, client) as conn:
            await conn.agent.initialize(INIT)
            session_id = await new_session(conn)
            server.hold = client.waiting  # set once the update that follows the request was read
            server.send(session_id, permission_request(session_id, 7))
            server.send(session_id, text_update(session_id, "waiting"))
            await server.arrived("POST None").wait()
            await client.waiting.wait()
            server.hold = None
            server.send(session_id, permission_request(session_id, 8))
            assert (await conn.agent.session_prompt(prompt(session_id, "x"))).stop_reason == "end_turn"
            assert client.permissions == ["t7", "t8"]
            assert [answer["id"] for answer in answers(server)] == [7, 8]

"""The acp-trio agent that the official SDKs' clients drive (``python tests/interop/trio_agent.py``).

It serves on its own stdio with :func:`acp_trio.run_agent_stdio` and plays the agent half of the
interoperability script that every test in ``tests/test_interop.py`` follows:

- ``session/prompt`` with any text but ``wait``: three ``agent_message_chunk`` updates, a
  ``session/request_permission`` for tool call ``interop-write``; when the client picks ``allow``
  it reads ``input.txt`` from the session directory with ``fs/read_text_file``, writes
  ``output.txt`` there with ``fs/write_text_file`` (``"echo: " + input``), reports both in chunks
  and ends the turn with ``end_turn``;
- ``session/prompt`` with the text ``wait``: one chunk ``waiting``, a permission request for tool
  call ``interop-wait``, then it waits forever; the client's ``session/cancel`` ends the turn with
  stop reason ``cancelled`` (the runtime does that);
- the extension request ``_interop/echo`` answers ``{"echo": <params>}``; ``_interop/missing`` is
  not registered, so the runtime answers -32601.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import trio

from acp_schema import v1
from acp_trio import AgentSideConnection, RequestError, run_agent_stdio

AGENT_INFO = v1.Implementation(name="acp-trio-interop-agent", version="1")
OPTIONS = [
    v1.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    v1.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]


class InteropAgent:
    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn
        self.client = v1.ClientPeer(conn)
        self.sessions: dict[str, str] = {}
        conn.on_ext_request("_interop/echo", self.echo)

    async def echo(self, params: Any) -> Any:
        return {"echo": params}

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        return v1.InitializeResponse(
            protocol_version=self.conn.protocol_version,
            agent_capabilities=v1.AgentCapabilities(load_session=False),
            auth_methods=[],
            agent_info=AGENT_INFO,
        )

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        session_id = f"sess_{uuid.uuid4().hex[:12]}"
        self.sessions[session_id] = params.cwd
        return v1.NewSessionResponse(session_id=session_id)

    async def _say(self, session_id: str, text: str) -> None:
        update = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=text))
        await self.client.session_update(v1.SessionNotification(session_id=session_id, update=update))

    async def _ask(self, session_id: str, tool_call_id: str) -> str:
        answer = await self.client.session_request_permission(
            v1.RequestPermissionRequest(
                session_id=session_id,
                tool_call=v1.ToolCallUpdate(tool_call_id=tool_call_id, title="Write output.txt", kind="edit"),
                options=OPTIONS,
            )
        )
        outcome = answer.outcome
        if isinstance(outcome, v1.SelectedRequestPermissionOutcome):
            return str(outcome.option_id)
        return "cancelled"

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        session_id = params.session_id
        cwd = self.sessions.get(session_id)
        if cwd is None:
            raise RequestError.resource_not_found(session_id)
        text = "".join(block.text for block in params.prompt if isinstance(block, v1.TextContentBlock))
        if text == "wait":
            await self._say(session_id, "waiting")
            await self._ask(session_id, "interop-wait")
            await trio.sleep_forever()  # session/cancel cancels the turn: stop reason "cancelled"
        for chunk in ("Hello", " from", " acp-trio"):
            await self._say(session_id, chunk)
        choice = await self._ask(session_id, "interop-write")
        await self._say(session_id, f"permission: {choice}")
        if choice != "allow":
            return v1.PromptResponse(stop_reason="end_turn")
        read = await self.client.fs_read_text_file(
            v1.ReadTextFileRequest(session_id=session_id, path=os.path.join(cwd, "input.txt"))
        )
        await self._say(session_id, f"read: {read.content}")
        await self.client.fs_write_text_file(
            v1.WriteTextFileRequest(
                session_id=session_id, path=os.path.join(cwd, "output.txt"), content=f"echo: {read.content}"
            )
        )
        await self._say(session_id, "wrote output.txt")
        return v1.PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    run_agent_stdio(InteropAgent)

"""An agent for the conformance checker's tests: right in every way the checker looks at, or
wrong in exactly one, named by ``argv[1]``:

- ``good``: nothing wrong;
- ``stdout``: prints a banner line on stdout;
- ``answers-notifications``: answers the extension notification ``_acp_check/note``;
- ``invalid-update``: sends a ``session/update`` whose chunk has no ``content``;
- ``fs-without-capability``: reads a file from a client that did not advertise ``fs``;
- ``ignores-cancel``: keeps streaming after ``session/cancel`` and ends the turn ``end_turn``;
- ``never-exits``: does not exit when its stdin closes (it does on SIGTERM);
- ``unknown-tool-call``: sends a ``tool_call_update`` for a tool call it never reported;
- ``load-answers-first``: answers ``session/load`` before replaying the conversation;
- ``rejects-resource-link``: refuses a prompt holding a ``resource_link`` block (every agent must take one).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import trio

import acp_trio
from acp_schema import v1

DEFECT = sys.argv[1] if len(sys.argv) > 1 else "good"


class Agent:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sessions = 0
        self.history: dict[str, list[Any]] = {}
        if DEFECT == "answers-notifications":
            conn.on_ext_notification("_acp_check/note", self.note)

    async def note(self, params: Any) -> None:
        self.conn.connection._enqueue(b'{"jsonrpc":"2.0","id":null,"result":null}\n')

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        return v1.InitializeResponse(
            protocol_version=1,
            agent_capabilities=v1.AgentCapabilities(load_session=True),
            agent_info=v1.Implementation(name="check-target", version="1.0"),
        )

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        self.sessions += 1
        return v1.NewSessionResponse(session_id=f"s{self.sessions}")

    async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
        async def replay() -> None:
            if DEFECT == "load-answers-first":
                await trio.sleep(0.1)
            for update in self.history.get(params.session_id, []):
                await self.conn.client.session_update(
                    v1.SessionNotification(session_id=params.session_id, update=update)
                )

        if DEFECT == "load-answers-first":
            self.conn.connection.start_soon(replay, name="late replay")
        else:
            await replay()
        return v1.LoadSessionResponse()

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        sid = params.session_id
        if DEFECT == "rejects-resource-link" and any(
            isinstance(block, v1.ResourceLinkContentBlock) for block in params.prompt
        ):
            raise acp_trio.RequestError(-32602, "Invalid params", {"detail": "resource_link is not supported"})
        self.history.setdefault(sid, []).append(
            v1.UserMessageChunkSessionUpdate(content=v1.TextContentBlock(text="(the prompt)"))
        )
        if DEFECT == "invalid-update":
            await self.conn.connection.notify(
                "session/update", {"sessionId": sid, "update": {"sessionUpdate": "agent_message_chunk"}}
            )
        if DEFECT == "fs-without-capability":
            try:
                await self.conn.connection.request("fs/read_text_file", {"sessionId": sid, "path": "/etc/hostname"})
            except Exception:
                pass
        call = "call-1" if DEFECT != "unknown-tool-call" else "call-never-reported"
        await self.conn.client.session_update(
            v1.SessionNotification(
                session_id=sid, update=v1.ToolCallSessionUpdate(tool_call_id="call-1", title="Think")
            )
        )
        update_call = v1.ToolCallUpdateSessionUpdate(tool_call_id=call, status="completed")
        await self.conn.client.session_update(v1.SessionNotification(session_id=sid, update=update_call))
        with trio.CancelScope(shield=DEFECT == "ignores-cancel"):
            for i in range(20):
                update = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=f"word{i} "))
                await self.conn.client.session_update(v1.SessionNotification(session_id=sid, update=update))
                await trio.sleep(0.05 if DEFECT != "ignores-cancel" else 0.15)
        return v1.PromptResponse(stop_reason="end_turn")


if DEFECT == "stdout":
    print("check-target agent starting", flush=True)
if DEFECT == "never-exits":
    threading.Thread(target=threading.Event().wait, daemon=False).start()
acp_trio.run_agent_stdio(Agent)

"""An agent for the conformance checker's tests: right in every way the checker looks at, or
wrong in exactly one, named by ``argv[1]``:

- ``good``: nothing wrong;
- ``stdout``: prints a banner line on stdout;
- ``answers-notifications``: answers the extension notification ``_acp_check/note``;
- ``invalid-update``: sends a ``session/update`` whose chunk has no ``content``;
- ``fs-without-capability``: reads a file from a client that did not advertise ``fs``;
- ``ignores-cancel``: keeps streaming after ``session/cancel`` (and after ``session/close``, which
  cancels the same way) and ends the turn ``end_turn``;
- ``never-exits``: does not exit when its stdin closes (it does on SIGTERM);
- ``unknown-tool-call``: sends a ``tool_call_update`` for a tool call it never reported;
- ``load-answers-first``: answers ``session/load`` before replaying the conversation;
- ``rejects-resource-link``: refuses a prompt holding a ``resource_link`` block (every agent must take one);
- ``stderr-protocol``: writes a JSON-RPC message on stderr;
- ``resume-replays``: replays the conversation on ``session/resume``;
- ``config-unchanged``: answers ``session/set_config_option`` with the old value;
- ``permission-outlives-cancel``: with a permission request pending, ``session/cancel`` does not end
  the turn: it waits for the answer, then goes on working for 3 s;
- ``unlisted``: ``session/list`` leaves out the sessions of this connection;
- ``rejects-mcp``: refuses ``session/new`` with a stdio MCP server (every agent must take one).

It offers ``loadSession``, ``session/list``, ``resume``, ``close``, ``delete``, two modes and a
``select`` config option.  A prompt whose text holds "permission" asks
``session/request_permission`` first; one holding "read" reads ``acp-check-notes.txt`` from its
``cwd`` when the client advertised ``fs.readTextFile`` (reported as a tool call).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import trio

import acp_trio
from acp_schema import v1

DEFECT = sys.argv[1] if len(sys.argv) > 1 else "good"
MODES = v1.SessionModeState(
    current_mode_id="ask",
    available_modes=[v1.SessionMode(id="ask", name="Ask"), v1.SessionMode(id="code", name="Code")],
)


def config(value: str) -> list[Any]:
    choices = [
        v1.SessionConfigSelectOption(value="fast", name="Fast"),
        v1.SessionConfigSelectOption(value="deep", name="Deep"),
    ]
    return [
        v1.SelectSessionConfigOption(type="select", id="effort", name="Effort", current_value=value, options=choices)
    ]


class Agent:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sessions = 0
        self.history: dict[str, list[Any]] = {}
        self.effort: dict[str, str] = {}
        if DEFECT == "answers-notifications":
            conn.on_ext_notification("_acp_check/note", self.note)

    async def note(self, params: Any) -> None:
        self.conn.connection._enqueue(b'{"jsonrpc":"2.0","id":null,"result":null}\n')

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        sessions = v1.SessionCapabilities(
            list=v1.SessionListCapabilities(),
            resume=v1.SessionResumeCapabilities(),
            close=v1.SessionCloseCapabilities(),
            delete=v1.SessionDeleteCapabilities(),
        )
        return v1.InitializeResponse(
            protocol_version=1,
            agent_capabilities=v1.AgentCapabilities(load_session=True, session_capabilities=sessions),
            agent_info=v1.Implementation(name="check-target", version="1.0"),
        )

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        if DEFECT == "rejects-mcp" and params.mcp_servers:
            raise acp_trio.RequestError.invalid_params({"detail": "MCP servers are not supported"})
        self.sessions += 1
        sid = f"s{self.sessions}"
        self.effort[sid] = "fast"
        return v1.NewSessionResponse(session_id=sid, modes=MODES, config_options=config("fast"))

    async def session_list(self, params: v1.ListSessionsRequest) -> v1.ListSessionsResponse:
        found = [
            v1.SessionInfo(session_id=info.session_id, cwd=info.cwd)
            for info in self.conn.sessions.values()
            if DEFECT != "unlisted" and (not isinstance(params.cwd, str) or info.cwd == params.cwd)
        ]
        return v1.ListSessionsResponse(sessions=found)

    async def _replay(self, session_id: str) -> None:
        for update in self.history.get(session_id, []):
            await self.conn.client.session_update(v1.SessionNotification(session_id=session_id, update=update))

    async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
        async def late_replay() -> None:
            await trio.sleep(0.1)
            await self._replay(params.session_id)

        if DEFECT == "load-answers-first":
            self.conn.connection.start_soon(late_replay, name="late replay")
        else:
            await self._replay(params.session_id)
        return v1.LoadSessionResponse()

    async def session_resume(self, params: v1.ResumeSessionRequest) -> v1.ResumeSessionResponse:
        if DEFECT == "resume-replays":
            await self._replay(params.session_id)
        return v1.ResumeSessionResponse()

    async def session_close(self, params: v1.CloseSessionRequest) -> v1.CloseSessionResponse:
        return v1.CloseSessionResponse()

    async def session_delete(self, params: v1.DeleteSessionRequest) -> v1.DeleteSessionResponse:
        self.history.pop(params.session_id, None)
        return v1.DeleteSessionResponse()

    async def session_set_mode(self, params: v1.SetSessionModeRequest) -> v1.SetSessionModeResponse:
        if params.mode_id not in ("ask", "code"):
            raise acp_trio.RequestError.invalid_params({"modeId": params.mode_id})
        return v1.SetSessionModeResponse()

    async def session_set_config_option(self, params: Any) -> v1.SetSessionConfigOptionResponse:
        if params.config_id != "effort" or params.value not in ("fast", "deep"):
            raise acp_trio.RequestError.invalid_params({"configId": params.config_id})
        if DEFECT != "config-unchanged":
            self.effort[params.session_id] = params.value
        return v1.SetSessionConfigOptionResponse(config_options=config(self.effort[params.session_id]))

    async def _ask_permission(self, sid: str) -> None:
        request = v1.RequestPermissionRequest(
            session_id=sid,
            tool_call=v1.ToolCallUpdate(tool_call_id="call-perm", title="Write hello.txt"),
            options=[v1.PermissionOption(option_id="allow", name="Allow", kind="allow_once")],
        )
        await self.conn.client.session_update(
            v1.SessionNotification(
                session_id=sid, update=v1.ToolCallSessionUpdate(tool_call_id="call-perm", title="Write")
            )
        )
        with trio.CancelScope(shield=DEFECT == "permission-outlives-cancel"):
            await self.conn.client.session_request_permission(request)
            if DEFECT == "permission-outlives-cancel":
                await trio.sleep(3)  # goes on working after the cancelled answer
        return None

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        sid = params.session_id
        text = " ".join(block.text for block in params.prompt if isinstance(block, v1.TextContentBlock))
        if DEFECT == "rejects-resource-link" and any(
            isinstance(block, v1.ResourceLinkContentBlock) for block in params.prompt
        ):
            raise acp_trio.RequestError(-32602, "Invalid params", {"detail": "resource_link is not supported"})
        self.history.setdefault(sid, []).append(
            v1.UserMessageChunkSessionUpdate(content=v1.TextContentBlock(text="(the prompt)"))
        )
        if "permission" in text:
            await self._ask_permission(sid)
        if "read" in text and (self.conn.client_capabilities.get("fs") or {}).get("readTextFile"):
            session = self.conn.sessions.get(sid)
            path = os.path.join(session.cwd if session else "/", "acp-check-notes.txt")
            await self.conn.client.fs_read_text_file(v1.ReadTextFileRequest(session_id=sid, path=path))
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
        shielded = DEFECT == "ignores-cancel"
        with trio.CancelScope(shield=shielded):
            for i in range(20):
                update = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=f"word{i} "))
                self.history[sid].append(update)
                await self.conn.client.session_update(v1.SessionNotification(session_id=sid, update=update))
                await trio.sleep(0.02 if not shielded else 0.15)
        return v1.PromptResponse(stop_reason="end_turn")


if DEFECT == "stdout":
    print("check-target agent starting", flush=True)
if DEFECT == "stderr-protocol":
    print('{"jsonrpc":"2.0","method":"session/update","params":{}}', file=sys.stderr, flush=True)
if DEFECT == "never-exits":
    threading.Thread(target=threading.Event().wait, daemon=False).start()
acp_trio.run_agent_stdio(Agent)

"""The example agent: one prompt turn that shows the protocol's moving parts.

On ``session/prompt`` it streams ``agent_message_chunk`` updates, publishes a plan, reports a tool
call and asks ``session/request_permission`` for it, reads ``notes.txt`` from the session directory
with ``fs/read_text_file``, writes ``summary.txt`` with ``fs/write_text_file`` (reporting a diff),
and ends the turn with stop reason ``end_turn``.  ``session/cancel`` ends it with ``cancelled``
(the runtime does that).  Run it alone with ``python -m acp_trio.demo --serve-agent``.

It uses only the generated ``acp_schema.v1`` types and the ``acp_trio`` runtime.
"""

from __future__ import annotations

import os
import uuid

import trio

from acp_schema import v1
from acp_trio import AgentSideConnection, RequestError, run_agent_stdio

AGENT_INFO = v1.Implementation(name="acp-trio-demo-agent", title="acp-trio demo agent", version="1")


class DemoAgent:
    """The demo agent; construct it with the connection (``run_agent_stdio(DemoAgent)`` does)."""

    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn
        self.client = v1.ClientPeer(conn)
        self.sessions: dict[str, str] = {}  # session id -> cwd

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        return v1.InitializeResponse(
            protocol_version=self.conn.protocol_version,
            agent_capabilities=v1.AgentCapabilities(
                load_session=False,
                prompt_capabilities=v1.PromptCapabilities(image=False, audio=False, embedded_context=True),
            ),
            auth_methods=[],
            agent_info=AGENT_INFO,
        )

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        if not os.path.isabs(params.cwd):
            raise RequestError.invalid_params({"path": "$.cwd", "detail": "cwd must be an absolute path"})
        session_id = f"sess_{uuid.uuid4().hex[:12]}"
        self.sessions[session_id] = params.cwd
        return v1.NewSessionResponse(session_id=session_id)

    async def _say(self, session_id: str, text: str) -> None:
        for word in text.split(" "):
            await self.client.session_update(
                v1.SessionNotification(
                    session_id=session_id,
                    update=v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=word + " ")),
                )
            )
            await trio.lowlevel.checkpoint()

    async def _update(self, session_id: str, update: v1.SessionUpdate) -> None:
        await self.client.session_update(v1.SessionNotification(session_id=session_id, update=update))

    async def _plan(self, session_id: str, done: int) -> None:
        steps = ["Read notes.txt", "Write summary.txt"]
        entries = [
            v1.PlanEntry(
                content=step,
                priority="high",
                status="completed" if i < done else ("in_progress" if i == done else "pending"),
            )
            for i, step in enumerate(steps)
        ]
        await self._update(session_id, v1.PlanSessionUpdate(entries=entries))

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        session_id = params.session_id
        cwd = self.sessions.get(session_id)
        if cwd is None:
            raise RequestError.resource_not_found(session_id)
        await self._say(session_id, "Let me read your notes and write a summary.")
        await self._plan(session_id, 0)

        notes = os.path.join(cwd, "notes.txt")
        read_call = "call_read"
        await self._update(
            session_id,
            v1.ToolCallSessionUpdate(
                tool_call_id=read_call,
                title="Read notes.txt",
                kind="read",
                status="pending",
                locations=[v1.ToolCallLocation(path=notes)],
            ),
        )
        decision = await self.client.session_request_permission(
            v1.RequestPermissionRequest(
                session_id=session_id,
                tool_call=v1.ToolCallUpdate(tool_call_id=read_call, title="Read notes.txt", kind="read"),
                options=[
                    v1.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                    v1.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
                ],
            )
        )
        outcome = decision.outcome
        if not isinstance(outcome, v1.SelectedRequestPermissionOutcome) or outcome.option_id != "allow":
            await self._update(session_id, v1.ToolCallUpdateSessionUpdate(tool_call_id=read_call, status="failed"))
            await self._say(session_id, "Permission denied, so I stopped here.")
            return v1.PromptResponse(stop_reason="end_turn")

        await self._update(session_id, v1.ToolCallUpdateSessionUpdate(tool_call_id=read_call, status="in_progress"))
        try:
            read = await self.client.fs_read_text_file(v1.ReadTextFileRequest(session_id=session_id, path=notes))
            text = read.content
        except RequestError as exc:
            await self._update(session_id, v1.ToolCallUpdateSessionUpdate(tool_call_id=read_call, status="failed"))
            await self._say(session_id, f"I could not read notes.txt: {exc.message}.")
            return v1.PromptResponse(stop_reason="end_turn")
        lines = [line for line in text.splitlines() if line.strip()]
        await self._update(
            session_id,
            v1.ToolCallUpdateSessionUpdate(
                tool_call_id=read_call,
                status="completed",
                content=[v1.ContentToolCallContent(content=v1.TextContentBlock(text=f"{len(lines)} non-empty lines"))],
            ),
        )
        await self._plan(session_id, 1)

        summary_path = os.path.join(cwd, "summary.txt")
        summary = f"notes.txt has {len(lines)} non-empty lines; the first is: {lines[0] if lines else '(none)'}\n"
        write_call = "call_write"
        await self._update(
            session_id,
            v1.ToolCallSessionUpdate(
                tool_call_id=write_call,
                title="Write summary.txt",
                kind="edit",
                status="in_progress",
                locations=[v1.ToolCallLocation(path=summary_path)],
            ),
        )
        await self.client.fs_write_text_file(
            v1.WriteTextFileRequest(session_id=session_id, path=summary_path, content=summary)
        )
        await self._update(
            session_id,
            v1.ToolCallUpdateSessionUpdate(
                tool_call_id=write_call,
                status="completed",
                content=[v1.DiffToolCallContent(path=summary_path, old_text=None, new_text=summary)],
            ),
        )
        await self._plan(session_id, 2)
        await self._say(session_id, f"Done: summary.txt says {summary.strip()!r}")
        return v1.PromptResponse(stop_reason="end_turn")


def main() -> None:
    """Serve the demo agent on this process's stdio until the client closes it."""
    run_agent_stdio(DemoAgent)


if __name__ == "__main__":
    main()

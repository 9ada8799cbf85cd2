"""The agent of README.md "Write an agent" (``my_agent.py``), verbatim but for this docstring: the
acp-trio agent of the start-up scenario (spawn → initialize answered, RSS right after), as a user
would write it following the README.  Not used for the throughput scenarios (``trio_agent.py``).
"""

import os

from acp_schema import v1
from acp_trio import AgentSideConnection, RequestError, run_agent_stdio
from acp_trio import builders as b


class NotesAgent:
    agent_info = v1.Implementation(name="notes-agent", title="Notes", version="0.1.0")  # what clients show

    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn
        self.client = v1.ClientPeer(conn)  # typed calls to the client

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="sess_1")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        sid = params.session_id
        path = os.path.join(self.conn.sessions[sid].cwd, "notes.txt")  # the cwd sent with session/new
        read = b.ToolCallReporter(self.client, sid, "Read notes.txt", kind="read", locations=[path])
        if not (self.conn.client_capabilities.get("fs") or {}).get("readTextFile"):  # what it advertised
            await read.start(status="failed", content=["this client shares no files (fs.readTextFile)"])
            return v1.PromptResponse(stop_reason="end_turn")
        await read.start()  # a tool_call update, status pending
        option = await read.request_permission()  # allow/reject once/always; None when cancelled
        if option is None or option.kind.startswith("reject"):
            await read.fail()
            return v1.PromptResponse(stop_reason="end_turn")
        try:
            notes = await self.client.fs_read_text_file(v1.ReadTextFileRequest(session_id=sid, path=path))
        except RequestError as exc:  # the client's JSON-RPC error: -32002 when there is no such file
            await read.fail([f"could not read notes.txt: {exc.message}"])
            return v1.PromptResponse(stop_reason="end_turn")
        await read.complete([f"{len(notes.content.splitlines())} line(s)"])
        first = (notes.content.splitlines() or ["(nothing)"])[0]
        await self.client.session_update(b.notification(sid, b.agent_message(f"notes.txt starts with: {first}")))
        return v1.PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    run_agent_stdio(NotesAgent)  # serve on stdin/stdout until the client closes stdin

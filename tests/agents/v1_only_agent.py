"""The README's first agent at its smallest: ``session/new`` and ``session/prompt`` in protocol 1,
served by ``acp_trio.run_agent_stdio`` (which answers ``initialize`` with protocol version 1 only)."""

from typing import Any

import acp_trio
from acp_schema import v1


class NotesAgent:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params: v1.PromptRequest) -> Any:
        return v1.PromptResponse(stop_reason="end_turn")


acp_trio.run_agent_stdio(NotesAgent)

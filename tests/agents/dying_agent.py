"""An agent whose prompt handler streams one chunk and then kills the process (exit status 3)."""

import os

from _common import EchoAgent

import acp_trio
from acp_schema import v1


class DyingAgent(EchoAgent):
    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        update = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text="last words"))
        await self.conn.client.session_update(v1.SessionNotification(session_id=params.session_id, update=update))
        os._exit(3)


acp_trio.run_agent_stdio(DyingAgent)

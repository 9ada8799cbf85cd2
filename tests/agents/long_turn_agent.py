"""An agent whose prompt turn streams a chunk every 10 ms for ``argv[1]`` seconds (default 15).

Protocol version 1, or 2 with ``--v2`` (the turn then runs after the receipt, via ``start_turn``).
It does nothing special about its input ending: the runtime must stop the turn and return.
"""

import sys

import trio
from _common import EchoAgent

import acp_trio
from acp_schema import v1, v2

SECONDS = float(next((a for a in sys.argv[1:] if not a.startswith("--")), 15))


class LongTurnAgent(EchoAgent):
    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        deadline = trio.current_time() + SECONDS
        n = 0
        while trio.current_time() < deadline:
            n += 1
            update = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=f"chunk {n}"))
            await self.conn.client.session_update(v1.SessionNotification(session_id=params.session_id, update=update))
            await trio.sleep(0.01)
        return v1.PromptResponse(stop_reason="end_turn")


class LongTurnAgentV2:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        session_id = params.session_id

        async def turn() -> str:
            deadline = trio.current_time() + SECONDS
            n = 0
            while trio.current_time() < deadline:
                n += 1
                await self.conn.ext_notification("_test/tick", {"n": n})
                await trio.sleep(0.01)
            return "end_turn"

        self.conn.start_turn(session_id, turn)
        return v2.PromptResponse(message_id="m1")


if "--v2" in sys.argv:
    acp_trio.run_agent_stdio({v2: LongTurnAgentV2})
else:
    acp_trio.run_agent_stdio(LongTurnAgent)

"""A protocol version 2 agent whose prompt turn asks the client a permission, then writes a line to
stderr and ends the process (exit status 3) while the turn is still running."""

import os
import sys

import acp_trio
from acp_schema import v2


class CrashingAgentV2:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        async def turn() -> str:
            # a round trip: the client has the receipt by the time the answer comes back
            option = v2.PermissionOption(option_id="go", name="Go", kind="allow_once")
            await self.conn.client.session_request_permission(
                v2.RequestPermissionRequest(session_id=params.session_id, title="Go on?", options=[option])
            )
            sys.stderr.write("fatal: the model endpoint refused the key\n")
            sys.stderr.flush()
            os._exit(3)

        self.conn.start_turn(params.session_id, turn)
        return v2.PromptResponse(message_id="m1")


acp_trio.run_agent_stdio({v2: CrashingAgentV2})

"""An agent with a bug: its prompt turn raises ``RuntimeError("the notes file is gone")``.

``buggy_agent.py`` serves protocol version 1 (``session_prompt`` raises), ``buggy_agent.py 2``
version 2 (the turn started with ``start_turn`` raises); it names itself with ``agent_info``.
"""

import sys

import acp_trio
from acp_schema import v1, v2


class BuggyAgent:
    agent_info = v1.Implementation(name="buggy-agent", title="Buggy notes", version="0.1.0")

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        raise RuntimeError("the notes file is gone")


class BuggyAgentV2:
    agent_info = BuggyAgent.agent_info  # the v1 Implementation serves v2 as well

    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        async def turn() -> str:
            raise RuntimeError("the notes file is gone")

        self.conn.start_turn(params.session_id, turn)
        return v2.PromptResponse(message_id="m1")


acp_trio.run_agent_stdio({v2: BuggyAgentV2} if sys.argv[1:] == ["2"] else BuggyAgent)

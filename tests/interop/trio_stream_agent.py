"""A native acp-trio agent (``acp_trio.neutral``) that streams like the example pydantic-ai agent's model:
the yardstick of ``tests/test_pydantic_ai_interop.py``'s cancel test.

``python tests/interop/trio_stream_agent.py`` serves v1 and v2 on stdio.  A prompt ``stream N slow``
streams N chunks ``"w<i> "`` 10 ms apart (``stream N``: at once); anything else gets ``hello``.
``session/cancel`` cancels the turn as trio does (the layer answers ``cancelled``).
"""

from __future__ import annotations

import re

import trio

from acp_trio import neutral as n
from acp_trio import run_agent_stdio

SLOW_CHUNK_SECONDS = 0.01  # as examples/pydantic_ai_agent/agent.py's
_STREAM = re.compile(r"^\s*stream\s+(\d+)(\s+slow)?\s*$", re.IGNORECASE)


class StreamAgent(n.Agent):
    info = n.AgentInfo(name="trio-stream-agent", version="1")

    async def prompt(self, turn: n.Turn) -> n.StopReason:
        match = _STREAM.match(turn.text)
        if match is None:
            await turn.say("hello")
            return "end_turn"
        for i in range(int(match.group(1))):
            if match.group(2) and i:
                await trio.sleep(SLOW_CHUNK_SECONDS)
            await turn.say(f"w{i} ")
        return "end_turn"


if __name__ == "__main__":
    run_agent_stdio(StreamAgent())

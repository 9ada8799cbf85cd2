"""A plain echo agent written with the official Python SDK (``agent-client-protocol`` 0.12.1), in the
shape its README teaches: a class with ``initialize``, ``new_session``, ``prompt`` and ``cancel``,
served with ``acp.run_agent``.

The conformance runs (``tests/interop/conformance_real.py``, agent ``py-sdk``) check it: unlike
``py_agent.py``, which plays the interop tests' script (it reads and writes files through a client
that it knows offers them), it does only what any agent may do with any client: it streams the
prompt's text back word by word (20 ms apart, so a ``session/cancel`` lands mid-turn) and ends the
turn ``end_turn``, or ``cancelled`` once ``session/cancel`` arrived.  Run with the SDK's own
virtual environment: ``<venv>/bin/python py_echo_agent.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from acp import PROTOCOL_VERSION, run_agent, update_agent_message_text
from acp.schema import AgentCapabilities, Implementation, InitializeResponse, NewSessionResponse, PromptResponse


class EchoAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.sessions = 0
        self.cancelled: dict[str, bool] = {}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=False),
            auth_methods=[],
            agent_info=Implementation(name="py-sdk-echo-agent", version="0.12.1"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        self.sessions += 1
        return NewSessionResponse(session_id=f"py-echo-{self.sessions}")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled[session_id] = True

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        self.cancelled[session_id] = False
        text = " ".join(block.text for block in prompt if getattr(block, "type", None) == "text")
        for word in f"You said: {text}".split(" "):
            if self.cancelled[session_id]:
                return PromptResponse(stop_reason="cancelled")
            await self.conn.session_update(session_id=session_id, update=update_agent_message_text(word + " "))
            await asyncio.sleep(0.02)
        return PromptResponse(stop_reason="cancelled" if self.cancelled[session_id] else "end_turn")


if __name__ == "__main__":
    asyncio.run(run_agent(EchoAgent()))

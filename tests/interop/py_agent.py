"""An ACP agent written with the official Python SDK (``agent-client-protocol`` 0.12.1, import ``acp``).

``tests/test_interop.py`` runs it with the SDK's own virtual environment (``<venv>/bin/python
tests/interop/py_agent.py``) and drives it with acp-trio's client.  It plays the same script as
``trio_agent.py``:

- ``session/prompt`` ``wait``: a chunk ``waiting``, a permission request for tool call
  ``interop-wait``, then it waits for ``session/cancel``, reports the permission outcome in a chunk
  and answers stop reason ``cancelled``;
- any other prompt: chunks ``Hello``, `` from``, `` the Python SDK``, a permission request for tool
  call ``interop-write``; on ``allow`` it reads ``<cwd>/input.txt`` and writes ``<cwd>/output.txt``
  (``"echo: " + input``) through the client, reporting each step in a chunk; stop reason ``end_turn``;
- the extension request ``_interop/echo`` answers ``{"echo": params}``.  The SDK hands every
  ``_``-prefixed request to ``ext_method`` (with the underscore stripped), so leaving
  ``_interop/missing`` unimplemented means raising -32601 here, which is what the SDK itself does
  for an agent without ``ext_method``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, run_agent, update_agent_message_text
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallUpdate,
)

OPTIONS = [
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]


class InteropAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.cwd: dict[str, str] = {}
        self.cancelled: dict[str, asyncio.Event] = {}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=False),
            auth_methods=[],
            agent_info=Implementation(name="py-sdk-interop-agent", version="0.12.1"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        session_id = f"py-session-{len(self.cwd) + 1}"
        self.cwd[session_id] = cwd
        return NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        event = self.cancelled.get(session_id)
        if event is not None:
            event.set()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "interop/echo":
            return {"echo": params}
        raise RequestError.method_not_found(f"_{method}")

    async def _say(self, session_id: str, text: str) -> None:
        await self.conn.session_update(session_id=session_id, update=update_agent_message_text(text))

    async def _ask(self, session_id: str, tool_call_id: str) -> str:
        answer = await self.conn.request_permission(
            session_id=session_id,
            tool_call=ToolCallUpdate(tool_call_id=tool_call_id, title="Write output.txt", kind="edit"),
            options=OPTIONS,
        )
        outcome = answer.outcome
        return outcome.option_id if isinstance(outcome, AllowedOutcome) else outcome.outcome

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        cwd = self.cwd[session_id]
        text = "".join(block.text for block in prompt if getattr(block, "type", None) == "text")
        if text == "wait":
            cancelled = self.cancelled[session_id] = asyncio.Event()
            await self._say(session_id, "waiting")
            permission = asyncio.create_task(self._ask(session_id, "interop-wait"))
            await cancelled.wait()
            await self._say(session_id, f"permission: {await permission}")
            return PromptResponse(stop_reason="cancelled")
        for chunk in ("Hello", " from", " the Python SDK"):
            await self._say(session_id, chunk)
        choice = await self._ask(session_id, "interop-write")
        await self._say(session_id, f"permission: {choice}")
        if choice != "allow":
            return PromptResponse(stop_reason="end_turn")
        read = await self.conn.read_text_file(session_id=session_id, path=os.path.join(cwd, "input.txt"))
        await self._say(session_id, f"read: {read.content}")
        await self.conn.write_text_file(
            session_id=session_id, path=os.path.join(cwd, "output.txt"), content=f"echo: {read.content}"
        )
        await self._say(session_id, "wrote output.txt")
        return PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    asyncio.run(run_agent(InteropAgent()))

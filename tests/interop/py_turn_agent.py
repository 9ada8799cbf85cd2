"""A version-1-only agent written with the official Python SDK (``agent-client-protocol`` 0.12.1,
import ``acp``) that plays one full turn: text, a plan, a tool call with permission, files, cancel.

``tests/test_interop_adapt.py`` runs it behind ``python -m acp_trio.adapt --speak 2`` (the SDK
speaks protocol version 1 only) and drives it with version-2 clients.  Run it with the SDK's own
virtual environment: ``<venv>/bin/python tests/interop/py_turn_agent.py``.  The script:

- ``session/prompt`` ``hello`` (any prompt but ``wait``): chunks ``Hello``, `` from``, `` the
  Python SDK`` (one message); a ``plan`` (``Ask to write output.txt`` in progress, ``Write
  output.txt`` pending); a ``tool_call`` ``turn-write`` (``Write output.txt``, kind ``edit``,
  pending, with ``_meta`` ``{"interop/mark": "py"}``); ``session/request_permission`` for it; on
  ``allow`` it reads ``<cwd>/input.txt`` (none: ``""``) and writes ``<cwd>/output.txt`` (``"echo:
  " + input``) through the client's ``fs/*`` (which the adapter answers in the session's
  directory), then the tool call ``completed`` with a text content ``wrote output.txt`` (else
  ``failed``); the plan with both entries ``completed``; a chunk ``permission: <choice>`` (``...
  before session/cancel`` when the client answered ``cancelled`` before it sent ``session/cancel``,
  out of v1's order); stop reason ``end_turn`` (``cancelled`` after a ``session/cancel``);
- ``wait``: a chunk ``waiting``, a ``tool_call`` ``turn-wait`` (pending) and a permission request
  for it; it waits for ``session/cancel``, says ``permission: <outcome>`` (the client MUST answer
  ``cancelled``), sets the tool call ``failed`` and answers stop reason ``cancelled``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    RequestError,
    plan_entry,
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_plan,
    update_tool_call,
)
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


class TurnAgent:
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
            agent_info=Implementation(name="py-sdk-turn-agent", version="0.12.1"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        session_id = f"py-turn-{len(self.cwd) + 1}"
        self.cwd[session_id] = cwd
        return NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        event = self.cancelled.get(session_id)
        if event is not None:
            event.set()

    async def _send(self, session_id: str, update: Any) -> None:
        await self.conn.session_update(session_id=session_id, update=update)

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
            await self._send(session_id, update_agent_message_text("waiting"))
            await self._send(
                session_id, start_tool_call("turn-wait", "Write output.txt", kind="edit", status="pending")
            )
            permission = asyncio.create_task(self._ask(session_id, "turn-wait"))
            await cancelled.wait()
            await self._send(session_id, update_agent_message_text(f"permission: {await permission}"))
            await self._send(session_id, update_tool_call("turn-wait", status="failed"))
            return PromptResponse(stop_reason="cancelled")
        cancelled = self.cancelled[session_id] = asyncio.Event()
        for chunk in ("Hello", " from", " the Python SDK"):
            await self._send(session_id, update_agent_message_text(chunk))
        ask, write = "Ask to write output.txt", "Write output.txt"
        await self._send(
            session_id, update_plan([plan_entry(ask, priority="high", status="in_progress"), plan_entry(write)])
        )
        start = start_tool_call("turn-write", "Write output.txt", kind="edit", status="pending")
        start.field_meta = {"interop/mark": "py"}
        await self._send(session_id, start)
        choice = await self._ask(session_id, "turn-write")
        # v1 (prompt-turn.mdx § Cancellation): a client sends session/cancel, then answers its
        # pending requests "cancelled"; an answer that comes first is told in the chunk below
        early = " before session/cancel" if choice == "cancelled" and not cancelled.is_set() else ""
        if choice == "allow":
            try:
                read = (
                    await self.conn.read_text_file(session_id=session_id, path=os.path.join(cwd, "input.txt"))
                ).content
            except RequestError:  # no input.txt (the checker's sessions): echo nothing
                read = ""
            await self.conn.write_text_file(
                session_id=session_id, path=os.path.join(cwd, "output.txt"), content=f"echo: {read}"
            )
            done = update_tool_call(
                "turn-write", status="completed", content=[tool_content(text_block("wrote output.txt"))]
            )
            await self._send(session_id, done)
        else:
            await self._send(session_id, update_tool_call("turn-write", status="failed"))
        await self._send(
            session_id,
            update_plan([plan_entry(ask, priority="high", status="completed"), plan_entry(write, status="completed")]),
        )
        await self._send(session_id, update_agent_message_text(f"permission: {choice}{early}"))
        return PromptResponse(stop_reason="cancelled" if cancelled.is_set() else "end_turn")


if __name__ == "__main__":
    asyncio.run(run_agent(TurnAgent()))

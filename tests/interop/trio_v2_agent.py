"""The acp-trio v2 agent that the TypeScript SDK's v2 client drives (``python tests/interop/trio_v2_agent.py``).

It serves on its own stdio with :func:`acp_trio.run_agent_stdio`, protocol versions 1 and 2 side
by side (``{v1: InteropAgent, v2: InteropV2Agent}``; the v1 agent is the one of
``trio_agent.py``), and plays the agent half of the v2 script of ``tests/test_interop_v2.py``
(``docs/protocol/v2/prompt-lifecycle.mdx``), as ``ts_v2_agent.mjs`` does:

- ``initialize``: info ``acp-trio-v2-interop-agent``, capabilities ``{"session": {}}``;
- ``session/prompt`` sends ``user_message`` (the prompt) and answers the receipt with the same
  ``messageId``; :meth:`~acp_trio.AgentSideConnection.start_turn` runs the turn: ``state_update``
  ``running`` (the runtime), then

  - for ``wait``: a chunk ``waiting``, ``tool_call_update`` ``interop-wait`` (``pending``),
    ``state_update`` ``requires_action`` and ``session/request_permission`` for that tool call;
    the client's ``session/cancel`` cancels the turn and the request (the runtime sends
    ``$/cancel_request``); shielded, the agent reports ``permission: cancelled`` in a chunk and
    the tool call ``cancelled``; the runtime then sends ``idle`` with stop reason ``cancelled``;
  - for anything else: chunks ``Hello``, `` from``, `` acp-trio`` (one message), the tool call
    ``interop-write`` (``pending``), ``requires_action``, a permission request, ``running``, the
    tool call ``completed`` on ``allow`` (``failed`` otherwise), a chunk ``permission: <choice>``;
    the runtime sends ``idle`` with stop reason ``end_turn``;

- the extension request ``_interop/echo`` answers ``{"echo": <params>}``; ``_interop/missing`` is
  not registered, so the runtime answers -32601.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import trio
from trio_agent import InteropAgent  # this script's directory is sys.path[0]

from acp_schema import v1, v2
from acp_trio import AgentSideConnection, RequestError, run_agent_stdio

AGENT_INFO = v2.Implementation(name="acp-trio-v2-interop-agent", version="1")
OPTIONS = [
    v2.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    v2.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]


class InteropV2Agent:
    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn
        self.client = v2.ClientPeer(conn)
        self.sessions: set[str] = set()
        self.ids = itertools.count(1)
        conn.on_ext_request("_interop/echo", self.echo)

    async def echo(self, params: Any) -> Any:
        return {"echo": params}

    async def initialize(self, params: v2.InitializeRequest) -> v2.InitializeResponse:
        return v2.InitializeResponse(
            protocol_version=2,
            info=AGENT_INFO,
            capabilities=v2.AgentCapabilities(session=v2.SessionCapabilities()),
            auth_methods=[],
        )

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        session_id = f"sess_{uuid.uuid4().hex[:12]}"
        self.sessions.add(session_id)
        return v2.NewSessionResponse(session_id=session_id)

    async def _update(self, session_id: str, update: Any) -> None:
        await self.client.session_update(v2.UpdateSessionNotification(session_id=session_id, update=update))

    async def _state(self, session_id: str, state: str) -> None:
        update: Any = (
            v2.RunningStateUpdateSessionUpdate() if state == "running" else v2.RequiresActionStateUpdateSessionUpdate()
        )
        await self._update(session_id, update)

    async def _tool(self, session_id: str, tool_call_id: str, **fields: Any) -> None:
        await self._update(session_id, v2.ToolCallUpdateSessionUpdate(tool_call_id=tool_call_id, **fields))

    async def _ask(self, session_id: str, tool_call_id: str) -> str:
        answer = await self.client.session_request_permission(
            v2.RequestPermissionRequest(
                session_id=session_id,
                title="Write output.txt?",
                subject=v2.ToolCallRequestPermissionSubject(tool_call=v2.ToolCallUpdate(tool_call_id=tool_call_id)),
                options=OPTIONS,
            )
        )
        outcome = answer.outcome
        if isinstance(outcome, v2.SelectedRequestPermissionOutcome):
            return str(outcome.option_id)
        return "cancelled"

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        session_id = params.session_id
        if session_id not in self.sessions:
            raise RequestError.resource_not_found(session_id)
        message_id = f"trio-user-{next(self.ids)}"
        await self._update(session_id, v2.UserMessageSessionUpdate(message_id=message_id, content=params.prompt))
        text = "".join(block.text for block in params.prompt if isinstance(block, v2.TextContentBlock))
        agent_message_id = f"trio-msg-{next(self.ids)}"

        async def say(text: str) -> None:
            chunk = v2.AgentMessageChunkSessionUpdate(
                message_id=agent_message_id, content=v2.TextContentBlock(text=text)
            )
            await self._update(session_id, chunk)

        async def wait_turn() -> str:
            await say("waiting")
            await self._tool(session_id, "interop-wait", title="Write output.txt", kind="edit", status="pending")
            await self._state(session_id, "requires_action")
            choice = "cancelled"
            try:
                choice = await self._ask(session_id, "interop-wait")
            finally:
                # session/cancel cancelled the turn (and sent $/cancel_request for the request):
                # report it before the runtime's idle "cancelled" (prompt-lifecycle.mdx "Cancellation")
                with trio.CancelScope(shield=True):
                    await say(f"permission: {choice}")
                    await self._tool(session_id, "interop-wait", status="cancelled")
            await trio.sleep_forever()  # only session/cancel ends this turn

        async def turn() -> str:
            for chunk in ("Hello", " from", " acp-trio"):
                await say(chunk)
            await self._tool(session_id, "interop-write", title="Write output.txt", kind="edit", status="pending")
            await self._state(session_id, "requires_action")
            choice = await self._ask(session_id, "interop-write")
            await self._state(session_id, "running")
            await self._tool(session_id, "interop-write", status="completed" if choice == "allow" else "failed")
            await say(f"permission: {choice}")
            return "end_turn"

        self.conn.start_turn(session_id, wait_turn if text == "wait" else turn)
        return v2.PromptResponse(message_id=message_id)


if __name__ == "__main__":
    run_agent_stdio({v1: InteropAgent, v2: InteropV2Agent})

"""The acp-trio bench agent in protocol version 2: the same ``stream`` and ``permission`` commands
as ``trio_agent.py`` (see ``common.py``), each a v2 turn (``user_message``, the receipt, then
:meth:`~acp_trio.AgentSideConnection.start_turn`: ``running``, the work, ``idle``).

For the adapter's benchmark (``../bench_adapt.py``): a v1 client drives it through ``python -m
acp_trio.adapt --speak 1``.  v2 has no client file system, so ``read`` is not served (-32602).
"""

from __future__ import annotations

import itertools
from typing import Any

from common import PERMISSION_OPTIONS, SESSION_ID, chunk_text, parse_command, tool_call_id, tool_title

from acp_schema import v2
from acp_trio import AgentSideConnection, RequestError, run_agent_stdio

OPTIONS = [v2.PermissionOption(option_id=o["optionId"], name=o["name"], kind=o["kind"]) for o in PERMISSION_OPTIONS]
INFO = v2.Implementation(name="acp-trio-bench-v2", version="1")


class BenchV2Agent:
    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn
        self.client = v2.ClientPeer(conn)
        self.ids = itertools.count()

    async def initialize(self, params: v2.InitializeRequest) -> v2.InitializeResponse:
        capabilities = v2.AgentCapabilities(session=v2.SessionCapabilities())
        return v2.InitializeResponse(protocol_version=2, info=INFO, capabilities=capabilities, auth_methods=[])

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id=SESSION_ID)

    async def _update(self, update: Any) -> None:
        await self.client.session_update(v2.UpdateSessionNotification(session_id=SESSION_ID, update=update))

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        block = params.prompt[0]
        assert isinstance(block, v2.TextContentBlock)
        kind, n, _width = parse_command(block.text)
        if kind not in ("stream", "permission"):
            raise RequestError.invalid_params({"command": block.text, "why": "v2 serves stream and permission"})
        user = f"user-{next(self.ids)}"
        await self._update(v2.UserMessageSessionUpdate(message_id=user, content=params.prompt))
        message = f"msg-{next(self.ids)}"

        async def stream() -> str:
            for i in range(n):
                content = v2.TextContentBlock(text=chunk_text(i))
                await self._update(v2.AgentMessageChunkSessionUpdate(message_id=message, content=content))
            return "end_turn"

        async def permission() -> str:
            ask = self.client.session_request_permission
            for i in range(n):
                call = v2.ToolCallUpdate(tool_call_id=tool_call_id(i), title=tool_title(i), kind="edit")
                subject = v2.ToolCallRequestPermissionSubject(tool_call=call)
                answer = await ask(
                    v2.RequestPermissionRequest(
                        session_id=SESSION_ID, title=tool_title(i), subject=subject, options=OPTIONS
                    )
                )
                outcome = answer.outcome
                if not isinstance(outcome, v2.SelectedRequestPermissionOutcome) or outcome.option_id != "allow":
                    raise AssertionError(f"permission {i}: unexpected outcome {outcome!r}")
            return "end_turn"

        self.conn.start_turn(SESSION_ID, stream if kind == "stream" else permission)
        return v2.PromptResponse(message_id=user)


if __name__ == "__main__":
    run_agent_stdio({v2: BenchV2Agent})

"""The official-SDK bench agent (``agent-client-protocol``, import ``acp``): the same commands, on asyncio.

Also the minimal official agent of the start-up scenario: importing the SDK and answering ``initialize``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from acp import PROTOCOL_VERSION, run_agent
from acp.helpers import start_tool_call, update_agent_message_text, update_tool_call
from acp.schema import (
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    TextContentBlock,
    ToolCallUpdate,
)
from common import (
    FILE_CONTENT,
    PERMISSION_OPTIONS,
    SESSION_ID,
    TOOL_EVERY,
    chunk_text,
    file_path,
    parse_command,
    tool_call_id,
    tool_title,
)

OPTIONS = [PermissionOption(option_id=o["optionId"], name=o["name"], kind=o["kind"]) for o in PERMISSION_OPTIONS]


class BenchAgent:
    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(protocol_version=PROTOCOL_VERSION)

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id=SESSION_ID)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        block = prompt[0]
        assert isinstance(block, TextContentBlock)
        kind, n, width = parse_command(block.text)
        if kind in ("stream", "mixed"):
            await self._stream(session_id, n, kind == "mixed")
        elif kind == "permission":
            await self._permission(session_id, n)
        else:
            await self._read(session_id, n, width)
        return PromptResponse(stop_reason="end_turn")

    async def _stream(self, session_id: str, n: int, mixed: bool) -> None:
        update = self.conn.session_update
        for i in range(n):
            await update(session_id=session_id, update=update_agent_message_text(chunk_text(i)))
            if mixed and i % TOOL_EVERY == TOOL_EVERY - 1:
                call = start_tool_call(tool_call_id(i), tool_title(i), kind="read", status="pending")
                await update(session_id=session_id, update=call)
                await update(session_id=session_id, update=update_tool_call(tool_call_id(i), status="completed"))

    async def _permission(self, session_id: str, n: int) -> None:
        ask = self.conn.request_permission
        for i in range(n):
            tool_call = ToolCallUpdate(tool_call_id=tool_call_id(i), title=tool_title(i), kind="edit")
            response = await ask(session_id=session_id, tool_call=tool_call, options=OPTIONS)
            if response.outcome.outcome != "selected" or response.outcome.option_id != "allow":
                raise AssertionError(f"permission {i}: unexpected outcome {response.outcome!r}")

    async def _read(self, session_id: str, n: int, width: int) -> None:
        read = self.conn.read_text_file

        async def worker(indices: Any) -> None:
            for i in indices:
                response = await read(session_id=session_id, path=file_path(i))
                if response.content != FILE_CONTENT:
                    raise AssertionError(f"read {i}: unexpected content {response.content!r}")

        indices = iter(range(n))  # shared by the workers: `width` requests in flight
        await asyncio.gather(*(worker(indices) for _ in range(max(1, width))))


if __name__ == "__main__":
    asyncio.run(run_agent(BenchAgent()))

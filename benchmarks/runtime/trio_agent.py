"""The acp-trio bench agent: serves the commands of ``common.py`` on its own stdio."""

from __future__ import annotations

from typing import Any

import trio
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

from acp_schema import v1
from acp_trio import run_agent_stdio

OPTIONS = [v1.PermissionOption(option_id=o["optionId"], name=o["name"], kind=o["kind"]) for o in PERMISSION_OPTIONS]


class BenchAgent:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.client = v1.ClientPeer(conn)

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id=SESSION_ID)

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        block = params.prompt[0]
        assert isinstance(block, v1.TextContentBlock)
        kind, n, width = parse_command(block.text)
        tasks = block.text.split()[3:] == ["tasks"]
        if kind in ("stream", "mixed"):
            await self._stream(params.session_id, n, kind == "mixed")
        elif kind == "permission":
            await self._permission(params.session_id, n)
        else:
            await self._read(params.session_id, n, width, tasks)
        return v1.PromptResponse(stop_reason="end_turn")

    async def _stream(self, session_id: str, n: int, mixed: bool) -> None:
        update = self.client.session_update
        for i in range(n):
            chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=chunk_text(i)))
            await update(v1.SessionNotification(session_id=session_id, update=chunk))
            if mixed and i % TOOL_EVERY == TOOL_EVERY - 1:
                call = v1.ToolCallSessionUpdate(
                    tool_call_id=tool_call_id(i), title=tool_title(i), kind="read", status="pending"
                )
                await update(v1.SessionNotification(session_id=session_id, update=call))
                done = v1.ToolCallUpdateSessionUpdate(tool_call_id=tool_call_id(i), status="completed")
                await update(v1.SessionNotification(session_id=session_id, update=done))

    async def _permission(self, session_id: str, n: int) -> None:
        ask = self.client.session_request_permission
        for i in range(n):
            tool_call = v1.ToolCallUpdate(tool_call_id=tool_call_id(i), title=tool_title(i), kind="edit")
            request = v1.RequestPermissionRequest(session_id=session_id, tool_call=tool_call, options=OPTIONS)
            response = await ask(request)
            outcome = response.outcome
            if not isinstance(outcome, v1.SelectedRequestPermissionOutcome) or outcome.option_id != "allow":
                raise AssertionError(f"permission {i}: unexpected outcome {outcome!r}")

    async def _read(self, session_id: str, n: int, width: int, tasks: bool) -> None:
        if width > 1 and not tasks:  # many in flight, as README.md teaches: send_requests
            requests = [v1.ReadTextFileRequest(session_id=session_id, path=file_path(i)) for i in range(n)]
            for i, response in enumerate(await self.conn.send_requests("fs/read_text_file", requests, limit=width)):
                if response.content != FILE_CONTENT:
                    raise AssertionError(f"read {i}: unexpected content {response.content!r}")
            return
        read = self.client.fs_read_text_file

        async def worker(indices: Any) -> None:
            for i in indices:
                response = await read(v1.ReadTextFileRequest(session_id=session_id, path=file_path(i)))
                if response.content != FILE_CONTENT:
                    raise AssertionError(f"read {i}: unexpected content {response.content!r}")

        indices = iter(range(n))  # shared by the workers: `width` requests in flight
        if width <= 1:
            await worker(indices)
            return
        async with trio.open_nursery() as nursery:
            for _ in range(width):
                nursery.start_soon(worker, indices)


if __name__ == "__main__":
    run_agent_stdio(BenchAgent)

"""The acp-trio bench agent: serves the commands of ``common.py`` on its own stdio."""

from __future__ import annotations

from typing import Any

import trio
from common import FILE_CONTENT, SESSION_ID, chunk_text, file_path, parse_command

from acp_schema import v1
from acp_trio import run_agent_stdio


class BenchAgent:
    def __init__(self, conn: Any) -> None:
        self.client = v1.ClientPeer(conn)

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id=SESSION_ID)

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        block = params.prompt[0]
        assert isinstance(block, v1.TextContentBlock)
        kind, n, width = parse_command(block.text)
        if kind == "stream":
            await self._stream(params.session_id, n)
        else:
            await self._read(params.session_id, n, width)
        return v1.PromptResponse(stop_reason="end_turn")

    async def _stream(self, session_id: str, n: int) -> None:
        update = self.client.session_update
        for i in range(n):
            chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=chunk_text(i)))
            await update(v1.SessionNotification(session_id=session_id, update=chunk))

    async def _read(self, session_id: str, n: int, width: int) -> None:
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

"""The official-SDK bench agent (``agent-client-protocol``, import ``acp``): the same commands, on asyncio.

Also the minimal official agent of the start-up scenario: importing the SDK and answering ``initialize``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from acp import PROTOCOL_VERSION, run_agent
from acp.helpers import update_agent_message_text
from acp.schema import InitializeResponse, NewSessionResponse, PromptResponse, TextContentBlock
from common import FILE_CONTENT, SESSION_ID, chunk_text, file_path, parse_command


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
        if kind == "stream":
            await self._stream(session_id, n)
        else:
            await self._read(session_id, n, width)
        return PromptResponse(stop_reason="end_turn")

    async def _stream(self, session_id: str, n: int) -> None:
        update = self.conn.session_update
        for i in range(n):
            await update(session_id=session_id, update=update_agent_message_text(chunk_text(i)))

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

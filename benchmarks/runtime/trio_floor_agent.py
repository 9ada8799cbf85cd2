"""The floor under any trio agent: the bench commands served with nothing but trio and orjson.

No typed objects, no JSON-RPC layer, no ordering or cancellation: one reader task splits lines,
``orjson.loads`` each and hands a response to the task waiting for its id (a raw
``trio.lowlevel`` wake-up, the cheapest trio has); requests are written with ``os.write`` at once.
The ``read N C`` command runs C tasks in flight, as ``trio_agent.py`` does (and as README.md
teaches: a task per concurrent call).  It shows what trio itself costs per message on this machine:
what the ``read 2000 64`` bar can get at best from a trio program shaped like the bench agent.
Run by ``bench_runtime.py`` as the agent of the "trio floor" pair (with ``raw_client.py``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import orjson
import trio
from common import FILE_CONTENT, PERMISSION_OPTIONS, chunk_text, file_path, parse_command, tool_call_id, tool_title

NL = orjson.OPT_APPEND_NEWLINE


class FloorAgent:
    def __init__(self) -> None:
        self.out = sys.stdout.fileno()
        self.waiting: dict[int, list[Any]] = {}  # request id → [task, result]
        self.next_id = 0

    def write(self, message: dict[str, Any]) -> None:
        data = orjson.dumps(message, option=NL)
        while data:
            try:
                data = data[os.write(self.out, data) :]
            except BlockingIOError:
                pass

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        request_id = self.next_id
        slot: list[Any] = [trio.lowlevel.current_task(), None]
        self.waiting[request_id] = slot
        self.write({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.SUCCEEDED)
        return slot[1]

    async def prompt(self, request_id: Any, session_id: str, text: str) -> None:
        kind, n, width = parse_command(text)
        if kind in ("stream", "mixed"):
            for i in range(n):
                update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": chunk_text(i)}}
                self.write(
                    {
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": {"sessionId": session_id, "update": update},
                    }
                )
        elif kind == "permission":
            for i in range(n):
                tool = {"toolCallId": tool_call_id(i), "title": tool_title(i), "kind": "edit"}
                params = {"sessionId": session_id, "toolCall": tool, "options": list(PERMISSION_OPTIONS)}
                result = await self.call("session/request_permission", params)
                if result["outcome"].get("optionId") != "allow":
                    raise AssertionError(result)
        else:
            indices = iter(range(n))

            async def worker() -> None:
                for i in indices:
                    result = await self.call("fs/read_text_file", {"sessionId": session_id, "path": file_path(i)})
                    if result["content"] != FILE_CONTENT:
                        raise AssertionError(result)

            async with trio.open_nursery() as nursery:
                for _ in range(width):
                    nursery.start_soon(worker)
        self.write({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}})

    async def serve(self) -> None:
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        tail = b""
        async with trio.open_nursery() as nursery:
            while True:
                data = await stdin.receive_some(1 << 16)
                if not data:
                    break
                *lines, tail = (tail + data).split(b"\n")
                for line in lines:
                    message = orjson.loads(line)
                    method = message.get("method")
                    if method is None:
                        slot = self.waiting.pop(message["id"])
                        slot[1] = message["result"]
                        trio.lowlevel.reschedule(slot[0])
                    elif method == "initialize":
                        self.write({"jsonrpc": "2.0", "id": message["id"], "result": {"protocolVersion": 1}})
                    elif method == "session/new":
                        self.write({"jsonrpc": "2.0", "id": message["id"], "result": {"sessionId": "sess_floor"}})
                    elif method == "session/prompt":
                        params = message["params"]
                        text = params["prompt"][0]["text"]
                        nursery.start_soon(self.prompt, message["id"], params["sessionId"], text)
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(FloorAgent().serve)

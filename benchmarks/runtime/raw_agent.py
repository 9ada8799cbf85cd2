"""The raw baseline's agent: no framework, blocking stdio and orjson.

Answers ``initialize`` and ``session/new`` (so that a real client can drive it) and serves every
command of ``common.py``: for ``stream``/``mixed`` it writes one ``orjson.dumps`` line per update,
then the response line, and flushes; for ``read``/``permission`` it writes request lines (C in
flight, flushing after each batch) and reads, ``orjson.loads`` and checks each answer line.  Exits
at end of input.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson
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

NL = orjson.OPT_APPEND_NEWLINE
OPTIONS = list(PERMISSION_OPTIONS)


def main() -> None:
    out, lines = sys.stdout.buffer, iter(sys.stdin.buffer)
    next_id = 0

    def notify(session_id: str, update: dict[str, Any]) -> None:
        params = {"sessionId": session_id, "update": update}
        out.write(orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params}, option=NL))

    def ask(method: str, params: dict[str, Any]) -> None:
        nonlocal next_id
        next_id += 1
        out.write(orjson.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}, option=NL))

    def stream(session_id: str, n: int, mixed: bool) -> None:
        for i in range(n):
            text = {"type": "text", "text": chunk_text(i)}
            notify(session_id, {"sessionUpdate": "agent_message_chunk", "content": text})
            if mixed and i % TOOL_EVERY == TOOL_EVERY - 1:
                call_id = tool_call_id(i)
                call = {"toolCallId": call_id, "title": tool_title(i), "kind": "read", "status": "pending"}
                notify(session_id, {"sessionUpdate": "tool_call", **call})
                notify(session_id, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "completed"})

    def requests(session_id: str, kind: str, n: int, width: int) -> None:
        def send(i: int) -> None:
            if kind == "read":
                ask("fs/read_text_file", {"sessionId": session_id, "path": file_path(i)})
            else:
                tool_call = {"toolCallId": tool_call_id(i), "title": tool_title(i), "kind": "edit"}
                params = {"sessionId": session_id, "toolCall": tool_call, "options": OPTIONS}
                ask("session/request_permission", params)

        sent = min(n, max(1, width))
        for i in range(sent):
            send(i)
        out.flush()
        for i in range(n):
            result = orjson.loads(next(lines))["result"]
            ok = result["content"] == FILE_CONTENT if kind == "read" else result["outcome"]["optionId"] == "allow"
            if not ok:
                raise AssertionError(f"{kind} {i}: unexpected answer {result!r}")
            if sent < n:
                send(sent)
                sent += 1
                out.flush()

    for line in lines:
        request = orjson.loads(line)
        method, params = request["method"], request["params"]
        if method == "initialize":
            result: dict[str, Any] = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
        elif method == "session/new":
            result = {"sessionId": SESSION_ID}
        else:
            session_id = params["sessionId"]
            kind, n, width = parse_command(params["prompt"][0]["text"])
            if kind in ("stream", "mixed"):
                stream(session_id, n, kind == "mixed")
            else:
                requests(session_id, kind, n, width)
            result = {"stopReason": "end_turn"}
        out.write(orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}, option=NL))
        out.flush()


if __name__ == "__main__":
    main()

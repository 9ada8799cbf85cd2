"""The raw baseline's agent: no framework, blocking stdio and orjson.

For each request line on stdin (a ``session/prompt`` whose text is ``stream N``), it writes N
``session/update`` notification lines, each built with ``orjson.dumps``, then the response line,
and flushes.  Exits at end of input.
"""

from __future__ import annotations

import sys

import orjson
from common import chunk_text, parse_command

NL = orjson.OPT_APPEND_NEWLINE


def main() -> None:
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = orjson.loads(line)
        params = request["params"]
        session_id = params["sessionId"]
        _, n, _ = parse_command(params["prompt"][0]["text"])
        for i in range(n):
            update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": chunk_text(i)}}
            notification = {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": session_id, "update": update},
            }
            out.write(orjson.dumps(notification, option=NL))
        out.write(
            orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"stopReason": "end_turn"}}, option=NL)
        )
        out.flush()


if __name__ == "__main__":
    main()

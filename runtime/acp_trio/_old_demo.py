"""``python -m acp_trio.demo``: build, encode and decode a `session/prompt` request, and an update stream.

Until the runtime lands (agent spawned over stdio, client talking to it), this shows the typed
bindings end to end: a client builds a `session/prompt` request with typed content blocks, encodes
it to one newline-delimited JSON-RPC message, and the agent side decodes it back; then a few
`session/update` notifications, one of them a variant this schema does not know, are decoded and
re-encoded exactly.
"""

from __future__ import annotations

import sys

import orjson

from acp_schema import v1
from acp_trio import converter


def main() -> int:
    out = sys.stdout
    request = v1.PromptRequest(
        session_id="sess_demo",
        prompt=[
            v1.TextContentBlock(text="What does this function do?"),
            v1.ResourceLinkContentBlock(name="main.py", uri="file:///project/main.py", mime_type="text/x-python"),
            v1.ImageContentBlock(data="iVBORw0KGgo=", mime_type="image/png"),
        ],
    )
    spec = v1.METHODS["session/prompt"]
    line = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": spec.method, "params": converter.unstructure(request)})
    out.write(f"client -> agent  {line.decode()}\n")
    message = orjson.loads(line)
    decoded = converter.structure(message["params"], spec.params_type)
    assert decoded == request
    kinds = ", ".join(type(block).__name__ for block in decoded.prompt)
    out.write(f"agent decoded    {type(decoded).__name__}(session_id={decoded.session_id!r}, prompt=[{kinds}])\n")

    updates = [
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "It parses the config."}},
        {"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "Reading main.py", "kind": "read"},
        {"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "completed"},
        {"sessionUpdate": "_acme_progress", "percent": 40, "_meta": {"note": "an extension variant"}},
    ]
    note_spec = v1.METHODS["session/update"]
    for update in updates:
        params = {"sessionId": "sess_demo", "update": update}
        note = converter.structure(params, note_spec.params_type)
        exact = converter.unstructure(note) == params
        out.write(f"client decoded   {type(note.update).__name__:<32} re-encodes exactly: {exact}\n")
        if not exact:
            return 1
    response = converter.structure({"stopReason": "end_turn"}, spec.result_type)
    reply = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": converter.unstructure(response)})
    out.write(f"agent -> client  {reply.decode()}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

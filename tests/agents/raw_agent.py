"""A protocol-1 agent in plain Python (no acp-trio), for checker rules the runtime never lets an
agent break or bend: ``python raw_agent.py MODE`` with MODE

- ``null-id``: answers an invalid request with ``id: null`` (JSON-RPC § 5 allows it);
- ``v2-newer``: asked for a version above 1, negotiates 2 and answers in protocol 2's shape;
- ``load-commands``: ``session/load`` replays the conversation, answers, then sends the session's
  command list (state, not history);
- ``plain``: none of these (a v1-only agent).
"""

import json
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "plain"


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def update(body: dict) -> None:
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": body}})


def text(kind: str, words: str) -> dict:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": words}}


def answer(request_id: object, method: str, params: dict) -> None:
    if method == "initialize":
        if MODE == "v2-newer" and params.get("protocolVersion", 1) >= 2:
            result = {
                "protocolVersion": 2,
                "info": {"name": "raw", "version": "1"},
                "capabilities": {},
                "authMethods": [{"methodId": "key", "type": "agent", "name": "Key"}],
            }
        else:
            caps = {"loadSession": MODE == "load-commands"}
            result = {"protocolVersion": 1, "agentInfo": {"name": "raw", "version": "1"}, "agentCapabilities": caps}
        send({"jsonrpc": "2.0", "id": request_id, "result": result})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": request_id, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        update(text("agent_message_chunk", "hello"))
        send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}})
    elif method == "session/load":
        update(text("user_message_chunk", "say hello"))
        update(text("agent_message_chunk", "hello"))
        send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        update({"sessionUpdate": "available_commands_update", "availableCommands": []})
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


for line in sys.stdin:
    try:
        message = json.loads(line)
    except ValueError:
        send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
        continue
    method, request_id = message.get("method"), message.get("id")
    if not isinstance(method, str):
        bad_id = None if MODE == "null-id" else request_id
        send({"jsonrpc": "2.0", "id": bad_id, "error": {"code": -32600, "message": "Invalid Request"}})
    elif request_id is not None:
        answer(request_id, method, message.get("params") or {})

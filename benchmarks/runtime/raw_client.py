"""The raw baseline's client: spawns ``raw_agent.py``, writes request lines, reads and ``orjson.loads`` every line.

Usage: ``python raw_client.py [--agent SCRIPT] [--warmup W] [--repeats R] COMMAND...`` (commands:
see ``common.py``; ``--agent trio_agent.py`` drives acp-trio's agent).  It sends ``initialize`` and
``session/new`` first, counts notification lines, answers each request line at once (one write
and flush per answer) and prints the same JSON object as the other clients.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from common import FILE_CONTENT, Meter, client_args, expected, parse_command

HERE = Path(__file__).resolve().parent
NL = orjson.OPT_APPEND_NEWLINE
ALLOW = {"outcome": {"outcome": "selected", "optionId": "allow"}}
READ = {"content": FILE_CONTENT}
CAPABILITIES = {"fs": {"readTextFile": True}}


def main() -> None:
    args = client_args("raw_agent.py")
    agent = subprocess.Popen([sys.executable, str(HERE / args.agent)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert agent.stdin is not None and agent.stdout is not None
    readline, loads, write, flush = agent.stdout.readline, orjson.loads, agent.stdin.write, agent.stdin.flush
    request_id = 0

    def call(method: str, params: dict[str, Any]) -> tuple[Any, int, int]:
        """Send a request; answer the agent's requests until its response: (result, notifications, requests)."""
        nonlocal request_id
        request_id += 1
        write(orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}, option=NL))
        flush()
        updates = answered = 0
        while True:
            message = loads(readline())
            method = message.get("method")
            if method is None:
                if message.get("id") == request_id:
                    return message["result"], updates, answered
            elif "id" not in message:
                updates += 1
            else:
                result = READ if method == "fs/read_text_file" else ALLOW
                write(orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}, option=NL))
                flush()
                answered += 1

    call("initialize", {"protocolVersion": 1, "clientCapabilities": CAPABILITIES})
    session_id = call("session/new", {"cwd": str(HERE), "mcpServers": []})[0]["sessionId"]
    meter = Meter(agent.pid)
    for command in args.commands:
        kind, n, _ = parse_command(command)
        for k in range(args.warmup + args.repeats):
            prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": command}]}
            meter.start()
            result, updates, answered = call("session/prompt", prompt)
            meter.stop(command, k >= args.warmup)
            got, want = (updates if kind in ("stream", "mixed") else answered), expected(kind, n)
            if got != want or result["stopReason"] != "end_turn":
                raise AssertionError(f"{command}: {got} of {want} handled")
    results = meter.finish()
    agent.stdin.close()
    agent.wait(timeout=10)
    print(json.dumps(results))


if __name__ == "__main__":
    main()

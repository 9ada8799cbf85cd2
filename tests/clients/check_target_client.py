"""A client for the checker's client mode tests: right in every way the checker looks at, or wrong
in exactly one, named by ``argv[1]``.  Usage: ``check_target_client.py DEFECT PROTOCOL AGENT_CMD...``.

It speaks raw NDJSON (so each defect is exactly one), spawns the agent, sends ``initialize``
(v1: advertising fs read/write and terminal), ``session/new`` in a new temporary directory, and
two prompts; in the second it cancels the turn when the agent asks permission (answering that
request ``cancelled``; in v2 the ``session/cancel`` goes in a JSON-RPC batch with a notification).  Then it closes the agent's stdin, waits 1 s, sends SIGTERM, waits 1 s,
sends SIGKILL.  It answers fs/* inside the session directory only (symlinks resolved, relative
paths refused), runs terminals, allows permission requests with the first allow option.

- ``good``: nothing wrong;
- ``reads-outside``: ``fs/read_text_file`` reads any path;
- ``terminal-unadvertised``: does not advertise ``terminal``, but runs ``terminal/create``;
- ``never-answers-permission``: leaves permission requests unanswered (a cancel still answers them);
- ``crashes-on-unknown-update``: exits on a ``session/update`` of a kind it does not know;
- ``never-closes-stdin``: ends the agent with signals only, its stdin left open;
- ``never-kills``: closes the agent's stdin, then waits for it forever;
- ``invalid-message``: its ``initialize`` has a ``clientInfo`` without ``name``;
- ``cancel-allows``: after ``session/cancel``, answers the pending permission request "allow";
- ``crashes-on-unknown-field``: exits on an ``agent_message_chunk`` with a field it does not know;
- ``crashes-on-prompt-answer-field``: exits on a ``session/prompt`` answer with a field it does not know;
- ``ignores-unknown-requests``: never answers a request for a method it does not know;
- ``garbage-line``: writes a line that is not JSON to the agent's stdin;
- ``reads-wrong``: answers ``fs/read_text_file`` with an empty text;
- ``fs-unadvertised``: does not advertise ``fs``, but answers ``fs/*``;
- ``sigterm-only``: closes the agent's stdin, sends SIGTERM, then waits for it forever.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
import trio

DEFECT = sys.argv[1]
PROTOCOL = int(sys.argv[2])
AGENT = sys.argv[3:]
KNOWN_UPDATES = {
    "user_message_chunk",
    "user_message",
    "agent_message_chunk",
    "agent_thought_chunk",
    "tool_call",
    "tool_call_update",
    "plan",
    "plan_update",
    "available_commands_update",
    "current_mode_update",
    "config_option_update",
    "session_info_update",
    "state_update",
    "usage_update",
}


class Client:
    def __init__(self, process: trio.Process, cwd: Path) -> None:
        self.process = process
        self.cwd = cwd
        self.next_id = 0
        self.waiting: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self.turn = 0
        self.session_id = ""
        self.idle = trio.Event()
        self.terminals: dict[str, tuple[int, str]] = {}
        self.prompt_ids: set[int] = set()

    async def send(self, message: dict[str, Any] | list[dict[str, Any]]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(orjson.dumps(message) + b"\n")

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self.waiting[self.next_id] = send
        await self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return await receive.receive()

    async def answer(self, message: dict[str, Any], result: Any = None, error: Any = None) -> None:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if error is not None:
            reply["error"] = error
        else:
            reply["result"] = result
        await self.send(reply)

    async def read(self, nursery: trio.Nursery) -> None:
        assert self.process.stdout is not None
        buffer = b""
        while data := await self.process.stdout.receive_some(65536):
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = orjson.loads(line)
                if "method" not in message:
                    result = message.get("result")
                    if DEFECT == "crashes-on-prompt-answer-field" and message["id"] in self.prompt_ids:
                        if set(result or {}) - {"stopReason", "messageId", "_meta", "usage"}:
                            os._exit(1)
                    self.waiting.pop(message["id"]).send_nowait(message)
                elif "id" in message:
                    nursery.start_soon(self.handle, message)
                elif message["method"] == "session/update":
                    update = message["params"]["update"]
                    if DEFECT == "crashes-on-unknown-update" and update.get("sessionUpdate") not in KNOWN_UPDATES:
                        os._exit(1)
                    chunk_fields = {"sessionUpdate", "content", "messageId", "_meta"}
                    if DEFECT == "crashes-on-unknown-field" and update.get("sessionUpdate") == "agent_message_chunk":
                        if set(update) - chunk_fields:
                            os._exit(1)
                    if update.get("sessionUpdate") == "state_update" and update.get("state") == "idle":
                        self.idle.set()

    def inside(self, path: str) -> Path:
        if not os.path.isabs(path):
            raise ValueError(f"{path} is not absolute")
        full = Path(os.path.realpath(path))
        if DEFECT != "reads-outside" and self.cwd not in full.parents:
            raise ValueError(f"{path} is outside the session directory")
        return full

    async def handle(self, message: dict[str, Any]) -> None:
        method, params = message["method"], message.get("params") or {}
        v1 = PROTOCOL == 1
        try:
            if method == "session/request_permission":
                await self.permission(message, params)
            elif v1 and method == "fs/read_text_file":
                content = self.inside(params["path"]).read_text(encoding="utf-8")
                await self.answer(message, {"content": "" if DEFECT == "reads-wrong" else content})
            elif v1 and method == "fs/write_text_file":
                target = Path(params["path"])
                if not target.is_absolute() or target.is_symlink():
                    raise ValueError(f"{target}: not an absolute path to a regular file")
                self.inside(str(target.parent) + "/x")
                target.write_text(params["content"], encoding="utf-8")
                await self.answer(message, {})
            elif v1 and method == "terminal/create":
                proc = await trio.run_process(
                    [params["command"], *params.get("args", [])],
                    cwd=params.get("cwd"),
                    capture_stdout=True,
                    stderr=subprocess.STDOUT,
                    check=False,
                )
                terminal_id = f"term_{len(self.terminals) + 1}"
                self.terminals[terminal_id] = (proc.returncode, proc.stdout.decode())
                await self.answer(message, {"terminalId": terminal_id})
            elif v1 and method == "terminal/wait_for_exit":
                code, _ = self.terminals[params["terminalId"]]
                await self.answer(message, {"exitCode": code, "signal": None})
            elif v1 and method == "terminal/output":
                code, output = self.terminals[params["terminalId"]]
                status = {"exitCode": code, "signal": None}
                await self.answer(message, {"output": output, "truncated": False, "exitStatus": status})
            elif v1 and method == "terminal/release":
                self.terminals.pop(params["terminalId"])
                await self.answer(message, {})
            elif DEFECT != "ignores-unknown-requests":
                await self.answer(message, error={"code": -32601, "message": f"Method not found: {method}"})
        except (OSError, ValueError, KeyError) as exc:
            await self.answer(message, error={"code": -32602, "message": "Invalid params", "data": str(exc)})

    async def permission(self, message: dict[str, Any], params: dict[str, Any]) -> None:
        if self.turn == 2:  # cancel the turn, then answer the request
            cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": self.session_id}}
            if PROTOCOL >= 2:  # a JSON-RPC batch (v2 transports.mdx § JSON-RPC Batch Messages)
                await self.send([cancel, {"jsonrpc": "2.0", "method": "_check_target/note", "params": {}}])
            else:
                await self.send(cancel)
            if DEFECT == "cancel-allows":
                await self.answer(
                    message, {"outcome": {"outcome": "selected", "optionId": params["options"][0]["optionId"]}}
                )
            else:
                await self.answer(message, {"outcome": {"outcome": "cancelled"}})
            return
        if DEFECT == "never-answers-permission":
            return
        allow = next(o for o in params["options"] if o["kind"].startswith("allow"))
        await self.answer(message, {"outcome": {"outcome": "selected", "optionId": allow["optionId"]}})

    async def prompt(self, text: str) -> None:
        self.turn += 1
        self.idle = trio.Event()
        params = {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]}
        self.prompt_ids.add(self.next_id + 1)
        await self.request("session/prompt", params)
        if PROTOCOL >= 2:
            await self.idle.wait()


async def main() -> None:
    cwd = Path(os.path.realpath(tempfile.mkdtemp(prefix="check-target-client-")))
    process = await trio.lowlevel.open_process(
        AGENT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
    )
    client = Client(process, cwd)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.read, nursery)
        info: dict[str, Any] = {"name": "check-target-client", "version": "1"}
        if DEFECT == "invalid-message":
            del info["name"]
        if PROTOCOL >= 2:
            init = {"protocolVersion": 2, "info": info, "capabilities": {}}
        else:
            advertised = DEFECT != "fs-unadvertised"
            capabilities = {
                "fs": {"readTextFile": advertised, "writeTextFile": advertised},
                "terminal": DEFECT != "terminal-unadvertised",
            }
            init = {"protocolVersion": 1, "clientCapabilities": capabilities, "clientInfo": info}
        await client.request("initialize", init)
        if DEFECT == "garbage-line":
            assert process.stdin is not None
            await process.stdin.send_all(b"hello agent\n")
        new: dict[str, Any] = {"cwd": str(cwd)} if PROTOCOL >= 2 else {"cwd": str(cwd), "mcpServers": []}
        client.session_id = (await client.request("session/new", new))["result"]["sessionId"]
        await client.prompt("hello")
        await client.prompt("wait")
        assert process.stdin is not None
        if DEFECT != "never-closes-stdin":
            await process.stdin.aclose()
        if DEFECT == "never-kills":
            await process.wait()
        if DEFECT == "sigterm-only":
            with trio.move_on_after(1):
                await process.wait()
            if process.returncode is None:
                os.killpg(process.pid, signal.SIGTERM)
            await process.wait()
        for signum in (signal.SIGTERM, signal.SIGKILL):
            with trio.move_on_after(1):
                await process.wait()
            if process.returncode is None:
                os.killpg(process.pid, signum)
        await process.wait()
        nursery.cancel_scope.cancel()


trio.run(main)

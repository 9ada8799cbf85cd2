"""``nox -s llm_demo``: the example LLM agent (``python -m examples.llm_agent``) against the loopback model server
of the tests, driven by a printing ``StandardClient`` that allows every tool call: no network, no key.

For each provider (``--provider openai|anthropic``, default both) and protocol version (``--protocol
1|2``, default both: the agent serves both, the client's ``initialize`` picks) it serves the loopback
on 127.0.0.1, spawns ``python -m examples.llm_agent --provider P --model loopback-model --base-url
URL`` with a dummy key, opens a session in a temporary directory with the MCP server of
``tests/mcp_servers/tools_server.py`` and runs one turn: the scripted model thinks, writes
``hello.txt``, runs ``echo`` (shown as it runs), reads the file back, calls the MCP tool ``add`` and
answers.  Everything the client sees is printed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio
from interop.model_server import serve_models
from llm_loopback import Loopback, Reasoning, Text, ToolCall, Usage, requests_to

from acp_schema import v1, v2
from acp_trio import ClientSideConnection, SessionState, StandardClient, allow_all, ask, spawn_agent

ROOT = Path(__file__).resolve().parent.parent
TOOLS_SERVER = Path(__file__).resolve().parent / "mcp_servers" / "tools_server.py"

SCRIPT = [
    [
        Reasoning("The user wants a greeting file; I will write it, then check it."),
        Text("I'll write hello.txt and check it."),
        ToolCall("write_file", {"path": "hello.txt", "content": "hello from the loopback model\n"}, "call_write"),
        Usage(120, 30, reasoning_tokens=12),
    ],
    [
        ToolCall("run_command", {"command": "echo hello from a shell && wc -c hello.txt"}, "call_run"),
        ToolCall("read_file", {"path": "hello.txt"}, "call_read"),
        Usage(180, 25),
    ],
    [ToolCall("mcp__tools__add", {"a": 20, "b": 22}, "call_add"), Usage(240, 12)],
    [Text("Done: hello.txt is written and reads back fine; 20 + 22 = 42."), Usage(300, 18)],
]


class PrintingClient(StandardClient):
    """Prints every update as it arrives (text chunks joined on one line)."""

    def __init__(self, conn: ClientSideConnection, **options: Any) -> None:
        super().__init__(conn, **options)
        self._open: str | None = None

    def _line(self, kind: str | None, text: str) -> None:
        if kind != self._open:
            if self._open is not None:
                print()
            if kind is not None:
                print(f"{kind}: ", end="")
            self._open = kind
        print(text, end="" if kind is not None else "\n", flush=True)

    def on_update(self, state: SessionState, update: Any) -> None:
        kind = update.session_update
        text = getattr(getattr(update, "content", None), "text", None)
        if kind == "agent_message_chunk" and isinstance(text, str):
            self._line("agent", text)
        elif kind == "agent_thought_chunk" and isinstance(text, str):
            self._line("thought", text)
        elif kind in ("tool_call", "tool_call_update"):
            call = state.tool_calls[update.tool_call_id]
            self._line(None, f"[tool {call.tool_call_id}] {call.kind} {call.status}: {call.title}")
            if call.status in ("completed", "failed") and isinstance(call.raw_output, dict):
                for line in str(call.raw_output.get("output", "")).splitlines()[:4]:
                    self._line(None, f"    | {line}")
        elif kind == "terminal_output_chunk":
            for line in state.terminals[update.terminal_id].output.decode("utf-8", "replace").splitlines()[-1:]:
                self._line(None, f"    $ {line}")
        elif kind == "usage_update":
            self._line(None, f"[usage] {update.used} / {update.size} tokens in context")


async def run(provider: str, protocol: int) -> None:
    app = Loopback([list(reply) for reply in SCRIPT])
    work = Path(tempfile.mkdtemp(prefix="llm-demo-"))
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_models, app)
        base = url + "/v1" if provider == "openai" else url
        print(f"== {provider}, ACP protocol {protocol}: loopback model API at {base}, project directory {work}")
        args = ["-m", "examples.llm_agent", "--provider", provider, "--model", "loopback-model", "--base-url", base]
        key = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
        allow = allow_all()

        async def policy(request: Any) -> str | None:
            choice = await allow(request)
            if protocol == 1:  # about a tool call (its id; the title came with tool_call)
                call = request.tool_call
                question = call.title if isinstance(call.title, str) else f"tool call {call.tool_call_id}"
            else:  # v2: a question of its own, about a tool call (the subject)
                call, question = request.subject.tool_call, request.title
            print(f"[permission] {question} ({call.kind}): choosing {choice!r}")
            return choice

        variant = v1 if protocol == 1 else v2
        make_client = PrintingClient.for_versions(variant, policy=ask(policy))
        with trio.fail_after(60):
            async with spawn_agent(sys.executable, args, client=make_client, env={key: "dummy"}, cwd=ROOT) as conn:
                client: PrintingClient = conn.handler
                await client.initialize()
                tools = {"name": "tools", "command": sys.executable, "args": [str(TOOLS_SERVER), "stdio"], "env": []}
                if protocol == 1:
                    server: Any = v1.McpServerStdio(**tools)
                else:
                    server = v2.StdioMcpServer(**tools)
                new = variant.NewSessionRequest(cwd=str(work), mcp_servers=[server])
                session = await conn.agent.session_new(new)
                prompt = "Write hello.txt, check it, and add 20 and 22."
                print(f"you: {prompt}")
                result = await client.prompt(session.session_id, prompt)
                client._line(None, "")
                print(f"[turn ended: {result.stop_reason}]")
        print(f"hello.txt: {(work / 'hello.txt').read_text(encoding='utf-8')!r}")
        print(
            f"the loopback got {len(requests_to(app, '/v1/responses' if provider == 'openai' else '/v1/messages'))} requests"
        )
        nursery.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--provider", choices=("openai", "anthropic"), action="append")
    parser.add_argument("--protocol", type=int, choices=(1, 2), action="append")
    args = parser.parse_args()
    for provider in args.provider or ["openai", "anthropic"]:
        for protocol in args.protocol or [1, 2]:
            trio.run(run, provider, protocol)


if __name__ == "__main__":
    main()

"""The example LLM agent passes ``acp_trio.check`` in protocol version 1 and 2, from one implementation.

The agent runs in this process (``run_checks_in_memory``: a fresh connection per check to the one
``LlmAgent``), its SDK client on the loopback model server's in-process transport; the loopback
answers each model request by the prompt it carries (:func:`reply_for`), since the checks' prompts
come in no fixed order: the checker's script (:data:`SCRIPT`) has a plain turn, a long turn to
cancel, a turn that reads a file and one that writes a file after asking permission.  Every check
that applies passes; the skips are the ones protocol 2 does not have.

The same run over stdio (``python -m acp_trio.check --protocol 1|2 --script ... -- python -m
examples.llm_agent --provider openai --model m --base-url URL``, the loopback served by hypercorn)
is what the issue's closing note reports.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from llm_loopback import Hang, Loopback, Reply, StreamingAsgiTransport, Text, ToolCall, Usage

from acp_trio.check import Script, ScriptedPrompt, Status, run_checks_in_memory

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="/bin/sh is POSIX-only"),
    pytest.mark.one_interpreter,  # some 10 s per version (the checker's own waits); the agent's logic, not Python's
]

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.llm_agent.agent import LlmAgent  # noqa: E402
from examples.llm_agent.providers import Settings  # noqa: E402

SCRIPT = Script(
    {
        "text": ScriptedPrompt("text", "Say hello in one short sentence."),
        "long": ScriptedPrompt("long", "Count from 1 to 200, one number per line."),
        "tool": ScriptedPrompt("tool", "Read the file acp-check-notes.txt and tell me what it says.", ("tool_call",)),
        "permission": ScriptedPrompt(
            "permission", "Create the file hello.txt containing hi.", ("permission", "message")
        ),
    }
)


def last_input(path: str, body: dict[str, Any]) -> tuple[str, bool]:
    """(the last user text, whether the request carries tool results after it) of a model request."""
    if path == "/v1/responses":
        items = body["input"]
        texts = [i["content"] for i in items if i.get("role") == "user"]
        return (texts[-1] if texts else ""), items[-1].get("type") == "function_call_output"
    last = body["messages"][-1]
    blocks = last["content"] if isinstance(last["content"], list) else []
    texts = [b["text"] for b in blocks if b.get("type") == "text"]
    return (texts[-1] if texts else ""), any(b.get("type") == "tool_result" for b in blocks)


def reply_for(path: str, body: dict[str, Any]) -> Reply:
    """The model's reply to each of :data:`SCRIPT`'s prompts (after tool results: a closing text)."""
    text, after_tools = last_input(path, body)
    if after_tools:
        return [Text("Done."), Usage(30, 2)]
    if text.startswith("Count from 1"):
        return [Text("1\n2\n3\n"), Hang()]
    if text.startswith("Read the file"):
        return [ToolCall("read_file", {"path": "acp-check-notes.txt"}, "call_read")]
    if text.startswith("Create the file"):
        return [Text("Creating it."), ToolCall("write_file", {"path": "hello.txt", "content": "hi\n"}, "call_write")]
    return [Text("Hello there!"), Usage(12, 3)]


@pytest.mark.parametrize(("protocol", "provider"), [(1, "openai"), (2, "anthropic")], ids=["v1", "v2"])
async def test_the_llm_agent_passes_the_checker(
    protocol: int, provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY", "test-key")
    app = Loopback([], respond=reply_for)
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            http = httpx2.AsyncClient(transport=StreamingAsgiTransport(app, nursery))
            base = "http://loopback/v1" if provider == "openai" else "http://loopback"
            settings = Settings(provider=provider, model="loop-model", base_url=base, max_retries=0, http_client=http)  # type: ignore[arg-type]
            llm = LlmAgent(settings)
            async with llm.running():
                report = await run_checks_in_memory(llm, protocol=protocol, script=SCRIPT, cwd=str(tmp_path))
            nursery.cancel_scope.cancel()
    statuses = {f.name: f.status for f in report.findings}
    problems = [f"{f.name}: {f.status.name} {f.observed}" for f in report.findings if f.status is not Status.PASS]
    assert not report.failed, problems
    must_pass = [
        "initialize.version",
        "session.new",
        "session.prompt",
        "session.cancel",
        "session.cancel-permission",
        "script.expectations",
        "session.load" if protocol == 1 else "session.resume",
        "session.list",
        "session.close",
        "session.delete",
        "session.set-config-option",
        *(["session.set-mode", "capabilities.variations"] if protocol == 1 else []),
    ]
    assert {name: statuses.get(name) for name in must_pass} == dict.fromkeys(must_pass, Status.PASS), problems
    assert app.requests, "the checks' turns reached the model"

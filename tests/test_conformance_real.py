"""The conformance checker against real third-party agents, offline (``tests/interop/conformance_real.py``).

Three parts:

- the loopback model server (``tests/interop/model_server.py``), in process: the Anthropic
  Messages API, the OpenAI Responses API, the Gemini API and OpenAI Chat Completions answers it
  streams, and the tool calls it answers a marked prompt with;
- ``@agentclientprotocol/claude-agent-acp`` and ``@agentclientprotocol/codex-acp`` from npm (pinned
  in ``tests/interop/real_agents.py``) through the fast checks (``initialize``, ``session.new``,
  ``session.prompt``) in protocols 1 and 2, their model API pointed at the model server: no
  network, no key.  The four take about 40 s once installed (the install: about 840 MB into
  ``~/.cache/acp-trio/interop/``, about 15 s from a near registry);
- gemini-cli, qwen-code, opencode and pydantic-acp (version 1 only) through the same fast checks
  in protocol 1, and gemini-cli creating a new file through ``python -m acp_trio.demo`` after
  asking permission.

Through the v1 ⇄ v2 adapter (``python -m acp_trio.adapt``, issue 33): gemini-cli, qwen-code,
opencode and pydantic-acp behind ``--speak 2``, driven by acp-trio's v2 demo client and by a v2
client written with the TypeScript SDK (``tests/interop/ts_v2_turn_client.mjs``): a turn that
creates a file, then one cancelled at its first chunk; claude-agent-acp and codex-acp behind
``--speak 1`` and ``--speak 2`` with our demo clients: a turn that reads a file, then a cancelled
one.  (The SDK peers through the adapter, with plans and permissions, are in
``tests/test_interop_adapt.py``.)

The real agents run only with ``ACP_REAL_AGENTS=1`` (``nox -s conformance`` sets it).  They skip,
saying why, without ``node``/``npm`` or when the install fails.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

INTEROP = Path(__file__).parent / "interop"
sys.path.insert(0, str(INTEROP))  # the scripts there import each other as top-level modules

import conformance_real  # noqa: E402
import model_server  # noqa: E402
import real_agents  # noqa: E402

pytest.importorskip("httpx2")
import httpx2  # noqa: E402

TIME_LIMIT = 30  # seconds for the in-process server tests
INSTALL_TIMEOUT = 240  # seconds: under the suite's pytest-timeout (300 s), so a slow registry skips with a message
AGENT_TIME_LIMIT = 240  # seconds per real agent and protocol (their first start unpacks caches)


async def _events(response: Any) -> list[tuple[str, dict[str, Any]]]:
    """The server-sent events of a streamed response, as (event name, data)."""
    events: list[tuple[str, dict[str, Any]]] = []
    name = ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            events.append((name, json.loads(line.removeprefix("data: "))))
    return events


async def _with_server(app: model_server.ModelServer, body: Any) -> Any:
    with trio.fail_after(TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(model_server.serve_models, app)
            async with httpx2.AsyncClient(base_url=url) as client:
                result = await body(client)
            nursery.cancel_scope.cancel()
    return result


async def test_the_model_server_streams_a_messages_api_answer_in_pieces(tmp_path: Path) -> None:
    app = model_server.ModelServer(deltas=7, delay=0, log=str(tmp_path / "requests.jsonl"))
    request = {"model": "claude-x", "stream": True, "messages": [{"role": "user", "content": "hi"}]}

    async def body(client: httpx2.AsyncClient) -> list[tuple[str, dict[str, Any]]]:
        async with client.stream("POST", "/v1/messages?beta=true", json=request) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            return await _events(response)

    events = await _with_server(app, body)
    names = [name for name, _data in events]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    deltas = [data["delta"]["text"] for name, data in events if name == "content_block_delta"]
    assert len(deltas) == 7 and "".join(deltas) == model_server.ANSWER
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"
    logged = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [(e["method"], e["path"], e["query"], e["model"]) for e in logged] == [
        ("POST", "/v1/messages", "beta=true", "claude-x")
    ]


async def test_the_model_server_answers_a_marked_messages_prompt_with_a_read_tool_call() -> None:
    app = model_server.ModelServer(delay=0, log=os.devnull)
    marked = [{"role": "user", "content": [{"type": "text", "text": "look: acp-tool-read:/tmp/notes.txt"}]}]
    answered = [
        *marked,
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
    ]

    async def body(client: httpx2.AsyncClient) -> list[dict[str, Any]]:
        out = []
        for messages in (marked, answered):
            request = {"model": "m", "messages": messages, "tools": [{"name": "Read", "input_schema": {}}]}
            response = await client.post("/v1/messages", json=request)
            out.append(response.json())
        count = await client.post("/v1/messages/count_tokens", json={"model": "m", "messages": marked})
        out.append(count.json())
        return out

    tool, text, count = await _with_server(app, body)
    assert tool["stop_reason"] == "tool_use"
    assert tool["content"][0]["name"] == "Read" and tool["content"][0]["input"] == {"file_path": "/tmp/notes.txt"}
    assert text["stop_reason"] == "end_turn" and text["content"] == [{"type": "text", "text": model_server.ANSWER}]
    assert count["input_tokens"] >= 1


async def test_the_model_server_streams_a_responses_api_answer_and_a_shell_tool_call() -> None:
    app = model_server.ModelServer(deltas=5, delay=0, log=os.devnull)
    user = {"role": "user", "content": [{"type": "input_text", "text": "hello"}]}
    marked = {"role": "user", "content": [{"type": "input_text", "text": "acp-tool-read:/tmp/n.txt"}]}
    tools = [{"type": "function", "name": "shell_command"}]

    async def body(client: httpx2.AsyncClient) -> list[list[tuple[str, dict[str, Any]]]]:
        out = []
        for request in ({"model": "m", "input": [user]}, {"model": "m", "input": [marked], "tools": tools}):
            async with client.stream("POST", "/v1/responses", json={**request, "stream": True}) as response:
                out.append(await _events(response))
        return out

    text, tool = await _with_server(app, body)
    assert [n for n, _d in text][:2] == ["response.created", "response.output_item.added"]
    assert "".join(d["delta"] for n, d in text if n == "response.output_text.delta") == model_server.ANSWER
    assert text[-1][0] == "response.completed" and text[-1][1]["response"]["status"] == "completed"
    call = next(d["item"] for n, d in tool if n == "response.output_item.done")
    assert call["type"] == "function_call" and call["name"] == "shell_command"
    assert json.loads(call["arguments"]) == {"command": "cat /tmp/n.txt"}


WRITE_FILE = {
    "name": "write_file",
    "parametersJsonSchema": {
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["file_path", "content"],
    },
}
READ_FILE = {"name": "read_file", "parametersJsonSchema": {"properties": {"file_path": {"type": "string"}}}}


async def test_the_model_server_streams_a_gemini_answer_and_a_write_file_call_until_its_response() -> None:
    app = model_server.ModelServer(deltas=4, delay=0, log=os.devnull)
    marked = {"role": "user", "parts": [{"text": "make it: acp-tool-write:/tmp/new.txt"}]}
    call = {"role": "model", "parts": [{"functionCall": {"name": "write_file", "args": {}}}]}
    result = {"role": "user", "parts": [{"functionResponse": {"name": "write_file", "response": {}}}]}
    tools = [{"functionDeclarations": [READ_FILE, WRITE_FILE]}]
    path = "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"

    async def body(client: httpx2.AsyncClient) -> list[list[dict[str, Any]]]:
        out = []
        for contents in ([marked], [marked, call, result]):
            async with client.stream("POST", path, json={"contents": contents, "tools": tools}) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                out.append([data for _name, data in await _events(response)])
        return out

    tool, text = await _with_server(app, body)
    assert len(tool) == 1 and tool[0]["candidates"][0]["finishReason"] == "STOP"
    function_call = tool[0]["candidates"][0]["content"]["parts"][0]["functionCall"]
    assert function_call["name"] == "write_file"
    assert function_call["args"] == {"file_path": "/tmp/new.txt", "content": model_server.WRITE_CONTENT}
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in text) == model_server.ANSWER
    assert len(text) == 4 and [c["candidates"][0].get("finishReason") for c in text] == [None, None, None, "STOP"]
    assert [r["answer"] for r in app.requests] == ["tool", "text"] and app.requests[0]["tool"] == "write_file"


async def test_the_model_server_answers_a_gemini_structured_output_request_with_json_of_its_schema() -> None:
    app = model_server.ModelServer(delay=0, log=os.devnull)
    schema = {
        "type": "object",
        "properties": {"reasoning": {"type": "string"}, "score": {"type": "number", "minimum": 1}},
        "required": ["reasoning", "score"],
    }
    request = {
        "contents": [{"role": "user", "parts": [{"text": "route me"}]}],
        "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": schema},
    }

    async def body(client: httpx2.AsyncClient) -> Any:
        return (await client.post("/v1beta/models/flash-lite:generateContent", json=request)).json()

    answer = await _with_server(app, body)
    assert json.loads(answer["candidates"][0]["content"]["parts"][0]["text"]) == {"reasoning": "loopback", "score": 1}


async def test_the_model_server_streams_chat_completions_text_and_a_tool_call_in_the_chat_format() -> None:
    app = model_server.ModelServer(deltas=3, delay=0, log=os.devnull)
    tools = [
        {"type": "function", "function": {"name": "read", "parameters": {"properties": {"filePath": {}}}}},
        {
            "type": "function",
            "function": {"name": "write", "parameters": {"properties": {"filePath": {}, "content": {}}}},
        },
    ]
    marked = {"role": "user", "content": "please acp-tool-read:/tmp/n.txt"}
    answered = [marked, {"role": "assistant", "tool_calls": []}, {"role": "tool", "content": "buy milk"}]
    options = {"model": "m", "stream": True, "stream_options": {"include_usage": True}, "tools": tools}

    async def body(client: httpx2.AsyncClient) -> list[list[Any]]:
        out = []
        for messages in ([marked], answered):
            async with client.stream("POST", "/v1/chat/completions", json={**options, "messages": messages}) as r:
                out.append([line.removeprefix("data: ") async for line in r.aiter_lines() if line.startswith("data: ")])
        return out

    tool, text = await _with_server(app, body)
    assert tool[-1] == "[DONE]" and text[-1] == "[DONE]"
    tool_chunks = [json.loads(c) for c in tool[:-1]]
    calls = [d["choices"][0]["delta"].get("tool_calls") for d in tool_chunks if d["choices"]]
    opened = next(c for c in calls if c)[0]
    assert opened["function"]["name"] == "read" and opened["id"].startswith("call_")
    arguments = "".join(c[0]["function"].get("arguments", "") for c in calls if c)
    assert json.loads(arguments) == {"filePath": "/tmp/n.txt"}
    assert [d["choices"][0]["finish_reason"] for d in tool_chunks if d["choices"]][-1] == "tool_calls"
    text_chunks = [json.loads(c) for c in text[:-1]]
    content = "".join(d["choices"][0]["delta"].get("content") or "" for d in text_chunks if d["choices"])
    assert content == model_server.ANSWER
    assert text_chunks[-1]["choices"] == [] and text_chunks[-1]["usage"]["total_tokens"] == 30


async def test_the_model_server_answers_a_chat_completion_without_streaming() -> None:
    app = model_server.ModelServer(delay=0, log=os.devnull)
    request = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}

    async def body(client: httpx2.AsyncClient) -> Any:
        return (await client.post("/v1/chat/completions", json=request)).json()

    answer = await _with_server(app, body)
    assert answer["object"] == "chat.completion" and answer["choices"][0]["finish_reason"] == "stop"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": model_server.ANSWER}


async def test_the_model_server_answers_an_unknown_path_with_404_and_logs_it(tmp_path: Path) -> None:
    app = model_server.ModelServer(delay=0, log=str(tmp_path / "requests.jsonl"))

    async def body(client: httpx2.AsyncClient) -> int:
        return (await client.get("/api/hello")).status_code

    assert await _with_server(app, body) == 404
    assert json.loads((tmp_path / "requests.jsonl").read_text())["path"] == "/api/hello"


def test_the_table_has_a_row_per_check_and_a_column_per_agent_and_protocol() -> None:
    runs = [
        conformance_real.Run("a", 1, {"initialize.version": "PASS", "jsonrpc.ids": "FAIL"}),
        conformance_real.Run("a", 2, {"initialize.version": "PASS"}),
        conformance_real.Run("b", 1, unavailable="node and npm are not on PATH"),
        conformance_real.Run("c", 1, error="the checker exited 2"),
    ]
    assert conformance_real.table(runs).splitlines() == [
        "| check | a p1 | a p2 | b p1 | c p1 |",
        "|---|---|---|---|---|",
        "| initialize.version | PASS | PASS | n/a | ERR |",
        "| jsonrpc.ids | FAIL | - | n/a | ERR |",
    ]


# -- the real agents ----------------------------------------------------------------------------

real = pytest.mark.skipif(
    os.environ.get("ACP_REAL_AGENTS") != "1",
    reason="the real agents (claude-agent-acp, codex-acp, gemini-cli, qwen-code, opencode, pydantic-acp: about 1.5 GB "
    "from npm and PyPI) run with ACP_REAL_AGENTS=1: nox -s conformance",
)


@pytest.fixture(scope="session")
def real_agents_installed() -> Path:
    try:
        return real_agents.install_real_agents(timeout=INSTALL_TIMEOUT)
    except real_agents.Unavailable as exc:
        pytest.skip(f"the real agents are unavailable: {exc}")


# What each real agent must do in the quick checks; both negotiate protocol 2 (session.prompt is v1-only).
EXPECTED = {
    1: {"initialize.version": "PASS", "initialize.info": "PASS", "session.new": "PASS", "session.prompt": "PASS"},
    2: {"initialize.version": "PASS", "initialize.info": "PASS", "session.new": "PASS"},
}
MODEL_PATH = {"claude-agent-acp": "/v1/messages", "codex-acp": "/v1/responses"}


@real
@pytest.mark.parametrize("protocol", [1, 2])
@pytest.mark.parametrize("name", ["claude-agent-acp", "codex-acp"])
async def test_a_real_agent_passes_the_quick_checks_against_the_loopback_model(
    name: str, protocol: int, real_agents_installed: Path, tmp_path: Path
) -> None:
    agent = next(a for a in real_agents.AGENTS if a.name == name)
    app = model_server.ModelServer(delay=0.01, log=str(tmp_path / "requests.jsonl"))
    with trio.fail_after(AGENT_TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(model_server.serve_models, app)
            run = await conformance_real.run_one(agent, protocol, tmp_path, url, conformance_real.QUICK, 60.0)
            nursery.cancel_scope.cancel()
    assert run.unavailable is None and run.error is None, run.unavailable or run.error
    got = {check: run.statuses.get(check) for check in EXPECTED[protocol]}
    assert got == EXPECTED[protocol], run.text
    assert not {"FAIL", "WARN"} & set(run.statuses.values()), run.text
    if protocol == 1:  # the turn really went through the model server
        assert MODEL_PATH[name] in {r["path"] for r in app.requests}


# -- gemini-cli, qwen-code, opencode, pydantic-acp (protocol 1 only) ----------------------------

INSTALLERS = {
    "gemini-cli": real_agents.install_gemini_cli,
    "qwen-code": real_agents.install_qwen_code,
    "opencode": real_agents.install_opencode,
    "pydantic-acp": real_agents.install_pydantic_acp,
}


def _install(name: str) -> None:
    try:
        INSTALLERS[name](timeout=INSTALL_TIMEOUT)
    except real_agents.Unavailable as exc:
        pytest.skip(f"{name} is unavailable: {exc}")


@real
async def test_gemini_cli_writes_a_new_file_through_the_demo_client_after_asking_permission(tmp_path: Path) -> None:
    """gemini-cli's write_file of a file that does not exist yet, through ``python -m acp_trio.demo``:
    it asks ``session/request_permission`` (the demo allows), then writes with ``fs/write_text_file``.

    ``--no-fs-read``: gemini-cli 0.61.0 checks whether the file exists with ``fs/read_text_file``
    when the client advertises it, and cannot tell the client's -32002 answer from another error
    (its SDK rejects with the plain JSON-RPC error object, which its ``normalizeFileSystemError``
    never recognises), so the write fails before asking; without ``fs.readTextFile`` it reads
    the local disk, finds no file, asks, and writes through the client.
    """
    _install("gemini-cli")
    command, extra = next(a for a in real_agents.AGENTS if a.name == "gemini-cli").command()
    workdir = Path(os.path.realpath(tmp_path)) / "project"
    workdir.mkdir()
    new = workdir / "new.txt"
    app = model_server.ModelServer(delay=0.01, log=str(tmp_path / "requests.jsonl"))
    prompt = f"Create this file: {model_server.WRITE_MARKER}{new}"
    with trio.fail_after(AGENT_TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(model_server.serve_models, app)
            env = conformance_real.checker_env(
                {**real_agents.agent_environment(tmp_path / "state", url, "gemini-cli"), **extra}
            )
            demo = [sys.executable, "-m", "acp_trio.demo", "--agent", "--no-fs-read", "--timeout", "120"]
            demo += ["--cwd", str(workdir), "--prompt", prompt, "--", *command]
            proc = await trio.run_process(demo, env=env, capture_stdout=True, capture_stderr=True, check=False)
            nursery.cancel_scope.cancel()
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out + proc.stderr.decode(errors="replace")[-2000:]
    assert new.read_text() == model_server.WRITE_CONTENT, out
    lines = out.splitlines()
    asked = [i for i, line in enumerate(lines) if line.startswith("  [permission]") and "new.txt" in line]
    wrote = [i for i, line in enumerate(lines) if line.startswith(f"  [fs] wrote {new} (") and "new file" in line]
    assert asked and wrote and asked[0] < wrote[0], out
    assert [r.get("tool") for r in app.requests if r["answer"] == "tool"] == ["write_file"]


class _CapabilitiesAgent:
    """Records the client capabilities of ``initialize``; its turns end at once."""

    def __init__(self) -> None:
        self.capabilities: Any = None

    async def initialize(self, params: Any) -> Any:
        from acp_schema import v1

        self.capabilities = params.client_capabilities
        return v1.InitializeResponse(protocol_version=1, agent_capabilities=v1.AgentCapabilities())

    async def session_new(self, params: Any) -> Any:
        from acp_schema import v1

        return v1.NewSessionResponse(session_id="s1")

    async def session_prompt(self, params: Any) -> Any:
        from acp_schema import v1

        return v1.PromptResponse(stop_reason="end_turn")


@pytest.mark.parametrize("fs_read", [True, False])
async def test_the_demo_client_leaves_out_fs_read_with_no_fs_read_and_still_writes(
    fs_read: bool, tmp_path: Path
) -> None:
    """``python -m acp_trio.demo --no-fs-read`` (``run_demo(fs_read=False)``) advertises
    ``fs.writeTextFile`` without ``fs.readTextFile``: what gemini-cli needs to create a file
    through it (see the gemini-cli test above)."""
    import io
    from contextlib import asynccontextmanager

    from acp_trio import open_memory_pair
    from acp_trio.demo.__main__ import run_demo

    agent = _CapabilitiesAgent()

    @asynccontextmanager
    async def connect(client: Any) -> Any:
        async with open_memory_pair(agent, client) as (_agent_conn, client_conn):
            yield client_conn

    out = io.StringIO()
    with trio.fail_after(TIME_LIMIT):
        status = await run_demo(connect, tmp_path, "hi", out=out, fs_read=fs_read)
    assert status == 0, out.getvalue()
    assert agent.capabilities.fs.read_text_file is fs_read
    assert agent.capabilities.fs.write_text_file is True


@real
@pytest.mark.parametrize("name", sorted(INSTALLERS))
async def test_a_version_1_real_agent_passes_the_quick_checks_against_the_loopback_model(
    name: str, tmp_path: Path
) -> None:
    _install(name)
    agent = next(a for a in real_agents.AGENTS if a.name == name)
    app = model_server.ModelServer(delay=0.01, log=str(tmp_path / "requests.jsonl"))
    with trio.fail_after(AGENT_TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(model_server.serve_models, app)
            run = await conformance_real.run_one(agent, 1, tmp_path, url, conformance_real.QUICK, 60.0)
            nursery.cancel_scope.cancel()
    assert run.unavailable is None and run.error is None, run.unavailable or run.error
    got = {check: run.statuses.get(check) for check in EXPECTED[1]}
    assert got == EXPECTED[1], run.text
    assert "FAIL" not in run.statuses.values(), run.text
    paths = {r["path"] for r in app.requests}  # the turn really went through the model server
    assert "/v1/chat/completions" in paths or any(p.endswith(":streamGenerateContent") for p in paths), paths


# -- real agents through the v1 ⇄ v2 adapter (issue 33, item 4) ---------------------------------

ADAPT = [sys.executable, "-m", "acp_trio.adapt"]
HELLO = "Say hello in one short sentence."
ADAPTED_V1_ONLY = {
    "pydantic-acp": ([], True),
    # --no-client-fs: gemini-cli 0.61.0 checks whether the new file exists with fs/read_text_file when
    # the client offers it and takes the -32002 answer for a failure (see the demo client test above);
    # without the adapter's fs it reads and writes the local disk itself, after asking
    "gemini-cli": (["--no-client-fs"], True),
    "qwen-code": ([], False),  # writes without asking in its default approval mode
    "opencode": ([], False),  # likewise
}
"""The version-1-only real agents behind ``adapt --speak 2``: name -> (adapter options, whether the
write turn asks ``session/request_permission``)."""


def _cancels_at_first_chunk(base: type) -> type:
    """A demo client class (v1 or v2) that, once ``cancel_at_chunk`` is set, sets ``first_chunk``
    at the next agent message chunk (the test then sends ``session/cancel``)."""

    class Client(base):  # type: ignore[valid-type, misc]
        def __init__(self, conn: Any) -> None:
            import io

            super().__init__(conn, io.StringIO())
            self.cancel_at_chunk = False
            self.first_chunk = trio.Event()

        def on_update(self, state: Any, update: Any) -> None:
            super().on_update(state, update)
            if self.cancel_at_chunk and type(update).__name__ == "AgentMessageChunkSessionUpdate":
                self.first_chunk.set()

    return Client


async def _cancelled_turn(client: Any, session_id: str, app: model_server.ModelServer) -> Any:
    """A second turn (:data:`HELLO`, the model answering slowly) cancelled at its first agent chunk: its result."""
    app.delay = 0.5  # 24 pieces: 12 s for the answer, cancelled long before its end
    client.cancel_at_chunk = True
    results: list[Any] = []

    async def turn() -> None:
        results.append(await client.prompt(session_id, HELLO))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(turn)
        await client.first_chunk.wait()
        await client.cancel(session_id)
    return results[0]


def _agent_text(state: Any) -> str:
    return "".join(m.text for m in state.messages if m.role == "agent")


@real
@pytest.mark.parametrize("name", sorted(ADAPTED_V1_ONLY))
async def test_a_version_1_real_agent_writes_a_file_and_is_cancelled_through_the_adapter_for_our_v2_client(
    name: str, tmp_path: Path
) -> None:
    """``adapt --speak 2`` in front of a v1-only real agent, our v2 demo client
    (:class:`acp_trio.demo.client_v2.DemoClientV2`) driving it: a turn that creates a file (a tool
    call, a permission request where the agent asks, the file written: through the adapter's
    ``fs/*`` where the agent uses the client's), the model's text, ``idle`` ``end_turn``; then a
    turn cancelled at its first chunk, ``idle`` ``cancelled``."""
    from acp_schema import v2
    from acp_trio import spawn_agent
    from acp_trio.demo.client_v2 import DemoClientV2

    _install(name)
    command, extra = next(a for a in real_agents.AGENTS if a.name == name).command()
    options, asks = ADAPTED_V1_ONLY[name]
    workdir = Path(os.path.realpath(tmp_path)) / "project"
    workdir.mkdir()
    new = workdir / "new.txt"
    app = model_server.ModelServer(delay=0.01, log=str(tmp_path / "requests.jsonl"))
    client_class = _cancels_at_first_chunk(DemoClientV2)
    with trio.fail_after(AGENT_TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(model_server.serve_models, app)
            env = conformance_real.checker_env(
                {**real_agents.agent_environment(tmp_path / "state", url, name), **extra}
            )
            adapter = [*ADAPT, "--speak", "2", *options, "--", *command]
            async with spawn_agent(adapter[0], adapter[1:], client={v2: client_class}, env=env, cwd=workdir) as conn:
                client = conn.handler
                await client.initialize("acp-trio-demo-client", "1", timeout=120)
                assert conn.protocol_version == 2
                session_id = await client.new_session(workdir)
                result = await client.prompt(session_id, f"Create this file: {model_server.WRITE_MARKER}{new}")
                transcript = client.out.getvalue()
                assert result.stop_reason == "end_turn", transcript
                assert new.read_text() == model_server.WRITE_CONTENT, transcript
                state = client.states[session_id]
                assert [t.status for t in state.tool_calls.values()] == ["completed"], transcript
                assert ("  [permission] " in transcript) is asks, transcript
                assert model_server.ANSWER in _agent_text(state), transcript
                assert "[turn ended: end_turn]" in transcript

                cancelled = await _cancelled_turn(client, session_id, app)
                assert cancelled.stop_reason == "cancelled", client.out.getvalue()
            nursery.cancel_scope.cancel()


@real
@pytest.mark.parametrize("name", sorted(ADAPTED_V1_ONLY))
async def test_a_version_1_real_agent_writes_a_file_and_is_cancelled_through_the_adapter_for_the_ts_v2_client(
    name: str, tmp_path: Path
) -> None:
    """As above, driven by a v2 client written with the TypeScript SDK's v2 entry point
    (``tests/interop/ts_v2_turn_client.mjs``, its prompts given in ``ACP_TURN_PROMPTS``, cancelling
    at the second turn's first chunk: ``ACP_TURN_CANCEL=chunk``)."""
    _install(name)
    npm_dir = real_agents.install_ts_sdk()
    command, extra = next(a for a in real_agents.AGENTS if a.name == name).command()
    options, asks = ADAPTED_V1_ONLY[name]
    workdir = Path(os.path.realpath(tmp_path)) / "project"
    workdir.mkdir()
    new = workdir / "new.txt"
    app = model_server.ModelServer(delay=0.2, log=str(tmp_path / "requests.jsonl"))
    prompts = [f"Create this file: {model_server.WRITE_MARKER}{new}", HELLO]
    with trio.fail_after(AGENT_TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(model_server.serve_models, app)
            env = conformance_real.checker_env(
                {
                    **real_agents.agent_environment(tmp_path / "state", url, name),
                    **extra,
                    "ACP_INTEROP_NPM_DIR": str(npm_dir),
                    "ACP_TURN_PROMPTS": json.dumps(prompts),
                    "ACP_TURN_CANCEL": "chunk",
                }
            )
            client = ["node", str(INTEROP / "ts_v2_turn_client.mjs"), str(workdir)]
            adapter = [*ADAPT, "--speak", "2", *options, "--", *command]
            proc = await trio.run_process(
                [*client, *adapter], env=env, cwd=workdir, capture_stdout=True, capture_stderr=True, check=False
            )
            nursery.cancel_scope.cancel()
    stderr = proc.stderr.decode(errors="replace")[-3000:]
    assert proc.returncode == 0, stderr
    summary = json.loads(proc.stdout.decode().splitlines()[-1])
    assert summary["initialize"]["protocolVersion"] == 2
    assert summary["turn"][-1] == {"kind": "stop", "stopReason": "end_turn"}, summary
    assert summary["cancelledTurn"][-1] == {"kind": "stop", "stopReason": "cancelled"}, summary
    tools = [u["update"] for u in summary["updates"] if u["update"]["sessionUpdate"] == "tool_call_update"]
    assert new.is_file() and new.read_text() == model_server.WRITE_CONTENT, json.dumps([tools, summary["permissions"]])
    kinds = {u["update"]["sessionUpdate"] for u in summary["updates"]}
    assert {"user_message", "state_update", "agent_message_chunk", "tool_call_update"} <= kinds, kinds
    assert bool(summary["permissions"]) is asks, summary["permissions"]


BOTH_VERSIONS = ("claude-agent-acp", "codex-acp")


@real
@pytest.mark.parametrize("speak", [1, 2])
@pytest.mark.parametrize("name", BOTH_VERSIONS)
async def test_a_real_agent_of_both_versions_reads_a_file_and_is_cancelled_through_the_adapter(
    name: str, speak: int, real_agents_installed: Path, tmp_path: Path
) -> None:
    """claude-agent-acp and codex-acp speak v1 and v2: behind ``adapt --speak 1`` they negotiate v2
    with the adapter and our v1 demo client drives them; behind ``--speak 2``, v1, and our v2 demo
    client.  A turn with a tool call: Claude Code creates a file (the model server's write marker:
    its ``Write``, a diff each version shows: v1 ``oldText``/``newText``, v2 ``changes`` and a
    patch; through the adapter's ``fs/write_text_file`` behind ``--speak 2``), Codex reads one (the
    read marker: its ``shell_command`` ``cat``); the model's text, ``end_turn``; then a turn
    cancelled at its first chunk.  (Neither asks permission here: Claude Code runs with
    ``IS_SANDBOX=1``, and the model server makes Codex only read.)"""
    from acp_schema import v1, v2
    from acp_trio import spawn_agent
    from acp_trio.demo.client import DemoClient
    from acp_trio.demo.client_v2 import DemoClientV2

    command, extra = next(a for a in real_agents.AGENTS if a.name == name).command()
    workdir = Path(os.path.realpath(tmp_path)) / "project"
    workdir.mkdir()
    notes = workdir / "notes.txt"
    notes.write_text("buy milk\n")
    new = workdir / "new.txt"
    app = model_server.ModelServer(delay=0.01, log=str(tmp_path / "requests.jsonl"))
    variant, base = (v1, DemoClient) if speak == 1 else (v2, DemoClientV2)
    with trio.fail_after(AGENT_TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(model_server.serve_models, app)
            env = conformance_real.checker_env(
                {**real_agents.agent_environment(tmp_path / "state", url, name), **extra}
            )
            adapter = [*ADAPT, "--speak", str(speak), "--", *command]
            client_class = _cancels_at_first_chunk(base)
            async with spawn_agent(
                adapter[0], adapter[1:], client={variant: client_class}, env=env, cwd=workdir
            ) as conn:
                client = conn.handler
                await client.initialize("acp-trio-demo-client", "1", timeout=120)
                assert conn.protocol_version == speak
                session_id = await client.new_session(workdir)
                if name == "claude-agent-acp":
                    prompt = f"Create this file: {model_server.WRITE_MARKER}{new}"
                else:
                    prompt = f"Read my notes file and say what it says: {model_server.TOOL_MARKER}{notes}"
                result = await client.prompt(session_id, prompt)
                transcript = client.out.getvalue()
                assert result.stop_reason == "end_turn", transcript
                state = client.states[session_id]
                statuses = [t.status for t in state.tool_calls.values()]
                assert statuses and set(statuses) == {"completed"}, transcript
                assert model_server.ANSWER in _agent_text(state), transcript
                assert MODEL_PATH[name] in {r["path"] for r in app.requests}
                if name == "claude-agent-acp":
                    assert new.read_text() == model_server.WRITE_CONTENT, transcript
                    (tool,) = state.tool_calls.values()
                    assert any(type(item).__name__ == "DiffToolCallContent" for item in tool.content), tool

                cancelled = await _cancelled_turn(client, session_id, app)
                assert cancelled.stop_reason == "cancelled", client.out.getvalue()
            nursery.cancel_scope.cancel()

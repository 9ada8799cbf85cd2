"""The example LLM agent (``python -m examples.llm_agent``) against a loopback model server that plays each
provider's streaming API (``tests/llm_loopback.py``), driven by ``StandardClient``: no network, no key.

Over stdio (a real agent process, hypercorn serving the loopback): a full turn per provider with
text, reasoning, a permission-gated file edit, a terminal command, a file read and an MCP tool call,
usage; ``session/load`` in a new agent process replays it and the model gets the history back; a
denied permission; provider errors (an HTTP status, an error event mid-stream); ``session/cancel``
closing the HTTP stream.  In memory (``open_memory_pair``, the SDK given an ``httpx2.AsyncClient``
whose transport runs the loopback in process, trio's autojump clock): the cancel latency bound.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
import trio.testing
from interop.model_server import serve_models
from llm_loopback import (
    Hang,
    HttpError,
    Loopback,
    Reasoning,
    StreamError,
    StreamingAsgiTransport,
    Text,
    ToolCall,
    Usage,
    requests_to,
)

from acp_schema import v1
from acp_trio import (
    AUTH_REQUIRED,
    INTERNAL_ERROR,
    ClientSideConnection,
    RequestError,
    StandardClient,
    allow_all,
    ask,
    deny_all,
    open_memory_pair,
    spawn_agent,
)
from acp_trio.session_store import MemorySessionStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the stdio transport and /bin/sh are POSIX-only")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.llm_agent.agent import DENIED_RESULT, LlmAgent  # noqa: E402
from examples.llm_agent.providers import Settings  # noqa: E402

TOOLS_SERVER = Path(__file__).parent / "mcp_servers" / "tools_server.py"
PROVIDERS = ("openai", "anthropic")
PATHS = {"openai": "/v1/responses", "anthropic": "/v1/messages"}
KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
TIMEOUT = 30


class WatchingClient(StandardClient):
    """A ``StandardClient`` that can wait until a session's last message reads some text."""

    def __init__(self, conn: ClientSideConnection, **options: Any) -> None:
        super().__init__(conn, **options)
        self._changed = trio.Event()

    def on_update(self, state: Any, update: Any) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_text(self, session_id: str, text: str) -> None:
        while not (self.states[session_id].messages and self.states[session_id].messages[-1].text == text):
            await self._changed.wait()


@asynccontextmanager
async def loopback(replies: list[Any]) -> AsyncIterator[tuple[Loopback, str]]:
    app = Loopback(list(replies))
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_models, app)
        yield app, url
        nursery.cancel_scope.cancel()


def agent_args(provider: str, url: str, store: Path | None = None) -> list[str]:
    base = url + "/v1" if provider == "openai" else url
    args = ["-m", "examples.llm_agent", "--provider", provider, "--model", "loop-model", "--base-url", base]
    args += ["--max-retries", "0", "--context-window", "1000"]
    if provider == "anthropic":
        args += ["--thinking-budget", "1024"]
    else:
        args += ["--reasoning-effort", "low"]
    if store is not None:
        args += ["--store", str(store)]
    return args


@asynccontextmanager
async def agent(
    provider: str, url: str, *, store: Path | None = None, policy: Any = None, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSideConnection]:
    make_client = functools.partial(WatchingClient, policy=policy if policy is not None else allow_all())
    agent_env = {KEYS[provider]: "test-key", "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    agent_env["ACP_LLM_AGENT_STORE"] = ""  # --store only when a test gives one (--base-url beats *_BASE_URL)
    agent_env.update(env or {})
    async with spawn_agent(
        sys.executable, agent_args(provider, url, store), client=make_client, env=agent_env, cwd=ROOT
    ) as conn:
        client: StandardClient = conn.handler
        init = v1.InitializeRequest(protocol_version=1, client_capabilities=client.capabilities)
        await conn.agent.initialize(init, timeout=TIMEOUT)
        yield conn


def mcp_servers() -> list[v1.McpServer]:
    return [v1.McpServerStdio(name="tools", command=sys.executable, args=[str(TOOLS_SERVER), "stdio"], env=[])]


def tool_outputs(provider: str, body: dict[str, Any]) -> dict[str, str]:
    """call id -> the tool result text the agent sent back in a request body."""
    out: dict[str, str] = {}
    if provider == "openai":
        for item in body["input"]:
            if item.get("type") == "function_call_output":
                out[item["call_id"]] = item["output"]
    else:
        for message in body["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                if block.get("type") == "tool_result":
                    out[block["tool_use_id"]] = block["content"]
    return out


def tool_names(provider: str, body: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in body.get("tools", [])]


def user_texts(provider: str, body: dict[str, Any]) -> list[str]:
    if provider == "openai":
        return [item["content"] for item in body["input"] if item.get("role") == "user"]
    texts = []
    for message in body["messages"]:
        if message["role"] == "user":
            texts += [block["text"] for block in message["content"] if block.get("type") == "text"]
    return texts


def full_turn_script(provider: str) -> list[Any]:
    return [
        [
            Reasoning("The user wants a file; write it first."),
            Text("I'll write hello.txt."),
            ToolCall("write_file", {"path": "hello.txt", "content": "hello from the model\n"}, "call_write"),
            Usage(100, 20, reasoning_tokens=7, cached_tokens=30),
        ],
        [
            ToolCall("run_command", {"command": "echo ran-in-a-terminal"}, "call_run"),
            ToolCall("read_file", {"path": "notes.txt"}, "call_read"),
            Usage(150, 10),
        ],
        [ToolCall("mcp__tools__add", {"a": 2, "b": 3}, "call_add"), Usage(200, 10)],
        [Text("All done: the sum is 5."), Usage(250, 8)],
    ]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_full_turn_then_session_load_in_a_new_process(provider: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("remember the milk\n", encoding="utf-8")
    store = tmp_path / "sessions.db"
    asked: list[tuple[str, str]] = []

    async def allow(request: Any) -> str:
        asked.append((request.tool_call.tool_call_id, request.tool_call.kind))
        return next(option.option_id for option in request.options if option.kind == "allow_once")

    script = [*full_turn_script(provider), [Text("You asked me to write a file."), Usage(300, 9)]]
    with trio.fail_after(TIMEOUT):
        async with loopback(script) as (app, url):
            async with agent(provider, url, store=store, policy=ask(allow)) as conn:
                client: StandardClient = conn.handler
                new = await conn.agent.session_new(v1.NewSessionRequest(cwd=str(work), mcp_servers=mcp_servers()))
                sid = new.session_id
                result = await client.prompt(sid, "Write hello.txt, run echo, read my notes, add 2 and 3.")
                assert isinstance(result, v1.PromptResponse)
                assert result.stop_reason == "end_turn"
                state = client.states[sid]

                # text and reasoning
                agent_text = [m.text for m in state.messages if m.role == "agent"]
                assert agent_text == ["I'll write hello.txt.", "All done: the sum is 5."]
                assert [m.text for m in state.messages if m.role == "thought"] == [
                    "The user wants a file; write it first."
                ]
                # tool calls: kinds, statuses, permission asked for each with its kind
                calls = state.tool_calls
                assert {cid: (c.kind, c.status) for cid, c in calls.items()} == {
                    "call_write": ("edit", "completed"),
                    "call_run": ("execute", "completed"),
                    "call_read": ("read", "completed"),
                    "call_add": ("other", "completed"),
                }
                assert asked == [
                    ("call_write", "edit"),
                    ("call_run", "execute"),
                    ("call_read", "read"),
                    ("call_add", "other"),
                ]
                assert (work / "hello.txt").read_text(encoding="utf-8") == "hello from the model\n"
                diff = calls["call_write"].content[0]
                assert isinstance(diff, v1.DiffToolCallContent) and diff.new_text == "hello from the model\n"
                assert any(isinstance(c, v1.TerminalToolCallContent) for c in calls["call_run"].content)
                assert calls["call_add"].raw_output == {"output": "5", "isError": False}
                # usage: usage_update after each model call (the last: 250 + 8), the turn's totals in _meta
                assert state.usage is not None and (state.usage.used, state.usage.size) == (258, 1000)
                assert isinstance(result.meta, dict)
                usage = result.meta["usage"]
                assert usage["inputTokens"] == 700 and usage["outputTokens"] == 48 and usage["totalTokens"] == 748
                if provider == "openai":
                    assert usage["thoughtTokens"] == 7
                assert usage["cachedReadTokens"] == 30

            # what the model API received: tools offered, the results sent back
            requests = requests_to(app, PATHS[provider])
            assert len(requests) == 4
            names = tool_names(provider, requests[0].body)
            assert names[:3] == ["read_file", "write_file", "run_command"] and "mcp__tools__add" in names
            assert any(value.endswith("test-key") for value in requests[0].headers.values())  # the key from the env
            outputs = tool_outputs(provider, requests[3].body)
            assert outputs["call_write"].startswith("Wrote 21 characters to ")
            assert "ran-in-a-terminal" in outputs["call_run"] and "[exit code 0]" in outputs["call_run"]
            assert outputs["call_read"] == "remember the milk\n"
            assert outputs["call_add"] == "5"
            if provider == "anthropic":  # the thinking block goes back with its signature, before the tool use
                assistant = requests[1].body["messages"][1]
                assert assistant["content"][0] == {
                    "type": "thinking",
                    "thinking": "The user wants a file; write it first.",
                    "signature": "sig-0",
                }
                assert requests[0].body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
            else:
                assert requests[0].body["reasoning"] == {"effort": "low", "summary": "auto"}
                assert requests[0].body["store"] is False

            # a new agent process loads the session from the store: replay, then the model gets the history
            async with agent(provider, url, store=store) as conn:
                client = conn.handler
                load = v1.LoadSessionRequest(session_id=sid, cwd=str(work), mcp_servers=[])
                await conn.agent.session_load(load, timeout=TIMEOUT)
                replayed = client.states[sid]
                assert [m.text for m in replayed.messages if m.role == "agent"] == agent_text
                assert {cid: c.status for cid, c in replayed.tool_calls.items()} == {cid: "completed" for cid in calls}
                result = await client.prompt(sid, "What did I ask?")
                assert isinstance(result, v1.PromptResponse) and result.stop_reason == "end_turn"
            last = requests_to(app, PATHS[provider])[-1].body
            assert user_texts(provider, last) == [
                "Write hello.txt, run echo, read my notes, add 2 and 3.",
                "What did I ask?",
            ]
            assert tool_outputs(provider, last) == outputs
            assert "mcp__tools__add" not in tool_names(provider, last)  # no MCP servers given to session/load


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_denied_permission_and_provider_errors(provider: str, tmp_path: Path) -> None:
    script = [
        [Text("Writing it."), ToolCall("write_file", {"path": "x.txt", "content": "no\n"}, "call_x")],
        [Text("OK, I won't.")],
        HttpError(429, "slow down, please"),
        [Text("Half an answer"), StreamError("the model fell over")],
        [Text("Still here.")],
    ]
    with trio.fail_after(TIMEOUT):
        async with loopback(script) as (app, url), agent(provider, url, policy=deny_all()) as conn:
            client: StandardClient = conn.handler
            sid = await client.new_session(tmp_path)
            result = await client.prompt(sid, "Write x.txt.")
            assert isinstance(result, v1.PromptResponse) and result.stop_reason == "end_turn"
            call = client.states[sid].tool_calls["call_x"]
            assert (call.kind, call.status) == ("edit", "failed")
            assert not (tmp_path / "x.txt").exists()
            denied = tool_outputs(provider, requests_to(app, PATHS[provider])[1].body)
            assert denied == {"call_x": DENIED_RESULT}

            # an HTTP error status: a JSON-RPC error with code, message and data, and the agent lives on
            with pytest.raises(RequestError) as http_error:
                await client.prompt(sid, "Again.")
            assert http_error.value.code == INTERNAL_ERROR
            assert f"{provider} HTTP 429: slow down, please" in http_error.value.message
            assert "rate limited" in http_error.value.message
            assert http_error.value.data["status"] == 429 and http_error.value.data["provider"] == provider

            # an error event in the middle of the stream
            with pytest.raises(RequestError) as stream_error:
                await client.prompt(sid, "Once more.")
            assert stream_error.value.code == INTERNAL_ERROR
            assert "the model fell over" in stream_error.value.message
            assert stream_error.value.data["status"] is None

            result = await client.prompt(sid, "Are you there?")
            assert isinstance(result, v1.PromptResponse) and result.stop_reason == "end_turn"
            assert client.states[sid].messages[-1].text == "Still here."
            # the history kept going: every prompt so far reached the model
            assert user_texts(provider, requests_to(app, PATHS[provider])[-1].body) == [
                "Write x.txt.",
                "Again.",
                "Once more.",
                "Are you there?",
            ]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_session_cancel_closes_the_http_stream_at_once(provider: str, tmp_path: Path) -> None:
    script = [[Text("Let me think about this for a long time"), Hang()], [Text("Fresh start.")]]
    with trio.fail_after(TIMEOUT):
        async with loopback(script) as (app, url), agent(provider, url) as conn:
            client: WatchingClient = conn.handler
            sid = await client.new_session(tmp_path)
            results: list[Any] = []
            async with trio.open_nursery() as nursery:

                async def turn() -> None:
                    results.append(await client.prompt(sid, "Think hard."))

                nursery.start_soon(turn)
                await app.hanging.wait()  # the server sent the text, then keeps the stream open
                await client.wait_text(sid, "Let me think about this for a long time")  # the user saw it
                await client.cancel(sid)
                await app.disconnected.wait()
            # the server saw the stream closed (the hang never ends on its own); the bound in time,
            # 100 ms, is asserted on trio's clock in test_cancel_latency_on_trio_clock
            assert app.disconnected_at is not None
            assert [r.stop_reason for r in results] == ["cancelled"]
            assert client.states[sid].messages[-1].text == "Let me think about this for a long time"
            # the next turn works, and the cancelled turn's partial answer is in the history
            result = await client.prompt(sid, "Never mind.")
            assert isinstance(result, v1.PromptResponse) and result.stop_reason == "end_turn"
            body = requests_to(app, PATHS[provider])[-1].body
            assert "Let me think about this for a long time" in json.dumps(body)


@asynccontextmanager
async def memory_agent(
    provider: str, app: Loopback, nursery: trio.Nursery, *, policy: Any = None
) -> AsyncIterator[WatchingClient]:
    """The agent in process (``open_memory_pair``), its SDK client on an in-process streaming transport."""
    http = httpx2.AsyncClient(transport=StreamingAsgiTransport(app, nursery))
    base = "http://loopback/v1" if provider == "openai" else "http://loopback"
    settings = Settings(provider=provider, model="loop-model", base_url=base, max_retries=0, http_client=http)  # type: ignore[arg-type]
    make_agent = functools.partial(LlmAgent, settings=settings, store=MemorySessionStore())
    make_client = functools.partial(WatchingClient, policy=policy if policy is not None else allow_all())
    async with open_memory_pair(make_agent, make_client) as (_, client_conn):
        client: WatchingClient = client_conn.handler
        await client.initialize()
        yield client


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_cancel_latency_on_trio_clock(
    provider: str, tmp_path: Path, mock_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In memory on trio's mock clock: the stream is closed within 100 ms of session/cancel on that
    clock (in fact at the same instant: nothing on the way sleeps), and the turn answers cancelled.

    The clock jumps ahead whenever every task has waited 0.2 s of real time, not at once: the SDKs
    look up the platform once per client in a worker thread (``asyncify(get_platform)``), which an
    autojump threshold of 0 would take for idleness and jump over to the next deadline."""
    mock_clock.autojump_threshold = 0.2
    monkeypatch.setenv(KEYS[provider], "test-key")
    app = Loopback([[Text("Slowly"), Hang()]])
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery, memory_agent(provider, app, nursery) as client:
            sid = await client.new_session(tmp_path)
            results: list[Any] = []

            answered = trio.Event()

            async def turn() -> None:
                results.append(await client.prompt(sid, "Go."))
                answered.set()

            nursery.start_soon(turn)
            await app.hanging.wait()
            await client.wait_text(sid, "Slowly")
            await trio.sleep(5)  # on the mock clock: the stream stays open, nothing times out
            assert not app.disconnected.is_set() and not results
            sent = trio.current_time()
            await client.cancel(sid)
            await app.disconnected.wait()
            assert app.disconnected_at is not None and app.disconnected_at - sent < 0.1
            await answered.wait()
            assert results[0].stop_reason == "cancelled"
            assert trio.current_time() - sent < 0.1


async def test_a_missing_key_is_a_clear_error_naming_the_variable(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    for provider, variable in (("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")):
        monkeypatch.delenv(variable, raising=False)
        monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
        app = Loopback([])
        async with trio.open_nursery() as nursery, memory_agent(provider, app, nursery) as client:
            sid = await client.new_session(tmp_path)
            with pytest.raises(RequestError) as error:
                await client.prompt(sid, "Hello?")
            assert error.value.code == AUTH_REQUIRED
            assert variable in error.value.message and "no API key" in error.value.message
            assert app.requests == []

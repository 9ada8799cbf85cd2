"""The example LLM agent (``python -m examples.llm_agent``) against a loopback model server that plays each
provider's streaming API (``tests/llm_loopback.py``), driven by ``StandardClient``: no network, no key.

One implementation (``acp_trio.neutral``) serves protocol version 1 and 2, so the tests that drive a
turn run in both, each asserting on its version's wire: over stdio (a real agent process, hypercorn
serving the loopback), a full turn per provider with text, reasoning, a permission-gated file edit,
a command shown as it runs, a file read and an MCP tool call, usage; a denied permission; provider
errors (an HTTP status, an error event mid-stream: v1's error answer, v2's ``idle`` with
``stopReason: "error"``); ``session/cancel`` closing the HTTP stream.  In memory (``open_memory_pair``,
the SDK given an ``httpx2.AsyncClient`` whose transport runs the loopback in process): a session made
on one version, loaded on the other by a second connection to the same agent, the model getting the
history back; the cancel latency bound on trio's clock; a missing key.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
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

from acp_schema import v1, v2
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

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="the stdio transport and /bin/sh are POSIX-only"),
    # the example agent's processes and its providers' SDKs against a loopback model server: once, on
    # 3.11 (about 75 s of CPU per interpreter; the runtime under it is tested on every interpreter)
    pytest.mark.one_interpreter,
]

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.llm_agent.agent import DENIED_RESULT, LlmAgent  # noqa: E402
from examples.llm_agent.providers import Settings  # noqa: E402

TOOLS_SERVER = Path(__file__).parent / "mcp_servers" / "tools_server.py"
PROVIDERS = ("openai", "anthropic")
VARIANTS = pytest.mark.parametrize("variant", [v1, v2], ids=["v1", "v2"])
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


def asked_call(request: Any) -> tuple[str, str]:
    """(toolCallId, kind) a permission request is about: v1 ``toolCall``, v2 ``subject.toolCall``."""
    call = request.tool_call if isinstance(request, v1.RequestPermissionRequest) else request.subject.tool_call
    return call.tool_call_id, call.kind


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


def agent_env(provider: str) -> dict[str, str]:
    """The agent process's environment: a dummy key, and ``examples`` importable."""
    env = {KEYS[provider]: "test-key", "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    env["ACP_LLM_AGENT_STORE"] = ""  # --store only when a test gives one (--base-url beats *_BASE_URL)
    return env


@asynccontextmanager
async def agent(
    provider: str, url: str, variant: ModuleType, *, policy: Any = None, store: Path | None = None
) -> AsyncIterator[WatchingClient]:
    """The agent as a process (stdio) with a ``WatchingClient`` of ``variant``'s protocol version,
    initialized (the agent serves both: the client's ``initialize`` picks)."""
    make_client = WatchingClient.for_versions(variant, policy=policy if policy is not None else allow_all())
    async with spawn_agent(
        sys.executable, agent_args(provider, url, store), client=make_client, env=agent_env(provider), cwd=ROOT
    ) as conn:
        client: WatchingClient = conn.handler
        await client.initialize(timeout=TIMEOUT)
        assert conn.protocol_version == variant.PROTOCOL_VERSION
        yield client


async def new_session(client: StandardClient, cwd: Path, *, mcp: bool = False) -> str:
    """``session/new`` in the client's version (with the MCP server of ``tools_server.py`` if ``mcp``)."""
    if not mcp:
        return await client.new_session(cwd)
    if client.conn.protocol_version >= 2:
        server: Any = v2.StdioMcpServer(name="tools", command=sys.executable, args=[str(TOOLS_SERVER), "stdio"], env=[])
        new: Any = await client.conn.agent.session_new(v2.NewSessionRequest(cwd=str(cwd), mcp_servers=[server]))
    else:
        server = v1.McpServerStdio(name="tools", command=sys.executable, args=[str(TOOLS_SERVER), "stdio"], env=[])
        new = await client.conn.agent.session_new(v1.NewSessionRequest(cwd=str(cwd), mcp_servers=[server]))
    session_id: str = new.session_id
    return session_id


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


@VARIANTS
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_full_turn(provider: str, variant: ModuleType, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("remember the milk\n", encoding="utf-8")
    asked: list[tuple[str, str]] = []

    async def allow(request: Any) -> str:
        asked.append(asked_call(request))
        return next(option.option_id for option in request.options if option.kind == "allow_once")

    with trio.fail_after(TIMEOUT):
        async with loopback(full_turn_script(provider)) as (app, url):
            async with agent(provider, url, variant, policy=ask(allow)) as client:
                sid = await new_session(client, work, mcp=True)
                result = await client.prompt(sid, "Write hello.txt, run echo, read my notes, add 2 and 3.")
                assert result.stop_reason == "end_turn"
                if variant is v1:  # the turn's tokens summed (v2's idle carries them the same way)
                    usage = result.meta["acp-trio/usage"]
                    assert (usage["totalTokens"], usage["inputTokens"], usage["outputTokens"]) == (748, 700, 48)
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
                assert isinstance(diff, variant.DiffToolCallContent)
                if variant is v1:  # the exact texts
                    assert diff.path == str(work / "hello.txt") and diff.new_text == "hello from the model\n"
                    assert not isinstance(diff.old_text, str)  # a new file
                    # the client offers terminals: the command runs in one of its own, embedded
                    content = calls["call_run"].content
                    assert any(isinstance(c, v1.TerminalToolCallContent) for c in content)
                    assert [c.content.text for c in content if isinstance(c, v1.ContentToolCallContent)] == [
                        "$ echo ran-in-a-terminal",
                        "[exit code 0]",
                    ]
                else:  # changes and a git patch; the command in a display terminal
                    assert [(type(c).__name__, c.path) for c in diff.changes] == [
                        ("AddDiffChange", str(work / "hello.txt"))
                    ]
                    assert "+hello from the model" in diff.patch.text
                    [terminal] = [c for c in calls["call_run"].content if isinstance(c, v2.TerminalToolCallContent)]
                    shown_terminal = state.terminals[terminal.terminal_id]
                    assert shown_terminal.command == "/bin/sh -c echo ran-in-a-terminal"
                    assert b"ran-in-a-terminal\n" in shown_terminal.output
                    assert shown_terminal.exit_status is not None and shown_terminal.exit_status.exit_code == 0
                assert calls["call_add"].raw_output == {"output": "5", "isError": False}
                # usage: usage_update after each model call (the last: 250 + 8)
                assert state.usage is not None and (state.usage.used, state.usage.size) == (258, 1000)

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


async def test_with_a_store_a_v1_session_is_loaded_by_a_new_process(tmp_path: Path) -> None:
    """``--store``: v1 connections keep their sessions in the SQLite store; a second agent process
    replays one on ``session/load`` and rebuilds the model's view from it (prompts, the agent's
    text, each tool call's ``rawInput`` and final ``rawOutput``)."""
    store = tmp_path / "sessions.db"
    script = [
        [Text("Writing it."), ToolCall("write_file", {"path": "a.txt", "content": "A\n"}, "call_a")],
        [Text("Written.")],
        [Text("You asked me to write a.txt.")],
    ]
    with trio.fail_after(TIMEOUT):
        async with loopback(script) as (app, url):
            async with agent("anthropic", url, v1, store=store) as client:
                sid = await client.new_session(tmp_path)
                assert (await client.prompt(sid, "Write a.txt.")).stop_reason == "end_turn"
                made = client.states[sid]
            async with agent("anthropic", url, v1, store=store) as client:
                load = v1.LoadSessionRequest(session_id=sid, cwd=str(tmp_path), mcp_servers=[])
                await client.conn.agent.session_load(load, timeout=TIMEOUT)
                replayed = client.states[sid]
                assert [(m.role, m.text) for m in replayed.messages] == [(m.role, m.text) for m in made.messages]
                assert {c: t.status for c, t in replayed.tool_calls.items()} == {"call_a": "completed"}
                result = await client.prompt(sid, "What did I ask?")
                assert result.stop_reason == "end_turn"
    last = requests_to(app, PATHS["anthropic"])[-1].body
    assert user_texts("anthropic", last) == ["Write a.txt.", "What did I ask?"]
    assert tool_outputs("anthropic", last) == {"call_a": f"Wrote 2 characters to {tmp_path / 'a.txt'}."}


@VARIANTS
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_denied_permission_and_provider_errors(provider: str, variant: ModuleType, tmp_path: Path) -> None:
    script = [
        [Text("Writing it."), ToolCall("write_file", {"path": "x.txt", "content": "no\n"}, "call_x")],
        [Text("OK, I won't.")],
        HttpError(429, "slow down, please"),
        [Text("Half an answer"), StreamError("the model fell over")],
        [Text("Still here.")],
    ]

    async def failed_turn(client: WatchingClient, sid: str, text: str) -> tuple[int, str, Any]:
        """A turn the agent ends with an error: v1 answers session/prompt with it, v2 ends idle with it."""
        if variant is v1:
            with pytest.raises(RequestError) as error:
                await client.prompt(sid, text)
            return error.value.code, error.value.message, error.value.data
        result = await client.prompt(sid, text)
        assert result.stop_reason == "error"
        return result.error.code, result.error.message, result.error.data

    with trio.fail_after(TIMEOUT):
        async with loopback(script) as (app, url), agent(provider, url, variant, policy=deny_all()) as client:
            sid = await client.new_session(tmp_path)
            result = await client.prompt(sid, "Write x.txt.")
            assert result.stop_reason == "end_turn"
            call = client.states[sid].tool_calls["call_x"]
            assert (call.kind, call.status) == ("edit", "failed")
            assert not (tmp_path / "x.txt").exists()
            denied = tool_outputs(provider, requests_to(app, PATHS[provider])[1].body)
            assert denied == {"call_x": DENIED_RESULT}

            # an HTTP error status: a JSON-RPC error with code, message and data, and the agent lives on
            code, message, data = await failed_turn(client, sid, "Again.")
            assert code == INTERNAL_ERROR
            assert f"{provider} HTTP 429: slow down, please" in message and "rate limited" in message
            assert data["status"] == 429 and data["provider"] == provider

            # an error event in the middle of the stream
            code, message, data = await failed_turn(client, sid, "Once more.")
            assert code == INTERNAL_ERROR and "the model fell over" in message
            assert data["status"] is None

            result = await client.prompt(sid, "Are you there?")
            assert result.stop_reason == "end_turn"
            assert client.states[sid].messages[-1].text == "Still here."
            # the history kept going: every prompt so far reached the model
            assert user_texts(provider, requests_to(app, PATHS[provider])[-1].body) == [
                "Write x.txt.",
                "Again.",
                "Once more.",
                "Are you there?",
            ]


@VARIANTS
async def test_session_cancel_closes_the_http_stream_at_once(variant: ModuleType, tmp_path: Path) -> None:
    provider = "openai" if variant is v1 else "anthropic"  # the stream's closing is the SDKs'; one each
    script = [[Text("Let me think about this for a long time"), Hang()], [Text("Fresh start.")]]
    with trio.fail_after(TIMEOUT):
        async with loopback(script) as (app, url), agent(provider, url, variant) as client:
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
            assert result.stop_reason == "end_turn"
            body = requests_to(app, PATHS[provider])[-1].body
            assert "Let me think about this for a long time" in json.dumps(body)


def memory_settings(provider: str, app: Loopback, nursery: trio.Nursery) -> Settings:
    """Settings whose SDK client runs the loopback in process (a streaming ASGI transport)."""
    http = httpx2.AsyncClient(transport=StreamingAsgiTransport(app, nursery))
    base = "http://loopback/v1" if provider == "openai" else "http://loopback"
    return Settings(provider=provider, model="loop-model", base_url=base, max_retries=0, http_client=http)  # type: ignore[arg-type]


@asynccontextmanager
async def connect(llm: LlmAgent, variant: ModuleType, *, policy: Any = None) -> AsyncIterator[WatchingClient]:
    """One more connection to the running agent ``llm`` (``open_memory_pair``), in ``variant``'s version."""
    make_client = WatchingClient.for_versions(variant, policy=policy if policy is not None else allow_all())
    async with open_memory_pair(llm, make_client) as (_, client_conn):
        client: WatchingClient = client_conn.handler
        await client.initialize()
        assert client_conn.protocol_version == variant.PROTOCOL_VERSION
        yield client


@asynccontextmanager
async def memory_agent(
    provider: str, app: Loopback, nursery: trio.Nursery, variant: ModuleType, *, policy: Any = None
) -> AsyncIterator[WatchingClient]:
    """The agent in process, its SDK client on an in-process streaming transport, one connection."""
    llm = LlmAgent(memory_settings(provider, app, nursery))
    async with llm.running(), connect(llm, variant, policy=policy) as client:
        yield client


@pytest.mark.parametrize(("made_on", "loaded_on"), [(v1, v2), (v2, v1)], ids=["v1-then-v2", "v2-then-v1"])
async def test_a_session_made_on_one_version_is_loaded_on_the_other(
    made_on: ModuleType, loaded_on: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One agent object, two connections: the second (the other protocol version) loads the
    session (v1 ``session/load``, v2 ``session/resume`` from start), gets the first one's messages
    and tool calls replayed in its own version, and the model continues with the whole history."""
    monkeypatch.setenv(KEYS["openai"], "test-key")
    script = [
        [Text("Writing it."), ToolCall("write_file", {"path": "a.txt", "content": "A\n"}, "call_a")],
        [Text("Written."), Usage(40, 4)],
        [Text("You asked me to write a.txt.")],
    ]
    app = Loopback(script)
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            llm = LlmAgent(memory_settings("openai", app, nursery))
            async with llm.running():
                async with connect(llm, made_on) as first:
                    sid = await first.new_session(tmp_path)
                    assert (await first.prompt(sid, "Write a.txt.")).stop_reason == "end_turn"
                    made = first.states[sid]
                async with connect(llm, loaded_on) as second:
                    if loaded_on is v1:
                        load = v1.LoadSessionRequest(session_id=sid, cwd=str(tmp_path), mcp_servers=[])
                        await second.conn.agent.session_load(load)
                    else:
                        resume = v2.ResumeSessionRequest(
                            session_id=sid, cwd=str(tmp_path), replay_from=v2.StartReplayFrom()
                        )
                        await second.conn.agent.session_resume(resume)
                    replayed = second.states[sid]
                    assert [(m.role, m.text) for m in replayed.messages] == [(m.role, m.text) for m in made.messages]
                    assert [m.text for m in replayed.messages] == ["Write a.txt.", "Writing it.", "Written."]
                    assert {c: (t.kind, t.status) for c, t in replayed.tool_calls.items()} == {
                        "call_a": ("edit", "completed")
                    }
                    assert isinstance(replayed.tool_calls["call_a"].content[0], loaded_on.DiffToolCallContent)
                    result = await second.prompt(sid, "What did I ask?")
                    assert result.stop_reason == "end_turn"
                    assert replayed.messages[-1].text == "You asked me to write a.txt."
    last = requests_to(app, PATHS["openai"])[-1].body
    assert user_texts("openai", last) == ["Write a.txt.", "What did I ask?"]
    assert tool_outputs("openai", last) == {"call_a": f"Wrote 2 characters to {tmp_path / 'a.txt'}."}
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "A\n"


@VARIANTS
async def test_the_read_mode_reads_without_asking_and_still_asks_before_a_write(
    variant: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's ``mode`` option: offered as a config option (v1 also as ``modes``), set with
    ``session/set_config_option`` (v1 also ``session/set_mode``); in ``read`` a read runs without a
    permission request, a write still gets one."""
    monkeypatch.setenv(KEYS["openai"], "test-key")
    (tmp_path / "notes.txt").write_text("milk\n", encoding="utf-8")
    script = [
        [ToolCall("read_file", {"path": "notes.txt"}, "call_read")],
        [ToolCall("write_file", {"path": "b.txt", "content": "B\n"}, "call_write")],
        [Text("Read and written.")],
    ]
    app = Loopback(script)
    asked: list[str] = []

    async def allow(request: Any) -> str:
        asked.append(asked_call(request)[0])
        return "allow-once"

    with trio.fail_after(TIMEOUT):
        async with (
            trio.open_nursery() as nursery,
            memory_agent("openai", app, nursery, variant, policy=ask(allow)) as client,
        ):
            new: Any = await client.conn.agent.session_new(
                v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[])
                if variant is v1
                else v2.NewSessionRequest(cwd=str(tmp_path))
            )
            sid = new.session_id
            [option] = new.config_options
            assert option.category == "mode" and option.current_value == "ask"
            assert [o.value for o in option.options] == ["ask", "read"]
            if variant is v1:  # v1 keeps modes and config options in sync; set_mode sets the option
                assert new.modes.current_mode_id == "ask"
                await client.conn.agent.session_set_mode(v1.SetSessionModeRequest(session_id=sid, mode_id="read"))
            else:
                answer = await client.conn.agent.session_set_config_option(
                    v2.IdSetSessionConfigOptionRequest(session_id=sid, config_id="mode", value="read")
                )
                assert answer.config_options[0].current_value == "read"
            result = await client.prompt(sid, "Read notes.txt, write b.txt.")
            assert result.stop_reason == "end_turn"
            calls = client.states[sid].tool_calls
            assert {c: t.status for c, t in calls.items()} == {"call_read": "completed", "call_write": "completed"}
            assert asked == ["call_write"]
    assert (tmp_path / "b.txt").read_text(encoding="utf-8") == "B\n"


@VARIANTS
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_cancel_latency_on_trio_clock(
    provider: str,
    variant: ModuleType,
    tmp_path: Path,
    mock_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In memory on trio's mock clock: the stream is closed within 100 ms of session/cancel on that
    clock (in fact at the same instant: nothing on the way sleeps), and the turn ends cancelled.

    The clock jumps ahead whenever every task has waited 0.2 s of real time, not at once: the SDKs
    look up the platform once per client in a worker thread (``asyncify(get_platform)``), which an
    autojump threshold of 0 would take for idleness and jump over to the next deadline."""
    mock_clock.autojump_threshold = 0.2
    monkeypatch.setenv(KEYS[provider], "test-key")
    app = Loopback([[Text("Slowly"), Hang()]])
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery, memory_agent(provider, app, nursery, variant) as client:
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


@VARIANTS
async def test_a_missing_key_is_a_clear_error_naming_the_variable(
    variant: ModuleType, tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    for provider, variable in (("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")):
        monkeypatch.delenv(variable, raising=False)
        monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
        app = Loopback([])
        async with trio.open_nursery() as nursery, memory_agent(provider, app, nursery, variant) as client:
            sid = await client.new_session(tmp_path)
            if variant is v1:
                with pytest.raises(RequestError) as error:
                    await client.prompt(sid, "Hello?")
                code, message = error.value.code, error.value.message
            else:
                result = await client.prompt(sid, "Hello?")
                assert result.stop_reason == "error"
                code, message = result.error.code, result.error.message
            assert code == AUTH_REQUIRED
            assert variable in message and "no API key" in message
            assert app.requests == []

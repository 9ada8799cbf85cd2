"""Interoperability with the official ACP SDKs, over real stdio between real processes.

Four pairings, each playing the same script (``tests/interop/*``): acp-trio's client drives an
agent written with the TypeScript SDK (``@agentclientprotocol/sdk`` 2.4.0) and one written with
the Python SDK (``agent-client-protocol`` 0.12.1); clients written with each SDK drive acp-trio's
agent (``tests/interop/trio_agent.py``).  Each covers ``initialize``, ``session/new``, a streamed
prompt turn with a permission request and fs reads and writes, an extension request and its
-32601 counterpart, and a turn cancelled with ``session/cancel``.

The SDKs are installed once into ``${ACP_TRIO_CACHE:-~/.cache/acp-trio}/interop/`` (a directory
per version, a marker file written after a successful install, a file lock against concurrent
runs).  The TypeScript tests skip only when ``node``/``npm`` are missing; a failed install fails.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from acp_schema import v1
from acp_trio import (
    METHOD_NOT_FOUND,
    AgentSideConnection,
    ClientSideConnection,
    Connection,
    DecodeError,
    RequestError,
    Route,
    spawn_agent,
)

TS_SDK = "@agentclientprotocol/sdk"
TS_SDK_VERSION = "2.4.0"
PY_SDK = "agent-client-protocol"
PY_SDK_VERSION = "0.12.1"
INTEROP = Path(__file__).parent / "interop"
sys.path.insert(0, str(INTEROP))
import real_agents  # noqa: E402  (tests/interop/real_agents.py: the installer, shared with the real-agent runs)

TRIO_AGENT = [sys.executable, str(INTEROP / "trio_agent.py")]
INPUT_TEXT = "héllo wörld ✓\nsecond line\n"
TIME_LIMIT = 20  # seconds of real time per test: processes, so no autojump clock
INSTALL_TIMEOUT = 240  # per step; under the suite's pytest-timeout (300 s), so a slow registry fails with a message


# -- installing the SDKs -----------------------------------------------------------------------


def _cache_dir() -> Path:
    return real_agents.cache_dir()


def _installed(target: Path, what: str, check: Path, steps: list[list[str]], prepare: dict[str, str]) -> Path:
    """Install into ``target`` unless a marker says ``what`` is there already; return ``target``
    (``tests/interop/real_agents.py``'s installer; a failed step fails the test with its output)."""
    try:
        return real_agents.installed(target, what, check, steps, prepare, timeout=INSTALL_TIMEOUT)
    except real_agents.Unavailable as exc:
        pytest.fail(f"installing the interop SDKs: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def ts_sdk() -> Path:
    """The npm directory holding ``@agentclientprotocol/sdk`` (and its peer dependency zod)."""
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        pytest.skip("node and npm are not on PATH: the TypeScript SDK interop tests need Node.js (18 or later)")
    target = _cache_dir() / f"npm-{TS_SDK_VERSION}"
    return _installed(
        target,
        f"{TS_SDK}@{TS_SDK_VERSION}\n",
        target / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json",
        # npm 7+ installs the peer dependency zod by itself; name it anyway so older npm works too.
        [[npm, "install", "--no-audit", "--no-fund", "--no-save", f"{TS_SDK}@{TS_SDK_VERSION}", "zod@^3.25.76"]],
        # a package.json of its own, so npm does not walk up and install into some parent project
        {"package.json": '{"name": "acp-trio-interop", "private": true}\n'},
    )


@pytest.fixture(scope="session")
def py_sdk_python() -> Path:
    """The Python of a virtual environment holding ``agent-client-protocol`` (imported as ``acp``)."""
    target = _cache_dir() / f"py-acp-{PY_SDK_VERSION}"
    python = target / "bin" / "python"
    _installed(
        target,
        f"{PY_SDK}=={PY_SDK_VERSION}\n",
        python,  # exists() follows the symlink, so a venv whose base Python went away is rebuilt
        [
            [sys.executable, "-m", "venv", str(target)],
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                f"{PY_SDK}=={PY_SDK_VERSION}",
            ],
        ],
        {},
    )
    return python


# -- acp-trio's client, driving a foreign agent ------------------------------------------------


class InteropClient:
    """Answers the foreign agent: ``allow``, fs inside the session directory, and a cancelled wait."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd.resolve()
        self.updates: list[v1.SessionNotification] = []
        self.permissions: list[str] = []  # tool call ids
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []
        self.wait_asked = trio.Event()

    def _inside(self, path: str) -> Path:
        full = Path(path).resolve()
        if self.cwd not in full.parents:
            raise RequestError.invalid_params({"path": path, "detail": "outside the session directory"})
        return full

    async def session_update(self, params: v1.SessionNotification) -> None:
        self.updates.append(params)

    async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        # (How many updates were handled by now is not asserted: the runtime orders session/update
        # handlers among themselves and before the prompt response, not before other requests.)
        self.permissions.append(params.tool_call.tool_call_id)
        if params.tool_call.tool_call_id == "interop-wait":
            self.wait_asked.set()
            await trio.sleep_forever()  # our session/cancel makes the runtime answer "cancelled"
        return v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id="allow"))

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        self.reads.append(params.path)
        return v1.ReadTextFileResponse(content=self._inside(params.path).read_text(encoding="utf-8"))

    async def fs_write_text_file(self, params: v1.WriteTextFileRequest) -> v1.WriteTextFileResponse:
        self.writes.append((params.path, params.content))
        self._inside(params.path).write_text(params.content, encoding="utf-8")
        return v1.WriteTextFileResponse()

    def texts(self, start: int = 0) -> list[str]:
        out = []
        for notification in self.updates[start:]:
            update = notification.update
            assert isinstance(update, v1.AgentMessageChunkSessionUpdate), update
            assert isinstance(update.content, v1.TextContentBlock), update.content
            out.append(update.content.text)
        return out


async def drive_foreign_agent(
    command: list[str],
    env: dict[str, str],
    cwd: Path,
    agent_name: str,
    greeting: str,
    connect: Callable[[InteropClient], AbstractAsyncContextManager[ClientSideConnection]] | None = None,
) -> None:
    """Run the whole script against ``command`` with acp-trio's client, asserting every step.

    ``connect``: ``(client) -> async context manager yielding the connection`` to reach an agent
    some other way than spawning ``command`` (a remote one: tests/test_interop_websocket.py)."""
    (cwd / "input.txt").write_text(INPUT_TEXT, encoding="utf-8")
    client = InteropClient(cwd)
    with trio.fail_after(TIME_LIMIT):
        opened = (
            spawn_agent(command[0], command[1:], client=client, env=env, cwd=cwd)
            if connect is None
            else connect(client)
        )
        async with opened as conn:
            agent = v1.AgentPeer(conn)
            init = await agent.initialize(
                v1.InitializeRequest(
                    protocol_version=1,
                    client_capabilities=v1.ClientCapabilities(
                        fs=v1.FileSystemCapabilities(read_text_file=True, write_text_file=True)
                    ),
                    client_info=v1.Implementation(name="acp-trio-interop-client", version="1"),
                )
            )
            assert init.protocol_version == 1
            assert init.agent_info is not None and init.agent_info.name == agent_name
            assert conn.protocol_version == 1

            session = await agent.session_new(v1.NewSessionRequest(cwd=str(cwd), mcp_servers=[]))
            session_id = session.session_id
            assert session_id

            # a streamed turn with a permission request, an fs read and an fs write
            response = await agent.session_prompt(
                v1.PromptRequest(session_id=session_id, prompt=[v1.TextContentBlock(text="hello")])
            )
            assert response.stop_reason == "end_turn"
            assert client.texts() == [
                "Hello",
                " from",
                greeting,
                "permission: allow",
                f"read: {INPUT_TEXT}",
                "wrote output.txt",
            ]
            assert {n.session_id for n in client.updates} == {session_id}
            assert client.permissions == ["interop-write"]
            assert client.reads == [str(cwd / "input.txt")]
            assert client.writes == [(str(cwd / "output.txt"), f"echo: {INPUT_TEXT}")]
            assert (cwd / "output.txt").read_text(encoding="utf-8") == f"echo: {INPUT_TEXT}"

            # an extension method, and one the agent does not have
            payload = {"value": 42, "nested": {"ok": True, "list": [1, None, "x"]}}
            assert await conn.ext_request("_interop/echo", payload) == {"echo": payload}
            with pytest.raises(RequestError) as missing:
                await conn.ext_request("_interop/missing", {})
            assert missing.value.code == METHOD_NOT_FOUND

            # a turn cancelled while the agent waits on a permission request
            seen = len(client.updates)
            cancelled: list[v1.PromptResponse] = []

            async def wait_turn() -> None:
                cancelled.append(
                    await agent.session_prompt(
                        v1.PromptRequest(session_id=session_id, prompt=[v1.TextContentBlock(text="wait")])
                    )
                )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_turn)
                await client.wait_asked.wait()
                await agent.session_cancel(v1.CancelNotification(session_id=session_id))
            assert [r.stop_reason for r in cancelled] == ["cancelled"]
            assert client.permissions == ["interop-write", "interop-wait"]
            # the agent saw the pending permission request answered "cancelled" (prompt-turn.mdx)
            assert client.texts(seen) == ["waiting", "permission: cancelled"]
        if connect is None:
            assert conn.process.returncode == 0  # type: ignore[attr-defined]


# -- a foreign client, driving acp-trio's agent ------------------------------------------------


async def run_summary(command: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a script (``command``, with ``env`` added to the environment) that must exit 0 and print
    a JSON summary as its last line; return that summary.  Bound the wait with ``trio.fail_after``."""
    proc = await trio.run_process(
        command, capture_stdout=True, capture_stderr=True, check=False, env={**os.environ, **(env or {})}
    )
    name = Path(next((part for part in command if part.endswith((".mjs", ".py"))), command[0])).name
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{stderr}"
    lines = proc.stdout.decode("utf-8").splitlines()
    assert lines, f"{name} printed no summary:\n{stderr}"
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


@asynccontextmanager
async def node_server(script: str, args: list[str], npm_dir: Path) -> AsyncIterator[tuple[trio.Process, bytes]]:
    """Run ``node tests/interop/SCRIPT ARGS`` (a server that prints one line once listening, its port
    in it); yields the process (stdout and stderr piped) and that line; kills it on exit."""
    from acp_trio._nursery import owned_nursery

    async with owned_nursery() as nursery:
        process = await nursery.start(
            lambda task_status: trio.run_process(
                ["node", str(INTEROP / script), *args],
                stdout=-1,  # subprocess.PIPE
                stderr=-1,
                env={**os.environ, "ACP_INTEROP_NPM_DIR": str(npm_dir)},
                check=False,
                task_status=task_status,
            )
        )
        try:
            line = b""
            while not line.endswith(b"\n"):
                data = await process.stdout.receive_some()
                assert data, f"{script} exited ({process.returncode}) before printing its port"
                line += data
            yield process, line
        finally:
            process.kill()


async def run_foreign_client(command: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """Run a foreign client script against acp-trio's agent; return the JSON summary it prints."""
    (cwd / "input.txt").write_text(INPUT_TEXT, encoding="utf-8")
    with trio.fail_after(TIME_LIMIT):
        return await run_summary([*command, str(cwd), *TRIO_AGENT], env)


def check_foreign_client_summary(summary: dict[str, Any], cwd: Path) -> None:
    """Assert every step of the script, as the foreign client saw acp-trio's agent."""
    assert summary["initialize"]["protocolVersion"] == 1
    assert summary["initialize"]["agentInfo"]["name"] == "acp-trio-interop-agent"
    session_id = summary["sessionId"]
    assert session_id

    updates = summary["updates"]
    assert {u["sessionId"] for u in updates} == {session_id}
    assert {u["update"]["sessionUpdate"] for u in updates} == {"agent_message_chunk"}
    texts = [u["update"]["content"]["text"] for u in updates]
    assert texts == [
        "Hello",
        " from",
        " acp-trio",
        "permission: allow",
        f"read: {INPUT_TEXT}",
        "wrote output.txt",
        "waiting",
    ]
    assert summary["prompt"] == {"stopReason": "end_turn"}
    assert summary["updatesAfterPrompt"] == 6  # every chunk of the turn arrived before its response
    assert summary["permissions"] == [
        {"toolCallId": "interop-write", "updatesBefore": 3},
        {"toolCallId": "interop-wait", "updatesBefore": 7},
    ]
    assert summary["reads"] == [str(cwd / "input.txt")]
    assert summary["writes"] == [{"path": str(cwd / "output.txt"), "content": f"echo: {INPUT_TEXT}"}]
    assert (cwd / "output.txt").read_text(encoding="utf-8") == f"echo: {INPUT_TEXT}"

    assert summary["echo"] == {"result": {"echo": {"value": 42, "nested": {"ok": True}}}}
    assert summary["missing"]["error"]["code"] == METHOD_NOT_FOUND

    assert summary["cancelledPrompt"] == {"stopReason": "cancelled"}
    assert summary["agentExit"]["code"] == 0  # acp-trio's agent exits cleanly when stdin closes


# -- the four pairings -------------------------------------------------------------------------


async def test_our_client_drives_an_agent_written_with_the_typescript_sdk(ts_sdk: Path, tmp_path: Path) -> None:
    await drive_foreign_agent(
        ["node", str(INTEROP / "ts_agent.mjs")],
        {"ACP_INTEROP_NPM_DIR": str(ts_sdk)},
        tmp_path,
        agent_name="ts-sdk-interop-agent",
        greeting=" the TypeScript SDK",
    )


async def test_a_client_written_with_the_typescript_sdk_drives_our_agent(ts_sdk: Path, tmp_path: Path) -> None:
    summary = await run_foreign_client(
        ["node", str(INTEROP / "ts_client.mjs")], {"ACP_INTEROP_NPM_DIR": str(ts_sdk)}, tmp_path
    )
    check_foreign_client_summary(summary, tmp_path)


async def test_our_client_drives_an_agent_written_with_the_python_sdk(py_sdk_python: Path, tmp_path: Path) -> None:
    await drive_foreign_agent(
        [str(py_sdk_python), str(INTEROP / "py_agent.py")],
        {},
        tmp_path,
        agent_name="py-sdk-interop-agent",
        greeting=" the Python SDK",
    )


async def test_a_client_written_with_the_python_sdk_drives_our_agent(py_sdk_python: Path, tmp_path: Path) -> None:
    # Its fs/write_text_file handler returns None, which the SDK sends as "result": null: our
    # agent reads that as an empty WriteTextFileResponse, as the TypeScript SDK does.
    summary = await run_foreign_client([str(py_sdk_python), str(INTEROP / "py_client.py")], {}, tmp_path)
    check_foreign_client_summary(summary, tmp_path)


# -- what the official Python SDK sends, in memory -----------------------------------------------


async def test_a_null_result_reads_as_the_empty_response_when_the_result_type_has_no_required_field() -> None:
    # Clients on the official Python SDK answer fs/write_text_file with "result": null, as the example
    # in docs/protocol/v1/file-system.mdx does (session-setup.mdx does the same for session/load).
    from trio.testing import memory_stream_pair

    async def null(params: Any) -> None:
        return None

    agent_end, client_end = memory_stream_pair()
    routes = {m: Route(m, "request", null) for m in ("fs/write_text_file", "fs/read_text_file")}
    with trio.fail_after(5):
        async with (
            AgentSideConnection(object(), agent_end, agent_end) as agent,
            Connection(client_end, client_end, routes) as client,
        ):
            fs = {"readTextFile": True, "writeTextFile": True}
            await client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": fs}})
            peer = v1.ClientPeer(agent)
            written = await peer.fs_write_text_file(v1.WriteTextFileRequest(session_id="s", path="/x", content="y"))
            assert written == v1.WriteTextFileResponse()
            with pytest.raises(DecodeError, match="got None"):  # content is required: null stays an error
                await peer.fs_read_text_file(v1.ReadTextFileRequest(session_id="s", path="/x"))

"""The WebSocket transport against the official TypeScript SDK's (``@agentclientprotocol/sdk`` 2.4.0).

Spec: the RFD ``docs/rfds/streamable-http-websocket-transport.mdx`` (WebSocket Request Flow).  Both
pairings play the interoperability script of ``tests/test_interop.py`` (initialize, session/new, a
streamed turn with a permission request and fs calls, extension methods, a cancelled turn):

- our ``connect_websocket`` against the TypeScript ``AcpServer`` (its Node adapter and the ``ws``
  package's ``WebSocketServer``) serving the agent of ``tests/interop/ts_agent.mjs``;
- the TypeScript ``createWebSocketStream`` client (``tests/interop/ts_client.mjs`` given a
  ``ws://`` URL) against our ``AcpApp`` on hypercorn serving ``tests/interop/trio_agent.py``'s agent.

The SDK, zod and ``ws`` are installed from npm into the interop cache (as ``test_interop.py`` does);
the tests skip only when ``node``/``npm`` are missing.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import test_interop  # pytest's default ("prepend") import mode puts tests/ on sys.path
import trio
from test_interop import INTEROP, TIME_LIMIT, TS_SDK, TS_SDK_VERSION

pytest.importorskip("hypercorn")
pytest.importorskip("trio_websocket")

from acp_trio import ClientSideConnection
from acp_trio.transports.asgi import AcpApp, serve
from acp_trio.transports.websocket import connect_websocket

WS_PACKAGE = "ws@8.18.3"


@pytest.fixture(scope="session")
def ts_ws_sdk() -> Path:
    """The npm directory holding the ACP SDK, zod and the ``ws`` package (Node 20 has no WebSocket server)."""
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        pytest.skip("node and npm are not on PATH: the TypeScript SDK interop tests need Node.js (20 or later)")
    target = test_interop._cache_dir() / f"npm-{TS_SDK_VERSION}-{WS_PACKAGE.replace('@', '-')}"
    packages = [f"{TS_SDK}@{TS_SDK_VERSION}", "zod@^3.25.76", WS_PACKAGE]
    return test_interop._installed(
        target,
        "\n".join(packages) + "\n",
        target / "node_modules" / "ws" / "package.json",
        [[npm, "install", "--no-audit", "--no-fund", "--no-save", *packages]],
        {"package.json": '{"name": "acp-trio-interop-ws", "private": true}\n'},
    )


@asynccontextmanager
async def ts_server(npm_dir: Path) -> AsyncIterator[str]:
    """Run ``ts_ws_server.mjs``; yields its ``ws://127.0.0.1:PORT/acp`` URL, kills it on exit."""
    async with test_interop.node_server("ts_ws_server.mjs", [], npm_dir) as (_process, line):
        yield f"ws://127.0.0.1:{json.loads(line)['port']}/acp"


async def test_our_websocket_client_drives_the_typescript_sdks_acp_server(ts_ws_sdk: Path, tmp_path: Path) -> None:
    with trio.fail_after(TIME_LIMIT):
        async with ts_server(ts_ws_sdk) as url:
            connection_ids: list[Any] = []

            @asynccontextmanager
            async def connect(client: Any) -> AsyncIterator[ClientSideConnection]:
                async with connect_websocket(url, client) as conn:
                    connection_ids.append(conn.connection_id)  # type: ignore[attr-defined]
                    yield conn

            await test_interop.drive_foreign_agent(
                [], {}, tmp_path, agent_name="ts-sdk-interop-agent", greeting=" the TypeScript SDK", connect=connect
            )
    # the RFD: the TypeScript server names the connection in the 101 answer
    assert len(connection_ids) == 1 and connection_ids[0]


async def test_the_typescript_sdks_websocket_client_drives_our_acp_app(ts_ws_sdk: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(INTEROP))
    try:
        from trio_agent import InteropAgent
    finally:
        sys.path.remove(str(INTEROP))
    app = AcpApp(InteropAgent)
    (tmp_path / "input.txt").write_text(test_interop.INPUT_TEXT, encoding="utf-8")
    with trio.fail_after(TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(serve, app, "127.0.0.1", 0)
            url = bound.replace("http://", "ws://") + "/acp"
            summary = await test_interop.run_summary(
                ["node", str(INTEROP / "ts_client.mjs"), str(tmp_path), url], {"ACP_INTEROP_NPM_DIR": str(ts_ws_sdk)}
            )
            await app.wait_idle()  # the client closed its WebSocket: our side's connection and agent ended
            nursery.cancel_scope.cancel()
    assert summary["agentExit"] is None  # no agent process: the agent is remote
    summary["agentExit"] = {"code": 0}  # what the shared check expects of a spawned agent
    test_interop.check_foreign_client_summary(summary, tmp_path)


# -- the bridge in front of an agent written with the TypeScript SDK (issue 12, item 8) -------------------


async def test_our_websocket_client_drives_a_typescript_stdio_agent_through_the_bridge(
    ts_ws_sdk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acp_trio.bridge import serve_bridge

    monkeypatch.setenv("ACP_INTEROP_NPM_DIR", str(ts_ws_sdk))  # the agent processes inherit it
    with trio.fail_after(TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(serve_bridge, ["node", str(INTEROP / "ts_agent.mjs")], "127.0.0.1", 0)
            url = bound.replace("http://", "ws://") + "/acp"
            await test_interop.drive_foreign_agent(
                [],
                {},
                tmp_path,
                agent_name="ts-sdk-interop-agent",
                greeting=" the TypeScript SDK",
                connect=lambda client: connect_websocket(url, client),
            )
            nursery.cancel_scope.cancel()


async def test_the_typescript_websocket_client_drives_a_typescript_stdio_agent_through_the_bridge(
    ts_ws_sdk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acp_trio.bridge import serve_bridge

    monkeypatch.setenv("ACP_INTEROP_NPM_DIR", str(ts_ws_sdk))
    (tmp_path / "input.txt").write_text(test_interop.INPUT_TEXT, encoding="utf-8")
    with trio.fail_after(TIME_LIMIT):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(serve_bridge, ["node", str(INTEROP / "ts_agent.mjs")], "127.0.0.1", 0)
            url = bound.replace("http://", "ws://") + "/acp"
            summary = await test_interop.run_summary(["node", str(INTEROP / "ts_client.mjs"), str(tmp_path), url])
            nursery.cancel_scope.cancel()
    # the TypeScript pair's own script, end to end through the bridge's two transports
    assert summary["initialize"]["agentInfo"]["name"] == "ts-sdk-interop-agent"
    assert summary["prompt"] == {"stopReason": "end_turn"}
    said = [u["update"]["content"]["text"] for u in summary["updates"]]
    assert said[:4] == ["Hello", " from", " the TypeScript SDK", "permission: allow"]
    assert summary["writes"] == [{"path": str(tmp_path / "output.txt"), "content": f"echo: {test_interop.INPUT_TEXT}"}]
    assert summary["echo"] == {"result": {"echo": {"value": 42, "nested": {"ok": True}}}}
    assert summary["missing"]["error"]["code"] == -32601
    assert summary["cancelledPrompt"] == {"stopReason": "cancelled"}
    assert said[-1] == "permission: cancelled"

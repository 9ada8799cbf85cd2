"""``bridge --listen --detach`` in front of the real agents (issue 35, item 4), offline.

claude-agent-acp and codex-acp (pinned in ``tests/interop/real_agents.py``), in protocol 1, their
model API on the loopback model server (``tests/interop/model_server.py``) answering slowly: a
WebSocket client prompts and leaves at the first chunk of the answer; the agent process goes on;
an HTTP client loads the live session (the host answers, the agent never sees it) and gets the
whole turn once, in order (the replay, then live), the model's whole answer, and the turn's end
(``_acp_trio/turn_ended``, ``end_turn``).  The same in protocol 2, the second client resuming with
the host's cursor; and a v2 client through ``--detach --speak 2`` in front of claude-agent-acp
driven in protocol 1 by the v1 ⇄ v2 adapter (client ⇄ host ⇄ adapter ⇄ agent).  Run with
``ACP_REAL_AGENTS=1`` (``nox -s conformance`` installs them), like the other real-agent tests.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

INTEROP = Path(__file__).parent / "interop"
sys.path.insert(0, str(INTEROP))  # the scripts there import each other as top-level modules

import conformance_real  # noqa: E402
import model_server  # noqa: E402
import real_agents  # noqa: E402
from test_bridge_detach import Client, prompt_until_gone  # noqa: E402

from acp_schema import v1, v2  # noqa: E402
from acp_trio.bridge import open_detach_host  # noqa: E402
from acp_trio.host import CURSOR_TYPE, SessionHost  # noqa: E402
from acp_trio.transports.asgi import AcpApp, serve  # noqa: E402

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("ACP_REAL_AGENTS") != "1",
        reason="the real agents (claude-agent-acp, codex-acp: about 840 MB from npm) run with ACP_REAL_AGENTS=1",
    ),
    pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX-only"),
    pytest.mark.one_interpreter,
]

AGENT_TIME_LIMIT = 240  # seconds per real agent (their first start unpacks caches)


@pytest.fixture(scope="session")
def real_agents_installed() -> Path:
    try:
        return real_agents.install_real_agents(timeout=600.0)
    except real_agents.Unavailable as exc:
        pytest.skip(f"the real agents are unavailable: {exc}")


def said(client: Client) -> str:
    return "".join(
        u.content.text
        for n, u in client.updates
        if n is not None
        and type(u).__name__ == "AgentMessageChunkSessionUpdate"
        and type(u.content).__name__ == "TextContentBlock"
    )


@asynccontextmanager
async def detached(name: str, tmp_path: Path, **options: Any) -> AsyncIterator[tuple[SessionHost, str, Path]]:
    """The real agent ``name`` behind ``open_detach_host(**options)`` (``speak=2``: through the
    adapter), served over WebSocket and Streamable HTTP, its model API the loopback model server
    answering slowly (24 pieces, 0.1 s apart); yields the host, the ``http://`` URL and the
    agent's working directory."""
    command, extra = next(a for a in real_agents.AGENTS if a.name == name).command()
    workdir = Path(os.path.realpath(tmp_path)) / "project"
    workdir.mkdir()
    app = model_server.ModelServer(deltas=24, delay=0.1, log=str(tmp_path / "requests.jsonl"))
    async with trio.open_nursery() as nursery:
        model_url = await nursery.start(model_server.serve_models, app)
        env = conformance_real.checker_env(
            {**real_agents.agent_environment(tmp_path / "state", model_url, name), **extra}
        )
        async with open_detach_host(command, env=env, cwd=workdir, **options) as host:
            binds: list[str] = await nursery.start(serve, AcpApp(serve_streams=host.serve_streams), "127.0.0.1", 0)
            yield host, binds[0] + "/acp", workdir
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("name", ["claude-agent-acp", "codex-acp"])
async def test_a_real_agent_behind_detach_finishes_a_turn_its_client_left_for_the_next_one(
    name: str, real_agents_installed: Path, tmp_path: Path
) -> None:
    from acp_trio.transports.http import connect_http
    from acp_trio.transports.websocket import connect_websocket

    with trio.fail_after(AGENT_TIME_LIMIT):
        async with detached(name, tmp_path) as (host, url, workdir):
            first = Client(answer=False)
            async with trio.open_nursery() as prompts:
                async with connect_websocket(url.replace("http", "ws", 1), first, variant=v1) as conn:
                    await conn.initialize(v1.InitializeRequest(protocol_version=1), timeout=120)
                    new = await conn.agent.session_new(v1.NewSessionRequest(cwd=str(workdir), mcp_servers=[]))
                    sid = new.session_id
                    prompt = v1.PromptRequest(session_id=sid, prompt=[v1.TextContentBlock(text="Say hello.")])
                    prompts.start_soon(prompt_until_gone, conn, prompt)
                    await first.until(lambda: said(first))  # the answer has begun: leave
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            assert host.sessions()[sid].running  # the turn goes on without a client
            second = Client()
            async with connect_http(url, second, variant=v1) as conn:
                second.watch_turn_ended(conn)
                await conn.initialize(v1.InitializeRequest(protocol_version=1), timeout=120)
                await conn.agent.session_load(v1.LoadSessionRequest(session_id=sid, cwd=str(workdir), mcp_servers=[]))
                assert host.instances == 2  # the agent process of the session, and the second client's own
                await second.until(lambda: second.turn_ended)
    numbers = second.numbers()
    assert numbers == list(range(1, len(numbers) + 1))  # the replay, then live: each update once, in order
    assert numbers[: len(first.numbers())] == first.numbers()
    assert model_server.ANSWER not in said(first)  # the first client left before the answer was whole
    assert model_server.ANSWER in said(second)  # the next one has it all (Claude Code adds a notice after it)
    assert second.turn_ended == [{"sessionId": sid, "stopReason": "end_turn"}]


@pytest.mark.parametrize(
    ("name", "speak"),
    [("claude-agent-acp", None), ("codex-acp", None), ("claude-agent-acp", 2)],
    ids=["claude-agent-acp", "codex-acp", "claude-agent-acp-v1-speak-2"],
)
async def test_a_real_agent_in_v2_behind_detach_is_resumed_with_the_cursor(
    name: str, speak: int | None, real_agents_installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same in protocol 2: the second client resumes with the host's cursor (one past the last
    number the first saw) and gets the rest of the turn, up to its ``state_update`` ``idle``
    (``end_turn``).  With ``speak=2`` (``--detach --speak 2``) the agent is driven in protocol 1 by
    the adapter, which the host's router sits in front of: the journal and both clients see the
    adapter's v2 updates."""
    from acp_trio import adapt
    from acp_trio.transports.http import connect_http
    from acp_trio.transports.websocket import connect_websocket

    spoken: list[tuple[int, int]] = []  # each adapted agent's initialize: the version asked, the one answered
    asked = adapt.V2Front._initialize_agent

    async def initialize_agent(front: adapt.V2Front, request: Any) -> Any:
        answer = await asked(front, request)
        spoken.append((request.protocol_version, answer.protocol_version))
        return answer

    monkeypatch.setattr(adapt.V2Front, "_initialize_agent", initialize_agent)
    info = v2.Implementation(name="test-detach-client", version="1")
    with trio.fail_after(AGENT_TIME_LIMIT):
        async with detached(name, tmp_path, speak=speak) as (host, url, workdir):
            first = Client(answer=False)
            async with connect_websocket(url.replace("http", "ws", 1), first, variant=v2) as conn:
                init = await conn.initialize(v2.InitializeRequest(protocol_version=2, info=info), timeout=120)
                assert init.protocol_version == 2
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd=str(workdir)))).session_id
                prompt = [v2.TextContentBlock(text="Say hello.")]
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=prompt))
                await first.until(lambda: said(first))  # the answer has begun: leave
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            seen = first.numbers()[-1]
            second = Client()
            async with connect_http(url, second, variant=v2) as conn:
                await conn.initialize(v2.InitializeRequest(protocol_version=2, info=info), timeout=120)
                cursor = v2.ReplayFromOther(type=CURSOR_TYPE, extra_fields={"update": seen + 1})
                resume = v2.ResumeSessionRequest(session_id=sid, cwd=str(workdir), replay_from=cursor)
                await conn.agent.session_resume(resume)
                await second.until(second.idle)
    assert spoken == ([(1, 1)] * 2 if speak == 2 else [])  # the two processes (one per client) spoke v1
    assert first.numbers() + second.numbers() == list(range(1, second.numbers()[-1] + 1))  # each once, in order
    assert model_server.ANSWER not in said(first)
    assert (said(first) + said(second)).count(model_server.ANSWER) == 1  # the whole answer, once
    last = second.updates[-1][1]
    assert isinstance(last, v2.IdleStateUpdateSessionUpdate) and last.stop_reason == "end_turn"  # the turn's end

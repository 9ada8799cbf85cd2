"""The bridge's ``--detach --speak 2`` in front of a v1 agent (issue 35, item 4): client ⇄ session host ⇄
v1/v2 adapter ⇄ agent process.

The guide's command runs as printed (on a free port): a v2 client starts a turn of the v1 demo
agent over WebSocket and leaves while the turn waits on its permission (``requires_action``); a v2
client resumes over Streamable HTTP with the host's cursor, gets every update it missed once, in
order, then the pending request, answers it, and sees the turn to its ``idle``: the host journals
the adapter's v2 updates, so the router sees the client's version, not the agent's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
from test_bridge_detach import (  # pytest's default ("prepend") import mode puts tests/ on sys.path
    DEADLINE,
    INFO,
    Client,
    guide_line,
    notes_dir,
)

from acp_schema import v2
from acp_trio.host import CURSOR_TYPE

pytest.importorskip("hypercorn")
pytestmark = [
    pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX-only"),
    pytest.mark.one_interpreter,  # processes and sockets: the adapter's translation is tested in tests/test_adapt*.py
]


def states(client: Client) -> list[str]:
    """The numbered ``state_update`` states ``client`` got, in order."""
    return [str(update.state) for n, update in client.updates if n is not None and hasattr(update, "state")]


async def test_a_v2_client_leaves_a_v1_agents_turn_and_another_resumes_it_through_the_adapter(tmp_path: Path) -> None:
    from acp_trio.transports.http import connect_http
    from acp_trio.transports.websocket import connect_websocket

    command = guide_line("python -m acp_trio.bridge --listen 127.0.0.1:8765 --detach --speak 2")
    cwd = notes_dir(tmp_path)
    process = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE, start_new_session=True)
    assert process.stderr is not None
    laptop, phone = Client(answer=False), Client()
    try:
        with trio.fail_after(DEADLINE):
            seen = b""
            while b"/acp\n" not in seen:
                chunk = await process.stderr.receive_some(1 << 16)
                assert chunk, f"the bridge ended: {seen.decode()}"
                seen += chunk
            assert b"(detached sessions kept; protocol 2 to clients)" in seen
            url = next(w for w in seen.decode().split() if w.startswith("ws://"))
            async with connect_websocket(url, laptop, variant=v2) as conn:
                init = await conn.initialize(v2.InitializeRequest(protocol_version=2, info=INFO))
                assert init.protocol_version == 2  # the adapter's answer: the v1 agent behind it
                sid = (await conn.agent.session_new(v2.NewSessionRequest(cwd=cwd))).session_id
                prompt = [v2.TextContentBlock(text="summarize")]
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=prompt))
                await laptop.until(lambda: laptop.asked and states(laptop)[-1:] == ["requires_action"])
            async with connect_http(url.replace("ws", "http", 1), phone, variant=v2) as conn:
                await conn.initialize(v2.InitializeRequest(protocol_version=2, info=INFO))
                cursor = v2.ReplayFromOther(type=CURSOR_TYPE, extra_fields={"update": laptop.numbers()[-1] + 1})
                await conn.agent.session_resume(v2.ResumeSessionRequest(session_id=sid, cwd=cwd, replay_from=cursor))
                await phone.until(phone.idle)
    finally:
        process.terminate()
        with trio.move_on_after(10):
            await process.wait()
    numbers = laptop.numbers() + phone.numbers()
    assert numbers == list(range(1, len(numbers) + 1))  # every update once, in order, across the two clients
    # the resume's current state: unnumbered, with _meta[CURRENT_META_KEY] (Client.session_update checks it)
    current: Any = next(u for n, u in phone.updates if n is None)
    assert current.state == "requires_action"
    assert states(laptop)[0] == "running" and states(phone)[-1] == "idle"
    assert phone.updates[-1][1].stop_reason == "end_turn"  # the turn's end, through the adapter
    assert len(phone.asked) == 1 and phone.asked[0].session_id == sid  # the request it left pending
    assert (Path(cwd) / "summary.txt").read_text(encoding="utf-8").endswith("It has 3 words.\n")


async def test_a_v1_client_leaves_a_v2_agents_turn_and_another_loads_it_through_the_adapter(tmp_path: Path) -> None:
    """``open_detach_host(..., speak=1)`` in front of the v2 demo agent: the other direction, in
    process.  The first v1 client leaves at the permission request; a v1 client loads the live
    session, gets every update once, the request, and the turn's end (``_acp_trio/turn_ended``)."""
    import sys

    from test_bridge_detach import prompt_until_gone

    from acp_schema import v1
    from acp_trio.bridge import open_detach_host
    from acp_trio.transports.asgi import AcpApp, serve
    from acp_trio.transports.http import connect_http
    from acp_trio.transports.websocket import connect_websocket

    cwd = notes_dir(tmp_path)
    agent = [sys.executable, "-m", "acp_trio.demo", "--serve-agent", "--protocol", "2"]
    first, second = Client(answer=False), Client()
    with trio.fail_after(DEADLINE):
        async with open_detach_host(agent, speak=1) as host, trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(serve, AcpApp(host=host), "127.0.0.1", 0)
            url = binds[0] + "/acp"
            async with trio.open_nursery() as prompts:
                async with connect_websocket(url.replace("http", "ws", 1), first, variant=v1) as conn:
                    init = await conn.initialize(v1.InitializeRequest(protocol_version=1))
                    assert init.protocol_version == 1  # the adapter's answer: the v2 agent behind it
                    sid = (await conn.agent.session_new(v1.NewSessionRequest(cwd=cwd, mcp_servers=[]))).session_id
                    prompt = v1.PromptRequest(session_id=sid, prompt=[v1.TextContentBlock(text="summarize")])
                    prompts.start_soon(prompt_until_gone, conn, prompt)
                    await first.until(lambda: first.asked)
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            async with connect_http(url, second, variant=v1) as conn:
                second.watch_turn_ended(conn)
                await conn.initialize(v1.InitializeRequest(protocol_version=1))
                await conn.agent.session_load(v1.LoadSessionRequest(session_id=sid, cwd=cwd, mcp_servers=[]))
                await second.until(lambda: second.turn_ended)
            nursery.cancel_scope.cancel()
    numbers = second.numbers()
    assert numbers == list(range(1, len(numbers) + 1))  # the whole journal, then live: each once, in order
    assert numbers[: len(first.numbers())] == first.numbers()
    assert len(second.asked) == 1 and second.turn_ended == [{"sessionId": sid, "stopReason": "end_turn"}]
    assert (Path(cwd) / "summary.txt").read_text(encoding="utf-8").endswith("It has 3 words.\n")

"""The session host behind ``AcpApp(serve_streams=host.serve_streams)``: a client leaves a WebSocket
mid-turn and another reattaches over Streamable HTTP (and the other way round), with no change to
either transport.  Real sockets on the loopback interface.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from _host_kit import DEADLINE, Control, Recorder, agents, init2, new_session, text

from acp_schema import v2
from acp_trio.host import CURSOR_TYPE, SessionHost, open_session_host
from acp_trio.transports.asgi import AcpApp, serve
from acp_trio.transports.http import connect_http
from acp_trio.transports.websocket import connect_websocket


@asynccontextmanager
async def served(host: SessionHost) -> AsyncIterator[str]:
    """The host served on a free loopback port; yields ``http://127.0.0.1:PORT/acp``."""
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(serve, AcpApp(serve_streams=host.serve_streams), "127.0.0.1", 0)
        yield binds[0] + "/acp"
        nursery.cancel_scope.cancel()


async def test_leave_a_websocket_mid_turn_and_reattach_over_streamable_http_with_the_cursor() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host, served(host) as url:
            first = Recorder()
            async with connect_websocket(url.replace("http://", "ws://"), first, variant=v2) as conn:
                await init2(conn)
                sid = await new_session(conn)
                await conn.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("count 50 wait after 50")))
                await first.until(lambda: len(first.texts()) == 50)
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            seen = max(n for n in first.numbers if n is not None)
            control.gate.set()
            second = Recorder()
            async with connect_http(url, second, variant=v2) as conn2:
                await init2(conn2)
                cursor = v2.ReplayFromOther(type=CURSOR_TYPE, extra_fields={"update": seen + 1})
                await conn2.agent.session_resume(
                    v2.ResumeSessionRequest(session_id=sid, cwd="/tmp", replay_from=cursor)
                )
                await second.until(lambda: second.states()[-1:] == ["idle"])
                numbers = [n for n in first.numbers + second.numbers if n is not None]
                assert numbers == list(range(1, len(numbers) + 1))  # every update exactly once, in order
                assert first.texts() + second.texts() == [str(i) for i in range(50)] + [f"+{i}" for i in range(50)]

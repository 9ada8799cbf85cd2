"""The session host routes each agent request only to the attached clients whose own ``initialize``
capabilities allow it.

Spec: v1 ``initialization.mdx`` "Client Capabilities" (``fs.readTextFile`` gates
``fs/read_text_file``; a capability omitted is unsupported), ``file-system.mdx`` "Checking Support"
(an agent must not call a method the client did not advertise).  In memory; the rules are in
docs/site/guides/host.md ("Agent->client requests").
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from _host_kit import DEADLINE, Control, Recorder, agents, connected, new_session, text

from acp_schema import v1
from acp_trio.host import open_session_host

FS = v1.ClientCapabilities(fs=v1.FileSystemCapabilities(read_text_file=True))


class FsRecorder(Recorder):
    """A recording client that also serves ``fs/read_text_file`` (whether it advertised it or not)."""

    def __init__(self, answer: str | None = "allow") -> None:
        super().__init__(answer)
        self.reads: list[str] = []

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        self.reads.append(params.path)
        self.changed.unpark_all()
        return v1.ReadTextFileResponse(content="notes")


async def init(conn: Any, caps: v1.ClientCapabilities | None) -> None:
    request = v1.InitializeRequest(protocol_version=1)
    if caps is not None:
        request.client_capabilities = caps
    await conn.initialize(request)


def load(session_id: str) -> v1.LoadSessionRequest:
    return v1.LoadSessionRequest(session_id=session_id, cwd="/tmp", mcp_servers=[])


async def test_an_fs_request_reaches_only_the_client_with_fs_a_permission_request_both() -> None:
    """Before: the fs request went to both clients (the one without fs too)."""
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            a, b = FsRecorder(answer=None), FsRecorder()  # a never answers the permission: b does
            async with connected(host, a, v1) as conn_a, connected(host, b, v1) as conn_b:
                await init(conn_a, FS)
                await init(conn_b, None)
                sid = await new_session(conn_a)
                await conn_b.agent.session_load(load(sid))
                async with trio.open_nursery() as nursery:

                    async def turn() -> None:
                        answer = await conn_a.agent.session_prompt(
                            v1.PromptRequest(session_id=sid, prompt=text("wait read ask", v1))
                        )
                        assert answer.stop_reason == "end_turn"

                    nursery.start_soon(turn)
                    await host.wait_until(lambda: host.sessions()[sid].running)
                    control.gate.set()
                    await control.until(lambda: len(control.outcomes) == 2)
            assert a.reads == ["/notes.txt"] and b.reads == []
            assert control.outcomes[0] == "notes"
            assert len(a.asked) == len(b.asked) == 1 and a.withdrawn == 1
            assert control.outcomes[1].option_id == "allow"


async def test_a_request_no_attached_client_can_take_waits_for_one_that_can() -> None:
    """The client that prompted (with fs) leaves; one without fs attaches: the fs request waits,
    unattended, and goes to the next client with fs.  Before: it went to the client without fs."""
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(agents(control)) as host:
            a = FsRecorder()
            async with trio.open_nursery() as nursery:
                async with connected(host, a, v1) as conn_a:
                    await init(conn_a, FS)
                    sid = await new_session(conn_a)

                    async def prompt_and_leave() -> None:
                        with pytest.raises(Exception):  # noqa: B017  (the connection closes under it)
                            await conn_a.agent.session_prompt(
                                v1.PromptRequest(session_id=sid, prompt=text("wait read", v1))
                            )

                    nursery.start_soon(prompt_and_leave)
                    await host.wait_until(lambda: host.sessions()[sid].running)
            await host.wait_until(lambda: host.sessions()[sid].attached == 0)
            b, c = FsRecorder(), FsRecorder()
            async with connected(host, b, v1) as conn_b:
                await init(conn_b, None)
                await conn_b.agent.session_load(load(sid))
                control.gate.set()
                await host.wait_until(lambda: host.sessions()[sid].pending_requests == 1)
                async with connected(host, c, v1) as conn_c:
                    await init(conn_c, FS)
                    await conn_c.agent.session_load(load(sid))
                    await control.until(lambda: len(control.outcomes) == 1)
                    await host.wait_until(lambda: not host.sessions()[sid].running)
            assert control.outcomes == ["notes"] and c.reads == ["/notes.txt"] and b.reads == [] and a.reads == []

"""The session host routes each agent request only to the attached clients whose own ``initialize``
capabilities allow it.

Spec: v1 ``initialization.mdx`` "Client Capabilities" (``fs.readTextFile`` gates
``fs/read_text_file``; a capability omitted is unsupported), ``file-system.mdx`` "Checking Support"
(an agent must not call a method the client did not advertise); v2 ``elicitation.mdx`` "Checking
support" (a form elicitation needs ``elicitation.form``).  In memory; the rules are in
docs/site/guides/host.md ("Agent->client requests").
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import trio
from _host_kit import DEADLINE, Agent2, Control, Recorder, agents, connected, new_session, text

from acp_schema import v1, v2
from acp_trio._converter import converter
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


class Eliciting2(Agent2):
    """The kit's v2 agent whose turn asks a form elicitation."""

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        async def turn() -> str:
            schema = converter.structure({"type": "object", "properties": {}}, v2.ElicitationSchema)
            form = v2.FormCreateElicitationRequest(
                message="Name?", requested_schema=schema, session_id=params.session_id
            )
            self.control.outcomes.append(await self.conn.client.elicitation_create(form))
            self.control.touch()
            return "end_turn"

        self.conn.start_turn(params.session_id, turn)
        return v2.PromptResponse(message_id="u")


class Elicited(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.elicited = 0

    async def elicitation_create(self, params: Any) -> Any:
        self.elicited += 1
        return v2.AcceptCreateElicitationResponse(content={})


async def test_v2_a_form_elicitation_reaches_only_the_client_that_advertised_elicitation_form() -> None:
    control = Control()
    form = v2.ClientCapabilities(elicitation=v2.ElicitationCapabilities(form=v2.ElicitationFormCapabilities()))
    with trio.fail_after(DEADLINE):
        async with open_session_host({v2: functools.partial(Eliciting2, control)}) as host:
            a, b = Elicited(), Elicited()
            async with connected(host, a) as conn_a, connected(host, b) as conn_b:
                info = v2.Implementation(name="t", version="0")
                await conn_a.initialize(v2.InitializeRequest(protocol_version=2, info=info, capabilities=form))
                await conn_b.initialize(v2.InitializeRequest(protocol_version=2, info=info))
                sid = await new_session(conn_a)
                await conn_b.agent.session_resume(v2.ResumeSessionRequest(session_id=sid, cwd="/tmp"))
                await conn_a.agent.session_prompt(v2.PromptRequest(session_id=sid, prompt=text("go")))
                await control.until(lambda: len(control.outcomes) == 1)
            assert a.elicited == 1 and b.elicited == 0

"""The session host's attach token: a client reconnects to its agent instance without a new one.

The host's ``initialize`` answer carries ``_meta["acp-trio/attach"]``; a client whose ``initialize``
params carry it gets the instance's recorded answer and that instance as its home (``host.instances``
does not grow); an unknown token, or another principal's, gets a new instance and
``_meta["acp-trio/attached"]: false``.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import trio
from _host_kit import DEADLINE, Agent2, Control, Recorder

from acp_schema import v2
from acp_trio.host import ATTACH_META_KEY, ATTACHED_META_KEY, open_session_host

_instances = itertools.count(1)


class Lister(Agent2):
    """Agent2 whose session/list names its instance."""

    def __init__(self, control: Control, conn: Any) -> None:
        super().__init__(control, conn)
        self.number = next(_instances)

    async def session_list(self, params: v2.ListSessionsRequest) -> v2.ListSessionsResponse:
        return v2.ListSessionsResponse(sessions=[v2.SessionInfo(session_id=f"instance-{self.number}", cwd="/")])


def factory(control: Control) -> Any:
    return {v2: functools.partial(Lister, control)}


async def initialize(conn: Any, token: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"protocolVersion": 2, "info": {"name": "t", "version": "0"}}
    if token is not None:
        params["_meta"] = {ATTACH_META_KEY: token}
    result: dict[str, Any] = await conn.connection.request("initialize", params)
    return result


async def listed(conn: Any) -> str:
    result = await conn.connection.request("session/list", {})
    return str(result["sessions"][0]["sessionId"])


async def test_a_client_reconnects_to_its_instance_with_the_attach_token() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(factory(control)) as host:
            async with host.connect(Recorder(), variant=v2) as conn:
                first = await initialize(conn)
                token = first["_meta"][ATTACH_META_KEY]
                assert isinstance(token, str) and len(token) >= 40
                assert ATTACHED_META_KEY not in first["_meta"]
                await conn.connection.request(
                    "session/new", {"cwd": "/tmp"}
                )  # a live session keeps the instance after the client leaves
                where = await listed(conn)
            assert host.instances == 1
            async with host.connect(Recorder(), variant=v2) as conn:
                again = await initialize(conn, token)
                assert again["_meta"][ATTACHED_META_KEY] is True
                assert again["_meta"][ATTACH_META_KEY] == token
                assert {k: v for k, v in again.items() if k != "_meta"} == {
                    k: v for k, v in first.items() if k != "_meta"
                }
                assert host.instances == 1  # no new instance
                assert await listed(conn) == where


async def test_a_wrong_token_or_another_principals_falls_back_to_a_new_instance() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(factory(control)) as host:
            async with host.connect(Recorder(), variant=v2, principal="alice") as conn:
                token = (await initialize(conn))["_meta"][ATTACH_META_KEY]
                await conn.connection.request("session/new", {"cwd": "/tmp"})
                alices = await listed(conn)
            for principal, sent in (("alice", "not-a-token"), ("bob", token), (None, token)):
                async with host.connect(Recorder(), variant=v2, principal=principal) as conn:
                    answer = await initialize(conn, sent)
                    assert answer["_meta"][ATTACHED_META_KEY] is False
                    assert answer["_meta"][ATTACH_META_KEY] not in (token, sent)  # its own instance's token
                    assert await listed(conn) != alices
                    assert host.instances == 2  # alice's, and this connection's new one
                await host.wait_until(lambda: host.instances == 1)
            async with host.connect(Recorder(), variant=v2, principal="alice") as conn:
                assert (await initialize(conn, token))["_meta"][ATTACHED_META_KEY] is True
                assert await listed(conn) == alices


async def test_the_token_of_an_instance_that_ended_falls_back() -> None:
    control = Control()
    with trio.fail_after(DEADLINE):
        async with open_session_host(factory(control)) as host:
            async with host.connect(Recorder(), variant=v2) as conn:
                token = (await initialize(conn))["_meta"][ATTACH_META_KEY]
            await host.wait_until(lambda: host.instances == 0)  # no live session: it ended
            async with host.connect(Recorder(), variant=v2) as conn:
                assert (await initialize(conn, token))["_meta"][ATTACHED_META_KEY] is False
                assert host.instances == 1

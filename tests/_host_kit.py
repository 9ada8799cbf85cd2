"""A small agent and a recording client for the session host's tests (tests/test_host*.py).

The agent (v1 and v2) runs turns driven by the prompt's text: ``"count N"`` streams N agent message
chunks; ``"wait"`` then waits on the shared :class:`Control`'s gate; ``"ask"`` asks permission
(v2: reporting ``requires_action`` first, ``running`` after) and says what it got.  Sessions are
named ``s1``, ``s2``, ... across all instances of one :class:`Control`.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import trio

import acp_trio
from acp_schema import v1, v2
from acp_trio import RequestError
from acp_trio.host import UPDATE_META_KEY

DEADLINE = 10


class Control:
    """What the tests share with every agent instance of one host."""

    def __init__(self) -> None:
        self.gate = trio.Event()
        self.names = itertools.count(1)
        self.outcomes: list[Any] = []
        self.cancels: list[str] = []
        self.closed: list[str] = []
        self.turns_ended: list[tuple[str, str]] = []
        self.changed = trio.lowlevel.ParkingLot()

    def touch(self) -> None:
        self.changed.unpark_all()

    async def until(self, predicate: Any) -> None:
        while not predicate():
            await self.changed.park()


def _plan(prompt: list[Any]) -> tuple[int, bool, bool, int]:
    words = " ".join(getattr(block, "text", "") for block in prompt).split()
    count = int(words[words.index("count") + 1]) if "count" in words else 0
    after = int(words[words.index("after") + 1]) if "after" in words else 0
    return count, "wait" in words, "ask" in words, after


def _options(variant: Any) -> list[Any]:
    return [
        variant.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
        variant.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
    ]


class Agent2:
    def __init__(self, control: Control, conn: acp_trio.AgentSideConnection) -> None:
        self.control = control
        self.conn = conn

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        return v2.NewSessionResponse(session_id=f"s{next(self.control.names)}")

    async def session_resume(self, params: v2.ResumeSessionRequest) -> v2.ResumeSessionResponse:
        raise RequestError(-32002, "Resource not found", {"sessionId": params.session_id})

    async def session_close(self, params: v2.CloseSessionRequest) -> v2.CloseSessionResponse:
        self.control.closed.append(params.session_id)
        self.control.touch()
        return v2.CloseSessionResponse()

    async def session_cancel(self, params: v2.CancelSessionNotification) -> None:
        self.control.cancels.append(params.session_id)
        self.control.touch()

    async def send(self, session_id: str, update: Any) -> None:
        await self.conn.client.session_update(v2.UpdateSessionNotification(session_id=session_id, update=update))

    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        sid = params.session_id
        count, wait, ask, after = _plan(params.prompt)

        async def turn() -> str:
            try:
                for i in range(count):
                    chunk = v2.AgentMessageChunkSessionUpdate(message_id="a", content=v2.TextContentBlock(text=f"{i}"))
                    await self.send(sid, chunk)
                if wait:
                    await self.control.gate.wait()
                if ask:
                    await self.send(sid, v2.RequiresActionStateUpdateSessionUpdate())
                    request = v2.RequestPermissionRequest(
                        session_id=sid,
                        title="Go on?",
                        subject=v2.ToolCallRequestPermissionSubject(tool_call=v2.ToolCallUpdate(tool_call_id="c1")),
                        options=_options(v2),
                    )
                    response = await self.conn.client.session_request_permission(request)
                    self.control.outcomes.append(response.outcome)
                    self.control.touch()
                    await self.send(sid, v2.RunningStateUpdateSessionUpdate())
                    got = getattr(response.outcome, "option_id", "cancelled")
                    text = v2.TextContentBlock(text=f"permission: {got}")
                    await self.send(sid, v2.AgentMessageChunkSessionUpdate(message_id="b", content=text))
                for i in range(after):
                    chunk = v2.AgentMessageChunkSessionUpdate(message_id="c", content=v2.TextContentBlock(text=f"+{i}"))
                    await self.send(sid, chunk)
                return "end_turn"
            finally:
                self.control.turns_ended.append((sid, "ended"))
                self.control.touch()

        await self.send(sid, v2.UserMessageSessionUpdate(message_id="u", content=params.prompt))
        self.conn.start_turn(sid, turn)
        return v2.PromptResponse(message_id="u")


class Agent1:
    def __init__(self, control: Control, conn: acp_trio.AgentSideConnection) -> None:
        self.control = control
        self.conn = conn

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id=f"s{next(self.control.names)}")

    async def session_load(self, params: v1.LoadSessionRequest) -> v1.LoadSessionResponse:
        raise RequestError(-32002, "Resource not found", {"sessionId": params.session_id})

    async def session_cancel(self, params: v1.CancelNotification) -> None:
        self.control.cancels.append(params.session_id)
        self.control.touch()

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        sid = params.session_id
        count, wait, ask, after = _plan(params.prompt)
        client = self.conn.client
        for i in range(count):
            chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=f"{i}"))
            await client.session_update(v1.SessionNotification(session_id=sid, update=chunk))
        if wait:
            await self.control.gate.wait()
        if "fail" in " ".join(getattr(block, "text", "") for block in params.prompt).split():
            raise RequestError(-32603, "the turn failed")
        if "read" in " ".join(getattr(block, "text", "") for block in params.prompt).split():
            try:
                read = await client.fs_read_text_file(v1.ReadTextFileRequest(session_id=sid, path="/notes.txt"))
                self.control.outcomes.append(read.content)
            except RequestError as exc:
                self.control.outcomes.append(exc)
            self.control.touch()
        if ask:
            request = v1.RequestPermissionRequest(
                session_id=sid, tool_call=v1.ToolCallUpdate(tool_call_id="c1"), options=_options(v1)
            )
            response = await client.session_request_permission(request)
            self.control.outcomes.append(response.outcome)
            self.control.touch()
        for i in range(after):
            chunk = v1.AgentMessageChunkSessionUpdate(content=v1.TextContentBlock(text=f"+{i}"))
            await client.session_update(v1.SessionNotification(session_id=sid, update=chunk))
        self.control.turns_ended.append((sid, "ended"))
        self.control.touch()
        return v1.PromptResponse(stop_reason="end_turn")


def agents(control: Control) -> dict[Any, Any]:
    """The factory the host runs: v1 and v2 side by side."""
    return {v1: functools.partial(Agent1, control), v2: functools.partial(Agent2, control)}


class Recorder:
    """A client (either version) that records what it gets: updates with their host numbers, requests."""

    def __init__(self, answer: str | None = "allow") -> None:
        self.updates: list[Any] = []
        self.numbers: list[int | None] = []
        self.asked: list[Any] = []
        self.answer = answer  # None: never answers (until release is set)
        self.release = trio.Event()
        self.withdrawn = 0  # requests withdrawn ($/cancel_request) while this client was answering them
        self.ext: list[tuple[str, Any]] = []
        self.changed = trio.lowlevel.ParkingLot()

    async def until(self, predicate: Any) -> None:
        while not predicate():
            await self.changed.park()

    async def session_update(self, params: Any) -> None:
        self.updates.append(params.update)
        meta = params.meta if isinstance(params.meta, dict) else {}
        self.numbers.append(meta.get(UPDATE_META_KEY))
        self.changed.unpark_all()

    async def session_request_permission(self, params: Any) -> Any:
        self.asked.append(params)
        self.changed.unpark_all()
        variant = v2 if hasattr(params, "subject") else v1
        if self.answer is None:
            try:
                await self.release.wait()
            except trio.Cancelled:
                self.withdrawn += 1
                self.changed.unpark_all()
                raise
        return variant.RequestPermissionResponse(
            outcome=variant.SelectedRequestPermissionOutcome(option_id=self.answer or "allow")
        )

    def texts(self) -> list[str]:
        return [u.content.text for u in self.updates if type(u).__name__ == "AgentMessageChunkSessionUpdate"]

    def states(self) -> list[str]:
        names = {
            "RunningStateUpdateSessionUpdate": "running",
            "IdleStateUpdateSessionUpdate": "idle",
            "RequiresActionStateUpdateSessionUpdate": "requires_action",
        }
        return [names[type(u).__name__] for u in self.updates if type(u).__name__ in names]


async def init2(conn: acp_trio.ClientSideConnection) -> Any:
    return await conn.initialize(
        v2.InitializeRequest(protocol_version=2, info=v2.Implementation(name="t", version="0"))
    )


async def init1(conn: acp_trio.ClientSideConnection) -> Any:
    return await conn.initialize(v1.InitializeRequest(protocol_version=1))


def text(words: str, variant: Any = v2) -> list[Any]:
    return [variant.TextContentBlock(text=words)]


def connected(host: Any, rec: Recorder, variant: Any = v2, **options: Any) -> Any:
    """``host.connect(rec)`` in ``variant``, recording the host's extension notifications
    (``_acp_trio/turn_ended``, ``_acp_trio/session_ended``) in ``rec.ext``."""
    from contextlib import asynccontextmanager

    from acp_trio.host import SESSION_ENDED, TURN_ENDED

    @asynccontextmanager
    async def connect() -> Any:
        async with host.connect(rec, variant=variant, **options) as conn:
            for method in (TURN_ENDED, SESSION_ENDED):

                async def ended(params: Any, method: str = method) -> None:
                    rec.ext.append((method, params))
                    rec.changed.unpark_all()

                conn.on_ext_notification(method, ended)
            yield conn

    return connect()


async def new_session(conn: acp_trio.ClientSideConnection) -> str:
    variant = conn.variant
    return str((await conn.agent.session_new(variant.NewSessionRequest(cwd="/tmp", mcp_servers=[]))).session_id)

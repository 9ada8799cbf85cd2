"""Test kit for the version-neutral agent API (``acp_trio.neutral``): an in-memory client of either
protocol version that records what it read on its wire, answers questions as told, and the
session setup both versions need."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import trio
from trio.testing import memory_stream_pair

from acp_schema import v1, v2
from acp_trio import AgentSideConnection, ClientSideConnection, RequestError
from acp_trio.session_state import SessionStates

DEADLINE = 10  # seconds; everything here takes milliseconds in memory


class Client:
    """A client of ``variant``.  ``permission``: the option id it selects, or ``"wait"`` (never
    answers: only ``session/cancel`` does, through the runtime).  ``elicitation``: the wire answer
    to ``elicitation/create``, or ``"wait"``.  ``asked`` is set when a question arrives; ``idle``
    when a v2 turn ends."""

    def __init__(
        self,
        variant: ModuleType,
        *,
        permission: str = "allow",
        elicitation: Any = None,
        files: dict[str, str] | None = None,
    ) -> None:
        self.variant = variant
        self.permission = permission
        self.elicitation = elicitation if elicitation is not None else {"action": "accept", "content": {"name": "x"}}
        self.asked = trio.Event()
        self.idle = trio.Event()
        self.files = files if files is not None else {}
        self.written: dict[str, str] = {}
        self.states = SessionStates()  # every update folded, per session
        self._seen: dict[str, trio.Event] = {}  # sessionUpdate kind -> set once one arrived
        self.arrivals: list[tuple[float, Any]] = []  # (trio.current_time(), update) of each update

    async def session_update(self, params: Any) -> None:
        self.states.state(params.session_id).apply(params)
        self._seen.setdefault(params.update.session_update, trio.Event()).set()
        self.arrivals.append((trio.current_time(), params.update))
        if isinstance(params.update, v2.IdleStateUpdateSessionUpdate):
            self.idle.set()

    async def seen(self, kind: str) -> None:
        """Wait until an update of ``kind`` (``"tool_call"``...) arrived."""
        await self._seen.setdefault(kind, trio.Event()).wait()

    async def session_request_permission(self, params: Any) -> Any:
        self.asked.set()
        m = self.variant
        if self.permission == "wait":
            await trio.sleep_forever()
        return m.RequestPermissionResponse(outcome=m.SelectedRequestPermissionOutcome(option_id=self.permission))

    async def elicitation_create(self, params: Any) -> Any:
        self.asked.set()
        if self.elicitation == "wait":
            await trio.sleep_forever()
        from acp_trio._converter import converter

        return converter.structure(self.elicitation, self.variant.CreateElicitationResponse)

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        if params.path not in self.files:
            raise RequestError.resource_not_found(params.path)
        return v1.ReadTextFileResponse(content=self.files[params.path])

    async def fs_write_text_file(self, params: v1.WriteTextFileRequest) -> v1.WriteTextFileResponse:
        self.written[params.path] = params.content
        return v1.WriteTextFileResponse()


class Wire:
    """The client's view of the connection: ``conn`` (its end), ``client`` and ``received`` (each
    message it read, as JSON)."""

    def __init__(self, conn: ClientSideConnection, client: Client, received: list[bytes]) -> None:
        self.conn = conn
        self.client = client
        self._received = received

    @property
    def agent(self) -> Any:
        return self.conn.agent

    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self._received]

    def updates(self) -> list[dict[str, Any]]:
        """The session updates and questions read, in order: an update as its ``update`` object, a
        question as ``{"permission": params}`` / ``{"elicitation": params}``."""
        out: list[dict[str, Any]] = []
        for message in self.messages():
            method = message.get("method")
            if method == "session/update":
                out.append(message["params"]["update"])
            elif method == "session/request_permission":
                out.append({"permission": message["params"]})
            elif method == "elicitation/create":
                out.append({"elicitation": message["params"]})
        return out

    def kinds(self) -> list[str]:
        return [kind(u) for u in self.updates()]

    def clear(self) -> None:
        self._received.clear()

    async def new_session(self, cwd: str = "/work", **extra: Any) -> str:
        m = self.client.variant
        if m is v1:
            new = await self.agent.session_new(v1.NewSessionRequest(cwd=cwd, mcp_servers=[], **extra))
        else:
            new = await self.agent.session_new(v2.NewSessionRequest(cwd=cwd, **extra))
        session_id: str = new.session_id
        return session_id

    async def cancel(self, session_id: str) -> None:
        """Send ``session/cancel`` (v1 ``CancelNotification``, v2 ``CancelSessionNotification``)."""
        m = self.client.variant
        kind = v1.CancelNotification if m is v1 else v2.CancelSessionNotification
        await self.agent.session_cancel(kind(session_id=session_id))

    async def prompt(self, session_id: str, text: str = "hi") -> Any:
        """Send ``session/prompt``; v1: its answer; v2: the receipt, after the turn's ``idle``."""
        m = self.client.variant
        self.client.idle = trio.Event()
        result = await self.agent.session_prompt(
            m.PromptRequest(session_id=session_id, prompt=[m.TextContentBlock(text=text)])
        )
        if m is v2:
            await self.client.idle.wait()
        return result


def kind(update: dict[str, Any]) -> str:
    if "permission" in update or "elicitation" in update:
        return next(iter(update))
    if update["sessionUpdate"] == "state_update":
        return f"state:{update['state']}"
    return str(update["sessionUpdate"])


def v1_caps(*, elicitation: bool = False, fs: bool = False, terminal: bool = False) -> v1.ClientCapabilities:
    return v1.ClientCapabilities(
        elicitation=v1.ElicitationCapabilities(form=v1.ElicitationFormCapabilities()) if elicitation else v1.UNSET,
        fs=v1.FileSystemCapabilities(read_text_file=True, write_text_file=True) if fs else v1.UNSET,
        terminal=True if terminal else v1.UNSET,
    )


def v2_caps(*, elicitation: bool = False) -> v2.ClientCapabilities:
    return v2.ClientCapabilities(
        elicitation=v2.ElicitationCapabilities(form=v2.ElicitationFormCapabilities()) if elicitation else v2.UNSET
    )


@asynccontextmanager
async def connected(
    agent: Any,
    client: Client,
    *,
    elicitation: bool = False,
    fs: bool = False,
    terminal: bool = False,
    deadline: float = DEADLINE,
) -> AsyncIterator[Wire]:
    """``agent`` (anything ``AgentSideConnection`` takes: a neutral agent itself) served in memory
    to ``client``, initialized in ``client.variant``'s protocol version; the whole block within
    ``deadline`` seconds (more than ``DEADLINE`` for a block that starts processes)."""
    received: list[bytes] = []
    tap = lambda d, data: received.append(data) if d == "in" else None  # noqa: E731
    agent_stream, client_stream = memory_stream_pair()
    agent_conn = AgentSideConnection(agent, agent_stream, agent_stream)
    client_conn = ClientSideConnection({client.variant: client}, client_stream, client_stream, tap=tap)
    with trio.fail_after(deadline):
        async with agent_conn, client_conn:
            if client.variant is v1:
                caps = v1_caps(elicitation=elicitation, fs=fs, terminal=terminal)
                await client_conn.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=caps))
            else:
                info = v2.Implementation(name="test-client", version="1")
                request = v2.InitializeRequest(
                    protocol_version=2, info=info, capabilities=v2_caps(elicitation=elicitation)
                )
                await client_conn.initialize(request)
            assert client_conn.protocol_version == client.variant.PROTOCOL_VERSION
            yield Wire(client_conn, client, received)

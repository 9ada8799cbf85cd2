"""``FakeClient``: a scripted ACP client for testing agents (v1 and v2), no disk, no processes."""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import trio

from .._core import RequestError
from ..permissions import PermissionBroker, allow_all, deny_all
from ..session_state import SessionState, SessionStates
from ..standard_client import initialize_requests, new_session, wait_turn_end

if TYPE_CHECKING:
    from acp_schema import v1

    from .._roles import ClientSideConnection

PermissionAnswer: TypeAlias = Literal["allow", "reject", "cancel"] | Callable[[Any], Any]
"""How a :class:`FakeClient` answers ``session/request_permission``: ``"allow"`` (an ``allow_once``
option, else ``allow_always``; :func:`acp_trio.allow_all`), ``"reject"`` (``reject_once``, else
``reject_always``, else ``cancelled``; :func:`acp_trio.deny_all`), ``"cancel"`` (the ``cancelled``
outcome), or a callable ``(request) -> optionId | None`` (sync or async; ``None`` answers
``cancelled``; an id not offered is answered as ``"reject"``, see
:class:`acp_trio.permissions.PermissionBroker`)."""

CLIENT_INFO: dict[str, str] = {"name": "acp-trio-fake-client", "version": "0"}


def _policy(permission: PermissionAnswer) -> Callable[[Any], Awaitable[str | None]]:
    if permission == "allow":
        return allow_all()
    if permission == "reject":
        return deny_all()
    if permission == "cancel":

        async def cancel(request: Any) -> str | None:
            return None

        return cancel
    if isinstance(permission, str) or not callable(permission):
        raise ValueError(
            f"permission must be 'allow', 'reject', 'cancel' or a callable (request) -> option id | None, "
            f"got {permission!r}"
        )
    answer = permission

    async def scripted(request: Any) -> str | None:
        choice = answer(request)
        if inspect.isawaitable(choice):
            choice = await choice
        return choice  # type: ignore[no-any-return]

    return scripted


class FakeClient:
    """A scripted client handler that records everything an agent sends it (protocol versions 1 and 2).

    - every ``session/update`` is folded into :attr:`states` (a
      :class:`~acp_trio.session_state.SessionStates`: ``client.states[session_id]`` is the
      :class:`~acp_trio.SessionState`) and appended to :attr:`updates` as ``(session_id, update)``;
    - ``session/request_permission`` is appended to :attr:`permission_requests` and answered per
      ``permission`` (:data:`PermissionAnswer`; default ``"allow"``); the chosen ``optionId``
      (``None``: ``cancelled``) is appended to :attr:`permission_answers`.  ``session/cancel``
      answers pending ones ``cancelled`` as for any client (the runtime does it);
    - v1 ``fs/read_text_file`` is served from :attr:`files` (``{absolute path: text}``, given as
      ``files``; ``line`` 1-based and ``limit`` in lines, endings kept; a path not in it answers
      -32002 "Resource not found", a relative path or a bad ``line``/``limit`` -32602), and
      ``fs/write_text_file`` stores into :attr:`files` and :attr:`written` (``{path: text}``, the
      last write of each path; :attr:`writes` keeps them all in order) unless ``writable=False``
      (then it is not advertised and answers -32601).  v2 has no client file system;
    - ``terminal/*`` and ``elicitation/*`` are not offered: not advertised, answered -32601.

    ``capabilities``: the wire JSON to advertise instead (v1 ``clientCapabilities`` / v2
    ``capabilities``), e.g. ``{"fs": {"readTextFile": True}, "terminal": True}`` to see how an agent
    reacts; the handlers stay as above.

    Connect it with :func:`~acp_trio.testing.pair` (which calls :meth:`bind`), or give
    ``client.bind`` as the ``client`` factory of a connection; then :meth:`initialize`,
    :meth:`new_session`, :meth:`prompt` (returns the stop reason in both versions) and
    :meth:`cancel` drive the agent.  One object serves one connection.
    """

    def __init__(
        self,
        *,
        files: Mapping[str, str] | None = None,
        permission: PermissionAnswer = "allow",
        writable: bool = True,
        capabilities: Mapping[str, Any] | None = None,
        info: Mapping[str, str] | None = None,
    ) -> None:
        self.files: dict[str, str] = dict(files or {})
        """The file system ``fs/*`` serves: ``{absolute path: text}`` (writes change it)."""
        self.written: dict[str, str] = {}
        """``{path: text}`` of every path written by ``fs/write_text_file`` (the last write of each)."""
        self.writes: list[tuple[str, str]] = []
        """Every ``fs/write_text_file`` as ``(path, text)``, in order."""
        self.reads: list[str] = []
        """The path of every ``fs/read_text_file``, in order (also those answered with an error)."""
        self.writable = writable
        self.updates: list[tuple[str, Any]] = []
        """Every ``session/update`` as ``(session_id, update)`` (the typed ``SessionUpdate``), in order."""
        self.permission_requests: list[Any] = []
        """Every ``session/request_permission`` request (typed, v1 or v2), in arrival order."""
        self.permission_answers: list[str | None] = []
        """The ``optionId`` answered to each request (``None``: ``cancelled``), in answer order."""
        self.states = SessionStates()
        """A :class:`~acp_trio.SessionState` per session reported about (or opened with :meth:`new_session`)."""
        self.permissions = PermissionBroker(
            _policy(permission), on_answer=lambda entry: self.permission_answers.append(entry.option_id)
        )
        self._capabilities = dict(capabilities) if capabilities is not None else None
        self.info = dict(info or CLIENT_INFO)
        self._conn: ClientSideConnection | None = None

    # -- wiring ----------------------------------------------------------------------------------
    def bind(self, conn: ClientSideConnection) -> FakeClient:
        """Attach this client to ``conn`` and return it (a ``client`` factory for a connection).

        Raises ``RuntimeError`` when it is already bound to another connection."""
        if self._conn is not None and self._conn is not conn:
            raise RuntimeError("this FakeClient already serves another connection; make one per connection")
        self._conn = conn
        return self

    @property
    def conn(self) -> ClientSideConnection:
        """The connection (``RuntimeError`` before :meth:`bind`)."""
        if self._conn is None:
            raise RuntimeError("this FakeClient is not connected: use acp_trio.testing.pair(), or client=fake.bind")
        return self._conn

    def state(self, session_id: str) -> SessionState:
        """The :class:`~acp_trio.SessionState` of ``session_id`` (created empty when unknown)."""
        return self.states.state(session_id)

    def capabilities_for(self, variant: ModuleType) -> Any:
        """The ``ClientCapabilities`` of ``variant`` this client advertises: v1 ``fs`` read (and
        write when ``writable``) and no terminal; v2 nothing; or the ``capabilities`` given."""
        from .._converter import converter

        if self._capabilities is not None:
            wire: dict[str, Any] = self._capabilities
        elif variant.PROTOCOL_VERSION < 2:
            wire = {"fs": {"readTextFile": True, "writeTextFile": self.writable}, "terminal": False}
        else:
            wire = {}
        return converter.structure(wire, variant.ClientCapabilities)

    def initialize_requests(self) -> list[Any]:
        """One ``InitializeRequest`` per protocol version the connection speaks (highest first)."""
        return initialize_requests(self.conn, self.capabilities_for, self.info)

    # -- driving the agent -----------------------------------------------------------------------
    async def initialize(self, *, timeout: float | None = None) -> Any:
        """Send ``initialize`` offering every version the connection speaks; returns the agent's
        ``InitializeResponse`` (negotiated variant).  ``timeout``: seconds.  Raises what
        :meth:`acp_trio.ClientSideConnection.initialize` raises."""
        return await self.conn.initialize(*self.initialize_requests(), timeout=timeout)

    async def new_session(self, cwd: str = "/", *, timeout: float | None = None, **fields: Any) -> str:
        """Send ``session/new`` (``cwd``: an absolute path; v1 with no MCP servers; ``fields``: more
        wire fields, e.g. ``additionalDirectories=[...]``) and return the session id; the response's
        modes, config options and commands go into :attr:`states`."""
        return await new_session(self.conn, self.states, cwd, timeout=timeout, **fields)

    async def prompt(self, session_id: str, content: str | Sequence[Any], *, timeout: float | None = None) -> Any:
        """Send ``session/prompt`` (``content``: text, or content blocks of the negotiated variant)
        and return the turn's stop reason (``"end_turn"``, ``"cancelled"``, ...) once it ended.

        v1: the response's ``stopReason`` (the prompt is added to the session's state as a user
        message first); v2: the ``stopReason`` of the ``idle`` state update that ends the turn
        (``None`` when it carried none).  ``timeout``: seconds for the whole turn (``TimeoutError``).
        Raises what the request raises; before a v2 turn ends, the connection's ``ConnectionClosed``
        when it closes, :class:`~acp_trio.standard_client.SessionEnded` when the session's state is
        discarded (:func:`acp_trio.standard_client.wait_turn_end`).
        """
        variant = self.conn.variant
        blocks: list[Any] = [variant.TextContentBlock(text=content)] if isinstance(content, str) else list(content)
        request = variant.PromptRequest(session_id=session_id, prompt=blocks)
        state = self.states.state(session_id)
        with trio.fail_after(math.inf if timeout is None else timeout):
            if self.conn.protocol_version < 2:
                state.add_user_message(blocks)
                response: v1.PromptResponse = await self.conn.agent.session_prompt(request)
                return response.stop_reason
            mark = state.idle_count
            await self.conn.agent.session_prompt(request)
            return await wait_turn_end(self.conn, self.states, session_id, after=mark)

    async def cancel(self, session_id: str) -> None:
        """Send ``session/cancel`` for ``session_id``."""
        spec = self.conn.variant.NOTIFICATIONS["session/cancel"]
        await self.conn.send_notification(spec, spec.params_type(session_id=session_id))

    # -- handlers --------------------------------------------------------------------------------
    async def session_update(self, params: Any) -> None:
        """Record the update and fold it into :attr:`states`."""
        self.updates.append((params.session_id, params.update))
        await self.states.session_update(params)

    async def session_request_permission(self, params: Any) -> Any:
        """Record the request and answer it per ``permission``."""
        self.permission_requests.append(params)
        return await self.permissions.session_request_permission(params)

    async def fs_read_text_file(self, params: Any) -> Any:
        """Serve ``params.path`` from :attr:`files` (v1)."""
        from acp_schema import v1

        path = params.path
        self.reads.append(path)
        if not isinstance(path, str) or not path.startswith("/"):
            raise RequestError.invalid_params({"path": "$.path", "detail": f"the path must be absolute, got {path!r}"})
        if path not in self.files:
            raise RequestError.resource_not_found(path)
        line = params.line if isinstance(params.line, int) else 1
        limit = params.limit if isinstance(params.limit, int) else None
        if line < 1:
            raise RequestError.invalid_params({"path": "$.line", "detail": f"line is 1-based, got {line}"})
        if limit is not None and limit < 0:
            raise RequestError.invalid_params({"path": "$.limit", "detail": f"limit must be >= 0, got {limit}"})
        lines = self.files[path].splitlines(keepends=True)[line - 1 :]
        if limit is not None:
            lines = lines[:limit]
        return v1.ReadTextFileResponse(content="".join(lines))

    async def fs_write_text_file(self, params: Any) -> Any:
        """Store ``params.content`` at ``params.path`` (v1); -32601 when not ``writable``."""
        from acp_schema import v1

        if not self.writable:
            raise RequestError.method_not_found("fs/write_text_file")
        path = params.path
        if not isinstance(path, str) or not path.startswith("/"):
            raise RequestError.invalid_params({"path": "$.path", "detail": f"the path must be absolute, got {path!r}"})
        self.files[path] = self.written[path] = params.content
        self.writes.append((path, params.content))
        return v1.WriteTextFileResponse()


__all__ = ["FakeClient", "PermissionAnswer"]

"""A client with every battery plugged in: the editor side of ACP in a page of code.

:class:`StandardClient` answers everything an agent may ask of a client, for the sessions this
client opened (``conn.sessions``):

- ``fs/read_text_file`` / ``fs/write_text_file`` inside each session's ``cwd`` and
  ``additionalDirectories`` (:class:`acp_trio.fs.SessionFileSystem`);
- ``terminal/*`` with real processes, released when their session ends or the connection closes
  (:class:`acp_trio.terminals.TerminalManager`; working directories kept inside the roots);
- ``session/request_permission`` through a policy (:class:`acp_trio.permissions.PermissionBroker`;
  default :func:`~acp_trio.permissions.deny_all`, so nothing runs unless you allow it);
- ``session/update``, folded into one :class:`acp_trio.session_state.SessionState` per session
  (``client.states``); override :meth:`StandardClient.on_update` to render it as it changes.

Use it as the ``client`` of :func:`acp_trio.spawn_agent` (it takes the connection first)::

    async with spawn_agent("my-agent", client=functools.partial(StandardClient, policy=allow_kinds({"read"}))) as conn:
        client: StandardClient = conn.handler
        await conn.agent.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=client.capabilities))
        session = await conn.agent.session_new(v1.NewSessionRequest(cwd=str(workdir), mcp_servers=[]))
        response = await client.prompt(session.session_id, "Summarize notes.txt")
        print(client.states[session.session_id].messages[-1].text)

Sources: ``docs/protocol/v1/file-system.mdx``, ``terminals.mdx``, ``tool-calls.mdx`` (permission),
``prompt-turn.mdx`` (updates, cancellation), ``initialization.mdx`` (client capabilities).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from acp_schema import v1

from ._capabilities import CapabilityError
from ._core import RequestError
from .fs import SessionFileSystem
from .permissions import PermissionBroker, PermissionPolicy, deny_all
from .session_state import SessionState, SessionStates
from .terminals import DEFAULT_OUTPUT_BYTE_LIMIT, OutputListener, TerminalManager

if TYPE_CHECKING:
    from ._roles import ClientSideConnection


class StandardClient:
    """The batteries as one client object (see the module docstring).

    ``conn``: the :class:`~acp_trio.ClientSideConnection` (passed by the runtime when this class,
    or a ``functools.partial`` of it, is the ``client``).  Options:

    - ``policy``: how ``session/request_permission`` is answered (a
      :data:`~acp_trio.permissions.PermissionPolicy`; default ``deny_all()``);
      ``permission_timeout``: seconds the policy may take before the request is denied;
    - ``writable``: allow ``fs/write_text_file`` (advertised as ``fs.writeTextFile``);
      ``read_overlay(path) -> str | None`` and ``on_write(path, old, new)``: editor buffer hooks of
      :class:`~acp_trio.fs.SessionFileSystem`;
    - ``terminals``: offer ``terminal/*`` (advertised as ``terminal``); ``terminal_cwd``: ``"roots"``
      (default: a terminal's ``cwd`` must lie in the session's roots) or ``"any"``;
      ``output_byte_limit``: bytes of output kept when the agent sets none; ``kill_grace``: seconds
      between SIGTERM and SIGKILL; ``on_output(terminal, data)``: live output.

    Attributes: ``conn``, ``fs``, ``permissions``, ``terminals`` (``None`` when disabled),
    ``states`` (:class:`~acp_trio.session_state.SessionStates`).  Subclasses override
    :meth:`on_update` (and any handler, calling ``super()``).
    """

    def __init__(
        self,
        conn: ClientSideConnection,
        *,
        policy: PermissionPolicy | None = None,
        permission_timeout: float | None = None,
        writable: bool = True,
        read_overlay: Callable[[Path], str | None] | None = None,
        on_write: Callable[[Path, str | None, str], object] | None = None,
        terminals: bool = True,
        terminal_cwd: Literal["any", "roots"] = "roots",
        output_byte_limit: int | None = DEFAULT_OUTPUT_BYTE_LIMIT,
        kill_grace: float = 2.0,
        on_output: OutputListener | None = None,
    ) -> None:
        self.conn = conn
        self.fs = SessionFileSystem(conn.sessions, writable=writable, read_overlay=read_overlay, on_write=on_write)
        self.permissions = PermissionBroker(policy if policy is not None else deny_all(), timeout=permission_timeout)
        self.terminals: TerminalManager | None = None
        if terminals:
            self.terminals = TerminalManager(
                conn,
                default_output_byte_limit=output_byte_limit,
                kill_grace=kill_grace,
                allowed_cwd=terminal_cwd,
                on_output=on_output,
            )
        self.states = SessionStates(on_update=self.on_update)

    @property
    def capabilities(self) -> v1.ClientCapabilities:
        """What to send as ``clientCapabilities`` in ``initialize``: fs read (and write when
        ``writable``), and ``terminal`` when terminals are on."""
        return v1.ClientCapabilities(fs=self.fs.capabilities, terminal=self.terminals is not None)

    # -- rendering hook --------------------------------------------------------------------------
    def on_update(self, state: SessionState, update: Any) -> None:
        """Called after each ``session/update`` was folded into ``state`` (``update``: the
        ``SessionUpdate`` variant).  Does nothing; override it to render the transcript."""

    # -- conveniences ----------------------------------------------------------------------------
    async def prompt(
        self, session_id: str, content: str | Sequence[v1.ContentBlock], *, timeout: float | None = None
    ) -> v1.PromptResponse:
        """Send ``session/prompt`` (``content``: text, or content blocks) and return its response.

        The prompt is recorded as a user message in ``states[session_id]`` first; when the turn
        ends ``cancelled``, its unfinished tool calls are marked cancelled (prompt-turn.mdx).
        Raises what :meth:`acp_trio.ClientSideConnection.send_request` raises.
        """
        blocks: list[v1.ContentBlock] = (
            [v1.TextContentBlock(text=content)] if isinstance(content, str) else list(content)
        )
        state = self.states.state(session_id)
        entry = state.add_user_message(blocks)  # before sending: the agent's updates come after it
        try:
            response: v1.PromptResponse = await self.conn.agent.session_prompt(
                v1.PromptRequest(session_id=session_id, prompt=blocks), timeout=timeout
            )
        except CapabilityError:  # refused before anything was sent: the agent never saw this prompt
            if entry in state.transcript:
                state.transcript.remove(entry)
            raise
        if response.stop_reason == "cancelled":
            state.cancel_unfinished_tool_calls()
        return response

    async def cancel(self, session_id: str) -> None:
        """Send ``session/cancel`` for ``session_id``: the runtime then answers that session's
        pending permission requests ``cancelled``, and the agent ends the turn ``cancelled``."""
        await self.conn.agent.session_cancel(v1.CancelNotification(session_id=session_id))

    # -- handlers --------------------------------------------------------------------------------
    async def session_update(self, params: v1.SessionNotification) -> None:
        """Fold the update into ``states`` (then :meth:`on_update` runs)."""
        await self.states.session_update(params)

    async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        """Answer through the permission broker's policy.

        A request that names a tool call without its ``kind`` gets the kind the agent announced
        for it earlier in ``session/update`` (so ``allow_kinds`` sees it).
        """
        tool_call = params.tool_call
        if not tool_call.kind:
            kind = self.states.tool_kind(params.session_id, tool_call.tool_call_id)
            if kind:
                tool_call = copy.copy(tool_call)
                tool_call.kind = kind  # type: ignore[assignment]
                params = copy.copy(params)
                params.tool_call = tool_call
        return await self.permissions.session_request_permission(params)

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        """Read inside the session's roots (see :class:`~acp_trio.fs.SessionFileSystem`)."""
        return await self.fs.fs_read_text_file(params)

    async def fs_write_text_file(self, params: v1.WriteTextFileRequest) -> v1.WriteTextFileResponse:
        """Write atomically inside the session's roots (see :class:`~acp_trio.fs.SessionFileSystem`)."""
        return await self.fs.fs_write_text_file(params)

    def _terminal_manager(self, method: str) -> TerminalManager:
        if self.terminals is None:
            raise RequestError.method_not_found(method)
        return self.terminals

    async def terminal_create(self, params: v1.CreateTerminalRequest) -> v1.CreateTerminalResponse:
        """Start a command (see :class:`~acp_trio.terminals.TerminalManager`); -32601 when terminals are off."""
        return await self._terminal_manager("terminal/create").terminal_create(params)

    async def terminal_output(self, params: v1.TerminalOutputRequest) -> v1.TerminalOutputResponse:
        """The terminal's output so far, its truncation flag and exit status."""
        return await self._terminal_manager("terminal/output").terminal_output(params)

    async def terminal_wait_for_exit(self, params: v1.WaitForTerminalExitRequest) -> v1.WaitForTerminalExitResponse:
        """Wait for the command to exit."""
        return await self._terminal_manager("terminal/wait_for_exit").terminal_wait_for_exit(params)

    async def terminal_kill(self, params: v1.KillTerminalRequest) -> v1.KillTerminalResponse:
        """Kill the command; the terminal stays valid."""
        return await self._terminal_manager("terminal/kill").terminal_kill(params)

    async def terminal_release(self, params: v1.ReleaseTerminalRequest) -> v1.ReleaseTerminalResponse:
        """Kill the command if it runs and forget the terminal."""
        return await self._terminal_manager("terminal/release").terminal_release(params)

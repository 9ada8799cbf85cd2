"""A client with every battery plugged in: the editor side of ACP in a page of code, in protocol version 1 or 2.

:class:`StandardClient` answers everything an agent may ask of a client, for the sessions this
client opened (``conn.sessions``):

- ``fs/read_text_file`` / ``fs/write_text_file`` inside each session's ``cwd`` and
  ``additionalDirectories`` (:class:`acp_trio.fs.SessionFileSystem`; v1 only: v2 has no client
  file system);
- ``terminal/*`` with real processes, released when their session ends or the connection closes
  (:class:`acp_trio.terminals.TerminalManager`; working directories kept inside the roots; v1 only);
- ``session/request_permission`` through a policy (:class:`acp_trio.permissions.PermissionBroker`;
  default :func:`~acp_trio.permissions.deny_all`, so nothing runs unless you allow it), v1 and v2;
- ``elicitation/create`` and ``elicitation/complete`` through a policy
  (:class:`acp_trio.elicitation.ElicitationBroker`), advertised only when one is given; without
  one every elicitation is answered -32602, as the spec says for modes a client did not advertise;
- ``session/update``, folded into one :class:`acp_trio.session_state.SessionState` per session
  (``client.states``); override :meth:`StandardClient.on_update` to render it as it changes.

It works on whichever version the connection negotiates: its handlers take the types of either
variant and answer in the request's own variant; :meth:`StandardClient.initialize` offers every
version the connection speaks, :meth:`StandardClient.prompt` returns when the turn ends in both
(v1: the ``session/prompt`` response; v2: the ``idle`` state update after the receipt).  Give it
for several versions with :meth:`StandardClient.for_versions`, which builds one object per
connection for all of them::

    make = StandardClient.for_versions(policy=allow_kinds({"read"}))  # {v1: make, v2: make}
    async with spawn_agent("my-agent", client=make) as conn:
        client: StandardClient = conn.handler
        await client.initialize(timeout=30)  # v2 if the agent has it, else v1
        session_id = await client.new_session(workdir)
        result = await client.prompt(session_id, "Summarize notes.txt")
        print(result.stop_reason, client.states[session_id].messages[-1].text)

Sources: ``docs/protocol/v1/file-system.mdx``, ``terminals.mdx``, ``tool-calls.mdx`` (permission),
``elicitation.mdx``, ``prompt-turn.mdx`` (updates, cancellation), ``initialization.mdx`` (client
capabilities); ``docs/protocol/v2/migration.mdx`` (Version negotiation, the prompt lifecycle,
Permission requests), ``v2/prompt-lifecycle.mdx``, ``v2/elicitation.mdx``.
"""

from __future__ import annotations

import copy
import math
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import attrs
import trio

from acp_schema import v1

from ._capabilities import CapabilityError
from ._core import RequestError
from .elicitation import MODES, ElicitationBroker, ElicitationPolicy, Mode
from .fs import SessionFileSystem
from .permissions import PermissionBroker, PermissionPolicy, deny_all
from .session_state import SessionState, SessionStates
from .terminals import DEFAULT_OUTPUT_BYTE_LIMIT, OutputListener, TerminalManager

if TYPE_CHECKING:
    from acp_schema import v2

    from ._roles import ClientSideConnection


_Client = TypeVar("_Client", bound="StandardClient")


class SessionEnded(Exception):
    """The session ended, on a connection still open, before the turn being waited for did
    (protocol version 2: :meth:`StandardClient.prompt`, :meth:`StandardClient.wait_turn_end`).

    The turn's end is seen in the session's state (``client.states``); this is raised when that
    state is discarded meanwhile (:meth:`~acp_trio.session_state.SessionStates.discard`, e.g. from
    ``conn.sessions.on_end``), so no ``idle`` update can end the wait.  ``session_id``: the
    session.  ``reason``: how the session ended when it did (``"session/close"``,
    ``"session/delete"``), else ``"discarded"``.  Not a :class:`~acp_trio.ConnectionClosed`: the
    connection is fine.
    """

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(f"session {session_id!r} ended ({reason}) before its turn did")
        self.session_id = session_id
        self.reason = reason


@attrs.frozen
class TurnResult:
    """How a protocol version 2 prompt turn ended (what :meth:`StandardClient.prompt` returns in v2).

    ``stop_reason``: the ``stopReason`` of the ``idle`` state update that ended the turn
    (``"end_turn"``, ``"cancelled"``, ``"error"``, ...; ``None`` when it carried none).
    ``error``: that update's ``error`` (a v2 ``Error``: ``code``, ``message``) or ``None``.
    ``message_id``: the user message's id from the ``session/prompt`` receipt.  ``receipt``: the
    v2 ``PromptResponse``.  Spec: ``docs/protocol/v2/prompt-lifecycle.mdx``.
    """

    stop_reason: str | None
    error: Any
    message_id: str
    receipt: Any


class StandardClient:
    """The batteries as one client object (see the module docstring).

    ``conn``: the :class:`~acp_trio.ClientSideConnection` (passed by the runtime when this class,
    or a ``functools.partial`` of it, is the ``client``).  Options:

    - ``policy``: how ``session/request_permission`` is answered (a
      :data:`~acp_trio.permissions.PermissionPolicy`; default ``deny_all()``);
      ``permission_timeout``: seconds the policy may take before the request is denied;
    - ``elicitation``: how ``elicitation/create`` is answered (an
      :data:`~acp_trio.elicitation.ElicitationPolicy`, e.g. ``ask_user(dialog)``; default
      ``None``: elicitation is not advertised and requests are answered -32602);
      ``elicitation_modes``: the modes advertised with a policy (default ``("form", "url")``);
      ``elicitation_timeout``: seconds the policy may take before ``cancel`` is answered;
    - ``writable``: allow ``fs/write_text_file`` (advertised as ``fs.writeTextFile``);
      ``read_overlay(path) -> str | None`` and ``on_write(path, old, new)``: editor buffer hooks of
      :class:`~acp_trio.fs.SessionFileSystem`;
    - ``terminals``: offer ``terminal/*`` (advertised as ``terminal``); ``terminal_cwd``: ``"roots"``
      (default: a terminal's ``cwd`` must lie in the session's roots) or ``"any"``;
      ``output_byte_limit``: bytes of output kept when the agent sets none; ``kill_grace``: seconds
      between SIGTERM and SIGKILL; ``on_output(terminal, data)``: live output.

    Attributes: ``conn``, ``fs``, ``permissions``, ``elicitation``, ``terminals`` (``None`` when
    disabled), ``states`` (:class:`~acp_trio.session_state.SessionStates`).  Subclasses override
    :meth:`on_update` (and any handler, calling ``super()``).
    """

    def __init__(
        self,
        conn: ClientSideConnection,
        *,
        policy: PermissionPolicy | None = None,
        permission_timeout: float | None = None,
        elicitation: ElicitationPolicy | None = None,
        elicitation_modes: Sequence[Mode] = MODES,
        elicitation_timeout: float | None = None,
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
        self.elicitation = ElicitationBroker(
            elicitation, modes=elicitation_modes if elicitation is not None else (), timeout=elicitation_timeout
        )
        # accepted URL elicitations wait for their completion only while their session lives
        conn.sessions.on_end(lambda info: self.elicitation.drop_session(info.session_id))
        conn.connection.add_close_callback(lambda reason: self.elicitation.drop_all())
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

    @classmethod
    def for_versions(
        cls: type[_Client], *variants: ModuleType, **options: Any
    ) -> dict[ModuleType, Callable[[Any], _Client]]:
        """A ``client`` for :func:`~acp_trio.spawn_agent` / :func:`~acp_trio.open_memory_pair` that
        speaks each of ``variants`` (default ``acp_schema.v1`` and ``acp_schema.v2``) with one
        object per connection, whichever version ``initialize`` negotiates.

        ``options``: as for the constructor (``policy=...``, ``elicitation=...``).  Returns
        ``{variant: factory}`` with the same factory for every variant; it builds ``cls(conn,
        **options)`` once per connection (the runtime asks for a version's handler when the
        connection starts and again when negotiation picks another version).
        """
        if not variants:
            from acp_schema import v2

            variants = (v1, v2)
        built: weakref.WeakKeyDictionary[Any, _Client] = weakref.WeakKeyDictionary()

        def make(conn: Any) -> _Client:
            client = built.get(conn)
            if client is None:
                client = built[conn] = cls(conn, **options)
            return client

        return {variant: make for variant in variants}

    # -- capabilities and initialize -------------------------------------------------------------
    @property
    def capabilities(self) -> v1.ClientCapabilities:
        """What to send as ``clientCapabilities`` in a v1 ``initialize``: fs read (and write when
        ``writable``), ``terminal`` when terminals are on, ``elicitation`` (its modes) with an
        elicitation policy.  (v2: :attr:`capabilities_v2`; any variant: :meth:`capabilities_for`.)"""
        capabilities = v1.ClientCapabilities(fs=self.fs.capabilities, terminal=self.terminals is not None)
        elicitation = self.elicitation.capabilities(v1)
        if elicitation is not None:
            capabilities.elicitation = elicitation
        return capabilities

    @property
    def capabilities_v2(self) -> v2.ClientCapabilities:
        """What to send as ``capabilities`` in a v2 ``initialize``: ``elicitation`` (its modes) with an
        elicitation policy, else nothing (v2 clients offer no file system or terminals)."""
        from acp_schema import v2

        capabilities: v2.ClientCapabilities = self.capabilities_for(v2)
        return capabilities

    def capabilities_for(self, variant: ModuleType) -> Any:
        """The ``ClientCapabilities`` of ``variant`` (a generated ``acp_schema`` module) this client
        advertises: as :attr:`capabilities` for protocol version 1 variants, as
        :attr:`capabilities_v2` for version 2 ones."""
        from ._converter import converter

        wire: dict[str, Any] = {}
        if variant.PROTOCOL_VERSION < 2:
            wire["fs"] = converter.unstructure(self.fs.capabilities)
            wire["terminal"] = self.terminals is not None
        elicitation = self.elicitation.capabilities(variant)
        if elicitation is not None:
            wire["elicitation"] = converter.unstructure(elicitation)
        return converter.structure(wire, variant.ClientCapabilities)

    def initialize_requests(
        self, name: str = "acp-trio-client", version: str = "0", title: str | None = None
    ) -> list[Any]:
        """One ``InitializeRequest`` per protocol version the connection speaks, highest first, each
        with :meth:`capabilities_for` its variant and the client's ``name``/``version``/``title``
        (``Implementation``), for :meth:`acp_trio.ClientSideConnection.initialize`."""
        info: dict[str, Any] = {"name": name, "version": version}
        if title is not None:
            info["title"] = title
        return initialize_requests(self.conn, self.capabilities_for, info)

    async def initialize(
        self,
        name: str = "acp-trio-client",
        version: str = "0",
        title: str | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Send ``initialize`` offering every protocol version the connection speaks
        (:meth:`initialize_requests`) and return the agent's ``InitializeResponse`` in the
        negotiated variant (``conn.protocol_version`` says which).  ``timeout``: seconds.  Raises
        what :meth:`acp_trio.ClientSideConnection.initialize` raises (``ProtocolVersionError``, ...).
        """
        return await self.conn.initialize(*self.initialize_requests(name, version, title), timeout=timeout)

    async def new_session(self, cwd: str | Path, *, timeout: float | None = None) -> str:
        """Send ``session/new`` for the directory ``cwd`` (absolute) in the negotiated version, with
        no MCP servers, and return the session id; the response's modes, config options and
        commands go into ``states``.  For more params, send ``conn.agent.session_new(...)`` yourself.
        Raises what the request raises."""
        return await new_session(self.conn, self.states, str(cwd), timeout=timeout)

    # -- rendering hook --------------------------------------------------------------------------
    def on_update(self, state: SessionState, update: Any) -> None:
        """Called after each ``session/update`` was folded into ``state`` (``update``: the
        ``SessionUpdate`` variant of the negotiated version).  Does nothing; override it to render
        the transcript."""

    # -- conveniences ----------------------------------------------------------------------------
    async def prompt(
        self, session_id: str, content: str | Sequence[Any], *, timeout: float | None = None
    ) -> v1.PromptResponse | TurnResult:
        """Send ``session/prompt`` (``content``: text, or content blocks of the negotiated variant)
        and return when the turn has ended.

        v1: returns the ``PromptResponse``; the prompt is recorded as a user message in
        ``states[session_id]`` first (v1 agents do not echo it).  ``timeout`` (seconds) is the
        request's: :class:`~acp_trio.RequestTimeout` after ``$/cancel_request`` was sent.

        v2: sends the prompt, then waits for the ``idle`` state update that ends the turn
        (:meth:`wait_turn_end`), and returns a :class:`TurnResult` (the agent reports the user
        message itself).  ``timeout`` bounds the whole turn: when it passes, ``session/cancel`` is
        sent and ``TimeoutError`` raised.  Raises the connection's own
        :class:`~acp_trio.ConnectionClosed` (a spawned agent's exit status and stderr in it) when
        the connection closes before the turn ends, :class:`SessionEnded` when the session's state
        is discarded first.

        Both: a turn that ends ``cancelled`` marks its unfinished tool calls cancelled
        (prompt-turn.mdx).  Raises what :meth:`acp_trio.ClientSideConnection.send_request` raises.
        """
        variant = self.conn.variant
        blocks: list[Any] = [variant.TextContentBlock(text=content)] if isinstance(content, str) else list(content)
        request = variant.PromptRequest(session_id=session_id, prompt=blocks)
        state = self.states.state(session_id)
        if self.conn.protocol_version >= 2:
            return await self._prompt_v2(state, request, timeout)
        entry = state.add_user_message(blocks)  # before sending: the agent's updates come after it
        try:
            response: v1.PromptResponse = await self.conn.agent.session_prompt(request, timeout=timeout)
        except CapabilityError:  # refused before anything was sent: the agent never saw this prompt
            if entry in state.transcript:
                state.transcript.remove(entry)
            raise
        if response.stop_reason == "cancelled":
            state.cancel_unfinished_tool_calls()
        return response

    async def _prompt_v2(self, state: SessionState, request: Any, timeout: float | None) -> TurnResult:
        session_id = request.session_id
        mark = state.idle_count  # before sending: the idle update may arrive before the receipt
        with trio.move_on_after(math.inf if timeout is None else timeout) as deadline:
            receipt = await self.conn.agent.session_prompt(request)
            stop_reason = await self.wait_turn_end(session_id, after=mark)
        if deadline.cancelled_caught:
            await self.cancel(session_id)
            raise TimeoutError(
                f"the turn of session {session_id!r} did not end within {timeout:g} s; session/cancel was sent"
            )
        final = self.states.state(session_id)
        if stop_reason == "cancelled":
            final.cancel_unfinished_tool_calls()
        return TurnResult(stop_reason, final.stop_error, receipt.message_id, receipt)

    async def wait_turn_end(self, session_id: str, *, after: int | None = None) -> str | None:
        """Protocol version 2: wait until the turn of ``session_id`` ends (its ``idle`` state
        update) and return its stop reason (``None`` when the update carried none).

        ``after``: a mark taken from ``client.states.state(session_id).idle_count`` before sending
        ``session/prompt``: only an ``idle`` update applied after it counts, and a state missing
        now was discarded since (``None``: return at once when the session is idle now).  Raises the connection's own
        :class:`~acp_trio.ConnectionClosed` when the connection closes first (its ``pid``,
        ``exit_code``, ``signal`` and ``stderr_tail`` say how a spawned agent ended; a note names
        the session), :class:`SessionEnded` when the session's state is discarded first.  Does not
        time out: bound it with ``trio.fail_after``.  Spec: ``docs/protocol/v2/prompt-lifecycle.mdx``.
        """
        return await wait_turn_end(self.conn, self.states, session_id, after=after)

    async def cancel(self, session_id: str) -> None:
        """Send ``session/cancel`` for ``session_id`` (either version): the runtime then answers that
        session's pending permission requests ``cancelled`` and its elicitations ``cancel``, and the
        agent ends the turn ``cancelled``."""
        spec = self.conn.variant.NOTIFICATIONS["session/cancel"]
        await self.conn.send_notification(spec, spec.params_type(session_id=session_id))

    def serve_mcp_server(self, server: Any, *, name: str, server_id: str | None = None) -> Any:
        """Serve an MCP SDK server (tools, resources, prompts) to the agent over ACP (unstable).

        Returns its :class:`acp_trio.mcp_over_acp.McpServerRegistration`: put its ``declaration``
        into ``session/new``'s ``mcp_servers``.  Needs the extra ``acp-trio[mcp]``, a connection of
        an unstable variant, after ``initialize``, and an agent that advertises the ``acp`` MCP
        transport; see :func:`acp_trio.mcp_over_acp.serve_mcp_server` for the options and errors.
        """
        from .mcp_over_acp import serve_mcp_server  # imports the mcp SDK: only when used

        return serve_mcp_server(self.conn, server, name=name, server_id=server_id)

    # -- handlers --------------------------------------------------------------------------------
    async def session_update(self, params: Any) -> None:
        """Fold the update (v1 ``SessionNotification`` or v2 ``UpdateSessionNotification``) into
        ``states`` (then :meth:`on_update` runs)."""
        await self.states.session_update(params)

    async def session_request_permission(self, params: Any) -> Any:
        """Answer through the permission broker's policy (a v1 or v2 ``RequestPermissionRequest``;
        the response is of the same variant).

        A request that names a tool call without its ``kind`` (v1 ``toolCall``, v2 ``tool_call``
        subject) gets the kind the agent announced for it earlier in ``session/update`` (so
        ``allow_kinds`` sees it).
        """
        return await self.permissions.session_request_permission(self._with_known_kind(params))

    def _with_known_kind(self, params: Any) -> Any:
        subject: Any = None
        tool_call = getattr(params, "tool_call", None)
        if tool_call is None:  # v2: the tool call is the subject, if any
            subject = getattr(params, "subject", None)
            if getattr(subject, "type", None) != "tool_call":
                return params
            tool_call = subject.tool_call
        if tool_call.kind:
            return params
        kind = self.states.tool_kind(params.session_id, tool_call.tool_call_id)
        if not kind:
            return params
        tool_call = copy.copy(tool_call)
        tool_call.kind = kind
        params = copy.copy(params)
        if subject is None:
            params.tool_call = tool_call
        else:
            subject = copy.copy(subject)
            subject.tool_call = tool_call
            params.subject = subject
        return params

    async def elicitation_create(self, params: Any) -> Any:
        """Answer through the elicitation broker's policy (see :class:`~acp_trio.elicitation.ElicitationBroker`):
        -32602 for a mode not advertised (every mode without an ``elicitation`` policy) or a form
        schema this client cannot render."""
        return await self.elicitation.elicitation_create(params)

    async def elicitation_complete(self, params: Any) -> None:
        """An accepted URL elicitation completed (unknown ids are ignored)."""
        await self.elicitation.elicitation_complete(params)

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


__all__ = ["SessionEnded", "StandardClient", "TurnResult"]


# -- the moves of a client, shared with acp_trio.testing.FakeClient --------------------------------
def initialize_requests(
    conn: ClientSideConnection, capabilities_for: Callable[[ModuleType], Any] | None, info: dict[str, Any]
) -> list[Any]:
    """One ``InitializeRequest`` per protocol version ``conn`` speaks, highest first: each with
    ``capabilities_for(variant)`` (``ClientCapabilities``; ``None``: none) and ``info`` (the wire
    ``Implementation``: ``name``, ``version``, ``title``), for :meth:`ClientSideConnection.initialize`."""
    from ._converter import converter

    requests: list[Any] = []
    for protocol_version in sorted(conn.supported_versions, reverse=True):
        variant = conn.variants[protocol_version]
        caps = converter.unstructure(capabilities_for(variant)) if capabilities_for is not None else {}
        if protocol_version < 2:
            wire = {"protocolVersion": protocol_version, "clientCapabilities": caps, "clientInfo": info}
        else:
            wire = {"protocolVersion": protocol_version, "capabilities": caps, "info": info}
        requests.append(converter.structure(wire, variant.InitializeRequest))
    return requests


async def new_session(
    conn: ClientSideConnection, states: SessionStates, cwd: str, *, timeout: float | None = None, **fields: Any
) -> str:
    """Send ``session/new`` for ``cwd`` in the negotiated version (v1: no MCP servers unless
    ``fields`` names them; ``fields``: more wire fields) and return the session id; the response's
    modes, config options and commands go into ``states``.  Raises what the request raises."""
    wire: dict[str, Any] = {"cwd": cwd, **fields}
    if conn.protocol_version < 2:
        wire.setdefault("mcpServers", [])
    spec = conn.variant.REQUESTS["session/new"]
    params = conn.connection.converter.structure(wire, spec.params_type)
    response = await conn.send_request(spec, params, timeout=timeout)
    session_id: str = response.session_id
    states.state(session_id).apply_setup(response)
    return session_id


async def wait_turn_end(
    conn: ClientSideConnection, states: SessionStates, session_id: str, *, after: int | None = None
) -> str | None:
    """:meth:`StandardClient.wait_turn_end` for any client that folds ``conn``'s updates into ``states``."""
    info = conn.sessions.get(session_id)  # its end_reason says why, once it ended
    ended: list[tuple[str, str | None]] = []
    # the tasks raise nothing: what ends the wait is recorded, so errors come out as themselves
    async with trio.open_nursery() as nursery:

        async def idle() -> None:
            try:
                if after is not None and session_id not in states:
                    raise KeyError(session_id)  # discarded since the mark was taken
                ended.append(("idle", await states.wait_idle(session_id, after=after)))
            except KeyError:  # the state was discarded
                ended.append(("discarded", None))
            nursery.cancel_scope.cancel()

        async def closed() -> None:
            await conn.wait_closed()
            ended.append(("closed", None))
            nursery.cancel_scope.cancel()

        nursery.start_soon(idle)
        nursery.start_soon(closed)
    how, stop_reason = ended[0]
    if how == "idle":
        return stop_reason
    error = conn.connection.close_error
    if error is not None:  # also when the states were discarded because the connection closed
        raised = error.clone()
        raised.add_note(f"while waiting for the turn of session {session_id!r} to end")
        raise raised
    reason = info.end_reason if info is not None and info.end_reason is not None else "discarded"
    raise SessionEnded(session_id, reason)

"""The agent's side of terminals: run a command in the client's environment and always release it.

Source: ``docs/protocol/v1/terminals.mdx`` (``terminal/create``, ``output``, ``wait_for_exit``,
``kill``, ``release``; "The Agent MUST release the terminal using ``terminal/release`` when it's no
longer needed") and ``docs/protocol/v1/tool-calls.mdx`` (terminal content in a tool call).

::

    async with open_terminal(conn, session_id, "pytest", args=["-q"], output_byte_limit=65536) as term:
        await conn.client.session_update(...tool call with content=[term.content()]...)
        try:
            status = await term.wait_for_exit(timeout=120)
        except RequestTimeout:
            await term.kill()
        result = await term.output()  # output, truncated, exit_status
    # released here, also on error or cancellation

The client must have advertised ``clientCapabilities.terminal`` (else the calls raise
:class:`~acp_trio.CapabilityError`, nothing sent).  Uses the ``acp_schema.v1`` types.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from acp_schema import v1

from ._connection import ConnectionClosed
from ._core import RequestError
from ._roles import AgentSideConnection

log = logging.getLogger("acp_trio.terminals")

DEFAULT_RELEASE_TIMEOUT = 10.0
"""Seconds :func:`open_terminal` waits for the client to answer ``terminal/release`` on leaving."""


def _peer(client: Any) -> Any:
    return client.client if isinstance(client, AgentSideConnection) else client


class TerminalHandle:
    """A terminal the client created for this agent (``docs/protocol/v1/terminals.mdx``).

    Made by :func:`open_terminal`.  ``terminal_id``: the client's ``TerminalId``; ``session_id``:
    its session; ``released``: true once :meth:`release` was called.  The methods send the
    ``terminal/*`` requests and raise what a request raises (:class:`~acp_trio.RequestError` from
    the client, :class:`~acp_trio.ConnectionClosed`, :class:`~acp_trio.CapabilityError`), or
    ``RuntimeError`` once the terminal was released.
    """

    def __init__(self, client: Any, session_id: str, terminal_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self.terminal_id = terminal_id
        self.released = False

    def __repr__(self) -> str:
        return f"TerminalHandle({self.terminal_id!r}, session={self.session_id!r}, released={self.released})"

    def _check(self, method: str) -> None:
        if self.released:
            raise RuntimeError(f"{method}: terminal {self.terminal_id!r} was released")

    async def output(self, *, timeout: float | None = None) -> v1.TerminalOutputResponse:
        """``terminal/output``: the output so far (``output``, ``truncated``) and ``exit_status``
        once the command exited (``UNSET`` before).  ``timeout``: seconds for the answer."""
        self._check("terminal/output")
        request = v1.TerminalOutputRequest(session_id=self.session_id, terminal_id=self.terminal_id)
        response: v1.TerminalOutputResponse = await self.client.terminal_output(request, timeout=timeout)
        return response

    async def wait_for_exit(self, timeout: float | None = None) -> v1.WaitForTerminalExitResponse:
        """``terminal/wait_for_exit``: wait until the command exits; ``exit_code`` or ``signal``.

        ``timeout``: seconds to wait (``None``: no limit); when it passes the request is cancelled
        and :class:`~acp_trio.RequestTimeout` (a ``TimeoutError``) raised, and the command goes on
        running (:meth:`kill` it to stop it).
        """
        self._check("terminal/wait_for_exit")
        request = v1.WaitForTerminalExitRequest(session_id=self.session_id, terminal_id=self.terminal_id)
        response: v1.WaitForTerminalExitResponse = await self.client.terminal_wait_for_exit(request, timeout=timeout)
        return response

    async def kill(self, *, timeout: float | None = None) -> None:
        """``terminal/kill``: stop the command; the terminal stays valid for :meth:`output` and
        :meth:`wait_for_exit` until released.  ``timeout``: seconds for the answer."""
        self._check("terminal/kill")
        request = v1.KillTerminalRequest(session_id=self.session_id, terminal_id=self.terminal_id)
        await self.client.terminal_kill(request, timeout=timeout)

    async def release(self, *, timeout: float | None = None) -> None:
        """``terminal/release``: kill the command if it runs and free the terminal.

        Idempotent: only the first call sends the request (the handle counts as released even if
        that request fails).  ``timeout``: seconds for the answer.
        """
        if self.released:
            return
        self.released = True
        request = v1.ReleaseTerminalRequest(session_id=self.session_id, terminal_id=self.terminal_id)
        await self.client.terminal_release(request, timeout=timeout)

    def content(self) -> v1.TerminalToolCallContent:
        """The tool call content that embeds this terminal (``{"type": "terminal", "terminalId": ...}``;
        schema ``ToolCallContent``, ``docs/protocol/v1/tool-calls.mdx``).  Add it to a tool call
        before releasing the terminal."""
        return v1.TerminalToolCallContent(terminal_id=self.terminal_id)

    async def _release_on_exit(self, timeout: float) -> None:
        """Release, shielded from cancellation and bounded by ``timeout`` seconds; never raises."""
        if self.released:
            return
        with trio.CancelScope(shield=True):
            try:
                await self.release(timeout=timeout)
            except ConnectionClosed:
                log.debug("terminal %r: connection closed before release (the client releases it)", self.terminal_id)
            except (RequestError, TimeoutError) as exc:
                log.warning("terminal %r: terminal/release failed: %s", self.terminal_id, exc)


@asynccontextmanager
async def open_terminal(
    client: Any,
    session_id: str,
    command: str,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | Sequence[v1.EnvVariable] | None = None,
    cwd: str | None = None,
    output_byte_limit: int | None = None,
    release_timeout: float = DEFAULT_RELEASE_TIMEOUT,
) -> AsyncIterator[TerminalHandle]:
    """Create a terminal on the client (``terminal/create``) and yield its :class:`TerminalHandle`.

    ``client``: an :class:`~acp_trio.AgentSideConnection` (its ``client`` proxy is used) or a
    ``v1.ClientPeer``.  ``session_id``: the session it belongs to.  ``command``/``args``: the
    program and its arguments (the client runs no shell unless the command is one).  ``env``:
    variables to set (a mapping, or ``v1.EnvVariable`` objects).  ``cwd``: absolute working
    directory (default: the session's).  ``output_byte_limit``: bytes of output the client keeps
    (it drops earlier output beyond that).  ``release_timeout``: seconds to wait for the answer to
    the final ``terminal/release``.

    Leaving the block releases the terminal (which kills the command if it still runs), also on
    error or cancellation: shielded, bounded by ``release_timeout``, failures logged, never raised.
    Raises what ``terminal/create`` raises (:class:`~acp_trio.RequestError`, e.g. -32002 for a
    command that does not exist; :class:`~acp_trio.CapabilityError`; :class:`~acp_trio.ConnectionClosed`).
    """
    peer = _peer(client)
    variables: list[v1.EnvVariable] | None = None
    if isinstance(env, Mapping):
        variables = [v1.EnvVariable(name=name, value=value) for name, value in env.items()]
    elif env is not None:
        variables = list(env)
    request = v1.CreateTerminalRequest(session_id=session_id, command=command, args=list(args))
    if variables is not None:
        request.env = variables
    if cwd is not None:
        request.cwd = cwd
    if output_byte_limit is not None:
        request.output_byte_limit = output_byte_limit
    response: v1.CreateTerminalResponse = await peer.terminal_create(request)
    handle = TerminalHandle(peer, session_id, response.terminal_id)
    try:
        yield handle
    finally:
        await handle._release_on_exit(release_timeout)


__all__ = ["DEFAULT_RELEASE_TIMEOUT", "TerminalHandle", "open_terminal"]

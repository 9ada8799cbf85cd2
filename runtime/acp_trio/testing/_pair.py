"""``pair()``: an agent and a client connected in memory, initialized, with the wire recorded."""

from __future__ import annotations

import importlib
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import trio

from .._nursery import owned_nursery
from ..standard_client import initialize_requests
from ._fake_client import CLIENT_INFO, FakeClient
from ._transcript import FakeAgent, Transcript

if TYPE_CHECKING:
    from .._roles import AgentSideConnection, ClientSideConnection


def variant_of_protocol(protocol: int | ModuleType) -> ModuleType:
    """The generated variant module for ``protocol``: ``1`` → ``acp_schema.v1``, ``2`` →
    ``acp_schema.v2``, or the module itself (``acp_schema.v2_unstable``, ...).  Raises
    ``ValueError`` for another number and ``TypeError`` for anything else."""
    if isinstance(protocol, ModuleType):
        if not isinstance(getattr(protocol, "PROTOCOL_VERSION", None), int):
            raise TypeError(f"{protocol.__name__} is not a generated ACP variant (no PROTOCOL_VERSION)")
        return protocol
    if isinstance(protocol, bool) or not isinstance(protocol, int):
        raise TypeError(f"protocol must be 1, 2 or an acp_schema variant module, got {protocol!r}")
    if protocol not in (1, 2):
        raise ValueError(f"protocol must be 1 or 2 (or an acp_schema variant module), got {protocol}")
    return importlib.import_module(f"acp_schema.v{protocol}")


@dataclass
class Pair:
    """What :func:`pair` yields.

    ``agent_conn`` / ``client_conn``: the :class:`~acp_trio.AgentSideConnection` (``None`` when the
    agent is a :class:`~acp_trio.testing.FakeAgent`) and :class:`~acp_trio.ClientSideConnection`;
    ``agent`` / ``client``: their handler objects (the agent object the factory built, the
    :class:`~acp_trio.testing.FakeClient`; for a FakeAgent, the FakeAgent); ``transcript``: the
    wire so far, both directions, as the client saw it (:class:`~acp_trio.testing.Transcript`);
    ``initialize_response``: the agent's typed answer to ``initialize`` (``None`` with
    ``initialize=False``).
    """

    agent_conn: AgentSideConnection | None
    client_conn: ClientSideConnection
    agent: Any
    client: Any
    transcript: Transcript
    initialize_response: Any = None

    @property
    def protocol_version(self) -> int:
        """The protocol version the connection speaks (negotiated by ``initialize``)."""
        return self.client_conn.protocol_version


def _client_handler(client: Any) -> Any:
    return client.bind if isinstance(client, FakeClient) else client


def _default_initialize(client_conn: ClientSideConnection) -> list[Any]:
    """One InitializeRequest per version, with the handler's capabilities when it can say them."""
    handler = client_conn.handler
    own = getattr(handler, "initialize_requests", None)
    if callable(own):
        requests: list[Any] = own()
        return requests
    capabilities = getattr(handler, "capabilities_for", None)
    return initialize_requests(client_conn, capabilities if callable(capabilities) else None, CLIENT_INFO)


@asynccontextmanager
async def pair(
    agent: Any,
    client: Any = None,
    *,
    protocol: int | ModuleType | None = None,
    initialize: bool = True,
    timeout: float | None = 10.0,
    **options: Any,
) -> AsyncIterator[Pair]:
    """An agent and a client connected in memory, initialized, the wire recorded (``async with pair(A) as p:``).

    ``agent``: the agent object or factory (as for :class:`~acp_trio.AgentSideConnection`), a
    ``{variant: agent}`` mapping, a version-neutral agent object (:class:`acp_trio.neutral.Agent`,
    served as ``protocol`` asks), or a :class:`~acp_trio.testing.FakeAgent` (which then plays its
    transcript to the client).  ``client``: a :class:`~acp_trio.testing.FakeClient` (default: a new
    one), any client object or factory, or a ``{variant: client}`` mapping.  ``protocol``: ``1``
    (default), ``2`` or a variant module (``acp_schema.v2_unstable``): an agent or client that is
    not a mapping speaks only it (so a mapping agent with a plain client negotiates ``protocol``,
    and a mapping client negotiates the highest version both have); a FakeAgent's default is the
    version its transcript's ``initialize`` answered.
    ``initialize``: send ``initialize`` first (offering each version the client speaks, with the
    client's capabilities when it has ``initialize_requests()`` or ``capabilities_for(variant)``,
    as :class:`~acp_trio.StandardClient` and FakeClient do; else none).  ``timeout``: seconds for
    that ``initialize`` (``None``: no bound).  ``options`` (``eof_grace``, ``tap``, ...) go to both
    connections.

    Yields a :class:`Pair`.  Leaving the block closes both connections.  An exception raised in the
    block comes out as itself; with a FakeAgent that diverged from its transcript,
    ``AssertionError`` with the divergence report is raised instead (also when the block ended
    cleanly).  No processes or threads: runs under trio's autojump clock.  Raises ``ValueError`` /
    ``TypeError`` for a bad ``protocol``, ``RuntimeError`` for a FakeAgent that already played or a
    FakeClient bound to another connection, ``TimeoutError`` when ``initialize`` takes longer than
    ``timeout``, and what ``initialize`` raises (``ProtocolVersionError``, ``RequestError``).
    """
    from trio.testing import memory_stream_pair

    from .._roles import AgentSideConnection, ClientSideConnection

    chosen = None if protocol is None else variant_of_protocol(protocol)
    if isinstance(agent, FakeAgent) and chosen is None:
        chosen = variant_of_protocol(agent.protocol_version)
    variant = chosen if chosen is not None else variant_of_protocol(1)
    client = FakeClient() if client is None else client
    client_arg = client if isinstance(client, Mapping) else {variant: _client_handler(client)}
    transcript = Transcript()
    user_tap = options.pop("tap", None)
    ours = transcript.tap("client")

    def tap(direction: Any, line: bytes) -> None:
        ours(direction, line)
        if user_tap is not None:
            user_tap(direction, line)

    agent_stream, client_stream = memory_stream_pair()
    client_conn = ClientSideConnection(client_arg, client_stream, client_stream, tap=tap, **options)
    if isinstance(agent, FakeAgent):
        fake = agent
        fake._claim()  # before anything starts: RuntimeError when it already played
        async with owned_nursery() as nursery:
            nursery.start_soon(fake._serve, agent_stream, agent_stream)
            try:
                async with client_conn:
                    result = Pair(None, client_conn, fake, client_conn.handler, transcript)
                    if initialize:
                        with trio.fail_after(timeout if timeout is not None else math.inf):
                            result.initialize_response = await client_conn.initialize(*_default_initialize(client_conn))
                    yield result
            except Exception as exc:  # the client saw the fake close on a divergence: say why
                if fake.divergence is not None:
                    raise AssertionError(str(fake.divergence)) from exc
                raise
        # the client closed, so the fake has seen the end of its input and finished
        if fake.divergence is not None:
            raise AssertionError(str(fake.divergence))
        return
    agent_arg = agent if isinstance(agent, Mapping) or _picks_versions(agent) else {variant: agent}
    agent_conn = AgentSideConnection(agent_arg, agent_stream, agent_stream, **options)
    async with agent_conn, client_conn:
        result = Pair(agent_conn, client_conn, None, client_conn.handler, transcript)
        if initialize:
            with trio.fail_after(timeout if timeout is not None else math.inf):
                result.initialize_response = await client_conn.initialize(*_default_initialize(client_conn))
        result.agent = agent_conn.handler
        yield result


def _picks_versions(agent: Any) -> bool:
    """Whether ``agent`` is an object (not a class) with ``acp_handlers()``, a version-neutral agent
    (:class:`acp_trio.neutral.Agent`) that gives its own ``{variant: handler}`` mapping: the client's
    ``initialize`` then picks the version (AgentSideConnection's rule)."""
    return not isinstance(agent, type) and callable(getattr(agent, "acp_handlers", None))


__all__ = ["Pair", "pair", "variant_of_protocol"]

"""``acp_trio.testing``: a test kit for ACP agents and clients written in Python (a pytest plugin).

Installed with acp-trio, pytest loads it through the ``pytest11`` entry point ``acp_trio``.
Everything is trio-native and in memory (no processes, threads or sockets: it runs under trio's
autojump clock), for protocol versions 1 and 2.

**A connected pair.**  :func:`pair` connects an agent (object, factory or ``{variant: agent}``)
and a client in memory, sends ``initialize`` and records the wire::

    async with pair(MyAgent, FakeClient(files={"/w/a.txt": "hi\\n"}), protocol=2) as p:
        sid = await p.client.new_session("/w")
        assert await p.client.prompt(sid, "read a.txt") == "end_turn"
        assert p.client.states[sid].messages[-1].text == "a.txt says hi"

**Scripted peers.**  :class:`FakeClient` answers permission requests by policy (``"allow"``,
``"reject"``, ``"cancel"`` or a callable), serves ``fs/*`` from a dict, refuses terminals, and
records every update (``.updates``, ``.states``: a :class:`~acp_trio.SessionState` per session),
permission request (``.permission_requests``) and write (``.written``).  :class:`FakeAgent` plays
the agent side of a recorded transcript to a client under test.

**Transcripts.**  :class:`Transcript` is the wire of one connection, both directions, saved as
NDJSON, one object per line::

    {"dir": "client->agent", "message": {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {...}}}
    {"dir": "agent->client", "message": {"jsonrpc": "2.0", "id": 0, "result": {...}}}

in the order the client saw the messages (``"raw"`` instead of ``"message"`` for a line that was
not JSON).  ``pair(...).transcript`` is one; :func:`record` records any connection,
``transcript.tap("client")`` any ``spawn_agent``.  :func:`replay` / :func:`assert_replays` feed
the client side of a transcript to an agent and compare what it sends with the recorded agent side;
the first divergent message fails with a unified diff (:class:`Divergence`).  Values one side makes
up (session, message, tool call and terminal ids: :data:`DEFAULT_BIND`) are bound rather than
compared, and ``normalize=`` removes whatever else legitimately varies.

**Conformance.**  :func:`conformance` returns the checker's report (:mod:`acp_trio.check`) on an
agent object in memory, :func:`assert_conformant` fails on a FAIL, and
``test_conformance = conformance_tests(MyAgent)`` in a test module makes one pytest test per check.

**Async tests with no configuration.**  With pytest-trio installed (``pip install
'acp-trio[testing]'``), every ``async def`` test that no other async plugin claims (no
``asyncio`` or ``anyio`` marker, no ``anyio_backend`` fixture, pytest-asyncio and anyio not in
auto mode, ``trio_mode`` off) is marked ``pytest.mark.trio`` and runs under trio, with its
``async`` fixtures: no ``pytest.ini`` needed.  A project that sets ``trio_mode``, or runs its
tests with pytest-asyncio or anyio, sees no change.  Without pytest-trio such a test fails at
setup, naming ``pip install 'acp-trio[testing]'``.  See :mod:`acp_trio.testing._plugin`.

**Fixtures** (``async`` ones run under pytest-trio, as above): ``acp_pair`` (an
initialized :class:`Pair` of the ``acp_agent`` fixture, which you define, with the ``acp_client``
fixture, default a new :class:`FakeClient`, in protocol ``acp_protocol``, default 1: parametrize it
as ``@pytest.mark.parametrize("acp_protocol", [1, 2])``), ``fake_client`` (a new
:class:`FakeClient`), ``acp_conformance`` (:func:`assert_conformant`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest

# pytest's hooks (pytest finds them on this module, the plugin the entry point names)
from ._plugin import pytest_collection_modifyitems, pytest_runtest_setup  # noqa: F401

if TYPE_CHECKING:
    from ._conformance import assert_conformant, conformance, conformance_tests
    from ._fake_client import FakeClient, PermissionAnswer
    from ._pair import Pair, pair, variant_of_protocol
    from ._transcript import (
        AGENT_TO_CLIENT,
        CLIENT_TO_AGENT,
        DEFAULT_BIND,
        Direction,
        Divergence,
        Entry,
        FakeAgent,
        Normalizer,
        ReplayResult,
        Transcript,
        assert_replays,
        record,
        replay,
        unified_diff,
    )

_LAZY = {
    "_conformance": ("assert_conformant", "conformance", "conformance_tests"),
    "_fake_client": ("FakeClient", "PermissionAnswer"),
    "_pair": ("Pair", "pair", "variant_of_protocol"),
    "_transcript": (
        "AGENT_TO_CLIENT",
        "CLIENT_TO_AGENT",
        "DEFAULT_BIND",
        "Direction",
        "Divergence",
        "Entry",
        "FakeAgent",
        "Normalizer",
        "ReplayResult",
        "Transcript",
        "assert_replays",
        "record",
        "replay",
        "unified_diff",
    ),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    """Load the kit's modules (trio, the runtime) on first use, not when pytest loads the plugin."""
    module = _WHERE.get(name)
    if module is not None:
        import importlib

        value = getattr(importlib.import_module(f"acp_trio.testing.{module}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'acp_trio.testing' has no attribute {name!r}")


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def acp_conformance() -> Any:
    """:func:`assert_conformant` (``await acp_conformance(MyAgent, protocol=1)``)."""
    from ._conformance import assert_conformant

    return assert_conformant


@pytest.fixture
def fake_client() -> Any:
    """A new :class:`FakeClient` (permission ``"allow"``, no files)."""
    from ._fake_client import FakeClient

    return FakeClient()


@pytest.fixture
def acp_agent() -> Any:
    """The agent :func:`acp_pair` connects: define this fixture (returning an agent object, factory
    or ``{variant: agent}`` mapping) in your test module or ``conftest.py``."""
    raise pytest.UsageError(
        "the acp_pair fixture needs an agent: define a fixture `acp_agent` returning your agent class, "
        "factory or object (in the test module or conftest.py)"
    )


@pytest.fixture
def acp_client() -> Any:
    """The client :func:`acp_pair` connects: a new :class:`FakeClient` (override to change it)."""
    from ._fake_client import FakeClient

    return FakeClient()


@pytest.fixture
def acp_protocol() -> int:
    """The protocol version :func:`acp_pair` speaks: 1 (parametrize ``acp_protocol`` to change it)."""
    return 1


@pytest.fixture
async def acp_pair(acp_agent: Any, acp_client: Any, acp_protocol: Any) -> AsyncIterator[Any]:
    """An initialized :class:`Pair` of ``acp_agent`` and ``acp_client`` in protocol ``acp_protocol``
    (for an ``async def`` test, run under pytest-trio without configuration; closed after the test)."""
    from ._pair import pair

    async with pair(acp_agent, acp_client, protocol=acp_protocol) as connected:
        yield connected


__all__ = [
    "AGENT_TO_CLIENT",
    "CLIENT_TO_AGENT",
    "DEFAULT_BIND",
    "Direction",
    "Divergence",
    "Entry",
    "FakeAgent",
    "FakeClient",
    "Normalizer",
    "Pair",
    "PermissionAnswer",
    "ReplayResult",
    "Transcript",
    "acp_agent",
    "acp_client",
    "acp_conformance",
    "acp_pair",
    "acp_protocol",
    "assert_conformant",
    "assert_replays",
    "conformance",
    "conformance_tests",
    "fake_client",
    "pair",
    "record",
    "replay",
    "unified_diff",
    "variant_of_protocol",
]

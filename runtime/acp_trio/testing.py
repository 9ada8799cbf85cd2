"""``acp_trio.testing``: test helpers for people who build ACP agents with acp-trio (a pytest plugin).

Installed with acp-trio, pytest loads it through the ``pytest11`` entry point ``acp_trio``:

- :func:`conformance` runs the conformance checker's suite (:mod:`acp_trio.check`) against an agent
  object or factory served in memory, no process, and returns the :class:`~acp_trio.check.Report`;
- :func:`assert_conformant` does the same and fails the test with the report's text on any FAIL;
- the fixture ``acp_conformance`` is :func:`assert_conformant`, for tests that prefer fixtures.

Example (a trio test, with pytest-trio or anyio's pytest plugin running it)::

    from acp_trio.testing import assert_conformant

    async def test_my_agent_follows_the_protocol() -> None:
        await assert_conformant(MyAgent)              # protocol 1; protocol=2 for v2

Still to come (issue 13): a scripted ``FakeClient``/``FakeAgent``, in-memory pair fixtures of any
variant, and transcript recording and replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the checker (and jsonschema) load on first use, not when pytest loads the plugin
    from .check import Report


async def conformance(
    agent: Any,
    *,
    protocol: int = 1,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    turn_timeout: float = 60.0,
    **options: Any,
) -> Report:
    """The checker's report on ``agent`` (object or factory, as for ``AgentSideConnection``), in memory.

    ``only``/``skip``: check names or prefixes; ``options``: for each connection (``eof_grace``, ...).
    """
    from .check import run_checks_in_memory

    return await run_checks_in_memory(
        agent, protocol=protocol, only=only, skip=skip, turn_timeout=turn_timeout, **options
    )


async def assert_conformant(agent: Any, *, allow_warnings: bool = True, **kwargs: Any) -> Report:
    """:func:`conformance`, then ``AssertionError`` with the whole report when a check failed (or
    warned, with ``allow_warnings=False``); returns the report otherwise."""
    from .check import Status

    report = await conformance(agent, **kwargs)
    bad = {Status.FAIL} if allow_warnings else {Status.FAIL, Status.WARN}
    if any(finding.status in bad for finding in report.findings):
        raise AssertionError("the agent does not conform:\n" + report.text())
    return report


@pytest.fixture
def acp_conformance() -> Any:
    """:func:`assert_conformant` (``await acp_conformance(MyAgent, protocol=1)``)."""
    return assert_conformant


__all__ = ["acp_conformance", "assert_conformant", "conformance"]

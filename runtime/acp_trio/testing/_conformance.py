"""The conformance checker (:mod:`acp_trio.check`) in memory: a report, an assertion, pytest tests."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the checker (and jsonschema) load on first use, not when pytest loads the plugin
    from ..check import Report


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
    from ..check import run_checks_in_memory

    return await run_checks_in_memory(
        agent, protocol=protocol, only=only, skip=skip, turn_timeout=turn_timeout, **options
    )


async def assert_conformant(agent: Any, *, allow_warnings: bool = True, **kwargs: Any) -> Report:
    """:func:`conformance`, then ``AssertionError`` with the whole report when a check failed (or
    warned, with ``allow_warnings=False``); returns the report otherwise.  An agent that does not
    speak ``protocol`` (a v1-only agent checked with ``protocol=2``) fails ``initialize.version``,
    which says so; the other checks are not run."""
    from ..check import Status

    report = await conformance(agent, **kwargs)
    bad = {Status.FAIL} if allow_warnings else {Status.FAIL, Status.WARN}
    if any(finding.status in bad for finding in report.findings):
        raise AssertionError("the agent does not conform:\n" + report.text())
    return report


def conformance_tests(
    agent: Any,
    *,
    protocol: int = 1,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    allow_warnings: bool = True,
    turn_timeout: float = 60.0,
    **options: Any,
) -> Callable[..., None]:
    """The checker's suite as pytest tests, one per check: ``test_conformance = conformance_tests(MyAgent)``.

    Assign the result to a ``test_*`` name in a test module; pytest collects one test per check
    (``test_conformance[session.prompt]``, ...).  The first of them runs the whole suite once
    against ``agent`` (object or factory) in memory (:func:`conformance`, same arguments) in its
    own ``trio.run``; each test then passes, fails with the check's observation, spec source and
    the report (``FAIL``, and ``WARN`` with ``allow_warnings=False``), or is skipped (``SKIP``,
    with the checker's reason).  An agent that does not speak ``protocol`` fails
    ``test_conformance[initialize.version]``, saying which version it answered; the others skip.
    The tests are plain functions: they work with or without pytest-trio.  Raises ``ValueError``
    for a ``protocol`` other than 1 or 2.
    """
    import pytest
    import trio

    from ..check import CHECKS, WHOLE_RUN, Status, _selected

    if protocol not in (1, 2):
        raise ValueError(f"protocol must be 1 or 2, got {protocol!r}")
    names = [c.name for c in CHECKS] + [name for name, _, _ in WHOLE_RUN]
    names = [name for name in names if _selected(name, only, skip)]
    reports: list[Report] = []

    def report() -> Report:
        if not reports:
            reports.append(
                trio.run(
                    functools.partial(
                        conformance,
                        agent,
                        protocol=protocol,
                        only=only,
                        skip=skip,
                        turn_timeout=turn_timeout,
                        **options,
                    )
                )
            )
        return reports[0]

    @pytest.mark.parametrize("check", names)
    def test_conformance(check: str) -> None:
        whole = report()
        finding = next((f for f in whole.findings if f.name == check), None)
        if finding is None:
            pytest.skip(f"{check}: not in the report")
        assert finding is not None
        if finding.status is Status.SKIP:
            pytest.skip(f"{check}: {finding.observed}")
        if finding.status is Status.FAIL or (finding.status is Status.WARN and not allow_warnings):
            pytest.fail(
                f"{finding.status.value} {check}: {finding.observed}\n"
                f"({finding.title}; {finding.source})\n\n{whole.text()}",
                pytrace=False,
            )

    label = getattr(agent, "__qualname__", type(agent).__qualname__)
    test_conformance.__doc__ = f"The conformance checks against {label} (protocol {protocol})."
    return test_conformance


__all__ = ["assert_conformant", "conformance", "conformance_tests"]

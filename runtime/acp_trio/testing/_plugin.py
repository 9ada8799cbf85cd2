"""The pytest hooks of :mod:`acp_trio.testing`: ``async def`` tests run under trio with no configuration.

Contract: once pytest has collected the tests, each ``async def`` test function that no async
plugin claims gets ``pytest.mark.trio``, so pytest-trio runs it (and its ``async`` fixtures, such
as ``acp_pair``) under ``trio.run``, exactly as it would with ``trio_mode = true``.  A test is
claimed, and left as it is, when:

- pytest-trio's ``trio_mode`` is on (pytest-trio marks every ``async def`` test itself), or the
  test already has a ``trio`` marker (its own, with ``run=`` if it gives one);
- it has an ``asyncio`` marker (pytest-asyncio), or pytest-asyncio runs in auto mode
  (``asyncio_mode = auto`` or ``--asyncio-mode=auto``: it runs every ``async def`` test);
- it has an ``anyio`` marker or uses the ``anyio_backend`` fixture (anyio's plugin), or anyio's
  plugin runs in auto mode (``anyio_mode = auto`` or ``--anyio-mode=auto``).

Why a marker rather than turning ``trio_mode`` on: ``trio_mode`` makes pytest-trio take *every*
``async def`` test, also those another plugin runs, and pytest has no public way for a plugin to
set another plugin's ini value; the marker is pytest-trio's own, public, per-test switch, and
it is what ``trio_mode`` does for each test (``pytest_trio.plugin.automark``), so ``trio_run``
(``qtrio``) is still honoured.  The hook runs last (``trylast``), after the other plugins marked
their tests.

When pytest-trio is not installed (or is disabled with ``-p no:trio``), such a test fails at its
setup, before its fixtures, saying so and naming ``pip install 'acp-trio[testing]'``, instead of
pytest's list of async plugins.  Nothing changes for tests that are not ``async def``.
``-p no:acp_trio`` turns the whole plugin (fixtures included) off.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

_STASH_KEY = pytest.StashKey[bool]()
"""Set on an item that is ``async def``, claimed by no plugin, with no pytest-trio to run it."""

CLAIMING_MARKERS = ("trio", "asyncio", "anyio")
"""Markers by which another async plugin (pytest-trio, pytest-asyncio, anyio) runs a test."""


def _ini(config: pytest.Config, name: str) -> Any:
    """Another plugin's ini value (``None`` when that plugin is not loaded)."""
    try:
        return config.getini(name)
    except ValueError:  # not registered: that plugin is not loaded
        return None


def _auto_mode(config: pytest.Config, name: str) -> bool:
    """Whether pytest-asyncio (``asyncio_mode``) or anyio (``anyio_mode``) takes every async test."""
    option = config.getoption(name, default=None)
    mode = option if option is not None else _ini(config, name)
    return isinstance(mode, str) and mode.strip().lower() == "auto"


def _is_async_test(item: pytest.Item) -> bool:
    if not isinstance(item, pytest.Function):
        return False
    function = item.obj
    inner = getattr(getattr(function, "hypothesis", None), "inner_test", function)  # as pytest-trio's automark
    return inspect.iscoroutinefunction(inner)


def _claimed(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(name) is not None for name in CLAIMING_MARKERS):
        return True
    return "anyio_backend" in getattr(item, "fixturenames", ())


def unclaimed_async_tests(config: pytest.Config, items: list[pytest.Item]) -> list[pytest.Item]:
    """The ``async def`` tests among ``items`` that no async plugin runs (see the module docstring)."""
    if _ini(config, "trio_mode") is True:
        return []
    if _auto_mode(config, "asyncio_mode") or _auto_mode(config, "anyio_mode"):
        return []
    return [item for item in items if _is_async_test(item) and not _claimed(item)]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the unclaimed ``async def`` tests ``trio`` (pytest-trio runs them), or remember that
    nothing can run them."""
    unclaimed = unclaimed_async_tests(config, items)
    if not unclaimed:
        return
    has_trio = config.pluginmanager.has_plugin("trio")  # pytest-trio's entry point name
    for item in unclaimed:
        if has_trio:
            item.add_marker(pytest.mark.trio)
        else:
            item.stash[_STASH_KEY] = True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail an ``async def`` test that nothing can run, saying what to install."""
    if item.stash.get(_STASH_KEY, False):
        pytest.fail(
            f"{item.name} is an async test and nothing runs it: acp_trio.testing runs async tests under trio "
            "with pytest-trio, which is not installed (or is disabled by -p no:trio). "
            "Install it: pip install 'acp-trio[testing]' (or mark the test for another async plugin, "
            "e.g. @pytest.mark.anyio)",
            pytrace=False,
        )

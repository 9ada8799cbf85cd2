"""The suite's pytest hooks: which interpreter runs the ``one_interpreter`` tests; ``xdist_group``
working again under pytest 9.2.

**one_interpreter.**  A test marked ``one_interpreter`` checks what no interpreter changes, so
``nox -s tests`` runs it on one of its interpreters, the oldest (3.11) unless marked
``one_interpreter(newest=True)``: then on the newest (3.13).  Which ones go where balances CI's two
nox processes (``.ci/run``: ``tests-3.11`` beside the other sessions, ``tests-3.13`` among them): the
checker's defect matrix, a new user's install and the pydantic-ai interop, about a third of these
tests' time, run on 3.13.  The noxfile names the interpreter's role in ``ACP_TESTS_INTERPRETER``
(``oldest`` or ``newest``); without it (pytest run by hand, ``nox -s tests -- ARGS``) every test runs.

**xdist_group.**
pytest-xdist 3.8 (``--dist loadgroup``, the noxfile's PARALLEL) groups a test by appending
``@<group>`` to its node id, which it writes to ``item._nodeid``; pytest 9.2 keeps a node's id in
``item._id`` and no longer reads ``_nodeid``, so the suffix was lost, every grouped test went to
any worker, and a module- or session-scoped fixture its group shares was made once per worker
(tests/test_check.py's defect reports, tests/test_readme_new_user.py's venv: twice each).  This
hook, run after xdist's, carries the suffixed id over; with a pytest that still reads ``_nodeid``
the two agree and it does nothing.  Upstream: pytest-dev/pytest-xdist#1386 (its fix, #1388, is not
released yet); drop this file once it is.
"""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    role = os.environ.get("ACP_TESTS_INTERPRETER")
    if role is None:
        return
    if role not in ("oldest", "newest"):
        raise pytest.UsageError(f"ACP_TESTS_INTERPRETER={role!r}: 'oldest' or 'newest' (or unset: every test)")
    kept, dropped = [], []
    for item in items:
        mark = item.get_closest_marker("one_interpreter")
        here = mark is None or ("newest" if mark.kwargs.get("newest") else "oldest") == role
        (kept if here else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


# (a second implementation of the hook: pytest takes only names starting with pytest_, specname maps it)
@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_carry_xdist_group_ids(items: list[pytest.Item]) -> None:
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # a pytest before 9.2: xdist's _nodeid is the node id
        return
    for item in items:
        grouped = vars(item).get("_nodeid")
        if isinstance(grouped, str) and grouped != item.nodeid:
            item._id = NodeId.parse(grouped)  # type: ignore[attr-defined]

"""The suite's one pytest hook: ``xdist_group`` working again under pytest 9.2.

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

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # a pytest before 9.2: xdist's _nodeid is the node id
        return
    for item in items:
        grouped = vars(item).get("_nodeid")
        if isinstance(grouped, str) and grouped != item.nodeid:
            item._id = NodeId.parse(grouped)  # type: ignore[attr-defined]

"""Helpers for tests that start processes and check what is left of them."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (a zombie not yet reaped counts: ``kill(pid, 0)`` succeeds)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True

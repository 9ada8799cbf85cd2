"""What the two benchmark drivers (``bench.py``, ``bench_runtime.py``) share: child environments and versions."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

_REPO = Path(__file__).resolve().parent.parent


def use_source_tree() -> None:
    """Import ``acp_trio`` and ``acp_schema`` from the repository's ``runtime/`` and ``generated/``
    when they are not installed (call before importing them)."""
    if importlib.util.find_spec("acp_trio") is None:
        sys.path[:0] = [str(_REPO / "generated"), str(_REPO / "runtime")]


def subprocess_env(pycache: str, *modules: ModuleType) -> dict[str, str]:
    """An environment for child interpreters: they import the same ``modules`` as this process
    (PYTHONPATH), and read and write every ``.pyc`` in the private tree ``pycache``
    (PYTHONPYCACHEPREFIX), whatever PYTHONDONTWRITEBYTECODE says and whether or not the source tree
    has ``__pycache__`` directories, so that after warm-up runs nothing is compiled."""
    dirs = [str(Path(m.__file__ or "").resolve().parent.parent) for m in modules]
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*dirs, *([old] if old else [])]))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def dist_version(dist: str) -> str:
    """The installed version of distribution ``dist``, or a note that it runs from the source tree."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed (source tree)"


def runtime_build() -> str:
    """Whether the imported acp_trio runs its hot modules compiled (a wheel built by mypyc,
    ``hatch_build.py``) or as Python (an editable install, the source tree, a pure wheel)."""
    import acp_trio._connection

    compiled = (acp_trio._connection.__file__ or "").endswith((".so", ".pyd"))
    return "compiled (mypyc)" if compiled else "pure Python"

"""The wheel's build hook: compiles acp_trio's hot modules with mypyc.

A wheel built from this tree (``pip install .``, ``python -m build``) carries C extensions of the
modules in :data:`COMPILED`, compiled by mypyc (pinned with mypy in ``pyproject.toml``) for the
interpreter that builds it; their ``.py`` sources ship beside them, and Python imports the extension
first.  An editable install (``pip install -e .``) stays pure Python, so an edit takes effect at once.

``ACP_TRIO_COMPILE`` chooses:

- ``auto`` (the default): compile; when that fails (no C compiler, say), warn and build a pure-Python
  wheel, which behaves the same, only slower;
- ``1``: compile, and fail the build when that fails (CI, the benchmarks);
- ``0``: build a pure-Python wheel.

mypy reads the compiled modules as mypyc compiles them (:data:`MYPY_OPTIONS`).  What compiling needs
(:data:`COMPILE_REQUIRES`: mypy, pinned, setuptools and the runtime packages mypy reads) is asked of
the build frontend by :meth:`MypycBuildHook.dependencies` only for a build that compiles: an editable
install, an sdist and ``ACP_TRIO_COMPILE=0`` need none of it (an editable install takes seconds).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

COMPILED = (
    "runtime/acp_trio/_connection.py",
    "runtime/acp_trio/_core/_framing.py",
    "runtime/acp_trio/_core/_jsonrpc.py",
)
"""What mypyc compiles: the connection (dispatch, requests, the reader and writer), the line
framer and JSON-RPC's envelopes.  Everything else (the converter's generated hooks included) stays
Python."""

ENV = "ACP_TRIO_COMPILE"

COMPILE_REQUIRES = ["mypy==2.4.1", "setuptools>=70", "attrs>=24.1", "cattrs>=24.1", "trio>=0.25", "orjson>=3.10"]
"""What a compiling build installs beside hatchling: mypy (pinned exactly: mypyc compiles what mypy
infers) with setuptools, and the runtime packages the compiled modules import, so mypy reads them as
lint does (:data:`MYPY_OPTIONS`).  tests/test_build_hook.py keeps the runtime ones in step with
``[project].dependencies`` and mypy's pin with the ``lint`` group's."""


def compile_mode() -> str:
    """``ACP_TRIO_COMPILE`` normalized: ``auto``, ``0`` or ``1``; raises ``ValueError`` on anything else."""
    mode = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if mode not in ("auto", "0", "1"):
        raise ValueError(f"{ENV} must be auto, 0 or 1, not {mode!r}")
    return mode


def _asked_for_editable() -> bool:
    """Whether the frontend is asking for an editable build's requirements (PEP 660's
    ``get_requires_for_build_editable``, hatchling's function of that name, is on the call stack):
    hatchling asks a hook for its dependencies without saying which build they are for."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "get_requires_for_build_editable":
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


MYPY_OPTIONS = ("--ignore-missing-imports", "--follow-imports=silent")
"""How mypy reads the code as mypyc compiles it: with the runtime dependencies the compiled modules
use (trio, orjson, attrs, cattrs: the hook's dependencies in ``pyproject.toml``), as ``nox -s lint``
reads it, since mypyc checks at run time the types mypy infers and the two must agree; a package
that is not installed there (an extra's) is ``Any``, and only the compiled modules' own errors count."""

_SETUP = """\
import sys
from setuptools import setup
from mypyc.build import mypycify
import attrs, cattrs, orjson, trio  # mypy must find them, as lint does (MYPY_OPTIONS)

setup(
    name="acp-trio-compiled",
    ext_modules=mypycify(sys.argv[1:{n}], opt_level="3", target_dir={target!r}),
    script_args=sys.argv[{n}:],
)
"""


class CompileError(RuntimeError):
    """mypyc or the C compiler failed; the message ends with the last lines they printed."""


class MypycBuildHook(BuildHookInterface):
    """Adds the compiled extensions to a (non-editable) wheel; see the module docstring."""

    PLUGIN_NAME = "custom"
    _work: Path | None = None

    def dependencies(self) -> list[str]:
        """:data:`COMPILE_REQUIRES` for a wheel that compiles; nothing for an editable install or
        ``ACP_TRIO_COMPILE=0`` (which compile nothing)."""
        if compile_mode() == "0" or _asked_for_editable():
            return []
        return list(COMPILE_REQUIRES)

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        mode = compile_mode()
        if mode == "0":
            return
        self.app.display_info(
            f"acp-trio: compiling the runtime's hot modules with mypyc (about a minute; {ENV}=0 skips it)"
        )
        try:
            built = self._compile()
        except (OSError, CompileError) as exc:
            if mode == "1":
                raise
            self.app.display_warning(
                f"acp-trio: mypyc could not compile the runtime ({exc}); building a pure-Python wheel. "
                f"Set {ENV}=1 to make this an error, {ENV}=0 to skip compiling."
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        build_data["force_include"].update(built)

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if self._work is not None:  # the wheel holds the extensions now
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None

    def _compile(self) -> dict[str, str]:
        """Compile :data:`COMPILED` in a temporary directory (the source tree gets no build files);
        return ``{extension file: its path in the wheel}``."""
        root = Path(self.root)
        work = self._work = Path(tempfile.mkdtemp(prefix="acp-trio-mypyc-"))
        out = work / "lib"
        sources = [*MYPY_OPTIONS, *(str(root / path) for path in COMPILED)]
        setup = work / "setup.py"
        setup.write_text(_SETUP.format(n=len(sources) + 1, target=str(work / "c")))
        env = dict(os.environ)
        # acp_schema (generated/) is imported by the runtime: mypy must see it as it compiles
        env["MYPYPATH"] = os.pathsep.join([str(root / "generated"), str(root / "runtime")])
        command = [sys.executable, str(setup), *sources, "build_ext", "--build-lib", str(out)]
        command += ["--build-temp", str(work / "tmp")]
        result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
            raise CompileError(f"exit status {result.returncode}; its last lines:\n{tail}")
        built = {
            str(path): path.relative_to(out).as_posix() for path in out.rglob("*") if path.suffix in (".so", ".pyd")
        }
        for source in COMPILED:
            module = source.removeprefix("runtime/").removesuffix(".py")
            if not any(name.startswith(module + ".") for name in built.values()):
                raise CompileError(f"no extension for {source} among {sorted(built.values())}")
        return built

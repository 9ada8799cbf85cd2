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

mypy reads the compiled modules as mypyc compiles them (:data:`MYPY_OPTIONS`); ``pyproject.toml``
pins both, as ``[tool.hatch.build.targets.wheel.hooks.custom]``'s dependencies.
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

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        mode = os.environ.get(ENV, "auto").strip().lower() or "auto"
        if mode not in ("auto", "0", "1"):
            raise ValueError(f"{ENV} must be auto, 0 or 1, not {mode!r}")
        if mode == "0":
            return
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

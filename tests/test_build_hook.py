"""The compiled runtime's build hook (hatch_build.py) agrees with what checks and relies on it.

Three places name the modules mypyc compiles: the hook's ``COMPILED``, the mypy override that turns
on ``warn_unreachable`` for them (pyproject.toml) and nox's ``COMPILED_MODULES`` (its build check:
they load compiled from the wheel).  A module added to one and not the others would be compiled
unchecked, or checked and not compiled.  And a compiled
module must define no exception class: code elsewhere subclasses them (``FsError``,
``WebSocketConnectError``), which a class compiled by mypyc does not allow.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _assigned(path: Path, name: str) -> object:
    """The literal value assigned to ``name`` at the top level of ``path`` (read, not imported:
    hatch_build.py imports hatchling, which the test environment need not have)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.name} assigns no {name}")


def _compiled_modules() -> list[str]:
    paths = _assigned(ROOT / "hatch_build.py", "COMPILED")
    assert isinstance(paths, tuple)
    modules = []
    for path in paths:
        assert path.startswith("runtime/") and path.endswith(".py"), path
        assert (ROOT / path).is_file(), path
        modules.append(path.removeprefix("runtime/").removesuffix(".py").replace("/", "."))
    return modules


def test_the_compiled_modules_are_the_ones_mypy_checks_for_mypyc() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    overrides = [o for o in config["tool"]["mypy"]["overrides"] if o.get("warn_unreachable")]
    assert len(overrides) == 1
    assert sorted(overrides[0]["module"]) == sorted(_compiled_modules())


def test_nox_checks_that_every_compiled_module_loads_compiled() -> None:
    assert _assigned(ROOT / "noxfile.py", "COMPILED_MODULES") == _compiled_modules()


@pytest.mark.parametrize("module", _compiled_modules())
def test_a_compiled_module_defines_no_exception_class(module: str) -> None:
    mod = importlib.import_module(module)
    defined = [
        name
        for name, obj in vars(mod).items()
        if inspect.isclass(obj) and obj.__module__ == module and issubclass(obj, BaseException)
    ]
    assert defined == [], f"{module} defines {defined}: move them to a module mypyc does not compile"


def test_the_public_exceptions_can_be_subclassed_with_another_base() -> None:
    import acp_trio

    for exc in (acp_trio.ConnectionClosed, acp_trio.RequestTimeout, acp_trio.RequestError):

        class Both(exc, ConnectionError):  # type: ignore[misc,valid-type]
            pass

        assert issubclass(Both, exc)


def _requires(build: str, **env: str) -> set[str]:
    """What the build backend asks the frontend to install for a ``build`` (``wheel``, ``editable``,
    ``sdist``), through PEP 517's hooks as pip and ``python -m build`` call them."""
    import os

    from build import ProjectBuilder

    def runner(cmd: Any, cwd: Any = None, extra_environ: Any = None) -> None:
        subprocess.run(cmd, cwd=cwd, env={**os.environ, **(extra_environ or {}), **env}, check=True)

    return set(ProjectBuilder(ROOT, runner=runner).get_requires_for_build(build))


def _compile_requires() -> list[str]:
    value = _assigned(ROOT / "hatch_build.py", "COMPILE_REQUIRES")
    assert isinstance(value, list)
    return value


def test_only_a_compiling_build_installs_mypy_and_the_compiled_modules_imports() -> None:
    """An editable install, an sdist and ACP_TRIO_COMPILE=0 compile nothing, so they install none of
    it (an editable install took 1 min 44 s when they did); a wheel that compiles asks for it all."""
    compile_requires = set(_compile_requires())
    assert _requires("wheel") == compile_requires
    assert _requires("wheel", ACP_TRIO_COMPILE="auto") == compile_requires
    assert _requires("wheel", ACP_TRIO_COMPILE="0") == set()
    assert not any(r.startswith(("mypy", "setuptools")) for r in _requires("editable"))
    assert _requires("sdist") == set()


def test_what_compiling_installs_agrees_with_the_runtime_and_lint() -> None:
    """mypy is the lint group's, pinned exactly (mypyc compiles what it infers); the packages mypy reads
    are the runtime's, with its bounds."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    requires = _compile_requires()
    mypy = [r for r in requires if r.startswith("mypy")]
    assert mypy and mypy[0] in config["dependency-groups"]["lint"]
    runtime = [r for r in requires if not r.startswith(("mypy", "setuptools"))]
    assert runtime and set(runtime) <= set(config["project"]["dependencies"])

"""docs/hooks.py, the check that fails `nox -s docs` on an undocumented or unrendered public name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import griffe
import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE = '''
"""A public module."""

__all__ = ["Documented", "bare", "Mixed", "CONSTANT"]

CONSTANT = 3
"""A documented constant."""


class Documented:
    """Has a docstring, and so do its public methods."""

    def method(self) -> None:
        """Documented."""

    def _private(self) -> None:
        pass


def bare() -> None:
    pass


class Mixed:
    """Documented, but one of its public methods is not."""

    attribute: int = 0  # attributes may be described in the class docstring

    def undocumented(self) -> None:
        pass


def not_exported() -> None:
    pass
'''


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("acp_docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def real(hooks: ModuleType) -> griffe.ModulesCollection:
    """acp_trio and acp_schema as griffe loads them from the source tree (loaded once: half a minute)."""
    collection: griffe.ModulesCollection = hooks.load(ROOT)
    return collection


def test_a_public_name_without_a_docstring_is_reported(hooks: ModuleType) -> None:
    with griffe.temporary_visited_module(FAKE, module_name="fake") as module:
        assert hooks.missing_docstrings(module) == ["fake.bare", "fake.Mixed.undocumented"]


def test_a_documented_module_passes(hooks: ModuleType) -> None:
    code = (
        '"""Docs."""\n\n__all__ = ["f"]\n\n\ndef f() -> None:\n    """Documented."""\n\n\ndef _g() -> None:\n    pass\n'
    )
    with griffe.temporary_visited_module(code, module_name="fine") as module:
        assert hooks.missing_docstrings(module) == []


def test_a_module_without_a_docstring_is_reported(hooks: ModuleType) -> None:
    with griffe.temporary_visited_module('__all__ = ["f"]\n\n\ndef f() -> None:\n    """Doc."""\n') as module:
        assert hooks.missing_docstrings(module) == [module.path]


def test_without_all_the_public_names_are_those_without_underscore(hooks: ModuleType) -> None:
    code = '"""Docs."""\n\n\ndef f() -> None:\n    pass\n\n\ndef _g() -> None:\n    pass\n'
    with griffe.temporary_visited_module(code, module_name="noall") as module:
        assert hooks.public_names(module) == ["f"]
        assert hooks.missing_docstrings(module) == ["noall.f"]


def test_a_public_name_missing_from_the_reference_is_reported(hooks: ModuleType) -> None:
    with griffe.temporary_visited_module(FAKE, module_name="fake") as module:
        rendered = ["fake.Documented", "fake.bare", "fake.CONSTANT", "fake.Documented.method"]
        assert hooks.unrendered(module, rendered) == ["fake.Mixed"]
        assert hooks.unrendered(module, [*rendered, "fake.Mixed"]) == []


def test_the_real_packages_are_documented_and_a_missing_page_is_caught(
    hooks: ModuleType, real: griffe.ModulesCollection
) -> None:
    """Every public name of acp_trio has a docstring today; with nothing rendered, every public name of
    every checked module is reported (so the check does look at the real packages)."""
    collection = real
    problems = list(hooks.check(collection, []))
    assert not [p for p in problems if "without a docstring" in p], problems
    assert "public name not rendered in the API reference: acp_trio.StandardClient" in problems
    assert "public name not rendered in the API reference: acp_schema.v1.PromptRequest" in problems
    rendered = ["acp_trio.StandardClient", "acp_schema.v1.PromptRequest"]
    # a re-exported name is covered by its object rendered under another path
    assert "public name not rendered in the API reference: acp_trio.standard_client.StandardClient" not in set(
        hooks.check(collection, rendered)
    )


def test_the_checked_modules_are_every_public_module_of_acp_trio_but_the_demo(
    hooks: ModuleType, real: griffe.ModulesCollection
) -> None:
    modules = hooks.public_modules(real["acp_trio"])
    assert modules[0] == "acp_trio"
    assert {"acp_trio.standard_client", "acp_trio.check", "acp_trio.transports.websocket"} <= set(modules)
    assert not [m for m in modules if m.startswith("acp_trio.demo") or "._" in m], modules

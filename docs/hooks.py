"""mkdocs hook: the API reference must cover every public name (`nox -s docs` builds with `--strict`).

After the build it loads the documented packages with griffe, as mkdocstrings does, and logs a
warning (an error under `--strict`) for

- a public name of `acp_trio` or of one of its public modules (every submodule without `_` in its
  path but the demo programs; each module's `__all__`) without a docstring, and a public method,
  property or nested class of such a name without one;
- a public name of those modules, of `acp_schema` or of `acp_schema.v1` that no page of the
  reference renders (under any path: `acp_trio.StandardClient` covers
  `acp_trio.standard_client.StandardClient`).

The generated `acp_schema` classes carry the schema's descriptions as docstrings; where the schema
has none the generator writes none, so for `acp_schema` only rendering is required.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import griffe

log = logging.getLogger("mkdocs.hooks.api_coverage")

# What is not API: the demo programs, run with `python -m acp_trio.demo`, never imported by users.
NOT_API = frozenset({"acp_trio.demo"})
# Generated code, rendered with the docstrings the schema gives it (the other variants: prose only).
GENERATED_MODULES = ("acp_schema", "acp_schema.v1")
SEARCH_PATHS = ("runtime", "generated")

_ANCHOR = re.compile(r'\bid="((?:acp_trio|acp_schema)(?:\.\w+)*)"')
_rendered: set[str] = set()


def public_names(module: griffe.Module) -> list[str]:
    """The module's public names: its `__all__`, else its members not starting with `_`."""
    if module.exports is not None:
        return [name if isinstance(name, str) else name.name for name in module.exports]
    return [name for name in module.members if not name.startswith("_")]


def _target(obj: griffe.Object | griffe.Alias) -> griffe.Object | griffe.Alias:
    try:
        return obj.final_target if isinstance(obj, griffe.Alias) else obj
    except griffe.AliasResolutionError:
        return obj


def _has_docstring(obj: griffe.Object | griffe.Alias) -> bool:
    docstring = obj.docstring
    return docstring is not None and bool(docstring.value.strip())


def missing_docstrings(module: griffe.Module) -> list[str]:
    """Paths of the module's public names without a docstring (the module itself included), and of
    the public methods, properties and nested classes of its public classes without one.
    Attributes may be described in their class's docstring instead."""
    missing = [] if _has_docstring(module) else [module.path]
    for name in public_names(module):
        obj = _target(module[name])
        if not _has_docstring(obj):
            missing.append(f"{module.path}.{name}")
        if obj.is_class:
            for member_name, member in obj.members.items():
                if member_name.startswith("_"):
                    continue
                target = _target(member)
                if target.is_attribute or target.is_alias:
                    continue
                if not _has_docstring(target):
                    missing.append(f"{module.path}.{name}.{member_name}")
    return missing


def canonical_path(collection: griffe.ModulesCollection, path: str) -> str | None:
    """The path where the object named `path` is defined, or None when griffe does not know it."""
    try:
        obj = collection[path]
    except (KeyError, ValueError, griffe.AliasResolutionError):
        return None
    return _target(obj).path


def with_canonical_paths(collection: griffe.ModulesCollection, rendered: Iterable[str]) -> set[str]:
    """The `rendered` paths and the paths where their objects are defined."""
    seen = set(rendered)
    return seen | {canonical for path in seen if (canonical := canonical_path(collection, path)) is not None}


def unrendered(module: griffe.Module, rendered: Iterable[str], *, expanded: bool = False) -> list[str]:
    """Paths of the module's public names whose object appears under none of the `rendered` paths
    (``expanded``: `rendered` already holds :func:`with_canonical_paths`, worked out once for every
    module: a few thousand griffe lookups each time otherwise)."""
    seen = set(rendered) if expanded else with_canonical_paths(module.modules_collection, rendered)
    missing = []
    for name in public_names(module):
        path = f"{module.path}.{name}"
        if path not in seen and _target(module[name]).path not in seen:
            missing.append(path)
    return missing


def public_modules(module: griffe.Module) -> list[str]:
    """``module`` and, depth first, every submodule whose dotted path has no part starting with ``_``,
    except :data:`NOT_API`: the modules whose public names need docstrings and a place in the reference."""
    if module.path in NOT_API:
        return []
    found = [module.path]
    for name, member in sorted(module.members.items()):
        if not name.startswith("_") and isinstance(member, griffe.Module):
            found += public_modules(member)
    return found


def check(collection: griffe.ModulesCollection, rendered: Iterable[str]) -> Iterator[str]:
    """Every problem, as a sentence: undocumented names, then names the reference does not render."""
    rendered = set(rendered)
    documented = public_modules(collection["acp_trio"])
    reported: set[str] = set()  # a name re-exported elsewhere is reported once
    for path in documented:
        for name in missing_docstrings(collection[path]):
            canonical = canonical_path(collection, name) or name
            if canonical not in reported:
                reported.add(canonical)
                yield f"public name without a docstring: {name}"
    seen = with_canonical_paths(collection, rendered)
    for path in (*documented, *GENERATED_MODULES):
        for name in unrendered(collection[path], seen, expanded=True):
            yield f"public name not rendered in the API reference: {name}"


def load(root: Path) -> griffe.ModulesCollection:
    """Load the documented packages from the source tree, the way mkdocstrings sees them."""
    loader = griffe.GriffeLoader(search_paths=[str(root / path) for path in SEARCH_PATHS])
    for package in ("acp_trio", "acp_schema"):
        loader.load(package)
    loader.resolve_aliases(implicit=False, external=None)
    return loader.modules_collection


# mkdocs events ---------------------------------------------------------------------------------


def on_config(config: Any) -> None:
    _rendered.clear()


def on_page_content(html: str, page: Any, config: Any, files: Any) -> None:
    _rendered.update(_ANCHOR.findall(html))


def on_post_build(config: Any) -> None:
    root = Path(config["config_file_path"]).parent
    problems = list(check(load(root), _rendered))
    for problem in problems:
        log.warning(problem)
    if not problems:
        log.info("API reference: every public name documented and rendered")

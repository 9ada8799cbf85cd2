"""Schema-driven data for the property tests (``tests/test_properties.py``).

Everything here is derived from the pinned schemas in ``schema/`` and cached at module level,
because the expensive parts are per-(variant, def) and pytest parametrization asks for them one
pair at a time:

* ``load_schema(variant)``: the parsed schema document;
* ``def_names(variant)``: every ``$def`` that has a binding (the JSON-RPC envelopes are dropped
  by the generator, so they are dropped here too);
* ``strategy_for(variant, name)``: a hypothesis-jsonschema strategy for valid instances of one
  ``$def`` (``from_schema`` inlines every ``$ref`` and canonicalises the result, which is slow,
  hence ``_STRATEGIES``);
* ``validator_for(variant, name)``: a Draft 2020-12 validator for one ``$def``, all of them
  sharing one ``referencing`` registry per variant, so ``$ref`` targets are resolved once.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import referencing
import referencing.jsonschema
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

ROOT = Path(__file__).resolve().parent.parent

SCHEMA_FILES: dict[str, Path] = {
    "v1": ROOT / "schema" / "v1" / "schema.json",
    "v1_unstable": ROOT / "schema" / "v1" / "schema.unstable.json",
    "v2": ROOT / "schema" / "v2" / "schema.json",
    "v2_unstable": ROOT / "schema" / "v2" / "schema.unstable.json",
}
VARIANTS: tuple[str, ...] = tuple(SCHEMA_FILES)

# JSON-RPC envelopes: the generator drops them (they are not exported by ``acp_schema``).
ENVELOPES: frozenset[str] = frozenset(
    f"{side}{kind}" for side in ("Agent", "Client", "Proxy") for kind in ("Request", "Response", "Notification")
)


@functools.cache
def load_schema(variant: str) -> dict[str, Any]:
    with SCHEMA_FILES[variant].open(encoding="utf-8") as f:
        schema: dict[str, Any] = json.load(f)
    return schema


@functools.cache
def def_names(variant: str) -> tuple[str, ...]:
    """The ``$def`` names of ``variant`` that have a binding, sorted."""
    return tuple(sorted(name for name in load_schema(variant)["$defs"] if name not in ENVELOPES))


def _uri(variant: str) -> str:
    return f"urn:acp-schema:{variant}"


@functools.cache
def _registry(variant: str) -> referencing.Registry[Any]:
    resource = referencing.jsonschema.DRAFT202012.create_resource(load_schema(variant))
    return referencing.Registry().with_resource(_uri(variant), resource)


# (variant, def) -> validator; all validators of a variant share that variant's registry.
_VALIDATORS: dict[tuple[str, str], jsonschema.protocols.Validator] = {}


def validator_for(variant: str, name: str) -> jsonschema.protocols.Validator:
    key = (variant, name)
    validator = _VALIDATORS.get(key)
    if validator is None:
        validator = jsonschema.Draft202012Validator(
            {"$ref": f"{_uri(variant)}#/$defs/{name}"}, registry=_registry(variant)
        )
        _VALIDATORS[key] = validator
    return validator


@functools.cache
def _defs_for_generation(variant: str) -> dict[str, Any]:
    # The envelopes reference other defs but nothing references them: leaving them out makes the
    # document hypothesis-jsonschema deep-copies on every ``from_schema`` call smaller.
    return {k: v for k, v in load_schema(variant)["$defs"].items() if k not in ENVELOPES}


# (variant, def) -> strategy.  ``from_schema`` never raises: a schema it cannot handle becomes a
# strategy that raises when drawn from, so unsupported defs show up as test errors, not passes.
_STRATEGIES: dict[tuple[str, str], st.SearchStrategy[Any]] = {}


def strategy_for(variant: str, name: str) -> st.SearchStrategy[Any]:
    key = (variant, name)
    strategy = _STRATEGIES.get(key)
    if strategy is None:
        schema = {"$ref": f"#/$defs/{name}", "$defs": _defs_for_generation(variant)}
        strategy = from_schema(schema)
        _STRATEGIES[key] = strategy
    return strategy

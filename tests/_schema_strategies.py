"""Schema-driven data for the property tests (``tests/test_properties.py``).

Everything here comes from the pinned schemas in ``schema/`` and is cached at module level,
because pytest parametrization asks for one (variant, def) pair at a time:

* ``load_schema(variant)``: the parsed schema document (``test_properties`` checks it against
  its metaschema, once, in a test of its own: ~3 s per variant, too slow for every collection);
* ``def_names(variant)``: every ``$def`` that has a binding (the JSON-RPC envelopes are dropped
  by the generator, so they are dropped here too);
* ``strategy_for(variant, name)``: a hypothesis-jsonschema strategy for valid instances of one
  ``$def``, cached in ``_STRATEGIES``;
* ``validator_for(variant, name)``: a Draft 2020-12 validator for one ``$def`` against the schema
  exactly as pinned, cached in ``_VALIDATORS``; the validators of a variant share one
  ``referencing`` registry.

Speed.  ``from_schema({"$ref": "#/$defs/X", "$defs": all_defs})`` costs 1-3 s per def (~20 min
for all four variants): hypothesis-jsonschema re-inlines X's whole ``$ref`` closure for every X,
drags the ``$defs`` map along into every ``anyOf`` branch it canonicalises (re-encoding all of it
as canonical JSON each time), and re-checks every merged subschema against the 2020-12
metaschema.  So instead, per variant:

* generation works on a copy of the schema without annotations (``description``, ``title``,
  ``default``, ``x-*``, ...): they do not constrain instances but dominate the size of what gets
  inlined, encoded and meta-validated.  Validation (``validator_for``) uses the full schema;
* ``_resolved_def`` inlines ``$ref`` s itself, once per def (memoized, bottom-up: the schemas have
  no recursive ``$ref``), with hypothesis-jsonschema's own ``merged`` -- the same algorithm as its
  ``resolve_all_refs``, which yields identical canonical schemas -- and ``from_schema`` gets a
  ``$ref``-free schema with no ``$defs``.

That brings a def to ~10-100 ms (the big unions, e.g. ``SessionUpdate``, take a few seconds).

Drawing is the other cost: hypothesis-jsonschema's object strategy builds the strategy of each
property it draws *at draw time*, re-canonicalising that property's (inlined) schema on every
draw -- ~2 s per example of ``SessionNotification``.  ``_memoize_draw_time_strategies`` caches
those builds by the identity of the (never mutated) schema objects they come from: 20 examples
of ``SessionNotification`` go from ~47 s to ~2 s.  It patches two private functions of
hypothesis-jsonschema, so it is applied only to the pinned version (``_PATCHED_VERSION``); with
another version everything still works, only slower.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import json
from pathlib import Path
from typing import Any

import hypothesis_jsonschema._canonicalise as _hjs_canonicalise
import hypothesis_jsonschema._from_schema as _hjs_from_schema
import hypothesis_jsonschema._resolve as _hjs_resolve
import jsonschema
import referencing
import referencing.jsonschema
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from hypothesis_jsonschema._canonicalise import SCHEMA_KEYS, SCHEMA_OBJECT_KEYS

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

_DEFS_PREFIX = "#/$defs/"


@functools.cache
def load_schema(variant: str) -> dict[str, Any]:
    with SCHEMA_FILES[variant].open(encoding="utf-8") as f:
        schema: dict[str, Any] = json.load(f)
    return schema


@functools.cache
def def_names(variant: str) -> tuple[str, ...]:
    """The ``$def`` names of ``variant`` that have a binding, sorted."""
    return tuple(sorted(name for name in load_schema(variant)["$defs"] if name not in ENVELOPES))


# --- validation ------------------------------------------------------------------------------


def _uri(variant: str) -> str:
    return f"urn:acp-schema:{variant}"


@functools.cache
def _registry(variant: str) -> referencing.Registry[Any]:
    resource = referencing.jsonschema.DRAFT202012.create_resource(load_schema(variant))
    return referencing.Registry().with_resource(_uri(variant), resource)


_VALIDATORS: dict[tuple[str, str], jsonschema.Draft202012Validator] = {}


def validator_for(variant: str, name: str) -> jsonschema.Draft202012Validator:
    """Draft 2020-12 validator for ``#/$defs/<name>`` of ``variant`` (``format`` is an annotation)."""
    key = (variant, name)
    validator = _VALIDATORS.get(key)
    if validator is None:
        validator = jsonschema.Draft202012Validator(
            {"$ref": f"{_uri(variant)}{_DEFS_PREFIX}{name}"}, registry=_registry(variant)
        )
        _VALIDATORS[key] = validator
    return validator


# --- generation ------------------------------------------------------------------------------

# Keywords that only annotate: dropped from the copy of the schema used for generation.
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "discriminator", "contentEncoding"})
# Keywords whose value is an instance, a list of instances or of names, not a schema.
_VERBATIM = frozenset({"const", "enum", "required"})
# Keywords whose value maps names to schemas.
_NAME_MAPS = frozenset({"properties", "$defs", "patternProperties", "dependentSchemas"})


def _strip_annotations(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strip_annotations(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ANNOTATIONS or key.startswith("x-"):
            continue
        if key in _VERBATIM:
            out[key] = value
        elif key in _NAME_MAPS:
            out[key] = {name: _strip_annotations(sub) for name, sub in value.items()}
        else:
            out[key] = _strip_annotations(value)
    return out


@functools.cache
def _generation_defs(variant: str) -> dict[str, Any]:
    defs: dict[str, Any] = load_schema(variant)["$defs"]
    return {name: _strip_annotations(schema) for name, schema in defs.items() if name not in ENVELOPES}


# (variant, def) -> the def with every $ref inlined (canonical form; never mutated: copy to use).
_RESOLVED: dict[tuple[str, str], Any] = {}


def _resolved_def(variant: str, name: str) -> Any:
    key = (variant, name)
    if key not in _RESOLVED:
        _RESOLVED[key] = _resolve(variant, copy.deepcopy(_generation_defs(variant)[name]))
    return _RESOLVED[key]


def _resolve(variant: str, schema: Any) -> Any:
    """``hypothesis_jsonschema._resolve.resolve_all_refs``, with local ``$defs`` refs memoized."""
    if isinstance(schema, bool):
        return _hjs_canonicalise.canonicalish(schema)
    assert isinstance(schema, dict), schema
    if "$ref" in schema:
        rest = dict(schema)
        ref = rest.pop("$ref")
        if not ref.startswith(_DEFS_PREFIX):
            raise ValueError(f"unsupported $ref {ref!r} (only {_DEFS_PREFIX}<Name> is)")
        target = copy.deepcopy(_resolved_def(variant, ref[len(_DEFS_PREFIX) :]))
        out = _hjs_canonicalise.merged([_resolve(variant, rest), target])
        if out is None:
            raise ValueError(f"$ref {ref!r} cannot be merged with its sibling keywords {rest!r}")
        return out
    for key in SCHEMA_KEYS:
        value = schema.get(key)
        if isinstance(value, list):
            schema[key] = [_resolve(variant, v) if isinstance(v, dict) else v for v in value]
        elif isinstance(value, dict):
            schema[key] = _resolve(variant, value)
    for key in SCHEMA_OBJECT_KEYS:  # values map names to schemas
        if key in schema:
            schema[key] = {k: _resolve(variant, v) if isinstance(v, dict) else v for k, v in schema[key].items()}
    return schema


# --- draw-time memoization (hypothesis-jsonschema internals) ---------------------------------

_PATCHED_VERSION = "0.23.1"
# key -> (strategy, *the objects whose ids are in the key): keeping them alive keeps ids unique.
_DRAW_TIME_STRATEGIES: dict[tuple[Any, ...], tuple[Any, ...]] = {}


def _memoize_draw_time_strategies() -> bool:
    """Memoize ``merged_as_strategies`` and ``__from_schema`` of hypothesis-jsonschema by identity.

    Both are pure functions of their arguments (schemas, the alphabet, the custom formats), which
    hypothesis-jsonschema never mutates once a strategy is built; ``object_schema`` calls them
    again on the same objects for every property of every draw."""
    if importlib.metadata.version("hypothesis-jsonschema") != _PATCHED_VERSION:
        return False
    module: Any = _hjs_from_schema
    merged_as_strategies = module.merged_as_strategies
    from_schema_ = vars(module)["__from_schema"]

    def memo_merged_as_strategies(schemas: list[Any], *, alphabet: Any, custom_formats: Any) -> Any:
        key = ("merged", *map(id, schemas), id(alphabet), id(custom_formats))
        hit = _DRAW_TIME_STRATEGIES.get(key)
        if hit is None:
            strategy = merged_as_strategies(schemas, alphabet=alphabet, custom_formats=custom_formats)
            hit = _DRAW_TIME_STRATEGIES[key] = (strategy, list(schemas), alphabet, custom_formats)
        return hit[0]

    def memo_from_schema(schema: Any, *, alphabet: Any, custom_formats: Any) -> Any:
        key = ("schema", id(schema), id(alphabet), id(custom_formats))
        hit = _DRAW_TIME_STRATEGIES.get(key)
        if hit is None:
            strategy = from_schema_(schema, alphabet=alphabet, custom_formats=custom_formats)
            hit = _DRAW_TIME_STRATEGIES[key] = (strategy, schema, alphabet, custom_formats)
        return hit[0]

    module.merged_as_strategies = memo_merged_as_strategies
    setattr(module, "__from_schema", memo_from_schema)
    return True


DRAW_TIME_MEMOIZED = _memoize_draw_time_strategies()


# --- build-time memoization (hypothesis-jsonschema internals) --------------------------------

# JSON key -> JSON text of the result (a fresh copy is decoded on every hit: callers mutate it).
_CANONICAL: dict[str, str] = {}
_MERGED: dict[str, str | None] = {}
# The metaschema check's result per schema; hypothesis-jsonschema keeps the last 128 only.
_VALIDATOR_CLASSES: dict[str, Any] = {}


def _json_key(value: Any) -> str | None:
    """``value`` as sorted-key JSON (``json``'s C encoder), or None if it is not plain JSON."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None


# What ``Draft202012Validator.check_schema`` validates a schema with.
_METASCHEMA = jsonschema.Draft202012Validator(
    jsonschema.Draft202012Validator.META_SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
)
# JSON key -> whether that schema passes the 2020-12 metaschema.
_VALID_2020_12: dict[str, bool] = {}


def _valid_2020_12(schema: Any, key: str | None = None) -> bool:
    """Whether ``schema`` passes the 2020-12 metaschema, checked one level at a time, memoized.

    The metaschema checks every subschema (the value of ``items``, ``not``, each of ``anyOf``,
    each of ``properties``, ...) against itself (``$dynamicRef: #meta``) whatever its parent, so
    a schema passes iff its shell (each such subschema replaced by ``{}``) passes and each
    subschema does.  ``check_schema`` on a whole inlined union re-checks its shared subschemas
    at every level; this checks each distinct one once.  A False here may be wrong (a keyword
    listed in ``SCHEMA_KEYS`` that 2020-12 does not know takes any value), so the caller takes
    hypothesis-jsonschema's own path then; a True is exact."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict):
        return False
    key = key if key is not None else _json_key(schema)
    if key is None:
        return False
    hit = _VALID_2020_12.get(key)
    if hit is not None:
        return hit
    shell = dict(schema)
    subschemas: list[Any] = []
    for name in SCHEMA_KEYS:
        value = shell.get(name)
        if isinstance(value, dict | bool):
            subschemas.append(value)
            shell[name] = {}
        elif isinstance(value, list) and all(isinstance(v, dict | bool) for v in value):
            subschemas.extend(value)
            shell[name] = [{} for _ in value]
    for name in SCHEMA_OBJECT_KEYS:
        value = shell.get(name)
        if isinstance(value, dict):
            shell[name] = {k: {} if isinstance(v, dict | bool) else v for k, v in value.items()}
            subschemas.extend(v for v in value.values() if isinstance(v, dict | bool))
    ok = _METASCHEMA.is_valid(shell) and all(_valid_2020_12(sub) for sub in subschemas)
    _VALID_2020_12[key] = ok
    return ok


def _memoize_build_time_functions() -> bool:
    """Memoize ``canonicalish``, ``merged`` and the validator-class lookup by JSON value.

    Building the strategy of a big union (``SessionUpdate``: ~30 variants, each with the whole
    ``ContentBlock`` union inlined) canonicalises and merges the same subschemas thousands of
    times, each time re-encoding them as canonical JSON and re-checking them against the
    metaschema, whose cache holds 128 schemas: ~20 s of CPU for that one def.  The three
    functions are pure functions of the JSON value of their arguments (results are fresh
    objects, which callers then mutate, so a hit returns a fresh copy decoded from JSON text),
    and the defs of one variant share most of their subschemas, so the memo also serves later
    defs.  Patched only with the pinned version (``_PATCHED_VERSION``), like the draw-time memo."""
    if importlib.metadata.version("hypothesis-jsonschema") != _PATCHED_VERSION:
        return False
    canonicalise: Any = _hjs_canonicalise
    canonical = canonicalise.canonicalish
    merge = canonicalise.merged
    validator_class = canonicalise._get_validator_class

    def memo_canonicalish(schema: Any) -> Any:
        if isinstance(schema, bool):
            return canonical(schema)
        key = _json_key(schema)
        if key is None:
            return canonical(schema)
        hit = _CANONICAL.get(key)
        if hit is not None:
            return json.loads(hit)
        out = canonical(schema)
        text = _json_key(out)
        if text is not None:
            _CANONICAL[key] = text
        return out

    def memo_merged(schemas: list[Any]) -> Any:
        key = _json_key(schemas)
        if key is None:
            return merge(schemas)
        if key in _MERGED:
            hit = _MERGED[key]
            return None if hit is None else json.loads(hit)
        out = merge(schemas)
        text = None if out is None else _json_key(out)
        if out is None or text is not None:
            _MERGED[key] = text
        return out

    def memo_validator_class(schema: Any) -> Any:
        key = _json_key(schema)
        if key is None:
            return validator_class(schema)
        hit = _VALIDATOR_CLASSES.get(key)
        if hit is None:
            # hypothesis-jsonschema's answer for a schema without ``$schema`` that passes the
            # 2020-12 metaschema; anything else takes its own path (other drafts, errors).
            fast = (
                isinstance(schema, dict)
                and jsonschema.validators.validator_for(schema) is jsonschema.Draft202012Validator
                and _valid_2020_12(schema, key)
            )
            hit = jsonschema.Draft202012Validator if fast else validator_class(schema)
            _VALIDATOR_CLASSES[key] = hit
        return hit

    # Each module calls them through its own global name (``from ._canonicalise import ...``).
    modules: tuple[Any, ...] = (_hjs_canonicalise, _hjs_from_schema, _hjs_resolve)
    for module in modules:
        module.canonicalish = memo_canonicalish
        module.merged = memo_merged
    canonicalise._get_validator_class = memo_validator_class
    return True


BUILD_TIME_MEMOIZED = _memoize_build_time_functions()


# (variant, def) -> strategy.  ``from_schema`` does not raise on a schema it cannot handle: it
# returns a strategy that raises when drawn from, so such a def errors in its test, never passes.
_STRATEGIES: dict[tuple[str, str], st.SearchStrategy[Any]] = {}


def strategy_for(variant: str, name: str) -> st.SearchStrategy[Any]:
    """A strategy for instances of ``#/$defs/<name>`` of ``variant`` (valid ones, modulo bugs)."""
    key = (variant, name)
    strategy = _STRATEGIES.get(key)
    if strategy is None:
        strategy = from_schema(copy.deepcopy(_resolved_def(variant, name)))
        _STRATEGIES[key] = strategy
    return strategy

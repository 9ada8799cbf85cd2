"""Property test: every schema ``$def`` round-trips through the converter.

For each (variant, def): hypothesis-jsonschema generates instances valid against the pinned
schema; each must decode with ``acp_schema.<variant>.<def>``, re-encode JSON-equal to the input,
and the encoding must validate against the schema (Draft 2020-12).

Profiles (environment):

* ``ACP_PROPERTY_PROFILE=ci`` (default): ``ACP_PROPERTY_DEFS`` (default 40) defs per variant,
  3 examples each.  The subset rotates: it is drawn from ``ACP_PROPERTY_SEED`` (default: today's
  UTC date), so successive days cover different defs; the subset is printed at the start.
  Reproduce a run with ``ACP_PROPERTY_SEED=<seed from the header>``.
* ``ACP_PROPERTY_PROFILE=full``: every def of every variant, 20 examples each.

``ACP_PROPERTY_EXAMPLES`` overrides the number of examples.  Hypothesis keeps no example
database (``database=None``); a failure prints the shrunk instance and a ``@reproduce_failure``
blob.

Failures say which step broke: the generator (an instance the schema itself rejects: a
hypothesis-jsonschema problem, not ours), decoding (``DecodeError`` and its JSON path),
re-encoding (the first differing JSON path), or validation of the encoding.
"""

from __future__ import annotations

import datetime
import importlib
import os
import random
from typing import Any

import jsonschema
import pytest
from _schema_strategies import (
    BUILD_TIME_MEMOIZED,
    DRAW_TIME_MEMOIZED,
    VARIANTS,
    def_names,
    load_schema,
    strategy_for,
    validator_for,
)
from hypothesis import HealthCheck, Phase, given, settings

from acp_trio import DecodeError, converter

# The schema against the generated classes and the converter, sampled by hypothesis: what no interpreter
# changes (the converter's own tests run on every interpreter); `nox -s tests` runs these on 3.11 only.
pytestmark = pytest.mark.one_interpreter

PROFILE = os.environ.get("ACP_PROPERTY_PROFILE", "ci")
if PROFILE not in ("ci", "full"):
    raise ValueError(f"ACP_PROPERTY_PROFILE={PROFILE!r}: expected 'ci' or 'full'")
SEED = os.environ.get("ACP_PROPERTY_SEED") or datetime.datetime.now(datetime.UTC).date().isoformat()
CI_DEFS_PER_VARIANT = int(os.environ.get("ACP_PROPERTY_DEFS", "40"))
_DEFAULT_EXAMPLES = {"ci": 3, "full": 20}

_COMMON: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "print_blob": True,
    # No ``explain`` phase: it re-runs failing examples under a tracer, which costs tens of
    # seconds per failing def and adds nothing the failure message does not already say.
    "phases": [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.large_base_example,
    ],
}
settings.register_profile("acp-properties-ci", max_examples=_DEFAULT_EXAMPLES["ci"], **_COMMON)
settings.register_profile("acp-properties-full", max_examples=_DEFAULT_EXAMPLES["full"], **_COMMON)
# Applied per test (not loaded globally, so other test modules keep their own settings).
SETTINGS = settings(
    settings.get_profile(f"acp-properties-{PROFILE}"),
    max_examples=int(os.environ.get("ACP_PROPERTY_EXAMPLES", _DEFAULT_EXAMPLES[PROFILE])),
)

# Defs the test cannot check, with why.  Each one is reported as a skip (pytest -ra) with its
# reason; ``test_skip_list_names_real_defs`` keeps the list from going stale.  Key: def name
# (all variants) or (variant, def name).  Empty: hypothesis-jsonschema handles every def of the
# pinned schemas -- ``not`` becomes a filter (the catch-all branches of the tagged unions), and
# the only ``unevaluatedProperties`` is ``true`` (a no-op).  A def it cannot handle errors in its
# test (``from_schema`` returns a strategy that raises); add it here with the reason.
SKIP: dict[str | tuple[str, str], str] = {}


def _skip_reason(variant: str, name: str) -> str | None:
    return SKIP.get((variant, name)) or SKIP.get(name)


def _selected(variant: str) -> list[str]:
    names = list(def_names(variant))
    if PROFILE == "full" or CI_DEFS_PER_VARIANT >= len(names):
        return names
    return sorted(random.Random(f"{SEED}/{variant}").sample(names, CI_DEFS_PER_VARIANT))


SELECTED: dict[str, list[str]] = {variant: _selected(variant) for variant in VARIANTS}
CASES = [(variant, name) for variant in VARIANTS for name in SELECTED[variant]]


def _header_lines() -> list[str]:
    total = sum(len(def_names(v)) for v in VARIANTS)
    lines = [
        f"acp property tests: profile={PROFILE} seed={SEED} examples/def={SETTINGS.max_examples} "
        f"defs={len(CASES)}/{total} draw-time-memo={'on' if DRAW_TIME_MEMOIZED else 'off (slow)'} "
        f"build-time-memo={'on' if BUILD_TIME_MEMOIZED else 'off (slow)'}"
    ]
    if PROFILE == "ci":
        for variant in VARIANTS:
            lines.append(
                f"  {variant} ({len(SELECTED[variant])}/{len(def_names(variant))}): " + " ".join(SELECTED[variant])
            )
    return lines


_header_printed = False


@pytest.fixture(scope="module", autouse=True)
def _print_subset(request: pytest.FixtureRequest) -> None:
    global _header_printed
    if _header_printed:
        return
    _header_printed = True
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if reporter is None or capture is None:  # e.g. an xdist worker
        print("\n".join(_header_lines()))
        return
    with capture.global_and_fixture_disabled():
        reporter.ensure_newline()
        for line in _header_lines():
            reporter.write_line(line)


# --- JSON comparison -------------------------------------------------------------------------


def _json_diff(expected: Any, actual: Any, path: str = "$") -> str | None:
    """The first JSON path where ``actual`` differs from ``expected``, with both values; else None.

    Python ``==`` with JSON's types: a bool is never equal to a number, a list never to a tuple,
    numbers compare by value (``1 == 1.0``)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path}: expected object {expected!r}, got {actual!r}"
        for key in expected.keys() - actual.keys():
            return f"{path}: key {key!r} dropped (value {expected[key]!r})"
        for key in actual.keys() - expected.keys():
            return f"{path}: key {key!r} added (value {actual[key]!r})"
        for key in expected:
            diff = _json_diff(expected[key], actual[key], f"{path}.{key}")
            if diff:
                return diff
        return None
    if isinstance(expected, list):
        if type(actual) is not list:
            return f"{path}: expected array {expected!r}, got {type(actual).__name__} {actual!r}"
        if len(expected) != len(actual):
            return f"{path}: expected {len(expected)} items {expected!r}, got {len(actual)} {actual!r}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            diff = _json_diff(e, a, f"{path}[{i}]")
            if diff:
                return diff
        return None
    if isinstance(expected, bool) or isinstance(actual, bool):
        ok = type(expected) is type(actual) and expected == actual
    elif isinstance(expected, int | float) and isinstance(actual, int | float):
        ok = expected == actual
    else:
        ok = type(expected) is type(actual) and expected == actual
    return None if ok else f"{path}: expected {expected!r}, got {actual!r}"


def _schema_errors(validator: jsonschema.Draft202012Validator, instance: Any) -> str | None:
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return None
    return f"{error.json_path}: {error.message}"


# --- the property ----------------------------------------------------------------------------


class PropertyFailure(AssertionError):
    """One broken step of the round trip; the message starts with the step's name."""


def check_roundtrip(variant: str, name: str, target: Any, instance: Any) -> None:
    validator = validator_for(variant, name)
    problem = _schema_errors(validator, instance)
    if problem:
        raise PropertyFailure(
            f"GENERATOR: hypothesis-jsonschema produced an instance {variant}.{name} itself rejects "
            f"(a hypothesis-jsonschema problem, not acp-trio's): {problem}\ninstance: {instance!r}"
        )
    try:
        decoded = converter.structure(instance, target)
    except DecodeError as err:
        raise PropertyFailure(
            f"DECODE: {variant}.{name} rejects a schema-valid instance at {err.json_path}: {err}\ninstance: {instance!r}"
        ) from err
    encoded = converter.unstructure(decoded)
    diff = _json_diff(instance, encoded)
    if diff:
        raise PropertyFailure(
            f"ROUNDTRIP: {variant}.{name} re-encodes differently: {diff}\ninstance: {instance!r}\nencoded:  {encoded!r}"
        )
    problem = _schema_errors(validator, encoded)
    if problem:
        raise PropertyFailure(
            f"ENCODE: the encoding of {variant}.{name} is schema-invalid: {problem}\nencoded: {encoded!r}"
        )


@pytest.mark.parametrize(("variant", "name"), CASES, ids=[f"{v}.{n}" for v, n in CASES])
def test_def_roundtrips(variant: str, name: str) -> None:
    reason = _skip_reason(variant, name)
    if reason:
        pytest.skip(f"{variant}.{name}: {reason}")
    target = getattr(importlib.import_module(f"acp_schema.{variant}"), name)

    @SETTINGS
    @given(instance=strategy_for(variant, name))
    def roundtrip(instance: Any) -> None:
        check_roundtrip(variant, name, target, instance)

    roundtrip()


# --- bookkeeping -----------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_pinned_schema_is_a_valid_2020_12_schema(variant: str) -> None:
    # Here rather than in load_schema: the check costs ~3 s per variant, and every collection
    # (every xdist worker) loads the four schemas.
    jsonschema.Draft202012Validator.check_schema(load_schema(variant))


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_def_has_a_binding(variant: str) -> None:
    module = importlib.import_module(f"acp_schema.{variant}")
    missing = [name for name in def_names(variant) if not hasattr(module, name)]
    assert not missing, f"acp_schema.{variant} does not export {missing}"


def test_skip_list_names_real_defs() -> None:
    stale = [
        key
        for key in SKIP
        if (
            key[1] not in def_names(key[0])
            if isinstance(key, tuple)
            else all(key not in def_names(v) for v in VARIANTS)
        )
    ]
    assert not stale, f"SKIP names defs no schema has: {stale}"

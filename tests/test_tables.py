"""The generated method tables agree with the schemas' `x-method` / `x-side` annotations, and nothing else is in them."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

import acp_schema
from acp_trio import MethodSpec

ROOT = Path(__file__).resolve().parent.parent
FILES = {
    "v1": "v1/schema.json",
    "v1_unstable": "v1/schema.unstable.json",
    "v2": "v2/schema.json",
    "v2_unstable": "v2/schema.unstable.json",
}


def _schema(variant: str) -> dict[str, dict[str, object]]:
    defs: dict[str, dict[str, object]] = json.loads((ROOT / "schema" / FILES[variant]).read_text())["$defs"]
    return defs


@pytest.mark.parametrize("variant", FILES)
def test_every_x_method_is_in_the_tables_with_its_side_kind_and_types(variant: str) -> None:
    mod = importlib.import_module(f"acp_schema.{variant}")
    expected: dict[tuple[str, str], dict[str, str]] = {}
    for name, d in _schema(variant).items():
        if "x-method" not in d:
            continue
        kind = "notification" if name.endswith("Notification") else "request"
        slot = expected.setdefault((str(d["x-method"]), kind), {"side": str(d["x-side"])})
        slot["params" if name.endswith(("Request", "Notification")) else "result"] = name
    seen = set()
    for (method, kind), slot in expected.items():
        table = mod.REQUESTS if kind == "request" else mod.NOTIFICATIONS
        spec = table[method]
        assert isinstance(spec, MethodSpec)
        assert (spec.method, spec.kind, spec.side) == (method, kind, slot["side"])
        assert spec.params_type is getattr(mod, slot["params"])
        if kind == "request":
            assert spec.result_type is getattr(mod, slot["result"])
        else:
            assert spec.result_type is None
        seen.add((method, kind))
    in_tables = {(m, "request") for m in mod.REQUESTS} | {(m, "notification") for m in mod.NOTIFICATIONS}
    assert in_tables == seen
    assert set(mod.METHODS) == {m for m, _ in seen}


@pytest.mark.parametrize("variant", FILES)
def test_unstable_flags_match_the_stable_schema(variant: str) -> None:
    mod = importlib.import_module(f"acp_schema.{variant}")
    if not variant.endswith("_unstable"):
        stable_methods = {m for m, s in mod.METHODS.items() if not s.unstable}
        assert stable_methods, "a stable variant has stable methods"
        return
    stable = importlib.import_module(f"acp_schema.{variant.removesuffix('_unstable')}")
    for name, spec in mod.REQUESTS.items():
        if name not in stable.REQUESTS:
            assert spec.unstable, name


def test_v1_session_prompt_row() -> None:
    from acp_schema import v1

    spec = v1.METHODS["session/prompt"]
    assert (spec.side, spec.kind, spec.unstable, spec.attr) == ("agent", "request", False, "session_prompt")
    assert spec.params_type is v1.PromptRequest and spec.result_type is v1.PromptResponse
    assert v1.METHODS["session/update"].side == "client"
    assert v1.METHODS["session/update"].result_type is None
    assert v1.PROTOCOL_VERSION == 1


def test_package_records_the_schema_it_was_generated_from() -> None:
    pinned = json.loads((ROOT / "schema" / "PINNED.json").read_text())
    assert acp_schema.SCHEMA_PACKAGE_VERSION == pinned["version"]
    assert acp_schema.SCHEMA_PACKAGE == pinned["package"] == "@agentclientprotocol/sdk"
    from importlib.metadata import version

    assert version("acp-trio").startswith(pinned["version"] + ".")
    for variant, rel in FILES.items():
        mod = importlib.import_module(f"acp_schema.{variant}")
        assert mod.SCHEMA_VERSION == pinned["version"]
        assert mod.SCHEMA_SHA256 == pinned["files"][rel]

"""Every JSON-RPC example on the spec pages decodes with its method's type and re-encodes JSON-equal.

The corpus (``tests/golden/<variant>.json``) is extracted from agentclientprotocol/agent-client-protocol
by ``scripts/extract_spec_examples.py``.  A few examples contradict the pinned schema; they are listed
in ``CONTRADICTIONS`` with the error we expect, so a schema (or page) that fixes them shows up here.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from acp_trio import DecodeError, converter

GOLDEN = Path(__file__).parent / "golden"
VARIANTS = ("v1", "v1_unstable", "v2", "v2_unstable")

# (variant, page file name, line) -> the JSON path of the expected DecodeError, or "lossy" when the
# schema's leniency accepts the example but does not re-encode it identically.
CONTRADICTIONS: dict[tuple[str, str, int], str] = {
    # `"result": null` where the schema's response type is an object
    ("v1", "file-system.mdx", 110): "$",
    ("v1_unstable", "file-system.mdx", 112): "$",
    ("v1", "session-setup.mdx", 180): "$",
    # `current_mode_update` with `modeId`; the schema's field is `currentModeId`
    ("v1", "session-modes.mdx", 110): "$.update.currentModeId",
    ("v1_unstable", "session-modes.mdx", 110): "$.update.currentModeId",
    # v2 `initialize` examples without the now-required `info`
    ("v2", "authentication.mdx", 60): "$.info",
    ("v2", "authentication.mdx", 125): "$.info",
    ("v2", "extensibility.mdx", 128): "$.info",
    ("v2", "migration.mdx", 86): "$.info",  # a v1 example on the migration page
    ("v2", "migration.mdx", 123): "$.info",  # a v1 example on the migration page
    ("v2", "session-delete.mdx", 37): "$.info",
    ("v2", "session-setup.mdx", 426): "$.info",
    ("v2_unstable", "authentication.mdx", 60): "$.info",
    ("v2_unstable", "authentication.mdx", 125): "$.info",
    ("v2_unstable", "extensibility.mdx", 128): "$.info",
    ("v2_unstable", "session-delete.mdx", 37): "$.info",
    ("v2_unstable", "session-setup.mdx", 436): "$.info",
    # v2 `session/prompt` receipts without the required `messageId`
    ("v2", "migration.mdx", 243): "$.messageId",  # a v1 result on the migration page
    ("v2", "migration.mdx", 253): "$.messageId",
    ("v2", "prompt-lifecycle.mdx", 111): "$.messageId",
    ("v2_unstable", "prompt-lifecycle.mdx", 111): "$.messageId",
    # v2 `available_commands_update` whose commands lack the required `type`: the schema's
    # x-deserialize-skip-invalid-items drops them, so the re-encoding has an empty list
    ("v2", "slash-commands.mdx", 12): "lossy",
    ("v2_unstable", "slash-commands.mdx", 12): "lossy",
}


def _cases() -> list[Any]:
    out = []
    for variant in VARIANTS:
        data = json.loads((GOLDEN / f"{variant}.json").read_text(encoding="utf-8"))
        for m in data["messages"]:
            page = m["page"].rsplit("/", 1)[-1]
            out.append(pytest.param(variant, m, id=f"{variant}:{page}:{m['line']}:{m['kind']}"))
    return out


def _type_and_value(variant: str, m: dict[str, Any]) -> tuple[Any, Any] | None:
    mod = importlib.import_module(f"acp_schema.{variant}")
    msg = m["message"]
    if m["kind"] == "error":
        return mod.Error, msg["error"]
    table = mod.NOTIFICATIONS if m["kind"] == "notification" else mod.REQUESTS
    spec = table.get(m["method"])
    if spec is None:
        assert m["method"].startswith("_"), f"{m['method']} is not in the {variant} method tables"
        return None  # an extension method: its payload is the extension's own
    if m["kind"] in ("request", "notification"):
        return spec.params_type, msg.get("params")
    return spec.result_type, msg["result"]


@pytest.mark.parametrize(("variant", "m"), _cases())
def test_spec_example_round_trips_json_equal(variant: str, m: dict[str, Any]) -> None:
    tv = _type_and_value(variant, m)
    if tv is None:
        # extension methods pass through untyped; the envelope still is JSON-RPC 2.0
        assert m["message"]["jsonrpc"] == "2.0"
        return
    t, value = tv
    key = (variant, m["page"].rsplit("/", 1)[-1], m["line"])
    expected = CONTRADICTIONS.get(key)
    if expected is None:
        assert converter.unstructure(converter.structure(value, t)) == value
    elif expected == "lossy":
        assert converter.unstructure(converter.structure(value, t)) != value
    else:
        with pytest.raises(DecodeError) as info:
            converter.structure(value, t)
        assert info.value.json_path == expected


def test_corpus_covers_every_page_with_examples() -> None:
    for variant in VARIANTS:
        data = json.loads((GOLDEN / f"{variant}.json").read_text(encoding="utf-8"))
        assert len(data["messages"]) >= 60, variant
        pages = {m["page"] for m in data["messages"]}
        assert any(p.endswith("initialization.mdx") for p in pages)

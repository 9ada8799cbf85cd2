"""The compiled hooks' fast paths decide exactly as the full paths do.

Each compiled class hook has a fast path for the common shape (structure: the required keys and no
other, values of the right kind; unstructure: no optional field set, no extra fields) and falls
through to its full path for anything else.  Here a converter with the fast paths and one without
(``AcpConverter(fast_paths=False)``) decode the same inputs: every JSON-RPC example of the spec
pages (``tests/golden``), and each of them mutated one place at a time (a key removed, a value
replaced by another JSON kind, an unknown key added, at every depth).  They must return equal
objects that encode to the same bytes (keys in the same order), or raise the same ``DecodeError``
(message and JSON path).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_trio import DecodeError
from acp_trio._converter import AcpConverter

GOLDEN = Path(__file__).parent / "golden"
VARIANTS = ("v1", "v1_unstable", "v2", "v2_unstable")
REPLACEMENTS: tuple[Any, ...] = (None, 0, 1.5, True, "x", [], {}, {"type": "text"}, [{"type": "text", "text": "t"}])


def _examples(variant: str) -> list[tuple[Any, Any]]:
    mod = importlib.import_module(f"acp_schema.{variant}")
    out = []
    for m in json.loads((GOLDEN / f"{variant}.json").read_text(encoding="utf-8"))["messages"]:
        msg = m["message"]
        if m["kind"] == "error":
            out.append((mod.Error, msg["error"]))
            continue
        spec = (mod.NOTIFICATIONS if m["kind"] == "notification" else mod.REQUESTS).get(m["method"])
        if spec is None:  # an extension method
            continue
        if m["kind"] in ("request", "notification"):
            out.append((spec.params_type, msg.get("params")))
        else:
            out.append((spec.result_type, msg["result"]))
    return out


def _mutations(value: Any) -> Iterator[Any]:
    """``value`` changed in one place: at every object, each key removed, each value replaced by
    each of ``REPLACEMENTS``, an unknown key added; at every array, each item replaced likewise."""
    if isinstance(value, dict):
        yield {**value, "zzUnknown": 1}
        for key, item in value.items():
            yield {k: v for k, v in value.items() if k != key}
            for other in REPLACEMENTS:
                yield {**value, key: other}
            for changed in _mutations(item):
                yield {**value, key: changed}
    elif isinstance(value, list):
        for i, item in enumerate(value):
            for other in REPLACEMENTS:
                yield [*value[:i], other, *value[i + 1 :]]
            for changed in _mutations(item):
                yield [*value[:i], changed, *value[i + 1 :]]


def _outcome(conv: AcpConverter, value: Any, t: Any) -> tuple[str, Any]:
    try:
        obj = conv.structure(value, t)
    except DecodeError as exc:
        return "error", (str(exc), exc.json_path)
    return "value", obj


@pytest.mark.parametrize("variant", VARIANTS)
def test_fast_and_full_paths_agree_on_the_spec_examples_and_their_mutations(variant: str) -> None:
    fast, full = AcpConverter(), AcpConverter(fast_paths=False)
    examples = _examples(variant)
    assert len(examples) >= 50
    compared = decoded = 0
    for t, example in examples:
        for value in (example, *_mutations(example)):
            got, want = _outcome(fast, value, t), _outcome(full, value, t)
            assert got == want, (t, value)
            compared += 1
            if got[0] == "value":
                decoded += 1
                obj = got[1]
                assert orjson.dumps(fast.unstructure(obj)) == orjson.dumps(full.unstructure(obj)), (t, value)
    # the mutations reach both paths: many decode (fast path or full), many are rejected
    assert compared > 3_000
    assert 0.1 < decoded / compared < 0.9


def test_the_fast_paths_are_taken() -> None:
    """The common shapes go through the fast path (a failure there would only cost speed; this
    pins that the fast path exists and is used, by its code's line numbers)."""
    from acp_schema import v1

    conv = AcpConverter()
    wire = {
        "sessionId": "s",
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}},
    }
    structure = conv.structure_fn(v1.SessionNotification)
    unstructure = conv.unstructure_fn(v1.SessionNotification)
    lines: list[int] = []

    def trace(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_name in ("structure_SessionNotification", "unstructure_SessionNotification"):
            if event == "return":
                lines.append(frame.f_lineno)
        return trace

    import sys

    sys.settrace(trace)
    try:
        obj = structure(wire)
        out = unstructure(obj)
    finally:
        sys.settrace(None)
    assert out == wire
    # both returned from their fast path, which is the first lines of the function
    assert len(lines) == 2 and all(line < 20 for line in lines), lines

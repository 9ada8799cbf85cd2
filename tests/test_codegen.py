"""The generator: pinned inputs, asserted rewrites, deterministic output."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from codegen import pins
from codegen.generate import _diff, generate
from codegen.preprocess import SchemaShapeError, preprocess

ROOT = Path(__file__).resolve().parent.parent


def test_generation_refuses_a_schema_that_does_not_match_its_pin(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "schema", tmp_path / "schema")
    target = tmp_path / "schema" / "v1" / "schema.json"
    target.write_bytes(target.read_bytes() + b"\n")
    with pytest.raises(pins.PinMismatch, match="refusing to generate"):
        pins.verified_schema("v1", tmp_path / "schema")


def test_an_upstream_shape_change_fails_loudly_with_a_pointer() -> None:
    schema, sha = pins.verified_schema("v1")
    broken = copy.deepcopy(schema)
    broken["$defs"]["ContentBlock"]["oneOf"][0]["properties"]["type"]["const"] = 7
    broken["$defs"]["ContentBlock"]["oneOf"][1]["properties"]["kind"] = {"const": "image"}
    with pytest.raises(SchemaShapeError, match="/\\$defs/ContentBlock"):
        preprocess(broken, "v1", sha)


# On 3.11 only: the generator is a developer tool that nox runs on 3.11 alone (`regenerate`,
# `check_generated`: PY), so a 3.13 run covers no path anyone uses, and each generation costs ~9 s of
# CPU (datamodel-code-generator).  Both generations stay: the committed tree (another process's output)
# checks determinism across processes, the second one here state carried between calls in one process.
@pytest.mark.one_interpreter
def test_regenerating_twice_is_byte_identical_and_matches_the_committed_output(tmp_path: Path) -> None:
    generate(tmp_path / "a")
    generate(tmp_path / "b")
    assert _diff(tmp_path / "a" / "acp_schema", tmp_path / "b" / "acp_schema") == []
    assert _diff(tmp_path / "a" / "acp_schema", ROOT / "generated" / "acp_schema") == []


def test_pinned_json_names_package_version_and_every_file_hash() -> None:
    data = json.loads((ROOT / "schema" / "PINNED.json").read_text())
    assert data["package"] == "@agentclientprotocol/sdk"
    assert set(data["files"]) == set(pins.VARIANT_FILES.values())
    for rel, digest in data["files"].items():
        assert pins.sha256_of(ROOT / "schema" / rel) == digest

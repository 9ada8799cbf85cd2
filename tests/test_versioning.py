"""The version rule (README "Versioning", CHANGELOG.md): acp-trio's version is the pinned schema
package's version and a fourth number counting our releases on it; the changelog's newest entry is
that version."""

from __future__ import annotations

import json
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import acp_schema

ROOT = Path(__file__).resolve().parents[1]


def _project_version() -> str:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    value = config["project"]["version"]
    assert isinstance(value, str)
    return value


def test_the_version_is_the_pinned_schema_package_version_and_a_release_count() -> None:
    pinned = json.loads((ROOT / "schema" / "PINNED.json").read_text(encoding="utf-8"))["version"]
    ours = _project_version()
    match = re.fullmatch(r"(\d+\.\d+\.\d+)\.(\d+)", ours)
    assert match is not None, f"version {ours!r} is not SCHEMA.N (four numbers)"
    assert match.group(1) == pinned, f"version {ours} is not on the pinned schema package {pinned}"
    assert acp_schema.SCHEMA_PACKAGE_VERSION == pinned
    assert version("acp-trio") == ours  # what is installed is this checkout's


def test_the_changelogs_newest_entry_is_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    entries = re.findall(r"^## (\S+)", text, re.M)
    assert entries, "CHANGELOG.md has no '## VERSION' entry"
    assert entries[0] == _project_version()
    assert len(entries) == len(set(entries)), "a version has two entries"


def test_update_schema_opens_the_changelog_entry_of_the_new_version(tmp_path: Path) -> None:
    from codegen.update_schema import add_changelog_entry

    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text("# Changelog\n\nThe rule.\n\n## 2.4.0.0 (unreleased)\n\nThe first.\n", encoding="utf-8")
    add_changelog_entry("2.5.0.0", "2.5.0", changelog)
    add_changelog_entry("2.5.0.0", "2.5.0", changelog)  # once
    text = changelog.read_text(encoding="utf-8")
    assert re.findall(r"^## (\S+)", text, re.M) == ["2.5.0.0", "2.4.0.0"]
    assert "Regenerated from `@agentclientprotocol/sdk` 2.5.0." in text
    assert text.startswith("# Changelog\n\nThe rule.\n\n## 2.5.0.0 (unreleased)\n")

"""Pinned upstream schemas: where they came from and their sha256.

Contract: ``load_pins`` reads ``schema/PINNED.json``; ``verified_schema`` returns a schema's parsed
JSON only when its bytes hash to the pinned sha256, otherwise raises ``PinMismatch``.  This module
does not download anything (``codegen.update_schema`` does).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "schema"
PINNED = SCHEMA_DIR / "PINNED.json"

#: variant name -> path of its schema relative to ``schema/`` (and to ``package/schema/`` in the npm tarball)
VARIANT_FILES: dict[str, str] = {
    "v1": "v1/schema.json",
    "v1_unstable": "v1/schema.unstable.json",
    "v2": "v2/schema.json",
    "v2_unstable": "v2/schema.unstable.json",
}
#: the stable counterpart of each variant (used to mark unstable items)
STABLE_OF: dict[str, str | None] = {"v1": None, "v1_unstable": "v1", "v2": None, "v2_unstable": "v2"}


class PinMismatch(RuntimeError):
    """A schema file does not match the sha256 recorded in ``schema/PINNED.json``."""


@dataclass(frozen=True)
class Pins:
    package: str
    version: str
    files: dict[str, str]  # relative path -> sha256


def load_pins(schema_dir: Path = SCHEMA_DIR) -> Pins:
    data = json.loads((schema_dir / "PINNED.json").read_text(encoding="utf-8"))
    return Pins(package=data["package"], version=data["version"], files=dict(data["files"]))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verified_schema(variant: str, schema_dir: Path = SCHEMA_DIR) -> tuple[dict[str, Any], str]:
    """Return ``(schema, sha256)`` for ``variant``; raise ``PinMismatch`` when the file was altered."""
    pins = load_pins(schema_dir)
    rel = VARIANT_FILES[variant]
    path = schema_dir / rel
    actual = sha256_of(path)
    expected = pins.files.get(rel)
    if expected != actual:
        raise PinMismatch(
            f"{path} has sha256 {actual}, but schema/PINNED.json pins {expected!r}; "
            "refusing to generate (run `nox -s update_schema -- <version>` to move the pin)"
        )
    return json.loads(path.read_text(encoding="utf-8")), actual


def write_pins(package: str, version: str, schema_dir: Path = SCHEMA_DIR) -> Pins:
    files = {rel: sha256_of(schema_dir / rel) for rel in VARIANT_FILES.values()}
    data = {"package": package, "version": version, "files": files}
    (schema_dir / "PINNED.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return Pins(package, version, files)

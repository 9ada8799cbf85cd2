"""``python -m codegen.update_schema VERSION``: move the pin to another `@agentclientprotocol/sdk` release.

Contract: fetches the named version with ``npm pack`` (the npm registry, which verifies the
tarball's integrity), checks the tarball's sha512 against ``npm view`` once more, copies
``package/schema/v1/*.json`` and ``package/schema/v2/*.json`` into ``schema/``, rewrites
``schema/PINNED.json`` and the project version (``<VERSION>.0``), then regenerates.  A schema
whose shape the preprocessor does not know makes the regeneration fail loudly; the new files stay
in place so the maintainer can extend ``codegen.preprocess`` / ``codegen.naming``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from .generate import GENERATED, generate
from .pins import ROOT, SCHEMA_DIR, VARIANT_FILES, write_pins

PACKAGE = "@agentclientprotocol/sdk"


def fetch(version: str, dest: Path) -> Path:
    if not re.fullmatch(r"\d+\.\d+\.\d+([-.+][0-9A-Za-z.]+)?", version):
        raise SystemExit(f"not a version: {version!r}")
    out = subprocess.run(
        ["npm", "pack", f"{PACKAGE}@{version}", "--json", "--pack-destination", str(dest)],
        check=True,
        capture_output=True,
        text=True,
    )
    info = json.loads(out.stdout)[0]
    tarball = dest / info["filename"]
    meta = subprocess.run(
        ["npm", "view", f"{PACKAGE}@{version}", "dist.integrity"], check=True, capture_output=True, text=True
    )
    algo, _, b64 = meta.stdout.strip().partition("-")
    digest = base64.b64encode(hashlib.new(algo, tarball.read_bytes()).digest()).decode()
    if digest != b64:
        raise SystemExit(f"{tarball.name}: {algo} {digest} does not match the registry's {b64}")
    return tarball


def install(tarball: Path, schema_dir: Path = SCHEMA_DIR) -> None:
    with tarfile.open(tarball) as tar:
        for rel in VARIANT_FILES.values():
            member = tar.getmember(f"package/schema/{rel}")
            src = tar.extractfile(member)
            if src is None:
                raise SystemExit(f"{tarball.name} has no file package/schema/{rel}")
            data = src.read()
            json.loads(data)  # a schema must at least be JSON
            (schema_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (schema_dir / rel).write_bytes(data)


def set_project_version(version: str) -> None:
    pyproject = ROOT / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    new, n = re.subn(r'(?m)^version = "[^"]*"$', f'version = "{version}.0"', text, count=1)
    if n != 1:
        raise SystemExit("pyproject.toml has no `version = ...` line")
    pyproject.write_text(new, encoding="utf-8")
    add_changelog_entry(f"{version}.0", version)


def add_changelog_entry(release: str, schema_version: str, changelog: Path | None = None) -> None:
    """Open CHANGELOG.md's entry for ``release`` above the others (tests/test_versioning.py wants the
    newest entry to be the project's version); an entry for it already there is left as it is."""
    path = changelog or ROOT / "CHANGELOG.md"
    text = path.read_text(encoding="utf-8")
    if re.search(rf"(?m)^## {re.escape(release)}\b", text):
        return
    entry = f"## {release} (unreleased)\n\nRegenerated from `{PACKAGE}` {schema_version}.\n\n"
    first = re.search(r"(?m)^## ", text)
    at = first.start() if first else len(text)
    path.write_text(text[:at] + entry + text[at:], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m codegen.update_schema", description=__doc__)
    ap.add_argument("version", help=f"the {PACKAGE} version to pin, e.g. 2.5.0")
    args = ap.parse_args(argv)
    if shutil.which("npm") is None:
        raise SystemExit("npm is needed to fetch the package from the npm registry")
    with tempfile.TemporaryDirectory() as tmp:
        tarball = fetch(args.version, Path(tmp))
        install(tarball)
    pins = write_pins(PACKAGE, args.version)
    set_project_version(args.version)
    print(f"pinned {PACKAGE} {args.version}:")
    for rel, digest in pins.files.items():
        print(f"  {rel}  {digest}")
    generate(GENERATED)
    print(f"regenerated {GENERATED / 'acp_schema'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

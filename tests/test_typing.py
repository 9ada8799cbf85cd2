"""Static types: `mypy --strict` accepts correct use of the generated classes and rejects wrong use."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent / "typing"
ROOT = HERE.parent.parent
# One cache for this module's runs, new each session: the second run reuses what the first learnt of
# acp_schema (most of mypy's time) instead of reading it again; nothing carries over between sessions.
CACHE = tempfile.mkdtemp(prefix="acp-trio-mypy-cache-")


def mypy(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", CACHE, "--show-error-codes", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def test_mypy_strict_accepts_correct_usage() -> None:
    result = mypy(HERE / "accept.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_rejects_wrong_keyword_wrong_type_and_missing_fields() -> None:
    source = (HERE / "reject.py").read_text().splitlines()
    expected = {i + 1: m.group(1) for i, line in enumerate(source) if (m := re.search(r"# E: ([\w-]+)", line))}
    result = mypy(HERE / "reject.py")
    assert result.returncode == 1, result.stdout + result.stderr
    found: dict[int, set[str]] = {}
    for line in result.stdout.splitlines():
        m = re.match(r".*reject\.py:(\d+): error: .*\[([\w-]+)\]$", line)
        if m:
            found.setdefault(int(m.group(1)), set()).add(m.group(2))
    for lineno, code in expected.items():
        assert code in found.get(lineno, set()), f"line {lineno}: expected [{code}], mypy said {found.get(lineno)}"
    assert set(found) == set(expected), result.stdout

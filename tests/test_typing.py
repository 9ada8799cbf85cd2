"""Static types: `mypy --strict` accepts correct use of the generated classes and rejects wrong use."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# mypy's verdict on the generated classes, not the interpreter's: the lint session runs this module
# right after its own mypy --strict over the whole tree, with that run's cache (ACP_TYPING_MYPY_CACHE),
# and the tests sessions leave it out (noxfile.py's TYPING_TESTS).
pytestmark = pytest.mark.one_interpreter

HERE = Path(__file__).parent / "typing"
ROOT = HERE.parent.parent


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mypy cache of this module's runs: ``ACP_TYPING_MYPY_CACHE`` when set (the lint session's, where
    mypy has just checked acp_schema: most of mypy's time), else a new one under pytest's temporary
    directory (which pytest prunes), where the second run reuses what the first learnt."""
    given = os.environ.get("ACP_TYPING_MYPY_CACHE")
    return Path(given) if given else tmp_path_factory.mktemp("mypy-cache")


def mypy(path: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), "--show-error-codes", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def test_mypy_strict_accepts_correct_usage(cache: Path) -> None:
    result = mypy(HERE / "accept.py", cache)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_rejects_wrong_keyword_wrong_type_and_missing_fields(cache: Path) -> None:
    source = (HERE / "reject.py").read_text().splitlines()
    expected = {i + 1: m.group(1) for i, line in enumerate(source) if (m := re.search(r"# E: ([\w-]+)", line))}
    result = mypy(HERE / "reject.py", cache)
    assert result.returncode == 1, result.stdout + result.stderr
    found: dict[int, set[str]] = {}
    for line in result.stdout.splitlines():
        m = re.match(r".*reject\.py:(\d+): error: .*\[([\w-]+)\]$", line)
        if m:
            found.setdefault(int(m.group(1)), set()).add(m.group(2))
    for lineno, code in expected.items():
        assert code in found.get(lineno, set()), f"line {lineno}: expected [{code}], mypy said {found.get(lineno)}"
    assert set(found) == set(expected), result.stdout

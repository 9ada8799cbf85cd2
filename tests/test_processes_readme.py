"""The README's "Write an agent" and "Write a client" examples run as written, in real processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_block(section: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {section}\n")
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert match is not None, f"no python block under {section!r}"
    return match.group(1)


def test_readme_client_example_drives_the_readme_agent_example(tmp_path: Path) -> None:
    (tmp_path / "my_agent.py").write_text(python_block("Write an agent"), encoding="utf-8")
    (tmp_path / "my_client.py").write_text(python_block("Write a client"), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "my_client.py"], capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "tool Read notes.txt: completed",
        "agent: notes.txt starts with: buy milk",
        "stop reason: end_turn",
    ]


def test_readme_test_kit_example_passes_under_pytest(tmp_path: Path) -> None:
    """The "Test your agent or client" example, run by pytest in a process as a user runs it: no
    ``pytest.ini`` (acp_trio.testing has pytest-trio run its async tests without ``trio_mode``)."""
    (tmp_path / "my_agent.py").write_text(python_block("Write an agent"), encoding="utf-8")
    (tmp_path / "test_my_agent.py").write_text(python_block("Run it, check it, test it"), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "test_my_agent.py"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # 32 conformance checks (10 skipped: what NotesAgent does not offer, no --script, no process) and two tests
    assert "24 passed, 10 skipped" in result.stdout, result.stdout
    assert "session.load: the agent does not advertise loadSession" in result.stdout

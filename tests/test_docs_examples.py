"""The documentation site's examples: the guides carry the README's examples unchanged (the README's
own tests run those), and the quick start's agent and client run as written, in real processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "docs" / "site"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def blocks(path: Path, lang: str = "python") -> list[str]:
    return [code for kind, code in BLOCK.findall(path.read_text(encoding="utf-8")) if kind == lang]


def readme_block(section: str, n: int = 0) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"## {section}\n")
    return [code for kind, code in BLOCK.findall(text[start:]) if kind == "python"][n]


@pytest.mark.parametrize(
    ("guide", "n", "section", "m"),
    [
        ("guides/agent.md", 0, "Write an agent", 0),
        ("guides/client.md", 0, "Write a client", 0),
        ("guides/conformance.md", 0, "Run it, check it, test it", 0),
    ],
)
def test_a_guide_example_is_the_readme_one(guide: str, n: int, section: str, m: int) -> None:
    assert blocks(SITE / guide)[n] == readme_block(section, m)


def test_the_quick_start_agent_and_client_run(tmp_path: Path) -> None:
    agent, client, types = blocks(SITE / "quickstart.md")
    (tmp_path / "hello_agent.py").write_text(agent, encoding="utf-8")
    (tmp_path / "client.py").write_text(client, encoding="utf-8")
    (tmp_path / "types_example.py").write_text(types, encoding="utf-8")
    outputs = []
    for script in ("client.py", "types_example.py"):
        result = subprocess.run(
            [sys.executable, script], capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False
        )
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout.splitlines())
    assert outputs == [["Hello!"], []]

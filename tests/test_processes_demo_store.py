"""``python -m acp_trio.demo --store PATH`` in real processes: a second run loads and prints the first conversation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the stdio transport is POSIX-only")

DEMO = [sys.executable, "-m", "acp_trio.demo"]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(DEMO + args, capture_output=True, text=True, timeout=60, cwd=cwd, check=False)


def test_a_second_run_with_the_same_store_loads_prints_and_continues_the_first_conversation(tmp_path: Path) -> None:
    store = tmp_path / "sessions.db"
    first = run(["--store", str(store)], tmp_path)
    assert first.returncode == 0, first.stderr
    assert "loading session" not in first.stdout
    session = next(line.split()[1] for line in first.stdout.splitlines() if line.startswith("session "))
    assert "[turn ended: end_turn]" in first.stdout

    second = run(["--store", str(store), "--prompt", "Once more, please."], tmp_path)
    assert second.returncode == 0, second.stderr
    out = second.stdout
    assert f"loading session {session} (Please summarize notes.txt into summary.txt.," in out
    replay, _, continued = out.partition("[end of the stored conversation]\n")
    # the stored conversation, printed as it is replayed: the user's prompt, the agent's text, its tool calls
    assert "you (earlier): Please summarize notes.txt into summary.txt.\n" in replay
    assert "agent: Let me read your notes and write a summary." in replay
    assert "[tool call_read] completed 4 non-empty lines" in replay
    assert "[tool call_count] completed [terminal term_1] 18 words" in replay
    assert "[permission]" not in replay and "[fs]" not in replay  # replayed, not run again
    # then the new turn, in the same session, in this run's directory
    assert continued.startswith("you: Once more, please.\n")
    assert "[permission] Read notes.txt: choosing 'Allow' (allow_once)" in continued
    assert "[turn ended: end_turn]" in continued
    assert "session " not in continued.split("\n", 1)[0]

    third = run(["--store", str(store), "--prompt", "Third."], tmp_path)
    assert third.returncode == 0, third.stderr
    assert third.stdout.count("you (earlier): ") == 2  # both earlier prompts come back


def test_store_is_refused_with_protocol_2_or_another_agent(tmp_path: Path) -> None:
    for args in (["--protocol", "2"], ["--agent", "--", *DEMO, "--serve-agent"]):
        result = run(["--store", str(tmp_path / "s.db"), *args], tmp_path)
        assert result.returncode == 2
        assert "--store is for the example agent in protocol version 1" in result.stderr

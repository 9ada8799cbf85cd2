"""``python -m acp_trio.demo --store PATH`` in real processes: a second run loads and prints the first conversation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="the stdio transport is POSIX-only"),
    pytest.mark.one_interpreter,  # the demo's command line in processes (the store itself: test_neutral_store)
]

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


def test_a_session_stored_on_protocol_2_is_resumed_on_2_then_loaded_on_1(tmp_path: Path) -> None:
    """One store, both versions: a v2 run's session comes back to a second v2 run (``session/resume``
    with ``replayFrom`` start, printed) and then to a v1 run (``session/load``), each continuing it."""
    store = tmp_path / "sessions.db"
    first = run(["--store", str(store), "--protocol", "2"], tmp_path)
    assert first.returncode == 0, first.stderr
    session = next(line.split()[1] for line in first.stdout.splitlines() if line.startswith("session "))
    assert "[turn ended: end_turn]" in first.stdout

    second = run(["--store", str(store), "--protocol", "2", "--prompt", "Once more, please."], tmp_path)
    assert second.returncode == 0, second.stderr
    assert f"resuming session {session} (Please summarize notes.txt into summary.txt.," in second.stdout
    replay, _, continued = second.stdout.partition("[end of the stored conversation]\n")
    assert "you (earlier): Please summarize notes.txt into summary.txt.\n" in replay
    assert "[tool call_read] completed 4 non-empty lines" in replay
    assert "[permission]" not in replay and "[turn ended" not in replay  # replayed, not run again
    assert continued.startswith("you: Once more, please.\n")
    assert "[turn ended: end_turn]" in continued

    third = run(["--store", str(store), "--prompt", "Third, on protocol 1."], tmp_path)
    assert third.returncode == 0, third.stderr
    assert f"loading session {session} (" in third.stdout
    assert third.stdout.count("you (earlier): ") == 2  # both v2 prompts come back on v1
    assert "[turn ended: end_turn]" in third.stdout.partition("[end of the stored conversation]")[2]


def test_store_is_refused_with_another_agent(tmp_path: Path) -> None:
    result = run(["--store", str(tmp_path / "s.db"), "--agent", "--", *DEMO, "--serve-agent"], tmp_path)
    assert result.returncode == 2
    assert "--store is for the example agent" in result.stderr

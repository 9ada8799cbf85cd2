"""The demo client facing an agent with a bug: the agent answers -32603 ("Internal error") with no
details (acp-trio agents keep the exception in their log, ``RequestError``'s docs), so the demo
shows the end of the traceback the agent wrote to its stderr and says how to see the rest (``-v``).
Also how an error's ``data`` is shown when an agent sends it (``acp_trio.demo.client.error_text``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from acp_trio import INTERNAL_ERROR, METHOD_NOT_FOUND, RequestError
from acp_trio.demo.client import error_lines, error_text

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the stdio transport is POSIX-only")

DEMO = [sys.executable, "-m", "acp_trio.demo"]
BUGGY = str(Path(__file__).parent / "agents" / "buggy_agent.py")
MORE = "run again with -v to see all of the agent's stderr (its traceback) and the runtime's log"


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(DEMO + args, capture_output=True, text=True, timeout=60, cwd=cwd, check=False)


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_a_bug_in_the_agent_shows_the_end_of_its_traceback_and_how_to_see_the_rest(
    tmp_path: Path, protocol: str
) -> None:
    result = run(
        ["--protocol", protocol, "--cwd", str(tmp_path), "--agent", "--", sys.executable, BUGGY, protocol], tmp_path
    )
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert f"connected to Buggy notes, protocol version {protocol}\n" in out  # its agent_info, in v1 and v2
    said = (
        "error: Internal error (JSON-RPC error -32603)\n"
        if protocol == "1"
        else "[turn ended: error: Internal error (-32603)]\n"
    )
    tail = out[out.index(said) + len(said) :].splitlines()
    assert (
        tail[0]
        == "the agent failed (a bug or an unexpected condition on its side) and sent no details; the end of its stderr:"
    )
    method = (
        "handler for 'session/prompt' (request id 2) raised"
        if protocol == "1"
        else "prompt turn of session 's1' raised"
    )
    assert tail[1].startswith("  | ") and tail[1].endswith(method)  # the runtime's log line names what failed
    assert tail[2] == "  | ..."
    assert tail[3].startswith('  |   File "') and "buggy_agent.py" in tail[3]  # the agent's own frame
    assert tail[4] == '  |     raise RuntimeError("the notes file is gone")'
    assert tail[5] == "  | RuntimeError: the notes file is gone"
    assert tail[6:] == [MORE]
    assert "Traceback" not in result.stderr  # without -v the agent's stderr is not printed whole


def test_with_v_the_agents_stderr_is_printed_whole_and_the_error_points_there(tmp_path: Path) -> None:
    result = run(["-v", "--cwd", str(tmp_path), "--agent", "--", sys.executable, BUGGY], tmp_path)
    assert result.returncode == 1
    assert "acp_trio.agent.stderr: Traceback (most recent call last):" in result.stderr
    assert "acp_trio.agent.stderr: RuntimeError: the notes file is gone" in result.stderr
    said = "error: Internal error (JSON-RPC error -32603)\n"
    assert result.stdout.endswith(
        said + "the agent failed (a bug or an unexpected condition on its side) and sent no details: "
        "its stderr above says more\n"
    )


def test_an_errors_data_is_shown_as_text_or_json_with_control_characters_escaped() -> None:
    assert error_text(RequestError(INTERNAL_ERROR, "Internal error")) == "Internal error (JSON-RPC error -32603)"
    for data in ("quota exceeded", {"details": "quota exceeded"}, {"message": "quota exceeded"}):
        text = error_text(RequestError(INTERNAL_ERROR, "Internal error", data))
        assert text == "Internal error (JSON-RPC error -32603): quota exceeded"
    text = error_text(RequestError.method_not_found("session/new"))
    assert text == 'Method not found (JSON-RPC error -32601): {"method": "session/new"}'
    text = error_text(RequestError(INTERNAL_ERROR, "Internal\x1b[2J error", {"details": "gone\r\nok", "at": 1}))
    assert text == 'Internal\\x1b[2J error (JSON-RPC error -32603): {"details": "gone\\r\\nok", "at": 1}'
    assert error_text(TimeoutError("initialize took too long")) == "initialize took too long"


def test_how_to_see_more_depends_on_where_the_agent_runs_and_what_it_said() -> None:
    bug = RequestError.internal_error()
    said = RequestError.internal_error({"details": "quota exceeded"})
    failed = "the agent failed (a bug or an unexpected condition on its side)"
    assert error_lines(bug, None) == [f"{failed} and sent no details: its server's log says more"]  # remote
    assert error_lines(said, None) == [f"{failed} and said what failed: its server's log says more"]
    assert error_lines(said, ["unrelated"]) == [MORE]  # the agent explained itself: only where to look
    assert error_lines(bug, []) == [f"{failed} and sent no details (and wrote nothing to stderr)", MORE]
    assert error_lines(bug, ["a", "b\x1b"]) == [
        f"{failed} and sent no details; the end of its stderr:",
        "  | a",
        "  | b\\x1b",
        MORE,
    ]
    assert error_lines(RequestError(METHOD_NOT_FOUND, "Method not found"), ["x"]) == []
    assert error_lines(ConnectionError("gone"), ["x"]) == []

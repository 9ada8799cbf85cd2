"""The demo client's ``--mcp-server 'NAME=COMMAND ARGS...'`` (a stdio MCP server offered in
``session/new``): parsed as a shell would, the command found on ``PATH`` and made absolute (v2's
``StdioMcpServer.command`` is an absolute path), a bad value a usage error naming it.  A turn that
uses it: ``tests/test_pydantic_ai_interop.py`` (the session's MCP server called, both versions)."""

from __future__ import annotations

import os
import sys

import pytest

from acp_trio.demo.__main__ import main, mcp_server


def test_a_server_is_its_name_absolute_command_and_shell_split_arguments() -> None:
    name, command, args = mcp_server(f"notes = {os.path.basename(sys.executable)} -m 'my server' --flag")
    assert name == "notes"
    assert os.path.isabs(command) and os.path.basename(command) == os.path.basename(sys.executable)
    assert args == ("-m", "my server", "--flag")


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("notes", "give NAME=COMMAND [ARGS...]"),
        ("=python", "give NAME=COMMAND [ARGS...]"),
        ("notes=", "give NAME=COMMAND [ARGS...]"),
        ("notes=no-such-command-here --x", "command 'no-such-command-here' not found"),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_it(value: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--mcp-server", value, "--agent", "--", "true"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"--mcp-server {value!r}: {said}" in error

"""The example LLM agent (``python -m examples.llm_agent``) without its extras: a provider whose SDK
(the ``llm`` extra) cannot be imported is one line on stderr naming the missing module, the extra
and the command, and exit status 2; a session with MCP servers but no ``mcp`` SDK (the ``mcp`` extra)
opens without them, and the agent's log says why and what to install.

A directory first on ``PYTHONPATH`` holds a package of the blocked name whose import raises
``ModuleNotFoundError``, as an uninstalled one does.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from acp_schema import v1
from acp_trio import spawn_agent

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the stdio transport is POSIX-only")

ROOT = Path(__file__).resolve().parent.parent
INSTALL = "pip install -e '.[llm]' from the repository root"


def blocking(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment in which importing each of ``modules`` fails as if it were not installed."""
    for module in modules:
        package = tmp_path / "blocked" / module
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            f"raise ModuleNotFoundError({f'No module named {module!r}'!r}, name={module!r})\n", encoding="utf-8"
        )
    return {**os.environ, "PYTHONPATH": str(tmp_path / "blocked")}


@pytest.mark.parametrize(
    ("provider", "blocked", "needs"),
    [
        ("openai", "openai", "the official openai SDK"),
        ("anthropic", "anthropic", "the official anthropic SDK"),
        ("openai", "httpx2", "the official openai SDK and its dependencies (no module named 'httpx2')"),
    ],
)
def test_a_provider_without_its_sdk_says_what_to_install_in_one_line_and_exits_2(
    tmp_path: Path, provider: str, blocked: str, needs: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "examples.llm_agent", "--provider", provider, "--model", "m"],
        env=blocking(tmp_path, blocked),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"error: the {provider} provider needs {needs}, the llm extra: {INSTALL}, or pip install {provider}\n"
    )
    assert result.stdout == ""


@pytest.mark.one_interpreter  # which SDKs a process imports: packaging, not the interpreter
def test_the_other_providers_sdk_is_not_needed(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "examples.llm_agent", "--provider", "anthropic", "--model", "m"],
        env={**blocking(tmp_path, "openai"), "ANTHROPIC_API_KEY": "k"},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,  # end of input: the agent serves nothing and exits
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr.lower()


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def test_a_session_with_mcp_servers_opens_without_them_when_the_mcp_sdk_is_missing(tmp_path: Path) -> None:
    stderr = logging.Logger("llm-agent stderr")  # in no hierarchy: its lines come only to `lines`
    lines = Lines()
    stderr.addHandler(lines)
    server = v1.McpServerStdio(name="files", command=sys.executable, args=["-c", "pass"], env=[])
    args = ["-m", "examples.llm_agent", "--provider", "openai", "--model", "m"]
    env = {**blocking(tmp_path, "mcp"), "OPENAI_API_KEY": "k"}
    with trio.fail_after(60):
        async with spawn_agent(sys.executable, args, client=object(), env=env, cwd=ROOT, stderr_logger=stderr) as conn:
            await conn.agent.initialize(v1.InitializeRequest(protocol_version=1))
            session = await conn.agent.session_new(v1.NewSessionRequest(cwd=str(tmp_path), mcp_servers=[server]))
    assert session.session_id.startswith("sess_")
    said = [line for line in lines.lines if "MCP server" in line]
    assert len(said) == 1, lines.lines
    assert said[0].endswith(
        f"session {session.session_id}: its 1 MCP server(s) are not used: they need the official mcp SDK, "
        "the mcp extra: pip install -e '.[mcp]' from the repository root, or pip install mcp"
    )

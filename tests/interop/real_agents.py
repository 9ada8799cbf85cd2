"""Third-party ACP agents for the conformance runs: pinned versions, cached installs, offline environments.

The agents (see :data:`AGENTS`): acp-trio's demo agent, the TypeScript SDK agents
(``ts_echo_agent.mjs`` and the interop tests' ``ts_v2_agent.mjs``, ``@agentclientprotocol/sdk``
:data:`TS_SDK_VERSION`), the Python SDK agent (``py_echo_agent.py``, ``agent-client-protocol``
:data:`PY_SDK_VERSION`), and two real
agents from npm, ``@agentclientprotocol/claude-agent-acp`` :data:`CLAUDE_ACP_VERSION` (Claude Code
through the Claude Agent SDK) and ``@agentclientprotocol/codex-acp`` :data:`CODEX_ACP_VERSION`
(the Codex app server, ``@openai/codex`` :data:`CODEX_VERSION`, a platform binary).

Installs go to ``${ACP_TRIO_CACHE:-~/.cache/acp-trio}/interop/<dir>``, the directories and marker
files ``tests/test_interop.py`` uses (a marker written after a successful install, a file lock
against concurrent runs), so either one reuses the other's install.  A missing tool or a failed
install raises :class:`Unavailable`, whose message says what to do.

:func:`agent_environment` gives a real agent a throwaway ``HOME`` (and ``CLAUDE_CONFIG_DIR`` /
``CODEX_HOME``), a dummy key, its model API pointed at the loopback model server
(``tests/interop/model_server.py``), and telemetry, error reporting and update checks switched
off, so it needs no network and no account.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

INTEROP = Path(__file__).parent
ROOT = INTEROP.parent.parent

TS_SDK_VERSION = "2.4.0"
PY_SDK_VERSION = "0.12.1"
CLAUDE_ACP_VERSION = "0.101.0"
CODEX_ACP_VERSION = "2.6.0"
CODEX_VERSION = "0.166.0"  # what codex-acp 2.6.0's "^0.166.0" resolves to (a 0.x caret: 0.166.*)
"""Pinned; ``npm view @agentclientprotocol/<name> version`` names the newest."""

INSTALL_TIMEOUT = 600.0
"""Seconds one install step may take (the real agents are about 840 MB, two platform binaries)."""


class Unavailable(Exception):
    """An agent cannot run here: a tool is missing or its install failed (the message says which)."""


def cache_dir() -> Path:
    root = os.environ.get("ACP_TRIO_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "acp-trio")
    return Path(root) / "interop"


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def installed(
    target: Path,
    what: str,
    check: Path,
    steps: list[list[str]],
    prepare: dict[str, str],
    timeout: float = INSTALL_TIMEOUT,
) -> Path:
    """Install into ``target`` unless its marker says ``what`` is there already; return ``target``
    (the one installer of the interop tests: ``tests/test_interop*.py`` use it too).

    Raises :class:`Unavailable` when a step fails or takes over ``timeout`` seconds.
    """
    marker = target / ".acp-trio-installed"

    def ready() -> bool:
        return marker.is_file() and marker.read_text() == what and check.exists()

    if ready():
        return target
    with _locked(target.parent):
        if ready():  # another run installed it while we waited for the lock
            return target
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name, text in prepare.items():
            (target / name).write_text(text)
        for command in steps:
            try:
                proc = subprocess.run(command, cwd=target, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise Unavailable(f"installing into {target}: {' '.join(command)} failed: {exc}") from exc
            if proc.returncode != 0:
                raise Unavailable(
                    f"installing into {target}: {' '.join(command)} exited {proc.returncode}\n"
                    f"--- stderr ---\n{proc.stderr[-3000:]}"
                )
        if not check.exists():
            raise Unavailable(f"installing into {target}: {check} is missing after the install")
        marker.write_text(what)
    return target


def _npm() -> str:
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        raise Unavailable("node and npm are not on PATH: install Node.js (20 or later) to run the npm agents")
    return npm


_PACKAGE_JSON = '{"name": "acp-trio-interop", "private": true}\n'  # so npm does not walk up into a parent project


def install_ts_sdk() -> Path:
    """The npm directory holding ``@agentclientprotocol/sdk`` (for ``ACP_INTEROP_NPM_DIR``)."""
    npm = _npm()
    target = cache_dir() / f"npm-{TS_SDK_VERSION}"
    package = f"@agentclientprotocol/sdk@{TS_SDK_VERSION}"
    return installed(
        target,
        package + "\n",  # the marker tests/test_interop.py writes
        target / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json",
        [[npm, "install", "--no-audit", "--no-fund", "--no-save", package, "zod@^3.25.76"]],
        {"package.json": _PACKAGE_JSON},
    )


def install_py_sdk() -> Path:
    """The Python of a virtual environment holding ``agent-client-protocol`` (imported as ``acp``)."""
    target = cache_dir() / f"py-acp-{PY_SDK_VERSION}"
    python = target / "bin" / "python"
    spec = f"agent-client-protocol=={PY_SDK_VERSION}"
    installed(
        target,
        spec + "\n",
        python,
        [
            [sys.executable, "-m", "venv", str(target)],
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", spec],
        ],
        {},
    )
    return python


REAL_PACKAGES = (
    f"@agentclientprotocol/claude-agent-acp@{CLAUDE_ACP_VERSION}",
    f"@agentclientprotocol/codex-acp@{CODEX_ACP_VERSION}",
    f"@openai/codex@{CODEX_VERSION}",
)


def install_real_agents(timeout: float = INSTALL_TIMEOUT) -> Path:
    """The npm directory holding claude-agent-acp and codex-acp (and their platform binaries).

    ``timeout``: seconds the ``npm install`` may take (about 15 s from a near registry).
    """
    npm = _npm()
    target = cache_dir() / f"npm-real-claude-agent-acp-{CLAUDE_ACP_VERSION}-codex-acp-{CODEX_ACP_VERSION}"
    modules = target / "node_modules"
    return installed(
        target,
        "".join(p + "\n" for p in REAL_PACKAGES),
        modules / "@agentclientprotocol" / "codex-acp" / "dist" / "index.js",
        [[npm, "install", "--no-audit", "--no-fund", "--no-save", *REAL_PACKAGES]],
        {"package.json": _PACKAGE_JSON},
        timeout,
    )


# -- environments --------------------------------------------------------------------------------

OFFLINE_ENV = {
    # Claude Code: no telemetry, error reports, update checks or other nonessential traffic
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    # codex-acp: no browser (ChatGPT) login method
    "NO_BROWSER": "1",
    # npm / node
    "NO_UPDATE_NOTIFIER": "1",
    "NPM_CONFIG_UPDATE_NOTIFIER": "false",
}


def _codex_config(model_url: str) -> str:
    return textwrap.dedent(
        f"""\
        # written by tests/interop/real_agents.py: the Responses API on the loopback model server
        model = "loopback-model"
        model_provider = "loopback"
        check_for_update_on_startup = false

        [model_providers.loopback]
        name = "loopback"
        base_url = "{model_url}/v1"
        wire_api = "responses"
        env_key = "LOOPBACK_API_KEY"
        requires_openai_auth = false

        [analytics]
        enabled = false
        """
    )


def agent_environment(state: Path, model_url: str) -> dict[str, str]:
    """Environment variables (to add to ``os.environ``) for one run of any agent, offline.

    ``state``: a fresh directory; it gets ``home/`` (``HOME``), ``claude/`` (``CLAUDE_CONFIG_DIR``),
    ``codex/config.toml`` (``CODEX_HOME``), ``logs/``, and ``cwd/`` (``TMPDIR``, which is where
    the checker points the sessions' ``cwd``).  ``model_url``: the model server's base URL.

    ``IS_SANDBOX=1``: Claude Code refuses to start as root unless told it runs in a sandbox (it
    does, here); see the report in ``tests/interop/conformance_real.py``.
    """
    for name in ("home", "claude", "codex", "logs", "cwd"):
        (state / name).mkdir(parents=True, exist_ok=True)
    (state / "codex" / "config.toml").write_text(_codex_config(model_url))
    env = dict(OFFLINE_ENV)
    env.update(
        {
            "HOME": str(state / "home"),
            "TMPDIR": str(state / "cwd"),
            "XDG_CONFIG_HOME": str(state / "home" / ".config"),
            "XDG_CACHE_HOME": str(state / "home" / ".cache"),
            # claude-agent-acp / Claude Code
            "CLAUDE_CONFIG_DIR": str(state / "claude"),
            "ANTHROPIC_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": "sk-ant-loopback-dummy",
            "CLAUDE_AGENT_LOGS": str(state / "logs" / "claude-agent-acp"),
            "IS_SANDBOX": "1",
            # codex-acp / Codex
            "CODEX_HOME": str(state / "codex"),
            "LOOPBACK_API_KEY": "sk-loopback-dummy",
            "APP_SERVER_LOGS": str(state / "logs" / "codex-acp"),
        }
    )
    for name in ("OPENAI_API_KEY", "CODEX_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK"):
        env[name] = ""  # a key from the caller's environment must not leak into a run
    return env


# -- the agents ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agent:
    """One agent to check: ``name`` (a report column), ``needs`` (``"node"``, ``"py-sdk"``, ``"real"``
    or ``""``), and whether it talks to the model server (``real``)."""

    name: str
    needs: str
    real: bool = False

    def command(self) -> tuple[list[str], dict[str, str]]:
        """The command line and extra environment; installs what is missing (raises :class:`Unavailable`)."""
        if self.name == "demo":
            return [sys.executable, "-m", "acp_trio.demo", "--serve-agent"], {}
        if self.name in ("ts-sdk", "ts-sdk-v2"):  # ts-sdk: an echo agent as the SDK's README teaches
            script = "ts_echo_agent.mjs" if self.name == "ts-sdk" else "ts_v2_agent.mjs"
            return ["node", str(INTEROP / script)], {"ACP_INTEROP_NPM_DIR": str(install_ts_sdk())}
        if self.name == "py-sdk":  # an echo agent as the SDK's README teaches
            return [str(install_py_sdk()), str(INTEROP / "py_echo_agent.py")], {}
        modules = install_real_agents() / "node_modules" / "@agentclientprotocol"
        if self.name == "claude-agent-acp":
            return ["node", str(modules / "claude-agent-acp" / "dist" / "index.js")], {}
        if self.name == "codex-acp":
            return ["node", str(modules / "codex-acp" / "dist" / "index.js")], {}
        raise ValueError(f"no agent named {self.name!r}; the agents: {', '.join(a.name for a in AGENTS)}")


AGENTS = (
    Agent("demo", ""),
    Agent("ts-sdk", "node"),
    Agent("ts-sdk-v2", "node"),
    Agent("py-sdk", "py-sdk"),
    Agent("claude-agent-acp", "node", real=True),
    Agent("codex-acp", "node", real=True),
)


def versions() -> dict[str, str]:
    """Each agent's pinned version, for the report."""
    return {
        "demo": "acp-trio (this tree)",
        "ts-sdk": f"@agentclientprotocol/sdk {TS_SDK_VERSION}",
        "ts-sdk-v2": f"@agentclientprotocol/sdk {TS_SDK_VERSION}",
        "py-sdk": f"agent-client-protocol {PY_SDK_VERSION}",
        "claude-agent-acp": f"@agentclientprotocol/claude-agent-acp {CLAUDE_ACP_VERSION}",
        "codex-acp": f"@agentclientprotocol/codex-acp {CODEX_ACP_VERSION} (@openai/codex {CODEX_VERSION})",
    }

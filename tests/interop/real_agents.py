"""Third-party ACP agents for the conformance runs: pinned versions, cached installs, offline environments.

The agents (see :data:`AGENTS`): acp-trio's demo agent, the TypeScript SDK agents
(``ts_echo_agent.mjs`` and the interop tests' ``ts_v2_agent.mjs``, ``@agentclientprotocol/sdk``
:data:`TS_SDK_VERSION`), the Python SDK agent (``py_echo_agent.py``, ``agent-client-protocol``
:data:`PY_SDK_VERSION`), two SDK agents of one version behind the v1 ⇄ v2 adapter
(``ts-sdk-v2-adapt-1``: ``ts_v2_turn_agent.mjs`` behind ``python -m acp_trio.adapt --speak 1``,
checked in protocol 1; ``py-sdk-adapt-2``: ``py_turn_agent.py`` behind ``--speak 2``, checked in
protocol 2), and two real
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
import functools
import json
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
ADAPT = [sys.executable, "-m", "acp_trio.adapt"]
"""The v1 ⇄ v2 adapter's command (``--speak 1|2 -- AGENT_CMD``), for the adapted agents of :data:`AGENTS`."""

TS_SDK_VERSION = "2.4.0"
PY_SDK_VERSION = "0.12.1"
CLAUDE_ACP_VERSION = "0.101.0"
CODEX_ACP_VERSION = "2.6.0"
CODEX_VERSION = "0.166.0"  # what codex-acp 2.6.0's "^0.166.0" resolves to (a 0.x caret: 0.166.*)
GEMINI_CLI_VERSION = "0.61.0"
QWEN_CODE_VERSION = "0.24.4"
OPENCODE_VERSION = "1.18.33"
PYDANTIC_ACP_VERSION = "1.10.0"
PYDANTIC_AI_VERSION = "2.52.0"  # the newest pydantic-acp 1.10.0 allows (<=2.52.0); its openai extra for the model
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


def _install_npm_package(dirname: str, package: str, check: str, timeout: float = INSTALL_TIMEOUT) -> Path:
    """The ``node_modules`` directory of a cache directory holding one npm ``package`` (``name@version``).

    ``check``: a file under ``node_modules`` that must exist after the install.
    """
    npm = _npm()
    target = cache_dir() / dirname
    installed(
        target,
        package + "\n",
        target / "node_modules" / check,
        [[npm, "install", "--no-audit", "--no-fund", "--no-save", package]],
        {"package.json": _PACKAGE_JSON},
        timeout,
    )
    return target / "node_modules"


GEMINI_ENTRY = "@google/gemini-cli/bundle/gemini.js"  # the package's bin, "gemini"
QWEN_ENTRY = "@qwen-code/qwen-code/cli-entry.js"  # the package's bin, "qwen"
OPENCODE_ENTRY = "opencode-ai/bin/opencode.exe"  # its bin, "opencode": the platform binary its postinstall puts there


NPM_AGENTS = {
    "gemini-cli": ("@google/gemini-cli", GEMINI_CLI_VERSION, GEMINI_ENTRY),
    "qwen-code": ("@qwen-code/qwen-code", QWEN_CODE_VERSION, QWEN_ENTRY),
    "opencode": ("opencode-ai", OPENCODE_VERSION, OPENCODE_ENTRY),  # a platform binary
}
"""The version-1 agents from npm: name -> (package, pinned version, entry point under node_modules)."""


def install_npm_agent(name: str, timeout: float = INSTALL_TIMEOUT) -> Path:
    """``node_modules`` holding the npm agent ``name`` of :data:`NPM_AGENTS`, at its pinned version."""
    package, version, entry = NPM_AGENTS[name]
    return _install_npm_package(f"npm-{package.rsplit('/', 1)[-1]}-{version}", f"{package}@{version}", entry, timeout)


install_gemini_cli = functools.partial(install_npm_agent, "gemini-cli")
install_qwen_code = functools.partial(install_npm_agent, "qwen-code")
install_opencode = functools.partial(install_npm_agent, "opencode")


def install_pydantic_acp(timeout: float = INSTALL_TIMEOUT) -> Path:
    """The Python of a virtual environment holding ``pydantic-acp`` :data:`PYDANTIC_ACP_VERSION`."""
    target = cache_dir() / f"py-pydantic-acp-{PYDANTIC_ACP_VERSION}"
    python = target / "bin" / "python"
    specs = [f"pydantic-acp=={PYDANTIC_ACP_VERSION}", f"pydantic-ai-slim[openai]=={PYDANTIC_AI_VERSION}"]
    installed(
        target,
        "".join(spec + "\n" for spec in specs),
        python,
        [
            [sys.executable, "-m", "venv", str(target)],
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *specs],
        ],
        {},
        timeout,
    )
    return python


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


def _gemini_settings() -> str:
    """``~/.gemini/settings.json`` for gemini-cli: no usage statistics, telemetry, update checks."""
    settings = {
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
    return json.dumps(settings, indent=2) + "\n"


def _qwen_settings() -> str:
    """``~/.qwen/settings.json`` for qwen-code: no usage statistics (its RUM endpoint at
    ``*.rum.aliyuncs.com``), telemetry or update checks; OpenAI-compatible auth (the model and
    key come from ``OPENAI_*``)."""
    settings = {
        "general": {"enableAutoUpdate": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"auth": {"selectedType": "openai"}},
    }
    return json.dumps(settings, indent=2) + "\n"


def _opencode_config(model_url: str) -> str:
    """``opencode.json`` (``OPENCODE_CONFIG``): one OpenAI-compatible provider on the loopback server."""
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"loopback/{MODEL}",
        "small_model": f"loopback/{MODEL}",
        "provider": {
            "loopback": {
                "npm": "@ai-sdk/openai-compatible",  # bundled in the opencode binary: nothing fetched
                "name": "loopback",
                "options": {"baseURL": f"{model_url}/v1", "apiKey": "sk-loopback-dummy"},
                "models": {MODEL: {"name": MODEL, "tool_call": True}},
            }
        },
    }
    return json.dumps(config, indent=2) + "\n"


MODEL = "loopback-model"
"""The model name the OpenAI-compatible agents are configured with (the model server takes any)."""

OPENAI_COMPATIBLE = ("qwen-code", "pydantic-acp")
"""Agents configured through ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` / ``OPENAI_MODEL``."""


def agent_environment(state: Path, model_url: str, agent: str = "") -> dict[str, str]:
    """Environment variables (to add to ``os.environ``) for one run of any agent, offline.

    ``state``: a fresh directory; it gets ``home/`` (``HOME``), ``claude/`` (``CLAUDE_CONFIG_DIR``),
    ``codex/config.toml`` (``CODEX_HOME``), ``opencode/opencode.json`` (``OPENCODE_CONFIG``),
    ``home/.gemini/settings.json``, ``home/.qwen/settings.json``, ``logs/``, and ``cwd/``
    (``TMPDIR``, which is where the checker points the sessions' ``cwd``).  ``model_url``: the
    model server's base URL.  ``agent``: the agent's name; the OpenAI-compatible ones
    (:data:`OPENAI_COMPATIBLE`) also get ``OPENAI_API_KEY`` (a dummy), ``OPENAI_BASE_URL``
    (``<model_url>/v1``) and ``OPENAI_MODEL``; the others get ``OPENAI_API_KEY`` empty (and the
    other ``OPENAI_*`` as the caller has them: codex-acp's loopback provider ignores them).

    ``IS_SANDBOX=1``: Claude Code refuses to start as root unless told it runs in a sandbox (it
    does, here); see the report in ``tests/interop/conformance_real.py``.

    gemini-cli: ``GOOGLE_GEMINI_BASE_URL`` (the Gemini API at the model server; with it the CLI
    picks its ``gateway`` auth type, ``GEMINI_API_KEY`` the key it sends).  opencode: its config
    dir is seeded with ``package-lock.json`` and ``node_modules/`` so that it does not
    ``npm install @opencode-ai/plugin`` there from registry.npmjs.org at start;
    ``OPENCODE_DISABLE_MODELS_FETCH`` keeps it from models.dev.
    """
    for name in ("home", "claude", "codex", "opencode", "logs", "cwd"):
        (state / name).mkdir(parents=True, exist_ok=True)
    (state / "codex" / "config.toml").write_text(_codex_config(model_url))
    (state / "opencode" / "opencode.json").write_text(_opencode_config(model_url))
    for name, text in ((".gemini", _gemini_settings()), (".qwen", _qwen_settings())):
        (state / "home" / name).mkdir(exist_ok=True)
        (state / "home" / name / "settings.json").write_text(text)
    opencode_dir = state / "home" / ".config" / "opencode"
    (opencode_dir / "node_modules").mkdir(parents=True, exist_ok=True)
    lock = {"packages": {"": {"dependencies": {"@opencode-ai/plugin": OPENCODE_VERSION}}}}
    (opencode_dir / "package-lock.json").write_text(json.dumps(lock) + "\n")
    env = dict(OFFLINE_ENV)
    env.update(
        {
            "HOME": str(state / "home"),
            "TMPDIR": str(state / "cwd"),
            "XDG_CONFIG_HOME": str(state / "home" / ".config"),
            "XDG_CACHE_HOME": str(state / "home" / ".cache"),
            "XDG_DATA_HOME": str(state / "home" / ".local" / "share"),
            "XDG_STATE_HOME": str(state / "home" / ".local" / "state"),
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
            # gemini-cli
            "GEMINI_API_KEY": "loopback-dummy",
            "GOOGLE_GEMINI_BASE_URL": model_url,
            # opencode
            "OPENCODE_CONFIG": str(state / "opencode" / "opencode.json"),
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            # qwen-code
            "QWEN_USAGE_STATISTICS_ENABLED": "false",
        }
    )
    for name in (
        "OPENAI_API_KEY",
        "CODEX_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_USE_BEDROCK",
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GENAI_USE_GCA",
        "GOOGLE_CLOUD_PROJECT",
    ):
        env[name] = ""  # a key or endpoint from the caller's environment must not leak into a run
    if agent in OPENAI_COMPATIBLE:
        env.update({"OPENAI_API_KEY": "sk-loopback-dummy", "OPENAI_BASE_URL": f"{model_url}/v1", "OPENAI_MODEL": MODEL})
    return env


# -- the agents ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agent:
    """One agent to check: ``name`` (a report column), ``needs`` (``"node"``, ``"py-sdk"``, ``"py"``
    or ``""``), whether it talks to the model server (``real``), and whether it speaks only protocol
    version 1 (``v1_only``: the runs in version 2 are left out) or only 2 (``v2_only``)."""

    name: str
    needs: str
    real: bool = False
    v1_only: bool = False
    v2_only: bool = False

    def command(self) -> tuple[list[str], dict[str, str]]:
        """The command line and extra environment; installs what is missing (raises :class:`Unavailable`)."""
        if self.name == "demo":
            return [sys.executable, "-m", "acp_trio.demo", "--serve-agent"], {}
        if self.name in ("ts-sdk", "ts-sdk-v2"):  # ts-sdk: an echo agent as the SDK's README teaches
            script = "ts_echo_agent.mjs" if self.name == "ts-sdk" else "ts_v2_agent.mjs"
            return ["node", str(INTEROP / script)], {"ACP_INTEROP_NPM_DIR": str(install_ts_sdk())}
        if self.name == "ts-sdk-v2-adapt-1":  # the v2-only SDK agent behind the adapter, to a v1 client
            agent = ["node", str(INTEROP / "ts_v2_turn_agent.mjs")]
            return [*ADAPT, "--speak", "1", "--", *agent], {"ACP_INTEROP_NPM_DIR": str(install_ts_sdk())}
        if self.name == "py-sdk-adapt-2":  # the v1-only SDK agent behind the adapter, to a v2 client
            return [*ADAPT, "--speak", "2", "--", str(install_py_sdk()), str(INTEROP / "py_turn_agent.py")], {}
        if self.name == "py-sdk":  # an echo agent as the SDK's README teaches
            return [str(install_py_sdk()), str(INTEROP / "py_echo_agent.py")], {}
        if self.name == "gemini-cli":
            return ["node", str(install_gemini_cli() / GEMINI_ENTRY), "--acp"], {}
        if self.name == "qwen-code":
            return ["node", str(install_qwen_code() / QWEN_ENTRY), "--acp"], {}
        if self.name == "opencode":
            return [str(install_opencode() / OPENCODE_ENTRY), "acp"], {}
        if self.name == "pydantic-acp":  # a pydantic-ai agent served by pydantic-acp, as its README teaches
            return [str(install_pydantic_acp()), str(INTEROP / "pydantic_acp_agent.py")], {}
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
    Agent("ts-sdk-v2-adapt-1", "node", v1_only=True),
    Agent("py-sdk-adapt-2", "py-sdk", v2_only=True),
    Agent("claude-agent-acp", "node", real=True),
    Agent("codex-acp", "node", real=True),
    Agent("gemini-cli", "node", real=True, v1_only=True),
    Agent("qwen-code", "node", real=True, v1_only=True),
    Agent("opencode", "node", real=True, v1_only=True),
    Agent("pydantic-acp", "py", real=True, v1_only=True),
)


def versions() -> dict[str, str]:
    """Each agent's pinned version, for the report."""
    return {
        "demo": "acp-trio (this tree)",
        "ts-sdk": f"@agentclientprotocol/sdk {TS_SDK_VERSION}",
        "ts-sdk-v2": f"@agentclientprotocol/sdk {TS_SDK_VERSION}",
        "py-sdk": f"agent-client-protocol {PY_SDK_VERSION}",
        "ts-sdk-v2-adapt-1": f"python -m acp_trio.adapt --speak 1 -- ts_v2_turn_agent.mjs (SDK {TS_SDK_VERSION})",
        "py-sdk-adapt-2": f"python -m acp_trio.adapt --speak 2 -- py_turn_agent.py (agent-client-protocol {PY_SDK_VERSION})",
        "claude-agent-acp": f"@agentclientprotocol/claude-agent-acp {CLAUDE_ACP_VERSION}",
        "codex-acp": f"@agentclientprotocol/codex-acp {CODEX_ACP_VERSION} (@openai/codex {CODEX_VERSION})",
        "gemini-cli": f"@google/gemini-cli {GEMINI_CLI_VERSION} (gemini --acp)",
        "qwen-code": f"@qwen-code/qwen-code {QWEN_CODE_VERSION} (qwen --acp)",
        "opencode": f"opencode-ai {OPENCODE_VERSION} (opencode acp)",
        "pydantic-acp": f"pydantic-acp {PYDANTIC_ACP_VERSION} (pydantic-ai-slim {PYDANTIC_AI_VERSION})",
    }

"""A new user who follows only the README: installs acp-trio into a fresh venv of their own, saves its
agent, runs it with the demo client, checks it, tests it with pytest and runs its client, each command
as the README prints it (its "Install" and "Run it, check it, test it" sections).

The install is the README's first line (``pip install ./acp-trio``, here the checkout's path) with the
``testing`` extra, as pure Python (``ACP_TRIO_COMPILE=0``: what compiling changes is tested by the
rest of the suite, which runs on the compiled wheel, and by ``nox -s build``).  pip takes the runtime's
dependencies from the index (or its cache), as a user's would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.one_interpreter(newest=True),  # a user's install and commands, not the interpreter's behaviour
    # one worker runs them all (noxfile's --dist loadgroup), so the module's venv and install are made
    # once: spread over two workers each made its own (two setups of ~100 s under CI's load)
    pytest.mark.xdist_group("readme_new_user"),
]

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def blocks(section: str, lang: str) -> list[str]:
    start = README.index(f"## {section}\n")
    end = README.find("\n## ", start + 1)
    return [code for kind, code in BLOCK.findall(README[start : end if end > 0 else None]) if kind == lang]


def commands(section: str) -> list[str]:
    """The command lines of a section's sh blocks, their comments cut."""
    lines = [line.split("  #", 1)[0].strip() for code in blocks(section, "sh") for line in code.splitlines()]
    return [line for line in lines if line]


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh venv with acp-trio installed as the README's Install says, and the directory the user
    works in (``my_agent.py`` saved there), with the environment whose PATH finds the venv first."""
    home = tmp_path_factory.mktemp("new-user")
    venv = home / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env["ACP_TRIO_COMPILE"] = "0"
    [from_a_clone] = [line for line in commands("Install") if line.startswith("pip install ./acp-trio")]
    assert from_a_clone == "pip install ./acp-trio"
    (home / "acp-trio").symlink_to(ROOT)  # the clone, where the README's line expects it
    install = subprocess.run(
        "pip install --quiet './acp-trio[testing]'",
        shell=True,
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    (home / "my_agent.py").write_text(blocks("Write an agent", "python")[0], encoding="utf-8")
    return home, env


def run(line: str, user: tuple[Path, dict[str, str]], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    home, env = user
    return subprocess.run(
        line, shell=True, cwd=home, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_install_is_the_users_own_and_not_this_checkouts(user: tuple[Path, dict[str, str]]) -> None:
    where = run("python -c 'import acp_trio, pytest_trio; print(acp_trio.__file__)'", user)
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(user[0] / ".venv")), where.stdout


def test_the_demo_client_runs_the_readme_agent_in_both_versions(user: tuple[Path, dict[str, str]]) -> None:
    demos = [line for line in commands("Run it, check it, test it") if "acp_trio.demo" in line]
    assert demos == [
        "python -m acp_trio.demo --agent -- python my_agent.py",
        "python -m acp_trio.demo --protocol 2 --agent -- python my_agent.py",
    ]
    for version, demo in enumerate(demos, 1):
        result = run(demo, user)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.startswith(f"connected to Notes, protocol version {version}\n"), result.stdout
        assert "agent: notes.txt starts with: " in result.stdout
        assert "[turn ended: end_turn]" in result.stdout


def test_the_checker_passes_the_readme_agent_in_both_versions(user: tuple[Path, dict[str, str]]) -> None:
    """Both checker commands, run side by side (each spends most of its time waiting on its agent)."""
    checks = [line for line in commands("Run it, check it, test it") if "acp_trio.check" in line]
    assert checks == [
        "python -m acp_trio.check -- python my_agent.py",
        "python -m acp_trio.check --protocol 2 -- python my_agent.py",
    ]
    home, env = user
    running = [
        subprocess.Popen(line, shell=True, cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in checks
    ]
    for version, process in enumerate(running, 1):
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stdout + stderr
        lines = [line for line in stdout.splitlines() if line[:4] in ("PASS", "FAIL", "WARN", "SKIP")]
        assert not [line for line in lines if line.startswith(("FAIL", "WARN"))], stdout
        assert any(line.startswith("PASS  initialize.info") and "notes-agent" in line for line in lines), stdout
        assert f"PASS  initialize.version         protocolVersion {version}" in lines, stdout
        assert any(line.startswith("PASS  session.load") for line in lines), stdout  # replay, on both


def test_pytest_runs_the_readme_test_file_with_no_configuration(user: tuple[Path, dict[str, str]]) -> None:
    home, _ = user
    (home / "test_my_agent.py").write_text(blocks("Run it, check it, test it", "python")[0], encoding="utf-8")
    assert not (home / "pytest.ini").exists() and not (home / "pyproject.toml").exists()
    result = run("pytest -q -p no:cacheprovider test_my_agent.py", user)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b\d+ passed\b", result.stdout) and " failed" not in result.stdout, result.stdout


def test_the_readme_client_runs_the_readme_agent(user: tuple[Path, dict[str, str]]) -> None:
    home, _ = user
    (home / "my_client.py").write_text(blocks("Write a client", "python")[0], encoding="utf-8")
    result = run("python my_client.py", user)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "tool Read notes.txt: completed",
        "agent: notes.txt starts with: buy milk",
        "stop reason: end_turn",
    ]


def test_the_git_url_form_of_the_install_resolves_to_this_release(user: tuple[Path, dict[str, str]]) -> None:
    """The Install section's second line, with this repository's path as the ``file://`` URL: pip clones
    it and reads the release it would install (``--dry-run``: the rest is the first line's install)."""
    [line] = [line for line in commands("Install") if line.startswith("pip install 'git+")]
    assert line == "pip install 'git+file:///home/you/acp-trio'"
    ours = line.replace("file:///home/you/acp-trio", ROOT.as_uri())
    result = run(
        ours.replace("pip install", "pip install --dry-run --ignore-installed --no-deps --quiet --report -", 1), user
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    [item] = report["install"]
    assert item["metadata"]["name"] == "acp-trio"
    assert item["metadata"]["version"] == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

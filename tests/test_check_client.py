"""``acp_trio.check --client``, the conformance checker's client mode: on clients built with exactly
one defect each (``tests/clients/check_target_client.py``) it reports that defect and nothing else;
our demo client and clients written with the official TypeScript SDK are checked too.

Every run spawns real processes (the client, and the stand-in agent it starts), bounded with
``trio.fail_after``; the defect matrix runs its clients side by side to keep the wall time down.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import test_interop  # pytest's default ("prepend") import mode puts tests/ on sys.path
import trio
from test_interop import INTEROP

from acp_trio.check import CLIENT_CHECKS, Report, Status, run_client_checks
from acp_trio.check._client_mode import ClientSchema, Settings, _one_run, substitute

ts_sdk = test_interop.ts_sdk  # the session fixture installing the TypeScript SDK
CLIENT = Path(__file__).parent / "clients" / "check_target_client.py"
ALL_NAMES = [c.name for c in CLIENT_CHECKS]
FAST = {"answer_timeout": 4.0, "cancel_wait": 2.0, "shutdown_timeout": 3.0, "start_timeout": 20.0}
V2_NO_FS = {"fs.read": Status.SKIP, "fs.write": Status.SKIP, "fs.roots": Status.SKIP}


def target(defect: str, protocol: int = 1) -> list[str]:
    return [sys.executable, str(CLIENT), defect, str(protocol), "{AGENT}"]


def lines(report: Report) -> list[str]:
    return [f"{f.status.value} {f.name}: {f.observed}" for f in report.findings]


DEFECTS: list[tuple[str, int, dict[str, Status]]] = [
    ("good", 1, {}),
    ("good", 2, V2_NO_FS),
    ("reads-outside", 1, {"fs.roots": Status.WARN}),
    ("terminal-unadvertised", 1, {"terminal.capability": Status.FAIL}),
    ("never-answers-permission", 1, {"permission.answer": Status.FAIL}),
    # the crash ends the client's script: its prompt answer and second turn never come
    (
        "crashes-on-unknown-update",
        1,
        {"updates.unknown-variant": Status.WARN, "session.prompt-response": Status.SKIP, "session.cancel": Status.SKIP},
    ),
    (
        "crashes-on-unknown-update",
        2,
        {
            **V2_NO_FS,
            "updates.unknown-variant": Status.FAIL,
            "session.prompt-response": Status.SKIP,
            "session.cancel": Status.SKIP,
        },
    ),
    ("never-closes-stdin", 1, {"lifecycle.stdin": Status.WARN}),
    ("never-kills", 1, {"lifecycle.terminate": Status.WARN}),
    ("invalid-message", 1, {"schema.valid": Status.FAIL}),
    ("cancel-allows", 1, {"session.cancel": Status.FAIL}),
    # the crash ends the client's script: the probes after it and its second turn never come
    (
        "crashes-on-unknown-field",
        1,
        {
            "updates.unknown-fields": Status.FAIL,
            "updates.unknown-variant": Status.SKIP,
            "session.prompt-response": Status.SKIP,
            "session.cancel": Status.SKIP,
        },
    ),
    ("crashes-on-prompt-answer-field", 1, {"session.prompt-response": Status.FAIL, "session.cancel": Status.SKIP}),
    ("ignores-unknown-requests", 1, {"jsonrpc.unknown-method": Status.FAIL}),
    ("garbage-line", 1, {"stdin.jsonrpc": Status.FAIL}),
    ("reads-wrong", 1, {"fs.read": Status.FAIL}),
    (
        "fs-unadvertised",
        1,
        {"fs.capability": Status.FAIL, "fs.read": Status.SKIP, "fs.write": Status.SKIP, "fs.roots": Status.SKIP},
    ),
    ("sigterm-only", 1, {"lifecycle.terminate": Status.WARN}),
]


@pytest.mark.one_interpreter  # the checker's verdicts over a matrix of defective clients
async def test_the_checker_finds_exactly_the_one_defect_of_each_client() -> None:
    reports: dict[tuple[str, int], Report] = {}

    async def check(defect: str, protocol: int) -> None:
        reports[defect, protocol] = await run_client_checks(target(defect, protocol), protocol=protocol, **FAST)

    with trio.fail_after(150):
        async with trio.open_nursery() as nursery:
            for defect, protocol, _expected in DEFECTS:
                nursery.start_soon(check, defect, protocol)
    for defect, protocol, expected in DEFECTS:
        report = reports[defect, protocol]
        assert [f.name for f in report.findings] == ALL_NAMES
        found = {f.name: f.status for f in report.findings if f.status is not Status.PASS}
        assert found == expected, (defect, protocol, lines(report))
        assert report.failed == (Status.FAIL in expected.values())
        assert all(f.source for f in report.findings)


@pytest.mark.one_interpreter  # the checker's command line and processes: its verdicts, not the interpreter's
async def test_the_stand_in_agent_sends_only_valid_messages_besides_its_deliberate_probes(tmp_path: Path) -> None:
    """What the scripted agent sends validates against the pinned schema, except the probes that break
    it on purpose: v1's unknown update kind, and in v2 the fs/* and terminal/* requests v2 does not have."""
    for protocol in (1, 2):
        settings = Settings(protocol, 4.0, 2.0, 3.0, lambda name: True, None, 20.0)
        with trio.fail_after(60):
            outcome = await _one_run(
                target("good", protocol), settings, ClientSchema(f"v{protocol}"), tmp_path, 1, False
            )
        assert outcome.end is not None and outcome.end.received
        problems = outcome.end.own_problems
        if protocol == 1:
            assert len(problems) == 1 and "acp_check_future_kind" in problems[0], problems
        else:
            assert problems and all("no such method for a client" in p for p in problems), problems
            assert {p.split(":")[0] for p in problems} == {
                "request fs/read_text_file",
                "request fs/write_text_file",
                "request terminal/create",
            }


def test_the_agent_placeholder_is_replaced_by_the_stand_in_command() -> None:
    agent = ["/usr/bin/python3", "/x/agent.py", "--connect", "/tmp/s p.sock"]
    assert substitute(["client", "--agent", "{AGENT}", "-v"], agent) == ["client", "--agent", *agent, "-v"]
    assert substitute(["client", "--agent-cmd={AGENT}"], agent) == [
        "client",
        "--agent-cmd=/usr/bin/python3 /x/agent.py --connect '/tmp/s p.sock'",
    ]
    with pytest.raises(ValueError, match=r"\{AGENT\}"):
        substitute(["client", "--agent", "my-agent"], agent)


@pytest.mark.one_interpreter  # the checker's command line and processes: its verdicts, not the interpreter's
def test_the_command_line_checks_a_client_writes_json_and_exits_1_on_a_fail(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    base = [sys.executable, "-m", "acp_trio.check", "--client", "--answer-timeout", "2", "--shutdown-timeout", "3"]
    only = ["--only", "permission", "--only", "lifecycle", "--skip", "lifecycle.terminate"]
    proc = subprocess.run(
        [*base, *only, "--json", str(out), "--", *target("never-answers-permission")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    shown = [line.split()[:2] for line in proc.stdout.splitlines() if line[:4] in ("PASS", "FAIL", "WARN", "SKIP")]
    assert shown == [["FAIL", "permission.answer"], ["PASS", "lifecycle.stdin"]]
    data = json.loads(out.read_text())
    assert [f["name"] for f in data["findings"]] == ["permission.answer", "lifecycle.stdin"]
    assert "tool-calls.mdx § Requesting Permission" in data["findings"][0]["source"]
    ok = subprocess.run([*base, "--only", "fs", "--", *target("good")], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "PASS  fs.roots" in ok.stdout


@pytest.mark.one_interpreter  # the checker's command line and processes: its verdicts, not the interpreter's
def test_client_mode_usage_errors_exit_2() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "acp_trio.check", *args], capture_output=True, text=True, timeout=60
        )

    no_placeholder = run("--client", "--", sys.executable, str(CLIENT), "good", "1")
    assert no_placeholder.returncode == 2 and "{AGENT}" in no_placeholder.stderr
    missing = run("--client", "--", "no-such-client-acp-check", "{AGENT}")
    assert missing.returncode == 2 and "no-such-client-acp-check" in missing.stderr
    with_url = run("--client", "--url", "ws://127.0.0.1:1/acp")
    assert with_url.returncode == 2 and "--client" in with_url.stderr


@pytest.mark.one_interpreter  # the checker's verdict on a client process: no interpreter changes it
async def test_a_silent_client_is_a_fail_not_a_hang(tmp_path: Path) -> None:
    """A client that starts the agent and then says nothing; one that never starts it at all."""
    script = "import subprocess, sys, time; subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE); time.sleep(120)"
    reports: dict[str, Report] = {}

    async def check(name: str, command: list[str], **options: Any) -> None:
        reports[name] = await run_client_checks(command, **{**FAST, **options})

    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                functools.partial(
                    check,
                    "silent",
                    [sys.executable, "-c", script, "{AGENT}"],
                    only=["client", "lifecycle.stdin"],
                    answer_timeout=1.0,
                )
            )
            nursery.start_soon(
                functools.partial(
                    check,
                    "absent",
                    [sys.executable, "-c", "import time; time.sleep(120)", "{AGENT}"],
                    only=["client.initialize"],
                    start_timeout=2.0,
                )
            )
    silent, absent = reports["silent"], reports["absent"]
    statuses = {f.name: (f.status, f.observed) for f in silent.findings}
    assert statuses["client.initialize"][0] is Status.FAIL and "no initialize" in statuses["client.initialize"][1]
    assert statuses["lifecycle.stdin"][0] is Status.WARN and "sent nothing" in statuses["lifecycle.stdin"][1]
    [finding] = absent.findings
    assert finding.status is Status.FAIL and "did not start the agent within 2 s" in finding.observed


@pytest.mark.one_interpreter  # the checker's verdicts on client processes
@pytest.mark.parametrize("protocol", [1, 2])
async def test_the_demo_client_passes_every_check_that_applies(protocol: int) -> None:
    """v2: ``--turn-timeout 2`` makes the demo client cancel the turn the checker holds open."""
    command = [sys.executable, "-m", "acp_trio.demo", "--protocol", str(protocol)]
    if protocol == 2:  # long enough for the probe turn, shorter than the turn held open for a cancel
        command += ["--turn-timeout", "2"]
    with trio.fail_after(90):
        report = await run_client_checks(
            [*command, "--agent", "--", "{AGENT}"],
            protocol=protocol,
            **{**FAST, "cancel_wait": 4.0 if protocol == 2 else 1.0},
        )
    not_passed = {f.name: f.status for f in report.findings if f.status is not Status.PASS}
    # the v1 demo client never cancels a turn by itself
    assert not_passed == ({"session.cancel": Status.SKIP} if protocol == 1 else V2_NO_FS), lines(report)


def _ts_command(ts_sdk: Path, script: str, cwd: Path) -> list[str]:
    return ["node", str(INTEROP / script), str(cwd), "{AGENT}"]


@pytest.mark.one_interpreter  # the checker's verdicts on TypeScript clients
@pytest.mark.parametrize(("script", "protocol"), [("ts_client.mjs", 1), ("ts_v2_client.mjs", 2)])
async def test_a_client_written_with_the_typescript_sdk(
    ts_sdk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, protocol: int
) -> None:
    """The interop test clients (tests/interop/): made for our interop agent, they answer every
    permission request with the option id "allow" (not one offered here), cancel only the interop
    agent's "interop-wait" tool call, and end the agent by closing its stdin and waiting for it, never
    with a signal; the v1 one keeps its fs/* inside the session directory with ``path.resolve``,
    which does not follow symlinks."""
    monkeypatch.setenv("ACP_INTEROP_NPM_DIR", str(ts_sdk))
    with trio.fail_after(90):
        report = await run_client_checks(_ts_command(ts_sdk, script, tmp_path), protocol=protocol, **FAST)
    found = {f.name: (f.status, f.observed) for f in report.findings if f.status is not Status.PASS}
    expected: dict[str, Any] = {
        "permission.answer": Status.FAIL,
        "session.cancel": Status.SKIP,
        "lifecycle.terminate": Status.WARN,
    }
    if protocol == 1:
        expected["fs.roots"] = Status.WARN
        assert "symlink" in found["fs.roots"][1] and "absolute path" not in found["fs.roots"][1], found
    else:
        expected.update(V2_NO_FS)
    assert {name: status for name, (status, _observed) in found.items()} == expected, lines(report)
    assert '"optionId":"allow"' in found["permission.answer"][1]
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".acp-check")]  # the probe files are removed


@pytest.mark.one_interpreter  # the checker's verdicts on a TypeScript client
async def test_a_plain_client_written_with_the_typescript_sdk_passes(
    ts_sdk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/interop/ts_plain_client.mjs, written as the SDK's README teaches and as an editor
    behaves (fs inside the real cwd, the first "allow" offered, stdin closed, then SIGTERM and
    SIGKILL): everything applies but the cancel, which a one-prompt client never sends."""
    monkeypatch.setenv("ACP_INTEROP_NPM_DIR", str(ts_sdk))
    with trio.fail_after(90):
        report = await run_client_checks(_ts_command(ts_sdk, "ts_plain_client.mjs", tmp_path), protocol=1, **FAST)
    found = {f.name: f.status for f in report.findings if f.status is not Status.PASS}
    assert found == {"session.cancel": Status.SKIP}, lines(report)

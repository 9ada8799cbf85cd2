"""The checker's reports as other projects use them: ``--start-timeout`` for agents slow to start,
JUnit XML (``--junit``) for CI, and acp-tck's requirement ids next to the check names.

Times are trio's autojump clock's wherever the agent runs in memory; one test runs real processes
to see the command line's option reach the checker.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from acp_schema import v1
from acp_trio.check import (
    CHECKS,
    GATE,
    REQUIREMENTS,
    TCK_IDS,
    TCK_SOURCES,
    WHOLE_RUN,
    Finding,
    Report,
    Status,
    run_checks_in_memory,
)
from acp_trio.check._tck import SUMMARIES
from acp_trio.demo.agent import DemoAgent
from acp_trio.neutral import handlers

SLOW_AGENT = Path(__file__).parent / "agents" / "slow_start_agent.py"


def demo_v1(conn: Any, initialize: Any) -> Any:
    """The demo agent's v1 handler on ``conn``, its ``initialize`` replaced by ``initialize(params,
    answer)`` (``answer``: the demo agent's own)."""
    surface = handlers(DemoAgent(), (1,))[v1](conn)
    own = surface.initialize
    surface.initialize = lambda params: initialize(params, own)
    return surface


SLOW_START = 20.0
"""Seconds the slow demo agent takes to answer ``initialize`` (opencode: 10-13 s)."""


def slow_to_start(start: float = SLOW_START) -> Callable[[Any], Any]:
    """A factory of the demo agent (v1) answering ``initialize`` only ``start`` seconds after its
    connection opened."""

    def make(conn: Any) -> Any:
        born = trio.current_time()

        async def initialize(params: v1.InitializeRequest, answer: Any) -> v1.InitializeResponse:
            await trio.sleep_until(born + start)
            response: v1.InitializeResponse = await answer(params)
            return response

        return demo_v1(conn, initialize)

    return make


# -- --start-timeout ---------------------------------------------------------------------------------


async def test_an_agent_slow_to_start_passes_within_the_start_timeout(autojump_clock: trio.abc.Clock) -> None:
    """Every check starts a fresh agent: each one gets the start-up time for its first answer, and the
    checks' own shorter bounds (initialize 10 s, the request before initialize 5 s) apply after it."""
    with trio.fail_after(3600):
        report = await run_checks_in_memory(slow_to_start(), only=["initialize", "jsonrpc"], start_timeout=30)
    statuses = {f.name: f.status for f in report.findings}
    assert statuses["initialize.version"] is Status.PASS, report.text()
    assert statuses["initialize.before"] is not Status.FAIL, report.text()  # its first probe waits 5 s
    assert Status.FAIL not in statuses.values(), report.text()
    took = next(f.seconds for f in report.findings if f.name == GATE)
    assert SLOW_START <= took < SLOW_START + 1


async def test_a_start_timeout_is_a_fail_naming_the_option_and_the_checks_it_stopped_say_so(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(3600):
        report = await run_checks_in_memory(slow_to_start(), only=["initialize", "jsonrpc"], start_timeout=12)
    gate = report.findings[0]
    assert gate.name == GATE and gate.status is Status.FAIL
    assert gate.observed.startswith("no answer to initialize within 12 s of the agent's start (--start-timeout 12)")
    assert 12 <= gate.seconds < 13  # the start-up time, not the 10 s of initialize's own bound
    stopped = report.findings[1:]
    assert stopped and all(f.status is Status.SKIP for f in stopped)
    assert all("--start-timeout 12" in f.observed and GATE in f.observed for f in stopped)
    text = report.text()
    assert "FAIL  initialize.version  no answer to initialize within 12 s of the agent's start" in text
    assert f"SKIP  {len(stopped)} other checks" in text


async def test_the_default_start_timeout_is_30_s(autojump_clock: trio.abc.Clock) -> None:
    async def never(params: v1.InitializeRequest, answer: Any) -> v1.InitializeResponse:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    def silent(conn: Any) -> Any:
        return demo_v1(conn, never)

    with trio.fail_after(3600):
        report = await run_checks_in_memory(silent, only=["initialize.version"])
    [gate] = report.findings
    assert gate.status is Status.FAIL and "within 30 s of the agent's start (--start-timeout 30)" in gate.observed
    assert 30 <= gate.seconds < 31


@pytest.mark.one_interpreter  # four real processes: the command line's wiring, not the interpreter's
def test_the_command_line_takes_start_timeout_in_agent_mode(tmp_path: Path) -> None:
    """A real agent process that sleeps 2 s before it reads: ``--start-timeout 1`` fails it saying
    which option to raise (exit 1; the JUnit report's failure says it too); the default lets it pass."""
    agent = [sys.executable, str(SLOW_AGENT), "2"]
    check = [sys.executable, "-m", "acp_trio.check", "--only", "initialize.version"]
    junit = tmp_path / "report.xml"
    short = subprocess.run(
        [*check, "--start-timeout", "1", "--junit", str(junit), "--", *agent],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert short.returncode == 1, short.stdout + short.stderr
    assert "FAIL  initialize.version  no answer to initialize within 1 s of the agent's start (--start-timeout 1)" in (
        short.stdout
    )
    [failure] = ET.parse(junit).getroot().iter("failure")
    assert "--start-timeout 1" in failure.attrib["message"]
    enough = subprocess.run([*check, "--", *agent], capture_output=True, text=True, timeout=60)
    assert enough.returncode == 0, enough.stdout + enough.stderr
    assert "PASS  initialize.version" in enough.stdout


@pytest.mark.parametrize("scheme", ["ws", "http"])
async def test_over_the_network_the_start_is_each_connections_opening(scheme: str) -> None:
    """``--url``: an agent whose ``initialize`` is answered 1.5 s after its connection opened fails
    ``--start-timeout 0.5`` saying so, and passes the default (real time: real sockets)."""
    pytest.importorskip("hypercorn")
    import functools

    from acp_trio.check import run_checks_remote
    from acp_trio.transports.asgi import AcpApp, serve

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(functools.partial(serve, AcpApp(slow_to_start(1.5)), "127.0.0.1", 0))
            url = bound.replace("http://", f"{scheme}://") + "/acp"
            short = await run_checks_remote(url, only=[GATE], start_timeout=0.5)
            enough = await run_checks_remote(url, only=[GATE])
            nursery.cancel_scope.cancel()
    [failed] = short.findings
    assert failed.status is Status.FAIL, short.text()
    assert "no answer to initialize within 0.5 s of the agent's start (--start-timeout 0.5)" in failed.observed
    assert [f.status for f in enough.findings] == [Status.PASS], enough.text()


@pytest.mark.parametrize("argv", [["--start-timeout", "0"], ["--start-timeout", "-1"]])
def test_a_start_timeout_that_is_not_positive_is_a_usage_error(argv: list[str]) -> None:
    from acp_trio.check.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main([*argv, "--", "true"])
    assert exited.value.code == 2


# -- acp-tck's requirement ids ------------------------------------------------------------------------


def test_every_requirement_id_named_is_one_the_recorded_acp_tck_registry_declares() -> None:
    protocols = {c.name: c.protocols for c in CHECKS} | {name: (1, 2) for name, _t, _s in WHOLE_RUN}
    for check, by_protocol in REQUIREMENTS.items():
        assert check in protocols, f"{check}: not a check of the checker"
        for protocol, ids in by_protocol.items():
            assert protocol in protocols[check], f"{check} does not run in protocol {protocol}"
            assert ids and len(set(ids)) == len(ids), check
            unknown = set(ids) - TCK_IDS[protocol]
            assert not unknown, f"{check}: {sorted(unknown)} are not ids of acp-tck's v{protocol} registry"
            assert all(SUMMARIES.get(i) for i in ids), f"{check}: an id without our summary"
    named = {i for by_protocol in REQUIREMENTS.values() for ids in by_protocol.values() for i in ids}
    assert set(SUMMARIES) == named  # a summary for every id named, and for no other
    for protocol, (repository, commit, path) in TCK_SOURCES.items():
        assert repository.endswith("/acp-tck") and len(commit) == 40 and path == f"src/tck/v{protocol}/requirements.py"
        assert all(i.startswith("ACP-") for i in TCK_IDS[protocol])
    assert {"ACP-INIT-003", "ACP-JSONRPC-001", "ACP-SCHEMA-001"} <= TCK_IDS[1] & TCK_IDS[2]


@pytest.mark.parametrize(("protocol", "info"), [(1, "ACP-INIT-004"), (2, "ACP-INIT-203")])
async def test_the_reports_name_the_requirement_ids_of_each_check(
    protocol: int, info: str, autojump_clock: trio.abc.Clock
) -> None:
    with trio.fail_after(600):
        report = await run_checks_in_memory(
            DemoAgent(), protocol=protocol, only=["initialize.newer-version", "initialize.info", "initialize.before"]
        )
    assert [f.requirements for f in report.findings] == [("ACP-INIT-003",), (info,), ()]
    data = report.as_json()
    assert [f["requirements"] for f in data["findings"]] == [["ACP-INIT-003"], [info], []]
    assert data["acp_tck"]["commit"] == TCK_SOURCES[protocol][1]
    lines = report.text().splitlines()
    under = lines[lines.index(next(line for line in lines if "initialize.newer-version" in line)) + 1]
    assert under.split()[0] == "ACP-INIT-003" and under.index("ACP-INIT-003") == lines[1].index("initialize")


# -- JUnit XML ------------------------------------------------------------------------------------------


def test_the_junit_report_has_the_counts_and_attributes_ci_tools_read(tmp_path: Path) -> None:
    report = Report(["my-agent", "--acp"], 1)
    report.findings = [
        Finding(
            "initialize.version",
            "answers the version",
            Status.PASS,
            "protocolVersion 1",
            "init.mdx",
            0.25,
            ("ACP-INIT-001",),
        ),
        Finding(
            "session.cancel", "cancel ends the turn", Status.FAIL, "stopReason end_turn \x1b[31m", "prompt.mdx", 1.5
        ),
        Finding("initialize.info", "names itself", Status.WARN, "no agentInfo.name", "init.mdx", 0.5),
        Finding(
            "session.delete", "deletes", Status.SKIP, "the agent does not advertise session/delete", "del.mdx", 0.0
        ),
    ]
    path = tmp_path / "report.xml"
    report.junit().write(path, encoding="utf-8", xml_declaration=True)
    root = ET.parse(path).getroot()  # well-formed, the escape character included
    assert root.tag == "testsuites"
    [suite] = root.findall("testsuite")
    for element in (root, suite):
        assert {k: element.attrib[k] for k in ("tests", "failures", "errors", "skipped")} == {
            "tests": "4",
            "failures": "1",
            "errors": "0",
            "skipped": "1",
        }
        assert float(element.attrib["time"]) == pytest.approx(2.25)
    cases = suite.findall("testcase")
    assert [(c.attrib["classname"], c.attrib["name"]) for c in cases] == [
        ("acp_trio.check.initialize", "initialize.version"),
        ("acp_trio.check.session", "session.cancel"),
        ("acp_trio.check.initialize", "initialize.info"),
        ("acp_trio.check.session", "session.delete"),
    ]
    assert [float(c.attrib["time"]) for c in cases] == [0.25, 1.5, 0.5, 0.0]

    def properties(case: ET.Element) -> dict[str, str]:
        return {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}

    passed, failed, warned, skipped = cases
    assert properties(passed) == {"status": "PASS", "source": "init.mdx", "requirements": "ACP-INIT-001"}
    assert passed.find("failure") is None and passed.find("skipped") is None
    failure = failed.find("failure")
    assert failure is not None and failure.attrib["message"] == "stopReason end_turn \ufffd[31m"
    assert failure.attrib["type"] == "FAIL" and "cancel ends the turn; prompt.mdx" in (failure.text or "")
    assert warned.find("failure") is None and warned.find("skipped") is None  # a WARN passes
    assert properties(warned)["status"] == "WARN" and (warned.findtext("system-out") or "").startswith(
        "WARN: no agentInfo"
    )
    skip = skipped.find("skipped")
    assert skip is not None and skip.attrib["message"] == "the agent does not advertise session/delete"
    assert {p.attrib["name"]: p.attrib["value"] for p in suite.find("properties") or []} == {
        "command": "my-agent --acp",
        "protocol": "1",
    }

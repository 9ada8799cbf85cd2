"""The checker on two v2 rules it misjudged: a stdout line holding a JSON-RPC batch (v2
transports.mdx § JSON-RPC Batch Messages, acp-tck ACP-TRANSPORT-201) is JSON-RPC, and v2's
``authMethods`` are unique by ``methodId`` (the schema's ``AuthMethod``; ACP-AUTH-201), v1's by ``id``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from acp_trio.check import Status, run_checks

pytestmark = [pytest.mark.trio, pytest.mark.one_interpreter]  # agent processes; nothing of the interpreter

RAW_AGENT = r"""
import json, sys
protocol, batch = int(sys.argv[1]), sys.argv[2] == "batch"
key = "id" if protocol == 1 else "methodId"
methods = [{key: "dup", "name": "One", "type": "agent"}, {key: "dup", "name": "Two", "type": "agent"}]
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    if message["method"] == "initialize":
        caps = "agentCapabilities" if protocol == 1 else "capabilities"
        answer = {"jsonrpc": "2.0", "id": message["id"],
                  "result": {"protocolVersion": protocol, caps: {}, "authMethods": methods}}
    else:
        answer = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}}
    if sys.argv[2] == "noise":  # two distinct problems for schema.valid: methods without the "_" prefix
        for name in ("vendor/one", "vendor/two"):  # (before the answer: read before the checker moves on)
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": name, "params": {}}) + "\n")
    sys.stdout.write(json.dumps([answer] if batch else answer) + "\n")
    sys.stdout.flush()
"""


@pytest.mark.parametrize("protocol", [1, 2])
async def test_repeated_auth_method_ids_fail_in_either_protocol(tmp_path: Path, protocol: int) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(RAW_AGENT)
    report = await run_checks(
        [sys.executable, str(agent), str(protocol), "plain"], protocol=protocol, only=["initialize.capabilities"]
    )
    (finding,) = report.findings
    assert finding.status is Status.FAIL, finding
    assert "authMethods repeat the id 'dup'" in finding.observed
    assert finding.requirements == (("ACP-AUTH-001",) if protocol == 1 else ("ACP-AUTH-201",))


@pytest.mark.parametrize("protocol", [1, 2])
async def test_a_batch_line_on_stdout_is_jsonrpc_in_v2_only(tmp_path: Path, protocol: int) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(RAW_AGENT)
    report = await run_checks(
        [sys.executable, str(agent), str(protocol), "batch"],
        protocol=protocol,
        only=["initialize.version", "stdout.jsonrpc"],
        # v1: the answer inside the batch is never seen, so initialize waits out start_timeout (30 s by
        # default); this agent is a few lines of json and sys, up in well under a second
        start_timeout=10,
    )
    found = {finding.name: finding for finding in report.findings}
    if protocol == 2:
        assert found["initialize.version"].status is Status.PASS, found["initialize.version"]
        assert found["stdout.jsonrpc"].status is Status.PASS, found["stdout.jsonrpc"]
        assert "ACP-TRANSPORT-201" in found["stdout.jsonrpc"].requirements
    else:  # v1 says nothing of batches: a batch line is not one message
        assert found["stdout.jsonrpc"].status is Status.FAIL, found["stdout.jsonrpc"]


async def test_a_whole_run_check_lists_every_distinct_problem(tmp_path: Path) -> None:
    """``schema.valid`` names the first problem and how many others, and lists each (text, JSON, JUnit)."""
    agent = tmp_path / "agent.py"
    agent.write_text(RAW_AGENT)
    report = await run_checks(
        [sys.executable, str(agent), "1", "noise"], protocol=1, only=["initialize.version", "schema.valid"]
    )
    (finding,) = [finding for finding in report.findings if finding.name == "schema.valid"]
    assert finding.status is Status.FAIL
    assert "(and 1 other problems, listed below)" in finding.observed
    assert len(finding.details) == 2
    assert "vendor/one" in finding.details[0] and "vendor/two" in finding.details[1]
    (data,) = [entry for entry in report.as_json()["findings"] if entry["name"] == "schema.valid"]
    assert data["details"] == list(finding.details)
    assert all(f"- {detail}" in report.text() for detail in finding.details)
    failure = report.junit().getroot().find(".//testcase[@name='schema.valid']/failure")
    assert failure is not None and failure.text is not None and "vendor/two" in failure.text

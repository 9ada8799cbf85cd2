"""``acp_trio.check``, the conformance checker: on agents built with exactly one defect each
(``tests/agents/check_target_agent.py``), it reports that defect and nothing else.

Each run spawns real agent processes (one per check), bounded with ``trio.fail_after``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from acp_trio import RequestError
from acp_trio.check import CHECKS, WHOLE_RUN, Report, Status, run_checks
from acp_trio.check._schema import WireSchema

AGENT = Path(__file__).parent / "agents" / "check_target_agent.py"
SCRIPT = Path(__file__).parent / "agents" / "check_script.toml"
ALL_NAMES = [c.name for c in CHECKS] + [name for name, _t, _s in WHOLE_RUN]


one_interpreter = pytest.mark.one_interpreter(newest=True)
"""The checker's verdicts run on one interpreter, the newest: CI's balance (tests/conftest.py)."""


def target(defect: str) -> list[str]:
    return [sys.executable, str(AGENT), defect]


DEFECTS: dict[str, dict[str, Status]] = {
    "good": {},
    "stdout": {"stdout.jsonrpc": Status.FAIL},
    "answers-notifications": {"jsonrpc.notifications": Status.FAIL},
    "invalid-update": {"schema.valid": Status.FAIL},
    "fs-without-capability": {"capabilities.client": Status.FAIL},
    # session/close cancels the running turn "as if session/cancel had been called": the same defect
    "ignores-cancel": {"session.cancel": Status.FAIL, "session.close": Status.FAIL},
    "never-exits": {"lifecycle.eof": Status.WARN},
    "unknown-tool-call": {"session.tool-call-ids": Status.FAIL},
    "load-answers-first": {"session.load": Status.FAIL},
    "rejects-resource-link": {"session.content-types": Status.FAIL},
    "stderr-protocol": {"lifecycle.stderr": Status.WARN},
    "resume-replays": {"session.resume": Status.FAIL},
    "config-unchanged": {"session.set-config-option": Status.FAIL},
    "permission-outlives-cancel": {"session.cancel-permission": Status.FAIL},
    "unlisted": {"session.list": Status.WARN},
    "rejects-mcp": {"session.mcp": Status.FAIL},
}


@pytest.fixture(scope="session")
def defect_reports() -> dict[str, Report]:
    """Every target agent checked once, four at a time (each run spawns some 35 agent processes; a
    run's wall time is mostly its probes' waits, which four at a time overlap).  The tests that use
    this fixture share one pytest-xdist group (``xdist_group``, with the noxfile's ``--dist
    loadgroup``), so under xdist it is made on one worker, not once per worker; and once on that
    worker: session scope, because with module scope pytest tore it down and made it again
    whenever the worker ran another module's test between two of these (CI's durations showed two
    setups of about 500 s each)."""

    async def check_all() -> dict[str, Report]:
        reports: dict[str, Report] = {}
        limiter = trio.CapacityLimiter(4)

        async def one(defect: str) -> None:
            async with limiter:
                reports[defect] = await run_checks(target(defect), turn_timeout=20, script=SCRIPT)

        with trio.fail_after(600):  # before pytest-timeout's (below): a clean failure, trio's state intact
            async with trio.open_nursery() as nursery:
                for defect in DEFECTS:
                    nursery.start_soon(one, defect)
        return reports

    return trio.run(check_all)


@one_interpreter  # the checker's verdicts: 16 agents x 35 processes, a third of the suite's CPU
@pytest.mark.xdist_group("check-defects")  # one worker makes defect_reports for all 16
@pytest.mark.timeout(660)  # the fixture's 16 runs count in the first test's time
@pytest.mark.parametrize(("defect", "expected"), list(DEFECTS.items()))
def test_the_checker_finds_exactly_the_one_defect_of_each_agent(
    defect_reports: dict[str, Report], defect: str, expected: dict[str, Status]
) -> None:
    report = defect_reports[defect]
    assert [f.name for f in report.findings] == ALL_NAMES
    found = {f.name: f.status for f in report.findings if f.status is not Status.PASS}
    assert found == expected, [f"{f.status.value} {f.name}: {f.observed}" for f in report.findings]
    assert report.failed == (Status.FAIL in expected.values())
    assert all(f.source for f in report.findings)


@one_interpreter  # the checker's command line and processes: its verdicts, not the interpreter's
def test_the_command_line_prints_a_line_per_check_writes_json_and_exits_1_on_a_fail(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    only = ["--only", "jsonrpc.notifications", "--only", "initialize", "--skip", "initialize.info"]
    only += ["--skip", "initialize.capabilities", "--skip", "initialize.before"]
    command = [
        sys.executable,
        "-m",
        "acp_trio.check",
        *only,
        "--json",
        str(out),
        "--",
        *target("answers-notifications"),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line[:4] in ("PASS", "FAIL", "WARN", "SKIP")]
    assert [line.split()[:2] for line in lines] == [
        ["PASS", "initialize.version"],
        ["PASS", "initialize.newer-version"],
        ["FAIL", "jsonrpc.notifications"],
    ]
    data = json.loads(out.read_text())
    assert [f["name"] for f in data["findings"]] == [
        "initialize.version",
        "initialize.newer-version",
        "jsonrpc.notifications",
    ]
    assert data["findings"][2]["status"] == "FAIL" and "JSON-RPC 2.0" in data["findings"][2]["source"]
    ok = subprocess.run(
        [*command[:3], "--only", "initialize.version", "--", *target("good")], capture_output=True, timeout=120
    )
    assert ok.returncode == 0


@one_interpreter  # the checker's command line and processes: its verdicts, not the interpreter's
def test_a_missing_agent_or_command_is_a_usage_error() -> None:
    missing = subprocess.run(
        [sys.executable, "-m", "acp_trio.check", "--", "no-such-agent-acp-check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "no-such-agent-acp-check" in missing.stderr
    empty = subprocess.run([sys.executable, "-m", "acp_trio.check"], capture_output=True, text=True, timeout=60)
    assert empty.returncode == 2 and "agent command" in empty.stderr


@pytest.mark.parametrize("variant", ["v1", "v1_unstable", "v2", "v2_unstable"])
def test_every_variant_carries_its_pinned_schema_and_validates_by_method(variant: str) -> None:
    schema = WireSchema(variant)
    assert schema.check_response("session/new", {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}}) is None
    problem = schema.check_response("session/new", {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": 5}})
    assert problem is not None and "sessionId" in problem and "NewSessionResponse" in problem
    assert schema.check_from_agent("_vendor/anything", {"x": 1}, True) is None
    assert "no such method" in (schema.check_from_agent("session/prompt", {}, True) or "")


DEMO_SCRIPT = Path(__file__).parent / "agents" / "demo_script.toml"
# the one demo agent (acp_trio.neutral) offers every check of protocol 1; of protocol 2 it skips what
# v2 does not have (set_mode, client capabilities, tool_call vs tool_call_update); it advertises stdio
# MCP servers (session.mcp.stdio on v2), so session.mcp runs in both
DEMO_SKIPS: dict[int, set[str]] = {
    1: set(),
    2: {"session.set-mode", "capabilities.variations", "session.tool-call-ids"},
}


@one_interpreter  # the checker's verdicts on the demo agent (about 80 s for both versions)
@pytest.mark.parametrize("protocol", [1, 2])
async def test_the_demo_agent_passes_every_check_that_applies(protocol: int) -> None:
    with trio.fail_after(180):
        report = await run_checks(
            [sys.executable, "-m", "acp_trio.demo", "--serve-agent"], protocol=protocol, script=DEMO_SCRIPT
        )
    statuses = {f.name: f.status for f in report.findings}
    skipped = DEMO_SKIPS[protocol]
    assert {name for name, status in statuses.items() if status is Status.SKIP} == skipped, report.text()
    assert all(status is Status.PASS for name, status in statuses.items() if name not in skipped), report.text()
    assert "permission pending, cancelled" in next(f.observed for f in report.findings if f.name.endswith("permission"))


async def test_the_pytest_plugin_checks_an_agent_object_in_memory(acp_conformance: Any) -> None:
    """``acp_trio.testing`` (loaded by pytest through its ``pytest11`` entry point): the demo agent
    passes; an agent that answers a notification fails with the report in the assertion."""
    from acp_schema import v1
    from acp_trio.demo.agent import DemoAgent
    from acp_trio.neutral import handlers
    from acp_trio.testing import assert_conformant

    assert acp_conformance is assert_conformant
    with trio.fail_after(60):
        report = await acp_conformance(DemoAgent())
        not_passed = {f.name: f.status for f in report.findings if f.status is not Status.PASS}
        # without --script nothing asks permission
        skipped = DEMO_SKIPS[1] | {"session.cancel-permission", "script.expectations"}
        assert not_passed == dict.fromkeys(skipped | {"lifecycle.stderr"}, Status.SKIP), report.text()
        assert "exited" in next(f.observed for f in report.findings if f.name == "lifecycle.eof")

        def chatty(conn: Any) -> Any:
            """The demo agent (v1) with an extension notification it answers, as it must not."""

            async def note(params: Any) -> None:
                conn.connection._enqueue(b'{"jsonrpc":"2.0","id":null,"result":null}\n')

            conn.on_ext_notification("_acp_check/note", note)
            return handlers(DemoAgent(), (1,))[v1](conn)

        with pytest.raises(AssertionError, match=r"FAIL  jsonrpc.notifications"):
            await acp_conformance(chatty, only=["jsonrpc"])


@one_interpreter  # the checker's command line and processes: its verdicts, not the interpreter's
@pytest.mark.parametrize("scheme", ["ws", "http"])
async def test_the_checker_reaches_a_remote_agent_over_websocket_and_streamable_http(scheme: str) -> None:
    pytest.importorskip("hypercorn")
    import functools

    from acp_trio.check import run_checks_remote
    from acp_trio.demo.agent import DemoAgent
    from acp_trio.transports.asgi import AcpApp, serve

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(functools.partial(serve, AcpApp(DemoAgent()), "127.0.0.1", 0))
            url = bound.replace("http://", f"{scheme}://") + "/acp"
            report = await run_checks_remote(url)
            nursery.cancel_scope.cancel()
    statuses = {f.name: f.status for f in report.findings}
    assert statuses["lifecycle.eof"] is Status.SKIP
    assert not report.failed, report.text()
    skips = DEMO_SKIPS[1] | {"session.cancel-permission", "script.expectations"}
    skips |= {"lifecycle.eof", "lifecycle.stderr", "initialize.before"}
    if scheme == "ws":
        not_passed = {name for name, status in statuses.items() if status is not Status.PASS}
        assert not_passed == skips, report.text()
    else:  # HTTP answers malformed input with a status; the cancel may come after the turn (POSTs go in order)
        skipped = {name for name, status in statuses.items() if status is Status.SKIP}
        assert skipped == skips | {"jsonrpc.parse-error", "jsonrpc.invalid-request"}, report.text()
    assert statuses["schema.valid"] is Status.PASS and statuses["session.prompt"] is Status.PASS


async def _check_url(url: str, *args: str) -> tuple[int, str, str]:
    """``python -m acp_trio.check --only initialize.version --url URL ARGS...``: exit status, stdout, stderr."""
    proc = await trio.run_process(
        [sys.executable, "-m", "acp_trio.check", "--only", "initialize.version", "--url", url, *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


@one_interpreter  # the checker's command line and processes: its verdicts, not the interpreter's
@pytest.mark.parametrize("scheme", ["ws", "http"])
async def test_a_remote_agent_that_refuses_the_checker_is_one_line_saying_what_to_pass_and_exit_2(scheme: str) -> None:
    """401 (no or a wrong bearer token) and 403 (an Origin not allowed): the checks cannot run, so
    the command line prints one line saying what happened and what to pass (exit 2, as for an agent
    command that cannot run); ``run_checks_remote`` raises :class:`AgentUnreachable` saying it."""
    pytest.importorskip("hypercorn")
    import functools

    from acp_trio.check import AgentUnreachable, run_checks_remote
    from acp_trio.demo.agent import DemoAgent
    from acp_trio.transports.asgi import AcpApp, serve

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            [bound] = await nursery.start(functools.partial(serve, AcpApp(DemoAgent(), token="s3cret"), "127.0.0.1", 0))
            url = bound.replace("http://", f"{scheme}://") + "/acp"
            refused = f"acp-trio check: the server at {url} refused the connection with HTTP"
            assert await _check_url(url) == (
                2,
                "",
                f"{refused} 401 (not authorized): pass its bearer token with --header 'Authorization: Bearer TOKEN'\n",
            )
            assert await _check_url(url, "--header", "Authorization: Bearer wrong") == (
                2,
                "",
                f"{refused} 401 (not authorized): it did not accept the token of --header 'Authorization: ...'; "
                "pass the one it was started with\n",
            )
            origin = ["--header", "Authorization: Bearer s3cret", "--header", "Origin: http://evil.example"]
            assert await _check_url(url, *origin) == (
                2,
                "",
                f"{refused} 403 (forbidden): it does not allow the Origin 'http://evil.example' sent with --header; "
                "drop that header, or allow the origin on the server (AcpApp(allowed_origins=[...]))\n",
            )
            with pytest.raises(AgentUnreachable) as info:
                await run_checks_remote(url, protocol=2)
            assert (info.value.url, info.value.status) == (url, 401)
            assert str(info.value).startswith(f"the server at {url} refused the connection with HTTP 401")
            status, out, err = await _check_url(url, "--header", "Authorization: Bearer s3cret")
            assert (status, err) == (0, ""), out + err
            assert "PASS  initialize.version" in out
            nursery.cancel_scope.cancel()


@one_interpreter  # the checker's command line and processes: its verdicts, not the interpreter's
@pytest.mark.parametrize("scheme", ["ws", "http"])
async def test_nothing_listening_at_the_url_is_one_line_and_exit_2(scheme: str) -> None:
    pytest.importorskip("hypercorn")
    from acp_trio.check import AgentUnreachable, run_checks_remote

    with trio.socket.socket() as sock:  # bound, not listening: a connection to it is refused
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        url = f"{scheme}://127.0.0.1:{port}/acp"
        with trio.fail_after(60):
            assert await _check_url(url) == (
                2,
                "",
                f"acp-trio check: nothing is listening at 127.0.0.1:{port} (connection refused): "
                "start the agent's server, or fix the host and port of --url\n",
            )
            with pytest.raises(AgentUnreachable) as info:
                await run_checks_remote(url)
    assert (info.value.url, info.value.status) == (url, None)


async def test_session_load_passes_on_the_demo_agent_with_a_session_store(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "acp_trio.demo", "--serve-agent", "--store", str(tmp_path / "sessions.db")]
    with trio.fail_after(120):
        report = await run_checks(command, only=["session.load"])
    [finding] = report.findings[:1]
    assert (finding.name, finding.status) == ("session.load", Status.PASS), report.text()
    assert "replayed, then the answer" in finding.observed


@one_interpreter  # the checker's command line and processes: its verdicts, not the interpreter's
async def test_session_mcp_offers_every_advertised_transport_and_sees_the_agent_connect() -> None:
    """``session.mcp``: stdio, http and sse servers of the checker's own, reached by an agent that
    advertises http and sse and connects with ``acp_trio.mcp.open_mcp_servers``."""
    pytest.importorskip("mcp")
    from acp_schema import v1
    from acp_trio.check import run_checks_in_memory
    from acp_trio.mcp import open_mcp_servers

    class McpAgent:
        def __init__(self, conn: Any) -> None:
            self.conn = conn

        async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
            caps = v1.AgentCapabilities(mcp_capabilities=v1.McpCapabilities(http=True, sse=True))
            return v1.InitializeResponse(protocol_version=1, agent_capabilities=caps)

        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            servers = await open_mcp_servers(self.conn, "s1", params.mcp_servers, cwd=params.cwd)
            for name, connected in servers.items():
                assert connected.session is not None, (name, connected.error)
                await connected.session.call_tool("acp_check_ping", {})
            return v1.NewSessionResponse(session_id="s1")

    with trio.fail_after(120):
        report = await run_checks_in_memory(McpAgent, only=["session.mcp"])
    [finding] = report.findings
    assert finding.status is Status.PASS, report.text()
    assert "stdio: contacted; http: contacted; sse: contacted" in finding.observed


@one_interpreter  # the checker's command line and processes: its verdicts, not the interpreter's
def test_a_script_names_its_prompts_and_a_wrong_one_is_a_usage_error_naming_the_field(tmp_path: Path) -> None:
    from acp_trio.check import Script, ScriptError

    script = Script.load(SCRIPT)
    assert script.text == "Say hello." and script.long == "Say hello."
    assert script.expecting("permission") is not None and script.expecting("terminal") is None
    assert Script.from_data({"prompts": {"long": "Count to 100."}}).long == "Count to 100."
    for data, field in [
        ({}, "prompts"),
        ({"prompts": {"a": {"text": ""}}}, "prompts.a.text"),
        ({"prompts": {"a": {"text": "x", "expect": "tool_call"}}}, "prompts.a.expect"),
        ({"prompts": {"a": {"text": "x", "expect": ["flying"]}}}, "'flying'"),
        ({"prompts": {"a": {"text": "x", "wait": 3}}}, "'wait'"),
    ]:
        with pytest.raises(ScriptError, match=re.escape(field)):
            Script.from_data(data)
    broken = tmp_path / "broken.toml"
    broken.write_text("[prompts.a\n")
    proc = subprocess.run(
        [sys.executable, "-m", "acp_trio.check", "--script", str(broken), "--", *target("good")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "broken.toml: not valid TOML" in proc.stderr
    ran = subprocess.run(
        [sys.executable, "-m", "acp_trio.check", "--script", str(SCRIPT), "--only", "script", "--", *target("good")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout
    assert "PASS  script.expectations  permission: permission, tool_call; read: fs_read, message" in ran.stdout


class _V2Agent:
    """A protocol-2 agent for the checker's v2 prompt rules: right, or wrong in one way (``defect``)."""

    defect = "good"

    def __init__(self, conn: Any) -> None:
        from acp_schema import v2

        self.v2 = v2
        self.conn = conn
        self.client = v2.ClientPeer(conn)
        self.count = 0

    async def initialize(self, params: Any) -> Any:
        v2 = self.v2
        caps = v2.AgentCapabilities(session=v2.SessionCapabilities())
        return v2.InitializeResponse(
            protocol_version=2, capabilities=caps, info=v2.Implementation(name="v2", version="1")
        )

    def _options(self, value: str) -> list[Any]:
        v2 = self.v2
        choices = [v2.SessionConfigSelectOption(value=v, name=v) for v in ("fast", "deep")]
        option = v2.SelectSessionConfigOption(
            type="select", config_id="effort", name="Effort", current_value=value, options=choices
        )
        return [option]

    async def session_new(self, params: Any) -> Any:
        self.count += 1
        return self.v2.NewSessionResponse(session_id=f"s{self.count}", config_options=self._options("fast"))

    async def session_set_config_option(self, params: Any) -> Any:
        import acp_trio

        if not isinstance(params, self.v2.IdSetSessionConfigOptionRequest) or params.config_id != "effort":
            raise acp_trio.RequestError.invalid_params({"configId": getattr(params, "config_id", None)})
        return self.v2.SetSessionConfigOptionResponse(config_options=self._options(params.value))

    async def session_prompt(self, params: Any) -> Any:
        v2, sid = self.v2, params.session_id

        async def send(update: Any) -> None:
            await self.client.session_update(v2.UpdateSessionNotification(session_id=sid, update=update))

        if self.defect == "refuses-prompts":  # as an agent that refuses a prompt cancelled before it accepted it
            await trio.sleep(0.2)
            raise RequestError(-32800, "Request cancelled")
        if self.defect != "no-user-message":
            await send(v2.UserMessageSessionUpdate(message_id=f"u{self.count}", content=list(params.prompt)))

        async def turn() -> str | None:
            for i in range(10):
                await send(v2.AgentMessageChunkSessionUpdate(message_id="a", content=v2.TextContentBlock(text=f"{i} ")))
                await trio.sleep(0.02)
            return "_checked" if self.defect == "custom-stop" else None

        def state(**update: Any) -> dict[str, Any]:  # raw: the runtime's start_turn owns state updates
            return {"sessionId": sid, "update": {"sessionUpdate": "state_update", **update}}

        notify = self.conn.connection.notify
        if self.defect == "no-running":  # idle, with no running before it
            self.conn.connection.start_soon(notify, "session/update", state(state="idle", stopReason="end_turn"))
        elif self.defect == "no-stop-reason":

            async def running_then_idle() -> None:
                await notify("session/update", state(state="running"))
                await notify("session/update", state(state="idle"))

            self.conn.connection.start_soon(running_then_idle)
        else:
            self.conn.start_turn(sid, turn)
        return v2.PromptResponse(message_id=f"u{self.count}")


@pytest.mark.parametrize(
    ("defect", "expected"),
    [
        ("good", Status.PASS),
        ("custom-stop", Status.PASS),  # v2 stop reasons may be _custom
        ("no-user-message", Status.FAIL),
        ("no-running", Status.FAIL),
        ("no-stop-reason", Status.WARN),
    ],
)
async def test_protocol_2_prompt_turns_are_accepted_reported_running_and_idle(defect: str, expected: Status) -> None:
    from acp_schema import v2
    from acp_trio.check import run_checks_in_memory

    agent = type(f"V2{defect}", (_V2Agent,), {"defect": defect})
    with trio.fail_after(60):
        report = await run_checks_in_memory(
            {v2: agent}, protocol=2, only=["session.prompt", "session.cancel"], turn_timeout=10
        )
    found = {f.name: f.status for f in report.findings}
    assert found["session.prompt"] is expected, report.text()
    if defect in ("good", "custom-stop"):
        assert found["session.cancel"] is Status.PASS, report.text()
        options = await run_checks_in_memory({v2: agent}, protocol=2, only=["session.set-config-option"])
        assert options.findings[0].status is Status.PASS, options.text()  # the value tagged type "id"


RAW = Path(__file__).parent / "agents" / "raw_agent.py"


@pytest.mark.parametrize(
    ("mode", "only", "protocol"),
    [
        ("null-id", ["jsonrpc.invalid-request"], 1),  # JSON-RPC § 5: id null when it was not detected
        ("v2-newer", ["initialize.newer-version", "schema.valid"], 1),  # validated as the version it negotiates
        ("load-commands", ["session.load"], 1),  # state updates after the answer are not a late replay
    ],
)
async def test_what_the_spec_allows_is_not_a_finding(mode: str, only: list[str], protocol: int) -> None:
    with trio.fail_after(60):
        report = await run_checks([sys.executable, str(RAW), mode], protocol=protocol, only=only)
    assert [f.name for f in report.findings] == only
    assert all(f.status is Status.PASS for f in report.findings), report.text()


V1_ONLY = Path(__file__).parent / "agents" / "v1_only_agent.py"
NOT_V2 = (
    "the agent answered protocolVersion 1 to an initialize asking 2: it does not speak protocol version 2; "
    "drop --protocol 2 to check it in version 1"
)


async def test_an_agent_that_does_not_speak_the_version_asked_fails_the_run_once_not_everywhere() -> None:
    """migration.mdx: a v1-only agent answers protocolVersion 1 to a v2 client.  Asked to check
    protocol 2, the run fails: one FAIL saying so and what to run, the checks it stopped one line."""
    with trio.fail_after(60):
        report = await run_checks([sys.executable, str(V1_ONLY)], protocol=2)
    first, *rest = report.findings
    assert (first.name, first.status, first.observed) == ("initialize.version", Status.FAIL, NOT_V2)
    assert report.failed
    assert [f.name for f in report.findings] == ALL_NAMES  # every check is still in the report (and --json)
    assert all(f.status is Status.SKIP for f in rest), report.text()
    assert sum(f.observed == "not checked: see initialize.version" for f in rest) == len(rest) - 2
    lines = report.text().splitlines()
    assert lines[1:] == [
        f"FAIL  initialize.version  {NOT_V2}",
        # under the name: the acp-tck requirements the check covers (protocol 2's)
        f"{'':6}ACP-INIT-001 ACP-INIT-201  (answers the protocol version asked; "
        "docs/protocol/v1/initialization.mdx § Version Negotiation)",
        f"SKIP  {f'{len(rest)} other checks':18}  not run: see initialize.version",
        f"1 FAIL, {len(rest)} SKIP",
    ]


@one_interpreter  # the checker's command line and processes: its verdicts, not the interpreter's
def test_the_command_line_says_once_that_the_agent_does_not_speak_the_version_and_exits_1() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "acp_trio.check", "--protocol", "2", "--", sys.executable, str(V1_ONLY)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (proc.stdout + proc.stderr).count("does not speak") == 1, proc.stdout + proc.stderr
    assert f"FAIL  initialize.version  {NOT_V2}\n" in proc.stdout
    assert proc.stderr == "" and len(proc.stdout.splitlines()) == 5, proc.stdout
    fine = subprocess.run(
        [sys.executable, "-m", "acp_trio.check", "--only", "initialize.version", "--", sys.executable, str(V1_ONLY)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fine.returncode == 0 and "PASS  initialize.version" in fine.stdout, fine.stdout + fine.stderr


def test_the_pytest_helpers_fail_on_an_agent_that_does_not_speak_the_version_asked() -> None:
    from acp_schema import v1
    from acp_trio.testing import assert_conformant, conformance_tests

    class NotesAgent:
        def __init__(self, conn: Any) -> None:
            self.conn = conn

        async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
            return v1.NewSessionResponse(session_id="s1")

    with pytest.raises(AssertionError, match=re.escape(NOT_V2)):
        trio.run(lambda: assert_conformant(NotesAgent, protocol=2))
    test_conformance = conformance_tests(NotesAgent, protocol=2)
    with pytest.raises(pytest.fail.Exception, match=re.escape(f"FAIL initialize.version: {NOT_V2}")):
        test_conformance("initialize.version")
    with pytest.raises(pytest.skip.Exception, match=r"not checked: see initialize\.version"):
        test_conformance("session.new")
    assert trio.run(lambda: assert_conformant(NotesAgent, only=["initialize.version"])).findings[0].status is (
        Status.PASS
    )


async def test_a_v2_prompt_refused_with_minus_32800_on_cancel_is_a_warning_not_a_cancelled_turn() -> None:
    from acp_schema import v2
    from acp_trio.check import run_checks_in_memory

    agent = type("V2refuses", (_V2Agent,), {"defect": "refuses-prompts"})
    with trio.fail_after(60):
        report = await run_checks_in_memory({v2: agent}, protocol=2, only=["session.cancel"], turn_timeout=10)
    [finding] = report.findings
    assert finding.status is Status.WARN and "refused with -32800" in finding.observed, report.text()


async def test_the_wire_peer_writes_one_message_at_a_time_when_the_reader_answers_during_a_check() -> None:
    """The reading task answers the agent's requests (``fs/*`` without the capability: -32601)
    while a check sends its own: two writers on the agent's stdin at once must queue, not raise
    ``BusyResourceError`` (which ended a ``session.close`` check in CI)."""
    import functools
    from types import SimpleNamespace

    import trio.testing

    from acp_trio.check._wire import Observations, WirePeer

    stdin, agent_end = trio.testing.lockstep_stream_pair()  # every send waits for the reader
    peer = WirePeer(SimpleNamespace(stdin=stdin), WireSchema("v1"), Observations())
    got = bytearray()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            request = {"id": 7, "method": "fs/read_text_file"}
            nursery.start_soon(functools.partial(peer.answer, request, error={"code": -32601, "message": "no"}))
            nursery.start_soon(peer.notify, "session/cancel", {"sessionId": "s"})
            await trio.testing.wait_all_tasks_blocked()
            while got.count(b"\n") < 2:
                got += await agent_end.receive_some()
    lines = [json.loads(line) for line in got.splitlines()]
    assert sorted(str(line.get("id", line.get("method"))) for line in lines) == ["7", "session/cancel"]


START_CRASH = Path(__file__).parent / "agents" / "start_crash_agent.py"
CRASHING = Path(__file__).parent / "agents" / "crashing_agent.py"
CRASH_LINE = "RuntimeError: NOTES_API_KEY is not set: export it before starting the agent"


@one_interpreter  # the checker's command line and processes: its verdicts, not the interpreter's
def test_an_agent_that_dies_before_answering_initialize_is_one_error_with_its_exit_status_and_stderr() -> None:
    """Not 32 FAILs saying the agent closed its stdout: the run stops at once (exit 2, as for a
    command that cannot start) with how the process ended and its last stderr lines, the traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "acp_trio.check", "--", sys.executable, str(START_CRASH)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    first, *tail = proc.stderr.splitlines()
    assert first == "acp-trio check: the agent exited with code 1 before answering initialize; its last stderr lines:"
    assert tail[0] == "  notes agent starting" and tail[1] == "  Traceback (most recent call last):"
    assert tail[-1] == f"  {CRASH_LINE}"


@pytest.mark.parametrize("only", [[], ["session.prompt"]])
async def test_run_checks_raises_agent_exited_when_the_agent_cannot_answer_initialize(only: list[str]) -> None:
    from acp_trio.check import AgentExited

    command = [sys.executable, str(START_CRASH)]
    with trio.fail_after(60), pytest.raises(AgentExited) as info:
        await run_checks(command, only=only)
    exited = info.value
    assert isinstance(exited, OSError)
    assert (exited.command, exited.exit_code, exited.signal, exited.stdout) == (command, 1, None, [])
    assert exited.stderr_tail[0] == "notes agent starting" and exited.stderr_tail[-1] == CRASH_LINE


async def test_an_agent_that_exits_at_once_without_a_word_on_stderr_says_what_to_run() -> None:
    from acp_trio.check import AgentExited

    command = [sys.executable, str(START_CRASH), "usage"]
    with trio.fail_after(60), pytest.raises(AgentExited) as info:
        await run_checks(command)
    assert str(info.value) == (
        "the agent exited with code 0 before answering initialize; its stdout, where only JSON-RPC "
        "belongs, said: usage: notes-agent --model NAME; it wrote nothing to stderr: run "
        f"{sys.executable} {START_CRASH} usage by hand to see why (an ACP agent serves the requests on "
        "its stdin until stdin closes: is this its command?)"
    )


@pytest.mark.parametrize(("how", "ended"), [("exit3", "exited with code 3"), ("kill", "was killed by SIGKILL")])
async def test_an_agent_that_dies_during_a_check_fails_it_saying_how_and_its_last_stderr_line(
    how: str, ended: str
) -> None:
    with trio.fail_after(60):
        report = await run_checks([sys.executable, str(CRASHING), how], only=["session.prompt"], turn_timeout=20)
    [finding] = report.findings
    assert (finding.status, finding.observed) == (
        Status.FAIL,
        f"the agent {ended} while the checker waited for its answer to session/prompt; "
        "its last stderr line: fatal: the model endpoint refused the key",
    )

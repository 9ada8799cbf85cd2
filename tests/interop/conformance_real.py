"""Run the conformance checker against third-party ACP agents, offline, and tabulate the findings.

``python tests/interop/conformance_real.py [--quick] [--out DIR] [--agent NAME ...] [--protocol N ...]``

Installs what is missing (``tests/interop/real_agents.py``: the SDKs and the npm agents, cached
under ``~/.cache/acp-trio/interop/``), starts the loopback model server
(``tests/interop/model_server.py``) in this process, and runs
``python -m acp_trio.check --protocol N --json ... -- AGENT_CMD`` once per agent and protocol
(1 and 2), each with a fresh throwaway ``HOME`` and the real agents' model APIs pointed at the
model server: no network, no key.  The agents: ``demo`` (``python -m acp_trio.demo
--serve-agent``), ``ts-sdk`` / ``ts-sdk-v2`` (``tests/interop/ts_agent.mjs`` / ``ts_v2_agent.mjs``),
``py-sdk`` (``tests/interop/py_agent.py``), ``ts-sdk-v2-adapt-1`` / ``py-sdk-adapt-2`` (an SDK
agent of one version behind ``python -m acp_trio.adapt``, checked in the other version only, with
``tests/interop/turn_script.toml``), ``claude-agent-acp``, ``codex-acp``, and the
version-1-only ``gemini-cli`` (``gemini --acp``), ``qwen-code`` (``qwen --acp``), ``opencode``
(``opencode acp``) and ``pydantic-acp`` (``tests/interop/pydantic_acp_agent.py``), which run in
protocol 1 only.  Every run gives the agent :data:`START_TIMEOUT` seconds to answer ``initialize``
(``--start-timeout``: opencode takes 10-13 s, more on a busy machine).

Writes into ``--out`` (default ``conformance-real/``): ``<agent>-p<N>.txt`` (the checker's text
report) and ``.json`` (its ``--json``), ``model-requests.jsonl`` (every request the model server
saw), ``state/`` (each run's ``HOME``, agent logs), and ``conformance.md``: one table, rows the
checks, columns agent x protocol, cells ``PASS``/``FAIL``/``WARN``/``SKIP`` (``-`` not run there,
``n/a`` agent unavailable, ``ERR`` checker error), then each run's time and the versions.

``--quick``: only ``initialize``, ``session.new`` and ``session.prompt`` checks.  ``--tool-prompt``:
the prompt names a file after the model server's tool marker, so the real agents' turns make a
tool call (Claude Code's ``Read``, Codex's ``exec_command`` ``cat``, the ``read_file`` / ``read``
of the others): ``tool_call`` / ``tool_call_update`` and, where the agent asks,
``session/request_permission`` are exercised; the agents whose model API the server can make
write (:data:`WRITE_EXPECT`) also get a prompt to create a new file, expecting what the agent's own
defaults promise (gemini-cli and pydantic-acp ask permission first).  An agent that
cannot be installed (no ``node``/``npm``, a failed install) is reported ``n/a`` with the reason,
not an error.  Exit status: 1 when the demo agent has any FAIL or WARN (it must be all PASS/SKIP),
or a checker run could not complete; 0 otherwise: the other agents' FAILs are findings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import trio

from acp_trio.check._session_checks import NOTES_TEXT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_server import TOOL_MARKER, WRITE_MARKER, ModelServer, serve_models
from real_agents import AGENTS, INTEROP, ROOT, Agent, Unavailable, agent_environment, versions

QUICK = ("initialize", "session.new", "session.prompt")
RUN_TIMEOUT = 900.0
"""Seconds one checker run (one agent, one protocol) may take before it is stopped."""
START_TIMEOUT = 120.0
"""Seconds an agent process may take to answer ``initialize`` (the checker's ``--start-timeout``): a
bound, not a speed bar (opencode needs 10-13 s on an idle 2-core machine, over 30 s on a busy one)."""
WRITE_EXPECT = {
    "gemini-cli": ["tool_call", "permission"],  # write_file asks in its default approval mode
    "pydantic-acp": ["tool_call", "permission", "fs_write"],  # requires_approval, then fs/write_text_file
    "qwen-code": ["tool_call", "fs_write"],
    "opencode": ["tool_call"],  # writes the file itself
}
"""What the ``--tool-prompt`` run's prompt to create a new file (:data:`~model_server.WRITE_MARKER`)
expects of each agent that gets it (the model server makes only the Gemini API's and Chat
Completions' agents write)."""


@dataclass
class Run:
    """One checker run: its findings (``name -> status``), its time in seconds, or why it did not run."""

    agent: str
    protocol: int
    statuses: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    unavailable: str | None = None
    error: str | None = None
    text: str = ""


def checker_env(extra: dict[str, str]) -> dict[str, str]:
    """``os.environ`` plus ``extra``, with this tree's ``runtime/`` and ``generated/`` on ``PYTHONPATH``."""
    env = {**os.environ, **extra}
    paths = [str(ROOT / "runtime"), str(ROOT / "generated")]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


async def run_one(
    agent: Agent,
    protocol: int,
    out: Path,
    model_url: str,
    only: tuple[str, ...] = (),
    turn_timeout: float = 60.0,
    tool_prompt: bool = False,
    start_timeout: float = START_TIMEOUT,
) -> Run:
    """Run the checker against ``agent`` in ``protocol``; the reports go to ``out/<agent>-p<N>.txt/.json``.

    Installs the agent first (an :class:`~real_agents.Unavailable` becomes ``Run.unavailable``).
    ``tool_prompt``: the prompt names a notes file in the session's ``cwd`` after
    :data:`~model_server.TOOL_MARKER`, so a real agent's turns make a tool call that reads it.
    """
    run = Run(agent.name, protocol)
    try:
        command, extra = await trio.to_thread.run_sync(agent.command)
    except Unavailable as exc:
        run.unavailable = str(exc).splitlines()[0]
        return run
    stem = out / f"{agent.name}-p{protocol}"
    state = out / "state" / f"{agent.name}-p{protocol}"
    env = checker_env({**agent_environment(state, model_url, agent.name), **extra})
    args = [sys.executable, "-m", "acp_trio.check", "--protocol", str(protocol), "--json", f"{stem}.json"]
    args += ["--turn-timeout", str(turn_timeout), "--start-timeout", str(start_timeout)]
    if agent.name == "demo":  # its turn asks permission, then reads: the permission checks run too
        args += ["--script", str(ROOT / "tests" / "agents" / "demo_script.toml")]
    elif agent.name.endswith(("-adapt-1", "-adapt-2")):  # through the adapter: text, plan, tool call, permission
        args += ["--script", str(INTEROP / "turn_script.toml")]
    elif tool_prompt and agent.real:  # the model server answers its marker with a tool call
        # the file the checker's client serves through fs/read_text_file (it serves no other), also on
        # disk for the agents that read it themselves
        notes = Path(os.path.realpath(state / "cwd")) / "acp-check-notes.txt"
        notes.write_text(NOTES_TEXT)
        script = {
            "prompts": {
                "text": {"text": "Say hello in one short sentence."},
                "tool": {
                    "text": f"Read my notes file and say what it says: {TOOL_MARKER}{notes}",
                    "expect": ["tool_call"],
                },
            }
        }
        if agent.name in WRITE_EXPECT:
            new = Path(os.path.realpath(state / "cwd")) / "acp-real-new.txt"
            script["prompts"]["write"] = {
                "text": f"Create a new file: {WRITE_MARKER}{new}",
                "expect": WRITE_EXPECT[agent.name],
            }
        (state / "script.json").write_text(json.dumps(script))
        args += ["--script", str(state / "script.json")]
    for name in only:
        args += ["--only", name]
    start = time.monotonic()
    with trio.move_on_after(RUN_TIMEOUT) as scope:
        proc = await trio.run_process(
            [*args, "--", *command], env=env, cwd=str(ROOT), capture_stdout=True, capture_stderr=True, check=False
        )
    run.seconds = time.monotonic() - start
    if scope.cancelled_caught:
        run.error = f"the checker run took over {RUN_TIMEOUT:.0f} s"
        return run
    run.text = proc.stdout.decode(errors="replace")
    stem.with_suffix(".txt").write_text(run.text)
    if proc.returncode not in (0, 1):
        run.error = f"the checker exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-500:]}"
        return run
    report = json.loads(stem.with_suffix(".json").read_text())
    run.statuses = {f["name"]: f["status"] for f in report["findings"]}
    return run


def table(runs: list[Run]) -> str:
    """The markdown table: rows the checks (in report order), columns agent x protocol."""
    names: list[str] = []
    for run in runs:
        names += [n for n in run.statuses if n not in names]
    header = "| check | " + " | ".join(f"{r.agent} p{r.protocol}" for r in runs) + " |"
    lines = [header, "|---" * (len(runs) + 1) + "|"]

    def cell(run: Run, name: str) -> str:
        if run.unavailable:
            return "n/a"
        if run.error:
            return "ERR"
        return run.statuses.get(name, "-")

    for name in names:
        lines.append(f"| {name} | " + " | ".join(cell(r, name) for r in runs) + " |")
    return "\n".join(lines)


def markdown(runs: list[Run], quick: bool, tool_prompt: bool, total: float) -> str:
    notes = (["quick"] if quick else []) + (["prompts that make the real agents call a tool"] if tool_prompt else [])
    parts = [
        "# Conformance of ACP agents (acp_trio.check)" + (f" ({', '.join(notes)})" if notes else ""),
        "",
        table(runs),
        "",
        "| run | seconds | result |",
        "|---|---|---|",
    ]
    for r in runs:
        summary = r.unavailable or r.error or (r.text.strip().splitlines() or [""])[-1]
        parts.append(f"| {r.agent} p{r.protocol} | {r.seconds:.1f} | {summary} |")
    parts += ["", f"Total: {total:.0f} s.", "", "Versions:", ""]
    ran = {r.agent for r in runs}
    parts += [f"- {name}: {version}" for name, version in versions().items() if name in ran]
    return "\n".join(parts) + "\n"


async def conformance(
    out: Path, agents: list[Agent], protocols: list[int], quick: bool, tool_prompt: bool = False, delay: float = 0.05
) -> list[Run]:
    """Run every agent in every protocol, one after another, against one model server; write the reports."""
    out.mkdir(parents=True, exist_ok=True)
    app = ModelServer(delay=delay, log=str(out / "model-requests.jsonl"))
    runs = []
    async with trio.open_nursery() as nursery:
        model_url = await nursery.start(serve_models, app)
        for agent in agents:
            for protocol in [p for p in protocols if (p == 1 or not agent.v1_only) and (p == 2 or not agent.v2_only)]:
                print(f"... {agent.name} protocol {protocol}", file=sys.stderr, flush=True)
                run = await run_one(agent, protocol, out, model_url, QUICK if quick else (), tool_prompt=tool_prompt)
                note = run.unavailable or run.error or (run.text.strip().splitlines() or [""])[-1]
                print(f"    {run.seconds:.1f} s: {note}", file=sys.stderr, flush=True)
                runs.append(run)
        nursery.cancel_scope.cancel()
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the initialize/session.new/session.prompt checks")
    parser.add_argument("--out", type=Path, default=Path("conformance-real"), help="the report directory")
    names = [a.name for a in AGENTS]
    parser.add_argument("--agent", action="append", choices=names, help="only this agent (repeatable)")
    parser.add_argument("--protocol", action="append", type=int, choices=(1, 2), help="only this protocol")
    parser.add_argument(
        "--tool-prompt", action="store_true", help="prompt so that the real agents make a tool call (reading a file)"
    )
    options = parser.parse_args(argv)
    agents = [a for a in AGENTS if not options.agent or a.name in options.agent]
    protocols = options.protocol or [1, 2]
    start = time.monotonic()
    runs = trio.run(conformance, options.out, agents, protocols, options.quick, options.tool_prompt)
    text = markdown(runs, options.quick, options.tool_prompt, time.monotonic() - start)
    (options.out / "conformance.md").write_text(text)
    print(text)
    demo_bad = any(r.agent == "demo" and {"FAIL", "WARN"} & set(r.statuses.values()) for r in runs)
    return 1 if demo_bad or any(r.error for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())

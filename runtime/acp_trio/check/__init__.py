"""``acp_trio.check``: a conformance checker for ACP agents, in any language.

``python -m acp_trio.check [--protocol 1|2] [--only NAME] [--skip NAME] [--json FILE] [--junit FILE]
[--script FILE] [--start-timeout SECONDS] -- AGENT_CMD...`` (or ``--url ws://HOST:PORT/acp`` /
``http://...`` [``--header 'Name: value'``] for an agent served remotely) spawns the agent once per
check (a crash in one does not spoil the others), drives it over stdio as a scripted client, and
prints one line per check: ``PASS`` / ``FAIL`` / ``WARN`` / ``SKIP``, what was observed, and the
spec source of the rule, with the ids of the rules of acp-tck, the protocol's official test kit,
the check covers (:data:`REQUIREMENTS`).  ``--json`` and ``--junit`` (JUnit XML, for CI:
:meth:`Report.junit`) write the report too.  Each agent process may take ``--start-timeout``
seconds (default 30, :data:`START_TIMEOUT`) to answer ``initialize``; one that does not fails
``initialize.version`` saying so and naming the option.

Exit status: 1 on any FAIL, 0 otherwise.  An agent that does not speak the protocol version asked
(``--protocol``, default 1) answers ``initialize`` with another version: that is a FAIL of
``initialize.version`` saying so and what to run instead (``the agent answered protocolVersion 1
to an initialize asking 2: it does not speak protocol version 2; drop --protocol 2 to check it in
version 1``); the other checks are not run, and the report shows them as one ``SKIP`` line.  2
when the checks cannot run, with one line on stderr saying why and what to do: a usage error, an
agent command that cannot be started, an agent process that exits before answering ``initialize``
(``the agent exited with code 1 before answering initialize; its last stderr lines:`` and those
lines indented below, its traceback; in code, :class:`AgentExited`), or (``--url``) a server that
refuses the connection (``the server at ws://127.0.0.1:8765/acp refused the connection with HTTP
401 (not authorized): pass its bearer token with --header 'Authorization: Bearer TOKEN'``; for
HTTP 403, the ``Origin`` it does not allow) or where nothing listens (``nothing is listening at
127.0.0.1:8765 (connection refused): start the agent's server, or fix the host and port of
--url``); in code, :class:`AgentUnreachable`, an ``OSError``.

Five checks are about the whole run, over every message every agent process sent
(:data:`WHOLE_RUN`): each stdout line is one JSON-RPC message (``transports.mdx`` §
stdio), each message validates against the pinned schema of the variant it negotiates
(``acp_schema.v1/schema.json``), no ``fs/*`` or ``terminal/*`` request reaches a client that did
not advertise it (``initialization.mdx`` § Client Capabilities; each connection is judged by the
capabilities its ``initialize`` advertised, none unless a check offers some), every v1
``tool_call_update`` names a reported tool call, and stderr carries text logs only.
``--script FILE`` names the prompts sent and the behaviours they must show
(:mod:`acp_trio.check._script`); ``--client`` checks a client instead (:func:`run_client_checks`).

In code: ``await run_checks(command, protocol=1)`` returns a :class:`Report`.  The checks and
their sources are :data:`CHECKS` (``acp_trio.check._checks``).  Every check has a timeout: a
silent agent is a FAIL, never a hang.  An agent process that ends during a check (after the run's
first ``initialize`` was answered) fails that check, saying how it ended and its last stderr line
(``the agent exited with code 3 while the checker waited for its answer to session/prompt; its
last stderr line: fatal: ...``).
"""

from __future__ import annotations

import functools
import os
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from ._checks import CHECKS, Check, Context, Result, Status, default_cwd
from ._client_mode import CLIENT_CHECKS, ClientCheck, run_client_checks
from ._junit import junit_tree
from ._schema import wire_schema
from ._script import BEHAVIOURS, Script, ScriptedPrompt, ScriptError
from ._session_checks import NOTES_TEXT
from ._tck import REQUIREMENTS, TCK_IDS, TCK_SOURCES, requirements_of
from ._wire import (
    START_TIMEOUT,
    AgentExited,
    AgentUnreachable,
    Observations,
    StartTimeout,
    WirePeer,
    memory_target,
    process_target,
    reach,
    remote_target,
    run_with_peer,
)

WHOLE_RUN: tuple[tuple[str, str, str], ...] = (
    ("stdout.jsonrpc", "every stdout line is one JSON-RPC message", "docs/protocol/v1/transports.mdx § stdio"),
    ("schema.valid", "every message validates against the pinned schema", "schema/{variant}/schema.json"),
    (
        "session.tool-call-ids",
        "every tool_call_update names a tool call reported before",
        "docs/protocol/v1/tool-calls.mdx § Updating",
    ),
    (
        "capabilities.client",
        "no fs/* or terminal/* request to a client without the capability",
        "docs/protocol/v1/initialization.mdx § Client Capabilities",
    ),
    (
        "lifecycle.stderr",
        "stderr carries logs only: UTF-8 text, no JSON-RPC (a WARN, not a FAIL)",
        "docs/protocol/v1/transports.mdx § stdio (the agent MAY write UTF-8 strings to stderr for logging)",
    ),
)
"""The checks made over every message of a run rather than by one scripted exchange: ``(name, title,
source)`` each."""


GATE = "initialize.version"
"""The check the others wait for: when it fails, they are ``SKIP`` with :data:`GATED`."""
GATED = f"not checked: see {GATE}"


@dataclass(frozen=True)
class Finding:
    """One line of the report; ``requirements``: the ids of the official test kit's rules the check
    covers in the run's protocol version (``("ACP-INIT-003",)``; :data:`REQUIREMENTS`); ``details``:
    for a check over the whole run (``schema.valid``, ``stdout.jsonrpc``, ...) that found several
    distinct problems, each of them (``observed`` names the first and how many others)."""

    name: str
    title: str
    status: Status
    observed: str
    source: str
    seconds: float
    requirements: tuple[str, ...] = ()
    details: tuple[str, ...] = ()


@dataclass
class Report:
    """The findings, in order; ``failed``: whether any is a FAIL."""

    command: list[str]
    protocol: int
    findings: list[Finding] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(f.status is Status.FAIL for f in self.findings)

    def as_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (what ``--json PATH`` writes): the command, the protocol and
        each finding's name, title, status, observation, source, duration (seconds),
        ``requirements`` (acp-tck ids, a list, maybe empty) and ``details`` (every distinct problem
        of a whole-run check that found several, a list, maybe empty); when any finding names one,
        ``acp_tck``: the ``repository``, ``commit`` and ``file`` the ids were read from."""
        data: dict[str, Any] = {
            "command": self.command,
            "protocol": self.protocol,
            "findings": [
                {
                    "name": f.name,
                    "title": f.title,
                    "status": f.status.value,
                    "observed": f.observed,
                    "source": f.source,
                    "seconds": round(f.seconds, 3),
                    "requirements": list(f.requirements),
                    "details": list(f.details),
                }
                for f in self.findings
            ],
        }
        if any(f.requirements for f in self.findings) and self.protocol in TCK_SOURCES:
            repository, commit, path = TCK_SOURCES[self.protocol]
            data["acp_tck"] = {"repository": repository, "commit": commit, "file": path}
        return data

    def junit(self) -> ET.ElementTree[ET.Element]:
        """The report as JUnit XML (what ``--junit PATH`` writes: :mod:`acp_trio.check._junit` gives
        the shape): one ``testsuite``, one ``testcase`` per finding, ``FAIL`` a ``failure``, ``SKIP``
        ``skipped``, ``WARN`` a pass with its observation in ``system-out``; acp-tck ids in the
        ``requirements`` property.  ``report.junit().write(path, encoding="utf-8", xml_declaration=True)``."""
        return junit_tree(self)

    def text(self) -> str:
        """The report as the command line prints it: two lines per finding, then the counts.  The
        second line of a finding starts with the acp-tck requirement ids the check covers, under
        its name (``ACP-INIT-003``), then says what it checks and the rule's source.

        Once ``initialize.version`` failed (the agent refused ``initialize``, went away, or does not
        speak the protocol version asked), the checks it stopped (every ``SKIP`` after it) are one
        line, ``SKIP  31 other checks  not run: see initialize.version``; :attr:`findings` and
        :meth:`as_json` still hold each."""
        gate = next((i for i, f in enumerate(self.findings) if f.name == GATE and f.status is not Status.PASS), None)
        if gate is None:
            shown, stopped = self.findings, 0
        else:
            after = self.findings[gate + 1 :]
            shown = [*self.findings[: gate + 1], *(f for f in after if f.status is not Status.SKIP)]
            stopped = len(self.findings) - len(shown)
        label = f"{stopped} other check{'s' if stopped > 1 else ''}"
        width = max([len(f.name) for f in shown] + ([len(label)] if stopped else []), default=10)
        lines = [f"acp-trio check: {' '.join(self.command)} (protocol {self.protocol})"]
        for i, f in enumerate(shown):
            lines.append(f"{f.status.value:4}  {f.name:{width}}  {f.observed}")
            lines.append(f"{'':4}  {' '.join(f.requirements):{width}}  ({f.title}; {f.source})")
            lines += [f"{'':4}  {'':{width}}  - {detail}" for detail in f.details]
            if i == gate and stopped:
                lines.append(f"{Status.SKIP.value:4}  {label:{width}}  not run: see {GATE}")
        counts = {s: sum(f.status is s for f in self.findings) for s in Status}
        lines.append(", ".join(f"{n} {s.value}" for s, n in counts.items() if n))
        return "\n".join(lines)


def _script(script: Script | str | os.PathLike[str] | None, prompt: str | None) -> Script:
    if script is None:
        return Script.default() if prompt is None else Script.default(prompt)
    found = script if isinstance(script, Script) else Script.load(script)
    if prompt is not None:
        found = Script({**found.prompts, "text": ScriptedPrompt("text", prompt)})
    return found


def _selected(name: str, only: Sequence[str], skip: Sequence[str]) -> bool:
    def matches(patterns: Sequence[str]) -> bool:
        return any(name == p or name.startswith(p.rstrip(".") + ".") for p in patterns)

    return (not only or matches(only)) and not matches(skip)


async def run_checks(
    command: Sequence[str],
    *,
    protocol: int = 1,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    turn_timeout: float = 60.0,
    start_timeout: float = START_TIMEOUT,
    prompt: str | None = None,
    script: Script | str | os.PathLike[str] | None = None,
    cwd: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Run the checks against the agent ``command`` (program and arguments); see the module docstring.

    ``only``/``skip``: check names or prefixes (``"jsonrpc"``, ``"session.cancel"``).
    ``turn_timeout``: seconds a prompt turn may take.  ``start_timeout``: seconds each agent process
    may take, from its start, to answer ``initialize`` (default :data:`START_TIMEOUT`, 30): until
    then every wait for it ends at that bound, not its own, and a check whose agent has not answered
    by then is a ``FAIL`` saying so (``no answer to initialize within 30 s of the agent's start
    (--start-timeout 30): ...``); when that check is ``initialize.version``, the checks it stops say
    it too.  ``prompt``: the text of the plain prompt
    turn (default "Say hello in one short sentence.").  ``script``: a :class:`Script`, or the path of
    a TOML/JSON script file (:mod:`acp_trio.check._script`: named prompts and the behaviours they
    must show; raises :class:`ScriptError`).  ``cwd``: the ``cwd`` of the sessions (default: the
    temporary directory); the checker's client serves ``acp-check-notes.txt`` there
    (:data:`NOTES_TEXT`) to agents that read it, without touching the disk.  ``progress``: called
    with each check's name as it starts.  Raises ``OSError`` naming the command when it cannot run,
    and :class:`AgentExited` (an ``OSError``: ``exit_code``, ``signal``, ``stderr_tail``) when its
    process ends before answering the first ``initialize``.
    """
    return await _run(
        process_target(command, 1.0),
        list(command),
        process=True,
        protocol=protocol,
        only=only,
        skip=skip,
        turn_timeout=turn_timeout,
        start_timeout=start_timeout,
        script=_script(script, prompt),
        cwd=cwd,
        progress=progress,
    )


async def run_checks_in_memory(
    agent: Any,
    *,
    protocol: int = 1,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    turn_timeout: float = 60.0,
    start_timeout: float = START_TIMEOUT,
    prompt: str | None = None,
    script: Script | str | os.PathLike[str] | None = None,
    cwd: str | None = None,
    **options: Any,
) -> Report:
    """:func:`run_checks` against an agent written with acp-trio, served in this process.

    ``agent``: the agent object or factory, as for :class:`~acp_trio.AgentSideConnection`; each
    check gets a fresh connection (``options``: for it, ``eof_grace``, ...).  "Exits once its
    stdin closes" becomes "its connection closes once its input ends".
    """
    return await _run(
        memory_target(agent, options),
        [f"<in memory: {getattr(agent, '__qualname__', type(agent).__qualname__)}>"],
        protocol=protocol,
        only=only,
        skip=skip,
        turn_timeout=turn_timeout,
        start_timeout=start_timeout,
        script=_script(script, prompt),
        cwd=cwd,
        progress=None,
    )


async def run_checks_remote(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    protocol: int = 1,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    turn_timeout: float = 60.0,
    start_timeout: float = START_TIMEOUT,
    prompt: str | None = None,
    script: Script | str | os.PathLike[str] | None = None,
    cwd: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """:func:`run_checks` against an agent served remotely: ``ws://``/``wss://`` (each message one
    text frame) or ``http://``/``https://`` (Streamable HTTP), a new ACP connection per check.
    ``headers``: extra headers (``Authorization``).  Over Streamable HTTP the server answers
    malformed input with an HTTP status, so ``jsonrpc.parse-error`` and ``.invalid-request`` are
    skipped; ``lifecycle.eof`` is skipped on both (no process).

    Raises ``ValueError`` for another scheme or a malformed port, and :class:`AgentUnreachable`
    (an ``OSError``; ``url``, ``status``) when the checks cannot run: nothing listens at the URL's
    host and port, or the server refuses the connection (the WebSocket upgrade or the
    ``initialize`` POST) with an HTTP status, 401 without the right ``Authorization`` header, 403
    for an ``Origin`` not allowed; its text is one line saying which and what to pass instead."""
    if not url.startswith(("ws://", "wss://", "http://", "https://")):
        raise ValueError(f"--url takes ws://, wss://, http:// or https://, not {url!r}")
    await reach(url)
    return await _run(
        remote_target(url, dict(headers or {})),
        [url],
        protocol=protocol,
        only=only,
        skip=skip,
        turn_timeout=turn_timeout,
        start_timeout=start_timeout,
        script=_script(script, prompt),
        cwd=cwd,
        progress=progress,
        http=url.startswith(("http://", "https://")),
    )


async def _run(
    open_target: Any,
    label: list[str],
    *,
    protocol: int,
    only: Sequence[str],
    skip: Sequence[str],
    turn_timeout: float,
    start_timeout: float,
    script: Script,
    cwd: str | None,
    progress: Callable[[str], None] | None,
    http: bool = False,
    process: bool = False,
) -> Report:
    if protocol not in (1, 2):
        raise ValueError(f"protocol must be 1 or 2, got {protocol}")
    variant = f"v{protocol}"
    schema = wire_schema(variant)
    seen = Observations()
    report = Report(label, protocol)

    budget: list[trio.CancelScope] = []  # the running check's time bound, which each agent's start extends

    async def with_peer(body: Callable[[WirePeer], Any]) -> Any:
        async def prepared(peer: WirePeer) -> Any:
            peer.files[ctx.notes_path] = NOTES_TEXT
            return await body(peer)

        for scope in budget:
            scope.deadline += start_timeout
        return await run_with_peer(open_target, schema, seen, prepared, start_timeout=start_timeout)

    ctx = Context(protocol, with_peer, cwd or default_cwd(), turn_timeout, script, http, start_timeout)
    gate: str | None = None
    for check in CHECKS:
        if not _selected(check.name, only, skip):
            continue
        if protocol not in check.protocols:
            why = f"protocol {protocol} has no such rule (its client capabilities and methods differ)"
            report.findings.append(Finding(check.name, check.title, Status.SKIP, why, check.source, 0.0))
            continue
        if gate is not None:
            report.findings.append(Finding(check.name, check.title, Status.SKIP, gate, check.source, 0.0))
            continue
        if progress is not None:
            progress(check.name)
        finding, slow_start = await _run_one(check, ctx, turn_timeout, budget)
        report.findings.append(finding)
        if check.name == GATE and finding.status is not Status.PASS:
            # the rest would only repeat it: a refused initialize, or a connection in another version
            gate = f"{GATED} ({finding.observed})" if slow_start else GATED
    whole = {
        "stdout.jsonrpc": (seen.not_jsonrpc, f"{seen.messages} messages, every line JSON-RPC"),
        "schema.valid": (seen.invalid, f"{seen.messages} messages valid against {variant}"),
        "session.tool-call-ids": (
            seen.tool_calls,
            f"{seen.tool_call_count} tool calls reported; every tool_call_update matched its tool_call",
        ),
        "capabilities.client": (seen.uncapable, "no fs/* or terminal/* request beyond the advertised capabilities"),
        "lifecycle.stderr": (seen.stderr, f"{seen.stderr_lines} stderr lines, all text logs"),
    }
    for name, title, source in WHOLE_RUN:
        if not _selected(name, only, skip):
            continue
        problems, fine = whole[name]
        if gate is not None and not problems:  # the few messages of a stopped run pass nothing
            report.findings.append(Finding(name, title, Status.SKIP, gate, source.format(variant=variant), 0.0))
            continue
        if name == "session.tool-call-ids" and (protocol >= 2 or not (seen.tool_call_count or problems)):
            why = (
                "protocol 2: tool_call_update is an upsert keyed by toolCallId (docs/protocol/v2/tool-calls.mdx)"
                if protocol >= 2
                else "no tool call was reported (a --script prompt expecting tool_call makes one)"
            )
            report.findings.append(Finding(name, title, Status.SKIP, why, source.format(variant=variant), 0.0))
            continue
        if name == "lifecycle.stderr" and not process:
            why = "no agent process: nothing to read on stderr"
            report.findings.append(Finding(name, title, Status.SKIP, why, source, 0.0))
            continue
        details: tuple[str, ...] = ()
        if not seen.messages and not problems:
            status, observed = Status.SKIP, "no message was received"
        elif problems and name == "lifecycle.stderr":
            status, observed = Status.WARN, f"{problems[0]} ({len(problems)} such lines)"
        elif problems:
            distinct = list(dict.fromkeys(problems))
            times = f" (seen {len(problems)} times)" if len(problems) > 1 and len(distinct) == 1 else ""
            more = f" (and {len(distinct) - 1} other problems, listed below)" if len(distinct) > 1 else ""
            status, observed = Status.FAIL, f"{distinct[0]}{times}{more}"
            details = tuple(distinct) if len(distinct) > 1 else ()
        else:
            status, observed = Status.PASS, fine
        report.findings.append(
            Finding(name, title, status, observed, source.format(variant=variant), 0.0, details=details)
        )
    report.findings = [replace(f, requirements=requirements_of(f.name, protocol)) for f in report.findings]
    return report


async def _run_one(
    check: Check, ctx: Context, turn_timeout: float, budget: list[trio.CancelScope]
) -> tuple[Finding, bool]:
    """The check's finding, and whether it failed for the agent's start-up time (``Result.start_timeout``)."""
    start = trio.current_time()
    result: Result
    bound = turn_timeout * check.turns + 60
    try:
        with trio.fail_after(bound) as scope:
            budget[:] = [scope]
            try:
                result = await check.run(ctx)
            finally:
                budget.clear()
    except trio.TooSlowError:
        took = trio.current_time() - start
        result = Result(Status.FAIL, f"no verdict within {took:.0f} s ({check.turns} x --turn-timeout, plus 60 s)")
    except OSError:
        raise
    except Exception as exc:  # the check's own error (an agent that broke its pipe, ...)
        stopping = (AgentUnreachable, AgentExited)
        unreachable = exc.subgroup(stopping) if isinstance(exc, ExceptionGroup) else None
        if unreachable is not None:  # a server that refused a check's connection, an agent that died, in a nursery
            first: BaseException = unreachable
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None
        result = Result(Status.FAIL, f"the check could not finish: {exc!r}"[:300])
    took = trio.current_time() - start
    return Finding(check.name, check.title, result.status, result.observed, check.source, took), result.start_timeout


def run(command: Sequence[str], **options: Any) -> Report:
    """:func:`run_checks` in a new trio run (for scripts)."""
    result: Report = trio.run(functools.partial(run_checks, command, **options))
    return result


__all__ = [
    "BEHAVIOURS",
    "CHECKS",
    "CLIENT_CHECKS",
    "NOTES_TEXT",
    "REQUIREMENTS",
    "START_TIMEOUT",
    "TCK_IDS",
    "TCK_SOURCES",
    "WHOLE_RUN",
    "AgentExited",
    "AgentUnreachable",
    "Check",
    "ClientCheck",
    "Finding",
    "Report",
    "Result",
    "Script",
    "ScriptError",
    "ScriptedPrompt",
    "StartTimeout",
    "Status",
    "run",
    "run_checks",
    "run_checks_in_memory",
    "run_checks_remote",
    "run_client_checks",
]

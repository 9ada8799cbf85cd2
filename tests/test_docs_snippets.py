"""Every code block of the README and of the documentation site, as printed: a new user copies them.

Collected: the fenced blocks of README.md, docs/site/**/*.md and the files the site includes
(``--8<-- "examples/llm_agent/README.md"``), each with its file and line.

- ``python``: each runs, unchanged, in a subprocess (``sys.executable``) in a fresh directory.  A
  complete program needing nothing else runs as it is.  Any other block is registered in
  :data:`PYTHON` by its file and (the start of) its first line: :class:`Saved` for a file the docs
  tell the reader to save (``my_agent.py``), which runs in the programs that use it; or a function
  returning the :class:`Program` s that run it: the files the docs had the reader save beside it,
  for a fragment a harness that embeds its text (in its host example, in a method, in ``async def
  main``), and what the run prints.  The guides repeat the README's examples: an identical program
  runs once.
- ``sh``: every command line of this project is parsed by that program's own argument parser
  (``python -m acp_trio.demo|check|bridge``, ``python -m examples.llm_agent``; ``nox -s`` against
  the sessions of noxfile.py; ``pip install`` against pyproject.toml's name, version and extras),
  and the cheap local ones (:data:`RUN`) run.  The rest say why not (:data:`PARSE_ONLY`).
- ``toml`` and ``json``: parsed; the checker's script is loaded by the checker's loader and run on
  the demo agent; the Zed settings' arguments go through the LLM agent's parser.
- ``yaml``: a GitHub Actions workflow, checked for shape (with PyYAML, when installed): each step
  uses a pinned action or runs commands, and each command of this project passes its parser.
- ``text``: sample output, left alone.

:func:`test_every_block_is_covered` fails on a block none of this covers, saying how to register it.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import fnmatch
import importlib
import importlib.util
import io
import json
import os
import re
import shlex
import subprocess
import symtable
import sys
import textwrap
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "docs" / "site"
LANGUAGES = ("python", "sh", "toml", "json", "yaml", "text")

pytestmark = pytest.mark.one_interpreter  # the docs as printed, not the interpreter's behaviour


# -- the blocks ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository, e.g. "docs/site/guides/remote.md"
    line: int  # of the opening fence
    lang: str
    text: str  # without the fence's indentation (a block in a list item), ending with a newline
    prose: str  # the text between the previous block (or the top of the file) and this one

    @property
    def first(self) -> str:
        return next((line for line in self.text.splitlines() if line.strip()), "")

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


FENCE = re.compile(r"^( *)(`{3,}|~{3,}) *([\w+-]*)")
INCLUDE = re.compile(r'^-{2}8<-{2}\s+"([^"]+)"\s*$', re.M)


def doc_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted(SITE.rglob("*.md"))]
    for path in list(files):
        for included in INCLUDE.findall(path.read_text(encoding="utf-8")):
            if ROOT / included not in files:
                files.append(ROOT / included)
    return files


def read_blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = prose_start = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, fence, lang = len(match[1]), match[2], match[3]
        end = next(
            (
                j
                for j in range(i + 1, len(lines))
                if re.fullmatch(rf" *{re.escape(fence[0])}{{{len(fence)},}} *", lines[j])
            ),
            None,
        )
        assert end is not None, f"{path}:{i + 1}: a fence that is never closed"
        body = "".join(
            line[indent:] + "\n" if line[:indent].strip() == "" else line + "\n" for line in lines[i + 1 : end]
        )
        rel = path.relative_to(ROOT).as_posix()
        found.append(Block(rel, i + 1, lang, body, "\n".join(lines[prose_start:i])))
        i = prose_start = end + 1
    return found


BLOCKS = [block for path in doc_files() for block in read_blocks(path)]


def blocks(lang: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang == lang]


def doc(path: str, first: str) -> Block:
    """The block of ``path`` whose first line starts with ``first``."""
    matching = [b for b in BLOCKS if b.path == path and b.first.startswith(first)]
    if len(matching) != 1:
        raise LookupError(f"{len(matching)} blocks of {path} start with {first!r} (expected one)")
    return matching[0]


def shown(block: Block) -> list[str]:
    """Regular expressions for what the block's comments say it prints: ``# "text (...)"``, where
    ``...`` stands for anything and a number of three digits or more (a pid) for any number."""
    patterns = []
    for text in re.findall(r'#\s*"(.*)"\s*$', block.text, re.M):
        pattern = re.escape(text).replace(re.escape("..."), ".*")
        patterns.append(re.sub(r"\d{3,}", r"\\d+", pattern))
    return patterns


# -- python: what runs each block ------------------------------------------------------------------


@dataclass(frozen=True)
class Saved:
    """A block the docs tell the reader to save as ``name``: the programs that use it run it."""

    name: str


@dataclass(frozen=True)
class Program:
    """Files written into a fresh directory, then ``[sys.executable, *argv]`` run there."""

    files: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]
    stdout: tuple[str, ...] | None = None  # the lines it prints, exactly
    patterns: tuple[str, ...] = ()  # regular expressions that must match a line of stdout
    check: Callable[[subprocess.CompletedProcess[str]], None] | None = None  # more about the run
    variant: str = ""  # what this run shows, when a block has several
    timeout: float = 90


Spec = Saved | Callable[[Block], list[Program]]
PYTHON: dict[tuple[str, str], Spec] = {}
"""How each python block that does not run as it stands is run: ``(file, start of first line)``."""


def register(path: str, first: str) -> Callable[[Callable[[Block], list[Program]]], Callable[[Block], list[Program]]]:
    def add(spec: Callable[[Block], list[Program]]) -> Callable[[Block], list[Program]]:
        PYTHON[(path, first)] = spec
        return spec

    return add


def spec_of(block: Block) -> Spec | None:
    found = [spec for (path, first), spec in PYTHON.items() if path == block.path and block.first.startswith(first)]
    return found[0] if found else None


def as_is(block: Block, checks: str = "", name: str = "snippet.py", **more: Any) -> Program:
    """The block as a program of its own; ``checks``: code run after it, asserting what its comments show."""
    text = block.text + (f"\n\n# what the comments above show\n{textwrap.dedent(checks)}" if checks else "")
    return Program(files=((name, text),), argv=(name,), **more)


def embed(template: str, block: Block, indent: int) -> str:
    """``template`` with ``{block}`` replaced by the block's text, indented by ``indent`` spaces."""
    return template.replace("{block}\n", textwrap.indent(block.text, " " * indent))


README, QUICKSTART = "README.md", "docs/site/quickstart.md"
GUIDES = "docs/site/guides/"

PYTHON[(README, "import os")] = Saved("my_agent.py")
PYTHON[(GUIDES + "agent.md", "import os")] = Saved("my_agent.py")
PYTHON[(QUICKSTART, "from acp_trio import neutral as n")] = Saved("hello_agent.py")


def _notes_agent(block: Block) -> tuple[str, str]:
    """``my_agent.py`` as the reader saved it: the README's for the README, the agent guide's for the guides."""
    return ("my_agent.py", doc(README if block.path == README else GUIDES + "agent.md", "import os").text)


@register(GUIDES + "agent.md", "# the same agent, on protocol version 1")
def _v1_agent_through_the_adapter(block: Block) -> list[Program]:
    """The guide's v1-only agent, driven by the demo client in protocol version 2 through
    ``python -m acp_trio.adapt --speak 2`` (the guide's command, ``python`` being this interpreter)."""
    [line] = doc(GUIDES + "agent.md", "python -m acp_trio.demo --protocol 2 --agent").text.splitlines()
    words = [sys.executable if word == "python" else word for word in shlex.split(line)]
    return [
        Program(
            files=(("my_v1_agent.py", block.text),),
            argv=tuple(words[1:]),
            patterns=(
                r"^connected to Notes \(v1\), protocol version 2$",
                r"^  \[state requires_action\]$",
                r"^agent: notes\.txt starts with: ",
                r"^\[turn ended: end_turn\]$",
            ),
        )
    ]


MODE_AGENT = """\
import trio

from acp_trio import neutral as n
from acp_trio.testing import FakeClient, pair

{block}

class ModeAgent(n.Agent):
    def config_options(self, session: n.Session) -> tuple[n.ConfigOption, ...]:
        return (MODE,)

    async def prompt(self, turn: n.Turn) -> n.StopReason:
        await turn.say(f"mode {turn.session.config['mode']}")
        return "end_turn"


async def main() -> None:
    for protocol in (1, 2):
        client = FakeClient()
        async with pair(ModeAgent(), client, protocol=protocol) as p:
            sid = await client.new_session("/w")
            await client.prompt(sid, "hi")
        [answer] = [e.message["result"] for e in p.transcript if "sessionId" in e.message.get("result", {})]
        options = [o.get("configId", o.get("id")) for o in answer["configOptions"]]
        modes = [m["id"] for m in answer.get("modes", {}).get("availableModes", [])]
        print(protocol, options, modes, client.states[sid].messages[-1].text)


trio.run(main)
"""


@register(GUIDES + "agent.md", "MODE = n.mode_option(")
def _mode_option(block: Block) -> list[Program]:
    """The mode option, given by an agent's ``config_options``: v1 gets it as an option and as modes,
    v2 as an option; a new session's value is ``current``."""
    return [
        Program(
            files=(("mode_agent.py", MODE_AGENT.replace("{block}\n", block.text)),),
            argv=("mode_agent.py",),
            stdout=("1 ['mode'] ['ask', 'auto'] mode ask", "2 ['mode'] [] mode ask"),
        )
    ]


STORED_AGENT = """\
import os

import trio

from acp_schema import v2
from acp_trio.testing import FakeClient, pair
from my_agent import NotesAgent

{block}

async def main() -> None:
    cwd = os.path.abspath("work")
    os.makedirs(cwd)
    with open(os.path.join(cwd, "notes.txt"), "w", encoding="utf-8") as f:
        f.write("buy milk\\n")
    client = FakeClient(permission="allow")
    async with pair(agent, client, protocol=2):  # read from disk (v2), kept in sessions.db
        sid = await client.new_session(cwd)
        await client.prompt(sid, "What is in my notes?")
    for protocol in (1, 2):  # a later process's agent, the same file
        later = NotesAgent()
        later.store = SqliteSessionStore("sessions.db")
        again = FakeClient()
        async with pair(later, again, protocol=protocol) as p:
            if protocol == 1:
                await p.client_conn.agent.session_load(v1.LoadSessionRequest(session_id=sid, cwd=cwd, mcp_servers=[]))
            else:
                replay = v2.ResumeSessionRequest(session_id=sid, cwd=cwd, replay_from=v2.StartReplayFrom())
                await p.client_conn.agent.session_resume(replay)
        print(protocol, [m.text for m in again.states[sid].messages])


trio.run(main)
"""


@register(GUIDES + "agent.md", "from acp_trio.session_store import SqliteSessionStore")
def _stored_sessions(block: Block) -> list[Program]:
    """The guide's ``my_agent.py`` with a store: a session made on v2 is loaded on v1 and resumed on
    v2 (replayed from the start) by another agent object on the same file."""
    program = STORED_AGENT.replace("{block}\n", block.text).replace(
        "from acp_schema import v2", "from acp_schema import v1, v2"
    )
    user, agent = "What is in my notes?", ["Let me read your notes.", "notes.txt starts with: buy milk"]
    return [
        Program(
            files=(_notes_agent(block), ("stored.py", program)),
            argv=("stored.py",),
            stdout=(f"1 {[user, *agent]}", f"2 {[user, *agent]}"),
        )
    ]


@register(README, "import functools")
@register(GUIDES + "client.md", "import functools")
def _notes_client(block: Block) -> list[Program]:
    return [
        Program(
            files=(_notes_agent(block), ("my_client.py", block.text)),
            argv=("my_client.py",),
            stdout=(
                "tool Read notes.txt: completed",
                "agent: notes.txt starts with: buy milk",
                "stop reason: end_turn",
            ),
        )
    ]


def _test_kit_passed(run: subprocess.CompletedProcess[str]) -> None:
    """Every check of the checker, in each protocol version, is a test that passes or skips (with its
    reason), and both tests of the example pass."""
    from acp_trio.check import CHECKS, WHOLE_RUN

    summary = run.stdout.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}
    assert set(counts) <= {"passed", "skipped"}, run.stdout
    assert counts["passed"] + counts.get("skipped", 0) == 2 * (len(CHECKS) + len(WHOLE_RUN)) + 2, run.stdout
    for test in ("test_it_reads_the_notes_once_allowed", "test_a_client_can_be_tested_against_a_recorded_agent"):
        assert f"PASSED test_my_agent.py::{test}" in run.stdout, run.stdout
    for conformance in ("test_conformance", "test_conformance_v2"):  # the neutral agent replays a session in both
        assert f"PASSED test_my_agent.py::{conformance}[session.load]" in run.stdout, run.stdout
    assert "session.set-mode: protocol 2 has no such rule" in run.stdout, run.stdout


@register(README, "from pathlib import Path")
@register(GUIDES + "conformance.md", "from pathlib import Path")
def _test_kit(block: Block) -> list[Program]:
    """Run by pytest in a process as a user runs it: no ``pytest.ini``."""
    return [
        Program(
            files=(_notes_agent(block), ("test_my_agent.py", block.text)),
            argv=("-m", "pytest", "-q", "-rps", "-p", "no:cacheprovider", "test_my_agent.py"),
            check=_test_kit_passed,
            timeout=180,
        )
    ]


def _checker_test_passed(run: subprocess.CompletedProcess[str]) -> None:
    assert re.search(r"^1 passed", run.stdout, re.M), run.stdout


@register(GUIDES + "conformance.md", "import sys")
def _checker_as_a_test(block: Block) -> list[Program]:
    """The checker run by pytest on the agent guide's ``my_agent.py``, a real process per check."""
    return [
        Program(
            files=(_notes_agent(block), ("test_conformance.py", block.text)),
            argv=("-m", "pytest", "-q", "-p", "no:cacheprovider", "test_conformance.py"),
            check=_checker_test_passed,
            timeout=300,
        )
    ]


@register(QUICKSTART, "import os")
def _hello_client(block: Block) -> list[Program]:
    hello_agent = doc(QUICKSTART, "from acp_trio import neutral as n").text
    return [
        Program(
            files=(("hello_agent.py", hello_agent), ("client.py", block.text)), argv=("client.py",), stdout=("Hello!",)
        )
    ]


@register(QUICKSTART, "from acp_schema.v1 import METHODS, ImageContentBlock")
def _quickstart_types(block: Block) -> list[Program]:
    checks = """\
        from acp_schema.v1 import PromptResponse

        assert wire["sessionId"] == "sess_1" and [part["type"] for part in wire["prompt"]] == ["text", "image"]
        assert (spec.method, spec.side, spec.kind) == ("session/prompt", "agent", "request")
        assert (spec.params_type, spec.result_type, spec.unstable) == (PromptRequest, PromptResponse, False)
        """
    return [as_is(block, checks, stdout=())]


@register(GUIDES + "types.md", "from acp_schema.v1 import PromptRequest")
def _types(block: Block) -> list[Program]:
    checks = """\
        from acp_schema.v1 import PromptResponse

        assert wire["sessionId"] == "sess_1" and [part["type"] for part in wire["prompt"]] == ["text", "image"]
        assert isinstance(raw, bytes) and b'", "' not in raw and loads(raw, PromptRequest) == req
        assert (spec.method, spec.side, spec.kind) == ("session/prompt", "agent", "request")
        assert (spec.params_type, spec.result_type, spec.unstable) == (PromptRequest, PromptResponse, False)
        """
    return [as_is(block, checks, stdout=())]


@register(GUIDES + "types.md", "from acp_schema.v1 import AgentCapabilities")
def _types_defaults(block: Block) -> list[Program]:
    checks = """\
        from acp_schema.v1 import PromptCapabilities
        from acp_trio import UNSET

        assert caps.load_session is UNSET and not caps.load_session
        assert value_or_default(caps, "load_session") is False
        prompt_capabilities = value_or_default(caps, "prompt_capabilities")
        assert isinstance(prompt_capabilities, PromptCapabilities) and prompt_capabilities.image is False
        """
    return [as_is(block, checks, stdout=())]


@register(GUIDES + "versioning.md", "import acp_schema")
def _versioning(block: Block) -> list[Program]:
    [version] = re.findall(r'SCHEMA_PACKAGE_VERSION  # "([^"]+)"', block.text)
    checks = f"""\
        import hashlib

        assert acp_schema.SCHEMA_PACKAGE_VERSION == {version!r}
        assert v1.SCHEMA_VERSION == acp_schema.SCHEMA_PACKAGE_VERSION
        schema = {str(ROOT / "schema" / "v1" / "schema.json")!r}
        with open(schema, "rb") as f:
            assert v1.SCHEMA_SHA256 == hashlib.sha256(f.read()).hexdigest()
        """
    return [as_is(block, checks, stdout=())]


VERSIONS_AGENTS = """\
from acp_schema import v1, v2


class MyV1Agent:
    agent_info = v1.Implementation(name="my-v1-agent", version="1.0")

    def __init__(self, conn: object) -> None:
        self.conn = conn


class MyV2Agent:
    agent_info = v2.Implementation(name="my-v2-agent", version="1.0")

    def __init__(self, conn: object) -> None:
        self.conn = conn


{block}
"""
VERSIONS_CLIENT = """\
import sys

import trio

from acp_schema import v1, v2
from acp_trio import StandardClient, spawn_agent


async def main() -> None:
    for variants in ([v1], [v2], [v1, v2]):
        client = StandardClient.for_versions(*variants)
        async with spawn_agent(sys.executable, ["my_agents.py"], client=client) as conn:
            answer = await conn.handler.initialize(timeout=30)
            info = answer.agent_info if conn.protocol_version == 1 else answer.info
            print(conn.protocol_version, info.name)


trio.run(main)
"""


@register(GUIDES + "versions.md", "from acp_schema import v1, v2")
def _both_versions(block: Block) -> list[Program]:
    """The agent file: the two classes the prose names, then the block; a v1, a v2 and a v1+v2 client."""
    return [
        Program(
            files=(("my_agents.py", embed(VERSIONS_AGENTS, block, 0)), ("clients.py", VERSIONS_CLIENT)),
            argv=("clients.py",),
            stdout=("1 my-v1-agent", "2 my-v2-agent", "2 my-v2-agent"),
        )
    ]


@register(GUIDES + "remote.md", "import functools")
def _websocket(block: Block) -> list[Program]:
    return [
        Program(
            files=(_notes_agent(block), ("my_remote.py", block.text)),
            argv=("my_remote.py",),
            stdout=("agent: notes.txt starts with: buy milk", "stop reason: end_turn"),
        )
    ]


@register(GUIDES + "remote.md", "from acp_trio.transports.cookies import CookieStore")
def _streamable_http(block: Block) -> list[Program]:
    """ "The example above needs only its ``async with`` line changed": the block's lines (its ``...``
    being the body that follows) in place of the WebSocket example's ``async with`` line."""
    host = doc(GUIDES + "remote.md", "import functools").text.splitlines(keepends=True)
    [at] = [i for i, line in enumerate(host) if line.lstrip().startswith("async with connect_websocket(")]
    *lines, body = block.text.splitlines(keepends=True)
    assert body.strip() == "..." and lines[-1].startswith("async with "), block.text
    indent = " " * (len(host[at]) - len(host[at].lstrip()))
    program = "".join([*host[:at], *(indent + line if line.strip() else line for line in lines), *host[at + 1 :]])
    return [
        Program(
            files=(_notes_agent(block), ("my_remote_http.py", program)),
            argv=("my_remote_http.py",),
            stdout=("agent: notes.txt starts with: buy milk", "stop reason: end_turn"),
        )
    ]


CATCHING = """\
import os
import sys
from pathlib import Path

import trio

import acp_trio
from acp_schema import v1
from acp_trio import StandardClient, spawn_agent

{setup}

async def main() -> None:
{block}


trio.run(main)
"""
AGENT_THAT_EXITS = """\
# a `my-agent` on PATH that exits at once, code 1
bin_dir = Path("bin").resolve()
bin_dir.mkdir()
(bin_dir / "my-agent").write_text("#!/bin/sh\\necho 'my-agent: no API key' >&2\\nexit 1\\n", encoding="utf-8")
(bin_dir / "my-agent").chmod(0o755)
os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
"""


@register(GUIDES + "client.md", "try:")
@register(GUIDES + "runtime.md", "try:")
def _catching(block: Block) -> list[Program]:
    """In ``async def main``: as printed, where no ``my-agent`` is on PATH; then with a ``my-agent``
    that exits with code 1, the ``...`` standing for a request (``initialize``) in the block."""
    not_found, closed = shown(block)
    body = "        await conn.agent.initialize(v1.InitializeRequest(protocol_version=1), timeout=30)\n"
    assert "        ...\n" in block.text, block.text
    with_request = Block(block.path, block.line, block.lang, block.text.replace("        ...\n", body), "")
    return [
        Program(
            files=(("catching.py", embed(CATCHING.replace("{setup}\n", ""), block, 4)),),
            argv=("catching.py",),
            patterns=(f"^{not_found}$",),
            variant="no such command",
        ),
        Program(
            files=(("catching.py", embed(CATCHING.replace("{setup}\n", AGENT_THAT_EXITS), with_request, 4)),),
            argv=("catching.py",),
            patterns=(f"^{closed}$", "my-agent: no API key"),
            variant="the agent exits",
        ),
    ]


TERMINAL_AGENT = """\
import os
from pathlib import Path

import trio

from acp_schema import v1
from acp_trio import AgentSideConnection, StandardClient, open_memory_pair

# the project's tests: a `pytest` on PATH that says what it was asked
Path("bin").mkdir()
Path("bin/pytest").write_text('#!/bin/sh\\necho "1 passed (pytest $*)"\\n', encoding="utf-8")
Path("bin/pytest").chmod(0o755)
os.environ["PATH"] = os.path.abspath("bin") + os.pathsep + os.environ["PATH"]


class TestingAgent:
    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="sess_1")

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        sid = params.session_id
{block}
        print("exit code:", exit_status.exit_code)
        print(output.output.strip().splitlines()[-1])
        return v1.PromptResponse(stop_reason="end_turn")


async def main() -> None:
    async with open_memory_pair(TestingAgent, StandardClient) as (_, conn):
        client: StandardClient = conn.handler
        await client.initialize(timeout=30)
        sid = await client.new_session(os.getcwd(), timeout=30)
        await client.prompt(sid, "Run the tests.", timeout=60)


trio.run(main)
"""


@register(GUIDES + "agent.md", "from acp_trio import open_terminal")
def _terminal(block: Block) -> list[Program]:
    """In an agent's ``session_prompt`` (``self.conn``, ``sid``), against a ``StandardClient`` in memory
    whose terminal runs ``pytest -q`` (a stand-in on PATH)."""
    return [
        Program(
            files=(("terminal_agent.py", embed(TERMINAL_AGENT, block, 8)),),
            argv=("terminal_agent.py",),
            stdout=("exit code: 0", "1 passed (pytest -q)"),
        )
    ]


MCP_SERVER = """\
import json
import sys

# a stdio MCP server with one tool, in plain JSON-RPC (no SDK to import)
TOOL = {"name": "count_words", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        version = message["params"]["protocolVersion"]
        result = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": {"name": "notes-tools", "version": "1"}}
    elif message.get("method") == "tools/list":
        result = {"tools": [TOOL]}
    else:
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""
MCP_AGENT = """\
import os
import sys

import trio

from acp_schema import v1
from acp_trio import AgentSideConnection, StandardClient, open_memory_pair


class McpAgent:
    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        session_id = "sess_1"
{block}
        print("connected:", sorted(servers.sessions), [tool.name for tool in tools.tools])
        print("failed:", sorted(servers.errors))
        self.servers = servers
        return v1.NewSessionResponse(session_id=session_id)


async def main() -> None:
    servers = [
        v1.McpServerStdio(name="notes-tools", command=sys.executable, args=["tools_server.py"], env=[]),
        v1.McpServerStdio(name="missing", command=os.path.abspath("no-such-server"), args=[], env=[]),
    ]
    async with open_memory_pair(McpAgent, StandardClient) as (agent_conn, conn):
        await conn.handler.initialize(timeout=30)
        await conn.agent.session_new(v1.NewSessionRequest(cwd=os.getcwd(), mcp_servers=servers), timeout=60)
    print("closed with the connection:", agent_conn.handler.servers.closed)


trio.run(main)
"""


@register(GUIDES + "batteries.md", "from acp_trio.mcp import open_mcp_servers")
def _mcp(block: Block) -> list[Program]:
    """In an agent's ``session_new`` (``self.conn``, ``session_id``, ``params``), given one stdio MCP
    server (started in the session's ``cwd``) and one that cannot start."""
    return [
        Program(
            files=(("mcp_agent.py", embed(MCP_AGENT, block, 8)), ("tools_server.py", MCP_SERVER)),
            argv=("mcp_agent.py",),
            stdout=(
                "connected: ['notes-tools'] ['count_words']",
                "failed: ['missing']",
                "closed with the connection: True",
            ),
        )
    ]


def not_runnable_as_is(block: Block) -> str | None:
    """Why the block cannot run as a program of its own, or None: a syntax error (a top-level
    ``await`` or ``async with``), names nothing defines, modules that are not installed (the reader's
    own files)."""
    try:
        table = symtable.symtable(block.text, block.where, "exec")
        tree = ast.parse(block.text)
    except SyntaxError as exc:
        return f"it does not compile alone ({exc.msg}, its line {exc.lineno})"
    defined = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}

    def used(t: symtable.SymbolTable) -> Iterator[str]:
        """The names read at module level, or in a nested scope that resolve there."""
        for s in t.get_symbols():
            if s.is_referenced() and (t.get_type() == "module" or s.is_global()):
                yield s.get_name()
        for child in t.get_children():
            yield from used(child)

    undefined = sorted({n for n in used(table) if n not in defined and not hasattr(builtins, n)})
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    missing = sorted(m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None)
    reasons = [f"it uses {', '.join(undefined)}, which nothing in it defines"] if undefined else []
    reasons += [f"it imports {', '.join(missing)}, not installed (a file the reader saved?)"] if missing else []
    return "; ".join(reasons) or None


def programs_of(block: Block) -> list[Program]:
    spec = spec_of(block)
    if isinstance(spec, Saved):
        return []
    if spec is not None:
        return spec(block)
    if not_runnable_as_is(block) is None:
        return [as_is(block)]
    return []


def all_programs() -> tuple[dict[Program, list[str]], dict[str, list[Program]], list[str]]:
    """Each distinct program with the blocks it runs; each block's programs; the registrations that fail."""
    found: dict[Program, list[str]] = {}
    by_block: dict[str, list[Program]] = {}
    errors = []
    for block in blocks("python"):
        try:
            by_block[block.where] = programs_of(block)
        except (LookupError, AssertionError, ValueError) as exc:
            errors.append(f"{block.where}: its registration in PYTHON fails: {exc!r}")
            continue
        for program in by_block[block.where]:
            found.setdefault(program, []).append(block.where + (f" ({program.variant})" if program.variant else ""))
    return found, by_block, errors


# -- the pydantic-ai guide (acp_trio.integrations.pydantic_ai) --------------------------------------

PYDANTIC_AI = GUIDES + "pydantic-ai.md"
PYDANTIC_AI_DRIVER = """\
import sys

import trio

from acp_schema import v1, v2
from acp_trio import spawn_agent
from acp_trio.testing import FakeClient


async def main() -> None:
    for protocol, variant in ((1, v1), (2, v2)):
        client = FakeClient(capabilities={})  # no fs: the test model would call its tools
        async with spawn_agent(sys.executable, ["serve.py"], client={variant: client.bind}):
            answer = await client.initialize(timeout=60)
            session = await client.new_session("/tmp")
            stop_reason = await client.prompt(session, "hi", timeout=60)
        print(answer.protocol_version, stop_reason, client.states[session].messages[-1].text)


trio.run(main)
"""


@register(PYDANTIC_AI, "import trio")
def _pydantic_ai_quick_start(block: Block) -> list[Program]:
    """The quick start as printed, printing what its comments show."""
    return [as_is(block, stdout=tuple(re.findall(r'#\s*"(.*)"\s*$', block.text, re.M)))]


@register(PYDANTIC_AI, "from acp_trio import neutral as n")
def _pydantic_ai_options(block: Block) -> list[Program]:
    return [as_is(block, stdout=tuple(re.findall(r'#\s*"(.*)"\s*$', block.text, re.M)))]


@register(PYDANTIC_AI, "# serve.py")
def _pydantic_ai_embedded(block: Block) -> list[Program]:
    """The embedding example saved as serve.py, served over stdio to a client of each version."""
    return [
        Program(
            files=(("serve.py", block.text), ("drive.py", PYDANTIC_AI_DRIVER)),
            argv=("drive.py",),
            stdout=("1 end_turn success (no tool calls)", "2 end_turn success (no tool calls)"),
        )
    ]


PROGRAMS, PROGRAMS_OF, PROGRAM_ERRORS = all_programs()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], Path]:
    """A fresh directory per run, all under one temporary directory of the module."""
    root = tmp_path_factory.mktemp("docs-snippets").resolve()
    counter = iter(range(1_000_000))
    return lambda: root / f"run{next(counter)}"


@pytest.mark.parametrize("program", list(PROGRAMS), ids=[" = ".join(where) for where in PROGRAMS.values()])
def test_python_block_runs_as_printed(program: Program, workdir: Callable[[], Path]) -> None:
    where = workdir()
    where.mkdir()
    for name, text in program.files:
        (where / name).write_text(text, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, *program.argv],
        capture_output=True,
        text=True,
        timeout=program.timeout,
        cwd=where,
        check=False,
    )
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    if program.stdout is not None:
        assert run.stdout.splitlines() == list(program.stdout), run.stderr
    for pattern in program.patterns:
        assert re.search(pattern, run.stdout, re.M), f"{pattern!r} not in:\n{run.stdout}\n{run.stderr}"
    if program.check is not None:
        program.check(run)


@pytest.mark.parametrize(
    ("guide", "section"),
    [
        ("agent.md", "Write an agent"),
        ("client.md", "Write a client"),
        ("conformance.md", "Run it, check it, test it"),
    ],
)
def test_a_guide_carries_the_readme_example_unchanged(guide: str, section: str) -> None:
    """The guides repeat the README's examples: one change made in one place only fails here."""
    readme = ROOT.joinpath("README.md").read_text(encoding="utf-8")
    header = readme[: readme.index(f"\n## {section}\n")].count("\n") + 2
    example = next(b for b in blocks("python") if b.path == README and b.line > header)
    assert example.text in [b.text for b in blocks("python") if b.path == GUIDES + guide]


# -- sh: this project's commands ----------------------------------------------------------------------

PROJECT_MODULES = {
    "acp_trio.demo": ("acp_trio.demo.__main__", "main"),
    "acp_trio.check": ("acp_trio.check.__main__", "main"),
    "acp_trio.bridge": ("acp_trio.bridge", "main"),
    "acp_trio.host": ("acp_trio.host._cli", "main"),
    "acp_trio.adapt": ("acp_trio.adapt", "main"),
    "examples.llm_agent": ("examples.llm_agent.__main__", "parse_args"),
}

RUN: dict[str, tuple[str, ...]] = {
    # the line as printed (without its comment): what its output must show
    "python -m acp_trio.demo": (
        r"^connected to acp-trio demo agent, protocol version 1$",
        r"^  \[permission\] .*\(allow_once\)$",
        r"^\[turn ended: end_turn\]$",
    ),
    "python -m acp_trio.demo --protocol 2": (
        r"^connected to acp-trio demo agent, protocol version 2$",
        r"^  \[state running\]$",
        r"^\[turn ended: end_turn\]$",
    ),
    "python -m acp_trio.demo --agent -- python -m acp_trio.adapt --speak 1 -- python -m acp_trio.demo --serve-agent "
    "--protocol 2": (
        r"^connected to acp-trio demo agent, protocol version 1$",
        r"^  \[permission\] .*\(allow_once\)$",
        r"^\[turn ended: end_turn\]$",
    ),
    "python -m acp_trio.demo --deny": (
        r"^  \[permission\] .*\(reject_once\)$",
        r"^  \[tool call_read\] failed$",
        r"^\[turn ended: end_turn\]$",
    ),
}
"""The local commands cheap enough to run here, as printed."""

READERS_AGENT = "my_agent.py, the reader's: tests/test_readme_new_user.py runs the README's line in a fresh venv"
NETWORK = "a fixed port on the network: tests/test_processes_demo.py and tests/test_bridge.py run it on a free one"
PARSE_ONLY: dict[str, str] = {
    "python -m acp_trio.demo --agent -- CMD ARGS...": "CMD ARGS... is the reader's agent",
    "python -m acp_trio.host --config host.toml": (
        "a fixed port on the network: tests/test_host_cli.py runs the guide's config and command as printed on a free one"
    ),
    "python -m acp_trio.demo --url ws://127.0.0.1:8765/acp --token Vq3cM0hTnB2wR8yKd5Lx-uJ7pZs1gE4fA9oXiYbC6tQ": (
        "tests/test_host_cli.py runs it against the guide's host on a free port"
    ),
    "python -m acp_trio.demo --store PATH": "PATH is the reader's (run twice): tests/test_processes_demo_store.py",
    "python -m acp_trio.demo --agent -- python my_agent.py": READERS_AGENT,
    "python -m acp_trio.demo --protocol 2 --agent -- python my_agent.py": READERS_AGENT,
    "python -m acp_trio.check -- python my_agent.py": READERS_AGENT,
    "python -m acp_trio.check --protocol 2 -- python my_agent.py": READERS_AGENT,
    "python -m acp_trio.adapt --speak 1 -- AGENT_CMD ARGS...": "AGENT_CMD ARGS... is the reader's agent",
    "python -m acp_trio.adapt --speak 2 -- AGENT_CMD ARGS...": "AGENT_CMD ARGS... is the reader's agent",
    "python -m acp_trio.demo --protocol 2 --agent -- python -m acp_trio.adapt --speak 2 -- python my_v1_agent.py": (
        "my_v1_agent.py is the reader's: the agent guide's python block runs this way"
    ),
    "python -m acp_trio.demo --agent -- npx @agentclientprotocol/claude-agent-acp": "npx, from npm",
    "python -m acp_trio.check -- npx @agentclientprotocol/claude-agent-acp": "npx, from npm",
    "python -m acp_trio.check --protocol 2 --json report.json -- python -m acp_trio.demo --serve-agent": (
        "32 checks, an agent process each (~20 s): tests/test_check.py runs the demo agent's in both versions"
    ),
    "python -m acp_trio.check --url ws://127.0.0.1:8765/acp --header 'Authorization: Bearer T'": NETWORK,
    "python -m acp_trio.check --client -- python -m acp_trio.demo --agent -- {AGENT}": (
        "holds turns open and waits out shutdown steps (~30 s): tests/test_check_client.py runs it"
    ),
    "python -m acp_trio.check --client --protocol 2 --json report.json -- node my_client.mjs {AGENT}": (
        "node, and the reader's client"
    ),
    "python -m acp_trio.demo --serve http://127.0.0.1:8765 --token T": NETWORK,
    "python -m acp_trio.demo --url ws://127.0.0.1:8765/acp --token T": NETWORK,
    "python -m acp_trio.demo --serve http://127.0.0.1:8765": NETWORK,
    "python -m acp_trio.demo --url ws://127.0.0.1:8765/acp": NETWORK,
    "python -m acp_trio.bridge --listen 127.0.0.1:8765 --token T -- python my_agent.py": NETWORK,
    "python -m acp_trio.bridge --connect ws://127.0.0.1:8765/acp": NETWORK,
    "python -m acp_trio.bridge --listen 127.0.0.1:8765 -- npx @agentclientprotocol/claude-agent-acp": NETWORK,
    "python -m acp_trio.bridge --listen 127.0.0.1:8765 --speak 1 -- python -m acp_trio.demo --serve-agent --protocol 2": (
        NETWORK
    ),
    "python -m acp_trio.bridge --listen 127.0.0.1:8765 --speak 2 -- python -m acp_trio.demo --serve-agent --protocol 1": (
        "a fixed port on the network: tests/test_bridge_speak.py runs it as printed on a free one"
    ),
    "python -m acp_trio.demo --url http://127.0.0.1:8765/acp --protocol 2": NETWORK,
    "python -m acp_trio.bridge --listen 127.0.0.1:8765 --detach --detached-ttl 600 --journal journal.db"
    " -- python -m acp_trio.demo --serve-agent": (
        "a fixed port on the network: tests/test_bridge_detach.py runs it as printed on a free one"
    ),
    "python -m acp_trio.bridge --listen 127.0.0.1:8765 --detach --token-file tokens.txt"
    " -- python -m acp_trio.demo --serve-agent": (
        "a fixed port on the network: tests/test_bridge_detach_principals.py runs it as printed on a free one"
    ),
    "python -m acp_trio.bridge --listen 127.0.0.1:8765 --detach --token-file tokens.txt -- python my_agent.py": (
        "my_agent.py is the reader's, on a fixed port: tests/test_bridge_detach_principals.py runs the guide's"
        " form (the demo agent) as printed on a free one"
    ),
    "python -m acp_trio.bridge --listen 127.0.0.1:8765 --detach --speak 2"
    " -- python -m acp_trio.demo --serve-agent --protocol 1": (
        "a fixed port on the network: tests/test_bridge_detach_speak.py runs it as printed on a free one"
    ),
    "python -m examples.llm_agent --provider anthropic --model claude-sonnet-4-5 --store ~/.cache/llm-agent.db": (
        "a model API: the network and a key (nox -s llm_demo runs it against a loopback server)"
    ),
}
"""The project's command lines parsed but not run here, and why."""
PROJECT_MODULES["acp_trio.integrations.pydantic_ai"] = ("acp_trio.integrations.pydantic_ai.__main__", "parse_args")
PARSE_ONLY["python -m acp_trio.integrations.pydantic_ai my_agent:agent --store sessions.db"] = (
    "my_agent.py is the reader's: tests/test_pydantic_ai_stdio.py serves one this way, with --store, in two processes"
)
PARSE_ONLY["python -m acp_trio.integrations.pydantic_ai my_module:agent --store sessions.db"] = (
    "my_module is the reader's (README): tests/test_pydantic_ai_stdio.py serves one this way, with --store"
)

OTHER_TEST = (
    (README, "pip install ./acp-trio"),  # Install
    (README, "python -m acp_trio.demo --agent -- python my_agent.py"),  # Run it, check it, test it
)
"""sh blocks a new user's fresh virtual environment runs (another test): parsed only here."""


def commands(block: Block) -> Iterator[tuple[str, list[str]]]:
    """Each command of the block, as printed without its comment, and its words (``a && b`` is two)."""
    for line in block.text.splitlines():
        printed = re.sub(r"\s+#.*$", "", line).strip()
        assert shlex.split(printed) == shlex.split(line, comments=True), f"{block.where}: {line!r}"
        for command in printed.split(" && ") if printed else []:
            yield command.strip(), shlex.split(command)


def sh_commands() -> dict[str, list[str]]:
    """Each distinct command of every sh block, with where it is printed."""
    found: dict[str, list[str]] = {}
    for block in blocks("sh"):
        for text, _ in commands(block):
            found.setdefault(text, []).append(block.where)
    return found


class _Parsed(Exception):
    def __init__(self, namespace: argparse.Namespace) -> None:
        self.namespace = namespace


def parse_python(words: list[str]) -> argparse.Namespace:
    """``python -m MODULE ARGS`` through MODULE's own argument parser, without running it (and the
    command it is given, when that is one of this project's too)."""
    assert words[:2] == ["python", "-m"] and words[2] in PROJECT_MODULES, f"not a command of this project: {words}"
    module, function = PROJECT_MODULES[words[2]]
    entry = getattr(importlib.import_module(module), function)
    parse_args = argparse.ArgumentParser.parse_args

    def stop_after_parsing(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Parsed(parse_args(self, *args, **kwargs))

    errors = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(errors):
        patch.setattr(argparse.ArgumentParser, "parse_args", stop_after_parsing)
        try:
            entry(words[3:])
        except _Parsed as parsed:
            namespace = parsed.namespace
        except SystemExit as exc:
            raise AssertionError(f"{shlex.join(words)}: refused ({exc.code}): {errors.getvalue()}") from None
        else:
            raise AssertionError(f"{module}.{function} parsed no arguments")
    inner = list(getattr(namespace, "command", None) or [])
    inner = inner[1:] if inner[:1] == ["--"] else inner
    if inner[:2] == ["python", "-m"]:
        parse_python(inner)
    return namespace


def pyproject() -> dict[str, Any]:
    with ROOT.joinpath("pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def check_pip(words: list[str]) -> None:
    """``pip install`` of this project (a clone's path, a git URL, a built wheel, a release pin) with
    extras it has, or of nox and uv."""
    project = pyproject()["project"]
    extras, version = set(project["optional-dependencies"]), project["version"]
    assert words[:2] == ["pip", "install"], words
    targets = [w for w in words[2:] if w != "-e"]
    assert targets and not any(t.startswith("-") for t in targets), f"options this test does not know: {words}"
    for target in targets:
        wheel = re.fullmatch(r"dist/acp_trio-([^-]+)-cp3\d+-\*\.whl", target)
        local = re.fullmatch(r"(\.|\./acp-trio)(?:\[([\w,-]+)\])?", target)
        vcs = re.fullmatch(r"git\+(https|ssh|file)://[^\s@]*/acp-trio(\.git)?", target)
        if vcs:
            continue  # tests/test_readme_new_user.py has pip resolve it (this checkout as the file:// URL)
        if wheel:
            assert wheel[1] == version, f"{target}: this checkout builds {version}"
        elif local:
            assert set((local[2] or "").split(",")) - {""} <= extras, f"{target}: extras are {sorted(extras)}"
        else:
            requirement = Requirement(target)
            assert requirement.name in {"acp-trio", "nox", "uv"}, target
            assert requirement.extras <= extras, f"{target}: extras are {sorted(extras)}"
            assert not requirement.specifier or requirement.specifier.contains(version), f"{target}: not {version}"


def nox_sessions() -> tuple[set[str], list[str]]:
    """The session names noxfile.py defines (``name`` and ``name-PYTHON``), and its default sessions."""
    tree = ast.parse(ROOT.joinpath("noxfile.py").read_text(encoding="utf-8"))
    constants: dict[str, Any] = {}
    defaults: list[str] = []
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            with contextlib.suppress(ValueError):
                if isinstance(target, ast.Name):
                    constants[target.id] = ast.literal_eval(node.value)
                elif ast.unparse(target) == "nox.options.sessions":
                    defaults = ast.literal_eval(node.value)
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                call = decorator if isinstance(decorator, ast.Call) else None
                if ast.unparse(call.func if call else decorator) != "nox.session":
                    continue
                options = {k.arg: k.value for k in call.keywords} if call else {}
                name = ast.literal_eval(options["name"]) if "name" in options else node.name
                python = options.get("python")
                pythons = (
                    constants[python.id] if isinstance(python, ast.Name) else ast.literal_eval(python) if python else []
                )
                names |= {name, *(f"{name}-{p}" for p in ([pythons] if isinstance(pythons, str) else pythons))}
    return names, defaults


def check_nox(words: list[str]) -> None:
    names, defaults = nox_sessions()
    words = words[: words.index("--")] if "--" in words else words
    asked = defaults if words == ["nox"] else words[2:]
    assert words[:2] == ["nox", "-s"] or words == ["nox"], f"nox options this test does not know: {words}"
    assert asked and set(asked) <= names, f"{asked}: noxfile.py's sessions are {sorted(names)}"


def check_command(words: list[str]) -> None:
    if words[0] == "pip":
        check_pip(words)
    elif words[0] == "nox":
        check_nox(words)
    elif words[0] == "export":
        assert all(re.fullmatch(r"[A-Z_]+=\S+", w) for w in words[1:]), words
    else:
        parse_python(words)


SH_COMMANDS = sh_commands()


@pytest.mark.parametrize("command", list(SH_COMMANDS), ids=list(SH_COMMANDS))
def test_an_sh_command_is_accepted_by_its_program(command: str) -> None:
    check_command(shlex.split(command))


@pytest.mark.parametrize("command", list(RUN))
def test_a_local_sh_command_runs_as_printed(command: str, workdir: Callable[[], Path]) -> None:
    assert command in SH_COMMANDS, f"{command!r} is no longer in the docs: remove it from RUN"
    where = workdir()
    where.mkdir()
    words = shlex.split(command)
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    run = subprocess.run(
        [sys.executable, *words[1:]], capture_output=True, text=True, timeout=90, cwd=where, check=False, env=env
    )
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    for pattern in RUN[command]:
        assert re.search(pattern, run.stdout, re.M), f"{pattern!r} not in:\n{run.stdout}\n{run.stderr}"


# -- toml, json ---------------------------------------------------------------------------------------

CHECK_SCRIPT = (GUIDES + "conformance.md", "[prompts.text]")


@pytest.mark.parametrize("block", blocks("toml"), ids=[b.where for b in blocks("toml")])
def test_a_toml_block_parses(block: Block) -> None:
    assert tomllib.loads(block.text)


@pytest.mark.parametrize("block", blocks("json"), ids=[b.where for b in blocks("json")])
def test_a_json_block_parses(block: Block) -> None:
    assert json.loads(block.text)


def test_the_checkers_script_example_runs_on_the_demo_agent(workdir: Callable[[], Path]) -> None:
    """The conformance guide's script "for the demo agent", loaded by the checker's loader, then run
    by the checker (``--only script``) on ``python -m acp_trio.demo --serve-agent``."""
    from acp_trio.check import Script

    where = workdir()
    where.mkdir()
    (where / "checks.toml").write_text(doc(*CHECK_SCRIPT).text, encoding="utf-8")
    script = Script.load(where / "checks.toml")
    assert list(script.prompts) == ["text", "long", "summary"]
    summary = script.expecting("permission")
    assert summary is not None and summary.expect == ("permission", "tool_call", "plan", "message")
    demo_agent = [sys.executable, "-m", "acp_trio.demo", "--serve-agent"]
    run = subprocess.run(
        [sys.executable, "-m", "acp_trio.check", "--script", "checks.toml", "--only", "script", "--", *demo_agent],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=where,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"^PASS  script\.expectations +summary: permission, tool_call, plan, message$", run.stdout, re.M)


@pytest.mark.parametrize("block", blocks("yaml"), ids=[b.where for b in blocks("yaml")])
def test_a_yaml_block_is_a_github_actions_workflow_of_real_commands(block: Block) -> None:
    """A workflow as printed: jobs of steps, each one ``uses`` a versioned action or ``run`` s lines
    that this project's parsers accept (``pip install`` of acp-trio, with the workflow's ``env``)."""
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load(block.text)
    assert workflow["name"] and workflow["jobs"], block.where
    env = {name: str(value) for name, value in (workflow.get("env") or {}).items()}
    ran = []
    for job in workflow["jobs"].values():
        assert job["runs-on"] and job["steps"], block.where
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), step
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), step
                continue
            for line in step["run"].splitlines():
                words = [re.sub(r"\$(\w+)", lambda m: env[m[1]], w) for w in shlex.split(line, comments=True)]
                if words:
                    check_command(words)
                    ran.append(words)
    checker = [w for w in ran if w[:3] == ["python", "-m", "acp_trio.check"]]
    assert checker, f"{block.where}: no step runs the checker"
    read = re.findall(r"(?:path|report_paths): (\S+)", block.text)  # what later steps upload or publish
    for words in checker:
        for option in ("--junit", "--json"):
            if option in words:
                written = words[words.index(option) + 1]
                assert any(fnmatch.fnmatch(written, p) for p in read), f"{block.where}: no step reads {written}"


def test_the_llm_agents_zed_settings_give_it_arguments_it_takes() -> None:
    settings = json.loads(doc("examples/llm_agent/README.md", "{").text)
    [server] = settings["agent_servers"].values()
    assert server["args"][:2] == ["-m", "examples.llm_agent"] and server["command"].endswith("/python")
    assert {"PYTHONPATH", "OPENAI_API_KEY"} <= set(server["env"])
    parsed = parse_python(["python", *server["args"]])
    assert (parsed.provider, parsed.model) == ("openai", "gpt-5")


# -- every block is one of the above --------------------------------------------------------------------


def test_every_block_is_covered() -> None:
    problems = list(PROGRAM_ERRORS)
    assert ROOT / "examples" / "llm_agent" / "README.md" in doc_files()  # included into the site
    for block in BLOCKS:
        if block.lang not in LANGUAGES:
            problems.append(f"{block.where}: a ```{block.lang} block; give it one of {LANGUAGES}")
    keys = [(path, first) for path, first in PYTHON] + [CHECK_SCRIPT, *OTHER_TEST]
    for path, first in keys:
        count = len([b for b in BLOCKS if b.path == path and b.first.startswith(first)])
        if count != 1:
            problems.append(f"the registration ({path!r}, {first!r}) matches {count} blocks: make it match one")
    for block in blocks("python"):
        spec = spec_of(block)
        said = re.findall(r"[Ss]ave (?:this|it) as `([\w.]+)`", block.prose.rsplit("\n\n", 1)[-1])
        if isinstance(spec, Saved):
            if not any((spec.name, block.text) in program.files for program in PROGRAMS):
                problems.append(f"{block.where}: saved as {spec.name}, but no program runs it")
            if said and said != [spec.name]:
                problems.append(f"{block.where}: the docs say to save it as {said[0]}, PYTHON says {spec.name}")
        elif spec is None and (why := not_runnable_as_is(block)):
            problems.append(
                f"{block.where}: this python block does not run as printed: {why}.  Register it in PYTHON "
                f"(tests/test_docs_snippets.py) under ({block.path!r}, {block.first[:40]!r}): Saved('NAME.py') "
                "when the docs tell the reader to save it, else a function returning the Programs that run "
                "it (the files the docs had the reader save, the block embedded in a harness, what it prints)"
            )
        elif not PROGRAMS_OF.get(block.where):
            problems.append(f"{block.where}: no program runs it")
        elif said and not all((said[0], block.text) in program.files for program in PROGRAMS_OF[block.where]):
            problems.append(f"{block.where}: the docs say to save it as {said[0]}; its program names it otherwise")
    for command, where in SH_COMMANDS.items():
        words = shlex.split(command)
        other = [w for w in where if any(w == doc(*key).where for key in OTHER_TEST)]
        if words[0] == "python" and command not in RUN and command not in PARSE_ONLY and len(other) < len(where):
            problems.append(
                f"{', '.join(where)}: {command!r} is neither run nor said why not: add it to RUN (with what "
                "it prints) or to PARSE_ONLY (with why it cannot run here)"
            )
    for command in [*RUN, *PARSE_ONLY]:
        if command not in SH_COMMANDS:
            problems.append(f"{command!r} is in RUN or PARSE_ONLY but no longer in the docs")
    assert not problems, "\n".join(problems)


def test_the_collection_finds_every_kind_of_block() -> None:
    """A sanity check of the fence parser: the languages found, and the indented block of a list item."""
    assert {b.lang for b in BLOCKS} == set(LANGUAGES)
    indented = doc(GUIDES + "runtime.md", "try:")
    assert indented.text.startswith("try:\n    async with") and doc(GUIDES + "client.md", "try:").text == indented.text

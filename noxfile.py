"""Developer and CI tasks.  `nox -s check_generated lint tests` is what CI runs (and `docs`).

Sessions: tests, lint, docs, regenerate, check_generated, update_schema -- VERSION, bench, build,
properties_full, conformance, demo, llm_demo.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["check_generated", "lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml("pyproject.toml")
PY = "3.11"
# The benchmarks run on the oldest CPython acp-trio supports and on the newest one at hand here: the
# runtime is Python, raw orjson mostly C, so the interpreter moves the ratios (README "Other tasks").
BENCH_PYTHONS = ["3.11", "3.13"]


def group(name: str) -> list[str]:
    return list(nox.project.dependency_groups(PYPROJECT, name))


# What `tests` leaves out when it runs the suite once more on the pure-Python source (what an
# editable install runs, and a wheel built where mypyc could not compile, hatch_build.py): the tests
# that spawn processes or peers (interop, processes, transports, the checker), and the generator's,
# the schemas' and the typing tests, which the compiled modules do not change.  The rest: about 1 min.
PURE_SKIPS = [
    "tests/test_bridge.py",
    "tests/test_check.py",
    "tests/test_check_client.py",
    "tests/test_codegen.py",
    "tests/test_conformance_real.py",
    "tests/test_docs_examples.py",
    "tests/test_generated_classes.py",
    "tests/test_golden.py",
    "tests/test_interop.py",
    "tests/test_interop_mcp.py",
    "tests/test_interop_v2.py",
    "tests/test_interop_websocket.py",
    "tests/test_llm_agent.py",
    "tests/test_mcp.py",
    "tests/test_mcp_over_acp.py",
    "tests/test_processes.py",
    "tests/test_processes_demo.py",
    "tests/test_processes_demo_store.py",
    "tests/test_processes_demo_v2.py",
    "tests/test_processes_readme.py",
    "tests/test_processes_shutdown.py",
    "tests/test_properties.py",
    "tests/test_remote_reconnect.py",
    "tests/test_testing_kit.py",
    "tests/test_transport_http.py",
    "tests/test_transport_http_server.py",
    "tests/test_transport_websocket.py",
    "tests/test_transports_suite.py",
    "tests/test_typing.py",
]
COMPILED_MODULES = ["acp_trio._connection", "acp_trio._core._framing", "acp_trio._core._jsonrpc"]
"""The modules hatch_build.py compiles (tests/test_build_hook.py keeps the two lists equal)."""


def build_check(compiled: bool) -> str:
    """A script that fails unless every module of COMPILED_MODULES was imported from its extension
    (``compiled``) or from its ``.py`` source."""
    return (
        f"import importlib, sys\n"
        f"files = [importlib.import_module(m).__file__ for m in {COMPILED_MODULES!r}]\n"
        f"wrong = [f for f in files if f.endswith(('.so', '.pyd')) != {compiled!r}]\n"
        f"sys.exit(f'expected {'compiled' if compiled else 'pure Python'} modules, got {{wrong}}' if wrong else 0)\n"
    )


@nox.session(python=PY)
def tests(session: nox.Session) -> None:
    """Run the test suite (property tests in their bounded CI profile) on the wheel as it ships, the
    runtime's hot modules compiled by mypyc (hatch_build.py), then once more on the pure-Python
    source (all but PURE_SKIPS).  `nox -s tests -- ARGS` runs `pytest ARGS` on the compiled wheel only."""
    extras = ".[codegen,mcp,otel,remote,llm]"
    session.install(extras, *group("test"), *group("lint"), *group("docs"), env={"ACP_TRIO_COMPILE": "1"})
    session.run("python", "-c", build_check(compiled=True))
    session.run("python", "-m", "pytest", *session.posargs)
    if not session.posargs:
        source = os.pathsep.join([str(ROOT / "runtime"), str(ROOT / "generated")])
        session.run("python", "-c", build_check(compiled=False), env={"PYTHONPATH": source})
        skips = [f"--ignore={path}" for path in PURE_SKIPS]
        session.run("python", "-m", "pytest", *skips, env={"PYTHONPATH": source})


@nox.session(python=PY)
def properties_full(session: nox.Session) -> None:
    """The full property sweep: every `$def` of every variant, more examples (slow)."""
    session.install("-e", ".", *group("test"))
    session.run(
        "python", "-m", "pytest", "tests/test_properties.py", *session.posargs, env={"ACP_PROPERTY_PROFILE": "full"}
    )


@nox.session(python=PY)
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, mypy --strict on runtime/, generated/, examples/ and the docs hooks."""
    session.install("-e", ".[mcp,otel,remote,llm]", *group("lint"), *group("docs"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run(
        "mypy",
        "--strict",
        "runtime/acp_trio",
        "generated/acp_schema",
        "examples",
        "docs/hooks.py",
        "docs/griffe_sphinx_roles.py",
    )


@nox.session(python=PY)
def docs(session: nox.Session) -> None:
    """Build the documentation site with `mkdocs build --strict` into site/ (`-- --site-dir DIR` for
    another place): a broken cross-reference, or a public name without a docstring or missing from
    the API reference (docs/hooks.py), fails the build.  `nox -s docs -- serve` previews it."""
    session.install("-e", ".[mcp,otel,remote]", *group("docs"))
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:], env={"NO_MKDOCS_2_WARNING": "1"})
        return
    session.run("mkdocs", "build", "--strict", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(python=PY)
def regenerate(session: nox.Session) -> None:
    """Regenerate generated/acp_schema from the pinned schemas."""
    session.install("-e", ".[codegen]")
    session.run("python", "-m", "codegen")


@nox.session(python=PY)
def check_generated(session: nox.Session) -> None:
    """Regenerate into a temporary directory and fail when generated/ differs."""
    session.install(".[codegen]", env={"ACP_TRIO_COMPILE": "0"})  # (the generator needs no compiled runtime)
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
    TypeScript side), the session store, then the remote transports (WebSocket, Streamable HTTP, the
    bridge) side by side with the TypeScript SDK.  Once per interpreter of BENCH_PYTHONS (`bench-3.13`:
    one of them; one nox cannot find is skipped).  Options (`--quick`, `--json PATH`, `--strict`) go to
    all; `--json PATH` becomes PATH with the interpreter's version before its suffix (`out-3.13.json`)."""
    session.install(".[remote]", *group("bench"), "jsonschema", env={"ACP_TRIO_COMPILE": "1"})
    session.run("python", "-c", build_check(compiled=True))  # the benchmarks measure the wheel as it ships
    args = list(session.posargs)
    if "--json" in args[:-1]:
        at = args.index("--json") + 1
        path = Path(args[at])
        args[at] = str(path.with_name(f"{path.stem}-{session.python}{path.suffix}"))
    session.run("python", "benchmarks/bench.py", *args)
    session.run("python", "benchmarks/bench_runtime.py", *args)
    session.run("python", "benchmarks/bench_store.py", *args)
    session.run("python", "benchmarks/bench_remote.py", *args)


@nox.session(python=PY)
def build(session: nox.Session) -> None:
    """Build sdist and wheel (the wheel compiled, hatch_build.py), install the wheel into a fresh venv,
    import every variant and check the compiled modules load."""
    session.install("build")
    dist = ROOT / "dist"
    for old in dist.glob("acp_trio-*"):
        old.unlink()
    session.run("python", "-m", "build", "--outdir", str(dist), env={"ACP_TRIO_COMPILE": "1"})
    wheels = sorted(dist.glob("acp_trio-*.whl"))
    if len(wheels) != 1 or not sorted(dist.glob("acp_trio-*.tar.gz")):
        session.error(f"expected one wheel and one sdist in {dist}")
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        session.run("python", "-m", "venv", str(venv))
        py = str(venv / "bin" / "python")
        session.run(py, "-m", "pip", "install", "-q", str(wheels[0]), external=True)
        check = (
            "import importlib, acp_schema, acp_trio\n"
            "for v in acp_schema.VARIANTS:\n"
            "    m = importlib.import_module('acp_schema.' + v)\n"
            "    assert m.METHODS and m.SCHEMA_VERSION == acp_schema.SCHEMA_PACKAGE_VERSION\n"
            "    print(v, len(m.__all__), 'names,', len(m.METHODS), 'methods')\n"
            "from acp_schema.v1 import PromptRequest, TextContentBlock\n"
            "wire = {'sessionId': 's', 'prompt': [{'type': 'text', 'text': 'hi'}]}\n"
            "req = acp_trio.converter.structure(wire, PromptRequest)\n"
            "assert isinstance(req.prompt[0], TextContentBlock)\n"
            "print('wheel OK')\n"
        )
        session.run(py, "-c", check, external=True, env={"PYTHONPATH": ""})
        session.run(py, "-c", build_check(compiled=True), external=True, env={"PYTHONPATH": ""})


@nox.session(python=PY)
def conformance(session: nox.Session) -> None:
    """The conformance checker against real agents, offline: the demo agent, agents written with the
    official TypeScript and Python SDKs, @agentclientprotocol/claude-agent-acp and codex-acp (from
    npm, about 840 MB cached under ~/.cache/acp-trio/interop; their model APIs played by a loopback
    server), in protocols 1 and 2.  Needs node and npm.  Writes conformance-real/ (a report per
    agent and protocol, and conformance.md, the table); options go to tests/interop/conformance_real.py
    (``nox -s conformance -- --quick``)."""
    session.install("-e", ".[mcp,remote]", *group("test"))
    env = {"ACP_REAL_AGENTS": "1"}
    session.run("python", "-m", "pytest", "tests/test_conformance_real.py", env=env)
    session.run("python", "tests/interop/conformance_real.py", "--tool-prompt", *session.posargs, env=env)


@nox.session(python=PY)
def demo(session: nox.Session) -> None:
    """The main job: run the demo."""
    session.install(".")
    session.run("python", "-m", "acp_trio.demo", *session.posargs)


@nox.session(python=PY)
def llm_demo(session: nox.Session) -> None:
    """The example LLM agent (examples/llm_agent) against the tests' loopback model server, one turn per
    provider, printed: no network, no key (`nox -s llm_demo -- --provider openai` for one)."""
    session.install("-e", ".[mcp,remote,llm]")
    session.run("python", "tests/llm_demo.py", *session.posargs)

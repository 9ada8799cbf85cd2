"""``python -m examples.llm_agent --provider openai|anthropic --model MODEL [--base-url URL] ...``: serve the
example LLM agent on stdio to protocol version 1 and 2 clients (see README.md beside this file)."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

import trio

from acp_trio import serve_agent_stdio
from acp_trio.session_store import SqliteSessionStore

CONTEXT_WINDOWS = {"openai": 128_000, "anthropic": 200_000}
"""``--context-window`` when not given: a common size for each provider's models (``usage_update.size``)."""
STORE_VARIABLE = "ACP_LLM_AGENT_STORE"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m examples.llm_agent",
        description="An ACP agent on stdio backed by the OpenAI Responses API or the Anthropic Messages API.",
    )
    parser.add_argument("--provider", required=True, choices=("openai", "anthropic"), help="the model API")
    parser.add_argument("--model", required=True, help="the model name, passed to the API as is")
    parser.add_argument(
        "--base-url",
        help="the API root as the SDK takes it (OpenAI: ending in /v1, e.g. http://127.0.0.1:8000/v1; "
        "Anthropic: without /v1); default the SDK's (or OPENAI_BASE_URL / ANTHROPIC_BASE_URL)",
    )
    parser.add_argument(
        "--store",
        default=os.environ.get(STORE_VARIABLE),
        help=f"SQLite file keeping the sessions of protocol version 1 clients for session/load across runs "
        f"(default ${STORE_VARIABLE}; unset, and for version 2 clients: in this process only)",
    )
    parser.add_argument(
        "--protocol",
        type=int,
        choices=(1, 2),
        action="append",
        help="serve only this ACP protocol version (repeatable; default: 1 and 2, the client's initialize picks)",
    )
    parser.add_argument("--max-retries", type=int, default=2, help="the SDK's retries of 429/5xx/connection errors")
    parser.add_argument("--max-tokens", type=int, default=8192, help="output tokens per model call (default 8192)")
    parser.add_argument(
        "--reasoning-effort",
        choices=("minimal", "low", "medium", "high"),
        help="OpenAI reasoning models: reasoning.effort (summaries stream as thoughts); default: not sent",
    )
    parser.add_argument(
        "--thinking-budget", type=int, help="Anthropic: enable extended thinking with this many budget tokens"
    )
    parser.add_argument(
        "--context-window", type=int, help="the model's context size in tokens, reported in usage_update.size"
    )
    parser.add_argument("--system", default="", help="the system prompt (default: a short coding-agent prompt)")
    parser.add_argument("--max-steps", type=int, default=25, help="model calls per prompt turn at most (default 25)")
    parser.add_argument(
        "--command-timeout", type=float, default=300.0, help="seconds a command may run before it is killed"
    )
    parser.add_argument("--verbose", action="store_true", help="log at DEBUG on stderr")
    return parser.parse_args(argv)


INSTALL_LLM = "pip install -e '.[llm]' from the repository root"
"""How to install the ``llm`` extra (acp-trio is not on PyPI yet; the example runs from a clone)."""


def missing_sdk(provider: str) -> str | None:
    """The one line to print when ``provider``'s SDK (``openai`` or ``anthropic``: the ``llm`` extra)
    or a module it needs cannot be imported: which, and the command that installs it; ``None``
    when the provider's module imports.  A module of the example itself that is missing is a bug:
    its ``ModuleNotFoundError`` is raised."""
    try:
        importlib.import_module(f"{__package__}.{provider}_api")
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if not missing or missing == (__package__ or "").partition(".")[0]:
            raise
        needs = f"the official {provider} SDK"
        if missing != provider:
            needs += f" and its dependencies (no module named {missing!r})"
        return f"the {provider} provider needs {needs}, the llm extra: {INSTALL_LLM}, or pip install {provider}"
    return None


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the agent on stdio; exits with status 2 (one line on stderr) when the provider's SDK
    is not installed (:func:`missing_sdk`)."""
    args = parse_args(argv)
    problem = missing_sdk(args.provider)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    from .agent import LlmAgent  # the example's modules import httpx2, which the SDKs bring
    from .providers import KEY_VARIABLES, Settings

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    variables = KEY_VARIABLES[args.provider]
    if not any(os.environ.get(name) for name in variables):
        logging.getLogger("examples.llm_agent").warning(
            "no API key: set %s; every prompt will be answered with an error until then", " or ".join(variables)
        )
    settings = Settings(
        provider=args.provider,
        model=args.model,
        base_url=args.base_url,
        max_retries=args.max_retries,
        max_tokens=args.max_tokens,
        reasoning_effort=args.reasoning_effort,
        thinking_budget=args.thinking_budget,
        context_window=args.context_window or CONTEXT_WINDOWS[args.provider],
        system_prompt=args.system,
    )
    store = SqliteSessionStore(args.store) if args.store else None
    agent = LlmAgent(settings, store=store, max_steps=args.max_steps, command_timeout=args.command_timeout)
    versions = tuple(args.protocol or (1, 2))

    async def serve() -> None:
        async with agent.running():
            await serve_agent_stdio(agent.handlers_for(versions))

    try:
        trio.run(serve)
    finally:
        if store is not None:
            store.close()


if __name__ == "__main__":
    main()

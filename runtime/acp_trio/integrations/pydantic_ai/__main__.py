"""``python -m acp_trio.integrations.pydantic_ai module:attr [--store PATH] [--name NAME] ...``: serve
the pydantic-ai agent ``attr`` of ``module`` over stdio to ACP clients of protocol version 1 and 2.

``attr`` is a ``pydantic_ai.Agent`` (any ``AbstractAgent``), a :class:`PydanticAIAgent`, or a
function taking no arguments that returns either.  The current directory is searched for
``module`` first (as ``python -m`` does for scripts).  A usage error (bad reference, missing
module or attribute, an object of another type) prints one line naming it and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from pydantic_ai.agent import AbstractAgent

from acp_trio.session_store import SqliteSessionStore

from . import PydanticAIAgent, run_stdio

PROG = "python -m acp_trio.integrations.pydantic_ai"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="Serve a pydantic-ai agent over ACP (stdio, protocol versions 1 and 2)."
    )
    parser.add_argument(
        "agent", metavar="module:attr", help="where the agent is: a pydantic_ai.Agent, or a function returning one"
    )
    parser.add_argument(
        "--store", help="SQLite file keeping the sessions, so a later process loads them (default: this process only)"
    )
    parser.add_argument("--name", help="the agent's name in the initialize answer (default: the agent's name)")
    parser.add_argument("--title", help="the agent's title in the initialize answer")
    parser.add_argument("--agent-version", default="0", help="the agent's version in the initialize answer")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="MODEL",
        help="a model the client may choose per session (repeatable: the first is the default), e.g. openai:gpt-5.2",
    )
    parser.add_argument(
        "--protocol",
        type=int,
        choices=(1, 2),
        action="append",
        help="serve only this ACP protocol version (repeatable; default: 1 and 2, the client's initialize picks)",
    )
    parser.add_argument("--verbose", action="store_true", help="log at DEBUG on stderr")
    return parser.parse_args(argv)


def load(reference: str) -> Any:
    """The object ``module:attr`` names (``attr`` may be dotted), called when it is a function
    (not an agent).  Raises ``ValueError`` with a one-line reason for a usage error."""
    module_name, sep, attr = reference.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{reference!r}: expected module:attr, e.g. my_agent:agent")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ValueError(f"no module named {module_name!r} (from {reference!r})") from None
        raise
    found: Any = module
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(found, (AbstractAgent, PydanticAIAgent)) and callable(found) and not isinstance(found, type):
        found = found()
    if not isinstance(found, (AbstractAgent, PydanticAIAgent)):
        raise ValueError(
            f"{reference} is {type(found).__name__!r}, not a pydantic_ai Agent (or a function returning one)"
        )
    return found


def check_models(names: Sequence[str]) -> None:
    """Each ``--model`` must be a model pydantic-ai knows (``pydantic_ai.models.infer_model``):
    ``ValueError`` for an unknown one; another complaint (a missing API key) is logged as a warning,
    the model kept."""
    from pydantic_ai.exceptions import UserError
    from pydantic_ai.models import infer_model

    for name in names:
        try:
            infer_model(name)
        except UserError as exc:
            if str(exc).startswith("Unknown model"):
                raise ValueError(f"--model {name}: pydantic-ai knows no such model ({exc})") from None
            logging.getLogger("acp_trio.integrations.pydantic_ai").warning("--model %s: %s", name, exc)


def build(args: argparse.Namespace) -> PydanticAIAgent:
    """The agent the parsed command line serves.  Raises ``ValueError`` for a usage error."""
    check_models(args.model)
    found = load(args.agent)
    store = SqliteSessionStore(args.store) if args.store else None
    if isinstance(found, PydanticAIAgent):
        if store is not None:
            found.store = store
        return found
    return PydanticAIAgent(
        found,
        name=args.name,
        title=args.title,
        version=args.agent_version,
        store=store,
        models={model: model for model in args.model},
        versions=tuple(args.protocol or (1, 2)),
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the agent the command line names on stdio; a usage error exits with status 2."""
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        agent = build(args)
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        run_stdio(agent)
    finally:
        if agent.store is not None:
            agent.store.close()


if __name__ == "__main__":
    main()

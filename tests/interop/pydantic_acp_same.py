"""The example pydantic-ai agent (``examples/pydantic_ai_agent/agent.py``) served over ACP (stdio) by
``pydantic-acp``: the other side of the side-by-side comparison of issue 34.

``python tests/interop/pydantic_acp_same.py [--store DIR]``, with the Python of the pydantic-acp
environment (``real_agents.install_pydantic_acp()``: pydantic-acp 1.10.0, pydantic-ai-slim 2.52.0),
not the development one.  It is the same ``agent`` object acp-trio serves with ``python -m
acp_trio.integrations.pydantic_ai examples.pydantic_ai_agent.agent:agent``, handed to
``run_acp(agent=...)`` as pydantic-acp's README teaches; ``--store DIR`` keeps the sessions in
pydantic-acp's ``FileSessionStore`` (default: its in-memory store).  No model API, no network: the
agent's model is a scripted ``FunctionModel``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))  # the repository root: ``examples`` is a package there

from pydantic_acp import AdapterConfig, FileSessionStore, run_acp  # noqa: E402

from examples.pydantic_ai_agent.agent import agent  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", type=Path, help="keep sessions in this directory (pydantic-acp's FileSessionStore)")
    options = parser.parse_args()
    config = AdapterConfig(agent_name="pydantic-acp-notes")
    if options.store is not None:
        config = AdapterConfig(agent_name="pydantic-acp-notes", session_store=FileSessionStore(options.store))
    run_acp(agent=agent, config=config)


if __name__ == "__main__":
    main()

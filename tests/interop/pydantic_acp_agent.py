"""A pydantic-ai agent served over ACP (stdio) by ``pydantic-acp``, its model at the loopback model server.

``pydantic-acp`` has no command of its own: it turns a ``pydantic_ai.Agent`` into an ACP agent
(``run_acp(agent_factory=...)``).  This is the smallest such program, as its README teaches, with
two tools so that a turn can reach the client: ``read_file`` (``fs/read_text_file``) and
``write_file`` (``fs/write_text_file``, declared ``requires_approval``: pydantic-acp asks
``session/request_permission`` first).  Both go through the client's file system
(``ClientHostContext``) when the client advertises it, else use the local disk.

The model is ``openai-chat:$OPENAI_MODEL`` (OpenAI Chat Completions; default ``loopback-model``)
at ``$OPENAI_BASE_URL`` with ``$OPENAI_API_KEY``, which ``tests/interop/real_agents.py`` point at
``tests/interop/model_server.py``.  Run it with the Python of the pydantic-acp environment
(``real_agents.install_pydantic_acp()``), not the development one.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic_acp import AcpSessionContext, AdapterConfig, ClientHostContext, run_acp
from pydantic_ai import Agent

MODEL = os.environ.get("OPENAI_MODEL") or "loopback-model"


def _client_offers(session: AcpSessionContext, capability: str) -> bool:
    """Whether the client advertised ``fs.<capability>`` (``read_text_file``/``write_text_file``)."""
    fs = getattr(session.client_capabilities, "fs", None)
    return bool(getattr(fs, capability, False))


def build(session: AcpSessionContext) -> Agent[None, str]:
    """The agent of one ACP session: its tools reach the client through that session when the client
    offers the file system (``fs`` in ``initialize``), else the local disk; a failure goes back to
    the model as the tool's result, as a coding agent does, rather than failing the turn."""
    agent: Agent[None, str] = Agent(
        f"openai-chat:{MODEL}",
        name="pydantic-acp-loopback",
        instructions="You help with the files of the user's project; use the tools to read and write them.",
    )

    @agent.tool_plain
    async def read_file(file_path: str) -> str:
        """Read a text file of the project (an absolute path)."""
        try:
            if _client_offers(session, "read_text_file"):
                host = ClientHostContext.from_bound_session(session)
                return (await host.filesystem.read_text_file(file_path)).content
            return Path(file_path).read_text(encoding="utf-8")
        except Exception as exc:  # the model is told, as with any tool failure
            return f"error: cannot read {file_path}: {exc}"

    @agent.tool_plain(requires_approval=True)
    async def write_file(file_path: str, content: str) -> str:
        """Write a text file of the project (an absolute path), creating it if needed."""
        try:
            if _client_offers(session, "write_text_file"):
                host = ClientHostContext.from_bound_session(session)
                await host.filesystem.write_text_file(file_path, content)
            else:
                Path(file_path).write_text(content, encoding="utf-8")
        except Exception as exc:
            return f"error: cannot write {file_path}: {exc}"
        return f"wrote {len(content)} characters to {file_path}"

    return agent


if __name__ == "__main__":
    run_acp(agent_factory=build, config=AdapterConfig(agent_name="pydantic-acp-loopback"))

"""Any pydantic-ai agent served over ACP, to protocol version 1 and 2 clients alike.

Contract: :class:`PydanticAIAgent` wraps a ``pydantic_ai.Agent`` (any ``AbstractAgent``) in an
:class:`acp_trio.neutral.Agent`, so the version-neutral layer serves it on every acp-trio entry
point (stdio, ``AcpApp``, ``open_memory_pair``), the client's ``initialize`` picking v1 or v2.
pydantic-ai runs on asyncio and acp-trio on trio: the agent's runs go through an asyncio loop that
trio-asyncio runs inside trio, which :func:`serve_stdio` / :func:`run_stdio` and the command line
(``python -m acp_trio.integrations.pydantic_ai module:agent``) open; an application that serves
the agent from its own trio code wraps serving in ``async with open_loop():``.

One ACP prompt turn is one or more runs of the agent (``Agent.run_stream_events``), each continuing
the session's message history:

- text and thinking deltas become ``agent_message_chunk`` / ``agent_thought_chunk`` (``turn.say``,
  ``turn.think``);
- each function tool call becomes an ACP tool call: ``toolCallId`` pydantic-ai's id (made unique
  in the session), title the tool's name, kind from :attr:`PydanticAIAgent.tool_kinds`, the tool's
  ``metadata`` (:data:`KIND_METADATA`) or its name (:func:`tool_kind`), the arguments as
  ``rawInput`` (absolute paths among them as ``locations``), then ``completed`` (or ``failed``
  for a failed, retried or denied call) with the text the model got as content and ``rawOutput``
  ``{"tool", "outcome", "content"}``; a tool that returns ``ToolReturn(..., metadata=Diff(...))``
  (an :class:`acp_trio.neutral.Diff`, a client terminal, or a list of them) shows that instead: a
  file edit as a diff in both versions;
- a tool that needs approval (``requires_approval=True``, ``ApprovalRequired``) ends the run with
  ``DeferredToolRequests``; each such call is a ``session/request_permission`` about its tool call
  (allow or reject, once or always for the session), answered with ``DeferredToolResults``
  (approved, or ``ToolDenied``) in the next run;
- the turn ends ``end_turn`` (``max_tokens`` / ``refusal`` when the model's last response stopped
  for length / content filter, ``max_turn_requests`` when a ``UsageLimits`` was hit) with the
  tokens of all its runs as :class:`acp_trio.neutral.Usage`; a failing run (model API errors...)
  is a JSON-RPC error -32603 with the exception's class in ``data``;
- ``session/cancel`` cancels the asyncio task at once (the model's stream is closed) and waits
  for it to end; the turn ends ``cancelled``.

Sessions: the session's ``mcpServers`` (stdio, HTTP, SSE) are pydantic-ai ``MCPToolset`` s offered
to the model in its runs, connected for the session's lifetime; a v1 client that advertises
``fs`` / ``terminal`` gets tools that read and write its files (a write shown as a diff) and run
commands in its terminals.  The message history is pydantic-ai's own while the process lives; a
session loaded or resumed in a new process (with :attr:`PydanticAIAgent.store`) has it rebuilt
from the store's canonical updates (:func:`messages_from_updates`), as after a cancelled turn.
The model choice (``models``) and the author's options are session config options.
"""

from __future__ import annotations

from typing import Any

import trio

from acp_trio import serve_agent_stdio

from ._agent import APPROVAL_OPTIONS, DENIED_MESSAGE, KIND_METADATA, PydanticAIAgent, tool_kind
from ._aio import open_loop
from ._history import messages_from_updates, prompt_content, raw_output

__all__ = [
    "APPROVAL_OPTIONS",
    "DENIED_MESSAGE",
    "KIND_METADATA",
    "PydanticAIAgent",
    "messages_from_updates",
    "open_loop",
    "prompt_content",
    "raw_output",
    "run_stdio",
    "serve_stdio",
    "tool_kind",
]


async def serve_stdio(agent: PydanticAIAgent, **options: Any) -> None:
    """Serve ``agent`` on this process's stdin/stdout (``acp_trio.serve_agent_stdio``, its
    ``options``) inside :func:`open_loop`, until the client closes stdin."""
    async with open_loop():
        await serve_agent_stdio(agent, **options)


def run_stdio(agent: PydanticAIAgent, **options: Any) -> None:
    """Synchronous entry point: ``trio.run`` of :func:`serve_stdio` (for a ``__main__``)."""
    trio.run(lambda: serve_stdio(agent, **options))

"""An ACP client written with the official Python SDK (``agent-client-protocol`` 0.12.1, import ``acp``).

Usage (``tests/test_interop.py`` runs it with the SDK's own virtual environment)::

    python py_client.py <cwd> <agent command> [agent args...]

It spawns the agent with the SDK's ``spawn_agent_process``, then: ``initialize`` (with fs
capabilities), ``session/new`` in ``<cwd>``, a prompt turn that it answers (permission ``allow``,
fs reads and writes inside ``<cwd>``), the extension request ``_interop/echo`` and the unknown
``_interop/missing``, and a ``wait`` turn that it cancels with ``session/cancel`` when the agent
asks permission in it (answering that request ``cancelled``, as ``docs/protocol/v1/prompt-turn.mdx``
asks).  It prints a JSON summary on stdout, or exits non-zero.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    ReadTextFileResponse,
    RequestPermissionResponse,
)
from acp.stdio import spawn_agent_process


class InteropClient:
    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.conn: Any = None
        self.summary: dict[str, Any] = {"updates": [], "permissions": [], "reads": [], "writes": []}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    def _inside(self, path: str) -> str:
        full = os.path.realpath(path)
        if not full.startswith(os.path.realpath(self.cwd) + os.sep):
            raise RequestError.invalid_params({"path": path, "detail": "outside the session directory"})
        return full

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        wire = update.model_dump(mode="json", by_alias=True, exclude_none=True)
        self.summary["updates"].append({"sessionId": session_id, "update": wire})

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        updates_before = len(self.summary["updates"])
        self.summary["permissions"].append({"toolCallId": tool_call.tool_call_id, "updatesBefore": updates_before})
        if tool_call.tool_call_id == "interop-wait":
            await self.conn.cancel(session_id=session_id)
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id="allow"))

    async def read_text_file(self, session_id: str, path: str, **kwargs: Any) -> ReadTextFileResponse:
        self.summary["reads"].append(path)
        with open(self._inside(path), encoding="utf-8") as f:
            return ReadTextFileResponse(content=f.read())

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> None:
        # The SDK's Client protocol lets this return None, which it sends as "result": null.
        self.summary["writes"].append({"path": path, "content": content})
        with open(self._inside(path), "w", encoding="utf-8") as f:
            f.write(content)


async def outcome_of(call: Any) -> dict[str, Any]:
    try:
        return {"result": await call}
    except RequestError as exc:
        return {"error": {"code": exc.code, "message": str(exc), "data": exc.data}}


async def main(cwd: str, command: str, *args: str) -> dict[str, Any]:
    client = InteropClient(cwd)
    summary = client.summary
    async with spawn_agent_process(
        lambda _agent: client, command, *args, env=dict(os.environ), transport_kwargs={"stderr": None}
    ) as (conn, process):
        init = await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=True)
            ),
            client_info=Implementation(name="py-sdk-interop-client", version="0.12.1"),
        )
        summary["initialize"] = init.model_dump(mode="json", by_alias=True, exclude_none=True)
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        summary["sessionId"] = session.session_id
        response = await conn.prompt(session_id=session.session_id, prompt=[text_block("hello")])
        summary["prompt"] = response.model_dump(mode="json", by_alias=True, exclude_none=True)
        summary["updatesAfterPrompt"] = len(summary["updates"])
        # The SDK prefixes "_" to extension method names.
        summary["echo"] = await outcome_of(conn.ext_method("interop/echo", {"value": 42, "nested": {"ok": True}}))
        summary["missing"] = await outcome_of(conn.ext_method("interop/missing", {}))
        cancelled = await conn.prompt(session_id=session.session_id, prompt=[text_block("wait")])
        summary["cancelledPrompt"] = cancelled.model_dump(mode="json", by_alias=True, exclude_none=True)
    summary["agentExit"] = {"code": process.returncode}
    return summary


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:]))))

"""An agent that keeps its sessions in a session store, for the process tests of ``test_session_store.py``.

Usage: ``python store_agent.py --store PATH`` (a file: :class:`SqliteSessionStore`).  Prompt
commands (the first text block):

- ``talk <words>``: a small conversation turn: message and thought chunks, a plan, a tool call that
  is updated to ``completed``, a mode change, a config option change, a title;
- ``stream N``: N ``agent_message_chunk`` updates (``chunk i``), then end the turn;
- ``flood N``: N chunks, then waits until the store has committed them, sends the chunk
  ``FLUSHED``, and goes on streaming ``more i`` chunks until the process is killed.
"""

from __future__ import annotations

import argparse
import itertools
import uuid
from typing import Any

import trio

from acp_schema import v1
from acp_trio import AgentSideConnection, run_agent_stdio, session_store
from acp_trio import builders as b

MODES = {
    "currentModeId": "ask",
    "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}],
}


def config_options(value: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "select",
            "id": "model",
            "name": "Model",
            "currentValue": value,
            "options": [{"value": "small", "name": "Small"}, {"value": "large", "name": "Large"}],
        }
    ]


class StoreAgent:
    def __init__(self, conn: AgentSideConnection, store: session_store.SessionStore) -> None:
        self.conn = conn
        self.client = v1.ClientPeer(conn)
        self.store = store
        self.recorder = session_store.enable(conn, store)
        self.turns = 0

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        conv = self.conn.connection.converter
        return conv.structure(
            {"sessionId": f"sess_{uuid.uuid4().hex[:12]}", "modes": MODES, "configOptions": config_options("small")},
            v1.NewSessionResponse,
        )

    async def _send(self, session_id: str, update: Any) -> None:
        await self.client.session_update(b.notification(session_id, update))

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        sid = params.session_id
        block = params.prompt[0]
        words = block.text.split() if isinstance(block, v1.TextContentBlock) else ["talk"]
        if words[0] == "stream":
            for i in range(int(words[1])):
                await self._send(sid, b.agent_message(f"chunk {i} "))
        elif words[0] == "flood":
            for i in range(int(words[1])):
                await self._send(sid, b.agent_message(f"chunk {i} "))
            await self.store.flush()
            await self._send(sid, b.agent_message("FLUSHED"))
            for i in itertools.count():  # until killed
                await self._send(sid, b.agent_message(f"more {i} "))
                await trio.lowlevel.checkpoint()
        else:
            await self._talk(sid, " ".join(words[1:]))
        return v1.PromptResponse(stop_reason="end_turn")

    async def _talk(self, sid: str, text: str) -> None:
        self.turns += 1
        n = self.turns
        conv = self.conn.connection.converter
        await self._send(sid, b.agent_thought(f"thinking about {text!r}"))
        for word in f"you said {text}".split():
            await self._send(sid, b.agent_message(word + " "))
        await self._send(sid, b.plan([b.plan_entry("look", status="in_progress"), b.plan_entry("answer")]))
        call = b.ToolCallReporter(self.client, sid, f"Look {n}", kind="read", tool_call_id=f"call_{n}")
        await call.start()
        await call.update(status="in_progress")
        await call.complete([f"looked {n}"])
        await self._send(
            sid, b.plan([b.plan_entry("look", status="completed"), b.plan_entry("answer", status="completed")])
        )
        await self._send(sid, b.current_mode("code"))
        await self._send(
            sid,
            conv.structure(
                {"sessionUpdate": "config_option_update", "configOptions": config_options("large")}, v1.SessionUpdate
            ),
        )
        await self._send(sid, b.session_info(title=f"Talk {n}"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    args = parser.parse_args()
    store = session_store.SqliteSessionStore(args.store)

    def make(conn: AgentSideConnection) -> StoreAgent:
        return StoreAgent(conn, store)

    try:
        run_agent_stdio(make)
    finally:
        store.close()


if __name__ == "__main__":
    main()

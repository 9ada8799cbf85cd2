"""A client process with a ``TerminalManager`` (and an in-memory agent), for ``tests/test_terminals.py``.

Runs ``argv[1:]`` in a client terminal, prints the pids of the terminal's process (the supervisor,
or the command itself) and of the command, then the first line of the command's output once it
arrives, on one line; then waits forever: the test kills this process and looks at what is left of the command.
"""

from __future__ import annotations

import sys
from typing import Any

import trio

import acp_trio
from acp_schema import v1
from acp_trio.terminals import Terminal, TerminalManager


class Agent:
    def __init__(self, conn: acp_trio.AgentSideConnection) -> None:
        self.conn = conn

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        return v1.InitializeResponse(protocol_version=1)

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        return v1.NewSessionResponse(session_id="s1")


class Client:
    def __init__(self, conn: acp_trio.ClientSideConnection) -> None:
        self.terminals = TerminalManager(conn, on_output=self._on_output)
        self.terminal_create = self.terminals.terminal_create
        self.output = bytearray()
        self.line = trio.Event()

    def _on_output(self, terminal: Terminal, data: bytes) -> None:
        self.output += data
        if b"\n" in self.output:
            self.line.set()


async def main(command: list[str]) -> None:
    async with acp_trio.open_memory_pair(Agent, Client) as (agent_conn, client_conn):
        client: Any = client_conn.handler
        caps = v1.ClientCapabilities(terminal=True)
        await client_conn.agent.initialize(v1.InitializeRequest(protocol_version=1, client_capabilities=caps))
        await client_conn.agent.session_new(v1.NewSessionRequest(cwd="/", mcp_servers=[]))
        request = v1.CreateTerminalRequest(session_id="s1", command=command[0], args=command[1:])
        created = await agent_conn.client.terminal_create(request)
        terminal = client.terminals.terminals[created.terminal_id]
        await client.line.wait()
        first = client.output.split(b"\n")[0].decode()
        sys.stdout.write(f"{terminal.process.pid} {terminal.pid} {first}\n")
        sys.stdout.flush()
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])

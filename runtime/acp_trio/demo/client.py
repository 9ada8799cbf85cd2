"""The example client: the batteries of :class:`acp_trio.StandardClient`, plus a printed transcript.

File reads and writes stay inside the session's directories (:mod:`acp_trio.fs`), terminals run
real commands without a shell and are released with their session (:mod:`acp_trio.terminals`),
and ``session/request_permission`` goes through a policy (:mod:`acp_trio.permissions`) that
prints the question and picks the first "allow" option (``--deny`` in the demo's command line:
the first "reject" one).  Every ``session/update`` is folded into ``client.states`` and printed
as it arrives.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from acp_schema import v1
from acp_trio import ClientSideConnection, SessionState, StandardClient, ask
from acp_trio.permissions import ALLOW_KINDS, REJECT_KINDS, choose_option

CLIENT_INFO = v1.Implementation(name="acp-trio-demo-client", title="acp-trio demo client", version="1")


class DemoClient(StandardClient):
    """The demo client; construct it with the connection (``spawn_agent(..., client=demo_client_factory())``).

    ``out``: where the transcript goes (default ``sys.stdout``).  ``allow``: answer permission
    requests with an "allow" option (else with a "reject" one).  Other options as for
    :class:`~acp_trio.StandardClient`.
    """

    def __init__(self, conn: ClientSideConnection, out: TextIO | None = None, *, allow: bool = True, **options: Any):
        self.out = out if out is not None else sys.stdout
        self.allow = allow
        self._line_open = False
        super().__init__(conn, policy=ask(self._decide), on_write=self._wrote, **options)

    # -- transcript ------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        """Print one transcript line."""
        if self._line_open:
            self.out.write("\n")
            self._line_open = False
        self.out.write(text + "\n")
        self.out.flush()

    def on_update(self, state: SessionState, update: Any) -> None:
        u = update
        if isinstance(u, v1.AgentMessageChunkSessionUpdate | v1.AgentThoughtChunkSessionUpdate):
            block = u.content
            text = block.text if isinstance(block, v1.TextContentBlock) else f"[{type(block).__name__}]"
            if not self._line_open:
                prefix = "agent: " if isinstance(u, v1.AgentMessageChunkSessionUpdate) else "agent (thinking): "
                self.out.write(prefix)
                self._line_open = True
            self.out.write(text)
            self.out.flush()
        elif isinstance(u, v1.ToolCallSessionUpdate | v1.ToolCallUpdateSessionUpdate):
            entry = state.tool_calls[u.tool_call_id]
            detail = ""
            for item in u.content or ():
                if isinstance(item, v1.DiffToolCallContent):
                    detail += f" diff {item.path}: +{len(item.new_text.splitlines())} line(s)"
                elif isinstance(item, v1.ContentToolCallContent) and isinstance(item.content, v1.TextContentBlock):
                    detail += f" {item.content.text}"
                elif isinstance(item, v1.TerminalToolCallContent):
                    detail += f" [terminal {item.terminal_id}]"
            if isinstance(u, v1.ToolCallSessionUpdate):
                self.say(f"  [tool {u.tool_call_id}] {entry.title} ({entry.kind or 'other'}): {entry.status}{detail}")
            else:
                self.say(f"  [tool {u.tool_call_id}] {u.status or 'updated'}{detail}")
        elif isinstance(u, v1.PlanSessionUpdate):
            marks = {"completed": "x", "in_progress": ">", "pending": " "}
            self.say("  [plan] " + "  ".join(f"[{marks.get(e.status, '?')}] {e.content}" for e in u.entries))
        else:
            self.say(f"  [{getattr(u, 'session_update', type(u).__name__)}]")

    # -- the batteries, with a line of transcript each -------------------------------------------
    async def _decide(self, request: v1.RequestPermissionRequest) -> str | None:
        title = request.tool_call.title or request.tool_call.tool_call_id
        option_id = choose_option(request.options, ALLOW_KINDS if self.allow else REJECT_KINDS)
        chosen = next((o for o in request.options if o.option_id == option_id), None)
        if chosen is None:
            self.say(f"  [permission] {title}: no suitable option offered; cancelling")
            return None
        self.say(f"  [permission] {title}: choosing {chosen.name!r} ({chosen.kind})")
        return chosen.option_id

    def _wrote(self, path: Path, old: str | None, new: str) -> None:
        self.say(f"  [fs] wrote {path} ({len(new.encode())} bytes{', new file' if old is None else ''})")

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        response = await super().fs_read_text_file(params)
        self.say(f"  [fs] read {params.path} ({len(response.content.splitlines())} line(s))")
        return response

    async def terminal_create(self, params: v1.CreateTerminalRequest) -> v1.CreateTerminalResponse:
        response = await super().terminal_create(params)
        argv = " ".join([params.command, *(params.args or ())])
        self.say(f"  [terminal {response.terminal_id}] $ {argv}")
        return response

    async def terminal_wait_for_exit(self, params: v1.WaitForTerminalExitRequest) -> v1.WaitForTerminalExitResponse:
        response = await super().terminal_wait_for_exit(params)
        output = await super().terminal_output(
            v1.TerminalOutputRequest(session_id=params.session_id, terminal_id=params.terminal_id)
        )
        for line in output.output.splitlines():
            self.say(f"  [terminal {params.terminal_id}] {line}")
        status = response.exit_code if response.signal is None else response.signal
        self.say(f"  [terminal {params.terminal_id}] exited ({status})")
        return response


def demo_client_factory(
    out: TextIO | None = None, *, allow: bool = True
) -> Callable[[ClientSideConnection], DemoClient]:
    """A factory for ``spawn_agent(client=...)`` that prints the transcript to ``out``."""

    def make(conn: ClientSideConnection) -> DemoClient:
        return DemoClient(conn, out, allow=allow)

    return make

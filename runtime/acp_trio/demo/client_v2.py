"""The example client, protocol version 2: a printed transcript of a v2 prompt turn, on the batteries.

A v2 client has no file system or terminal to offer (the agent does that work itself); this one
is a :class:`acp_trio.StandardClient`, so what the agent reports is folded into ``client.states``
(:mod:`acp_trio.session_state`), ``session/request_permission`` goes through the permission
broker (:mod:`acp_trio.permissions`: a policy that prints the question and picks the first
"allow" option, ``--deny``: the first "reject" one) and ``elicitation/create`` through the
elicitation broker, answered on the terminal (:class:`acp_trio.demo.client.TerminalForm`).
Every ``session/update`` is printed as it arrives, in the style of :mod:`acp_trio.demo.client`:
agent messages (by ``messageId``), tool calls (the first ``tool_call_update`` of an id creates
one), plans, the agent's display terminals (``terminal_update`` / ``terminal_output_chunk``: the
command, its output line by line and its exit) and the session's state (``state_update``;
``idle`` ends the turn with its stop reason).

:meth:`DemoClientV2.run_turn` sends ``session/prompt`` (whose response is only a receipt) and
waits, bounded, for the ``idle`` state that ends the turn (the battery's
:meth:`~acp_trio.StandardClient.wait_turn_end`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

import trio

from acp_schema import v2
from acp_trio import UNSET, ClientSideConnection, SessionState

from .client import TranscriptClient

CLIENT_INFO = v2.Implementation(name="acp-trio-demo-client", title="acp-trio demo client", version="1")


class DemoClientV2(TranscriptClient):
    """The v2 demo client; construct it with the connection (``client={v2: demo_client_v2_factory()}``).

    Options as for :class:`~acp_trio.demo.client.TranscriptClient`.
    """

    def __init__(self, conn: ClientSideConnection, out: TextIO | None = None, **options: Any) -> None:
        self._open_message: str | None = None  # the messageId of the agent message line being printed
        self._tools: set[tuple[str, str]] = set()
        self._printed: dict[tuple[str, str], bytes] = {}  # per display terminal: the output printed so far
        options.setdefault("terminals", False)  # no client terminals in v2
        super().__init__(conn, out, **options)

    # -- transcript ------------------------------------------------------------------------------
    def _end_line(self) -> None:
        if self._open_message is not None:
            self.out.write("\n")
            self._open_message = None

    def on_update(self, state: SessionState, update: Any) -> None:
        """Print ``update`` (already folded into ``state``) as a transcript line."""
        session_id = state.session_id or ""
        u = update
        if isinstance(u, v2.AgentMessageChunkSessionUpdate | v2.AgentThoughtChunkSessionUpdate):
            block = u.content
            text = block.text if isinstance(block, v2.TextContentBlock) else f"[{type(block).__name__}]"
            if self._open_message != u.message_id:
                prefix = "agent: " if isinstance(u, v2.AgentMessageChunkSessionUpdate) else "agent (thinking): "
                self._open_line(prefix, u.message_id)
            self.out.write(text)
            self.out.flush()
        elif isinstance(u, v2.UserMessageSessionUpdate):
            blocks = u.content if isinstance(u.content, list) else []
            text = " ".join(b.text if isinstance(b, v2.TextContentBlock) else f"[{type(b).__name__}]" for b in blocks)
            self.say(f"  [user_message {u.message_id}] {text}")
        elif isinstance(u, v2.ToolCallUpdateSessionUpdate):
            detail = "".join(self._describe(item) for item in u.content or ())
            status = u.status if isinstance(u.status, str) else None
            if (session_id, u.tool_call_id) not in self._tools:
                self._tools.add((session_id, u.tool_call_id))
                entry = state.tool_calls[u.tool_call_id]
                title = entry.title or u.tool_call_id
                self.say(f"  [tool {u.tool_call_id}] {title} ({entry.kind}): {status or 'pending'}{detail}")
            else:
                self.say(f"  [tool {u.tool_call_id}] {status or 'updated'}{detail}")
        elif isinstance(u, v2.ToolCallContentChunkSessionUpdate):
            self.say(f"  [tool {u.tool_call_id}] +{self._describe(u.content)}")
        elif isinstance(u, v2.PlanUpdateSessionUpdate):
            plan = u.plan
            if isinstance(plan, v2.ItemsPlanUpdateContent):
                marks = {"completed": "x", "in_progress": ">", "pending": " "}
                self.say("  [plan] " + "  ".join(f"[{marks.get(e.status, '?')}] {e.content}" for e in plan.entries))
            else:
                self.say(f"  [plan {getattr(plan, 'type', '?')}]")
        elif isinstance(u, v2.TerminalUpdateSessionUpdate):
            self._terminal_update(state, u)
        elif isinstance(u, v2.TerminalOutputChunkSessionUpdate):
            self._print_lines(state, u.terminal_id)
        elif isinstance(u, v2.IdleStateUpdateSessionUpdate) and not isinstance(u.stop_reason, str):
            self.say("  [state idle]")  # no turn ended: the current state (after session/resume, say)
        elif isinstance(u, v2.IdleStateUpdateSessionUpdate):
            reason = u.stop_reason
            error = f": {u.error.message} ({u.error.code})" if isinstance(u.error, v2.Error) else ""
            self.say(f"[turn ended: {reason}{error}]")
        elif isinstance(u, v2.RunningStateUpdateSessionUpdate | v2.RequiresActionStateUpdateSessionUpdate):
            self.say(f"  [state {u.state}]")
        else:
            self.say(f"  [{getattr(u, 'session_update', type(u).__name__)}]")

    def _open_line(self, prefix: str, message_id: str) -> None:
        """Start a line that the chunks of message ``message_id`` continue."""
        if self._open_message is not None:
            self.out.write("\n")
        self.out.write(prefix)
        self._open_message = message_id

    @staticmethod
    def _describe(item: v2.ToolCallContent) -> str:
        if isinstance(item, v2.DiffToolCallContent):
            patch = item.patch if isinstance(item.patch, v2.DiffPatch) else None
            added = (
                sum(1 for line in patch.text.splitlines() if line.startswith("+") and not line.startswith("+++"))
                if patch is not None
                else None
            )
            paths = ", ".join(f"{getattr(c, 'operation', '?')} {getattr(c, 'path', '?')}" for c in item.changes)
            return f" diff {paths}" + (f": +{added} line(s)" if added is not None else "")
        if isinstance(item, v2.ContentToolCallContent):
            block = item.content
            return f" {block.text}" if isinstance(block, v2.TextContentBlock) else f" [{type(block).__name__}]"
        if isinstance(item, v2.TerminalToolCallContent):
            return f" [terminal {item.terminal_id}]"
        return f" [{getattr(item, 'type', type(item).__name__)}]"

    # -- display terminals (their bytes are in state.terminals) ------------------------------------
    def _terminal_update(self, state: SessionState, u: v2.TerminalUpdateSessionUpdate) -> None:
        key = (state.session_id or "", u.terminal_id)
        if isinstance(u.command, str):
            self.say(f"  [terminal {u.terminal_id}] $ {u.command}")
        if u.output is None:
            self._printed[key] = b""
        elif u.output is not UNSET:
            # an authoritative snapshot: print what it adds to the lines already shown
            if not bytes(state.terminals[u.terminal_id].output).startswith(self._printed.get(key, b"")):
                self.say(f"  [terminal {u.terminal_id}] (output replaced)")
                self._printed[key] = b""
            self._print_lines(state, u.terminal_id)
        if isinstance(u.exit_status, v2.TerminalExitStatus):
            self._print_lines(state, u.terminal_id, final=True)
            status = u.exit_status
            shown = status.signal if isinstance(status.signal, str) else status.exit_code
            self.say(f"  [terminal {u.terminal_id}] exited ({'unknown' if shown in (None, UNSET) else shown})")

    def _print_lines(self, state: SessionState, terminal_id: str, *, final: bool = False) -> None:
        key = (state.session_id or "", terminal_id)
        data = bytes(state.terminals[terminal_id].output)
        printed = self._printed.get(key, b"")
        pending = data[len(printed) :]
        lines = pending.split(b"\n")
        rest = lines.pop()
        for line in lines:
            shown = line.rstrip(b"\r").decode("utf-8", "replace")
            self.say(f"  [terminal {terminal_id}] {shown}")
        if final and rest:
            self.say(f"  [terminal {terminal_id}] {rest.decode('utf-8', 'replace')}")
            rest = b""
        self._printed[key] = data[: len(data) - len(rest)]

    # -- permission ------------------------------------------------------------------------------
    def _permission_label(self, request: v2.RequestPermissionRequest) -> str:
        subject = request.subject
        if isinstance(subject, v2.ToolCallRequestPermissionSubject):
            return f"{request.title} (tool {subject.tool_call.tool_call_id})"
        return str(request.title)

    # -- a prompt turn ---------------------------------------------------------------------------
    async def run_turn(self, session_id: str, text: str, *, timeout: float) -> str | None:
        """Send ``text`` as a prompt and wait until the agent reports ``idle``: the stop reason.

        ``None`` when the turn did not end within ``timeout`` seconds (it is then still running:
        cancel it with :meth:`cancel`).  Raises what :meth:`~acp_trio.StandardClient.wait_turn_end`
        raises (the connection's :class:`~acp_trio.ConnectionClosed`, saying how the agent process
        ended, when the agent went away first; :class:`~acp_trio.standard_client.SessionEnded`),
        and what ``session/prompt`` raises.
        """
        mark = self.states.state(session_id).idle_count
        with trio.move_on_after(timeout):
            await self.conn.agent.session_prompt(
                v2.PromptRequest(session_id=session_id, prompt=[v2.TextContentBlock(text=text)])
            )
            return await self.wait_turn_end(session_id, after=mark)
        return None

    async def wait_idle(self, session_id: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the turn of ``session_id`` to end; whether it did
        (raises as :meth:`~acp_trio.StandardClient.wait_turn_end` does)."""
        with trio.move_on_after(timeout):
            await self.wait_turn_end(session_id)
            return True
        return False


def demo_client_v2_factory(
    out: TextIO | None = None, *, allow: bool = True, **options: Any
) -> Callable[[ClientSideConnection], DemoClientV2]:
    """A factory for ``spawn_agent(client={v2: ...})`` that prints the transcript to ``out``
    (``options``: as for :class:`DemoClientV2`)."""

    def make(conn: ClientSideConnection) -> DemoClientV2:
        return DemoClientV2(conn, out, allow=allow, **options)

    return make

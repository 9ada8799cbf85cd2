"""The example client, protocol version 2: a printed transcript of a v2 prompt turn.

A v2 client has no file system or terminal to offer (the agent does that work itself); it shows
what the agent reports and answers ``session/request_permission``.  Every ``session/update`` is
printed as it arrives, in the style of :mod:`acp_trio.demo.client`: agent messages (by
``messageId``), tool calls (the first ``tool_call_update`` of an id creates one), plans, the
agent's display terminals (``terminal_update`` / ``terminal_output_chunk``: the command, its output
line by line and its exit) and the session's state (``state_update``; ``idle`` ends the turn with
its stop reason).  Permission requests get the first "allow" option (``--deny``: the first
"reject" one), as with :mod:`acp_trio.permissions`.

:meth:`DemoClientV2.run_turn` sends ``session/prompt`` (whose response is only a receipt) and
waits, bounded, for the ``idle`` state that ends the turn.
"""

from __future__ import annotations

import base64
import binascii
import sys
from collections.abc import Callable, Iterable
from typing import TextIO

import trio

from acp_schema import v2
from acp_trio import UNSET, ClientSideConnection, ConnectionClosed
from acp_trio.permissions import ALLOW_KINDS, REJECT_KINDS

CLIENT_INFO = v2.Implementation(name="acp-trio-demo-client", title="acp-trio demo client", version="1")


def choose_option(options: Iterable[v2.PermissionOption], kinds: Iterable[str]) -> v2.PermissionOption | None:
    """The first option whose ``kind`` is ``kinds[0]``, else ``kinds[1]``, ... (``None``: none fits)."""
    options = list(options)
    for kind in kinds:
        for option in options:
            if option.kind == kind:
                return option
    return None


class _Terminal:
    """What the client keeps of one display terminal: its bytes and how many of them were printed."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.printed = 0


class _Turn:
    def __init__(self) -> None:
        self.ended = trio.Event()
        self.stop_reason: str | None = None


class DemoClientV2:
    """The v2 demo client; construct it with the connection (``client={v2: demo_client_v2_factory()}``).

    ``out``: where the transcript goes (default ``sys.stdout``).  ``allow``: answer permission
    requests with an "allow" option (else with a "reject" one).
    """

    def __init__(self, conn: ClientSideConnection, out: TextIO | None = None, *, allow: bool = True) -> None:
        self.conn = conn
        self.out = out if out is not None else sys.stdout
        self.allow = allow
        self.capabilities = v2.ClientCapabilities()
        """What this client offers (nothing beyond the v2 baseline)."""
        self._open_message: str | None = None  # the messageId of the agent message line being printed
        self._tools: set[tuple[str, str]] = set()
        self._terminals: dict[tuple[str, str], _Terminal] = {}
        self._turns: dict[str, _Turn] = {}

    # -- transcript ------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        """Print one transcript line."""
        if self._open_message is not None:
            self.out.write("\n")
            self._open_message = None
        self.out.write(text + "\n")
        self.out.flush()

    async def session_update(self, params: v2.UpdateSessionNotification) -> None:
        self.on_update(params.session_id, params.update)

    def on_update(self, session_id: str, update: v2.SessionUpdate) -> None:
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
                title = u.title if isinstance(u.title, str) else u.tool_call_id
                kind = u.kind if isinstance(u.kind, str) else "other"
                self.say(f"  [tool {u.tool_call_id}] {title} ({kind}): {status or 'pending'}{detail}")
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
            self._terminal_update(session_id, u)
        elif isinstance(u, v2.TerminalOutputChunkSessionUpdate):
            terminal = self._terminals.setdefault((session_id, u.terminal_id), _Terminal())
            terminal.data += self._decode(u.terminal_id, u.data)
            self._print_lines(u.terminal_id, terminal)
        elif isinstance(u, v2.IdleStateUpdateSessionUpdate):
            reason = u.stop_reason if isinstance(u.stop_reason, str) else "unknown"
            error = f": {u.error.message} ({u.error.code})" if isinstance(u.error, v2.Error) else ""
            self.say(f"[turn ended: {reason}{error}]")
            turn = self._turns.get(session_id)
            if turn is not None and not turn.ended.is_set():
                turn.stop_reason = reason
                turn.ended.set()
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

    # -- display terminals -----------------------------------------------------------------------
    def _decode(self, terminal_id: str, data: str) -> bytes:
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            self.say(f"  [terminal {terminal_id}] (output that is not base64, not shown)")
            return b""

    def _terminal_update(self, session_id: str, u: v2.TerminalUpdateSessionUpdate) -> None:
        terminal = self._terminals.setdefault((session_id, u.terminal_id), _Terminal())
        if isinstance(u.command, str):
            self.say(f"  [terminal {u.terminal_id}] $ {u.command}")
        if u.output is None:
            terminal.data, terminal.printed = bytearray(), 0
        elif u.output is not UNSET:
            # an authoritative snapshot: print what it adds to the lines already shown
            snapshot = self._decode(u.terminal_id, u.output.data)
            if not snapshot.startswith(terminal.data[: terminal.printed]):
                self.say(f"  [terminal {u.terminal_id}] (output replaced)")
                terminal.printed = 0
            terminal.data = bytearray(snapshot)
            self._print_lines(u.terminal_id, terminal)
        if isinstance(u.exit_status, v2.TerminalExitStatus):
            self._print_lines(u.terminal_id, terminal, final=True)
            status = u.exit_status
            shown = status.signal if isinstance(status.signal, str) else status.exit_code
            self.say(f"  [terminal {u.terminal_id}] exited ({'unknown' if shown in (None, UNSET) else shown})")

    def _print_lines(self, terminal_id: str, terminal: _Terminal, *, final: bool = False) -> None:
        pending = bytes(terminal.data[terminal.printed :])
        lines = pending.split(b"\n")
        rest = lines.pop()
        for line in lines:
            shown = line.rstrip(b"\r").decode("utf-8", "replace")
            self.say(f"  [terminal {terminal_id}] {shown}")
        terminal.printed += len(pending) - len(rest)
        if final and rest:
            self.say(f"  [terminal {terminal_id}] {rest.decode('utf-8', 'replace')}")
            terminal.printed += len(rest)

    # -- permission ------------------------------------------------------------------------------
    async def session_request_permission(self, params: v2.RequestPermissionRequest) -> v2.RequestPermissionResponse:
        subject = params.subject
        about = (
            f" (tool {subject.tool_call.tool_call_id})"
            if isinstance(subject, v2.ToolCallRequestPermissionSubject)
            else ""
        )
        chosen = choose_option(params.options, ALLOW_KINDS if self.allow else REJECT_KINDS)
        if chosen is None:
            self.say(f"  [permission] {params.title}{about}: no suitable option offered; cancelling")
            return v2.RequestPermissionResponse(outcome=v2.CancelledRequestPermissionOutcome())
        self.say(f"  [permission] {params.title}{about}: choosing {chosen.name!r} ({chosen.kind})")
        return v2.RequestPermissionResponse(outcome=v2.SelectedRequestPermissionOutcome(option_id=chosen.option_id))

    # -- a prompt turn ---------------------------------------------------------------------------
    async def run_turn(self, session_id: str, text: str, *, timeout: float) -> str | None:
        """Send ``text`` as a prompt and wait until the agent reports ``idle``: the stop reason.

        ``None`` when the turn did not end within ``timeout`` seconds.  Raises
        :class:`~acp_trio.ConnectionClosed` when the agent went away first, and what
        ``session/prompt`` raises.
        """
        turn = self._turns[session_id] = _Turn()  # before sending: idle may come before the receipt
        await self.conn.agent.session_prompt(
            v2.PromptRequest(session_id=session_id, prompt=[v2.TextContentBlock(text=text)])
        )
        with trio.move_on_after(timeout):
            async with trio.open_nursery() as nursery:

                async def watch_close() -> None:
                    await self.conn.wait_closed()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(watch_close)
                await turn.ended.wait()
                nursery.cancel_scope.cancel()
        if not turn.ended.is_set() and self.conn.closed:
            raise ConnectionClosed("the agent closed the connection before the turn ended")
        return turn.stop_reason

    async def wait_idle(self, session_id: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the turn of ``session_id`` to end; whether it did."""
        turn = self._turns.get(session_id)
        if turn is None:
            return True
        with trio.move_on_after(timeout):
            await turn.ended.wait()
        return turn.ended.is_set()


def demo_client_v2_factory(
    out: TextIO | None = None, *, allow: bool = True
) -> Callable[[ClientSideConnection], DemoClientV2]:
    """A factory for ``spawn_agent(client={v2: ...})`` that prints the transcript to ``out``."""

    def make(conn: ClientSideConnection) -> DemoClientV2:
        return DemoClientV2(conn, out, allow=allow)

    return make

"""The example agent: one prompt turn that shows the protocol's moving parts, in versions 1 and 2.

It is one :class:`acp_trio.neutral.Agent`: the turn is written once and served to v1 and v2
clients alike (the client's ``initialize`` picks the version; ``docs/protocol/v2/migration.mdx``
§ Supporting v1 and v2 side by side).  On a prompt it streams a message, publishes a plan of three
steps, reports a tool call and asks permission for it (``session/request_permission``; not in the
``auto`` mode), reads ``notes.txt`` from the session directory, counts its words with
``python -c WORD_COUNT``, asks the user (``elicitation/create``, a form, when the client offers
forms) whether the summary gives the word count, writes ``summary.txt`` (a tool call with a diff)
and ends the turn with stop reason ``end_turn``.  ``session/cancel`` or ``session/close`` ends it
``cancelled``.

What differs by version is the layer's (:mod:`acp_trio.neutral`), with one capability choice of
the agent's: files go through the v1 client's ``fs/*`` when it offers them (its unsaved buffers
count), else the agent reads and writes them itself (always on v2, which has no client file
system); the word count runs in a v1 client's terminal (``terminal/*``) when it offers one, else
the agent runs it itself and shows it as a display terminal (v2 ``terminal_update`` /
``terminal_output_chunk``; on v1 the tool call's text).  The layer also gives the session
lifecycle: v1 ``session/load`` and v2 ``session/resume`` with ``replayFrom`` replay a session made
on either version, ``session/list``, ``session/close``, ``session/delete``, and the ``mode``
config option (v1 also ``modes`` and ``session/set_mode``).

With a session store (``--serve-agent --store PATH``: the layer's ``Agent.store``) every session is
kept in it, whichever version made it: it outlives the process, and a later process loads (v1) or
resumes (both versions; v2 ``replayFrom: {type: start}``) it from the store.

Run it alone with ``python -m acp_trio.demo --serve-agent [--protocol 1|2]``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import trio

from acp_trio import AgentSideConnection, RequestError, run_agent_stdio
from acp_trio import neutral as n
from acp_trio._signals import run_until_signalled

if TYPE_CHECKING:
    from acp_trio.session_store import SessionStore

AGENT_INFO = n.AgentInfo(name="acp-trio-demo-agent", version="1", title="acp-trio demo agent")
WORD_COUNT = "import pathlib; text = pathlib.Path('notes.txt').read_text(encoding='utf-8'); print(len(text.split()))"
"""The word count: ``python -c WORD_COUNT`` in the session directory (a client terminal or the agent's own)."""
PLAN_STEPS = ("Read notes.txt", "Count its words", "Write summary.txt")
"""The steps of the plan the agent publishes."""
MODE = n.mode_option(
    [n.Choice("ask", "Ask", "Ask before reading files"), n.Choice("auto", "Auto", "Read files without asking")],
    description="Whether the agent asks permission before it reads notes.txt",
)
"""The session's one config option; on v1 also its ``modes`` (``session/set_mode``)."""
WORD_COUNT_QUESTION = "Should summary.txt give the word count?"
WORD_COUNT_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "include_word_count": {"type": "boolean", "title": "Include the word count", "default": True},
    },
    "required": ["include_word_count"],
}
"""The form the agent asks with ``elicitation/create`` when the client offers form elicitation
(``elicitation.mdx``)."""


def wants_word_count(answer: n.Elicited) -> bool:
    """From the answer to :data:`WORD_COUNT_FORM`: ``False`` only when the user accepted with
    ``include_word_count`` false; a decline or cancel keeps the default (the spec: agents fall back
    safely)."""
    if not answer.accepted or answer.content is None:
        return True
    return answer.content.get("include_word_count") is not False


def _plan(done: int) -> list[n.PlanEntry]:
    """:data:`PLAN_STEPS` with the first ``done`` completed and the next one in progress."""

    def status(i: int) -> str:
        return "completed" if i < done else ("in_progress" if i == done else "pending")

    return [n.PlanEntry(step, status=status(i), priority="high") for i, step in enumerate(PLAN_STEPS)]


def _reason(exc: Exception) -> str:
    """Why a file could not be read or written, in a few words."""
    if isinstance(exc, FileNotFoundError):
        return "File not found"
    if isinstance(exc, RequestError):  # the v1 client's answer (-32002: "Resource not found")
        return exc.message
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


class DemoAgent(n.Agent):
    """The demo agent: one object serves every connection, v1 and v2 (pass it to
    ``run_agent_stdio``, ``AcpApp`` or ``open_memory_pair``).

    ``versions``: the protocol versions it serves (default both).  ``store``: keep every session in
    this :class:`~acp_trio.session_store.SessionStore` (:attr:`acp_trio.neutral.Agent.store`:
    ``session/load``, ``resume``, ``list``, ``close``, ``delete`` from it, in both versions; they
    outlive the process).
    """

    info = AGENT_INFO
    mcp_support = n.McpSupport(stdio=True)
    """It accepts stdio MCP server configs (v1: every agent; v2 ``session.mcp.stdio``) and keeps them
    as the session's ``mcp_servers``; its scripted turn calls no MCP tool, so it starts none."""

    def __init__(self, *, versions: Sequence[int] = (1, 2), store: SessionStore | None = None) -> None:
        super().__init__()
        self.served = tuple(versions)
        self.store = store
        self._turns: dict[str, int] = {}

    def acp_handlers(self) -> dict[ModuleType, Callable[[AgentSideConnection], Any]]:
        """:func:`acp_trio.neutral.handlers` for :attr:`served`."""
        return n.handlers(self, self.served)

    def config_options(self, session: n.Session) -> Sequence[n.ConfigOption]:
        return (MODE,)

    async def delete_session(self, session_id: str) -> None:
        self._turns.pop(session_id, None)

    async def prompt(self, turn: n.Turn) -> n.StopReason:
        session = turn.session
        number = self._turns[session.id] = self._turns.get(session.id, 0) + 1
        suffix = "" if number == 1 else f"_{number}"  # the ids of a session's later turns are new
        cwd = session.cwd
        await self._say(turn, "Let me read your notes and write a summary.")
        # one plan per session, replaced by each turn (v1 would show several live plans as one list)
        plan = await turn.plan(_plan(0), plan_id="plan")

        notes = os.path.join(cwd, "notes.txt")
        read = await turn.tool("Read notes.txt", kind="read", locations=[notes], tool_call_id=f"call_read{suffix}")
        if session.config.get(MODE.config_id) != "auto":
            decision = await read.ask_permission(f"Allow the agent to read {notes}?")
            if decision.cancelled:  # session/cancel while it waited: the tool call is reported cancelled
                return "cancelled"
            if not decision.allowed:
                await read.fail()
                await self._say(turn, "Permission denied, so I stopped here.")
                return "end_turn"
        await read.update(status="in_progress")
        try:
            text: str = await session.files.read_text(notes)
        except (OSError, UnicodeDecodeError, ValueError, RequestError) as exc:
            reason = _reason(exc)
            await read.fail(reason)
            await self._say(turn, f"I could not read notes.txt: {reason}.")
            return "end_turn"
        lines = [line for line in text.splitlines() if line.strip()]
        await read.complete([f"{len(lines)} non-empty lines"])
        await plan.set(_plan(1))

        words = await self._count_words(turn, f"call_count{suffix}", f"term_{number}")
        await plan.set(_plan(2))

        first = lines[0] if lines else "(none)"
        summary = f"notes.txt has {len(lines)} non-empty lines; the first is: {first}\n"
        if words is not None and await self._ask_word_count(turn):
            summary += f"It has {words} words.\n"
        summary_path = os.path.join(cwd, "summary.txt")
        write = await turn.tool(
            "Write summary.txt",
            kind="edit",
            locations=[summary_path],
            status="in_progress",
            tool_call_id=f"call_write{suffix}",
        )
        try:
            old: str | None = await session.files.read_text(summary_path, missing=None)
        except (OSError, UnicodeDecodeError, ValueError, RequestError):
            old = ""  # something unreadable: the diff shows the new text only
        try:
            await session.files.write_text(summary_path, summary)
        except (OSError, ValueError, RequestError) as exc:
            reason = _reason(exc)
            await write.fail(reason)
            await self._say(turn, f"I could not write summary.txt: {reason}.")
            return "end_turn"
        await write.complete([n.Diff(summary_path, old, summary)])
        await plan.set(_plan(3))
        await self._say(turn, f"Done: summary.txt says {summary.splitlines()[0]!r}")
        return "end_turn"

    @staticmethod
    async def _say(turn: n.Turn, text: str) -> None:
        """Stream ``text`` word by word (one ``agent_message_chunk`` each, one message)."""
        turn.new_message()
        for word in text.split(" "):
            await turn.say(word + " ")
            await trio.lowlevel.checkpoint()

    @staticmethod
    async def _ask_word_count(turn: n.Turn) -> bool:
        """Ask the user (``elicitation/create``, a form) whether the summary gives the word count,
        when the client offers forms; yes unless the user says no."""
        if not turn.session.client.can_elicit("form"):
            return True
        try:
            answer = await turn.elicit(WORD_COUNT_QUESTION, WORD_COUNT_FORM)
        except RequestError:
            return True
        return wants_word_count(answer)

    @staticmethod
    async def _count_words(turn: n.Turn, tool_call_id: str, terminal_id: str) -> int | None:
        """Run :data:`WORD_COUNT` in the session directory, shown live in a tool call: in the v1
        client's terminal when it offers one, else run by the agent as a display terminal.  The
        count, or ``None`` when it failed."""
        session = turn.session
        argv = [sys.executable, "-c", WORD_COUNT]
        count = await turn.tool(
            "Count words in notes.txt", kind="execute", status="in_progress", tool_call_id=tool_call_id
        )
        shown: list[Any]
        if session.client.offers_terminal():
            async with session.client_terminal().open(argv[0], args=argv[1:], cwd=session.cwd) as term:
                await count.update(content=[term])  # the client shows the terminal's output live
                exit_status = await term.wait_for_exit(timeout=30)
                output = (await term.output()).output.strip()
            shown, code, detail = [term], exit_status.exit_code, exit_status.exit_code or exit_status.signal
        else:
            try:
                ran = await count.run(argv, cwd=session.cwd, timeout=30, terminal_id=terminal_id)
            except OSError as exc:
                await count.update(status="failed", content=[*count.content, f"cannot run: {exc}"])
                return None
            output = ran.output.decode("utf-8", "replace").strip()
            shown, code, detail = list(count.content), ran.exit_code, ran.exit_code or ran.signal
        if code != 0 or not output.isdigit():
            await count.update(status="failed", content=[*shown, f"word count failed ({detail}): {output[-200:]}"])
            return None
        await count.complete([*shown, f"{output} words"])
        return int(output)


def agents_for(versions: Sequence[int] = (1, 2)) -> dict[ModuleType, Callable[[AgentSideConnection], Any]]:
    """The demo agent's ``{variant: factory}`` mapping for the protocol ``versions`` given, one
    :class:`DemoAgent` per connection: a server's clients do not see (``session/list``) or load
    each other's sessions, and a session's history goes with its connection."""

    def factory(module: ModuleType) -> Callable[[AgentSideConnection], Any]:
        return lambda conn: DemoAgent(versions=versions).acp_handlers()[module](conn)

    return {module: factory(module) for module in n.handlers(DemoAgent(), versions)}


def serve(versions: Sequence[int] = (1, 2), store: str | None = None) -> None:
    """Serve the demo agent on this process's stdio for the protocol ``versions`` given (default
    both) until the client closes it; ``store``: the SQLite file the sessions are kept in."""
    sessions = None
    if store is not None:
        from acp_trio.session_store import SqliteSessionStore

        sessions = SqliteSessionStore(store)
    run_agent_stdio(DemoAgent(versions=versions, store=sessions))


def serve_remote(
    url: str,
    versions: Sequence[int] = (1, 2),
    *,
    token: str | None = None,
    max_connections: int | None = None,
    idle_timeout: float | None = 300.0,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
) -> None:
    """Serve the demo agent on ``url`` (``http://HOST:PORT``; WebSocket on ``/acp``) until interrupted:
    one agent per connection (:func:`agents_for`; ``python -m acp_trio.demo --serve URL``; needs
    ``acp-trio[remote]``).  The keyword options are :class:`~acp_trio.transports.asgi.AcpApp`'s
    (``idle_timeout`` in seconds)."""
    from urllib.parse import urlsplit

    from acp_trio.transports.asgi import AcpApp
    from acp_trio.transports.asgi import serve as serve_asgi

    parts = urlsplit(url if "://" in url else f"http://{url}")
    host, port = parts.hostname or "127.0.0.1", 8765 if parts.port is None else parts.port
    app = AcpApp(
        agents_for(versions),
        token=token,
        max_connections=max_connections,
        idle_timeout=idle_timeout,
        allowed_origins=allowed_origins,
        allowed_hosts=allowed_hosts,
    )

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(serve_asgi, app, host, port)
            print(f"serving the demo agent on {bound[0].replace('http', 'ws', 1)}/acp", file=sys.stderr, flush=True)

    run_until_signalled(main, name="demo")  # SIGINT, SIGTERM: connections closed, exit 0


def main() -> None:
    """Serve the demo agent (both versions) on this process's stdio until the client closes it."""
    serve()


if __name__ == "__main__":
    main()

"""The example agent, protocol version 2: the same prompt turn as :mod:`acp_trio.demo.agent`, the v2 way.

In v2 there is no client file system and no client terminal, and the ``session/prompt`` response
only accepts the prompt (``docs/protocol/v2/prompt-lifecycle.mdx``).  On ``session/prompt`` this
agent reports the user message (``user_message``, the ``messageId`` of its receipt), accepts the
prompt and runs the turn in the background (:meth:`acp_trio.AgentSideConnection.start_turn`: the
runtime sends ``state_update`` ``running``, then ``idle`` with the stop reason).  The turn streams
``agent_message_chunk`` updates, publishes a ``plan_update``, creates the read tool call with a
``tool_call_update`` and asks ``session/request_permission`` for it (``subject``: the tool call;
``state_update`` ``requires_action`` while it waits, ``running`` after), reads ``notes.txt`` from
the session directory itself, counts its words by running ``python -c WORD_COUNT`` itself and
shows the command as an agent-owned display terminal (``terminal_update`` and
``terminal_output_chunk``, anchored in a tool call), asks whether the summary gives the word count
(``elicitation/create``, a form, when the client offers forms), writes ``summary.txt`` itself (a tool call
with a diff) and ends with stop reason ``end_turn``.  ``session/cancel`` ends it ``cancelled``
(the runtime does that), and so does ``session/close``.

``python -m acp_trio.demo --serve-agent`` serves this agent and the v1 one side by side
(``{v1: DemoAgent, v2: DemoAgentV2}``): the client's ``initialize`` picks the version.
"""

from __future__ import annotations

import base64
import difflib
import os
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Sequence
from functools import partial
from types import ModuleType
from typing import Any

import trio

from acp_schema import v1, v2
from acp_trio import UNSET, AgentSideConnection, RequestError, UnsetType, converter, run_agent_stdio

from .agent import (
    PLAN_STEPS,
    WORD_COUNT,
    WORD_COUNT_FORM,
    WORD_COUNT_QUESTION,
    DemoAgent,
    offers_forms,
    wants_word_count,
)

AGENT_INFO = v2.Implementation(name="acp-trio-demo-agent", title="acp-trio demo agent", version="1")
PERMISSION_OPTIONS = (
    v2.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    v2.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
)
ALLOWING = ("allow_once", "allow_always")


def git_patch(path: str, old: str | None, new: str) -> str:
    """A ``git_patch`` (absolute paths, no ``a/``/``b/`` prefixes) turning ``old`` into ``new``;
    ``old`` ``None``: a new file.  Empty when nothing changed."""
    lines = list(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile="/dev/null" if old is None else path,
            tofile=path,
        )
    )
    if not lines:
        return ""
    body = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return f"diff --git {path} {path}\n" + ("new file mode 100644\n" if old is None else "") + body


def shell_words(argv: Sequence[str]) -> str:
    """``argv`` as one shell-quoted line for display, preferring double quotes where they are plain."""
    return " ".join(
        f'"{arg}"' if arg and not any(c in arg for c in '"$`\\!') and shlex.quote(arg) != arg else shlex.quote(arg)
        for arg in argv
    )


def _text(text: str) -> v2.ContentToolCallContent:
    return v2.ContentToolCallContent(content=v2.TextContentBlock(text=text))


def _exit_status(returncode: int) -> v2.TerminalExitStatus:
    if returncode >= 0:
        return v2.TerminalExitStatus(exit_code=returncode)
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return v2.TerminalExitStatus(signal=name)


class DemoAgentV2:
    """The v2 demo agent; construct it with the connection (``run_agent_stdio({v2: DemoAgentV2})``)."""

    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn
        self.client = v2.ClientPeer(conn)
        self._turns = 0
        self._terminals = 0
        self._busy: dict[str, trio.CancelScope | None] = {}
        """Sessions with a turn in progress, with the scope ``session/close`` cancels (once it runs)."""
        self._history: dict[str, list[v2.SessionUpdate]] = {}
        """Every update each session sent, replayed by ``session/resume`` with ``replayFrom: start``."""

    # -- initialization and sessions -------------------------------------------------------------
    async def initialize(self, params: v2.InitializeRequest) -> v2.InitializeResponse:
        prompt = v2.PromptCapabilities(embedded_context=v2.PromptEmbeddedContextCapabilities())
        return v2.InitializeResponse(
            protocol_version=self.conn.protocol_version,
            info=AGENT_INFO,
            capabilities=v2.AgentCapabilities(session=v2.SessionCapabilities(prompt=prompt)),
            auth_methods=[],
        )

    async def session_new(self, params: v2.NewSessionRequest) -> v2.NewSessionResponse:
        if not os.path.isabs(params.cwd):
            raise RequestError.invalid_params({"path": "$.cwd", "detail": "cwd must be an absolute path"})
        return v2.NewSessionResponse(session_id=f"sess_{uuid.uuid4().hex[:12]}")

    async def session_list(self, params: v2.ListSessionsRequest) -> v2.ListSessionsResponse:
        cwd = params.cwd if isinstance(params.cwd, str) else None
        sessions = [
            v2.SessionInfo(session_id=info.session_id, cwd=info.cwd)
            for info in self.conn.sessions.values()
            if cwd is None or info.cwd == cwd
        ]
        return v2.ListSessionsResponse(sessions=sessions)

    async def session_resume(self, params: v2.ResumeSessionRequest) -> v2.ResumeSessionResponse:
        # sessions live as long as this connection; replayFrom start replays them before answering
        # (docs/protocol/v2/session-setup.mdx § Resuming Sessions)
        if params.session_id not in self.conn.sessions:
            raise RequestError.resource_not_found(params.session_id)
        if isinstance(params.replay_from, v2.StartReplayFrom):
            for update in list(self._history.get(params.session_id, ())):
                await self.client.session_update(
                    v2.UpdateSessionNotification(session_id=params.session_id, update=update)
                )
        return v2.ResumeSessionResponse()

    async def session_close(self, params: v2.CloseSessionRequest) -> v2.CloseSessionResponse:
        if params.session_id not in self.conn.sessions:
            raise RequestError.resource_not_found(params.session_id)
        scope = self._busy.get(params.session_id)
        if scope is not None:  # session-setup.mdx: cancel ongoing work as if session/cancel had been called
            scope.cancel()
        return v2.CloseSessionResponse()

    # -- the prompt turn -------------------------------------------------------------------------
    async def session_prompt(self, params: v2.PromptRequest) -> v2.PromptResponse:
        session_id = params.session_id
        session = self.conn.sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(session_id)
        if session_id in self._busy:
            raise RequestError.invalid_request({"detail": "this demo agent runs one turn per session at a time"})
        self._busy[session_id] = None
        self._turns += 1
        message_id = f"msg_user_{uuid.uuid4().hex[:12]}"
        try:
            # where the user message went; this id is the receipt's (it may arrive before the response)
            await self._send(
                session_id, v2.UserMessageSessionUpdate(message_id=message_id, content=list(params.prompt))
            )
            self.conn.start_turn(session_id, partial(self._turn, session_id, session.cwd, self._turns))
        except BaseException:
            del self._busy[session_id]
            raise
        return v2.PromptResponse(message_id=message_id)

    async def _turn(self, session_id: str, cwd: str, number: int) -> str:
        try:
            with trio.CancelScope() as scope:
                self._busy[session_id] = scope
                return await self._work(session_id, cwd, "" if number == 1 else f"_{number}")
            return "cancelled"  # session/close cancelled the turn
        finally:
            self._busy.pop(session_id, None)

    async def _send(self, session_id: str, update: v2.SessionUpdate) -> None:
        self._history.setdefault(session_id, []).append(update)
        await self.client.session_update(v2.UpdateSessionNotification(session_id=session_id, update=update))

    async def _say(self, session_id: str, text: str) -> None:
        message_id = f"msg_agent_{uuid.uuid4().hex[:12]}"
        for word in text.split(" "):
            chunk = v2.TextContentBlock(text=word + " ")
            await self._send(session_id, v2.AgentMessageChunkSessionUpdate(message_id=message_id, content=chunk))
            await trio.lowlevel.checkpoint()

    async def _plan(self, session_id: str, plan_id: str, done: int) -> None:
        def status(i: int) -> v2.PlanEntryStatus:
            return "completed" if i < done else ("in_progress" if i == done else "pending")

        entries = [v2.PlanEntry(content=step, priority="high", status=status(i)) for i, step in enumerate(PLAN_STEPS)]
        plan = v2.ItemsPlanUpdateContent(plan_id=plan_id, entries=entries)
        await self._send(session_id, v2.PlanUpdateSessionUpdate(plan=plan))

    async def _tool(
        self,
        session_id: str,
        tool_call_id: str,
        *,
        title: str | UnsetType = UNSET,
        kind: v2.ToolKind | UnsetType = UNSET,
        status: v2.ToolCallStatus | UnsetType = UNSET,
        content: list[v2.ToolCallContent] | UnsetType = UNSET,
        locations: list[v2.ToolCallLocation] | UnsetType = UNSET,
    ) -> None:
        """A ``tool_call_update``: the first one for an id creates the tool call, later ones patch
        it (omitted fields unchanged; ``content`` and ``locations`` replaced whole)."""
        update = v2.ToolCallUpdateSessionUpdate(
            tool_call_id=tool_call_id, title=title, kind=kind, status=status, content=content, locations=locations
        )
        await self._send(session_id, update)

    async def _work(self, session_id: str, cwd: str, suffix: str) -> str:
        plan_id = f"plan{suffix or '_1'}"
        await self._say(session_id, "Let me read your notes and write a summary.")
        await self._plan(session_id, plan_id, 0)

        notes = os.path.join(cwd, "notes.txt")
        read_id = f"call_read{suffix}"
        await self._tool(
            session_id,
            read_id,
            title="Read notes.txt",
            kind="read",
            status="pending",
            locations=[v2.ToolCallLocation(path=notes)],
        )
        allowed = await self._ask(session_id, read_id, "Read notes.txt", f"Allow the agent to read {notes}?")
        if allowed is None:  # answered "cancelled": the client sent session/cancel
            await self._tool(session_id, read_id, status="cancelled")
            return "cancelled"
        if not allowed:
            await self._tool(session_id, read_id, status="failed")
            await self._say(session_id, "Permission denied, so I stopped here.")
            return "end_turn"
        await self._tool(session_id, read_id, status="in_progress")
        try:
            text = await trio.Path(notes).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = "File not found" if isinstance(exc, FileNotFoundError) else str(exc)
            await self._tool(session_id, read_id, status="failed", content=[_text(reason)])
            await self._say(session_id, f"I could not read notes.txt: {reason}.")
            return "end_turn"
        lines = [line for line in text.splitlines() if line.strip()]
        await self._tool(session_id, read_id, status="completed", content=[_text(f"{len(lines)} non-empty lines")])
        await self._plan(session_id, plan_id, 1)

        words = await self._count_words(session_id, cwd, f"call_count{suffix}")
        await self._plan(session_id, plan_id, 2)

        summary_path = os.path.join(cwd, "summary.txt")
        first = lines[0] if lines else "(none)"
        summary = f"notes.txt has {len(lines)} non-empty lines; the first is: {first}\n"
        if words is not None and await self._ask_word_count(session_id):
            summary += f"It has {words} words.\n"
        write_id = f"call_write{suffix}"
        await self._tool(
            session_id,
            write_id,
            title="Write summary.txt",
            kind="edit",
            status="in_progress",
            locations=[v2.ToolCallLocation(path=summary_path)],
        )
        path = trio.Path(summary_path)
        try:
            old = await path.read_text(encoding="utf-8") if await path.exists() else None
        except (OSError, UnicodeDecodeError):
            old = ""  # something unreadable: the patch shows the new text only
        try:
            await path.write_text(summary, encoding="utf-8")
        except OSError as exc:
            await self._tool(session_id, write_id, status="failed", content=[_text(str(exc))])
            await self._say(session_id, f"I could not write summary.txt: {exc.strerror or exc}.")
            return "end_turn"
        change: v2.DiffChange = (
            v2.AddDiffChange(path=summary_path, file_type="text")
            if old is None
            else v2.ModifyDiffChange(path=summary_path, file_type="text")
        )
        patch_text = git_patch(summary_path, old, summary)
        patch = v2.DiffPatch(format="git_patch", text=patch_text) if patch_text else UNSET
        await self._tool(
            session_id, write_id, status="completed", content=[v2.DiffToolCallContent(changes=[change], patch=patch)]
        )
        await self._plan(session_id, plan_id, 3)
        await self._say(session_id, f"Done: summary.txt says {summary.splitlines()[0]!r}")
        return "end_turn"

    async def _ask(self, session_id: str, tool_call_id: str, tool_title: str, question: str) -> bool | None:
        """``session/request_permission`` about a tool call, reporting ``requires_action`` while it
        waits: whether an allow option was chosen, ``None`` when the answer was ``cancelled``."""
        request = v2.RequestPermissionRequest(
            session_id=session_id,
            title=question,
            subject=v2.ToolCallRequestPermissionSubject(
                tool_call=v2.ToolCallUpdate(tool_call_id=tool_call_id, title=tool_title)
            ),
            options=list(PERMISSION_OPTIONS),
        )
        await self._send(session_id, v2.RequiresActionStateUpdateSessionUpdate())
        response = await self.client.session_request_permission(request)
        outcome = response.outcome
        if isinstance(outcome, v2.CancelledRequestPermissionOutcome):
            return None
        await self._send(session_id, v2.RunningStateUpdateSessionUpdate())
        if not isinstance(outcome, v2.SelectedRequestPermissionOutcome):
            return False  # an outcome this agent does not know: never approval
        kinds = {option.option_id: option.kind for option in PERMISSION_OPTIONS}
        return kinds.get(outcome.option_id) in ALLOWING

    async def _ask_word_count(self, session_id: str) -> bool:
        """Ask the user (``elicitation/create``, a form) whether the summary gives the word count,
        when the client offers forms, reporting ``requires_action`` while it waits; yes unless the
        user says no."""
        if not offers_forms(self.conn.client_capabilities):
            return True
        await self._send(session_id, v2.RequiresActionStateUpdateSessionUpdate())
        try:
            answer = await self.client.elicitation_create(
                v2.FormCreateElicitationRequest(
                    message=WORD_COUNT_QUESTION,
                    requested_schema=converter.structure(WORD_COUNT_FORM, v2.ElicitationSchema),
                    session_id=session_id,
                )
            )
        except RequestError:
            answer = None
        await self._send(session_id, v2.RunningStateUpdateSessionUpdate())
        return wants_word_count(answer)

    async def _count_words(self, session_id: str, cwd: str, tool_call_id: str) -> int | None:
        """Run the word count itself, shown live as a display terminal in a tool call; ``None`` if it failed."""
        self._terminals += 1
        terminal_id = f"term_{self._terminals}"
        argv = [sys.executable, "-c", WORD_COUNT]
        anchor = v2.TerminalToolCallContent(terminal_id=terminal_id)
        await self._tool(
            session_id,
            tool_call_id,
            title="Count words in notes.txt",
            kind="execute",
            status="in_progress",
            content=[anchor],
        )
        await self._send(
            session_id, v2.TerminalUpdateSessionUpdate(terminal_id=terminal_id, command=shell_words(argv), cwd=cwd)
        )
        output = bytearray()
        try:
            returncode = await self._run(session_id, terminal_id, argv, cwd, output)
        except OSError as exc:
            await self._send(
                session_id, v2.TerminalUpdateSessionUpdate(terminal_id=terminal_id, exit_status=v2.TerminalExitStatus())
            )
            await self._tool(session_id, tool_call_id, status="failed", content=[anchor, _text(f"cannot run: {exc}")])
            return None
        status = _exit_status(returncode)
        await self._send(session_id, v2.TerminalUpdateSessionUpdate(terminal_id=terminal_id, exit_status=status))
        text = output.decode("utf-8", "replace").strip()
        if returncode != 0 or not text.isdigit():
            detail = status.exit_code if returncode >= 0 else status.signal
            await self._tool(
                session_id, tool_call_id, status="failed", content=[anchor, _text(f"word count failed ({detail})")]
            )
            return None
        await self._tool(session_id, tool_call_id, status="completed", content=[anchor, _text(f"{text} words")])
        return int(text)

    async def _run(self, session_id: str, terminal_id: str, argv: Sequence[str], cwd: str, output: bytearray) -> int:
        """Run ``argv`` in ``cwd`` (no shell), streaming its output as ``terminal_output_chunk``s; its return code."""
        async with trio.open_nursery() as nursery:
            process: trio.Process = await nursery.start(
                partial(
                    trio.run_process,
                    list(argv),
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    check=False,
                )
            )
            assert process.stdout is not None
            async for data in process.stdout:
                output += data
                chunk = base64.b64encode(data).decode("ascii")
                await self._send(session_id, v2.TerminalOutputChunkSessionUpdate(terminal_id=terminal_id, data=chunk))
        assert process.returncode is not None
        return process.returncode


def agents_for(versions: Sequence[int] = (1, 2)) -> dict[ModuleType, Any]:
    """The demo agent's ``{variant: factory}`` mapping for the protocol ``versions`` given."""
    return {
        module: agent for module, agent in ((v1, DemoAgent), (v2, DemoAgentV2)) if module.PROTOCOL_VERSION in versions
    }


def serve(versions: Sequence[int] = (1, 2)) -> None:
    """Serve the demo agent on this process's stdio for the protocol ``versions`` given (default both)."""
    run_agent_stdio(agents_for(versions))


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
    one agent per connection (``python -m acp_trio.demo --serve URL``; needs ``acp-trio[remote]``).
    The keyword options are :class:`~acp_trio.transports.asgi.AcpApp`'s (``idle_timeout`` in seconds)."""
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

    trio.run(main)


if __name__ == "__main__":
    serve()

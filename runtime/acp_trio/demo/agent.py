"""The example agent: one prompt turn that shows the protocol's moving parts.

On ``session/prompt`` it streams ``agent_message_chunk`` updates, publishes a plan, reports a tool
call and asks ``session/request_permission`` for it, reads ``notes.txt`` from the session directory
with ``fs/read_text_file``, counts its words with a command run in a client terminal
(``terminal/create`` ... ``terminal/release``, shown in the tool call), asks the user with
``elicitation/create`` (a form) whether the summary gives the word count when the client offers
forms, writes ``summary.txt`` with
``fs/write_text_file`` (reporting a diff), and ends the turn with stop reason ``end_turn``.
``session/cancel`` ends it with ``cancelled`` (the runtime does that).  Steps the client cannot
serve (no ``fs.readTextFile``, ``fs.writeTextFile`` or ``terminal`` in its capabilities) are
skipped, shown as failed tool calls and said in its messages; the turn still ends ``end_turn``.
Run it alone with ``python -m acp_trio.demo --serve-agent``.

It is built from the generated ``acp_schema.v1`` types, the runtime, the builders
(:mod:`acp_trio.builders`) and the terminal handle (:func:`acp_trio.open_terminal`).
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any

import trio

from acp_schema import v1
from acp_trio import AgentSideConnection, RequestError, converter, open_terminal, run_agent_stdio
from acp_trio import builders as b

AGENT_INFO = v1.Implementation(name="acp-trio-demo-agent", title="acp-trio demo agent", version="1")
WORD_COUNT = "import pathlib; text = pathlib.Path('notes.txt').read_text(encoding='utf-8'); print(len(text.split()))"
"""The command the agent runs in a client terminal: ``python -c WORD_COUNT`` in the session directory."""
PLAN_STEPS = ("Read notes.txt", "Count its words", "Write summary.txt")
"""The steps of the plan the agent publishes (shared with the v2 demo agent)."""
STORE = None
"""The session store the agent keeps its (protocol version 1) sessions in, or ``None`` (:func:`use_store`)."""
WORD_COUNT_QUESTION = "Should summary.txt give the word count?"
WORD_COUNT_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "include_word_count": {"type": "boolean", "title": "Include the word count", "default": True},
    },
    "required": ["include_word_count"],
}
"""The form the agent asks with ``elicitation/create`` when the client offers form elicitation
(shared with the v2 demo agent; ``elicitation.mdx``)."""


def offers_forms(client_capabilities: dict[str, Any]) -> bool:
    """Whether the client advertised form elicitation (``elicitation.form`` present and not null)."""
    elicitation = client_capabilities.get("elicitation")
    return isinstance(elicitation, dict) and isinstance(elicitation.get("form"), dict)


def wants_word_count(answer: Any) -> bool:
    """From the answer to :data:`WORD_COUNT_FORM` (either version): ``False`` only when the user
    accepted with ``include_word_count`` false; a decline or cancel keeps the default (the spec:
    agents fall back safely)."""
    content = getattr(answer, "content", None)
    if getattr(answer, "action", None) != "accept" or not isinstance(content, dict):
        return True
    return content.get("include_word_count") is not False


def use_store(path: str) -> None:
    """Keep the agent's sessions in the SQLite file ``path`` (``--serve-agent --store PATH``): they
    outlive the process (``session/load``, ``session/list``, ...; :mod:`acp_trio.session_store`)."""
    global STORE
    from acp_trio.session_store import SqliteSessionStore

    STORE = SqliteSessionStore(path)


class DemoAgent:
    """The demo agent; construct it with the connection (``run_agent_stdio(DemoAgent)`` does)."""

    def __init__(self, conn: AgentSideConnection) -> None:
        self.conn = conn
        self.client = v1.ClientPeer(conn)
        if STORE is not None:  # --store PATH: session/load, list, resume, close and delete from the store
            from acp_trio.session_store import enable

            enable(conn, STORE)

    async def initialize(self, params: v1.InitializeRequest) -> v1.InitializeResponse:
        return v1.InitializeResponse(
            protocol_version=self.conn.protocol_version,
            agent_capabilities=v1.AgentCapabilities(
                load_session=False,
                prompt_capabilities=v1.PromptCapabilities(image=False, audio=False, embedded_context=True),
            ),
            auth_methods=[],
            agent_info=AGENT_INFO,
        )

    async def session_new(self, params: v1.NewSessionRequest) -> v1.NewSessionResponse:
        if not os.path.isabs(params.cwd):
            raise RequestError.invalid_params({"path": "$.cwd", "detail": "cwd must be an absolute path"})
        return v1.NewSessionResponse(session_id=f"sess_{uuid.uuid4().hex[:12]}")

    async def _send(self, session_id: str, update: v1.SessionUpdate) -> None:
        await self.client.session_update(b.notification(session_id, update))

    async def _say(self, session_id: str, text: str) -> None:
        for word in text.split(" "):
            await self._send(session_id, b.agent_message(word + " "))
            await trio.lowlevel.checkpoint()

    async def _plan(self, session_id: str, done: int) -> None:
        def status(i: int) -> v1.PlanEntryStatus:
            return "completed" if i < done else ("in_progress" if i == done else "pending")

        entries = [b.plan_entry(step, priority="high", status=status(i)) for i, step in enumerate(PLAN_STEPS)]
        await self._send(session_id, b.plan(entries))

    async def session_prompt(self, params: v1.PromptRequest) -> v1.PromptResponse:
        session_id = params.session_id
        session = self.conn.sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(session_id)
        cwd = session.cwd
        await self._say(session_id, "Let me read your notes and write a summary.")
        await self._plan(session_id, 0)

        notes = os.path.join(cwd, "notes.txt")
        read = b.ToolCallReporter(
            self.client, session_id, "Read notes.txt", kind="read", tool_call_id="call_read", locations=[notes]
        )
        if not self._offers("fs", "readTextFile"):
            await read.start(status="failed", content=["this client offers no file reading (fs.readTextFile)"])
            await self._plan(session_id, 1)
            await self._say(session_id, "Your client does not share files with me, so I skipped reading notes.txt.")
            words = await self._count_words(session_id, cwd)
            if words is None:
                await self._say(session_id, "It offers no terminal either, so I skipped the word count too.")
            await self._plan(session_id, 2)
            await self._write_summary(session_id, cwd, "notes.txt could not be read (the client offers no files).\n")
            return v1.PromptResponse(stop_reason="end_turn")
        await read.start(status="pending")
        choice = await read.request_permission(
            [
                b.permission_option("allow", "Allow", "allow_once"),
                b.permission_option("reject", "Reject", "reject_once"),
            ]
        )
        if choice is None or choice.kind != "allow_once":
            await read.fail()
            await self._say(session_id, "Permission denied, so I stopped here.")
            return v1.PromptResponse(stop_reason="end_turn")
        await read.update(status="in_progress")
        try:
            text = (
                await self.client.fs_read_text_file(v1.ReadTextFileRequest(session_id=session_id, path=notes))
            ).content
        except RequestError as exc:
            await read.fail()
            await self._say(session_id, f"I could not read notes.txt: {exc.message}.")
            return v1.PromptResponse(stop_reason="end_turn")
        lines = [line for line in text.splitlines() if line.strip()]
        await read.complete([f"{len(lines)} non-empty lines"])
        await self._plan(session_id, 1)

        words = await self._count_words(session_id, cwd)
        if words is None and not self.conn.client_capabilities.get("terminal"):
            await self._say(session_id, "Your client offers no terminal, so I skipped the word count.")
        await self._plan(session_id, 2)

        first = lines[0] if lines else "(none)"
        summary = f"notes.txt has {len(lines)} non-empty lines; the first is: {first}\n"
        if words is not None and await self._ask_word_count(session_id):
            summary += f"It has {words} words.\n"
        await self._write_summary(session_id, cwd, summary)
        return v1.PromptResponse(stop_reason="end_turn")

    async def _ask_word_count(self, session_id: str) -> bool:
        """Ask the user (``elicitation/create``, a form) whether the summary gives the word count,
        when the client offers forms; yes unless the user says no."""
        if not offers_forms(self.conn.client_capabilities):
            return True
        try:
            answer = await self.client.elicitation_create(
                v1.FormCreateElicitationRequest(
                    message=WORD_COUNT_QUESTION,
                    requested_schema=converter.structure(WORD_COUNT_FORM, v1.ElicitationSchema),
                    session_id=session_id,
                )
            )
        except RequestError:
            return True
        return wants_word_count(answer)

    def _offers(self, *path: str) -> bool:
        """Whether the client's capabilities (wire JSON) hold a true value at ``path``."""
        node: object = self.conn.client_capabilities
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return bool(node)

    async def _write_summary(self, session_id: str, cwd: str, summary: str) -> None:
        """Write ``summary`` to ``summary.txt`` through the client, or say why it cannot."""
        summary_path = os.path.join(cwd, "summary.txt")
        write = b.ToolCallReporter(
            self.client,
            session_id,
            "Write summary.txt",
            kind="edit",
            tool_call_id="call_write",
            locations=[summary_path],
        )
        if not self._offers("fs", "writeTextFile"):
            await write.start(status="failed", content=["this client offers no file writing (fs.writeTextFile)"])
            await self._plan(session_id, 3)
            await self._say(session_id, f"I could not write summary.txt, so here it is: {summary.strip()!r}")
            return
        await write.start(status="in_progress")
        await self.client.fs_write_text_file(
            v1.WriteTextFileRequest(session_id=session_id, path=summary_path, content=summary)
        )
        await write.complete([b.diff(summary_path, summary)])
        await self._plan(session_id, 3)
        await self._say(session_id, f"Done: summary.txt says {summary.splitlines()[0]!r}")

    async def _count_words(self, session_id: str, cwd: str) -> int | None:
        """Run the word count in a client terminal, shown live in a tool call; ``None`` if impossible."""
        count = b.ToolCallReporter(
            self.client, session_id, "Count words in notes.txt", kind="execute", tool_call_id="call_count"
        )
        if not self.conn.client_capabilities.get("terminal"):
            await count.start(status="failed", content=["this client offers no terminals"])
            return None
        await count.start(status="in_progress")
        async with open_terminal(self.conn, session_id, sys.executable, args=["-c", WORD_COUNT], cwd=cwd) as term:
            await count.update(content=[term.content()])  # the client shows the terminal's output live
            exit_status = await term.wait_for_exit(timeout=30)
            output = (await term.output()).output.strip()
        if exit_status.exit_code != 0 or not output.isdigit():
            await count.fail([f"word count failed ({exit_status.exit_code or exit_status.signal}): {output[-200:]}"])
            return None
        await count.complete([term.content(), f"{output} words"])
        return int(output)


def main() -> None:
    """Serve the demo agent on this process's stdio until the client closes it."""
    run_agent_stdio(DemoAgent)


if __name__ == "__main__":
    main()

"""The example client: the batteries of :class:`acp_trio.StandardClient`, plus a printed transcript.

File reads and writes stay inside the session's directories (:mod:`acp_trio.fs`), terminals run
real commands without a shell and are released with their session (:mod:`acp_trio.terminals`),
and ``session/request_permission`` goes through a policy (:mod:`acp_trio.permissions`) that
prints the question and picks the first "allow" option (``--deny`` in the demo's command line:
the first "reject" one).  ``elicitation/create`` (:mod:`acp_trio.elicitation`) is answered on the
terminal by :class:`TerminalForm`: a form is asked field by field on stderr and read from stdin
when both are a terminal, then shown for review (send, edit, decline or cancel); a URL is shown
with its host and opened only with consent.  What the agent wrote (its name, the message, the URL,
titles, values) is shown with control characters escaped (:func:`printable`), so it cannot move the
cursor or rewrite what the user agrees to.  Without a terminal a form is answered with its declared
defaults when they fit, and anything else is declined.  Every ``session/update`` is folded into
``client.states`` and printed as it arrives.
"""

from __future__ import annotations

import json
import logging
import sys
import urllib.parse
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import trio

from acp_schema import v1
from acp_trio import INTERNAL_ERROR, ClientSideConnection, RequestError, SessionState, StandardClient, ask
from acp_trio.elicitation import ElicitationAnswer, PendingElicitation, ask_user
from acp_trio.permissions import ALLOW_KINDS, REJECT_KINDS, choose_option, permission_title

CLIENT_INFO = v1.Implementation(name="acp-trio-demo-client", title="acp-trio demo client", version="1")


def parse_field(field: dict[str, Any], text: str) -> Any:
    """The value typed as ``text`` for a form field of schema ``field`` (wire JSON): a number for
    ``number``/``integer``, ``True``/``False`` for ``boolean`` (yes/no, true/false, 1/0), a list
    for ``array`` (comma-separated), the text for ``string``; an enum value may be given by its
    number in the list shown.  Raises ``ValueError`` when the text is not such a value."""
    kind = field.get("type")
    choices = field_choices(field)
    if kind == "array":
        items = [item.strip() for item in text.split(",") if item.strip()]
        return [choices[int(item) - 1] if item.isdigit() and 0 < int(item) <= len(choices) else item for item in items]
    if choices and text.isdigit() and 0 < int(text) <= len(choices):
        return choices[int(text) - 1]
    if kind == "integer":
        return int(text)
    if kind == "number":
        return float(text)
    if kind == "boolean":
        answer = text.strip().lower()
        if answer in ("y", "yes", "true", "1"):
            return True
        if answer in ("n", "no", "false", "0"):
            return False
        raise ValueError(f"{text!r} is not yes or no")
    return text


def field_choices(field: dict[str, Any]) -> list[str]:
    """The values a field offers to pick from: ``enum``, ``oneOf`` consts, or its items' ones."""
    source = field.get("items") if field.get("type") == "array" else field
    if not isinstance(source, dict):
        return []
    if isinstance(source.get("enum"), list):
        return [str(value) for value in source["enum"]]
    options = source.get("oneOf") or source.get("anyOf") or []
    return [str(option["const"]) for option in options if isinstance(option, dict) and "const" in option]


def printable(text: object) -> str:
    """``str(text)`` with every character that is not printable shown as its Python escape
    (``"\\x1b"``, ``"\\r"``, ``"\\u202e"``): terminal control sequences, carriage returns,
    line breaks and bidirectional overrides in an agent's text are shown, not obeyed."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


class LineReader:
    """Reads lines from ``stream`` (a blocking text file) in a worker thread, one at a time, for
    whoever is asking now.

    A question that is withdrawn (its caller cancelled) leaves its read running: a line that
    arrives while nobody asks was typed for the withdrawn question, so it answers nothing and is
    reported to ``on_ignored(line)``; the next question starts with the next line.  No line
    meant for a question on screen is swallowed by a read left over from an earlier one.
    """

    def __init__(self, stream: TextIO, on_ignored: Callable[[str], object] | None = None) -> None:
        self.stream = stream
        self.on_ignored = on_ignored
        self._reading = False  # a worker thread is in stream.readline()
        self._waiter: tuple[list[str], trio.Event] | None = None

    async def readline(self) -> str:
        """The next line typed while this call waits (``""`` at the end of input)."""
        if self._waiter is not None:
            raise RuntimeError("LineReader.readline: another question is waiting for a line")
        line: list[str] = []
        arrived = trio.Event()
        self._waiter = (line, arrived)
        try:
            if not self._reading:
                self._reading = True
                token = trio.lowlevel.current_trio_token()
                trio.lowlevel.start_thread_soon(self._read, lambda result: self._hand_over(token, result))
            await arrived.wait()
            return line[0]
        finally:
            self._waiter = None

    def _read(self) -> str:
        try:
            return self.stream.readline()
        except (OSError, ValueError):  # closed: the end of input
            return ""

    def _hand_over(self, token: trio.lowlevel.TrioToken, result: Any) -> None:
        try:
            line = result.unwrap()  # an outcome of _read
        except Exception:
            line = ""
        try:
            token.run_sync_soon(self._deliver, line)
        except trio.RunFinishedError:
            pass

    def _deliver(self, line: str) -> None:
        self._reading = False
        if self._waiter is None:
            if line and self.on_ignored is not None:
                self.on_ignored(line)
            return
        received, arrived = self._waiter
        received.append(line)
        arrived.set()


class TerminalForm:
    """An elicitation policy that asks on a terminal (use it as ``elicitation=TerminalForm(...)``).

    ``say``: prints a transcript line (the outcome of each elicitation).  ``agent_name()``: who is
    asking (the spec: clients MUST identify the agent).  ``ask_in`` / ``ask_out``: where questions
    are read and shown (default ``sys.stdin`` / ``sys.stderr``).  ``interactive``: ask at all
    (default: when both are a terminal).  Not interactive: a form is answered with its declared
    defaults when they satisfy the schema, anything else is declined.  Spec: ``elicitation.mdx``
    (User interaction requirements: review before sending, decline and cancel controls; URL
    security: the full URL and its host before consent).

    Everything the agent wrote is shown through :func:`printable`.  One question is on screen at
    a time (elicitations of several sessions wait their turn), and a question withdrawn while the
    terminal waits (the turn was cancelled, the broker's timeout) is marked withdrawn; the line
    typed for it then is ignored, not taken as the answer to the next one (:class:`LineReader`).
    """

    def __init__(
        self,
        say: Callable[[str], None],
        agent_name: Callable[[], str],
        *,
        ask_in: TextIO | None = None,
        ask_out: TextIO | None = None,
        interactive: bool | None = None,
    ) -> None:
        self.say = say
        self.agent_name = agent_name
        self.ask_in = ask_in if ask_in is not None else sys.stdin
        self.ask_out = ask_out if ask_out is not None else sys.stderr
        if interactive is None:
            interactive = _is_tty(self.ask_in) and _is_tty(self.ask_out)
        self.interactive = interactive
        self.lines = LineReader(self.ask_in, self._ignored)
        self._one_at_a_time = trio.Lock()

    async def __call__(self, pending: PendingElicitation) -> ElicitationAnswer | None:
        about = f"  [elicitation] {printable(self.agent_name())} asks: {printable(pending.message)}"
        if not self.interactive:
            defaults = pending.defaults()
            if pending.mode == "form" and not await pending.validate_async(defaults):
                self.say(f"{about} -> answering with the form's defaults {defaults} (no terminal to ask on)")
                return ElicitationAnswer.accept(defaults)
            self.say(f"{about} -> declined (no terminal to ask on)")
            return ElicitationAnswer.decline()
        async with self._one_at_a_time:
            self.say(about)
            try:
                answer = await (self._url(pending) if pending.mode == "url" else self._form(pending))
            except trio.Cancelled:
                self.ask_out.write("\n  (withdrawn: the agent no longer waits for this answer)\n")
                self.ask_out.flush()
                raise
        content = f" {dict(answer.content)}" if answer is not None and answer.content else ""
        self.say(f"  [elicitation] answered {answer.action if answer is not None else 'cancel'}{content}")
        return answer

    def _ignored(self, line: str) -> None:
        self.ask_out.write(f"  (ignored {printable(line.rstrip(chr(10)))!r}: its question was withdrawn)\n")
        self.ask_out.flush()

    async def _ask(self, question: str) -> str | None:
        """Show ``question`` and read one line (``None``: end of input)."""
        self.ask_out.write(question)
        self.ask_out.flush()
        line = await self.lines.readline()
        return line.rstrip("\n") if line else None

    async def _url(self, pending: PendingElicitation) -> ElicitationAnswer | None:
        url = printable(pending.url or "")
        host = printable(urllib.parse.urlsplit(pending.url or "").hostname or "(no host)")
        self.ask_out.write(f"{printable(self.agent_name())} asks you to open:\n  {url}\n  host: {host}\n")
        choice = await self._choose("Open it? [y]es / [d]ecline / [c]ancel: ", "ydc")
        if choice == "y":
            self.ask_out.write(f"Open {url} in your browser; the agent reports when it is done.\n")
            return ElicitationAnswer.accept()
        return ElicitationAnswer.decline() if choice == "d" else ElicitationAnswer.cancel()

    async def _form(self, pending: PendingElicitation) -> ElicitationAnswer | None:
        assert pending.form is not None
        values = pending.defaults()
        while True:
            self.ask_out.write(f"{printable(self.agent_name())} asks: {printable(pending.message)}\n")
            for name, field in pending.form.properties.items():
                value = await self._field(pending, name, field, values.get(name))
                if value is _END:
                    return ElicitationAnswer.cancel()
                if value is None:
                    values.pop(name, None)
                else:
                    values[name] = value
            self.ask_out.write(f"Your answers: {printable(values)}\n")
            errors = await pending.validate_async(values)
            for error in errors:
                self.ask_out.write(f"  {printable(error)}\n")
            choices = "edc" if errors else "sedc"
            choice = await self._choose(
                ("[s]end / " if not errors else "") + "[e]dit / [d]ecline / [c]ancel: ", choices
            )
            if choice == "s":
                return ElicitationAnswer.accept(values)
            if choice == "d":
                return ElicitationAnswer.decline()
            if choice == "c":
                return ElicitationAnswer.cancel()

    async def _choose(self, question: str, choices: str) -> str:
        """Ask until the reply starts with one of ``choices`` (letters); ``"c"`` (cancel) at end of input."""
        while True:
            reply = await self._ask(question)
            if reply is None:
                return "c"
            choice = reply.strip().lower()[:1]
            if choice and choice in choices:
                return choice

    async def _field(self, pending: PendingElicitation, name: str, field: dict[str, Any], current: Any) -> Any:
        """Ask one field until its value fits; ``None``: left empty; ``_END``: end of input."""
        assert pending.form is not None
        label = printable(field.get("title") or name)
        hint = field.get("description")
        choices = field_choices(field)
        shown = f" ({'; '.join(f'{i}: {printable(c)}' for i, c in enumerate(choices, 1))})" if choices else ""
        required = " (required)" if name in pending.form.required else ""
        if hint:
            self.ask_out.write(f"  {printable(hint)}\n")
        while True:
            value_now = "" if current is None else printable(current)
            reply = await self._ask(f"  {label}{shown}{required} [{value_now}]: ")
            if reply is None:
                return _END
            if not reply.strip():
                return current
            try:
                value = parse_field(field, reply.strip())
            except ValueError as exc:
                self.ask_out.write(f"  not a {printable(field.get('type'))}: {printable(exc)}\n")
                continue
            problems = [e for e in await pending.validate_async({name: value}) if e.startswith(f"{name}:")]
            if not problems:
                return value
            for problem in problems:
                self.ask_out.write(f"  {printable(problem)}\n")


_END = object()
"""What :meth:`TerminalForm._field` returns at the end of input."""


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a file
        return False


def agent_name_of(conn: ClientSideConnection) -> str:
    """The agent's title or name from its ``initialize`` answer (v1 ``agentInfo``, v2 ``info``)."""
    answer = conn.initialize_response if isinstance(conn.initialize_response, dict) else {}
    info = answer.get("info") or answer.get("agentInfo") or {}
    name = info.get("title") or info.get("name") if isinstance(info, dict) else None
    return str(name) if name else "the agent"


class AgentStderr(logging.Handler):
    """The last lines a spawned agent wrote to stderr, kept to show with an error it answered
    without details (:func:`error_lines`).

    Give :attr:`logger` to ``spawn_agent(stderr_logger=...)``: every line is kept (the last
    ``keep``, in :attr:`lines`) and passed on to the ``acp_trio.agent.stderr`` logger when that
    logger shows it (the demo's ``-v``), as ``spawn_agent`` does by default.
    """

    def __init__(self, keep: int = 20) -> None:
        super().__init__()
        self.lines: deque[str] = deque(maxlen=keep)
        self.logger = logging.Logger("acp_trio.agent.stderr")  # in no hierarchy: its records come only here
        self.logger.addHandler(self)

    @property
    def shown(self) -> bool:
        """Whether the ``acp_trio.agent.stderr`` logger prints the lines as they come (``-v``)."""
        return logging.getLogger("acp_trio.agent.stderr").isEnabledFor(logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        shown = logging.getLogger("acp_trio.agent.stderr")
        if shown.isEnabledFor(record.levelno):
            shown.handle(record)


def error_text(exc: BaseException) -> str:
    """``exc`` as one line; a :class:`~acp_trio.RequestError`'s ``data`` (the agent's details) is
    shown as text when it is a string or ``{"details": text}`` / ``{"message": text}`` (what the ACP
    SDKs send), else as JSON; what the agent wrote has its control characters escaped."""
    if not isinstance(exc, RequestError):
        return str(exc)
    text = f"{exc.message} (JSON-RPC error {exc.code})"
    data = exc.data
    if isinstance(data, dict) and len(data) == 1 and isinstance(data.get("details", data.get("message")), str):
        data = next(iter(data.values()))
    if data is None:
        return printable(text)
    return printable(f"{text}: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}")


def error_lines(exc: BaseException, stderr: Sequence[str] | None, *, shown: bool = False) -> list[str]:
    """What the demo prints after ``error: {error_text(exc)}`` when the agent answered -32603
    (Internal error): a bug in the agent.  ``stderr``: the agent's last stderr lines
    (:class:`AgentStderr`), ``None`` for a remote agent; ``shown``: they were printed already
    (``-v``).  acp-trio agents send no ``data`` with it (the exception and its traceback stay in
    the agent's log, its stderr), so this shows the end of that traceback and says how to see the
    rest (``-v``).  Empty for other errors.
    """
    if not isinstance(exc, RequestError) or exc.code != INTERNAL_ERROR:
        return []
    failed = "the agent failed (a bug or an unexpected condition on its side)"
    said = "said what failed" if exc.data is not None else "sent no details"
    if stderr is None:
        return [f"{failed} and {said}: its server's log says more"]
    if shown:
        return [f"{failed} and {said}: its stderr above says more"]
    more = "run again with -v to see all of the agent's stderr (its traceback) and the runtime's log"
    if exc.data is not None:
        return [more]
    tail = _traceback_end(list(stderr))
    if not tail:
        return [f"{failed} and sent no details (and wrote nothing to stderr)", more]
    return [f"{failed} and sent no details; the end of its stderr:", *(f"  | {printable(line)}" for line in tail), more]


def _traceback_end(tail: list[str]) -> list[str]:
    """Of an agent's last stderr lines: the line before its last traceback (the runtime's log
    message, naming the method), then the traceback's last frame and the exception (8 lines at
    most); without a traceback, the last 6 lines."""
    frames = [i for i, line in enumerate(tail) if line.startswith('  File "')]
    if not frames:
        return tail[-6:]
    last = frames[-1]
    starts = [i for i in range(last) if tail[i].startswith("Traceback (most recent call last)")]
    head: list[str] = []
    if starts and starts[-1] > 0:
        head.append(tail[starts[-1] - 1])
    if not starts or starts[-1] < last - 1:
        head.append("...")
    return head + tail[last : last + 8]


class TranscriptClient(StandardClient):
    """What the demo clients of both protocol versions share: a transcript printed on ``out``
    (default ``sys.stdout``), permission requests answered with an "allow" option (``allow``, else
    a "reject" one) and printed, elicitation forms asked on the terminal (``ask_in`` / ``ask_out``
    / ``interactive``: see :class:`TerminalForm`).  Other options as for
    :class:`~acp_trio.StandardClient`.  Subclasses print the updates (``on_update``) and say how a
    permission request is shown (:meth:`_permission_label`)."""

    def __init__(
        self,
        conn: ClientSideConnection,
        out: TextIO | None = None,
        *,
        allow: bool = True,
        ask_in: TextIO | None = None,
        ask_out: TextIO | None = None,
        interactive: bool | None = None,
        **options: Any,
    ):
        self.out = out if out is not None else sys.stdout
        self.allow = allow
        self.form = TerminalForm(
            self.say, lambda: agent_name_of(conn), ask_in=ask_in, ask_out=ask_out, interactive=interactive
        )
        options.setdefault("elicitation", ask_user(self.form))
        super().__init__(conn, policy=ask(self._decide), **options)

    def _end_line(self) -> None:
        """Close a transcript line still being printed (streamed message chunks), if any."""

    def say(self, text: str) -> None:
        """Print one transcript line."""
        self._end_line()
        self.out.write(text + "\n")
        self.out.flush()

    def _permission_label(self, request: Any) -> str:
        """How a permission request is named in the transcript."""
        return permission_title(request)

    async def _decide(self, request: Any) -> str | None:
        """The permission broker's policy: print the question, pick the first allow (or reject) option."""
        label = self._permission_label(request)
        option_id = choose_option(request.options, ALLOW_KINDS if self.allow else REJECT_KINDS)
        chosen = next((o for o in request.options if o.option_id == option_id), None)
        if chosen is None:
            self.say(f"  [permission] {label}: no suitable option offered; cancelling")
            return None
        self.say(f"  [permission] {label}: choosing {chosen.name!r} ({chosen.kind})")
        return str(chosen.option_id)


class DemoClient(TranscriptClient):
    """The demo client; construct it with the connection (``spawn_agent(..., client=demo_client_factory())``).

    Options as for :class:`TranscriptClient`.
    """

    def __init__(self, conn: ClientSideConnection, out: TextIO | None = None, **options: Any):
        self._line_open = False
        options.setdefault("on_write", self._wrote)
        super().__init__(conn, out, **options)

    # -- transcript ------------------------------------------------------------------------------
    def _end_line(self) -> None:
        if self._line_open:
            self.out.write("\n")
            self._line_open = False

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

    def _permission_label(self, request: Any) -> str:
        """The tool call's title: the request's, else (a request naming only the ``toolCallId``,
        as v1 allows) the one the session's updates gave it, else its id."""
        tool_call = request.tool_call
        if not (isinstance(tool_call.title, str) and tool_call.title):
            try:
                known = self.states[request.session_id].tool_calls.get(tool_call.tool_call_id)
            except KeyError:
                known = None
            if known is not None and known.title:
                return str(known.title)
        return super()._permission_label(request)

    # -- the batteries, with a line of transcript each -------------------------------------------
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
    out: TextIO | None = None, *, allow: bool = True, **options: Any
) -> Callable[[ClientSideConnection], DemoClient]:
    """A factory for ``spawn_agent(client=...)`` that prints the transcript to ``out`` (``options``:
    as for :class:`DemoClient`)."""

    def make(conn: ClientSideConnection) -> DemoClient:
        return DemoClient(conn, out, allow=allow, **options)

    return make

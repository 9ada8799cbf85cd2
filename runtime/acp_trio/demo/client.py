"""The example client: prints a readable transcript and answers the agent's requests.

It answers ``session/request_permission`` by picking the first "allow" option (or the first
option), ``fs/read_text_file`` / ``fs/write_text_file`` for absolute paths inside the session
directory only, and ``terminal/*`` by running the command (no shell) in the session directory.
It is a demonstration, not a sandbox: the batteries of a later release do this properly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import trio

from acp_schema import v1
from acp_trio import ClientSideConnection, RequestError

CLIENT_INFO = v1.Implementation(name="acp-trio-demo-client", title="acp-trio demo client", version="1")


class _Terminal:
    def __init__(self, limit: int | None) -> None:
        self.output = bytearray()
        self.limit = limit
        self.truncated = False
        self.process: trio.Process | None = None
        self.exited = trio.Event()

    def add(self, data: bytes | bytearray) -> None:
        self.output += data
        if self.limit is not None and len(self.output) > self.limit:
            cut = len(self.output) - self.limit
            while cut < len(self.output) and (self.output[cut] & 0xC0) == 0x80:
                cut += 1  # never split a UTF-8 character
            del self.output[:cut]
            self.truncated = True

    def exit_status(self) -> tuple[int | None, str | None]:
        assert self.process is not None and self.process.returncode is not None
        code = self.process.returncode
        if code < 0:
            return None, signal.Signals(-code).name
        return code, None


class DemoClient:
    """The demo client; construct it with the connection (``spawn_agent(..., client=DemoClient)``).

    ``out``: where the transcript goes (default ``sys.stdout``).  ``roots``: directories the agent
    may read and write (the session directories; :meth:`allow_root` adds one).
    """

    def __init__(self, conn: ClientSideConnection, out: TextIO | None = None) -> None:
        self.conn = conn
        self.out = out if out is not None else sys.stdout
        self.roots: list[Path] = []
        self.terminals: dict[str, _Terminal] = {}
        self._line_open = False
        self.nursery: trio.Nursery | None = None

    # -- transcript ------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        if self._line_open:
            self.out.write("\n")
            self._line_open = False
        self.out.write(text + "\n")
        self.out.flush()

    def allow_root(self, path: str | os.PathLike[str]) -> None:
        self.roots.append(Path(path).resolve())

    async def session_update(self, params: v1.SessionNotification) -> None:
        u = params.update
        if isinstance(u, v1.AgentMessageChunkSessionUpdate | v1.AgentThoughtChunkSessionUpdate):
            block = u.content
            text = block.text if isinstance(block, v1.TextContentBlock) else f"[{type(block).__name__}]"
            if not self._line_open:
                prefix = "agent: " if isinstance(u, v1.AgentMessageChunkSessionUpdate) else "agent (thinking): "
                self.out.write(prefix)
                self._line_open = True
            self.out.write(text)
            self.out.flush()
        elif isinstance(u, v1.ToolCallSessionUpdate):
            self.say(f"  [tool {u.tool_call_id}] {u.title} ({u.kind or 'other'}): {u.status or 'pending'}")
        elif isinstance(u, v1.ToolCallUpdateSessionUpdate):
            detail = ""
            for item in u.content or ():
                if isinstance(item, v1.DiffToolCallContent):
                    detail += f" diff {item.path}: +{len(item.new_text.splitlines())} line(s)"
                elif isinstance(item, v1.ContentToolCallContent) and isinstance(item.content, v1.TextContentBlock):
                    detail += f" {item.content.text}"
            self.say(f"  [tool {u.tool_call_id}] {u.status or 'updated'}{detail}")
        elif isinstance(u, v1.PlanSessionUpdate):
            marks = {"completed": "x", "in_progress": ">", "pending": " "}
            self.say("  [plan] " + "  ".join(f"[{marks.get(e.status, '?')}] {e.content}" for e in u.entries))
        else:
            self.say(f"  [{getattr(u, 'session_update', type(u).__name__)}]")

    async def session_request_permission(self, params: v1.RequestPermissionRequest) -> v1.RequestPermissionResponse:
        options = params.options
        chosen = next((o for o in options if o.kind in ("allow_once", "allow_always")), options[0] if options else None)
        title = params.tool_call.title or params.tool_call.tool_call_id
        if chosen is None:
            self.say(f"  [permission] {title}: no options offered; cancelling")
            return v1.RequestPermissionResponse(outcome=v1.CancelledRequestPermissionOutcome())
        self.say(f"  [permission] {title}: choosing {chosen.name!r} ({chosen.kind})")
        return v1.RequestPermissionResponse(outcome=v1.SelectedRequestPermissionOutcome(option_id=chosen.option_id))

    # -- file system -----------------------------------------------------------------------------
    def _inside(self, path: str) -> Path:
        if not os.path.isabs(path):
            raise RequestError.invalid_params({"path": "$.path", "detail": "the path must be absolute"})
        resolved = Path(path).resolve()
        if not any(resolved == root or resolved.is_relative_to(root) for root in self.roots):
            raise RequestError.invalid_params({"path": "$.path", "detail": f"{path} is outside the session directory"})
        return resolved

    async def fs_read_text_file(self, params: v1.ReadTextFileRequest) -> v1.ReadTextFileResponse:
        path = self._inside(params.path)
        try:
            text = await trio.Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise RequestError.resource_not_found(str(path)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RequestError.internal_error({"detail": f"cannot read {path}: {exc}"}) from None
        lines = text.splitlines(keepends=True)
        start = (params.line or 1) - 1
        end = start + params.limit if params.limit else None
        content = "".join(lines[start:end])
        self.say(f"  [fs] read {path} ({len(lines)} line(s))")
        return v1.ReadTextFileResponse(content=content)

    async def fs_write_text_file(self, params: v1.WriteTextFileRequest) -> v1.WriteTextFileResponse:
        path = self._inside(params.path)
        await trio.Path(path).write_text(params.content, encoding="utf-8")
        self.say(f"  [fs] wrote {path} ({len(params.content.encode())} bytes)")
        return v1.WriteTextFileResponse()

    # -- terminals (minimal) ---------------------------------------------------------------------
    async def terminal_create(self, params: v1.CreateTerminalRequest) -> v1.CreateTerminalResponse:
        if self.nursery is None:
            raise RequestError.internal_error({"detail": "terminals are not available"})
        cwd = str(self._inside(params.cwd)) if params.cwd else (str(self.roots[0]) if self.roots else None)
        env = {**os.environ, **{e.name: e.value for e in params.env or ()}}
        terminal = _Terminal(params.output_byte_limit or None)
        terminal_id = f"term_{len(self.terminals) + 1}"
        self.terminals[terminal_id] = terminal
        self.say(f"  [terminal {terminal_id}] $ {' '.join([params.command, *(params.args or ())])}")
        await self.nursery.start(self._run_terminal, terminal, [params.command, *(params.args or ())], cwd, env)
        return v1.CreateTerminalResponse(terminal_id=terminal_id)

    async def _run_terminal(
        self,
        terminal: _Terminal,
        argv: list[str],
        cwd: str | None,
        env: dict[str, str],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            process = await trio.lowlevel.open_process(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, env=env
            )
        except OSError as exc:
            raise RequestError.internal_error({"detail": f"cannot start {argv[0]}: {exc}"}) from None
        terminal.process = process
        task_status.started()
        assert process.stdout is not None
        try:
            async with process.stdout:
                while data := await process.stdout.receive_some(1 << 16):
                    terminal.add(data)
            await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
            terminal.exited.set()

    def _terminal(self, terminal_id: str) -> _Terminal:
        terminal = self.terminals.get(terminal_id)
        if terminal is None:
            raise RequestError.resource_not_found(terminal_id)
        return terminal

    async def terminal_output(self, params: v1.TerminalOutputRequest) -> v1.TerminalOutputResponse:
        t = self._terminal(params.terminal_id)
        status = None
        if t.exited.is_set():
            code, sig = t.exit_status()
            status = v1.TerminalExitStatus(exit_code=code, signal=sig)
        return v1.TerminalOutputResponse(
            output=t.output.decode("utf-8", "replace"), truncated=t.truncated, exit_status=status
        )

    async def terminal_wait_for_exit(self, params: v1.WaitForTerminalExitRequest) -> v1.WaitForTerminalExitResponse:
        t = self._terminal(params.terminal_id)
        await t.exited.wait()
        code, sig = t.exit_status()
        self.say(f"  [terminal {params.terminal_id}] exited ({code if sig is None else sig})")
        return v1.WaitForTerminalExitResponse(exit_code=code, signal=sig)

    async def terminal_kill(self, params: v1.KillTerminalRequest) -> v1.KillTerminalResponse:
        t = self._terminal(params.terminal_id)
        if t.process is not None and t.process.returncode is None:
            t.process.kill()
        return v1.KillTerminalResponse()

    async def terminal_release(self, params: v1.ReleaseTerminalRequest) -> v1.ReleaseTerminalResponse:
        t = self.terminals.pop(params.terminal_id, None)
        if t is None:
            raise RequestError.resource_not_found(params.terminal_id)
        if t.process is not None and t.process.returncode is None:
            t.process.kill()
        return v1.ReleaseTerminalResponse()


def demo_client_factory(out: TextIO | None = None) -> Callable[[ClientSideConnection], DemoClient]:
    """A factory for ``spawn_agent(client=...)`` that prints the transcript to ``out``."""

    def make(conn: ClientSideConnection) -> DemoClient:
        return DemoClient(conn, out)

    return make


def client_capabilities(terminal: bool = True) -> v1.ClientCapabilities:
    """What the demo client advertises: fs read and write, and terminals."""
    return v1.ClientCapabilities(
        fs=v1.FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=terminal
    )

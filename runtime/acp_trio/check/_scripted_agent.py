"""The stand-in agent of the checker's client mode: a relay between its stdio and the checker.

``python .../_scripted_agent.py --connect SOCKET [--linger]`` is what the client under test spawns in
place of ``{AGENT}``.  It connects to the checker's unix socket and relays: every byte the client
writes to its stdin goes to the checker, every byte the checker sends goes to its stdout, so the
checker plays the agent and sees the wire exactly.  It also reports how it is being shut down:
its stdin closing, and each SIGTERM, SIGINT or SIGHUP it receives.

Without ``--linger`` it exits once its stdin closes (code 0) or on SIGTERM (code 143), as an
agent should.  With ``--linger`` it keeps running after both, until the checker closes the socket
or the client kills it (SIGKILL): a SIGKILL is seen by the checker as the socket closing without a
goodbye.

Frames on the socket, both ways: one kind byte, a 4-byte big-endian length, the payload.
Agent to checker: ``H`` hello (JSON: ``pid``, ``argv``), ``D`` bytes read from stdin, ``E`` stdin
closed, ``S`` a signal (its number, ASCII), ``B`` goodbye (exiting by itself).  Checker to agent:
``D`` bytes to write to stdout.

It imports only trio and the standard library and runs as a file (no ``acp_trio`` import), so it
works whatever ``PYTHONPATH`` the client gives its agent.  Not a public API.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import struct
import sys

import trio

HEADER = struct.Struct(">cI")


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    """One frame: ``kind`` (one byte), the length of ``payload`` (4 bytes, big-endian), ``payload``."""
    return HEADER.pack(kind, len(payload)) + payload


class FrameReader:
    """Cuts a byte stream into ``(kind, payload)`` frames."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def next(self) -> tuple[bytes, bytes] | None:
        """The next frame, or ``None`` once the stream ends (a partial frame is dropped)."""
        while True:
            if len(self.buffer) >= HEADER.size:
                kind, size = HEADER.unpack_from(self.buffer)
                if len(self.buffer) >= HEADER.size + size:
                    payload = bytes(self.buffer[HEADER.size : HEADER.size + size])
                    del self.buffer[: HEADER.size + size]
                    return kind, payload
            try:
                data = await self.stream.receive_some(1 << 16)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                return None
            self.buffer += data


async def relay(socket_path: str, linger: bool) -> int:
    sock = await trio.open_unix_socket(socket_path)
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    send_lock = trio.Lock()
    exit_code: list[int] = []

    async def report(kind: bytes, payload: bytes = b"") -> None:
        async with send_lock:
            try:
                await sock.send_all(frame(kind, payload))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async with trio.open_nursery() as nursery:

        def finish(code: int) -> None:
            exit_code.append(code)
            nursery.cancel_scope.cancel()

        async def from_stdin() -> None:
            while True:
                try:
                    data = await stdin.receive_some(1 << 16)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = b""
                if not data:
                    await report(b"E")
                    if not linger:
                        await report(b"B")
                        finish(0)
                    return
                await report(b"D", data)

        async def to_stdout() -> None:
            reader = FrameReader(sock)
            while True:
                got = await reader.next()
                if got is None:  # the checker is done with us
                    finish(0)
                    return
                kind, payload = got
                if kind == b"D":
                    try:
                        await stdout.send_all(payload)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass

        async def signals() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as received:
                async for signum in received:
                    await report(b"S", str(int(signum)).encode())
                    if not linger and signum == signal.SIGTERM:
                        await report(b"B")
                        finish(128 + int(signum))
                        return

        await report(b"H", json.dumps({"pid": os.getpid(), "argv": sys.argv}).encode())
        nursery.start_soon(signals)
        nursery.start_soon(from_stdin)
        nursery.start_soon(to_stdout)
    with trio.move_on_after(1):
        await sock.aclose()
    return exit_code[0] if exit_code else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the acp-trio checker's stand-in agent (not for direct use)")
    parser.add_argument("--connect", required=True, help="the checker's unix socket")
    parser.add_argument("--linger", action="store_true", help="keep running after stdin closes and after SIGTERM")
    options = parser.parse_args(argv)
    code: int = trio.run(relay, options.connect, options.linger)
    return code


if __name__ == "__main__":
    sys.exit(main())

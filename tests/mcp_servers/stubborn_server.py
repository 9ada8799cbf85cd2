"""A "server" that never answers ``initialize`` and resists shutdown, for ``tests/test_mcp.py``.

Usage: ``python stubborn_server.py EVENTS_FILE``.  Writes ``pid <n>`` to EVENTS_FILE, then ``eof`` when
its stdin closes and ``sigterm`` when it receives SIGTERM (which it ignores); only SIGKILL ends it.
So the file shows which steps of the MCP stdio shutdown (close stdin, SIGTERM, SIGKILL) it went through.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time


def main(path: str) -> None:
    def note(line: str) -> None:
        with open(path, "a") as f:
            f.write(line + "\n")

    signal.signal(signal.SIGTERM, lambda signum, frame: note("sigterm"))
    note(f"pid {os.getpid()}")

    def read_stdin() -> None:
        while os.read(0, 65536):
            pass  # never answer
        note("eof")

    threading.Thread(target=read_stdin, daemon=True).start()
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    main(sys.argv[1])

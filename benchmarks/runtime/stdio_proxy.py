"""The floor of any stdio proxy: bytes forwarded unchanged between two pipes, nothing decoded.

Usage: ``python stdio_proxy.py [AGENT_CMD ...]`` (default: ``python trio_agent.py``, the v1 bench
agent next to this file).  It spawns the agent and copies its stdin to the agent's stdin and the
agent's stdout to its stdout, one blocking thread per direction (``os.read`` of up to 64 KiB, then
``os.write`` of all of it), until either side closes.  ``../bench_adapt.py`` puts it where the
adapter sits (``python -m acp_trio.adapt``): the same extra process and two extra pipes, none of
the adapter's work, so the ratio it gets against the direct pair is what an adapter can at best get.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

CHUNK = 65536  # bytes per read


def pump(source: int, target: int, done: threading.Event) -> None:
    try:
        while data := os.read(source, CHUNK):
            view = memoryview(data)
            while view:
                view = view[os.write(target, view) :]
    except OSError:
        pass
    finally:
        done.set()


def main() -> int:
    argv = sys.argv[1:] or [sys.executable, str(Path(__file__).resolve().parent / "trio_agent.py")]
    agent = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert agent.stdin is not None and agent.stdout is not None
    done = threading.Event()
    to_agent = threading.Thread(target=pump, args=(sys.stdin.fileno(), agent.stdin.fileno(), done), daemon=True)
    from_agent = threading.Thread(target=pump, args=(agent.stdout.fileno(), sys.stdout.fileno(), done), daemon=True)
    to_agent.start()
    from_agent.start()
    done.wait()
    agent.stdin.close()  # the client left (or the agent did): the agent sees EOF and exits
    try:
        return agent.wait(timeout=5)
    except subprocess.TimeoutExpired:
        agent.kill()
        return agent.wait()


if __name__ == "__main__":
    sys.exit(main())

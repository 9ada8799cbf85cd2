"""An agent that ignores SIGTERM and keeps running after stdin closes.  ``argv[1]``: optional pid file."""

import signal
import sys
import threading

from _common import EchoAgent, write_pid_file

import acp_trio

signal.signal(signal.SIGTERM, signal.SIG_IGN)
if len(sys.argv) > 1:
    write_pid_file(sys.argv[1])
acp_trio.run_agent_stdio(EchoAgent)
threading.Event().wait()  # never returns: only SIGKILL ends this process

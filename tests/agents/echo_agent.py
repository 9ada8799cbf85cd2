"""A well-behaved agent: serves until stdin closes, then exits 0.  ``argv[1]``: optional pid file."""

import sys

from _common import EchoAgent, write_pid_file

import acp_trio

if len(sys.argv) > 1:
    write_pid_file(sys.argv[1])
acp_trio.run_agent_stdio(EchoAgent)

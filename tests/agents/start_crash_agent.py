"""An agent that dies before it can answer anything, as a first agent often does.

``argv[1]``: ``raise`` (default): it logs a line on stderr, then raises at import (Python prints the
traceback and exits with code 1); ``usage``: it prints a usage line on stdout and exits 0, as a
program that is not an ACP agent would.
"""

import sys

if sys.argv[1:] == ["usage"]:
    print("usage: notes-agent --model NAME")
    sys.exit(0)
print("notes agent starting", file=sys.stderr)
raise RuntimeError("NOTES_API_KEY is not set: export it before starting the agent")

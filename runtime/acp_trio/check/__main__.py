"""``python -m acp_trio.check -- AGENT_CMD...``: see :mod:`acp_trio.check`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acp_trio.check",
        description="Check an ACP agent against the protocol: one line per check, exit 1 on any FAIL.",
    )
    parser.add_argument("--protocol", type=int, choices=(1, 2), default=1, help="the protocol version (default 1)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these checks")
    parser.add_argument("--skip", action="append", default=[], metavar="NAME", help="skip these checks")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--turn-timeout", type=float, default=60.0, metavar="SECONDS", help="per prompt turn")
    parser.add_argument("--prompt", default="Say hello in one short sentence.", help="the prompt text sent")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- AGENT_CMD [ARG ...]")
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if not command:
        parser.error("give the agent command after --")

    def progress(name: str) -> None:
        if sys.stderr.isatty():
            print(f"\r\x1b[K... {name}", end="", file=sys.stderr, flush=True)

    try:
        report = run(
            command,
            protocol=options.protocol,
            only=options.only,
            skip=options.skip,
            turn_timeout=options.turn_timeout,
            prompt=options.prompt,
            progress=progress,
        )
    except OSError as exc:
        print(f"acp-trio check: {exc}", file=sys.stderr)
        return 2
    if sys.stderr.isatty():
        print("\r\x1b[K", end="", file=sys.stderr)
    print(report.text())
    if options.json:
        with open(options.json, "w", encoding="utf-8") as f:
            json.dump(report.as_json(), f, indent=2)
            f.write("\n")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m acp_trio.check -- AGENT_CMD...`` (see :mod:`acp_trio.check`), and
``python -m acp_trio.check --client -- CLIENT_CMD... {AGENT}`` (see :mod:`acp_trio.check._client_mode`)."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from collections.abc import Sequence

import trio

from ..bridge import header_options
from . import START_TIMEOUT, run, run_checks_remote, run_client_checks


def _seconds(text: str) -> float:
    """A positive number of seconds (argparse's ``type``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m acp_trio.check",
        description="Check an ACP agent (or, with --client, an ACP client) against the protocol: "
        "one line per check, exit 1 on any FAIL (an agent that does not speak the --protocol version "
        "is one: initialize.version says which version to check instead), 2 when the checks cannot run "
        "(a usage error, an agent command that cannot start, an agent that exits before answering initialize, "
        "a --url server that refuses the connection or is not there: one line on stderr says which; "
        "for an agent that exited, its exit status and last stderr lines follow).",
    )
    parser.add_argument(
        "--client",
        action="store_true",
        help="check the client CLIENT_CMD (one argument of it {AGENT}: replaced by a scripted agent)",
    )
    parser.add_argument(
        "--answer-timeout", type=float, default=10.0, metavar="SECONDS", help="--client: per request to the client"
    )
    parser.add_argument(
        "--cancel-wait",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="--client: how long a turn is held open for the client to cancel (0: never)",
    )
    parser.add_argument(
        "--start-timeout",
        type=_seconds,
        default=START_TIMEOUT,
        metavar="SECONDS",
        help="how long a program may take to start: each agent process (or --url connection) until it answers "
        "initialize, or with --client the client until it starts the agent (default 30)",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="--client: per shutdown step (stdin closed, SIGTERM, SIGKILL)",
    )
    parser.add_argument("--protocol", type=int, choices=(1, 2), default=1, help="the protocol version (default 1)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these checks")
    parser.add_argument("--skip", action="append", default=[], metavar="NAME", help="skip these checks")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    parser.add_argument(
        "--junit",
        metavar="FILE",
        help="also write the report as JUnit XML (one testcase per check; WARN passes, SKIP is skipped)",
    )
    parser.add_argument("--turn-timeout", type=float, default=60.0, metavar="SECONDS", help="per prompt turn")
    parser.add_argument("--prompt", help="the plain prompt's text (default: 'Say hello in one short sentence.')")
    parser.add_argument(
        "--script", metavar="FILE", help="a TOML or JSON file of prompts and the behaviours they must show"
    )
    parser.add_argument("--url", help="check an agent served at ws://... or http://... instead of spawning one")
    parser.add_argument("--header", action="append", default=[], help="--url: an extra header, 'Name: value'")
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- AGENT_CMD [ARG ...] (--client: -- CLIENT_CMD ...)"
    )
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if options.client and (options.url or not command):
        parser.error("--client takes the client command after --, with {AGENT} where the agent command goes")
    if not command and not options.url:
        parser.error("give the agent command after --, or --url")
    if command and options.url:
        parser.error("give an agent command or --url, not both")
    headers = header_options(parser, options.header)
    # the report says what the transports would log (a refused connection is the one error line below)
    logging.getLogger("acp_trio").addHandler(logging.NullHandler())

    def progress(name: str) -> None:
        if sys.stderr.isatty():
            print(f"\r\x1b[K... {name}", end="", file=sys.stderr, flush=True)

    settings = {
        "protocol": options.protocol,
        "only": options.only,
        "skip": options.skip,
        "turn_timeout": options.turn_timeout,
        "start_timeout": options.start_timeout,
        "prompt": options.prompt,
        "script": options.script,
        "progress": progress,
    }
    try:
        if options.client:
            report = trio.run(
                functools.partial(
                    run_client_checks,
                    command,
                    protocol=options.protocol,
                    only=options.only,
                    skip=options.skip,
                    answer_timeout=options.answer_timeout,
                    cancel_wait=options.cancel_wait,
                    shutdown_timeout=options.shutdown_timeout,
                    start_timeout=options.start_timeout,
                    progress=progress,
                )
            )
        elif options.url:
            report = trio.run(functools.partial(run_checks_remote, options.url, headers=headers, **settings))
        else:
            report = run(command, **settings)
    except (OSError, ValueError) as exc:
        print(f"acp-trio check: {exc}", file=sys.stderr)
        return 2
    if sys.stderr.isatty():
        print("\r\x1b[K", end="", file=sys.stderr)
    print(report.text())
    if options.json:
        with open(options.json, "w", encoding="utf-8") as f:
            json.dump(report.as_json(), f, indent=2)
            f.write("\n")
    if options.junit:
        report.junit().write(options.junit, encoding="utf-8", xml_declaration=True)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())

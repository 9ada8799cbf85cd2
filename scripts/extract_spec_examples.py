#!/usr/bin/env python3
"""Extract every JSON-RPC 2.0 message example from the ACP spec pages.

Reads the protocol documentation pages of the
``agentclientprotocol/agent-client-protocol`` repository straight from a git
directory (no work tree needed) and writes one golden-corpus file per variant:

    <out>/v1.json           docs/protocol/v1/*.mdx
    <out>/v1_unstable.json  docs/protocol/v1/draft/*.mdx
    <out>/v2.json           docs/protocol/v2/*.mdx
    <out>/v2_unstable.json  docs/protocol/v2/draft/*.mdx

Each file looks like::

    {
      "source": {"repository": "...", "commit": "<sha>"},
      "messages": [{"page", "line", "index", "fence_info", "kind", "method",
                    "method_inferred", ["method_note"], "message"}, ...],
      "skipped": [{"page", "line", "fence_info", "reason"}, ...]
    }

``line`` is the 1-based line of the opening fence in the page and ``index`` is
the 0-based position of the message among all messages of its page.

Fenced blocks labelled ``json``, ``jsonc`` or ``json5`` are candidates, as are
unlabelled blocks that turn out to hold a JSON-RPC message.  ``//`` and
``/* */`` comments and trailing commas are removed before parsing (string
literals are left alone); anything else that does not parse, such as a
``[...]`` placeholder, is reported under ``skipped``.  Parsed messages are
stored unmodified.

The method of a response or error is taken from the most recent request with
the same id earlier on the same page.  When there is none, it is inferred
(``method_inferred: true`` plus ``method_note``) from, in order: the explicit
``METHOD_OVERRIDES`` table, the shape of the result, and the method names the
prose right before the block mentions.

Usage::

    python scripts/extract_spec_examples.py --repo <git dir> --rev HEAD \
        --out tests/golden
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NoReturn

REPOSITORY: Final = "agentclientprotocol/agent-client-protocol"

# (variant name, directory whose direct *.mdx children make up the variant)
VARIANTS: Final[tuple[tuple[str, str], ...]] = (
    ("v1", "docs/protocol/v1"),
    ("v1_unstable", "docs/protocol/v1/draft"),
    ("v2", "docs/protocol/v2"),
    ("v2_unstable", "docs/protocol/v2/draft"),
)

JSON_LANGUAGES: Final = frozenset({"json", "jsonc", "json5"})

# Hand-made method attributions, keyed by (page, index).  Only for responses
# or errors whose method neither an earlier request with the same id nor the
# automatic inference below can determine.  Each entry must say why.
METHOD_OVERRIDES: Final[dict[tuple[str, int], tuple[str, str]]] = {
    # ("docs/protocol/vX/page.mdx", 3): ("session/new", "why ..."),
}

# Result-shape rules used when no earlier request on the page has the id.
# First match wins: (required result keys, method).
RESULT_SHAPE_RULES: Final[tuple[tuple[frozenset[str], str], ...]] = (
    (frozenset({"protocolVersion"}), "initialize"),
    (frozenset({"stopReason"}), "session/prompt"),
    (frozenset({"sessionId"}), "session/new"),
    (frozenset({"sessions"}), "session/list"),
    (frozenset({"terminalId"}), "terminal/create"),
    (frozenset({"output", "truncated"}), "terminal/output"),
    (frozenset({"exitCode"}), "terminal/wait_for_exit"),
    (frozenset({"outcome"}), "session/request_permission"),
    (frozenset({"configOptions"}), "session/set_config_option"),
)

FENCE_OPEN_RE: Final = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
BACKTICK_NAME_RE: Final = re.compile(r"`([A-Za-z_][\w./-]*)`")


class ExtractError(Exception):
    """Raised for unrecoverable problems (bad rev, git failure)."""


@dataclass(frozen=True)
class Fence:
    """A fenced code block of a page."""

    line: int  # 1-based line of the opening fence
    end_line: int  # 1-based line of the closing fence (or last line)
    info: str
    body: str

    @property
    def language(self) -> str:
        """Lower-cased first word of the info string ("" if unlabelled)."""
        parts = self.info.split()
        return parts[0].lower() if parts else ""


@dataclass
class Record:
    """One extracted message."""

    page: str
    line: int
    index: int
    fence_info: str
    kind: str
    message: dict[str, Any]
    method: str | None = None
    method_inferred: bool = False
    method_note: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Serialise with a fixed key order; ``method_note`` only if set."""
        out: dict[str, Any] = {
            "page": self.page,
            "line": self.line,
            "index": self.index,
            "fence_info": self.fence_info,
            "kind": self.kind,
            "method": self.method,
            "method_inferred": self.method_inferred,
        }
        if self.method_note is not None:
            out["method_note"] = self.method_note
        out["message"] = self.message
        return out


@dataclass
class PageResult:
    """Messages and skipped blocks found on one page (or a whole variant)."""

    messages: list[Record] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------
# git access


def git(repo: str, *args: str) -> str:
    """Run a git command against ``repo`` and return its stdout."""
    proc = subprocess.run(
        ["git", "-C", repo, *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )
    if proc.returncode != 0:
        msg = f"git {' '.join(args)} failed: {proc.stderr.strip()}"
        raise ExtractError(msg)
    return proc.stdout


def resolve_commit(repo: str, rev: str) -> str:
    """Return the full commit sha that ``rev`` names."""
    return git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}").strip()


def list_pages(repo: str, commit: str, directory: str) -> list[str]:
    """Return the ``*.mdx`` files directly inside ``directory``, sorted."""
    names = git(repo, "ls-tree", "--name-only", commit, f"{directory}/").splitlines()
    return sorted(n for n in names if n.endswith(".mdx"))


# --------------------------------------------------------------------------
# Markdown fences


def iter_fences(text: str) -> list[Fence]:
    """Return the fenced code blocks of a markdown/MDX page, in order."""
    lines = text.splitlines()
    fences: list[Fence] = []
    i = 0
    while i < len(lines):
        m = FENCE_OPEN_RE.match(lines[i])
        if m is None or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        indent = len(m["indent"])
        marker = m["fence"]
        close_re = re.compile(
            rf"^[ \t]*{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$",
        )
        body: list[str] = []
        j = i + 1
        while j < len(lines) and close_re.match(lines[j]) is None:
            body.append(_dedent(lines[j], indent))
            j += 1
        fences.append(
            Fence(
                line=i + 1,
                end_line=min(j, len(lines) - 1) + 1,
                info=m["info"].strip(),
                body="\n".join(body),
            ),
        )
        i = j + 1
    return fences


def _dedent(line: str, width: int) -> str:
    """Remove up to ``width`` leading blanks (the fence's own indentation)."""
    k = 0
    while k < width and k < len(line) and line[k] in " \t":
        k += 1
    return line[k:]


# --------------------------------------------------------------------------
# JSON with comments / trailing commas


def strip_comments(text: str) -> str:
    """Drop ``//`` and ``/* */`` comments outside string literals.

    Newlines are kept so that parse-error line numbers still match the page.
    """
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
        elif c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end == -1 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end == -1:  # unterminated: leave it for the parser to reject
                out.append(text[i:])
                break
            out.append("\n" * text.count("\n", i, end))
            i = end + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_trailing_commas(text: str) -> str:
    """Drop commas directly followed (modulo whitespace) by ``}`` or ``]``."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif c == ",":
            k = i + 1
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k >= n or text[k] not in "}]":
                out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            msg = f"duplicate key {key!r}"
            raise ValueError(msg)
        obj[key] = value
    return obj


def _reject_constant(name: str) -> NoReturn:
    msg = f"non-standard JSON constant {name}"
    raise ValueError(msg)


DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_reject_duplicates,
    parse_constant=_reject_constant,
)


def decode_documents(text: str) -> list[Any]:
    """Decode one or more whitespace-separated JSON values."""
    docs: list[Any] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            break
        value, i = DECODER.raw_decode(text, i)
        docs.append(value)
    if not docs:
        msg = "empty code block"
        raise json.JSONDecodeError(msg, text, 0)
    return docs


def describe_parse_error(exc: Exception, text: str, fence: Fence) -> str:
    """Explain why ``text`` (the cleaned body of ``fence``) did not parse."""
    if isinstance(exc, json.JSONDecodeError):
        page_line = fence.line + exc.lineno
        where = f"page line {page_line}, column {exc.colno}"
        if text.startswith("...", exc.pos) or text.startswith("…", exc.pos):
            return f"'...' placeholder is not JSON ({where}: {exc.msg})"
        return f"invalid JSON ({where}: {exc.msg})"
    return f"invalid JSON ({exc})"


# --------------------------------------------------------------------------
# Message classification and method attribution


def classify(message: dict[str, Any]) -> str | None:
    """Return the JSON-RPC kind of ``message``, or None if malformed."""
    has_result, has_error = "result" in message, "error" in message
    if "method" in message:
        if has_result or has_error or not isinstance(message["method"], str):
            return None
        return "request" if "id" in message else "notification"
    if "id" not in message or has_result == has_error:
        return None
    return "response" if has_result else "error"


def same_id(a: object, b: object) -> bool:
    """JSON-RPC ids match only if both type and value match (1 != "1")."""
    return type(a) is type(b) and a == b


def guess_from_shape(message: dict[str, Any]) -> tuple[str, str] | None:
    """Guess a response's method from its result keys: (method, reason)."""
    result = message.get("result")
    if not isinstance(result, dict):
        return None
    for keys, method in RESULT_SHAPE_RULES:
        if keys <= result.keys():
            shown = ", ".join(f"`{k}`" for k in sorted(keys))
            return method, f"result carries {shown}"
    return None


def guess_from_prose(page_lines: list[str], start: int, end: int, known: set[str]) -> tuple[str, str] | None:
    """Look for exactly one known method name in the prose lines [start, end)."""
    prose = "\n".join(page_lines[start:end])
    found = {name for name in BACKTICK_NAME_RE.findall(prose) if name in known}
    if len(found) == 1:
        (method,) = found
        return method, f"the preceding prose names `{method}`"
    return None


def attribute_methods(
    records: list[Record],
    fences_by_line: dict[int, Fence],
    page_lines: list[str],
    known: set[str],
) -> None:
    """Fill in ``method`` for responses and errors of one page."""
    for pos, rec in enumerate(records):
        if rec.kind in ("request", "notification"):
            continue
        msg_id = rec.message["id"]
        shape = guess_from_shape(rec.message)

        override = METHOD_OVERRIDES.get((rec.page, rec.index))
        if override is not None:
            rec.method, why = override
            rec.method_inferred = True
            rec.method_note = f"manual override: {why}"
            continue

        earlier = [r for r in records[:pos] if r.kind == "request" and same_id(r.message["id"], msg_id)]
        if earlier:
            rec.method = earlier[-1].method
            if shape is not None and shape[0] != rec.method:
                print(
                    f"warning: {rec.page}:{rec.line}: id {msg_id!r} matches "
                    f"{rec.method} but {shape[1]} (suggests {shape[0]})",
                    file=sys.stderr,
                )
            continue

        rec.method_inferred = True
        prefix = f"no earlier request with id {json.dumps(msg_id)} on this page"
        later = [r for r in records[pos + 1 :] if r.kind == "request" and same_id(r.message["id"], msg_id)]
        fence = fences_by_line[rec.line]
        previous_end = max(
            (f.end_line for f in fences_by_line.values() if f.end_line < fence.line),
            default=0,
        )
        guess = shape or guess_from_prose(page_lines, previous_end, fence.line - 1, known)
        if guess is None:
            rec.method = None
            rec.method_note = f"{prefix}; could not infer the method"
            print(f"warning: {rec.page}:{rec.line}: method unknown", file=sys.stderr)
            continue
        rec.method, why = guess
        note = f"{prefix}; {why}"
        if later and later[0].method == rec.method:
            note += f" (a later {rec.method} request on the page uses this id)"
        rec.method_note = note


# --------------------------------------------------------------------------
# Pages


def extract_page(page: str, text: str) -> tuple[PageResult, list[Fence], list[str]]:
    """Extract messages from one page (methods of responses not yet set)."""
    result = PageResult()
    fences = iter_fences(text)
    for fence in fences:
        labelled = fence.language in JSON_LANGUAGES
        if not labelled and fence.language != "":
            continue
        cleaned = strip_trailing_commas(strip_comments(fence.body))
        try:
            docs = decode_documents(cleaned)
        except (json.JSONDecodeError, ValueError) as exc:
            # Unlabelled blocks are only candidates if they look like JSON-RPC.
            if labelled or '"jsonrpc"' in fence.body:
                result.skipped.append(
                    {
                        "page": page,
                        "line": fence.line,
                        "fence_info": fence.info,
                        "reason": describe_parse_error(exc, cleaned, fence),
                    },
                )
            continue
        for doc in docs:
            reason = _not_a_message_reason(doc)
            if reason == "":  # plain JSON, not a JSON-RPC example
                continue
            if reason is not None:
                result.skipped.append(
                    {
                        "page": page,
                        "line": fence.line,
                        "fence_info": fence.info,
                        "reason": reason,
                    }
                )
                continue
            kind = classify(doc)
            if kind is None:  # pragma: no cover - ruled out just above
                continue
            result.messages.append(
                Record(
                    page=page,
                    line=fence.line,
                    index=len(result.messages),
                    fence_info=fence.info,
                    kind=kind,
                    message=doc,
                    method=doc["method"] if kind in ("request", "notification") else None,
                ),
            )
    return result, fences, text.splitlines()


def _not_a_message_reason(doc: object) -> str | None:
    """Say whether a decoded JSON value is a recordable JSON-RPC message.

    Returns None for a JSON-RPC 2.0 message, "" for unrelated JSON (e.g. a
    bare content block), and otherwise the reason a JSON-RPC-looking value
    cannot be recorded.
    """
    if isinstance(doc, list):
        if any(isinstance(d, dict) and "jsonrpc" in d for d in doc):
            return "JSON-RPC batch (array of messages) is not recorded"
        return ""
    if not isinstance(doc, dict) or "jsonrpc" not in doc:
        return ""
    if doc["jsonrpc"] != "2.0":
        return f'jsonrpc is {json.dumps(doc["jsonrpc"])}, not "2.0"'
    if classify(doc) is None:
        return 'has "jsonrpc": "2.0" but is not a well-formed request, notification, response or error'
    return None


def extract_variant(repo: str, commit: str, directory: str) -> PageResult:
    """Extract and attribute all messages of the pages in ``directory``."""
    pages = list_pages(repo, commit, directory)
    extracted = [(page, *extract_page(page, git(repo, "show", f"{commit}:{page}"))) for page in pages]
    known = {rec.method for _, res, _, _ in extracted for rec in res.messages if rec.method is not None}
    known |= {method for _, method in RESULT_SHAPE_RULES}
    out = PageResult()
    for _page, res, fences, lines in extracted:
        attribute_methods(res.messages, {f.line: f for f in fences}, lines, known)
        out.messages.extend(res.messages)
        out.skipped.extend(res.skipped)
    out.messages.sort(key=lambda r: (r.page, r.line, r.index))
    out.skipped.sort(key=lambda s: (s["page"], s["line"]))
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repo", required=True, help="git directory of agent-client-protocol")
    parser.add_argument("--rev", required=True, help="revision to read (e.g. HEAD)")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    args = parser.parse_args(argv)

    try:
        commit = resolve_commit(args.repo, args.rev)
        args.out.mkdir(parents=True, exist_ok=True)
        for variant, directory in VARIANTS:
            res = extract_variant(args.repo, commit, directory)
            doc = {
                "source": {"repository": REPOSITORY, "commit": commit},
                "messages": [r.to_json() for r in res.messages],
                "skipped": res.skipped,
            }
            path = args.out / f"{variant}.json"
            path.write_text(
                json.dumps(doc, indent=2, ensure_ascii=False) + "\n",
                encoding="utf-8",
                newline="\n",
            )
            print(
                f"{path}: {len(res.messages)} messages, {len(res.skipped)} skipped",
                file=sys.stderr,
            )
    except ExtractError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

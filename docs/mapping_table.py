"""mkdocs hook: the v1 ⇄ v2 mapping table, generated from `acp_trio._mapping.ROWS` (issue 33).

A page holding the line `<!-- mapping-table -->` (:data:`MARKER`) gets, in its place, a Markdown
table with one line per row of `ROWS`, in `ROWS`' order: the key, the operation, its v1 and v2 wire
forms, what happens where a version lacks it, the section of the spec's
`docs/protocol/v2/migration.mdx`, and the tests of `tests/test_mapping.py` that cover the row.  The
table is the data the mapping code uses, so the page cannot drift from the code;
tests/test_docs_mapping.py checks the table, and that every test it names exists.  A build in which
no page holds the marker logs a warning (an error under `mkdocs build --strict`).

This hook is a file of its own, beside docs/hooks.py, because it needs no griffe: its test runs in
the `tests` session, which does not install the docs group.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from acp_trio._mapping import ROWS, Row

log = logging.getLogger("mkdocs.hooks.mapping_table")

MARKER = "<!-- mapping-table -->"
"""The line a page holds where the table goes."""

HEADER = ("#", "Operation", "v1 wire", "v2 wire", "Where a version lacks it", "migration.mdx", "Tests")
"""The table's column titles, one per field of :class:`~acp_trio._mapping.Row` (``tests`` last)."""

# Characters Markdown could read as syntax inside a table cell: emphasis, code, links, the cell
# separator, and braces (attr_list reads a trailing `{...}` in a cell as attributes).
_SPECIAL = re.compile(r"([\\`*_{}\[\]|])")
_replaced = 0


def escape(text: str) -> str:
    """``text`` as Markdown for a table cell that renders as exactly ``text``: Markdown's special
    characters backslash-escaped, ``&`` and ``<`` as entities (raw HTML is not escapable)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    return _SPECIAL.sub(r"\\\1", text)


def cells(row: Row) -> tuple[str, ...]:
    """The row's text cells, not yet escaped, in :data:`HEADER`'s order (all but ``Tests``); the
    section without a leading ``migration.mdx``, which the column's title says."""
    section = row.section.removeprefix("migration.mdx ")
    return (row.key, row.operation, row.v1, row.v2, row.lacking, section)


def _line(values: Iterable[str]) -> str:
    return "| " + " | ".join(values) + " |"


def mapping_table(rows: Iterable[Row] = ROWS) -> str:
    """The Markdown table of ``rows``: a header line, a separator line, then one line per row.
    Test names are code spans, one a line; every other cell is :func:`escape`'d text."""
    lines = [_line(HEADER), _line("---" for _ in HEADER)]
    for row in rows:
        tests = "<br>".join(f"`{name}`" for name in row.tests)
        lines.append(_line([*map(escape, cells(row)), tests]))
    return "\n".join(lines)


def render(markdown: str, rows: Iterable[Row] = ROWS) -> str:
    """``markdown`` with every line that is :data:`MARKER` (surrounding blanks aside) replaced by
    :func:`mapping_table` of ``rows``; unchanged when it has no such line."""
    if MARKER not in markdown:
        return markdown
    table = mapping_table(rows)
    return "\n".join(table if line.strip() == MARKER else line for line in markdown.split("\n"))


# mkdocs events ---------------------------------------------------------------------------------


def on_config(config: Any) -> None:
    global _replaced
    _replaced = 0


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    global _replaced
    rendered = render(markdown)
    if rendered != markdown:
        _replaced += 1
    return rendered


def on_post_build(config: Any) -> None:
    if _replaced == 0:
        log.warning(f"no page holds {MARKER}: the v1 ⇄ v2 mapping table is missing from the site")

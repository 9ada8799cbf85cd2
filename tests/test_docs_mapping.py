"""The docs' v1 ⇄ v2 mapping table (issue 33): docs/mapping_table.py, the mkdocs hook that writes it
from ``acp_trio._mapping.ROWS`` into docs/site/guides/v1-v2-mapping.md.

The hook's functions are called directly (no mkdocs build): the page's table has one line per row of
``ROWS``, whose cells read back as the row's fields; every test a row names is a test function of
tests/test_mapping.py (found with ``ast``, not by importing it); every key appears once.
"""

from __future__ import annotations

import ast
import html
import importlib.util
import logging
import re
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from acp_trio._mapping import ROWS, Row

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "site" / "guides" / "v1-v2-mapping.md"
MAPPING_TESTS = ROOT / "tests" / "test_mapping.py"


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("acp_docs_mapping_table", ROOT / "docs" / "mapping_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def expected_cells(row: Row) -> list[str]:
    """What a reader sees in the row's line: its fields, the section without ``migration.mdx``
    (the column's title), the tests as code spans, one a line."""
    section = row.section.removeprefix("migration.mdx ")
    tests = "<br>".join(f"`{name}`" for name in row.tests)
    return [row.key, row.operation, row.v1, row.v2, row.lacking, section, tests]


def read_cells(line: str) -> list[str]:
    """A Markdown table line's cells as text: split at the pipes that are not escaped, then
    backslash escapes and entities undone (the tests column's code spans and ``<br>`` kept as they are)."""
    assert line.startswith("| ") and line.endswith(" |"), line
    parts = re.split(r"(?<!\\)\|", line)[1:-1]
    return [html.unescape(re.sub(r"\\(.)", r"\1", part.strip())) for part in parts]


def text_of(cell_html: str) -> str:
    """A rendered cell's text: line breaks as newlines, tags left out, entities undone."""
    return html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<br\s*/?>", "\n", cell_html)))


def table_lines(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("|")]


def test_the_page_holds_the_marker_once_and_gets_the_table(hook: ModuleType) -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert [line.strip() for line in text.splitlines()].count(hook.MARKER) == 1
    assert table_lines(text) == []
    rendered = hook.render(text)
    assert hook.MARKER not in rendered
    lines = table_lines(rendered)
    assert read_cells(lines[0]) == [
        "#",
        "Operation",
        "v1 wire",
        "v2 wire",
        "Where a version lacks it",
        "migration.mdx",
        "Tests",
    ]
    assert read_cells(lines[1]) == ["---"] * 7
    assert [read_cells(line) for line in lines[2:]] == [expected_cells(row) for row in ROWS]
    # the prose around the marker is left as it was
    before, after = text.split(hook.MARKER)
    assert rendered.startswith(before) and rendered.endswith(after)


def test_cells_read_back_exactly_whatever_markdown_syntax_they_hold(hook: ModuleType) -> None:
    row = Row(
        "X1",
        "a | b",
        "user_message {messageId, content}",
        "*not emphasis* _nor this_ `nor code` [nor](link)",
        "<b>not html</b> &amp; a \\ backslash",
        "migration.mdx § At a glance",
        ("test_one", "test_two"),
    )
    lines = table_lines(hook.mapping_table([row]))
    assert len(lines) == 3
    assert read_cells(lines[2]) == expected_cells(row)
    # a trailing {...} escaped: attr_list would read it as the cell's attributes
    assert "\\{messageId, content\\}" in lines[2]


def test_the_table_renders_as_the_rows_text_in_python_markdown(hook: ModuleType) -> None:
    """Where Python-Markdown is installed (the docs group): the cells' rendered text is the rows'
    fields, with the extensions of mkdocs.yml that read table cells (tables, attr_list)."""
    markdown = pytest.importorskip("markdown")
    body = markdown.markdown(hook.mapping_table(), extensions=["tables", "attr_list"])
    rows = re.findall(r"<tr>(.*?)</tr>", body, flags=re.S)[1:]
    cells = [[text_of(cell) for cell in re.findall(r"<td>(.*?)</td>", tr, flags=re.S)] for tr in rows]
    assert cells == [[*expected_cells(row)[:6], "\n".join(row.tests)] for row in ROWS]


def test_a_page_without_the_marker_is_left_unchanged(hook: ModuleType) -> None:
    text = "# A page\n\nNo table here: <!-- another comment -->\n"
    assert hook.render(text) == text
    assert hook.on_page_markdown(text, page=None, config=None, files=None) == text


def test_a_build_with_no_page_holding_the_marker_warns(hook: ModuleType, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.mapping_table"):
        hook.on_config(config=None)
        hook.on_page_markdown("# Another page\n", page=None, config=None, files=None)
        hook.on_post_build(config=None)
        assert [record.getMessage() for record in caplog.records] == [
            f"no page holds {hook.MARKER}: the v1 ⇄ v2 mapping table is missing from the site"
        ]
        caplog.clear()
        hook.on_config(config=None)
        hook.on_page_markdown(PAGE.read_text(encoding="utf-8"), page=None, config=None, files=None)
        hook.on_post_build(config=None)
        assert caplog.records == []


def test_every_row_names_tests_that_exist_in_test_mapping() -> None:
    tree = ast.parse(MAPPING_TESTS.read_text(encoding="utf-8"))
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    }
    assert defined
    for row in ROWS:
        assert row.tests, f"row {row.key} names no test"
        missing = [name for name in row.tests if name not in defined]
        assert not missing, f"row {row.key} names tests that tests/test_mapping.py does not define: {missing}"


def test_every_key_appears_once() -> None:
    counts = Counter(row.key for row in ROWS)
    assert [key for key, count in counts.items() if count > 1] == []
    assert len(counts) == len(ROWS) > 0

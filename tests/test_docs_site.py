"""The documentation site works opened from disk (file://), as `nox -s docs` builds it into site/.

Pages are ``guides/agent.html`` files (``use_directory_urls: false``): a directory URL opened from
disk shows a directory listing.  Search works with no server and no network: the offline plugin
writes the index into ``search/search_index.js`` (a page on file:// may not fetch() the JSON), and
the Worker stand-in it needs on file:// (Chromium starts no Worker from a file) is our own
docs/site/javascripts/iframe-worker-stand-in.js, not a third party's, nor unpkg.com's.
Code blocks wrap their long lines (docs/site/stylesheets/extra.css, javascripts/code-wrap.js).

The site is built once for the module from mkdocs.yml, but for mkdocstrings (and docs/hooks.py, which
checks what it renders): the API pages keep their ``:::`` lines, and the build takes seconds instead
of a minute.  Navigation, links, search index, assets and the guides' code blocks are those of the
real build.  The last test opens a guide in headless Chromium where one is installed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.utils.yaml import yaml_load

ROOT = Path(__file__).resolve().parents[1]
MKDOCS_YML = ROOT / "mkdocs.yml"
# The first line of our Worker stand-in: a shim copied from elsewhere does not start so
OUR_WORKER_STAND_IN = "// acp-trio's own Worker stand-in, for the site opened from disk (file://)."
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


def _nav_pages(nav: Any) -> Iterator[str]:
    """The pages of mkdocs.yml's nav, as the .html files they are built to."""
    if isinstance(nav, str):
        if nav.endswith(".md"):
            yield nav.removesuffix(".md") + ".html"
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from _nav_pages(value)
    elif isinstance(nav, list):
        for item in nav:
            yield from _nav_pages(item)


RAW = yaml_load(MKDOCS_YML.read_text(encoding="utf-8"))
PAGES = sorted(set(_nav_pages(RAW["nav"])))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    plugins = [p for p in RAW["plugins"] if not (isinstance(p, dict) and "mkdocstrings" in p)]
    # without the API pages' anchors, autorefs warns of each cross-reference into them
    autorefs = logging.getLogger("mkdocs.plugins.mkdocs_autorefs")
    level = autorefs.level
    autorefs.setLevel(logging.ERROR)
    try:
        with contextlib.chdir(ROOT):  # pymdownx.snippets reads the included files from the working directory
            config = load_config(str(MKDOCS_YML), site_dir=str(site_dir), plugins=plugins, hooks=[], strict=False)
            build(config)
    finally:
        autorefs.setLevel(level)
    return site_dir


class _Links(HTMLParser):
    """Each link and asset of a page: (tag, its class, its href or src)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        for name in ("href", "src"):
            if attributes.get(name) is not None:
                self.found.append((tag, attributes.get("class") or "", attributes[name] or ""))


def _links(page: Path) -> list[tuple[str, str, str]]:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.found


def _local(url: str) -> bool:
    """A link within the site: relative, to another file (not a fragment of the same page)."""
    parts = urlsplit(url)
    return not parts.scheme and not parts.netloc and bool(parts.path)


def _target(page: Path, url: str) -> Path:
    return (page.parent / unquote(urlsplit(url).path)).resolve()


def test_the_pages_are_html_files(site: Path) -> None:
    assert len(PAGES) > 10
    missing = [page for page in PAGES if not (site / page).is_file()]
    assert missing == []


def test_every_navigation_link_opens_an_html_file(site: Path) -> None:
    for page in PAGES:
        path = site / page
        nav = [url for tag, cls, url in _links(path) if tag == "a" and "md-nav__link" in cls and _local(url)]
        not_html = [url for url in nav if not urlsplit(url).path.endswith(".html")]
        assert not_html == [], page
        targets = {_target(path, url) for url in nav}
        assert {t for t in targets if not t.is_file()} == set(), page
        # the whole navigation, on every page: each page of mkdocs.yml's nav, and nothing else
        assert sorted(t.relative_to(site.resolve()).as_posix() for t in targets) == PAGES, page


def test_every_link_and_asset_of_a_page_is_a_file_of_the_site(site: Path) -> None:
    broken = []
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html":  # a server's page, with absolute URLs
            continue
        for _tag, _cls, url in _links(page):
            if _local(url) and not _target(page, url).is_file():
                broken.append((page.relative_to(site).as_posix(), url))
    assert broken == []


def test_the_search_index_is_a_script_a_page_on_disk_can_load(site: Path) -> None:
    script = (site / "search" / "search_index.js").read_text(encoding="utf-8")
    prefix = "var __index = "
    assert script.startswith(prefix)
    index = json.loads(script.removeprefix(prefix))
    assert index == json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    assert {doc["location"].split("#")[0] for doc in index["docs"]} >= set(PAGES)


def test_no_page_needs_the_network_for_search(site: Path) -> None:
    for page in PAGES:
        path = site / page
        html = path.read_text(encoding="utf-8")
        assert "unpkg.com" not in html, page
        shims = [url for tag, _cls, url in _links(path) if tag == "script" and "iframe-worker" in url]
        assert len(shims) == 1, page
        assert _local(shims[0]) and _target(path, shims[0]).is_file(), page
        # ours, not a vendored third-party file
        assert _target(path, shims[0]).read_text(encoding="utf-8").startswith(OUR_WORKER_STAND_IN + "\n"), page
        # and the page loads no other script but Material's bundle and those mkdocs.yml lists
        scripts = {_target(path, url) for tag, _cls, url in _links(path) if tag == "script" and _local(url)}
        listed = {site.resolve() / name for name in [*RAW["extra"]["polyfills"], *RAW["extra_javascript"]]}
        assert {s for s in scripts if not s.match("assets/javascripts/bundle.*.min.js")} == listed, page


# Injected into a copy of a guide: reports, once the page has loaded, each code block's widths, its
# lines (how many wrap, the indentation code-wrap.js gave each) and whether Material's copy button
# would copy the code as written; then searches for the page's title and reports the results.
_PROBE = """<script>
addEventListener("load", () => {
  const blocks = [...document.querySelectorAll(".md-typeset pre > code")].map((code) => {
    const lineHeight = parseFloat(getComputedStyle(code).lineHeight)
    const lines = [...code.querySelectorAll(':scope > [id^="__span-"]')].map((line) => ({
      spaces: /^ */.exec(line.textContent)[0].length,
      indent: line.style.getPropertyValue("--acp-indent"),
      wrapped: line.getBoundingClientRect().height > 1.5 * lineHeight,
    }))
    code.setAttribute("data-md-copying", "")  // what Material's copy button does, then reads innerText
    const copied = code.innerText.trimEnd() === code.textContent.trimEnd()
    code.removeAttribute("data-md-copying")
    return {scrollWidth: code.scrollWidth, clientWidth: code.clientWidth, lines, copied}
  })
  const input = document.querySelector("input.md-search__input")
  input.focus()
  input.value = document.title.split(" - ")[0]
  for (const type of ["focus", "input", "keyup"]) input.dispatchEvent(new Event(type, {bubbles: true}))
  setTimeout(() => {
    const hits = [...document.querySelectorAll(".md-search-result__item > a")].map((a) => a.href)
    document.body.setAttribute("data-probe", JSON.stringify({blocks, hits}))
  }, 3000)
})
</script></body>"""


class _Probe(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.result: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self.result = dict(attrs).get("data-probe")


def _longest_code_line(page: Path) -> int:
    codes = re.findall(
        r"<pre[^>]*>(?:<span></span>)?<code[^>]*>(.*?)</code></pre>", page.read_text(encoding="utf-8"), re.S
    )
    lines = [line for code in codes for line in re.sub(r"<[^>]+>", "", code).splitlines()]
    return max(map(len, lines), default=0)


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium to open the site in")
def test_a_guide_opened_from_disk_in_chromium(site: Path, tmp_path: Path) -> None:
    # the guide with the longest line of code: 1280 px leaves a code block about 80 columns
    guide = max((site / page for page in PAGES if page.startswith("guides/")), key=_longest_code_line)
    assert _longest_code_line(guide) > 100, guide
    probe = guide.with_name("_probe.html")  # beside it, so that its relative links hold
    probe.write_text(guide.read_text(encoding="utf-8").replace("</body>", _PROBE), encoding="utf-8")
    assert CHROMIUM is not None
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path}",
            "--window-size=1280,900",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    parser = _Probe()
    parser.feed(dom)
    assert parser.result is not None, dom[-2000:]
    result = json.loads(parser.result)

    blocks = result["blocks"]
    assert blocks
    # no code block scrolls sideways: its long lines wrap ...
    assert [(b["scrollWidth"], b["clientWidth"]) for b in blocks if b["scrollWidth"] > b["clientWidth"]] == []
    assert any(line["wrapped"] for b in blocks for line in b["lines"])
    # ... each continuing right of its own indentation (code-wrap.js gave every line its indentation)
    lines = [line for b in blocks for line in b["lines"]]
    assert [line for line in lines if line["indent"] != (str(line["spaces"]) if line["spaces"] else "")] == []
    # ... and the copy button still copies the code as written, with no line break added
    assert all(b["copied"] for b in blocks)

    # the search, from disk with no server: the page's title finds the page, at its .html file
    hits = [urlsplit(hit) for hit in result["hits"]]
    assert hits
    assert all(hit.path.endswith(".html") for hit in hits)
    assert guide.resolve().as_uri() in {f"{hit.scheme}://{hit.path}" for hit in hits}

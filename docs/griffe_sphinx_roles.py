"""A griffe extension for the docs site: the runtime's docstrings are written with Sphinx roles
(``:class:`Connection```, ``:func:`~acp_trio.spawn_agent```, ``:mod:`acp_trio.fs```), which
Markdown would show as-is.  Each role becomes a cross-reference, resolved in the scope of the
object the docstring belongs to; it is an *optional* autoref (plain code when the target is not in
the reference, e.g. a private helper), so it never breaks a strict build.  A paragraph ending with
the reST ``::`` (a literal block follows) ends with ``:`` instead.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|mod|data|meth|attr|exc|obj|const):`(?P<target>[^`]+)`")
_LITERAL_BLOCK = re.compile(r"(?<=\S)::(?=\n\s*\n)")
_BARE_LITERAL_BLOCK = re.compile(r"(?m)^\s*::\s*\n")


def resolve_target(obj: griffe.Object, target: str) -> str | None:
    """The full path a role's target names, seen from `obj`, or None when it cannot be resolved."""
    if target.startswith("."):
        return None
    if target.startswith(("acp_trio.", "acp_schema.")) or target in ("acp_trio", "acp_schema"):
        return target
    head, _, rest = target.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            path = scope.resolve(head)
        except griffe.NameResolutionError:
            scope = scope.parent
            continue
        return f"{path}.{rest}" if rest else path
    return None


def rewrite(obj: griffe.Object, text: str) -> str:
    """The docstring `text` of `obj` with its Sphinx roles as optional cross-references."""

    def replace(match: re.Match[str]) -> str:
        target = match["target"].strip()
        title = target
        explicit = re.fullmatch(r"(?P<title>.+?)\s*<(?P<target>[^>]+)>", target)
        if explicit:
            title, target = explicit["title"], explicit["target"]
        elif target.startswith("~"):
            target = target[1:]
            title = target.rsplit(".", 1)[-1]
        code = f"<code>{html.escape(title)}</code>"
        path = resolve_target(obj, target)
        if path is None:
            return code
        return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'

    text = _ROLE.sub(replace, text)
    text = _BARE_LITERAL_BLOCK.sub("\n", text)
    return _LITERAL_BLOCK.sub(":", text)


class SphinxRoles(griffe.Extension):
    """Rewrite the Sphinx roles of every docstring of a loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        self._walk(pkg)

    def _walk(self, obj: griffe.Object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj, obj.docstring.value)
        for member in obj.members.values():
            if not isinstance(member, griffe.Alias):
                self._walk(member)

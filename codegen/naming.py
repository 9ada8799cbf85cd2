"""The one naming table: names for shapes the schema leaves anonymous or names ambiguously.

Everything else is named by rule in ``codegen.preprocess``: a tagged-union branch is
``<Tag><Union>`` (``TextContentBlock``, ``AgentMessageChunkSessionUpdate``, ``HttpMcpServer``), a
catch-all branch is ``<Union>Other``, and a branch of a nested union is ``<InnerTag><OuterBranch>``.
An entry here is keyed by ``(union $def, branch title or tag)`` and used only where a rule would
produce no name or a clashing one; a key that no longer matches the schema fails generation.
"""

from __future__ import annotations

#: (union $def, untagged branch title) -> class name for untagged *inline* branches
UNTAGGED_BRANCH_NAMES: dict[tuple[str, str], str] = {
    ("SetSessionConfigOptionRequest", "value_id"): "ValueIdSetSessionConfigOptionRequest",
    ("MessageMcpResponse", "Result"): "ResultMessageMcpResponse",
    ("MessageMcpResponse", "Error"): "ErrorMessageMcpResponse",
}

#: titles that mark an open catch-all branch
CATCHALL_TITLES: frozenset[str] = frozenset({"other", "unknown", "Other"})

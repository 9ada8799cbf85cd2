"""The v1 ⇄ v2 mapping table (issue 33): one pure function per row and direction, and :data:`ROWS`.

Contract: every function here takes generated objects of one protocol version (``acp_schema.v1``
or ``acp_schema.v2``) or the author's :class:`Diff`, and returns new objects of the other version;
none does I/O, keeps state or mutates its arguments.  The state some rows need (which tool calls a
v1 client has seen, every live plan, a display terminal's bytes) lives in
:mod:`acp_trio._views`, which calls these functions.  Where the target version has no such thing:

- *mapped*: the function returns the nearest faithful form and, where a value is lost, keeps the
  original under an ``acp-trio/...`` key of the object's ``_meta`` (v1 ``failed`` for v2 tool
  status ``cancelled`` carries ``_meta["acp-trio/status"] == "cancelled"``);
- *error*: it raises :class:`VersionError` (nothing was produced) naming the version, the
  operation and what to do instead.

The source of every row is ``docs/protocol/v2/migration.mdx`` of the ACP spec (the section is named
in each docstring); :data:`ROWS` is the table itself as data (operation, v1 wire, v2 wire, what
happens where a version lacks it, and the tests in ``tests/test_mapping.py`` that cover it), from
which the docs' table is generated.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping, Sequence
from typing import Any, get_args

import attrs

from acp_schema import v1, v2

from ._capabilities import CapabilityError
from ._converter import DecodeError, converter
from ._core import RequestError
from ._spec import UNSET, UnsetType

__all__ = [
    "META_PREFIX",
    "ROWS",
    "Diff",
    "Row",
    "VersionError",
    "agent_caps_to_v1",
    "agent_caps_to_v2",
    "auth_method_to_v1",
    "auth_method_to_v2",
    "chunk_to_v1",
    "chunk_to_v2",
    "client_caps_to_v1",
    "client_caps_to_v2",
    "commands_to_v1",
    "commands_to_v2",
    "config_option_to_v1",
    "config_option_to_v2",
    "config_options_to_v1",
    "config_update_to_v1",
    "content_chunk_to_v1",
    "content_to_v1",
    "content_to_v2",
    "current_mode_to_v2",
    "diff_to_v1",
    "diff_to_v2",
    "diff_v1_to_v2",
    "diff_v2_to_v1",
    "elicitation_to_v1",
    "elicitation_to_v2",
    "error_to_v2",
    "git_patch",
    "idle_to_v1",
    "mcp_server_to_v1",
    "mcp_server_to_v2",
    "message_to_v1",
    "mode_update_to_v1",
    "modes_from_config",
    "modes_to_config",
    "outcome_to_v1",
    "outcome_to_v2",
    "permission_options_to_v1",
    "permission_to_v1",
    "permission_to_v2",
    "plan_entry_to_v1",
    "plan_to_v1",
    "plan_to_v2",
    "same_shape_to_v1",
    "same_shape_to_v2",
    "state_to_v1",
    "stop_reason_to_v1",
    "stop_reason_to_v2",
    "terminal_text",
    "terminal_to_v1",
    "tool_call_to_v1",
    "tool_call_to_v2",
    "tool_content_to_v1",
    "tool_content_to_v2",
    "tool_kind_to_v1",
    "tool_status_to_v1",
]

log = logging.getLogger("acp_trio.neutral")

META_PREFIX = "acp-trio/"
"""Prefix of the ``_meta`` keys this layer adds where a value has no place in the target version."""


class VersionError(CapabilityError):
    """What was asked for does not exist in protocol ``version`` and has no mapping; nothing was sent.

    ``version``: 1 or 2; ``method``: the operation (``"session/update tool_call_content_chunk"``);
    ``detail``: the migration.mdx section and what to do instead.
    """

    def __init__(self, version: int, operation: str, detail: str) -> None:
        text = f"{operation} does not exist in protocol version {version}: {detail}"
        super().__init__(operation, f"protocolVersion {version}", peer="agent", text=text)
        self.version = version
        self.operation = operation
        self.detail = detail


@attrs.frozen
class Diff:
    """Tool call content: a file changed from ``old_text`` to ``new_text`` (the author's texts).

    ``path``: absolute.  ``old_text`` ``None``: the file was added; ``new_text`` ``None``: deleted.
    ``old_path`` set: the file moved from there (v2 ``move``).  ``mime_type``: v2 ``mimeType``
    (v1 has no such field).  v1: ``{type: diff, path, oldText?, newText}``; v2: ``changes`` plus a
    ``git_patch`` (migration.mdx § Diff content).
    """

    path: str
    old_text: str | None
    new_text: str | None
    old_path: str | None = None
    mime_type: str | None = None


@attrs.frozen
class Row:
    """One row of the mapping table: ``key`` (``"T13"``, the design's numbering), ``operation``,
    its ``v1`` and ``v2`` wire forms, ``lacking`` (what happens where a version lacks it: mapped
    how, or which error), ``section`` (of migration.mdx) and ``tests`` (names in
    ``tests/test_mapping.py``)."""

    key: str
    operation: str
    v1: str
    v2: str
    lacking: str
    section: str
    tests: tuple[str, ...]


# -- helpers ---------------------------------------------------------------------------------------
def _meta_with(meta: dict[str, Any] | UnsetType | None, extra: Mapping[str, Any]) -> dict[str, Any] | UnsetType:
    """``meta`` with ``extra``'s keys under :data:`META_PREFIX` added; ``UNSET`` when both are empty.
    A ``None`` meta (a v2 clear) becomes ``{}`` (v1 has no null patch: design T23)."""
    out = dict(meta) if isinstance(meta, dict) else {}
    out.update({META_PREFIX + key: value for key, value in extra.items()})
    if out or meta is None:
        return out
    return UNSET


def _convert(value: Any, target: Any, version: int, where: str) -> Any:
    """``value`` re-read as ``target`` of the other version (the shapes are the same on the wire);
    :class:`VersionError` when it does not decode, or lands in ``target``'s catch-all (the target
    version has no such variant)."""
    try:
        result = _same(value, target)
    except DecodeError as exc:
        raise VersionError(version, where, f"the {type(value).__name__} has no v{version} form ({exc})") from None
    if type(result).__name__.endswith("Other") and not type(value).__name__.endswith("Other"):
        raise VersionError(version, where, f"v{version} has no {type(value).__name__}")
    return result


def _same(value: Any, target: Any) -> Any:
    """``value`` re-read as ``target`` (a class or union of the other version, same wire shape)."""
    return _structure(converter.unstructure(value), target)


def _structure(data: Any, target: Any) -> Any:
    return converter.structure(data, target)


def _is_other(value: Any) -> bool:
    return type(value).__name__.endswith("Other")


def _str_or(value: Any, default: str) -> str:
    return value if isinstance(value, str) else default


# -- content blocks (T12) --------------------------------------------------------------------------
def content_to_v1(block: v2.ContentBlock) -> v1.ContentBlock:
    """Row T12, v2 → v1: a content block (``text``, ``image``, ``audio``, ``resource_link``,
    ``resource``: the same wire shape in both, migration.mdx § Content blocks; v2-only fields such
    as ``icons`` stay in ``extra_fields``).  An unknown block type raises :class:`VersionError`
    (v1's union is closed)."""
    if _is_other(block):
        raise VersionError(1, "content block", f"v1 knows no block type {getattr(block, 'type', '?')!r}")
    result: v1.ContentBlock = _convert(block, v1.ContentBlock, 1, "content block")
    return result


def content_to_v2(block: v1.ContentBlock) -> v2.ContentBlock:
    """Row T12, v1 → v2: the same block (an unknown v1 block stays v2's catch-all, which v2
    receivers preserve: migration.mdx § Extensibility)."""
    result: v2.ContentBlock = _same(block, v2.ContentBlock)
    return result


# -- messages (T5, T6, T7, replay of T1) -----------------------------------------------------------
_V1_CHUNKS: dict[type, type] = {
    v2.UserMessageChunkSessionUpdate: v1.UserMessageChunkSessionUpdate,
    v2.AgentMessageChunkSessionUpdate: v1.AgentMessageChunkSessionUpdate,
    v2.AgentThoughtChunkSessionUpdate: v1.AgentThoughtChunkSessionUpdate,
    v2.UserMessageSessionUpdate: v1.UserMessageChunkSessionUpdate,
    v2.AgentMessageSessionUpdate: v1.AgentMessageChunkSessionUpdate,
    v2.AgentThoughtSessionUpdate: v1.AgentThoughtChunkSessionUpdate,
}
_V2_CHUNKS: dict[type, type] = {
    v1.UserMessageChunkSessionUpdate: v2.UserMessageChunkSessionUpdate,
    v1.AgentMessageChunkSessionUpdate: v2.AgentMessageChunkSessionUpdate,
    v1.AgentThoughtChunkSessionUpdate: v2.AgentThoughtChunkSessionUpdate,
}


def chunk_to_v1(update: Any) -> Any:
    """Rows T5/T6, v2 → v1: a ``user_message_chunk`` / ``agent_message_chunk`` /
    ``agent_thought_chunk`` as v1's, ``messageId`` kept (optional in v1, sent anyway: migration.mdx
    § Message IDs are required); the chunk's ``_meta`` kept."""
    kind = _V1_CHUNKS[type(update)]
    return kind(
        content=content_to_v1(update.content),
        message_id=update.message_id,
        meta=update.meta,
        extra_fields=dict(update.extra_fields),
    )


def chunk_to_v2(update: Any, message_id: str) -> Any:
    """Rows T5/T6, v1 → v2: the chunk with a ``messageId`` (required in v2): the v1 chunk's own when
    it has one, else ``message_id`` (the caller's, the same for every chunk of one message)."""
    kind = _V2_CHUNKS[type(update)]
    own = update.message_id if isinstance(update.message_id, str) else message_id
    return kind(
        content=content_to_v2(update.content), message_id=own, meta=update.meta, extra_fields=dict(update.extra_fields)
    )


def message_to_v1(update: Any) -> list[Any]:
    """Row T7 (and T1 on replay), v2 → v1: a whole-message upsert (``user_message``,
    ``agent_message``, ``agent_thought``) as one v1 chunk per block, each with its ``messageId``
    (migration.mdx § Whole-message upserts).  Exact only when the v1 client holds no content of that
    message yet: the caller (:class:`~acp_trio._views.V1View`) refuses the rest, v1 cannot
    retract chunks.  ``content`` omitted, ``null`` or ``[]``: no chunk."""
    kind = _V1_CHUNKS[type(update)]
    content = update.content if isinstance(update.content, list) else []
    return [kind(content=content_to_v1(block), message_id=update.message_id) for block in content]


# -- tool calls (T8-T11) ---------------------------------------------------------------------------
_V1_STATUSES = get_args(v1.ToolCallStatus)
_V1_KINDS = get_args(v1.ToolKind)


def tool_status_to_v1(status: str) -> tuple[str, dict[str, str]]:
    """Row T10, v2 → v1: ``(v1 status, _meta to add)``.  v1 lacks ``cancelled`` (→ ``failed``),
    ``paused`` (→ ``in_progress``: it has started) and unknown values (→ ``in_progress``: the v2
    schema says clients treat an unrecognised status as still in progress); the original goes in
    ``_meta["acp-trio/status"]`` (migration.mdx § Tool calls: "The status enum adds cancelled")."""
    if status in _V1_STATUSES:
        return status, {}
    return ("failed" if status == "cancelled" else "in_progress"), {"status": status}


def tool_kind_to_v1(kind: str) -> tuple[str, dict[str, str]]:
    """Row T8/T9, v2 → v1: ``(v1 kind, _meta to add)``; a kind v1 lacks (v2's enum is open) is
    ``other``, the original in ``_meta["acp-trio/kind"]``."""
    if kind in _V1_KINDS:
        return kind, {}
    return "other", {"kind": kind}


def tool_content_to_v1(item: v2.ToolCallContent) -> v1.ToolCallContent:
    """Row T12/T13, v2 → v1: one tool call content item.  ``content``: the same (block converted);
    ``diff``: :func:`diff_v2_to_v1` (exact for an added or deleted file, else a text item);
    ``terminal``: :class:`VersionError` (v2's display terminal has no v1 form by itself:
    :class:`~acp_trio._views.V1View` renders its bytes as text, row T14); unknown types:
    :class:`VersionError`."""
    if isinstance(item, v2.ContentToolCallContent):
        return v1.ContentToolCallContent(content=content_to_v1(item.content), meta=item.meta)
    if isinstance(item, v2.DiffToolCallContent):
        return diff_v2_to_v1(item)
    if isinstance(item, v2.TerminalToolCallContent):
        raise VersionError(
            1,
            "terminal tool call content",
            "a v2 terminal is an agent-owned display (migration.mdx § Agent-owned terminal display); "
            "project the session's updates through V1View, which shows its output as text",
        )
    raise VersionError(1, "tool call content", f"v1 knows no content type {getattr(item, 'type', '?')!r}")


def tool_content_to_v2(item: v1.ToolCallContent) -> v2.ToolCallContent:
    """Row T12/T13, v1 → v2: ``content`` the same; ``diff`` exact (:func:`diff_v1_to_v2`);
    ``terminal`` (a v1 *client* terminal) the same ``terminalId`` (whoever runs it must report its
    ``terminal_update``, migration.mdx § Client file system and terminal execution removed);
    unknown types kept as v2's catch-all."""
    if isinstance(item, v1.ContentToolCallContent):
        return v2.ContentToolCallContent(content=content_to_v2(item.content), meta=item.meta)
    if isinstance(item, v1.DiffToolCallContent):
        return diff_v1_to_v2(item)
    if isinstance(item, v1.TerminalToolCallContent):
        return v2.TerminalToolCallContent(terminal_id=item.terminal_id, meta=item.meta)
    result: v2.ToolCallContent = _same(item, v2.ToolCallContent)
    return result


def tool_call_to_v1(
    update: v2.ToolCallUpdateSessionUpdate | v2.ToolCallUpdate,
    *,
    create: bool,
    content: Sequence[v1.ToolCallContent] | UnsetType | None = UNSET,
) -> Any:
    """Rows T8-T10, v2 → v1: a ``tool_call_update`` as v1's ``tool_call`` (``create``: the v1
    client has not seen the id: migration.mdx § One upsert notification) or ``tool_call_update``;
    given a v2 ``ToolCallUpdate`` (a permission subject), v1's ``ToolCallUpdate``.

    ``content``: the v1 content to send (the caller's accumulated or exact rendering); ``UNSET``
    converts the update's own with :func:`tool_content_to_v1`.  A ``null`` (v2 clear) is sent as the
    cleared value, since v1 has no null patch (design T9, Q2): title ``""``, kind ``other``,
    status ``pending``, content and locations ``[]``, ``_meta`` ``{}``.  Status and kind v1 lacks:
    :func:`tool_status_to_v1`, :func:`tool_kind_to_v1` (originals in ``_meta``).  Unknown wire
    fields (``extra_fields``) are kept; v2's ``capabilities`` (what ``tool_call/cancel`` may do, a
    method v1 lacks) is not sent.
    """
    extra: dict[str, str] = {}
    status: Any = update.status
    if isinstance(status, str):
        status, more = tool_status_to_v1(status)
        extra.update(more)
    kind: Any = update.kind
    if isinstance(kind, str):
        kind, more = tool_kind_to_v1(kind)
        extra.update(more)
    items: Any = content
    if isinstance(content, UnsetType):
        items = [tool_content_to_v1(c) for c in update.content] if isinstance(update.content, list) else update.content
    locations: Any = update.locations
    if isinstance(locations, list):
        locations = [_convert(loc, v1.ToolCallLocation, 1, "tool call location") for loc in locations]
    meta = _meta_with(update.meta, extra)
    if create:
        return v1.ToolCallSessionUpdate(
            tool_call_id=update.tool_call_id,
            title=_str_or(update.title, ""),
            name=update.name if isinstance(update.name, str) else UNSET,
            kind=UNSET if kind is None else kind,
            status=UNSET if status is None else status,
            content=list(items) if isinstance(items, list) else UNSET,
            locations=locations if isinstance(locations, list) else UNSET,
            raw_input=update.raw_input,
            raw_output=update.raw_output,
            meta=meta,
            extra_fields=dict(update.extra_fields),
        )
    fields: dict[str, Any] = {
        "tool_call_id": update.tool_call_id,
        "title": "" if update.title is None else update.title,
        "name": update.name,
        "kind": "other" if kind is None else kind,
        "status": "pending" if status is None else status,
        "content": [] if items is None else (list(items) if isinstance(items, list) else items),
        "locations": [] if locations is None else locations,
        "raw_input": update.raw_input,
        "raw_output": update.raw_output,
        "meta": meta,
        "extra_fields": dict(update.extra_fields),
    }
    if isinstance(update, v2.ToolCallUpdate):
        return v1.ToolCallUpdate(**fields)
    return v1.ToolCallUpdateSessionUpdate(**fields)


def tool_call_to_v2(update: Any, *, known: bool = False) -> Any:
    """Rows T8/T9, v1 → v2: v1 ``tool_call`` / ``tool_call_update`` (or a ``ToolCallUpdate``, a
    permission's ``toolCall``) as v2's ``tool_call_update`` (``ToolCallUpdate``).

    v1's ``null`` leaves a field unchanged, so it is omitted.  A v1 ``tool_call`` for an id the v2
    side already has (``known``) replaces every field in v1, so the fields it lacks are sent as
    v2 clears (``null``); for a new id they are simply omitted (the same defaults apply).
    """
    replace = known and isinstance(update, v1.ToolCallSessionUpdate)

    def field(value: Any) -> Any:
        if value is None or isinstance(value, UnsetType):
            return None if replace else UNSET
        return value

    content = update.content
    items: Any = [tool_content_to_v2(c) for c in content] if isinstance(content, list) else field(content)
    locations = update.locations
    locs: Any = [_same(x, v2.ToolCallLocation) for x in locations] if isinstance(locations, list) else field(locations)
    fields: dict[str, Any] = {
        "tool_call_id": update.tool_call_id,
        "title": field(update.title),
        "name": field(update.name),
        "kind": field(update.kind),
        "status": field(update.status),
        "content": items,
        "locations": locs,
        "raw_input": field(update.raw_input),
        "raw_output": field(update.raw_output),
        "meta": field(update.meta),
        "extra_fields": dict(update.extra_fields),
    }
    if isinstance(update, v1.ToolCallUpdate):
        return v2.ToolCallUpdate(**fields)
    return v2.ToolCallUpdateSessionUpdate(**fields)


def content_chunk_to_v1(
    update: v2.ToolCallContentChunkSessionUpdate, content: Sequence[v1.ToolCallContent], *, create: bool
) -> Any:
    """Row T11, v2 → v1: v1 has no content chunk, so a ``tool_call_content_chunk`` is a
    ``tool_call_update`` carrying ``content``: the tool call's whole v1 content with the chunk's item
    already appended (the caller accumulates it: :class:`~acp_trio._views.V1View`); ``create``
    (an id the v1 client has not seen): a ``tool_call`` with an empty title instead
    (migration.mdx § Streaming tool-call content).  The chunk's ``_meta`` is chunk-scoped: not sent."""
    if create:
        return v1.ToolCallSessionUpdate(tool_call_id=update.tool_call_id, title="", content=list(content))
    return v1.ToolCallUpdateSessionUpdate(tool_call_id=update.tool_call_id, content=list(content))


# -- diffs (T13) -----------------------------------------------------------------------------------
def git_patch(path: str, old: str | None, new: str | None, *, old_path: str | None = None) -> str:
    """One ``diff --git`` section in Git's ``--patch`` text format for one file, absolute paths and
    no ``a/``/``b/`` prefixes as migration.mdx § Diff content shows; ``old`` ``None``: added,
    ``new`` ``None``: deleted, ``old_path``: renamed from there.  ``""`` when nothing changed."""
    source = path if old_path is None else old_path
    lines = list(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            fromfile="/dev/null" if old is None else source,
            tofile="/dev/null" if new is None else path,
        )
    )
    body = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    if old is None:
        header = "new file mode 100644\n"
    elif new is None:
        header = "deleted file mode 100644\n"
    elif old_path is not None and old_path != path:
        header = f"rename from {old_path}\nrename to {path}\n"
    else:
        header = ""
    if not body and not header:
        return ""
    return f"diff --git {source} {path}\n{header}{body}"


def diff_to_v2(diff: Diff) -> v2.DiffToolCallContent:
    """Row T13, author → v2: the file-level change (``add`` / ``delete`` / ``modify`` / ``move``,
    ``fileType`` ``text``, ``mimeType`` when given) and its ``git_patch`` (omitted when nothing
    changed); migration.mdx § Diff content."""
    mime: str | UnsetType = UNSET if diff.mime_type is None else diff.mime_type
    change: v2.DiffChange
    if diff.old_text is None:
        change = v2.AddDiffChange(path=diff.path, file_type="text", mime_type=mime)
    elif diff.new_text is None:
        change = v2.DeleteDiffChange(path=diff.path, file_type="text", mime_type=mime)
    elif diff.old_path is not None and diff.old_path != diff.path:
        change = v2.MoveDiffChange(old_path=diff.old_path, path=diff.path, file_type="text", mime_type=mime)
    else:
        change = v2.ModifyDiffChange(path=diff.path, file_type="text", mime_type=mime)
    text = git_patch(diff.path, diff.old_text, diff.new_text, old_path=diff.old_path)
    patch = v2.DiffPatch(format="git_patch", text=text) if text else UNSET
    return v2.DiffToolCallContent(changes=[change], patch=patch)


def diff_to_v1(diff: Diff) -> list[v1.DiffToolCallContent]:
    """Row T13, author → v1: ``[{type: diff, path, oldText?, newText}]``: ``oldText`` absent for an
    added file, ``newText`` ``""`` for a deleted one (v1 cannot say more: migration.mdx § Diff
    content); a move is two diffs, the old path emptied and the new one added."""
    if diff.old_path is not None and diff.old_path != diff.path and diff.new_text is not None:
        return [
            v1.DiffToolCallContent(path=diff.old_path, old_text=diff.old_text or "", new_text=""),
            v1.DiffToolCallContent(path=diff.path, new_text=diff.new_text),
        ]
    old: str | UnsetType = UNSET if diff.old_text is None else diff.old_text
    return [v1.DiffToolCallContent(path=diff.path, old_text=old, new_text=diff.new_text or "")]


def diff_v1_to_v2(item: v1.DiffToolCallContent) -> v2.DiffToolCallContent:
    """Row T13, v1 → v2, exact: ``oldText`` absent or ``null`` is an added file, anything else a
    modification (v1 cannot tell a deletion from emptying), with its ``git_patch``; ``_meta`` kept."""
    old = item.old_text if isinstance(item.old_text, str) else None
    out = diff_to_v2(Diff(item.path, old, item.new_text))
    return attrs.evolve(out, meta=item.meta)


def diff_v2_to_v1(item: v2.DiffToolCallContent) -> v1.DiffToolCallContent | v1.ContentToolCallContent:
    """Row T13, v2 → v1 without the author's texts (the adapter's case).  Exact where the patch
    holds the whole file: a one-file ``git_patch`` that adds a file is v1's ``newText``, one that
    deletes it ``oldText`` (``newText`` ``""``).  Otherwise migration.mdx § Diff content says "there
    is no mechanical mapping from v2 diffs back to oldText/newText" (a modification's patch holds
    only its hunks), so v1 gets a text item: the changes, one a line (``modify /a``, ``move /a ->
    /b``), then the patch in a ``diff`` fence.  ``_meta`` kept either way."""
    exact = _exact_diff_to_v1(item)
    if exact is not None:
        return exact
    lines = []
    for change in item.changes:
        old_path, path = getattr(change, "old_path", None), getattr(change, "path", "?")
        where = f"{old_path} -> {path}" if isinstance(old_path, str) else str(path)
        lines.append(f"{getattr(change, 'operation', '?')} {where}")
    if isinstance(item.patch, v2.DiffPatch) and item.patch.text:
        lines.append(f"```diff\n{item.patch.text.rstrip()}\n```")
    return v1.ContentToolCallContent(content=v1.TextContentBlock(text="\n".join(lines)), meta=item.meta)


def _patch_side(text: str, keep: str) -> str | None:
    """The whole text on one side of a one-file git patch that adds (``keep="+"``) or deletes
    (``keep="-"``) the file: its hunk lines of that side; ``None`` when another line kind appears
    (then the patch does not hold the whole file)."""
    out: list[str] = []
    in_hunks = False
    for line in text.splitlines(keepends=True):
        if line.startswith("@@"):
            in_hunks = True
            continue
        if not in_hunks:
            continue
        if line.startswith("\\"):  # "\ No newline at end of file": the previous line had none
            if out:
                out[-1] = out[-1].rstrip("\n")
            continue
        if not line.startswith(keep):
            return None
        out.append(line[1:])
    return "".join(out)


def _exact_diff_to_v1(item: v2.DiffToolCallContent) -> v1.DiffToolCallContent | None:
    """Row T13, v2 → v1, the cases a patch holds the whole file: an added file's ``newText``, a
    deleted file's ``oldText`` (``newText`` ``""``).  ``None`` otherwise (a modification's patch
    holds only its hunks: migration.mdx § Diff content, "no mechanical mapping")."""
    if len(item.changes) != 1 or not isinstance(item.patch, v2.DiffPatch) or item.patch.format != "git_patch":
        return None
    change = item.changes[0]
    if isinstance(change, v2.AddDiffChange):
        new = _patch_side(item.patch.text, "+")
        return None if new is None else v1.DiffToolCallContent(path=change.path, new_text=new, meta=item.meta)
    if isinstance(change, v2.DeleteDiffChange):
        old = _patch_side(item.patch.text, "-")
        return (
            None if old is None else v1.DiffToolCallContent(path=change.path, old_text=old, new_text="", meta=item.meta)
        )
    return None


# -- agent-owned display terminals (T14) -----------------------------------------------------------
def terminal_text(command: str | None, output: bytes, exit_status: v2.TerminalExitStatus | None) -> str:
    """Row T14, v2 → v1: a display terminal as text: ``$ command`` (when known), the output decoded
    as UTF-8 (invalid bytes as U+FFFD), and once exited a last line ``[exit N]`` / ``[SIGTERM]``
    (migration.mdx § Agent-owned terminal display: "a safe sanitized transcript fallback")."""
    parts = [] if command is None else [f"$ {command}\n"]
    parts.append(output.decode("utf-8", errors="replace"))
    if exit_status is not None:
        if parts[-1] and not parts[-1].endswith("\n"):
            parts.append("\n")
        signal, code = exit_status.signal, exit_status.exit_code
        parts.append(f"[{signal}]" if isinstance(signal, str) else f"[exit {code if isinstance(code, int) else '?'}]")
    return "".join(parts)


def terminal_to_v1(text: str) -> v1.ContentToolCallContent:
    """Row T14, v2 → v1: the :func:`terminal_text` of a display terminal as a v1 content item."""
    return v1.ContentToolCallContent(content=v1.TextContentBlock(text=text))


# -- plans (T20) -----------------------------------------------------------------------------------
def plan_entry_to_v1(entry: v2.PlanEntry) -> v1.PlanEntry:
    """Row T20, v2 → v1: one entry; status ``cancelled`` (v2 only) is ``completed`` and an unknown
    status ``pending``, an unknown priority ``medium``, each original in ``_meta["acp-trio/..."]``
    (migration.mdx § Plans: "status adds cancelled"; design Q3)."""
    extra: dict[str, str] = {}
    status: str = entry.status
    if status not in get_args(v1.PlanEntryStatus):
        extra["status"] = status
        status = "completed" if status == "cancelled" else "pending"
    priority: str = entry.priority
    if priority not in get_args(v1.PlanEntryPriority):
        extra["priority"] = priority
        priority = "medium"
    return v1.PlanEntry(content=entry.content, priority=priority, status=status, meta=_meta_with(entry.meta, extra))  # type: ignore[arg-type]


def plan_to_v1(plans: Sequence[Sequence[v2.PlanEntry]]) -> v1.PlanSessionUpdate:
    """Row T20, v2 → v1: v1's ``plan`` replaces the client's whole list, so it carries the entries
    of every live plan of the session, in the order the plans were created (design Q7)."""
    return v1.PlanSessionUpdate(entries=[plan_entry_to_v1(e) for entries in plans for e in entries])


def plan_to_v2(update: v1.PlanSessionUpdate, plan_id: str) -> v2.PlanUpdateSessionUpdate:
    """Row T20, v1 → v2: ``plan_update {plan: {type: items, planId, entries}}``; ``plan_id``: the
    caller's one id per session (v1 has one plan per session); migration.mdx § Plans."""
    entries = [_same(e, v2.PlanEntry) for e in update.entries]
    content = v2.ItemsPlanUpdateContent(plan_id=plan_id, entries=entries)
    return v2.PlanUpdateSessionUpdate(plan=content, meta=update.meta)


# -- slash commands (L14) --------------------------------------------------------------------------
def commands_to_v1(update: v2.AvailableCommandsUpdateSessionUpdate) -> v1.AvailableCommandsUpdateSessionUpdate:
    """Row L14, v2 → v1: ``available_commands_update``; an input of type ``text`` is v1's untagged
    ``{hint}``, another input type is omitted (the command stays, without a hint), and a command of
    an unknown type is kept as a plain command by its name and description (migration.mdx § Slash
    commands: clients may "hide the command's input hint")."""
    commands = []
    for command in update.available_commands:
        hint: Any = UNSET
        given = getattr(command, "input", UNSET)
        if isinstance(given, v2.TextAvailableCommandInput):
            hint = v1.UnstructuredCommandInput(hint=given.hint, meta=given.meta)
        elif given is not None and not isinstance(given, UnsetType):
            log.warning("available_commands_update to v1: %s's input type has no v1 form, sent without", command.name)
        meta = getattr(command, "meta", UNSET)
        commands.append(v1.AvailableCommand(name=command.name, description=command.description, input=hint, meta=meta))
    return v1.AvailableCommandsUpdateSessionUpdate(available_commands=commands, meta=update.meta)


def commands_to_v2(update: v1.AvailableCommandsUpdateSessionUpdate) -> v2.AvailableCommandsUpdateSessionUpdate:
    """Row L14, v1 → v2: each command gets ``type: command`` and a hint input ``type: text``
    (migration.mdx § Slash commands)."""
    commands: list[v2.AvailableCommand] = []
    for command in update.available_commands:
        hint: Any = command.input
        if isinstance(hint, v1.UnstructuredCommandInput):
            hint = v2.TextAvailableCommandInput(hint=hint.hint, meta=hint.meta)
        commands.append(
            v2.CommandAvailableCommand(
                name=command.name, description=command.description, input=hint, meta=command.meta
            )
        )
    return v2.AvailableCommandsUpdateSessionUpdate(available_commands=commands, meta=update.meta)


# -- permission requests (T15-T18) -----------------------------------------------------------------
def permission_options_to_v1(options: Sequence[v2.PermissionOption]) -> list[v1.PermissionOption]:
    """Rows T15-T17, v2 → v1: the options (same shape); a kind v1 lacks raises :class:`VersionError`
    (v1's enum is closed and a client cannot guess whether it allows)."""
    out = []
    for option in options:
        if option.kind not in get_args(v1.PermissionOptionKind):
            raise VersionError(1, "permission option kind", f"v1 knows only {get_args(v1.PermissionOptionKind)}")
        out.append(_convert(option, v1.PermissionOption, 1, "permission option"))
    return out


def permission_to_v1(
    request: v2.RequestPermissionRequest, *, synthetic_id: str, tool_call_titled: bool = True
) -> tuple[v1.ToolCallSessionUpdate | None, v1.RequestPermissionRequest]:
    """Rows T15-T17, v2 → v1: ``(tool_call to send first or None, the v1 request)``.

    v1 asks about a tool call only (migration.mdx § Permission requests), so:

    - ``subject: tool_call`` (T15): ``toolCall`` is the subject's patch; the question (``title``) is
      its title only when the tool call has none yet (``tool_call_titled`` False), since in v1 it
      would replace the displayed title (design Q5);
    - ``subject: command`` (T16) with a ``toolCallId``: the request is about that tool call; without
      one, a synthetic ``tool_call`` (``synthetic_id``, kind ``execute``, title the command,
      ``rawInput {command, cwd}``) is created first;
    - no subject or an unknown one (T17): a synthetic ``tool_call`` titled with the question.

    ``title`` and ``description`` are always kept in the request's ``_meta`` (``acp-trio/title``,
    ``acp-trio/description``).
    """
    extra = {"title": request.title}
    if isinstance(request.description, str):
        extra["description"] = request.description
    meta = _meta_with(request.meta, extra)
    options = permission_options_to_v1(request.options)
    subject = request.subject
    synthetic: v1.ToolCallSessionUpdate | None = None
    if isinstance(subject, v2.ToolCallRequestPermissionSubject):
        call = tool_call_to_v1(subject.tool_call, create=False)
        if not tool_call_titled and not isinstance(subject.tool_call.title, str):
            call = attrs.evolve(call, title=request.title)
        tool_call = call
    elif isinstance(subject, v2.CommandRequestPermissionSubject) and isinstance(subject.tool_call_id, str):
        tool_call = v1.ToolCallUpdate(tool_call_id=subject.tool_call_id)
    else:
        raw: Any = UNSET
        kind: Any = "other"
        title = request.title
        if isinstance(subject, v2.CommandRequestPermissionSubject):
            title, kind, raw = subject.command, "execute", {"command": subject.command, "cwd": subject.cwd}
        synthetic = v1.ToolCallSessionUpdate(
            tool_call_id=synthetic_id,
            title=title,
            kind=kind,
            status="pending",
            raw_input=raw,
        )
        tool_call = v1.ToolCallUpdate(tool_call_id=synthetic_id)
    return synthetic, v1.RequestPermissionRequest(
        session_id=request.session_id, tool_call=tool_call, options=options, meta=meta
    )


def permission_to_v2(request: v1.RequestPermissionRequest) -> v2.RequestPermissionRequest:
    """Rows T15, v1 → v2: ``title`` is required in v2: the ``acp-trio/title`` a v1 request made by
    :func:`permission_to_v1` carries, else the tool call's title (where v1 agents put the question:
    migration.mdx § Permission requests), else ``"Allow this tool call?"``; the tool call is the
    ``tool_call`` subject."""
    meta = dict(request.meta) if isinstance(request.meta, dict) else {}
    title = meta.pop(META_PREFIX + "title", None)
    description = meta.pop(META_PREFIX + "description", UNSET)
    if not isinstance(title, str):
        title = _str_or(request.tool_call.title, "") or "Allow this tool call?"
    subject = v2.ToolCallRequestPermissionSubject(tool_call=tool_call_to_v2(request.tool_call))
    options = [_same(o, v2.PermissionOption) for o in request.options]
    return v2.RequestPermissionRequest(
        session_id=request.session_id,
        title=title,
        description=description,
        subject=subject,
        options=options,
        meta=meta or UNSET,  # only our keys: nothing left to send
    )


def outcome_to_v1(outcome: v2.RequestPermissionOutcome, options: Sequence[Any]) -> v1.RequestPermissionOutcome:
    """Row T18, v2 → v1: ``selected`` / ``cancelled`` the same; an outcome v1 lacks must not become
    an approval (migration.mdx § Permission requests: "MUST NOT treat it as approval"): the first
    ``reject_once`` / ``reject_always`` of ``options``, else ``cancelled``."""
    if isinstance(outcome, v2.SelectedRequestPermissionOutcome):
        return v1.SelectedRequestPermissionOutcome(option_id=outcome.option_id, meta=outcome.meta)
    if isinstance(outcome, v2.CancelledRequestPermissionOutcome):
        return v1.CancelledRequestPermissionOutcome()
    for option in options:
        if option.kind in ("reject_once", "reject_always"):
            return v1.SelectedRequestPermissionOutcome(option_id=option.option_id)
    return v1.CancelledRequestPermissionOutcome()


def outcome_to_v2(outcome: v1.RequestPermissionOutcome) -> v2.RequestPermissionOutcome:
    """Row T18, v1 → v2: the same outcome (v2's union is open: an unknown one stays unknown, and a
    v2 agent never treats it as approval)."""
    result: v2.RequestPermissionOutcome = _same(outcome, v2.RequestPermissionOutcome)
    return result


# -- config options and modes (L4, L10-L12) ---------------------------------------------------------
def _rename(data: Any, renames: Mapping[str, str]) -> Any:
    if isinstance(data, dict):
        return {renames.get(k, k): _rename(v, renames) if k == "options" else v for k, v in data.items()}
    if isinstance(data, list):
        return [_rename(x, renames) for x in data]
    return data


def config_option_to_v1(option: v2.SessionConfigOption) -> v1.SessionConfigOption:
    """Row L10, v2 → v1: the option with v1's field names (``configId`` → ``id``, a group's
    ``groupId`` → ``group``: migration.mdx § Consistent ID naming); :class:`VersionError` for an
    option type v1 lacks."""
    if _is_other(option):
        raise VersionError(1, "config option", f"v1 knows no option type {getattr(option, 'type', '?')!r}")
    data = _rename(converter.unstructure(option), {"configId": "id", "groupId": "group"})
    result: v1.SessionConfigOption = _structure(data, v1.SessionConfigOption)
    return result


def config_option_to_v2(option: v1.SessionConfigOption) -> v2.SessionConfigOption:
    """Row L10, v1 → v2: ``id`` → ``configId``, ``group`` → ``groupId``."""
    data = _rename(converter.unstructure(option), {"id": "configId", "group": "groupId"})
    result: v2.SessionConfigOption = _structure(data, v2.SessionConfigOption)
    return result


def config_options_to_v1(options: Sequence[v2.SessionConfigOption]) -> list[v1.SessionConfigOption]:
    """Row L10, v2 → v1, a whole list: options of a type v1 lacks are left out with a logged
    warning (the rest of the list stays usable; design Q6)."""
    out = []
    for option in options:
        if _is_other(option):
            log.warning("config option %r has a type v1 lacks; not sent to the v1 client", getattr(option, "type", "?"))
            continue
        out.append(config_option_to_v1(option))
    return out


def _mode_option(options: Sequence[Any]) -> Any:
    for option in options:
        if getattr(option, "category", None) == "mode" and getattr(option, "type", None) == "select":
            return option
    return None


def _choices(option: Any) -> list[Any]:
    out: list[Any] = []
    for item in option.options:
        out.extend(item.options if hasattr(item, "options") else [item])
    return out


def modes_from_config(options: Sequence[v2.SessionConfigOption]) -> v1.SessionModeState | None:
    """Row L4, v2 → v1: v1's ``modes`` from the ``category: "mode"`` select option (its choices,
    groups flattened, are ``availableModes``; its value ``currentModeId``); ``None`` without one.
    v1 session-config-options.mdx § Relationship to Session Modes: agents SHOULD send both."""
    option = _mode_option(options)
    if option is None:
        return None
    modes = [v1.SessionMode(id=c.value, name=c.name, description=c.description) for c in _choices(option)]
    return v1.SessionModeState(current_mode_id=option.current_value, available_modes=modes)


def mode_update_to_v1(options: Sequence[v2.SessionConfigOption]) -> v1.CurrentModeUpdateSessionUpdate | None:
    """Row L12, v2 → v1: the ``current_mode_update`` that goes with a ``config_option_update`` whose
    list has a mode option (``None`` without one)."""
    option = _mode_option(options)
    return None if option is None else v1.CurrentModeUpdateSessionUpdate(current_mode_id=option.current_value)


def config_update_to_v1(update: v2.ConfigOptionUpdateSessionUpdate) -> list[Any]:
    """Row L12, v2 → v1: ``config_option_update`` (v1 names), then ``current_mode_update`` when the
    list has a mode option (v1 keeps both in sync; migration.mdx § Session modes become config
    options: ``config_option_update`` replaced ``current_mode_update``)."""
    out: list[Any] = [
        v1.ConfigOptionUpdateSessionUpdate(config_options=config_options_to_v1(update.config_options), meta=update.meta)
    ]
    mode = mode_update_to_v1(update.config_options)
    if mode is not None:
        out.append(mode)
    return out


def modes_to_config(modes: v1.SessionModeState, config_id: str = "mode") -> v2.SelectSessionConfigOption:
    """Row L4/L11, v1 → v2: v1's ``modes`` as the ``category: "mode"`` select option
    (``config_id``, name ``"Mode"``) that v2 uses instead (migration.mdx § Session modes become
    config options)."""
    choices = [
        v2.SessionConfigSelectOption(value=m.id, name=m.name, description=m.description, meta=m.meta)
        for m in modes.available_modes
    ]
    return v2.SelectSessionConfigOption(
        config_id=config_id, name="Mode", category="mode", current_value=modes.current_mode_id, options=choices
    )


def current_mode_to_v2(
    update: v1.CurrentModeUpdateSessionUpdate, options: Sequence[v2.SessionConfigOption]
) -> v2.ConfigOptionUpdateSessionUpdate:
    """Row L12, v1 → v2: ``current_mode_update`` is a ``config_option_update`` carrying ``options``
    (the session's current list) with the mode option's value set; :class:`VersionError` when the
    list has no mode option (seed it from the session's ``modes``: :func:`modes_to_config`)."""
    option = _mode_option(options)
    if option is None:
        raise VersionError(
            2,
            "current_mode_update",
            "v2 has no modes and this session has no category 'mode' config option to carry it "
            "(migration.mdx § Session modes become config options)",
        )
    changed = [attrs.evolve(o, current_value=update.current_mode_id) if o is option else o for o in options]
    return v2.ConfigOptionUpdateSessionUpdate(config_options=changed, meta=update.meta)


# -- MCP server configs ----------------------------------------------------------------------------
def mcp_server_to_v2(server: v1.McpServer) -> v2.McpServer:
    """v1 → v2 (migration.mdx § MCP server configuration): a stdio config gains ``type: stdio``;
    ``http`` the same; ``sse`` (removed in v2) is kept as v2's catch-all ``{type: sse, ...}`` so an
    agent that still speaks it can, and others see an unknown transport."""
    if isinstance(server, v1.McpServerStdio):
        return v2.StdioMcpServer(
            name=server.name, command=server.command, args=server.args, env=_env(server.env, v2), meta=server.meta
        )
    if isinstance(server, v1.HttpMcpServer):
        headers = [v2.HttpHeader(name=h.name, value=h.value, meta=h.meta) for h in server.headers]
        return v2.HttpMcpServer(name=server.name, url=server.url, headers=headers, meta=server.meta)
    result: v2.McpServer = _same(server, v2.McpServer)
    return result


def _env(env: Any, version: Any) -> Any:
    return [version.EnvVariable(name=e.name, value=e.value, meta=e.meta) for e in env]


def mcp_server_to_v1(server: v2.McpServer) -> v1.McpServer:
    """v2 → v1: stdio without ``type`` and with ``args``/``env`` (required in v1, ``[]`` when
    omitted), ``http`` with ``headers``; a ``{type: sse}`` catch-all back to v1's ``sse``; another
    transport raises :class:`VersionError`."""
    if isinstance(server, v2.StdioMcpServer):
        args = server.args if isinstance(server.args, list) else []
        env = _env(server.env, v1) if isinstance(server.env, list) else []
        return v1.McpServerStdio(name=server.name, command=server.command, args=args, env=env, meta=server.meta)
    if isinstance(server, v2.HttpMcpServer):
        headers = (
            [v1.HttpHeader(name=h.name, value=h.value, meta=h.meta) for h in server.headers] if server.headers else []
        )
        return v1.HttpMcpServer(name=server.name, url=server.url, headers=headers, meta=server.meta)
    if getattr(server, "type", None) == "sse":
        result: v1.McpServer = _same(server, v1.McpServer)
        return result
    raise VersionError(1, "MCP server config", f"v1 knows no transport {getattr(server, 'type', '?')!r}")


# -- capabilities (L1, L2) -------------------------------------------------------------------------
def agent_caps_to_v1(caps: v2.AgentCapabilities, *, logout: bool = False) -> v1.AgentCapabilities:
    """Rows L1/L2, v2 → v1 (migration.mdx § Capability reorganization): prompt markers as booleans,
    ``mcp.http`` as ``mcpCapabilities.http`` (stdio is implied in v1; ``sse`` ``false``); v2's
    baseline (list, resume, close; resume from the start) as ``sessionCapabilities`` markers and
    ``loadSession: true``; ``delete`` and ``additionalDirectories`` when advertised; ``logout``:
    ``auth.logout`` (v2 has no marker: required with auth methods)."""
    session = caps.session if isinstance(caps.session, v2.SessionCapabilities) else None
    if session is None:
        return v1.AgentCapabilities(meta=caps.meta)
    prompt = session.prompt if isinstance(session.prompt, v2.PromptCapabilities) else v2.PromptCapabilities()
    mcp = session.mcp if isinstance(session.mcp, v2.McpCapabilities) else v2.McpCapabilities()

    def on(marker: Any) -> bool:
        return marker is not None and not isinstance(marker, UnsetType)

    return v1.AgentCapabilities(
        load_session=True,
        prompt_capabilities=v1.PromptCapabilities(
            image=on(prompt.image), audio=on(prompt.audio), embedded_context=on(prompt.embedded_context)
        ),
        mcp_capabilities=v1.McpCapabilities(http=on(mcp.http), sse=False),
        session_capabilities=v1.SessionCapabilities(
            list=v1.SessionListCapabilities(),
            resume=v1.SessionResumeCapabilities(),
            close=v1.SessionCloseCapabilities(),
            delete=v1.SessionDeleteCapabilities() if on(session.delete) else UNSET,
            additional_directories=(
                v1.SessionAdditionalDirectoriesCapabilities() if on(session.additional_directories) else UNSET
            ),
        ),
        auth=v1.AgentAuthCapabilities(logout=v1.LogoutCapabilities()) if logout else UNSET,
        meta=caps.meta,
    )


def agent_caps_to_v2(caps: v1.AgentCapabilities) -> v2.AgentCapabilities:
    """Rows L1/L2, v1 → v2: booleans as ``{}`` markers under ``session``; ``mcp.stdio`` always (v1
    agents run stdio servers), ``mcp.http`` when advertised (``sse`` has no v2 marker);
    ``delete``/``additionalDirectories`` when advertised.  The v2 baseline (list, resume, close)
    is implied by ``session`` whatever the v1 agent advertised: whoever serves it (the adapter)
    answers what the v1 agent lacks."""
    prompt = caps.prompt_capabilities if isinstance(caps.prompt_capabilities, v1.PromptCapabilities) else None
    mcp = caps.mcp_capabilities if isinstance(caps.mcp_capabilities, v1.McpCapabilities) else None
    sessions = caps.session_capabilities if isinstance(caps.session_capabilities, v1.SessionCapabilities) else None
    return v2.AgentCapabilities(
        session=v2.SessionCapabilities(
            prompt=v2.PromptCapabilities(
                image=v2.PromptImageCapabilities() if prompt and prompt.image is True else UNSET,
                audio=v2.PromptAudioCapabilities() if prompt and prompt.audio is True else UNSET,
                embedded_context=(
                    v2.PromptEmbeddedContextCapabilities() if prompt and prompt.embedded_context is True else UNSET
                ),
            ),
            mcp=v2.McpCapabilities(
                stdio=v2.McpStdioCapabilities(), http=v2.McpHttpCapabilities() if mcp and mcp.http is True else UNSET
            ),
            delete=v2.SessionDeleteCapabilities()
            if sessions and sessions.delete is not None and not isinstance(sessions.delete, UnsetType)
            else UNSET,
            additional_directories=(
                v2.SessionAdditionalDirectoriesCapabilities()
                if sessions
                and sessions.additional_directories is not None
                and not isinstance(sessions.additional_directories, UnsetType)
                else UNSET
            ),
        ),
        meta=caps.meta,
    )


def client_caps_to_v1(
    caps: v2.ClientCapabilities, *, fs: bool = False, terminal: bool = False
) -> v1.ClientCapabilities:
    """Rows L1, v2 → v1: ``elicitation`` the same; ``fs`` / ``terminal`` offered only when whoever
    speaks v1 answers them itself (``fs``, ``terminal``: the adapter's batteries), since a v2
    client has neither (migration.mdx § Client file system and terminal execution removed)."""
    elicitation = (
        _convert(caps.elicitation, v1.ElicitationCapabilities, 1, "elicitation capabilities")
        if isinstance(caps.elicitation, v2.ElicitationCapabilities)
        else UNSET
    )
    return v1.ClientCapabilities(
        fs=v1.FileSystemCapabilities(read_text_file=True, write_text_file=True) if fs else UNSET,
        terminal=True if terminal else UNSET,
        elicitation=elicitation,
        meta=caps.meta,
    )


def client_caps_to_v2(caps: v1.ClientCapabilities) -> v2.ClientCapabilities:
    """Rows L1, v1 → v2: ``elicitation`` the same; ``fs`` and ``terminal`` dropped (v2 has neither:
    migration.mdx § Client file system and terminal execution removed)."""
    elicitation = (
        _same(caps.elicitation, v2.ElicitationCapabilities)
        if isinstance(caps.elicitation, v1.ElicitationCapabilities)
        else UNSET
    )
    return v2.ClientCapabilities(elicitation=elicitation, meta=caps.meta)


# -- authentication methods (L3) and elicitation (T19) ----------------------------------------------
def auth_method_to_v1(method: v2.AuthMethod) -> v1.AuthMethod:
    """Row L3, v2 → v1: ``methodId`` → ``id`` (migration.mdx § Auth methods); an ``agent`` method has
    no ``type`` in v1; a ``terminal`` one's ``env`` list is v1's name → value object; another type
    raises :class:`VersionError`."""
    if isinstance(method, v2.AgentAuthMethod):
        return v1.AuthMethodAgent(
            id=method.method_id, name=method.name, description=method.description, meta=method.meta
        )
    if isinstance(method, v2.TerminalAuthMethod):
        env: Any = {e.name: e.value for e in method.env} if isinstance(method.env, list) else UNSET
        return v1.TerminalAuthMethod(
            id=method.method_id,
            name=method.name,
            description=method.description,
            args=method.args,
            env=env,
            meta=method.meta,
        )
    raise VersionError(1, "auth method", f"v1 knows no auth method type {getattr(method, 'type', '?')!r}")


def auth_method_to_v2(method: v1.AuthMethod) -> v2.AuthMethod:
    """Row L3, v1 → v2: ``id`` → ``methodId`` and the now required ``type`` (``agent`` for v1's
    untagged method); a ``terminal`` method's ``env`` object as a list (migration.mdx § Auth methods)."""
    if isinstance(method, v1.AuthMethodAgent):
        return v2.AgentAuthMethod(
            method_id=method.id, name=method.name, description=method.description, meta=method.meta
        )
    if isinstance(method, v1.TerminalAuthMethod):
        env: Any = (
            [v2.EnvVariable(name=k, value=v) for k, v in method.env.items()] if isinstance(method.env, dict) else UNSET
        )
        return v2.TerminalAuthMethod(
            method_id=method.id,
            name=method.name,
            description=method.description,
            args=method.args,
            env=env,
            meta=method.meta,
        )
    result: v2.AuthMethod = _same(method, v2.AuthMethod)
    return result


def elicitation_to_v1(request: v2.CreateElicitationRequest) -> v1.CreateElicitationRequest:
    """Row T19, v2 → v1: ``elicitation/create`` (``form`` / ``url``), the same shape in both;
    another mode raises :class:`VersionError`."""
    if _is_other(request):
        raise VersionError(1, "elicitation/create", f"v1 knows no mode {getattr(request, 'mode', '?')!r}")
    result: v1.CreateElicitationRequest = _convert(request, v1.CreateElicitationRequest, 1, "elicitation/create")
    return result


def elicitation_to_v2(request: v1.CreateElicitationRequest) -> v2.CreateElicitationRequest:
    """Row T19, v1 → v2: the same request."""
    result: v2.CreateElicitationRequest = _same(request, v2.CreateElicitationRequest)
    return result


# -- stop reasons and the end of a turn (T2, T3) ----------------------------------------------------
def stop_reason_to_v1(stop_reason: str) -> v1.PromptResponse:
    """Row T2, v2 → v1: the ``session/prompt`` answer; the five stop reasons are the same
    (migration.mdx § Session states), one v1 lacks (v2's enum is open) is ``end_turn`` with the
    original in ``_meta["acp-trio/stopReason"]`` (design Q3)."""
    if stop_reason in get_args(v1.StopReason):
        return v1.PromptResponse(stop_reason=stop_reason)  # type: ignore[arg-type]
    return v1.PromptResponse(stop_reason="end_turn", meta={META_PREFIX + "stopReason": stop_reason})


def idle_to_v1(update: v2.IdleStateUpdateSessionUpdate) -> v1.PromptResponse | None:
    """Rows T2/T3, v2 → v1: the idle ``state_update`` that ends foreground work as v1's
    ``session/prompt`` answer; ``None`` for an idle without a stop reason (nothing ended);
    ``stopReason: "error"`` raises the :class:`RequestError` that answers the v1 request instead."""
    reason = update.stop_reason
    if reason == "error":
        error = update.error
        if isinstance(error, v2.Error):
            data = converter.unstructure(error.data) if not isinstance(error.data, UnsetType) else None
            raise RequestError(int(error.code), error.message, data)
        raise RequestError(-32603, "the agent's turn ended with an error")
    if not isinstance(reason, str):
        return None
    return stop_reason_to_v1(reason)


def state_to_v1(update: Any) -> v1.PromptResponse | None:
    """Rows T2/T22, v2 → v1: a ``state_update``: ``running`` and ``requires_action`` (and unknown
    states) have no v1 form and need none (v1's pending ``session/prompt`` and pending permission
    request say it: migration.mdx § The new prompt lifecycle), so ``None``; ``idle``: :func:`idle_to_v1`."""
    if isinstance(update, v2.IdleStateUpdateSessionUpdate):
        return idle_to_v1(update)
    return None


def stop_reason_to_v2(response: v1.PromptResponse) -> v2.IdleStateUpdateSessionUpdate:
    """Row T2, v1 → v2: the answer as the idle ``state_update`` with its stop reason (an
    ``acp-trio/stopReason`` from :func:`stop_reason_to_v1` restores the original)."""
    meta = dict(response.meta) if isinstance(response.meta, dict) else {}
    reason = meta.pop(META_PREFIX + "stopReason", response.stop_reason)
    return v2.IdleStateUpdateSessionUpdate(stop_reason=reason, meta=meta or UNSET)


def error_to_v2(error: RequestError) -> v2.IdleStateUpdateSessionUpdate:
    """Row T3, v1 → v2: a v1 error answer to ``session/prompt`` as ``idle`` with ``stopReason:
    "error"`` and the error."""
    data: Any = UNSET if error.data is None else error.data
    return v2.IdleStateUpdateSessionUpdate(
        stop_reason="error", error=v2.Error(code=error.code, message=error.message, data=data)
    )


# -- same-shape updates (L13, T21, notices, compactions) --------------------------------------------
def same_shape_to_v1(update: Any) -> Any:
    """Rows L13/T21, v2 → v1: ``session_info_update``, ``usage_update``, ``notice``,
    ``compaction_update``, ``compaction_summary_chunk``: the same wire shape in both (migration.mdx
    § At a glance: "Unchanged"); the v1 class of the same name."""
    target = getattr(v1, type(update).__name__)
    return _convert(update, target, 1, f"session/update {update.session_update}")


def same_shape_to_v2(update: Any) -> Any:
    """Rows L13/T21, v1 → v2: as :func:`same_shape_to_v1`, the other way."""
    target = getattr(v2, type(update).__name__)
    return _convert(update, target, 2, f"session/update {update.session_update}")


# -- the table -------------------------------------------------------------------------------------
_A = "migration.mdx § At a glance"
ROWS: tuple[Row, ...] = (
    Row("L1", "agent capabilities", "agentCapabilities {promptCapabilities: booleans, mcpCapabilities {http, sse}}",
        "capabilities.session {prompt: {} markers, mcp {stdio, http}}",
        "mapped: sse not advertised in v2; stdio implied in v1", "§ Capability reorganization",
        ("test_agent_caps_to_v1", "test_agent_caps_to_v2")),
    Row("L1c", "client capabilities", "clientCapabilities {fs, terminal, elicitation}",
        "capabilities {elicitation}", "mapped: fs/terminal dropped in v2, offered to v1 only by a battery",
        "§ Client file system and terminal execution removed",
        ("test_client_caps_to_v1", "test_client_caps_to_v2")),
    Row("L2", "session baseline", "loadSession, sessionCapabilities {list, resume, close}",
        "implied by capabilities.session", "mapped: the v2 baseline advertised as v1 markers",
        "§ Baseline methods", ("test_agent_caps_to_v1",)),
    Row("L3", "auth methods", "authMethods [{id, name}] (agent: untagged)", "authMethods [{methodId, type, name}]",
        "renamed; type agent added / dropped; another type v1 lacks: VersionError", "§ Auth methods",
        ("test_auth_method_to_v1", "test_auth_method_to_v2")),
    Row("L4", "session modes", "modes {currentModeId, availableModes}",
        "configOptions [{category: mode, type: select}]", "mapped: the mode option is v1's modes and back",
        "§ Session modes become config options", ("test_modes_from_config", "test_modes_to_config")),
    Row("L10", "config options", "{id, ..., options: [{group, ...}]}", "{configId, ..., options: [{groupId, ...}]}",
        "renamed; an option type v1 lacks: VersionError (left out of lists with a warning)",
        "§ Consistent ID naming",
        ("test_config_option_to_v1", "test_config_option_to_v2", "test_config_options_to_v1_leaves_out_unknown")),
    Row("L12", "mode change", "config_option_update + current_mode_update", "config_option_update",
        "mapped both ways; v1 → v2 without a mode option: VersionError", "§ Session modes become config options",
        ("test_config_update_to_v1", "test_current_mode_to_v2", "test_current_mode_to_v2_without_mode_option")),
    Row("L13", "session info, usage, notices", "session_info_update, usage_update", "the same", "same shape",
        _A, ("test_same_shape_to_v1", "test_same_shape_to_v2")),
    Row("L14", "slash commands", "available_commands_update, input {hint}",
        "available_commands_update, {type: command, input {type: text, hint}}",
        "mapped; another v2 input type: omitted on v1", "§ Slash commands",
        ("test_commands_to_v1", "test_commands_to_v2")),
    Row("M1", "MCP server configs", "stdio without type, args/env required; http; sse",
        "type required; args/env optional; sse removed", "mapped; sse kept as v2's catch-all; unknown → VersionError",
        "§ MCP server configuration", ("test_mcp_server_to_v1", "test_mcp_server_to_v2")),
    Row("T2", "stop reason", "session/prompt answer {stopReason}", "state_update idle {stopReason}",
        "an unknown v2 reason: v1 end_turn + _meta acp-trio/stopReason", "§ The new prompt lifecycle",
        ("test_stop_reason_to_v1", "test_idle_to_v1", "test_stop_reason_to_v2")),
    Row("T3", "turn error", "JSON-RPC error answering session/prompt", "idle {stopReason: error, error}",
        "mapped", "§ The new prompt lifecycle", ("test_idle_to_v1_error", "test_error_to_v2")),
    Row("T1", "user message acknowledgment", "- (the session/prompt request is the message)",
        "user_message {messageId, content}", "v1: nothing live; chunks on replay", "§ The new prompt lifecycle",
        ("test_message_to_v1",)),
    Row("T5", "message chunks", "agent_message_chunk {content, messageId?}", "agent_message_chunk {messageId, content}",
        "messageId generated for v2", "§ Message IDs are required", ("test_chunk_to_v1", "test_chunk_to_v2")),
    Row("T7", "whole-message upsert", "-", "agent_message {messageId, content}",
        "v1: chunks while the message is empty, else VersionError (V1View)", "§ Whole-message upserts",
        ("test_message_to_v1",)),
    Row("T8", "tool call creation", "tool_call", "first tool_call_update of an id", "mapped by first sight",
        "§ One upsert notification", ("test_tool_call_to_v1_create", "test_tool_call_to_v2")),
    Row("T11", "tool call content chunk", "tool_call_update {content: all so far}", "tool_call_content_chunk",
        "v1: the whole content re-sent (V1View accumulates)", "§ Streaming tool-call content",
        ("test_content_chunk_to_v1",)),
    Row("T9", "tool call patch", "tool_call_update (null: unchanged)", "tool_call_update (null: cleared)",
        "v2 null → v1 cleared value; v1 null → v2 omitted", "§ One upsert notification",
        ("test_tool_call_to_v1_clears", "test_tool_call_to_v2_replacing_tool_call")),
    Row("T10", "tool status", "pending, in_progress, completed, failed", "+ paused, cancelled, open",
        "cancelled → failed, paused/unknown → in_progress, + _meta acp-trio/status", "§ Tool calls",
        ("test_tool_status_to_v1", "test_tool_kind_to_v1")),
    Row("T12", "content", "{type: content, content}", "the same", "same shape; unknown block v1: VersionError",
        "§ Content blocks",
        ("test_content_to_v1", "test_content_to_v2", "test_tool_content_to_v1", "test_tool_content_to_v2")),
    Row("T13", "diff", "{type: diff, path, oldText?, newText}", "{type: diff, changes, patch: git_patch}",
        "exact from the author's texts; v2 → v1 without texts: exact for an added or deleted file "
        "(its patch holds the file), else a text item with the patch",
        "§ Diff content",
        ("test_diff_to_v1", "test_diff_to_v2", "test_diff_v1_to_v2", "test_diff_v2_to_v1",
         "test_diff_v2_to_v1_is_exact_for_an_added_or_deleted_file", "test_git_patch")),
    Row("T14", "display terminal", "-", "terminal content + terminal_update + terminal_output_chunk",
        "v1: a text item ($ command, output, [exit N])", "§ Agent-owned terminal display",
        ("test_terminal_to_v1",)),
    Row("T15", "permission on a tool call", "request_permission {toolCall, options}",
        "{title, description?, subject: tool_call, options}",
        "v1: title/description in _meta; title as tool title only if it has none", "§ Permission requests",
        ("test_permission_to_v1_tool_call", "test_permission_to_v2")),
    Row("T16", "permission on a command", "synthetic tool_call (execute) + request", "subject: command",
        "mapped by a synthetic tool call", "§ Permission requests", ("test_permission_to_v1_command",)),
    Row("T17", "permission without subject", "synthetic tool_call (other) + request", "no subject",
        "mapped by a synthetic tool call", "§ Permission requests", ("test_permission_to_v1_no_subject",)),
    Row("T18", "permission outcome", "selected / cancelled", "the same, open",
        "an unknown outcome is never approval (v1: a reject option, else cancelled)", "§ Permission requests",
        ("test_outcome_to_v1", "test_outcome_to_v2")),
    Row("T19", "elicitation", "elicitation/create {mode: form | url}", "the same",
        "same shape; another mode v1 lacks: VersionError", _A, ("test_elicitation_to_v1", "test_elicitation_to_v2")),
    Row("T20", "plans", "plan {entries}", "plan_update {plan: {type: items, planId, entries}}",
        "v1: every live plan's entries; cancelled → completed + _meta", "§ Plans",
        ("test_plan_to_v1", "test_plan_to_v2")),
    Row("T22", "foreground state", "- (the pending requests say it)", "state_update running / requires_action / idle",
        "v1: nothing for running / requires_action; idle is the prompt answer (T2)", "§ Session states",
        ("test_state_to_v1",)),
    Row("T23", "_meta", "_meta on the object", "_meta, patched by top-level key on upserts",
        "kept both ways; a v2 null clear is {} on v1", "§ Extensibility and forward compatibility",
        ("test_tool_call_to_v1_clears", "test_diff_v1_to_v2",
         "test_tool_call_rows_keep_unknown_fields_and_meta_both_ways")),
)  # fmt: skip

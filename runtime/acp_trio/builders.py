"""Builders for what an agent sends: content blocks, tool calls, plans, permission requests, session updates.

Plain functions with keyword arguments that return the generated ``acp_schema.v1`` objects, so agent
code never writes a raw dict and never spells a wire tag::

    from acp_trio import builders as b

    client = v1.ClientPeer(conn)
    await client.session_update(b.notification(session_id, b.agent_message("Reading the config...")))
    call = b.tool_call(b.new_tool_call_id(), "Reading configuration file", kind="read", locations=[path])
    await client.session_update(b.notification(session_id, call))
    await client.session_update(
        b.notification(session_id, b.tool_call_update(call.tool_call_id, status="completed", content=["3 files"]))
    )

or, for the tool call lifecycle, :class:`ToolCallReporter` (``start`` / ``update`` / ``request_permission`` /
``complete`` / ``fail``).

Conventions (all builders):

* Optional fields left at their default are **absent** on the wire (``acp_trio.UNSET``); passing
  ``None`` also leaves them absent, because for these fields the schema gives ``null`` and absence the
  same meaning.  Exceptions, where ``null`` means something else and so is sent as ``null``:
  ``raw_input`` / ``raw_output`` (any JSON value, ``None`` is JSON ``null``) and
  :func:`session_info` (``None`` clears the title / timestamp).
* Wherever a content block is expected a plain ``str`` is accepted and means a text block; wherever a
  list of tool call content is expected, a single item is accepted too, and a content block (or
  ``str``) is wrapped in a ``{"type": "content"}`` item.
* Bad input raises ``TypeError`` (wrong type) or ``ValueError`` (wrong value) naming the argument,
  e.g. ``ValueError("diff: path must be an absolute path, got 'src/a.py'")``.  Values are checked
  against the schema (``schema/v1/schema.json``) and the spec pages (``docs/protocol/v1/*.mdx``).
* Results are ordinary mutable attrs objects: set ``.meta`` on one to attach ``_meta``.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import math
import os
import secrets
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any, Final, Protocol, TypeAlias, get_args
from urllib.parse import urlsplit

from acp_schema import v1

from ._spec import UNSET, UnsetType

__all__ = [
    "PERMISSION_OPTION_KINDS",
    "PLAN_ENTRY_PRIORITIES",
    "PLAN_ENTRY_STATUSES",
    "TOOL_CALL_STATUSES",
    "TOOL_KINDS",
    "ContentLike",
    "PathLike",
    "SessionClient",
    "ToolCallContentLike",
    "ToolCallIds",
    "ToolCallReporter",
    "agent_message",
    "agent_thought",
    "audio_block",
    "available_command",
    "available_commands",
    "content_annotations",
    "current_mode",
    "diff",
    "embedded_blob_resource",
    "embedded_text_resource",
    "image_block",
    "location",
    "new_tool_call_id",
    "notification",
    "permission_option",
    "permission_options",
    "permission_request",
    "permission_tool_call",
    "plan",
    "plan_entry",
    "resource_link",
    "session_info",
    "terminal",
    "text_block",
    "tool_call",
    "tool_call_update",
    "tool_content",
    "user_message",
]

ContentLike: TypeAlias = str | v1.ContentBlock
"""A content block, or a ``str`` meaning a text block (``$defs/ContentBlock``)."""

ToolCallContentLike: TypeAlias = v1.ToolCallContent | str | v1.ContentBlock
"""Tool call content (``$defs/ToolCallContent``); a content block or ``str`` is wrapped as ``type: content``."""

PathLike: TypeAlias = str | os.PathLike[str]
"""A file path: ``str`` or ``pathlib.Path``; sent as a string."""

TOOL_KINDS: Final[tuple[v1.ToolKind, ...]] = get_args(v1.ToolKind)
"""The ``$defs/ToolKind`` values: ``read``, ``edit``, ``delete``, ``move``, ``search``, ``execute``, ``think``, ..."""
TOOL_CALL_STATUSES: Final[tuple[v1.ToolCallStatus, ...]] = get_args(v1.ToolCallStatus)
"""The ``$defs/ToolCallStatus`` values: ``pending``, ``in_progress``, ``completed``, ``failed``."""
PLAN_ENTRY_PRIORITIES: Final[tuple[v1.PlanEntryPriority, ...]] = get_args(v1.PlanEntryPriority)
"""The ``$defs/PlanEntryPriority`` values: ``high``, ``medium``, ``low``."""
PLAN_ENTRY_STATUSES: Final[tuple[v1.PlanEntryStatus, ...]] = get_args(v1.PlanEntryStatus)
"""The ``$defs/PlanEntryStatus`` values: ``pending``, ``in_progress``, ``completed``."""
PERMISSION_OPTION_KINDS: Final[tuple[v1.PermissionOptionKind, ...]] = get_args(v1.PermissionOptionKind)
"""The ``$defs/PermissionOptionKind`` values: ``allow_once``, ``allow_always``, ``reject_once``, ``reject_always``."""

_ROLES: Final[tuple[str, ...]] = get_args(v1.Role)
_UINT32_MAX: Final = 2**32 - 1
_INT64_MAX: Final = 2**63 - 1

# --- argument checks ---------------------------------------------------------------------------


def _str(value: object, where: str, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{where} must be a str, got {type(value).__name__}")
    if not empty and not value:
        raise ValueError(f"{where} must not be empty")
    return value


def _opt_str(value: object, where: str) -> str | UnsetType:
    return UNSET if value is None else _str(value, where)


def _choice(value: object, allowed: tuple[str, ...], where: str) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{where} must be one of {', '.join(map(repr, allowed))}; got {value!r}")


def _int(value: object, where: str, *, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where} must be an int, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise ValueError(f"{where} must be between {minimum} and {maximum}, got {value}")
    return value


def _abs_path(value: object, where: str) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{where} must be a str or os.PathLike[str], got {type(value).__name__}")
    # Absolute in POSIX ("/home/u/a.py") or Windows ("C:\\u\\a.py", "\\\\server\\share\\a.py") form:
    # the client, not this process, interprets the path.
    if not (PurePosixPath(value).is_absolute() or PureWindowsPath(value).is_absolute()):
        raise ValueError(f"{where} must be an absolute path, got {value!r}")
    return value


def _uri(value: object, where: str) -> str:
    value = _str(value, where)
    if not urlsplit(value).scheme:
        raise ValueError(f"{where} must be a URI with a scheme (e.g. 'file:///home/user/a.py'), got {value!r}")
    return value


def _mime(value: object, where: str) -> str:
    value = _str(value, where)
    if "/" not in value.strip("/"):
        raise ValueError(f"{where} must be a MIME type such as 'image/png', got {value!r}")
    return value


def _opt_mime(value: object, where: str) -> str | UnsetType:
    return UNSET if value is None else _mime(value, where)


def _base64(value: object, where: str) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, str):
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(
                f"{where}: a str must be base64 (standard alphabet, padded); pass bytes to encode"
            ) from None
        return value
    raise TypeError(f"{where} must be bytes (encoded for you) or a base64 str, got {type(value).__name__}")


def _timestamp(value: object, where: str) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{where} must be a timezone-aware datetime (ISO 8601 with an offset)")
        return value.isoformat()
    return _str(value, where, empty=False)


def _items(value: object, single: tuple[type, ...], where: str) -> list[Any]:
    """``value`` as a list: one item of a ``single`` type becomes ``[value]``; mappings are refused."""
    if isinstance(value, single):
        return [value]
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
        raise TypeError(f"{where} must be a list, got {type(value).__name__}")
    return list(value)


def _block(value: object, where: str) -> v1.ContentBlock:
    if isinstance(value, str):
        return v1.TextContentBlock(text=value)
    if isinstance(value, v1.ContentBlock):
        return value
    raise TypeError(f"{where} must be a str or a v1 content block (TextContentBlock, ...), got {type(value).__name__}")


def _annotations(value: object, where: str) -> v1.Annotations | UnsetType:
    if value is None:
        return UNSET
    if not isinstance(value, v1.Annotations):
        raise TypeError(f"{where} must be a v1.Annotations (see content_annotations()), got {type(value).__name__}")
    return value


# --- content blocks (docs/protocol/v1/content.mdx, $defs/ContentBlock) ---------------------------


def content_annotations(
    *,
    audience: Iterable[v1.Role] | None = None,
    priority: float | None = None,
    last_modified: str | datetime | None = None,
) -> v1.Annotations:
    """``$defs/Annotations`` for a content block (the MCP annotations).

    ``audience``: ``"user"`` / ``"assistant"`` values; ``priority``: 0.0 (least) to 1.0 (most
    important), the MCP range; ``last_modified``: ISO 8601 string or timezone-aware ``datetime``.
    Raises ``ValueError`` / ``TypeError`` naming the argument for values outside those.
    """
    result = v1.Annotations()
    if audience is not None:
        roles = _items(audience, (), "content_annotations: audience")
        for i, role in enumerate(roles):
            _choice(role, _ROLES, f"content_annotations: audience[{i}]")
        result.audience = roles
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int | float):
            raise TypeError(f"content_annotations: priority must be a number, got {type(priority).__name__}")
        if not (math.isfinite(priority) and 0.0 <= priority <= 1.0):
            raise ValueError(f"content_annotations: priority must be between 0.0 and 1.0, got {priority!r}")
        result.priority = float(priority)
    if last_modified is not None:
        result.last_modified = _timestamp(last_modified, "content_annotations: last_modified")
    return result


def text_block(text: str, *, annotations: v1.Annotations | None = None) -> v1.TextContentBlock:
    """A text block: ``{"type": "text", "text": ...}`` (content.mdx "Text Content"; Markdown allowed)."""
    return v1.TextContentBlock(
        text=_str(text, "text_block: text"), annotations=_annotations(annotations, "text_block: annotations")
    )


def image_block(
    data: bytes | str, mime_type: str, *, uri: str | None = None, annotations: v1.Annotations | None = None
) -> v1.ImageContentBlock:
    """An image block: ``{"type": "image", "mimeType": ..., "data": <base64>}`` (content.mdx "Image Content").

    ``data``: the raw image bytes (base64-encoded for you) or an already base64 ``str`` (checked).
    ``mime_type``: e.g. ``"image/png"``.  ``uri``: optional source URI.  In prompts this needs the
    ``image`` prompt capability (the runtime enforces it on send).
    """
    return v1.ImageContentBlock(
        data=_base64(data, "image_block: data"),
        mime_type=_mime(mime_type, "image_block: mime_type"),
        uri=UNSET if uri is None else _uri(uri, "image_block: uri"),
        annotations=_annotations(annotations, "image_block: annotations"),
    )


def audio_block(
    data: bytes | str, mime_type: str, *, annotations: v1.Annotations | None = None
) -> v1.AudioContentBlock:
    """An audio block: ``{"type": "audio", "mimeType": ..., "data": <base64>}`` (content.mdx "Audio Content").

    ``data``: raw bytes (base64-encoded for you) or a base64 ``str``; ``mime_type``: e.g. ``"audio/wav"``.
    """
    return v1.AudioContentBlock(
        data=_base64(data, "audio_block: data"),
        mime_type=_mime(mime_type, "audio_block: mime_type"),
        annotations=_annotations(annotations, "audio_block: annotations"),
    )


def resource_link(
    uri: str,
    name: str,
    *,
    mime_type: str | None = None,
    title: str | None = None,
    description: str | None = None,
    size: int | None = None,
    annotations: v1.Annotations | None = None,
) -> v1.ResourceLinkContentBlock:
    """A resource link: ``{"type": "resource_link", "uri": ..., "name": ...}`` (content.mdx "Resource Link").

    ``uri``: a URI with a scheme (``file:///...``); ``name``: human-readable name; ``size``: bytes
    (0 to 2**63-1).
    """
    return v1.ResourceLinkContentBlock(
        uri=_uri(uri, "resource_link: uri"),
        name=_str(name, "resource_link: name"),
        mime_type=_opt_mime(mime_type, "resource_link: mime_type"),
        title=_opt_str(title, "resource_link: title"),
        description=_opt_str(description, "resource_link: description"),
        size=UNSET if size is None else _int(size, "resource_link: size", minimum=0, maximum=_INT64_MAX),
        annotations=_annotations(annotations, "resource_link: annotations"),
    )


def embedded_text_resource(
    uri: str, text: str, *, mime_type: str | None = None, annotations: v1.Annotations | None = None
) -> v1.ResourceContentBlock:
    """An embedded text resource: ``{"type": "resource", "resource": {"uri", "text", "mimeType"?}}``.

    content.mdx "Embedded Resource" (``$defs/TextResourceContents``).  In prompts this needs the
    ``embeddedContext`` prompt capability.
    """
    return v1.ResourceContentBlock(
        resource=v1.TextResourceContents(
            uri=_uri(uri, "embedded_text_resource: uri"),
            text=_str(text, "embedded_text_resource: text"),
            mime_type=_opt_mime(mime_type, "embedded_text_resource: mime_type"),
        ),
        annotations=_annotations(annotations, "embedded_text_resource: annotations"),
    )


def embedded_blob_resource(
    uri: str, blob: bytes | str, *, mime_type: str | None = None, annotations: v1.Annotations | None = None
) -> v1.ResourceContentBlock:
    """An embedded binary resource: ``{"type": "resource", "resource": {"uri", "blob": <base64>, "mimeType"?}}``.

    ``blob``: raw bytes (base64-encoded for you) or a base64 ``str`` (``$defs/BlobResourceContents``).
    """
    return v1.ResourceContentBlock(
        resource=v1.BlobResourceContents(
            uri=_uri(uri, "embedded_blob_resource: uri"),
            blob=_base64(blob, "embedded_blob_resource: blob"),
            mime_type=_opt_mime(mime_type, "embedded_blob_resource: mime_type"),
        ),
        annotations=_annotations(annotations, "embedded_blob_resource: annotations"),
    )


# --- tool call content and locations (docs/protocol/v1/tool-calls.mdx) ---------------------------


def tool_content(block: ContentLike) -> v1.ContentToolCallContent:
    """Regular tool call content: ``{"type": "content", "content": <block>}`` (``str`` = text block)."""
    return v1.ContentToolCallContent(content=_block(block, "tool_content: block"))


def diff(path: PathLike, new_text: str, *, old_text: str | None = None) -> v1.DiffToolCallContent:
    """A diff: ``{"type": "diff", "path": ..., "oldText"?: ..., "newText": ...}`` (tool-calls.mdx "Diffs").

    ``path``: absolute path of the modified file (``ValueError`` otherwise); ``old_text``: the
    original content, ``None`` (absent on the wire) for a new file; ``new_text``: the content after.
    """
    return v1.DiffToolCallContent(
        path=_abs_path(path, "diff: path"),
        new_text=_str(new_text, "diff: new_text"),
        old_text=_opt_str(old_text, "diff: old_text"),
    )


def terminal(terminal_id: str) -> v1.TerminalToolCallContent:
    """Embed a terminal: ``{"type": "terminal", "terminalId": ...}`` (tool-calls.mdx "Terminals").

    ``terminal_id``: the id ``terminal/create`` returned; embed it before ``terminal/release``.
    """
    return v1.TerminalToolCallContent(terminal_id=_str(terminal_id, "terminal: terminal_id", empty=False))


def location(path: PathLike, *, line: int | None = None) -> v1.ToolCallLocation:
    """A followed location: ``{"path": ..., "line"?: ...}`` (tool-calls.mdx "Following the Agent").

    ``path``: absolute file path; ``line``: 1-based line number (1 to 2**32-1).
    """
    return v1.ToolCallLocation(
        path=_abs_path(path, "location: path"),
        line=UNSET if line is None else _int(line, "location: line (1-based)", minimum=1, maximum=_UINT32_MAX),
    )


def _tool_contents(value: object, where: str) -> list[v1.ToolCallContent]:
    items = _items(value, (str, *get_args(v1.ContentBlock), *get_args(v1.ToolCallContent)), where)
    result: list[v1.ToolCallContent] = []
    for i, item in enumerate(items):
        if isinstance(item, v1.ToolCallContent):
            result.append(item)
        else:
            result.append(v1.ContentToolCallContent(content=_block(item, f"{where}[{i}]")))
    return result


def _locations(value: object, where: str) -> list[v1.ToolCallLocation]:
    items = _items(value, (str, os.PathLike, v1.ToolCallLocation), where)
    return [
        item if isinstance(item, v1.ToolCallLocation) else v1.ToolCallLocation(path=_abs_path(item, f"{where}[{i}]"))
        for i, item in enumerate(items)
    ]


# --- tool calls --------------------------------------------------------------------------------


def _tool_call_fields(
    where: str,
    *,
    title: str | None,
    kind: v1.ToolKind | None,
    status: v1.ToolCallStatus | None,
    name: str | None,
    content: ToolCallContentLike | Iterable[ToolCallContentLike] | None,
    locations: PathLike | v1.ToolCallLocation | Iterable[PathLike | v1.ToolCallLocation] | None,
    raw_input: Any,
    raw_output: Any,
) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if title is not None:
        fields["title"] = _str(title, f"{where}: title")
    if kind is not None:
        _choice(kind, TOOL_KINDS, f"{where}: kind")
        fields["kind"] = kind
    if status is not None:
        _choice(status, TOOL_CALL_STATUSES, f"{where}: status")
        fields["status"] = status
    if name is not None:
        fields["name"] = _str(name, f"{where}: name")
    if content is not None:
        fields["content"] = _tool_contents(content, f"{where}: content")
    if locations is not None:
        fields["locations"] = _locations(locations, f"{where}: locations")
    if raw_input is not UNSET:
        fields["raw_input"] = raw_input
    if raw_output is not UNSET:
        fields["raw_output"] = raw_output
    return fields


def tool_call(
    tool_call_id: str,
    title: str,
    *,
    kind: v1.ToolKind | None = None,
    status: v1.ToolCallStatus | None = None,
    name: str | None = None,
    content: ToolCallContentLike | Iterable[ToolCallContentLike] | None = None,
    locations: PathLike | v1.ToolCallLocation | Iterable[PathLike | v1.ToolCallLocation] | None = None,
    raw_input: Any = UNSET,
    raw_output: Any = UNSET,
) -> v1.ToolCallSessionUpdate:
    """A new tool call: the ``tool_call`` session update (tool-calls.mdx "Creating", ``$defs/ToolCall``).

    ``tool_call_id``: unique within the session (see :func:`new_tool_call_id`); ``title``: what the
    tool is doing; ``kind``: a :data:`TOOL_KINDS` value (clients assume ``other`` when absent);
    ``status``: a :data:`TOOL_CALL_STATUSES` value (clients assume ``pending`` when absent);
    ``name``: programmatic tool name; ``content``: tool call content items (``str`` / content
    blocks are wrapped, one item needs no list); ``locations``: absolute paths or
    :func:`location` objects; ``raw_input`` / ``raw_output``: any JSON value.
    """
    return v1.ToolCallSessionUpdate(
        tool_call_id=_str(tool_call_id, "tool_call: tool_call_id", empty=False),
        **_tool_call_fields(
            "tool_call",
            title=_str(title, "tool_call: title"),
            kind=kind,
            status=status,
            name=name,
            content=content,
            locations=locations,
            raw_input=raw_input,
            raw_output=raw_output,
        ),
    )


def tool_call_update(
    tool_call_id: str,
    *,
    status: v1.ToolCallStatus | None = None,
    title: str | None = None,
    kind: v1.ToolKind | None = None,
    name: str | None = None,
    content: ToolCallContentLike | Iterable[ToolCallContentLike] | None = None,
    locations: PathLike | v1.ToolCallLocation | Iterable[PathLike | v1.ToolCallLocation] | None = None,
    raw_input: Any = UNSET,
    raw_output: Any = UNSET,
) -> v1.ToolCallUpdateSessionUpdate:
    """A change to a reported tool call: the ``tool_call_update`` session update (tool-calls.mdx "Updating").

    Only the fields passed are sent; ``content`` and ``locations`` *replace* the client's collections
    (``content=[]`` clears it).  Arguments as for :func:`tool_call`.
    """
    return v1.ToolCallUpdateSessionUpdate(
        tool_call_id=_str(tool_call_id, "tool_call_update: tool_call_id", empty=False),
        **_tool_call_fields(
            "tool_call_update",
            title=title,
            kind=kind,
            status=status,
            name=name,
            content=content,
            locations=locations,
            raw_input=raw_input,
            raw_output=raw_output,
        ),
    )


def permission_tool_call(
    tool_call_id: str,
    *,
    title: str | None = None,
    kind: v1.ToolKind | None = None,
    status: v1.ToolCallStatus | None = None,
    name: str | None = None,
    content: ToolCallContentLike | Iterable[ToolCallContentLike] | None = None,
    locations: PathLike | v1.ToolCallLocation | Iterable[PathLike | v1.ToolCallLocation] | None = None,
    raw_input: Any = UNSET,
    raw_output: Any = UNSET,
) -> v1.ToolCallUpdate:
    """The ``toolCall`` of a ``session/request_permission`` request (``$defs/ToolCallUpdate``).

    ``{"toolCallId": ...}`` plus the fields passed (tool-calls.mdx "Requesting Permission").
    Arguments as for :func:`tool_call`.
    """
    return v1.ToolCallUpdate(
        tool_call_id=_str(tool_call_id, "permission_tool_call: tool_call_id", empty=False),
        **_tool_call_fields(
            "permission_tool_call",
            title=title,
            kind=kind,
            status=status,
            name=name,
            content=content,
            locations=locations,
            raw_input=raw_input,
            raw_output=raw_output,
        ),
    )


_TOOL_CALL_FIELDS: Final = ("title", "kind", "status", "name", "content", "locations", "raw_input", "raw_output")


def _as_tool_call_update(value: object, where: str) -> v1.ToolCallUpdate:
    if isinstance(value, v1.ToolCallUpdate):
        return value
    if isinstance(value, str):
        return v1.ToolCallUpdate(tool_call_id=_str(value, where, empty=False))
    if isinstance(value, v1.ToolCallSessionUpdate | v1.ToolCallUpdateSessionUpdate):
        fields: dict[str, Any] = {}
        for field in _TOOL_CALL_FIELDS:
            field_value = getattr(value, field)
            if field_value is not UNSET:
                fields[field] = list(field_value) if isinstance(field_value, list) else field_value
        return v1.ToolCallUpdate(tool_call_id=value.tool_call_id, **fields)
    raise TypeError(
        f"{where} must be a tool call id (str), a v1.ToolCallUpdate (see permission_tool_call()) or a "
        f"tool_call / tool_call_update session update, got {type(value).__name__}"
    )


# --- permission (tool-calls.mdx "Requesting Permission", "Permission Options") -------------------

_STANDARD_OPTION_NAMES: Final[dict[str, str]] = {
    "allow_once": "Allow once",
    "allow_always": "Allow always",
    "reject_once": "Reject once",
    "reject_always": "Reject always",
}


def permission_option(option_id: str, name: str, kind: v1.PermissionOptionKind) -> v1.PermissionOption:
    """One choice offered to the user: ``{"optionId": ..., "name": ..., "kind": ...}`` (``$defs/PermissionOption``).

    ``option_id``: non-empty, unique within the request; ``name``: the label shown; ``kind``: a
    :data:`PERMISSION_OPTION_KINDS` value (a UI hint).
    """
    _choice(kind, PERMISSION_OPTION_KINDS, "permission_option: kind")
    return v1.PermissionOption(
        option_id=_str(option_id, "permission_option: option_id", empty=False),
        name=_str(name, "permission_option: name", empty=False),
        kind=kind,
    )


def permission_options(*kinds: v1.PermissionOptionKind) -> list[v1.PermissionOption]:
    """The standard options for ``kinds`` (default: all four, in the order allow once/always, reject once/always).

    Each option's id is its kind with ``-`` for ``_`` (``"allow-once"``, as in tool-calls.mdx) and
    its name ``"Allow once"``, ``"Allow always"``, ``"Reject once"`` or ``"Reject always"``.
    A repeated kind raises ``ValueError``.
    """
    chosen = kinds or PERMISSION_OPTION_KINDS
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"permission_options: kinds must not repeat, got {chosen!r}")
    options = []
    for i, kind in enumerate(chosen):
        _choice(kind, PERMISSION_OPTION_KINDS, f"permission_options: kinds[{i}]")
        options.append(
            v1.PermissionOption(option_id=kind.replace("_", "-"), name=_STANDARD_OPTION_NAMES[kind], kind=kind)
        )
    return options


def permission_request(
    session_id: str,
    tool_call: str | v1.ToolCallUpdate | v1.ToolCallSessionUpdate | v1.ToolCallUpdateSessionUpdate,
    options: Iterable[v1.PermissionOption],
) -> v1.RequestPermissionRequest:
    """The params of ``session/request_permission`` (tool-calls.mdx "Requesting Permission").

    ``tool_call``: the tool call id, a :func:`permission_tool_call` object, or the ``tool_call`` /
    ``tool_call_update`` session update already sent (its fields are copied, without ``_meta``).
    ``options``: at least one :class:`v1.PermissionOption` (:func:`permission_option`,
    :func:`permission_options`) with distinct ids; ``ValueError`` otherwise.
    """
    option_list = _items(options, (v1.PermissionOption,), "permission_request: options")
    if not option_list:
        raise ValueError("permission_request: options must offer at least one option")
    seen: set[str] = set()
    for i, option in enumerate(option_list):
        if not isinstance(option, v1.PermissionOption):
            raise TypeError(
                f"permission_request: options[{i}] must be a v1.PermissionOption (see permission_option()), "
                f"got {type(option).__name__}"
            )
        if option.option_id in seen:
            raise ValueError(f"permission_request: options[{i}] repeats option id {option.option_id!r}")
        seen.add(option.option_id)
    return v1.RequestPermissionRequest(
        session_id=_str(session_id, "permission_request: session_id", empty=False),
        tool_call=_as_tool_call_update(tool_call, "permission_request: tool_call"),
        options=option_list,
    )


# --- plans (docs/protocol/v1/agent-plan.mdx) -----------------------------------------------------


def plan_entry(
    content: str, *, priority: v1.PlanEntryPriority = "medium", status: v1.PlanEntryStatus = "pending"
) -> v1.PlanEntry:
    """One task of a plan: ``{"content": ..., "priority": ..., "status": ...}`` (``$defs/PlanEntry``).

    ``priority``: ``high`` / ``medium`` / ``low``; ``status``: ``pending`` / ``in_progress`` / ``completed``.
    """
    _choice(priority, PLAN_ENTRY_PRIORITIES, "plan_entry: priority")
    _choice(status, PLAN_ENTRY_STATUSES, "plan_entry: status")
    return v1.PlanEntry(content=_str(content, "plan_entry: content"), priority=priority, status=status)


def plan(entries: Iterable[v1.PlanEntry | str]) -> v1.PlanSessionUpdate:
    """The ``plan`` session update with the *complete* list of entries (agent-plan.mdx).

    The client replaces its whole plan with each one.  A ``str`` entry is ``plan_entry(str)``
    (medium priority, pending).
    """
    items = _items(entries, (), "plan: entries")
    result: list[v1.PlanEntry] = []
    for i, entry in enumerate(items):
        if isinstance(entry, str):
            result.append(plan_entry(entry))
        elif isinstance(entry, v1.PlanEntry):
            result.append(entry)
        else:
            raise TypeError(f"plan: entries[{i}] must be a v1.PlanEntry or a str, got {type(entry).__name__}")
    return v1.PlanSessionUpdate(entries=result)


# --- other session updates (docs/protocol/v1/prompt-turn.mdx, session-modes.mdx, slash-commands.mdx) ---


def agent_message(content: ContentLike, *, message_id: str | None = None) -> v1.AgentMessageChunkSessionUpdate:
    """A chunk of the agent's reply: the ``agent_message_chunk`` update (prompt-turn.mdx; ``str`` = text).

    ``message_id``: optional id shared by all chunks of one message.
    """
    return v1.AgentMessageChunkSessionUpdate(
        content=_block(content, "agent_message: content"), message_id=_opt_str(message_id, "agent_message: message_id")
    )


def agent_thought(content: ContentLike, *, message_id: str | None = None) -> v1.AgentThoughtChunkSessionUpdate:
    """A chunk of the agent's reasoning: the ``agent_thought_chunk`` update (arguments as :func:`agent_message`)."""
    return v1.AgentThoughtChunkSessionUpdate(
        content=_block(content, "agent_thought: content"), message_id=_opt_str(message_id, "agent_thought: message_id")
    )


def user_message(content: ContentLike, *, message_id: str | None = None) -> v1.UserMessageChunkSessionUpdate:
    """A chunk of the user's message (e.g. replaying history on ``session/load``): ``user_message_chunk``."""
    return v1.UserMessageChunkSessionUpdate(
        content=_block(content, "user_message: content"), message_id=_opt_str(message_id, "user_message: message_id")
    )


def current_mode(mode_id: str) -> v1.CurrentModeUpdateSessionUpdate:
    """The agent switched modes: ``{"sessionUpdate": "current_mode_update", "currentModeId": ...}``.

    The wire key is ``currentModeId`` as in the schema (``$defs/CurrentModeUpdate``); the example
    in session-modes.mdx spells it ``modeId``, which the schema does not accept.
    """
    return v1.CurrentModeUpdateSessionUpdate(current_mode_id=_str(mode_id, "current_mode: mode_id", empty=False))


def available_command(name: str, description: str, *, input_hint: str | None = None) -> v1.AvailableCommand:
    """One slash command: ``{"name": ..., "description": ..., "input"?: {"hint": ...}}`` (slash-commands.mdx).

    ``name`` without the leading ``/`` (``"web"``; ``ValueError`` otherwise); ``input_hint``: shown
    while the user has not typed the command's input yet (makes the command take input).
    """
    name = _str(name, "available_command: name", empty=False)
    if name.startswith("/"):
        raise ValueError(f"available_command: name must not start with '/', got {name!r}")
    return v1.AvailableCommand(
        name=name,
        description=_str(description, "available_command: description"),
        input=UNSET
        if input_hint is None
        else v1.AvailableCommandInput(hint=_str(input_hint, "available_command: input_hint")),
    )


def available_commands(commands: Iterable[v1.AvailableCommand]) -> v1.AvailableCommandsUpdateSessionUpdate:
    """The ``available_commands_update`` session update: the full current list (slash-commands.mdx).

    Items are :func:`available_command` objects with distinct names (``ValueError`` otherwise).
    """
    items = _items(commands, (v1.AvailableCommand,), "available_commands: commands")
    seen: set[str] = set()
    for i, command in enumerate(items):
        if not isinstance(command, v1.AvailableCommand):
            raise TypeError(
                f"available_commands: commands[{i}] must be a v1.AvailableCommand (see available_command()), "
                f"got {type(command).__name__}"
            )
        if command.name in seen:
            raise ValueError(f"available_commands: commands[{i}] repeats the name {command.name!r}")
        seen.add(command.name)
    return v1.AvailableCommandsUpdateSessionUpdate(available_commands=items)


def session_info(
    *, title: str | UnsetType | None = UNSET, updated_at: str | datetime | UnsetType | None = UNSET
) -> v1.SessionInfoUpdateSessionUpdate:
    """The ``session_info_update`` session update (``$defs/SessionInfoUpdate``); only the fields passed are sent.

    ``title``: the session's title, ``None`` to clear it (sent as ``null``); ``updated_at``: last
    activity, an ISO 8601 string or timezone-aware ``datetime``, ``None`` to clear it.
    """
    update = v1.SessionInfoUpdateSessionUpdate()
    if title is not UNSET:
        update.title = None if title is None else _str(title, "session_info: title")
    if updated_at is not UNSET:
        update.updated_at = None if updated_at is None else _timestamp(updated_at, "session_info: updated_at")
    return update


def notification(session_id: str, update: v1.SessionUpdate) -> v1.SessionNotification:
    """The params of ``session/update``: ``{"sessionId": ..., "update": <update>}`` (prompt-turn.mdx).

    ``update``: any session update built here (or a generated ``v1.*SessionUpdate``).
    """
    if not isinstance(update, v1.SessionUpdate):
        raise TypeError(
            f"notification: update must be a v1 session update (e.g. agent_message()), got {type(update).__name__}"
        )
    return v1.SessionNotification(session_id=_str(session_id, "notification: session_id", empty=False), update=update)


# --- tool call ids -------------------------------------------------------------------------------


def new_tool_call_id(prefix: str = "call") -> str:
    """A fresh random tool call id, ``"<prefix>_<16 hex digits>"`` (64 random bits: unique in practice)."""
    return f"{_str(prefix, 'new_tool_call_id: prefix', empty=False)}_{secrets.token_hex(8)}"


class ToolCallIds:
    """Sequential tool call ids: ``next(ids)`` gives ``"call_001"``, ``"call_002"``, ... (deterministic).

    Unique among the ids one instance hands out; use one instance per session (or per agent).
    ``prefix``: non-empty; ``start``: the first number (>= 0).
    """

    def __init__(self, prefix: str = "call", *, start: int = 1) -> None:
        self.prefix = _str(prefix, "ToolCallIds: prefix", empty=False)
        self._counter = itertools.count(_int(start, "ToolCallIds: start", minimum=0, maximum=_INT64_MAX))

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        return f"{self.prefix}_{next(self._counter):03d}"


# --- the tool call lifecycle -------------------------------------------------------------------


class SessionClient(Protocol):
    """What :class:`ToolCallReporter` needs from the client proxy; ``v1.ClientPeer(conn)`` has it."""

    async def session_update(self, params: v1.SessionNotification) -> None:
        """Send a ``session/update`` notification."""
        ...

    async def session_request_permission(
        self, params: v1.RequestPermissionRequest, *, timeout: float | None = None
    ) -> v1.RequestPermissionResponse:
        """Send ``session/request_permission`` and return the client's answer."""
        ...


class ToolCallReporter:
    """Reports one tool call of one session: ``start``, then any ``update`` / ``request_permission``,
    then ``complete`` or ``fail``.

    ::

        tc = ToolCallReporter(client, session_id, "Reading configuration file", kind="read", locations=[path])
        await tc.start()                                   # tool_call, status pending
        option = await tc.request_permission()             # None: the turn was cancelled
        if option is None or option.kind.startswith("reject"):
            await tc.fail("Not allowed")
        else:
            await tc.update(status="in_progress")
            await tc.complete(["Found 3 configuration files"])

    ``client``: a ``v1.ClientPeer`` (or anything with its ``session_update`` /
    ``session_request_permission``); ``tool_call_id``: default :func:`new_tool_call_id`.  Other
    arguments as for :func:`tool_call`; they go into the ``tool_call`` update that :meth:`start` sends.
    Calling ``update`` / ``request_permission`` / ``complete`` / ``fail`` before ``start``, or
    ``start`` twice, raises ``RuntimeError``.  ``status`` is the last status reported (``None``
    before ``start``).
    """

    def __init__(
        self,
        client: SessionClient,
        session_id: str,
        title: str,
        *,
        kind: v1.ToolKind | None = None,
        name: str | None = None,
        tool_call_id: str | None = None,
        locations: PathLike | v1.ToolCallLocation | Iterable[PathLike | v1.ToolCallLocation] | None = None,
        raw_input: Any = UNSET,
    ) -> None:
        self.client = client
        self.session_id = _str(session_id, "ToolCallReporter: session_id", empty=False)
        self.tool_call_id = new_tool_call_id() if tool_call_id is None else tool_call_id
        # Checked now so that a bad argument fails at construction, not at start().
        self._initial = tool_call(
            self.tool_call_id, title, kind=kind, name=name, locations=locations, raw_input=raw_input
        )
        self.title = self._initial.title
        self.kind: v1.ToolKind | None = kind
        self.status: v1.ToolCallStatus | None = None

    async def _send(self, update: v1.SessionUpdate) -> None:
        await self.client.session_update(v1.SessionNotification(session_id=self.session_id, update=update))

    def _require_started(self, method: str) -> None:
        if self.status is None:
            raise RuntimeError(f"ToolCallReporter.{method}: call start() first (tool call {self.tool_call_id!r})")

    async def start(
        self,
        *,
        status: v1.ToolCallStatus = "pending",
        content: ToolCallContentLike | Iterable[ToolCallContentLike] | None = None,
    ) -> None:
        """Send the ``tool_call`` update (with ``status``, default ``pending``, and optional ``content``)."""
        if self.status is not None:
            raise RuntimeError(f"ToolCallReporter.start: tool call {self.tool_call_id!r} was already started")
        _choice(status, TOOL_CALL_STATUSES, "ToolCallReporter.start: status")
        update = self._initial
        update.status = status
        if content is not None:
            update.content = _tool_contents(content, "ToolCallReporter.start: content")
        await self._send(update)
        self.status = status

    async def update(
        self,
        *,
        status: v1.ToolCallStatus | None = None,
        title: str | None = None,
        kind: v1.ToolKind | None = None,
        content: ToolCallContentLike | Iterable[ToolCallContentLike] | None = None,
        locations: PathLike | v1.ToolCallLocation | Iterable[PathLike | v1.ToolCallLocation] | None = None,
        raw_input: Any = UNSET,
        raw_output: Any = UNSET,
    ) -> None:
        """Send a ``tool_call_update`` with the fields passed (see :func:`tool_call_update`)."""
        self._require_started("update")
        update = tool_call_update(
            self.tool_call_id,
            status=status,
            title=title,
            kind=kind,
            content=content,
            locations=locations,
            raw_input=raw_input,
            raw_output=raw_output,
        )
        await self._send(update)
        if status is not None:
            self.status = status
        if title is not None:
            self.title = title
        if kind is not None:
            self.kind = kind

    async def request_permission(
        self, options: Iterable[v1.PermissionOption] | None = None, *, timeout: float | None = None
    ) -> v1.PermissionOption | None:
        """Ask ``session/request_permission`` for this tool call; return the option the user chose.

        ``options``: default :func:`permission_options` (all four standard ones).  The request's
        ``toolCall`` carries the id, the current title and the kind.  Returns ``None`` when the
        client answered ``cancelled`` (the turn is being cancelled) or with an outcome this version
        does not know.  Raises ``ValueError`` if the client selected an option id that was not
        offered; errors of the request itself propagate (``RequestError``, ``RequestTimeout``...).
        """
        self._require_started("request_permission")
        request = permission_request(
            self.session_id,
            permission_tool_call(self.tool_call_id, title=self.title, kind=self.kind),
            permission_options() if options is None else options,
        )
        offered = request.options
        response = await self.client.session_request_permission(request, timeout=timeout)
        outcome = response.outcome
        if not isinstance(outcome, v1.SelectedRequestPermissionOutcome):
            return None
        for option in offered:
            if option.option_id == outcome.option_id:
                return option
        raise ValueError(f"the client selected option id {outcome.option_id!r}, which was not offered")

    async def complete(
        self, content: ToolCallContentLike | Iterable[ToolCallContentLike] | None = None, *, raw_output: Any = UNSET
    ) -> None:
        """Send ``tool_call_update`` with status ``completed`` (and ``content`` / ``raw_output`` when passed)."""
        self._require_started("complete")
        await self.update(status="completed", content=content, raw_output=raw_output)

    async def fail(
        self, content: ToolCallContentLike | Iterable[ToolCallContentLike] | None = None, *, raw_output: Any = UNSET
    ) -> None:
        """Send ``tool_call_update`` with status ``failed`` (and ``content`` / ``raw_output`` when passed)."""
        self._require_started("fail")
        await self.update(status="failed", content=content, raw_output=raw_output)

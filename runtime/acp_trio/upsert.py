"""ACP v2 upsert semantics: apply a patch (an update object) to the current state of an entity.

ACP v2 reports messages, tool calls, terminals, compactions and session info as *upserts*: an
update names an entity by its id, creates it when the id is new, and otherwise patches it.  This
module is the one place those rules live; it knows no ACP type by name and works on any attrs
objects, so the same helpers serve ``acp_schema.v2``, ``v2_unstable`` and the state classes of
:mod:`acp_trio.session_state`.

The rules (``docs/protocol/v2/migration.mdx``, "Updates are upserts"; the schema's descriptions of
``ToolCallUpdate``, ``UserMessage``, ``TerminalUpdate``, ``SessionInfoUpdate``, ``CompactionUpdate``):

- **omitted** (the patch field is ``UNSET``): the current value is unchanged;
- **null** (``None``): the value is *cleared*: set to the field's cleared value, ``None`` unless
  the caller names another (a tool call's ``kind`` resets to ``"other"``, ``status`` to
  ``"pending"``, ``content``/``locations`` to ``[]``; see ``cleared``);
- **a value** replaces the current one; a list replaces the whole collection (it is copied, so
  later appends never touch the patch object), and ``[]`` therefore clears it like ``null``;
- **chunks append**: :func:`append_item` adds one item (a message chunk's ``ContentBlock``, a
  ``tool_call_content_chunk``'s ``ToolCallContent``) to the current list, whether that list came
  from a whole update or from earlier chunks; a later whole value replaces everything;
- **``_meta``** (the attribute ``meta``) is patched *by top-level key* (:func:`patch_mapping`):
  omitted leaves it, ``null`` clears it (``None``), an object sets each of its keys, and a key whose
  value is ``null`` is removed; nested objects are not merged (schema: "Metadata Patches");
- **``extra_fields``** (wire fields the schema does not define) follow the same three-state rule
  per key, since v2 gives every upsert field those semantics: a key the patch lacks is unchanged,
  a ``null`` removes it, any other value replaces it.  They are kept only when the current object
  has an ``extra_fields`` dict;
- union tags (``sessionUpdate``, ``type``, ...) are never copied, and patch fields the current
  object has no attribute for are ignored.

Chunk-scoped ``_meta`` (on ``*_chunk`` updates) never patches stored metadata: :func:`append_item`
does not look at it.  Fields whose schema says "omitted and ``null`` are equivalent" are not
patches (they are snapshots); callers do not route them through :func:`apply_patch`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, MutableMapping
from typing import Any, TypeVar, cast

import attrs

from ._spec import UNSET, FieldSpec, UnsetType

__all__ = [
    "append_item",
    "apply_patch",
    "patch_fields",
    "patch_mapping",
    "patch_value",
    "upsert",
]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

_EXTRA = "extra_fields"


def patch_value(current: V, patch: V | UnsetType | None, *, cleared: V) -> V:
    """One field's three-state patch: ``UNSET`` keeps ``current``, ``None`` gives ``cleared``, a value replaces.

    A list value is copied.
    """
    if patch is UNSET:
        return current
    if patch is None:
        return cast(V, _fresh(cleared))
    return cast(V, _fresh(patch))


def patch_mapping(
    stored: Mapping[str, Any] | None, patch: Mapping[str, Any] | UnsetType | None
) -> dict[str, Any] | None:
    """Patch a ``_meta``-like mapping by top-level key and return the result (a new dict, or ``None``).

    ``patch`` ``UNSET``: ``stored`` unchanged (copied); ``None``: cleared (``None``); a mapping:
    ``stored`` (or ``{}``) with each key of ``patch`` set, or removed when its value is ``None``.
    Nested values replace, they are not merged.
    """
    if patch is UNSET:
        return dict(stored) if stored is not None else None
    if patch is None:
        return None
    result = dict(stored) if stored is not None else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def patch_fields(patch: object) -> list[str]:
    """The attribute names of ``patch`` (an attrs object) that carry patch values: every field
    except union tags and ``extra_fields``, in declaration order."""
    if not attrs.has(type(patch)):
        raise TypeError(f"expected an attrs object (a generated ACP type), got {type(patch).__name__}")
    names: list[str] = []
    for field in _fields_of(patch):
        spec = field.metadata.get("acp")
        if field.name == _EXTRA or field.metadata.get("acp_extra") or (isinstance(spec, FieldSpec) and spec.tag):
            continue
        names.append(field.name)
    return names


def apply_patch(
    current: T,
    patch: object,
    *,
    cleared: Mapping[str, Any] | None = None,
    merge: Collection[str] = ("meta",),
    only: Collection[str] | None = None,
    skip: Collection[str] = (),
) -> T:
    """Apply ``patch`` to ``current`` in place with the upsert rules (module docstring) and return ``current``.

    ``current``: an attrs object (a state entry or a generated ACP object); ``patch``: an attrs
    object whose fields share ``current``'s attribute names (e.g. a ``tool_call_update``).

    - ``cleared``: ``{attribute: value}`` a ``null`` sets (default ``None``; lists are copied);
    - ``merge``: attributes patched by top-level key (:func:`patch_mapping`), default ``("meta",)``;
    - ``only``: apply only these attributes; ``skip``: never apply these (e.g. a field the caller
      folds itself, or the id it looked the entity up by).

    ``extra_fields`` of the patch are patched into ``current.extra_fields`` key by key when
    ``current`` has that dict.  Raises ``TypeError`` when either object is not an attrs instance.
    """
    if not attrs.has(type(current)):
        raise TypeError(f"expected an attrs object as the current state, got {type(current).__name__}")
    targets = {field.name for field in _fields_of(current)}
    clear = cleared or {}
    for name in patch_fields(patch):
        if name not in targets or name in skip or (only is not None and name not in only):
            continue
        value = getattr(patch, name)
        if value is UNSET:
            continue
        if name in merge:
            setattr(current, name, patch_mapping(getattr(current, name), value))
        elif value is None:
            setattr(current, name, _fresh(clear.get(name)))
        else:
            setattr(current, name, _fresh(value))
    extra = getattr(patch, _EXTRA, None)
    if extra and _EXTRA in targets and _EXTRA not in skip:
        setattr(current, _EXTRA, patch_mapping(getattr(current, _EXTRA), extra) or {})
    return current


def append_item(current: T, name: str, item: Any) -> T:
    """A chunk: append ``item`` to the list ``current.<name>`` (a missing, ``None`` or ``UNSET``
    list starts empty) and return ``current``."""
    items = getattr(current, name)
    if not isinstance(items, list):
        items = []
        setattr(current, name, items)
    items.append(item)
    return current


def upsert(
    store: MutableMapping[K, T],
    key: K,
    patch: object,
    create: Callable[[], T],
    *,
    cleared: Mapping[str, Any] | None = None,
    merge: Collection[str] = ("meta",),
    only: Collection[str] | None = None,
    skip: Collection[str] = (),
) -> tuple[T, bool]:
    """Get ``store[key]`` (or ``create()`` and store it: fields the patch omits keep the new
    object's defaults) and :func:`apply_patch` ``patch`` to it; return ``(entity, created)``."""
    entity = store.get(key)
    created = entity is None
    if entity is None:
        entity = store[key] = create()
    apply_patch(entity, patch, cleared=cleared, merge=merge, only=only, skip=skip)
    return entity, created


def _fields_of(obj: object) -> tuple[attrs.Attribute[Any], ...]:
    fields: tuple[attrs.Attribute[Any], ...] = attrs.fields(cast(Any, type(obj)))
    return fields


def _fresh(value: Any) -> Any:
    """A list is copied (state never shares a list with a patch or a default); anything else as is."""
    return list(value) if isinstance(value, list) else value

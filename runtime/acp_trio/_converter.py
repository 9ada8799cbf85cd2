"""The converter: one cattrs mechanism behind every ACP decode and encode, driven by field metadata.

Contract: ``AcpConverter`` (and the shared instance ``converter``) structures JSON-compatible
Python values into the generated attrs classes and unions of any ``acp_schema`` variant and
unstructures them back, exactly:

* wire names come from ``FieldSpec.wire``; a field absent on the wire is ``UNSET`` and stays
  absent on encode; an explicit ``null`` stays ``None`` where the schema admits it;
* wire fields a class does not define are kept in ``extra_fields`` and re-encoded;
* tagged unions dispatch on the ``__acp_tags__`` of their members (nested tags included, a member
  without tags is the one chosen when the tag is missing); an unknown tag decodes to the member
  with ``__acp_catchall__`` and re-encodes verbatim;
* ``x-deserialize-default-on-error``: a value that fails to decode leaves the field ``UNSET`` and
  its raw value in ``extra_fields`` (so a relay re-encodes it unchanged);
  ``x-deserialize-skip-invalid-items``: invalid list items are dropped;
  ``x-deserialize-default-on-null``: ``null`` becomes the schema default (``[]`` for lists);
* any other failure raises one ``DecodeError`` naming the JSON path and the expected type.

It knows no ACP type by name: everything per type comes from generated metadata.  Hooks are
compiled lazily, per type, on first use; a class's hook compiles the hooks of the classes it
contains only when a value of theirs first comes by (an ``initialize`` at start-up compiles the
few classes its message carries, not the 50 it could).

A class's hook has fast paths for the common shapes, and they learn from the values that come: the
members of a tagged union field (``SessionNotification.update``, and that update's ``content``)
are decoded and encoded inline, in the parent's own compiled code, once ``_LEARN_AFTER`` (8) of
its values have come (up to ``_MAX_INLINE`` members per field, ``_MAX_DEPTH`` levels).  A
streamed ``agent_message_chunk`` is then one generated function each way instead of three.
Learning a member recompiles the parent's hook (about 1 ms, a few times per hook); the fast paths
decide exactly as the full path does (``tests/test_converter_fast_paths.py``), anything they do
not cover goes to it.
"""

from __future__ import annotations

import copy
import functools
import itertools
import linecache
import re
import types
from collections.abc import Callable
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import attrs
import cattrs
import orjson

from ._spec import EXTRA, NO_DEFAULT, UNSET, FieldSpec, UnsetType

__all__ = ["AcpConverter", "DecodeError", "converter", "dumps", "loads", "value_or_default"]

T = TypeVar("T")
_MISSING: Any = object()
_NoneType = type(None)
_counter = itertools.count()
_MAX_SHAPES = 16
"""Shapes (key tuples) a class's compiled structure hook specializes at most (see ``_shape_dispatch``)."""
_MAX_INLINE = 4
"""Members of a tagged union a compiled hook's fast path inlines at most, per field (see ``_site``)."""
_MAX_INLINED = 12
"""Members a compiled hook's fast path inlines at most, in all its fields and levels."""
_MAX_DEPTH = 3
"""Levels of tagged unions a compiled hook's fast path inlines at most."""
_LEARN_AFTER = 8
"""Values of a union member a field must see before its parent's fast path inlines the member."""
_MEMBER_NAMES = re.compile(r"_cls|_(?:tag|lit|tb|k|s)(\d+)")
"""The names of a compiled structure hook's globals its fast path uses (see ``_member_ns``)."""
_UNSTRUCTURE_NAMES = re.compile(r"_(?:u|bc)(\d+)")
"""The names of a compiled unstructure hook's globals its fast path uses (see ``_unstructure_site``)."""


class DecodeError(ValueError):
    """A value that does not match its ACP type.

    ``path``: the location in the decoded value, as a tuple of object keys (str) and list
    indexes (int); ``json_path`` renders it as ``$.prompt[1].type``.  ``expected``: the expected
    type, in schema terms.  ``value``: the offending value (``None`` when a field is missing).
    """

    def __init__(self, expected: str, value: Any, path: tuple[str | int, ...] = (), problem: str | None = None):
        self.expected = expected
        self.value = value
        self._path = list(path)
        self.problem = problem
        super().__init__(expected)

    @property
    def path(self) -> tuple[str | int, ...]:
        return tuple(self._path)

    @property
    def json_path(self) -> str:
        out = "$"
        for seg in self._path:
            out += f"[{seg}]" if isinstance(seg, int) else f".{seg}"
        return out

    def at(self, seg: str | int) -> DecodeError:
        """Prefix the path with ``seg`` (a field's wire name or a list index) and return the error:
        how a decoder names where in the message the failure is, as the error travels up."""
        self._path.insert(0, seg)
        return self

    def __str__(self) -> str:
        if self.problem:
            return f"{self.json_path}: {self.problem} (expected {self.expected})"
        got = repr(self.value)
        if len(got) > 80:
            got = got[:77] + "..."
        return f"{self.json_path}: expected {self.expected}, got {got}"


def _bad(expected: str, v: Any) -> DecodeError:
    return DecodeError(expected, v)


def _missing(wire: str, expected: str) -> DecodeError:
    return DecodeError(expected, None, (wire,), problem="required field is missing")


def is_acp_class(t: Any) -> bool:
    return isinstance(t, type) and attrs.has(t) and any("acp_extra" in a.metadata for a in attrs.fields(t))


def _union_args(t: Any) -> tuple[Any, ...] | None:
    origin = get_origin(t)
    if origin is Union or isinstance(t, types.UnionType):
        return get_args(t)
    return None


def _is_union(t: Any) -> bool:
    return _union_args(t) is not None


def _core(t: Any) -> Any:
    """The annotation without ``None`` and ``UnsetType``."""
    args = _union_args(t)
    if args is None:
        return t
    rest = [a for a in args if a is not _NoneType and a is not UnsetType]
    if len(rest) == 1:
        return rest[0]
    return Union[tuple(rest)]  # noqa: UP007 - built dynamically


def _leaves(t: Any) -> list[Any]:
    args = _union_args(t)
    if args is None:
        return [t]
    out: list[Any] = []
    for a in args:
        out += _leaves(a)
    return out


def _is_plain(t: Any) -> bool:
    return t in (str, int, float, bool, dict, Any, _NoneType) or get_origin(t) in (Literal, list, dict)


# kinds of inline checks for scalar field types
_STR, _INT, _FLOAT, _BOOL, _ANY, _OBJ = "str", "int", "float", "bool", "any", "obj"


def _scalar_kind(t: Any) -> str | None:
    if t is str:
        return _STR
    if t is int:
        return _INT
    if t is float:
        return _FLOAT
    if t is bool:
        return _BOOL
    if t is Any or t is object:
        return _ANY
    if t is dict or (get_origin(t) is dict and get_args(t)[1] is Any):
        return _OBJ
    if get_origin(t) is list and get_args(t) and get_args(t)[0] is Any:
        return None
    return None


# per scalar kind: the inline test that rejects a value (spliced into compiled hooks) and the JSON type name
_CHECK = {
    _STR: ("v.__class__ is not str", "string"),
    _INT: ("v.__class__ is not int", "integer"),
    _FLOAT: ("v.__class__ is not float and v.__class__ is not int", "number"),
    _BOOL: ("v.__class__ is not bool", "boolean"),
    _OBJ: ("v.__class__ is not dict", "object"),
}
# the same tests as functions, for hooks that are closures rather than compiled code
_REJECTS: dict[str, Callable[[Any], bool]] = {
    _STR: lambda v: v.__class__ is not str,
    _INT: lambda v: v.__class__ is not int,
    _FLOAT: lambda v: v.__class__ is not float and v.__class__ is not int,
    _BOOL: lambda v: v.__class__ is not bool,
    _OBJ: lambda v: v.__class__ is not dict,
}


class AcpConverter(cattrs.Converter):
    """A cattrs converter for the generated ACP types (every variant), compiled lazily per type.

    ``structure(data, T)`` -> an instance of ``T`` (raises ``DecodeError``);
    ``unstructure(obj)`` -> JSON-compatible dicts/lists/scalars.  Use ``dumps`` / ``loads``
    for bytes.
    """

    def __init__(self, *, fast_paths: bool = True) -> None:
        """``fast_paths``: give each compiled class hook its fast paths for the common shapes (see
        ``_fast_structure``, ``_shape_dispatch`` and the dict display in ``_struct_unstructure``);
        off, only the full paths (for tests that check the two agree)."""
        super().__init__()
        self._fast_paths = fast_paths
        self._s: dict[Any, Callable[..., Any]] = {}
        self._u: dict[Any, Callable[[Any], Any]] = {}
        self.register_structure_hook_factory(is_acp_class, lambda t: self.structure_fn(t))
        self.register_unstructure_hook_factory(is_acp_class, lambda t: self.unstructure_fn(t))
        self.register_structure_hook_factory(_is_union, lambda t: self.structure_fn(t))
        # scalars, Literal aliases, lists and dicts too: cattrs' own hooks would coerce (5 -> "5") or raise
        # its own errors; every decode goes through the same strict rules and raises DecodeError
        self.register_structure_hook_factory(_is_plain, lambda t: self.structure_fn(t))
        for scalar in (str, int, float, bool):  # cattrs binds these by class, ahead of any factory
            self.register_structure_hook(scalar, self.structure_fn(scalar))
        self.register_unstructure_hook_factory(_is_union, lambda t: self.unstructure_fn(t))

    # -- public helpers --------------------------------------------------------------------------
    def structure_fn(self, t: Any) -> Callable[..., Any]:
        """A function ``(value, _type=None) -> T`` for any ACP annotation ``t`` (cached)."""
        fn = self._s.get(t)
        if fn is None:
            # a trampoline while building, so self-referential types compile
            cell: list[Callable[..., Any]] = []
            self._s[t] = lambda v, _t=None: cell[0](v)
            fn = self._build_structure(t)
            cell.append(fn)
            self._s[t] = fn
        return fn

    def unstructure_fn(self, t: Any) -> Callable[[Any], Any]:
        """A function ``(value) -> JSON-compatible value`` for annotation ``t`` (cached)."""
        fn = self._u.get(t)
        if fn is None:
            cell: list[Callable[[Any], Any]] = []
            self._u[t] = lambda v: cell[0](v)
            fn = self._build_unstructure(t)
            cell.append(fn)
            self._u[t] = fn
        return fn

    def _structure_later(self, t: Any, install: Callable[[Callable[..., Any]], None]) -> Callable[..., Any]:
        """``structure_fn(t)``, but an ACP class whose hook is not compiled yet is compiled on its first
        value: a stand-in takes its place until then and ``install``s the real hook where the caller
        keeps it (a compiled hook's globals, a tag table), so later values pay nothing extra."""
        return self._later(self._s, self.structure_fn, t, install)

    def _unstructure_later(self, t: Any, install: Callable[[Callable[[Any], Any]], None]) -> Callable[[Any], Any]:
        """``unstructure_fn(t)``, compiled on the first value for an ACP class (see ``_structure_later``)."""
        return self._later(self._u, self.unstructure_fn, t, install)

    @staticmethod
    def _later(
        cache: dict[Any, Callable[..., Any]],
        build: Callable[[Any], Callable[..., Any]],
        t: Any,
        install: Callable[[Callable[..., Any]], None],
    ) -> Callable[..., Any]:
        fn = cache.get(t)
        if fn is not None or not is_acp_class(t):
            return fn if fn is not None else build(t)

        def first_value(v: Any, *rest: Any) -> Any:
            real = build(t)
            install(real)
            return real(v, *rest)

        first_value.acp_build = functools.partial(build, t)  # type: ignore[attr-defined]  # see _resolved
        return first_value

    # -- structure -------------------------------------------------------------------------------
    def _build_structure(self, t: Any) -> Callable[..., Any]:
        if is_acp_class(t):
            return self._struct_structure(t)
        kind = _scalar_kind(t)
        if kind == _ANY:
            return lambda v, _t=None: v
        if kind is not None:
            check, expected = _REJECTS[kind], _CHECK[kind][1]

            def scalar(v: Any, _t: Any = None) -> Any:
                if check(v):
                    raise _bad(expected, v)
                return v

            return scalar
        if t is _NoneType or t is None:

            def none(v: Any, _t: Any = None) -> None:
                if v is not None:
                    raise _bad("null", v)

            return none
        origin = get_origin(t)
        if origin is Literal:
            # (type, value) pairs, so that True never matches Literal[1] nor 1 Literal[True]
            allowed = frozenset((type(x), x) for x in get_args(t))
            expected = " | ".join(repr(x) for x in get_args(t))

            def literal(v: Any, _t: Any = None) -> Any:
                try:
                    if (v.__class__, v) in allowed:
                        return v
                except TypeError:  # an unhashable value is never a literal
                    pass
                raise _bad(expected, v)

            return literal
        if origin is list:
            (item_t,) = get_args(t)
            return self._list_structure(item_t, skip_invalid=False)
        if origin is dict:
            _, val_t = get_args(t)
            val_fn: Callable[..., Any]

            def set_val_fn(fn: Callable[..., Any]) -> None:
                nonlocal val_fn
                val_fn = fn

            val_fn = self._structure_later(val_t, set_val_fn)

            def mapping(v: Any, _t: Any = None) -> Any:
                if v.__class__ is not dict:
                    raise _bad("object", v)
                out = {}
                for k, x in v.items():
                    try:
                        out[k] = val_fn(x)
                    except DecodeError as e:
                        raise e.at(k) from None
                return out

            return mapping
        if _is_union(t):
            return self._union_structure(t)
        if isinstance(t, type) and attrs.has(t):
            # a user's own attrs class (extension params and results): cattrs' generic hooks
            def user_class(v: Any, _t: Any = None) -> Any:
                try:
                    return self.structure(v, t)
                except Exception as exc:
                    problems = cattrs.transform_error(exc) if isinstance(exc, cattrs.BaseValidationError) else [exc]
                    raise DecodeError(t.__name__, v, problem="; ".join(map(str, problems))) from None

            return user_class
        raise TypeError(f"acp_trio.converter cannot structure {t!r}")

    def _list_structure(self, item_t: Any, skip_invalid: bool) -> Callable[..., Any]:
        kind = _scalar_kind(item_t)
        if kind == _ANY:

            def any_list(v: Any, _t: Any = None) -> Any:
                if v.__class__ is not list:
                    raise _bad("array", v)
                return v

            return any_list
        item_fn: Callable[..., Any]

        def set_item_fn(fn: Callable[..., Any]) -> None:
            nonlocal item_fn
            item_fn = fn

        item_fn = self._structure_later(item_t, set_item_fn)

        def lst(v: Any, _t: Any = None) -> Any:
            if v.__class__ is not list:
                raise _bad("array", v)
            out = []
            for i, x in enumerate(v):
                try:
                    out.append(item_fn(x))
                except DecodeError as e:
                    if skip_invalid:
                        continue
                    raise e.at(i) from None
            return out

        return lst

    def _union_structure(self, t: Any) -> Callable[..., Any]:
        leaves = _leaves(t)
        classes = [x for x in leaves if is_acp_class(x)]
        tagged = [c for c in classes if getattr(c, "__acp_tags__", None) or getattr(c, "__acp_catchall__", None)]
        others = [x for x in leaves if not is_acp_class(x)]
        expected = " | ".join(_type_name(x) for x in leaves)
        if tagged and not others:
            return self._tagged_structure(classes, expected)
        return self._trial_structure(leaves, expected)

    def _tagged_structure(self, classes: list[type], expected: str) -> Callable[..., Any]:
        root: dict[str, Any] = {"key": None, "values": {}, "other": None, "missing": []}
        for c in classes:
            tags: tuple[tuple[str, Any], ...] = getattr(c, "__acp_tags__", ())
            catchall: str | None = getattr(c, "__acp_catchall__", None)
            node = root
            for k, v in tags:
                if node["key"] is None:
                    node["key"] = k
                if node["key"] != k:
                    raise TypeError(f"union members disagree on the tag key: {node['key']!r} vs {k!r} ({c.__name__})")
                node = node["values"].setdefault(v, {"key": None, "values": {}, "other": None, "missing": []})
            if catchall is not None:
                if node["key"] is None:
                    node["key"] = catchall
                node["other"] = c
            elif not tags:
                root["missing"].append(c)
            else:
                node["leaf"] = c

        def compile_node(node: dict[str, Any]) -> Callable[[Any], Any]:
            key = node["key"]
            table: dict[Any, Callable[[Any], Any]] = {}
            for v, child in node["values"].items():
                if "leaf" in child:
                    table[v] = self._structure_later(child["leaf"], functools.partial(table.__setitem__, v))
                else:
                    table[v] = compile_node(child)
            other: Callable[..., Any] | None

            def set_other(fn: Callable[..., Any]) -> None:
                nonlocal other
                other = fn

            other = self._structure_later(node["other"], set_other) if node["other"] is not None else None
            missing = self._trial_structure(node["missing"], expected) if node["missing"] else None
            known = " | ".join(repr(v) for v in node["values"])

            def dispatch(d: Any, _t: Any = None) -> Any:
                if d.__class__ is not dict:
                    raise _bad(expected, d)
                tag = d.get(key, _MISSING)
                if tag is _MISSING:
                    if missing is not None:
                        return missing(d)
                    raise _missing(key, known)
                try:
                    fn = table.get(tag)
                except TypeError:  # an unhashable tag value
                    fn = None
                if fn is not None:
                    return fn(d)
                if other is not None and tag.__class__ is str:
                    return other(d)
                raise DecodeError(known, tag, (key,), problem=f"unknown tag {tag!r}")

            # what a compiled parent needs to pick the branch inline (see _struct_structure, _site)
            dispatch.acp_tag_key = key  # type: ignore[attr-defined]
            dispatch.acp_tag_table = table  # type: ignore[attr-defined]
            dispatch.acp_tag_classes = {  # type: ignore[attr-defined]
                v: child["leaf"] for v, child in node["values"].items() if "leaf" in child
            }
            return dispatch

        return compile_node(root)

    def _trial_structure(self, leaves: list[Any], expected: str) -> Callable[..., Any]:
        """Untagged unions: try the members that fit the JSON kind, best candidate first."""
        required = {
            x: {a.metadata["acp"].wire for a in attrs.fields(x) if "acp" in a.metadata and a.default is attrs.NOTHING}
            for x in leaves
            if is_acp_class(x)
        }

        def fits_fn(x: Any) -> Callable[[Any], bool]:
            if is_acp_class(x):
                req = frozenset(required[x])
                return lambda v: v.__class__ is dict and req <= v.keys()
            kind = _scalar_kind(x)
            if kind == _ANY:
                return lambda v: True
            if x is _NoneType:
                return lambda v: v is None
            if kind is not None:
                rejects = _REJECTS[kind]
                return lambda v: not rejects(v)
            origin = get_origin(x)
            if origin is Literal:
                allowed = frozenset((type(a), a) for a in get_args(x))
                return lambda v: v.__class__ in (str, int, bool) and (v.__class__, v) in allowed
            if origin is list:
                return lambda v: v.__class__ is list
            if origin is dict:
                return lambda v: v.__class__ is dict
            return lambda v: True

        # most specific first: members with more required fields are tried before looser ones
        table: list[list[Callable[[Any], Any]]] = []  # [fits, hook] per member
        for x in sorted(leaves, key=lambda x: -len(required.get(x, ()))):
            entry = [fits_fn(x)]
            entry.append(self._structure_later(x, functools.partial(entry.__setitem__, 1)))
            table.append(entry)

        def trial(v: Any, _t: Any = None) -> Any:
            first_error: DecodeError | None = None
            for fits, fn in table:
                if fits(v):
                    try:
                        return fn(v)
                    except DecodeError as e:
                        first_error = first_error or e
            if first_error is not None:
                raise first_error
            raise _bad(expected, v)

        return trial

    def _struct_structure(self, cls: type) -> Callable[..., Any]:
        attrs.resolve_types(cls)
        ns: dict[str, Any] = {
            "_M": _MISSING,
            "DecodeError": DecodeError,
            "_bad": _bad,
            "_missing": _missing,
            "_cls": cls,
            "_copy": copy.deepcopy,
            "UNSET": UNSET,
        }
        lines = ["    if d.__class__ is not dict:"]
        lines.append(f"        raise _bad('object ({cls.__name__})', d)")
        lines.append("    n = 0")
        names: list[tuple[int, str]] = []
        lines.append("    raw = None")
        known: list[str] = []
        segments: list[tuple[int, bool, int]] = []  # (field index, required, first line) per field
        for i, a in _wire_fields(cls):
            spec: FieldSpec = a.metadata["acp"]
            w = spec.wire
            known.append(w)
            names.append((i, a.name))
            core = _core(a.type)
            required = _required(a, spec)
            segments.append((i, bool(required), len(lines)))
            # null is a value where the schema says so, where the field's type alias admits it
            # (`RequestId`), or where the field is unconstrained (`{}` schema -> Any)
            accepts_null = spec.nullable or _NoneType in _leaves(a.type) or _scalar_kind(core) == _ANY
            ind = "    "
            if required:
                exp = repr(_type_name(core))
                lines.append(f"    v = d.get({w!r}, _M)")
                lines.append("    if v is _M:")
                lines.append(f"        raise _missing({w!r}, {exp})")
                body_ind = ind
            else:  # most optional fields are absent: a membership test is their whole cost
                lines.append(f"    f{i} = UNSET")
                lines.append(f"    if {w!r} in d:")
                lines.append(f"        v = d[{w!r}]")
                body_ind = ind * 2
            lines.append(f"{body_ind}n += 1")
            # null handling
            if accepts_null or spec.default_on_null or not required:
                lines.append(f"{body_ind}if v is None:")
                if accepts_null:
                    lines.append(f"{body_ind}    f{i} = None")
                elif spec.default_on_null:
                    ns[f"_dflt{i}"] = self._default_of(core, spec)
                    lines.append(f"{body_ind}    f{i} = _copy(_dflt{i})")
                elif spec.default_on_error:
                    lines.append(f"{body_ind}    raw = raw or {{}}")
                    lines.append(f"{body_ind}    raw[{w!r}] = v")
                    if required:
                        lines.append(f"{body_ind}    f{i} = _copy(_dflt{i})")
                else:
                    lines.append(f"{body_ind}    raise _bad({_type_name(core)!r}, v).at({w!r})")
                lines.append(f"{body_ind}else:")
                vind = body_ind + ind
            else:
                vind = body_ind
            # value conversion

            if spec.default_on_error and required:
                # a required field has no "absent": it takes its default (every such field of the
                # schemas is an array: an empty one), as serde's default-on-error does
                ns[f"_dflt{i}"] = self._default_of(core, spec)

            def on_failure(
                error: str, vind: str = vind, w: str = w, spec: FieldSpec = spec, i: int = i, required: bool = required
            ) -> list[str]:
                """Code for a failed conversion: keep the raw value (default-on-error: in the extra
                fields; a required field takes its default) or re-raise at `w`."""
                if spec.default_on_error:
                    fallback = [f"{vind}    f{i} = _copy(_dflt{i})"] if required else []
                    return [f"{vind}    raw = raw or {{}}", f"{vind}    raw[{w!r}] = v", *fallback]
                return [f"{vind}    raise {error}.at({w!r}) from None"]

            if spec.tag and a.default is not attrs.NOTHING:
                ns[f"_tag{i}"] = a.default
                lines.append(f"{vind}if v != _tag{i} or v.__class__ is not str:")
                lines.append(f"{vind}    raise DecodeError({a.default!r}, v, ({w!r},), problem=f'unknown tag {{v!r}}')")
                lines.append(f"{vind}f{i} = v")
                continue
            kind = _scalar_kind(core)
            if kind == _ANY:
                lines.append(f"{vind}f{i} = v")
                continue
            if kind is not None:
                test, exp = _CHECK[kind]
                lines.append(f"{vind}if {test}:")
                if spec.default_on_error:
                    lines.append(f"{vind}    raw = raw or {{}}")
                    lines.append(f"{vind}    raw[{w!r}] = v")
                    lines.append(f"{vind}else:")
                    lines.append(f"{vind}    f{i} = v")
                else:
                    lines.append(f"{vind}    raise _bad({exp!r}, v).at({w!r})")
                    lines.append(f"{vind}f{i} = v")
                continue
            install = functools.partial(ns.__setitem__, f"_s{i}")  # the hook replaces its stand-in here
            if get_origin(core) is list and spec.skip_invalid_items:
                ns[f"_s{i}"] = self._list_structure(get_args(core)[0], skip_invalid=True)
            elif get_origin(core) is list and _scalar_kind(get_args(core)[0]) is None:
                # lists of structured items: a comprehension in the compiled code; find the bad index on failure
                ns[f"_s{i}"] = self._structure_later(get_args(core)[0], install)
                ns["_locate"] = _locate
                lines.append(f"{vind}if v.__class__ is not list:")
                lines.append(f"{vind}    raise _bad('array', v).at({w!r})")
                lines.append(f"{vind}try:")
                lines.append(f"{vind}    f{i} = [_s{i}(x) for x in v]")
                lines.append(f"{vind}except DecodeError:")
                lines += on_failure(f"_locate(_s{i}, v)")
                continue
            else:
                ns[f"_s{i}"] = self._structure_later(core, install)
            tag_table = getattr(ns[f"_s{i}"], "acp_tag_table", None)
            lines.append(f"{vind}try:")
            strings = _string_literals(core)
            if strings is not None:
                # a closed set of strings (a v1 enum): the member test here, the hook for its error
                ns[f"_lit{i}"] = strings
                lines.append(f"{vind}    f{i} = v if v.__class__ is str and v in _lit{i} else _s{i}(v)")
            elif tag_table is not None:
                # a tagged union: look the branch up here (string tags), the dispatcher does the rest
                ns[f"_k{i}"] = ns[f"_s{i}"].acp_tag_key
                ns[f"_tb{i}"] = tag_table
                lines.append(f"{vind}    t = v.get(_k{i}) if v.__class__ is dict else None")
                lines.append(f"{vind}    b = _tb{i}.get(t) if t.__class__ is str else None")
                lines.append(f"{vind}    f{i} = b(v) if b is not None else _s{i}(v)")
            else:
                lines.append(f"{vind}    f{i} = _s{i}(v)")
            lines.append(f"{vind}except DecodeError as e:")
            lines += on_failure("e")
        ns["_known"] = frozenset(known)
        fast_path: list[str] = []
        shape_path: list[str] = []
        inliner: _Inliner | None = None
        if self._fast_paths:
            fields = _wire_fields(cls)
            must = frozenset(i for i, is_required, _ in segments if is_required)
            inliner = _Inliner()
            fast_path = self._fast_structure(fields, must, ns, inliner)
            if len(must) < len(fields):  # objects may carry optional fields: specialize their shapes
                shape_path = self._shape_dispatch(cls, fields, must, ns)
        # Required fields first; optional ones are looked up only when the object has more keys
        # than the required fields (the common message carries few of its optional fields).
        bounds = [start for _, _, start in segments] + [len(lines)]
        head = lines[: bounds[0]] if segments else lines
        required_part: list[str] = []
        optional_part: list[str] = []
        optional_fields: list[int] = []
        for k, (i, is_required, start) in enumerate(segments):
            chunk = lines[start : bounds[k + 1]]
            if is_required:
                required_part += chunk
            else:
                optional_part += ["    " + line for line in chunk]
                optional_fields.append(i)
        lines = head + required_part
        if optional_fields:
            lines.append("    if n != len(d):")
            lines += optional_part
            lines.append("    else:")
            lines += [f"        f{i} = UNSET" for i in optional_fields]
        lines.append("    x = {}")
        lines.append("    if n != len(d) or raw:")
        lines.append("        x = {k: v for k, v in d.items() if k not in _known}")
        lines.append("        if raw:")
        lines.append("            x.update(raw)")
        # the generated __init__ only assigns; skipping the call saves a frame per object
        ns["_new"] = object.__new__
        lines.append("    o = _new(_cls)")
        for i, name in names:
            lines.append(f"    o.{name} = f{i}")
        lines.append("    o.extra_fields = x")
        lines.append("    return o")
        name = f"structure_{cls.__name__}"
        full_path = lines

        def source(fast: list[str]) -> str:
            return "\n".join([f"def {name}(d, _t=None):", *fast, *shape_path, *full_path]) + "\n"

        hook = self._compile(source(fast_path), ns, name)
        if inliner is not None:

            def relearn() -> None:
                # the fast path again, with the members learnt so far inlined; the hook keeps its
                # identity (parents, tag tables and caches hold it), its code is swapped
                hook.__code__ = self._compile(
                    source(self._fast_structure(fields, must, ns, inliner)), ns, name
                ).__code__

            inliner.relearn = relearn
        return hook

    def _fast_structure(
        self, fields: list[tuple[int, Any]], required: frozenset[int], ns: dict[str, Any], inliner: _Inliner
    ) -> list[str]:
        """The compiled hook's fast path: an object with its required keys and no other (what most
        messages are), each value of the right kind, is built without the checks and the bookkeeping
        of optional and unknown keys.  Anything else (a key missing, another key, a value of another
        kind, a nested value that does not fit) falls through to the paths after it, which then
        decode or reject it exactly as the full path would have.  Uses the names the full path put in
        ``ns``.  A tagged union's members are inlined as ``inliner`` learnt them (see ``_site``)."""
        fetch, rest, stores = self._fast_lines(fields, required, ns, "            ", inliner=inliner)
        body = fetch + rest
        lines = [f"    if d.__class__ is dict and len(d) == {len(required)}:"]
        if body:
            lines += ["        try:", *body]
            lines.append("        except (KeyError, TypeError, DecodeError, _FastMiss):")
            lines.append("            pass")
            lines.append("        else:")
            ind = "            "
        else:
            ind = "        "
        lines += [ind + store for store in [*stores, "return o"]]
        return lines

    def _shape_dispatch(
        self, cls: type, fields: list[tuple[int, Any]], required: frozenset[int], ns: dict[str, Any]
    ) -> list[str]:
        """The compiled hook's second fast path, for objects that carry optional fields too (a tool
        call with its title, kind and status): a function specialized to the object's keys, in their
        wire order, compiled the first time that shape comes (up to ``_MAX_SHAPES`` per class) and
        looked up by ``tuple(d)`` after that.  It fetches exactly those keys and makes the fast
        path's checks; it answers ``None`` when anything does not fit (and the full path decodes or
        rejects the value).  A shape with a key the class does not define, or without a required
        key, is not specialized."""
        by_wire = {a.metadata["acp"].wire: i for i, a in fields}
        shapes: dict[tuple[str, ...], Callable[[Any], Any] | bool] = {}

        def learn(d: dict[str, Any]) -> Callable[[Any], Any] | bool:
            if len(shapes) >= _MAX_SHAPES:
                return False
            key = tuple(d)
            present = {by_wire.get(k, -1) for k in key}
            fn: Callable[[Any], Any] | bool = False
            if -1 not in present and required <= present and len(present) > len(required):
                fetch, rest, stores = self._fast_lines(fields, present, ns, "        ")
                body = fetch + rest
                name = f"structure_{cls.__name__}_shape{len(shapes)}"
                lines = [f"def {name}(d):", "    try:", *body]
                lines += ["    except (KeyError, TypeError, DecodeError, _FastMiss):", "        return None"]
                lines += ["    " + store for store in [*stores, "return o"]]
                fn = self._compile("\n".join(lines) + "\n", ns, name)
            shapes[key] = fn
            return fn

        ns["_shapes"], ns["_learn"], ns["_tuple"] = shapes, learn, tuple
        return [
            "    if d.__class__ is dict:",
            "        s = _shapes.get(_tuple(d))",
            "        if s is None:",
            "            s = _learn(d)",
            "        if s:",
            "            o = s(d)",
            "            if o is not None:",
            "                return o",
        ]

    def _fast_lines(
        self,
        fields: list[tuple[int, Any]],
        present: frozenset[int] | set[int],
        ns: dict[str, Any],
        ind: str,
        *,
        p: str = "",
        src: str = "d",
        inliner: _Inliner | None = None,
        depth: int = 0,
        tag_checked: str | None = None,
    ) -> tuple[list[str], list[str], list[str]]:
        """The fast paths' code for an object (in local ``src``) whose keys are the wire names of the
        fields ``present`` (indexes into ``fields``): the lines that fetch each value (raising
        ``KeyError`` for a missing key), those that check (raising ``_FastMiss``) and convert them,
        indented by ``ind`` (none when there is nothing to fetch), and the lines that build the
        object in local ``{p}o`` (unindented).  ``p`` prefixes
        the locals and the ``ns`` names the code uses (an inlined member's are its site's, see
        ``_site``); ``tag_checked``: the wire name of the tag the site has fetched (in local
        ``{src}t``) and compared."""
        fetch: list[str] = []
        checks: list[str] = []
        convert: list[str] = []
        stores = [f"{p}o = _new({p}_cls)"]  # every field, in field order, as the full path assigns them
        for i, a in fields:
            if i not in present:
                stores.append(f"{p}o.{a.name} = UNSET")
                continue
            f = f"{p}f{i}"
            stores.append(f"{p}o.{a.name} = {f}")
            spec: FieldSpec = a.metadata["acp"]
            core = _core(a.type)
            if spec.tag and spec.wire == tag_checked:  # the site has fetched and compared it
                fetch.append(f"{ind}{f} = {src}t")
                checks.append(f"{f}.__class__ is not str")
                continue
            fetch.append(f"{ind}{f} = {src}[{spec.wire!r}]")
            if spec.tag and f"{p}_tag{i}" in ns:
                checks.append(f"{f} != {p}_tag{i} or {f}.__class__ is not str")
                continue
            kind = _scalar_kind(core)
            if kind == _ANY:
                continue
            if kind is not None:
                checks.append(_CHECK[kind][0].replace("v.", f"{f}."))
            elif f"{p}_lit{i}" in ns:
                checks.append(f"{f}.__class__ is not str or {f} not in {p}_lit{i}")
            elif f"{p}_tb{i}" in ns:  # a tagged union: the branch straight from the tag
                if inliner is None or depth >= _MAX_DEPTH:
                    convert.append(f"{ind}{f} = {p}_tb{i}[{f}[{p}_k{i}]]({f})")
                else:
                    convert += self._site(f, f"{p}_s{i}", f"{p}_k{i}", ns, ind, inliner, depth)
            elif get_origin(core) is list and not spec.skip_invalid_items and _scalar_kind(get_args(core)[0]) is None:
                # as the full path: ``_s{i}`` structures one item
                checks.append(f"{f}.__class__ is not list")
                convert.append(f"{ind}{f} = [{p}_s{i}(x) for x in {f}]")
            else:
                if not _required(a, spec):  # null in an optional field: the full path's rules
                    checks.append(f"{f} is None")
                convert.append(f"{ind}{f} = {p}_s{i}({f})")
        stores.append(f"{p}o.extra_fields = {{}}")
        ns["_FastMiss"], ns["_new"] = _FastMiss, object.__new__
        rest = [f"{ind}if {' or '.join(checks)}:", f"{ind}    raise _FastMiss"] if checks else []
        return fetch, rest + convert, stores

    def _site(
        self, f: str, dispatch: str, k: str, ns: dict[str, Any], ind: str, inliner: _Inliner, depth: int
    ) -> list[str]:
        """A tagged union's field in a fast path (a site; local ``f``, the union's hook
        ``ns[dispatch]``, its tag key ``ns[k]``), as lines that leave the decoded member in ``f``.
        The members ``inliner`` learnt there, each with the keys of the value it was learnt from,
        are decoded inline: one ``if`` on the tag and the key count, the member's fast path under
        it, no call.  Any other value goes through the site's table (``_lt_{f}``), whose entries
        learn the member from its values (see ``_Inliner.learners``) and are the member's hook after
        that, and so does an inlined member's object with other keys of the same count (a tool call
        update with its content instead of its status): the ``KeyError`` of its fetch sends it there."""
        lt = f"_lt_{f}"
        if lt not in ns:
            union = ns[dispatch]
            ns[lt] = inliner.learners(f, union.acp_tag_table, union.acp_tag_classes)
        lines = [f"{ind}{f}t = {f}[{k}]"]
        learnt = inliner.plan.get(f, {})
        for j, (tag, (member, present)) in enumerate(learnt.items()):
            q = f"{f}_{j}_"
            mfields = self._member_ns(member, present, q, ns)
            fetch, rest, stores = self._fast_lines(
                mfields, present, ns, ind + "        ", p=q, src=f, inliner=inliner, depth=depth + 1, tag_checked=ns[k]
            )
            lines.append(f"{ind}{'el' if j else ''}if {f}t == {tag!r} and len({f}) == {len(present)}:")
            lines += [f"{ind}    try:", *fetch, f"{ind}    except KeyError:", f"{ind}        {f} = {lt}[{f}t]({f})"]
            lines += [f"{ind}    else:", *rest]
            lines += [f"{ind}        {store}" for store in stores]
            lines.append(f"{ind}        {f} = {q}o")
        if learnt:
            lines.append(f"{ind}else:")
        lines.append(f"{ind}{'    ' if learnt else ''}{f} = {lt}[{f}t]({f})")
        return lines

    def _member_ns(self, cls: type, present: frozenset[int], q: str, ns: dict[str, Any]) -> list[tuple[int, Any]]:
        """Put in ``ns``, prefixed by ``q``, the names the fast path of ``cls``'s hook uses for the
        fields ``present`` (its class, tags, literal sets, tag tables and field hooks, taken from
        that hook's globals, a stand-in replaced by the hook it stands for); return its fields as
        ``_fast_lines`` takes them."""
        if f"{q}_cls" not in ns:
            _copy_names(self.structure_fn(cls), _MEMBER_NAMES, q, ns, present)
        return _wire_fields(cls)

    def _default_of(self, core: Any, spec: FieldSpec) -> Any:
        if spec.default is not NO_DEFAULT:
            return self.structure_fn(core)(copy.deepcopy(spec.default))
        if get_origin(core) is list:
            return []
        if get_origin(core) is dict:
            return {}
        return UNSET

    @staticmethod
    def _compile(src: str, ns: dict[str, Any], name: str) -> Callable[..., Any]:
        filename = f"<acp_trio generated {name} {next(_counter)}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        exec(compile(src, filename, "exec"), ns)
        fn: Callable[..., Any] = ns[name]
        return fn

    # -- unstructure -----------------------------------------------------------------------------
    def _build_unstructure(self, t: Any) -> Callable[[Any], Any]:
        if is_acp_class(t):
            return self._struct_unstructure(t)
        if _scalar_kind(t) is not None or t is _NoneType or get_origin(t) is Literal:
            return _identity
        origin = get_origin(t)
        if origin is list:
            (item_t,) = get_args(t)
            if self._is_identity(item_t):
                return _identity
            item_fn: Callable[[Any], Any]

            def set_item_fn(fn: Callable[[Any], Any]) -> None:
                nonlocal item_fn
                item_fn = fn

            item_fn = self._unstructure_later(item_t, set_item_fn)
            return lambda v: [item_fn(x) for x in v]
        if origin is dict:
            _, val_t = get_args(t)
            if self._is_identity(val_t):
                return _identity
            val_fn: Callable[[Any], Any]

            def set_val_fn(fn: Callable[[Any], Any]) -> None:
                nonlocal val_fn
                val_fn = fn

            val_fn = self._unstructure_later(val_t, set_val_fn)
            return lambda v: {k: val_fn(x) for k, x in v.items()}
        if _is_union(t):
            if all(self._is_identity(x) for x in _leaves(t)):
                return _identity
            by_class: dict[type, Callable[[Any], Any]] = {}

            def union(v: Any) -> Any:
                fn = by_class.get(v.__class__)
                if fn is None:
                    fn = self.unstructure_fn(v.__class__) if is_acp_class(v.__class__) else self.unstructure
                    by_class[v.__class__] = fn
                return fn(v)

            union.acp_by_class = by_class  # type: ignore[attr-defined]  # for compiled parents (inline lookup)
            return union
        return self.unstructure

    def _is_identity(self, t: Any) -> bool:
        if _scalar_kind(t) is not None or t is _NoneType or get_origin(t) is Literal:
            return True
        if get_origin(t) in (list, dict):
            return self._is_identity(get_args(t)[-1])
        if _is_union(t):
            return all(self._is_identity(x) for x in _leaves(t))
        return False

    def _struct_unstructure(self, cls: type) -> Callable[[Any], Any]:
        attrs.resolve_types(cls)
        ns: dict[str, Any] = {"UNSET": UNSET}
        name = f"unstructure_{cls.__name__}"
        for i, a in _wire_fields(cls):
            core = _core(a.type)
            if not self._is_identity(core):
                ns[f"_u{i}"] = fn = self._unstructure_later(core, functools.partial(ns.__setitem__, f"_u{i}"))
                by_class = getattr(fn, "acp_by_class", None)
                if by_class is not None:  # a union: the member's function straight from its cache
                    ns[f"_bc{i}"] = by_class
        full_path = [*self._unstructure_full(cls, "o", "", ns, "    "), "    return d"]
        if not self._fast_paths:
            return self._compile("\n".join([f"def {name}(o):", *full_path]) + "\n", ns, name)
        inliner = _Inliner()

        def source() -> str:
            # the fast path: when no optional field is set and there are no extra fields, one dict
            # display of the required fields (the same keys in the same order as the full path's),
            # with the union members learnt so far inlined
            absent, pre, display = self._unstructure_fast(cls, "o", "", ns, "        ", inliner, 0)
            fast = [f"    if {' and '.join(absent)}:", *pre, f"        return {{{', '.join(display)}}}"]
            return "\n".join([f"def {name}(o):", *fast, *full_path]) + "\n"

        hook = self._compile(source(), ns, name)

        def relearn() -> None:  # the hook keeps its identity, its code is swapped
            hook.__code__ = self._compile(source(), ns, name).__code__

        inliner.relearn = relearn
        return hook

    def _unstructure_full(self, cls: type, o: str, p: str, ns: dict[str, Any], ind: str) -> list[str]:
        """An unstructure hook's full path for an object of ``cls`` in local ``o``, as lines
        (indented by ``ind``) that leave its JSON object in local ``{p}d``: a display of the
        required fields before the first optional one, then a statement or two per field, then the
        extra fields.  ``p`` prefixes the locals and the ``ns`` names used (``_u{i}``: a field's
        function, ``_bc{i}``: a union field's functions by class)."""
        d, v = f"{p}d", f"{p}v"
        leading: list[str] = []
        body: list[str] = []
        for i, a in _wire_fields(cls):
            spec: FieldSpec = a.metadata["acp"]
            ident = f"{p}_u{i}" not in ns  # a scalar, a literal, a list or dict of them: as it is
            if f"{p}_bc{i}" in ns:  # a union: the member's function straight from its cache
                conv = f"({p}_bc{i}.get({v}.__class__) or {p}_u{i})({v})"
            else:
                conv = f"{p}_u{i}({v})"
            if _required(a, spec):
                if not body:  # no optional field yet
                    leading.append(
                        f"{spec.wire!r}: {o}.{a.name}"
                        if ident
                        else f"{spec.wire!r}: None if ({v} := {o}.{a.name}) is None else {conv}"
                    )
                elif ident:
                    body.append(f"{ind}{d}[{spec.wire!r}] = {o}.{a.name}")
                else:
                    body.append(f"{ind}{v} = {o}.{a.name}")
                    body.append(f"{ind}{d}[{spec.wire!r}] = None if {v} is None else {conv}")
                continue
            if ident:  # no local: an unset field (the common case) costs one attribute load and a test
                body.append(f"{ind}if {o}.{a.name} is not UNSET:")
                body.append(f"{ind}    {d}[{spec.wire!r}] = {o}.{a.name}")
            else:
                body.append(f"{ind}{v} = {o}.{a.name}")
                body.append(f"{ind}if {v} is not UNSET:")
                body.append(f"{ind}    {d}[{spec.wire!r}] = None if {v} is None else {conv}")
        x, k = f"{p}x", f"{p}k"
        return [
            f"{ind}{d} = {{{', '.join(leading)}}}",
            *body,
            f"{ind}{x} = {o}.extra_fields",
            f"{ind}if {x}:",
            f"{ind}    for {k}, {v} in {x}.items():",
            f"{ind}        if {k} not in {d}:",
            f"{ind}            {d}[{k}] = {v}",
        ]

    def _unstructure_fast(
        self, cls: type, o: str, p: str, ns: dict[str, Any], ind: str, inliner: _Inliner, depth: int
    ) -> tuple[list[str], list[str], list[str]]:
        """An unstructure hook's fast path for an object of ``cls`` in local ``o``: the conditions
        under which it applies (no optional field set, no extra fields), the lines to run first
        (indented by ``ind``: the union fields whose members are inlined, see ``_unstructure_site``)
        and the items of the dict display.  ``p`` prefixes the locals and the ``ns`` names used (an
        inlined member's are its site's)."""
        absent: list[str] = []
        pre: list[str] = []
        display: list[str] = []
        for i, a in _wire_fields(cls):
            spec: FieldSpec = a.metadata["acp"]
            if not _required(a, spec):
                absent.append(f"{o}.{a.name} is UNSET")
            elif f"{p}_u{i}" not in ns:  # a scalar, a literal, a list or dict of them: as it is
                display.append(f"{spec.wire!r}: {o}.{a.name}")
            elif f"{p}_bc{i}" not in ns:
                display.append(f"{spec.wire!r}: None if ({p}v{i} := {o}.{a.name}) is None else {p}_u{i}({p}v{i})")
            elif depth >= _MAX_DEPTH:
                call = f"({p}_bc{i}.get({p}v{i}.__class__) or {p}_u{i})({p}v{i})"
                display.append(f"{spec.wire!r}: None if ({p}v{i} := {o}.{a.name}) is None else {call}")
            else:
                pre += self._unstructure_site(f"{p}v{i}", f"{o}.{a.name}", f"{p}_u{i}", ns, ind, inliner, depth)
                display.append(f"{spec.wire!r}: {p}v{i}")
        absent.append(f"not {o}.extra_fields")
        return absent, pre, display

    def _unstructure_site(
        self, v: str, value: str, union: str, ns: dict[str, Any], ind: str, inliner: _Inliner, depth: int
    ) -> list[str]:
        """A union's field in an unstructure fast path (a site: ``value`` goes into local ``v``, the
        union's function is ``ns[union]``), as lines that leave the field's JSON value in ``v``: the
        classes ``inliner`` learnt there are encoded inline (their own fast path, or their full path
        when it does not apply); any other value goes through the site's table (``_lb_{v}``, the
        union's per-class functions), whose misses learn the class (``_lu_{v}``)."""
        lb, lu = f"_lb_{v}", f"_lu_{v}"
        if lb not in ns:
            ns[lb], ns[lu] = inliner.class_learner(v, ns[union])
        lines = [f"{ind}{v} = {value}", f"{ind}{v}c = {v}.__class__"]
        learnt = inliner.plan.get(v, {})
        for j, member in enumerate(learnt):
            q = f"{v}_{j}_"
            if f"{q}_cls" not in ns:
                ns[f"{q}_cls"] = member
                _copy_names(self.unstructure_fn(member), _UNSTRUCTURE_NAMES, q, ns)
            absent, pre, display = self._unstructure_fast(member, v, q, ns, ind + "        ", inliner, depth + 1)
            lines.append(f"{ind}{'el' if j else ''}if {v}c is {q}_cls:")
            lines.append(f"{ind}    if {' and '.join(absent)}:")
            lines += pre
            lines.append(f"{ind}        {v} = {{{', '.join(display)}}}")
            lines.append(f"{ind}    else:")
            lines += self._unstructure_full(member, v, q, ns, ind + "        ")
            lines.append(f"{ind}        {v} = {q}d")
        lines.append(f"{ind}{'el' if learnt else ''}if {v} is not None:")
        lines.append(f"{ind}    {v} = ({lb}.get({v}c) or {lu})({v})")
        return lines


def _wire_fields(cls: type) -> list[tuple[int, Any]]:
    """The fields of ACP class ``cls`` that are on the wire (all but ``extra_fields``), with their
    indexes among its attrs fields (what the compiled hooks name their locals and globals by)."""
    return [(i, a) for i, a in enumerate(attrs.fields(cls)) if not EXTRA.keys() & a.metadata.keys()]


def _required(a: Any, spec: FieldSpec) -> bool:
    """Whether the wire object must carry field ``a``: no default, or a union tag that is not optional."""
    return a.default is attrs.NOTHING or (spec.tag and not spec.tag_optional)


class _Inliner:
    """What one compiled hook's fast path inlines of the tagged unions in it (see
    ``AcpConverter._site`` and ``_unstructure_site``), learnt from the values that come.

    ``plan``: per site (the local a union's field is decoded or encoded in), the members inlined
    there, by tag (by class for an encode), in the order they reached ``_LEARN_AFTER`` values, each
    with its class and the field indexes that last value carried.  At most ``_MAX_INLINE`` members
    a site and ``_MAX_INLINED`` in all; sites are at most ``_MAX_DEPTH`` levels deep.
    ``relearn``: recompiles the hook's fast path from the plan.
    """

    def __init__(self) -> None:
        self.plan: dict[str, dict[Any, tuple[type, frozenset[int]]]] = {}
        self.relearn: Callable[[], None] = lambda: None
        self.inlined = 0

    def learners(self, site: str, table: dict[Any, Callable[[Any], Any]], classes: dict[Any, type]) -> dict[Any, Any]:
        """The site's dispatch table: per tag of ``table``, a function that decodes the tag's values
        with the union's own hook and counts them; at the ``_LEARN_AFTER``-th it takes the hook's
        place, and has the member inlined with that value's keys (when it is a class, the value had
        no unknown key and the budget allows).  A tag that comes once (a session's available
        commands) takes no place from one that streams."""
        learners: dict[Any, Callable[[Any], Any]] = {}

        def learner(tag: Any) -> Callable[[Any], Any]:
            seen = 0

            def early_value(v: Any) -> Any:
                nonlocal seen
                out = table[tag](v)
                seen += 1
                if seen >= _LEARN_AFTER:
                    learners[tag] = table[tag]  # (the member's hook by now, no longer a stand-in)
                    member = classes.get(tag)
                    if member is not None and not out.extra_fields:
                        self._learn(site, tag, member, v)
                return out

            return early_value

        for tag in table:
            learners[tag] = learner(tag)
        return learners

    def class_learner(
        self, site: str, union: Callable[[Any], Any]
    ) -> tuple[dict[type, Callable[[Any], Any]], Callable[[Any], Any]]:
        """An unstructure site's table (per class, the union's function for it) and the function
        for a class not in it yet: it encodes the value with the union's function and counts the
        class's values; at the ``_LEARN_AFTER``-th it adds the class to the table and has it
        inlined (an ACP class, while the budget allows)."""
        table: dict[type, Callable[[Any], Any]] = {}
        by_class: dict[type, Callable[[Any], Any]] = union.acp_by_class  # type: ignore[attr-defined]
        seen: dict[type, int] = {}

        def early_value(v: Any) -> Any:
            out = union(v)
            cls = v.__class__
            seen[cls] = count = seen.get(cls, 0) + 1
            if count >= _LEARN_AFTER:
                table[cls] = by_class[cls]
                if is_acp_class(cls):
                    self._add(site, cls, cls, frozenset())  # (an encode inlines a class whatever its keys)
            return out

        return table, early_value

    def _learn(self, site: str, tag: Any, member: type, v: dict[str, Any]) -> None:
        """Inline ``member`` at ``site`` for ``v``'s keys, if they are all its wire names and
        include its required ones."""
        fields = _wire_fields(member)
        by_wire = {a.metadata["acp"].wire: i for i, a in fields}
        present = frozenset(by_wire.get(k, -1) for k in v)
        if -1 not in present and {i for i, a in fields if _required(a, a.metadata["acp"])} <= present:
            self._add(site, tag, member, present)

    def _add(self, site: str, key: Any, member: type, present: frozenset[int]) -> None:
        """Add ``member`` to the plan at ``site`` under ``key`` (its tag, or its class for an encode)
        and recompile, unless it is there or the budget (``_MAX_INLINE``, ``_MAX_INLINED``) is spent."""
        learnt = self.plan.setdefault(site, {})
        if key in learnt or len(learnt) >= _MAX_INLINE or self.inlined >= _MAX_INLINED:
            return
        learnt[key] = (member, present)
        self.inlined += 1
        self.relearn()


def _copy_names(
    hook: Callable[..., Any], names: re.Pattern[str], q: str, ns: dict[str, Any], present: frozenset[int] | None = None
) -> None:
    """Put in ``ns``, prefixed by ``q``, the globals of compiled ``hook`` that ``names`` matches
    (its group 1: the field index a name is for, if any), only those of the fields ``present``
    when given; a stand-in is replaced by the hook it stands for (see ``_resolved``)."""
    for key, value in hook.__globals__.items():
        m = names.fullmatch(key)
        if m is not None and (present is None or m[1] is None or int(m[1]) in present):
            ns[q + key] = _resolved(value)


def _resolved(fn: Any) -> Any:
    """``fn``, or the hook it stands for when it is ``_later``'s stand-in (compiled now)."""
    build = getattr(fn, "acp_build", None)
    return build() if build is not None else fn


class _FastMiss(Exception):
    """A compiled structure hook's fast path does not apply: the full path decodes the value."""


def _string_literals(t: Any) -> frozenset[str] | None:
    """The values of ``Literal[...]`` when they are all strings, else ``None``."""
    if get_origin(t) is not Literal:
        return None
    values = get_args(t)
    return frozenset(values) if all(type(x) is str for x in values) else None


def _locate(fn: Callable[[Any], Any], items: list[Any]) -> DecodeError:
    """Re-run a failed list decode item by item to name the index of the first bad item."""
    for i, x in enumerate(items):
        try:
            fn(x)
        except DecodeError as e:
            return e.at(i)
    return DecodeError("array", items)  # pragma: no cover - the comprehension failed, so an item does


def _identity(v: Any) -> Any:
    return v


def _type_name(t: Any) -> str:
    if t is _NoneType:
        return "null"
    if isinstance(t, type):
        return {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object"}.get(t, t.__name__)
    if t is Any:
        return "any"
    origin = get_origin(t)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(t))
    if origin is list:
        return f"array of {_type_name(get_args(t)[0])}"
    if origin is dict:
        return f"object of {_type_name(get_args(t)[1])}"
    if _is_union(t):
        return " | ".join(_type_name(x) for x in _leaves(t))
    return str(t)


converter = AcpConverter()
"""The shared converter: ``converter.structure(data, PromptRequest)``, ``converter.unstructure(obj)``."""


def loads(data: bytes | bytearray | memoryview | str, t: type[T] | Any) -> T:
    """Parse JSON ``data`` (orjson) and structure it as ``t``; raises ``orjson.JSONDecodeError`` or ``DecodeError``."""
    result: T = converter.structure_fn(t)(orjson.loads(data))
    return result


def dumps(obj: Any) -> bytes:
    """Unstructure ``obj`` and serialise it to compact UTF-8 JSON bytes (orjson)."""
    return orjson.dumps(converter.unstructure(obj))


def value_or_default(obj: Any, name: str) -> Any:
    """The value of field ``name`` of ``obj``, or its schema default when it is ``UNSET``.

    Returns ``None`` when the field is unset and the schema gives no default.  Object defaults
    (for example ``AgentCapabilities.prompt_capabilities``) come back as instances of the field's
    type.  Raises ``AttributeError`` for an unknown field name.
    """
    value = getattr(obj, name)
    if value is not UNSET:
        return value
    field = attrs.fields_dict(type(obj))[name]
    spec: FieldSpec = field.metadata["acp"]
    if spec.default is NO_DEFAULT:
        return None
    attrs.resolve_types(type(obj))
    return converter.structure_fn(_core(field.type))(copy.deepcopy(spec.default))

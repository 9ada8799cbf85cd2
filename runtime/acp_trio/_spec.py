"""The small leaf of acp_trio that generated code imports: sentinels, field metadata, method specs.

Contract: importing this module costs almost nothing (attrs and the standard library only; no trio,
no cattrs), so ``import acp_schema.v1`` stays fast.  It defines

* ``UNSET`` / ``UnsetType``: the value of a field that was absent on the wire (falsy; stays absent
  on encode; distinct from ``None``, which is an explicit JSON ``null``);
* ``FieldSpec`` and the ``f`` / ``tag`` / ``EXTRA`` metadata helpers that generated attrs fields carry;
* ``MethodSpec``: one row of a variant's method table;
* ``Sender``: the interface typed peer proxies call (``acp_trio``'s connection implements it);
* ``define`` / ``field``: the class decorator and field specifier of the generated classes.  For
  type checkers they are ``attrs.define`` / ``attrs.field``; at run time ``define`` builds the
  class that ``attrs.define(kw_only=True, init=False, repr=False, eq=False)`` builds (slotted,
  ``__attrs_attrs__`` of real ``attrs.Attribute`` objects, pickling methods) without compiling
  code, which is what made importing a variant slow.  It takes only what the generator writes
  (``UNSET`` and plain defaults, ``factory``, ``metadata``; no base class) and refuses the rest.

It knows no ACP type or method by name.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, cast

import attrs

__all__ = [
    "EXTRA",
    "NO_DEFAULT",
    "UNSET",
    "FieldSpec",
    "MethodSpec",
    "Sender",
    "UnsetType",
    "define",
    "f",
    "field",
    "tag",
]


class UnsetType(enum.Enum):
    """Type of ``UNSET``: the field was absent on the wire (use ``x is UNSET`` to test)."""

    UNSET = "UNSET"

    def __bool__(self) -> Literal[False]:
        # Literal[False] lets type checkers narrow ``value or default`` past UNSET.
        return False

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = UnsetType.UNSET
"""A field absent on the wire.  Falsy; never encoded; see ``acp_trio.value_or_default``."""


class _NoDefault(enum.Enum):
    NO_DEFAULT = "NO_DEFAULT"


NO_DEFAULT: Final[Any] = _NoDefault.NO_DEFAULT
"""``FieldSpec.default`` when the schema gives the field no default."""


@attrs.frozen(slots=True)
class FieldSpec:
    """How one attrs field maps to the wire (stored in the field's ``metadata["acp"]``).

    ``wire``: the JSON key.  ``tag``: the field is a union tag (``type``, ``sessionUpdate``...).
    ``nullable``: the schema admits ``null``.  ``default_on_error`` / ``skip_invalid_items`` /
    ``default_on_null``: the schema's ``x-deserialize-*`` leniency.  ``default``: the schema
    default as JSON (``NO_DEFAULT`` when it has none).
    """

    wire: str
    tag: bool = False
    nullable: bool = False
    default_on_error: bool = False
    skip_invalid_items: bool = False
    default_on_null: bool = False
    default: Any = NO_DEFAULT
    tag_optional: bool = False


def f(
    wire: str,
    *,
    nullable: bool = False,
    on_error: bool = False,
    skip_invalid: bool = False,
    on_null: bool = False,
    default: Any = NO_DEFAULT,
) -> dict[str, FieldSpec]:
    """Field metadata for a generated attrs field whose JSON key is ``wire``."""
    return {"acp": FieldSpec(wire, False, nullable, on_error, skip_invalid, on_null, default)}


def tag(wire: str, *, optional: bool = False) -> dict[str, FieldSpec]:
    """Field metadata for a tagged-union tag field (``optional``: the $def itself has no tag)."""
    return {"acp": FieldSpec(wire, True, tag_optional=optional)}


EXTRA: Final[dict[str, bool]] = {"acp_extra": True}
"""Metadata of the ``extra_fields`` attribute: wire fields the schema does not define."""


@attrs.frozen(slots=True)
class MethodSpec:
    """One ACP method, from the schema's ``x-method`` / ``x-side`` annotations.

    ``method``: the wire name (``"session/prompt"``).  ``side``: who handles it: ``"agent"``,
    ``"client"``, ``"protocol"`` (both sides, e.g. ``$/cancel_request``) or ``"proxy"``.
    ``kind``: ``"request"`` or ``"notification"``.  ``params_type``: the params type (a class or
    a union alias).  ``result_type``: the result type, ``None`` for notifications.
    ``unstable``: not part of the stable protocol.  ``attr``: the Python method name in the
    generated handler protocols and peer proxies (``"session_prompt"``).
    """

    method: str
    side: Literal["agent", "client", "protocol", "proxy"]
    kind: Literal["request", "notification"]
    params_type: Any
    result_type: Any
    unstable: bool
    attr: str


class Sender(Protocol):
    """What a typed peer proxy needs from a connection (``acp_trio`` implements it)."""

    async def send_request(self, spec: MethodSpec, params: Any, *, timeout: float | None = None) -> Any:
        """Send ``params`` as a ``spec.method`` request; return the decoded result (``spec.result_type``)."""
        ...

    async def send_notification(self, spec: MethodSpec, params: Any) -> None:
        """Send ``params`` as a ``spec.method`` notification."""
        ...


# -- the decorator of the generated classes ------------------------------------------------------


class _FieldDef:
    """What ``field(...)`` leaves in a class body until ``define`` turns it into an ``attrs.Attribute``."""

    __slots__ = ("default", "metadata")

    def __init__(self, default: Any, metadata: dict[str, Any]) -> None:
        self.default = default
        self.metadata = metadata


def _field(*, default: Any = attrs.NOTHING, factory: Callable[[], Any] | None = None, metadata: dict[str, Any]) -> Any:
    """``attrs.field`` as the generator writes it: ``default`` or ``factory``, and ``metadata``."""
    return _FieldDef(default if factory is None else attrs.Factory(factory), metadata)


_ARGS: Final = {"kw_only": True, "init": False, "repr": False, "eq": False}


# What attrs itself makes of a field under these arguments: every Attribute's flags and the
# class-level extras are copied from here, so they follow the installed attrs version.
@attrs.define(kw_only=True, init=False, repr=False, eq=False)
class _Template:
    field: Any = attrs.field(metadata={"k": 1})

    def __init__(self) -> None:
        pass


# attrs.Attribute's pickle state: its slots in order (a tuple), set back with __setstate__
_TEMPLATE_STATE: Final[tuple[Any, ...]] = cast("tuple[Any, ...]", _Template.__attrs_attrs__[0].__getstate__())
_ATTRIBUTE_SLOTS: Final[tuple[str, ...]] = vars(attrs.Attribute)["__slots__"]
_NAME, _DEFAULT, _METADATA, _TYPE, _ALIAS = (
    _ATTRIBUTE_SLOTS.index(n) for n in ("name", "default", "metadata", "type", "alias")
)
_CLASS_EXTRAS: Final = {
    k: _Template.__dict__[k]
    # __replace__ (attrs.evolve) on Python 3.13 and later; the rest depends on the attrs version
    for k in ("__attrs_props__", "__attrs_own_setattr__", "__match_args__", "__replace__")
    if k in _Template.__dict__
}
_OBJECT_SETATTR: Final = object.__setattr__


def _attribute(name: str, spec: _FieldDef, annotation: Any) -> attrs.Attribute[Any]:
    state = list(_TEMPLATE_STATE)
    state[_NAME] = name
    state[_DEFAULT] = spec.default
    state[_METADATA] = spec.metadata
    state[_TYPE] = annotation
    state[_ALIAS] = name
    a: attrs.Attribute[Any] = attrs.Attribute.__new__(attrs.Attribute)
    a.__setstate__(tuple(state))  # type: ignore[attr-defined]  # attrs' pickle protocol, typed nowhere
    return a


def _pickling(names: tuple[str, ...]) -> tuple[Callable[[Any], dict[str, Any]], Callable[[Any, Any], None]]:
    """``__getstate__`` / ``__setstate__`` of a slotted class with fields ``names`` (attrs' state: a dict)."""

    def __getstate__(self: Any) -> dict[str, Any]:
        return {n: getattr(self, n) for n in names}

    def __setstate__(self: Any, state: Any) -> None:
        if isinstance(state, tuple):  # attrs before 22.2 pickled a tuple
            state = dict(zip(names, state, strict=False))
        for n in names:
            if n in state:
                _OBJECT_SETATTR(self, n, state[n])

    return __getstate__, __setstate__


def _fields_class(cls_name: str, names: tuple[str, ...]) -> type[tuple[Any, ...]]:
    """The tuple subclass of ``__attrs_attrs__``: fields by position and by name (``fields(C).x``)."""
    body: dict[str, Any] = {"__slots__": ()}
    for i, n in enumerate(names):
        body[n] = property(itemgetter(i))
    return type(f"{cls_name}Attributes", (tuple,), body)


def _build(cls: type) -> type:
    """A slotted copy of ``cls`` with attrs' class-level data, as ``attrs.define`` would return it."""
    if cls.__bases__ != (object,):
        raise TypeError(f"acp_trio._spec.define: {cls.__name__} must not have base classes")
    ns = dict(cls.__dict__)
    names: list[str] = []
    attributes: list[attrs.Attribute[Any]] = []
    for name, annotation in ns.get("__annotations__", {}).items():
        value = ns.get(name)
        if type(value) is _FieldDef:
            if name.startswith("_"):  # attrs would strip the underscore from the __init__ parameter
                raise TypeError(f"acp_trio._spec.define: field {cls.__name__}.{name} starts with '_'")
            del ns[name]  # its slot takes its place
            names.append(name)
            attributes.append(_attribute(name, value, annotation))
        elif not (isinstance(annotation, str) and annotation.startswith("ClassVar[")):
            raise TypeError(f"acp_trio._spec.define: {cls.__name__}.{name} is not a field(...)")
    field_names = tuple(names)
    ns.pop("__dict__", None)
    ns.pop("__weakref__", None)
    ns["__attrs_attrs__"] = _fields_class(cls.__name__, field_names)(attributes)
    ns.update(_CLASS_EXTRAS)
    ns["__getstate__"], ns["__setstate__"] = _pickling(field_names)
    # the generated __init__ takes the same keywords and assigns what attrs' would (but for an explicit
    # extra_fields=None, which it turns into {}), so it serves as the __attrs_init__ attrs always adds
    ns["__attrs_init__"] = ns["__init__"]
    ns["__slots__"] = (*field_names, "__weakref__")
    ns["__qualname__"] = cls.__qualname__
    return type(cls)(cls.__name__, cls.__bases__, ns)


def _define(**kwargs: Any) -> Callable[[type], type]:
    """``attrs.define(kw_only=True, init=False, repr=False, eq=False)``, the only arguments the generator writes."""
    if kwargs != _ARGS:
        raise TypeError(f"acp_trio._spec.define takes exactly {_ARGS}, not {kwargs}")
    return _build


if TYPE_CHECKING:  # so that type checkers (mypy's attrs plugin, dataclass_transform) see attrs classes
    from attrs import define as define
    from attrs import field as field
else:
    define = _define
    field = _field

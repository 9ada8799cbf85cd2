"""The small leaf of acp_trio that generated code imports: sentinels, field metadata, method specs.

Contract: importing this module costs almost nothing (attrs and the standard library only; no trio,
no cattrs), so ``import acp_schema.v1`` stays fast.  It defines

* ``UNSET`` / ``UnsetType``: the value of a field that was absent on the wire (falsy; stays absent
  on encode; distinct from ``None``, which is an explicit JSON ``null``);
* ``FieldSpec`` and the ``f`` / ``tag`` / ``EXTRA`` metadata helpers that generated attrs fields carry;
* ``MethodSpec``: one row of a variant's method table;
* ``Sender``: the interface typed peer proxies call (``acp_trio``'s connection implements it).

It knows no ACP type or method by name.
"""

from __future__ import annotations

import enum
from typing import Any, Final, Literal, Protocol

import attrs

__all__ = [
    "EXTRA",
    "NO_DEFAULT",
    "UNSET",
    "FieldSpec",
    "MethodSpec",
    "Sender",
    "UnsetType",
    "f",
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

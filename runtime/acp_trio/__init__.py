"""acp-trio: a trio runtime and a cattrs converter for the Agent Client Protocol.

Importing this package is cheap: the converter is built on first use (``acp_trio.converter``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._spec import UNSET, MethodSpec, UnsetType

if TYPE_CHECKING:
    from ._converter import AcpConverter, DecodeError, dumps, loads, value_or_default

    converter: AcpConverter

__all__ = [
    "UNSET",
    "AcpConverter",
    "DecodeError",
    "MethodSpec",
    "UnsetType",
    "converter",
    "dumps",
    "loads",
    "value_or_default",
]

_LAZY = {"AcpConverter", "DecodeError", "converter", "dumps", "loads", "value_or_default"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import _converter

        value = getattr(_converter, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'acp_trio' has no attribute {name!r}")

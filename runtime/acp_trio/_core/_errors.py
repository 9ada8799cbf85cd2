"""JSON-RPC 2.0 error codes and :class:`RequestError`.

Source: https://www.jsonrpc.org/specification and the ACP schema's ``$defs/ErrorCode``.  Kept apart
from :mod:`._jsonrpc`, which the wheel compiles with mypyc (``hatch_build.py``): an exception class
stays a plain Python class, which code anywhere can subclass (``acp_trio.fs.FsError``, say).
"""

from __future__ import annotations

from typing import Any, Final

PARSE_ERROR: Final = -32700
"""Invalid JSON was received."""
INVALID_REQUEST: Final = -32600
"""The JSON is not a valid request, notification or response."""
METHOD_NOT_FOUND: Final = -32601
"""The method does not exist or is not available."""
INVALID_PARAMS: Final = -32602
"""The params do not match the method's params type."""
INTERNAL_ERROR: Final = -32603
"""The handler failed; details are in the receiver's log, not on the wire."""
REQUEST_CANCELLED: Final = -32800
"""The request was cancelled by the peer's cancel notification before it produced a result."""
AUTH_REQUIRED: Final = -32000
"""ACP: authentication is required before this operation."""
RESOURCE_NOT_FOUND: Final = -32002
"""ACP: a resource such as a session or a file was not found."""


class RequestError(Exception):
    """A JSON-RPC error: raised by a handler to answer with an error, or by a request that got one.

    ``code``: the JSON-RPC error code (see the module constants).  ``message``: a short sentence.
    ``data``: optional JSON value with details (omitted from the wire when ``None``).
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(code, message, data)
        self.code = code
        self.message = message
        self.data = data

    def __str__(self) -> str:
        text = f"{self.message} (JSON-RPC error {self.code})"
        if self.data is not None:
            text += f": {self.data!r}"
        return text

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC error object."""
        obj: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            obj["data"] = self.data
        return obj

    @classmethod
    def method_not_found(cls, method: str) -> RequestError:
        """The error -32601 "Method not found", with ``data: {"method": method}``."""
        return cls(METHOD_NOT_FOUND, "Method not found", {"method": method})

    @classmethod
    def invalid_params(cls, data: Any = None) -> RequestError:
        """The error -32602 "Invalid params", with ``data`` (say which param and why)."""
        return cls(INVALID_PARAMS, "Invalid params", data)

    @classmethod
    def invalid_request(cls, data: Any = None) -> RequestError:
        """The error -32600 "Invalid request", with ``data``."""
        return cls(INVALID_REQUEST, "Invalid request", data)

    @classmethod
    def internal_error(cls, data: Any = None) -> RequestError:
        """The error -32603 "Internal error", with ``data``."""
        return cls(INTERNAL_ERROR, "Internal error", data)

    @classmethod
    def request_cancelled(cls, data: Any = None) -> RequestError:
        """The error -32800 "Request cancelled", with ``data``."""
        return cls(REQUEST_CANCELLED, "Request cancelled", data)

    @classmethod
    def auth_required(cls, data: Any = None) -> RequestError:
        """The error -32000 "Authentication required", with ``data``."""
        return cls(AUTH_REQUIRED, "Authentication required", data)

    @classmethod
    def resource_not_found(cls, uri: str | None = None) -> RequestError:
        """The error -32002 "Resource not found", with ``data: {"uri": uri}`` when ``uri`` is given."""
        return cls(RESOURCE_NOT_FOUND, "Resource not found", None if uri is None else {"uri": uri})

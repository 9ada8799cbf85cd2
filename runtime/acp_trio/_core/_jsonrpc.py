"""JSON-RPC 2.0 envelopes and request ids (the error codes and RequestError: `._errors`).

Source: https://www.jsonrpc.org/specification and the ACP schema's ``$defs/ErrorCode``.
``parse`` turns one framed line into a :data:`Message` (or a :class:`Batch` of them); the
``encode_*`` functions turn one outgoing message into its line (``bytes`` ending in ``\\n``).
Params and results are plain JSON values here: typing them is the caller's business.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final, TypeAlias

import orjson

from ._errors import (
    INTERNAL_ERROR,
    PARSE_ERROR,
    RequestError,
)

RequestId: TypeAlias = "int | str"
"""A request id: an integer or a string (JSON-RPC also allows null, which no ACP peer sends)."""

_OPT: Final = orjson.OPT_APPEND_NEWLINE
_loads = orjson.loads


def is_request_id(value: object) -> bool:
    """True for an integer (not a bool) or a string: the ids this library sends and matches."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


class Request:
    """An inbound request: ``id``, ``method``, ``params`` (a JSON object or array, ``None`` if absent)."""

    __slots__ = ("id", "method", "params")

    def __init__(self, id: RequestId | None, method: str, params: Any) -> None:
        self.id = id
        self.method = method
        self.params = params

    def __repr__(self) -> str:
        return f"Request(id={self.id!r}, method={self.method!r})"


class Notification:
    """An inbound notification: ``method``, ``params``; it never gets a response."""

    __slots__ = ("method", "params")

    def __init__(self, method: str, params: Any) -> None:
        self.method = method
        self.params = params

    def __repr__(self) -> str:
        return f"Notification(method={self.method!r})"


class Response:
    """A successful response: ``id`` and ``result`` (any JSON value)."""

    __slots__ = ("id", "result")

    def __init__(self, id: RequestId, result: Any) -> None:
        self.id = id
        self.result = result

    def __repr__(self) -> str:
        return f"Response(id={self.id!r})"


class ErrorResponse:
    """An error response: ``id`` (``None`` when the peer could not tell which request failed) and ``error``."""

    __slots__ = ("error", "id")

    def __init__(self, id: RequestId | None, error: RequestError) -> None:
        self.id = id
        self.error = error

    def __repr__(self) -> str:
        return f"ErrorResponse(id={self.id!r}, error={self.error!r})"


class Invalid:
    """Something that must be answered with ``error`` and ``id`` (``None`` if no id could be read)."""

    __slots__ = ("error", "id")

    def __init__(self, id: RequestId | None, error: RequestError) -> None:
        self.id = id
        self.error = error

    def __repr__(self) -> str:
        return f"Invalid(id={self.id!r}, error={self.error!r})"


Message: TypeAlias = "Request | Notification | Response | ErrorResponse | Invalid"


class Batch:
    """A JSON array of messages (JSON-RPC 2.0 batch): answer with one array of the responses, or nothing."""

    __slots__ = ("items",)

    def __init__(self, items: list[Message]) -> None:
        self.items = items

    def __repr__(self) -> str:
        return f"Batch({self.items!r})"


def parse(line: bytes) -> Message | Batch:
    """Parse one framed line.

    Invalid JSON (including invalid UTF-8) → :class:`Invalid` with -32700 and id ``None``.  An empty
    array → :class:`Invalid` -32600.  A non-empty array → :class:`Batch`.  Anything else goes
    through :func:`classify`.
    """
    try:
        obj = _loads(line)
    except orjson.JSONDecodeError as exc:
        return parse_error(exc)
    return parse_value(obj)


def parse_error(exc: orjson.JSONDecodeError) -> Invalid:
    """The :class:`Invalid` message (-32700, id ``None``) for a line that is not JSON."""
    return Invalid(None, RequestError(PARSE_ERROR, "Parse error", {"detail": str(exc)}))


def parse_value(obj: Any) -> Message | Batch:
    """:func:`parse` after ``orjson.loads``: one decoded JSON value as a message or a batch."""
    if type(obj) is dict:
        # the common cases inline: a well-formed notification (streamed updates) or request with
        # object params, a success response with an integer or string id; anything else is classified
        if obj.get("jsonrpc") == "2.0":
            method = obj.get("method")
            if type(method) is str:
                params = obj.get("params")
                if type(params) is dict:
                    if "id" not in obj:
                        return Notification(method, params)
                    raw_id = obj["id"]
                    if type(raw_id) is int or type(raw_id) is str:
                        return Request(raw_id, method, params)
            elif method is None and len(obj) == 3 and "result" in obj:
                raw_id = obj.get("id")
                if type(raw_id) is int or type(raw_id) is str:
                    return Response(raw_id, obj["result"])
        return classify(obj)
    if type(obj) is list:
        if not obj:
            return Invalid(None, RequestError.invalid_request({"detail": "empty batch"}))
        return Batch([classify(item) for item in obj])
    return classify(obj)


def _bad_id(value: object) -> bool:
    return value is not None and not is_request_id(value)


def _readable_id(obj: dict[str, Any]) -> RequestId | None:
    raw_id = obj.get("id")
    return raw_id if is_request_id(raw_id) else None


def classify(obj: Any) -> Message:
    """Classify one decoded JSON value as a request, notification, response or invalid message."""
    if type(obj) is not dict:
        return Invalid(None, RequestError.invalid_request({"detail": "a message must be a JSON object"}))
    if obj.get("jsonrpc") != "2.0":
        return Invalid(
            _readable_id(obj), RequestError.invalid_request({"detail": 'missing or wrong "jsonrpc": expected "2.0"'})
        )
    method = obj.get("method")
    if method is not None:
        # the common case first: a notification (streamed updates) costs four lookups
        params = obj.get("params")
        if type(method) is not str:
            return Invalid(_readable_id(obj), RequestError.invalid_request({"detail": '"method" must be a string'}))
        if params is not None and type(params) is not dict and type(params) is not list:
            return Invalid(
                _readable_id(obj), RequestError.invalid_request({"detail": '"params" must be an object or an array'})
            )
        if "id" not in obj:
            return Notification(method, params)
        raw_id = obj["id"]
        if _bad_id(raw_id):
            return Invalid(None, RequestError.invalid_request({"detail": '"id" must be an integer or a string'}))
        return Request(raw_id, method, params)
    raw_id = obj.get("id")
    has_result = "result" in obj
    has_error = "error" in obj
    if has_result == has_error or "id" not in obj or _bad_id(raw_id):
        return Invalid(
            _readable_id(obj), RequestError.invalid_request({"detail": "not a request, notification or response"})
        )
    if has_result:
        if raw_id is None:
            return Invalid(None, RequestError.invalid_request({"detail": "a result needs an id"}))
        return Response(raw_id, obj["result"])
    err = obj["error"]
    if type(err) is dict and type(err.get("code")) is int and isinstance(err.get("message"), str):
        return ErrorResponse(raw_id, RequestError(err["code"], err["message"], err.get("data")))
    return ErrorResponse(raw_id, RequestError(INTERNAL_ERROR, "Malformed error response from peer", {"error": err}))


_JSON_VALUE = json.JSONDecoder()  # raw_decode: one JSON value from a position, the rest ignored
_SPACE = re.compile(r"[ \t\n\r]*")


def head_fields(head: bytes) -> dict[str, Any]:
    """The top-level members readable from the start of a JSON object cut short (``head``).

    For an oversized line (:class:`~acp_trio._core.OversizedMessage`) whose whole cannot be parsed:
    members are read in order with the standard library's JSON decoder, one complete key and value
    at a time, until one does not fit in ``head`` (typically a large ``params``); what was read
    before is returned, and the key whose value was cut short maps to ``...`` (so a response's
    ``"result"`` is known even when its value is not).  Not an object, or not JSON: ``{}``.
    """
    text = head.decode("utf-8", "replace")
    fields: dict[str, Any] = {}
    pos = _SPACE.match(text).end()  # type: ignore[union-attr]
    if not text.startswith("{", pos):
        return fields
    pos += 1
    try:
        while True:
            pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
            key, pos = _JSON_VALUE.raw_decode(text, pos)
            if type(key) is not str:
                return fields
            pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
            if not text.startswith(":", pos):
                return fields
            pos = _SPACE.match(text, pos + 1).end()  # type: ignore[union-attr]
            fields[key] = ...
            value, pos = _JSON_VALUE.raw_decode(text, pos)
            if pos == len(text) and type(value) in (int, float):  # digits up to the cut: maybe more followed
                return fields
            fields[key] = value
            pos = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
            if not text.startswith(",", pos):
                return fields
            pos += 1
    except ValueError:  # the first member that does not fit (or is not JSON) ends what can be read
        return fields


def encode_request(id: RequestId, method: str, params: Any) -> bytes:
    """One request line.  ``params`` ``None`` is omitted."""
    if params is None:
        return orjson.dumps({"jsonrpc": "2.0", "id": id, "method": method}, option=_OPT)
    return orjson.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}, option=_OPT)


def encode_notification(method: str, params: Any) -> bytes:
    """One notification line.  ``params`` ``None`` is omitted."""
    if params is None:
        return orjson.dumps({"jsonrpc": "2.0", "method": method}, option=_OPT)
    return orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params}, option=_OPT)


def notification_prefix(method: str) -> bytes:
    """The bytes of a ``method`` notification up to its params: the params' JSON and ``}\\n`` complete
    the line (:func:`encode_notification`'s bytes)."""
    return orjson.dumps({"jsonrpc": "2.0", "method": method, "params": 0})[: -len(b"0}")]


def notification_encoder(method: str) -> Callable[[Any], bytes]:
    """A function ``(params) -> line``, the same bytes as :func:`encode_notification` for ``method``,
    faster for a method sent many times (streamed updates): the envelope up to the params is encoded
    once.  ``params`` ``None`` is omitted, as there."""
    prefix = notification_prefix(method)
    dumps = orjson.dumps

    def encode(params: Any) -> bytes:
        if params is None:
            return encode_notification(method, None)
        return prefix + dumps(params) + b"}\n"

    return encode


def encode_result(id: RequestId | None, result: Any) -> bytes:
    """One success-response line (``result`` may be ``null``)."""
    return orjson.dumps({"jsonrpc": "2.0", "id": id, "result": result}, option=_OPT)


def encode_error(id: RequestId | None, error: RequestError) -> bytes:
    """One error-response line."""
    return orjson.dumps({"jsonrpc": "2.0", "id": id, "error": error.to_wire()}, option=_OPT)

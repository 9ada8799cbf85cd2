"""Sans-IO JSON-RPC 2.0 for ACP: newline-delimited framing, envelopes, ids, errors, pending requests.

Contract: bytes in, events out; messages in, bytes out.  This package does no I/O, imports no async
library and knows no ACP method by name (a test enforces both), so it can be driven by trio, by a
test, or by anything else.  The trio shell lives in :mod:`acp_trio._connection`.
"""

from __future__ import annotations

from ._errors import (
    AUTH_REQUIRED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    RESOURCE_NOT_FOUND,
    RequestError,
)
from ._framing import DEFAULT_MAX_MESSAGE_SIZE, OVERSIZED_HEAD, LineFramer, OversizedMessage, without_eol
from ._jsonrpc import (
    Batch,
    ErrorResponse,
    Invalid,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
    head_fields,
    is_request_id,
    notification_encoder,
    notification_prefix,
    parse,
    parse_error,
    parse_value,
)

__all__ = [
    "AUTH_REQUIRED",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "OVERSIZED_HEAD",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
    "Batch",
    "ErrorResponse",
    "Invalid",
    "LineFramer",
    "Message",
    "Notification",
    "OversizedMessage",
    "Request",
    "RequestError",
    "RequestId",
    "Response",
    "encode_error",
    "encode_notification",
    "encode_request",
    "encode_result",
    "head_fields",
    "is_request_id",
    "notification_encoder",
    "notification_prefix",
    "parse",
    "parse_error",
    "parse_value",
    "without_eol",
]

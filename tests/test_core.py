"""The sans-IO JSON-RPC core: framing, parsing and classification, encoders, the pending table, and its
architecture rule (no async library, no ACP method name)."""

from __future__ import annotations

import ast
import functools
import importlib
import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_trio import _core
from acp_trio._core import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    OVERSIZED_HEAD,
    PARSE_ERROR,
    Batch,
    ErrorResponse,
    Invalid,
    LineFramer,
    Notification,
    OversizedMessage,
    Request,
    RequestError,
    Response,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
    head_fields,
    notification_encoder,
    parse,
)

CORE_DIR = Path(_core.__file__).parent


def feed_all(framer: LineFramer, chunks: list[bytes]) -> list[bytes | OversizedMessage]:
    out: list[bytes | OversizedMessage] = []
    for chunk in chunks:
        out.extend(framer.feed(chunk))
    return out


def kinds(items: list[bytes | OversizedMessage]) -> list[Any]:
    """Lines as bytes, oversized markers as ("oversized", size)."""
    return [("oversized", i.size) if isinstance(i, OversizedMessage) else i for i in items]


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


# -- framing -------------------------------------------------------------------------------------


def test_several_lines_in_one_chunk_are_split_in_order() -> None:
    framer = LineFramer()
    assert framer.feed(b'{"a":1}\n{"b":2}\n{"c":3}\n') == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    assert framer.close() == []


def test_a_line_fed_byte_by_byte_is_framed_once_complete() -> None:
    framer = LineFramer()
    chunks = bytewise(b'{"jsonrpc":"2.0","method":"x"}\n{"y":1}\n')
    out: list[bytes | OversizedMessage] = []
    for i, chunk in enumerate(chunks):
        got = framer.feed(chunk)
        if got:
            # a line comes out exactly when its newline arrives
            assert chunks[i] == b"\n"
        out.extend(got)
    assert out == [b'{"jsonrpc":"2.0","method":"x"}', b'{"y":1}']


def test_a_line_split_across_chunks_with_the_next_line_starting_in_the_same_chunk() -> None:
    framer = LineFramer()
    assert framer.feed(b'{"a"') == []
    assert framer.feed(b":1}\n{") == [b'{"a":1}']
    assert framer.feed(b'"b":2}\n') == [b'{"b":2}']


def test_crlf_line_endings_are_stripped_whole_and_in_pieces() -> None:
    framer = LineFramer()
    assert framer.feed(b"one\r\ntwo\r\n") == [b"one", b"two"]
    assert feed_all(framer, [b"three\r", b"\n", b"four", b"\r\n"]) == [b"three", b"four"]
    # a carriage return inside a line is kept
    assert framer.feed(b"a\rb\n") == [b"a\rb"]


@pytest.mark.parametrize(
    ("data", "lines"),
    [
        (b"{}\n", [b"{}"]),
        (b"{}\r\n", [b"{}"]),
        (b"a\rb\n", [b"a\rb"]),
        (b"\n", []),
        (b"\r\n", []),
        (b" \t \n", []),
        (b"x\r\r\n", [b"x\r"]),
        (b'[{"a":1}]\n', [b'[{"a":1}]']),
        (b'{"a":"\\r"}\r\n', [b'{"a":"\\r"}']),
        (b"{\r\r\n", [b"{\r"]),
        (b"{\n", [b"{"]),
    ],
)
def test_a_read_of_exactly_one_line_frames_like_any_other(data: bytes, lines: list[bytes]) -> None:
    assert LineFramer().feed(data) == lines
    assert feed_all(LineFramer(), [data[:1], data[1:]]) == lines  # the same line in two reads


def test_blank_and_whitespace_only_lines_are_skipped() -> None:
    framer = LineFramer()
    assert framer.feed(b"\n\r\n   \n\t \r\n{}\n \n") == [b"{}"]
    assert framer.close() == []


def test_an_oversized_line_arriving_whole_yields_one_marker_and_the_next_line_still_frames() -> None:
    framer = LineFramer(max_message_size=10)
    out = framer.feed(b"x" * 25 + b"\n" + b"0123456789\n")
    assert kinds(out) == [("oversized", 25), b"0123456789"]
    assert out[0].limit == 10  # type: ignore[union-attr]


def test_one_whole_json_line_over_the_limit_in_one_read_is_a_marker() -> None:
    framer = LineFramer(max_message_size=10)
    assert kinds(framer.feed(b'{"a":"' + b"x" * 20 + b'"}\n')) == [("oversized", 28)]
    assert framer.feed(b'{"a":"xy"}\n') == [b'{"a":"xy"}']  # exactly the limit


def test_an_oversized_line_arriving_in_pieces_yields_one_marker_and_the_next_line_still_frames() -> None:
    framer = LineFramer(max_message_size=10)
    out = feed_all(framer, [b"xxxx", b"xxxxxxxx", b"xxxxxxxxxxxxx", b"xxx", b"xx\nok", b"\n"])
    assert len([i for i in out if isinstance(i, OversizedMessage)]) == 1
    assert out[-1] == b"ok" and len(out) == 2
    assert isinstance(out[0], OversizedMessage) and out[0].size > 10 and out[0].limit == 10


def test_an_oversized_line_fed_byte_by_byte_yields_one_marker_and_the_next_line_still_frames() -> None:
    framer = LineFramer(max_message_size=8)
    out = feed_all(framer, bytewise(b"y" * 40 + b"\n" + b"short\n" + b"z" * 9 + b"\r\nlast\n"))
    assert kinds(out) == [("oversized", 9), b"short", ("oversized", 9), b"last"]


def test_the_newline_ending_an_oversized_line_may_arrive_alone() -> None:
    framer = LineFramer(max_message_size=4)
    assert kinds(framer.feed(b"abcdefgh")) == [("oversized", 8)]
    assert framer.feed(b"ijk") == []
    assert framer.feed(b"\n") == []
    assert framer.feed(b"ok\n") == [b"ok"]


def test_a_line_of_exactly_the_limit_is_accepted_with_lf_and_with_crlf_however_it_is_split() -> None:
    for chunks in ([b"abcd\n"], [b"abcd\r\n"], [b"abcd\r", b"\n"], bytewise(b"abcd\r\n"), [b"ab", b"cd\r", b"\n"]):
        framer = LineFramer(max_message_size=4)
        assert feed_all(framer, [*chunks, b"next\n"]) == [b"abcd", b"next"], chunks


def test_close_returns_the_unterminated_tail_and_resets() -> None:
    framer = LineFramer()
    assert framer.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert framer.feed(b":2}\r") == []
    assert framer.close() == [b'{"b":2}']
    assert framer.close() == []
    framer.feed(b"   ")
    assert framer.close() == []


def test_close_after_an_unterminated_oversized_line_returns_nothing_and_framing_resumes() -> None:
    framer = LineFramer(max_message_size=4)
    assert kinds(framer.feed(b"toolongline")) == [("oversized", 11)]
    assert framer.close() == []
    assert framer.feed(b"ok\n") == [b"ok"]


def test_feed_raw_gives_each_line_as_it_came_blank_ones_and_their_cr_included() -> None:
    framer = LineFramer()
    assert framer.feed_raw(b'{"a":1}\n\n {"b":2}\r\n \r\n{"c"') == [b'{"a":1}\n', b"\n", b' {"b":2}\r\n', b" \r\n"]
    assert framer.feed_raw(b":3}") == []
    assert framer.feed_raw(b"\n") == [b'{"c":3}\n']
    assert framer.feed_raw(b'{"d":4}\n') == [b'{"d":4}\n']  # a read of one line is the read itself
    assert framer.feed_raw(b"") == []


def test_feed_raw_caps_a_line_without_its_newline_and_the_cr_before_it() -> None:
    framer = LineFramer(max_message_size=4)
    assert kinds(framer.feed_raw(b"abcd\r\nabcde\r\nab\n")) == [b"abcd\r\n", ("oversized", 5), b"ab\n"]
    assert kinds(framer.feed_raw(b"abcde\n")) == [("oversized", 5)]
    assert framer.feed_raw(b"abcd\r\n") == [b"abcd\r\n"]


def _framed_model(stream: bytes, limit: int) -> tuple[list[Any], list[Any]]:
    """What ``feed`` and ``feed_raw`` give for ``stream``, however it is split into reads, by the
    framing rules: (lines of ``feed``, lines of ``feed_raw``), an oversized line as "oversized"."""
    *complete, tail = stream.split(b"\n")
    cooked: list[Any] = []
    raw: list[Any] = []
    for line in complete:
        body = line[:-1] if line.endswith(b"\r") else line
        if len(body) > limit:
            cooked.append("oversized")
            raw.append("oversized")
            continue
        raw.append(line + b"\n")
        if body and not body.isspace():
            cooked.append(body)
    if len(tail) > limit and not (len(tail) == limit + 1 and tail.endswith(b"\r")):
        cooked.append("oversized")  # refused before its newline comes
        raw.append("oversized")
    return cooked, raw


@given(
    st.lists(st.sampled_from([b"{", b"a", b"\r", b"\n", b" "]), max_size=60).map(b"".join),
    st.lists(st.integers(min_value=0, max_value=60), max_size=6),
    st.integers(min_value=1, max_value=8),
)
def test_feed_and_feed_raw_frame_any_stream_split_anywhere_by_the_rules(
    stream: bytes, cuts: list[int], limit: int
) -> None:
    bounds = [0, *sorted(c for c in cuts if c <= len(stream)), len(stream)]
    reads = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    cooked, raw = LineFramer(max_message_size=limit), LineFramer(max_message_size=limit)
    got_cooked = [x for read in reads for x in cooked.feed(read)]
    got_raw = [x for read in reads for x in raw.feed_raw(read)]
    plain = [("oversized" if isinstance(x, OversizedMessage) else x) for x in got_cooked]
    plain_raw = [("oversized" if isinstance(x, OversizedMessage) else x) for x in got_raw]
    assert (plain, plain_raw) == _framed_model(stream, limit)


@pytest.mark.parametrize("bad", [0, -1])
def test_max_message_size_must_be_positive(bad: int) -> None:
    with pytest.raises(ValueError, match="max_message_size"):
        LineFramer(max_message_size=bad)


def test_default_max_message_size_is_32_mib() -> None:
    assert LineFramer().max_message_size == 32 * 1024 * 1024 == _core.DEFAULT_MAX_MESSAGE_SIZE


# -- parse / classify ----------------------------------------------------------------------------


def parse_obj(obj: Any) -> Any:
    return parse(orjson.dumps(obj))


def assert_invalid(msg: Any, code: int, id: Any = None) -> None:
    assert isinstance(msg, Invalid), msg
    assert msg.error.code == code
    assert msg.id == id


@pytest.mark.parametrize("line", [b"{", b"not json", b'{"jsonrpc":"2.0",}', b"[1,", b"\x00"])
def test_malformed_json_is_a_parse_error_with_null_id(line: bytes) -> None:
    msg = parse(line)
    assert_invalid(msg, PARSE_ERROR)
    assert isinstance(msg, Invalid) and msg.error.message == "Parse error"


@pytest.mark.parametrize("line", [b'{"jsonrpc":"2.0","method":"\xff"}', b"\xc3\x28", b'"\xed\xa0\x80"'])
def test_invalid_utf8_is_a_parse_error(line: bytes) -> None:
    assert_invalid(parse(line), PARSE_ERROR)


@pytest.mark.parametrize("line", [b"42", b"3.5", b'"a string"', b"null", b"true"])
def test_a_json_value_that_is_not_an_object_is_an_invalid_request(line: bytes) -> None:
    assert_invalid(parse(line), INVALID_REQUEST)


def test_missing_jsonrpc_is_an_invalid_request_that_keeps_a_readable_id() -> None:
    assert_invalid(parse_obj({"id": 5, "method": "m"}), INVALID_REQUEST, 5)
    assert_invalid(parse_obj({"jsonrpc": "1.0", "id": "abc", "method": "m"}), INVALID_REQUEST, "abc")
    assert_invalid(parse_obj({"jsonrpc": 2.0, "id": 7, "result": 1}), INVALID_REQUEST, 7)
    # an id that is not a valid request id is not echoed back
    assert_invalid(parse_obj({"id": True, "method": "m"}), INVALID_REQUEST, None)
    assert_invalid(parse_obj({"id": {"x": 1}, "method": "m"}), INVALID_REQUEST, None)


@pytest.mark.parametrize("request_id", [0, 17, -3, 2**53, "", "abc-1"])
def test_integer_and_string_request_ids_are_accepted(request_id: Any) -> None:
    msg = parse_obj({"jsonrpc": "2.0", "id": request_id, "method": "m", "params": {"a": 1}})
    assert isinstance(msg, Request)
    assert msg.id == request_id and type(msg.id) is type(request_id)
    assert msg.method == "m" and msg.params == {"a": 1}


@pytest.mark.parametrize("request_id", [True, False, 1.5, 1.0, {"a": 1}, [1]])
def test_bool_float_object_and_array_request_ids_are_rejected(request_id: Any) -> None:
    assert_invalid(parse_obj({"jsonrpc": "2.0", "id": request_id, "method": "m"}), INVALID_REQUEST)


@pytest.mark.parametrize("request_id", [True, False, 1.5, 1.0, {"a": 1}, [1]])
def test_bad_request_ids_are_rejected_with_object_params_too(request_id: Any) -> None:
    msg = parse_obj({"jsonrpc": "2.0", "id": request_id, "method": "m", "params": {"a": 1}})
    assert_invalid(msg, INVALID_REQUEST)


@pytest.mark.parametrize("response_id", [True, 1.5, None, [1]])
def test_a_success_response_with_a_bad_id_is_invalid(response_id: Any) -> None:
    assert_invalid(parse_obj({"jsonrpc": "2.0", "id": response_id, "result": {"a": 1}}), INVALID_REQUEST)


@pytest.mark.parametrize(
    "params",
    [None, {}, {"sessionId": "s", "update": {"text": 'é \n "q"', "n": [1, 2.5, None, True]}}, [1, "x"]],
)
@pytest.mark.parametrize("method", ["session/update", '_ext/"odd" método'])
def test_a_notification_encoder_writes_the_bytes_encode_notification_writes(method: str, params: Any) -> None:
    encode = notification_encoder(method)
    assert encode(params) == encode_notification(method, params)
    assert encode(params) == encode_notification(method, params)  # and again, from the same encoder


def test_a_message_without_id_is_a_notification_and_with_id_a_request() -> None:
    note = parse_obj({"jsonrpc": "2.0", "method": "m", "params": [1, 2]})
    assert isinstance(note, Notification)
    assert note.method == "m" and note.params == [1, 2]
    bare = parse_obj({"jsonrpc": "2.0", "method": "m"})
    assert isinstance(bare, Notification) and bare.params is None
    req = parse_obj({"jsonrpc": "2.0", "id": 1, "method": "m"})
    assert isinstance(req, Request) and req.params is None


def test_a_non_string_method_is_an_invalid_request() -> None:
    assert_invalid(parse_obj({"jsonrpc": "2.0", "id": 3, "method": 12}), INVALID_REQUEST, 3)


@pytest.mark.parametrize("params", [1, "s", True, 2.5])
def test_params_that_are_not_an_object_or_array_are_an_invalid_request(params: Any) -> None:
    assert_invalid(parse_obj({"jsonrpc": "2.0", "id": 9, "method": "m", "params": params}), INVALID_REQUEST, 9)
    assert_invalid(parse_obj({"jsonrpc": "2.0", "method": "m", "params": params}), INVALID_REQUEST)


def test_responses_with_result_or_error_are_classified() -> None:
    ok = parse_obj({"jsonrpc": "2.0", "id": 4, "result": {"x": [1]}})
    assert isinstance(ok, Response) and ok.id == 4 and ok.result == {"x": [1]}
    null_result = parse_obj({"jsonrpc": "2.0", "id": "s", "result": None})
    assert isinstance(null_result, Response) and null_result.id == "s" and null_result.result is None
    err = parse_obj({"jsonrpc": "2.0", "id": 4, "error": {"code": -32601, "message": "nope", "data": {"m": 1}}})
    assert isinstance(err, ErrorResponse) and err.id == 4
    assert (err.error.code, err.error.message, err.error.data) == (METHOD_NOT_FOUND, "nope", {"m": 1})
    anonymous = parse_obj({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
    assert isinstance(anonymous, ErrorResponse) and anonymous.id is None and anonymous.error.data is None


def test_a_response_with_both_result_and_error_is_invalid() -> None:
    msg = parse_obj({"jsonrpc": "2.0", "id": 2, "result": 1, "error": {"code": 1, "message": "x"}})
    assert_invalid(msg, INVALID_REQUEST, 2)


def test_a_response_with_neither_result_nor_error_or_without_id_is_invalid() -> None:
    assert_invalid(parse_obj({"jsonrpc": "2.0", "id": 2}), INVALID_REQUEST, 2)
    assert_invalid(parse_obj({"jsonrpc": "2.0", "result": 1}), INVALID_REQUEST)
    assert_invalid(parse_obj({"jsonrpc": "2.0", "id": None, "result": 1}), INVALID_REQUEST)
    assert_invalid(parse_obj({"jsonrpc": "2.0", "id": 1.5, "result": 1}), INVALID_REQUEST)


@pytest.mark.parametrize(
    "error",
    [
        "boom",
        None,
        {"code": "1", "message": "x"},
        {"code": 1},
        {"message": "x"},
        {"code": 1, "message": 5},
        {"code": 1.5, "message": "x"},
    ],
)
def test_a_malformed_error_object_becomes_an_internal_error_for_its_caller(error: Any) -> None:
    msg = parse_obj({"jsonrpc": "2.0", "id": 8, "error": error})
    assert isinstance(msg, ErrorResponse) and msg.id == 8
    assert msg.error.code == INTERNAL_ERROR
    assert msg.error.data == {"error": error}


def test_an_empty_array_is_an_invalid_request() -> None:
    assert_invalid(parse(b"[]"), INVALID_REQUEST)
    assert_invalid(parse(b" [ ] "), INVALID_REQUEST)


def test_a_non_empty_array_is_a_batch_of_classified_items() -> None:
    msg = parse_obj(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "a"},
            {"jsonrpc": "2.0", "method": "b"},
            {"jsonrpc": "2.0", "id": 2, "result": 3},
            42,
            [],
        ]
    )
    assert isinstance(msg, Batch)
    assert [type(i) for i in msg.items] == [Request, Notification, Response, Invalid, Invalid]
    assert all(i.error.code == INVALID_REQUEST for i in msg.items[3:] if isinstance(i, Invalid))


# -- encoders ------------------------------------------------------------------------------------


def single_line(data: bytes) -> Any:
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    return orjson.loads(data)


def test_encoded_requests_are_one_line_and_omit_absent_params() -> None:
    assert single_line(encode_request(3, "m", {"a": "x\ny"})) == {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "m",
        "params": {"a": "x\ny"},
    }
    assert single_line(encode_request("r", "m", None)) == {"jsonrpc": "2.0", "id": "r", "method": "m"}
    assert single_line(encode_request(1, "m", [])) == {"jsonrpc": "2.0", "id": 1, "method": "m", "params": []}


def test_encoded_notifications_are_one_line_and_omit_absent_params() -> None:
    assert single_line(encode_notification("n", None)) == {"jsonrpc": "2.0", "method": "n"}
    assert single_line(encode_notification("n", {"t": "a\nb"})) == {
        "jsonrpc": "2.0",
        "method": "n",
        "params": {"t": "a\nb"},
    }


def test_encoded_results_keep_a_null_result() -> None:
    assert single_line(encode_result(1, None)) == {"jsonrpc": "2.0", "id": 1, "result": None}
    assert single_line(encode_result("x", {"k": [1]})) == {"jsonrpc": "2.0", "id": "x", "result": {"k": [1]}}


def test_encoded_errors_omit_data_when_none() -> None:
    assert single_line(encode_error(None, RequestError(-1, "m"))) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -1, "message": "m"},
    }
    err = RequestError.method_not_found("x/y")
    assert single_line(encode_error(5, err)) == {
        "jsonrpc": "2.0",
        "id": 5,
        "error": {"code": METHOD_NOT_FOUND, "message": "Method not found", "data": {"method": "x/y"}},
    }


def test_an_encoded_message_parses_back_to_the_same_message() -> None:
    req = parse(encode_request(12, "m", {"p": 1}))
    assert isinstance(req, Request) and (req.id, req.method, req.params) == (12, "m", {"p": 1})
    err = parse(encode_error(12, RequestError(-32000, "auth", {"d": 1})))
    assert isinstance(err, ErrorResponse) and (err.error.code, err.error.message, err.error.data) == (
        -32000,
        "auth",
        {"d": 1},
    )


# -- the architecture rule -----------------------------------------------------------------------

ASYNC_LIBRARIES = {"trio", "anyio", "asyncio"}
VARIANTS = ("v1", "v1_unstable", "v2", "v2_unstable")


def core_sources() -> dict[Path, ast.Module]:
    files = sorted(CORE_DIR.rglob("*.py"))
    assert files, CORE_DIR
    return {path: ast.parse(path.read_text(encoding="utf-8"), filename=str(path)) for path in files}


@functools.cache
def acp_method_names() -> frozenset[str]:
    names: set[str] = set()
    for variant in VARIANTS:
        mod = importlib.import_module(f"acp_schema.{variant}")
        names |= set(mod.METHODS) | set(mod.REQUESTS) | set(mod.NOTIFICATIONS)
    assert {"$/cancel_request", "session/prompt", "initialize"} <= names
    return frozenset(names)


def imported_modules(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) for every import statement and ``__import__``/``import_module`` call with a literal name."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("__import__", "import_module"):
                out.append((node.lineno, str(node.args[0].value)))
    return out


def test_core_imports_no_async_library() -> None:
    offenders = [
        f"{path.name}:{line}: {module}"
        for path, tree in core_sources().items()
        for line, module in imported_modules(tree)
        if module.split(".")[0] in ASYNC_LIBRARIES
    ]
    assert offenders == []


def test_the_import_scan_would_catch_an_async_import() -> None:
    tree = ast.parse("import os, trio\nfrom anyio.abc import X\nfrom . import y\nimportlib.import_module('asyncio')\n")
    assert [m for _, m in imported_modules(tree) if m.split(".")[0] in ASYNC_LIBRARIES] == [
        "trio",
        "anyio.abc",
        "asyncio",
    ]


def string_constants(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, text) of every string literal, docstrings and f-string parts included."""
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_core_contains_no_acp_method_name_in_any_string_literal() -> None:
    names = acp_method_names()
    offenders = [
        f"{path.name}:{line}: {name!r}"
        for path, tree in core_sources().items()
        for line, text in string_constants(tree)
        for name in names
        if name in text
    ]
    assert offenders == []


def test_the_method_name_scan_would_catch_a_literal() -> None:
    source = '"""Handles ``session/cancel``."""\nCANCEL = "$/cancel_request"\ndef f(m=f"x{1}initialize"): pass\n'
    found = {name for _, text in string_constants(ast.parse(source)) for name in acp_method_names() if name in text}
    assert found == {"session/cancel", "$/cancel_request", "initialize"}


def test_importing_the_core_in_a_fresh_interpreter_does_not_load_trio() -> None:
    code = (
        "import sys, acp_trio._core\n"
        "bad = sorted(m for m in ('trio', 'anyio', 'asyncio') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip() == ""


# -- the start of an oversized line ----------------------------------------------------------------


def test_an_oversized_line_keeps_its_first_4_kib_in_one_read_and_across_reads() -> None:
    line = b'{"jsonrpc":"2.0","id":5,"method":"m","params":{"pad":"' + b"x" * 10_000 + b'"}}'
    whole = LineFramer(1000).feed(line + b"\n")
    assert isinstance(whole[0], OversizedMessage) and whole[0].head == line[:OVERSIZED_HEAD]
    pieces = feed_all(LineFramer(1000), [line[i : i + 300] for i in range(0, len(line), 300)] + [b"\n"])
    assert isinstance(pieces[0], OversizedMessage) and pieces[0].head.startswith(line[:900])


@pytest.mark.parametrize(
    ("head", "fields"),
    [
        (
            b'{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":"bbb',
            {"jsonrpc": "2.0", "id": 7, "method": "x", "params": ...},
        ),
        (b' { "id" : "s-1" , "result": [1,2', {"id": "s-1", "result": ...}),
        (b'{"method":"x","params":{"big":"', {"method": "x", "params": ...}),
        (b'{"jsonrpc":"2.0","id":123', {"jsonrpc": "2.0", "id": ...}),  # its digits may go on past the cut
        (b'{"id":12,"method', {"id": 12}),
        (b'{"id":"caf\xc3', {"id": ...}),  # a string cut short (inside a character) is not complete
        (b"[1,2]", {}),
        (b"garbage", {}),
        (b"", {}),
    ],
)
def test_head_fields_reads_the_members_that_fit(head: bytes, fields: dict[str, Any]) -> None:
    assert head_fields(head) == fields

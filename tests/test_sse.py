"""The SSE parser of the Streamable HTTP client (``acp_trio.transports._sse``).

Spec: the WHATWG HTML standard, "Server-sent events", "Interpreting an event stream".
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_trio.transports._sse import SseParser, SseStreamError


def events_of(*chunks: bytes, limit: int = 1 << 20) -> list[bytes]:
    parser = SseParser(limit)
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    return out


def test_each_event_is_its_data_lines_joined_with_lf_and_dispatched_by_an_empty_line() -> None:
    stream = b'data: {"a":1}\n\ndata:{"b":2}\n\ndata: one\ndata:  two\n\ndata: unfinished'
    assert events_of(stream) == [b'{"a":1}', b'{"b":2}', b"one\n two"]


def test_crlf_cr_and_lf_all_end_lines_even_split_between_reads() -> None:
    assert events_of(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n") == [b"a", b"b", b"c"]
    assert events_of(b"data: a\r", b"\n\r", b"\ndata: b\r", b"\r") == [b"a", b"b"]


def test_comments_other_fields_and_empty_events_give_no_message() -> None:
    stream = b": keep-alive\n\nevent: message\nid: 7\nretry: 10\ndata: x\n\nid: 8\n\ndata:\n\nfoo\n\n"
    assert events_of(stream) == [b"x"]


def test_a_leading_bom_is_dropped_even_when_split() -> None:
    assert events_of(b"\xef\xbb", b"\xbfdata: x\n\n") == [b"x"]
    assert events_of(b"\xef\xbb\xbfdata: y\n\n") == [b"y"]


def test_an_event_or_an_unended_line_over_the_limit_raises() -> None:
    with pytest.raises(SseStreamError, match="100 byte limit"):
        events_of(b"data: " + b"x" * 60 + b"\ndata: " + b"y" * 60 + b"\n", limit=100)
    with pytest.raises(SseStreamError, match="100 byte limit"):
        events_of(b"data: " + b"x" * 200, limit=100)
    assert events_of(b"data: " + b"x" * 100 + b"\n\n", limit=100) == [b"x" * 100]


messages = st.lists(
    st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=30),
    min_size=1,
    max_size=8,
)


@given(
    st.lists(messages, max_size=6),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_any_split_of_a_stream_into_reads_gives_the_same_events(
    events: list[list[str]], newline: bytes, cuts: list[int]
) -> None:
    stream = b"".join(b"".join(b"data: " + line.encode() + newline for line in event) + newline for event in events)
    expected = [b"\n".join(line.encode() for line in event) for event in events]
    expected = [event for event in expected if event]
    points = sorted({min(cut, len(stream)) for cut in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    # a CR at the very end of the stream may still be the start of a CRLF: it ends the line anyway
    assert events_of(*chunks) == expected

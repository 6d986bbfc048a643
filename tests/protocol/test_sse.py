from __future__ import annotations

import pytest

from proxy.core.errors import MessageTooLarge
from proxy.protocol.sse import SSEDecoder, SSEEvent, encode_event


def test_events_split_across_chunks_are_reassembled() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 7\nevent: mess") == []
    assert decoder.feed(b'age\ndata: {"a":\r\ndata: 1}\r\n\r\n') == [
        SSEEvent(data='{"a":\n1}', event="message", id="7")
    ]
    assert decoder.last_event_id == "7"


def test_priming_event_with_only_an_id_and_retry_is_reported() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: p1\nretry: 1500\ndata:\n\n") == [SSEEvent(data="", id="p1", retry=1500)]


def test_comments_and_blank_dispatches_yield_nothing() -> None:
    assert SSEDecoder().feed(b": keepalive\n\n\n") == []


def test_a_cr_at_the_end_of_a_chunk_waits_for_a_possible_lf() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r") == []
    assert decoder.feed(b"\n\r\n") == [SSEEvent(data="x")]


def test_encode_then_decode_round_trips() -> None:
    raw = encode_event('{"x": "a\\nb"}\nsecond', event_id="s1-4", event="message", retry=100)
    assert SSEDecoder().feed(raw) == [SSEEvent(data='{"x": "a\\nb"}\nsecond', id="s1-4", retry=100)]


def test_an_event_larger_than_the_limit_is_refused_naming_the_limit() -> None:
    with pytest.raises(MessageTooLarge, match="an SSE event exceeded 10 bytes"):
        SSEDecoder(max_event_size=10).feed(b"data: " + b"x" * 20)


def test_an_event_past_the_limit_is_refused_even_when_one_chunk_brings_it_whole() -> None:
    with pytest.raises(MessageTooLarge, match="exceeded 10 bytes"):
        SSEDecoder(max_event_size=10).feed(b"data: 123456\ndata: 789012\n\n")


def test_empty_data_lines_count_their_newlines_so_a_flood_of_them_is_refused() -> None:
    # Each data line after the first adds a newline to the event: a hostile server's stream of
    # "data:" lines is an event that grows by one character per six bytes.
    with pytest.raises(MessageTooLarge, match="exceeded 100 bytes"):
        SSEDecoder(max_event_size=100).feed(b"data:\n" * 1000)
    assert SSEDecoder(max_event_size=10).feed(b"data:\n" * 11 + b"\n") == [SSEEvent(data="\n" * 10)]


def test_a_retry_with_more_digits_than_int_takes_is_ignored() -> None:
    events = SSEDecoder().feed(b"retry: " + b"9" * 5000 + b"\ndata: x\n\n")
    assert events == [SSEEvent(data="x")]


def test_events_come_out_alike_however_the_bytes_are_chunked() -> None:
    raw = b"\xef\xbb\xbfid: 1\r\ndata: a\r\rdata: b\n\n: c\nevent: e\ndata:\r\n\r\nid: 2\ndata: z\n\n"
    whole = SSEDecoder().feed(raw)
    decoder = SSEDecoder()
    bytewise = [event for i in range(len(raw)) for event in decoder.feed(raw[i : i + 1])]
    assert whole == bytewise
    assert whole == [
        SSEEvent(data="a", id="1"),
        SSEEvent(data="b"),
        SSEEvent(data="", event="e"),
        SSEEvent(data="z", id="2"),
    ]


@pytest.mark.slow
def test_many_short_lines_in_one_chunk_are_decoded_in_linear_time() -> None:
    # A quadratic decoder copies the rest of the chunk per line: this would take minutes.
    chunk = b"\n" * 2_000_000 + b"data: x\n\n"
    assert SSEDecoder().feed(chunk) == [SSEEvent(data="x")]

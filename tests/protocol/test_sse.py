from __future__ import annotations

import pytest

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


def test_an_event_larger_than_the_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeded"):
        SSEDecoder(max_event_size=10).feed(b"data: " + b"x" * 20)

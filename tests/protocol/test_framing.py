from __future__ import annotations

from proxy.core.errors import MessageTooLarge
from proxy.protocol.framing import LineBuffer, LineTooLong
from proxy.protocol.versions import LATEST, SUPPORTED, negotiate


def test_lines_are_returned_once_complete_and_blank_ones_dropped() -> None:
    lines = LineBuffer()
    assert lines.feed(b'{"a":') == []
    assert lines.feed(b'1}\r\n\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert lines.feed(b":3}\n") == [b'{"c":3}']


def test_an_endless_line_is_reported_once_and_dropped_up_to_its_newline() -> None:
    lines = LineBuffer(max_line=8)
    [refused] = lines.feed(b"x" * 10)
    assert isinstance(refused, LineTooLong)
    assert refused.message == "a message line exceeded 8 bytes (limits.max_server_message_bytes)"
    assert refused.data == {"limit": "max_server_message_bytes", "max": 8}
    assert lines.feed(b"still the same line") == []
    assert lines.feed(b" ends here\nok\n") == [b"ok"]


def test_an_overlong_line_that_arrives_whole_is_refused_and_its_neighbours_kept() -> None:
    lines = LineBuffer(max_line=8)
    first, refused, last = lines.feed(b"short\n" + b"y" * 20 + b"\nlast\n")
    assert (first, last) == (b"short", b"last")
    assert isinstance(refused, LineTooLong)


def test_the_rest_is_the_last_line_when_the_stream_ends_without_a_newline() -> None:
    lines = LineBuffer(max_line=8)
    assert lines.feed(b"a\nbc") == [b"a"]
    assert lines.rest() == b"bc"
    assert lines.rest() is None
    lines.feed(b"y" * 20)
    assert lines.rest() is None  # refused already


def test_a_line_of_exactly_the_limit_is_kept() -> None:
    assert LineBuffer(max_line=8).feed(b"12345678\r\n") == [b"12345678"]


def test_an_overlong_line_is_a_client_protocol_error_naming_the_limit() -> None:
    [refused] = LineBuffer(max_line=8).feed(b"z" * 10)
    assert isinstance(refused, MessageTooLarge)
    assert refused.code == -32600


def test_negotiation_keeps_a_supported_revision_and_offers_the_latest_otherwise() -> None:
    assert negotiate("2024-11-05") == "2024-11-05"
    assert negotiate("2099-01-01") == LATEST
    assert negotiate(None) == LATEST
    assert LATEST == SUPPORTED[-1] == "2025-11-25"


def test_kept_ends_of_an_overlong_line_come_with_its_refusal_when_it_ends() -> None:
    lines = LineBuffer(max_line=8, keep=3)
    assert lines.feed(b"ok\nabcdefghij") == [b"ok"]  # past the limit, but its end is not known yet
    assert lines.feed(b"klmnop") == []
    refused, after = lines.feed(b"qrs\r\nafter\n")
    assert isinstance(refused, LineTooLong)
    assert (refused.head, refused.tail, after) == (b"abc", b"qrs", b"after")


def test_kept_ends_of_an_overlong_line_that_arrives_whole() -> None:
    [refused] = LineBuffer(max_line=8, keep=3).feed(b"abcdefghijklm\n")
    assert isinstance(refused, LineTooLong)
    assert (refused.head, refused.tail) == (b"abc", b"klm")

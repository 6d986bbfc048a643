from __future__ import annotations

import pytest

from proxy.protocol.framing import LineBuffer, LineTooLong
from proxy.protocol.versions import LATEST, SUPPORTED, negotiate


def test_lines_are_returned_once_complete_and_blank_ones_dropped() -> None:
    lines = LineBuffer()
    assert lines.feed(b'{"a":') == []
    assert lines.feed(b'1}\r\n\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert lines.feed(b":3}\n") == [b'{"c":3}']


def test_an_endless_line_is_refused_and_the_buffer_recovers() -> None:
    lines = LineBuffer(max_line=8)
    with pytest.raises(LineTooLong):
        lines.feed(b"x" * 9)
    assert lines.feed(b"ok\n") == [b"ok"]


def test_negotiation_keeps_a_supported_revision_and_offers_the_latest_otherwise() -> None:
    assert negotiate("2024-11-05") == "2024-11-05"
    assert negotiate("2099-01-01") == LATEST
    assert negotiate(None) == LATEST
    assert LATEST == SUPPORTED[-1] == "2025-11-25"

"""A server's stderr: the last lines kept, a few a minute logged, the rest counted."""

from __future__ import annotations

from proxy.outbound.over_stdio.stderr import StderrTail


def test_only_the_last_lines_are_kept_each_cut_to_its_bound() -> None:
    tail = StderrTail(kept=3, logged_per_minute=100, line_bytes=4)
    tail.took([b"one", b"two"], 0.0)
    tail.took([b"three", b"four", b"fivefive"], 1.0, cut=[False, False, True])
    assert tail.last() == ["thre", "four", "five…"]
    assert tail.last(1) == ["five…"]
    assert tail.last(0) == []


def test_lines_past_the_rate_are_counted_and_the_count_logged_once_a_minute_later() -> None:
    tail = StderrTail(kept=2, logged_per_minute=2)
    assert tail.took([b"a", b"b", b"c"], 0.0) == ["a", "b"]
    assert tail.took([b"d"] * 1000, 59.0) == []
    logged = tail.took([b"e", b"f", b"g"], 60.0)
    assert logged == [
        "(1001 more lines not logged: at most 2 a minute, limits.stderr_lines_logged_per_minute)",
        "e",
        "f",
    ]
    assert tail.flush() == (
        "(1 more line not logged: at most 2 a minute, limits.stderr_lines_logged_per_minute)"
    )
    assert tail.flush() is None
    assert tail.last() == ["f", "g"]


def test_bytes_that_are_not_utf8_are_shown_replaced() -> None:
    tail = StderrTail(kept=1, logged_per_minute=1)
    assert tail.took([b"bad \xff"], 0.0) == ["bad \ufffd"]


def test_nothing_is_kept_or_logged_when_both_bounds_are_zero() -> None:
    tail = StderrTail(kept=0, logged_per_minute=0)
    assert tail.took([b"a"], 0.0) == []
    assert tail.last() == []
    assert tail.flush() is not None

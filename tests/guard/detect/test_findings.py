from __future__ import annotations

from proxy.guard.detect import Finding, redact


def f(detector: str, start: int, end: int) -> Finding:
    return Finding(detector, "secret", start, end)


def test_each_span_becomes_a_typed_placeholder() -> None:
    text = "key AKIA1234 and mail jo@example.com"
    found = [f("aws_access_key", 4, 12), f("email", 22, 36)]
    assert redact(text, found) == "key [REDACTED:aws_access_key] and mail [REDACTED:email]"


def test_overlapping_and_touching_spans_merge_into_one_placeholder_named_by_the_earliest() -> None:
    assert redact("abcdefghij", [f("b", 3, 6), f("a", 1, 4), f("c", 6, 8)]) == "a[REDACTED:a]ij"


def test_the_longer_of_two_spans_that_start_together_names_the_placeholder() -> None:
    assert redact("abcdefghij", [f("short", 2, 4), f("long", 2, 8)]) == "ab[REDACTED:long]ij"


def test_spans_out_of_range_are_clipped_and_empty_ones_ignored() -> None:
    assert redact("abc", [f("x", 2, 99), f("y", 1, 1), f("z", -5, -1)]) == "ab[REDACTED:x]"


def test_no_findings_leaves_the_text_alone() -> None:
    assert redact("plain", []) == "plain"

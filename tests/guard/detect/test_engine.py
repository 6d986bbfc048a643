from __future__ import annotations

import pytest

from proxy.guard.detect.engine import Rule, compile_rule, literal


def test_spans_are_in_characters_when_the_text_is_not_ascii() -> None:
    compiled = compile_rule(Rule("x", "secret", r"(b+)", 1))
    text = "ü€😀 bb é bbb"
    spans = list(compiled.spans(text, text.encode()))
    assert [text[s:e] for s, e in spans] == ["bb", "bbb"]


def test_a_check_sees_the_text_and_the_span() -> None:
    compiled = compile_rule(Rule("x", "secret", r"[0-9]+", 0, lambda t, s, e: t[s:e] != "12"))
    assert [s for s, _ in compiled.spans("12 345", b"12 345")] == [3]


def test_a_pattern_re2_refuses_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="RE2 cannot compile"):
        compile_rule(Rule("custom:bad", "pii", r"(a)\1"))  # a backreference: backtracking only


def test_literal_quotes_every_metacharacter() -> None:
    compiled = compile_rule(Rule("x", "secret", literal("a.b*(c)")))
    assert list(compiled.spans("a.b*(c) axb", b"a.b*(c) axb")) == [(0, 7)]

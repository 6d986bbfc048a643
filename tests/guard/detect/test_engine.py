from __future__ import annotations

import pytest

from proxy.guard.detect.engine import Prefilter, Rule, Shapes, compile_rule, literal


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


def _prefilter(*rules: Rule) -> Prefilter:
    return Prefilter([compile_rule(rule) for rule in rules])


def test_a_rule_with_needs_runs_only_on_text_where_its_needs_is_found() -> None:
    rule = Rule("x", "pii", r"[0-9]{3}", needs=r"7[0-9]")
    prefilter = _prefilter(rule)
    assert prefilter.candidates(b"call 123 now") == []
    assert [c.rule for c in prefilter.candidates(b"call 712 now")] == [rule]


def test_rules_with_literals_and_rules_with_needs_are_chosen_together_in_their_order() -> None:
    key = Rule("key", "secret", r"AKIA[A-Z0-9]{16}")
    card = Rule("card", "pii", r"[0-9]{12}", needs=r"[0-9]{12}")
    mail = Rule("mail", "pii", r"[a-z]+@[a-z]+", needs="@")
    prefilter = _prefilter(key, card, mail)
    text = b"AKIAQ3EGZ5TJ7LMB4XHN and 411111111111"
    assert [c.rule.detector for c in prefilter.candidates(text)] == ["key", "card"]
    assert prefilter.candidates(b"nothing here") == []


class _Blind:
    """An RE2 set that ran out of memory: it answers no pattern at all (not even the end-of-text sentinel)."""

    def Match(self, encoded: bytes) -> list[int]:
        return []


def test_when_the_set_cannot_tell_every_rule_with_needs_runs() -> None:
    rule = Rule("x", "pii", r"[0-9]{3}", needs=r"7[0-9]")
    prefilter = _prefilter(rule)
    shapes = prefilter._shapes
    assert shapes is not None
    shapes._set = _Blind()
    assert shapes.present(b"call 712") is None
    assert [c.rule for c in prefilter.candidates(b"call 123 now")] == [rule]


def test_shapes_answer_which_patterns_are_present() -> None:
    shapes = Shapes([r"[0-9]{4}", "@", r"\+[1-9]"])
    assert shapes.present(b"mail ann@example.com from 2024") == frozenset({0, 1, shapes._known})
    assert shapes.present(b"") == frozenset({shapes._known})


def test_a_needs_pattern_re2_refuses_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="RE2 cannot compile"):
        Shapes([r"(a)\1"])


def test_a_rule_with_a_needs_run_runs_only_where_a_long_enough_run_of_its_alphabet_is_found() -> None:
    rule = Rule("blob", "content", r"[ab]{8,}", needs_run=("ab", 8))
    word = Rule("word", "pii", r"[a-z]+@[a-z]+", needs="@")
    prefilter = _prefilter(rule, word)
    assert prefilter.candidates(b"abababa ababab") == []  # runs of 7 and 6
    assert [c.rule for c in prefilter.candidates(b"x abababab x")] == [rule]
    assert [c.rule for c in prefilter.candidates("\u00e9abababab@x".encode())] == [rule, word]
    assert prefilter.candidates("abab\u00e9abab".encode()) == []  # a non-ASCII character breaks the run
    assert prefilter._filter is None  # no rule without a needs: no atoms pass


def test_a_needs_run_alphabet_must_be_ascii() -> None:
    with pytest.raises(ValueError, match="ASCII"):
        _prefilter(Rule("x", "pii", "\u00e9{3}", needs_run=("\u00e9", 3)))


def test_a_long_needs_run_is_found_wherever_it_starts_and_a_much_shorter_one_never() -> None:
    """A long run is looked for in every 8th character (32 of them in a row for 256): a run
    of 248 holds at most 31 of them, so it is never taken for one of 256."""
    rule = Rule("blob", "content", r"[ab]{256,}", needs_run=("ab", 256))
    prefilter = _prefilter(rule)
    for start in range(0, 20):
        for length, present in ((256, True), (300, True), (248, False)):
            text = b"x" * start + b"ab" * (length // 2) + b"a" * (length % 2) + b" x"
            assert bool(prefilter.candidates(text)) is present, (start, length)

"""Rules and how they run: one RE2 program per rule, matched over UTF-8, spans in characters.

A :class:`Rule` is a detector's pattern, the capture group whose span is the finding, and an
optional check that sees the whole (normalised) text and the span, for validation (checksums,
entropy) and context (what stands next to the match). RE2 runs every pattern in time linear in
the text, whatever the text; the checks are linear in the match.

RE2 is driven through its extension module (``re2._re2``), as :mod:`proxy.policy.patterns`
explains: the Python wrapper converts offsets on every call. Here byte offsets become character
offsets only when the text is not ASCII, by counting forward from the previous match.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from re2 import _re2  # type: ignore[import-untyped]

__all__ = ["ALL_KINDS", "Check", "Compiled", "Gate", "Prefilter", "Probe", "Rule", "compile_rule", "literal"]

ALL_KINDS: Final = frozenset({"text", "result", "definition"})
_MAX_MEM: Final = 8 << 20
_UNANCHORED: Final = _re2.RE2.Anchor.UNANCHORED

Check = Callable[[str, int, int], bool]
"""``check(text, start, end)``: whether ``text[start:end]`` (normalised text) is a finding."""

Gate = Callable[["Probe"], bool]
"""``gate(probe)``: whether the text may hold a match at all (see :class:`Probe`)."""


class Probe:
    """Cheap views of one text for the gates, each computed once, on first use.

    ``numbers`` are the shapes of the stretches that could hold a number worth a look (a digit,
    then 5 or more digits, capitals and separators, after up to two capitals), each byte
    written as its class: ``0`` for a digit, ``A``/``a`` for a letter, ``+-./()`` and space
    as themselves. So "a card number's 4-4-4 groups" is ``b"0000 0000 0" in shape``, tested on a
    few short stretches instead of the whole text.
    """

    __slots__ = ("_numbers", "encoded")

    def __init__(self, encoded: bytes) -> None:
        self.encoded = encoded
        self._numbers: bytes | None = None

    @property
    def numbers(self) -> bytes:
        """The shapes of the number-like stretches, joined by ``_`` (a byte no needle holds)."""
        if self._numbers is None:
            found = []
            pos, size = 0, len(self.encoded)
            while pos < size:
                start, end = _NUMBERS.Match(_UNANCHORED, self.encoded, pos, size)[0]
                if start < 0:
                    break
                found.append(self.encoded[start:end])
                pos = end
            self._numbers = b"_".join(found).translate(_SHAPE)
        return self._numbers


def _shape_of(byte: int) -> int:
    ch = chr(byte)
    if ch.isascii() and ch.isdigit():
        return ord("0")
    if ch.isascii() and ch.isupper():
        return ord("A")
    if ch.isascii() and ch.islower():
        return ord("a")
    return byte if ch in "+-./() " else ord("_")


_SHAPE: Final = bytes(_shape_of(b) for b in range(256))
_NUMBERS: Final = _re2.RE2(rb"(?:[A-Z]{1,2}[ -]?)?[+(]?[0-9][0-9A-Z ().+/-]{5,60}", _re2.RE2.Options())


@dataclass(frozen=True, slots=True)
class Rule:
    """One pattern of one detector. ``group`` is the capture whose span is reported (0: the
    whole match); ``kinds`` the scan kinds it runs on.

    ``not_after``: characters that must not stand just before the reported span (a token's
    left boundary, checked here rather than in the pattern: a pattern that begins with a literal
    lets RE2 skip ahead with ``memchr``, one that begins with ``(?:^|[^...])`` or ``\\b`` makes it
    step through every byte). ``gate``: a cheap test of the whole text that must pass before the
    pattern runs at all, for patterns without a literal RE2's prefilter can use.
    """

    detector: str
    category: str
    pattern: str
    group: int = 0
    check: Check | None = None
    kinds: frozenset[str] = ALL_KINDS
    not_after: str = ""
    gate: Gate | None = None


@dataclass(frozen=True, slots=True)
class Compiled:
    rule: Rule
    program: Any

    def spans(self, text: str, encoded: bytes) -> Iterator[tuple[int, int]]:
        """Character spans of ``rule.group`` for each match in ``text`` (``encoded`` is its
        UTF-8), checks applied. Matches do not overlap; an empty match moves on one byte."""
        ascii_text = len(encoded) == len(text)
        group = self.rule.group
        check = self.rule.check
        not_after = self.rule.not_after
        pos, size = 0, len(encoded)
        byte_mark = char_mark = 0  # a byte offset and its character offset, moving forward
        while pos <= size:
            found = self.program.Match(_UNANCHORED, encoded, pos, size)
            whole = found[0]
            if whole[0] < 0:
                return
            start_b, end_b = found[group]
            pos = whole[1] if whole[1] > whole[0] else whole[1] + 1
            if start_b < 0:
                continue
            if ascii_text:
                start, end = start_b, end_b
            else:
                char_mark += _re2.BytesToCharLen(encoded, byte_mark, start_b)
                byte_mark = start_b
                start = char_mark
                end = start + _re2.BytesToCharLen(encoded, start_b, end_b)
            if not_after and start > 0 and text[start - 1] in not_after:
                continue
            if check is None or check(text, start, end):
                yield start, end


class Prefilter:
    """Which of many rules can match a text, in one pass (RE2's FilteredRE2).

    RE2 reduces each pattern to literal "atoms" that any match must contain (``akia`` for an
    AWS key id, ``ignore``/``disregard``/... for an override); one pass of an automaton over the
    text finds the atoms present, and only the rules they allow run. A pattern with no usable
    atom (a digit shape, a short literal) always passes, unless its :attr:`Rule.gate` says no.
    The atom automaton is a set of literals, so its cost stays linear and small on any input,
    unlike a set of the full patterns (whose DFA hostile text can make thrash).
    """

    def __init__(self, rules: Sequence[Compiled]) -> None:
        self._rules = tuple(rules)
        self._filter: Any | None = None
        if self._rules:
            options = _options()
            self._filter = _re2.Filter()
            for compiled in self._rules:
                if self._filter.Add(compiled.rule.pattern.encode("utf-8"), options) < 0:
                    raise ValueError(f"{compiled.rule.detector}: RE2 cannot filter {compiled.rule.pattern!r}")
            self._filter.Compile()

    def candidates(self, encoded: bytes) -> list[Compiled]:
        """The rules that may match ``encoded``, in their order."""
        if self._filter is None:
            return []
        probe = Probe(encoded)
        indices = sorted(self._filter.Match(encoded, True) or ())
        chosen = []
        for index in indices:
            compiled = self._rules[index]
            gate = compiled.rule.gate
            if gate is None or gate(probe):
                chosen.append(compiled)
        return chosen


def _options() -> Any:
    options = _re2.RE2.Options()
    options.log_errors = False
    options.max_mem = _MAX_MEM
    options.encoding = _re2.RE2.Options.Encoding.UTF8
    return options


def compile_rule(rule: Rule) -> Compiled:
    """``rule`` with its RE2 program.

    Raises:
        ValueError: RE2 cannot compile the pattern (the message says why).
    """
    program = _re2.RE2(rule.pattern.encode("utf-8"), _options())
    if not program.ok():
        raise ValueError(f"{rule.detector}: RE2 cannot compile {rule.pattern!r}: {program.error()}")
    if rule.group > program.NumberOfCapturingGroups():
        raise ValueError(f"{rule.detector}: no capture group {rule.group} in {rule.pattern!r}")
    return Compiled(rule, program)


def literal(text: str) -> str:
    """``text`` as an RE2 pattern that matches it literally."""
    quoted: bytes = _re2.RE2.QuoteMeta(text.encode("utf-8"))
    return quoted.decode("utf-8")

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

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from re2 import _re2  # type: ignore[import-untyped]

__all__ = ["ALL_KINDS", "Check", "Compiled", "Rule", "compile_rule", "literal"]

ALL_KINDS: Final = frozenset({"text", "result", "definition"})
_MAX_MEM: Final = 8 << 20
_UNANCHORED: Final = _re2.RE2.Anchor.UNANCHORED

Check = Callable[[str, int, int], bool]
"""``check(text, start, end)``: whether ``text[start:end]`` (normalised text) is a finding."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One pattern of one detector. ``group`` is the capture whose span is reported (0: the
    whole match); ``kinds`` the scan kinds it runs on."""

    detector: str
    category: str
    pattern: str
    group: int = 0
    check: Check | None = None
    kinds: frozenset[str] = ALL_KINDS


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
            if check is None or check(text, start, end):
                yield start, end


def compile_rule(rule: Rule) -> Compiled:
    """``rule`` with its RE2 program.

    Raises:
        ValueError: RE2 cannot compile the pattern (the message says why).
    """
    options = _re2.RE2.Options()
    options.log_errors = False
    options.max_mem = _MAX_MEM
    options.encoding = _re2.RE2.Options.Encoding.UTF8
    program = _re2.RE2(rule.pattern.encode("utf-8"), options)
    if not program.ok():
        raise ValueError(f"{rule.detector}: RE2 cannot compile {rule.pattern!r}: {program.error()}")
    if rule.group > program.NumberOfCapturingGroups():
        raise ValueError(f"{rule.detector}: no capture group {rule.group} in {rule.pattern!r}")
    return Compiled(rule, program)


def literal(text: str) -> str:
    """``text`` as an RE2 pattern that matches it literally."""
    quoted: bytes = _re2.RE2.QuoteMeta(text.encode("utf-8"))
    return quoted.decode("utf-8")

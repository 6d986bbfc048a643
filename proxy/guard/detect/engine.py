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

__all__ = ["ALL_KINDS", "Check", "Compiled", "Prefilter", "Rule", "Shapes", "compile_rule", "literal"]

ALL_KINDS: Final = frozenset({"text", "result", "definition"})
_MAX_MEM: Final = 8 << 20
_UNANCHORED: Final = _re2.RE2.Anchor.UNANCHORED

Check = Callable[[str, int, int], bool]
"""``check(text, start, end)``: whether ``text[start:end]`` (normalised text) is a finding."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One pattern of one detector. ``group`` is the capture whose span is reported (0: the
    whole match); ``kinds`` the scan kinds it runs on.

    ``not_after``: characters that must not stand just before the reported span (a token's
    left boundary, checked here rather than in the pattern: a pattern that begins with a literal
    lets RE2 skip ahead with ``memchr``, one that begins with ``(?:^|[^...])`` or ``\\b`` makes it
    step through every byte). ``needs``: a simpler pattern that every text holding a match also
    matches (a necessary condition, never a sufficient one: a literal the match must contain, or
    the pattern's core without its counted parts); the rule runs only where it is found (see
    :class:`Prefilter`). ``needs_run``: instead of ``needs``, a run of at least so many
    characters of an ASCII alphabet (a long class count in the set would multiply its states).
    Every built-in rule has one or the other; a rule with neither is prefiltered by its literals,
    in a second pass.
    """

    detector: str
    category: str
    pattern: str
    group: int = 0
    check: Check | None = None
    kinds: frozenset[str] = ALL_KINDS
    not_after: str = ""
    needs: str = ""
    needs_run: tuple[str, int] | None = None


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
    """Which of many rules can match a text, in one pass of RE2 over it, in C.

    Every rule with :attr:`Rule.needs` (every built-in rule has one) is looked for by its needs:
    one RE2 set of all of them answers which are present, and a rule whose needs is absent does
    not run. A rule without needs (a policy's own pattern) is looked for by the literal "atoms"
    RE2's FilteredRE2 reduces it to (``akia`` for an AWS key id): a second pass, made only when
    such rules exist.

    The needs are literals, words and short shapes with short counts over narrow classes, so the
    set's automaton stays small and its cost linear and small on any input: a count over a broad
    class (``[A-Za-z0-9+/]{16}``) multiplies the states of everything else, and on random
    letters and digits the DFA then rebuilds itself all the time (~300 ms/MiB instead of ~4).
    Such a rule names :attr:`Rule.needs_run` instead: a run of ``n`` characters holds ``n // s``
    consecutive characters of every ``s``-th one, so a slice with a step, translated, tells
    (~2 µs per 4 KiB, where translating the whole text costs 7). Should the set's DFA still run
    out of memory on some text, every needs counts as present: slower, never blind.
    """

    def __init__(self, rules: Sequence[Compiled], *, max_mem: int = _MAX_MEM) -> None:
        self._rules = tuple(rules)
        needs = sorted({c.rule.needs for c in self._rules if c.rule.needs})
        self._shapes = Shapes(needs, max_mem=max_mem) if needs else None
        # Per needs (by its index in the set), the indices of the rules that need it.
        position = {need: i for i, need in enumerate(needs)}
        by_needs: list[list[int]] = [[] for _ in needs]
        for index, compiled in enumerate(self._rules):
            if compiled.rule.needs:
                by_needs[position[compiled.rule.needs]].append(index)
        self._by_needs = tuple(tuple(indices) for indices in by_needs)
        self._all_needing = tuple(sorted(i for indices in self._by_needs for i in indices))
        runs: dict[tuple[str, int], list[int]] = {}
        for index, compiled in enumerate(self._rules):
            if compiled.rule.needs_run is not None and not compiled.rule.needs:
                runs.setdefault(compiled.rule.needs_run, []).append(index)
        self._runs = tuple(
            (_marks(alphabet), *_sampled(length), tuple(indices))
            for (alphabet, length), indices in runs.items()
        )
        self._filter: Any | None = None
        self._unfiltered = tuple(
            i for i, c in enumerate(self._rules) if not c.rule.needs and c.rule.needs_run is None
        )
        if self._unfiltered:
            options = _options()
            self._filter = _re2.Filter()
            for index in self._unfiltered:
                pattern = self._rules[index].rule.pattern
                if self._filter.Add(pattern.encode("utf-8"), options) < 0:
                    raise ValueError(f"{self._rules[index].rule.detector}: RE2 cannot filter {pattern!r}")
            self._filter.Compile()

    def candidates(self, encoded: bytes) -> list[Compiled]:
        """The rules that may match ``encoded``, in their order."""
        indices: list[int] = []
        if self._shapes is not None:
            present = self._shapes.present(encoded)
            if present is None:
                indices.extend(self._all_needing)
            else:
                by_needs = self._by_needs
                for need in present:
                    if need < len(by_needs):  # not the end-of-text sentinel
                        indices.extend(by_needs[need])
        for marks, step, run, needing in self._runs:
            if run in encoded[::step].translate(marks):
                indices.extend(needing)
        if self._filter is not None:
            unfiltered = self._unfiltered
            indices.extend(unfiltered[i] for i in self._filter.Match(encoded, True) or ())
        if not indices:
            return []
        rules = self._rules
        return [rules[i] for i in sorted(indices)]


class Shapes:
    """Which of ``patterns`` occur in a text, in one pass (an RE2 set).

    The set answers nothing, rather than an error, when its DFA runs out of memory; so a
    sentinel that matches at the end of every text (``\\z``) rides along, and an answer without it
    means "not known". The sentinel is ``\\z``, not the empty pattern: an empty pattern matches at
    every position, which keeps RE2's DFA in matching states and more than doubles the pass
    (4 KiB of prose, thread CPU: 16.6 µs with it, 6.7 µs with ``\\z``).

    Raises:
        ValueError: RE2 cannot compile a pattern, or the set.
    """

    def __init__(self, patterns: Sequence[str], *, max_mem: int = _MAX_MEM) -> None:
        options = _options()
        options.max_mem = max_mem
        self._set = _re2.Set(_UNANCHORED, options)
        for pattern in patterns:
            if self._set.Add(pattern.encode("utf-8")) < 0:
                raise ValueError(f"RE2 cannot compile {pattern!r}")
        self._known = self._set.Add(rb"\z")
        if not self._set.Compile():
            raise ValueError("RE2 cannot compile the set of needs")

    def present(self, encoded: bytes) -> frozenset[int] | None:
        """The indices of the patterns found in ``encoded``; None when the set could not tell."""
        found = self._set.Match(encoded)
        if self._known not in found:
            return None
        return frozenset(found)


def _marks(alphabet: str) -> bytes:
    """A ``bytes.translate`` table: 1 for the bytes of ``alphabet`` (ASCII), 0 for the rest."""
    if not alphabet.isascii():
        raise ValueError(f"a needs_run alphabet must be ASCII: {alphabet!r}")
    return bytes(1 if chr(b) in alphabet else 0 for b in range(256))


def _sampled(length: int) -> tuple[int, bytes]:
    """The step to sample a text at, and what a run of ``length`` leaves in the sample: at least
    ``length // step`` consecutive sampled characters are the run's (32 of them; all of a short
    run's)."""
    step = max(1, length // 32)
    return step, b"\x01" * (length // step)


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

# ruff: noqa: RUF001, RUF002  (this module is about look-alike characters: it must spell them)
"""The text the detectors read: NFKC, invisible characters out, look-alike letters folded, with a
map from every position back to the original text.

An attacker hides a secret or an instruction from a pattern by writing it differently, not by
writing something else: ``AKIA`` with a zero-width space inside, Cyrillic ``А`` for Latin ``A``,
full-width ``ｇｈｐ＿``, Unicode tag characters that spell ASCII invisibly (what "ASCII
smuggling" hides instructions in). :func:`normalise` undoes each of these before matching:

* NFKC, one character at a time (full-width forms, ligatures, compatibility digits);
* zero-width, bidi-control, word-joiner, BOM and soft-hyphen characters are removed; Unicode tag
  characters (U+E0020–U+E007E) become the ASCII they encode, so smuggled text is read. Each is
  also reported as a hidden-text span, except where writing systems need it: a zero-width joiner
  or non-joiner, or a left-to-right/right-to-left mark, beside a non-ASCII letter or symbol
  (emoji sequences, Persian, Indic scripts, Hebrew), and tag characters after a black flag
  (subdivision flags such as Scotland's);
* Cyrillic and Greek letters that look like Latin ones are folded to Latin (a table of the
  common confusables; the full Unicode confusables list is much larger and mostly irrelevant to
  ASCII-shaped secrets);
* with ``json_escapes``, ``\\uXXXX`` escapes (text that was JSON-encoded twice) become the
  characters they stand for.

ASCII text (the common case) is returned as it is, at no cost. Positions map back exactly inside
unchanged stretches; a changed character maps to the whole of what it came from.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import Final

__all__ = ["Normalised", "normalise"]

# Removed for matching. Zero-width and joiners, bidi controls, word joiner and invisible
# operators, BOM, soft hyphen, Mongolian vowel separator, Hangul fillers, variation selectors.
_INVISIBLE: Final = frozenset(
    {0x00AD, 0x180E, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x2028, 0x2029, 0xFEFF, 0x115F, 0x1160}
    | set(range(0x202A, 0x202F))
    | set(range(0x2060, 0x2070))
    | {0x3164, 0xFFA0}
)
_VARIATION: Final = frozenset(list(range(0xFE00, 0xFE10)) + list(range(0xE0100, 0xE01F0)))
# Joiners and direction marks that scripts and emoji use legitimately beside non-ASCII text.
_SCRIPT_MARKS: Final = frozenset({0x200C, 0x200D, 0x200E, 0x200F})
_TAG_BASE: Final = 0xE0000
_BLACK_FLAG: Final = 0x1F3F4

# Cyrillic and Greek letters that render like Latin letters, and a few symbols.
_CONFUSABLES: Final = {
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C",
    "Т": "T", "Х": "X", "У": "Y", "І": "I", "Ј": "J", "Ѕ": "S", "Ԁ": "d", "а": "a", "е": "e",
    "о": "o", "р": "p", "с": "c", "х": "x", "у": "y", "і": "i", "ј": "j", "ѕ": "s", "һ": "h",
    "ԁ": "d", "ԛ": "q", "ԝ": "w", "ӏ": "l", "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H",
    "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    "ο": "o", "ν": "v", "α": "a", "ι": "i", "κ": "k", "ρ": "p", "τ": "t", "υ": "u", "χ": "x",
    "‐": "-", "‑": "-", "‒": "-", "–": "-", "—": "-", "−": "-", "⁄": "/", "∕": "/",
}  # fmt: skip
_FOLD: Final = str.maketrans(_CONFUSABLES)
_SPECIAL: Final = frozenset(_CONFUSABLES) | {
    chr(c) for c in _INVISIBLE | _VARIATION | set(range(_TAG_BASE, _TAG_BASE + 0x80))
}

# Stretches that need a look: non-ASCII runs, and JSON escapes when asked. Python's re is safe
# here: a character class and a fixed-length escape cannot backtrack.
_NON_ASCII: Final = re.compile(r"[^\x00-\x7f]+")
_NON_ASCII_OR_ESCAPE: Final = re.compile(r"[^\x00-\x7f]+|(?:\\u[0-9A-Fa-f]{4})+")
_ESCAPE: Final = re.compile(r"\\u([0-9A-Fa-f]{4})")


@dataclass(frozen=True, slots=True)
class Normalised:
    """The normalised ``text`` and how to map its positions back.

    ``hidden`` lists the original spans of invisible characters that are a finding.
    """

    text: str
    hidden: tuple[tuple[int, int], ...]
    # Segments: the normalised start of each, its original start, and whether positions inside
    # it map one to one (copied text) or all to the whole original stretch (replaced text).
    _starts: tuple[int, ...]
    _origins: tuple[int, ...]
    _lengths: tuple[int, ...]  # original length of each segment
    _exact: tuple[bool, ...]

    @property
    def identity(self) -> bool:
        return not self._starts

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span of the normalised ``text[start:end]``."""
        if not self._starts:
            return start, end
        return self._start(start), self._end(end)

    def _start(self, pos: int) -> int:
        i = bisect.bisect_right(self._starts, pos) - 1
        if i < 0:
            return pos
        if self._exact[i]:
            return self._origins[i] + (pos - self._starts[i])
        return self._origins[i]

    def _end(self, pos: int) -> int:
        if pos <= 0:
            return self._start(pos)
        i = bisect.bisect_right(self._starts, pos - 1) - 1
        if i < 0:
            return pos
        if self._exact[i]:
            return self._origins[i] + (pos - self._starts[i])
        return self._origins[i] + self._lengths[i]


@functools.lru_cache(maxsize=4096)
def _nfkc(ch: str) -> str:
    return unicodedata.normalize("NFKC", ch).translate(_FOLD)


def _legit_mark(text: str, i: int) -> bool:
    """A joiner or direction mark at ``text[i]`` that sits beside non-ASCII text."""
    before = text[i - 1] if i > 0 else ""
    after = text[i + 1] if i + 1 < len(text) else ""
    return (before > "\x7f" and before.isprintable()) or (after > "\x7f" and after.isprintable())


class _Builder:
    def __init__(self, original: str) -> None:
        self.original = original
        self.parts: list[str] = []
        self.length = 0  # normalised length so far
        self.starts: list[int] = []
        self.origins: list[int] = []
        self.lengths: list[int] = []
        self.exact: list[bool] = []
        self.hidden: list[tuple[int, int]] = []

    def copy(self, start: int, end: int) -> None:
        if end > start:
            self._segment(self.original[start:end], start, end - start, exact=True)

    def replace(self, text: str, origin: int, length: int) -> None:
        if text:
            self._segment(text, origin, length, exact=False)

    def _segment(self, text: str, origin: int, length: int, *, exact: bool) -> None:
        self.starts.append(self.length)
        self.origins.append(origin)
        self.lengths.append(length)
        self.exact.append(exact)
        self.parts.append(text)
        self.length += len(text)

    def hide(self, start: int, end: int) -> None:
        if self.hidden and self.hidden[-1][1] == start:
            self.hidden[-1] = (self.hidden[-1][0], end)
        else:
            self.hidden.append((start, end))

    def build(self) -> Normalised:
        return Normalised(
            "".join(self.parts),
            tuple(self.hidden),
            tuple(self.starts),
            tuple(self.origins),
            tuple(self.lengths),
            tuple(self.exact),
        )


def _run(b: _Builder, text: str, start: int, end: int) -> None:
    """Normalise the non-ASCII stretch ``text[start:end]`` into ``b``."""
    run = text[start:end]
    if not (_SPECIAL.intersection(run)) and unicodedata.is_normalized("NFKC", run):
        b.copy(start, end)
        return
    flagged_tags = True
    i = start
    while i < end:
        ch = text[i]
        cp = ord(ch)
        if _TAG_BASE <= cp <= _TAG_BASE + 0x7F:
            if i == start or not (_TAG_BASE <= ord(text[i - 1]) <= _TAG_BASE + 0x7F):
                # A tag sequence after a black flag is a subdivision flag, not smuggled text.
                flagged_tags = not (i > 0 and ord(text[i - 1]) == _BLACK_FLAG)
            if flagged_tags:
                b.hide(i, i + 1)
                if 0x20 <= cp - _TAG_BASE < 0x7F:
                    b.replace(chr(cp - _TAG_BASE), i, 1)
        elif cp in _INVISIBLE:
            if not (cp in _SCRIPT_MARKS and _legit_mark(text, i)):
                b.hide(i, i + 1)
        elif cp in _VARIATION:
            pass  # presentation only (emoji style); removed without a finding
        else:
            folded = _nfkc(ch)
            if folded == ch:
                b.copy(i, i + 1)
            else:
                b.replace(folded, i, 1)
        i += 1


def _escapes(b: _Builder, text: str, start: int, end: int) -> None:
    """``\\uXXXX`` escapes in ``text[start:end]``, surrogate pairs joined, normalised in turn."""
    units = [int(m.group(1), 16) for m in _ESCAPE.finditer(text, start, end)]
    i = 0
    while i < len(units):
        cp, width = units[i], 1
        if 0xD800 <= cp < 0xDC00 and i + 1 < len(units) and 0xDC00 <= units[i + 1] < 0xE000:
            cp, width = 0x10000 + ((cp - 0xD800) << 10) + (units[i + 1] - 0xDC00), 2
        origin = start + 6 * i
        ch = chr(cp) if not 0xD800 <= cp < 0xE000 else "\ufffd"
        if cp in _INVISIBLE or cp in _VARIATION or _TAG_BASE <= cp <= _TAG_BASE + 0x7F:
            if cp not in _VARIATION:
                b.hide(origin, origin + 6 * width)
            if _TAG_BASE + 0x20 <= cp < _TAG_BASE + 0x7F:
                b.replace(chr(cp - _TAG_BASE), origin, 6 * width)
        else:
            b.replace(_nfkc(ch), origin, 6 * width)
        i += width


def normalise(text: str, *, json_escapes: bool = False) -> Normalised:
    """``text`` as the detectors read it (see the module docstring), with the position map."""
    if text.isascii() and not (json_escapes and "\\u" in text):
        return Normalised(text, (), (), (), (), ())
    b = _Builder(text)
    cursor = 0
    for match in (_NON_ASCII_OR_ESCAPE if json_escapes else _NON_ASCII).finditer(text):
        b.copy(cursor, match.start())
        if match.group(0)[0] == "\\":
            _escapes(b, text, match.start(), match.end())
        else:
            _run(b, text, match.start(), match.end())
        cursor = match.end()
    b.copy(cursor, len(text))
    return b.build()

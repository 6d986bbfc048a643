"""What a detector reports: a named span in the text it was given, and the redaction of spans.

A finding never carries the matched value: the policy, the audit and the client's error message
name the detector, and whoever holds the text can cut the span out of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["CATEGORIES", "BlockFinding", "Finding", "redact"]

CATEGORIES: Final = frozenset({"secret", "pii", "injection", "content"})


@dataclass(frozen=True, slots=True)
class Finding:
    """One match: ``text[start:end]`` of the ORIGINAL text passed to the scan is what matched.

    ``detector`` is the stable name the policy and the audit use (``aws_access_key``,
    ``payment_card``, ``custom:<name>``, ``injection``, ...); ``category`` is one of
    :data:`CATEGORIES`. Spans found after normalisation (NFKC, invisible characters removed,
    homoglyphs folded) or after decoding one level of URL/base64 are mapped back to the
    characters of the original text they came from.
    """

    detector: str
    category: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class BlockFinding:
    """A finding in one of several blocks scanned as one text (:meth:`Scanner.scan_blocks`):
    ``finding``'s span is in ``blocks[block]``. A match that crossed a block boundary yields one
    :class:`BlockFinding` per block it touched."""

    block: int
    finding: Finding


def redact(text: str, findings: Sequence[Finding]) -> str:
    """``text`` with each finding's span replaced by ``[REDACTED:<detector>]``.

    Overlapping (or touching) spans are merged into one placeholder, named by the detector of the
    earliest-starting span (the longest among those that start together). Spans out of range are
    clipped to the text; empty spans are ignored.
    """
    spans = sorted(
        (max(0, f.start), min(len(text), f.end), f.detector)
        for f in findings
        if min(len(text), f.end) > max(0, f.start)
    )
    if not spans:
        return text
    merged: list[tuple[int, int, str]] = []
    for start, end, detector in spans:
        if merged and start <= merged[-1][1]:
            first_start, first_end, first_detector = merged[-1]
            if start == first_start and end > first_end:
                first_detector = detector  # same start: the longer span names the whole
            merged[-1] = (first_start, max(first_end, end), first_detector)
        else:
            merged.append((start, end, detector))
    out: list[str] = []
    cursor = 0
    for start, end, detector in merged:
        out.append(text[cursor:start])
        out.append(f"[REDACTED:{detector}]")
        cursor = end
    out.append(text[cursor:])
    return "".join(out)

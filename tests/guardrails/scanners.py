"""A scanner with a few fixed detectors, for the enforcement side's fast tests.

It is the real :class:`~proxy.guard.detect.Scanner` (its block handling included) with ``scan``
replaced by three plain patterns, so these tests do not depend on how the built-in detectors
tune their expressions; the interaction tests run the real ones.
"""

from __future__ import annotations

import re
from typing import Final

from proxy.guard.detect import Finding, Scanner, ScannerSettings

__all__ = ["AWS_KEY", "INJECTION", "PatternScanner"]

AWS_KEY: Final = "AKIAIOSFODNN7EXAMPLE"
INJECTION: Final = "ignore previous instructions"

_PATTERNS: Final = (
    ("aws_access_key", "secret", re.compile(r"AKIA[0-9A-Z]{16}")),
    ("email", "pii", re.compile(r"[a-z]+@[a-z]+\.com")),
    ("injection", "injection", re.compile(r"ignore\s+previous\s+instructions", re.IGNORECASE)),
)


class PatternScanner(Scanner):
    """Finds ``AKIA…`` keys, lower-case e-mail addresses and "ignore previous instructions"."""

    def __init__(self, settings: ScannerSettings | None = None) -> None:
        super().__init__(settings or ScannerSettings())
        self.scanned: list[str] = []  # every text scanned, for "nothing was scanned" checks

    def scan(self, text: str, *, kind: str = "text") -> tuple[Finding, ...]:
        self.scanned.append(text)
        found = [
            Finding(name, category, m.start(), m.end())
            for name, category, pattern in _PATTERNS
            for m in pattern.finditer(text)
        ]
        return tuple(sorted(found, key=lambda f: f.start))

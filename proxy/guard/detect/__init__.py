"""The built-in detectors: secrets, personal data, injection signals and binary content.

One :class:`Scanner` per settings, compiled once; :meth:`Scanner.scan` takes text and answers
:class:`Finding` spans in that text. :func:`redact` swaps the spans for typed placeholders. The
detectors, what they match and how they validate are listed in
``docs/reference/guardrail-detectors.md``.
"""

from proxy.guard.detect.findings import CATEGORIES, BlockFinding, Finding, redact
from proxy.guard.detect.scanner import Scanner, ScannerSettings

__all__ = ["CATEGORIES", "BlockFinding", "Finding", "Scanner", "ScannerSettings", "redact"]

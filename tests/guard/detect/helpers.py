"""A scanner with every detector, and a helper that names what it found."""

from __future__ import annotations

import binascii

from proxy.guard.detect import Scanner, ScannerSettings

SCANNER = Scanner(ScannerSettings())
B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def found(text: str, *, kind: str = "text", scanner: Scanner = SCANNER) -> list[tuple[str, str]]:
    """``(detector, matched text)`` for each finding."""
    return [(f.detector, text[f.start : f.end]) for f in scanner.scan(text, kind=kind)]


def detectors(text: str, *, kind: str = "text", scanner: Scanner = SCANNER) -> set[str]:
    return {detector for detector, _ in found(text, kind=kind, scanner=scanner)}


def crc_token(prefix: str, body: str) -> str:
    value, out = binascii.crc32(body.encode()), ""
    while value:
        value, digit = divmod(value, 62)
        out = B62[digit] + out
    return prefix + body + out.rjust(6, "0")

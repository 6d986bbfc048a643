"""One level of decoding, for payloads written in URL or base64 encoding to slip past a pattern.

:func:`encoded_runs` finds the runs worth decoding in a text and answers each with its decoded
text; the scanner scans those (without decoding again) and reports what it finds on the span of
the whole run. Only text comes back: a run that decodes to bytes that are not UTF-8 text (an
image, a hash) is left alone, as is a run that decodes to itself.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator
from typing import Final
from urllib.parse import unquote_plus

from proxy.guard.detect.engine import Rule, compile_rule

__all__ = ["encoded_runs"]

# Runs: percent-encoded stretches with at least two escapes, and base64/base64url stretches of
# 16+ characters (12+ decoded bytes: shorter ones hide little and decode by accident).
_PERCENT: Final = compile_rule(
    Rule("", "", r"((?:[A-Za-z0-9._~+!*'()-]*%[0-9A-Fa-f]{2}){2,}[A-Za-z0-9._~+!*'()-]*)", 1)
)
_BASE64: Final = compile_rule(
    Rule("", "", r"(?:^|[^A-Za-z0-9+/_-])([A-Za-z0-9+/_-]{16,}={0,2})(?:[^A-Za-z0-9+/=_-]|$)", 1)
)
_MAX_RUN: Final = 1 << 16


def _printable(text: str) -> bool:
    return bool(text) and sum(ch.isprintable() or ch in "\t\n\r" for ch in text) >= len(text) * 0.95


def _unbase64(run: str) -> str | None:
    data = run.rstrip("=")
    if len(data) % 4 == 1:
        return None
    padded = data + "=" * (-len(data) % 4)
    try:
        raw = (
            base64.urlsafe_b64decode(padded)
            if ("-" in data or "_" in data)
            else base64.b64decode(padded, validate=True)
        )
        decoded = raw.decode("utf-8")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    return decoded if _printable(decoded) else None


def encoded_runs(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, decoded)`` for each URL- or base64-encoded run of ``text`` that decodes,
    one level, to different printable text. Runs longer than 64 KiB are skipped (a blob, not a
    hidden token)."""
    encoded = text.encode("utf-8")
    for start, end in _PERCENT.spans(text, encoded):
        run = text[start:end]
        if len(run) <= _MAX_RUN:
            decoded = unquote_plus(run)
            if decoded != run and _printable(decoded):
                yield start, end, decoded
    for start, end in _BASE64.spans(text, encoded):
        run = text[start:end]
        if len(run) <= _MAX_RUN and (decoded_text := _unbase64(run)) is not None and decoded_text != run:
            yield start, end, decoded_text

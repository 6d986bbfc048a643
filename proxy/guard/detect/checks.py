"""Validation that a regular expression cannot do: checksums, structure and entropy.

Each function takes the matched text and answers whether it is the real thing. They are small,
pure and linear in their input; the detector tables in :mod:`~proxy.guard.detect.secret_shapes`
and :mod:`~proxy.guard.detect.personal` name them.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections import Counter
from typing import Final

__all__ = [
    "aadhaar_ok",
    "base62_crc32_ok",
    "bsn_ok",
    "card_ok",
    "dni_ok",
    "entropy",
    "iban_ok",
    "jwt_ok",
    "luhn_ok",
    "nino_ok",
    "placeholder",
    "ssn_ok",
]

_B62: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_PLACEHOLDER_WORDS: Final = (
    "example",
    "xxxx",
    "placeholder",
    "redacted",
    "dummy",
    "your_",
    "your-",
    "yourkey",
    "changeme",
    "replace",
    "insert",
    "<",
    "${",
    "{{",
    "****",
    "....",
)


def entropy(text: str) -> float:
    """Shannon entropy of ``text`` in bits per character (0 for the empty string)."""
    if not text:
        return 0.0
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def placeholder(value: str) -> bool:
    """Whether ``value`` reads as a documented example or a template slot, not a live secret:
    it names itself (``EXAMPLE``, ``your_key``, ``<...>``, ``${...}``) or is mostly one
    repeated character (``sk_test_XXXXXXXX...``)."""
    lowered = value.lower()
    if any(word in lowered for word in _PLACEHOLDER_WORDS):
        return True
    if len(value) >= 8:
        commonest = Counter(value).most_common(1)[0][1]
        if commonest >= len(value) * 0.5:
            return True
    return False


def base62_crc32_ok(token: str) -> bool:
    """GitHub's and npm's token format: ``<prefix>_`` + 30 random characters + 6 characters
    of base62 (``0-9A-Za-z``) CRC32 of the random part."""
    body, check = token[-36:-6], token[-6:]
    value = 0
    for ch in check:
        digit = _B62.find(ch)
        if digit < 0:
            return False
        value = value * 62 + digit
    return value == binascii.crc32(body.encode("ascii", "replace"))


def luhn_ok(digits: str) -> bool:
    """The Luhn (mod 10) check over a string of digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# Issuer ranges (IIN prefix ranges, inclusive, compared on as many leading digits as the bounds
# have) and the lengths each scheme issues.
_IIN: Final[tuple[tuple[str, str, frozenset[int]], ...]] = (
    ("4", "4", frozenset({13, 16, 19})),  # Visa
    ("51", "55", frozenset({16})),  # Mastercard
    ("2221", "2720", frozenset({16})),  # Mastercard 2-series
    ("34", "34", frozenset({15})),  # American Express
    ("37", "37", frozenset({15})),
    ("6011", "6011", frozenset(range(16, 20))),  # Discover
    ("644", "649", frozenset(range(16, 20))),
    ("65", "65", frozenset(range(16, 20))),
    ("3528", "3589", frozenset(range(16, 20))),  # JCB
    ("300", "305", frozenset(range(14, 20))),  # Diners Club
    ("36", "36", frozenset(range(14, 20))),
    ("38", "39", frozenset(range(16, 20))),
    ("62", "62", frozenset(range(16, 20))),  # UnionPay
    ("2200", "2204", frozenset(range(16, 20))),  # Mir
    ("5018", "5018", frozenset(range(12, 20))),  # Maestro
    ("5020", "5020", frozenset(range(12, 20))),
    ("5038", "5038", frozenset(range(12, 20))),
    ("5893", "5893", frozenset(range(12, 20))),
    ("6304", "6304", frozenset(range(12, 20))),
    ("6759", "6759", frozenset(range(12, 20))),
    ("6761", "6763", frozenset(range(12, 20))),
)


def card_ok(text: str) -> bool:
    """A payment card number: 12-19 digits (spaces and dashes between groups allowed) in an
    issuer range with a length that issuer uses, passing Luhn, not all one digit."""
    digits = text.replace(" ", "").replace("-", "")
    if not digits.isdigit() or not 12 <= len(digits) <= 19 or len(set(digits)) == 1:
        return False
    for low, high, lengths in _IIN:
        head = digits[: len(low)]
        if low <= head <= high and len(digits) in lengths:
            return luhn_ok(digits)
    return False


# IBAN lengths by country (SWIFT's IBAN registry).
_IBAN_LENGTHS: Final = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20,
    "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18,
    "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24,
    "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip


def iban_ok(text: str) -> bool:
    """An IBAN: a registered country, that country's length, and mod-97 of the rearranged
    number equal to 1 (ISO 13616)."""
    compact = text.replace(" ", "")
    if _IBAN_LENGTHS.get(compact[:2]) != len(compact) or not compact.isalnum():
        return False
    moved = compact[4:] + compact[:4]
    remainder = 0
    for ch in moved:
        value = int(ch, 36)  # digits as themselves, A=10 ... Z=35
        remainder = (remainder * (100 if value > 9 else 10) + value) % 97
    return remainder == 1


def ssn_ok(text: str) -> bool:
    """A US Social Security number's format rules (it has no check digit): area not 000, 666
    or 900-999, group not 00, serial not 0000."""
    area, group, serial = text.split("-")
    return area not in {"000", "666"} and area[0] != "9" and group != "00" and serial != "0000"


_NINO_BAD_PREFIXES: Final = frozenset({"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"})


def nino_ok(text: str) -> bool:
    """A UK National Insurance number: the prefix letters HMRC never allocates are refused
    (the letter classes are in the pattern); spacing, if any, is the usual 2-2-2-2-1."""
    return text[:2] not in _NINO_BAD_PREFIXES


_DNI_LETTERS: Final = "TRWAGMYFPDXBNJZSQVHLCKE"


def dni_ok(text: str) -> bool:
    """A Spanish DNI (8 digits + letter) or NIE (X/Y/Z + 7 digits + letter): the letter is
    the number mod 23 looked up in the official table."""
    compact = text.replace("-", "")
    head, letter = compact[:-1], compact[-1]
    if head[0] in "XYZ":
        head = str("XYZ".index(head[0])) + head[1:]
    return head.isdigit() and _DNI_LETTERS[int(head) % 23] == letter


def bsn_ok(text: str) -> bool:
    """A Dutch BSN: 9 digits passing the 11-proof (weights 9..2 and -1), not all zero."""
    digits = text.replace(".", "")
    if len(digits) != 9 or not digits.isdigit() or digits == "000000000":
        return False
    total = sum(int(d) * w for d, w in zip(digits, (9, 8, 7, 6, 5, 4, 3, 2, -1), strict=True))
    return total % 11 == 0


_VD: Final = (
    (0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 3, 4, 0, 6, 7, 8, 9, 5), (2, 3, 4, 0, 1, 7, 8, 9, 5, 6),
    (3, 4, 0, 1, 2, 8, 9, 5, 6, 7), (4, 0, 1, 2, 3, 9, 5, 6, 7, 8), (5, 9, 8, 7, 6, 0, 4, 3, 2, 1),
    (6, 5, 9, 8, 7, 1, 0, 4, 3, 2), (7, 6, 5, 9, 8, 2, 1, 0, 4, 3), (8, 7, 6, 5, 9, 3, 2, 1, 0, 4),
    (9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
)  # fmt: skip
_VP: Final = (
    (0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 5, 7, 6, 2, 8, 3, 0, 9, 4), (5, 8, 0, 3, 7, 9, 6, 1, 4, 2),
    (8, 9, 1, 6, 0, 4, 3, 5, 2, 7), (9, 4, 5, 3, 1, 2, 6, 8, 7, 0), (4, 2, 8, 6, 5, 7, 3, 9, 0, 1),
    (2, 7, 9, 3, 8, 0, 6, 4, 1, 5), (7, 0, 4, 6, 9, 1, 3, 2, 5, 8),
)  # fmt: skip


def aadhaar_ok(text: str) -> bool:
    """An Indian Aadhaar number: 12 digits, the first 2-9, passing the Verhoeff check."""
    digits = text.replace(" ", "").replace("-", "")
    if len(digits) != 12 or not digits.isdigit() or digits[0] in "01":
        return False
    c = 0
    for i, ch in enumerate(reversed(digits)):
        c = _VD[c][_VP[i % 8][ord(ch) - 48]]
    return c == 0


def _b64url_json(part: str) -> object:
    padded = part + "=" * (-len(part) % 4)
    return json.loads(base64.urlsafe_b64decode(padded))


def jwt_ok(token: str) -> bool:
    """A JWS compact token: a base64url JSON object header naming ``alg``, and a base64url
    JSON object payload."""
    parts = token.split(".")
    if len(parts) != 3:
        return False
    try:
        header, payload = _b64url_json(parts[0]), _b64url_json(parts[1])
    except (ValueError, UnicodeDecodeError, binascii.Error):
        return False
    return isinstance(header, dict) and "alg" in header and isinstance(payload, dict)

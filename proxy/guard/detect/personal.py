"""Personal data: e-mail addresses, phone numbers, payment cards, IBANs and national identifiers.

The numbers are validated where they carry a check: cards by Luhn and issuer range/length,
IBANs by country length and mod-97, Spanish DNI/NIE by their letter, Dutch BSN by the 11-proof,
Indian Aadhaar by Verhoeff. US SSNs and UK NINOs have no check digit: their allocation rules are
applied. Phone numbers are kept tight on purpose: an international number (``+`` and country
code, 8-15 digits), a US number written ``(415) 555-0199`` or ``415-555-0199``, or a UK number
with its spaces; a bare run of digits is never a phone number.
"""

from __future__ import annotations

import string
from typing import Final

from proxy.guard.detect.checks import aadhaar_ok, bsn_ok, card_ok, dni_ok, iban_ok, nino_ok, ssn_ok
from proxy.guard.detect.engine import Check, Rule

__all__ = ["RULES"]

_ALNUM: Final = string.ascii_letters + string.digits
# Domains that are really file names: logo@2x.png, icon@3x.webp.
_FILE_TLDS: Final = frozenset(
    {"png", "jpg", "jpeg", "gif", "svg", "webp", "bmp", "ico", "js", "css", "ts", "map", "json", "txt", "pdf"}
)


def _email(text: str, start: int, end: int) -> bool:
    value = text[start:end]
    if value.rsplit(".", 1)[-1].lower() in _FILE_TLDS:
        return False
    # user@host:path is an SSH/SCP remote (git@github.com:org/repo), not an address.
    return not (end + 1 < len(text) and text[end] == ":" and text[end + 1] not in " \t\n")


def _digits_between(low: int, high: int) -> Check:
    def check(text: str, start: int, end: int) -> bool:
        count = sum(c.isdigit() for c in text[start:end])
        return low <= count <= high

    return check


def _alone(text: str, start: int, end: int) -> bool:
    """Not one group of a longer run of digit groups (``4111 1111 1111`` inside a card)."""
    before = text[max(0, start - 2) : start]
    after = text[end : end + 2]
    joined = (len(before) == 2 and before[0].isdigit() and before[1] in " -") or (
        len(after) == 2 and after[1].isdigit() and after[0] in " -"
    )
    return not joined


def _with(*checks: Check) -> Check:
    def check(text: str, start: int, end: int) -> bool:
        return all(each(text, start, end) for each in checks)

    return check


def _value(validate: object) -> Check:
    def check(text: str, start: int, end: int) -> bool:
        return bool(validate(text[start:end]))  # type: ignore[operator]

    return check


def _pii(detector: str, pattern: str, check: Check | None, not_after: str = _ALNUM, needs: str = "") -> Rule:
    return Rule(detector, "pii", pattern, 1, check, not_after=not_after, needs=needs)


_END: Final = r"(?:[^0-9A-Za-z]|$)"
# Twelve digits, or groups of 4-4-4 or 4-6-4 digits: what every card and spaced Aadhaar number holds.
_GROUPED: Final = r"[0-9]{12}|[0-9]{4}[ -][0-9]{4}[ -][0-9]{4}|[0-9]{4}[ -][0-9]{6}[ -][0-9]{4}"

RULES: Final[tuple[Rule, ...]] = (
    _pii(
        "email",
        r"([A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]{2,24})(?:[^A-Za-z0-9-]|$)",
        _email,
        _ALNUM + "._%+-",
        r"[A-Za-z0-9._%+-]@[A-Za-z0-9]",
    ),
    # International: + country code, then groups; 8-15 digits in all (E.164).
    _pii(
        "phone",
        r"(\+[1-9][0-9]{0,3}(?:[ .-]?\(?[0-9]{1,4}\)?)(?:[ .-]?[0-9]{2,5}){1,5})" + _END,
        _with(_digits_between(8, 15), _alone),
        _ALNUM + "+",
        r"\+[1-9]",
    ),
    # US national: (415) 555-0199, 415-555-0199, 415.555.0199 (area and exchange start 2-9).
    _pii(
        "phone",
        r"(\([2-9][0-9]{2}\) ?[2-9][0-9]{2}[-.][0-9]{4}|[2-9][0-9]{2}[-.][2-9][0-9]{2}[-.][0-9]{4})"
        r"(?:[^0-9A-Za-z-]|$)",
        _alone,
        needs=r"[0-9]{3}[-.][0-9]{4}",
    ),
    # UK national, spaced: 020 7946 0958, 01632 960 983, 07700 900 123.
    _pii(
        "phone",
        r"(0(?:20|1[0-9]{3}|7[0-9]{3}) [0-9]{3,4} [0-9]{3,4})" + _END,
        _alone,
        needs=r"0[0-9]{2,4} [0-9]{3}",
    ),
    _pii(
        "payment_card",
        r"([0-9](?:[0-9]{11,18}|[0-9]{3}(?:[ -][0-9]{4}){2,3}(?:[ -][0-9]{1,3})?"
        r"|[0-9]{3}[ -][0-9]{6}[ -][0-9]{4,5}))(?:[^0-9A-Za-z-]|$)",
        _value(card_ok),
        _ALNUM + "-",
        _GROUPED,
    ),
    _pii(
        "iban",
        r"([A-Z]{2}[0-9]{2}(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,4})?))" + _END,
        _value(iban_ok),
        needs=r"[A-Z]{2}[0-9]{2}",
    ),
    _pii(
        "national_id",
        r"([0-9]{3}-[0-9]{2}-[0-9]{4})(?:[^0-9A-Za-z-]|$)",
        _value(ssn_ok),
        _ALNUM + "-",
        r"[0-9]{3}-[0-9]{2}-[0-9]{4}",
    ),
    _pii(
        "national_id",
        r"([A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z](?:[0-9]{6}| [0-9]{2} [0-9]{2} [0-9]{2} )[A-D])" + _END,
        _value(nino_ok),
        needs=r"[A-Z](?:[0-9]{6}| [0-9]{2} [0-9]{2} [0-9]{2} )[A-D]",
    ),
    _pii(
        "national_id",
        r"([0-9]{8}-?[A-Z]|[XYZ]-?[0-9]{7}-?[A-Z])" + _END,
        _value(dni_ok),
        needs=r"[0-9]{7}-?[A-Z]",
    ),
    _pii(
        "national_id",
        r"(?i)(?:bsn|burgerservicenummer|sofinummer|sofi-nummer)\W{0,3}(?:nr\.?|nummer|number|no\.?)?\W{0,3}"
        r"([0-9]{9}|[0-9]{4}\.[0-9]{2}\.[0-9]{3})" + _END,
        _value(bsn_ok),
        needs=r"(?i)bsn|burgerservicenummer|sofi-?nummer",
    ),
    _pii(
        "national_id",
        r"([2-9][0-9]{3} [0-9]{4} [0-9]{4}|[2-9][0-9]{3}-[0-9]{4}-[0-9]{4})" + _END,
        _with(_value(aadhaar_ok), _alone),
        needs=_GROUPED,
    ),
    _pii(
        "national_id",
        r"(?i)(?:aadhaar|aadhar|uidai)\W{0,3}(?:no\.?|number|card)?\W{0,3}([2-9][0-9]{11})" + _END,
        _value(aadhaar_ok),
        needs=r"(?i)aadhaa?r|uidai",
    ),
)

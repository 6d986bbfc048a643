from __future__ import annotations

import base64
import binascii
import json

import pytest

from proxy.guard.detect import checks

B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def github(body: str) -> str:
    value, out = binascii.crc32(body.encode()), ""
    while value:
        value, digit = divmod(value, 62)
        out = B62[digit] + out
    return "ghp_" + body + out.rjust(6, "0")


def test_a_github_token_with_its_crc32_passes_and_one_changed_character_fails() -> None:
    token = github("Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy")
    assert checks.base62_crc32_ok(token)
    assert not checks.base62_crc32_ok(token[:-1] + ("A" if token[-1] != "A" else "B"))
    assert not checks.base62_crc32_ok(token[:10] + "Z" + token[11:])


@pytest.mark.parametrize(
    ("number", "ok"),
    [
        ("4111111111111111", True),  # Visa test number
        ("4111 1111 1111 1111", True),
        ("5500-0000-0000-0004", True),  # Mastercard
        ("378282246310005", True),  # Amex, 15 digits
        ("4111111111111112", False),  # Luhn fails
        ("1234567812345670", False),  # Luhn passes, no issuer starts with 1
        ("0000000000000000", False),
        ("55000000000000049", False),  # Mastercard never has 17 digits
    ],
)
def test_cards_need_luhn_an_issuer_range_and_that_issuers_length(number: str, ok: bool) -> None:
    assert checks.card_ok(number) is ok


@pytest.mark.parametrize(
    ("iban", "ok"),
    [
        ("DE89 3704 0044 0532 0130 00", True),
        ("GB82WEST12345698765432", True),
        ("NL91ABNA0417164300", True),
        ("DE88 3704 0044 0532 0130 00", False),  # check digits off by one
        ("GB82WEST1234569876543", False),  # one short for GB
        ("XX82WEST12345698765432", False),  # no such country
    ],
)
def test_ibans_need_the_country_length_and_mod_97(iban: str, ok: bool) -> None:
    assert checks.iban_ok(iban) is ok


def test_national_identifiers_validate_by_their_own_rules() -> None:
    assert checks.ssn_ok("536-22-1234")
    assert not checks.ssn_ok("000-22-1234")
    assert not checks.ssn_ok("666-22-1234")
    assert not checks.ssn_ok("912-22-1234")
    assert not checks.ssn_ok("536-00-1234")
    assert checks.nino_ok("AB123456C")
    assert not checks.nino_ok("GB123456A")
    assert checks.dni_ok("12345678Z")
    assert not checks.dni_ok("12345678A")
    assert checks.dni_ok("X1234567L")  # NIE: X counts as 0
    assert checks.bsn_ok("111222333")
    assert not checks.bsn_ok("111222334")
    assert checks.aadhaar_ok("2341 2341 2346") is checks.aadhaar_ok("234123412346")


def test_verhoeff_catches_every_single_digit_change() -> None:
    valid = next(f"23412341234{d}" for d in "0123456789" if checks.aadhaar_ok(f"23412341234{d}"))
    for i in range(1, 12):
        for d in "0123456789":
            if d != valid[i]:
                assert not checks.aadhaar_ok(valid[:i] + d + valid[i + 1 :])


def b64(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def test_a_jwt_needs_a_json_header_with_alg_and_a_json_payload() -> None:
    assert checks.jwt_ok(f"{b64({'alg': 'HS256'})}.{b64({'sub': '1'})}.sig")
    assert not checks.jwt_ok(f"{b64({'typ': 'JWT'})}.{b64({'sub': '1'})}.sig")
    assert not checks.jwt_ok(f"{b64({'alg': 'HS256'})}.bm90IGpzb24.sig")
    assert not checks.jwt_ok("a.b")


def test_placeholders_and_documented_examples_are_not_secrets() -> None:
    for value in ["AKIAIOSFODNN7EXAMPLE", "sk_test_XXXXXXXXXXXXXXXXXXXXXXXX", "<YOUR_API_KEY>", "${TOKEN}"]:
        assert checks.placeholder(value)
    assert not checks.placeholder("AKIAQ3EGZ5TJ7LMB4XHN")


def test_entropy_is_bits_per_character() -> None:
    assert checks.entropy("") == 0
    assert checks.entropy("aaaa") == 0
    assert checks.entropy("abcd") == 2

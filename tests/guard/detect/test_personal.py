from __future__ import annotations

import pytest

from tests.guard.detect.helpers import detectors, found


@pytest.mark.parametrize(
    ("detector", "value"),
    [
        ("email", "ann.smith+tag@mail.example.co.uk"),
        ("phone", "+44 20 7946 0958"),
        ("phone", "+14155550132"),
        ("phone", "(415) 555-0199"),
        ("phone", "415-555-0175"),
        ("phone", "020 7946 0018"),
        ("payment_card", "4111 1111 1111 1111"),
        ("payment_card", "5500-0000-0000-0004"),
        ("payment_card", "378282246310005"),
        ("iban", "DE89 3704 0044 0532 0130 00"),
        ("iban", "GB82WEST12345698765432"),
        ("national_id", "536-22-1234"),
        ("national_id", "AB 12 34 56 C"),
        ("national_id", "12345678Z"),
    ],
)
def test_personal_data_is_found_with_its_exact_span(detector: str, value: str) -> None:
    assert found(f"Record: {value}, noted.") == [(detector, value)]


def test_dutch_bsn_and_aadhaar_are_found_after_their_names() -> None:
    assert found("BSN: 111222333") == [("national_id", "111222333")]
    assert found("Aadhaar number: 234123412346") == [("national_id", "234123412346")]


@pytest.mark.parametrize(
    "text",
    [
        "Order 4111 1111 1111 1112 shipped",  # fails Luhn
        "Serial 1234567812345670",  # passes Luhn, no issuer range
        "IBAN DE88 3704 0044 0532 0130 00 (bad check digits)",
        "ref 000-12-3456 and 666-45-1234 and 912-34-5678",
        "DNI 12345678A",
        "BSN: 111222334",
        "Released 2024-03-15 as 10.4.2.1 on 192.168.100.254",
        "Timestamp 1700000000123, order #10293847561, call 911",
        "<img src='logo@2x.png'>, npm i react@18.2.0, git@github.com:acme/api.git",
        "uuid 123e4567-e89b-12d3-a456-426614174000",
    ],
)
def test_look_alike_numbers_and_addresses_are_not_personal_data(text: str) -> None:
    assert not detectors(text) & {"email", "phone", "payment_card", "iban", "national_id"}


def test_the_groups_of_a_card_number_are_not_an_aadhaar_number() -> None:
    assert detectors("4111 1111 1111 1111") == {"payment_card"}

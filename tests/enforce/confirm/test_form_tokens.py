"""The approval page's tokens: a decision token decides one approval, for one approver, briefly."""

from __future__ import annotations

import pytest

from proxy.enforce.confirm.form_tokens import (
    DECISION_TOKEN_SECONDS,
    Approver,
    decision_token,
    page_token,
    read_decision_token,
)

KEY = b"k" * 32
MONA = Approver(("api_key", "", "mona"), "mona")


def test_a_decision_token_names_the_approver_it_was_signed_for() -> None:
    token = decision_token(KEY, "A", MONA, now=1000.0)
    assert read_decision_token(KEY, "A", token, now=1000.0 + DECISION_TOKEN_SECONDS) == MONA


def test_a_decision_token_decides_no_other_approval() -> None:
    token = decision_token(KEY, "A", MONA, now=1000.0)
    assert read_decision_token(KEY, "B", token, now=1000.0) is None


def test_a_decision_token_expires() -> None:
    token = decision_token(KEY, "A", MONA, now=1000.0)
    assert read_decision_token(KEY, "A", token, now=1001.0 + DECISION_TOKEN_SECONDS) is None


def test_a_decision_token_under_another_key_is_refused() -> None:
    token = decision_token(b"x" * 32, "A", MONA, now=1000.0)
    assert read_decision_token(KEY, "A", token, now=1000.0) is None


def test_the_page_token_is_no_decision_token() -> None:
    assert read_decision_token(KEY, "A", page_token(KEY, "A"), now=1000.0) is None


@pytest.mark.parametrize(
    "token",
    ["", ".", "a.b", "x" * 5000, "!!!.00", "e30.00"],  # e30 is "{}" in base64
)
def test_garbage_is_refused_without_raising(token: str) -> None:
    assert read_decision_token(KEY, "A", token, now=0.0) is None


def test_an_altered_body_is_refused_though_its_mac_is_kept() -> None:
    import base64

    import orjson

    token = decision_token(KEY, "A", MONA, now=1000.0)
    mac = token.split(".")[1]
    forged = orjson.dumps(["A", ["api_key", "", "frank"], "frank", 10**10])
    body = base64.urlsafe_b64encode(forged).decode().rstrip("=")
    assert read_decision_token(KEY, "A", f"{body}.{mac}", now=1000.0) is None

"""Sealing: what the store keeps opens only with its key, for its own entry."""

from __future__ import annotations

import pytest

from proxy.config.credentials import decode_key
from proxy.credentials.sealing import Sealer, Unsealable, bound_to, new_key

ALICE = ("api_key", "", "alice")
BOB = ("api_key", "", "bob")


def sealer() -> Sealer:
    return Sealer(decode_key(new_key()))


def test_a_sealed_value_opens_for_its_entry_and_holds_no_plaintext() -> None:
    box = sealer()
    sealed = box.seal("ghp_personal-token", bound_to("secret", "github", ALICE))
    assert "ghp_personal-token" not in sealed
    assert box.open(sealed, bound_to("secret", "github", ALICE)) == "ghp_personal-token"


def test_the_same_value_seals_differently_each_time() -> None:
    box = sealer()
    bound = bound_to("secret", "github", ALICE)
    assert box.seal("x" * 20, bound) != box.seal("x" * 20, bound)


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(bound_to("secret", "github", BOB), id="another-identity"),
        pytest.param(bound_to("secret", "gitlab", ALICE), id="another-server"),
        pytest.param(bound_to("oauth", "github", ALICE), id="another-kind"),
        pytest.param(bound_to("secret", "github", ("jwt", "", "alice")), id="another-source"),
    ],
)
def test_a_sealed_value_moved_to_another_entry_does_not_open(other: bytes) -> None:
    box = sealer()
    sealed = box.seal("ghp_personal-token", bound_to("secret", "github", ALICE))
    with pytest.raises(Unsealable):
        box.open(sealed, other)


@pytest.mark.parametrize("sealed", ["", "AAAA", "not base64 at all!", "A" * 100])
def test_garbage_or_a_value_sealed_under_another_key_does_not_open(sealed: str) -> None:
    bound = bound_to("secret", "github", ALICE)
    with pytest.raises(Unsealable):
        sealer().open(sealed, bound)
    with pytest.raises(Unsealable):
        sealer().open(sealer().seal("token-value", bound), bound)


@pytest.mark.parametrize(
    ("text", "problem"),
    [("", "got 0 bytes"), ("c2hvcnQ=", "got 5 bytes"), ("%%%%", "32 bytes in base64"), ("A" * 88, "got 66")],
)
def test_a_key_that_is_not_32_bytes_of_base64_is_refused_without_repeating_it(
    text: str, problem: str
) -> None:
    with pytest.raises(ValueError, match="must be 32 bytes in base64") as refused:
        decode_key(text)
    assert problem in str(refused.value)
    if text:
        assert text not in str(refused.value)


def test_a_generated_key_decodes_in_either_base64_alphabet() -> None:
    key = new_key()
    assert len(decode_key(key)) == 32
    assert decode_key(key.replace("-", "+").replace("_", "/")) == decode_key(key)

"""Keys per purpose and identity fingerprints: what every signed token leans on."""

from __future__ import annotations

from proxy.core.keys import derive_key, fingerprint
from proxy.policy.model import Identity


def test_keys_for_different_purposes_differ() -> None:
    assert derive_key(b"x" * 32, "session") != derive_key(b"x" * 32, "cursor")


def test_the_same_secret_and_purpose_give_the_same_key_on_every_replica() -> None:
    assert derive_key(b"x" * 32, "session") == derive_key(b"x" * 32, "session")
    assert derive_key(b"x" * 32, "session") != derive_key(b"y" * 32, "session")


def test_a_fingerprint_ignores_role_order_but_not_name_roles_or_source() -> None:
    alice = Identity("alice", frozenset({"dev", "ops"}), "api_key")
    assert fingerprint(alice) == fingerprint(Identity("alice", frozenset({"ops", "dev"}), "api_key"))
    others = [
        Identity("mallory", frozenset({"dev", "ops"}), "api_key"),
        Identity("alice", frozenset({"dev"}), "api_key"),
        Identity("alice", frozenset({"dev", "ops"}), "jwt"),
    ]
    assert all(fingerprint(other) != fingerprint(alice) for other in others)


def test_a_fingerprint_tells_issuers_and_subjects_apart() -> None:
    alice = Identity("alice", frozenset({"dev"}), "jwt", issuer="https://a.example", subject="u1")
    others = [
        Identity("alice", frozenset({"dev"}), "jwt", issuer="https://b.example", subject="u1"),
        Identity("alice", frozenset({"dev"}), "jwt", issuer="https://a.example", subject="u2"),
        Identity("alice", frozenset({"dev"}), "api_key"),
    ]
    assert all(fingerprint(other) != fingerprint(alice) for other in others)


def test_no_choice_of_names_makes_two_identities_fingerprint_alike() -> None:
    # Joined with a separator, ("a\0b", no roles) and ("a", role "b") would hash the same.
    assert fingerprint(Identity("a\0b", frozenset(), "jwt")) != fingerprint(
        Identity("a", frozenset({"b"}), "jwt")
    )
    assert fingerprint(Identity("x", frozenset(), "jwt", issuer="i\0s", subject="x")) != fingerprint(
        Identity("x", frozenset(), "jwt", issuer="i", subject="s\0x")
    )

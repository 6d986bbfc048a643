"""Identity: who is asking, and the key everything kept per identity is kept under."""

from __future__ import annotations

from proxy.policy.model import ANONYMOUS, Identity


def test_the_key_is_source_issuer_and_subject_never_the_name_alone() -> None:
    token = Identity("alice", frozenset({"dev"}), "jwt", issuer="https://id.example", subject="u-17")
    assert token.key == ("jwt", "https://id.example", "u-17")
    assert token.name == "alice"  # what policy matches and logs show


def test_left_out_the_subject_is_the_name_and_the_issuer_is_empty() -> None:
    assert Identity("ci", frozenset(), "api_key").key == ("api_key", "", "ci")
    assert ANONYMOUS.key == ("anonymous", "", "anonymous")


def test_one_name_from_two_issuers_or_sources_is_three_keys() -> None:
    named = [
        Identity("ci", frozenset(), "jwt", issuer="https://a.example"),
        Identity("ci", frozenset(), "jwt", issuer="https://b.example"),
        Identity("ci", frozenset(), "api_key"),
    ]
    assert len({identity.key for identity in named}) == 3
    assert len(set(named)) == 3


def test_identities_stay_hashable_and_equal_by_every_field_roles_included() -> None:
    # They key the engine's decision cache, where another role set decides otherwise.
    plain = Identity("alice", {"dev"}, "jwt", issuer="i")  # type: ignore[arg-type]  # a set, as YAML gives
    assert hash(plain) == hash(Identity("alice", frozenset({"dev"}), "jwt", issuer="i"))
    more = Identity("alice", frozenset({"dev", "admin"}), "jwt", issuer="i")
    assert more != plain
    assert more.key == plain.key

from __future__ import annotations

from proxy.inbound.tokens import SessionTokens
from proxy.keys import derive_key
from proxy.policy.model import Identity

ALICE = Identity("alice", frozenset({"dev"}), "api_key")
KEY = derive_key(b"s" * 32, "session")


def test_a_session_id_restores_its_revision_and_capabilities_on_another_instance() -> None:
    token = SessionTokens(KEY).issue("2025-06-18", {"sampling": {}}, ALICE)
    claims = SessionTokens(KEY).restore(token, ALICE)
    assert claims is not None
    assert (claims.protocol_version, claims.capabilities) == ("2025-06-18", {"sampling": {}})


def test_ids_are_unique_and_visible_ascii() -> None:
    tokens = SessionTokens(KEY)
    ids = {tokens.issue("2025-11-25", {}, ALICE) for _ in range(100)}
    assert len(ids) == 100
    assert all(0x21 <= ord(c) <= 0x7E for token in ids for c in token)


def test_a_tampered_id_another_key_or_another_identity_restores_nothing() -> None:
    token = SessionTokens(KEY).issue("2025-11-25", {}, ALICE)
    nonce, body, mac = token.split(".")
    tampered = body[:-1] + ("A" if body[-1] != "A" else "B")
    assert SessionTokens(KEY).restore(f"{nonce}.{tampered}.{mac}", ALICE) is None
    assert SessionTokens(KEY).restore(f"{nonce[::-1]}.{body}.{mac}", ALICE) is None  # the nonce is signed too
    assert SessionTokens(derive_key(b"t" * 32, "session")).restore(token, ALICE) is None
    assert SessionTokens(KEY).restore(token, Identity("alice", frozenset({"admin"}), "api_key")) is None
    assert SessionTokens(KEY).restore(token, Identity("mallory", frozenset({"dev"}), "api_key")) is None
    assert SessionTokens(KEY).restore("garbage", ALICE) is None


def test_an_id_stays_small_whatever_the_client_declares() -> None:
    huge = {
        "experimental": {"x": "y" * 3_500_000},
        "sampling": {
            "context": {},
            "tools": {"deep": {"x": "y" * 100_000}},
            **{f"f{i}": {} for i in range(100)},
        },
        "elicitation": {"form": {}, "url": {}},
        "roots": {"listChanged": True},
    }
    token = SessionTokens(KEY).issue("2025-11-25", huge, ALICE)
    assert len(token) < 2048
    claims = SessionTokens(KEY).restore(token, ALICE)
    assert claims is not None
    # What Manifold acts on is kept: the askable capabilities and their flags one level down.
    assert claims.capabilities["elicitation"] == {"form": {}, "url": {}}
    assert claims.capabilities["roots"] == {"listChanged": True}
    assert claims.capabilities["sampling"]["tools"] == {}
    assert "experimental" not in claims.capabilities


def test_ids_differ_in_their_first_eight_characters_which_is_all_a_log_line_keeps() -> None:
    tokens = SessionTokens(KEY)
    prefixes = {tokens.issue("2025-11-25", {}, ALICE)[:8] for _ in range(100)}
    assert len(prefixes) == 100

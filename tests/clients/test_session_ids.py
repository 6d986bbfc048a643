from __future__ import annotations

import base64

import orjson

from proxy.clients.session_ids import DEFAULT_LIFETIME, SessionTokens, nonce_of
from proxy.core.keys import derive_key
from proxy.policy.model import Identity

ALICE = Identity("alice", frozenset({"dev"}), "api_key")
KEY = derive_key(b"s" * 32, "session")


def test_a_session_id_restores_its_revision_and_capabilities_on_another_instance() -> None:
    token, _ = SessionTokens(KEY).issue("2025-06-18", {"sampling": {}}, ALICE)
    claims = SessionTokens(KEY).restore(token, ALICE)
    assert claims is not None
    assert (claims.protocol_version, claims.capabilities) == ("2025-06-18", {"sampling": {}})


def test_ids_are_unique_and_visible_ascii() -> None:
    tokens = SessionTokens(KEY)
    ids = {tokens.issue("2025-11-25", {}, ALICE)[0] for _ in range(100)}
    assert len(ids) == 100
    assert all(0x21 <= ord(c) <= 0x7E for token in ids for c in token)


def test_a_tampered_id_another_key_or_another_identity_restores_nothing() -> None:
    token, _ = SessionTokens(KEY).issue("2025-11-25", {}, ALICE)
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
        "extensions": {
            "io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]},
            **{f"com.example/e{i}": {"x": "y" * 200} for i in range(10_000)},
        },
    }
    token, _ = SessionTokens(KEY).issue("2025-11-25", huge, ALICE)
    assert len(token) < 2048
    claims = SessionTokens(KEY).restore(token, ALICE)
    assert claims is not None
    # What Manifold acts on is kept: the askable capabilities and their flags one level down.
    assert claims.capabilities["elicitation"] == {"form": {}, "url": {}}
    assert claims.capabilities["roots"] == {"listChanged": True}
    assert claims.capabilities["sampling"]["tools"] == {}
    assert "experimental" not in claims.capabilities
    # The first extensions Manifold relays, as many as fit in their share of the id.
    assert list(claims.capabilities["extensions"]) == ["io.modelcontextprotocol/ui", "com.example/e0"]


def test_ids_differ_in_their_first_eight_characters_which_is_all_a_log_line_keeps() -> None:
    tokens = SessionTokens(KEY)
    prefixes = {tokens.issue("2025-11-25", {}, ALICE)[0][:8] for _ in range(100)}
    assert len(prefixes) == 100


class Wall:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def test_an_id_carries_its_expiry_and_is_refused_from_then_on() -> None:
    wall = Wall()
    tokens = SessionTokens(KEY, lifetime=3600, clock=wall)
    token, expires = tokens.issue("2025-11-25", {}, ALICE)
    assert expires == int(wall.now) + 3600
    wall.now += 3599
    claims = tokens.restore(token, ALICE)
    assert claims is not None
    assert claims.expires == expires
    wall.now += 1
    assert tokens.restore(token, ALICE) is None
    assert SessionTokens(KEY, clock=wall).restore(token, ALICE) is None  # whatever the replica's lifetime


def test_the_default_lifetime_is_a_day() -> None:
    wall = Wall()
    _, expires = SessionTokens(KEY, clock=wall).issue("2025-11-25", {}, ALICE)
    assert expires - wall.now == DEFAULT_LIFETIME == 86_400


def test_an_id_without_an_expiry_is_never_taken_over() -> None:
    """An id signed before ids carried an expiry (or a payload crafted without one) would live
    forever: refused, even with a valid MAC."""
    tokens = SessionTokens(KEY)
    token, _ = tokens.issue("2025-11-25", {}, ALICE)
    nonce, body, _ = token.split(".")
    claims = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    for forever in (
        {k: v for k, v in claims.items() if k != "x"},
        {**claims, "x": 1e20},
        {**claims, "x": "9"},
    ):
        payload = base64.urlsafe_b64encode(orjson.dumps(forever)).rstrip(b"=").decode()
        signed = f"{nonce}.{payload}"
        assert tokens.restore(f"{signed}.{tokens._mac(signed)}", ALICE) is None


def test_the_nonce_names_an_id() -> None:
    token, _ = SessionTokens(KEY).issue("2025-11-25", {}, ALICE)
    assert nonce_of(token) == token.split(".")[0]
    assert len(nonce_of(token)) == 22

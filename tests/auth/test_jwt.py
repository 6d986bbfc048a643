from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.auth.authenticator import Authenticated, Authenticator, FailureReason, Rejected
from proxy.config.auth import AuthSettings
from proxy.policy.model import Identity
from tests.auth.keys import (
    AUDIENCE,
    ISSUER,
    SECRET,
    claims,
    ec_key,
    forge,
    jwks,
    public_jwk,
    public_pem,
    rsa_key,
    sign,
)

pytestmark = pytest.mark.anyio

HS_ISSUER: dict[str, Any] = {
    "issuer": ISSUER,
    "audience": AUDIENCE,
    "secret": SECRET,
    "roles_claim": "realm_access.roles",
}


def authenticator(*issuers: dict[str, Any]) -> Authenticator:
    return Authenticator.from_settings(AuthSettings.model_validate({"jwt": list(issuers)}), {})


async def present(auth: Authenticator, token: str) -> Identity | Rejected:
    result = await auth.authenticate({"authorization": f"Bearer {token}"})
    return result.identity if isinstance(result, Authenticated) else result


def rs_issuer(tmp_path: Path, *keys: dict[str, Any], **extra: Any) -> dict[str, Any]:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(*keys)))
    return {"issuer": ISSUER, "audience": AUDIENCE, "jwks_file": str(path), **extra}


async def test_a_valid_hs256_token_names_the_caller_with_roles_from_a_nested_claim() -> None:
    token = sign(claims(realm_access={"roles": ["dev", "ops"]}))
    assert await present(authenticator(HS_ISSUER), token) == Identity(
        "alice", frozenset({"dev", "ops"}), "jwt", issuer=ISSUER, subject="alice"
    )


async def test_roles_may_be_one_space_separated_string_like_an_oauth_scope() -> None:
    auth = authenticator({**HS_ISSUER, "roles_claim": "scope"})
    identity = await present(auth, sign(claims(scope="tools:read tools:call")))
    assert isinstance(identity, Identity)
    assert identity.roles == {"tools:read", "tools:call"}


async def test_a_claim_whose_name_contains_dots_is_read_as_written() -> None:
    auth = authenticator({**HS_ISSUER, "roles_claim": "https://example.test/roles"})
    identity = await present(auth, sign({**claims(), "https://example.test/roles": ["admin"]}))
    assert isinstance(identity, Identity)
    assert identity.roles == {"admin"}


async def test_a_token_without_the_roles_claim_has_no_roles() -> None:
    identity = await present(authenticator(HS_ISSUER), sign(claims()))
    assert isinstance(identity, Identity)
    assert identity.roles == frozenset()


async def test_roles_that_are_not_strings_make_the_token_invalid() -> None:
    rejected = await present(authenticator(HS_ISSUER), sign(claims(realm_access={"roles": [1, 2]})))
    assert isinstance(rejected, Rejected)
    assert "not a list of strings" in rejected.message


async def test_an_expired_token_is_rejected_as_expired() -> None:
    rejected = await present(authenticator(HS_ISSUER), sign(claims(lifetime=-120)))
    assert rejected == Rejected(FailureReason.EXPIRED, "the token has expired")


async def test_a_token_expired_within_the_leeway_is_still_accepted() -> None:
    assert isinstance(await present(authenticator(HS_ISSUER), sign(claims(lifetime=-10))), Identity)


async def test_a_token_without_exp_is_invalid() -> None:
    payload = claims()
    del payload["exp"]
    rejected = await present(authenticator(HS_ISSUER), sign(payload))
    assert rejected == Rejected(FailureReason.INVALID, "the token lacks the required 'exp' claim")


async def test_a_token_for_another_audience_is_invalid() -> None:
    rejected = await present(authenticator(HS_ISSUER), sign(claims(aud="someone-else")))
    assert isinstance(rejected, Rejected)
    assert rejected.reason is FailureReason.INVALID
    assert "audience" in rejected.message


async def test_a_token_naming_an_audience_is_invalid_where_none_is_configured() -> None:
    auth = authenticator({**HS_ISSUER, "audience": None})
    rejected = await present(auth, sign(claims()))
    assert isinstance(rejected, Rejected)
    assert "audience" in rejected.message


async def test_a_token_from_an_unconfigured_issuer_is_invalid() -> None:
    rejected = await present(authenticator(HS_ISSUER), sign(claims(iss="https://evil.test")))
    assert isinstance(rejected, Rejected)
    assert "issuer" in rejected.message


async def test_an_entry_without_issuer_takes_tokens_that_match_no_other_entry() -> None:
    auth = authenticator(HS_ISSUER, {"secret": "another-secret-that-is-32-bytes-long", "audience": AUDIENCE})
    token = sign(claims(iss="anyone"), key="another-secret-that-is-32-bytes-long")
    assert isinstance(await present(auth, token), Identity)
    assert isinstance(await present(auth, sign(claims())), Identity)  # still routed to HS_ISSUER


OTHER_SECRET = "another-secret-that-is-32-bytes-long"
OTHER_ISSUER: dict[str, Any] = {**HS_ISSUER, "issuer": "https://other.example.test", "secret": OTHER_SECRET}


async def test_the_same_sub_and_name_from_two_issuers_are_two_identities() -> None:
    auth = authenticator(HS_ISSUER, OTHER_ISSUER)
    ours = await present(auth, sign(claims()))
    theirs = await present(auth, sign(claims(iss="https://other.example.test"), key=OTHER_SECRET))
    assert isinstance(ours, Identity)
    assert isinstance(theirs, Identity)
    assert (ours.name, ours.roles, ours.source) == (theirs.name, theirs.roles, theirs.source)
    assert ours.key == ("jwt", ISSUER, "alice")
    assert theirs.key == ("jwt", "https://other.example.test", "alice")
    assert ours != theirs


async def test_the_name_claim_names_the_caller_but_sub_keys_it() -> None:
    auth = authenticator({**HS_ISSUER, "name_claim": "preferred_username"})
    identity = await present(auth, sign(claims(sub="u-1234", preferred_username="ci")))
    assert isinstance(identity, Identity)
    assert (identity.name, identity.key) == ("ci", ("jwt", ISSUER, "u-1234"))
    # A second user who picked the same display name is still someone else.
    other = await present(auth, sign(claims(sub="u-9999", preferred_username="ci")))
    assert isinstance(other, Identity)
    assert other.key != identity.key


async def test_a_token_without_sub_is_keyed_on_its_name() -> None:
    auth = authenticator({**HS_ISSUER, "name_claim": "email"})
    payload = claims(email="a@example.test")
    del payload["sub"]
    identity = await present(auth, sign(payload))
    assert isinstance(identity, Identity)
    assert identity.key == ("jwt", ISSUER, "a@example.test")


async def test_a_token_whose_sub_is_not_a_string_is_invalid() -> None:
    auth = authenticator({**HS_ISSUER, "name_claim": "email"})
    rejected = await present(auth, sign(claims(sub=42, email="a@example.test")))
    assert rejected == Rejected(FailureReason.INVALID, "the token's subject (sub) is not a string")


async def test_the_issuerless_entry_keys_each_iss_apart_from_the_configured_issuers() -> None:
    auth = authenticator(HS_ISSUER, {"secret": OTHER_SECRET, "audience": AUDIENCE})
    routed = await present(auth, sign(claims(iss="anyone"), key=OTHER_SECRET))
    bare = claims()
    del bare["iss"]
    unnamed = await present(auth, sign(bare, key=OTHER_SECRET))
    assert isinstance(routed, Identity)
    assert isinstance(unnamed, Identity)
    assert (routed.key, unnamed.key) == (("jwt", "anyone", "alice"), ("jwt", "", "alice"))


async def test_a_token_signed_with_another_secret_is_invalid() -> None:
    rejected = await present(authenticator(HS_ISSUER), sign(claims(), key="x" * 40))
    assert rejected == Rejected(FailureReason.INVALID, "the token's signature does not verify")


async def test_an_unsigned_token_with_alg_none_is_invalid() -> None:
    token = forge(claims(), {"alg": "none", "typ": "JWT"}, hmac_key=None)
    rejected = await present(authenticator(HS_ISSUER, {**HS_ISSUER, "issuer": None}), token)
    assert isinstance(rejected, Rejected)
    assert rejected.reason is FailureReason.INVALID


async def test_a_token_without_a_name_claim_is_invalid() -> None:
    payload = claims()
    del payload["sub"]
    rejected = await present(authenticator(HS_ISSUER), sign(payload))
    assert isinstance(rejected, Rejected)
    assert "'sub'" in rejected.message


async def test_an_rs256_token_is_verified_with_the_key_from_a_jwks_file(tmp_path: Path) -> None:
    auth = authenticator(rs_issuer(tmp_path, public_jwk(rsa_key("a"), "a")))
    token = sign(claims(roles=["dev"]), rsa_key("a"), "RS256", kid="a")
    assert await present(auth, token) == Identity("alice", frozenset({"dev"}), "jwt", issuer=ISSUER)


async def test_an_es256_token_is_verified_with_an_ec_key(tmp_path: Path) -> None:
    auth = authenticator(rs_issuer(tmp_path, public_jwk(ec_key("e"), "e"), algorithms=["ES256"]))
    assert isinstance(await present(auth, sign(claims(), ec_key("e"), "ES256", kid="e")), Identity)


async def test_a_token_without_kid_uses_the_only_key_of_the_set(tmp_path: Path) -> None:
    auth = authenticator(rs_issuer(tmp_path, public_jwk(rsa_key("a"), None)))
    assert isinstance(await present(auth, sign(claims(), rsa_key("a"), "RS256")), Identity)


async def test_an_hs256_token_keyed_with_the_rsa_public_key_is_invalid(tmp_path: Path) -> None:
    # The algorithm-confusion attack: the public key is public, so anyone can HMAC with it.
    auth = authenticator(rs_issuer(tmp_path, public_jwk(rsa_key("a"), "a"), algorithms=["RS256"]))
    token = forge(claims(), {"alg": "HS256", "typ": "JWT", "kid": "a"}, hmac_key=public_pem(rsa_key("a")))
    rejected = await present(auth, token)
    assert rejected == Rejected(FailureReason.INVALID, "the token's algorithm is not accepted for its issuer")


async def test_a_key_pinned_to_rs256_does_not_verify_a_ps256_token(tmp_path: Path) -> None:
    jwk = public_jwk(rsa_key("a"), "a", alg="RS256")
    auth = authenticator(rs_issuer(tmp_path, jwk, algorithms=["RS256", "PS256"]))
    rejected = await present(auth, sign(claims(), rsa_key("a"), "PS256", kid="a"))
    assert rejected == Rejected(FailureReason.INVALID, "the token's algorithm does not match its signing key")


async def test_a_published_symmetric_key_is_never_used(tmp_path: Path) -> None:
    oct_key = {"kty": "oct", "kid": "a", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"}
    auth = authenticator(rs_issuer(tmp_path, oct_key, algorithms=["RS256"]))
    rejected = await present(auth, sign(claims(), rsa_key("a"), "RS256", kid="a"))
    assert isinstance(rejected, Rejected)
    assert "kid" in rejected.message

"""The OAuth resource server's parts: discovery, JWT access tokens, introspection, the challenge.

Everything here runs in memory (a fetch and a post that answer from dicts); the same paths run
against a real authorization server in tests/interaction/test_oauth.py.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import anyio
import jwt
import pytest
from pydantic import ValidationError

from proxy.auth.apikeys import generate_api_key
from proxy.auth.authenticator import Authenticated, Authenticator, FailureReason, Rejected
from proxy.auth.discovery import DiscoveredKeys, check_servers, metadata_urls, parse_metadata
from proxy.auth.introspection import IntrospectionError, Introspector
from proxy.auth.jwks import JwksError
from proxy.auth.jwt import TokenRejected
from proxy.auth.oauth import OAuthVerifier, granted_scopes
from proxy.auth.resource_metadata import metadata_document, metadata_paths
from proxy.config.auth import AuthSettings
from proxy.config.oauth import OAuthSettings
from tests.auth.keys import SECRET, claims, public_jwk, rsa_key, sign

pytestmark = pytest.mark.anyio

ISSUER = "https://id.example.test/realms/acme"
RESOURCE = "https://mcp.example.test/mcp"
METADATA = {
    "issuer": ISSUER,
    "jwks_uri": "https://id.example.test/jwks",
    "introspection_endpoint": "https://id.example.test/introspect",
}
JWKS = {"keys": [public_jwk(rsa_key("oauth"), "k1")]}


def settings(**overrides: Any) -> OAuthSettings:
    base: dict[str, Any] = {
        "resource": RESOURCE,
        "authorization_servers": [
            {"issuer": ISSUER, "introspection": {"client_id": "manifold", "client_secret": "s3cret"}}
        ],
        "required_scopes": ["mcp:tools"],
        "scope_roles": {"mcp:admin": ["admin"]},
    }
    return OAuthSettings.model_validate({**base, **overrides})


class Fetcher:
    """Answers GETs from a dict; counts them."""

    def __init__(self, documents: dict[str, Any]) -> None:
        self.documents = documents
        self.asked: list[str] = []

    async def __call__(self, url: str) -> bytes:
        self.asked.append(url)
        if url not in self.documents:
            raise JwksError(f"{url}: HTTP 404")
        return json.dumps(self.documents[url]).encode()


def well_known(document: dict[str, Any] | None = None) -> Fetcher:
    return Fetcher(
        {
            "https://id.example.test/.well-known/openid-configuration/realms/acme": document or METADATA,
            "https://id.example.test/jwks": JWKS,
        }
    )


def access_token(lifetime: int = 600, typ: str = "at+jwt", **claims: Any) -> str:
    now = int(time.time())
    payload = {
        "iss": ISSUER,
        "aud": RESOURCE,
        "sub": "u-1",
        "scope": "mcp:tools",
        "iat": now,
        "exp": now + lifetime,
    }
    payload.update(claims)
    payload = {k: v for k, v in payload.items() if v is not None}
    return sign_typed(payload, typ)


def sign_typed(payload: dict[str, Any], typ: str) -> str:
    return jwt.encode(payload, rsa_key("oauth"), algorithm="RS256", headers={"kid": "k1", "typ": typ})


def forged(key: Any, algorithm: str) -> str:
    """A well-formed access token for this resource, signed by a key that is not the issuer's."""
    payload = jwt.decode(access_token(), options={"verify_signature": False})
    return jwt.encode(payload, key, algorithm=algorithm, headers={"kid": "k1", "typ": "at+jwt"})


# ---- settings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "problem"),
    [
        ("https://mcp.example.test/mcp#top", "fragment"),
        ("http://mcp.example.test/mcp", "https"),
        ("mcp.example.test/mcp", "absolute"),
        ("https://MCP.example.test/mcp", "canonical"),
        ("https://mcp.example.test/mcp/", "must not end with '/'"),
        ("https://user:pw@mcp.example.test/mcp", "credentials"),
    ],
)
def test_a_resource_that_is_no_canonical_uri_is_refused_naming_the_problem(
    resource: str, problem: str
) -> None:
    with pytest.raises(ValidationError, match=problem):
        settings(resource=resource)


def test_plain_http_is_allowed_for_loopback_only() -> None:
    assert settings(resource="http://127.0.0.1:8080/mcp").resource == "http://127.0.0.1:8080/mcp"
    with pytest.raises(ValidationError, match="https"):
        settings(authorization_servers=[{"issuer": "http://id.example.test"}])


def test_offline_access_is_no_resource_scope_and_hmac_is_no_oauth_algorithm() -> None:
    with pytest.raises(ValidationError, match="offline_access"):
        settings(scopes_supported=["offline_access"])
    with pytest.raises(ValidationError, match="HS256"):
        settings(authorization_servers=[{"issuer": ISSUER, "algorithms": ["HS256"]}])


def test_an_issuer_in_both_jwt_and_oauth_is_ambiguous() -> None:
    with pytest.raises(ValidationError, match="two meanings"):
        AuthSettings.model_validate(
            {
                "jwt": [{"issuer": ISSUER, "jwks_url": "https://id.example.test/jwks"}],
                "oauth": settings().model_dump(mode="json") | {"authorization_servers": [{"issuer": ISSUER}]},
            }
        )


def test_configuring_oauth_turns_anonymous_access_off() -> None:
    auth = AuthSettings.model_validate(
        {"oauth": {"resource": RESOURCE, "authorization_servers": [{"issuer": ISSUER}]}}
    )
    assert not auth.anonymous_enabled


# ---- the protected resource metadata -------------------------------------------------------------


def test_the_metadata_document_and_where_it_is_served() -> None:
    behind = settings(
        resource="https://gw.example.test/team/mcp", scopes_supported=["mcp:tools", "mcp:admin"]
    )
    assert metadata_document(behind) == {
        "resource": "https://gw.example.test/team/mcp",
        "authorization_servers": [ISSUER],
        "bearer_methods_supported": ["header"],
        "resource_name": "Manifold",
        "scopes_supported": ["mcp:tools", "mcp:admin"],
    }
    assert behind.metadata_url == "https://gw.example.test/.well-known/oauth-protected-resource/team/mcp"
    assert metadata_paths(behind, "/mcp") == [
        "/.well-known/oauth-protected-resource/team/mcp",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ]
    # Named endpoints are parts of the one resource: their metadata names it too.
    assert metadata_paths(settings(), "/mcp", "/mcp/code") == [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource/mcp/code",
        "/.well-known/oauth-protected-resource",
    ]
    at_root = settings(resource="https://mcp.example.test")
    assert at_root.metadata_url == "https://mcp.example.test/.well-known/oauth-protected-resource"


# ---- discovery ---------------------------------------------------------------------------------


def test_metadata_is_looked_for_where_the_mcp_spec_says_in_its_order() -> None:
    assert metadata_urls("https://a.test/tenant1") == [
        "https://a.test/.well-known/oauth-authorization-server/tenant1",
        "https://a.test/.well-known/openid-configuration/tenant1",
        "https://a.test/tenant1/.well-known/openid-configuration",
    ]
    assert metadata_urls("https://a.test") == [
        "https://a.test/.well-known/oauth-authorization-server",
        "https://a.test/.well-known/openid-configuration",
    ]


def test_a_metadata_document_of_another_issuer_is_not_used() -> None:
    with pytest.raises(JwksError, match="not used"):
        parse_metadata(json.dumps({**METADATA, "issuer": "https://honest.test"}).encode(), ISSUER, "u")


async def test_discovery_falls_through_to_the_document_that_exists_and_is_the_issuers() -> None:
    fetch = well_known()
    fetch.documents["https://id.example.test/.well-known/oauth-authorization-server/realms/acme"] = {
        **METADATA,
        "issuer": "https://attacker.test",  # a mix-up: never used
    }
    keys = DiscoveredKeys(ISSUER, fetch=fetch)
    metadata = await keys.discover()
    assert metadata is not None
    assert metadata.introspection_endpoint == METADATA["introspection_endpoint"]
    assert await keys.key("k1") is not None


async def test_an_unreachable_authorization_server_is_retried_at_most_once_a_minute() -> None:
    now = [0.0]
    fetch = Fetcher({})
    keys = DiscoveredKeys(ISSUER, fetch=fetch, clock=lambda: now[0])
    assert await keys.key("k1") is None
    asked = len(fetch.asked)
    assert await keys.key("k1") is None  # a flood of tokens asks no more
    assert len(fetch.asked) == asked
    now[0] = 61.0
    fetch.documents.update(well_known().documents)
    assert await keys.key("k1") is not None


# ---- JWT access tokens ----------------------------------------------------------------------------


async def test_a_good_access_token_signs_in_its_subject_with_only_mapped_scopes_as_roles() -> None:
    verifier = OAuthVerifier(settings(roles_claim="groups"), fetch=well_known())
    token = access_token(scope="mcp:tools mcp:admin admin observer", groups=["ops"])
    signed_in = await verifier.verify_jwt(token, ISSUER)
    assert signed_in.identity.name == "u-1"
    assert signed_in.identity.source == "oauth"
    # An unmapped scope named like a role (admin, observer) gives no role: a permissive
    # authorization server grants any scope a registered client asks for.
    assert signed_in.identity.roles == {"admin", "ops"}
    assert signed_in.scopes == {"mcp:tools", "mcp:admin", "admin", "observer"}


async def test_scopes_as_roles_makes_every_granted_scope_a_role_when_asked_for() -> None:
    verifier = OAuthVerifier(settings(scopes_as_roles=True), fetch=well_known())
    signed_in = await verifier.verify_jwt(access_token(scope="mcp:tools mcp:admin"), ISSUER)
    assert signed_in.identity.roles == {"mcp:tools", "mcp:admin", "admin"}


@pytest.mark.parametrize(
    ("token", "outcome"),
    [
        (lambda: access_token(aud="https://other.example.test/mcp"), "wrong_audience"),
        (lambda: access_token(aud=None), "malformed"),
        (lambda: access_token(lifetime=-60), "expired"),
        (lambda: access_token(typ="JWT"), "wrong_type"),
        (lambda: access_token(sub=None), "malformed"),
        (lambda: forged(rsa_key("attacker"), "RS256"), "bad_signature"),
        (lambda: forged("an-hs256-secret-someone-might-guess-0123", "HS256"), "bad_signature"),
    ],
)
async def test_a_bad_access_token_is_refused_with_its_outcome(token: Any, outcome: str) -> None:
    verifier = OAuthVerifier(settings(), fetch=well_known())
    with pytest.raises(TokenRejected) as refused:
        await verifier.verify_jwt(token(), ISSUER)
    assert refused.value.outcome == outcome


async def test_an_untyped_token_is_taken_when_the_server_is_configured_to_allow_it() -> None:
    lenient = settings(authorization_servers=[{"issuer": ISSUER, "require_jwt_type": False}])
    verifier = OAuthVerifier(lenient, fetch=well_known())
    assert (await verifier.verify_jwt(access_token(typ="JWT"), ISSUER)).identity.name == "u-1"


def test_entra_and_okta_write_scopes_as_scp() -> None:
    assert granted_scopes({"scp": "a b"}) == {"a", "b"}
    assert granted_scopes({"scp": ["a", "b"]}) == {"a", "b"}
    assert granted_scopes({"scope": "c", "scp": "a"}) == {"c"}
    assert granted_scopes({"scope": 3}) == frozenset()


# ---- introspection ----------------------------------------------------------------------------


class Poster:
    def __init__(self, *answers: tuple[int, Any]) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []

    async def __call__(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        self.sent.append((url, body, headers))
        status, answer = self.answers.pop(0)
        return status, answer if isinstance(answer, bytes) else json.dumps(answer).encode()


async def test_an_introspected_answer_is_believed_for_the_cache_time_and_never_past_exp() -> None:
    now = [1000.0]
    post = Poster((200, {"active": True, "sub": "u", "exp": 1010}), (200, {"active": False}))
    introspector = Introspector("manifold", "s:e/cret", cache_seconds=60, post=post, clock=lambda: now[0])
    assert (await introspector.introspect("https://i", "tok", b"k")).claims == {
        "active": True,
        "sub": "u",
        "exp": 1010,
    }
    assert (await introspector.introspect("https://i", "tok", b"k")).claims is not None  # cached
    assert len(post.sent) == 1
    _, body, headers = post.sent[0]
    assert body == b"token=tok&token_type_hint=access_token"
    assert headers["authorization"] == "Basic bWFuaWZvbGQ6cyUzQWUlMkZjcmV0"  # RFC 6749 §2.3.1 encoding
    now[0] = 1010.5  # past exp, well within the cache time
    assert (await introspector.introspect("https://i", "tok", b"k")).claims is None
    assert len(post.sent) == 2


@pytest.mark.parametrize(
    "answer", [(500, {"active": True}), (200, b"<html>"), (200, {"sub": "u"}), (200, [1])]
)
async def test_an_introspection_endpoint_that_answers_nonsense_is_an_error_not_a_verdict(answer: Any) -> None:
    introspector = Introspector("m", "s", cache_seconds=60, post=Poster(answer))
    with pytest.raises(IntrospectionError):
        await introspector.introspect("https://i", "tok", b"k")


async def test_an_opaque_token_for_another_resource_or_issuer_is_refused() -> None:
    for answer, outcome in [
        ({"active": True, "sub": "u", "aud": "https://other.test"}, "wrong_audience"),
        ({"active": True, "sub": "u", "aud": [RESOURCE], "iss": "https://other.test"}, "wrong_issuer"),
        ({"active": False}, "inactive"),
    ]:
        verifier = OAuthVerifier(settings(), fetch=well_known(), post=Poster((200, answer)))
        with pytest.raises(TokenRejected) as refused:
            await verifier.verify_opaque("tok", b"k")
        assert refused.value.outcome == outcome


async def test_an_opaque_token_nobody_could_check_is_unavailable_not_inactive() -> None:
    verifier = OAuthVerifier(settings(), fetch=well_known(), post=Poster((503, b"")))
    with pytest.raises(TokenRejected) as refused:
        await verifier.verify_opaque("tok", b"k")
    assert refused.value.outcome == "unavailable"


# ---- the authenticator's verdicts and challenges ------------------------------------------------


def authenticator(**oauth: Any) -> tuple[Authenticator, list[tuple[str, str]]]:
    auth = AuthSettings.model_validate({"oauth": settings(**oauth).model_dump(mode="json")})
    authenticator = Authenticator.from_settings(auth, {}, fetch=well_known())
    counted: list[tuple[str, str]] = []
    authenticator.on_sign_in = lambda method, outcome: counted.append((method, outcome))
    return authenticator, counted


async def test_no_credential_gets_a_challenge_naming_the_metadata_and_scope() -> None:
    result = await authenticator()[0].authenticate({})
    assert isinstance(result, Rejected)
    assert result.status == 401
    assert result.www_authenticate() == (
        'Bearer realm="manifold", resource_metadata="https://mcp.example.test/.well-known/'
        'oauth-protected-resource/mcp", scope="mcp:tools"'
    )


async def test_a_token_without_a_required_scope_gets_403_insufficient_scope() -> None:
    auth, counted = authenticator()
    result = await auth.authenticate({"authorization": f"Bearer {access_token(scope='mcp:admin')}"})
    assert isinstance(result, Rejected)
    assert (result.reason, result.status) == (FailureReason.INSUFFICIENT_SCOPE, 403)
    assert 'error="insufficient_scope"' in result.www_authenticate()
    assert 'scope="mcp:tools"' in result.www_authenticate()
    assert counted == [("oauth", "insufficient_scope")]


async def test_a_good_token_is_verified_once_and_then_remembered() -> None:
    auth, counted = authenticator()
    token = access_token()
    for _ in range(3):
        assert isinstance(await auth.authenticate({"authorization": f"Bearer {token}"}), Authenticated)
    assert counted == [("oauth", "ok")]


async def test_a_jwt_of_an_unknown_issuer_is_refused_naming_the_issuer() -> None:
    result = await authenticator()[0].authenticate(
        {"authorization": f"Bearer {access_token(iss='https://x.test')}"}
    )
    assert isinstance(result, Rejected)
    assert "issuer" in result.message


async def test_api_keys_jwt_issuers_and_oauth_work_side_by_side() -> None:
    key, stored = generate_api_key()
    auth = Authenticator.from_settings(
        AuthSettings.model_validate(
            {
                "api_keys": [{"name": "ci", "key": stored}],
                "jwt": [{"issuer": "https://id.example.test", "audience": "manifold", "secret": SECRET}],
                "oauth": settings().model_dump(mode="json"),
            }
        ),
        {},
        fetch=well_known(),
    )
    by_key = await auth.authenticate({"x-api-key": key})
    by_jwt = await auth.authenticate({"authorization": f"Bearer {sign(claims())}"})
    by_oauth = await auth.authenticate({"authorization": f"Bearer {access_token()}"})
    sources = [r.identity.source if isinstance(r, Authenticated) else r for r in (by_key, by_jwt, by_oauth)]
    assert sources == ["api_key", "jwt", "oauth"]


# ---- found in review -------------------------------------------------------------------------


def test_discovered_endpoints_over_plain_http_are_not_used() -> None:
    document = {
        **METADATA,
        "jwks_uri": "http://id.example.test/jwks",
        "introspection_endpoint": "http://x.test/i",
    }
    metadata = parse_metadata(json.dumps(document).encode(), ISSUER, "u")
    assert (metadata.jwks_uri, metadata.introspection_endpoint) == (None, None)
    loopback = {**METADATA, "issuer": "http://127.0.0.1:9", "jwks_uri": "http://127.0.0.1:9/jwks"}
    assert parse_metadata(json.dumps(loopback).encode(), "http://127.0.0.1:9", "u").jwks_uri is not None


async def test_an_introspected_token_that_names_no_audience_is_refused_unless_allowed() -> None:
    answer = {"active": True, "sub": "u"}
    verifier = OAuthVerifier(settings(), fetch=well_known(), post=Poster((200, answer)))
    with pytest.raises(TokenRejected) as refused:
        await verifier.verify_opaque("tok", b"k")
    assert refused.value.outcome == "wrong_audience"
    lenient = settings(
        authorization_servers=[
            {
                "issuer": ISSUER,
                "introspection": {"client_id": "m", "client_secret": "s", "require_audience": False},
            }
        ]
    )
    verifier = OAuthVerifier(lenient, fetch=well_known(), post=Poster((200, answer)))
    assert (await verifier.verify_opaque("tok", b"k")).identity.subject == "u"


def test_only_one_authorization_server_may_introspect_opaque_tokens() -> None:
    introspection = {"client_id": "m", "client_secret": "s"}
    with pytest.raises(ValidationError, match="only one authorization server may introspect"):
        settings(
            authorization_servers=[
                {"issuer": ISSUER, "introspection": introspection},
                {"issuer": "https://other.example.test", "introspection": introspection},
            ]
        )


async def test_an_unreachable_authorization_server_is_503_come_back_not_a_bad_token() -> None:
    auth = AuthSettings.model_validate({"oauth": settings().model_dump(mode="json")})
    authenticator = Authenticator.from_settings(auth, {}, fetch=well_known())
    authenticator._oauth = OAuthVerifier(settings(), fetch=well_known(), post=Poster((503, b"")))
    result = await authenticator.authenticate({"authorization": "Bearer an-opaque-token"})
    assert isinstance(result, Rejected)
    assert result.status == 503
    headers = dict(result.headers())
    assert headers["retry-after"] == "5"
    assert "invalid_token" not in headers["www-authenticate"]  # the client keeps its token


# ---- outages, floods and the reasons they leave (issue 27) ---------------------------------------


class Hanging(Fetcher):
    """Answers from a dict, but never answers the URLs in ``hangs`` (a server that accepts and
    then says nothing)."""

    def __init__(self, documents: dict[str, Any], *hangs: str) -> None:
        super().__init__(documents)
        self.hangs = set(hangs)

    async def __call__(self, url: str) -> bytes:
        if url in self.hangs:
            self.asked.append(url)
            await anyio.sleep_forever()
        return await super().__call__(url)


async def test_readiness_does_not_wait_for_a_hanging_authorization_server() -> None:
    fetch = Hanging({}, *metadata_urls(ISSUER))
    verifier = OAuthVerifier(settings(), fetch=fetch)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(1):  # before: discovery's 10 s per well-known URL
            await tg.start(verifier.run)
        # A token meanwhile is not ours to judge yet: 503, at once (the request does not wait).
        with anyio.fail_after(1), pytest.raises(TokenRejected) as refused:
            await verifier.verify_jwt(access_token(), ISSUER)
        assert refused.value.outcome == "unavailable"
        tg.cancel_scope.cancel()


async def test_a_key_set_that_does_not_answer_makes_tokens_unavailable_not_invalid() -> None:
    fetch = Hanging(dict(well_known().documents), "https://id.example.test/jwks")
    keys = DiscoveredKeys(ISSUER, fetch=fetch, timeout=0.05)
    verifier = OAuthVerifier(settings(), fetch=fetch)
    verifier._servers[ISSUER] = dataclasses.replace(verifier._servers[ISSUER], keys=keys)
    assert await keys.discover() is not None
    with pytest.raises(TokenRejected) as refused:
        await verifier.verify_jwt(access_token(), ISSUER)
    assert refused.value.outcome == "unavailable"  # before: bad_signature, a 401 invalid_token
    assert keys.unreachable == "https://id.example.test/jwks: no answer in 0.05 s"


async def test_a_key_id_the_reachable_key_set_lacks_is_still_a_bad_signature() -> None:
    verifier = OAuthVerifier(settings(), fetch=well_known())
    token = jwt.encode(
        jwt.decode(access_token(), options={"verify_signature": False}),
        rsa_key("oauth"),
        algorithm="RS256",
        headers={"kid": "rotated-away", "typ": "at+jwt"},
    )
    with pytest.raises(TokenRejected) as refused:
        await verifier.verify_jwt(token, ISSUER)
    assert refused.value.outcome == "bad_signature"


async def test_a_metadata_timeout_is_reported_with_its_url_and_what_happened(
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys = DiscoveredKeys(ISSUER, fetch=Hanging({}, *metadata_urls(ISSUER)), timeout=0.05)
    assert await keys.discover() is None
    assert keys.problems[0] == f"{metadata_urls(ISSUER)[0]}: no answer in 0.05 s"
    assert not keys.wrong_issuer


async def test_check_online_gives_the_trailing_slash_hint_only_for_another_issuers_document() -> None:
    down = await check_servers(settings(), fetch=Fetcher({}))
    assert "HTTP 404" in down
    assert "trailing slash" not in down  # a plain "cannot connect" is not an issuer mismatch
    slashed = settings(authorization_servers=[{"issuer": ISSUER + "/"}])
    mismatch = await check_servers(slashed, fetch=well_known())
    assert "trailing slash" in mismatch


async def test_check_online_says_why_the_key_set_gave_no_key() -> None:
    fetch = Hanging(dict(well_known().documents), "https://id.example.test/jwks")
    with anyio.fail_after(10):
        problems = await check_servers(settings(), fetch=fetch, timeout=0.05)
    assert "no usable signing key at https://id.example.test/jwks" in problems
    assert "no answer in 0.05 s" in problems


async def test_a_token_from_an_untrusted_issuer_is_counted_as_wrong_issuer() -> None:
    auth, counted = authenticator()
    result = await auth.authenticate({"authorization": f"Bearer {access_token(iss='https://x.test')}"})
    assert isinstance(result, Rejected)
    assert result.message == "the token's issuer (iss) is not trusted here"
    slashed = await auth.authenticate({"authorization": f"Bearer {access_token(iss=ISSUER + '/')}"})
    assert isinstance(slashed, Rejected)
    assert "trailing '/'" in slashed.message
    assert counted == [("oauth", "wrong_issuer"), ("oauth", "wrong_issuer")]


async def test_a_garbage_three_part_token_is_malformed_not_of_an_untrusted_issuer() -> None:
    auth, counted = authenticator()
    result = await auth.authenticate({"authorization": "Bearer aaa.bbb.ccc"})
    assert isinstance(result, Rejected)
    assert result.message == "the token is malformed (not a JWT)"
    assert counted == [("oauth", "malformed")]


class Counting:
    """An introspection endpoint that says every token is unknown; counts the questions."""

    def __init__(self) -> None:
        self.asked = 0

    async def __call__(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        self.asked += 1
        return 200, b'{"active": false}'


async def test_unknown_opaque_tokens_cost_introspections_bounded_per_client_address() -> None:
    post = Counting()
    verifier = OAuthVerifier(settings(introspections_per_client=10), fetch=well_known(), post=post)
    outcomes = []
    for n in range(300):
        try:
            await verifier.verify_opaque(f"garbage-{n}", f"k{n}".encode(), "192.0.2.7")
        except TokenRejected as exc:
            outcomes.append(exc.outcome)
    assert post.asked == 10  # before: 300
    assert outcomes.count("inactive") == 10
    assert outcomes.count("throttled") == 290
    # Another address has its own share; a token answered before costs nothing and spends none.
    with pytest.raises(TokenRejected, match="not active"):
        await verifier.verify_opaque("garbage-0", b"k0", "192.0.2.7")
    with pytest.raises(TokenRejected, match="not active"):
        await verifier.verify_opaque("other", b"other", "192.0.2.8")
    assert post.asked == 11


async def test_unknown_opaque_tokens_from_many_addresses_are_bounded_in_total() -> None:
    post = Counting()
    verifier = OAuthVerifier(
        settings(introspections_per_client=10, introspections_per_second=20), fetch=well_known(), post=post
    )
    outcomes = []
    for n in range(300):
        try:
            await verifier.verify_opaque(f"garbage-{n}", f"k{n}".encode(), f"192.0.2.{n}")
        except TokenRejected as exc:
            outcomes.append(exc.outcome)
    assert post.asked <= 21  # a second's worth (and what trickled in while the loop ran)
    assert "unavailable" in outcomes  # not the client's fault: 503, come back


async def test_a_throttled_client_gets_429_with_retry_after() -> None:
    auth, counted = authenticator(introspections_per_client=1)
    auth._oauth = OAuthVerifier(settings(introspections_per_client=1), fetch=well_known(), post=Counting())
    first = await auth.authenticate({"authorization": "Bearer opaque-1"}, "192.0.2.7")
    second = await auth.authenticate({"authorization": "Bearer opaque-2"}, "192.0.2.7")
    assert isinstance(first, Rejected)
    assert first.status == 401
    assert isinstance(second, Rejected)
    assert second.status == 429
    assert dict(second.headers())["retry-after"] == "5"
    assert "invalid_token" not in dict(second.headers())["www-authenticate"]
    assert counted == [("introspection", "inactive"), ("introspection", "throttled")]


def test_a_lan_http_issuer_is_refused_with_one_clear_error() -> None:
    with pytest.raises(ValidationError) as refused:
        settings(authorization_servers=[{"issuer": "http://192.168.1.5:9000/"}])
    errors = refused.value.errors()
    assert len(errors) == 1, errors  # before: also "Tuple should have at least 1 item"
    assert "must use https:// unless the host is loopback" in str(errors[0]["msg"])
    with pytest.raises(ValidationError, match="at least one authorization server"):
        settings(authorization_servers=[])


async def test_with_auth_jwt_too_an_untrusted_issuer_is_counted_as_wrong_issuer() -> None:
    auth = Authenticator.from_settings(
        AuthSettings.model_validate(
            {
                "jwt": [{"issuer": "https://id.example.test", "audience": "manifold", "secret": SECRET}],
                "oauth": settings().model_dump(mode="json"),
            }
        ),
        {},
        fetch=well_known(),
    )
    counted: list[tuple[str, str]] = []
    auth.on_sign_in = lambda method, outcome: counted.append((method, outcome))
    result = await auth.authenticate({"authorization": f"Bearer {access_token(iss='https://x.test')}"})
    assert isinstance(result, Rejected)
    assert counted == [("jwt", "wrong_issuer")]  # before: ("jwt", "invalid")

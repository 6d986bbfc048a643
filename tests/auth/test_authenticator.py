from __future__ import annotations

import time
from typing import Any

import pytest

from proxy.auth.apikeys import generate_api_key
from proxy.auth.authenticator import Authenticated, Authenticator, AuthResult, FailureReason, Rejected
from proxy.auth.jwt import JwtVerifier, VerifiedToken
from proxy.config.auth import AuthSettings
from proxy.policy.model import Identity
from tests.auth.keys import AUDIENCE, ISSUER, SECRET, claims, sign

pytestmark = pytest.mark.anyio

KEY, STORED = generate_api_key()
ENV_KEY = "mfd_laptop-key-from-the-environment-0123"
CI = Identity("ci", frozenset({"deployer"}), "api_key")


def authenticator(environ: dict[str, str] | None = None, **auth: Any) -> Authenticator:
    auth.setdefault("api_keys", [{"name": "ci", "key": STORED, "roles": ["deployer"]}])
    return Authenticator.from_settings(AuthSettings.model_validate(auth), environ or {})


def with_jwt(**extra: Any) -> Authenticator:
    issuer = {"issuer": ISSUER, "audience": AUDIENCE, "secret": SECRET}
    return authenticator(jwt=[issuer], **extra)


def identity(result: AuthResult) -> Identity:
    assert isinstance(result, Authenticated), result
    return result.identity


async def test_an_api_key_is_accepted_as_a_bearer_token() -> None:
    assert identity(await authenticator().authenticate({"authorization": f"Bearer {KEY}"})) == CI


async def test_an_api_key_is_accepted_in_x_api_key() -> None:
    assert identity(await authenticator().authenticate({"x-api-key": KEY})) == CI


async def test_the_bearer_scheme_is_case_insensitive_and_spaces_around_the_key_are_ignored() -> None:
    assert identity(await authenticator().authenticate({"authorization": f"  bearer   {KEY} "})) == CI


async def test_an_env_key_proves_its_identity() -> None:
    auth = authenticator({"LAPTOP": ENV_KEY}, api_keys=[{"name": "laptop", "key": "env:LAPTOP"}])
    assert identity(await auth.authenticate({"x-api-key": ENV_KEY})).name == "laptop"


async def test_a_wrong_key_is_invalid_and_its_challenge_says_invalid_token() -> None:
    result = await authenticator().authenticate({"x-api-key": KEY + "x"})
    assert result == Rejected(FailureReason.INVALID, "the API key is not valid")
    assert isinstance(result, Rejected)
    assert result.status == 401
    assert result.www_authenticate() == (
        'Bearer realm="manifold", error="invalid_token", error_description="the API key is not valid"'
    )


async def test_no_credential_without_anonymous_access_is_missing_with_a_bare_challenge() -> None:
    result = await authenticator().authenticate({})
    assert isinstance(result, Rejected)
    assert result.reason is FailureReason.MISSING
    assert result.www_authenticate() == 'Bearer realm="manifold"'


async def test_no_credential_with_anonymous_access_is_the_configured_anonymous_identity() -> None:
    auth = authenticator(anonymous={"enabled": True, "name": "guest", "roles": ["reader"]})
    assert identity(await auth.authenticate({})) == Identity("guest", frozenset({"reader"}), "anonymous")
    assert not auth.requires_credentials


async def test_with_nothing_configured_clients_are_anonymous() -> None:
    auth = authenticator(api_keys=[])
    assert identity(await auth.authenticate({})) == Identity("anonymous", frozenset(), "anonymous")


async def test_a_bad_credential_is_refused_even_when_anonymous_access_is_on() -> None:
    auth = authenticator(anonymous={"enabled": True})
    result = await auth.authenticate({"authorization": "Bearer not-a-key"})
    assert isinstance(result, Rejected)
    assert result.reason is FailureReason.INVALID


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"authorization": f"Basic {KEY}"}, "the Authorization header must use the Bearer scheme"),
        ({"authorization": "Bearer "}, "the credential is empty"),
        ({"authorization": f"Bearer {KEY}", "x-api-key": KEY}, "Authorization or X-API-Key, not both"),
    ],
)
async def test_malformed_credentials_are_invalid(headers: dict[str, str], message: str) -> None:
    result = await authenticator().authenticate(headers)
    assert isinstance(result, Rejected)
    assert result.reason is FailureReason.INVALID
    assert message in result.message


async def test_a_token_is_refused_where_no_issuer_is_configured() -> None:
    result = await authenticator().authenticate({"authorization": f"Bearer {sign(claims())}"})
    assert isinstance(result, Rejected)
    assert "tokens are not accepted" in result.message


async def test_a_token_in_x_api_key_is_not_a_token() -> None:
    result = await with_jwt().authenticate({"x-api-key": sign(claims())})
    assert result == Rejected(FailureReason.INVALID, "the API key is not valid")


async def test_a_rejection_never_repeats_the_token() -> None:
    token = sign(claims(lifetime=-120))
    result = await with_jwt().authenticate({"authorization": f"Bearer {token}"})
    assert isinstance(result, Rejected)
    assert result.reason is FailureReason.EXPIRED
    assert token not in result.www_authenticate()
    assert token.split(".")[1] not in result.message


def test_an_error_description_holds_only_the_characters_rfc_6750_allows() -> None:
    rejected = Rejected(FailureReason.INVALID, 'a "quoted" \\ päth\n')
    assert rejected.www_authenticate().endswith('error_description="a ?quoted? ? p?th?"')


async def test_a_reused_token_is_verified_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    verify = JwtVerifier.verify

    async def counting(self: JwtVerifier, token: str) -> VerifiedToken:
        calls.append(token)
        return await verify(self, token)

    monkeypatch.setattr(JwtVerifier, "verify", counting)
    auth = with_jwt()
    headers = {"authorization": f"Bearer {sign(claims())}"}
    first, second = await auth.authenticate(headers), await auth.authenticate(headers)
    assert identity(first) == identity(second) == Identity("alice", frozenset(), "jwt", issuer=ISSUER)
    assert len(calls) == 1


async def test_a_cached_token_is_verified_again_once_it_has_expired(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    verify = JwtVerifier.verify

    async def counting(self: JwtVerifier, token: str) -> VerifiedToken:
        calls.append(token)
        return await verify(self, token)

    monkeypatch.setattr(JwtVerifier, "verify", counting)
    now = [time.time()]
    settings = AuthSettings.model_validate(
        {"jwt": [{"issuer": ISSUER, "audience": AUDIENCE, "secret": SECRET}]}
    )
    auth = Authenticator.from_settings(settings, {}, clock=lambda: now[0])
    headers = {"authorization": f"Bearer {sign(claims(lifetime=60))}"}
    await auth.authenticate(headers)
    now[0] += 61
    await auth.authenticate(headers)
    assert len(calls) == 2


async def test_the_stdio_client_has_the_configured_identity() -> None:
    auth = authenticator(stdio_identity={"name": "me", "roles": ["admin"]})
    assert auth.stdio_identity == Identity("me", frozenset({"admin"}), "stdio")

"""The OAuth client's parsing: what a hostile server or authorization server can make it believe."""

from __future__ import annotations

import base64
import hashlib
import json
from urllib.parse import parse_qs, urlsplit

import pytest

from proxy.core.redaction import redact_text
from proxy.credentials.oauth_client import (
    AuthServer,
    OAuthClientError,
    OAuthHttp,
    OAuthUnusable,
    Registered,
    authorize_url,
    check_resource,
    parse_auth_server,
    parse_protected_resource,
    parse_token_response,
    pkce_pair,
    resource_metadata_of,
    subject_of_id_token,
    token_audiences,
)

AS = AuthServer("https://as.example", "https://as.example/auth", "https://as.example/token")


def _jwt(claims: dict[str, object]) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJub25lIn0.{body}.sig"


def test_pkce_is_s256_of_a_fresh_verifier() -> None:
    verifier, challenge = pkce_pair()
    digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert challenge == digest
    assert 43 <= len(verifier) <= 128
    assert pkce_pair()[0] != verifier


def test_the_resource_metadata_comes_from_a_bearer_challenge_only() -> None:
    header = 'Bearer error="invalid_token", resource_metadata="https://s.example/.well-known/oauth-protected-resource/mcp"'
    assert resource_metadata_of(header) == "https://s.example/.well-known/oauth-protected-resource/mcp"
    assert resource_metadata_of('Basic realm="x", resource_metadata="https://x"') is None
    assert resource_metadata_of('Bearer resource_metadata="file:///etc/passwd"') is None
    assert resource_metadata_of(None) is None


def test_protected_resource_metadata_must_name_an_authorization_server() -> None:
    assert parse_protected_resource(
        b'{"resource": "https://s/mcp", "authorization_servers": ["https://as"]}', "prm"
    ) == ("https://s/mcp", ["https://as"])
    for bad in (b"[]", b"{}", b'{"authorization_servers": []}', b'{"authorization_servers": [1]}', b"nope"):
        with pytest.raises(OAuthClientError):
            parse_protected_resource(bad, "prm")


def test_a_server_naming_another_resource_is_refused() -> None:
    # RFC 9728 §3.3: the metadata's resource is the server's own URL, or nothing is asked for.
    assert check_resource("HTTPS://S.example:443/mcp", "https://s.example/mcp", "prm") == (
        "HTTPS://S.example:443/mcp"
    )
    assert check_resource("https://s.example", "https://s.example/", "prm") == "https://s.example"
    for hostile in (
        "https://bank.example/mcp",  # another server's tokens, asked for on its behalf
        "https://s.example/",  # a prefix: strict equality
        "https://s.example/mcp/other",
        "https://s.example:8443/mcp",
        "http://s.example/mcp",
    ):
        with pytest.raises(OAuthClientError, match="is not the server's URL"):
            check_resource(hostile, "https://s.example/mcp", "prm")
    with pytest.raises(OAuthClientError, match="no resource"):
        check_resource(None, "https://s.example/mcp", "prm")


def test_metadata_for_another_issuer_is_refused() -> None:
    good = {
        "issuer": "https://as",
        "authorization_endpoint": "https://as/a",
        "token_endpoint": "https://as/t",
        "code_challenge_methods_supported": ["S256"],
    }
    assert parse_auth_server(json.dumps(good).encode(), "https://as", "m").token_endpoint == "https://as/t"
    with pytest.raises(OAuthClientError, match="is not"):
        parse_auth_server(json.dumps({**good, "issuer": "https://evil"}).encode(), "https://as", "m")
    with pytest.raises(OAuthClientError, match="S256"):
        parse_auth_server(
            json.dumps({**good, "code_challenge_methods_supported": ["plain"]}).encode(), "https://as", "m"
        )
    with pytest.raises(OAuthClientError, match="token_endpoint"):
        parse_auth_server(json.dumps({**good, "token_endpoint": "javascript:x"}).encode(), "https://as", "m")


def test_the_authorize_url_carries_pkce_state_and_the_resource() -> None:
    url = authorize_url(
        AS,
        Registered("m"),
        redirect_uri="https://gw/cb",
        state="st",
        challenge="ch",
        resource="https://s/mcp",
        scope="offline_access read",
    )
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert url.startswith("https://as.example/auth?")
    assert query == {
        "response_type": "code",
        "client_id": "m",
        "redirect_uri": "https://gw/cb",
        "state": "st",
        "code_challenge": "ch",
        "code_challenge_method": "S256",
        "resource": "https://s/mcp",
        "scope": "offline_access read",
        "prompt": "consent",
    }


def test_token_responses() -> None:
    tokens = parse_token_response(
        200,
        b'{"access_token": "a", "token_type": "Bearer", "expires_in": 60, "refresh_token": "r"}',
        100.0,
        "i",
    )
    assert (tokens.access_token, tokens.expires_at, tokens.refresh_token, tokens.issuer) == (
        "a",
        160.0,
        "r",
        "i",
    )
    with pytest.raises(OAuthClientError, match="invalid_grant"):
        parse_token_response(400, b'{"error": "invalid_grant"}', 0, "i")
    with pytest.raises(OAuthClientError, match="no access_token"):
        parse_token_response(200, b'{"token_type": "Bearer"}', 0, "i")
    with pytest.raises(OAuthClientError, match="not a Bearer"):
        parse_token_response(200, b'{"access_token": "a", "token_type": "DPoP"}', 0, "i")
    with pytest.raises(OAuthClientError, match="JSON"):
        parse_token_response(200, b"<html>", 0, "i")


def test_audiences_and_subjects_are_read_from_jwts_only() -> None:
    assert token_audiences(_jwt({"aud": "https://s/mcp"})) == frozenset({"https://s/mcp"})
    assert token_audiences(_jwt({"aud": ["a", "b", 3]})) == frozenset({"a", "b"})
    assert token_audiences(_jwt({})) == frozenset()  # a JWT naming no audience: for nobody here
    assert token_audiences("opaque-token") is None
    assert subject_of_id_token(_jwt({"sub": "alice"})) == "alice"
    assert subject_of_id_token("x.y") is None


def test_an_authorization_server_that_does_not_list_s256_is_refused_for_the_code_flow() -> None:
    # The MCP authorization spec: a client MUST refuse when code_challenge_methods_supported is
    # absent (the server may not do PKCE at all, and a stolen code would then be usable).
    bare = {
        "issuer": "https://as",
        "authorization_endpoint": "https://as/a",
        "token_endpoint": "https://as/t",
    }
    with pytest.raises(OAuthClientError, match="S256"):
        parse_auth_server(json.dumps(bare).encode(), "https://as", "m")
    # Token exchange alone uses no code flow: nothing to refuse there.
    assert parse_auth_server(json.dumps(bare).encode(), "https://as", "m", pkce=False).issuer == "https://as"


LAN = {
    "issuer": "http://192.0.2.2:9000",
    "authorization_endpoint": "http://192.0.2.2:9000/auth",
    "token_endpoint": "http://192.0.2.2:9000/token",
    "code_challenge_methods_supported": ["S256"],
}


def test_plain_http_endpoints_off_loopback_are_refused_unless_the_rig_opts_out() -> None:
    document = json.dumps(LAN).encode()
    with pytest.raises(OAuthUnusable, match=r"authorization_endpoint must use https://.*allow_insecure_http"):
        parse_auth_server(document, LAN["issuer"], "m")  # type: ignore[arg-type]
    https_but_token_over_http = json.dumps(
        {**LAN, "issuer": "https://as", "authorization_endpoint": "https://as/a"}
    ).encode()
    with pytest.raises(OAuthUnusable, match="token_endpoint must use https://"):
        parse_auth_server(https_but_token_over_http, "https://as", "m")
    opted_out = parse_auth_server(document, LAN["issuer"], "m", plain_http=True)  # type: ignore[arg-type]
    assert opted_out.token_endpoint == "http://192.0.2.2:9000/token"
    loopback = {k: v.replace("192.0.2.2", "127.0.0.1") if isinstance(v, str) else v for k, v in LAN.items()}
    assert parse_auth_server(json.dumps(loopback).encode(), "http://127.0.0.1:9000", "m").issuer


@pytest.mark.anyio
async def test_a_plain_http_issuer_off_loopback_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(OAuthUnusable, match="the authorization server must use https://"):
        # 192.0.2.2 is TEST-NET-1: a request there would hang; the refusal comes first.
        await OAuthHttp(timeout=0.5).discover("http://192.0.2.2:9000/mcp", "http://192.0.2.2:9000")


def test_a_missing_pkce_s256_is_unusable_and_its_reason_survives_the_log_redactor() -> None:
    bare = {
        "issuer": "https://as",
        "authorization_endpoint": "https://as/a",
        "token_endpoint": "https://as/t",
    }
    with pytest.raises(OAuthUnusable) as refused:
        parse_auth_server(
            json.dumps(bare).encode(), "https://as", "https://as/.well-known/oauth-authorization-server"
        )
    assert "oauth-authorization-server: PKCE with S256 is not supported" in redact_text(str(refused.value))

"""auth.oauth.ca_file: an authorization server behind a private CA, over real TLS on loopback."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import jwt
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from proxy.auth.discovery import check_servers
from proxy.auth.jwt import TokenRejected
from proxy.auth.oauth import OAuthVerifier
from proxy.auth.tls import client_context
from proxy.config.oauth import OAuthSettings
from proxy.core.errors import ConfigError
from tests.auth.keys import public_jwk, rsa_key

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RESOURCE = "https://mcp.example.test/mcp"


def private_ca(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed CA certificate that is also the server's, for 127.0.0.1; (cert, key) files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "private test CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "ca.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


@asynccontextmanager
async def https_authorization_server(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """Metadata and a JWKS over https on 127.0.0.1, under a private CA; (issuer, CA file)."""
    cert_file, key_file = private_ca(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert_file), str(key_file))
    issuer: list[str] = []

    async def metadata(_: web.Request) -> web.Response:
        return web.json_response({"issuer": issuer[0], "jwks_uri": f"{issuer[0]}/jwks"})

    async def jwks(_: web.Request) -> web.Response:
        return web.Response(text=json.dumps({"keys": [public_jwk(rsa_key("tls"), "t1")]}))

    app = web.Application()
    app.router.add_get("/.well-known/oauth-authorization-server", metadata)
    app.router.add_get("/jwks", jwks)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        issuer.append(f"https://127.0.0.1:{runner.addresses[0][1]}")
        yield issuer[0], cert_file
    finally:
        await runner.cleanup()


def token(issuer: str) -> str:
    now = int(time.time())
    claims = {"iss": issuer, "aud": RESOURCE, "sub": "u-1", "iat": now, "exp": now + 600}
    return jwt.encode(claims, rsa_key("tls"), algorithm="RS256", headers={"kid": "t1", "typ": "at+jwt"})


def settings(issuer: str, ca_file: Path | None) -> OAuthSettings:
    return OAuthSettings.model_validate(
        {
            "resource": RESOURCE,
            "authorization_servers": [{"issuer": issuer}],
            "ca_file": None if ca_file is None else str(ca_file),
        }
    )


async def test_ca_file_trusts_a_private_ca_for_the_authorization_server(tmp_path: Path) -> None:
    async with https_authorization_server(tmp_path) as (issuer, ca_file):
        trusting = OAuthVerifier(settings(issuer, ca_file))
        signed_in = await trusting.verify_jwt(token(issuer), issuer)
        assert signed_in.identity.subject == "u-1"
        assert await check_servers(settings(issuer, ca_file)) == ""

        # Without it the system's CAs do not know this one: the token cannot be checked (503).
        system = OAuthVerifier(settings(issuer, None))
        with pytest.raises(TokenRejected) as refused:
            await system.verify_jwt(token(issuer), issuer)
        assert refused.value.outcome == "unavailable"
        assert "certificate verify failed" in await check_servers(settings(issuer, None))


def test_a_ca_file_that_is_no_pem_is_refused_naming_the_setting(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(ConfigError, match=r"auth\.oauth\.ca_file: .*junk\.pem"):
        client_context(str(junk))

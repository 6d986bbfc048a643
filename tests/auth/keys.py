"""Keys, key sets and tokens for the auth tests, plus a real JWKS server on 127.0.0.1."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

SECRET = "s3cret-that-is-long-enough-for-hs256!!"  # 38 bytes, over HS256's 32
ISSUER = "https://id.example.test"
AUDIENCE = "manifold"


@cache
def rsa_key(label: str) -> rsa.RSAPrivateKey:
    """One 2048-bit RSA key per label, made once per test run (making them is slow)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@cache
def ec_key(label: str) -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def public_jwk(
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, kid: str | None, **extra: Any
) -> dict[str, Any]:
    if isinstance(key, rsa.RSAPrivateKey):
        jwk: dict[str, Any] = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    else:
        jwk = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    if kid is not None:
        jwk["kid"] = kid
    return {**jwk, **extra}


def jwks(*keys: dict[str, Any]) -> dict[str, Any]:
    return {"keys": list(keys)}


def public_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def claims(lifetime: float = 600, **extra: Any) -> dict[str, Any]:
    """Claims valid for ``lifetime`` seconds from now (negative: expired that long ago)."""
    now = int(time.time())
    return {"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + int(lifetime), **extra}


def sign(payload: dict[str, Any], key: Any = SECRET, algorithm: str = "HS256", kid: str | None = None) -> str:
    headers = {"kid": kid} if kid is not None else None
    return jwt.encode(payload, key, algorithm=algorithm, headers=headers)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(payload: dict[str, Any], header: dict[str, Any], hmac_key: bytes | None) -> str:
    """A token PyJWT would refuse to make: unsigned, or HMAC-signed with any bytes at all."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}"
    signature = (
        b"" if hmac_key is None else hmac.new(hmac_key, signing_input.encode(), hashlib.sha256).digest()
    )
    return f"{signing_input}.{_b64(signature)}"


@dataclass
class JwksServer:
    """Serves ``document`` at ``/jwks`` and counts the requests."""

    document: dict[str, Any] = field(default_factory=lambda: {"keys": []})
    status: int = 200
    hits: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.json_response(self.document, status=self.status)


@asynccontextmanager
async def serving(server: JwksServer) -> AsyncIterator[str]:
    """Run ``server`` on a free port of 127.0.0.1; yields its JWKS URL."""
    app = web.Application()
    app.router.add_get("/jwks", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        yield f"http://127.0.0.1:{port}/jwks"
    finally:
        await runner.cleanup()

"""Inbound authentication: who is calling Manifold's HTTP endpoint (and its stdio one).

- :mod:`proxy.config.auth`: the ``auth`` config section and the anonymous-access decision.
- :mod:`proxy.auth.apikeys`: API keys, stored as SHA-256 digests; :func:`generate_api_key`.
- :mod:`proxy.auth.jwt` and :mod:`proxy.auth.jwks`: bearer JWTs and their issuers' key sets.
- :mod:`proxy.auth.authenticator`: headers in, :data:`AuthResult` out.

Deciding what an identity may do is not here: that is :mod:`proxy.policy`.

May import: config, core, policy (pinned in tests/test_architecture.py).
"""

from proxy.auth.apikeys import generate_api_key
from proxy.auth.authenticator import Authenticated, Authenticator, AuthResult, FailureReason, Rejected
from proxy.config.auth import AnonymousSettings, ApiKey, AuthSettings, JwtIssuer, StdioIdentity

__all__ = [
    "AnonymousSettings",
    "ApiKey",
    "AuthResult",
    "AuthSettings",
    "Authenticated",
    "Authenticator",
    "FailureReason",
    "JwtIssuer",
    "Rejected",
    "StdioIdentity",
    "generate_api_key",
]

"""The ``auth`` section of the config: who may connect to Manifold's HTTP endpoint, and as whom::

    auth:
      api_keys:                          # Authorization: Bearer <key>, or X-API-Key: <key>
        - name: ci                       # the identity (keys sharing a name share its roles)
          key: "sha256:9f86d0…"          # the key's SHA-256 (`manifold keygen` prints both) ...
          roles: [deployer]
        - name: laptop
          key: "env:MANIFOLD_LAPTOP_KEY" # ... or the key itself, read from this variable at start
      jwt:                               # Authorization: Bearer <JWT>
        - issuer: https://id.example.com/realms/main   # checked against `iss`; routes tokens here
          audience: manifold             # checked against `aud` (a string or a list)
          algorithms: [RS256]            # default: [HS256] with a secret, [RS256] with a JWKS
          jwks_url: https://id.example.com/realms/main/protocol/openid-connect/certs
          jwks_refresh: 300              # seconds between background refreshes of the URL
          name_claim: sub                # identity name (iss + sub key it); a dotted path walks objects
          roles_claim: realm_access.roles  # a list of strings, or one space-separated string
          leeway: 30                     # seconds of clock skew allowed on exp / nbf / iat
        - issuer: ci-runner
          secret: "${CI_JWT_SECRET}"     # HS256/384/512; at least as many bytes as the hash
      anonymous:                         # requests with no credential at all
        enabled: false                   # default: on only when no api_keys and no jwt are set
        name: anonymous
        roles: []
      stdio_identity: {name: stdio, roles: [admin]}   # the local user on the stdio transport
      token_cache_size: 10000            # verified JWTs remembered until exp (5 minutes at most)

The anonymous decision. A fresh config has no credentials, and ``make run`` must work on
loopback without any, so ``anonymous.enabled`` is *unset* by default, which means: anonymous
access is on exactly when neither ``api_keys`` nor ``jwt`` is configured. Configuring any
credential therefore turns anonymous access off, unless ``anonymous.enabled: true`` says
otherwise in so many words; unauthenticated access is never what an operator gets by adding
keys and forgetting a flag. Anonymous clients get ``anonymous.roles`` (none by default), so what
they may do is the policy's call. :meth:`AuthSettings.warnings` tells ``manifold check`` to warn
when anonymous access is on while Manifold listens on a non-loopback address. A request that
presents a credential is judged by it: a bad one is refused, never downgraded to anonymous.

Validation errors never repeat a key or secret value: a mistyped ``key`` may be a raw key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from proxy.config.oauth import OAuthSettings
from proxy.core.algorithms import ASYMMETRIC_ALGORITHMS, HMAC_ALGORITHMS, is_loopback

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "HMAC_ALGORITHMS",
    "AnonymousSettings",
    "ApiKey",
    "AuthSettings",
    "JwtIssuer",
    "StdioIdentity",
    "is_loopback",
]

_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")
_ENV = re.compile(r"env:[A-Za-z_][A-Za-z0-9_]*")


class _Model(BaseModel):
    # Inputs may hold keys and secrets: keep them out of str(ValidationError) and tracebacks.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


def _check_roles(roles: tuple[str, ...]) -> tuple[str, ...]:
    if any(not role.strip() for role in roles):
        raise ValueError("role names must not be empty")
    return roles


class ApiKey(_Model):
    """One API key: the identity it proves and how the key is stored."""

    name: str = Field(min_length=1)
    key: str
    roles: tuple[str, ...] = ()

    _roles = field_validator("roles")(_check_roles)

    @field_validator("key")
    @classmethod
    def _stored_form(cls, key: str) -> str:
        # The value is not repeated: whoever got this wrong may have pasted the raw key here.
        if not (_SHA256.fullmatch(key) or _ENV.fullmatch(key)):
            raise ValueError(
                "must be 'sha256:<64 lowercase hex digits>' or 'env:VARIABLE' "
                "(the value is not shown; `manifold keygen` makes a key and its stored form)"
            )
        return key


class JwtIssuer(_Model):
    """One trusted token issuer: how its tokens are verified and read."""

    issuer: str | None = Field(default=None, min_length=1)
    audience: str | tuple[str, ...] | None = None
    algorithms: tuple[str, ...]
    secret: SecretStr | None = None
    jwks_file: str | None = Field(default=None, min_length=1)
    jwks_url: str | None = None
    jwks_refresh: float = Field(default=300.0, ge=10, le=86400, allow_inf_nan=False)
    name_claim: str = Field(default="sub", min_length=1)
    roles_claim: str = Field(default="roles", min_length=1)
    leeway: float = Field(default=30.0, ge=0, le=600, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _default_algorithms(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("algorithms") is None:
            data = {**data, "algorithms": ("HS256",) if data.get("secret") is not None else ("RS256",)}
        return data

    @field_validator("jwks_url")
    @classmethod
    def _trustworthy_url(cls, url: str | None) -> str | None:
        if url is None:
            return url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must be an https:// URL (got {url!r})")
        # Keys fetched over plain HTTP could be swapped by anyone on the path, and with them
        # every identity; only this machine is trusted to serve them unencrypted.
        if parts.scheme == "http" and not is_loopback(parts.hostname):
            raise ValueError(f"must use https:// unless the host is loopback (got {url!r})")
        return url

    @model_validator(mode="after")
    def _keys_fit_algorithms(self) -> JwtIssuer:
        sources = [name for name in ("secret", "jwks_file", "jwks_url") if getattr(self, name) is not None]
        if len(sources) != 1:
            got = "none" if not sources else " and ".join(sources)
            raise ValueError(f"needs exactly one of 'secret', 'jwks_file' or 'jwks_url' (got {got})")
        if not self.algorithms:
            raise ValueError("algorithms: must name at least one algorithm")
        known = sorted(HMAC_ALGORITHMS) + sorted(ASYMMETRIC_ALGORITHMS)
        for algorithm in self.algorithms:
            if algorithm.lower() == "none":
                raise ValueError("algorithms: 'none' is never accepted: unsigned tokens prove nothing")
            if algorithm not in HMAC_ALGORITHMS and algorithm not in ASYMMETRIC_ALGORITHMS:
                raise ValueError(f"algorithms: unknown algorithm {algorithm!r} (known: {', '.join(known)})")
        # One key kind per issuer: verifying an RS token with the public key as an HMAC secret
        # (or the reverse) is the algorithm-confusion attack.
        if self.secret is not None:
            if wrong := [a for a in self.algorithms if a not in HMAC_ALGORITHMS]:
                raise ValueError(f"algorithms: a 'secret' verifies only HS256/384/512 (got {wrong[0]!r})")
            need = max(HMAC_ALGORITHMS[a] for a in self.algorithms)
            if len(self.secret.get_secret_value().encode()) < need:
                raise ValueError(f"secret: must be at least {need} bytes for {', '.join(self.algorithms)}")
        elif wrong := [a for a in self.algorithms if a in HMAC_ALGORITHMS]:
            raise ValueError(
                f"algorithms: {wrong[0]!r} needs a 'secret'; a JWKS verifies only RS/PS/ES/EdDSA"
            )
        return self


class AnonymousSettings(_Model):
    """Requests without any credential; ``enabled`` unset means "only if no credential is configured"."""

    enabled: bool | None = None
    name: str = Field(default="anonymous", min_length=1)
    roles: tuple[str, ...] = ()

    _roles = field_validator("roles")(_check_roles)


class StdioIdentity(_Model):
    """The identity of the client on the stdio transport: whoever started Manifold."""

    name: str = Field(default="stdio", min_length=1)
    roles: tuple[str, ...] = ()

    _roles = field_validator("roles")(_check_roles)


class AuthSettings(_Model):
    """Inbound authentication; see the module docstring for the format and the defaults."""

    api_keys: tuple[ApiKey, ...] = ()
    jwt: tuple[JwtIssuer, ...] = ()
    oauth: OAuthSettings | None = None
    anonymous: AnonymousSettings = AnonymousSettings()
    stdio_identity: StdioIdentity = StdioIdentity()
    token_cache_size: int = Field(default=10_000, ge=1, le=10_000_000)

    @property
    def credentials_configured(self) -> bool:
        """Whether any way to prove an identity is configured (API keys, JWT issuers, OAuth)."""
        return bool(self.api_keys or self.jwt or self.oauth is not None)

    @property
    def anonymous_enabled(self) -> bool:
        """Whether requests without a credential are let in as the anonymous identity."""
        if self.anonymous.enabled is not None:
            return self.anonymous.enabled
        return not self.credentials_configured

    def warnings(self, bind_host: str) -> list[str]:
        """What ``manifold check`` should warn about when Manifold listens on ``bind_host``."""
        found = self.oauth.warnings() if self.oauth is not None else []
        if not self.anonymous_enabled or is_loopback(bind_host):
            return found
        why = "auth.anonymous.enabled is true" if self.anonymous.enabled else "no credentials are configured"
        return [
            *found,
            f"anyone who can reach {bind_host} may connect without credentials ({why}); "
            "configure auth.api_keys, auth.jwt or auth.oauth, or bind listen.host to 127.0.0.1",
        ]

    @model_validator(mode="after")
    def _unambiguous(self) -> AuthSettings:
        stored: dict[str, int] = {}
        for index, api_key in enumerate(self.api_keys):
            if api_key.key in stored:
                # Which identity would the key prove? Say so now rather than pick one.
                raise ValueError(
                    f"api_keys[{index}].key: the same key as api_keys[{stored[api_key.key]}] "
                    f"(names {self.api_keys[stored[api_key.key]].name!r} and {api_key.name!r})"
                )
            stored[api_key.key] = index
        named: dict[str, int] = {}
        for index, api_key in enumerate(self.api_keys):
            first = named.setdefault(api_key.name, index)
            # A key's name is its identity (its subject): keys sharing one are one identity, as
            # while a key is rotated. One identity with two role sets would be two in disguise.
            if set(self.api_keys[first].roles) != set(api_key.roles):
                raise ValueError(
                    f"api_keys[{index}].name: {api_key.name!r} also names api_keys[{first}] with other "
                    "roles (keys with one name are one identity, e.g. while a key is rotated: give "
                    "them the same roles, or different names)"
                )
        issuers: dict[str | None, int] = {}
        for index, issuer in enumerate(self.jwt):
            if issuer.issuer in issuers:
                what = (
                    f"issuer {issuer.issuer!r} is" if issuer.issuer else "more than one entry has no issuer;"
                )
                raise ValueError(
                    f"jwt[{index}].issuer: {what} also configured at jwt[{issuers[issuer.issuer]}]"
                    " (tokens are routed to an entry by their 'iss' claim)"
                )
            issuers[issuer.issuer] = index
        for index, server in enumerate(self.oauth.authorization_servers if self.oauth else ()):
            if server.issuer in issuers:
                raise ValueError(
                    f"oauth.authorization_servers[{index}].issuer: {server.issuer!r} is also "
                    f"jwt[{issuers[server.issuer]}] (a token of that issuer would have two meanings)"
                )
        return self

"""The ``auth.oauth`` section: Manifold as an OAuth 2.1 resource server (MCP authorization)::

    auth:
      oauth:
        resource: https://mcp.example.com/mcp    # the canonical URI clients use for /mcp
        authorization_servers:
          - issuer: https://id.example.com/realms/acme   # RFC 8414 / OIDC discovery from here
            audience: null           # `aud` tokens must carry; default: `resource`
            algorithms: [RS256, ES256]
            require_jwt_type: true   # RFC 9068: a JWT access token's `typ` is at+jwt
            introspection:           # opaque tokens (RFC 7662); the endpoint is discovered
              client_id: manifold
              client_secret: ${INTROSPECTION_SECRET}
        scopes_supported: [mcp:tools]  # advertised in the Protected Resource Metadata
        required_scopes: [mcp:tools]   # every token must carry them, else 403 insufficient_scope
        scope_roles: {mcp:admin: [admin]}   # scopes -> role names: only mapped scopes give roles
        scopes_as_roles: false       # true: every granted scope is also a role of its name (risky)
        roles_claim: null            # a claim with more roles (e.g. realm_access.roles)
        name_claim: sub              # the identity's name (the policy's `identities`)
        introspection_cache: 60      # seconds an introspected answer is believed (bounded by exp)
        introspections_per_client: 30  # unknown opaque tokens checked per client address a minute
        introspections_per_second: 20  # ... and for all clients together, a second
        ca_file: null                # PEM file of CAs trusted for the authorization servers

A token is checked the way RFC 9068 and the MCP authorization spec say: signed by a key of the
issuer's JWKS (found through its discovered metadata), `iss` one of the configured servers, `aud`
this resource (a token for another resource is refused: no token passthrough, no confused
deputy), `exp` in the future. Opaque tokens are asked about at the issuer's introspection
endpoint. Validation errors never repeat a secret.

A granted scope is *not* a role by itself: many authorization servers grant whatever scope a
dynamically registered client asks for, so a scope named `admin` would make anyone an admin.
Only `scope_roles` turns scopes into roles, unless `scopes_as_roles: true` says every scope is
one (and `manifold check` then warns about each role the policy grants that a scope could carry).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from proxy.core.algorithms import ASYMMETRIC_ALGORITHMS, is_loopback

__all__ = ["AuthorizationServer", "Introspection", "OAuthSettings", "check_https_url"]

_SCOPE_CHARS: Final = frozenset(chr(c) for c in range(0x21, 0x7F)) - {'"', "\\"}  # RFC 6749 §3.3


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


def check_https_url(url: str, *, what: str, plain_http: bool = False) -> str:
    """``url`` if it is absolute https (http only to a loopback host, or anywhere when
    ``plain_http``: a test rig's explicit opt-out), without a fragment.

    Raises:
        ValueError: naming ``what`` and the problem.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an absolute https:// URL (got {url!r})")
    if parts.scheme == "http" and not is_loopback(parts.hostname) and not plain_http:
        # Metadata, keys and tokens over plain HTTP could be swapped by anyone on the path.
        raise ValueError(f"{what} must use https:// unless the host is loopback (got {url!r})")
    if parts.fragment or url.endswith("#"):
        raise ValueError(f"{what} must not have a fragment (got {url!r})")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{what} must not carry credentials")
    return url


class Introspection(_Model):
    """How Manifold authenticates itself at an introspection endpoint (client_secret_basic)."""

    client_id: str = Field(min_length=1)
    client_secret: SecretStr
    endpoint: str | None = None  # default: the discovered introspection_endpoint
    # An answer that names no audience may be about a token minted for another service of the
    # same authorization server: refused unless the operator knows this server never says.
    require_audience: bool = True

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, url: str | None) -> str | None:
        return None if url is None else check_https_url(url, what="endpoint")


class AuthorizationServer(_Model):
    """One authorization server whose tokens Manifold accepts."""

    issuer: str
    audience: str | None = None
    algorithms: tuple[str, ...] = ("RS256", "ES256", "PS256", "EdDSA")
    require_jwt_type: bool = True
    introspection: Introspection | None = None
    metadata_url: str | None = None  # default: RFC 8414, then OpenID Connect discovery
    leeway: float = Field(default=30.0, ge=0, le=600, allow_inf_nan=False)

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, url: str) -> str:
        check_https_url(url, what="issuer")
        if urlsplit(url).query:
            raise ValueError(f"issuer must not have a query (RFC 8414 §2; got {url!r})")
        return url

    @field_validator("metadata_url")
    @classmethod
    def _metadata_url(cls, url: str | None) -> str | None:
        return None if url is None else check_https_url(url, what="metadata_url")

    @field_validator("algorithms")
    @classmethod
    def _algorithms(cls, algorithms: tuple[str, ...]) -> tuple[str, ...]:
        if not algorithms:
            raise ValueError("must name at least one algorithm")
        for algorithm in algorithms:
            if algorithm not in ASYMMETRIC_ALGORITHMS:
                # An HMAC key would be a secret shared with the issuer: not how OAuth servers sign.
                known = ", ".join(sorted(ASYMMETRIC_ALGORITHMS))
                raise ValueError(f"unknown or symmetric algorithm {algorithm!r} (accepted: {known})")
        return algorithms


class OAuthSettings(_Model):
    """Manifold as a protected resource: what it advertises and which tokens it takes."""

    resource: str
    # At least one: checked after the items (a min_length here would add a second, confusing
    # "Tuple should have at least 1 item" error to each refused item's own).
    authorization_servers: tuple[AuthorizationServer, ...]
    scopes_supported: tuple[str, ...] = ()
    required_scopes: tuple[str, ...] = ()
    scope_roles: dict[str, tuple[str, ...]] = {}
    scopes_as_roles: bool = False  # every granted scope a role of its own name: only on purpose
    # PEM CAs trusted for the authorization servers (else the system's); read when the verifier
    # is built (serve, check), where an unreadable file is a ConfigError naming this setting.
    ca_file: str | None = Field(default=None, min_length=1)
    roles_claim: str | None = None
    name_claim: str = Field(default="sub", min_length=1)
    resource_name: str = "Manifold"
    introspection_cache: float = Field(default=60.0, ge=0, le=3600, allow_inf_nan=False)
    # Unknown opaque tokens each cost one introspection request: bounded per client address (a
    # minute's worth) and for everyone together (a second's worth); see proxy.auth.budget.
    introspections_per_client: int = Field(default=30, ge=1, le=100_000)
    introspections_per_second: int = Field(default=20, ge=1, le=100_000)

    @field_validator("resource")
    @classmethod
    def _resource(cls, url: str) -> str:
        check_https_url(url, what="resource")
        parts = urlsplit(url)
        if parts.query:
            raise ValueError(f"resource should not have a query (RFC 8707 §2; got {url!r})")
        if parts.scheme != parts.scheme.lower() or (parts.netloc != parts.netloc.lower()):
            raise ValueError(f"resource must be canonical: lower-case scheme and host (got {url!r})")
        if url.endswith("/") and parts.path != "/":
            raise ValueError(f"resource must not end with '/' (the canonical form; got {url!r})")
        return url

    @field_validator("authorization_servers")
    @classmethod
    def _some_server(cls, servers: tuple[AuthorizationServer, ...]) -> tuple[AuthorizationServer, ...]:
        if not servers:
            raise ValueError("name at least one authorization server")
        return servers

    @field_validator("scopes_supported", "required_scopes")
    @classmethod
    def _scopes(cls, scopes: tuple[str, ...]) -> tuple[str, ...]:
        for scope in scopes:
            if not scope or not set(scope) <= _SCOPE_CHARS:
                raise ValueError(f"{scope!r} is not a scope token (RFC 6749 §3.3: no spaces or quotes)")
        if "offline_access" in scopes:
            # The MCP spec: servers SHOULD NOT ask for it; refresh tokens are the client's business.
            raise ValueError("'offline_access' is not a resource's scope; leave it to clients")
        return scopes

    @model_validator(mode="after")
    def _distinct_issuers(self) -> OAuthSettings:
        seen: dict[str, int] = {}
        for index, server in enumerate(self.authorization_servers):
            if server.issuer in seen:
                raise ValueError(
                    f"authorization_servers[{index}].issuer: {server.issuer!r} is also "
                    f"authorization_servers[{seen[server.issuer]}]"
                )
            seen[server.issuer] = index
        introspecting = [i for i, s in enumerate(self.authorization_servers) if s.introspection]
        if len(introspecting) > 1:
            # An opaque token does not say who issued it: asking every server would hand one
            # server's tokens (and Manifold's credentials there) to the others.
            raise ValueError(
                f"authorization_servers[{introspecting[1]}].introspection: only one authorization "
                f"server may introspect opaque tokens (authorization_servers[{introspecting[0]}] "
                "already does); the others' tokens must be JWTs"
            )
        return self

    def warnings(self) -> list[str]:
        """What ``manifold check`` should warn about: settings that work, but not as meant."""
        found = []
        if self.scopes_supported and (unlisted := set(self.required_scopes) - set(self.scopes_supported)):
            found.append(
                f"auth.oauth.required_scopes {sorted(unlisted)} are not in scopes_supported: a client "
                "that asks for scopes_supported gets tokens that are refused with 403"
            )
        return found

    @property
    def path(self) -> str:
        """The resource's path, as clients see it (``/mcp``; behind a proxy maybe ``/team/mcp``)."""
        return urlsplit(self.resource).path or "/"

    @property
    def metadata_url(self) -> str:
        """Where this resource's Protected Resource Metadata is (RFC 9728 §3.1: well-known
        between the host and the path)."""
        parts = urlsplit(self.resource)
        suffix = "" if self.path == "/" else self.path
        return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{suffix}"

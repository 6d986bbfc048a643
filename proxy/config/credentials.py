"""What the operator writes about credentials to servers.

Per server, ``servers.<id>.credentials`` says whose credentials its requests carry (``mode``)::

    servers:
      github:                          # HTTP: the identity's secret in a header
        url: https://api.example.com/mcp
        credentials: {mode: secret, header: Authorization, template: "Bearer {secret}"}
      files:                           # stdio: the identity's secret in its own process's env
        command: files-server
        credentials: {mode: secret, env: FILES_TOKEN}

``shared`` (the default) is the configured ``headers``/``env`` for everybody. Every other mode
gives each client a connection of its own (``session_mode: per_client``, implied), built with its
identity's credentials.

Top-level ``credentials`` says where per-identity secrets are kept (:mod:`proxy.credentials.store`)::

    credentials:
      store: file                      # file | redis | env
      path: credentials.json           # file: next to the config file unless absolute
      key: ${MANIFOLD_CREDENTIALS_KEY} # 32 bytes, urlsafe base64: `manifold credentials keygen`
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

__all__ = [
    "CredentialStoreSettings",
    "ExchangeCredentials",
    "KEY_BYTES",
    "OAuthCredentials",
    "SecretCredentials",
    "ServerCredentials",
    "SharedCredentials",
    "decode_key",
]

KEY_BYTES: Final = 32  # AES-256-GCM
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP token (RFC 9110)
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Headers Manifold writes itself, or that would change how the request is framed.
_RESERVED_HEADERS: Final = frozenset(
    {"content-length", "content-type", "host", "transfer-encoding", "mcp-session-id", "mcp-protocol-version"}
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SharedCredentials(_Model):
    """The configured ``headers``/``env``, for every client alike (today's behaviour)."""

    mode: Literal["shared"] = "shared"


class SecretCredentials(_Model):
    """A secret per identity (a personal access token), from the credential store."""

    mode: Literal["secret"]
    # HTTP servers: sent as this header, ``template`` filled with the secret.
    header: str = Field(default="Authorization", min_length=1, max_length=128)
    template: str = Field(default="Bearer {secret}", min_length=8, max_length=1024)
    # stdio servers: the variable the identity's own process finds its secret in (required there).
    env: str | None = Field(default=None, min_length=1, max_length=128)

    @field_validator("header")
    @classmethod
    def _header_name(cls, header: str) -> str:
        if not _HEADER_NAME.fullmatch(header):
            raise ValueError(f"must be an HTTP header name (got {header!r})")
        if header.lower() in _RESERVED_HEADERS:
            raise ValueError(f"{header!r} is a header Manifold writes itself; choose another")
        return header

    @field_validator("template")
    @classmethod
    def _one_placeholder(cls, template: str) -> str:
        rest = template.replace("{secret}", "", 1)
        if "{secret}" not in template or "{" in rest or "}" in rest:
            raise ValueError("must contain '{secret}' once and no other braces (e.g. 'Bearer {secret}')")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in template):
            raise ValueError("must not contain control characters")
        return template

    @field_validator("env")
    @classmethod
    def _env_name(cls, name: str | None) -> str | None:
        if name is not None and not _ENV_NAME.fullmatch(name):
            raise ValueError(f"must be an environment variable name, [A-Za-z_][A-Za-z0-9_]* (got {name!r})")
        return name

    def render(self, secret: str) -> str:
        """The header value that carries ``secret``."""
        return self.template.replace("{secret}", secret, 1)


class OAuthCredentials(_Model):
    """Manifold signs each user in at the server's own authorization server and calls the server
    with that user's token (OAuth client on the user's behalf: :mod:`proxy.credentials.on_behalf`).

    The authorization server is found from the server's 401 (Protected Resource Metadata) unless
    ``issuer`` names it; Manifold's client there is ``client_id``/``client_secret``, or registers
    itself (dynamic client registration) when none is given."""

    mode: Literal["oauth"]
    scopes: tuple[str, ...] = ()  # asked for at sign-in (add offline_access for refresh tokens)
    issuer: str | None = Field(default=None, pattern=r"^https?://")
    client_id: str | None = Field(default=None, min_length=1, max_length=512)
    client_secret: SecretStr | None = None
    # The ID token's sub must be the caller's (a link opened by somebody else binds nothing).
    # None: when the caller signed in to Manifold at this same authorization server.
    same_subject: bool | None = None


class ExchangeCredentials(_Model):
    """The caller's inbound token exchanged (RFC 8693) for one whose audience is the server
    (:mod:`proxy.credentials.exchange`); the caller's own token is never sent on."""

    mode: Literal["exchange"]
    audience: str | None = Field(default=None, min_length=1)  # None: the server's url
    issuer: str | None = Field(default=None, pattern=r"^https?://")  # None: auth.oauth's only one
    client_id: str = Field(min_length=1, max_length=512)  # Manifold's client at the issuer
    client_secret: SecretStr
    scopes: tuple[str, ...] = ()


ServerCredentials: TypeAlias = Annotated[
    SharedCredentials | SecretCredentials | OAuthCredentials | ExchangeCredentials,
    Field(discriminator="mode"),
]


def decode_key(text: str) -> bytes:
    """A credential key as written (urlsafe or standard base64 of 32 bytes), as bytes.

    Raises:
        ValueError: it is not base64, or not 32 bytes long (the message never repeats it).
    """
    cleaned = text.strip()
    try:
        key = base64.urlsafe_b64decode(
            cleaned.replace("+", "-").replace("/", "_") + "=" * (-len(cleaned) % 4)
        )
    except (binascii.Error, ValueError):
        raise ValueError(
            f"must be {KEY_BYTES} bytes in base64 (make one with `manifold credentials keygen`)"
        ) from None
    if len(key) != KEY_BYTES:
        raise ValueError(
            f"must be {KEY_BYTES} bytes in base64 (got {len(key)} bytes; make one with "
            "`manifold credentials keygen`)"
        )
    return key


class CredentialStoreSettings(_Model):
    """Where per-identity secrets (and tokens kept for identities) live."""

    # file: one JSON file, sealed entries (small setups; written by `manifold credentials set`);
    # redis: sealed entries every replica shares; env: plaintext variables, read-only
    # (``<env_prefix><server>__<subject>``, API-key and stdio identities only).
    store: Literal["file", "redis", "env"] = "file"
    path: str = Field(default="credentials.json", min_length=1)
    # AES-256-GCM key, urlsafe base64 of 32 bytes; required by file and redis stores. Give it
    # with ${VAR}. Entries sealed with another key are unreadable (the caller is told, and logs say).
    key: SecretStr | None = None
    # None: rate_limits.redis_url. May carry a password: kept out of repr, never echoed.
    redis_url: str | None = Field(default=None, repr=False)
    key_prefix: str = Field(default="manifold:credentials:", min_length=1, max_length=200)
    env_prefix: str = Field(default="MCP_SECRET__", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_]+$")
    # Bounds on what the store holds and Manifold reads.
    max_secret_bytes: int = Field(default=16 * 1024, ge=16, le=1024 * 1024)
    max_entries: int = Field(default=100_000, ge=1)
    timeout: float = Field(default=2.0, gt=0, le=30, allow_inf_nan=False)  # seconds per Redis call
    # oauth mode: where authorization servers send users back (Manifold's /oauth/callback as the
    # users' browsers reach it; None: the listener's), and how long a sign-in link stays good.
    callback_url: str | None = Field(default=None, pattern=r"^https?://[^?#]+/oauth/callback$")
    signin_timeout: float = Field(default=600.0, ge=10, le=3600, allow_inf_nan=False)
    # oauth and exchange modes: authorization servers must use https unless on loopback (the MCP
    # authorization spec); true lets plain http through anywhere, logged loudly: test rigs only.
    allow_insecure_http: bool = False

    @field_validator("key")
    @classmethod
    def _key_decodes(cls, key: SecretStr | None) -> SecretStr | None:
        if key is not None:
            decode_key(key.get_secret_value())
        return key

    @field_validator("env_prefix")
    @classmethod
    def _not_a_setting(cls, prefix: str) -> str:
        if prefix.upper().startswith("MANIFOLD_"):
            raise ValueError(
                f"must not start with MANIFOLD_: those variables set Manifold's settings (got {prefix!r})"
            )
        return prefix

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return url

    def key_bytes(self) -> bytes | None:
        """The configured key, decoded (None if none is configured)."""
        return None if self.key is None else decode_key(self.key.get_secret_value())

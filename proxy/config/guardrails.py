"""The ``policy.guardrails`` section of Manifold's config: inspection bounds and the external
inspection services (hooks) guardrail rules may name (``docs/reference/guardrails.md``).

The rules themselves are policy (the ``guardrails:`` section of a policy file); what lives here is
how the gateway runs them: how much of a message is inspected, when a scan leaves the event loop,
and where each hook is, how it is reached and what happens when it fails.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = ["GuardrailSettings", "HookCache", "HookSettings", "HookTLS"]

_KIB = 1024
_MIB = 1024 * _KIB


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HookTLS(_Model):
    """mTLS to a hook: our certificate and key, and the CA its certificate must chain to."""

    cert: str | None = None  # PEM file: Manifold's client certificate
    key: str | None = None  # PEM file: its private key
    ca: str | None = None  # PEM file: trust only this CA for the hook (default: the system's)


class HookCache(_Model):
    """Answers remembered for identical content (same hook, direction, server, tool, content)."""

    entries: int = Field(default=1024, ge=0, le=1_000_000)  # 0: no cache
    ttl: float = Field(default=60.0, gt=0, le=86_400, allow_inf_nan=False)  # seconds


class HookSettings(_Model):
    """One external inspection service."""

    url: Annotated[str, Field(min_length=1, pattern=r"^https?://")]
    timeout: float = Field(default=2.0, gt=0, le=60, allow_inf_nan=False)  # seconds per request
    concurrency: int = Field(default=16, ge=1, le=1024)  # requests in flight at once
    failure: Literal["open", "closed"] = "closed"  # what a failed hook means: allow, or deny
    bearer_token: SecretStr | None = Field(default=None, repr=False)
    tls: HookTLS = HookTLS()
    cache: HookCache = HookCache()
    max_response_bytes: int = Field(default=1 * _MIB, ge=1 * _KIB, le=64 * _MIB)


class GuardrailSettings(_Model):
    """How guardrail rules run. ``max_bytes``: characters of one message inspected (past it, the
    pseudo-detector ``inspection_limit`` reports it); ``max_depth``: nesting followed;
    ``in_thread_bytes``: a message larger than this is scanned on a worker thread."""

    max_bytes: int = Field(default=1 * _MIB, ge=1 * _KIB, le=256 * _MIB)
    max_depth: int = Field(default=64, ge=1, le=1000)
    in_thread_bytes: int = Field(default=64 * _KIB, ge=0)
    hooks: dict[
        Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)], HookSettings
    ] = Field(default_factory=dict)

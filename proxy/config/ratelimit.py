"""The ``rate_limits:`` section of the config: where buckets live, what happens when that place
cannot be reached, and the per-address HTTP flood limit. The limits themselves are policy
(:mod:`proxy.policy.limits`); the stores are :mod:`proxy.ratelimit`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from proxy.policy.limits import RateField

__all__ = ["HttpFloodLimit", "RateLimitSettings"]


class HttpFloodLimit(BaseModel):
    """A per-address limit on HTTP requests, in process memory on each replica."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate: RateField
    burst: int = Field(default=1, ge=1, le=1_000_000)


class RateLimitSettings(BaseModel):
    """Where buckets live and what happens when that place cannot be reached."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["memory", "redis"] = "memory"
    # May carry a password: kept out of repr, and never echoed in an error.
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", repr=False)
    key_prefix: str = Field(default="manifold:rl:", min_length=1, max_length=200)
    failure_mode: Literal["fail_open", "fail_closed"] = "fail_open"
    timeout: float = Field(default=0.25, gt=0, le=10, allow_inf_nan=False)
    # Before any MCP parsing: requests per client address, answered 429 with Retry-After when
    # exceeded. None (the default) leaves it off; e.g. {rate: 50/second, burst: 100}.
    http: HttpFloodLimit | None = None

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str) -> str:
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return url

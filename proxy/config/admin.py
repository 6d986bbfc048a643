"""The ``admin:`` section of the config: the admin API (:mod:`proxy.admin`), off unless given.

::

    admin:
      roles: [admin]            # identities holding one of these roles may use /admin/api/
      listen: {host: 127.0.0.1, port: 9090}   # optional: the admin API on its own listener only
      redis_url: null           # overlays and cross-replica actions; null: rate_limits.redis_url
                                # when rate_limits.backend is redis, else this replica only
      replica: null             # this replica's name in answers; null: host name and process id
      writes: {rate: 30/minute, burst: 10}      # admin writes per identity
      requests: {rate: 20/second, burst: 40}    # admin requests per client address
      reply_wait: 1.0           # seconds an action waits for the other replicas to answer
      grafana_url: null         # the console links here for long-term metrics
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from proxy.config.ratelimit import HttpFloodLimit

__all__ = ["AdminListen", "AdminSettings"]


class AdminListen(BaseModel):
    """The admin API's own listener: nothing else is served there, and it is not on the main one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=9090, ge=0, le=65535)


class AdminSettings(BaseModel):
    """The ``admin:`` section of the config."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    roles: tuple[str, ...] = Field(default=("admin",), min_length=1)
    listen: AdminListen | None = None
    # May carry a password: kept out of repr, never echoed.
    redis_url: str | None = Field(default=None, repr=False)
    replica: str | None = Field(default=None, min_length=1, max_length=128)
    writes: HttpFloodLimit = HttpFloodLimit.model_validate({"rate": "30/minute", "burst": 10})
    requests: HttpFloodLimit = HttpFloodLimit.model_validate({"rate": "20/second", "burst": 40})
    reply_wait: float = Field(default=1.0, gt=0, le=30, allow_inf_nan=False)
    grafana_url: str | None = None

    @field_validator("roles")
    @classmethod
    def _roles_named(cls, roles: tuple[str, ...]) -> tuple[str, ...]:
        if any(not role.strip() for role in roles):
            raise ValueError("a role is a non-empty name")
        return roles

    @field_validator("redis_url", "grafana_url")
    @classmethod
    def _scheme(cls, url: str | None, info: ValidationInfo) -> str | None:
        schemes = (
            ("redis://", "rediss://", "unix://")
            if info.field_name == "redis_url"
            else ("http://", "https://")
        )
        if url is not None and not url.startswith(schemes):
            raise ValueError(f"must start with {', '.join(schemes[:-1])} or {schemes[-1]}")
        return url

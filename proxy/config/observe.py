"""The ``logging:`` and ``metrics:`` sections of the config: how Manifold reports on itself.

:mod:`proxy.observe.logs` and :mod:`proxy.observe.metrics` read them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["LogFormat", "LogSettings", "MetricsSettings"]

LogFormat = Literal["auto", "json", "plain"]


class LogSettings(BaseModel):
    """The ``logging:`` section of the config."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: LogFormat = "auto"
    access_log: bool = True  # one line per inbound HTTP request, on the manifold.access logger


class MetricsSettings(BaseModel):
    """The ``metrics:`` section of the config."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    path: str = "/metrics"
    port: int | None = Field(default=None, ge=0, le=65535)  # None: served on the main listener
    per_tool_latency: bool = True  # a `tool` label on the latency histogram
    identity_labels: bool = False  # an `identity` label on manifold_tool_calls_total
    # /metrics needs credentials and ``role``; None: on once any credential (api_keys, jwt) is
    # configured (proxy.inbound.observers decides; an explicit False is warned about at start).
    require_auth: bool | None = None
    # The role that may scrape /metrics (when it needs credentials) and read per-server details
    # in /healthz and /readyz: an operator's, since the series name every server and tool.
    role: str = Field(default="observer", min_length=1)
    max_tool_label_values: int = Field(default=2000, ge=1, le=100_000)

    @field_validator("path")
    @classmethod
    def _a_free_path(cls, path: str) -> str:
        if not path.startswith("/") or path.rstrip("/") in ("", "/mcp", "/healthz"):
            raise ValueError(f"must be an absolute path other than /, /mcp and /healthz (got {path!r})")
        return path

"""The ``tracing:`` section of the config: OpenTelemetry traces (:mod:`proxy.tracing` reads it).

Every key is optional; the standard ``OTEL_*`` variables fill what it leaves unset
(:func:`proxy.tracing.settings.resolve` decides, and says when tracing is on at all).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Protocol", "Sampler", "TracingSettings"]

Protocol = Literal["http/protobuf", "grpc"]
Sampler = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]


class TracingSettings(BaseModel):
    """The ``tracing:`` section of the config (every key optional)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # None: on when OTEL_TRACES_EXPORTER or an OTLP endpoint variable is set.
    enabled: bool | None = None
    protocol: Protocol | None = None  # OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL; default http/protobuf
    # The collector's base URL (http/protobuf posts to <endpoint>/v1/traces); OTEL_EXPORTER_OTLP_ENDPOINT.
    endpoint: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)  # added to OTEL_EXPORTER_OTLP_HEADERS
    service_name: str | None = None  # OTEL_SERVICE_NAME; default "manifold"
    sampler: Sampler | None = None  # OTEL_TRACES_SAMPLER; default parentbased_always_on
    sampler_ratio: float | None = Field(default=None, ge=0.0, le=1.0)  # OTEL_TRACES_SAMPLER_ARG
    # The batch export (None: the OTEL_BSP_* variable, else the OpenTelemetry default).
    max_queue_size: int | None = Field(default=None, ge=1, le=1_000_000)  # spans waiting; 2048
    max_export_batch_size: int | None = Field(default=None, ge=1, le=100_000)  # 512
    schedule_delay_ms: int | None = Field(default=None, ge=1, le=60_000)  # 5000
    # One export with its retries (OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT); 10000.
    export_timeout_ms: int | None = Field(default=None, ge=1, le=120_000)
    # Put the caller's identity (its name) on the request span as enduser.id: off by default,
    # since subjects can be personal data.
    identity: bool = False
    max_attribute_length: int = Field(default=1024, ge=16, le=65_536)  # longer values are cut

"""What the ``tracing:`` section (:mod:`proxy.config.tracing`) and the standard ``OTEL_*`` variables
decide together.

Pure: the section and an environment mapping in, a frozen :class:`Resolved` (or None: tracing is
off) out. Tracing is on when the section says ``enabled: true``, or, with ``enabled`` left unset,
when ``OTEL_TRACES_EXPORTER`` names an exporter or an OTLP endpoint variable is set
(``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``). ``enabled: false`` and
``OTEL_SDK_DISABLED=true`` switch it off whatever else is set.

A key set in the section wins over its variable; a variable fills what the section leaves
unset; the OpenTelemetry defaults fill the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from proxy.config.tracing import Protocol, Sampler, TracingSettings

__all__ = ["DEFAULT_ENDPOINTS", "Protocol", "Resolved", "Sampler", "TracingSettings", "resolve"]

DEFAULT_ENDPOINTS: Final[Mapping[str, str]] = {
    "http/protobuf": "http://localhost:4318",
    "grpc": "http://localhost:4317",
}


@dataclass(frozen=True, slots=True)
class Resolved:
    """What the tracer is built from: the section and the environment merged."""

    protocol: Protocol
    endpoint: str  # for http/protobuf the full URL, .../v1/traces
    headers: Mapping[str, str]
    service_name: str
    resource_attributes: Mapping[str, str]
    sampler: Sampler
    ratio: float
    max_queue_size: int
    max_export_batch_size: int
    schedule_delay_ms: int
    export_timeout_ms: int
    identity: bool
    max_attribute_length: int


def _on(settings: TracingSettings, env: Mapping[str, str]) -> bool:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if settings.enabled is not None:
        return settings.enabled
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter and exporter != "none":
        return True
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def _pairs(text: str) -> dict[str, str]:
    """``key1=value1,key2=value2`` (OTEL_EXPORTER_OTLP_HEADERS, OTEL_RESOURCE_ATTRIBUTES), with
    percent-decoding; a pair without ``=`` is skipped, as the OpenTelemetry spec allows."""
    from urllib.parse import unquote

    pairs: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            pairs[unquote(key.strip())] = unquote(value.strip())
    return pairs


def _sampler(settings: TracingSettings, env: Mapping[str, str]) -> tuple[Sampler, float]:
    name = settings.sampler or env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_always_on"
    if name not in ("always_on", "always_off", "traceidratio", "parentbased_always_on",
                    "parentbased_always_off", "parentbased_traceidratio"):  # fmt: skip
        name = "parentbased_always_on"  # what the spec says an unknown sampler falls back to
    ratio = settings.sampler_ratio
    if ratio is None:
        try:
            ratio = float(env.get("OTEL_TRACES_SAMPLER_ARG", "1.0"))
        except ValueError:
            ratio = 1.0
        ratio = min(max(ratio, 0.0), 1.0)
    return name, ratio  # type: ignore[return-value]  # checked against the literal above


def resolve(settings: TracingSettings, env: Mapping[str, str]) -> Resolved | None:
    """What ``settings`` and ``env`` ask for; None when tracing is off (see the module doc)."""
    if not _on(settings, env):
        return None
    protocol = settings.protocol
    if protocol is None:
        named = (
            env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
        ).strip()
        protocol = "grpc" if named == "grpc" else "http/protobuf"
    if settings.endpoint is not None:
        endpoint = _signal_url(settings.endpoint, protocol)
    elif traces := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
        endpoint = traces  # the signal's own variable is used as it is, as the spec says
    else:
        endpoint = _signal_url(env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or "", protocol)
    headers = {
        **_pairs(env.get("OTEL_EXPORTER_OTLP_HEADERS", "")),
        **_pairs(env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "")),
        **settings.headers,
    }
    resource = _pairs(env.get("OTEL_RESOURCE_ATTRIBUTES", ""))
    service = (
        settings.service_name
        or env.get("OTEL_SERVICE_NAME", "").strip()
        or resource.get("service.name")
        or "manifold"
    )
    sampler, ratio = _sampler(settings, env)
    queue = _number(settings.max_queue_size, env, ("OTEL_BSP_MAX_QUEUE_SIZE",), 2048)
    return Resolved(
        protocol=protocol,
        endpoint=endpoint,
        headers=headers,
        service_name=service,
        resource_attributes=resource,
        sampler=sampler,
        ratio=ratio,
        max_queue_size=queue,
        max_export_batch_size=min(
            _number(settings.max_export_batch_size, env, ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE",), 512), queue
        ),
        schedule_delay_ms=_number(settings.schedule_delay_ms, env, ("OTEL_BSP_SCHEDULE_DELAY",), 5000),
        export_timeout_ms=_number(
            settings.export_timeout_ms,
            env,
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"),
            10_000,
        ),
        identity=settings.identity,
        max_attribute_length=settings.max_attribute_length,
    )


def _number(value: int | None, env: Mapping[str, str], names: tuple[str, ...], default: int) -> int:
    """The section's ``value``, else the first of the variables ``names`` that is a positive
    integer, else ``default`` (a variable that is not one is ignored, as the spec allows)."""
    if value is not None:
        return value
    for name in names:
        text = env.get(name, "").strip()
        if text.isdigit() and 0 < int(text) <= 1_000_000:
            return int(text)
    return default


def _signal_url(base: str, protocol: Protocol) -> str:
    """The traces URL of a base endpoint: ``<base>/v1/traces`` over HTTP, the base over gRPC."""
    base = base or DEFAULT_ENDPOINTS[protocol]
    if protocol == "grpc":
        return base
    return base.rstrip("/") + "/v1/traces"

"""When tracing is on, and how: the ``tracing:`` section and the standard ``OTEL_*`` variables."""

from __future__ import annotations

import pytest

from proxy.tracing.settings import TracingSettings, resolve

OFF = TracingSettings()


def test_tracing_is_off_unless_something_switches_it_on() -> None:
    assert resolve(OFF, {}) is None
    assert resolve(OFF, {"OTEL_TRACES_EXPORTER": "none"}) is None
    assert resolve(OFF, {"OTEL_SERVICE_NAME": "x"}) is None


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_TRACES_EXPORTER": "otlp"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"},
    ],
)
def test_an_exporter_or_an_endpoint_variable_switches_it_on(env: dict[str, str]) -> None:
    assert resolve(OFF, env) is not None


def test_the_config_says_last_and_the_sdk_switch_wins_over_everything() -> None:
    assert resolve(TracingSettings(enabled=False), {"OTEL_TRACES_EXPORTER": "otlp"}) is None
    assert resolve(TracingSettings(enabled=True), {}) is not None
    assert resolve(TracingSettings(enabled=True), {"OTEL_SDK_DISABLED": "true"}) is None


def test_http_posts_to_the_base_endpoint_plus_v1_traces_and_grpc_uses_it_as_is() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    resolved = resolve(OFF, env)
    assert resolved is not None
    assert resolved.endpoint == "http://collector:4318/v1/traces"
    assert resolved.protocol == "http/protobuf"
    grpc = resolve(
        OFF, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    )
    assert grpc is not None
    assert (grpc.protocol, grpc.endpoint) == ("grpc", "http://collector:4317")
    signal = resolve(OFF, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom"})
    assert signal is not None
    assert signal.endpoint == "http://c:4318/custom"  # the signal's own variable, verbatim
    default = resolve(TracingSettings(enabled=True), {})
    assert default is not None
    assert default.endpoint == "http://localhost:4318/v1/traces"


def test_a_key_in_the_section_wins_over_its_variable() -> None:
    settings = TracingSettings(
        endpoint="http://mine:4318",
        service_name="gw",
        sampler="traceidratio",
        sampler_ratio=0.1,
        headers={"a": "1"},
    )
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://theirs:4318",
        "OTEL_SERVICE_NAME": "other",
        "OTEL_TRACES_SAMPLER": "always_off",
        "OTEL_TRACES_SAMPLER_ARG": "0.9",
        "OTEL_EXPORTER_OTLP_HEADERS": "a=0,b=2%203",
    }
    resolved = resolve(settings, env)
    assert resolved is not None
    assert resolved.endpoint == "http://mine:4318/v1/traces"
    assert resolved.service_name == "gw"
    assert (resolved.sampler, resolved.ratio) == ("traceidratio", 0.1)
    assert resolved.headers == {"a": "1", "b": "2 3"}


def test_the_variables_fill_what_the_section_leaves_unset() -> None:
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
        "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-resource,deployment.environment=prod",
    }
    resolved = resolve(OFF, env)
    assert resolved is not None
    assert (resolved.sampler, resolved.ratio) == ("parentbased_traceidratio", 0.25)
    assert resolved.service_name == "from-resource"
    assert resolved.resource_attributes["deployment.environment"] == "prod"


@pytest.mark.parametrize(
    ("name", "arg"), [("nonsense", "0.5"), ("traceidratio", "not-a-number"), ("traceidratio", "7")]
)
def test_a_bad_sampler_variable_falls_back_rather_than_failing(name: str, arg: str) -> None:
    resolved = resolve(
        OFF, {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": name, "OTEL_TRACES_SAMPLER_ARG": arg}
    )
    assert resolved is not None
    assert resolved.sampler in ("parentbased_always_on", "traceidratio")
    assert 0.0 <= resolved.ratio <= 1.0


def test_the_batch_export_takes_the_section_then_the_bsp_variables_then_the_defaults() -> None:
    env = {"OTEL_TRACES_EXPORTER": "otlp"}
    default = resolve(OFF, env)
    assert default is not None
    assert (default.max_queue_size, default.max_export_batch_size) == (2048, 512)
    assert (default.schedule_delay_ms, default.export_timeout_ms) == (5000, 10_000)
    env |= {
        "OTEL_BSP_MAX_QUEUE_SIZE": "100",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "400",  # more than the queue: cut to it
        "OTEL_BSP_SCHEDULE_DELAY": "nonsense",  # not a number: the default
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
    }
    from_env = resolve(OFF, env)
    assert from_env is not None
    assert (from_env.max_queue_size, from_env.max_export_batch_size) == (100, 100)
    assert (from_env.schedule_delay_ms, from_env.export_timeout_ms) == (5000, 2500)
    section = resolve(TracingSettings(schedule_delay_ms=50, max_queue_size=10), env)
    assert section is not None
    assert (section.schedule_delay_ms, section.max_queue_size) == (50, 10)

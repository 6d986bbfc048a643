"""Metrics: exact counts per event, bounded labels, no identity unless asked, no shared state."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from proxy.config.observe import MetricsSettings
from proxy.observe.metrics import OTHER, OUTCOMES, UNKNOWN, Metrics

Labels = frozenset[tuple[str, str]]


def scrape(metrics: Metrics) -> dict[tuple[str, Labels], float]:
    """Every sample of ``metrics``'s manifold_ families, by (sample name, labels)."""
    body, _ = metrics.render()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body.decode())
        if family.name.startswith("manifold_")
        for sample in family.samples
    }


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return scrape(metrics).get((name, frozenset(labels.items())))


def label_values(metrics: Metrics, name: str, label: str) -> set[str]:
    return {dict(labels)[label] for sample, labels in scrape(metrics) if sample == name}


def label_names(metrics: Metrics, name: str) -> set[str]:
    return {key for sample, labels in scrape(metrics) if sample == name for key, _ in labels}


# ---- tool calls ---------------------------------------------------------------------------


def test_tool_call_counts_one_per_call_by_outcome_and_observes_its_duration() -> None:
    metrics = Metrics()
    metrics.tool_call("github", "github.create_issue", "ok", 0.003)
    metrics.tool_call("github", "github.create_issue", "ok", 0.004)
    metrics.tool_call("github", "github.create_issue", "tool_error", 0.2)

    calls = "manifold_tool_calls_total"
    assert value(metrics, calls, server="github", tool="github.create_issue", outcome="ok") == 2
    assert value(metrics, calls, server="github", tool="github.create_issue", outcome="tool_error") == 1
    hist = "manifold_tool_call_duration_seconds"
    labels = {"server": "github", "tool": "github.create_issue"}
    assert value(metrics, f"{hist}_count", **labels) == 3
    assert value(metrics, f"{hist}_sum", **labels) == pytest.approx(0.207)
    assert value(metrics, f"{hist}_bucket", le="0.0025", **labels) == 0
    assert value(metrics, f"{hist}_bucket", le="0.005", **labels) == 2
    assert value(metrics, f"{hist}_bucket", le="0.25", **labels) == 3


def test_latency_buckets_span_half_a_millisecond_to_a_minute() -> None:
    metrics = Metrics()
    metrics.tool_call("s", "s.t", "ok", 0.0001)
    bounds = label_values(metrics, "manifold_tool_call_duration_seconds_bucket", "le")
    assert {"0.0005", "60.0", "+Inf"} <= bounds


@pytest.mark.parametrize("outcome", sorted(OUTCOMES))
def test_every_documented_outcome_is_accepted(outcome: str) -> None:
    metrics = Metrics()
    metrics.tool_call("s", "s.t", outcome, 0.01)  # type: ignore[arg-type]  # the set, as strings
    assert value(metrics, "manifold_tool_calls_total", server="s", tool="s.t", outcome=outcome) == 1


def test_an_undocumented_outcome_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="unknown outcome"):
        Metrics().tool_call("s", "s.t", "great", 0.01)  # type: ignore[arg-type]


def test_a_tool_the_catalog_does_not_know_is_recorded_as_unknown() -> None:
    metrics = Metrics()
    metrics.tool_call(UNKNOWN, None, "invalid", 0.0001)
    assert value(metrics, "manifold_tool_calls_total", server=UNKNOWN, tool=UNKNOWN, outcome="invalid") == 1


def test_latency_is_per_server_only_when_per_tool_latency_is_off() -> None:
    metrics = Metrics(MetricsSettings(per_tool_latency=False))
    metrics.tool_call("github", "github.a", "ok", 0.01)
    metrics.tool_call("github", "github.b", "ok", 0.01)
    assert label_names(metrics, "manifold_tool_call_duration_seconds_count") == {"server"}
    assert value(metrics, "manifold_tool_call_duration_seconds_count", server="github") == 2
    assert label_values(metrics, "manifold_tool_calls_total", "tool") == {"github.a", "github.b"}


def test_tool_label_values_are_bounded_however_many_names_arrive() -> None:
    metrics = Metrics()
    for i in range(5000):
        metrics.tool_call("s", f"s.tool{i}", "ok", 0.001)
    # The registry directly: rendering and re-parsing ~44k series would only slow the test down.
    tools: dict[str, set[str]] = {}
    calls = 0.0
    for family in metrics.registry.collect():
        for sample in family.samples:
            if "tool" in sample.labels:
                tools.setdefault(sample.name, set()).add(sample.labels["tool"])
            if sample.name == "manifold_tool_calls_total":
                calls += sample.value
    assert set(tools) >= {"manifold_tool_calls_total", "manifold_tool_call_duration_seconds_count"}
    for values in tools.values():
        assert len(values) <= metrics.settings.max_tool_label_values + 1
        assert OTHER in values
    assert calls == 5000


def test_names_admitted_before_the_guard_keep_their_own_label_after_it() -> None:
    metrics = Metrics(MetricsSettings(max_tool_label_values=2))
    for tool in ("s.a", "s.b", "s.c", "s.a", "s.d"):
        metrics.tool_call("s", tool, "ok", 0.001)
    calls = "manifold_tool_calls_total"
    assert label_values(metrics, calls, "tool") == {"s.a", "s.b", OTHER}
    assert value(metrics, calls, server="s", tool="s.a", outcome="ok") == 2
    assert value(metrics, calls, server="s", tool=OTHER, outcome="ok") == 2


def test_identity_is_not_a_label_by_default() -> None:
    metrics = Metrics()
    metrics.tool_call("s", "s.t", "ok", 0.01, identity="alice@example.com")
    assert "identity" not in label_names(metrics, "manifold_tool_calls_total")
    assert b"alice" not in metrics.render()[0]


def test_identity_labels_tool_calls_only_when_the_operator_opts_in() -> None:
    metrics = Metrics(MetricsSettings(identity_labels=True))
    metrics.tool_call("s", "s.t", "ok", 0.01, identity="alice")
    metrics.tool_call("s", "s.t", "ok", 0.01, identity="bob")
    metrics.tool_call("s", "s.t", "ok", 0.01)
    calls = "manifold_tool_calls_total"
    assert value(metrics, calls, server="s", tool="s.t", outcome="ok", identity="alice") == 1
    assert value(metrics, calls, server="s", tool="s.t", outcome="ok", identity=UNKNOWN) == 1
    # A histogram per identity would multiply every bucket: the latency keeps its labels.
    assert label_names(metrics, "manifold_tool_call_duration_seconds_count") == {"server", "tool"}


def test_identity_label_values_are_bounded_too() -> None:
    metrics = Metrics(MetricsSettings(identity_labels=True, max_tool_label_values=1))
    metrics.tool_call("s", "s.t", "ok", 0.01, identity="alice")
    metrics.tool_call("s", "s.t", "ok", 0.01, identity="mallory-1")
    assert label_values(metrics, "manifold_tool_calls_total", "identity") == {"alice", OTHER}


def test_two_instances_share_no_state() -> None:
    first, second = Metrics(), Metrics()
    first.tool_call("s", "s.t", "ok", 0.01)
    first.server_up("s", True)
    assert value(first, "manifold_tool_calls_total", server="s", tool="s.t", outcome="ok") == 1
    assert value(second, "manifold_tool_calls_total", server="s", tool="s.t", outcome="ok") is None
    assert value(second, "manifold_server_up", server="s") is None


# ---- the other events ---------------------------------------------------------------------


def test_policy_decisions_count_by_effect_and_rule_with_default_for_no_rule() -> None:
    metrics = Metrics()
    metrics.policy_decision("deny", "no-destructive")
    metrics.policy_decision("deny", "no-destructive")
    metrics.policy_decision("allow", None)
    decisions = "manifold_policy_decisions_total"
    assert value(metrics, decisions, effect="deny", rule="no-destructive") == 2
    assert value(metrics, decisions, effect="allow", rule="default") == 1


def test_rate_limit_rejections_and_backend_errors_count_by_name() -> None:
    metrics = Metrics()
    metrics.rate_limited("per-identity")
    metrics.rate_limited(None)
    metrics.rate_limit_backend_error("redis")
    metrics.rate_limit_backend_error("redis")
    assert value(metrics, "manifold_rate_limit_rejections_total", limit="per-identity") == 1
    assert value(metrics, "manifold_rate_limit_rejections_total", limit="unavailable") == 1
    assert value(metrics, "manifold_rate_limit_backend_errors_total", backend="redis") == 2


def test_a_listing_counts_one_request_and_every_page_it_was_served() -> None:
    metrics = Metrics()
    metrics.list_request("tools")
    metrics.list_page_served("tools")
    metrics.list_page_served("tools")
    metrics.list_request("prompts", pages=0)
    assert value(metrics, "manifold_list_requests_total", kind="tools") == 1
    assert value(metrics, "manifold_list_pages_served_total", kind="tools") == 3
    assert value(metrics, "manifold_list_requests_total", kind="prompts") == 1
    assert value(metrics, "manifold_list_pages_served_total", kind="prompts") is None


def test_an_unknown_list_kind_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="unknown list kind"):
        Metrics().list_request("widgets")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown list kind"):
        Metrics().list_page_served("widgets")  # type: ignore[arg-type]


def test_server_gauges_and_counters_follow_the_server() -> None:
    metrics = Metrics()
    metrics.server_up("github", True)
    assert value(metrics, "manifold_server_up", server="github") == 1
    assert value(metrics, "manifold_server_restarts_total", server="github") == 0  # present from the start
    metrics.server_up("github", False)
    metrics.server_restart("github")
    metrics.server_connect_seconds("github", 0.4)
    metrics.catalog_size("github", 42)
    metrics.catalog_size("github", 40)
    metrics.pin_drift("github")
    assert value(metrics, "manifold_server_up", server="github") == 0
    assert value(metrics, "manifold_server_restarts_total", server="github") == 1
    assert value(metrics, "manifold_server_connect_duration_seconds_count", server="github") == 1
    assert value(metrics, "manifold_server_connect_duration_seconds_sum", server="github") == pytest.approx(
        0.4
    )
    assert value(metrics, "manifold_catalog_tools", server="github") == 40
    assert value(metrics, "manifold_tool_pin_drift_total", server="github") == 1


def test_in_flight_rises_inside_and_falls_after_even_on_error() -> None:
    metrics = Metrics()
    gauge = "manifold_requests_in_flight"
    with metrics.in_flight():
        with metrics.in_flight():
            assert value(metrics, gauge) == 2
        assert value(metrics, gauge) == 1
    with pytest.raises(RuntimeError), metrics.in_flight():
        raise RuntimeError("boom")
    assert value(metrics, gauge) == 0
    metrics.request_started()
    assert value(metrics, gauge) == 1
    metrics.request_finished()
    assert value(metrics, gauge) == 0


def test_sessions_are_tracked_per_transport() -> None:
    metrics = Metrics()
    metrics.session_opened("http")
    metrics.session_opened("http")
    metrics.session_closed("http")
    metrics.sessions_active("stdio", 1)
    assert value(metrics, "manifold_client_sessions_active", transport="http") == 1
    assert value(metrics, "manifold_client_sessions_active", transport="stdio") == 1


def test_open_listen_streams_are_tracked_per_transport() -> None:
    metrics = Metrics()
    metrics.listen_opened("http")
    metrics.listen_opened("http")
    metrics.listen_opened("stdio")
    metrics.listen_closed("http")
    assert value(metrics, "manifold_listen_streams_open", transport="http") == 1
    assert value(metrics, "manifold_listen_streams_open", transport="stdio") == 1


def test_bytes_count_in_bytes_per_direction_and_transport() -> None:
    metrics = Metrics()
    metrics.bytes_in("http", 100)
    metrics.bytes_in("http", 20)
    metrics.bytes_out("http", 512)
    assert value(metrics, "manifold_received_bytes_total", transport="http") == 120
    assert value(metrics, "manifold_sent_bytes_total", transport="http") == 512


# ---- exposition and settings --------------------------------------------------------------


def test_render_speaks_the_text_format_unless_openmetrics_is_asked_for() -> None:
    metrics = Metrics()
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    assert b"manifold_build_info{" in body
    body, content_type = metrics.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")


def test_every_family_follows_the_naming_guide() -> None:
    body, _ = Metrics().render()
    families = [f for f in text_string_to_metric_families(body.decode()) if not f.name.endswith("_created")]
    ours = [f for f in families if f.name.startswith("manifold_")]
    assert len(ours) >= 17
    for family in ours:
        if family.type == "histogram":
            assert family.name.endswith("_seconds"), family.name
        if family.type == "gauge":
            assert not family.name.endswith("_total"), family.name
    others = {f.name.split("_", 1)[0] for f in families if f not in ours}
    assert others <= {"process", "python"}


def test_process_metrics_can_be_left_out() -> None:
    body, _ = Metrics(process_metrics=False).render()
    assert b"process_" not in body
    assert b"python_info" not in body


def test_settings_are_frozen_and_reject_unknown_keys_and_clashing_paths() -> None:
    settings = MetricsSettings()
    assert (settings.enabled, settings.path, settings.port) == (True, "/metrics", None)
    # require_auth None: decided by whether credentials are configured (proxy.inbound.observers).
    assert (settings.per_tool_latency, settings.identity_labels, settings.require_auth) == (True, False, None)
    assert settings.role == "observer"
    with pytest.raises(ValidationError):
        settings.path = "/other"
    with pytest.raises(ValidationError, match="extra"):
        MetricsSettings(identity_label=True)  # type: ignore[call-arg]
    for path in ("/mcp", "/healthz", "metrics", "/"):
        with pytest.raises(ValidationError, match="absolute path"):
            MetricsSettings(path=path)
    assert MetricsSettings(port=9464).port == 9464


def test_each_tool_call_is_kept_for_the_admin_api_errors_being_the_servers_or_ours() -> None:
    metrics = Metrics(process_metrics=False)
    for outcome in (
        "ok",
        "tool_error",
        "server_error",
        "timeout",
        "error",
        "denied",
        "rate_limited",
        "cancelled",
    ):
        metrics.tool_call("gh", "gh.t", outcome, 0.002)
    stats = metrics.recent.stats("gh")
    assert (stats.calls, stats.errors) == (8, 4)  # a refusal by policy or a limit is not the server's error
    metrics.limit_refused("max_sessions")
    metrics.rate_limited("per-user")
    assert [r.limit for r in metrics.refusals] == ["max_sessions", "rate limit per-user"]

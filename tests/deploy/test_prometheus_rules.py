"""The alerting rules and the example Prometheus config: valid, tested, and about real metrics."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.deploy.promql import DEPLOY, referenced_metrics, run

pytestmark = pytest.mark.slow

RULES = DEPLOY / "prometheus" / "alerts.yaml"
RULES_TEST = DEPLOY / "prometheus" / "alerts_test.yaml"
CONFIG = DEPLOY / "prometheus" / "prometheus.yml"

REQUIRED = {
    "ManifoldServerDown",
    "ManifoldHighErrorRatio",
    "ManifoldDenialSpike",
    "ManifoldRateLimitSaturation",
    "ManifoldHighP99Latency",
    "ManifoldRateLimitBackendErrors",
    "ManifoldInternalErrors",
}


def alerts() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"] if "alert" in rule]


def test_promtool_accepts_the_rules(promtool: str) -> None:
    result = run(promtool, "check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_the_example_config_and_the_rules_it_loads(promtool: str) -> None:
    result = run(promtool, "check", "config", CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout


def test_the_rules_unit_tests_pass(promtool: str) -> None:
    result = run(promtool, "test", "rules", RULES_TEST)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_unit_tests_see_a_server_down_alert_fire() -> None:
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    firing = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert "ManifoldServerDown" in firing


def test_the_required_alerts_exist_with_severity_summary_and_description() -> None:
    rules = alerts()
    assert {rule["alert"] for rule in rules} >= REQUIRED
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert rule["annotations"]["description"].strip(), rule["alert"]


def test_server_down_waits_two_minutes_on_the_up_gauge() -> None:
    (rule,) = [r for r in alerts() if r["alert"] == "ManifoldServerDown"]
    assert rule["for"] == "2m"
    assert "manifold_server_up" in rule["expr"]
    assert "== 0" in rule["expr"]


@pytest.mark.parametrize("rule", alerts(), ids=lambda rule: rule["alert"])
def test_every_metric_an_alert_uses_is_one_manifold_exposes(rule: dict[str, Any], exposed: set[str]) -> None:
    assert referenced_metrics(rule["expr"]) <= exposed

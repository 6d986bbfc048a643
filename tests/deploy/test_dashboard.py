"""The Grafana dashboard: well-formed, on a chosen data source, and only about real metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from proxy.observe.metrics import OUTCOMES, Effect
from tests.deploy.promql import DEPLOY, referenced_metrics, run

pytestmark = pytest.mark.slow

DASHBOARD = DEPLOY / "grafana" / "manifold-dashboard.json"
RULES = DEPLOY / "prometheus" / "alerts.yaml"

# Grafana's variables, replaced by something PromQL accepts before promtool parses an expr.
_VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "1h",
    "$instance": ".*",
    "$server": ".*",
}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels() -> list[dict[str, Any]]:
    """Every panel that shows data (rows only group), nested rows included."""
    found: list[dict[str, Any]] = []
    for panel in dashboard()["panels"]:
        found.extend(panel.get("panels", []) if panel["type"] == "row" else [panel])
    return found


def exprs() -> list[str]:
    return [target["expr"] for panel in panels() for target in panel["targets"]]


def variable_queries() -> list[str]:
    queries = []
    for variable in dashboard()["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def alert_exprs() -> list[str]:
    document = yaml.safe_load(RULES.read_text())
    return [rule["expr"] for group in document["groups"] for rule in group["rules"]]


def test_the_dashboard_is_identified_and_current() -> None:
    board = dashboard()
    assert board["uid"] == "manifold"
    assert board["title"] == "Manifold"
    assert board["schemaVersion"] >= 36
    assert board["id"] is None  # importable into any Grafana


def test_a_prometheus_datasource_variable_feeds_every_panel_and_query() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    chosen = {"type": "prometheus", "uid": "${datasource}"}
    for panel in panels():
        assert panel["datasource"] == chosen, panel["title"]
        assert all(target["datasource"] == chosen for target in panel["targets"]), panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == chosen, variable["name"]


def test_every_panel_has_targets_with_an_expression() -> None:
    assert len(panels()) >= 12
    for panel in panels():
        assert panel["targets"], panel["title"]
        assert all(target["expr"].strip() for target in panel["targets"]), panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_panel_ids_are_unique_and_panels_fit_the_grid() -> None:
    everything = dashboard()["panels"]
    ids = [panel["id"] for panel in everything]
    assert len(ids) == len(set(ids))
    for panel in everything:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


@pytest.mark.parametrize(
    "title",
    [
        "Tool calls by outcome",
        "Error ratio",
        "Latency p50 / p99 by server",
        "Denials by rule",
        "Rate-limit rejections",
        "Server up",
        "Server restarts and caught failures",
        "Catalog size",
        "Requests in flight",
        "Client sessions",
        "Tool pin drift",
        "Bytes",
    ],
)
def test_the_dashboard_has_the_panel(title: str) -> None:
    assert title in {panel["title"] for panel in panels()}


def test_every_metric_the_dashboard_uses_is_one_manifold_exposes(exposed: set[str]) -> None:
    used = set().union(*(referenced_metrics(expr) for expr in exprs() + variable_queries()))
    assert used, "no manifold_ metric found in the dashboard"
    assert used <= exposed, sorted(used - exposed)


def test_every_metric_manifold_exposes_is_on_the_dashboard(exposed: set[str]) -> None:
    used = set().union(*(referenced_metrics(expr) for expr in exprs() + variable_queries()))
    families = {name.removesuffix("_total") for name in exposed if not name.endswith(("_created",))}
    families = {re.sub(r"_(bucket|sum|count)$", "", name) for name in families}
    shown = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in used}
    assert families <= shown, sorted(families - shown)


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_label_values_in_expressions_are_ones_metrics_py_produces(source: str) -> None:
    texts = exprs() if source == "dashboard" else alert_exprs()
    for expr in texts:
        for label, allowed in (("outcome", OUTCOMES), ("effect", set(get_args(Effect)))):
            for match in re.finditer(rf'\b{label}=~?"([^"]*)"', expr):
                assert set(match[1].split("|")) <= allowed, expr


def test_every_expression_is_valid_promql(promtool: str, tmp_path: Path) -> None:
    # promtool has no "check this expression" in every version; a rules file of recording
    # rules, one per panel query, gets each one parsed and type-checked.
    rules = []
    for index, expr in enumerate(exprs() + variable_queries()):
        for variable, value in _VARIABLES.items():
            expr = expr.replace(variable, value)
        # label_values(...) is Grafana's, not PromQL: check the selector inside it.
        expr = re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", expr)
        assert "$" not in expr, f"an unreplaced Grafana variable in {expr}"
        rules.append({"record": f"dashboard:query_{index}", "expr": expr})
    path = tmp_path / "dashboard_rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run(promtool, "check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr

"""The PromQL the monitoring guide shows parses (promtool) and names only metrics Manifold exposes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.deploy.promql import exposed_metric_names, find_promtool, referenced_metrics, run
from tests.docs.reference import DOCS

pytestmark = pytest.mark.slow

_QUERIES = re.compile(r"^## Questions the metrics answer\n\n```\n(.*?)^```", re.MULTILINE | re.DOTALL)


def guide_queries() -> list[str]:
    (block,) = _QUERIES.findall((DOCS / "guides" / "monitor.md").read_text(encoding="utf-8"))
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line]


def test_the_monitoring_guides_queries_parse_and_name_real_metrics(tmp_path: Path) -> None:
    queries = guide_queries()
    assert len(queries) >= 5
    exposed = exposed_metric_names()
    unknown = sorted({name for query in queries for name in referenced_metrics(query)} - exposed)
    assert unknown == []
    rules = {"groups": [{"name": "guide", "rules": [
        {"record": f"guide:query{index}", "expr": query} for index, query in enumerate(queries)
    ]}]}  # fmt: skip
    path = tmp_path / "guide.rules.yaml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    checked = run(find_promtool(), "check", "rules", path)
    assert checked.returncode == 0, checked.stdout + checked.stderr

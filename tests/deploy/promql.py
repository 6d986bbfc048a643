"""What the deploy tests share: finding promtool, and the metric names Manifold exposes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Final

import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.config.observe import MetricsSettings
from proxy.observe.metrics import Metrics

__all__ = ["DEPLOY", "METRIC_NAME", "exposed_metric_names", "find_promtool", "referenced_metrics", "run"]

DEPLOY: Final = Path(__file__).resolve().parents[2] / "deploy"
METRIC_NAME: Final = re.compile(r"manifold_[a-z_]+")

# Sample names each family type exposes, beyond the family name the parser reports.
_SUFFIXES: Final = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}

INSTALL_HINT: Final = (
    "apt-get install -y --no-install-recommends prometheus  (Debian/Ubuntu: provides promtool)"
)


def exposed_metric_names() -> set[str]:
    """Every manifold_ sample name ``/metrics`` can carry, children or not yet."""
    body, _ = Metrics(MetricsSettings(identity_labels=True)).render()
    names: set[str] = set()
    for family in text_string_to_metric_families(body.decode()):
        if family.name.startswith("manifold_"):
            names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
    return names


def referenced_metrics(expr: str) -> set[str]:
    return set(METRIC_NAME.findall(expr))


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def find_promtool() -> str:
    """promtool's path. Missing: a failure in CI (the Makefile installs it), a skip elsewhere."""
    path = shutil.which("promtool")
    if path is not None:
        return path
    message = f"promtool is not installed; install it with: {INSTALL_HINT}"
    if _in_ci():
        pytest.fail(f"CI is set and {message}", pytrace=False)
    pytest.skip(message)


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60, check=False)

from __future__ import annotations

import pytest

from tests.deploy.promql import exposed_metric_names, find_promtool


@pytest.fixture(scope="session")
def promtool() -> str:
    return find_promtool()


@pytest.fixture(scope="session")
def exposed() -> set[str]:
    return exposed_metric_names()

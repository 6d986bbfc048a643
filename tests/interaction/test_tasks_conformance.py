"""The conformance suite's tasks-extension scenarios (pinned ``@modelcontextprotocol/conformance``,
tests/conformance_modern) scored through Manifold: a 2026-07-28 client (the suite) on Manifold's
tasks extension, a handshake-era task server behind it (tests/fixtures/era_task_server.py), so
every check goes across the era bridge. The scenarios are not on the 2026-07-28 timeline (the
suite runs them only when forced) and the requirement set does not score them: this is where they
are scored.

``tasks-mrtr-input`` and ``tasks-mrtr-composition`` put the server's questions across the bridge:
asked on a ``tasks/result`` Manifold holds open, shown as the task's ``inputRequests``, answered
by ``tasks/update`` (and, for composition, asked during the call, as ``input_required``, before
the task exists).

The same scenarios, and ``tasks-dispatch-and-envelope``, run again with a 2026-07-28 task server
behind Manifold (tests/fixtures/modern_task_server.py): its own tasks relayed under Manifold's
ids, its ``inputRequests`` shown and ``tasks/update`` passed on.

Left out behind the handshake-era server, with why: ``tasks-dispatch-and-envelope`` (its first
check calls ``confirm_delete`` as a 2026-07-28 MRTR tool that answers ``input_required``
plainly, which a handshake-era server cannot be); behind either, ``tasks-status-notifications``
(skipped by the suite itself)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from tests.conformance_modern.run import CLI, NODE
from tests.interaction.harness import REPO, RunningManifold, running_manifold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVER = str(REPO / "tests" / "fixtures" / "era_task_server.py")
MODERN_SERVER = str(REPO / "tests" / "fixtures" / "modern_task_server.py")
SCENARIOS = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-request-headers",
    "tasks-required-task-error",
    "tasks-mrtr-input",
    "tasks-mrtr-composition",
)
MODERN_SCENARIOS = (*SCENARIOS, "tasks-dispatch-and-envelope")


@asynccontextmanager
async def _fronting(tmp: Path, server: str) -> AsyncIterator[RunningManifold]:
    if not CLI.exists():
        pytest.skip("the conformance suite is not installed (npm ci in tests/conformance_modern)")
    config = {"servers": {"t": {"command": sys.executable, "args": [server], "prefix": ""}}}
    async with running_manifold(tmp, config) as running:
        yield running


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    async with _fronting(tmp_path_factory.mktemp("tasks-conformance"), SERVER) as running:
        yield running


@pytest.fixture(scope="module")
async def modern_manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    async with _fronting(tmp_path_factory.mktemp("tasks-conformance-modern"), MODERN_SERVER) as running:
        yield running


def _checks(out: Path) -> list[dict[str, Any]]:
    return [c for f in out.rglob("checks.json") for c in orjson.loads(f.read_bytes())]


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_the_suites_task_scenario_passes_through_manifold(
    manifold: RunningManifold, scenario: str, tmp_path: Path
) -> None:
    await _passes(manifold, scenario, tmp_path)


@pytest.mark.parametrize("scenario", MODERN_SCENARIOS)
async def test_the_suites_task_scenario_passes_through_manifold_to_a_modern_task_server(
    modern_manifold: RunningManifold, scenario: str, tmp_path: Path
) -> None:
    await _passes(modern_manifold, scenario, tmp_path)


async def _passes(manifold: RunningManifold, scenario: str, tmp_path: Path) -> None:
    command = [str(NODE), str(CLI), "server", "--url", manifold.url, "--scenario", scenario]
    command += ["--force", "--spec-version", "2026-07-28", "-o", str(tmp_path)]
    with anyio.fail_after(120):
        done = await anyio.run_process(command, check=False, stderr=subprocess.STDOUT)
    checks = _checks(tmp_path)
    assert checks, done.stdout.decode()[-2000:]
    failed = {c["id"]: c.get("errorMessage") for c in checks if c["status"] not in ("SUCCESS", "INFO")}
    assert not failed, failed

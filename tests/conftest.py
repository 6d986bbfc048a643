"""Shared test setup: every async test runs on asyncio (the backend Manifold ships with), and the
fast tier's guard.

Tests that start a process or wait on the wall clock carry the ``slow`` marker; ``make
test-fast`` runs the rest (``-m "not slow" --fast``). Under ``--fast`` a test that starts a
process anyway fails at once, naming the marker it lacks, so the fast tier cannot quietly grow
slow: every way a test here starts one (``subprocess``, ``asyncio``'s and ``anyio``'s process
functions, ``os.fork`` and ``posix_spawn``) is refused.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from typing import Any, NoReturn

import anyio
import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="refuse to start processes: the fast tier (tests that do must be marked slow)",
    )


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


class StartsAProcess(AssertionError):
    """A test of the fast tier started a process."""


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise StartsAProcess("this test starts a process: mark it @pytest.mark.slow (see tests/conftest.py)")


async def _refuse_async(*args: Any, **kwargs: Any) -> NoReturn:
    _refuse()


@pytest.fixture(autouse=True)
def _no_processes_in_the_fast_tier(request: pytest.FixtureRequest) -> Iterator[None]:
    if not request.config.getoption("--fast") or request.node.get_closest_marker("slow") is not None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", _refuse)
        patch.setattr(asyncio, "create_subprocess_exec", _refuse_async)
        patch.setattr(asyncio, "create_subprocess_shell", _refuse_async)
        patch.setattr(anyio, "open_process", _refuse_async)
        patch.setattr(anyio, "run_process", _refuse_async)
        patch.setattr(os, "fork", _refuse)
        patch.setattr(os, "posix_spawn", _refuse)
        patch.setattr(os, "posix_spawnp", _refuse)
        yield

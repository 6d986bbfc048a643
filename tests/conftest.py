"""Shared test setup: every async test runs on asyncio (the backend Manifold ships with)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"

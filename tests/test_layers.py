"""Edges point down: the outbound side (Manifold as a client of servers) knows nothing above it.

A connection that imported the pipeline, the inbound side or the bridge could call back up the
layers; what it needs from them (how to answer a server's failed request) is handed to it instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "proxy"
OUTBOUND = sorted((ROOT / "outbound").glob("*.py"))
ABOVE = ("proxy.pipeline", "proxy.inbound", "proxy.bridge", "proxy.app", "proxy.router", "proxy.per_client")


def imported(path: Path) -> list[str]:
    """Every module ``path`` imports, at any depth (inside functions too), as dotted names."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # `from proxy import pipeline` imports proxy.pipeline as well.
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return names


@pytest.mark.parametrize("path", OUTBOUND, ids=lambda p: p.name)
def test_outbound_modules_import_nothing_from_the_layers_above(path: Path) -> None:
    offenders = [name for name in imported(path) if name.startswith(ABOVE)]
    assert offenders == []


def test_the_checked_folder_is_not_empty() -> None:
    assert len(OUTBOUND) > 10  # a moved folder must not turn this test into a no-op

"""The shape of the centre, pinned: which way imports point, and how small the root stays.

The composition root (``proxy/app/gateway.py``) builds and runs the parts and nothing else; the inbound
transports know the parts only through ``proxy.clients.contract``; the outbound side knows
nothing of the call pipeline, the inbound side or the bridges.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PROXY = Path(__file__).resolve().parent.parent / "proxy"
ROOT_MAX_LINES = 250


def _imports(path: Path) -> Iterator[str]:
    """Every module ``path`` imports, at any depth (also under TYPE_CHECKING)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            yield node.module
            # `from proxy import pipeline` imports proxy.pipeline.context as well.
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _modules(package: str) -> list[Path]:
    return sorted((PROXY / package).rglob("*.py"))


def _offences(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(PROXY.parent)} imports {name}"
        for path in _modules(package)
        for name in _imports(path)
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


@pytest.mark.parametrize("package", ["inbound", "outbound", "bridge"])
def test_no_edge_module_imports_the_composition_root(package: str) -> None:
    assert _offences(package, ("proxy.app.gateway",)) == []


def test_the_outbound_side_knows_nothing_of_the_pipeline_the_inbound_side_or_the_bridges() -> None:
    above = (
        "proxy.pipeline.context",
        "proxy.inbound",
        "proxy.pipeline.bridge",
        "proxy.router.dispatch",
        "proxy.observe.boundary",
        "proxy.app.gateway",
    )
    assert (
        _offences(
            "outbound",
            (*above, "proxy.servers.per_client", "proxy.servers.connections", "proxy.clients.sessions"),
        )
        == []
    )


def test_the_bridges_do_not_reach_into_the_inbound_side() -> None:
    assert _offences("bridge", ("proxy.inbound",)) == []


def test_the_composition_root_stays_small() -> None:
    lines = len((PROXY / "app" / "gateway.py").read_text().splitlines())
    assert lines <= ROOT_MAX_LINES, (
        f"proxy/app/gateway.py has {lines} lines; it builds and runs the parts only"
    )


def test_the_checks_see_an_offending_import(tmp_path: Path) -> None:
    """The import walk finds imports nested anywhere, so the pins above can fail."""
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from proxy.app.gateway import Gateway\n"
    )
    assert "proxy.app.gateway" in set(_imports(module))

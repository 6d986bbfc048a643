"""The pure cores import no I/O: protocol, catalog (and policy, when it lands)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "proxy"
FORBIDDEN = {"anyio", "asyncio", "socket", "time", "httpx", "aiohttp", "starlette", "uvicorn", "subprocess"}


@pytest.mark.parametrize("package", ["protocol", "catalog", "policy"])
def test_pure_packages_import_no_io(package: str) -> None:
    offenders = []
    for path in sorted((ROOT / package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []

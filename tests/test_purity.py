"""The pure cores import no I/O: protocol, catalog, policy, and the rate-limit arithmetic."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "proxy"
FORBIDDEN = {"anyio", "asyncio", "socket", "time", "httpx", "aiohttp", "starlette", "uvicorn", "subprocess"}
PURE = [
    *sorted((ROOT / "protocol").glob("*.py")),
    *sorted((ROOT / "catalog").glob("*.py")),
    *sorted((ROOT / "policy").glob("*.py")),
    ROOT / "ratelimit" / "gcra.py",
    ROOT / "ratelimit" / "rules.py",
    ROOT / "outbound" / "era.py",
    ROOT / "outbound" / "lists.py",
    ROOT / "outbound" / "relay.py",
]


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_modules_import_no_io(path: Path) -> None:
    offenders = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        offenders += [n for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []


def test_the_pure_list_is_not_empty() -> None:
    assert len(PURE) > 15  # a moved folder must not turn this test into a no-op

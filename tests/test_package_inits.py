"""A package registered by ``defer_init`` imports its submodules without running its ``__init__``,
and becomes the plain package the moment something asks for a name only its ``__init__`` makes."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.package_inits import defer_init

INIT = """
from pkgx.things import Thing
from pkgx import heavy

extra = heavy.WEIGHT
__all__ = ["Thing", "extra"]
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    root = tmp_path / "pkgx"
    root.mkdir()
    (root / "__init__.py").write_text(INIT)
    (root / "things.py").write_text("from . import shapes\n\nclass Thing:\n    shape = shapes.ROUND\n")
    (root / "shapes.py").write_text("ROUND = 'round'\n")
    (root / "heavy.py").write_text("WEIGHT = 1000\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "pkgx"
    for name in [name for name in sys.modules if name == "pkgx" or name.startswith("pkgx.")]:
        del sys.modules[name]


def test_submodules_and_exported_names_load_without_the_init(package: str) -> None:
    defer_init(package, {"Thing": "pkgx.things"})
    things = importlib.import_module("pkgx.things")
    namespace: dict[str, Any] = {}
    exec("from pkgx import Thing, shapes", namespace)

    assert namespace["Thing"] is things.Thing
    assert namespace["shapes"].ROUND == things.Thing.shape == "round"
    assert "pkgx.heavy" not in sys.modules
    assert "extra" not in vars(sys.modules[package])


def test_any_other_name_runs_the_real_init_once_in_the_same_module(package: str) -> None:
    defer_init(package, {"Thing": "pkgx.things"})
    module = sys.modules[package]
    imported: Any = importlib.import_module(package)

    assert imported is module
    assert imported.extra == 1000  # only the __init__ defines it
    assert "pkgx.heavy" in sys.modules
    assert imported.__all__ == ["Thing", "extra"]
    with pytest.raises(AttributeError, match="has no attribute 'missing'"):
        _ = imported.missing


def test_star_import_asks_for_all_and_so_gets_the_plain_package(package: str) -> None:
    defer_init(package, {})
    namespace: dict[str, Any] = {}
    exec("from pkgx import *", namespace)
    assert namespace["extra"] == 1000
    assert namespace["Thing"] is sys.modules["pkgx.things"].Thing


def test_an_imported_package_is_left_as_it_is(package: str) -> None:
    plain = importlib.import_module(package)
    defer_init(package, {"Thing": "pkgx.things"})
    assert sys.modules[package] is plain
    assert "__getattr__" not in vars(plain)


def test_a_missing_package_is_left_to_the_plain_import_to_report() -> None:
    defer_init("no_such_package_here", {})
    assert "no_such_package_here" not in sys.modules


def test_after_manifold_is_imported_uvicorn_and_prometheus_client_still_offer_everything() -> None:
    script = """
import sys
import proxy.cli.main
assert "uvicorn.main" not in sys.modules and "prometheus_client.exposition" not in sys.modules
import uvicorn
from prometheus_client import REGISTRY, Counter, generate_latest
import prometheus_client
assert callable(uvicorn.run) and uvicorn.Config.__module__ == "uvicorn.config"
assert uvicorn.__version__ and "run" in uvicorn.__all__
Counter("deferred_total", "A counter.").inc()
assert b"deferred_total 1.0" in generate_latest(REGISTRY)
assert prometheus_client.Counter is Counter
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.stdout.strip() == "ok", result.stderr

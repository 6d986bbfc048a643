"""benchmarks.call_instructions: every variant is a config Manifold accepts, and it switches on
what its name says (a renamed config key would otherwise surface only as a failed valgrind run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.call_instructions import VARIANTS
from benchmarks.plan import stdio_server
from benchmarks.procs import manifold_check, write_config


def _built(tmp_path: Path) -> dict[str, dict[str, Any]]:
    servers = {"s00": stdio_server("s00", tools=10, page_size=100)}
    built = {}
    for name, variant in VARIANTS.items():
        directory = tmp_path / name
        directory.mkdir()
        built[name] = variant.build(directory, servers)
    return built


def test_every_variant_is_a_config_manifold_accepts(tmp_path: Path) -> None:
    built = _built(tmp_path)
    paths = {name: write_config(tmp_path / name / "manifold.yaml", config) for name, config in built.items()}
    verdicts = manifold_check(list(paths.values()))
    rejected = {name: verdicts[path][1] for name, path in paths.items() if not verdicts[path][0]}
    assert rejected == {}


def test_the_variants_differ_in_what_they_name(tmp_path: Path) -> None:
    built = _built(tmp_path)
    assert len(built["off"]["policy"]["files"]) == 1  # the allow-all policy only
    assert [Path(f).read_text().count("guardrails:") for f in built["guard"]["policy"]["files"]] == [0, 1]
    assert "detectors:" in Path(built["secrets"]["policy"]["files"][1]).read_text()
    assert "detectors:" not in Path(built["guard"]["policy"]["files"][1]).read_text()
    assert "auth" not in built["all-off"]
    assert built["all-off"]["metrics"]["enabled"] is False
    core = built["core-on"]
    assert core["auth"]["api_keys"]
    assert core["metrics"]["enabled"] is True
    assert core["policy"]["audit"]["path"]
    assert core["policy"]["validate_arguments"] is True
    assert VARIANTS["core-on"].keyed
    assert not VARIANTS["all-off"].keyed

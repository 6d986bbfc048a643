"""The reference documents what the code defines: every config key, CLI command and option,
metric and limit that exists in the code has its entry under ``docs/reference/``.

The lists come from the code (``tests/docs/reference.py``), so a field, command, metric or limit
added anywhere fails here until it is documented, in any page under ``docs/reference/`` (a
feature's own page is fine). Documented defaults are compared with the code's too.
"""

from __future__ import annotations

import re

import pytest

from tests.docs.reference import (
    REFERENCE,
    cli_commands,
    config_keys,
    documented_commands,
    documented_paths,
    first_cells,
    limit_names,
    metric_families,
    reference_text,
    shown_default,
)

TEXT = reference_text()


def undocumented_keys(text: str) -> list[str]:
    documented = documented_paths(text)
    return [key.path for key in config_keys() if key.path not in documented]


def test_the_walk_finds_keys_at_every_depth_and_in_every_shape() -> None:
    paths = {key.path for key in config_keys()}
    assert {
        "listen.port",  # a section's field
        "auth.api_keys[].name",  # a list of sections
        "auth.oauth.authorization_servers[].introspection.client_id",  # optional section in a list
        "servers.*.credentials.client_id",  # a union member inside a mapping of sections
        "servers.*.tools.*.arguments.*.fixed",  # mappings three deep
        "endpoints.*.discovery.max_results",
    } <= paths


HINT = "document it under docs/reference/ (docs/reference/architecture.md#documentation says how)"


def test_every_config_key_is_in_the_reference() -> None:
    assert undocumented_keys(TEXT) == [], f"config keys not in the reference: {HINT}"


def test_a_key_taken_out_of_the_reference_is_reported() -> None:
    row = "| `servers.<id>.request_timeout` |"
    assert row in TEXT
    before = set(undocumented_keys(TEXT))
    assert set(undocumented_keys(TEXT.replace(row, "| |"))) - before == {"servers.*.request_timeout"}


def test_the_defaults_in_the_config_reference_are_the_codes() -> None:
    rows = first_cells((REFERENCE / "config.md").read_text(encoding="utf-8"))
    wrong: list[str] = []
    for key in config_keys():
        cells = rows.get(key.path)
        code = shown_default(key.field)
        if cells is None or len(cells) < 3 or code in ("required", "(section)"):
            continue  # not in a key | type | default row, or filled in by a validator
        documented = cells[2].strip("`")
        if documented != code:
            wrong.append(f"{key.path}: the reference says {documented}, the code {code}")
    assert wrong == []


@pytest.mark.parametrize("command", cli_commands(), ids=lambda command: command.name)
def test_every_cli_command_has_a_section_naming_each_option(command: object) -> None:
    from tests.docs.reference import Command

    assert isinstance(command, Command)
    sections = documented_commands(TEXT)
    assert command.name in sections, f"no '## {command.name}' heading under docs/reference/: {HINT}"
    missing = [
        option
        for option in command.options
        if not re.search(rf"{re.escape(option)}\b", sections[command.name])
    ]
    assert missing == [], f"{command.name}: options not described in its section"


def test_every_command_of_the_parser_is_found() -> None:
    names = {command.name for command in cli_commands()}
    assert {"manifold serve", "manifold check", "manifold credentials set", "manifold keygen"} <= names


@pytest.mark.parametrize("family", metric_families(), ids=lambda family: family.name)
def test_every_metric_has_a_row_naming_its_labels(family: object) -> None:
    from tests.docs.reference import MetricFamily

    assert isinstance(family, MetricFamily)
    rows = first_cells(TEXT)
    assert family.name in rows, f"no table row for {family.name}: {HINT}"
    row = " | ".join(rows[family.name][1:])  # a labels column, wherever the page put it
    missing = [label for label in family.labels if not re.search(rf"\b{label}\b", row)]
    assert missing == [], f"{family.name}: labels not in its row"


def test_the_metrics_come_from_a_real_registry() -> None:
    names = {family.name for family in metric_families()}
    assert {"manifold_tool_calls_total", "manifold_server_up", "manifold_build_info"} <= names
    assert all(not name.endswith("_total_total") for name in names)


@pytest.mark.parametrize("limit", limit_names())
def test_every_limit_has_a_row_with_a_default_and_what_a_peer_gets(limit: str) -> None:
    rows = first_cells(TEXT)
    cells = rows.get(f"limits.{limit}")
    assert cells is not None, f"no table row for limits.{limit}: {HINT}"
    assert len(cells) >= 3
    assert all(cell.strip() for cell in cells[1:3]), f"limits.{limit}: the default or its effect is empty"

"""Tool overrides where the catalog is served: pins hash what the server sent, a rename keeps
the canonical name the policy matches, and an override that does not fit withholds its tool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.catalog.merge import ServerSlice, build_catalog
from proxy.catalog.naming import NamingCodec
from proxy.config.loading import config_from_mapping
from proxy.config.policy import PinSettings, PolicySettings
from proxy.config.policy_files import load_pins
from proxy.core.errors import ConfigError
from proxy.enforce.access import Access, renames
from proxy.policy.pins import tool_hash

SCHEMA = {"type": "object", "properties": {"owner": {"type": "string"}, "repo": {"type": "string"}}}
TOOLS = [{"name": "echo", "description": "theirs", "inputSchema": SCHEMA}]


def served(tmp_path: Path, override: dict[str, Any]) -> tuple[Access, Any]:
    config = config_from_mapping({"servers": {"gh": {"command": "x", "tools": {"echo": override}}}})
    servers = dict(config.servers)
    settings = PolicySettings(pins=PinSettings(mode="block", path=str(tmp_path / "pins.json")))
    access = Access(settings, servers)
    access.load()
    catalog = build_catalog([ServerSlice("gh", "gh", TOOLS)], NamingCodec(), renames(servers))
    return access, access.serve_tools(catalog)


def test_the_pin_is_of_what_the_server_sent_so_changing_the_override_is_no_drift(tmp_path: Path) -> None:
    _, first = served(tmp_path, {"name": "issues", "arguments": {"owner": {"fixed": "acme"}}})
    (entry,) = first.catalog.entries
    assert load_pins(str(tmp_path / "pins.json")) == {"gh/echo": tool_hash(entry)}
    assert first.definitions["gh.issues"]["inputSchema"]["properties"] == {"repo": {"type": "string"}}
    _, second = served(tmp_path, {"description": "ours", "arguments": {"owner": {"hidden": True}}})
    assert second.blocked == {}  # the override changed, not the tool: nothing is withheld
    assert second.definitions["gh.echo"]["description"] == "ours"


def test_a_renamed_tool_keeps_its_canonical_name_and_its_route(tmp_path: Path) -> None:
    _, tools = served(tmp_path, {"name": "issues"})
    entry = tools.catalog.by_name["gh.issues"]
    assert (entry.canonical, entry.server_id, entry.original_name) == ("gh.echo", "gh", "echo")
    assert tools.subject("gh.issues").name == "gh.echo"  # what the policy decides on
    assert "gh.echo" not in tools.catalog.by_name


def test_an_override_that_does_not_fit_withholds_the_tool_naming_server_tool_and_argument(
    tmp_path: Path,
) -> None:
    _, tools = served(tmp_path, {"arguments": {"org": {"fixed": "acme"}}})
    assert "argument 'org'" in tools.blocked["gh.echo"]
    assert "server 'gh', tool 'echo'" in tools.blocked["gh.echo"]


def test_an_argument_override_gives_exactly_one_way_and_annotations_are_given_once() -> None:
    for arguments, got in (({"fixed": 1, "default": 2}, "fixed and default"), ({}, "none")):
        with pytest.raises(ConfigError) as caught:
            config_from_mapping(
                {"servers": {"gh": {"command": "x", "tools": {"t": {"arguments": {"a": arguments}}}}}}
            )
        wanted = "give exactly one of 'fixed', 'default' or 'hidden: true'"
        assert f"servers.gh.tools.t.arguments.a: {wanted} (got {got})" in str(caught.value)
    moved = config_from_mapping(
        {"servers": {"gh": {"command": "x", "tools": {"t": {"annotations": {"readOnlyHint": True}}}}}}
    )
    assert moved.servers["gh"].annotations == {"t": {"readOnlyHint": True}}
    with pytest.raises(ConfigError, match=r"given in 'annotations\.t' too"):
        config_from_mapping(
            {
                "servers": {
                    "gh": {
                        "command": "x",
                        "annotations": {"t": {"readOnlyHint": True}},
                        "tools": {"t": {"annotations": {"readOnlyHint": False}}},
                    }
                }
            }
        )


def test_a_held_tool_is_listed_as_an_optional_task_and_the_pin_is_still_of_what_the_server_sent(
    tmp_path: Path,
) -> None:
    _, held = served(tmp_path, {"tasks": "held"})
    assert held.definitions["gh.echo"]["execution"] == {"taskSupport": "optional"}
    (entry,) = held.catalog.entries
    assert "execution" not in entry.definition  # what the server sent, and what is pinned
    assert load_pins(str(tmp_path / "pins.json")) == {"gh/echo": tool_hash(entry)}
    _, relayed = served(tmp_path, {"tasks": "relay"})
    assert "execution" not in relayed.definitions["gh.echo"]


def test_a_per_tool_tasks_setting_is_relay_or_held() -> None:
    with pytest.raises(ConfigError, match="tasks"):
        config_from_mapping({"servers": {"gh": {"command": "x", "tools": {"echo": {"tasks": "always"}}}}})


def test_held_tasks_are_refused_on_a_per_client_server_naming_each_setting() -> None:
    server = {
        "command": "x",
        "session_mode": "per_client",
        "tasks": "held",
        "tools": {"slow": {"tasks": "held"}},
    }
    with pytest.raises(ConfigError) as refused:
        config_from_mapping({"servers": {"gh": server}})
    assert "servers.gh.tasks: held tasks need session_mode: shared" in str(refused.value)
    assert "servers.gh.tools.slow.tasks: held tasks need session_mode: shared" in str(refused.value)
    relayed = {**server, "tasks": "relay", "tools": {"slow": {"tasks": "relay"}}}
    assert config_from_mapping({"servers": {"gh": relayed}}).servers["gh"].session_mode == "per_client"

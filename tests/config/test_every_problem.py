"""Every problem of a config is reported at once: those a model's cross-field checks find are
not hidden behind a bad field, and what taking a problem out causes is never reported."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config.every_problem import caused_by, pruned
from proxy.config.loading import config_from_mapping
from proxy.core.errors import ConfigError


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        config_from_mapping(data, source="m.yaml", environ={})
    return str(info.value).splitlines()


def test_a_bad_server_id_and_a_server_with_neither_command_nor_url_are_both_reported() -> None:
    found = problems({"servers": {"bad id!": {"command": "echo"}, "nocmd": {"args": ["x"]}}})
    assert found == [
        "m.yaml: servers.nocmd: needs exactly one of 'command' (stdio) or 'url' (HTTP) (got neither)",
        "m.yaml: servers.bad id!: server id may only contain letters, digits, '_' and '-' (got 'bad id!')",
    ]


def test_a_bad_setting_elsewhere_does_not_hide_a_clash_of_prefixes_or_an_unknown_endpoint_server() -> None:
    found = problems(
        {
            "limits": {"max_sessions": -1},
            "servers": {"a": {"command": "x", "prefix": "p"}, "b": {"command": "y", "prefix": "p"}},
            "endpoints": {"e": {"servers": ["nope"]}},
        }
    )
    assert found[0].startswith("m.yaml: limits.max_sessions: ")
    assert "m.yaml: servers.b.prefix: 'p' is already the prefix of server 'a'" in found
    assert "m.yaml: endpoints.e.servers: names no configured server (got 'nope')" in found
    assert len(found) == 3


def test_a_desktop_files_servers_are_named_as_the_file_names_them() -> None:
    found = problems({"mcpServers": {"bad id!": {"command": "echo"}, "nocmd": {}}})
    assert [line.split(": ")[1] for line in found] == ["mcpServers.nocmd", "mcpServers.bad id!"]


def test_what_taking_a_problem_out_causes_is_not_reported() -> None:
    # The stand-in for "nocmd" and the default for a removed field are valid; a required field of
    # a credentials mode, removed with its bad value, is not reported as missing.
    found = problems(
        {
            "servers": {
                "nocmd": {"prefix": "p", "request_timeout": "soon"},
                "ok": {"command": "x", "connect_timeout": 0},
            }
        }
    )
    assert all("required" not in line for line in found), found
    assert any(line.startswith("m.yaml: servers.ok.connect_timeout: ") for line in found)


def test_a_valid_config_loads_as_before() -> None:
    config = config_from_mapping({"servers": {"a": {"command": "x"}}}, environ={})
    assert list(config.servers) == ["a"]


def test_pruning_removes_bad_settings_and_stands_in_for_a_server_wrong_as_a_whole() -> None:
    data = {"servers": {"a": {"prefix": "p", "args": ["1"]}, "b": {"command": "x", "env": {"K": 1}}}}
    step = pruned(data, [("servers", "a"), ("servers", "b", "env", "K")])
    assert step is not None
    assert step.data == {
        "servers": {
            "a": {"command": "manifold-check-stand-in", "prefix": "p"},
            "b": {"command": "x", "env": {}},
        }
    }
    assert data["servers"]["b"] == {"command": "x", "env": {"K": 1}}  # the input is not changed
    assert caused_by(("servers", "b", "env", "K"), [step])
    assert caused_by(("servers", "a", "command"), [step])
    assert not caused_by(("servers", "a"), [step])  # a cross-server check of its key still counts


def test_a_problem_of_the_whole_file_leaves_nothing_to_prune() -> None:
    assert pruned({"servers": {}}, [()]) is None

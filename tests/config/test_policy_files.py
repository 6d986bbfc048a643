"""The policy's files on disk: policy documents read, the pins file read and written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.config.policy_files import load_pins, load_policy, save_pins
from proxy.core.errors import ConfigError

BASE = """\
version: 1
default: deny
rules:
  - {id: admins, effect: allow, match: {roles: [admin]}}
"""
TEAM = "version: 1\nrules:\n  - {id: devs, effect: allow, match: {roles: [dev]}}\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- policy files ----------------------------------------------------------------------------------


def test_one_file_loads_by_path_or_as_a_string(tmp_path: Path) -> None:
    path = write(tmp_path, "base.yaml", BASE)
    assert load_policy(path) == load_policy(str(path))
    assert [rule.id for rule in load_policy(path).rules] == ["admins"]


def test_several_files_are_combined_in_the_order_given(tmp_path: Path) -> None:
    policy = load_policy([write(tmp_path, "base.yaml", BASE), write(tmp_path, "team.yaml", TEAM)])
    assert (policy.default, [rule.id for rule in policy.rules]) == ("deny", ["admins", "devs"])


def test_a_json_file_is_read_as_json(tmp_path: Path) -> None:
    text = '{"version": 1, "default": "allow", "rules": [{"id": "x", "effect": "deny", "match": {}}]}'
    policy = load_policy(write(tmp_path, "p.json", text))
    assert (policy.default, policy.rules[0].id) == ("allow", "x")


def test_a_problem_names_the_file_it_is_in(tmp_path: Path) -> None:
    bad = write(tmp_path, "team.yaml", "version: 1\nrules:\n  - {id: a, effect: permit, match: {}}\n")
    with pytest.raises(ConfigError, match=r"team\.yaml: rules\[0\] \(id 'a'\): effect: "):
        load_policy([write(tmp_path, "base.yaml", BASE), bad])


def test_every_bad_file_is_reported_not_the_first_alone(tmp_path: Path) -> None:
    one = write(tmp_path, "one.yaml", "version: 1\nrules:\n  - {id: a, effect: permit, match: {}}\n")
    two = write(tmp_path, "two.yaml", "version: 2\n")
    with pytest.raises(ConfigError) as raised:
        load_policy([one, write(tmp_path, "base.yaml", BASE), two, tmp_path / "nope.yaml"])
    lines = str(raised.value).splitlines()
    assert [line.split(": ")[0] for line in lines] == [str(one), str(two), str(tmp_path / "nope.yaml")]


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: file not found"):
        load_policy(tmp_path / "nope.yaml")


def test_no_files_at_all_is_an_error() -> None:
    with pytest.raises(ConfigError, match="no policy files given"):
        load_policy([])


# --- the pins file -------------------------------------------------------------------------------


def test_pins_survive_a_save_and_load(tmp_path: Path) -> None:
    path = tmp_path / "pins.json"
    pins = {"github/create_issue": "sha256:1", "github/b": "sha256:2"}

    save_pins(path, pins)

    assert load_pins(path) == pins
    assert json.loads(path.read_text())["version"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["pins.json"]  # no temporary file left behind


def test_a_missing_pins_file_is_no_pins(tmp_path: Path) -> None:
    assert load_pins(tmp_path / "absent.json") == {}


def test_the_pins_directory_is_created_on_first_save(tmp_path: Path) -> None:
    path = tmp_path / ".manifold" / "pins.json"
    save_pins(path, {"a/b": "sha256:1"})
    assert load_pins(path) == {"a/b": "sha256:1"}


def test_a_broken_pins_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path, "pins.json", '{"pins": {}}')
    with pytest.raises(ConfigError, match=r"pins\.json: not a pins file"):
        load_pins(path)


def test_an_unreadable_pins_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "pins.json").mkdir()  # a directory where the file should be cannot be read
    with pytest.raises(ConfigError, match=r"pins\.json: cannot read the pins file"):
        load_pins(tmp_path / "pins.json")

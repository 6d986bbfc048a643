"""The subject ``manifold explain`` decides on without starting a server, from the config alone."""

from __future__ import annotations

from typing import Any

from proxy.config.loading import config_from_mapping
from proxy.enforce.offline_subjects import resolve
from proxy.policy import Subject


def config(**servers: dict[str, Any]) -> Any:
    return config_from_mapping({"servers": servers}, environ={})


def test_a_tool_in_an_untrusted_servers_namespace_is_resolved_with_the_cautious_annotations() -> None:
    found = resolve(
        config(gh={"command": "x", "annotations": {"get": {"readOnlyHint": True}}}), "tool", "gh.get"
    )
    assert found is not None
    assert (found.subject.kind, found.subject.name, found.subject.server_id) == ("tool", "gh.get", "gh")
    assert found.annotations is not None
    assert (found.annotations.read_only, found.annotations.source) == (True, "operator")
    other = resolve(config(gh={"command": "x"}), "tool", "gh.delete")
    assert other is not None
    assert other.annotations is not None
    assert (other.annotations.destructive, other.annotations.source) == (True, "default")


def test_a_renamed_tool_is_decided_on_under_its_original_canonical_name() -> None:
    servers = config(gh={"command": "x", "tools": {"create_issue": {"name": "new_issue"}}})
    for asked in ("gh.new_issue", "gh.create_issue"):
        found = resolve(servers, "tool", asked)
        assert found is not None
        assert (found.subject.name, found.shown_as) == ("gh.create_issue", "gh.new_issue")


def test_a_prompt_and_a_servers_log_level_are_resolved() -> None:
    servers = config(gh={"command": "x", "prefix": "git"})
    prompt = resolve(servers, "prompt", "git.review")
    assert prompt is not None
    assert (prompt.subject.kind, prompt.subject.name, prompt.subject.server_id) == (
        "prompt",
        "git.review",
        "gh",
    )
    level = resolve(servers, "log_level", "gh")
    assert level is not None
    assert level.subject == Subject.log_level("gh")


def test_what_only_the_live_catalog_can_say_is_not_resolved() -> None:
    assert resolve(config(gh={"command": "x", "trusted": True}), "tool", "gh.get") is None  # its own hints
    assert resolve(config(gh={"command": "x"}, bare={"command": "y", "prefix": ""}), "tool", "gh.get") is None
    assert resolve(config(gh={"command": "x"}), "tool", "other.get") is None
    assert resolve(config(gh={"command": "x"}), "tool", "gh.") is None
    assert resolve(config(gh={"command": "x"}), "log_level", "nope") is None
    blocking = config_from_mapping(
        {"servers": {"gh": {"command": "x"}}, "policy": {"pins": {"mode": "block"}}}, environ={}
    )
    assert resolve(blocking, "tool", "gh.get") is None  # a drifted definition may be withheld

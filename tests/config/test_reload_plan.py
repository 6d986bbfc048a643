"""Transcript tests of the reload plan: an old config and a new one in, what a reload does out."""

from __future__ import annotations

from typing import Any

from proxy.config.loading import config_from_mapping
from proxy.config.model import Config
from proxy.config.reload_plan import Plan, diff


def config(servers: dict[str, Any], **rest: Any) -> Config:
    return config_from_mapping({"servers": servers, **rest}, environ={})


A = {"command": "a-server"}
B = {"command": "b-server"}
C = {"command": "c-server"}
SECRET = "s" * 40


def test_the_same_config_changes_nothing() -> None:
    plan = diff(config({"a": A}), config({"a": A}), per_client_ready=False)
    assert plan == Plan()
    assert not plan.changes_anything
    assert plan.describe() == "nothing to change"


def test_servers_are_added_removed_and_restarted_in_config_order() -> None:
    old = config({"a": A, "b": B, "gone": C})
    new = config({"b": {**B, "args": ["--new"]}, "a": A, "c": C, "d": A})
    plan = diff(old, new, per_client_ready=False)
    assert (plan.add, plan.remove, plan.restart) == (("c", "d"), ("gone",), ("b",))
    assert plan.describe() == "servers added: c, d; servers removed: gone; servers restarted: b"


def test_a_server_disabled_is_removed_and_enabled_again_is_added() -> None:
    on, off = config({"a": A, "b": B}), config({"a": A, "b": {**B, "enabled": False}})
    assert diff(on, off, per_client_ready=False).remove == ("b",)
    assert diff(off, on, per_client_ready=False).add == ("b",)


def test_a_changed_secret_restarts_its_server_and_is_never_printed() -> None:
    old = config({"a": {**A, "env": {"TOKEN": "one-secret-value"}}})
    new = config({"a": {**A, "env": {"TOKEN": "another-secret-value"}}})
    plan = diff(old, new, per_client_ready=False)
    assert plan.restart == ("a",)
    assert "secret-value" not in plan.describe()


def test_settings_outside_servers_and_endpoints_need_a_restart_and_keep_their_old_value() -> None:
    old = config({"a": A})
    new = config(
        {"a": A, "b": B},
        listen={"port": 9999},
        sessions={"secret": SECRET},
        metrics={"port": 9100},
        log_level="debug",
    )
    plan = diff(old, new, per_client_ready=False)
    assert plan.add == ("b",)
    assert plan.needs_restart == ("listen.port", "sessions.secret", "log_level", "metrics.port")
    assert plan.describe() == (
        "servers added: b; needs a restart, the old value stays: "
        "listen.port, sessions.secret, log_level, metrics.port"
    )
    in_force = plan.in_force(old, new)
    assert in_force.listen.port == old.listen.port
    assert in_force.sessions.secret is None
    assert in_force.metrics == old.metrics
    assert in_force.log_level == old.log_level
    assert list(in_force.servers) == ["a", "b"]


def test_only_restart_settings_changed_is_nothing_to_apply_but_is_reported() -> None:
    plan = diff(config({"a": A}), config({"a": A}, listen={"host": "0.0.0.0"}), per_client_ready=False)
    assert not plan.changes_anything
    assert plan.needs_restart == ("listen.host",)


def test_endpoints_are_added_removed_and_changed() -> None:
    old = config({"a": A, "b": B}, endpoints={"one": {"servers": ["a"]}, "two": {}, "same": {}})
    new = config({"a": A, "b": B}, endpoints={"one": {"servers": ["b"]}, "three": {}, "same": {}})
    plan = diff(old, new, per_client_ready=False)
    assert plan.endpoints_added == ("three",)
    assert plan.endpoints_removed == ("two",)
    assert plan.endpoints_changed == ("one",)
    assert not plan.servers_changed
    assert plan.describe() == "endpoints added: three; endpoints removed: two; endpoints changed: one"


def test_a_per_client_server_is_held_back_from_a_gateway_started_without_one() -> None:
    old = config({"a": A})
    new = config({"a": {**A, "session_mode": "per_client"}, "p": {**B, "session_mode": "per_client"}})
    plan = diff(old, new, per_client_ready=False)
    assert (plan.add, plan.restart, plan.held_back) == ((), (), ("a", "p"))
    assert plan.describe() == (
        "nothing to change; servers left as they were (a per_client server needs a restart to "
        "join a gateway started without one): a, p"
    )
    in_force = plan.in_force(old, new)
    assert in_force.servers["a"].session_mode == "shared"
    assert "p" not in in_force.servers


def test_per_client_servers_come_and_go_on_a_gateway_started_with_one() -> None:
    old = config({"a": {**A, "session_mode": "per_client"}})
    new = config({"p": {**B, "session_mode": "per_client"}})
    plan = diff(old, new, per_client_ready=True)
    assert (plan.add, plan.remove, plan.held_back) == (("p",), ("a",), ())


def test_a_servers_credentials_change_needs_a_restart_and_the_old_ones_stay_in_force() -> None:
    # The credential sources are built at start: a reload that swapped them would leave the
    # server reached with sources built for other settings (or with none).
    key = {"key": "A" * 43 + "="}
    http = {"url": "http://127.0.0.1:9/mcp", "session_mode": "per_client"}
    old = config({"a": {**http, "credentials": {"mode": "secret", "header": "X-Token"}}}, credentials=key)
    new = config(
        {
            "a": {**http, "timeout": 7, "credentials": {"mode": "secret", "header": "X-Other"}},
            "b": {**http, "credentials": {"mode": "secret"}},  # a new server with its own credentials
        },
        credentials=key,
    )
    plan = diff(old, new, per_client_ready=True)
    assert "servers.a.credentials" in plan.needs_restart
    assert "servers.b.credentials" in plan.needs_restart
    assert plan.held_back == ("b",)
    assert plan.restart == ("a",)  # its other settings apply
    kept = plan.in_force(old, new)
    assert kept.servers["a"].credentials == old.servers["a"].credentials
    assert "b" not in kept.servers
    # Only the credentials changed: nothing restarts, and the change is reported.
    only = config({"a": {**http, "credentials": {"mode": "secret", "header": "X-Other"}}}, credentials=key)
    plan = diff(old, only, per_client_ready=True)
    assert (plan.restart, plan.needs_restart) == ((), ("servers.a.credentials",))

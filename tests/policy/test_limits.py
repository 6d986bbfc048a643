"""Limit rules: parsing with errors an operator can act on, and which buckets a call spends."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from proxy.config.ratelimit import RateLimitSettings
from proxy.core.errors import ConfigError
from proxy.policy.gcra import LimitCheck
from proxy.policy.limits import (
    LimitMatch,
    LimitRule,
    Rate,
    applicable,
    limit_checks,
    parse_limits,
    parse_rate,
)
from proxy.ratelimit import denial_message, retry_meta

POLICY = """
limits:
  - id: per-user-default
    rate: 60/minute
    burst: 10
    per: [identity]
  - id: contractors-github
    rate: 0.5/second
    per: [identity, tool]
    match:
      roles: [contractor, intern]
      servers: [github]
      tools: ["github.*"]
  - id: global-search
    rate: 1000/hour
    burst: 50
    per: []
    match: {tools: ["search.query"]}
    methods: [tools/call, resources/read]
"""


@pytest.fixture
def rules() -> tuple[LimitRule, ...]:
    return parse_limits(yaml.safe_load(POLICY)["limits"], "policies/team.yaml")


def keys(found: list[tuple[LimitRule, str]]) -> list[str]:
    return [key for _, key in found]


def test_a_policy_file_parses_into_rules_with_defaults(rules: tuple[LimitRule, ...]) -> None:
    default, contractors, search = rules
    assert (default.rate, default.rate.interval, default.burst, default.methods) == (
        Rate(60, "minute"),
        1.0,
        10,
        ("tools/call",),
    )
    assert (contractors.rate.interval, contractors.burst, contractors.per) == (2.0, 1, ("identity", "tool"))
    assert (str(search.rate), search.rate.interval) == ("1000/hour", 3.6)


@pytest.mark.parametrize(
    ("text", "interval", "shown"),
    [("60/minute", 1.0, "60/minute"), ("0.5/second", 2.0, "0.5/second"), (" 7 / day ", 86400 / 7, "7/day")],
)
def test_rates_are_count_per_unit_with_fractional_counts(text: str, interval: float, shown: str) -> None:
    rate = parse_rate(text)
    assert (rate.interval, str(rate)) == (interval, shown)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"id": "x", "rate": "60/min", "per": []}, "limits[0] (id 'x'): rate: must look like '60/minute'"),
        ({"id": "x", "rate": "0/second", "per": []}, "rate: the count must be above 0 (got '0/second')"),
        ({"id": "x", "rate": "20000/second", "per": []}, "rate: must be at most 10000/second"),
        ({"id": "x", "rate": 60, "per": []}, "rate: must look like '60/minute' or '0.5/second' (N/"),
        (
            {"id": "x", "rate": "1/day", "burst": 0, "per": []},
            "burst: must be greater than or equal to 1 (got 0)",
        ),
        ({"id": "x", "rate": "1/day", "burst": 2.5, "per": []}, "burst: must be a valid integer (got 2.5)"),
        (
            {"id": "x", "rate": "1/day", "per": ["user"]},
            "per[0]: must be 'identity', 'server' or 'tool' (got 'user')",
        ),
        ({"id": "x", "rate": "1/day", "per": ["tool", "tool"]}, "per: lists a dimension twice"),
        ({"id": "x", "rate": "1/day"}, "limits[0] (id 'x'): per: required field is missing"),
        ({"rate": "1/day", "per": []}, "limits[0]: id: required field is missing"),
        (
            {"id": "a:b", "rate": "1/day", "per": []},
            "id: may only contain letters, digits, '_', '.' and '-' (got 'a:b')",
        ),
        ({"id": "x", "rate": "1/day", "per": [], "match": {"tools": []}}, "match.tools: must not be empty"),
        (
            {"id": "x", "rate": "1/day", "per": [], "match": {"tool": ["a"]}},
            "match.tool: unknown field (known: ",
        ),
        ({"id": "x", "rate": "1/day", "per": [], "method": ["a"]}, "method: unknown field (known: id, rate,"),
        ({"id": "x", "rate": "1/day", "per": [], "methods": []}, "methods: must list at least one method"),
        ("x", "limits[0]: must be a mapping with id, rate, per (got 'x')"),
    ],
)
def test_a_bad_rule_is_reported_with_file_rule_field_and_value(entry: Any, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_limits([entry], "policies/team.yaml")
    assert str(raised.value).startswith("policies/team.yaml: limits[0]")
    assert message in str(raised.value)


def test_every_problem_is_reported_at_once_including_duplicate_ids() -> None:
    entries = [
        {"id": "a", "rate": "1/day", "per": []},
        {"id": "b", "rate": "1/fortnight", "per": []},
        {"id": "a", "rate": "2/day", "per": []},
    ]
    with pytest.raises(ConfigError) as raised:
        parse_limits(entries, "p.yaml")
    assert str(raised.value).splitlines() == [
        "p.yaml: limits[1] (id 'b'): rate: must look like '60/minute' or '0.5/second' "
        "(N/second|minute|hour|day) (got '1/fortnight')",
        "p.yaml: limits[2] (id 'a'): id: duplicate limit id (first used by limits[0])",
    ]


def test_limits_must_be_a_list() -> None:
    with pytest.raises(ConfigError, match=r"^p.yaml: limits: must be a list of limits \(got a dict\)$"):
        parse_limits({"id": "a"}, "p.yaml")


def test_rules_are_frozen() -> None:
    rule = parse_limits([{"id": "a", "rate": "1/day", "per": []}])[0]
    with pytest.raises(ValidationError):
        rule.burst = 5


def test_a_copy_with_other_conditions_matches_by_its_own_conditions() -> None:
    rule = parse_limits([{"id": "a", "rate": "1/day", "per": [], "match": {"servers": ["x"]}}])[0]
    assert rule.applies(None, [], "x", None, "tools/call")
    copied = rule.model_copy(update={"match": LimitMatch(servers=("y",))})
    assert (
        copied.applies(None, [], "x", None, "tools/call"),
        copied.applies(None, [], "y", None, "tools/call"),
    ) == (
        False,
        True,
    )


def test_per_identity_gives_each_identity_its_own_bucket(rules: tuple[LimitRule, ...]) -> None:
    alice = applicable(rules[:1], "alice", [], "github", "github.list", "tools/call")
    bob = applicable(rules[:1], "bob", [], "search", "search.query", "tools/call")
    assert keys(alice) == ["per-user-default:identity=alice"]
    assert keys(bob) == ["per-user-default:identity=bob"]


def test_an_empty_per_is_one_bucket_shared_by_everyone(rules: tuple[LimitRule, ...]) -> None:
    found = {
        tuple(keys(applicable(rules[2:], who, [], "search", "search.query", "tools/call"))) for who in "abc"
    }
    assert found == {("global-search",)}


def test_every_applicable_limit_is_returned_in_rule_order(rules: tuple[LimitRule, ...]) -> None:
    found = applicable(rules, "carol", ["intern"], "github", "github.create_issue", "tools/call")
    assert keys(found) == [
        "per-user-default:identity=carol",
        "contractors-github:identity=carol:tool=github.create_issue",
    ]


@pytest.mark.parametrize(
    ("identity", "roles", "server", "tool", "method", "applies"),
    [
        ("carol", ["contractor"], "github", "github.repos.list", "tools/call", True),  # `*` crosses dots
        ("carol", ["staff"], "github", "github.list", "tools/call", False),  # no role matches
        ("carol", ["contractor"], "gitlab", "github.list", "tools/call", False),  # server differs
        ("carol", ["contractor"], "github", "GitHub.list", "tools/call", False),  # globs are case-sensitive
        ("carol", ["contractor"], "github", None, "tools/call", False),  # no tool: a tools condition fails
        ("carol", ["contractor"], "github", "github.list", "tools/list", False),  # method not listed
    ],
)
def test_match_conditions_must_all_hold(
    rules: tuple[LimitRule, ...],
    identity: str,
    roles: list[str],
    server: str | None,
    tool: str | None,
    method: str,
    applies: bool,
) -> None:
    assert bool(applicable(rules[1:2], identity, roles, server, tool, method)) is applies


def test_methods_other_than_tools_call_are_limited_only_when_listed(rules: tuple[LimitRule, ...]) -> None:
    found = applicable(rules, "alice", [], "search", "search.query", "resources/read")
    assert keys(found) == ["global-search"]


def test_identities_condition_and_missing_values() -> None:
    rule = parse_limits(
        [{"id": "r", "rate": "1/day", "per": ["identity"], "match": {"identities": ["alice"]}}]
    )
    assert keys(applicable(rule, "alice", [], None, None, "tools/call")) == ["r:identity=alice"]
    assert applicable(rule, "bob", [], None, None, "tools/call") == []
    anonymous = parse_limits([{"id": "r", "rate": "1/day", "per": ["identity", "server"]}])
    assert keys(applicable(anonymous, None, [], None, None, "tools/call")) == ["r:identity:server"]


def test_values_are_encoded_so_that_no_two_calls_share_a_key_by_accident() -> None:
    rule = parse_limits([{"id": "r", "rate": "1/day", "per": ["identity", "tool"]}])
    calls = [("a:tool=x", "y"), ("a", "x:tool=y"), ("a", "x"), ("a%3Atool%3Dx", "y"), ("", ""), (None, None)]
    found = [keys(applicable(rule, who, [], None, tool, "tools/call"))[0] for who, tool in calls]
    assert len(set(found)) == len(calls)
    assert found[0] == "r:identity=a%3Atool%3Dx:tool=y"


def test_per_identity_buckets_are_the_identitys_key_not_its_name() -> None:
    rule = parse_limits([{"id": "r", "rate": "1/day", "per": ["identity"]}])
    who = [
        ("jwt", "https://a.example", "alice"),
        ("jwt", "https://b.example", "alice"),  # another issuer's alice
        ("api_key", "", "alice"),  # an API key named like her
        ("jwt", "https://a.example,alice", ""),  # parts cannot run into each other
    ]
    found = [keys(applicable(rule, "alice", [], None, None, "tools/call", identity_key=k))[0] for k in who]
    assert len(set(found)) == len(who)
    assert found[0] == "r:identity=jwt,https%3A%2F%2Fa.example,alice"
    assert found[2] == "r:identity=api_key,,alice"


def test_an_issuers_condition_holds_for_the_issuer_of_the_key() -> None:
    rule = parse_limits(
        [{"id": "r", "rate": "1/day", "per": ["identity"], "match": {"issuers": ["https://b.example"]}}]
    )
    ours, theirs = ("jwt", "https://a.example", "al"), ("jwt", "https://b.example", "al")
    assert applicable(rule, "al", [], None, None, "tools/call", identity_key=ours) == []
    assert keys(applicable(rule, "al", [], None, None, "tools/call", identity_key=theirs)) == [
        "r:identity=jwt,https%3A%2F%2Fb.example,al"
    ]
    assert applicable(rule, "al", [], None, None, "tools/call") == []  # no issuer known: it fails


def test_limit_checks_carry_interval_burst_and_rule_id(rules: tuple[LimitRule, ...]) -> None:
    assert limit_checks(rules, "dave", ["contractor"], "github", "github.x", "tools/call") == [
        LimitCheck("per-user-default:identity=dave", 1.0, 10, "per-user-default"),
        LimitCheck("contractors-github:identity=dave:tool=github.x", 2.0, 1, "contractors-github"),
    ]


def test_the_denial_message_names_the_limit_and_rounds_the_wait_up(rules: tuple[LimitRule, ...]) -> None:
    assert denial_message(rules[0], 2.2100001) == (
        "Rate limit 'per-user-default' exceeded (60/minute, burst 10); retry in 2.3 s."
    )
    assert (
        denial_message(rules[1], 2.0)
        == "Rate limit 'contractors-github' exceeded (0.5/second, burst 1); retry in 2.0 s."
    )
    assert denial_message(None, 1.0) == "Rate limiting is unavailable right now; retry in 1.0 s."


def test_retry_meta_gives_seconds_rounded_up_to_the_millisecond() -> None:
    assert retry_meta(2.3) == {"retryAfterSeconds": 2.3}
    assert retry_meta(0.0001) == {"retryAfterSeconds": 0.001}
    assert retry_meta(float("inf")) == {}


def test_settings_default_to_memory_and_reject_unknown_keys_without_echoing_the_url() -> None:
    settings = RateLimitSettings()
    assert (settings.backend, settings.key_prefix, settings.failure_mode, settings.timeout) == (
        "memory",
        "manifold:rl:",
        "fail_open",
        0.25,
    )
    with pytest.raises(ValidationError, match="extra"):
        RateLimitSettings.model_validate({"backend": "redis", "url": "x"})
    with pytest.raises(ValidationError) as raised:
        RateLimitSettings(redis_url="http://:hunter2@host")
    assert "must start with redis://" in str(raised.value)
    assert "hunter2" not in repr(RateLimitSettings(redis_url="redis://:hunter2@host"))

"""PolicyEngine.decide: deny overrides allow, default, order independence, every condition."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from proxy.catalog.merge import Entry, ServerSlice, build_catalog
from proxy.catalog.naming import NamingCodec
from proxy.policy.annotations import CAUTIOUS, EffectiveAnnotations, effective_annotations
from proxy.policy.engine import PolicyEngine, Subject
from proxy.policy.model import ANONYMOUS, Identity, Policy, Rule

READ_ONLY = EffectiveAnnotations(
    read_only=True, destructive=False, idempotent=True, open_world=False, source="server"
)
WRITES = EffectiveAnnotations(
    read_only=False, destructive=False, idempotent=False, open_world=True, source="server"
)


def rule(id: str, effect: str, description: str | None = None, unless: Any = None, **match: Any) -> Rule:
    data: dict[str, Any] = {"id": id, "effect": effect, "match": match}
    if description is not None:
        data["description"] = description
    if unless is not None:
        data["unless"] = unless
    return Rule.model_validate(data)


def engine(*rules: Rule, default: str = "deny") -> PolicyEngine:
    return PolicyEngine(Policy(default=default, rules=rules))  # type: ignore[arg-type]


def who(name: str = "alice", *roles: str, source: str = "jwt") -> Identity:
    return Identity(name=name, roles=frozenset(roles), source=source)


def tool(name: str, annotations: EffectiveAnnotations | None = WRITES, server: str | None = None) -> Subject:
    return Subject("tool", name, server or name.split(".")[0], annotations)


def prompt(name: str) -> Subject:
    return Subject("prompt", name, name.split(".")[0])


def resource(uri: str, server: str = "docs") -> Subject:
    return Subject("resource", uri, server)


def test_when_no_rule_matches_the_default_decides_and_no_rule_is_named() -> None:
    closed = engine(rule("admins", "allow", roles=["admin"])).decide(who(), tool("github.get_issue"))
    opened = engine(rule("x", "deny", roles=["x"]), default="allow").decide(who(), tool("github.get_issue"))

    assert (closed.effect, closed.rule_ids, closed.reason) == ("deny", (), "no rule matched; default is deny")
    assert (opened.effect, opened.rule_ids, opened.reason) == (
        "allow",
        (),
        "no rule matched; default is allow",
    )
    assert closed.by_default
    assert not closed.allowed


def test_an_empty_policy_denies_everything() -> None:
    assert engine().decide(who("root", "admin"), tool("github.get_issue")).effect == "deny"


def test_a_matching_allow_rule_allows_and_is_named() -> None:
    decision = engine(rule("admins", "allow", roles=["admin"])).decide(who("a", "admin"), tool("gh.x"))
    assert (decision.effect, decision.rule_ids, decision.reason) == (
        "allow",
        ("admins",),
        "allowed by rule admins",
    )
    assert decision.allowed
    assert not decision.by_default


def test_a_matching_deny_overrides_any_matching_allow() -> None:
    rules = (
        rule("admins", "allow", roles=["admin"]),
        rule("everyone", "allow"),
        rule("no-github", "deny", description="github is off limits", servers=["github"]),
    )
    decision = engine(*rules).decide(who("a", "admin"), tool("github.get_issue"))

    assert (decision.effect, decision.rule_ids) == ("deny", ("no-github",))
    assert decision.reason == "denied by rule no-github: github is off limits"


def test_a_deny_overrides_even_a_default_of_allow() -> None:
    decision = engine(rule("no-shell", "deny", servers=["shell"]), default="allow").decide(
        who(), tool("shell.run")
    )
    assert (decision.effect, decision.rule_ids) == ("deny", ("no-shell",))


def test_a_decision_names_every_matching_rule_of_the_winning_effect_sorted() -> None:
    rules = (
        rule("z-allow", "allow"),
        rule("b-deny", "deny", description="b", tools=["gh.*"]),
        rule("a-deny", "deny", description="a", roles=["intern"]),
        rule("c-deny", "deny", roles=["nobody"]),
    )
    decision = engine(*rules).decide(who("i", "intern"), tool("gh.push"))

    assert decision.rule_ids == ("a-deny", "b-deny")
    assert decision.reasons == ("denied by rule a-deny: a", "denied by rule b-deny: b")
    assert decision.reason == "denied by rule a-deny: a; denied by rule b-deny: b"


def test_shuffling_the_rules_never_changes_a_decision() -> None:
    rules = [
        rule("admins", "allow", roles=["admin"]),
        rule("readers", "allow", annotations={"readOnly": True}),
        rule("gh", "allow", tools=["github.*"], roles=["dev"]),
        rule("no-destructive", "deny", roles=["contractor"], annotations={"destructive": True}),
        rule("no-shell", "deny", servers=["shell"], unless={"roles": ["admin"]}),
        rule("prompts", "allow", prompts=["*"]),
        rule("no-hr", "deny", resources=["file:///hr/*"]),
    ]
    identities = [who("a", "admin"), who("d", "dev"), who("c", "contractor", "dev"), ANONYMOUS]
    subjects = [
        tool("github.get", READ_ONLY),
        tool("github.delete", CAUTIOUS),
        tool("shell.run", WRITES),
        prompt("docs.summary"),
        resource("file:///hr/pay.csv"),
    ]
    cases = list(itertools.product(identities, subjects))
    expected = [engine(*rules).decide(i, s) for i, s in cases]
    shuffler = random.Random(7)
    for _ in range(20):
        shuffled = rules[:]
        shuffler.shuffle(shuffled)
        assert [engine(*shuffled).decide(i, s) for i, s in cases] == expected
    assert {d.effect for d in expected} == {"allow", "deny"}  # the cases exercise both outcomes


def test_every_condition_of_a_match_must_hold() -> None:
    policy = engine(rule("devs-on-github", "allow", roles=["dev"], servers=["github"]))

    assert policy.decide(who("d", "dev"), tool("github.x")).effect == "allow"
    assert policy.decide(who("d", "dev"), tool("jira.x")).effect == "deny"
    assert policy.decide(who("o", "ops"), tool("github.x")).effect == "deny"


def test_a_list_condition_holds_when_any_element_does() -> None:
    policy = engine(rule("people", "allow", identities=["alice", "bob"], roles=["dev", "ops"]))

    assert policy.decide(who("bob", "ops", "x"), tool("a.b")).effect == "allow"
    assert policy.decide(who("carol", "ops"), tool("a.b")).effect == "deny"
    assert policy.decide(who("alice", "sales"), tool("a.b")).effect == "deny"


def test_unless_exempts_only_when_all_its_conditions_hold() -> None:
    policy = engine(
        rule("no-shell", "deny", servers=["shell"], unless={"roles": ["admin"], "sources": ["stdio"]}),
        default="allow",
    )

    assert policy.decide(who("r", "admin", source="stdio"), tool("shell.run")).effect == "allow"
    assert policy.decide(who("r", "admin", source="jwt"), tool("shell.run")).rule_ids == ("no-shell",)
    assert policy.decide(who("r", source="stdio"), tool("shell.run")).rule_ids == ("no-shell",)


def test_a_rule_naming_tools_never_applies_to_prompts_or_resources() -> None:
    policy = engine(rule("all-tools", "allow", tools=["*"]))

    assert policy.decide(who(), tool("docs.search")).effect == "allow"
    assert policy.decide(who(), prompt("docs.search")).effect == "deny"
    assert policy.decide(who(), resource("docs.search")).effect == "deny"


def test_a_rule_naming_no_kind_applies_to_every_kind() -> None:
    policy = engine(rule("admins", "allow", roles=["admin"]))
    admin = who("a", "admin")

    assert [policy.decide(admin, s).effect for s in (tool("a.b"), prompt("a.b"), resource("x:/y"))] == [
        "allow"
    ] * 3


def test_a_rule_naming_several_kinds_matches_each_by_its_own_globs() -> None:
    policy = engine(rule("docs", "allow", prompts=["docs.*"], resources=["file:///docs/*"]))

    assert policy.decide(who(), prompt("docs.brief")).effect == "allow"
    assert policy.decide(who(), resource("file:///docs/a.md")).effect == "allow"
    assert (
        policy.decide(who(), resource("docs.brief")).effect == "deny"
    )  # the prompt glob is not the URI glob
    assert policy.decide(who(), tool("docs.brief")).effect == "deny"


@pytest.mark.parametrize(
    ("glob", "name", "matches"),
    [
        ("github.*", "github.repos.get", True),  # * crosses dots
        ("github.get_*", "github.get_issue", True),
        ("github.get_*", "github.list_issues", False),
        ("github.get_*", "GitHub.get_issue", False),  # case-sensitive
        ("github.get_?ssue", "github.get_issue", True),
        ("*.delete_[!a]*", "x.delete_repo", True),
        ("*.delete_[!a]*", "x.delete_all", False),
        ("file:///srv/*", "file:///srv/a/b/c.txt", True),  # * crosses slashes
        ("gh.a", "gh.a.b", False),  # anchored at the end
        ("gh.a", "x.gh.a", False),  # anchored at the start
    ],
)
def test_tool_globs_are_fnmatch_style_anchored_and_case_sensitive(
    glob: str, name: str, matches: bool
) -> None:
    policy = engine(rule("g", "allow", tools=[glob]))
    assert policy.decide(who(), tool(name)).allowed is matches


def test_annotation_conditions_see_the_effective_annotations_not_the_declared_ones() -> None:
    # The server claims its tool only reads; it is not trusted, so the claim is not believed.
    effective = effective_annotations({"readOnlyHint": True}, trusted=False, override=None)
    policy = engine(
        rule("readers", "allow", annotations={"readOnly": True}),
        rule("contractors-no-destructive", "deny", roles=["contractor"], annotations={"destructive": True}),
        rule("contractors", "allow", roles=["contractor"]),
    )

    assert policy.decide(who("c", "contractor"), tool("evil.wipe", effective)).rule_ids == (
        "contractors-no-destructive",
    )
    assert policy.decide(who("r"), tool("evil.wipe", effective)).effect == "deny"
    trusted = effective_annotations({"readOnlyHint": True}, trusted=True, override=None)
    assert policy.decide(who("r"), tool("good.read", trusted)).rule_ids == ("readers",)


def test_every_given_annotation_must_equal_the_effective_value() -> None:
    policy = engine(rule("safe-writes", "allow", annotations={"destructive": False, "openWorld": False}))
    closed = EffectiveAnnotations(False, False, False, False, "operator")

    assert policy.decide(who(), tool("a.b", closed)).effect == "allow"
    assert policy.decide(who(), tool("a.b", WRITES)).effect == "deny"  # open world


def test_a_tool_without_annotations_is_judged_as_the_cautious_defaults() -> None:
    policy = engine(rule("no-destructive", "deny", annotations={"destructive": True}), default="allow")
    assert policy.decide(who(), tool("a.b", annotations=None)).rule_ids == ("no-destructive",)


def test_annotation_conditions_never_match_prompts_or_resources() -> None:
    policy = engine(rule("no-destructive", "deny", annotations={"destructive": True}), default="allow")

    assert policy.decide(who(), prompt("a.b")).effect == "allow"
    assert policy.decide(who(), resource("file:///x")).effect == "allow"


def test_authenticated_and_sources_conditions_look_at_how_the_identity_was_established() -> None:
    policy = engine(
        rule("signed-in", "allow", authenticated=True),
        rule("no-anonymous", "deny", authenticated=False),
        rule("no-api-keys-on-shell", "deny", sources=["api_key"], servers=["shell"]),
    )

    assert policy.decide(who(source="jwt"), tool("shell.run")).effect == "allow"
    assert policy.decide(who(source="api_key"), tool("shell.run")).rule_ids == ("no-api-keys-on-shell",)
    assert policy.decide(ANONYMOUS, tool("github.get")).rule_ids == ("no-anonymous",)


def test_an_issuers_condition_tells_two_issuers_alices_apart() -> None:
    staff_idp, partner_idp = "https://id.example.com", "https://partners.example.net"
    policy = engine(
        rule("staff-deploy", "allow", issuers=[staff_idp], identities=["alice"], tools=["deploy.*"]),
        rule("partners-never-deploy", "deny", issuers=[partner_idp], tools=["deploy.*"]),
    )
    ours = Identity("alice", frozenset(), "jwt", issuer=staff_idp)
    theirs = Identity("alice", frozenset(), "jwt", issuer=partner_idp)

    assert policy.decide(ours, tool("deploy.run")).rule_ids == ("staff-deploy",)
    # Same name and roles, another issuer: another decision (not the first one, from the cache).
    assert policy.decide(theirs, tool("deploy.run")).rule_ids == ("partners-never-deploy",)
    # An API key has no issuer: an issuers condition never holds for it.
    assert policy.decide(who("alice", source="api_key"), tool("deploy.run")).by_default


def test_a_dry_run_enforces_allow_but_keeps_the_decision_for_the_log() -> None:
    decision = engine().decide(who(), tool("a.b"))

    assert decision.enforced_effect(dry_run=True) == "allow"
    assert decision.enforced_effect(dry_run=False) == "deny"
    assert decision.effect == "deny"


def test_decisions_stay_the_same_after_the_cache_is_cleared() -> None:
    policy = engine(rule("gh", "allow", tools=["gh.*"]))
    first = [policy.decide(who(f"user{n}"), tool("gh.get")) for n in range(5000)]  # more than the cache holds
    again = [policy.decide(who(f"user{n}"), tool("gh.get")) for n in range(5000)]

    assert first == again
    assert all(d.rule_ids == ("gh",) for d in again)


def test_a_policy_refuses_two_rules_with_one_id() -> None:
    with pytest.raises(ValueError, match="'twice' is used twice"):
        Policy(default="deny", rules=(rule("twice", "allow"), rule("twice", "deny")))


def test_an_identity_given_roles_as_a_set_still_gets_a_decision() -> None:
    identity = Identity(name="a", roles={"admin"}, source="jwt")  # type: ignore[arg-type]
    assert engine(rule("admins", "allow", roles=["admin"])).decide(identity, tool("a.b")).effect == "allow"


def test_subjects_are_built_from_catalog_entries() -> None:
    entry = Entry(name="gh.get_issue", server_id="github", original_name="get_issue", definition={})

    assert Subject.tool(entry, READ_ONLY) == Subject("tool", "gh.get_issue", "github", READ_ONLY)
    assert Subject.prompt(entry) == Subject("prompt", "gh.get_issue", "github", None)
    assert Subject.resource("file:///a", "docs") == Subject("resource", "file:///a", "docs", None)


def test_a_deny_on_a_canonical_name_holds_for_every_spelling_a_client_is_shown() -> None:
    # A derived name (the same server listing a name twice) and a shortened one (a small
    # max_length) must not slip past an exact-name deny rule written against st.secret...
    codec = NamingCodec(max_length=16)
    long = "secret_with_a_long_name"
    catalog = build_catalog(
        [ServerSlice("st", "st", [{"name": "secret"}, {"name": "secret"}, {"name": long}])], codec
    )
    spellings = [entry.name for entry in catalog.entries]
    assert spellings[0] == "st.secret"
    assert len(set(spellings)) == 3
    assert all(
        name != canonical for name, canonical in zip(spellings[1:], ("st.secret", f"st.{long}"), strict=True)
    )
    policy = engine(rule("all", "allow"), rule("no-secret", "deny", tools=["st.secret", f"st.{long}"]))
    for entry in catalog.entries:
        decision = policy.decide(who(), Subject.tool(entry, READ_ONLY))
        assert (entry.name, decision.effect, decision.rule_ids) == (entry.name, "deny", ("no-secret",))


def test_a_deny_rule_with_show_keeps_the_tool_listed_but_denied() -> None:
    shown = Rule.model_validate({"id": "shown", "effect": "deny", "show": True, "match": {"tools": ["a.*"]}})
    decision = engine(rule("all", "allow"), shown).decide(who(), tool("a.delete"))
    assert (decision.effect, decision.visible, decision.rule_ids) == ("deny", True, ("shown",))


def test_a_tool_is_hidden_when_any_applying_deny_rule_does_not_say_show() -> None:
    shown = Rule.model_validate({"id": "shown", "effect": "deny", "show": True, "match": {"tools": ["a.*"]}})
    hidden = rule("hidden", "deny", tools=["a.delete"])
    decision = engine(rule("all", "allow"), shown, hidden).decide(who(), tool("a.delete"))
    assert (decision.effect, decision.visible) == ("deny", False)
    assert engine(rule("all", "allow"), shown, hidden).decide(who(), tool("a.read")).visible


def test_show_on_an_allow_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="'show' only applies to deny rules"):
        Rule.model_validate({"id": "x", "effect": "allow", "show": True, "match": {}})


def test_decisions_about_long_names_are_not_cached_so_huge_uris_cannot_fill_memory() -> None:
    policy = engine(rule("docs", "allow", resources=["file:///docs/*"]))
    for n in range(50):
        huge = f"file:///docs/{n}-" + "x" * 64 * 1024
        assert policy.decide(who(), resource(huge)).effect == "allow"
        assert policy.decide(who(), resource(huge)).effect == "allow"  # decided again, the same
    assert policy.cached == 0
    policy.decide(who(), resource("file:///docs/a.md"))
    assert policy.cached == 1  # ordinary names are still cached


# ---- a shared server's log level -----------------------------------------------------------


def test_a_log_level_is_allowed_only_by_an_allow_rule_that_names_log_levels() -> None:
    everything = engine(rule("staff", "allow", roles=["staff"]), default="allow")
    named = engine(rule("ops", "allow", roles=["ops"], log_levels=["git*"]))

    assert everything.decide(who("s", "staff"), Subject.log_level("github")).rule_ids == ()
    assert not everything.decide(who("s", "staff"), Subject.log_level("github")).allowed
    assert named.decide(who("o", "ops"), Subject.log_level("github")).rule_ids == ("ops",)
    assert named.decide(who("o", "ops"), Subject.log_level("github")).allowed
    assert not named.decide(who("o", "ops"), Subject.log_level("shell")).allowed  # glob on server ids
    assert not named.decide(who("s", "staff"), Subject.log_level("github")).allowed


def test_a_log_level_rule_is_about_log_levels_only() -> None:
    levels = engine(rule("ops", "allow", roles=["ops"], log_levels=["*"]))

    assert not levels.decide(who("o", "ops"), tool("github.get_issue")).allowed
    assert not levels.decide(who("o", "ops"), prompt("github.help")).allowed


def test_deny_rules_naming_no_kind_deny_log_levels_and_rules_naming_another_kind_do_not() -> None:
    policy = engine(
        rule("ops", "allow", roles=["ops"], log_levels=["*"]),
        rule("no-shell", "deny", servers=["shell"], unless={"roles": ["admin"]}),
        rule("no-tools", "deny", roles=["ops"], tools=["*"]),
    )

    assert policy.decide(who("o", "ops"), Subject.log_level("shell")).rule_ids == ("no-shell",)
    assert not policy.decide(who("o", "ops"), Subject.log_level("shell")).allowed
    assert policy.decide(who("o", "ops"), Subject.log_level("github")).allowed

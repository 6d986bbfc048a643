"""manifold check's warning: roles the policy grants that a mere scope could carry."""

from __future__ import annotations

from proxy.auth.scope_roles import granted_roles, unmapped_scope_warnings
from proxy.config.oauth import OAuthSettings
from proxy.policy.model import Rule

RULES = [
    Rule.model_validate({"id": "admins", "effect": "allow", "match": {"roles": ["admin"]}}),
    Rule.model_validate({"id": "no-guests", "effect": "deny", "match": {"roles": ["guest"]}}),
    Rule.model_validate({"id": "ask", "effect": "confirm", "match": {"roles": ["ops"], "tools": ["*"]}}),
]


def oauth(**more: object) -> OAuthSettings:
    return OAuthSettings.model_validate(
        {"resource": "https://mcp.example.test/mcp", "authorization_servers": [{"issuer": "https://id.test"}]}
        | more
    )


def test_the_roles_that_open_something_are_those_of_allow_and_confirm_rules_and_metrics() -> None:
    assert granted_roles(RULES, "observer") == {
        "admin": "policy rule 'admins'",
        "ops": "policy rule 'ask'",
        "observer": "metrics.role",
    }


def test_scopes_as_roles_warns_about_each_role_a_scope_could_carry() -> None:
    warnings = unmapped_scope_warnings(oauth(scopes_as_roles=True), granted_roles(RULES, "observer"))
    assert len(warnings) == 3
    assert warnings[0].startswith("role 'admin' (policy rule 'admins') is granted to any token carrying")


def test_without_scopes_as_roles_no_scope_is_a_role_and_nothing_is_warned() -> None:
    assert unmapped_scope_warnings(oauth(scope_roles={"corp:admin": ["admin"]}), {"admin": "x"}) == []

"""``manifold check``: which roles the policy grants that a mere scope could carry.

With ``auth.oauth.scopes_as_roles: true`` every scope a token carries is a role of the same
name, and many authorization servers grant whatever scope a dynamically registered client asks
for: a role the policy grants (a rule's ``roles``, ``metrics.role``) is then one scope request
away for anybody who can register a client. Pure: settings and the roles in, warnings out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from proxy.config.oauth import OAuthSettings
from proxy.policy.model import Rule

__all__ = ["granted_roles", "unmapped_scope_warnings"]


def granted_roles(rules: Iterable[Rule], metrics_role: str | None) -> dict[str, str]:
    """Each role that opens something, and the first place that grants it (for the message)."""
    found: dict[str, str] = {}
    for rule in rules:
        if rule.effect == "deny":
            continue  # a deny rule's role takes away; holding it grants nothing
        for role in rule.match.roles or ():
            found.setdefault(role, f"policy rule {rule.id!r}")
    if metrics_role is not None:
        found.setdefault(metrics_role, "metrics.role")
    return found


def unmapped_scope_warnings(settings: OAuthSettings, roles: Mapping[str, str]) -> list[str]:
    """One warning per role in ``roles`` a token could hold by carrying a scope of its name."""
    if not settings.scopes_as_roles:
        return []  # only scope_roles turns scopes into roles: the operator chose each one
    return [
        f"role {role!r} ({where}) is granted to any token carrying the scope {role!r} "
        "(auth.oauth.scopes_as_roles: true); an authorization server that grants the scopes a "
        "client asks for makes it anyone's: map the scopes you mean in scope_roles instead"
        for role, where in sorted(roles.items())
    ]

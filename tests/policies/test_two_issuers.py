"""Decision table for policies/examples/two-issuers.yaml: one name, two issuers, two answers."""

from __future__ import annotations

import pytest

from proxy.policy.engine import Subject
from proxy.policy.model import Effect, Identity
from tests.policies.tables import READ_ONLY, check, engine_for, tool

ENGINE = engine_for("two-issuers")
STAFF_IDP = "https://id.example.com"
PARTNER_IDP = "https://partners.example.net"


def signed_in(name: str, issuer: str, *roles: str) -> Identity:
    return Identity(name, frozenset(roles), "jwt", issuer=issuer)


ALICE = signed_in("alice", STAFF_IDP)
PARTNER_ALICE = signed_in("alice", PARTNER_IDP)  # a partner IdP's user who is also called alice
STAFF = signed_in("sam", STAFF_IDP, "staff")
PARTNER_STAFF = signed_in("sam", PARTNER_IDP, "staff")  # the partner's IdP hands out roles too
KEY_ALICE = Identity("alice", frozenset({"staff"}), "api_key")  # an API key has no issuer

ROWS = [
    pytest.param(
        ALICE, tool("deploy.run"), "allow", ("release-manager-deploys",), id="company-alice-deploys"
    ),
    pytest.param(
        PARTNER_ALICE,
        tool("deploy.run"),
        "deny",
        ("deploys-only-by-the-company-alice",),
        id="partner-alice-cannot",
    ),
    pytest.param(
        KEY_ALICE, tool("deploy.run"), "deny", ("deploys-only-by-the-company-alice",), id="key-alice-cannot"
    ),
    pytest.param(STAFF, tool("github.create_issue"), "allow", ("staff-use-everything",), id="staff-use-all"),
    pytest.param(
        PARTNER_STAFF, tool("github.create_issue"), "deny", (), id="partner-staff-role-is-not-staff"
    ),
    pytest.param(KEY_ALICE, tool("github.create_issue"), "deny", (), id="issuers-never-match-an-api-key"),
    pytest.param(
        PARTNER_ALICE, tool("docs.search", READ_ONLY), "allow", ("partners-read-docs",), id="partner-docs"
    ),
    pytest.param(PARTNER_ALICE, tool("docs.edit"), "deny", (), id="partner-docs-read-only"),
    pytest.param(
        STAFF,
        tool("deploy.run"),
        "deny",
        ("deploys-only-by-the-company-alice",),
        id="staff-not-alice-no-deploy",
    ),
]


@pytest.mark.parametrize(("identity", "subject", "effect", "rule_ids"), ROWS)
def test_two_issuers(identity: Identity, subject: Subject, effect: Effect, rule_ids: tuple[str, ...]) -> None:
    check(ENGINE, identity, subject, effect, rule_ids)

"""Decision table for policies/examples/confirm-destructive.yaml."""

from __future__ import annotations

import pytest

from proxy.policy.engine import Subject
from proxy.policy.model import Effect, Identity
from tests.policies.tables import READ_ONLY, WRITES, check, engine_for, person, prompt, tool

ENGINE = engine_for("confirm-destructive")
STAFF = person("sam", "staff")
INTERN = person("ian", "staff", "intern")
OUTSIDER = person("olga", "guest")

ROWS = [
    pytest.param(STAFF, tool("web.fetch", READ_ONLY), "allow", ("staff-tools",), id="reads-run-at-once"),
    pytest.param(STAFF, tool("web.post", WRITES), "allow", ("staff-tools",), id="writes-not-destructive"),
    pytest.param(
        STAFF, tool("web.delete_page"), "confirm", ("ask-before-destroying",), id="destructive-asks"
    ),
    pytest.param(STAFF, tool("github.delete_repo"), "allow", ("staff-tools",), id="other-servers-not-asked"),
    pytest.param(
        STAFF, tool("payments.refund", WRITES), "confirm", ("refunds-need-a-manager",), id="refund-asks"
    ),
    pytest.param(
        STAFF,
        tool("payments.refund_all"),
        "confirm",
        ("refunds-need-a-manager",),
        id="refund-glob",
    ),
    pytest.param(
        INTERN, tool("payments.refund", WRITES), "deny", ("interns-never-refund",), id="deny-beats-confirm"
    ),
    pytest.param(
        INTERN, tool("notes.wipe"), "confirm", ("ask-before-destroying",), id="intern-asked-elsewhere"
    ),
    pytest.param(OUTSIDER, tool("web.delete_page"), "deny", (), id="confirm-never-allows"),
    pytest.param(STAFF, prompt("web.summarise"), "deny", (), id="prompts-not-confirmed"),
]


@pytest.mark.parametrize(("identity", "subject", "effect", "rule_ids"), ROWS)
def test_confirm_destructive(
    identity: Identity, subject: Subject, effect: Effect, rule_ids: tuple[str, ...]
) -> None:
    check(ENGINE, identity, subject, effect, rule_ids)


def test_the_refund_rule_names_its_approver_role_and_timeout() -> None:
    decision = ENGINE.decide(STAFF, tool("payments.refund", WRITES))
    assert decision.confirm is not None
    assert decision.confirm.approver_roles == {"finance-managers"}
    assert decision.confirm.timeout == 600
    assert decision.confirm.remember == "none"
    assert decision.confirm.reasons == ("money leaves the company",)


def test_the_destructive_rule_is_remembered_for_ten_minutes_and_the_same_arguments() -> None:
    decision = ENGINE.decide(STAFF, tool("web.delete_page"))
    assert decision.confirm is not None
    assert decision.confirm.approver_roles == frozenset()
    assert (decision.confirm.remember, decision.confirm.remember_minutes) == ("minutes", 10)
    assert decision.confirm.remember_any_arguments is False
    assert decision.visible

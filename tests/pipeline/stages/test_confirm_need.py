"""The approval mark: what an approval, a remembered answer or an open question is tied to."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.pipeline.stages.confirm_need import Need, approval_mark
from proxy.policy.model import Confirmation

BASE = Need(("ask",), Confirmation(reasons=("it deletes",), timeout=60, remember="session"))


@pytest.mark.parametrize(
    "edited",
    [
        pytest.param(dataclasses.replace(BASE, rule_ids=("ask", "ask-too")), id="another-rule"),
        pytest.param(dataclasses.replace(BASE.confirm, reasons=("it now pays",)), id="reason"),
        pytest.param(dataclasses.replace(BASE.confirm, remember="none"), id="remember"),
        pytest.param(dataclasses.replace(BASE.confirm, timeout=30), id="timeout"),
        pytest.param(dataclasses.replace(BASE.confirm, remember_any_arguments=True), id="any-arguments"),
        pytest.param(
            dataclasses.replace(BASE.confirm, approver_roles=frozenset({"managers"})), id="approver"
        ),
    ],
)
def test_any_edit_of_the_deciding_rules_changes_the_mark(edited: Need | Confirmation) -> None:
    need = edited if isinstance(edited, Need) else dataclasses.replace(BASE, confirm=edited)
    assert approval_mark(need) != approval_mark(BASE)


def test_the_same_rules_give_the_same_mark() -> None:
    same = Need(("ask",), Confirmation(reasons=("it deletes",), timeout=60, remember="session"))
    assert approval_mark(same) == approval_mark(BASE)

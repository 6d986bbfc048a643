"""The approval page's HTML: everything shown is escaped, and the form is shown only while the
request waits."""

from __future__ import annotations

from dataclasses import replace

from proxy.enforce.confirm.approvals import Approval
from proxy.inbound.approval_page import render

RECORD = Approval.new(
    tool="pay.refund",
    server="pay",
    caller="<script>alert(1)</script>",
    caller_key=("api_key", "", "x"),
    roles=("finance",),
    reason="money & more",
    summary='note: "</pre><img src=x onerror=alert(1)>"',
    deadline=2_000_000_000.0,
)


def test_what_the_caller_and_the_server_wrote_is_escaped() -> None:
    page = render(RECORD, token="t", now=0.0)
    assert "<script>" not in page
    assert "<img" not in page
    assert "&lt;script&gt;" in page
    assert "money &amp; more" in page


def test_a_waiting_request_asks_for_the_approvers_credential_first() -> None:
    page = render(RECORD, token="abc123", now=0.0)
    assert 'name="token" value="abc123"' in page
    assert '<label for="credential">' in page
    assert 'name="step" value="identify"' in page
    assert 'value="approve"' not in page  # no decision before a credential is accepted


def test_a_signed_in_approver_gets_the_decision_form_naming_them() -> None:
    page = render(RECORD, token="signed", now=0.0, approver="<mona>")
    assert 'name="token" value="signed"' in page
    assert 'name="step" value="decide"' in page
    assert 'value="approve"' in page
    assert 'value="reject"' in page
    assert "Deciding as <strong>&lt;mona&gt;</strong>" in page
    assert 'name="credential"' not in page


def test_an_abandoned_request_says_the_caller_gave_up_and_has_no_form() -> None:
    page = render(replace(RECORD, state="abandoned", decided_by="x", decided_at=1.0), token="t", now=0.0)
    assert "Abandoned" in page
    assert "gave up" in page
    assert "<form" not in page


def test_a_decided_request_shows_the_decision_and_no_form() -> None:
    page = render(replace(RECORD, state="rejected", decided_by="mona", decided_at=1.0), token="t", now=0.0)
    assert "Rejected by mona" in page
    assert "<form" not in page


def test_an_expired_request_has_no_form() -> None:
    page = render(RECORD, token="t", now=RECORD.deadline + 1)
    assert "Expired" in page
    assert "<form" not in page


def test_an_unknown_request_says_so() -> None:
    assert "not found" in render(None, token="t", now=0.0)

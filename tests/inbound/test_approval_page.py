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


def test_a_waiting_request_has_the_form_with_its_token_and_labelled_fields() -> None:
    page = render(RECORD, token="abc123", now=0.0)
    assert 'name="token" value="abc123"' in page
    assert '<label for="credential">' in page
    assert 'value="approve"' in page
    assert 'value="reject"' in page


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

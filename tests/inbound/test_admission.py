"""The connection budget, the cap under the open-files limit and the refusals: pure arithmetic."""

from __future__ import annotations

from http import HTTPStatus

import orjson

from proxy.core.errors import LimitExceeded
from proxy.inbound.admission import (
    DRAINING,
    FILES_PER_SERVER,
    FILES_SPARE,
    Admission,
    ConnectionBudget,
    connection_cap,
    refusal,
)


def test_connections_are_served_up_to_the_reserve_then_probes_only_then_refused() -> None:
    budget = ConnectionBudget(cap=5, reserve=2)
    assert [budget.opened() for _ in range(7)] == [
        *[Admission.SERVE] * 3,
        *[Admission.PROBES_ONLY] * 2,
        *[Admission.REFUSE] * 2,
    ]


def test_past_the_refusals_being_drained_a_flood_is_shed() -> None:
    budget = ConnectionBudget(cap=2, reserve=1)
    admitted = [budget.opened() for _ in range(2 + DRAINING + 2)]
    assert admitted[2 : 2 + DRAINING] == [Admission.REFUSE] * DRAINING
    assert admitted[-2:] == [Admission.SHED] * 2


def test_a_closed_connection_frees_its_place() -> None:
    budget = ConnectionBudget(cap=2, reserve=1)
    assert budget.opened() is Admission.SERVE
    assert budget.opened() is Admission.PROBES_ONLY
    budget.closed()
    budget.closed()
    assert budget.opened() is Admission.SERVE
    assert budget.open == 1


def test_a_cap_lowered_below_the_reserve_keeps_half_for_clients() -> None:
    budget = ConnectionBudget(cap=10, reserve=32)
    assert budget.reserve == 5
    assert [budget.opened() for _ in range(6)][-2:] == [Admission.SERVE, Admission.PROBES_ONLY]


def test_the_cap_leaves_room_under_the_open_files_limit_for_the_servers() -> None:
    assert connection_cap(2000, None, servers=3) == 2000
    assert connection_cap(2000, 65536, servers=3) == 2000
    assert connection_cap(2000, 1024, servers=3) == 1024 - FILES_SPARE - 3 * FILES_PER_SERVER
    assert connection_cap(2000, 256, servers=1) == 184
    assert connection_cap(2000, 60, servers=10) == 1  # no room at all: still one, to say 503


def test_a_refusal_is_a_closing_http_response_whose_json_rpc_error_names_the_limit() -> None:
    refused = LimitExceeded("too many open connections", limit="max_connections", maximum=40)
    response = refusal(HTTPStatus.SERVICE_UNAVAILABLE, refused, retry_after=1)
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 503 Service Unavailable"
    assert {"connection: close", "retry-after: 1", f"content-length: {len(body)}"} <= set(lines)
    error = orjson.loads(body)
    assert error["id"] is None
    assert error["error"]["data"] == {"limit": "max_connections", "max": 40}
    assert "limits.max_connections is 40" in error["error"]["message"]


def test_a_refusal_without_retry_after_has_no_such_header() -> None:
    refused = LimitExceeded("request body not received in time", limit="body_timeout", maximum=1.5)
    response = refusal(HTTPStatus.REQUEST_TIMEOUT, refused)
    assert response.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert b"retry-after" not in response
    assert b"limits.body_timeout is 1.5" in response

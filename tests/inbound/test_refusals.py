"""Refusals: the one way an inbound transport answers a request it will not serve."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import InvalidRequest, LimitExceeded
from proxy.inbound.refusals import Refused, answer_of, write_http

pytestmark = pytest.mark.anyio


def test_a_refusal_is_answered_with_its_code_message_and_data() -> None:
    limit = LimitExceeded("too big", limit="max_request_bytes", maximum=10)
    answer = answer_of(Refused(limit, 413, 7))
    assert answer["id"] == 7
    assert answer["error"]["code"] == limit.code
    assert answer["error"]["data"] == limit.data


def test_a_stateless_refusal_of_an_unreadable_request_has_no_id() -> None:
    assert "id" not in answer_of(Refused(InvalidRequest("no"), 400, None, stateless=True))
    assert answer_of(Refused(InvalidRequest("no"), 400, None))["id"] is None


async def test_over_http_it_is_written_with_its_status_and_headers() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    await write_http(send, Refused(InvalidRequest("Forbidden"), 403, headers=[(b"x-why", b"origin")]))
    assert sent[0]["status"] == 403
    assert (b"x-why", b"origin") in sent[0]["headers"]
    assert orjson.loads(sent[1]["body"])["error"]["message"] == "Forbidden"


async def test_without_a_status_the_2026_revision_gives_it_from_the_code() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    await write_http(send, Refused(InvalidRequest("bad"), None, 1, stateless=True))
    assert sent[0]["status"] == 400

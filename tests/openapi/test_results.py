"""HTTP answers to tool results: structured JSON, text, images, resources, errors, and lies."""

from __future__ import annotations

import base64

import pytest

from proxy.openapi.results import HttpAnswer, tool_result
from proxy.openapi.tools import CallPlan


def plan(*, has_output: bool = True, wraps: bool = False) -> CallPlan:
    return CallPlan("GET", "/x", (), None, wraps_output=wraps, has_output=has_output)


def result(answer: HttpAnswer, call: CallPlan | None = None) -> dict[str, object]:
    return tool_result(call or plan(), answer, url="http://api/x", max_error_bytes=16)


def test_json_is_structured_and_text() -> None:
    found = result(HttpAnswer(200, "OK", "application/json", b'{"a": 1}'))
    assert found == {"content": [{"type": "text", "text": '{"a": 1}'}], "structuredContent": {"a": 1}}


def test_a_json_list_is_wrapped_where_its_schema_is() -> None:
    found = result(HttpAnswer(200, "OK", "application/problem+json", b"[1]"), plan(wraps=True))
    assert found["structuredContent"] == {"result": [1]}


@pytest.mark.parametrize(
    ("media", "body"), [("application/json", b"<html>"), ("text/html", b"<html>"), ("image/png", b"\x89PNG")]
)
def test_a_body_that_is_not_the_promised_json_is_an_error(media: str, body: bytes) -> None:
    found = result(HttpAnswer(200, "OK", media, body))
    assert found["isError"] is True
    assert "not the JSON its document describes" in str(found["content"])


def test_a_json_scalar_where_an_object_is_promised_is_an_error() -> None:
    assert result(HttpAnswer(200, "OK", "application/json", b"3"))["isError"] is True


def test_without_an_output_schema_bodies_go_by_media_type() -> None:
    loose = plan(has_output=False)
    assert result(HttpAnswer(200, "OK", "text/csv", b"a,b"), loose) == {
        "content": [{"type": "text", "text": "a,b"}]
    }
    image = result(HttpAnswer(200, "OK", "image/png", b"\x89PNG"), loose)
    assert image == {
        "content": [{"type": "image", "data": base64.b64encode(b"\x89PNG").decode(), "mimeType": "image/png"}]
    }
    blob = result(HttpAnswer(200, "OK", "application/pdf", b"%PDF"), loose)
    assert blob["content"] == [
        {
            "type": "resource",
            "resource": {"uri": "http://api/x", "mimeType": "application/pdf", "blob": "JVBERg=="},
        }
    ]
    lying = result(HttpAnswer(200, "OK", "application/json", b"not json"), loose)
    assert lying == {"content": [{"type": "text", "text": "not json"}]}
    assert result(HttpAnswer(204, "No Content", "", b""), loose) == {
        "content": [{"type": "text", "text": "HTTP 204 No Content"}]
    }


def test_an_error_status_is_an_error_result_with_the_start_of_the_body() -> None:
    found = result(HttpAnswer(503, "Service Unavailable", "text/plain", b"x" * 100))
    assert found == {
        "content": [
            {"type": "text", "text": "HTTP 503 Service Unavailable from GET /x: " + "x" * 16 + " (cut)"}
        ],
        "isError": True,
    }

"""Arguments to HTTP requests: styles and explode, bodies, and path parameters that cannot
leave their segment."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.openapi.requests import BadArguments, build_request
from proxy.openapi.tools import BodyPlan, CallPlan, ParamPlan


def call(*params: ParamPlan, path: str = "/items/{id}", body: BodyPlan | None = None) -> CallPlan:
    return CallPlan("GET", path, params, body, wraps_output=False, has_output=False)


ID = ParamPlan("id", "id", "path", "simple", False)


@pytest.mark.parametrize(
    ("value", "target"),
    [
        ("../admin", "/v1/items/..%2Fadmin"),
        ("a%2Fb", "/v1/items/a%252Fb"),
        ("a/b?c=d#e", "/v1/items/a%2Fb%3Fc%3Dd%23e"),
        ("{other}", "/v1/items/%7Bother%7D"),
        (7, "/v1/items/7"),
    ],
)
def test_a_path_value_is_one_segment(value: Any, target: str) -> None:
    assert build_request(call(ID), {"id": value}, "/v1").target == target


@pytest.mark.parametrize("value", ["..", ".", ""])
def test_a_dot_segment_or_empty_path_value_is_refused(value: str) -> None:
    with pytest.raises(BadArguments, match="not a path segment"):
        build_request(call(ID), {"id": value}, "/v1")


def test_a_missing_path_argument_is_refused() -> None:
    with pytest.raises(BadArguments, match="'id' is required"):
        build_request(call(ID), {}, "")


@pytest.mark.parametrize(
    ("style", "explode", "value", "query"),
    [
        ("form", True, ["a", "b"], "t=a&t=b"),
        ("form", False, ["a", "b"], "t=a,b"),
        ("spaceDelimited", False, ["a", "b"], "t=a%20b"),
        ("pipeDelimited", False, ["a", "b"], "t=a|b"),
        ("deepObject", True, {"x": 1, "y": "a b"}, "t%5Bx%5D=1&t%5By%5D=a%20b"),
        ("form", True, {"x": 1}, "x=1"),
        ("form", False, {"x": 1, "y": 2}, "t=x,1,y,2"),
        ("form", True, True, "t=true"),
        ("form", True, "a&b=c", "t=a%26b%3Dc"),
    ],
)
def test_query_styles(style: str, explode: bool, value: Any, query: str) -> None:
    plan = ParamPlan("t", "t", "query", style, explode)
    assert build_request(call(plan, path="/x"), {"t": value}, "").target == f"/x?{query}"


@pytest.mark.parametrize(
    ("style", "explode", "value", "segment"),
    [
        ("label", False, ["a", "b"], ".a,b"),
        ("label", True, ["a", "b"], ".a.b"),
        ("matrix", False, ["a", "b"], ";id=a,b"),
        ("matrix", True, ["a", "b"], ";id=a;id=b"),
        ("simple", True, {"x": 1}, "x=1"),
        ("simple", False, {"x": 1}, "x,1"),
    ],
)
def test_path_styles(style: str, explode: bool, value: Any, segment: str) -> None:
    plan = ParamPlan("id", "id", "path", style, explode)
    assert build_request(call(plan), {"id": value}, "").target == f"/items/{segment}"


def test_headers_and_cookies() -> None:
    header = ParamPlan("h", "X-Trace", "header", "simple", False)
    cookie = ParamPlan("c", "session", "cookie", "form", True)
    request = build_request(call(header, cookie, path="/x"), {"h": ["a", "b"], "c": "v;1"}, "")
    assert request.headers["X-Trace"] == "a,b"
    assert request.headers["Cookie"] == "session=v%3B1"


def test_a_header_value_with_a_line_break_is_refused() -> None:
    header = ParamPlan("h", "X-Trace", "header", "simple", False)
    with pytest.raises(BadArguments, match="control characters"):
        build_request(call(header, path="/x"), {"h": "a\r\nHost: evil"}, "")


def test_bodies_as_declared() -> None:
    json_call = call(path="/x", body=BodyPlan("application/json", required=True))
    request = build_request(json_call, {"body": {"a": [1]}}, "")
    assert (request.body, request.headers["Content-Type"]) == (b'{"a":[1]}', "application/json")
    form = build_request(
        call(path="/x", body=BodyPlan("application/x-www-form-urlencoded", False)), {"body": {"a": "b c"}}, ""
    )
    assert form.body == b"a=b%20c"
    multi = build_request(
        call(path="/x", body=BodyPlan("multipart/form-data", False)), {"body": {"f": "v"}}, ""
    )
    boundary = multi.headers["Content-Type"].split("boundary=")[1]
    assert (
        multi.body
        == f'--{boundary}\r\nContent-Disposition: form-data; name="f"\r\n\r\nv\r\n--{boundary}--\r\n'.encode()
    )
    with pytest.raises(BadArguments, match="'body' is required"):
        build_request(json_call, {}, "")


def test_a_multipart_file_field_is_decoded_into_file_parts_and_bad_base64_refused() -> None:
    import base64

    files = (("photo", "image/png"), ("extra", "application/octet-stream"))
    plan = call(path="/x", body=BodyPlan("multipart/form-data", True, files))
    png = b"\x89PNG\r\n\x1a\n\x00\xff"
    built = build_request(
        plan,
        {"body": {"photo": base64.b64encode(png).decode(), "extra": ["YQ==", "Yg=="], "caption": "hi"}},
        "",
    )
    boundary = built.headers["Content-Type"].split("boundary=")[1]
    expected = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="photo"; filename="photo"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        + png
        + b"\r\n"
    )
    for data in (b"a", b"b"):
        expected += (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="extra"; filename="extra"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
            + data
            + b"\r\n"
        )
    expected += f'--{boundary}\r\nContent-Disposition: form-data; name="caption"\r\n\r\nhi\r\n'.encode()
    assert built.body == expected + f"--{boundary}--\r\n".encode()
    for bad, said in (("not base64!", "is not valid base64"), (7, "must be a base64 string")):
        with pytest.raises(BadArguments, match=f"file field 'photo' {said}"):
            build_request(plan, {"body": {"photo": bad}}, "")

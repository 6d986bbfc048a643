"""``servers.<id>.openapi``: the server kind, its selection and what it may not be combined with."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config.openapi import OpenApiSelection
from tests.config.test_model import build, error_of


def openapi(**fields: Any) -> dict[str, Any]:
    return {"servers": {"api": {"openapi": {"document": "api.yaml"}, **fields}}}


def test_an_openapi_server_needs_no_url_and_trusts_its_own_http_hints() -> None:
    server = build(openapi()).servers["api"]
    assert server.kind == "openapi"
    assert server.url is None
    assert server.trusted is True
    assert server.prefix == "api"
    assert build(openapi(trusted=False)).servers["api"].trusted is False


def test_a_selection_reads_methods_in_any_case_and_path_patterns() -> None:
    selection = OpenApiSelection.model_validate({"methods": ["get", "Post"], "paths": ["/pets/*", "/**"]})
    assert selection.methods == ("GET", "POST")
    assert not selection.empty
    assert OpenApiSelection().empty


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"command": "x"}, "give either 'command' or 'openapi'"),
        ({"env": {"A": "b"}}, "only applies to command servers"),
        ({"transport": "sse"}, "does not apply to an 'openapi' server"),
        ({"era": "stateless"}, "answered in the handshake era"),
        ({"credentials": {"mode": "exchange", "client_id": "c", "client_secret": "s"}}, "the API's base URL"),
        ({"openapi": {"document": "a.yaml", "include": {"paths": ["no-slash"]}}}, "path patterns"),
        ({"openapi": {"document": "a.yaml", "include": {"methods": ["FETCH"]}}}, "FETCH"),
        ({"openapi": {"document": ""}}, "document"),
    ],
)
def test_what_an_openapi_server_may_not_be(fields: dict[str, Any], said: str) -> None:
    assert said in error_of(openapi(**fields))


def test_per_user_credentials_with_a_base_url_are_accepted() -> None:
    data = openapi(
        url="https://api.example.com/v1", credentials={"mode": "secret", "template": "Bearer {secret}"}
    )
    data["credentials"] = {"store": "env"}
    server = build(data).servers["api"]
    assert server.session_mode == "per_client"
    assert server.url == "https://api.example.com/v1"


@pytest.mark.parametrize(
    ("prefix", "said"),
    [
        ("ftp://host/x", "http(s) URL prefixes with a host"),
        ("https:///x", "http(s) URL prefixes with a host"),
        ("/relative", "http(s) URL prefixes with a host"),
        ("https://user:pw@host/x", "no credentials, query or fragment"),
        ("https://host/x?y=1", "no credentials, query or fragment"),
    ],
)
def test_remote_ref_prefixes_must_be_plain_http_urls(prefix: str, said: str) -> None:
    source = {"document": "api.yaml", "allow_remote_refs": [prefix]}
    assert said in error_of({"servers": {"api": {"openapi": source}}})
    fine = {"document": "api.yaml", "allow_remote_refs": ["https://schemas.example.com/pets/"]}
    assert build({"servers": {"api": {"openapi": fine}}}).servers["api"].openapi is not None

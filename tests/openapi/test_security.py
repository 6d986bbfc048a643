"""The credential placed where the document's security scheme says."""

from __future__ import annotations

import pytest

from proxy.openapi.schemas import DocumentProblem
from proxy.openapi.security import Placement, place, scheme_of
from tests.openapi.documents import document

SCHEMES = {
    "key_query": {"type": "apiKey", "in": "query", "name": "api_key"},
    "key_cookie": {"type": "apiKey", "in": "cookie", "name": "sid"},
    "key_header": {"type": "apiKey", "in": "header", "name": "X-Key"},
    "bearer": {"type": "http", "scheme": "bearer"},
}
DOC = document({}, components={"securitySchemes": SCHEMES})


def test_a_query_or_cookie_key_leaves_the_headers() -> None:
    headers = {"Api_Key": "s e/cret", "Other": "1"}
    assert place(scheme_of(DOC, "key_query"), headers) == Placement(
        {"Other": "1"}, query=("api_key=s%20e%2Fcret",)
    )
    assert place(scheme_of(DOC, "key_cookie"), {"sid": "v"}) == Placement({}, cookies=("sid=v",))


@pytest.mark.parametrize("scheme", ["key_header", "bearer"])
def test_header_schemes_keep_the_headers(scheme: str) -> None:
    headers = {"Authorization": "Bearer t", "X-Key": "k"}
    assert place(scheme_of(DOC, scheme), headers) == Placement(headers)


def test_the_only_scheme_is_used_when_none_is_named_and_an_unknown_name_is_refused() -> None:
    only = document({}, components={"securitySchemes": {"k": SCHEMES["key_query"]}})
    assert scheme_of(only, None) == SCHEMES["key_query"]
    assert scheme_of(DOC, None) is None
    with pytest.raises(DocumentProblem, match="'nope' is not in the document's securitySchemes"):
        scheme_of(DOC, "nope")

"""A document's bytes to its data (bounded, OpenAPI 3 only), and the selection of operations."""

from __future__ import annotations

import json

import pytest
import yaml

from proxy.config.openapi import OpenApiSelection
from proxy.openapi.document import MAX_NESTING, operations, parse, selected
from proxy.openapi.schemas import DocumentProblem
from tests.openapi.documents import PETS


def test_json_and_yaml_read_alike() -> None:
    assert parse(json.dumps(PETS).encode(), where="d") == PETS
    assert parse(yaml.safe_dump(PETS).encode(), where="d") == PETS


def test_swagger_2_is_refused_with_a_way_out() -> None:
    with pytest.raises(DocumentProblem, match=r"Swagger 2\.0 is not served; convert it to OpenAPI 3"):
        parse(b'{"swagger": "2.0", "paths": {}}', where="d")


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"[1, 2]", "not an object"),
        (b"{not json", "not JSON or YAML"),
        (b'{"openapi": "4.0.0", "paths": {}}', "3.0.x or 3.1.x"),
        (b'{"openapi": "3.1.0", "paths": []}', "'paths' is not an object"),
    ],
)
def test_what_is_not_an_openapi_3_document_is_refused(data: bytes, said: str) -> None:
    with pytest.raises(DocumentProblem, match=said):
        parse(data, where="d")


def test_yaml_aliases_are_refused_before_they_expand() -> None:
    bomb = b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b]\n"
    with pytest.raises(DocumentProblem, match="aliases are not accepted"):
        parse(bomb, where="d")


def test_nesting_past_the_bound_is_refused() -> None:
    deep = (
        b'{"openapi": "3.1.0", "paths": {}, "x": '
        + b"[" * (MAX_NESTING + 5)
        + b"]" * (MAX_NESTING + 5)
        + b"}"
    )
    with pytest.raises(DocumentProblem, match="nested deeper"):
        parse(deep, where="d")


def test_operations_come_in_document_order() -> None:
    found = [(op.method, op.path) for op in operations(PETS)]
    assert found == [
        ("get", "/pets"),
        ("post", "/pets"),
        ("get", "/pets/{petId}"),
        ("put", "/pets/{petId}"),
        ("delete", "/pets/{petId}"),
    ]


def chosen(include: OpenApiSelection, exclude: OpenApiSelection | None = None) -> list[str]:
    return [
        f"{op.method} {op.path}"
        for op in operations(PETS)
        if selected(include, exclude or OpenApiSelection(), op, op.operation_id or "")
    ]


def test_include_needs_every_criterion_and_exclude_any() -> None:
    assert chosen(OpenApiSelection(tags=("pets",), methods=("GET",))) == ["get /pets", "get /pets/{petId}"]
    assert chosen(OpenApiSelection(paths=("/pets/*",)), OpenApiSelection(methods=("DELETE",))) == [
        "get /pets/{petId}",
        "put /pets/{petId}",
    ]
    assert chosen(OpenApiSelection(), OpenApiSelection(operations=("listPets",), tags=("admin",))) == [
        "post /pets",
        "get /pets/{petId}",
        "put /pets/{petId}",
    ]


def test_a_path_star_stays_in_a_segment_and_a_double_star_does_not() -> None:
    assert chosen(OpenApiSelection(paths=("/*",))) == ["get /pets", "post /pets"]
    assert len(chosen(OpenApiSelection(paths=("/**",)))) == 5

"""``manifold check``'s look at a document: the OpenAPI schema's problems, each listed, and
Manifold's own refusals."""

from __future__ import annotations

import copy

from proxy.config.openapi import OpenApiSelection, OpenApiSource
from proxy.openapi.validation import problems
from tests.openapi.documents import PETS

SOURCE = OpenApiSource(document="pets.yaml")


def test_a_valid_document_has_no_problems() -> None:
    assert problems(PETS, SOURCE) == []


def test_every_schema_problem_is_listed_with_where_it_is() -> None:
    doc = copy.deepcopy(PETS)
    del doc["paths"]["/pets"]["get"]["responses"]["200"]["description"]
    doc["paths"]["/pets"]["get"]["parameters"][0]["in"] = "nowhere"
    found = problems(doc, SOURCE)
    assert "paths./pets.get.responses.200: 'description' is a required property" in found
    assert any(p.startswith("paths./pets.get.parameters.0.in: 'nowhere' is not one of") for p in found)
    assert any(p.startswith("GET /pets is not served") for p in found)


def test_remote_references_are_listed_and_never_fetched() -> None:
    doc = copy.deepcopy(PETS)
    doc["paths"]["/pets"]["get"]["parameters"][0] = {"$ref": "http://127.0.0.1:9/never"}
    found = problems(doc, SOURCE)
    assert found[0] == "paths./pets.get.parameters.0: $ref 'http://127.0.0.1:9/never' is remote (refused)"


def test_an_empty_selection_and_an_unknown_scheme_are_problems() -> None:
    source = OpenApiSource(document="p", include=OpenApiSelection(tags=("none",)), security_scheme="k")
    assert problems(PETS, source) == [
        "no operation is selected (see include and exclude)",
        "security_scheme 'k' is not in the document's securitySchemes (none)",
    ]

"""Remote $refs an operator allowed: which URLs are allowed, which documents a document names,
and the bundle the resolver reads as one document."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config.openapi import OpenApiSelection
from proxy.openapi.remote import BUNDLED, allowed, bundle, remote_documents
from proxy.openapi.tools import plan_tools
from tests.openapi.documents import document

ALL = OpenApiSelection()
PREFIXES = ("https://schemas.example.com/pets/", "http://127.0.0.1:8080/shared")


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://schemas.example.com/pets/pet.yaml", True),
        ("https://SCHEMAS.example.com/pets/a/b.json", True),
        ("http://127.0.0.1:8080/shared", True),
        ("http://127.0.0.1:8080/shared/x.json", True),
        ("http://127.0.0.1:8080/shared-evil/x.json", False),  # not at a segment boundary
        ("http://127.0.0.1:8081/shared/x.json", False),  # another port is another origin
        ("http://schemas.example.com/pets/pet.yaml", False),  # another scheme
        ("https://schemas.example.com.evil/pets/pet.yaml", False),
        ("https://user@schemas.example.com/pets/pet.yaml", False),  # credentials in the URL
        ("https://schemas.example.com/other/pet.yaml", False),
    ],
)
def test_a_url_is_allowed_only_under_a_prefix(url: str, ok: bool) -> None:
    assert allowed(url, PREFIXES) is ok


def test_remote_documents_are_named_once_and_resolved_against_their_document() -> None:
    node = {
        "a": {"$ref": "pet.yaml#/Pet"},
        "b": [{"$ref": "./pet.yaml#/Other"}, {"$ref": "#/local"}],
        "c": {"$ref": "https://elsewhere.example/x.json"},
        "d": {"$ref": "file:///etc/passwd"},
    }
    found = remote_documents(node, "https://schemas.example.com/pets/api.yaml")
    assert sorted(found) == ["https://elsewhere.example/x.json", "https://schemas.example.com/pets/pet.yaml"]
    # A document read from a file has no URL: only absolute http(s) references name documents.
    assert remote_documents(node, None) == ["https://elsewhere.example/x.json"]


def _operation(schema: dict[str, Any]) -> dict[str, Any]:
    content = {"application/json": {"schema": schema}}
    return {"post": {"operationId": "make", "requestBody": {"content": content}}}


def test_a_bundle_resolves_remote_schemas_their_own_refs_and_back_references() -> None:
    here = "https://schemas.example.com/pets/api.json"
    pet_url = "https://schemas.example.com/pets/pet.json"
    main = document(
        {"/pets": _operation({"$ref": "pet.json#/Pet"})},
        components={"schemas": {"Owner": {"type": "string", "format": "email"}}},
    )
    refs = {
        "id": "#/Id",
        "owner": "api.json#/components/schemas/Owner",
        "elsewhere": "https://evil.example/x.json#/X",
    }
    pet: dict[str, Any] = {
        "Pet": {"type": "object", "properties": {name: {"$ref": ref} for name, ref in refs.items()}},
        "Id": {"type": "integer"},
    }
    bundled = bundle(main, here, {pet_url: pet})
    assert bundled[BUNDLED][0]["Pet"]["properties"]["id"] == {"$ref": f"#/{BUNDLED}/0/Id"}
    assert main["paths"]["/pets"]["post"]["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "pet.json#/Pet"
    }  # the document given is not changed
    plans, skipped = plan_tools(bundled, ALL, ALL, max_operations=10)
    # The reference that is not allowed stays remote: the operation is refused as before.
    assert [s.reason for s in skipped] == [
        "$ref 'https://evil.example/x.json#/X' is not within the document (remote references are refused)"
    ]
    del pet["Pet"]["properties"]["elsewhere"]
    plans, skipped = plan_tools(bundle(main, here, {pet_url: pet}), ALL, ALL, max_operations=10)
    assert skipped == []
    schema = plans[0].tool["inputSchema"]["properties"]["body"]
    assert schema["properties"] == {"id": {"type": "integer"}, "owner": {"type": "string", "format": "email"}}


def test_a_recursive_remote_schema_is_cut_as_a_local_one_is() -> None:
    url = "https://schemas.example.com/pets/tree.json"
    tree = {"Node": {"type": "object", "properties": {"child": {"$ref": "#/Node"}}}}
    main = document({"/t": _operation({"$ref": f"{url}#/Node"})})
    plans, skipped = plan_tools(bundle(main, None, {url: tree}), ALL, ALL, max_operations=10)
    assert skipped == []
    child = plans[0].tool["inputSchema"]["properties"]["body"]["properties"]["child"]
    assert child["description"] == "(recursive: Node)"

"""Operations to tools: names valid and unique, arguments from every parameter location and
the body, output schemas, hints from HTTP semantics, bad operations skipped one by one."""

from __future__ import annotations

import copy
import re
from typing import Any

import jsonschema
import pytest

from proxy.config.openapi import OpenApiSelection
from proxy.openapi.schemas import DocumentProblem
from proxy.openapi.tools import MAX_NAME, OPERATION_KEY, ToolPlan, plan_tools
from tests.openapi.documents import PETS, document

ALL = OpenApiSelection()


def tools(doc: dict[str, Any], **options: Any) -> dict[str, ToolPlan]:
    plans, skipped = plan_tools(doc, ALL, ALL, max_operations=options.pop("max_operations", 100), **options)
    assert skipped == []
    return {plan.tool["name"]: plan for plan in plans}


def test_names_from_operation_ids_or_method_and_path() -> None:
    assert list(tools(PETS)) == ["listPets", "createPet", "getPet", "putPet", "delete_pets_petId"]


def test_each_tool_says_its_operation() -> None:
    found = {name: plan.tool["_meta"][OPERATION_KEY] for name, plan in tools(PETS).items()}
    assert found["delete_pets_petId"] == "DELETE /pets/{petId}"
    assert tools(PETS)["getPet"].tool["description"] == "GET /pets/{petId}"


def test_every_schema_is_valid_json_schema_with_references_inlined() -> None:
    for plan in tools(PETS).values():
        jsonschema.Draft202012Validator.check_schema(plan.tool["inputSchema"])
        assert "$ref" not in str(plan.tool)
    create = tools(PETS)["createPet"].tool
    assert create["inputSchema"]["required"] == ["body"]
    assert create["inputSchema"]["properties"]["body"]["properties"]["name"] == {"type": "string"}
    assert create["outputSchema"]["allOf"][1]["properties"]["id"]["format"] == "int64"


def test_a_list_answer_is_wrapped_in_an_object_schema() -> None:
    plan = tools(PETS)["listPets"]
    assert plan.tool["outputSchema"]["properties"]["result"]["type"] == "array"
    assert plan.call.wraps_output


def test_path_item_parameters_are_arguments_and_required() -> None:
    get = tools(PETS)["getPet"].tool
    assert get["inputSchema"] == {
        "type": "object",
        "properties": {"petId": {"type": "integer"}},
        "required": ["petId"],
    }
    assert "outputSchema" not in get


@pytest.mark.parametrize(
    ("method", "read_only", "destructive", "idempotent"),
    [
        ("get", True, False, True),
        ("put", False, False, True),
        ("delete", False, True, True),
        ("post", False, False, False),
    ],
)
def test_hints_follow_http_semantics(
    method: str, read_only: bool, destructive: bool, idempotent: bool
) -> None:
    doc = document({"/x": {method: {"operationId": "op", "responses": {}}}})
    hints = tools(doc)["op"].tool["annotations"]
    assert hints == {
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": idempotent,
        "openWorldHint": True,
    }


def test_extension_hints_count_only_when_trusted() -> None:
    op = {
        "operationId": "op",
        "x-mcp-annotations": {"readOnlyHint": True, "destructiveHint": False, "other": 1},
    }
    doc = document({"/x": {"delete": op}})
    assert tools(doc)["op"].tool["annotations"]["destructiveHint"] is True
    trusted = tools(doc, trust_extensions=True)["op"].tool["annotations"]
    assert trusted["readOnlyHint"] is True
    assert trusted["destructiveHint"] is False
    assert "other" not in trusted


def test_names_that_collide_after_sanitising_are_made_unique_deterministically() -> None:
    doc = document(
        {
            "/a": {"get": {"operationId": "get thing"}},
            "/b": {"get": {"operationId": "get/thing"}},
            "/c": {"get": {"operationId": "get_thing"}},
        }
    )
    names = list(tools(doc))
    assert names[0] == "get_thing"
    assert len(set(names)) == 3
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", n) for n in names)
    assert names == list(tools(copy.deepcopy(doc)))


def test_a_long_or_empty_name_is_made_valid() -> None:
    doc = document({"/a": {"get": {"operationId": "x" * 500}}, "/b": {"get": {"operationId": "!!!"}}})
    names = list(tools(doc))
    assert len(names[0]) == MAX_NAME
    assert names[1] == "operation"


def test_parameters_named_alike_in_two_places_or_like_the_body_are_qualified() -> None:
    doc = document(
        {
            "/items/{id}": {
                "post": {
                    "operationId": "op",
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                        {"name": "id", "in": "query", "schema": {"type": "string"}},
                        {"name": "body", "in": "header", "schema": {"type": "string"}},
                        {"name": "_meta", "in": "cookie", "schema": {"type": "string"}},
                        {"name": "Authorization", "in": "header", "schema": {"type": "string"}},
                        {"name": "Host", "in": "header", "schema": {"type": "string"}},
                        {"name": "Transfer-Encoding", "in": "header", "schema": {"type": "string"}},
                    ],
                    "requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}},
                }
            }
        }
    )
    properties = tools(doc)["op"].tool["inputSchema"]["properties"]
    assert set(properties) == {"id", "query_id", "header_body", "_meta", "body"}


def test_a_parameter_extension_never_reaches_the_schema() -> None:
    param = {"name": "q", "in": "query", "schema": {"type": "string", "x-mcp-header": "Evil"}}
    doc = document({"/x": {"get": {"operationId": "op", "parameters": [param]}}})
    assert tools(doc)["op"].tool["inputSchema"]["properties"]["q"] == {"type": "string"}


def test_a_bad_operation_is_skipped_with_its_reason_and_the_rest_served() -> None:
    doc = document(
        {
            "/bad": {"get": {"operationId": "bad", "parameters": [{"$ref": "https://evil.example/p.json"}]}},
            "/good": {"get": {"operationId": "good"}},
        }
    )
    plans, skipped = plan_tools(doc, ALL, ALL, max_operations=10)
    assert [p.tool["name"] for p in plans] == ["good"]
    assert skipped[0].operation == "GET /bad"
    assert "remote references are refused" in skipped[0].reason


def test_more_operations_than_allowed_are_refused() -> None:
    with pytest.raises(DocumentProblem, match="5 operations are selected; at most 2"):
        plan_tools(PETS, ALL, ALL, max_operations=2)


def test_an_operation_whose_path_names_an_undeclared_parameter_is_skipped() -> None:
    doc = document({"/items/{id}": {"get": {"operationId": "op"}}})
    plans, skipped = plan_tools(doc, ALL, ALL, max_operations=10)
    assert plans == []
    assert skipped[0].reason == "path parameter 'id' is in the path but not declared"


def test_a_multipart_bodys_file_fields_become_base64_strings_with_their_media_types() -> None:
    body = {
        "type": "object",
        "properties": {
            "photo": {"type": "string", "contentMediaType": "image/png", "title": "Photo"},
            "scan": {"type": "string", "format": "binary"},
            "extra": {"type": "array", "items": {"type": "string", "format": "binary"}},
            "caption": {"type": "string"},
            "sneaky": {"type": "string", "format": "binary"},
        },
    }
    encoding = {"scan": {"contentType": "application/pdf, image/*"}, "sneaky": {"contentType": "a/b\r\nX: y"}}
    doc = document(
        {
            "/up": {
                "post": {
                    "operationId": "up",
                    "requestBody": {
                        "content": {"multipart/form-data": {"schema": body, "encoding": encoding}}
                    },
                }
            }
        }
    )
    plan = tools(doc)["up"]
    assert plan.call.body is not None
    assert dict(plan.call.body.files) == {
        "photo": "image/png",
        "scan": "application/pdf",
        "extra": "application/octet-stream",
        "sneaky": "application/octet-stream",  # not a media type: it would be a header of its own
    }
    properties = plan.tool["inputSchema"]["properties"]["body"]["properties"]
    assert properties["photo"]["contentEncoding"] == "base64"
    assert properties["photo"]["title"] == "Photo"
    assert properties["extra"]["items"]["contentEncoding"] == "base64"
    assert properties["caption"] == {"type": "string"}
    jsonschema.Draft202012Validator.check_schema(plan.tool["inputSchema"])

"""Small OpenAPI documents for the pure core's tests."""

from __future__ import annotations

from typing import Any


def document(paths: dict[str, Any], *, version: str = "3.1.0", **extra: Any) -> dict[str, Any]:
    return {"openapi": version, "info": {"title": "t", "version": "1"}, "paths": paths, **extra}


PETS: dict[str, Any] = document(
    {
        "/pets": {
            "get": {
                "operationId": "listPets",
                "tags": ["pets"],
                "summary": "List pets",
                "parameters": [
                    {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                    {"name": "tag", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
                ],
                "responses": {
                    "200": {
                        "description": "ok",
                        "content": {
                            "application/json": {
                                "schema": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}}
                            }
                        },
                    }
                },
            },
            "post": {
                "operationId": "createPet",
                "tags": ["pets"],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewPet"}}},
                },
                "responses": {
                    "201": {
                        "description": "created",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}},
                    }
                },
            },
        },
        "/pets/{petId}": {
            "parameters": [{"name": "petId", "in": "path", "required": True, "schema": {"type": "integer"}}],
            "get": {"operationId": "getPet", "tags": ["pets"], "responses": {"200": {"description": "ok"}}},
            "delete": {"tags": ["admin"], "responses": {"204": {"description": "gone"}}},
            "put": {"operationId": "putPet", "responses": {"200": {"description": "ok"}}},
        },
    },
    components={
        "schemas": {
            "NewPet": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "tag": {"type": "string", "x-internal": True}},
            },
            "Pet": {
                "allOf": [
                    {"$ref": "#/components/schemas/NewPet"},
                    {"type": "object", "properties": {"id": {"type": "integer", "format": "int64"}}},
                ]
            },
        }
    },
)

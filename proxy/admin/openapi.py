"""The admin API's OpenAPI 3.1 document (served at ``/admin/api/openapi.json``). Its request
body schemas are also what :mod:`proxy.admin.routes` checks bodies against, and the tests check
every real response against its response schemas: the document cannot drift from the API.
"""

from __future__ import annotations

from typing import Any, Final

from proxy import __version__

__all__ = ["BODIES", "document"]


def _obj(
    properties: dict[str, Any], required: tuple[str, ...] = (), *, closed: bool = True
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "required": list(required)}
    if closed:
        schema["additionalProperties"] = False
    return schema


_S: Final = {"type": "string"}
_NS: Final = {"type": ["string", "null"]}
_N: Final = {"type": "number"}
_NN: Final = {"type": ["number", "null"]}
_I: Final = {"type": "integer"}
_B: Final = {"type": "boolean"}
_STRS: Final = {"type": "array", "items": _S}
_ANY: Final[dict[str, Any]] = {}
_WHO: Final = _obj({"name": _S, "roles": _STRS, "source": _S}, ("name", "roles", "source"))

# Request bodies: each closed (an unknown field is named in the 400).
BODIES: Final[dict[str, dict[str, Any]]] = {
    "ToolOff": _obj(
        {
            "tool": {"type": "string", "minLength": 1, "maxLength": 1024},
            "role": {"type": ["string", "null"], "minLength": 1, "maxLength": 256},
            "minutes": {"type": "number", "exclusiveMinimum": 0},
            "reason": {"type": "string", "maxLength": 1000},
        },
        ("tool", "minutes"),
    ),
    "ToolOn": _obj(
        {"tool": {"type": "string", "minLength": 1, "maxLength": 1024}, "role": {"type": ["string", "null"]}},
        ("tool",),
    ),
    "Revoke": _obj(
        {
            "server": {"type": "string", "minLength": 1},
            "kind": {"type": "string", "minLength": 1},
            "holder": _obj({"source": _S, "issuer": _S, "subject": _S}, ("source", "issuer", "subject")),
        },
        ("server", "kind", "holder"),
    ),
    "PinsAccept": _obj({"tools": {"type": ["array", "null"], "items": _S, "maxItems": 10000}}),
    "Reload": _obj({"config": {"type": ["string", "null"], "maxLength": 4 * 1024 * 1024}}),
    "Empty": _obj({}),
}

_CALLS: Final = _obj(
    {
        "window_seconds": _I,
        "calls": _I,
        "errors": _I,
        "per_second": _N,
        "error_rate": _N,
        "p50_ms": _NN,
        "p99_ms": _NN,
        "series": {"type": "array", "items": _I},
    },
    ("calls", "errors", "per_second", "error_rate", "p50_ms", "p99_ms", "series"),
)
_SERVER: Final = _obj(
    {
        "id": _S,
        "kind": _S,
        "state": {"enum": ["starting", "ready", "failing", "backoff"]},
        "required": _B,
        "session_mode": _S,
        "drained": _B,
        "restarts": _I,
        "in_flight": _I,
        "last_error": _NS,
        "stderr_tail": _STRS,
        "protocol_version": _NS,
        "server_info": {"type": "object"},
        "lists": {"type": "object", "additionalProperties": _I},
        "capped": {"type": "object", "additionalProperties": _I},
        "calls": _CALLS,
    },
    ("id", "state", "required", "drained", "restarts", "last_error", "stderr_tail", "lists", "calls"),
)
_OVERLAY: Final = _obj(
    {"id": _S, "tool": _S, "role": _NS, "until": _N, "by": _S, "at": _N, "reason": _S, "description": _S},
    ("id", "tool", "role", "until", "by", "at"),
)
_REPLICA: Final = _obj({"replica": _S, "acted": _B, "problem": _S}, ("replica", "acted"))
_ACTED: Final = _obj(
    {"replicas": {"type": "array", "items": _REPLICA}, "unanswered": _I, "problem": _S},
    ("replicas", "unanswered"),
)
_PLAN: Final = _obj(
    {
        **dict.fromkeys(("add", "remove", "restart", "endpoints_added", "endpoints_removed"), _STRS),
        **dict.fromkeys(("endpoints_changed", "needs_restart", "held_back"), _STRS),
        "changes_anything": _B,
        "description": _S,
    },
    ("add", "remove", "restart", "needs_restart", "changes_anything", "description"),
)
_ERROR: Final = _obj({"error": _S, "message": _S}, ("error", "message"))

RESPONSES: Final[dict[str, dict[str, Any]]] = {
    "Error": _ERROR,
    "Server": _SERVER,
    "Servers": {"type": "array", "items": _SERVER},
    "Everywhere": _obj(
        {
            "replicas": {
                "type": "array",
                "items": _obj({"replica": _S, "acted": _B, "problem": _S}, ("replica",), closed=False),
            },
            "unanswered": _I,
            "problem": _S,
        },
        ("replicas", "unanswered"),
    ),
    "Endpoints": {
        "type": "array",
        "items": _obj(
            {"name": _S, "path": _S, "servers": _ANY, "tools": _ANY, "roles": _ANY}, ("name", "path")
        ),
    },
    "Catalog": _obj(
        {
            "identity": _WHO,
            "tools": {
                "type": "array",
                "items": _obj(
                    {
                        "name": _S,
                        "server": _NS,
                        "original_name": _NS,
                        "renamed": _B,
                        "description": _ANY,
                        "annotations": {"type": ["object", "null"]},
                        "switched_off": _NS,
                    },
                    ("name", "server", "original_name", "annotations", "switched_off"),
                ),
            },
            "prompts": {"type": "array", "items": {"type": "object"}},
            "resources": _I,
        },
        ("identity", "tools", "prompts", "resources"),
    ),
    "Explain": _obj(
        {
            "identity": _WHO,
            "subject": {"type": "object"},
            "effect": {"enum": ["allow", "deny", "confirm"]},
            "policy_effect": {"enum": ["allow", "deny", "confirm"]},
            "enforced": {"enum": ["allow", "deny", "confirm"]},
            "rules": _STRS,
            "reason": _S,
            "overlay": {"oneOf": [{"type": "null"}, _OVERLAY]},
            "annotations": {"type": ["object", "null"]},
            "blocked_by_pin_drift": _B,
            "quarantined": _B,
        },
        ("identity", "subject", "effect", "policy_effect", "rules", "reason", "overlay"),
    ),
    "Policy": _obj(
        {
            "files": _STRS,
            "dry_run": _B,
            "rules": {
                "type": "array",
                "items": _obj(
                    {"file": _S, "line": {"type": ["integer", "null"]}}, ("file", "line"), closed=False
                ),
            },
            "overlays": {"type": "array", "items": _OVERLAY},
        },
        ("files", "rules", "overlays"),
    ),
    "Overlay": _OVERLAY,
    "Overlays": {"type": "array", "items": _OVERLAY},
    "Removed": _obj({"removed": {"type": "array", "items": _OVERLAY}}, ("removed",)),
    "Sessions": {
        "type": "array",
        "items": _obj(
            {
                "id": {"type": "string", "maxLength": 12},
                "identity": _WHO,
                "transport": _S,
                "endpoint": _S,
                "protocol_version": _NS,
                "client": {"type": "object"},
                "idle_seconds": _NN,
                "in_flight": _I,
            },
            ("id", "identity", "transport", "in_flight"),
        ),
    },
    "Approvals": _obj(
        {"parked": _I, "approvals": {"type": "array", "items": {"type": "object"}}}, ("parked", "approvals")
    ),
    "Credentials": {
        "type": "array",
        "items": _obj(
            {"server": _S, "kind": _S, "holder": _obj({"source": _S, "issuer": _S, "subject": _S})},
            ("server", "kind", "holder"),
        ),
    },
    "Revoked": _obj(
        {"revoked": _B, "at_issuer": _obj({"revoked": _B, "problem": _S, "note": _S}, ("revoked",))},
        ("revoked",),
    ),
    "Buckets": _obj(
        {"backend": _NS, "buckets": {"type": "array", "items": {"type": "object"}}}, ("backend", "buckets")
    ),
    "Refusals": {"type": "array", "items": _obj({"at": _N, "limit": _S}, ("at", "limit"))},
    "Audit": {"type": "array", "items": {"type": "object"}},
    "Acted": _ACTED,
    "Accepted": _obj({"accepted": _STRS}, ("accepted",)),
    "Plan": _PLAN,
    "Applied": _obj(
        {"outcome": {"enum": ["applied", "unchanged", "refused"]}, "plan": _PLAN}, ("outcome", "plan")
    ),
    "OpenAPI": {"type": "object"},
}


def document(routes: list[tuple[str, str, str, str | None, str]]) -> dict[str, Any]:
    """The document for ``routes``: (method, path, response schema, request body schema, summary)."""
    paths: dict[str, dict[str, Any]] = {}
    ref = "#/components/schemas/"
    errors = {
        str(code): {"description": what, "content": {"application/json": {"schema": {"$ref": ref + "Error"}}}}
        for code, what in (
            (400, "a bad body or query, named"),
            (401, "no credential, or one that proves nothing"),
            (403, "not an admin identity (the same body on every route)"),
            (404, "no such thing"),
            (429, "too many requests (Retry-After)"),
        )
    }
    for method, path, response, body, summary in routes:
        parameters = [
            {"name": name[1:-1], "in": "path", "required": True, "schema": _S}
            for name in path.split("/")
            if name.startswith("{")
        ]
        operation: dict[str, Any] = {
            "summary": summary,
            "operationId": f"{method}_{path}".replace("/", "_").replace("{", "").replace("}", ""),
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {"application/json": {"schema": {"$ref": ref + response}}},
                },
                **errors,
            },
        }
        if parameters:
            operation["parameters"] = parameters
        if body is not None:
            operation["requestBody"] = {
                "required": body not in ("Empty", "Reload", "PinsAccept"),
                "content": {"application/json": {"schema": {"$ref": ref + body}}},
            }
        paths.setdefault(path, {})[method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "Manifold admin API", "version": __version__},
        "components": {
            "schemas": {**RESPONSES, **BODIES},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            },
        },
        "security": [{"bearer": []}, {"apiKey": []}],
        "paths": paths,
    }

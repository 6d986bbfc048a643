"""The admin API's routes, in memory over a gateway that is built but not running: who gets in
(403 with the same body on every path for a non-admin), bodies checked and unknown fields named,
floods refused, every answer valid against the OpenAPI document, and no secret in any answer."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from proxy.admin.routes import FORBIDDEN, MAX_BODY, PREFIX, AdminApi
from proxy.admin.service import Admin
from proxy.app.gateway import Gateway
from proxy.config.loading import config_from_mapping
from proxy.enforce.confirm.approvals import Approval
from proxy.inbound.streamable_http import OriginPolicy
from proxy.ratelimit import LimitCheck, MemoryBackend
from tests.admin.asgi import request

pytestmark = pytest.mark.anyio

ADMIN_KEY = "admin-key-0123456789abcdef"
USER_KEY = "user-key-0123456789abcdef"
SERVER_SECRET = "server-env-secret-9f8e7d6c5b4a"
HEADER_SECRET = "header-secret-1a2b3c4d5e6f"


LIMITS = "limits:\n  - {id: per-user, rate: 1/minute, burst: 10, per: [identity]}\n"


def stored(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def api(tmp_path: Path, anonymous: dict[str, Any] | None = None, **admin: Any) -> AdminApi:
    (tmp_path / "policy.yaml").write_text(
        LIMITS
        + "version: 1\ndefault: allow\nrules:\n  - {id: no-rm, effect: deny, match: {tools: ['*.rm']}}\n"
    )
    config = config_from_mapping(
        {
            "auth": {
                "api_keys": [
                    {"name": "root", "key": stored(ADMIN_KEY), "roles": ["admin"]},
                    {"name": "user", "key": stored(USER_KEY), "roles": ["staff"]},
                ],
                "anonymous": anonymous or {},
            },
            "policy": {"files": [str(tmp_path / "policy.yaml")]},
            "admin": {"requests": {"rate": "1000/second", "burst": 1000}, **admin},  # the flood test's own
            "servers": {
                "local": {"command": "true", "env": {"TOKEN": SERVER_SECRET}},
                "remote": {
                    "url": "http://127.0.0.1:9/mcp",
                    "headers": {"Authorization": f"Bearer {HEADER_SECRET}"},
                },
            },
        }
    )
    gateway = Gateway(config)
    return AdminApi(Admin(gateway), gateway.auth, OriginPolicy("127.0.0.1", (), ()))


def as_(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def valid(app: AdminApi, schema: str, body: bytes) -> None:
    document = app.openapi
    validator = Draft202012Validator(
        {"$ref": f"#/components/schemas/{schema}", "components": document["components"]}
    )
    problems = [p.message for p in validator.iter_errors(orjson.loads(body))]
    assert problems == [], (schema, problems)


def concrete(path: str) -> str:
    return path.replace("{id}", "local").replace("{what}", "sessions")


async def test_a_non_admin_gets_the_same_403_on_every_path_existing_or_not(tmp_path: Path) -> None:
    app = api(tmp_path)
    paths = [(r.method, PREFIX + concrete(r.path)) for r in app.routes]
    paths += [
        ("GET", f"{PREFIX}/openapi.json"),
        ("GET", f"{PREFIX}/nothing/here"),
        ("DELETE", f"{PREFIX}/servers"),
    ]
    for method, path in paths:
        status, _, body = await request(
            app, method, path, headers=as_(USER_KEY), body=b"{}" if method == "POST" else None
        )
        assert (status, body) == (403, FORBIDDEN), (method, path)
        status, headers, _ = await request(app, method, path)
        assert status == 401, (method, path)
        assert headers["www-authenticate"].startswith("Bearer")


def test_the_document_is_a_valid_openapi_3_1_document(tmp_path: Path) -> None:
    app = api(tmp_path)
    validate(app.openapi)
    assert app.openapi["openapi"] == "3.1.0"
    served = {(m.upper(), p) for p, ops in app.openapi["paths"].items() for m in ops}
    assert served == {(r.method, PREFIX + r.path) for r in app.routes}


async def test_an_anonymous_caller_never_gets_in_whatever_roles_it_is_given(tmp_path: Path) -> None:
    app = api(tmp_path, anonymous={"enabled": True, "roles": ["admin"]})
    status, _, body = await request(app, "GET", f"{PREFIX}/servers")
    assert (status, body) == (403, FORBIDDEN)


async def test_every_read_answers_what_the_openapi_document_says(tmp_path: Path) -> None:
    app = api(tmp_path)
    status, _, body = await request(app, "GET", f"{PREFIX}/openapi.json", headers=as_(ADMIN_KEY))
    assert status == 200
    assert orjson.loads(body)["openapi"] == "3.1.0"
    query = {"/catalog": "identity=ann&role=staff", "/explain": "identity=ann&tool=local.x"}
    for route in (r for r in app.routes if r.method == "GET"):
        status, _, body = await request(
            app, "GET", PREFIX + concrete(route.path), headers=as_(ADMIN_KEY), query=query.get(route.path, "")
        )
        if route.path == "/explain":  # a tool the live catalog does not have (nothing runs here)
            assert status == 404
            assert b"local.x" in body
            valid(app, "Error", body)
            continue
        assert status == 200, (route.path, body)
        valid(app, route.response, body)


async def test_no_answer_carries_a_configured_secret(tmp_path: Path) -> None:
    app = api(tmp_path)
    query = {"/catalog": "identity=ann", "/explain": "identity=ann&tool=local.x"}
    for route in (r for r in app.routes if r.method == "GET"):
        _, _, body = await request(
            app, "GET", PREFIX + concrete(route.path), headers=as_(ADMIN_KEY), query=query.get(route.path, "")
        )
        for secret in (SERVER_SECRET, HEADER_SECRET, ADMIN_KEY, USER_KEY):
            assert secret.encode() not in body, route.path


async def test_bad_bodies_are_refused_naming_the_problem(tmp_path: Path) -> None:
    app = api(tmp_path)
    off = f"{PREFIX}/tools/off"
    cases: list[tuple[bytes | dict[str, Any], str]] = [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "must be a JSON object"),
        ({"tool": "local.x", "minutes": 5, "colour": "red"}, "'colour' was unexpected"),
        ({"tool": "local.x"}, "'minutes' is a required property"),
        ({"tool": "local.x", "minutes": -1}, "minutes"),
    ]
    for body, named in cases:
        status, _, answer = await request(app, "POST", off, headers=as_(ADMIN_KEY), body=body)
        assert status == 400, body
        valid(app, "Error", answer)
        assert named in orjson.loads(answer)["message"], (body, answer)
    # Refused writes are audited too.
    _, _, audit = await request(
        app, "GET", f"{PREFIX}/audit", headers=as_(ADMIN_KEY), query="outcome=refused"
    )
    assert [(e["action"], e["identity"]) for e in orjson.loads(audit)] == [("tools_off", "root")] * len(cases)


async def test_a_body_too_big_or_a_bad_length_is_refused_before_it_is_read(tmp_path: Path) -> None:
    app = api(tmp_path)
    off = f"{PREFIX}/tools/off"
    headers = {**as_(ADMIN_KEY), "content-length": "abc"}
    assert (await request(app, "POST", off, headers=headers))[0] == 400
    headers = {**as_(ADMIN_KEY), "content-length": str(MAX_BODY + 1)}
    assert (await request(app, "POST", off, headers=headers))[0] == 413
    status, _, body = await request(app, "POST", off, headers=as_(ADMIN_KEY), body=b" " * (MAX_BODY + 1))
    assert status == 413
    valid(app, "Error", body)


async def test_switching_a_tool_off_is_shown_audited_and_switched_back_on(tmp_path: Path) -> None:
    app = api(tmp_path)
    body = {"tool": "local.x", "role": "staff", "minutes": 5, "reason": "flaky"}
    status, _, answer = await request(
        app, "POST", f"{PREFIX}/tools/off", headers=as_(ADMIN_KEY), body=body, client="10.1.2.3"
    )
    assert status == 200
    valid(app, "Overlay", answer)
    _, _, listed = await request(app, "GET", f"{PREFIX}/overlays", headers=as_(ADMIN_KEY))
    assert [o["tool"] for o in orjson.loads(listed)] == ["local.x"]
    _, _, audit = await request(app, "GET", f"{PREFIX}/audit", headers=as_(ADMIN_KEY), query="tool=local.x")
    (entry,) = orjson.loads(audit)
    assert (entry["identity"], entry["from"], entry["action"], entry["role"]) == (
        "root",
        "10.1.2.3",
        "tool_off",
        "staff",
    )
    status, _, answer = await request(
        app, "POST", f"{PREFIX}/tools/on", headers=as_(ADMIN_KEY), body={"tool": "local.x"}
    )
    assert status == 200
    assert len(orjson.loads(answer)["removed"]) == 1
    _, _, listed = await request(app, "GET", f"{PREFIX}/overlays", headers=as_(ADMIN_KEY))
    assert orjson.loads(listed) == []


async def test_a_drained_server_takes_no_new_calls_until_undrained(tmp_path: Path) -> None:
    app = api(tmp_path)
    status, _, answer = await request(app, "POST", f"{PREFIX}/servers/local/drain", headers=as_(ADMIN_KEY))
    assert status == 200
    valid(app, "Acted", answer)
    assert [r["acted"] for r in orjson.loads(answer)["replicas"]] == [True]
    _, _, shown = await request(app, "GET", f"{PREFIX}/servers/local", headers=as_(ADMIN_KEY))
    assert orjson.loads(shown)["drained"] is True
    await request(app, "POST", f"{PREFIX}/servers/local/undrain", headers=as_(ADMIN_KEY))
    _, _, shown = await request(app, "GET", f"{PREFIX}/servers/local", headers=as_(ADMIN_KEY))
    assert orjson.loads(shown)["drained"] is False
    status, _, _ = await request(app, "POST", f"{PREFIX}/servers/nobody/drain", headers=as_(ADMIN_KEY))
    assert status == 404


async def test_a_flood_of_requests_is_refused_with_retry_after(tmp_path: Path) -> None:
    app = api(tmp_path, requests={"rate": "1/minute", "burst": 3})
    statuses = [(await request(app, "GET", f"{PREFIX}/servers", headers=as_(USER_KEY)))[0] for _ in range(5)]
    assert statuses == [403, 403, 403, 429, 429]  # counted before the credential is checked
    status, headers, _ = await request(app, "GET", f"{PREFIX}/servers", headers=as_(ADMIN_KEY))
    assert status == 429
    assert int(headers["retry-after"]) >= 1
    # Another address has its own bucket.
    assert (await request(app, "GET", f"{PREFIX}/servers", headers=as_(ADMIN_KEY), client="127.0.0.2"))[
        0
    ] == 200


async def test_writes_are_limited_per_identity(tmp_path: Path) -> None:
    app = api(tmp_path, writes={"rate": "1/minute", "burst": 2})
    body = {"tool": "local.x"}
    statuses = [
        (await request(app, "POST", f"{PREFIX}/tools/on", headers=as_(ADMIN_KEY), body=body))[0]
        for _ in range(3)
    ]
    assert statuses == [200, 200, 429]
    assert (await request(app, "GET", f"{PREFIX}/overlays", headers=as_(ADMIN_KEY)))[0] == 200  # reads go on


async def test_a_foreign_origin_is_refused(tmp_path: Path) -> None:
    app = api(tmp_path)
    headers = {**as_(ADMIN_KEY), "origin": "https://evil.example"}
    assert (await request(app, "GET", f"{PREFIX}/servers", headers=headers))[0] == 403


async def test_buckets_near_their_limit_are_shown_and_others_are_not(tmp_path: Path) -> None:
    app = api(tmp_path)
    limiter = app._admin.gateway.limiter
    assert isinstance(limiter, MemoryBackend)
    for _ in range(9):
        limiter.hit_now([LimitCheck("per-user:ann", 60.0, 10, "per-user")])
    limiter.hit_now([LimitCheck("per-user:bob", 60.0, 10, "per-user")])
    _, _, body = await request(app, "GET", f"{PREFIX}/ratelimits", headers=as_(ADMIN_KEY))
    valid(app, "Buckets", body)
    (bucket,) = orjson.loads(body)["buckets"]
    assert (bucket["bucket"], bucket["burst"], bucket["rate"]) == ("per-user:ann", 10, "1/minute")
    assert 8.9 < bucket["spent"] <= 9.0
    assert orjson.loads(body)["backend"] == "memory"


async def test_approvals_kept_are_listed_with_their_page(tmp_path: Path) -> None:
    app = api(tmp_path)
    approvals = app._admin.gateway.approvals
    fields = {
        "tool": "local.<script>alert(1)</script>",
        "server": "local",
        "caller": "ann",
        "caller_key": ("api_key", "", "ann"),
        "roles": ("lead",),
        "reason": "javascript:alert(1)",
        "summary": "{}",
        "deadline": 4e9,
    }
    kept = await approvals.store.put(Approval.new(**fields))
    status, headers, body = await request(app, "GET", f"{PREFIX}/approvals", headers=as_(ADMIN_KEY))
    assert status == 200
    valid(app, "Approvals", body)
    (shown,) = orjson.loads(body)["approvals"]
    assert (shown["id"], shown["state"], shown["link"]) == (kept.id, "pending", approvals.link(kept.id))
    # Untrusted text is data, sent as JSON that no browser sniffs into markup.
    assert shown["tool"] == fields["tool"]
    assert (headers["content-type"], headers["x-content-type-options"]) == ("application/json", "nosniff")


async def test_the_policy_rules_are_shown_with_their_file_and_line(tmp_path: Path) -> None:
    app = api(tmp_path)
    _, _, body = await request(app, "GET", f"{PREFIX}/policy", headers=as_(ADMIN_KEY))
    valid(app, "Policy", body)
    (rule,) = orjson.loads(body)["rules"]
    assert (rule["id"], rule["effect"], rule["file"], rule["line"]) == (
        "no-rm",
        "deny",
        str(tmp_path / "policy.yaml"),
        6,
    )

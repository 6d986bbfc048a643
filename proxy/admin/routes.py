"""The admin API over HTTP: thin routes under ``/admin/api/`` over :class:`~proxy.admin.service.Admin`.

Every request, in this order: the Host and Origin checks ``/mcp`` has (DNS rebinding); a flood
bound per client address (``admin.requests``, before any credential is checked: a check costs a
hash or a round trip); the credential, checked by the authenticator ``/mcp`` uses (API key, JWT,
OAuth); one of ``admin.roles`` — anybody else gets **403 with the same body on every path**,
existing or not, so a non-admin learns nothing of the API; then the route. A write is also bound
per identity (``admin.writes``) and audited by the service. A body is a JSON object of at most
:data:`MAX_BODY` bytes, checked against the OpenAPI document's schema (an unknown field is
named). :class:`~proxy.admin.service.AdminError` becomes its status and message; anything else
is a 500 with a generic message (the traceback is logged, once).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson
from jsonschema import Draft202012Validator
from starlette.requests import Request
from starlette.responses import Response

from proxy.admin.openapi import BODIES, document
from proxy.admin.service import Actor, Admin, AdminError
from proxy.auth.authenticator import Authenticator, Rejected
from proxy.inbound.asgi import Receive, Scope, Send
from proxy.inbound.streamable_http import OriginPolicy
from proxy.policy import Identity
from proxy.ratelimit import LimitCheck, MemoryBackend

__all__ = ["FORBIDDEN", "MAX_BODY", "PREFIX", "AdminApi"]

logger = logging.getLogger("proxy.admin.routes")

PREFIX: Final = "/admin/api"
MAX_BODY: Final = 4 * 1024 * 1024 + 4096  # a config to plan (4 MiB) and its JSON wrapping
FORBIDDEN: Final = (
    b'{"error":"forbidden","message":"this needs an identity with an admin role (admin.roles)"}'
)
_HEADERS: Final = {"cache-control": "no-store", "x-content-type-options": "nosniff"}
_CREDENTIAL_HEADERS: Final = ("authorization", "x-api-key")
_MAX_QUERY_VALUE: Final = 1024

Handler = Callable[["Call"], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Call:
    """One admitted request: who, from where, its path parameters, query and body."""

    actor: Actor
    params: dict[str, str]
    request: Request
    body: dict[str, Any]

    def query(self, name: str) -> str | None:
        value = self.request.query_params.get(name)
        if value is not None and len(value) > _MAX_QUERY_VALUE:
            raise AdminError(400, f"query parameter {name!r} is longer than {_MAX_QUERY_VALUE} characters")
        return value


@dataclass(frozen=True, slots=True)
class _Route:
    method: str
    path: str  # OpenAPI form: /servers/{id}
    response: str  # its schema's name in the document
    body: str | None  # the request body's schema name; None: no body (a read)
    summary: str
    handler: Handler
    pattern: re.Pattern[str]


def _json(status: int, value: Any, headers: dict[str, str] | None = None) -> Response:
    body = value if isinstance(value, bytes) else orjson.dumps(value)
    return Response(body, status, headers={**_HEADERS, **(headers or {})}, media_type="application/json")


def _error(status: int, error: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return _json(status, {"error": error, "message": message}, headers)


class AdminApi:
    """The ASGI app serving ``/admin/api/...``."""

    def __init__(self, admin: Admin, auth: Authenticator, origins: OriginPolicy) -> None:
        settings = admin.settings
        self._admin = admin
        self._auth = auth
        self._origins = origins
        self._buckets = MemoryBackend(maxsize=10_000)
        self._requests = (settings.requests.rate.interval, settings.requests.burst)
        self._writes = (settings.writes.rate.interval, settings.writes.burst)
        self.routes = _routes(admin)
        self._validators = {name: Draft202012Validator(schema) for name, schema in BODIES.items()}
        self.openapi = document(
            [(r.method, PREFIX + r.path, r.response, r.body, r.summary) for r in self.routes]
        )
        self._openapi_bytes = orjson.dumps(self.openapi)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self._answer(request)
        await response(scope, receive, send)

    def _limited(self, key: str, spec: tuple[float, int]) -> Response | None:
        outcome = self._buckets.hit_now([LimitCheck(key, spec[0], spec[1], "http")])
        if outcome.allowed:
            return None
        wait = str(max(1, math.ceil(outcome.retry_after)))
        return _error(
            429, "too_many_requests", f"too many admin requests; try again in {wait} s", {"retry-after": wait}
        )

    async def _answer(self, request: Request) -> Response:
        headers = request.headers
        if not self._origins.origin_ok(headers.get("origin")) or not self._origins.host_ok(
            headers.get("host")
        ):
            return _error(403, "origin", "Origin or Host not allowed")
        address = request.client.host if request.client is not None else "unknown"
        if (refused := self._limited(f"a:{address}", self._requests)) is not None:
            return refused
        credentials = {
            name: value for name in _CREDENTIAL_HEADERS if (value := headers.get(name)) is not None
        }
        verdict = await self._auth.authenticate(credentials, address)
        if isinstance(verdict, Rejected):
            return _error(verdict.status, "unauthorized", verdict.message, dict(verdict.headers()))
        identity = verdict.identity
        if not self._admin.is_admin(identity):
            return _json(403, FORBIDDEN)
        return await self._route(request, Actor(identity, address))

    async def _route(self, request: Request, actor: Actor) -> Response:
        path = request.url.path
        if not path.startswith(PREFIX):
            return _error(404, "not_found", "no such admin API path")
        rest = path[len(PREFIX) :] or "/"
        if rest == "/openapi.json" and request.method == "GET":
            return _json(200, self._openapi_bytes)
        matched = [(route, m) for route in self.routes if (m := route.pattern.fullmatch(rest)) is not None]
        if not matched:
            return _error(404, "not_found", f"no such admin API path: {rest[:200]}")
        found = next(((route, m) for route, m in matched if route.method == request.method), None)
        if found is None:
            allowed = ", ".join(sorted({route.method for route, _ in matched}))
            return _error(405, "method_not_allowed", f"use {allowed}", {"allow": allowed})
        route, match = found
        try:
            body: dict[str, Any] = {}
            if route.body is not None:
                key = "w:" + "\x1f".join(actor.identity.key)
                if (refused := self._limited(key, self._writes)) is not None:
                    return refused
                body = await self._body(request, route.body)
            result = await route.handler(Call(actor, match.groupdict(), request, body))
        except AdminError as exc:
            if route.body is not None:  # every write is audited, refused ones too
                self._admin.refused(actor, route.path.strip("/").replace("/", "_"), rest[:200], exc.message)
            return _error(exc.status, "refused" if exc.status != 404 else "not_found", exc.message)
        except Exception:  # ours: a generic answer, the traceback in the log once
            logger.exception("admin API %s %s failed", request.method, rest[:200])
            return _error(500, "internal", "the admin API failed; see Manifold's log")
        return _json(200, result)

    async def _body(self, request: Request, schema: str) -> dict[str, Any]:
        """Raises: AdminError: not a JSON object of the route's schema (400), or too big (413)."""
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
            raise AdminError(413 if declared.isdigit() else 400, f"Content-Length must be at most {MAX_BODY}")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                raise AdminError(413, f"the body is larger than {MAX_BODY} bytes")
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw.strip():
            raw = b"{}"
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise AdminError(400, f"the body is not JSON: {exc.msg} at position {exc.pos}") from None
        if not isinstance(body, dict):
            raise AdminError(400, f"the body must be a JSON object (got {type(body).__name__})")
        problems = sorted(self._validators[schema].iter_errors(body), key=lambda e: list(e.absolute_path))
        if problems:
            lines = [f"{'.'.join(map(str, p.absolute_path)) or 'body'}: {p.message}" for p in problems[:10]]
            raise AdminError(400, "bad body: " + "; ".join(lines))
        return body


def _identity(call: Call) -> Identity:
    """The identity to view the catalog or decide as: ``?identity=NAME&role=R&role=S&source=S``."""
    name = call.query("identity")
    if not name:
        raise AdminError(400, "give ?identity=NAME (and ?role=R, repeatable) to view as")
    roles = call.request.query_params.getlist("role")
    if len(roles) > 100 or any(len(r) > _MAX_QUERY_VALUE for r in roles):
        raise AdminError(400, "too many roles, or one too long")
    return Identity(name, frozenset(roles), call.query("source") or "api_key", call.query("issuer") or "")


def _float(call: Call, name: str) -> float | None:
    value = call.query(name)
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise AdminError(400, f"query parameter {name!r} must be a number (got {value[:40]!r})") from None
    if not math.isfinite(number):
        raise AdminError(400, f"query parameter {name!r} must be finite")
    return number


def _routes(admin: Admin) -> list[_Route]:
    """Every route: (method, path, response schema, body schema, summary, handler)."""

    async def servers(_: Call) -> Any:
        return admin.servers()

    async def server(c: Call) -> Any:
        return admin.server(c.params["id"])

    async def restart(c: Call) -> Any:
        return await admin.restart(c.actor, c.params["id"])

    async def drain(c: Call) -> Any:
        return await admin.drain(c.actor, c.params["id"])

    async def undrain(c: Call) -> Any:
        return await admin.drain(c.actor, c.params["id"], on=False)

    async def endpoints(_: Call) -> Any:
        return admin.endpoints()

    async def catalog(c: Call) -> Any:
        return admin.catalog_as(_identity(c))

    async def policy(_: Call) -> Any:
        return await admin.policy()

    async def explain(c: Call) -> Any:
        tool = c.query("tool")
        if not tool:
            raise AdminError(400, "give ?tool=NAME (a namespaced tool name)")
        return admin.explain(_identity(c), tool)

    async def sessions(_: Call) -> Any:
        return admin.sessions()

    async def everywhere(c: Call) -> Any:
        return await admin.everywhere(c.params["what"])

    async def end(c: Call) -> Any:
        return await admin.end_session(c.actor, c.params["id"])

    async def approvals(_: Call) -> Any:
        return await admin.approvals()

    async def credentials(_: Call) -> Any:
        return await admin.credentials()

    async def revoke(c: Call) -> Any:
        holder = c.body["holder"]
        key = (holder["source"], holder["issuer"], holder["subject"])
        return await admin.revoke_credential(c.actor, c.body["server"], c.body["kind"], key)

    async def overlays(_: Call) -> Any:
        return admin.overlays()

    async def tool_off(c: Call) -> Any:
        b = c.body
        return await admin.switch_off(
            c.actor, b["tool"], b.get("role"), float(b["minutes"]), b.get("reason", "")
        )

    async def tool_on(c: Call) -> Any:
        return await admin.switch_on(c.actor, c.body["tool"], c.body.get("role"))

    async def pins(c: Call) -> Any:
        return await admin.accept_pins(c.actor, c.body.get("tools"))

    async def buckets(_: Call) -> Any:
        return await admin.near_limit()

    async def refusals(_: Call) -> Any:
        return admin.refusals()

    async def audit(c: Call) -> Any:
        limit = _float(c, "limit")
        return admin.audit(
            identity=c.query("identity"),
            tool=c.query("tool"),
            outcome=c.query("outcome"),
            since=_float(c, "since"),
            limit=200 if limit is None else int(limit),
        )

    async def plan(c: Call) -> Any:
        return await admin.plan_reload(c.body.get("config"))

    async def apply(c: Call) -> Any:
        return await admin.apply_reload(c.actor, c.body.get("config"))

    table: list[tuple[str, str, str, str | None, str, Handler]] = [
        ("GET", "/servers", "Servers", None, "every server: state, errors, stderr tail, call rates", servers),
        ("GET", "/servers/{id}", "Server", None, "one server", server),
        ("POST", "/servers/{id}/restart", "Acted", "Empty", "restart a server on every replica", restart),
        (
            "POST",
            "/servers/{id}/drain",
            "Acted",
            "Empty",
            "no new calls to a server; in-flight ones finish",
            drain,
        ),
        ("POST", "/servers/{id}/undrain", "Acted", "Empty", "calls to a drained server again", undrain),
        ("GET", "/endpoints", "Endpoints", None, "the endpoints and their views", endpoints),
        ("GET", "/catalog", "Catalog", None, "the catalog as an identity and roles see it", catalog),
        ("GET", "/policy", "Policy", None, "the policy's rules with file and line, and the overlays", policy),
        ("GET", "/explain", "Explain", None, "the decision for an identity and a tool", explain),
        ("GET", "/sessions", "Sessions", None, "open sessions on this replica (ids shortened)", sessions),
        ("POST", "/sessions/{id}/end", "Acted", "Empty", "end a session on every replica", end),
        (
            "GET",
            "/replicas/{what}",
            "Everywhere",
            None,
            "servers or sessions of every replica, each under its name (over Redis)",
            everywhere,
        ),
        ("GET", "/approvals", "Approvals", None, "approvals kept, and parked calls", approvals),
        ("GET", "/credentials", "Credentials", None, "credentials held (never a value)", credentials),
        ("POST", "/credentials/revoke", "Revoked", "Revoke", "forget a held credential", revoke),
        ("GET", "/overlays", "Overlays", None, "tools switched off now", overlays),
        ("POST", "/tools/off", "Overlay", "ToolOff", "switch a tool off for everyone or a role", tool_off),
        ("POST", "/tools/on", "Removed", "ToolOn", "switch a tool back on", tool_on),
        (
            "POST",
            "/pins/accept",
            "Accepted",
            "PinsAccept",
            "accept drifted and quarantined definitions",
            pins,
        ),
        ("GET", "/ratelimits", "Buckets", None, "rate-limit buckets near their limit", buckets),
        ("GET", "/refusals", "Refusals", None, "recent refusals by a limit", refusals),
        ("GET", "/audit", "Audit", None, "recent audit entries (?identity, tool, outcome, since)", audit),
        ("POST", "/reload/plan", "Plan", "Reload", "validate a config and show the reload plan", plan),
        ("POST", "/reload/apply", "Applied", "Reload", "apply a config as a file reload does", apply),
    ]
    return [
        _Route(
            method,
            path,
            response,
            body,
            summary,
            handler,
            re.compile(re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]{1,256})", path)),
        )
        for method, path, response, body, summary, handler in table
    ]

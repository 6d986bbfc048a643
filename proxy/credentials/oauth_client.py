"""Manifold as an OAuth 2.1 client of a server's authorization server, on a user's behalf.

Discovery follows the MCP authorization spec from the server's own answer: its 401's
``WWW-Authenticate: Bearer resource_metadata="…"`` (or the well-known Protected Resource
Metadata URL, RFC 9728), the resource's ``authorization_servers``, then that server's metadata
(RFC 8414 / OpenID Connect, whose ``issuer`` must be the one named: :mod:`proxy.auth.discovery`).
Then the client: configured ``client_id``/``client_secret``, or dynamic registration (RFC 7591);
authorization code with PKCE (S256) and the ``resource`` indicator (RFC 8707); the code and the
refresh token exchanged at the token endpoint; the token exchange grant (RFC 8693).

The parsing is pure (documents in, frozen values out); :class:`OAuthHttp` is the one place that
does I/O, with aiohttp, bounded, without following redirects, foreign errors turned into
:class:`OAuthClientError`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp

from proxy.auth.discovery import metadata_urls
from proxy.config.oauth import check_https_url
from proxy.core.errors import ManifoldError
from proxy.credentials.tokens import TokenSet

__all__ = [
    "AuthServer",
    "OAuthClientError",
    "OAuthHttp",
    "OAuthRefused",
    "OAuthUnusable",
    "Registered",
    "authorize_url",
    "canonical_resource",
    "check_resource",
    "pkce_pair",
    "parse_auth_server",
    "parse_protected_resource",
    "parse_token_response",
    "resource_metadata_of",
    "token_audiences",
]

_MAX_BYTES: Final = 1 << 20
_CHALLENGE_PARAM: Final = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


class OAuthClientError(ManifoldError):
    """An authorization server or the server's metadata did not give what the flow needs."""


class OAuthUnusable(OAuthClientError):
    """The authorization server answered, but cannot be used as it is (no PKCE S256, plain http
    off loopback, another issuer's metadata, registration refused): trying again will not help;
    the message says what to change."""


class OAuthRefused(OAuthClientError):
    """The token endpoint answered with an OAuth error (``error``: its code, e.g. ``invalid_grant``)."""

    def __init__(self, message: str, error: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class AuthServer:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None = None
    revocation_endpoint: str | None = None
    introspection_endpoint: str | None = None
    iss_parameter_supported: bool = False  # RFC 9207: the callback then must carry ``iss``


@dataclass(frozen=True, slots=True)
class Registered:
    """Manifold's client at one authorization server."""

    client_id: str
    client_secret: str | None = None

    def __repr__(self) -> str:
        return f"Registered(client_id={self.client_id!r})"


def pkce_pair() -> tuple[str, str]:
    """A fresh PKCE ``code_verifier`` and its S256 ``code_challenge`` (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def resource_metadata_of(www_authenticate: str | None) -> str | None:
    """The ``resource_metadata`` URL of a ``Bearer`` challenge, if it names an http(s) one."""
    if not www_authenticate or not www_authenticate.strip().lower().startswith("bearer"):
        return None
    params = dict(_CHALLENGE_PARAM.findall(www_authenticate))
    url = params.get("resource_metadata")
    return url if url is not None and url.startswith(("https://", "http://")) else None


def well_known_resource_metadata(server_url: str) -> str:
    """RFC 9728 §3.1: the metadata URL of a resource, by path insertion."""
    parts = urlsplit(server_url)
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{path}"


def _object(data: bytes, where: str) -> dict[str, Any]:
    try:
        document: Any = json.loads(data)
    except (ValueError, RecursionError):
        raise OAuthClientError(f"{where}: not JSON") from None
    if not isinstance(document, dict):
        raise OAuthClientError(f"{where}: not a JSON object")
    return document


def parse_protected_resource(data: bytes, where: str) -> tuple[str | None, list[str]]:
    """A Protected Resource Metadata document: its ``resource`` and ``authorization_servers``.

    Raises:
        OAuthClientError: not a document, or no authorization server named.
    """
    document = _object(data, where)
    servers = document.get("authorization_servers")
    if not isinstance(servers, list) or not servers or not all(isinstance(s, str) for s in servers):
        raise OAuthClientError(f"{where}: no authorization_servers")
    resource = document.get("resource")
    return (resource if isinstance(resource, str) else None), list(servers)


def canonical_resource(url: str) -> str:
    """``url`` compared as a resource identifier: scheme and host lower-cased, a default port
    and a fragment dropped, an empty path read as ``/``; nothing else is forgiven."""
    parts = urlsplit(url.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    default = {"http": 80, "https": 443}.get(scheme)
    netloc = host if port is None or port == default else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def check_resource(named: str | None, server_url: str, where: str) -> str:
    """The resource a server's Protected Resource Metadata names, when it is the server's own
    URL (RFC 9728 §3.3: identical to the URL the metadata was asked for; compared strictly,
    after :func:`canonical_resource`, rather than as a prefix). Otherwise a server could have
    Manifold ask for, and then send it, tokens meant for another resource.

    Raises:
        OAuthClientError: no ``resource``, or another one.
    """
    if named is None:
        raise OAuthClientError(f"{where}: no resource (RFC 9728 requires it)")
    if canonical_resource(named) != canonical_resource(server_url):
        raise OAuthClientError(f"{where}: resource {named!r} is not the server's URL {server_url!r}")
    return named


def check_endpoint(url: str, what: str, *, plain_http: bool = False) -> str:
    """``url`` if it is https, or http to a loopback host (or anywhere with ``plain_http``, a test
    rig's opt-out): the MCP authorization spec requires TLS for every authorization server
    endpoint, since codes, client secrets and tokens travel there.

    Raises:
        OAuthUnusable: naming ``what``, the URL and the setting that would allow it.
    """
    try:
        return check_https_url(url, what=what, plain_http=plain_http)
    except ValueError as exc:
        raise OAuthUnusable(
            f"{exc}: the MCP authorization spec requires https for authorization servers "
            "(credentials.allow_insecure_http: true allows plain http, for test rigs only)"
        ) from None


def parse_auth_server(
    data: bytes, issuer: str, where: str, *, pkce: bool = True, plain_http: bool = False
) -> AuthServer:
    """An authorization server's metadata, if it is ``issuer``'s (RFC 8414 §3.3).

    Raises:
        OAuthUnusable: another issuer's, or no authorization or token endpoint, an endpoint over
            plain http off loopback (unless ``plain_http``), or (``pkce``: for the authorization
            code flow) ``code_challenge_methods_supported`` does not list ``S256``, missing
            included: the MCP authorization spec says a client MUST refuse then.
        OAuthClientError: not a JSON object.
    """
    document = _object(data, where)
    if document.get("issuer") != issuer:
        raise OAuthUnusable(f"{where}: issuer {document.get('issuer')!r} is not {issuer!r}")

    def url(name: str) -> str | None:
        value = document.get(name)
        if not (isinstance(value, str) and value.startswith(("https://", "http://"))):
            return None
        return check_endpoint(value, name, plain_http=plain_http)

    authorize, token = url("authorization_endpoint"), url("token_endpoint")
    if authorize is None or token is None:
        raise OAuthUnusable(f"{where}: no authorization_endpoint or token_endpoint")
    methods = document.get("code_challenge_methods_supported")
    if pkce and (not isinstance(methods, list) or "S256" not in methods):
        raise OAuthUnusable(
            f"{where}: PKCE with S256 is not supported (code_challenge_methods_supported must list it)"
        )
    return AuthServer(
        issuer,
        authorize,
        token,
        url("registration_endpoint"),
        url("revocation_endpoint"),
        url("introspection_endpoint"),
        document.get("authorization_response_iss_parameter_supported") is True,
    )


def authorize_url(
    server: AuthServer,
    client: Registered,
    *,
    redirect_uri: str,
    state: str,
    challenge: str,
    resource: str,
    scope: str | None,
) -> str:
    """Where the user's browser goes to sign in: code flow, PKCE S256, the resource indicator."""
    query = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": resource,
    }
    if scope:
        query["scope"] = scope
        if "offline_access" in scope.split():
            query["prompt"] = "consent"  # OpenID: a refresh token is granted only with consent
    glue = "&" if "?" in server.authorization_endpoint else "?"
    return server.authorization_endpoint + glue + urlencode(query)


def parse_token_response(status: int, data: bytes, now: float, issuer: str) -> TokenSet:
    """A token endpoint's answer.

    Raises:
        OAuthClientError: an error answer (its ``error`` code and description), or no token.
    """
    try:
        document: Any = json.loads(data)
    except (ValueError, RecursionError):
        document = None
    if not isinstance(document, dict):
        raise OAuthClientError(f"the token endpoint answered HTTP {status} without a JSON object")
    if status != 200 or "error" in document:
        code = document.get("error", f"HTTP {status}")
        described = document.get("error_description")
        raise OAuthRefused(
            f"the token endpoint refused: {code}" + (f" ({described})" if described else ""), str(code)
        )
    access = document.get("access_token")
    kind = document.get("token_type")
    if not isinstance(access, str) or not access:
        raise OAuthClientError("the token endpoint's answer has no access_token")
    if isinstance(kind, str) and kind.lower() not in ("bearer", "n_a"):
        raise OAuthClientError(f"the token endpoint granted a {kind!r} token, not a Bearer token")
    lifetime = document.get("expires_in")
    expires = now + float(lifetime) if isinstance(lifetime, int | float) and lifetime > 0 else None
    refresh = document.get("refresh_token")
    scope = document.get("scope")
    return TokenSet(
        access,
        expires,
        refresh if isinstance(refresh, str) and refresh else None,
        scope if isinstance(scope, str) else None,
        issuer,
    )


def token_audiences(access_token: str) -> frozenset[str] | None:
    """The ``aud`` of a JWT access token, read without checking its signature (the server
    checks that; Manifold, its client, only refuses to send a token meant for somebody else);
    None for an opaque token."""
    parts = access_token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims: Any = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, RecursionError):
        return None
    if not isinstance(claims, dict):
        return None
    audience = claims.get("aud")
    if isinstance(audience, str):
        return frozenset({audience})
    if isinstance(audience, list):
        return frozenset(a for a in audience if isinstance(a, str))
    return frozenset()


def subject_of_id_token(id_token: str) -> str | None:
    """The ``sub`` of an ID token received straight from the token endpoint over TLS (OpenID
    Connect Core §3.1.3.7 allows TLS in place of the signature check there)."""
    parts = id_token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims: Any = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, RecursionError):
        return None
    sub = claims.get("sub") if isinstance(claims, dict) else None
    return sub if isinstance(sub, str) else None


class OAuthHttp:
    """The requests of the flow, bounded by ``timeout`` seconds each; authorization servers over
    plain http are refused off loopback unless ``plain_http`` (a test rig's opt-out)."""

    def __init__(self, *, timeout: float = 10.0, plain_http: bool = False) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._seconds = timeout
        self.plain_http = plain_http

    async def request(
        self,
        method: str,
        url: str,
        *,
        form: Mapping[str, str] | None = None,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One request; (status, headers, body).

        Raises:
            OAuthClientError: no answer in time, a connection error, a body over 1 MiB.
        """
        try:
            async with (
                aiohttp.ClientSession(timeout=self._timeout) as session,
                session.request(
                    method,
                    url,
                    data=form,
                    json=json_body,
                    headers={"accept": "application/json", **(headers or {})},
                    allow_redirects=False,
                ) as response,
            ):
                body = bytearray()
                async for chunk in response.content.iter_chunked(65536):
                    body += chunk
                    if len(body) > _MAX_BYTES:
                        raise OAuthClientError(f"{url}: answer larger than {_MAX_BYTES} bytes")
                return response.status, dict(response.headers), bytes(body)
        except TimeoutError:
            raise OAuthClientError(f"{url}: no answer in {self._seconds:g} s") from None
        except aiohttp.ClientError as exc:
            raise OAuthClientError(f"{url}: {type(exc).__name__}: {exc}") from None

    async def discover(
        self, server_url: str, issuer: str | None = None, *, pkce: bool = True
    ) -> tuple[str, AuthServer]:
        """The resource a server is (for ``resource=``) and its authorization server's metadata.

        The server is asked without a token: its 401 names its metadata. ``issuer`` (configured)
        skips the Protected Resource Metadata; otherwise the first server it names is used.

        Raises:
            OAuthUnusable: the authorization server answered, but cannot be used (its metadata
                lacks PKCE S256, names plain http endpoints off loopback, another issuer …).
            OAuthClientError: no metadata found (unreachable, HTTP errors).
        """
        resource = server_url
        if issuer is None:
            status, headers, _ = await self.request(
                "POST",
                server_url,
                json_body={"jsonrpc": "2.0", "id": 0, "method": "ping"},
                headers={"accept": "application/json, text/event-stream"},
            )
            found = resource_metadata_of(headers.get("WWW-Authenticate") or headers.get("www-authenticate"))
            where = found or well_known_resource_metadata(server_url)
            status, _, body = await self.request("GET", where)
            if status != 200:
                raise OAuthClientError(f"{where}: HTTP {status} (no Protected Resource Metadata)")
            named, servers = parse_protected_resource(body, where)
            resource = check_resource(named, server_url, where)
            issuer = servers[0]
        check_endpoint(issuer, "the authorization server", plain_http=self.plain_http)
        problems: list[str] = []
        unusable = False
        for url in metadata_urls(issuer):
            status, _, body = await self.request("GET", url)
            if status != 200:
                problems.append(f"{url}: HTTP {status}")
                continue
            try:
                return resource, parse_auth_server(body, issuer, url, pkce=pkce, plain_http=self.plain_http)
            except OAuthUnusable as exc:
                unusable = True
                problems.append(str(exc))
            except OAuthClientError as exc:
                problems.append(str(exc))
        kind = OAuthUnusable if unusable else OAuthClientError
        raise kind(f"authorization server {issuer}: no usable metadata ({'; '.join(problems)})")

    async def register(self, server: AuthServer, redirect_uri: str, scope: str | None) -> Registered:
        """Dynamic client registration (RFC 7591): a confidential client for the code flow.

        Raises:
            OAuthClientError: no registration endpoint, or registration refused.
        """
        if server.registration_endpoint is None:
            raise OAuthClientError(
                f"{server.issuer} has no registration endpoint: configure a client_id for this server"
            )
        metadata: dict[str, Any] = {
            "client_name": "Manifold",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_basic",
        }
        if scope:
            metadata["scope"] = scope
        status, _, body = await self.request("POST", server.registration_endpoint, json_body=metadata)
        document = _object(body, server.registration_endpoint)
        client_id = document.get("client_id")
        if status not in (200, 201) or not isinstance(client_id, str):
            said = _oauth_error(document)
            raise OAuthUnusable(f"{server.registration_endpoint}: registration refused (HTTP {status}{said})")
        secret = document.get("client_secret")
        return Registered(client_id, secret if isinstance(secret, str) else None)

    async def token(
        self, server: AuthServer, client: Registered, form: Mapping[str, str], now: float
    ) -> tuple[TokenSet, dict[str, Any]]:
        """A grant at the token endpoint; the token set, and the whole answer (``id_token`` …).

        Raises:
            OAuthClientError: refused, or no token in the answer.
        """
        headers: dict[str, str] = {}
        fields = dict(form)
        if client.client_secret is not None:
            headers["Authorization"] = aiohttp.encode_basic_auth(client.client_id, client.client_secret)
        else:
            fields["client_id"] = client.client_id
        status, _, body = await self.request("POST", server.token_endpoint, form=fields, headers=headers)
        tokens = parse_token_response(status, body, now, server.issuer)
        answer: Any = json.loads(body)
        return tokens, answer

    async def revoke(self, server: AuthServer, client: Registered, token: str, hint: str) -> None:
        """RFC 7009 at the server's revocation endpoint, as ``client`` (the one the token was
        issued to: a server that checks client binding refuses any other).

        Raises:
            OAuthRefused: the endpoint answered an error (its ``error`` code and description).
            OAuthUnusable: the server publishes no revocation endpoint.
            OAuthClientError: it cannot be reached.
        """
        if server.revocation_endpoint is None:
            raise OAuthUnusable(f"{server.issuer} publishes no revocation_endpoint (RFC 7009)")
        headers: dict[str, str] = {}
        form = {"token": token, "token_type_hint": hint}
        if client.client_secret is not None:
            headers["Authorization"] = aiohttp.encode_basic_auth(client.client_id, client.client_secret)
        else:
            form["client_id"] = client.client_id
        status, _, body = await self.request("POST", server.revocation_endpoint, form=form, headers=headers)
        if status == 200:  # RFC 7009 §2.2: also for a token that was invalid already
            return
        try:
            document: Any = json.loads(body)
        except (ValueError, RecursionError):
            document = None
        code = document.get("error") if isinstance(document, dict) else None
        raise OAuthRefused(
            f"{server.revocation_endpoint} refused to revoke the {hint} (HTTP {status}"
            f"{_oauth_error(document)})",
            str(code or f"HTTP {status}"),
        )


def _oauth_error(document: Any) -> str:
    """``: code (description)`` of an OAuth error answer, or nothing."""
    if not isinstance(document, dict) or not isinstance(document.get("error"), str):
        return ""
    described = document.get("error_description")
    return f": {document['error']}" + (f" ({described})" if isinstance(described, str) and described else "")

"""``servers.<id>.openapi``: a REST API described by an OpenAPI document, served as tools.

::

    servers:
      pets:
        url: https://pets.example.com/v1      # the API's base URL (else the document's servers[0])
        openapi:
          document: ./pets.yaml               # a file path or an http(s) URL; JSON or YAML
          include: {tags: [pets], methods: [GET, POST]}
          exclude: {operations: [deletePet], paths: ["/admin/*"]}
          security_scheme: api_key            # which of the document's securitySchemes gets the credential
          allow_remote_refs: [https://schemas.example.com/pets/]   # $refs to other documents allowed here

Selection: an operation is served when it matches ``include`` (every criterion given; none given
matches all) and does not match ``exclude`` (any criterion given). Paths are matched with ``*``
(within a segment) and ``**`` (any segments) against the document's path template.
"""

from __future__ import annotations

import re
from typing import Final, Literal, TypeAlias
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from proxy.config.base import Section as _Model

__all__ = ["HTTP_METHODS", "OpenApiSelection", "OpenApiSource"]

HttpMethod: TypeAlias = Literal["GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"]
HTTP_METHODS: Final = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_PATH_PATTERN: Final = re.compile(r"/[A-Za-z0-9_.~{}*/:@!$&'()+,;=%-]*")


class OpenApiSelection(_Model):
    """Operations by tag, path pattern, method and operationId."""

    tags: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    methods: tuple[HttpMethod, ...] = ()
    operations: tuple[str, ...] = ()  # operationIds (or the tool names made from method + path)

    @field_validator("methods", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        if isinstance(value, list | tuple):
            return tuple(v.upper() if isinstance(v, str) else v for v in value)
        return value

    @field_validator("paths")
    @classmethod
    def _path_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            if not _PATH_PATTERN.fullmatch(pattern) or len(pattern) > 512:
                raise ValueError(f"must be path patterns starting with '/' (got {pattern!r})")
        return value

    @property
    def empty(self) -> bool:
        return not (self.tags or self.paths or self.methods or self.operations)


class OpenApiSource(_Model):
    """Where the document is, which of its operations are served, and how calls are made."""

    # A file (found relative to the config file) or an http(s) URL.
    document: str = Field(min_length=1, max_length=4096)
    include: OpenApiSelection = OpenApiSelection()
    exclude: OpenApiSelection = OpenApiSelection()
    # The securitySchemes entry the server's credential is placed by (header, query, cookie,
    # bearer, basic). None: the document's only scheme, if it has exactly one; else headers as given.
    security_scheme: str | None = Field(default=None, min_length=1, max_length=256)
    # References to other documents are refused, except to URLs under these prefixes
    # (https://host/path): fetched as the document is, within the same bounds (proxy.openapi.remote).
    allow_remote_refs: tuple[str, ...] = ()
    # Honour the document's x-mcp-annotations (hints it claims for an operation) over the ones
    # Manifold derives from the HTTP method. Off: a document could call a DELETE read-only.
    trust_extensions: bool = False
    max_document_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    max_response_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    max_error_bytes: int = Field(default=4096, gt=0, le=1024 * 1024)
    max_operations: int = Field(default=5000, gt=0)
    # Seconds between fetches of a document at a URL (with If-None-Match when it gave an ETag).
    refresh_interval: float = Field(default=60.0, gt=0, le=86400)

    @field_validator("allow_remote_refs")
    @classmethod
    def _url_prefixes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for prefix in value:
            parts = urlsplit(prefix)
            if parts.scheme not in ("http", "https") or not parts.hostname or len(prefix) > 2048:
                raise ValueError(f"must be http(s) URL prefixes with a host (got {prefix[:200]!r})")
            if parts.username is not None or parts.query or parts.fragment:
                raise ValueError(f"a prefix has no credentials, query or fragment (got {prefix[:200]!r})")
        return value

    @property
    def is_url(self) -> bool:
        return self.document.startswith(("http://", "https://"))

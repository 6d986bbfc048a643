"""External inspection services: what an ``inspect`` rule selects, POSTed to an HTTP service
that answers allow, deny, redact (with the edited content) or confirm.

The contract (``manifold.guardrails/v1``, published in ``docs/reference/guardrails.md``) is a
JSON object each way. Manifold sends::

    {"version": "manifold.guardrails/v1", "rule": "dlp-out", "direction": "tool_arguments",
     "identity": {"name": "alice", "roles": ["dev"], "source": "jwt", "issuer": "…", "subject": "…"},
     "endpoint": "", "server": "github", "kind": "tool", "name": "github.create_issue",
     "content": {"arguments": {…}},
     "findings": [{"detector": "email", "count": 2}]}

and reads back ``{"decision": "allow" | "deny" | "redact" | "confirm", "reason": "…",
"content": {…}}``: ``content`` (redact only) replaces the fields of ``content`` it names, and
only those Manifold sent. ``reason`` (at most 500 characters) is shown to a denied client and
to the person asked to confirm.

Per hook (``policy.guardrails.hooks.<name>``): a timeout per request, a bound on requests in
flight (a request waits for a slot within its timeout), ``failure: open | closed`` (a hook that
times out, is unreachable, answers an error status, garbage or too much counts as allow or
deny), a bearer token and/or mTLS, and a bounded cache of answers for identical requests.

The HTTP client is Manifold's own (:mod:`proxy.outbound.h1`): a hook is on the call path, and
that client costs a fraction of aiohttp's per request (its docstring has the numbers), keeps
its connections alive, bounds what it reads, and takes an SSL context for mTLS.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import anyio
import orjson
from cachetools import TTLCache

from proxy.config.guardrails import HookSettings
from proxy.outbound.over_http.h1 import Client, HttpError
from proxy.policy.guardrail_engine import GuardSubject
from proxy.policy.model import Identity

__all__ = ["CONTRACT", "Hook", "HookAnswer", "HookFailure", "read_answer", "request_body"]

logger = logging.getLogger("proxy.guardrails.hooks")

CONTRACT: Final = "manifold.guardrails/v1"
_DECISIONS: Final = frozenset({"allow", "deny", "redact", "confirm"})
_REASON_MAX: Final = 500


class HookFailure(Exception):
    """The hook gave no usable answer: unreachable, too slow, an error status, or not the contract."""


@dataclass(frozen=True, slots=True)
class HookAnswer:
    """A hook's answer, read and checked (``content`` only for ``redact``)."""

    decision: Literal["allow", "deny", "redact", "confirm"]
    reason: str = ""
    content: Mapping[str, Any] | None = None


def request_body(
    rule_id: str,
    identity: Identity,
    subject: GuardSubject,
    content: Mapping[str, Any],
    findings: Mapping[str, int],
) -> bytes:
    """The JSON Manifold POSTs for one inspection (the contract in the module docstring)."""
    return orjson.dumps(
        {
            "version": CONTRACT,
            "rule": rule_id,
            "direction": subject.direction,
            "identity": {
                "name": identity.name,
                "roles": sorted(identity.roles),
                "source": identity.source,
                "issuer": identity.issuer,
                "subject": identity.subject,
            },
            "endpoint": subject.endpoint,
            "server": subject.server_id,
            "kind": subject.kind,
            "name": subject.name,
            "content": content,
            "findings": [{"detector": name, "count": count} for name, count in sorted(findings.items())],
        }
    )


def read_answer(body: bytes, sent: Mapping[str, Any]) -> HookAnswer:
    """A hook's response body, checked against the contract.

    Raises:
        HookFailure: not JSON, not an object, an unknown decision, or edits to fields not sent.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise HookFailure("the answer is not JSON") from None
    if not isinstance(data, dict):
        raise HookFailure("the answer is not a JSON object")
    decision = data.get("decision")
    if decision not in _DECISIONS:
        raise HookFailure(
            f"unknown decision {str(decision)[:40]!r} (expected allow, deny, redact or confirm)"
        )
    reason = data.get("reason", "")
    if not isinstance(reason, str):
        raise HookFailure("'reason' is not a string")
    reason = "".join(ch if ch.isprintable() else " " for ch in reason[:_REASON_MAX])
    content = data.get("content")
    if decision != "redact":
        return HookAnswer(decision, reason)
    if not isinstance(content, dict) or not content:
        raise HookFailure("a redact answer carries no 'content' object")
    foreign = set(content) - set(sent)
    if foreign:
        raise HookFailure(f"the answer edits fields Manifold did not send: {', '.join(sorted(foreign))[:80]}")
    return HookAnswer("redact", reason, content)


def _ssl_context(settings: HookSettings) -> ssl.SSLContext | None:
    tls = settings.tls
    if not settings.url.startswith("https:"):
        return None
    context = ssl.create_default_context(cafile=tls.ca) if tls.ca else ssl.create_default_context()
    if tls.cert:
        context.load_cert_chain(tls.cert, tls.key)
    return context


class Hook:
    """One configured inspection service: its client, its slots, its cache.

    Raises (construction):
        OSError, ssl.SSLError: the mTLS files cannot be read.
    """

    def __init__(self, name: str, settings: HookSettings, *, clock: Any = time.monotonic) -> None:
        self.name = name
        self.settings = settings
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if settings.bearer_token is not None:
            headers["Authorization"] = f"Bearer {settings.bearer_token.get_secret_value()}"
        self._client = Client(
            settings.url,
            headers,
            server_id=f"hook {name}",
            connect_timeout=settings.timeout,
            ssl_context=_ssl_context(settings),
        )
        self._slots = anyio.Semaphore(settings.concurrency)
        self._cache: TTLCache[bytes, HookAnswer] | None = (
            TTLCache(settings.cache.entries, settings.cache.ttl, timer=clock)
            if settings.cache.entries
            else None
        )
        self.calls = 0  # requests sent (cache misses), for tests

    @property
    def fails_open(self) -> bool:
        return self.settings.failure == "open"

    async def ask(self, body: bytes, sent: Mapping[str, Any]) -> HookAnswer:
        """The hook's answer to ``body`` (from the cache when the same body was asked lately).

        Raises:
            HookFailure: no usable answer within the timeout (the caller applies ``failure``).
        """
        key = hashlib.sha256(body).digest()
        if self._cache is not None and (cached := self._cache.get(key)) is not None:
            return cached
        try:
            with anyio.fail_after(self.settings.timeout):
                async with self._slots:
                    self.calls += 1
                    answer = await self._post(body, sent)
        except TimeoutError:
            raise HookFailure(f"no answer within {self.settings.timeout:g} s") from None
        except (OSError, HttpError, ValueError) as exc:
            raise HookFailure(f"unreachable or broken exchange ({type(exc).__name__})") from None
        if self._cache is not None:
            self._cache[key] = answer
        return answer

    async def _post(self, body: bytes, sent: Mapping[str, Any]) -> HookAnswer:
        limit = self.settings.max_response_bytes
        async with self._client.request("POST", self.settings.url, body=body) as response:
            if response.status != 200:
                raise HookFailure(f"HTTP status {response.status}")
            declared = response.content_length
            if declared is not None and declared > limit:
                raise HookFailure(f"the answer is larger than max_response_bytes ({limit})")
            data = await response.read(limit)
            if len(data) > limit:
                raise HookFailure(f"the answer is larger than max_response_bytes ({limit})")
        return read_answer(data, sent)

    def close(self) -> None:
        self._client.close()

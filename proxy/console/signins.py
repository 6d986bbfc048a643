"""Who is signed in to the console: one record per browser sign-in, kept in this process.

A sign-in checks the credential an operator pastes (an API key, a JWT or an OAuth access token,
exactly as ``/admin/api/`` takes it) and keeps it here under a new random id, the only thing the
browser holds (the cookie :data:`COOKIE`). Every request authenticates the kept credential again,
so a key removed by a reload, a role taken away or a token past its expiry ends the console
session at once, as it ends API access.

* No fixation: the id is minted at sign-in (a cookie the browser brought is never adopted) and
  an id this process did not mint signs nobody in.
* CSRF: each sign-in has its own random form token; every form carries it and every POST is
  compared to it in constant time. The sign-in form itself carries a token that a cookie of
  its own (:data:`SIGNIN_COOKIE`) holds too.
* Bounded: at most :data:`MAX_SIGNINS` records (the oldest goes first), each ending after
  ``idle`` seconds unused or ``lifetime`` seconds in all. Time is passed in.

:class:`SignIns` keeps records in this process; :class:`proxy.console.shared_signins.SharedSignIns`
keeps them in Redis (sealed), so a sign-in on one replica holds on every other. Both are a
:class:`SignInStore`.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass, field
from typing import Final, Protocol

__all__ = ["COOKIE", "MAX_SIGNINS", "SIGNIN_COOKIE", "SignIn", "SignInStore", "SignIns", "csrf_ok", "new_id"]

COOKIE: Final = "manifold_console"
SIGNIN_COOKIE: Final = "manifold_console_signin"  # the sign-in form's own token, before any sign-in
MAX_SIGNINS: Final = 1024
_ID_BYTES: Final = 32
MAX_ID: Final = 128  # a longer cookie value was never minted here


@dataclass(slots=True)
class SignIn:
    """One browser's sign-in: the credential it signed in with and its form token."""

    credential: str = field(repr=False)
    csrf: str = field(repr=False)
    started: float
    used: float


class SignInStore(Protocol):
    """Where the console keeps sign-ins, by cookie value. Time is passed in."""

    async def start(self, credential: str, *, now: float) -> tuple[str, SignIn]:
        """A new sign-in for ``credential``: its fresh id (the cookie's value) and record."""
        ...

    async def get(self, sign_in_id: str | None, *, now: float) -> SignIn | None:
        """The live sign-in ``sign_in_id`` names (marked used now), or None."""
        ...

    async def end(self, sign_in_id: str | None) -> None:
        """Sign out (nothing when unknown)."""
        ...


def new_id() -> str:
    """A fresh random value, for a sign-in's id or its form token."""
    return secrets.token_urlsafe(_ID_BYTES)


def csrf_ok(record: SignIn, sent: str) -> bool:
    """``sent`` is the form token of ``record`` (constant time)."""
    return hmac.compare_digest(record.csrf.encode(), sent.encode())


class SignIns:
    """The console's sign-ins in this process, by cookie value."""

    def __init__(
        self, *, idle: float = 1800.0, lifetime: float = 12 * 3600.0, limit: int = MAX_SIGNINS
    ) -> None:
        self._records: dict[str, SignIn] = {}
        self._idle, self._lifetime, self._limit = idle, lifetime, limit

    def __len__(self) -> int:
        return len(self._records)

    async def start(self, credential: str, *, now: float) -> tuple[str, SignIn]:
        """A new sign-in for ``credential``: its fresh id (the cookie's value) and record."""
        self._expire(now)
        while len(self._records) >= self._limit:
            del self._records[next(iter(self._records))]  # dicts keep insertion order: the oldest
        sign_in_id = new_id()
        record = SignIn(credential, new_id(), now, now)
        self._records[sign_in_id] = record
        return sign_in_id, record

    async def get(self, sign_in_id: str | None, *, now: float) -> SignIn | None:
        """The live sign-in ``sign_in_id`` names (marked used now), or None."""
        if not sign_in_id or len(sign_in_id) > MAX_ID:
            return None
        record = self._records.get(sign_in_id)
        if record is None:
            return None
        if now - record.used > self._idle or now - record.started > self._lifetime:
            del self._records[sign_in_id]
            return None
        record.used = now
        return record

    async def end(self, sign_in_id: str | None) -> None:
        """Sign out (nothing when unknown)."""
        if sign_in_id:
            self._records.pop(sign_in_id, None)

    def _expire(self, now: float) -> None:
        dead = [
            key
            for key, r in self._records.items()
            if now - r.used > self._idle or now - r.started > self._lifetime
        ]
        for key in dead:
            del self._records[key]

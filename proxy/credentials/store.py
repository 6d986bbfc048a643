"""Where per-identity credentials are kept: a sealed file, Redis (:mod:`proxy.credentials.redis_store`),
or plaintext environment variables (read-only).

An entry is named by its *kind* (``secret``; other modes keep their tokens under their own kind),
its server id and its *holder*: the identity's key ``(source, issuer, subject)``
(:attr:`proxy.policy.model.Identity.key`), never its name, which is not unique. So an API key's
``alice`` and a token's ``alice`` are different holders, as everywhere else in Manifold.

The file and Redis keep each value sealed (:mod:`proxy.credentials.sealing`) with the configured
key and bound to its entry. The file is JSON, written whole (to a temporary file, then renamed,
mode 0600) under a lock, so ``manifold credentials set`` and a running ``manifold serve`` can
share it; the server rereads it when its size or modification time changes.

Every value is bounded (``max_secret_bytes``) and may hold no control characters: it becomes a
header value or an environment variable, where CR/LF or NUL would forge another.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import anyio
import orjson

from proxy.config.credentials import CredentialStoreSettings
from proxy.credentials.sealing import Sealer, bound_to
from proxy.policy.model import IdentityKey

__all__ = [
    "EnvStore",
    "FileStore",
    "Stored",
    "StoreError",
    "StoreReadOnly",
    "SecretStore",
    "check_value",
]

_FILE_LIMIT: Final = 64 * 1024 * 1024  # bytes of a store file Manifold reads at most
_NAME_LIMIT: Final = 1024  # characters of an issuer or subject
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
_ENV_PART: Final = re.compile(r"[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*")  # no "__": it separates


class StoreError(Exception):
    """The store cannot be read or written (its message is safe to show: no values)."""


class StoreReadOnly(StoreError):
    """This store is not written by Manifold (the environment)."""


@dataclass(frozen=True, slots=True)
class Stored:
    """One entry, without its value."""

    kind: str
    server: str
    holder: IdentityKey


class SecretStore(Protocol):
    async def get(self, kind: str, server_id: str, holder: IdentityKey) -> str | None:
        """The value kept for ``holder`` (None: none).

        Raises:
            StoreError: the store cannot be read.
            proxy.credentials.sealing.Unsealable: the entry does not open with the key.
        """
        ...

    async def put(self, kind: str, server_id: str, holder: IdentityKey, value: str) -> None:
        """Keep ``value`` for ``holder``, replacing any.

        Raises:
            ValueError: the value or the names are out of bounds (the message names the bound).
            StoreError: the store cannot be written.
        """
        ...

    async def delete(self, kind: str, server_id: str, holder: IdentityKey) -> bool:
        """Forget ``holder``'s entry; whether there was one."""
        ...

    async def entries(self) -> list[Stored]:
        """Every entry, without values."""
        ...

    async def aclose(self) -> None: ...


def check_value(value: str, holder: IdentityKey, *, max_bytes: int) -> None:
    """Raises ValueError naming the problem if ``value`` or ``holder`` may not be kept."""
    if not value:
        raise ValueError("the secret is empty")
    if len(value.encode()) > max_bytes:
        raise ValueError(f"the secret is longer than credentials.max_secret_bytes ({max_bytes})")
    if _CONTROL.search(value):
        raise ValueError("the secret contains control characters (a newline?); they are not allowed")
    source, issuer, subject = holder
    if not subject or len(subject) > _NAME_LIMIT or len(issuer) > _NAME_LIMIT:
        raise ValueError(
            f"an identity's subject is 1..{_NAME_LIMIT} characters, its issuer at most {_NAME_LIMIT}"
        )
    if source == "anonymous":
        raise ValueError("an anonymous identity has no credentials of its own")


def _record_key(kind: str, server_id: str, holder: IdentityKey) -> tuple[str, str, str, str, str]:
    return (kind, server_id, *holder)


class FileStore:
    """Sealed entries in one JSON file (see the module docstring)."""

    def __init__(self, path: str, sealer: Sealer, settings: CredentialStoreSettings) -> None:
        self._path = Path(path)
        self._sealer = sealer
        self._settings = settings
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) of what _entries holds
        self._entries: dict[tuple[str, str, str, str, str], str] = {}

    async def get(self, kind: str, server_id: str, holder: IdentityKey) -> str | None:
        try:
            stat = os.stat(self._path)  # one syscall per lookup: a revoke is seen on the next call
        except FileNotFoundError:
            self._entries, self._seen = {}, None
            return None
        except OSError as exc:
            raise StoreError(f"cannot read the credential store {self._path}: {exc.strerror}") from None
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)  # a write renames a new file over it
        if seen != self._seen:
            self._entries = await anyio.to_thread.run_sync(self._read)
            self._seen = seen
        sealed = self._entries.get(_record_key(kind, server_id, holder))
        if sealed is None:
            return None
        return self._sealer.open(sealed, bound_to(kind, server_id, holder))

    async def put(self, kind: str, server_id: str, holder: IdentityKey, value: str) -> None:
        check_value(value, holder, max_bytes=self._settings.max_secret_bytes)
        sealed = self._sealer.seal(value, bound_to(kind, server_id, holder))

        def change(entries: dict[tuple[str, str, str, str, str], str]) -> bool:
            key = _record_key(kind, server_id, holder)
            if key not in entries and len(entries) >= self._settings.max_entries:
                raise ValueError(
                    f"the store holds credentials.max_entries ({self._settings.max_entries}) entries"
                )
            entries[key] = sealed
            return True

        await anyio.to_thread.run_sync(self._update, change)

    async def delete(self, kind: str, server_id: str, holder: IdentityKey) -> bool:
        key = _record_key(kind, server_id, holder)
        return await anyio.to_thread.run_sync(
            self._update, lambda entries: entries.pop(key, None) is not None
        )

    async def entries(self) -> list[Stored]:
        entries = await anyio.to_thread.run_sync(self._read)
        return [Stored(k[0], k[1], (k[2], k[3], k[4])) for k in entries]

    async def aclose(self) -> None:
        return None

    # ---- the file (on a worker thread) ---------------------------------------------------------

    def _read(self) -> dict[tuple[str, str, str, str, str], str]:
        try:
            with open(self._path, "rb") as file:
                raw = file.read(_FILE_LIMIT + 1)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StoreError(f"cannot read the credential store {self._path}: {exc.strerror}") from None
        if len(raw) > _FILE_LIMIT:
            raise StoreError(f"the credential store {self._path} is larger than {_FILE_LIMIT} bytes")
        return _parse(raw, str(self._path), self._settings.max_entries)

    def _update(self, change: Any) -> bool:
        with self._locked():
            entries = self._read()
            changed: bool = change(entries)
            if changed:
                self._write(entries)
            return changed

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{self._path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write(self, entries: Mapping[tuple[str, str, str, str, str], str]) -> None:
        document = {
            "version": 1,
            "entries": [
                {"kind": k[0], "server": k[1], "source": k[2], "issuer": k[3], "subject": k[4], "sealed": v}
                for k, v in entries.items()
            ],
        }
        fd, temporary = tempfile.mkstemp(prefix=".credentials-", dir=self._path.parent)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(orjson.dumps(document, option=orjson.OPT_INDENT_2))
                file.flush()
                os.fsync(file.fileno())
            os.chmod(temporary, 0o600)
            os.replace(temporary, self._path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


def _parse(raw: bytes, where: str, max_entries: int) -> dict[tuple[str, str, str, str, str], str]:
    try:
        document = orjson.loads(raw) if raw.strip() else {"version": 1, "entries": []}
    except orjson.JSONDecodeError:
        raise StoreError(f"the credential store {where} is not JSON") from None
    rows = document.get("entries") if isinstance(document, dict) else None
    if not isinstance(rows, list):
        raise StoreError(f"the credential store {where} has no 'entries' list")
    if len(rows) > max_entries:
        raise StoreError(
            f"the credential store {where} holds more than credentials.max_entries ({max_entries})"
        )
    entries: dict[tuple[str, str, str, str, str], str] = {}
    fields = ("kind", "server", "source", "issuer", "subject")
    for index, row in enumerate(rows):
        if not (isinstance(row, dict) and all(isinstance(row.get(f), str) for f in (*fields, "sealed"))):
            raise StoreError(f"the credential store {where}: entry {index} is malformed")
        entries[(row["kind"], row["server"], row["source"], row["issuer"], row["subject"])] = row["sealed"]
    return entries


class EnvStore:
    """Plaintext secrets in environment variables, for small setups: ``<prefix><server>__<subject>``
    (e.g. ``MCP_SECRET__github__alice``), for holders Manifold's own config vouches for
    (API keys and the stdio identity: no issuer). Neither the server id nor the subject may hold
    ``__``, so one variable names exactly one entry. Read-only."""

    def __init__(self, prefix: str, environ: Mapping[str, str] | None = None) -> None:
        self._prefix = prefix
        self._environ = os.environ if environ is None else environ

    def variable(self, server_id: str, holder: IdentityKey) -> str | None:
        """The variable that holds ``holder``'s secret to ``server_id`` (None: it cannot have one)."""
        source, issuer, subject = holder
        if source not in ("api_key", "stdio") or issuer or not _ENV_PART.fullmatch(subject):
            return None
        if not _ENV_PART.fullmatch(server_id):
            return None
        return f"{self._prefix}{server_id}__{subject}"

    async def get(self, kind: str, server_id: str, holder: IdentityKey) -> str | None:
        name = self.variable(server_id, holder) if kind == "secret" else None
        value = None if name is None else self._environ.get(name)
        if value is not None and _CONTROL.search(value):
            raise StoreError(f"the environment variable {name} holds control characters")
        return value or None

    async def put(self, kind: str, server_id: str, holder: IdentityKey, value: str) -> None:
        raise StoreReadOnly("credentials.store is env: set the environment variable instead")

    async def delete(self, kind: str, server_id: str, holder: IdentityKey) -> bool:
        raise StoreReadOnly("credentials.store is env: unset the environment variable instead")

    async def entries(self) -> list[Stored]:
        found = []
        for name in self._environ:
            if name.startswith(self._prefix) and "__" in name[len(self._prefix) :]:
                server, _, subject = name[len(self._prefix) :].partition("__")
                found.append(Stored("secret", server, ("api_key", "", subject)))
        return found

    async def aclose(self) -> None:
        return None

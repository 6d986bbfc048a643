"""Which credential store the config names: a sealed file, Redis, or the environment.

Apart from :mod:`proxy.credentials.store` so that the Redis store (which builds on it) is
imported only when a config uses it, without the store module importing it back.
"""

from __future__ import annotations

from collections.abc import Mapping

from proxy.config.credentials import CredentialStoreSettings
from proxy.credentials.sealing import Sealer
from proxy.credentials.store import EnvStore, FileStore, SecretStore, StoreError

__all__ = ["open_store"]


def open_store(
    settings: CredentialStoreSettings,
    *,
    redis_url: str,
    environ: Mapping[str, str] | None = None,
) -> SecretStore:
    """The store ``settings`` name; no I/O here (Redis connects lazily).

    ``redis_url``: the URL to use when ``settings.redis_url`` is unset (``rate_limits.redis_url``).

    Raises:
        StoreError: a sealed store without ``credentials.key``.
    """
    if settings.store == "env":
        return EnvStore(settings.env_prefix, environ)
    key = settings.key_bytes()
    if key is None:
        raise StoreError(
            f"credentials.store is {settings.store}: credentials.key is required (its entries are sealed)"
        )
    sealer = Sealer(key)
    if settings.store == "redis":
        from proxy.credentials.redis_store import RedisStore  # the redis client is imported only if used

        return RedisStore(settings.redis_url or redis_url, sealer, settings)
    return FileStore(settings.path, sealer, settings)

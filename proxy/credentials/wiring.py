"""From the config to each server's :class:`~proxy.credentials.CredentialSource` (composition).

:data:`BUILDERS` maps a mode to what builds its source; a mode's module adds itself here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from proxy.config.model import Config, ServerConfig
from proxy.core.errors import ConfigError
from proxy.credentials import CredentialSource, Sources
from proxy.credentials.secret import SecretSource
from proxy.credentials.store import SecretStore, StoreError
from proxy.credentials.stores import open_store

__all__ = ["BUILDERS", "Builder", "check_modes", "open_credential_store", "sources_for"]

# (the config, the servers of this mode by id, the credential store) -> the mode's source.
Builder = Callable[[Config, Mapping[str, ServerConfig], SecretStore], CredentialSource]

BUILDERS: dict[str, Builder] = {
    "secret": lambda config, servers, store: SecretSource(servers, store),
}


def check_modes(config: Config) -> None:
    """What :func:`sources_for` would refuse, without building anything (``manifold check``).

    Raises:
        ConfigError: an enabled server's mode has no builder in this build of Manifold.
    """
    for server in config.enabled_servers():
        mode = server.credentials.mode
        if mode != "shared" and mode not in BUILDERS:
            raise ConfigError(f"servers.{server.id}.credentials.mode: {mode!r} is not available yet")


def open_credential_store(config: Config, environ: Mapping[str, str] | None = None) -> SecretStore | None:
    """The credential store, when some enabled server needs one (no I/O: Redis connects lazily).

    Raises:
        ConfigError: the store cannot be opened as configured.
    """
    # exchange keeps nothing in the store (its tokens are a cache in memory).
    if all(server.credentials.mode in ("shared", "exchange") for server in config.enabled_servers()):
        return None
    try:
        return open_store(config.credentials, redis_url=config.rate_limits.redis_url, environ=environ)
    except StoreError as exc:
        raise ConfigError(str(exc)) from None


def sources_for(
    config: Config, store: SecretStore | None, built: Mapping[str, CredentialSource] | None = None
) -> Sources:
    """Each enabled server's source, by its mode (none for ``shared``); ``built`` holds the
    sources made elsewhere, by server id (the oauth and exchange modes share gateway-wide parts:
    :mod:`proxy.credentials.token_modes`).

    Raises:
        ConfigError: a mode has no builder in this build of Manifold.
    """
    by_mode: dict[str, dict[str, ServerConfig]] = {}
    built = built or {}
    for server in config.enabled_servers():
        if server.credentials.mode != "shared" and server.id not in built:
            by_mode.setdefault(server.credentials.mode, {})[server.id] = server
    if not by_mode:
        return Sources(built)
    assert store is not None
    by_server: dict[str, CredentialSource] = dict(built)
    for mode, servers in by_mode.items():
        builder = BUILDERS.get(mode)
        if builder is None:
            raise ConfigError(
                f"servers.{next(iter(servers))}.credentials.mode: {mode!r} is not available yet"
            )
        source = builder(config, servers, store)
        by_server.update(dict.fromkeys(servers, source))
    return Sources(by_server)


def _made_elsewhere(
    config: Config, servers: Mapping[str, ServerConfig], store: SecretStore
) -> CredentialSource:
    raise ConfigError(
        f"servers.{next(iter(servers))}.credentials: built with the gateway's shared parts "
        "(proxy.credentials.token_modes), not here"
    )


# oauth and exchange share gateway-wide parts (sign-ins, the callback, inbound tokens): built by
# proxy.credentials.token_modes and handed to sources_for ready-made. Listed here, they are modes
# this build serves.
BUILDERS.update({"oauth": _made_elsewhere, "exchange": _made_elsewhere})

"""The TLS trust Manifold's own HTTP clients use toward authorization servers.

By default the system's CAs (which OpenSSL lets ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` replace);
with ``ca_file``, exactly the CAs of that PEM file: a private CA for an in-house authorization
server, without trusting it for anything else the process talks to.
"""

from __future__ import annotations

import ssl

from proxy.core.errors import ConfigError

__all__ = ["client_context"]


def client_context(ca_file: str | None, *, what: str = "auth.oauth.ca_file") -> ssl.SSLContext | None:
    """A verifying client context trusting the CAs of ``ca_file``; None (the system's) without one.

    Raises:
        ConfigError: the file cannot be read or holds no PEM certificate.
    """
    if ca_file is None:
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"{what}: {ca_file!r} is not a readable PEM file of CA certificates ({exc})"
        ) from None

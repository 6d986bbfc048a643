"""Signing algorithms Manifold accepts, and which hosts count as this machine (for plain HTTP)."""

from __future__ import annotations

import ipaddress
from typing import Final

__all__ = ["ASYMMETRIC_ALGORITHMS", "HMAC_ALGORITHMS", "is_loopback"]

# Algorithm -> the fewest secret bytes it may use (RFC 7518 §3.2: at least the hash size).
HMAC_ALGORITHMS: Final = {"HS256": 32, "HS384": 48, "HS512": 64}
ASYMMETRIC_ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
_LOOPBACK_NAMES: Final = frozenset({"localhost", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """True for a bind address or host name that only this machine can reach."""
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

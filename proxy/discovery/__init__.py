"""Progressive discovery: a few meta-tools listed instead of the whole catalog (opt-in).

:mod:`proxy.discovery.settings` is its configuration, :mod:`proxy.discovery.service` the state
it keeps (indexes per view, promoted tools per session); the ranking and the meta-tools
themselves are pure (:mod:`proxy.catalog.search`, :mod:`proxy.catalog.meta_tools`).
"""

from proxy.discovery.settings import DiscoverySettings

__all__ = ["DiscoverySettings"]

"""The merged catalog: naming, merging and pagination. Pure: no I/O, no clock.

* :mod:`~proxy.catalog.naming`: (prefix, original name) -> namespaced name.
* :mod:`~proxy.catalog.merge`: every server's list -> one :class:`Catalog` with a routing map.
* :mod:`~proxy.catalog.cursors`: Manifold's signed pagination cursors and :func:`paginate`.

May import: core, protocol (pinned in tests/test_architecture.py).
"""

from __future__ import annotations

from proxy.catalog.cursors import MIN_KEY_BYTES, CursorCodec, Page, paginate
from proxy.catalog.merge import (
    EMPTY_CATALOG,
    Catalog,
    Collision,
    Entry,
    ServerSlice,
    build_catalog,
    replace_slice,
)
from proxy.catalog.naming import MIN_MAX_LENGTH, NamingCodec

__all__ = [
    "EMPTY_CATALOG",
    "MIN_KEY_BYTES",
    "MIN_MAX_LENGTH",
    "Catalog",
    "Collision",
    "CursorCodec",
    "Entry",
    "NamingCodec",
    "Page",
    "ServerSlice",
    "build_catalog",
    "paginate",
    "replace_slice",
]

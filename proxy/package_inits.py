"""Packages whose ``__init__`` runs only when something asks for what only it provides.

Importing ``uvicorn.config`` first runs ``uvicorn/__init__.py``, which imports ``uvicorn.main``:
click, watchfiles (a Rust extension), multiprocessing and uvicorn's reload supervisors, none of
which Manifold uses (it builds its own ``Config`` and ``Server``). ``prometheus_client``'s
``__init__`` imports its exposition module: ``http.server``, ``urllib.request``, ``wsgiref``,
``gzip`` and the OpenMetrics writer, which Manifold needs only when /metrics is first scraped.
Together about 3 MiB of an idle Manifold's ~55 (issue #20).

Importing this module registers both (:func:`defer_init`), so it must come before anything that
imports them: :mod:`proxy.cli.main`, the process's entry point, imports it first. Code that imports
Manifold's modules some other way (tests, benchmarks) gets the plain packages, which behave the same.

:func:`defer_init` registers such a package in ``sys.modules`` as the loader would, with its
``__path__`` and spec, but without running its ``__init__``, so ``import package.submodule``
works as before. What the ``__init__`` would have made an attribute is served by a module
``__getattr__`` (PEP 562): the names listed in ``exports`` straight from their submodules, a
submodule as it is asked for (``from . import values``), and any other name (``uvicorn.run``,
``prometheus_client.generate_latest``, ``__version__``, ``__all__``) by running the real
``__init__`` in the same module object at that moment, after which the package is what a plain
import would have made it. So code outside Manifold that uses these packages in the same
process sees no difference but the moment its first use costs.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["defer_init"]

_METRIC_TYPES = ("Counter", "Enum", "Gauge", "Histogram", "Info", "Summary")


def defer_init(package: str, exports: Mapping[str, str]) -> None:
    """Register ``package`` without running its ``__init__`` (nothing if already imported).

    ``exports`` maps a name the ``__init__`` re-exports to the submodule that defines it.
    """
    if package in sys.modules:
        return
    spec = importlib.util.find_spec(package)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return  # not installed, or not a package: the plain import path reports it as usual
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader
    lock = threading.RLock()
    state = {"ran": False}

    def run_init() -> None:
        with lock:
            if not state["ran"]:
                state["ran"] = True
                loader.exec_module(module)

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is not None:
            return getattr(importlib.import_module(where), name)
        if not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
            # A submodule (``from . import values``, as the package's own modules write): the
            # import system asks for it as an attribute first, and a plain import makes it one.
            return importlib.import_module(f"{package}.{name}")
        if not state["ran"]:
            run_init()
            if name in module.__dict__:
                return module.__dict__[name]
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[package] = module


# The names are the ones their __init__ re-exports that Manifold's modules use or might.
defer_init("uvicorn", {"Config": "uvicorn.config", "Server": "uvicorn.server"})
defer_init(
    "prometheus_client",
    {
        "CollectorRegistry": "prometheus_client.registry",
        "REGISTRY": "prometheus_client.registry",
        "Metric": "prometheus_client.metrics_core",
        **dict.fromkeys(_METRIC_TYPES, "prometheus_client.metrics"),
    },
)

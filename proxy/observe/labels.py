"""The label plumbing under :mod:`proxy.observe.metrics`: a cardinality guard for label values,
a cache of a family's labelled children, and the in-flight context manager."""

from __future__ import annotations

from types import TracebackType
from typing import Final, Generic, TypeVar

from prometheus_client.metrics import Counter, Gauge, Histogram

from proxy.observe.plain import PlainGauge

__all__ = ["OTHER", "UNKNOWN", "Bounded", "Children", "InFlight"]

UNKNOWN: Final = "unknown"  # a tool (or identity) the gateway could not name
OTHER: Final = "other"  # a value past the cardinality guard


class Bounded:
    """Admits the first ``limit`` distinct values of a label; any later new value is ``OTHER``."""

    __slots__ = ("_limit", "_seen")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str | None) -> str:
        if not value:
            return UNKNOWN
        if value in self._seen or value in (UNKNOWN, OTHER):
            return value
        if len(self._seen) >= self._limit:
            return OTHER
        self._seen.add(value)
        return value


_M = TypeVar("_M", Counter, Gauge, Histogram)


class Children(Generic[_M]):
    """Label values → the metric's child, so a repeat call skips ``labels()``."""

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: _M) -> None:
        self._metric: _M = metric
        self._children: dict[tuple[str, ...], _M] = {}

    def get(self, *values: str) -> _M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class InFlight:
    """``with metrics.in_flight():`` counts one request in progress; reusable and re-entrant."""

    __slots__ = ("_gauge",)

    def __init__(self, gauge: PlainGauge) -> None:
        self._gauge = gauge

    def __enter__(self) -> None:
        self._gauge.inc()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._gauge.dec()

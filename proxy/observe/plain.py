"""The per-call metrics as plain numbers, turned into Prometheus samples only when scraped.

``prometheus_client``'s counters, gauges and histograms take a lock on every increment (a
histogram two: its sum and its bucket), about 1 µs each; a ``tools/call`` makes eight. The
families written on every call (calls, their latency, endpoint calls, bytes, requests in flight)
are these instead: a child is a slotted object whose ``inc``/``observe`` is an addition, and each
family is a collector on the same registry that builds exactly the samples ``prometheus_client``
would (names, labels, ``_created``, cumulative ``le`` buckets, exemplars) at scrape time.

Thread safety: the additions are not atomic across threads. Every writer of these families runs
on the gateway's event loop (one thread); a family written from another thread (the tracing
export thread's dropped spans) stays a ``prometheus_client`` metric.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

import prometheus_client.metrics as _client
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Exemplar, Sample
from prometheus_client.utils import floatToGoString

__all__ = ["PlainCounter", "PlainFamily", "PlainGauge", "PlainHistogram"]


class PlainCounter:
    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def samples(self) -> Iterator[tuple[str, dict[str, str], float, Exemplar | None]]:
        yield "_total", {}, self.value, None
        if _client._use_created:
            yield "_created", {}, self.created, None


class PlainGauge:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)

    def samples(self) -> Iterator[tuple[str, dict[str, str], float, Exemplar | None]]:
        yield "", {}, self.value, None


class PlainHistogram:
    """Counts per bucket (not cumulative: one addition an observation), the sum, the exemplars."""

    __slots__ = ("_bounds", "_les", "counts", "created", "exemplars", "sum")

    def __init__(self, bounds: tuple[float, ...], les: tuple[str, ...]) -> None:
        self._bounds = bounds  # ascending, +Inf last
        self._les = les  # the bounds as the exposition writes them
        self.counts = [0] * len(bounds)
        self.exemplars: list[Exemplar | None] = [None] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        self.sum += amount
        i = bisect_left(self._bounds, amount)  # the first bound >= amount, as prometheus_client's
        if i < len(self.counts):  # (only NaN falls past +Inf; it counts in no bucket there either)
            self.counts[i] += 1
            if exemplar:
                self.exemplars[i] = Exemplar(exemplar, amount, time.time())

    def samples(self) -> Iterator[tuple[str, dict[str, str], float, Exemplar | None]]:
        total = 0
        for le, count, exemplar in zip(self._les, self.counts, self.exemplars, strict=True):
            total += count
            yield "_bucket", {"le": le}, total, exemplar
        yield "_count", {}, total, None
        yield "_sum", {}, self.sum, None
        if _client._use_created:
            yield "_created", {}, self.created, None


_C = TypeVar("_C", PlainCounter, PlainGauge, PlainHistogram)


class PlainFamily(Generic[_C]):
    """One metric family: label values → child, registered on ``registry`` as a collector."""

    __slots__ = ("_documentation", "_labelnames", "_name", "_new", "_type", "children")

    def __init__(
        self,
        registry: CollectorRegistry,
        name: str,
        documentation: str,
        kind: str,
        labelnames: Sequence[str],
        new: Callable[[], _C],
    ) -> None:
        self._name, self._documentation, self._type = name, documentation, kind
        self._labelnames = tuple(labelnames)
        self._new: Callable[[], _C] = new
        self.children: dict[tuple[str, ...], _C] = {}
        if not self._labelnames:  # like prometheus_client: an unlabelled family has its one series
            self.labels()
        registry.register(self)

    @classmethod
    def counter(
        cls, registry: CollectorRegistry, name: str, doc: str, labelnames: Sequence[str] = ()
    ) -> PlainFamily[PlainCounter]:
        return PlainFamily(registry, name, doc, "counter", labelnames, PlainCounter)

    @classmethod
    def gauge(
        cls, registry: CollectorRegistry, name: str, doc: str, labelnames: Sequence[str] = ()
    ) -> PlainFamily[PlainGauge]:
        return PlainFamily(registry, name, doc, "gauge", labelnames, PlainGauge)

    @classmethod
    def histogram(
        cls,
        registry: CollectorRegistry,
        name: str,
        doc: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
    ) -> PlainFamily[PlainHistogram]:
        bounds = tuple(float(b) for b in buckets)
        if bounds[-1] != float("inf"):
            bounds += (float("inf"),)
        les = tuple(str(floatToGoString(b)) for b in bounds)  # type: ignore[no-untyped-call]
        return PlainFamily(registry, name, doc, "histogram", labelnames, lambda: PlainHistogram(bounds, les))

    def labels(self, *values: str) -> _C:
        child = self.children.get(values)
        if child is None:
            if len(values) != len(self._labelnames):
                raise ValueError(f"{self._name}: expected labels {self._labelnames}, got {values}")
            child = self.children[values] = self._new()
        return child

    def describe(self) -> list[Metric]:
        return [Metric(self._name, self._documentation, self._type)]

    def collect(self) -> list[Metric]:
        metric = Metric(self._name, self._documentation, self._type)
        name = self._name
        for values, child in list(self.children.items()):
            series = dict(zip(self._labelnames, values, strict=True))
            for suffix, extra, value, exemplar in child.samples():
                metric.samples.append(Sample(name + suffix, series | extra, value, None, exemplar))
        return [metric]

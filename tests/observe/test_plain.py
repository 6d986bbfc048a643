"""The plain families expose exactly what prometheus_client's own metrics would, for the same writes."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics import Counter, Gauge, Histogram
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import CollectorRegistry

from proxy.observe.plain import PlainFamily

BUCKETS = (0.001, 0.01, 0.1, 1.0)
# Values on a bound, between bounds, past the last bound, zero and negative.
OBSERVED = (0.001, 0.0005, 0.01, 0.05, 1.0, 7.5, 0.0, -1.0)


def _expositions(registry: CollectorRegistry) -> list[str]:
    timestamps = re.compile(r"(_created(?:\{[^}]*\})?|# \{[^}]*\} [-0-9.e+]+) [0-9.e+]+")
    text: bytes = generate_latest(registry)
    openmetrics: bytes = generate_openmetrics(registry)  # type: ignore[no-untyped-call]
    return [timestamps.sub(r"\1 T", body.decode()) for body in (text, openmetrics)]


def _write(counter: Any, gauge: Any, histogram: Any, bare: Any) -> None:
    """The same writes through either API (``bare``: an unlabelled gauge's one series)."""
    counter.labels("a", "ok").inc()
    counter.labels("b", "err").inc(3)
    counter.labels("a", "ok").inc(2.5)
    gauge.labels("stdio").inc()
    gauge.labels("http").set(4)
    gauge.labels("stdio").dec(3)
    for i, amount in enumerate(OBSERVED):
        histogram.labels("s").observe(amount, {"trace_id": f"t{i}"} if i % 3 == 0 else None)
    histogram.labels("t").observe(0.2)
    bare.inc()


def test_the_samples_are_prometheus_clients_for_the_same_writes() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    _write(
        PlainFamily.counter(ours, "x_calls", "Calls.", ("server", "outcome")),
        PlainFamily.gauge(ours, "x_open", "Open.", ("transport",)),
        PlainFamily.histogram(ours, "x_seconds", "Seconds.", ("server",), BUCKETS),
        PlainFamily.gauge(ours, "x_in_flight", "In flight.").labels(),
    )
    _write(
        Counter("x_calls", "Calls.", ("server", "outcome"), registry=theirs),
        Gauge("x_open", "Open.", ("transport",), registry=theirs),
        Histogram("x_seconds", "Seconds.", ("server",), buckets=BUCKETS, registry=theirs),
        Gauge("x_in_flight", "In flight.", registry=theirs),
    )
    assert _expositions(ours) == _expositions(theirs)
    assert ours.get_sample_value("x_seconds_bucket", {"server": "s", "le": "0.001"}) == 4  # 0.001 <= 0.001
    assert ours.get_sample_value("x_seconds_count", {"server": "s"}) == len(OBSERVED)


def test_an_unlabelled_family_is_exposed_at_zero_before_any_write() -> None:
    registry = CollectorRegistry()
    PlainFamily.gauge(registry, "x_in_flight", "In flight.")
    assert registry.get_sample_value("x_in_flight") == 0


def test_the_wrong_number_of_label_values_is_refused_and_registers_nothing() -> None:
    registry = CollectorRegistry()
    family = PlainFamily.counter(registry, "x_calls", "Calls.", ("server",))
    with pytest.raises(ValueError, match="expected labels"):
        family.labels("a", "b")
    assert family.children == {}


def test_a_name_taken_on_the_registry_is_refused() -> None:
    registry = CollectorRegistry()
    Counter("x_calls", "Calls.", registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        PlainFamily.counter(registry, "x_calls", "Calls.")

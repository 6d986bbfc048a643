"""The label plumbing: the cardinality guard, the children cache and the in-flight gauge."""

from __future__ import annotations

from prometheus_client.metrics import Counter
from prometheus_client.registry import CollectorRegistry

from proxy.observe.labels import OTHER, UNKNOWN, Bounded, Children, InFlight
from proxy.observe.plain import PlainFamily


def test_bounded_admits_the_first_values_then_says_other() -> None:
    bounded = Bounded(2)
    assert [bounded(v) for v in ("a", "b", "c", "a", None, "")] == ["a", "b", OTHER, "a", UNKNOWN, UNKNOWN]
    assert bounded(OTHER) == OTHER  # the guard's own words never take a place
    assert bounded("d") == OTHER


def test_children_hands_back_the_same_child_for_the_same_labels() -> None:
    registry = CollectorRegistry()
    children = Children(Counter("x", "X.", ["server"], registry=registry))
    children.get("a").inc()
    children.get("a").inc()
    children.get("b").inc()
    assert children.get("a") is children.get("a")
    assert registry.get_sample_value("x_total", {"server": "a"}) == 2.0
    assert registry.get_sample_value("x_total", {"server": "b"}) == 1.0


def test_in_flight_counts_up_inside_and_down_after_even_on_error() -> None:
    registry = CollectorRegistry()
    gauge = PlainFamily.gauge(registry, "open", "Open.", ())
    tracker = InFlight(gauge.labels())
    with tracker, tracker:
        assert registry.get_sample_value("open") == 2.0
    try:
        with tracker:
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert registry.get_sample_value("open") == 0.0

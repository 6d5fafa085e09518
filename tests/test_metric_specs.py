"""The metric table (``METRIC_SPECS``) and the objects ``Metrics`` builds from it."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from connect_bridge.bridge.metrics import LATENCY_BUCKETS, METRIC_SPECS, NAMESPACE, Metrics
from connect_bridge.bridge.stores.store_base import StoreBase, SyncTimes


def test_every_row_is_an_attribute_of_its_kind() -> None:
    metrics = Metrics()
    for spec in METRIC_SPECS:
        assert isinstance(getattr(metrics, spec.attribute), spec.kind), spec.attribute
        assert spec.attribute in Metrics.__annotations__, spec.attribute


def test_rows_are_unique_and_every_attribute_has_a_row() -> None:
    attributes = [spec.attribute for spec in METRIC_SPECS]
    names = [spec.name for spec in METRIC_SPECS]
    assert len(set(attributes)) == len(attributes)
    assert len(set(names)) == len(names)
    declared = {
        name for name, kind in Metrics.__annotations__.items() if kind in ("Counter", "Gauge", "Histogram")
    }
    assert declared == set(attributes)


def test_registered_names_labels_and_buckets_come_from_the_rows() -> None:
    metrics = Metrics()
    families = {family.name: family for family in metrics.registry.collect()}
    for spec in METRIC_SPECS:
        family = families[f"{NAMESPACE}_{spec.name}"]
        assert family.documentation == spec.doc
        assert family.type == {Counter: "counter", Gauge: "gauge", Histogram: "histogram"}[spec.kind]
    metrics.request_latency.labels(api="Heartbeat").observe(0.0002)
    bounds = [
        sample.labels["le"]
        for family in metrics.registry.collect()
        if family.name == f"{NAMESPACE}_request_latency_seconds"
        for sample in family.samples
        if sample.name.endswith("_bucket")
    ]
    assert bounds == [str(b) for b in LATENCY_BUCKETS] + ["+Inf"]


def test_stores_and_partitions_count_syncs_alike() -> None:
    one, store = SyncTimes(), StoreBase()
    for times in (one, store):
        times.count_sync(0.5)
        times.count_sync(0.25)
        assert (times.fsyncs, times.last_fsync_s, times.total_fsync_s) == (2, 0.25, 0.75)
    assert store.compactions == 0

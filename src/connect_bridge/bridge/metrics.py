"""Observability: Prometheus metrics and structured event logs (the endpoint that serves them is
``edge/http.py``).

Each ``Metrics`` owns its registry instead of using prometheus_client's global one, so several
bridges (tests, drills in live mode) can run in one process without "duplicated timeseries" errors.
"""

from __future__ import annotations

import hashlib
import json
import logging
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from connect_bridge.codecs.error_codes import error_name

NAMESPACE = "connect_bridge"
RELAYED = "Relayed"
"""The ``api`` label of answers relayed from the upstream cluster (never decoded: error NONE)."""

LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""100 µs .. 10 s: a local coordinator answer is sub-millisecond, a relayed or durable one is not."""


class LoopCounter(Counter):
    """A Counter whose series count in a plain number, folded into prometheus_client's value when
    collected. prometheus_client takes a lock and checks the series per increment; the request
    counter is incremented once per answer on the event loop, which is also where /metrics is
    rendered (``edge/http.py``), so no other thread ever sees a count half-added."""

    def _metric_init(self) -> None:
        super()._metric_init()
        self._count = 0.0

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        """Count ``amount`` more (never negative, as any Counter)."""
        if exemplar:
            self._fold()
            super().inc(amount, exemplar)
            self._count = self._value.get()
        elif amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        else:
            self._count += amount

    def reset(self) -> None:
        self._count = 0.0
        super().reset()

    def _fold(self) -> None:
        self._value.set(self._count)

    def _child_samples(self) -> Any:
        self._fold()
        return super()._child_samples()


class LoopHistogram(Histogram):
    """A Histogram whose series count in plain numbers (the sum and a count per bucket), folded
    into prometheus_client's values when collected: what ``LoopCounter`` does for a counter, for
    the request latencies observed once per answer on the event loop."""

    def _metric_init(self) -> None:
        super()._metric_init()
        self._tally_sum = 0.0
        self._tally_buckets = [0] * len(self._upper_bounds)

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        """One observation: in the first bucket whose upper bound is at least ``amount``."""
        if exemplar:
            self._fold()
            super().observe(amount, exemplar)
            self._tally_sum = self._sum.get()
            self._tally_buckets = [bucket.get() for bucket in self._buckets]
            return
        self._tally_sum += amount
        self._tally_buckets[bisect_left(self._upper_bounds, amount)] += 1

    def _fold(self) -> None:
        self._sum.set(self._tally_sum)
        for bucket, count in zip(self._buckets, self._tally_buckets, strict=True):
            bucket.set(count)

    def _child_samples(self) -> Any:
        self._fold()
        return super()._child_samples()


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the bridge: the attribute of ``Metrics`` that holds it, its prometheus_client
    kind, its name under ``NAMESPACE``, its help text, its labels and extra options (buckets).
    ``per_request``: updated for every answer, so built as the kind's ``Loop`` form (plain
    numbers, folded in when collected)."""

    attribute: str
    kind: type[Counter] | type[Gauge] | type[Histogram]
    name: str
    doc: str
    labels: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    per_request: bool = False

    @property
    def built_as(self) -> type[Counter] | type[Gauge] | type[Histogram]:
        """The class ``Metrics`` builds the metric with."""
        if self.per_request:
            return {Counter: LoopCounter, Histogram: LoopHistogram}[self.kind]
        return self.kind


METRIC_SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "request_latency",
        Histogram,
        "request_latency_seconds",
        "Time from a request frame's arrival to its response being queued, by API.",
        ("api",),
        {"buckets": LATENCY_BUCKETS},
        per_request=True,
    ),
    MetricSpec(
        "requests",
        Counter,
        "requests",
        "Requests answered, by API and top-level error code name (NONE = success).",
        ("api", "error"),
        per_request=True,
    ),
    MetricSpec(
        "group_epoch", Gauge, "group_epoch", "Current group epoch (classic groups: generation).", ("group",)
    ),
    MetricSpec(
        "members",
        Gauge,
        "group_members",
        "Members by protocol (eager/compatible/sessioned/new) and reconciliation state.",
        ("group", "protocol", "state"),
    ),
    MetricSpec(
        "rebalances",
        Counter,
        "rebalances",
        "Group epoch bumps observed (each one starts a rebalance).",
        ("group",),
    ),
    MetricSpec(
        "fsync_latency",
        Histogram,
        "record_store_fsync_seconds",
        "Record store fsync latency (every state-revealing response waits for one).",
        options={"buckets": LATENCY_BUCKETS},
    ),
    MetricSpec("connections", Gauge, "connections", "Open client connections."),
    MetricSpec(
        "authorizations",
        Counter,
        "authorization_decisions",
        "Group authorization decisions (authorization.enabled), by ACL operation and result.",
        ("operation", "result"),
    ),
    MetricSpec(
        "sasl_authentications",
        Counter,
        "sasl_authentications",
        "Completed SASL exchanges on the listeners, by sasl.mode, mechanism and result "
        "(authenticated, reauthenticated: KIP-368 on the same connection, failed, busy: a PLAIN "
        "password check refused at sasl.max_pending_password_checks).",
        ("mode", "mechanism", "result"),
    ),
    MetricSpec(
        "group_ownership",
        Gauge,
        "group_ownership",
        "Adoption (docs/adoption.md): 1 for the group's current phase (relaying, adopted, ...).",
        ("group", "phase"),
    ),
    MetricSpec(
        "adoption_conflicts",
        Counter,
        "adoption_conflicts",
        "Members found in an adopted group's upstream group that the bridge did not adopt.",
        ("group",),
    ),
    MetricSpec(
        "ha_partitions",
        Gauge,
        "ha_partitions",
        "Several bridges (ha.enabled): state-topic partitions by this bridge's view of their owner "
        "(owner = the owning bridge's node id; this bridge's own have self=\"true\").",
        ("partition", "owner", "self"),
    ),
    MetricSpec(
        "ha_lease",
        Gauge,
        "ha_lease_valid",
        "1 while this bridge's membership in the bridges' group is fresh (it answers for its "
        "partitions only then).",
    ),
    MetricSpec(
        "ha_fenced",
        Counter,
        "ha_fenced_partitions",
        "Partitions this bridge lost because another bridge fenced its writes (a zombie bridge).",
    ),
    MetricSpec(
        "relayed_requests",
        Counter,
        "relayed_requests",
        "Requests relayed to the upstream brokers, by client kind: task-producer, task-consumer, "
        "task-dlq-producer and task-admin are a connector task's clients, whose data could go "
        'straight to the brokers (docs/upstream.md, "Coordination only"); other is the rest.',
        ("client_kind",),
    ),
    MetricSpec(
        "relayed_bytes",
        Counter,
        "relayed_request_bytes",
        "Bytes of the requests relayed to the upstream brokers, by client kind (as relayed_requests).",
        ("client_kind",),
    ),
    MetricSpec(
        "admin_refused",
        Counter,
        "admin_requests_refused",
        "Admin endpoint requests answered 403: not from loopback, without a verified client "
        "certificate, and admin_allow_remote off (docs/security.md).",
    ),
)
"""Every metric the bridge exports, as data: adding one is a row here (and its attribute on
``Metrics``), and the names, help texts and labels a scraper sees are reviewable in one place."""


_RequestSeries = tuple[LoopHistogram, LoopCounter]
"""One (api, error) series of answers: its latency histogram and its count (both ``per_request``)."""


class Metrics:
    """The bridge's metrics, in a registry of their own (one attribute per ``METRIC_SPECS`` row)."""

    request_latency: Histogram
    requests: Counter
    group_epoch: Gauge
    members: Gauge
    rebalances: Counter
    fsync_latency: Histogram
    connections: Gauge
    authorizations: Counter
    sasl_authentications: Counter
    group_ownership: Gauge
    adoption_conflicts: Counter
    ha_partitions: Gauge
    ha_lease: Gauge
    ha_fenced: Counter
    admin_refused: Counter
    relayed_requests: Counter
    relayed_bytes: Counter

    def __init__(self, group_ids: bool = True) -> None:
        self.group_ids = group_ids
        """``metrics_group_ids``: label per-group series with the group id; False: ``group_label``'s hash."""
        self._request_children: dict[tuple[str, int | str], _RequestSeries] = {}
        """The latency histogram and the count of each (api, error) series, resolved once."""
        self.registry = CollectorRegistry(auto_describe=True)
        for spec in METRIC_SPECS:
            setattr(
                self,
                spec.attribute,
                self._metric(spec.built_as, spec.name, spec.doc, spec.labels, **spec.options),
            )
        self._epochs: dict[str, int] = {}
        self._member_series: dict[str, set[tuple[str, str]]] = {}
        self._rebalance_series: set[str] = set()
        self._relayed_children: dict[str, tuple[Any, Any]] = {}

    def observe_relayed(self, client_kind: str, size: int) -> None:
        """One relayed request of ``size`` bytes from a client of ``client_kind``."""
        children = self._relayed_children.get(client_kind)
        if children is None:
            children = self._relayed_children[client_kind] = (
                self.relayed_requests.labels(client_kind=client_kind),
                self.relayed_bytes.labels(client_kind=client_kind),
            )
        children[0].inc()
        children[1].inc(size)

    def _metric(self, kind: Any, name: str, doc: str, labels: Sequence[str] = (), **options: Any) -> Any:
        """One metric of ``kind`` (Counter, Gauge, Histogram) in this registry, under ``NAMESPACE``."""
        return kind(name, doc, labels, namespace=NAMESPACE, registry=self.registry, **options)

    def group_label(self, group_id: str) -> str:
        """The ``group`` label of ``group_id``'s series: the id, or with ``group_ids`` off
        ``sha256:`` and 12 hex digits of its SHA-256 (/metrics answers whoever reaches the listener,
        while ListGroups shows a group only to principals allowed to describe it). A hash of a
        guessable id can be confirmed by hashing the guess: it hides names, it is not a secret."""
        if self.group_ids:
            return group_id
        return "sha256:" + hashlib.sha256(group_id.encode("utf-8")).hexdigest()[:12]

    def observe_ownership(self, group_id: str, phase: Any) -> None:
        """An adopted group's phase changed: its gauge is 1 for the current phase only."""
        label = self.group_label(group_id)
        for known in ("relaying", "adopted", "releasing", "released"):
            self.group_ownership.labels(label, known).set(1 if str(phase) == known else 0)

    def observe_ha(self, owners: Mapping[int, str], mine: Iterable[int], lease_valid: bool) -> None:
        """The partition map as this bridge sees it: one series per partition, for its owner."""
        held = set(mine)
        self.ha_partitions.clear()
        for partition, owner in sorted(owners.items()):
            self.ha_partitions.labels(str(partition), owner, str(partition in held).lower()).set(1)
        self.ha_lease.set(1 if lease_valid else 0)

    def observe_request(self, api: str, seconds: float, error: int | str = 0) -> None:
        """Record one answered request; ``error`` is a Kafka error code or its name. Once per
        answer: the latency and the count go straight into the series' plain numbers
        (``LoopHistogram``, ``LoopCounter``, folded in when collected), without a call each."""
        series = self._request_children.get((api, error))
        if series is None:  # label lookups cost more than the observation: resolve them once
            name = error_name(error) if isinstance(error, int) else error
            series = (self.request_latency.labels(api=api), self.requests.labels(api=api, error=name))
            self._request_children[(api, error)] = series
        latency, count = series
        latency._tally_sum += seconds
        latency._tally_buckets[bisect_left(latency._upper_bounds, seconds)] += 1
        count._count += 1

    def observe_fsync(self, seconds: float) -> None:
        """One fsync of the record store (every state-revealing answer waits for one)."""
        self.fsync_latency.observe(seconds)

    def observe_group(self, group_id: str, group_epoch: int, members: Iterable[tuple[str, str]]) -> None:
        """Publish a group's state after a coordinator step.

        ``members`` yields (protocol, state) per member. A rebalance is counted when the epoch grows
        past the last one seen; the first sighting of a group (e.g. after replay at start) only sets
        the baseline, and a lower epoch (group deleted and recreated) resets it. Member series that
        no longer occur are removed, not left at their last value.
        """
        counts: dict[tuple[str, str], int] = {}
        for protocol, state in members:
            key = (str(protocol), str(state))
            counts[key] = counts.get(key, 0) + 1
        self.observe_group_counts(group_id, group_epoch, counts)

    def observe_group_counts(
        self, group_id: str, group_epoch: int, counts: Mapping[tuple[str, str], int]
    ) -> None:
        """:meth:`observe_group` with the members already counted per (protocol, state)."""
        label = self.group_label(group_id)
        previous = self._epochs.get(group_id)
        if previous is not None and group_epoch > previous:
            self.rebalances.labels(group=label).inc()
            self._rebalance_series.add(group_id)
        self._epochs[group_id] = group_epoch
        self.group_epoch.labels(group=label).set(group_epoch)

        counts = {key: n for key, n in counts.items() if n}
        for protocol, state in self._member_series.get(group_id, set()) - counts.keys():
            self.members.remove(label, protocol, state)
        for (protocol, state), count in counts.items():
            self.members.labels(group=label, protocol=protocol, state=state).set(count)
        self._member_series[group_id] = set(counts)

    def observe_groups(
        self,
        group_ids: Iterable[str],
        view: Callable[[str], tuple[int, Mapping[tuple[str, str], int]] | None],
    ) -> None:
        """Refresh the series of ``group_ids``, as ``view`` (the coordinator's ``metrics_view``) sees
        them now; a group it no longer has (None) has its series dropped."""
        for gid in group_ids:
            seen = view(gid)
            if seen is None:
                self.forget_group(gid)
            else:
                self.observe_group_counts(gid, *seen)

    def forget_group(self, group_id: str) -> None:
        """Drop every series of a deleted group, its rebalance counter included: series of groups
        that no longer exist would otherwise pile up for good as clients create and delete groups
        (a group created again starts from its first sighting, which Prometheus reads as a reset)."""
        label = self.group_label(group_id)
        for protocol, state in self._member_series.pop(group_id, set()):
            self.members.remove(label, protocol, state)
        if self._epochs.pop(group_id, None) is not None:
            self.group_epoch.remove(label)
        if group_id in self._rebalance_series:
            self._rebalance_series.discard(group_id)
            self.rebalances.remove(label)

    @property
    def observed_groups(self) -> frozenset[str]:
        """The groups that currently have series."""
        return frozenset(self._epochs)

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)


def log_event(logger: logging.Logger, event: str, /, **fields: Any) -> None:
    """Log one JSON object ``{"event": ..., **fields}`` at INFO, e.g. a rebalance decision.

    One object per line with fixed keys (group, member, epoch, ...) lets log pipelines filter a
    group's history without parsing prose. Values JSON cannot encode are logged with ``str``.
    """
    if logger.isEnabledFor(logging.INFO):
        logger.info(json.dumps({"event": event, **fields}, default=str, separators=(",", ":")))

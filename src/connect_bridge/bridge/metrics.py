"""Observability: Prometheus metrics, the /metrics /livez /readyz endpoint, structured event logs.

Each ``Metrics`` owns its registry instead of using prometheus_client's global one, so several
bridges (tests, drills in live mode) can run in one process without "duplicated timeseries" errors.
The HTTP endpoint is a few lines over the bridge's own accept loop (``server_accept``, which counts a
connection from accept, before its TLS handshake): it serves three fixed paths to a scraper and a
kubelet, which does not justify an HTTP framework dependency.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from ssl import SSLContext
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from connect_bridge.bridge.admin_access import TOKEN_FILE_PATH, AdminAccess
from connect_bridge.bridge.connection_settings import ConnectionSettings
from connect_bridge.bridge.server_accept import ConnectionSlots, Listener, Slot, start_listener
from connect_bridge.bridge.server_connection import RateLimited
from connect_bridge.codecs.error_codes import error_name

NAMESPACE = "connect_bridge"

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

HTTP_READ_TIMEOUT_S = 5.0
"""Default time from accept to a whole request head, TLS handshake included
(``metrics_request_timeout_ms``): one deadline for the head, not one per line, or a client sending a
header line every few seconds holds its connection for ever (slowloris)."""
HTTP_MAX_CONNECTIONS = 64
"""Default connections held at once, counted from accept (``metrics_max_connections``); past it a
new one is closed at once (503 first on plaintext). Scrapers and probes open one connection at a
time."""
HTTP_MAX_LINE = 8192
HTTP_MAX_HEADERS = 100
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the bridge: the attribute of ``Metrics`` that holds it, its prometheus_client
    kind, its name under ``NAMESPACE``, its help text, its labels and extra options (buckets)."""

    attribute: str
    kind: type[Counter] | type[Gauge] | type[Histogram]
    name: str
    doc: str
    labels: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)


METRIC_SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "request_latency",
        Histogram,
        "request_latency_seconds",
        "Time from a request frame's arrival to its response being queued, by API.",
        ("api",),
        {"buckets": LATENCY_BUCKETS},
    ),
    MetricSpec(
        "requests",
        Counter,
        "requests",
        "Requests answered, by API and top-level error code name (NONE = success).",
        ("api", "error"),
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
        "straight to the brokers (docs/upstream.md, \"Coordination only\"); other is the rest.",
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
        self._request_children: dict[tuple[str, int | str], tuple[Any, Any]] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        for spec in METRIC_SPECS:
            setattr(
                self,
                spec.attribute,
                self._metric(spec.kind, spec.name, spec.doc, spec.labels, **spec.options),
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
        """Record one answered request; ``error`` is a Kafka error code or its name."""
        children = self._request_children.get((api, error))
        if children is None:  # label lookups cost more than the observation: resolve them once
            name = error_name(error) if isinstance(error, int) else error
            children = (self.request_latency.labels(api=api), self.requests.labels(api=api, error=name))
            self._request_children[(api, error)] = children
        children[0].observe(seconds)
        children[1].inc()

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


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    503: "Service Unavailable",
}


Admin = Callable[[str, str], Awaitable[tuple[int, bytes]]]
"""An admin handler: (method, path) to (HTTP status, JSON body)."""


async def start_http(
    host: str,
    port: int,
    metrics: Metrics,
    ready: Callable[[], bool],
    ssl: SSLContext | None = None,
    admin: Admin | None = None,
    admin_access: AdminAccess | None = None,
    *,
    max_connections: int = HTTP_MAX_CONNECTIONS,
    request_timeout_s: float = HTTP_READ_TIMEOUT_S,
) -> Listener:
    """Serve GET/HEAD /metrics, /livez and /readyz on ``host:port`` (port 0 = any free port).

    /livez answers 200 while the event loop runs (so a wedged loop fails it); /readyz answers 200
    only when ``ready()`` is true (state replayed, listener up), otherwise 503. One request per
    connection (``Connection: close``): scrapers and probes open a new connection each time anyway.
    With ``ssl`` (``metrics_tls:``, a ``ReloadingServerContext``'s context) it is HTTPS.
    ``admin``: answers ``/admin/...`` (GET and POST; ``server_admin.py``) to the peers
    ``admin_access`` lets in (default: loopback and verified client certificates, refusals counted in
    ``admin_refused``); anyone else gets 403 (``admin_access.py``: this listener is often open to the
    network for the scraper), and a state-changing request without the admin token 401.
    At most ``max_connections`` are held at once, counted from accept (before the TLS handshake;
    at most half of them in a handshake, a quarter from one address); a plaintext connection past
    it is answered 503 and closed, a TLS one closed at accept. The TLS handshake and the request
    head must arrive within ``request_timeout_s`` of the accept (one deadline for both).
    """
    gate = admin_access if admin_access is not None else AdminAccess(refused=metrics.admin_refused.inc)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, slot: Slot) -> None:
        try:
            peer = (writer.get_extra_info("peername"), writer.get_extra_info("peercert"))
            # One deadline from accept: the TLS handshake and the request head share it.
            left_s = max(0.0, request_timeout_s - (time.monotonic() - slot.accepted))
            status, content_type, body, head_only = await _respond(
                reader, metrics, ready, admin, gate, peer, left_s
            )
            reason = _REASONS.get(status, "")
            headers = [
                f"HTTP/1.1 {status} {reason}",
                f"Content-Type: {content_type}",
                f"Content-Length: {len(body)}",
                "Connection: close",
            ]
            if status == 405:
                headers.append("Allow: GET, HEAD")
            if status == 401:
                headers.append('WWW-Authenticate: Bearer realm="connect-bridge admin"')
            writer.write(("\r\n".join(headers) + "\r\n\r\n").encode("ascii"))
            if not head_only:
                writer.write(body)
            await writer.drain()
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the client went away or stalled; nothing to answer
        finally:
            slots.release(slot)
            writer.close()
            try:
                await writer.wait_closed()
            except ConnectionError:
                pass

    # Counted from accept, before the TLS handshake (``server_accept``), as on the worker listener:
    # a socket that never finishes its handshake holds a place until the deadline. At most half of
    # the places may be in a handshake at once, and a quarter from one address, so a peer flooding
    # handshakes from one address leaves a scraper from another its places.
    slots = ConnectionSlots(
        max_connections,
        ConnectionSettings(max_unauthenticated_per_address=max(1, max_connections // 4)),
        names=("metrics_max_connections", "half of metrics_max_connections in a TLS handshake"),
    )
    listener = await start_listener(
        handle,
        host,
        port,
        slots,
        tls=ssl,
        handshake_timeout_ms=max(1, round(request_timeout_s * 1000)),
        limit=HTTP_MAX_LINE,
        refused=RateLimited(),
        sasl=False,
        turn_away=None if ssl is not None else _busy,
    )
    await listener.start_serving()
    return listener


def _busy(sock: socket.socket) -> None:
    """A plaintext connection past ``metrics_max_connections`` is answered 503 before it is closed
    (unread; a TLS one is closed at accept: an answer would need a handshake first)."""
    sock.send(_BUSY)


async def _respond(
    reader: asyncio.StreamReader,
    metrics: Metrics,
    ready: Callable[[], bool],
    admin: Admin | None = None,
    gate: AdminAccess | None = None,
    peer: tuple[Any, Any] = (None, None),
    request_timeout_s: float = HTTP_READ_TIMEOUT_S,
) -> tuple[int, str, bytes, bool]:
    text = "text/plain; charset=utf-8"
    headers: dict[str, str] = {}
    try:
        async with asyncio.timeout(request_timeout_s):  # the whole head, not each line
            request_line = await reader.readline()
            for _ in range(HTTP_MAX_HEADERS):
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                name, sep, value = line.decode("latin-1").partition(":")
                if sep:
                    headers.setdefault(name.strip().lower(), value.strip())
            else:
                return 400, text, b"too many headers\n", False
    except (ValueError, asyncio.LimitOverrunError):  # a line longer than the stream limit
        return 400, text, b"line too long\n", False
    parts = request_line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return 400, text, b"bad request line\n", False
    method, target = parts[0], parts[1]
    if admin is not None and target.startswith("/admin/"):
        # fail closed: loopback only by default, Host/Origin checked, the token for a change
        refused = (gate or AdminAccess()).request_refusal(method, headers, *peer)
        if refused is not None:
            status, why = refused
            return status, "application/json", (json.dumps({"message": why}) + "\n").encode(), False
        if method == "GET" and target.split("?", 1)[0] == TOKEN_FILE_PATH and gate is not None:
            where = str(gate.token_file) if gate.token_file is not None else None
            return 200, "application/json", (json.dumps({"token_file": where}) + "\n").encode(), False
    if admin is not None and target.startswith("/admin/") and method in ("GET", "POST"):
        status, body = await admin(method, target.split("?", 1)[0])
        return status, "application/json", body, False
    if method not in ("GET", "HEAD"):
        return 405, text, b"method not allowed\n", False
    head_only = method == "HEAD"
    path = target.split("?", 1)[0]
    if path == "/metrics":
        return 200, CONTENT_TYPE_LATEST, metrics.render(), head_only
    if path == "/livez":
        return 200, text, b"ok\n", head_only
    if path == "/readyz":
        try:
            is_ready = bool(ready())
        except Exception:
            log.exception("readiness check failed")
            is_ready = False
        return (200, text, b"ready\n", head_only) if is_ready else (503, text, b"not ready\n", head_only)
    return 404, text, b"not found\n", head_only

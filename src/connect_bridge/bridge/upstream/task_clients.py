"""Which relayed clients carry connector data: a Connect task's producer, consumer, dead letter
queue producer and admin client, recognised by the client ids Connect gives them.

In proxy mode a worker whose ``bootstrap.servers`` points at the bridge sends its tasks' records
through the relay too, unless its ``producer.``/``consumer.``/``admin.`` prefixed settings send
them straight to the brokers (the coordination-only deployment, docs/upstream.md). The bridge
counts relayed requests and bytes per client kind and says once, in the log, which worker settings
would take the data off it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import StrEnum

from connect_bridge.codecs.requests import peek_client_id

log = logging.getLogger("connect_bridge.server")


class ClientKind(StrEnum):
    """A relayed client, by what its traffic is (the ``client_kind`` label of the relay metrics)."""

    TASK_PRODUCER = "task-producer"
    TASK_CONSUMER = "task-consumer"
    TASK_DLQ_PRODUCER = "task-dlq-producer"
    TASK_ADMIN = "task-admin"
    OTHER = "other"
    """A worker's own clients (group membership, config/offset/status topics) and tools."""

    @property
    def carries_task_data(self) -> bool:
        return self is not ClientKind.OTHER


CLIENT_ID_PREFIXES: tuple[tuple[str, ClientKind], ...] = (
    ("connector-dlq-producer-", ClientKind.TASK_DLQ_PRODUCER),
    ("connector-producer-", ClientKind.TASK_PRODUCER),
    ("connector-consumer-", ClientKind.TASK_CONSUMER),
    ("connector-adminclient-", ClientKind.TASK_ADMIN),
)
"""Connect's client ids for a task's clients (``<prefix><connector>-<task>``), longest prefix first."""

WORKER_SETTING: dict[ClientKind, str] = {
    ClientKind.TASK_PRODUCER: "producer.bootstrap.servers",
    ClientKind.TASK_DLQ_PRODUCER: "producer.bootstrap.servers",
    ClientKind.TASK_CONSUMER: "consumer.bootstrap.servers",
    ClientKind.TASK_ADMIN: "admin.bootstrap.servers",
}
"""The worker setting that sends a task client of that kind straight to the brokers."""


def client_kind(client_id: str | None) -> ClientKind:
    """What a relayed client is, from its client id (a client id a user chose is ``OTHER``)."""
    if client_id:
        for prefix, kind in CLIENT_ID_PREFIXES:
            if client_id.startswith(prefix):
                return kind
    return ClientKind.OTHER


TASK_CLIENTS_KEPT = 256
"""Task clients remembered for ``GET /admin/relay`` (one per host and kind, the first client id)."""


class RelayedClients:
    """Counts relayed requests per client kind and logs the first task client once.

    A connection's kind is read from its first relayed request (a Kafka client keeps one client id
    per connection); the caller keeps it on the connection and passes it back."""

    def __init__(self, count: Callable[[ClientKind, int], None]) -> None:
        self.count = count
        """Counts one relayed request of that kind and size (``Metrics.observe_relayed``)."""
        self.told = False
        self.totals: dict[ClientKind, list[int]] = {}
        """Requests and bytes relayed per kind since start (``GET /admin/relay``)."""
        self.task_clients: dict[tuple[str, ClientKind], str] = {}
        """(host, kind) -> the first task client id seen from it; at most ``TASK_CLIENTS_KEPT``."""

    def observe(self, kind: ClientKind | None, payload: bytes, host: str) -> ClientKind:
        """Count one relayed request (``payload``: unframed); returns the connection's kind."""
        if kind is None:
            client_id = peek_client_id(payload)
            kind = client_kind(client_id)
            if kind.carries_task_data and len(self.task_clients) < TASK_CLIENTS_KEPT:
                self.task_clients.setdefault((host, kind), client_id or "")
            if kind.carries_task_data and not self.told:
                self.told = True
                log.warning(
                    "connector task data passes through the bridge (client %s from %s): to send "
                    "task records straight to the brokers, set producer.bootstrap.servers, "
                    "consumer.bootstrap.servers and admin.bootstrap.servers (with their security "
                    'settings) on every worker (docs/upstream.md, "Coordination only")',
                    client_id,
                    host,
                )
        self.count(kind, len(payload))
        total = self.totals.get(kind)
        if total is None:
            total = self.totals[kind] = [0, 0]
        total[0] += 1
        total[1] += len(payload)
        return kind

    def status(self) -> dict[str, object]:
        """What ``GET /admin/relay`` answers (and ``describe --admin`` shows)."""
        return {
            "relayed": {str(k): {"requests": n, "bytes": b} for k, (n, b) in sorted(self.totals.items())},
            "task_clients": [
                {"host": host, "client_kind": str(kind), "client_id": client_id}
                for (host, kind), client_id in sorted(self.task_clients.items())
            ],
        }

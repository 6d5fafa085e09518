"""The relay tells a connector task's clients from the rest by Connect's client ids, read from the
request header alone (no socket, no broker)."""

from __future__ import annotations

import logging

import pytest
from kafka.protocol.metadata import MetadataRequest

from connect_bridge.bridge.upstream.task_clients import ClientKind, RelayedClients, client_kind
from connect_bridge.codecs.requests import peek_client_id


@pytest.mark.parametrize(
    ("client_id", "kind"),
    [
        ("connector-producer-orders-0", ClientKind.TASK_PRODUCER),
        ("connector-consumer-sink-12", ClientKind.TASK_CONSUMER),
        ("connector-dlq-producer-sink-3", ClientKind.TASK_DLQ_PRODUCER),
        ("connector-adminclient-orders-1", ClientKind.TASK_ADMIN),
        ("connect-cluster-a--configs", ClientKind.OTHER),  # a worker's own client
        ("producer-1", ClientKind.OTHER),
        ("", ClientKind.OTHER),
        (None, ClientKind.OTHER),
    ],
)
def test_client_kind_from_connect_client_ids(client_id: str | None, kind: ClientKind) -> None:
    assert client_kind(client_id) is kind


def _payload(client_id: str | None, version: int = 9) -> bytes:
    """An unframed Metadata request (v9: a flexible header, whose client id is still non-compact)."""
    request = MetadataRequest[version](topics=[], allow_auto_topic_creation=False)
    request.with_header(correlation_id=7, client_id=client_id)
    return request.encode(header=True, framed=False)


@pytest.mark.parametrize("version", [1, 9])
def test_the_client_id_is_read_from_the_header_alone(version: int) -> None:
    assert peek_client_id(_payload("connector-producer-x-0", version)) == "connector-producer-x-0"
    assert peek_client_id(_payload(None, version)) is None
    assert peek_client_id(b"\x00\x03\x00\x09\x00\x00\x00\x07\x00\x40ab") is None  # length past the end
    assert peek_client_id(b"\x00\x03") is None


def test_a_task_client_is_counted_by_kind_and_told_once(caplog: pytest.LogCaptureFixture) -> None:
    counted: list[tuple[ClientKind, int]] = []
    clients = RelayedClients(lambda kind, size: counted.append((kind, size)))
    worker = _payload("connect-1")
    task = _payload("connector-producer-orders-0")
    with caplog.at_level(logging.WARNING, "connect_bridge.server"):
        assert clients.observe(None, worker, "10.0.0.5") is ClientKind.OTHER
        kind = clients.observe(None, task, "10.0.0.5")
        assert clients.observe(kind, task, "10.0.0.5") is ClientKind.TASK_PRODUCER  # kept per connection
        clients.observe(None, _payload("connector-consumer-orders-0"), "10.0.0.6")
    assert counted == [
        (ClientKind.OTHER, len(worker)),
        (ClientKind.TASK_PRODUCER, len(task)),
        (ClientKind.TASK_PRODUCER, len(task)),
        (ClientKind.TASK_CONSUMER, len(_payload("connector-consumer-orders-0"))),
    ]
    told = [r.getMessage() for r in caplog.records if "task data passes through" in r.getMessage()]
    assert len(told) == 1
    assert "connector-producer-orders-0 from 10.0.0.5" in told[0]
    assert "producer.bootstrap.servers" in told[0] and "admin.bootstrap.servers" in told[0]


def test_the_admin_status_names_each_task_client_once_per_host_and_kind() -> None:
    clients = RelayedClients(lambda kind, size: None)
    for client_id, host in [
        ("connector-producer-orders-0", "/10.0.0.5"),
        ("connector-producer-orders-1", "/10.0.0.5"),  # same host and kind: the first id stays
        ("connector-consumer-sink-0", "/10.0.0.6"),
        ("connect-1", "/10.0.0.6"),
    ]:
        clients.observe(None, _payload(client_id), host)
    status = clients.status()
    assert status["task_clients"] == [
        {"host": "/10.0.0.5", "client_kind": "task-producer", "client_id": "connector-producer-orders-0"},
        {"host": "/10.0.0.6", "client_kind": "task-consumer", "client_id": "connector-consumer-sink-0"},
    ]
    relayed = status["relayed"]
    assert isinstance(relayed, dict)
    assert {k: v["requests"] for k, v in relayed.items()} == {
        "other": 1,
        "task-consumer": 1,
        "task-producer": 2,
    }

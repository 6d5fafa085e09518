"""Listeners bound to one address and advertised as another (a NAT, a load balancer, a Kubernetes
Service that maps ports), against a real Kafka 4.3.1 broker.

The bridge binds 127.0.0.1 (the worker listener and the relay listener of broker N on
``proxy_base_port + N``); it is told to advertise ``127.0.0.2`` and ``advertised_proxy_base_port``.
A port forwarder in the test stands for the NAT: 127.0.0.2:Q+N → 127.0.0.1:proxy_base_port+N.
Every address the bridge hands out (Metadata, FindCoordinator for its own Connect group and for
the broker's consumer group) must be the advertised one, and a real producer and a consumer group
that bootstrap at the advertised address move their records through the forwarder alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.wire.client import KafkaConnection
from kafka_fixtures import BROKER_NODE_ID, BridgeProcess, KafkaBroker, start_bridge
from kafka_processes import free_ports
from polling import wait_until

COORDINATOR_NOT_AVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
ADVERTISED_HOST = "127.0.0.2"
"""Another loopback address (Linux routes all of 127/8 to lo): what clients are told."""


class PortForwarder:
    """A NAT in miniature: accepts on ``listen`` and pipes each connection to ``target``; counts
    the connections it carried."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.listen, self.target = listen, target
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="nat", daemon=True)
        self.server: asyncio.Server | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._pipe, *self.listen))
        self.ready.set()
        self.loop.run_forever()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))

    def __enter__(self) -> PortForwarder:
        self.thread.start()
        assert self.ready.wait(10), "the forwarder did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        def stop() -> None:
            assert self.server is not None
            self.server.close()
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.loop.stop()

        self.loop.call_soon_threadsafe(stop)
        self.thread.join(10)


@pytest.fixture
def natted_bridge(kafka_broker: KafkaBroker, tmp_path: Path) -> Iterator[tuple[BridgeProcess, PortForwarder]]:
    advertised_port, metrics_port = free_ports(2)
    bridge = start_bridge(
        kafka_broker.bootstrap,
        tmp_path / "bridge",
        metrics_listen=f"127.0.0.1:{metrics_port}",
        settings={
            "advertised_host": ADVERTISED_HOST,
            "advertised_proxy_base_port": advertised_port - BROKER_NODE_ID,
        },
    )
    try:
        target = (bridge.host, bridge.proxy_base_port + BROKER_NODE_ID)
        with PortForwarder((ADVERTISED_HOST, advertised_port), target) as nat:
            yield bridge, nat
    finally:
        bridge.stop()


def _ask(port: int, request: Any, version: int) -> Any:
    async def go() -> Any:
        conn = await KafkaConnection.connect(ADVERTISED_HOST, port, "nat-test")
        try:
            return await conn.request(request, version)
        finally:
            await conn.close()

    return asyncio.run(asyncio.wait_for(go(), 20))


def test_every_address_handed_out_is_the_advertised_one(
    natted_bridge: tuple[BridgeProcess, PortForwarder],
) -> None:
    bridge, nat = natted_bridge
    port = nat.listen[1]
    metadata = _ask(port, MetadataRequest[1](topics=[]), 1)
    assert [(b.node_id, b.host, b.port) for b in metadata.brokers] == [
        (BROKER_NODE_ID, ADVERTISED_HOST, port)
    ]
    for key in ("connect-cluster-nat", "app-consumers"):  # the bridge's own group, the broker's group
        answers: list[tuple[int, str, int]] = []

        def found(key: str = key, answers: list[tuple[int, str, int]] = answers) -> bool:
            request = FindCoordinatorRequest[4](key_type=0, coordinator_keys=[key])
            [c] = _ask(port, request, 4).coordinators
            answers.append((c.error_code, c.host, c.port))
            return c.error_code != COORDINATOR_NOT_AVAILABLE  # a fresh broker creates its offsets topic

        wait_until(found, 30, 0.3)
        assert answers[-1] == (0, ADVERTISED_HOST, port), (key, answers)
    assert bridge.proxy_base_port + BROKER_NODE_ID != port  # bound and advertised ports differ


def test_a_producer_and_a_consumer_group_work_through_the_advertised_address(
    natted_bridge: tuple[BridgeProcess, PortForwarder],
) -> None:
    """And the relay tells a connector task's clients (Connect's client ids) from the rest: in its
    metrics by client kind, and in one log line naming the worker settings that would take the
    task data off the bridge."""
    bridge, nat = natted_bridge
    bootstrap = f"{ADVERTISED_HOST}:{nat.listen[1]}"
    topic = f"nat-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, request_timeout_ms=20000, client_id="connector-producer-orders-0"
    )
    try:
        for i in range(5):
            producer.send(topic, f"r{i}".encode()).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"nat-group-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        client_id="connector-consumer-orders-0",
    )
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(values) < 5 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
    finally:
        consumer.close()
    assert values == [f"r{i}".encode() for i in range(5)]
    assert nat.connections >= 2  # producer and consumer both came in through the NAT

    with urllib.request.urlopen(f"http://{bridge.metrics_listen}/metrics", timeout=10) as answer:
        metrics = answer.read().decode()
    relayed = {
        kind: float(value)
        for kind, value in re.findall(
            r'^connect_bridge_relayed_requests_total\{client_kind="([^"]+)"\} (\S+)$', metrics, re.M
        )
    }
    assert relayed.get("task-producer", 0) >= 5  # at least one Produce per record sent
    assert relayed.get("task-consumer", 0) >= 1
    assert "task-admin" not in relayed and "task-dlq-producer" not in relayed
    told = [line for line in bridge.log_path.read_text().splitlines() if "task data passes through" in line]
    assert len(told) == 1, told  # once, naming the worker settings
    assert "producer.bootstrap.servers" in told[0] and "consumer.bootstrap.servers" in told[0]

    # describe --admin names the task clients and the settings (GET /admin/relay).
    command = [sys.executable, "-m", "connect_bridge.cli", "describe"]
    described = subprocess.run(
        [*command, "--bootstrap-server", bridge.bootstrap, "--admin", bridge.metrics_listen],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert described.returncode == 0, described.stderr
    footer = described.stdout.strip().splitlines()[-1]
    assert footer.startswith("connector task data passes through this bridge: "), described.stdout
    assert "connector-producer-orders-0 from /127.0.0.1" in footer
    assert "connector-consumer-orders-0 from /127.0.0.1" in footer
    assert "set consumer.bootstrap.servers, producer.bootstrap.servers on those workers" in footer

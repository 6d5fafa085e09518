"""TLS end to end (issue 15): real clients -> TLS -> ``connect-bridge serve --upstream`` -> TLS -> the
secured Apache Kafka 4.3.1 broker's SSL listener (``tests/kafka_secure.py``).

One bridge process serves every check, to keep process starts few: its listeners (worker and proxy)
require a client certificate, its own upstream connections (discovery, relay links, the state topic,
the config topic) present the client certificate to the broker's SSL listener. Through it:
kafka-python produces and consumes in a consumer group (the broker's group, relayed); a client
without a certificate is refused; a real Java Connect worker with ``security.protocol=SSL`` joins its
group, which the bridge coordinates; ``connect-bridge describe --ca-file --cert --key`` shows it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from connect_bridge.wire.client import ClientError, KafkaConnection
from kafka_fixtures import BROKER_NODE_ID, BridgeProcess, ConnectWorker
from kafka_secure import SecureKafka
from polling import wait_until
from tansu import unique_topic

RECORDS = 200


def bridge_tls(kafka: SecureKafka) -> dict[str, Any]:
    """``tls`` (client certificates required) and ``upstream_tls`` (the broker's CA, our client
    certificate) settings blocks."""
    m = kafka.material
    return {
        "tls": {
            "certfile": str(m.server_cert),
            "keyfile": str(m.server_key),
            "cafile": str(m.ca_cert),
            "client_auth": "required",
        },
        "upstream_tls": {
            "cafile": str(m.ca_cert),
            "certfile": str(m.client_cert),
            "keyfile": str(m.client_key),
        },
    }


def produce_and_consume(kafka: SecureKafka, bootstrap: str, topic: str, group: str) -> list[bytes]:
    """``RECORDS`` records produced through ``bootstrap`` over TLS, then read back by a consumer in
    ``group`` (subscribe: FindCoordinator, JoinGroup, SyncGroup, OffsetCommit all over TLS)."""
    from kafka import KafkaConsumer, KafkaProducer

    tls = {"security_protocol": "SSL", "ssl_context": kafka.ssl_context()}
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **tls)
    try:
        for i in range(RECORDS):
            producer.send(topic, f"value-{i}".encode())
        producer.flush(30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        consumer_timeout_ms=20000,
        **tls,
    )
    got: list[bytes] = []
    try:
        for message in consumer:
            got.append(message.value)
            if len(got) == RECORDS:
                break
        consumer.commit()
    finally:
        consumer.close()
    return got


def refused_without_certificate(kafka: SecureKafka, port: int) -> bool:
    """A TLS client without a certificate gets no answer from a ``client_auth: required`` listener."""

    async def attempt() -> bool:
        try:
            conn = await KafkaConnection.connect("127.0.0.1", port, ssl=kafka.ssl_context(client_cert=False))
            from kafka.protocol.metadata import ApiVersionsRequest

            await conn.request(ApiVersionsRequest(), 0, timeout=10)
        except (ClientError, OSError, TimeoutError):
            return True
        await conn.close()
        return False

    return asyncio.run(attempt())


def describe_cli(bridge: BridgeProcess, group: str, *tls: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "connect_bridge.cli",
            "describe",
            "--bootstrap",
            bridge.bootstrap,
            "--json",
            *tls,
            group,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_tls_through_the_bridge_to_a_tls_broker(
    secure_kafka: SecureKafka,
    bridge_proxy: Callable[..., BridgeProcess],
    connect_worker: Callable[..., ConnectWorker],
) -> None:
    kafka, m = secure_kafka, secure_kafka.material
    group = unique_topic("connect-tls")
    settings = bridge_tls(kafka) | {"state_topic": unique_topic("bridge-state-tls")}
    bridge = bridge_proxy(kafka.ssl, config_topic=f"{group}-configs", group=group, settings=settings)

    # kafka-python through the bridge: produce, then consume in a (broker-coordinated) group.
    topic = unique_topic("tls-orders")
    got = produce_and_consume(kafka, bridge.bootstrap, topic, unique_topic("tls-consumers"))
    assert sorted(got) == sorted(f"value-{i}".encode() for i in range(RECORDS))

    # No client certificate: refused on the bootstrap listener and on the proxy listener.
    assert refused_without_certificate(kafka, bridge.port)
    assert refused_without_certificate(kafka, bridge.proxy_base_port + BROKER_NODE_ID)

    # A Java Connect worker over TLS; its group is the bridge's own.
    props = kafka.java_client_properties("SSL", bootstrap=bridge.bootstrap)
    worker = connect_worker(bootstrap=bridge.bootstrap, group_id=group, overrides=props)
    assert worker.joined()
    tls_args = ("--ca-file", str(m.ca_cert), "--cert", str(m.client_cert), "--key", str(m.client_key))
    shown: dict[str, Any] = {}

    def described() -> bool:
        done = describe_cli(bridge, group, *tls_args)
        if done.returncode == 0:
            shown.update(json.loads(done.stdout)[0])
        return len(shown.get("members", ())) == 1

    wait_until(described, 30)
    assert shown["group_id"] == group
    plain = describe_cli(bridge, group)  # a plaintext client on a TLS listener: one line, exit 1
    assert plain.returncode == 1
    assert (
        plain.stderr.startswith("connect-bridge: cannot describe through") and plain.stderr.count("\n") == 1
    )
    assert "Traceback" not in bridge.log_tail()


def test_upstream_tls_mistakes_are_one_actionable_line(secure_kafka: SecureKafka) -> None:
    """Upstream discovery (what ``serve`` retries at start, then reports as one line) against the
    real broker: a CA that did not sign the broker, TLS towards its plaintext listener, plaintext
    towards its SSL listener; and a right configuration that discovers the broker."""
    from connect_bridge.bridge.security.tls import UpstreamTls, client_context
    from connect_bridge.bridge.upstream.cluster import UpstreamCluster

    kafka, m = secure_kafka, secure_kafka.material

    def discover(address: str, cafile: Any) -> str:
        host, port = address.rsplit(":", 1)
        context = client_context(UpstreamTls(cafile=cafile)) if cafile is not None else None
        cluster = UpstreamCluster([(host, int(port))], 20000, "127.0.0.1", ssl=context)
        try:
            asyncio.run(asyncio.wait_for(cluster.discover(), 20))
        except OSError as exc:
            return str(exc)
        return f"brokers {sorted(cluster.brokers)}"

    assert discover(kafka.ssl, m.rogue_cert) == (
        "TLS handshake failed: certificate verify failed: unable to get local issuer certificate; "
        "check upstream_tls.cafile / check_hostname"
    )
    assert discover(kafka.plaintext, m.ca_cert).startswith("TLS handshake failed: closed by ")
    assert "the server speaks TLS on this port" in discover(kafka.ssl, None)
    assert discover(kafka.ssl, m.ca_cert) == f"brokers [{BROKER_NODE_ID}]"

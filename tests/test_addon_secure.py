"""A ``group.protocol=connect`` Java worker (the connect-bridge-worker add-on) joins a bridge that
terminates TLS and passes SASL through to Apache Kafka 4.3.1's SASL_SSL listener: the worker's own
``security.protocol``, ``ssl.*`` and ``sasl.*`` secure its ConnectGroupHeartbeat channel as they
secure its producers, consumers and admin client (docs/connect-worker-addon.md, docs/security.md)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from kafka_fixtures import start_bridge
from kafka_secure import SecureKafka
from kafka_workers import VERIFIABLE_SOURCE, ConnectWorker
from test_sasl_kafka import bridge_settings, log_has

ASSIGNED = re.compile(r"Assignment at member epoch (\d+)")


def test_connect_worker_joins_a_bridge_with_tls_and_sasl(
    secure_kafka: SecureKafka, connect_worker: Callable[..., ConnectWorker], tmp_path: Path
) -> None:
    """The bridge listens with TLS only and relays SASL (SCRAM-SHA-512) to the broker; the worker
    heartbeats (its membership has no other way in), gets a member epoch and runs tasks."""
    tls = secure_kafka.material
    group = f"connect-secure-{time.time_ns()}"
    bridge = start_bridge(
        secure_kafka.sasl_ssl,
        tmp_path / "bridge",
        config_topic=f"{group}-configs",
        group=group,
        settings=bridge_settings(
            secure_kafka,
            tls={"certfile": str(tls.server_cert), "keyfile": str(tls.server_key)},
            upstream_tls={"cafile": str(tls.ca_cert)},
        ),
    )
    worker: ConnectWorker | None = None
    try:
        props = secure_kafka.java_client_properties(
            "SASL_SSL", user="alice", mechanism="SCRAM-SHA-512", bootstrap=bridge.bootstrap
        )
        security = {k: v for k, v in props.items() if k != "bootstrap.servers"}
        prefixed = {f"{p}.{k}": v for p in ("producer", "consumer", "admin") for k, v in security.items()}
        worker = connect_worker(
            bootstrap=bridge.bootstrap,
            group_id=group,
            overrides=security | prefixed,
            group_protocol="connect",
        )
        log = worker.own_log()
        assert "group.protocol=connect" in log
        assert [int(e) for e in ASSIGNED.findall(log)], "no assignment over ConnectGroupHeartbeat"
        topic = f"secure-alpha-{time.time_ns()}"
        worker.create_connector(
            "alpha", {"connector.class": VERIFIABLE_SOURCE, "tasks.max": 2, "topic": topic, "throughput": 20}
        )
        worker.wait_running("alpha", 2)
        assert "needs a connect-bridge" not in worker.own_log()
        assert log_has(bridge, "authenticated as User:alice")
    finally:
        # The worker first: with its coordinator gone, a graceful stop would sit out its shutdown
        # timeouts (23-47 s at teardown, measured). Its stop is no part of what the test shows.
        if worker is not None:
            worker.discard()
        bridge.stop()

"""The coordination-only deployment with real Java Connect 4.3.1 workers on a real Kafka 4.3.1 broker.

Two stock ``ConnectDistributed`` workers keep ``bootstrap.servers`` at the bridge (group membership,
the config/offset/status topics) and send their tasks' clients straight to the broker with
``producer.bootstrap.servers``, ``consumer.bootstrap.servers`` and ``admin.bootstrap.servers``
(docs/upstream.md, "Coordination only"; docs/operator-guide.md, section 3). The test shows, from the
bridge's own metrics, that the relay carried the workers' clients and not one request of a task's,
that the bridge coordinates the group, and that records flow.

Then it measures what a bridge outage costs the data path, both ways at once: beside the
coordination-only connector runs one whose task producer goes through the bridge
(``producer.override.bootstrap.servers`` = the bridge, the full proxy's data path). The bridge is
killed (SIGKILL), restarted, then paused (SIGSTOP) and resumed (SIGCONT). The topics are created
with ``message.timestamp.type=LogAppendTime``, so every record read back from the broker carries
the broker's time of arrival: how long the tasks kept delivering after the outage began is read from
the topics, and when Connect itself reacted from the workers' logs (``WorkerCoordinator`` revokes
every connector and task once it cannot find its coordinator for ``heartbeat.interval.ms``). The
times are printed, never asserted; what is asserted is the qualitative fact: records keep arriving
from the direct tasks after the bridge is gone, none from the proxied ones, and Connect stops the
tasks by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from connect_bridge.bridge.describe import describe
from connect_bridge.drills.java_timeline import HEADER, parse_timestamp
from connect_bridge.drills.witness import worker_prints
from kafka_fixtures import VERIFIABLE_SINK, VERIFIABLE_SOURCE, BridgeProcess, ConnectWorker, KafkaBroker
from kafka_processes import free_ports
from polling import poll, wait_until

DELAY_MS = 5000
"""``scheduled.rebalance.max.delay.ms`` of the workers and the bridge (equal, docs/real-kafka.md)."""
THROUGHPUT = 20
"""Records per second per VerifiableSource task."""
SOURCE_TASKS = 2
REVOKED = "Broker coordinator was unreachable for"
"""Connect's ``WorkerCoordinator`` line when it revokes its whole assignment (INFO): it found no
coordinator for ``heartbeat.interval.ms`` (3 s by default) after marking it unknown."""
REACTION_BOUND_S = 90.0
"""How long the test waits for Connect to react to a lost coordinator (generous: a loaded machine)."""
QUIET_S = 2.0
"""A topic that received nothing for this long after Connect's reaction counts as stopped."""
IN_FLIGHT_MS = 1000
"""A request the bridge forwarded just before it died may still be appended: records appended
within this of the kill are not counted as 'after'."""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def now_ms() -> int:
    return int(time.time() * 1000)


def task_data_settings(brokers: str) -> dict[str, str]:
    """The worker settings that take task data off the bridge (docs/operator-guide.md, section 3)."""
    return {f"{prefix}.bootstrap.servers": brokers for prefix in ("producer", "consumer", "admin")}


def relayed_requests(bridge: BridgeProcess) -> dict[str, float]:
    """``connect_bridge_relayed_requests_total`` by ``client_kind``, from the bridge's /metrics."""
    with urllib.request.urlopen(f"http://{bridge.metrics_listen}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    pattern = r'^connect_bridge_relayed_requests_total\{client_kind="([^"]+)"\} (\S+)$'
    return {kind: float(value) for kind, value in re.findall(pattern, text, re.M)}


def revocations(worker: ConnectWorker) -> list[int]:
    """Epoch ms of every ``Broker coordinator was unreachable ... Revoking`` line of this worker."""
    out = []
    for line in worker.own_log().splitlines():
        match = HEADER.match(line)
        if match and REVOKED in match.group(4):
            out.append(parse_timestamp(match.group(1), match.group(2)))
    return out


@dataclass
class Topics:
    """The connectors' topics, read straight from the broker (never through the bridge)."""

    broker: KafkaBroker
    names: dict[str, str] = field(default_factory=dict)
    """Connector -> its topic."""

    def __post_init__(self) -> None:
        self.consumer = KafkaConsumer(bootstrap_servers=self.broker.bootstrap, enable_auto_commit=False)

    def create(self, connector: str) -> str:
        """A one-partition topic whose records carry the broker's append time."""
        topic = unique(f"coord-{connector}")
        admin = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap)
        try:
            config = {"message.timestamp.type": "LogAppendTime"}
            admin.create_topics([NewTopic(topic, 1, 1, topic_configs=config)])
        finally:
            admin.close()
        self.names[connector] = topic
        return topic

    def end(self, connector: str) -> int:
        partition = TopicPartition(self.names[connector], 0)
        return int(self.consumer.end_offsets([partition])[partition])

    def appended(self, connector: str) -> list[int]:
        """The broker's append time (epoch ms) of every record in the connector's topic, in order."""
        partition = TopicPartition(self.names[connector], 0)
        end = self.end(connector)
        reader = KafkaConsumer(bootstrap_servers=self.broker.bootstrap, enable_auto_commit=False)
        try:
            reader.assign([partition])
            reader.seek_to_beginning(partition)
            times: list[int] = []
            deadline = time.monotonic() + 60
            while len(times) < end and time.monotonic() < deadline:
                for records in reader.poll(timeout_ms=1000).values():
                    times.extend(record.timestamp for record in records)
            return times
        finally:
            reader.close()

    def wait_growing(self, connector: str, timeout_s: float, message: str) -> int:
        """Wait until the topic gets a new record; the epoch ms when it was seen."""
        start = self.end(connector)
        wait_until(lambda: self.end(connector) > start, timeout_s, 0.2, message)
        return now_ms()

    def wait_quiet(self, connector: str, quiet_s: float, timeout_s: float) -> bool:
        """True once the topic received nothing for ``quiet_s``; False if it kept growing."""
        deadline = time.monotonic() + timeout_s
        last, since = self.end(connector), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.25)
            now = self.end(connector)
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return True
        return False

    def close(self) -> None:
        self.consumer.close()


@dataclass
class Outage:
    """What one bridge outage (kill or pause) did, in ms relative to its start."""

    kind: str
    start_ms: int
    end_ms: int = 0
    """When the bridge was back (restarted or resumed)."""
    revoked_ms: dict[str, int] = field(default_factory=dict)
    """Worker -> when it logged Connect's revocation of its assignment."""
    last_before_back_ms: dict[str, int | None] = field(default_factory=dict)
    """Connector -> its last record appended (sources) or printed (sink) before the bridge was back."""
    resumed_ms: dict[str, int] = field(default_factory=dict)
    """Connector -> its first record appended after the bridge was back."""

    def report(self) -> str:
        rel = lambda t: "none" if t is None else f"{(t - self.start_ms) / 1000:+.1f}s"  # noqa: E731
        lines = [f"bridge {self.kind} at t=0, back at {rel(self.end_ms)}:"]
        lines += [f"  Connect revoked {w}'s assignment at {rel(t)}" for w, t in self.revoked_ms.items()]
        lines += [
            f"  {c}: last record before the bridge was back at {rel(t)}"
            for c, t in self.last_before_back_ms.items()
        ]
        lines += [
            f"  {c}: first record after the bridge was back at {rel(t)}" for c, t in self.resumed_ms.items()
        ]
        return "\n".join(lines)


class Deployment:
    """The bridge, two coordination-only workers, and three connectors: ``direct`` (source, task
    producers to the broker), ``sink`` (its consumer to the broker) and, once added, ``proxied``
    (source, its task producer overridden to the bridge: the full proxy's data path)."""

    def __init__(
        self,
        broker: KafkaBroker,
        bridge_proxy: Callable[..., BridgeProcess],
        connect_worker: Callable[..., ConnectWorker],
    ) -> None:
        self.broker = broker
        self.group = unique("connect-coord")
        [metrics_port] = free_ports(1)
        self.bridge = bridge_proxy(
            broker.bootstrap,
            config_topic=f"{self.group}-configs",
            group=self.group,
            scheduled_rebalance_max_delay_ms=DELAY_MS,
            metrics_listen=f"127.0.0.1:{metrics_port}",
        )
        self.topics = Topics(broker)
        self.workers: list[ConnectWorker] = []
        started: list[ConnectWorker | BaseException] = []

        def start(name: str) -> None:
            try:
                started.append(
                    connect_worker(
                        bootstrap=self.bridge.bootstrap,
                        group_id=self.group,
                        name=name,
                        scheduled_rebalance_max_delay_ms=DELAY_MS,
                        overrides=task_data_settings(broker.bootstrap),
                    )
                )
            except BaseException as exc:  # pytest.fail from the factory is a BaseException
                started.append(exc)

        threads = [threading.Thread(target=start, args=(f"w{i}",)) for i in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(240)
        self.workers = [w for w in started if isinstance(w, ConnectWorker)]
        failed = [exc for exc in started if not isinstance(exc, ConnectWorker)]
        if failed:
            raise failed[0]
        assert len(self.workers) == 2, "a worker did not start in time"
        self.connectors: dict[str, int] = {}

    def name(self, connector: str) -> str:
        """The connector's name in Connect: unique, as its sink consumer group (``connect-<name>``)
        is the session broker's."""
        return f"{connector}-{self.group.rsplit('-', 1)[1]}"

    def create_source(self, connector: str, extra: dict[str, str] | None = None) -> None:
        config = {
            "connector.class": VERIFIABLE_SOURCE,
            "tasks.max": SOURCE_TASKS,
            "topic": self.topics.create(connector),
            "throughput": THROUGHPUT,
        } | (extra or {})
        self.workers[0].create_connector(self.name(connector), config, timeout_s=60)
        self.connectors[connector] = SOURCE_TASKS

    def create_sink(self, connector: str, source: str) -> None:
        config = {"connector.class": VERIFIABLE_SINK, "tasks.max": 1, "topics": self.topics.names[source]}
        self.workers[0].create_connector(self.name(connector), config, timeout_s=60)
        self.connectors[connector] = 1

    def wait_running(self, timeout_s: float = 120.0) -> None:
        for connector, tasks in self.connectors.items():
            self.workers[0].wait_running(self.name(connector), tasks, timeout_s=timeout_s, on=self.workers)

    def sink_prints(self, sink: str) -> list[int]:
        """When the sink task handled each record (its printed ``time_ms``), over both workers."""
        return sorted(
            p.time_ms
            for w in self.workers
            for p in worker_prints(w.own_log(), w.name)
            if p.connector == self.name(sink)
        )

    def describe_group(self) -> dict[str, object]:
        [described] = asyncio.run(
            asyncio.wait_for(describe(self.bridge.host, self.bridge.port, self.group), 10)
        )
        return described

    def broker_groups(self) -> set[str]:
        admin = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap)
        try:
            return {str(g["group_id"]) for g in admin.list_groups()}
        finally:
            admin.close()

    def wait_revoked(self, before: dict[str, int], timeout_s: float) -> dict[str, int]:
        """Wait until every worker logged one more revocation than ``before`` (bounded); when each did."""

        def seen() -> dict[str, int]:
            return {w.name: revocations(w)[-1] for w in self.workers if len(revocations(w)) > before[w.name]}

        poll(lambda: len(seen()) == len(self.workers), timeout_s, 0.25)
        return seen()

    def outage(self, kind: str, begin: Callable[[], None], end: Callable[[], None]) -> Outage:
        """Begin an outage, wait for Connect's reaction and for the direct tasks to stop, end it,
        wait for every source to deliver again; what happened, read from the topics and the logs."""
        before = {w.name: len(revocations(w)) for w in self.workers}
        sources = [c for c in self.connectors if c in self.topics.names]
        outage = Outage(kind, now_ms())
        begin()
        outage.revoked_ms = self.wait_revoked(before, REACTION_BOUND_S)
        stopped = self.topics.wait_quiet("direct", QUIET_S, REACTION_BOUND_S)
        assert stopped, (
            f"{kind}: the direct tasks still deliver {REACTION_BOUND_S:.0f}s after Connect's reaction"
        )
        outage.end_ms = now_ms()
        end()
        for connector in sources:
            self.topics.wait_growing(connector, 180, f"{kind}: {connector} does not deliver again")
        for connector in sources:
            times = self.topics.appended(connector)
            outage.last_before_back_ms[connector] = max((t for t in times if t < outage.end_ms), default=None)
            outage.resumed_ms[connector] = min(t for t in times if t >= outage.end_ms)
        for sink in (c for c in self.connectors if c not in self.topics.names):
            prints = self.sink_prints(sink)
            outage.last_before_back_ms[sink] = max((t for t in prints if t < outage.end_ms), default=None)
        return outage

    def close(self) -> None:
        """SIGCONT (a paused bridge must hear SIGTERM), then end the workers at once (killed: the
        test is over, ``ConnectWorker.discard``), then the rest."""
        with contextlib.suppress(ProcessLookupError):
            if self.bridge.running:
                os.kill(self.bridge.pid, signal.SIGCONT)
        stoppers = [threading.Thread(target=w.discard, daemon=True) for w in self.workers]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join(90)
        self.topics.close()


def test_tasks_bypass_the_bridge_and_outlive_it(
    kafka_broker: KafkaBroker,
    bridge_proxy: Callable[..., BridgeProcess],
    connect_worker: Callable[..., ConnectWorker],
) -> None:
    began = time.monotonic()
    deployment = Deployment(kafka_broker, bridge_proxy, connect_worker)
    try:
        run(deployment)
    finally:
        deployment.close()
    print(f"test_tasks_bypass_the_bridge_and_outlive_it: {time.monotonic() - began:.0f}s")


def run(d: Deployment) -> None:
    bridge = d.bridge
    # 1. Coordination only: the data flows, the bridge coordinates, the relay carries no task client.
    d.create_source("direct")
    d.create_sink("sink", "direct")
    d.wait_running()
    d.topics.wait_growing("direct", 60, "the direct source delivers nothing")
    wait_until(lambda: d.sink_prints("sink"), 60, 0.5, "the sink task printed no record")

    # Creating the sink starts a rebalance of its own, which may still be under way on a loaded
    # machine while its task already prints: the group is judged once it settled (bounded).
    def settled() -> dict[str, object] | None:
        described = d.describe_group()
        stable = str(described["state"]).upper() == "STABLE" and len(described["members"]) == 2  # type: ignore[arg-type]
        return described if stable else None

    wait_until(settled, 60, 0.5, lambda: f"the Connect group never settled: {d.describe_group()}")
    broker_groups = d.broker_groups()
    assert d.group not in broker_groups, "the broker coordinates the Connect group too"
    assert f"connect-{d.name('sink')}" in broker_groups, broker_groups  # a sink's group stays the broker's
    relayed = relayed_requests(bridge)
    task_kinds = {kind: n for kind, n in relayed.items() if kind != "other" and n > 0}
    assert not task_kinds, f"task clients relayed through the bridge: {task_kinds}"
    assert relayed.get("other", 0) > 0, relayed  # the workers' own clients: membership, config topic...
    assert "task data passes through" not in bridge.log_text()
    print(f"coordination only, relayed requests by client kind: {relayed}")

    # 2. The full proxy's data path beside it: a source whose task producer goes through the bridge.
    d.create_source("proxied", {"producer.override.bootstrap.servers": bridge.bootstrap})
    d.wait_running()
    d.topics.wait_growing("proxied", 60, "the proxied source delivers nothing")
    relayed = relayed_requests(bridge)
    assert relayed.get("task-producer", 0) > 0, relayed  # the metric does see a task client relayed
    print(f"with the proxied source, relayed requests by client kind: {relayed}")

    # 3. kill -9 of the bridge, until Connect reacts; then restart it.
    killed = d.outage("killed (SIGKILL)", bridge.kill, bridge.restart)
    # 4. The bridge paused: no answer, connections open; until Connect reacts; then resumed.
    d.wait_running()
    paused = d.outage(
        "paused (SIGSTOP)",
        lambda: os.kill(bridge.pid, signal.SIGSTOP),
        lambda: os.kill(bridge.pid, signal.SIGCONT),
    )
    print(killed.report())
    print(paused.report())

    for outage in (killed, paused):
        direct = outage.last_before_back_ms["direct"]
        proxied = outage.last_before_back_ms["proxied"]
        assert direct is not None and direct > outage.start_ms + IN_FLIGHT_MS, (
            f"bridge {outage.kind}: the direct tasks stopped delivering with the bridge\n{outage.report()}"
        )
        assert proxied is None or proxied <= outage.start_ms + IN_FLIGHT_MS, (
            f"bridge {outage.kind}: records arrived through a bridge that was down\n{outage.report()}"
        )
        assert len(outage.revoked_ms) == 2, f"bridge {outage.kind}: Connect did not react\n{outage.report()}"

"""Drills with real Java Connect workers (Apache Kafka 4.3.1) through ``connect-bridge serve --upstream``.

Each drill drives Java workers (tests/kafka_fixtures.py) through the bridge in front of the
session's Kafka broker, then judges what happened with two independent witnesses:

1. the workers' own logs, turned into the DESIGN §4.3 event log by
   :mod:`connect_bridge.drills.java_timeline` and judged by the drill checker
   (:func:`connect_bridge.drills.checker.check`, unchanged): exclusive, converged, balanced, live;
2. VerifiableSource's per-task sequence numbers in the connectors' topics, read back from the broker
   (:func:`connect_bridge.drills.witness.check_sequences`), plus the seqno lines each worker prints
   (:func:`connect_bridge.drills.witness.check_prints`).

Every drill writes ``events.jsonl`` and ``summary.json`` under its tmp directory (``drill/``), so
``connect-bridge analyze`` can read them. docs/live-drills.md, "Java worker drills".
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from connect_bridge.drills.checker import Summary, check
from connect_bridge.drills.java_timeline import JavaWorkerLog, Timeline, build_event_log, config_event
from connect_bridge.drills.witness import SequenceReport, check_prints, check_sequences
from kafka_fixtures import (
    VERIFIABLE_SOURCE,
    BridgeProcess,
    ConnectWorker,
    KafkaBroker,
)

pytestmark = pytest.mark.heavy

DELAY_MS = 5000
"""``scheduled.rebalance.max.delay.ms`` of the drill workers and the bridge's
``coordinator.scheduled_rebalance_max_delay_ms``: equal (docs/real-kafka.md), and short so a drill
that loses a worker converges within seconds."""
REBALANCE_TIMEOUT_MS = 60_000
"""Connect's default ``rebalance.timeout.ms`` (the workers do not override it)."""
THROUGHPUT = 20


def now_ms() -> int:
    return int(time.time() * 1000)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class JavaDrill:
    """One drill: a bridge, Java workers by name, connectors, and what only the driver knows
    (kills, config changes, bridge restarts) as §4.3 events with epoch-ms times."""

    def __init__(
        self,
        broker: KafkaBroker,
        connect_worker: Callable[..., ConnectWorker],
        bridge_proxy: Callable[..., BridgeProcess],
        out: Path,
        name: str,
    ) -> None:
        self.broker = broker
        self._start_worker = connect_worker
        self.name = name
        self.out = out
        self.group = unique(f"connect-{name}")  # the bridge coordinates connect.* groups
        self.bridge = bridge_proxy(
            broker.bootstrap,
            config_topic=f"{self.group}-configs",
            group=self.group,
            scheduled_rebalance_max_delay_ms=DELAY_MS,
        )
        self.t0 = now_ms()
        self.workers: dict[str, ConnectWorker] = {}
        self.ports: dict[str, int] = {}
        self.protocols: dict[str, str] = {}
        self.ended: dict[str, list[int]] = {}
        self.connectors: dict[str, int] = {}
        self.topics: dict[str, str] = {}
        self.driver: list[dict[str, Any]] = [
            {
                "t_ms": self.t0,
                "type": "timing",
                "worker": None,
                "scheduled_rebalance_max_delay_ms": DELAY_MS,
                "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
            }
        ]
        self.marks: dict[str, float] = {}

    # --- actions ------------------------------------------------------------------------------

    def start(self, name: str, protocol: str = "sessioned") -> ConnectWorker:
        """Start (or restart, same worker id) the worker ``name``; returns once it joined."""
        worker = self._start_worker(
            bootstrap=self.bridge.bootstrap,
            group_id=self.group,
            protocol=protocol,
            name=name,
            rest_port=self.ports.get(name),
            scheduled_rebalance_max_delay_ms=DELAY_MS,
        )
        self.workers[name] = worker
        self.ports[name] = worker.rest_port
        self.protocols[name] = protocol
        return worker

    def stop(self, name: str) -> None:
        """Graceful stop (SIGTERM): the worker logs ``Kafka Connect stopped``."""
        code = self.workers[name].stop()
        assert code == 143, f"{name} exited {code}: {self.workers[name].log_tail()}"

    def kill(self, name: str) -> None:
        """kill -9; the crash time is taken once the process is gone (conservative)."""
        self.workers[name].kill()
        self.ended.setdefault(name, []).append(now_ms())

    def create(self, connector: str, tasks: int, via: str) -> None:
        topic = unique(f"{self.name}-{connector}")
        self.topics[connector] = topic
        config = {
            "connector.class": VERIFIABLE_SOURCE,
            "tasks.max": tasks,
            "topic": topic,
            "throughput": THROUGHPUT,
        }
        self.workers[via].create_connector(connector, config)
        self.connectors[connector] = tasks
        self.driver.append(config_event(now_ms(), self.connectors))

    def live(self) -> list[ConnectWorker]:
        return [w for w in self.workers.values() if w.running]

    def wait_running(self, timeout_s: float = 60.0) -> None:
        """Every connector RUNNING with all its tasks on live workers (REST status)."""
        live = self.live()
        for connector, tasks in self.connectors.items():
            live[0].wait_running(connector, tasks, timeout_s=timeout_s, on=live)

    def bridge_restart(self) -> None:
        """kill -9 of the bridge, then the same ports and state directory again."""
        self.driver.append({"t_ms": now_ms(), "type": "bridge_restart", "worker": None})
        self.bridge.kill()
        self.bridge.restart()
        self.driver.append({"t_ms": now_ms(), "type": "bridge_up", "worker": None})

    # --- judgement ----------------------------------------------------------------------------

    def timeline(self, end_ms: int | None = None) -> Timeline:
        logs = [
            JavaWorkerLog(name, w.log_text(), self.protocols[name], self.ended.get(name, ()))
            for name, w in self.workers.items()
        ]
        return build_event_log(logs, self.driver, t0_ms=self.t0, end_ms=end_ms)

    def wait_converged(self, timeout_s: float = 60.0, settle_s: float = 2.0) -> tuple[Timeline, Summary]:
        """Poll the timeline until the checker finds it converged and balanced and it stays so for
        ``settle_s``; returns the final timeline (cut at that moment, with ``drill_end``)."""
        deadline = time.monotonic() + timeout_s
        since: float | None = None
        while True:
            end = now_ms()
            timeline = self.timeline(end_ms=end)
            summary = check(timeline.events, name=self.name)
            assert summary.exclusive, self.explain(timeline, summary)
            if summary.converged and summary.balanced:
                since = since or time.monotonic()
                if time.monotonic() - since >= settle_s:
                    return timeline, summary
            else:
                since = None
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not converged within {timeout_s:.0f}s:\n{self.explain(timeline, summary)}"
                )
            time.sleep(0.5)

    def witness(self) -> dict[str, SequenceReport]:
        reports = {c: check_sequences(read_topic(self.broker.bootstrap, t)) for c, t in self.topics.items()}
        return reports

    def finish(self, timeout_s: float = 60.0) -> tuple[Summary, dict[str, SequenceReport]]:
        """Converge, write ``events.jsonl`` / ``summary.json``, run both witnesses; assert all holds."""
        timeline, summary = self.wait_converged(timeout_s)
        drill_dir = self.out / "drill" / self.name
        drill_dir.mkdir(parents=True, exist_ok=True)
        timeline.write_jsonl(drill_dir / "events.jsonl")
        (drill_dir / "summary.json").write_text(
            json.dumps(summary.to_json(), indent=1) + "\n", encoding="utf-8"
        )
        assert summary.ok, self.explain(timeline, summary)
        reports = self.witness()
        for connector, report in reports.items():
            assert report.ok, f"{connector}: {report.duplicates}"
            assert set(report.tasks) == set(range(self.connectors[connector])), (connector, report.tasks)
        prints = check_prints({name: w.log_text() for name, w in self.workers.items()})
        assert not prints, prints
        print(
            f"{self.name}: {json.dumps(summary.to_json())}\n"
            f"  witness: { ({c: (r.records, r.restarts, r.gaps[:3]) for c, r in reports.items()}) }\n"
            f"  unconfirmed stops: {timeline.unconfirmed_stops}\n"
            f"  drill took {time.time() - self.t0 / 1000:.1f}s, events in {drill_dir}"
        )
        return summary, reports

    def explain(self, timeline: Timeline, summary: Summary) -> str:
        runs = [e for e in timeline.events if e["type"] not in ("epoch",)]
        shown = "\n".join(json.dumps(e) for e in runs[-60:])
        return (
            f"{json.dumps(summary.to_json(), indent=1)}\nunconfirmed stops: {timeline.unconfirmed_stops}\n"
            f"last events:\n{shown}\nbridge log: {self.bridge.log_path}"
        )


def read_topic(bootstrap: str, topic: str, timeout_s: float = 20.0) -> list[tuple[bytes, bytes, int]]:
    """Every record of partition 0 of ``topic``, in offset order: (key, value, timestamp ms)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        consumer.seek_to_beginning(tp)
        got: list[tuple[bytes, bytes, int]] = []
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(200).values():
                got.extend((r.key, r.value, r.timestamp) for r in records)
        assert consumer.position(tp) >= end, f"{topic}: read {consumer.position(tp)} of {end} records"
        return got
    finally:
        consumer.close()


@pytest.fixture
def drill(
    kafka_broker: KafkaBroker,
    connect_worker: Callable[..., ConnectWorker],
    bridge_proxy: Callable[..., BridgeProcess],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[JavaDrill]:
    """A drill; at teardown its workers stop (in parallel) before the fixtures stop the bridge: a
    worker whose coordinator is gone takes its full shutdown timeouts to stop."""
    name = request.node.name.removeprefix("test_").replace("_", "-")
    drill = JavaDrill(kafka_broker, connect_worker, bridge_proxy, tmp_path, name)
    yield drill
    stoppers = [threading.Thread(target=w.stop, daemon=True) for w in drill.workers.values()]
    for thread in stoppers:
        thread.start()
    for thread in stoppers:
        thread.join(60)


def test_rolling_restart_sessioned(drill: JavaDrill) -> None:
    """(a) Three sessioned Java workers, two VerifiableSource connectors with four tasks each; each
    worker in turn is stopped (SIGTERM) and started again with the same worker id."""
    for name in ("w0", "w1", "w2"):
        drill.start(name)
    drill.create("alpha", 4, via="w0")
    drill.create("beta", 4, via="w1")
    drill.wait_running()
    for name in ("w0", "w1", "w2"):
        drill.stop(name)
        drill.start(name)
    summary, _ = drill.finish()
    # The restarts really stopped work (each stopped worker's tasks ran nowhere for a while); where
    # they went is timing: a worker back within the delay gets its own work back (0 moves, the ideal).
    assert summary.rebalances > 0 and summary.unassigned_item_ms > 0


def test_kill_java_worker(drill: JavaDrill) -> None:
    """(e) kill -9 of a Java worker: its work returns after the session timeout and the scheduled
    delay, never while it could still be running."""
    for name in ("w0", "w1", "w2"):
        drill.start(name)
    drill.create("alpha", 4, via="w0")
    drill.create("beta", 4, via="w0")
    drill.wait_running()
    time.sleep(1)
    drill.kill("w1")
    drill.finish(timeout_s=75)


def test_mixed_protocols(drill: JavaDrill) -> None:
    """(c) eager + compatible + sessioned Java workers in one group (the group runs eager), then the
    eager worker leaves and the others upgrade the group to cooperative. Connect 4.3.1 stops tasks
    then on stale task-config updates and never asks for a rebalance, on Kafka's own coordinator
    too; the bridge's extra rebalance after leaving eager restarts them (docs/live-drills.md)."""
    drill.start("eager", protocol="eager")
    drill.start("compatible", protocol="compatible")
    drill.start("sessioned", protocol="sessioned")
    drill.create("alpha", 4, via="sessioned")
    drill.create("beta", 4, via="compatible")
    drill.wait_running()
    drill.stop("eager")
    drill.finish()


def test_bridge_kill_during_rebalance(drill: JavaDrill) -> None:
    """(d) kill -9 of the bridge while a rebalance is in flight (a third worker joining), then the
    bridge again on the same ports and state directory."""
    drill.start("w0")
    drill.start("w1")
    drill.create("alpha", 4, via="w0")
    drill.create("beta", 4, via="w1")
    drill.wait_running()
    joining = threading.Thread(target=drill.start, args=("w2",), daemon=True)
    marks = drill.workers["w0"].log_text().count("Rebalance started")
    joining.start()
    deadline = time.monotonic() + 30
    while drill.workers["w0"].log_text().count("Rebalance started") == marks:
        assert time.monotonic() < deadline, "no rebalance started after w2 began joining"
        time.sleep(0.05)
    drill.bridge_restart()
    joining.join(90)
    assert "w2" in drill.workers, "w2 did not join after the bridge restart"
    drill.finish(timeout_s=75)


def test_witness_flags_a_second_instance(
    kafka_broker: KafkaBroker, connect_worker: Callable[..., ConnectWorker]
) -> None:
    """The topic witness on a real VerifiableSource topic: clean while one instance runs, and it
    flags the records of a fake second instance of task 0 (produced here, key 0, seqnos resuming
    from an earlier point) written while the real task goes on."""
    from kafka import KafkaProducer

    worker = connect_worker(bootstrap=kafka_broker.bootstrap, group_id=unique("connect-witness"))
    topic = unique("witness")
    config = {"connector.class": VERIFIABLE_SOURCE, "tasks.max": 1, "topic": topic, "throughput": THROUGHPUT}
    worker.create_connector("source", config)
    worker.wait_running("source", 1)
    deadline = time.monotonic() + 30
    while len(clean := read_topic(kafka_broker.bootstrap, topic)) < 40:
        assert time.monotonic() < deadline, f"only {len(clean)} records"
        time.sleep(0.5)
    report = check_sequences(clean)
    assert report.ok and report.tasks == {0: len(clean)} and not report.gaps, report
    assert check_prints({"w": worker.log_text()}) == []

    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    try:
        for seqno in range(10, 40):  # the fake instance resumed from an old commit, at 20/s
            producer.send(topic, key=b"0", value=b"%d" % seqno)
            producer.flush()
            time.sleep(1 / THROUGHPUT)
    finally:
        producer.close()
    report = check_sequences(read_topic(kafka_broker.bootstrap, topic))
    assert not report.ok and "two instances interleave" in report.duplicates[0], report

"""Drills with real Java Connect workers (Apache Kafka 4.3.1) through ``connect-bridge serve --upstream``.

Each drill drives Java workers (tests/kafka_fixtures.py) through the bridge in front of the
session's Kafka broker, then judges what happened with two independent witnesses:

1. the workers' own logs, turned into the drill event log (docs/drills.md) by
   :mod:`connect_bridge.drills.java_timeline` and judged by the drill checker
   (:func:`connect_bridge.drills.checker.check`, unchanged): exclusive, converged, balanced, live;
2. VerifiableSource's per-task sequence numbers in the connectors' topics, read back from the broker
   (:func:`connect_bridge.drills.witness.check_sequences`), plus the seqno lines each worker prints
   (:func:`connect_bridge.drills.witness.check_prints`).

Drill (b) also runs new-protocol workers (the live drills' Python worker, :class:`NewWorkers`) in
this process; their recorded events merge with the Java timelines on the same clock.

Every drill writes ``events.jsonl`` and ``summary.json`` under its tmp directory (``drill/``), so
``connect-bridge analyze`` can read them. docs/live-drills.md, "Java worker drills".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from connect_bridge.bridge.describe import describe
from connect_bridge.drills.checker import Summary, check
from connect_bridge.drills.java_timeline import (
    HEADER,
    JavaWorkerLog,
    Timeline,
    build_event_log,
    config_event,
    parse_timestamp,
)
from connect_bridge.drills.live import Incarnation, new_protocol_worker
from connect_bridge.drills.scenario import Timing
from connect_bridge.drills.witness import SequenceReport, check_prints, check_sequences
from connect_bridge.state.model import NEW_PROTOCOL
from connect_bridge.workers.live_new import LiveNewWorker
from kafka_fixtures import (
    LEADER_URL,
    VERIFIABLE_SINK,
    VERIFIABLE_SOURCE,
    BridgeProcess,
    ConnectWorker,
    KafkaBroker,
)
from polling import wait_until

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
    (kills, config changes, bridge restarts) as event-log events with epoch-ms times."""

    def __init__(
        self,
        broker: KafkaBroker,
        connect_worker: Callable[..., ConnectWorker],
        bridge_proxy: Callable[..., BridgeProcess] | None,
        out: Path,
        name: str,
        *,
        delay_ms: int = DELAY_MS,
        worker_overrides: dict[str, Any] | None = None,
    ) -> None:
        """``bridge_proxy`` None runs the drill directly on the broker's own group coordinator (the
        reference a drill through the bridge is compared with); ``delay_ms`` is the workers' (and the
        bridge's) scheduled rebalance delay, ``worker_overrides`` more worker properties."""
        self.broker = broker
        self._start_worker = connect_worker
        self.name = name
        self.out = out
        self.delay_ms = delay_ms
        self.worker_overrides = dict(worker_overrides or {})
        self.group = unique(f"connect-{name}")  # the bridge coordinates connect.* groups
        self.bridge: BridgeProcess | None = None
        if bridge_proxy is not None:
            self.bridge = bridge_proxy(
                broker.bootstrap,
                config_topic=f"{self.group}-configs",
                group=self.group,
                scheduled_rebalance_max_delay_ms=delay_ms,
            )
        self.bootstrap = broker.bootstrap if self.bridge is None else self.bridge.bootstrap
        self.t0 = now_ms()
        self.workers: dict[str, ConnectWorker] = {}
        self.ports: dict[str, int] = {}
        self.protocols: dict[str, str] = {}
        self.ended: dict[str, list[int]] = {}
        self.connectors: dict[str, int] = {}
        self.topics: dict[str, str] = {}
        self.tasks_ever: dict[str, int] = {}
        """Connector -> the most tasks it was ever configured with (its topic holds their records),
        kept after a delete: the witness still reads a deleted connector's topic."""
        self.rest_retries: list[str] = []
        """The answers REST config changes were retried on (409 during a rebalance...)."""
        self.driver: list[dict[str, Any]] = [
            {
                "t_ms": self.t0,
                "type": "timing",
                "worker": None,
                "scheduled_rebalance_max_delay_ms": delay_ms,
                "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
            }
        ]
        self.marks: dict[str, float] = {}
        self.new: NewWorkers | None = None
        """New-protocol workers (the live drills' Python reference worker), started on demand."""

    # --- actions ------------------------------------------------------------------------------

    def teardown(self, graceful: bool = True) -> None:
        """Close the new-protocol workers, then stop every Java worker at once (each stop waits for
        its process: one after the other, a drill's teardown would take minutes). ``graceful``
        False kills them instead (``ConnectWorker.discard``), for a drill whose judgement is over:
        a graceful stop takes seconds and can sit out Connect's shutdown timeouts."""
        if self.new is not None:
            self.new.close()
        end = (lambda w: w.stop) if graceful else (lambda w: w.discard)
        stoppers = [threading.Thread(target=end(w), daemon=True) for w in self.workers.values()]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join(60)

    def start(
        self,
        name: str,
        protocol: str = "sessioned",
        overrides: dict[str, Any] | None = None,
        group_protocol: str | None = None,
    ) -> ConnectWorker:
        """Start (or restart, same worker id) the worker ``name``; returns once it joined.
        ``overrides``: worker properties of this worker only (over the drill's ``worker_overrides``).
        ``group_protocol`` runs it through the connect-bridge-worker add-on (kafka_workers)."""
        overrides = self.worker_overrides | (overrides or {})
        worker = self._start_worker(
            bootstrap=self.bootstrap,
            group_id=self.group,
            protocol=protocol,
            name=name,
            rest_port=self.ports.get(name),
            scheduled_rebalance_max_delay_ms=self.delay_ms,
            overrides=overrides or None,
            group_protocol=group_protocol,
        )
        self.workers[name] = worker
        self.ports[name] = worker.rest_port
        self.protocols[name] = protocol
        return worker

    def start_together(
        self, names: Iterable[str], start: Callable[[str], Any] | None = None, **kwargs: Any
    ) -> None:
        """Start the workers ``names`` at once, each from a thread of its own; returns once every
        one joined (``start``: how one is started, :meth:`start` with ``kwargs`` by default). For the
        first workers of a drill that is not about how they join: one after the other, each start
        waits for its JVM and then for the rebalance its join begins, which the members already in
        the group learn of at their next heartbeat (up to 3 s later): four workers took 17 s."""
        names = list(names)
        start = start or (lambda name: self.start(name, **kwargs))
        with ThreadPoolExecutor(len(names), thread_name_prefix="start") as pool:
            for future in [pool.submit(start, name) for name in names]:
                future.result()
        for name in names:  # in the order named, whichever joined first
            self.workers[name] = self.workers.pop(name)

    def stop(self, name: str) -> None:
        """Graceful stop (SIGTERM): the worker logs ``Kafka Connect stopped``.

        Stock Connect 4.3.1 can hang in its shutdown hook before the herder stops: Jetty's
        ``Server.join`` in ``RestServer.stop`` waited past 75 s with every pool thread idle (a
        suite run on a loaded machine, thread dump in the worker log). The worker still runs its
        tasks then, and the harness kills it after the dump, as an operator's service manager
        would: that stop is judged as a kill at the time the process was gone (the checker's crash
        rules), not failed as if the bridge had done it."""
        code = self.workers[name].stop()
        if code == -signal.SIGKILL:
            self.ended.setdefault(name, []).append(now_ms())
            return
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
        self.tasks_ever[connector] = max(tasks, self.tasks_ever.get(connector, 0))
        self.driver.append(config_event(now_ms(), self.connectors))

    def create_sink(self, connector: str, source: str, via: str) -> None:
        """A VerifiableSink connector with one task reading ``source``'s topic (one partition, so one
        task consumes it all). It prints every record it gets (``{"name": connector, "task": the
        source task, ...}``), so :func:`check_prints` sees two instances printing at once; it writes
        no topic of its own, so the topic witness does not read one for it."""
        config = {"connector.class": VERIFIABLE_SINK, "tasks.max": 1, "topics": self.topics[source]}
        self.workers[via].create_connector(connector, config)
        self.connectors[connector] = 1
        self.tasks_ever[connector] = 1
        self.driver.append(config_event(now_ms(), self.connectors))

    def reconfigure(self, connector: str, tasks: int, via: str) -> None:
        """``PUT /connectors/<name>/config`` with another ``tasks.max`` (same topic), retried on 409
        (rebalance in progress) and 5xx like an operator's script; the ``config`` event is taken when
        the call returned (the leader wrote the connector config by then; its new task configs, and so
        the stop of tasks beyond ``tasks``, follow)."""
        config = {
            "connector.class": VERIFIABLE_SOURCE,
            "tasks.max": tasks,
            "topic": self.topics[connector],
            "throughput": THROUGHPUT,
        }
        self.workers[via].put_connector_config(connector, config, retries=self.rest_retries)
        self.connectors[connector] = tasks
        self.tasks_ever[connector] = max(tasks, self.tasks_ever.get(connector, 0))
        self.driver.append(config_event(now_ms(), self.connectors))

    def delete(self, connector: str, via: str) -> None:
        """``DELETE /connectors/<name>``, retried like :meth:`reconfigure`; the ``config`` event (the
        connector and its tasks no longer configured) when it returned (the leader wrote the
        tombstone by then). Its topic stays with the witness."""
        self.workers[via].delete_connector(connector, retries=self.rest_retries)
        del self.connectors[connector]
        self.driver.append(config_event(now_ms(), self.connectors))

    def leader(self) -> str | None:
        """The live worker that is the group's Connect leader, as the live workers' newest assignment
        (``Joined group at generation N ... leaderUrl=...``) names it; None when that leader is not
        live (it just stopped: the group has no leader until the rebalance completes)."""
        newest: tuple[int, str | None] = (-1, None)
        for worker in self.live():
            generations = worker.generations()
            if generations and generations[-1] > newest[0]:
                newest = (generations[-1], worker.leader_url())
        url = (newest[1] or "").rstrip("/")
        return next((name for name, w in self.workers.items() if w.running and w.url == url), None)

    def follower(self, avoid: tuple[str, ...] = ()) -> str:
        """A live worker that is not the leader (and not in ``avoid`` when another is left)."""
        leader = self.leader()
        others = [name for name, w in self.workers.items() if w.running and name != leader]
        assert others, f"no live follower (leader {leader})"
        return next((name for name in others if name not in avoid), others[0])

    def wait_task_configs(self, connector: str, key: str, value: str, deadline: float, context: str) -> None:
        """Wait until every live worker reads ``connector``'s task configs: as many as it has tasks,
        each with ``key`` = ``value`` (the leader wrote them), by ``deadline`` (monotonic seconds)."""
        for worker in self.live():
            while True:
                configs = worker.task_configs(connector, max(deadline - time.monotonic(), 1.0))
                if len(configs) == self.connectors[connector] and all(
                    c["config"].get(key) == value for c in configs
                ):
                    break
                assert time.monotonic() < deadline, (
                    f"{worker.name}: {connector}'s new task configs not written in time ({context}): "
                    f"{configs}\n{worker.log_tail()}"
                )
                time.sleep(0.5)

    def live(self) -> list[ConnectWorker]:
        return [w for w in self.workers.values() if w.running]

    def wait_running(self, timeout_s: float = 60.0) -> None:
        """Every connector RUNNING with all its tasks on live workers (REST status)."""
        live = self.live()
        for connector, tasks in self.connectors.items():
            live[0].wait_running(connector, tasks, timeout_s=timeout_s, on=live)

    def bridge_restart(self) -> None:
        """kill -9 of the bridge, then the same ports and state directory again."""
        assert self.bridge is not None, "a drill on Kafka's own coordinator has no bridge"
        self.driver.append({"t_ms": now_ms(), "type": "bridge_restart", "worker": None})
        self.bridge.kill()
        self.bridge.restart()
        self.driver.append({"t_ms": now_ms(), "type": "bridge_up", "worker": None})

    def start_new(self, name: str, replaces: str, timeout_s: float = 30.0) -> None:
        """Start the new-protocol worker ``name`` in place of the Java worker ``replaces`` (same REST
        url, as a worker upgraded in place); returns once the bridge gave it a member epoch."""
        if self.new is None:
            self.new = NewWorkers()
        urls = ADVERTISED_URI.findall(self.workers[replaces].log_text())
        assert urls, f"{replaces} logged no advertised URI"
        host, port = self.bridge.bootstrap.rsplit(":", 1)
        self.new.start(name, host, int(port), self.group, urls[-1], timeout_s=timeout_s)

    def stop_new(self, name: str) -> None:
        """Graceful stop of a new-protocol worker: its work released, then the leave (epoch -1)."""
        assert self.new is not None
        self.new.stop(name)

    # --- judgement ----------------------------------------------------------------------------

    def timeline(self, end_ms: int | None = None) -> Timeline:
        logs = [
            JavaWorkerLog(name, w.log_text(), self.protocols[name], self.ended.get(name, ()))
            for name, w in self.workers.items()
        ]
        recorded = [self.new.events()] if self.new is not None else []
        return build_event_log(logs, self.driver, t0_ms=self.t0, end_ms=end_ms, recorded=recorded)

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
            assert set(report.tasks) == set(range(self.tasks_ever[connector])), (connector, report.tasks)
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
            f"last events:\n{shown}\nbridge log: {self.bridge.log_path if self.bridge else '(none: Kafka)'}"
        )


_READ: dict[tuple[str, str], tuple[int, list[tuple[bytes, bytes, int]]]] = {}
"""(bootstrap, topic) -> (the offset read up to, every record before it), for :func:`read_topic`."""
_READ_LOCK = threading.Lock()


def read_topic(bootstrap: str, topic: str, timeout_s: float = 20.0) -> list[tuple[bytes, bytes, int]]:
    """Every record of partition 0 of ``topic``, in offset order: (key, value, timestamp ms).

    The records a call read are kept, and the next call for the topic reads only those after them:
    a drill reads its topics again after every step, and decoding them all from the start each
    time cost up to a second a read. The topics only grow (appended to, never compacted, truncated
    or recreated: each drill's topic names are unique), so the result is the one a read from the
    start would give."""
    with _READ_LOCK:
        start, before = _READ.get((bootstrap, topic), (0, []))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        assert end >= start, f"{topic}: ends at {end}, {start} records were read before"
        if start:
            consumer.seek(tp, start)
        else:
            consumer.seek_to_beginning(tp)
        got: list[tuple[bytes, bytes, int]] = list(before)
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(200).values():
                got.extend((r.key, r.value, r.timestamp) for r in records)
        assert consumer.position(tp) >= end, f"{topic}: read {consumer.position(tp)} of {end} records"
        with _READ_LOCK:
            _READ[bootstrap, topic] = (consumer.position(tp), got)
        return list(got)
    finally:
        consumer.close()


@pytest.fixture(name="drill")
def drill_fixture(
    kafka_broker: KafkaBroker,
    connect_worker: Callable[..., ConnectWorker],
    bridge_proxy: Callable[..., BridgeProcess],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[JavaDrill]:
    """A drill; at teardown its workers are killed (in parallel) before the fixtures stop the
    bridge: the drill was judged in the test, and a graceful stop only costs time (a worker whose
    coordinator is gone would sit out its full shutdown timeouts)."""
    name = request.node.name.removeprefix("test_").replace("_", "-")
    drill = JavaDrill(kafka_broker, connect_worker, bridge_proxy, tmp_path, name)
    yield drill
    drill.teardown(graceful=False)


def test_rolling_restart_sessioned(drill: JavaDrill) -> None:
    """(a) Three sessioned Java workers, two VerifiableSource connectors with four tasks each; each
    worker in turn is stopped (SIGTERM) and started again with the same worker id."""
    drill.start_together(("w0", "w1", "w2"))
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
    drill.start_together(("w0", "w1", "w2"))
    drill.create("alpha", 4, via="w0")
    drill.create("beta", 4, via="w0")
    drill.wait_running()
    time.sleep(1)  # the tasks run (and write their witness records) a while before the kill
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
    wait_until(
        lambda: drill.workers["w0"].log_text().count("Rebalance started") != marks,
        30,
        0.05,
        "no rebalance started after w2 began joining",
    )
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


def removed_items_stopped_writing(drill: JavaDrill, timeline: Timeline) -> dict[str, int]:
    """The topic witness on what a delete or a smaller ``tasks.max`` removed: each removed task's
    last record is no later than the timeline's last release of that task (its producer closed, so
    it can write no more), and nothing runs it at the end. Returns removed task -> records after the
    removal's ``config`` event (the at-least-once tail of the stop)."""
    removed_at: dict[tuple[str, int], int] = {}
    configured: dict[str, int] = {}
    for event in timeline.events:
        if event["type"] == "config":
            for connector, tasks in configured.items():
                new = event["connectors"].get(connector, 0)
                for task in range(new, tasks):
                    removed_at.setdefault((connector, task), timeline.t0_ms + event["t_ms"])
            configured = dict(event["connectors"])
    for connector, tasks in configured.items():  # re-added (not in this drill): not removed
        for task in range(tasks):
            removed_at.pop((connector, task), None)
    last_release: dict[tuple[str, int], int] = {}
    running: set[tuple[str, str, int]] = set()
    for event in timeline.events:
        if event["type"] == "run":
            running.add((event["worker"], event["connector"], event["task"]))
        elif event["type"] == "release":
            running.discard((event["worker"], event["connector"], event["task"]))
            last_release[event["connector"], event["task"]] = timeline.t0_ms + event["t_ms"]
        elif event["type"] in ("worker_stop", "worker_crash"):
            running = {r for r in running if r[0] != event["worker"]}
    tails: dict[str, int] = {}
    for (connector, task), at in sorted(removed_at.items()):
        assert not any(r[1:] == (connector, task) for r in running), f"{connector}-{task} still runs"
        records = [
            (key, ts)
            for key, _, ts in read_topic(drill.broker.bootstrap, drill.topics[connector])
            if key is not None and int(key) == task
        ]
        released = last_release.get((connector, task))
        assert released is not None, f"{connector}-{task} was removed but never released"
        late = [ts for _, ts in records if ts > released]
        assert not late, f"{connector}-{task}: {len(late)} records after its release at {released}"
        tails[f"{connector}-{task}"] = sum(1 for _, ts in records if ts > at)
    return tails


ACCESS_LINE = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] INFO \S+ - - \[[^\]]*\] "
    r'"(\w+) ([^ ?"]+)(\?forward=true)? HTTP/1\.1" (\d{3}) \S+ "[^"]*" "[^"]*" (\d+) '
)
"""A Connect REST access log line (``RestServer``): time, method, path, forwarded, status, ms taken."""


def who_wrote(drill: JavaDrill, method: str, path: str, via: str, returned_ms: int) -> str:
    """Which worker handled, as the leader, the config change sent to ``via`` that returned at
    ``returned_ms``: ``via``'s successful answer is found in its access log; the leader is either the
    worker whose log shows that request forwarded to it (``?forward=true``, 2xx) just before, or
    ``via`` itself when its newest assignment by then names it leader. Fails otherwise."""

    def lines(name: str) -> list[tuple[int, int, str, str, bool, int]]:
        """(done at, ms taken, method, path, forwarded, status) of each request ``name`` answered."""
        out = []
        for text in drill.workers[name].log_text().splitlines():
            found = ACCESS_LINE.match(text)
            if found:
                date, millis, m, p, fwd, status, took = found.groups()
                out.append((parse_timestamp(date, millis), int(took), m, p, bool(fwd), int(status)))
        return out

    answered = [
        (done, took)
        for done, took, m, p, fwd, status in lines(via)
        if (m, p, fwd) == (method, path, False) and 200 <= status < 300 and done <= returned_ms + 50
    ]
    assert answered, f"{method} {path}: no successful answer in {via}'s access log"
    at, took = answered[-1]
    # Each process writes its access line once the answer is sent, so the leader's line for the
    # forwarded request may come a few ms after the follower's (seen: 2 ms, full suite, loaded).
    for name in drill.workers:
        if name != via and any(
            (m, p, fwd) == (method, path, True) and 200 <= status < 300 and at - took - 50 <= done <= at + 500
            for done, _, m, p, fwd, status in lines(name)
        ):
            return name
    leader_urls = [
        (parse_timestamp(h.group(1), h.group(2)), LEADER_URL.search(text))
        for text in drill.workers[via].log_text().splitlines()
        if (h := HEADER.match(text)) is not None and "Joined group at generation" in text
    ]
    before = [found.group(1) for when, found in leader_urls if when <= at and found is not None]
    assert before and before[-1].rstrip("/") == drill.workers[via].url, (
        f"{method} {path} answered by {via} at {at}, neither forwarded nor as the leader ({before[-1:]})"
    )
    return f"{via} (leader by then)"


def test_config_changes_during_rolling_restart(drill: JavaDrill) -> None:
    """(f) Connectors created, reconfigured and deleted through followers' REST APIs during a
    rolling restart of three sessioned workers: each request goes to a worker that is not the
    leader (Connect forwards it to the leader, which writes the config topic), right after a worker
    stopped, while the rebalance its departure starts is in flight (retried on 409 "rebalance in
    progress" / 5xx like an operator's script, bounded).

    - before the restart: ``alpha`` (4 tasks) and ``gamma`` (3 tasks);
    - a follower stopped: ``beta`` created with 4 tasks through the other follower (forwarded to the
      leader while it rebalances), then the follower back and all four tasks running;
    - the leader stopped: ``beta`` reconfigured to 2 tasks (``PUT .../config``) through another
      follower (the group has no leader until the rebalance completes: the forward fails at first);
    - the last worker stopped: ``gamma`` deleted (``DELETE``), then it is back.

    Judged as every drill (checker + topic/print witnesses), plus: every worker's REST API shows the
    final configs (the leader wrote them), and the tasks the changes removed (beta-2, beta-3, gamma-*)
    stopped writing to their topics once their worker released them."""
    drill.start_together(("w0", "w1", "w2"))
    first_leader = drill.leader()
    assert first_leader is not None
    # (what, method, path, via, leader when sent, epoch ms when it returned)
    used: list[tuple[str, str, str, str, str | None, int]] = []

    def change(
        what: str, method: str, path: str, action: Callable[[str], None], avoid: tuple[str, ...] = ()
    ) -> None:
        leader = drill.leader()
        via = drill.follower(avoid)
        action(via)
        used.append((what, method, path, via, leader, now_ms()))

    change("create alpha", "POST", "/connectors", lambda via: drill.create("alpha", 4, via=via))
    change("create gamma", "POST", "/connectors", lambda via: drill.create("gamma", 3, via=via))
    drill.wait_running()
    first, last = sorted({"w0", "w1", "w2"} - {first_leader})
    for step, name in enumerate((first, first_leader, last)):
        drill.stop(name)
        if step == 0:
            change("create beta", "POST", "/connectors", lambda via: drill.create("beta", 4, via=via))
        elif step == 1:
            change(
                "beta tasks.max 4 -> 2",
                "PUT",
                "/connectors/beta/config",
                lambda via: drill.reconfigure("beta", 2, via=via),
                avoid=(used[-1][3],),
            )
        else:
            change("delete gamma", "DELETE", "/connectors/gamma", lambda via: drill.delete("gamma", via=via))
        drill.start(name)
        if step == 0:
            drill.wait_running(timeout_s=90)  # beta's 4 tasks run before its tasks.max goes down
    drill.wait_running(timeout_s=90)
    # The leader wrote what the followers were asked: every worker reads it back from the config topic.
    for worker in drill.live():
        assert worker.connector_names() == ["alpha", "beta"], (worker.name, worker.connector_names())
        assert worker.connector_config("beta")["tasks.max"] == "2"
    drill.finish(timeout_s=90)
    timeline, _ = drill.wait_converged(settle_s=0)
    tails = removed_items_stopped_writing(drill, timeline)
    routes = [
        f"{what}: sent to {via} (leader then: {leader}), written by {who_wrote(drill, m, p, via, at)}"
        for what, m, p, via, leader, at in used
    ]
    print(
        "  " + "\n  ".join(routes) + "\n"
        f"  REST retries: {len(drill.rest_retries)} {sorted(set(drill.rest_retries))[:4]}\n"
        f"  removed tasks' records after the config change: {tails}"
    )
    assert set(tails) == {"beta-2", "beta-3", "gamma-0", "gamma-1", "gamma-2"}
    assert all(via != leader for _, _, _, via, leader, _ in used)
    assert all("(leader by then)" not in route for route in routes[:2])  # a stable group: forwarded


# --- (b) rolling upgrade to new-protocol workers and back ------------------------------------------

ADVERTISED_URI = re.compile(r"Advertised URI: (\S+)")
"""How a Java worker logs the REST url it advertises to its group (``RestServer``)."""


class NewWorkers:
    """New-protocol workers of the live drills (:func:`connect_bridge.drills.live.new_protocol_worker`,
    one :class:`~connect_bridge.drills.live.Incarnation` each) on an asyncio loop in a thread of
    their own, next to Java workers. Their events are stamped in epoch ms (the Java logs' clock)
    under one lock, in one stream, in the order they happened; :func:`build_event_log` merges it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="new-workers", daemon=True)
        self.thread.start()
        self.lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self.workers: dict[str, Incarnation] = {}

    def _emit(self, type: str, worker: str | None, **fields: Any) -> None:
        """``Incarnation.emit``: called with ``lock`` held."""
        last = self._events[-1]["t_ms"] if self._events else 0
        self._events.append({"t_ms": max(now_ms(), last), "type": type, "worker": worker, **fields})

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self._events)

    def _run(self, coro: Any, timeout_s: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def start(self, name: str, host: str, port: int, group: str, url: str, timeout_s: float = 30.0) -> None:
        """Start ``name`` (REST url ``url``); returns once it has a member epoch (it joined)."""
        timing = Timing(scheduled_rebalance_max_delay_ms=DELAY_MS, rebalance_timeout_ms=REBALANCE_TIMEOUT_MS)

        async def start() -> Incarnation:
            incarnation = Incarnation(name, NEW_PROTOCOL, self.lock, self._emit)
            incarnation.start(
                new_protocol_worker(host, port, group, name, incarnation.on_event, timing, url=url)
            )
            return incarnation

        incarnation = self.workers[name] = self._run(start())
        worker = incarnation.worker
        assert isinstance(worker, LiveNewWorker)
        deadline = time.monotonic() + timeout_s
        while worker.member_epoch <= 0:
            assert incarnation.alive, f"{name} died: {worker.logic.fatal_error}"
            assert time.monotonic() < deadline, f"{name} got no member epoch within {timeout_s:.0f}s"
            time.sleep(0.1)

    def stop(self, name: str) -> None:
        self._run(self.workers[name].stop())

    def running(self, name: str) -> bool:
        return self.workers[name].alive

    def close(self) -> None:
        """Stop every worker still running (gracefully), then the loop."""

        async def stop_all() -> None:
            await asyncio.gather(*(w.stop() for w in self.workers.values()), return_exceptions=True)

        with contextlib.suppress(Exception):
            self._run(stop_all())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def group_type(drill: JavaDrill) -> str:
    """``classic`` or ``connect``: what the bridge says the drill's group is now."""
    [described] = asyncio.run(
        asyncio.wait_for(describe(drill.bridge.host, drill.bridge.port, drill.group), 10)
    )
    return str(described["group_type"])


def wait_group_type(drill: JavaDrill, wanted: str, timeout_s: float) -> float:
    """Seconds until the bridge describes the drill's group as ``wanted``."""
    start = time.monotonic()
    failed = lambda: f"group still {group_type(drill)} after {timeout_s:.0f}s"  # noqa: E731
    wait_until(lambda: group_type(drill) == wanted, timeout_s, 0.2, failed)
    return time.monotonic() - start


def signed_task_configs_after_downgrade(
    drill: JavaDrill, timeout_s: float = 60.0, throughput: int = THROUGHPUT + 5
) -> list[str]:
    """Change every VerifiableSource connector's ``throughput`` (same tasks) and wait until every
    live worker reads the new task configs. A connector's worker writes its new task configs itself
    when it is the leader; a follower forwards them to the leader's REST url as a request signed with
    the session key (``PUT /connectors/<c>/tasks``, sessioned). So this fails if, after the
    conversions, the followers forward to the wrong leader or the leader cannot check their
    signature. Returns the connectors whose task configs were forwarded (at least one: two
    connectors on three balanced workers cannot both run on the leader). Deleted connectors and
    sinks (no topic of their own) are left alone."""
    leader = drill.leader()
    by_id = {w.worker_id: name for name, w in drill.workers.items() if w.running}
    sources = {c: topic for c, topic in drill.topics.items() if c in drill.connectors}
    forwarded = []
    for connector, topic in sources.items():
        runs_on = by_id.get(drill.live()[0].connector_status(connector)["connector"]["worker_id"])
        if runs_on != leader:
            forwarded.append(f"{connector} (on {runs_on}, leader {leader})")
        config = {"connector.class": VERIFIABLE_SOURCE, "tasks.max": drill.connectors[connector]}
        config |= {"topic": topic, "throughput": throughput}
        drill.live()[0].put_connector_config(connector, config)
        drill.driver.append(config_event(now_ms(), drill.connectors))
    assert forwarded, f"both connectors run on the leader {leader}"
    deadline = time.monotonic() + timeout_s
    for connector in sources:
        drill.wait_task_configs(connector, "throughput", str(throughput), deadline, f"leader {leader}")
    drill.wait_running()
    return forwarded


def test_rolling_upgrade_and_downgrade(drill: JavaDrill) -> None:
    """(b) Three sessioned Java workers, VerifiableSource ``alpha`` and ``beta`` with four tasks each.
    Rolling upgrade: one by one a Java worker is stopped (SIGTERM) and a new-protocol worker (the
    live drills' Python reference worker) starts in its place with its REST url, until only
    new-protocol workers remain (the group converts classic -> connect when the first joins).
    Rolling downgrade: one by one a new-protocol worker stops and the Java worker starts again (same
    worker id), until only Java workers remain (the group goes back to classic after the last new
    one left). Each step waits until the merged timeline is converged and balanced.

    The new-protocol workers only record what they own (they run no VerifiableSource task), so the
    topic witness covers the Java phases: no two interleaving copies, no record at all while only
    new-protocol workers ran, and every task producing again once it is back on a Java worker. At
    the end a config change makes a follower forward new task configs to the leader, signed with the
    session key (:func:`signed_task_configs_after_downgrade`). docs/live-drills.md, "Drill (b)"."""
    drill.start_together(("w0", "w1", "w2"))
    drill.create("alpha", 4, via="w0")
    drill.create("beta", 4, via="w1")
    drill.wait_running()
    drill.wait_converged()
    # Followers first: the first new-protocol worker then joins a classic group (the upgrade on
    # join). A classic leader leaving first would have the bridge convert the group at its LeaveGroup
    # already, to hold its work (docs/migration.md, "Classic groups: the bridge holds ...").
    leader = drill.leader()
    assert leader is not None
    java = (*sorted(n for n in drill.workers if n != leader), leader)
    new = tuple(name.replace("w", "n") for name in java)
    types = [group_type(drill)]
    for old, replacement in zip(java, new, strict=True):
        drill.stop(old)
        if old == java[0]:
            assert group_type(drill) == "classic"  # a follower's LeaveGroup changes no group type
        drill.start_new(replacement, replaces=old)
        drill.wait_converged(timeout_s=75)
        types.append(group_type(drill))
    only_new_since = now_ms()  # every Java worker has exited: nothing can produce
    assert not drill.live()
    java_back_at = 0
    for replacement, old in zip(new, java, strict=True):
        drill.stop_new(replacement)
        java_back_at = java_back_at or now_ms()
        drill.start(old)
        drill.wait_converged(timeout_s=75)
        types.append(group_type(drill))
    last_new_left = now_ms()
    classic_after_s = wait_group_type(drill, "classic", timeout_s=30)
    drill.wait_running()  # the REST status agrees: everything RUNNING on the Java workers
    forwarded = signed_task_configs_after_downgrade(drill)
    summary, reports = drill.finish(timeout_s=75)
    print(
        f"  upgrade order {java}; group type after each step: {types}, classic {classic_after_s:.1f}s after "
        f"the last step; forwarded task configs: {forwarded}"
    )
    assert types[0] == "classic", types
    assert set(types[1:4]) == {"connect"}, types  # converted with the first new worker
    # The topic witness on the phases without Java workers, and the resumption after them.
    for connector, topic in drill.topics.items():
        records = read_topic(drill.broker.bootstrap, topic)
        quiet = [(k, v, ts) for k, v, ts in records if only_new_since < ts < java_back_at]
        assert not quiet, (
            f"{connector}: {len(quiet)} records while only new-protocol workers ran: {quiet[:3]}"
        )
        resumed = {int(k) for k, _, ts in records if k is not None and ts > last_new_left}
        assert resumed == set(range(drill.connectors[connector])), (connector, resumed)
    assert summary.ok and all(r.ok for r in reports.values())

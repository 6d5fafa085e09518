"""Real Java Connect 4.3.1 workers with the connect-bridge-worker add-on (jvm/connect-bridge-worker)
through ``connect-bridge serve --upstream``: ``group.protocol=connect`` workers speak
ConnectGroupHeartbeat and run real connectors next to classic workers."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from pathlib import Path
from typing import Any

from connect_bridge.bridge.describe import describe
from connect_bridge.drills.java_timeline import HEADER, parse_timestamp
from kafka_fixtures import KafkaBroker
from kafka_processes import HEAP, SCHEDULED_DELAY_MS, free_ports
from kafka_workers import JOINED_MARK, ConnectWorker, spawn_worker, worker_properties
from polling import wait_until
from test_java_drills import (
    JavaDrill,
    drill_fixture,  # noqa: F401  (the `drill` fixture, shared)
    group_type,
    wait_group_type,
)

CLIENT_SIDE = {"connect.bridge.assignment": "client"}
"""A worker that advertises Connect's IncrementalCooperativeAssignor (client-side assignment)."""


def tasks_by_worker(worker: ConnectWorker, connector: str) -> dict[str, int]:
    """Worker id -> RUNNING tasks of ``connector``, from the REST status."""
    status = worker.connector_status(connector)
    out: dict[str, int] = {}
    for task in status["tasks"]:
        if task["state"] == "RUNNING":
            out[task["worker_id"]] = out.get(task["worker_id"], 0) + 1
    return out


def test_connect_worker_runs_tasks_next_to_a_classic_one(drill: JavaDrill) -> None:
    """A classic (stock) Java worker and a ``group.protocol=connect`` Java worker in one group: the
    group converts to ``connect`` when the new one joins, both run VerifiableSource tasks, and the
    group goes back to ``classic`` when the new one stops; the drill checker and the topic witness
    find no task run twice and none left unowned."""
    classic = drill.start("classic", group_protocol="classic")
    drill.create("alpha", 4, via="classic")
    drill.wait_running()
    assert group_type(drill) == "classic"
    new = drill.start("new", group_protocol="connect")
    assert "group.protocol=connect" in new.own_log()
    wait_group_type(drill, "connect", timeout_s=30)
    drill.wait_converged(timeout_s=75)
    drill.wait_running()
    owners = tasks_by_worker(classic, "alpha")
    assert set(owners) == {classic.worker_id, new.worker_id}, owners
    drill.stop("new")
    wait_group_type(drill, "classic", timeout_s=45)
    drill.wait_converged(timeout_s=75)
    drill.wait_running()
    assert set(tasks_by_worker(classic, "alpha")) == {classic.worker_id}
    drill.finish(timeout_s=75)


def described(drill: JavaDrill) -> dict[str, Any]:
    """The bridge's ConnectGroupDescribe of the drill's group (describe --json's shape)."""
    assert drill.bridge is not None
    [group] = asyncio.run(asyncio.wait_for(describe(drill.bridge.host, drill.bridge.port, drill.group), 10))
    return group


def test_client_side_assignment_by_a_java_worker(drill: JavaDrill) -> None:
    """Two ``group.protocol=connect`` Java workers with ``connect.bridge.assignment=client``: every
    member advertises ``connect-incremental``, so the bridge asks one of them (COMPUTE_ASSIGNMENT)
    and that worker computes the group's target with Connect's own IncrementalCooperativeAssignor
    (PrepareAssignment / InstallAssignment). Both run tasks, nothing twice, nothing unowned."""
    first = drill.start("first", group_protocol="connect", overrides=CLIENT_SIDE)
    drill.create("alpha", 6, via="first")
    drill.wait_running()
    second = drill.start("second", group_protocol="connect", overrides=CLIENT_SIDE)
    drill.wait_converged(timeout_s=75)
    drill.wait_running()
    assert described(drill)["assignor"] == "connect-incremental"
    installed = [w.name for w in (first, second) if "Installed the group's target" in w.own_log()]
    assert installed, "no worker installed a target"
    owners = tasks_by_worker(first, "alpha")
    assert set(owners) == {first.worker_id, second.worker_id}, owners
    assert sorted(owners.values()) == [3, 3], owners
    assert "INVALID_ASSIGNMENT" not in first.own_log() + second.own_log()
    drill.finish(timeout_s=75)


RESTARTED = re.compile(r"Starting task (\S+)")


def starts_of(worker: ConnectWorker, task: str) -> int:
    """How often ``worker`` logged starting ``task`` (``alpha-0``)."""
    return sum(1 for found in RESTARTED.findall(worker.own_log()) if found == task)


def test_rest_restart_of_a_task_another_worker_owns(drill: JavaDrill) -> None:
    """Two ``group.protocol=connect`` Java workers: a REST restart of a task owned by the worker that
    does not lead, sent once to the leader and once to the owner. Either way the leader handles it
    and, not owning the task, asks the coordinator who does (ConnectGroupDescribe: ``ownerUrl``) and
    forwards it there. Without an owner url the leader would answer an error."""
    drill.start("one", group_protocol="connect")
    drill.create("alpha", 4, via="one")
    drill.wait_running()
    drill.start("two", group_protocol="connect")
    drill.wait_converged(timeout_s=75)
    drill.wait_running()
    leader = drill.leader()
    assert leader is not None
    owner = next(name for name in drill.workers if name != leader)
    by_id = {w.worker_id: name for name, w in drill.workers.items()}
    status = drill.workers[leader].connector_status("alpha")
    task = next(t["id"] for t in status["tasks"] if by_id[t["worker_id"]] == owner)
    name = f"alpha-{task}"
    for via in (leader, owner):
        before = starts_of(drill.workers[owner], name)
        leader_before = starts_of(drill.workers[leader], name)  # it ran every task before ``owner`` came
        drill.workers[via].rest("POST", f"/connectors/alpha/tasks/{task}/restart")
        restarted = lambda n=before: starts_of(drill.workers[owner], name) > n  # noqa: E731
        wait_until(restarted, 30, 0.2, f"{owner} did not restart {name} (asked via {via})")
        assert starts_of(drill.workers[leader], name) == leader_before, f"{leader} started {name}"
    drill.finish(timeout_s=75)


def test_a_connect_worker_pointed_at_kafka_says_what_is_wrong(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """A ``group.protocol=connect`` worker pointed straight at Apache Kafka 4.3.1 (no bridge): the
    broker is the group coordinator and lacks the Connect group APIs, so the worker logs an ERROR
    that says so, asks again after a growing backoff, and keeps running (no crash loop).

    Judged on its first four ERRORs, not on a fixed window: each names the next wait, which
    doubles (1, 2, 4, 8 s), and the worker waited at least that long before it asked again. Its
    asks go out with the member's heartbeat cadence (3 s), so the gaps read 3, 3, 6 s, the four
    ERRORs within about 12 s; a worker asking at every heartbeat regardless of the backoff fails
    the third gap (3 s < 4 s)."""
    group = f"connect-no-bridge-{time.time_ns()}"
    (port,) = free_ports(1)
    props = worker_properties(
        bootstrap=kafka_broker.bootstrap, group_id=group, protocol="sessioned", rest_port=port,
        topics_prefix=group, scheduled_rebalance_max_delay_ms=SCHEDULED_DELAY_MS,
    ) | {"group.protocol": "connect"}  # fmt: skip
    wdir = tmp_path / "connect" / "worker"
    wdir.mkdir(parents=True)
    worker = spawn_worker(
        wdir, props, HEAP, name="worker", rest_port=port, bootstrap=kafka_broker.bootstrap,
        group_id=group, protocol="sessioned",
    )  # fmt: skip
    try:
        asked = wait_until(
            lambda: len(unsupported_errors(worker.own_log())) >= 4 or not worker.running,
            90,
            0.25,
            lambda: f"fewer than 4 ERRORs:\n{worker.log_tail()}",
        )
        log = worker.own_log()
        assert asked and worker.running, f"the worker exited:\n{worker.log_tail()}"
    finally:
        worker.discard()
    errors = unsupported_errors(log)[:4]
    first = errors[0][1]
    assert "ERROR" in first and "does not support the Connect group APIs [1000, 1001, 1002, 1003]" in first
    # The backoff: 1 s, 2 s, 4 s, 8 s announced, and each waited in full before the next ask.
    announced = [int(ASKING_AGAIN.findall(line)[0]) for _, line in errors]
    assert announced == [1000, 2000, 4000, 8000], announced
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(errors)]
    assert all(gap >= wait for gap, wait in zip(gaps, announced, strict=False)), (gaps, announced)
    assert JOINED_MARK not in log, "the worker joined a group on a plain Kafka broker"
    assert "Kafka Connect started" in log or "REST resources initialized" in log, "the worker did not run"


UNSUPPORTED = "needs a connect-bridge as the group coordinator"
ASKING_AGAIN = re.compile(r"Asking again in (\d+) ms")


def unsupported_errors(log: str) -> list[tuple[int, str]]:
    """(epoch ms, line) of each line in which the add-on says its coordinator is no connect-bridge."""
    out = []
    for line in log.splitlines():
        header = HEADER.match(line)
        if header is not None and UNSUPPORTED in line:
            out.append((parse_timestamp(header.group(1), header.group(2)), line))
    return out

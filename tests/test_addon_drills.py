"""The proof drills of the connect-bridge-worker add-on: real Apache Kafka 4.3.1 Connect workers
with ``group.protocol=connect`` (jvm/connect-bridge-worker) through ``connect-bridge serve
--upstream``, with real connectors, judged like every Java drill (tests/test_java_drills.py): the
drill checker on the workers' own logs and the connector witness (VerifiableSource's sequence
numbers in its topic, and the seqno lines VerifiableSource and VerifiableSink print).

1. :func:`test_rolling_upgrade_to_connect_protocol_and_back`: four sessioned workers with a source
   and a sink connector, upgraded worker by worker to ``group.protocol=connect`` and rolled back;
   the group goes classic -> connect -> classic.
2. :func:`test_all_connect_protocol_cluster`: only ``group.protocol=connect`` workers, one bridge:
   config changes through a non-leader, a REST task restart routed to the task's owner, session
   key rotation with signed internal requests, a rolling restart, kill -9 of a worker, kill -9 of
   the bridge.
3. :func:`test_connect_protocol_workers_follow_a_bridge_failover`: the same workers behind three
   bridges (docs/high-availability.md); kill -9 of the bridge that coordinates the group.

Each step ends with a verdict: the merged timeline converged, balanced, exclusive and live (the
checker), and both witnesses clean. docs/connect-worker-addon.md, "Proof drills".
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from connect_bridge.drills.java_timeline import config_event
from connect_bridge.drills.witness import check_prints
from kafka_fixtures import BridgeProcess, KafkaBroker
from kafka_workers import ConnectWorker, RestError
from polling import wait_until
from test_ha import listener
from test_ha_java import HaDrill
from test_java_drills import (
    JavaDrill,
    drill_fixture,  # noqa: F401  (the `drill` fixture, shared)
    group_type,
    now_ms,
    signed_task_configs_after_downgrade,
    wait_group_type,
    who_wrote,
)

pytestmark = pytest.mark.heavy

CONNECT = "connect"
CLASSIC = "classic"
KEY_TTL_MS = 10_000
"""``inter.worker.key.ttl.ms`` of the all-new cluster: the leader writes a new session key every
10 s (Connect's default is an hour), so a drill of a few minutes sees many rotations, and the two
the test waits for take 20 s."""
SESSION_KEY_UPDATED = "Session key updated"
"""What every worker's herder logs when it reads a new session key from the config topic."""
SINK_SESSION_MS = 10_000
"""``consumer.session.timeout.ms`` of the all-new cluster's workers (the sink task's consumer; the
consumer's default is 45 s). A worker killed with -9 leaves its sink task's consumer in the sink's
consumer group until that session ends, and the sink task started elsewhere meanwhile waits in its
consumer group's JoinGroup for it. Stopping a task that waits there takes longer than Connect's
``task.shutdown.graceful.timeout.ms`` (5 s): the herder logs ``Graceful stop of task sink-0
failed``, its revocation returns anyway and the member acknowledges it (stock Connect does the
same on Kafka's coordinator), so the next owner starts the task while the old instance is still
closing its consumer (it never had a partition: the consumer group keeps them exclusive). With
the Connect session (10 s) the dead consumer is gone before the work is handed out again."""
COORDINATOR_FOUND = re.compile(r"Connect group coordinator for \S+ is \S*?:(\d+) ")
"""The add-on's line when FindCoordinator names a (new) coordinator: its port."""


def verdict(drill: JavaDrill, step: str, figures: list[str], timeout_s: float = 120.0) -> None:
    """After a step: the timeline converges and stays so (exclusive on every poll), the checker
    finds everything so far ok (exclusive, live within the bound), and both witnesses are clean."""
    timeline, summary = drill.wait_converged(timeout_s)
    assert summary.ok, f"{step}:\n{drill.explain(timeline, summary)}"
    for connector, report in drill.witness().items():
        assert report.ok, f"{step}: {connector}: {report.duplicates}"
    prints = check_prints({name: w.log_text() for name, w in drill.workers.items()})
    assert not prints, f"{step}: {prints}"
    figures.append(
        f"{step}: ok; so far {summary.moves} moves, max unowned {summary.max_unowned_ms} ms, "
        f"{summary.rebalances} rebalances"
    )


# --- 1. rolling upgrade to group.protocol=connect and back ---------------------------------------


def config_change_across_kinds(drill: JavaDrill, kinds: dict[str, str], step: int) -> tuple[str, str]:
    """In a mixed group: a config change (the connector's own config plus ``drill.step``, which
    Connect copies into the task configs) of a connector that does not run on the Connect leader
    (two connectors on four balanced workers: at least one), preferably one whose owner is of the
    other kind than the leader, sent to a worker of the other kind than the leader. That worker
    forwards it to the leader url of its own assignment (a classic worker's from SyncGroup, a
    ``connect`` worker's from ConnectGroupHeartbeat) and the leader writes it (:func:`who_wrote`).
    The owner then generates the new task configs and forwards them to the leader as a request
    signed with the session key (``PUT /connectors/<c>/tasks``), which the leader checks; every live
    worker must read them. Returns the route (words) and the leader's kind."""
    leader = drill.leader()
    assert leader is not None, "no live leader"
    via = next(n for n, w in drill.workers.items() if w.running and kinds[n] != kinds[leader])
    by_id = {w.worker_id: name for name, w in drill.workers.items() if w.running}
    owners = {
        c: by_id.get(drill.live()[0].connector_status(c)["connector"]["worker_id"]) for c in drill.connectors
    }
    candidates = sorted(
        (kinds[o] == kinds[leader], c) for c, o in owners.items() if o is not None and o != leader
    )
    assert candidates, f"every connector runs on the leader {leader}: {owners}"
    connector = candidates[0][1]
    owner = owners[connector]
    assert owner is not None
    config = drill.workers[via].connector_config(connector) | {"drill.step": str(step)}
    signed = f'"POST /connectors/{connector}/tasks HTTP/1.1" 2'
    signed_before = drill.workers[leader].log_text().count(signed)
    path = f"/connectors/{connector}/config"
    answered = f'"PUT {path} HTTP/1.1" 2'
    before = drill.workers[via].log_text().count(answered)
    drill.workers[via].put_connector_config(connector, config, retries=drill.rest_retries)
    drill.driver.append(config_event(now_ms(), drill.connectors))
    # The worker logs its access line after it sent the answer: wait for it before reading the logs.
    wait_until(
        lambda: drill.workers[via].log_text().count(answered) > before,
        15,
        0.2,
        lambda: f"{via} logged no answer to PUT {path}",
    )
    writer = who_wrote(drill, "PUT", path, via, now_ms())
    assert writer == leader, f"{path} via {via} ({kinds[via]}) written by {writer}, leader {leader}"
    deadline = time.monotonic() + 90
    drill.wait_task_configs(
        connector, "drill.step", str(step), deadline, f"90 s, owner {owner}, leader {leader}"
    )
    # The owner's forward of the task configs, signed, accepted by the leader (its access log).
    wait_until(
        lambda: drill.workers[leader].log_text().count(signed) > signed_before,
        15,
        0.2,
        lambda: f"{leader} accepted no task configs of {connector} from {owner}",
    )
    drill.wait_running(timeout_s=90)
    return (
        f"{connector} config via {via} ({kinds[via]}) -> leader {leader} ({kinds[leader]}); task configs "
        f"signed {owner} ({kinds[owner]}) -> {leader}",
        kinds[leader],
    )


def test_rolling_upgrade_to_connect_protocol_and_back(drill: JavaDrill) -> None:
    """Four sessioned workers, all started through the add-on's launcher with
    ``group.protocol=classic`` (stock Connect, step 1 of the rollout), VerifiableSource ``alpha``
    (6 tasks) and VerifiableSink ``sink`` reading alpha's topic. One by one, followers first and the
    Connect leader last, each worker is stopped (SIGTERM) and started again (same worker id) with
    ``group.protocol=connect``; then one by one back to ``classic``. The group is ``classic``
    before, ``connect`` from the first upgraded worker's join until the last one left, ``classic``
    again at the end; after every step the checker and both witnesses find no task run twice and
    none unowned past the bound."""
    names = ("w0", "w1", "w2", "w3")
    drill.start_together(names, group_protocol=CLASSIC)
    drill.create("alpha", 6, via="w0")
    drill.create_sink("sink", "alpha", via="w1")
    drill.wait_running(timeout_s=90)
    figures: list[str] = []
    verdict(drill, "4 classic workers", figures)
    leader = drill.leader()
    assert leader is not None
    order = (*sorted(n for n in names if n != leader), leader)
    types = [group_type(drill)]
    assert types == [CLASSIC], types
    kinds = dict.fromkeys(names, CLASSIC)
    routes: list[str] = []
    leader_kinds: set[str] = set()

    def leader_roles_across_kinds(step: str) -> None:
        """:func:`config_change_across_kinds` at the half-way points (two workers of each kind), and
        at any other mixed step while no change has been written by a leader of its kind yet."""
        leader = drill.leader()
        if leader is None or len(set(kinds.values())) < 2:
            return
        if list(kinds.values()).count(CONNECT) != 2 and kinds[leader] in leader_kinds:
            return
        route, leader_kind = config_change_across_kinds(drill, kinds, len(routes) + 1)
        routes.append(f"{step}: {route}")
        leader_kinds.add(leader_kind)
        verdict(drill, f"{step}: config change across kinds", figures)

    for step, name in enumerate(order):
        drill.stop(name)
        drill.start(name, group_protocol=CONNECT)
        kinds[name] = CONNECT
        if step == 0:
            wait_group_type(drill, CONNECT, timeout_s=30)
        verdict(drill, f"{name} on connect", figures)
        types.append(group_type(drill))
        leader_roles_across_kinds(f"{name} on connect")
    for step, name in enumerate(order):
        drill.stop(name)
        drill.start(name, group_protocol=CLASSIC)
        kinds[name] = CLASSIC
        if step == len(order) - 1:
            classic_after = wait_group_type(drill, CLASSIC, timeout_s=45)
            figures.append(f"classic {classic_after:.1f}s after the last worker rejoined")
        verdict(drill, f"{name} back on classic", figures)
        types.append(group_type(drill))
        leader_roles_across_kinds(f"{name} back on classic")
    drill.wait_running(timeout_s=90)
    summary, reports = drill.finish(timeout_s=90)
    print("  " + "\n  ".join(figures + routes) + f"\n  group type after each step: {types}")
    # A leader of each kind served a worker of the other kind.
    assert leader_kinds == {CLASSIC, CONNECT}, routes
    assert types[1 : len(order) + 1] == [CONNECT] * len(order), types
    assert types[len(order) + 1 : -1] == [CONNECT] * (len(order) - 1), types
    assert types[-1] == CLASSIC, types
    assert summary.ok and all(r.ok for r in reports.values())


# --- 2. an all-new-protocol cluster ----------------------------------------------------------------


def restart_task_owned_elsewhere(drill: JavaDrill, connector: str) -> str:
    """``POST /connectors/<c>/tasks/<n>/restart`` for a task that runs on a follower, sent to a
    worker that neither owns it nor leads (when there is one): Connect forwards it to the leader,
    whose member answers who owns the task (the add-on asks the coordinator, ConnectGroupDescribe),
    and the leader forwards it there. The owner restarts the task (a new ``Starting task`` line)
    and keeps it. Returns how the request travelled."""
    leader = drill.leader()
    status = drill.live()[0].connector_status(connector)
    by_id = {w.worker_id: name for name, w in drill.workers.items() if w.running}
    owned = [(t["id"], by_id.get(t["worker_id"])) for t in status["tasks"] if t["state"] == "RUNNING"]
    task, owner = next((t, o) for t, o in owned if o is not None and o != leader)
    via = next((n for n in by_id.values() if n not in (owner, leader)), leader)
    assert via is not None
    path = f"/connectors/{connector}/tasks/{task}/restart"
    starting = f"Starting task {connector}-{task}"
    before = drill.workers[owner].log_text().count(starting)
    deadline = time.monotonic() + 60
    while True:
        try:
            drill.workers[via].rest("POST", path, timeout_s=30)
            break
        except RestError as exc:  # 409 during a rebalance, as an operator's script retries
            assert exc.status in (409, 500, 503) and time.monotonic() < deadline, exc
            time.sleep(0.5)
    wait_until(
        lambda: drill.workers[owner].log_text().count(starting) > before,
        30,
        0.2,
        lambda: f"{owner} did not restart {connector}-{task}:\n{drill.workers[owner].log_tail()}",
    )

    def answered(name: str, query: str) -> bool:
        """``name``'s access log has a 2xx answer to ``POST path?query``."""
        line = f'"POST {path}{query} HTTP/1.1" 2'
        return any(line in text for text in drill.workers[name].log_text().splitlines())

    # The leader forwards a restart to the owner with ?forward=false (no further forwarding).
    assert answered(owner, "?forward=false"), f"{path} never reached the owner {owner} from the leader"
    if via != leader:
        assert answered(leader, "?forward=true"), f"{path} never reached the leader {leader}"
    running = drill.live()[0].wait_running(connector, drill.connectors[connector], on=drill.live())
    [after] = [t for t in running["tasks"] if t["id"] == task]
    assert by_id.get(after["worker_id"]) == owner, (owner, after)
    return f"{connector}-{task} (on {owner}) restarted through {via}, leader {leader}"


def wait_key_rotations(drill: JavaDrill, rotations: int) -> int:
    """Wait until every live worker has read ``rotations`` more session keys than it had when
    called (its herder logs each one it reads); returns the seconds that took."""
    marks = {w.name: w.log_text().count(SESSION_KEY_UPDATED) for w in drill.live()}
    started = time.monotonic()
    wait_until(
        lambda: all(
            w.log_text().count(SESSION_KEY_UPDATED) >= marks[w.name] + rotations for w in drill.live()
        ),
        rotations * KEY_TTL_MS / 1000 + 60,
        0.5,
        lambda: f"no {rotations} session key rotations: {marks}",
    )
    return round(time.monotonic() - started)


def test_all_connect_protocol_cluster(drill: JavaDrill) -> None:
    """Three workers, all ``group.protocol=connect`` from the start, sessioned with a 10 s session
    key TTL; VerifiableSource ``alpha`` and ``beta`` (4 tasks each) and VerifiableSink ``sink``,
    each created through a worker that is not the leader. Then, one cluster, step by step, each
    judged (checker + witnesses):

    1. ``gamma`` created, reconfigured (3 -> 1 task) and deleted through non-leaders (each written
       by the leader: forwarded, access logs);
    2. a REST restart of a task another worker owns (:func:`restart_task_owned_elsewhere`);
    3. two session key rotations, then task configs a follower forwards signed with the newest key
       (:func:`signed_task_configs_after_downgrade`);
    4. a rolling restart (SIGTERM, same worker id);
    5. kill -9 of a follower, its work back on the others, then the worker again;
    6. kill -9 of the bridge, restarted on the same ports and state."""
    drill.worker_overrides["inter.worker.key.ttl.ms"] = KEY_TTL_MS
    drill.worker_overrides["consumer.session.timeout.ms"] = SINK_SESSION_MS
    names = ("n0", "n1", "n2")
    drill.start_together(names, group_protocol=CONNECT)
    assert group_type(drill) == CONNECT
    figures: list[str] = []
    drill.create("alpha", 4, via=drill.follower())
    drill.create("beta", 4, via=drill.follower())
    drill.create_sink("sink", "alpha", via=drill.follower())
    drill.wait_running(timeout_s=90)
    verdict(drill, "3 connect workers", figures)

    used = []
    for what, method, path, action in (
        ("create gamma", "POST", "/connectors", lambda via: drill.create("gamma", 3, via=via)),
        (
            "gamma 3 -> 1",
            "PUT",
            "/connectors/gamma/config",
            lambda via: drill.reconfigure("gamma", 1, via=via),
        ),
        ("delete gamma", "DELETE", "/connectors/gamma", lambda via: drill.delete("gamma", via=via)),
    ):
        leader, via = drill.leader(), drill.follower()
        action(via)
        used.append((what, method, path, via, leader, now_ms()))
        if what == "create gamma":
            drill.wait_running(timeout_s=90)
    routes = [
        f"{w}: via {v} (leader {ld}), written by {who_wrote(drill, m, p, v, at)}"
        for w, m, p, v, ld, at in used
    ]
    assert all(via != leader for _, _, _, via, leader, _ in used)
    assert all("(leader by then)" not in route for route in routes), routes  # stable group: forwarded
    for worker in drill.live():
        assert worker.connector_names() == ["alpha", "beta", "sink"], (worker.name, worker.connector_names())
    verdict(drill, "config changes through non-leaders", figures)
    figures.extend(routes)

    figures.append(restart_task_owned_elsewhere(drill, "alpha"))
    verdict(drill, "task restart routed to its owner", figures)

    rotated_s = wait_key_rotations(drill, 2)
    forwarded = signed_task_configs_after_downgrade(drill, timeout_s=90)
    figures.append(f"2 key rotations in {rotated_s}s; signed task configs forwarded for {forwarded}")
    verdict(drill, "session key rotation", figures)

    for name in names:
        drill.stop(name)
        drill.start(name, group_protocol=CONNECT)
        verdict(drill, f"{name} restarted", figures)

    victim = drill.follower()
    drill.kill(victim)
    verdict(drill, f"kill -9 of {victim}", figures)
    drill.start(victim, group_protocol=CONNECT)
    verdict(drill, f"{victim} back", figures)

    drill.bridge_restart()
    verdict(drill, "kill -9 of the bridge", figures)
    assert group_type(drill) == CONNECT
    summary, reports = drill.finish(timeout_s=90)
    print("  " + "\n  ".join(figures))
    assert summary.ok and all(r.ok for r in reports.values())


# --- 3. three bridges, the coordinating one killed ------------------------------------------------


@pytest.fixture
def ha_connect_drill(
    kafka_broker: KafkaBroker,
    connect_worker: Callable[..., ConnectWorker],
    bridge_proxy: Callable[..., BridgeProcess],
    tmp_path: Path,
) -> Iterator[HaDrill]:
    drill = HaDrill(kafka_broker, connect_worker, bridge_proxy, tmp_path, "ha-connect")
    try:
        yield drill
    finally:
        drill.teardown(graceful=False)


def test_connect_protocol_workers_follow_a_bridge_failover(ha_connect_drill: HaDrill) -> None:
    """Three ``group.protocol=connect`` workers list three bridges (``ha.enabled``, one state topic)
    in ``bootstrap.servers``. kill -9 of the bridge that coordinates the group: another bridge loads
    the group's partition, every worker looks the coordinator up again (FindCoordinator through
    the bridges it can reach) and heartbeats there, and the work carries on. The killed bridge
    comes back. Judged by the checker and both witnesses, with the time no bridge coordinated the
    group recorded as a bridge outage (``bridge_restart`` .. ``bridge_up``, as test_ha_java)."""
    drill = ha_connect_drill
    drill.start_together(("n0", "n1", "n2"), group_protocol=CONNECT)
    drill.create("alpha", 4, via="n0")
    drill.create("beta", 4, via="n1")
    drill.wait_running(timeout_s=90)
    figures: list[str] = []
    verdict(drill, "3 connect workers behind 3 bridges", figures)
    assert group_type(drill) == CONNECT
    old = drill.bridges.index(drill.bridge)
    marks = {name: len(w.log_text()) for name, w in drill.workers.items()}
    gave_up = {name: w.log_text().count("Giving up all work") for name, w in drill.workers.items()}
    killed = drill.down()
    drill.bridge.kill()
    new = drill.wait_owner([i for i in drill.up() if i != old], timeout_s=60)
    up = drill.back(new)
    port = listener(drill.bridges[new])
    wait_until(
        lambda: all(
            str(port) in COORDINATOR_FOUND.findall(w.log_text()[marks[n] :]) for n, w in drill.workers.items()
        ),
        60,
        0.5,
        lambda: f"not every worker found bridge {new + 1} (port {port})",
    )
    verdict(drill, f"kill -9 of bridge {old + 1}", figures)
    assert group_type(drill) == CONNECT
    fenced = {n: w.log_text().count("Giving up all work") - gave_up[n] for n, w in drill.workers.items()}
    gap = drill.longest_gap(killed, now_ms())
    figures.append(
        f"bridge {new + 1} owned the partition {(up - killed) / 1000:.1f}s after the kill; longest time "
        f"a task ran nowhere around it {gap} ms; workers that gave their work up: {fenced}"
    )
    drill.bridges[old].restart()
    wait_until(
        lambda: drill.covered(drill.up()), 60, 0.3, lambda: "partitions not all owned after the restart"
    )
    drill.bridge = drill.bridges[drill.wait_owner(drill.up())]
    verdict(drill, f"bridge {old + 1} back", figures)
    summary, reports = drill.finish(timeout_s=90)
    print("  " + "\n  ".join(figures))
    assert summary.ok and all(r.ok for r in reports.values())

"""Several bridges share the groups through the upstream cluster (issue 17, docs/high-availability.md).

Real parts: one Apache Kafka 4.3.1 broker (the session fixture) and ``connect-bridge serve``
processes with ``ha.enabled`` on one partitioned state topic. A classic Connect member (hand-made
JoinGroup/SyncGroup/Heartbeat frames, as a sessioned worker sends them) shows what workers see:

* any bridge's FindCoordinator names the listener of the bridge that owns the group's partition,
  and a group request sent to another bridge gets NOT_COORDINATOR;
* kill -9 of the owner: another bridge loads the partition and the member's next heartbeat there
  succeeds with its old member id and generation (a failover removes no member, moves no work);
* a zombie: the owner is paused (SIGSTOP) until another bridge has taken its partition, then
  resumed; its first answers are never a success (its lease ran out while it slept), and
  whichever bridge owns the partition once it has rejoined still has the member: nothing the
  zombie did on resuming reached the state.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import NewTopic
from kafka.protocol.metadata import FindCoordinatorRequest

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic import api as capi
from connect_bridge.state.partitioning import partition_for
from connect_bridge.wire import maps as wm
from connect_bridge.wire.client import KafkaConnection
from kafka_fixtures import BROKER_NODE_ID, BridgeProcess, KafkaBroker, start_bridge
from kafka_processes import free_ports
from polling import wait_until
from test_operator_guide_sections import run as run_block
from test_operator_guide_sections import section
from test_proxy import Raw, produce_request
from test_server import HEARTBEAT_V, SYNC_V, join_message, protocols

pytestmark = pytest.mark.heavy

PARTITIONS = 4
SESSION_MS = 6000
"""The bridges' session in their group: the broker's minimum (group.min.session.timeout.ms)."""
HOST = "127.0.0.1"
WORKER_SESSION_MS = 12_000
"""The new-protocol worker's session: it fences itself after this long without an answer."""


@dataclass
class Fleet:
    bridges: list[BridgeProcess]
    admins: list[str]
    topic: str
    broker: str

    def status(self, i: int) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://{self.admins[i]}/admin/ha", timeout=5) as answer:
            return json.loads(answer.read())

    def alive(self) -> list[int]:
        return [i for i, b in enumerate(self.bridges) if b.process.poll() is None]

    def owner_of(self, partition: int, among: list[int] | None = None) -> int | None:
        for i in among if among is not None else self.alive():
            try:
                if partition in self.status(i)["owned"]:
                    return i
            except (OSError, urllib.error.URLError):
                continue
        return None

    def covered(self, among: list[int]) -> bool:
        return covered(self.status, among, PARTITIONS)


def covered(status: Callable[[int], dict[str, Any]], among: list[int], partitions: int) -> bool:
    """Every partition owned by one of the bridges ``among`` (``status(i)``: bridge i's
    ``GET /admin/ha``), every one of them knows who owns which, and, while there are at least as
    many partitions as bridges, every bridge owns one: until the last bridge to start (or restart)
    has joined the bridges' group the others may cover every partition, and its join then moves
    one of them (a test that took the owner before that would ask the wrong bridge)."""
    owned: dict[str, int] = {}
    views = []
    nodes = set()
    for i in among:
        try:
            answer = status(i)
        except (OSError, urllib.error.URLError):
            return False
        nodes.add(answer["node_id"])
        owned |= {str(p): answer["node_id"] for p in answer["owned"]}
        views.append({p: o["node_id"] for p, o in answer["owners"].items()})
    everyone = partitions < len(among) or set(owned.values()) == nodes
    return len(owned) == partitions and all(view == owned for view in views) and everyone


@pytest.fixture
def fleet(kafka_broker: KafkaBroker, tmp_path: Path) -> Iterator[Fleet]:
    suffix = uuid.uuid4().hex[:8]
    topic = f"bridge-state-{suffix}"
    ports = free_ports(3)
    bridges: list[BridgeProcess] = []
    admins = [f"{HOST}:{p}" for p in ports]
    try:
        for i, admin in enumerate(admins):
            settings = fleet_settings(suffix, i + 1, PARTITIONS)
            bridges.append(
                start_bridge(
                    kafka_broker.bootstrap, tmp_path / f"bridge-{i}", settings=settings, metrics_listen=admin
                )
            )
        fleet = Fleet(bridges, admins, topic, kafka_broker.bootstrap)
        wait_until(lambda: fleet.covered([0, 1, 2]), 60, 0.3, lambda: "partitions not all owned")
        yield fleet
    finally:
        for bridge in bridges:
            if bridge.process.poll() is None:
                os.kill(bridge.process.pid, signal.SIGCONT)
            bridge.stop()


def fleet_settings(suffix: str, node_id: int, partitions: int) -> dict[str, Any]:
    """The settings of bridge ``node_id`` of a test fleet: its own state topic, bridges' group
    and transactional ids (``suffix``), the broker's minimum session, a quick owner refresh."""
    ha = {
        "enabled": True,
        "partitions": partitions,
        "group": f"bridges-{suffix}",
        "transactional_id_prefix": f"state-{suffix}",
        "node_id": node_id,
        "session_timeout_ms": SESSION_MS,
        "heartbeat_interval_ms": 1000,
        "refresh_owners_ms": 500,
    }
    return {"state_topic": f"bridge-state-{suffix}", "ha": ha}


def group_in(partition: int) -> str:
    """A fresh connect group id whose records live in ``partition``."""
    while True:
        group = f"connect-ha-{uuid.uuid4().hex[:8]}"
        if partition_for(group, PARTITIONS) == partition:
            return group


def listener(bridge: BridgeProcess) -> int:
    """The bridge's proxy listener for the broker (FindCoordinator names these)."""
    return bridge.proxy_base_port + BROKER_NODE_ID


@dataclass
class Member:
    """One classic Connect member on one connection: its id and generation once joined."""

    conn: KafkaConnection
    group: str
    member_id: str = ""
    generation: int = -1
    session_ms: int = 10_000
    rebalance_ms: int = 30_000

    async def join(self) -> int:
        """JoinGroup (twice: v4+ asks for the member id first), then SyncGroup as the leader."""
        for _ in range(2):
            msg = await self.conn.request(
                join_message(
                    self.member_id,
                    protocols("http://w1:8083"),
                    self.group,
                    self.session_ms,
                    self.rebalance_ms,
                ),
                5,
            )
            joined = wm.join_response_from_wire(msg)
            if joined.error_code != ErrorCode.MEMBER_ID_REQUIRED:
                break
            self.member_id = joined.member_id
        if joined.error_code:
            return joined.error_code
        self.member_id, self.generation = joined.member_id, joined.generation_id
        req = capi.SyncGroupRequest(
            self.group, self.member_id, self.generation, None, "connect", "sessioned", ()
        )
        synced = wm.sync_response_from_wire(await self.conn.request(wm.sync_to_wire(req, SYNC_V), SYNC_V))
        return synced.error_code

    async def heartbeat(self) -> int:
        req = capi.HeartbeatRequest(self.group, self.member_id, self.generation)
        msg = await self.conn.request(wm.classic_heartbeat_to_wire(req, HEARTBEAT_V), HEARTBEAT_V)
        return wm.classic_heartbeat_response_from_wire(msg).error_code


def find_coordinator(port: int, group: str) -> tuple[int, str, int]:
    async def ask() -> tuple[int, str, int]:
        conn = await KafkaConnection.connect(HOST, port, "finder")
        try:
            resp = await conn.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), 4)
            (c,) = resp.coordinators
            return c.error_code, c.host, c.port
        finally:
            await conn.close()

    return asyncio.run(asyncio.wait_for(ask(), 20))


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_find_coordinator_names_the_owner_and_other_bridges_refuse(fleet: Fleet) -> None:
    group = group_in(1)
    owner = fleet.owner_of(1)
    assert owner is not None
    other = next(i for i in fleet.alive() if i != owner)
    for i in fleet.alive():  # every bridge sends the worker to the owner's listener
        assert find_coordinator(listener(fleet.bridges[i]), group) == (
            0,
            HOST,
            listener(fleet.bridges[owner]),
        )

    async def scenario() -> None:
        wrong = await KafkaConnection.connect(HOST, listener(fleet.bridges[other]), "w1")
        right = await KafkaConnection.connect(HOST, listener(fleet.bridges[owner]), "w1")
        try:
            assert await Member(wrong, group).join() == ErrorCode.NOT_COORDINATOR
            member = Member(right, group)
            assert await member.join() == ErrorCode.NONE
            assert await member.heartbeat() == ErrorCode.NONE
            # The member's own requests at a bridge that does not own the group's partition are
            # refused there as a broker that is not the coordinator refuses them, never relayed
            # upstream: the broker, which never saw the member, would answer UNKNOWN_MEMBER_ID,
            # and a Java worker drops its member id on that (found by the Java failover drill).
            stray = Member(wrong, group, member.member_id, member.generation)
            assert await stray.heartbeat() == ErrorCode.NOT_COORDINATOR
            assert await member.heartbeat() == ErrorCode.NONE
        finally:
            await wrong.close()
            await right.close()

    run(scenario())
    assert group in fleet.status(owner)["groups"]
    assert group not in fleet.status(other)["groups"]

    # describe --admin names the group's partition and bridge; on another bridge it says where.
    def describe(i: int) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "connect_bridge.cli", "describe", group, "--json"]
        argv += ["--bootstrap", fleet.bridges[i].bootstrap, "--admin", fleet.admins[i]]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    here = describe(owner)
    assert here.returncode == 0, here.stderr
    (described,) = json.loads(here.stdout)
    assert described["ha"]["partition"] == 1
    assert described["ha"]["owner"]["node_id"] == owner + 1
    elsewhere = describe(other)
    assert elsewhere.returncode == 1
    assert f"coordinated by bridge node {owner + 1}" in elsewhere.stderr, elsewhere.stderr
    assert "Traceback" not in elsewhere.stderr
    # /metrics: one series per partition, this bridge's own marked self="true".
    with urllib.request.urlopen(f"http://{fleet.admins[owner]}/metrics", timeout=5) as answer:
        scraped = answer.read().decode()
    assert f'connect_bridge_ha_partitions{{owner="{owner + 1}",partition="1",self="true"}} 1.0' in scraped
    assert "connect_bridge_ha_lease_valid 1.0" in scraped

    # The operator guide's commands ("Running several bridges"), as written, on the other bridge:
    # GET /admin/ha through curl | jq shows every partition owned; drain hands its partitions over
    # and exits 0; the remaining two own them all at once, and the group stays with its owner.
    show, drain = section("ha", [("127.0.0.1:9404", fleet.admins[other])])
    shown = json.loads(run_block(show).stdout)
    assert (shown["node_id"], shown["lease_valid"]) == (other + 1, True), shown
    assert sorted(int(p) for p in shown["owners"]) == list(range(PARTITIONS)), shown
    drained = run_block(drain)
    assert drained.returncode == 0 and "Traceback" not in drained.stderr, drained
    assert fleet.bridges[other].process.wait(30) == 0
    rest = [i for i in range(len(fleet.bridges)) if i != other]
    wait_until(lambda: fleet.covered(rest), 30, 0.2, lambda: "the drained bridge's partitions not taken over")
    assert group in fleet.status(owner)["groups"]


def test_kill_9_of_the_owner_moves_the_group_and_keeps_its_member(fleet: Fleet) -> None:
    group = group_in(2)
    owner = fleet.owner_of(2)
    assert owner is not None
    rest = [i for i in fleet.alive() if i != owner]

    async def scenario() -> None:
        conn = await KafkaConnection.connect(HOST, listener(fleet.bridges[owner]), "w1")
        member = Member(conn, group)
        assert await member.join() == ErrorCode.NONE
        await conn.close()
        fleet.bridges[owner].kill()
        killed = time.monotonic()
        await asyncio.to_thread(wait_until, lambda: fleet.owner_of(2, rest) is not None, 40, 0.3)
        took = time.monotonic() - killed
        new_owner = fleet.owner_of(2, rest)
        assert new_owner is not None
        # Every remaining bridge soon names the new owner (until it has heard of the claim it
        # answers COORDINATOR_NOT_AVAILABLE, which clients retry); the member finds it and carries on.
        expected = (0, HOST, listener(fleet.bridges[new_owner]))
        for i in rest:
            answers: list[tuple[int, str, int]] = []

            def names_new_owner(i: int = i, answers: list[tuple[int, str, int]] = answers) -> bool:
                answers.append(find_coordinator(listener(fleet.bridges[i]), group))
                return answers[-1] == expected

            def told(i: int = i, answers: list[tuple[int, str, int]] = answers) -> str:
                return f"bridge {i} answered {answers[-3:]}"

            await asyncio.to_thread(wait_until, names_new_owner, 15, 0.2, told)
            # Before it converges, only "retry" or the killed owner (whose connection fails: retry).
            assert set(answers) <= {expected, (15, "", -1), (0, HOST, listener(fleet.bridges[owner]))}
        conn = await KafkaConnection.connect(HOST, listener(fleet.bridges[new_owner]), "w1")
        member.conn = conn
        try:
            assert await member.heartbeat() == ErrorCode.NONE  # same member id, same generation
        finally:
            await conn.close()
        print(f"partition 2 moved {took:.1f} s after the kill -9 (session {SESSION_MS / 1000:.0f} s)")

    run(scenario())


def test_a_paused_owner_answers_nothing_and_writes_nothing_after_it_resumes(fleet: Fleet) -> None:
    group = group_in(3)
    owner = fleet.owner_of(3)
    assert owner is not None
    rest = [i for i in fleet.alive() if i != owner]
    zombie = fleet.bridges[owner]

    topic = f"ha-late-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=fleet.broker)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    data = Raw(listener(zombie))  # a worker's data connection through the bridge about to pause

    async def scenario() -> None:
        conn = await KafkaConnection.connect(HOST, listener(zombie), "w1")
        member = Member(conn, group)
        assert await member.join() == ErrorCode.NONE
        os.kill(zombie.process.pid, signal.SIGSTOP)
        # Sent while it sleeps: the request waits in its socket until it resumes.
        data.send(produce_request(topic, [b"late"], acks=1), 9, 1)
        try:
            await asyncio.to_thread(wait_until, lambda: fleet.owner_of(3, rest) is not None, 40, 0.3)
            new_owner = fleet.owner_of(3, rest)
            assert new_owner is not None
            # Keep the member alive on the new owner while the zombie sleeps.
            other = await KafkaConnection.connect(HOST, listener(fleet.bridges[new_owner]), "w1")
            alive = Member(other, group, member.member_id, member.generation)
            assert await alive.heartbeat() == ErrorCode.NONE
        finally:
            os.kill(zombie.process.pid, signal.SIGCONT)
        # Its first answers after resuming: the lease is gone, so NOT_COORDINATOR (or the
        # connection is closed because a write it tried was fenced), never success.
        answers = []
        for _ in range(5):
            try:
                answers.append(await asyncio.wait_for(member.heartbeat(), 10))
            except Exception as exc:  # closed: also nothing reached the worker
                answers.append(type(exc).__name__)
                break
            await asyncio.sleep(0.2)
        assert ErrorCode.NONE not in answers, answers
        await conn.close()
        await other.close()
        # Whoever owns the partition once the resumed bridge has rejoined (the assignor may give
        # it back) still has the member with its id and generation: nothing the zombie did on
        # resuming (its member sessions had expired on its clock) reached the state.
        deadline = time.monotonic() + 30
        while True:
            current = fleet.owner_of(3)
            if current is not None:
                conn = await KafkaConnection.connect(HOST, listener(fleet.bridges[current]), "w1")
                member.conn = conn
                try:
                    code = await member.heartbeat()
                finally:
                    await conn.close()
                if code == ErrorCode.NONE:
                    return
                assert code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), code
            assert time.monotonic() < deadline, "no bridge answers for the member's group"
            await asyncio.sleep(0.3)

    run(scenario())
    # The Produce that waited in the paused bridge was dropped with its connection, not relayed.
    assert data.closed_within(15)
    data.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=fleet.broker, auto_offset_reset="earliest")
    try:
        assert not consumer.poll(timeout_ms=3000), "a request held by the paused bridge reached the broker"
    finally:
        consumer.close()


def test_a_new_protocol_worker_follows_its_group_to_the_next_bridge(fleet: Fleet) -> None:
    """The reference new-protocol worker with every bridge as bootstrap: FindCoordinator through
    any of them, and after the owner's kill -9 it finds the next owner and keeps its member id
    and epoch (no fencing, no rejoin) because the new owner loaded the member with a fresh session."""
    from connect_bridge.workers.live_new import LiveNewWorker

    group = group_in(0)
    owner = fleet.owner_of(0)
    assert owner is not None
    rest = [i for i in fleet.alive() if i != owner]
    events: list[tuple[str, dict[str, Any]]] = []

    async def scenario() -> None:
        bootstrap = [(HOST, listener(fleet.bridges[i])) for i in (*rest, owner)]  # a non-owner first
        worker = LiveNewWorker(
            HOST,
            0,
            group,
            "http://n1:8083",
            lambda kind, **fields: events.append((kind, fields)),
            session_timeout_ms=WORKER_SESSION_MS,
            heartbeat_interval_ms=500,
            bootstrap=bootstrap,
        )
        worker.start()
        try:
            await asyncio.to_thread(wait_until, lambda: worker.member_epoch > 0, 20, 0.1)
            member, epoch = worker.member_id, worker.member_epoch
            assert group in fleet.status(owner)["groups"]
            fleet.bridges[owner].kill()
            killed = time.monotonic()
            await asyncio.to_thread(wait_until, lambda: fleet.owner_of(0, rest) is not None, 40, 0.3)
            new_owner = fleet.owner_of(0, rest)
            await asyncio.to_thread(wait_until, lambda: group in fleet.status(new_owner)["groups"], 20, 0.2)
            # Past the worker's own session since the kill: had no heartbeat succeeded on the new
            # owner, the worker would have fenced itself (epoch 0) by now.
            await asyncio.sleep(max(1.0, WORKER_SESSION_MS / 1000 + 1 - (time.monotonic() - killed)))
            assert (worker.member_id, worker.member_epoch) == (member, epoch)
            assert worker.logic.fatal_error is None
            assert not [e for e in events if e[0] == "epoch" and e[1]["epoch"] == 0], events
        finally:
            await worker.stop()

    run(scenario())

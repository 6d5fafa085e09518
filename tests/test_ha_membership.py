"""Bridges sharing the state-topic partitions through a Kafka consumer group (``bridge/ha/membership``).

Against the session's real Apache Kafka 4.3.1 broker with real kafka-python clients: memberships in
threads of this process, and one in a child process for the pause test, because a SIGSTOP of a
thread does not exist and stopping this process would stop the test. The broker's default
``group.min.session.timeout.ms`` (6 s) is the session timeout used here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions, NewTopic

from connect_bridge.bridge.ha.membership import POLL_TIMEOUT_MS, BridgeAddress, BridgeMembership
from connect_bridge.bridge.ha.owners import merge_own, owners_from_description
from polling import wait_until

PARTITIONS = 6
ALL = frozenset(range(PARTITIONS))
SESSION_MS = 6000
HEARTBEAT_MS = 500
JOIN_TIMEOUT_S = 30.0
HOST = "127.0.0.1"


# ------------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    "address",
    [
        BridgeAddress(1, "127.0.0.1", 9092),
        BridgeAddress(0, "bridge-2.example.com", 1),
        BridgeAddress(7, "::1", 65535),
    ],
)
def test_address_round_trips_through_the_client_id(address: BridgeAddress) -> None:
    assert BridgeAddress.decode(address.encode()) == address


@pytest.mark.parametrize(
    "client_id",
    [
        "kafka-python-3.0.12",
        "connect-bridge-ha|1|host",
        "connect-bridge-ha|x|host|9092",
        "connect-bridge-ha|1|host|port",
        "connect-bridge-ha|1||9092",
        "connect-bridge-ha|1|host|0",
        "other-prefix|1|host|9092",
        "connect-bridge-ha|1|host|9092|extra",
    ],
)
def test_foreign_client_ids_are_not_addresses(client_id: str) -> None:
    with pytest.raises(ValueError):
        BridgeAddress.decode(client_id)


A = BridgeAddress(1, HOST, 9001)
B = BridgeAddress(2, HOST, 9002)


def _member(address: BridgeAddress | str, topic: str, partitions: list[int]) -> dict[str, Any]:
    client_id = address.encode() if isinstance(address, BridgeAddress) else address
    assigned = [{"topic": topic, "partitions": partitions}, {"topic": "other", "partitions": [9]}]
    return {"client_id": client_id, "member_assignment": {"assigned_partitions": assigned, "user_data": ""}}


@pytest.mark.parametrize(
    ("state", "members", "previous", "expected"),
    [
        ("Stable", [_member(A, "t", [0, 2]), _member(B, "t", [1])], {}, {0: A, 2: A, 1: B}),
        ("Stable", [_member(A, "t", [0]), _member("kafka-python-x", "t", [1])], {}, {0: A}),
        # rebalancing: the broker describes no assignments; keep the last view of members still listed
        ("PreparingRebalance", [_member(A, "t", [])], {0: A, 1: B}, {0: A}),
        ("CompletingRebalance", [_member(A, "t", []), _member(B, "t", [])], {0: A, 1: B}, {0: A, 1: B}),
        ("Empty", [], {0: A}, {}),
    ],
)
def test_owners_from_a_group_description(
    state: str,
    members: list[dict[str, Any]],
    previous: dict[int, BridgeAddress],
    expected: dict[int, BridgeAddress],
) -> None:
    description = {"group_state": state, "members": members}
    assert owners_from_description(description, "t", previous) == expected


def test_own_knowledge_corrects_the_description() -> None:
    described = {0: A, 1: A, 2: B}
    # A gave partition 1 up (in flight) and already holds 3, which the description does not show yet
    assert merge_own(described, A, {0, 3}) == {0: A, 2: B, 3: A}


# ------------------------------------------------------------------------------ real broker


@dataclass
class Recorder:
    """Every callback with its start and end (monotonic), per bridge node id; ``hold_revoke[node]``
    makes that node's on_revoked block until the event is set."""

    events: list[tuple[float, float, int, str, frozenset[int]]] = field(default_factory=list)
    hold_revoke: dict[int, threading.Event] = field(default_factory=dict)
    started: list[tuple[int, str, frozenset[int]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def callbacks(
        self, node: int
    ) -> tuple[Callable[[frozenset[int]], None], Callable[[frozenset[int]], None]]:
        def record(kind: str) -> Callable[[frozenset[int]], None]:
            def callback(partitions: frozenset[int]) -> None:
                start = time.monotonic()
                with self.lock:
                    self.started.append((node, kind, partitions))
                if kind == "revoked" and node in self.hold_revoke:
                    assert self.hold_revoke[node].wait(60)
                with self.lock:
                    self.events.append((start, time.monotonic(), node, kind, partitions))

            return callback

        return record("assigned"), record("revoked")

    def of(self, node: int, kind: str) -> list[tuple[float, float, frozenset[int]]]:
        with self.lock:
            return [(s, e, p) for s, e, n, k, p in self.events if n == node and k == kind]


def _create_topic(bootstrap: str, name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="test-ha-membership")
    try:
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    finally:
        admin.close()


@pytest.fixture
def ha_topic(kafka_broker: Any) -> str:
    """A fresh 6-partition topic; the bridges' group of a test is named after it."""
    name = f"ha-state-{uuid.uuid4().hex[:10]}"
    _create_topic(kafka_broker.bootstrap, name)
    return name


@pytest.fixture
def memberships(kafka_broker: Any, ha_topic: str) -> Iterator[Callable[..., BridgeMembership]]:
    """Factory: ``memberships(node, recorder)`` starts a bridge member of the test's group; all are
    closed at teardown."""
    started: list[BridgeMembership] = []

    def start(
        node: int,
        recorder: Recorder,
        on_assigned: Callable[[frozenset[int]], None] | None = None,
        on_revoked: Callable[[frozenset[int]], None] | None = None,
        heartbeat_interval_ms: int = HEARTBEAT_MS,
        client_options: dict[str, Any] | None = None,
    ) -> BridgeMembership:
        recorded_assigned, recorded_revoked = recorder.callbacks(node)
        membership = BridgeMembership(
            kafka_broker.bootstrap,
            ha_topic,
            ha_topic,
            BridgeAddress(node, HOST, 9000 + node),
            on_assigned=on_assigned or recorded_assigned,
            on_revoked=on_revoked or recorded_revoked,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=heartbeat_interval_ms,
            refresh_owners_ms=300,
            client_options=client_options,
        )
        membership.start()
        started.append(membership)
        return membership

    yield start
    for membership in reversed(started):
        membership.close()


def _split(members: list[BridgeMembership]) -> dict[int, BridgeAddress] | None:
    """partition -> owner when the members hold every partition exactly once, else None."""
    owners: dict[int, BridgeAddress] = {}
    for member in members:
        for p in member.assigned:
            if p in owners:
                return None
            owners[p] = member.me
    return owners if set(owners) == ALL else None


def _handed_over(recorder: Recorder, old: int, new: list[int], partitions: frozenset[int]) -> None:
    """Each partition's on_revoked on ``old`` returned before any ``new`` node's on_assigned for it began."""
    for p in partitions:
        revoked_end = max(e for _, e, ps in recorder.of(old, "revoked") if p in ps)
        assigned_start = min(s for n in new for s, _, ps in recorder.of(n, "assigned") if p in ps)
        assert revoked_end <= assigned_start, f"partition {p} assigned before its old owner gave it up"


def test_bridges_split_hand_over_and_drain(memberships: Callable[..., BridgeMembership]) -> None:
    recorder = Recorder()
    members = [memberships(node, recorder) for node in (0, 1, 2)]
    m0, m1, m2 = members

    def balanced() -> dict[int, BridgeAddress] | None:  # sticky: 2 each, once all three joined
        return _split(members) if sorted(len(m.assigned) for m in members) == [2, 2, 2] else None

    split = wait_until(balanced, JOIN_TIMEOUT_S, 0.05, lambda: f"no split: {members_view(members)}")
    wait_until(lambda: all(m.owners() == split for m in members), 10, 0.05, "owners() disagree")
    assert all(m.lease_valid() for m in members)

    # m2 drains with an on_revoked that blocks longer than a session timeout: the other bridges must
    # not get its partitions meanwhile, and m2 must stay in the group (heartbeats go on).
    moved = m2.assigned
    kept = {0: m0.assigned, 1: m1.assigned}
    recorder.hold_revoke[2] = threading.Event()
    drain = threading.Thread(target=m2.drain)
    drain.start()
    wait_until(lambda: (2, "revoked", moved) in recorder.started, 10, 0.01, "m2 did not start giving up")
    time.sleep(SESSION_MS / 1000 + 1)  # the hold is the test: nothing may move while on_revoked blocks
    assert not (m0.assigned | m1.assigned) & moved
    assert m2.lease_valid(), "a blocking on_revoked stopped the heartbeats"
    recorder.hold_revoke[2].set()
    drain.join(30)
    assert not drain.is_alive()
    assert not m2.lease_valid() and m2.assigned == frozenset()

    split = wait_until(lambda: _split([m0, m1]), JOIN_TIMEOUT_S, 0.05, lambda: members_view(members))
    _handed_over(recorder, 2, [0, 1], moved)
    assert m0.assigned >= kept[0] and m1.assigned >= kept[1], "cooperative: the others keep theirs"
    assert not recorder.of(0, "revoked") and not recorder.of(1, "revoked")
    wait_until(lambda: m0.owners() == split and m1.owners() == split, 10, 0.05, "owners() after drain")
    assert {owner.node_id for owner in split.values()} == {0, 1}

    # close (quick) moves m1's partitions to m0 the same way
    moved = m1.assigned
    m1.close()
    wait_until(lambda: m0.assigned == ALL, JOIN_TIMEOUT_S, 0.05, lambda: members_view(members))
    _handed_over(recorder, 1, [0], moved)
    wait_until(lambda: m0.owners() == dict.fromkeys(ALL, m0.me), 10, 0.05, "owners() after close")


def test_a_failing_callback_leaves_the_group(memberships: Callable[..., BridgeMembership]) -> None:
    recorder = Recorder()
    m0 = memberships(0, recorder)
    wait_until(lambda: m0.assigned == ALL, JOIN_TIMEOUT_S, 0.05, "first bridge did not get every partition")

    failed: list[frozenset[int]] = []
    revoked: list[frozenset[int]] = []

    def refuse(partitions: frozenset[int]) -> None:
        failed.append(partitions)
        raise RuntimeError("cannot load")

    broken = memberships(1, recorder, refuse, revoked.append)
    failed_at = wait_until(
        lambda: broken.failure and time.monotonic(), JOIN_TIMEOUT_S, 0.01, "never assigned"
    )
    assert not broken.lease_valid(), "a bridge whose load failed must stop answering at once"
    reason = broken.failed()
    assert reason and "refuse(" in reason and "RuntimeError: cannot load" in reason and "\n" not in reason
    assert m0.failed() is None
    wait_until(lambda: m0.assigned == ALL, JOIN_TIMEOUT_S, 0.05, "the partitions did not come back")
    # back well within a session timeout: the failed bridge sent LeaveGroup rather than being expired
    assert time.monotonic() - failed_at < SESSION_MS / 1000
    assert revoked and revoked[-1] == failed[0], "the partially loaded partitions were not unloaded"
    assert broken.assigned == frozenset() and not broken.lease_valid()


def _slow_down_assignor(member: BridgeMembership, delay_s: float) -> None:
    """Make the member's leader computation take ``delay_s``. Set right after ``start()``: the
    assignor is looked up at each assignment, long after this returns."""
    assign = member._assignor.assign

    def slow_assign(*args: Any) -> Any:
        time.sleep(delay_s)
        return assign(*args)

    member._assignor.assign = slow_assign  # type: ignore[method-assign]


def test_a_leader_rejoining_on_new_metadata_completes_its_join(
    kafka_broker: Any, ha_topic: str, memberships: Callable[..., BridgeMembership]
) -> None:
    """The leader re-joins when the state topic's metadata changes (here: partitions added; in
    practice: the topic created while the bridges start). Its JoinGroup waits for the follower's
    next heartbeat (2 s), longer than one poll: kafka-python 3.0.12 then orphaned the join and the
    leader was expired, the follower taking everything (``bridge/ha/join.py``). Now the split is
    balanced and sticky: each keeps the partitions it had and gets one of the new ones."""
    recorder = Recorder()
    fast_metadata = {"metadata_max_age_ms": 300}
    slow_heartbeats = {"heartbeat_interval_ms": 2000, "client_options": fast_metadata}
    members = [memberships(n, recorder, **slow_heartbeats) for n in (0, 1)]
    for member in members:  # a leader slower than one poll (a loaded host): the race made certain
        _slow_down_assignor(member, POLL_TIMEOUT_MS / 1000 * 1.5)
    wait_until(
        lambda: _split(members) and sorted(len(m.assigned) for m in members) == [3, 3],
        JOIN_TIMEOUT_S,
        0.05,
        lambda: members_view(members),
    )
    before = [m.assigned for m in members]
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap, client_id="test-ha-membership")
    try:
        admin.create_partitions({ha_topic: NewPartitions(PARTITIONS + 2)})
    finally:
        admin.close()
    grown = frozenset(range(PARTITIONS + 2))

    def regrown() -> bool:
        m0, m1 = (m.assigned for m in members)
        return len(m0) == len(m1) == 4 and m0 | m1 == grown

    wait_until(
        regrown,
        JOIN_TIMEOUT_S,
        0.05,
        lambda: f"not balanced after the leader's re-join: {members_view(members)}",
    )
    assert all(m.assigned >= held for m, held in zip(members, before, strict=True)), "a partition moved"
    assert not recorder.of(0, "revoked") and not recorder.of(1, "revoked")
    assert all(m.lease_valid() for m in members)


def members_view(members: list[BridgeMembership]) -> str:
    return ", ".join(f"{m.me.node_id}: {sorted(m.assigned)}" for m in members)


# ------------------------------------------------------------------------- a paused bridge

CHILD = """
import json, sys, threading, time
from connect_bridge.bridge.ha.membership import POLL_TIMEOUT_MS, BridgeAddress, BridgeMembership

bootstrap, topic, session_ms, heartbeat_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
out = threading.Lock()

def emit(**fields):
    with out:
        print(json.dumps(fields), flush=True)

def callback(kind):
    return lambda partitions: emit(kind=kind, t=time.monotonic(), partitions=sorted(partitions))

member = BridgeMembership(bootstrap, topic, topic, BridgeAddress(2, "127.0.0.1", 9002),
                          on_assigned=callback("assigned"), on_revoked=callback("revoked"),
                          session_timeout_ms=session_ms, heartbeat_interval_ms=heartbeat_ms)
member.start()
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
while not stop.wait(0.05):
    before = time.monotonic()
    valid = member.lease_valid()
    emit(kind="report", t=before, lease=valid, assigned=sorted(member.assigned))
member.close()
"""


class Child:
    """The child bridge: its JSON lines, collected by a reader thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self.lines.append(json.loads(line))

    def of(self, kind: str, after: float = -1.0) -> list[dict[str, Any]]:
        with self._lock:
            return [line for line in self.lines if line["kind"] == kind and line["t"] > after]

    def assigned(self) -> frozenset[int]:
        reports = self.of("report")
        return frozenset(reports[-1]["assigned"]) if reports else frozenset()


def test_a_paused_bridge_loses_its_lease_at_once_and_rejoins(
    kafka_broker: Any, ha_topic: str, memberships: Callable[..., BridgeMembership]
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, kafka_broker.bootstrap, ha_topic, str(SESSION_MS), str(HEARTBEAT_MS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    child = Child(process)
    try:
        recorder = Recorder()
        parent = memberships(1, recorder)

        def split() -> bool:
            mine, theirs = parent.assigned, child.assigned()
            return bool(mine and theirs and not mine & theirs and mine | theirs == ALL)

        wait_until(
            split, JOIN_TIMEOUT_S, 0.05, lambda: f"no split: {sorted(parent.assigned)} {child.assigned()}"
        )
        held = child.assigned()

        stopped_at = time.monotonic()
        os.kill(process.pid, signal.SIGSTOP)
        wait_until(
            lambda: parent.assigned == ALL,
            SESSION_MS / 1000 * 4,
            0.05,
            "the paused bridge kept its partitions",
        )
        assert (
            time.monotonic() - stopped_at >= SESSION_MS / 1000 * 0.9
        )  # taken over by session expiry, not earlier
        resumed_at = time.monotonic()
        os.kill(process.pid, signal.SIGCONT)

        first = wait_until(lambda: child.of("report", resumed_at), 10, 0.01, "no report after SIGCONT")[0]
        assert first["lease"] is False, f"the resumed bridge still claimed its lease: {first}"

        # its lost partitions reach on_revoked, then it rejoins and gets a share back cleanly
        lost = wait_until(lambda: child.of("revoked", resumed_at), 15, 0.05, "lost partitions never revoked")[
            0
        ]
        assert frozenset(lost["partitions"]) == held
        wait_until(
            split, JOIN_TIMEOUT_S, 0.05, lambda: f"no rejoin: {sorted(parent.assigned)} {child.assigned()}"
        )
        regained = child.of("assigned", resumed_at)
        assert regained and regained[0]["t"] >= lost["t"]
        for p in regained[0]["partitions"]:  # handed back by the parent first (both clocks: CLOCK_MONOTONIC)
            given_up = [end for _, end, ps in recorder.of(1, "revoked") if p in ps]
            assert given_up and max(given_up) <= regained[0]["t"], f"partition {p} owned twice"
        wait_until(
            lambda: (last := child.of("report")[-1])["lease"] and last["assigned"], 10, 0.05, "no lease back"
        )
        assert parent.lease_valid()
        # balanced and sticky: the rejoined bridge gets half, taken only from what the parent held
        assert len(parent.assigned) == len(child.assigned()) == PARTITIONS // 2, members_view([parent])
        assert not [p for s, _, ps in recorder.of(1, "assigned") if s >= resumed_at for p in ps]
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
            assert process.stdin is not None
            process.stdin.close()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)

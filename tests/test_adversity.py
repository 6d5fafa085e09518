"""Issue 10: mid-upgrade paths where a task ran twice or nowhere, each reproduced through the coordinator.

Every test here failed on the engine before its fix. Workers are driven the way Java Connect workers
behave, not the way a polite simulation would: a cooperative worker keeps running everything it owns
after a generation reset, reports what it runs as its allocation, stops revoked work before it
rejoins, and may stall (its herder stops polling) for longer than the rebalance timeout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from connect_bridge.codecs.connect_protocol import decode_assignment
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.holds import TASK_SHUTDOWN_MS, zombie_grace_ms
from connect_bridge.state.model import (
    EMPTY,
    CurrentAssignment,
    GroupMetadata,
    Items,
    MemberMetadata,
    MemberState,
    TargetMetadata,
)
from connect_bridge.state.records import Record, RecordType
from test_migration import (
    A0,
    A1,
    A2,
    AC,
    ALL,
    B0,
    B1,
    BC,
    OFFSET,
    RIP,
    URLS,
    W1_FULL,
    W2_FULL,
    G,
    Log,
    cbeat,
    cjoin,
    classic,
    connect,
    coordinator,
    csync,
    current,
    fs,
    nbeat,
    njoin,
    payload,
    protocols,
    reconcile_legacy,
    stable_classic,
    upgraded_and_settled,
)

# ------------------------------------------------------------------------------------ drivers


@dataclass
class JavaLike:
    """A cooperative (sessioned) Java Connect worker reduced to what the coordinator can observe."""

    name: str
    member_id: str
    generation: int
    runs: set[ConnectorTaskId] = field(default_factory=set)
    instance: str | None = None

    @property
    def url(self) -> str:
        return f"http://{self.name}/"

    def heartbeat(self, coord: GroupCoordinator, now: int) -> int:
        return cbeat(coord, self.member_id, self.generation, now=now, instance=self.instance)

    def rejoin(self, coord: GroupCoordinator, now: int) -> None:
        """JoinGroup reporting what it runs, then SyncGroup; revoked work stops at once (KIP-415)."""
        for _ in range(3):
            jr = cjoin(coord, self.member_id, self.url, frozenset(self.runs), now=now, instance=self.instance)
            assert jr is not None
            if jr.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""  # generation reset; it keeps running everything (cooperative)
                continue
            if jr.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = jr.member_id
                continue
            assert jr.error_code == 0, jr
            self.member_id, self.generation = jr.member_id, jr.generation_id
            sr = csync(coord, self.member_id, self.generation, now=now, instance=self.instance)
            assert sr is not None
            if sr.error_code != 0:
                continue
            asg = decode_assignment(sr.assignment)
            self.runs -= set(asg.revoked_items)
            self.runs |= set(asg.items)
            if not asg.revoked_items:
                return
        return


@dataclass
class NewLike:
    """A new-protocol worker: runs exactly what its last assignment says, reports it as owned."""

    member_id: str
    epoch: int
    runs: set[ConnectorTaskId] = field(default_factory=set)

    def heartbeat(self, coord: GroupCoordinator, now: int) -> int:
        resp = nbeat(coord, self.member_id, self.epoch, frozenset(self.runs), now=now)
        if resp.error_code not in (0, int(ErrorCode.COMPUTE_ASSIGNMENT)):
            return resp.error_code
        self.epoch = resp.member_epoch
        if resp.assignment is not None:
            self.runs = set(resp.assignment.items)
        return 0


def assert_exclusive(*workers: JavaLike | NewLike) -> None:
    seen: dict[ConnectorTaskId, str] = {}
    for w in workers:
        name = getattr(w, "name", w.member_id)
        for item in w.runs:
            assert item not in seen, f"{item} runs on {seen[item]} and {name}"
            seen[item] = name


def settle(coord: GroupCoordinator, workers: list[JavaLike | NewLike], now: int, rounds: int = 12) -> int:
    """Heartbeat everyone (rejoining when told) until a round changes nothing; exclusive throughout."""
    for _ in range(rounds):
        changed = False
        for w in workers:
            before = (set(w.runs), getattr(w, "generation", None), getattr(w, "epoch", None))
            now += 10
            if isinstance(w, JavaLike):
                if w.heartbeat(coord, now) in (RIP, int(ErrorCode.ILLEGAL_GENERATION)):
                    w.rejoin(coord, now)
            else:
                w.heartbeat(coord, now)
            assert_exclusive(*workers)
            changed |= before != (set(w.runs), getattr(w, "generation", None), getattr(w, "epoch", None))
        if not changed:
            return now
    raise AssertionError(f"no fixed point after {rounds} rounds: {current(coord)}")


def run_for(
    coord: GroupCoordinator, workers: list[JavaLike | NewLike], start: int, end: int, step: int = 3_000
) -> None:
    """Time passes with live workers heartbeating (rejoining when told) every ``step`` ms."""
    for t in range(start, end, step):
        coord.advance(t)
        for w in workers:
            if isinstance(w, JavaLike):
                if w.heartbeat(coord, t) in (RIP, int(ErrorCode.ILLEGAL_GENERATION)):
                    w.rejoin(coord, t)
            else:
                w.heartbeat(coord, t)
    coord.advance(end)


def owners_consistent(coord: GroupCoordinator) -> None:
    """No owner entry outlives its member or names work the member does not own."""
    g = connect(coord)
    for item, mid in g.owners.items():
        assert mid in g.members, f"{item} owned by departed {mid}"
        assert item in g.members[mid].current.owned, f"{item} not owned by {mid}"
    for mid, m in g.members.items():
        for item in m.current.owned:
            assert g.owners.get(item) == mid, f"{item} of {mid} missing from the owner index"


def legacy_metadata(name: str, owned: Items) -> MemberMetadata:
    return MemberMetadata(
        url=f"http://{name}/",
        config_offset=OFFSET,
        rebalance_timeout_ms=60_000,
        protocol="sessioned",
        classic_protocols=protocols(f"http://{name}/", owned),
    )


# ------------------------------------------------------------------ 1. stall, work running nowhere


def test_unreleased_legacy_members_behind_the_target_epoch_are_told_to_rejoin() -> None:
    """L1 and L2 sit UNRELEASED at epoch 5 when target 6 swaps B-0 and A-0 between them: each waits
    for an item the other runs. Before the fix both heard NONE forever and A-1, B-1 ran nowhere."""
    coord = coordinator()
    l1_runs, l2_runs = fs(AC, A0), fs(BC, B0)
    records = [
        Record(RecordType.GROUP_METADATA, G, "", GroupMetadata(group_epoch=6, leader_id="l1", member_seq=3)),
        Record(RecordType.MEMBER_METADATA, G, "l1", legacy_metadata("l1", l1_runs)),
        Record(RecordType.MEMBER_METADATA, G, "l2", legacy_metadata("l2", l2_runs)),
        Record(RecordType.MEMBER_METADATA, G, "n3", MemberMetadata(url="http://n3/", config_offset=OFFSET)),
        Record(
            RecordType.CURRENT_ASSIGNMENT, G, "l1", CurrentAssignment(5, 4, MemberState.UNRELEASED, l1_runs)
        ),
        Record(
            RecordType.CURRENT_ASSIGNMENT, G, "l2", CurrentAssignment(5, 4, MemberState.UNRELEASED, l2_runs)
        ),
        Record(RecordType.CURRENT_ASSIGNMENT, G, "n3", CurrentAssignment(6, 5, MemberState.STABLE, fs(A2))),
        Record(RecordType.TARGET_MEMBER, G, "l1", fs(AC, A1, B0)),
        Record(RecordType.TARGET_MEMBER, G, "l2", fs(BC, B1, A0)),
        Record(RecordType.TARGET_MEMBER, G, "n3", fs(A2)),
        Record(RecordType.TARGET_METADATA, G, "", TargetMetadata(6)),
    ]
    coord.replay(records, 0)
    assert cbeat(coord, "l1", 5, now=10) == RIP
    assert cbeat(coord, "l2", 5, now=10) == RIP

    workers: list[JavaLike | NewLike] = [
        JavaLike("l1", "l1", 5, set(l1_runs)),
        JavaLike("l2", "l2", 5, set(l2_runs)),
        NewLike("n3", 6, {A2}),
    ]
    settle(coord, workers, 20)
    running = set().union(*(w.runs for w in workers))
    assert running == ALL, sorted(map(str, ALL - running))
    assert connect(coord).state.value == "STABLE"
    owners_consistent(coord)


# ----------------------------------------------------------- 2. double run after a legacy timeout


def _balance_onto_new_worker() -> tuple[GroupCoordinator, Log, JavaLike, JavaLike, NewLike, NewLike, int]:
    """w1, w2 legacy; w3 new; then w4 (new) joins and the target moves one item off w1 to w4."""
    coord, log, w1, w2, w3 = upgraded_and_settled()
    workers = (
        JavaLike("w1", w1, 2, set(W1_FULL - {A2})),
        JavaLike("w2", w2, 2, set(W2_FULL)),
        NewLike(w3, 2, {A2}),
    )
    resp = njoin(coord, "", "http://w4/", now=1_000)
    n4 = NewLike(resp.member_id, resp.member_epoch)
    return coord, log, workers[0], workers[1], workers[2], n4, 1_000


def test_removed_legacy_member_keeps_what_it_runs_out_of_other_targets() -> None:
    """A legacy worker must give up an item to w4; its herder stalls (no JoinGroup). The join timer
    removes it after the rebalance timeout, but the Java worker still runs that item: it must not
    reach w4 before the hold expires or the stalled worker comes back."""
    coord, log, w1, w2, w3, n4, now = _balance_onto_new_worker()
    g = connect(coord)
    moved = g.target[n4.member_id]
    stalled, other = (w1, w2) if moved & w1.runs else (w2, w1)
    assert moved and moved <= stalled.runs, "the balance takes w4's work from one legacy worker"
    assert stalled.heartbeat(coord, now + 10) == RIP  # ...and its herder never rejoins
    live: list[JavaLike | NewLike] = [other, w3, n4]
    run_for(coord, live, now + 20, now + 60_100)  # legacy join timer: the stalled worker is gone
    assert stalled.member_id not in g.members
    for t in range(now + 60_100, now + 120_000, 3_000):
        run_for(coord, live, t, t + 1)
        assert not (n4.runs & stalled.runs), f"granted while the stalled worker runs it: {n4.runs}"
        assert_exclusive(stalled, *live)
    owners_consistent(coord)

    # The herder wakes up: UNKNOWN_MEMBER_ID, rejoin with the same url and everything it runs.
    assert stalled.heartbeat(coord, now + 120_000) == int(ErrorCode.UNKNOWN_MEMBER_ID)
    stalled.rejoin(coord, now + 120_010)
    settle(coord, [stalled, *live], now + 120_020)
    assert set().union(w1.runs, w2.runs, w3.runs, n4.runs) == ALL
    owners_consistent(coord)
    log.check_replay(now + 130_000)


def test_removed_legacy_members_work_is_dealt_after_the_hold() -> None:
    coord, _, w1, w2, w3, n4, now = _balance_onto_new_worker()
    stalled, other = (w1, w2) if connect(coord).target[n4.member_id] & w1.runs else (w2, w1)
    assert stalled.heartbeat(coord, now + 10) == RIP
    live: list[JavaLike | NewLike] = [other, w3, n4]
    t = now + 60_010 + coord.config.scheduled_rebalance_max_delay_ms + 1
    run_for(coord, live, now + 20, t)
    stalled.runs.clear()  # the hold expired: a worker still running it is beyond anyone's protection
    settle(coord, [other, w3, n4], t)
    assert set().union(other.runs, w3.runs, n4.runs) == ALL
    owners_consistent(coord)


def test_fenced_new_protocol_member_keeps_its_revoking_work_out_of_other_targets() -> None:
    """Same for a new-protocol member: UNREVOKED (told to stop A-2 for w4), then a heartbeat with a
    wrong epoch before it acknowledged. It may still run A-2: the fencing is answered and nothing
    else changes (Kafka's answer, tests/test_consumer_heartbeat_differential.py), so A-2 stays its
    own; once it stops talking, its session timer removes it and A-2 stays held until the worker
    has surely fenced itself and stopped."""
    coord, _, w1, w2, w3, n4, now = _balance_onto_new_worker()
    g = connect(coord)
    # Make w3 the loser: the target of w4 is whatever w3 runs (as a client-side assignor could).
    target = {
        w1.member_id: frozenset(w1.runs),
        w2.member_id: frozenset(w2.runs),
        w3.member_id: EMPTY,
        n4.member_id: frozenset(w3.runs),
    }
    g.install_target(g.group_epoch, target)
    # w3 reads the revocation but is slow to stop A-2 (it still runs it, unacknowledged)...
    assert nbeat(coord, w3.member_id, w3.epoch, frozenset(w3.runs), now=now + 10).error_code == 0
    assert g.members[w3.member_id].current.revoking == fs(A2) and w3.runs == {A2}
    fenced = nbeat(coord, w3.member_id, w3.epoch + 7, frozenset(w3.runs), now=now + 20)
    assert fenced.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert g.members[w3.member_id].current.revoking == fs(A2)  # still w3's
    owners_consistent(coord)
    session = g.members[w3.member_id].metadata.session_timeout_ms
    stopped_by = now + 10 + session + TASK_SHUTDOWN_MS  # its last answer + its session + shutdown
    for t in range(now + 30, now + 60_000, 3_000):
        run_for(coord, [w1, w2, n4], t, t + 1)
        if t <= stopped_by:
            assert A2 not in n4.runs, "granted while the fenced worker may still run it"
    # Its session timer removed it: A-2 waits for it as lost work (scheduled delay), not for good.
    assert w3.member_id not in g.members and A2 in g.held_items()
    owners_consistent(coord)


# -------------------------------------------------------------------------------- 4. static members


def _with_static_legacy_member() -> tuple[GroupCoordinator, JavaLike, JavaLike, JavaLike, NewLike, int]:
    """The settled upgraded group plus a static legacy worker (instance ``s``) that got its share."""
    coord, _, w1, w2, w3 = upgraded_and_settled()
    workers: list[JavaLike | NewLike] = [
        JavaLike("w1", w1, 2, set(W1_FULL - {A2})),
        JavaLike("w2", w2, 2, set(W2_FULL)),
        NewLike(w3, 2, {A2}),
    ]
    jr = coord.classic_join(_static_join_request("", "s", EMPTY), 1_000)
    assert jr is not None and jr.error_code == 0, jr
    s = JavaLike("s", jr.member_id, jr.generation_id, instance="s")
    assert csync(coord, s.member_id, s.generation, now=1_000, instance="s").error_code == 0  # type: ignore[union-attr]
    settle(coord, [*workers, s], 1_010)
    assert s.runs, "the static worker got a share"
    owners_consistent(coord)
    return coord, workers[0], workers[1], s, workers[2], 2_000  # type: ignore[return-value]


def _static_join_request(member_id: str, instance: str, owned: Items):
    from connect_bridge.state.classic import api as capi

    return capi.JoinGroupRequest(
        G,
        member_id,
        "connect",
        protocols(f"http://{instance}/", owned),
        session_timeout_ms=10_000,
        rebalance_timeout_ms=60_000,
        group_instance_id=instance,
    )


def test_static_join_naming_another_member_id_is_fenced() -> None:
    """A zombie process sharing instance ``s`` rejoins with another member's id (or one of its own):
    FENCED_INSTANCE_ID, as Kafka's classic coordinator answers. Before, it took the member over."""
    coord, w1, _, s, _, now = _with_static_legacy_member()
    before = current(coord)
    for zombie_id in (w1.member_id, "zombie-id"):
        jr = coord.classic_join(_static_join_request(zombie_id, "s", frozenset(s.runs)), now)
        assert jr is not None and jr.error_code == ErrorCode.FENCED_INSTANCE_ID, (zombie_id, jr)
    assert current(coord) == before
    owners_consistent(coord)


def test_unknown_instance_id_with_a_member_id_is_unknown_member() -> None:
    coord, w1, _, _, _, now = _with_static_legacy_member()
    before = current(coord)
    jr = coord.classic_join(_static_join_request(w1.member_id, "nobody", frozenset(w1.runs)), now)
    assert jr is not None and jr.error_code == ErrorCode.UNKNOWN_MEMBER_ID, jr
    assert current(coord) == before


def test_restarted_static_process_replaces_the_member_and_nothing_is_orphaned() -> None:
    """A fresh process with the same instance id and no member id replaces the member (Kafka's
    replaceStaticMember): it gets the old member's work, the old member id is fenced."""
    coord, w1, w2, s, w3, now = _with_static_legacy_member()
    jr = coord.classic_join(_static_join_request("", "s", EMPTY), now)
    assert jr is not None and jr.error_code == 0 and jr.member_id != s.member_id
    assert cbeat(coord, s.member_id, s.generation, now=now, instance="s") == ErrorCode.FENCED_INSTANCE_ID
    s.runs.clear()  # the old process is gone; the fresh one starts with nothing running
    fresh = JavaLike("s", jr.member_id, jr.generation_id, instance="s")
    sr = csync(coord, fresh.member_id, fresh.generation, now=now, instance="s")
    assert sr is not None and sr.error_code == 0
    fresh.runs |= set(decode_assignment(sr.assignment).items)  # type: ignore[union-attr]
    owners_consistent(coord)
    settle(coord, [w1, w2, w3, fresh], now + 10)
    assert set().union(w1.runs, w2.runs, w3.runs, fresh.runs) == ALL
    owners_consistent(coord)


# --------------------------------------------------------------------- 3. double run at upgrade


def test_upgrade_while_a_follower_has_not_applied_its_revocation() -> None:
    """Generation 2 revokes B-1 from the follower w2; the leader synced, w2's SyncGroup is still to
    come when the first new worker joins. w2 still runs B-1: it must not reach the new worker until
    w2 has acknowledged the revocation."""
    coord = coordinator()
    log = Log(coord)
    w1, w2 = stable_classic(coord)
    assert cjoin(coord, w1, "http://w1/", W1_FULL, now=10, token="j1") is None
    assert cbeat(coord, w2, 1, now=20) == RIP
    cjoin(coord, w2, "http://w2/", W2_FULL, now=30, token="j2")
    coord.advance(30)
    joined = dict(coord.drain_responses())
    assert joined["j1"].generation_id == 2 and joined["j1"].leader == w1  # type: ignore[union-attr]
    leader_sync = ((w1, payload(w1)), (w2, payload(w1, (), [B1])))
    assert csync(coord, w1, 2, leader_sync, now=40).error_code == 0  # type: ignore[union-attr]
    assert classic(coord).pending_sync == {w2: None}  # w2 has not synced generation 2

    resp = njoin(coord, "", "http://w3/", now=50)
    assert resp.error_code == 0
    w3 = NewLike(resp.member_id, resp.member_epoch, set(resp.assignment.items if resp.assignment else ()))
    g = connect(coord)
    assert g.members[w2].current.revoking == fs(B1)
    legacy = [JavaLike("w1", w1, 2, set(W1_FULL)), JavaLike("w2", w2, 2, set(W2_FULL))]
    for t in range(60, 3_000, 100):
        w3.heartbeat(coord, t)
        assert B1 not in w3.runs, "granted while w2 has not applied the revocation"
    # w2's late SyncGroup now revokes B-1; it stops it and rejoins; the work can move.
    sr = csync(coord, w2, 2, now=3_000)
    assert sr is not None and sr.error_code == 0 and B1 in decode_assignment(sr.assignment).revoked_items
    legacy[1].runs.discard(B1)
    legacy[1].rejoin(coord, 3_010)
    settle(coord, [*legacy, w3], 3_020)
    assert set().union(*(w.runs for w in [*legacy, w3])) == ALL
    owners_consistent(coord)
    log.check_replay(4_000)


# ---------------------------------------------------------------- 5. held work lost at downgrade


def test_work_held_for_the_last_new_worker_survives_until_the_hold_ends() -> None:
    """The last new-protocol worker (w3, running A-2) dies. Its work is held for the scheduled delay;
    before the fix the group converted to classic at once and the next classic leader dealt A-2 out
    immediately. Now the group stays connect while A-2 is held, then deals it and downgrades."""
    coord, log, w1, w2, w3 = upgraded_and_settled(scheduled_rebalance_max_delay_ms=30_000)
    legacy: list[JavaLike | NewLike] = [
        JavaLike("w1", w1, 2, set(W1_FULL - {A2})),
        JavaLike("w2", w2, 2, set(W2_FULL)),
    ]
    run_for(coord, legacy, 1_000, 10_300)  # w3's session (last heartbeat at 200) expires at 10_200
    g = connect(coord)
    assert w3 not in g.members and g.held_items() == fs(A2)
    deadline = g.metadata.held[0].deadline_ms
    run_for(coord, legacy, 10_300, deadline - 1)
    assert isinstance(coord.groups[G], type(g)), "converted while work was held"
    assert all(A2 not in w.runs for w in legacy)
    log.check_replay(deadline - 1)
    coord.advance(deadline)  # the hold ends: the bridge deals A-2 at once, then downgrades when stable
    runs, now = reconcile_legacy(coord, {w.member_id: frozenset(w.runs) for w in legacy}, deadline)
    assert A2 in set().union(*runs.values())
    assert classic(coord).generation_id == g.group_epoch + 1
    log.check_replay(now)


def test_last_new_worker_coming_back_as_legacy_gets_its_held_work_and_the_group_downgrades() -> None:
    """Rolling downgrade: w3 restarts as a legacy worker with the same url inside the delay."""
    coord, log, w1, w2, w3 = upgraded_and_settled(scheduled_rebalance_max_delay_ms=30_000)
    legacy: list[JavaLike | NewLike] = [
        JavaLike("w1", w1, 2, set(W1_FULL - {A2})),
        JavaLike("w2", w2, 2, set(W2_FULL)),
    ]
    assert coord.connect_heartbeat(_leave(w3), 1_000).error_code == 0
    assert isinstance(coord.groups[G], type(connect(coord)))
    jr = cjoin(coord, "", "http://w3/", EMPTY, now=2_000)
    assert jr is not None and jr.error_code == ErrorCode.MEMBER_ID_REQUIRED
    jr = cjoin(coord, jr.member_id, "http://w3/", EMPTY, now=2_000)
    assert jr is not None and jr.error_code == 0
    # Its held work came straight back to it (granted with the JoinGroup); once it synced, nothing
    # was held and no SyncGroup was pending: the group downgraded with A-2 recorded as w3's.
    sr = csync(coord, jr.member_id, jr.generation_id, now=2_010)
    assert sr is not None and decode_assignment(sr.assignment).items == (A2,)
    URLS[jr.member_id] = "w3"
    workers = {w.member_id: frozenset(w.runs) for w in legacy} | {jr.member_id: fs(A2)}
    runs, now = reconcile_legacy(coord, workers, 2_010)
    assert runs == workers  # nothing moved: the others only caught up with the epoch
    g = classic(coord)
    stored = {mid: set(decode_assignment(m.assignment).items) for mid, m in g.members.items()}
    assert stored[jr.member_id] == {A2}
    log.check_replay(now)


def _leave(member_id: str):
    from connect_bridge.state.api import HeartbeatRequest

    return HeartbeatRequest(G, member_id, -1)


# ------------------------------------------------------- 7. the leader a Java worker is told about


def _legacy_leaders_without_state(seed: int) -> tuple[int, list[str]]:
    """Run a random mixed drill; at its end, every live legacy worker that its assignment names
    leader must be able to route a REST restart (Java's ``ownerUrl`` needs leader state)."""
    from connect_bridge.drills.generate import random_scenario
    from connect_bridge.drills.sim import SimulatedDrill
    from connect_bridge.workers.legacy import LeaderStateMissing, LegacyWorker

    scenario = random_scenario(seed)
    drill = SimulatedDrill(scenario)
    drill.run()
    leaders, broken = 0, []
    for w in drill.workers.values():
        if not (w.alive and isinstance(w.logic, LegacyWorker) and w.logic.is_leader):
            continue
        leaders += 1
        try:
            for item in w.logic.running:
                w.logic.owner_url(item, scenario.end_ms)
        except LeaderStateMissing:
            broken.append(f"{scenario.name}: {w.name}")
    return leaders, broken


def test_a_legacy_worker_named_leader_has_leader_state() -> None:
    """Before the fix the bridge named a sticky leader in every assignment but answered every JoinGroup
    with an empty leader: a legacy worker that became leader inside a connect group had no leader
    state (REST restarts of work on other workers failed, a sessioned leader could not know the
    session-key role came with state)."""
    leaders, broken = 0, []
    for seed in range(10_000, 10_060):
        n, b = _legacy_leaders_without_state(seed)
        leaders += n
        broken += b
    assert leaders >= 10, "the sample must contain legacy leaders"
    assert not broken, broken


def test_designated_legacy_leader_is_elected_with_every_members_current_work() -> None:
    coord, _, w1, w2, w3 = upgraded_and_settled()
    g = connect(coord)
    assert g.metadata.leader_id == w1
    jr = cjoin(coord, w1, "http://w1/", W1_FULL - {A2}, now=1_000)
    assert jr is not None and jr.leader == w1
    from connect_bridge.codecs.connect_protocol import decode_subscription

    seen = {m.member_id: decode_subscription(m.metadata) for m in jr.members}
    assert set(seen) == {w1, w2, w3}
    assert {mid: frozenset(s.allocation.items) for mid, s in seen.items()} == {  # type: ignore[union-attr]
        w1: W1_FULL - {A2},
        w2: W2_FULL,
        w3: fs(A2),
    }
    # A follower is never elected; the leader's SyncGroup assignments are ignored.
    jr2 = cjoin(coord, w2, "http://w2/", W2_FULL, now=1_000)
    assert jr2 is not None and (jr2.leader, jr2.members) == ("", ())
    bogus = ((w2, payload(w1, [A0], [B0])),)
    sr = csync(coord, w1, jr.generation_id, bogus, now=1_010)
    assert sr is not None and sr.error_code == 0
    sr2 = csync(coord, w2, jr2.generation_id, now=1_010)
    assert sr2 is not None and decode_assignment(sr2.assignment).revoked_items == ()


def test_a_legacy_worker_becoming_leader_is_told_to_rejoin() -> None:
    coord, _, w1, w2, _w3 = upgraded_and_settled()
    g = connect(coord)
    assert coord.classic_leave(_leave_request(w1), 1_000).error_code == 0
    if g.metadata.leader_id != w2:  # the lowest remaining member id leads; make it w2 here
        g.set_metadata(leader_id=w2)
    assert cbeat(coord, w2, g.members[w2].current.member_epoch, now=1_100) == RIP
    jr = cjoin(coord, w2, "http://w2/", W2_FULL, now=1_200)
    assert jr is not None and jr.leader == w2
    assert csync(coord, w2, jr.generation_id, now=1_210).error_code == 0  # type: ignore[union-attr]
    assert cbeat(coord, w2, jr.generation_id, now=1_300) == 0


def _leave_request(member_id: str):
    from connect_bridge.state.classic import api as capi

    return capi.LeaveGroupRequest(G, (capi.LeavingMember(member_id),))


# ------------------------------------------- the classic leader restarted first (migration c')


def test_classic_leader_leaving_has_its_work_held_and_gets_it_back_as_a_new_worker() -> None:
    """A rolling upgrade that restarts the classic group's Connect leader first: the next classic
    leader has no memory and used to deal the leader's work out at once. The bridge holds it instead
    (in a connect group) and gives it back when the leader returns on the new protocol."""
    coord = coordinator(scheduled_rebalance_max_delay_ms=30_000)
    log = Log(coord)
    w1, w2 = stable_classic(coord)  # w1 leads and runs W1_FULL, w2 runs W2_FULL
    follower = JavaLike("w2", w2, 1, set(W2_FULL))
    resp = coord.classic_leave(_leave_request(w1), 1_000)
    assert resp.members == [(w1, None, 0)]
    g = connect(coord)
    assert g.held_items() == W1_FULL and set(g.members) == {w2}
    run_for(coord, [follower], 1_100, 6_000)
    assert follower.runs == set(W2_FULL), "the follower neither lost nor gained work"
    joined = njoin(coord, "", "http://w1/", now=6_000)
    back = NewLike(
        joined.member_id, joined.member_epoch, set(joined.assignment.items if joined.assignment else ())
    )
    run_for(coord, [follower, back], 6_000, 9_000, step=500)
    assert back.runs == set(W1_FULL) and follower.runs == set(W2_FULL)  # nothing moved
    assert not g.held_items() and connect(coord) is g
    log.check_replay(9_000)


def test_classic_leader_that_never_returns_has_its_work_dealt_after_the_delay() -> None:
    coord = coordinator(scheduled_rebalance_max_delay_ms=30_000)
    w1, w2 = stable_classic(coord)
    follower = JavaLike("w2", w2, 1, set(W2_FULL))
    coord.classic_leave(_leave_request(w1), 1_000)
    run_for(coord, [follower], 1_100, 30_900)
    assert follower.runs == set(W2_FULL)
    coord.advance(31_000)  # the hold ends: the bridge deals the work, then converts back to classic
    runs, _ = reconcile_legacy(coord, {follower.member_id: frozenset(follower.runs)}, 31_000)
    assert runs[follower.member_id] == ALL
    assert classic(coord).members.keys() == {follower.member_id}


# ------------------------------------- classic members removed by their session timer (zombies)


def test_classic_leader_whose_session_ends_has_its_work_held() -> None:
    """A partitioned or stalled classic leader is evicted by its session timer, not by a LeaveGroup:
    it may still run everything, and the next Connect leader has no memory of it. The bridge holds
    its work in a connect group as it does for a leaving leader (adversarial drill 10001748)."""
    coord = coordinator(scheduled_rebalance_max_delay_ms=30_000)
    _, w2 = stable_classic(coord)
    follower = JavaLike("w2", w2, 1, set(W2_FULL))
    run_for(coord, [follower], 1_000, 10_500)  # w1 says nothing from t = 0: gone at 10 s
    g = connect(coord)
    assert set(g.members) == {w2} and g.held_items() == W1_FULL
    run_for(coord, [follower], 10_500, 39_000)
    assert follower.runs == set(W2_FULL), "nothing of w1's before the delay"
    run_for(coord, [follower], 39_000, 45_000)
    assert follower.runs == set(ALL)


def test_classic_member_expiring_without_a_delay_is_held_for_the_zombie_grace() -> None:
    """With no scheduled delay Connect's leader deals an evicted member's work out at once, but the
    member notices its eviction only a heartbeat interval later (its session runs from the last
    answer, the coordinator's from the last request) and then stops its tasks. Its work is held for
    that grace (adversarial drill 50216: a partitioned worker in an eager group)."""
    coord = coordinator(scheduled_rebalance_max_delay_ms=0)
    w1, _ = stable_classic(coord)
    leader = JavaLike("w1", w1, 1, set(W1_FULL))
    run_for(coord, [leader], 1_000, 10_500)  # w2 goes silent at t = 0
    g = connect(coord)
    [held] = g.metadata.held
    assert set(g.members) == {w1} and held.items == W2_FULL
    assert held.deadline_ms == 10_000 + zombie_grace_ms(10_000)
    run_for(coord, [leader], 10_500, held.deadline_ms - 1)
    assert leader.runs == set(W1_FULL), "nothing of w2's during the grace"
    coord.advance(held.deadline_ms)  # the grace ends: the bridge deals the work, then converts back
    runs, _ = reconcile_legacy(coord, {w1: frozenset(leader.runs)}, held.deadline_ms)
    assert runs[w1] == ALL and classic(coord).members.keys() == {w1}

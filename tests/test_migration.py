"""Online migration classic ⇄ connect, driven through the coordinator with typed requests.

Drills from Kafka's consumer-group migration tests recast for Connect workers: upgrading a classic group when
the first new-protocol worker joins (Stable, PreparingRebalance, CompletingRebalance), legacy members
reconciled through the JoinGroup/SyncGroup/Heartbeat translation, downgrades when the last
new-protocol worker leaves by every path, static replacement across protocols, the migration policy
gates, KIP-848's "Online Migration" case study, and replay of the records after each conversion.

Workers advertise what a Connect worker with ``connect.protocol=sessioned`` advertises: sessioned
(v2), compatible (v1) and default (v0) subscriptions, the v1/v2 ones carrying the worker's current
allocation. Eager workers (``connect.protocol=eager``) advertise ``default`` only.
"""

from __future__ import annotations

from connect_bridge.codecs.connect_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
    payload_version,
)
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.api import HeartbeatRequest, HeartbeatResponse
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.group import (
    ClassicGroup,
    ClassicGroupSnapshot,
    ClassicGroupState,
    ClassicMemberSnapshot,
)
from connect_bridge.state.config import CoordinatorConfig, MigrationPolicy
from connect_bridge.state.connect.group import ConnectGroup
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.holds import zombie_grace_ms
from connect_bridge.state.model import EMPTY, ConfigView, Items, MemberState
from connect_bridge.state.record_codec import decode_record, encode_record
from connect_bridge.state.records import Record, RecordType

G = "connect-cluster"
AC, A0, A1, A2 = (ConnectorTaskId("A", i) for i in (-1, 0, 1, 2))
BC, B0, B1 = (ConnectorTaskId("B", i) for i in (-1, 0, 1))
ALL = frozenset({AC, A0, A1, A2, BC, B0, B1})
VIEW = ConfigView.of(7, {"A": 3, "B": 2})
OFFSET = 7
NAMES = {0: "default", 1: "compatible", 2: "sessioned"}
RIP = int(ErrorCode.REBALANCE_IN_PROGRESS)

# The stable classic group of ``stable_classic``: what each worker runs after the generation-1 sync.
W1_JOINED = frozenset({AC, A0, A1, BC})
W1_FULL = frozenset({AC, A0, A1, A2})  # (allocation - revoked [B]) + assigned
W2_JOINED = frozenset({B0})
W2_FULL = frozenset({BC, B0, B1})  # allocation + assigned [B, B-1]


def fs(*items: ConnectorTaskId) -> Items:
    return frozenset(items)


# --- drivers


def protocols(url: str, owned: Items | None = None, version: int = 2) -> tuple[tuple[str, bytes], ...]:
    """A Connect worker's JoinGroup protocols, most preferred first, down to ``default``."""
    out = []
    for v in range(version, -1, -1):
        if v == 0:
            sub = Subscription(url, OFFSET)
        else:
            sub = Subscription(url, OFFSET, Assignment.build(0, "", "", OFFSET, sorted(owned or ()), ()))
        out.append((NAMES[v], encode_subscription(sub, v)))
    return tuple(out)


def coordinator(**config: object) -> GroupCoordinator:
    config.setdefault("classic_initial_rebalance_delay_ms", 0)
    coord = GroupCoordinator(CoordinatorConfig(**config))  # type: ignore[arg-type]
    coord.default_view = VIEW
    return coord


def cjoin(
    coord: GroupCoordinator,
    member_id: str,
    url: str,
    owned: Items | None = None,
    *,
    version: int = 2,
    now: int = 0,
    instance: str | None = None,
    token: object = None,
) -> capi.JoinGroupResponse | None:
    return coord.classic_join(
        capi.JoinGroupRequest(
            G,
            member_id,
            "connect",
            protocols(url, owned, version),
            session_timeout_ms=10_000,
            rebalance_timeout_ms=60_000,
            group_instance_id=instance,
            token=token,
        ),
        now,
    )


def csync(
    coord: GroupCoordinator,
    member_id: str,
    generation: int,
    assignments: tuple[tuple[str, bytes], ...] = (),
    *,
    now: int = 0,
    token: object = None,
    instance: str | None = None,
) -> capi.SyncGroupResponse | None:
    return coord.classic_sync(
        capi.SyncGroupRequest(
            G,
            member_id,
            generation,
            group_instance_id=instance,
            protocol_type="connect",
            assignments=assignments,
            # v4: the protocol name (which this helper does not know) is mandatory only from v5.
            api_version=4,
            token=token,
        ),
        now,
    )


def cbeat(
    coord: GroupCoordinator, member_id: str, generation: int, *, now: int = 0, instance: str | None = None
) -> int:
    return coord.classic_heartbeat(capi.HeartbeatRequest(G, member_id, generation, instance), now).error_code


def payload(leader: str, assigned=(), revoked=(), version: int = 2, url: str = "http://w1/") -> bytes:
    return encode_assignment(
        Assignment.build(0, leader, url, OFFSET, sorted(assigned), sorted(revoked)), version
    )


def njoin(
    coord: GroupCoordinator,
    member_id: str,
    url: str,
    *,
    now: int = 0,
    instance: str | None = None,
    rebalance_timeout_ms: int = 60_000,
) -> HeartbeatResponse:
    return coord.connect_heartbeat(
        HeartbeatRequest(
            G,
            member_id,
            0,
            instance_id=instance,
            rebalance_timeout_ms=rebalance_timeout_ms,
            url=url,
            config_offset=OFFSET,
            owned=frozenset(),
        ),
        now,
    )


def nbeat(
    coord: GroupCoordinator, member_id: str, epoch: int, owned: Items | None = None, *, now: int = 0
) -> HeartbeatResponse:
    return coord.connect_heartbeat(HeartbeatRequest(G, member_id, epoch, owned=owned), now)


def group(coord: GroupCoordinator):
    return coord.groups[G]


def connect(coord: GroupCoordinator) -> ConnectGroup:
    g = coord.groups[G]
    assert isinstance(g, ConnectGroup), type(g).__name__
    return g


def classic(coord: GroupCoordinator) -> ClassicGroup:
    g = coord.groups[G]
    assert isinstance(g, ClassicGroup), type(g).__name__
    return g


def current(coord: GroupCoordinator) -> dict[str, tuple[int, MemberState, Items, Items]]:
    return {
        mid: (m.current.member_epoch, m.current.state, m.current.assigned, m.current.revoking)
        for mid, m in connect(coord).members.items()
    }


def decoded(resp: capi.SyncGroupResponse | None) -> tuple[int, Assignment]:
    assert resp is not None and resp.error_code == 0, resp
    return payload_version(resp.assignment), decode_assignment(resp.assignment)


class Log:
    """Every record the coordinator wrote, checked by replay into a fresh coordinator."""

    def __init__(self, coord: GroupCoordinator) -> None:
        self.coord = coord
        self.records: list[Record] = []

    def drain(self) -> list[Record]:
        batch = self.coord.drain_records()
        self.records.extend(batch)
        return batch

    def check_replay(self, now: int) -> None:
        """Wire-encode every record, compact by key (latest value wins), replay the live ones into a
        fresh coordinator and compare snapshots. Both record orders are tried: each key at its latest
        position (log compaction) and at its first (what a dict update gives). A loaded classic group
        is Stable (Kafka's ``onLoaded``): the rebalance a downgraded group starts is soft state."""
        self.drain()
        decoded_log = []
        for record in self.records:
            key, value = encode_record(record)
            back = decode_record(key, value)
            assert back == record
            decoded_log.append(back)
        latest: dict[tuple[int, str, str], Record] = {}
        first: dict[tuple[int, str, str], Record] = {}
        for record in decoded_log:
            latest.pop(record.key, None)
            latest[record.key] = record
            first[record.key] = record
        live = self.coord.snapshot()
        for gid, (kind, snap) in live["groups"].items():  # type: ignore[union-attr]
            if kind == "ClassicGroup" and snap["members"]:
                live["groups"][gid] = (kind, {**snap, "state": ClassicGroupState.STABLE.value})  # type: ignore[index]
        for compacted in (latest, first):
            fresh = GroupCoordinator(self.coord.config)
            fresh.default_view = self.coord.default_view
            fresh.replay([r for r in compacted.values() if not r.is_tombstone], now)
            assert fresh.snapshot() == live


# --- setups


def stable_classic(coord: GroupCoordinator, now: int = 0) -> tuple[str, str]:
    """Two sessioned workers form generation 1; the leader's v2 assignment revokes B from w1, gives
    w1 A-2 and gives w2 B and B-1. Returns (w1, w2); w1 is the leader."""
    ids: dict[str, str] = {}
    for name, owned in (("w1", W1_JOINED), ("w2", W2_JOINED)):
        resp = cjoin(coord, "", f"http://{name}/", owned, now=now)
        assert resp is not None and resp.error_code == ErrorCode.MEMBER_ID_REQUIRED
        ids[name] = resp.member_id
        assert cjoin(coord, ids[name], f"http://{name}/", owned, now=now, token=name) is None
    coord.advance(now)
    joined = dict(coord.drain_responses())
    w1, w2 = ids["w1"], ids["w2"]
    URLS.update({w1: "w1", w2: "w2"})
    assert joined["w1"].generation_id == joined["w2"].generation_id == 1  # type: ignore[union-attr]
    assert joined["w1"].leader == w1 and joined["w1"].protocol_name == "sessioned"  # type: ignore[union-attr]
    assert csync(coord, w2, 1, now=now, token="s2") is None
    resp = csync(
        coord, w1, 1, ((w1, payload(w1, [A2], [BC])), (w2, payload(w1, [BC, B1]))), now=now, token="s1"
    )
    assert resp is not None and resp.error_code == 0
    assert [t for t, _ in coord.drain_responses()] == ["s2"]
    g = classic(coord)
    assert (g.state, g.generation_id, g.leader_id) == (ClassicGroupState.STABLE, 1, w1)
    return w1, w2


def settle_after_upgrade(coord: GroupCoordinator, w1: str, w2: str, w3: str, now: int) -> None:
    """The reconciliation of ``test_upgrade_from_stable_classic_group`` without its assertions."""
    assert cjoin(coord, w1, "http://w1/", W1_FULL, now=now).generation_id == 1  # type: ignore[union-attr]
    assert csync(coord, w1, 1, now=now).error_code == 0  # type: ignore[union-attr]
    assert cjoin(coord, w1, "http://w1/", W1_FULL - {A2}, now=now).generation_id == 2  # type: ignore[union-attr]
    assert csync(coord, w1, 2, now=now).error_code == 0  # type: ignore[union-attr]
    assert cjoin(coord, w2, "http://w2/", W2_FULL, now=now).generation_id == 2  # type: ignore[union-attr]
    assert csync(coord, w2, 2, now=now).error_code == 0  # type: ignore[union-attr]
    assert nbeat(coord, w3, 2, EMPTY, now=now).assignment.items == fs(A2)  # type: ignore[union-attr]
    assert current(coord) == {
        w1: (2, MemberState.STABLE, W1_FULL - {A2}, EMPTY),
        w2: (2, MemberState.STABLE, W2_FULL, EMPTY),
        w3: (2, MemberState.STABLE, fs(A2), EMPTY),
    }
    assert connect(coord).state.value == "STABLE"


def upgraded_and_settled(**config: object) -> tuple[GroupCoordinator, Log, str, str, str]:
    coord = coordinator(**config)
    log = Log(coord)
    w1, w2 = stable_classic(coord)
    w3 = njoin(coord, "", "http://w3/", now=100).member_id
    settle_after_upgrade(coord, w1, w2, w3, now=200)
    log.drain()
    return coord, log, w1, w2, w3


def assert_downgraded(
    coord: GroupCoordinator, generation: int, runs: dict[str, Items], leader: str, offset: int = OFFSET
) -> None:
    """Classic at ``generation``, rebalancing, each member's stored assignment = what it runs (v2)."""
    g = classic(coord)
    assert (g.state, g.generation_id, g.protocol_type, g.protocol_name) == (
        ClassicGroupState.PREPARING_REBALANCE,
        generation,
        "connect",
        "sessioned",
    )
    assert g.leader_id == leader
    assert set(g.members) == set(runs)
    for mid, items in runs.items():
        stored = g.members[mid].assignment
        assert payload_version(stored) == 2
        asg = decode_assignment(stored)
        assert (frozenset(asg.items), asg.revoked_items, asg.leader) == (items, (), leader)
        assert (asg.leader_url, asg.config_offset) == ("http://w1/", offset)


def reconcile_legacy(
    coord: GroupCoordinator, workers: dict[str, Items], now: int, rounds: int = 8, downgrade: bool = True
) -> tuple[dict[str, Items], int]:
    """Cooperative legacy workers heartbeat and rejoin when told (reporting what they run, applying
    their SyncGroup deltas) until the connect group downgrades (``downgrade=False``: for ``rounds``
    rounds, then stop wherever the group is). Returns what each runs and the time."""
    runs = {mid: frozenset(items) for mid, items in workers.items()}
    for _ in range(rounds):
        for mid in runs:
            if isinstance(coord.groups[G], ClassicGroup):
                return runs, now
            now += 10
            epoch = connect(coord).members[mid].current.member_epoch
            instance = connect(coord).members[mid].metadata.instance_id
            code = cbeat(coord, mid, epoch, now=now, instance=instance)
            if code not in (RIP, ErrorCode.ILLEGAL_GENERATION):
                continue
            jr = cjoin(coord, mid, f"http://{URLS[mid]}/", runs[mid], now=now, instance=instance)
            assert jr is not None and jr.error_code == 0, jr
            sr = csync(coord, mid, jr.generation_id, now=now, instance=instance)
            assert sr is not None and sr.error_code == 0, sr
            asg = decode_assignment(sr.assignment)
            runs[mid] = (runs[mid] - set(asg.revoked_items)) | set(asg.items)
    assert not downgrade or isinstance(coord.groups[G], ClassicGroup), current(coord)
    return runs, now


URLS: dict[str, str] = {}
"""Member id -> worker name, filled by the setups (the url is ``http://NAME/``)."""


# --- 1. upgrade


def test_upgrade_from_stable_classic_group() -> None:
    coord = coordinator()
    log = Log(coord)
    w1, w2 = stable_classic(coord)
    log.check_replay(0)

    resp = njoin(coord, "", "http://w3/", now=100)
    w3 = resp.member_id
    assert resp.error_code == 0 and resp.member_epoch == 2
    assert resp.assignment is not None and resp.assignment.items == EMPTY
    assert (resp.assignment.leader_id, resp.assignment.leader_url) == (w1, "http://w1/")
    g = connect(coord)

    # The conversion batch: classic tombstone, then the group at epoch = generation 1; the join bumps it.
    batch = log.drain()
    assert batch[0] == Record(RecordType.CLASSIC_GROUP, G, "", None)
    epochs = [r.value.group_epoch for r in batch if r.type is RecordType.GROUP_METADATA and r.value]
    assert epochs[0] == 1 and epochs[-1] == 2
    targets = [r.value.assignment_epoch for r in batch if r.type is RecordType.TARGET_METADATA]
    assert targets == [1, 2]

    # Legacy members at epoch = generation running their full synced assignment; nothing moved.
    assert (g.group_epoch, g.assignment_epoch, g.metadata.leader_id) == (2, 2, w1)
    assert current(coord) == {
        w1: (1, MemberState.STABLE, W1_FULL, EMPTY),
        w2: (1, MemberState.STABLE, W2_FULL, EMPTY),
        w3: (2, MemberState.UNRELEASED, EMPTY, EMPTY),
    }
    assert {mid: m.metadata.protocol for mid, m in g.members.items()} == {
        w1: "sessioned",
        w2: "sessioned",
        w3: "new",
    }
    assert g.target == {w1: W1_FULL - {A2}, w2: W2_FULL, w3: fs(A2)}
    assert g.owners[A2] == w1
    log.check_replay(100)

    # w3 gets nothing while w1 still runs A-2.
    resp = nbeat(coord, w3, 2, EMPTY, now=150)
    assert (resp.error_code, resp.member_epoch, resp.assignment) == (0, 2, None)

    # w1: told to rejoin; JoinGroup with what it runs keeps generation 1 and it must stop A-2.
    assert cbeat(coord, w1, 1, now=200) == RIP
    jr = cjoin(coord, w1, "http://w1/", W1_FULL, now=210)
    assert jr is not None and jr.error_code == 0
    # w1 is the Connect leader: it is elected (with every member's current work) to build its
    # leader state; its SyncGroup assignments are ignored (docs/legacy-workers.md).
    assert (jr.generation_id, jr.member_id, jr.leader, jr.protocol_name) == (1, w1, w1, "sessioned")
    assert len(jr.members) == 3
    assert current(coord)[w1] == (1, MemberState.UNREVOKED, W1_FULL - {A2}, fs(A2))
    version, asg = decoded(csync(coord, w1, 1, now=220))
    assert version == 2
    assert (asg.items, asg.revoked_items) == ((), (A2,))
    assert (asg.leader, asg.leader_url, asg.config_offset) == (w1, "http://w1/", OFFSET)
    assert nbeat(coord, w3, 2, EMPTY, now=230).assignment is None  # still not released

    # w1 rejoins without A-2: generation = the new epoch, nothing new for it.
    jr = cjoin(coord, w1, "http://w1/", W1_FULL - {A2}, now=240)
    assert jr is not None and (jr.error_code, jr.generation_id) == (0, 2)
    version, asg = decoded(csync(coord, w1, 2, now=250))
    assert (version, asg.items, asg.revoked_items) == (2, (), ())
    assert cbeat(coord, w1, 2, now=260) == 0
    assert A2 not in g.owners

    # The freed work reaches the new worker.
    resp = nbeat(coord, w3, 2, EMPTY, now=270)
    assert resp.member_epoch == 2 and resp.assignment is not None and resp.assignment.items == fs(A2)

    # w2 only has to catch up with the epoch.
    assert cbeat(coord, w2, 1, now=280) == RIP
    jr = cjoin(coord, w2, "http://w2/", W2_FULL, now=290)
    assert jr is not None and (jr.error_code, jr.generation_id) == (0, 2)
    version, asg = decoded(csync(coord, w2, 2, now=300))
    assert (version, asg.items, asg.revoked_items, asg.leader) == (2, (), (), w1)
    assert cbeat(coord, w2, 2, now=310) == 0
    assert current(coord) == {
        w1: (2, MemberState.STABLE, W1_FULL - {A2}, EMPTY),
        w2: (2, MemberState.STABLE, W2_FULL, EMPTY),
        w3: (2, MemberState.STABLE, fs(A2), EMPTY),
    }
    assert g.state.value == "STABLE"
    log.check_replay(310)


# --- 2. mid-rebalance upgrades


def test_upgrade_from_preparing_rebalance_classic_group() -> None:
    coord = coordinator()
    log = Log(coord)
    w1, w2 = stable_classic(coord)
    # The leader rejoins (reporting what it runs): PreparingRebalance, its JoinGroup parked, w2 not in.
    assert cjoin(coord, w1, "http://w1/", W1_FULL, now=10, token="j1") is None
    assert classic(coord).state is ClassicGroupState.PREPARING_REBALANCE
    assert cbeat(coord, w2, 1, now=20) == RIP

    resp = njoin(coord, "", "http://w3/", now=30)
    w3 = resp.member_id
    assert resp.error_code == 0 and resp.member_epoch == 2
    responses = coord.drain_responses()
    assert [(t, r.error_code) for t, r in responses] == [("j1", RIP)]  # type: ignore[attr-defined]
    g = connect(coord)
    assert (g.group_epoch, g.assignment_epoch) == (2, 2)
    assert current(coord) == {
        w1: (1, MemberState.STABLE, W1_FULL, EMPTY),
        w2: (1, MemberState.STABLE, W2_FULL, EMPTY),
        w3: (2, MemberState.UNRELEASED, EMPTY, EMPTY),
    }
    log.check_replay(30)

    # The parked worker retries: the JoinGroup now goes through the translation.
    jr = cjoin(coord, w1, "http://w1/", W1_FULL, now=40)
    assert jr is not None and (jr.error_code, jr.generation_id, jr.leader) == (0, 1, w1)  # the leader
    assert decoded(csync(coord, w1, 1, now=50))[1].revoked_items == (A2,)
    jr = cjoin(coord, w2, "http://w2/", W2_FULL, now=60)
    assert jr is not None and (jr.error_code, jr.generation_id) == (0, 2)
    log.check_replay(60)


def test_upgrade_from_completing_rebalance_classic_group() -> None:
    coord = coordinator()
    log = Log(coord)
    w1, w2 = stable_classic(coord)
    # Both rejoin with what they run: generation 2, CompletingRebalance; w2's SyncGroup waits for w1.
    assert cjoin(coord, w1, "http://w1/", W1_FULL, now=10, token="j1") is None
    # The last one in completes the join phase and is answered at once; the leader's was parked.
    jr = cjoin(coord, w2, "http://w2/", W2_FULL, now=10, token="j2")
    assert jr is not None and (jr.error_code, jr.generation_id, jr.leader) == (0, 2, w1)
    assert [(t, r.generation_id) for t, r in coord.drain_responses()] == [("j1", 2)]  # type: ignore[attr-defined]
    assert classic(coord).state is ClassicGroupState.COMPLETING_REBALANCE
    assert csync(coord, w2, 2, now=20, token="s2") is None

    resp = njoin(coord, "", "http://w3/", now=30)
    w3 = resp.member_id
    assert (resp.error_code, resp.member_epoch) == (0, 3)
    responses = coord.drain_responses()
    assert [(t, r.error_code) for t, r in responses] == [("s2", RIP)]  # type: ignore[attr-defined]
    g = connect(coord)
    assert (g.group_epoch, g.assignment_epoch) == (3, 3)
    # The generation-1 assignments are still each member's last sync: applied to the allocations of
    # the generation-2 JoinGroup (which already contain them) they give the same full sets.
    assert current(coord) == {
        w1: (2, MemberState.STABLE, W1_FULL, EMPTY),
        w2: (2, MemberState.STABLE, W2_FULL, EMPTY),
        w3: (3, MemberState.UNRELEASED, EMPTY, EMPTY),
    }
    log.check_replay(30)

    # w2's retried SyncGroup is at the right generation but it must rejoin first (epoch 2 < 3).
    assert cbeat(coord, w2, 2, now=40) == RIP
    sr = csync(coord, w2, 2, now=41)
    assert sr is not None and sr.error_code == RIP
    jr = cjoin(coord, w2, "http://w2/", W2_FULL, now=50)
    assert jr is not None and (jr.error_code, jr.generation_id) == (0, 3)
    version, asg = decoded(csync(coord, w2, 3, now=60))
    assert (version, asg.items, asg.revoked_items) == (2, (), ())
    log.check_replay(60)


def test_upgrade_during_the_initial_rebalance_at_generation_zero() -> None:
    coord = coordinator(classic_initial_rebalance_delay_ms=3_000)
    log = Log(coord)
    w1 = cjoin(coord, "", "http://w1/", fs(AC), now=0).member_id  # type: ignore[union-attr]
    assert cjoin(coord, w1, "http://w1/", fs(AC), now=0, token="j1") is None
    assert (classic(coord).state, classic(coord).generation_id) == (ClassicGroupState.PREPARING_REBALANCE, 0)

    resp = njoin(coord, "", "http://w3/", now=10)
    assert (resp.error_code, resp.member_epoch) == (0, 1)
    assert [(t, r.error_code) for t, r in coord.drain_responses()] == [("j1", RIP)]  # type: ignore[attr-defined]
    # Never synced: w1 converts with what its JoinGroup said it runs (the allocation), at epoch 0 —
    # the generation. (Kafka's KAFKA-21581 worries about epoch 0; here the join bumps the group.)
    assert current(coord)[w1] == (0, MemberState.STABLE, fs(AC), EMPTY)
    assert connect(coord).group_epoch == 1
    log.check_replay(10)
    jr = cjoin(coord, w1, "http://w1/", fs(AC), now=20)
    assert jr is not None and (jr.error_code, jr.generation_id) == (0, 1)
    assert current(coord)[w1][0] == 1 and AC in current(coord)[w1][2]
    log.check_replay(20)


# --- 3. never synced


def test_member_that_never_synced_converts_with_an_empty_assignment() -> None:
    coord = coordinator()
    log = Log(coord)
    w1, w2 = stable_classic(coord)
    # A fresh worker joins: the group rebalances; it has joined but never received an assignment.
    resp = cjoin(coord, "", "http://w4/", EMPTY, now=10)
    assert resp is not None and resp.error_code == ErrorCode.MEMBER_ID_REQUIRED
    w4 = resp.member_id
    assert cjoin(coord, w4, "http://w4/", EMPTY, now=10, token="j4") is None
    assert classic(coord).members[w4].assignment == b""

    resp = njoin(coord, "", "http://w3/", now=20)
    assert resp.error_code == 0
    assert [(t, r.error_code) for t, r in coord.drain_responses()] == [("j4", RIP)]  # type: ignore[attr-defined]
    g = connect(coord)
    assert g.group_epoch == 2
    assert current(coord)[w4] == (1, MemberState.STABLE, EMPTY, EMPTY)
    assert current(coord)[w1][2] == W1_FULL and current(coord)[w2][2] == W2_FULL
    assert g.members[w4].metadata.is_legacy
    log.check_replay(20)


# --- 4. eager legacy member


def test_eager_legacy_member_inside_a_connect_group() -> None:
    coord = coordinator()
    log = Log(coord)
    n1 = njoin(coord, "", "http://n1/", now=0).member_id
    assert nbeat(coord, n1, 1, EMPTY, now=0).assignment.items == ALL  # type: ignore[union-attr]

    resp = cjoin(coord, "", "http://e1/", version=0, now=10)
    assert resp is not None and resp.error_code == ErrorCode.MEMBER_ID_REQUIRED
    e1 = resp.member_id
    jr = cjoin(coord, e1, "http://e1/", version=0, now=10)
    assert jr is not None and jr.error_code == 0
    g = connect(coord)
    assert (g.group_epoch, jr.generation_id, jr.leader, jr.protocol_name) == (2, 2, "", "default")
    e1_target = g.target[e1]
    assert e1_target and e1_target | g.target[n1] == ALL
    # An eager worker owns nothing when it joins; its work is still n1's.
    assert current(coord)[e1] == (2, MemberState.UNRELEASED, EMPTY, EMPTY)
    version, asg = decoded(csync(coord, e1, 2, now=20))
    assert (version, asg.items, asg.revoked_items) == (0, (), ())
    assert (asg.leader, asg.leader_url) == (n1, "http://n1/")
    assert cbeat(coord, e1, 2, now=30) == 0  # nothing is free yet: no pointless rebalance

    # n1 stops e1's work; e1 is told to rejoin, then receives its complete set at v0.
    resp = nbeat(coord, n1, 1, ALL, now=40)
    assert resp.assignment is not None and resp.assignment.items == ALL - e1_target
    assert nbeat(coord, n1, 1, ALL - e1_target, now=50).member_epoch == 2
    assert cbeat(coord, e1, 2, now=60) == RIP
    jr = cjoin(coord, e1, "http://e1/", version=0, now=70)
    assert jr is not None and (jr.error_code, jr.generation_id) == (0, 2)
    version, asg = decoded(csync(coord, e1, 2, now=80))
    assert (version, frozenset(asg.items), asg.revoked_items) == (0, e1_target, ())
    assert cbeat(coord, e1, 2, now=90) == 0
    assert g.state.value == "STABLE"
    log.check_replay(90)

    # The target changes (another worker joins): e1 hears about it on its next heartbeat.
    n2 = njoin(coord, "", "http://n2/", now=100).member_id
    assert g.group_epoch == 3
    assert cbeat(coord, e1, 2, now=110) == RIP
    # Eager: it stopped everything before rejoining, so it is granted its new target at once.
    jr = cjoin(coord, e1, "http://e1/", version=0, now=120)
    assert jr is not None and (jr.error_code, jr.generation_id) == (0, 3)
    version, asg = decoded(csync(coord, e1, 3, now=130))
    assert (version, frozenset(asg.items), asg.revoked_items) == (0, g.target[e1], ())
    assert g.target[e1] <= e1_target and n2 in g.target
    log.check_replay(130)


# --- 5. downgrades
# With a scheduled delay the departed worker's work is held and the group stays connect until the
# hold ends (test_adversity.py); these run without a delay to look at the conversion itself.


def test_downgrade_when_the_last_new_worker_leaves() -> None:
    coord, log, w1, w2, w3 = upgraded_and_settled(scheduled_rebalance_max_delay_ms=0)
    resp = coord.connect_heartbeat(HeartbeatRequest(G, w3, -1), 1_000)
    assert (resp.error_code, resp.member_epoch) == (0, -1)
    # Leaving bumps the epoch to 3 and deals w3's A-2 to a legacy worker; the group downgrades once
    # that is done and stable, at generation 3 + 1 (one past the epoch: nothing a worker was told as
    # a connect member passes for a classic generation).
    assert isinstance(group(coord), ConnectGroup)
    runs, now = reconcile_legacy(coord, {w1: W1_FULL - {A2}, w2: W2_FULL}, 1_000)
    assert A2 in runs[w1] | runs[w2]
    assert_downgraded(coord, 4, runs, w1)
    batch = log.drain()
    assert batch[-1].type is RecordType.CLASSIC_GROUP and batch[-1].value.generation == 4  # type: ignore[union-attr]
    last = {r.key: r for r in batch}
    assert all(r.is_tombstone for r in last.values() if r.type is not RecordType.CLASSIC_GROUP)
    assert {r.member_id for r in last.values() if r.type is RecordType.MEMBER_METADATA} == {w1, w2, w3}
    log.check_replay(now)

    # Legacy workers at their connect-era epoch are told to rejoin (REBALANCE_IN_PROGRESS, as Kafka
    # answers members at the generation a downgrade keeps; not ILLEGAL_GENERATION); a classic
    # rebalance follows. A generation from the future is still illegal.
    assert cbeat(coord, w1, 3, now=now + 100) == ErrorCode.REBALANCE_IN_PROGRESS
    assert cbeat(coord, w1, 5, now=now + 100) == ErrorCode.ILLEGAL_GENERATION
    assert cjoin(coord, w1, "http://w1/", runs[w1], now=now + 200, token="j1") is None
    jr = cjoin(coord, w2, "http://w2/", runs[w2], now=now + 200, token="j2")
    assert jr is not None and (jr.error_code, jr.generation_id, jr.leader) == (0, 5, w1)
    [(token, leader)] = coord.drain_responses()
    assert (token, leader.error_code, leader.generation_id, len(leader.members)) == ("j1", 0, 5, 2)  # type: ignore[attr-defined]
    assert classic(coord).state is ClassicGroupState.COMPLETING_REBALANCE


def test_downgrade_when_the_last_new_worker_times_out() -> None:
    coord, log, w1, w2, w3 = upgraded_and_settled(scheduled_rebalance_max_delay_ms=0)
    assert cbeat(coord, w1, 2, now=5_000) == 0 and cbeat(coord, w2, 2, now=5_000) == 0
    coord.advance(10_199)
    assert isinstance(group(coord), ConnectGroup)
    w3_runs = current(coord)[w3][2]
    w3_session = connect(coord).members[w3].metadata.session_timeout_ms
    coord.advance(10_200)  # w3's session started at its last heartbeat (200)
    # A timer proves nothing about the process: w3's work stays held for the time it may take to
    # notice and stop (zombie_grace_ms), even with no scheduled delay, and the group waits for it.
    [held] = connect(coord).metadata.held
    assert held.items == w3_runs and held.deadline_ms == 10_200 + zombie_grace_ms(w3_session)
    runs = {w1: W1_FULL - {A2}, w2: W2_FULL}
    now = 10_200
    while now < held.deadline_ms:  # the legacy workers keep heartbeating; nothing downgrades
        runs, now = reconcile_legacy(coord, runs, now, rounds=1, downgrade=False)
        assert isinstance(group(coord), ConnectGroup) and not (runs[w1] | runs[w2]) & held.items
        now += 3_000
        coord.advance(min(now, held.deadline_ms))
    runs, now = reconcile_legacy(coord, runs, now)
    assert runs[w1] | runs[w2] == ALL
    assert_downgraded(coord, 5, runs, w1)
    log.check_replay(now)


def test_downgrade_when_the_last_new_worker_misses_its_revocation_deadline() -> None:
    coord, log, w1, w2, w3 = upgraded_and_settled(scheduled_rebalance_max_delay_ms=0)
    # A-2 leaves the config: w3 must stop it; it never acknowledges but keeps heartbeating.
    view = ConfigView.of(8, {"A": 2, "B": 2})
    coord.set_config(G, view, 1_000)
    g = connect(coord)
    assert (g.group_epoch, g.assignment_epoch) == (3, 3)
    resp = nbeat(coord, w3, 2, fs(A2), now=1_000)
    assert (resp.member_epoch, resp.assignment.items) == (2, EMPTY)  # type: ignore[union-attr]
    assert current(coord)[w3] == (2, MemberState.UNREVOKED, EMPTY, fs(A2))
    # The rebalance also moves B-1 from w2 to w3 (w3 lost its only task); w1 just follows the epoch.
    assert g.target == {w1: W1_FULL - {A2}, w2: fs(BC, B0), w3: fs(B1)}
    assert cbeat(coord, w1, 2, now=1_000) == RIP
    jr = cjoin(coord, w1, "http://w1/", W1_FULL - {A2}, now=1_000)
    assert jr is not None and jr.generation_id == 3
    assert decoded(csync(coord, w1, 3, now=1_000))[1].revoked_items == ()
    assert cbeat(coord, w2, 2, now=1_000) == RIP
    jr = cjoin(coord, w2, "http://w2/", W2_FULL, now=1_000)
    assert jr is not None and jr.generation_id == 2
    assert decoded(csync(coord, w2, 2, now=1_000))[1].revoked_items == (B1,)
    jr = cjoin(coord, w2, "http://w2/", fs(BC, B0), now=1_000)
    assert jr is not None and jr.generation_id == 3
    assert decoded(csync(coord, w2, 3, now=1_000))[1].items == ()
    # B-1 is free, but w3 gets nothing until it acknowledges the revocation of A-2.
    resp = nbeat(coord, w3, 2, fs(A2), now=1_000)
    assert resp.assignment is not None and resp.assignment.items == EMPTY  # "stop A-2" again
    assert current(coord)[w3] == (2, MemberState.UNREVOKED, EMPTY, fs(A2))
    log.check_replay(1_000)

    for now in range(6_000, 61_000, 5_000):  # heartbeats do not extend the revocation deadline
        assert nbeat(coord, w3, 2, fs(A2), now=now).error_code == 0
        assert cbeat(coord, w1, 3, now=now) == 0 and cbeat(coord, w2, 3, now=now) == 0
        coord.advance(now)
        assert isinstance(group(coord), ConnectGroup), now
    coord.advance(60_999)
    assert isinstance(group(coord), ConnectGroup)
    coord.advance(61_000)  # 1_000 + w3's rebalance timeout
    # w3 may still be stopping A-2: it is held (unconfigured or not; the config could bring it
    # back) for the zombie grace, and the group downgrades once that is over.
    [held] = connect(coord).metadata.held
    assert held.items == fs(A2) and held.deadline_ms > 61_000
    runs, now = {w1: W1_FULL - {A2}, w2: fs(BC, B0)}, 61_000
    while now < held.deadline_ms:
        runs, now = reconcile_legacy(coord, runs, now, rounds=1, downgrade=False)
        assert isinstance(group(coord), ConnectGroup)
        now += 3_000
        coord.advance(min(now, held.deadline_ms))
    runs, now = reconcile_legacy(coord, runs, now)
    assert runs[w1] | runs[w2] == ALL - {A2}
    assert_downgraded(coord, 6, runs, w1, offset=8)
    assert coord.views[G] == view
    log.check_replay(now)


def test_downgrade_by_admin_batch_leave_naming_the_new_member() -> None:
    coord, log, w1, w2, w3 = upgraded_and_settled(scheduled_rebalance_max_delay_ms=0)
    resp = coord.classic_leave(
        capi.LeaveGroupRequest(
            G, (capi.LeavingMember(w3), capi.LeavingMember(w2), capi.LeavingMember("nobody"))
        ),
        1_000,
    )
    assert resp.error_code == 0
    assert resp.members == [(w3, None, 0), (w2, None, 0), ("nobody", None, int(ErrorCode.UNKNOWN_MEMBER_ID))]
    # Two removals, two bumps: epoch 4; w1 takes everything, then the group downgrades (4 + 1).
    runs, now = reconcile_legacy(coord, {w1: W1_FULL - {A2}}, 1_000)
    assert runs[w1] == ALL
    assert_downgraded(coord, 5, runs, w1)
    log.check_replay(now)


# --- 6. static replacement


def static_stable_classic(coord: GroupCoordinator) -> tuple[str, str]:
    """Static workers i1 (leader) and i2 at generation 1, running W1_FULL and W2_FULL."""
    for inst, owned in (("i1", W1_JOINED), ("i2", W2_JOINED)):
        assert cjoin(coord, "", f"http://{inst}/", owned, instance=inst, token=inst) is None
    coord.advance(0)
    joined = dict(coord.drain_responses())
    ids = {inst: r.member_id for inst, r in joined.items()}  # type: ignore[attr-defined]
    m1, m2 = ids["i1"], ids["i2"]
    assert joined["i1"].leader == m1  # type: ignore[attr-defined]
    assert csync(coord, m2, 1, instance="i2", token="s2") is None
    sync = ((m1, payload(m1, [A2], [BC])), (m2, payload(m1, [BC, B1])))
    assert csync(coord, m1, 1, sync, instance="i1").error_code == 0  # type: ignore[union-attr]
    coord.drain_responses()
    return m1, m2


def test_new_protocol_join_takes_over_a_legacy_static_member() -> None:
    coord = coordinator()
    log = Log(coord)
    m1, m2 = static_stable_classic(coord)
    # i2 restarts on the new protocol (a classic static worker sends no LeaveGroup).
    resp = njoin(coord, "", "http://i2/", instance="i2", now=100)
    n2 = resp.member_id
    assert resp.error_code == 0 and n2 != m2
    g = connect(coord)
    # The protocol is assignment-relevant in our engine, so the takeover bumps the epoch (Kafka keeps
    # it when the subscription is unchanged); the target stays sticky, so the work stays put.
    assert (g.group_epoch, g.assignment_epoch) == (2, 2)
    assert resp.member_epoch == 2 and resp.assignment.items == W2_FULL  # type: ignore[union-attr]
    assert current(coord) == {
        m1: (1, MemberState.STABLE, W1_FULL, EMPTY),
        n2: (2, MemberState.STABLE, W2_FULL, EMPTY),
    }
    assert g.members[n2].metadata.instance_id == "i2" and not g.members[n2].metadata.is_legacy
    assert cbeat(coord, m2, 1, now=110, instance="i2") == ErrorCode.FENCED_INSTANCE_ID
    log.check_replay(110)


def test_legacy_join_takes_over_the_last_new_protocol_static_member_and_downgrades() -> None:
    coord = coordinator()
    log = Log(coord)
    w1, w2 = stable_classic(coord)
    n3 = njoin(coord, "", "http://i3/", instance="i3", now=100).member_id
    settle_after_upgrade(coord, w1, w2, n3, now=200)
    log.check_replay(200)

    # i3 is rolled back to the classic protocol: its JoinGroup replaces the new-protocol member.
    jr = cjoin(coord, "", "http://i3/", fs(A2), instance="i3", now=300)
    assert jr is not None and jr.error_code == 0
    m3 = jr.member_id
    assert m3 not in (n3, "")
    # Takeover (protocol changed: epoch 3). The downgrade waits for m3's SyncGroup: its JoinGroup
    # answer named its own protocol, which the classic vote need not elect (issue 10).
    assert jr.generation_id == 3
    connect(coord)
    sr = csync(coord, m3, 3, instance="i3", now=310)
    assert sr is not None and sr.error_code == 0
    asg = decode_assignment(sr.assignment)
    assert (asg.items, asg.revoked_items) == ((), ())  # it reported running A-2: nothing changes
    # w1 and w2 catch up with epoch 3 (nothing moves); then the group is stable and downgrades.
    URLS[m3] = "i3"
    runs, now = reconcile_legacy(coord, {w1: W1_FULL - {A2}, w2: W2_FULL, m3: fs(A2)}, 310)
    assert runs == {w1: W1_FULL - {A2}, w2: W2_FULL, m3: fs(A2)}
    g = classic(coord)
    assert_downgraded(coord, 4, runs, w1)
    assert g.members[m3].group_instance_id == "i3"
    log.check_replay(now)
    assert nbeat(coord, n3, 2, now=320).error_code == ErrorCode.GROUP_ID_NOT_FOUND


# --- 7. policy gates


def test_disabled_and_downgrade_policies_refuse_upgrading_a_non_empty_classic_group() -> None:
    for policy in (MigrationPolicy.DISABLED, MigrationPolicy.DOWNGRADE):
        coord = coordinator(migration_policy=policy)
        w1, w2 = stable_classic(coord)
        coord.drain_records()
        before = coord.snapshot()
        resp = njoin(coord, "", "http://w3/", now=100)
        assert resp.error_code == ErrorCode.GROUP_ID_NOT_FOUND, policy
        assert policy.value in (resp.error_message or "")
        assert coord.snapshot() == before and coord.drain_records() == []
        assert cbeat(coord, w1, 1, now=110) == 0 and cbeat(coord, w2, 1, now=110) == 0


def test_empty_classic_group_converts_under_every_policy() -> None:
    for policy in MigrationPolicy:
        coord = coordinator(migration_policy=policy)
        log = Log(coord)
        resp = cjoin(coord, "", "http://w1/", EMPTY, now=0)
        w1 = resp.member_id  # type: ignore[union-attr]
        assert cjoin(coord, w1, "http://w1/", EMPTY, now=0, token="j") is None
        coord.advance(0)
        coord.drain_responses()
        assert coord.classic_leave(capi.LeaveGroupRequest(G, (capi.LeavingMember(w1),)), 10).members == [
            (w1, None, 0)
        ]
        g = classic(coord)
        assert (g.state, g.generation_id, g.members) == (ClassicGroupState.EMPTY, 2, {})
        log.drain()

        resp = njoin(coord, "", "http://n1/", now=20)
        assert (resp.error_code, resp.member_epoch) == (0, 1), policy
        assert connect(coord).group_epoch == 1
        assert log.drain()[0] == Record(RecordType.CLASSIC_GROUP, G, "", None)
        log.check_replay(20)


def test_upgrade_policy_never_downgrades_and_keeps_serving_legacy_members() -> None:
    coord, log, w1, w2, w3 = upgraded_and_settled(
        migration_policy=MigrationPolicy.UPGRADE, scheduled_rebalance_max_delay_ms=0
    )
    resp = coord.connect_heartbeat(HeartbeatRequest(G, w3, -1), 1_000)
    assert resp.member_epoch == -1
    g = connect(coord)
    assert set(g.members) == {w1, w2} and all(m.metadata.is_legacy for m in g.members.values())
    assert (g.group_epoch, g.assignment_epoch) == (3, 3)
    a2_owner = next(mid for mid, items in g.target.items() if A2 in items)
    log.check_replay(1_000)

    # The legacy workers keep being served: the one targeted with A-2 receives it after rejoining.
    for mid, runs, url in ((w1, W1_FULL - {A2}, "http://w1/"), (w2, W2_FULL, "http://w2/")):
        assert cbeat(coord, mid, 2, now=1_100) == RIP
        jr = cjoin(coord, mid, url, runs, now=1_200)
        assert jr is not None and (jr.error_code, jr.generation_id) == (0, 3)
    for mid, runs in ((w1, W1_FULL - {A2}), (w2, W2_FULL)):
        version, asg = decoded(csync(coord, mid, 3, now=1_300))
        assert version == 2
        assert frozenset(asg.items) == g.target[mid] - runs
        assert frozenset(asg.revoked_items) == runs - g.target[mid]
    assert A2 in current(coord)[a2_owner][2]
    assert isinstance(group(coord), ConnectGroup)
    log.check_replay(1_300)

    # Even another removal (a legacy worker leaving) does not downgrade under "upgrade".
    coord.classic_leave(capi.LeaveGroupRequest(G, (capi.LeavingMember(w2),)), 1_400)
    assert isinstance(group(coord), ConnectGroup) and set(connect(coord).members) == {w1}


def test_group_size_limit_refuses_an_upgrade_that_would_exceed_it() -> None:
    coord = coordinator(max_group_size=2)
    stable_classic(coord)
    coord.drain_records()
    before = coord.snapshot()
    resp = njoin(coord, "", "http://w3/", now=100)
    assert resp.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert "maximum size" in (resp.error_message or "")
    assert coord.snapshot() == before and coord.drain_records() == []

    coord = coordinator(max_group_size=3)
    stable_classic(coord)
    assert njoin(coord, "", "http://w3/", now=100).error_code == 0
    assert len(connect(coord).members) == 3


# --- 8. case study


FOO = [ConnectorTaskId("foo", i) for i in range(6)]
FOO_C = ConnectorTaskId("foo", -1)


def eager_protocols(url: str) -> tuple[tuple[str, bytes], ...]:
    return (("default", encode_subscription(Subscription(url, OFFSET), 0)),)


def test_kip848_online_migration_case_study_with_connectors_and_tasks() -> None:
    """Seed 003 "Online Migration", with partitions foo-0..foo-5 as tasks of connector ``foo`` and the
    connector instance added to A. All workers are eager (the text's C revokes everything before
    joining). Connect's scheduled rebalance delay is off so lost work moves at once, as in the text."""
    coord = coordinator(scheduled_rebalance_max_delay_ms=0)
    coord.default_view = ConfigView.of(OFFSET, {"foo": 6})
    log = Log(coord)

    def member(name: str, items: list[ConnectorTaskId]) -> ClassicMemberSnapshot:
        asg = encode_assignment(Assignment.build(0, "A", "http://A/", OFFSET, items), 0)
        return ClassicMemberSnapshot(
            name, name, name, "", 60_000, 10_000, eager_protocols(f"http://{name}/"), asg
        )

    # "Generic Group (generation=22)": A [foo-0, foo-1], B [foo-3, foo-4], C [foo-2, foo-5]. The log
    # starts with that group's record (static members: member id = instance id).
    start = Record(
        RecordType.CLASSIC_GROUP,
        G,
        "",
        ClassicGroupSnapshot(
            22,
            "connect",
            "default",
            "A",
            0,
            (
                member("A", [FOO_C, FOO[0], FOO[1]]),
                member("B", [FOO[3], FOO[4]]),
                member("C", [FOO[2], FOO[5]]),
            ),
            0,
        ),
    )
    coord.replay([start], 0)
    log.records.append(start)
    assert (classic(coord).state, classic(coord).generation_id) == (ClassicGroupState.STABLE, 22)

    # "A leaves and rejoins with the new protocol enabled. The group is converted. The current
    # generation becomes the group epoch." A rejoins under its instance id and takes its own place.
    # Text: group epoch 22, A epoch 22. Ours: the conversion is at 22, A's change of protocol bumps it
    # to 23 (protocol is assignment-relevant here) and A reconciles to 23 keeping its work.
    resp = njoin(coord, "A-new", "http://A/", instance="A", now=10)
    assert resp.error_code == 0 and resp.member_epoch == 23
    assert resp.assignment.items == fs(FOO_C, FOO[0], FOO[1])  # type: ignore[union-attr]
    g = connect(coord)
    batch = log.drain()
    assert next(r.value.group_epoch for r in batch if r.type is RecordType.GROUP_METADATA) == 22  # type: ignore[union-attr]
    assert (g.group_epoch, g.assignment_epoch) == (23, 23)
    assert current(coord) == {
        "A-new": (23, MemberState.STABLE, fs(FOO_C, FOO[0], FOO[1]), EMPTY),
        "B": (22, MemberState.STABLE, fs(FOO[3], FOO[4]), EMPTY),
        "C": (22, MemberState.STABLE, fs(FOO[2], FOO[5]), EMPTY),
    }
    assert g.target == {"A-new": fs(FOO_C, FOO[0], FOO[1]), "B": fs(FOO[3], FOO[4]), "C": fs(FOO[2], FOO[5])}
    log.check_replay(10)

    # "B leaves the group. The group coordinator removes it and bumps the group epoch." Text: 23 with a
    # target where A gets foo-3 and C foo-4; ours: 24, and the assignor deals them the other way round.
    leave = coord.classic_leave(capi.LeaveGroupRequest(G, (capi.LeavingMember("B", "B"),)), 20)
    assert leave.members == [("B", "B", 0)]
    assert isinstance(group(coord), ConnectGroup)  # A still speaks the new protocol
    assert (g.group_epoch, g.assignment_epoch) == (24, 24)
    assert g.target == {"A-new": fs(FOO_C, FOO[0], FOO[1], FOO[4]), "C": fs(FOO[2], FOO[3], FOO[5])}

    # "It also triggers a rebalance for C": C heartbeats and is told to rejoin.
    assert cbeat(coord, "C", 22, instance="C", now=30) == RIP
    # "C revokes all its partitions ... and sends a JoinGroup request. ... it can transition to epoch
    # 23 [ours 24] and transition to CompletingRebalance." All of C's target is free.
    jr = coord.classic_join(
        capi.JoinGroupRequest(G, "C", "connect", eager_protocols("http://C/"), group_instance_id="C"), 40
    )
    assert jr is not None and (jr.error_code, jr.generation_id, jr.leader) == (0, 24, "")
    assert current(coord)["C"] == (24, MemberState.STABLE, fs(FOO[2], FOO[3], FOO[5]), EMPTY)
    assert g.legacy_members.states["C"].value == "CompletingRebalance"
    # "In the meantime, A heartbeats and transitions to epoch 23 [24] as well."
    resp = nbeat(coord, "A-new", 23, now=50)
    assert resp.member_epoch == 24
    assert resp.assignment.items == fs(FOO_C, FOO[0], FOO[1], FOO[4])  # type: ignore[union-attr]
    # "C sends the SyncGroup request and collects its new assignment. ... C transitions to Stable."
    version, asg = decoded(csync(coord, "C", 24, instance="C", now=60))
    assert (version, frozenset(asg.items), asg.revoked_items) == (0, fs(FOO[2], FOO[3], FOO[5]), ())
    assert g.legacy_members.states["C"].value == "Stable" and g.state.value == "STABLE"
    log.check_replay(60)

    # "B rejoins the group with the new protocol. The group coordinator adds it and bumps the group
    # epoch." Text: 24; ours: 25. The new target gives B two tasks, taken one from A and one from C.
    resp = njoin(coord, "B-new", "http://B/", instance="B", now=70)
    assert resp.error_code == 0 and resp.member_epoch == 25
    assert resp.assignment.items == EMPTY  # type: ignore[union-attr]
    assert (g.group_epoch, g.assignment_epoch) == (25, 25)
    b_target = g.target["B-new"]
    assert len(b_target) == 2 and len(b_target & g.target["A-new"]) == 0
    from_a = fs(FOO_C, FOO[0], FOO[1], FOO[4]) - g.target["A-new"]
    from_c = fs(FOO[2], FOO[3], FOO[5]) - g.target["C"]
    assert len(from_a) == len(from_c) == 1 and from_a | from_c == b_target
    assert current(coord)["B-new"] == (25, MemberState.UNRELEASED, EMPTY, EMPTY)

    # "A heartbeats and he is told to revoke" its task for B.
    resp = nbeat(coord, "A-new", 24, now=80)
    assert resp.member_epoch == 24 and resp.assignment.items == g.target["A-new"]  # type: ignore[union-attr]
    assert current(coord)["A-new"] == (24, MemberState.UNREVOKED, g.target["A-new"], from_a)
    # "C heartbeats and he is told to rebalance. He revokes all its partitions and sends the JoinGroup
    # request. ... it can transition to epoch 24 [25] ... [its task for B] is released."
    assert cbeat(coord, "C", 24, instance="C", now=90) == RIP
    jr = coord.classic_join(
        capi.JoinGroupRequest(G, "C", "connect", eager_protocols("http://C/"), group_instance_id="C"), 100
    )
    assert jr is not None and jr.generation_id == 25
    assert current(coord)["C"] == (25, MemberState.STABLE, g.target["C"], EMPTY)
    # "B heartbeats and transitions to epoch 24 [25] but does not get" A's task yet. (The text has B
    # receive C's task at this point; here it comes on B's next heartbeat after C released it.)
    resp = nbeat(coord, "B-new", 25, EMPTY, now=110)
    assert resp.member_epoch == 25 and resp.assignment.items == from_c  # type: ignore[union-attr]
    assert current(coord)["B-new"] == (25, MemberState.UNRELEASED, from_c, EMPTY)
    # "C sends the SyncGroup request to collect its assignment. He transitions to Stable."
    version, asg = decoded(csync(coord, "C", 25, instance="C", now=120))
    assert (version, frozenset(asg.items)) == (0, g.target["C"])
    # "A heartbeats. He confirms the revocation ... He transitions to epoch 24 [25]."
    resp = nbeat(coord, "A-new", 24, g.target["A-new"], now=130)
    assert resp.member_epoch == 25
    # "B heartbeats and gets its assignment."
    resp = nbeat(coord, "B-new", 25, from_c, now=140)
    assert resp.assignment.items == b_target  # type: ignore[union-attr]
    assert g.state.value == "STABLE"
    assert {mid: c[0] for mid, c in current(coord).items()} == {"A-new": 25, "B-new": 25, "C": 25}
    log.check_replay(140)

    # Rolled one by one: C moves to the new protocol too; the group has no legacy member left.
    c_runs = g.target["C"]
    resp = njoin(coord, "C-new", "http://C/", instance="C", now=150)
    assert resp.error_code == 0 and resp.member_epoch == 26
    assert resp.assignment.items == c_runs == g.target["C-new"]  # type: ignore[union-attr]
    assert cbeat(coord, "C", 25, instance="C", now=155) == ErrorCode.FENCED_INSTANCE_ID
    assert not any(m.metadata.is_legacy for m in g.members.values())
    assert isinstance(group(coord), ConnectGroup)
    log.check_replay(150)


# --- bugs found


def test_legacy_static_member_switching_protocol_in_place_becomes_a_new_protocol_member() -> None:
    # Kafka's testConsumerGroupHeartbeatFromExistingClassicStaticMember: same member id and instance
    # id, new protocol. The classic metadata must go (Kafka drops classicMemberMetadata).
    coord = coordinator()
    _m1, m2 = static_stable_classic(coord)
    resp = njoin(coord, m2, "http://i2/", instance="i2", now=100)
    assert resp.error_code == 0 and resp.member_id == m2
    g = connect(coord)
    assert (g.members[m2].metadata.is_legacy, g.members[m2].metadata.protocol) == (False, "new")
    # As a new-protocol member it no longer answers to the classic API.
    assert cbeat(coord, m2, resp.member_epoch, instance="i2", now=110) == ErrorCode.UNKNOWN_MEMBER_ID


# --- 9. a config view behind the workers' (Java drill (f), docs/live-drills.md)


def test_legacy_member_ahead_of_the_config_view_gets_config_mismatch() -> None:
    """The bridge reads the config topic a poll behind the workers. A Java worker that already read
    a connector's deletion rejoins at the new offset; an assignment computed from the older view
    handed it the deleted connector's tasks at that offset, and it started them (drill (f): "Couldn't
    instantiate task gamma-0"). Like Java's leader behind a member, the bridge answers
    CONFIG_MISMATCH (nothing assigned or revoked, the highest offset) until its view has caught up,
    then the assignment of the new config."""
    a_items = frozenset({AC, A0, A1, A2})
    b_items = frozenset({BC, B0, B1})

    def join(member_id: str, offset: int, owned: Items, now: int) -> capi.JoinGroupResponse:
        allocation = Assignment.build(0, "", "", offset, sorted(owned), ())
        protos = tuple(
            (NAMES[v], encode_subscription(Subscription("http://w1/", offset, allocation if v else None), v))
            for v in (2, 1, 0)
        )
        resp = coord.classic_join(
            capi.JoinGroupRequest(
                G, member_id, "connect", protos, session_timeout_ms=10_000, rebalance_timeout_ms=60_000
            ),
            now,
        )
        assert resp is not None
        return resp

    coord = coordinator()
    coord.default_view = ConfigView.of(OFFSET, {"A": 3})
    n1 = njoin(coord, "", "http://n1/", now=0).member_id
    assert nbeat(coord, n1, 1, EMPTY, now=0).assignment.items == a_items  # type: ignore[union-attr]
    w1 = join("", OFFSET, EMPTY, 10).member_id
    jr = join(w1, OFFSET, EMPTY, 10)
    _, asg = decoded(csync(coord, w1, jr.generation_id, now=20))
    assert (asg.error, asg.items, asg.config_offset) == (0, (), OFFSET)  # A is still n1's

    # B is created (the view has it at OFFSET + 1; some of it is w1's), then deleted at OFFSET + 2:
    # w1 read the tombstone and rejoins at OFFSET + 2, the bridge has not read it yet.
    coord.set_config(G, ConfigView.of(OFFSET + 1, {"A": 3, "B": 2}), 30)
    stale = connect(coord).target[w1] & b_items
    assert stale, connect(coord).target
    jr = join(w1, OFFSET + 2, EMPTY, 40)
    _, asg = decoded(csync(coord, w1, jr.generation_id, now=50))
    assert (asg.error, asg.items, asg.revoked_items, asg.config_offset) == (1, (), (), OFFSET + 2)
    assert (asg.leader, asg.leader_url) == (n1, "http://n1/")

    coord.set_config(G, ConfigView.of(OFFSET + 2, {"A": 3}), 60)  # the view catches up
    assert not connect(coord).target[w1] & b_items
    jr = join(w1, OFFSET + 2, EMPTY, 70)
    _, asg = decoded(csync(coord, w1, jr.generation_id, now=80))
    assert asg.error == 0 and asg.config_offset == OFFSET + 2
    assert not frozenset(asg.items) & b_items


def test_a_legacy_member_whose_epoch_moved_on_before_its_sync_rejoins_at_once() -> None:
    """A legacy member's JoinGroup is answered at the group's epoch of that moment; when the target
    moves on before its SyncGroup (another member joins, a hold ends), the SyncGroup says
    REBALANCE_IN_PROGRESS, as Kafka's classic coordinator answers a SyncGroup once a new rebalance
    began. Answering it with the old generation's assignment left the worker without its new work
    until its next heartbeat, up to ``heartbeat.interval.ms`` later (a Java leader whose scheduled
    rebalance fired 4 ms before the bridge's hold ended: tests/test_java_versus_kafka.py)."""
    coord, _, w1, _, _ = upgraded_and_settled()
    joined = cjoin(coord, w1, "http://w1/", W1_FULL - {A2}, now=300)
    assert joined is not None and joined.error_code == 0 and joined.generation_id == 2
    w4 = njoin(coord, "", "http://w4/", now=301).member_id
    assert connect(coord).assignment_epoch == 3 and w4 in connect(coord).members
    answer = csync(coord, w1, 2, now=302)
    assert answer is not None and answer.error_code == RIP, answer
    rejoined = cjoin(coord, w1, "http://w1/", W1_FULL - {A2}, now=303)
    assert rejoined is not None and rejoined.error_code == 0
    synced = csync(coord, w1, rejoined.generation_id, now=304)
    assert synced is not None and synced.error_code == 0, synced
    # At the epoch it rejoined to, nothing is left for a heartbeat to tell it.
    member = connect(coord).members[w1].current
    assert member.member_epoch == connect(coord).assignment_epoch or member.state is MemberState.UNREVOKED

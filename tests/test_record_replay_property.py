"""Records are the only way durable state changes: after every step of a random run, replaying every
record written so far into a fresh coordinator gives the live coordinator's durable state.

A run mixes classic workers (JoinGroup, SyncGroup with the leader's assignment, Heartbeat,
LeaveGroup, static members, crashes that lose the member id), new-protocol workers (heartbeats,
leaves) and time (session, join, sync and revocation timeouts, holds), so groups convert both ways:
classic -> connect when a new-protocol worker joins (or the bridge holds a departed worker's work),
connect -> classic when the last new-protocol worker leaves or a worker joins an empty group.

What is compared after each step (records through their wire form, compacted by key):

* every connect group's persisted state and owner index, the config views and the ownership table;
* every classic group's log view (``persisted_snapshot``: the record a restart loads);
* a classic group at rest (Stable or Empty) field by field with the group replay loads: between
  two rebalances nothing durable may change without a record. Only the member id counter may run
  ahead of the log (ids handed out with MEMBER_ID_REQUIRED are not written, as Kafka writes none;
  the id's name carries ``now_ms``, so none repeats after a restart).

The groups themselves: the same ids, each of the same type (a conversion is its records too).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.group import ClassicGroup, ClassicGroupState
from connect_bridge.state.config import CoordinatorConfig, MigrationPolicy
from connect_bridge.state.connect.group import ConnectGroup
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.record_codec import decode_record, encode_record
from connect_bridge.state.records import Record
from connect_bridge.workers.new_protocol import NewProtocolWorker
from test_migration import ALL, VIEW, G, payload, protocols

CLASSIC = ("c0", "c1", "c2", "c3")
STATIC = frozenset({"c2", "c3"})
"""Classic workers with a group.instance.id (a crash then replaces the static member)."""
NEW = ("n0", "n1")
_S = ClassicGroupState
_AT_REST = (_S.STABLE, _S.EMPTY)

_act = st.tuples(st.just("cact"), st.sampled_from(CLASSIC), st.integers(0, 6))
_PASSES = (1, 100, 500, 1_000, 3_000, 10_001, 30_000, 61_000)
_advance = st.tuples(st.just("advance"), st.just(""), st.sampled_from(_PASSES))
_round = st.tuples(st.just("round"), st.just(""), st.integers(0, 6))
op = st.one_of(
    *[_act] * 4,
    *[_round] * 3,
    _advance,
    _advance,
    st.tuples(st.just("cjoin"), st.sampled_from(CLASSIC), st.sampled_from((2, 1, 0))),
    st.tuples(st.just("csync"), st.sampled_from(CLASSIC), st.integers(0, 6)),
    st.tuples(st.just("cbeat"), st.sampled_from(CLASSIC), st.just(0)),
    st.tuples(st.just("cleave"), st.sampled_from(CLASSIC), st.just(0)),
    st.tuples(st.just("ccrash"), st.sampled_from(CLASSIC), st.just(0)),
    st.tuples(st.just("nbeat"), st.sampled_from(NEW), st.just(0)),
    st.tuples(st.just("nleave"), st.sampled_from(NEW), st.just(0)),
)
"""A step: a classic worker acting on what it knows (most of the time: alone, or every started one
in turn) or sending one request regardless, a new-protocol worker's heartbeat or leave, or time
passing (timers fire)."""


@dataclass
class ClassicWorker:
    """What a classic worker remembers of its group: enough to send sensible requests."""

    name: str
    member_id: str = ""
    generation: int = -1
    leader: bool = False
    members: tuple[str, ...] = ()
    synced: bool = False
    """Its last JoinGroup answer was followed by a SyncGroup answer: it heartbeats now."""
    waiting: int = 0
    """Its requests parked at the coordinator, not answered yet."""

    @property
    def url(self) -> str:
        return f"http://{self.name}/"

    @property
    def instance(self) -> str | None:
        return f"instance-{self.name}" if self.name in STATIC else None

    def on_join(self, resp: object) -> None:
        if not isinstance(resp, capi.JoinGroupResponse):
            return
        if resp.error_code in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED):
            self.member_id = resp.member_id
        if resp.error_code == ErrorCode.NONE:
            self.generation = resp.generation_id
            self.leader = resp.leader == resp.member_id
            self.members = tuple(m.member_id for m in resp.members)
            self.synced = False
        elif resp.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            self.member_id, self.generation = "", -1

    def on_answer(self, resp: object) -> None:
        """A JoinGroup, SyncGroup or Heartbeat answer, as a worker takes it."""
        if isinstance(resp, capi.JoinGroupResponse):
            self.on_join(resp)
        elif isinstance(resp, capi.SyncGroupResponse | capi.HeartbeatResponse):
            if resp.error_code == ErrorCode.NONE:
                self.synced = self.synced or isinstance(resp, capi.SyncGroupResponse)
            elif resp.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                self.member_id, self.generation, self.synced = "", -1, False
            else:
                self.generation, self.synced = -1, False  # rejoin


class Run:
    def __init__(self, initial_delay_ms: int = 0, max_group_size: int = 2147483647) -> None:
        self.coord = GroupCoordinator(
            CoordinatorConfig(
                classic_initial_rebalance_delay_ms=initial_delay_ms,
                max_group_size=max_group_size,
                session_timeout_ms=10_000,
                scheduled_rebalance_max_delay_ms=15_000,
                migration_policy=MigrationPolicy.BIDIRECTIONAL,
            )
        )
        self.coord.default_view = VIEW
        self.now = 0
        self.tokens = 0
        self.parked: dict[object, ClassicWorker] = {}
        self.classic = {name: ClassicWorker(name) for name in CLASSIC}
        self.new: dict[str, NewProtocolWorker] = {}
        self.log: dict[tuple[int, str, str], Record] = {}
        """Every record so far through its wire form, compacted by key (the latest one last)."""

    def token(self, worker: ClassicWorker) -> object:
        self.tokens += 1
        self.parked[self.tokens] = worker
        worker.waiting += 1
        return self.tokens

    def answered(self, worker: ClassicWorker, token: object, response: object) -> None:
        """The answer to a JoinGroup or SyncGroup (None: parked, answered later)."""
        if response is not None:
            self.parked.pop(token, None)
            worker.waiting -= 1
            worker.on_answer(response)

    def step(self, kind: str, name: str, arg: int) -> None:
        getattr(self, kind)(name, arg)
        self.coord.advance(self.now)  # timers due now fire, as the runtime fires them
        for token, response in self.coord.drain_responses():
            worker = self.parked.pop(token, None)
            if worker is not None:
                worker.waiting -= 1
                worker.on_answer(response)
        for record in self.coord.drain_records():
            back = decode_record(*encode_record(record))
            self.log.pop(back.key, None)
            self.log[back.key] = back

    # ------------------------------------------------------------------ classic workers
    def cact(self, name: str, spread: int) -> None:
        """What the worker would do next: join, sync its generation, or heartbeat."""
        w = self.classic[name]
        if w.waiting:
            self.cbeat(name, 0)
        elif w.generation < 0 or not w.member_id:
            self.cjoin(name, 2)
        elif not w.synced:
            self.csync(name, spread)
        else:
            self.cbeat(name, 0)

    def round(self, _: str, spread: int) -> None:
        """Every classic worker that has a member id acts once, the way a live cluster moves on."""
        for name, worker in list(self.classic.items()):
            if worker.member_id:
                self.cact(name, spread)
                self.coord.advance(self.now)

    def cjoin(self, name: str, version: int) -> None:
        w = self.classic[name]
        req = capi.JoinGroupRequest(
            G,
            w.member_id,
            "connect",
            protocols(w.url, frozenset(), version),
            session_timeout_ms=10_000,
            rebalance_timeout_ms=20_000,
            group_instance_id=w.instance,
            token=(token := self.token(w)),
        )
        self.answered(w, token, self.coord.classic_join(req, self.now))

    def csync(self, name: str, spread: int) -> None:
        w = self.classic[name]
        assignments: tuple[tuple[str, bytes], ...] = ()
        if w.leader and w.members:
            items = sorted(ALL)
            assignments = tuple(
                (mid, payload(w.member_id, items[(i + spread) % len(items) :: len(w.members)]))
                for i, mid in enumerate(w.members)
            )
        req = capi.SyncGroupRequest(
            G,
            w.member_id,
            w.generation,
            group_instance_id=w.instance,
            protocol_type="connect",
            assignments=assignments,
            api_version=4,
            token=(token := self.token(w)),
        )
        self.answered(w, token, self.coord.classic_sync(req, self.now))

    def cbeat(self, name: str, _: int) -> None:
        w = self.classic[name]
        if w.member_id:
            beat = capi.HeartbeatRequest(G, w.member_id, w.generation, w.instance)
            w.on_answer(self.coord.classic_heartbeat(beat, self.now))

    def cleave(self, name: str, _: int) -> None:
        w = self.classic[name]
        if w.member_id:
            leaving = capi.LeavingMember(w.member_id, w.instance)
            self.coord.classic_leave(capi.LeaveGroupRequest(G, (leaving,)), self.now)
            self.classic[name] = ClassicWorker(name)

    def ccrash(self, name: str, _: int) -> None:
        self.classic[name] = ClassicWorker(name)  # a restarted process: no member id

    # ------------------------------------------------------------------ new-protocol workers
    def nbeat(self, name: str, _: int) -> None:
        worker = self.new.get(name)
        if worker is None:
            worker = self.new[name] = NewProtocolWorker(
                G, f"http://{name}/", rebalance_timeout_ms=20_000, session_timeout_ms=10_000
            )
        resp = self.coord.connect_heartbeat(worker.heartbeat_request(self.now), self.now)
        worker.on_response(resp)
        if resp.error_code:
            self.new.pop(name, None)

    def nleave(self, name: str, _: int) -> None:
        worker = self.new.pop(name, None)
        if worker is not None:
            self.coord.connect_heartbeat(worker.leave_request(), self.now)

    def advance(self, _: str, ms: int) -> None:
        target = self.now + ms
        while (deadline := self.coord.next_deadline()) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            self.coord.advance(self.now)
        self.now = target

    # ------------------------------------------------------------------ the property
    def replayed(self) -> GroupCoordinator:
        """A fresh coordinator loaded from every record so far."""
        fresh = GroupCoordinator(self.coord.config)
        fresh.default_view = self.coord.default_view
        fresh.replay([r for r in self.log.values() if not r.is_tombstone], self.now)
        return fresh

    def check_durable_state(self) -> None:
        live, fresh = self.coord, self.replayed()
        assert {g: type(x).__name__ for g, x in fresh.groups.items()} == {
            g: type(x).__name__ for g, x in live.groups.items()
        }
        assert fresh.views == live.views
        assert fresh.ownership.snapshot() == live.ownership.snapshot()
        for gid, group in live.groups.items():
            loaded = fresh.groups[gid]
            if isinstance(group, ConnectGroup):
                assert isinstance(loaded, ConnectGroup)
                assert loaded.snapshot() == group.snapshot()
                assert loaded.owners == group.owners
                continue
            assert isinstance(group, ClassicGroup) and isinstance(loaded, ClassicGroup)
            assert loaded.persisted_snapshot == group.persisted_snapshot
            if group.state in _AT_REST:
                here, there = group.snapshot(), loaded.snapshot()
                assert here.pop("member_seq") >= there.pop("member_seq")
                assert here == there, f"{gid} changed at rest without a record"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(op, min_size=25, max_size=80),
    mixed=st.booleans(),
    initial_delay_ms=st.sampled_from((0, 3_000)),
    max_group_size=st.sampled_from((2147483647, 3)),
)
def test_every_step_replays_to_the_live_durable_state(
    ops: list[tuple[str, str, int]], mixed: bool, initial_delay_ms: int, max_group_size: int
) -> None:
    """``mixed``: new-protocol workers take part (conversions); else classic workers only, whose
    groups then reach more generations. A worker joining with version 0 makes a generation eager
    (and the one after it gets the extra round); the initial rebalance delay and a group size
    limit take their own paths."""
    if not mixed:
        ops = [o for o in ops if not o[0].startswith("n")]
    run = Run(initial_delay_ms, max_group_size)
    for kind, name, arg in ops:
        run.step(kind, name, arg)
        run.check_durable_state()


def test_a_run_through_both_conversions_replays_at_every_step() -> None:
    """A fixed run that forms a Stable classic generation, upgrades it for a new-protocol worker,
    downgrades it when that worker leaves, and empties it: every conversion is checked too."""
    run = Run()
    script = [
        ("cjoin", "c0", 2), ("cjoin", "c0", 2), ("cjoin", "c1", 2), ("cjoin", "c1", 2),
        ("advance", "", 1), ("csync", "c0", 0), ("csync", "c1", 0),
        ("nbeat", "n0", 0), ("cbeat", "c0", 0), ("nbeat", "n0", 0), ("nleave", "n0", 0),
        ("cjoin", "c0", 2), ("cjoin", "c1", 2), ("advance", "", 3_000),
        ("cleave", "c0", 0), ("cleave", "c1", 0), ("advance", "", 61_000),
    ]  # fmt: skip
    kinds = set()
    for kind, name, arg in script:
        run.step(kind, name, arg)
        run.check_durable_state()
        group = run.coord.groups.get(G)
        kinds.add(type(group).__name__)
    assert kinds >= {"ClassicGroup", "ConnectGroup"}

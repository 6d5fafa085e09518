"""Unit tests of the ``connect`` group engine (seed 000: ConnectGroupHeartbeat, PrepareAssignment,
InstallAssignment; static membership and fencing by KIP-848's rules).

Items: connector A with two tasks and connector B with one (``A``, ``A-0``, ``A-1``, ``B``, ``B-0``).
Groups use the default server-side assignor (``connect-cooperative``) unless a test gives its members
client-side assignors. A ``Sim`` plays well-behaved workers: it remembers each member's epoch and
what it runs, acknowledges revocations when asked to, and settles the group by heartbeating.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state import assignors
from connect_bridge.state.api import (
    HeartbeatRequest,
    HeartbeatResponse,
    InstallAssignmentRequest,
    PrepareAssignmentRequest,
    PrepareAssignmentResponse,
)
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect import legacy_members
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.holds import revocation_timeout_hold_ms, zombie_grace_ms
from connect_bridge.state.model import (
    EMPTY,
    AssignedMetadata,
    ClientAssignor,
    ConfigView,
    Items,
    MemberState,
)
from connect_bridge.state.record_codec import decode_record, encode_record
from connect_bridge.state.records import Record, RecordType

G = "connect-cluster"
VIEW = ConfigView.of(10, {"A": 2, "B": 1})
ICA = "incremental-cooperative"
CA = ClientAssignor(ICA, 1, 2, 0, 2, b"meta")
NO_SESSION_EXPIRY = 10**9

OK = 0
COMPUTE = int(ErrorCode.COMPUTE_ASSIGNMENT)


def item(name: str) -> ConnectorTaskId:
    connector, _, task = name.partition("-")
    return ConnectorTaskId(connector, int(task) if task else -1)


def items(*names: str) -> Items:
    return frozenset(item(n) for n in names)


ALL = items("A", "A-0", "A-1", "B", "B-0")


class Sim:
    """A coordinator plus well-behaved workers, on a simulated clock."""

    def __init__(
        self,
        *,
        delay: int = 0,
        session: int = 10_000,
        view: ConfigView | None = VIEW,
        max_group_size: int = 2147483647,
    ) -> None:
        self.coord = GroupCoordinator(
            CoordinatorConfig(
                session_timeout_ms=session,
                scheduled_rebalance_max_delay_ms=delay,
                max_group_size=max_group_size,
            )
        )
        self.now = 0
        self.epoch: dict[str, int] = {}
        self.running: dict[str, Items] = {}
        if view is not None:
            self.coord.set_config(G, view, 0)
            self.coord.drain_records()

    @property
    def group(self):
        return self.coord.groups[G]

    # ---------------------------------------------------------------- requests
    def send(self, req: HeartbeatRequest) -> HeartbeatResponse:
        resp = self.coord.connect_heartbeat(req, self.now)
        self.observe(resp)
        return resp

    def observe(self, resp: HeartbeatResponse) -> None:
        mid = resp.member_id
        fenced = resp.error_code in (int(ErrorCode.FENCED_MEMBER_EPOCH), int(ErrorCode.UNKNOWN_MEMBER_ID))
        left = resp.error_code == OK and resp.member_epoch < 0
        if fenced or left:  # the worker stops everything
            self.epoch.pop(mid, None)
            self.running.pop(mid, None)
            return
        if resp.error_code not in (OK, COMPUTE):
            return
        self.epoch[mid] = resp.member_epoch
        if resp.assignment is not None:
            self.running[mid] = resp.assignment.items

    def join(
        self,
        mid: str = "",
        *,
        instance: str | None = None,
        client: tuple[ClientAssignor, ...] | None = None,
        server: str | None = None,
        url: str | None = None,
        rebalance: int = 60_000,
        config_offset: int | None = 10,
    ) -> HeartbeatResponse:
        return self.send(
            HeartbeatRequest(
                G,
                mid,
                0,
                instance_id=instance,
                rebalance_timeout_ms=rebalance,
                server_assignor=server,
                client_assignors=client,
                owned=EMPTY,
                url=url if url is not None else f"http://{mid or 'anonymous'}:8083/",
                config_offset=config_offset,
            )
        )

    def beat(self, mid: str, *, ack: bool = False, epoch: int | None = None, **fields) -> HeartbeatResponse:
        """A heartbeat with the member's known epoch; ``ack`` reports what it runs (acknowledging)."""
        if ack:
            fields.setdefault("owned", self.running.get(mid, EMPTY))
        return self.send(HeartbeatRequest(G, mid, self.epoch[mid] if epoch is None else epoch, **fields))

    def leave(self, mid: str, epoch: int = -1, instance: str | None = None) -> HeartbeatResponse:
        return self.send(HeartbeatRequest(G, mid, epoch, instance_id=instance))

    def settle(self, rounds: int = 10) -> None:
        """Heartbeat every member (acknowledging) until nothing changes; client-side groups compute."""
        for _ in range(rounds):
            before = self.coord.snapshot()
            for mid in sorted(self.group.members):
                if mid not in self.epoch:
                    continue
                resp = self.beat(mid, ack=True)
                if resp.error_code == COMPUTE:
                    self.compute(mid)
            if self.coord.snapshot() == before and self.group.state.value == "STABLE":
                return
        raise AssertionError(f"group did not settle: {self.coord.describe(G)}")

    # ---------------------------------------------------------------- client-side assignment
    def prepare(self, mid: str, epoch: int | None = None) -> PrepareAssignmentResponse:
        req = PrepareAssignmentRequest(G, mid, self.epoch[mid] if epoch is None else epoch)
        return self.coord.prepare_assignment(req, self.now)

    def install(self, mid: str, members: dict[str, Items], group_epoch: int, *, error: int = 0, epoch=None):
        req = InstallAssignmentRequest(
            G, mid, self.epoch[mid] if epoch is None else epoch, group_epoch, error, members
        )
        return self.coord.install_assignment(req, self.now)

    def compute(self, mid: str) -> dict[str, Items]:
        """Run the client-side assignment as the chosen member would (cooperative over the prepared state)."""
        prepared = self.prepare(mid)
        assert prepared.error_code == OK, prepared.error_message
        spec = assignors.AssignmentSpec(
            members=tuple(m.member_id for m in prepared.members),
            configured=prepared_items(prepared),
            previous={m.member_id: m.target for m in prepared.members},
            returned={},
            holding=False,
        )
        target = assignors.cooperative(spec)
        resp = self.install(mid, target, prepared.group_epoch)
        assert resp.error_code == OK, resp.error_message
        return target

    # ---------------------------------------------------------------- time
    def advance(self, to: int) -> None:
        self.now = to
        self.coord.advance(to)

    # ---------------------------------------------------------------- views
    def target_union(self) -> Items:
        out: set[ConnectorTaskId] = set()
        for mid in self.group.members:
            out |= self.group.target.get(mid, EMPTY)
        return frozenset(out)


def prepared_items(prepared: PrepareAssignmentResponse) -> Items:
    out = set()
    for name, tasks in prepared.connectors.items():
        out.add(ConnectorTaskId(name, -1))
        out.update(ConnectorTaskId(name, t) for t in range(tasks))
    return frozenset(out)


def stable_pair(**kwargs) -> Sim:
    """Members m1 and m2, settled (server-side cooperative)."""
    sim = Sim(**kwargs)
    sim.join("m1")
    sim.join("m2")
    sim.settle()
    return sim


def baseline(sim: Sim) -> tuple[dict, int | None]:
    """Drain pending records, then capture what a rejected request must leave as is."""
    sim.coord.drain_records()
    return sim.coord.snapshot(), sim.coord.next_deadline()


def assert_untouched(sim: Sim, before: dict, deadline: int | None) -> None:
    assert sim.coord.snapshot() == before
    assert sim.coord.drain_records() == []
    assert sim.coord.next_deadline() == deadline


# ============================================================================ request validation

INVALID_HEARTBEATS = {
    "empty group id": (lambda e: HeartbeatRequest("", "m1", e), "GroupId"),
    "empty member id on a heartbeat": (lambda e: HeartbeatRequest(G, "", e), "MemberId"),
    "empty member id on a leave": (lambda e: HeartbeatRequest(G, "", -1), "MemberId"),
    "empty member id on a temporary leave": (
        lambda e: HeartbeatRequest(G, "", -2, instance_id="i"),
        "MemberId",
    ),
    "epoch below -2": (lambda e: HeartbeatRequest(G, "m1", -3), "MemberEpoch"),
    "very negative epoch": (lambda e: HeartbeatRequest(G, "m1", -(2**31)), "MemberEpoch"),
    "empty instance id": (lambda e: HeartbeatRequest(G, "m1", e, instance_id=""), "InstanceId"),
    "empty instance id on a join": (
        lambda e: HeartbeatRequest(G, "new", 0, instance_id="", rebalance_timeout_ms=1000),
        "InstanceId",
    ),
    "no rebalance timeout on the first join": (
        lambda e: HeartbeatRequest(G, "new", 0, owned=EMPTY),
        "RebalanceTimeoutMs",
    ),
    "zero rebalance timeout on the first join": (
        lambda e: HeartbeatRequest(G, "new", 0, rebalance_timeout_ms=0),
        "RebalanceTimeoutMs",
    ),
    "generated-id join without rebalance timeout": (
        lambda e: HeartbeatRequest(G, "", 0),
        "RebalanceTimeoutMs",
    ),
    "server and client assignors together": (
        lambda e: HeartbeatRequest(G, "m1", e, server_assignor=assignors.COOPERATIVE, client_assignors=(CA,)),
        "ServerAssignor and ClientAssignors",
    ),
    "server and client assignors together on a join": (
        lambda e: HeartbeatRequest(
            G, "new", 0, rebalance_timeout_ms=1000, server_assignor=assignors.EAGER, client_assignors=(CA,)
        ),
        "ServerAssignor and ClientAssignors",
    ),
    "empty assignor name": (
        lambda e: HeartbeatRequest(G, "m1", e, client_assignors=(ClientAssignor("", 1, 2, 0, 1),)),
        "Name",
    ),
    "minimum version below -1": (
        lambda e: HeartbeatRequest(G, "m1", e, client_assignors=(ClientAssignor("x", -2, 2, 0, 0),)),
        "MinimumVersion must be >= -1",
    ),
    "maximum version below minimum": (
        lambda e: HeartbeatRequest(G, "m1", e, client_assignors=(ClientAssignor("x", 3, 2, 0, 3),)),
        "MaximumVersion",
    ),
    "negative maximum version": (
        lambda e: HeartbeatRequest(G, "m1", e, client_assignors=(ClientAssignor("x", -1, -1, 0, -1),)),
        "MaximumVersion",
    ),
    "version above maximum": (
        lambda e: HeartbeatRequest(G, "m1", e, client_assignors=(ClientAssignor("x", 1, 3, 0, 4),)),
        "Version must be within",
    ),
    "version below minimum": (
        lambda e: HeartbeatRequest(G, "m1", e, client_assignors=(ClientAssignor("x", 1, 3, 0, 0),)),
        "Version must be within",
    ),
    "second assignor invalid": (
        lambda e: HeartbeatRequest(G, "m1", e, client_assignors=(CA, ClientAssignor("y", 1, 3, 0, 9))),
        "Version must be within",
    ),
    "invalid assignor on a join": (
        lambda e: HeartbeatRequest(
            G, "new", 0, rebalance_timeout_ms=1000, client_assignors=(ClientAssignor("x", 2, 1, 0, 1),)
        ),
        "MaximumVersion",
    ),
    # Not in seed 000's list: KIP-848's temporary leave is only meaningful for static members.
    "temporary leave without instance id": (lambda e: HeartbeatRequest(G, "m1", -2), "InstanceId"),
}


@pytest.mark.parametrize("case", sorted(INVALID_HEARTBEATS))
def test_invalid_heartbeat_is_rejected_and_changes_nothing(case: str) -> None:
    sim = stable_pair()
    make, fragment = INVALID_HEARTBEATS[case]
    before, deadline = baseline(sim)
    sim.now = 5_000
    resp = sim.coord.connect_heartbeat(make(sim.epoch["m1"]), sim.now)
    assert resp.error_code == ErrorCode.INVALID_REQUEST
    assert fragment in (resp.error_message or "")
    assert resp.assignment is None
    # Nothing changed: no state, no records, and the member's session was not extended either.
    assert_untouched(sim, before, deadline)


def test_valid_boundaries_are_accepted() -> None:
    """The edges of each rule are valid: MinimumVersion -1, MaximumVersion 0, Version == bounds."""
    sim = stable_pair()
    for assignor in (
        ClientAssignor("x", -1, 0, 0, -1),
        ClientAssignor("x", -1, 0, 0, 0),
        ClientAssignor("x", 2, 2, 0, 2),
    ):
        resp = sim.beat("m1", client_assignors=(assignor,))
        assert resp.error_code == OK, resp.error_message
    # An empty client assignor list together with a server assignor is not "both used".
    assert sim.beat("m1", server_assignor=assignors.COOPERATIVE, client_assignors=()).error_code == OK


def test_a_known_member_rejoining_without_rebalance_timeout_is_invalid_request() -> None:
    """Every join carries the rebalance timeout, a known member's rejoin too: Kafka 4.3.1 answers
    INVALID_REQUEST there (tests/test_consumer_heartbeat_differential.py), and nothing changes."""
    sim = stable_pair()
    before, deadline = baseline(sim)
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, "m1", 0, owned=EMPTY), sim.now)
    assert resp.error_code == ErrorCode.INVALID_REQUEST and "RebalanceTimeoutMs" in resp.error_message
    assert_untouched(sim, before, deadline)


def test_invalid_join_to_unknown_group_creates_nothing() -> None:
    coord = GroupCoordinator()
    resp = coord.connect_heartbeat(HeartbeatRequest("fresh", "m1", 0), 0)  # no rebalance timeout
    assert resp.error_code == ErrorCode.INVALID_REQUEST
    assert coord.drain_records() == []
    assert coord.snapshot()["groups"] == {}
    assert coord.describe("fresh").error_code == ErrorCode.GROUP_ID_NOT_FOUND


@pytest.mark.parametrize("req", [HeartbeatRequest("fresh", "m1", -3), HeartbeatRequest("fresh", "", 4)])
def test_invalid_heartbeat_to_unknown_group_is_invalid_request(req: HeartbeatRequest) -> None:
    coord = GroupCoordinator()
    assert coord.connect_heartbeat(req, 0).error_code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("member_id", ["", "m2"], ids=["server-member-id", "client-member-id"])
def test_join_to_full_group_changes_nothing(member_id: str) -> None:
    """Whether the server or the client makes up the joiner's id, a full group turns it away."""
    sim = Sim(max_group_size=1)
    sim.join("m1")
    sim.settle()
    before, deadline = baseline(sim)
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, member_id, 0, rebalance_timeout_ms=1000), 0)
    assert resp.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert_untouched(sim, before, deadline)


# ============================================================================ UNSUPPORTED_ASSIGNOR

UNKNOWN_SERVER_ASSIGNOR: dict[str, Callable[[Sim], HeartbeatResponse]] = {
    "join": lambda sim: sim.join("m3", server="range"),
    "heartbeat": lambda sim: sim.beat("m1", server_assignor="uniform"),
}
"""A server assignor the bridge does not have, named by a joining member or on a known one's heartbeat."""


@pytest.mark.parametrize("request_kind", list(UNKNOWN_SERVER_ASSIGNOR))
def test_unknown_server_assignor_is_unsupported(request_kind: str) -> None:
    sim = stable_pair()
    before, deadline = baseline(sim)
    resp = UNKNOWN_SERVER_ASSIGNOR[request_kind](sim)
    assert resp.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert_untouched(sim, before, deadline)


def test_known_server_assignors_are_accepted() -> None:
    sim = stable_pair()
    for name in (assignors.EAGER, assignors.COOPERATIVE):
        assert sim.beat("m1", server_assignor=name).error_code == OK


def test_client_assignor_range_not_overlapping_is_unsupported() -> None:
    sim = Sim()
    sim.join("m1", client=(ClientAssignor(ICA, 1, 2, 0, 2),))
    sim.compute("m1")
    sim.settle()
    before, deadline = baseline(sim)
    resp = sim.join("m2", client=(ClientAssignor(ICA, 3, 4, 0, 3),))
    assert resp.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert_untouched(sim, before, deadline)
    # Below the other range too.
    sim.coord.connect_heartbeat(
        HeartbeatRequest(G, "m1", sim.epoch["m1"], client_assignors=(ClientAssignor(ICA, 3, 5, 0, 3),)), 0
    )
    sim.coord.drain_records()
    before, deadline = baseline(sim)
    assert (
        sim.join("m2", client=(ClientAssignor(ICA, 0, 2, 0, 1),)).error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    )
    assert_untouched(sim, before, deadline)


def test_client_assignor_ranges_touching_or_named_differently_are_accepted() -> None:
    sim = Sim()
    sim.join("m1", client=(ClientAssignor(ICA, 1, 2, 0, 2),))
    # (Touching, and m1 covers m2; [2-4] would leave nobody covering everyone, see below.)
    assert sim.join("m2", client=(ClientAssignor(ICA, 2, 2, 0, 2),)).error_code in (OK, COMPUTE)
    assert sim.join("m3", client=(ClientAssignor("other", 7, 9, 0, 7),)).error_code in (OK, COMPUTE)


def test_existing_member_changing_to_a_non_overlapping_range_is_unsupported() -> None:
    sim = Sim()
    sim.join("m1", client=(CA,))
    sim.join("m2", client=(CA,))
    sim.settle()
    before, deadline = baseline(sim)
    resp = sim.beat("m2", client_assignors=(ClientAssignor(ICA, 5, 6, 0, 5),))
    assert resp.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert_untouched(sim, before, deadline)


# ============================================================================ joining and fencing


def test_join_with_empty_member_id_gets_a_deterministic_unique_server_id() -> None:
    def run() -> list[str]:
        sim = Sim()
        ids = []
        for _ in range(3):
            resp = sim.join("")
            assert resp.error_code == OK
            ids.append(resp.member_id)
        assert set(sim.group.members) == set(ids)
        return ids

    ids = run()
    assert all(ids) and len(set(ids)) == 3
    assert run() == ids  # no randomness: the same history yields the same ids


def test_generated_member_ids_stay_unique_after_members_leave() -> None:
    sim = Sim()
    first = sim.join("").member_id
    sim.leave(first)
    second = sim.join("").member_id
    assert second != first


def test_generated_member_ids_differ_between_groups() -> None:
    coord = GroupCoordinator()
    a = coord.connect_heartbeat(HeartbeatRequest("g1", "", 0, rebalance_timeout_ms=1000), 0).member_id
    b = coord.connect_heartbeat(HeartbeatRequest("g2", "", 0, rebalance_timeout_ms=1000), 0).member_id
    assert a and b and a != b


def test_join_bumps_the_group_epoch_and_first_member_gets_everything() -> None:
    sim = Sim()
    assert sim.group.group_epoch == 1  # set_config on the new group
    resp = sim.join("worker-7")
    assert resp.error_code == OK and resp.member_id == "worker-7"
    assert sim.group.group_epoch == 2 and sim.group.assignment_epoch == 2
    assert resp.member_epoch == 2 and resp.assignment is not None and resp.assignment.items == ALL
    assert resp.heartbeat_interval_ms == 3000


def test_unknown_member_with_positive_epoch_is_unknown_member_id() -> None:
    sim = stable_pair()
    before, deadline = baseline(sim)
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, "ghost", 3), 0)
    assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert_untouched(sim, before, deadline)
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, "ghost", -1), 0)
    assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert_untouched(sim, before, deadline)


def test_heartbeat_to_unknown_group_is_unknown_member_id() -> None:
    coord = GroupCoordinator()
    assert (
        coord.connect_heartbeat(HeartbeatRequest("nope", "m1", 4), 0).error_code
        == ErrorCode.UNKNOWN_MEMBER_ID
    )
    assert coord.snapshot()["groups"] == {}


@pytest.mark.parametrize(
    ("delta", "owned"),
    # -1 reporting its own work is the lost-response rule (accepted), tested below.
    [(+1, False), (-1, False), (+7, False), (+1, True), (+7, True)],
)
def test_wrong_epoch_is_fenced_and_changes_nothing(delta: int, owned: bool) -> None:
    """FENCED_MEMBER_EPOCH and the member stays as it was, as Kafka 4.3.1 answers (issue 11.3; seed
    000 also removes it): anybody holding a member id could otherwise evict its member, and a stale
    or duplicated request the live worker it spoke for."""
    sim = stable_pair()
    epoch, work = sim.epoch["m1"], sim.running["m1"]
    before, deadline = baseline(sim)
    resp = sim.coord.connect_heartbeat(
        HeartbeatRequest(G, "m1", epoch + delta, owned=work if owned else None), sim.now
    )
    assert resp.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert_untouched(sim, before, deadline)
    # The worker that did see the fencing drops everything and rejoins with epoch 0 under its id:
    # it gets its member back as it was, and carries on.
    resp = sim.join("m1")
    assert resp.error_code == OK and resp.member_epoch == epoch and resp.assignment.items == work
    sim.settle()
    assert sim.target_union() == ALL and sim.running["m1"] == work


def test_wrong_epoch_with_owned_subset_but_not_previous_epoch_is_fenced() -> None:
    sim = stable_pair()
    resp = sim.beat("m1", epoch=sim.epoch["m1"] + 1, owned=EMPTY)
    assert resp.error_code == ErrorCode.FENCED_MEMBER_EPOCH


def lost_ack_response() -> tuple[Sim, int, Items]:
    """m1 acknowledges a revocation, moves to the new epoch, and never sees that response.

    Returns the simulation, m1's previous epoch (what it still believes) and what it still runs.
    """
    sim = Sim()
    sim.join("m1")
    sim.settle()
    old_epoch = sim.epoch["m1"]
    sim.join("m2")
    resp = sim.beat("m1", ack=True)  # revocation: m1 keeps its epoch, gives up part of its work
    assert resp.member_epoch == old_epoch and resp.assignment.items < ALL
    kept = resp.assignment.items
    assert sim.group.members["m1"].current.state is MemberState.UNREVOKED
    # The acknowledgement moves m1 to the new epoch, but the response is lost.
    lost = sim.coord.connect_heartbeat(HeartbeatRequest(G, "m1", old_epoch, owned=kept), 0)
    assert lost.error_code == OK and lost.member_epoch == old_epoch + 1
    assert sim.group.members["m1"].current.previous_member_epoch == old_epoch
    return sim, old_epoch, kept


def test_lost_response_retry_with_previous_epoch_and_owned_subset_is_accepted() -> None:
    sim, old_epoch, kept = lost_ack_response()
    group_epoch = sim.group.group_epoch
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, "m1", old_epoch, owned=kept), 0)
    assert resp.error_code == OK
    assert resp.member_epoch == old_epoch + 1  # transitioned to the target epoch again
    # It already runs exactly its assignment, so the response leaves the assignment unset (unchanged).
    assert resp.assignment is None
    # Owning less than assigned is a subset too; the response then repeats the assignment.
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, "m1", old_epoch, owned=EMPTY), 0)
    assert resp.error_code == OK and resp.member_epoch == old_epoch + 1
    assert resp.assignment is not None and resp.assignment.items == kept
    assert "m1" in sim.group.members and sim.group.group_epoch == group_epoch


def test_lost_response_retry_owning_more_than_assigned_is_fenced() -> None:
    sim, old_epoch, _ = lost_ack_response()
    before, deadline = baseline(sim)
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, "m1", old_epoch, owned=ALL), 0)
    assert resp.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert_untouched(sim, before, deadline)  # fenced, not removed (Kafka's answer)


def test_lost_response_retry_without_owned_is_fenced() -> None:
    """Without the owned list the coordinator cannot tell it is safe: KIP-848 fences."""
    sim, old_epoch, _ = lost_ack_response()
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, "m1", old_epoch), 0)
    assert resp.error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_lost_join_response_retry_is_a_rejoin() -> None:
    """A member whose join response was lost retries the join (epoch 0) and gets the same member."""
    sim = stable_pair()
    first = sim.coord.connect_heartbeat(
        HeartbeatRequest(G, "m3", 0, rebalance_timeout_ms=1000, owned=EMPTY, url="u3"), 0
    )
    group_epoch = sim.group.group_epoch
    again = sim.coord.connect_heartbeat(
        HeartbeatRequest(G, "m3", 0, rebalance_timeout_ms=1000, owned=EMPTY, url="u3"), 0
    )
    assert again.error_code == OK and again.member_epoch == first.member_epoch
    assert sim.group.group_epoch == group_epoch  # same metadata: no second bump


# ============================================================================ leaving


def stable_trio(**kwargs) -> Sim:
    sim = Sim(**kwargs)
    for mid in ("m1", "m2", "m3"):
        sim.join(mid)
    sim.settle()
    return sim


def test_leave_holds_the_work_for_the_scheduled_delay_then_releases_it() -> None:
    sim = stable_trio(delay=30_000, session=NO_SESSION_EXPIRY)
    m3_work = sim.group.target["m3"]
    assert m3_work
    group_epoch = sim.group.group_epoch
    sim.now = 1_000
    resp = sim.leave("m3")
    assert resp.error_code == OK and resp.member_epoch == -1
    assert "m3" not in sim.group.members
    assert sim.group.group_epoch == group_epoch + 1 == sim.group.assignment_epoch
    held = sim.group.metadata.held
    assert len(held) == 1 and held[0].items == m3_work and held[0].deadline_ms == 31_000
    # Held: nobody is targeted with m3's work, and nobody gets it.
    assert sim.target_union() == ALL - m3_work
    sim.settle()
    assert not any(sim.running[m] & m3_work for m in ("m1", "m2"))
    # The held timer is the next deadline; nothing happens a millisecond before it.
    assert sim.coord.next_deadline() == 31_000
    sim.advance(30_999)
    assert sim.target_union() == ALL - m3_work and sim.group.group_epoch == group_epoch + 1
    sim.advance(31_000)
    assert sim.group.group_epoch == group_epoch + 2 and sim.group.metadata.held == ()
    assert sim.target_union() == ALL
    sim.settle()
    assert sim.running["m1"] | sim.running["m2"] == ALL


def test_leave_with_no_delay_reassigns_immediately() -> None:
    sim = stable_trio(delay=0)
    m3_work = sim.group.target["m3"]
    group_epoch = sim.group.group_epoch
    sim.leave("m3")
    assert sim.group.group_epoch == group_epoch + 1 and sim.group.metadata.held == ()
    assert sim.target_union() == ALL
    sim.settle()
    assert sim.running["m1"] | sim.running["m2"] == ALL
    assert m3_work <= sim.running["m1"] | sim.running["m2"]


def test_eager_groups_do_not_hold_lost_work() -> None:
    sim = Sim(delay=30_000)
    for mid in ("m1", "m2", "m3"):
        sim.join(mid, server=assignors.EAGER)
    sim.settle()
    sim.leave("m3")
    assert sim.group.metadata.held == () and sim.target_union() == ALL


def test_returning_worker_gets_its_held_work_back() -> None:
    """A worker coming back within the delay (same url) is given back the work held for it."""
    sim = stable_trio(delay=30_000, session=NO_SESSION_EXPIRY)
    m3_work = sim.group.target["m3"]
    sim.leave("m3")
    sim.settle()
    sim.now = 10_000
    sim.join("m3-again", url="http://m3:8083/")
    assert sim.group.metadata.held == ()
    assert sim.group.target["m3-again"] == m3_work
    sim.settle()
    assert sim.running["m3-again"] == m3_work


def test_rolling_restart_within_the_delay_moves_nothing_although_each_process_has_a_new_member_id() -> None:
    """benchmarks/rolling_restart_three_ways.py's shape: 4 workers, two connectors of 10 tasks, each
    worker restarted in turn. The add-on picks a new member id per process (``<client.id>-<uuid>``);
    the hold is matched by the REST url, so a worker back within the delay gets exactly its own work
    back, and no task ever runs on another worker."""
    sim = Sim(delay=20_000, session=NO_SESSION_EXPIRY, view=ConfigView.of(10, {"alpha": 10, "beta": 10}))
    member = {w: f"{w}-process-0" for w in ("w0", "w1", "w2", "w3")}
    for worker, mid in member.items():
        sim.join(mid, url=f"http://{worker}:8083/")
    sim.settle()
    home = {worker: sim.running[mid] for worker, mid in member.items()}
    assert all(home.values())
    for restart, worker in enumerate(member, start=1):
        sim.leave(member[worker])
        sim.settle()
        sim.advance(sim.now + 8_000)  # a JVM restart, shorter than the delay
        member[worker] = f"{worker}-process-{restart}"
        sim.join(member[worker], url=f"http://{worker}:8083/")
        sim.settle()
        assert {w: sim.running[mid] for w, mid in member.items()} == home
    assert sim.group.metadata.held == ()


def test_an_assignment_is_resent_until_the_member_reports_owning_it() -> None:
    """The answer that carried a new assignment may be lost, or may have answered a duplicate of
    the request that the client then dropped: a member that never reports owning its assignment
    would otherwise wait for it forever (adversarial drill 15005207)."""
    sim = Sim()
    first = sim.join("m1")
    assert first.assignment is not None and first.assignment.items == ALL
    # That answer never reached the worker: its next heartbeats report nothing new.
    for _ in range(2):
        again = sim.coord.connect_heartbeat(HeartbeatRequest(G, "m1", first.member_epoch), sim.now)
        assert again.assignment is not None and again.assignment.items == ALL
    sim.beat("m1", owned=ALL)  # now it reports owning it: the steady state carries nothing
    quiet = sim.coord.connect_heartbeat(HeartbeatRequest(G, "m1", first.member_epoch), sim.now)
    assert quiet.error_code == OK and quiet.assignment is None


def test_last_member_leaving_empties_the_group() -> None:
    sim = Sim(delay=30_000)
    sim.join("m1")
    sim.settle()
    work = sim.running["m1"]
    sim.leave("m1")
    assert sim.group.members == {} and sim.group.state.value == "EMPTY"
    # Still held: the next worker to join (of either protocol) must not get it before the delay
    # unless it is m1 coming back; a fenced m1 may even still run it (adversarial drill 10000385).
    assert [(h.items, h.deadline_ms) for h in sim.group.metadata.held] == [(work, 30_000)]
    assert sim.group.target == {} and sim.group.assignment_epoch == sim.group.group_epoch


# ============================================================================ static membership


def test_static_member_temporary_leave_keeps_its_assignment() -> None:
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("s1", instance="i1")
    sim.join("m2")
    sim.settle()
    epoch, work, group_epoch = sim.epoch["s1"], sim.running["s1"], sim.group.group_epoch
    resp = sim.leave("s1", epoch=-2, instance="i1")
    assert resp.error_code == OK and resp.member_epoch == -2
    member = sim.group.members["s1"]
    assert member.current.left_temporarily
    assert member.current.member_epoch == epoch and member.current.assigned == work
    assert sim.group.group_epoch == group_epoch and sim.group.target["s1"] == work


def test_static_member_temporary_leave_with_wrong_instance_is_unknown() -> None:
    sim = Sim()
    sim.join("s1", instance="i1")
    before, deadline = baseline(sim)
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, "s1", -2, instance_id="other"), 0)
    assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert_untouched(sim, before, deadline)


def static_trio() -> Sim:
    """Dynamic members m1 and m2 and static member s1 (instance i1), settled."""
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("m1")
    sim.join("m2")
    sim.join("s1", instance="i1")
    sim.settle()
    return sim


# Leaving (-1) and leaving temporarily (-2) look a member up as Kafka 4.3.1 does: by instance id when
# the request has one; an unknown instance id is UNKNOWN_MEMBER_ID, an instance id held by another
# member id is FENCED_INSTANCE_ID (measured: tests/test_consumer_heartbeat_differential.py).
@pytest.mark.parametrize(
    ("member_id", "epoch", "instance", "error"),
    [
        ("s1", -1, "ghost", ErrorCode.UNKNOWN_MEMBER_ID),  # was FENCED_INSTANCE_ID
        ("m2", -1, "ghost", ErrorCode.UNKNOWN_MEMBER_ID),  # was FENCED_INSTANCE_ID
        ("m1", -1, "i1", ErrorCode.FENCED_INSTANCE_ID),
        ("m1", -2, "i1", ErrorCode.FENCED_INSTANCE_ID),  # was UNKNOWN_MEMBER_ID
        ("ghost", -2, "i1", ErrorCode.FENCED_INSTANCE_ID),  # was UNKNOWN_MEMBER_ID
        ("s1", -2, "ghost", ErrorCode.UNKNOWN_MEMBER_ID),
        ("m2", -2, "ghost", ErrorCode.UNKNOWN_MEMBER_ID),
        ("ghost", -1, None, ErrorCode.UNKNOWN_MEMBER_ID),
    ],
)
def test_leave_naming_an_instance_id_is_answered_as_kafka_does(
    member_id: str, epoch: int, instance: str | None, error: ErrorCode
) -> None:
    sim = static_trio()
    before, deadline = baseline(sim)
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, member_id, epoch, instance_id=instance), sim.now)
    assert resp.error_code == error
    assert_untouched(sim, before, deadline)


@pytest.mark.parametrize(("member_id", "instance"), [("s1", "i1"), ("s1", None)])
def test_leave_with_a_static_members_id_removes_it(member_id: str, instance: str | None) -> None:
    """-1 needs no epoch: whoever holds the member id (with its instance id, or none) removes it."""
    sim = static_trio()
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, member_id, -1, instance_id=instance), sim.now)
    assert resp.error_code == OK and resp.member_epoch == -1
    assert "s1" not in sim.group.members


def test_static_member_rejoining_with_its_own_ids_before_leaving_is_unreleased() -> None:
    """Epoch 0 with a static member's own member id and instance id, without a -2 first: Kafka 4.3.1
    answers UNRELEASED_INSTANCE_ID whoever sends it, and the member stays as it is (before issue
    11.3 the bridge took it for a duplicate join and answered with the member's assignment)."""
    sim = static_trio()
    before, deadline = baseline(sim)
    resp = sim.coord.connect_heartbeat(
        HeartbeatRequest(G, "s1", 0, instance_id="i1", rebalance_timeout_ms=60_000, owned=EMPTY), sim.now
    )
    assert resp.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert resp.assignment is None
    assert_untouched(sim, before, deadline)


def test_static_member_waiting_at_epoch_0_for_a_client_side_target_keeps_heartbeating() -> None:
    """In a new group the first member waits at epoch 0 until the first client-side target is
    installed (seed 000's walk-through), and a worker's heartbeats carry epoch 0 with everything,
    its instance id included: those are not rejoins, UNRELEASED_INSTANCE_ID does not apply."""
    coord = GroupCoordinator(CoordinatorConfig(session_timeout_ms=NO_SESSION_EXPIRY))
    coord.default_view = VIEW
    join = HeartbeatRequest(
        G, "s1", 0, instance_id="i1", rebalance_timeout_ms=60_000, client_assignors=(CA,), owned=EMPTY
    )
    first = coord.connect_heartbeat(join, 0)
    assert first.error_code == COMPUTE and first.member_epoch == 0
    again = coord.connect_heartbeat(join, 10)
    assert again.error_code in (OK, COMPUTE) and again.member_epoch == 0
    assert coord.groups[G].members["s1"].current.member_epoch == 0


def test_known_member_claiming_a_static_members_instance_id_is_unreleased() -> None:
    """A known dynamic member's id with the instance id of a static member that never left: Kafka's
    UNRELEASED_INSTANCE_ID (was FENCED_INSTANCE_ID)."""
    sim = static_trio()
    before, deadline = baseline(sim)
    resp = sim.coord.connect_heartbeat(
        HeartbeatRequest(G, "m1", 0, instance_id="i1", rebalance_timeout_ms=60_000, owned=EMPTY), sim.now
    )
    assert resp.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert_untouched(sim, before, deadline)


def test_known_member_claiming_a_released_instance_id_is_fenced() -> None:
    """After s1's -2, m1's id with i1 at epoch 0: Kafka gives m1's entry s1's state, dropping what
    m1 owns while m1's worker may still run it. The bridge refuses (a deliberate difference: no task
    on two workers), and s1 stays temporarily away with its work."""
    sim = static_trio()
    sim.leave("s1", epoch=-2, instance="i1")
    before, deadline = baseline(sim)
    resp = sim.coord.connect_heartbeat(
        HeartbeatRequest(G, "m1", 0, instance_id="i1", rebalance_timeout_ms=60_000, owned=EMPTY), sim.now
    )
    assert resp.error_code == ErrorCode.FENCED_INSTANCE_ID
    assert_untouched(sim, before, deadline)
    assert sim.group.members["s1"].current.left_temporarily


def test_epoch_0_with_a_known_id_keeps_the_member_and_answers_its_assignment() -> None:
    """Kafka 4.3.1 accepts epoch 0 with a known member id at any epoch: the member is unchanged and
    the answer carries its epoch and current assignment (whoever sent it)."""
    sim = static_trio()
    epoch, work = sim.epoch["m1"], sim.running["m1"]
    assert sim.group.members["m1"].current.previous_member_epoch > 0  # past its first epoch
    before, _ = baseline(sim)
    resp = sim.coord.connect_heartbeat(
        HeartbeatRequest(G, "m1", 0, rebalance_timeout_ms=60_000, owned=EMPTY, url="http://m1:8083/"),
        sim.now,
    )
    assert resp.error_code == OK and resp.member_epoch == epoch and resp.assignment.items == work
    assert sim.coord.snapshot() == before


def test_epoch_0_with_a_revoking_members_id_does_not_finish_its_revocation() -> None:
    """A deliberate difference (safety): Kafka takes the empty owned list of an epoch-0 heartbeat as
    the end of the member's revocation and hands the work on at once. Whoever sent it (a duplicate,
    a stale process, anybody holding the id) proves nothing about what the worker still runs, so
    the member stays revoking until its worker reports owning less."""
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("m1")
    sim.settle()
    sim.join("m2")
    resp = sim.beat("m1")  # told to revoke part of its work, not acknowledged
    m1 = sim.group.members["m1"].current
    assert m1.state is MemberState.UNREVOKED and m1.revoking
    revoking, epoch = m1.revoking, m1.member_epoch
    resp = sim.coord.connect_heartbeat(
        HeartbeatRequest(G, "m1", 0, rebalance_timeout_ms=60_000, owned=EMPTY, url="http://m1:8083/"),
        sim.now,
    )
    assert resp.error_code == OK and resp.member_epoch == epoch
    m1 = sim.group.members["m1"].current
    assert m1.state is MemberState.UNREVOKED and m1.revoking == revoking
    sim.beat("m2", ack=True)
    assert not (sim.running.get("m2", EMPTY) & revoking)


def test_static_member_rejoining_with_a_new_member_id_takes_over() -> None:
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("s1", instance="i1", url="http://s1:8083/")
    sim.join("m2")
    sim.settle()
    epoch, work, group_epoch = sim.epoch["s1"], sim.running["s1"], sim.group.group_epoch
    sim.leave("s1", epoch=-2, instance="i1")
    sim.now = 5_000
    resp = sim.join("s1-bis", instance="i1", url="http://s1:8083/")
    assert resp.error_code == OK and resp.member_id == "s1-bis"
    assert resp.member_epoch == epoch and resp.assignment.items == work
    assert "s1" not in sim.group.members
    member = sim.group.members["s1-bis"]
    assert not member.current.left_temporarily and member.current.assigned == work
    assert sim.group.target["s1-bis"] == work and "s1" not in sim.group.target
    assert all(sim.group.owners[i] == "s1-bis" for i in work)
    assert sim.group.group_epoch == group_epoch  # same metadata: no rebalance
    # The old member id is gone for good.
    assert sim.coord.connect_heartbeat(HeartbeatRequest(G, "s1", epoch), 5_000).error_code == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    assert {m.member_id for m in sim.coord.describe(G).members} == {"m2", "s1-bis"}


def test_static_leader_rejoining_keeps_leadership() -> None:
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("s1", instance="i1")
    sim.join("m2")
    sim.settle()
    sim.leave("s1", epoch=-2, instance="i1")
    resp = sim.join("s1-bis", instance="i1")
    assert sim.group.metadata.leader_id == "s1-bis" and resp.assignment.leader_id == "s1-bis"


def test_static_rejoin_with_changed_metadata_bumps_the_group_epoch() -> None:
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("s1", instance="i1", url="http://old:8083/")
    sim.settle()
    group_epoch = sim.group.group_epoch
    sim.leave("s1", epoch=-2, instance="i1")
    sim.join("s1-bis", instance="i1", url="http://new:8083/")
    assert sim.group.group_epoch == group_epoch + 1


def test_instance_id_in_use_is_unreleased_instance_id() -> None:
    sim = Sim()
    sim.join("s1", instance="i1")
    sim.settle()
    before, deadline = baseline(sim)
    resp = sim.join("s2", instance="i1")
    assert resp.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert_untouched(sim, before, deadline)
    # Also when the newcomer lets the coordinator pick its member id.
    resp = sim.join("", instance="i1")
    assert resp.error_code == ErrorCode.UNRELEASED_INSTANCE_ID


def test_static_member_rejoining_with_same_member_id_is_no_longer_left() -> None:
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("s1", instance="i1")
    sim.settle()
    sim.leave("s1", epoch=-2, instance="i1")
    resp = sim.join("s1", instance="i1")
    assert resp.error_code == OK
    assert not sim.group.members["s1"].current.left_temporarily
    resp = sim.join("s2", instance="i1")
    assert resp.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert "s1" in sim.group.members


def test_heartbeat_after_temporary_leave_does_not_leave_the_instance_up_for_grabs() -> None:
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("s1", instance="i1")
    sim.settle()
    epoch = sim.epoch["s1"]
    sim.leave("s1", epoch=-2, instance="i1")
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, "s1", epoch), 0)
    if resp.error_code == OK:  # accepted as active again: then the instance id is in use
        assert sim.join("s2", instance="i1").error_code == ErrorCode.UNRELEASED_INSTANCE_ID
        assert "s1" in sim.group.members
    else:
        assert resp.error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_leave_from_a_replaced_static_member_id_does_not_remove_the_new_member() -> None:
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("s1", instance="i1", url="http://s1:8083/")
    sim.join("m2")
    sim.settle()
    sim.leave("s1", epoch=-2, instance="i1")
    sim.join("s1-bis", instance="i1", url="http://s1:8083/")
    resp = sim.coord.connect_heartbeat(HeartbeatRequest(G, "s1", -1, instance_id="i1"), 0)
    assert resp.error_code != OK
    assert "s1-bis" in sim.group.members


def test_temporarily_left_member_is_removed_when_its_session_expires() -> None:
    sim = Sim(session=10_000)
    sim.join("s1", instance="i1")
    sim.settle()
    sim.now = 2_000
    sim.beat("s1")  # last heartbeat at 2000
    sim.leave("s1", epoch=-2, instance="i1")
    group_epoch = sim.group.group_epoch
    # The session runs from the last regular heartbeat; the -2 leave does not extend it.
    assert sim.coord.next_deadline() == 12_000
    sim.advance(11_999)
    assert "s1" in sim.group.members
    sim.advance(12_000)
    assert "s1" not in sim.group.members and sim.group.group_epoch == group_epoch + 1
    # Its instance id is free again.
    assert sim.join("s2", instance="i1").error_code == OK


# ============================================================================ partial heartbeats


def test_heartbeat_with_nothing_set_changes_nothing() -> None:
    sim = stable_pair()
    before, _ = baseline(sim)
    sim.now = 1_000
    resp = sim.beat("m1")
    assert resp.error_code == OK and resp.assignment is None and resp.member_epoch == sim.epoch["m1"]
    assert sim.coord.snapshot() == before and sim.coord.drain_records() == []
    # A stable member reporting exactly what it runs is answered without an assignment as well.
    resp = sim.beat("m1", ack=True)
    assert resp.assignment is None and sim.coord.snapshot() == before


@pytest.mark.parametrize(
    "fields",
    [
        {"url": "http://elsewhere:8083/"},
        {"server_assignor": assignors.EAGER},
        {"server_assignor": assignors.COOPERATIVE},  # the default, but now explicit
        {"client_assignors": (CA,)},
        {"instance_id": "i-new"},
    ],
    ids=["url", "server-assignor", "explicit-default-server-assignor", "client-assignors", "instance-id"],
)
def test_changing_assignment_relevant_metadata_bumps_the_group_epoch(fields: dict) -> None:
    sim = stable_pair()
    group_epoch = sim.group.group_epoch
    resp = sim.beat("m1", **fields)
    assert resp.error_code in (OK, COMPUTE)
    assert sim.group.group_epoch == group_epoch + 1
    # Sending the same values again is not a change.
    sim.beat("m1", **fields)
    assert sim.group.group_epoch == group_epoch + 1


@pytest.mark.parametrize(
    "fields",
    [
        {"config_offset": 99},
        {"rebalance_timeout_ms": 5_000},
        {"client_id": "c", "client_host": "/1.2.3.4"},
    ],
    ids=["config-offset", "rebalance-timeout", "client-id-host"],
)
def test_changing_other_metadata_does_not_bump_the_group_epoch(fields: dict) -> None:
    """Only what feeds the assignment bumps the group epoch: instance id, url, assignors (and protocol).

    A member's config offset is persisted (MEMBER_METADATA record) and raises the config offset the
    group hands out, but it is no input of the assignor: the target and every epoch stay as they are.
    The same holds for the rebalance timeout and the client id/host.
    """
    sim = stable_pair()
    sim.coord.drain_records()
    group_epoch, target = sim.group.group_epoch, dict(sim.group.target)
    resp = sim.beat("m1", **fields)
    assert resp.error_code == OK
    assert sim.group.group_epoch == group_epoch and sim.group.target == target
    assert sim.group.state.value == "STABLE"
    records = sim.coord.drain_records()
    assert [r.member_id for r in records] == ["m1"]
    metadata = sim.group.members["m1"].metadata
    for name, value in fields.items():
        assert getattr(metadata, name) == value


def test_config_offset_reported_by_a_member_raises_the_assignment_offset() -> None:
    sim = stable_pair()
    sim.beat("m1", config_offset=42)
    assert sim.group.assignment_config_offset() == 42
    sim.join("m3")  # the next assignment carries it
    resp = sim.beat("m2", ack=True)
    assert resp.assignment is not None and resp.assignment.config_offset == 42


# ============================================================================ timeouts


def test_session_expires_exactly_session_timeout_after_the_last_heartbeat() -> None:
    sim = stable_pair(session=10_000)
    sim.now = 5_000
    sim.beat("m1")
    sim.beat("m2")
    sim.now = 9_000
    sim.beat("m2")
    assert sim.coord.next_deadline() == 15_000
    group_epoch = sim.group.group_epoch
    sim.advance(14_999)
    assert set(sim.group.members) == {"m1", "m2"}
    sim.advance(15_000)
    assert set(sim.group.members) == {"m2"} and sim.group.group_epoch == group_epoch + 1
    assert sim.coord.next_deadline() == 19_000
    assert sim.coord.connect_heartbeat(HeartbeatRequest(G, "m1", sim.epoch["m1"]), 15_000).error_code == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )


def test_member_stuck_revoking_past_its_rebalance_timeout_is_removed() -> None:
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("m1", rebalance=20_000)
    sim.settle()
    sim.now = 1_000
    sim.join("m2")
    sim.now = 2_000
    resp = sim.beat("m1")  # told to revoke; the revocation timer starts now
    assert sim.group.members["m1"].current.state is MemberState.UNREVOKED
    assert resp.assignment.items < ALL
    assert sim.coord.next_deadline() == 22_000
    # Heartbeats without acknowledging keep the session alive but do not extend the revocation.
    for t in (10_000, 21_000):
        sim.now = t
        assert sim.beat("m1").error_code == OK
    sim.advance(21_999)
    assert "m1" in sim.group.members
    group_epoch = sim.group.group_epoch
    m1_owned = sim.group.members["m1"].current.owned
    sim.advance(22_000)
    assert "m1" not in sim.group.members and sim.group.group_epoch == group_epoch + 1
    # m1 may still be stopping what it was told to revoke, and has shown that stopping takes it long:
    # held for revocation_timeout_hold_ms (longer than the zombie grace), then dealt.
    [held] = sim.group.metadata.held
    assert held.items == m1_owned and held.deadline_ms == 22_000 + revocation_timeout_hold_ms(
        NO_SESSION_EXPIRY
    )
    assert revocation_timeout_hold_ms(NO_SESSION_EXPIRY) > zombie_grace_ms(NO_SESSION_EXPIRY)
    sim.settle()
    assert not sim.running["m2"] & m1_owned
    sim.advance(held.deadline_ms)
    sim.settle()
    assert sim.running["m2"] == ALL


def test_acknowledged_revocation_cancels_the_rebalance_timer() -> None:
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("m1", rebalance=20_000)
    sim.settle()
    sim.join("m2")
    sim.beat("m1")
    assert sim.coord.next_deadline() == 20_000
    sim.beat("m1", ack=True)
    assert sim.group.members["m1"].current.state is not MemberState.UNREVOKED
    sim.advance(25_000)
    assert set(sim.group.members) == {"m1", "m2"}


# ============================================================================ group states and describe


def test_group_states_through_a_client_side_assignment_and_describe() -> None:
    sim = Sim()
    described = sim.coord.describe(G)
    assert (described.state, described.group_epoch, described.assignment_epoch) == ("EMPTY", 1, 1)
    assert described.group_type == "connect" and described.members == ()

    # The first member joins: the group epoch moves ahead of the assignment epoch, the member computes.
    resp = sim.join("m1", client=(CA,), url="http://m1:8083/")
    assert resp.error_code == COMPUTE
    described = sim.coord.describe(G)
    assert (described.state, described.group_epoch, described.assignment_epoch) == ("ASSIGNING", 2, 1)
    assert described.assignor == ICA

    # Installed: the member still has to move to the new epoch.
    sim.compute("m1")
    assert sim.coord.describe(G).state == "RECONCILING"
    # (It joined against the previous, empty target, so it sits at that epoch, 1, with nothing.)
    assert sim.coord.describe(G).members[0].member_epoch == 1

    resp = sim.beat("m1", ack=True)
    assert resp.error_code == OK and resp.member_epoch == 2 and resp.assignment.items == ALL
    described = sim.coord.describe(G)
    assert described.state == "STABLE"
    assert described.group_id == G and described.error_code == 0
    assert (described.group_epoch, described.assignment_epoch) == (2, 2)
    assert (described.leader_id, described.leader_url) == ("m1", "http://m1:8083/")
    assert described.config_offset == 10
    (member,) = described.members
    assert member.member_id == "m1" and member.member_epoch == 2 and member.state == "STABLE"
    assert member.url == "http://m1:8083/" and member.config_offset == 10 and member.instance_id is None
    assert (member.current, member.revoking, member.target) == (ALL, EMPTY, ALL)


def test_describe_shows_revoking_and_target_during_reconciliation() -> None:
    sim = Sim()
    sim.join("m1", instance="i1")
    sim.settle()
    sim.join("m2")
    sim.beat("m1")  # revocation handed out, not yet acknowledged
    described = sim.coord.describe(G)
    assert described.state == "RECONCILING" and described.assignor == assignors.COOPERATIVE
    by_id = {m.member_id: m for m in described.members}
    m1, m2 = by_id["m1"], by_id["m2"]
    assert m1.state == "UNREVOKED" and m1.instance_id == "i1"
    assert m1.current == sim.group.target["m1"] and m1.revoking == ALL - m1.current
    assert m1.member_epoch == described.group_epoch - 1
    assert m2.state == "UNRELEASED" and m2.current == EMPTY and m2.target == m1.revoking
    assert m2.member_epoch == described.group_epoch


def test_describe_unknown_group() -> None:
    described = GroupCoordinator().describe("nope")
    assert described.error_code == ErrorCode.GROUP_ID_NOT_FOUND and described.state == "DEAD"


def test_server_side_group_never_shows_assigning() -> None:
    """With a server-side assignor the target is computed in the same heartbeat that bumps the epoch."""
    sim = Sim()
    sim.join("m1")
    assert sim.group.state.value == "STABLE"
    sim.join("m2")
    assert sim.group.state.value == "RECONCILING"
    sim.settle()
    assert sim.group.state.value == "STABLE"


# ============================================================================ reconciliation


def test_work_moves_only_after_the_previous_owner_acknowledges() -> None:
    sim = Sim()
    sim.join("m1")
    sim.settle()
    sim.join("m2")
    moving = sim.group.target["m2"]
    assert moving and moving <= sim.running["m1"]
    # m2 is at the new epoch but gets nothing while m1 still owns the work.
    for _ in range(3):
        resp = sim.beat("m2", ack=True)
        assert sim.running["m2"] == EMPTY and (resp.assignment is None or resp.assignment.items == EMPTY)
    resp = sim.beat("m1")  # m1 is told to revoke: only the shrunk assignment, no epoch change
    assert resp.assignment.items == ALL - moving
    assert sim.beat("m2", ack=True).assignment is None  # still not released
    sim.beat("m1")  # a heartbeat without the owned list is no acknowledgement
    assert sim.group.members["m1"].current.state is MemberState.UNREVOKED
    assert sim.beat("m2", ack=True).assignment is None
    sim.beat("m1", owned=ALL)  # still running it: no acknowledgement either
    assert sim.group.members["m1"].current.state is MemberState.UNREVOKED
    sim.beat("m1", ack=True)  # acknowledged
    assert sim.group.members["m1"].current.state is MemberState.STABLE
    resp = sim.beat("m2", ack=True)
    assert resp.assignment.items == moving
    assert sim.group.state.value == "STABLE"


WORKERS = ("w1", "w2", "w3", "w4")
recon_ops = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.sampled_from(WORKERS)),
        st.tuples(st.just("beat"), st.sampled_from(WORKERS)),
        st.tuples(st.just("ack"), st.sampled_from(WORKERS)),
        st.tuples(st.just("lose"), st.sampled_from(WORKERS)),
        st.tuples(st.just("leave"), st.sampled_from(WORKERS)),
        st.tuples(
            st.just("config"),
            st.dictionaries(st.sampled_from("ABCD"), st.integers(0, 3), min_size=1, max_size=4),
        ),
    ),
    max_size=50,
)


class Tracker:
    """Workers that run what they were last told; checks every assignment the coordinator sends."""

    def __init__(self, delay: int) -> None:
        self.sim = Sim(delay=delay, session=NO_SESSION_EXPIRY)
        self.offset = 10
        self.running: dict[str, Items] = {}  # what each live worker runs (lost responses not applied)
        self.epoch: dict[str, int] = {}
        self.sent: dict[str, Items] = {}  # the last assignment the coordinator sent each member
        self.fenced: set[str] = set()  # fenced workers; like Java's, they rejoin (url = their own)

    def request(self, w: str, owned: Items | None, lose: bool = False) -> None:
        coord = self.sim.coord
        epoch = self.epoch.get(w, 0)
        if epoch == 0:
            req = HeartbeatRequest(G, w, 0, rebalance_timeout_ms=60_000, owned=EMPTY, url=f"http://{w}/")
            self.sent[w] = EMPTY  # a (re)joining worker has stopped everything
            self.running[w] = EMPTY
            self.fenced.discard(w)
        else:
            req = HeartbeatRequest(G, w, epoch, owned=owned)
        resp = coord.connect_heartbeat(req, 0)
        if resp.error_code in (int(ErrorCode.FENCED_MEMBER_EPOCH), int(ErrorCode.UNKNOWN_MEMBER_ID)):
            self.running.pop(w, None)
            self.epoch.pop(w, None)
            self.sent.pop(w, None)
            self.fenced.add(w)
            return
        assert resp.error_code == OK, resp.error_message
        if resp.assignment is not None:
            new, old = resp.assignment.items, self.sent.get(w, EMPTY)
            assert not (old - new and new - old), f"{w}: revoked {old - new} and assigned {new - old} at once"
            # Newly handed-out work is run by no other worker (its previous owner acknowledged).
            for other, running in self.running.items():
                if other != w:
                    assert not (new - old) & running, (
                        f"{w} given {(new - old) & running} still run by {other}"
                    )
            self.sent[w] = new
        if lose:
            return
        self.epoch[w] = resp.member_epoch
        if resp.assignment is not None:
            self.running[w] = resp.assignment.items

    def apply(self, op: tuple) -> None:
        kind, arg = op
        if kind == "join" and arg not in self.epoch:
            self.request(arg, EMPTY)
        elif kind in ("beat", "ack", "lose") and arg in self.epoch:
            owned = self.running.get(arg, EMPTY) if kind != "beat" else None
            self.request(arg, owned, lose=kind == "lose")
        elif kind == "leave" and arg in self.epoch:
            self.sim.coord.connect_heartbeat(HeartbeatRequest(G, arg, -1), 0)
            for d in (self.running, self.epoch, self.sent):
                d.pop(arg, None)
            self.fenced.discard(arg)
        elif kind == "config":
            self.offset += 1
            self.sim.coord.set_config(G, ConfigView.of(self.offset, arg), 0)

    def check(self) -> None:
        seen: dict[ConnectorTaskId, str] = {}
        for w, running in self.running.items():
            for i in running:
                assert i not in seen, f"{i} runs on {seen[i]} and {w}"
                seen[i] = w
        group = self.sim.group
        for w, running in self.running.items():
            if w in group.members:
                assert running <= group.members[w].current.owned


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=recon_ops, delay=st.sampled_from([0, 30_000]))
def test_a_heartbeat_never_both_revokes_and_assigns(ops: list[tuple], delay: int) -> None:
    t = Tracker(delay)
    for op in ops:
        t.apply(op)
        t.check()
    # Whatever happened, acknowledging heartbeats converge to the configured work, run exactly once
    # (a fenced worker rejoins and gets back the work held for it, found by hypothesis).
    for _ in range(8):
        for w in sorted(set(t.epoch) | t.fenced):
            t.request(w, t.running.get(w, EMPTY))
            t.check()
    if t.epoch and delay == 0:
        running = [i for items in t.running.values() for i in items]
        assert sorted(running) == sorted(t.sim.group.view.items())


def test_random_walk_never_both_revokes_and_assigns() -> None:
    """The same check on longer seeded random walks (deterministic)."""
    ops = ["join", "beat", "ack", "ack", "lose", "leave", "config"]
    for seed in range(20):
        rng = random.Random(seed)
        t = Tracker(delay=0)
        for _ in range(200):
            kind = rng.choice(ops)
            if kind == "config":
                arg = {c: rng.randint(0, 4) for c in rng.sample("ABCDE", rng.randint(1, 4))}
            else:
                arg = rng.choice(WORKERS)
            t.apply((kind, arg))
            t.check()


# ============================================================================ config view


def test_set_config_with_new_work_bumps_the_epoch_and_targets_exactly_the_configured_items() -> None:
    sim = stable_pair()
    group_epoch = sim.group.group_epoch
    view = ConfigView.of(11, {"A": 2, "B": 1, "C": 3})
    sim.coord.set_config(G, view, 0)
    assert sim.group.group_epoch == group_epoch + 1 == sim.group.assignment_epoch
    assert sim.target_union() == view.items()
    targets = [sim.group.target[m] for m in ("m1", "m2")]
    assert not targets[0] & targets[1]
    sim.settle()
    assert sim.running["m1"] | sim.running["m2"] == view.items()


def test_set_config_with_more_tasks_bumps_the_epoch() -> None:
    sim = stable_pair()
    group_epoch = sim.group.group_epoch
    view = ConfigView.of(11, {"A": 4, "B": 1})
    sim.coord.set_config(G, view, 0)
    assert sim.group.group_epoch == group_epoch + 1
    assert sim.target_union() == view.items()


def test_set_config_with_the_same_view_is_a_no_op() -> None:
    sim = stable_pair()
    before, _ = baseline(sim)
    sim.coord.set_config(G, VIEW, 0)
    assert sim.coord.snapshot() == before and sim.coord.drain_records() == []


def test_set_config_with_only_a_new_offset_still_bumps_the_epoch() -> None:
    """A newer config offset alone is a new view: the epoch moves so members get an assignment carrying it.

    The target does not change; members just move to the new epoch and learn the new offset.
    """
    sim = stable_pair()
    group_epoch, target = sim.group.group_epoch, dict(sim.group.target)
    sim.coord.set_config(G, ConfigView.of(20, {"A": 2, "B": 1}), 0)
    assert sim.group.group_epoch == group_epoch + 1 and sim.group.target == target
    resp = sim.beat("m1")
    assert resp.member_epoch == group_epoch + 1 and resp.assignment.config_offset == 20


def test_removing_a_connector_revokes_its_items() -> None:
    sim = stable_pair()
    sim.coord.set_config(G, ConfigView.of(11, {"A": 2}), 0)
    b_items = items("B", "B-0")
    assert not sim.target_union() & b_items
    owner = next(m for m in ("m1", "m2") if sim.running[m] & b_items)
    resp = sim.beat(owner)
    assert resp.assignment is not None and not resp.assignment.items & b_items
    assert sim.group.members[owner].current.revoking & b_items
    sim.settle()
    assert sim.running["m1"] | sim.running["m2"] == items("A", "A-0", "A-1")
    assert not any(m.current.owned & b_items for m in sim.group.members.values())


def test_assignment_config_offset_is_the_max_of_view_and_member_offsets() -> None:
    sim = Sim()
    sim.join("m1", config_offset=5)
    assert sim.group.assignment_config_offset() == 10  # the view's offset
    resp = sim.join("m2", config_offset=15)
    assert resp.assignment.config_offset == 15
    sim.beat("m1", config_offset=12)
    assert sim.group.assignment_config_offset() == 15
    sim.settle()
    sim.coord.set_config(G, ConfigView.of(30, {"A": 2, "B": 1}), 0)
    resp = sim.beat("m1")
    assert resp.assignment.config_offset == 30
    assert sim.coord.describe(G).config_offset == 30


# ============================================================================ client-side assignment


def ranged(lo: int, hi: int) -> tuple[ClientAssignor, ...]:
    return (ClientAssignor(ICA, lo, hi, 0, hi, b""),)


def test_compute_assignment_goes_to_the_member_covering_all_version_ranges() -> None:
    """Seed 000: A [1-5], B [3-4], C [2-4] -> A, even though B (the first member) leads."""
    sim = Sim()
    assert sim.join("B", client=ranged(3, 4)).error_code == COMPUTE
    sim.compute("B")
    sim.settle()
    # With B and C, C [2-4] covers B [3-4].
    assert sim.join("C", client=ranged(2, 4)).error_code == COMPUTE
    assert sim.group.client_side.member == "C"
    sim.compute("C")
    sim.settle()
    # A [1-5] covers everybody.
    resp = sim.join("A", client=ranged(1, 5))
    assert resp.error_code == COMPUTE and sim.group.client_side.member == "A"
    assert sim.group.metadata.leader_id == "B"
    for other in ("B", "C"):
        assert sim.beat(other).error_code == OK
        assert sim.prepare(other).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    sim.compute("A")
    sim.settle()
    # A later rebalance (a config change) again picks A.
    sim.coord.set_config(G, ConfigView.of(11, {"A": 3}), 0)
    assert sim.beat("B").error_code == OK
    assert sim.beat("A").error_code == COMPUTE


def test_leader_is_preferred_among_covering_members() -> None:
    sim = Sim()
    sim.join("m2", client=ranged(1, 3))
    sim.compute("m2")
    sim.join("m1", client=ranged(1, 3))
    assert sim.group.client_side.member == "m2"


def test_prepare_assignment_errors() -> None:
    sim = Sim()
    sim.join("m1", client=(CA,))
    sim.join("m2", client=(CA,))
    assert sim.group.client_side.member == "m1"
    coord = sim.coord
    unknown_group = coord.prepare_assignment(PrepareAssignmentRequest("nope", "m1", 0), 0)
    assert unknown_group.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert coord.prepare_assignment(PrepareAssignmentRequest("", "m1", 0), 0).error_code == (
        ErrorCode.INVALID_REQUEST
    )
    assert sim.prepare("m1", epoch=-1).error_code == ErrorCode.INVALID_REQUEST
    assert (
        coord.prepare_assignment(PrepareAssignmentRequest(G, "", 0), 0).error_code
        == ErrorCode.INVALID_REQUEST
    )
    assert coord.prepare_assignment(PrepareAssignmentRequest(G, "ghost", 0), 0).error_code == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    assert sim.prepare("m2").error_code == ErrorCode.UNKNOWN_MEMBER_ID  # not the chosen one
    assert sim.prepare("m1", epoch=sim.epoch["m1"] + 1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert "m1" in sim.group.members  # a fenced prepare does not remove the member
    prepared = sim.prepare("m1")
    assert prepared.error_code == OK
    assert prepared.group_epoch == sim.group.group_epoch and prepared.assignor_name == ICA
    assert prepared.connectors == {"A": 2, "B": 1} and prepared.config_offset == 10
    assert [m.member_id for m in prepared.members] == ["m1", "m2"]
    assert all(m.assignor == CA for m in prepared.members)


def client_pair() -> tuple[Sim, PrepareAssignmentResponse]:
    """m1 and m2 with client assignors; m1 installed everything for itself, then m2 joined."""
    sim = Sim()
    sim.join("m1", client=(CA,))
    sim.install("m1", {"m1": ALL}, sim.prepare("m1").group_epoch)
    sim.join("m2", client=(CA,))
    assert sim.beat("m1", ack=True).error_code == COMPUTE
    prepared = sim.prepare("m1")
    assert prepared.error_code == OK
    return sim, prepared


INVALID_INSTALLS = {
    "item assigned twice": {"m1": ALL, "m2": items("A")},
    "item missing": {"m1": items("A", "A-0", "A-1"), "m2": items("B")},
    "unknown member": {"m1": items("A", "A-0", "A-1"), "m2": items("B"), "m9": items("B-0")},
    "unconfigured item": {"m1": items("A", "A-0", "A-1"), "m2": items("B", "B-0", "C")},
    "unconfigured task": {"m1": items("A", "A-0", "A-1", "A-2"), "m2": items("B", "B-0")},
}


@pytest.mark.parametrize("case", sorted(INVALID_INSTALLS))
def test_invalid_install_is_rejected_and_keeps_the_target(case: str) -> None:
    sim, prepared = client_pair()
    before, _ = baseline(sim)
    resp = sim.install("m1", INVALID_INSTALLS[case], prepared.group_epoch)
    assert resp.error_code == ErrorCode.INVALID_ASSIGNMENT, resp.error_message
    assert sim.coord.snapshot() == before and sim.coord.drain_records() == []
    # The prepared computation is still valid: a correct install goes through.
    good = {"m1": items("A", "A-0", "A-1"), "m2": items("B", "B-0")}
    assert sim.install("m1", good, prepared.group_epoch).error_code == OK
    assert sim.group.target == good and sim.group.assignment_epoch == prepared.group_epoch


def test_install_for_another_group_epoch_is_invalid() -> None:
    sim, prepared = client_pair()
    before, _ = baseline(sim)
    good = {"m1": items("A", "A-0", "A-1"), "m2": items("B", "B-0")}
    for epoch in (prepared.group_epoch - 1, prepared.group_epoch + 1):
        assert sim.install("m1", good, epoch).error_code == ErrorCode.INVALID_ASSIGNMENT
    assert sim.coord.snapshot() == before


def test_install_errors_before_validation() -> None:
    sim, prepared = client_pair()
    before, _ = baseline(sim)
    good = {"m1": items("A", "A-0", "A-1"), "m2": items("B", "B-0")}
    coord = sim.coord
    req = InstallAssignmentRequest("nope", "m1", sim.epoch["m1"], prepared.group_epoch, 0, good)
    assert coord.install_assignment(req, 0).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert sim.install("m2", good, prepared.group_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert sim.install("m1", good, prepared.group_epoch, epoch=99).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert sim.install("m1", good, prepared.group_epoch, epoch=-1).error_code == ErrorCode.INVALID_REQUEST
    req = InstallAssignmentRequest(G, "ghost", 1, prepared.group_epoch, 0, good)
    assert coord.install_assignment(req, 0).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert sim.coord.snapshot() == before


def test_install_without_prepare_is_invalid() -> None:
    sim = Sim()
    sim.join("m1", client=(CA,))
    resp = sim.install("m1", {"m1": ALL}, sim.group.group_epoch)
    assert resp.error_code == ErrorCode.INVALID_ASSIGNMENT
    assert sim.group.assignment_epoch < sim.group.group_epoch


def test_install_with_error_keeps_the_current_target() -> None:
    sim, prepared = client_pair()
    old_target = dict(sim.group.target)
    assert old_target == {"m1": ALL}
    resp = sim.install("m1", {}, prepared.group_epoch, error=1)
    assert resp.error_code == OK
    assert sim.group.target == {"m1": ALL, "m2": EMPTY}
    assert sim.group.assignment_epoch == prepared.group_epoch and sim.group.target_metadata.error == 1
    assert sim.group.client_side.member is None


def test_only_one_assignment_computation_in_flight() -> None:
    sim = Sim()
    sim.join("m1", client=(CA,))
    prepared = sim.prepare("m1")
    assert prepared.error_code == OK
    # m2 joins during the computation: m1 keeps computing, nobody else is asked.
    assert sim.join("m2", client=(CA,)).error_code == OK
    assert sim.group.client_side.member == "m1"
    assert sim.prepare("m2").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # The assignment for the older epoch installs (validated against what it was computed from)...
    assert sim.install("m1", {"m1": ALL}, prepared.group_epoch).error_code == OK
    assert sim.group.assignment_epoch == prepared.group_epoch < sim.group.group_epoch
    assert sim.group.target == {"m1": ALL, "m2": EMPTY}
    # ...and a new computation starts at once for the newer epoch.
    assert sim.beat("m2").error_code == OK
    assert sim.beat("m1").error_code == COMPUTE
    sim.compute("m1")
    sim.settle()
    assert sim.running["m1"] | sim.running["m2"] == ALL and sim.running["m2"]


def test_chosen_member_timing_out_is_replaced() -> None:
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("m1", client=(CA,), rebalance=20_000)  # notified at 0
    sim.now = 1_000
    sim.join("m2", client=(CA,))
    assert sim.group.client_side.member == "m1"
    assert sim.coord.next_deadline() == 20_000
    sim.advance(19_999)
    assert sim.group.client_side.member == "m1"
    sim.advance(20_000)
    assert sim.group.client_side.member == "m2"
    assert sim.beat("m1").error_code == OK
    assert sim.prepare("m1").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # Chosen but not yet told: m2 may not prepare before its heartbeat says COMPUTE_ASSIGNMENT.
    assert sim.prepare("m2").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert sim.beat("m2").error_code == COMPUTE
    sim.compute("m2")
    sim.settle()
    assert sim.running["m1"] | sim.running["m2"] == ALL


def test_computing_member_leaving_hands_the_computation_over() -> None:
    sim = Sim()
    sim.join("m1", client=(CA,))
    sim.join("m2", client=(CA,))
    sim.leave("m1")
    assert sim.group.client_side.member == "m2"
    assert sim.beat("m2").error_code == COMPUTE


# ---------------------------------------------------------------- the choice follows the membership


def test_a_join_the_chosen_member_cannot_cover_moves_the_computation() -> None:
    """m1 [1-2] was told to compute; m2 [1-5] joins: only m2 covers everyone now, so m2 computes."""
    sim = Sim()
    assert sim.join("m1", client=ranged(1, 2)).error_code == COMPUTE
    assert sim.join("m2", client=ranged(1, 5)).error_code == COMPUTE
    assert sim.group.client_side.member == "m2"
    assert sim.beat("m1").error_code == OK
    assert sim.prepare("m1").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    sim.compute("m2")
    sim.settle()
    assert sim.running["m1"] | sim.running["m2"] == ALL


def test_a_superseded_computation_is_an_invalid_assignment() -> None:
    """m1 was mid-computation when m2 [1-5] joined and took over: m1's install is stale."""
    sim = Sim()
    sim.join("m1", client=ranged(1, 2))
    prepared = sim.prepare("m1")
    assert prepared.error_code == OK
    sim.join("m2", client=ranged(1, 5))
    before, deadline = baseline(sim)
    resp = sim.install("m1", {"m1": ALL}, prepared.group_epoch)
    assert resp.error_code == ErrorCode.INVALID_ASSIGNMENT, resp.error_message
    assert_untouched(sim, before, deadline)
    assert sim.beat("m2").error_code == COMPUTE
    sim.compute("m2")
    sim.settle()
    assert sim.running["m1"] | sim.running["m2"] == ALL


def test_an_assignor_update_the_chosen_member_cannot_cover_moves_the_computation() -> None:
    sim = Sim()
    assert sim.join("m1", client=ranged(1, 3)).error_code == COMPUTE
    sim.join("m2", client=ranged(1, 3))
    assert sim.group.client_side.member == "m1"  # told first, still covers m2: it keeps computing
    resp = sim.beat("m2", client_assignors=ranged(1, 4))
    assert resp.error_code == COMPUTE and sim.group.client_side.member == "m2"
    assert sim.beat("m1").error_code == OK


def test_a_not_yet_told_choice_follows_the_rule() -> None:
    """A choice nobody has been told about yet is simply redone; a timed-out member stays passed over."""
    sim = Sim(session=NO_SESSION_EXPIRY)
    assert sim.join("m2", client=ranged(1, 3), rebalance=1_000).error_code == COMPUTE
    sim.join("m4", client=ranged(1, 3))
    sim.advance(1_000)  # m2 (the leader) did not compute in time
    assert sim.group.client_side.member == "m4"
    # m4 has not been told yet; m3 joins and covers everyone too. The leader m2 timed out, so the
    # lowest other id computes.
    assert sim.join("m3", client=ranged(1, 3)).error_code == COMPUTE
    assert sim.group.client_side.member == "m3"
    assert sim.beat("m4").error_code == OK
    assert sim.beat("m2").error_code == OK
    sim.compute("m3")
    sim.settle()
    assert sim.running["m2"] | sim.running["m3"] | sim.running["m4"] == ALL


def test_chosen_static_member_leaving_temporarily_hands_the_computation_over() -> None:
    sim = Sim(session=NO_SESSION_EXPIRY)
    assert sim.join("m1", instance="i1", client=(CA,)).error_code == COMPUTE
    sim.join("m2", client=(CA,))
    assert sim.leave("m1", epoch=-2, instance="i1").error_code == OK
    assert sim.group.client_side.member == "m2"
    assert sim.beat("m2").error_code == COMPUTE
    sim.compute("m2")
    # m1 comes back: m2 computes for it too.
    sim.join("m1", instance="i1", client=(CA,))
    sim.settle()
    assert sim.running["m1"] | sim.running["m2"] == ALL


def test_install_older_than_the_installed_target_is_invalid() -> None:
    sim = Sim()
    sim.join("m1", client=(CA,))
    prepared = sim.prepare("m1")
    # m2 has no client-side assignor: the server-side one takes over and installs a newer target.
    sim.join("m2")
    assert sim.group.assignment_epoch == sim.group.group_epoch > prepared.group_epoch
    before, deadline = baseline(sim)
    resp = sim.install("m1", {"m1": ALL}, prepared.group_epoch)
    assert resp.error_code == ErrorCode.INVALID_ASSIGNMENT
    assert_untouched(sim, before, deadline)


# ---------------------------------------------------------------- no member covers everyone


def test_a_join_leaving_no_member_covering_every_range_is_unsupported() -> None:
    """[1-3] and [2-5] overlap, but neither covers the other: seed 000's fatal error, not a pick."""
    sim = Sim()
    sim.join("m1", client=ranged(1, 3))
    sim.compute("m1")
    sim.settle()
    before, deadline = baseline(sim)
    resp = sim.join("m2", client=ranged(2, 5))
    assert resp.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert "m1 [1-3]" in resp.error_message and "[2-5]" in resp.error_message
    assert_untouched(sim, before, deadline)
    # The same for a member changing its range.
    sim.join("m2", client=ranged(1, 2))
    sim.settle()
    before, deadline = baseline(sim)
    assert sim.beat("m2", client_assignors=ranged(2, 5)).error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert_untouched(sim, before, deadline)


def test_a_group_losing_its_only_covering_member_answers_unsupported_assignor() -> None:
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("A", client=ranged(1, 5))
    sim.join("B", client=ranged(1, 3))
    sim.join("C", client=ranged(3, 5))
    sim.settle()
    sim.leave("A")
    assert sim.group.client_side.member is None  # nobody can compute for everyone
    for mid in ("B", "C"):
        before, deadline = baseline(sim)
        resp = sim.beat(mid, ack=True)
        assert resp.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR, resp
        assert_untouched(sim, before, deadline)
        assert sim.prepare(mid).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # A heartbeat that restores a covering member is accepted, and that member computes.
    resp = sim.beat("B", client_assignors=ranged(1, 5))
    assert resp.error_code == COMPUTE and sim.group.client_side.member == "B"
    sim.compute("B")
    sim.settle()
    assert sim.running["B"] | sim.running["C"] == ALL


# ---------------------------------------------------------------- assignor metadata and error


def _install_with_metadata(sim: Sim) -> dict[str, AssignedMetadata]:
    prepared = sim.prepare("m1")
    assert prepared.error_code == OK
    targets = {"m1": items("A", "A-0", "A-1"), "m2": items("B", "B-0")}
    data = {"m1": AssignedMetadata(2, b"m1-data"), "m2": AssignedMetadata(3, b"m2-data")}
    req = InstallAssignmentRequest(G, "m1", sim.epoch["m1"], prepared.group_epoch, 0, targets, data)
    assert sim.coord.install_assignment(req, sim.now).error_code == OK
    return data


def test_install_metadata_reaches_each_member_and_replays() -> None:
    sim = Sim()
    sim.join("m1", client=(CA,))
    sim.join("m2", client=(CA,))
    data = _install_with_metadata(sim)
    for mid in ("m1", "m2"):
        a = sim.beat(mid, ack=True).assignment
        assert a is not None and a.error == 0
        assert AssignedMetadata(a.metadata_version, a.metadata) == data[mid]
    sim.settle()
    # Persisted with the target: a replayed coordinator hands out the same metadata.
    records = [Record(RecordType.CONFIG, G, "", VIEW), *sim.coord.drain_records()]
    compacted = {}
    for record in records:
        key, value = encode_record(record)
        compacted[key] = decode_record(key, value)
    replayed = GroupCoordinator(sim.coord.config)
    replayed.replay([r for r in compacted.values() if not r.is_tombstone], sim.now)
    assert replayed.snapshot() == sim.coord.snapshot()
    group = replayed.groups[G]
    a = group.assignment_for(group.members["m2"])
    assert (a.metadata_version, a.metadata) == (3, b"m2-data")


def test_install_error_reaches_each_member() -> None:
    sim = Sim()
    sim.join("m1", client=(CA,))
    sim.join("m2", client=(CA,))
    data = _install_with_metadata(sim)
    sim.settle()
    sim.coord.set_config(G, ConfigView.of(11, {"A": 2, "B": 1}), sim.now)
    assert sim.beat("m1").error_code == COMPUTE
    prepared = sim.prepare("m1")
    assert sim.install("m1", {}, prepared.group_epoch, error=4).error_code == OK
    for mid in ("m1", "m2"):
        a = sim.beat(mid, ack=True).assignment
        # The target (and the assignor's metadata with it) is kept; the error is the new one.
        assert a is not None and a.error == 4
        assert AssignedMetadata(a.metadata_version, a.metadata) == data[mid]


# ============================================================================ leader


def test_first_member_leads_and_the_lowest_id_succeeds_it() -> None:
    sim = Sim()
    resp = sim.join("w3", url="http://w3:8083/")
    assert resp.assignment.leader_id == "w3" and resp.assignment.leader_url == "http://w3:8083/"
    resp = sim.join("w1", url="http://w1:8083/")
    assert resp.assignment.leader_id == "w3" and resp.assignment.leader_url == "http://w3:8083/"
    sim.join("w2", url="http://w2:8083/")
    sim.settle()
    assert sim.group.metadata.leader_id == "w3"
    sim.leave("w3")
    assert sim.group.metadata.leader_id == "w1"
    described = sim.coord.describe(G)
    assert (described.leader_id, described.leader_url) == ("w1", "http://w1:8083/")
    resp = sim.beat("w2", ack=True)
    assert resp.assignment.leader_id == "w1" and resp.assignment.leader_url == "http://w1:8083/"
    # The leader's url moving changes the leader url handed out.
    sim.beat("w1", url="http://w1-new:8083/")
    assert sim.coord.describe(G).leader_url == "http://w1-new:8083/"


def test_leader_session_expiry_elects_the_lowest_remaining_id() -> None:
    sim = Sim(session=10_000)
    for mid in ("b", "c", "a"):
        sim.join(mid)
    sim.now = 5_000
    for mid in ("c", "a"):
        sim.beat(mid)
    sim.advance(10_000)
    assert set(sim.group.members) == {"a", "c"} and sim.group.metadata.leader_id == "a"


def test_new_member_leads_an_emptied_group() -> None:
    sim = Sim()
    sim.join("m1")
    sim.leave("m1")
    assert sim.group.metadata.leader_id == ""
    assert sim.join("m2").assignment.leader_id == "m2"


# ============================================================================ what an answer tells a worker
# A Java herder resolves a rebalance only from an Assignment: it needs the leader and the config offset
# as much as its work, and asks again (a full heartbeat) whenever its config offset is not the
# assignment's. So the Assignment comes back whenever what it says changed for the member, not only its work.


def full_beat(sim: Sim, mid: str, *, config_offset: int = 10, url: str | None = None) -> HeartbeatResponse:
    """A full heartbeat at the member's epoch, as a worker sends after an error or a requestRejoin."""
    return sim.beat(
        mid,
        ack=True,
        rebalance_timeout_ms=60_000,
        url=url if url is not None else f"http://{mid}:8083/",
        config_offset=config_offset,
    )


def test_a_full_heartbeat_is_answered_with_the_assignment() -> None:
    sim = stable_pair()
    resp = full_beat(sim, "m1")
    assert resp.error_code == OK and resp.assignment is not None
    assert resp.assignment.items == sim.running["m1"] and resp.assignment.config_offset == 10
    # A partial one with nothing new stays steady.
    assert sim.beat("m1").assignment is None


def test_a_changed_config_offset_is_answered_with_the_assignment() -> None:
    """The herder's requestRejoin after reading more of the config topic: it waits for that answer."""
    sim = stable_pair()
    sim.coord.set_config(G, ConfigView.of(12, {"A": 2, "B": 1}), sim.now)
    sim.settle()
    resp = sim.beat("m1", config_offset=12)
    assert resp.assignment is not None and resp.assignment.config_offset == 12
    assert resp.assignment.error == OK and resp.assignment.items == sim.running["m1"]
    assert sim.beat("m1", config_offset=12).assignment is None  # the same offset again: nothing new


def test_members_ahead_of_the_config_view_get_config_mismatch_until_it_catches_up() -> None:
    """A worker at offset 11 while the view is at 10: work computed from the view must not start.

    Connect's leader answers CONFIG_MISMATCH to everyone then (``ensureLeaderConfig``), as the
    bridge's classic members get it; a new-protocol member gets it in ``Assignment.Error`` with its
    current work unchanged (the draft: an assignment error retains the current assignments).
    """
    sim = stable_pair()
    m1_work = sim.running["m1"]
    resp = sim.join("m3", config_offset=11)
    assert resp.assignment.error == legacy_members.CONFIG_MISMATCH and resp.assignment.config_offset == 11
    # Those already running hear it too: the assignment's offset moved beyond the view.
    resp = sim.beat("m1")
    assert resp.assignment is not None and resp.assignment.error == legacy_members.CONFIG_MISMATCH
    # (m3's join moved work: m1 is told to give some up, and nothing new.)
    assert resp.assignment.config_offset == 11 and resp.assignment.items <= m1_work
    # Asking again while the view is behind (the herder's full heartbeat) gets the same answer.
    assert full_beat(sim, "m1", config_offset=11).assignment.error == legacy_members.CONFIG_MISMATCH
    sim.coord.set_config(G, ConfigView.of(11, {"A": 2, "B": 1}), sim.now)
    for mid in ("m1", "m2", "m3"):
        resp = sim.beat(mid, ack=True)
        assert resp.assignment is not None and resp.assignment.error == OK, mid
        assert resp.assignment.config_offset == 11


def test_a_static_takeover_of_the_leader_is_pushed_to_the_others() -> None:
    """Same url, same instance: no rebalance, but the leader's member id changed."""
    sim = Sim(session=NO_SESSION_EXPIRY)
    sim.join("s1", instance="i1", url="http://s1:8083/")
    sim.join("m2")
    sim.settle()
    sim.leave("s1", epoch=-2, instance="i1")
    sim.join("s1-bis", instance="i1", url="http://s1:8083/")
    assert sim.group.metadata.leader_id == "s1-bis"
    resp = sim.beat("m2")
    assert resp.assignment is not None and resp.assignment.leader_id == "s1-bis"
    assert resp.assignment.items == sim.running["m2"]
    assert sim.beat("m2").assignment is None  # told once


def test_a_new_leader_is_pushed_before_the_client_side_target_moves() -> None:
    """The leader left a client-side group: the others learn who leads now, not at the next install."""
    sim = Sim(session=NO_SESSION_EXPIRY)
    for mid in ("m1", "m2", "m3"):
        if sim.join(mid, client=(CA,)).error_code == COMPUTE:
            sim.compute(mid)
    sim.settle()
    assert sim.group.metadata.leader_id == "m1"
    sim.leave("m1")
    assert sim.group.group_epoch > sim.group.assignment_epoch  # nobody computed yet
    for mid in ("m2", "m3"):
        resp = sim.beat(mid)
        assert resp.assignment is not None, mid
        assert (resp.assignment.leader_id, resp.assignment.leader_url) == ("m2", "http://m2:8083/")


@pytest.mark.parametrize(
    "field, value",
    [
        ("owned", frozenset()),
        ("client_assignors", ()),
        ("server_assignor", "connect-cooperative"),
        ("url", "http://w:8083/"),
        ("config_offset", 3),
        ("instance_id", "i-1"),
        ("rebalance_timeout_ms", 60_000),
    ],
)
def test_a_heartbeat_reports_nothing_only_without_every_optional_field(field: str, value: object) -> None:
    """The one predicate behind the group's steady path and the server's fast-path cache."""
    from dataclasses import replace as with_field

    partial = HeartbeatRequest("g", "m", 3)
    assert partial.reports_nothing
    assert not with_field(partial, **{field: value}).reports_nothing

"""Connect's leader assignors on KIP-415's scenarios, checked against the Java algorithm's outputs.

The expected values come from stepping through Apache Kafka's ``IncrementalCooperativeAssignor`` /
``EagerAssignor`` by hand (connectors and tasks sorted; workers with equal load ordered by id;
load-balancing revocations taken from the front of a worker's list). KIP-415's prose examples use an
older revocation heuristic, so for those we check the properties the KIP states (who gets a delay,
who gets the work back, two-phase movement) rather than its literal lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from connect_bridge.codecs.connect_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    payload_version,
)
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.model import ConfigView
from connect_bridge.workers.connect_assignors import (
    CONFIG_MISMATCH,
    EagerAssignor,
    IncrementalCooperativeAssignor,
    revoking_backoff_ms,
)

MAX_DELAY = 300_000
CONFIG = (5, {"A": 2, "B": 1})  # KIP-415's cluster: AC0, AT1, AT2, BC0, BT1 (tasks are 0-based here)


def ids(*names: str) -> frozenset[ConnectorTaskId]:
    """``"A"`` is connector A's instance, ``"A-1"`` its task 1."""
    out = set()
    for name in names:
        connector, _, task = name.partition("-")
        out.add(ConnectorTaskId(connector, int(task) if task else -1))
    return frozenset(out)


ALL = ids("A", "A-0", "A-1", "B", "B-0")


class Cluster:
    """The workers' side of the protocol: each keeps previous - revoked + delta and reports it."""

    def __init__(self, assignor: IncrementalCooperativeAssignor, config=CONFIG) -> None:
        self.assignor = assignor
        self.config = config
        self.owned: dict[str, list[ConnectorTaskId]] = {}
        self.generation = 0

    def sub(self, worker: str, offset: int | None = None) -> Subscription:
        owned = self.owned.get(worker)
        allocation = None if owned is None else Assignment.build(0, "W1", "http://W1", 5, owned)
        return Subscription(f"http://{worker}", self.config[0] if offset is None else offset, allocation)

    def round(self, workers: Iterable[str], now_ms: int, leader: str = "W1", **kw) -> dict[str, Assignment]:
        self.generation += 1
        members = {w: self.sub(w) for w in workers}
        result = self.assignor.assign(members, leader, None, self.config, self.generation, now_ms, **kw)
        for worker, asg in result.items():
            revoked = set(asg.revoked_items)
            kept = [i for i in self.owned.get(worker, []) if i not in revoked]
            self.owned[worker] = kept + list(asg.items)
        return result

    def full(self, worker: str) -> frozenset[ConnectorTaskId]:
        return frozenset(self.owned.get(worker, ()))

    def leave(self, worker: str) -> None:
        self.owned.pop(worker, None)


def assigned(result: Mapping[str, Assignment], worker: str) -> frozenset[ConnectorTaskId]:
    return frozenset(result[worker].items)


def revoked(result: Mapping[str, Assignment], worker: str) -> frozenset[ConnectorTaskId]:
    return frozenset(result[worker].revoked_items)


def assert_balanced(cluster: Cluster, workers: Iterable[str]) -> None:
    workers = list(workers)
    everything = [i for w in workers for i in cluster.full(w)]
    assert sorted(everything) == sorted(ALL), "every configured item exactly once"
    for is_connector in (True, False):
        counts = [sum(1 for i in cluster.full(w) if i.is_connector == is_connector) for w in workers]
        assert max(counts) - min(counts) <= 1


def assert_two_phase(result: Mapping[str, Assignment]) -> None:
    """Nothing is revoked from one worker and assigned to another in the same round."""
    all_revoked = set().union(*(revoked(result, w) for w in result))
    all_assigned = set().union(*(assigned(result, w) for w in result))
    assert not all_revoked & all_assigned


@pytest.fixture
def cluster() -> Cluster:
    return Cluster(IncrementalCooperativeAssignor(MAX_DELAY))


def settled_three(cluster: Cluster) -> None:
    """W1 joins alone, then W2 and W3 join: the group ends balanced over three workers."""
    cluster.round(["W1"], 0)
    cluster.round(["W1", "W2", "W3"], 10)
    cluster.round(["W1", "W2", "W3"], 20)


# ---------------------------------------------------------------------------------------------------
# Eager
# ---------------------------------------------------------------------------------------------------


def test_eager_round_robin_exact_output() -> None:
    members = {m: Subscription(f"http://{m}", 7) for m in ("w3", "w1", "w2")}
    result = EagerAssignor().assign(members, "w2", None, (7, {"b": 2, "a": 3, "c": 0}))
    # connectors a, b, c over w1, w2, w3; then a-0 a-1 a-2 b-0 b-1 continue the same deal from w1.
    assert {m: frozenset(a.items) for m, a in result.items()} == {
        "w1": ids("a", "a-0", "b-0"),
        "w2": ids("b", "a-1", "b-1"),
        "w3": ids("c", "a-2"),
    }
    # Java's writer puts each connector's own group first: b's group carries -1 and b-1, then a-1.
    assert [str(i) for i in result["w2"].items] == ["b", "b-1", "a-1"]
    for asg in result.values():
        assert (asg.error, asg.leader, asg.leader_url, asg.config_offset) == (0, "w2", "http://w2", 7)
        assert asg.revoked_items == () and asg.delay_ms == 0


def test_eager_assignment_encodes_at_v0_and_decodes_back() -> None:
    members = {"w1": Subscription("http://w1", 3)}
    asg = EagerAssignor().assign(members, "w1", None, (3, {"a": 1}))["w1"]
    data = encode_assignment(asg, 0)
    assert payload_version(data) == 0
    back = decode_assignment(data)
    assert set(back.items) == ids("a", "a-0")
    assert (back.leader, back.leader_url, back.config_offset) == ("w1", "http://w1", 3)


def test_eager_config_mismatch_gives_everyone_the_error_and_the_max_offset() -> None:
    members = {"w1": Subscription("http://w1", 4), "w2": Subscription("http://w2", 9)}
    result = EagerAssignor().assign(members, "w1", None, (4, {"a": 1}))
    for asg in result.values():
        assert (asg.error, asg.config_offset, asg.items) == (CONFIG_MISMATCH, 9, ())
        assert (asg.leader, asg.leader_url) == ("w1", "http://w1")


def test_eager_leader_catches_up_with_a_fresh_snapshot() -> None:
    members = {"w1": Subscription("http://w1", 4), "w2": Subscription("http://w2", 9)}
    result = EagerAssignor().assign(
        members, "w1", None, (4, {"a": 1}), refresh_config=lambda: (11, {"a": 1, "b": 0})
    )
    # Java stamps the fresh snapshot's offset (11), not the members' maximum (9).
    assert {a.error for a in result.values()} == {0}
    assert {a.config_offset for a in result.values()} == {11}


# ---------------------------------------------------------------------------------------------------
# Incremental cooperative: KIP-415 scenarios
# ---------------------------------------------------------------------------------------------------


def test_first_worker_gets_everything(cluster: Cluster) -> None:
    result = cluster.round(["W1"], 0)
    assert assigned(result, "W1") == ALL
    assert revoked(result, "W1") == frozenset()
    asg = result["W1"]
    assert (asg.error, asg.leader, asg.leader_url, asg.config_offset, asg.delay_ms) == (
        0,
        "W1",
        "http://W1",
        5,
        0,
    )


def test_joining_workers_revoke_then_assign_next_round(cluster: Cluster) -> None:
    cluster.round(["W1"], 0)
    first = cluster.round(["W1", "W2", "W3"], 10)
    # Round N: only revocations, taken from the front of W1's list; nothing handed out yet.
    assert revoked(first, "W1") == ids("A", "A-0", "A-1")
    assert all(not assigned(first, w) for w in first)
    assert all(a.delay_ms == 0 for a in first.values())
    assert_two_phase(first)

    second = cluster.round(["W1", "W2", "W3"], 20)
    # Round N+1: the freed work counts as new and goes to the least-loaded workers.
    assert assigned(second, "W1") == frozenset()
    assert assigned(second, "W2") == ids("A", "A-0")
    assert assigned(second, "W3") == ids("A-1")
    assert all(not revoked(second, w) for w in second)
    assert_balanced(cluster, ["W1", "W2", "W3"])
    assert cluster.assignor.revoked_in_previous is False


def test_worker_leaves_lost_work_is_held_for_the_delay_then_reassigned(cluster: Cluster) -> None:
    settled_three(cluster)
    w2_work = cluster.full("W2")
    cluster.leave("W2")

    held = cluster.round(["W1", "W3"], 1_000)
    assert {a.delay_ms for a in held.values()} == {MAX_DELAY}
    assert all(not assigned(held, w) and not revoked(held, w) for w in held)
    assert cluster.assignor.scheduled_rebalance_ms == 1_000 + MAX_DELAY

    again = cluster.round(["W1", "W3"], 100_000)  # an early rejoin: the remaining delay
    assert {a.delay_ms for a in again.values()} == {MAX_DELAY - 99_000}

    after = cluster.round(["W1", "W3"], 1_000 + MAX_DELAY)
    assert {a.delay_ms for a in after.values()} == {0}
    assert assigned(after, "W1") | assigned(after, "W3") == w2_work
    assert_balanced(cluster, ["W1", "W3"])


def test_worker_bounces_within_the_delay_and_gets_the_work_back(cluster: Cluster) -> None:
    settled_three(cluster)
    w2_work = cluster.full("W2")
    cluster.leave("W2")
    cluster.round(["W1", "W3"], 1_000)

    back = cluster.round(["W1", "W2'", "W3"], 61_000)  # W2 returns with a new member id
    assert {a.delay_ms for a in back.values()} == {MAX_DELAY - 60_000}  # d' = the remaining delay
    assert all(not assigned(back, w) for w in back)
    assert "W2'" in cluster.assignor.candidate_workers

    expired = cluster.round(["W1", "W2'", "W3"], 1_000 + MAX_DELAY)
    assert assigned(expired, "W2'") == w2_work  # candidates get the lost work, round-robin
    assert {a.delay_ms for a in expired.values()} == {0}
    assert_balanced(cluster, ["W1", "W2'", "W3"])
    assert not cluster.assignor.candidate_workers


def test_leader_leaves_without_a_delay_new_leader_assigns_at_once(cluster: Cluster) -> None:
    settled_three(cluster)
    w1_work = cluster.full("W1")
    cluster.leave("W1")
    # The new leader (W3) has its own, empty assignor state: unaccounted work is simply new.
    cluster.assignor = IncrementalCooperativeAssignor(MAX_DELAY)
    result = cluster.round(["W2", "W3"], 1_000, leader="W3")
    assert {a.delay_ms for a in result.values()} == {0}
    assert assigned(result, "W2") | assigned(result, "W3") == w1_work
    assert {a.leader for a in result.values()} == {"W3"}
    assert_balanced(cluster, ["W2", "W3"])


def test_max_delay_zero_reassigns_lost_work_immediately() -> None:
    cluster = Cluster(IncrementalCooperativeAssignor(0))
    settled_three(cluster)
    w2_work = cluster.full("W2")
    cluster.leave("W2")
    result = cluster.round(["W1", "W3"], 1_000)
    assert {a.delay_ms for a in result.values()} == {0}
    assert assigned(result, "W1") | assigned(result, "W3") == w2_work


def test_incremental_config_mismatch_leaves_the_assignor_state_alone(cluster: Cluster) -> None:
    cluster.round(["W1"], 0)
    before = (cluster.assignor.previous_generation, dict(cluster.assignor.previous_assignment.tasks))
    members = {"W1": cluster.sub("W1"), "W2": cluster.sub("W2", offset=8)}
    result = cluster.assignor.assign(members, "W1", None, CONFIG, 2, 10)
    for asg in result.values():
        assert (asg.error, asg.config_offset, asg.items, asg.revoked_items, asg.delay_ms) == (
            CONFIG_MISMATCH,
            8,
            (),
            (),
            0,
        )
    assert (cluster.assignor.previous_generation, dict(cluster.assignor.previous_assignment.tasks)) == before


def test_deleted_connector_is_revoked_and_not_reassigned(cluster: Cluster) -> None:
    settled_three(cluster)
    cluster.config = (6, {"A": 2})
    result = cluster.round(["W1", "W2", "W3"], 1_000)
    gone = ids("B", "B-0")
    assert set().union(*(revoked(result, w) for w in result)) == gone
    assert not set().union(*(assigned(result, w) for w in result)) & gone
    assert {a.config_offset for a in result.values()} == {6}


def test_duplicated_work_is_revoked_everywhere_then_assigned_once(cluster: Cluster) -> None:
    settled_three(cluster)
    owner = next(w for w in ("W1", "W2", "W3") if ConnectorTaskId("A", 1) in cluster.full(w))
    other = next(w for w in ("W1", "W2", "W3") if w != owner)
    cluster.owned[other].append(ConnectorTaskId("A", 1))  # a zombie copy
    dup = cluster.round(["W1", "W2", "W3"], 1_000)
    assert ids("A-1") <= revoked(dup, owner) and ids("A-1") <= revoked(dup, other)
    fixed = cluster.round(["W1", "W2", "W3"], 1_010)
    assert sum(ids("A-1") <= assigned(fixed, w) for w in fixed) == 1


def test_consecutive_revoking_rounds_back_off_exponentially(cluster: Cluster) -> None:
    cluster.round(["W1"], 0)
    cluster.round(["W1", "W2"], 10)  # revokes from W1 (first revoking round)
    skipped = cluster.round(["W1", "W2", "W3"], 20)  # would revoke again: backoff instead
    assert {a.delay_ms for a in skipped.values()} == {40}
    assert all(not revoked(skipped, w) for w in skipped)
    assert cluster.assignor.num_successive_revoking_rebalances == 1

    resumed = cluster.round(["W1", "W2", "W3"], 60)  # the backoff expired: revoke now
    assert {a.delay_ms for a in resumed.values()} == {0}
    assert any(revoked(resumed, w) for w in resumed)
    cluster.round(["W1", "W2", "W3"], 70)
    assert_balanced(cluster, ["W1", "W2", "W3"])


@pytest.mark.parametrize(
    ("attempts", "max_delay", "expected"),
    [
        (1, MAX_DELAY, 40),
        (2, MAX_DELAY, 1_600),
        (3, MAX_DELAY, 64_000),
        (4, MAX_DELAY, MAX_DELAY),
        (9, MAX_DELAY, MAX_DELAY),
        (1, 0, 0),
        (3, 0, 0),
        (2, 1_000, 999),
        (1, 1, 1),
        (1, 7, 6),
    ],
)
def test_revoking_backoff_matches_kafkas_exponential_backoff(
    attempts: int, max_delay: int, expected: int
) -> None:
    # Values printed by Kafka's ExponentialBackoff arithmetic under a JVM: note 999 (not 1000) and 6
    # (not 7): the capped exponent lands a hair below the cap and Java truncates.
    assert revoking_backoff_ms(attempts, max_delay) == expected


def test_generation_mismatch_forgets_the_previous_assignment(cluster: Cluster) -> None:
    settled_three(cluster)
    lost = cluster.full("W2")
    cluster.leave("W2")
    # The leader never completed the last generation: Java discards its view, nothing counts as lost.
    result = cluster.round(["W1", "W3"], 1_000, last_completed_generation=cluster.generation - 5)
    assert {a.delay_ms for a in result.values()} == {0}
    assert assigned(result, "W1") | assigned(result, "W3") == lost


def test_v1_and_v2_bytes_decode_to_the_same_delta(cluster: Cluster) -> None:
    cluster.round(["W1"], 0)
    result = cluster.round(["W1", "W2", "W3"], 10)
    v1 = encode_assignment(result["W1"], 1)
    v2 = encode_assignment(result["W1"], 2)
    assert (payload_version(v1), payload_version(v2)) == (1, 2)
    assert v1[2:] == v2[2:]  # v2 differs from v1 only in the header
    back = decode_assignment(v2)
    assert frozenset(back.revoked_items) == ids("A", "A-0", "A-1")
    assert back.items == () and back.delay_ms == 0 and back.leader == "W1"


def test_config_view_and_tuple_are_interchangeable() -> None:
    a, b = IncrementalCooperativeAssignor(), IncrementalCooperativeAssignor()
    members = {"W1": Subscription("http://W1", 5)}
    left = a.assign(members, "W1", None, CONFIG, 1, 0)
    right = b.assign(members, "W1", None, ConfigView.of(*CONFIG), 1, 0)
    assert left == right


def test_leader_view_records_who_runs_what(cluster: Cluster) -> None:
    settled_three(cluster)
    assert cluster.assignor.last_full_assignment == {w: cluster.full(w) for w in ("W1", "W2", "W3")}

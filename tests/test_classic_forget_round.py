"""The classic group that replaces an emptied connect group first makes each worker's Connect assignor
forget (``classic.join.forget_round``, docs/classic-group.md deviation 19).

In a connect group the bridge elects a legacy worker Connect leader in each of its JoinGroups and
ignores what its assignor sends back; the assignor still remembers it, work the bridge held for a
departed member dealt out. Leading the fresh classic group's first generation with that memory,
Connect's ``IncrementalCooperativeAssignor`` took the held work for lost and delayed it a second
scheduled delay (drill 97000291025209, ``tests/regressions/live-97000291025209.json``). Each
worker's first JoinGroup there is answered with a generation of its own that it leads and never
completes, above every generation of the connect group.
"""

from __future__ import annotations

from connect_bridge.codecs.connect_protocol import Assignment, Subscription
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic.group import ClassicGroup
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.workers.connect_assignors import IncrementalCooperativeAssignor
from test_migration import A0, A1, AC, VIEW, G, cjoin, connect, coordinator, csync, fs, nbeat, njoin

UNKNOWN = int(ErrorCode.UNKNOWN_MEMBER_ID)


T = 400_000
"""After the hold on the departed worker's work: the empty connect group converts at a JoinGroup."""


def emptied_connect_group() -> tuple[GroupCoordinator, int]:
    """A connect group whose only (new-protocol) worker left, its hold over by ``T``. Its epoch."""
    coord = coordinator()
    joined = njoin(coord, "", "http://n1/", now=0)
    assert joined.error_code == 0
    left = nbeat(coord, joined.member_id, -1, now=1_000)
    assert left.error_code == 0 and not connect(coord).members
    assert all(h.deadline_ms < T for h in connect(coord).metadata.held)
    return coord, connect(coord).group_epoch


def test_each_worker_first_leads_a_round_of_its_own_above_the_connect_groups_epochs() -> None:
    coord, epoch = emptied_connect_group()

    round_ = cjoin(coord, "", "http://w0/", fs(AC, A0), now=T + 0)
    assert round_ is not None and round_.error_code == 0
    assert round_.generation_id == epoch + 1  # above any generation w0 completed in the connect group
    assert round_.leader == round_.member_id and [m.member_id for m in round_.members] == [round_.member_id]
    assert round_.protocol_name == "sessioned"  # its first cooperative protocol: that assignor forgets
    assert (
        not isinstance(coord.groups.get(G), ClassicGroup) or round_.member_id not in coord.groups[G].members
    )
    synced = csync(coord, round_.member_id, round_.generation_id, now=T + 10)
    assert synced is not None and synced.error_code == UNKNOWN  # never completed: it rejoins, empty id

    # Its next JoinGroup is an ordinary one (MEMBER_ID_REQUIRED of JoinGroup v9), and so on.
    again = cjoin(coord, "", "http://w0/", fs(AC, A0), now=T + 20)
    assert again is not None and again.error_code == int(ErrorCode.MEMBER_ID_REQUIRED)
    assert cjoin(coord, again.member_id, "http://w0/", fs(AC, A0), now=T + 30) is None  # parked: join phase
    assert isinstance(coord.groups[G], ClassicGroup) and coord.groups[G].persisted

    # Another worker gets its own round, once, whoever leads: it may lead later generations.
    other = cjoin(coord, "", "http://w1/", now=T + 40)
    assert other is not None and (other.error_code, other.generation_id) == (0, epoch + 1)
    assert other.leader == other.member_id
    assert cjoin(coord, "", "http://w1/", now=T + 50).error_code == int(ErrorCode.MEMBER_ID_REQUIRED)


def test_a_worker_offering_only_eager_gets_no_round() -> None:
    """Connect's eager assignor remembers nothing."""
    coord, _ = emptied_connect_group()
    joined = cjoin(coord, "", "http://w0/", version=0, now=T + 0)
    assert joined is not None and joined.error_code == int(ErrorCode.MEMBER_ID_REQUIRED)


def test_a_static_workers_round_is_answered_unknown_member_not_fenced() -> None:
    """The round's SyncGroup names the instance id of the worker, whose member may be in the group by
    then (a second process with that id): FENCED_INSTANCE_ID would be fatal to a Java worker."""
    coord, epoch = emptied_connect_group()
    round_ = cjoin(coord, "", "http://w0/", now=T + 0, instance="i-w0")
    assert round_ is not None and (round_.error_code, round_.generation_id) == (0, epoch + 1)
    other = cjoin(coord, "", "http://w0-b/", now=T + 10, instance="i-w0")  # its own round, other url
    assert other is not None and other.generation_id == epoch + 1
    member = cjoin(coord, "", "http://w0-b/", now=T + 20, instance="i-w0")  # static: no MEMBER_ID_REQUIRED
    assert member is None or member.error_code == 0
    assert "i-w0" in coord.groups[G].static
    synced = csync(coord, round_.member_id, round_.generation_id, now=T + 30, instance="i-w0")
    assert synced is not None and synced.error_code == UNKNOWN


def test_no_round_after_the_classic_group_is_persisted_and_reloaded() -> None:
    """Soft state: after a bridge restart nobody gets a round (one more scheduled delay at worst)."""
    coord, _ = emptied_connect_group()
    round_ = cjoin(coord, "", "http://w0/", now=T + 0)
    assert round_ is not None and round_.error_code == 0
    assert cjoin(coord, "", "http://w0/", now=T + 10).error_code == int(ErrorCode.MEMBER_ID_REQUIRED)
    records = coord.drain_records()
    fresh = GroupCoordinator(coord.config)
    fresh.default_view = VIEW
    fresh.replay(records, T + 1_000)
    joined = cjoin(fresh, "", "http://w1/", now=T + 1010)
    assert joined is not None and joined.error_code == int(ErrorCode.MEMBER_ID_REQUIRED)


def test_the_round_makes_connects_assignor_deal_what_it_remembered_at_once() -> None:
    """What the round is for, on the reference model of Connect's assignor: a leader whose last
    completed generation is the one it computed takes what it remembers and nobody reports for lost
    and, a member it remembers being gone, delays it; after a round it never completed, it deals
    everything at once."""

    def subscriptions(**owned: frozenset) -> dict[str, Subscription]:
        return {
            w: Subscription(f"http://{w}/", 7, Assignment.build(0, "", "", 7, sorted(items), ()))
            for w, items in owned.items()
        }

    def elected_in_connect_group() -> IncrementalCooperativeAssignor:
        # Elected at epoch 16 on the bridge's ownership with w1 still a member; w1 then stops, the
        # bridge holds its work, w0 is cut off and stops its own.
        assignor = IncrementalCooperativeAssignor(60_000)
        assignor.assign(
            subscriptions(w0=fs(AC, A0), w1=fs(A1)),
            "w0",
            None,
            VIEW,
            16,
            100_000,
            60_000,
            last_completed_generation=15,
        )
        return assignor

    def first_classic_generation(assignor: IncrementalCooperativeAssignor) -> frozenset:
        # w0 alone, running nothing, leads generation 1 of the fresh classic group; its last
        # completed generation is still epoch 16.
        out = assignor.assign(
            subscriptions(w0=fs()), "w0", None, VIEW, 1, 200_000, 60_000, last_completed_generation=16
        )
        return frozenset(out["w0"].items)

    remembering = elected_in_connect_group()
    assert A1 not in first_classic_generation(remembering)  # lost, delayed a second time
    forgetting = elected_in_connect_group()
    forgetting.assign(
        subscriptions(w0=fs()), "w0", None, VIEW, 17, 150_000, 60_000, last_completed_generation=16
    )
    assert {AC, A0, A1} <= first_classic_generation(forgetting)  # the round (17) was never completed


def test_no_round_when_the_connect_group_never_had_a_member() -> None:
    """A config view set before any worker creates an empty connect group (its epoch bumped by the
    config); the all-legacy cluster that then starts classic has no connect era to forget."""
    coord = coordinator()
    coord.set_config(G, VIEW, 0)
    assert not connect(coord).members and connect(coord).metadata.member_seq == 0
    joined = cjoin(coord, "", "http://w0/", now=T)
    assert joined is not None and joined.error_code == int(ErrorCode.MEMBER_ID_REQUIRED)

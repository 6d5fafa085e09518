"""The hand-back waits out the hold of a member removed without stopping its work (docs/adoption.md,
"Hand-back": "Why no task runs twice").

Engine level, time as an argument. A ``releasing`` group revokes everything in every generation it
completes, so no worker behind the bridge is given a departed member's work; but once ``released``
is written, the workers rejoin the upstream coordinator, whose Connect leader starts with no memory
of the bridge's generations and deals every item no member of its generation reports. A worker that
fell silent (stalled herder, cut off) still runs its tasks until it notices, so the hand-back must
not finish before the hold the bridge would keep for it anyway has passed.
"""

from __future__ import annotations

import pytest

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state import classic_api as capi
from connect_bridge.state.adoption_records import GroupOwnership, OwnershipState
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.holds import zombie_grace_ms
from connect_bridge.state.record_codec import decode_record, encode_record
from connect_bridge.state.records import Record, RecordType
from test_migration import (
    W1_FULL,
    W2_FULL,
    G,
    cjoin,
    classic,
    coordinator,
    csync,
    payload,
    stable_classic,
)

SESSION_MS = 10_000  # test_migration's workers
DELAY_MS = 30_000
START_MS = 1_000  # ``connect-bridge release`` at this time


def releasing(**config: object) -> tuple[GroupCoordinator, list[Record], str, str]:
    """An adopted Stable group of two sessioned workers, w1 running W1_FULL and w2 W2_FULL (both
    synced at 0, so their sessions end at SESSION_MS), put into ``releasing`` at START_MS."""
    config.setdefault("scheduled_rebalance_max_delay_ms", DELAY_MS)
    coord = coordinator(**config)
    w1, w2 = stable_classic(coord)
    coord.change_ownership(G, OwnershipState.RELAYING, -1, 0)
    coord.change_ownership(G, OwnershipState.ADOPTED, 1, 0)
    coord.start_release(G, START_MS)
    assert classic(coord).state is capi.ClassicGroupState.PREPARING_REBALANCE
    log = coord.drain_records()
    return coord, log, w1, w2


def w1_handed_back(coord: GroupCoordinator, w1: str, now: int) -> None:
    """w1 completes the revoking generation alone, stops what it ran and is sent upstream (the
    wiring's ``release_member`` at its JoinGroup reporting nothing)."""
    joined = dict(coord.drain_responses())["w1-join"]
    assert joined.error_code == 0 and joined.leader == w1, joined  # type: ignore[union-attr]
    generation = joined.generation_id  # type: ignore[union-attr]
    keep = ((w1, payload(w1, W1_FULL)),)  # Connect's leader would keep its work
    answer = csync(coord, w1, generation, keep, now=now)
    assert answer is not None and answer.error_code == 0
    assert coord.release_member(G, w1, now)
    assert not classic(coord).members


def test_a_silent_member_of_a_releasing_group_holds_the_hand_back_until_its_hold_ends() -> None:
    """w2 falls silent while the group is released: its session ends at SESSION_MS and the
    coordinator removes it. w1 rejoins, is revoked, stops and is sent away: the bridge's group is
    empty. Before the fix the hand-back finished right then, and the upstream leader, seeing only
    w1 (reporting nothing), dealt W2_FULL while w2 still ran it: w2 notices only a zombie grace
    later. Now the hand-back waits the hold the bridge keeps outside a hand-back (the scheduled
    delay for a cooperative group, at least the zombie grace)."""
    coord, _, w1, w2 = releasing()
    assert cjoin(coord, w1, "http://w1/", W1_FULL, now=START_MS, token="w1-join") is None
    removed_at = SESSION_MS
    coord.advance(removed_at)  # w2's session ends: the join phase completes without it
    assert w2 not in classic(coord).members
    w1_handed_back(coord, w1, removed_at)

    hold = DELAY_MS  # the scheduled delay, longer than the grace here
    assert hold > zombie_grace_ms(SESSION_MS)
    # w2 may still run W2_FULL until at least removed_at + grace; nobody upstream would report it.
    assert W2_FULL and not coord.finish_release(G, removed_at)
    assert not coord.finish_release(G, removed_at + zombie_grace_ms(SESSION_MS))
    assert not coord.finish_release(G, removed_at + hold - 1)
    assert coord.ownership.state(G) is OwnershipState.RELEASING and G in coord.groups
    assert coord.finish_release(G, removed_at + hold)
    assert coord.ownership.state(G) is OwnershipState.RELEASED and G not in coord.groups


def test_the_hold_survives_a_restart() -> None:
    """The hold is the group's ownership record: a bridge restarted during it (the group already
    empty and persisted Empty) still waits it out."""
    coord, log, w1, _ = releasing()
    cjoin(coord, w1, "http://w1/", W1_FULL, now=START_MS, token="w1-join")
    coord.advance(SESSION_MS)
    w1_handed_back(coord, w1, SESSION_MS)
    log += coord.drain_records()
    wire = [decode_record(*encode_record(r)) for r in log]
    assert wire == log
    after = GroupCoordinator(coord.config)
    after.replay(wire, SESSION_MS + 5)
    assert after.ownership.state(G) is OwnershipState.RELEASING
    assert not after.groups[G].members
    assert not after.finish_release(G, SESSION_MS + DELAY_MS - 1)
    assert after.finish_release(G, SESSION_MS + DELAY_MS)
    holds = [r for r in log if r.type is RecordType.GROUP_OWNERSHIP and r.value.hold_until_ms >= 0]  # type: ignore[union-attr]
    assert [r.value.hold_until_ms for r in holds] == [SESSION_MS + DELAY_MS]  # type: ignore[union-attr]


def test_an_eager_group_holds_the_zombie_grace() -> None:
    """An eager leader holds nothing, so only the grace applies (as outside a hand-back)."""
    from connect_bridge.state.handback import hand_back_hold_ms

    assert hand_back_hold_ms("default", SESSION_MS, DELAY_MS) == zombie_grace_ms(SESSION_MS)
    assert hand_back_hold_ms("sessioned", SESSION_MS, 0) == zombie_grace_ms(SESSION_MS)


@pytest.mark.parametrize(
    ("instance_only", "held"),
    [(True, True), (False, False)],
    ids=["admin-removal-by-instance-id", "the-worker-leaves-itself"],
)
def test_a_leave_holds_only_when_the_member_did_not_say_it_stopped(instance_only: bool, held: bool) -> None:
    """A Connect worker leaves with its own member id after stopping its work: no hold. An
    administrative removal names only the instance id (KIP-345) and proves nothing about the
    process: the hand-back waits its hold."""
    coord = coordinator(scheduled_rebalance_max_delay_ms=DELAY_MS)
    ids = {}
    for name in ("w1", "w2"):
        first = cjoin(coord, "", f"http://{name}/", W1_FULL if name == "w1" else W2_FULL, instance=name)
        assert first is None
        ids[name] = classic(coord).static_member_id(name)
    coord.advance(0)
    answers = dict((t, a) for t, a in coord.drain_responses())
    assert not answers or all(a.error_code == 0 for a in answers.values())  # type: ignore[attr-defined]
    coord.change_ownership(G, OwnershipState.RELAYING, -1, 0)
    coord.change_ownership(G, OwnershipState.ADOPTED, 1, 0)
    coord.start_release(G, START_MS)
    leaving = capi.LeavingMember("" if instance_only else ids["w2"], "w2")
    answer = coord.classic_leave(capi.LeaveGroupRequest(G, (leaving,)), START_MS)
    assert answer.members[0][2] == ErrorCode.NONE
    assert "w2" not in classic(coord).static
    expected = START_MS + DELAY_MS if held else -1
    assert coord.hand_back_hold_until(G) == expected


def test_records_written_before_the_hold_field_replay_without_a_hold() -> None:
    """Bytes of a ``releasing`` record as written before the tagged field existed."""
    old = decode_record(bytes.fromhex("006b000167"), bytes.fromhex("0000020000000400000000000004d200"))
    assert old.value == GroupOwnership(OwnershipState.RELEASING, 4, 1234, -1)
    held = Record(RecordType.GROUP_OWNERSHIP, "g", "", GroupOwnership(OwnershipState.RELEASING, 4, 1234, 9))
    assert decode_record(*encode_record(held)) == held


@pytest.mark.parametrize(
    ("url", "owned", "removed"),
    [("http://w2/", frozenset(), True), ("http://w2/", W2_FULL, False), ("http://w9/", frozenset(), False)],
    ids=["same-url-stopped", "same-url-still-running", "another-worker"],
)
def test_a_worker_back_with_an_empty_id_and_nothing_running_ends_its_earlier_incarnation(
    url: str, owned: frozenset, removed: bool
) -> None:
    """w2's process rejoins with an empty member id (the wiring holds that JoinGroup until
    ``released``). Reporting nothing from w2's url, it shows that w2's member (loaded again after a
    restart, or a worker that was cut off and came back) runs nothing: removed at once, no hold.
    Still reporting work, or from another url, it proves nothing about w2: w2 stays, and a timer
    removing it later holds the hand-back."""
    from test_migration import protocols

    coord, _, w1, w2 = releasing()
    gone = coord.release_returned(G, protocols(url, owned), None, START_MS)
    assert gone == ([w2] if removed else [])
    assert (w2 in classic(coord).members) is not removed
    assert coord.hand_back_hold_until(G) == -1
    assert w1 in classic(coord).members


def test_a_release_started_while_members_wait_in_the_join_makes_them_join_again() -> None:
    """``connect-bridge release`` while the group is already PreparingRebalance: w1 waits in the
    join with nothing running (its JoinGroup came before ``releasing``, so the wiring never saw it
    to send it away). Before the fix that generation completed with an empty assignment for w1,
    which had nothing to revoke and never joined again: the group never emptied and the hand-back
    never finished (adversarial 97000291043400). Now the join phase that began before
    ``releasing`` is followed at once by another one, whose JoinGroups the wiring routes."""
    from connect_bridge.state.handback import reports_nothing
    from test_migration import protocols

    coord = coordinator(scheduled_rebalance_max_delay_ms=DELAY_MS)
    w1, w2 = stable_classic(coord)
    coord.change_ownership(G, OwnershipState.RELAYING, -1, 0)
    coord.change_ownership(G, OwnershipState.ADOPTED, 1, 0)
    assert cjoin(coord, w1, "http://w1/", (), now=100, token="w1-early") is None
    assert classic(coord).state is capi.ClassicGroupState.PREPARING_REBALANCE
    coord.start_release(G, START_MS)

    # w2 still runs W2_FULL: the wiring lets its JoinGroup join the bridge's group.
    completed = cjoin(coord, w2, "http://w2/", W2_FULL, now=START_MS, token="w2-join")
    assert completed is not None and completed.error_code == 0  # the last to join: the join completes
    generation = completed.generation_id
    assert dict(coord.drain_responses())["w1-early"].generation_id == generation  # type: ignore[union-attr]
    assert classic(coord).state is capi.ClassicGroupState.PREPARING_REBALANCE
    answer = csync(coord, w1, generation, ((w1, payload(w1)), (w2, payload(w1))), now=START_MS)
    assert answer is not None and answer.error_code == ErrorCode.REBALANCE_IN_PROGRESS

    # Both join again, now while ``releasing``: w1 reports nothing and is sent away.
    assert reports_nothing(protocols("http://w1/", ()))
    assert coord.release_member(G, w1, START_MS + 1)
    joined = cjoin(coord, w2, "http://w2/", W2_FULL, now=START_MS + 1)
    assert joined is not None and joined.error_code == 0 and joined.leader == w2, joined
    csync(coord, w2, joined.generation_id, ((w2, payload(w2, W2_FULL)),), now=START_MS + 2)
    assert classic(coord).state is capi.ClassicGroupState.STABLE  # no further rebalance
    assert coord.release_member(G, w2, START_MS + 3)  # revoked, it joins again reporting nothing
    assert coord.finish_release(G, START_MS + 3)
    assert coord.ownership.state(G) is OwnershipState.RELEASED

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
from connect_bridge.state.adoption.records import GroupOwnership, OwnershipState
from connect_bridge.state.classic import api as capi
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
    holds = {r.value.hold_until_ms for r in log if r.type is RecordType.GROUP_OWNERSHIP}  # type: ignore[union-attr]
    assert holds == {-1, SESSION_MS + DELAY_MS}


def test_an_eager_group_holds_the_zombie_grace() -> None:
    """An eager leader holds nothing, so only the grace applies (as outside a hand-back)."""
    from connect_bridge.state.adoption.handback import hand_back_hold_ms

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
    from connect_bridge.state.adoption.handback import reports_nothing
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


def static_releasing() -> tuple[GroupCoordinator, str, str]:
    """An adopted Stable group of two sessioned workers, w1 dynamic and leader, w2 static (instance
    ``i-w2``), put into ``releasing`` at START_MS. Returns (coordinator, w1, w2)."""
    from test_migration import W1_JOINED, W2_JOINED

    coord = coordinator(scheduled_rebalance_max_delay_ms=DELAY_MS)
    required = cjoin(coord, "", "http://w1/", W1_JOINED)
    assert required is not None and required.error_code == ErrorCode.MEMBER_ID_REQUIRED
    w1 = required.member_id
    assert cjoin(coord, w1, "http://w1/", W1_JOINED, token="j1") is None
    assert cjoin(coord, "", "http://w2/", W2_JOINED, instance="i-w2", token="j2") is None
    coord.advance(0)
    joined = dict(coord.drain_responses())
    w2 = joined["j2"].member_id  # type: ignore[union-attr]
    assert csync(coord, w2, 1, instance="i-w2", token="s2") is None
    keep = ((w1, payload(w1, W1_JOINED)), (w2, payload(w1, W2_JOINED)))
    assert csync(coord, w1, 1, keep, token="s1") is not None
    coord.drain_responses()
    assert classic(coord).state is capi.ClassicGroupState.STABLE
    coord.change_ownership(G, OwnershipState.RELAYING, -1, 0)
    coord.change_ownership(G, OwnershipState.ADOPTED, 1, 0)
    coord.start_release(G, START_MS)
    coord.drain_records()
    return coord, w1, w2


def test_the_unsynced_round_of_a_static_worker_is_never_fenced() -> None:
    """w2, a static worker (``group.instance.id`` i-w2), restarts while the group is released: its
    old member stays in the bridge's group (a static member sends no LeaveGroup) and its new process
    joins with an empty id, reporting nothing, and gets the unsynced leader round (a member id of the
    round's own and generation 2, past the group's 1). Its SyncGroup of that round, and a Heartbeat
    its heartbeat thread sends meanwhile, carry i-w2, which still names the old member: Kafka's
    static-member check answered FENCED_INSTANCE_ID, fatal for a Java worker (the herder exits), so
    the worker was gone for good and nothing ran at the end (fleet 99800000: 99800299406389,
    416252, 417758). The round's requests are answered UNKNOWN_MEMBER_ID, as the round intends: the
    worker joins again with an empty id and waits for ``released``."""
    from test_migration import protocols

    coord, w1, w2 = static_releasing()
    join = capi.JoinGroupRequest(
        G, "", "connect", protocols("http://w2/", frozenset()), session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=60_000, group_instance_id="i-w2",
    )  # fmt: skip
    assert coord.unsynced_round_due(join)
    round_ = coord.classic_join(join, START_MS + 1)
    assert round_ is not None and round_.error_code == 0, round_
    assert round_.leader == round_.member_id and round_.member_id not in classic(coord).members
    assert round_.generation_id == classic(coord).generation_id + 1
    assert classic(coord).static["i-w2"] == w2  # the old incarnation is still the static member

    own = ((round_.member_id, payload(round_.member_id, ())),)
    synced = csync(coord, round_.member_id, round_.generation_id, own, now=START_MS + 2, instance="i-w2")
    assert synced is not None and synced.error_code == ErrorCode.UNKNOWN_MEMBER_ID, synced
    beating = capi.HeartbeatRequest(G, round_.member_id, round_.generation_id, group_instance_id="i-w2")
    beat = coord.classic_heartbeat(beating, START_MS + 3)
    assert beat.error_code == ErrorCode.UNKNOWN_MEMBER_ID, beat

    # Outside the round's generation Kafka's static-member check still applies: a process naming
    # i-w2 with another member id at the group's own generation is fenced.
    other = coord.classic_heartbeat(
        capi.HeartbeatRequest(G, "someone-else", classic(coord).generation_id, group_instance_id="i-w2"),
        START_MS + 4,
    )
    assert other.error_code == ErrorCode.FENCED_INSTANCE_ID, other
    assert w1 in classic(coord).members and w2 in classic(coord).members


LATER = 10**9
"""Any time after the hand-back (the round depends on no clock)."""


def _round_then_relayed(coord: GroupCoordinator, member_id: str, url: str, above: int) -> None:
    """``member_id``'s worker (at ``url``, still running W2_FULL) joins after ``released``: the
    bridge answers it with an unsynced leader round above generation ``above``, whose SyncGroup
    is answered UNKNOWN_MEMBER_ID here; the round is owed no more, so its next JoinGroup is
    upstream's."""
    from test_migration import protocols

    join = capi.JoinGroupRequest(
        G,
        member_id,
        "connect",
        protocols(url, W2_FULL),
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=60_000,
    )
    assert coord.unsynced_round_due(join)
    answer = coord.classic_join(join, LATER)
    assert answer is not None and answer.error_code == 0 and answer.leader == answer.member_id == member_id
    assert answer.generation_id > above
    assert coord.from_unsynced_round(G, member_id, answer.generation_id)
    synced = csync(coord, member_id, answer.generation_id, now=LATER)
    assert synced is not None and synced.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert not coord.unsynced_round_due(join)
    assert url not in coord.ownership.get(G).rounds_due  # type: ignore[union-attr]


def test_a_worker_a_timer_removed_while_releasing_forgets_when_it_comes_back_after_released() -> None:
    """w2 falls silent while the group is released and a timer removes it; the hand-back finishes
    after its hold. w2 comes back only then (a partition longer than the hold): its JoinGroup went
    upstream as it was, and w2, which led the bridge's generations in the drill, led upstream
    remembering them, took work no upstream member reported for lost and delayed it a whole
    scheduled delay more (fleet drill 98903296711928: 96.3 s unowned against a 90 s bound). Now
    the round is owed by the ownership record and given at its first JoinGroup after ``released``."""
    coord, _, w1, w2 = releasing()
    assert cjoin(coord, w1, "http://w1/", W1_FULL, now=START_MS, token="w1-join") is None
    coord.advance(SESSION_MS)  # w2's session ends
    w1_handed_back(coord, w1, SESSION_MS)
    last_generation = classic(coord).generation_id
    assert coord.ownership.get(G).rounds_due == ("http://w2/",)  # type: ignore[union-attr]
    assert coord.finish_release(G, SESSION_MS + DELAY_MS)
    released = coord.ownership.get(G)
    assert released is not None and released.state is OwnershipState.RELEASED
    assert released.rounds_due == ("http://w2/",) and released.generation >= last_generation
    _round_then_relayed(coord, w2, "http://w2/", last_generation)


def emptied_connect_group() -> tuple[GroupCoordinator, str, int]:
    """An adopted group of w1 and w2 (``stable_classic``) in which w2 fell silent: at its session's
    end the group became a connect group holding W2_FULL for it until 12,000 + DELAY_MS; then w1
    left at 12,500 (its work held too). Returns (coordinator, w2, the group epoch)."""
    from connect_bridge.state.connect.group import ConnectGroup
    from test_migration import cbeat

    coord = coordinator(scheduled_rebalance_max_delay_ms=DELAY_MS)
    w1, w2 = stable_classic(coord)
    coord.change_ownership(G, OwnershipState.RELAYING, -1, 0)
    coord.change_ownership(G, OwnershipState.ADOPTED, 1, 0)
    for now in range(3_000, 12_001, 3_000):  # only w1 heartbeats
        cbeat(coord, w1, 1, now=now)
        coord.advance(now)
    group = coord.groups[G]
    assert isinstance(group, ConnectGroup) and w2 not in group.members
    assert [(h.url, h.deadline_ms) for h in group.metadata.held] == [("http://w2/", 12_000 + DELAY_MS)]
    left = coord.classic_leave(capi.LeaveGroupRequest(G, (capi.LeavingMember(w1, None, "stopping"),)), 12_500)
    assert left.members[0][2] == ErrorCode.NONE and not group.members
    # Connect's assignor holds a departed worker's work however it left: w1's too.
    assert {(h.url, h.deadline_ms) for h in group.metadata.held} == {
        ("http://w2/", 12_000 + DELAY_MS),
        ("http://w1/", 12_500 + DELAY_MS),
    }
    return coord, w2, group.group_epoch


def test_an_emptied_connect_group_is_handed_back_after_its_holds_and_its_held_workers_forget() -> None:
    """The group the bridge hands back is an emptied connect group still holding w2's work for
    w2, which may still run it (fleet drill 98903296711928, where w2 was cut off). The hand-back
    finished at once: upstream's first leader would deal that work at once, and w2, elected
    Connect leader in each of its JoinGroups to the connect group, led upstream remembering the
    held work as its own generation's and delayed it a second scheduled delay. Now the hand-back
    waits for the hold, and w2 gets an unsynced leader round above the group's epoch, while
    ``releasing`` or after (owed by the ownership record, so a restart keeps it)."""
    coord, w2, epoch = emptied_connect_group()
    end = 12_500 + DELAY_MS
    coord.start_release(G, 13_000)
    assert coord.hand_back_hold_until(G) == end
    assert not coord.finish_release(G, 13_000)
    assert not coord.finish_release(G, end - 1)
    log = coord.drain_records()
    assert coord.finish_release(G, end)
    log += coord.drain_records()
    released = coord.ownership.get(G)
    assert released is not None and released.generation >= epoch
    assert released.rounds_due == ("http://w1/", "http://w2/")

    after = GroupCoordinator(coord.config)  # a restart: the owed round is in the records
    after.replay([decode_record(*encode_record(r)) for r in log], end + 1)
    assert after.ownership.get(G) == released
    _round_then_relayed(after, w2, "http://w2/", epoch)

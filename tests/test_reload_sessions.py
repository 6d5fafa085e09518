"""A classic-protocol member's first session after its group is loaded from the log.

Found by the Java HA drill (``tests/test_ha_java.py``): the owning bridge was SIGSTOPped while all
three Java workers waited on their JoinGroup there. Another bridge took the partition over and
loaded the group with a fresh session for everyone; the workers sent nothing to it (a JoinGroup
waits up to the rebalance timeout + 5 s, with the tasks still running), so their sessions ended,
their work was held for the scheduled delay and then handed to the first worker that came back,
while the other two still ran it. A loaded classic-protocol member now gets, once, a session as
long as such a parked JoinGroup can last (``holds.first_session_after_load_ms``); a member that
talks to the new coordinator is back on its plain session at once.
"""

from __future__ import annotations

from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.holds import (
    JOIN_GROUP_TIMEOUT_LAPSE_MS,
    first_session_after_load_ms,
    join_group_wait_ms,
    zombie_grace_ms,
)
from test_adversity import JavaLike, NewLike, assert_exclusive, run_for
from test_migration import (
    ALL,
    EMPTY,
    W1_FULL,
    W2_FULL,
    G,
    cbeat,
    cjoin,
    classic,
    connect,
    coordinator,
    nbeat,
    njoin,
    stable_classic,
    upgraded_and_settled,
)

SESSION_MS, REBALANCE_MS = 10_000, 60_000
"""What ``test_migration.cjoin``'s workers send."""
LOAD = 50_000
PARKED = REBALANCE_MS + JOIN_GROUP_TIMEOUT_LAPSE_MS


def test_the_first_session_after_a_load_outlasts_a_parked_join() -> None:
    assert first_session_after_load_ms(SESSION_MS, REBALANCE_MS) == PARKED
    assert first_session_after_load_ms(90_000, 30_000) == 90_000  # never shorter than a session


def test_a_loaded_classic_group_keeps_silent_members_as_long_as_a_parked_join() -> None:
    source = coordinator(scheduled_rebalance_max_delay_ms=0)
    w1, w2 = stable_classic(source)
    loaded = coordinator(scheduled_rebalance_max_delay_ms=0)
    loaded.replay(source.drain_records(), LOAD)

    loaded.advance(LOAD + SESSION_MS + 1)  # a plain session would have ended here
    assert set(classic(loaded).members) == {w1, w2}
    assert classic(loaded).state is ClassicGroupState.STABLE
    for t in range(LOAD + SESSION_MS + 2, LOAD + PARKED - 1, 3_000):  # w1 talks (a plain session
        assert cbeat(loaded, w1, 1, now=t) == 0  # again); w2 waits on a JoinGroup elsewhere
        loaded.advance(t)
    assert set(classic(loaded).members) == {w1, w2}
    loaded.advance(LOAD + PARKED + 1)  # w2 said nothing for as long as a JoinGroup can wait
    # (removed by its session; the bridge then holds its work in a connect group, migration.md)
    members = loaded.groups[G].members
    assert w2 not in members and w1 in members


def test_a_loaded_connect_group_hands_out_no_parked_legacy_work_before_the_join_could_end() -> None:
    """The drill's case in the engine: both legacy workers wait on a JoinGroup elsewhere and keep
    running; only the new-protocol worker talks to the coordinator that loaded the group."""
    source, log, w1, w2, w3 = upgraded_and_settled(scheduled_rebalance_max_delay_ms=5_000)
    members = connect(source).members
    legacy = [
        JavaLike(name, mid, 2, set(members[mid].current.owned)) for name, mid in (("w1", w1), ("w2", w2))
    ]
    new = NewLike(w3, members[w3].current.member_epoch, set(members[w3].current.owned))
    assert_exclusive(*legacy, new)
    loaded = coordinator(scheduled_rebalance_max_delay_ms=5_000)
    loaded.replay(log.records + source.drain_records(), LOAD)

    for t in range(LOAD, LOAD + PARKED - 1_000, 1_000):  # the legacy workers are silent, still running
        run_for(loaded, [new], t, t + 1_000)
        assert_exclusive(*legacy, new)
    assert {w1, w2} <= set(connect(loaded).members)


# A worker's JoinGroup waits max(request.timeout.ms, rebalance timeout + 5 s) (Java's
# ``AbstractCoordinator.sendJoinGroupRequest``); with a request timeout above the rebalance timeout
# + 5 s a JoinGroup parked at a paused previous owner lasts that long, and the bridge's setting
# ``coordinator.worker_request_timeout_ms`` says how long.
REQUEST_MS = 90_000
DELAY_MS = 10_000


def _loaded_classic_pair() -> tuple[GroupCoordinator, JavaLike, JavaLike]:
    """The stable classic group of ``stable_classic`` loaded by a bridge told the workers'
    ``request.timeout.ms`` is 90 s; w1 has B revoked and runs ``W1_FULL``, w2 runs ``W2_FULL``."""
    source = coordinator(scheduled_rebalance_max_delay_ms=DELAY_MS, worker_request_timeout_ms=REQUEST_MS)
    w1, w2 = stable_classic(source)
    loaded = coordinator(scheduled_rebalance_max_delay_ms=DELAY_MS, worker_request_timeout_ms=REQUEST_MS)
    loaded.replay(source.drain_records(), LOAD)
    return loaded, JavaLike("w1", w1, 1, set(W1_FULL)), JavaLike("w2", w2, 1, set(W2_FULL))


def test_the_first_session_after_a_load_outlasts_the_workers_request_timeout() -> None:
    assert first_session_after_load_ms(SESSION_MS, REBALANCE_MS, REQUEST_MS) == REQUEST_MS
    assert first_session_after_load_ms(SESSION_MS, REBALANCE_MS, 40_000) == PARKED  # Connect's default
    assert join_group_wait_ms(REBALANCE_MS, REQUEST_MS) == REQUEST_MS


def test_a_member_parked_for_the_request_timeout_is_not_expired_before_its_join_could_end() -> None:
    """w1 came back to the new owner and heartbeats; w2 waits on a JoinGroup at the paused previous
    owner, running its tasks, until its request timeout (not the rebalance timeout + 5 s) ends."""
    loaded, w1, w2 = _loaded_classic_pair()
    run_for(loaded, [w1], LOAD, LOAD + REQUEST_MS - 1_000)
    assert_exclusive(w1, w2)
    assert w2.member_id in loaded.groups[G].members
    run_for(loaded, [w1], LOAD + REQUEST_MS - 1_000, LOAD + REQUEST_MS + 1)
    assert w2.member_id not in loaded.groups[G].members


def test_work_parked_for_the_request_timeout_is_never_dealt_while_its_worker_runs_it() -> None:
    """The issue's case: the first worker back rejoins at once and starts a rebalance, whose join
    phase ends (the rebalance timeout) before w2's JoinGroup at the paused owner gives up; w2 runs
    its tasks until then and comes back 2 s later. Nothing of w2 is dealt to w1 meanwhile, and w2
    gets its work back."""
    loaded, w1, w2 = _loaded_classic_pair()
    t = LOAD + 1_000
    assert cjoin(loaded, w1.member_id, w1.url, frozenset(w1.runs), now=t, token="w1") is None  # parked
    while not loaded.drain_responses():  # no heartbeats while its JoinGroup waits (Java's client)
        t += 1_000
        loaded.advance(t)
    w1.rejoin(loaded, t)  # the join phase ended without w2 (told to rejoin, or answered)
    gives_up = LOAD + REQUEST_MS
    for step in range(t, gives_up + 2_000, 1_000):
        run_for(loaded, [w1], step, step + 1_000, step=1_000)
        assert_exclusive(w1, w2)
    w2.rejoin(loaded, gives_up + 2_000)  # found the new owner; still runs everything (cooperative)
    assert_exclusive(w1, w2)
    assert w2.runs == W2_FULL and w1.runs | w2.runs == ALL  # its held work went back to it


def test_a_loaded_connect_group_keeps_parked_legacy_work_for_the_request_timeout() -> None:
    source, log, w1, w2, w3 = upgraded_and_settled(
        scheduled_rebalance_max_delay_ms=5_000, worker_request_timeout_ms=REQUEST_MS
    )
    members = connect(source).members
    legacy = [
        JavaLike(name, mid, 2, set(members[mid].current.owned)) for name, mid in (("w1", w1), ("w2", w2))
    ]
    new = NewLike(w3, members[w3].current.member_epoch, set(members[w3].current.owned))
    loaded = coordinator(scheduled_rebalance_max_delay_ms=5_000, worker_request_timeout_ms=REQUEST_MS)
    loaded.replay(log.records + source.drain_records(), LOAD)

    for t in range(LOAD, LOAD + REQUEST_MS - 1_000, 1_000):
        run_for(loaded, [new], t, t + 1_000)
        assert_exclusive(*legacy, new)
    assert {w1, w2} <= set(connect(loaded).members)


def test_a_member_that_talked_to_the_new_owner_is_held_no_longer_than_any_other() -> None:
    """Both workers heartbeat at the new owner after the load, so neither waits on a JoinGroup at
    the previous one (a client talks to one coordinator at a time). w2 then crashes: its work is
    held for the scheduled delay, as anyone's, not until a JoinGroup it never had could have
    timed out (load + 90 s + grace). Adversarial fleet drill 95000285001369 (held 64.5 s past its
    removal with a 15 s delay, live 58.6 s against 45 s), and 000659, 000887, 002573 of that fleet."""
    loaded, w1, w2 = _loaded_classic_pair()
    crash = LOAD + 20_000
    run_for(loaded, [w1, w2], LOAD, crash)
    assert_exclusive(w1, w2)
    t = crash
    while w2.member_id in loaded.groups[G].members:  # w2 is silent from the crash on
        run_for(loaded, [w1], t, t + 1_000, step=1_000)
        t += 1_000
    assert t <= crash + SESSION_MS + 1_000
    held = connect(loaded).metadata.held  # the removal holds w2's work in a connect group
    assert held and max(h.deadline_ms for h in held) <= t + DELAY_MS  # the delay, not load + 98 s


def _held_deadline(loaded: GroupCoordinator, url: str) -> int:
    return max(h.deadline_ms for h in connect(loaded).metadata.held if h.url == url)


def test_a_conversion_right_after_a_load_keeps_the_parked_legacy_members_hold() -> None:
    """A new-protocol worker joins a classic group just loaded from the log: the classic members it
    carries over into the connect group may still wait on a JoinGroup at the previous owner, running
    their tasks. The conversion arms them a plain session, so w2 (silent) is removed by it long
    before that JoinGroup can end; its work stays held until then plus the zombie grace, not for
    the zombie grace only (adversarial fleet drills 97000291002434, 029417, 071180)."""
    source = coordinator(scheduled_rebalance_max_delay_ms=0)
    w1, w2 = stable_classic(source)
    loaded = coordinator(scheduled_rebalance_max_delay_ms=0)
    loaded.replay(source.drain_records(), LOAD)
    w3 = njoin(loaded, "", "http://w3/", now=LOAD + 1_000).member_id
    assert w3 in connect(loaded).members and w2 in connect(loaded).members
    t = LOAD + 1_000
    while w2 in connect(loaded).members:  # w1 and w3 talk; w2 waits on its JoinGroup elsewhere
        t += 1_000
        cbeat(loaded, w1, 1, now=t)
        nbeat(loaded, w3, connect(loaded).members[w3].current.member_epoch, EMPTY, now=t)
        loaded.advance(t)
    assert t < LOAD + PARKED  # removed by the plain session the conversion armed
    assert _held_deadline(loaded, "http://w2/") >= LOAD + PARKED + zombie_grace_ms(SESSION_MS)


def test_a_legacy_member_that_talked_after_a_load_is_held_for_the_grace_only() -> None:
    """w2 heartbeats at the coordinator that loaded the connect group, then falls silent: it waits
    on nothing elsewhere, so its removal holds its work for the zombie grace, as anyone's."""
    source, log, w1, w2, w3 = upgraded_and_settled(scheduled_rebalance_max_delay_ms=0)
    loaded = coordinator(scheduled_rebalance_max_delay_ms=0)
    loaded.replay(log.records + source.drain_records(), LOAD)
    t = LOAD + 1_000
    cbeat(loaded, w2, 2, now=t)
    while w2 in connect(loaded).members:
        t += 1_000
        cbeat(loaded, w1, 2, now=t)
        nbeat(loaded, w3, connect(loaded).members[w3].current.member_epoch, EMPTY, now=t)
        loaded.advance(t)
    assert t <= LOAD + 1_000 + SESSION_MS + 1_000
    assert _held_deadline(loaded, "http://w2/") <= t + zombie_grace_ms(SESSION_MS)


def test_a_silent_loaded_member_whose_url_talks_as_another_member_is_on_a_plain_session() -> None:
    """w2's worker stopped and came back as a new-protocol worker at the same url while its legacy
    member's LeaveGroup was not yet in the log; the bridge then restarted and loaded that member
    again. Once the new process (``http://w2/``) talks to the new coordinator, the silent legacy
    member is an earlier incarnation of it (a url belongs to one live process), parked nowhere: it
    gets the plain session Kafka arms at a load instead of one as long as a parked JoinGroup (65 s
    here), so work dealt to it is not stuck with it past the rebalance timeout (adversarial drill
    97000291076073: a task added 6.7 s after a restart waited 36 s, bound 30 s). w1, silent too,
    has no other member at its url and keeps the long first session."""
    source, log, w1, w2, w3 = upgraded_and_settled(scheduled_rebalance_max_delay_ms=0)
    loaded = coordinator(scheduled_rebalance_max_delay_ms=0)
    loaded.replay(log.records + source.drain_records(), LOAD)
    back = njoin(loaded, "", "http://w2/", now=LOAD + 1_000).member_id  # w2's worker, a new process
    t = LOAD + 1_000
    while w2 in connect(loaded).members and t < LOAD + PARKED:
        t += 1_000
        for mid in (w3, back):
            nbeat(loaded, mid, connect(loaded).members[mid].current.member_epoch, EMPTY, now=t)
        loaded.advance(t)
    assert w2 not in connect(loaded).members
    assert t <= LOAD + SESSION_MS + 1_000  # Kafka's session after a load, not PARKED
    assert w1 in connect(loaded).members  # no other process speaks for w1's url: it may be parked
    loaded.advance(LOAD + PARKED - 1)
    assert w1 in connect(loaded).members

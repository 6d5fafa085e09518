"""A departed worker's held work in a classic Connect group comes back on time, and the workers learn
of it at once, as with Connect's own leader on Kafka (docs/migration.md "Held work").

Three behaviours of a Kafka 4.3.1-coordinated group, seen with Java workers (4 workers, scheduled
delay 8 s), that the bridge now matches:

* the workers are told how long lost work is held (the assignment's ``delay``) and rejoin by
  themselves the moment it ends, instead of at their next heartbeat after it;
* a downgraded group's first rebalance is announced with REBALANCE_IN_PROGRESS, not with an
  ILLEGAL_GENERATION answer to every worker;
* a worker restarted at the same url before its old member's session ended gets its held work back
  as soon as the old member goes, instead of after the whole hold.

Pure engine tests (time is an argument): the coordinator driven with typed requests, and the
simulator's Java-like legacy workers (``drills/sim.py``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.drills.checker import check
from connect_bridge.drills.scenario import load_scenario
from connect_bridge.drills.sim import SimulatedDrill
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.holds import zombie_grace_ms
from connect_bridge.state.model import EMPTY
from test_migration import (
    W1_FULL,
    W2_FULL,
    cbeat,
    cjoin,
    connect,
    coordinator,
    csync,
    decoded,
    payload,
    stable_classic,
)

RIP = int(ErrorCode.REBALANCE_IN_PROGRESS)
DELAY = 8_000
SESSION = 10_000
HOLD = max(DELAY, zombie_grace_ms(SESSION))
"""How long a member removed by its session timer has its work held (8.333 s: the zombie grace)."""


def _expired_w2(coord: GroupCoordinator) -> tuple[str, str, int]:
    """w1 and w2 form a stable classic group at 0; w1 keeps heartbeating, w2 falls silent and its
    session ends at 10 s. Returns (w1, w2, the hold's end)."""
    w1, w2 = stable_classic(coord)
    for t in (3_000, 6_000, 9_000):
        assert cbeat(coord, w1, 1, now=t) == 0
    coord.advance(SESSION)
    group = connect(coord)  # converted: the bridge holds w2's work for the delay
    [held] = group.metadata.held
    assert held.items == W2_FULL and held.deadline_ms == SESSION + HOLD
    return w1, w2, held.deadline_ms


def test_the_remaining_members_rejoin_at_once_and_are_told_how_long_work_is_held() -> None:
    coord = coordinator(scheduled_rebalance_max_delay_ms=DELAY)
    w1, _, hold_end = _expired_w2(coord)
    now = SESSION + 1_000
    # Kafka rebalances after an expiry; so does the bridge (it used to wait for the hold's end).
    assert cbeat(coord, w1, 1, now=now) == RIP
    joined = cjoin(coord, w1, "http://w1/", W1_FULL, now=now)
    assert joined is not None and joined.error_code == 0
    _, assignment = decoded(csync(coord, w1, joined.generation_id, now=now))
    assert assignment.delay_ms == hold_end - now  # Java's herder rejoins by itself then


def test_the_member_that_rejoins_when_the_hold_ends_gets_the_released_work() -> None:
    coord = coordinator(scheduled_rebalance_max_delay_ms=DELAY)
    w1, _, hold_end = _expired_w2(coord)
    joined = cjoin(coord, w1, "http://w1/", W1_FULL, now=SESSION + 1_000)
    assert joined is not None
    csync(coord, w1, joined.generation_id, now=SESSION + 1_000)
    coord.advance(hold_end)
    rejoin_at = hold_end + 2  # the scheduled rejoin, a network hop after the hold ended
    joined = cjoin(coord, w1, "http://w1/", W1_FULL, now=rejoin_at)
    assert joined is not None and joined.error_code == 0
    _, assignment = decoded(csync(coord, w1, joined.generation_id, now=rejoin_at))
    assert set(assignment.items) == W2_FULL and assignment.delay_ms == 0


def test_a_member_already_back_at_the_departed_url_gets_the_work_when_the_old_member_goes() -> None:
    """w2 is killed and restarted at its url: its new member joins while the old one still waits
    for its session to end. Connect's leader deals a departed worker's work to the worker that is
    back without any; the bridge gives it back as soon as the old member is gone."""
    coord = coordinator(scheduled_rebalance_max_delay_ms=DELAY)
    w1, w2 = stable_classic(coord)
    assert cbeat(coord, w1, 1, now=3_000) == 0
    first = cjoin(coord, "", "http://w2/", EMPTY, now=4_000)
    assert first is not None and first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    w2b = first.member_id
    assert cjoin(coord, w2b, "http://w2/", EMPTY, now=4_000, token="w2b") is None  # a rebalance starts
    assert cbeat(coord, w1, 1, now=6_000) == RIP
    assert cjoin(coord, w1, "http://w1/", W1_FULL, now=6_000, token="w1") is None  # waits for w2
    coord.advance(SESSION)
    group = connect(coord)
    assert w2 not in group.members and not group.metadata.held
    assert group.target[w2b] == W2_FULL
    answers = dict(coord.drain_responses())
    assert answers["w2b"].error_code == RIP  # type: ignore[attr-defined]
    joined = cjoin(coord, w2b, "http://w2/", EMPTY, now=SESSION + 5)
    assert joined is not None and joined.error_code == 0
    _, assignment = decoded(csync(coord, w2b, joined.generation_id, now=SESSION + 5))
    assert set(assignment.items) == W2_FULL


def test_work_returned_to_a_member_that_never_syncs_stays_its_own_then_is_held_again() -> None:
    """The member back at the url may be a stale one that never syncs (a duplicated JoinGroup of a
    worker that since lost its member): until it syncs nobody else is granted what was returned to
    it, and when it goes that work is held again."""
    coord = coordinator(scheduled_rebalance_max_delay_ms=DELAY)
    w1, _ = stable_classic(coord)
    assert cbeat(coord, w1, 1, now=3_000) == 0
    stale = cjoin(coord, "", "http://w2/", EMPTY, now=4_000).member_id  # type: ignore[union-attr]
    assert cjoin(coord, stale, "http://w2/", EMPTY, now=4_000, token="stale") is None
    assert cbeat(coord, w1, 1, now=6_000) == RIP
    assert cjoin(coord, w1, "http://w1/", W1_FULL, now=6_000, token="w1") is None
    coord.advance(SESSION)
    group = connect(coord)
    owner_of = group.owner_lookup()
    assert {owner_of(item) for item in W2_FULL} == {stale}
    # The stale member never rejoins: its session ends and the work is held again.
    coord.advance(SESSION + SESSION)
    group = connect(coord)
    assert stale not in group.members
    assert {i for h in group.metadata.held for i in h.items} >= W2_FULL


# ---------------------------------------------------------------------------------------------------
# The same, with the simulator's Java-like workers
# ---------------------------------------------------------------------------------------------------

TIMING = {
    "session_timeout_ms": SESSION,
    "rebalance_timeout_ms": 60_000,
    "heartbeat_interval_ms": 3_000,
    "scheduled_rebalance_max_delay_ms": DELAY,
}
FOUR = [
    {"at_ms": i * 500, "action": "start", "worker": f"w{i}", "protocol": "sessioned"} for i in range(1, 5)
]


def _drill(steps: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], Counter]:
    """Run four sessioned workers plus ``steps``; the events and the Heartbeat answers by error."""
    answers: Counter = Counter()
    heartbeat = GroupCoordinator.classic_heartbeat

    def counted(self: GroupCoordinator, req: Any, now_ms: int) -> Any:
        resp = heartbeat(self, req, now_ms)
        answers[ErrorCode(resp.error_code)] += 1
        return resp

    monkeypatch.setattr(GroupCoordinator, "classic_heartbeat", counted)
    scenario = load_scenario(
        {
            "name": "held",
            "seed": 3,
            "timing": TIMING,
            "connectors": {"a": 6, "b": 5},
            "steps": [*FOUR, *steps],
            "end_ms": 150_000,
        }
    )
    return SimulatedDrill(scenario).run().events, answers


def _runs(events: list[dict], worker: str, lo: int, hi: int) -> list[dict]:
    return [e for e in events if e["type"] == "run" and e["worker"] == worker and lo <= e["t_ms"] < hi]


def _converted_at(events: list[dict], after: int) -> int:
    return next(
        e["t_ms"]
        for e in events
        if e["type"] == "group" and e["t_ms"] > after and e["group_type"] == "connect"
    )


def test_java_like_workers_start_held_work_when_the_hold_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """w2 is paused past its session: its work is held, and the others start it within a network
    round trip of the hold's end (they used to learn of it at a heartbeat up to 3 s later)."""
    events, answers = _drill(
        [{"at_ms": 60_000, "action": "pause", "worker": "w2", "duration_ms": 30_000}], monkeypatch
    )
    removed = _converted_at(events, 60_000)
    moved = [e for w in ("w1", "w3", "w4") for e in _runs(events, w, removed, 90_000)]
    assert moved, "w2's work moves while it is paused"
    started = min(e["t_ms"] for e in moved)
    assert removed + HOLD <= started <= removed + HOLD + 50
    # The group goes back to classic afterwards, and no worker is answered ILLEGAL_GENERATION.
    assert answers[ErrorCode.ILLEGAL_GENERATION] == 0
    assert answers[ErrorCode.REBALANCE_IN_PROGRESS] > 0


def test_a_java_like_worker_restarted_at_its_url_gets_its_work_back_when_its_old_member_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events, _ = _drill(
        [
            {"at_ms": 60_000, "action": "crash", "worker": "w2"},
            {"at_ms": 62_000, "action": "start", "worker": "w2", "protocol": "sessioned"},
        ],
        monkeypatch,
    )
    removed = _converted_at(events, 60_000)
    back = _runs(events, "w2", 62_000, 150_000)
    assert back and min(e["t_ms"] for e in back) <= removed + 100  # not a whole hold later
    for w in ("w1", "w3", "w4"):
        assert not _runs(events, w, 60_000, 150_000), f"{w} took none of w2's work"
    assert check(events, end_ms=150_000).ok


def test_an_eager_group_is_not_rebalanced_before_the_hold_ends() -> None:
    """Eager workers cannot be told a delay (a v0 assignment has none), and an eager rejoin stops
    everything: they are told at the hold's end only, as before."""
    coord = coordinator(scheduled_rebalance_max_delay_ms=DELAY)
    ids = {}
    for name in ("w1", "w2"):
        first = cjoin(coord, "", f"http://{name}/", version=0)
        assert first is not None and first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        ids[name] = first.member_id
        assert cjoin(coord, ids[name], f"http://{name}/", version=0, token=name) is None
    coord.advance(0)
    coord.drain_responses()
    w1, w2 = ids["w1"], ids["w2"]
    assert csync(coord, w2, 1, token="s2") is None
    deal = ((w1, payload(w1, W1_FULL, version=0)), (w2, payload(w1, W2_FULL, version=0)))
    assert csync(coord, w1, 1, deal).error_code == 0  # type: ignore[union-attr]
    for t in (3_000, 6_000, 9_000):
        assert cbeat(coord, w1, 1, now=t) == 0
    coord.advance(SESSION)
    group = connect(coord)
    [held] = group.metadata.held
    assert held.items == W2_FULL
    assert cbeat(coord, w1, 1, now=SESSION + 1_000) == 0
    coord.advance(held.deadline_ms)
    assert cbeat(coord, w1, 1, now=held.deadline_ms + 1) == RIP

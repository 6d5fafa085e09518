"""handover_figures: the release delay, zombie overlap and heartbeat-error figures of the Java drill
run both ways (tests/test_java_versus_kafka.py), on hand-made timelines and real log lines."""

from __future__ import annotations

from connect_bridge.drills.handover_figures import (
    Run,
    back_on_others,
    group_requests,
    heartbeat_errors,
    is_zombie_overlap,
    members_reachable_after,
    overlaps,
    running_at,
    runs_of,
    session_expiry,
    zombie_overlaps,
)
from connect_bridge.drills.java_timeline import parse_timestamp

A0, A1 = ("alpha", 0), ("alpha", 1)
COORDINATOR = "org.apache.kafka.connect.runtime.distributed.WorkerCoordinator"
PREFIX = "[Worker clientId=connect-127.0.0.1:8083, groupId=connect-g] "


def ev(t: int, kind: str, worker: str, item: tuple[str, int] | None = None) -> dict[str, object]:
    event: dict[str, object] = {"t_ms": t, "type": kind, "worker": worker}
    if item is not None:
        event |= {"connector": item[0], "task": item[1]}
    return event


def log(ts: str, level: str, message: str, logger: str = COORDINATOR) -> str:
    return f"[2026-11-25 {ts}] {level} {PREFIX}{message} ({logger})"


def at(ts: str) -> int:
    clock, millis = ts.split(",")
    return parse_timestamp(f"2026-11-25 {clock}", millis)


# A paused worker p ran alpha-0 and alpha-1; paused at 1000, its work dealt to q at 20000 (alpha-0)
# and 20500 (alpha-1), resumed at 21000, it stopped alpha-0 at 21800 and alpha-1 at 23000.
ZOMBIE = [
    ev(0, "worker_start", "p"),
    ev(0, "worker_start", "q"),
    ev(10, "run", "p", A0),
    ev(12, "run", "p", A1),
    ev(20000, "run", "q", A0),
    ev(20500, "run", "q", A1),
    ev(21800, "release", "p", A0),
    ev(23000, "release", "p", A1),
]


def test_runs_end_at_a_release_or_the_workers_end() -> None:
    events = [*ZOMBIE[:4], ev(500, "release", "p", A0), ev(600, "run", "p", A0), ev(900, "worker_crash", "p")]
    assert runs_of(events) == [Run("p", A0, 10, 500), Run("p", A1, 12, 900), Run("p", A0, 600, 900)]
    assert runs_of(ZOMBIE[:3]) == [Run("p", A0, 10, None)]  # still running


def test_running_at_and_back_on_others() -> None:
    runs = runs_of(ZOMBIE)
    assert running_at(runs, 15000) == {"p": {A0, A1}}
    assert running_at(runs, 22000) == {"p": {A1}, "q": {A0, A1}}
    assert back_on_others(runs, {A0, A1}, 1000, "p") == {A0: 20000, A1: 20500}
    assert back_on_others(runs, {A0, A1}, 20200, "p") == {A0: None, A1: 20500}
    assert back_on_others(runs, {A0}, 0, None) == {A0: 10}  # any worker


def test_zombie_overlap_counts_only_after_the_resume() -> None:
    runs = runs_of(ZOMBIE)
    figures = zombie_overlaps(runs, "p", paused=1000, resumed=21000, end=30000)
    assert figures.per_item_ms == {A0: 800, A1: 2000}
    assert (figures.task_ms, figures.longest_ms) == (2800, 2000)
    assert figures.released_after_resume_ms == {A0: 800, A1: 2000}
    assert figures.during_pause_ms == 1000 + 500  # q ran them while p was frozen
    # Resumed before the new owner started: the overlap starts with the new owner's run.
    early = zombie_overlaps(runs, "p", paused=1000, resumed=19000, end=30000)
    assert early.per_item_ms == {A0: 1800, A1: 2500} and early.during_pause_ms == 0


def test_a_zombie_that_never_stops_overlaps_until_the_end() -> None:
    runs = runs_of(ZOMBIE[:6])
    figures = zombie_overlaps(runs, "p", paused=1000, resumed=21000, end=25000)
    assert figures.per_item_ms == {A0: 4000, A1: 4000}
    assert figures.released_after_resume_ms == {A0: None, A1: None}


def test_overlaps_and_which_are_the_paused_workers() -> None:
    runs = runs_of([*ZOMBIE, ev(26000, "run", "r", A0), ev(26000, "release", "q", A0)])
    found = overlaps(runs, 30000)
    shown = [(o.item, o.first.worker, o.second.worker, o.start, o.end) for o in found]
    # q and r hand alpha-0 over in one millisecond: counted (0 ms), as the checker counts it.
    assert shown == [(A0, "p", "q", 20000, 21800), (A0, "q", "r", 26000, 26000), (A1, "p", "q", 20500, 23000)]
    assert [is_zombie_overlap(o, "p", 1000) for o in found] == [True, False, True]
    assert not any(is_zombie_overlap(o, "p", 5) for o in found)  # p's runs began after that "pause"


def test_session_expiry_is_the_last_group_request_plus_the_session() -> None:
    text = "\n".join(
        [
            log("10:00:00,100", "INFO", "(Re-)joining group"),
            log(
                "10:00:00,105",
                "DEBUG",
                "Sending JoinGroup (JoinGroupRequestData(groupId='g')) to coordinator x",
            ),
            log(
                "10:00:00,300", "DEBUG", "Sending follower SyncGroup to coordinator x: SyncGroupRequestData()"
            ),
            log(
                "10:00:03,300",
                "DEBUG",
                "Sending Heartbeat request with generation 3 and member id m to coordinator x",
            ),
            log("10:00:03,302", "DEBUG", "Received successful Heartbeat response"),
            '{"task":0,"seqno":1,"time_ms":1,"name":"alpha","topic":"t"}',
            log(
                "10:00:06,301",
                "DEBUG",
                "Sending Heartbeat request with generation 3 and member id m to coordinator x",
            ),
        ]
    )
    assert group_requests(text) == [
        at("10:00:00,105"),
        at("10:00:00,300"),
        at("10:00:03,300"),
        at("10:00:06,301"),
    ]
    assert session_expiry(text, at("10:00:05,000"), 10_000) == at("10:00:13,300")
    assert session_expiry(text, at("10:00:00,000"), 10_000) is None  # DEBUG was not on yet


def test_heartbeat_errors_by_answer() -> None:
    text = "\n".join(
        [
            log("10:00:01,000", "INFO", "Attempt to heartbeat failed since group is rebalancing"),
            log(
                "10:00:02,000",
                "INFO",
                "Attempt to heartbeat with Generation{generationId=4, memberId='m', protocol='sessioned'} "
                "and group instance id Optional.empty failed due to ILLEGAL_GENERATION, resetting generation",
            ),
            log(
                "10:00:03,000",
                "INFO",
                "Attempt to heartbeat with stale Generation{generationId=3, memberId='m', protocol='s'} "
                "and group instance id Optional.empty failed due to ILLEGAL_GENERATION, ignoring the error",
            ),
            log(
                "10:00:04,000",
                "INFO",
                "Attempt to heartbeat with Generation{generationId=4, memberId='m', protocol='sessioned'} "
                "and group instance id Optional.empty failed due to UNKNOWN_MEMBER_ID, resetting generation",
            ),
        ]
    )
    assert heartbeat_errors(text) == {
        "REBALANCE_IN_PROGRESS": 1,
        "ILLEGAL_GENERATION": 2,
        "UNKNOWN_MEMBER_ID": 1,
    }
    assert heartbeat_errors(text, since=at("10:00:02,500")) == {
        "ILLEGAL_GENERATION": 1,
        "UNKNOWN_MEMBER_ID": 1,
    }


def test_members_reachable_after_waits_for_the_last_ones_next_request() -> None:
    def beats(*stamps: str) -> str:
        return "\n".join(
            log(ts, "DEBUG", "Sending Heartbeat request with generation 3 and member id m to coordinator x")
            for ts in stamps
        )

    texts = [beats("10:00:01,000", "10:00:04,000"), beats("10:00:02,500", "10:00:05,500")]
    assert members_reachable_after(texts, at("10:00:02,000")) == 2000  # the first one's next, at 4.0
    assert members_reachable_after(texts, at("10:00:04,000")) == 1500
    assert members_reachable_after(texts, at("10:00:05,000")) is None  # the first sent none since

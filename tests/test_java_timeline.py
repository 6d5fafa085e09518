"""java_timeline (Java worker logs → §4.3 events) and the VerifiableSource witness, on real log
excerpts (tests/data/java_worker_logs, README there) and small hand-made cases."""

from __future__ import annotations

import json
from pathlib import Path

from connect_bridge.drills.checker import check
from connect_bridge.drills.java_timeline import (
    JavaWorkerLog,
    build_event_log,
    config_event,
    merge_streams,
    parse_timestamp,
    scan,
    worker_timeline,
)
from connect_bridge.drills.witness import check_prints, check_sequences, decode_record, worker_prints

DATA = Path(__file__).parent / "data" / "java_worker_logs"
KILLED_W2 = parse_timestamp("2026-11-25 15:45:31", "500")


def sample(name: str) -> str:
    return (DATA / f"{name}.log").read_text(encoding="utf-8")


def line(ts: str, message: str, logger: str) -> str:
    return f"[2026-11-25 {ts}] INFO {message} ({logger})"


HERDER = "org.apache.kafka.connect.runtime.distributed.DistributedHerder"
PREFIX = "[Worker clientId=connect-127.0.0.1:1, groupId=g] "
CONNECT = "org.apache.kafka.connect.runtime.Connect"
WORKER = "org.apache.kafka.connect.runtime.Worker"
APPINFO = "org.apache.kafka.common.utils.AppInfoParser"


def test_timestamps_are_utc_milliseconds() -> None:
    assert parse_timestamp("1970-01-01 00:00:01", "250") == 1250
    [first] = scan(
        line("00:00:00,007", "Kafka Connect starting", CONNECT).replace("2026-11-25", "1970-01-01")
    )
    assert (first.at_ms, first.kind) == (7, "starting")


def test_scan_real_lines() -> None:
    kinds = [ln.kind for ln in scan(sample("w0"))]
    assert kinds[0] == "starting" and kinds[-1] == "stopped"
    assert {"run_connector", "run_task", "release_connector", "release_task", "stop_task", "epoch"} <= set(
        kinds
    )
    # The one-off lines around them are not events: "Creating task", "Closing the Kafka producer"...
    assert all(ln.kind != "run_task" or "Starting task" in ln.text for ln in scan(sample("w0")))


def test_worker_with_two_incarnations() -> None:
    timeline = worker_timeline(sample("w1"), "w1", protocol="sessioned")
    assert timeline.incarnations == 2 and not timeline.unconfirmed_stops
    types = [e["type"] for e in timeline.events]
    assert types.count("worker_start") == 2 and types.count("worker_stop") == 2
    first_stop = types.index("worker_stop")
    # Everything w1 ran in its first life is released, one by one, before "Kafka Connect stopped".
    ran = {(e["connector"], e["task"]) for e in timeline.events[:first_stop] if e["type"] == "run"}
    released = {(e["connector"], e["task"]) for e in timeline.events[:first_stop] if e["type"] == "release"}
    assert ran == released == {("a", -1), ("b", 0), ("b", 3)}
    assert all(e["protocol"] == "sessioned" for e in timeline.events if e["type"].startswith("worker_"))
    times = [e["t_ms"] for e in timeline.events]
    assert times == sorted(times)


def test_task_release_is_the_closed_producer_not_the_stop_request() -> None:
    text = "\n".join(
        [
            line("10:00:00,000", "Kafka Connect starting", CONNECT),
            line("10:00:01,000", PREFIX + "Starting task c-0", HERDER),
            line("10:00:02,000", "Stopping task c-0", WORKER),
            line("10:00:02,500", "App info kafka.producer for connector-producer-c-0 unregistered", APPINFO),
            line("10:00:03,000", PREFIX + "Starting task c-1", HERDER),
            line("10:00:04,000", "Stopping task c-1", WORKER),
            line("10:00:05,000", "Kafka Connect stopped", CONNECT),
        ]
    )
    timeline = worker_timeline(text, "w")
    [release] = [e for e in timeline.events if e["type"] == "release"]
    assert (release["connector"], release["task"], release["t_ms"] % 10_000) == ("c", 0, 2500)
    # c-1's stop never completed: it runs until the worker stopped, and that is reported.
    assert timeline.events[-1]["type"] == "worker_stop"
    assert len(timeline.unconfirmed_stops) == 1 and "Stopping task c-1" in timeline.unconfirmed_stops[0]


def test_killed_worker_ends_with_a_crash_only_when_the_driver_says_so() -> None:
    alive = worker_timeline(sample("w2"), "w2")
    assert [e["type"] for e in alive.events].count("worker_crash") == 0
    killed = worker_timeline(sample("w2"), "w2", ended_at_ms=[KILLED_W2])
    assert killed.events[-1] == {"t_ms": KILLED_W2, "type": "worker_crash", "worker": "w2", "protocol": None}


def test_restart_without_a_stop_line_is_a_crash() -> None:
    text = "\n".join(
        [
            line("10:00:00,000", "Kafka Connect starting", CONNECT),
            line("10:00:01,000", PREFIX + "Starting connector c", HERDER),
            line("10:00:09,000", "Kafka Connect starting", CONNECT),
        ]
    )
    types = [
        e["type"]
        for e in worker_timeline(text, "w", ended_at_ms=[parse_timestamp("2026-11-25 10:00:05", "0")]).events
    ]
    assert types == ["worker_start", "run", "worker_crash", "worker_start"]


def test_merge_puts_runs_first_within_a_millisecond() -> None:
    a = [{"t_ms": 5, "type": "release", "worker": "a", "connector": "c", "task": 0}]
    b = [{"t_ms": 5, "type": "run", "worker": "b", "connector": "c", "task": 0}]
    merged = merge_streams([a, b])
    assert [e["type"] for e in merged] == ["run", "release"]
    # Within one stream the order is kept even at equal times.
    same = [{"t_ms": 5, "type": "release", "worker": "a"}, {"t_ms": 5, "type": "run", "worker": "a"}]
    assert [e["type"] for e in merge_streams([same])] == ["release", "run"]


def test_real_logs_judged_by_the_checker() -> None:
    logs = [
        JavaWorkerLog("w0", sample("w0"), "sessioned"),
        JavaWorkerLog("w1", sample("w1"), "sessioned"),
        JavaWorkerLog("w2", sample("w2"), "sessioned", [KILLED_W2]),
    ]
    t0 = parse_timestamp("2026-11-25 15:44:43", "0")
    created = config_event(parse_timestamp("2026-11-25 15:44:56", "356"), {"a": 4, "b": 4})
    end = parse_timestamp("2026-11-25 15:45:52", "900")  # before w0 and w1 were stopped
    timeline = build_event_log(logs, [created], t0_ms=t0, end_ms=end)
    assert timeline.events[-1] == {"t_ms": end - t0, "type": "drill_end", "worker": None}
    summary = check(timeline.events)
    assert summary.ok, summary.violations
    assert summary.moves > 0 and summary.rebalances == 32
    # w2's work waited for the session timeout (10 s) and the scheduled delay before moving.
    assert summary.max_unowned_ms > 10_000
    # Cutting the log before the hand-over finished is caught as not converged.
    early = build_event_log(logs, [created], t0_ms=t0, end_ms=KILLED_W2 + 1000)
    assert not check(early.events).converged


def test_two_owners_in_the_logs_are_an_overlap() -> None:
    text = sample("w0")
    # A second worker whose log claims b-1 too while w0 runs it.
    intruder = "\n".join(
        [
            line("15:44:50,000", "Kafka Connect starting", CONNECT),
            line("15:45:00,000", PREFIX + "Starting task b-1", HERDER),
        ]
    )
    timeline = build_event_log(
        [JavaWorkerLog("w0", text), JavaWorkerLog("x", intruder)], t0_ms=0, end_ms=None
    )
    summary = check(timeline.events)
    assert not summary.exclusive and "b-1" in summary.violations[0]


# --- witness -------------------------------------------------------------------------------------


def records(
    task: int, seqnos: range | list[int], start_ts: int, step: int = 50
) -> list[tuple[bytes, bytes, int]]:
    return [(b"%d" % task, b"%d" % s, start_ts + i * step) for i, s in enumerate(seqnos)]


def test_decode_record() -> None:
    assert decode_record(b"3", b"17") == (3, 17)
    assert decode_record(None, json.dumps({"task": 1, "seqno": 2}).encode()) == (1, 2)
    assert decode_record(b"x", b"1") is None and decode_record(b"true", b"1") is None


def test_witness_passes_clean_hand_overs() -> None:
    # Task 0 runs 0..99, its new owner resumes from the last commit (80) and goes on: a restart.
    clean = records(0, range(100), 0) + records(0, range(80, 200), 20_000) + records(1, range(50), 0)
    report = check_sequences(clean)
    assert report.ok and report.restarts == {0: 1} and not report.gaps and report.tasks == {0: 220, 1: 50}


def test_witness_flags_interleaved_instances() -> None:
    # A second instance of task 0 starts at seqno 90 while the first goes on from 100.
    first = records(0, range(100, 120), 10_000)
    second = records(0, range(90, 110), 10_010)
    interleaved = [r for pair in zip(first, second, strict=True) for r in pair]
    report = check_sequences(records(0, range(100), 5000) + interleaved)
    assert not report.ok and "two instances interleave" in report.duplicates[0]


def test_witness_ignores_a_coincidental_resume_long_after() -> None:
    # A (..101) is replaced by B (96..110, killed after committing 101); C resumes at 102, 30 s later.
    log = (
        records(0, range(90, 102), 0) + records(0, range(96, 111), 1000) + records(0, range(102, 120), 31_000)
    )
    report = check_sequences(log)
    assert report.ok and report.restarts == {0: 2}


def test_witness_reports_gaps_apart() -> None:
    report = check_sequences(records(0, [0, 1, 2, 5, 6], 0))
    assert report.ok and report.gaps == ["task 0: seqno 2 then 5 (ts 150)"]


def test_prints_witness() -> None:
    def prints(task: int, seqnos: range, t: int) -> str:
        return "\n".join(
            json.dumps(
                {"task": task, "seqno": s, "time_ms": t + 50 * i, "name": "c", "topic": "t"},
                separators=(",", ":"),
            )
            for i, s in enumerate(seqnos)
        )

    assert len(worker_prints(prints(0, range(3), 0) + "\n[2026-...] INFO x (y)\n", "w")) == 3
    handed_over = {"w1": prints(0, range(20), 0), "w2": prints(0, range(15, 40), 2000)}
    assert check_prints(handed_over) == []
    twice = {"w1": prints(0, range(20), 0), "w2": prints(0, range(15, 40), 500)}
    [problem] = check_prints(twice)
    assert problem.startswith("c-0: printed on w1")


def test_lines_written_out_of_time_order_are_sorted() -> None:
    text = "\n".join(
        [
            line("10:00:00,000", "Kafka Connect starting", CONNECT),
            line("10:00:01,000", PREFIX + "Starting task c-0", HERDER),
            line("10:00:02,044", PREFIX + "Starting task c-1", HERDER),
            line("10:00:02,007", "App info kafka.producer for connector-producer-c-0 unregistered", APPINFO),
        ]
    )
    events = worker_timeline(text, "w").events
    assert [(e["type"], e.get("task")) for e in events] == [
        ("worker_start", None),
        ("run", 0),
        ("release", 0),
        ("run", 1),
    ]

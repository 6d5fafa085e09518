"""java_timeline (Java worker logs → event-log events) and the VerifiableSource witness, on real log
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


# --- drill (f): config changes during a rolling restart (f_*.log, README there) -----------------

F_T0 = parse_timestamp("2026-11-25 17:28:14", "134")
F_CONFIGS = [  # the drill's config events: when each REST call returned
    (parse_timestamp("2026-11-25 17:28:39", "847"), {"alpha": 4}),
    (parse_timestamp("2026-11-25 17:28:40", "023"), {"alpha": 4, "gamma": 3}),
    (parse_timestamp("2026-11-25 17:28:46", "813"), {"alpha": 4, "gamma": 3, "beta": 4}),
    (parse_timestamp("2026-11-25 17:29:03", "403"), {"alpha": 4, "gamma": 3, "beta": 2}),
    (parse_timestamp("2026-11-25 17:29:16", "908"), {"alpha": 4, "beta": 2}),
]
F_END = parse_timestamp("2026-11-25 17:29:32", "401")  # before the teardown stopped the workers


def spans(events: list[dict], connector: str, task: int) -> list[tuple[str, int]]:
    """(type, t_ms) of the run/release events of one item."""
    item = (connector, task)
    return [(e["type"], e["t_ms"]) for e in events if (e.get("connector"), e.get("task")) == item]


def test_tasks_above_a_lowered_tasks_max_are_released_when_their_producer_closes() -> None:
    """beta 4 -> 2 tasks: the leader writes two task configs; w2 logs "Handling task config update
    by stopping tasks [beta-1, beta-3], which will be restarted after rebalance if still assigned",
    closes both producers, and after the rebalance starts beta-1 again but not beta-3 (revoked:
    "Ignoring stop request for unowned task beta-3")."""
    events = worker_timeline(sample("f_w2"), "w2").events
    closed = parse_timestamp("2026-11-25 17:29:06", "844")
    assert spans(events, "beta", 3)[-1] == ("release", closed)
    assert [(kind, at) for kind, at in spans(events, "beta", 1) if closed <= at < closed + 9000] == [
        ("release", parse_timestamp("2026-11-25 17:29:06", "958")),
        ("run", parse_timestamp("2026-11-25 17:29:07", "056")),
        ("release", parse_timestamp("2026-11-25 17:29:15", "193")),  # w2's own restart
    ]
    assert [kind for kind, at in spans(events, "beta", 3) if at > closed] == []


def test_a_deleted_connectors_tasks_are_released() -> None:
    events = worker_timeline(sample("f_w0"), "w0").events
    removed = parse_timestamp("2026-11-25 17:29:16", "853")  # "Connector gamma config removed"
    assert spans(events, "gamma", 0)[-1] == ("release", parse_timestamp("2026-11-25 17:29:17", "380"))
    assert spans(events, "gamma", 1)[-1] == ("release", parse_timestamp("2026-11-25 17:29:17", "379"))
    later = [e for e in events if e.get("connector") == "gamma" and e["t_ms"] > removed]
    assert later and all(e["type"] == "release" for e in later)


def test_config_change_drill_judged_by_the_checker() -> None:
    logs = [JavaWorkerLog(w, sample(f"f_{w}"), "sessioned") for w in ("w0", "w1", "w2")]
    configs = [config_event(at, connectors) for at, connectors in F_CONFIGS]
    timeline = build_event_log(logs, configs, t0_ms=F_T0, end_ms=F_END)
    summary = check(timeline.events)
    assert summary.ok, summary.violations
    assert not timeline.unconfirmed_stops
    # Cut just after the delete returned: gamma's tasks still run (being revoked), so not converged.
    early = build_event_log(logs, configs, t0_ms=F_T0, end_ms=F_CONFIGS[-1][0] + 100)
    assert any("gamma" in v and "not configured" in v for v in check(early.events).violations)


def test_a_task_that_could_not_be_instantiated_never_ran() -> None:
    """Before the bridge answered CONFIG_MISMATCH while its config view lagged, w1 was assigned the
    tasks of a connector deleted a moment earlier: "Starting task gamma-0", then "Couldn't
    instantiate task gamma-0 because it has an invalid task configuration" (no config left). The
    failed start releases what its "Starting" line opened."""
    timeline = worker_timeline(sample("f_stale_w1"), "w1")
    failed = parse_timestamp("2026-11-25 17:19:24", "723")
    assert spans(timeline.events, "gamma", 0)[-2:] == [("run", failed - 1), ("release", failed)]
    failed_2 = parse_timestamp("2026-11-25 17:19:24", "774")
    assert spans(timeline.events, "gamma", 2)[-1] == ("release", failed_2)
    assert not timeline.unconfirmed_stops


def test_a_failed_second_start_does_not_release_the_running_instance() -> None:
    """Java refuses to start an item a worker already runs ("Task already exists in this worker"),
    and the herder logs that as "Couldn't instantiate task": the first instance goes on."""
    text = "\n".join(
        [
            line("10:00:00,000", "Kafka Connect starting", CONNECT),
            line("10:00:01,000", PREFIX + "Starting task c-0", HERDER),
            line("10:00:02,000", PREFIX + "Starting task c-0", HERDER),
            line(
                "10:00:02,001",
                PREFIX + "Couldn't instantiate task c-0 because it has an invalid task configuration. "
                "This task will not execute until reconfigured.",
                HERDER,
            ).replace("INFO", "ERROR"),
            line("10:00:03,000", PREFIX + "Starting connector k", HERDER),
            line("10:00:03,005", "Failed to start connector k", WORKER),
            line("10:00:04,000", PREFIX + "Starting task k-0", HERDER),
            line("10:00:04,005", "Failed to start task k-0", WORKER),
        ]
    )
    events = worker_timeline(text, "w").events
    assert spans(events, "c", 0) == [("run", parse_timestamp("2026-11-25 10:00:01", "000"))]
    assert [t for t, _ in spans(events, "k", -1)] == ["run", "release"]
    assert [t for t, _ in spans(events, "k", 0)] == ["run", "release"]


def test_recorded_streams_merge_with_java_logs() -> None:
    """Drill (b): a new-protocol worker's events, recorded in the test process in epoch ms, merge with
    a Java worker's log on the same clock and t0; a hand-over is safe only after the Java release,
    and a run in the release's own millisecond counts as an overlap."""
    t0 = parse_timestamp("2026-11-25 15:00:00", "000")
    java = "\n".join(
        [
            line("15:00:00,000", "Kafka Connect starting", CONNECT),
            line("15:00:01,000", PREFIX + "Starting task b-0", HERDER),
            line("15:00:02,000", "App info kafka.producer for connector-producer-b-0 unregistered", APPINFO),
            line("15:00:02,100", "Kafka Connect stopped", CONNECT),
        ]
    )

    def recorded(run_at: int) -> list[dict[str, object]]:
        return [
            {"t_ms": t0 + 1_500, "type": "worker_start", "worker": "n0", "protocol": "new"},
            {"t_ms": t0 + run_at, "type": "run", "worker": "n0", "connector": "b", "task": 0},
        ]

    config = config_event(t0 + 900, {"b": 1})
    timeline = build_event_log([JavaWorkerLog("w0", java)], [config], t0_ms=t0, recorded=[recorded(2_001)])
    assert [(e["t_ms"], e["type"], e["worker"]) for e in timeline.events if e["type"] != "config"] == [
        (0, "worker_start", "w0"),
        (1000, "run", "w0"),
        (1500, "worker_start", "n0"),
        (2000, "release", "w0"),
        (2001, "run", "n0"),
        (2100, "worker_stop", "w0"),
    ]
    assert check(timeline.events).exclusive
    same_ms = build_event_log([JavaWorkerLog("w0", java)], [config], t0_ms=t0, recorded=[recorded(2_000)])
    assert not check(same_ms.events).exclusive


def test_too_many_tasks_between_a_lower_tasks_max_and_its_task_configs() -> None:
    """Real lines (drill (f), w2): assigned beta-0 and beta-3 after beta's tasks.max went 4 -> 2 but
    before the two new task configs were written, the worker refuses to create them
    (``TooManyTasksException``, logged as ``Failed to start task``); nothing ran until beta-0 was
    started again 400 ms later."""
    herder = "[Worker clientId=connect-127.0.0.1:48977, groupId=connect-f] "
    text = "\n".join(
        [
            f"[2026-11-25 17:43:21,438] INFO Kafka Connect starting ({CONNECT})",
            f"[2026-11-25 17:43:42,812] INFO {herder}Starting task beta-0 ({HERDER})",
            f"[2026-11-25 17:43:42,813] ERROR Failed to start task beta-0 ({WORKER})",
            "org.apache.kafka.connect.runtime.TooManyTasksException: The connector beta has generated 4 "
            "tasks, which is greater than 2, the maximum number of tasks it is configured to create.",
            f"[2026-11-25 17:43:42,814] INFO {herder}Starting task beta-3 ({HERDER})",
            f"[2026-11-25 17:43:42,815] ERROR Failed to start task beta-3 ({WORKER})",
            f"[2026-11-25 17:43:43,066] INFO {herder}Tasks [beta-0, beta-1] configs updated ({HERDER})",
            f"[2026-11-25 17:43:43,222] INFO {herder}Starting task beta-0 ({HERDER})",
            "[2026-11-25 17:43:46,714] INFO App info kafka.producer for connector-producer-beta-0 "
            "unregistered (org.apache.kafka.common.utils.AppInfoParser)",
        ]
    )
    events = worker_timeline(text, "w2").events
    at = lambda hms, ms: parse_timestamp(f"2026-11-25 {hms}", ms)  # noqa: E731
    assert spans(events, "beta", 0) == [
        ("run", at("17:43:42", "812")),
        ("release", at("17:43:42", "813")),
        ("run", at("17:43:43", "222")),
        ("release", at("17:43:46", "714")),
    ]
    assert spans(events, "beta", 3) == [("run", at("17:43:42", "814")), ("release", at("17:43:42", "815"))]

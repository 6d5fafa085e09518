"""The same rolling restart of real Connect workers, three ways: what the ``connect`` protocol buys.

One Apache Kafka 4.3.1 broker (``tests/kafka_fixtures.start_kafka_broker``), real Connect 4.3.1
workers and real ``connect-bridge serve --upstream`` processes; nothing is mocked. Each way runs
four workers (sessioned, ``scheduled.rebalance.max.delay.ms`` 5 s, the bridge's delay too) with two
VerifiableSource connectors of ten tasks each (20 tasks), then restarts the workers one by one
(SIGTERM, started again with the same worker id and REST url, waiting until the drill checker finds
the group converged and balanced before the next one):

1. ``kafka``: stock sessioned workers on Kafka's own group coordinator (the baseline, measured in
   the same run);
2. ``bridge_classic``: the same stock workers through the bridge;
3. ``bridge_connect``: the workers with the connect-bridge-worker add-on and
   ``group.protocol=connect`` through the bridge.

Figures, from the workers' own logs (``connect_bridge.drills.java_timeline``, as every Java drill),
over the window from the first SIGTERM until the group converged after the last restart:

- ``task_seconds_not_running``: summed over the 20 tasks, the time each ran on no worker;
- ``moves``: a task starting on another worker than the one that ran it last; ``foreign_moves``
  those to a worker that is not where the task ran when the rolling restart began (a task going
  back to its restarted owner is a move but not a foreign one);
- ``longest_pause_s``: the longest time one task ran nowhere;
- the drill checker's verdict (exclusive, live) over the whole way, and the topic witness.

The ``connect`` protocol's promise is fewer moves and shorter pauses: ``promise_kept`` says whether
``bridge_connect`` has at most the foreign moves and at most the longest pause of each classic way.

    python benchmarks/rolling_restart_three_ways.py [--tasks N] [--delay-ms MS] [--ways kafka,...]
        [--keep DIR]

``--keep DIR`` keeps each way's logs (``DIR/<way>/connect/...`` for the workers, ``DIR/<way>/bridge``
for the bridge) to read after the run.

Takes ~10-15 min on two cores (24 JVM starts). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from kafka_fixtures import BridgeProcess, KafkaBroker, start_bridge, start_kafka_broker  # noqa: E402
from kafka_workers import ConnectWorker, start_connect_worker  # noqa: E402
from test_java_drills import JavaDrill, now_ms  # noqa: E402

WAYS: dict[str, tuple[bool, str | None]] = {
    "kafka": (False, None),
    "bridge_classic": (True, None),
    "bridge_connect": (True, "connect"),
}
"""Way -> (through the bridge, the workers' ``group.protocol``: None is stock ConnectDistributed)."""
WORKERS = ("w0", "w1", "w2", "w3")
CONNECTORS = ("alpha", "beta")


def rolling_figures(events: Iterable[dict[str, Any]], start_ms: int, end_ms: int) -> dict[str, Any]:
    """The figures of one rolling restart from a drill's event log (``t_ms`` relative, as written
    by ``build_event_log``), over the window ``[start_ms, end_ms]``. Only tasks count (``task`` >=
    0), not connectors. A task's home is the worker running it at ``start_ms``."""
    running: dict[tuple[str, int], set[str]] = {}
    last: dict[tuple[str, int], str] = {}
    home: dict[tuple[str, int], str] = {}
    idle_since: dict[tuple[str, int], int] = {}
    not_running_ms = 0
    longest_ms = 0
    moves = foreign = 0
    started = False

    def begin_window() -> None:
        for item, workers in running.items():
            if workers:
                home[item] = sorted(workers)[0]
            elif item in idle_since:
                idle_since[item] = max(idle_since[item], start_ms)

    def idle(item: tuple[str, int], t: int) -> None:
        if not running[item]:
            idle_since[item] = max(t, start_ms)

    def busy(item: tuple[str, int], t: int) -> None:
        nonlocal not_running_ms, longest_ms
        since = idle_since.pop(item, None)
        if since is not None and started and t > since:
            span = min(t, end_ms) - since
            not_running_ms += max(span, 0)
            longest_ms = max(longest_ms, span)

    for event in sorted(events, key=lambda e: e["t_ms"]):
        t, kind = event["t_ms"], event["type"]
        if not started and t >= start_ms:
            started = True
            begin_window()
        if t > end_ms:
            break
        if kind in ("run", "release") and event.get("task", -1) < 0:
            continue
        if kind == "run":
            item, worker = (event["connector"], event["task"]), event["worker"]
            busy(item, t)
            if started and item in last and last[item] != worker:
                moves += 1
                foreign += worker != home.get(item)
            running.setdefault(item, set()).add(worker)
            last[item] = worker
        elif kind == "release":
            item = (event["connector"], event["task"])
            running.setdefault(item, set()).discard(event["worker"])
            idle(item, t)
        elif kind in ("worker_stop", "worker_crash"):
            for item, workers in running.items():
                if event["worker"] in workers:
                    workers.discard(event["worker"])
                    idle(item, t)
    if not started:
        begin_window()
    for since in idle_since.values():  # still not running at the end of the window
        span = max(end_ms - max(since, start_ms), 0)
        not_running_ms += span
        longest_ms = max(longest_ms, span)
    return {
        "task_seconds_not_running": round(not_running_ms / 1000, 1),
        "moves": moves,
        "foreign_moves": foreign,
        "longest_pause_s": round(longest_ms / 1000, 2),
    }


def one_way(way: str, broker: KafkaBroker, workdir: Path, tasks: int, delay_ms: int) -> dict[str, Any]:
    """Start four workers and the connectors, restart each worker in turn, measure."""
    through_bridge, group_protocol = WAYS[way]
    workdir.mkdir(parents=True, exist_ok=True)
    bridges: list[BridgeProcess] = []

    def bridge(upstream: str, **kwargs: Any) -> BridgeProcess:
        started = start_bridge(upstream, workdir / "bridge", **kwargs)
        bridges.append(started)
        return started

    def worker(**kwargs: Any) -> ConnectWorker:
        return start_connect_worker(workdir / "connect", fast_start=False, **kwargs)

    proxy: Callable[..., BridgeProcess] | None = bridge if through_bridge else None
    began = time.monotonic()
    drill = JavaDrill(broker, worker, proxy, workdir, f"bench-{way.replace('_', '-')}", delay_ms=delay_ms)
    try:
        for name in WORKERS:
            drill.start(name, group_protocol=group_protocol)
        per_connector = tasks // len(CONNECTORS)
        for connector in CONNECTORS:
            drill.create(connector, per_connector, via=WORKERS[0])
        drill.wait_running(timeout_s=120)
        drill.wait_converged(timeout_s=120)
        time.sleep(2)  # every task writes a while before the first stop
        start = now_ms()
        for name in WORKERS:
            drill.stop(name)
            drill.start(name, group_protocol=group_protocol)
            drill.wait_converged(timeout_s=180)
        timeline, summary = drill.wait_converged(timeout_s=180)
        end = timeline.events[-1]["t_ms"] + drill.t0
        figures = rolling_figures(timeline.events, start - drill.t0, end - drill.t0)
        witness = drill.witness()
        figures |= {
            "restart_window_s": round((end - start) / 1000, 1),
            "exclusive": summary.exclusive,
            "live": summary.live,
            "checker_ok": summary.ok,
            "witness_ok": all(r.ok for r in witness.values()),
            "rebalances": summary.rebalances,
            "wall_s": round(time.monotonic() - began, 1),
        }
        return figures
    finally:
        drill.teardown()
        for started in bridges:
            started.stop()


def promise(ways: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Does ``bridge_connect`` have at most the foreign moves and the longest pause of each classic way?"""
    new = ways.get("bridge_connect")
    classic = [ways[w] for w in ("kafka", "bridge_classic") if w in ways]
    if new is None or not classic:
        return {"promise_kept": None}
    fewer = all(new["foreign_moves"] <= c["foreign_moves"] for c in classic)
    shorter = all(new["longest_pause_s"] <= c["longest_pause_s"] for c in classic)
    return {
        "fewer_or_equal_foreign_moves": fewer,
        "shorter_or_equal_pause": shorter,
        "promise_kept": fewer and shorter,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tasks", type=int, default=20, help="tasks in all (two connectors)")
    parser.add_argument(
        "--delay-ms", type=int, default=5000, help="scheduled.rebalance.max.delay.ms of workers and bridge"
    )
    parser.add_argument("--ways", default=",".join(WAYS), help=f"comma-separated, of {', '.join(WAYS)}")
    parser.add_argument(
        "--keep",
        metavar="DIR",
        type=Path,
        default=None,
        help="keep every way's worker and bridge logs under DIR/<way>/ (default: a temporary dir, removed)",
    )
    args = parser.parse_args(argv)
    chosen = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = sorted(set(chosen) - set(WAYS))
    if unknown:
        parser.error(f"unknown ways {unknown}")
    began = time.monotonic()
    out: dict[str, Any] = {
        "workers": len(WORKERS),
        "tasks": args.tasks,
        "delay_ms": args.delay_ms,
        "baseline": "kafka",
        "ways": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) if args.keep is None else args.keep
        broker = start_kafka_broker(root / "kafka", heap="1g", fast_start=False)
        try:
            for way in chosen:
                out["ways"][way] = figures = one_way(way, broker, root / way, args.tasks, args.delay_ms)
                print(f"{way}: {json.dumps(figures)}", file=sys.stderr, flush=True)
        finally:
            broker.stop()
    out |= promise(out["ways"])
    out["wall_s"] = round(time.monotonic() - began, 1)
    for way, f in out["ways"].items():
        print(
            f"{way:15} task-s not running {f['task_seconds_not_running']:6.1f}  moves {f['moves']:3} "
            f"(foreign {f['foreign_moves']:3})  longest pause {f['longest_pause_s']:5.2f} s  "
            f"checker {'ok' if f['checker_ok'] else 'FAILED'}  "
            f"witness {'ok' if f['witness_ok'] else 'FAILED'}"
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""High availability (issue 17): what several bridges cost on the write path and how fast they fail over.

One Apache Kafka 4.3.1 KRaft broker (``tests/kafka_fixtures.start_kafka_broker``, as
``benchmarks/proxy.py --kafka``), real kafka-python clients and real ``connect-bridge serve``
processes; nothing is mocked. The last line printed is one JSON object.

    python benchmarks/ha.py [--quick] [--session-ms S]

1. **State writes.** The latency of one ``append`` + ``sync`` (what the committer does before a
   response may leave) of real group records: a classic Connect group of three workers driven
   through JoinGroup/SyncGroup by a ``GroupCoordinator``, whose records (two, ~1.7 KiB) are written
   as the server would. The baseline is what one bridge uses today: the single-partition
   idempotent ``TopicRecordStore`` (one ``acks=all`` produce per sync). Against it, the
   ``PartitionedTopicStore`` of several bridges: each sync is one *transaction* per partition it
   touches, so it costs extra round trips to the transaction coordinator (AddPartitionsToTxn
   before the first send, EndTxn at commit, and the broker writes commit markers before EndTxn
   is answered). Two cases: ``single`` (each sync carries one group, so one transaction) and
   ``batch`` (each sync carries one group of every partition: ``partitions`` transactions, whose
   sends overlap but whose commits are sequential). Both stores run the same syncs in interleaved
   rounds (order swapped each round, after an unmeasured warm-up) so broker warm-up and machine
   drift favour neither. Reported: p50/p99/mean per store and the ratio partitioned/topic. There
   is no target: the ratio is the price of fencing, reported as measured.
   Also the **load time** of a partition (``acquire``: ``init_transactions`` fences the old
   writer, then a ``read_committed`` read to the last stable offset) holding 1, 100 and 1,000
   groups: the part of a failover that grows with the groups.
2. **Failover.** Three bridges with ``ha.enabled`` share a state topic of four partitions, three
   of which hold 1, 100 and 1,000 groups (written before the bridges start, with the partitioned
   store, as records of the same engine-driven groups). For each of those partitions: kill -9 of
   its owner, then ``GET /admin/ha`` of the surviving bridges every 50 ms until one of them owns
   the partition (loaded, answering). Reported per repetition: ``assigned_s`` (first seen loading
   or owned: the broker noticed the dead bridge and rebalanced), ``owned_s`` (loaded, answering)
   and ``routed_s`` (every survivor's owner view, hence FindCoordinator, names the new owner). The
   killed bridge is restarted and the fleet balanced again between repetitions. Baseline: the
   bridges' session timeout S (the broker expires a dead bridge S after its last heartbeat); target:
   ``owned_s`` <= S + 3 s, 1,000 groups included (issue 17 asks S + 2 s at 1,000 groups).
   **Drain** (the rolling-upgrade step): ``POST /admin/drain`` on the owner of the largest
   partition, and the time until the other bridges own every partition it held (target: well
   under S, since the drained bridge leaves the group instead of being timed out).

``--quick`` (a smoke run, under a minute with the broker's start): fewer syncs, partitions of 1 and
100 groups, one repetition of each measurement. ``--session-ms`` (default 6000, the broker's
``group.min.session.timeout.ms``) is the bridges' ``ha.session_timeout_ms``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connect_bridge.bridge.stores.partitioned_store import PartitionedTopicStore
from connect_bridge.bridge.stores.topic_store import TopicRecordStore
from connect_bridge.codecs.connect_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)
from connect_bridge.state.classic.api import JoinGroupRequest, SyncGroupRequest
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.partitioning import partition_for
from connect_bridge.state.record_codec import encode_record
from connect_bridge.state.records import Record

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from kafka_fixtures import BridgeProcess, start_bridge, start_kafka_broker  # noqa: E402
from kafka_processes import free_ports  # noqa: E402
from polling import wait_until  # noqa: E402

HOST = "127.0.0.1"
WORKERS = 3
CONFIG_OFFSET = 7
MEMBER_SESSION_MS = 1_800_000
"""The written members' classic session (the engine's maximum): the bridges give every loaded member
a fresh session, and nobody heartbeats for these groups, so they must outlive the benchmark."""
WRITE_PARTITIONS = 6
"""Partitions of the write benchmark's topic (``ha.partitions``' default): the batch case's
transactions per sync."""
FLEET_PARTITIONS = 4
FLEET_SIZE = 3
POLL_S = 0.05
STORE_TIMEOUTS = {"load_timeout_s": 60.0, "sync_timeout_s": 10.0}


# ------------------------------------------------------------------------------------------ records


def group_records(group: str) -> list[Record]:
    """The records a bridge writes for a classic Connect group of three workers that joined and
    synced once (the group record as created, then with every worker's subscription, v2
    ``sessioned``, and its assignment of two connectors' tasks): the bytes a bridge really writes
    for such a group, so the produce requests have the sizes they have in production."""
    coord = GroupCoordinator(CoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    urls = [f"http://connect-worker-{i}.connect.svc.cluster.local:8083" for i in range(WORKERS)]

    def join(member: str, url: str, token: object = None) -> JoinGroupRequest:
        subscription = Subscription(url, CONFIG_OFFSET, Assignment.build(0, "", "", CONFIG_OFFSET, []))
        return JoinGroupRequest(
            group,
            member,
            "connect",
            (("sessioned", encode_subscription(subscription, 2)),),
            session_timeout_ms=MEMBER_SESSION_MS,
            rebalance_timeout_ms=60_000,
            client_id=f"connect-{url}",
            api_version=9,
            token=token,
        )

    members = []
    for url in urls:  # v4+: the first JoinGroup only hands out the member id
        first = coord.classic_join(join("", url), 0)
        assert first is not None
        members.append(first.member_id)
    answers = {}
    for i, (member, url) in enumerate(zip(members, urls, strict=True)):
        answer = coord.classic_join(join(member, url, i), 0)
        if answer is not None:
            answers[i] = answer
    coord.advance(0)
    answers.update(coord.drain_responses())  # type: ignore[arg-type]
    leader, generation = answers[0].leader, answers[0].generation_id
    assignments = tuple(
        (
            member,
            encode_assignment(
                Assignment.build(
                    0, leader, urls[0], CONFIG_OFFSET, [(f"{c}-connector", i) for c in ("jdbc", "s3")]
                ),
                1,
            ),
        )
        for i, member in enumerate(members)
    )
    for i, member in enumerate(members):
        sync = SyncGroupRequest(
            group,
            member,
            generation,
            None,
            "connect",
            "sessioned",
            assignments if member == leader else (),
            token=f"sync-{i}",
        )
        coord.classic_sync(sync, 0)
    coord.advance(0)
    coord.drain_responses()
    records = coord.drain_records()
    if not records or coord.describe_any(group).state != "Stable":  # type: ignore[union-attr]
        raise RuntimeError(f"the engine did not make {group!r} a Stable group")
    return records


def groups_in(partition: int, count: int, partitions: int, prefix: str) -> list[str]:
    """``count`` group ids whose records live in ``partition`` (``partition_for``, as every bridge)."""
    found: list[str] = []
    i = 0
    while len(found) < count:
        group = f"{prefix}-{i}"
        if partition_for(group, partitions) == partition:
            found.append(group)
        i += 1
    return found


def summary(samples: Sequence[float]) -> dict[str, float]:
    """p50, p99 and mean of ``samples`` (seconds) in milliseconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(p99 * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
    }


# ------------------------------------------------------------------------------------------ 1. writes


def timed_sync(store: TopicRecordStore | PartitionedTopicStore, records: list[Record]) -> float:
    """One ``append`` + ``sync``, as the committer does per group commit; its duration."""
    start = time.perf_counter()
    store.append(records)
    fenced = store.sync()
    elapsed = time.perf_counter() - start
    if fenced:  # nobody else writes these transactional ids: a fence here is a bug, not a figure
        raise RuntimeError(f"partitions {sorted(fenced)} fenced during the benchmark")
    return elapsed


def state_writes(bootstrap: str, per_round: int, rounds: int, suffix: str) -> dict[str, Any]:
    """Interleaved rounds of the single and batch cases on both stores (module docstring, 1)."""
    parts = WRITE_PARTITIONS
    by_partition = [groups_in(p, 4, parts, f"write-{suffix}") for p in range(parts)]
    records = {g: group_records(g) for gs in by_partition for g in gs}
    single = [records[by_partition[i % parts][(i // parts) % 4]] for i in range(per_round)]
    batch = [[r for gs in by_partition for r in records[gs[i % 4]]] for i in range(per_round)]
    cases: dict[str, list[list[Record]]] = {"single": single, "batch": batch}

    topic = TopicRecordStore.open(bootstrap, f"ha-bench-single-{suffix}", **STORE_TIMEOUTS)
    partitioned = PartitionedTopicStore.open(
        bootstrap,
        f"ha-bench-partitioned-{suffix}",
        partitions=parts,
        transactional_id_prefix=f"ha-bench-{suffix}",
        **STORE_TIMEOUTS,
    )
    stores: dict[str, TopicRecordStore | PartitionedTopicStore] = {"topic": topic, "partitioned": partitioned}
    samples: dict[str, dict[str, list[float]]] = {c: {s: [] for s in stores} for c in cases}
    try:
        topic.load()
        for p in range(parts):
            partitioned.acquire(p)
        for batches in cases.values():  # warm-up, not measured: connections, JIT, first transactions
            for store in stores.values():
                for one in batches[: max(3, per_round // 5)]:
                    timed_sync(store, one)
        for r in range(rounds):
            order = list(stores) if r % 2 == 0 else list(reversed(stores))
            for case, batches in cases.items():
                for name in order:
                    samples[case][name].extend(timed_sync(stores[name], one) for one in batches)
    finally:
        topic.close()
        partitioned.close()

    out: dict[str, Any] = {
        "records_per_group": len(single[0]),
        "bytes_per_group": sum(len(k) + len(v or b"") for k, v in map(encode_record, single[0])),
        "syncs_per_store_per_case": per_round * rounds,
        "partitions": parts,
    }
    for case in cases:
        topic_s, part_s = summary(samples[case]["topic"]), summary(samples[case]["partitioned"])
        out[case] = {
            "transactions_per_sync": 1 if case == "single" else parts,
            "topic": topic_s,
            "partitioned": part_s,
            "ratio_p50": round(part_s["p50_ms"] / topic_s["p50_ms"], 2),
            "ratio_p99": round(part_s["p99_ms"] / topic_s["p99_ms"], 2),
        }
        print(
            f"writes {case:6s} topic p50 {topic_s['p50_ms']:6.2f} p99 {topic_s['p99_ms']:6.2f} ms | "
            f"partitioned p50 {part_s['p50_ms']:6.2f} p99 {part_s['p99_ms']:6.2f} ms | "
            f"ratio p50 {out[case]['ratio_p50']} p99 {out[case]['ratio_p99']}",
            flush=True,
        )
    return out


# ------------------------------------------------------------------------------------------ load


def populate(bootstrap: str, topic: str, txn_prefix: str, sizes: dict[int, int], suffix: str) -> None:
    """Write ``sizes[p]`` engine-made groups into partition ``p`` of the fleet's state topic (before
    any bridge starts), through the partitioned store as the bridge itself writes them."""
    store = PartitionedTopicStore.open(
        bootstrap, topic, partitions=FLEET_PARTITIONS, transactional_id_prefix=txn_prefix, **STORE_TIMEOUTS
    )
    try:
        for partition, count in sizes.items():
            store.acquire(partition)
            groups = groups_in(partition, count, FLEET_PARTITIONS, f"connect-{suffix}")
            for start in range(0, count, 100):  # transactions of at most 100 groups (~90 KiB)
                store.append([r for g in groups[start : start + 100] for r in group_records(g)])
                store.sync()
    finally:
        store.close()


def load_times(
    bootstrap: str, topic: str, txn_prefix: str, sizes: dict[int, int], reps: int
) -> dict[str, Any]:
    """How long a new owner's ``acquire`` of each populated partition takes (fence, then read to the
    last stable offset): the part of a failover that grows with the groups in the partition."""
    store = PartitionedTopicStore.open(
        bootstrap,
        topic,
        partitions=FLEET_PARTITIONS,
        transactional_id_prefix=txn_prefix,
        create=False,
        **STORE_TIMEOUTS,
    )
    out: dict[str, Any] = {}
    try:
        for partition, count in sizes.items():
            runs, live = [], 0
            for _ in range(reps):
                start = time.perf_counter()
                live = len(store.acquire(partition))
                runs.append(time.perf_counter() - start)
                store.release(partition)
            out[str(count)] = {
                "live_records": live,
                "acquire_s": [round(r, 3) for r in runs],
                "median_s": round(statistics.median(runs), 3),
            }
            print(
                f"load {count:5d} groups ({live} records): acquire {out[str(count)]['median_s']} s",
                flush=True,
            )
    finally:
        store.close()
    return out


# ------------------------------------------------------------------------------------------ 2. failover


@dataclass
class Fleet:
    """The bridges, each with its admin listener (``GET /admin/ha``, ``POST /admin/drain``)."""

    bridges: list[BridgeProcess]
    admins: list[str]

    def status(self, i: int) -> dict[str, Any] | None:
        """Bridge ``i``'s ``GET /admin/ha``, or None when it does not answer (dead, starting)."""
        try:
            with urllib.request.urlopen(f"http://{self.admins[i]}/admin/ha", timeout=2) as answer:
                return json.loads(answer.read())
        except (OSError, ValueError):
            return None

    def alive(self) -> list[int]:
        return [i for i, b in enumerate(self.bridges) if b.process.poll() is None]

    def owner_of(self, partition: int) -> int | None:
        for i in self.alive():
            status = self.status(i)
            if status is not None and partition in status["owned"]:
                return i
        return None

    def balanced(self) -> bool:
        """Every bridge up and owning a share, every partition owned once, every view agreeing:
        the steady state a measurement starts from."""
        statuses = [self.status(i) for i in range(len(self.bridges))]
        if any(s is None or not s["lease_valid"] or not s["owned"] for s in statuses):
            return False
        owned = [(p, s["node_id"]) for s in statuses if s is not None for p in s["owned"]]
        if sorted(p for p, _ in owned) != list(range(FLEET_PARTITIONS)):
            return False
        expected = {str(p): node for p, node in owned}
        return all(
            {p: o["node_id"] for p, o in s["owners"].items()} == expected for s in statuses if s is not None
        )

    def wait_balanced(self, timeout_s: float = 90.0) -> None:
        wait_until(self.balanced, timeout_s, 0.2, lambda: f"fleet not balanced: {self.describe()}")

    def describe(self) -> str:
        return "; ".join(f"bridge {i}: {self.status(i)}" for i in range(len(self.bridges)))

    def stop(self) -> None:
        for bridge in self.bridges:
            bridge.stop()


def start_fleet(bootstrap: str, workdir: Path, topic: str, suffix: str, session_ms: int) -> Fleet:
    """Three ``serve --upstream`` processes with ``ha.enabled`` (the settings of tests/test_ha.py)."""
    admins = [f"{HOST}:{port}" for port in free_ports(FLEET_SIZE)]
    fleet = Fleet([], admins)
    try:
        for i, admin in enumerate(admins):
            ha = {
                "enabled": True,
                "partitions": FLEET_PARTITIONS,
                "group": f"bridges-{suffix}",
                "transactional_id_prefix": f"state-{suffix}",
                "node_id": i + 1,
                "session_timeout_ms": session_ms,
                "heartbeat_interval_ms": max(100, session_ms // 6),
                "refresh_owners_ms": 500,
            }
            fleet.bridges.append(
                start_bridge(
                    bootstrap,
                    workdir / f"bridge-{i}",
                    settings={"state_topic": topic, "ha": ha},
                    metrics_listen=admin,
                    timeout_s=60,
                )
            )
        fleet.wait_balanced()
    except BaseException:
        fleet.stop()
        raise
    return fleet


def watch(
    fleet: Fleet, partitions: set[int], among: list[int], t0: float, timeout_s: float
) -> tuple[dict[str, float], int, dict[str, Any]]:
    """Poll ``among``'s ``/admin/ha`` every 50 ms from ``t0`` until they own all of ``partitions``
    and agree on who does. Returns the times (``assigned_s``: first seen loading or owned;
    ``owned_s``: all owned; ``routed_s``: every view names the owners), one new owner, its status."""
    times: dict[str, float] = {}
    while True:
        tick = time.monotonic()
        statuses = {}
        for i in among:
            status = fleet.status(i)
            seen = time.monotonic() - t0
            if status is None:
                continue
            statuses[i] = status
            held = partitions & set(status["owned"])
            if "assigned_s" not in times and (held or partitions & set(status["loading"])):
                times["assigned_s"] = seen
        owners = {p: i for i, s in statuses.items() for p in s["owned"] if p in partitions}
        now = time.monotonic() - t0
        if "owned_s" not in times and owners.keys() == partitions:
            times["owned_s"] = now
        if "owned_s" in times and len(statuses) == len(among):
            expected = {str(p): i + 1 for p, i in owners.items()}
            views = [{p: o["node_id"] for p, o in s["owners"].items()} for s in statuses.values()]
            if owners.keys() == partitions and all(expected.items() <= v.items() for v in views):
                times["routed_s"] = now
                new_owner = owners[min(partitions)]
                return {k: round(v, 3) for k, v in times.items()}, new_owner, statuses[new_owner]
        if now > timeout_s:
            raise RuntimeError(
                f"partitions {sorted(partitions)} not taken over in {timeout_s}s: {fleet.describe()}"
            )
        time.sleep(max(0.0, POLL_S - (time.monotonic() - tick)))


def kill_owner(fleet: Fleet, partition: int, groups: int) -> dict[str, Any]:
    """kill -9 of ``partition``'s owner; the survivors' take-over times; restart and rebalance."""
    owner = fleet.owner_of(partition)
    if owner is None:
        raise RuntimeError(f"nobody owns partition {partition}: {fleet.describe()}")
    rest = [i for i in fleet.alive() if i != owner]
    fleet.bridges[owner].kill()
    t0 = time.monotonic()
    times, new_owner, status = watch(fleet, {partition}, rest, t0, 60.0)
    loaded = sum(1 for p in status["groups"].values() if p == partition)
    print(
        f"kill -9 bridge {owner + 1} ({groups} groups in partition {partition}): bridge {new_owner + 1} "
        f"assigned {times['assigned_s']:.2f} s, owns {times['owned_s']:.2f} s, "
        f"routed {times['routed_s']:.2f} s "
        f"({loaded} groups loaded)",
        flush=True,
    )
    fleet.bridges[owner].restart(60)
    fleet.wait_balanced()
    return {"killed": owner + 1, "new_owner": new_owner + 1, "groups_loaded": loaded, **times}


def drain_owner(fleet: Fleet, partition: int) -> dict[str, Any]:
    """``POST /admin/drain`` on ``partition``'s owner; when the others own all it held; restart."""
    owner = fleet.owner_of(partition)
    status = fleet.status(owner) if owner is not None else None
    if owner is None or status is None:
        raise RuntimeError(f"nobody owns partition {partition}: {fleet.describe()}")
    held = set(status["owned"])
    rest = [i for i in fleet.alive() if i != owner]
    answered: dict[str, Any] = {}

    def post() -> None:
        from connect_bridge.cli_admin import admin_endpoint, admin_token

        token = admin_token(admin_endpoint(fleet.admins[owner]), 10)  # a change needs the admin token
        request = urllib.request.Request(
            f"http://{fleet.admins[owner]}/admin/drain",
            data=b"",
            method="POST",
            headers={"Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                answered["status"] = answer.status
        except (OSError, urllib.error.HTTPError) as exc:
            answered["error"] = repr(exc)
        answered["returned_s"] = round(time.monotonic() - t0, 3)

    caller = threading.Thread(target=post, daemon=True)
    t0 = time.monotonic()
    caller.start()
    times, _, _ = watch(fleet, held, rest, t0, 60.0)
    caller.join(60)
    fleet.bridges[owner].process.wait(30)  # a drained bridge stops by itself
    print(
        f"drain bridge {owner + 1} (partitions {sorted(held)}): others own them {times['owned_s']:.2f} s, "
        f"routed {times['routed_s']:.2f} s, POST answered {answered.get('returned_s')} s",
        flush=True,
    )
    fleet.bridges[owner].restart(60)
    fleet.wait_balanced()
    return {"drained": owner + 1, "partitions": sorted(held), **times, "post": answered}


def failovers(
    bootstrap: str, workdir: Path, sizes: dict[int, int], reps: int, session_ms: int
) -> dict[str, Any]:
    """Populate, then measure load times, kill -9 take-overs and drains (module docstring, 2)."""
    suffix = uuid.uuid4().hex[:8]
    topic, txn_prefix = f"bridge-state-{suffix}", f"state-{suffix}"
    populate(bootstrap, topic, txn_prefix, sizes, suffix)
    out: dict[str, Any] = {"load": load_times(bootstrap, topic, txn_prefix, sizes, max(reps, 3))}
    started = time.monotonic()
    fleet = start_fleet(bootstrap, workdir, topic, suffix, session_ms)
    out["fleet_start_s"] = round(time.monotonic() - started, 1)
    target_s = session_ms / 1000 + 3
    try:
        kills: dict[str, list[dict[str, Any]]] = {str(count): [] for count in sizes.values()}
        for _ in range(reps):
            for partition, count in sizes.items():
                kills[str(count)].append(kill_owner(fleet, partition, count))
        largest = max(sizes, key=lambda p: sizes[p])
        drains = [drain_owner(fleet, largest) for _ in range(reps)]
    finally:
        fleet.stop()
    out["kill_9"] = {
        count: {
            "runs": runs,
            "owned_s_max": max(r["owned_s"] for r in runs),
            "owned_s_median": round(statistics.median(r["owned_s"] for r in runs), 3),
            "routed_s_max": max(r["routed_s"] for r in runs),
        }
        for count, runs in kills.items()
    }
    out["drain"] = {"runs": drains, "owned_s_max": max(d["owned_s"] for d in drains)}
    out["failover_target_s"] = target_s
    out["failover_target_met"] = all(r["owned_s"] <= target_s for runs in kills.values() for r in runs)
    out["drain_under_session"] = out["drain"]["owned_s_max"] < session_ms / 1000
    return out


# ------------------------------------------------------------------------------------------ main


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a small run (smoke test)")
    parser.add_argument("--session-ms", type=int, default=6000, help="the bridges' ha.session_timeout_ms")
    args = parser.parse_args(argv)
    per_round, rounds = (20, 2) if args.quick else (100, 4)
    sizes = {0: 1, 1: 100} if args.quick else {0: 1, 1: 100, 2: 1000}
    reps = 1 if args.quick else 2
    started = time.monotonic()
    out: dict[str, Any] = {"quick": args.quick, "session_timeout_s": args.session_ms / 1000}
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_kafka_broker(Path(tmp) / "kafka", heap="1g", fast_start=False)
        try:
            suffix = uuid.uuid4().hex[:8]
            out["state_writes"] = state_writes(broker.bootstrap, per_round, rounds, suffix)
            out |= failovers(broker.bootstrap, Path(tmp), sizes, reps, args.session_ms)
        finally:
            broker.stop()
    out["wall_s"] = round(time.monotonic() - started, 1)
    kills = out["kill_9"]
    print(
        f"failover (kill -9 -> owned) max {max(k['owned_s_max'] for k in kills.values()):.2f} s vs session "
        f"{out['session_timeout_s']:.0f} s (target <= {out['failover_target_s']:.0f} s: "
        f"{'met' if out['failover_target_met'] else 'NOT met'}); "
        f"drain max {out['drain']['owned_s_max']:.2f} s; "
        f"single-group sync p50 partitioned/topic {out['state_writes']['single']['ratio_p50']}"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()

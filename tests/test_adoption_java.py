"""Adoption proved with real Java Connect workers on a real Kafka broker (issue 16, docs/adoption.md).

Three sessioned Apache Kafka 4.3.1 Connect workers start directly on the broker with two
VerifiableSource connectors of four tasks; ``connect-bridge serve --upstream`` with
``adoption.groups`` stands in front; the workers are restarted one at a time with
``bootstrap.servers`` pointing at the bridge. The bridge relays the group while some workers are
still on Kafka's coordinator, takes it over once every member is behind it (its admin endpoint says
``adopted``), and Kafka's own group empties. The drill checker (workers' logs) and the connector
witness (the tasks' sequence numbers on the broker) find no task running twice, and every item ran
again within the liveness bound (scheduled delay + one rebalance timeout). The bridge is killed
(kill -9) and restarted once while relaying and once after the takeover: the ownership records say
which side owns the group each time. While the bridge coordinates the adopted group, a new-protocol
worker (the live drills' reference worker) joins it (the group converts to ``connect``, the engine
moves work to it) and leaves again (the group converts back to ``classic``), the group staying
``adopted``. Then the group is handed back (``connect-bridge release``,
with a kill -9 of the bridge right after the hand-back starts): the bridge's group ends ``released``
and gone, Kafka's group has all three workers (through the bridge, relayed), and the workers are
repointed at the broker one at a time. The longest time an item ran nowhere is printed
(docs/adoption.md, "Measured").
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from connect_bridge.bridge.admin import adopt_path, release_path
from connect_bridge.bridge.adoption.upstream import UpstreamGroups
from connect_bridge.bridge.describe import describe
from connect_bridge.bridge.security.upstream_security import UpstreamSecurity
from connect_bridge.cli_admin import admin_endpoint, admin_token
from connect_bridge.state.classic.state import ClassicDescribedGroup
from kafka_fixtures import BridgeProcess, ConnectWorker, KafkaBroker
from kafka_processes import free_ports
from polling import wait_until
from test_java_drills import DELAY_MS, JavaDrill, NewWorkers, group_type, now_ms, wait_group_type


def upstream_group(broker: KafkaBroker, group: str) -> ClassicDescribedGroup:
    """Kafka's own DescribeGroups answer for ``group`` (not the bridge's)."""
    host, port = broker.bootstrap.rsplit(":", 1)

    async def ask() -> ClassicDescribedGroup:
        groups = UpstreamGroups([(host, int(port))], UpstreamSecurity())
        try:
            return await groups.describe(group)
        finally:
            await groups.close()

    return asyncio.run(ask())


def admin(
    metrics: str, method: str = "GET", path: str = "/admin/groups", timeout: float = 10
) -> tuple[int, Any]:
    headers = {}
    if method != "GET":  # a change carries the bridge's admin token (admin_access.py)
        headers["Authorization"] = f"Bearer {admin_token(admin_endpoint(metrics), timeout)}"
    request = urllib.request.Request(f"http://{metrics}{path}", method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def adopt_command(group: str, metrics: str) -> subprocess.CompletedProcess[str]:
    """``connect-bridge adopt GROUP --admin METRICS`` as an operator runs it."""
    argv = [sys.executable, "-m", "connect_bridge.cli", "adopt", group, "--admin", metrics]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def unowned_gaps(events: list[dict[str, Any]]) -> list[tuple[tuple[str, int], int, int]]:
    """Every interval in which a task (or connector) that had run ran on no worker: (item, from,
    to), times as in the drill's event log (ms since its start)."""
    running: dict[tuple[str, int], set[str]] = {}
    since: dict[tuple[str, int], int] = {}
    gaps: list[tuple[tuple[str, int], int, int]] = []

    def stopped(item: tuple[str, int], worker: str, t: int) -> None:
        running[item].discard(worker)
        if not running[item]:
            since[item] = t

    for e in events:
        t, kind = e["t_ms"], e["type"]
        if kind == "run":
            item = (e["connector"], e["task"])
            if item in since:
                gaps.append((item, since.pop(item), t))
            running.setdefault(item, set()).add(e["worker"])
        elif kind == "release":
            stopped((e["connector"], e["task"]), e["worker"], t)
        elif kind == "worker_stop":
            for item, workers in running.items():
                if e["worker"] in workers:
                    stopped(item, e["worker"], t)
    return gaps


def bridge_group(drill: JavaDrill) -> dict[str, Any]:
    """The group as ``connect-bridge describe`` shows it through the bridge."""
    (group,) = asyncio.run(describe(drill.bridge.host, drill.bridge.port, drill.group))
    return group


def upgrade_and_downgrade(drill: JavaDrill, metrics: str) -> tuple[int, int, int]:
    """A new-protocol worker (the live drills' reference worker) joins the adopted group through the
    bridge, next to the three Java workers: the group converts to ``connect`` and the engine moves
    work to it; then it stops: with only classic members left the group converts back to
    ``classic``. The group stays ``adopted`` at the same taken-over generation throughout (the
    conversions are the bridge's, the ownership record is untouched). Returns the longest time an
    item ran nowhere across the upgrade and across the downgrade (ms) and how many items the new
    worker ran; the checker (no item on two workers at once) runs on every poll of
    ``wait_converged``."""
    before = admin(metrics)[1][drill.group]
    assert group_type(drill) == "classic", bridge_group(drill)
    joined_at = now_ms() - drill.t0
    drill.new = drill.new or NewWorkers()
    host, port = drill.bridge.bootstrap.rsplit(":", 1)
    drill.new.start("n0", host, int(port), drill.group, "http://n0:8083/")
    assert group_type(drill) == "connect", bridge_group(drill)  # converted when it joined
    members = bridge_group(drill)["members"]
    assert len(members) == 4, members
    drill.wait_converged(75)  # balanced over four workers: the engine moved work to n0
    converted_at = now_ms() - drill.t0
    moved = {
        (e["connector"], e["task"]) for e in drill.new.events() if e["type"] == "run" and e["worker"] == "n0"
    }
    assert moved, "the new-protocol worker was given nothing"
    status = admin(metrics)[1][drill.group]
    assert status["phase"] == "adopted", status
    assert status["taken_over_generation"] == before["taken_over_generation"], status
    # A hand-back now is refused: Kafka's coordinator would not know the new-protocol member.
    code, answer = admin(metrics, "POST", release_path(drill.group))
    refusal = (
        f"group {drill.group} cannot be handed back yet: 1 member(s) use the new protocol: "
        "downgrade them first (connect-bridge docs migration)"
    )
    assert (code, answer["released"], answer["message"]) == (409, False, refusal), answer
    assert admin(metrics)[1][drill.group]["phase"] == "adopted"

    left_at = now_ms() - drill.t0
    drill.stop_new("n0")
    wait_group_type(drill, "classic", timeout_s=30)  # downgraded once the last new member left
    drill.wait_converged(75)
    back_at = now_ms() - drill.t0
    assert len(bridge_group(drill)["members"]) == 3, bridge_group(drill)
    status = admin(metrics)[1][drill.group]
    assert status["phase"] == "adopted", status

    gaps = unowned_gaps(drill.timeline(end_ms=now_ms()).events)

    def longest(start: int, end: int) -> int:
        return max((to - since for _, since, to in gaps if since <= end and to >= start), default=0)

    return longest(joined_at, converted_at), longest(left_at, back_at), len(moved)


KILL_STEPS = ("holding", "committing")
"""Takeover steps the admin endpoint reports while the group's requests are held (docs/adoption.md)."""


def kill_inside_takeover(drill: JavaDrill, metrics: str, timeout_s: float = 30.0) -> str | None:
    """``POST .../adopt`` on the released group while a second thread polls the admin endpoint as
    fast as it answers and kills the bridge (SIGKILL) the moment it reports a takeover step in
    :data:`KILL_STEPS`; the step it saw, or None when the takeover finished before any poll caught
    it (no kill). The bridge answers a poll only while the takeover awaits (the upstream's
    DescribeGroups, the fsync of its records), so a poll that says ``holding`` or ``committing``
    was answered from inside the window."""
    pid = drill.bridge.process.pid
    seen: list[str] = []
    done = threading.Event()

    def poll() -> None:
        deadline = time.monotonic() + timeout_s
        while not done.is_set() and time.monotonic() < deadline:
            try:
                step = admin(metrics, timeout=2)[1].get(drill.group, {}).get("takeover_step")
            except OSError:
                continue
            if step in KILL_STEPS:
                os.kill(pid, signal.SIGKILL)
                seen.append(step)
                return

    poller = threading.Thread(target=poll, name="takeover-poller", daemon=True)
    poller.start()
    try:
        code, answer = admin(metrics, "POST", adopt_path(drill.group))
    except OSError:  # the kill closed the connection before the answer
        code, answer = 0, {}
    if code == 200 and answer.get("adopted"):
        done.set()  # adopted before a poll caught the window: no kill
    poller.join(timeout_s + 5)  # not adopted yet (409): the auto takeover follows, the poller waits
    done.set()
    return seen[0] if seen else None


def released_and_observed(drill: JavaDrill, metrics: str) -> None:
    """Wait until the group is ``released``, Kafka's group Stable with all three workers, and the
    bridge observed that generation through its relay (every member behind it)."""

    def ready() -> bool:
        status = admin(metrics)[1].get(drill.group) or {}
        observed = status.get("members") == status.get("members_behind_bridge") == 3
        group = upstream_group(drill.broker, drill.group)
        return status.get("phase") == "released" and observed and group.state == "Stable"

    wait_until(
        ready, 60, 0.5, lambda: f"{admin(metrics)[1]}; upstream {upstream_group(drill.broker, drill.group)}"
    )


def readopt_with_a_kill(drill: JavaDrill, metrics: str, attempts: int = 3) -> str:
    """Adopt the released group again and kill -9 the bridge inside the takeover; after the restart
    exactly one coordinator owns the group. Retried (hand-back, adopt again) when the takeover was
    over before a poll caught it. Returns what happened, for the printed figures."""
    attempt, step = 0, None
    while step is None:
        attempt += 1
        assert attempt <= attempts, f"no poll caught the takeover window in {attempts} attempts"
        released_and_observed(drill, metrics)
        step = kill_inside_takeover(drill, metrics)
        if step is None:  # a miss: the takeover completed before a poll caught it; hand back, retry
            status = admin(metrics)[1][drill.group]
            assert status["phase"] == "adopted", status
            release = release_command(drill, metrics)
            assert release.returncode == 0, release
    drill.bridge_restart()
    status = wait_until(lambda: admin(metrics)[1].get(drill.group), 30, 0.2)
    upstream = upstream_group(drill.broker, drill.group)
    outcome = f"killed while {step} (attempt {attempt}); after the restart {status['phase']}, Kafka's group "
    outcome += f"{upstream.state} with {len(upstream.members)} members"
    if status["phase"] == "relaying":
        # The records were not durable: Kafka's coordinator alone has the group, the bridge none.
        assert status["bridge_members"] == 0, status
        assert upstream.state == "Stable" and len(upstream.members) == 3, upstream
        # The restart lost the observation and Kafka's group is stable: the bridge asks the
        # workers to rejoin (a REBALANCE_IN_PROGRESS to each one's next heartbeat, docs/adoption.md
        # "Asking for a rebalance"), the rebalance runs through the relay and the takeover follows.
        # No worker is restarted for it (before, one had to be, or the group stayed relaying).
    else:
        # Durable: the bridge has the group at the generation it took over. Kafka's copy lists at
        # most the adopted members (the LeaveGroup may not have been sent), which expire there.
        assert status["phase"] == "adopted" and status["conflict"] is None, status
        adopted_ids = {m["member_id"] for m in bridge_group(drill)["members"]}
        assert {m.member_id for m in upstream.members} <= adopted_ids, (upstream, adopted_ids)
        wait_until(
            lambda: upstream_group(drill.broker, drill.group).state in ("Empty", "Dead"),
            45,
            0.5,
            lambda: f"upstream still has the group: {upstream_group(drill.broker, drill.group)}",
        )
    wait_until(
        lambda: admin(metrics)[1][drill.group]["phase"] == "adopted", 90, 0.5, lambda: admin(metrics)[1]
    )
    log = drill.bridge.log_path.read_text(encoding="utf-8", errors="replace")
    outcome += f"; members asked to rejoin: {log.count('adoption: asked member')}"
    wait_until(lambda: len(bridge_group(drill)["members"]) == 3, 60, 0.5, lambda: bridge_group(drill))
    assert upstream_group(drill.broker, drill.group).state in ("Empty", "Dead")
    drill.wait_converged(90)
    return outcome


def release_command(drill: JavaDrill, metrics: str) -> subprocess.CompletedProcess[str]:
    """``connect-bridge release GROUP --admin METRICS``: returns once the group is released."""
    argv = [sys.executable, "-m", "connect_bridge.cli", "release", drill.group, "--admin", metrics]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


class AdoptionDrill(JavaDrill):
    """A Java drill whose workers start on the broker itself and are then repointed at the bridge."""

    def start_on(self, name: str, bootstrap: str) -> ConnectWorker:
        worker = self._start_worker(
            bootstrap=bootstrap,
            group_id=self.group,
            protocol="sessioned",
            name=name,
            rest_port=self.ports.get(name),
            scheduled_rebalance_max_delay_ms=DELAY_MS,
        )
        self.workers[name] = worker
        self.ports[name] = worker.rest_port
        self.protocols[name] = "sessioned"
        return worker


@pytest.fixture
def adoption_drill(
    kafka_broker: KafkaBroker,
    connect_worker: Callable[..., ConnectWorker],
    bridge_proxy: Callable[..., BridgeProcess],
    tmp_path: Path,
) -> Iterator[tuple[AdoptionDrill, str]]:
    """The drill and its bridge's metrics (and admin) address."""
    metrics = f"127.0.0.1:{free_ports(1)[0]}"

    def with_adoption(upstream: str, **kwargs: Any) -> BridgeProcess:
        group = kwargs["group"]
        settings = {"adoption": {"groups": re.escape(group), "check_interval_ms": 500}}
        return bridge_proxy(upstream, settings=settings, metrics_listen=metrics, **kwargs)

    drill = AdoptionDrill(kafka_broker, connect_worker, with_adoption, tmp_path, "adoption")
    yield drill, metrics
    drill.teardown(graceful=False)


def test_adopt_a_running_java_cluster(adoption_drill: tuple[AdoptionDrill, str]) -> None:
    drill, metrics = adoption_drill
    broker = drill.broker.bootstrap
    drill.start_together(("w0", "w1", "w2"), lambda name: drill.start_on(name, broker))
    drill.create("alpha", 4, via="w0")
    drill.create("beta", 4, via="w1")
    drill.wait_running()
    # The last worker's join may still be completing a rebalance when the tasks already run.
    wait_until(
        lambda: upstream_group(drill.broker, drill.group).state == "Stable",
        30,
        0.2,
        lambda: f"Kafka's group not Stable: {upstream_group(drill.broker, drill.group)}",
    )
    time.sleep(1)  # the tasks write witness records a while on Kafka's coordinator alone

    repointed_at = time.monotonic()
    for name in ("w0", "w1", "w2"):
        drill.stop(name)
        drill.start_on(name, drill.bridge.bootstrap)
        if name != "w2":  # mixed: some workers behind the bridge, the rest on Kafka: relaying
            status = admin(metrics)[1][drill.group]
            assert status["phase"] == "relaying", status
        if name == "w1":  # kill -9 while relaying: the record says the upstream still owns it
            drill.bridge_restart()
            wait_until(lambda: admin(metrics)[1].get(drill.group, {}).get("phase") == "relaying", 30, 0.2)
    refused = adopt_command(drill.group, metrics)  # w2 may not be behind yet: refused, or adopted
    assert refused.returncode == 0 or "not adopted" in refused.stderr, refused

    def adopted() -> dict[str, Any] | None:
        status = admin(metrics)[1].get(drill.group)
        return status if status and status["phase"] == "adopted" else None

    status = wait_until(adopted, 90, 0.2, lambda: f"not adopted: {admin(metrics)[1]}")
    took_s = time.monotonic() - repointed_at
    adopted_at = int(time.time() * 1000) - drill.t0
    # Every upstream member was behind the bridge at the takeover: all three, or the two repointed
    # ones when the takeover came while the last worker was stopped (it then joins the bridge's
    # group directly); either way the bridge's group ends with all three.
    assert status["members"] == status["members_behind_bridge"] >= 2, status
    wait_until(
        lambda: len(bridge_group(drill)["members"]) == 3,
        60,
        0.5,
        lambda: f"bridge group: {bridge_group(drill)}",
    )
    assert status["taken_over_generation"] >= 1, status
    # Kafka's coordinator no longer has the group's members (LeaveGroup of the adopted ids).
    wait_until(
        lambda: upstream_group(drill.broker, drill.group).state in ("Empty", "Dead"),
        30,
        0.2,
        lambda: f"upstream still has the group: {upstream_group(drill.broker, drill.group)}",
    )
    # Asking again is harmless and says so.
    code, answer = admin(metrics, "POST", adopt_path(drill.group))
    assert (code, answer["adopted"]) == (200, True), answer
    again = adopt_command(drill.group, metrics)
    assert again.returncode == 0 and "already adopted" in again.stdout, again
    described = subprocess.run(
        [sys.executable, "-m", "connect_bridge.cli", "describe", "--bootstrap", drill.bridge.bootstrap,
         "--admin", metrics, drill.group],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    line = f"adoption: adopted, taken over at generation {status['taken_over_generation']}"
    assert line in described.stdout, described
    gauge = f'connect_bridge_group_ownership{{group="{drill.group}",phase="adopted"}} 1.0'
    assert gauge in urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10).read().decode()

    # kill -9 after the takeover: the records say the bridge owns the group; it comes back Stable
    # in the same generation and the workers carry on with it (no second group upstream).
    drill.bridge_restart()
    after_restart = wait_until(adopted, 30, 0.2, lambda: f"not adopted after restart: {admin(metrics)[1]}")
    assert after_restart["taken_over_generation"] == status["taken_over_generation"], after_restart

    after = upstream_group(drill.broker, drill.group)
    assert after.state in ("Empty", "Dead") and not after.members, after
    drill.wait_converged(90)  # the bridge's group settled before the hand-back starts

    upgrade_gap, downgrade_gap, upgrade_moved = upgrade_and_downgrade(drill, metrics)

    # Hand-back: release, kill -9 of the bridge while releasing, the release command waits for
    # ``released``; Kafka's coordinator then has all three workers, still behind the bridge.
    release_at = int(time.time() * 1000) - drill.t0
    code, answer = admin(metrics, "POST", release_path(drill.group))
    assert (code, answer["released"]) == (200, True), answer
    drill.bridge_restart()
    released = release_command(drill, metrics)
    assert released.returncode == 0 and "is released" in released.stdout, released
    released_at = int(time.time() * 1000) - drill.t0

    def upstream_has_all() -> bool:
        group = upstream_group(drill.broker, drill.group)
        return group.state == "Stable" and len(group.members) == 3

    wait_until(upstream_has_all, 60, 0.5, lambda: f"upstream: {upstream_group(drill.broker, drill.group)}")

    # Adopt the released group again, with a kill -9 of the bridge inside the takeover; then hand
    # it back once more before the workers are repointed at the broker.
    readopt_started = time.monotonic()
    readopted = readopt_with_a_kill(drill, metrics)
    again = release_command(drill, metrics)
    assert again.returncode == 0 and "is released" in again.stdout, again
    wait_until(upstream_has_all, 60, 0.5, lambda: f"upstream: {upstream_group(drill.broker, drill.group)}")
    readopt_s = time.monotonic() - readopt_started
    for name in ("w0", "w1", "w2"):  # repointed at the broker one at a time
        drill.stop(name)
        drill.start_on(name, broker)
    wait_until(upstream_has_all, 60, 0.5, lambda: f"upstream: {upstream_group(drill.broker, drill.group)}")
    final = admin(metrics)[1][drill.group]
    assert final["phase"] == "released" and final["bridge_members"] == 0, final

    summary, _ = drill.finish(timeout_s=90)
    assert summary.exclusive and summary.live, summary
    events_path = drill.out / "drill" / drill.name / "events.jsonl"
    events = [json.loads(line) for line in events_path.read_text(encoding="utf-8").splitlines()]
    # A gap open while the takeover happened (it was seen adopted within one poll, 0.2 s).
    gaps = unowned_gaps(events)
    around = [g for g in gaps if g[1] <= adopted_at and g[2] >= adopted_at - 1000]
    takeover_gap = max((to - start for _, start, to in around), default=0)
    handback = [to - start for _, start, to in gaps if start <= released_at and to >= release_at]
    print(
        f"adoption: taken over at generation {status['taken_over_generation']} "
        f"{took_s:.1f}s after the first repoint; longest time an item ran nowhere during the whole "
        f"adoption {summary.max_unowned_ms} ms (bound {summary.live_bound_ms} ms), across the takeover "
        f"itself {takeover_gap} ms; {summary.rebalances} rebalances; hand-back (with a kill -9) took "
        f"{(released_at - release_at) / 1000:.1f}s, longest time an item ran nowhere across it "
        f"{max(handback, default=0)} ms; a new-protocol worker joining the adopted group moved "
        f"{upgrade_moved} items to it, longest time an item ran nowhere across the upgrade "
        f"{upgrade_gap} ms, across the downgrade {downgrade_gap} ms; adopted again after the hand-back: "
        f"{readopted}; re-adoption and second hand-back took {readopt_s:.1f}s"
    )

"""High availability proved with real Java Connect workers (issue 17, docs/high-availability.md).

Three ``connect-bridge serve --upstream`` processes with ``ha.enabled`` share one partitioned state
topic on the session's Apache Kafka 4.3.1 broker; three sessioned Java Connect workers list all
three bridges in ``bootstrap.servers`` and run two VerifiableSource connectors of four tasks. The
Connect group's records live in one partition; the bridge that owns it coordinates the group.

1. Routing: exactly one bridge coordinates the group (its ``/admin/ha`` lists it), and every
   bridge's FindCoordinator names that bridge's proxy listener.
2. kill -9 of the owner: another bridge loads the partition; every worker keeps its member id and
   the generation carries on (no member is removed by the failover itself); the killed bridge
   comes back and rejoins the bridges' group.
3. A zombie: the owner is paused (SIGSTOP) until another bridge owns the partition and the workers
   found it, then resumed; its log shows it gave the partition up (lost or fenced), and nothing it
   did afterwards reached a worker (the checker and the witness, over the whole drill).
4. Drain: ``connect-bridge drain`` on the owner; it exits 0 and another bridge owns the partition
   well within a session timeout.

The drill checker (workers' logs) and the connector witness (the tasks' sequence numbers) judge the
whole run: no task ran twice, and every task ran again within the liveness bound. While no bridge
coordinates the group (from the kill, or the pause, until another bridge owns its partition) the
driver records ``bridge_restart`` .. ``bridge_up``, as for a single bridge's restart: the liveness
clock does not run while no coordinator exists, and restarts a failure detection later
(``drills/checker.py``). The longest time a task ran nowhere around each hand-over is printed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from connect_bridge.state.partitioning import partition_for
from kafka_fixtures import HOST, BridgeProcess, ConnectWorker, KafkaBroker
from kafka_processes import free_ports
from polling import wait_until
from test_adoption_java import admin, unowned_gaps
from test_ha import covered, find_coordinator, fleet_settings, listener
from test_java_drills import DELAY_MS, JavaDrill, now_ms

pytestmark = pytest.mark.heavy

PARTITIONS = 3
SESSION_MS = 6000
"""The bridges' session in their group: the broker's minimum (group.min.session.timeout.ms)."""
MEMBER = re.compile(
    r"Successfully joined group with generation Generation\{generationId=(\d+), memberId='([^']+)'"
)
"""A Java worker's join (``AbstractCoordinator``): its generation and member id."""
RESET = re.compile(r"Resetting generation and member id due to: [^\n]*")
"""A Java worker drops its member id (``AbstractCoordinator``): the error and request that made it."""
DISCOVERED = re.compile(rf"Discovered group coordinator {re.escape(HOST)}:(\d+) ")
"""A Java worker found its group coordinator (``AbstractCoordinator``): the listener's port."""
WORKER_REQUEST_TIMEOUT_MS = 10_000
"""The workers' ``request.timeout.ms`` (Connect's default is 40 s). A paused bridge keeps the TCP
connections of the clients that reach the broker through it open and answers nothing: a worker
whose FindCoordinator goes that way waits this long before it re-bootstraps from its list of
bridges (docs/high-availability.md, "Zombies"). Its JoinGroup keeps the rebalance timeout."""


class HaDrill(JavaDrill):
    """A Java drill behind three bridges sharing the groups; ``bridge`` is the one that owns the
    Connect group's partition (it changes as the drill moves the partition)."""

    def __init__(
        self,
        broker: KafkaBroker,
        connect_worker: Callable[..., ConnectWorker],
        bridge_proxy: Callable[..., BridgeProcess],
        out: Path,
        name: str,
    ) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.admins = [f"{HOST}:{port}" for port in free_ports(3)]
        self.bridges: list[BridgeProcess] = []
        self.paused: set[int] = set()

        def fleet(upstream: str, **kwargs: Any) -> BridgeProcess:
            """``JavaDrill`` asks for one bridge (with the drill's config view); start three."""
            for i, metrics in enumerate(self.admins):
                settings = fleet_settings(suffix, i + 1, PARTITIONS)
                self.bridges.append(
                    bridge_proxy(upstream, settings=settings, metrics_listen=metrics, **kwargs)
                )
            return self.bridges[0]

        super().__init__(broker, connect_worker, fleet, out, name)
        self.partition = partition_for(self.group, PARTITIONS)
        wait_until(lambda: self.covered(self.up()), 60, 0.3, lambda: "state partitions not all owned")
        self.bridge = self.bridges[self.wait_owner(self.up())]

    # --- the bridges --------------------------------------------------------------------------

    def start(
        self,
        name: str,
        protocol: str = "sessioned",
        overrides: dict[str, Any] | None = None,
        group_protocol: str | None = None,
    ) -> ConnectWorker:
        """Start ``name`` with every bridge in its ``bootstrap.servers``, as operators configure it
        (``group_protocol``: through the connect-bridge-worker add-on, as ``JavaDrill.start``)."""
        worker = self._start_worker(
            bootstrap=",".join(b.bootstrap for b in self.bridges),
            group_id=self.group,
            protocol=protocol,
            name=name,
            rest_port=self.ports.get(name),
            scheduled_rebalance_max_delay_ms=DELAY_MS,
            overrides={"request.timeout.ms": WORKER_REQUEST_TIMEOUT_MS} | (overrides or {}),
            group_protocol=group_protocol,
        )
        self.workers[name] = worker
        self.ports[name] = worker.rest_port
        self.protocols[name] = protocol
        return worker

    def status(self, i: int) -> dict[str, Any]:
        code, body = admin(self.admins[i], path="/admin/ha", timeout=3)
        assert code == 200, body
        return dict(body)

    def up(self) -> list[int]:
        """Bridges running and not paused."""
        return [i for i, b in enumerate(self.bridges) if b.process.poll() is None and i not in self.paused]

    def owner(self, among: list[int]) -> int | None:
        """The bridge of ``among`` that owns the Connect group's partition, None while none does."""
        for i in among:
            try:
                if self.partition in self.status(i)["owned"]:
                    return i
            except (OSError, urllib.error.URLError):
                continue
        return None

    def wait_owner(self, among: list[int], timeout_s: float = 40.0) -> int:
        found = wait_until(
            lambda: (owner,) if (owner := self.owner(among)) is not None else None,  # bridge 0 is falsy
            timeout_s,
            0.1,
            lambda: f"no owner among {among}",
        )
        return found[0]

    def covered(self, among: list[int]) -> bool:
        return covered(self.status, among, PARTITIONS)

    def down(self) -> int:
        """The Connect group has no coordinator from now on (see the module docstring)."""
        at = now_ms()
        self.driver.append({"t_ms": at, "type": "bridge_restart", "worker": None})
        return at

    def back(self, owner: int) -> int:
        """Bridge ``owner`` coordinates the Connect group again."""
        at = now_ms()
        self.driver.append({"t_ms": at, "type": "bridge_up", "worker": None})
        self.bridge = self.bridges[owner]
        return at

    # --- what the workers saw -----------------------------------------------------------------

    def joins(self) -> dict[str, list[tuple[int, str]]]:
        """Per worker (its current process): every (generation, member id) it joined with."""
        return {
            name: [(int(g), m) for g, m in MEMBER.findall(w.own_log())] for name, w in self.workers.items()
        }

    def coordinator(self, name: str, since: int) -> int | None:
        """The bridge whose listener worker ``name`` last discovered as its group coordinator after
        character ``since`` of its log (``AbstractCoordinator``'s line), None if none since."""
        found = DISCOVERED.findall(self.workers[name].log_text()[since:])
        ports = [listener(b) for b in self.bridges]
        return ports.index(int(found[-1])) if found and int(found[-1]) in ports else None

    def coordinated(self, settle_s: float = 4.0, timeout_s: float = 30.0) -> None:
        """The group keeps working: for ``settle_s`` in a row no worker loses its coordinator (a
        bridge that answers for the group but fails its responses, a closed connection or
        NOT_COORDINATOR each time, makes the workers log ``is unavailable or invalid`` over and over
        while their tasks, untouched, still look converged)."""
        lost = "is unavailable or invalid"
        marks = {name: len(w.log_text()) for name, w in self.workers.items()}
        since = deadline = time.monotonic()
        deadline += timeout_s
        while time.monotonic() - since < settle_s:
            assert time.monotonic() < deadline, (
                f"workers keep losing their coordinator ({self.bridge.log_path})"
            )
            time.sleep(0.5)
            for name, worker in self.workers.items():
                text = worker.log_text()
                if lost in text[marks[name] :]:
                    marks[name], since = len(text), time.monotonic()

    def longest_gap(self, start_ms: int, end_ms: int) -> int:
        """The longest time a task ran nowhere in a gap overlapping [start, end] (epoch ms)."""
        gaps = unowned_gaps(self.timeline(end_ms=now_ms()).events)
        start, end = start_ms - self.t0, end_ms - self.t0
        return max((to - since for _, since, to in gaps if since <= end and to >= start), default=0)


@pytest.fixture
def ha_drill(
    kafka_broker: KafkaBroker,
    connect_worker: Callable[..., ConnectWorker],
    bridge_proxy: Callable[..., BridgeProcess],
    tmp_path: Path,
) -> Iterator[HaDrill]:
    drill = HaDrill(kafka_broker, connect_worker, bridge_proxy, tmp_path, "ha")
    try:
        yield drill
    finally:
        for i in drill.paused:  # a failed test may leave one paused: it must be able to stop
            os.kill(drill.bridges[i].process.pid, signal.SIGCONT)
        drill.teardown(graceful=False)


def drain_command(metrics: str) -> subprocess.CompletedProcess[str]:
    """``connect-bridge drain --admin METRICS`` as an operator runs it."""
    argv = [sys.executable, "-m", "connect_bridge.cli", "drain", "--admin", metrics]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)


def test_drain_names_an_unreachable_admin_endpoint_in_one_line() -> None:
    (port,) = free_ports(1)
    done = drain_command(f"{HOST}:{port}")
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.count("\n") == 1 and "cannot reach the bridge's admin endpoint" in done.stderr, done


def routing(drill: HaDrill) -> int:
    """Step 1: one bridge coordinates the group and every bridge sends workers to it."""
    owner = drill.bridges.index(drill.bridge)
    for i in drill.up():
        groups = drill.status(i)["groups"]
        assert (drill.group in groups) == (i == owner), (i, owner, groups)
        answer = find_coordinator(listener(drill.bridges[i]), drill.group)
        assert answer == (0, HOST, listener(drill.bridges[owner])), (i, answer)
    return owner


def kill_the_owner(drill: HaDrill) -> str:
    """Step 2: kill -9 of the owner; the workers carry on with their member ids on the next one."""
    old = drill.bridges.index(drill.bridge)
    before = drill.joins()
    killed = drill.down()
    drill.bridge.kill()
    new = drill.wait_owner([i for i in drill.up() if i != old])
    up = drill.back(new)
    drill.wait_converged(90)
    drill.coordinated()
    after = drill.joins()
    for name, joined in after.items():
        # Same member id throughout; a join after the failover (if any) carries the generation on.
        assert {m for _, m in joined} == {before[name][-1][1]}, (
            name,
            before[name],
            joined,
            RESET.findall(drill.workers[name].own_log()),
        )
        assert all(g > before[name][-1][0] for g, _ in joined[len(before[name]) :]), (name, joined)
    gap = drill.longest_gap(killed, now_ms())
    drill.bridges[old].restart()  # it rejoins the bridges' group and may get partitions back
    wait_until(
        lambda: drill.covered(drill.up()), 60, 0.3, lambda: "partitions not all owned after the restart"
    )
    drill.bridge = drill.bridges[drill.wait_owner(drill.up())]
    return (
        f"kill -9 of bridge {old + 1}: bridge {new + 1} owned the partition {(up - killed) / 1000:.1f}s "
        f"later (session {SESSION_MS / 1000:.0f}s); longest time a task ran nowhere around it {gap} ms; "
        f"generations {sorted({g for j in after.values() for g, _ in j})}"
    )


def zombie(drill: HaDrill) -> str:
    """Step 3: pause the owner until another bridge owns the partition and workers moved to it;
    resume it; every worker ends at the owner of the moment (docs/high-availability.md, "Zombies")."""
    old = drill.bridges.index(drill.bridge)
    zombie = drill.bridges[old]
    logs = {name: len(w.log_text()) for name, w in drill.workers.items()}
    own_log = len(zombie.log_path.read_text(encoding="utf-8", errors="replace"))
    os.kill(zombie.process.pid, signal.SIGSTOP)
    drill.paused.add(old)
    stopped = drill.down()
    try:
        new = drill.wait_owner(drill.up())
        up = drill.back(new)
        moved = lambda: [n for n in drill.workers if drill.coordinator(n, logs[n]) == new]  # noqa: E731
        # A worker whose group client reaches the broker through the paused bridge cannot move: its
        # TCP connections stay open and it never re-bootstraps (docs/high-availability.md, "Limits").
        # So wait for the first worker (a bounded while for all of them), then resume the zombie
        # with the others still talking to it. A worker that can move does so once a request to
        # the paused bridge timed out (request.timeout.ms) and it looked the coordinator up again
        # (seen 7.6-13.4 s after the pause); one still at the paused bridge after twice the request
        # timeout is pinned, and the 30 s waited before only cost time.
        poll_until = time.monotonic() + 2 * WORKER_REQUEST_TIMEOUT_MS / 1000
        while len(moved()) < len(drill.workers) and (not moved() or time.monotonic() < poll_until):
            assert time.monotonic() < poll_until + 30, "no worker found the new owner"
            time.sleep(0.5)
        first = now_ms()
        pinned = sorted(set(drill.workers) - set(moved()))
    finally:
        os.kill(zombie.process.pid, signal.SIGCONT)
        drill.paused.discard(old)
    # What the resumed bridge logs: its membership lost the partition (expired while paused) or a
    # write of it was fenced; either way it stopped answering for the group.
    gave_up = re.compile(
        rf"gave up partitions \[[^\]]*\b{drill.partition}\b[^\]]*\] \(lost"
        rf"|partitions \[[^\]]*\b{drill.partition}\b[^\]]*\] of the state topic were taken over"
    )
    wait_until(
        lambda: gave_up.search(zombie.log_path.read_text(encoding="utf-8", errors="replace")[own_log:]),
        30,
        0.3,
        lambda: f"the resumed bridge did not log giving up partition {drill.partition}: {zombie.log_tail()}",
    )
    said = zombie.log_path.read_text(encoding="utf-8", errors="replace")[own_log:]
    how = "fenced" if "were taken over" in said else "lost"
    wait_until(lambda: drill.covered(drill.up()), 60, 0.3, lambda: "partitions not all owned after SIGCONT")
    owner = drill.wait_owner(drill.up())
    drill.bridge = drill.bridges[owner]
    wait_until(
        lambda: all(drill.coordinator(n, logs[n]) == drill.owner(drill.up()) for n in drill.workers),
        60,
        0.5,
        lambda: f"workers' coordinators {[drill.coordinator(n, logs[n]) for n in drill.workers]}",
    )
    drill.wait_converged(90)
    drill.coordinated()
    assert len(drill.live()) == 3
    gap = drill.longest_gap(stopped, now_ms())
    return (
        f"SIGSTOP of bridge {old + 1}: bridge {new + 1} owned the partition {(up - stopped) / 1000:.1f}s "
        f"later, workers there {(first - stopped) / 1000:.1f}s after the pause ({pinned or 'none'} "
        f"still at the paused bridge); resumed, it gave the partition up ({how}); bridge {owner + 1} "
        f"owns it now; longest time a task ran nowhere around it {gap} ms"
    )


def drain(drill: HaDrill) -> str:
    """Step 4: ``connect-bridge drain`` on the owner; the others take over at once, it exits 0."""
    old = drill.bridges.index(drill.bridge)
    started = time.monotonic()
    at = now_ms()
    done = drain_command(drill.admins[old])
    handed = time.monotonic()  # the CLI's own start (seconds on a loaded machine) is not the hand-over
    assert done.returncode == 0 and "every partition handed on" in done.stdout, done
    assert drill.bridge.process.wait(30) == 0, drill.bridge.log_tail()
    new = drill.wait_owner(drill.up(), timeout_s=SESSION_MS / 1000)
    took, after = time.monotonic() - started, time.monotonic() - handed
    drill.bridge = drill.bridges[new]
    assert after < 0.75 * SESSION_MS / 1000, (
        f"owned again {after:.1f}s after the drain handed it on: as slow as a session timeout"
    )
    drill.wait_converged(90)
    drill.coordinated()
    return (
        f"drain of bridge {old + 1}: bridge {new + 1} owned the partition {took:.1f}s after the command "
        f"started; longest time a task ran nowhere around it {drill.longest_gap(at, now_ms())} ms"
    )


def test_three_bridges_failover_zombie_and_drain(ha_drill: HaDrill) -> None:
    drill = ha_drill
    drill.start_together(("w0", "w1", "w2"))
    drill.create("alpha", 4, via="w0")
    drill.create("beta", 4, via="w1")
    drill.wait_running()
    drill.wait_converged()
    owner = routing(drill)
    figures = [f"the group's partition {drill.partition} of {PARTITIONS}, first owned by bridge {owner + 1}"]
    figures.append(kill_the_owner(drill))
    figures.append(zombie(drill))
    figures.append(drain(drill))
    summary, _ = drill.finish(timeout_s=90)
    assert summary.exclusive and summary.live, summary
    print("ha: " + "\n  ".join(figures))

"""``connect-bridge describe`` end to end: a served bridge (a real ``connect-bridge serve`` process), real
worker clients (new-protocol and legacy, over loopback) and the CLI as an operator runs it.

One connect group holds two new-protocol workers and a legacy (sessioned) one; a classic group holds a
lone compatible worker. The ``--json`` fields and the table's key lines are checked while everything
is stable, then again once a new worker has left and its work is held (docs/serve.md, "describe").
The engine's other waits (revoking, join, sync) are checked deterministically in
tests/test_describe_view.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from connect_bridge.bridge.describe import describe, render_table
from connect_bridge.state.model import ConfigView
from connect_bridge.workers.live_legacy import LiveLegacyWorker
from connect_bridge.workers.live_new import LiveNewWorker
from polling import eventually
from test_serve_cli import Serve, serve

CONNECT, CLASSIC = "connect-mixed", "connect-classic"
SESSION_MS, HEARTBEAT_MS, REBALANCE_MS = 3000, 300, 5000
DELAY_MS = 60_000
"""The bridge's scheduled.rebalance.max.delay.ms: long enough that the held work is still held when
the test looks at it."""
VIEW = ConfigView.of(1, {"A": 2, "B": 1})
ALL = VIEW.items()
SETTINGS = f"""\
metrics_listen: off
coordinator:
  session_timeout_ms: {SESSION_MS}
  heartbeat_interval_ms: {HEARTBEAT_MS}
  scheduled_rebalance_max_delay_ms: {DELAY_MS}
  classic_initial_rebalance_delay_ms: 0
  classic_min_session_timeout_ms: 1000
"""


def _sink(worker: str) -> Any:
    def on_event(type: str, **fields: Any) -> None:
        assert type != "fatal", (worker, fields)

    return on_event


def _new(port: int, name: str) -> LiveNewWorker:
    return LiveNewWorker(
        "127.0.0.1",
        port,
        CONNECT,
        f"http://{name}:8083/",
        _sink(name),
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        client_id=name,
    )


def _legacy(port: int, group: str, name: str, mode: str) -> LiveLegacyWorker:
    return LiveLegacyWorker(
        f"127.0.0.1:{port}",
        group,
        f"http://{name}:8083/",
        mode,
        _sink(name),  # type: ignore[arg-type]
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        max_delay_ms=1000,
        config_provider=lambda: VIEW,
        client_id=name,
    )


def cli_describe(proc: Serve, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "connect_bridge.cli", "describe", "--bootstrap", proc.address, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def settled(port: int, ready: Any) -> dict[str, dict[str, Any]]:
    """The groups once ``ready(groups by id)`` holds (asked in-process: cheaper than the CLI)."""
    found: dict[str, dict[str, Any]] = {}

    async def check() -> bool:
        found.clear()
        found.update({g["group_id"]: g for g in await describe("127.0.0.1", port)})
        return bool(ready(found))

    for _ in range(400):
        if await check():
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"describe never showed the expected state: {json.dumps(found, indent=1)}")


def all_stable(groups: dict[str, dict[str, Any]]) -> bool:
    connect, classic = groups.get(CONNECT), groups.get(CLASSIC)
    return (
        connect is not None
        and classic is not None
        and connect["state"] == "STABLE"
        and len(connect["members"]) == 3
        and all(m["waiting_for"] == "stable" and m["owned_count"] > 0 for m in connect["members"])
        and classic["state"] == "Stable"
        and [m["owned_count"] for m in classic["members"]] == [len(ALL)]
    )


def check_stable_json(groups: list[dict[str, Any]]) -> None:
    by_id = {g["group_id"]: g for g in groups}
    connect, classic = by_id[CONNECT], by_id[CLASSIC]
    assert connect["group_type"] == "connect" and connect["group_epoch"] == connect["assignment_epoch"]
    assert isinstance(connect["now_ms"], int) and connect["held"] == []
    members = {m["client_id"]: m for m in connect["members"]}
    assert {n: m["protocol"] for n, m in members.items()} == {"n1": "new", "n2": "new", "l1": "sessioned"}
    assert {n: m["url"] for n, m in members.items()} == {n: f"http://{n}:8083/" for n in members}
    assert {n: m["classic_state"] for n, m in members.items()} == {"n1": None, "n2": None, "l1": "Stable"}
    for m in members.values():
        assert "127.0.0.1" in m["client_host"]
        assert m["member_epoch"] == connect["group_epoch"] and m["waiting"] == "stable"
        assert m["owned_count"] == m["target_count"] == len(m["current"]) and m["revoking_count"] == 0
    assert sum(m["owned_count"] for m in members.values()) == len(ALL)

    assert classic["group_type"] == "classic" and classic["protocol"] == "compatible"
    [c1] = classic["members"]
    assert (c1["client_id"], c1["url"], c1["protocol"], c1["waiting"]) == (
        "c1",
        "http://c1:8083/",
        "compatible",
        "stable",
    )
    assert "127.0.0.1" in c1["client_host"] and len(c1["owned"]) == len(ALL)


def check_stable_table(table: str, connect: dict[str, Any]) -> None:
    blocks = {block.split()[1]: block.splitlines() for block in table.split("\n\n")}
    lines = blocks[CONNECT]
    epoch = connect["group_epoch"]
    assert lines[0].startswith(
        f"GROUP {CONNECT}  type connect  state STABLE  group epoch {epoch}  target epoch {epoch}"
    )
    assert lines[2].split()[:4] == ["MEMBER", "WORKER", "URL", "CLIENT"]
    legacy = next(line for line in lines if "http://l1:8083/" in line)
    assert "sessioned (classic)" in legacy and legacy.rstrip().endswith("stable")
    assert blocks[CLASSIC][0] == f"GROUP {CLASSIC}  type classic  state Stable  protocol compatible"
    assert any("http://c1:8083/" in line and line.split()[5] == str(len(ALL)) for line in blocks[CLASSIC])


def check_members_verbose(table: str, workers: dict[str, Any]) -> None:
    """``describe --members --verbose``: each worker's row lists what that worker runs (Kafka's
    ``kafka-consumer-groups --describe --members --verbose`` lists each consumer's partitions)."""
    header, *rows = table.splitlines()
    assert header.split()[-4:] == ["#CONNECTORS", "#TASKS", "CONNECTORS", "TASKS"], table
    by_url = {row.split()[2]: row.split() for row in rows}
    assert sorted(by_url) == sorted(f"http://{name}:8083/" for name in workers), table
    for name, worker in workers.items():
        runs = worker.running
        connectors = sorted(i.connector for i in runs if i.is_connector) or ["-"]
        tasks = [str(i) for i in sorted(i for i in runs if not i.is_connector)] or ["-"]
        assert by_url[f"http://{name}:8083/"][-2:] == [",".join(connectors), ",".join(tasks)], (name, table)


async def scenario(proc: Serve) -> None:
    port = proc.port
    n1, n2 = _new(port, "n1"), _new(port, "n2")
    l1 = _legacy(port, CONNECT, "l1", "sessioned")
    c1 = _legacy(port, CLASSIC, "c1", "compatible")
    n1.start()  # first: the group is a connect group, and l1 joins it as a legacy member
    await eventually(lambda: n1.running == ALL, 15, 0.05)
    n2.start()
    l1.start()
    c1.start()
    try:
        await settled(port, all_stable)
        out, table = await asyncio.gather(  # both at once: the groups are stable, nothing moves
            asyncio.to_thread(cli_describe, proc, "--json"), asyncio.to_thread(cli_describe, proc)
        )
        groups = json.loads(out)
        check_stable_json(groups)
        check_stable_table(table, next(g for g in groups if g["group_id"] == CONNECT))
        check_members_verbose(
            cli_describe(proc, "--members", "--verbose"), {"n1": n1, "n2": n2, "l1": l1, "c1": c1}
        )

        held = sorted(n2.running)
        await n2.stop()  # leaves: its work is held for the scheduled delay, for it to come back to
        groups_now = await settled(port, lambda gs: gs.get(CONNECT, {}).get("held"))
        [hold] = groups_now[CONNECT]["held"]
        assert hold["worker_url"] == "http://n2:8083/" and hold["items"] == sorted(str(i) for i in held)
        assert hold["count"] == len(held) and DELAY_MS / 1000 - 10 < hold["in_s"] <= DELAY_MS / 1000
        assert abs(hold["deadline_ms"] - groups_now[CONNECT]["now_ms"] - hold["in_s"] * 1000) <= 50
        table = render_table([groups_now[CONNECT]])  # the CLI's table, shown above; here in-process
        [held_line] = [line for line in table.splitlines() if line.lstrip().startswith("http://n2:8083/")]
        assert held_line.split()[1] == str(len(held)) and f"{hold['deadline']} (in " in held_line
    finally:
        await n1.crash()
        await n2.crash()
        await asyncio.gather(asyncio.to_thread(l1.crash), asyncio.to_thread(c1.crash))


def test_describe_a_mixed_connect_group_and_a_classic_group(tmp_path: Path) -> None:
    view = {"offset": VIEW.offset, "connectors": VIEW.connector_tasks}
    (tmp_path / "config.json").write_text(json.dumps(view))
    (tmp_path / "bridge.yaml").write_text(SETTINGS)
    extra = ("--config", str(tmp_path / "bridge.yaml"), "--config-view", str(tmp_path / "config.json"))
    with serve(tmp_path, *extra) as proc:
        asyncio.run(asyncio.wait_for(scenario(proc), 90))

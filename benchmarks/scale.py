"""Join latency as the state grows: does the work of one join grow with the number of groups, or with
the size of the group joined? (issue 11, finding 6: join p50 131 ms at 6,000 groups.)

Four ``connect-bridge serve`` subprocesses (metrics on, as by default), each loaded from a state dir
written beforehand with stable groups: 100 groups of one member vs 10,000 groups of one member, and
one group of 100 members vs one group of 10,000 members. A sample is a ConnectGroupHeartbeat join of
a fresh member (empty member id, epoch 0) over loopback, timed to its response (which waits for its
records to be durable); the member then leaves (not timed). The small and the large bridge of a pair
are sampled in alternating batches so both see the same machine load; the small one is the baseline.
Target: large p50 / small p50 <= 2 for both pairs. The last line printed is one JSON object.

The state is written as records rather than built by joins (building one group of 10,000 members
join by join is quadratic: minutes), and replayed by the bridge at start like any restart.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from connect_bridge.bridge.stores.store import FileRecordStore
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.codecs.requests import decode_response, encode_request
from connect_bridge.state.api import HeartbeatRequest
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import (
    ConfigView,
    CurrentAssignment,
    GroupMetadata,
    MemberMetadata,
    MemberState,
    TargetMetadata,
)
from connect_bridge.state.records import Record, RecordType
from connect_bridge.wire import maps as wm

SIZE = struct.Struct(">i")
HOUR_MS = 3_600_000
VIEW = ConfigView.of(1, {f"connector-{i:02d}": 10 for i in range(50)})
"""550 items: a few per member of the small group, none for most members of the large one."""
LOADING = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
CONFIG_YAML = f"""
coordinator:
  session_timeout_ms: {HOUR_MS}
  heartbeat_interval_ms: 3000
  scheduled_rebalance_max_delay_ms: 0
"""


def stable_group_records(group: str, members: int, view: ConfigView) -> list[Record]:
    """The records of a settled group: every member STABLE at epoch 1, the items dealt round-robin.

    Members' session and rebalance timeouts are an hour, so nobody expires or is fenced while the
    benchmark runs (they never heartbeat)."""
    ids = [f"{group}-w{i:05d}" for i in range(members)]
    dealt: dict[str, set[ConnectorTaskId]] = {mid: set() for mid in ids}
    for i, item in enumerate(sorted(view.items())):
        dealt[ids[i % members]].add(item)
    out = [
        Record(RecordType.CONFIG, group, "", view),
        Record(RecordType.GROUP_METADATA, group, "", GroupMetadata(1, ids[0], members)),
        Record(RecordType.TARGET_METADATA, group, "", TargetMetadata(1)),
    ]
    for mid in ids:
        items = frozenset(dealt[mid])
        metadata = MemberMetadata(
            rebalance_timeout_ms=HOUR_MS,
            session_timeout_ms=HOUR_MS,
            url=f"http://{mid}:8083/",
            config_offset=1,
        )
        out.append(Record(RecordType.MEMBER_METADATA, group, mid, metadata))
        out.append(Record(RecordType.TARGET_MEMBER, group, mid, items))
        out.append(
            Record(
                RecordType.CURRENT_ASSIGNMENT, group, mid, CurrentAssignment(1, 0, MemberState.STABLE, items)
            )
        )
    return out


def write_state(state_dir: Path, groups: int, members: int) -> None:
    records = [r for g in range(groups) for r in stable_group_records(f"group-{g:05d}", members, VIEW)]
    check = GroupCoordinator()  # the state must load as settled groups
    check.replay(records, 0)
    assert len(check.groups) == groups
    assert all(g.state.value == "STABLE" and len(g.members) == members for g in check.groups.values())
    store = FileRecordStore.open(state_dir)
    try:
        store.commit(records)
    finally:
        store.close()


class Bridge:
    def __init__(self, name: str, root: Path, groups: int, members: int) -> None:
        self.name, self.groups, self.members = name, groups, members
        state = root / name
        write_state(state, groups, members)
        config = root / f"{name}.yaml"
        config.write_text(CONFIG_YAML)
        self.stderr = open(root / f"{name}.log", "w+")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "connect_bridge.cli",
                "serve",
                "--config",
                str(config),
                "--listen",
                "127.0.0.1:0",
                "--state-dir",
                str(state),
                "--metrics-listen",
                "127.0.0.1:0",
            ],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{name}: the bridge did not start: {self.log()[-2000:]}")
        self.port = int(line.rsplit(":", 1)[1])
        self.samples: list[float] = []

    def log(self) -> str:
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read()

    def metrics_port(self) -> int | None:
        found = re.search(r"metrics on http://[^:]+:(\d+)/metrics", self.log())
        return int(found.group(1)) if found else None

    def group_series(self) -> int:
        """connect_bridge_group_epoch series on /metrics (proof that metrics are on and live)."""
        port = self.metrics_port()
        if port is None:
            return -1
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
            text = resp.read().decode()
        return sum(1 for line in text.splitlines() if line.startswith("connect_bridge_group_epoch{"))

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.stderr.close()


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.correlation = reader, writer, 0

    @classmethod
    async def connect(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def heartbeat(self, req: HeartbeatRequest) -> object:
        self.correlation += 1
        self.writer.write(encode_request(wm.heartbeat_to_wire(req), 0, self.correlation, "bench"))
        await self.writer.drain()
        (size,) = SIZE.unpack(await self.reader.readexactly(4))
        payload = await self.reader.readexactly(size)
        return wm.heartbeat_response_from_wire(decode_response(1000, 0, payload, framed=False))

    def close(self) -> None:
        self.writer.close()


async def join_and_leave(client: Client, group: str, n: int) -> float:
    """One timed join of a fresh member (microseconds); then it leaves."""
    req = HeartbeatRequest(
        group, "", 0, rebalance_timeout_ms=60_000, url=f"http://fresh-{n}:8083/", owned=frozenset()
    )
    started = time.perf_counter()
    resp = await client.heartbeat(req)
    elapsed = (time.perf_counter() - started) * 1e6
    if resp.error_code != 0 or not resp.member_id:
        raise SystemExit(f"join into {group} failed: {resp.error_code} {resp.error_message}")
    left = await client.heartbeat(HeartbeatRequest(group, resp.member_id, -1))
    if left.error_code != 0:
        raise SystemExit(f"leave from {group} failed: {left.error_code} {left.error_message}")
    return elapsed


async def wait_loaded(bridge: Bridge, client: Client, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        resp = await client.heartbeat(
            HeartbeatRequest("warm-up", "", 0, rebalance_timeout_ms=60_000, url="u")
        )
        if resp.error_code != LOADING:
            await client.heartbeat(HeartbeatRequest("warm-up", resp.member_id, -1))
            return
        await asyncio.sleep(0.2)
    raise SystemExit(f"{bridge.name}: still loading after {timeout_s} s")


async def compare(small: Bridge, large: Bridge, joins: int, batch: int = 10) -> None:
    """Alternate batches of joins between the two bridges; groups are joined round-robin."""
    clients = [await Client.connect(b.port) for b in (small, large)]
    for bridge, client in zip((small, large), clients, strict=True):
        await wait_loaded(bridge, client)
        for n in range(5):  # warm-up
            await join_and_leave(client, f"group-{n % bridge.groups:05d}", n)
    n = 0
    while len(large.samples) < joins:
        for bridge, client in zip((small, large), clients, strict=True):
            for i in range(batch):
                group = f"group-{(n + i) % bridge.groups:05d}"
                bridge.samples.append(await join_and_leave(client, group, n + i))
        n += batch
    for client in clients:
        client.close()


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


def main() -> None:
    joins = int(os.environ.get("BENCH_JOINS", "100"))
    small_n, large_n = 100, int(os.environ.get("BENCH_LARGE", "10000"))
    result: dict[str, object] = {"joins_per_case": joins}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for case, shape in (("groups", lambda n: (n, 1)), ("members", lambda n: (1, n))):
            started = time.perf_counter()
            small = Bridge(f"{case}-{small_n}", root, *shape(small_n))
            large = Bridge(f"{case}-{large_n}", root, *shape(large_n))
            try:
                asyncio.run(compare(small, large, joins))
                series = (small.group_series(), large.group_series())
            finally:
                small.stop()
                large.stop()
            p50s = (pct(small.samples, 50), pct(large.samples, 50))
            p99s = (pct(small.samples, 99), pct(large.samples, 99))
            ratio = p50s[1] / p50s[0]
            result[f"{case}_{small_n}_p50_us"] = round(p50s[0], 1)
            result[f"{case}_{large_n}_p50_us"] = round(p50s[1], 1)
            result[f"{case}_{small_n}_p99_us"] = round(p99s[0], 1)
            result[f"{case}_{large_n}_p99_us"] = round(p99s[1], 1)
            result[f"{case}_p50_ratio"] = round(ratio, 3)
            result[f"{case}_metric_series"] = list(series)
            print(
                f"join p50 with {small_n} {case}: {p50s[0] / 1000:.2f} ms, with {large_n} {case}: "
                f"{p50s[1] / 1000:.2f} ms (ratio {ratio:.2f}, target <= 2; p99 {p99s[0] / 1000:.2f} vs "
                f"{p99s[1] / 1000:.2f} ms; group series on /metrics {series}; "
                f"{time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    result["target_met"] = all(result[f"{c}_p50_ratio"] <= 2 for c in ("groups", "members"))  # type: ignore[operator]
    print(json.dumps(result))


if __name__ == "__main__":
    main()

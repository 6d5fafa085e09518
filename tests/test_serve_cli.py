"""``connect-bridge serve`` as a process: it listens, answers, describes, stops on SIGTERM with exit
code 0, and a ``kill -9`` during a rebalance loses nothing the workers were told."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from connect_bridge.codecs import messages as m
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state import api as napi
from connect_bridge.wire import maps as wm
from connect_bridge.wire.client import KafkaConnection

G = "connect-cluster"
OFFSET = 5
ALL_A = frozenset({ConnectorTaskId("A", -1), ConnectorTaskId("A", 0), ConnectorTaskId("A", 1)})
PREFIX = "connect-bridge listening on "


class Serve:
    """One ``connect-bridge serve`` process; stderr (its logs) goes to a file so it never blocks."""

    def __init__(self, state_dir: Path, log: Path, *extra: str) -> None:
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "connect_bridge.cli",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--state-dir",
                str(state_dir),
                "--metrics-listen",
                "127.0.0.1:0",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith(PREFIX), (line, log.read_text())
        self.host, port = line[len(PREFIX) :].strip().rsplit(":", 1)
        self.port = int(port)
        self.address = f"{self.host}:{self.port}"
        run(wait_loaded(self.port))

    def wait(self, timeout: float = 10.0) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.log.close()


@contextlib.contextmanager
def serve(tmp_path: Path, *extra: str) -> Iterator[Serve]:
    proc = Serve(tmp_path / "state", tmp_path / "serve.log", *extra)
    try:
        yield proc
    finally:
        proc.close()


def run(coro, timeout: float = 20.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def wait_loaded(port: int) -> None:
    """The listener is up before the records are replayed: wait until ListGroups stops saying
    COORDINATOR_LOAD_IN_PROGRESS."""
    conn = await KafkaConnection.connect("127.0.0.1", port)
    try:
        while (await conn.request(wm.list_groups_to_wire(5), 5)).error_code == 14:
            await asyncio.sleep(0.02)
    finally:
        await conn.close()


async def heartbeat(conn: KafkaConnection, req: napi.HeartbeatRequest) -> napi.HeartbeatResponse:
    return wm.heartbeat_response_from_wire(await conn.request(wm.heartbeat_to_wire(req), 0))


def join_request(url: str) -> napi.HeartbeatRequest:
    return napi.HeartbeatRequest(
        G, "", 0, rebalance_timeout_ms=60_000, url=url, config_offset=OFFSET, owned=frozenset()
    )


async def describe_group(port: int) -> napi.DescribedGroup:
    conn = await KafkaConnection.connect("127.0.0.1", port)
    try:
        [group] = wm.describe_response_from_wire(await conn.request(wm.describe_to_wire([G]), 0))
        return group
    finally:
        await conn.close()


def test_serve_listens_answers_describes_and_stops_on_sigterm(tmp_path: Path) -> None:
    with serve(tmp_path) as proc:

        async def talk() -> napi.HeartbeatResponse:
            conn = await KafkaConnection.connect(proc.host, proc.port)
            try:
                versions = await conn.request(m.ApiVersionsRequest(), 3)
                assert versions.error_code == 0
                assert sorted((k.api_key, k.min_version, k.max_version) for k in versions.api_keys) == sorted(
                    m.supported_api_versions()
                )
                joined = await heartbeat(conn, join_request("http://n1:8083"))
                assert joined.error_code == 0
                return joined
            finally:
                await conn.close()

        joined = run(talk())
        described = subprocess.run(
            [sys.executable, "-m", "connect_bridge.cli", "describe", "--bootstrap", proc.address, "--json"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert described.returncode == 0, described.stderr
        groups = json.loads(described.stdout)
        assert isinstance(groups, list)
        [group] = groups
        assert group["group_id"] == G and group["group_type"] == "connect"
        assert [x["member_id"] for x in group["members"]] == [joined.member_id]

        proc.proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0
    assert "stopped" in (tmp_path / "serve.log").read_text()


def test_kill_9_during_a_rebalance_loses_no_acknowledged_state(tmp_path: Path) -> None:
    view = tmp_path / "config.json"
    view.write_text(json.dumps({"offset": OFFSET, "connectors": {"A": 2}}))

    async def rebalance(port: int) -> tuple[napi.HeartbeatResponse, napi.HeartbeatResponse]:
        c1 = await KafkaConnection.connect("127.0.0.1", port)
        c2 = await KafkaConnection.connect("127.0.0.1", port)
        try:
            for _ in range(100):  # the config view arrives from the watched file
                n1 = await heartbeat(c1, join_request("http://n1:8083"))
                assert n1.error_code == 0
                if n1.assignment is not None and n1.assignment.items == ALL_A:
                    break
                await heartbeat(c1, napi.HeartbeatRequest(G, n1.member_id, -1))  # leave, then retry
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the config view never reached the group")
            beat = await heartbeat(c1, napi.HeartbeatRequest(G, n1.member_id, n1.member_epoch, owned=ALL_A))
            assert beat.error_code == 0
            n2 = await heartbeat(c2, join_request("http://n2:8083"))  # starts a rebalance
            assert n2.error_code == 0 and n2.member_epoch > n1.member_epoch
            return n1, n2
        finally:
            await c1.close()
            await c2.close()

    with serve(tmp_path, "--config-view", str(view)) as proc:
        n1, n2 = run(rebalance(proc.port))
        os.kill(proc.proc.pid, signal.SIGKILL)
        assert proc.wait(5) == -signal.SIGKILL

    with serve(tmp_path, "--config-view", str(view)) as proc:
        group = run(describe_group(proc.port))
        assert group.error_code == 0 and group.group_type == "connect"
        members = {x.member_id: x for x in group.members}
        assert set(members) == {n1.member_id, n2.member_id}
        # n1 has not heartbeated since n2 joined: it still holds the epoch and work it was told.
        assert (members[n1.member_id].member_epoch, members[n1.member_id].current) == (n1.member_epoch, ALL_A)
        assert members[n2.member_id].member_epoch == n2.member_epoch
        assert group.group_epoch >= n2.member_epoch

        async def carry_on(port: int) -> None:
            conn = await KafkaConnection.connect("127.0.0.1", port)
            try:
                # n1 goes on from the epoch it was told, with the work it was told to run.
                r = await heartbeat(
                    conn, napi.HeartbeatRequest(G, n1.member_id, n1.member_epoch, owned=ALL_A)
                )
                assert r.error_code == 0, r
                r = await heartbeat(conn, napi.HeartbeatRequest(G, n2.member_id, n2.member_epoch))
                assert r.error_code == 0, r
            finally:
                await conn.close()

        run(carry_on(proc.port))
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 0

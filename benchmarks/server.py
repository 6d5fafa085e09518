"""Heartbeat round trips through ``connect-bridge serve`` against a canned-response server, both on
the same event loop.

Both servers run as subprocesses on loopback, on the same event loop (``event_loop`` of ``serve``
and the canned server's loop: uvloop, as ``serve`` runs by default, then asyncio's own; a ratio
across loops measures the loops, not the bridge). The same client (asyncio, in this process) sends
the same frame, alternating batches between the servers so that all see the same machine load. The
canned server answers every frame with the bridge's own response bytes (correlation id patched),
so the difference is what the bridge does per request. It runs in two forms, each timed:

- ``stream`` (the target's baseline): asyncio's streams, two ``readexactly`` per frame and a
  ``drain`` per answer, as the bridge's read loop reads every request;
- ``protocol``: frames cut from the bytes in ``data_received`` and answered there, as the bridge's
  steady lane answers a steady heartbeat of a client that waits for its answers (``serve`` reads
  steady heartbeats that way, everything else through its read loop): the least a server on that
  loop can do per request, reported beside (``*_protocol``) so that the lane's own cost shows.

Two steady heartbeats are timed:

- ConnectGroupHeartbeat v0 of a member of a ``connect`` group;
- the classic Heartbeat a Java Connect worker (kafka-clients 4.3.1) sends. Its ApiVersions ranges
  are JoinGroup v0-9, SyncGroup v0-5, Heartbeat v0-4 (flexible from v6/v4/v4), and ``serve``
  advertises at least those, so a worker negotiates **JoinGroup v9, SyncGroup v5, Heartbeat v4**.
  One member joins a classic ``connect`` group (protocol ``sessioned``, Connect subscription v2 as
  metadata; MEMBER_ID_REQUIRED, rejoin, SyncGroup as leader), then its steady Heartbeat v4 frame
  (flexible header, null group instance id) is timed.

Also: ConnectGroupHeartbeats per second with 200 members on 200 concurrent connections (uvloop).
Target: p50 ratio (bridge / ``stream`` canned server, same loop) <= 1.5 for both heartbeats. The
last line printed is one JSON object; ``--loop uvloop`` or ``--loop asyncio`` measures one loop only.

Latency depends on the machine's load (other processes delay either server's wake-ups), so each
comparison also reports the CPU time each server process spent per timed request
(``bridge_cpu_us_per_request``, ``canned_cpu_us_per_request`` and their ``cpu_ratio``): the
scheduler's per-thread run time (``/proc/<pid>/task/*/schedstat``, nanoseconds; utime+stime from
``/proc/<pid>/stat``, in clock ticks, where schedstat is missing), read right before and right after
the timed batches. A loaded machine stretches the wall clock much more than the CPU a request costs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from typing import Any

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.requests import decode_response, encode_request
from connect_bridge.state.api import HeartbeatRequest
from connect_bridge.wire import maps as wm

SIZE = struct.Struct(">i")
GROUP = "bench"
LOADING = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


LOOPS = ("uvloop", "asyncio")
"""The event loops compared, each with both servers on it (``serve``'s default first)."""


CANNED_STYLES = ("stream", "protocol")
"""The canned server's two forms (module doc), timed in this order after the bridge."""


def against_canned(
    port: int, bridge_pid: int, frame: bytes, canned: bytes, count: int, tmp: str, loop: str
) -> Timed:
    """Latencies of ``frame`` through the bridge (process ``bridge_pid``) on ``port`` and through
    canned servers of each style answering ``canned`` on the event loop ``loop`` (subprocesses of
    this script), in alternating batches, with the CPU time each server spent on them."""
    procs: list[subprocess.Popen[bytes]] = []
    port_files = [f"{tmp}/canned-{loop}-{style}.port" for style in CANNED_STYLES]
    try:
        for style, port_file in zip(CANNED_STYLES, port_files, strict=True):
            procs.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--canned", port_file, loop, style],
                    env={**os.environ, "CANNED_HEX": canned.hex()},
                )
            )
        canned_ports = []
        for port_file in port_files:
            for _ in range(100):
                if os.path.exists(port_file) and open(port_file).read():
                    break
                time.sleep(0.05)
            canned_ports.append(int(open(port_file).read()))
        pids = (bridge_pid, *(proc.pid for proc in procs))
        return asyncio.run(latencies((port, *canned_ports), pids, frame, count))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        for port_file in port_files:  # the next comparison's canned servers write their own there
            if os.path.exists(port_file):
                os.remove(port_file)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU time the process ``pid`` has used so far, all its threads: their scheduler run time
    (nanosecond resolution), or utime+stime (clock ticks) on a kernel without schedstat."""
    try:
        total_ns = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total_ns += int(f.read().split()[0])
        return total_ns / 1e9
    except OSError:  # no schedstat (or a thread ended between listing and reading): clock ticks
        pass
    with open(f"/proc/{pid}/stat") as f:
        # Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclasses.dataclass
class Timed:
    """Round trips (µs) through each server and the CPU (seconds) each server process used meanwhile."""

    latencies: list[list[float]]
    cpu_seconds: list[float]


def start_bridge(tmp: str, loop: str) -> tuple[subprocess.Popen[str], int]:
    """``serve`` on ``loop`` with a fresh state directory, metrics kept (as by default) but not
    listened on; no initial rebalance delay, so a classic group of one member forms at once."""
    config = f"{tmp}/bridge-{loop}.yaml"
    with open(config, "w") as f:  # JSON is YAML
        json.dump({"event_loop": loop, "coordinator": {"classic_initial_rebalance_delay_ms": 0}}, f)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "connect_bridge.cli",
            "serve",
            "--config",
            config,
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            f"{tmp}/state-{loop}",
            "--metrics-listen",
            "off",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, int(line.rsplit(":", 1)[1])


class CannedProtocol(asyncio.Protocol):
    """The ``protocol`` canned server's connection: every whole frame in the bytes received is
    answered at once, from ``data_received``."""

    def __init__(self, canned: bytes) -> None:
        self.head, self.tail = canned[:4], canned[8:]
        self.buffer = bytearray()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport  # uvloop's transports are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while len(buffer) >= 4:
            (size,) = SIZE.unpack_from(buffer)
            if len(buffer) < 4 + size:
                return
            correlation = bytes(buffer[8:12])
            del buffer[: 4 + size]
            self.transport.write(self.head + correlation + self.tail)


async def canned_server(port_file: str, style: str = "stream") -> None:
    """Answer every request frame with the canned response in $CANNED_HEX (correlation id patched),
    reading frames with asyncio's streams (``stream``) or in ``data_received`` (``protocol``)."""
    canned = bytes.fromhex(os.environ["CANNED_HEX"])

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                correlation = frame[4:8]
                writer.write(canned[:4] + correlation + canned[8:])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    if style == "protocol":
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: CannedProtocol(canned), "127.0.0.1", 0)
    else:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
    with open(port_file, "w") as f:
        f.write(str(server.sockets[0].getsockname()[1]))
    await server.serve_forever()


def run_on(loop: str, coro: Coroutine[Any, Any, None]) -> None:
    """Run ``coro`` on the event loop named as ``serve``'s ``event_loop`` setting names it."""
    if loop == "uvloop":
        import uvloop

        uvloop.run(coro)
    else:
        asyncio.run(coro)


async def rpc(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame: bytes) -> bytes:
    writer.write(frame)
    await writer.drain()
    (size,) = SIZE.unpack(await reader.readexactly(4))
    return await reader.readexactly(size)


async def join(port: int, url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes, bytes]:
    """Join one member; return its connection, a steady heartbeat frame and its framed response."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    req = HeartbeatRequest(GROUP, "", 0, rebalance_timeout_ms=60_000, url=url, owned=frozenset())
    for _ in range(200):  # serve answers COORDINATOR_LOAD_IN_PROGRESS until its state is loaded
        payload = await rpc(reader, writer, encode_request(wm.heartbeat_to_wire(req), 0, 1, "bench"))
        resp = wm.heartbeat_response_from_wire(decode_response(1000, 0, payload, framed=False))
        if resp.error_code != LOADING:
            break
        await asyncio.sleep(0.05)
    assert resp.error_code == 0 and resp.member_epoch > 0, resp
    steady = encode_request(
        wm.heartbeat_to_wire(HeartbeatRequest(GROUP, resp.member_id, resp.member_epoch)), 0, 2, "bench"
    )
    answer = await rpc(reader, writer, steady)
    return reader, writer, steady, SIZE.pack(len(answer)) + answer


async def latencies(
    ports: tuple[int, int], pids: tuple[int, int], frame: bytes, count: int, batch: int = 100
) -> Timed:
    """Round trips to each port, in alternating batches so both see the same machine noise, and the
    CPU time each server process (``pids``, in the order of ``ports``) used over the timed ones."""
    conns = [await asyncio.open_connection("127.0.0.1", port) for port in ports]
    out: list[list[float]] = [[] for _ in ports]
    for reader, writer in conns:
        for _ in range(200):  # warm-up
            await rpc(reader, writer, frame)
    cpu_before = [cpu_seconds(pid) for pid in pids]
    while len(out[0]) < count:
        for i, (reader, writer) in enumerate(conns):
            for _ in range(batch):
                started = time.perf_counter()
                await rpc(reader, writer, frame)
                out[i].append((time.perf_counter() - started) * 1e6)
    cpu_used = [cpu_seconds(pid) - before for pid, before in zip(pids, cpu_before, strict=True)]
    for _, writer in conns:
        writer.close()
    return Timed(out, cpu_used)


async def throughput(port: int, members: int, seconds: float) -> float:
    conns = [await join(port, f"http://w{i}:8083/") for i in range(members)]
    # let the group settle so every heartbeat takes the steady path
    await asyncio.sleep(0.5)
    steady = []
    for reader, writer, _, _ in conns:
        steady.append((reader, writer))
    frames = [c[2] for c in conns]
    done = 0
    deadline = time.perf_counter() + seconds

    async def loop(i: int) -> None:
        nonlocal done
        reader, writer = steady[i]
        while time.perf_counter() < deadline:
            await rpc(reader, writer, frames[i])
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in range(members)))
    elapsed = time.perf_counter() - started
    for _, writer in steady:
        writer.close()
    return done / elapsed


JAVA_JOIN_V, JAVA_SYNC_V, JAVA_HEARTBEAT_V = 9, 5, 4
"""What a 4.3.1 Connect worker negotiates with ``serve`` (kafka-clients' maxima, all advertised)."""


async def java_join(port: int) -> tuple[bytes, bytes]:
    """Join a classic connect group the way a Java worker does; its steady Heartbeat v4 frame and
    the framed response ``serve`` gives it."""
    from kafka.protocol.consumer.group import HeartbeatRequest as Hb
    from kafka.protocol.consumer.group import JoinGroupRequest, SyncGroupRequest

    from connect_bridge.codecs.connect_protocol import (
        Assignment,
        Subscription,
        encode_assignment,
        encode_subscription,
    )

    group, url = "connect-java-bench", "http://127.0.0.1:8083/"  # its own group, beside ``bench``
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    metadata = encode_subscription(Subscription(url, -1, Assignment.build(0, "", "", -1, [], ())), 2)

    def join_request(member_id: str) -> JoinGroupRequest:
        protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="sessioned", metadata=metadata)
        return JoinGroupRequest(
            group_id=group,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=60_000,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="connect",
            protocols=[protocol],
            reason=None,
        )

    correlation = 10
    member_id = ""
    for _ in range(3):  # MEMBER_ID_REQUIRED (79) first, then the real join
        correlation += 1
        frame = encode_request(join_request(member_id), JAVA_JOIN_V, correlation, "connect-1")
        joined = decode_response(11, JAVA_JOIN_V, await rpc(reader, writer, frame), framed=False)
        member_id = joined.member_id
        if joined.error_code == 0:
            break
    assert joined.error_code == 0, joined
    assignment = encode_assignment(Assignment.build(0, member_id, url, -1, [], ()), 2)
    sync = SyncGroupRequest(
        group_id=group,
        generation_id=joined.generation_id,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="connect",
        protocol_name="sessioned",
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_id, assignment=assignment)],
    )
    synced = decode_response(
        14,
        JAVA_SYNC_V,
        await rpc(reader, writer, encode_request(sync, JAVA_SYNC_V, 20, "connect-1")),
        framed=False,
    )
    assert synced.error_code == 0, synced
    heartbeat = Hb(
        group_id=group, generation_id=joined.generation_id, member_id=member_id, group_instance_id=None
    )
    frame = encode_request(heartbeat, JAVA_HEARTBEAT_V, 30, "connect-1")
    answer = await rpc(reader, writer, frame)
    assert decode_response(12, JAVA_HEARTBEAT_V, answer, framed=False).error_code == 0
    writer.close()
    return frame, SIZE.pack(len(answer)) + answer


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def compare(tmp: str, loop: str, count: int) -> dict[str, dict[str, object]]:
    """Both heartbeats through ``serve`` on ``loop`` against the canned server on ``loop``."""
    bridge, port = start_bridge(tmp, loop)
    out: dict[str, dict[str, object]] = {}
    try:
        _, _, frame, canned = asyncio.run(join(port, "http://w0:8083/"))
        # What is timed must be the steady answer, not an error answered at every request.
        steady = wm.heartbeat_response_from_wire(decode_response(1000, 0, canned[4:], framed=False))
        assert steady.error_code == 0 and steady.assignment is None, steady
        timed = against_canned(port, bridge.pid, frame, canned, count, tmp, loop)
        out["ConnectGroupHeartbeat"] = summary(timed)
        frame, canned = asyncio.run(java_join(port))
        java = summary(against_canned(port, bridge.pid, frame, canned, count, tmp, loop))
        out[f"Heartbeat v{JAVA_HEARTBEAT_V}"] = java
    finally:
        bridge.send_signal(signal.SIGTERM)
        bridge.wait(10)
    return out


def summary(timed: Timed) -> dict[str, object]:
    """The bridge against each canned server: the ``stream`` one's figures under the plain names
    (the target's baseline), the ``protocol`` one's with ``_protocol`` appended."""
    bridge_lat = timed.latencies[0]
    cpu_us = [s * 1e6 / len(lat) for s, lat in zip(timed.cpu_seconds, timed.latencies, strict=True)]
    result: dict[str, object] = {
        "bridge_p50_us": round(pct(bridge_lat, 50), 1),
        "bridge_p99_us": round(pct(bridge_lat, 99), 1),
        "bridge_cpu_us_per_request": round(cpu_us[0], 1),
    }
    for i, style in enumerate(CANNED_STYLES, start=1):
        suffix = "" if style == "stream" else f"_{style}"
        canned_lat = timed.latencies[i]
        result[f"canned{suffix}_p50_us"] = round(pct(canned_lat, 50), 1)
        result[f"canned{suffix}_p99_us"] = round(pct(canned_lat, 99), 1)
        result[f"p50_ratio{suffix}"] = round(pct(bridge_lat, 50) / pct(canned_lat, 50), 3)
        result[f"p99_ratio{suffix}"] = round(pct(bridge_lat, 99) / pct(canned_lat, 99), 3)
        result[f"canned{suffix}_cpu_us_per_request"] = round(cpu_us[i], 1)
        result[f"cpu_ratio{suffix}"] = round(cpu_us[0] / cpu_us[i], 3)
    return result


def main() -> None:
    count = int(os.environ.get("BENCH_HEARTBEATS", "3000"))
    loops = [sys.argv[sys.argv.index("--loop") + 1]] if "--loop" in sys.argv else list(LOOPS)
    result: dict[str, object] = {"target_p50_ratio": 1.5}
    with tempfile.TemporaryDirectory() as tmp:
        for loop in loops:
            result[loop] = measured = compare(tmp, loop, count)
            for name, m in measured.items():
                print(
                    f"{loop}: {name} p50 {m['bridge_p50_us']} us vs canned {m['canned_p50_us']} us "
                    f"(ratio {m['p50_ratio']}, target <= 1.5); p99 ratio {m['p99_ratio']}; "
                    f"CPU per request {m['bridge_cpu_us_per_request']} us "
                    f"vs canned {m['canned_cpu_us_per_request']} us (ratio {m['cpu_ratio']}); "
                    f"against the protocol canned server: p50 ratio {m['p50_ratio_protocol']}, "
                    f"CPU {m['canned_protocol_cpu_us_per_request']} us (ratio {m['cpu_ratio_protocol']})"
                )
        bridge, port = start_bridge(tmp, loops[0])
        try:
            hb_per_s = asyncio.run(throughput(port, 200, 3.0))
        finally:
            bridge.send_signal(signal.SIGTERM)
            bridge.wait(10)
    result["heartbeats_per_s_200_connections"] = round(hb_per_s)
    print(f"{loops[0]}: ConnectGroupHeartbeats/s with 200 member connections: {round(hb_per_s):,}")
    print(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) in (4, 5) and sys.argv[1] == "--canned":
        run_on(sys.argv[3], canned_server(sys.argv[2], *sys.argv[4:]))
    else:
        main()

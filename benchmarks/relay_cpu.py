"""The relay's own CPU per relayed request and per MiB, without a JVM on the machine.

``benchmarks/proxy.py --kafka`` measures the relay against Apache Kafka with Kafka's own tools, but
on a small machine the broker and the tools take most of the CPU and the ratios swing with the
load. This isolates the bridge: ``connect-bridge serve --upstream`` in front of a scripted broker
(its own process: ApiVersions and Metadata answered properly, every Produce with a small canned
answer, every Fetch with a canned 1 MiB answer written in ``--piece``-byte writes, as a broker's
bytes arrive), driven by one raw client (its own process) that keeps ``--window`` requests in
flight: Produce v9 of 15 records of 1 KiB (what ProducerPerformance sends with 16 KiB batches),
or Fetch v11 (window 1 is a consumer's one fetch in flight). Reported from ``/proc``: the bridge's
CPU (user + system) per request and per MiB relayed, and the client's CPU per MiB.

    python benchmarks/relay_cpu.py [--seconds 5] [--window 5] [--piece 65536] [--ops produce,fetch]

The last line printed is one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

HOST = "127.0.0.1"
NODE = 1
SIZE = struct.Struct(">i")
FETCH_BYTES = 1 << 20
PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18


def arg(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------------ broker


async def broker(port: int, piece: int) -> None:
    from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse

    from connect_bridge.codecs.requests import encode_response_frame, request_header_fields

    versions = [(PRODUCE, 9), (FETCH, 12), (METADATA, 12), (API_VERSIONS, 3)]
    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=0, max_version=v) for k, v in versions]
    node = MetadataResponse.MetadataResponseBroker(node_id=NODE, host=HOST, port=port, rack=None)
    produced = bytearray(SIZE.pack(64) + bytes(64))
    fetched = bytearray(SIZE.pack(FETCH_BYTES) + bytes(FETCH_BYTES))

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = SIZE.unpack(await reader.readexactly(4))
                payload = await reader.readexactly(size)
                api_key, version, correlation = request_header_fields(payload)
                if api_key == API_VERSIONS:
                    answer = ApiVersionsResponse(error_code=0, api_keys=keys)
                    writer.write(encode_response_frame(api_key, 0, correlation, answer))
                elif api_key == METADATA:
                    answer = MetadataResponse(
                        brokers=[node], controller_id=NODE, topics=[], cluster_id="c", throttle_time_ms=0
                    )
                    writer.write(encode_response_frame(api_key, version, correlation, answer))
                elif api_key == PRODUCE:
                    SIZE.pack_into(produced, 4, correlation)
                    writer.write(bytes(produced))
                else:
                    SIZE.pack_into(fetched, 4, correlation)
                    data = bytes(fetched)
                    for start in range(0, len(data), piece):
                        writer.write(data[start : start + piece])
                        await writer.drain()
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, HOST, port)
    print("ready", flush=True)
    await server.serve_forever()


# ------------------------------------------------------------------------------------------ client


def request(op: str) -> bytearray:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import proxy as bench  # benchmarks/proxy.py: the same request frames

    bench.VALUE = b"v" * 1024
    return bench.produce_frame("t", 15) if op == "produce" else bench.fetch_frame("t", 0, FETCH_BYTES)


async def client(port: int, op: str, seconds: float, window: int) -> None:
    frame = request(op)
    reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 22)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    correlation = answered = relayed = 0
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)

    def send() -> None:
        nonlocal correlation
        correlation += 1
        struct.pack_into(">i", frame, 8, correlation)
        writer.write(bytes(frame))

    for _ in range(window):
        send()
    started = time.perf_counter()
    stop_at, inflight = started + seconds, window
    while inflight:
        (size,) = SIZE.unpack(await reader.readexactly(4))
        await reader.readexactly(size)
        inflight -= 1
        answered += 1
        relayed += len(frame) if op == "produce" else size
        if time.perf_counter() < stop_at:
            send()
            inflight += 1
            await writer.drain()
    elapsed = time.perf_counter() - started
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    used = cpu.ru_utime + cpu.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime
    print(json.dumps({"requests": answered, "bytes": relayed, "seconds": elapsed, "cpu_s": used}))


# ------------------------------------------------------------------------------------------ main


def main() -> None:
    if sys.argv[1:2] == ["broker"]:
        asyncio.run(broker(int(sys.argv[2]), int(sys.argv[3])))
        return
    if sys.argv[1:2] == ["client"]:
        asyncio.run(client(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), int(sys.argv[5])))
        return
    seconds, window, piece = arg("--seconds", "5"), arg("--window", "5"), arg("--piece", "65536")
    ops = arg("--ops", "produce,fetch").split(",")
    upstream, listener = free_port(), free_port()
    me = os.path.abspath(__file__)
    fake = subprocess.Popen(
        [sys.executable, me, "broker", str(upstream), piece], stdout=subprocess.PIPE, text=True
    )
    assert fake.stdout is not None and fake.stdout.readline().strip() == "ready"
    out: dict[str, Any] = {"window": int(window), "piece": int(piece)}
    with tempfile.TemporaryDirectory() as tmp:
        settings = os.path.join(tmp, "bridge.yaml")
        with open(settings, "w") as f:
            json.dump({"proxy_base_port": listener - NODE}, f)  # JSON is YAML
        serve = ["serve", "--config", settings, "--upstream", f"{HOST}:{upstream}", "--listen", f"{HOST}:0"]
        serve += ["--metrics-listen", "off", "--state-dir", os.path.join(tmp, "state")]
        bridge = subprocess.Popen(
            [sys.executable, "-m", "connect_bridge.cli", *serve],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert bridge.stdout is not None and bridge.stdout.readline().startswith(
                "connect-bridge listening"
            )
            time.sleep(0.5)
            for op in ops:
                before = cpu_seconds(bridge.pid)
                done = subprocess.run(
                    [sys.executable, me, "client", str(listener), op, seconds, window],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                used = cpu_seconds(bridge.pid) - before
                run = json.loads(done.stdout.strip().splitlines()[-1])
                mib = run["bytes"] / (1 << 20)
                out[op] = {
                    "requests_per_s": round(run["requests"] / run["seconds"]),
                    "mib_per_s": round(mib / run["seconds"], 1),
                    "bridge_cpu_us_per_request": round(used * 1e6 / run["requests"]),
                    "bridge_cpu_ms_per_mib": round(used * 1000 / mib, 2),
                    "client_cpu_ms_per_mib": round(run["cpu_s"] * 1000 / mib, 2),
                }
                r = out[op]
                print(
                    f"{op:8s} {r['requests_per_s']:6d} req/s {r['mib_per_s']:7.1f} MiB/s | bridge CPU "
                    f"{r['bridge_cpu_us_per_request']} us/request, {r['bridge_cpu_ms_per_mib']} ms/MiB | "
                    f"client CPU {r['client_cpu_ms_per_mib']} ms/MiB",
                    flush=True,
                )
        finally:
            bridge.terminate()
            bridge.wait(10)
            fake.kill()
            fake.wait()
    print(json.dumps(out))


if __name__ == "__main__":
    main()

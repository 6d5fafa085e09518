"""Metrics registry contents, the HTTP endpoints, and structured event logs."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time

import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from connect_bridge.bridge.edge.http import start_http
from connect_bridge.bridge.metrics import Metrics, log_event
from connect_bridge.codecs.error_codes import ErrorCode


def sample(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float | None:
    return metrics.registry.get_sample_value(name, labels or {})


def test_registries_are_independent() -> None:
    a, b = Metrics(), Metrics()
    a.observe_request("Heartbeat", 0.001)
    assert sample(a, "connect_bridge_requests_total", {"api": "Heartbeat", "error": "NONE"}) == 1
    assert sample(b, "connect_bridge_requests_total", {"api": "Heartbeat", "error": "NONE"}) is None


def test_render_contains_names_and_labels() -> None:
    m = Metrics()
    m.observe_request("JoinGroup", 0.0004, ErrorCode.REBALANCE_IN_PROGRESS)
    m.observe_request("ConnectGroupHeartbeat", 0.002, "FENCED_MEMBER_EPOCH")
    m.observe_request("ConnectGroupHeartbeat", 0.0001)
    m.observe_fsync(0.003)
    m.connections.inc()
    m.observe_group("cluster-a", 5, [("new", "STABLE"), ("sessioned", "UNREVOKED"), ("new", "STABLE")])
    text = m.render().decode()
    for name in (
        "connect_bridge_request_latency_seconds_bucket",
        "connect_bridge_requests_total",
        "connect_bridge_group_epoch",
        "connect_bridge_group_members",
        "connect_bridge_rebalances_total",
        "connect_bridge_record_store_fsync_seconds_bucket",
        "connect_bridge_connections",
    ):
        assert name in text, name
    assert 'connect_bridge_requests_total{api="JoinGroup",error="REBALANCE_IN_PROGRESS"} 1.0' in text
    assert 'error="FENCED_MEMBER_EPOCH"' in text
    assert 'connect_bridge_request_latency_seconds_bucket{api="JoinGroup",le="0.0005"} 1.0' in text
    assert 'connect_bridge_group_epoch{group="cluster-a"} 5.0' in text
    assert 'connect_bridge_group_members{group="cluster-a",protocol="new",state="STABLE"} 2.0' in text
    assert (
        'connect_bridge_group_members{group="cluster-a",protocol="sessioned",state="UNREVOKED"} 1.0' in text
    )
    assert "connect_bridge_connections 1.0" in text


def test_observe_group_counts_epoch_growth_and_drops_stale_series() -> None:
    m = Metrics()
    members = {"group": "g", "protocol": "eager", "state": "STABLE"}
    m.observe_group("g", 10, [("eager", "STABLE")])  # first sighting: baseline only
    assert sample(m, "connect_bridge_rebalances_total", {"group": "g"}) in (None, 0)
    m.observe_group("g", 10, [("eager", "STABLE"), ("new", "UNRELEASED")])
    m.observe_group("g", 11, [("new", "STABLE")])
    m.observe_group("g", 13, [("new", "STABLE")])
    assert sample(m, "connect_bridge_rebalances_total", {"group": "g"}) == 2
    assert sample(m, "connect_bridge_group_epoch", {"group": "g"}) == 13
    assert sample(m, "connect_bridge_group_members", members) is None
    m.observe_group("g", 1, [])  # recreated: resets the baseline, no rebalance counted
    m.observe_group("g", 2, [])
    assert sample(m, "connect_bridge_rebalances_total", {"group": "g"}) == 3
    m.forget_group("g")
    assert sample(m, "connect_bridge_group_epoch", {"group": "g"}) is None
    assert "group_members{" not in m.render().decode()


def test_log_event_is_one_json_line(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.rebalance")
    with caplog.at_level(logging.INFO, logger="test.rebalance"):
        log_event(logger, "target_assignment", group="g", member="m-1", epoch=4, items={"a-0"})
    (record,) = caplog.records
    assert "\n" not in record.getMessage()
    assert json.loads(record.getMessage()) == {
        "event": "target_assignment",
        "group": "g",
        "member": "m-1",
        "epoch": 4,
        "items": "{'a-0'}",
    }


async def http(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in header_lines)}
    assert int(headers["content-length"]) == len(body) or request.startswith(b"HEAD")
    assert headers["connection"] == "close"
    return int(status_line.split()[1]), headers, body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\n\r\n".encode()


def test_http_endpoints() -> None:
    metrics = Metrics()
    metrics.observe_group("g", 3, [("new", "STABLE")])
    state = {"ready": False}

    async def scenario() -> None:
        server = await start_http("127.0.0.1", 0, metrics, lambda: state["ready"])
        port = server.sockets[0].getsockname()[1]
        try:
            status, headers, body = await http(port, get("/metrics"))
            assert status == 200 and headers["content-type"] == CONTENT_TYPE_LATEST
            assert b'connect_bridge_group_epoch{group="g"} 3.0' in body
            assert (await http(port, get("/livez")))[::2] == (200, b"ok\n")
            assert (await http(port, get("/readyz")))[0] == 503
            state["ready"] = True
            assert (await http(port, get("/readyz?verbose=1")))[::2] == (200, b"ready\n")
            assert (await http(port, get("/nope")))[0] == 404
            status, headers, body = await http(port, b"HEAD /livez HTTP/1.1\r\n\r\n")
            assert status == 200 and body == b""
            status, headers, _ = await http(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            assert status == 405 and headers["allow"] == "GET, HEAD"
            assert (await http(port, b"garbage\r\n\r\n"))[0] == 400
            assert (await http(port, b"GET /" + b"x" * 20000 + b" HTTP/1.1\r\n\r\n"))[0] == 400
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_readyz_is_503_when_the_check_raises(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> bool:
        raise RuntimeError("boom")

    async def scenario() -> int:
        server = await start_http("127.0.0.1", 0, Metrics(), broken)
        try:
            return (await http(server.sockets[0].getsockname()[1], get("/readyz")))[0]
        finally:
            server.close()
            await server.wait_closed()

    with caplog.at_level(logging.ERROR):
        assert asyncio.run(scenario()) == 503


def test_requests_are_labelled_by_api_and_their_own_error_code() -> None:
    """Answers framed by the steady-heartbeat fast path used to count as error NONE whatever they
    said (issue 13.6): a fenced heartbeat and a classic heartbeat of an unknown member answered there
    carry their codes; a relayed answer is not decoded and counts under its own label."""
    from kafka.protocol.consumer.group import HeartbeatRequest as WireHeartbeat

    import test_server as ts
    from connect_bridge.state import api as napi

    metrics = Metrics()

    async def traffic(port: int) -> None:
        async with ts.connection(port, "worker-1") as conn:
            joined = await ts.new_join(conn)
            steady = napi.HeartbeatRequest(ts.G, joined.member_id, joined.member_epoch)
            for _ in range(3):  # the fast path answers these once the member is known
                assert (await ts.new_heartbeat(conn, steady)).error_code == 0
            fenced = napi.HeartbeatRequest(ts.G, joined.member_id, joined.member_epoch + 7)
            assert (await ts.new_heartbeat(conn, fenced)).error_code == 110
            classic = WireHeartbeat(group_id=ts.G, generation_id=1, member_id="x", group_instance_id=None)
            answer = await conn.request(classic, 4)
            assert answer.error_code == 25

    with ts.running(metrics=metrics) as srv:
        ts.run(traffic(srv.port))
        text = srv.on_loop(metrics.render).decode()
    line = re.compile(r'^connect_bridge_requests_total\{api="([^"]+)",error="([^"]+)"\} (\S+)$', re.M)
    counts = {(m.group(1), m.group(2)): float(m.group(3)) for m in line.finditer(text)}
    assert counts[("ConnectGroupHeartbeat", "NONE")] == 4  # the join and three steady beats
    assert counts[("ConnectGroupHeartbeat", "FENCED_MEMBER_EPOCH")] == 1
    assert counts[("Heartbeat", "UNKNOWN_MEMBER_ID")] == 1
    assert not any(api == "Relayed" for api, _ in counts)  # nothing was relayed here


OBSERVATIONS = (0.00005, 0.0001, 0.0001000001, 0.0003, 0.0025, 0.7, 10.0, 11.0, 0.0)
"""Below, at and just above a bound, between bounds, at the last bound and past it, zero."""


def test_per_request_metrics_expose_what_prometheus_client_would() -> None:
    """The request metrics count in plain numbers, folded in when collected: a scrape shows the
    same samples as prometheus_client's own Counter and Histogram given the same observations,
    and again after more observations (a fold never counts anything twice)."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from connect_bridge.bridge.metrics import LATENCY_BUCKETS, LoopCounter, LoopHistogram

    def samples(registry: CollectorRegistry) -> list[tuple[str, list[tuple[str, str]], float]]:
        return sorted(
            (s.name, sorted(s.labels.items()), s.value)
            for family in registry.collect()
            for s in family.samples
            if not s.name.endswith("_created")
        )

    own, loop = CollectorRegistry(), CollectorRegistry()
    kinds = ((own, Histogram, Counter), (loop, LoopHistogram, LoopCounter))
    built = [
        (hist("lat", "d", ["api"], buckets=LATENCY_BUCKETS, registry=r), count("n", "d", ["api"], registry=r))
        for r, hist, count in kinds
    ]
    for rounds in range(2):
        for latency, counter in built:
            for i, seconds in enumerate(OBSERVATIONS):
                latency.labels(api=f"a{i % 2}").observe(seconds)
                counter.labels(api=f"a{i % 2}").inc()
            counter.labels(api="a0").inc(2.5)
        assert samples(loop) == samples(own), rounds
    for _, counter in built:
        counter.labels(api="a1").reset()
    assert samples(loop) == samples(own)
    with pytest.raises(ValueError):
        built[1][1].labels(api="a0").inc(-1)


def test_a_tls_client_on_the_plaintext_listener_is_closed_at_once() -> None:
    """A scraper told ``https`` sends a ClientHello (first byte 0x16) and never a request line: it is
    closed at once, not held until ``metrics_request_timeout_ms``, and plain HTTP still works."""

    async def scenario() -> tuple[bytes, float]:
        server = await start_http("127.0.0.1", 0, Metrics(), lambda: True, request_timeout_s=30)
        port = server.sockets[0].getsockname()[1]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            started = time.monotonic()
            writer.write(b"\x16\x03\x01\x00\x05hello")  # the start of a TLS record, no newline
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), 10)
            waited = time.monotonic() - started
            writer.close()
            assert (await http(port, get("/livez")))[::2] == (200, b"ok\n")
            return answer, waited
        finally:
            server.close()
            await server.wait_closed()

    answer, waited = asyncio.run(scenario())
    assert answer == b"" and waited < 10

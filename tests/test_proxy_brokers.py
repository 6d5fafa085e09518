"""The relay learns upstream brokers from the responses it rewrites (``UpstreamCluster.learn``).

A broker that joins the cluster while the bridge runs must get a listener (``proxy_base_port +
node id``) without a restart: the bridge decodes every Metadata, DescribeCluster and
FindCoordinator response anyway, so each one that names a broker it has not seen calls
``on_new_broker`` (the server opens the listener). A broker absent from a later answer (stopped,
removed) is kept: clients may hold its address. Pure frame tests, no broker; the real thing,
three Apache Kafka brokers, is tests/test_three_brokers.py.
"""

from __future__ import annotations

from kafka.protocol.admin.cluster import DescribeClusterResponse

from connect_bridge.bridge.upstream.cluster import Broker, UpstreamCluster
from connect_bridge.codecs import messages as m
from connect_bridge.codecs.messages import ApiKey
from connect_bridge.codecs.requests import decode_response, encode_response_frame

BASE = 19000
VERSION = 9
ALL = {1: "kafka-1", 2: "kafka-2", 3: "kafka-3"}


def metadata_frame(brokers: list[tuple[int, str, int]]) -> bytes:
    """A Metadata v9 response naming ``brokers`` (node id, host, port), without its size prefix."""
    node = m.MetadataResponse.MetadataResponseBroker
    response = m.MetadataResponse(
        throttle_time_ms=0,
        brokers=[node(node_id=n, host=h, port=p, rack=None) for n, h, p in brokers],
        cluster_id="c",
        controller_id=1,
        topics=[],
    )
    return encode_response_frame(ApiKey.METADATA, VERSION, 5, response)[4:]


def advertised(cluster: UpstreamCluster, frame: bytes) -> dict[int, tuple[str, int]]:
    rewritten = cluster.rewrite(ApiKey.METADATA, VERSION, 5, frame)
    response = decode_response(ApiKey.METADATA, VERSION, rewritten[4:], framed=False)
    return {b.node_id: (b.host, b.port) for b in response.brokers}


def test_a_broker_named_for_the_first_time_is_learned_once_and_never_forgotten() -> None:
    cluster = UpstreamCluster([("kafka-1", 9092)], BASE, "bridge")
    cluster.brokers = {1: Broker(1, "kafka-1", 9092), 2: Broker(2, "kafka-2", 9092)}
    opened: list[int] = []
    cluster.on_new_broker = opened.append

    table = [
        # (brokers the answer names, listeners opened after it, brokers the relay knows)
        ([(1, "kafka-1", 9092), (2, "kafka-2", 9092)], [], {1: "kafka-1", 2: "kafka-2"}),
        ([(1, "kafka-1", 9092), (2, "kafka-2", 9092), (3, "kafka-3", 9092)], [3], ALL),
        ([(1, "kafka-1", 9092), (3, "kafka-3", 9092)], [3], ALL),  # node 2 down: kept
        ([(1, "kafka-1", 9092), (2, "kafka-2b", 9092), (3, "kafka-3", 9092)], [3], ALL | {2: "kafka-2b"}),
    ]
    for named, listeners, known in table:
        answer = advertised(cluster, metadata_frame(named))
        assert answer == {n: ("bridge", BASE + n) for n, _, _ in named}
        assert opened == listeners, named
        assert {n: b.host for n, b in cluster.brokers.items()} == known, named


def test_describe_cluster_and_find_coordinator_name_new_brokers_too() -> None:
    cluster = UpstreamCluster([("kafka-1", 9092)], BASE, "bridge")
    cluster.brokers = {1: Broker(1, "kafka-1", 9092)}
    opened: list[int] = []
    cluster.on_new_broker = opened.append

    coordinator = m.FindCoordinatorResponse.Coordinator
    found = m.FindCoordinatorResponse(
        throttle_time_ms=0,
        coordinators=[
            coordinator(key="orders", node_id=4, host="kafka-4", port=9092, error_code=0, error_message=None)
        ],
    )
    frame = encode_response_frame(ApiKey.FIND_COORDINATOR, 4, 9, found)[4:]
    rewritten = decode_response(
        ApiKey.FIND_COORDINATOR, 4, cluster.rewrite(ApiKey.FIND_COORDINATOR, 4, 9, frame)[4:], framed=False
    )
    [c] = rewritten.coordinators
    assert (c.node_id, c.host, c.port) == (4, "bridge", BASE + 4)
    assert opened == [4]
    assert cluster.brokers[4] == Broker(4, "kafka-4", 9092)

    broker = DescribeClusterResponse.DescribeClusterBroker
    cluster.rewrite_describe_cluster(
        DescribeClusterResponse(brokers=[broker(broker_id=5, host="kafka-5", port=9093, rack=None)]), 0
    )
    assert opened == [4, 5]
    assert cluster.brokers[5] == Broker(5, "kafka-5", 9093)

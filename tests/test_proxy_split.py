"""DescribeGroups/ListGroups answered partly by the bridge and partly upstream (``UpstreamCluster.split``),
and the framing of upstream responses (``_UpstreamProtocol``).

Found with Java's ``kafka-consumer-groups`` through the proxy (tests/test_real_clients.py): the Java
admin client batches every group of one coordinator node into one DescribeGroups, and the bridge's
groups share the broker's node id, so a batch naming ``connect-x`` and ``orders`` used to go upstream
whole and the broker answered GROUP_ID_NOT_FOUND for ``connect-x``. Pure frame tests, no broker.
"""

from __future__ import annotations

import struct

import pytest

from connect_bridge.bridge.upstream.cluster import UpstreamCluster, _UpstreamProtocol, group_matcher
from connect_bridge.codecs import messages as m
from connect_bridge.codecs.requests import (
    decode_request,
    decode_response,
    encode_request,
    encode_response_frame,
)


def cluster() -> UpstreamCluster:
    return UpstreamCluster(
        [("127.0.0.1", 9092)], 19000, "127.0.0.1", coordinated=group_matcher(["connect.*"])
    )


def describe_request(groups: list[str], version: int) -> bytes:
    msg = m.DescribeGroupsRequest(groups=groups, include_authorized_operations=True)
    return encode_request(msg, version, 77, "adminclient-1")[4:]


def described(group: str, state: str, version: int) -> m.DescribeGroupsResponse.DescribedGroup:
    cls = m.DescribeGroupsResponse.DescribedGroup
    fields = {
        "error_code": 0,
        "group_id": group,
        "group_state": state,
        "protocol_type": "consumer",
        "protocol_data": "range",
        "members": [],
        "authorized_operations": None,  # kafka-python: None is Integer.MIN_VALUE (not provided)
    }
    if version >= 6:
        fields["error_message"] = None
    return cls(**fields)


def describe_response(
    groups: list[tuple[str, str]], version: int, throttle: int = 0
) -> m.DescribeGroupsResponse:
    return m.DescribeGroupsResponse(
        throttle_time_ms=throttle, groups=[described(g, s, version) for g, s in groups]
    )


@pytest.mark.parametrize("version", [0, 3, 4, 5, 6])
def test_mixed_describe_groups_is_split_and_merged_in_request_order(version: int) -> None:
    groups = ["orders", "connect-a", "plain", "connect-b", "orders"]
    payload = describe_request(groups, version)
    split = cluster().split(payload)
    assert split is not None
    local, remote = decode_request(split.local, framed=False), decode_request(split.remote, framed=False)
    for part, ids in ((local, ["connect-a", "connect-b"]), (remote, ["orders", "plain", "orders"])):
        assert (part.api_key, part.api_version, part.correlation_id, part.client_id) == (
            15,
            version,
            77,
            "adminclient-1",
        )
        assert list(part.body.groups) == ids
        if version >= 3:
            assert part.body.include_authorized_operations is True

    mine = describe_response([("connect-a", "Stable"), ("connect-b", "Empty")], version, throttle=0)
    theirs = describe_response([("orders", "Stable"), ("plain", "Empty"), ("orders", "Stable")], version, 25)
    upstream = encode_response_frame(15, version, 77, theirs)[4:]
    merged = decode_response(15, version, split.merge(mine, upstream))
    assert merged.header.correlation_id == 77
    assert [(g.group_id, g.group_state) for g in merged.groups] == [
        ("orders", "Stable"),
        ("connect-a", "Stable"),
        ("plain", "Empty"),
        ("connect-b", "Empty"),
        ("orders", "Stable"),
    ]
    if version >= 1:
        assert merged.throttle_time_ms == 25


def test_describe_groups_of_one_coordinator_is_not_split() -> None:
    assert cluster().split(describe_request(["connect-a", "connect-b"], 5)) is None  # answered locally
    assert cluster().split(describe_request(["orders", "plain"], 5)) is None  # relayed whole
    produce_like = encode_request(m.MetadataRequest(topics=[]), 9, 1, "x")[4:]
    assert cluster().split(produce_like) is None


@pytest.mark.parametrize("version", [0, 3, 4, 5])
def test_list_groups_merges_the_bridge_groups_into_upstream(version: int) -> None:
    request = m.ListGroupsRequest(states_filter=[], types_filter=[])
    payload = encode_request(request, version, 5, "adminclient-1")[4:]
    split = cluster().split(payload)
    assert split is not None and split.local == payload == split.remote

    def listed(group: str, kind: str) -> m.ListGroupsResponse.ListedGroup:
        fields = {"group_id": group, "protocol_type": kind}
        if version >= 4:
            fields["group_state"] = "Stable"
        if version >= 5:
            fields["group_type"] = "Classic"
        return m.ListGroupsResponse.ListedGroup(**fields)

    theirs = m.ListGroupsResponse(
        throttle_time_ms=0,
        error_code=0,
        groups=[listed("orders", "consumer"), listed("connect-old", "connect")],
    )
    mine = m.ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=[listed("connect-a", "connect")])
    merged = decode_response(
        16, version, split.merge(mine, encode_response_frame(16, version, 5, theirs)[4:])
    )
    assert merged.header.correlation_id == 5
    # upstream's stale entry for a coordinated id is dropped: the bridge's view of it wins
    assert [(g.group_id, g.protocol_type) for g in merged.groups] == [
        ("orders", "consumer"),
        ("connect-a", "connect"),
    ]

    loading = m.ListGroupsResponse(throttle_time_ms=0, error_code=14, groups=[])
    merged = decode_response(
        16, version, split.merge(loading, encode_response_frame(16, version, 5, theirs)[4:])
    )
    assert merged.error_code == 14  # COORDINATOR_LOAD_IN_PROGRESS: the client retries


# ------------------------------------------------------------------------------------------ framing


class _Link:
    """What ``_UpstreamProtocol`` calls back: the frames it cut, or the failure."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.failed: BaseException | None = None

    def _deliver(self, frame: bytearray) -> None:
        self.frames.append(bytes(frame))

    def _fail(self, exc: BaseException) -> None:
        self.failed = exc


def _frame(correlation: int, body_size: int) -> bytes:
    body = struct.pack(">i", correlation) + bytes((correlation + i) % 251 for i in range(body_size))
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("chunk", [1, 3, 4, 5, 1000, 65536, 70000, 1 << 20])
def test_upstream_frames_are_cut_whatever_the_read_sizes(chunk: int) -> None:
    """Small frames come out of the scratch buffer, large ones are read in place; a read may end
    anywhere (inside a size prefix, a frame, or span several frames)."""
    frames = [_frame(1, 0), _frame(2, 10), _frame(3, 200_000), _frame(4, 3), _frame(5, 65_536), _frame(6, 1)]
    stream = b"".join(frames)
    link = _Link()
    protocol = _UpstreamProtocol(link)  # type: ignore[arg-type]
    offset = 0
    while offset < len(stream):
        buffer = protocol.get_buffer(-1)
        n = min(len(buffer), chunk, len(stream) - offset)
        buffer[:n] = stream[offset : offset + n]
        protocol.buffer_updated(n)
        offset += n
    assert link.failed is None
    assert link.frames == frames


def test_a_frame_too_short_for_a_correlation_id_fails_the_link() -> None:
    link = _Link()
    protocol = _UpstreamProtocol(link)  # type: ignore[arg-type]
    buffer = protocol.get_buffer(-1)
    buffer[:6] = struct.pack(">i", 2) + b"\x00\x00"
    protocol.buffer_updated(6)
    assert isinstance(link.failed, ConnectionError)

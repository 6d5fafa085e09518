"""The one-row-per-API table (``bridge.api_table``) gives the server, handlers and proxy the same
sets and caps they used to keep as hand-written lists (issue 13.3): pure, no sockets."""

from __future__ import annotations

from kafka.protocol.admin.cluster import DescribeClusterResponse
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse

from connect_bridge.bridge.coordination import api_table as t
from connect_bridge.codecs.messages import API_SPECS, ApiKey

K = ApiKey


def test_every_api_the_codec_decodes_has_a_handler_and_nothing_else_does() -> None:
    handled = {row.key for row in t.API_TABLE if row.handler is not None}
    assert handled == set(API_SPECS)
    assert set(t.GROUP_CALLS) | set(t.LOCAL_HANDLERS) == set(API_SPECS)
    assert not set(t.GROUP_CALLS) & set(t.LOCAL_HANDLERS)


def test_group_calls_and_parking() -> None:
    connect = {
        K.CONNECT_GROUP_HEARTBEAT,
        K.CONNECT_GROUP_PREPARE_ASSIGNMENT,
        K.CONNECT_GROUP_INSTALL_ASSIGNMENT,
    }
    classic = {K.JOIN_GROUP, K.SYNC_GROUP, K.HEARTBEAT, K.LEAVE_GROUP}
    assert set(t.GROUP_CALLS) == connect | classic
    assert {key for key, call in t.GROUP_CALLS.items() if call.parks} == {K.JOIN_GROUP, K.SYNC_GROUP}


def test_proxy_routes() -> None:
    local = {K.API_VERSIONS, K.SASL_HANDSHAKE, K.SASL_AUTHENTICATE, *(k for k in K if k >= 1000)}
    assert {k for k, r in t.PROXY_ROUTES.items() if r is t.Route.LOCAL} == local
    assert t.BEFORE_AUTH == {K.API_VERSIONS, K.SASL_HANDSHAKE, K.SASL_AUTHENTICATE}
    assert t.DECODED_FOR_ROUTING == {
        K.JOIN_GROUP,
        K.SYNC_GROUP,
        K.HEARTBEAT,
        K.LEAVE_GROUP,
        K.DESCRIBE_GROUPS,
    }
    assert t.SPLIT == {K.DESCRIBE_GROUPS, K.LIST_GROUPS}
    assert t.REWRITTEN == {K.METADATA, K.FIND_COORDINATOR, K.DESCRIBE_CLUSTER}
    assert t.CREATES_GROUP == {K.JOIN_GROUP}
    assert t.ACKS_ONLY == {K.PRODUCE}


def test_frame_bounds() -> None:
    cluster = {K.API_VERSIONS, K.FIND_COORDINATOR, K.LIST_GROUPS, K.DESCRIBE_GROUPS, K.CONNECT_GROUP_DESCRIBE}
    cluster |= {K.SASL_HANDSHAKE}  # SaslAuthenticate may carry a large OAuth token
    assert t.CLUSTER_FRAMES_EMBEDDED == cluster | {K.METADATA}
    assert t.CLUSTER_FRAMES_PROXY == cluster  # a real cluster's Metadata may name every topic
    group = {K.JOIN_GROUP, K.SYNC_GROUP, K.HEARTBEAT, K.LEAVE_GROUP}
    assert t.GROUP_FRAMES == group | {K.API_VERSIONS, *(k for k in K if k >= 1000)}


def test_relay_caps() -> None:
    assert dict(t.RELAY_CAPS) == {
        K.PRODUCE: 9,
        K.FETCH: 15,
        K.METADATA: MetadataResponse.max_version,
        K.FIND_COORDINATOR: FindCoordinatorResponse.max_version,
        K.DESCRIBE_CLUSTER: DescribeClusterResponse.max_version,
    }


def test_api_names_are_the_specs() -> None:
    assert t.API_NAMES[K.CONNECT_GROUP_HEARTBEAT] == "ConnectGroupHeartbeat"
    assert t.API_NAMES[K.JOIN_GROUP] == "JoinGroup"
    assert K.PRODUCE not in t.API_NAMES

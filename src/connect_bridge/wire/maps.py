"""Wire messages <-> engine values: the one place the two meet, in both directions.

The server decodes requests (``*_from_wire``) and encodes responses (``*_response_to_wire``); the
reference worker clients do the reverse (``*_to_wire`` and ``*_response_from_wire``). Engine values
(``state.api``, ``state.classic.api``) are version-independent; every function that touches a
classic API takes (or reads from the decoded message) the wire version and applies what that version
can carry, as Kafka does. The conversions are declarative maps compiled from the JSON specs
(``codecs.spec_map``: which fields a version has, which are ignorable, where a string may be null),
one module per API family:

* ``wire.connect``: ConnectGroupHeartbeat, PrepareAssignment, InstallAssignment, Describe;
* ``wire.classic``: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, ListGroups.

A field the version does not have is never set on the wire object. Kafka's rules differ per field:
an *ignorable* one (JoinGroup ``Reason``, SyncGroup ``ProtocolType``/``ProtocolName``, LeaveGroup
``Reason``, every response field...) is dropped, while a request that needs a non-ignorable one
(static membership below JoinGroup v5 / SyncGroup v3 / Heartbeat v3 / LeaveGroup v3, a batch leave
below LeaveGroup v3, ListGroups filters below v4/v5) cannot be sent at that version: the
``*_to_wire`` request builders raise :class:`CodecError`, like the Java client's
``UnsupportedVersionException``. A string nullable only from some version is "" below it (Kafka's
``JoinGroupResponse`` does so for ``ProtocolName`` before v7).

Decoding a request never raises except for what the coordinator must answer with INVALID_REQUEST
(negative task ids, null connector or member names, duplicate members, and in the Connect group APIs
any null their spec forbids, see ``requests.NULLS_ANSWERED``): :class:`CodecError`.
No I/O here.
"""

from __future__ import annotations

from connect_bridge.wire.classic import (
    CLASSIC_STATE_OF_CONNECT,
    CONNECT_PROTOCOL_TYPE,
    ListedGroup,
    classic_heartbeat_from_wire,
    classic_heartbeat_response_from_wire,
    classic_heartbeat_response_to_wire,
    classic_heartbeat_to_wire,
    describe_groups_response_from_wire,
    describe_groups_response_to_wire,
    join_from_wire,
    join_response_from_wire,
    join_response_to_wire,
    join_to_wire,
    leave_from_wire,
    leave_response_from_wire,
    leave_response_to_wire,
    leave_to_wire,
    list_groups_response_from_wire,
    list_groups_response_to_wire,
    list_groups_to_wire,
    sync_from_wire,
    sync_response_from_wire,
    sync_response_to_wire,
    sync_to_wire,
)
from connect_bridge.wire.connect import (
    NO_ASSIGNOR_METADATA_VERSION,
    connect_state_name,
    describe_from_wire,
    describe_response_from_wire,
    describe_response_to_wire,
    describe_to_wire,
    heartbeat_from_wire,
    heartbeat_response_from_wire,
    heartbeat_response_to_wire,
    heartbeat_to_wire,
    install_from_wire,
    install_response_from_wire,
    install_response_to_wire,
    install_to_wire,
    prepare_from_wire,
    prepare_response_from_wire,
    prepare_response_to_wire,
    prepare_to_wire,
)

__all__ = [
    "CLASSIC_STATE_OF_CONNECT",
    "CONNECT_PROTOCOL_TYPE",
    "NO_ASSIGNOR_METADATA_VERSION",
    "ListedGroup",
    "classic_heartbeat_from_wire",
    "classic_heartbeat_response_from_wire",
    "classic_heartbeat_response_to_wire",
    "classic_heartbeat_to_wire",
    "connect_state_name",
    "describe_from_wire",
    "describe_groups_response_from_wire",
    "describe_groups_response_to_wire",
    "describe_response_from_wire",
    "describe_response_to_wire",
    "describe_to_wire",
    "heartbeat_from_wire",
    "heartbeat_response_from_wire",
    "heartbeat_response_to_wire",
    "heartbeat_to_wire",
    "install_from_wire",
    "install_response_from_wire",
    "install_response_to_wire",
    "install_to_wire",
    "join_from_wire",
    "join_response_from_wire",
    "join_response_to_wire",
    "join_to_wire",
    "leave_from_wire",
    "leave_response_from_wire",
    "leave_response_to_wire",
    "leave_to_wire",
    "list_groups_response_from_wire",
    "list_groups_response_to_wire",
    "list_groups_to_wire",
    "prepare_from_wire",
    "prepare_response_from_wire",
    "prepare_response_to_wire",
    "prepare_to_wire",
    "sync_from_wire",
    "sync_response_from_wire",
    "sync_response_to_wire",
    "sync_to_wire",
]

"""The Kafka error codes the bridge puts on the wire.

One table, so the coordinator, the server and the docs agree on the numbers. Every existing code is
Apache Kafka's own (checked against kafka-python's ``kafka.errors`` by the tests); the draft's two new
errors get codes in a block Kafka will not reach for years (its highest code is in the low 130s),
mirroring the 1000+ block of the new API keys. ``docs/protocol.md`` says where each one is returned.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Kafka protocol error codes (int16), named exactly as Apache Kafka's ``Errors`` enum."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    SASL_AUTHENTICATION_FAILED = 58
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    UNSTABLE_OFFSET_COMMIT = 88
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNKNOWN_TOPIC_ID = 100
    UNSUPPORTED_ASSIGNOR = 112
    # The Connect draft's new errors (not Apache Kafka codes).
    COMPUTE_ASSIGNMENT = 1000
    INVALID_ASSIGNMENT = 1001


NEW_ERROR_CODES: frozenset[ErrorCode] = frozenset(
    {ErrorCode.COMPUTE_ASSIGNMENT, ErrorCode.INVALID_ASSIGNMENT}
)
"""Codes this project defines; every other member of :class:`ErrorCode` is Apache Kafka's."""

DEFAULT_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "The server experienced an unexpected error when processing the request.",
    ErrorCode.NONE: "",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.ILLEGAL_GENERATION: "Specified group generation id is not valid.",
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: (
        "The group member's supported protocols are incompatible with those of existing members "
        "or first group member tried to join with empty protocol type or empty protocol list."
    ),
    ErrorCode.INVALID_GROUP_ID: "The group id is invalid.",
    ErrorCode.UNKNOWN_MEMBER_ID: "The coordinator is not aware of this member.",
    ErrorCode.INVALID_SESSION_TIMEOUT: (
        "The session timeout is not within the range allowed by the broker "
        "(as configured by group.min.session.timeout.ms and group.max.session.timeout.ms)."
    ),
    ErrorCode.REBALANCE_IN_PROGRESS: "The group is rebalancing, so a rejoin is needed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.UNSUPPORTED_SASL_MECHANISM: "The broker does not support the requested SASL mechanism.",
    ErrorCode.ILLEGAL_SASL_STATE: "Request is not valid given the current SASL state.",
    ErrorCode.UNSUPPORTED_VERSION: "The version of API is not supported.",
    ErrorCode.SASL_AUTHENTICATION_FAILED: "SASL Authentication failed.",
    ErrorCode.INVALID_REQUEST: (
        "This most likely occurs because of a request being malformed by the client library "
        "or the message was sent to an incompatible broker."
    ),
    ErrorCode.GROUP_ID_NOT_FOUND: "The group id does not exist.",
    ErrorCode.MEMBER_ID_REQUIRED: (
        "The group member needs to have a valid member id before actually entering a consumer group."
    ),
    ErrorCode.GROUP_MAX_SIZE_REACHED: "The consumer group has reached its max size.",
    ErrorCode.FENCED_INSTANCE_ID: (
        "The broker rejected this static consumer since another consumer with the same "
        "group.instance.id has registered with a different member.id."
    ),
    ErrorCode.UNSTABLE_OFFSET_COMMIT: "There are unstable offsets that need to be cleared.",
    ErrorCode.FENCED_MEMBER_EPOCH: (
        "The member epoch is fenced by the group coordinator. The member must abandon all its "
        "partitions and rejoin."
    ),
    ErrorCode.UNRELEASED_INSTANCE_ID: (
        "The instance ID is still used by another member in the consumer group. That member must leave first."
    ),
    ErrorCode.UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
    ErrorCode.UNSUPPORTED_ASSIGNOR: (
        "The assignor or its version range is not supported by the consumer group."
    ),
    ErrorCode.COMPUTE_ASSIGNMENT: (
        "The member has been selected by the coordinator to compute the new target assignment of the group."
    ),
    ErrorCode.INVALID_ASSIGNMENT: (
        "The assignment does not assign every connector and task exactly once to existing members."
    ),
}
"""Apache Kafka's default message for each code (ours for the two new ones), for ErrorMessage fields."""


def error_name(code: int) -> str:
    """A readable name for any int16 code, including ones the bridge never produces (for logs)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"

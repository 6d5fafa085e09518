"""Apache Kafka's KIP-848 consumer-group APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

The bridge never decodes these (it relays them upstream like every API it does not coordinate), and
kafka-python 3.0 ships no spec for them. They exist so tests can ask a real Kafka 4.3.1 coordinator
what it answers where the ``connect`` protocol borrows KIP-848's rules (member epochs, fencing,
static members: ``tests/test_consumer_heartbeat_differential.py``). Loaded from Kafka's own JSON specs
in ``codecs/specs/consumer_group`` by the same engine as every other message.
"""

from __future__ import annotations

import types
from typing import Any

from kafka.protocol.api_message import ApiMessage

from connect_bridge.codecs.specs import consumer_group as kafka_specs

__all__ = [
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "decode_consumer_group_response",
]


def _message(name: str, doc: str) -> type[ApiMessage]:
    """A message class loaded from Kafka's spec ``name``.json (the engine reads the spec name from
    the class name, so the class is built here rather than written out four times)."""
    body = {"__doc__": doc, "__module__": __name__, "__qualname__": name}
    cls: type[ApiMessage] = types.new_class(
        name, (ApiMessage,), {"load_json": kafka_specs}, lambda ns: ns.update(body)
    )
    return cls


ConsumerGroupHeartbeatRequest = _message(
    "ConsumerGroupHeartbeatRequest",
    "KIP-848's heartbeat: join (epoch 0), heartbeat, leave (-1) or leave temporarily (-2).",
)
ConsumerGroupHeartbeatResponse = _message(
    "ConsumerGroupHeartbeatResponse",
    "Error, member id and epoch, heartbeat interval, and the assignment when it changed.",
)
ConsumerGroupDescribeRequest = _message(
    "ConsumerGroupDescribeRequest",
    "Describes consumer groups: epochs and every member's current and target assignment.",
)
ConsumerGroupDescribeResponse = _message(
    "ConsumerGroupDescribeResponse", "Per group: error, state, epochs, assignor and members."
)

_RESPONSES: dict[int, type[ApiMessage]] = {
    ConsumerGroupHeartbeatResponse.API_KEY: ConsumerGroupHeartbeatResponse,
    ConsumerGroupDescribeResponse.API_KEY: ConsumerGroupDescribeResponse,
}


def decode_consumer_group_response(api_key: int, version: int, payload: bytes) -> Any:
    """A response payload (the frame after its 4-byte size) to a request of ``api_key``/``version``;
    ``.header.correlation_id`` is set. Both APIs are flexible from version 0 (response header v1)."""
    return _RESPONSES[api_key].decode(payload, version=version, header=True)

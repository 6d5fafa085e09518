"""Which partition of the state topic holds a group: the same answer on every bridge.

Several bridges share the groups the way Kafka's brokers share consumer groups: a group's records
live in one partition of the state topic, and whoever owns that partition coordinates the group.
The mapping is Kafka's own for ``__consumer_offsets`` (``Utils.abs(groupId.hashCode()) %
partitions``), so an operator who knows Kafka can predict it, and it depends on nothing but the
group id and the partition count.
"""

from __future__ import annotations

__all__ = ["java_string_hash", "partition_for"]

_INT_MASK = 0xFFFFFFFF
_INT_SIGN = 0x80000000


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as a
    signed 32-bit int (characters outside the BMP count as their two surrogates, as in Java)."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & _INT_MASK
    return h - (1 << 32) if h & _INT_SIGN else h


def partition_for(group_id: str, partitions: int) -> int:
    """The state-topic partition of ``group_id`` among ``partitions`` (Kafka's ``Utils.abs``: the
    absolute value, with ``Integer.MIN_VALUE`` mapped to 0, then modulo)."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions

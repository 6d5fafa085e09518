"""The state-topic partition of a group: Kafka's ``Utils.abs(groupId.hashCode()) % partitions``.

The hash values were printed by Java 17's ``String.hashCode`` (jshell) on this machine.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connect_bridge.state.partitioning import java_string_hash, partition_for

JAVA_HASHES = [
    ("", 0),
    ("hello", 99162322),
    ("connect-cluster", 1440343063),
    ("\U0001f600x", 54959989),  # outside the BMP: two UTF-16 surrogates, as Java counts them
    ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE: Utils.abs maps it to 0
]


@pytest.mark.parametrize(("text", "expected"), JAVA_HASHES)
def test_java_string_hash_matches_java(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_min_value_hash_goes_to_partition_zero() -> None:
    assert partition_for("polygenelubricants", 7) == 0


def test_kafka_consumer_offsets_placement() -> None:
    # 1440343063 % 50: where Kafka keeps group "connect-cluster" in __consumer_offsets.
    assert partition_for("connect-cluster", 50) == 13


@given(st.text(max_size=40), st.integers(min_value=1, max_value=1000))
def test_partition_in_range_and_stable(group_id: str, partitions: int) -> None:
    p = partition_for(group_id, partitions)
    assert 0 <= p < partitions
    assert p == partition_for(group_id, partitions)
    assert partition_for(group_id, 1) == 0


def test_no_partitions_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        partition_for("g", 0)

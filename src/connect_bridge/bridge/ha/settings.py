"""``ha:``: several bridges share the groups through the upstream cluster (docs/high-availability.md).

Off by default: one bridge with its state in ``state_dir`` or a single-partition ``state_topic``.
On, every bridge of the fleet has the same ``ha`` section and ``state_topic``; they split the
topic's partitions among themselves through a Kafka consumer group, and each coordinates the
groups whose records live in the partitions it holds.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class HaSettings(BaseModel):
    """``ha:`` (docs/high-availability.md "Configuration")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    partitions: int = Field(6, ge=1, le=1000)
    """Partitions of ``state_topic`` (fixed once the topic exists: a group's partition is
    ``abs(hashCode(group id)) % partitions``, so changing it would move groups). More partitions
    spread the groups over more bridges; each held partition costs one transactional producer."""
    group: str = Field("connect-bridge", min_length=1)
    """The Kafka consumer group the bridges join to split the partitions (one per fleet)."""
    transactional_id_prefix: str = Field("connect-bridge-state", min_length=1)
    """Partition P is written with ``transactional.id`` PREFIX-P: the bridge that takes P over fences
    every earlier writer of it. One prefix per fleet."""
    node_id: int | None = Field(None, ge=0)
    """How this bridge is named in ``describe``, /metrics and the logs (default: its listen port)."""
    session_timeout_ms: int = Field(10000, gt=0)
    """A bridge that stops heartbeating loses its partitions after this long; it also stops
    answering for them by itself after this long without a heartbeat answer (its lease)."""
    heartbeat_interval_ms: int = Field(1000, gt=0)
    refresh_owners_ms: int = Field(1000, gt=0)
    """How often every bridge re-reads who owns which partition (for FindCoordinator)."""

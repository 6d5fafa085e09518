"""Who owns which state-topic partition, as every bridge can read it from the bridges' group.

FindCoordinator must name the bridge that owns a group even when asked on another bridge. Kafka
already knows the answer: DescribeGroups of the bridges' consumer group lists each member with its
``client_id`` and, while the group is Stable, its decoded ``ConsumerProtocolAssignment``. A bridge
puts its advertised address in its ``client_id`` (``BridgeAddress.encode``), so the description
alone maps partition -> bridge address, with no extra topic or protocol between bridges.

While the group rebalances the broker describes members without assignments; the previous stable
view is kept for the members still listed (a member that left or timed out is gone from the list,
so its partitions drop out), because a slightly stale owner only costs the client a
NOT_COORDINATOR and another lookup. Partitions being moved in a cooperative second round are in
nobody's assignment, hence absent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CLIENT_ID_PREFIX", "BridgeAddress", "OwnersRefresher", "merge_own", "owners_from_description"]

log = logging.getLogger(__name__)

CLIENT_ID_PREFIX = "connect-bridge-ha"
_SEPARATOR = "|"
STABLE = "Stable"
OWNERS_CLIENT_ID = "connect-bridge-ha-owners"
WARN_AFTER_FAILURES = 3
"""Consecutive failed descriptions before a warning: the first ones are usual while the cluster
creates ``__consumer_offsets`` or the group's coordinator moves."""


@dataclass(frozen=True, slots=True)
class BridgeAddress:
    """One bridge: its name among the bridges (``ha.node_id``, distinct per bridge) and where
    clients reach it (its advertised host and proxy base port: upstream broker N is relayed on
    port + N, which is what FindCoordinator answers name)."""

    node_id: int
    host: str
    port: int

    def encode(self) -> str:
        """The consumer ``client_id`` carrying this address: ``connect-bridge-ha|<node>|<host>|<port>``."""
        if _SEPARATOR in self.host or not self.host:
            raise ValueError(f"host {self.host!r} cannot be encoded in a client id")
        return _SEPARATOR.join((CLIENT_ID_PREFIX, str(self.node_id), self.host, str(self.port)))

    @classmethod
    def decode(cls, client_id: str) -> BridgeAddress:
        """The address in a bridge's ``client_id``; ValueError for anything else (another client
        that joined the group by mistake is ignored by callers, not trusted)."""
        parts = client_id.split(_SEPARATOR)
        if len(parts) != 4 or parts[0] != CLIENT_ID_PREFIX or not parts[2]:
            raise ValueError(f"not a connect-bridge HA client id: {client_id!r}")
        try:
            node_id, port = int(parts[1]), int(parts[3])
        except ValueError:
            raise ValueError(f"not a connect-bridge HA client id: {client_id!r}") from None
        if not 0 < port < 65536:
            raise ValueError(f"port out of range in client id {client_id!r}")
        return cls(node_id, parts[2], port)


def _member_partitions(member: Mapping[str, Any], topic: str) -> list[int]:
    assignment = member.get("member_assignment") or {}
    if not isinstance(assignment, Mapping):  # undecodable bytes: kafka-python logged it
        return []
    return [
        p
        for assigned in assignment.get("assigned_partitions") or ()
        if assigned.get("topic") == topic
        for p in assigned.get("partitions") or ()
    ]


def owners_from_description(
    description: Mapping[str, Any], topic: str, previous: Mapping[int, BridgeAddress]
) -> dict[int, BridgeAddress]:
    """partition -> owner from one group of kafka-python's ``describe_groups`` answer; outside
    Stable, ``previous`` restricted to the members still listed."""
    members: dict[BridgeAddress, Mapping[str, Any]] = {}
    for member in description.get("members") or ():
        try:
            members[BridgeAddress.decode(member.get("client_id") or "")] = member
        except ValueError:
            log.debug("ignoring member %s of the bridges' group: not a bridge", member.get("client_id"))
    if description.get("group_state") != STABLE:
        return {p: owner for p, owner in previous.items() if owner in members}
    return {p: address for address, member in members.items() for p in _member_partitions(member, topic)}


class OwnersRefresher:
    """A daemon thread describing the bridges' group every ``interval_ms`` (sooner on ``poke()``)
    and keeping the latest partition -> owner map; ``snapshot()`` is safe from any thread."""

    def __init__(
        self,
        bootstrap: str | list[str],
        topic: str,
        group_id: str,
        *,
        interval_ms: int,
        client_options: dict[str, Any],
    ) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._group_id = group_id
        self._interval_s = interval_ms / 1000
        self._client_options = client_options
        self._owners: dict[int, BridgeAddress] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ha-owners-{group_id}", daemon=True)
        self._refreshes = 0

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Describe again now (called right after this bridge's own rebalance)."""
        self._wake.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def snapshot(self) -> dict[int, BridgeAddress]:
        with self._lock:
            return dict(self._owners)

    @property
    def refreshes(self) -> int:
        """Successful descriptions so far (a reader can wait for a fresh one)."""
        with self._lock:
            return self._refreshes

    def _admin(self) -> Any:
        from kafka import KafkaAdminClient

        return KafkaAdminClient(
            bootstrap_servers=self._bootstrap, client_id=OWNERS_CLIENT_ID, **self._client_options
        )

    def _run(self) -> None:
        admin = None
        failures = 0
        while not self._stopping.is_set():
            try:
                if admin is None:
                    admin = self._admin()
                description = admin.describe_groups([self._group_id]).get(self._group_id) or {}
                with self._lock:
                    self._owners = owners_from_description(description, self._topic, self._owners)
                    self._refreshes += 1
                failures = 0
            except Exception as exc:
                failures += 1
                (log.warning if failures == WARN_AFTER_FAILURES else log.debug)(
                    "describing the bridges' group %s failed (keeping the last owners): %s",
                    self._group_id,
                    exc,
                )
                if admin is not None and failures >= WARN_AFTER_FAILURES:
                    _close_quietly(admin)
                    admin = None
            self._wake.wait(self._interval_s)
            self._wake.clear()
        if admin is not None:
            _close_quietly(admin)


def _close_quietly(client: Any) -> None:
    try:
        client.close()
    except Exception as exc:
        log.debug("closing %s failed: %s", type(client).__name__, exc)


def merge_own(
    owners: Mapping[int, BridgeAddress], me: BridgeAddress, assigned: Iterable[int]
) -> dict[int, BridgeAddress]:
    """The described owners corrected by what this bridge knows first-hand: a partition it holds is
    its own; one the description still gives it but it has given up is in flight."""
    held = set(assigned)
    merged = {p: owner for p, owner in owners.items() if owner != me or p in held}
    merged.update(dict.fromkeys(held, me))
    return merged

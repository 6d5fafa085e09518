"""A kafka-python 3.0.12 gap closed for the bridges' group: a leader's re-join abandoned half-way.

What happens without this (the 4/0/0 symptom seen in ``tests/test_ha.py``; the mechanism
reproduced in ``tests/test_ha_membership.py``): the group leader re-joins because its metadata
changed since it assigned (``ConsumerCoordinator.need_rejoin``: ``_assignment_snapshot !=
_metadata_snapshot``, the usual case right after the state topic was created, when the first
assignment found no partitions) while ``rejoin_needed`` is False. The JoinGroup waits for the other
members, so it outlasts one ``poll`` (``POLL_TIMEOUT_MS``); kafka-python keeps the join task in
flight for the next poll to re-await, but only while ``need_rejoin()`` is True. As soon as the
JoinGroup answer comes, the leader runs the assignor, which sets ``_assignment_snapshot =
_metadata_snapshot``: ``need_rejoin()`` is now False. If the awaiting poll gives up before the
SyncGroup answer (a slow assignment, a loaded host), the next polls skip ``join_group_async``
altogether and nobody awaits the task: ``_on_join_complete`` never runs (no partitions taken, no
listener called), the member stays REBALANCING with heartbeats disabled, and the broker expires it
after the session timeout. The other bridges then get everything (4/0/0), and the stuck bridge
never re-joins: its poll loop spins on ``need_rejoin() == False`` for good.

The fix keeps ``need_rejoin()`` True while the member is REBALANCING (a JoinGroup/SyncGroup round
in flight), so every poll re-awaits the in-flight join task until kafka-python itself marks the
member STABLE (or UNJOINED on an error). A task that finished while no poll awaited it is not used
by kafka-python (it sends a new JoinGroup); that costs one more rebalance and converges. It wraps
the one method on one coordinator instance, as ``ha.lease.install_lease_hooks`` does, instead of
patching kafka-python globally.
"""

from __future__ import annotations

from typing import Any

from kafka.structs import MemberState

__all__ = ["install_join_completion_hook"]


def install_join_completion_hook(coordinator: Any) -> None:
    """``need_rejoin()`` of this ``ConsumerCoordinator`` is also True while a join is in flight."""
    need_rejoin = coordinator.need_rejoin

    def need_rejoin_until_joined() -> bool:
        return coordinator.state is MemberState.REBALANCING or need_rejoin()

    coordinator.need_rejoin = need_rejoin_until_joined
